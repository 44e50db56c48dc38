/* The write-ahead journal's one step that must not be split (spool/journal_files.py).
 *
 * With the journal, the event loop reads a slab with MSG_PEEK: the datagrams stay in
 * the socket's queue while they are admitted and their journal records are built.
 * write_then_consume writes those records, then removes the peeked datagrams from the
 * queue, with nothing in between but the return from write(2).  A process killed
 * before the write finds them queued again at its restart (the socket is held by
 * systemd); killed after it, finds them in the journal.  Twin: journal_files.py.
 */
#include "intake.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#define CONSUME_BATCH 64

/* Remove ``count`` datagrams from the head of ``sock_fd``'s queue (0 or -errno). */
static int consume(int sock_fd, long count) {
    unsigned char scratch;
    struct mmsghdr headers[CONSUME_BATCH];
    struct iovec vector = {&scratch, 1};  /* truncated: the bytes are in the journal */
    while (count > 0) {
        unsigned int room = count < CONSUME_BATCH ? (unsigned int)count : CONSUME_BATCH;
        memset(headers, 0, sizeof headers);
        for (unsigned int i = 0; i < room; i++) {
            headers[i].msg_hdr.msg_iov = &vector;
            headers[i].msg_hdr.msg_iovlen = 1;
        }
        int got;
        do got = recvmmsg(sock_fd, headers, room, MSG_DONTWAIT | MSG_TRUNC, NULL);
        while (got < 0 && errno == EINTR);
        if (got <= 0) return got < 0 ? -errno : -EAGAIN;
        count -= got;
    }
    return 0;
}

/* write_then_consume(journal_fd, data, sock_fd, count) -> (bytes written, errno or 0).
 * The datagrams are consumed whatever became of the write: they are in memory now,
 * and a failed write is retried by the caller from what it kept. */
PyObject *pb_write_then_consume(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "write_then_consume(journal_fd: int, data: bytes, sock_fd: int, count: int)");
        return NULL;
    }
    int journal_fd = (int)PyLong_AsLong(args[0]);
    int sock_fd = (int)PyLong_AsLong(args[2]);
    long count = PyLong_AsLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    const char *data = PyBytes_AS_STRING(args[1]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[1]), written = 0;
    int write_errno = 0;
    while (written < size) {
        ssize_t done = write(journal_fd, data + written, (size_t)(size - written));
        if (done < 0) {
            if (errno == EINTR) continue;
            write_errno = errno;
            break;
        }
        written += done;
    }
    int consumed = consume(sock_fd, count);
    if (consumed < 0 && consumed != -EAGAIN) {
        errno = -consumed;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return Py_BuildValue("(ni)", written, write_errno);
}
