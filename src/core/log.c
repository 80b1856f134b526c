/*
 * Logging (include/txo/log.h). Library code calls TXO_LOG() with a constant message and typed
 * fields; the host decides where events go by installing a sink (SQLite sqlite3_log, Git
 * set_error_routine). Without one, each event becomes one line on stderr, logfmt or JSON:
 *
 *   ts=2026-11-30T15:37:00.123Z level=info component=relay msg="claimed batch" size=10 token=ab
 *
 * Because values arrive typed and apart from the message, the encoders never have to guess
 * where text ends and pairs begin: each value is quoted and escaped for its format, numbers
 * stay numbers in JSON, and nothing a value holds can end it early or split the line.
 *
 * Invariants: the level and the format are atomics read without a lock; the sink and its
 * argument change together under sink_lock and are called outside it (a sink may log). Every
 * sink sees checked fields (valid unique keys, no NULL strings, real lengths). The default sink
 * builds the whole line first and hands it to one write(2), so lines written by different
 * threads do not interleave. A line never passes TXO_LOG_LINE_MAX: string values are cut at
 * LOG_VALUE_MAX bytes (ending in "..."), and fields that do not fit are dropped whole, the line
 * then ending with truncated=true, so it is always complete logfmt or JSON.
 *
 * Logging never allocates (it must work while allocations are failing) and leaves errno as it
 * found it.
 */
#include "core/common.h"

#include "txo/trace.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <strings.h>
#include <unistd.h>

/* Longest string value, message included, in bytes before escaping; longer ones are cut. */
#define LOG_VALUE_MAX 1024
/* Longest component name written; component names are short constants. */
#define LOG_COMPONENT_MAX 64
/* Most fields one event keeps (TXO_LOG allows 20; direct txo_log_emit callers are cut). */
#define LOG_FIELDS_MAX 32
/* Room kept at the end of a line for the truncation marker, the closing brace and '\n'. */
#define LOG_TAIL_ROOM 32

static _Atomic int log_level = TXO_LOG_INFO;
static _Atomic int log_format = TXO_LOG_FORMAT_LOGFMT;

static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static txo_log_sink_fn sink_fn; /* NULL: the default stderr sink; guarded by sink_lock */
static void *sink_arg;          /* guarded by sink_lock */

static const char *const level_names[] = {
    [TXO_LOG_ERROR] = "error",
    [TXO_LOG_WARN] = "warn",
    [TXO_LOG_INFO] = "info",
    [TXO_LOG_DEBUG] = "debug",
};

/* Keys every line starts with (and the truncation marker): no field may use them. */
static const char *const reserved_keys[] = {"ts",        "level",    "component", "msg",
                                            "truncated", "trace_id", "span_id"};

static const char hex[] = "0123456789abcdef";

void txo_log_set_level(enum txo_log_level level)
{
    TXO_ASSERT(level >= TXO_LOG_ERROR && level <= TXO_LOG_DEBUG);
    atomic_store_explicit(&log_level, (int)level, memory_order_relaxed);
}

enum txo_log_level txo_log_get_level(void)
{
    return (enum txo_log_level)atomic_load_explicit(&log_level, memory_order_relaxed);
}

int txo_log_level_parse(const char *name, enum txo_log_level *out)
{
    if (name == NULL) {
        return TXO_EINVAL;
    }
    for (size_t i = 0; i < TXO_ARRAY_LEN(level_names); i++) {
        if (strcasecmp(name, level_names[i]) == 0) {
            *out = (enum txo_log_level)i;
            return 0;
        }
    }
    return TXO_EINVAL;
}

void txo_log_set_format(enum txo_log_format format)
{
    TXO_ASSERT(format == TXO_LOG_FORMAT_LOGFMT || format == TXO_LOG_FORMAT_JSON);
    atomic_store_explicit(&log_format, (int)format, memory_order_relaxed);
}

enum txo_log_format txo_log_get_format(void)
{
    return (enum txo_log_format)atomic_load_explicit(&log_format, memory_order_relaxed);
}

int txo_log_format_parse(const char *name, enum txo_log_format *out)
{
    if (name != NULL && strcmp(name, "logfmt") == 0) {
        *out = TXO_LOG_FORMAT_LOGFMT;
    } else if (name != NULL && strcmp(name, "json") == 0) {
        *out = TXO_LOG_FORMAT_JSON;
    } else {
        return TXO_EINVAL;
    }
    return 0;
}

