/*
 * The bounded connection pool (txo_db_pool_* in include/txo/db.h) against a real MariaDB:
 * connections are opened lazily up to max_size and reused, an exhausted pool times out after
 * wait_ms, a returned connection wakes a waiter, a broken one is closed and frees its slot,
 * many threads never hold more than max_size server sessions, and a connect failure reports
 * the connect error and releases the slot it had reserved.
 *
 * Server sessions are identified by CONNECTION_ID() and counted in
 * information_schema.PROCESSLIST (the test user sees its own sessions).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testdb.h"

static struct txo_db_pool *pool_or_fail(const struct txo_db_opts *opts, unsigned max_size)
{
    struct txo_db_pool *pool = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_pool_new(opts, max_size, &pool, &err) != 0)
        fail_msg("txo_db_pool_new: %s", err.msg);
    return pool;
}

static struct txo_db *get_or_fail(struct txo_db_pool *pool, int64_t wait_ms)
{
    struct txo_db *db = NULL;
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_pool_get(pool, wait_ms, &db, &err);
    if (rc != 0)
        fail_msg("txo_db_pool_get: %s (%s)", err.msg, txo_err_name(rc));
    assert_non_null(db);
    return db;
}

/* The server session id of db (a round trip, so the connection works). */
static int64_t session_of(struct txo_db *db)
{
    return testdb_i64(db, "SELECT CONNECTION_ID()", NULL, 0);
}

/* Sessions open on the test database, other than the observer's own. */
static int64_t sessions_on(const struct testdb *t)
{
    struct txo_param p = txo_p_str(t->name);
    return testdb_i64(t->db,
                      "SELECT COUNT(*) FROM information_schema.PROCESSLIST"
                      " WHERE DB = ? AND ID <> CONNECTION_ID()",
                      &p, 1);
}

static bool session_alive(const struct testdb *t, int64_t id)
{
    struct txo_param p = txo_p_i64(id);
    return testdb_i64(t->db, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", &p,
                      1) == 1;
}

static void test_new_rejects_zero_and_free_null(void **state)
{
    struct testdb *t = *state;
    struct txo_db_pool *pool = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_db_pool_new(&t->opts, 0, &pool, &err), TXO_EINVAL);
    assert_null(pool);
    txo_db_pool_free(NULL);
    /* Nothing is opened before the first get. */
    pool = pool_or_fail(&t->opts, 3);
    assert_int_equal(sessions_on(t), 0);
    txo_db_pool_put(pool, NULL, false); /* no-op */
    txo_db_pool_free(pool);
}

static void test_exhausted_pool_times_out(void **state)
{
    struct testdb *t = *state;
    struct txo_db_pool *pool = pool_or_fail(&t->opts, 2);
    struct txo_db *a = get_or_fail(pool, 1000);
    struct txo_db *b = get_or_fail(pool, 1000);
    assert_ptr_not_equal(a, b);
    int64_t sa = session_of(a), sb = session_of(b);
    assert_true(sa != sb);
    assert_int_equal(sessions_on(t), 2);

    struct txo_db *c = NULL;
    struct txo_error err;
    txo_error_init(&err);
    int64_t t0 = txo_monotonic_ms();
    assert_int_equal(txo_db_pool_get(pool, 300, &c, &err), TXO_ETIMEOUT);
    int64_t waited = txo_monotonic_ms() - t0;
    assert_null(c);
    assert_true(waited >= 290);
    assert_true(waited < 1500);
    assert_non_null(strstr(err.msg, "300 ms"));
    assert_true(txo_err_is_transient(TXO_ETIMEOUT));

    /* wait_ms = 0: fail at once. */
    t0 = txo_monotonic_ms();
    assert_int_equal(txo_db_pool_get(pool, 0, &c, &err), TXO_ETIMEOUT);
    assert_true(txo_monotonic_ms() - t0 < 200);
    assert_int_equal(sessions_on(t), 2); /* no third session was attempted */

    /* A returned connection is reused, not reopened. */
    txo_db_pool_put(pool, a, false);
    t0 = txo_monotonic_ms();
    struct txo_db *again = get_or_fail(pool, 0);
    assert_ptr_equal(again, a);
    assert_int_equal(session_of(again), sa);
    assert_int_equal(sessions_on(t), 2);

    txo_db_pool_put(pool, again, false);
    txo_db_pool_put(pool, b, false);
    txo_db_pool_free(pool);
    /* free closed both sessions */
    int64_t deadline = txo_monotonic_ms() + 2000;
    while (sessions_on(t) != 0 && txo_monotonic_ms() < deadline)
        txo_sleep_ms(10);
    assert_int_equal(sessions_on(t), 0);
}

