/* The Bruce datagram parser and the stream record splitter (see intake.h). */
#include "intake.h"

/* ------------------------------------------------------------ parse_datagram */


static PyObject *reason(PyObject *which) { Py_INCREF(which); return which; }

/* The parse result as Python sees it (parse/datagram.py's tuple): built from a View. */
static PyObject *result(PyObject *data, const View *view) {
    const char *p = PyBytes_AS_STRING(data);
    PyObject *topic = PyBytes_FromStringAndSize(p + view->topic_start,
                                                view->topic_end - view->topic_start);
    PyObject *key = PyBytes_FromStringAndSize(p + view->key_start,
                                              view->key_end - view->key_start);
    PyObject *partition_key = PyLong_FromLongLong(view->partition_key);
    PyObject *ts = PyLong_FromLongLong(view->timestamp);
    PyObject *offset = PyLong_FromSsize_t(view->value_start);
    PyObject *fields = view->fields ? view->fields : EMPTY_BYTES;
    PyObject *out = NULL;
    if (topic && key && ts && offset && partition_key)
        out = PyTuple_Pack(6, topic, partition_key, ts, key, offset, fields);
    Py_XDECREF(topic); Py_XDECREF(key); Py_XDECREF(ts); Py_XDECREF(offset);
    Py_XDECREF(partition_key);
    return out;
}

static int refuse(PyObject **why, PyObject *which) { *why = which; return 1; }

/* A Message record (ApiKey 260): Bruce's fields plus properties, and a delivery time, into
 * ``view`` (its ``fields`` a new reference).  0; 1 with *why the discard reason (borrowed);
 * -1 with an exception. */
int pb_parse_message(const unsigned char *p, Py_ssize_t length, View *view, PyObject **why) {
    int api_version = rd_i16(p + 6);
    if (api_version != 0) return refuse(why, R_UNSUPPORTED_VERSION);
    if (length < 16) return refuse(why, R_MALFORMED);
    int flags = rd_i16(p + 8);
    int64_t partition_key = rd_u32(p + 10);
    int topic_size = rd_i16(p + 14);
    int delay_flag = flags & (FLAG_DELIVER_AT | FLAG_DELIVER_AFTER);
    if ((flags & ~(FLAG_PARTITION_KEY | FLAG_DELIVER_AT | FLAG_DELIVER_AFTER)) ||
        delay_flag == (FLAG_DELIVER_AT | FLAG_DELIVER_AFTER) || topic_size <= 0)
        return refuse(why, R_MALFORMED);
    if (!(flags & FLAG_PARTITION_KEY)) partition_key = -1;
    Py_ssize_t topic_end = 16 + topic_size;
    Py_ssize_t delay_size = delay_flag ? 8 : 0;
    if (topic_end + 12 + delay_size > length) return refuse(why, R_MALFORMED);
    int64_t timestamp = rd_i64(p + topic_end);
    int64_t delay = delay_flag ? rd_i64(p + topic_end + 8) : 0;
    if (delay < 0 || (delay_flag == FLAG_DELIVER_AT && delay == 0)) return refuse(why, R_MALFORMED);
    topic_end += delay_size;  /* from here on: where the Timestamp's 8 bytes would end */
    int64_t key_size = rd_i32(p + topic_end + 8);
    Py_ssize_t key_start = topic_end + 12;
    int64_t offset = key_start + key_size;
    if (key_size < 0 || offset + 2 > length) return refuse(why, R_MALFORMED);
    int count = rd_i16(p + offset);
    offset += 2;
    if (count < 0) return refuse(why, R_MALFORMED);
    /* First pass: validate and size the encoded properties; second: write them. */
    int64_t fields_size = delay_flag ? 2 + varint_size((uint64_t)delay) : 0, scan = offset;
    for (int i = 0; i < count; i++) {
        if (scan + 2 > length) return refuse(why, R_MALFORMED);
        int64_t name_size = rd_i16(p + scan);
        int64_t name_end = scan + 2 + name_size;
        if (name_size < 0 || name_end + 4 > length) return refuse(why, R_MALFORMED);
        int64_t value_size = rd_i32(p + name_end);
        int64_t value_end = name_end + 4 + value_size;
        if (value_size < 0 || value_end > length) return refuse(why, R_MALFORMED);
        PyObject *text = PyUnicode_DecodeUTF8((const char *)p + scan + 2, name_size, "strict");
        if (text) {
            Py_DECREF(text);
            text = PyUnicode_DecodeUTF8((const char *)p + name_end + 4, value_size, "strict");
        }
        if (!text) {  /* protobuf strings must be UTF-8 */
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return -1;
            PyErr_Clear();
            return refuse(why, R_MALFORMED);
        }
        Py_DECREF(text);
        int64_t pair = 1 + varint_size(name_size) + name_size + 1 + varint_size(value_size) + value_size;
        fields_size += 1 + varint_size(pair) + pair;
        scan = value_end;
    }
    if (scan + 4 > length) return refuse(why, R_MALFORMED);
    int64_t value_size = rd_i32(p + scan);
    int64_t value_start = scan + 4;
    if (value_size < 0 || value_start + value_size != length) return refuse(why, R_MALFORMED);
    PyObject *fields = PyBytes_FromStringAndSize(NULL, fields_size);
    if (!fields) return -1;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(fields);
    if (delay_flag) {
        *out++ = delay_flag == FLAG_DELIVER_AT ? DELIVER_AT_TAG0 : DELIVER_AFTER_TAG0;
        *out++ = DELIVER_TAG1;
        out = put_varint(out, (uint64_t)delay);
    }
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
    view->topic_start = 16;
    view->topic_end = topic_end - delay_size;
    view->partition_key = partition_key;
    view->timestamp = timestamp;
    view->key_start = key_start;
    view->key_end = key_start + key_size;
    view->value_start = value_start;
    view->fields = fields;
    return 0;
}


/* NULL when ``p`` parses (``view`` filled), else the discard reason (borrowed). */
PyObject *pb_parse_view(const unsigned char *p, Py_ssize_t length, View *view) {
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

PyObject *pb_parse_datagram(PyObject *module, PyObject *data) {
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "parse_datagram() takes bytes");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    View view = {0};
    PyObject *why = pb_parse_view(p, PyBytes_GET_SIZE(data), &view);
    if (why) return reason(why);
    if (view.is_record) {
        int parsed = pb_parse_message(p, PyBytes_GET_SIZE(data), &view, &why);
        if (parsed < 0) return NULL;
        if (parsed) return reason(why);
    }
    PyObject *out = result(data, &view);
    Py_XDECREF(view.fields);
    return out;
}

/* ------------------------------------------------------------- split_records */

/* split_records(buffer, offset, max_record_bytes) -> the complete stream records in
 * ``buffer`` from ``offset`` (input/stream_session.py split_records_py). */
PyObject *pb_split_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
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
