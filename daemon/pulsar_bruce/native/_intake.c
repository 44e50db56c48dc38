/* pulsar_bruce.native._intake: the compiled per-message path.
 *
 * Five pieces, each with a pure-Python twin that behaves identically (the
 * differential tests compare them byte for byte):
 *
 *   parse_datagram(data)  the Bruce datagram parser (parse/datagram.py)
 *   Entries               a batch's entry buffer (batch/batch_builder.py _PyEntries):
 *                         SingleMessageMetadata hand-encoded straight into one buffer
 *   Admitter              Intake.admit for the common case (route/intake.py admit_py),
 *                         working on the route layer's own objects; the rest goes to Python
 *   split_records(...)    the stream socket's record splitter (input/stream_session.py)
 *   Receiver              a thread that reads the datagram socket with recvmmsg without
 *                         the GIL, into slabs the event loop takes whole (input/socket_reader.py)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

/* ------------------------------------------------------------------ helpers */

static PyObject *R_MALFORMED, *R_UNSUPPORTED_API_KEY, *R_UNSUPPORTED_VERSION, *EMPTY_BYTES;

static inline int16_t rd_i16(const unsigned char *p) { return (int16_t)((p[0] << 8) | p[1]); }
static inline uint32_t rd_u32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline int32_t rd_i32(const unsigned char *p) { return (int32_t)rd_u32(p); }
static inline int64_t rd_i64(const unsigned char *p) {
    return (int64_t)(((uint64_t)rd_u32(p) << 32) | rd_u32(p + 4));
}

static inline int varint_size(uint64_t n) {
    int size = 1;
    while (n >= 0x80) { n >>= 7; size++; }
    return size;
}
static inline unsigned char *put_varint(unsigned char *out, uint64_t n) {
    while (n >= 0x80) { *out++ = (unsigned char)((n & 0x7F) | 0x80); n >>= 7; }
    *out++ = (unsigned char)n;
    return out;
}

/* ------------------------------------------------------------ parse_datagram */

#define API_ANY_PARTITION 256
#define API_PARTITION_KEY 257
#define API_MESSAGE 260
#define FLAG_PARTITION_KEY 0x0001

static PyObject *reason(PyObject *which) { Py_INCREF(which); return which; }

static PyObject *result(PyObject *data, Py_ssize_t topic_start, Py_ssize_t topic_end,
                        PyObject *partition_key, int64_t timestamp, Py_ssize_t key_start,
                        Py_ssize_t key_end, Py_ssize_t value_start, PyObject *fields) {
    const char *p = PyBytes_AS_STRING(data);
    PyObject *topic = PyBytes_FromStringAndSize(p + topic_start, topic_end - topic_start);
    PyObject *key = PyBytes_FromStringAndSize(p + key_start, key_end - key_start);
    PyObject *ts = PyLong_FromLongLong(timestamp);
    PyObject *offset = PyLong_FromSsize_t(value_start);
    PyObject *out = NULL;
    if (topic && key && ts && offset && partition_key && fields)
        out = PyTuple_Pack(6, topic, partition_key, ts, key, offset, fields);
    Py_XDECREF(topic); Py_XDECREF(key); Py_XDECREF(ts); Py_XDECREF(offset);
    Py_XDECREF(partition_key); Py_XDECREF(fields);
    return out;
}

/* A Message record (ApiKey 260): Bruce's fields plus properties. */
static PyObject *parse_message(PyObject *data, int api_version) {
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t length = PyBytes_GET_SIZE(data);
    if (api_version != 0) return reason(R_UNSUPPORTED_VERSION);
    if (length < 16) return reason(R_MALFORMED);
    int flags = rd_i16(p + 8);
    int64_t partition_key = rd_u32(p + 10);
    int topic_size = rd_i16(p + 14);
    if ((flags & ~FLAG_PARTITION_KEY) || topic_size <= 0) return reason(R_MALFORMED);
    if (!(flags & FLAG_PARTITION_KEY)) partition_key = -1;
    Py_ssize_t topic_end = 16 + topic_size;
    if (topic_end + 12 > length) return reason(R_MALFORMED);
    int64_t timestamp = rd_i64(p + topic_end);
    int64_t key_size = rd_i32(p + topic_end + 8);
    Py_ssize_t key_start = topic_end + 12;
    int64_t offset = key_start + key_size;
    if (key_size < 0 || offset + 2 > length) return reason(R_MALFORMED);
    int count = rd_i16(p + offset);
    offset += 2;
    if (count < 0) return reason(R_MALFORMED);
    /* First pass: validate and size the encoded properties; second: write them. */
    int64_t fields_size = 0, scan = offset;
    for (int i = 0; i < count; i++) {
        if (scan + 2 > length) return reason(R_MALFORMED);
        int64_t name_size = rd_i16(p + scan);
        int64_t name_end = scan + 2 + name_size;
        if (name_size < 0 || name_end + 4 > length) return reason(R_MALFORMED);
        int64_t value_size = rd_i32(p + name_end);
        int64_t value_end = name_end + 4 + value_size;
        if (value_size < 0 || value_end > length) return reason(R_MALFORMED);
        PyObject *text = PyUnicode_DecodeUTF8((const char *)p + scan + 2, name_size, "strict");
        if (text) {
            Py_DECREF(text);
            text = PyUnicode_DecodeUTF8((const char *)p + name_end + 4, value_size, "strict");
        }
        if (!text) {  /* protobuf strings must be UTF-8 */
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return NULL;
            PyErr_Clear();
            return reason(R_MALFORMED);
        }
        Py_DECREF(text);
        int64_t pair = 1 + varint_size(name_size) + name_size + 1 + varint_size(value_size) + value_size;
        fields_size += 1 + varint_size(pair) + pair;
        scan = value_end;
    }
    if (scan + 4 > length) return reason(R_MALFORMED);
    int64_t value_size = rd_i32(p + scan);
    int64_t value_start = scan + 4;
    if (value_size < 0 || value_start + value_size != length) return reason(R_MALFORMED);
    PyObject *fields = PyBytes_FromStringAndSize(NULL, fields_size);
    if (!fields) return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(fields);
    for (int i = 0; i < count; i++) {
        int64_t name_size = rd_i16(p + offset);
        int64_t name_end = offset + 2 + name_size;
        int64_t value_size_i = rd_i32(p + name_end);
        int64_t pair = 1 + varint_size(name_size) + name_size + 1 + varint_size(value_size_i) + value_size_i;
        *out++ = 0x0a; out = put_varint(out, pair);
        *out++ = 0x0a; out = put_varint(out, name_size);
        memcpy(out, p + offset + 2, name_size); out += name_size;
        *out++ = 0x12; out = put_varint(out, value_size_i);
        memcpy(out, p + name_end + 4, value_size_i); out += value_size_i;
        offset = name_end + 4 + value_size_i;
    }
    return result(data, 16, topic_end, PyLong_FromLongLong(partition_key), timestamp, key_start,
                  key_start + key_size, value_start, fields);
}

