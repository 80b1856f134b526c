/*
 * The binlog source's publishing, through the library (txo/binlog.h) with a publisher of the
 * application's own (txo_publisher_new) that fails on purpose:
 *   - the messages, built from the log's row images, are byte for byte those the polling
 *     relay builds from the table for the same rows (envelope, trace context, a 200 KB
 *     payload, multibyte keys), and the binlog source leaves the rows as they were inserted;
 *   - a transient failure makes the stream wait and retry, in order, until acknowledged;
 *   - a permanent one dead-letters the event as the polling relay does (FAILED, a
 *     dead_letter_events row with the broker's reason: the only write to an outbox row) and
 *     the later events go on; a replay of its dead letter publishes it from the log, a skip
 *     publishes nothing;
 *   - rows left PENDING count as published in the stats and age out with retention; a
 *     hand-back leaves the polling relay only what came after.
 * The server is the private MariaDB with its binary log (scripts/db.sh).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testdb.h"
#include "txo/binlog.h"
#include "txo/dlq.h"
#include "txo/outbox.h"
#include "txo/retention.h"

#define MAX_SEEN 256

/* Records every acknowledged message's envelope; fails the first fail_calls calls
 * transiently, and the event whose key is poison_key permanently. */
struct recorder {
    char *envelopes[MAX_SEEN];
    size_t n;
    unsigned calls, fail_calls;
    const char *poison_key;
};

static int record_batch(void *self, const struct txo_outbox_message *msgs, size_t n, int *results,
                        struct txo_error *errors)
{
    struct recorder *r = self;
    r->calls++;
    for (size_t i = 0; i < n; i++) {
        if (r->calls <= r->fail_calls) {
            results[i] = txo_error_set(&errors[i], TXO_EPUBLISH, "broker down (test)");
            continue;
        }
        if (r->poison_key != NULL && strcmp(msgs[i].idempotency_key, r->poison_key) == 0) {
            results[i] = txo_error_set(&errors[i], TXO_EINVAL, "too large for the stream (test)");
            continue;
        }
        assert_true(r->n < MAX_SEEN);
        char *env = txo_envelope_encode(&msgs[i], NULL, NULL);
        assert_non_null(env);
        /* The envelope, then what goes in the headers. */
        size_t len = strlen(env) + 1024;
        r->envelopes[r->n] = txo_malloc(len);
        assert_non_null(r->envelopes[r->n]);
        snprintf(r->envelopes[r->n], len, "%s|%s|%s|%d", env,
                 msgs[i].traceparent != NULL ? msgs[i].traceparent : "-",
                 msgs[i].tracestate != NULL ? msgs[i].tracestate : "-", msgs[i].attempt);
        txo_free(env);
        r->n++;
        results[i] = 0;
    }
    return 0;
}

static void recorder_destroy(void *self)
{
    (void)self;
}

static const struct txo_publisher_ops recorder_ops = {
    .name = "recorder",
    .publish_batch = record_batch,
    .destroy = recorder_destroy,
};

/* A publisher that records what it is handed into rec (which stays the caller's). */
static struct txo_publisher *recording_to(struct recorder *rec)
{
    struct txo_publisher *pub = NULL;
    assert_int_equal(txo_publisher_new(&recorder_ops, rec, &pub, NULL), 0);
    return pub;
}

static void recorder_clear(struct recorder *r)
{
    for (size_t i = 0; i < r->n; i++)
        txo_free(r->envelopes[i]);
    memset(r, 0, sizeof(*r));
}

static int setup(void **state)
{
    struct testdb *t = txo_calloc(1, sizeof(*t));
    testdb_setup(t, "binlog_pub");
    *state = t;
    return 0;
}

static int teardown(void **state)
{
    testdb_teardown(*state);
    txo_free(*state);
    return 0;
}

/* One run of the binlog source named "t" through rec: a drain, or a hand-back. */
static void binlog_run(struct testdb *t, struct recorder *rec, struct txo_binlog_stats *st,
                       bool hand_back)
{
    struct txo_publisher *pub = recording_to(rec);
    struct txo_binlog_opts o;
    txo_binlog_opts_init(&o);
    o.source_name = "t";
    o.drain = !hand_back;
    o.hand_back = hand_back;
    o.retry.base_ms = 10;
    o.retry.max_ms = 50;
    struct txo_binlog *b = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_binlog_new(&t->opts, pub, &o, &b, &err) < 0)
        fail_msg("txo_binlog_new: %s", err.msg);
    if (txo_binlog_run(b, &err) < 0)
        fail_msg("txo_binlog_run: %s", err.msg);
    if (st != NULL)
        txo_binlog_get_stats(b, st);
    txo_binlog_free(b);
    txo_publisher_free(pub);
}

static void binlog_drain(struct testdb *t, struct recorder *rec, struct txo_binlog_stats *st)
{
    binlog_run(t, rec, st, false);
}

