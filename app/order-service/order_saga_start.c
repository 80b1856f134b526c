/*
 * Starting an order's CreateOrderSaga outside the worker: with a new order in one transaction
 * (orders_create_with_saga_tx) or for an existing one (orders_start_saga). The worker starts
 * its sagas from events and commands instead (worker.c); these serve tests, benchmarks and the
 * demo, which drive sagas themselves (order_saga.h).
 *
 * Thread-safety: no shared state; each call uses only the tx/db it is given.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "txo/alloc.h"
#include "txo/log.h"
#include "order_saga.h"
#include "orders.h"
#include "orders_sql.h"

/* txo_saga_create() of the order's CreateOrderSaga, from data the caller has in hand. */
static int create_saga(struct txo_tx *tx, int64_t order_id, int64_t customer_id,
                       const struct order_item *items, size_t n, int64_t total_cents,
                       char saga_id[TXO_SAGA_ID_LEN], bool *created, struct txo_error *err)
{
    char correlation[64];
    char *payload =
        orders__json_order(order_id, customer_id, items, n, total_cents, NULL, false, err);

    if (payload == NULL)
        return err != NULL ? err->code : TXO_ENOMEM;
    snprintf(correlation, sizeof(correlation), "order:%" PRId64, order_id);
    int rc =
        txo_saga_create(tx, order_saga_def(), correlation, payload, NULL, saga_id, created, err);
    txo_free(payload);
    return rc;
}

int orders_create_with_saga_tx(struct txo_tx *tx, int64_t customer_id,
                               const struct order_item *items, size_t n, int64_t *order_id,
                               char saga_id[TXO_SAGA_ID_LEN], struct txo_error *err)
{
    int64_t id = 0;
    int64_t total = 0;
    char sid[TXO_SAGA_ID_LEN];
    int rc = orders_validate(customer_id, items, n, &total, err);

    if (rc == 0)
        rc = orders_create_tx(tx, customer_id, items, n, &id, err);
    if (rc < 0)
        return rc;
    rc = create_saga(tx, id, customer_id, items, n, total, sid, NULL, err);
    if (rc < 0)
        return rc;
    *order_id = id;
    memcpy(saga_id, sid, TXO_SAGA_ID_LEN);
    return 0;
}

struct create_arg {
    int64_t customer_id;
    const struct order_item *items;
    size_t n;
    int64_t order_id;
    char saga_id[TXO_SAGA_ID_LEN];
};

static int create_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct create_arg *a = arg;

    return orders_create_with_saga_tx(tx, a->customer_id, a->items, a->n, &a->order_id, a->saga_id,
                                      err);
}

int orders_create_with_saga(struct txo_db *db, int64_t customer_id, const struct order_item *items,
                            size_t n, int64_t *order_id, char saga_id[TXO_SAGA_ID_LEN],
                            struct txo_error *err)
{
    struct create_arg a = {.customer_id = customer_id, .items = items, .n = n};
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, create_fn, &a, err);
    if (rc < 0)
        return rc;
    *order_id = a.order_id;
    memcpy(saga_id, a.saga_id, TXO_SAGA_ID_LEN);
    TXO_LOG(TXO_LOG_DEBUG, "orders", "saga created", TXO_KV_STR("saga_id", a.saga_id),
            TXO_KV_I64("order_id", a.order_id));
    return 0;
}

struct start_arg {
    int64_t order_id;
    char saga_id[TXO_SAGA_ID_LEN];
    bool created;
};

static int start_saga_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct start_arg *a = arg;
    struct txo_rows *rows = NULL;
    struct order_item *items = NULL;
    struct txo_param p[] = {txo_p_i64(a->order_id)};
    int rc;

    a->created = false;
    rc = txo_tx_query(tx, ORDERS_SQL_SELECT_ORDER_ITEMS, p, 1, &rows, err);
    if (rc < 0)
        goto out;
    size_t n = txo_rows_count(rows);
    if (n == 0) {
        rc = txo_error_set(err, TXO_ENOTFOUND, "order not found: order_id=%" PRId64, a->order_id);
        goto out;
    }
    items = txo_calloc(n, sizeof(*items));
    if (items == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "cannot load %zu items of order_id=%" PRId64, n,
                           a->order_id);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        items[i].sku = txo_rows_str(rows, i, ORDER_ITEMS_COL_SKU, NULL);
        items[i].qty = (int32_t)txo_rows_i64(rows, i, ORDER_ITEMS_COL_QTY);
        items[i].price_cents = txo_rows_i64(rows, i, ORDER_ITEMS_COL_PRICE);
    }
    rc = create_saga(tx, a->order_id, txo_rows_i64(rows, 0, ORDER_ITEMS_COL_CUSTOMER), items, n,
                     txo_rows_i64(rows, 0, ORDER_ITEMS_COL_TOTAL), a->saga_id, &a->created, err);
out:
    txo_free(items);
    txo_rows_free(rows);
    return rc;
}

int orders_start_saga(struct txo_db *db, int64_t order_id, char saga_id[TXO_SAGA_ID_LEN],
                      bool *created, struct txo_error *err)
{
    struct start_arg a;

    memset(&a, 0, sizeof(a));
    a.order_id = order_id;
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, start_saga_fn, &a, err);
    if (rc < 0)
        return rc;
    memcpy(saga_id, a.saga_id, TXO_SAGA_ID_LEN);
    if (created != NULL)
        *created = a.created;
    if (a.created)
        TXO_LOG(TXO_LOG_DEBUG, "orders", "saga created", TXO_KV_STR("saga_id", a.saga_id),
                TXO_KV_I64("order_id", order_id));
    return 0;
}
