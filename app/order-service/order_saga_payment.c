/*
 * The ChargePayment step of the CreateOrderSaga and its compensation RefundPayment, each for n
 * sagas (order_saga_steps.h), and their remote parts: the calls to the payment service
 * (order_saga.c). A re-run is judged by payment_rule.
 *
 * Thread-safety: as order_saga.c; every function uses only its transaction and its contexts.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "txo/alloc.h"
#include "txo/outbox.h"
#include "order_saga_steps.h"
#include "orders_sql.h"

/* ChargePayment: only a CHARGED payment lets a re-run succeed (a REFUNDED one does not). */
static const struct step_rule payment_rule = {.fresh = NULL, .redone = "CHARGED"};

void order_saga__remote_charge(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                               struct txo_error *errs)
{
    order_saga__call_service(ctx, n, ORDER_SERVICE_PAYMENT, "charge", "/payments/charge",
                             BODY_CHARGE, rcs, errs);
}

void order_saga__remote_refund(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                               struct txo_error *errs)
{
    order_saga__call_service(ctx, n, ORDER_SERVICE_PAYMENT, "refund", "/payments/refund",
                             BODY_ORDER, rcs, errs);
}

/* The injected faults of ChargePayment: the first transient_charge_failures tries of the run
 * find the service unavailable, then decline_payment declines the card. */
static void charge_faults(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                          struct txo_error *errs)
{
    for (size_t k = 0; k < n; k++) {
        const struct order_faults *faults = order_saga__faults(ctx[k]);
        struct order_saga_env *env = ctx[k]->user;
        const struct order_saga_state *st = ctx[k]->state;
        if (rcs[k] != 0)
            continue;
        if (env != NULL && n == 1)
            env->charge_calls++;
        bool unavailable = env != NULL && env->charge_calls <= faults->transient_charge_failures &&
                           faults->transient_charge_failures > 0;
        order_saga__fault(
            n, unavailable, rcs, errs, k, TXO_EUNAVAILABLE,
            "payment service unavailable (injected, call %u of %u): order_id=%" PRId64,
            env != NULL ? env->charge_calls : 0, faults->transient_charge_failures, st->order_id);
        order_saga__fault(n, faults->decline_payment, rcs, errs, k, TXO_EBUSINESS,
                          "card declined: order_id=%" PRId64 " amount_cents=%" PRId64, st->order_id,
                          st->total_cents);
    }
}

int order_saga__charge_payment(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                               int *rcs, struct txo_error *errs, struct txo_error *err)
{
    struct order_saga_batch o;
    int rc = order_saga__batch_new(ctx, n, true, rcs, errs, &o, err);
    if (rc == 0) {
        charge_faults(ctx, n, rcs, errs);
        rc = order_saga__batch_judge(tx, ORDERS_SQL_PAYMENTS_MANY, "", n, rcs, &o, &payment_rule,
                                     err);
    }
    for (size_t k = 0; rc == 0 && k < n; k++)
        if (rcs[k] == 0 && o.was[k] == STEP_REFUSED)
            rcs[k] = txo_error_set(&errs[k], TXO_EBUSINESS,
                                   "payment is not chargeable: order_id=%s status=%s", o.ids[k],
                                   o.status[k]);
    size_t m = rc == 0 ? order_saga__batch_fresh(rcs, &o, n) : 0;
    if (m > 0) {
        size_t np = 0;
        for (size_t k = 0; k < n; k++) {
            const struct order_saga_state *st = ctx[k]->state;
            if (rcs[k] != 0 || o.was[k] != STEP_FRESH)
                continue;
            o.p[np++] = txo_p_i64(st->order_id);
            o.p[np++] = txo_p_i64(st->total_cents);
        }
        rc = txo_tx_exec_rows(tx, ORDERS_SQL_PAYMENT_INSERT_MANY, m, ORDERS_SQL_PAYMENT_INSERT_ROW,
                              "", o.p, 2, NULL, err);
    }
    if (rc == 0)
        rc = order_saga__batch_emit(tx, ctx, n, rcs, &o, "PaymentCharged", "payment-charged", false,
                                    true, err);
    order_saga__batch_free(&o);
    return rc;
}

static bool refund_fails(const struct order_faults *f)
{
    return f->fail_refund;
}

int order_saga__refund_payment(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                               int *rcs, struct txo_error *errs, struct txo_error *err)
{
    static const struct order_saga_undo refund = {.sql = ORDERS_SQL_PAYMENT_REFUND_MANY,
                                                  .event_type = "PaymentRefunded",
                                                  .suffix = "payment-refunded",
                                                  .with_amount = true,
                                                  .fault_says = "refund failed",
                                                  .fault = refund_fails};
    return order_saga__undo(tx, ctx, n, &refund, rcs, errs, err);
}
