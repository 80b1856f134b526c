/*
 * The CreateOrderSaga against a real MariaDB: the success path, not enough stock, card
 * declined, shipment fails (refund, then release), a compensation fails (then a retry
 * completes it), transient payment failures retried, duplicate SKUs merged, and every
 * step and compensation re-run without a double effect. After each test the invariants hold:
 * available + reserved per SKU conserved, never negative, at most one payment per order.
 *
 * Backoff sleeps go to a fake clock, so nothing here sleeps.
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
#include "testclock.h"
#include "testdb.h"
#include "testrun.h"

struct stock {
    const char *sku;
    int32_t qty;
};
static const struct stock initial_stock[] = {{"airpods", 20}, {"case", 5}, {"iphone-15", 10}};

struct fixture {
    struct testdb t;
    struct testclock clock;
    struct txo_saga_opts opts;
};

static int setup(void **state)
{
    struct fixture *f = testdb_fixture_new(sizeof(*f), "saga", 0);
    struct txo_error err;
    txo_error_init(&err);
    for (size_t i = 0; i < TXO_ARRAY_LEN(initial_stock); i++)
        assert_int_equal(
            orders_set_inventory(f->t.db, initial_stock[i].sku, initial_stock[i].qty, &err), 0);
    testclock_init(&f->clock);
    txo_saga_opts_init(&f->opts);
    f->opts.clock = &f->clock.clock;
    *state = f;
    return 0;
}

/* ---- helpers ---- */

static int64_t i64(struct fixture *f, const char *sql, struct txo_param p)
{
    return testdb_i64(f->t.db, sql, &p, 1);
}

static void assert_str(struct fixture *f, const char *sql, struct txo_param p, const char *want)
{
    char *got = testdb_str(f->t.db, sql, &p, 1);
    if (want == NULL) {
        if (got != NULL)
            fail_msg("%s: expected no row, got \"%s\"", sql, got);
        return;
    }
    if (got == NULL)
        fail_msg("%s: expected \"%s\", got no row", sql, want);
    assert_string_equal(got, want);
    txo_free(got);
}

static void create(struct fixture *f, const struct order_item *items, size_t n, int64_t *order_id,
                   char saga_id[TXO_SAGA_ID_LEN])
{
    struct txo_error err;
    txo_error_init(&err);
    bool created = false;
    if (orders_create(f->t.db, 123, items, n, order_id, &err) < 0)
        fail_msg("orders_create: %s", err.msg);
    if (orders_start_saga(f->t.db, *order_id, saga_id, &created, &err) < 0)
        fail_msg("orders_start_saga: %s", err.msg);
    assert_true(created);
}

static enum txo_saga_status run(struct fixture *f, const char *saga_id,
                                const struct order_faults *faults)
{
    struct txo_error err;
    txo_error_init(&err);
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    if (orders_run_saga(f->t.db, saga_id, faults, &f->opts, &final, &err) < 0)
        fail_msg("orders_run_saga %s: %s", saga_id, err.msg);
    return final;
}

/* An order a test placed, and its CreateOrderSaga. */
struct placed {
    int64_t id;
    char saga[TXO_SAGA_ID_LEN];
};

/* Creates the order of items with its saga and runs the saga once with faults (NULL: none): it
 * must end as want. */
static struct placed place(struct fixture *f, const struct order_item *items, size_t n,
                           const struct order_faults *faults, enum txo_saga_status want)
{
    struct placed ord;
    create(f, items, n, &ord.id, ord.saga);
    assert_int_equal(run(f, ord.saga, faults), want);
    return ord;
}

/* orders_retry_saga() of a COMPENSATION_FAILED saga, which must then end as want. */
static void retry(struct fixture *f, const char *saga, enum txo_saga_status want)
{
    struct txo_error err;
    txo_error_init(&err);
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    if (orders_retry_saga(f->t.db, saga, NULL, &f->opts, &final, &err) < 0)
        fail_msg("orders_retry_saga: %s", err.msg);
    assert_int_equal(final, want);
}

