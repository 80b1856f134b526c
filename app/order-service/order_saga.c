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
 * This file holds the payload, the events, the calls to the services, what the steps share,
 * the end of the saga and its definition; each step is a file of its own, every part written
 * once for n sagas (order_saga_steps.h).
 *
 * Thread-safety: the definition is immutable; a decoded state belongs to one run; the
 * struct order_saga_env given as `user` belongs to one run (one thread).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "txo/alloc.h"
#include "txo/log.h"
#include "txo/outbox.h"
#include "order_saga_steps.h"
#include "orders_sql.h"

static const struct order_faults no_faults;

void order_saga_env_init(struct order_saga_env *env, const struct order_faults *faults)
{
    env->faults = faults;
    env->charge_calls = 0;
    env->session = NULL;
}

const struct order_faults *order_saga__faults(const struct txo_saga_ctx *ctx)
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

const struct order_saga_state *order_saga__state(const struct txo_saga_ctx *ctx,
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
int order_saga__emit(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                     const struct order_saga_state *st, const char *type, const char *suffix,
                     bool with_items, int64_t amount_cents, const char *reason,
                     struct txo_error *err)
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
        .trace = ctx->has_trace ? &ctx->trace : NULL,
    };
    int rc = txo_outbox_append(tx, &ev, TXO_OUTBOX_IGNORE_DUPLICATE, NULL, NULL, err);
    txo_free(payload);
    return rc;
}

