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
#include "order_saga.h"
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

#define SERVICE_BODY_MAX 128

/* The body of a call: {"order_id"[,"amount_cents"]} (amount_cents < 0: none). */
static void service_body(const struct order_saga_state *st, int64_t amount_cents, char *out,
                         size_t cap)
{
    if (amount_cents >= 0)
        snprintf(out, cap, "{\"order_id\":%" PRId64 ",\"amount_cents\":%" PRId64 "}", st->order_id,
                 amount_cents);
    else
        snprintf(out, cap, "{\"order_id\":%" PRId64 "}", st->order_id);
}

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
    char body[SERVICE_BODY_MAX];
    service_body(st, amount_cents, body, sizeof(body));
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

/* ---- the batch forms of the local steps (txo_saga_step_batch_fn) ----
 *
 * Each covers the common first run of its step for many sagas with a few set-based
 * statements; a saga with anything unusual (a re-run that finds rows already there, not
 * enough stock, an injected fault, an order no longer CREATED) gets a non-zero outcome and
 * nothing written, and the engine runs it through the single-saga function above, which knows
 * every unusual case. So the batch forms stay short and the single path stays the reference.
 */

/* What a batch of n sagas' states look like; NULL states are refused one by one. */
static const struct order_saga_state *batch_state(const struct txo_saga_ctx *ctx, int *outcome)
{
    const struct order_saga_state *st = ctx->state;
    if (st == NULL)
        *outcome = TXO_EINVAL;
    return st;
}

/* True when the run's injected faults could touch this step: it then goes the single way. */
static bool batch_faulty(const struct txo_saga_ctx *ctx)
{
    const struct order_faults *f = faults_of(ctx);
    return f->decline_payment || f->fail_shipment || f->transient_charge_failures > 0;
}

/* Runs before + IN list of n params (padded by repeating the last) + after. */
static int batch_query(struct txo_tx *tx, const char *before, const char *after,
                       const struct txo_param *in, size_t n, struct txo_rows **rows,
                       struct txo_error *err)
{
    size_t padded = txo_sql_in_list_size(n);
    char *sql = txo_sql_in_list(before, padded, after);
    struct txo_param *p = txo_calloc(padded, sizeof(*p));
    int rc;
    if (sql == NULL || p == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "batch of %zu: out of memory", n);
    } else {
        for (size_t k = 0; k < padded; k++)
            p[k] = in[k < n ? k : n - 1];
        rc = rows != NULL ? txo_tx_query(tx, sql, p, padded, rows, err)
                          : txo_tx_exec(tx, sql, p, padded, NULL, err);
    }
    txo_free(sql);
    txo_free(p);
    return rc;
}

/* Runs before + n_rows x row (VALUES) with p (n_rows x per_row params); *affected may be NULL. */
static int batch_insert(struct txo_tx *tx, const char *before, const char *row, size_t n_rows,
                        const struct txo_param *p, size_t per_row, uint64_t *affected,
                        struct txo_error *err)
{
    char *sql = txo_sql_values_rows(before, n_rows, row);
    if (sql == NULL)
        return txo_error_set(err, TXO_ENOMEM, "batch insert of %zu rows: out of memory", n_rows);
    struct txo_exec_result res;
    int rc = txo_tx_exec(tx, sql, p, n_rows * per_row, &res, err);
    if (rc == 0 && affected != NULL)
        *affected = res.affected_rows;
    txo_free(sql);
    return rc;
}