static void assert_stock(struct fixture *f, const char *sku, int64_t available, int64_t reserved)
{
    struct txo_param p = txo_p_str(sku);
    int64_t a = i64(f, "SELECT available FROM inventory WHERE sku = ?", p);
    int64_t r = i64(f, "SELECT reserved FROM inventory WHERE sku = ?", p);
    if (a != available || r != reserved)
        fail_msg("sku %s: available=%lld reserved=%lld, expected %lld/%lld", sku, (long long)a,
                 (long long)r, (long long)available, (long long)reserved);
}

/* The order service's invariants, which hold after every test. */
static void assert_invariants(struct fixture *f)
{
    for (size_t i = 0; i < TXO_ARRAY_LEN(initial_stock); i++) {
        struct txo_param p = txo_p_str(initial_stock[i].sku);
        assert_int_equal(i64(f, "SELECT available + reserved FROM inventory WHERE sku = ?", p),
                         initial_stock[i].qty);
        assert_true(i64(f, "SELECT available FROM inventory WHERE sku = ?", p) >= 0);
        assert_true(i64(f, "SELECT reserved FROM inventory WHERE sku = ?", p) >= 0);
        /* reserved = what RESERVED reservations hold */
        assert_int_equal(i64(f, "SELECT reserved FROM inventory WHERE sku = ?", p),
                         i64(f,
                             "SELECT COALESCE(SUM(qty), 0) FROM inventory_reservations "
                             "WHERE sku = ? AND status = 'RESERVED'",
                             p));
    }
    assert_int_equal(testdb_i64(f->t.db,
                                "SELECT COUNT(*) FROM (SELECT order_id FROM payments "
                                "GROUP BY order_id HAVING COUNT(*) > 1) x",
                                NULL, 0),
                     0);
}

/*
 * Makes a finished saga look as if its worker died mid-run: saga RUNNING with no owner, step 1
 * RUNNING and the later steps `later` (PENDING or COMPLETED), so the next run re-runs them.
 */
static void rewind_saga(struct fixture *f, const char *saga, const char *later)
{
    struct txo_param s = txo_p_str(saga);
    struct txo_param steps[] = {txo_p_str(later), txo_p_str(saga)};
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_db_exec(f->t.db,
                                 "UPDATE saga_instances SET status = 'RUNNING', "
                                 "owner = '', lease_until = '1970-01-01 00:00:00' WHERE id = ?",
                                 &s, 1, NULL, &err),
                     0);
    assert_int_equal(txo_db_exec(f->t.db,
                                 "UPDATE saga_steps SET status = IF(step_order = 1, "
                                 "'RUNNING', ?) WHERE saga_id = ?",
                                 steps, 2, NULL, &err),
                     0);
}

/* rewind_saga(), then the saga runs again: it completes, its first step having run twice. */
static void rerun_rewound(struct fixture *f, const char *saga, const char *later)
{
    rewind_saga(f, saga, later);
    assert_int_equal(run(f, saga, NULL), TXO_SAGA_COMPLETED);
    assert_int_equal(i64(f, "SELECT attempts FROM saga_steps WHERE saga_id = ? AND step_order = 1",
                         txo_p_str(saga)),
                     2);
}

static int64_t events(struct fixture *f, int64_t order_id, const char *type)
{
    struct txo_param p[] = {txo_p_i64(order_id), txo_p_str(type)};
    return testdb_i64(f->t.db,
                      "SELECT COUNT(*) FROM outbox_events WHERE aggregate_type = "
                      "'order' AND aggregate_id = ? AND event_type = ?",
                      p, 2);
}

static int64_t event_id(struct fixture *f, int64_t order_id, const char *type)
{
    struct txo_param p[] = {txo_p_i64(order_id), txo_p_str(type)};
    return testdb_i64(f->t.db,
                      "SELECT id FROM outbox_events WHERE aggregate_type = 'order' "
                      "AND aggregate_id = ? AND event_type = ?",
                      p, 2);
}

