/* The floor under any datagram daemon (bench/read_floor.py): a reader that only takes
 * datagrams off a UNIX datagram socket, recvmmsg after a nap the way the daemon's receive
 * thread does, and does nothing with them.  Its CPU per datagram is what the kernel
 * charges a reader at that rate, before any parsing, batching or sending.
 *
 *   read_floor SOCKET_PATH NAP_US DATAGRAMS
 *
 * Prints READY once bound, reads until DATAGRAMS came, then prints one line:
 *   RESULT <datagrams> <wake-ups> <user s> <system s>
 * (CPU counted from the first datagram, wake-ups: returns from poll() and naps). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define PER_READ 64
#define SLOT 65536

static double seconds(struct timeval t) { return (double)t.tv_sec + (double)t.tv_usec / 1e6; }

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: read_floor SOCKET_PATH NAP_US DATAGRAMS\n");
        return 2;
    }
    const char *path = argv[1];
    long nap_us = atol(argv[2]), want = atol(argv[3]);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof address.sun_path) {
        fprintf(stderr, "socket path too long\n");
        return 2;
    }
    strcpy(address.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        perror("read_floor: bind");
        return 1;
    }
    static unsigned char slots[PER_READ][SLOT];
    struct mmsghdr headers[PER_READ];
    struct iovec vectors[PER_READ];
    memset(headers, 0, sizeof headers);
    for (int i = 0; i < PER_READ; i++) {
        vectors[i].iov_base = slots[i];
        vectors[i].iov_len = SLOT;
        headers[i].msg_hdr.msg_iov = &vectors[i];
        headers[i].msg_hdr.msg_iovlen = 1;
    }
    printf("READY\n");
    fflush(stdout);
    long got = 0, wakes = 0;
    struct rusage start, end;
    while (got < want) {
        struct pollfd polled = {fd, POLLIN, 0};
        if (poll(&polled, 1, -1) < 0 && errno != EINTR) {
            perror("read_floor: poll");
            return 1;
        }
        if (wakes++ == 0) getrusage(RUSAGE_SELF, &start);
        for (;;) {  /* a read that did not fill naps, then reads again, until the queue is dry */
            int n = recvmmsg(fd, headers, PER_READ, MSG_DONTWAIT, NULL);
            if (n <= 0) break;
            got += n;
            if (n < PER_READ && nap_us > 0) {
                struct timespec nap = {nap_us / 1000000, (nap_us % 1000000) * 1000};
                nanosleep(&nap, NULL);
                wakes++;
            }
        }
    }
    getrusage(RUSAGE_SELF, &end);
    printf("RESULT %ld %ld %.6f %.6f\n", got, wakes, seconds(end.ru_utime) - seconds(start.ru_utime),
           seconds(end.ru_stime) - seconds(start.ru_stime));
    return 0;
}