/* A parsed AnyPartition or PartitionKey datagram: views into the datagram's bytes. */
typedef struct {
    Py_ssize_t topic_start, topic_end, key_start, key_end, value_start;
    int64_t partition_key, timestamp;
    int is_record;  /* ApiKey 260: parse_message() does the rest */
} View;

/* NULL when ``p`` parses (``view`` filled), else the discard reason (borrowed). */
static PyObject *parse_view(const unsigned char *p, Py_ssize_t length, View *view) {
    if (length < 8) return R_MALFORMED;
    int64_t size = rd_i32(p);
    int api_key = rd_i16(p + 4), api_version = rd_i16(p + 6);
    if (size != length) return R_MALFORMED;
    int flags, topic_size;
    Py_ssize_t offset;
    view->is_record = 0;
    if (api_key == API_ANY_PARTITION) {
        if (length < 12) return api_version == 0 ? R_MALFORMED : R_UNSUPPORTED_VERSION;
        flags = rd_i16(p + 8);
        topic_size = rd_i16(p + 10);
        view->partition_key = -1;
        offset = 12;
    } else if (api_key == API_PARTITION_KEY) {
        if (length < 16) return api_version == 0 ? R_MALFORMED : R_UNSUPPORTED_VERSION;
        flags = rd_i16(p + 8);
        view->partition_key = rd_u32(p + 10);
        topic_size = rd_i16(p + 14);
        offset = 16;
    } else if (api_key == API_MESSAGE) {
        view->is_record = 1;
        return NULL;
    } else {
        return R_UNSUPPORTED_API_KEY;
    }
    if (api_version != 0) return R_UNSUPPORTED_VERSION;
    if (flags != 0 || topic_size <= 0) return R_MALFORMED;
    Py_ssize_t topic_end = offset + topic_size;
    if (topic_end + 12 > length) return R_MALFORMED;
    int64_t key_size = rd_i32(p + topic_end + 8);
    int64_t key_start = topic_end + 12, key_end = key_start + key_size;
    if (key_size < 0 || key_end + 4 > length) return R_MALFORMED;
    int64_t value_size = rd_i32(p + key_end);
    int64_t value_start = key_end + 4;
    if (value_size < 0 || value_start + value_size != length) return R_MALFORMED;
    view->topic_start = offset;
    view->topic_end = topic_end;
    view->timestamp = rd_i64(p + topic_end);
    view->key_start = key_start;
    view->key_end = key_end;
    view->value_start = value_start;
    return NULL;
}

static PyObject *parse_datagram(PyObject *module, PyObject *data) {
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "parse_datagram() takes bytes");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    View view = {0};
    PyObject *why = parse_view(p, PyBytes_GET_SIZE(data), &view);
    if (why) return reason(why);
    if (view.is_record) return parse_message(data, rd_i16(p + 6));
    Py_INCREF(EMPTY_BYTES);
    return result(data, view.topic_start, view.topic_end, PyLong_FromLongLong(view.partition_key),
                  view.timestamp, view.key_start, view.key_end, view.value_start, EMPTY_BYTES);
}

/* ------------------------------------------------------------- split_records */

/* split_records(buffer, offset, max_record_bytes) -> the complete stream records in
 * ``buffer`` from ``offset`` (input/stream_session.py split_records_py). */