/* One event per saga k with outcome[k] == 0, in one statement (see emit()). */
static int batch_emit(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                      const int *outcome, const char *type, const char *suffix, bool with_items,
                      bool with_amount, struct txo_error *err)
{
    struct txo_outbox_event *evs = txo_calloc(n, sizeof(*evs));
    char **payloads = txo_calloc(n, sizeof(*payloads));
    char(*keys)[128] = txo_calloc(n, sizeof(*keys));
    char(*aggs)[24] = txo_calloc(n, sizeof(*aggs));
    size_t m = 0;
    int rc = 0;
    if (evs == NULL || payloads == NULL || keys == NULL || aggs == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "batch of %zu %s events: out of memory", n, type);
        goto out;
    }
    for (size_t k = 0; k < n; k++) {
        if (outcome[k] != 0)
            continue;
        const struct order_saga_state *st = ctx[k]->state;
        payloads[m] =
            orders__json_saga_event(ctx[k]->saga_id, st->order_id, with_items ? st->items : NULL,
                                    st->n_items, with_amount ? st->total_cents : -1, NULL, err);
        if (payloads[m] == NULL) {
            rc = err != NULL && err->code != 0 ? err->code : TXO_ENOMEM;
            goto out;
        }
        snprintf(keys[m], sizeof(keys[m]), "saga:%s:%s", ctx[k]->saga_id, suffix);
        snprintf(aggs[m], sizeof(aggs[m]), "%" PRId64, st->order_id);
        evs[m] = (struct txo_outbox_event){.aggregate_type = "order",
                                           .aggregate_id = aggs[m],
                                           .event_type = type,
                                           .payload_json = payloads[m],
                                           .idempotency_key = keys[m]};
        m++;
    }
    rc = txo_outbox_append_many(tx, evs, m, err);
out:
    for (size_t k = 0; payloads != NULL && k < n; k++)
        txo_free(payloads[k]);
    txo_free(payloads);
    txo_free(evs);
    txo_free(keys);
    txo_free(aggs);
    return rc;
}

/* Marks outcome[k] = code for every saga whose id (ids[k], as text) is in column 0 of rows. */
static void batch_exclude(const struct txo_rows *rows, char (*ids)[40], size_t n, int *outcome,
                          int code)
{
    for (size_t row = 0; row < txo_rows_count(rows); row++) {
        const char *v = txo_rows_str(rows, row, 0, NULL);
        for (size_t k = 0; v != NULL && k < n; k++)
            if (outcome[k] == 0 && strcmp(ids[k], v) == 0)
                outcome[k] = code;
    }
}

/* One SKU of a ReserveStock batch. */
struct batch_sku {
    const char *sku;
    int64_t available; /* -1: not in inventory */
    int64_t take;      /* what the batch reserves of it */
};

static int cmp_batch_sku(const void *a, const void *b)
{
    return strcmp(((const struct batch_sku *)a)->sku, ((const struct batch_sku *)b)->sku);
}

static struct batch_sku *find_sku(struct batch_sku *skus, size_t n, const char *sku)
{
    struct batch_sku key = {.sku = sku};
    return bsearch(&key, skus, n, sizeof(*skus), cmp_batch_sku);
}

/*
 * ReserveStock for many sagas: lock every SKU of the batch in one statement (ascending, the
 * lock order), allocate in the batch's order in code (an order that does not fit goes the
 * single way, which fails it with the reason), then one UPDATE ... CASE for every SKU, one
 * multi-row INSERT of the reservations and one of the StockReserved events.
 */
