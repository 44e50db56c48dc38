/* pulsar_bruce.native._intake: what the compiled intake's files share.
 *
 * The files, each with its pure-Python twin (the differential tests compare them):
 *   parse.c     the datagram parser and the stream record splitter
 *               (parse/datagram.py parse_datagram_py, input/stream_session.py split_records_py)
 *   entries.c   a batch's entry buffer (batch/batch_builder.py _PyEntries), each key's
 *               batch with key-based batching (BatchBuilder.key_batch)
 *   state.c     what the admitter knows of a topic and of a partition, and the partition
 *               choice (route/topic_state.py PyTopicState, producer/partition_state.py
 *               PyPartitionState), and a batch's confirmation runs (model/confirmation.py)
 *   admission.c the admission decision for Python (pb_admission, below: admission_py)
 *   admitter.c  Intake.admit for the common case (route/intake.py admit_py)
 *   stamp.c     per-entry sequence ids at first send (batch/entries.py stamp_sequence_ids_py)
 *   receiver.c  the recvmmsg receive thread, without the GIL (input/socket_reader.py)
 *   module.c    the module
 */
#ifndef PULSAR_BRUCE_INTAKE_H
#define PULSAR_BRUCE_INTAKE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdint.h>
#include <string.h>

/* Discard reasons (reasons.py) and b"", made once by the module. */
extern PyObject *R_MALFORMED, *R_UNSUPPORTED_API_KEY, *R_UNSUPPORTED_VERSION, *EMPTY_BYTES;

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

#define API_ANY_PARTITION 256
#define API_PARTITION_KEY 257
#define API_MESSAGE 260
#define FLAG_PARTITION_KEY 0x0001
/* Message record flags: DeliverAt:int64 / DeliverAfter:int64 follow the Timestamp (one at
 * most); their SingleMessageMetadata field tags (parse/deliver_at.py: fields 1000, 1001). */
#define FLAG_DELIVER_AT 0x0002
#define FLAG_DELIVER_AFTER 0x0004
#define DELIVER_AT_TAG0 0xC0
#define DELIVER_AFTER_TAG0 0xC8
#define DELIVER_TAG1 0x3E

/* A parsed datagram or stream record: views into its bytes, and a Message record's
 * metadata fields (delivery time, properties: a new reference, NULL for the other formats). */
typedef struct {
    Py_ssize_t topic_start, topic_end, key_start, key_end, value_start;
    int64_t partition_key, timestamp;
    int is_record;  /* ApiKey 260: pb_parse_message() does the rest */
    PyObject *fields;
} View;

PyObject *pb_parse_view(const unsigned char *p, Py_ssize_t length, View *view);
int pb_parse_message(const unsigned char *p, Py_ssize_t length, View *view, PyObject **why);
PyObject *pb_parse_datagram(PyObject *module, PyObject *data);
PyObject *pb_split_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

typedef struct {
    PyObject_HEAD
    unsigned char *data;
    Py_ssize_t size, capacity;
    long long count, charged;
    PyObject *keys;  /* key-based batching: each key's open batch (a dict), or NULL */
    PyObject *tags;  /* the confirmation runs (a list of TagRun), or NULL: none yet */
} Entries;

extern PyTypeObject pb_EntriesType;
Py_ssize_t pb_entries_add(Entries *self, const char *key_field, Py_ssize_t key_size,
                          long long timestamp, const char *value, Py_ssize_t payload_size,
                          long long charge);
Entries *pb_key_batch(Entries *root, PyObject *key_field, long long charge);

PyObject *pb_stamp_sequence_ids(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *pb_write_then_consume(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* ``count`` consecutive messages of a batch that belong to ``tag`` (model/confirmation.py). */
typedef struct {
    PyObject_HEAD
    PyObject *tag;  /* a stream connection's Confirmation, or None */
    long long count;
} TagRun;

/* What the admitter knows of one partition's producer; the producer keeps it current
 * (producer/partition_state.py is the twin). */
typedef struct {
    PyObject_HEAD
    Entries *batch;   /* the open batch (the producer's BatchBuilder), never replaced */
    PyObject *owner;  /* the producer: handed back to the seal and opened callbacks */
    int ready, available;
    long long max_batch_bytes, max_messages;  /* saturated at LLONG_MAX */
    int key_based;
} PartitionState;

/* What the admitter knows of one topic: its partitions in order, the round-robin position,
 * the limits (route/topic_state.py is the twin, with the same choice rule). */
typedef struct {
    PyObject_HEAD
    PyObject *partitions;  /* a tuple of PartitionState */
    long long round_robin;
    long long max_message_bytes;  /* saturated at LLONG_MAX */
    int limited;                  /* rate_budget is not None */
    long long rate_budget;
    PyObject *key_hash;           /* key routing's hash, or NULL */
} TopicState;

extern PyTypeObject pb_TagRunType, pb_PartitionStateType, pb_TopicStateType;
/* TopicState.choose: the index of the partition for ``partition_key`` (-1: round-robin);
 * the topic has partitions. */
Py_ssize_t pb_choose(TopicState *topic, long long partition_key);
/* A Python int as a limit: beyond long long it saturates (0, or -1 with an exception). */
int pb_as_limit(PyObject *value, long long *out);

/* The admission decision (admission.c; model/admission.py is the twin): the verdicts, the
 * senders' policies (the same numbers as DATAGRAM, STREAM, NUMBERED and REPLAY there). */
enum { PB_ACCEPT, PB_SPILL, PB_WAIT, PB_TOO_LARGE, PB_RATE_LIMITED, PB_BUFFER_FULL,
       PB_VERDICTS };
enum { PB_DATAGRAM, PB_STREAM, PB_NUMBERED, PB_REPLAY };
/* A pure function of the topic's limits, the message's size and charge, the room memory has
 * left (of its capacity) and the sender's policy; inline, since the admitter asks it per
 * message. */
static inline int pb_admission(const TopicState *topic, long long size, long long charge,
                               long long room, long long capacity, int sender) {
    if (topic) {
        if (size > topic->max_message_bytes) return PB_TOO_LARGE;
        if (topic->limited && topic->rate_budget <= 0 && sender != PB_REPLAY)
            return sender == PB_NUMBERED ? PB_WAIT : PB_RATE_LIMITED;
        if (sender == PB_NUMBERED && PyTuple_GET_SIZE(topic->partitions) == 0)
            return PB_WAIT;  /* the partition count is being looked up */
    }
    if (charge <= room) return PB_ACCEPT;
    if (sender == PB_DATAGRAM) return PB_SPILL;
    if (sender == PB_REPLAY) return PB_BUFFER_FULL;
    return charge > capacity ? PB_TOO_LARGE : PB_WAIT;  /* never fits: not worth waiting */
}
PyObject *pb_admission_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
int pb_admission_ready(void);

extern PyTypeObject pb_AdmitterType;

extern PyTypeObject pb_ReceiverType;

#endif
