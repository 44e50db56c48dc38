/* A message's way into its batch, for the compiled admitter (admitter.c): its key field
 * and the append (Appender.append, route/appender.py), with the partition's limits. */
#include "admitter.h"

/* Appender.seal: the partition's open batch is sealed and the edge told. */
static int seal(Admitter *self, PartitionState *partition) {
    if (pb_settle(self) < 0) return -1;
    PyObject *done = PyObject_CallOneArg(self->seal, partition->owner);
    Py_XDECREF(done);
    return done ? 0 : -1;
}

/* add_tag's common case (model/confirmation.py): the message belongs to the batch's last
 * tag run, whose count grows; 1 when done here, 0 when tag_last must do it. */
static int add_to_last_run(Entries *into, PyObject *tag) {
    PyObject *tags = into->tags;
    if (!tags || PyList_GET_SIZE(tags) == 0) return 0;
    PyObject *last = PyList_GET_ITEM(tags, PyList_GET_SIZE(tags) - 1);
    if (!Py_IS_TYPE(last, &pb_TagRunType)) return 0;
    TagRun *run = (TagRun *)last;
    if ((run->tag ? run->tag : Py_None) != tag) return 0;
    run->count++;
    return 1;
}

/* The message into ``into`` (the open batch, or its key's) and its tag runs. */
static int add_tagged(Admitter *self, Entries *into, PyObject *key_field, long long timestamp,
                      const char *value, Py_ssize_t value_size, long long charge) {
    if (pb_entries_add(into, PyBytes_AS_STRING(key_field), PyBytes_GET_SIZE(key_field), timestamp,
                       value, value_size, charge) < 0)
        return -1;
    PyObject *tag = self->tag;
    if ((tag == Py_None && !into->tags) || add_to_last_run(into, tag)) return 0;
    /* a new run, or the first tags of the batch: BatchBuilder.tag_last */
    if (pb_settle(self) < 0) return -1;
    PyObject *args[2] = {(PyObject *)into, tag};
    PyObject *done = PyObject_Vectorcall(self->tag_last, args, 2, NULL);
    Py_XDECREF(done);
    return done ? 0 : -1;
}

/* Appender.append; with key-based batching the message goes into its key's batch
 * (pb_key_batch's BatchBuilder() reads no ledger or limit: no settle).  The partition's
 * limits are read from its state each time: a call-out may have changed them. */
int pb_append(Admitter *self, PartitionState *partition, PyObject *key_field,
              long long timestamp, const char *value, Py_ssize_t value_size, long long charge) {
    Entries *batch = partition->batch;
    if (batch->count && batch->charged + charge > partition->max_batch_bytes &&
        seal(self, partition) < 0)
        return -1;
    int keyed = batch->keys != NULL || (!batch->count && partition->key_based);
    Entries *into = keyed ? pb_key_batch(batch, key_field, charge) : batch;
    if (!into) return -1;
    int failed = add_tagged(self, into, key_field, timestamp, value, value_size, charge);
    if (keyed) Py_DECREF(into);
    if (failed) return -1;
    if (batch->count == 1) {
        if (pb_settle(self) < 0) return -1;
        PyObject *done = PyObject_CallOneArg(self->opened, partition->owner);
        if (!done) return -1;
        Py_DECREF(done);
    }
    if (batch->count >= partition->max_messages || batch->charged >= partition->max_batch_bytes)
        return seal(self, partition);
    return 0;
}

/* ``partition_key`` Protobuf field (plus the base64 flag, via Python, for keys that are
 * not UTF-8) after the record's property fields: a new reference. */
PyObject *pb_key_field_of(Admitter *self, const char *key, Py_ssize_t key_size,
                          const char *fields, Py_ssize_t fields_size) {
    if (key_size == 0 && fields_size == 0) { Py_INCREF(EMPTY_BYTES); return EMPTY_BYTES; }
    int ascii = 1;
    for (Py_ssize_t i = 0; i < key_size && ascii; i++) ascii = (unsigned char)key[i] < 0x80;
    PyObject *encoded = NULL;
    Py_ssize_t encoded_size = key_size ? 1 + varint_size((uint64_t)key_size) + key_size : 0;
    if (!ascii) {  /* UTF-8 or base64: the Python encoder decides */
        PyObject *owned = PyBytes_FromStringAndSize(key, key_size);
        if (!owned) return NULL;
        encoded = pb_settle(self) < 0 ? NULL : PyObject_CallOneArg(self->encode_key_field, owned);
        Py_DECREF(owned);
        if (!encoded) return NULL;
        if (!PyBytes_Check(encoded)) {
            Py_DECREF(encoded);
            PyErr_SetString(PyExc_TypeError, "encode_key_field() must return bytes");
            return NULL;
        }
        encoded_size = PyBytes_GET_SIZE(encoded);
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, fields_size + encoded_size);
    if (!out) { Py_XDECREF(encoded); return NULL; }
    unsigned char *write = (unsigned char *)PyBytes_AS_STRING(out);
    if (fields_size) {  /* fields is NULL for Bruce's formats */
        memcpy(write, fields, fields_size);
        write += fields_size;
    }
    if (encoded) {
        memcpy(write, PyBytes_AS_STRING(encoded), encoded_size);
        Py_DECREF(encoded);
    } else if (key_size) {
        *write++ = 0x12;  /* partition_key, field 2 */
        write = put_varint(write, (uint64_t)key_size);
        memcpy(write, key, key_size);
    }
    return out;
}

