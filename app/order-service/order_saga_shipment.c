/*
 * The CreateShipment step of the CreateOrderSaga and its compensation CancelShipment: the
 * per-saga action (which also confirms the order) and undo, the batch form of the action, and
 * the remote parts (the calls to the shipment service, order_saga.c). A re-run is judged by
 * shipment_found() and order_saga__order_found(), on both paths.
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

/* CreateShipment: only a CREATED shipment lets a re-run succeed (a CANCELLED one does not). */
static enum step_found shipment_found(const char *status)
{
    if (status == NULL)
        return STEP_FRESH;
    return strcmp(status, "CREATED") == 0 ? STEP_REDONE : STEP_REFUSED;
}

int order_saga__remote_create_shipment(const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    return order_saga__call_service(ctx, ORDER_SERVICE_SHIPMENT, "create", "/shipments/create",
                                    BODY_PARCEL, err);
}

int order_saga__remote_cancel_shipment(const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    return order_saga__call_service(ctx, ORDER_SERVICE_SHIPMENT, "cancel", "/shipments/cancel",
                                    BODY_ORDER, err);
}

int order_saga__create_shipment(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                                struct txo_error *err)
{
    const struct order_saga_state *st = order_saga__state(ctx, err);

    if (st == NULL)
        return TXO_EINVAL;
    if (order_saga__faults(ctx)->fail_shipment)
        return txo_error_set(err, TXO_EBUSINESS, "carrier rejected shipment: order_id=%" PRId64,
                             st->order_id);
    struct txo_param p[] = {txo_p_i64(st->order_id)};
    struct txo_exec_result res;
    char status[32];
    bool found;
    int rc = txo_tx_exec(tx, ORDERS_SQL_SHIPMENT_INSERT, p, 1, &res, err);
    if (rc < 0)
        return rc;
    if (res.affected_rows != 1) {
        /* A shipment existed (a re-run): shipment_found() says whether the step succeeds. */
        rc = order_saga__query_str(tx, ORDERS_SQL_SHIPMENT_LOCK, p, 1, status, sizeof(status),
                                   &found, err);
        if (rc < 0)
            return rc;
        if (shipment_found(found ? status : NULL) != STEP_REDONE)
            return txo_error_set(err, TXO_EBUSINESS,
                                 "shipment is not creatable: order_id=%" PRId64 " status=%s",
                                 st->order_id, found ? status : "none");
    }

    rc = txo_tx_exec(tx, ORDERS_SQL_ORDER_CONFIRM, p, 1, &res, err);
    if (rc < 0)
        return rc;
    if (res.affected_rows == 0) {
        rc = order_saga__query_str(tx, ORDERS_SQL_ORDER_STATUS_LOCK, p, 1, status, sizeof(status),
                                   &found, err);
        if (rc < 0)
            return rc;
        if (order_saga__order_found(found ? status : NULL) != STEP_REDONE)
            return txo_error_set(err, TXO_EBUSINESS,
                                 "order cannot be confirmed: order_id=%" PRId64 " status=%s",
                                 st->order_id, found ? status : "missing");
    }
    return order_saga__emit(tx, ctx, st, "ShipmentCreated", "shipment-created", false, -1, NULL,
                            err);
}

int order_saga__cancel_shipment(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                                struct txo_error *err)
{
    const struct order_saga_state *st = order_saga__state(ctx, err);

    if (st == NULL)
        return TXO_EINVAL;
    if (order_saga__faults(ctx)->fail_cancel_shipment)
        return txo_error_set(err, TXO_EBUSINESS, "cancel failed (injected): order_id=%" PRId64,
                             st->order_id);
    struct txo_param p[] = {txo_p_i64(st->order_id)};
    int rc = txo_tx_exec(tx, ORDERS_SQL_SHIPMENT_CANCEL, p, 1, NULL, err);
    if (rc < 0)
        return rc;
    return order_saga__emit(tx, ctx, st, "ShipmentCancelled", "shipment-cancelled", false, -1, NULL,
                            err);
}

/* CreateShipment (in-process shipments) for many sagas: lock the orders, one multi-row INSERT
 * of the shipments, one UPDATE confirming the orders, one multi-row INSERT of the events. */
int order_saga__create_shipment_batch(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx,
                                      size_t n, int *outcome, struct txo_error *err)
{
    struct order_saga_batch o;
    int rc = order_saga__batch_orders_new(ctx, n, outcome, &o, err);
    /* The orders are locked first, as the single step's ORDER_CONFIRM does after its insert. */
    if (rc == 0)
        rc = order_saga__batch_judge_orders(tx, ORDERS_SQL_ORDER_LOCK_MANY,
                                            ORDERS_SQL_ORDER_LOCK_MANY_END, n, outcome, &o,
                                            order_saga__order_found, err);
    if (rc == 0)
        rc = order_saga__batch_judge_orders(tx, ORDERS_SQL_SHIPMENTS_MANY, "", n, outcome, &o,
                                            shipment_found, err);
    size_t m = rc == 0 ? order_saga__batch_count_done(outcome, n) : 0;
    if (m > 0) {
        size_t np = 0;
        for (size_t k = 0; k < n; k++)
            if (outcome[k] == 0)
                o.p[np++] = txo_p_i64(((const struct order_saga_state *)ctx[k]->state)->order_id);
        rc = order_saga__batch_insert(tx, ORDERS_SQL_SHIPMENT_INSERT_MANY,
                                      ORDERS_SQL_SHIPMENT_INSERT_ROW, m, o.p, 1, NULL, err);
        struct txo_exec_result res = {0};
        if (rc == 0) {
            size_t padded = txo_sql_in_list_size(m);
            char *sql = txo_sql_in_list(ORDERS_SQL_ORDER_CONFIRM_MANY, padded, "");
            for (size_t k = m; k < padded; k++)
                o.p[k] = o.p[m - 1];
            rc = sql != NULL ? txo_tx_exec(tx, sql, o.p, padded, &res, err)
                             : txo_error_set(err, TXO_ENOMEM, "CreateShipment batch: no memory");
            txo_free(sql);
        }
        if (rc == 0 && res.affected_rows != m)
            rc = txo_error_set(err, TXO_EDB, "CreateShipment batch: %llu of %zu orders confirmed",
                               (unsigned long long)res.affected_rows, m);
        if (rc == 0)
            rc = order_saga__batch_emit(tx, ctx, n, outcome, "ShipmentCreated", "shipment-created",
                                        false, false, err);
    }
    order_saga__batch_orders_free(&o);
    return rc;
}

void order_saga__remote_create_shipment_batch(const struct txo_saga_ctx *const *ctx, size_t n,
                                              int *rcs, struct txo_error *errs)
{
    order_saga__call_service_batch(ctx, n, ORDER_SERVICE_SHIPMENT, "create", "/shipments/create",
                                   BODY_PARCEL, rcs, errs);
}
