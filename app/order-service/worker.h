/*
 * The order service's worker (seed 9.6, 9.12, 9.13 and the "beyond the seed" resumption): the
 * process that turns OrderCreated events into finished sagas and keeps the database tidy.
 *
 * What it runs, each on its own threads and its own database connections:
 *   - the consumer of OrderCreated (order_worker_handle_message): records the event in
 *     inbox_events and creates the order's saga in ONE transaction; a duplicate delivery finds
 *     the inbox row and changes nothing. It is handed to a transport by the caller: the NATS
 *     durable consumer (opts.consumer, polled by a worker thread) or the in-process local
 *     dispatcher of `txo up` (the relay calls it directly);
 *   - saga runners (opts.saga_threads): drive sagas to a terminal state with the order saga;
 *   - the scheduler: finds work that no live process holds and queues it for the runners:
 *       * RUNNING / COMPENSATING sagas without owner or with an expired owner lease (a new
 *         saga, or one whose process died) -> resumed from their persisted steps;
 *       * StartOrderSaga commands (async API mode) -> saga created and command DONE in one
 *         transaction, then run; RefundPayment commands (a charge whose outcome was unknown
 *         when its saga gave up) -> sent to the payment service until it answers;
 *       * COMPENSATION_FAILED sagas -> retried with exponential backoff, at most
 *         compensation_max_retries times, then left for a human with an error log line and
 *         the txo_saga_compensation_abandoned_total metric;
 *   - the cleaner: every clean_interval_s, deletes in small batches PUBLISHED outbox rows,
 *     completed idempotency keys, inbox rows and DONE commands older than their retention.
 *
 * Several workers (threads of one process, or processes on several machines) share one
 * database safely: saga ownership is a lease in saga_instances, commands are claimed with a
 * lease, and every state change is fenced by the owner.
 *
 * Thread-safety: order_worker_handle_message may be called from any one thread at a time per
 * worker (it serialises on its connection). start/stop from one thread.
 */
#ifndef TXO_ORDER_WORKER_H
#define TXO_ORDER_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "orders.h"
#include "txo/consumer.h"
#include "txo/db.h"
#include "txo/err.h"
#include "txo/saga.h"

struct txo_metrics;
struct order_services;

struct order_worker_opts {
    unsigned saga_threads;              /* saga runners; default 4 */
    int64_t poll_ms;                    /* scheduler period when idle; default 200 */
    struct txo_saga_opts saga;          /* lease, step attempts and backoff (owner: per thread) */
    unsigned command_lease_s;           /* default 30 */
    unsigned command_max_attempts;      /* default 10, then FAILED */
    unsigned compensation_retry_base_s; /* first retry of a COMPENSATION_FAILED saga; default 5 */
    unsigned compensation_retry_max_s;  /* backoff cap; default 300 */
    unsigned compensation_max_retries;  /* then alert and leave it; default 10 */
    unsigned outbox_retention_s;        /* PUBLISHED rows kept; default 7 days */
    unsigned idempotency_retention_s;   /* COMPLETED keys kept; default 1 day */
    unsigned inbox_retention_s;         /* inbox rows kept; default 7 days */
    unsigned clean_interval_s;          /* default 60; 0 = no cleaner */
    unsigned clean_batch;               /* rows per delete; default 1000 */
    const struct order_services *services; /* NULL: in-process stand-ins for payment/shipment */
    const struct order_faults *faults;     /* demo/tests only; NULL = none */
    struct txo_metrics *metrics;           /* NULL: none */
};

void order_worker_opts_init(struct order_worker_opts *opts);

struct order_worker_stats {
    uint64_t consumed;          /* OrderCreated events whose saga was created */
    uint64_t duplicates;        /* deliveries dropped by the inbox */
    uint64_t sagas_completed;   /* runs that ended COMPLETED */
    uint64_t sagas_aborted;     /* runs that ended COMPENSATED or FAILED */
    uint64_t sagas_comp_failed; /* runs that ended COMPENSATION_FAILED */
    uint64_t resumed;           /* sagas picked up without a live owner (includes new ones) */
    uint64_t commands_done;
    uint64_t commands_failed; /* attempts that failed */
    uint64_t cleaned;         /* rows deleted by the cleaner */
};

struct order_worker;

/* db_opts (copied; its strings borrowed for the worker's life) opens one connection per thread.
 * Errors: TXO_EINVAL (bad opts), TXO_ENOMEM, connection errors of the consumer connection. */
TXO_MUST_CHECK int order_worker_new(const struct txo_db_opts *db_opts,
                                    const struct order_worker_opts *opts, struct order_worker **out,
                                    struct txo_error *err);

/*
 * Has the worker poll consumer (a transport created with order_worker_handle_message and this
 * worker as its handler) on a thread of its own. Call before order_worker_start(); the
 * consumer is borrowed and must outlive the worker's threads (free it after stop).
 */
void order_worker_attach_consumer(struct order_worker *w, struct txo_consumer *consumer);

/* Starts the threads. Errors: TXO_ENOMEM, TXO_EIO (thread creation), connection errors. */
TXO_MUST_CHECK int order_worker_start(struct order_worker *w, struct txo_error *err);

/* Asks every thread to finish what it is doing (a saga step in flight completes) and joins
 * them. Idempotent. */
void order_worker_stop(struct order_worker *w);

/* Stops (if running) and frees. NULL is a no-op. */
void order_worker_free(struct order_worker *w);

/*
 * The OrderCreated consumer, a txo_message_handler_fn (arg = the worker): records the inbox row
 * and creates the saga in one transaction, then queues the saga for a runner. Other event types
 * are acknowledged and ignored. Errors: TXO_EINVAL (not an envelope, or an OrderCreated without
 * order_id: permanent), DB errors (transient ones get the message redelivered).
 */
int order_worker_handle_message(void *arg, const struct txo_inbound_message *msg,
                                struct txo_error *err);

void order_worker_get_stats(struct order_worker *w, struct order_worker_stats *out);

#endif