/* Reads the single string column of a one-row query into buf ("" when there is no row). */
int order_saga__query_str(struct txo_tx *tx, const char *sql, const struct txo_param *p, size_t np,
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

/* ---- the order's rule (CreateShipment, and the guard of the remote steps) ---- */

/* The names order_status_name() gives ORDER_CREATED and ORDER_CONFIRMED. */
const struct step_rule order_saga__order_rule = {.fresh = "CREATED", .redone = "CONFIRMED"};

/* ---- the remote parts: the calls to the services, and their guard ---- */

/*
 * The body of a call (enum service_body), allocated: txo_free it; NULL when out of memory. A
 * service needs no more than this: a payment provider the customer and the amount, a carrier
 * what goes in the parcel.
 */
static char *service_body(const struct order_saga_state *st, enum service_body what)
{
    json_t *body = json_pack("{s:I,s:I}", "order_id", (json_int_t)st->order_id, "customer_id",
                             (json_int_t)st->customer_id);
    if (body != NULL && what == BODY_CHARGE &&
        json_object_set_new(body, "amount_cents", json_integer(st->total_cents)) != 0) {
        json_decref(body);
        return NULL;
    }
    if (body != NULL && what == BODY_PARCEL) {
        json_t *items = json_array();
        for (size_t k = 0; items != NULL && k < st->n_items; k++)
            if (json_array_append_new(items, json_pack("{s:s,s:i}", "sku", st->items[k].sku, "qty",
                                                       (int)st->items[k].qty)) != 0) {
                json_decref(items);
                items = NULL;
            }
        if (items == NULL || json_object_set_new(body, "items", items) != 0) {
            json_decref(body);
            return NULL;
        }
    }
    char *text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (text == NULL)
        return NULL;
    char *out = txo_strdup(text);
    free(text);
    return out;
}

/* The W3C trace context lines of a step's call: the step's span as the caller. */
struct trace_lines {
    char parent[16 + TXO_TRACEPARENT_LEN];
    char state[16 + TXO_TRACESTATE_MAX];
    const char *lines[3];
};

/* Fills t from ctx; returns its NULL-terminated lines (none without a trace context). */
static const char *const *trace_lines(const struct txo_saga_ctx *ctx, struct trace_lines *t)
{
    size_t n = 0;
    if (ctx->has_trace) {
        char tp[TXO_TRACEPARENT_LEN + 1];
        txo_trace_format(&ctx->trace, tp);
        snprintf(t->parent, sizeof(t->parent), "traceparent: %s", tp);
        t->lines[n++] = t->parent;
        if (ctx->trace.state[0] != '\0') {
            snprintf(t->state, sizeof(t->state), "tracestate: %s", ctx->trace.state);
            t->lines[n++] = t->state;
        }
    }
    t->lines[n] = NULL;
    return t->lines;
}

/* A call of ctx[k] that cannot be made: every rcs[k] gets code. */
static void calls_fail(size_t n, int *rcs, struct txo_error *errs, int code, const char *operation,
                       const char *why)
{
    for (size_t k = 0; k < n; k++)
        rcs[k] = txo_error_set(&errs[k], code, "%s: %s", operation, why);
}

/* See order_saga_steps.h. */
void order_saga__call_service(const struct txo_saga_ctx *const *ctx, size_t n,
                              enum order_service_kind kind, const char *operation, const char *path,
                              enum service_body what, int *rcs, struct txo_error *errs)
{
    struct order_saga_env *env = ctx[0]->user;
    memset(rcs, 0, n * sizeof(*rcs));
    if (env == NULL || env->session == NULL) {
        calls_fail(n, rcs, errs, TXO_ECONFIG, operation, "no external service session");
        return;
    }
    if (!order_services_remote(order_service_session_services(env->session), kind))
        return; /* the in-process stand-in: nothing to call */
    struct order_service_req *reqs = txo_calloc(n, sizeof(*reqs));
    char **bodies = txo_calloc(n, sizeof(*bodies));
    struct trace_lines *tls = txo_calloc(n, sizeof(*tls));
    size_t *of = txo_calloc(n, sizeof(*of)); /* reqs[j] is the call of ctx[of[j]] */
    if (reqs == NULL || bodies == NULL || tls == NULL || of == NULL) {
        calls_fail(n, rcs, errs, TXO_ENOMEM, operation, "out of memory");
        goto out;
    }
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
        const struct order_saga_state *st = order_saga__state(ctx[k], &errs[k]);
        if (st == NULL) {
            rcs[k] = TXO_EINVAL;
            continue;
        }
        bodies[m] = service_body(st, what);
        if (bodies[m] == NULL) {
            rcs[k] = txo_error_set(&errs[k], TXO_ENOMEM, "%s: out of memory for the request body",
                                   operation);
            continue;
        }
        reqs[m].idempotency_key = ctx[k]->idempotency_key;
        reqs[m].headers = trace_lines(ctx[k], &tls[m]);
        reqs[m].body_json = bodies[m];
        of[m++] = k;
    }
    if (n == 1 && m == 1) {
        /* Alone: through the client's retries, as one call. */
        rcs[0] = order_service_call(env->session, kind, operation, path, reqs[0].idempotency_key,
                                    reqs[0].body_json, reqs[0].headers, &errs[0]);
    } else {
        order_service_call_many(env->session, kind, operation, path, reqs, m);
        for (size_t j = 0; j < m; j++) {
            rcs[of[j]] = reqs[j].rc;
            errs[of[j]] = reqs[j].err;
        }
    }
out:
    for (size_t j = 0; bodies != NULL && j < n; j++)
        txo_free(bodies[j]);
    txo_free(reqs);
    txo_free(bodies);
    txo_free(tls);
    txo_free(of);
}

/*
 * The guard of ChargePayment and CreateShipment, in the engine's transaction before the calls:
 * an order the customer cancelled is not charged or shipped (TXO_EBUSINESS: the saga undoes
 * what it did). One consistent read for the batch; it writes nothing. A cancel that commits
 * after this read is caught by the step's local part.
 */
