/*
 * The database layer against a real MariaDB: bound parameters, buffered rows, error mapping,
 * transactions that commit or roll back, whole-transaction retry on deadlock (also one that
 * comes in the middle of a result set), lock wait timeout and a killed connection, the
 * caller's retry policy (txo_db_transact_opts), and idempotent migrations.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "orders.h"
#include "testdb.h"

static int setup(void **state)
{
    static struct testdb t;
    testdb_setup(&t, "db");
    testdb_exec(t.db, "CREATE TABLE kv (k VARCHAR(64) PRIMARY KEY, v BIGINT NOT NULL,"
                      " note TEXT NULL, j JSON NULL) ENGINE=InnoDB");
    *state = &t;
    return 0;
}

static int teardown(void **state)
{
    testdb_teardown(*state);
    return 0;
}

struct put {
    const char *k;
    int64_t v;
    int fail_with; /* 0 = commit */
    unsigned calls;
};

static int put_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct put *p = arg;
    p->calls++;
    struct txo_param params[] = {txo_p_str(p->k), txo_p_i64(p->v)};
    int rc = txo_tx_exec(tx, "INSERT INTO kv (k, v) VALUES (?, ?)", params, 2, NULL, err);
    if (rc < 0)
        return rc;
    if (p->fail_with)
        return txo_error_set(err, p->fail_with, "asked to fail");
    return 0;
}

static void test_bound_params_and_rows(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    /* Values that would break string-built SQL go through untouched. */
    const char *nasty = "it's \"quoted\"; DROP TABLE kv; -- \xd0\x9f\xd1\x80\xd0\xb8";
    struct txo_param p[] = {txo_p_str("a"), txo_p_i64(INT64_MAX), txo_p_str(nasty),
                            txo_p_str("{\"n\": 9007199254740993}")};
    struct txo_exec_result res;
    assert_int_equal(
        txo_db_exec(t->db, "INSERT INTO kv (k, v, note, j) VALUES (?, ?, ?, ?)", p, 4, &res, &err),
        0);
    assert_int_equal(res.affected_rows, 1);

    struct txo_rows *rows = NULL;
    struct txo_param key = txo_p_str("a");
    assert_int_equal(
        txo_db_query(t->db, "SELECT k, v, note, j, NULL FROM kv WHERE k = ?", &key, 1, &rows, &err),
        0);
    assert_int_equal(txo_rows_count(rows), 1);
    assert_int_equal(txo_rows_columns(rows), 5);
    assert_string_equal(txo_rows_str(rows, 0, 0, NULL), "a");
    assert_true(txo_rows_i64(rows, 0, 1) == INT64_MAX);
    size_t len = 0;
    assert_string_equal(txo_rows_str(rows, 0, 2, &len), nasty);
    assert_int_equal(len, strlen(nasty));
    assert_non_null(strstr(txo_rows_str(rows, 0, 3, NULL), "9007199254740993"));
    assert_true(txo_rows_is_null(rows, 0, 4));
    assert_null(txo_rows_str(rows, 0, 4, NULL));
    txo_rows_free(rows);
    assert_int_equal(testdb_i64(t->db, "SELECT COUNT(*) FROM kv", NULL, 0), 1);
}

