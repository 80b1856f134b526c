/*
 * The outbox relay against a real MariaDB, every test once per claim strategy (skip-locked and
 * update-limit) with leases, and the ones that do not look at leases once more in claim mode
 * transaction (claim, publish and mark in one transaction): drain exactly once in claim order,
 * the publisher down (publish failures: backoff, last_error, FAILED + dead letter, recovery),
 * a foreign row whose text column holds a NUL byte (dead-lettered, never published cut), a
 * batch marked with as many statements whatever its size,
 * two relays draining concurrently, lease expiry with a fenced mark (at-least-once), every claim
 * statement using idx_outbox_due (the only secondary index the relay has), a row committed late
 * behind the claim cursor still being published, stop mid-run, and the lock token; in claim
 * mode transaction, a batch being published is PENDING and locked (another relay skips it), and
 * how AUTO picks the mode.
 *
 * The publisher is an in-test one (txo_publisher_new) that records what it got and can be
 * told to fail: every message, the first N calls, or given ids.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "relay/relay_sql.h"
#include "testdb.h"
#include "testrelay.h"
#include "testrelayfix.h"
#include "testrelaythread.h"

/* ---- the recording publisher ---- */

struct recorder;
typedef void (*hook_fn)(struct recorder *rec, const struct txo_outbox_message *msgs, size_t n);

struct recorder {
    /* What it acknowledged, in order. */
    int64_t *ids;
    char **keys;
    char **traces; /* "traceparent|tracestate" as handed over, NULL without a traceparent */
    int *attempts;
    size_t n, cap;
    size_t seen;            /* messages handed to it, acknowledged or not */
    int64_t first_id;       /* the first message it was handed ... */
    char first_created[32]; /* ... and its created_at */
    unsigned calls;

    /* Failure injection. */
    bool fail_all;
    unsigned fail_first_calls;
    const int64_t *fail_ids;
    size_t n_fail_ids;

    /* Runs at the start of every publish call. */
    hook_fn hook;
    void *hook_arg;
};

static bool should_fail(const struct recorder *rec, int64_t id)
{
    if (rec->fail_all || rec->calls <= rec->fail_first_calls)
        return true;
    for (size_t i = 0; i < rec->n_fail_ids; i++) {
        if (rec->fail_ids[i] == id)
            return true;
    }
    return false;
}

static int rec_publish(void *self, const struct txo_outbox_message *msgs, size_t n, int *results,
                       struct txo_error *errors)
{
    struct recorder *rec = self;
    rec->calls++;
    if (rec->hook != NULL)
        rec->hook(rec, msgs, n);
    for (size_t i = 0; i < n; i++) {
        /* created_at is RFC 3339 UTC with microseconds: "YYYY-MM-DDTHH:MM:SS.ffffffZ". */
        const char *ca = msgs[i].created_at;
        if (ca == NULL || strlen(ca) != 27 || ca[10] != 'T' || ca[19] != '.' || ca[26] != 'Z')
            fail_msg("event %lld: created_at \"%s\" is not RFC 3339", (long long)msgs[i].id,
                     ca ? ca : "(null)");
        if (rec->seen == 0) {
            rec->first_id = msgs[i].id;
            snprintf(rec->first_created, sizeof(rec->first_created), "%s", ca);
        }
        rec->seen++;
        if (should_fail(rec, msgs[i].id)) {
            results[i] = txo_error_set(&errors[i], TXO_EPUBLISH, "broker down");
            continue;
        }
        /* Every message must make a valid envelope. */
        char *env = txo_envelope_encode(&msgs[i], NULL, NULL);
        if (env == NULL)
            fail_msg("event %lld: no envelope", (long long)msgs[i].id);
        txo_free(env);
        if (rec->n == rec->cap) {
            rec->cap = rec->cap ? rec->cap * 2 : 256;
            rec->ids = txo_realloc(rec->ids, rec->cap * sizeof(*rec->ids));
            rec->keys = txo_realloc(rec->keys, rec->cap * sizeof(*rec->keys));
            rec->traces = txo_realloc(rec->traces, rec->cap * sizeof(*rec->traces));
            rec->attempts = txo_realloc(rec->attempts, rec->cap * sizeof(*rec->attempts));
            assert_non_null(rec->ids);
            assert_non_null(rec->keys);
            assert_non_null(rec->attempts);
        }
        rec->ids[rec->n] = msgs[i].id;
        rec->keys[rec->n] = txo_strdup(msgs[i].idempotency_key);
        rec->traces[rec->n] = NULL;
        if (msgs[i].traceparent != NULL) {
            char buf[600];
            snprintf(buf, sizeof(buf), "%s|%s", msgs[i].traceparent,
                     msgs[i].tracestate != NULL ? msgs[i].tracestate : "");
            rec->traces[rec->n] = txo_strdup(buf);
        }
        rec->attempts[rec->n] = msgs[i].attempt;
        rec->n++;
        results[i] = 0;
    }
    return 0;
}

static void rec_destroy(void *self)
{
    struct recorder *rec = self;
    for (size_t i = 0; i < rec->n; i++) {
        txo_free(rec->keys[i]);
        txo_free(rec->traces[i]);
    }
    txo_free(rec->ids);
    txo_free(rec->keys);
    txo_free(rec->traces);
    txo_free(rec->attempts);
    txo_free(rec);
}

static const struct txo_publisher_ops rec_ops = {
    .name = "recorder",
    .publish_batch = rec_publish,
    .destroy = rec_destroy,
};

static struct txo_publisher *new_recorder(struct recorder **rec)
{
    *rec = txo_calloc(1, sizeof(**rec));
    assert_non_null(*rec);
    struct txo_publisher *pub = NULL;
    assert_int_equal(txo_publisher_new(&rec_ops, *rec, &pub, NULL), 0);
    return pub;
}

/* ---- fixtures ---- */

struct ctx {
    struct testdb t;
    struct testrelay_variant v; /* what the test runs with */
};

static int setup(void **state)
{
    const struct testrelay_variant *v = *state;
    struct ctx *c = testdb_fixture_new(sizeof(*c), v->db, 0);
    c->v = *v;
    *state = c;
    return 0;
}

static struct txo_relay_opts relay_opts(const struct ctx *c, unsigned batch)
{
    struct txo_relay_opts o = testrelay_variant_opts(&c->v, batch);
    o.relay_id = "test-relay";
    o.idle_sleep_ms = 5;
    return o;
}

/* A draining relay of c's variant, run to the end: what it published is in rec. */
struct drained {
    struct recorder *rec;
    struct txo_publisher *pub;
    struct txo_relay *relay;
};

static struct drained drain_to_recorder(const struct ctx *c, unsigned batch)
{
    struct drained d;
    d.pub = new_recorder(&d.rec);
    struct txo_relay_opts o = relay_opts(c, batch);
    o.drain = true;
    d.relay = testrelay_new(c->t.db, d.pub, &o);
    testrelay_drain(d.relay);
    return d;
}

static void drained_release(struct drained *d)
{
    txo_relay_free(d->relay);
    txo_publisher_free(d->pub);
}

/* Inserts n events (aggregate_id = 1..n, key "<prefix>:<n>") with the given status, in one
 * statement. */
static void insert_events_as(struct testdb *t, unsigned n, const char *status, const char *prefix)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "
             "idempotency_key, status) SELECT 'order', seq, 'OrderCreated', "
             "JSON_OBJECT('n', seq), CONCAT('%s:', seq), '%s' FROM seq_1_to_%u",
             prefix, status, n);
    testdb_exec(t->db, sql);
}

