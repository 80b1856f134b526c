/*
 * Publishing to an EventSink server that fails, through the relay (run_once in this process),
 * MariaDB and the independent Python server (tests/support/testgrpc.h). What the server took is
 * read from its own records.
 *
 *   1. Server killed (SIGKILL) after the first batch: every later cycle fails fast
 *      (UNAVAILABLE, no hang), its rows go back to PENDING with attempts >= 1, the gRPC error in
 *      last_error and next_attempt_at in the future; restarted on the same port, the channel
 *      reconnects by itself and every row is delivered. The server took each key exactly once:
 *      a call to a dead server never reached it.
 *   2. Per-event and per-call failures in one run: a permanent rejection of one event makes it
 *      FAILED with a dead letter carrying the server's reason at once, while the rest of its
 *      batch is PUBLISHED; an UNAVAILABLE answer and a deadline that passes before the server
 *      did anything send their batches back to PENDING, and the retries deliver them
 *      (attempt 2 as the server saw it), each once.
 *   3. A deadline that passes AFTER the server took the batch: the relay cannot know, keeps the
 *      rows PENDING and publishes them again. The server then holds those events twice, with
 *      attempts 1 and 2, and nothing else twice: at least once, and exactly the duplicates the
 *      consumer de-duplicates on the idempotency key.
 *   4. `txo relay --publisher grpc` SIGKILLed at crash point relay.after_publish:1 (the second
 *      batch was taken by the server, not marked): the next relay, once the lease expired,
 *      publishes that batch again and drains the rest. The server holds every event, the
 *      crashed batch twice and nothing else twice. And `txo worker --broker grpc` refuses to
 *      start (exit 2): gRPC has no consuming side.
 */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testrun.h"
#include "testdb.h"
#include "testgrpc.h"
#include "testoutbox.h"
#include "testproc.h"
#include "testrelay.h"
#include "txo/grpc.h"

#define BATCH       20
#define DEADLINE_MS 500

/* The rows of a batch whose call's deadline passed, back to PENDING after one attempt. */
#define DEADLINE_PASSED_SQL                                                                        \
    "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' AND attempts = 1 AND "            \
    "last_error LIKE 'TXO_ETIMEOUT: grpc publisher: %DEADLINE_EXCEEDED%'"

struct ctx {
    struct testdb t;
    struct testgrpc g;
};

TESTDB_SERVER_FIXTURE(ctx, "grpc_outage", 0, g, testgrpc_start, testgrpc_cleanup)

static struct txo_publisher *new_publisher(struct ctx *c)
{
    struct txo_grpc_opts o;
    txo_grpc_opts_init(&o);
    o.target = c->g.target;
    o.deadline_ms = DEADLINE_MS;
    o.reconnect_max_ms = 200;
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_publisher_grpc_new(&o, NULL, &pub, &err) < 0)
        fail_msg("txo_publisher_grpc_new: %s", err.msg);
    return pub;
}

static struct txo_relay *new_relay(struct ctx *c, struct txo_publisher *pub)
{
    struct txo_relay_opts ro;
    /* The recovery loop retries often while the channel reconnects. */
    testrelay_outage_opts(&ro, "grpc-outage", BATCH);
    ro.breaker_open_ms = 200; /* the breaker opens during the outage: probe soon after */
    return testrelay_new(c->t.db, pub, &ro);
}

static int cmp_key(const void *a, const void *b)
{
    const struct testgrpc_event *x = a, *y = b;
    int d = strcmp(x->idempotency_key, y->idempotency_key);
    return d != 0 ? d : (x->attempt > y->attempt) - (x->attempt < y->attempt);
}

/* The server's records sorted by key; fails unless every key is one of rows 1..n_rows. */
static size_t recorded(struct ctx *c, struct testgrpc_event **ev)
{
    size_t n = testgrpc_events(&c->g, ev);
    qsort(*ev, n, sizeof(**ev), cmp_key);
    for (size_t k = 0; k < n; k++) {
        struct txo_param p = txo_p_str((*ev)[k].idempotency_key);
        assert_int_equal(testdb_i64(c->t.db,
                                    "SELECT COUNT(*) FROM outbox_events WHERE idempotency_key = ?",
                                    &p, 1),
                         1);
    }
    return n;
}

static size_t count_duplicates(const struct testgrpc_event *ev, size_t n)
{
    size_t d = 0;
    for (size_t k = 1; k < n; k++)
        d += strcmp(ev[k - 1].idempotency_key, ev[k].idempotency_key) == 0;
    return d;
}

/* n orders in the outbox, *pub a publisher to the server, and a relay over both. */
static struct txo_relay *relay_over_orders(struct ctx *c, unsigned n, struct txo_publisher **pub)
{
    testoutbox_append_orders(c->t.db, n);
    *pub = new_publisher(c);
    return new_relay(c, *pub);
}