static int order_still_open(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                            int *rcs, struct txo_error *errs, struct txo_error *err)
{
    struct order_saga_batch o;
    int rc = order_saga__batch_new(ctx, n, true, rcs, errs, &o, err);
    if (rc == 0)
        rc = order_saga__batch_judge(tx, ORDERS_SQL_ORDER_STATUS_MANY, "", n, rcs, &o,
                                     &order_saga__order_rule, err);
    for (size_t k = 0; rc == 0 && k < n; k++)
        if (rcs[k] == 0 && o.was[k] != STEP_FRESH)
            rcs[k] = txo_error_set(&errs[k], TXO_EBUSINESS,
                                   "order is no longer open: order_id=%s status=%s (%s not called)",
                                   o.ids[k], o.status[k][0] != '\0' ? o.status[k] : "missing",
                                   ctx[k]->step_name);
    order_saga__batch_free(&o);
    return rc;
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
    const struct order_saga_state *st = order_saga__state(ctx, err);
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
        rc = order_saga__query_str(tx, ORDERS_SQL_ORDER_STATUS_LOCK, p, 1, status, sizeof(status),
                                   &found, err);
        if (rc < 0)
            return rc;
        if (!found || strcmp(status, order_status_name(ORDER_CANCELLED)) != 0) {
            /* Cannot happen with this step list (the last step confirms the order and
             * completes the saga); a human must look at it. The saga still ends. */
            TXO_LOG(TXO_LOG_ERROR, "orders", "aborted saga cannot cancel its order",
                    TXO_KV_STR("saga_id", ctx->saga_id), TXO_KV_I64("order_id", st->order_id),
                    TXO_KV_STR("status", found ? status : "missing"));
        }
        /* CANCELLED already: the customer cancelled it (orders_cancel_tx), and that change
         * wrote its own OrderCancelled. This hook runs once (it commits with the saga's final
         * status), so nothing else can have cancelled it: no second event. */
        return 0;
    }
    return order_saga__emit(tx, ctx, st, "OrderCancelled", "order-cancelled", false, -1, reason,
                            err);
}

/* ---- what the steps share (order_saga_steps.h) ---- */

int order_saga__batch_new(const struct txo_saga_ctx *const *ctx, size_t n, bool by_order, int *rcs,
                          struct txo_error *errs, struct order_saga_batch *o, struct txo_error *err)
{
    o->ids = txo_calloc(n, sizeof(*o->ids));
    o->p = txo_calloc(3 * n + 2, sizeof(*o->p));
    o->was = txo_calloc(n, sizeof(*o->was));
    o->status = txo_calloc(n, sizeof(*o->status));
    if (o->ids == NULL || o->p == NULL || o->was == NULL || o->status == NULL)
        return txo_error_set(err, TXO_ENOMEM, "batch of %zu sagas: out of memory", n);
    for (size_t k = 0; k < n; k++) {
        const struct order_saga_state *st = order_saga__state(ctx[k], &errs[k]);
        rcs[k] = st != NULL ? 0 : TXO_EINVAL;
        int64_t order_id = st != NULL ? st->order_id : 0;
        if (by_order) {
            snprintf(o->ids[k], sizeof(o->ids[k]), "%" PRId64, order_id);
            o->p[k] = txo_p_i64(order_id);
        } else {
            snprintf(o->ids[k], sizeof(o->ids[k]), "%s", ctx[k]->saga_id);
            o->p[k] = txo_p_str(ctx[k]->saga_id);
        }
    }
    return 0;
}

void order_saga__batch_free(struct order_saga_batch *o)
{
    txo_free(o->ids);
    txo_free(o->p);
    txo_free(o->was);
    txo_free(o->status);
}

int order_saga__fault(size_t n, bool on, int *rcs, struct txo_error *errs, size_t k, int code,
                      const char *fmt, ...)
{
    if (!on || rcs[k] != 0)
        return rcs[k];
    if (n > 1)
        return rcs[k] = txo_error_set(&errs[k], TXO_EALONE, "an injected fault: runs alone");
    va_list ap;
    va_start(ap, fmt);
    rcs[k] = txo_error_setv(&errs[k], code, fmt, ap);
    va_end(ap);
    return rcs[k];
}

