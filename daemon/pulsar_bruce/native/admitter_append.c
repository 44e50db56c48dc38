/* A message's way into its batch, for the compiled admitter (admitter.c): the producer
 * (Topic.choose_any / choose_keyed, route/router.py), its key field and the append
 * (Appender.append, route/appender.py), with the limits they read. */
#include "admitter.h"

int pb_get_ll(PyObject *obj, PyObject *name, long long *out) {
    PyObject *value = PyObject_GetAttr(obj, name);
    if (!value) return -1;
    *out = PyLong_AsLongLong(value);
    Py_DECREF(value);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* A limit (Python int, unbounded: the configuration accepts any size): beyond the
 * range of long long it saturates, which compares the same against sizes and sums
 * that stay far below it. */
int pb_get_limit(PyObject *obj, PyObject *name, long long *out) {
    PyObject *value = PyObject_GetAttr(obj, name);
    if (!value) return -1;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    Py_DECREF(value);
    if (overflow) *out = overflow > 0 ? LLONG_MAX : LLONG_MIN;
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* The producer's max_batch_bytes, and its policy's max_messages and key_based. */
int pb_load_producer_limits(Admitter *self, PyObject *producer) {
    if (producer == self->limits_producer) return 0;
    self->limits_producer = NULL;
    if (pb_get_limit(producer, S_max_batch_bytes, &self->max_batch_bytes) < 0) return -1;
    PyObject *policy = PyObject_GetAttr(producer, S_policy);
    if (!policy) return -1;
    PyObject *key_based = NULL;
    int failed = pb_get_limit(policy, S_max_messages, &self->max_messages) < 0 ||
                 !(key_based = PyObject_GetAttr(policy, S_key_based));
    Py_DECREF(policy);
    int truth = failed ? -1 : PyObject_IsTrue(key_based);
    Py_XDECREF(key_based);
    if (truth < 0) return -1;
    self->key_based = truth;
    self->limits_producer = producer;
    return 0;
}

static int is_true(PyObject *producer, PyObject *name) {
    PyObject *value = PyObject_GetAttr(producer, name);
    if (!value) return -1;
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

static int is_ready(PyObject *producer) { return is_true(producer, S_ready); }

/* The open batch of ``producer`` (new reference); it must be an Entries. */
Entries *pb_batch_of(PyObject *producer) {
    PyObject *batch = PyObject_GetAttr(producer, S_batch);
    if (batch && !PyObject_TypeCheck(batch, &pb_EntriesType)) {
        Py_DECREF(batch);
        PyErr_SetString(PyExc_TypeError, "a producer's batch is not a compiled BatchBuilder");
        return NULL;
    }
    return (Entries *)batch;
}

static inline long long floor_mod(long long a, long long n) {
    long long r = a % n;
    return r < 0 ? r + n : r;
}

/* Topic.choose_any / choose_keyed: the producer for this message (new reference). */
PyObject *pb_choose(PyObject *topic, PyObject *producers, long long partition_key) {
    Py_ssize_t count = PyList_GET_SIZE(producers);
    if (partition_key >= 0) {
        long long first = floor_mod(partition_key, count);
        PyObject *preferred = PyList_GET_ITEM(producers, first);
        int available = is_true(preferred, S_available);
        if (available < 0) return NULL;
        if (available) { Py_INCREF(preferred); return preferred; }
        for (Py_ssize_t step = 1; step < count; step++) {
            PyObject *candidate = PyList_GET_ITEM(producers, (first + step) % count);
            int ready = is_ready(candidate);
            if (ready < 0) return NULL;
            if (ready) { Py_INCREF(candidate); return candidate; }
        }
        Py_INCREF(preferred);
        return preferred;
    }
    long long index;
    if (pb_get_ll(topic, S_round_robin, &index) < 0) return NULL;
    if (index >= 0) {
        PyObject *current = PyList_GetItem(producers, (Py_ssize_t)index);
        if (!current) return NULL;
        Entries *batch = pb_batch_of(current);
        if (!batch) return NULL;
        long long in_batch = batch->count;
        Py_DECREF(batch);
        int ready = in_batch ? is_ready(current) : 0;
        if (ready < 0) return NULL;
        if (ready) { Py_INCREF(current); return current; }
    }
    long long chosen = -1;
    for (Py_ssize_t step = 1; step <= count && chosen < 0; step++) {
        long long candidate = (index + step) % count;
        int ready = is_ready(PyList_GET_ITEM(producers, candidate));
        if (ready < 0) return NULL;
        if (ready) chosen = candidate;
    }
    if (chosen < 0) chosen = (index + 1) % count;
    PyObject *number = PyLong_FromLongLong(chosen);
    if (!number || PyObject_SetAttr(topic, S_round_robin, number) < 0) {
        Py_XDECREF(number);
        return NULL;
    }
    Py_DECREF(number);
    PyObject *producer = PyList_GET_ITEM(producers, chosen);
    Py_INCREF(producer);
    return producer;
}

static int seal_and_report(Admitter *self, PyObject *producer) {
    if (pb_settle(self) < 0) return -1;
    PyObject *sealed = PyObject_CallMethodNoArgs(producer, S_seal);
    if (!sealed) return -1;
    Py_DECREF(sealed);
    PyObject *done = PyObject_CallMethodOneArg(self->events, S_batch_sealed, producer);
    Py_XDECREF(done);
    return done ? 0 : -1;
}

/* add_tag's common case (model/confirmation.py): the message belongs to the batch's last
 * tag run, whose count grows.  Clears *pending when done here. */
static int add_to_last_run(PyObject *tags, PyObject *tag, int *pending) {
    if (!PyList_CheckExact(tags) || PyList_GET_SIZE(tags) == 0) return 0;
    PyObject *last = PyList_GET_ITEM(tags, PyList_GET_SIZE(tags) - 1);
    PyObject *last_tag = PyObject_GetAttr(last, S_tag);
    if (!last_tag) return -1;
    int same = last_tag == tag;
    Py_DECREF(last_tag);
    if (!same) return 0;
    long long count;
    if (pb_get_ll(last, S_count, &count) < 0) return -1;
    PyObject *more = PyLong_FromLongLong(count + 1);
    int failed = !more || PyObject_SetAttr(last, S_count, more) < 0;
    Py_XDECREF(more);
    if (failed) return -1;
    *pending = 0;
    return 0;
}

/* The message into ``into`` (the open batch, or its key's) and its tag runs. */
static int add_tagged(Admitter *self, Entries *into, PyObject *key_field, long long timestamp,
                      const char *value, Py_ssize_t value_size, long long charge, PyObject *tag) {
    if (pb_entries_add(into, PyBytes_AS_STRING(key_field), PyBytes_GET_SIZE(key_field), timestamp,
                    value, value_size, charge) < 0)
        return -1;
    PyObject *tags = PyObject_GetAttr((PyObject *)into, S_tags);
    if (!tags) return -1;
    int tagged = tag != Py_None || tags != Py_None;
    if (tagged && add_to_last_run(tags, tag, &tagged) < 0) {
        Py_DECREF(tags);
        return -1;
    }
    Py_DECREF(tags);
    if (tagged) {  /* a new run, or the first tags of the batch: BatchBuilder.tag_last */
        if (pb_settle(self) < 0) return -1;
        PyObject *done = PyObject_CallMethodOneArg((PyObject *)into, S_tag_last, tag);
        if (!done) return -1;
        Py_DECREF(done);
    }
    return 0;
}

/* Appender.append for a batch that is an Entries; with key-based batching the message goes
 * into its key's batch (pb_key_batch's BatchBuilder() reads no ledger or limit: no settle). */
int pb_append(Admitter *self, PyObject *producer, Entries *batch, PyObject *key_field,
                  long long timestamp, const char *value, Py_ssize_t value_size,
                  long long charge, PyObject *tag) {
    if (pb_load_producer_limits(self, producer) < 0) return -1;
    if (batch->count && batch->charged + charge > self->max_batch_bytes &&
        seal_and_report(self, producer) < 0)
        return -1;
    if (pb_load_producer_limits(self, producer) < 0) return -1;
    int keyed = batch->keys != NULL || (!batch->count && self->key_based);
    Entries *into = keyed ? pb_key_batch(batch, key_field, charge) : batch;
    if (!into) return -1;
    int failed = add_tagged(self, into, key_field, timestamp, value, value_size, charge, tag);
    if (keyed) Py_DECREF(into);
    if (failed) return -1;
    if (batch->count == 1) {
        if (pb_settle(self) < 0) return -1;
        PyObject *done = PyObject_CallMethodOneArg(self->events, S_batch_opened, producer);
        if (!done) return -1;
        Py_DECREF(done);
    }
    if (pb_load_producer_limits(self, producer) < 0) return -1;
    if (batch->count >= self->max_messages || batch->charged >= self->max_batch_bytes)
        return seal_and_report(self, producer);
    return 0;
}

/* ``partition_key`` Protobuf field (plus the base64 flag, via Python, for keys that are
 * not UTF-8) after the record's property fields: a new reference. */
PyObject *pb_key_field_of(Admitter *self, const char *key, Py_ssize_t key_size,
                              PyObject *key_object, const char *fields, Py_ssize_t fields_size) {
    if (key_size == 0 && fields_size == 0) { Py_INCREF(EMPTY_BYTES); return EMPTY_BYTES; }
    int ascii = 1;
    for (Py_ssize_t i = 0; i < key_size && ascii; i++) ascii = (unsigned char)key[i] < 0x80;
    PyObject *encoded = NULL;
    Py_ssize_t encoded_size = key_size ? 1 + varint_size((uint64_t)key_size) + key_size : 0;
    if (!ascii) {  /* UTF-8 or base64: the Python encoder decides */
        PyObject *owned = key_object ? (Py_INCREF(key_object), key_object)
                                     : PyBytes_FromStringAndSize(key, key_size);
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

