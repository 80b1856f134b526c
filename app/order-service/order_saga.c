/*
 * The CreateOrderSaga: ReserveStock -> ChargePayment -> CreateShipment, each
 * with its compensation (ReleaseStock, RefundPayment, CancelShipment).
 *
 * The saga engine (txo/saga.h) opens one transaction per step and commits the step's state
 * change in it; the local parts here only write business rows and the step's outbox event
 * into that transaction. ChargePayment and CreateShipment (and their compensations) also have
 * a remote part, the call to the payment or shipment service, which the engine makes with no
 * transaction open and records as done, refused or unknown; a charge or shipment that may
 * have happened is undone even when its local part never committed (the undo calls are
 * idempotent at the services, so undoing a call that never took effect is harmless).
 * Because a worker can die after a step ran but before the engine saw it finish, every part
 * is written to be run again safely:
 *   ReserveStock    a reservation row per (saga_id, sku) says "already reserved": skip it;
 *   ReleaseStock    only RESERVED rows are released, then marked RELEASED;
 *   ChargePayment   one payment per order (unique key), inserted with ON DUPLICATE KEY;
 *   RefundPayment   only a CHARGED payment becomes REFUNDED;
 *   CreateShipment  one shipment per order; the order moves only from CREATED;
 *   CancelShipment  only a CREATED shipment becomes CANCELLED;
 * and every event has a fixed idempotency key ("saga:<id>:stock-reserved", ...) appended with
 * TXO_OUTBOX_IGNORE_DUPLICATE, so a re-run never emits it twice.
 *
 * Lock order: every transaction that touches several inventory rows locks them in ascending
 * SKU order (decode sorts and merges the items once), so concurrent reservations serialise on
 * the first common SKU instead of deadlocking. A deadlock that still happens (with
 * other writers) is retried whole by txo_db_transact().
 *
 * Errors: business refusals (no stock, card declined, injected faults) are TXO_EBUSINESS and
 * make the engine compensate; the injected "payment service unavailable" is TXO_EUNAVAILABLE,
 * which the engine retries with backoff. A service call that timed out is TXO_EUNKNOWN
 * (order_services.h).
 *
 * Thread-safety: the definition is immutable; a decoded state belongs to one run; the
 * struct order_saga_env given as `user` belongs to one run (one thread).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "txo/alloc.h"
#include "txo/log.h"
#include "txo/outbox.h"
#include "order_services.h"
#include "orders.h"
#include "orders_sql.h"

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

static const struct order_faults no_faults;

void order_saga_env_init(struct order_saga_env *env, const struct order_faults *faults)
{
    env->faults = faults;
    env->charge_calls = 0;
    env->session = NULL;
}

static const struct order_faults *faults_of(const struct txo_saga_ctx *ctx)
{
    const struct order_saga_env *env = ctx->user;

    return env != NULL && env->faults != NULL ? env->faults : &no_faults;
}

/* ---- payload ---- */

static void free_state(void *p)
{
    struct order_saga_state *st = p;

    if (st == NULL)
        return;
    txo_free(st->items);
    txo_free(st->sku_buf);
    txo_free(st->stock);
    txo_free(st);
}

static int cmp_stock(const void *a, const void *b)
{
    return strcmp(((const struct stock_line *)a)->sku, ((const struct stock_line *)b)->sku);
}

/* Reads an integer member of obj within [min, max]. */
static int get_int(json_t *obj, const char *field, const char *where, int64_t min, int64_t max,
                   int64_t *out, struct txo_error *err)
{
    json_t *v = json_object_get(obj, field);

    if (!json_is_integer(v))
        return txo_error_set(err, TXO_EINVAL, "saga payload: %s%s must be an integer", where,
                             field);
    json_int_t x = json_integer_value(v);
    if (x < min || x > max)
        return txo_error_set(err, TXO_EINVAL,
                             "saga payload: %s%s must be %" PRId64 "..%" PRId64 ", got %lld", where,
                             field, min, max, (long long)x);
    *out = (int64_t)x;
    return 0;
}

