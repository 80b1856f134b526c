/*
 * JSON payloads of the order service's outbox events and of its saga (jansson).
 *
 * Every document is compact JSON built from values, never by string formatting, so a SKU with
 * quotes or control characters cannot break it. The result is copied into memory from
 * txo_malloc() so callers free everything the service hands out with txo_free(); jansson's own
 * allocations stay inside this file.
 *
 * Thread-safety: pure functions (jansson objects are local to each call).
 */
#include <string.h>

#include <jansson.h>

#include "txo/alloc.h"
#include "orders.h"

/* Dumps doc (stolen: always released) as a NUL-terminated txo_malloc() string. */
static char *dump_owned(json_t *doc, struct txo_error *err)
{
    char *out = NULL;

    if (doc == NULL) {
        txo_error_set(err, TXO_ENOMEM,
                      "cannot build JSON payload: out of memory or a string is not UTF-8");
        goto out;
    }
    size_t len = json_dumpb(doc, NULL, 0, JSON_COMPACT);
    if (len == 0) {
        txo_error_set(err, TXO_EINVAL, "cannot encode JSON payload");
        goto out;
    }
    out = txo_malloc(len + 1);
    if (out == NULL) {
        txo_error_set(err, TXO_ENOMEM, "cannot allocate %zu bytes of JSON payload", len + 1);
        goto out;
    }
    if (json_dumpb(doc, out, len, JSON_COMPACT) != len) {
        txo_free(out);
        out = NULL;
        txo_error_set(err, TXO_EINVAL, "cannot encode JSON payload");
        goto out;
    }
    out[len] = '\0';
out:
    json_decref(doc);
    return out;
}

/* [{"sku","qty","price_cents"}, ...]; NULL when out of memory. */
static json_t *items_json(const struct order_item *items, size_t n)
{
    json_t *arr = json_array();

    if (arr == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *it =
            json_pack("{s:s, s:I, s:I}", "sku", items[i].sku, "qty", (json_int_t)items[i].qty,
                      "price_cents", (json_int_t)items[i].price_cents);
        if (it == NULL || json_array_append_new(arr, it) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

char *orders__json_order(int64_t order_id, int64_t customer_id, const struct order_item *items,
                         size_t n, int64_t total_cents, const char *created_at, bool by_command,
                         struct txo_error *err)
{
    json_t *arr = items_json(items, n);
    json_t *doc = NULL;

    if (arr != NULL) {
        /* "o" steals arr, also when json_pack fails. */
        doc = json_pack("{s:I, s:I, s:o, s:I}", "order_id", (json_int_t)order_id, "customer_id",
                        (json_int_t)customer_id, "items", arr, "total_cents",
                        (json_int_t)total_cents);
    }
    if (doc != NULL && created_at != NULL &&
        json_object_set_new(doc, "created_at", json_string(created_at)) != 0) {
        json_decref(doc);
        doc = NULL;
    }
    if (doc != NULL && by_command &&
        json_object_set_new(doc, "saga_start", json_string("command")) != 0) {
        json_decref(doc);
        doc = NULL;
    }
    return dump_owned(doc, err);
}

char *orders__json_saga_event(const char *saga_id, int64_t order_id, const struct order_item *items,
                              size_t n, int64_t amount_cents, const char *reason,
                              struct txo_error *err)
{
    json_t *doc = json_pack("{s:s, s:I}", "saga_id", saga_id, "order_id", (json_int_t)order_id);
    bool ok = doc != NULL;

    if (ok && items != NULL)
        ok = json_object_set_new(doc, "items", items_json(items, n)) == 0;
    if (ok && amount_cents >= 0)
        ok = json_object_set_new(doc, "amount_cents", json_integer(amount_cents)) == 0;
    if (ok && reason != NULL)
        ok = json_object_set_new(doc, "reason", json_string(reason)) == 0;
    if (!ok) {
        json_decref(doc);
        doc = NULL;
    }
    return dump_owned(doc, err);
}
