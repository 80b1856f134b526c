/*
 * Dead letters against a real MariaDB: listing with keyset paging and counting, and replay end
 * to end with a real relay (a publisher that fails until the relay dead-letters the events,
 * the replay, then a publisher that succeeds and the event is PUBLISHED); replaying twice,
 * replaying a published event, a dead letter without source or whose source row was deleted,
 * an unknown id, and two concurrent replays of one dead letter (one wins); a skip links the
 * aggregate's next event (appended already or later) past the skipped one's sequence.
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

#include "testoutbox.h"
#include "testdb.h"
#include "testsql.h"
#include "testrelay.h"
#include "txo/dlq.h"

/* ---- a publisher that fails on demand and records what it acknowledged ---- */

struct recorder {
    bool fail;
    unsigned calls;
    size_t seen;
    int64_t ids[64];
    int attempts[64];
    size_t n;
};

static int rec_publish(void *self, const struct txo_outbox_message *msgs, size_t n, int *results,
                       struct txo_error *errors)
{
    struct recorder *rec = self;
    rec->calls++;
    for (size_t i = 0; i < n; i++) {
        rec->seen++;
        if (rec->fail) {
            results[i] = txo_error_set(&errors[i], TXO_EPUBLISH, "broker down");
            continue;
        }
        if (rec->n < TXO_ARRAY_LEN(rec->ids)) {
            rec->ids[rec->n] = msgs[i].id;
            rec->attempts[rec->n] = msgs[i].attempt;
            rec->n++;
        }
        results[i] = 0;
    }
    return 0;
}

/* ---- fixtures and helpers ---- */

static int64_t q1(struct txo_db *db, const char *sql, int64_t id)
{
    struct txo_param p = txo_p_i64(id);
    return testdb_i64(db, sql, &p, 1);
}

static struct txo_relay *new_relay(struct txo_db *db, struct txo_publisher *pub)
{
    struct txo_relay_opts o;
    txo_relay_opts_init(&o);
    o.relay_id = "dlq-test";
    o.batch_size = 50;
    o.max_attempts = 3;
    o.backoff.base_ms = 1;
    o.backoff.max_ms = 2;
    o.backoff.jitter = 0.0;
    o.idle_sleep_ms = 2;
    struct txo_relay *r = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_relay_new(db, pub, &o, &r, &err) < 0)
        fail_msg("relay: %s", err.msg);
    return r;
}

/* Runs the relay until want rows are FAILED (the publisher fails every time). */
static void run_until_failed(struct testdb *t, struct txo_relay *r, int64_t want)
{
    for (int i = 0; i < 1000; i++) {
        if (TESTDB_COUNT(t->db, "outbox_events WHERE status = 'FAILED'") >= want)
            return;
        (void)testrelay_run_once(r);
        txo_sleep_ms(3);
    }
    fail_msg("the relay did not dead-letter %lld events", (long long)want);
}

static int replay(struct testdb *t, int64_t id, struct txo_error *err)
{
    txo_error_init(err);
    return txo_dlq_replay(t->db, id, err);
}

/* ---- (1) list and count ---- */