static int64_t all_events(struct fixture *f, int64_t order_id)
{
    return i64(f, "SELECT COUNT(*) FROM outbox_events WHERE aggregate_id = ?", txo_p_i64(order_id));
}

static void assert_step(struct fixture *f, const char *saga_id, const char *step,
                        const char *status, const char *error_part)
{
    struct txo_param p[] = {txo_p_str(saga_id), txo_p_str(step)};
    char *got = testdb_str(f->t.db,
                           "SELECT status FROM saga_steps WHERE saga_id = ? AND "
                           "step_name = ?",
                           p, 2);
    if (got == NULL || strcmp(got, status) != 0)
        fail_msg("step %s is %s, expected %s", step, got != NULL ? got : "missing", status);
    txo_free(got);
    if (error_part != NULL) {
        char *e = testdb_str(f->t.db,
                             "SELECT error FROM saga_steps WHERE saga_id = ? AND "
                             "step_name = ?",
                             p, 2);
        if (e == NULL || strstr(e, error_part) == NULL)
            fail_msg("step %s error is \"%s\", expected \"%s\"", step, e != NULL ? e : "",
                     error_part);
        txo_free(e);
    }
}

#define ORDER_STATUS    "SELECT status FROM orders WHERE id = ?"
#define PAYMENT_STATUS  "SELECT status FROM payments WHERE order_id = ?"
#define SHIPMENT_STATUS "SELECT status FROM shipments WHERE order_id = ?"
#define SAGA_STATUS     "SELECT status FROM saga_instances WHERE id = ?"

/*
 * The end of a compensation after a charge: the order CANCELLED, its payment REFUNDED, one
 * PaymentRefunded and one StockReleased, the refund first.
 */
static void assert_refunded_then_released(struct fixture *f, int64_t id)
{
    struct txo_param o = txo_p_i64(id);
    assert_str(f, ORDER_STATUS, o, "CANCELLED");
    assert_str(f, PAYMENT_STATUS, o, "REFUNDED");
    assert_int_equal(events(f, id, "PaymentRefunded"), 1);
    assert_int_equal(events(f, id, "StockReleased"), 1);
    assert_true(event_id(f, id, "PaymentRefunded") < event_id(f, id, "StockReleased"));
}

/* ---- tests ---- */

static void test_success(void **state)
{
    struct fixture *f = *state;
    struct order_item items[] = {{"iphone-15", 2, 100000}, {"airpods", 1, 24900}};
    struct placed ord = place(f, items, 2, NULL, TXO_SAGA_COMPLETED);

    struct txo_param o = txo_p_i64(ord.id);
    assert_str(f, ORDER_STATUS, o, "CONFIRMED");
    assert_int_equal(i64(f, "SELECT version FROM orders WHERE id = ?", o), 1);
    assert_str(f, SAGA_STATUS, txo_p_str(ord.saga), "COMPLETED");
    assert_int_equal(i64(f,
                         "SELECT COUNT(*) FROM saga_steps WHERE saga_id = ? AND status = "
                         "'COMPLETED'",
                         txo_p_str(ord.saga)),
                     3);
    assert_stock(f, "iphone-15", 8, 2);
    assert_stock(f, "airpods", 19, 1);
    assert_stock(f, "case", 5, 0);
    assert_int_equal(i64(f,
                         "SELECT COUNT(*) FROM inventory_reservations WHERE saga_id = ? AND "
                         "status = 'RESERVED'",
                         txo_p_str(ord.saga)),
                     2);
    assert_str(f, PAYMENT_STATUS, o, "CHARGED");
    assert_int_equal(i64(f, "SELECT amount_cents FROM payments WHERE order_id = ?", o), 224900);
    assert_str(f, SHIPMENT_STATUS, o, "CREATED");
    assert_int_equal(events(f, ord.id, "OrderCreated"), 1);
    assert_int_equal(events(f, ord.id, "StockReserved"), 1);
    assert_int_equal(events(f, ord.id, "PaymentCharged"), 1);
    assert_int_equal(events(f, ord.id, "ShipmentCreated"), 1);
    assert_int_equal(all_events(f, ord.id), 4);
    assert_true(event_id(f, ord.id, "StockReserved") < event_id(f, ord.id, "PaymentCharged"));
    assert_true(event_id(f, ord.id, "PaymentCharged") < event_id(f, ord.id, "ShipmentCreated"));
    char key[128];
    snprintf(key, sizeof(key), "saga:%s:payment-charged", ord.saga);
    assert_int_equal(i64(f,
                         "SELECT JSON_EXTRACT(payload, '$.amount_cents') FROM outbox_events "
                         "WHERE idempotency_key = ?",
                         txo_p_str(key)),
                     224900);
    /* A terminal saga is left as it is. */
    assert_int_equal(run(f, ord.saga, NULL), TXO_SAGA_COMPLETED);
    assert_int_equal(all_events(f, ord.id), 4);
    assert_invariants(f);
}