static int decode(const char *payload, size_t len, void **state, struct txo_error *err)
{
    json_error_t jerr;
    json_t *doc = json_loadb(payload, len, 0, &jerr);
    struct order_saga_state *st = NULL;
    int rc;

    if (doc == NULL || !json_is_object(doc)) {
        rc = txo_error_set(err, TXO_EINVAL, "saga payload is not a JSON object: %s",
                           doc == NULL ? jerr.text : "wrong type");
        goto out;
    }
    st = txo_calloc(1, sizeof(*st));
    if (st == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "cannot allocate the saga state");
        goto out;
    }
    rc = get_int(doc, "order_id", "", 1, INT64_MAX, &st->order_id, err);
    if (rc == 0)
        rc = get_int(doc, "customer_id", "", 1, INT64_MAX, &st->customer_id, err);
    if (rc == 0)
        rc = get_int(doc, "total_cents", "", 0, INT64_MAX, &st->total_cents, err);
    if (rc < 0)
        goto out;

    json_t *items = json_object_get(doc, "items");
    size_t n = json_array_size(items);
    if (!json_is_array(items) || n == 0 || n > ORDER_MAX_ITEMS) {
        rc = txo_error_set(err, TXO_EINVAL, "saga payload: items must be an array of 1..%d",
                           ORDER_MAX_ITEMS);
        goto out;
    }
    st->items = txo_calloc(n, sizeof(*st->items));
    st->sku_buf = txo_calloc(n, sizeof(*st->sku_buf));
    st->stock = txo_calloc(n, sizeof(*st->stock));
    if (st->items == NULL || st->sku_buf == NULL || st->stock == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "cannot allocate %zu saga payload items", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *it = json_array_get(items, i);
        char where[32];
        int64_t qty = 0;
        int64_t price = 0;

        snprintf(where, sizeof(where), "items[%zu].", i);
        const char *sku = json_string_value(json_object_get(it, "sku"));
        size_t sku_len = sku != NULL ? json_string_length(json_object_get(it, "sku")) : 0;
        if (sku_len == 0 || sku_len > ORDER_SKU_MAX || strlen(sku) != sku_len) {
            rc = txo_error_set(err, TXO_EINVAL, "saga payload: %ssku must be 1..%d bytes", where,
                               ORDER_SKU_MAX);
            goto out;
        }
        rc = get_int(it, "qty", where, 1, ORDER_MAX_QTY, &qty, err);
        if (rc == 0)
            rc = get_int(it, "price_cents", where, 0, ORDER_MAX_PRICE_CENTS, &price, err);
        if (rc < 0)
            goto out;
        memcpy(st->sku_buf[i], sku, sku_len + 1);
        st->items[i].sku = st->sku_buf[i];
        st->items[i].qty = (int32_t)qty;
        st->items[i].price_cents = price;
        memcpy(st->stock[i].sku, sku, sku_len + 1);
        st->stock[i].qty = (int32_t)qty;
    }
    st->n_items = n;

    /* Sort by SKU (the lock order) and merge duplicates: a reservation is per (saga, sku).
     * At most 100 * 10^6 units per SKU, so the sum fits in int32. */
    qsort(st->stock, n, sizeof(*st->stock), cmp_stock);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m > 0 && strcmp(st->stock[m - 1].sku, st->stock[i].sku) == 0)
            st->stock[m - 1].qty += st->stock[i].qty;
        else
            st->stock[m++] = st->stock[i];
    }
    st->n_stock = m;

    *state = st;
    st = NULL;
    rc = 0;
out:
    free_state(st);
    json_decref(doc);
    return rc;
}

static const struct order_saga_state *state_of(const struct txo_saga_ctx *ctx,
                                               struct txo_error *err)
{
    if (ctx->state == NULL)
        txo_error_set(err, TXO_EINVAL, "saga_id=%s has no decoded payload", ctx->saga_id);
    return ctx->state;
}

/* ---- events ---- */

/*
 * Appends event `type` with key "saga:<id>:<suffix>" and the payload built from the other
 * arguments (see orders__json_saga_event), ignoring a duplicate key (a re-run).
 */
