/*
 * Creating orders (the transactional outbox: the order and its event in one transaction),
 * cancelling them, and their stock. Their saga is order_saga.h's.
 *
 * orders_create_tx() is the heart of the outbox pattern: the order, its items and the
 * OrderCreated event are written by one function into one transaction that the caller owns,
 * so either all three commit or none does. It never commits by itself, which lets a caller
 * (the HTTP API with its idempotency key row) add its own rows to the same transaction.
 *
 * Validation happens before the first statement, and the "every SKU exists" check before the
 * first write, so a rejected order leaves nothing behind even if the caller commits anyway.
 *
 * Thread-safety: no shared state; each call uses only the tx/db it is given.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "txo/alloc.h"
#include "txo/clock.h"
#include "txo/log.h"
#include "txo/cmdq.h"
#include "txo/outbox.h"
#include "txo/text.h"
#include "orders.h"
#include "orders_sql.h"

/* Generated from app/order-service/migrations by cmake/embed_migrations.cmake. */
extern const struct txo_migration_set orders__migrations;

const struct txo_migration_set *orders_migrations(void)
{
    return &orders__migrations;
}

int orders_migrate(struct txo_db *db, unsigned *applied, unsigned *total, struct txo_error *err)
{
    unsigned a1 = 0, t1 = 0, a2 = 0, t2 = 0;
    int rc = txo_migrate_set(db, txo_core_migrations(), &a1, &t1, err);
    if (rc == 0)
        rc = txo_migrate_set(db, orders_migrations(), &a2, &t2, err);
    if (rc != 0)
        return rc;
    if (applied != NULL)
        *applied = a1 + a2;
    if (total != NULL)
        *total = t1 + t2;
    return 0;
}

static const char *const status_names[ORDER_STATUS_COUNT] = {
    [ORDER_CREATED] = "CREATED",
    [ORDER_CONFIRMED] = "CONFIRMED",
    [ORDER_CANCELLED] = "CANCELLED",
};

/* status_moves[from][to]: the whole order state machine. */
static const bool status_moves[ORDER_STATUS_COUNT][ORDER_STATUS_COUNT] = {
    [ORDER_CREATED] = {[ORDER_CONFIRMED] = true, [ORDER_CANCELLED] = true},
};

const char *order_status_name(enum order_status s)
{
    return (unsigned)s < ORDER_STATUS_COUNT ? status_names[s] : "UNKNOWN";
}

int order_status_parse(const char *name, enum order_status *out)
{
    for (int i = 0; name != NULL && i < ORDER_STATUS_COUNT; i++)
        if (strcmp(status_names[i], name) == 0) {
            *out = (enum order_status)i;
            return 0;
        }
    return TXO_EINVAL;
}

bool order_status_can_move(enum order_status from, enum order_status to)
{
    return (unsigned)from < ORDER_STATUS_COUNT && (unsigned)to < ORDER_STATUS_COUNT &&
           status_moves[from][to];
}

int orders_validate(int64_t customer_id, const struct order_item *items, size_t n,
                    int64_t *total_cents, struct txo_error *err)
{
    int64_t total = 0;

    if (customer_id <= 0)
        return txo_error_set(err, TXO_EINVAL, "customer_id must be > 0, got %" PRId64, customer_id);
    if (n == 0 || items == NULL)
        return txo_error_set(err, TXO_EINVAL, "an order needs at least one item");
    if (n > ORDER_MAX_ITEMS)
        return txo_error_set(err, TXO_EINVAL, "an order has at most %d items, got %zu",
                             ORDER_MAX_ITEMS, n);
    for (size_t i = 0; i < n; i++) {
        const struct order_item *it = &items[i];
        size_t sku_len = it->sku != NULL ? strnlen(it->sku, ORDER_SKU_MAX + 1) : 0;
        int64_t line;

        if (sku_len == 0 || sku_len > ORDER_SKU_MAX)
            return txo_error_set(err, TXO_EINVAL, "items[%zu].sku must be 1..%d bytes, got %s", i,
                                 ORDER_SKU_MAX, sku_len == 0 ? "an empty one" : "a longer one");
        if (!txo_utf8_valid(it->sku, sku_len))
            return txo_error_set(err, TXO_EINVAL, "items[%zu].sku is not valid UTF-8", i);
        if (it->qty < 1 || it->qty > ORDER_MAX_QTY)
            return txo_error_set(err, TXO_EINVAL, "items[%zu].qty must be 1..%d, got %" PRId32, i,
                                 ORDER_MAX_QTY, it->qty);
        if (it->price_cents < 0 || it->price_cents > ORDER_MAX_PRICE_CENTS)
            return txo_error_set(err, TXO_EINVAL,
                                 "items[%zu].price_cents must be 0..%" PRId64 ", got %" PRId64, i,
                                 ORDER_MAX_PRICE_CENTS, it->price_cents);
        if (__builtin_mul_overflow((int64_t)it->qty, it->price_cents, &line) ||
            __builtin_add_overflow(total, line, &total))
            return txo_error_set(err, TXO_EINVAL,
                                 "items[%zu]: order total overflows 64 bits (qty=%" PRId32
                                 " price_cents=%" PRId64 ")",
                                 i, it->qty, it->price_cents);
    }
    if (total_cents != NULL)
        *total_cents = total;
    return 0;
}

