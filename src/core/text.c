#include "core/common.h"

/*
 * Text helpers shared by every module that stores or prints text it did not write itself
 * (include/txo/text.h), and the one conversion of a DATETIME column value into RFC 3339
 * (src/core/text.h).
 *
 * Why one place: a cut in the middle of a UTF-8 character makes MariaDB reject the whole
 * statement when the column is utf8mb4 (last_error), and a JSON encoder reject the whole
 * document, so every module that cuts text must cut it the same, correct way.
 *
 * Thread-safety: pure functions.
 */

#include <jansson.h>
#include <stdio.h>

#include "core/text.h"
#include "txo/text.h"

static bool is_cont(unsigned char c)
{
    return (c & 0xC0) == 0x80;
}

size_t txo_utf8_char_len(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    if (len == 0)
        return 0;
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return len >= 2 && is_cont(s[1]) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        /* No overlong forms (E0 80..9F) and no surrogates (ED A0..BF). */
        unsigned char lo = c == 0xE0 ? 0xA0 : 0x80;
        unsigned char hi = c == 0xED ? 0x9F : 0xBF;
        return len >= 3 && s[1] >= lo && s[1] <= hi && is_cont(s[2]) ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        /* No overlong forms (F0 80..8F) and nothing above U+10FFFF (F4 90..). */
        unsigned char lo = c == 0xF0 ? 0x90 : 0x80;
        unsigned char hi = c == 0xF4 ? 0x8F : 0xBF;
        return len >= 4 && s[1] >= lo && s[1] <= hi && is_cont(s[2]) && is_cont(s[3]) ? 4 : 0;
    }
    return 0;
}

bool txo_utf8_valid(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        size_t n = txo_utf8_char_len(s + i, len - i);
        if (n == 0)
            return false;
        i += n;
    }
    return true;
}

/* The length of the sequence a lead byte announces (2..4), or 0 for anything else. */
static size_t lead_len(unsigned char c)
{
    if ((c & 0xE0) == 0xC0)
        return 2;
    if ((c & 0xF0) == 0xE0)
        return 3;
    if ((c & 0xF8) == 0xF0)
        return 4;
    return 0;
}

