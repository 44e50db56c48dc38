/*
 * to_pulsar: send Bruce-format messages to the local pulsar-bruce daemon from C.
 *
 * C99 plus POSIX sockets, no other dependencies. One connected UNIX datagram
 * socket per `struct to_pulsar`; each message is one datagram (one syscall).
 *
 *     struct to_pulsar tp;
 *     int rc = to_pulsar_open(&tp, "/run/pulsar-bruce/bruce.sock");
 *     if (rc == 0)
 *         rc = to_pulsar_send_any(&tp, "clicks", "user-42", 7, "{}", 2, to_pulsar_now_ms());
 *     if (rc < 0)
 *         fprintf(stderr, "to_pulsar: %s\n", to_pulsar_strerror(rc));
 *     to_pulsar_close(&tp);
 *
 * Every function returns 0 (or a size) on success and a negative TO_PULSAR_ERR_*
 * code on failure; `tp->last_errno` keeps the errno of the last failed syscall.
 * Sending on one handle from several threads is safe (no shared buffer: the
 * datagram is gathered from the caller's memory with sendmsg()); reconnecting
 * after a daemon restart is best-effort and not synchronised.
 */
#ifndef TO_PULSAR_H
#define TO_PULSAR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TO_PULSAR_DEFAULT_SOCKET "/run/pulsar-bruce/bruce.sock"
#define TO_PULSAR_SOCKET_ENV "TO_PULSAR_SOCKET"

#define TO_PULSAR_API_KEY_ANY_PARTITION 256
#define TO_PULSAR_API_KEY_PARTITION_KEY 257

/* Fixed bytes of each message besides topic, key and value. */
#define TO_PULSAR_ANY_PARTITION_OVERHEAD 28
#define TO_PULSAR_PARTITION_KEY_OVERHEAD 32
#define TO_PULSAR_MAX_TOPIC 0x7FFF

/* Error codes (always negative). */
#define TO_PULSAR_OK 0
#define TO_PULSAR_ERR_INVALID (-1)     /* bad argument: topic, sizes, buffer, path */
#define TO_PULSAR_ERR_TOO_LARGE (-2)   /* datagram above the OS limit (EMSGSIZE) */
#define TO_PULSAR_ERR_UNAVAILABLE (-3) /* no daemon on the socket (ENOENT, ECONNREFUSED) */
#define TO_PULSAR_ERR_AGAIN (-4)       /* queue full: would block / send timeout expired */
#define TO_PULSAR_ERR_IO (-5)          /* any other system error, see last_errno */
#define TO_PULSAR_ERR_BAD_TOPIC (-6)   /* not a topic name the daemon accepts (bad_topic) */

struct to_pulsar {
    int fd;                /* -1 when closed */
    int timeout_ms;        /* -1: block forever, 0: never block, > 0: SO_SNDTIMEO */
    int last_errno;        /* errno of the last failed syscall, 0 if none */
    char socket_path[108]; /* sizeof(sockaddr_un.sun_path) on Linux */
};

/* Connect to the daemon socket. NULL means $TO_PULSAR_SOCKET, else the default path.
 * The send timeout starts at 5000 ms, as in the Python client. On failure tp->fd is -1
 * and to_pulsar_close() is still safe to call. */
int to_pulsar_open(struct to_pulsar *tp, const char *socket_path);

/* How long a send may wait for room in the daemon's queue: -1 forever, 0 not at all. */
int to_pulsar_set_timeout_ms(struct to_pulsar *tp, int timeout_ms);

/* AnyPartition: the daemon picks the partition. `topic` is NUL-terminated; `key` may be
 * NULL with key_len 0 (no key); timestamp_ms 0 means "no event time". */
int to_pulsar_send_any(struct to_pulsar *tp, const char *topic, const void *key,
                       size_t key_len, const void *value, size_t value_len,
                       int64_t timestamp_ms);

/* PartitionKey: the daemon routes to partition `partition_key % partitions`. Negative
 * int32 keys convert to the same uint32 (two's complement), as in Bruce. */
int to_pulsar_send_keyed(struct to_pulsar *tp, uint32_t partition_key, const char *topic,
                         const void *key, size_t key_len, const void *value,
                         size_t value_len, int64_t timestamp_ms);

/* Send a datagram encoded with to_pulsar_encode_*() (e.g. encoded once, sent many times). */
int to_pulsar_send_raw(struct to_pulsar *tp, const void *datagram, size_t len);

/* Close the socket. Idempotent; later sends return TO_PULSAR_ERR_INVALID. */
void to_pulsar_close(struct to_pulsar *tp);

/* Encoded size of a message, or 0 if it cannot be encoded (topic not 1..32767 bytes,
 * or the whole datagram above INT32_MAX). */
size_t to_pulsar_any_size(size_t topic_len, size_t key_len, size_t value_len);
size_t to_pulsar_keyed_size(size_t topic_len, size_t key_len, size_t value_len);

/* Encode into a caller-provided buffer (or a malloc'd one of to_pulsar_*_size() bytes).
 * Return the number of bytes written, or TO_PULSAR_ERR_INVALID (also when buf_size is
 * too small). */
long to_pulsar_encode_any(void *buf, size_t buf_size, const char *topic, size_t topic_len,
                          const void *key, size_t key_len, const void *value,
                          size_t value_len, int64_t timestamp_ms);
long to_pulsar_encode_keyed(void *buf, size_t buf_size, uint32_t partition_key,
                            const char *topic, size_t topic_len, const void *key,
                            size_t key_len, const void *value, size_t value_len,
                            int64_t timestamp_ms);

/* 0 if the daemon accepts `topic` as a topic name, by its own rule: `t`,
 * `tenant/namespace/t` or `persistent://tenant/namespace/t` (or `non-persistent://`);
 * tenant and namespace ASCII letters, digits and - = : . _; the topic's own name UTF-8
 * without '/', whitespace or control characters. TO_PULSAR_ERR_INVALID if it is not
 * 1..32767 bytes, else TO_PULSAR_ERR_BAD_TOPIC. The send and encode functions check it,
 * so a name the daemon would discard as `bad_topic` is refused before it is sent. */
int to_pulsar_check_topic(const char *topic, size_t topic_len);

/* Milliseconds since the epoch (CLOCK_REALTIME). */
int64_t to_pulsar_now_ms(void);

/* A static, human-readable description of a TO_PULSAR_ERR_* code. */
const char *to_pulsar_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif /* TO_PULSAR_H */
