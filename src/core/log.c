/*
 * Logging (include/txo/log.h). Library code calls TXO_LOG(); the host decides where lines go
 * by installing a sink (SQLite sqlite3_log, Git set_error_routine). Without one, each event
 * becomes one logfmt line on stderr:
 *
 *   ts=2026-11-30T15:37:00.123Z level=info component=relay msg="claimed batch" size=10 token=ab
 *
 * Callers write a short free-text part followed by key=value context in one format string
 * ("claimed batch size=%zu token=%s"). The default sink quotes the words before the first word
 * that contains '=' as msg and appends the rest as it is, so the pairs stay machine-readable.
 * Control characters are escaped everywhere, so one event is always exactly one line.
 *
 * Invariants: the level is an atomic, read without a lock on every TXO_LOG; the sink and its
 * argument change together under sink_lock and are called outside it (a sink may log). The
 * default sink builds the whole line first and hands it to one write(2), so lines written by
 * different threads do not interleave. Messages longer than LOG_MSG_MAX are cut.
 *
 * Logging never allocates (it must work while allocations are failing) and leaves errno as it
 * found it.
 */
#include "core/common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <strings.h>
#include <unistd.h>

/* Longest formatted message, including the NUL; longer ones are cut and end in "...". */
#define LOG_MSG_MAX 2048
/* Longest default-sink line; escaping can make a line longer than its message. */
#define LOG_LINE_MAX 8192

static _Atomic int log_level = TXO_LOG_INFO;

static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static txo_log_sink_fn sink_fn; /* NULL: the default stderr sink; guarded by sink_lock */
static void *sink_arg;          /* guarded by sink_lock */

static const char *const level_names[] = {
    [TXO_LOG_ERROR] = "error",
    [TXO_LOG_WARN] = "warn",
    [TXO_LOG_INFO] = "info",
    [TXO_LOG_DEBUG] = "debug",
};

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

void txo_log_set_sink(txo_log_sink_fn sink, void *arg)
{
    pthread_mutex_lock(&sink_lock);
    sink_fn = sink;
    sink_arg = sink != NULL ? arg : NULL;
    pthread_mutex_unlock(&sink_lock);
}

/* A line under construction. Appends past the end are dropped; room for '\n' is kept. */
struct line {
    char buf[LOG_LINE_MAX];
    size_t len;
};

static void line_putc(struct line *l, char c)
{
    if (l->len + 1 < sizeof(l->buf)) {
        l->buf[l->len++] = c;
    }
}

static void line_puts(struct line *l, const char *s)
{
    for (; *s != '\0'; s++) {
        line_putc(l, *s);
    }
}

/* Appends s[0..n) with control characters escaped, and also '"' and '\\' when quoted. */
static void line_put_escaped(struct line *l, const char *s, size_t n, bool quoted)
{
    static const char hex[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') {
            line_puts(l, "\\n");
        } else if (c == '\r') {
            line_puts(l, "\\r");
        } else if (c == '\t') {
            line_puts(l, "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            line_puts(l, "\\x");
            line_putc(l, hex[c >> 4]);
            line_putc(l, hex[c & 0xf]);
        } else if (quoted && (c == '"' || c == '\\')) {
            line_putc(l, '\\');
            line_putc(l, (char)c);
        } else {
            line_putc(l, (char)c);
        }
    }
}

/*
 * Splits msg into the free text and the key=value rest: the rest starts at the first word that
 * contains '='. Returns the offset of the rest (strlen(msg) when there is none); *text_len is
 * the length of the free text without the spaces that separate it from the rest.
 */
static size_t split_msg(const char *msg, size_t *text_len)
{
    size_t i = 0;

    while (msg[i] != '\0') {
        while (msg[i] == ' ') {
            i++;
        }
        size_t word = i;
        bool has_eq = false;
        while (msg[i] != '\0' && msg[i] != ' ') {
            if (msg[i] == '=') {
                has_eq = true;
            }
            i++;
        }
        if (has_eq) {
            size_t end = word;
            while (end > 0 && msg[end - 1] == ' ') {
                end--;
            }
            *text_len = end;
            return word;
        }
    }
    size_t end = i;
    while (end > 0 && msg[end - 1] == ' ') {
        end--;
    }
    *text_len = end;
    return i;
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

static _Atomic int log_format = TXO_LOG_FORMAT_LOGFMT;

void txo_log_set_format(enum txo_log_format format)
{
    atomic_store_explicit(&log_format, (int)format, memory_order_relaxed);
}

int txo_log_format_parse(const char *name, enum txo_log_format *out)
{
    if (name != NULL && strcmp(name, "logfmt") == 0)
        *out = TXO_LOG_FORMAT_LOGFMT;
    else if (name != NULL && strcmp(name, "json") == 0)
        *out = TXO_LOG_FORMAT_JSON;
    else
        return TXO_EINVAL;
    return 0;
}

/* Appends one byte of a JSON string's content, escaped. */
static void json_putc(struct line *l, unsigned char c)
{
    static const char hex[] = "0123456789abcdef";
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
        line_puts(l, "\\u00");
        line_putc(l, hex[c >> 4]);
        line_putc(l, hex[c & 0xf]);
    } else {
        line_putc(l, (char)c);
    }
}

