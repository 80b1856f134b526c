#include "core/common.h"

/*
 * The consumer handle and the handler every transport runs (txo/consumer.h):
 *
 *   - the txo_consumer handle: an ops table plus the transport's state, the same shape as
 *     struct txo_publisher, so every transport (nats_consumer.c, a test's own) is polled
 *     through txo_consumer_poll();
 *   - the one adapter from a struct txo_handler to the batch form (txo__handler_run): a
 *     transport hands it what one delivery brought and settles each message by the verdict
 *     it gets back, so a per-message handler and a batch handler share the transport's code.
 *
 * Ownership: the handle owns its transport state (freed by ops->destroy). Thread-safety: a
 * consumer is polled by one thread at a time.
 */

#include "broker/consumer_internal.h"

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

int txo__handler_check(const struct txo_handler *h, const char *who, struct txo_error *err)
{
    if (h == NULL || (h->one == NULL) == (h->batch == NULL))
        return txo_error_set(err, TXO_EINVAL,
                             "%s: exactly one of a message and a batch handler is required", who);
    return 0;
}

int txo__handler_run(const struct txo_handler *h, const struct txo_inbound_message *msgs, size_t n,
                     int *results, struct txo_error *errors)
{
    for (size_t i = 0; i < n; i++) {
        results[i] = 0;
        txo_error_init(&errors[i]);
    }
    if (h->one != NULL) {
        for (size_t i = 0; i < n; i++)
            results[i] = h->one(h->arg, &msgs[i], &errors[i]);
        return 0;
    }
    int rc = h->batch(h->arg, msgs, n, results, errors);
    for (size_t i = 0; rc != 0 && i < n; i++) {
        results[i] = rc;
        txo_error_set(&errors[i], rc, "batch handler: %s", txo_strerror(rc));
    }
    return rc;
}

bool txo__handler_batch_alloc(struct txo__handler_batch *b, size_t n)
{
    b->in = txo_calloc(n, sizeof(*b->in));
    b->results = txo_calloc(n, sizeof(*b->results));
    b->errors = txo_calloc(n, sizeof(*b->errors));
    return b->in != NULL && b->results != NULL && b->errors != NULL;
}

void txo__handler_batch_release(struct txo__handler_batch *b)
{
    txo_free(b->in);
    txo_free(b->results);
    txo_free(b->errors);
    memset(b, 0, sizeof(*b));
}

void txo__settle_keep_first(int code, const struct txo_error *e, int *first, struct txo_error *err)
{
    if (code >= 0 || *first != 0)
        return;
    *first = code;
    if (err != NULL)
        *err = *e;
}

char *txo__suffixed(const char *name, const char *suffix)
{
    size_t a = strlen(name), b = strlen(suffix);
    char *s = txo_malloc(a + b + 1);
    if (s != NULL) {
        memcpy(s, name, a);
        memcpy(s + a, suffix, b + 1);
    }
    return s;
}
