/* to_pulsar_send SOCKET TOPIC VALUE [KEY] [PARTITION_KEY]: one message, timestamp now.
 *
 * An empty KEY means no key (so a PARTITION_KEY can be given without one). Exit 0 on
 * success, 1 when the send fails, 2 for bad arguments; errors are one line on stderr.
 */
#define _POSIX_C_SOURCE 200809L

#include "to_pulsar.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] = "usage: to_pulsar_send SOCKET TOPIC VALUE [KEY] [PARTITION_KEY]\n";

/* PARTITION_KEY: a uint32, or a negative int32 (same key by two's complement). */
static int parse_partition_key(const char *text, uint32_t *out)
{
    char *end;
    long long v;
    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < -2147483648LL || v > 4294967295LL)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

int main(int argc, char **argv)
{
    struct to_pulsar tp;
    const char *key;
    uint32_t partition_key = 0;
    int keyed = argc > 5, rc;

    if (argc < 4 || argc > 6) {
        fputs(usage, stderr);
        return 2;
    }
    if (keyed && parse_partition_key(argv[5], &partition_key) < 0) {
        fprintf(stderr, "to_pulsar_send: error: PARTITION_KEY must be an int32 or uint32, "
                        "got '%s'\n", argv[5]);
        return 2;
    }
    key = argc > 4 ? argv[4] : "";
    if (to_pulsar_keyed_size(strlen(argv[2]), strlen(key), strlen(argv[3])) == 0) {
        fputs("to_pulsar_send: error: TOPIC must be 1..32767 bytes\n", stderr);
        return 2;
    }
    if (to_pulsar_check_topic(argv[2], strlen(argv[2])) < 0) {
        fprintf(stderr, "to_pulsar_send: error: '%s': %s\n", argv[2],
                to_pulsar_strerror(TO_PULSAR_ERR_BAD_TOPIC));
        return 2;
    }
    rc = to_pulsar_open(&tp, argv[1]);
    if (rc == 0) {
        if (keyed)
            rc = to_pulsar_send_keyed(&tp, partition_key, argv[2], key, strlen(key), argv[3],
                                      strlen(argv[3]), to_pulsar_now_ms());
        else
            rc = to_pulsar_send_any(&tp, argv[2], key, strlen(key), argv[3], strlen(argv[3]),
                                    to_pulsar_now_ms());
    }
    to_pulsar_close(&tp);
    if (rc < 0) {
        fprintf(stderr, "to_pulsar_send: error: %s: %s (%s)\n", tp.socket_path,
                to_pulsar_strerror(rc), tp.last_errno ? strerror(tp.last_errno) : "-");
        return rc == TO_PULSAR_ERR_INVALID || rc == TO_PULSAR_ERR_BAD_TOPIC ? 2 : 1;
    }
    return 0;
}
