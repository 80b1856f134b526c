/*
 * Creating orders against a real MariaDB (the transactional outbox): the order, its items and the
 * OrderCreated event commit together or not at all; invalid orders are refused before anything
 * is written; the saga of an order is created once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "order_saga.h"
#include "orders.h"
#include "testdb.h"
#include "testorders.h"

/* Each test sells from 10 of iphone-15 and 10 of case. */
static void stock(struct testdb *t)
{
    testorders_stock(t->db, "iphone-15", 10);
    testorders_stock(t->db, "case", 10);
}

static int64_t count(struct txo_db *db, const char *table)
{
    char sql[128];
    snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM %s", table);
    return testdb_i64(db, sql, NULL, 0);
}

/* Asserts that the string column read by sql (one i64 parameter) equals want. */
static void assert_str_col(struct txo_db *db, const char *sql, int64_t id, const char *want)
{
    struct txo_param p = txo_p_i64(id);
    char *got = testdb_str(db, sql, &p, 1);
    assert_non_null(got);
    assert_string_equal(got, want);
    txo_free(got);
}

static void test_create_commits_order_items_and_event(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    struct order_item items[] = {{"iphone-15", 2, 100000}, {"case", 3, 1500}};
    int64_t id = 0;

    assert_int_equal(orders_create(t->db, 123, items, 2, &id, &err), 0);
    assert_true(id > 0);
    struct txo_param p = txo_p_i64(id);

    assert_str_col(t->db, "SELECT status FROM orders WHERE id = ?", id, "CREATED");
    assert_int_equal(testdb_i64(t->db, "SELECT customer_id FROM orders WHERE id = ?", &p, 1), 123);
    assert_int_equal(testdb_i64(t->db, "SELECT total_cents FROM orders WHERE id = ?", &p, 1),
                     204500);
    assert_int_equal(
        testdb_i64(t->db, "SELECT COUNT(*) FROM order_items WHERE order_id = ?", &p, 1), 2);
    assert_int_equal(testdb_i64(t->db,
                                "SELECT qty * 1000000 + price_cents FROM order_items "
                                "WHERE order_id = ? AND sku = 'case'",
                                &p, 1),
                     3 * 1000000 + 1500);

    /* Exactly one event, PENDING, with its documented key and payload. */
    assert_int_equal(count(t->db, "outbox_events"), 1);
#define EV(expr)                                                                                   \
    "SELECT " expr " FROM outbox_events WHERE aggregate_type = 'order' AND aggregate_id = ? "      \
    "AND event_type = 'OrderCreated'"
    char key[64];
    snprintf(key, sizeof(key), "order:%lld:created", (long long)id);
    assert_str_col(t->db, EV("idempotency_key"), id, key);
    assert_str_col(t->db, EV("status"), id, "PENDING");
    assert_int_equal(testdb_i64(t->db, EV("JSON_EXTRACT(payload, '$.order_id')"), &p, 1), id);
    assert_int_equal(testdb_i64(t->db, EV("JSON_EXTRACT(payload, '$.customer_id')"), &p, 1), 123);
    assert_int_equal(testdb_i64(t->db, EV("JSON_EXTRACT(payload, '$.total_cents')"), &p, 1),
                     204500);
    assert_int_equal(testdb_i64(t->db, EV("JSON_LENGTH(payload, '$.items')"), &p, 1), 2);
    assert_str_col(t->db, EV("JSON_UNQUOTE(JSON_EXTRACT(payload, '$.items[1].sku'))"), id, "case");
    assert_int_equal(testdb_i64(t->db, EV("JSON_EXTRACT(payload, '$.items[1].qty')"), &p, 1), 3);
    assert_int_equal(
        testdb_i64(t->db, EV("JSON_EXTRACT(payload, '$.items[1].price_cents')"), &p, 1), 1500);
    char *created =
        testdb_str(t->db, EV("JSON_UNQUOTE(JSON_EXTRACT(payload, '$.created_at'))"), &p, 1);
    assert_non_null(created);
    /* RFC 3339 UTC: 2026-11-30T15:37:00.123456Z */
    assert_int_equal(strlen(created), 27);
    assert_int_equal(created[10], 'T');
    assert_int_equal(created[26], 'Z');
    txo_free(created);
}

/* The caller's transaction fails after orders_create_tx: nothing may remain. */
struct rollback_arg {
    int64_t order_id;
};

