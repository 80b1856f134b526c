/*
 * Batched saga steps under real InnoDB deadlocks, on a server of the test's own (the app user
 * may read information_schema.INNODB_TRX and INNODB_LOCK_WAITS there):
 *   - a ReserveStock batch of 20 sagas that InnoDB picks as the victim of a deadlock with a
 *     transaction taking the same rows in the opposite order is rolled back and run again by
 *     txo_db_transact, still as one batch: every saga completes with each step run once, and
 *     nothing of the rolled-back try is left (one reservation and one StockReserved event per
 *     order, stock conserved);
 *   - two batches in two threads over overlapping SKUs, round after round, always complete
 *     with those invariants (they lock the SKUs in sku order, so they should never deadlock;
 *     a deadlock that happens anyway must have been retried).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
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
#include "testsagabatch.h"
#include "testserver.h"

/* Rows the opposing transaction updates to outweigh the batch, which has written about 80
 * (its SKUs, 20 reservations, 20 events, 20 instances, 19 steps) when the deadlock comes:
 * InnoDB rolls back the transaction with fewer modified and locked rows. */
#define WEIGHT_ROWS 500
/* A batch that ran as a batch sends ~25 statements for its three steps, ~8 more for a
 * ReserveStock try run again; one by one it would be ~13 per saga. */
#define BATCH_STATEMENTS_MAX 60

/* ---- helpers ---- */

static int64_t count(struct txo_db *db, const char *sql)
{
    return testdb_i64(db, sql, NULL, 0);
}

/* The server's deadlocks so far (every connection's). */
static int64_t server_deadlocks(struct txo_db *db)
{
    return count(db, "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
                     "WHERE VARIABLE_NAME = 'INNODB_DEADLOCKS'");
}

/* One batch on its own connection and thread; the outcome is checked by the test's thread
 * (cmocka's assertions must not run on another thread). */
struct batch_thread {
    struct txo_db *db;
    const char *const *ids;
    size_t n;
    struct txo_saga_opts opts;
    pthread_barrier_t *start; /* NULL: start at once */
    int *rcs;
    enum txo_saga_status *finals;
    int rc;
    struct txo_error err;
};

static void *batch_main(void *arg)
{
    struct batch_thread *bt = arg;
    if (bt->start != NULL)
        pthread_barrier_wait(bt->start);
    txo_error_init(&bt->err);
    bt->rc = orders_run_saga_many(bt->db, bt->ids, bt->n, NULL, &bt->opts, bt->rcs, bt->finals,
                                  &bt->err);
    return NULL;
}

/* Every saga of the batch ran without error to COMPLETED. */
static void assert_batch_completed(const struct batch_thread *bt)
{
    if (bt->rc != 0)
        fail_msg("orders_run_saga_many: %s", bt->err.msg);
    for (size_t k = 0; k < bt->n; k++)
        if (bt->rcs[k] != 0 || bt->finals[k] != TXO_SAGA_COMPLETED)
            fail_msg("saga %s of the batch: %s, %s", bt->ids[k], txo_err_name(bt->rcs[k]),
                     txo_saga_status_name(bt->finals[k]));
}

/*
 * What a batch that committed once per step leaves, for the n sagas there are in all: every
 * step COMPLETED after one attempt, exactly one RESERVED reservation per saga and one
 * StockReserved event per order, and the order service's invariants over skus.
 */