/* Not enough stock for one SKU; the other (locked first) must not stay reserved. */
static void test_no_stock(void **state)
{
    struct fixture *f = *state;
    struct order_item items[] = {{"iphone-15", 11, 100000}, {"airpods", 1, 24900}};
    struct placed ord = place(f, items, 2, NULL, TXO_SAGA_FAILED);

    struct txo_param o = txo_p_i64(ord.id);
    assert_str(f, ORDER_STATUS, o, "CANCELLED");
    assert_str(f, SAGA_STATUS, txo_p_str(ord.saga), "FAILED");
    assert_step(f, ord.saga, "ReserveStock", "FAILED",
                "not enough stock for sku=iphone-15 available=10 required=11");
    assert_step(f, ord.saga, "ChargePayment", "PENDING", NULL);
    assert_step(f, ord.saga, "CreateShipment", "PENDING", NULL);
    assert_str(f, PAYMENT_STATUS, o, NULL);
    assert_str(f, SHIPMENT_STATUS, o, NULL);
    assert_stock(f, "iphone-15", 10, 0);
    assert_stock(f, "airpods", 20, 0);
    assert_int_equal(i64(f, "SELECT COUNT(*) FROM inventory_reservations WHERE saga_id = ?",
                         txo_p_str(ord.saga)),
                     0);
    assert_int_equal(events(f, ord.id, "OrderCancelled"), 1);
    assert_int_equal(events(f, ord.id, "StockReserved"), 0);
    assert_int_equal(all_events(f, ord.id), 2);
    char *reason = testdb_str(f->t.db,
                              "SELECT JSON_UNQUOTE(JSON_EXTRACT(payload, '$.reason')) "
                              "FROM outbox_events WHERE aggregate_id = ? AND "
                              "event_type = 'OrderCancelled'",
                              &o, 1);
    assert_non_null(reason);
    assert_non_null(strstr(reason, "not enough stock"));
    txo_free(reason);
    assert_invariants(f);
}

/* ChargePayment declined: stock released, nothing charged. */
static void test_payment_declined(void **state)
{
    struct fixture *f = *state;
    struct order_item items[] = {{"iphone-15", 3, 100000}};
    struct order_faults faults = {.decline_payment = true};
    struct placed ord = place(f, items, 1, &faults, TXO_SAGA_COMPENSATED);

    struct txo_param o = txo_p_i64(ord.id);
    assert_str(f, ORDER_STATUS, o, "CANCELLED");
    assert_step(f, ord.saga, "ReserveStock", "COMPENSATED", NULL);
    assert_step(f, ord.saga, "ChargePayment", "FAILED", "card declined");
    assert_step(f, ord.saga, "CreateShipment", "PENDING", NULL);
    assert_stock(f, "iphone-15", 10, 0);
    assert_str(f, "SELECT status FROM inventory_reservations WHERE saga_id = ?",
               txo_p_str(ord.saga), "RELEASED");
    assert_str(f, PAYMENT_STATUS, o, NULL);
    assert_str(f, SHIPMENT_STATUS, o, NULL);
    assert_int_equal(events(f, ord.id, "StockReserved"), 1);
    assert_int_equal(events(f, ord.id, "StockReleased"), 1);
    assert_int_equal(events(f, ord.id, "PaymentCharged"), 0);
    assert_int_equal(events(f, ord.id, "OrderCancelled"), 1);
    assert_true(event_id(f, ord.id, "StockReleased") < event_id(f, ord.id, "OrderCancelled"));
    assert_invariants(f);
}