static int create_then_fail(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct rollback_arg *a = arg;
    struct order_item items[] = {{"iphone-15", 1, 100000}};
    int rc = orders_create_tx(tx, 123, items, 1, &a->order_id, err);
    if (rc < 0)
        return rc;
    return txo_error_set(err, TXO_EBUSINESS, "the caller changed its mind");
}

static void test_rollback_leaves_nothing(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    struct rollback_arg a = {0};

    int rc = txo_db_transact(t->db, TXO_ISO_READ_COMMITTED, create_then_fail, &a, &err);
    assert_int_equal(rc, TXO_EBUSINESS);
    assert_true(a.order_id > 0); /* it was written, then rolled back */
    assert_int_equal(count(t->db, "orders"), 0);
    assert_int_equal(count(t->db, "order_items"), 0);
    assert_int_equal(count(t->db, "outbox_events"), 0);
}

struct bad_case {
    const char *name;
    int64_t customer_id;
    struct order_item items[ORDER_MAX_ITEMS + 1];
    size_t n;
    const char *msg; /* substring of the error message */
};

static void test_invalid_orders_write_nothing(void **state)
{
    struct testdb *t = *state;
    static char long_sku[ORDER_SKU_MAX + 2];
    memset(long_sku, 'x', ORDER_SKU_MAX + 1);
    long_sku[ORDER_SKU_MAX + 1] = '\0';
    static struct bad_case cases[] = {
        {"qty 0", 1, {{"iphone-15", 0, 100}}, 1, "items[0].qty must be 1..1000000, got 0"},
        {"qty negative", 1, {{"case", 1, 1}, {"iphone-15", -5, 100}}, 2, "items[1].qty"},
        {"qty huge", 1, {{"iphone-15", 1000001, 100}}, 1, "items[0].qty"},
        {"price negative", 1, {{"iphone-15", 1, -1}}, 1, "items[0].price_cents"},
        {"price huge", 1, {{"iphone-15", 1, ORDER_MAX_PRICE_CENTS + 1}}, 1, "items[0].price_cents"},
        {"no items", 1, {{NULL, 0, 0}}, 0, "at least one item"},
        {"customer 0", 0, {{"iphone-15", 1, 1}}, 1, "customer_id"},
        {"empty sku", 1, {{"", 1, 1}}, 1, "items[0].sku"},
        {"sku not UTF-8", 1, {{"bad\xff", 1, 1}}, 1, "items[0].sku is not valid UTF-8"},
        {"unknown sku",
         1,
         {{"iphone-15", 1, 1}, {"no-such-sku", 1, 1}},
         2,
         "unknown sku items[1].sku=no-such-sku"},
    };
    struct bad_case extra[3];
    memset(extra, 0, sizeof(extra));
    /* sku too long */
    extra[0] = (struct bad_case){"sku too long", 1, {{long_sku, 1, 1}}, 1, "items[0].sku"};
    /* total overflows int64: 10 lines of 10^6 * 10^12 = 10^19 > 9.2 * 10^18 */
    extra[1].name = "total overflow";
    extra[1].customer_id = 1;
    extra[1].n = 10;
    for (size_t i = 0; i < 10; i++)
        extra[1].items[i] = (struct order_item){"iphone-15", ORDER_MAX_QTY, ORDER_MAX_PRICE_CENTS};
    extra[1].msg = "items[9]: order total overflows";
    /* too many items */
    extra[2].name = "101 items";
    extra[2].customer_id = 1;
    extra[2].n = ORDER_MAX_ITEMS + 1;
    for (size_t i = 0; i < ORDER_MAX_ITEMS + 1; i++)
        extra[2].items[i] = (struct order_item){"case", 1, 1};
    extra[2].msg = "at most 100 items";

    for (size_t k = 0; k < TXO_ARRAY_LEN(cases) + TXO_ARRAY_LEN(extra); k++) {
        struct bad_case *c =
            k < TXO_ARRAY_LEN(cases) ? &cases[k] : &extra[k - TXO_ARRAY_LEN(cases)];
        struct txo_error err;
        txo_error_init(&err);
        int64_t id = -1;

        int rc = orders_create(t->db, c->customer_id, c->items, c->n, &id, &err);
        if (rc != TXO_EINVAL || strstr(err.msg, c->msg) == NULL)
            fail_msg("case \"%s\": rc=%d msg=\"%s\", expected TXO_EINVAL with \"%s\"", c->name, rc,
                     err.msg, c->msg);
        assert_int_equal(id, -1); /* out-param untouched on failure */
        assert_int_equal(count(t->db, "orders"), 0);
        assert_int_equal(count(t->db, "order_items"), 0);
        assert_int_equal(count(t->db, "outbox_events"), 0);
    }

    /* The validator alone, with the total. */
    struct order_item ok[] = {{"a", 3, 7}, {"b", 1, 0}};
    int64_t total = -1;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(orders_validate(5, ok, 2, &total, &err), 0);
    assert_int_equal(total, 21);
    assert_int_equal(orders_validate(5, ok, 2, NULL, &err), 0);
}