static void json_str(struct line *l, const char *s, size_t n)
{
    line_putc(l, '"');
    for (size_t i = 0; i < n; i++)
        json_putc(l, (unsigned char)s[i]);
    line_putc(l, '"');
}

/* The value of a logfmt escape "\\x": the byte it stands for (see out_quoted). */
static size_t logfmt_unescape(const char *s, size_t n, size_t i, unsigned char *c)
{
    static const char hex[] = "0123456789abcdef";
    char e = i + 1 < n ? s[i + 1] : '\\';
    if (e == 'n')
        *c = '\n';
    else if (e == 'r')
        *c = '\r';
    else if (e == 't')
        *c = '\t';
    else if (e == 'x' && i + 3 < n && strchr(hex, s[i + 2]) && strchr(hex, s[i + 3])) {
        *c = (unsigned char)((strchr(hex, s[i + 2]) - hex) << 4 | (strchr(hex, s[i + 3]) - hex));
        return 4;
    } else
        *c = (unsigned char)e;
    return i + 1 < n ? 2 : 1;
}

/*
 * The key=value rest of a message as JSON members: `k=v` and `k="quoted \\"v\\""` become
 * ,"k":"v"; a word without '=' becomes part of a "rest" member instead of being lost.
 */
static void json_pairs(struct line *l, const char *s)
{
    size_t n = strlen(s), i = 0;
    while (i < n) {
        while (i < n && s[i] == ' ')
            i++;
        size_t key = i;
        while (i < n && s[i] != '=' && s[i] != ' ')
            i++;
        if (i >= n || s[i] != '=' || i == key) {
            size_t start = key;
            while (i < n && s[i] != ' ')
                i++;
            if (i > start) {
                line_puts(l, ",\"rest\":");
                json_str(l, s + start, i - start);
            }
            continue;
        }
        line_putc(l, ',');
        json_str(l, s + key, i - key);
        line_putc(l, ':');
        i++; /* '=' */
        line_putc(l, '"');
        if (i < n && s[i] == '"') {
            for (i++; i < n && s[i] != '"';) {
                unsigned char c = (unsigned char)s[i];
                if (c == '\\') {
                    i += logfmt_unescape(s, n, i, &c);
                } else {
                    i++;
                }
                json_putc(l, c);
            }
            if (i < n)
                i++; /* closing quote */
        } else {
            for (; i < n && s[i] != ' '; i++)
                json_putc(l, (unsigned char)s[i]);
        }
        line_putc(l, '"');
    }
}

static void json_sink(const char *ts, enum txo_log_level level, const char *component,
                      const char *msg)
{
    struct line l = {.len = 0};
    line_puts(&l, "{\"ts\":");
    json_str(&l, ts, strlen(ts));
    line_puts(&l, ",\"level\":");
    json_str(&l, level_names[level], strlen(level_names[level]));
    line_puts(&l, ",\"component\":");
    json_str(&l, component, strlen(component));
    size_t text_len;
    size_t rest = split_msg(msg, &text_len);
    line_puts(&l, ",\"msg\":");
    json_str(&l, msg, text_len);
    json_pairs(&l, msg + rest);
    /* A line cut short by LOG_LINE_MAX would not be JSON: end it as a string and an object. */
    if (l.len + 3 >= sizeof(l.buf)) {
        l.len = sizeof(l.buf) - 64;
        while (l.len > 0 && ((unsigned char)l.buf[l.len] & 0xC0) == 0x80)
            l.len--;
        line_puts(&l, "\",\"cut\":\"true\"");
    }
    line_putc(&l, '}');
    l.buf[l.len++] = '\n';
    write_all(STDERR_FILENO, l.buf, l.len);
}

