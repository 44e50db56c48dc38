/* The compiled reader's Python type (Receiver): read_now() on the event loop (peeking for
 * the write-ahead journal), take() of the slabs receive_thread.c fills, start and stop. */
#include "receiver.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static PyObject *receiver_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    Receiver *self = (Receiver *)type->tp_alloc(type, 0);
    if (self) self->sock_fd = self->wake_fd = self->stop_fd = -1;  /* not fd 0 */
    return (PyObject *)self;
}

static int receiver_init(Receiver *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"fd", "max_datagram_bytes", "nap_us", NULL};
    int fd, nap_us = 0;
    Py_ssize_t max_bytes;
    if (self->slot_size) {
        PyErr_SetString(PyExc_RuntimeError, "Receiver is initialised once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "in|$i", names, &fd, &max_bytes, &nap_us))
        return -1;
    if (nap_us < 0 || nap_us > 100000) {
        PyErr_SetString(PyExc_ValueError, "nap_us must be 0..100000");
        return -1;
    }
    self->nap_ns = nap_us * 1000L;
    self->nap_now_ns = self->nap_ns;
    if (max_bytes < 0) { PyErr_SetString(PyExc_ValueError, "max_datagram_bytes < 0"); return -1; }
    long page = sysconf(_SC_PAGESIZE);
    if ((size_t)max_bytes > SIZE_MAX / PER_SLAB - (size_t)page) {  /* slab_bytes would wrap */
        PyErr_SetString(PyExc_OverflowError, "max_datagram_bytes too large");
        return -1;
    }
    /* One byte more than the limit, so an oversized datagram is seen as such. */
    self->read_size = (size_t)max_bytes + 1;
    self->slot_size = (((size_t)max_bytes + 1 + (size_t)page - 1) / (size_t)page) * (size_t)page;
    self->slab_bytes = self->slot_size * PER_SLAB;
    self->sock_fd = fd;
    self->wake_fd = self->stop_fd = -1;
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->slab_freed, NULL);
    for (int i = 0; i < SLABS; i++) {
        /* Address space only: pages cost memory once a datagram is written into them. */
        void *arena = mmap(NULL, self->slab_bytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (arena == MAP_FAILED) { PyErr_SetFromErrno(PyExc_OSError); return -1; }
        self->slabs[i].arena = arena;
    }
    self->scratch = mmap(NULL, self->slab_bytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (self->scratch == MAP_FAILED) {
        self->scratch = NULL;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    self->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->wake_fd < 0 || self->stop_fd < 0) { PyErr_SetFromErrno(PyExc_OSError); return -1; }
    return 0;
}

static void receiver_dealloc(Receiver *self) {
    pb_receiver_join(self);
    for (int i = 0; i < SLABS; i++)
        if (self->slabs[i].arena) munmap(self->slabs[i].arena, self->slab_bytes);
    if (self->scratch) munmap(self->scratch, self->slab_bytes);
    if (self->wake_fd >= 0) close(self->wake_fd);
    if (self->stop_fd >= 0) close(self->stop_fd);
    if (self->slot_size) {
        pthread_mutex_destroy(&self->lock);
        pthread_cond_destroy(&self->slab_freed);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *receiver_start(Receiver *self, PyObject *unused) {
    if (!self->slot_size) {
        PyErr_SetString(PyExc_RuntimeError, "Receiver not initialised");
        return NULL;
    }
    pthread_mutex_lock(&self->lock);
    int exited = self->exited;
    pthread_mutex_unlock(&self->lock);
    if (exited) pb_receiver_join(self);  /* it ended by itself: start a new one */
    if (self->running) Py_RETURN_NONE;
    self->stopping = 0;
    self->thread_errno = 0;
    uint64_t drained;
    while (read(self->stop_fd, &drained, sizeof drained) > 0) {}
    int failed = pthread_create(&self->thread, NULL, pb_receiver_main, self);
    if (failed) { errno = failed; return PyErr_SetFromErrno(PyExc_OSError); }
    self->running = 1;
    Py_RETURN_NONE;
}

static PyObject *receiver_stop(Receiver *self, PyObject *unused) {
    pb_receiver_join(self);
    Py_RETURN_NONE;
}

/* The ``count`` datagrams of an arena as a list of bytes. */
static PyObject *receiver_list(Receiver *self, unsigned char *arena, const unsigned int *lengths,
                               int count) {
    PyObject *list = PyList_New(count);
    if (!list) return NULL;
    for (int i = 0; i < count; i++) {
        unsigned char *slot = arena + (size_t)i * self->slot_size;
        size_t length = lengths[i];
        PyObject *data = PyBytes_FromStringAndSize((const char *)slot, (Py_ssize_t)length);
        if (!data) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, i, data);
        if (length > 65536) /* a large datagram does not keep its pages */
            madvise(slot + 65536, self->slot_size - 65536, MADV_DONTNEED);
    }
    return list;
}

/* read_now(limit) -> up to ``limit`` (at most a slab) of the datagrams queued right now,
 * read with one recvmmsg on the calling thread (the event loop's, with the GIL: it does
 * not block), or None when none is queued.  Only while the thread is not running: they
 * would race for the order. */
static PyObject *receiver_read_now(Receiver *self, PyObject *limit_object) {
    long limit = PyLong_AsLong(limit_object);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    if (limit < 1) Py_RETURN_NONE;
    unsigned int room = limit < PER_SLAB ? (unsigned int)limit : PER_SLAB;
    if (!self->slot_size) {
        PyErr_SetString(PyExc_RuntimeError, "Receiver not initialised");
        return NULL;
    }
    if (self->running) {
        PyErr_SetString(PyExc_RuntimeError, "read_now() while the receive thread runs");
        return NULL;
    }
    struct mmsghdr headers[PER_SLAB];
    struct iovec vectors[PER_SLAB];
    unsigned int lengths[PER_SLAB];
    pb_receiver_headers(self, self->scratch, 0, (int)room, headers, vectors);
    int got;
    int flags = MSG_DONTWAIT | (self->peek ? MSG_PEEK : 0);
    do got = recvmmsg(self->sock_fd, headers, room, flags, NULL);
    while (got < 0 && errno == EINTR);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) Py_RETURN_NONE;
    if (got < 0) return PyErr_SetFromErrno(PyExc_OSError);
    if (got == 0) Py_RETURN_NONE;
    __atomic_fetch_add(&self->calls, 1, __ATOMIC_RELAXED);
    self->datagrams += (unsigned long long)got;  /* the thread is not running: no race */
    for (int i = 0; i < got; i++) {
        lengths[i] = headers[i].msg_len;
        self->read_bytes += headers[i].msg_len;
    }
    return receiver_list(self, self->scratch, lengths, got);
}

/* take() -> the oldest filled slab's datagrams as a list of bytes, or None. */
static PyObject *receiver_take(Receiver *self, PyObject *unused) {
    pthread_mutex_lock(&self->lock);
    Slab *slab = &self->slabs[self->take];
    if (!slab->ready && self->polling && self->held > 0 && self->take == self->fill) {
        pb_receiver_publish(self, slab, self->held);  /* take the thread's partial slab */
        self->held = 0;
    }
    if (!slab->ready) {
        self->notified = 0;
        uint64_t drained;
        ssize_t ignored = read(self->wake_fd, &drained, sizeof drained);
        (void)ignored;
        pthread_mutex_unlock(&self->lock);
        Py_RETURN_NONE;
    }
    int count = slab->count;
    pthread_mutex_unlock(&self->lock);
    PyObject *list = receiver_list(self, slab->arena, slab->lengths, count);
    if (!list) return NULL;
    pthread_mutex_lock(&self->lock);
    slab->ready = 0;
    self->take = (self->take + 1) % SLABS;
    if (self->waiting) pthread_cond_signal(&self->slab_freed);
    pthread_mutex_unlock(&self->lock);
    return list;
}

static PyObject *receiver_get_wake_fd(Receiver *self, void *c) { return PyLong_FromLong(self->wake_fd); }
static PyObject *receiver_get_running(Receiver *self, void *c) {
    if (!self->running) Py_RETURN_FALSE;
    pthread_mutex_lock(&self->lock);
    int exited = self->exited;  /* ended by itself: the loop reads the socket instead */
    pthread_mutex_unlock(&self->lock);
    return PyBool_FromLong(!exited);
}
static PyObject *receiver_get_error(Receiver *self, void *c) {
    return PyLong_FromLong(__atomic_load_n(&self->thread_errno, __ATOMIC_RELAXED));
}
static PyObject *receiver_get_read_bytes(Receiver *self, void *c) {
    return PyLong_FromUnsignedLongLong(self->read_bytes);
}
static PyObject *receiver_get_naps(Receiver *self, void *c) {
    return PyLong_FromUnsignedLongLong(__atomic_load_n(&self->naps, __ATOMIC_RELAXED));
}
static PyObject *receiver_get_stats(Receiver *self, void *c) {
    pthread_mutex_lock(&self->lock);
    unsigned long long calls = __atomic_load_n(&self->calls, __ATOMIC_RELAXED);
    unsigned long long datagrams = self->datagrams;
    int ready = 0, held = self->polling ? self->held : 0;
    for (int i = 0; i < SLABS; i++) ready += self->slabs[i].ready;
    pthread_mutex_unlock(&self->lock);
    return Py_BuildValue("(KKii)", calls, datagrams, ready, held);
}

static PyMethodDef receiver_methods[] = {
    {"start", (PyCFunction)receiver_start, METH_NOARGS, "start the receive thread"},
    {"stop", (PyCFunction)receiver_stop, METH_NOARGS,
     "stop the thread after the slab it is filling (it stays to be taken)"},
    {"take", (PyCFunction)receiver_take, METH_NOARGS,
     "the oldest filled slab's datagrams (list of bytes), or None; None re-arms wake_fd"},
    {"read_now", (PyCFunction)receiver_read_now, METH_O,
     "read_now(limit): up to limit (at most a slab) of the datagrams queued now, read on this "
     "thread (list of bytes), or None; only while the thread is not running"},
    {NULL},
};

static PyObject *receiver_get_peek(Receiver *self, void *c) { return PyBool_FromLong(self->peek); }
static int receiver_set_peek(Receiver *self, PyObject *value, void *c) {
    int truth = value ? PyObject_IsTrue(value) : -1;
    if (truth < 0) return -1;
    self->peek = truth;
    return 0;
}

static PyGetSetDef receiver_getset[] = {
    {"peek", (getter)receiver_get_peek, (setter)receiver_set_peek,
     "read_now() leaves what it reads queued (MSG_PEEK; the socket has SO_PEEK_OFF)", NULL},
    {"wake_fd", (getter)receiver_get_wake_fd, NULL, "readable when a slab is ready", NULL},
    {"running", (getter)receiver_get_running, NULL, "the thread runs", NULL},
    {"error", (getter)receiver_get_error, NULL, "errno that ended the thread, or 0", NULL},
    {"read_bytes", (getter)receiver_get_read_bytes, NULL,
     "bytes of the datagrams read_now() has returned (the loop's reads; the read linger)",
     NULL},
    {"naps", (getter)receiver_get_naps, NULL, "naps the thread has taken (the read linger)",
     NULL},
    {"stats", (getter)receiver_get_stats, NULL,
     "(recvmmsg calls, datagrams published, slabs waiting for the loop, "
     "datagrams the thread holds while the loop is busy)", NULL},
    {NULL},
};

PyTypeObject pb_ReceiverType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pulsar_bruce.native._intake.Receiver",
    .tp_doc = "Receiver(fd, max_datagram_bytes, *, nap_us=0): "
              "recvmmsg on a thread without the GIL.",
    .tp_basicsize = sizeof(Receiver),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = receiver_new,
    .tp_init = (initproc)receiver_init,
    .tp_dealloc = (destructor)receiver_dealloc,
    .tp_methods = receiver_methods,
    .tp_getset = receiver_getset,
};