static void test_error_mapping(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    struct txo_param p[] = {txo_p_str("dup"), txo_p_i64(1)};
    assert_int_equal(txo_db_exec(t->db, "INSERT INTO kv (k, v) VALUES (?, ?)", p, 2, NULL, &err),
                     0);
    assert_int_equal(txo_db_exec(t->db, "INSERT INTO kv (k, v) VALUES (?, ?)", p, 2, NULL, &err),
                     TXO_EDUPLICATE);
    assert_int_equal(err.mysql_errno, 1062);
    assert_string_equal(err.sqlstate, "23000");

    struct txo_param bad[] = {txo_p_str("badjson"), txo_p_i64(1), txo_p_str("{not json")};
    txo_error_init(&err);
    assert_int_equal(
        txo_db_exec(t->db, "INSERT INTO kv (k, v, j) VALUES (?, ?, ?)", bad, 3, NULL, &err),
        TXO_ECONSTRAINT);
    struct txo_param null_v[] = {txo_p_str("nullv"), txo_p_null()};
    assert_int_equal(
        txo_db_exec(t->db, "INSERT INTO kv (k, v) VALUES (?, ?)", null_v, 2, NULL, &err),
        TXO_ECONSTRAINT);
    /* Wrong parameter count is caught before the server sees it. */
    assert_int_equal(txo_db_exec(t->db, "INSERT INTO kv (k, v) VALUES (?, ?)", p, 1, NULL, &err),
                     TXO_EINVAL);
    /* A syntax error is permanent. */
    assert_int_equal(txo_db_exec(t->db, "INSERT INTO nope VALUES (?)", p, 1, NULL, &err), TXO_EDB);
    assert_false(txo_err_is_transient(TXO_EDB));
    assert_int_equal(
        testdb_i64(t->db, "SELECT COUNT(*) FROM kv WHERE k IN ('badjson','nullv')", NULL, 0), 0);
}

static void test_commit_and_rollback(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    struct put ok = {"committed", 7, 0, 0};
    assert_int_equal(txo_db_transact(t->db, TXO_ISO_READ_COMMITTED, put_fn, &ok, &err), 0);
    struct put bad = {"rolled-back", 8, TXO_EBUSINESS, 0};
    assert_int_equal(txo_db_transact(t->db, TXO_ISO_REPEATABLE_READ, put_fn, &bad, &err),
                     TXO_EBUSINESS);
    assert_int_equal(bad.calls, 1); /* a business error is never retried */
    assert_string_equal(err.msg, "asked to fail");
    struct txo_param k1 = txo_p_str("committed"), k2 = txo_p_str("rolled-back");
    assert_int_equal(testdb_i64(t->db, "SELECT COUNT(*) FROM kv WHERE k = ?", &k1, 1), 1);
    assert_int_equal(testdb_i64(t->db, "SELECT COUNT(*) FROM kv WHERE k = ?", &k2, 1), 0);
}

/* Two transactions lock rows x and y in opposite orders: one of them deadlocks, and the
 * retry of the whole transaction lets both finish. */
struct crosser {
    struct txo_db *db;
    const char *first, *second;
    pthread_barrier_t *barrier;
    unsigned calls;
    int rc;
};

static int cross_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct crosser *c = arg;
    c->calls++;
    struct txo_param a = txo_p_str(c->first), b = txo_p_str(c->second);
    int rc = txo_tx_exec(tx, "UPDATE kv SET v = v + 1 WHERE k = ?", &a, 1, NULL, err);
    if (rc < 0)
        return rc;
    if (c->calls == 1)
        pthread_barrier_wait(c->barrier); /* both hold their first lock */
    return txo_tx_exec(tx, "UPDATE kv SET v = v + 1 WHERE k = ?", &b, 1, NULL, err);
}

static void *cross_thread(void *arg)
{
    struct crosser *c = arg;
    struct txo_error err;
    txo_error_init(&err);
    c->rc = txo_db_transact(c->db, TXO_ISO_READ_COMMITTED, cross_fn, c, &err);
    return NULL;
}

