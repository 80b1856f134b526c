/*
 * The ReserveStock step of the CreateOrderSaga and its compensation ReleaseStock, each for n
 * sagas (order_saga_steps.h). A re-run is judged by reservation_rule.
 *
 * Lock order: the inventory rows are locked in ascending SKU order (the batch's SKUs sorted
 * here, a saga's reservations read in SKU order), so concurrent reservations and releases
 * serialise on the first common SKU instead of deadlocking.
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

/* ReserveStock: the saga's RESERVED reservations are the step done already; RELEASED ones (a
 * compensation ran) refuse it. The reservations of one run commit together, so a saga has
 * all of them or none. */
static const struct step_rule reservation_rule = {.fresh = NULL, .redone = "RESERVED"};

/* ReleaseStock of one saga: its RESERVED reservations, in SKU order, back to the inventory. */
static int release_one(struct txo_tx *tx, const struct txo_saga_ctx *ctx, int *rc_k,
                       struct txo_error *err_k, struct txo_error *err)
{
    const struct order_saga_state *st = order_saga__state(ctx, err_k);
    if (st == NULL)
        return *rc_k = TXO_EINVAL, 0;
    if (order_saga__fault(1, order_saga__faults(ctx)->fail_release, rc_k, err_k, 0, TXO_EBUSINESS,
                          "release failed (injected): saga_id=%s", ctx->saga_id) != 0)
        return 0;
    struct txo_rows *rows = NULL;
    struct txo_param sp[] = {txo_p_str(ctx->saga_id)};
    int rc = txo_tx_query(tx, ORDERS_SQL_RESERVATIONS_LOCK, sp, 1, &rows, err);
    for (size_t r = 0; rc == 0 && *rc_k == 0 && r < txo_rows_count(rows); r++) {
        const char *sku = txo_rows_str(rows, r, RESERVATIONS_COL_SKU, NULL);
        int64_t qty = txo_rows_i64(rows, r, RESERVATIONS_COL_QTY);
        const char *status = txo_rows_str(rows, r, RESERVATIONS_COL_STATUS, NULL);
        if (sku == NULL || status == NULL || strcmp(status, "RESERVED") != 0)
            continue; /* released by an earlier run */
        struct txo_param up[] = {txo_p_i64(qty), txo_p_i64(qty), txo_p_str(sku), txo_p_i64(qty)};
        struct txo_exec_result res;
        rc = txo_tx_exec(tx, ORDERS_SQL_INVENTORY_RELEASE, up, TXO_ARRAY_LEN(up), &res, err);
        if (rc == 0 && res.affected_rows != 1)
            *rc_k = txo_error_set(err_k, TXO_EBUSINESS,
                                  "cannot release stock reservation: saga_id=%s sku=%s qty=%" PRId64
                                  " (inventory row missing or reserved < qty)",
                                  ctx->saga_id, sku, qty);
        struct txo_param mp[] = {txo_p_str(ctx->saga_id), txo_p_str(sku)};
        if (rc == 0 && *rc_k == 0)
            rc = txo_tx_exec(tx, ORDERS_SQL_RESERVATION_RELEASE, mp, TXO_ARRAY_LEN(mp), NULL, err);
    }
    txo_rows_free(rows);
    if (rc == 0 && *rc_k == 0)
        rc = order_saga__emit(tx, ctx, st, "StockReleased", "stock-released", true, -1, NULL, err);
    return rc;
}

/* A compensation runs alone, after a failure: ReleaseStock works saga by saga, and a saga of a
 * batch of several runs on its own (what it would write for one saga cannot be taken back
 * without the others'). */
