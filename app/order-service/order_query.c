/*
 * Reading an order back for GET /orders/{id}: the order row, its items, and the state of its
 * saga with every step. Consistent reads only (no locks), in one READ COMMITTED transaction
 * for the order and its items; the saga is read after it, so a client may see a saga one step
 * further than the order row (never the reverse: the order's status changes in the saga's
 * own transactions). The same order is also the dashboard's record of it (orders_find_record).
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "orders.h"
#include "orders_sql.h"
#include "txo/txo.h"

struct get_args {
    int64_t order_id;
    json_t *doc;
    int64_t version;
};

static int read_order(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct get_args *a = arg;
    struct txo_param p[] = {txo_p_i64(a->order_id)};
    struct txo_rows *order = NULL;
    struct txo_rows *items = NULL;
    int rc = txo_tx_query(tx, ORDERS_SQL_GET_ORDER, p, 1, &order, err);
    if (rc != 0)
        goto out;
    if (txo_rows_count(order) == 0) {
        rc = txo_error_set(err, TXO_ENOTFOUND, "order %" PRId64 " not found", a->order_id);
        goto out;
    }
    a->version = txo_rows_i64(order, 0, GET_ORDER_COL_VERSION);
    rc = txo_tx_query(tx, ORDERS_SQL_GET_ITEMS, p, 1, &items, err);
    if (rc != 0)
        goto out;
    json_t *list = json_array();
    for (size_t i = 0; list != NULL && i < txo_rows_count(items); i++)
        json_array_append_new(
            list,
            json_pack("{s:s,s:I,s:I}", "sku", txo_rows_str(items, i, GET_ITEMS_COL_SKU, NULL),
                      "qty", (json_int_t)txo_rows_i64(items, i, GET_ITEMS_COL_QTY), "price_cents",
                      (json_int_t)txo_rows_i64(items, i, GET_ITEMS_COL_PRICE_CENTS)));
    json_decref(a->doc);
    a->doc = json_pack("{s:I,s:I,s:s,s:I,s:I,s:s,s:s,s:o}", "order_id", (json_int_t)a->order_id,
                       "customer_id", (json_int_t)txo_rows_i64(order, 0, GET_ORDER_COL_CUSTOMER_ID),
                       "status", txo_rows_str(order, 0, GET_ORDER_COL_STATUS, NULL), "total_cents",
                       (json_int_t)txo_rows_i64(order, 0, GET_ORDER_COL_TOTAL_CENTS), "version",
                       (json_int_t)a->version, "created_at",
                       txo_rows_str(order, 0, GET_ORDER_COL_CREATED_AT, NULL), "updated_at",
                       txo_rows_str(order, 0, GET_ORDER_COL_UPDATED_AT, NULL), "items", list);
    if (a->doc == NULL)
        rc = txo_error_set(err, TXO_ENOMEM, "JSON of order %" PRId64, a->order_id);
out:
    txo_rows_free(order);
    txo_rows_free(items);
    return rc;
}

/* Adds "saga": {...} (or null when the order has no saga yet) to doc. */
static int add_saga(struct txo_db *db, int64_t order_id, json_t *doc, struct txo_error *err)
{
    char correlation[64];
    snprintf(correlation, sizeof(correlation), "order:%" PRId64, order_id);
    char saga_id[TXO_SAGA_ID_LEN];
    struct txo_error find_err;
    txo_error_init(&find_err);
    int rc = txo_saga_find(db, ORDER_SAGA_TYPE, correlation, saga_id, &find_err);
    if (rc == TXO_ENOTFOUND)
        return json_object_set_new(doc, "saga", json_null()) == 0
                   ? 0
                   : txo_error_set(err, TXO_ENOMEM, "order JSON");
    if (rc != 0) {
        if (err != NULL)
            *err = find_err;
        return rc;
    }
    struct txo_saga_info info;
    rc = txo_saga_load(db, saga_id, &info, err);
    if (rc != 0)
        return rc;
    char *text = txo_saga_info_json(&info, err);
    txo_saga_info_release(&info);
    if (text == NULL)
        return TXO_ENOMEM;
    json_t *saga = json_loads(text, 0, NULL);
    txo_free(text);
    if (saga != NULL)
        json_object_del(saga, "payload"); /* the order already says it */
    if (saga == NULL || json_object_set_new(doc, "saga", saga) != 0)
        return txo_error_set(err, TXO_ENOMEM, "order JSON");
    return 0;
}