static void test_deadlock_is_retried(void **state)
{
    struct testdb *t = *state;
    testdb_exec(t->db, "INSERT INTO kv (k, v) VALUES ('x', 0), ('y', 0)");
    struct txo_db_stats before, after;
    txo_db_get_stats(&before);
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, 2);
    struct crosser a = {testdb_connect(t), "x", "y", &barrier, 0, -1};
    struct crosser b = {testdb_connect(t), "y", "x", &barrier, 0, -1};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, cross_thread, &a);
    pthread_create(&tb, NULL, cross_thread, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_barrier_destroy(&barrier);
    txo_db_get_stats(&after);
    assert_int_equal(a.rc, 0);
    assert_int_equal(b.rc, 0);
    assert_true(a.calls + b.calls >= 3); /* the victim ran again */
    assert_true(after.deadlocks > before.deadlocks);
    assert_true(after.tx_retries > before.tx_retries);
    /* Each transaction applied exactly once: two increments per row. */
    assert_int_equal(testdb_i64(t->db, "SELECT SUM(v) FROM kv WHERE k IN ('x','y')", NULL, 0), 4);
    txo_db_close(a.db);
    txo_db_close(b.db);
}

/*
 * A deadlock that the server reports in the middle of a result set (after the column
 * definitions, while the SELECT ... FOR UPDATE waits for a row lock), not in the reply to the
 * execute: the retry runs the same cached statement again at once, and must not wait for the
 * rest of the failed result. The relay's reclaim hung this way (read_timeout 600 s).
 */
#define DL_SELECT "SELECT k FROM kv WHERE k IN ('dl1', 'dl2') ORDER BY k DESC FOR UPDATE"

struct dl_victim {
    struct txo_db *db;
    unsigned calls;
    int rc;
    int64_t elapsed_ms;
    size_t n_rows;
};

static int dl_victim_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct dl_victim *v = arg;
    v->calls++;
    struct txo_rows *rows = NULL;
    /* Locks dl2, then waits for dl1, which the holder has: the first statement, as in the relay. */
    int rc = txo_tx_query(tx, DL_SELECT, NULL, 0, &rows, err);
    v->n_rows = txo_rows_count(rows);
    txo_rows_free(rows);
    return rc;
}

static void *dl_victim_thread(void *arg)
{
    struct dl_victim *v = arg;
    struct txo_error err;
    txo_error_init(&err);
    int64_t t0 = txo_monotonic_ms();
    v->rc = txo_db_transact(v->db, TXO_ISO_READ_COMMITTED, dl_victim_fn, v, &err);
    v->elapsed_ms = txo_monotonic_ms() - t0;
    if (v->rc < 0)
        print_error("victim: %s\n", err.msg);
    return NULL;
}

static void test_deadlock_in_result_set_then_retry(void **state)
{
    struct testdb *t = *state;
    testdb_exec(t->db, "INSERT INTO kv (k, v) VALUES ('dl1', 0), ('dl2', 0)");
    /* The victim waits 3 s at most for a reply: a desynchronised protocol shows as a timeout. */
    struct txo_db_opts opts = t->opts;
    opts.read_timeout_s = 3;
    struct dl_victim v = {.rc = -1};
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_db_open(&opts, &v.db, &err), 0);

    /*
     * The holder locks dl1 and writes some rows first, so that InnoDB picks the victim (the
     * lighter transaction) to roll back, not the holder.
     */
    struct txo_db *holder = testdb_connect(t);
    testdb_exec(holder, "START TRANSACTION");
    for (int i = 0; i < 20; i++) {
        char key[32];
        snprintf(key, sizeof(key), "dl-fill-%d", i);
        struct txo_param p[] = {txo_p_str(key), txo_p_i64(i)};
        assert_int_equal(
            txo_db_exec(holder, "INSERT INTO kv (k, v) VALUES (?, ?)", p, 2, NULL, &err), 0);
    }
    testdb_exec(holder, "UPDATE kv SET v = v + 1 WHERE k = 'dl1'");

    struct txo_db_stats before, after;
    txo_db_get_stats(&before);
    pthread_t th;
    pthread_create(&th, NULL, dl_victim_thread, &v);
    /* Until the victim's SELECT holds dl2 and waits for dl1. */
    for (int i = 0; i < 200; i++) {
        if (testdb_i64(t->db,
                       "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE "
                       "COMMAND = 'Execute' AND INFO LIKE 'SELECT k FROM kv WHERE k IN%'",
                       NULL, 0) > 0)
            break;
        txo_sleep_ms(10);
    }
    txo_sleep_ms(200);
    /* The holder now wants dl2: a cycle, and the victim's SELECT gets error 1213. */
    testdb_exec(holder, "UPDATE kv SET v = v + 1 WHERE k = 'dl2'");
    testdb_exec(holder, "COMMIT");
    pthread_join(th, NULL);
    txo_db_get_stats(&after);

    assert_int_equal(v.rc, 0);
    assert_true(after.deadlocks > before.deadlocks);
    /* One retry on the same connection, no lost connection, no read timeout. */
    assert_int_equal(v.calls, 2);
    assert_int_equal(after.conn_lost, before.conn_lost);
    assert_true(v.elapsed_ms < 2500);
    assert_int_equal(v.n_rows, 2);
    /* The connection is in step: the next statements on it work. */
    assert_int_equal(txo_db_transact(v.db, TXO_ISO_READ_COMMITTED, dl_victim_fn, &v, &err), 0);
    assert_int_equal(v.n_rows, 2);
    assert_int_equal(testdb_i64(v.db, "SELECT SUM(v) FROM kv WHERE k IN ('dl1', 'dl2')", NULL, 0),
                     2);
    txo_db_close(holder);
    txo_db_close(v.db);
}

