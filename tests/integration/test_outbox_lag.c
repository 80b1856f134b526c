/*
 * The relay's lag as operators read it (txo_outbox_oldest_pending_age_seconds on /metrics,
 * `txo stats`, txo_outbox_get_stats()): now minus created_at of the oldest event not yet
 * published, whether it is due or backing off after failed publishes.
 *
 * Asserted: events that back off while the broker is down keep the lag growing (a webhook
 * publisher pointed at a closed port, once with rows inserted 45 s in the past, once through a
 * real 31 s outage); the ages come from index dives, not scans (EXPLAIN on a 100,000-row
 * backlog); 100,000 events left by an outage, inserted with multi-row INSERTs as another
 * language's code would, are drained by `txo relay --drain` in batches no larger than
 * --batch-size and the lag falls to 0; the FAILED count and the oldest FAILED age have gauges
 * of their own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "outbox/outbox_sql.h"
#include "testdb.h"
#include "testhttp.h"
#include "testproc.h"

/* Runs `txo args...` to completion; returns its exit status and (malloc'd) output. */
static int run_txo(const char *const *args, char **out)
{
    return testproc_run_txo("lag-cli", args, 120000, out);
}

/* `txo stats --json`, parsed; fails the test when it does not print JSON. */
static json_t *stats_json(void)
{
    char *out = NULL;
    const char *args[] = {"stats", "--json", NULL};
    int rc = run_txo(args, &out);
    if (rc != 0)
        fail_msg("txo stats --json exited %d: %s", rc, out);
    json_error_t jerr;
    json_t *doc = json_loads(out, 0, &jerr);
    if (doc == NULL)
        fail_msg("txo stats --json printed no JSON (%s): %s", jerr.text, out);
    free(out);
    return doc;
}

static double stats_outbox_real(json_t *doc, const char *key)
{
    json_t *v = json_object_get(json_object_get(doc, "outbox"), key);
    if (!json_is_number(v))
        fail_msg("txo stats --json: outbox.%s is not a number", key);
    return json_number_value(v);
}

/* A relay publishing to a port nothing listens on, with /metrics on a free port. */
struct outage {
    struct testproc relay;
    unsigned metrics_port;
    CURL *curl;
};

static void outage_start(struct outage *o)
{
    unsigned dead_port = testproc_free_port();
    o->metrics_port = testproc_free_port();
    char url[64], listen[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/hooks", dead_port);
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", o->metrics_port);
    const char *argv[] = {testproc_txo_bin(),
                          "relay",
                          "--publisher",
                          "webhook",
                          "--webhook-url",
                          url,
                          "--backoff-base",
                          "2000",
                          "--backoff-max",
                          "4000",
                          "--idle-sleep",
                          "50",
                          "--max-attempts",
                          "1000",
                          "--metrics-listen",
                          listen,
                          NULL};
    testproc_start(&o->relay, "lag-relay", argv, NULL);
    if (!testproc_wait_http(o->metrics_port, "/healthz", 10000)) {
        testproc_print_log(&o->relay, "txo relay");
        fail_msg("the relay's metrics server did not answer");
    }
    o->curl = curl_easy_init();
    assert_non_null(o->curl);
}

static double scrape(struct outage *o, const char *series)
{
    struct testhttp_reply r = {0};
    testhttp_get(o->curl, o->metrics_port, "/metrics", &r);
    testhttp_expect_status(&r, 200, "GET /metrics");
    double v = testhttp_metric_value(r.body, series);
    if (v < 0)
        fail_msg("%s is not on /metrics:\n%s", series, r.body);
    testhttp_reply_release(&r);
    return v;
}

static void outage_stop(struct outage *o)
{
    curl_easy_cleanup(o->curl);
    if (!testproc_stop(&o->relay, 10000)) {
        testproc_print_log(&o->relay, "txo relay");
        fail_msg("the relay did not stop cleanly");
    }
    testproc_remove_log(&o->relay);
}

/* Waits until every one of n rows has failed at least one publish (so it is backing off). */
static void wait_backing_off(struct testdb *t, int64_t n)
{
    for (int i = 0; i < 200; i++) {
        if (testdb_q(t->db,
                     "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' AND attempts > 0 "
                     "AND next_attempt_at > NOW(6)") == n)
            return;
        nanosleep(&(struct timespec){.tv_nsec = 50 * 1000 * 1000}, NULL);
    }
    fail_msg("the rows never backed off");
}

static void insert_old(struct testdb *t, unsigned n, unsigned age_s, const char *key_prefix)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "
             "idempotency_key, created_at) SELECT 'order', seq, 'OrderCreated', "
             "JSON_OBJECT('n', seq), CONCAT('%s', seq), NOW(6) - INTERVAL %u SECOND "
             "FROM seq_1_to_%u",
             key_prefix, age_s, n);
    testdb_exec(t->db, sql);
}

/*
 * n events created age_s seconds ago (keys "<prefix><i>") and the outage's relay failing to
 * publish them: returns once every one backs off.
 */
static void outage_with_events(struct outage *o, struct testdb *t, unsigned n, unsigned age_s,
                               const char *prefix)
{
    insert_old(t, n, age_s, prefix);
    outage_start(o);
    wait_backing_off(t, n);
}