static void insert_events(struct testdb *t, unsigned n, const char *status)
{
    insert_events_as(t, n, status, "k");
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Asserts that the ids in recs are exactly 1..n, each once. */
static void assert_each_once(struct recorder **recs, size_t n_recs, size_t n)
{
    size_t total = 0;
    for (size_t r = 0; r < n_recs; r++)
        total += recs[r]->n;
    assert_int_equal(total, n);
    int64_t *all = txo_malloc(n * sizeof(*all));
    size_t k = 0;
    for (size_t r = 0; r < n_recs; r++) {
        if (recs[r]->n > 0)
            memcpy(all + k, recs[r]->ids, recs[r]->n * sizeof(*all));
        k += recs[r]->n;
    }
    qsort(all, n, sizeof(*all), cmp_i64);
    for (size_t i = 0; i < n; i++) {
        if (all[i] != (int64_t)i + 1)
            fail_msg("published ids: position %zu holds %lld (duplicate or missing id)", i,
                     (long long)all[i]);
    }
    txo_free(all);
}

/* ---- (1) drain: every event exactly once, in claim order ---- */

static void test_drain_exactly_once_in_order(void **state)
{
    struct ctx *c = *state;
    const unsigned n = 1234;
    insert_events(&c->t, n, "PENDING");
    /* The last 10 events are due earlier than all others: they go first. */
    testdb_exec(c->t.db, "UPDATE outbox_events SET next_attempt_at = next_attempt_at - "
                         "INTERVAL (2000 - id) SECOND WHERE id > 1224");

    struct drained d = drain_to_recorder(c, 100);
    struct recorder *rec = d.rec;
    assert_int_equal(txo_relay_claim_strategy(d.relay), c->v.claim);
    assert_int_equal(txo_relay_claim_mode(d.relay), c->v.mode);

    assert_each_once(&rec, 1, n);
    for (size_t i = 0; i < n; i++) {
        int64_t want = i < 10 ? (int64_t)(1225 + i) : (int64_t)(i - 10 + 1);
        if (rec->ids[i] != want)
            fail_msg("publish order: position %zu is id %lld, want %lld", i, (long long)rec->ids[i],
                     (long long)want);
        char key[32];
        snprintf(key, sizeof(key), "k:%lld", (long long)rec->ids[i]);
        assert_string_equal(rec->keys[i], key);
        assert_int_equal(rec->attempts[i], 1);
    }
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED' "
                                           "AND published_at IS NOT NULL AND locked_by IS NULL "
                                           "AND locked_until IS NULL AND attempts = 0"),
                     n);
    struct txo_param first = txo_p_i64(rec->first_id);
    char *created = testdb_str(c->t.db,
                               "SELECT DATE_FORMAT(created_at, '%Y-%m-%dT%H:%i:%s.%fZ') "
                               "FROM outbox_events WHERE id = ?",
                               &first, 1);
    assert_string_equal(rec->first_created, created);
    txo_free(created);

    struct txo_relay_stats st;
    txo_relay_get_stats(d.relay, &st);
    assert_int_equal(st.claimed, n);
    assert_int_equal(st.published, n);
    assert_int_equal(st.batches, 13);
    assert_int_equal(st.fenced + st.failed_attempts + st.dead_lettered + st.reclaimed, 0);

    /* Nothing left: another cycle claims nothing. */
    assert_int_equal(testrelay_run_once(d.relay), 0);
    drained_release(&d);
}

/*
 * The trace context an event was appended in reaches the publisher: stored by
 * txo_outbox_append() as version-00 text, handed over as stored. What another application
 * wrote is checked as a receiver of the headers would check it: an invalid traceparent is left
 * out (with its tracestate), an invalid tracestate alone is left out; neither fails the event.
 */
static int append_traced(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    const struct txo_trace_ctx *ctx = arg;
    struct txo_outbox_event ev = {.aggregate_type = "order",
                                  .aggregate_id = "1",
                                  .event_type = "OrderCreated",
                                  .payload_json = "{}",
                                  .idempotency_key = "traced",
                                  .trace = ctx};
    return txo_outbox_append(tx, &ev, 0, NULL, NULL, err);
}

static void test_trace_context_reaches_the_publisher(void **state)
{
    struct ctx *c = *state;
    static const char tp[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    struct txo_trace_ctx ctx;
    assert_true(txo_trace_parse(tp, "rojo=00f067aa0ba902b7", &ctx));
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_db_transact(c->t.db, TXO_ISO_READ_COMMITTED, append_traced, &ctx, &err),
                     0);
    assert_int_equal(TESTDB_COUNT(c->t.db,
                                  "outbox_events WHERE traceparent = "
                                  "'00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' "
                                  "AND tracestate = 'rojo=00f067aa0ba902b7'"),
                     1);
    /* Written by others: a bad traceparent, a bad tracestate, none. */
    testdb_exec(c->t.db,
                "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "
                "idempotency_key, traceparent, tracestate) VALUES "
                "('order', '2', 'E', '{}', 'bad-parent', '00-zz', 'a=1'), "
                "('order', '3', 'E', '{}', 'bad-state', "
                "'00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00', 'Upper=1'), "
                "('order', '4', 'E', '{}', 'none', NULL, NULL)");

    struct drained d = drain_to_recorder(c, 100);
    struct recorder *rec = d.rec;
    assert_int_equal(rec->n, 4);
    for (size_t i = 0; i < rec->n; i++) {
        const char *want = NULL;
        if (strcmp(rec->keys[i], "traced") == 0)
            want = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01|rojo=00f067aa0ba902b7";
        else if (strcmp(rec->keys[i], "bad-state") == 0)
            want = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00|";
        if (want == NULL && rec->traces[i] != NULL)
            fail_msg("%s: handed over with %s", rec->keys[i], rec->traces[i]);
        if (want != NULL && (rec->traces[i] == NULL || strcmp(rec->traces[i], want) != 0))
            fail_msg("%s: handed over with %s, want %s", rec->keys[i],
                     rec->traces[i] ? rec->traces[i] : "none", want);
    }
    drained_release(&d);
}

/* ---- (2) the publisher is down ---- */

/* Seconds until the next attempt of event id (rounded). */
static int64_t delay_s(struct testdb *t, int64_t id)
{
    struct txo_param p = txo_p_i64(id);
    return testdb_i64(t->db,
                      "SELECT ROUND(TIMESTAMPDIFF(MICROSECOND, NOW(6), next_attempt_at) / 1e6) "
                      "FROM outbox_events WHERE id = ?",
                      &p, 1);
}

