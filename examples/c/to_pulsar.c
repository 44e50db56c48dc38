/* to_pulsar: Bruce-format sender for the pulsar-bruce daemon. See to_pulsar.h. */
#define _POSIX_C_SOURCE 200809L

#include "to_pulsar.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif

#define DEFAULT_TIMEOUT_MS 5000
#define ANY_HEAD 12   /* Size ApiKey ApiVersion Flags TopicSize */
#define KEYED_HEAD 16 /* Size ApiKey ApiVersion Flags PartitionKey TopicSize */
#define MID 12        /* Timestamp KeySize */
#define TAIL 4        /* ValueSize */

/* -- encoding (big-endian) ------------------------------------------------------------ */

static unsigned char *put16(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
    return p + 2;
}

static unsigned char *put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
    return p + 4;
}

static unsigned char *put64(unsigned char *p, uint64_t v)
{
    p = put32(p, (uint32_t)(v >> 32));
    return put32(p, (uint32_t)v);
}

static size_t message_size(size_t overhead, size_t topic_len, size_t key_len, size_t value_len)
{
    const size_t limit = 0x7FFFFFFF;
    if (topic_len == 0 || topic_len > TO_PULSAR_MAX_TOPIC)
        return 0;
    if (key_len > limit || value_len > limit)
        return 0;
    if (key_len + value_len > limit - overhead - topic_len)
        return 0;
    return overhead + topic_len + key_len + value_len;
}

size_t to_pulsar_any_size(size_t topic_len, size_t key_len, size_t value_len)
{
    return message_size(TO_PULSAR_ANY_PARTITION_OVERHEAD, topic_len, key_len, value_len);
}

size_t to_pulsar_keyed_size(size_t topic_len, size_t key_len, size_t value_len)
{
    return message_size(TO_PULSAR_PARTITION_KEY_OVERHEAD, topic_len, key_len, value_len);
}

/* The fixed parts of a message; topic, key and value are gathered in between. */
struct parts {
    unsigned char head[KEYED_HEAD];
    size_t head_len;
    unsigned char mid[MID];
    unsigned char tail[TAIL];
    size_t size;
};

static int build_parts(struct parts *parts, int keyed, uint32_t partition_key,
                       size_t topic_len, const void *key, size_t key_len, const void *value,
                       size_t value_len, int64_t timestamp_ms)
{
    unsigned char *p = parts->head;
    if ((key == NULL && key_len > 0) || (value == NULL && value_len > 0))
        return TO_PULSAR_ERR_INVALID;
    parts->size = keyed ? to_pulsar_keyed_size(topic_len, key_len, value_len)
                        : to_pulsar_any_size(topic_len, key_len, value_len);
    if (parts->size == 0)
        return TO_PULSAR_ERR_INVALID;
    p = put32(p, (uint32_t)parts->size);
    p = put16(p, keyed ? TO_PULSAR_API_KEY_PARTITION_KEY : TO_PULSAR_API_KEY_ANY_PARTITION);
    p = put16(p, 0); /* ApiVersion */
    p = put16(p, 0); /* Flags */
    if (keyed)
        p = put32(p, partition_key);
    p = put16(p, (uint32_t)topic_len);
    parts->head_len = (size_t)(p - parts->head);
    put32(put64(parts->mid, (uint64_t)timestamp_ms), (uint32_t)key_len);
    put32(parts->tail, (uint32_t)value_len);
    return 0;
}

static long encode(void *buf, size_t buf_size, int keyed, uint32_t partition_key,
                   const char *topic, size_t topic_len, const void *key, size_t key_len,
                   const void *value, size_t value_len, int64_t timestamp_ms)
{
    struct parts parts;
    unsigned char *p = buf;
    if (buf == NULL || topic == NULL)
        return TO_PULSAR_ERR_INVALID;
    if (build_parts(&parts, keyed, partition_key, topic_len, key, key_len, value, value_len,
                    timestamp_ms) < 0 ||
        buf_size < parts.size)
        return TO_PULSAR_ERR_INVALID;
    if (to_pulsar_check_topic(topic, topic_len) < 0)
        return TO_PULSAR_ERR_BAD_TOPIC;
    memcpy(p, parts.head, parts.head_len);
    p += parts.head_len;
    memcpy(p, topic, topic_len);
    p += topic_len;
    memcpy(p, parts.mid, MID);
    p += MID;
    if (key_len)
        memcpy(p, key, key_len);
    p += key_len;
    memcpy(p, parts.tail, TAIL);
    p += TAIL;
    if (value_len)
        memcpy(p, value, value_len);
    return (long)parts.size;
}