struct getter {
    struct txo_db_pool *pool;
    int64_t wait_ms;
    int rc;
    struct txo_db *db;
    int64_t waited_ms;
    atomic_bool started;
};

static void *getter_main(void *arg)
{
    struct getter *g = arg;
    struct txo_error err;
    txo_error_init(&err);
    atomic_store(&g->started, true);
    int64_t t0 = txo_monotonic_ms();
    g->rc = txo_db_pool_get(g->pool, g->wait_ms, &g->db, &err);
    g->waited_ms = txo_monotonic_ms() - t0;
    return NULL;
}

static void test_put_wakes_a_waiter(void **state)
{
    struct testdb *t = *state;
    struct txo_db_pool *pool = pool_or_fail(&t->opts, 2);
    struct txo_db *a = get_or_fail(pool, 1000);
    struct txo_db *b = get_or_fail(pool, 1000);

    struct getter g = {.pool = pool, .wait_ms = 5000};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, getter_main, &g), 0);
    while (!atomic_load(&g.started))
        txo_sleep_ms(1);
    txo_sleep_ms(200);
    int64_t t_put = txo_monotonic_ms();
    txo_db_pool_put(pool, b, false);
    pthread_join(th, NULL);
    int64_t after_put = txo_monotonic_ms() - t_put;
    assert_int_equal(g.rc, 0);
    assert_ptr_equal(g.db, b); /* handed over, not a new connection */
    assert_true(g.waited_ms >= 150);
    assert_true(after_put < 1000);

    /* A broken put frees the slot: a waiter opens a new session. */
    int64_t sa = session_of(a);
    struct getter g2 = {.pool = pool, .wait_ms = 5000};
    assert_int_equal(pthread_create(&th, NULL, getter_main, &g2), 0);
    while (!atomic_load(&g2.started))
        txo_sleep_ms(1);
    txo_sleep_ms(100);
    txo_db_pool_put(pool, a, true);
    pthread_join(th, NULL);
    assert_int_equal(g2.rc, 0);
    assert_non_null(g2.db);
    assert_true(session_of(g2.db) != sa);
    txo_db_pool_put(pool, g2.db, false);
    txo_db_pool_put(pool, g.db, false);
    txo_db_pool_free(pool);
}

static void test_broken_closes_and_frees_slot(void **state)
{
    struct testdb *t = *state;
    struct txo_db_pool *pool = pool_or_fail(&t->opts, 2);
    struct txo_db *a = get_or_fail(pool, 1000);
    struct txo_db *b = get_or_fail(pool, 1000);
    int64_t sa = session_of(a), sb = session_of(b);

    txo_db_pool_put(pool, a, true);
    /* The session is gone on the server. */
    int64_t deadline = txo_monotonic_ms() + 2000;
    while (session_alive(t, sa) && txo_monotonic_ms() < deadline)
        txo_sleep_ms(10);
    assert_false(session_alive(t, sa));
    assert_true(session_alive(t, sb));

    /* Its slot is free: a get opens a new session at once instead of timing out. */
    struct txo_db *c = get_or_fail(pool, 0);
    int64_t sc = session_of(c);
    assert_true(sc != sa && sc != sb);
    assert_int_equal(sessions_on(t), 2);

    /* Both broken: the pool is empty, and refills. */
    txo_db_pool_put(pool, b, true);
    txo_db_pool_put(pool, c, true);
    struct txo_db *d = get_or_fail(pool, 0);
    struct txo_db *e = get_or_fail(pool, 0);
    assert_true(session_of(d) != session_of(e));
    txo_db_pool_put(pool, d, false);
    txo_db_pool_put(pool, e, false);
    txo_db_pool_free(pool); /* asserts every connection came back */
}

