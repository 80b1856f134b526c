/*
 * Batched saga steps (txo_saga_run_many) with the order saga's batch forms, against a real
 * MariaDB: a batch of 50 orders completes with a few statements per step for the whole batch;
 * with scarce stock the orders that do not fit fail alone and the rest commit; orders that
 * need the single path inside a batch (cancelled meanwhile, injected faults) get exactly the
 * single path's outcome; a poison saga whose rows fail a batch statement sends its batch one by
 * one, and the others still commit; and on a server of the test's own (where the app user may read
 * information_schema.INNODB_TRX) a batch of 50 locks its own rows only: not the running sagas
 * of another batch, not the SKUs it does not touch.
 *
 * After each test the order service's invariants hold: available + reserved per SKU
 * conserved and never negative, reserved = the RESERVED reservations = the quantity of the
 * CONFIRMED orders, at most one payment and one shipment per order.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "order_saga.h"
#include "orders.h"
#include "testclock.h"
#include "testdb.h"
#include "testsagabatch.h"
#include "testserver.h"

#define BATCH 50

struct fixture {
    struct testdb t;
    struct testclock clock;
    struct txo_saga_opts opts;
    int64_t order_ids[2 * BATCH];
    char saga_ids[2 * BATCH][TXO_SAGA_ID_LEN];
    const char *ids[2 * BATCH];
    int rcs[2 * BATCH];
    enum txo_saga_status finals[2 * BATCH];
};

static int setup(void **state)
{
    struct fixture *f = testdb_fixture_new(sizeof(*f), "sagabatch", 0);
    testsagabatch_set_stock(f->t.db, "iphone-15", 1000);
    testsagabatch_set_stock(f->t.db, "airpods", 1000);
    testsagabatch_set_stock(f->t.db, "case", 5);
    testclock_init(&f->clock);
    txo_saga_opts_init(&f->opts);
    f->opts.clock = &f->clock.clock;
    *state = f;
    return 0;
}

/* ---- helpers ---- */

static int64_t count(struct txo_db *db, const char *sql)
{
    return testdb_i64(db, sql, NULL, 0);
}

/* Order k: one unit of sku (and two airpods when with_airpods), its saga started. */
static void create(struct fixture *f, struct txo_db *db, size_t k, const char *sku,
                   bool with_airpods)
{
    testsagabatch_create(db, 100 + (int64_t)k, sku, with_airpods, &f->order_ids[k], f->saga_ids[k]);
    f->ids[k] = f->saga_ids[k];
}

/* Runs sagas [first, first + n) as one batch on db. */
static void run_batch(struct fixture *f, struct txo_db *db, size_t first, size_t n,
                      const struct order_faults *faults)
{
    testsagabatch_run(db, &f->ids[first], n, faults, &f->opts, &f->rcs[first], &f->finals[first]);
}

static const char *const skus[] = {"iphone-15", "airpods", "case"};

static const int32_t initial_stock[] = {1000, 1000, 5};

static void assert_invariants(struct txo_db *db)
{
    testsagabatch_assert_invariants(db, skus, initial_stock, TXO_ARRAY_LEN(skus));
}

/* ---- tests ---- */

/* 50 orders, plenty of stock: every saga COMPLETED, every order CONFIRMED with one payment,
 * one shipment and its three events, each step run once, for a few statements per step for
 * the whole batch instead of ~13 per saga. */
