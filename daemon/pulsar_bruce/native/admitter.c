#include "admitter.h"

/* ------------------------------------------------------------------ Admitter */

/* Intake.admit_py (route/intake.py) for the common case, in C: a valid message for a
 * known topic that has producers, within its size and rate limits, with memory to
 * spare.  Everything else (a discard, a new topic, the disk spool, stream
 * backpressure, a topic still waiting for its partition count) goes to admit_py whole,
 * before any side effect, so the Python intake decides it exactly as it does alone.
 * The steps and their order mirror admit_py and the one admission rule it shares with
 * the spool's replay and the messages that waited for their topic: prepare() and
 * Appender.place/append (route/appender.py), Topic.choose (route/router.py); the
 * differential tests run one workload through both and compare every batch, frame and
 * discard. */

/* The attribute names looked up (pb_admitter_names; declared in native/contract.py). */
PyObject *S_max_message_bytes, *S_rate_budget, *S_key_hash, *S_buffered_bytes,
    *S_memory_limit, *S_producers, *S_round_robin, *S_batch, *S_ready, *S_available,
    *S_max_batch_bytes, *S_tags, *S_policy, *S_max_messages, *S_key_based, *S_outstanding,
    *S_seal, *S_batch_sealed, *S_batch_opened, *S_tag_last, *S_tag, *S_count;

/* Before any Python code runs: the ledger gets the pending acceptances, the cache goes. */
int pb_settle(Admitter *self) {
    self->cached = 0;
    self->limit_topic = self->limits_producer = NULL;
    if (!self->pending_count) return 0;
    long long count = self->pending_count, charge = self->pending_charge;
    self->pending_count = self->pending_charge = 0;
    PyObject *done = PyObject_CallFunction(self->accept_many, "LL", count, charge);
    Py_XDECREF(done);
    return done ? 0 : -1;
}

/* The end of a call: settle, keeping an exception already raised. */
static int finish(Admitter *self) {
    if (!PyErr_Occurred()) return pb_settle(self);
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (pb_settle(self) < 0) PyErr_Clear();
    PyErr_Restore(type, value, traceback);
    return -1;
}

static int load_limits(Admitter *self) {
    if (self->cached) return 0;
    if (pb_get_limit(self->intake, S_max_message_bytes, &self->intake_limit) < 0 ||
        pb_get_limit(self->policy, S_memory_limit, &self->memory_limit) < 0 ||
        pb_get_limit(self->ledger, S_buffered_bytes, &self->buffered) < 0)
        return -1;
    self->cached = 1;
    return 0;
}

static int load_topic_limit(Admitter *self, PyObject *topic) {
    if (topic == self->limit_topic) return 0;
    self->limit_topic = NULL;
    if (pb_get_limit(topic, S_max_message_bytes, &self->topic_limit) < 0) return -1;
    self->limit_topic = topic;
    return 0;
}

