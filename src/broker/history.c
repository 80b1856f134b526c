#include "core/common.h"

/*
 * The broker history handle (txo/history.h): an ops table and its self, the way a publisher
 * is one. Each broker's reader lives in <broker>_history.c.
 */

#include "txo/history.h"

int txo_history_new(const struct txo_history_ops *ops, void *self, struct txo_history **out,
                    struct txo_error *err)
{
    if (ops == NULL || ops->read == NULL || ops->destroy == NULL || out == NULL) {
        if (ops != NULL && ops->destroy != NULL)
            ops->destroy(self);
        return txo_error_set(err, TXO_EINVAL, "history: ops with read and destroy are required");
    }
    struct txo_history *h = txo_calloc(1, sizeof(*h));
    if (h == NULL) {
        ops->destroy(self);
        return txo_error_set(err, TXO_ENOMEM, "history: out of memory");
    }
    h->ops = ops;
    h->self = self;
    *out = h;
    return 0;
}

int txo_history_read(struct txo_history *h, int64_t from_us, int64_t to_us, txo_history_fn fn,
                     void *arg, struct txo_history_span *span, struct txo_error *err)
{
    if (h == NULL || fn == NULL || span == NULL)
        return txo_error_set(err, TXO_EINVAL, "history: reader, callback and span are required");
    memset(span, 0, sizeof(*span));
    span->held_from_us = TXO_HISTORY_ALL;
    if (from_us > to_us)
        return 0;
    return h->ops->read(h->self, from_us, to_us, fn, arg, span, err);
}

const char *txo_history_name(const struct txo_history *h)
{
    return h != NULL && h->ops->name != NULL ? h->ops->name : "?";
}

void txo_history_free(struct txo_history *h)
{
    if (h == NULL)
        return;
    h->ops->destroy(h->self);
    txo_free(h);
}

void txo_history_span_hold(struct txo_history_span *span, const char *where, int64_t held_from_us)
{
    if (held_from_us == TXO_HISTORY_ALL || held_from_us <= span->held_from_us)
        return;
    span->held_from_us = held_from_us;
    snprintf(span->held_from_where, sizeof(span->held_from_where), "%s", where);
}
