/*
 * Test support: order sagas run in batches (testsagabatch.h).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "testdb.h"
#include "testsagabatch.h"

struct txo_db *testsagabatch_open(const struct testserver *s, const char *name,
                                  struct txo_db_opts *o)
{
    char sql[256];
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS `%s`; CREATE DATABASE `%s`;", name, name);
    testserver_sql(s, sql);
    testserver_opts(s, o);
    o->database = name;
    struct txo_error err;
    txo_error_init(&err);
    struct txo_db *db = NULL;
    if (txo_db_open(o, &db, &err) != 0)
        fail_msg("txo_db_open %s: %s", name, err.msg);
    unsigned applied = 0, total = 0;
    if (orders_migrate(db, &applied, &total, &err) != 0)
        fail_msg("orders_migrate: %s", err.msg);
    return db;
}

void testsagabatch_set_stock(struct txo_db *db, const char *sku, int32_t qty)
{
    struct txo_error err;
    txo_error_init(&err);
    if (orders_set_inventory(db, sku, qty, &err) != 0)
        fail_msg("orders_set_inventory %s: %s", sku, err.msg);
}

void testsagabatch_create(struct txo_db *db, int64_t customer, const char *sku, bool with_airpods,
                          int64_t *order_id, char saga_id[TXO_SAGA_ID_LEN])
{
    struct order_item items[2] = {{.sku = sku, .qty = 1, .price_cents = 1000},
                                  {.sku = "airpods", .qty = 2, .price_cents = 500}};
    struct txo_error err;
    txo_error_init(&err);
    bool created = false;
    if (orders_create(db, customer, items, with_airpods ? 2 : 1, order_id, &err) != 0)
        fail_msg("orders_create: %s", err.msg);
    if (orders_start_saga(db, *order_id, saga_id, &created, &err) != 0)
        fail_msg("orders_start_saga: %s", err.msg);
    assert_true(created);
}

void testsagabatch_run(struct txo_db *db, const char *const *ids, size_t n,
                       const struct order_faults *faults, const struct txo_saga_opts *opts,
                       int *rcs, enum txo_saga_status *finals)
{
    struct txo_error err;
    txo_error_init(&err);
    if (orders_run_saga_many(db, ids, n, faults, opts, rcs, finals, &err) != 0)
        fail_msg("orders_run_saga_many: %s", err.msg);
    for (size_t k = 0; k < n; k++)
        if (rcs[k] != 0)
            fail_msg("saga %s of the batch: %s", ids[k], txo_err_name(rcs[k]));
}

int64_t testsagabatch_statements(struct txo_db *db)
{
    return testdb_i64(db,
                      "SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS "
                      "WHERE VARIABLE_NAME = 'QUESTIONS'",
                      NULL, 0);
}

void testsagabatch_assert_invariants(struct txo_db *db, const char *const *skus,
                                     const int32_t *initial, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct txo_param p = txo_p_str(skus[i]);
        int64_t available = testdb_i64(db, "SELECT available FROM inventory WHERE sku = ?", &p, 1);
        int64_t reserved = testdb_i64(db, "SELECT reserved FROM inventory WHERE sku = ?", &p, 1);
        int64_t held = testdb_i64(db,
                                  "SELECT COALESCE(SUM(qty), 0) FROM inventory_reservations "
                                  "WHERE sku = ? AND status = 'RESERVED'",
                                  &p, 1);
        int64_t confirmed = testdb_i64(db,
                                       "SELECT COALESCE(SUM(i.qty), 0) FROM order_items i "
                                       "JOIN orders o ON o.id = i.order_id "
                                       "WHERE i.sku = ? AND o.status = 'CONFIRMED'",
                                       &p, 1);
        if (available + reserved != initial[i] || available < 0 || reserved != held ||
            reserved != confirmed)
            fail_msg("sku %s: available %lld reserved %lld (reservations %lld, confirmed %lld), "
                     "started with %d",
                     skus[i], (long long)available, (long long)reserved, (long long)held,
                     (long long)confirmed, initial[i]);
    }
    assert_int_equal(testdb_i64(db,
                                "SELECT COUNT(*) FROM (SELECT order_id FROM payments "
                                "GROUP BY order_id HAVING COUNT(*) > 1) x",
                                NULL, 0),
                     0);
    assert_int_equal(testdb_i64(db,
                                "SELECT COUNT(*) FROM (SELECT order_id FROM shipments "
                                "GROUP BY order_id HAVING COUNT(*) > 1) x",
                                NULL, 0),
                     0);
}

size_t testsagabatch_last_saga(const char *const *ids, size_t n)
{
    size_t last = 0;
    for (size_t k = 1; k < n; k++)
        if (strcmp(ids[k], ids[last]) > 0)
            last = k;
    return last;
}

int64_t testsagabatch_connection_id(struct txo_db *db)
{
    return testdb_i64(db, "SELECT CONNECTION_ID()", NULL, 0);
}

int64_t testsagabatch_wait_lock(struct txo_db *probe, int64_t waiter, int64_t holder,
                                int64_t timeout_ms, char *query, size_t size)
{
    struct txo_param p[] = {txo_p_i64(waiter), txo_p_i64(holder)};
    int64_t deadline = txo_monotonic_ms() + timeout_ms;
    for (;;) {
        /* InnoDB refreshes the cache behind these tables only when it was not read for 100 ms
         * (so that the tables of one query agree): read more often and it never changes, and
         * the first read after another must wait as long to see the present. */
        txo_sleep_ms(150);
        struct txo_rows *rows = NULL;
        struct txo_error err;
        txo_error_init(&err);
        if (txo_db_query(probe,
                         "SELECT r.trx_rows_locked, r.trx_query "
                         "FROM information_schema.INNODB_LOCK_WAITS w "
                         "JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id "
                         "JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id "
                         "WHERE r.trx_mysql_thread_id = ? AND b.trx_mysql_thread_id = ?",
                         p, 2, &rows, &err) != 0)
            fail_msg("reading the lock waits: %s", err.msg);
        int64_t locked = -1;
        if (txo_rows_count(rows) > 0) {
            locked = txo_rows_i64(rows, 0, 0);
            if (query != NULL && size > 0) {
                const char *q = txo_rows_str(rows, 0, 1, NULL);
                snprintf(query, size, "%s", q != NULL ? q : "");
            }
        }
        txo_rows_free(rows);
        if (locked >= 0 || txo_monotonic_ms() >= deadline)
            return locked;
    }
}