static int lock_row_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    (void)arg;
    return txo_tx_exec(tx, "UPDATE kv SET v = v + 1 WHERE k = 'x'", NULL, 0, NULL, err);
}

/*
 * Returns a holder that keeps row 'x' locked in an open transaction on its own connection (to
 * ROLLBACK and close), and opens *waiter with a one-second lock wait and tx_max_attempts.
 */
static struct txo_db *hold_row_x(struct testdb *t, unsigned tx_max_attempts, struct txo_db **waiter)
{
    testdb_exec(t->db, "INSERT IGNORE INTO kv (k, v) VALUES ('x', 0)");
    struct txo_db *holder = testdb_connect(t);
    testdb_exec(holder, "START TRANSACTION");
    testdb_exec(holder, "UPDATE kv SET v = v WHERE k = 'x'");
    struct txo_db_opts opts = t->opts;
    opts.lock_wait_timeout_s = 1;
    opts.tx_max_attempts = tx_max_attempts;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_db_open(&opts, waiter, &err), 0);
    return holder;
}

static void test_lock_wait_timeout(void **state)
{
    struct testdb *t = *state;
    struct txo_db *waiter = NULL;
    struct txo_db *holder = hold_row_x(t, 2, &waiter);
    struct txo_error err;
    txo_error_init(&err);
    int64_t t0 = txo_monotonic_ms();
    assert_int_equal(txo_db_transact(waiter, TXO_ISO_DEFAULT, lock_row_fn, NULL, &err),
                     TXO_ELOCKTIMEOUT);
    int64_t elapsed = txo_monotonic_ms() - t0;
    assert_int_equal(err.mysql_errno, 1205);
    assert_true(txo_err_is_transient(TXO_ELOCKTIMEOUT));
    assert_true(elapsed >= 1900); /* two attempts of about one second each */
    testdb_exec(holder, "ROLLBACK");
    /* Once the lock is gone the same connection works. */
    assert_int_equal(txo_db_transact(waiter, TXO_ISO_DEFAULT, lock_row_fn, NULL, &err), 0);
    txo_db_close(waiter);
    txo_db_close(holder);
}

struct counted {
    unsigned calls;
};

static int lock_row_counted_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct counted *c = arg;
    c->calls++;
    return lock_row_fn(tx, NULL, err);
}

/*
 * txo_db_transact_opts: the caller says how many attempts and which failures of the body come
 * back at once, instead of the body recoding them. The zero value is txo_db_transact.
 */
