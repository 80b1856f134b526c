/*
 * Error codes and error detail (include/txo/err.h), plus the two ways the library stops on a
 * bug (TXO_ASSERT and TXO_BUG from src/core/common.h).
 *
 * Everything about a code (its name, description and whether it is transient) comes from the
 * one list TXO_ERR_MAP, so a new code added there shows up here without touching this file.
 *
 * struct txo_error is caller-owned; these functions write only into it and never allocate.
 * Messages are cut to TXO_ERROR_MSG_MAX - 1 bytes on a UTF-8 character boundary, because
 * they end up in JSON bodies and in utf8mb4 columns (last_error), which reject a half
 * character.
 *
 * txo__assert_fail() and txo__bug() are the only code in the library that writes to stderr
 * directly: a bug means the log sink itself may be broken, so they do not go through it.
 *
 * Thread-safety: pure functions, or writes to caller-owned memory only.
 */
#include "core/common.h"

/* Formats into msg (TXO_ERROR_MSG_MAX bytes), cutting on a character boundary. */
static void format_msg(char *msg, const char *fmt, va_list ap) TXO_PRINTF(2, 0);

static void format_msg(char *msg, const char *fmt, va_list ap)
{
    int n = vsnprintf(msg, TXO_ERROR_MSG_MAX, fmt, ap);
    if (n < 0) {
        msg[0] = '\0';
    } else if ((size_t)n >= TXO_ERROR_MSG_MAX) {
        msg[txo_utf8_cut(msg, (size_t)n, TXO_ERROR_MSG_MAX - 1)] = '\0';
    }
}

void txo_error_init(struct txo_error *err)
{
    if (err == NULL) {
        return;
    }
    err->code = TXO_OK;
    err->mysql_errno = 0;
    err->sqlstate[0] = '\0';
    err->msg[0] = '\0';
}

/*
 * A new failure replaces whatever err held, server detail included: code and message are
 * written, mysql_errno and sqlstate are cleared. Code that has server detail fills those two
 * fields after this call.
 */
int txo_error_setv(struct txo_error *err, int code, const char *fmt, va_list ap)
{
    if (err == NULL) {
        return code;
    }
    err->code = code;
    err->mysql_errno = 0;
    err->sqlstate[0] = '\0';
    format_msg(err->msg, fmt, ap);
    return code;
}

int txo_error_set(struct txo_error *err, int code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    int rc = txo_error_setv(err, code, fmt, ap);
    va_end(ap);
    return rc;
}

/*
 * With err == NULL the code is unknown, so TXO_EINVAL is returned: callers that may pass a
 * NULL err should return their own rc rather than the result of this call.
 */
int txo_error_wrap(struct txo_error *err, const char *fmt, ...)
{
    char context[TXO_ERROR_MSG_MAX];
    char joined[TXO_ERROR_MSG_MAX];
    va_list ap;

    if (err == NULL) {
        return TXO_EINVAL;
    }
    va_start(ap, fmt);
    format_msg(context, fmt, ap);
    va_end(ap);

    int n = snprintf(joined, sizeof(joined), "%s: %s", context, err->msg);
    if (n < 0) {
        return err->code;
    }
    if ((size_t)n >= sizeof(joined)) {
        joined[txo_utf8_cut(joined, (size_t)n, sizeof(joined) - 1)] = '\0';
    }
    memcpy(err->msg, joined, sizeof(err->msg));
    return err->code;
}

const char *txo_strerror(int code)
{
    switch (code) {
    case TXO_OK:
        return "success";
#define TXO_ERR_STR(name, value, transient, desc)                                                  \
    case TXO_##name:                                                                               \
        return desc;
        TXO_ERR_MAP(TXO_ERR_STR)
#undef TXO_ERR_STR
    default:
        return "unknown error";
    }
}

const char *txo_err_name(int code)
{
    switch (code) {
    case TXO_OK:
        return "TXO_OK";
#define TXO_ERR_NAME(name, value, transient, desc)                                                 \
    case TXO_##name:                                                                               \
        return "TXO_" #name;
        TXO_ERR_MAP(TXO_ERR_NAME)
#undef TXO_ERR_NAME
    default:
        return "TXO_E?";
    }
}

bool txo_err_is_transient(int code)
{
    switch (code) {
#define TXO_ERR_TRANSIENT(name, value, transient, desc)                                            \
    case TXO_##name:                                                                               \
        return transient;
        TXO_ERR_MAP(TXO_ERR_TRANSIENT)
#undef TXO_ERR_TRANSIENT
    default:
        return false;
    }
}

_Noreturn void txo__assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "txo: BUG at %s:%d: assertion failed: %s\n", file, line, expr);
    fflush(stderr);
    abort();
}

_Noreturn void txo__bug(const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0) {
        msg[0] = '\0';
    }
    fprintf(stderr, "txo: BUG at %s:%d: %s\n", file, line, msg);
    fflush(stderr);
    abort();
}

const char *txo__name_of(const char *const *names, size_t n, long value)
{
    if (value < 0 || (unsigned long)value >= n || names[value] == NULL)
        return "INVALID";
    return names[value];
}

const char *txo__name_known(const char *const *names, size_t n, long value, const char *what)
{
    if (value < 0 || (unsigned long)value >= n)
        TXO_BUG("unknown %s %ld", what, value);
    return names[value];
}

void txo__move_check(size_t n_states, long from, long to, const char *what)
{
    if (from < 0 || (unsigned long)from >= n_states || to < 0 || (unsigned long)to >= n_states)
        TXO_BUG("unknown %s %ld -> %ld", what, from, to);
}

long txo__name_index(const char *const *names, size_t n, const char *name)
{
    if (name == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (names[i] != NULL && strcmp(name, names[i]) == 0)
            return (long)i;
    return -1;
}
