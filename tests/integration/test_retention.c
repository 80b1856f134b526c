/*
 * The outbox retention cleaner against a real MariaDB: only PUBLISHED rows older than the age
 * go (PENDING, PROCESSING and FAILED rows of any age stay, and so do recent PUBLISHED ones and
 * a backlog that was due long ago but published recently), in batches of at most batch_size,
 * one transaction each, at most max_batches per call; the batch SELECT walks idx_outbox_due in
 * order and the DELETE goes by primary key; and a purge running next to a live relay deletes
 * nothing the relay still needs.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "retention/retention_sql.h"
#include "testdb.h"
#include "testrelay.h"
#include "txo/retention.h"

/*
 * Inserts n rows with key prefix `prefix`, the given status, due `due_ago` and published
 * `published_ago` before now (SQL interval expressions; published_ago NULL for none: the
 * published_time of an event not published, which published_at reads as NULL).
 */
static void insert_rows(struct txo_db *db, unsigned n, const char *prefix, const char *status,
                        const char *due_ago, const char *published_ago)
{
    char published[128];
    if (published_ago != NULL)
        snprintf(published, sizeof(published), "NOW(6) - INTERVAL %s + INTERVAL seq SECOND",
                 published_ago);
    else
        snprintf(published, sizeof(published), "'1970-01-01 00:00:00'");
    char sql[1024];
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "
             "idempotency_key, status, next_attempt_at, published_time) "
             "SELECT 'order', seq, 'OrderCreated', JSON_OBJECT('n', seq), CONCAT('%s:', seq), "
             "'%s', NOW(6) - INTERVAL %s + INTERVAL seq SECOND, %s FROM seq_1_to_%u",
             prefix, status, due_ago, published, n);
    testdb_exec(db, sql);
}

static uint64_t commits(void)
{
    struct txo_db_stats st;
    txo_db_get_stats(&st);
    return st.tx_commits;
}

/*
 * txo_outbox_purge_published() of rows older than older_than_s, in batches of batch (at most
 * max_batches, 0: all), which must succeed and delete want rows in commits transactions
 * (0: not counted).
 */
static void purge(struct testdb *t, unsigned older_than_s, unsigned batch, unsigned max_batches,
                  uint64_t want, uint64_t commits_want)
{
    struct txo_error err;
    txo_error_init(&err);
    uint64_t deleted = 0;
    uint64_t c0 = commits();
    if (txo_outbox_purge_published(t->db, older_than_s, batch, max_batches, &deleted, &err) != 0)
        fail_msg("txo_outbox_purge_published: %s", err.msg);
    if (commits_want != 0)
        assert_int_equal(commits() - c0, commits_want);
    assert_int_equal(deleted, want);
}

static void test_only_old_published_rows_in_batches(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    insert_rows(t->db, 25, "old", "PUBLISHED", "10 DAY", "10 DAY");
    insert_rows(t->db, 5, "recent", "PUBLISHED", "2 HOUR", "1 HOUR");
    insert_rows(t->db, 3, "pending", "PENDING", "10 DAY", NULL);
    insert_rows(t->db, 2, "processing", "PROCESSING", "10 DAY", NULL);
    insert_rows(t->db, 4, "failed", "FAILED", "10 DAY", NULL);
    insert_rows(t->db, 1, "no-published-at", "PUBLISHED", "10 DAY", NULL);
    /* A backlog due long ago but published only recently: not old yet. */
    insert_rows(t->db, 3, "late", "PUBLISHED", "10 DAY", "1 HOUR");
    testdb_exec(t->db, "INSERT INTO dead_letter_events (source_event_id, event_type, payload, "
                       "error) SELECT id, event_type, payload, 'e' FROM outbox_events "
                       "WHERE status = 'FAILED'");
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events"), 43);

    /* Two batches of 10 only, each its own transaction (plus the cutoff read). */
    purge(t, 86400, 10, 2, 20, 3);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events"), 23);
    /* Oldest first. */
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE idempotency_key LIKE "
                                         "'old:%' AND aggregate_id > 20"),
                     5);

    /* The rest: one short batch. */
    purge(t, 86400, 10, 0, 5, 2);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE idempotency_key LIKE "
                                         "'old:%'"),
                     0);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events"), 18);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PENDING'"), 3);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PROCESSING'"), 2);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'FAILED'"), 4);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PUBLISHED'"), 9);
    assert_int_equal(TESTDB_COUNT(t->db, "dead_letter_events d JOIN outbox_events e ON "
                                         "e.id = d.source_event_id"),
                     4);

    /* Nothing old is left. */
    purge(t, 86400, 10, 0, 0, 0);

    /* A smaller age takes the recent and late ones too, never the others. */
    purge(t, 60, 2, 0, 8, 0);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events"), 10);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PUBLISHED' "
                                         "AND published_at IS NULL"),
                     1);

    uint64_t deleted = 7;
    assert_int_equal(txo_outbox_purge_published(t->db, 60, 0, 0, &deleted, &err), TXO_EINVAL);
    assert_int_equal(deleted, 0);
    assert_int_equal(txo_outbox_purge_published(t->db, 60, TXO_PURGE_BATCH_MAX + 1, 0, NULL, &err),
                     TXO_EINVAL);
}