static void default_sink(enum txo_log_level level, const char *component, const char *msg)
{
    struct line l = {.len = 0};
    char ts[TXO_RFC3339_LEN];

    /* Milliseconds are enough for logs: keep "YYYY-MM-DDTHH:MM:SS.mmm" and put the 'Z' back. */
    txo_format_rfc3339(txo_realtime_us(), ts);
    char *dot = strchr(ts, '.');
    if (dot != NULL && strlen(dot) >= 5) {
        dot[4] = 'Z';
        dot[5] = '\0';
    }

    if (atomic_load_explicit(&log_format, memory_order_relaxed) == TXO_LOG_FORMAT_JSON) {
        json_sink(ts, level, component, msg);
        return;
    }
    line_puts(&l, "ts=");
    line_puts(&l, ts);
    line_puts(&l, " level=");
    line_puts(&l, level_names[level]);
    line_puts(&l, " component=");
    line_put_escaped(&l, component, strlen(component), false);

    size_t text_len;
    size_t rest = split_msg(msg, &text_len);
    line_puts(&l, " msg=\"");
    line_put_escaped(&l, msg, text_len, true);
    line_putc(&l, '"');
    if (msg[rest] != '\0') {
        line_putc(&l, ' ');
        line_put_escaped(&l, msg + rest, strlen(msg + rest), false);
    }
    /* line_putc always leaves room for this newline. */
    l.buf[l.len++] = '\n';
    write_all(STDERR_FILENO, l.buf, l.len);
}

/* ---- formatting: values escaped where the format puts them ---- */

/* An output buffer of a fixed size; what does not fit is dropped (and noticed by the caller). */
struct out {
    char *buf;
    size_t cap; /* including the NUL */
    size_t len; /* what would have been written */
};

static void out_putc(struct out *o, char c)
{
    if (o->len + 1 < o->cap)
        o->buf[o->len] = c;
    o->len++;
}

static void out_puts(struct out *o, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out_putc(o, s[i]);
}

/* s[0..n) as the inside of a logfmt quoted value: '"' and '\' and controls escaped. */
static void out_quoted(struct out *o, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            out_putc(o, '\\');
            out_putc(o, (char)c);
        } else if (c == '\n') {
            out_puts(o, "\\n", 2);
        } else if (c == '\r') {
            out_puts(o, "\\r", 2);
        } else if (c == '\t') {
            out_puts(o, "\\t", 2);
        } else if (c < 0x20 || c == 0x7f) {
            out_puts(o, "\\x", 2);
            out_putc(o, hex[c >> 4]);
            out_putc(o, hex[c & 0xf]);
        } else {
            out_putc(o, (char)c);
        }
    }
}

/* True when a bare logfmt value s[0..n) needs quotes (empty, or a space, '"', '=', '\', a
 * control character). */
static bool needs_quotes(const char *s, size_t n)
{
    if (n == 0)
        return true;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f)
            return true;
    }
    return false;
}

/*
 * vsnprintf for log messages, with every %s (and %c) value escaped for the logfmt spot the
 * format gives it: inside a quoted value (`key="%s"`) its '"', '\\' and control characters
 * are escaped; as a bare value (`key=%s`) it is quoted and escaped when it would otherwise
 * break the pair (a space, '"', '=', ...); in the free text before the pairs it is copied. So
 * an error message holding a quote or a newline can no longer end a value early or split the
 * line, and none of the call sites had to change. Other conversions are formatted by
 * snprintf one at a time. Returns the length the full message has (as vsnprintf does).
 */