/* Tells the server control, runs one cycle of a full batch, and expects pending_sql to count
 * that batch: the rows the server's answer sent back. */
static void batch_left_pending(struct ctx *c, struct txo_relay *r, const char *control,
                               const char *pending_sql)
{
    testgrpc_control(&c->g, control);
    assert_int_equal(testrelay_run_once(r), BATCH);
    assert_int_equal(testdb_q(c->t.db, pending_sql), BATCH);
}

static void test_server_killed_then_back(void **state)
{
    struct ctx *c = *state;
    const unsigned n = 120;
    struct txo_publisher *pub = NULL;
    struct testrelay_outage o = {
        .db = c->t.db,
        .relay = relay_over_orders(c, n, &pub),
        .n_events = n,
        .batch = BATCH,
        .timeout_ms = DEADLINE_MS,
        .slack_ms = 1000,
        .pending_sql = "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' "
                       "AND attempts >= 1 AND locked_by IS NULL AND published_at IS NULL "
                       "AND last_error LIKE 'TXO_EUNAVAILABLE: grpc publisher: %UNAVAILABLE%' "
                       "AND next_attempt_at > NOW(6) + INTERVAL 20 SECOND",
    };
    testrelay_outage_up(&o);
    testchild_server_kill(&c->g.srv);
    testrelay_outage_down(&o);
    int64_t t_restart = txo_monotonic_ms();
    testchild_server_restart(&c->g.srv);
    print_message("server restarted in %lld ms\n", (long long)(txo_monotonic_ms() - t_restart));
    testrelay_outage_back(&o, 20, 0);

    struct testgrpc_event *ev = NULL;
    size_t got = recorded(c, &ev);
    assert_int_equal(got, n);
    assert_int_equal(count_duplicates(ev, got), 0);
    testgrpc_free_events(ev, got);
    txo_relay_free(o.relay);
    txo_publisher_free(pub);
}

static void test_rejections_and_retries(void **state)
{
    struct ctx *c = *state;
    const unsigned n = 3 * BATCH;
    struct txo_publisher *pub = NULL;
    struct txo_relay *r = relay_over_orders(c, n, &pub);

    /* Batch 1: one event refused for good, dead-lettered at once with the reason. */
    testgrpc_control(&c->g, "\"reject_permanent\": [\"order:7:created\"]");
    assert_int_equal(testrelay_run_once(r), BATCH);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED'"), BATCH - 1);
    assert_int_equal(TESTDB_COUNT(c->t.db,
                                  "outbox_events WHERE status = 'FAILED' "
                                  "AND idempotency_key = 'order:7:created' AND last_error = "
                                  "'TXO_EBUSINESS: grpc publisher: rejected permanently: unknown "
                                  "product in order:7:created'"),
                     1);
    assert_int_equal(
        TESTDB_COUNT(c->t.db,
                     "dead_letter_events d JOIN outbox_events o "
                     "ON o.id = d.source_event_id WHERE o.idempotency_key = 'order:7:created' "
                     "AND d.error LIKE '%unknown product in order:7:created%'"),
        1);

    /* Batch 2: UNAVAILABLE; batch 3: the deadline passes before the server does anything. */
    batch_left_pending(c, r, "\"status\": \"UNAVAILABLE\", \"status_calls\": 1",
                       "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' AND "
                       "attempts = 1 AND last_error LIKE 'TXO_EUNAVAILABLE: grpc publisher: "
                       "%UNAVAILABLE: told to answer UNAVAILABLE' AND next_attempt_at > "
                       "NOW(6) + INTERVAL 20 SECOND");
    batch_left_pending(c, r, "\"sleep_ms\": 1500, \"sleep_calls\": 1", DEADLINE_PASSED_SQL);
    txo_sleep_ms(1200); /* the sleeping handler finds the call gone and records nothing */

    testgrpc_control(&c->g, "");
    testrelay_retry_pending(c->t.db, r, 30000, 20, 0);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED'"), n - 1);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED' AND "
                                           "attempts = 1"),
                     2 * BATCH);
    assert_int_equal(TESTDB_COUNT(c->t.db, "dead_letter_events"), 1);

    struct testgrpc_event *ev = NULL;
    size_t got = recorded(c, &ev);
    assert_int_equal(got, n - 1);
    assert_int_equal(count_duplicates(ev, got), 0);
    size_t second_attempts = 0;
    for (size_t k = 0; k < got; k++) {
        assert_string_not_equal(ev[k].idempotency_key, "order:7:created");
        second_attempts += ev[k].attempt == 2;
    }
    assert_int_equal(second_attempts, 2 * BATCH);
    assert_int_equal(testgrpc_count_calls(&c->g, "CLIENT_GONE"), 1);
    testgrpc_free_events(ev, got);
    txo_relay_free(r);
    txo_publisher_free(pub);
}