static void test_statements_use_indexes(void **state)
{
    struct testdb *t = *state;
    /* Mostly old PUBLISHED rows, the table a purge meets in production. */
    insert_rows(t->db, 20000, "old", "PUBLISHED", "10 DAY", "10 DAY");
    insert_rows(t->db, 200, "pending", "PENDING", "1 SECOND", NULL);
    testdb_exec(t->db, "ANALYZE TABLE outbox_events");
    const char *cutoff = "2100-01-01 00:00:00.000000";
    struct txo_param first[] = {txo_p_str(cutoff), txo_p_str(cutoff), txo_p_i64(1000)};
    testdb_assert_explain(t->db, "EXPLAIN " RETENTION_SQL_OUTBOX_FIRST, first, 3, "idx_outbox_due");
    struct txo_param after[] = {txo_p_str(cutoff),
                                txo_p_str(cutoff),
                                txo_p_str("2000-01-01 00:00:00"),
                                txo_p_str("2000-01-01 00:00:00"),
                                txo_p_i64(1),
                                txo_p_i64(1000)};
    testdb_assert_explain(t->db, "EXPLAIN " RETENTION_SQL_OUTBOX_AFTER, after, 6, "idx_outbox_due");
    struct txo_param del[] = {txo_p_str(cutoff), txo_p_i64(1), txo_p_i64(2), txo_p_i64(3),
                              txo_p_i64(4)};
    testdb_assert_explain(t->db, "EXPLAIN " RETENTION_SQL_OUTBOX_DELETE_IN "(?, ?, ?, ?)", del, 5,
                          "PRIMARY");
    /* Retention adds no index to outbox_events: the insert path pays nothing for it (the ones
     * there are the primary key, the idempotency key, the relay's idx_outbox_due and
     * idx_outbox_aggregate, and the lag metric's idx_outbox_age). */
    assert_int_equal(
        testdb_q(t->db, "SELECT COUNT(DISTINCT index_name) FROM information_schema.statistics "
                        "WHERE table_schema = DATABASE() AND table_name = 'outbox_events' AND "
                        "index_name NOT IN ('PRIMARY', 'uq_outbox_idempotency_key', "
                        "'idx_outbox_due', 'idx_outbox_age', 'idx_outbox_aggregate')"),
        0);

    /* And the purge itself: 20000 rows in batches of 1000, the pending rows untouched. */
    struct txo_error err;
    txo_error_init(&err);
    uint64_t deleted = 0;
    int64_t t0 = txo_monotonic_ms();
    assert_int_equal(txo_outbox_purge_published(t->db, 86400, 1000, 0, &deleted, &err), 0);
    print_message("purged %llu rows in %lld ms\n", (unsigned long long)deleted,
                  (long long)(txo_monotonic_ms() - t0));
    assert_int_equal(deleted, 20000);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events"), 200);
}

/* ---- next to a live relay ---- */

struct counter {
    size_t acked;
};

static int count_publish(void *self, const struct txo_outbox_message *msgs, size_t n, int *results,
                         struct txo_error *errors)
{
    (void)msgs;
    (void)errors;
    struct counter *c = self;
    for (size_t i = 0; i < n; i++)
        results[i] = 0;
    c->acked += n;
    return 0;
}

struct relay_thread {
    struct txo_relay *relay;
    int rc;
};

static void *relay_main(void *arg)
{
    struct relay_thread *rt = arg;
    struct txo_error err;
    txo_error_init(&err);
    rt->rc = txo_relay_run(rt->relay, &err);
    return NULL;
}

static void test_purge_next_to_a_live_relay(void **state)
{
    struct testdb *t = *state;
    insert_rows(t->db, 3000, "old", "PUBLISHED", "10 DAY", "10 DAY");
    insert_rows(t->db, 2000, "new", "PENDING", "1 DAY", NULL); /* due long ago */

    struct txo_db *relay_db = testdb_connect(t);
    struct counter *cnt = txo_calloc(1, sizeof(*cnt));
    struct txo_publisher *pub = testrelay_publisher("counter", count_publish, cnt);
    struct txo_relay_opts o;
    txo_relay_opts_init(&o);
    o.relay_id = "retention-test";
    o.batch_size = 100;
    o.drain = true;
    struct relay_thread rt = {0};
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_relay_new(relay_db, pub, &o, &rt.relay, &err), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, relay_main, &rt), 0);

    uint64_t total = 0, deleted = 0;
    for (int i = 0; i < 50 && total < 3000; i++) {
        assert_int_equal(txo_outbox_purge_published(t->db, 3600, 100, 3, &deleted, &err), 0);
        total += deleted;
    }
    pthread_join(th, NULL);
    assert_int_equal(rt.rc, 0);
    assert_int_equal(total, 3000);
    assert_int_equal(cnt->acked, 2000);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PUBLISHED' AND "
                                         "idempotency_key LIKE 'new:%'"),
                     2000);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events"), 2000);
    txo_relay_free(rt.relay);
    txo_publisher_free(pub);
    txo_db_close(relay_db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_only_old_published_rows_in_batches),
        cmocka_unit_test(test_statements_use_indexes),
        cmocka_unit_test(test_purge_next_to_a_live_relay),
    };
    return testdb_run_each(tests, TXO_ARRAY_LEN(tests), "retention", 0, NULL);
}