static int emit(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                const struct order_saga_state *st, const char *type, const char *suffix,
                bool with_items, int64_t amount_cents, const char *reason, struct txo_error *err)
{
    char *payload =
        orders__json_saga_event(ctx->saga_id, st->order_id, with_items ? st->items : NULL,
                                st->n_items, amount_cents, reason, err);
    char key[128];

    if (payload == NULL)
        return err != NULL ? err->code : TXO_ENOMEM;
    snprintf(key, sizeof(key), "saga:%s:%s", ctx->saga_id, suffix);
    char aggregate_id[24];
    snprintf(aggregate_id, sizeof(aggregate_id), "%" PRId64, st->order_id);
    struct txo_outbox_event ev = {
        .aggregate_type = "order",
        .aggregate_id = aggregate_id,
        .event_type = type,
        .payload_json = payload,
        .payload_len = 0,
        .idempotency_key = key,
    };
    int rc = txo_outbox_append(tx, &ev, TXO_OUTBOX_IGNORE_DUPLICATE, NULL, NULL, err);
    txo_free(payload);
    return rc;
}

/* Reads the single string column of a one-row query into buf ("" when there is no row). */
static int query_str(struct txo_tx *tx, const char *sql, const struct txo_param *p, size_t np,
                     char *buf, size_t cap, bool *found, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    int rc = txo_tx_query(tx, sql, p, np, &rows, err);

    if (rc < 0)
        return rc;
    *found = txo_rows_count(rows) > 0;
    const char *s = *found ? txo_rows_str(rows, 0, 0, NULL) : NULL;
    snprintf(buf, cap, "%s", s != NULL ? s : "");
    txo_rows_free(rows);
    return 0;
}

/* ---- ReserveStock / ReleaseStock ---- */

/*
 * RESERVE for one SKU found nothing to change (not enough stock, no such SKU, or the SKU was
 * reserved by an earlier run of this step that was not recorded): 0 when this saga holds a
 * RESERVED reservation of it already (nothing to do), else TXO_EBUSINESS explaining why.
 */
static int reserve_refused(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                           const struct order_saga_state *st, const struct stock_line *line,
                           struct txo_error *err)
{
    char status[32];
    bool found;
    struct txo_param rp[] = {txo_p_str(ctx->saga_id), txo_p_str(line->sku)};
    int rc = query_str(tx, ORDERS_SQL_RESERVATION_LOCK, rp, 2, status, sizeof(status), &found, err);

    if (rc < 0)
        return rc;
    if (found && strcmp(status, "RESERVED") == 0)
        return 0; /* a re-run: this SKU is reserved already */
    if (found)
        return txo_error_set(err, TXO_EBUSINESS,
                             "stock reservation already released: saga_id=%s sku=%s", ctx->saga_id,
                             line->sku);

    struct txo_rows *rows = NULL;
    struct txo_param ip[] = {txo_p_str(line->sku)};
    rc = txo_tx_query(tx, ORDERS_SQL_INVENTORY_AVAILABLE, ip, 1, &rows, err);
    if (rc < 0)
        return rc;
    bool known = txo_rows_count(rows) > 0;
    int64_t available = known ? txo_rows_i64(rows, 0, 0) : 0;
    txo_rows_free(rows);
    return txo_error_set(err, TXO_EBUSINESS,
                         "not enough stock for sku=%s available=%" PRId64 " required=%" PRId32
                         "%s (saga_id=%s order_id=%" PRId64 ")",
                         line->sku, available, line->qty, known ? "" : " (not in inventory)",
                         ctx->saga_id, st->order_id);
}

/*
 * Per SKU, in ascending order (the lock order): reserve with one guarded UPDATE, then record
 * the reservation. Only when something is unusual (the UPDATE changed nothing, or the
 * reservation row exists: a re-run) does it look further, so a first run costs two statements
 * per SKU plus the event.
 */