/* The lag on the outage relay's /metrics, which must lie in [lo, hi) seconds. */
static void assert_lag(struct outage *o, double lo, double hi, const char *when)
{
    double lag = scrape(o, "txo_outbox_oldest_pending_age_seconds");
    if (!(lag >= lo && lag < hi))
        fail_msg("lag %.3f s %s: want %g..%g", lag, when, lo, hi);
}

static void test_lag_grows_while_events_back_off(void **state)
{
    struct testdb *t = *state;
    struct outage o;
    outage_with_events(&o, t, 20, 45, "old:");
    assert_lag(&o, 45.0, 120.0, "while every event backs off");
    json_t *doc = stats_json();
    double stats_lag = stats_outbox_real(doc, "oldest_pending_age_seconds");
    if (!(stats_lag >= 45.0 && stats_lag < 120.0))
        fail_msg("txo stats: lag %.3f s, want 45..120", stats_lag);
    json_decref(doc);
    assert_true(scrape(&o, "txo_outbox_failed") == 0.0);
    assert_true(scrape(&o, "txo_outbox_oldest_failed_age_seconds") == 0.0);

    /* A FAILED event left there for two hours has a gauge of its own. */
    testdb_exec(t->db, "UPDATE outbox_events SET status = 'FAILED', "
                       "created_at = NOW(6) - INTERVAL 2 HOUR WHERE idempotency_key = 'old:1'");
    assert_true(scrape(&o, "txo_outbox_failed") == 1.0);
    double failed_age = scrape(&o, "txo_outbox_oldest_failed_age_seconds");
    if (!(failed_age >= 7200.0 && failed_age < 7300.0))
        fail_msg("oldest FAILED age %.3f s, want 7200..7300", failed_age);
    outage_stop(&o);
}

static void test_real_outage_of_31_seconds(void **state)
{
    struct testdb *t = *state;
    struct outage o;
    outage_with_events(&o, t, 5, 0, "now:");
    sleep(31);
    assert_lag(&o, 30.0, 90.0, "after a 31 s outage");
    int64_t retried =
        testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status IN ('PENDING', "
                        "'PROCESSING') AND attempts >= 2");
    if (retried != 5)
        fail_msg("%" PRId64 " of 5 events retried during the outage", retried);
    outage_stop(&o);
}

/* Asserts that each row of `EXPLAIN sql` reads no table (MIN() answered from the index). */
static void assert_index_dives(struct testdb *t, const char *sql)
{
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    char explain[1024];
    snprintf(explain, sizeof(explain), "EXPLAIN %s", sql);
    if (txo_db_query(t->db, explain, NULL, 0, &rows, &err) < 0)
        fail_msg("%s: %s", explain, err.msg);
    /* EXPLAIN columns: id, select_type, table, type, possible_keys, key, key_len, ref, rows,
     * Extra. */
    size_t n = txo_rows_count(rows);
    assert_true(n >= 4); /* the outer SELECT and one subquery per status */
    for (size_t i = 0; i < n; i++) {
        const char *select_type = txo_rows_str(rows, i, 1, NULL);
        const char *extra = txo_rows_str(rows, i, 9, NULL);
        const char *type = txo_rows_is_null(rows, i, 3) ? "" : txo_rows_str(rows, i, 3, NULL);
        print_message("EXPLAIN %zu: %s type=%s extra=%s\n", i, select_type, type,
                      extra != NULL ? extra : "");
        if (strcmp(select_type, "PRIMARY") == 0)
            continue;
        /* MIN() read from the index's first entry, or that entry found missing. */
        bool dive = extra != NULL && (strstr(extra, "Select tables optimized away") != NULL ||
                                      strstr(extra, "No matching min/max row") != NULL);
        if (strcmp(type, "ALL") == 0 || strcmp(type, "index") == 0 || !dive)
            fail_msg("row %zu of %s is a scan: type=%s extra=%s", i, explain, type,
                     extra != NULL ? extra : "");
    }
    txo_rows_free(rows);
}

#define BACKLOG    100000
#define BATCH      500
#define PER_INSERT 1000

/* BACKLOG events created an hour ago, in multi-row INSERTs of PER_INSERT rows. */
static void insert_backlog(struct testdb *t)
{
    size_t cap = 160 + (size_t)PER_INSERT * 160;
    char *sql = txo_malloc(cap);
    assert_non_null(sql);
    for (unsigned first = 1; first <= BACKLOG; first += PER_INSERT) {
        size_t n = (size_t)snprintf(sql, cap,
                                    "INSERT INTO outbox_events (aggregate_type, aggregate_id, "
                                    "event_type, payload, idempotency_key, created_at) VALUES ");
        for (unsigned i = first; i < first + PER_INSERT; i++)
            n += (size_t)snprintf(sql + n, cap - n,
                                  "%s('order', %u, 'OrderCreated', '{\"n\":%u}', 'backlog:%u', "
                                  "NOW(6) - INTERVAL 1 HOUR)",
                                  i == first ? "" : ",", i % 977, i, i);
        assert_true(n < cap);
        testdb_exec(t->db, sql);
    }
    txo_free(sql);
}