long to_pulsar_encode_any(void *buf, size_t buf_size, const char *topic, size_t topic_len,
                          const void *key, size_t key_len, const void *value,
                          size_t value_len, int64_t timestamp_ms)
{
    return encode(buf, buf_size, 0, 0, topic, topic_len, key, key_len, value, value_len,
                  timestamp_ms);
}

long to_pulsar_encode_keyed(void *buf, size_t buf_size, uint32_t partition_key,
                            const char *topic, size_t topic_len, const void *key,
                            size_t key_len, const void *value, size_t value_len,
                            int64_t timestamp_ms)
{
    return encode(buf, buf_size, 1, partition_key, topic, topic_len, key, key_len, value,
                  value_len, timestamp_ms);
}

int64_t to_pulsar_now_ms(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* -- socket --------------------------------------------------------------------------- */

static int apply_timeout(int fd, int timeout_ms)
{
    struct timeval tv;
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0)
        return -1;
    flags = timeout_ms == 0 ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
    if (fcntl(fd, F_SETFL, flags) < 0)
        return -1;
    if (timeout_ms == 0)
        return 0;
    /* SO_SNDTIMEO 0 means "forever": the kernel waits for queue space, then EAGAIN. */
    tv.tv_sec = timeout_ms < 0 ? 0 : timeout_ms / 1000;
    tv.tv_usec = timeout_ms < 0 ? 0 : (timeout_ms % 1000) * 1000;
    return setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static int is_unavailable(int err)
{
    return err == ENOENT || err == ECONNREFUSED || err == ENOTCONN;
}

static int error_code(int err)
{
    if (err == EAGAIN || err == EWOULDBLOCK)
        return TO_PULSAR_ERR_AGAIN;
    if (err == EMSGSIZE)
        return TO_PULSAR_ERR_TOO_LARGE;
    if (is_unavailable(err))
        return TO_PULSAR_ERR_UNAVAILABLE;
    return TO_PULSAR_ERR_IO;
}

/* A new socket connected to tp->socket_path, or a negative code. */
static int connect_socket(struct to_pulsar *tp)
{
    struct sockaddr_un addr;
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    if (fd < 0) {
        tp->last_errno = errno;
        return TO_PULSAR_ERR_IO;
    }
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, tp->socket_path, strlen(tp->socket_path) + 1);
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 ||
        connect(fd, (const struct sockaddr *)&addr, sizeof addr) < 0 ||
        apply_timeout(fd, tp->timeout_ms) < 0) {
        int err = errno;
        close(fd);
        tp->last_errno = err;
        return is_unavailable(err) ? TO_PULSAR_ERR_UNAVAILABLE : TO_PULSAR_ERR_IO;
    }
    return fd;
}

