/*
 * How the txo programs report an error in their command line or settings (a bad flag, an
 * unknown command, a value out of range, a setting that cannot work) and a start-up failure.
 *
 * When the log format was chosen (--log-format on the command line or TXO_LOG_FORMAT in the
 * environment), each error is one log line in that format, so whatever reads the daemon's
 * stderr as logfmt or JSON reads these too:
 *
 *   {"ts":"...","level":"error","component":"cli","msg":"cannot run","error":"txo relay: ..."}
 *
 * Otherwise it is the plain "txo relay: ..." line a person at a terminal reads. --help, usage
 * and --print-config text is not an error and stays plain text on stdout.
 *
 * Not thread-safe: meant for start-up, before any daemon thread runs.
 */
#ifndef TXO_CMD_CLI_ERRORS_H
#define TXO_CMD_CLI_ERRORS_H

#include <stdbool.h>
#include <stddef.h>

#include "txo/txo.h"

/*
 * Looks for --log-format VALUE / --log-format=VALUE in argv (up to a "--"), then for
 * TXO_LOG_FORMAT, before the settings are parsed, so even an error in the first flag comes out
 * in the chosen format. A value that is not a format leaves errors plain (the settings report
 * it).
 */
void cli_errors_init(int argc, char *const *argv);

/* True when errors are written as log lines (a format was chosen). */
bool cli_errors_structured(void);

/* Reports one error: fmt (printf-style, no trailing newline) is the whole human text,
 * starting with the program ("txo relay: --batch-size must be ..."). */
void cli_error(const char *fmt, ...) TXO_PRINTF(1, 2);

/* Reports a TXO_* environment variable that no command reads, with the nearest known name
 * (NULL: none close). */
void cli_warn_unknown_env(const char *me, const char *name, size_t name_len, const char *hint);

#endif