/*
 * Asserts that `EXPLAIN OUTBOX_SQL_RETRY_WAIT` counts the events waiting for a retry on
 * idx_outbox_due (a range of the index alone) and finds the oldest due one on idx_outbox_age
 * (walked in created_at order), so neither reads the table from end to end.
 */
static void assert_retry_wait_indexes(struct testdb *t)
{
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_query(t->db, "EXPLAIN " OUTBOX_SQL_RETRY_WAIT, NULL, 0, &rows, &err) < 0)
        fail_msg("EXPLAIN the retry wait: %s", err.msg);
    bool due = false, age = false;
    for (size_t i = 0; i < txo_rows_count(rows); i++) {
        const char *select_type = txo_rows_str(rows, i, 1, NULL);
        const char *type = txo_rows_is_null(rows, i, 3) ? "" : txo_rows_str(rows, i, 3, NULL);
        const char *key = txo_rows_is_null(rows, i, 5) ? "" : txo_rows_str(rows, i, 5, NULL);
        const char *extra = txo_rows_is_null(rows, i, 9) ? "" : txo_rows_str(rows, i, 9, NULL);
        print_message("EXPLAIN retry wait %zu: %s type=%s key=%s extra=%s\n", i, select_type, type,
                      key, extra);
        if (strcmp(select_type, "PRIMARY") == 0)
            continue;
        if (strcmp(type, "ALL") == 0 || strstr(extra, "filesort") != NULL)
            fail_msg("row %zu of the retry wait scans or sorts: type=%s extra=%s", i, type, extra);
        due = due || (strcmp(key, "idx_outbox_due") == 0 && strstr(extra, "Using index") != NULL);
        age = age || strcmp(key, "idx_outbox_age") == 0;
    }
    txo_rows_free(rows);
    if (!due || !age)
        fail_msg("the retry wait does not use idx_outbox_due (index only) and idx_outbox_age");
}

static void test_backlog_drains_in_bounded_batches(void **state)
{
    struct testdb *t = *state;
    insert_backlog(t);
    testdb_exec(t->db, "ANALYZE TABLE outbox_events");
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING'"),
                     BACKLOG);

    /* The statement txo_outbox_get_stats() runs for the ages, on this backlog. */
    assert_index_dives(t, OUTBOX_SQL_OLDEST_AGES_US);
    assert_retry_wait_indexes(t);
    struct txo_outbox_stats st;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_outbox_get_stats(t->db, &st, &err), 0);
    if (!(st.oldest_pending_age_s >= 3600.0 && st.oldest_pending_age_s < 3700.0))
        fail_msg("lag before the drain %.3f s, want 3600..3700", st.oldest_pending_age_s);
    /* Nothing published, nothing backing off: the whole backlog is due, the oldest an hour. */
    assert_int_equal(st.retry_waiting, 0);
    if (!(st.oldest_due_age_s >= 3600.0 && st.oldest_due_age_s < 3700.0))
        fail_msg("oldest due %.3f s, want 3600..3700", st.oldest_due_age_s);

    char *out = NULL;
    const char *args[] = {"relay", "--drain", "--publisher", "null", "--batch-size", "500", NULL};
    int rc = run_txo(args, &out);
    if (rc != 0)
        fail_msg("txo relay --drain exited %d: %s", rc, out);
    const char *stopped = strstr(out, "relay stopped");
    assert_non_null(stopped);
    const char *b = strstr(stopped, "batches=");
    assert_non_null(b);
    long batches = strtol(b + strlen("batches="), NULL, 10);
    print_message("txo relay --drain: %s", stopped);
    free(out);

    assert_int_equal(
        testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'"), BACKLOG);
    /* One mark statement per batch: its rows share one published_at (NOW(6) of the UPDATE). */
    int64_t largest = testdb_q(t->db, "SELECT MAX(c) FROM (SELECT COUNT(*) AS c FROM outbox_events "
                                      "GROUP BY published_at) AS per_batch");
    if (largest > BATCH)
        fail_msg("a batch of %" PRId64 " events, more than --batch-size %d", largest, BATCH);
    if (batches < BACKLOG / BATCH)
        fail_msg("%ld batches for %d events of batch %d", batches, BACKLOG, BATCH);

    assert_int_equal(txo_outbox_get_stats(t->db, &st, &err), 0);
    assert_true(st.oldest_pending_age_s == 0.0);
    json_t *doc = stats_json();
    assert_true(stats_outbox_real(doc, "oldest_pending_age_seconds") == 0.0);
    assert_true(stats_outbox_real(doc, "published") == (double)BACKLOG);
    json_decref(doc);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lag_grows_while_events_back_off),
        cmocka_unit_test(test_backlog_drains_in_bounded_batches),
        cmocka_unit_test(test_real_outage_of_31_seconds),
    };
    int rc = testdb_run_each(tests, TXO_ARRAY_LEN(tests), "lag", TESTDB_NEW_EXPORT_ENV, NULL);
    curl_global_cleanup();
    return rc;
}