/* One drain of the polling relay through rec. */
static void poll_drain(struct testdb *t, struct recorder *rec)
{
    struct txo_publisher *pub = recording_to(rec);
    struct txo_error err;
    txo_error_init(&err);
    struct txo_relay_opts ro;
    txo_relay_opts_init(&ro);
    ro.drain = true;
    struct txo_relay *relay = NULL;
    assert_int_equal(txo_relay_new(t->db, pub, &ro, &relay, &err), 0);
    assert_int_equal(txo_relay_run(relay, &err), 0);
    txo_relay_free(relay);
    txo_publisher_free(pub);
}

/* An event of aggregate ("order", agg) with its trace context (NULL: none). */
static void insert_traced(struct testdb *t, const char *agg, const char *key, const char *payload,
                          const char *traceparent, const char *tracestate)
{
    struct txo_param p[] = {txo_p_str(agg), txo_p_str(payload), txo_p_str(key),
                            traceparent != NULL ? txo_p_str(traceparent) : txo_p_null(),
                            tracestate != NULL ? txo_p_str(tracestate) : txo_p_null()};
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_exec(t->db,
                    "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "
                    "idempotency_key, traceparent, tracestate) VALUES ('order', ?, 'OrderPlaced', "
                    "?, ?, ?, ?)",
                    p, TXO_ARRAY_LEN(p), NULL, &err) < 0)
        fail_msg("insert: %s", err.msg);
}

static void insert(struct testdb *t, const char *agg, const char *key, const char *payload)
{
    insert_traced(t, agg, key, payload, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                  NULL);
}

/* Envelopes start with {"id":N: ids of one digit sort as text. */
static int by_text(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_same_messages_as_polling(void **state)
{
    struct testdb *t = *state;
    struct recorder binlog = {.n = 0}, polling = {.n = 0};
    binlog_drain(t, &binlog, NULL); /* the first position */
    assert_int_equal(binlog.n, 0);
    /* A payload past 64 KB (a 4-byte length in the row image), spaces kept as written. */
    size_t big_len = 200 * 1024;
    char *big = txo_malloc(big_len + 32);
    assert_non_null(big);
    int at = snprintf(big, big_len + 32, "{\"pad\" : \"");
    memset(big + at, 'x', big_len);
    snprintf(big + at + big_len, 32, "\" }");
    insert(t, "1", "k:1", "{\"total\": 12.5, \"items\": [1, 2]}");
    insert_traced(t, "caf\xc3\xa9-2",
                  "k:\xe2\x82\xac"
                  "2",
                  "{\"name\": \"caf\\u00e9\"}",
                  "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                  "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
    insert_traced(t, "1", "k:3", "{}", NULL, NULL);
    insert(t, "3", "k:4", big);
    txo_free(big);
    binlog_drain(t, &binlog, NULL);
    assert_int_equal(binlog.n, 4);

    /* The binlog source wrote nothing to the rows. */
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' "
                                     "AND published_at IS NULL AND attempts = 0 AND "
                                     "locked_by IS NULL AND updated_at = created_at"),
                     4);

    /* The same rows, read from the table by the polling relay: the same messages (each
     * publishes the aggregates in waves of its own batches, so compared in id order). */
    poll_drain(t, &polling);
    assert_int_equal(polling.n, 4);
    qsort(binlog.envelopes, binlog.n, sizeof(char *), by_text);
    qsort(polling.envelopes, polling.n, sizeof(char *), by_text);
    for (size_t i = 0; i < 4; i++)
        assert_string_equal(binlog.envelopes[i], polling.envelopes[i]);
    assert_non_null(strstr(binlog.envelopes[1], "rojo=00f067aa0ba902b7"));
    recorder_clear(&binlog);
    recorder_clear(&polling);
}