static PyObject *split_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyByteArray_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "split_records(buffer: bytearray, offset, max_record_bytes)");
        return NULL;
    }
    Py_ssize_t offset = PyLong_AsSsize_t(args[1]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return NULL;
    const unsigned char *p = (const unsigned char *)PyByteArray_AS_STRING(args[0]);
    Py_ssize_t end = PyByteArray_GET_SIZE(args[0]);
    if (offset < 0 || offset > end) {
        PyErr_SetString(PyExc_ValueError, "offset outside buffer");
        return NULL;
    }
    PyObject *records = PyList_New(0);
    if (!records) return NULL;
    while (end - offset >= 8) {
        int64_t size = rd_i32(p + offset);
        if (size < 8 || size > limit) {
            if (PyList_GET_SIZE(records)) break;
            Py_DECREF(records);
            PyErr_Format(PyExc_ValueError, "record size %lld is outside 8..%zd", (long long)size,
                         limit);
            return NULL;
        }
        if (end - offset < size) break;
        PyObject *record = PyBytes_FromStringAndSize((const char *)p + offset, (Py_ssize_t)size);
        if (!record || PyList_Append(records, record) < 0) {
            Py_XDECREF(record);
            Py_DECREF(records);
            return NULL;
        }
        Py_DECREF(record);
        offset += (Py_ssize_t)size;
    }
    return records;
}

/* ------------------------------------------------------------------- Entries */

typedef struct {
    PyObject_HEAD
    unsigned char *data;
    Py_ssize_t size, capacity;
    long long count, charged;
} Entries;

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

static void entries_dealloc(Entries *self) {
    PyMem_Free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* One entry: [u32 size][key_field payload_size (event_time)][value]; returns the bytes
 * the batch grew by, or -1 with an exception set. */
static Py_ssize_t entries_add(Entries *self, const char *key_field, Py_ssize_t key_size,
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
    Py_ssize_t grown = entries_add(self, PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]),
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
static int entries_set_charged(Entries *self, PyObject *v, void *c) { return entries_set_long(&self->charged, v); }

static PyMethodDef entries_methods[] = {
    {"append", (PyCFunction)(void (*)(void))entries_append, METH_FASTCALL,
     "append(key_field, timestamp, data, value_offset, charge) -> bytes the batch grew by"},
    {"take", (PyCFunction)entries_take, METH_NOARGS, "the entries as bytes; start again"},
    {NULL},
};

static PyGetSetDef entries_getset[] = {
    {"buffer", (getter)entries_get_buffer, NULL, "a copy of the entries so far", NULL},
    {"count", (getter)entries_get_count, (setter)entries_set_count, "messages in the batch", NULL},
    {"charged", (getter)entries_get_charged, (setter)entries_set_charged,
     "memory charged for them", NULL},
    {NULL},
};

static PyTypeObject EntriesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pulsar_bruce.native._intake.Entries",
    .tp_doc = "A batch's entries, [u32 size][SingleMessageMetadata][value] each.",
    .tp_basicsize = sizeof(Entries),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)entries_dealloc,
    .tp_methods = entries_methods,
    .tp_getset = entries_getset,
};

/* ------------------------------------------------------------------ Admitter */

/* Intake.admit_py (route/intake.py) for the common case, in C: a valid message for a
 * known topic that has producers, within its size and rate limits, with memory to
 * spare.  Everything else (a discard, a new topic, the disk spool, stream
 * backpressure, a topic still waiting for its partition count) goes to admit_py whole,
 * before any side effect, so the Python intake decides it exactly as it does alone.
 * The steps and their order mirror admit_py, Topic.choose_any/choose_keyed
 * (route/router.py) and Appender.append (route/appender.py); the differential tests
 * run one workload through both and compare every batch, frame and discard. */

static PyObject *S_max_message_bytes, *S_rate_budget, *S_key_hash, *S_buffered_bytes,
    *S_memory_limit, *S_producers, *S_round_robin, *S_batch, *S_ready, *S_max_batch_bytes,
    *S_key_field, *S_tags, *S_policy, *S_max_messages, *S_key_based, *S_outstanding, *S_seal,
    *S_batch_sealed, *S_batch_opened, *S_tag_last;

typedef struct {
    PyObject_HEAD
    PyObject *intake, *slow, *by_bytes, *ledger, *accept, *policy, *events, *encode_key_field;
    long long entry_overhead;
    PyObject *last_topic_bytes;  /* the last topic's bytes: a key of by_bytes */
    unsigned long long admitted_here;  /* taken without admit_py (for tests and profiles) */
} Admitter;

