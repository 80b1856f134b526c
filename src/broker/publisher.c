#include "core/common.h"

/*
 * The publisher handle: an ops table plus the transport's own state. Every transport
 * (log.c, null.c, a test's fake) is created through txo_publisher_new(), so the relay sees one
 * shape only.
 *
 * Ownership: the handle owns `self` and releases it through ops->destroy in
 * txo_publisher_free(). Thread-safety: none needed (one relay uses a publisher at a time).
 */

int txo_publisher_new(const struct txo_publisher_ops *ops, void *self, struct txo_publisher **pub,
                      struct txo_error *err)
{
    if (ops == NULL || ops->publish_batch == NULL || pub == NULL)
        return txo_error_set(err, TXO_EINVAL, "publisher: ops with a publish_batch are required");
    struct txo_publisher *p = txo_malloc(sizeof(*p));
    if (p == NULL)
        return txo_error_set(err, TXO_ENOMEM, "publisher %s: out of memory",
                             ops->name != NULL ? ops->name : "(unnamed)");
    p->ops = ops;
    p->self = self;
    *pub = p;
    return 0;
}

void txo_publisher_free(struct txo_publisher *pub)
{
    if (pub == NULL)
        return;
    if (pub->ops->destroy != NULL)
        pub->ops->destroy(pub->self);
    txo_free(pub);
}