int order_saga__batch_query(struct txo_tx *tx, const char *before, const char *after,
                            const struct txo_param *in, size_t n, struct txo_rows **rows,
                            uint64_t *affected, struct txo_error *err)
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
        struct txo_exec_result res = {0};
        rc = rows != NULL ? txo_tx_query(tx, sql, p, padded, rows, err)
                          : txo_tx_exec(tx, sql, p, padded, &res, err);
        if (affected != NULL)
            *affected = res.affected_rows;
    }
    txo_free(sql);
    txo_free(p);
    return rc;
}

static enum step_found judge(const struct step_rule *rule, const char *status)
{
    if (status == NULL)
        return rule->fresh == NULL ? STEP_FRESH : STEP_REFUSED;
    if (rule->fresh != NULL && strcmp(status, rule->fresh) == 0)
        return STEP_FRESH;
    return strcmp(status, rule->redone) == 0 ? STEP_REDONE : STEP_REFUSED;
}

int order_saga__batch_judge(struct txo_tx *tx, const char *before, const char *after, size_t n,
                            const int *rcs, struct order_saga_batch *o,
                            const struct step_rule *rule, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    int rc = order_saga__batch_query(tx, before, after, o->p, n, &rows, NULL, err);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        o->status[k][0] = '\0';
        for (size_t row = 0; row < txo_rows_count(rows); row++) {
            const char *id = txo_rows_str(rows, row, 0, NULL);
            const char *status = txo_rows_str(rows, row, 1, NULL);
            if (id != NULL && status != NULL && strcmp(id, o->ids[k]) == 0) {
                snprintf(o->status[k], sizeof(o->status[k]), "%s", status);
                break;
            }
        }
        o->was[k] =
            rcs[k] == 0 ? judge(rule, o->status[k][0] != '\0' ? o->status[k] : NULL) : STEP_REFUSED;
    }
    txo_rows_free(rows);
    return rc;
}

size_t order_saga__batch_fresh(const int *rcs, const struct order_saga_batch *o, size_t n)
{
    size_t m = 0;
    for (size_t k = 0; k < n; k++)
        m += rcs[k] == 0 && o->was[k] == STEP_FRESH;
    return m;
}

int order_saga__batch_emit(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                           const int *rcs, const struct order_saga_batch *o, const char *type,
                           const char *suffix, bool with_items, bool with_amount,
                           struct txo_error *err)
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
    for (size_t k = 0; rc == 0 && k < n; k++) {
        if (rcs[k] != 0)
            continue;
        const struct order_saga_state *st = ctx[k]->state;
        int64_t amount = with_amount ? st->total_cents : -1;
        if (o->was[k] != STEP_FRESH || n == 1) {
            rc = order_saga__emit(tx, ctx[k], st, type, suffix, with_items, amount, NULL, err);
            continue;
        }
        payloads[m] =
            orders__json_saga_event(ctx[k]->saga_id, st->order_id, with_items ? st->items : NULL,
                                    st->n_items, amount, NULL, err);
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
                                           .idempotency_key = keys[m],
                                           .trace = ctx[k]->has_trace ? &ctx[k]->trace : NULL};
        m++;
    }
    if (rc == 0)
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

int order_saga__undo(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                     const struct order_saga_undo *u, int *rcs, struct txo_error *errs,
                     struct txo_error *err)
{
    struct order_saga_batch o;
    int rc = order_saga__batch_new(ctx, n, true, rcs, errs, &o, err);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        order_saga__fault(n, u->fault(order_saga__faults(ctx[k])), rcs, errs, k, TXO_EBUSINESS,
                          "%s (injected): order_id=%s", u->fault_says, o.ids[k]);
        o.was[k] = STEP_REDONE; /* its event may be there from an earlier run */
    }
    size_t m = 0;
    for (size_t k = 0; rc == 0 && k < n; k++)
        if (rcs[k] == 0)
            o.p[m++] = o.p[k];
    if (m > 0)
        rc = order_saga__batch_query(tx, u->sql, "", o.p, m, NULL, NULL, err);
    if (rc == 0)
        rc = order_saga__batch_emit(tx, ctx, n, rcs, &o, u->event_type, u->suffix, false,
                                    u->with_amount, err);
    order_saga__batch_free(&o);
    return rc;
}

