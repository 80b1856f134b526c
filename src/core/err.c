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

/*
 * Shortens the string in buf (of length len) so that it does not end in the middle of a UTF-8
 * sequence. Used only after a cut, so a complete trailing character is never removed.
 */
static void trim_partial_utf8(char *buf, size_t len)
{
    size_t start = len;
    size_t cont = 0;

    /* Step back over continuation bytes (10xxxxxx) to the lead byte of the last character. */
    while (start > 0 && ((unsigned char)buf[start - 1] & 0xC0) == 0x80 && cont < 3) {
        start--;
        cont++;
    }
    if (start == 0) {
        return;
    }
    unsigned char lead = (unsigned char)buf[start - 1];
    size_t need;
    if (lead < 0x80) {
        return; /* ASCII: the stray continuation bytes, if any, are left as they are */
    } else if ((lead & 0xE0) == 0xC0) {
        need = 1;
    } else if ((lead & 0xF0) == 0xE0) {
        need = 2;
    } else if ((lead & 0xF8) == 0xF0) {
        need = 3;
    } else {
        return; /* not a lead byte: invalid input, nothing sensible to trim */
    }
    if (cont < need) {
        buf[start - 1] = '\0';
    }
}

/* Formats into msg (TXO_ERROR_MSG_MAX bytes), cutting on a character boundary. */
static void format_msg(char *msg, const char *fmt, va_list ap) TXO_PRINTF(2, 0);

static void format_msg(char *msg, const char *fmt, va_list ap)
{
    int n = vsnprintf(msg, TXO_ERROR_MSG_MAX, fmt, ap);
    if (n < 0) {
        msg[0] = '\0';
    } else if ((size_t)n >= TXO_ERROR_MSG_MAX) {
        trim_partial_utf8(msg, TXO_ERROR_MSG_MAX - 1);
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
        trim_partial_utf8(joined, sizeof(joined) - 1);
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

long txo__name_index(const char *const *names, size_t n, const char *name)
{
    if (name == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (names[i] != NULL && strcmp(name, names[i]) == 0)
            return (long)i;
    return -1;
}
