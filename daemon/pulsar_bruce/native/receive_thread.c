/* The receive thread: fills slabs with recvmmsg, without the GIL, and publishes them
 * to the event loop in ring order (see receiver.h for the slab states). */
#include "receiver.h"

#include <errno.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

static void receiver_wake(Receiver *self) {
    uint64_t one = 1;
    ssize_t ignored = write(self->wake_fd, &one, sizeof one);
    (void)ignored;
}

/* Publish ``count`` datagrams of the slab being filled; call with the lock held.
 * Returns whether the loop must be woken. */
int pb_receiver_publish(Receiver *self, Slab *slab, int count) {
    slab->count = count;
    slab->ready = 1;
    self->fill = (self->fill + 1) % SLABS;
    self->datagrams += (unsigned long long)count;
    int wake = !self->notified;
    self->notified = 1;
    return wake;
}

/* recvmmsg headers for ``room`` datagrams into the arena's slots from ``first`` on, each
 * read up to ``read_size`` bytes. */
void pb_receiver_headers(Receiver *self, unsigned char *arena, int first, int room,
                             struct mmsghdr *headers, struct iovec *vectors) {
    for (int i = 0; i < room; i++) {
        vectors[i].iov_base = arena + (size_t)(first + i) * self->slot_size;
        vectors[i].iov_len = self->read_size;
        memset(&headers[i].msg_hdr, 0, sizeof headers[i].msg_hdr);
        headers[i].msg_hdr.msg_iov = &vectors[i];
        headers[i].msg_hdr.msg_iovlen = 1;
    }
}

/* Nap for more datagrams (the read linger's current length). */
static void receiver_nap(Receiver *self) {
    __atomic_fetch_add(&self->naps, 1, __ATOMIC_RELAXED);
    struct timespec nap = {0, self->nap_now_ns};
    nanosleep(&nap, NULL);
}

/* After a nap, what came meanwhile (``came`` of ``room``, ``came_bytes``) says the rate:
 * the next nap is halved when the slab filled (or NAP_BYTES came), and lengthened (at
 * most doubled, up to nap_ns) when under NAP_TARGET came, so that at a moderate rate a
 * nap brings about three quarters of a slab (one wake-up of the thread and one of the
 * loop per slab), and a fast sender never finds the kernel queue (or its send buffer)
 * full while the thread naps. */
static void receiver_adapt(Receiver *self, int came, int room, size_t came_bytes) {
    if (came >= room || came_bytes >= NAP_BYTES) {
        self->nap_now_ns /= 2;
        if (self->nap_now_ns < NAP_MIN_NS) self->nap_now_ns = NAP_MIN_NS;
    } else if (came < NAP_TARGET) {
        long grown = came > NAP_TARGET / 2 ? self->nap_now_ns * NAP_TARGET / came
                                           : self->nap_now_ns * 2;
        self->nap_now_ns = grown > self->nap_ns ? self->nap_ns : grown;
    }
}

/* Fill one slab with recvmmsg until it is full, or the socket is empty and the loop
 * idle.  Returns the datagrams to publish (their bytes in ``*filled``); 0 when the loop
 * took the partial slab itself; -1 when the thread must end (stop asked, socket error)
 * with nothing held. */
