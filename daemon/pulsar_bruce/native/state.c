/* The state the admitter owns (see intake.h): a batch's confirmation runs (TagRun), what it
 * knows of a partition (PartitionState) and of a topic (TopicState), and the one partition
 * choice rule.  The Python side changes it only through these types' declared members and
 * methods (_intake.pyi); the admitter reads their structs, never a Python object's
 * attributes.  Twins: model/confirmation.py _PyTagRun, producer/partition_state.py
 * PyPartitionState, route/topic_state.py PyTopicState (tests/unit/daemon/native/
 * test_state.py runs both through the same operations). */
#include "intake.h"
#include <structmember.h>

int pb_as_limit(PyObject *value, long long *out) {
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow) *out = overflow > 0 ? LLONG_MAX : LLONG_MIN;
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int no_delete(PyObject *value) {
    if (value) return 0;
    PyErr_SetString(PyExc_AttributeError, "cannot delete");
    return -1;
}

/* ------------------------------------------------------------------- TagRun */

static int tag_run_init(TagRun *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"tag", "count", NULL};
    PyObject *tag;
    long long count = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|L", names, &tag, &count)) return -1;
    Py_INCREF(tag);
    Py_XSETREF(self->tag, tag);
    self->count = count;
    return 0;
}

static int tag_run_traverse(TagRun *self, visitproc visit, void *arg) {
    Py_VISIT(self->tag);
    return 0;
}

static int tag_run_clear(TagRun *self) {
    Py_CLEAR(self->tag);
    return 0;
}

static void tag_run_dealloc(TagRun *self) {
    PyObject_GC_UnTrack(self);
    tag_run_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *tag_run_get_tag(TagRun *self, void *c) {
    PyObject *tag = self->tag ? self->tag : Py_None;
    Py_INCREF(tag);
    return tag;
}

static PyGetSetDef tag_run_getset[] = {
    {"tag", (getter)tag_run_get_tag, NULL, "the stream connection's Confirmation, or None", NULL},
    {NULL},
};

static PyMemberDef tag_run_members[] = {
    {"count", T_LONGLONG, offsetof(TagRun, count), 0, "consecutive messages of the batch"},
    {NULL},
};

PyTypeObject pb_TagRunType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pulsar_bruce.native._intake.TagRun",
    .tp_doc = "TagRun(tag, count=1): count consecutive messages of a batch that belong to tag.",
    .tp_basicsize = sizeof(TagRun),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)tag_run_init,
    .tp_dealloc = (destructor)tag_run_dealloc,
    .tp_traverse = (traverseproc)tag_run_traverse,
    .tp_clear = (inquiry)tag_run_clear,
    .tp_getset = tag_run_getset,
    .tp_members = tag_run_members,
};

/* ----------------------------------------------------------- PartitionState */

/* A partition's state, complete before __init__ (which does nothing more). */
static PyObject *partition_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"batch", "owner", NULL};
    PyObject *batch, *owner;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O", names, &pb_EntriesType, &batch, &owner))
        return NULL;
    PartitionState *self = (PartitionState *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->batch = (Entries *)Py_NewRef(batch);
    self->owner = Py_NewRef(owner);
    self->available = 1;
    self->max_batch_bytes = self->max_messages = LLONG_MAX;
    return (PyObject *)self;
}

static int partition_traverse(PartitionState *self, visitproc visit, void *arg) {
    Py_VISIT(self->batch);
    Py_VISIT(self->owner);
    return 0;
}

static int partition_clear(PartitionState *self) {
    Py_CLEAR(self->batch);
    Py_CLEAR(self->owner);
    return 0;
}

static void partition_dealloc(PartitionState *self) {
    PyObject_GC_UnTrack(self);
    partition_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* limits(max_batch_bytes, max_messages, key_based): the producer's batching limits changed. */
static PyObject *partition_limits(PartitionState *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "limits(max_batch_bytes, max_messages, key_based)");
        return NULL;
    }
    long long max_batch_bytes, max_messages;
    int key_based = PyObject_IsTrue(args[2]);
    if (key_based < 0 || pb_as_limit(args[0], &max_batch_bytes) < 0 ||
        pb_as_limit(args[1], &max_messages) < 0)
        return NULL;
    self->max_batch_bytes = max_batch_bytes;
    self->max_messages = max_messages;
    self->key_based = key_based;
    Py_RETURN_NONE;
}

static PyObject *partition_get_flag(PartitionState *self, void *which) {
    return PyBool_FromLong(which ? self->available : self->ready);
}

static int partition_set_flag(PartitionState *self, PyObject *value, void *which) {
    int truth = no_delete(value) < 0 ? -1 : PyObject_IsTrue(value);
    if (truth < 0) return -1;
    *(which ? &self->available : &self->ready) = truth;
    return 0;
}

