#include "core/common.h"

/*
 * The null publisher: acknowledges every message and sends nothing. It measures the relay's
 * own cost (claim + mark) in benchmarks and `txo relay --publisher null`.
 *
 * Stateless, so thread-safe.
 */

static int null_publish_batch(void *self, const struct txo_outbox_message *msgs, size_t n,
                              int *results, struct txo_error *errors)
{
    (void)self;
    (void)msgs;
    (void)errors;
    for (size_t i = 0; i < n; i++)
        results[i] = 0;
    return 0;
}

static const struct txo_publisher_ops null_ops = {
    .name = "null",
    .publish_batch = null_publish_batch,
    .destroy = NULL,
    .flags = TXO_PUBLISHER_QUICK | TXO_PUBLISHER_IN_ORDER,
};

int txo_publisher_null_new(struct txo_publisher **pub, struct txo_error *err)
{
    return txo_publisher_new(&null_ops, NULL, pub, err);
}
