/*
 * Private to the order saga's files: the decoded payload, the steps' rule type and what the
 * step files share. order_saga.c holds the payload, the events, the calls to the services,
 * what the steps share and the definition; each step is one file with its action, its
 * compensation and its remote parts: order_saga_stock.c (ReserveStock), order_saga_payment.c
 * (ChargePayment), order_saga_shipment.c (CreateShipment).
 *
 * Every part takes n sagas (txo_saga_step_fn): the engine hands it one saga when a saga runs
 * alone and several when it batches a step. An action reads what earlier runs left for all
 * its sagas with one statement and judges each by the step's rule (enum step_found), then
 * writes the rows of the fresh ones with a few set-based statements: a re-run writes nothing
 * but its event (appended with its fixed key, so never twice), a refusal writes nothing and
 * says why. An injected fault is played only when the saga runs alone (TXO_EALONE in a
 * batch), so that a test's fault counts stay per try.
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
 * shipment, the order's status), and what that means for the step. Each step's rule (struct
 * step_rule: reservation_rule in order_saga_stock.c, payment_rule, shipment_rule and
 * order_saga__order_rule) decides it from the row's status, once for every saga of a batch.
 */
enum step_found {
    STEP_FRESH,   /* no earlier run: the step writes its row */
    STEP_REDONE,  /* an earlier run's row that lets the step succeed again, writing nothing */
    STEP_REFUSED, /* a row that forbids the step: TXO_EBUSINESS */
};

