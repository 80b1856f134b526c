/*
 * Optimistic locking on orders.version: the customer's cancel
 * (orders_cancel_tx) against the order saga, the two writers of an order's status.
 *   - a cancel at the version the customer read applies once: CREATED -> CANCELLED,
 *     version + 1, one OrderCancelled event; a stale version is TXO_ECONFLICT, a cancel of an
 *     order no longer CREATED is TXO_ESTATE;
 *   - a saga that was running when the customer cancelled fails CreateShipment (the order is
 *     no longer CREATED), refunds and releases what it did, ends COMPENSATED, and does not
 *     write a second OrderCancelled;
 *   - a confirmed order cannot be cancelled.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "testrun.h"
#include "order_saga.h"
#include "orders.h"
#include "testdb.h"
#include "testorders.h"

/* No step of these sagas fails transiently, so they never back off: the default (system)
 * clock is never slept on. */
struct fixture {
    struct testdb t;
    struct txo_saga_opts opts;
};

static int setup(void **state)
{
    struct fixture *f = testdb_fixture_new(sizeof(*f), "cancel", 0);
    testorders_stock(f->t.db, "iphone-15", 10);
    txo_saga_opts_init(&f->opts);
    *state = f;
    return 0;
}

struct cancel_args {
    int64_t order_id, version, new_version;
};

static int cancel_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct cancel_args *a = arg;
    return orders_cancel_tx(tx, a->order_id, a->version, &a->new_version, err);
}

static int cancel(struct fixture *f, int64_t order_id, int64_t version, int64_t *new_version)
{
    struct cancel_args a = {order_id, version, -1};
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_transact(f->t.db, TXO_ISO_READ_COMMITTED, cancel_fn, &a, &err);
    if (new_version != NULL)
        *new_version = a.new_version;
    return rc;
}

static int64_t count(struct fixture *f, const char *sql, int64_t order_id)
{
    struct txo_param p = txo_p_i64(order_id);
    return testdb_i64(f->t.db, sql, &p, 1);
}

static char *order_status(struct fixture *f, int64_t order_id)
{
    struct txo_param p = txo_p_i64(order_id);
    return testdb_str(f->t.db, "SELECT status FROM orders WHERE id = ?", &p, 1);
}

static int64_t new_order_with_saga(struct fixture *f, char saga_id[TXO_SAGA_ID_LEN])
{
    struct order_item item = {"iphone-15", 2, 50000};
    int64_t order_id = 0;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(orders_create_with_saga(f->t.db, 7, &item, 1, &order_id, saga_id, &err), 0);
    return order_id;
}

static const char *const cancelled_events =
    "SELECT COUNT(*) FROM outbox_events WHERE aggregate_id = ? AND event_type = 'OrderCancelled'";

static void test_cancel_at_version_then_conflicts(void **state)
{
    struct fixture *f = *state;
    char saga_id[TXO_SAGA_ID_LEN];
    int64_t id = new_order_with_saga(f, saga_id);
    int64_t v = -1;

    assert_int_equal(cancel(f, id, 1, NULL), TXO_ECONFLICT); /* nobody saw version 1 */
    assert_int_equal(cancel(f, id, 0, &v), 0);
    assert_int_equal(v, 1);
    char *st = order_status(f, id);
    assert_string_equal(st, "CANCELLED");
    txo_free(st);
    assert_int_equal(count(f, "SELECT version FROM orders WHERE id = ?", id), 1);
    assert_int_equal(count(f, cancelled_events, id), 1);

    /* A second client that read version 0 loses; one that read version 1 finds it final. */
    assert_int_equal(cancel(f, id, 0, NULL), TXO_ECONFLICT);
    assert_int_equal(cancel(f, id, 1, NULL), TXO_ESTATE);
    assert_int_equal(cancel(f, 999999, 0, NULL), TXO_ENOTFOUND);
    assert_int_equal(count(f, cancelled_events, id), 1);
}

static void test_saga_after_cancel_compensates_without_second_event(void **state)
{
    struct fixture *f = *state;
    char saga_id[TXO_SAGA_ID_LEN];
    int64_t id = new_order_with_saga(f, saga_id);
    assert_int_equal(cancel(f, id, 0, NULL), 0);

    struct txo_error err;
    txo_error_init(&err);
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(orders_run_saga(f->t.db, saga_id, NULL, &f->opts, &final, &err), 0);
    assert_int_equal(final, TXO_SAGA_COMPENSATED);

    /* It reserved and charged, then could not confirm: refund, then release. */
    struct txo_param p = txo_p_i64(id);
    char *pay = testdb_str(f->t.db, "SELECT status FROM payments WHERE order_id = ?", &p, 1);
    assert_string_equal(pay, "REFUNDED");
    txo_free(pay);
    assert_int_equal(
        testdb_i64(f->t.db, "SELECT available FROM inventory WHERE sku = 'iphone-15'", NULL, 0),
        10);
    assert_int_equal(
        testdb_i64(f->t.db, "SELECT reserved FROM inventory WHERE sku = 'iphone-15'", NULL, 0), 0);
    assert_int_equal(count(f,
                           "SELECT COUNT(*) FROM shipments WHERE order_id = ? AND status = "
                           "'CREATED'",
                           id),
                     0);
    char *st = order_status(f, id);
    assert_string_equal(st, "CANCELLED");
    txo_free(st);
    assert_int_equal(count(f, "SELECT version FROM orders WHERE id = ?", id), 1);
    assert_int_equal(count(f, cancelled_events, id), 1); /* the customer's, not a second one */
    assert_int_equal(count(f,
                           "SELECT COUNT(*) FROM outbox_events WHERE aggregate_id = ? AND "
                           "event_type IN ('PaymentRefunded', 'StockReleased')",
                           id),
                     2);
}

static void test_confirmed_order_cannot_be_cancelled(void **state)
{
    struct fixture *f = *state;
    char saga_id[TXO_SAGA_ID_LEN];
    int64_t id = new_order_with_saga(f, saga_id);
    struct txo_error err;
    txo_error_init(&err);
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(orders_run_saga(f->t.db, saga_id, NULL, &f->opts, &final, &err), 0);
    assert_int_equal(final, TXO_SAGA_COMPLETED);
    assert_int_equal(count(f, "SELECT version FROM orders WHERE id = ?", id), 1);

    assert_int_equal(cancel(f, id, 0, NULL), TXO_ECONFLICT); /* the saga moved it to 1 */
    assert_int_equal(cancel(f, id, 1, NULL), TXO_ESTATE);
    char *st = order_status(f, id);
    assert_string_equal(st, "CONFIRMED");
    txo_free(st);
    assert_int_equal(count(f, cancelled_events, id), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cancel_at_version_then_conflicts),
        cmocka_unit_test(test_saga_after_cancel_compensates_without_second_event),
        cmocka_unit_test(test_confirmed_order_cannot_be_cancelled),
    };
    txo_log_set_level(TXO_LOG_ERROR);
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, testdb_free_state, NULL, NULL);
}