void txo_log_set_sink(txo_log_sink_fn sink, void *arg)
{
    pthread_mutex_lock(&sink_lock);
    sink_fn = sink;
    sink_arg = sink != NULL ? arg : NULL;
    pthread_mutex_unlock(&sink_lock);
}

/* ---- the line buffer ---- */

/*
 * A line under construction in buf[0..cap). Appends stop at `limit`, which keeps
 * LOG_TAIL_ROOM bytes free for the end of the line, and set `full`; a caller that sees `full`
 * rolls back to the start of the field it was writing.
 */
struct line {
    char *buf;
    size_t cap;
    size_t limit;
    size_t len;
    bool full;
};

static void line_putc(struct line *l, char c)
{
    if (l->len < l->limit) {
        l->buf[l->len++] = c;
    } else {
        l->full = true;
    }
}

static void line_puts(struct line *l, const char *s)
{
    for (; *s != '\0'; s++) {
        line_putc(l, *s);
    }
}

/* Appends the tail after `limit` (there is always room: LOG_TAIL_ROOM). */
static void line_tail(struct line *l, const char *s)
{
    for (; *s != '\0' && l->len + 1 < l->cap; s++) {
        l->buf[l->len++] = *s;
    }
}

/* The length of s[0..n) once cut to LOG_VALUE_MAX bytes before a UTF-8 character boundary. */
static size_t cut_len(const char *s, size_t n, size_t max, bool *cut)
{
    *cut = n > max;
    if (!*cut) {
        return n;
    }
    size_t end = max;
    while (end > 0 && ((unsigned char)s[end] & 0xC0) == 0x80) {
        end--;
    }
    return end;
}

static void put_u64(struct line *l, uint64_t v)
{
    char digits[20];
    size_t n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0) {
        line_putc(l, digits[--n]);
    }
}

static void put_i64(struct line *l, int64_t v)
{
    if (v < 0) {
        line_putc(l, '-');
        put_u64(l, (uint64_t)0 - (uint64_t)v);
    } else {
        put_u64(l, (uint64_t)v);
    }
}

/* A finite double, in the shortest form that usually reads back the same (%.15g). */
static void put_f64(struct line *l, double v)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof(tmp), "%.15g", v);
    if (n > 0 && (size_t)n < sizeof(tmp)) {
        line_puts(l, tmp);
    }
}

/* The length of a string field's value (SIZE_MAX in the field: up to the NUL). */
static size_t str_len(const struct txo_log_field *f)
{
    return f->v.str.len != SIZE_MAX ? f->v.str.len : strlen(f->v.str.ptr);
}

/* ---- logfmt ---- */

/* True when a logfmt value must be quoted: empty, or holding a space, '"', '=', '\\' or a
 * control character. */
static bool logfmt_needs_quotes(const char *s, size_t n)
{
    if (n == 0) {
        return true;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f) {
            return true;
        }
    }
    return false;
}

/*
 * s[0..len) in double quotes, as both formats quote: '"' and '\\' escaped by a backslash, \n
 * \r \t, other control characters as ctl (logfmt "\\x", JSON "\\u00") and two hex digits,
 * "..." before the closing quote when the value was cut.
 */
static void put_quoted(struct line *l, const char *s, size_t len, bool cut, const char *ctl)
{
    line_putc(l, '"');
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            line_putc(l, '\\');
            line_putc(l, (char)c);
        } else if (c == '\n') {
            line_puts(l, "\\n");
        } else if (c == '\r') {
            line_puts(l, "\\r");
        } else if (c == '\t') {
            line_puts(l, "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            line_puts(l, ctl);
            line_putc(l, hex[c >> 4]);
            line_putc(l, hex[c & 0xf]);
        } else {
            line_putc(l, (char)c);
        }
    }
    if (cut) {
        line_puts(l, "...");
    }
    line_putc(l, '"');
}

/*
 * A string value: bare when it can be, otherwise quoted with '"' and '\\' escaped by a
 * backslash and control characters as \n, \r, \t or \xHH (the escapes go-logfmt writes), so
 * one event is always one line.
 */
static void logfmt_str(struct line *l, const char *s, size_t n)
{
    bool cut;
    size_t len = cut_len(s, n, LOG_VALUE_MAX, &cut);
    if (!cut && !logfmt_needs_quotes(s, len)) {
        for (size_t i = 0; i < len; i++) {
            line_putc(l, s[i]);
        }
        return;
    }
    put_quoted(l, s, len, cut, "\\x");
}