/*
 * Deadlines (include/txo/saga.h). A call to a service may take up to its client's 3 tries of
 * 5 s with their backoff (order_services_opts_init): about 17 s, so a try is given 20 s, after
 * which another worker may take the saga over and call again with the same key. A step gets
 * 2 min: the engine's 5 tries of such a call. An order not confirmed within 5 min is not
 * going to be: its saga stops and compensates (refund, stock back), and the customer is told
 * the order was cancelled rather than left waiting.
 */
#define ORDER_TRY_TIMEOUT_MS   20000
#define ORDER_STEP_DEADLINE_MS 120000
#define ORDER_SAGA_DEADLINE_MS 300000

/*
 * The saga's steps, each written once: the local parts in both tables below, the remote parts
 * only where the services are called over HTTP.
 */
#define RESERVE_STOCK                                                                              \
    .name = "ReserveStock", .action = order_saga__reserve_stock,                                   \
    .compensate = order_saga__release_stock, .deadline_ms = ORDER_STEP_DEADLINE_MS
#define CHARGE_PAYMENT                                                                             \
    .name = "ChargePayment", .action = order_saga__charge_payment,                                 \
    .compensate = order_saga__refund_payment, .deadline_ms = ORDER_STEP_DEADLINE_MS,               \
    .try_timeout_ms = ORDER_TRY_TIMEOUT_MS
#define CREATE_SHIPMENT                                                                            \
    .name = "CreateShipment", .action = order_saga__create_shipment,                               \
    .compensate = order_saga__cancel_shipment, .deadline_ms = ORDER_STEP_DEADLINE_MS,              \
    .try_timeout_ms = ORDER_TRY_TIMEOUT_MS

/* With the payment and shipment services in-process (no URL configured): local steps. */
static const struct txo_saga_step_def local_steps[] = {
    {RESERVE_STOCK},
    {CHARGE_PAYMENT},
    {CREATE_SHIPMENT},
};

/* With the services called over HTTP: the same steps with their remote parts. */
static const struct txo_saga_step_def remote_steps[] = {
    {RESERVE_STOCK},
    {CHARGE_PAYMENT, .remote = order_saga__remote_charge,
     .remote_compensate = order_saga__remote_refund, .guard = order_still_open},
    {CREATE_SHIPMENT, .remote = order_saga__remote_create_shipment,
     .remote_compensate = order_saga__remote_cancel_shipment, .guard = order_still_open},
};

/* The one CreateOrderSaga, over either step table. CreateShipment confirms the order in its
 * own step, so there is no on_completed. */
#define ORDER_SAGA(steps_)                                                                         \
    {                                                                                              \
        .type = ORDER_SAGA_TYPE, .steps = steps_, .n_steps = TXO_ARRAY_LEN(steps_),                \
        .decode = decode, .free_state = free_state, .on_completed = NULL,                          \
        .on_aborted = on_aborted, .deadline_ms = ORDER_SAGA_DEADLINE_MS,                           \
    }

static const struct txo_saga_def order_def = ORDER_SAGA(local_steps);
static const struct txo_saga_def order_def_remote = ORDER_SAGA(remote_steps);

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
    order_saga_env_init(&env, faults);
    return txo_saga_run(db, &order_def, saga_id, opts, &env, final, err); /* NULL: defaults */
}

int orders_run_saga_many(struct txo_db *db, const char *const *saga_ids, size_t n,
                         const struct order_faults *faults, const struct txo_saga_opts *opts,
                         int *rcs, enum txo_saga_status *finals, struct txo_error *err)
{
    struct order_saga_env env;
    order_saga_env_init(&env, faults);
    return txo_saga_run_many(db, &order_def, saga_ids, n, opts, &env, rcs, finals, err);
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