/* CreateShipment fails: RefundPayment, then ReleaseStock. */
static void test_shipment_fails(void **state)
{
    struct fixture *f = *state;
    struct order_item items[] = {{"iphone-15", 1, 100000}, {"case", 2, 1500}};
    struct order_faults faults = {.fail_shipment = true};
    struct placed ord = place(f, items, 2, &faults, TXO_SAGA_COMPENSATED);

    assert_refunded_then_released(f, ord.id);
    assert_step(f, ord.saga, "ReserveStock", "COMPENSATED", NULL);
    assert_step(f, ord.saga, "ChargePayment", "COMPENSATED", NULL);
    assert_step(f, ord.saga, "CreateShipment", "FAILED", "carrier rejected shipment");
    assert_str(f, SHIPMENT_STATUS, txo_p_i64(ord.id), NULL);
    assert_stock(f, "iphone-15", 10, 0);
    assert_stock(f, "case", 5, 0);
    assert_int_equal(events(f, ord.id, "ShipmentCreated"), 0);
    assert_true(event_id(f, ord.id, "StockReleased") < event_id(f, ord.id, "OrderCancelled"));
    assert_invariants(f);
}

/*
 * The shipment and then the refund fail: COMPENSATION_FAILED; a retry without faults finishes
 * the job.
 */
static void test_compensation_fails_then_retried(void **state)
{
    struct fixture *f = *state;
    struct order_item items[] = {{"iphone-15", 2, 100000}};
    struct order_faults faults = {.fail_shipment = true, .fail_refund = true};
    struct txo_error err;
    txo_error_init(&err);
    struct placed ord = place(f, items, 1, &faults, TXO_SAGA_COMPENSATION_FAILED);

    struct txo_param o = txo_p_i64(ord.id);
    assert_str(f, SAGA_STATUS, txo_p_str(ord.saga), "COMPENSATION_FAILED");
    assert_step(f, ord.saga, "ChargePayment", "COMPENSATION_FAILED", "refund failed (injected)");
    assert_step(f, ord.saga, "CreateShipment", "FAILED", "carrier rejected shipment");
    assert_str(f, ORDER_STATUS, o, "CREATED"); /* not cancelled while money is still charged */
    assert_str(f, PAYMENT_STATUS, o, "CHARGED");
    assert_stock(f, "iphone-15", 8, 2);
    assert_int_equal(events(f, ord.id, "PaymentRefunded"), 0);
    assert_int_equal(events(f, ord.id, "OrderCancelled"), 0);
    /* Running it again does nothing: it needs an explicit retry. */
    assert_int_equal(run(f, ord.saga, NULL), TXO_SAGA_COMPENSATION_FAILED);

    retry(f, ord.saga, TXO_SAGA_COMPENSATED);
    assert_str(f, SAGA_STATUS, txo_p_str(ord.saga), "COMPENSATED");
    assert_step(f, ord.saga, "ChargePayment", "COMPENSATED", NULL);
    assert_step(f, ord.saga, "ReserveStock", "COMPENSATED", NULL);
    assert_refunded_then_released(f, ord.id);
    assert_stock(f, "iphone-15", 10, 0);
    assert_int_equal(events(f, ord.id, "OrderCancelled"), 1);

    /* Only a COMPENSATION_FAILED saga can be retried. */
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(orders_retry_saga(f->t.db, ord.saga, NULL, &f->opts, &final, &err),
                     TXO_ESTATE);
    assert_invariants(f);
}