size_t txo_utf8_cut(const char *str, size_t len, size_t max)
{
    const unsigned char *s = (const unsigned char *)str;
    if (len <= max)
        return len;
    /* Step back over the continuation bytes at the end (at most 3) to the last lead byte. */
    size_t start = max;
    while (start > 0 && max - start < 3 && is_cont(s[start - 1]))
        start--;
    if (start == 0)
        return max; /* only continuation bytes: invalid text, kept as it is */
    size_t need = lead_len(s[start - 1]);
    if (need > 0 && max - (start - 1) < need)
        return start - 1; /* the last character is incomplete: drop it */
    return max;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* True for "YYYY-MM-DD HH:MM:SS" followed by nothing or by "." and 1 to 6 digits. */
static bool is_datetime(const char *dt, size_t len)
{
    static const char shape[] = "dddd-dd-dd dd:dd:dd";
    if (len < 19 || len == 20 || len > 26)
        return false;
    for (size_t i = 0; i < 19; i++) {
        if (shape[i] == 'd' ? !is_digit(dt[i]) : dt[i] != shape[i])
            return false;
    }
    if (len == 19)
        return true;
    if (dt[19] != '.')
        return false;
    for (size_t i = 20; i < len; i++) {
        if (!is_digit(dt[i]))
            return false;
    }
    return true;
}

const char *txo__text_rfc3339(const char *datetime, char out[TXO_RFC3339_LEN])
{
    size_t len = datetime != NULL ? strlen(datetime) : 0;
    if (!is_datetime(datetime, len)) {
        snprintf(out, TXO_RFC3339_LEN, "%s", datetime != NULL ? datetime : "");
        return out;
    }
    /* "YYYY-MM-DDTHH:MM:SS." + 6 digits + "Z": 27 bytes and the NUL, within TXO_RFC3339_LEN. */
    memcpy(out, datetime, 19);
    out[10] = 'T';
    out[19] = '.';
    size_t digits = len > 19 ? len - 20 : 0;
    memcpy(out + 20, datetime + 20, digits);
    memset(out + 20 + digits, '0', 6 - digits);
    out[26] = 'Z';
    out[27] = '\0';
    return out;
}

/* The n decimal digits at s as a number; -1 at the first byte that is not a digit (a NUL
 * included, so nothing past the end is read). */
static int digits_at(const char *s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

bool txo__text_rfc3339_us(const char *text, int64_t *us)
{
    /* Fixed positions, checked left to right (called for every event the relay publishes and
     * the worker consumes: no sscanf). */
    const char *t = text;
    int y, mo = -1, d = -1, h = -1, mi = -1, sec = -1;
    if (t == NULL || (y = digits_at(t, 4)) < 0 || t[4] != '-' || (mo = digits_at(t + 5, 2)) < 0 ||
        t[7] != '-' || (d = digits_at(t + 8, 2)) < 0 || (t[10] != 'T' && t[10] != ' ') ||
        (h = digits_at(t + 11, 2)) < 0 || t[13] != ':' || (mi = digits_at(t + 14, 2)) < 0 ||
        t[16] != ':' || (sec = digits_at(t + 17, 2)) < 0)
        return false;
    int64_t frac = 0;
    const char *p = text + 19;
    if (*p == '.') {
        int digits = 0;
        for (p++; *p >= '0' && *p <= '9'; p++)
            if (digits++ < 6)
                frac = frac * 10 + (*p - '0');
        while (digits++ < 6)
            frac *= 10;
    }
    if (*p == 'Z')
        p++;
    if (*p != '\0')
        return false;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
        return false;
    /* Days since 1970-01-01 of the civil date (the proleptic Gregorian calendar). */
    int64_t yy = y - (mo <= 2);
    int64_t era = (yy >= 0 ? yy : yy - 399) / 400;
    int64_t yoe = yy - era * 400;
    int64_t doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    int64_t days = era * 146097 + doe - 719468;
    *us = ((days * 24 + h) * 60 + mi) * 60 * 1000000 + (int64_t)sec * 1000000 + frac;
    return true;
}

int txo__hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

void txo__utf8_sanitize(const char *text, char *out, size_t cap)
{
    size_t len = strlen(text);
    size_t i = 0;
    size_t o = 0;
    while (i < len && o + 1 < cap) {
        size_t n = txo_utf8_char_len(text + i, len - i);
        if (n == 0 || o + n >= cap) {
            out[o++] = '?';
            i++;
            continue;
        }
        memcpy(out + o, text + i, n);
        o += n;
        i += n;
    }
    out[o] = '\0';
}

bool txo__text_append_name_part(char *out, size_t cap, size_t *n, const char *part,
                                const char *reserved)
{
    size_t len = strlen(part);
    if (len == 0) {
        part = "_";
        len = 1;
    }
    if (*n + len + 1 > cap)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)part[i];
        bool bad = ch <= 0x20 || ch == 0x7f || strchr(reserved, ch) != NULL;
        out[(*n)++] = bad ? '_' : (char)ch;
    }
    out[*n] = '\0';
    return true;
}

uint64_t txo__fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211u;
    }
    return h;
}

int txo__json_check_payload(const char *text, size_t len, bool allow_nul, const char *what,
                            const char *id, struct txo_error *err)
{
    size_t flags = JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | (allow_nul ? JSON_ALLOW_NUL : 0);
    json_error_t jerr;
    json_t *doc = json_loadb(text, len, flags, &jerr);
    if (doc == NULL)
        return txo_error_set(err, TXO_ECONSTRAINT,
                             "%s %s: payload is not JSON: %s at line %d column %d", what, id,
                             jerr.text, jerr.line, jerr.column);
    json_decref(doc);
    return 0;
}

int txo__check_text_field(const char *value, size_t max, const char *whose, const char *field,
                          struct txo_error *err)
{
    if (value == NULL || value[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "%s: %s is empty", whose, field);
    size_t len = strlen(value);
    if (len > max)
        return txo_error_set(err, TXO_EINVAL, "%s: %s is %zu bytes, at most %zu", whose, field, len,
                             max);
    return 0;
}
