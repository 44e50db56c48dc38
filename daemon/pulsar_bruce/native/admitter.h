/* The compiled admitter's shared parts (admitter.c, admitter_append.c): its state and the
 * steps the two files share.  It reads only its own types' structs (intake.h: TopicState,
 * PartitionState, Entries, TagRun) and calls only the callables it was constructed with
 * (_intake.pyi declares them): no attribute of a Python object is looked up by name. */
#ifndef PULSAR_BRUCE_ADMITTER_H
#define PULSAR_BRUCE_ADMITTER_H
#include "intake.h"

/* Within one admit() or admit_records() call, Python code runs only at the call-outs
 * (admit_py, a batch sealed or opened, a new tag run, a key hasher or encoder), and each is
 * preceded by settle(); between them the ledger's room stays put, so it is read once
 * (``cached``) instead of once per message, and the messages accepted meanwhile are told
 * to the Python side in one ``accepted(count, charge, tag)`` call. */
typedef struct {
    PyObject_HEAD
    PyObject *slow, *topics, *accepted, *headroom, *seal, *opened, *tag_last,
        *encode_key_field;
    long long entry_overhead, max_message_bytes;
    PyObject *last_topic_bytes;  /* the last topic's bytes: a key of topics */
    unsigned long long admitted_here;  /* taken without admit_py (for tests and profiles) */
    int cached;                  /* room is current */
    long long room;              /* memory_limit - buffered_bytes, saturated */
    PyObject *tag;               /* this call's tag (borrowed for the call) */
    long long pending_count, pending_charge;  /* accepted, not yet told */
} Admitter;

int pb_settle(Admitter *self);
int pb_append(Admitter *self, PartitionState *partition, PyObject *key_field,
              long long timestamp, const char *value, Py_ssize_t value_size,
              long long charge);
PyObject *pb_key_field_of(Admitter *self, const char *key, Py_ssize_t key_size,
                          const char *fields, Py_ssize_t fields_size);

#endif