static int reserve_stock(struct txo_tx *tx, const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    const struct order_saga_state *st = state_of(ctx, err);

    if (st == NULL)
        return TXO_EINVAL;
    for (size_t i = 0; i < st->n_stock; i++) {
        const struct stock_line *line = &st->stock[i];
        struct txo_param up[] = {txo_p_i64(line->qty), txo_p_i64(line->qty), txo_p_str(line->sku),
                                 txo_p_i64(line->qty)};
        struct txo_exec_result res;

        int rc = txo_tx_exec(tx, ORDERS_SQL_INVENTORY_RESERVE, up, TXO_ARRAY_LEN(up), &res, err);
        if (rc < 0)
            return rc;
        if (res.affected_rows != 1) {
            rc = reserve_refused(tx, ctx, st, line, err);
            if (rc < 0)
                return rc;
            continue; /* reserved by an earlier run */
        }

        struct txo_param np[] = {txo_p_str(ctx->saga_id), txo_p_str(line->sku),
                                 txo_p_i64(line->qty)};
        rc = txo_tx_exec(tx, ORDERS_SQL_RESERVATION_INSERT, np, TXO_ARRAY_LEN(np), NULL, err);
        if (rc != TXO_EDUPLICATE) {
            if (rc < 0)
                return rc;
            continue;
        }
        /* The reservation existed: an earlier run reserved (or released) this SKU. Give back
         * what RESERVE just took, then settle it as a refused RESERVE. */
        txo_error_init(err);
        rc = txo_tx_exec(tx, ORDERS_SQL_INVENTORY_RELEASE, up, TXO_ARRAY_LEN(up), &res, err);
        if (rc < 0)
            return rc;
        if (res.affected_rows != 1)
            return txo_error_set(err, TXO_EDB, "cannot undo a repeated reservation: sku=%s",
                                 line->sku);
        rc = reserve_refused(tx, ctx, st, line, err);
        if (rc < 0)
            return rc;
    }
    return emit(tx, ctx, st, "StockReserved", "stock-reserved", true, -1, NULL, err);
}

static int release_stock(struct txo_tx *tx, const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    const struct order_saga_state *st = state_of(ctx, err);
    struct txo_rows *rows = NULL;
    int rc;

    if (st == NULL)
        return TXO_EINVAL;
    if (faults_of(ctx)->fail_release)
        return txo_error_set(err, TXO_EBUSINESS, "release failed (injected): saga_id=%s",
                             ctx->saga_id);

    struct txo_param sp[] = {txo_p_str(ctx->saga_id)};
    rc = txo_tx_query(tx, ORDERS_SQL_RESERVATIONS_LOCK, sp, 1, &rows, err);
    if (rc < 0)
        goto out;
    for (size_t r = 0; r < txo_rows_count(rows); r++) {
        const char *sku = txo_rows_str(rows, r, RESERVATIONS_COL_SKU, NULL);
        int64_t qty = txo_rows_i64(rows, r, RESERVATIONS_COL_QTY);
        const char *status = txo_rows_str(rows, r, RESERVATIONS_COL_STATUS, NULL);

        if (sku == NULL || status == NULL || strcmp(status, "RESERVED") != 0)
            continue; /* released by an earlier run */
        struct txo_param up[] = {txo_p_i64(qty), txo_p_i64(qty), txo_p_str(sku), txo_p_i64(qty)};
        struct txo_exec_result res;
        rc = txo_tx_exec(tx, ORDERS_SQL_INVENTORY_RELEASE, up, TXO_ARRAY_LEN(up), &res, err);
        if (rc < 0)
            goto out;
        if (res.affected_rows != 1) {
            rc = txo_error_set(err, TXO_EBUSINESS,
                               "cannot release stock reservation: saga_id=%s sku=%s qty=%" PRId64
                               " (inventory row missing or reserved < qty)",
                               ctx->saga_id, sku, qty);
            goto out;
        }
        struct txo_param mp[] = {txo_p_str(ctx->saga_id), txo_p_str(sku)};
        rc = txo_tx_exec(tx, ORDERS_SQL_RESERVATION_RELEASE, mp, TXO_ARRAY_LEN(mp), NULL, err);
        if (rc < 0)
            goto out;
    }
    rc = emit(tx, ctx, st, "StockReleased", "stock-released", true, -1, NULL, err);
out:
    txo_rows_free(rows);
    return rc;
}

/* ---- ChargePayment / RefundPayment ---- */

/*
 * The remote part of a step: POSTs {"order_id"[,"amount_cents"]} to the service with the
 * engine's idempotency key (the same on every try and in every worker, so the service applies
 * the call once). Returns order_service_call()'s result: 0, TXO_EBUSINESS (refused),
 * TXO_EUNKNOWN (may have taken effect) or another transient code (did not).
 */