static void test_batch_of_50_completes(void **state)
{
    struct fixture *f = *state;
    for (size_t k = 0; k < BATCH; k++)
        create(f, f->t.db, k, "iphone-15", k % 2 == 0);
    int64_t before = testsagabatch_statements(f->t.db);
    run_batch(f, f->t.db, 0, BATCH, NULL);
    /* Minus the counting query itself. */
    int64_t used = testsagabatch_statements(f->t.db) - before - 1;
    for (size_t k = 0; k < BATCH; k++)
        assert_int_equal(f->finals[k], TXO_SAGA_COMPLETED);
    assert_int_equal(count(f->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"),
                     BATCH);
    assert_int_equal(count(f->t.db, "SELECT COUNT(*) FROM payments WHERE status = 'CHARGED'"),
                     BATCH);
    assert_int_equal(count(f->t.db, "SELECT COUNT(*) FROM shipments WHERE status = 'CREATED'"),
                     BATCH);
    const char *types[] = {"StockReserved", "PaymentCharged", "ShipmentCreated"};
    for (size_t i = 0; i < TXO_ARRAY_LEN(types); i++) {
        struct txo_param p = txo_p_str(types[i]);
        assert_int_equal(
            testdb_i64(f->t.db, "SELECT COUNT(*) FROM outbox_events WHERE event_type = ?", &p, 1),
            BATCH);
    }
    assert_int_equal(count(f->t.db, "SELECT COUNT(*) FROM saga_steps WHERE status = 'COMPLETED' "
                                    "AND attempts = 1"),
                     3 * BATCH);
    assert_int_equal(count(f->t.db, "SELECT COUNT(*) FROM saga_instances WHERE owner <> ''"), 0);
    /* Take the leases (2) + per step: its own statements (ReserveStock 5, ChargePayment 3,
     * CreateShipment 5) + the engine's two + BEGIN/COMMIT: about 25 for the batch. One by one
     * it is ~13 per saga (650 here). */
    print_message("a batch of %d sagas took %lld statements\n", BATCH, (long long)used);
    assert_true(used <= 40);
    assert_invariants(f->t.db);
}

/* Scarce stock: 12 orders for the 5 cases there are. The first five in batch order commit;
 * the other seven fail alone (step FAILED with the reason, saga FAILED, order CANCELLED). */
static void test_scarce_stock_fails_only_the_orders_that_do_not_fit(void **state)
{
    struct fixture *f = *state;
    for (size_t k = 0; k < 12; k++)
        create(f, f->t.db, k, "case", false);
    run_batch(f, f->t.db, 0, 12, NULL);
    for (size_t k = 0; k < 12; k++)
        assert_int_equal(f->finals[k], k < 5 ? TXO_SAGA_COMPLETED : TXO_SAGA_FAILED);
    assert_int_equal(count(f->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"), 5);
    assert_int_equal(count(f->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CANCELLED'"), 7);
    assert_int_equal(count(f->t.db, "SELECT COUNT(*) FROM saga_steps WHERE step_name = "
                                    "'ReserveStock' AND status = 'FAILED' AND error LIKE "
                                    "'%not enough stock for sku=case%'"),
                     7);
    assert_int_equal(count(f->t.db, "SELECT available FROM inventory WHERE sku = 'case'"), 0);
    assert_int_equal(count(f->t.db, "SELECT COUNT(*) FROM payments"), 5);
    assert_invariants(f->t.db);
}

/* An order cancelled by its customer while its saga waits in the batch: the batch reserves
 * its stock with the others, CreateShipment's batch leaves it to the single path, which
 * fails the step, and the saga is compensated (refund, release); the other nine confirm. */
static void test_cancelled_order_in_a_batch_is_compensated(void **state)
{
    struct fixture *f = *state;
    for (size_t k = 0; k < 10; k++)
        create(f, f->t.db, k, "iphone-15", true);
    testdb_exec(f->t.db, "UPDATE orders SET status = 'CANCELLED', version = version + 1 "
                         "WHERE id = (SELECT MIN(id) FROM orders)");
    run_batch(f, f->t.db, 0, 10, NULL);
    assert_int_equal(f->finals[0], TXO_SAGA_COMPENSATED);
    for (size_t k = 1; k < 10; k++)
        assert_int_equal(f->finals[k], TXO_SAGA_COMPLETED);
    struct txo_param p = txo_p_i64(f->order_ids[0]);
    assert_int_equal(testdb_i64(f->t.db,
                                "SELECT COUNT(*) FROM payments WHERE order_id = ? AND status = "
                                "'REFUNDED'",
                                &p, 1),
                     1);
    assert_int_equal(
        testdb_i64(f->t.db, "SELECT COUNT(*) FROM shipments WHERE order_id = ?", &p, 1), 0);
    assert_invariants(f->t.db);
}

/* Injected faults are the single path's business: with a declined card every saga of the
 * batch fails its payment and is compensated exactly as one by one. */
static void test_faults_take_the_single_path(void **state)
{
    struct fixture *f = *state;
    for (size_t k = 0; k < 6; k++)
        create(f, f->t.db, k, "iphone-15", false);
    struct order_faults faults = {.decline_payment = true};
    run_batch(f, f->t.db, 0, 6, &faults);
    for (size_t k = 0; k < 6; k++)
        assert_int_equal(f->finals[k], TXO_SAGA_COMPENSATED);
    assert_int_equal(count(f->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CANCELLED'"), 6);
    assert_int_equal(count(f->t.db, "SELECT COUNT(*) FROM saga_steps WHERE step_name = "
                                    "'ChargePayment' AND status = 'FAILED' AND error LIKE "
                                    "'%card declined%'"),
                     6);
    assert_int_equal(count(f->t.db, "SELECT COUNT(*) FROM inventory_reservations "
                                    "WHERE status = 'RELEASED'"),
                     6);
    assert_invariants(f->t.db);
}

/* A poison saga whose rows make a batch statement fail (here its PaymentCharged event is in
 * the outbox already, so the batch's multi-row INSERT of the events hits the unique key): the
 * batch rolls back and its sagas run one by one, where the single path ignores the duplicate
 * event. Every saga completes, with one payment each and that event once. */
static void test_a_poison_saga_fails_its_batch_not_the_others(void **state)
{
    struct fixture *f = *state;
    for (size_t k = 0; k < 5; k++)
        create(f, f->t.db, k, "iphone-15", false);
    char key[128];
    snprintf(key, sizeof(key), "saga:%s:payment-charged", f->saga_ids[2]);
    struct txo_param p[] = {txo_p_str(key)};
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_db_exec(f->t.db,
                                 "INSERT INTO outbox_events (aggregate_type, aggregate_id, "
                                 "event_type, payload, idempotency_key) "
                                 "VALUES ('order', '0', 'PaymentCharged', '{}', ?)",
                                 p, 1, NULL, &err),
                     0);
    run_batch(f, f->t.db, 0, 5, NULL);
    for (size_t k = 0; k < 5; k++)
        assert_int_equal(f->finals[k], TXO_SAGA_COMPLETED);
    assert_int_equal(count(f->t.db, "SELECT COUNT(*) FROM payments WHERE status = 'CHARGED'"), 5);
    assert_int_equal(
        testdb_i64(f->t.db, "SELECT COUNT(*) FROM outbox_events WHERE idempotency_key = ?", p, 1),
        1);
    assert_int_equal(count(f->t.db, "SELECT COUNT(*) FROM outbox_events "
                                    "WHERE event_type = 'PaymentCharged'"),
                     5);
    assert_invariants(f->t.db);
}

/* A saga another live worker holds is left to it; the rest of the batch runs. */
static void test_a_saga_held_elsewhere_is_skipped(void **state)
{
    struct fixture *f = *state;
    for (size_t k = 0; k < 4; k++)
        create(f, f->t.db, k, "iphone-15", false);
    struct txo_param p[] = {txo_p_str(f->saga_ids[2])};
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_db_exec(f->t.db,
                                 "UPDATE saga_instances SET owner = 'elsewhere', "
                                 "lease_until = NOW(6) + INTERVAL 60 SECOND WHERE id = ?",
                                 p, 1, NULL, &err),
                     0);
    txo_error_init(&err);
    assert_int_equal(
        orders_run_saga_many(f->t.db, f->ids, 4, NULL, &f->opts, f->rcs, f->finals, &err), 0);
    assert_int_equal(f->rcs[2], TXO_ELEASELOST);
    for (size_t k = 0; k < 4; k++)
        if (k != 2)
            assert_int_equal(f->finals[k], TXO_SAGA_COMPLETED);
    assert_int_equal(count(f->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"), 3);
}

/* ---- the locks of a batch, on a server of our own ---- */

/* Holds the step row of one saga (FOR UPDATE) in a transaction until told to let go. */
struct holder {
    struct txo_db *db;
    const char *saga_id;
    atomic_bool locked, release;
};

static int hold_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct holder *h = arg;
    struct txo_param p = txo_p_str(h->saga_id);
    struct txo_rows *rows = NULL;
    int rc = txo_tx_query(tx,
                          "SELECT status FROM saga_steps WHERE saga_id = ? AND step_order = 1 "
                          "FOR UPDATE",
                          &p, 1, &rows, err);
    txo_rows_free(rows);
    if (rc != 0)
        return rc;
    atomic_store(&h->locked, true);
    while (!atomic_load(&h->release))
        txo_sleep_ms(10);
    return txo_error_set(err, TXO_ECANCELED, "let go"); /* roll back */
}

static void *holder_main(void *arg)
{
    struct holder *h = arg;
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_transact(h->db, TXO_ISO_READ_COMMITTED, hold_fn, h, &err);
    assert_int_equal(rc, TXO_ECANCELED); /* it held the row until let go */
    return NULL;
}

/* True when a FOR UPDATE NOWAIT of sql (one id) gets the row at once. */
static bool can_lock(struct txo_db *db, const char *sql, const char *id)
{
    struct txo_param p = txo_p_str(id);
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_query(db, sql, &p, 1, &rows, &err);
    txo_rows_free(rows);
    return rc == 0;
}

struct batch_thread {
    struct fixture *f;
    struct txo_db *db;
};

static void *batch_main(void *arg)
{
    struct batch_thread *bt = arg;
    run_batch(bt->f, bt->db, 0, BATCH, NULL);
    return NULL;
}

/*
 * 50 sagas in one batch and 10 RUNNING sagas of another worker's batch (their lease live), on
 * other SKUs. A second connection holds the step row of the batch's last saga, so the
 * batch's ReserveStock transaction waits on its last statement with everything else it
 * locks held; then:
 *   - information_schema.INNODB_TRX says how many rows it locks: its 50 instances, 49 steps,
 *     its SKUs, and not the other batch's sagas (a statement that walked an index on status
 *     would have locked those too);
 *   - the other batch's instance rows and SKUs can be locked at once (NOWAIT) from a third
 *     connection, the batch's own cannot.
 * Then the holder lets go and the batch completes.
 */
static void test_a_batch_locks_only_its_rows(void **state)
{
    (void)state;
    struct fixture *f = txo_calloc(1, sizeof(*f));
    struct txo_db_opts o;
    struct txo_db *db = testsagabatch_open(&testserver_shared, "sagabatch_locks", &o);
    struct txo_error err;
    txo_error_init(&err);
    testsagabatch_set_stock(db, "iphone-15", 1000);
    testsagabatch_set_stock(db, "airpods", 1000);
    testsagabatch_set_stock(db, "case", 1000);
    txo_saga_opts_init(&f->opts);
    for (size_t k = 0; k < BATCH + 10; k++)
        create(f, db, k, k < BATCH ? "iphone-15" : "case", k < BATCH);
    /* The other batch: its sagas RUNNING under a live lease of another owner. */
    testdb_exec(db, "UPDATE saga_instances SET owner = 'other-worker', "
                    "lease_until = NOW(6) + INTERVAL 300 SECOND ORDER BY created_at DESC, id "
                    "LIMIT 10");
    struct txo_param other[10];
    for (size_t k = 0; k < 10; k++)
        other[k] = txo_p_str(f->saga_ids[BATCH + k]);
    assert_int_equal(testdb_i64(db,
                                "SELECT COUNT(*) FROM saga_instances WHERE owner = "
                                "'other-worker' AND id IN (?,?,?,?,?,?,?,?,?,?)",
                                other, 10),
                     10);

    struct txo_db *probe = NULL, *batch_db = NULL;
    /* The step rows are locked in saga id order (their PRIMARY (saga_id, step_order)): hold the
     * last one, so the batch has locked every other row it needs when it waits. */
    size_t last = testsagabatch_last_saga(f->ids, BATCH);
    struct holder h = {.saga_id = f->saga_ids[last]};
    atomic_init(&h.locked, false);
    atomic_init(&h.release, false);
    assert_int_equal(txo_db_open(&o, &h.db, &err), 0);
    assert_int_equal(txo_db_open(&o, &probe, &err), 0);
    /* The batch waits while the test reads what it locks: a loaded sanitizer run can outlast
     * the default 10 s lock wait, and a retried try would be read half-way. */
    struct txo_db_opts bo = o;
    bo.lock_wait_timeout_s = 60;
    assert_int_equal(txo_db_open(&bo, &batch_db, &err), 0);
    int64_t holder_conn = testsagabatch_connection_id(h.db);
    int64_t batch_conn = testsagabatch_connection_id(batch_db);
    pthread_t holder_tid, tid;
    assert_int_equal(pthread_create(&holder_tid, NULL, holder_main, &h), 0);
    while (!atomic_load(&h.locked))
        txo_sleep_ms(10);

    struct batch_thread bt = {.f = f, .db = batch_db};
    assert_int_equal(pthread_create(&tid, NULL, batch_main, &bt), 0);
    /* Wait until the batch's transaction waits for the holder's lock. */
    int64_t locked = testsagabatch_wait_lock(probe, batch_conn, holder_conn, 10000, NULL, 0);
    if (locked < 0) {
        atomic_store(&h.release, true);
        pthread_join(holder_tid, NULL);
        pthread_join(tid, NULL);
        fail_msg("the batch never waited for the held step row");
    }
    print_message("the ReserveStock batch of %d sagas locks %lld rows\n", BATCH, (long long)locked);
    /* Its 50 instances (lease renewal), its 2 SKUs, the 50 reservations it inserted and the
     * event counters of the 50 orders (outbox_aggregates: each step appends its order's
     * StockReserved): 152. Its step rows, changed by their primary key, are locked by the
     * change itself (InnoDB's implicit lock), which this count leaves out: the probes below
     * check them. Never the other batch's 10 sagas on top (a statement walking
     * idx_saga_resume would add them), nor the case SKU. */
    bool probes_ok = locked == BATCH + 2 + BATCH + BATCH;
    static const char lock_saga[] = "SELECT id FROM saga_instances WHERE id = ? FOR UPDATE NOWAIT";
    static const char lock_step[] = "SELECT saga_id FROM saga_steps WHERE saga_id = ? "
                                    "AND step_order = 1 FOR UPDATE NOWAIT";
    for (size_t k = 0; k < 10; k++)
        if (!can_lock(probe, lock_saga, f->saga_ids[BATCH + k]) ||
            !can_lock(probe, lock_step, f->saga_ids[BATCH + k])) {
            print_message("the other batch's saga %zu is locked by this batch\n", k);
            probes_ok = false;
        }
    if (can_lock(probe, lock_step, f->saga_ids[last == 0 ? 1 : 0])) {
        print_message("the batch does not hold its own step rows\n");
        probes_ok = false;
    }
    if (!can_lock(probe, "SELECT sku FROM inventory WHERE sku = ? FOR UPDATE NOWAIT", "case")) {
        print_message("a SKU outside the batch is locked by it\n");
        probes_ok = false;
    }
    if (can_lock(probe, lock_saga, f->saga_ids[0])) {
        print_message("the batch does not hold its own instance rows\n");
        probes_ok = false;
    }
    atomic_store(&h.release, true); /* before any assertion: the threads must end */
    pthread_join(holder_tid, NULL);
    pthread_join(tid, NULL);
    assert_true(probes_ok);
    for (size_t k = 0; k < BATCH; k++)
        assert_int_equal(f->finals[k], TXO_SAGA_COMPLETED);
    assert_int_equal(count(db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"), BATCH);
    txo_db_close(batch_db);
    txo_db_close(probe);
    txo_db_close(h.db);
    txo_db_close(db);
    txo_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_batch_of_50_completes, setup, testdb_free_state),
        cmocka_unit_test_setup_teardown(test_scarce_stock_fails_only_the_orders_that_do_not_fit,
                                        setup, testdb_free_state),
        cmocka_unit_test_setup_teardown(test_cancelled_order_in_a_batch_is_compensated, setup,
                                        testdb_free_state),
        cmocka_unit_test_setup_teardown(test_faults_take_the_single_path, setup, testdb_free_state),
        cmocka_unit_test_setup_teardown(test_a_poison_saga_fails_its_batch_not_the_others, setup,
                                        testdb_free_state),
        cmocka_unit_test_setup_teardown(test_a_saga_held_elsewhere_is_skipped, setup,
                                        testdb_free_state),
    };
    const struct CMUnitTest own_server[] = {
        cmocka_unit_test(test_a_batch_locks_only_its_rows),
    };
    int failed = cmocka_run_group_tests_name("saga batch", tests, NULL, NULL);
    failed += cmocka_run_group_tests_name("saga batch locks", own_server,
                                          testserver_group_setup_plain, testserver_group_teardown);
    return failed;
}
