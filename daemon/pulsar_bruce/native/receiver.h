/* The compiled reader's state (receiver.c: the Python type, read_now, take;
 * receive_thread.c: the thread that fills slabs with recvmmsg). */
#ifndef PULSAR_BRUCE_RECEIVER_H
#define PULSAR_BRUCE_RECEIVER_H
#include "intake.h"

#include <pthread.h>
#include <sys/socket.h>

/* ------------------------------------------------------------------ Receiver */

/* The receive thread fills slabs in ring order; the event loop takes them in the same
 * order, so datagrams reach the intake in the order the socket gave them.  A slab is
 * FREE (the thread may fill it) or READY (the loop may take it).  When every slab is
 * READY the thread stops reading: the kernel queue fills and senders block or get
 * EAGAIN, as they would with a slow single-threaded daemon.  Nothing is dropped here.
 *
 * Wake-ups are per batch of work, not per datagram: when the socket runs dry the
 * thread publishes its partial slab and wakes the loop only if the loop is idle;
 * while the loop is busy the thread waits in poll() holding the slab, and the loop
 * takes that partial slab itself once it has handled the earlier ones. */

#define SLABS 4
#define PER_SLAB 64
/* With ``nap_us`` set (the read linger), a slab less than half full when the socket
 * runs dry waits once, that long, for more before it is published: at a moderate rate
 * one wake-up of the thread and one of the loop then bring tens of datagrams instead of
 * one or two, and under load one recvmmsg takes tens instead of a few.  Only for a deep
 * kernel queue (the caller decides from max_dgram_qlen): with the default 10 the
 * senders would block while it naps.  After a slab that did not fill the next one
 * naps first, not after its first datagram: at a steady moderate rate the thread then
 * wakes once a slab (the nap's end), not twice (poll, then the nap); an empty read
 * after the nap still waits in poll(), so an idle daemon does not wake.  The nap
 * adapts to the rate (receiver_adapt): towards NAP_TARGET datagrams a nap, and a sender
 * faster than a slab a nap halves it, so the queue never fills while the thread naps
 * (16 senders at 1,000 msg/s each: 0.065 wake-ups of the daemon's threads a message,
 * 0.087 when only a slab under half full napped first).  A slab is small by bytes
 * too (under NAP_BYTES): a sender's send buffer (net.core.wmem_default, 208 KiB) holds
 * only about fifteen 10 KB datagrams, so a fast sender of large values blocks long
 * before the queue's 512 and a nap that waited for datagrams would stall it (measured:
 * 10 KB values fell from 47,000 to 6,300 msg/s at qlen 512). */
#define NAPS 1
#define NAP_MIN_NS 20000L
#define NAP_BYTES 32768
#define NAP_TARGET (PER_SLAB * 3 / 4)

typedef struct {
    unsigned char *arena;             /* PER_SLAB slots of slot_size bytes (virtual) */
    unsigned int lengths[PER_SLAB];
    int count;
    int ready;
} Slab;

typedef struct {
    PyObject_HEAD
    int sock_fd, wake_fd, stop_fd;
    size_t slot_size, slab_bytes;
    size_t read_size;                 /* max_datagram_bytes + 1: an oversized one is seen as such */
    Slab slabs[SLABS];
    unsigned char *scratch;           /* read_now()'s slab, used on the caller's thread */
    int fill, take;                   /* next slab the thread fills / the loop takes */
    int notified;                     /* wake_fd written, not yet answered by an empty take() */
    int polling, held;                /* the thread waits in poll() holding ``held`` datagrams */
    int waiting;                      /* the thread waits for a free slab */
    int running, stopping, thread_errno;
    long nap_ns;                      /* 0: never nap; else the longest nap */
    long nap_now_ns;                  /* the next nap: adapts to the rate, NAP_MIN_NS..nap_ns */
    int nap_first;                    /* the thread's last slab was small: nap before reading */
    int peek;                         /* read_now() peeks (SO_PEEK_OFF): the journal consumes */
    int exited;                       /* the thread ended by itself (error, hang-up) */
    unsigned long long calls, datagrams;
    unsigned long long read_bytes;    /* bytes read_now() returned (the loop's reads) */
    unsigned long long naps;          /* naps the thread took (the read linger) */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t slab_freed;
} Receiver;

int pb_receiver_publish(Receiver *self, Slab *slab, int count);
void pb_receiver_headers(Receiver *self, unsigned char *arena, int first, int room,
                         struct mmsghdr *headers, struct iovec *vectors);
void *pb_receiver_main(void *arg);
void pb_receiver_join(Receiver *self);

#endif