static void test_transient_waits_permanent_dead_letters(void **state)
{
    struct testdb *t = *state;
    struct recorder rec = {.n = 0};
    binlog_drain(t, &rec, NULL);
    rec.fail_calls = 3;
    rec.poison_key = "k:2";
    insert(t, "1", "k:1", "{\"n\": 1}");
    insert(t, "1", "k:2", "{\"n\": 2}");
    insert(t, "1", "k:3", "{\"n\": 3}");
    insert(t, "2", "k:4", "{\"n\": 4}");
    struct txo_binlog_stats st;
    binlog_drain(t, &rec, &st);
    /* Acknowledged once each, in order, after the broker came back; k:2 refused for good. */
    assert_int_equal(rec.n, 3);
    assert_true(rec.calls > 3);
    assert_int_equal(st.published, 3);
    assert_int_equal(st.dead_lettered, 1);
    /* Only the refused event was written to. */
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' "
                                     "AND idempotency_key <> 'k:2'"),
                     3);
    char *status = testdb_str(t->db,
                              "SELECT CONCAT(e.status, ' ', d.error) FROM outbox_events e JOIN "
                              "dead_letter_events d ON d.source_event_id = e.id WHERE "
                              "e.idempotency_key = 'k:2'",
                              NULL, 0);
    assert_non_null(status);
    assert_non_null(strstr(status, "FAILED"));
    assert_non_null(strstr(status, "too large for the stream (test)"));
    txo_free(status);
    /* k:1 before k:3: one aggregate, in order. */
    size_t at1 = 9, at3 = 9;
    for (size_t i = 0; i < rec.n; i++) {
        if (strstr(rec.envelopes[i], "\"k:1\"") != NULL)
            at1 = i;
        if (strstr(rec.envelopes[i], "\"k:3\"") != NULL)
            at3 = i;
    }
    assert_true(at1 < at3 && at3 < rec.n);

    /* The operator replays the dead letter: the source reads the requeue from the log and
     * publishes k:2 (its attempt counted from one again), and its aggregate is unparked. */
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_parked"), 1);
    rec.poison_key = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_dlq_replay(t->db, testdb_q(t->db, "SELECT MAX(id) FROM dead_letter_events"), &err) < 0)
        fail_msg("replay: %s", err.msg);
    binlog_drain(t, &rec, &st);
    assert_int_equal(rec.n, 4);
    assert_non_null(strstr(rec.envelopes[3], "\"k:2\""));
    assert_non_null(strstr(rec.envelopes[3], "\"attempt\":1"));
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_parked"), 0);
    /* A skip is an update the source passes over: nothing more is published. */
    rec.poison_key = "k:5";
    insert(t, "3", "k:5", "{}");
    binlog_drain(t, &rec, &st);
    if (txo_dlq_skip(t->db, testdb_q(t->db, "SELECT MAX(id) FROM dead_letter_events"), &err) < 0)
        fail_msg("skip: %s", err.msg);
    binlog_drain(t, &rec, &st);
    assert_int_equal(rec.n, 4);
    recorder_clear(&rec);
}

static struct txo_outbox_stats outbox_stats(struct testdb *t)
{
    struct txo_outbox_stats os;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_outbox_get_stats(t->db, &os, &err) < 0)
        fail_msg("outbox stats: %s", err.msg);
    return os;
}

/*
 * Rows the source published stay PENDING, yet count as published (stats) and age out
 * (retention) through its high-water id; a hand-back marks them and what the log holds after
 * the stored position, so the polling relay publishes only what comes after.
 */
static void test_stats_retention_and_hand_back(void **state)
{
    struct testdb *t = *state;
    struct recorder rec = {.n = 0}, polling = {.n = 0};
    binlog_drain(t, &rec, NULL);
    /* Three old events and one of today, published by the source. */
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key, created_at) VALUES "
                       "('order', 'o', 'E', '{}', 'old:1', '2020-01-01'), "
                       "('order', 'o', 'E', '{}', 'old:2', '2020-01-01'), "
                       "('order', 'p', 'E', '{}', 'old:3', '2020-01-01')");
    insert(t, "1", "k:1", "{}");
    binlog_drain(t, &rec, NULL);
    assert_int_equal(rec.n, 4);
    struct txo_outbox_stats os = outbox_stats(t);
    assert_int_equal(os.pending, 0);
    assert_int_equal(os.published, 4);
    assert_true(os.oldest_pending_age_s == 0.0);
    int64_t through = 0;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_binlog_published_through(t->db, &through, &err), 0);
    assert_int_equal(through, 4);

    /* An old event the source has not read yet: waiting, and kept by retention. */
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key, created_at) VALUES "
                       "('order', 'o', 'E', '{}', 'old:4', '2020-01-01')");
    os = outbox_stats(t);
    assert_int_equal(os.pending, 1);
    assert_true(os.oldest_pending_age_s > 86400.0);
    struct txo_retention_opts ro;
    txo_retention_opts_init(&ro);
    ro.outbox_s = 86400;
    struct txo_retention_counts c;
    assert_int_equal(txo_retention_run(t->db, &ro, &c, &err), 0);
    assert_int_equal(c.outbox, 3);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE idempotency_key "
                                     "IN ('k:1', 'old:4')"),
                     2);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events"), 2);

    /* Hand back: k:1 settled, old:4 (after the stored position) published and marked. */
    binlog_run(t, &rec, NULL, true);
    assert_int_equal(rec.n, 5);
    assert_non_null(strstr(rec.envelopes[4], "\"old:4\""));
    assert_int_equal(
        testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'"), 2);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_binlog_sources"), 0);
    assert_int_equal(txo_binlog_published_through(t->db, &through, &err), 0);
    assert_int_equal(through, 0);
    /* The polling relay publishes only what comes after. */
    poll_drain(t, &polling);
    assert_int_equal(polling.n, 0);
    insert(t, "1", "k:2", "{}");
    poll_drain(t, &polling);
    assert_int_equal(polling.n, 1);
    assert_non_null(strstr(polling.envelopes[0], "\"k:2\""));
    recorder_clear(&rec);
    recorder_clear(&polling);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_same_messages_as_polling, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transient_waits_permanent_dead_letters, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stats_retention_and_hand_back, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
