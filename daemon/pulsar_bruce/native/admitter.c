#include "admitter.h"

/* ------------------------------------------------------------------ Admitter */

/* Intake.admit_py (route/intake.py) for the common case, in C: a valid message for a
 * known topic that has partitions, which the admission decision (admission.c) accepts
 * into memory.  Everything else (a discard, a new topic, the disk spool, stream
 * backpressure, a topic still waiting for its partition count, a delayed message) goes
 * to admit_py whole, before any side effect, so the Python intake decides it exactly as
 * it does alone.  The steps and their order mirror admit_py and the one admission rule
 * it shares with the spool's replay and the messages that waited for their topic:
 * prepare() and Appender.place/append (route/appender.py); the partition is chosen by
 * pb_choose (state.c), which Topic.choose runs too.  The differential tests run one
 * workload through both intakes and compare every batch, frame and discard. */

/* Before any Python code runs: the pending acceptances are told, the cache goes. */
int pb_settle(Admitter *self) {
    self->cached = 0;
    if (!self->pending_count) return 0;
    long long count = self->pending_count, charge = self->pending_charge;
    self->pending_count = self->pending_charge = 0;
    PyObject *tag = self->tag ? self->tag : Py_None;
    PyObject *done = PyObject_CallFunction(self->accepted, "LLO", count, charge, tag);
    Py_XDECREF(done);
    return done ? 0 : -1;
}

/* The end of a call: settle, keeping an exception already raised. */
static int finish(Admitter *self) {
    int settled;
    if (!PyErr_Occurred()) {
        settled = pb_settle(self);
    } else {
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if ((settled = pb_settle(self)) < 0) PyErr_Clear();
        PyErr_Restore(type, value, traceback);
        settled = -1;
    }
    return settled;
}

/* The room in memory (headroom()), read once between call-outs. */
static int load_room(Admitter *self) {
    if (self->cached) return 0;
    PyObject *room = PyObject_CallNoArgs(self->headroom);
    if (!room) return -1;
    int failed = pb_as_limit(room, &self->room);
    Py_DECREF(room);
    if (failed) return -1;
    self->cached = 1;
    return 0;
}

/* The TopicState for the topic bytes at ``name`` (borrowed: the topics dict holds it), or
 * NULL: a new topic (or an error, set). */
static TopicState *topic_of(Admitter *self, const char *name, Py_ssize_t name_size) {
    PyObject *last = self->last_topic_bytes, *topic_bytes;
    if (last && PyBytes_GET_SIZE(last) == name_size &&
        memcmp(PyBytes_AS_STRING(last), name, name_size) == 0) {
        topic_bytes = Py_NewRef(last);
    } else if (!(topic_bytes = PyBytes_FromStringAndSize(name, name_size))) {
        return NULL;
    }
    PyObject *topic = PyDict_GetItemWithError(self->topics, topic_bytes);
    if (topic && Py_IS_TYPE(topic, &pb_TopicStateType)) {
        Py_XSETREF(self->last_topic_bytes, topic_bytes);
        return (TopicState *)topic;
    }
    Py_DECREF(topic_bytes);
    return NULL;
}

/* A key routing hash of the key: the message's partition key; 1, 0 (admit_py decides) or -1. */
static int hash_key(Admitter *self, TopicState *topic, const char *key, Py_ssize_t key_size,
                    long long *partition_key) {
    PyObject *owned = PyBytes_FromStringAndSize(key, key_size);
    PyObject *hashed = owned && pb_settle(self) == 0
                           ? PyObject_CallOneArg(topic->key_hash, owned) : NULL;
    Py_XDECREF(owned);
    if (!hashed) return -1;
    int overflow = 0;
    *partition_key = PyLong_AsLongLongAndOverflow(hashed, &overflow);
    Py_DECREF(hashed);
    if (overflow) return 0;
    return (*partition_key == -1 && PyErr_Occurred()) ? -1 : 1;
}