static int get_ll(PyObject *obj, PyObject *name, long long *out) {
    PyObject *value = PyObject_GetAttr(obj, name);
    if (!value) return -1;
    *out = PyLong_AsLongLong(value);
    Py_DECREF(value);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int is_ready(PyObject *producer) {
    PyObject *ready = PyObject_GetAttr(producer, S_ready);
    if (!ready) return -1;
    int truth = PyObject_IsTrue(ready);
    Py_DECREF(ready);
    return truth;
}

/* The open batch of ``producer`` (new reference); it must be an Entries. */
static Entries *batch_of(PyObject *producer) {
    PyObject *batch = PyObject_GetAttr(producer, S_batch);
    if (batch && !PyObject_TypeCheck(batch, &EntriesType)) {
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
static PyObject *choose(PyObject *topic, PyObject *producers, long long partition_key) {
    Py_ssize_t count = PyList_GET_SIZE(producers);
    if (partition_key >= 0) {
        long long first = floor_mod(partition_key, count);
        for (Py_ssize_t step = 0; step < count; step++) {
            PyObject *candidate = PyList_GET_ITEM(producers, (first + step) % count);
            int ready = is_ready(candidate);
            if (ready < 0) return NULL;
            if (ready) { Py_INCREF(candidate); return candidate; }
        }
        PyObject *chosen = PyList_GET_ITEM(producers, first);
        Py_INCREF(chosen);
        return chosen;
    }
    long long index;
    if (get_ll(topic, S_round_robin, &index) < 0) return NULL;
    if (index >= 0) {
        PyObject *current = PyList_GetItem(producers, (Py_ssize_t)index);
        if (!current) return NULL;
        Entries *batch = batch_of(current);
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
    PyObject *sealed = PyObject_CallMethodNoArgs(producer, S_seal);
    if (!sealed) return -1;
    Py_DECREF(sealed);
    PyObject *done = PyObject_CallMethodOneArg(self->events, S_batch_sealed, producer);
    Py_XDECREF(done);
    return done ? 0 : -1;
}

/* Appender.append for a batch that is an Entries. */
static int append(Admitter *self, PyObject *producer, Entries *batch, PyObject *key_field,
                  long long timestamp, const char *value, Py_ssize_t value_size,
                  long long charge, PyObject *tag) {
    long long max_batch_bytes;
    if (get_ll(producer, S_max_batch_bytes, &max_batch_bytes) < 0) return -1;
    if (batch->count) {
        int seal = batch->charged + charge > max_batch_bytes;
        if (!seal) {
            PyObject *batch_key = PyObject_GetAttr((PyObject *)batch, S_key_field);
            if (!batch_key) return -1;
            if (batch_key != Py_None) {
                int same = PyObject_RichCompareBool(key_field, batch_key, Py_EQ);
                if (same < 0) { Py_DECREF(batch_key); return -1; }
                seal = !same;
            }
            Py_DECREF(batch_key);
        }
        if (seal && seal_and_report(self, producer) < 0) return -1;
    }
    if (entries_add(batch, PyBytes_AS_STRING(key_field), PyBytes_GET_SIZE(key_field), timestamp,
                    value, value_size, charge) < 0)
        return -1;
    PyObject *tags = PyObject_GetAttr((PyObject *)batch, S_tags);
    if (!tags) return -1;
    int tagged = tag != Py_None || tags != Py_None;
    Py_DECREF(tags);
    if (tagged) {
        PyObject *done = PyObject_CallMethodOneArg((PyObject *)batch, S_tag_last, tag);
        if (!done) return -1;
        Py_DECREF(done);
    }
    PyObject *policy = PyObject_GetAttr(producer, S_policy);
    if (!policy) return -1;
    int failed = 0;
    if (batch->count == 1) {
        PyObject *key_based = PyObject_GetAttr(policy, S_key_based);
        int truth = key_based ? PyObject_IsTrue(key_based) : -1;
        Py_XDECREF(key_based);
        if (truth < 0 || (truth && PyObject_SetAttr((PyObject *)batch, S_key_field, key_field) < 0))
            failed = 1;
        PyObject *done = failed ? NULL
                                : PyObject_CallMethodOneArg(self->events, S_batch_opened, producer);
        if (!done) failed = 1;
        Py_XDECREF(done);
    }
    long long max_messages = 0;
    if (!failed && (get_ll(policy, S_max_messages, &max_messages) < 0 ||
                    get_ll(producer, S_max_batch_bytes, &max_batch_bytes) < 0))
        failed = 1;
    Py_DECREF(policy);
    if (failed) return -1;
    if (batch->count >= max_messages || batch->charged >= max_batch_bytes)
        return seal_and_report(self, producer);
    return 0;
}

/* ``partition_key`` Protobuf field (plus the base64 flag, via Python, for keys that are
 * not UTF-8) after the record's property fields: a new reference. */
static PyObject *key_field_of(Admitter *self, const char *key, Py_ssize_t key_size,
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
        encoded = PyObject_CallOneArg(self->encode_key_field, owned);
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
    memcpy(write, fields, fields_size);
    write += fields_size;
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

/* 1: admitted here; 0: admit_py must decide (nothing was changed); -1: error. */
static int fast_admit(Admitter *self, PyObject *data, PyObject *tag) {
    if (!PyBytes_CheckExact(data)) return 0;
    const char *p = PyBytes_AS_STRING(data);
    Py_ssize_t length = PyBytes_GET_SIZE(data);
    long long limit;
    if (get_ll(self->intake, S_max_message_bytes, &limit) < 0) return -1;
    if (length > limit) return 0;
    View view = {0};
    if (parse_view((const unsigned char *)p, length, &view)) return 0;
    PyObject *record = NULL, *topic_bytes = NULL, *topic = NULL, *budget = NULL,
             *key_field = NULL, *producers = NULL, *producer = NULL, *hashed = NULL;
    Entries *batch = NULL;
    int outcome = -1;
    const char *key = p + view.key_start, *fields = NULL;
    Py_ssize_t key_size = view.key_end - view.key_start, fields_size = 0;
    PyObject *key_object = NULL;  /* borrowed from record when there is one */
    if (view.is_record) {
        record = parse_message(data, rd_i16((const unsigned char *)p + 6));
        if (!record) goto done;
        if (!PyTuple_Check(record)) { outcome = 0; goto done; }
        topic_bytes = PyTuple_GET_ITEM(record, 0);
        Py_INCREF(topic_bytes);
        view.partition_key = PyLong_AsLongLong(PyTuple_GET_ITEM(record, 1));
        view.timestamp = PyLong_AsLongLong(PyTuple_GET_ITEM(record, 2));
        key_object = PyTuple_GET_ITEM(record, 3);
        key = PyBytes_AS_STRING(key_object);
        key_size = PyBytes_GET_SIZE(key_object);
        view.value_start = PyLong_AsSsize_t(PyTuple_GET_ITEM(record, 4));
        fields = PyBytes_AS_STRING(PyTuple_GET_ITEM(record, 5));
        fields_size = PyBytes_GET_SIZE(PyTuple_GET_ITEM(record, 5));
    } else {
        const char *name = p + view.topic_start;
        Py_ssize_t name_size = view.topic_end - view.topic_start;
        PyObject *last = self->last_topic_bytes;
        if (last && PyBytes_GET_SIZE(last) == name_size &&
            memcmp(PyBytes_AS_STRING(last), name, name_size) == 0) {
            topic_bytes = last;
            Py_INCREF(topic_bytes);
        } else if (!(topic_bytes = PyBytes_FromStringAndSize(name, name_size))) {
            goto done;
        }
    }
    topic = PyDict_GetItemWithError(self->by_bytes, topic_bytes);
    if (!topic) { outcome = PyErr_Occurred() ? -1 : 0; goto done; }  /* new: topics.add */
    Py_INCREF(topic);
    Py_INCREF(topic_bytes);
    Py_XSETREF(self->last_topic_bytes, topic_bytes);
    long long topic_limit, budget_left = 0;
    if (get_ll(topic, S_max_message_bytes, &topic_limit) < 0) goto done;
    if (length > topic_limit) { outcome = 0; goto done; }
    if (!(budget = PyObject_GetAttr(topic, S_rate_budget))) goto done;
    if (budget != Py_None) {
        budget_left = PyLong_AsLongLong(budget);
        if (budget_left == -1 && PyErr_Occurred()) goto done;
        if (budget_left <= 0) { outcome = 0; goto done; }
    }
    long long partition_key = view.partition_key;
    if (key_size && partition_key < 0) {  /* key routing: hashed like a Java producer */
        PyObject *key_hash = PyObject_GetAttr(topic, S_key_hash);
        if (!key_hash) goto done;
        if (key_hash != Py_None) {
            PyObject *owned = key_object ? (Py_INCREF(key_object), key_object)
                                         : PyBytes_FromStringAndSize(key, key_size);
            hashed = owned ? PyObject_CallOneArg(key_hash, owned) : NULL;
            Py_XDECREF(owned);
        }
        Py_DECREF(key_hash);
        if (hashed) {
            int overflow = 0;
            partition_key = PyLong_AsLongLongAndOverflow(hashed, &overflow);
            if (overflow) { outcome = 0; goto done; }
            if (partition_key == -1 && PyErr_Occurred()) goto done;
        } else if (PyErr_Occurred()) {
            goto done;
        }
    }
    if (!(key_field = key_field_of(self, key, key_size, key_object, fields, fields_size))) goto done;
    Py_ssize_t value_size = length - view.value_start;
    long long charge = PyBytes_GET_SIZE(key_field) + value_size + self->entry_overhead;
    long long buffered, memory_limit;
    if (get_ll(self->ledger, S_buffered_bytes, &buffered) < 0 ||
        get_ll(self->policy, S_memory_limit, &memory_limit) < 0)
        goto done;
    if (buffered + charge > memory_limit) { outcome = 0; goto done; }  /* spool or wait */
    if (!(producers = PyObject_GetAttr(topic, S_producers))) goto done;
    if (!PyList_Check(producers) || PyList_GET_SIZE(producers) == 0) { outcome = 0; goto done; }
    /* Decided: from here on it is admitted here (choose() only moves the round-robin). */
    if (!(producer = choose(topic, producers, partition_key))) goto done;
    if (!(batch = batch_of(producer))) goto done;
    PyObject *charge_object = PyLong_FromLongLong(charge);
    PyObject *accepted = charge_object ? PyObject_CallOneArg(self->accept, charge_object) : NULL;
    Py_XDECREF(charge_object);
    if (!accepted) goto done;
    Py_DECREF(accepted);
    if (tag != Py_None) {
        long long outstanding;
        if (get_ll(tag, S_outstanding, &outstanding) < 0) goto done;
        PyObject *more = PyLong_FromLongLong(outstanding + 1);
        int failed = !more || PyObject_SetAttr(tag, S_outstanding, more) < 0;
        Py_XDECREF(more);
        if (failed) goto done;
    }
    if (append(self, producer, batch, key_field, view.timestamp, p + view.value_start, value_size,
               charge, tag) < 0)
        goto done;
    if (budget != Py_None) {
        PyObject *less = PyLong_FromLongLong(budget_left - 1);
        int failed = !less || PyObject_SetAttr(topic, S_rate_budget, less) < 0;
        Py_XDECREF(less);
        if (failed) goto done;
    }
    outcome = 1;
done:
    Py_XDECREF(record);
    Py_XDECREF(topic_bytes);
    Py_XDECREF(topic);
    Py_XDECREF(budget);
    Py_XDECREF(hashed);
    Py_XDECREF(key_field);
    Py_XDECREF(producers);
    Py_XDECREF(producer);
    Py_XDECREF((PyObject *)batch);
    return outcome;
}

/* admit(data, tag=None) -> bool: Intake.admit's contract (see route/intake.py). */
static PyObject *admitter_admit(Admitter *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "admit(data, tag=None)");
        return NULL;
    }
    int outcome = fast_admit(self, args[0], nargs == 2 ? args[1] : Py_None);
    if (outcome < 0) return NULL;
    if (outcome) {
        self->admitted_here++;
        Py_RETURN_TRUE;
    }
    return PyObject_Vectorcall(self->slow, args, (size_t)nargs, NULL);
}

static int admitter_init(Admitter *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"intake", "slow", "by_bytes", "ledger", "policy", "events",
                            "encode_key_field", "entry_overhead", NULL};
    PyObject *intake, *slow, *by_bytes, *ledger, *policy, *events, *encode;
    long long overhead;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO!OOOOL", names, &intake, &slow,
                                     &PyDict_Type, &by_bytes, &ledger, &policy, &events, &encode,
                                     &overhead))
        return -1;
    PyObject *accept = PyObject_GetAttrString(ledger, "accept");
    if (!accept) return -1;
    Py_INCREF(intake); Py_INCREF(slow); Py_INCREF(by_bytes); Py_INCREF(ledger);
    Py_INCREF(policy); Py_INCREF(events); Py_INCREF(encode);
    Py_XSETREF(self->intake, intake);
    Py_XSETREF(self->slow, slow);
    Py_XSETREF(self->by_bytes, by_bytes);
    Py_XSETREF(self->ledger, ledger);
    Py_XSETREF(self->accept, accept);
    Py_XSETREF(self->policy, policy);
    Py_XSETREF(self->events, events);
    Py_XSETREF(self->encode_key_field, encode);
    self->entry_overhead = overhead;
    return 0;
}