/* ---- one order: a group of one ---- */

int orders_create_one_tx(struct txo_tx *tx, struct order_new *o, bool by_command,
                         struct txo_error *err)
{
    int64_t total = 0, step = 0;
    int rc = orders_validate(o->customer_id, o->items, o->n, &total, err);
    if (rc == 0)
        rc = orders_check_skus_group_tx(tx, o, 1, &step, err);
    if (rc == 0 && o->unknown_sku)
        rc = txo_error_set(err, TXO_EINVAL, "%s", o->why);
    if (rc == 0)
        rc = orders_create_group_tx(tx, o, 1, by_command, step, err);
    return rc;
}

int orders_create_tx(struct txo_tx *tx, int64_t customer_id, const struct order_item *items,
                     size_t n, int64_t *order_id, struct txo_error *err)
{
    struct order_new o = {.customer_id = customer_id, .items = items, .n = n};
    int rc = orders_create_one_tx(tx, &o, false, err);
    if (rc == 0)
        *order_id = o.order_id;
    return rc;
}

int orders_create_async_tx(struct txo_tx *tx, int64_t customer_id, const struct order_item *items,
                           size_t n, int64_t *order_id, struct txo_error *err)
{
    struct order_new o = {.customer_id = customer_id, .items = items, .n = n};
    int rc = orders_create_one_tx(tx, &o, true, err);
    if (rc == 0)
        *order_id = o.order_id;
    return rc;
}

/* ---- a group of orders in one transaction ---- */

int orders_check_skus_group_tx(struct txo_tx *tx, struct order_new *orders, size_t n,
                               int64_t *autoinc_step, struct txo_error *err)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += orders[i].n;
    *autoinc_step = 0;
    if (total == 0)
        return 0;
    size_t slots = txo_sql_in_list_size(total);
    struct txo_param *params = txo_calloc(slots, sizeof(*params));
    char *sql = NULL;
    struct txo_rows *rows = NULL;
    int rc;
    if (params == NULL)
        goto nomem;
    size_t k = 0;
    const char *last = NULL;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < orders[i].n; j++) {
            last = orders[i].items[j].sku;
            params[k++] = txo_p_str(last);
        }
    while (k < slots)
        params[k++] = txo_p_str(last);
    sql = txo_sql_in_list(ORDERS_SQL_GROUP_KNOWN_SKUS_BEFORE, slots, "");
    if (sql == NULL)
        goto nomem;
    rc = txo_tx_query(tx, sql, params, slots, &rows, err);
    if (rc < 0)
        goto out;
    size_t n_rows = txo_rows_count(rows);
    if (n_rows > 0)
        *autoinc_step = txo_rows_i64(rows, 0, 1);
    for (size_t i = 0; i < n; i++) {
        orders[i].unknown_sku = false;
        orders[i].why[0] = '\0';
        for (size_t j = 0; j < orders[i].n && !orders[i].unknown_sku; j++) {
            bool found = false;
            for (size_t r = 0; r < n_rows && !found; r++) {
                const char *sku = txo_rows_str(rows, r, 0, NULL);
                found = sku != NULL && strcmp(sku, orders[i].items[j].sku) == 0;
            }
            if (!found) {
                orders[i].unknown_sku = true;
                snprintf(orders[i].why, sizeof(orders[i].why), "unknown sku items[%zu].sku=%s", j,
                         orders[i].items[j].sku);
            }
        }
    }
    rc = 0;
    goto out;
nomem:
    rc = txo_error_set(err, TXO_ENOMEM, "cannot build the sku check of %zu orders", n);
out:
    txo_rows_free(rows);
    txo_free(params);
    txo_free(sql);
    return rc;
}

/* Appends text to the growing buffer *buf (*len used, *cap allocated). False when out of
 * memory. */