static void assert_each_once(struct txo_db *db, int64_t n, const char *const *skus,
                             const int32_t *initial, size_t n_skus)
{
    assert_int_equal(count(db, "SELECT COUNT(*) FROM saga_instances WHERE status = 'COMPLETED'"),
                     n);
    assert_int_equal(count(db, "SELECT COUNT(*) FROM saga_steps WHERE status = 'COMPLETED' "
                               "AND attempts = 1"),
                     3 * n);
    assert_int_equal(count(db, "SELECT COUNT(*) FROM saga_steps WHERE step_name = "
                               "'ReserveStock' AND status = 'COMPLETED' AND attempts = 1"),
                     n);
    assert_int_equal(count(db, "SELECT COUNT(*) FROM saga_steps"), 3 * n);
    assert_int_equal(count(db, "SELECT COUNT(*) FROM inventory_reservations"), n);
    assert_int_equal(count(db, "SELECT COUNT(*) FROM saga_instances i WHERE (SELECT COUNT(*) "
                               "FROM inventory_reservations r WHERE r.saga_id = i.id "
                               "AND r.status = 'RESERVED') <> 1"),
                     0);
    assert_int_equal(count(db, "SELECT COUNT(*) FROM outbox_events "
                               "WHERE event_type = 'StockReserved'"),
                     n);
    assert_int_equal(count(db, "SELECT COUNT(*) FROM orders o WHERE (SELECT COUNT(*) FROM "
                               "outbox_events e WHERE e.event_type = 'StockReserved' AND "
                               "e.aggregate_id = CAST(o.id AS CHAR)) <> 1"),
                     0);
    assert_int_equal(count(db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"), n);
    /* Each order is one unit of one SKU: reserved is the number of orders for it. */
    assert_int_equal(count(db, "SELECT COUNT(*) FROM inventory i WHERE i.reserved <> (SELECT "
                               "COUNT(*) FROM order_items o WHERE o.sku = i.sku)"),
                     0);
    testsagabatch_assert_invariants(db, skus, initial, n_skus);
}

/* ---- a batch as the victim of a deadlock ---- */

/*
 * The second transaction, on its own connection and thread, one step at a time as the test
 * says (phase): it must stay open between the steps, so it runs in txo_db_transact.
 */
enum opponent_phase {
    OPP_START,
    OPP_HOLDING,  /* heavy, and holding the step row */
    OPP_LOCK_SKU, /* told to ask for the SKU row */
    OPP_SKU_DONE, /* that lock returned (lock_rc) */
    OPP_FINISH,   /* told to commit (or roll back after a failed lock) */
};

struct opponent {
    struct txo_db *db;
    const char *step_saga; /* the saga whose step 1 row it holds */
    const char *sku;       /* the SKU row it asks for */
    atomic_int phase;
    bool tried; /* run once: a retry by txo_db_transact would only blur the test */
    int lock_rc;
    struct txo_error lock_err;
    int rc; /* the transaction's */
};

/* Waits until the test moved the phase to at least `phase`. */
static void opponent_wait(struct opponent *o, int phase)
{
    while (atomic_load(&o->phase) < phase)
        txo_sleep_ms(5);
}

static int opponent_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct opponent *o = arg;
    if (o->tried)
        return txo_error_set(err, TXO_ECANCELED, "the second transaction runs once");
    o->tried = true;
    int rc = txo_tx_exec(tx, "UPDATE weight SET n = n + 1", NULL, 0, NULL, err);
    struct txo_param step[] = {txo_p_str(o->step_saga)};
    struct txo_rows *rows = NULL;
    if (rc == 0)
        rc = txo_tx_query(tx,
                          "SELECT status FROM saga_steps WHERE saga_id = ? AND step_order = 1 "
                          "FOR UPDATE",
                          step, 1, &rows, err);
    txo_rows_free(rows);
    rows = NULL;
    if (rc != 0)
        return rc;
    atomic_store(&o->phase, OPP_HOLDING);
    opponent_wait(o, OPP_LOCK_SKU);
    if (atomic_load(&o->phase) == OPP_LOCK_SKU) {
        struct txo_param sku[] = {txo_p_str(o->sku)};
        txo_error_init(&o->lock_err);
        o->lock_rc =
            txo_tx_query(tx, "SELECT sku, available FROM inventory WHERE sku = ? FOR UPDATE", sku,
                         1, &rows, &o->lock_err);
        txo_rows_free(rows);
        atomic_store(&o->phase, OPP_SKU_DONE);
    }
    opponent_wait(o, OPP_FINISH);
    return o->lock_rc == 0 ? 0 : txo_error_set(err, TXO_ECANCELED, "roll back");
}

static void *opponent_main(void *arg)
{
    struct opponent *o = arg;
    struct txo_error err;
    txo_error_init(&err);
    o->rc = txo_db_transact(o->db, TXO_ISO_READ_COMMITTED, opponent_fn, o, &err);
    if (atomic_load(&o->phase) < OPP_HOLDING)
        atomic_store(&o->phase, OPP_FINISH); /* failed before holding: do not keep the test */
    return NULL;
}

/* Waits (30 s at most) until the second transaction reached `phase`. */
static bool opponent_reached(struct opponent *o, int phase)
{
    int64_t deadline = txo_monotonic_ms() + 30000;
    while (atomic_load(&o->phase) < phase && txo_monotonic_ms() < deadline)
        txo_sleep_ms(5);
    return atomic_load(&o->phase) >= phase && (phase != OPP_HOLDING || o->tried);
}

#define VICTIM 20

/* testsagabatch_open() of a database named after name, each of the n skus given its stock. */
static struct txo_db *open_stocked(const char *name, struct txo_db_opts *o, const char *const *skus,
                                   const int32_t *stock, size_t n)
{
    struct txo_db *db = testsagabatch_open(&testserver_shared, name, o);
    for (size_t i = 0; i < n; i++)
        testsagabatch_set_stock(db, skus[i], stock[i]);
    return db;
}

static const char *const victim_skus[] = {"airpods", "iphone-15"};
static const int32_t victim_stock[] = {1000, 1000};

/*
 * 20 sagas in one batch, each order one unit of airpods or iphone-15. A second transaction
 * plays another batch that takes the same rows in the opposite order:
 *   1. it updates WEIGHT_ROWS rows of a table of its own (so InnoDB picks the batch as the
 *      victim, the transaction with less to undo) and locks the step row the batch locks last;
 *   2. the batch's ReserveStock transaction waits for that row in its last statement, with
 *      its SKUs locked and its reservations and events written;
 *   3. the second transaction asks for a SKU row the batch holds: a deadlock. InnoDB rolls
 *      the batch back (1213) and the second transaction gets its row at once;
 *   4. txo_db_transact runs the batch's transaction again, which now waits for that SKU row;
 *      the second transaction commits and the batch goes on.
 * The server and txo each counted one deadlock, txo retried once, the batch stayed a batch
 * (its statement count), and every saga completed with nothing of the first try left.
 */
static void test_a_deadlocked_batch_is_retried_as_a_batch(void **state)
{
    (void)state;
    struct txo_db_opts o;
    struct txo_db *db = open_stocked("sagabatch_deadlock", &o, victim_skus, victim_stock,
                                     TXO_ARRAY_LEN(victim_skus));
    int64_t order_ids[VICTIM];
    char saga_ids[VICTIM][TXO_SAGA_ID_LEN];
    const char *ids[VICTIM];
    for (size_t k = 0; k < VICTIM; k++) {
        testsagabatch_create(db, 100 + (int64_t)k, victim_skus[k % 2], false, &order_ids[k],
                             saga_ids[k]);
        ids[k] = saga_ids[k];
    }
    testdb_exec(db, "CREATE TABLE weight (id INT PRIMARY KEY, n INT NOT NULL)");
    char sql[256];
    snprintf(sql, sizeof(sql), "INSERT INTO weight SELECT seq, 0 FROM seq_1_to_%d", WEIGHT_ROWS);
    testdb_exec(db, sql);
    /* The step row the batch locks last. */
    const char *last = ids[testsagabatch_last_saga(ids, VICTIM)];

    struct txo_error err;
    txo_error_init(&err);
    struct txo_db *probe = NULL, *batch_db = NULL;
    struct opponent opp = {.step_saga = last, .sku = "airpods"};
    atomic_init(&opp.phase, OPP_START);
    assert_int_equal(txo_db_open(&o, &opp.db, &err), 0);
    assert_int_equal(txo_db_open(&o, &probe, &err), 0);
    /* The batch waits while the test takes its steps: under a slow sanitizer run that may
     * outlast InnoDB's default 10 s, and a lock wait timeout (retried too) would blur what the
     * deadlock did. */
    struct txo_db_opts bo = o;
    bo.lock_wait_timeout_s = 60;
    assert_int_equal(txo_db_open(&bo, &batch_db, &err), 0);
    int64_t other_conn = testsagabatch_connection_id(opp.db);
    int64_t batch_conn = testsagabatch_connection_id(batch_db);

    /* 1. The second transaction: heavy, and holding the last step row. */
    pthread_t opp_tid;
    assert_int_equal(pthread_create(&opp_tid, NULL, opponent_main, &opp), 0);
    const char *failure = NULL;
    if (!opponent_reached(&opp, OPP_HOLDING))
        failure = "the second transaction could not lock the step row";

    struct txo_db_stats before;
    txo_db_get_stats(&before);
    int64_t deadlocks_before = server_deadlocks(probe);
    int64_t statements_before = testsagabatch_statements(batch_db);
    int rcs[VICTIM];
    enum txo_saga_status finals[VICTIM];
    struct batch_thread bt = {
        .db = batch_db, .ids = ids, .n = VICTIM, .rcs = rcs, .finals = finals};
    txo_saga_opts_init(&bt.opts);
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, batch_main, &bt), 0);

    /* 2. The batch waits for the step row in its last statement. */
    char waiting[256] = "";
    char retry_waiting[256] = "";
    int64_t locked = -1;
    if (failure == NULL)
        locked =
            testsagabatch_wait_lock(probe, batch_conn, other_conn, 30000, waiting, sizeof(waiting));
    if (failure == NULL && locked < 0) {
        failure = "the batch never waited for the held step row";
    } else if (failure == NULL) {
        print_message("the ReserveStock batch waits holding %lld row locks: %.60s\n",
                      (long long)locked, waiting);
        /* 3. The opposite order: a SKU the batch holds. The batch is the victim, so this
         * returns as soon as the batch's try is rolled back. */
        atomic_store(&opp.phase, OPP_LOCK_SKU);
        if (!opponent_reached(&opp, OPP_SKU_DONE)) {
            failure = "the second transaction's SKU lock never returned";
        } else if (opp.lock_rc != 0) {
            print_message("the second transaction's lock: %s\n", opp.lock_err.msg);
            failure = "the second transaction was the deadlock's victim, not the batch";
        } else if (testsagabatch_wait_lock(probe, batch_conn, other_conn, 30000, retry_waiting,
                                           sizeof(retry_waiting)) < 0) {
            /* 4. The batch's transaction again, first statement: that SKU row. */
            failure = "the batch's transaction was not run again after the deadlock";
        }
    }
    /* Before any assertion: both threads must end (the second transaction commits when its
     * SKU lock succeeded, and rolls back otherwise). */
    atomic_store(&opp.phase, OPP_FINISH);
    pthread_join(opp_tid, NULL);
    int commit_rc = opp.rc;
    pthread_join(tid, NULL);
    if (failure != NULL)
        fail_msg("%s", failure);
    int64_t used = testsagabatch_statements(batch_db) - statements_before - 1;
    struct txo_db_stats after;
    txo_db_get_stats(&after);
    print_message("deadlocks: server %lld, txo %llu; retries %llu; the batch took %lld "
                  "statements\n",
                  (long long)(server_deadlocks(probe) - deadlocks_before),
                  (unsigned long long)(after.deadlocks - before.deadlocks),
                  (unsigned long long)(after.tx_retries - before.tx_retries), (long long)used);

    assert_int_equal(commit_rc, 0);
    assert_batch_completed(&bt);
    /* The batch waited in its last statement (every other row of its step locked), and was
     * run again from its first (the SKUs). */
    assert_true(strncmp(waiting, "UPDATE saga_steps", 17) == 0);
    /* Its 20 instances (lease renewal), 2 SKUs, 20 reservations and the 20 orders' event
     * counters (outbox_aggregates: each step appends its order's StockReserved). Its step
     * rows, changed by their primary key, are locked by the change itself (InnoDB's implicit
     * lock), which this count leaves out; the wait for the held one shows they are locked. */
    assert_int_equal(locked, VICTIM + 2 + VICTIM + VICTIM);
    assert_true(strncmp(retry_waiting, "SELECT sku, available FROM inventory", 36) == 0);
    /* One deadlock, seen by the batch's connection (the second transaction's statements all
     * succeeded), and one transaction run again. */
    assert_int_equal(server_deadlocks(probe) - deadlocks_before, 1);
    assert_int_equal(after.deadlocks - before.deadlocks, 1);
    assert_int_equal(after.tx_retries - before.tx_retries, 1);
    /* The second transaction was not rolled back. */
    assert_int_equal(count(probe, "SELECT SUM(n) FROM weight"), WEIGHT_ROWS);
    /* Still a batch: one by one would take ~13 statements per saga. */
    assert_true(used <= BATCH_STATEMENTS_MAX);
    assert_each_once(probe, VICTIM, victim_skus, victim_stock, TXO_ARRAY_LEN(victim_skus));
    assert_int_equal(count(probe, "SELECT reserved FROM inventory WHERE sku = 'airpods'"),
                     VICTIM / 2);
    txo_db_close(batch_db);
    txo_db_close(probe);
    txo_db_close(opp.db);
    txo_db_close(db);
}