static void test_list_pages_and_count(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    uint64_t total = 9, unreplayed = 9;
    assert_int_equal(txo_dlq_count(t->db, &total, &unreplayed, &err), 0);
    assert_int_equal(total, 0);
    assert_int_equal(unreplayed, 0);
    struct txo_dead_letter *dl = NULL;
    size_t n = 9;
    assert_int_equal(txo_dlq_list(t->db, 0, 10, &dl, &n, &err), 0);
    assert_int_equal(n, 0);
    assert_null(dl);

    testdb_exec(t->db, "INSERT INTO dead_letter_events (source_event_id, event_type, payload, "
                       "error, created_at) VALUES "
                       "(11, 'OrderCreated', '{\"order_id\":1}', 'TXO_EPUBLISH: broker down', "
                       "'2026-01-02 03:04:05.123456'), "
                       "(NULL, 'PaymentCharged', '[1,2]', 'e2', '2026-01-02 03:04:06'), "
                       "(13, 'ShipmentCreated', '{}', 'e3', '2026-01-02 03:04:07.5')");
    testdb_exec(t->db, "UPDATE dead_letter_events SET replayed_at = '2026-02-03 04:05:06.000001', "
                       "replay_count = 2 WHERE id = 3");

    assert_int_equal(txo_dlq_list(t->db, 0, 2, &dl, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(dl[0].id, 1);
    assert_int_equal(dl[0].source_event_id, 11);
    assert_string_equal(dl[0].event_type, "OrderCreated");
    assert_string_equal(dl[0].payload, "{\"order_id\":1}");
    assert_string_equal(dl[0].error, "TXO_EPUBLISH: broker down");
    assert_string_equal(dl[0].created_at, "2026-01-02T03:04:05.123456Z");
    assert_null(dl[0].replayed_at);
    assert_int_equal(dl[0].replay_count, 0);
    assert_int_equal(dl[1].id, 2);
    assert_int_equal(dl[1].source_event_id, 0); /* NULL */
    assert_string_equal(dl[1].payload, "[1,2]");
    assert_string_equal(dl[1].created_at, "2026-01-02T03:04:06.000000Z");
    int64_t last = dl[1].id;
    txo_dead_letters_free(dl, n);

    assert_int_equal(txo_dlq_list(t->db, last, 2, &dl, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(dl[0].id, 3);
    assert_string_equal(dl[0].created_at, "2026-01-02T03:04:07.500000Z");
    assert_non_null(dl[0].replayed_at);
    assert_string_equal(dl[0].replayed_at, "2026-02-03T04:05:06.000001Z");
    assert_int_equal(dl[0].replay_count, 2);
    txo_dead_letters_free(dl, n);

    assert_int_equal(txo_dlq_list(t->db, 3, 2, &dl, &n, &err), 0);
    assert_int_equal(n, 0);

    assert_int_equal(txo_dlq_count(t->db, &total, &unreplayed, &err), 0);
    assert_int_equal(total, 3);
    assert_int_equal(unreplayed, 2);
    assert_int_equal(txo_dlq_count(t->db, NULL, NULL, &err), 0);

    assert_int_equal(txo_dlq_list(t->db, 0, 0, &dl, &n, &err), TXO_EINVAL);
    assert_int_equal(txo_dlq_list(t->db, 0, TXO_DLQ_LIST_MAX + 1, &dl, &n, &err), TXO_EINVAL);
    txo_dead_letters_free(NULL, 0);
}

/* ---- (2) replay end to end with the relay ---- */

static int64_t dead_letter_of(struct testdb *t, int64_t event_id)
{
    return q1(t->db, "SELECT MAX(id) FROM dead_letter_events WHERE source_event_id = ?", event_id);
}

static void test_replay_end_to_end(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    testoutbox_append_orders(t->db, 3);

    struct recorder *rec = txo_calloc(1, sizeof(*rec));
    struct txo_publisher *pub = testrelay_publisher("recorder", rec_publish, rec);
    struct txo_relay *r = new_relay(t->db, pub);

    /* The broker is down: 3 attempts each, then FAILED + a dead letter. */
    rec->fail = true;
    run_until_failed(t, r, 3);
    assert_int_equal(rec->seen, 9);
    assert_int_equal(TESTDB_COUNT(t->db, "dead_letter_events"), 3);
    uint64_t total = 0, unreplayed = 0;
    txo_error_init(&err);
    assert_int_equal(txo_dlq_count(t->db, &total, &unreplayed, &err), 0);
    assert_int_equal(total, 3);
    assert_int_equal(unreplayed, 3);
    int64_t dl2 = dead_letter_of(t, 2);
    assert_true(dl2 > 0);

    /* Replay event 2: PENDING again, from attempt 0, due now, unlocked; last_error kept. */
    assert_int_equal(replay(t, dl2, &err), 0);
    assert_int_equal(TESTDB_COUNT(t->db,
                                  "outbox_events WHERE id = 2 AND status = "
                                  "'PENDING' AND attempts = 0 AND next_attempt_at <= NOW(6) AND "
                                  "locked_by IS NULL AND locked_until IS NULL AND published_at IS "
                                  "NULL AND last_error = 'TXO_EPUBLISH: broker down'"),
                     1);
    assert_int_equal(q1(t->db,
                        "SELECT COUNT(*) FROM dead_letter_events WHERE id = ? AND "
                        "replayed_at IS NOT NULL AND replayed_at <= NOW(6) AND "
                        "replay_count = 1",
                        dl2),
                     1);
    assert_int_equal(txo_dlq_count(t->db, &total, &unreplayed, &err), 0);
    assert_int_equal(total, 3);
    assert_int_equal(unreplayed, 2);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'FAILED'"), 2);

    /* Replaying it again while it is pending: a state error, nothing changes. */
    assert_int_equal(replay(t, dl2, &err), TXO_ESTATE);
    assert_non_null(strstr(err.msg, "PENDING"));
    assert_int_equal(q1(t->db, "SELECT replay_count FROM dead_letter_events WHERE id = ?", dl2), 1);

    /* The broker is back: the relay publishes exactly the replayed event, as attempt 1. */
    rec->fail = false;
    assert_int_equal(testrelay_run_once(r), 1);
    assert_int_equal(rec->n, 1);
    assert_int_equal(rec->ids[0], 2);
    assert_int_equal(rec->attempts[0], 1);
    assert_int_equal(
        TESTDB_COUNT(t->db, "outbox_events WHERE id = 2 AND status = "
                            "'PUBLISHED' AND published_at IS NOT NULL AND last_error IS NULL"),
        1);
    assert_int_equal(testrelay_run_once(r), 0);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'FAILED'"), 2);

    /* Published: a replay is refused. */
    assert_int_equal(replay(t, dl2, &err), TXO_ESTATE);
    assert_non_null(strstr(err.msg, "PUBLISHED"));

    /* Event 1 is replayed while the broker is down again: it fails its 3 attempts, a second
     * dead letter appears; the first one can be replayed again, and this time it goes out. */
    int64_t dl1 = dead_letter_of(t, 1);
    rec->fail = true;
    assert_int_equal(replay(t, dl1, &err), 0);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'FAILED'"), 1);
    run_until_failed(t, r, 2);
    assert_int_equal(TESTDB_COUNT(t->db, "dead_letter_events WHERE source_event_id = 1"), 2);
    int64_t dl1b = dead_letter_of(t, 1);
    assert_true(dl1b > dl1);
    assert_int_equal(txo_dlq_count(t->db, &total, &unreplayed, &err), 0);
    assert_int_equal(total, 4);
    assert_int_equal(unreplayed, 2); /* event 3's and event 1's new one */
    rec->fail = false;
    assert_int_equal(replay(t, dl1, &err), 0);
    assert_int_equal(q1(t->db, "SELECT replay_count FROM dead_letter_events WHERE id = ?", dl1), 2);
    assert_int_equal(testrelay_run_once(r), 1);
    assert_int_equal(rec->n, 2);
    assert_int_equal(rec->ids[1], 1);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PUBLISHED'"), 2);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'FAILED' AND "
                                         "id = 3"),
                     1);

    txo_relay_free(r);
    txo_publisher_free(pub);
}

/* ---- (3) what cannot be replayed ---- */

static void test_replay_refusals_change_nothing(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;

    assert_int_equal(replay(t, 12345, &err), TXO_ENOTFOUND);
    assert_non_null(strstr(err.msg, "no dead letter 12345"));

    /* No source event. */
    testdb_exec(t->db, "INSERT INTO dead_letter_events (source_event_id, event_type, payload, "
                       "error) VALUES (NULL, 'OrderCreated', '{}', 'gone')");
    assert_int_equal(replay(t, 1, &err), TXO_ENOTFOUND);
    assert_non_null(strstr(err.msg, "source_event_id is NULL"));

    /* The source row was deleted (retention or by hand): not re-created. */
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key, status, attempts) VALUES ('order', 1, "
                       "'OrderCreated', '{}', 'k:1', 'FAILED', 10)");
    testdb_exec(t->db, "INSERT INTO dead_letter_events (source_event_id, event_type, payload, "
                       "error) SELECT id, event_type, payload, 'e' FROM outbox_events");
    testdb_exec(t->db, "DELETE FROM outbox_events");
    assert_int_equal(replay(t, 2, &err), TXO_ENOTFOUND);
    assert_non_null(strstr(err.msg, "no longer exists"));
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events"), 0);

    /* A source that is PROCESSING (a relay holds it): refused, and the lock stays. */
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key, status, attempts, locked_by, locked_until) "
                       "VALUES ('order', 2, 'OrderCreated', '{}', 'k:2', 'PROCESSING', 3, "
                       "'relay-x', NOW(6) + INTERVAL 30 SECOND)");
    testdb_exec(t->db, "INSERT INTO dead_letter_events (source_event_id, event_type, payload, "
                       "error) SELECT id, event_type, payload, 'e' FROM outbox_events "
                       "WHERE idempotency_key = 'k:2'");
    assert_int_equal(replay(t, 3, &err), TXO_ESTATE);
    assert_non_null(strstr(err.msg, "PROCESSING"));
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PROCESSING' "
                                         "AND locked_by = 'relay-x' AND attempts = 3"),
                     1);
    assert_int_equal(TESTDB_COUNT(t->db, "dead_letter_events WHERE replayed_at IS NOT "
                                         "NULL OR replay_count <> 0"),
                     0);
}