int orders_get_json(struct txo_db *db, int64_t order_id, char **out, int64_t *version,
                    struct txo_error *err)
{
    struct get_args a = {.order_id = order_id, .doc = NULL};
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, read_order, &a, err);
    if (rc == 0)
        rc = add_saga(db, order_id, a.doc, err);
    if (rc == 0) {
        char *dumped = json_dumps(a.doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
        *out = dumped != NULL ? txo_strdup(dumped) : NULL;
        free(dumped); /* jansson allocates with malloc */
        if (*out == NULL)
            rc = txo_error_set(err, TXO_ENOMEM, "order JSON");
        else if (version != NULL)
            *version = a.version;
    }
    json_decref(a.doc);
    return rc;
}

/* The fields of the order document that the record shows as they are. */
static const char *const record_fields[] = {"order_id", "customer_id", "total_cents",
                                            "version",  "created_at",  "updated_at"};

/* The items of an order document as a record's table. */
static json_t *items_table(json_t *items)
{
    json_t *rows = json_array();
    for (size_t i = 0; rows != NULL && i < json_array_size(items); i++) {
        json_t *it = json_array_get(items, i);
        json_array_append_new(rows, json_pack("[O,O,O]", json_object_get(it, "sku"),
                                              json_object_get(it, "qty"),
                                              json_object_get(it, "price_cents")));
    }
    return json_pack("{s:s,s:[s,s,s],s:o}", "title", "items", "columns", "sku", "qty",
                     "price_cents", "rows", rows);
}

int orders_find_record(void *arg, struct txo_db *db, const char *query, char **json,
                       struct txo_error *err)
{
    (void)arg;
    char *end = NULL;
    errno = 0;
    long long id = strtoll(query, &end, 10);
    if (end == query || *end != '\0' || errno == ERANGE || id <= 0)
        return txo_error_set(err, TXO_ENOTFOUND, "%s is not an order id", query);
    char *text = NULL;
    int rc = orders_get_json(db, (int64_t)id, &text, NULL, err);
    if (rc != 0)
        return rc;
    json_t *order = json_loads(text, 0, NULL);
    txo_free(text);
    json_t *fields = json_object();
    for (size_t i = 0; order != NULL && fields != NULL && i < TXO_ARRAY_LEN(record_fields); i++)
        json_object_set(fields, record_fields[i], json_object_get(order, record_fields[i]));
    json_t *saga_id = json_object_get(json_object_get(order, "saga"), "saga_id");
    char title[64];
    snprintf(title, sizeof(title), "Order %lld", id);
    json_t *record = order == NULL
                         ? NULL
                         : json_pack("{s:s,s:O,s:o,s:[o],s:o}", "title", title, "status",
                                     json_object_get(order, "status"), "fields", fields, "tables",
                                     items_table(json_object_get(order, "items")), "sagas",
                                     saga_id != NULL ? json_pack("[O]", saga_id) : json_array());
    if (order == NULL)
        json_decref(fields);
    char *dumped = record != NULL ? json_dumps(record, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(record);
    json_decref(order);
    *json = dumped != NULL ? txo_strdup(dumped) : NULL;
    free(dumped); /* jansson allocates with malloc */
    if (*json == NULL)
        return txo_error_set(err, TXO_ENOMEM, "order %lld as a record", id);
    return 0;
}
