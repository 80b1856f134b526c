/*
 * The normal form of SQL that a migration's checksum covers (src/db/sql_normalize.h): no
 * comments, whitespace collapsed, quoted text untouched. One pass; the result is never
 * longer than the input.
 *
 * Thread-safety: pure.
 */
#include "core/common.h"

#include "db/sql_normalize.h"

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* The character after "--" that makes it a comment: whitespace or a control character
 * (the terminating NUL included, so "--" at the very end is a comment). */
static bool ends_dash_dash(char c)
{
    unsigned char u = (unsigned char)c;
    return u <= 0x20 || u == 0x7f;
}

struct norm_out {
    char *buf;
    size_t len;
    bool space; /* whitespace or a comment was skipped since the last character written */
};

/* Writes c, preceded by one space when whitespace was skipped and something was written. */
static void put(struct norm_out *o, char c)
{
    if (o->space && o->len > 0)
        o->buf[o->len++] = ' ';
    o->space = false;
    o->buf[o->len++] = c;
}

/* Copies the quoted text that starts at p (on its opening quote); returns what follows it. */
static const char *copy_quoted(struct norm_out *o, const char *p)
{
    char quote = *p;
    put(o, *p++);
    while (*p) {
        if (*p == '\\' && quote != '`' && p[1] != '\0') {
            o->buf[o->len++] = *p++;
            o->buf[o->len++] = *p++;
        } else if (*p == quote && p[1] == quote) {
            o->buf[o->len++] = *p++;
            o->buf[o->len++] = *p++;
        } else if (*p == quote) {
            o->buf[o->len++] = *p++;
            break;
        } else {
            o->buf[o->len++] = *p++;
        }
    }
    return p;
}

char *txo__sql_normalize(const char *sql)
{
    struct norm_out o = {txo_malloc(strlen(sql) + 1), 0, false};
    if (!o.buf)
        return NULL;
    const char *p = sql;
    while (*p) {
        if (*p == '\'' || *p == '"' || *p == '`') {
            p = copy_quoted(&o, p);
        } else if (*p == '#' || (p[0] == '-' && p[1] == '-' && ends_dash_dash(p[2]))) {
            while (*p && *p != '\n')
                p++;
            o.space = true;
        } else if (p[0] == '/' && p[1] == '*' && (p[2] == '!' || (p[2] == 'M' && p[3] == '!'))) {
            /* An executable comment: its opener, then its content and closer as SQL. */
            put(&o, *p++);
            put(&o, *p++);
        } else if (p[0] == '/' && p[1] == '*') {
            const char *end = strstr(p + 2, "*/");
            p = end ? end + 2 : p + strlen(p);
            o.space = true;
        } else if (is_space(*p)) {
            p++;
            o.space = true;
        } else {
            put(&o, *p++);
        }
    }
    o.buf[o.len] = '\0';
    return o.buf;
}
