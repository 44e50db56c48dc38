/* The one admission decision, pb_admission (intake.h, inline: the compiled admitter asks it
 * for every message it takes), exported to the Python side as ``admission``
 * (tests/unit/daemon/native/test_admission.py compares it with admission_py). */
#include "intake.h"

static PyObject *verdicts[PB_VERDICTS];

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