static int admitter_traverse(Admitter *self, visitproc visit, void *arg) {
    Py_VISIT(self->intake); Py_VISIT(self->slow); Py_VISIT(self->by_bytes);
    Py_VISIT(self->ledger); Py_VISIT(self->accept); Py_VISIT(self->policy);
    Py_VISIT(self->events); Py_VISIT(self->encode_key_field); Py_VISIT(self->last_topic_bytes);
    return 0;
}

static int admitter_clear(Admitter *self) {
    Py_CLEAR(self->intake); Py_CLEAR(self->slow); Py_CLEAR(self->by_bytes);
    Py_CLEAR(self->ledger); Py_CLEAR(self->accept); Py_CLEAR(self->policy);
    Py_CLEAR(self->events); Py_CLEAR(self->encode_key_field); Py_CLEAR(self->last_topic_bytes);
    return 0;
}

static void admitter_dealloc(Admitter *self) {
    PyObject_GC_UnTrack(self);
    admitter_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef admitter_methods[] = {
    {"admit", (PyCFunction)(void (*)(void))admitter_admit, METH_FASTCALL,
     "admit(data, tag=None) -> bool, as Intake.admit"},
    {NULL},
};

static PyObject *admitter_get_admitted_here(Admitter *self, void *c) {
    return PyLong_FromUnsignedLongLong(self->admitted_here);
}

static PyGetSetDef admitter_getset[] = {
    {"admitted_here", (getter)admitter_get_admitted_here, NULL,
     "messages admitted without admit_py", NULL},
    {NULL},
};

static PyTypeObject AdmitterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pulsar_bruce.native._intake.Admitter",
    .tp_doc = "Intake.admit for the common case in C; everything else goes to admit_py.",
    .tp_basicsize = sizeof(Admitter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)admitter_init,
    .tp_dealloc = (destructor)admitter_dealloc,
    .tp_traverse = (traverseproc)admitter_traverse,
    .tp_clear = (inquiry)admitter_clear,
    .tp_methods = admitter_methods,
    .tp_getset = admitter_getset,
};