static int receiver_fill(Receiver *self, Slab *slab, size_t *filled) {
    struct mmsghdr headers[PER_SLAB];
    struct iovec vectors[PER_SLAB];
    int count = 0, hangup = 0, naps = 0, napped = 0;
    size_t bytes = 0;
    *filled = 0;
    if (self->nap_first) {  /* the last slab was small: let this one fill first */
        naps = NAPS;
        receiver_nap(self);
        napped = 1;
    }
    while (count < PER_SLAB) {
        int room = PER_SLAB - count;
        pb_receiver_headers(self, slab->arena, count, room, headers, vectors);
        int got = recvmmsg(self->sock_fd, headers, (unsigned int)room, MSG_DONTWAIT, NULL);
        size_t got_bytes = 0;
        for (int i = 0; i < got; i++) {
            slab->lengths[count + i] = headers[i].msg_len;
            got_bytes += headers[i].msg_len;
        }
        if (napped && (got >= 0 || errno == EAGAIN || errno == EWOULDBLOCK)) {
            receiver_adapt(self, got > 0 ? got : 0, room, got_bytes);
            napped = 0;
        }
        if (got > 0) {
            count += got;
            bytes += got_bytes;
            *filled = bytes;
            __atomic_fetch_add(&self->calls, 1, __ATOMIC_RELAXED);  /* stats reads it */
            continue;
        }
        if (got < 0 && errno == EINTR) continue;
        if (!(got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) {
            __atomic_store_n(&self->thread_errno, got < 0 ? errno : 0, __ATOMIC_RELAXED);
            return count > 0 ? count : -1;  /* socket closed under us */
        }
        if (hangup) return count > 0 ? count : -1;  /* shut down and empty: poll() would spin */
        if (self->nap_ns && count > 0 && count < PER_SLAB / 2 && bytes < NAP_BYTES &&
            naps < NAPS) {
            naps++;
            receiver_nap(self);
            napped = 1;
            continue;
        }
        pthread_mutex_lock(&self->lock);
        if (count > 0 && !self->notified) {  /* the loop is idle: publish now */
            pthread_mutex_unlock(&self->lock);
            return count;
        }
        self->held = count;
        self->polling = 1;
        pthread_mutex_unlock(&self->lock);
        struct pollfd fds[2] = {{self->sock_fd, POLLIN | POLLRDHUP, 0}, {self->stop_fd, POLLIN, 0}};
        int polled = poll(fds, 2, -1);
        int poll_errno = errno;
        pthread_mutex_lock(&self->lock);
        self->polling = 0;
        self->held = 0;
        /* The loop took the partial slab meanwhile (only a take() moves ``fill`` now). */
        int taken = &self->slabs[self->fill] != slab;
        pthread_mutex_unlock(&self->lock);
        if (taken) return 0;
        if (polled < 0 && poll_errno != EINTR) {
            __atomic_store_n(&self->thread_errno, poll_errno, __ATOMIC_RELAXED);
            return count > 0 ? count : -1;
        }
        if (fds[1].revents) return count > 0 ? count : -1;  /* stop asked */
        if (polled > 0 && (fds[0].revents & (POLLRDHUP | POLLHUP)))
            hangup = 1;  /* read what is queued, then end at the next EAGAIN */
    }
    return count;
}

void *pb_receiver_main(void *arg) {
    Receiver *self = arg;
    for (;;) {
        pthread_mutex_lock(&self->lock);
        Slab *slab = &self->slabs[self->fill];
        self->waiting = 1;
        while (slab->ready && !self->stopping) pthread_cond_wait(&self->slab_freed, &self->lock);
        self->waiting = 0;
        int stopping = self->stopping;
        pthread_mutex_unlock(&self->lock);
        if (stopping) break;
        size_t bytes;
        int count = receiver_fill(self, slab, &bytes);
        self->nap_first = self->nap_ns && count > 0 && count < PER_SLAB && bytes < NAP_BYTES;
        if (count == 0) continue;
        if (count < 0) break;
        pthread_mutex_lock(&self->lock);
        int wake = pb_receiver_publish(self, slab, count);
        pthread_mutex_unlock(&self->lock);
        if (wake) receiver_wake(self);
    }
    pthread_mutex_lock(&self->lock);
    self->exited = !self->stopping;
    pthread_mutex_unlock(&self->lock);
    receiver_wake(self);  /* the loop sees the end (or the error) */
    return NULL;
}

void pb_receiver_join(Receiver *self) {
    if (!self->running) return;
    pthread_mutex_lock(&self->lock);
    self->stopping = 1;
    pthread_cond_broadcast(&self->slab_freed);
    pthread_mutex_unlock(&self->lock);
    uint64_t one = 1;
    ssize_t ignored = write(self->stop_fd, &one, sizeof one);
    (void)ignored;
    Py_BEGIN_ALLOW_THREADS
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    self->running = 0;
    self->exited = 0;
}