static int reserve_stock_batch(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                               int *outcome, struct txo_error *err)
{
    size_t lines = 0;
    for (size_t k = 0; k < n; k++) {
        const struct order_saga_state *st = batch_state(ctx[k], &outcome[k]);
        lines += st != NULL ? st->n_stock : 0;
    }
    struct batch_sku *skus = txo_calloc(lines + 1, sizeof(*skus));
    /* The most any statement below binds: the UPDATE, 4 per SKU plus the padded IN list. */
    struct txo_param *p = txo_calloc(6 * lines + 2 * n + 2, sizeof(*p));
    char(*ids)[40] = txo_calloc(n, sizeof(*ids));
    struct txo_rows *rows = NULL;
    char *sql = NULL;
    int rc = 0;
    if (skus == NULL || p == NULL || ids == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "ReserveStock batch of %zu: out of memory", n);
        goto out;
    }
    /* The distinct SKUs, sorted. */
    size_t n_skus = 0;
    for (size_t k = 0; k < n; k++) {
        const struct order_saga_state *st = ctx[k]->state;
        snprintf(ids[k], sizeof(ids[k]), "%s", ctx[k]->saga_id);
        for (size_t i = 0; outcome[k] == 0 && i < st->n_stock; i++)
            skus[n_skus++] = (struct batch_sku){.sku = st->stock[i].sku, .available = -1};
    }
    qsort(skus, n_skus, sizeof(*skus), cmp_batch_sku);
    size_t u = 0;
    for (size_t i = 0; i < n_skus; i++)
        if (u == 0 || strcmp(skus[u - 1].sku, skus[i].sku) != 0)
            skus[u++] = skus[i];
    n_skus = u;
    if (n_skus == 0)
        goto out;

    for (size_t i = 0; i < n_skus; i++)
        p[i] = txo_p_str(skus[i].sku);
    rc = batch_query(tx, ORDERS_SQL_INVENTORY_LOCK_MANY, ORDERS_SQL_INVENTORY_LOCK_MANY_END, p,
                     n_skus, &rows, err);
    if (rc < 0)
        goto out;
    for (size_t row = 0; row < txo_rows_count(rows); row++) {
        struct batch_sku *s = find_sku(skus, n_skus, txo_rows_str(rows, row, 0, NULL));
        if (s != NULL)
            s->available = txo_rows_i64(rows, row, 1);
    }
    txo_rows_free(rows);
    rows = NULL;
    for (size_t k = 0; k < n; k++)
        p[k] = txo_p_str(ids[k]);
    rc = batch_query(tx, ORDERS_SQL_RESERVED_SAGAS_MANY, "", p, n, &rows, err);
    if (rc < 0)
        goto out;
    batch_exclude(rows, ids, n, outcome, TXO_EDUPLICATE); /* a re-run */

    /* Allocate in the batch's order: a saga takes all its lines or none. */
    size_t n_res = 0;
    for (size_t k = 0; k < n; k++) {
        const struct order_saga_state *st = ctx[k]->state;
        if (outcome[k] != 0)
            continue;
        bool fits = true;
        for (size_t i = 0; fits && i < st->n_stock; i++) {
            const struct batch_sku *s = find_sku(skus, n_skus, st->stock[i].sku);
            fits = s != NULL && s->available - s->take >= st->stock[i].qty;
        }
        if (!fits) {
            outcome[k] = TXO_EBUSINESS; /* the single path says which SKU and why */
            continue;
        }
        for (size_t i = 0; i < st->n_stock; i++)
            find_sku(skus, n_skus, st->stock[i].sku)->take += st->stock[i].qty;
        n_res += st->n_stock;
    }
    if (n_res == 0)
        goto out;

    /* UPDATE inventory ... CASE sku WHEN ? THEN ? ... for the SKUs taken from. */
    size_t n_take = 0, np = 0;
    for (size_t i = 0; i < n_skus; i++)
        n_take += skus[i].take > 0;
    size_t padded = txo_sql_in_list_size(n_take);
    size_t cap = strlen(ORDERS_SQL_INVENTORY_RESERVE_MANY_BEGIN) +
                 strlen(ORDERS_SQL_INVENTORY_RESERVE_MANY_MIDDLE) +
                 strlen(ORDERS_SQL_INVENTORY_RESERVE_MANY_END) +
                 2 * n_take * strlen(ORDERS_SQL_INVENTORY_RESERVE_MANY_CASE) + 1;
    char *head = txo_malloc(cap);
    if (head == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "ReserveStock batch: out of memory");
        goto out;
    }
    head[0] = '\0';
    strcat(head, ORDERS_SQL_INVENTORY_RESERVE_MANY_BEGIN);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            strcat(head, ORDERS_SQL_INVENTORY_RESERVE_MANY_MIDDLE);
        for (size_t i = 0; i < n_skus; i++) {
            if (skus[i].take == 0)
                continue;
            strcat(head, ORDERS_SQL_INVENTORY_RESERVE_MANY_CASE);
            p[np++] = txo_p_str(skus[i].sku);
            p[np++] = txo_p_i64(skus[i].take);
        }
    }
    strcat(head, ORDERS_SQL_INVENTORY_RESERVE_MANY_END);
    sql = txo_sql_in_list(head, padded, "");
    txo_free(head);
    if (sql == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "ReserveStock batch: out of memory");
        goto out;
    }
    size_t first_in = np;
    for (size_t i = 0; i < n_skus; i++)
        if (skus[i].take > 0)
            p[np++] = txo_p_str(skus[i].sku);
    while (np - first_in < padded) {
        p[np] = p[np - 1];
        np++;
    }
    struct txo_exec_result res;
    rc = txo_tx_exec(tx, sql, p, np, &res, err);
    if (rc < 0)
        goto out;
    if (res.affected_rows != n_take) {
        rc = txo_error_set(err, TXO_EDB, "ReserveStock batch: %llu of %zu SKUs updated",
                           (unsigned long long)res.affected_rows, n_take);
        goto out;
    }

    /* The reservations, then the events. */
    np = 0;
    for (size_t k = 0; k < n; k++) {
        const struct order_saga_state *st = ctx[k]->state;
        for (size_t i = 0; outcome[k] == 0 && i < st->n_stock; i++) {
            p[np++] = txo_p_str(ctx[k]->saga_id);
            p[np++] = txo_p_str(st->stock[i].sku);
            p[np++] = txo_p_i64(st->stock[i].qty);
        }
    }
    rc = batch_insert(tx, ORDERS_SQL_RESERVATION_INSERT_MANY, ORDERS_SQL_RESERVATION_INSERT_ROW,
                      n_res, p, 3, NULL, err);
    if (rc == 0)
        rc = batch_emit(tx, ctx, n, outcome, "StockReserved", "stock-reserved", true, false, err);