static void test_start_saga_is_idempotent(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    struct order_item items[] = {{"iphone-15", 1, 100000}, {"case", 2, 1500}};
    int64_t id = 0;
    char saga1[TXO_SAGA_ID_LEN];
    char saga2[TXO_SAGA_ID_LEN];
    bool created = false;

    assert_int_equal(orders_create(t->db, 77, items, 2, &id, &err), 0);
    assert_int_equal(orders_start_saga(t->db, id, saga1, &created, &err), 0);
    assert_true(created);
    assert_int_equal(orders_start_saga(t->db, id, saga2, &created, &err), 0);
    assert_false(created);
    assert_string_equal(saga1, saga2);

    char corr[64];
    snprintf(corr, sizeof(corr), "order:%lld", (long long)id);
    struct txo_param c = txo_p_str(corr);
    assert_int_equal(
        testdb_i64(t->db, "SELECT COUNT(*) FROM saga_instances WHERE correlation_id = ?", &c, 1),
        1);
    struct txo_param s = txo_p_str(saga1);
    char *v = testdb_str(t->db,
                         "SELECT CONCAT(saga_type, '/', status) FROM saga_instances "
                         "WHERE id = ?",
                         &s, 1);
    assert_string_equal(v, "CreateOrderSaga/RUNNING");
    txo_free(v);
    assert_int_equal(testdb_i64(t->db,
                                "SELECT COUNT(*) FROM saga_steps WHERE saga_id = ? AND "
                                "status = 'PENDING'",
                                &s, 1),
                     3);
    assert_int_equal(testdb_i64(t->db,
                                "SELECT JSON_EXTRACT(payload, '$.total_cents') FROM "
                                "saga_instances WHERE id = ?",
                                &s, 1),
                     103000);
    assert_int_equal(testdb_i64(t->db,
                                "SELECT JSON_EXTRACT(payload, '$.items[1].qty') FROM "
                                "saga_instances WHERE id = ?",
                                &s, 1),
                     2);

    /* An order that does not exist has no saga. */
    assert_int_equal(orders_start_saga(t->db, id + 1000, saga2, NULL, &err), TXO_ENOTFOUND);
    assert_int_equal(count(t->db, "saga_instances"), 1);
}

/*
 * The order, its items, its event and its saga in one transaction (one commit), from the
 * items given: a duplicate SKU (one distinct SKU counted once by the existence check) and a
 * non-ASCII SKU (through JSON_TABLE) come out byte for byte.
 */