static size_t format_escaped(char *buf, size_t cap, const char *fmt, va_list ap)
{
    struct out o = {.buf = buf, .cap = cap, .len = 0};
    bool in_quotes = false;
    for (const char *p = fmt; *p != '\0';) {
        if (*p != '%') {
            if (*p == '"')
                in_quotes = !in_quotes;
            out_putc(&o, *p++);
            continue;
        }
        const char *start = p++;
        if (*p == '%') {
            out_putc(&o, '%');
            p++;
            continue;
        }
        while (*p != '\0' && strchr("-+ #0", *p) != NULL)
            p++;
        int width = -1, precision = -1;
        bool star_width = false, star_precision = false;
        if (*p == '*') {
            star_width = true;
            p++;
        } else {
            while (*p >= '0' && *p <= '9')
                p++;
        }
        if (*p == '.') {
            p++;
            if (*p == '*') {
                star_precision = true;
                p++;
            } else {
                while (*p >= '0' && *p <= '9')
                    p++;
            }
        }
        char length[3] = {0};
        size_t ln = 0;
        while (*p != '\0' && strchr("hlzjtL", *p) != NULL && ln < 2)
            length[ln++] = *p++;
        char conv = *p;
        if (conv == '\0')
            break;
        p++;
        if (star_width)
            width = va_arg(ap, int);
        if (star_precision)
            precision = va_arg(ap, int);
        char spec[32];
        size_t spec_len = (size_t)(p - start);
        if (spec_len >= sizeof(spec))
            break; /* not a format we write */
        memcpy(spec, start, spec_len);
        spec[spec_len] = '\0';
        char tmp[64];
        int n = 0;
        if (conv == 's' || conv == 'c') {
            char cbuf[1];
            const char *sv;
            size_t sn;
            if (conv == 'c') {
                cbuf[0] = (char)va_arg(ap, int);
                sv = cbuf;
                sn = 1;
            } else {
                sv = va_arg(ap, const char *);
                if (sv == NULL)
                    sv = "(null)";
                sn = strlen(sv);
                if (star_precision && precision >= 0 && (size_t)precision < sn)
                    sn = (size_t)precision;
                else if (!star_precision && strchr(spec, '.') != NULL) {
                    size_t prec = (size_t)strtoul(strchr(spec, '.') + 1, NULL, 10);
                    if (prec < sn)
                        sn = prec;
                }
            }
            (void)width; /* padding of strings is not used in log messages */
            bool bare = !in_quotes && start > fmt && start[-1] == '=';
            if (in_quotes) {
                out_quoted(&o, sv, sn);
            } else if (bare && needs_quotes(sv, sn)) {
                out_putc(&o, '"');
                out_quoted(&o, sv, sn);
                out_putc(&o, '"');
            } else {
                out_puts(&o, sv, sn);
            }
            continue;
        }
        /*
         * One numeric or pointer argument, formatted by snprintf with the caller's own spec:
         * the compiler checked it against the argument at the TXO_LOG call (the format
         * attribute of txo_log_write), so the non-literal format below is safe.
         */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        char one[32];
        size_t k = 0;
        one[k++] = '%';
        for (const char *q = start + 1; q < p && k < sizeof(one) - 1; q++)
            if (*q != '*')
                one[k++] = *q;
        one[k] = '\0';
        bool is_long = ln == 1 && length[0] == 'l';
        bool is_llong = ln == 2 && length[0] == 'l';
        bool is_size = ln == 1 && (length[0] == 'z' || length[0] == 't');
        bool is_max = ln == 1 && length[0] == 'j';
        switch (conv) {
        case 'd':
        case 'i':
            if (is_llong)
                n = snprintf(tmp, sizeof(tmp), one, va_arg(ap, long long));
            else if (is_long)
                n = snprintf(tmp, sizeof(tmp), one, va_arg(ap, long));
            else if (is_size)
                n = snprintf(tmp, sizeof(tmp), one, va_arg(ap, ptrdiff_t));
            else if (is_max)
                n = snprintf(tmp, sizeof(tmp), one, va_arg(ap, intmax_t));
            else
                n = snprintf(tmp, sizeof(tmp), one, va_arg(ap, int));
            break;
        case 'u':
        case 'x':
        case 'X':
        case 'o':
            if (is_llong)
                n = snprintf(tmp, sizeof(tmp), one, va_arg(ap, unsigned long long));
            else if (is_long)
                n = snprintf(tmp, sizeof(tmp), one, va_arg(ap, unsigned long));
            else if (is_size)
                n = snprintf(tmp, sizeof(tmp), one, va_arg(ap, size_t));
            else if (is_max)
                n = snprintf(tmp, sizeof(tmp), one, va_arg(ap, uintmax_t));
            else
                n = snprintf(tmp, sizeof(tmp), one, va_arg(ap, unsigned));
            break;
        case 'f':
        case 'F':
        case 'e':
        case 'E':
        case 'g':
        case 'G':
        case 'a':
        case 'A':
            if (ln == 1 && length[0] == 'L')
                n = snprintf(tmp, sizeof(tmp), one, va_arg(ap, long double));
            else
                n = snprintf(tmp, sizeof(tmp), one, va_arg(ap, double));
            break;
        case 'p':
            n = snprintf(tmp, sizeof(tmp), one, va_arg(ap, void *));
            break;
        default:
            n = 0; /* %n and unknown conversions write nothing */
            break;
        }
#pragma GCC diagnostic pop
        if (n > 0)
            out_puts(&o, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
    }
    if (o.cap > 0)
        o.buf[o.len < o.cap ? o.len : o.cap - 1] = '\0';
    return o.len;
}

void txo_log_write(enum txo_log_level level, const char *component, const char *fmt, ...)
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

    int saved_errno = errno;
    char msg[LOG_MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    size_t n = format_escaped(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n >= sizeof(msg)) {
        /* Cut before the last (possibly partial) UTF-8 character and mark the cut. */
        size_t end = sizeof(msg) - 4;
        while (end > 0 && ((unsigned char)msg[end] & 0xC0) == 0x80) {
            end--;
        }
        memcpy(msg + end, "...", 4);
    }

    pthread_mutex_lock(&sink_lock);
    txo_log_sink_fn fn = sink_fn;
    void *arg = sink_arg;
    pthread_mutex_unlock(&sink_lock);

    if (fn != NULL) {
        fn(level, component, msg, arg);
    } else {
        default_sink(level, component, msg);
    }
    errno = saved_errno;
}