/* ---- (4) two replays of one dead letter at once ---- */

struct replayer {
    struct txo_db *db;
    int64_t id;
    pthread_barrier_t *barrier;
    int rc;
};

static void *replayer_main(void *arg)
{
    struct replayer *r = arg;
    struct txo_error err;
    txo_error_init(&err);
    pthread_barrier_wait(r->barrier);
    r->rc = txo_dlq_replay(r->db, r->id, &err);
    return NULL;
}

static void test_concurrent_replays_one_wins(void **state)
{
    struct testdb *t = *state;
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key, status, attempts, last_error) VALUES "
                       "('order', 1, 'OrderCreated', '{}', 'k:1', 'FAILED', 10, 'e')");
    testdb_exec(t->db, "INSERT INTO dead_letter_events (source_event_id, event_type, payload, "
                       "error) SELECT id, event_type, payload, last_error FROM outbox_events");
    for (int round = 0; round < 5; round++) {
        pthread_barrier_t barrier;
        pthread_barrier_init(&barrier, NULL, 2);
        struct replayer r[2];
        pthread_t th[2];
        for (int i = 0; i < 2; i++) {
            r[i] = (struct replayer){testdb_connect(t), 1, &barrier, 1};
            assert_int_equal(pthread_create(&th[i], NULL, replayer_main, &r[i]), 0);
        }
        for (int i = 0; i < 2; i++) {
            pthread_join(th[i], NULL);
            txo_db_close(r[i].db);
        }
        pthread_barrier_destroy(&barrier);
        int ok = (r[0].rc == 0) + (r[1].rc == 0);
        int refused = (r[0].rc == TXO_ESTATE) + (r[1].rc == TXO_ESTATE);
        if (ok != 1 || refused != 1)
            fail_msg("round %d: replays returned %d and %d", round, r[0].rc, r[1].rc);
        assert_int_equal(testdb_q(t->db, "SELECT replay_count FROM dead_letter_events"), round + 1);
        /* Dead again, for the next round. */
        testdb_exec(t->db, "UPDATE outbox_events SET status = 'FAILED', attempts = 10");
    }
}