static PyObject *partition_get_batch(PartitionState *self, void *c) {
    return Py_NewRef(self->batch ? (PyObject *)self->batch : Py_None);
}
static PyObject *partition_get_owner(PartitionState *self, void *c) {
    return Py_NewRef(self->owner ? self->owner : Py_None);
}
static PyObject *partition_get_max_batch_bytes(PartitionState *self, void *c) {
    return PyLong_FromLongLong(self->max_batch_bytes);
}
static PyObject *partition_get_max_messages(PartitionState *self, void *c) {
    return PyLong_FromLongLong(self->max_messages);
}
static PyObject *partition_get_key_based(PartitionState *self, void *c) {
    return PyBool_FromLong(self->key_based);
}

static PyMethodDef partition_methods[] = {
    {"limits", (PyCFunction)(void (*)(void))partition_limits, METH_FASTCALL,
     "limits(max_batch_bytes, max_messages, key_based): the batching limits changed"},
    {NULL},
};

static PyGetSetDef partition_getset[] = {
    {"ready", (getter)partition_get_flag, (setter)partition_set_flag,
     "registered on a connection: takes new messages", NULL},
    {"available", (getter)partition_get_flag, (setter)partition_set_flag,
     "PartitionKey routing keeps its messages here (not failed over)", (void *)1},
    {"batch", (getter)partition_get_batch, NULL, "the open batch", NULL},
    {"owner", (getter)partition_get_owner, NULL, "the producer (for the callbacks)", NULL},
    {"max_batch_bytes", (getter)partition_get_max_batch_bytes, NULL, "see limits()", NULL},
    {"max_messages", (getter)partition_get_max_messages, NULL, "see limits()", NULL},
    {"key_based", (getter)partition_get_key_based, NULL, "see limits()", NULL},
    {NULL},
};

PyTypeObject pb_PartitionStateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pulsar_bruce.native._intake.PartitionState",
    .tp_doc = "PartitionState(batch, owner): what the admitter knows of a partition's producer.",
    .tp_basicsize = sizeof(PartitionState),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = partition_new,
    .tp_dealloc = (destructor)partition_dealloc,
    .tp_traverse = (traverseproc)partition_traverse,
    .tp_clear = (inquiry)partition_clear,
    .tp_methods = partition_methods,
    .tp_getset = partition_getset,
};

/* --------------------------------------------------------------- TopicState */

/* The state of a new topic, complete before __init__ (which takes no arguments). */
static PyObject *topic_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "", names)) return NULL;
    TopicState *self = (TopicState *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    if (!(self->partitions = PyTuple_New(0))) {
        Py_DECREF(self);
        return NULL;
    }
    self->round_robin = -1;
    self->max_message_bytes = 1LL << 62;
    return (PyObject *)self;
}

static int topic_traverse(TopicState *self, visitproc visit, void *arg) {
    Py_VISIT(self->partitions);
    Py_VISIT(self->key_hash);
    return 0;
}

static int topic_clear(TopicState *self) {
    Py_CLEAR(self->partitions);
    Py_CLEAR(self->key_hash);
    return 0;
}

static void topic_dealloc(TopicState *self) {
    PyObject_GC_UnTrack(self);
    topic_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static inline PartitionState *partition_at(TopicState *self, Py_ssize_t index) {
    return (PartitionState *)PyTuple_GET_ITEM(self->partitions, index);
}

static inline long long floor_mod(long long a, long long n) {
    long long r = a % n;
    return r < 0 ? r + n : r;
}

/* AnyPartition (-1): stay on the current partition while its batch is open and it is ready,
 * else the next ready one (round-robin; the next one when none is).  PartitionKey: key % N
 * while that partition is available, else the next ready one (Bruce's failover), else
 * key % N again. */
Py_ssize_t pb_choose(TopicState *self, long long partition_key) {
    Py_ssize_t count = PyTuple_GET_SIZE(self->partitions);
    if (partition_key >= 0) {
        Py_ssize_t first = (Py_ssize_t)floor_mod(partition_key, count);
        if (partition_at(self, first)->available) return first;
        for (Py_ssize_t step = 1; step < count; step++) {
            Py_ssize_t candidate = (first + step) % count;
            if (partition_at(self, candidate)->ready) return candidate;
        }
        return first;
    }
    long long index = self->round_robin;  /* below count: partitions are only added */
    if (index >= 0) {
        PartitionState *current = partition_at(self, (Py_ssize_t)index);
        if (current->batch->count && current->ready) return (Py_ssize_t)index;
    }
    for (Py_ssize_t step = 1; step <= count; step++) {
        Py_ssize_t candidate = (Py_ssize_t)((index + step) % count);
        if (partition_at(self, candidate)->ready) {
            self->round_robin = candidate;
            return candidate;
        }
    }
    self->round_robin = (index + 1) % count;
    return (Py_ssize_t)self->round_robin;
}

/* choose(partition_key) -> the index of the partition for a message (see pb_choose). */
static PyObject *topic_choose(TopicState *self, PyObject *arg) {
    int overflow = 0;
    long long partition_key = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (partition_key == -1 && PyErr_Occurred()) return NULL;
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "partition key out of range");
        return NULL;
    }
    if (PyTuple_GET_SIZE(self->partitions) == 0) {
        PyErr_SetString(PyExc_ValueError, "the topic has no partitions yet");
        return NULL;
    }
    return PyLong_FromSsize_t(pb_choose(self, partition_key));
}