/* ------------------------------------------------------------------ Receiver */

/* The receive thread fills slabs in ring order; the event loop takes them in the same
 * order, so datagrams reach the intake in the order the socket gave them.  A slab is
 * FREE (the thread may fill it) or READY (the loop may take it).  When every slab is
 * READY the thread stops reading: the kernel queue fills and senders block or get
 * EAGAIN, as they would with a slow single-threaded daemon.  Nothing is dropped here. */

#define SLABS 4
#define PER_SLAB 64

typedef struct {
    unsigned char *arena;             /* PER_SLAB slots of slot_size bytes (virtual) */
    unsigned int lengths[PER_SLAB];
    int count;
    int ready;
} Slab;

typedef struct {
    PyObject_HEAD
    int sock_fd, wake_fd, stop_fd;
    size_t slot_size, slab_bytes;
    Slab slabs[SLABS];
    int fill, take;                   /* next slab the thread fills / the loop takes */
    int notified;                     /* wake_fd written, not yet answered by an empty take() */
    int running, stopping, thread_errno;
    unsigned long long calls, datagrams;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t slab_freed;
} Receiver;

static void receiver_wake(Receiver *self) {
    uint64_t one = 1;
    ssize_t ignored = write(self->wake_fd, &one, sizeof one);
    (void)ignored;
}

/* Fill one slab: recvmmsg until it is full or the socket is empty (then publish what
 * there is), waiting in poll() while the socket is empty and nothing is held. */