/* A step's rule: a row in any status but these two (or no row when fresh is set) refuses it. */
struct step_rule {
    const char *fresh;  /* the status the step moves on; NULL: it writes a new row (none yet) */
    const char *redone; /* the status an earlier run of the step left */
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
extern const struct step_rule order_saga__order_rule;

/* What the body of a call to a service carries besides the order_id and the customer_id. */
enum service_body {
    BODY_ORDER,  /* nothing more: refunds and cancellations name the order only */
    BODY_CHARGE, /* amount_cents: the order's total */
    BODY_PARCEL, /* items: [{"sku","qty"}], what the carrier ships */
};

/* What the steps of a batch share: their orders or sagas, and what earlier runs left. */
struct order_saga_batch {
    char (*ids)[40];      /* the key each saga's rows are found by, as text */
    struct txo_param *p;  /* the keys as IN-list params first; room for 3n + 2 */
    enum step_found *was; /* what the step's rule says of the earlier run's row */
    char (*status)[32];   /* that row's status ("" when there is none) */
};

/*
 * Fills o for the sagas ctx[0..n): keyed by order id (by_order) or by saga id. A saga without
 * a decoded payload gets rcs[k] = TXO_EINVAL (errs[k] says so); every other rcs[k] is 0.
 * Release o with order_saga__batch_free, also on failure.
 */
int order_saga__batch_new(const struct txo_saga_ctx *const *ctx, size_t n, bool by_order, int *rcs,
                          struct txo_error *errs, struct order_saga_batch *o,
                          struct txo_error *err);

void order_saga__batch_free(struct order_saga_batch *o);

/*
 * An injected fault of saga k's run (on: configured for this step): in a batch of several the
 * saga runs alone instead (TXO_EALONE), so a fault is played once per try; alone it is `code`
 * with the message. Returns rcs[k].
 */
int order_saga__fault(size_t n, bool on, int *rcs, struct txo_error *errs, size_t k, int code,
                      const char *fmt, ...) TXO_PRINTF(7, 8);

/*
 * Judges every saga k with rcs[k] == 0 by the step's rule from the rows `before` + IN list of
 * the batch's keys + `after` returns (column 0 the key as text, column 1 the row's status), or
 * from "no row": o->was[k] and o->status[k].
 */
int order_saga__batch_judge(struct txo_tx *tx, const char *before, const char *after, size_t n,
                            const int *rcs, struct order_saga_batch *o,
                            const struct step_rule *rule, struct txo_error *err);

/* Runs before + IN list of n params (padded by repeating the last) + after; rows may be NULL
 * (then it executes, and *affected, when not NULL, gets the affected rows). */
int order_saga__batch_query(struct txo_tx *tx, const char *before, const char *after,
                            const struct txo_param *in, size_t n, struct txo_rows **rows,
                            uint64_t *affected, struct txo_error *err);

/* How many sagas are done so far (rcs[k] == 0) and fresh (o->was[k] == STEP_FRESH). */
size_t order_saga__batch_fresh(const int *rcs, const struct order_saga_batch *o, size_t n);

/*
 * The step's event for every saga k with rcs[k] == 0: the fresh ones' in one statement, a
 * re-run's and a saga alone's with TXO_OUTBOX_IGNORE_DUPLICATE (an earlier run may have written
 * it; in a batch of several a duplicate fails the statement, and its sagas then run alone).
 * Payloads as order_saga__emit().
 */
int order_saga__batch_emit(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                           const int *rcs, const struct order_saga_batch *o, const char *type,
                           const char *suffix, bool with_items, bool with_amount,
                           struct txo_error *err);

/*
 * The remote part of a step for n sagas: POSTs {"order_id","customer_id"[,"amount_cents"|
 * "items"]} with each saga's idempotency key (the same on every try and in every worker, so
 * the service applies the call once). Alone (n == 1) through the service client's retries
 * (order_service_call); several at once with one try each (order_service_call_many), a failed
 * one being retried by the engine alone. rcs[k]: 0, TXO_EBUSINESS (refused), TXO_EUNKNOWN or
 * TXO_ETIMEOUT (may have taken effect) or another transient code (did not). Nothing is called
 * when the service is the in-process stand-in.
 */
void order_saga__call_service(const struct txo_saga_ctx *const *ctx, size_t n,
                              enum order_service_kind kind, const char *operation, const char *path,
                              enum service_body what, int *rcs, struct txo_error *errs);

/*
 * A compensation that moves each order's row back with one UPDATE and appends its event
 * (RefundPayment, CancelShipment): sql is the UPDATE up to the IN list of order ids, written
 * so that a re-run changes nothing; the event is appended for every saga, ignored when an
 * earlier run wrote it. fault tells whether the run injects this compensation's failure.
 */
struct order_saga_undo {
    const char *sql;
    const char *event_type, *suffix;
    bool with_amount;
    const char *fault_says; /* the injected failure's message */
    bool (*fault)(const struct order_faults *f);
};

int order_saga__undo(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                     const struct order_saga_undo *u, int *rcs, struct txo_error *errs,
                     struct txo_error *err);

/* ---- the steps (txo_saga_step_fn, txo_saga_remote_fn), one file each ---- */

/*
 * ReserveStock: every SKU of the sagas locked in one statement (ascending: the lock order),
 * each saga judged by its reservations, the fresh ones allocated in the batch's order (a saga
 * takes all its lines or none: not enough stock refuses it with the SKU and the counts), then
 * one UPDATE ... CASE of the SKUs, one INSERT of the reservations and one of the events.
 */
int order_saga__reserve_stock(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                              int *rcs, struct txo_error *errs, struct txo_error *err);

/* ReleaseStock: each saga's RESERVED reservations released, then marked RELEASED. */
int order_saga__release_stock(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                              int *rcs, struct txo_error *errs, struct txo_error *err);

/* ChargePayment: one payment per order, judged by payment_rule when one exists; the fresh
 * ones in one INSERT, then the events. */
int order_saga__charge_payment(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                               int *rcs, struct txo_error *errs, struct txo_error *err);

/* RefundPayment: only a CHARGED payment becomes REFUNDED. */
int order_saga__refund_payment(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                               int *rcs, struct txo_error *errs, struct txo_error *err);

/* The calls to the payment service. */
void order_saga__remote_charge(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                               struct txo_error *errs);
void order_saga__remote_refund(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                               struct txo_error *errs);

/* CreateShipment: the orders locked and judged by order_saga__order_rule, the shipments
 * judged by shipment_rule; the fresh ones' shipments in one INSERT, their orders confirmed
 * in one UPDATE, then the events. */
int order_saga__create_shipment(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                                int *rcs, struct txo_error *errs, struct txo_error *err);

/* CancelShipment: only a CREATED shipment becomes CANCELLED. */
int order_saga__cancel_shipment(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                                int *rcs, struct txo_error *errs, struct txo_error *err);

/* The calls to the shipment service. */
void order_saga__remote_create_shipment(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                                        struct txo_error *errs);
void order_saga__remote_cancel_shipment(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                                        struct txo_error *errs);

#endif