static void test_failure_backoff_and_last_error(void **state)
{
    struct ctx *c = *state;
    insert_events(&c->t, 4, "PENDING");
    struct recorder *rec;
    struct txo_publisher *pub = new_recorder(&rec);
    const int64_t bad[] = {2};
    rec->fail_ids = bad;
    rec->n_fail_ids = 1;
    struct txo_relay_opts o = relay_opts(c, 10);
    o.backoff.base_ms = 60000; /* exact delays: 60 s, then 120 s, capped at 200 s */
    o.backoff.max_ms = 200000;
    o.backoff.jitter = 0.0;
    struct txo_relay *r = testrelay_new(c->t.db, pub, &o);

    assert_int_equal(testrelay_run_once(r), 4);
    assert_int_equal(rec->n, 3);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED'"), 3);
    assert_int_equal(TESTDB_COUNT(c->t.db,
                                  "outbox_events WHERE id = 2 "
                                  "AND status = 'PENDING' AND attempts = 1 AND locked_by IS NULL "
                                  "AND locked_until IS NULL AND published_at IS NULL "
                                  "AND next_attempt_at > NOW(6)"),
                     1);
    assert_int_equal(delay_s(&c->t, 2), 60); /* base * 2^0: attempts was read before +1 */
    char *last_error =
        testdb_str(c->t.db, "SELECT last_error FROM outbox_events WHERE id = 2", NULL, 0);
    assert_non_null(last_error);
    assert_string_equal(last_error, "TXO_EPUBLISH: broker down");
    txo_free(last_error);

    /* Not due yet: the next cycle leaves it alone (no hot loop). */
    assert_int_equal(testrelay_run_once(r), 0);

    /* Due again, fails again: twice the delay. Then three times more would hit the cap. */
    testdb_exec(c->t.db, "UPDATE outbox_events SET next_attempt_at = NOW(6) WHERE id = 2");
    assert_int_equal(testrelay_run_once(r), 1);
    assert_int_equal(delay_s(&c->t, 2), 120);
    testdb_exec(c->t.db, "UPDATE outbox_events SET next_attempt_at = NOW(6) WHERE id = 2");
    assert_int_equal(testrelay_run_once(r), 1);
    assert_int_equal(delay_s(&c->t, 2), 200);
    struct txo_relay_stats st;
    txo_relay_get_stats(r, &st);
    assert_int_equal(st.failed_attempts, 3);
    assert_int_equal(st.published, 3);

    /* With jitter 0.5 the delay lands in [0.5, 1.5) x 60 s. */
    txo_relay_free(r);
    o.backoff.jitter = 0.5;
    o.backoff.base_ms = 60000;
    r = testrelay_new(c->t.db, pub, &o);
    testdb_exec(c->t.db, "UPDATE outbox_events SET next_attempt_at = NOW(6), attempts = 0 "
                         "WHERE id = 2");
    assert_int_equal(testrelay_run_once(r), 1);
    int64_t d = delay_s(&c->t, 2);
    if (d < 30 || d > 90)
        fail_msg("jittered delay %lld s, want 30..90", (long long)d);

    /* Once due and the publisher is back, it is delivered with its attempt number. */
    rec->n_fail_ids = 0;
    testdb_exec(c->t.db, "UPDATE outbox_events SET next_attempt_at = NOW(6) WHERE id = 2");
    assert_int_equal(testrelay_run_once(r), 1);
    assert_int_equal(rec->ids[3], 2);
    assert_int_equal(rec->attempts[3], 2);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED' "
                                           "AND last_error IS NULL"),
                     4);
    txo_relay_free(r);
    txo_publisher_free(pub);
}

static void test_dead_letter_then_recovery(void **state)
{
    struct ctx *c = *state;
    insert_events(&c->t, 5, "PENDING");
    struct recorder *rec;
    struct txo_publisher *pub = new_recorder(&rec);
    rec->fail_all = true;
    struct txo_relay_opts o = relay_opts(c, 10);
    o.max_attempts = 3;
    o.backoff.base_ms = 1;
    o.backoff.max_ms = 2;
    o.breaker_failures = 0; /* this test counts attempts; the breaker has its own tests */
    struct txo_relay *r = testrelay_new(c->t.db, pub, &o);

    for (int i = 0; i < 500 && TESTDB_COUNT(c->t.db, "outbox_events WHERE status = "
                                                     "'FAILED'") < 5;
         i++) {
        (void)testrelay_run_once(r);
        txo_sleep_ms(2);
    }
    assert_int_equal(rec->seen, 15); /* 5 events x 3 attempts, not one more */
    assert_int_equal(rec->n, 0);
    assert_int_equal(TESTDB_COUNT(c->t.db,
                                  "outbox_events WHERE status = 'FAILED' "
                                  "AND attempts = 3 AND locked_by IS NULL AND locked_until IS NULL "
                                  "AND last_error = 'TXO_EPUBLISH: broker down'"),
                     5);
    assert_int_equal(TESTDB_COUNT(c->t.db, "dead_letter_events"), 5);
    assert_int_equal(TESTDB_COUNT(c->t.db,
                                  "dead_letter_events d JOIN outbox_events e "
                                  "ON e.id = d.source_event_id WHERE d.payload = e.payload "
                                  "AND d.event_type = e.event_type "
                                  "AND d.error = 'TXO_EPUBLISH: broker down'"),
                     5);
    assert_int_equal(
        testdb_q(c->t.db, "SELECT COUNT(DISTINCT source_event_id) FROM dead_letter_events"), 5);
    struct txo_relay_stats st;
    txo_relay_get_stats(r, &st);
    assert_int_equal(st.failed_attempts, 10);
    assert_int_equal(st.dead_lettered, 5);

    /* The broker is back: new events go out, the dead ones stay dead (until a replay). */
    rec->fail_all = false;
    testdb_exec(c->t.db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                         "payload, idempotency_key) VALUES ('order', 6, 'OrderCreated', '{}', "
                         "'k:6'), ('order', 7, 'OrderCreated', '{}', 'k:7')");
    struct txo_relay_opts od = o;
    od.drain = true;
    txo_relay_free(r); /* it gives its shards back, so the draining relay takes them all */
    struct txo_relay *rd = testrelay_new(c->t.db, pub, &od);
    testrelay_drain(rd);
    assert_int_equal(rec->n, 2);
    assert_string_equal(rec->keys[0], "k:6");
    assert_string_equal(rec->keys[1], "k:7");
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'FAILED'"), 5);
    assert_int_equal(TESTDB_COUNT(c->t.db, "dead_letter_events"), 5);
    txo_relay_free(rd);
    r = testrelay_new(c->t.db, pub, &o);

    /* A publisher that fails its first call only: the events are delivered on the next. */
    testdb_exec(c->t.db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                         "payload, idempotency_key) VALUES ('order', 8, 'OrderCreated', '{}', "
                         "'k:8')");
    rec->fail_first_calls = rec->calls + 1;
    assert_int_equal(testrelay_run_once(r), 1);
    assert_int_equal(rec->n, 2);
    txo_sleep_ms(5);
    assert_int_equal(testrelay_run_once(r), 1);
    assert_int_equal(rec->n, 3);
    assert_string_equal(rec->keys[2], "k:8");
    assert_int_equal(rec->attempts[2], 2);
    txo_relay_free(r);
    txo_publisher_free(pub);
}

/*
 * A foreign application's raw SQL can store a NUL byte in a text column, which a published
 * string cannot carry: such an event is dead-lettered with the column named, never handed to
 * the publisher (which would see it cut at the NUL, as another value), and the events around
 * it are published as usual.
 */
