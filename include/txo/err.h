/*
 * txo error codes and error detail.
 *
 * Every fallible txo function returns int: 0 on success or a negative TXO_E* code. The codes
 * are listed once, in TXO_ERR_MAP below, which generates the enum, txo_strerror() and
 * txo_err_name(). Codes are part of the API: new ones are added at the end, none is renumbered.
 *
 * Detail (MySQL errno, SQLSTATE, a message naming what failed) goes into an optional
 * struct txo_error that the caller owns. Functions write it only on failure, so a caller can
 * chain calls and read the detail of the first one that failed.
 *
 * Codes fall into two groups, and txo_err_is_transient() tells which: transient failures
 * (deadlock, lock wait timeout, lost connection, broker timeout) are worth retrying with
 * backoff; permanent ones (bad input, constraint violation, business rule) are not.
 *
 * Thread-safety: everything here is pure or writes only to caller-owned memory.
 */
#ifndef TXO_ERR_H
#define TXO_ERR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "txo/common.h"

/* X(NAME, value, transient, description) */
#define TXO_ERR_MAP(X)                                                                             \
    X(EINVAL, -1, false, "invalid argument")                                                       \
    X(ENOMEM, -2, false, "out of memory")                                                          \
    X(EDB, -3, false, "database error")                                                            \
    X(EDEADLOCK, -4, true, "deadlock detected (MySQL 1213)")                                       \
    X(ELOCKTIMEOUT, -5, true, "lock wait timeout exceeded (MySQL 1205)")                           \
    X(ECONNLOST, -6, true, "lost connection to the database")                                      \
    X(ECONNECT, -7, true, "cannot connect to the database")                                        \
    X(ENOTFOUND, -8, false, "not found")                                                           \
    X(EDUPLICATE, -9, false, "duplicate key")                                                      \
    X(ECONSTRAINT, -10, false, "constraint violation")                                             \
    X(ECONFIG, -11, false, "invalid configuration")                                                \
    X(EPUBLISH, -12, true, "publish failed")                                                       \
    X(ETIMEOUT, -13, true, "timed out")                                                            \
    X(EBUSINESS, -14, false, "rejected by a business rule")                                        \
    X(ELEASELOST, -15, false, "lease lost to another owner")                                       \
    X(ESTATE, -16, false, "illegal state transition")                                              \
    X(EIO, -17, false, "input/output error")                                                       \
    X(ECANCELED, -18, false, "canceled")                                                           \
    X(EMIGRATION, -19, false, "schema migration failed")                                           \
    X(EUNAVAILABLE, -20, true, "service unavailable")                                              \
    X(EUNSUPPORTED, -21, false, "not supported by this server")                                    \
    X(ECONFLICT, -22, false, "changed by another writer (optimistic lock)")                        \
    X(EUNKNOWN, -23, true, "outcome unknown: the call may have taken effect")                      \
    X(EALONE, -24, false, "no verdict in this batch: run it on its own")

enum txo_err {
    TXO_OK = 0,
#define TXO_ERR_ENUM(name, value, transient, desc) TXO_##name = (value),
    TXO_ERR_MAP(TXO_ERR_ENUM)
#undef TXO_ERR_ENUM
};

/* Longest message kept in struct txo_error, including the NUL. Longer ones are cut. */
#define TXO_ERROR_MSG_MAX 512

/*
 * Detail of a failure. Caller-allocated; initialise with txo_error_init(). `code` mirrors
 * the return value; `mysql_errno`/`sqlstate` are set when the failure came from the server.
 */
struct txo_error {
    int code;
    unsigned mysql_errno;
    char sqlstate[6];
    char msg[TXO_ERROR_MSG_MAX];
};

/* Sets *err to "no error". Never fails. */
TXO_API void txo_error_init(struct txo_error *err);

/*
 * Records a failure in err (when err is not NULL) and returns code, so callers can write
 * `return txo_error_set(err, TXO_EINVAL, "qty must be > 0, got %d", qty);`.
 * A new failure replaces the old one entirely: mysql_errno and sqlstate are cleared, so code
 * with server detail fills them in after this call. The message is cut to
 * TXO_ERROR_MSG_MAX - 1 bytes on a UTF-8 character boundary.
 */
TXO_API int txo_error_set(struct txo_error *err, int code, const char *fmt, ...) TXO_PRINTF(3, 4);
TXO_API int txo_error_setv(struct txo_error *err, int code, const char *fmt, va_list ap)
    TXO_PRINTF(3, 0);

/*
 * Prepends "context: " to the message of err (when err is not NULL). Returns err->code, or
 * TXO_EINVAL when err is NULL (the code is unknown then: such callers return their own rc).
 */
TXO_API int txo_error_wrap(struct txo_error *err, const char *fmt, ...) TXO_PRINTF(2, 3);

/* Static description of a code ("deadlock detected (MySQL 1213)"); never NULL. */
TXO_API const char *txo_strerror(int code);

/* Static symbolic name of a code ("TXO_EDEADLOCK"); never NULL. */
TXO_API const char *txo_err_name(int code);

/* True when the failure is worth retrying with backoff (deadlock, timeout, lost connection). */
TXO_API bool txo_err_is_transient(int code);

#endif