/* A failing ReleaseStock (H + fail_release) keeps the stock reserved until the retry. */
static void test_release_fails_then_retried(void **state)
{
    struct fixture *f = *state;
    struct order_item items[] = {{"case", 5, 1500}};
    struct order_faults faults = {.decline_payment = true, .fail_release = true};
    struct placed ord = place(f, items, 1, &faults, TXO_SAGA_COMPENSATION_FAILED);
    assert_step(f, ord.saga, "ReserveStock", "COMPENSATION_FAILED", "release failed (injected)");
    assert_stock(f, "case", 0, 5);
    assert_invariants(f);

    retry(f, ord.saga, TXO_SAGA_COMPENSATED);
    assert_stock(f, "case", 5, 0);
    assert_str(f, ORDER_STATUS, txo_p_i64(ord.id), "CANCELLED");
    assert_int_equal(events(f, ord.id, "StockReleased"), 1);
    assert_invariants(f);
}

/* The payment service is unavailable twice: the step is retried (backoff on the fake clock). */
static void test_transient_charge_failures_are_retried(void **state)
{
    struct fixture *f = *state;
    struct order_item items[] = {{"airpods", 1, 24900}};
    struct order_faults faults = {.transient_charge_failures = 2};
    struct placed ord = place(f, items, 1, &faults, TXO_SAGA_COMPLETED);
    struct txo_param p[] = {txo_p_str(ord.saga), txo_p_str("ChargePayment")};
    assert_int_equal(testdb_i64(f->t.db,
                                "SELECT attempts FROM saga_steps WHERE saga_id = ? "
                                "AND step_name = ?",
                                p, 2),
                     3);
    assert_true(f->clock.now_ms > 0); /* two backoff waits, on the fake clock */
    assert_str(f, ORDER_STATUS, txo_p_i64(ord.id), "CONFIRMED");
    assert_int_equal(i64(f, "SELECT COUNT(*) FROM payments WHERE order_id = ?", txo_p_i64(ord.id)),
                     1);
    assert_int_equal(events(f, ord.id, "PaymentCharged"), 1);
    assert_invariants(f);
}

/* Duplicate SKUs in one order become one reservation (the key is (saga_id, sku)). */
static void test_duplicate_skus_are_merged(void **state)
{
    struct fixture *f = *state;
    struct order_item items[] = {
        {"iphone-15", 1, 100000}, {"case", 1, 1500}, {"iphone-15", 2, 100000}};
    struct placed ord = place(f, items, 3, NULL, TXO_SAGA_COMPLETED);
    struct txo_param p[] = {txo_p_str(ord.saga), txo_p_str("iphone-15")};
    assert_int_equal(testdb_i64(f->t.db,
                                "SELECT qty FROM inventory_reservations WHERE "
                                "saga_id = ? AND sku = ?",
                                p, 2),
                     3);
    assert_stock(f, "iphone-15", 7, 3);
    assert_stock(f, "case", 4, 1);
    assert_invariants(f);
}

/*
 * A worker died after the steps committed but the engine is made to believe they did not
 * (steps RUNNING/PENDING, saga RUNNING, no owner): resuming re-runs all three actions, which
 * must find their effects and change nothing.
 */
