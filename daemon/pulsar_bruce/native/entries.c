/* A batch's entries, [u32 size][SingleMessageMetadata][value] each (see intake.h). */
#include "intake.h"

/* ------------------------------------------------------------------- Entries */


static int entries_reserve(Entries *self, Py_ssize_t more) {
    if (self->size + more <= self->capacity) return 0;
    Py_ssize_t capacity = self->capacity ? self->capacity : 4096;
    while (capacity < self->size + more) capacity *= 2;
    unsigned char *grown = PyMem_Realloc(self->data, capacity);
    if (!grown) { PyErr_NoMemory(); return -1; }
    self->data = grown;
    self->capacity = capacity;
    return 0;
}

static int entries_traverse(Entries *self, visitproc visit, void *arg) {
    Py_VISIT(self->keys);
    Py_VISIT(self->tags);
    return 0;
}

static int entries_clear(Entries *self) {
    Py_CLEAR(self->keys);
    Py_CLEAR(self->tags);
    return 0;
}

static void entries_dealloc(Entries *self) {
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->keys);
    Py_CLEAR(self->tags);
    PyMem_Free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The partition_key field (and base64 flag) of a key field, after the properties (field 1)
 * a Message record puts first (a new reference): batch/entries.py key_part. */
static PyObject *key_part(PyObject *key_field) {
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(key_field);
    Py_ssize_t size = PyBytes_GET_SIZE(key_field), offset = 0;
    while (offset < size && p[offset] == 0x0A) {
        uint64_t length = 0;
        int shift = 0;
        offset++;
        for (;;) {
            if (offset >= size || shift > 63) {
                PyErr_SetString(PyExc_ValueError, "malformed batch entries");
                return NULL;
            }
            unsigned char byte = p[offset++];
            length |= (uint64_t)(byte & 0x7F) << shift;
            shift += 7;
            if (byte < 0x80) break;
        }
        offset = length > (uint64_t)(size - offset) ? size : offset + (Py_ssize_t)length;
    }
    if (offset == 0) { Py_INCREF(key_field); return key_field; }
    return PyBytes_FromStringAndSize((const char *)p + offset, size - offset);
}

/* BatchBuilder.key_batch (batch/batch_builder.py): the open batch of key_field's key (a
 * new reference), made by calling root's type at the key's first message; root's totals
 * count one more message of ``charge``. */
Entries *pb_key_batch(Entries *root, PyObject *key_field, long long charge) {
    if (!root->keys && !(root->keys = PyDict_New())) return NULL;
    PyObject *key = key_part(key_field);
    if (!key) return NULL;
    PyObject *batch = PyDict_GetItemWithError(root->keys, key);
    if (batch) {
        Py_INCREF(batch);
    } else if (!PyErr_Occurred()) {
        batch = PyObject_CallNoArgs((PyObject *)Py_TYPE(root));
        if (batch && PyDict_SetItem(root->keys, key, batch) < 0) Py_CLEAR(batch);
    }
    Py_DECREF(key);
    if (batch && !PyObject_TypeCheck(batch, &pb_EntriesType)) {
        Py_DECREF(batch);
        PyErr_SetString(PyExc_TypeError, "a key's batch is not a compiled BatchBuilder");
        return NULL;
    }
    if (!batch) return NULL;
    root->count += 1;
    root->charged += charge;
    return (Entries *)batch;
}

/* One entry: [u32 size][key_field payload_size (event_time)][value]; returns the bytes
 * the batch grew by, or -1 with an exception set. */
Py_ssize_t pb_entries_add(Entries *self, const char *key_field, Py_ssize_t key_size,
                              long long timestamp, const char *value, Py_ssize_t payload_size,
                              long long charge) {
    Py_ssize_t metadata_size = key_size + 1 + varint_size((uint64_t)payload_size);
    if (timestamp > 0) metadata_size += 1 + varint_size((uint64_t)timestamp);
    Py_ssize_t grown = 4 + metadata_size + payload_size;
    if (entries_reserve(self, grown) < 0) return -1;
    unsigned char *out = self->data + self->size;
    *out++ = (unsigned char)(metadata_size >> 24);
    *out++ = (unsigned char)(metadata_size >> 16);
    *out++ = (unsigned char)(metadata_size >> 8);
    *out++ = (unsigned char)metadata_size;
    memcpy(out, key_field, key_size);
    out += key_size;
    *out++ = 0x18;  /* payload_size, field 3 */
    out = put_varint(out, (uint64_t)payload_size);
    if (timestamp > 0) {
        *out++ = 0x28;  /* event_time, field 5 */
        out = put_varint(out, (uint64_t)timestamp);
    }
    memcpy(out, value, payload_size);
    self->size += grown;
    self->count += 1;
    self->charged += charge;
    return grown;
}

/* append(key_field, timestamp, data, value_offset, charge) -> bytes the batch grew by */
static PyObject *entries_append(Entries *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "append(key_field: bytes, timestamp, data: bytes, value_offset, charge)");
        return NULL;
    }
    long long timestamp = PyLong_AsLongLong(args[1]);
    Py_ssize_t value_offset = PyLong_AsSsize_t(args[3]);
    long long charge = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t data_size = PyBytes_GET_SIZE(args[2]);
    if (value_offset < 0 || value_offset > data_size) {
        PyErr_SetString(PyExc_ValueError, "value_offset outside data");
        return NULL;
    }
    Py_ssize_t grown = pb_entries_add(self, PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]),
                                   timestamp, PyBytes_AS_STRING(args[2]) + value_offset,
                                   data_size - value_offset, charge);
    return grown < 0 ? NULL : PyLong_FromSsize_t(grown);
}