static bool buf_append(char **buf, size_t *len, size_t *cap, const char *text)
{
    size_t add = strlen(text);
    if (*len + add + 1 > *cap) {
        size_t want = (*cap == 0 ? 4096 : *cap);
        while (want < *len + add + 1)
            want *= 2;
        char *p = txo_realloc(*buf, want);
        if (p == NULL)
            return false;
        *buf = p;
        *cap = want;
    }
    memcpy(*buf + *len, text, add + 1);
    *len += add;
    return true;
}

int orders_create_group_tx(struct txo_tx *tx, struct order_new *orders, size_t n, bool by_command,
                           int64_t autoinc_step, struct txo_error *err)
{
    int64_t *totals = txo_calloc(n + 1, sizeof(*totals));
    char **payloads = txo_calloc(n + 1, sizeof(*payloads));
    char(*keys)[64] = txo_calloc(n + 1, sizeof(*keys));
    char(*agg_ids)[24] = txo_calloc(n + 1, sizeof(*agg_ids));
    struct txo_outbox_event *events = txo_calloc(n + 1, sizeof(*events));
    struct txo_param *params = txo_calloc(2 * n + 1, sizeof(*params));
    char *all = NULL;
    size_t all_len = 0, all_cap = 0, n_items = 0;
    int rc;

    if (n == 0) {
        rc = 0;
        goto out;
    }
    if (totals == NULL || payloads == NULL || keys == NULL || agg_ids == NULL || events == NULL ||
        params == NULL)
        goto nomem;
    if (autoinc_step < 1)
        autoinc_step = 1;
    for (size_t i = 0; i < n; i++) {
        rc = orders_validate(orders[i].customer_id, orders[i].items, orders[i].n, &totals[i], err);
        if (rc < 0)
            goto out;
        params[2 * i] = txo_p_i64(orders[i].customer_id);
        params[2 * i + 1] = txo_p_i64(totals[i]);
        n_items += orders[i].n;
    }
    struct txo_exec_result res;
    rc = txo_tx_exec_rows(tx, ORDERS_SQL_GROUP_INSERT_ORDERS, n, ORDERS_SQL_GROUP_ORDER_ROW, "",
                          params, 2, &res, err);
    if (rc < 0)
        goto out;
    if (res.affected_rows != n || res.insert_id == 0) {
        rc =
            txo_error_set(err, TXO_EDB, "group of %zu orders: %llu inserted (first id %llu)", n,
                          (unsigned long long)res.affected_rows, (unsigned long long)res.insert_id);
        goto out;
    }

    char created_at[TXO_RFC3339_LEN];
    txo_format_rfc3339(txo_realtime_us(), created_at);
    if (!buf_append(&all, &all_len, &all_cap, "["))
        goto nomem;
    for (size_t i = 0; i < n; i++) {
        orders[i].order_id = (int64_t)res.insert_id + (int64_t)i * autoinc_step;
        payloads[i] = orders__json_order(orders[i].order_id, orders[i].customer_id, orders[i].items,
                                         orders[i].n, totals[i], created_at, by_command, err);
        if (payloads[i] == NULL) {
            rc = err != NULL ? err->code : TXO_ENOMEM;
            goto out;
        }
        if ((i > 0 && !buf_append(&all, &all_len, &all_cap, ",")) ||
            !buf_append(&all, &all_len, &all_cap, payloads[i]))
            goto nomem;
    }
    if (!buf_append(&all, &all_len, &all_cap, "]"))
        goto nomem;

    struct txo_param ip[] = {txo_p_strn(all, all_len)};
    rc = txo_tx_exec(tx, ORDERS_SQL_GROUP_INSERT_ITEMS, ip, 1, &res, err);
    if (rc < 0)
        goto out;
    if (res.affected_rows != n_items) {
        rc = txo_error_set(err, TXO_EDB, "group of %zu orders: %llu of %zu items inserted", n,
                           (unsigned long long)res.affected_rows, n_items);
        goto out;
    }

    for (size_t i = 0; i < n; i++) {
        snprintf(keys[i], sizeof(keys[i]), "order:%" PRId64 ":created", orders[i].order_id);
        snprintf(agg_ids[i], sizeof(agg_ids[i]), "%" PRId64, orders[i].order_id);
        events[i] = (struct txo_outbox_event){
            .aggregate_type = "order",
            .aggregate_id = agg_ids[i],
            .event_type = "OrderCreated",
            .payload_json = payloads[i],
            .payload_len = 0,
            .idempotency_key = keys[i],
            .trace = orders[i].trace,
        };
    }
    rc = txo_outbox_append_many(tx, events, n, err);
    if (rc < 0) {
        txo_error_wrap(err, "OrderCreated events of a group of %zu orders", n);
        goto out;
    }
    for (size_t i = 0; by_command && i < n; i++) {
        rc = txo_cmdq_enqueue(tx, ORDERS_START_SAGA_COMMAND, payloads[i], orders[i].trace, NULL,
                              err);
        if (rc < 0)
            goto out;
    }
    TXO_LOG(TXO_LOG_DEBUG, "orders", "group of orders created", TXO_KV_U64("n", n),
            TXO_KV_I64("first_order_id", orders[0].order_id), TXO_KV_U64("items", n_items));
    rc = 0;
    goto out;
nomem:
    rc = txo_error_set(err, TXO_ENOMEM, "cannot build the writes of a group of %zu orders", n);
out:
    for (size_t i = 0; payloads != NULL && i < n; i++)
        txo_free(payloads[i]);
    txo_free(payloads);
    txo_free(totals);
    txo_free(keys);
    txo_free(agg_ids);
    txo_free(events);
    txo_free(params);
    txo_free(all);
    return rc;
}