static void test_transact_opts_choose_the_retries(void **state)
{
    struct testdb *t = *state;
    struct txo_db *waiter = NULL;
    struct txo_db *holder = hold_row_x(t, 5, &waiter);
    struct txo_error err;
    txo_error_init(&err);
    struct txo_db_stats before, after;

    /* A lock wait timeout the caller handles itself: one attempt, the real code, no retry. */
    struct txo_tx_opts no_lock_retry = {.no_retry = TXO_TX_LOCK_TIMEOUT};
    struct counted c = {0};
    txo_db_get_stats(&before);
    assert_int_equal(txo_db_transact_opts(waiter, TXO_ISO_DEFAULT, &no_lock_retry,
                                          lock_row_counted_fn, &c, &err),
                     TXO_ELOCKTIMEOUT);
    txo_db_get_stats(&after);
    assert_int_equal(c.calls, 1);
    assert_int_equal(err.mysql_errno, 1205);
    assert_int_equal(after.tx_retries, before.tx_retries);

    /* Another outcome left out does not stop this one; max_attempts bounds it. */
    struct txo_tx_opts two = {.max_attempts = 2, .no_retry = TXO_TX_DEADLOCK};
    c.calls = 0;
    assert_int_equal(
        txo_db_transact_opts(waiter, TXO_ISO_DEFAULT, &two, lock_row_counted_fn, &c, &err),
        TXO_ELOCKTIMEOUT);
    assert_int_equal(c.calls, 2);

    /* An unknown flag is refused before the body runs. */
    struct txo_tx_opts bad = {.no_retry = 1u << 20};
    c.calls = 0;
    assert_int_equal(
        txo_db_transact_opts(waiter, TXO_ISO_DEFAULT, &bad, lock_row_counted_fn, &c, &err),
        TXO_EINVAL);
    assert_int_equal(c.calls, 0);

    testdb_exec(holder, "ROLLBACK");
    /* The zero value (and NULL) is txo_db_transact: the same connection commits now. */
    struct txo_tx_opts zero = {0};
    assert_int_equal(
        txo_db_transact_opts(waiter, TXO_ISO_DEFAULT, &zero, lock_row_counted_fn, &c, &err), 0);
    assert_int_equal(
        txo_db_transact_opts(waiter, TXO_ISO_DEFAULT, NULL, lock_row_counted_fn, &c, &err), 0);
    assert_int_equal(c.calls, 2);
    txo_db_close(waiter);
    txo_db_close(holder);
}

struct killer {
    struct txo_db *admin;
    int64_t victim_id;
    unsigned calls;
};

static int killed_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct killer *k = arg;
    k->calls++;
    struct txo_rows *rows = NULL;
    int rc = txo_tx_query(tx, "SELECT CONNECTION_ID()", NULL, 0, &rows, err);
    if (rc < 0)
        return rc;
    k->victim_id = txo_rows_i64(rows, 0, 0);
    txo_rows_free(rows);
    struct txo_param p[] = {txo_p_str("killed"), txo_p_i64(k->calls)};
    rc = txo_tx_exec(tx, "INSERT INTO kv (k, v) VALUES (?, ?)", p, 2, NULL, err);
    if (rc < 0)
        return rc;
    if (k->calls == 1) {
        /* Another session kills this one mid-transaction: the insert is rolled back. */
        struct txo_param id = txo_p_i64(k->victim_id);
        struct txo_error kerr;
        txo_error_init(&kerr);
        if (txo_db_exec(k->admin, "KILL CONNECTION ?", &id, 1, NULL, &kerr) < 0)
            fail_msg("KILL: %s", kerr.msg);
        return txo_tx_exec(tx, "SELECT 1", NULL, 0, NULL, err);
    }
    return 0;
}