int order_saga__release_stock(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                              int *rcs, struct txo_error *errs, struct txo_error *err)
{
    if (n > 1) {
        for (size_t k = 0; k < n; k++)
            rcs[k] = txo_error_set(&errs[k], TXO_EALONE, "ReleaseStock runs saga by saga");
        return 0;
    }
    rcs[0] = 0;
    return release_one(tx, ctx[0], &rcs[0], &errs[0], err);
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

/* See order_saga_steps.h. */
int order_saga__reserve_stock(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                              int *rcs, struct txo_error *errs, struct txo_error *err)
{
    struct order_saga_batch o;
    int rc = order_saga__batch_new(ctx, n, false, rcs, errs, &o, err);
    size_t lines = 0;
    for (size_t k = 0; k < n; k++)
        lines += rcs[k] == 0 ? ((const struct order_saga_state *)ctx[k]->state)->n_stock : 0;
    struct batch_sku *skus = txo_calloc(lines + 1, sizeof(*skus));
    /* The most any statement below binds: the UPDATE, 4 per SKU plus the padded IN list. */
    struct txo_param *p = txo_calloc(6 * lines + 2, sizeof(*p));
    struct txo_rows *rows = NULL;
    char *sql = NULL;
    if (rc == 0 && (skus == NULL || p == NULL))
        rc = txo_error_set(err, TXO_ENOMEM, "ReserveStock batch of %zu: out of memory", n);
    if (rc != 0)
        goto out;
    /* The distinct SKUs, sorted. */
    size_t n_skus = 0;
    for (size_t k = 0; k < n; k++) {
        const struct order_saga_state *st = ctx[k]->state;
        for (size_t i = 0; rcs[k] == 0 && i < st->n_stock; i++)
            skus[n_skus++] = (struct batch_sku){.sku = st->stock[i].sku, .available = -1};
    }
    qsort(skus, n_skus, sizeof(*skus), cmp_batch_sku);
    size_t u = 0;
    for (size_t i = 0; i < n_skus; i++)
        if (u == 0 || strcmp(skus[u - 1].sku, skus[i].sku) != 0)
            skus[u++] = skus[i];
    n_skus = u;
    for (size_t i = 0; i < n_skus; i++)
        p[i] = txo_p_str(skus[i].sku);
    if (n_skus > 0)
        rc = order_saga__batch_query(tx, ORDERS_SQL_INVENTORY_LOCK_MANY,
                                     ORDERS_SQL_INVENTORY_LOCK_MANY_END, p, n_skus, &rows, NULL,
                                     err);
    if (rc < 0)
        goto out;
    for (size_t row = 0; row < txo_rows_count(rows); row++) {
        struct batch_sku *s = find_sku(skus, n_skus, txo_rows_str(rows, row, 0, NULL));
        if (s != NULL)
            s->available = txo_rows_i64(rows, row, 1);
    }
    txo_rows_free(rows);
    rows = NULL;
    rc = order_saga__batch_judge(tx, ORDERS_SQL_RESERVATIONS_MANY, "", n, rcs, &o,
                                 &reservation_rule, err);
    if (rc < 0)
        goto out;

    /* Allocate in the batch's order: a saga takes all its lines or none. */
    size_t n_res = 0;
    for (size_t k = 0; k < n; k++) {
        const struct order_saga_state *st = ctx[k]->state;
        if (rcs[k] != 0 || o.was[k] == STEP_REDONE)
            continue;
        if (o.was[k] == STEP_REFUSED) {
            rcs[k] =
                txo_error_set(&errs[k], TXO_EBUSINESS,
                              "stock reservation already released: saga_id=%s", ctx[k]->saga_id);
            continue;
        }
        for (size_t i = 0; rcs[k] == 0 && i < st->n_stock; i++) {
            const struct stock_line *line = &st->stock[i];
            const struct batch_sku *s = find_sku(skus, n_skus, line->sku);
            bool known = s != NULL && s->available >= 0;
            int64_t left = known ? s->available - s->take : 0;
            if (left < line->qty)
                rcs[k] =
                    txo_error_set(&errs[k], TXO_EBUSINESS,
                                  "not enough stock for sku=%s available=%" PRId64
                                  " required=%" PRId32 "%s (saga_id=%s order_id=%" PRId64 ")",
                                  line->sku, left, line->qty, known ? "" : " (not in inventory)",
                                  ctx[k]->saga_id, st->order_id);
        }
        if (rcs[k] != 0)
            continue;
        for (size_t i = 0; i < st->n_stock; i++)
            find_sku(skus, n_skus, st->stock[i].sku)->take += st->stock[i].qty;
        n_res += st->n_stock;
    }
    if (n_res == 0)
        goto emit;

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
        for (size_t i = 0; rcs[k] == 0 && o.was[k] == STEP_FRESH && i < st->n_stock; i++) {
            p[np++] = txo_p_str(ctx[k]->saga_id);
            p[np++] = txo_p_str(st->stock[i].sku);
            p[np++] = txo_p_i64(st->stock[i].qty);
        }
    }
    rc = txo_tx_exec_rows(tx, ORDERS_SQL_RESERVATION_INSERT_MANY, n_res,
                          ORDERS_SQL_RESERVATION_INSERT_ROW, "", p, 3, NULL, err);
    if (rc < 0)
        goto out;
emit:
    rc = order_saga__batch_emit(tx, ctx, n, rcs, &o, "StockReserved", "stock-reserved", true, false,
                                err);
out:
    txo_rows_free(rows);
    txo_free(sql);
    txo_free(skus);
    txo_free(p);
    order_saga__batch_free(&o);
    return rc;
}
