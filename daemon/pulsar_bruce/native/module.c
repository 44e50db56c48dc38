/* pulsar_bruce.native._intake: the compiled per-message path (the files: intake.h).
 *
 * Each piece has a pure-Python twin that behaves identically; the differential
 * tests (tests/unit/daemon/native/) compare them byte for byte.
 */
#include "intake.h"

PyObject *R_MALFORMED, *R_UNSUPPORTED_API_KEY, *R_UNSUPPORTED_VERSION, *EMPTY_BYTES;

static PyMethodDef module_methods[] = {
    {"parse_datagram", (PyCFunction)pb_parse_datagram, METH_O,
     "parse_datagram(data) -> (topic, partition_key, timestamp, key, value_offset, fields) "
     "or a discard reason"},
    {"split_records", (PyCFunction)(void (*)(void))pb_split_records, METH_FASTCALL,
     "split_records(buffer, offset, max_record_bytes) -> the complete stream records"},
    {"stamp_sequence_ids", (PyCFunction)(void (*)(void))pb_stamp_sequence_ids, METH_FASTCALL,
     "stamp_sequence_ids(payload, first_id, count) -> the entries, each with its sequence id"},
    {"admission", (PyCFunction)(void (*)(void))pb_admission_call, METH_FASTCALL,
     "admission(state, size, charge, room, capacity, sender) -> the verdict"},
    {"write_then_consume", (PyCFunction)(void (*)(void))pb_write_then_consume, METH_FASTCALL,
     "write_then_consume(journal_fd, data, sock_fd, count) -> (bytes written, errno)"},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_intake", "The compiled per-message path of pulsar-bruce.", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__intake(void) {
    PyTypeObject *types[] = {&pb_EntriesType, &pb_TagRunType, &pb_PartitionStateType,
                             &pb_TopicStateType, &pb_AdmitterType, &pb_ReceiverType};
    const char *type_names[] = {"Entries", "TagRun", "PartitionState", "TopicState", "Admitter",
                                "Receiver"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (PyType_Ready(types[i]) < 0) return NULL;
    R_MALFORMED = PyUnicode_InternFromString("malformed");
    R_UNSUPPORTED_API_KEY = PyUnicode_InternFromString("unsupported_api_key");
    R_UNSUPPORTED_VERSION = PyUnicode_InternFromString("unsupported_version");
    EMPTY_BYTES = PyBytes_FromStringAndSize(NULL, 0);
    if (!R_MALFORMED || !R_UNSUPPORTED_API_KEY || !R_UNSUPPORTED_VERSION || !EMPTY_BYTES ||
        pb_admission_ready() < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (!module) return NULL;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (PyModule_AddObjectRef(module, type_names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(module);
            return NULL;
        }
    }
    return module;
}
