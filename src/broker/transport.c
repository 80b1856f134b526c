/*
 * What every transport shares (see transport.h): the constructors' common part, the
 * registration of its metric families and the wiping of its secrets. A publisher, a consumer
 * and a history reader differ only in their ops table and the handle that wraps the state, so
 * one function builds all three and the kind picks the handle.
 *
 * Thread-safety: none needed; each call works on what its caller owns.
 */
#include "core/common.h"

#include "broker/consumer_internal.h"
#include "broker/transport.h"

enum kind {
    PUBLISHER,
    CONSUMER,
    HISTORY,
};

static const char *const kind_names[] = {"publisher", "consumer", "history"};

/* What build() needs of an ops table of any kind. */
struct handle {
    enum kind kind;
    const void *ops;
    const char *name;
    void (*destroy)(void *self);
};

static int build(const struct handle *h, size_t size, txo__transport_init_fn init,
                 const struct txo__transport_args *a, void *out, struct txo_error *err)
{
    char who[64];
    snprintf(who, sizeof(who), "%s %s", h->name, kind_names[h->kind]);
    if (h->kind == CONSUMER) {
        int rc = txo__handler_check(a->h, who, err);
        if (rc < 0)
            return rc;
    }
    if (out == NULL)
        return txo_error_set(err, TXO_EINVAL, "%s: out is required", who);
    void *self = txo_calloc(1, size);
    if (self == NULL)
        return txo_error_set(err, TXO_ENOMEM, "%s: out of memory", who);
    int rc = init(self, a, err);
    if (rc < 0) {
        h->destroy(self);
        return rc;
    }
    switch (h->kind) {
    case PUBLISHER:
        rc = txo_publisher_new(h->ops, self, out, err);
        break;
    case CONSUMER:
        rc = txo_consumer_new(h->ops, self, out, err);
        break;
    case HISTORY:
        return txo_history_new(h->ops, self, out, err); /* destroys self when it fails */
    }
    if (rc < 0)
        h->destroy(self);
    return rc;
}

int txo__publisher_build(const struct txo_publisher_ops *ops, size_t size,
                         txo__transport_init_fn init, const struct txo__transport_args *a,
                         struct txo_publisher **out, struct txo_error *err)
{
    struct handle h = {PUBLISHER, ops, ops->name, ops->destroy};
    return build(&h, size, init, a, out, err);
}

int txo__consumer_build(const struct txo_consumer_ops *ops, size_t size,
                        txo__transport_init_fn init, const struct txo__transport_args *a,
                        struct txo_consumer **out, struct txo_error *err)
{
    struct handle h = {CONSUMER, ops, ops->name, ops->destroy};
    return build(&h, size, init, a, out, err);
}

int txo__history_build(const struct txo_history_ops *ops, size_t size, txo__transport_init_fn init,
                       const struct txo__transport_args *a, struct txo_history **out,
                       struct txo_error *err)
{
    struct handle h = {HISTORY, ops, ops->name, ops->destroy};
    return build(&h, size, init, a, out, err);
}

int txo__transport_metrics(struct txo_metrics *reg, const struct txo_metric_desc *desc, size_t n,
                           struct txo_metric **const *slots, struct txo_error *err)
{
    for (size_t i = 0; reg != NULL && i < n; i++) {
        int rc = txo_metrics_register_table(reg, &desc[i], 1, slots[i], err);
        if (rc < 0)
            return rc;
    }
    return 0;
}