struct create_arg {
    int64_t customer_id;
    const struct order_item *items;
    size_t n;
    int64_t order_id;
};

static int create_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct create_arg *a = arg;

    return orders_create_tx(tx, a->customer_id, a->items, a->n, &a->order_id, err);
}

int orders_create(struct txo_db *db, int64_t customer_id, const struct order_item *items, size_t n,
                  int64_t *order_id, struct txo_error *err)
{
    struct create_arg a;

    memset(&a, 0, sizeof(a));
    a.customer_id = customer_id;
    a.items = items;
    a.n = n;
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, create_fn, &a, err);
    if (rc < 0)
        return rc;
    *order_id = a.order_id;
    return 0;
}

int orders_stock_check(const struct order_stock *s, struct txo_error *err)
{
    size_t len = s->sku != NULL ? strnlen(s->sku, ORDER_SKU_MAX + 1) : 0;

    if (len == 0)
        return txo_error_set(err, TXO_EINVAL, "sku must be 1..%d bytes, got an empty one",
                             ORDER_SKU_MAX);
    if (len > ORDER_SKU_MAX)
        return txo_error_set(err, TXO_EINVAL, "sku must be 1..%d bytes, got %zu", ORDER_SKU_MAX,
                             strlen(s->sku));
    if (!txo_utf8_valid(s->sku, len))
        return txo_error_set(err, TXO_EINVAL, "sku is not valid UTF-8");
    if (s->available < 0)
        return txo_error_set(err, TXO_EINVAL, "available must be 0..%" PRId32 ", got %" PRId32,
                             INT32_MAX, s->available);
    return 0;
}

/* The entry's SKU for a message: its first 40 bytes or so, with '?' for each byte that is not
 * part of a printable UTF-8 character, and "..." when cut. */
static void shown_sku(const char *sku, char out[48])
{
    size_t len = sku != NULL ? strlen(sku) : 0;
    size_t o = 0;
    size_t i = 0;
    while (i < len && o < 40) {
        size_t c = txo_utf8_char_len(sku + i, len - i);
        if (c == 0 || (c == 1 && ((unsigned char)sku[i] < 0x20 || sku[i] == 0x7f))) {
            out[o++] = '?';
            i++;
            continue;
        }
        memcpy(out + o, sku + i, c);
        o += c;
        i += c;
    }
    snprintf(out + o, 48 - o, "%s", i < len ? "..." : "");
}

int orders_stock_check_list(const struct order_stock *list, size_t n, struct txo_error *err)
{
    for (size_t i = 0; i < n; i++) {
        char shown[48];
        shown_sku(list[i].sku, shown);
        int rc = orders_stock_check(&list[i], err);
        if (rc != 0) {
            txo_error_wrap(err, "stock entry %zu (sku \"%s\")", i + 1, shown);
            return rc;
        }
        for (size_t k = 0; k < i; k++)
            if (strcmp(list[k].sku, list[i].sku) == 0)
                return txo_error_set(err, TXO_EINVAL,
                                     "stock entry %zu (sku \"%s\"): the sku of entry %zu again",
                                     i + 1, shown, k + 1);
    }
    return 0;
}

/* Writes the stock of a SKU with sql (set or ensure), after checking the arguments. */
static int write_stock(struct txo_db *db, const char *sql, const char *sku, int32_t available,
                       struct txo_error *err)
{
    struct order_stock s = {.sku = sku, .available = available};
    int rc = orders_stock_check(&s, err);
    if (rc != 0)
        return rc;
    struct txo_param p[] = {txo_p_str(sku), txo_p_i64(available)};
    return txo_db_exec(db, sql, p, TXO_ARRAY_LEN(p), NULL, err);
}

