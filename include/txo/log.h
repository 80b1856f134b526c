/*
 * Logging. Library code never writes to stdout or stderr itself: it calls TXO_LOG(), and the
 * host program decides where lines go by installing a sink.
 *
 * An event is a constant message plus typed key/value fields:
 *
 *   TXO_LOG(TXO_LOG_INFO, "relay", "claimed batch", TXO_KV_U64("size", n),
 *           TXO_KV_STR("token", tok));
 *
 * The message is a string literal (anything else does not compile): what varies goes into
 * fields, so every line can be read back by a machine. The default sink writes one line per
 * event to stderr, as logfmt (the default) or as one JSON object:
 *
 *   ts=2026-11-30T15:37:00.123Z level=info component=relay msg="claimed batch" size=10 token=ab
 *   {"ts":"2026-11-30T15:37:00.123Z","level":"info","component":"relay","msg":"claimed batch",
 *    "size":10,"token":"ab"}
 *
 * Inside a traced operation (txo_trace_set_current(), txo/trace.h) every line also carries
 * trace_id and span_id, the W3C ids of the operation's span.
 *
 * Fields: key names are [a-z0-9_.]+, unique within an event and never ts, level, component,
 * msg, truncated, trace_id or span_id; breaking that is a programming error (an assertion in
 * debug builds; a
 * release build writes the first of two equal keys and drops the other). A NULL string value
 * leaves its field out. Each string value is cut to 1024 bytes, and a line that would pass
 * 8 KiB loses its last fields and ends with truncated=true; either way it stays valid logfmt
 * or JSON.
 *
 * Levels: error (a human must act), warn (degraded but recovering), info (lifecycle: start,
 * stop, effective config), debug (per message). TXO_LOG checks the level before it evaluates
 * its arguments.
 *
 * Logging never allocates, leaves errno as it found it, and the default sink hands each line to
 * one write(2), so lines written by different threads do not interleave.
 *
 * Thread-safety: TXO_LOG may be called from any thread. txo_log_set_sink() and
 * txo_log_set_level() are meant for start-up; the level and the format are read atomically.
 */
#ifndef TXO_LOG_H
#define TXO_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"

enum txo_log_level {
    TXO_LOG_ERROR = 0,
    TXO_LOG_WARN = 1,
    TXO_LOG_INFO = 2,
    TXO_LOG_DEBUG = 3,
};

/* The type of a field's value: which member of txo_log_field.v holds it. */
enum txo_log_kind {
    TXO_LOG_KIND_STR = 0, /* v.str: bytes, not necessarily NUL-terminated */
    TXO_LOG_KIND_I64,     /* v.i64 */
    TXO_LOG_KIND_U64,     /* v.u64 */
    TXO_LOG_KIND_F64,     /* v.f64: written as a number; NaN and infinities as null in JSON */
    TXO_LOG_KIND_BOOL,    /* v.b */
};

/*
 * One key/value field of an event. Build them with the TXO_KV_* macros. The key and a string
 * value are borrowed for the duration of the TXO_LOG call.
 */
struct txo_log_field {
    const char *key;
    enum txo_log_kind kind;
    union {
        struct {
            const char *ptr; /* NULL: the field is left out */
            size_t len;      /* SIZE_MAX: up to the NUL; a sink always sees the real length */
        } str;
        int64_t i64;
        uint64_t u64;
        double f64;
        bool b;
    } v;
};

#define TXO_KV_STR(k, s)                                                                           \
    ((struct txo_log_field){.key = "" k "", .kind = TXO_LOG_KIND_STR, .v.str = {(s), SIZE_MAX}})
/* The first n bytes at s (which need not end in a NUL). */
#define TXO_KV_STRN(k, s, n)                                                                       \
    ((struct txo_log_field){.key = "" k "", .kind = TXO_LOG_KIND_STR, .v.str = {(s), (n)}})
#define TXO_KV_I64(k, x)                                                                           \
    ((struct txo_log_field){.key = "" k "", .kind = TXO_LOG_KIND_I64, .v.i64 = (x)})
#define TXO_KV_U64(k, x)                                                                           \
    ((struct txo_log_field){.key = "" k "", .kind = TXO_LOG_KIND_U64, .v.u64 = (x)})
#define TXO_KV_F64(k, x)                                                                           \
    ((struct txo_log_field){.key = "" k "", .kind = TXO_LOG_KIND_F64, .v.f64 = (x)})
#define TXO_KV_BOOL(k, x)                                                                          \
    ((struct txo_log_field){.key = "" k "", .kind = TXO_LOG_KIND_BOOL, .v.b = (x)})