/* ---- (5) a skip is not a gap ---- */

/* Column col (sequence or prev_sequence) of the event with this key. */
static int64_t seq_of(struct testdb *t, const char *key, const char *col)
{
    char sql[160];
    snprintf(sql, sizeof(sql), "SELECT %s FROM outbox_events WHERE idempotency_key = ?", col);
    struct txo_param k = txo_p_str(key);
    return testdb_i64(t->db, sql, &k, 1);
}

/* Makes event `key` FAILED with a dead letter; returns the dead letter's id. */
static int64_t kill_event(struct testdb *t, const char *key)
{
    struct txo_param k = txo_p_str(key);
    testsql_exec(t->db,
                 "UPDATE outbox_events SET status = 'FAILED', attempts = 10, last_error = 'e' "
                 "WHERE idempotency_key = ?",
                 &k, 1);
    testsql_exec(t->db,
                 "INSERT INTO dead_letter_events (source_event_id, event_type, payload, error) "
                 "SELECT id, event_type, payload, last_error FROM outbox_events "
                 "WHERE idempotency_key = ?",
                 &k, 1);
    return testdb_q(t->db, "SELECT MAX(id) FROM dead_letter_events");
}

static void append(struct testdb *t, const char *agg, const char *key)
{
    struct txo_param p[] = {txo_p_str(agg), txo_p_str(key)};
    testsql_exec(t->db,
                 "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "
                 "idempotency_key) VALUES ('order', ?, 'OrderChanged', '{}', ?)",
                 p, 2);
}

