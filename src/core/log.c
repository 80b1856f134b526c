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
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0) {
        msg[0] = '\0';
    } else if ((size_t)n >= sizeof(msg)) {
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