/* ---- JSON ---- */

/* A JSON string: '"', '\\' and control characters escaped; bytes >= 0x80 passed through. */
static void json_str(struct line *l, const char *s, size_t n, size_t max)
{
    bool cut;
    size_t len = cut_len(s, n, max, &cut);
    put_quoted(l, s, len, cut, "\\u00");
}

/* ---- one line ---- */

/*
 * A field's value, the same in both formats but for two things: a string is quoted only
 * when logfmt needs it and always in JSON, and a float that is not finite is NaN, +Inf or
 * -Inf in logfmt but null in JSON, which has no such numbers.
 */
static void put_value(struct line *l, const struct txo_log_field *f, bool json)
{
    switch (f->kind) {
    case TXO_LOG_KIND_STR:
        if (json) {
            json_str(l, f->v.str.ptr, str_len(f), LOG_VALUE_MAX);
        } else {
            logfmt_str(l, f->v.str.ptr, str_len(f));
        }
        break;
    case TXO_LOG_KIND_I64:
        put_i64(l, f->v.i64);
        break;
    case TXO_LOG_KIND_U64:
        put_u64(l, f->v.u64);
        break;
    case TXO_LOG_KIND_F64:
        if (isfinite(f->v.f64)) {
            put_f64(l, f->v.f64);
        } else if (json) {
            line_puts(l, "null");
        } else if (isnan(f->v.f64)) {
            line_puts(l, "NaN");
        } else {
            line_puts(l, f->v.f64 > 0 ? "+Inf" : "-Inf");
        }
        break;
    case TXO_LOG_KIND_BOOL:
        line_puts(l, f->v.b ? "true" : "false");
        break;
    }
}

size_t txo_log_format_line(char *buf, size_t cap, enum txo_log_format format, const char *ts,
                           enum txo_log_level level, const char *component, const char *msg,
                           const struct txo_log_field *fields, size_t n_fields)
{
    TXO_ASSERT(cap > LOG_TAIL_ROOM);
    struct line l = {.buf = buf, .cap = cap, .limit = cap - LOG_TAIL_ROOM, .len = 0};
    bool json = format == TXO_LOG_FORMAT_JSON;
    const char *lvl = level_names[(unsigned)level <= TXO_LOG_DEBUG ? level : TXO_LOG_ERROR];

    /* The head is short enough to always fit: LOG_VALUE_MAX and LOG_COMPONENT_MAX bound it. */
    if (json) {
        line_puts(&l, "{\"ts\":");
        json_str(&l, ts, strlen(ts), LOG_COMPONENT_MAX);
        line_puts(&l, ",\"level\":\"");
        line_puts(&l, lvl);
        line_puts(&l, "\",\"component\":");
        json_str(&l, component, strlen(component), LOG_COMPONENT_MAX);
        line_puts(&l, ",\"msg\":");
        json_str(&l, msg, strlen(msg), LOG_VALUE_MAX);
    } else {
        line_puts(&l, "ts=");
        logfmt_str(&l, ts, strlen(ts));
        line_puts(&l, " level=");
        line_puts(&l, lvl);
        line_puts(&l, " component=");
        logfmt_str(&l, component, strnlen(component, LOG_COMPONENT_MAX));
        line_puts(&l, " msg=");
        logfmt_str(&l, msg, strlen(msg));
    }

    bool truncated = l.full;
    for (size_t i = 0; i < n_fields && !truncated; i++) {
        const struct txo_log_field *f = &fields[i];
        if (f->kind == TXO_LOG_KIND_STR && f->v.str.ptr == NULL) {
            continue;
        }
        size_t mark = l.len;
        if (json) {
            line_puts(&l, ",\"");
            line_puts(&l, f->key);
            line_puts(&l, "\":");
        } else {
            line_putc(&l, ' ');
            line_puts(&l, f->key);
            line_putc(&l, '=');
        }
        put_value(&l, f, json);
        if (l.full) {
            l.len = mark;
            truncated = true;
        }
    }
    if (truncated) {
        line_tail(&l, json ? ",\"truncated\":true" : " truncated=true");
    }
    line_tail(&l, json ? "}\n" : "\n");
    l.buf[l.len] = '\0';
    return l.len;
}

/* Writes all of buf to fd, retrying after signals and short writes. Errors are ignored:
 * there is nowhere left to report them. */
static void write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

