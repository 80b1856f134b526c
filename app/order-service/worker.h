/*
 * The order service's part of the worker: what the library's worker runtime (txo/worker.h)
 * runs for orders. The runtime owns the threads, the inbox, the saga runners, resumption,
 * compensation retries, command dispatch and retention; this module only registers:
 *   - the OrderCreated handler: starts the order's CreateOrderSaga from the event's own
 *     payload (correlation id "order:<id>"), in the transaction that records the event in the
 *     inbox. An OrderCreated of the async API ("saga_start":"command") starts nothing: its
 *     saga comes from the command below, so each mode has exactly one path;
 *   - the StartOrderSaga command handler (async API): starts the saga from the command's
 *     payload, in the transaction that marks the command DONE;
 *   - the saga definition (with remote parts when the services are called over HTTP);
 *   - per runner thread, a struct order_saga_env with its own HTTP session to the services.
 *
 * Thread-safety: the config is read-only once set up and shared by every worker thread; it
 * must outlive the worker.
 */
#ifndef TXO_ORDER_WORKER_H
#define TXO_ORDER_WORKER_H

#include "order_saga.h"
#include "orders.h"
#include "txo/worker.h"

struct order_services;

/* The saga types the order service registers: one slot each in order_worker_config.sagas. A
 * new saga is a slot here and its definition in worker.c's saga_defs[]. */
enum order_saga_slot {
    ORDER_SAGA_CREATE_ORDER, /* CreateOrderSaga (order_saga.h) */
    ORDER_SAGA_SLOTS,
};

struct order_worker_config {
    const struct order_services *services;              /* NULL: in-process stand-ins */
    const struct order_faults *faults;                  /* demo/tests only; NULL = none */
    const struct txo_saga_def *sagas[ORDER_SAGA_SLOTS]; /* what txo_worker_opts.sagas holds */
};

/*
 * Fills the order service's tables into wo (events, commands, sagas, handler_arg and the
 * runner user factory), pointing at cfg, which it sets up. The other fields of wo (threads,
 * leases, retention, metrics) are left to the caller. Never fails.
 */
void order_worker_setup(struct order_worker_config *cfg, const struct order_services *services,
                        const struct order_faults *faults, struct txo_worker_opts *wo);

#endif