out:
    txo_rows_free(rows);
    txo_free(sql);
    txo_free(skus);
    txo_free(p);
    txo_free(ids);
    return rc;
}

/* The order ids of the batch as text (ids[k]) and as IN-list params (p[k]). */
static void batch_order_ids(const struct txo_saga_ctx *const *ctx, size_t n, char (*ids)[40],
                            struct txo_param *p)
{
    for (size_t k = 0; k < n; k++) {
        const struct order_saga_state *st = ctx[k]->state;
        snprintf(ids[k], sizeof(ids[k]), "%" PRId64, st != NULL ? st->order_id : 0);
        p[k] = txo_p_i64(st != NULL ? st->order_id : 0);
    }
}

/* The batch's allocations (ids and params), shared by the two steps below. */
struct batch_orders {
    char (*ids)[40];
    struct txo_param *p;
};

static int batch_orders_new(const struct txo_saga_ctx *const *ctx, size_t n, int *outcome,
                            struct batch_orders *o, struct txo_error *err)
{
    o->ids = txo_calloc(n, sizeof(*o->ids));
    o->p = txo_calloc(2 * n + 2, sizeof(*o->p));
    if (o->ids == NULL || o->p == NULL)
        return txo_error_set(err, TXO_ENOMEM, "batch of %zu: out of memory", n);
    for (size_t k = 0; k < n; k++) {
        (void)batch_state(ctx[k], &outcome[k]);
        if (outcome[k] == 0 && batch_faulty(ctx[k]))
            outcome[k] = TXO_EUNSUPPORTED; /* injected faults: the single path plays them */
    }
    batch_order_ids(ctx, n, o->ids, o->p);
    return 0;
}

static void batch_orders_free(struct batch_orders *o)
{
    txo_free(o->ids);
    txo_free(o->p);
}

/* Orders whose id is in column 0 of `before` + IN list go the single way (re-runs). */
static int batch_exclude_existing(struct txo_tx *tx, const char *before, const char *after,
                                  size_t n, int *outcome, struct batch_orders *o,
                                  struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    int rc = batch_query(tx, before, after, o->p, n, &rows, err);
    if (rc == 0)
        batch_exclude(rows, o->ids, n, outcome, TXO_EDUPLICATE);
    txo_rows_free(rows);
    return rc;
}

/* How many outcomes are 0. */
static size_t batch_count_done(const int *outcome, size_t n)
{
    size_t m = 0;
    for (size_t k = 0; k < n; k++)
        m += outcome[k] == 0;
    return m;
}

/* ChargePayment (in-process payments) for many sagas: one multi-row INSERT of the payments
 * and one of the PaymentCharged events. */
static int charge_payment_batch(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                                int *outcome, struct txo_error *err)
{
    struct batch_orders o;
    int rc = batch_orders_new(ctx, n, outcome, &o, err);
    if (rc == 0)
        rc = batch_exclude_existing(tx, ORDERS_SQL_PAYMENT_EXISTS_MANY, "", n, outcome, &o, err);
    size_t m = rc == 0 ? batch_count_done(outcome, n) : 0;
    if (m > 0) {
        size_t np = 0;
        for (size_t k = 0; k < n; k++) {
            const struct order_saga_state *st = ctx[k]->state;
            if (outcome[k] != 0)
                continue;
            o.p[np++] = txo_p_i64(st->order_id);
            o.p[np++] = txo_p_i64(st->total_cents);
        }
        rc = batch_insert(tx, ORDERS_SQL_PAYMENT_INSERT_MANY, ORDERS_SQL_PAYMENT_INSERT_ROW, m, o.p,
                          2, NULL, err);
        if (rc == 0)
            rc = batch_emit(tx, ctx, n, outcome, "PaymentCharged", "payment-charged", false, true,
                            err);
    }
    batch_orders_free(&o);
    return rc;
}

