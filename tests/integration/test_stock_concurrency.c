/*
 * Concurrent reservations of the same SKUs. 8 threads, each on its own connection,
 * each create and drive 20 orders of two SKUs "a" and "b" (50 units each), listing them in
 * opposite orders depending on the thread's parity. ReserveStock locks inventory rows in
 * ascending SKU order whatever the item order, and any deadlock or lock wait timeout left is
 * retried as a whole transaction. Afterwards: no oversell, available + reserved conserved,
 * every reserved unit belongs to a COMPLETED saga, every other saga FAILED for lack of stock
 * with its order CANCELLED.
 */
#include <pthread.h>
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

#define THREADS           8
#define ORDERS_PER_THREAD 20
#define STOCK             50

struct worker {
    struct txo_db *db;
    unsigned index;
    unsigned completed;
    unsigned failed;
    unsigned other;
    int error_rc; /* first library error, 0 if none */
    char error[TXO_ERROR_MSG_MAX];
};

static void *work(void *arg)
{
    struct worker *w = arg;
    struct txo_saga_opts opts;
    txo_saga_opts_init(&opts);
    opts.step_backoff.base_ms = 5;
    opts.step_backoff.max_ms = 100;

    for (unsigned k = 0; k < ORDERS_PER_THREAD && w->error_rc == 0; k++) {
        struct txo_error err;
        txo_error_init(&err);
        int32_t qa = (int32_t)(1 + (w->index + k) % 3);
        int32_t qb = (int32_t)(1 + (w->index * 7 + k) % 3);
        struct order_item even[] = {{"a", qa, 100}, {"b", qb, 200}};
        struct order_item odd[] = {{"b", qb, 200}, {"a", qa, 100}};
        int64_t order_id = 0;
        char saga[TXO_SAGA_ID_LEN];
        enum txo_saga_status final = TXO_SAGA_RUNNING;

        int rc =
            orders_create(w->db, 1000 + w->index, w->index % 2 ? odd : even, 2, &order_id, &err);
        if (rc == 0)
            rc = orders_start_saga(w->db, order_id, saga, NULL, &err);
        if (rc == 0)
            rc = orders_run_saga(w->db, saga, NULL, &opts, &final, &err);
        if (rc < 0) {
            w->error_rc = rc;
            snprintf(w->error, sizeof(w->error), "%s", err.msg);
            break;
        }
        if (final == TXO_SAGA_COMPLETED)
            w->completed++;
        else if (final == TXO_SAGA_FAILED)
            w->failed++;
        else
            w->other++;
    }
    return NULL;
}

static void test_concurrent_reservations(void **state)
{
    (void)state;
    struct testdb t;
    testdb_setup(&t, "stock");
    testorders_stock(t.db, "a", STOCK);
    testorders_stock(t.db, "b", STOCK);

    struct txo_db_stats before;
    txo_db_get_stats(&before);

    /* Connections are opened here: cmocka's fail_msg must not run on another thread. */
    struct worker w[THREADS];
    pthread_t th[THREADS];
    memset(w, 0, sizeof(w));
    for (unsigned i = 0; i < THREADS; i++) {
        w[i].index = i;
        w[i].db = testdb_connect(&t);
    }
    for (unsigned i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    unsigned completed = 0, failed = 0;
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        txo_db_close(w[i].db);
    }
    for (unsigned i = 0; i < THREADS; i++) {
        if (w[i].error_rc != 0)
            fail_msg("thread %u: %s: %s", i, txo_err_name(w[i].error_rc), w[i].error);
        assert_int_equal(w[i].other, 0);
        completed += w[i].completed;
        failed += w[i].failed;
    }

    struct txo_db_stats after;
    txo_db_get_stats(&after);
    printf("K: %u sagas COMPLETED, %u FAILED; deadlocks=%llu lock_timeouts=%llu "
           "tx_retries=%llu\n",
           completed, failed, (unsigned long long)(after.deadlocks - before.deadlocks),
           (unsigned long long)(after.lock_timeouts - before.lock_timeouts),
           (unsigned long long)(after.tx_retries - before.tx_retries));
    assert_true(after.tx_retries >= before.tx_retries);

    /* Every order ended, one way or the other; demand (about 2 units per SKU per order, 160
     * orders) is far above stock, so both outcomes occur. */
    assert_int_equal(completed + failed, THREADS * ORDERS_PER_THREAD);
    assert_true(completed > 0);
    assert_true(failed > 0);
    assert_int_equal(
        testdb_q(t.db, "SELECT COUNT(*) FROM saga_instances WHERE status = 'COMPLETED'"),
        completed);
    assert_int_equal(testdb_q(t.db, "SELECT COUNT(*) FROM saga_instances WHERE status = 'FAILED'"),
                     failed);
    assert_int_equal(testdb_q(t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"),
                     completed);
    assert_int_equal(testdb_q(t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CANCELLED'"),
                     failed);
    assert_int_equal(testdb_q(t.db, "SELECT COUNT(*) FROM saga_steps WHERE step_order = 1 AND "
                                    "status = 'FAILED' AND error LIKE '%not enough stock%'"),
                     failed);
    assert_int_equal(testdb_q(t.db, "SELECT COUNT(*) FROM outbox_events WHERE event_type = "
                                    "'OrderCancelled' AND JSON_UNQUOTE(JSON_EXTRACT(payload, "
                                    "'$.reason')) LIKE '%not enough stock%'"),
                     failed);

    /* No oversell, nothing lost: per SKU. */
    const char *skus[] = {"a", "b"};
    for (size_t i = 0; i < 2; i++) {
        struct txo_param p = txo_p_str(skus[i]);
        int64_t available =
            testdb_i64(t.db, "SELECT available FROM inventory WHERE sku = ?", &p, 1);
        int64_t reserved = testdb_i64(t.db, "SELECT reserved FROM inventory WHERE sku = ?", &p, 1);
        assert_true(available >= 0);
        assert_int_equal(available + reserved, STOCK);
        /* reserved = the reservations of COMPLETED sagas = the items of CONFIRMED orders */
        assert_int_equal(reserved,
                         testdb_i64(t.db,
                                    "SELECT COALESCE(SUM(r.qty), 0) FROM inventory_reservations r "
                                    "JOIN saga_instances s ON s.id = r.saga_id "
                                    "WHERE r.sku = ? AND r.status = 'RESERVED' AND "
                                    "s.status = 'COMPLETED'",
                                    &p, 1));
        assert_int_equal(reserved, testdb_i64(t.db,
                                              "SELECT COALESCE(SUM(i.qty), 0) FROM order_items i "
                                              "JOIN orders o ON o.id = i.order_id "
                                              "WHERE i.sku = ? AND o.status = 'CONFIRMED'",
                                              &p, 1));
    }
    assert_int_equal(testdb_q(t.db,
                              "SELECT COUNT(*) FROM inventory_reservations r JOIN saga_instances "
                              "s ON s.id = r.saga_id WHERE s.status <> 'COMPLETED'"),
                     0);
    assert_int_equal(testdb_q(t.db, "SELECT COUNT(*) FROM payments"), completed);
    assert_int_equal(testdb_q(t.db, "SELECT COUNT(*) FROM shipments"), completed);
    testdb_teardown(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_reservations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