static void default_sink(enum txo_log_level level, const char *component, const char *msg,
                         const struct txo_log_field *fields, size_t n_fields)
{
    char ts[TXO_RFC3339_LEN];

    /* Milliseconds are enough for logs: keep "YYYY-MM-DDTHH:MM:SS.mmm" and put the 'Z' back. */
    txo_format_rfc3339(txo_realtime_us(), ts);
    char *dot = strchr(ts, '.');
    if (dot != NULL && strlen(dot) >= 5) {
        dot[4] = 'Z';
        dot[5] = '\0';
    }
    char buf[TXO_LOG_LINE_MAX];
    size_t n = txo_log_format_line(buf, sizeof(buf), txo_log_get_format(), ts, level, component,
                                   msg, fields, n_fields);
    write_all(STDERR_FILENO, buf, n);
}

/* ---- checking the fields ---- */

static bool key_valid(const char *key)
{
    if (key == NULL || *key == '\0') {
        return false;
    }
    for (const char *p = key; *p != '\0'; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '.')) {
            return false;
        }
    }
    for (size_t i = 0; i < TXO_ARRAY_LEN(reserved_keys); i++) {
        if (strcmp(key, reserved_keys[i]) == 0) {
            return false;
        }
    }
    return true;
}

/*
 * Copies the fields a sink may see into out: a bad or repeated key is a bug in the caller
 * (fatal in debug builds, the field dropped otherwise), a NULL string leaves its field out,
 * and each string gets its real length. Returns how many were kept.
 */
static size_t check_fields(const struct txo_log_field *in, size_t n,
                           struct txo_log_field out[LOG_FIELDS_MAX])
{
    size_t kept = 0;
    for (size_t i = 0; i < n && kept < LOG_FIELDS_MAX; i++) {
        bool ok = key_valid(in[i].key);
        for (size_t j = 0; ok && j < i; j++) {
            ok = in[j].key == NULL || strcmp(in[i].key, in[j].key) != 0;
        }
        if (!ok) {
#ifndef NDEBUG
            TXO_BUG("log field key \"%s\" is not [a-z0-9_.]+, is reserved or repeats",
                    in[i].key != NULL ? in[i].key : "(null)");
#endif
            continue;
        }
        out[kept] = in[i];
        if (in[i].kind == TXO_LOG_KIND_STR) {
            if (in[i].v.str.ptr == NULL) {
                continue;
            }
            if (in[i].v.str.len == SIZE_MAX) {
                out[kept].v.str.len = strlen(in[i].v.str.ptr);
            }
        } else if ((unsigned)in[i].kind > TXO_LOG_KIND_BOOL) {
            TXO_BUG("log field \"%s\" has kind %d", in[i].key, (int)in[i].kind);
        }
        kept++;
    }
    return kept;
}

void txo_log_emit(enum txo_log_level level, const char *component, const char *msg,
                  const struct txo_log_field *fields, size_t n_fields)
{
    if (level > txo_log_get_level()) {
        return;
    }
    if ((unsigned)level > TXO_LOG_DEBUG) {
        level = TXO_LOG_ERROR; /* a negative level passed the filter: treat it as an error */
    }
    if (component == NULL) {
        component = "txo";
    }
    if (msg == NULL) {
        msg = "";
    }

    int saved_errno = errno;
    struct txo_log_field checked[LOG_FIELDS_MAX];
    size_t n = check_fields(fields, fields != NULL ? n_fields : 0, checked);
    /* Inside a traced operation: its trace and span (a call has at most 20 fields of its own,
     * so there is room). */
    char trace_id[33], span_id[17];
    const struct txo_trace_ctx *tc = txo_trace_current();
    if (tc != NULL && n + 2 <= LOG_FIELDS_MAX) {
        txo_trace_id_hex(tc, trace_id);
        txo_trace_span_hex(tc, span_id);
        checked[n++] = TXO_KV_STR("trace_id", trace_id);
        checked[n - 1].v.str.len = 32;
        checked[n++] = TXO_KV_STR("span_id", span_id);
        checked[n - 1].v.str.len = 16;
    }

    pthread_mutex_lock(&sink_lock);
    txo_log_sink_fn fn = sink_fn;
    void *arg = sink_arg;
    pthread_mutex_unlock(&sink_lock);

    if (fn != NULL) {
        fn(level, component, msg, checked, n, arg);
    } else {
        default_sink(level, component, msg, checked, n);
    }
    errno = saved_errno;
}