/* 1: admitted here; 0: admit_py must decide (nothing was changed); -1: error. */
static int fast_admit(Admitter *self, PyObject *data) {
    if (!PyBytes_CheckExact(data)) return 0;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t length = PyBytes_GET_SIZE(data);
    if (load_room(self) < 0) return -1;
    if (length > self->max_message_bytes) return 0;
    View view = {0};
    if (pb_parse_view(p, length, &view)) return 0;
    PyObject *why = NULL;
    if (view.is_record) {
        int parsed = pb_parse_message(p, length, &view, &why);
        if (parsed) return parsed < 0 ? -1 : 0;
    }
    const char *fields = view.fields ? PyBytes_AS_STRING(view.fields) : NULL;
    Py_ssize_t fields_size = view.fields ? PyBytes_GET_SIZE(view.fields) : 0;
    TopicState *topic = NULL;
    PartitionState *partition = NULL;
    PyObject *key_field = NULL;
    int outcome = -1;
    if (fields_size > 1 && (unsigned char)fields[1] == DELIVER_TAG1 &&
        ((unsigned char)fields[0] == DELIVER_AT_TAG0 ||
         (unsigned char)fields[0] == DELIVER_AFTER_TAG0)) {
        outcome = 0;  /* delayed: never batched, admit_py seals around it */
        goto done;
    }
    topic = topic_of(self, (const char *)p + view.topic_start, view.topic_end - view.topic_start);
    if (!topic) { outcome = PyErr_Occurred() ? -1 : 0; goto done; }  /* new: topics.add */
    Py_INCREF(topic);  /* a call-out below may drop it from the dict */
    if (length > topic->max_message_bytes || PyTuple_GET_SIZE(topic->partitions) == 0) {
        outcome = 0;  /* too large, partitions unknown: admit_py decides (before any hash) */
        goto done;
    }
    const char *key = (const char *)p + view.key_start;
    Py_ssize_t key_size = view.key_end - view.key_start;
    long long partition_key = view.partition_key;
    if (key_size && partition_key < 0 && topic->key_hash) {  /* hashed like a Java producer */
        int hashed = hash_key(self, topic, key, key_size, &partition_key);
        if (hashed <= 0) { outcome = hashed; goto done; }
    }
    if (!(key_field = pb_key_field_of(self, key, key_size, fields, fields_size))) goto done;
    Py_ssize_t value_size = length - view.value_start;
    long long charge = PyBytes_GET_SIZE(key_field) + value_size + self->entry_overhead;
    if (load_room(self) < 0) goto done;  /* again: a call-out above may have settled */
    int sender = self->tag == Py_None ? PB_DATAGRAM : PB_STREAM;
    if (pb_admission(topic, length, charge, self->room - self->pending_charge, LLONG_MAX,
                     sender) != PB_ACCEPT ||
        PyTuple_GET_SIZE(topic->partitions) == 0) {
        outcome = 0;  /* refused, spilled, waiting or not routed yet: admit_py acts on it */
        goto done;
    }
    long long budget_left = topic->rate_budget;
    int limited = topic->limited;
    /* Decided: from here on it is admitted here (pb_choose() only moves the round-robin). */
    partition = (PartitionState *)Py_NewRef(
        PyTuple_GET_ITEM(topic->partitions, pb_choose(topic, partition_key)));
    self->pending_count++;  /* told at the next settle() */
    self->pending_charge += charge;
    if (pb_append(self, partition, key_field, view.timestamp, (const char *)p + view.value_start,
                  value_size, charge) < 0)
        goto done;
    if (limited) {  /* as admit_py: the budget read before, less one */
        topic->limited = 1;
        topic->rate_budget = budget_left - 1;
    }
    outcome = 1;
done:
    Py_XDECREF(view.fields);
    Py_XDECREF(topic);
    Py_XDECREF(partition);
    Py_XDECREF(key_field);
    return outcome;
}

/* admit(data, tag=None) -> bool: Intake.admit's contract (see route/intake.py). */
static PyObject *admitter_admit(Admitter *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "admit(data, tag=None)");
        return NULL;
    }
    PyObject *outer = self->tag;  /* a call from a call-out of another admit() */
    self->tag = nargs == 2 ? args[1] : Py_None;
    int outcome = fast_admit(self, args[0]);
    int failed = finish(self) < 0 || outcome < 0;
    self->tag = outer;
    if (failed) return NULL;
    if (outcome) {
        self->admitted_here++;
        Py_RETURN_TRUE;
    }
    return PyObject_Vectorcall(self->slow, args, (size_t)nargs, NULL);
}

/* admit_records' loop: the index reached, or -1 with an exception. */
static Py_ssize_t admit_each(Admitter *self, PyObject *records, Py_ssize_t index, PyObject *tag,
                             long stop_key) {
    for (; index < PyList_GET_SIZE(records); index++) {
        PyObject *record = PyList_GET_ITEM(records, index);
        Py_INCREF(record);  /* admit_py may run any Python code */
        if (PyBytes_Check(record) && PyBytes_GET_SIZE(record) >= 6 &&
            rd_i16((const unsigned char *)PyBytes_AS_STRING(record) + 4) == stop_key) {
            Py_DECREF(record);
            break;
        }
        int outcome = fast_admit(self, record);
        if (outcome != 0) {
            Py_DECREF(record);
            if (outcome < 0) { finish(self); return -1; }
            self->admitted_here++;
            continue;
        }
        if (pb_settle(self) < 0) { Py_DECREF(record); finish(self); return -1; }
        PyObject *call[2] = {record, tag};
        PyObject *taken = PyObject_Vectorcall(self->slow, call, 2, NULL);
        Py_DECREF(record);
        int truth = taken ? PyObject_IsTrue(taken) : -1;
        Py_XDECREF(taken);
        if (truth < 0) { finish(self); return -1; }
        if (!truth) break;  /* backpressure */
    }
    return finish(self) < 0 ? -1 : index;
}