/* ---- two batches at once over overlapping SKUs ---- */

#define ROUNDS    10
#define PER_BATCH 25

static const char *const overlap_skus[] = {"sku-a", "sku-b", "sku-c", "sku-d"};
static const int32_t overlap_stock[] = {1000, 1000, 1000, 1000};

/*
 * ROUNDS rounds of two batches of PER_BATCH sagas started together on two connections, one
 * over sku-a..c, the other over sku-b..d. Every round every saga completes, each step once,
 * as a batch; every deadlock the server saw (none expected) reached a batch, which ran its
 * transaction again.
 */
static void test_two_batches_over_overlapping_skus(void **state)
{
    (void)state;
    struct txo_db_opts o;
    struct txo_db *db = open_stocked("sagabatch_overlap", &o, overlap_skus, overlap_stock,
                                     TXO_ARRAY_LEN(overlap_skus));
    struct txo_error err;
    txo_error_init(&err);
    struct txo_db *dbs[2] = {NULL, NULL};
    for (size_t b = 0; b < 2; b++)
        assert_int_equal(txo_db_open(&o, &dbs[b], &err), 0);
    struct txo_db_stats before;
    txo_db_get_stats(&before);
    int64_t deadlocks_before = server_deadlocks(db);
    int64_t start_ms = txo_monotonic_ms();

    for (int round = 0; round < ROUNDS; round++) {
        char saga_ids[2][PER_BATCH][TXO_SAGA_ID_LEN];
        const char *ids[2][PER_BATCH];
        int rcs[2][PER_BATCH];
        enum txo_saga_status finals[2][PER_BATCH];
        for (size_t b = 0; b < 2; b++)
            for (size_t k = 0; k < PER_BATCH; k++) {
                int64_t order_id = 0;
                testsagabatch_create(db, 1 + 1000 * round + 100 * (int64_t)b + (int64_t)k,
                                     overlap_skus[b + k % 3], false, &order_id, saga_ids[b][k]);
                ids[b][k] = saga_ids[b][k];
            }
        pthread_barrier_t start;
        assert_int_equal(pthread_barrier_init(&start, NULL, 2), 0);
        struct batch_thread bt[2];
        int64_t statements[2];
        pthread_t tid[2];
        for (size_t b = 0; b < 2; b++) {
            bt[b] = (struct batch_thread){.db = dbs[b],
                                          .ids = ids[b],
                                          .n = PER_BATCH,
                                          .start = &start,
                                          .rcs = rcs[b],
                                          .finals = finals[b]};
            txo_saga_opts_init(&bt[b].opts);
            statements[b] = testsagabatch_statements(dbs[b]);
        }
        for (size_t b = 0; b < 2; b++)
            assert_int_equal(pthread_create(&tid[b], NULL, batch_main, &bt[b]), 0);
        for (size_t b = 0; b < 2; b++)
            pthread_join(tid[b], NULL);
        pthread_barrier_destroy(&start);
        for (size_t b = 0; b < 2; b++) {
            assert_batch_completed(&bt[b]);
            int64_t used = testsagabatch_statements(dbs[b]) - statements[b] - 1;
            if (used > BATCH_STATEMENTS_MAX)
                fail_msg("round %d: batch %zu took %lld statements, not run as a batch", round, b,
                         (long long)used);
        }
        assert_each_once(db, 2 * PER_BATCH * (round + 1), overlap_skus, overlap_stock,
                         TXO_ARRAY_LEN(overlap_skus));
    }
    struct txo_db_stats after;
    txo_db_get_stats(&after);
    int64_t seen = server_deadlocks(db) - deadlocks_before;
    print_message("%d rounds of 2 x %d sagas in %lld ms: deadlocks server %lld, txo %llu; "
                  "retries %llu\n",
                  ROUNDS, PER_BATCH, (long long)(txo_monotonic_ms() - start_ms), (long long)seen,
                  (unsigned long long)(after.deadlocks - before.deadlocks),
                  (unsigned long long)(after.tx_retries - before.tx_retries));
    /* Only the batches use this server: each deadlock it counted failed one of their
     * statements, and every one of those was retried (the sagas all completed). */
    assert_int_equal(after.deadlocks - before.deadlocks, (uint64_t)seen);
    assert_true(after.tx_retries - before.tx_retries >= after.deadlocks - before.deadlocks);
    for (size_t b = 0; b < 2; b++)
        txo_db_close(dbs[b]);
    txo_db_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_deadlocked_batch_is_retried_as_a_batch),
        cmocka_unit_test(test_two_batches_over_overlapping_skus),
    };
    return cmocka_run_group_tests_name("saga batch deadlocks", tests, testserver_group_setup_plain,
                                       testserver_group_teardown);
}
