/*
 * Logging. Library code never writes to stdout or stderr itself: it calls TXO_LOG(), and the
 * host program decides where lines go by installing a sink. The default sink writes one logfmt
 * line per event to stderr: `ts=... level=warn component=relay msg="..." key=value`.
 *
 * Levels: error (a human must act), warn (degraded but recovering), info (lifecycle: start,
 * stop, effective config), debug (per message).
 *
 * Thread-safety: TXO_LOG may be called from any thread. txo_log_set_sink() and
 * txo_log_set_level() are meant for start-up; the level is read atomically.
 */
#ifndef TXO_LOG_H
#define TXO_LOG_H

#include <stdarg.h>

#include "txo/common.h"

enum txo_log_level {
    TXO_LOG_ERROR = 0,
    TXO_LOG_WARN = 1,
    TXO_LOG_INFO = 2,
    TXO_LOG_DEBUG = 3,
};

/*
 * A sink receives one finished line: `component` names the module ("relay", "saga", ...),
 * `msg` is the formatted text, which may already carry `key=value` context.
 */
typedef void (*txo_log_sink_fn)(enum txo_log_level level, const char *component, const char *msg,
                                void *arg);

/* Installs a sink (NULL restores the default stderr logfmt sink). */
TXO_API void txo_log_set_sink(txo_log_sink_fn sink, void *arg);

/* Lines above `level` are dropped before their arguments are formatted. Default: info. */
TXO_API void txo_log_set_level(enum txo_log_level level);
TXO_API enum txo_log_level txo_log_get_level(void);

/* Parses "error", "warn", "info", "debug". Returns 0 or TXO_EINVAL. */
TXO_API int txo_log_level_parse(const char *name, enum txo_log_level *out);

/* What the default stderr sink writes: one logfmt line per event (the default), or one JSON
 * object per line with ts, level, component, msg and then the message's key=value pairs as
 * string members. */
enum txo_log_format {
    TXO_LOG_FORMAT_LOGFMT = 0,
    TXO_LOG_FORMAT_JSON,
};
/* Sets the default sink's format (thread-safe, takes effect at the next line). */
TXO_API void txo_log_set_format(enum txo_log_format format);
/* "logfmt" or "json". Returns 0 or TXO_EINVAL. */
TXO_API int txo_log_format_parse(const char *name, enum txo_log_format *out);

TXO_API void txo_log_write(enum txo_log_level level, const char *component, const char *fmt, ...)
    TXO_PRINTF(3, 4);

/* Checks the level before evaluating the arguments. */
#define TXO_LOG(level, component, ...)                                                             \
    do {                                                                                           \
        if ((level) <= txo_log_get_level())                                                        \
            txo_log_write((level), (component), __VA_ARGS__);                                      \
    } while (0)

#endif
