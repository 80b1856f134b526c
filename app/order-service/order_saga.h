/*
 * The order's saga, CreateOrderSaga, and the helpers that start and drive it (order_saga.c,
 * order_saga_start.c):
 *   - order_saga_def() is the saga: ReserveStock/ReleaseStock, ChargePayment/RefundPayment,
 *     CreateShipment/CancelShipment. Each step is one local transaction that writes its
 *     business rows and its outbox event together, and each is safe to run again (a worker
 *     that died mid-saga is resumed by another one, which re-runs the unfinished step).
 *   - orders_start_saga() records the saga of an existing order (one per order, idempotent;
 *     tests and the demo); orders_create_with_saga_tx() writes the order and its saga in one
 *     transaction.
 *   - orders_run_saga() / orders_retry_saga() drive a saga with explicit failure injection
 *     (struct order_faults), for the demo, the tests and the worker.
 * The worker registers the definition (worker.h), and the admin API retries through that
 * registration (api.c).
 *
 * The saga depends on the orders (orders.h: the rows it moves, the limits, the payloads);
 * the orders do not depend on it.
 *
 * Thread-safety: the saga definition is immutable and shared. Faults are read-only; a struct
 * order_saga_env is per run.
 */
#ifndef TXO_ORDER_SAGA_H
#define TXO_ORDER_SAGA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/db.h"
#include "txo/err.h"
#include "txo/saga.h"

struct order_item;

/*
 * orders_create_tx() and the order's CreateOrderSaga (txo_saga_create(), correlation id
 * "order:<id>", the SagaPayload built from the items given: nothing is read back), all in the
 * caller's transaction tx, so the order, its OrderCreated event and its saga commit together.
 * For tests and benchmarks that drive sagas without a worker.
 * saga_id receives the new saga's id, *order_id the order's. Same errors as orders_create_tx.
 */
TXO_MUST_CHECK int orders_create_with_saga_tx(struct txo_tx *tx, int64_t customer_id,
                                              const struct order_item *items, size_t n,
                                              int64_t *order_id, char saga_id[TXO_SAGA_ID_LEN],
                                              struct txo_error *err);

/* orders_create_with_saga_tx() in its own READ COMMITTED transaction. Same errors. */
TXO_MUST_CHECK int orders_create_with_saga(struct txo_db *db, int64_t customer_id,
                                           const struct order_item *items, size_t n,
                                           int64_t *order_id, char saga_id[TXO_SAGA_ID_LEN],
                                           struct txo_error *err);

/*
 * Records the CreateOrderSaga of an order in one transaction: loads the order and its items
 * and calls txo_saga_create() with correlation id "order:<id>" and the SagaPayload
 * {"order_id","customer_id","items":[...],"total_cents"}. Idempotent: one saga per order;
 * when it exists already, saga_id receives its id and *created (may be NULL) is false.
 * Errors: TXO_ENOTFOUND (no such order), DB errors.
 */
TXO_MUST_CHECK int orders_start_saga(struct txo_db *db, int64_t order_id,
                                     char saga_id[TXO_SAGA_ID_LEN], bool *created,
                                     struct txo_error *err);

/*
 * Failure injection into the in-process stand-ins of the payment and shipment services, as
 * explicit configuration handed to one saga run (never a global). All-zero (or a NULL
 * pointer) means "no faults". Injected failures are raised before the step writes anything,
 * exactly as a real remote service refusing the call would be.
 */
struct order_faults {
    bool decline_payment;      /* ChargePayment: TXO_EBUSINESS "card declined" */
    bool fail_shipment;        /* CreateShipment: TXO_EBUSINESS "carrier rejected shipment" */
    bool fail_refund;          /* RefundPayment: TXO_EBUSINESS "refund failed (injected)" */
    bool fail_release;         /* ReleaseStock: TXO_EBUSINESS "release failed (injected)" */
    bool fail_cancel_shipment; /* CancelShipment: TXO_EBUSINESS "cancel failed (injected)" */
    unsigned transient_charge_failures; /* the first N ChargePayment calls of this run return
                                         * TXO_EUNAVAILABLE (the engine retries them) */
};

/*
 * What the order saga's steps receive as ctx->user. One per txo_saga_run() call; the
 * counters are written by the steps (so an env must not be shared between threads).
 */
struct order_service_session;
struct order_saga_env {
    const struct order_faults *faults; /* NULL: no faults */
    unsigned charge_calls; /* ChargePayment tries of a saga alone so far in this run (the
                            * injected transient failures count them) */
    /* NULL: payment and shipment are the in-process stand-ins. Otherwise the steps call the
     * services configured in it over HTTP (order_services.h) before writing their rows. */
    struct order_service_session *session;
};

/* Sets env to "no faults" with zeroed counters (faults may be NULL). Never fails. */
void order_saga_env_init(struct order_saga_env *env, const struct order_faults *faults);

/*
 * The CreateOrderSaga definition: steps ReserveStock/ReleaseStock, ChargePayment/RefundPayment,
 * CreateShipment/CancelShipment; decode parses the SagaPayload (duplicate SKUs merged, sorted by
 * SKU for lock ordering); on_aborted cancels the order (CREATED -> CANCELLED, version+1) and
 * writes OrderCancelled (key "saga:<id>:order-cancelled") in the engine's final transaction.
 * ctx->user must be NULL or a struct order_saga_env. Static, immutable, never freed.
 * order_saga_def() has local steps only (the in-process stand-ins of payment and shipment);
 * order_saga_def_for(services) adds the remote parts (the calls to the services, made with no
 * transaction open) when services call at least one of them over HTTP. Both have the same
 * type and steps, so a saga created under one may be run under the other.
 */
const struct txo_saga_def *order_saga_def(void);
struct order_services;
const struct txo_saga_def *order_saga_def_for(const struct order_services *services);

/*
 * Drives the saga saga_id to a terminal state with txo_saga_run() (see txo/saga.h), with
 * faults (may be NULL) injected into its steps. opts may be NULL (library defaults).
 * *final (may be NULL) receives the terminal state. Returns txo_saga_run()'s result.
 */
TXO_MUST_CHECK int orders_run_saga(struct txo_db *db, const char *saga_id,
                                   const struct order_faults *faults,
                                   const struct txo_saga_opts *opts, enum txo_saga_status *final,
                                   struct txo_error *err);

/* orders_run_saga() for n sagas at once with txo_saga_run_many(): the steps of the sagas
 * that are at the same step run in one transaction each. rcs and finals as there. */
TXO_MUST_CHECK int orders_run_saga_many(struct txo_db *db, const char *const *saga_ids, size_t n,
                                        const struct order_faults *faults,
                                        const struct txo_saga_opts *opts, int *rcs,
                                        enum txo_saga_status *finals, struct txo_error *err);

/* Same with txo_saga_retry(): for a COMPENSATION_FAILED saga (TXO_ESTATE otherwise). */
TXO_MUST_CHECK int orders_retry_saga(struct txo_db *db, const char *saga_id,
                                     const struct order_faults *faults,
                                     const struct txo_saga_opts *opts, enum txo_saga_status *final,
                                     struct txo_error *err);

/* orders_retry_saga() calling the external services (may be NULL: stand-ins) over HTTP. */
TXO_MUST_CHECK int orders_retry_saga_with(struct txo_db *db, const char *saga_id,
                                          const struct order_services *services,
                                          const struct order_faults *faults,
                                          const struct txo_saga_opts *opts,
                                          enum txo_saga_status *final, struct txo_error *err);

#endif