static void test_nul_in_a_text_column_is_dead_lettered(void **state)
{
    struct ctx *c = *state;
    testdb_exec(c->t.db,
                "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, "
                "idempotency_key) VALUES "
                "(1, 'order', '1', 'OrderCreated', '{}', 'good:1'), "
                "(2, 'ord\\0er', '2', 'OrderCreated', '{}', 'bad:aggregate_type'), "
                "(3, 'order', '3', 'OrderCreated', '{}', 'good:3'), "
                "(4, 'order', '4\\0x', 'OrderCreated', '{}', 'bad:aggregate_id'), "
                "(5, 'order', '5', 'Ev\\0x', '{}', 'bad:event_type'), "
                "(6, 'order', '6', 'OrderCreated', '{}', 'good:6'), "
                "(7, 'order', '7', 'OrderCreated', '{}', 'bad:\\0idempotency_key')");
    /* The server stored every byte: the NUL is inside the values, not the end of them. */
    assert_int_equal(TESTDB_COUNT(c->t.db,
                                  "outbox_events WHERE INSTR(CONCAT("
                                  "aggregate_type, aggregate_id, event_type, idempotency_key), "
                                  "CHAR(0)) > 0"),
                     4);

    struct drained d = drain_to_recorder(c, 10);
    struct recorder *rec = d.rec;

    /* Only the good events reached the publisher, each once. */
    assert_int_equal(rec->seen, 3);
    assert_int_equal(rec->n, 3);
    static const char *const good[] = {"good:1", "good:3", "good:6"};
    for (size_t i = 0; i < rec->n; i++)
        assert_string_equal(rec->keys[i], good[i]);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED' "
                                           "AND idempotency_key LIKE 'good:%'"),
                     3);

    /* Each bad one: FAILED at its first attempt, unlocked, dead-lettered with its column. */
    static const struct {
        int64_t id;
        const char *column;
    } bad[] = {
        {2, "aggregate_type"}, {4, "aggregate_id"}, {5, "event_type"}, {7, "idempotency_key"}};
    for (size_t i = 0; i < TXO_ARRAY_LEN(bad); i++) {
        char want[128];
        snprintf(want, sizeof(want), "%%TXO_EINVAL%%column %s holds a NUL byte%%", bad[i].column);
        struct txo_param p[] = {txo_p_i64(bad[i].id), txo_p_str(want)};
        if (testdb_i64(c->t.db,
                       "SELECT COUNT(*) FROM outbox_events WHERE id = ? AND status = 'FAILED' "
                       "AND attempts = 1 AND locked_by IS NULL AND last_error LIKE ?",
                       p, 2) != 1)
            fail_msg("event %lld: not FAILED with a reason naming %s", (long long)bad[i].id,
                     bad[i].column);
        if (testdb_i64(c->t.db,
                       "SELECT COUNT(*) FROM dead_letter_events WHERE source_event_id = ? "
                       "AND error LIKE ?",
                       p, 2) != 1)
            fail_msg("event %lld: no dead letter naming %s", (long long)bad[i].id, bad[i].column);
    }
    assert_int_equal(TESTDB_COUNT(c->t.db, "dead_letter_events"), 4);
    struct txo_relay_stats st;
    txo_relay_get_stats(d.relay, &st);
    assert_int_equal(st.published, 3);
    assert_int_equal(st.dead_lettered, 4);
    drained_release(&d);
}

/* ---- marking a batch costs a few statements, whatever its size ---- */

/* A status counter of the session of db (SHOW SESSION STATUS), such as COM_UPDATE. */
static int64_t session_counter(struct txo_db *db, const char *name)
{
    struct txo_param p[] = {txo_p_str(name)};
    return testdb_i64(db,
                      "SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS "
                      "WHERE VARIABLE_NAME = ?",
                      p, 1);
}

/* What one cycle of relay r cost its own connection rdb. */
struct cycle_cost {
    size_t claimed;
    int64_t updates;        /* UPDATE statements: claim and mark */
    int64_t insert_selects; /* INSERT ... SELECT statements: the dead letters */
};

static struct cycle_cost one_cycle(struct txo_relay *r, struct txo_db *rdb)
{
    int64_t u0 = session_counter(rdb, "COM_UPDATE");
    int64_t i0 = session_counter(rdb, "COM_INSERT_SELECT");
    struct cycle_cost cost = {.claimed = testrelay_run_once(r)};
    cost.updates = session_counter(rdb, "COM_UPDATE") - u0;
    cost.insert_selects = session_counter(rdb, "COM_INSERT_SELECT") - i0;
    return cost;
}

/*
 * The relay marks a batch with one statement per outcome, not one per event: a cycle of 64
 * events runs as many UPDATEs (and dead-letter INSERTs) on the relay's own connection as a
 * cycle of one, counted by the server (its session's Com_update and Com_insert_select).
 * Published, failed and dead-lettered batches alike.
 */
static void test_batch_is_marked_with_a_few_statements(void **state)
{
    struct ctx *c = *state;
    struct recorder *rec;
    struct txo_publisher *pub = new_recorder(&rec);
    struct txo_relay_opts o = relay_opts(c, 64);
    o.lease_s = 600;                   /* one reclaim pass only, in the first cycle */
    o.max_attempts = 1;                /* a failed publish is dead-lettered at once */
    o.breaker_failures = 0;            /* failed batches keep being published */
    o.ordering = TXO_RELAY_ORDER_NONE; /* the batches reuse aggregate ids */
    struct txo_db *rdb = testdb_connect(&c->t);
    struct txo_relay *r = testrelay_new(rdb, pub, &o);
    assert_int_equal(one_cycle(r, rdb).claimed, 0); /* the reclaim pass, out of the way */

    for (int failing = 0; failing <= 1; failing++) {
        rec->fail_all = failing;
        insert_events_as(&c->t, 1, "PENDING", failing ? "f1" : "p1");
        struct cycle_cost one = one_cycle(r, rdb);
        insert_events_as(&c->t, 64, "PENDING", failing ? "f64" : "p64");
        struct cycle_cost many = one_cycle(r, rdb);
        print_message("%s: a batch of 1 took %lld UPDATE + %lld INSERT ... SELECT, of 64 took "
                      "%lld + %lld\n",
                      failing ? "dead-lettered" : "published", (long long)one.updates,
                      (long long)one.insert_selects, (long long)many.updates,
                      (long long)many.insert_selects);
        assert_int_equal(one.claimed, 1);
        assert_int_equal(many.claimed, 64);
        assert_int_equal(many.updates, one.updates);
        assert_int_equal(many.insert_selects, one.insert_selects);
        assert_true(many.updates <= 3); /* claim, mark, unlock the dead-lettered */
        assert_int_equal(many.insert_selects, failing);
    }
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED'"), 65);
    assert_int_equal(TESTDB_COUNT(c->t.db, "dead_letter_events"), 65);
    txo_relay_free(r);
    txo_db_close(rdb);
    txo_publisher_free(pub);
}

/* ---- (3) two relays at once ---- */

struct worker {
    struct ctx *c;
    struct txo_db *db;
    struct recorder *rec;
    struct txo_publisher *pub;
    struct txo_relay *relay;
    struct testrelay_thread run;
};

