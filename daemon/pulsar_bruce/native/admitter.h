/* The compiled admitter's shared parts (admitter.c, admitter_append.c): its state, the
 * attribute names it looks up (native/contract.py declares them), and the steps the
 * two files share. */
#ifndef PULSAR_BRUCE_ADMITTER_H
#define PULSAR_BRUCE_ADMITTER_H
#include "intake.h"

extern PyObject *S_max_message_bytes, *S_rate_budget, *S_key_hash, *S_buffered_bytes,
    *S_memory_limit, *S_producers, *S_round_robin, *S_batch, *S_ready, *S_available,
    *S_max_batch_bytes, *S_tags, *S_policy, *S_max_messages, *S_key_based, *S_outstanding, *S_seal,
    *S_batch_sealed, *S_batch_opened, *S_tag_last, *S_tag, *S_count;

/* Within one admit() or admit_records() call, Python code runs only at the call-outs
 * (admit_py, a batch sealed or opened, a tag run, a key hasher or encoder), and each is
 * preceded by settle(); between them the limits the Python objects hold stay put, so
 * they are read once (``cached``) instead of once per message, and the messages
 * accepted meanwhile are told to the ledger in one Ledger.accept_many call.  (A garbage
 * collection an allocation triggers frees only unreachable objects, never these.) */
typedef struct {
    PyObject_HEAD
    PyObject *intake, *slow, *by_bytes, *ledger, *accept_many, *policy, *events,
        *encode_key_field;
    long long entry_overhead;
    PyObject *last_topic_bytes;  /* the last topic's bytes: a key of by_bytes */
    unsigned long long admitted_here;  /* taken without admit_py (for tests and profiles) */
    int cached;                  /* the three below are current */
    long long intake_limit, memory_limit, buffered;
    PyObject *limit_topic;       /* whose topic_limit is cached (identity only, no reference) */
    long long topic_limit;
    PyObject *limits_producer;   /* whose limits are cached (identity only, no reference) */
    long long max_batch_bytes, max_messages;
    int key_based;
    long long pending_count, pending_charge;  /* accepted, not yet told to the ledger */
} Admitter;

int pb_get_ll(PyObject *obj, PyObject *name, long long *out);
int pb_get_limit(PyObject *obj, PyObject *name, long long *out);
int pb_settle(Admitter *self);
int pb_load_producer_limits(Admitter *self, PyObject *producer);
Entries *pb_batch_of(PyObject *producer);
PyObject *pb_choose(PyObject *topic, PyObject *producers, long long partition_key);
int pb_append(Admitter *self, PyObject *producer, Entries *batch, PyObject *key_field,
              long long timestamp, const char *value, Py_ssize_t value_size,
              long long charge, PyObject *tag);
PyObject *pb_key_field_of(Admitter *self, const char *key, Py_ssize_t key_size,
                          PyObject *key_object, const char *fields, Py_ssize_t fields_size);

#endif