static int receiver_fill(Receiver *self, Slab *slab) {
    struct mmsghdr headers[PER_SLAB];
    struct iovec vectors[PER_SLAB];
    int count = 0;
    while (count < PER_SLAB) {
        int room = PER_SLAB - count;
        for (int i = 0; i < room; i++) {
            vectors[i].iov_base = slab->arena + (size_t)(count + i) * self->slot_size;
            vectors[i].iov_len = self->slot_size;
            memset(&headers[i].msg_hdr, 0, sizeof headers[i].msg_hdr);
            headers[i].msg_hdr.msg_iov = &vectors[i];
            headers[i].msg_hdr.msg_iovlen = 1;
        }
        int got = recvmmsg(self->sock_fd, headers, (unsigned int)room, MSG_DONTWAIT, NULL);
        if (got > 0) {
            for (int i = 0; i < got; i++) slab->lengths[count + i] = headers[i].msg_len;
            count += got;
            __atomic_add_fetch(&self->calls, 1, __ATOMIC_RELAXED);
            continue;
        }
        if (got < 0 && errno == EINTR) continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (count > 0) break;  /* publish now: latency before batching */
            struct pollfd fds[2] = {{self->sock_fd, POLLIN, 0}, {self->stop_fd, POLLIN, 0}};
            if (poll(fds, 2, -1) < 0 && errno != EINTR) { self->thread_errno = errno; return -1; }
            if (fds[1].revents) return -1;  /* stop asked */
            continue;
        }
        self->thread_errno = got < 0 ? errno : 0;  /* socket closed under us */
        return -1;
    }
    return count;
}

static void *receiver_main(void *arg) {
    Receiver *self = arg;
    for (;;) {
        pthread_mutex_lock(&self->lock);
        Slab *slab = &self->slabs[self->fill];
        while (slab->ready && !self->stopping) pthread_cond_wait(&self->slab_freed, &self->lock);
        int stopping = self->stopping;
        pthread_mutex_unlock(&self->lock);
        if (stopping) break;
        int count = receiver_fill(self, slab);
        if (count <= 0) break;
        pthread_mutex_lock(&self->lock);
        slab->count = count;
        slab->ready = 1;
        self->fill = (self->fill + 1) % SLABS;
        self->datagrams += (unsigned long long)count;
        int wake = !self->notified;
        self->notified = 1;
        pthread_mutex_unlock(&self->lock);
        if (wake) receiver_wake(self);
    }
    receiver_wake(self);  /* the loop sees the end (or the error) */
    return NULL;
}

static void receiver_join(Receiver *self) {
    if (!self->running) return;
    pthread_mutex_lock(&self->lock);
    self->stopping = 1;
    pthread_cond_broadcast(&self->slab_freed);
    pthread_mutex_unlock(&self->lock);
    uint64_t one = 1;
    ssize_t ignored = write(self->stop_fd, &one, sizeof one);
    (void)ignored;
    Py_BEGIN_ALLOW_THREADS
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    self->running = 0;
}

static int receiver_init(Receiver *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"fd", "max_datagram_bytes", NULL};
    int fd;
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "in", names, &fd, &max_bytes)) return -1;
    if (max_bytes < 0) { PyErr_SetString(PyExc_ValueError, "max_datagram_bytes < 0"); return -1; }
    long page = sysconf(_SC_PAGESIZE);
    /* One byte more than the limit, so an oversized datagram is seen as such. */
    self->slot_size = (((size_t)max_bytes + 1 + (size_t)page - 1) / (size_t)page) * (size_t)page;
    self->slab_bytes = self->slot_size * PER_SLAB;
    self->sock_fd = fd;
    self->wake_fd = self->stop_fd = -1;
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->slab_freed, NULL);
    for (int i = 0; i < SLABS; i++) {
        /* Address space only: pages cost memory once a datagram is written into them. */
        void *arena = mmap(NULL, self->slab_bytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (arena == MAP_FAILED) { PyErr_SetFromErrno(PyExc_OSError); return -1; }
        self->slabs[i].arena = arena;
    }
    self->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    self->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->wake_fd < 0 || self->stop_fd < 0) { PyErr_SetFromErrno(PyExc_OSError); return -1; }
    return 0;
}