static void test_two_relays_concurrently(void **state)
{
    struct ctx *c = *state;
    const unsigned n = 5000;
    insert_events(&c->t, n, "PENDING");
    struct worker w[2];
    for (int i = 0; i < 2; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].c = c;
        w[i].db = testdb_connect(&c->t);
        w[i].pub = new_recorder(&w[i].rec);
        struct txo_relay_opts o = relay_opts(c, 50);
        o.relay_id = i == 0 ? "relay-a" : "relay-b";
        o.drain = true;
        w[i].relay = testrelay_new(w[i].db, w[i].pub, &o);
    }
    for (int i = 0; i < 2; i++)
        testrelay_thread_start(&w[i].run, w[i].relay);
    for (int i = 0; i < 2; i++)
        testrelay_thread_join(&w[i].run);
    /* A relay that found everything claimed by the other may stop early; drain the rest. */
    testrelay_drain(w[0].relay);

    struct recorder *recs[2] = {w[0].rec, w[1].rec};
    assert_each_once(recs, 2, n);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED' "
                                           "AND locked_by IS NULL"),
                     n);
    for (int i = 0; i < 2; i++) {
        struct txo_relay_stats st;
        txo_relay_get_stats(w[i].relay, &st);
        assert_int_equal(st.fenced + st.reclaimed + st.failed_attempts, 0);
        print_message("relay %d (%s) published %llu\n", i, txo_claim_strategy_name(c->v.claim),
                      (unsigned long long)st.published);
        txo_relay_free(w[i].relay);
        txo_publisher_free(w[i].pub);
        txo_db_close(w[i].db);
    }
}

/* ---- (4) lease expiry: another relay republishes, the first one's mark is fenced ---- */

struct lease_test {
    struct testdb *t;
    struct txo_db *other_conn;
    struct txo_relay *relay_b;
    size_t b_claimed;
};

static void expire_and_steal(struct recorder *rec, const struct txo_outbox_message *msgs, size_t n)
{
    (void)msgs;
    (void)n;
    struct lease_test *lt = rec->hook_arg;
    if (rec->calls != 1)
        return;
    /* A hangs past its hold on the shards (and its event leases): B takes the shards over,
     * returns A's batch to PENDING and publishes it. */
    testdb_exec(lt->other_conn, "UPDATE outbox_events SET locked_until = NOW(6) - INTERVAL 1 "
                                "SECOND WHERE status = 'PROCESSING'");
    testdb_exec(lt->other_conn, "UPDATE outbox_shards SET lease_until = NOW(6) - INTERVAL 1 "
                                "SECOND WHERE owner LIKE 'relay-a:%'");
    testdb_exec(lt->other_conn, "UPDATE outbox_relays SET seen_until = NOW(6) - INTERVAL 1 "
                                "SECOND WHERE member LIKE 'relay-a:%'");
    struct txo_error err;
    txo_error_init(&err);
    if (txo_relay_rebalance(lt->relay_b, &err) < 0)
        fail_msg("rebalance: %s", err.msg);
    lt->b_claimed = testrelay_run_once(lt->relay_b);
}

static void test_lease_expiry_fenced_mark(void **state)
{
    struct ctx *c = *state;
    const unsigned n = 10;
    insert_events(&c->t, n, "PENDING");

    struct lease_test lt = {.t = &c->t};
    lt.other_conn = testdb_connect(&c->t);
    struct txo_db *db_b = testdb_connect(&c->t);
    struct recorder *rec_a, *rec_b;
    struct txo_publisher *pub_a = new_recorder(&rec_a);
    struct txo_publisher *pub_b = new_recorder(&rec_b);
    struct txo_relay_opts oa = relay_opts(c, n);
    oa.relay_id = "relay-a";
    struct txo_relay_opts ob = relay_opts(c, n);
    ob.relay_id = "relay-b";
    struct txo_relay *a = testrelay_new(c->t.db, pub_a, &oa);
    lt.relay_b = testrelay_new(db_b, pub_b, &ob);
    rec_a->hook = expire_and_steal;
    rec_a->hook_arg = &lt;

    assert_int_equal(testrelay_run_once(a), n);
    assert_int_equal(lt.b_claimed, n);

    struct txo_relay_stats sa, sb;
    txo_relay_get_stats(a, &sa);
    txo_relay_get_stats(lt.relay_b, &sb);
    assert_int_equal(sb.reclaimed, n);
    assert_int_equal(sb.published, n);
    assert_int_equal(sa.fenced, n);
    assert_int_equal(sa.published, 0);

    /* Published twice overall (at least once), nothing lost, final state by B. */
    struct recorder *recs[1] = {rec_a};
    assert_each_once(recs, 1, n);
    recs[0] = rec_b;
    assert_each_once(recs, 1, n);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED' "
                                           "AND locked_by IS NULL AND published_at IS NOT NULL"),
                     n);
    assert_int_equal(testrelay_run_once(a), 0);

    txo_relay_free(a);
    txo_relay_free(lt.relay_b);
    txo_publisher_free(pub_a);
    txo_publisher_free(pub_b);
    txo_db_close(db_b);
    txo_db_close(lt.other_conn);
}

/* ---- (5) the claim walks idx_outbox_due ---- */

/* EXPLAIN sql must show want_key as the key (exact, and then no filesort), or among the keys (a
 * MariaDB rowid filter shows "access_key|filter_key"), and examine at most max_rows rows. */
static void assert_explain_key(struct testdb *t, const char *sql, const struct txo_param *params,
                               size_t n, const char *want_key, bool exact, int64_t max_rows)
{
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_query(t->db, sql, params, n, &rows, &err) < 0)
        fail_msg("%s: %s", sql, err.msg);
    assert_true(txo_rows_count(rows) >= 1);
    /* EXPLAIN columns: id select_type table type possible_keys key key_len ref rows Extra */
    const char *key = txo_rows_str(rows, 0, 5, NULL);
    int64_t examined = txo_rows_i64(rows, 0, 8);
    print_message("%.60s...: key=%s rows=%lld extra=%s\n", sql + 8, key ? key : "NULL",
                  (long long)examined, txo_rows_str(rows, 0, 9, NULL));
    if (key == NULL || (exact ? strcmp(key, want_key) != 0 : strstr(key, want_key) == NULL))
        fail_msg("%s uses key %s, want %s", sql, key ? key : "NULL", want_key);
    const char *extra = txo_rows_str(rows, 0, 9, NULL);
    if (exact && extra != NULL && strstr(extra, "filesort") != NULL)
        fail_msg("%s sorts the rows it reads (%s): it must walk %s in order", sql, extra, want_key);
    if (examined > max_rows)
        fail_msg("%s examines %lld rows, want <= %lld", sql, (long long)examined,
                 (long long)max_rows);
    txo_rows_free(rows);
}

/* EXPLAIN sql must show a DEPENDENT SUBQUERY row that reads want_key by want_type (the ordered
 * claims' probe of outbox_parked for each candidate's aggregate). */
static void assert_explain_subquery_key(struct testdb *t, const char *sql,
                                        const struct txo_param *params, size_t n,
                                        const char *want_key, const char *want_type)
{
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_query(t->db, sql, params, n, &rows, &err) < 0)
        fail_msg("%s: %s", sql, err.msg);
    bool found = false;
    for (size_t i = 0; i < txo_rows_count(rows); i++) {
        const char *select_type = txo_rows_str(rows, i, 1, NULL);
        const char *type = txo_rows_str(rows, i, 3, NULL);
        const char *key = txo_rows_str(rows, i, 5, NULL);
        if (select_type == NULL || strcmp(select_type, "DEPENDENT SUBQUERY") != 0)
            continue;
        print_message("  subquery: type=%s key=%s\n", type ? type : "NULL", key ? key : "NULL");
        if (key == NULL || strcmp(key, want_key) != 0 || type == NULL ||
            strcmp(type, want_type) != 0)
            fail_msg("%s: its subquery reads %s (%s), want %s by %s", sql, key ? key : "NULL",
                     type ? type : "NULL", want_key, want_type);
        found = true;
    }
    if (!found)
        fail_msg("%s: EXPLAIN shows no dependent subquery", sql);
    txo_rows_free(rows);
}