static int call_service(const struct txo_saga_ctx *ctx, enum order_service_kind kind,
                        const char *operation, const char *path, int64_t amount_cents,
                        struct txo_error *err)
{
    const struct order_saga_state *st = state_of(ctx, err);
    struct order_saga_env *env = ctx->user;
    if (st == NULL)
        return TXO_EINVAL;
    if (env == NULL || env->session == NULL)
        return txo_error_set(err, TXO_ECONFIG, "%s: no external service session", operation);
    if (!order_services_remote(order_service_session_services(env->session), kind))
        return 0; /* this service is the in-process stand-in: nothing to call */
    char body[128];
    if (amount_cents >= 0)
        snprintf(body, sizeof(body), "{\"order_id\":%" PRId64 ",\"amount_cents\":%" PRId64 "}",
                 st->order_id, amount_cents);
    else
        snprintf(body, sizeof(body), "{\"order_id\":%" PRId64 "}", st->order_id);
    return order_service_call(env->session, kind, operation, path, ctx->idempotency_key, body, err);
}

/*
 * The guard of ChargePayment and CreateShipment, in the engine's transaction before the call:
 * an order the customer cancelled is not charged or shipped (TXO_EBUSINESS: the saga undoes
 * what it did). A cancel that commits after this read is caught by the step's local part.
 */
static int order_still_open(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                            struct txo_error *err)
{
    const struct order_saga_state *st = state_of(ctx, err);
    if (st == NULL)
        return TXO_EINVAL;
    char status[32];
    bool found;
    struct txo_param p[] = {txo_p_i64(st->order_id)};
    int rc = query_str(tx, ORDERS_SQL_ORDER_STATUS, p, 1, status, sizeof(status), &found, err);
    if (rc < 0)
        return rc;
    if (!found || strcmp(status, order_status_name(ORDER_CREATED)) != 0)
        return txo_error_set(err, TXO_EBUSINESS,
                             "order is no longer open: order_id=%" PRId64 " status=%s (%s not "
                             "called)",
                             st->order_id, found ? status : "missing", ctx->step_name);
    return 0;
}

static int remote_charge(const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    const struct order_saga_state *st = state_of(ctx, err);
    if (st == NULL)
        return TXO_EINVAL;
    return call_service(ctx, ORDER_SERVICE_PAYMENT, "charge", "/payments/charge", st->total_cents,
                        err);
}

static int remote_refund(const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    return call_service(ctx, ORDER_SERVICE_PAYMENT, "refund", "/payments/refund", -1, err);
}

static int remote_create_shipment(const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    return call_service(ctx, ORDER_SERVICE_SHIPMENT, "create", "/shipments/create", -1, err);
}

static int remote_cancel_shipment(const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    return call_service(ctx, ORDER_SERVICE_SHIPMENT, "cancel", "/shipments/cancel", -1, err);
}

static int charge_payment(struct txo_tx *tx, const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    const struct order_saga_state *st = state_of(ctx, err);
    const struct order_faults *faults = faults_of(ctx);
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
        /* A payment existed (a re-run): only a CHARGED one lets the step succeed. */
        char status[32];
        bool found;
        struct txo_param lp[] = {txo_p_i64(st->order_id)};
        rc = query_str(tx, ORDERS_SQL_PAYMENT_LOCK, lp, 1, status, sizeof(status), &found, err);
        if (rc < 0)
            return rc;
        if (!found || strcmp(status, "CHARGED") != 0)
            return txo_error_set(err, TXO_EBUSINESS,
                                 "payment is not chargeable: order_id=%" PRId64 " status=%s",
                                 st->order_id, found ? status : "none");
    }
    return emit(tx, ctx, st, "PaymentCharged", "payment-charged", false, st->total_cents, NULL,
                err);
}

static int refund_payment(struct txo_tx *tx, const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    const struct order_saga_state *st = state_of(ctx, err);

    if (st == NULL)
        return TXO_EINVAL;
    if (faults_of(ctx)->fail_refund)
        return txo_error_set(err, TXO_EBUSINESS, "refund failed (injected): order_id=%" PRId64,
                             st->order_id);
    struct txo_param p[] = {txo_p_i64(st->order_id)};
    int rc = txo_tx_exec(tx, ORDERS_SQL_PAYMENT_REFUND, p, 1, NULL, err);
    if (rc < 0)
        return rc;
    return emit(tx, ctx, st, "PaymentRefunded", "payment-refunded", false, st->total_cents, NULL,
                err);
}