/*
 * A sink receives each event that passed the level: `component` names the module ("relay",
 * "saga", ...), `msg` is the constant message, and fields[0..n_fields) its fields, already
 * checked: NULL strings removed, repeated keys dropped, every string's len set. All of it is
 * borrowed for the duration of the call. A sink may be called from any thread at once.
 */
typedef void (*txo_log_sink_fn)(enum txo_log_level level, const char *component, const char *msg,
                                const struct txo_log_field *fields, size_t n_fields, void *arg);

/* Installs a sink (NULL restores the default stderr sink). */
TXO_API void txo_log_set_sink(txo_log_sink_fn sink, void *arg);

/* Events above `level` are dropped before their arguments are evaluated. Default: info. */
TXO_API void txo_log_set_level(enum txo_log_level level);
TXO_API enum txo_log_level txo_log_get_level(void);

/* Parses "error", "warn", "info", "debug". Returns 0 or TXO_EINVAL. */
TXO_API int txo_log_level_parse(const char *name, enum txo_log_level *out);

/* What the default stderr sink writes: one logfmt line per event (the default), or one JSON
 * object per line with ts, level, component and msg first, then the fields, numbers and
 * booleans as JSON numbers and booleans. */
enum txo_log_format {
    TXO_LOG_FORMAT_LOGFMT = 0,
    TXO_LOG_FORMAT_JSON,
};
/* Sets the default sink's format (thread-safe, takes effect at the next line). */
TXO_API void txo_log_set_format(enum txo_log_format format);
TXO_API enum txo_log_format txo_log_get_format(void);
/* "logfmt" or "json". Returns 0 or TXO_EINVAL. */
TXO_API int txo_log_format_parse(const char *name, enum txo_log_format *out);

/*
 * Encodes one event as the default sink would, into buf[0..cap) with a trailing '\n' and a NUL
 * (cap of at least TXO_LOG_LINE_MAX holds any event; cap must be more than 32); ts is the
 * timestamp to write. Fields are taken as a sink receives them (NULL strings are skipped, keys
 * are not checked again). Returns the line's length without the NUL. For sinks that want
 * txo's line format.
 */
#define TXO_LOG_LINE_MAX 8192
TXO_API size_t txo_log_format_line(char *buf, size_t cap, enum txo_log_format format,
                                   const char *ts, enum txo_log_level level, const char *component,
                                   const char *msg, const struct txo_log_field *fields,
                                   size_t n_fields);

/* Sends one event to the sink. Use TXO_LOG, which checks the level first. */
TXO_API void txo_log_emit(enum txo_log_level level, const char *component, const char *msg,
                          const struct txo_log_field *fields, size_t n_fields);

/*
 * TXO_LOG(level, component, "constant message", TXO_KV_...(...), ...): up to 20 fields. The
 * "" msg "" concatenation is what makes a message that is not a string literal fail to compile.
 */
#define TXO_LOG(...) TXO_LOG__PICK(__VA_ARGS__, TXO_LOG__ARGS_20)(__VA_ARGS__)
#define TXO_LOG__ARGS_20                                                                           \
    TXO_LOG__F, TXO_LOG__F, TXO_LOG__F, TXO_LOG__F, TXO_LOG__F, TXO_LOG__F, TXO_LOG__F,            \
        TXO_LOG__F, TXO_LOG__F, TXO_LOG__F, TXO_LOG__F, TXO_LOG__F, TXO_LOG__F, TXO_LOG__F,        \
        TXO_LOG__F, TXO_LOG__F, TXO_LOG__F, TXO_LOG__F, TXO_LOG__F, TXO_LOG__F, TXO_LOG__0,        \
        TXO_LOG__TOO_FEW, TXO_LOG__TOO_FEW
#define TXO_LOG__PICK(...) TXO_LOG__PICK_(__VA_ARGS__)
#define TXO_LOG__PICK_(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, \
                       a18, a19, a20, a21, a22, a23, macro, ...)                                   \
    macro
#define TXO_LOG__0(level, component, msg)                                                          \
    do {                                                                                           \
        if ((level) <= txo_log_get_level())                                                        \
            txo_log_emit((level), (component), "" msg "", NULL, 0);                                \
    } while (0)
#define TXO_LOG__F(level, component, msg, ...)                                                     \
    do {                                                                                           \
        if ((level) <= txo_log_get_level()) {                                                      \
            const struct txo_log_field txo_log_fields_[] = {__VA_ARGS__};                          \
            txo_log_emit((level), (component), "" msg "", txo_log_fields_,                         \
                         sizeof(txo_log_fields_) / sizeof(txo_log_fields_[0]));                    \
        }                                                                                          \
    } while (0)

#endif