int to_pulsar_open(struct to_pulsar *tp, const char *socket_path)
{
    int fd;
    if (tp == NULL)
        return TO_PULSAR_ERR_INVALID;
    tp->fd = -1;
    tp->timeout_ms = DEFAULT_TIMEOUT_MS;
    tp->last_errno = 0;
    tp->socket_path[0] = '\0';
    if (socket_path == NULL || socket_path[0] == '\0') {
        socket_path = getenv(TO_PULSAR_SOCKET_ENV);
        if (socket_path == NULL || socket_path[0] == '\0')
            socket_path = TO_PULSAR_DEFAULT_SOCKET;
    }
    if (strlen(socket_path) >= sizeof tp->socket_path ||
        strlen(socket_path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        tp->last_errno = ENAMETOOLONG;
        return TO_PULSAR_ERR_INVALID;
    }
    strcpy(tp->socket_path, socket_path);
    fd = connect_socket(tp);
    if (fd < 0)
        return fd;
    tp->fd = fd;
    return 0;
}

int to_pulsar_set_timeout_ms(struct to_pulsar *tp, int timeout_ms)
{
    if (tp == NULL || tp->fd < 0 || timeout_ms < -1)
        return TO_PULSAR_ERR_INVALID;
    if (apply_timeout(tp->fd, timeout_ms) < 0) {
        tp->last_errno = errno;
        return TO_PULSAR_ERR_IO;
    }
    tp->timeout_ms = timeout_ms;
    return 0;
}

void to_pulsar_close(struct to_pulsar *tp)
{
    if (tp != NULL && tp->fd >= 0) {
        close(tp->fd);
        tp->fd = -1;
    }
}

static ssize_t send_once(int fd, const struct iovec *iov, int iovcnt)
{
    struct msghdr msg;
    ssize_t n;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = (struct iovec *)iov;
    msg.msg_iovlen = (size_t)iovcnt;
    do
        n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
}

/* One datagram; if the daemon went away (restart), reconnect once and retry. */
static int send_iov(struct to_pulsar *tp, const struct iovec *iov, int iovcnt)
{
    int fd, err;
    if (tp == NULL || tp->fd < 0)
        return TO_PULSAR_ERR_INVALID;
    if (send_once(tp->fd, iov, iovcnt) >= 0)
        return 0;
    err = errno;
    if (is_unavailable(err)) {
        fd = connect_socket(tp);
        if (fd < 0)
            return fd; /* keep the old, dead socket: the next send tries again */
        close(tp->fd);
        tp->fd = fd;
        if (send_once(tp->fd, iov, iovcnt) >= 0)
            return 0;
        err = errno;
    }
    tp->last_errno = err;
    return error_code(err);
}

static int send_message(struct to_pulsar *tp, int keyed, uint32_t partition_key,
                        const char *topic, const void *key, size_t key_len, const void *value,
                        size_t value_len, int64_t timestamp_ms)
{
    struct parts parts;
    struct iovec iov[6];
    size_t topic_len;
    int rc;
    if (topic == NULL)
        return TO_PULSAR_ERR_INVALID;
    topic_len = strlen(topic);
    rc = build_parts(&parts, keyed, partition_key, topic_len, key, key_len, value, value_len,
                     timestamp_ms);
    if (rc == 0)
        rc = to_pulsar_check_topic(topic, topic_len);
    if (rc < 0)
        return rc;
    iov[0].iov_base = parts.head;
    iov[0].iov_len = parts.head_len;
    iov[1].iov_base = (void *)topic;
    iov[1].iov_len = topic_len;
    iov[2].iov_base = parts.mid;
    iov[2].iov_len = MID;
    iov[3].iov_base = (void *)key;
    iov[3].iov_len = key_len;
    iov[4].iov_base = parts.tail;
    iov[4].iov_len = TAIL;
    iov[5].iov_base = (void *)value;
    iov[5].iov_len = value_len;
    return send_iov(tp, iov, 6);
}

int to_pulsar_send_any(struct to_pulsar *tp, const char *topic, const void *key,
                       size_t key_len, const void *value, size_t value_len,
                       int64_t timestamp_ms)
{
    return send_message(tp, 0, 0, topic, key, key_len, value, value_len, timestamp_ms);
}

int to_pulsar_send_keyed(struct to_pulsar *tp, uint32_t partition_key, const char *topic,
                         const void *key, size_t key_len, const void *value,
                         size_t value_len, int64_t timestamp_ms)
{
    return send_message(tp, 1, partition_key, topic, key, key_len, value, value_len,
                        timestamp_ms);
}

int to_pulsar_send_raw(struct to_pulsar *tp, const void *datagram, size_t len)
{
    struct iovec iov;
    if (datagram == NULL || len == 0)
        return TO_PULSAR_ERR_INVALID;
    iov.iov_base = (void *)datagram;
    iov.iov_len = len;
    return send_iov(tp, &iov, 1);
}

const char *to_pulsar_strerror(int code)
{
    switch (code) {
    case TO_PULSAR_OK:
        return "success";
    case TO_PULSAR_ERR_INVALID:
        return "invalid argument (topic must be 1..32767 bytes, sizes must fit an int32)";
    case TO_PULSAR_ERR_TOO_LARGE:
        return "message too large for one datagram (OS limit or daemon maximum)";
    case TO_PULSAR_ERR_UNAVAILABLE:
        return "no daemon listening on the socket";
    case TO_PULSAR_ERR_AGAIN:
        return "daemon socket queue is full (send timed out or would block)";
    case TO_PULSAR_ERR_IO:
        return "send to the daemon socket failed";
    case TO_PULSAR_ERR_BAD_TOPIC:
        return "invalid topic: expected t, tenant/namespace/t or persistent://tenant/namespace/t"
               " (tenant and namespace: letters, digits and - = : . _; the topic's own name"
               " UTF-8 without whitespace or control characters)";
    default:
        return "unknown to_pulsar error";
    }
}
