#include "core/common.h"

/*
 * The consuming side without a broker (txo/consumer.h):
 *
 *   - the txo_consumer handle: an ops table plus the transport's state, the same shape as
 *     struct txo_publisher, so every transport (nats_consumer.c, a test's fake) is polled
 *     through txo_consumer_poll();
 *   - the local dispatch publisher: the relay hands each claimed event straight to the
 *     application's message handler, in the relay's thread. The outbox row is the queue and
 *     the relay's retry with backoff is the redelivery: a handler failure is a publish failure,
 *     so the row stays PENDING (attempts+1, last_error, next_attempt_at) and is offered again
 *     later; after max_attempts it is dead-lettered like any event. Delivery is at least once
 *     (a relay that dies after the handler committed and before marking the row calls it
 *     again after the lease expires), so the handler de-duplicates on msg_id like any consumer.
 *
 * Ownership: the consumer handle owns its transport state (freed by ops->destroy); the local
 * publisher borrows its handler and arg. Thread-safety: a consumer is polled by one thread at a
 * time; the local publisher is used by one relay at a time and calls the handler on its thread.
 */

#include "txo/consumer.h"

/* ---- the consumer handle ---- */

struct txo_consumer {
    const struct txo_consumer_ops *ops;
    void *self;
};

int txo_consumer_new(const struct txo_consumer_ops *ops, void *self, struct txo_consumer **out,
                     struct txo_error *err)
{
    if (ops == NULL || ops->poll == NULL || out == NULL)
        return txo_error_set(err, TXO_EINVAL, "consumer: ops with a poll are required");
    struct txo_consumer *c = txo_malloc(sizeof(*c));
    if (c == NULL)
        return txo_error_set(err, TXO_ENOMEM, "consumer %s: out of memory",
                             ops->name != NULL ? ops->name : "(unnamed)");
    c->ops = ops;
    c->self = self;
    *out = c;
    return 0;
}

int txo_consumer_poll(struct txo_consumer *c, size_t max_msgs, int64_t timeout_ms, size_t *handled,
                      struct txo_error *err)
{
    size_t n = 0;
    if (handled != NULL)
        *handled = 0;
    if (c == NULL || max_msgs == 0 || timeout_ms < 1)
        return txo_error_set(err, TXO_EINVAL,
                             "consumer: poll needs a consumer, max_msgs >= 1 and timeout_ms >= 1");
    int rc = c->ops->poll(c->self, max_msgs, timeout_ms, &n, err);
    if (handled != NULL)
        *handled = n;
    return rc;
}

const char *txo_consumer_name(const struct txo_consumer *c)
{
    return c->ops->name != NULL ? c->ops->name : "(unnamed)";
}

void txo_consumer_free(struct txo_consumer *c)
{
    if (c == NULL)
        return;
    if (c->ops->destroy != NULL)
        c->ops->destroy(c->self);
    txo_free(c);
}

/* ---- the local dispatch publisher ---- */

struct local_publisher {
    txo_message_handler_fn handler;
    void *arg;
};

static int local_publish_batch(void *self, const struct txo_outbox_message *msgs, size_t n,
                               int *results, struct txo_error *errors)
{
    struct local_publisher *lp = self;
    for (size_t i = 0; i < n; i++) {
        const struct txo_outbox_message *m = &msgs[i];
        size_t len = 0;
        char *env = txo_envelope_encode(m, &len, &errors[i]);
        if (env == NULL) {
            results[i] = errors[i].code != 0 ? errors[i].code : TXO_EINVAL;
            continue;
        }
        struct txo_inbound_message in = {
            .subject = NULL,
            .data = env,
            .len = len,
            .msg_id = m->idempotency_key,
            .delivery = m->attempt > 0 ? (uint64_t)m->attempt : 1,
        };
        int rc = lp->handler(lp->arg, &in, &errors[i]);
        txo_free(env);
        if (rc > 0) /* not a TXO_E* code */
            rc = TXO_EPUBLISH;
        if (rc < 0 && errors[i].msg[0] == '\0')
            txo_error_set(&errors[i], rc, "local handler: %s", txo_strerror(rc));
        if (rc < 0)
            TXO_LOG(TXO_LOG_DEBUG, "local",
                    "handler failed message_id=%s attempt=%d error=%s transient=%s "
                    "reason=\"%s\"",
                    m->idempotency_key != NULL ? m->idempotency_key : "", m->attempt,
                    txo_err_name(rc), txo_err_is_transient(rc) ? "true" : "false", errors[i].msg);
        results[i] = rc;
    }
    return 0;
}

static void local_destroy(void *self)
{
    txo_free(self);
}

static const struct txo_publisher_ops local_ops = {
    .name = "local",
    .publish_batch = local_publish_batch,
    .destroy = local_destroy,
};

int txo_publisher_local_new(txo_message_handler_fn handler, void *arg, struct txo_publisher **out,
                            struct txo_error *err)
{
    if (handler == NULL)
        return txo_error_set(err, TXO_EINVAL, "local publisher: a message handler is required");
    struct local_publisher *lp = txo_calloc(1, sizeof(*lp));
    if (lp == NULL)
        return txo_error_set(err, TXO_ENOMEM, "local publisher: out of memory");
    lp->handler = handler;
    lp->arg = arg;
    int rc = txo_publisher_new(&local_ops, lp, out, err);
    if (rc < 0)
        txo_free(lp);
    return rc;
}
