#include "core/common.h"

/*
 * The log publisher: writes one envelope (envelope.c) per line to a FILE, flushed once per
 * batch. `txo relay --publisher log` points it at stdout, so another program (or a test) can
 * read the published stream from a pipe or a file.
 *
 * A message is acknowledged only once its batch was flushed without error: any write or
 * flush error fails every message of the batch with TXO_EIO, since we cannot tell which lines
 * reached the file. A message whose envelope cannot be built (payload not JSON) fails alone
 * with TXO_EINVAL and writes nothing.
 *
 * Ownership: the FILE is borrowed and never closed. Thread-safety: one relay at a time.
 */

struct log_publisher {
    FILE *out;
};

static int log_publish_batch(void *self, const struct txo_outbox_message *msgs, size_t n,
                             int *results, struct txo_error *errors)
{
    struct log_publisher *lp = self;
    bool write_failed = false;
    int write_errno = 0;

    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        char *line = txo_envelope_encode(&msgs[i], &len, &errors[i]);
        if (line == NULL) {
            results[i] = errors[i].code != 0 ? errors[i].code : TXO_EINVAL;
            continue;
        }
        results[i] = 0;
        if (!write_failed && (fwrite(line, 1, len, lp->out) != len || putc('\n', lp->out) == EOF)) {
            write_failed = true;
            write_errno = errno;
        }
        txo_free(line);
    }
    if (fflush(lp->out) != 0 && !write_failed) {
        write_failed = true;
        write_errno = errno;
    }
    if (!write_failed)
        return 0;

    char reason[128] = "unknown error";
    if (write_errno != 0 && strerror_r(write_errno, reason, sizeof(reason)) != 0)
        snprintf(reason, sizeof(reason), "errno %d", write_errno);
    clearerr(lp->out);
    for (size_t i = 0; i < n; i++) {
        results[i] = txo_error_set(&errors[i], TXO_EIO,
                                   "log publisher: writing event %" PRId64 " failed: %s",
                                   msgs[i].id, reason);
    }
    return 0;
}

static const struct txo_publisher_ops log_ops = {
    .name = "log",
    .publish_batch = log_publish_batch,
    .destroy = txo_free,
    .flags = TXO_PUBLISHER_QUICK,
};

int txo_publisher_log_new(FILE *out, struct txo_publisher **pub, struct txo_error *err)
{
    if (out == NULL)
        return txo_error_set(err, TXO_EINVAL, "log publisher: no output stream");
    struct log_publisher *lp = txo_calloc(1, sizeof(*lp));
    if (lp == NULL)
        return txo_error_set(err, TXO_ENOMEM, "log publisher: out of memory");
    lp->out = out;
    int rc = txo_publisher_new(&log_ops, lp, pub, err);
    if (rc < 0)
        txo_free(lp);
    return rc;
}