/*
 * The claims: idx_outbox_due in order for the candidates, from the start and from the cursor, and
 * for the ordered ones one primary key probe of outbox_parked per candidate.
 */
static void assert_claims_plans(struct testdb *t, int64_t max_rows)
{
    struct txo_param limit = txo_p_i64(500);
    struct txo_param ul[] = {txo_p_str("tok"), txo_p_i64(30), txo_p_i64(500)};
    struct txo_param sl_after[] = {txo_p_str("2026-01-01 00:00:00.000000"),
                                   txo_p_str("2026-01-01 00:00:00.000000"), txo_p_i64(5),
                                   txo_p_i64(500)};
    struct txo_param ul_after[] = {txo_p_str("tok"),
                                   txo_p_i64(30),
                                   txo_p_str("2026-01-01 00:00:00.000000"),
                                   txo_p_str("2026-01-01 00:00:00.000000"),
                                   txo_p_i64(5),
                                   txo_p_i64(500)};
    const struct {
        const char *sql;
        const struct txo_param *params;
        size_t n;
        bool ordered;
    } claims[] = {
        {"EXPLAIN " RELAY_SQL_CLAIM_SELECT_SKIP_LOCKED, &limit, 1, false},
        {"EXPLAIN " RELAY_SQL_CLAIM_UPDATE_LIMIT, ul, 3, false},
        {"EXPLAIN " RELAY_SQL_CLAIM_SELECT_SKIP_LOCKED_AFTER, sl_after, 4, false},
        {"EXPLAIN " RELAY_SQL_CLAIM_UPDATE_LIMIT_AFTER, ul_after, 6, false},
        {"EXPLAIN " RELAY_SQL_CLAIM_SELECT_ORDERED, &limit, 1, true},
        {"EXPLAIN " RELAY_SQL_CLAIM_SELECT_ORDERED_AFTER, sl_after, 4, true},
        {"EXPLAIN " RELAY_SQL_CLAIM_UPDATE_LIMIT_ORDERED, ul, 3, true},
        {"EXPLAIN " RELAY_SQL_CLAIM_UPDATE_LIMIT_ORDERED_AFTER, ul_after, 6, true},
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(claims); i++) {
        assert_explain_key(t, claims[i].sql, claims[i].params, claims[i].n, "idx_outbox_due", true,
                           max_rows);
        if (claims[i].ordered)
            assert_explain_subquery_key(t, claims[i].sql, claims[i].params, claims[i].n, "PRIMARY",
                                        "eq_ref");
    }
}

static void test_claim_uses_due_index(void **state)
{
    struct ctx *c = *state;
    insert_events_as(&c->t, 20000, "PUBLISHED", "old");
    testdb_exec(c->t.db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                         "payload, idempotency_key) SELECT 'order', seq, 'OrderCreated', '{}', "
                         "CONCAT('p:', seq) FROM seq_1_to_10");
    testdb_exec(c->t.db, "ANALYZE TABLE outbox_events");

    assert_claims_plans(&c->t, 100);
    /* The read-back by token and the reclaim walk the short PROCESSING range of the same index
     * (there is no index on locked_by or locked_until any more). */
    struct txo_param tok = txo_p_str("tok");
    assert_explain_key(&c->t, "EXPLAIN " RELAY_SQL_CLAIM_SELECT_BY_TOKEN, &tok, 1, "idx_outbox_due",
                       true, 100);
    struct txo_param tok_after[] = {txo_p_str("2026-01-01 00:00:00.000000"),
                                    txo_p_str("2026-01-01 00:00:00.000000"), txo_p_i64(5),
                                    txo_p_str("tok")};
    assert_explain_key(&c->t, "EXPLAIN " RELAY_SQL_CLAIM_SELECT_BY_TOKEN_AFTER, tok_after, 4,
                       "idx_outbox_due", true, 100);
    struct txo_param limit = txo_p_i64(500);
    assert_explain_key(&c->t, "EXPLAIN " RELAY_SQL_RECLAIM_EXPIRED, &limit, 1, "idx_outbox_due",
                       true, 100);

    /* The table's indexes: the primary key, the idempotency key (in outbox_keys when the table
     * is partitioned), idx_outbox_due (the one a claim and a mark change), idx_outbox_age
     * (status, created_at), which the lag metric reads (a claim and a mark move its entry too),
     * and idx_outbox_aggregate, whose columns never change after the insert. */
    bool partitioned = false;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_partition_is_enabled(c->t.db, TXO_PARTITION_OUTBOX, &partitioned, &err),
                     0);
    assert_int_equal(
        testdb_q(c->t.db, "SELECT COUNT(DISTINCT index_name) FROM information_schema.statistics "
                          "WHERE table_schema = DATABASE() AND table_name = 'outbox_events'"),
        partitioned ? 4 : 5);
    assert_int_equal(
        TESTDB_COUNT(c->t.db, "information_schema.statistics "
                              "WHERE table_schema = DATABASE() AND table_name = 'outbox_events' "
                              "AND index_name = 'idx_outbox_aggregate' AND column_name NOT IN "
                              "('aggregate_type', 'aggregate_id', 'id')"),
        0);
    assert_int_equal(
        TESTDB_COUNT(c->t.db, "information_schema.statistics "
                              "WHERE table_schema = DATABASE() AND table_name = 'outbox_events' "
                              "AND column_name IN ('locked_by', 'locked_until')"),
        0);

    struct drained d = drain_to_recorder(c, 500);
    assert_int_equal(d.rec->n, 10);

    /* A large backlog: the claims must still walk the index in order, not sort the backlog. */
    insert_events_as(&c->t, 20000, "PENDING", "backlog");
    testdb_exec(c->t.db, "ANALYZE TABLE outbox_events");
    assert_claims_plans(&c->t, INT64_MAX);
    assert_string_equal(d.rec->keys[0], "p:1");
    assert_string_equal(d.rec->keys[9], "p:10");
    drained_release(&d);
}

/* ---- (5b) the claim cursor does not starve rows committed behind it ---- */

struct late_commit {
    struct testdb *t;
    struct txo_db *conn;
    int64_t hold_ms;
};

/* Inserts the late event, due an hour ago (as if its default next_attempt_at had been taken
 * when a long transaction started), and keeps the transaction open hold_ms before COMMIT. */
static int insert_late_and_hold(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct late_commit *lc = arg;
    int rc = txo_tx_exec(tx,
                         "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                         "payload, idempotency_key, next_attempt_at) VALUES ('order', 0, "
                         "'OrderCreated', '{}', 'late', NOW(6) - INTERVAL 1 HOUR)",
                         NULL, 0, NULL, err);
    if (rc == 0)
        txo_sleep_ms(lc->hold_ms);
    return rc;
}