/* take() -> the entries as bytes; the buffer, count and charge start again from zero. */
static PyObject *entries_take(Entries *self, PyObject *unused) {
    PyObject *payload = PyBytes_FromStringAndSize((const char *)self->data, self->size);
    if (!payload) return NULL;
    self->size = 0;
    self->count = 0;
    self->charged = 0;
    if (self->capacity > (1 << 20)) {  /* one huge batch does not keep its memory */
        PyMem_Free(self->data);
        self->data = NULL;
        self->capacity = 0;
    }
    return payload;
}

static PyObject *entries_get_buffer(Entries *self, void *closure) {
    return PyBytes_FromStringAndSize((const char *)self->data, self->size);
}

/* tail(start) -> the entries from byte start on (the write-ahead journal's new bytes). */
static PyObject *entries_tail(Entries *self, PyObject *arg) {
    Py_ssize_t start = PyLong_AsSsize_t(arg);
    if (start == -1 && PyErr_Occurred()) return NULL;
    if (start < 0 || start > self->size) {
        PyErr_SetString(PyExc_ValueError, "tail start outside the entries");
        return NULL;
    }
    return PyBytes_FromStringAndSize((const char *)self->data + start, self->size - start);
}

static PyObject *entries_get_size(Entries *self, void *c) { return PyLong_FromSsize_t(self->size); }
static PyObject *entries_get_count(Entries *self, void *c) { return PyLong_FromLongLong(self->count); }
static PyObject *entries_get_charged(Entries *self, void *c) { return PyLong_FromLongLong(self->charged); }

static int entries_set_long(long long *field, PyObject *value) {
    if (!value) { PyErr_SetString(PyExc_AttributeError, "cannot delete"); return -1; }
    long long n = PyLong_AsLongLong(value);
    if (n == -1 && PyErr_Occurred()) return -1;
    *field = n;
    return 0;
}
static int entries_set_count(Entries *self, PyObject *v, void *c) { return entries_set_long(&self->count, v); }

static PyObject *entries_get_keys(Entries *self, void *c) {
    PyObject *keys = self->keys ? self->keys : Py_None;
    Py_INCREF(keys);
    return keys;
}
static int entries_set_keys(Entries *self, PyObject *value, void *c) {
    if (value && value != Py_None && !PyDict_CheckExact(value)) {
        PyErr_SetString(PyExc_TypeError, "keys must be a dict or None");
        return -1;
    }
    PyObject *keys = value && value != Py_None ? (Py_INCREF(value), value) : NULL;
    Py_XSETREF(self->keys, keys);
    return 0;
}
static PyObject *entries_get_tags(Entries *self, void *c) {
    PyObject *tags = self->tags ? self->tags : Py_None;
    Py_INCREF(tags);
    return tags;
}
static int entries_set_tags(Entries *self, PyObject *value, void *c) {
    if (value && value != Py_None && !PyList_CheckExact(value)) {
        PyErr_SetString(PyExc_TypeError, "tags must be a list or None");
        return -1;
    }
    PyObject *tags = value && value != Py_None ? (Py_INCREF(value), value) : NULL;
    Py_XSETREF(self->tags, tags);
    return 0;
}
static int entries_set_charged(Entries *self, PyObject *v, void *c) { return entries_set_long(&self->charged, v); }

static PyMethodDef entries_methods[] = {
    {"append", (PyCFunction)(void (*)(void))entries_append, METH_FASTCALL,
     "append(key_field, timestamp, data, value_offset, charge) -> bytes the batch grew by"},
    {"take", (PyCFunction)entries_take, METH_NOARGS, "the entries as bytes; start again"},
    {"tail", (PyCFunction)entries_tail, METH_O, "tail(start) -> the entries from byte start on"},
    {NULL},
};

static PyGetSetDef entries_getset[] = {
    {"buffer", (getter)entries_get_buffer, NULL, "a copy of the entries so far", NULL},
    {"size", (getter)entries_get_size, NULL, "bytes of entries so far", NULL},
    {"count", (getter)entries_get_count, (setter)entries_set_count, "messages in the batch", NULL},
    {"charged", (getter)entries_get_charged, (setter)entries_set_charged,
     "memory charged for them", NULL},
    {"keys", (getter)entries_get_keys, (setter)entries_set_keys,
     "key-based batching: each key's open batch, by key field (None: one batch)", NULL},
    {"tags", (getter)entries_get_tags, (setter)entries_set_tags,
     "the confirmation runs (a list of TagRun; None: none yet)", NULL},
    {NULL},
};

PyTypeObject pb_EntriesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pulsar_bruce.native._intake.Entries",
    .tp_doc = "A batch's entries, [u32 size][SingleMessageMetadata][value] each.",
    .tp_basicsize = sizeof(Entries),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)entries_dealloc,
    .tp_traverse = (traverseproc)entries_traverse,
    .tp_clear = (inquiry)entries_clear,
    .tp_methods = entries_methods,
    .tp_getset = entries_getset,
};
