/*
 * utf8.c — strict UTF-8 validation (see utf8.h).
 */
#include "utf8.h"

#include <stdio.h>

/* "bytes c0 af": the n bytes at p, for a message. */
static void hex_bytes(const uint8_t *p, size_t n, char *buf, size_t cap) {
    int k = snprintf(buf, cap, "byte%s", n > 1 ? "s" : "");
    for (size_t i = 0; i < n && k > 0 && (size_t)k < cap; i++)
        k += snprintf(buf + k, cap - (size_t)k, " %02x", p[i]);
}

size_t emi_utf8_seq(const uint8_t *p, size_t len, char *why, size_t cap) {
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    char bytes[32];
    uint8_t c = p[0];
    size_t n;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c < 0xC0) {
        if (why) snprintf(why, cap, "stray continuation byte 0x%02x", c);
        return 0;
    }
    if (c >= 0xF8) {
        if (why) snprintf(why, cap, "byte 0x%02x (never used in UTF-8)", c);
        return 0;
    }
    if (c < 0xE0) n = 2, cp = c & 0x1Fu;
    else if (c < 0xF0) n = 3, cp = c & 0x0Fu;
    else n = 4, cp = c & 0x07u;
    size_t k = 1;
    while (k < n && k < len && (p[k] & 0xC0u) == 0x80u) cp = (cp << 6) | (p[k++] & 0x3Fu);
    if (k < n) {
        if (why) {
            hex_bytes(p, k, bytes, sizeof bytes);
            snprintf(why, cap, "truncated sequence: %zu of its %zu bytes (%s)", k, n, bytes);
        }
        return 0;
    }
    const char *bad = NULL;
    if (cp < min_cp[n]) bad = "overlong encoding of";
    else if (cp >= 0xD800 && cp <= 0xDFFF) bad = "UTF-8-encoded surrogate";
    else if (cp > 0x10FFFF) bad = "code point above U+10FFFF:";
    if (bad != NULL) {
        if (why) {
            hex_bytes(p, n, bytes, sizeof bytes);
            snprintf(why, cap, "%s U+%04X (%s)", bad, (unsigned)cp, bytes);
        }
        return 0;
    }
    return n;
}

bool emi_utf8_check(const uint8_t *p, size_t len, size_t *at, char *why, size_t cap) {
    for (size_t i = 0; i < len;) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t n = emi_utf8_seq(p + i, len - i, why, cap);
        if (n == 0) {
            *at = i;
            return false;
        }
        i += n;
    }
    return true;
}