static void test_late_commit_behind_cursor(void **state)
{
    struct ctx *c = *state;
    /* A backlog that takes seconds in batches of 5, so the relay claims at its cursor the
     * whole time (a batch is always full) and only the periodic rescan can find the late row. */
    const unsigned backlog = 50000;
    insert_events(&c->t, backlog, "PENDING");

    struct worker w;
    memset(&w, 0, sizeof(w));
    w.c = c;
    w.db = testdb_connect(&c->t);
    w.pub = new_recorder(&w.rec);
    struct txo_relay_opts o = relay_opts(c, 5);
    w.relay = testrelay_new(w.db, w.pub, &o);
    testrelay_thread_start(&w.run, w.relay);

    /* The relay is running and its cursor is past where the late row will sit. */
    int64_t deadline = txo_monotonic_ms() + 20000;
    while (TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED'") < 100 &&
           txo_monotonic_ms() < deadline)
        txo_sleep_ms(5);

    struct late_commit lc = {.t = &c->t, .conn = testdb_connect(&c->t), .hold_ms = 300};
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_transact(lc.conn, TXO_ISO_READ_COMMITTED, insert_late_and_hold, &lc, &err) < 0)
        fail_msg("late insert: %s", err.msg);
    int64_t committed = txo_monotonic_ms();

    int64_t published_after = -1;
    while (txo_monotonic_ms() - committed < 5000) {
        if (TESTDB_COUNT(c->t.db, "outbox_events WHERE idempotency_key = 'late' "
                                  "AND status = 'PUBLISHED'") == 1) {
            published_after = txo_monotonic_ms() - committed;
            break;
        }
        txo_sleep_ms(5);
    }
    int64_t left = TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PENDING'");
    txo_relay_stop(w.relay);
    testrelay_thread_join(&w.run);
    print_message("late row published %lld ms after its commit, %lld backlog rows still pending\n",
                  (long long)published_after, (long long)left);
    if (published_after < 0)
        fail_msg("the row committed behind the claim cursor was not published within 5 s");
    /* Found by the rescan (at least once per second), not by the end of the backlog. */
    assert_true(published_after <= 2000);
    assert_true(left > 0);

    size_t late = 0;
    for (size_t i = 0; i < w.rec->n; i++)
        late += strcmp(w.rec->keys[i], "late") == 0;
    assert_int_equal(late, 1);
    txo_relay_free(w.relay);
    txo_publisher_free(w.pub);
    txo_db_close(w.db);
    txo_db_close(lc.conn);
}

/* ---- (6) stop mid-run finishes the batch in progress ---- */

static void stop_on_second_call(struct recorder *rec, const struct txo_outbox_message *msgs,
                                size_t n)
{
    (void)msgs;
    (void)n;
    if (rec->calls == 2)
        txo_relay_stop(rec->hook_arg);
}

static void test_stop_finishes_batch(void **state)
{
    struct ctx *c = *state;
    insert_events(&c->t, 50, "PENDING");
    struct recorder *rec;
    struct txo_publisher *pub = new_recorder(&rec);
    struct txo_relay_opts o = relay_opts(c, 10);
    struct txo_relay *r = testrelay_new(c->t.db, pub, &o); /* not drain: only stop ends it */
    rec->hook = stop_on_second_call;
    rec->hook_arg = r;
    testrelay_drain(r);
    assert_int_equal(rec->n, 20);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED' "
                                           "AND id <= 20"),
                     20);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PENDING' "
                                           "AND id > 20 AND locked_by IS NULL"),
                     30);
    struct txo_relay_stats st;
    txo_relay_get_stats(r, &st);
    assert_int_equal(st.batches, 2);
    txo_relay_free(r);
    txo_publisher_free(pub);
}

/* ---- lock token and options ---- */

struct token_probe {
    struct txo_db *conn;
    char *locked_by;
};

static void read_token(struct recorder *rec, const struct txo_outbox_message *msgs, size_t n)
{
    (void)n;
    struct token_probe *p = rec->hook_arg;
    struct txo_param id = txo_p_i64(msgs[0].id);
    txo_free(p->locked_by);
    p->locked_by = testdb_str(p->conn, "SELECT locked_by FROM outbox_events WHERE id = ?", &id, 1);
}

static void test_lock_token_and_opts(void **state)
{
    struct ctx *c = *state;
    insert_events(&c->t, 2, "PENDING");
    struct recorder *rec;
    struct txo_publisher *pub = new_recorder(&rec);
    struct txo_error err;
    txo_error_init(&err);

    struct txo_relay_opts o = relay_opts(c, 1);
    struct txo_relay *bad = NULL;
    unsigned bad_batch[] = {0, 10001};
    for (size_t i = 0; i < 2; i++) {
        o.batch_size = bad_batch[i];
        assert_int_equal(txo_relay_new(c->t.db, pub, &o, &bad, &err), TXO_EINVAL);
    }
    o = relay_opts(c, 1);
    o.lease_s = 0;
    assert_int_equal(txo_relay_new(c->t.db, pub, &o, &bad, &err), TXO_EINVAL);
    o = relay_opts(c, 1);
    o.max_attempts = 0;
    assert_int_equal(txo_relay_new(c->t.db, pub, &o, &bad, &err), TXO_EINVAL);
    assert_null(bad);

    char long_id[301];
    memset(long_id, 'x', 300);
    long_id[300] = '\0';
    o = relay_opts(c, 1);
    o.relay_id = long_id;
    struct token_probe probe = {.conn = testdb_connect(&c->t)};
    rec->hook = read_token;
    rec->hook_arg = &probe;
    struct txo_relay *r = testrelay_new(c->t.db, pub, &o);
    assert_int_equal(testrelay_run_once(r), 1);
    assert_non_null(probe.locked_by);
    char *first = txo_strdup(probe.locked_by);
    assert_true(strlen(first) <= 128);
    assert_int_equal(strncmp(first, "xxxxxxxx", 8), 0);
    assert_int_equal(strlen(strrchr(first, ':') + 1), 36); /* the uuid */
    assert_int_equal(testrelay_run_once(r), 1);
    assert_string_not_equal(first, probe.locked_by); /* a fresh token per claim */

    /* A multibyte relay id is cut between characters, never inside one (MariaDB refuses
     * half a character with error 1366 and the relay would stop). */
    char utf8_id[301];
    for (size_t i = 0; i < 150; i++)
        memcpy(utf8_id + 2 * i, "\xc3\xa9", 2);
    utf8_id[300] = '\0';
    txo_relay_free(r);
    o.relay_id = utf8_id;
    r = testrelay_new(c->t.db, pub, &o);
    testdb_exec(c->t.db, "UPDATE outbox_events SET status = 'PENDING'");
    assert_int_equal(testrelay_run_once(r), 1);
    size_t id_bytes = (size_t)(strrchr(probe.locked_by, ':') - probe.locked_by);
    assert_true(id_bytes > 0 && id_bytes % 2 == 0);
    assert_memory_equal(probe.locked_by, utf8_id, id_bytes);

    /* Default relay id: hostname:pid. */
    txo_relay_free(r);
    o.relay_id = NULL;
    r = testrelay_new(c->t.db, pub, &o);
    testdb_exec(c->t.db, "UPDATE outbox_events SET status = 'PENDING'");
    assert_int_equal(testrelay_run_once(r), 1);
    char pid[32];
    snprintf(pid, sizeof(pid), ":%ld:", (long)getpid());
    assert_non_null(strstr(probe.locked_by, pid));

    txo_free(first);
    txo_free(probe.locked_by);
    txo_db_close(probe.conn);
    txo_relay_free(r);
    txo_publisher_free(pub);
}

/* ---- claim mode transaction ---- */

struct held_probe {
    struct ctx *c;
    struct txo_db *conn;     /* another session */
    struct txo_relay *other; /* another relay, on conn */
    struct recorder *other_rec;
    int64_t pending, processing, locked_by, lockable;
    size_t other_claimed;
};

