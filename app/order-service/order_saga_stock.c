/*
 * The ReserveStock step of the CreateOrderSaga and its compensation ReleaseStock: the
 * per-saga action and undo, and the batch form of the action (order_saga_steps.h). A re-run
 * is judged by reservation_found(), on both paths.
 *
 * Lock order: the inventory rows are locked in ascending SKU order (the payload's lines are
 * sorted by decode, the batch's SKUs here), so concurrent reservations serialise on the first
 * common SKU instead of deadlocking.
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

/* ReserveStock, per SKU: only this saga's RESERVED reservation is the step done already. */
static enum step_found reservation_found(const char *status)
{
    if (status == NULL)
        return STEP_FRESH;
    return strcmp(status, "RESERVED") == 0 ? STEP_REDONE : STEP_REFUSED;
}

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
    int rc = order_saga__query_str(tx, ORDERS_SQL_RESERVATION_LOCK, rp, 2, status, sizeof(status),
                                   &found, err);

    if (rc < 0)
        return rc;
    enum step_found was = reservation_found(found ? status : NULL);
    if (was == STEP_REDONE)
        return 0; /* a re-run: this SKU is reserved already */
    if (was == STEP_REFUSED)
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
int order_saga__reserve_stock(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                              struct txo_error *err)
{
    const struct order_saga_state *st = order_saga__state(ctx, err);

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
    return order_saga__emit(tx, ctx, st, "StockReserved", "stock-reserved", true, -1, NULL, err);
}

int order_saga__release_stock(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                              struct txo_error *err)
{
    const struct order_saga_state *st = order_saga__state(ctx, err);
    struct txo_rows *rows = NULL;
    int rc;

    if (st == NULL)
        return TXO_EINVAL;
    if (order_saga__faults(ctx)->fail_release)
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
    rc = order_saga__emit(tx, ctx, st, "StockReleased", "stock-released", true, -1, NULL, err);
out:
    txo_rows_free(rows);
    return rc;
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
int order_saga__reserve_stock_batch(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx,
                                    size_t n, int *outcome, struct txo_error *err)
{
    size_t lines = 0;
    for (size_t k = 0; k < n; k++) {
        const struct order_saga_state *st = order_saga__batch_state(ctx[k], &outcome[k]);
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
    rc = order_saga__batch_query(tx, ORDERS_SQL_INVENTORY_LOCK_MANY,
                                 ORDERS_SQL_INVENTORY_LOCK_MANY_END, p, n_skus, &rows, err);
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
    rc = order_saga__batch_query(tx, ORDERS_SQL_RESERVATIONS_MANY, "", p, n, &rows, err);
    if (rc < 0)
        goto out;
    order_saga__batch_judge(rows, ids, n, outcome, reservation_found);

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
    rc = order_saga__batch_insert(tx, ORDERS_SQL_RESERVATION_INSERT_MANY,
                                  ORDERS_SQL_RESERVATION_INSERT_ROW, n_res, p, 3, NULL, err);
    if (rc == 0)
        rc = order_saga__batch_emit(tx, ctx, n, outcome, "StockReserved", "stock-reserved", true,
                                    false, err);
out:
    txo_rows_free(rows);
    txo_free(sql);
    txo_free(skus);
    txo_free(p);
    txo_free(ids);
    return rc;
}
