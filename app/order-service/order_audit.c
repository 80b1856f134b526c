/*
 * The order service's invariants, checked on a live database (orders.h: orders_audit): what an
 * operator wants to know after an incident, and what the soak and fault tests assert. Every
 * read is a consistent read: nothing is locked, so it can run beside the daemons; a check that
 * races a saga in flight may report what a second later is fine, which is why orders younger
 * than settle_s are left out of the checks that depend on sagas having finished.
 *
 * Sagas are read through the saga engine's API (txo_saga_find, txo_saga_load,
 * txo_saga_list_stuck), never from its tables.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "orders.h"
#include "orders_sql.h"
#include "txo/alloc.h"

struct audit {
    struct txo_db *db;
    const struct orders_audit_opts *opts;
    struct orders_audit_report *out;
};

static void violation(struct audit *a, const char *check, int64_t order_id, const char *fmt, ...)
    TXO_PRINTF(4, 5);
static void violation(struct audit *a, const char *check, int64_t order_id, const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    a->out->violations++;
    if (a->opts->report != NULL)
        a->opts->report(a->opts->report_arg, check, order_id, detail);
}

static int64_t count(struct txo_db *db, const char *sql, const struct txo_param *p, size_t np,
                     int *rc, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    *rc = txo_db_query(db, sql, p, np, &rows, err);
    int64_t n = *rc == 0 && txo_rows_count(rows) > 0 ? txo_rows_i64(rows, 0, 0) : 0;
    txo_rows_free(rows);
    return n;
}

static bool has_event(struct audit *a, const char *key, int *rc, struct txo_error *err)
{
    struct txo_param p[] = {txo_p_str(key)};
    return count(a->db, ORDERS_SQL_AUDIT_EVENT, p, 1, rc, err) > 0;
}

/* One order: its events, its saga, its effects, for its status. */
static int audit_order(struct audit *a, int64_t id, const char *status, int64_t age_s,
                       struct txo_error *err)
{
    int rc = 0;
    char key[128];
    snprintf(key, sizeof(key), "order:%" PRId64 ":created", id);
    if (!has_event(a, key, &rc, err) && rc == 0)
        violation(a, "order_created_event", id, "no OrderCreated event (key %s)", key);
    if (rc != 0 || age_s < (int64_t)a->opts->settle_s)
        return rc;

    char corr[64], saga_id[TXO_SAGA_ID_LEN];
    snprintf(corr, sizeof(corr), "order:%" PRId64, id);
    struct txo_error ferr;
    txo_error_init(&ferr);
    int frc = txo_saga_find(a->db, ORDER_SAGA_TYPE, corr, saga_id, &ferr);
    if (frc == TXO_ENOTFOUND) {
        if (strcmp(status, order_status_name(ORDER_CREATED)) == 0)
            violation(a, "order_without_saga", id,
                      "CREATED for %" PRId64 " s and no saga: is a worker consuming OrderCreated?",
                      age_s);
        return 0;
    }
    if (frc != 0) {
        if (err != NULL)
            *err = ferr;
        return frc;
    }
    struct txo_saga_info saga;
    rc = txo_saga_load(a->db, saga_id, &saga, err);
    if (rc != 0)
        return rc;
    bool terminal =
        txo_saga_is_terminal(saga.status) && saga.status != TXO_SAGA_COMPENSATION_FAILED;
    struct txo_param ep[] = {txo_p_i64(id), txo_p_i64(id)};
    struct txo_rows *rows = NULL;
    rc = txo_db_query(a->db, ORDERS_SQL_AUDIT_EFFECTS, ep, 2, &rows, err);
    int64_t charged = rc == 0 ? txo_rows_i64(rows, 0, AUDIT_EFFECTS_CHARGED) : 0;
    int64_t shipped = rc == 0 ? txo_rows_i64(rows, 0, AUDIT_EFFECTS_SHIPPED) : 0;
    txo_rows_free(rows);
    if (rc != 0)
        goto out;
    const char *ss = txo_saga_status_name(saga.status);
    if (strcmp(status, order_status_name(ORDER_CONFIRMED)) == 0) {
        if (saga.status != TXO_SAGA_COMPLETED)
            violation(a, "order_saga_status", id, "CONFIRMED but its saga %s is %s", saga_id, ss);
        if (charged != 1 || shipped != 1)
            violation(a, "confirmed_effects", id,
                      "CONFIRMED with %" PRId64 " CHARGED payment(s) and %" PRId64
                      " CREATED shipment(s), want 1 and 1",
                      charged, shipped);
        snprintf(key, sizeof(key), "saga:%s:shipment-created", saga_id);
        if (!has_event(a, key, &rc, err) && rc == 0)
            violation(a, "confirmed_event", id, "CONFIRMED without its ShipmentCreated event");
    } else if (strcmp(status, order_status_name(ORDER_CANCELLED)) == 0) {
        if (terminal && (charged != 0 || shipped != 0))
            violation(a, "cancelled_effects", id,
                      "CANCELLED (saga %s) with %" PRId64 " CHARGED payment(s) and %" PRId64
                      " CREATED shipment(s) left",
                      ss, charged, shipped);
        char key2[128];
        snprintf(key, sizeof(key), "order:%" PRId64 ":cancelled", id);
        snprintf(key2, sizeof(key2), "saga:%s:order-cancelled", saga_id);
        bool ev = has_event(a, key, &rc, err);
        if (rc == 0 && !ev)
            ev = has_event(a, key2, &rc, err);
        if (rc == 0 && !ev)
            violation(a, "cancelled_event", id, "CANCELLED without an OrderCancelled event");
    } else if (terminal) {
        violation(a, "order_saga_status", id, "still %s but its saga %s is %s", status, saga_id,
                  ss);
    }
out:
    txo_saga_info_release(&saga);
    return rc;
}