/* 1: admitted here; 0: admit_py must decide (nothing was changed); -1: error. */
static int fast_admit(Admitter *self, PyObject *data, PyObject *tag) {
    if (!PyBytes_CheckExact(data)) return 0;
    const char *p = PyBytes_AS_STRING(data);
    Py_ssize_t length = PyBytes_GET_SIZE(data);
    if (load_limits(self) < 0) return -1;
    if (length > self->intake_limit) return 0;
    View view = {0};
    if (pb_parse_view((const unsigned char *)p, length, &view)) return 0;
    PyObject *record = NULL, *topic_bytes = NULL, *topic = NULL, *budget = NULL,
             *key_field = NULL, *producers = NULL, *producer = NULL, *hashed = NULL;
    Entries *batch = NULL;
    int outcome = -1;
    const char *key = p + view.key_start, *fields = NULL;
    Py_ssize_t key_size = view.key_end - view.key_start, fields_size = 0;
    PyObject *key_object = NULL;  /* borrowed from record when there is one */
    if (view.is_record) {
        record = pb_parse_message(data, rd_i16((const unsigned char *)p + 6));
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
        if (fields_size > 1 && (unsigned char)fields[1] == DELIVER_TAG1 &&
            ((unsigned char)fields[0] == DELIVER_AT_TAG0 ||
             (unsigned char)fields[0] == DELIVER_AFTER_TAG0)) {
            outcome = 0;  /* delayed: never batched, admit_py seals around it */
            goto done;
        }
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
    long long budget_left = 0;
    if (load_topic_limit(self, topic) < 0) goto done;
    if (length > self->topic_limit) { outcome = 0; goto done; }
    if (!(budget = PyObject_GetAttr(topic, S_rate_budget))) goto done;
    if (budget != Py_None) {
        int overflow = 0;
        budget_left = PyLong_AsLongLongAndOverflow(budget, &overflow);
        if (budget_left == -1 && PyErr_Occurred()) goto done;
        if (overflow || budget_left <= 0) { outcome = 0; goto done; }  /* admit_py decides */
    }
    long long partition_key = view.partition_key;
    if (key_size && partition_key < 0) {  /* key routing: hashed like a Java producer */
        PyObject *key_hash = PyObject_GetAttr(topic, S_key_hash);
        if (!key_hash) goto done;
        if (key_hash != Py_None) {
            PyObject *owned = key_object ? (Py_INCREF(key_object), key_object)
                                         : PyBytes_FromStringAndSize(key, key_size);
            hashed = owned && pb_settle(self) == 0 ? PyObject_CallOneArg(key_hash, owned) : NULL;
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
    if (!(key_field = pb_key_field_of(self, key, key_size, key_object, fields, fields_size))) goto done;
    Py_ssize_t value_size = length - view.value_start;
    long long charge = PyBytes_GET_SIZE(key_field) + value_size + self->entry_overhead;
    if (load_limits(self) < 0) goto done;  /* again: a call-out above may have settled */
    long long buffered = self->buffered;
    if (buffered == LLONG_MAX || buffered == LLONG_MIN) { outcome = 0; goto done; }
    if (buffered + self->pending_charge + charge > self->memory_limit) {
        outcome = 0;  /* spool or wait: admit_py decides */
        goto done;
    }
    if (!(producers = PyObject_GetAttr(topic, S_producers))) goto done;
    if (!PyList_Check(producers) || PyList_GET_SIZE(producers) == 0) { outcome = 0; goto done; }
    /* Decided: from here on it is admitted here (pb_choose() only moves the round-robin). */
    if (!(producer = pb_choose(topic, producers, partition_key))) goto done;
    if (!(batch = pb_batch_of(producer))) goto done;
    self->pending_count++;  /* Ledger.accept(charge), told at the next settle() */
    self->pending_charge += charge;
    if (tag != Py_None) {
        long long outstanding;
        if (pb_get_ll(tag, S_outstanding, &outstanding) < 0) goto done;
        PyObject *more = PyLong_FromLongLong(outstanding + 1);
        int failed = !more || PyObject_SetAttr(tag, S_outstanding, more) < 0;
        Py_XDECREF(more);
        if (failed) goto done;
    }
    if (pb_append(self, producer, batch, key_field, view.timestamp, p + view.value_start, value_size,
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
    if (finish(self) < 0) return NULL;
    if (outcome < 0) return NULL;
    if (outcome) {
        self->admitted_here++;
        Py_RETURN_TRUE;
    }
    return PyObject_Vectorcall(self->slow, args, (size_t)nargs, NULL);
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
    for (; index < PyList_GET_SIZE(records); index++) {
        PyObject *record = PyList_GET_ITEM(records, index);
        Py_INCREF(record);  /* admit_py may run any Python code */
        if (PyBytes_Check(record) && PyBytes_GET_SIZE(record) >= 6 &&
            rd_i16((const unsigned char *)PyBytes_AS_STRING(record) + 4) == stop_key) {
            Py_DECREF(record);
            break;
        }
        int outcome = fast_admit(self, record, tag);
        if (outcome != 0) {
            Py_DECREF(record);
            if (outcome < 0) { finish(self); return NULL; }
            self->admitted_here++;
            continue;
        }
        if (pb_settle(self) < 0) { Py_DECREF(record); return NULL; }
        PyObject *call[2] = {record, tag};
        PyObject *taken = PyObject_Vectorcall(self->slow, call, 2, NULL);
        Py_DECREF(record);
        if (!taken) return NULL;
        int truth = PyObject_IsTrue(taken);
        Py_DECREF(taken);
        if (truth < 0) return NULL;
        if (!truth) break;  /* backpressure */
    }
    if (finish(self) < 0) return NULL;
    return PyLong_FromSsize_t(index);
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
    PyObject *accept_many = PyObject_GetAttrString(ledger, "accept_many");
    if (!accept_many) return -1;
    if (pb_settle(self) < 0) { Py_DECREF(accept_many); return -1; }  /* re-initialised */
    Py_INCREF(intake); Py_INCREF(slow); Py_INCREF(by_bytes); Py_INCREF(ledger);
    Py_INCREF(policy); Py_INCREF(events); Py_INCREF(encode);
    Py_XSETREF(self->intake, intake);
    Py_XSETREF(self->slow, slow);
    Py_XSETREF(self->by_bytes, by_bytes);
    Py_XSETREF(self->ledger, ledger);
    Py_XSETREF(self->accept_many, accept_many);
    Py_XSETREF(self->policy, policy);
    Py_XSETREF(self->events, events);
    Py_XSETREF(self->encode_key_field, encode);
    self->entry_overhead = overhead;
    return 0;
}

static int admitter_traverse(Admitter *self, visitproc visit, void *arg) {
    Py_VISIT(self->intake); Py_VISIT(self->slow); Py_VISIT(self->by_bytes);
    Py_VISIT(self->ledger); Py_VISIT(self->accept_many); Py_VISIT(self->policy);
    Py_VISIT(self->events); Py_VISIT(self->encode_key_field); Py_VISIT(self->last_topic_bytes);
    return 0;
}

static int admitter_clear(Admitter *self) {
    Py_CLEAR(self->intake); Py_CLEAR(self->slow); Py_CLEAR(self->by_bytes);
    Py_CLEAR(self->ledger); Py_CLEAR(self->accept_many); Py_CLEAR(self->policy);
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
    {"admit_records", (PyCFunction)(void (*)(void))admitter_admit_records, METH_FASTCALL,
     "admit_records(records, start, tag, stop_api_key) -> index of the first not admitted"},
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

int pb_admitter_names(void) {
    struct { PyObject **slot; const char *text; } names[] = {
        {&S_max_message_bytes, "max_message_bytes"}, {&S_rate_budget, "rate_budget"},
        {&S_key_hash, "key_hash"}, {&S_buffered_bytes, "buffered_bytes"},
        {&S_memory_limit, "memory_limit"}, {&S_producers, "producers"},
        {&S_round_robin, "round_robin"}, {&S_batch, "batch"}, {&S_ready, "ready"},
        {&S_available, "available"}, {&S_max_batch_bytes, "max_batch_bytes"}, {&S_tags, "tags"},
        {&S_policy, "policy"}, {&S_max_messages, "max_messages"}, {&S_key_based, "key_based"},
        {&S_outstanding, "outstanding"}, {&S_seal, "seal"}, {&S_batch_sealed, "batch_sealed"},
        {&S_batch_opened, "batch_opened"}, {&S_tag_last, "tag_last"},
        {&S_tag, "tag"}, {&S_count, "count"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!(*names[i].slot = PyUnicode_InternFromString(names[i].text))) return -1;
    return 0;
}