static void receiver_dealloc(Receiver *self) {
    receiver_join(self);
    for (int i = 0; i < SLABS; i++)
        if (self->slabs[i].arena) munmap(self->slabs[i].arena, self->slab_bytes);
    if (self->wake_fd >= 0) close(self->wake_fd);
    if (self->stop_fd >= 0) close(self->stop_fd);
    if (self->slot_size) {
        pthread_mutex_destroy(&self->lock);
        pthread_cond_destroy(&self->slab_freed);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *receiver_start(Receiver *self, PyObject *unused) {
    if (self->running) Py_RETURN_NONE;
    self->stopping = 0;
    self->thread_errno = 0;
    uint64_t drained;
    while (read(self->stop_fd, &drained, sizeof drained) > 0) {}
    int failed = pthread_create(&self->thread, NULL, receiver_main, self);
    if (failed) { errno = failed; return PyErr_SetFromErrno(PyExc_OSError); }
    self->running = 1;
    Py_RETURN_NONE;
}

static PyObject *receiver_stop(Receiver *self, PyObject *unused) {
    receiver_join(self);
    Py_RETURN_NONE;
}

/* take() -> the oldest filled slab's datagrams as a list of bytes, or None. */
static PyObject *receiver_take(Receiver *self, PyObject *unused) {
    pthread_mutex_lock(&self->lock);
    Slab *slab = &self->slabs[self->take];
    if (!slab->ready) {
        self->notified = 0;
        uint64_t drained;
        ssize_t ignored = read(self->wake_fd, &drained, sizeof drained);
        (void)ignored;
        pthread_mutex_unlock(&self->lock);
        Py_RETURN_NONE;
    }
    int count = slab->count;
    pthread_mutex_unlock(&self->lock);
    PyObject *list = PyList_New(count);
    if (!list) return NULL;
    for (int i = 0; i < count; i++) {
        unsigned char *slot = slab->arena + (size_t)i * self->slot_size;
        size_t length = slab->lengths[i];
        PyObject *data = PyBytes_FromStringAndSize((const char *)slot, (Py_ssize_t)length);
        if (!data) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, i, data);
        if (length > 65536) /* a large datagram does not keep its pages */
            madvise(slot + 65536, self->slot_size - 65536, MADV_DONTNEED);
    }
    pthread_mutex_lock(&self->lock);
    slab->ready = 0;
    self->take = (self->take + 1) % SLABS;
    pthread_cond_signal(&self->slab_freed);
    pthread_mutex_unlock(&self->lock);
    return list;
}

static PyObject *receiver_get_wake_fd(Receiver *self, void *c) { return PyLong_FromLong(self->wake_fd); }
static PyObject *receiver_get_running(Receiver *self, void *c) { return PyBool_FromLong(self->running); }
static PyObject *receiver_get_error(Receiver *self, void *c) { return PyLong_FromLong(self->thread_errno); }
static PyObject *receiver_get_stats(Receiver *self, void *c) {
    pthread_mutex_lock(&self->lock);
    unsigned long long calls = self->calls, datagrams = self->datagrams;
    int ready = 0;
    for (int i = 0; i < SLABS; i++) ready += self->slabs[i].ready;
    pthread_mutex_unlock(&self->lock);
    return Py_BuildValue("(KKi)", calls, datagrams, ready);
}

static PyMethodDef receiver_methods[] = {
    {"start", (PyCFunction)receiver_start, METH_NOARGS, "start the receive thread"},
    {"stop", (PyCFunction)receiver_stop, METH_NOARGS,
     "stop the thread after the slab it is filling (it stays to be taken)"},
    {"take", (PyCFunction)receiver_take, METH_NOARGS,
     "the oldest filled slab's datagrams (list of bytes), or None; None re-arms wake_fd"},
    {NULL},
};

static PyGetSetDef receiver_getset[] = {
    {"wake_fd", (getter)receiver_get_wake_fd, NULL, "readable when a slab is ready", NULL},
    {"running", (getter)receiver_get_running, NULL, "the thread runs", NULL},
    {"error", (getter)receiver_get_error, NULL, "errno that ended the thread, or 0", NULL},
    {"stats", (getter)receiver_get_stats, NULL,
     "(recvmmsg calls, datagrams received, slabs waiting for the loop)", NULL},
    {NULL},
};

static PyTypeObject ReceiverType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pulsar_bruce.native._intake.Receiver",
    .tp_doc = "Receiver(fd, max_datagram_bytes): recvmmsg on a thread without the GIL.",
    .tp_basicsize = sizeof(Receiver),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)receiver_init,
    .tp_dealloc = (destructor)receiver_dealloc,
    .tp_methods = receiver_methods,
    .tp_getset = receiver_getset,
};

/* -------------------------------------------------------------------- module */

static PyMethodDef module_methods[] = {
    {"parse_datagram", (PyCFunction)parse_datagram, METH_O,
     "parse_datagram(data) -> (topic, partition_key, timestamp, key, value_offset, fields) "
     "or a discard reason"},
    {"split_records", (PyCFunction)(void (*)(void))split_records, METH_FASTCALL,
     "split_records(buffer, offset, max_record_bytes) -> the complete stream records"},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_intake", "The compiled per-message path of pulsar-bruce.", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__intake(void) {
    if (PyType_Ready(&EntriesType) < 0 || PyType_Ready(&ReceiverType) < 0 ||
        PyType_Ready(&AdmitterType) < 0)
        return NULL;
    struct { PyObject **slot; const char *text; } names[] = {
        {&S_max_message_bytes, "max_message_bytes"}, {&S_rate_budget, "rate_budget"},
        {&S_key_hash, "key_hash"}, {&S_buffered_bytes, "buffered_bytes"},
        {&S_memory_limit, "memory_limit"}, {&S_producers, "producers"},
        {&S_round_robin, "_round_robin"}, {&S_batch, "batch"}, {&S_ready, "ready"},
        {&S_max_batch_bytes, "max_batch_bytes"}, {&S_key_field, "key_field"}, {&S_tags, "tags"},
        {&S_policy, "policy"}, {&S_max_messages, "max_messages"}, {&S_key_based, "key_based"},
        {&S_outstanding, "outstanding"}, {&S_seal, "seal"}, {&S_batch_sealed, "batch_sealed"},
        {&S_batch_opened, "batch_opened"}, {&S_tag_last, "tag_last"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!(*names[i].slot = PyUnicode_InternFromString(names[i].text))) return NULL;
    R_MALFORMED = PyUnicode_InternFromString("malformed");
    R_UNSUPPORTED_API_KEY = PyUnicode_InternFromString("unsupported_api_key");
    R_UNSUPPORTED_VERSION = PyUnicode_InternFromString("unsupported_version");
    EMPTY_BYTES = PyBytes_FromStringAndSize(NULL, 0);
    if (!R_MALFORMED || !R_UNSUPPORTED_API_KEY || !R_UNSUPPORTED_VERSION || !EMPTY_BYTES)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (!module) return NULL;
    Py_INCREF(&EntriesType);
    Py_INCREF(&ReceiverType);
    Py_INCREF(&AdmitterType);
    if (PyModule_AddObject(module, "Entries", (PyObject *)&EntriesType) < 0 ||
        PyModule_AddObject(module, "Admitter", (PyObject *)&AdmitterType) < 0 ||
        PyModule_AddObject(module, "Receiver", (PyObject *)&ReceiverType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