static void test_resumed_steps_do_not_double_apply(void **state)
{
    struct fixture *f = *state;
    struct order_item items[] = {{"iphone-15", 2, 100000}, {"airpods", 1, 24900}};
    struct placed ord = place(f, items, 2, NULL, TXO_SAGA_COMPLETED);
    assert_stock(f, "iphone-15", 8, 2);

    rerun_rewound(f, ord.saga, "PENDING");

    struct txo_param o = txo_p_i64(ord.id);
    assert_stock(f, "iphone-15", 8, 2);
    assert_stock(f, "airpods", 19, 1);
    assert_int_equal(i64(f, "SELECT COUNT(*) FROM payments WHERE order_id = ?", o), 1);
    assert_int_equal(i64(f, "SELECT COUNT(*) FROM shipments WHERE order_id = ?", o), 1);
    assert_int_equal(i64(f, "SELECT version FROM orders WHERE id = ?", o), 1);
    assert_str(f, ORDER_STATUS, o, "CONFIRMED");
    assert_int_equal(all_events(f, ord.id), 4);
    assert_invariants(f);
}

/*
 * ReserveStock re-run when one SKU has no stock left (its reserving UPDATE changes nothing: the
 * reservation found RESERVED makes it a no-op) and the other still has some (the UPDATE
 * succeeds, the reservation insert is a duplicate: the quantity is given back in the same
 * transaction). Either way nothing moves twice.
 */
static void test_reserve_rerun_with_and_without_stock_left(void **state)
{
    struct fixture *f = *state;
    struct order_item items[] = {{"case", 5, 1500}, {"airpods", 1, 24900}};
    struct placed ord = place(f, items, 2, NULL, TXO_SAGA_COMPLETED);
    assert_stock(f, "case", 0, 5);
    assert_stock(f, "airpods", 19, 1);

    rerun_rewound(f, ord.saga, "COMPLETED");
    struct txo_param s = txo_p_str(ord.saga);
    assert_stock(f, "case", 0, 5);
    assert_stock(f, "airpods", 19, 1);
    assert_int_equal(i64(f, "SELECT COUNT(*) FROM inventory_reservations WHERE saga_id = ?", s), 2);
    assert_int_equal(events(f, ord.id, "StockReserved"), 1);
    assert_invariants(f);
}

/* Calls each action and compensation of the definition twice, directly, in its own tx. */
struct step_call {
    const struct txo_saga_step_def *step;
    bool compensate;
    struct txo_saga_ctx *ctx;
};

/* One saga alone, as the engine runs it: the part's own error, or the saga's result. */
static int step_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct step_call *c = arg;
    const struct txo_saga_ctx *cp[1] = {c->ctx};
    int rc1 = 0;
    struct txo_error e1;
    txo_error_init(&e1);
    int rc = (c->compensate ? c->step->compensate : c->step->action)(tx, cp, 1, &rc1, &e1, err);
    if (rc == 0 && rc1 != 0 && err != NULL)
        *err = e1;
    return rc != 0 ? rc : rc1;
}

