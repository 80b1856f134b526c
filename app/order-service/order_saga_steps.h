/*
 * Private to the order saga's files: the decoded payload, the steps' rule type and what the
 * step files share. order_saga.c holds the payload, the events, the calls to the services,
 * the helpers of the batch forms and the definition; each step is one file with its action,
 * its compensation, its batch form and its remote parts: order_saga_stock.c (ReserveStock),
 * order_saga_payment.c (ChargePayment), order_saga_shipment.c (CreateShipment).
 *
 * The batch form of a step covers its common first run for many sagas with a few set-based
 * statements; a saga with anything unusual (a re-run that finds rows already there, not
 * enough stock, an injected fault, an order no longer CREATED) gets a non-zero outcome and
 * nothing written, and the engine runs it through the step's single-saga function, which
 * settles every unusual case by the same rule (enum step_found).
 */
#ifndef TXO_ORDER_SAGA_STEPS_H
#define TXO_ORDER_SAGA_STEPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/saga.h"
#include "order_saga.h"
#include "order_services.h"
#include "orders.h"

/* One SKU to reserve: the payload's items merged by SKU, sorted ascending. */
struct stock_line {
    char sku[ORDER_SKU_MAX + 1];
    int32_t qty;
};

/* The decoded SagaPayload (ctx->state). */
struct order_saga_state {
    int64_t order_id;
    int64_t customer_id;
    int64_t total_cents;
    struct order_item *items; /* as in the payload, for event payloads; skus in sku_buf */
    char (*sku_buf)[ORDER_SKU_MAX + 1];
    size_t n_items;
    struct stock_line *stock; /* merged by SKU, ascending: the lock order */
    size_t n_stock;
};

/*
 * What a step finds in the row an earlier run of it left (a reservation, a payment, a
 * shipment, the order's status), and what that means for the step. One function per step
 * decides it from the row's status (NULL: no row): reservation_found (order_saga_stock.c),
 * payment_found (order_saga_payment.c), shipment_found (order_saga_shipment.c) and
 * order_saga__order_found (order_saga.c). The per-saga step and its batch form both ask it,
 * so the two paths cannot judge a re-run differently.
 */
enum step_found {
    STEP_FRESH,   /* no earlier run: the step writes its row */
    STEP_REDONE,  /* an earlier run's row that lets the step succeed again, writing nothing */
    STEP_REFUSED, /* a row that forbids the step: TXO_EBUSINESS */
};

/* A batch's orders: their ids as text (ids[k]) and as IN-list params (p, room for 2n + 2). */
struct order_saga_batch {
    char (*ids)[40];
    struct txo_param *p;
};

/* ---- order_saga.c ---- */

/* The run's injected faults (none when ctx->user has none). */
const struct order_faults *order_saga__faults(const struct txo_saga_ctx *ctx);

/* The decoded payload; NULL (with err set) when the run has none. */
const struct order_saga_state *order_saga__state(const struct txo_saga_ctx *ctx,
                                                 struct txo_error *err);

/*
 * Appends event `type` with key "saga:<id>:<suffix>" and the payload built from the other
 * arguments (see orders__json_saga_event), ignoring a duplicate key (a re-run).
 */
int order_saga__emit(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                     const struct order_saga_state *st, const char *type, const char *suffix,
                     bool with_items, int64_t amount_cents, const char *reason,
                     struct txo_error *err);

/* Reads the single string column of a one-row query into buf ("" when there is no row). */
int order_saga__query_str(struct txo_tx *tx, const char *sql, const struct txo_param *p, size_t np,
                          char *buf, size_t cap, bool *found, struct txo_error *err);

/* CreateShipment confirms a CREATED order; a CONFIRMED one is an earlier run's doing; any other
 * status (CANCELLED by the customer) or a missing order refuses the step. */
enum step_found order_saga__order_found(const char *status);

/* What the body of a call to a service carries besides the order_id and the customer_id. */
enum service_body {
    BODY_ORDER,  /* nothing more: refunds and cancellations name the order only */
    BODY_CHARGE, /* amount_cents: the order's total */
    BODY_PARCEL, /* items: [{"sku","qty"}], what the carrier ships */
};

/*
 * The remote part of a step: POSTs {"order_id","customer_id"[,"amount_cents"|"items"]} to the
 * service with the engine's idempotency key (the same on every try and in every worker, so
 * the service applies the call once). Returns order_service_call()'s result: 0, TXO_EBUSINESS
 * (refused), TXO_EUNKNOWN (may have taken effect) or another transient code (did not).
 */
int order_saga__call_service(const struct txo_saga_ctx *ctx, enum order_service_kind kind,
                             const char *operation, const char *path, enum service_body what,
                             struct txo_error *err);

/* What a batch of n sagas' states look like; NULL states are refused one by one. */
const struct order_saga_state *order_saga__batch_state(const struct txo_saga_ctx *ctx,
                                                       int *outcome);

/* Runs before + IN list of n params (padded by repeating the last) + after. */
int order_saga__batch_query(struct txo_tx *tx, const char *before, const char *after,
                            const struct txo_param *in, size_t n, struct txo_rows **rows,
                            struct txo_error *err);

/* Runs before + n_rows x row (VALUES) with p (n_rows x per_row params); *affected may be NULL. */
int order_saga__batch_insert(struct txo_tx *tx, const char *before, const char *row, size_t n_rows,
                             const struct txo_param *p, size_t per_row, uint64_t *affected,
                             struct txo_error *err);