static int audit_stock(struct audit *a, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(a->db, ORDERS_SQL_AUDIT_STOCK, NULL, 0, &rows, err);
    for (size_t i = 0; rc == 0 && i < txo_rows_count(rows); i++)
        violation(a, "stock", 0,
                  "sku %s: available %" PRId64 ", reserved %" PRId64
                  ", but its RESERVED reservations hold %" PRId64,
                  txo_rows_str(rows, i, AUDIT_STOCK_SKU, NULL),
                  txo_rows_i64(rows, i, AUDIT_STOCK_AVAILABLE),
                  txo_rows_i64(rows, i, AUDIT_STOCK_RESERVED),
                  txo_rows_i64(rows, i, AUDIT_STOCK_HELD));
    txo_rows_free(rows);
    return rc;
}

static int audit_sagas(struct audit *a, struct txo_error *err)
{
    struct txo_saga_ref refs[100];
    size_t n = 0;
    int rc = txo_saga_list_stuck(a->db, a->opts->settle_s, TXO_ARRAY_LEN(refs), refs, &n, err);
    for (size_t i = 0; rc == 0 && i < n; i++)
        violation(a, "stuck_saga", 0, "saga %s (%s) is %s, idle %" PRId64 " s with no live owner%s",
                  refs[i].id, refs[i].type, txo_saga_status_name(refs[i].status), refs[i].idle_s,
                  refs[i].status == TXO_SAGA_COMPENSATION_FAILED
                      ? ": the engine gave up retrying it (txo saga retry)"
                      : "");
    return rc;
}

void orders_audit_opts_init(struct orders_audit_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->window_s = 86400;
    opts->settle_s = 60;
    opts->max_orders = 10000;
}

int orders_audit(struct txo_db *db, const struct orders_audit_opts *opts,
                 struct orders_audit_report *out, struct txo_error *err)
{
    if (db == NULL || opts == NULL || out == NULL || opts->max_orders == 0)
        return txo_error_set(err, TXO_EINVAL, "audit: missing argument");
    memset(out, 0, sizeof(*out));
    struct audit a = {.db = db, .opts = opts, .out = out};
    struct txo_param p[] = {txo_p_i64(opts->window_s), txo_p_i64(opts->max_orders)};
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, ORDERS_SQL_AUDIT_ORDERS, p, 2, &rows, err);
    for (size_t i = 0; rc == 0 && i < txo_rows_count(rows); i++) {
        out->orders++;
        rc = audit_order(&a, txo_rows_i64(rows, i, AUDIT_ORDER_ID),
                         txo_rows_str(rows, i, AUDIT_ORDER_STATUS, NULL),
                         txo_rows_i64(rows, i, AUDIT_ORDER_AGE), err);
    }
    txo_rows_free(rows);
    if (rc == 0)
        rc = audit_stock(&a, err);
    if (rc == 0)
        rc = audit_sagas(&a, err);
    return rc;
}