/* admit_records(records, start, tag, stop_api_key) -> the index of the first record not
 * admitted: one whose ApiKey is ``stop_api_key`` (the stream's flush request), one the
 * intake refused for backpressure, or len(records).  Intake.admit_records_py's contract. */
static PyObject *admitter_admit_records(Admitter *self, PyObject *const *args,
                                        Py_ssize_t nargs) {
    if (nargs != 4 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "admit_records(records: list, start, tag, stop_api_key)");
        return NULL;
    }
    PyObject *records = args[0], *tag = args[2];
    Py_ssize_t index = PyLong_AsSsize_t(args[1]);
    long stop_key = PyLong_AsLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    if (index < 0) index = 0;
    PyObject *outer = self->tag;  /* a call from a call-out of another admit() */
    self->tag = tag;
    index = admit_each(self, records, index, tag, stop_key);
    self->tag = outer;
    return index < 0 ? NULL : PyLong_FromSsize_t(index);
}

static int admitter_init(Admitter *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"slow", "topics", "accepted", "headroom", "seal", "opened",
                            "tag_last", "encode_key_field", "entry_overhead",
                            "max_message_bytes", NULL};
    PyObject *slow, *topics, *accepted, *headroom, *seal, *opened, *tag_last, *encode, *limit;
    long long overhead, max_message_bytes;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!$OOOOOOLO", names, &slow, &PyDict_Type,
                                     &topics, &accepted, &headroom, &seal, &opened, &tag_last,
                                     &encode, &overhead, &limit))
        return -1;
    PyObject *callables[] = {slow, accepted, headroom, seal, opened, tag_last, encode};
    for (size_t i = 0; i < sizeof callables / sizeof callables[0]; i++) {
        if (!PyCallable_Check(callables[i])) {
            PyErr_SetString(PyExc_TypeError, "Admitter() takes callables");
            return -1;
        }
    }
    if (pb_as_limit(limit, &max_message_bytes) < 0) return -1;
    self->tag = Py_None;
    if (pb_settle(self) < 0) return -1;  /* re-initialised */
    Py_XSETREF(self->slow, Py_NewRef(slow));
    Py_XSETREF(self->topics, Py_NewRef(topics));
    Py_XSETREF(self->accepted, Py_NewRef(accepted));
    Py_XSETREF(self->headroom, Py_NewRef(headroom));
    Py_XSETREF(self->seal, Py_NewRef(seal));
    Py_XSETREF(self->opened, Py_NewRef(opened));
    Py_XSETREF(self->tag_last, Py_NewRef(tag_last));
    Py_XSETREF(self->encode_key_field, Py_NewRef(encode));
    self->entry_overhead = overhead;
    self->max_message_bytes = max_message_bytes;
    return 0;
}

static int admitter_traverse(Admitter *self, visitproc visit, void *arg) {
    Py_VISIT(self->slow); Py_VISIT(self->topics); Py_VISIT(self->accepted);
    Py_VISIT(self->headroom); Py_VISIT(self->seal); Py_VISIT(self->opened);
    Py_VISIT(self->tag_last); Py_VISIT(self->encode_key_field); Py_VISIT(self->last_topic_bytes);
    return 0;
}

static int admitter_clear(Admitter *self) {
    Py_CLEAR(self->slow); Py_CLEAR(self->topics); Py_CLEAR(self->accepted);
    Py_CLEAR(self->headroom); Py_CLEAR(self->seal); Py_CLEAR(self->opened);
    Py_CLEAR(self->tag_last); Py_CLEAR(self->encode_key_field); Py_CLEAR(self->last_topic_bytes);
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
    {"admit_records", (PyCFunction)(void (*)(void))admitter_admit_records, METH_FASTCALL,
     "admit_records(records, start, tag, stop_api_key) -> index of the first not admitted"},
    {NULL},
};

static PyObject *admitter_get_admitted_here(Admitter *self, void *c) {
    return PyLong_FromUnsignedLongLong(self->admitted_here);
}

static PyObject *admitter_get_max_message_bytes(Admitter *self, void *c) {
    return PyLong_FromLongLong(self->max_message_bytes);
}

static int admitter_set_max_message_bytes(Admitter *self, PyObject *value, void *c) {
    if (!value) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete");
        return -1;
    }
    return pb_as_limit(value, &self->max_message_bytes);
}

static PyGetSetDef admitter_getset[] = {
    {"admitted_here", (getter)admitter_get_admitted_here, NULL,
     "messages admitted without admit_py", NULL},
    {"max_message_bytes", (getter)admitter_get_max_message_bytes,
     (setter)admitter_set_max_message_bytes, "the largest message any topic takes", NULL},
    {NULL},
};

PyTypeObject pb_AdmitterType = {
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