/* One event per saga k with outcome[k] == 0, in one statement (see order_saga__emit()). */
int order_saga__batch_emit(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                           const int *outcome, const char *type, const char *suffix,
                           bool with_items, bool with_amount, struct txo_error *err);

/*
 * Judges every saga k still in the batch (outcome[k] == 0) by the step's rule, from its rows
 * in `rows` (column 0 its id as text, ids[k]; column 1 the row's status) or from "no row".
 * Only STEP_FRESH stays in the batch: a re-run (STEP_REDONE, TXO_EDUPLICATE) or a refusal
 * (STEP_REFUSED, TXO_EBUSINESS) goes the single way, which settles it by the same rule.
 */
void order_saga__batch_judge(const struct txo_rows *rows, char (*ids)[40], size_t n, int *outcome,
                             enum step_found (*rule)(const char *status));

/* Fills o with the batch's orders; a saga without a state, or with injected faults the
 * single path plays, gets a non-zero outcome. Release o with order_saga__batch_orders_free,
 * also on failure. */
int order_saga__batch_orders_new(const struct txo_saga_ctx *const *ctx, size_t n, int *outcome,
                                 struct order_saga_batch *o, struct txo_error *err);

void order_saga__batch_orders_free(struct order_saga_batch *o);

/* Reads (order id, status) rows with `before` + IN list of the batch's orders + `after`, and
 * judges each saga by `rule` (order_saga__batch_judge). */
int order_saga__batch_judge_orders(struct txo_tx *tx, const char *before, const char *after,
                                   size_t n, int *outcome, struct order_saga_batch *o,
                                   enum step_found (*rule)(const char *status),
                                   struct txo_error *err);

/* How many outcomes are 0. */
size_t order_saga__batch_count_done(const int *outcome, size_t n);

/*
 * order_saga__call_service for many sagas: one try of each call, all made together through the
 * service's guards (order_service_call_many). A saga whose state is missing fails alone.
 */
void order_saga__call_service_batch(const struct txo_saga_ctx *const *ctx, size_t n,
                                    enum order_service_kind kind, const char *operation,
                                    const char *path, enum service_body what, int *rcs,
                                    struct txo_error *errs);

/* ---- the steps: txo_saga_step_fn, txo_saga_remote_fn and their batch forms ---- */

/*
 * Per SKU, in ascending order (the lock order): reserve with one guarded UPDATE, then record
 * the reservation. Only when something is unusual (the UPDATE changed nothing, or the
 * reservation row exists: a re-run) does it look further, so a first run costs two statements
 * per SKU plus the event.
 */
int order_saga__reserve_stock(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                              struct txo_error *err);

/* Releases the saga's RESERVED reservations, then marks them RELEASED. */
int order_saga__release_stock(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                              struct txo_error *err);

/*
 * ReserveStock for many sagas: lock every SKU of the batch in one statement (ascending, the
 * lock order), allocate in the batch's order in code (an order that does not fit goes the
 * single way, which fails it with the reason), then one UPDATE ... CASE for every SKU, one
 * multi-row INSERT of the reservations and one of the StockReserved events.
 */
int order_saga__reserve_stock_batch(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx,
                                    size_t n, int *outcome, struct txo_error *err);

/* The calls to the payment service (none when it is in-process). */
int order_saga__remote_charge(const struct txo_saga_ctx *ctx, struct txo_error *err);

int order_saga__remote_refund(const struct txo_saga_ctx *ctx, struct txo_error *err);

/* One payment per order; a payment found is judged by payment_found(). */
int order_saga__charge_payment(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                               struct txo_error *err);

/* Only a CHARGED payment becomes REFUNDED. */
int order_saga__refund_payment(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                               struct txo_error *err);

/* ChargePayment (in-process payments) for many sagas: one multi-row INSERT of the payments
 * and one of the PaymentCharged events. */
int order_saga__charge_payment_batch(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx,
                                     size_t n, int *outcome, struct txo_error *err);

/* order_saga__remote_charge for many sagas (order_saga__call_service_batch). */
void order_saga__remote_charge_batch(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                                     struct txo_error *errs);

/* The calls to the shipment service (none when it is in-process). */
int order_saga__remote_create_shipment(const struct txo_saga_ctx *ctx, struct txo_error *err);

int order_saga__remote_cancel_shipment(const struct txo_saga_ctx *ctx, struct txo_error *err);

/* One shipment per order, judged by shipment_found() when found, and the order confirmed,
 * judged by order_saga__order_found() when it did not move. */
int order_saga__create_shipment(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                                struct txo_error *err);

/* Only a CREATED shipment becomes CANCELLED. */
int order_saga__cancel_shipment(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                                struct txo_error *err);

/* CreateShipment (in-process shipments) for many sagas: lock the orders, one multi-row INSERT
 * of the shipments, one UPDATE confirming the orders, one multi-row INSERT of the events. */
int order_saga__create_shipment_batch(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx,
                                      size_t n, int *outcome, struct txo_error *err);

/* order_saga__remote_create_shipment for many sagas (order_saga__call_service_batch). */
void order_saga__remote_create_shipment_batch(const struct txo_saga_ctx *const *ctx, size_t n,
                                              int *rcs, struct txo_error *errs);

#endif