static void test_lost_connection_reconnects_and_retries(void **state)
{
    struct testdb *t = *state;
    struct txo_db *victim = testdb_connect(t);
    struct killer k = {t->db, 0, 0};
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_db_transact(victim, TXO_ISO_DEFAULT, killed_fn, &k, &err), 0);
    assert_int_equal(k.calls, 2);
    /* Only the second attempt's row exists. */
    struct txo_param key = txo_p_str("killed");
    assert_int_equal(testdb_i64(t->db, "SELECT v FROM kv WHERE k = ?", &key, 1), 2);
    txo_db_close(victim);
}

static void test_migrate_is_idempotent(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    unsigned applied = 99, total = 0;
    assert_int_equal(orders_migrate(t->db, &applied, &total, &err), 0);
    assert_int_equal(applied, 0);
    assert_int_equal(total, txo_core_migrations()->count + orders_migrations()->count);
    assert_int_equal(testdb_i64(t->db, "SELECT COUNT(*) FROM txo_schema_migrations", NULL, 0),
                     total);
    /* The 13 tables of the library and the order service are there. */
    assert_int_equal(testdb_i64(t->db,
                                "SELECT COUNT(*) FROM information_schema.tables WHERE "
                                "table_schema = DATABASE() AND table_name IN ('orders',"
                                "'order_items','outbox_events','inventory',"
                                "'inventory_reservations','payments','shipments',"
                                "'saga_instances','saga_steps','idempotency_keys',"
                                "'inbox_events','dead_letter_events','command_queue')",
                                NULL, 0),
                     13);
    /* A migration edited after it was applied is refused. */
    testdb_exec(t->db, "UPDATE txo_schema_migrations SET checksum = REPEAT('0', 64) "
                       "WHERE version = '0001_outbox.sql'");
    assert_int_equal(txo_migrate(t->db, NULL, NULL, &err), TXO_EMIGRATION);
    assert_non_null(strstr(err.msg, "0001_outbox.sql"));
}

/* The library's own set creates only the library's tables: no order service table. */
static void test_core_migrations_alone(void **state)
{
    struct testdb *t = *state;
    char name[96], sql[160];
    snprintf(name, sizeof(name), "%s_core", t->name);
    snprintf(sql, sizeof(sql), "CREATE DATABASE `%s`", name);
    testdb_exec(t->db, sql);
    struct txo_db_opts opts = t->opts;
    opts.database = name;
    struct txo_db *db = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_db_open(&opts, &db, &err), 0);
    unsigned applied = 0, total = 0;
    assert_int_equal(txo_migrate(db, &applied, &total, &err), 0);
    assert_int_equal(applied, txo_core_migrations()->count);
    assert_int_equal(total, applied);
    assert_int_equal(testdb_i64(db,
                                "SELECT COUNT(*) FROM information_schema.tables WHERE "
                                "table_schema = DATABASE() AND table_name IN ('outbox_events',"
                                "'dead_letter_events','saga_instances','saga_steps',"
                                "'idempotency_keys','inbox_events','command_queue')",
                                NULL, 0),
                     7);
    assert_int_equal(testdb_i64(db,
                                "SELECT COUNT(*) FROM information_schema.tables WHERE "
                                "table_schema = DATABASE() AND table_name IN ('orders',"
                                "'order_items','inventory','inventory_reservations',"
                                "'payments','shipments')",
                                NULL, 0),
                     0);
    txo_db_close(db);
    snprintf(sql, sizeof(sql), "DROP DATABASE `%s`", name);
    testdb_exec(t->db, sql);
}

static void test_in_list(void **state)
{
    struct testdb *t = *state;
    assert_int_equal(txo_sql_in_list_size(1), 1);
    assert_int_equal(txo_sql_in_list_size(3), 4);
    assert_int_equal(txo_sql_in_list_size(500), 512);
    char *sql = txo_sql_in_list("SELECT COUNT(*) FROM kv WHERE k IN ", 4, " AND v >= 0");
    assert_string_equal(sql, "SELECT COUNT(*) FROM kv WHERE k IN (?,?,?,?) AND v >= 0");
    testdb_exec(t->db, "INSERT IGNORE INTO kv (k, v) VALUES ('i1', 1), ('i2', 2), ('i3', 3)");
    /* Three values padded to four by repeating the last one. */
    struct txo_param p[] = {txo_p_str("i1"), txo_p_str("i3"), txo_p_str("zz"), txo_p_str("zz")};
    assert_int_equal(testdb_i64(t->db, sql, p, 4), 2);
    txo_free(sql);
}