int orders_set_inventory(struct txo_db *db, const char *sku, int32_t available,
                         struct txo_error *err)
{
    return write_stock(db, ORDERS_SQL_SET_INVENTORY, sku, available, err);
}

int orders_ensure_inventory(struct txo_db *db, const char *sku, int32_t available,
                            struct txo_error *err)
{
    return write_stock(db, ORDERS_SQL_ENSURE_INVENTORY, sku, available, err);
}

struct ensure_list_arg {
    const struct order_stock *list;
    const size_t *order; /* indexes into list, ascending SKU */
    size_t n;
};

static int ensure_list_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    const struct ensure_list_arg *a = arg;
    for (size_t k = 0; k < a->n; k++) {
        const struct order_stock *s = &a->list[a->order[k]];
        struct txo_param p[] = {txo_p_str(s->sku), txo_p_i64(s->available)};
        int rc = txo_tx_exec(tx, ORDERS_SQL_ENSURE_INVENTORY, p, TXO_ARRAY_LEN(p), NULL, err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int orders_ensure_inventory_list(struct txo_db *db, const struct order_stock *list, size_t n,
                                 struct txo_error *err)
{
    int rc = orders_stock_check_list(list, n, err);
    if (rc != 0 || n == 0)
        return rc;
    size_t *order = txo_calloc(n, sizeof(*order));
    if (order == NULL)
        return txo_error_set(err, TXO_ENOMEM, "out of memory writing %zu SKUs", n);
    /* Ascending SKU, the lock order of every inventory transaction (n is a command line's). */
    for (size_t i = 0; i < n; i++) {
        size_t k = i;
        for (; k > 0 && strcmp(list[order[k - 1]].sku, list[i].sku) > 0; k--)
            order[k] = order[k - 1];
        order[k] = i;
    }
    struct ensure_list_arg a = {.list = list, .order = order, .n = n};
    rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, ensure_list_fn, &a, err);
    txo_free(order);
    return rc;
}

int orders_cancel_tx(struct txo_tx *tx, int64_t order_id, int64_t expected_version,
                     int64_t *new_version, struct txo_error *err)
{
    struct txo_param p[] = {txo_p_i64(order_id), txo_p_i64(expected_version)};
    struct txo_exec_result res;
    int rc = txo_tx_exec(tx, ORDERS_SQL_ORDER_CANCEL_AT_VERSION, p, 2, &res, err);
    if (rc < 0)
        return rc;
    if (res.affected_rows == 0) {
        struct txo_rows *rows = NULL;
        rc = txo_tx_query(tx, ORDERS_SQL_ORDER_VERSION, p, 1, &rows, err);
        if (rc < 0)
            return rc;
        if (txo_rows_count(rows) == 0)
            rc = txo_error_set(err, TXO_ENOTFOUND, "order %" PRId64 " not found", order_id);
        else if (txo_rows_i64(rows, 0, ORDER_VERSION_COL_VERSION) != expected_version)
            rc = txo_error_set(err, TXO_ECONFLICT,
                               "order %" PRId64 " is at version %" PRId64 ", not %" PRId64
                               " (status %s): read it again",
                               order_id, txo_rows_i64(rows, 0, ORDER_VERSION_COL_VERSION),
                               expected_version,
                               txo_rows_str(rows, 0, ORDER_VERSION_COL_STATUS, NULL));
        else
            rc = txo_error_set(err, TXO_ESTATE,
                               "order %" PRId64 " is %s: only CREATED orders "
                               "can be cancelled",
                               order_id, txo_rows_str(rows, 0, ORDER_VERSION_COL_STATUS, NULL));
        txo_rows_free(rows);
        return rc;
    }
    char payload[160];
    snprintf(payload, sizeof(payload),
             "{\"order_id\":%" PRId64 ",\"reason\":\"cancelled by the customer\"}", order_id);
    char key[64];
    snprintf(key, sizeof(key), "order:%" PRId64 ":cancelled", order_id);
    char aggregate_id[24];
    snprintf(aggregate_id, sizeof(aggregate_id), "%" PRId64, order_id);
    struct txo_outbox_event ev = {
        .aggregate_type = "order",
        .aggregate_id = aggregate_id,
        .event_type = "OrderCancelled",
        .payload_json = payload,
        .idempotency_key = key,
    };
    rc = txo_outbox_append(tx, &ev, 0, NULL, NULL, err);
    if (rc == 0 && new_version != NULL)
        *new_version = expected_version + 1;
    return rc;
}
