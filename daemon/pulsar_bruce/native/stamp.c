/* stamp_sequence_ids: each entry of a batch gets its own sequence id, once per batch at
 * first send (twin: batch/entries.py stamp_sequence_ids_py; the differential tests
 * compare them byte for byte).  One pass, one allocation for the result. */
#include "intake.h"

static int read_varint(const unsigned char **p, const unsigned char *end, uint64_t *out) {
    uint64_t value = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (*p >= end) return -1;
        unsigned char byte = *(*p)++;
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) { *out = value; return 0; }
    }
    return -1;
}

/* The field at *p: skips it, and gives its tag; -1 when malformed. */
static int skip_field(const unsigned char **p, const unsigned char *end, uint64_t *tag,
                      uint64_t *value) {
    uint64_t n;
    if (read_varint(p, end, tag) < 0 || *tag >> 3 == 0 || *tag > 0xFFFFFFFFu) return -1;
    switch (*tag & 7) {
    case 0: return read_varint(p, end, value);
    case 1: n = 8; break;
    case 2: if (read_varint(p, end, &n) < 0) return -1; break;
    case 5: n = 4; break;
    default: return -1;  /* groups: never in a SingleMessageMetadata */
    }
    if (n > (uint64_t)(end - *p)) return -1;
    *p += n;
    return 0;
}

/* A SingleMessageMetadata: its payload_size (the last one, an int32 as protobuf reads
 * it) and whether it has a sequence_id (8, varint: 0x40); -1 when malformed. */
static int walk(const unsigned char *p, const unsigned char *end, int32_t *payload_size,
                int *stamped) {
    *payload_size = 0;
    *stamped = 0;
    while (p < end) {
        uint64_t tag, value = 0;
        if (skip_field(&p, end, &tag, &value) < 0) return -1;
        if (tag == 0x18) *payload_size = (int32_t)(uint32_t)value;
        else if (tag == 0x40) *stamped = 1;
    }
    return *payload_size < 0 ? -1 : 0;
}

/* Copies the fields of [p, end) but its sequence_ids to out; returns the end written. */
static unsigned char *copy_unstamped(const unsigned char *p, const unsigned char *end,
                                     unsigned char *out) {
    while (p < end) {
        const unsigned char *start = p;
        uint64_t tag, value;
        skip_field(&p, end, &tag, &value);  /* walk() checked them */
        if (tag != 0x40) {
            memcpy(out, start, p - start);
            out += p - start;
        }
    }
    return out;
}

static PyObject *malformed(void) {
    PyErr_SetString(PyExc_ValueError, "malformed batch entries");
    return NULL;
}

/* stamp_sequence_ids(payload, first_id, count) -> the entries, each with its id */
PyObject *pb_stamp_sequence_ids(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "stamp_sequence_ids(payload: bytes, first_id, count)");
        return NULL;
    }
    int first_overflow = 0, count_overflow = 0;
    long long first = PyLong_AsLongLongAndOverflow(args[1], &first_overflow);
    long long count = PyLong_AsLongLongAndOverflow(args[2], &count_overflow);
    if (PyErr_Occurred()) return NULL;
    if (first_overflow || count_overflow || first < 0 || count < 0 ||
        (count && first > LLONG_MAX - (count - 1))) {  /* ids are int64 on the wire */
        PyErr_SetString(PyExc_ValueError, "sequence ids out of range");
        return NULL;
    }
    const unsigned char *in = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    const unsigned char *end = in + PyBytes_GET_SIZE(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    if (count > size / 4) return malformed();  /* an entry has 4 bytes at least */
    for (long long i = 0; i < count; i++) size += 1 + varint_size((uint64_t)(first + i));
    PyObject *result = PyBytes_FromStringAndSize(NULL, size);
    if (!result) return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    for (long long i = 0; i < count; i++) {
        int32_t payload_size;
        int stamped;
        if (end - in < 4) goto bad;
        uint32_t metadata_size = rd_u32(in);
        const unsigned char *metadata = in + 4;
        if (metadata_size > (uint64_t)(end - metadata)) goto bad;
        const unsigned char *value = metadata + metadata_size;
        if (walk(metadata, value, &payload_size, &stamped) < 0 || payload_size > end - value)
            goto bad;
        unsigned char *field = out + 4;  /* the metadata, sequence_id first; then its size */
        out = put_varint(field + 1, (uint64_t)(first + i));
        field[0] = 0x40;  /* sequence_id, field 8 */
        if (stamped) {
            out = copy_unstamped(metadata, value, out);
            memcpy(out, value, payload_size);
        } else {  /* the metadata and the value in one copy */
            memcpy(out, metadata, metadata_size + (size_t)payload_size);
            out += metadata_size;
        }
        uint64_t written = (uint64_t)(out - field);
        if (written > 0xFFFFFFFFu) goto bad;
        field[-4] = (unsigned char)(written >> 24);
        field[-3] = (unsigned char)(written >> 16);
        field[-2] = (unsigned char)(written >> 8);
        field[-1] = (unsigned char)written;
        out += payload_size;
        in = value + payload_size;
    }
    if (in != end) goto bad;
    Py_ssize_t written = out - (unsigned char *)PyBytes_AS_STRING(result);
    if (written != size && _PyBytes_Resize(&result, written) < 0) return NULL;
    return result;
bad:
    Py_DECREF(result);
    return malformed();
}