/* ---- CreateShipment / CancelShipment ---- */

static int create_shipment(struct txo_tx *tx, const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    const struct order_saga_state *st = state_of(ctx, err);

    if (st == NULL)
        return TXO_EINVAL;
    if (faults_of(ctx)->fail_shipment)
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
        /* A shipment existed (a re-run): only a CREATED one lets the step succeed. */
        rc = query_str(tx, ORDERS_SQL_SHIPMENT_LOCK, p, 1, status, sizeof(status), &found, err);
        if (rc < 0)
            return rc;
        if (!found || strcmp(status, "CREATED") != 0)
            return txo_error_set(err, TXO_EBUSINESS,
                                 "shipment is not creatable: order_id=%" PRId64 " status=%s",
                                 st->order_id, found ? status : "none");
    }

    rc = txo_tx_exec(tx, ORDERS_SQL_ORDER_CONFIRM, p, 1, &res, err);
    if (rc < 0)
        return rc;
    if (res.affected_rows == 0) {
        rc = query_str(tx, ORDERS_SQL_ORDER_STATUS_LOCK, p, 1, status, sizeof(status), &found, err);
        if (rc < 0)
            return rc;
        if (!found || strcmp(status, order_status_name(ORDER_CONFIRMED)) != 0)
            return txo_error_set(err, TXO_EBUSINESS,
                                 "order cannot be confirmed: order_id=%" PRId64 " status=%s",
                                 st->order_id, found ? status : "missing");
    }
    return emit(tx, ctx, st, "ShipmentCreated", "shipment-created", false, -1, NULL, err);
}

static int cancel_shipment(struct txo_tx *tx, const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    const struct order_saga_state *st = state_of(ctx, err);

    if (st == NULL)
        return TXO_EINVAL;
    if (faults_of(ctx)->fail_cancel_shipment)
        return txo_error_set(err, TXO_EBUSINESS, "cancel failed (injected): order_id=%" PRId64,
                             st->order_id);
    struct txo_param p[] = {txo_p_i64(st->order_id)};
    int rc = txo_tx_exec(tx, ORDERS_SQL_SHIPMENT_CANCEL, p, 1, NULL, err);
    if (rc < 0)
        return rc;
    return emit(tx, ctx, st, "ShipmentCancelled", "shipment-cancelled", false, -1, NULL, err);
}

/* ---- the saga's end ---- */

/*
 * FAILED or COMPENSATED: the order is cancelled, with OrderCancelled, in the engine's final
 * transaction. The reason names the step that failed, from the facts the engine hands over
 * (ctx->failed_*): its stored message, or its error code.
 */
static int on_aborted(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                      enum txo_saga_status final_status, struct txo_error *err)
{
    const struct order_saga_state *st = state_of(ctx, err);
    char reason[TXO_ERROR_MSG_MAX + 160];
    int rc;

    if (st == NULL)
        return TXO_EINVAL;
    if (ctx->failed_step >= 0)
        snprintf(reason, sizeof(reason), "%s failed: %s%s", ctx->failed_step_name,
                 ctx->failed_message != NULL ? ctx->failed_message : txo_err_name(ctx->failed_code),
                 ctx->failed_remote_maybe ? " (its remote call was undone)" : "");
    else
        snprintf(reason, sizeof(reason), "saga %s", txo_saga_status_name(final_status));

    struct txo_param p[] = {txo_p_i64(st->order_id)};
    struct txo_exec_result res;
    rc = txo_tx_exec(tx, ORDERS_SQL_ORDER_CANCEL, p, 1, &res, err);
    if (rc < 0)
        return rc;
    if (res.affected_rows == 0) {
        char status[32];
        bool found;
        rc = query_str(tx, ORDERS_SQL_ORDER_STATUS_LOCK, p, 1, status, sizeof(status), &found, err);
        if (rc < 0)
            return rc;
        if (!found || strcmp(status, order_status_name(ORDER_CANCELLED)) != 0) {
            /* Cannot happen with this step list (the last step confirms the order and
             * completes the saga); a human must look at it. The saga still ends. */
            TXO_LOG(TXO_LOG_ERROR, "orders",
                    "aborted saga cannot cancel its order saga_id=%s order_id=%" PRId64
                    " status=%s",
                    ctx->saga_id, st->order_id, found ? status : "missing");
        }
        /* CANCELLED already: the customer cancelled it (orders_cancel_tx), and that change
         * wrote its own OrderCancelled. This hook runs once (it commits with the saga's final
         * status), so nothing else can have cancelled it: no second event. */
        return 0;
    }
    return emit(tx, ctx, st, "OrderCancelled", "order-cancelled", false, -1, reason, err);
}

