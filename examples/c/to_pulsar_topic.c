/* The daemon's topic-name rule, on the sending side (as to_pulsar.topics in Python): a
 * name the daemon would discard as bad_topic is refused before it is sent. */
#include "to_pulsar.h"

#include <string.h>

/* The next code point of s[*i..len) as strict UTF-8 (no overlong forms, surrogates or
 * values above U+10FFFF), advancing *i; -1 if it is not UTF-8. */
static long next_code_point(const unsigned char *s, size_t len, size_t *i)
{
    unsigned char c = s[*i];
    size_t n, k;
    long cp, min;
    if (c < 0x80) {
        *i += 1;
        return c;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        n = 1, cp = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 2, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 3, cp = c & 0x07, min = 0x10000;
    } else {
        return -1;
    }
    if (n >= len - *i)
        return -1; /* cut short */
    for (k = 1; k <= n; k++) {
        if ((s[*i + k] & 0xC0) != 0x80)
            return -1;
        cp = (cp << 6) | (s[*i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    *i += n + 1;
    return cp;
}

/* '/', whitespace (Python's str.isspace) and control characters. */
static int excluded_from_local_name(long cp)
{
    return cp <= 0x20 || cp == '/' || (cp >= 0x7F && cp <= 0xA0) || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

/* Tenant and namespace: ASCII letters, digits and - = : . _ (Pulsar's NamedEntity). */
static int named_entity(const char *s, size_t len)
{
    size_t i;
    if (len == 0)
        return 0;
    for (i = 0; i < len; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 (c != '\0' && strchr("-=:._", c) != NULL);
        if (!ok)
            return 0;
    }
    return 1;
}

int to_pulsar_check_topic(const char *topic, size_t topic_len)
{
    const unsigned char *s = (const unsigned char *)topic;
    size_t i = 0, start = 0, slash[2] = {0, 0}, slashes = 0, local;
    int qualified = 0;
    if (topic == NULL || topic_len == 0 || topic_len > TO_PULSAR_MAX_TOPIC)
        return TO_PULSAR_ERR_INVALID;
    for (i = 0; i < topic_len;)
        if (next_code_point(s, topic_len, &i) < 0)
            return TO_PULSAR_ERR_BAD_TOPIC;
    for (i = 0; i + 3 <= topic_len; i++) {
        if (memcmp(topic + i, "://", 3) == 0) {
            if (!((i == 10 && memcmp(topic, "persistent", 10) == 0) ||
                  (i == 14 && memcmp(topic, "non-persistent", 14) == 0)))
                return TO_PULSAR_ERR_BAD_TOPIC;
            qualified = 1;
            start = i + 3;
            break;
        }
    }
    for (i = start; i < topic_len; i++) {
        if (topic[i] == '/') {
            if (slashes == 2)
                return TO_PULSAR_ERR_BAD_TOPIC; /* a/b/c/d */
            slash[slashes++] = i;
        }
    }
    if (slashes == 1 || (qualified && slashes == 0))
        return TO_PULSAR_ERR_BAD_TOPIC;
    local = start;
    if (slashes == 2) {
        if (!named_entity(topic + start, slash[0] - start) ||
            !named_entity(topic + slash[0] + 1, slash[1] - slash[0] - 1))
            return TO_PULSAR_ERR_BAD_TOPIC;
        local = slash[1] + 1;
    }
    if (local == topic_len)
        return TO_PULSAR_ERR_BAD_TOPIC;
    for (i = local; i < topic_len;)
        if (excluded_from_local_name(next_code_point(s, topic_len, &i)))
            return TO_PULSAR_ERR_BAD_TOPIC;
    return 0;
}