/* ---- 8 threads x 200 get/query/put ---- */

enum { THREADS = 8, ROUNDS = 200, POOL_SIZE = 2 };

struct shared {
    struct txo_db_pool *pool;
    pthread_mutex_t mu;
    int64_t sessions[64]; /* distinct CONNECTION_ID() values seen */
    size_t n_sessions;
    atomic_int in_use;
    atomic_int max_in_use;
    atomic_int finished; /* workers that returned */
};

struct worker {
    struct shared *sh;
    int ok;
    char failure[200];
};

static void note_session(struct shared *sh, int64_t id)
{
    pthread_mutex_lock(&sh->mu);
    bool seen = false;
    for (size_t i = 0; i < sh->n_sessions; i++)
        seen = seen || sh->sessions[i] == id;
    if (!seen && sh->n_sessions < TXO_ARRAY_LEN(sh->sessions))
        sh->sessions[sh->n_sessions++] = id;
    pthread_mutex_unlock(&sh->mu);
}

static void run_rounds(struct worker *w)
{
    struct shared *sh = w->sh;
    for (int i = 0; i < ROUNDS; i++) {
        struct txo_db *db = NULL;
        struct txo_error err;
        txo_error_init(&err);
        int rc = txo_db_pool_get(sh->pool, 10000, &db, &err);
        if (rc != 0) {
            snprintf(w->failure, sizeof(w->failure), "get %d: %.150s", i, err.msg);
            return;
        }
        int now = atomic_fetch_add(&sh->in_use, 1) + 1;
        int prev = atomic_load(&sh->max_in_use);
        while (now > prev && !atomic_compare_exchange_weak(&sh->max_in_use, &prev, now))
            ;
        struct txo_rows *rows = NULL;
        rc = txo_db_query(db, "SELECT CONNECTION_ID(), ? + 1", (struct txo_param[]){txo_p_i64(i)},
                          1, &rows, &err);
        if (rc != 0 || txo_rows_count(rows) != 1 || txo_rows_i64(rows, 0, 1) != i + 1) {
            snprintf(w->failure, sizeof(w->failure), "query %d: %.150s", i, err.msg);
            txo_rows_free(rows);
            atomic_fetch_sub(&sh->in_use, 1);
            txo_db_pool_put(sh->pool, db, true);
            return;
        }
        note_session(sh, txo_rows_i64(rows, 0, 0));
        txo_rows_free(rows);
        atomic_fetch_sub(&sh->in_use, 1);
        txo_db_pool_put(sh->pool, db, false);
        w->ok++;
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    run_rounds(w);
    atomic_fetch_add(&w->sh->finished, 1);
    return NULL;
}

static void test_threads_share_at_most_max_size(void **state)
{
    struct testdb *t = *state;
    static struct shared sh;
    memset(&sh, 0, sizeof(sh));
    pthread_mutex_init(&sh.mu, NULL);
    sh.pool = pool_or_fail(&t->opts, POOL_SIZE);
    struct worker w[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].sh = &sh;
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    /* Meanwhile, watch the server's session list from the test's own connection. */
    int64_t max_sessions = 0;
    unsigned samples = 0;
    while (atomic_load(&sh.finished) < THREADS) {
        int64_t n = sessions_on(t);
        if (n > max_sessions)
            max_sessions = n;
        samples++;
        txo_sleep_ms(1);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < THREADS; i++)
        if (w[i].ok != ROUNDS)
            fail_msg("thread %d: %d of %d rounds: %s", i, w[i].ok, ROUNDS, w[i].failure);
    assert_true(max_sessions <= POOL_SIZE);
    assert_true(samples > 0);
    assert_true(atomic_load(&sh.max_in_use) <= POOL_SIZE);
    assert_true(sh.n_sessions >= 1);
    assert_true(sh.n_sessions <= POOL_SIZE);
    assert_true(sessions_on(t) <= POOL_SIZE);
    txo_db_pool_free(sh.pool);
    pthread_mutex_destroy(&sh.mu);
}

static void test_connect_failure_releases_slot(void **state)
{
    struct testdb *t = *state;
    struct txo_db_opts bad = t->opts;
    bad.password = "definitely-wrong";
    struct txo_db_pool *pool = pool_or_fail(&bad, 2);
    /* More attempts than slots: each one fails to connect, none with an exhausted pool. */
    for (int i = 0; i < 5; i++) {
        struct txo_db *db = NULL;
        struct txo_error err;
        txo_error_init(&err);
        int64_t t0 = txo_monotonic_ms();
        int rc = txo_db_pool_get(pool, 200, &db, &err);
        if (rc != TXO_ECONFIG)
            fail_msg("get %d: %s (%s), expected TXO_ECONFIG", i, txo_err_name(rc), err.msg);
        assert_null(db);
        assert_non_null(strstr(err.msg, "cannot connect"));
        assert_null(strstr(err.msg, "definitely-wrong"));
        assert_int_equal(err.mysql_errno, 1045);
        assert_true(txo_monotonic_ms() - t0 < 200 + 1000);
    }
    txo_db_pool_free(pool); /* asserts open == idle == 0: no slot leaked */

    /* An unknown database is a connect error too. */
    struct txo_db_opts nodb = t->opts;
    nodb.database = "txo_test_no_such_database";
    pool = pool_or_fail(&nodb, 1);
    for (int i = 0; i < 2; i++) {
        struct txo_db *db = NULL;
        struct txo_error err;
        txo_error_init(&err);
        int rc = txo_db_pool_get(pool, 100, &db, &err);
        assert_true(rc == TXO_ECONFIG);
    }
    txo_db_pool_free(pool);

    /* The pool copied the opts: a good pool works next to it. */
    pool = pool_or_fail(&t->opts, 1);
    struct txo_db *db = get_or_fail(pool, 1000);
    assert_true(session_of(db) > 0);
    txo_db_pool_put(pool, db, false);
    txo_db_pool_free(pool);
}

/*
 * A negative wait_ms builds a deadline with a negative tv_nsec; pthread_cond_timedwait then
 * returns EINVAL (not ETIMEDOUT) at once, and the loop spins forever holding the mutex.
 */
struct neg_wait {
    struct txo_db_pool *pool;
    int rc;
    atomic_bool done;
};

static void *neg_wait_main(void *arg)
{
    struct neg_wait *n = arg;
    struct txo_db *db = NULL;
    struct txo_error err;
    txo_error_init(&err);
    n->rc = txo_db_pool_get(n->pool, -999, &db, &err);
    atomic_store(&n->done, true);
    return NULL;
}

static void test_negative_wait_returns(void **state)
{
    struct testdb *t = *state;
    struct txo_db_pool *pool = pool_or_fail(&t->opts, 1);
    struct txo_db *a = get_or_fail(pool, 1000);
    static struct neg_wait n;
    memset(&n, 0, sizeof(n));
    n.pool = pool;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, neg_wait_main, &n), 0);
    int64_t deadline = txo_monotonic_ms() + 2000;
    while (!atomic_load(&n.done) && txo_monotonic_ms() < deadline)
        txo_sleep_ms(5);
    if (!atomic_load(&n.done))
        fail_msg("txo_db_pool_get(wait_ms = -999) on an exhausted pool did not return in 2 s");
    pthread_join(th, NULL);
    assert_true(n.rc == TXO_ETIMEOUT || n.rc == TXO_EINVAL);
    txo_db_pool_put(pool, a, false);
    txo_db_pool_free(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_rejects_zero_and_free_null),
        cmocka_unit_test(test_exhausted_pool_times_out),
        cmocka_unit_test(test_put_wakes_a_waiter),
        cmocka_unit_test(test_broken_closes_and_frees_slot),
        cmocka_unit_test(test_threads_share_at_most_max_size),
        cmocka_unit_test(test_connect_failure_releases_slot),
        cmocka_unit_test(test_negative_wait_returns),
    };
    txo_log_set_level(TXO_LOG_ERROR);
    return testdb_run_each(tests, TXO_ARRAY_LEN(tests), "pool", 0, NULL);
}