static void test_deadline_after_processing_republished(void **state)
{
    struct ctx *c = *state;
    const unsigned n = 2 * BATCH;
    struct txo_publisher *pub = NULL;
    struct txo_relay *r = relay_over_orders(c, n, &pub);

    batch_left_pending(c, r,
                       "\"sleep_ms\": 1500, \"sleep_calls\": 1, \"process_before_sleep\": true",
                       DEADLINE_PASSED_SQL);
    testgrpc_control(&c->g, "");
    testrelay_retry_pending(c->t.db, r, 30000, 20, 0);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED'"), n);

    /* The timed-out batch is there twice (attempt 1, taken before the deadline passed, and
     * attempt 2, the relay's retry), everything else once. */
    struct testgrpc_event *ev = NULL;
    size_t got = recorded(c, &ev);
    assert_int_equal(got, n + BATCH);
    assert_int_equal(count_duplicates(ev, got), BATCH);
    for (size_t k = 1; k < got; k++) {
        if (strcmp(ev[k - 1].idempotency_key, ev[k].idempotency_key) == 0) {
            assert_int_equal(ev[k - 1].attempt, 1);
            assert_int_equal(ev[k].attempt, 2);
            assert_int_equal(ev[k - 1].id, ev[k].id);
            assert_int_equal(ev[k - 1].payload_len, ev[k].payload_len);
            assert_memory_equal(ev[k - 1].payload, ev[k].payload, ev[k].payload_len);
        }
    }
    testgrpc_free_events(ev, got);
    txo_relay_free(r);
    txo_publisher_free(pub);
}

static void run_relay(struct ctx *c, const char *tag, const char *crash_point, bool crash)
{
    const char *argv[] = {
        testproc_txo_bin(), "relay", "--publisher", "grpc", "--grpc-target", c->g.target, "--drain",
        "--batch-size",     "50",    "--lease",     "1",    "--shard-lease", "1000",      NULL};
    char crash_env[64];
    snprintf(crash_env, sizeof(crash_env), "TXO_CRASH_POINT=%s", crash_point);
    const char *env[] = {crash_env, NULL};
    struct testproc p;
    testproc_start(&p, tag, argv, crash ? env : NULL);
    if (!testproc_wait(&p, 30000)) {
        testproc_print_log(&p, tag);
        testproc_stop_hard(&p);
        fail_msg("%s did not finish within 30 s", tag);
    }
    bool as_expected = crash ? testproc_killed(&p) : testproc_exited_with(&p, 0);
    if (!as_expected) {
        testproc_print_log(&p, tag);
        fail_msg("%s: %s, status 0x%x", tag,
                 crash ? "should have died of SIGKILL at the crash point" : "should exit 0",
                 p.status);
    }
    testproc_remove_log(&p);
}

static void test_relay_killed_after_publish_republishes(void **state)
{
    struct ctx *c = *state;
    const unsigned n = 200;
    testoutbox_append_orders(c->t.db, n);
    testdb_export_env(&c->t);

    run_relay(c, "grpc_relay_crash", "relay.after_publish:1", true);
    struct testgrpc_event *ev = NULL;
    size_t got = recorded(c, &ev);
    assert_int_equal(got, 100); /* two batches reached the server */
    testgrpc_free_events(ev, got);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED'"), 50);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PROCESSING'"), 50);

    txo_sleep_ms(1500); /* past the 1 s lease */
    run_relay(c, "grpc_relay_after_crash", "", false);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED' "
                                           "AND locked_by IS NULL"),
                     n);
    got = recorded(c, &ev);
    assert_int_equal(got, n + 50);
    assert_int_equal(count_duplicates(ev, got), 50);
    /* The duplicates are exactly the crashed batch: the 50 rows that were PROCESSING. */
    for (size_t k = 1; k < got; k++) {
        if (strcmp(ev[k - 1].idempotency_key, ev[k].idempotency_key) != 0)
            continue;
        struct txo_param p = txo_p_str(ev[k].idempotency_key);
        assert_int_equal(testdb_i64(c->t.db,
                                    "SELECT lease_expiries FROM outbox_events WHERE "
                                    "idempotency_key = ?",
                                    &p, 1),
                         1);
    }
    testgrpc_free_events(ev, got);
}

static void test_worker_refuses_grpc(void **state)
{
    (void)state;
    const char *argv[] = {testproc_txo_bin(), "worker", "--broker", "grpc", NULL};
    char *out = NULL;
    int rc = testproc_run("grpc_worker", argv, 10000, &out);
    assert_int_equal(rc, 2);
    if (strstr(out, "\"grpc\"") == NULL || strstr(out, "without a consuming side") == NULL)
        fail_msg("txo worker --broker grpc said: %s", out);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_killed_then_back),
        cmocka_unit_test(test_rejections_and_retries),
        cmocka_unit_test(test_deadline_after_processing_republished),
        cmocka_unit_test(test_relay_killed_after_publish_republishes),
        cmocka_unit_test_setup(test_worker_refuses_grpc, testrun_no_fixture),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
}