/* attach(partitions): the topic's partitions after these (in partition order) are added. */
static PyObject *topic_attach(TopicState *self, PyObject *arg) {
    PyObject *added = PySequence_Tuple(arg);
    if (!added) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(added); i++) {
        PyObject *item = PyTuple_GET_ITEM(added, i);
        if (!Py_IS_TYPE(item, &pb_PartitionStateType) || !((PartitionState *)item)->batch) {
            Py_DECREF(added);
            PyErr_SetString(PyExc_TypeError, "attach() takes PartitionState objects");
            return NULL;
        }
    }
    PyObject *all = PySequence_Concat(self->partitions, added);
    Py_DECREF(added);
    if (!all) return NULL;
    Py_SETREF(self->partitions, all);
    Py_RETURN_NONE;
}

static PyObject *topic_get_partitions(TopicState *self, void *c) {
    return Py_NewRef(self->partitions);
}
static PyObject *topic_get_round_robin(TopicState *self, void *c) {
    return PyLong_FromLongLong(self->round_robin);
}
static PyObject *topic_get_max_message_bytes(TopicState *self, void *c) {
    return PyLong_FromLongLong(self->max_message_bytes);
}
static int topic_set_max_message_bytes(TopicState *self, PyObject *value, void *c) {
    return no_delete(value) < 0 ? -1 : pb_as_limit(value, &self->max_message_bytes);
}
static PyObject *topic_get_rate_budget(TopicState *self, void *c) {
    if (!self->limited) Py_RETURN_NONE;
    return PyLong_FromLongLong(self->rate_budget);
}
static int topic_set_rate_budget(TopicState *self, PyObject *value, void *c) {
    if (no_delete(value) < 0) return -1;
    if (value == Py_None) {
        self->limited = 0;
        return 0;
    }
    if (pb_as_limit(value, &self->rate_budget) < 0) return -1;
    self->limited = 1;
    return 0;
}
static PyObject *topic_get_key_hash(TopicState *self, void *c) {
    return Py_NewRef(self->key_hash ? self->key_hash : Py_None);
}
static int topic_set_key_hash(TopicState *self, PyObject *value, void *c) {
    if (no_delete(value) < 0) return -1;
    if (value != Py_None && !PyCallable_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "key_hash must be callable or None");
        return -1;
    }
    Py_XSETREF(self->key_hash, value == Py_None ? NULL : Py_NewRef(value));
    return 0;
}

static PyMethodDef topic_methods[] = {
    {"choose", (PyCFunction)topic_choose, METH_O,
     "choose(partition_key) -> the index of the partition for a message (-1: AnyPartition)"},
    {"attach", (PyCFunction)topic_attach, METH_O,
     "attach(partitions): more PartitionState objects, in partition order"},
    {NULL},
};

static PyGetSetDef topic_getset[] = {
    {"partitions", (getter)topic_get_partitions, NULL, "the PartitionState objects", NULL},
    {"round_robin", (getter)topic_get_round_robin, NULL, "AnyPartition's current partition", NULL},
    {"max_message_bytes", (getter)topic_get_max_message_bytes,
     (setter)topic_set_max_message_bytes, "the topic's message size limit", NULL},
    {"rate_budget", (getter)topic_get_rate_budget, (setter)topic_set_rate_budget,
     "messages still allowed in this rate-limit interval (None: no limit)", NULL},
    {"key_hash", (getter)topic_get_key_hash, (setter)topic_set_key_hash,
     "key routing's hash (None: round-robin for keyed AnyPartition messages)", NULL},
    {NULL},
};

PyTypeObject pb_TopicStateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pulsar_bruce.native._intake.TopicState",
    .tp_doc = "TopicState(): what the admitter knows of a topic; the partition choice.",
    .tp_basicsize = sizeof(TopicState),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = topic_new,
    .tp_dealloc = (destructor)topic_dealloc,
    .tp_traverse = (traverseproc)topic_traverse,
    .tp_clear = (inquiry)topic_clear,
    .tp_methods = topic_methods,
    .tp_getset = topic_getset,
};
