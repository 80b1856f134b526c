/*
 * Private to the transports (src/broker/<broker>_publisher.c, _consumer.c, _history.c and the
 * brokerless publishers): the one way a transport's handle is built. Every constructor checks
 * its own options, then hands the rest to txo__publisher_build(), txo__consumer_build() or
 * txo__history_build(), which
 *   - refuses a missing out (and, for a consumer, an unusable handler) with
 *     "<name> <kind>: ..." (name from the ops table: "kafka consumer: out is required");
 *   - allocates the transport's state zeroed ("<name> <kind>: out of memory");
 *   - runs the transport's init on it, then wraps it in its handle;
 *   - on any failure destroys the state through the ops table's destroy, so an init leaves
 *     whatever it made in the state and returns its code.
 * A transport's destroy is therefore only ever given a state this made (by the build or by its
 * handle's _free), never NULL, and releases whatever part of it init got to.
 * Every transport also describes its metric families as one table (struct txo_metric_desc)
 * registered by txo__transport_metrics(), and frees its secrets with txo__wipe_free()
 * (core/common.h).
 * Defined in transport.c.
 */
#ifndef TXO_BROKER_TRANSPORT_H
#define TXO_BROKER_TRANSPORT_H

#include "txo/consumer.h"
#include "txo/history.h"
#include "txo/metrics.h"
#include "txo/publisher.h"

/* What a constructor passes on to its transport's init; all borrowed for the call. */
struct txo__transport_args {
    const void *opts;            /* the transport's own options (struct txo_kafka_opts, ...) */
    const struct txo_handler *h; /* a consumer's handler, checked already; else NULL */
    struct txo_metrics *metrics; /* where the transport registers its families; may be NULL */
};

/*
 * Fills the zeroed state self from a. Returns 0, or a negative TXO_E* code with err set; the
 * state is then destroyed by the caller, whatever init got to.
 */
typedef int (*txo__transport_init_fn)(void *self, const struct txo__transport_args *a,
                                      struct txo_error *err);

/* *out = a publisher of ops over a new state of size bytes filled by init (see above). */
int txo__publisher_build(const struct txo_publisher_ops *ops, size_t size,
                         txo__transport_init_fn init, const struct txo__transport_args *a,
                         struct txo_publisher **out, struct txo_error *err);

/* *out = a consumer of ops, as txo__publisher_build(); a->h is checked first. */
int txo__consumer_build(const struct txo_consumer_ops *ops, size_t size,
                        txo__transport_init_fn init, const struct txo__transport_args *a,
                        struct txo_consumer **out, struct txo_error *err);

/* *out = a history reader of ops, as txo__publisher_build(). */
int txo__history_build(const struct txo_history_ops *ops, size_t size, txo__transport_init_fn init,
                       const struct txo__transport_args *a, struct txo_history **out,
                       struct txo_error *err);

/*
 * Registers each family desc[i] in reg (the one already there when it matches) and stores it in
 * *slots[i]: how every transport registers its metrics, its families written as one table. Does
 * nothing when reg is NULL. Returns 0, or the registry's code with err set.
 */
int txo__transport_metrics(struct txo_metrics *reg, const struct txo_metric_desc *desc, size_t n,
                           struct txo_metric **const *slots, struct txo_error *err);

#endif
