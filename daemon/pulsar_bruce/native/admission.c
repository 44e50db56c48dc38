/* The one admission decision (model/admission.py admission_py is the twin): a pure function
 * of the topic's limits, the message's size and charge, the room memory has left and the
 * sender's policy.  The compiled admitter asks it for every message it sees; the Python side
 * gets it as ``admission`` (tests/unit/daemon/native/test_admission.py compares the two). */
#include "intake.h"

static PyObject *verdicts[PB_VERDICTS];

int pb_admission(const TopicState *topic, long long size, long long charge, long long room,
                 long long capacity, int sender) {
    if (topic) {
        if (size > topic->max_message_bytes) return PB_TOO_LARGE;
        if (sender != PB_REPLAY && topic->limited && topic->rate_budget <= 0)
            return sender == PB_NUMBERED ? PB_WAIT : PB_RATE_LIMITED;
        if (sender == PB_NUMBERED && PyTuple_GET_SIZE(topic->partitions) == 0)
            return PB_WAIT;  /* the partition count is being looked up */
    }
    if (charge <= room) return PB_ACCEPT;
    if (sender == PB_DATAGRAM) return PB_SPILL;
    if (sender == PB_REPLAY) return PB_BUFFER_FULL;
    return charge > capacity ? PB_TOO_LARGE : PB_WAIT;  /* never fits: not worth waiting */
}

/* admission(state, size, charge, room, capacity, sender) -> the verdict, as admission_py. */
PyObject *pb_admission_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "admission(state, size, charge, room, capacity, sender)");
        return NULL;
    }
    const TopicState *topic = NULL;
    if (args[0] != Py_None) {
        if (!Py_IS_TYPE(args[0], &pb_TopicStateType)) {
            PyErr_SetString(PyExc_TypeError, "admission(): state must be a TopicState or None");
            return NULL;
        }
        topic = (const TopicState *)args[0];
    }
    long long numbers[4];
    for (int i = 0; i < 4; i++)
        if (pb_as_limit(args[i + 1], &numbers[i]) < 0) return NULL;
    long sender = PyLong_AsLong(args[5]);
    if (sender == -1 && PyErr_Occurred()) return NULL;
    if (sender < PB_DATAGRAM || sender > PB_REPLAY) {
        PyErr_SetString(PyExc_ValueError, "admission(): unknown sender");
        return NULL;
    }
    int verdict = pb_admission(topic, numbers[0], numbers[1], numbers[2], numbers[3], (int)sender);
    return Py_NewRef(verdicts[verdict]);
}

int pb_admission_ready(void) {
    const char *names[PB_VERDICTS] = {"accept", "spill", "wait", "too_large", "rate_limited",
                                      "buffer_full"};
    for (int i = 0; i < PB_VERDICTS; i++)
        if (!(verdicts[i] = PyUnicode_InternFromString(names[i]))) return -1;
    return 0;
}