/* CreateShipment (in-process shipments) for many sagas: lock the orders, one multi-row INSERT
 * of the shipments, one UPDATE confirming the orders, one multi-row INSERT of the events. */
static int create_shipment_batch(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                                 int *outcome, struct txo_error *err)
{
    struct batch_orders o;
    struct txo_rows *rows = NULL;
    int rc = batch_orders_new(ctx, n, outcome, &o, err);
    if (rc == 0)
        rc = batch_query(tx, ORDERS_SQL_ORDER_LOCK_MANY, ORDERS_SQL_ORDER_LOCK_MANY_END, o.p, n,
                         &rows, err);
    /* Only CREATED orders ship here; a cancelled (or missing) one goes the single way. */
    for (size_t k = 0; rc == 0 && k < n; k++) {
        bool created = false;
        for (size_t row = 0; row < txo_rows_count(rows); row++) {
            const char *id = txo_rows_str(rows, row, 0, NULL);
            const char *status = txo_rows_str(rows, row, 1, NULL);
            if (id != NULL && strcmp(id, o.ids[k]) == 0)
                created = status != NULL && strcmp(status, order_status_name(ORDER_CREATED)) == 0;
        }
        if (outcome[k] == 0 && !created)
            outcome[k] = TXO_EBUSINESS;
    }
    if (rc == 0)
        rc = batch_exclude_existing(tx, ORDERS_SQL_SHIPMENT_EXISTS_MANY, "", n, outcome, &o, err);
    size_t m = rc == 0 ? batch_count_done(outcome, n) : 0;
    if (m > 0) {
        size_t np = 0;
        for (size_t k = 0; k < n; k++)
            if (outcome[k] == 0)
                o.p[np++] = txo_p_i64(((const struct order_saga_state *)ctx[k]->state)->order_id);
        rc = batch_insert(tx, ORDERS_SQL_SHIPMENT_INSERT_MANY, ORDERS_SQL_SHIPMENT_INSERT_ROW, m,
                          o.p, 1, NULL, err);
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
            rc = batch_emit(tx, ctx, n, outcome, "ShipmentCreated", "shipment-created", false,
                            false, err);
    }
    txo_rows_free(rows);
    batch_orders_free(&o);
    return rc;
}

/* ---- the batch forms of the remote parts (txo_saga_remote_batch_fn) and their guard ---- */

/*
 * order_still_open for many sagas with one read: an order that is no longer CREATED (or
 * missing) is left out of the batch (its own run meets the single guard, which records why),
 * and so is one with injected faults. Writes nothing.
 */
static int order_still_open_batch(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx,
                                  size_t n, int *outcome, struct txo_error *err)
{
    struct batch_orders o;
    struct txo_rows *rows = NULL;
    int rc = batch_orders_new(ctx, n, outcome, &o, err);
    if (rc == 0)
        rc = batch_query(tx, ORDERS_SQL_ORDER_STATUS_MANY, "", o.p, n, &rows, err);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        if (outcome[k] != 0)
            continue;
        bool open = false;
        for (size_t row = 0; row < txo_rows_count(rows); row++) {
            const char *id = txo_rows_str(rows, row, 0, NULL);
            const char *status = txo_rows_str(rows, row, 1, NULL);
            if (id != NULL && strcmp(id, o.ids[k]) == 0)
                open = status != NULL && strcmp(status, order_status_name(ORDER_CREATED)) == 0;
        }
        if (!open)
            outcome[k] = TXO_EBUSINESS;
    }
    txo_rows_free(rows);
    batch_orders_free(&o);
    return rc;
}

/*
 * call_service for many sagas: one try of each call, all made together through the service's
 * guards (order_service_call_many). A saga whose state is missing fails alone.
 */
