/*
 * The CreateShipment step of the CreateOrderSaga (which also confirms the order) and its
 * compensation CancelShipment, each for n sagas (order_saga_steps.h), and their remote parts:
 * the calls to the shipment service (order_saga.c). A re-run is judged by shipment_rule and
 * order_saga__order_rule.
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

/* CreateShipment: only a CREATED shipment lets a re-run succeed (a CANCELLED one does not). */
static const struct step_rule shipment_rule = {.fresh = NULL, .redone = "CREATED"};

void order_saga__remote_create_shipment(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                                        struct txo_error *errs)
{
    order_saga__call_service(ctx, n, ORDER_SERVICE_SHIPMENT, "create", "/shipments/create",
                             BODY_PARCEL, rcs, errs);
}

void order_saga__remote_cancel_shipment(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                                        struct txo_error *errs)
{
    order_saga__call_service(ctx, n, ORDER_SERVICE_SHIPMENT, "cancel", "/shipments/cancel",
                             BODY_ORDER, rcs, errs);
}

/* The orders of the sagas still done whose order is CREATED (order_was FRESH), as params. */
static size_t orders_to_confirm(const int *rcs, const enum step_found *order_was,
                                const struct order_saga_batch *o, size_t n, struct txo_param *p)
{
    size_t m = 0;
    for (size_t k = 0; k < n; k++)
        if (rcs[k] == 0 && order_was[k] == STEP_FRESH)
            p[m++] = o->p[k];
    return m;
}

int order_saga__create_shipment(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                                int *rcs, struct txo_error *errs, struct txo_error *err)
{
    struct order_saga_batch o;
    enum step_found *order_was = txo_calloc(n, sizeof(*order_was));
    int rc = order_saga__batch_new(ctx, n, true, rcs, errs, &o, err);
    if (rc == 0 && order_was == NULL)
        rc = txo_error_set(err, TXO_ENOMEM, "CreateShipment batch of %zu: out of memory", n);
    for (size_t k = 0; rc == 0 && k < n; k++)
        order_saga__fault(n, order_saga__faults(ctx[k])->fail_shipment, rcs, errs, k, TXO_EBUSINESS,
                          "carrier rejected shipment: order_id=%s", o.ids[k]);
    /* The orders first, locked: a customer's cancel waits for this step or is seen by it. */
    if (rc == 0)
        rc = order_saga__batch_judge(tx, ORDERS_SQL_ORDER_LOCK_MANY, ORDERS_SQL_ORDER_LOCK_MANY_END,
                                     n, rcs, &o, &order_saga__order_rule, err);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        order_was[k] = o.was[k];
        if (rcs[k] == 0 && o.was[k] == STEP_REFUSED)
            rcs[k] = txo_error_set(&errs[k], TXO_EBUSINESS,
                                   "order cannot be confirmed: order_id=%s status=%s", o.ids[k],
                                   o.status[k][0] != '\0' ? o.status[k] : "missing");
    }
    if (rc == 0)
        rc = order_saga__batch_judge(tx, ORDERS_SQL_SHIPMENTS_MANY, "", n, rcs, &o, &shipment_rule,
                                     err);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        if (rcs[k] == 0 && o.was[k] == STEP_REFUSED)
            rcs[k] = txo_error_set(&errs[k], TXO_EBUSINESS,
                                   "shipment is not creatable: order_id=%s status=%s", o.ids[k],
                                   o.status[k]);
        if (order_was[k] == STEP_REDONE)
            o.was[k] = STEP_REDONE; /* a confirmed order: its event may be there */
    }
    size_t m = rc == 0 ? order_saga__batch_fresh(rcs, &o, n) : 0;
    if (m > 0) {
        size_t np = 0;
        for (size_t k = 0; k < n; k++)
            if (rcs[k] == 0 && o.was[k] == STEP_FRESH)
                o.p[n + np++] = o.p[k];
        rc = txo_tx_exec_rows(tx, ORDERS_SQL_SHIPMENT_INSERT_MANY, m,
                              ORDERS_SQL_SHIPMENT_INSERT_ROW, "", o.p + n, 1, NULL, err);
    }
    size_t c = rc == 0 ? orders_to_confirm(rcs, order_was, &o, n, o.p + n) : 0;
    if (c > 0) {
        uint64_t confirmed = 0;
        rc = order_saga__batch_query(tx, ORDERS_SQL_ORDER_CONFIRM_MANY, "", o.p + n, c, NULL,
                                     &confirmed, err);
        if (rc == 0 && confirmed != c)
            rc = txo_error_set(err, TXO_EDB, "CreateShipment: %llu of %zu orders confirmed",
                               (unsigned long long)confirmed, c);
    }
    if (rc == 0)
        rc = order_saga__batch_emit(tx, ctx, n, rcs, &o, "ShipmentCreated", "shipment-created",
                                    false, false, err);
    order_saga__batch_free(&o);
    txo_free(order_was);
    return rc;
}

static bool cancel_fails(const struct order_faults *f)
{
    return f->fail_cancel_shipment;
}

int order_saga__cancel_shipment(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                                int *rcs, struct txo_error *errs, struct txo_error *err)
{
    static const struct order_saga_undo cancel = {.sql = ORDERS_SQL_SHIPMENT_CANCEL_MANY,
                                                  .event_type = "ShipmentCancelled",
                                                  .suffix = "shipment-cancelled",
                                                  .with_amount = false,
                                                  .fault_says = "cancel failed",
                                                  .fault = cancel_fails};
    return order_saga__undo(tx, ctx, n, &cancel, rcs, errs, err);
}