/*
 * Aggregate 5 has events a, b, c (sequences 1, 2, 3). Skipping b makes c follow a (1); then
 * skipping c, the aggregate's last, makes the next event appended, d (4), follow a too.
 * A replay changes nothing of the sequence. Another aggregate is not touched.
 */
static void test_skip_links_the_next_event_past_it(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    append(t, "5", "a");
    append(t, "5", "b");
    append(t, "6", "other");
    append(t, "5", "c");
    assert_int_equal(seq_of(t, "c", "sequence"), 3);
    assert_int_equal(seq_of(t, "c", "prev_sequence"), 2);
    assert_int_equal(seq_of(t, "other", "sequence"), 1);

    int64_t dl_b = kill_event(t, "b");
    assert_int_equal(txo_dlq_skip(t->db, dl_b, &err), 0);
    assert_int_equal(seq_of(t, "c", "sequence"), 3);
    assert_int_equal(seq_of(t, "c", "prev_sequence"), 1);

    int64_t dl_c = kill_event(t, "c");
    assert_int_equal(txo_dlq_replay(t->db, dl_c, &err), 0); /* the sequence stays */
    assert_int_equal(seq_of(t, "c", "prev_sequence"), 1);
    testdb_exec(t->db, "UPDATE outbox_events SET status = 'FAILED' WHERE idempotency_key = 'c'");
    assert_int_equal(txo_dlq_skip(t->db, dl_c, &err), 0);
    append(t, "5", "d");
    assert_int_equal(seq_of(t, "d", "sequence"), 4);
    assert_int_equal(seq_of(t, "d", "prev_sequence"), 1);
    append(t, "6", "other2");
    assert_int_equal(seq_of(t, "other2", "prev_sequence"), 1);

    /* An event from before the database numbered events (no sequence) is skipped as before. */
    testdb_exec(t->db, "UPDATE outbox_events SET sequence = NULL, prev_sequence = NULL WHERE "
                       "idempotency_key = 'd'");
    int64_t dl_d = kill_event(t, "d");
    assert_int_equal(txo_dlq_skip(t->db, dl_d, &err), 0);
    assert_int_equal(
        testdb_q(t->db, "SELECT last_kept FROM outbox_aggregates WHERE aggregate_id = '5'"), 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_pages_and_count),
        cmocka_unit_test(test_replay_end_to_end),
        cmocka_unit_test(test_replay_refusals_change_nothing),
        cmocka_unit_test(test_concurrent_replays_one_wins),
        cmocka_unit_test(test_skip_links_the_next_event_past_it),
    };
    return testdb_run_each(tests, TXO_ARRAY_LEN(tests), "dlq", 0, NULL);
}