static void test_every_step_is_idempotent(void **state)
{
    struct fixture *f = *state;
    struct order_item items[] = {{"iphone-15", 2, 100000}, {"case", 1, 1500}};
    int64_t id;
    char saga[TXO_SAGA_ID_LEN];
    struct txo_error err;
    txo_error_init(&err);

    create(f, items, 2, &id, saga);
    const struct txo_saga_def *def = order_saga_def();
    assert_string_equal(def->type, "CreateOrderSaga");
    assert_int_equal(def->n_steps, 3);
    struct txo_param s = txo_p_str(saga);
    char *payload = testdb_str(f->t.db, "SELECT payload FROM saga_instances WHERE id = ?", &s, 1);
    assert_non_null(payload);
    void *st = NULL;
    assert_int_equal(def->decode(payload, strlen(payload), &st, &err), 0);
    struct order_saga_env env;
    order_saga_env_init(&env, NULL);
    struct txo_saga_ctx ctx = {.saga_id = saga,
                               .saga_type = def->type,
                               .payload = payload,
                               .payload_len = strlen(payload),
                               .state = st,
                               .user = &env};

    struct txo_param o = txo_p_i64(id);
    for (int phase = 0; phase < 2; phase++) {
        for (size_t k = 0; k < def->n_steps; k++) {
            size_t i = phase == 0 ? k : def->n_steps - 1 - k;
            struct step_call c = {&def->steps[i], phase == 1, &ctx};
            ctx.step_index = (unsigned)i;
            ctx.step_name = def->steps[i].name;
            for (int twice = 0; twice < 2; twice++) {
                if (txo_db_transact(f->t.db, TXO_ISO_READ_COMMITTED, step_fn, &c, &err) < 0)
                    fail_msg("%s %s: %s", def->steps[i].name, phase ? "compensate" : "action",
                             err.msg);
            }
        }
        if (phase == 0) {
            assert_stock(f, "iphone-15", 8, 2);
            assert_stock(f, "case", 4, 1);
            assert_str(f, PAYMENT_STATUS, o, "CHARGED");
            assert_str(f, SHIPMENT_STATUS, o, "CREATED");
            assert_str(f, ORDER_STATUS, o, "CONFIRMED");
            assert_int_equal(all_events(f, id), 4);
        }
    }
    assert_stock(f, "iphone-15", 10, 0);
    assert_stock(f, "case", 5, 0);
    assert_str(f, PAYMENT_STATUS, o, "REFUNDED");
    assert_str(f, SHIPMENT_STATUS, o, "CANCELLED");
    assert_int_equal(events(f, id, "ShipmentCancelled"), 1);
    assert_int_equal(events(f, id, "PaymentRefunded"), 1);
    assert_int_equal(events(f, id, "StockReleased"), 1);
    assert_int_equal(all_events(f, id), 7);
    /* Reserving again after the release is refused, not silently re-reserved. */
    struct step_call again = {&def->steps[0], false, &ctx};
    assert_int_equal(txo_db_transact(f->t.db, TXO_ISO_READ_COMMITTED, step_fn, &again, &err),
                     TXO_EBUSINESS);
    assert_non_null(strstr(err.msg, "already released"));
    def->free_state(st);
    txo_free(payload);
    assert_invariants(f);
}

static void test_decode_rejects_bad_payloads(void **state)
{
    (void)state;
    const struct txo_saga_def *def = order_saga_def();
    const char *bad[] = {
        "not json",
        "[1,2]",
        "{\"order_id\":1,\"customer_id\":1,\"total_cents\":1,\"items\":[]}",
        "{\"order_id\":1,\"customer_id\":1,\"total_cents\":1,\"items\":[{\"sku\":\"a\",\"qty\":0,"
        "\"price_cents\":1}]}",
        "{\"order_id\":\"1\",\"customer_id\":1,\"total_cents\":1,\"items\":[{\"sku\":\"a\","
        "\"qty\":1,\"price_cents\":1}]}",
        "{\"order_id\":1,\"customer_id\":1,\"total_cents\":1,\"items\":[{\"qty\":1,"
        "\"price_cents\":1}]}",
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(bad); i++) {
        struct txo_error err;
        txo_error_init(&err);
        void *st = NULL;
        if (def->decode(bad[i], strlen(bad[i]), &st, &err) != TXO_EINVAL)
            fail_msg("payload %zu was accepted: %s", i, bad[i]);
        assert_null(st);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_success),
        cmocka_unit_test(test_no_stock),
        cmocka_unit_test(test_payment_declined),
        cmocka_unit_test(test_shipment_fails),
        cmocka_unit_test(test_compensation_fails_then_retried),
        cmocka_unit_test(test_release_fails_then_retried),
        cmocka_unit_test(test_transient_charge_failures_are_retried),
        cmocka_unit_test(test_duplicate_skus_are_merged),
        cmocka_unit_test(test_resumed_steps_do_not_double_apply),
        cmocka_unit_test(test_reserve_rerun_with_and_without_stock_left),
        cmocka_unit_test(test_every_step_is_idempotent),
        cmocka_unit_test_setup(test_decode_rejects_bad_payloads, testrun_no_fixture),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, testdb_free_state, NULL, NULL);
}