static void call_service_batch(const struct txo_saga_ctx *const *ctx, size_t n,
                               enum order_service_kind kind, const char *operation,
                               const char *path, bool with_amount, int *rcs, struct txo_error *errs)
{
    struct order_saga_env *env = ctx[0]->user;
    if (env == NULL || env->session == NULL) {
        for (size_t k = 0; k < n; k++)
            rcs[k] =
                txo_error_set(&errs[k], TXO_ECONFIG, "%s: no external service session", operation);
        return;
    }
    if (!order_services_remote(order_service_session_services(env->session), kind)) {
        memset(rcs, 0, n * sizeof(*rcs)); /* the in-process stand-in: nothing to call */
        return;
    }
    struct order_service_req *reqs = txo_calloc(n, sizeof(*reqs));
    char(*bodies)[SERVICE_BODY_MAX] = txo_calloc(n, sizeof(*bodies));
    size_t *of = txo_calloc(n, sizeof(*of)); /* reqs[j] is the call of ctx[of[j]] */
    if (reqs == NULL || bodies == NULL || of == NULL) {
        for (size_t k = 0; k < n; k++)
            rcs[k] =
                txo_error_set(&errs[k], TXO_ENOMEM, "%s batch of %zu: out of memory", operation, n);
        goto out;
    }
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
        const struct order_saga_state *st = state_of(ctx[k], &errs[k]);
        rcs[k] = st != NULL ? 0 : TXO_EINVAL;
        if (st == NULL)
            continue;
        service_body(st, with_amount ? st->total_cents : -1, bodies[m], sizeof(bodies[m]));
        reqs[m].idempotency_key = ctx[k]->idempotency_key;
        reqs[m].body_json = bodies[m];
        of[m++] = k;
    }
    order_service_call_many(env->session, kind, operation, path, reqs, m);
    for (size_t j = 0; j < m; j++) {
        rcs[of[j]] = reqs[j].rc;
        errs[of[j]] = reqs[j].err;
    }
out:
    txo_free(reqs);
    txo_free(bodies);
    txo_free(of);
}

static void remote_charge_batch(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                                struct txo_error *errs)
{
    call_service_batch(ctx, n, ORDER_SERVICE_PAYMENT, "charge", "/payments/charge", true, rcs,
                       errs);
}

static void remote_create_shipment_batch(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                                         struct txo_error *errs)
{
    call_service_batch(ctx, n, ORDER_SERVICE_SHIPMENT, "create", "/shipments/create", false, rcs,
                       errs);
}

/* With the payment and shipment services in-process (no URL configured): local steps. */
static const struct txo_saga_step_def local_steps[] = {
    {.name = "ReserveStock",
     .action = reserve_stock,
     .compensate = release_stock,
     .action_batch = reserve_stock_batch},
    {.name = "ChargePayment",
     .action = charge_payment,
     .compensate = refund_payment,
     .action_batch = charge_payment_batch},
    {.name = "CreateShipment",
     .action = create_shipment,
     .compensate = cancel_shipment,
     .action_batch = create_shipment_batch},
};

/* With the services called over HTTP: the same steps with their remote parts. */
static const struct txo_saga_step_def remote_steps[] = {
    {.name = "ReserveStock",
     .action = reserve_stock,
     .compensate = release_stock,
     .action_batch = reserve_stock_batch},
    {.name = "ChargePayment",
     .action = charge_payment,
     .compensate = refund_payment,
     .remote = remote_charge,
     .remote_compensate = remote_refund,
     .guard = order_still_open,
     .action_batch = charge_payment_batch,
     .remote_batch = remote_charge_batch,
     .guard_batch = order_still_open_batch},
    {.name = "CreateShipment",
     .action = create_shipment,
     .compensate = cancel_shipment,
     .remote = remote_create_shipment,
     .remote_compensate = remote_cancel_shipment,
     .guard = order_still_open,
     .action_batch = create_shipment_batch,
     .remote_batch = remote_create_shipment_batch,
     .guard_batch = order_still_open_batch},
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

int orders_run_saga_batch(struct txo_db *db, const char *const *saga_ids, size_t n,
                          const struct order_faults *faults, const struct txo_saga_opts *opts,
                          int *rcs, enum txo_saga_status *finals, struct txo_error *err)
{
    struct order_saga_env env;
    order_saga_env_init(&env, faults);
    return txo_saga_run_batch(db, &order_def, saga_ids, n, opts, &env, rcs, finals, err);
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
