/*
 * The ChargePayment step of the CreateOrderSaga and its compensation RefundPayment: the
 * per-saga action and undo, the batch form of the action, and the remote parts (the calls to
 * the payment service, order_saga.c). A re-run is judged by payment_found(), on both paths.
 *
 * Thread-safety: as order_saga.c; every function uses only its transaction and its context.
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
static enum step_found payment_found(const char *status)
{
    if (status == NULL)
        return STEP_FRESH;
    return strcmp(status, "CHARGED") == 0 ? STEP_REDONE : STEP_REFUSED;
}

int order_saga__remote_charge(const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    const struct order_saga_state *st = order_saga__state(ctx, err);
    if (st == NULL)
        return TXO_EINVAL;
    return order_saga__call_service(ctx, ORDER_SERVICE_PAYMENT, "charge", "/payments/charge",
                                    BODY_CHARGE, err);
}

int order_saga__remote_refund(const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    return order_saga__call_service(ctx, ORDER_SERVICE_PAYMENT, "refund", "/payments/refund",
                                    BODY_ORDER, err);
}

int order_saga__charge_payment(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                               struct txo_error *err)
{
    const struct order_saga_state *st = order_saga__state(ctx, err);
    const struct order_faults *faults = order_saga__faults(ctx);
    struct order_saga_env *env = ctx->user;

    if (st == NULL)
        return TXO_EINVAL;
    if (env != NULL) {
        env->charge_calls++;
        if (env->charge_calls <= faults->transient_charge_failures)
            return txo_error_set(err, TXO_EUNAVAILABLE,
                                 "payment service unavailable (injected, call %u of %u): "
                                 "order_id=%" PRId64,
                                 env->charge_calls, faults->transient_charge_failures,
                                 st->order_id);
    }
    if (faults->decline_payment)
        return txo_error_set(err, TXO_EBUSINESS,
                             "card declined: order_id=%" PRId64 " amount_cents=%" PRId64,
                             st->order_id, st->total_cents);
    struct txo_param ip[] = {txo_p_i64(st->order_id), txo_p_i64(st->total_cents)};
    struct txo_exec_result res;
    int rc = txo_tx_exec(tx, ORDERS_SQL_PAYMENT_INSERT, ip, TXO_ARRAY_LEN(ip), &res, err);
    if (rc < 0)
        return rc;
    if (res.affected_rows != 1) {
        /* A payment existed (a re-run): payment_found() says whether the step succeeds. */
        char status[32];
        bool found;
        struct txo_param lp[] = {txo_p_i64(st->order_id)};
        rc = order_saga__query_str(tx, ORDERS_SQL_PAYMENT_LOCK, lp, 1, status, sizeof(status),
                                   &found, err);
        if (rc < 0)
            return rc;
        if (payment_found(found ? status : NULL) != STEP_REDONE)
            return txo_error_set(err, TXO_EBUSINESS,
                                 "payment is not chargeable: order_id=%" PRId64 " status=%s",
                                 st->order_id, found ? status : "none");
    }
    return order_saga__emit(tx, ctx, st, "PaymentCharged", "payment-charged", false,
                            st->total_cents, NULL, err);
}

int order_saga__refund_payment(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                               struct txo_error *err)
{
    const struct order_saga_state *st = order_saga__state(ctx, err);

    if (st == NULL)
        return TXO_EINVAL;
    if (order_saga__faults(ctx)->fail_refund)
        return txo_error_set(err, TXO_EBUSINESS, "refund failed (injected): order_id=%" PRId64,
                             st->order_id);
    struct txo_param p[] = {txo_p_i64(st->order_id)};
    int rc = txo_tx_exec(tx, ORDERS_SQL_PAYMENT_REFUND, p, 1, NULL, err);
    if (rc < 0)
        return rc;
    return order_saga__emit(tx, ctx, st, "PaymentRefunded", "payment-refunded", false,
                            st->total_cents, NULL, err);
}

/* ChargePayment (in-process payments) for many sagas: one multi-row INSERT of the payments
 * and one of the PaymentCharged events. */
int order_saga__charge_payment_batch(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx,
                                     size_t n, int *outcome, struct txo_error *err)
{
    struct order_saga_batch o;
    int rc = order_saga__batch_orders_new(ctx, n, outcome, &o, err);
    if (rc == 0)
        rc = order_saga__batch_judge_orders(tx, ORDERS_SQL_PAYMENTS_MANY, "", n, outcome, &o,
                                            payment_found, err);
    size_t m = rc == 0 ? order_saga__batch_count_done(outcome, n) : 0;
    if (m > 0) {
        size_t np = 0;
        for (size_t k = 0; k < n; k++) {
            const struct order_saga_state *st = ctx[k]->state;
            if (outcome[k] != 0)
                continue;
            o.p[np++] = txo_p_i64(st->order_id);
            o.p[np++] = txo_p_i64(st->total_cents);
        }
        rc = order_saga__batch_insert(tx, ORDERS_SQL_PAYMENT_INSERT_MANY,
                                      ORDERS_SQL_PAYMENT_INSERT_ROW, m, o.p, 2, NULL, err);
        if (rc == 0)
            rc = order_saga__batch_emit(tx, ctx, n, outcome, "PaymentCharged", "payment-charged",
                                        false, true, err);
    }
    order_saga__batch_orders_free(&o);
    return rc;
}

void order_saga__remote_charge_batch(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                                     struct txo_error *errs)
{
    order_saga__call_service_batch(ctx, n, ORDER_SERVICE_PAYMENT, "charge", "/payments/charge",
                                   BODY_CHARGE, rcs, errs);
}