static void test_create_with_saga_commits_all_together(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    const char *utf8_sku = "\xd1\x87\xd0\xb5\xd1\x85\xd0\xbe\xd0\xbb-\xc3\x9f\"q"; /* чехол-ß"q */
    testorders_stock(t->db, utf8_sku, 5);
    struct order_item items[] = {{"case", 1, 1500}, {utf8_sku, 2, 700}, {"case", 3, 1500}};
    int64_t id = 0;
    char saga[TXO_SAGA_ID_LEN];
    struct txo_db_stats before, after;

    txo_db_get_stats(&before);
    assert_int_equal(orders_create_with_saga(t->db, 9, items, 3, &id, saga, &err), 0);
    txo_db_get_stats(&after);
    assert_int_equal(after.tx_commits - before.tx_commits, 1);
    assert_true(id > 0);
    assert_int_equal(count(t->db, "orders"), 1);
    assert_int_equal(count(t->db, "order_items"), 3);
    assert_int_equal(count(t->db, "outbox_events"), 1);
    for (int64_t k = 0; k < 3; k++) {
        struct txo_param p[] = {txo_p_i64(id), txo_p_i64(k)};
        char *sku = testdb_str(t->db,
                               "SELECT sku FROM order_items WHERE order_id = ? ORDER BY id "
                               "LIMIT 1 OFFSET ?",
                               p, 2);
        assert_non_null(sku);
        assert_string_equal(sku, items[k].sku);
        txo_free(sku);
        assert_int_equal(testdb_i64(t->db,
                                    "SELECT qty * 1000000 + price_cents FROM order_items "
                                    "WHERE order_id = ? ORDER BY id LIMIT 1 OFFSET ?",
                                    p, 2),
                         items[k].qty * 1000000 + items[k].price_cents);
    }
    assert_str_col(t->db, "SELECT status FROM orders WHERE id = ?", id, "CREATED");
    struct txo_param o = txo_p_i64(id);
    assert_int_equal(testdb_i64(t->db, "SELECT total_cents FROM orders WHERE id = ?", &o, 1),
                     1500 + 1400 + 4500);

    struct txo_param s = txo_p_str(saga);
    char *v = testdb_str(t->db,
                         "SELECT CONCAT(saga_type, '/', status, '/', correlation_id) FROM "
                         "saga_instances WHERE id = ?",
                         &s, 1);
    char want[96];
    snprintf(want, sizeof(want), "CreateOrderSaga/RUNNING/order:%lld", (long long)id);
    assert_string_equal(v, want);
    txo_free(v);
    v = testdb_str(t->db,
                   "SELECT GROUP_CONCAT(CONCAT(step_order, ':', step_name, ':', status) "
                   "ORDER BY step_order) FROM saga_steps WHERE saga_id = ?",
                   &s, 1);
    assert_string_equal(v, "1:ReserveStock:PENDING,2:ChargePayment:PENDING,"
                           "3:CreateShipment:PENDING");
    txo_free(v);
    assert_int_equal(testdb_i64(t->db,
                                "SELECT JSON_EXTRACT(payload, '$.total_cents') FROM "
                                "saga_instances WHERE id = ?",
                                &s, 1),
                     7400);

    /* It is the order's one saga: starting it again finds it. */
    char again[TXO_SAGA_ID_LEN];
    bool created = true;
    assert_int_equal(orders_start_saga(t->db, id, again, &created, &err), 0);
    assert_false(created);
    assert_string_equal(again, saga);

    /* And it runs: the duplicate SKU is reserved once, with both quantities. */
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(orders_run_saga(t->db, saga, NULL, NULL, &final, &err), 0);
    assert_int_equal(final, TXO_SAGA_COMPLETED);
    assert_str_col(t->db, "SELECT status FROM orders WHERE id = ?", id, "CONFIRMED");
    struct txo_param k = txo_p_str("case");
    assert_int_equal(testdb_i64(t->db, "SELECT reserved FROM inventory WHERE sku = ?", &k, 1), 4);
    struct txo_param u = txo_p_str(utf8_sku);
    assert_int_equal(testdb_i64(t->db, "SELECT available FROM inventory WHERE sku = ?", &u, 1), 3);
}

/* An unknown SKU refuses the order before anything (order, items, event, saga) is written. */
static void test_create_with_saga_unknown_sku_writes_nothing(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    struct order_item items[] = {{"case", 1, 1}, {"case", 1, 1}, {"nope", 1, 1}};
    int64_t id = -1;
    char saga[TXO_SAGA_ID_LEN] = "untouched";

    assert_int_equal(orders_create_with_saga(t->db, 9, items, 3, &id, saga, &err), TXO_EINVAL);
    assert_non_null(strstr(err.msg, "unknown sku items[2].sku=nope"));
    assert_int_equal(id, -1);
    assert_string_equal(saga, "untouched");
    assert_int_equal(count(t->db, "orders"), 0);
    assert_int_equal(count(t->db, "order_items"), 0);
    assert_int_equal(count(t->db, "outbox_events"), 0);
    assert_int_equal(count(t->db, "saga_instances"), 0);
    assert_int_equal(count(t->db, "saga_steps"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_commits_order_items_and_event),
        cmocka_unit_test(test_rollback_leaves_nothing),
        cmocka_unit_test(test_invalid_orders_write_nothing),
        cmocka_unit_test(test_start_saga_is_idempotent),
        cmocka_unit_test(test_create_with_saga_commits_all_together),
        cmocka_unit_test(test_create_with_saga_unknown_sku_writes_nothing),
    };
    return testdb_run_each(tests, TXO_ARRAY_LEN(tests), "orders", 0, stock);
}