static void test_connect_failure_is_clear(void **state)
{
    struct testdb *t = *state;
    struct txo_db_opts opts = t->opts;
    opts.password = "wrong-password";
    struct txo_db *db = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_db_open(&opts, &db, &err), TXO_ECONFIG); /* not worth retrying */
    assert_null(db);
    assert_non_null(strstr(err.msg, "cannot connect"));
    assert_null(strstr(err.msg, "wrong-password")); /* secrets never reach messages */
    bool maria = false;
    assert_true(txo_db_server_version(t->db, &maria) > 50000);
}

/*
 * A host list: a connect skips a server that refuses it and uses the next one, and stays
 * there; a malformed list is refused before any connect; a plain server is not a Galera node
 * and is ready.
 */
static void test_host_list_fails_over(void **state)
{
    struct testdb *t = *state;
    if (t->opts.unix_socket != NULL && t->opts.unix_socket[0] != '\0')
        skip(); /* a unix socket replaces host:port */
    char list[256];
    /* Port 1 on loopback: nothing listens there, the connect is refused at once. */
    snprintf(list, sizeof(list), "127.0.0.1:1, %s:%u", t->opts.host, t->opts.port);
    struct txo_db_opts opts = t->opts;
    opts.host = list;
    opts.port = 9; /* taken by entries without a port only */
    struct txo_db *db = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_db_open(&opts, &db, &err), 0);
    unsigned port = 0;
    assert_string_equal(txo_db_current_host(db, &port), t->opts.host);
    assert_int_equal(port, t->opts.port);
    assert_int_equal(testdb_i64(db, "SELECT 41 + 1", NULL, 0), 42);
    assert_false(txo_db_is_galera(db));
    assert_int_equal(txo_db_check_ready(db, &err), 0);
    txo_db_close(db);

    /* Only servers that refuse: the last one's error, transient. */
    opts.host = "127.0.0.1:1,127.0.0.1:2";
    txo_error_init(&err);
    assert_int_equal(txo_db_open(&opts, &db, &err), TXO_ECONNECT);
    assert_non_null(strstr(err.msg, "127.0.0.1:2"));

    static const char *const bad[] = {"a,,b", "a:", "a:x", "a:70000", "[::1", "[::1]x", ","};
    for (size_t i = 0; i < TXO_ARRAY_LEN(bad); i++) {
        opts.host = bad[i];
        txo_error_init(&err);
        assert_int_equal(txo_db_open(&opts, &db, &err), TXO_EINVAL);
        assert_non_null(strstr(err.msg, "database host list"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bound_params_and_rows),
        cmocka_unit_test(test_error_mapping),
        cmocka_unit_test(test_commit_and_rollback),
        cmocka_unit_test(test_deadlock_is_retried),
        cmocka_unit_test(test_deadlock_in_result_set_then_retry),
        cmocka_unit_test(test_lock_wait_timeout),
        cmocka_unit_test(test_lost_connection_reconnects_and_retries),
        cmocka_unit_test(test_transact_opts_choose_the_retries),
        cmocka_unit_test(test_in_list),
        cmocka_unit_test(test_connect_failure_is_clear),
        cmocka_unit_test(test_host_list_fails_over),
        cmocka_unit_test(test_migrate_is_idempotent),
        cmocka_unit_test(test_core_migrations_alone),
    };
    txo_log_set_level(TXO_LOG_ERROR);
    return cmocka_run_group_tests(tests, setup, teardown);
}
