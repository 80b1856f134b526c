/*
 * Publishing to Redis Streams while the server is down or hangs, then back: MariaDB + a
 * private redis-server (AOF, appendfsync always) + the relay (run_once in this process)
 * publishing through the Redis publisher, N events.
 *
 *   1. The server is up: the first batch is published.
 *   2. The server goes away (SIGKILL; in the second test it hangs with SIGSTOP, connections
 *      open and nothing answered): every cycle returns within the command timeout (no hang; a
 *      hanging server costs exactly that timeout), publishes nothing, and the rows it claimed
 *      go back to PENDING with attempts >= 1, last_error set (TXO_EUNAVAILABLE "connection
 *      lost" for the batch that found the old connection dead, then "cannot connect"; or
 *      TXO_ETIMEOUT "no XADD reply") and next_attempt_at in the future (backoff).
 *   3. The server comes back on the same port and directory (AOF replayed; or SIGCONT): the
 *      publisher connects again on the next batch and the relay (backoff skipped by moving
 *      next_attempt_at to now) publishes the rest until every row is PUBLISHED.
 * Afterwards every event is in the stream. After a kill none is there twice (the server
 * refused the connection, nothing was sent). After a hang the XADDs that timed out were
 * applied when the server resumed and were published again by the relay: Redis has no
 * producer dedupe, so exactly those events are in the stream twice, which the consumer's inbox
 * absorbs; the test counts them.
 *
 * A permanent error: the stream key of one aggregate type holds a string (WRONGTYPE). Its
 * events are FAILED and dead-lettered at once with the server's reason; the others flow.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testoutbox.h"
#include "testrun.h"
#include "testdb.h"
#include "testredis.h"
#include "testrelay.h"
#include "txo/redis.h"

#define STREAM     "txo.events.order"
#define N_EVENTS   120
#define BATCH      20
#define TIMEOUT_MS 1000

struct ctx {
    struct testdb t;
    struct testredis redis;
};

TESTDB_SERVER_FIXTURE(ctx, "redis_outage", 0, redis, testredis_start, testredis_cleanup)

static struct txo_publisher *new_publisher(struct ctx *c)
{
    struct txo_redis_opts o;
    txo_redis_opts_init(&o);
    o.url = c->redis.url;
    o.timeout_ms = TIMEOUT_MS;
    o.connect_timeout_ms = 500;
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_publisher_redis_new(&o, NULL, &pub, &err) < 0)
        fail_msg("txo_publisher_redis_new: %s", err.msg);
    return pub;
}

static struct txo_relay *new_relay(struct ctx *c, struct txo_publisher *pub)
{
    struct txo_relay_opts ro;
    testrelay_outage_opts(&ro, "redis-outage-relay", BATCH);
    ro.breaker_failures = 0; /* the test looks at every cycle, not at the breaker */
    return testrelay_new(c->t.db, pub, &ro);
}

/* Keys in the stream: checks every event is there; returns how many are there twice. */
static size_t stream_duplicates(struct ctx *c, const char *stream, size_t n_events)
{
    char **keys = NULL;
    size_t n = testredis_stream_keys(&c->redis, stream, &keys);
    size_t dups = testoutbox_check_keys(c->t.db, keys, n,
                                        "SELECT COUNT(*) FROM outbox_events WHERE "
                                        "idempotency_key = ? AND status = 'PUBLISHED'");
    testredis_free_keys(keys, n);
    assert_int_equal(n - dups, n_events);
    return dups;
}

static void outage(struct ctx *c, bool hang)
{
    testoutbox_append(
        c->t.db, &(struct testoutbox_events){.aggregate_type = "order", .from = 1, .to = N_EVENTS});
    struct txo_publisher *pub = new_publisher(c);
    struct testrelay_outage o = {
        .db = c->t.db,
        .relay = new_relay(c, pub),
        .n_events = N_EVENTS,
        .batch = BATCH,
        .hang = hang,
        .timeout_ms = TIMEOUT_MS,
        .slack_ms = 1000,
        .dead_max_ms = 500,
        .pending_sql =
            hang ? "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' "
                   "AND attempts = 1 AND locked_by IS NULL AND published_at IS NULL "
                   "AND last_error LIKE "
                   "'TXO_ETIMEOUT: redis publisher: no XADD reply within 1000 ms%' "
                   "AND next_attempt_at > NOW(6) + INTERVAL 20 SECOND"
                 : "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' "
                   "AND attempts >= 1 AND locked_by IS NULL AND published_at IS NULL "
                   "AND (last_error LIKE 'TXO_EUNAVAILABLE: redis publisher: cannot connect%' "
                   "OR last_error LIKE 'TXO_EUNAVAILABLE: redis publisher: connection to % lost%') "
                   "AND next_attempt_at > NOW(6) + INTERVAL 20 SECOND",
    };
    testrelay_outage_up(&o);
    if (hang)
        testchild_server_pause(&c->redis.srv);
    else
        testchild_server_kill(&c->redis.srv);
    testrelay_outage_down(&o);
    if (hang)
        testchild_server_resume(&c->redis.srv);
    else
        testchild_server_restart(&c->redis.srv);
    testrelay_outage_back(&o, 0, 0);

    size_t dups = stream_duplicates(c, STREAM, N_EVENTS);
    print_message("%s: %zu events in the stream twice\n", hang ? "hang" : "kill", dups);
    /* Killed: nothing reached the server while down. Hung: the XADDs of the first timed-out
     * batch were applied on resume (the second batch found the connection dropped and went to
     * a fresh one, which the paused server accepted into its backlog but never read before
     * the timeout, so it was applied on resume too): both batches are there twice. */
    assert_int_equal(dups, hang ? 2 * BATCH : 0);
    assert_int_equal(testredis_xlen(&c->redis, STREAM), N_EVENTS + dups);

    txo_relay_free(o.relay);
    txo_publisher_free(pub);
}

static void test_server_killed_then_back(void **state)
{
    outage(*state, false);
}

static void test_server_hangs_then_resumes(void **state)
{
    outage(*state, true);
}

static void test_wrongtype_dead_lettered_at_once(void **state)
{
    struct ctx *c = *state;
    json_decref(
        testredis_cli(&c->redis, (const char *const[]){"SET", "txo.events.payment", "oops", NULL}));
    testoutbox_append(c->t.db,
                      &(struct testoutbox_events){.aggregate_type = "order", .from = 1, .to = 10});
    testoutbox_append(c->t.db,
                      &(struct testoutbox_events){.aggregate_type = "payment", .from = 1, .to = 5});
    struct txo_publisher *pub = new_publisher(c);
    struct txo_relay *r = new_relay(c, pub);
    int64_t ms = 0;
    assert_int_equal(testrelay_run_once_ms(r, &ms), 15);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED' "
                                           "AND aggregate_type = 'order'"),
                     10);
    assert_int_equal(
        TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'FAILED' "
                              "AND aggregate_type = 'payment' AND attempts = 1 "
                              "AND last_error LIKE 'TXO_ECONFIG: redis publisher: XADD refused: "
                              "WRONGTYPE%'"),
        5);
    assert_int_equal(TESTDB_COUNT(c->t.db, "dead_letter_events WHERE error LIKE "
                                           "'%WRONGTYPE%'"),
                     5);
    assert_int_equal(testredis_xlen(&c->redis, STREAM), 10);
    txo_relay_free(r);
    txo_publisher_free(pub);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_killed_then_back),
        cmocka_unit_test(test_server_hangs_then_resumes),
        cmocka_unit_test(test_wrongtype_dead_lettered_at_once),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
}