/* With the payment and shipment services in-process (no URL configured): local steps. */
static const struct txo_saga_step_def local_steps[] = {
    {.name = "ReserveStock", .action = reserve_stock, .compensate = release_stock},
    {.name = "ChargePayment", .action = charge_payment, .compensate = refund_payment},
    {.name = "CreateShipment", .action = create_shipment, .compensate = cancel_shipment},
};

/* With the services called over HTTP: the same steps with their remote parts. */
static const struct txo_saga_step_def remote_steps[] = {
    {.name = "ReserveStock", .action = reserve_stock, .compensate = release_stock},
    {.name = "ChargePayment",
     .action = charge_payment,
     .compensate = refund_payment,
     .remote = remote_charge,
     .remote_compensate = remote_refund,
     .guard = order_still_open},
    {.name = "CreateShipment",
     .action = create_shipment,
     .compensate = cancel_shipment,
     .remote = remote_create_shipment,
     .remote_compensate = remote_cancel_shipment,
     .guard = order_still_open},
};

static const struct txo_saga_def order_def = {
    .type = ORDER_SAGA_TYPE,
    .steps = local_steps,
    .n_steps = TXO_ARRAY_LEN(local_steps),
    .decode = decode,
    .free_state = free_state,
    .on_completed = NULL, /* CreateShipment confirms the order in its own step */
    .on_aborted = on_aborted,
};

static const struct txo_saga_def order_def_remote = {
    .type = ORDER_SAGA_TYPE,
    .steps = remote_steps,
    .n_steps = TXO_ARRAY_LEN(remote_steps),
    .decode = decode,
    .free_state = free_state,
    .on_completed = NULL,
    .on_aborted = on_aborted,
};

const struct txo_saga_def *order_saga_def(void)
{
    return &order_def;
}

const struct txo_saga_def *order_saga_def_for(const struct order_services *services)
{
    bool remote = order_services_remote(services, ORDER_SERVICE_PAYMENT) ||
                  order_services_remote(services, ORDER_SERVICE_SHIPMENT);
    return remote ? &order_def_remote : &order_def;
}

int orders_run_saga(struct txo_db *db, const char *saga_id, const struct order_faults *faults,
                    const struct txo_saga_opts *opts, enum txo_saga_status *final,
                    struct txo_error *err)
{
    struct order_saga_env env;

    struct txo_saga_opts defaults;

    if (opts == NULL) {
        txo_saga_opts_init(&defaults);
        opts = &defaults;
    }
    order_saga_env_init(&env, faults);
    return txo_saga_run(db, &order_def, saga_id, opts, &env, final, err);
}

int orders_retry_saga(struct txo_db *db, const char *saga_id, const struct order_faults *faults,
                      const struct txo_saga_opts *opts, enum txo_saga_status *final,
                      struct txo_error *err)
{
    return orders_retry_saga_with(db, saga_id, NULL, faults, opts, final, err);
}

int orders_retry_saga_with(struct txo_db *db, const char *saga_id,
                           const struct order_services *services, const struct order_faults *faults,
                           const struct txo_saga_opts *opts, enum txo_saga_status *final,
                           struct txo_error *err)
{
    struct order_saga_env env;
    struct txo_saga_opts defaults;

    if (opts == NULL) {
        txo_saga_opts_init(&defaults);
        opts = &defaults;
    }
    order_saga_env_init(&env, faults);
    if (services != NULL) {
        int rc = order_service_session_new(services, &env.session, err);
        if (rc < 0)
            return rc;
    }
    int rc = txo_saga_retry(db, order_saga_def_for(services), saga_id, opts, &env, final, err);
    order_service_session_free(env.session);
    return rc;
}