/* While the relay publishes its held batch: what another session and another relay see. */
static void look_from_outside(struct recorder *rec, const struct txo_outbox_message *msgs, size_t n)
{
    struct held_probe *p = rec->hook_arg;
    if (rec->calls != 2) /* the first batch after start is leased */
        return;
    struct txo_param first = txo_p_i64(msgs[0].id), last = txo_p_i64(msgs[n - 1].id);
    struct txo_param range[] = {first, last};
    p->pending = testdb_i64(p->conn,
                            "SELECT COUNT(*) FROM outbox_events WHERE id BETWEEN ? AND ? "
                            "AND status = 'PENDING'",
                            range, 2);
    p->locked_by = testdb_i64(p->conn,
                              "SELECT COUNT(*) FROM outbox_events WHERE id BETWEEN ? AND ? "
                              "AND locked_by IS NOT NULL",
                              range, 2);
    p->processing = testdb_i64(
        p->conn, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PROCESSING'", NULL, 0);
    /* Locked: SKIP LOCKED from another session returns none of the batch. */
    p->lockable = testdb_i64(p->conn,
                             "SELECT COUNT(*) FROM (SELECT id FROM outbox_events WHERE id "
                             "BETWEEN ? AND ? FOR UPDATE SKIP LOCKED) t",
                             range, 2);
    p->other_claimed = testrelay_run_once(p->other);
}

static void test_held_batch_is_locked_and_pending(void **state)
{
    struct ctx *c = *state;
    insert_events(&c->t, 30, "PENDING");
    struct recorder *rec;
    struct txo_publisher *pub = new_recorder(&rec);
    struct held_probe probe = {.c = c, .conn = testdb_connect(&c->t)};
    struct txo_publisher *other_pub = new_recorder(&probe.other_rec);
    struct txo_relay_opts o = relay_opts(c, 10);
    o.relay_id = "other";
    o.mode = TXO_RELAY_CLAIM_LEASE;
    o.ordering = TXO_RELAY_ORDER_NONE; /* claims what is not locked, whatever the shards */
    probe.other = testrelay_new(probe.conn, other_pub, &o);
    rec->hook = look_from_outside;
    rec->hook_arg = &probe;
    o = relay_opts(c, 10);
    /* The row locks of a held batch are what fence unordered relays from each other (an
     * ordered relay's fence is its shards: tests/integration/test_relay_order.c). */
    o.ordering = TXO_RELAY_ORDER_NONE;
    struct txo_relay *r = testrelay_new(c->t.db, pub, &o);

    assert_int_equal(testrelay_run_once(r), 10); /* leased: ids 1..10 */
    assert_int_equal(testrelay_run_once(r),
                     10); /* held: 11..20, while the other relay takes 21..30 */
    assert_int_equal(probe.pending, 10);
    assert_int_equal(probe.locked_by, 0);
    assert_int_equal(probe.processing, 0);
    assert_int_equal(probe.lockable, 0);
    assert_int_equal(probe.other_claimed, 10);
    assert_int_equal(probe.other_rec->n, 10);
    for (size_t i = 0; i < probe.other_rec->n; i++)
        assert_true(probe.other_rec->ids[i] > 20);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED' "
                                           "AND published_at IS NOT NULL AND locked_by IS NULL"),
                     30);
    struct recorder *recs[2] = {rec, probe.other_rec};
    assert_each_once(recs, 2, 30);
    txo_relay_free(probe.other);
    txo_relay_free(r);
    txo_publisher_free(other_pub);
    txo_publisher_free(pub);
    txo_db_close(probe.conn);
}

static const struct txo_publisher_ops quick_ops = {
    .name = "quick",
    .publish_batch = rec_publish,
    .destroy = rec_destroy,
    .flags = TXO_PUBLISHER_QUICK,
};

static void test_claim_mode_auto(void **state)
{
    struct ctx *c = *state;
    struct recorder *slow_rec, *quick_rec;
    struct txo_publisher *slow = new_recorder(&slow_rec);
    quick_rec = txo_calloc(1, sizeof(*quick_rec));
    struct txo_publisher *quick = NULL;
    assert_int_equal(txo_publisher_new(&quick_ops, quick_rec, &quick, NULL), 0);
    struct txo_relay_opts o = relay_opts(c, 10);
    o.mode = TXO_RELAY_CLAIM_AUTO;
    o.claim = TXO_CLAIM_SKIP_LOCKED;
    struct txo_relay *r = testrelay_new(c->t.db, slow, &o);
    assert_int_equal(txo_relay_claim_mode(r), TXO_RELAY_CLAIM_LEASE);
    txo_relay_free(r);
    r = testrelay_new(c->t.db, quick, &o);
    assert_int_equal(txo_relay_claim_mode(r), TXO_RELAY_CLAIM_TRANSACTION);
    txo_relay_free(r);
    o.claim = TXO_CLAIM_UPDATE_LIMIT; /* no held claim without SKIP LOCKED */
    r = testrelay_new(c->t.db, quick, &o);
    assert_int_equal(txo_relay_claim_mode(r), TXO_RELAY_CLAIM_LEASE);
    txo_relay_free(r);
    o.mode = TXO_RELAY_CLAIM_TRANSACTION;
    struct txo_error err;
    txo_error_init(&err);
    r = NULL;
    assert_int_equal(txo_relay_new(c->t.db, quick, &o, &r, &err), TXO_EUNSUPPORTED);
    assert_null(r);
    assert_non_null(strstr(err.msg, "claim mode transaction"));
    o.mode = (enum txo_relay_claim_mode)7;
    assert_int_equal(txo_relay_new(c->t.db, quick, &o, &r, &err), TXO_EINVAL);
    enum txo_relay_claim_mode m;
    assert_int_equal(txo_relay_claim_mode_parse("transaction", &m), 0);
    assert_int_equal(m, TXO_RELAY_CLAIM_TRANSACTION);
    assert_int_equal(txo_relay_claim_mode_parse("held", &m), TXO_EINVAL);
    assert_string_equal(txo_relay_claim_mode_name(TXO_RELAY_CLAIM_LEASE), "lease");
    txo_publisher_free(quick);
    txo_publisher_free(slow);
}

#define ONE(fn, v) cmocka_unit_test_prestate_setup_teardown(fn, setup, testdb_free_state, &v)
#define BOTH(fn)   ONE(fn, testrelay_skip_locked), ONE(fn, testrelay_update_limit)
#define ALL(fn)    BOTH(fn), ONE(fn, testrelay_held)

int main(void)
{
    const struct CMUnitTest tests[] = {
        ALL(test_drain_exactly_once_in_order),
        ALL(test_trace_context_reaches_the_publisher),
        ALL(test_failure_backoff_and_last_error),
        ALL(test_dead_letter_then_recovery),
        ALL(test_nul_in_a_text_column_is_dead_lettered),
        ALL(test_batch_is_marked_with_a_few_statements),
        ALL(test_two_relays_concurrently),
        BOTH(test_lease_expiry_fenced_mark),
        BOTH(test_claim_uses_due_index),
        ALL(test_late_commit_behind_cursor),
        ALL(test_stop_finishes_batch),
        BOTH(test_lock_token_and_opts),
        ONE(test_held_batch_is_locked_and_pending, testrelay_held),
        ONE(test_claim_mode_auto, testrelay_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
