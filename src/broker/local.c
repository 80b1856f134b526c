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
    txo_message_handler_fn handler;     /* one message at a time, or */
    txo_batch_handler_fn batch_handler; /* the whole batch */
    void *arg;
};

/* Logs a failed message (the reason goes to the outbox row's last_error). */
static void log_failure(const struct txo_outbox_message *m, int rc, const struct txo_error *e)
{
    TXO_LOG(TXO_LOG_DEBUG, "local",
            "handler failed message_id=%s attempt=%d error=%s transient=%s reason=\"%s\"",
            m->idempotency_key != NULL ? m->idempotency_key : "", m->attempt, txo_err_name(rc),
            txo_err_is_transient(rc) ? "true" : "false", e->msg);
}

/* The handler's code as a publish result: a TXO_E* code, with a reason. */
static int publish_result(int rc, struct txo_error *e)
{
    if (rc > 0) /* not a TXO_E* code */
        rc = TXO_EPUBLISH;
    if (rc < 0 && e->msg[0] == '\0')
        txo_error_set(e, rc, "local handler: %s", txo_strerror(rc));
    return rc;
}

/* The whole batch to the batch handler: the envelopes that encode, in order. */
static int local_publish_all(struct local_publisher *lp, const struct txo_outbox_message *msgs,
                             size_t n, int *results, struct txo_error *errors)
{
    struct txo_inbound_message *in = txo_calloc(n, sizeof(*in));
    char **envs = txo_calloc(n, sizeof(*envs));
    size_t *at = txo_calloc(n, sizeof(*at));
    int *res = txo_calloc(n, sizeof(*res));
    struct txo_error *errs = txo_calloc(n, sizeof(*errs));
    int rc = 0;
    if (in == NULL || envs == NULL || at == NULL || res == NULL || errs == NULL) {
        rc = TXO_ENOMEM;
        goto out;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        envs[i] = txo_envelope_encode(&msgs[i], &len, &errors[i]);
        if (envs[i] == NULL) {
            results[i] = errors[i].code != 0 ? errors[i].code : TXO_EINVAL;
            continue;
        }
        in[m] = (struct txo_inbound_message){
            .data = envs[i],
            .len = len,
            .msg_id = msgs[i].idempotency_key,
            .delivery = msgs[i].attempt > 0 ? (uint64_t)msgs[i].attempt : 1,
        };
        txo_error_init(&errs[m]);
        at[m++] = i;
    }
    if (m > 0) {
        rc = lp->batch_handler(lp->arg, in, m, res, errs);
        for (size_t k = 0; rc == 0 && k < m; k++) {
            errors[at[k]] = errs[k];
            results[at[k]] = publish_result(res[k], &errors[at[k]]);
            if (results[at[k]] < 0)
                log_failure(&msgs[at[k]], results[at[k]], &errors[at[k]]);
        }
    }
out:
    for (size_t i = 0; envs != NULL && i < n; i++)
        txo_free(envs[i]);
    txo_free(in);
    txo_free(envs);
    txo_free(at);
    txo_free(res);
    txo_free(errs);
    return rc;
}

static int local_publish_batch(void *self, const struct txo_outbox_message *msgs, size_t n,
                               int *results, struct txo_error *errors)
{
    struct local_publisher *lp = self;
    if (lp->batch_handler != NULL)
        return local_publish_all(lp, msgs, n, results, errors);
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
        int rc = publish_result(lp->handler(lp->arg, &in, &errors[i]), &errors[i]);
        txo_free(env);
        if (rc < 0)
            log_failure(m, rc, &errors[i]);
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

static int local_new(txo_message_handler_fn handler, txo_batch_handler_fn batch_handler, void *arg,
                     struct txo_publisher **out, struct txo_error *err)
{
    if (handler == NULL && batch_handler == NULL)
        return txo_error_set(err, TXO_EINVAL, "local publisher: a message handler is required");
    struct local_publisher *lp = txo_calloc(1, sizeof(*lp));
    if (lp == NULL)
        return txo_error_set(err, TXO_ENOMEM, "local publisher: out of memory");
    lp->handler = handler;
    lp->batch_handler = batch_handler;
    lp->arg = arg;
    int rc = txo_publisher_new(&local_ops, lp, out, err);
    if (rc < 0)
        txo_free(lp);
    return rc;
}

int txo_publisher_local_new(txo_message_handler_fn handler, void *arg, struct txo_publisher **out,
                            struct txo_error *err)
{
    return handler != NULL
               ? local_new(handler, NULL, arg, out, err)
               : txo_error_set(err, TXO_EINVAL, "local publisher: a message handler is required");
}

int txo_publisher_local_batch_new(txo_batch_handler_fn handler, void *arg,
                                  struct txo_publisher **out, struct txo_error *err)
{
    return handler != NULL
               ? local_new(NULL, handler, arg, out, err)
               : txo_error_set(err, TXO_EINVAL, "local publisher: a batch handler is required");
}
