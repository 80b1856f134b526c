/*
 * The order pipeline through Redis Streams with real processes: `txo serve`, `txo relay
 * --publisher redis`, `txo worker --broker redis` and `txo up --broker redis` against a
 * private MariaDB database and a private redis-server (AOF, appendfsync always), each test on
 * streams and a consumer group of its own.
 *
 *   - The worker dies between committing the effects of its first read of OrderCreated (one
 *     transaction for the read) and their XACK (crash point worker.after_consume): the entries
 *     stay pending; the restarted worker (a new consumer name) claims them after
 *     --redis-claim-idle, and the inbox drops the duplicates. Every order ends CONFIRMED once.
 *   - redis-server is SIGKILLed under `txo up` while orders come in: the API still answers,
 *     the events wait PENDING with backoff; restarted on its AOF, everything is delivered.
 *   - `txo relay` SIGKILLed after publishing its second batch and before committing it
 *     (relay.after_publish:1): the batch's rows roll back and are published again, so the
 *     stream holds those events twice (Redis has no producer dedupe); the worker confirms
 *     each order once and counts the duplicates in txo_inbox_duplicates_total.
 * What Redis stored is read with redis-cli (XRANGE, XINFO GROUPS).
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "testrun.h"
#include "testdb.h"
#include "testoutbox.h"
#include "testpipeline.h"
#include "testproc.h"
#include "testredis.h"

struct ctx {
    struct testdb t;
    struct testredis redis;
    struct testpipeline p;
    char tmpl[64];   /* --redis-stream-template */
    char stream[64]; /* the order stream */
    char group[64];  /* --redis-group */
};

static int setup(void **state)
{
    static unsigned seq;
    struct ctx *c = testdb_fixture_new(sizeof(*c), "pipeline_redis", TESTDB_NEW_EXPORT_ENV);
    testredis_start(&c->redis);
    testpipeline_init(&c->p, c->t.db);
    snprintf(c->tmpl, sizeof(c->tmpl), "pipe%ld_%u.{aggregate_type}", (long)getpid(), seq);
    snprintf(c->stream, sizeof(c->stream), "pipe%ld_%u.order", (long)getpid(), seq);
    snprintf(c->group, sizeof(c->group), "pipe-worker-%ld-%u", (long)getpid(), seq);
    seq++;
    struct testpipeline_args *a = testpipeline_broker(&c->p, "redis");
    testpipeline_args_addf(a, "--redis-url=%s", c->redis.url);
    testpipeline_args_addf(a, "--redis-stream-template=%s", c->tmpl);
    testpipeline_args_addf(a, "--redis-group=%s", c->group);
    testpipeline_args_add(a, "--redis-claim-idle=1000");
    testpipeline_args_add(a, "--redis-timeout=1000");
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    testpipeline_release(&c->p);
    testredis_cleanup(&c->redis);
    testdb_fixture_free(c);
    return 0;
}

/*
 * Every OrderCreated of the outbox is in the order stream, and nothing else than outbox
 * events; returns how many entries are there a second time.
 */
static size_t check_stream_matches_outbox(struct ctx *c)
{
    char **keys = NULL;
    size_t n = testredis_stream_keys(&c->redis, c->stream, &keys);
    for (size_t i = 0; i < n; i++)
        if (keys[i] == NULL)
            TESTPIPELINE_FAIL(&c->p, "entry %zu of %s has no idempotency_key", i, c->stream);
    size_t dups = testoutbox_check_keys(c->t.db, keys, n,
                                        "SELECT COUNT(*) FROM outbox_events WHERE "
                                        "idempotency_key = ? AND aggregate_type = 'order'");
    testredis_free_keys(keys, n);
    int64_t rows =
        testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE aggregate_type = 'order'");
    if ((int64_t)(n - dups) != rows)
        TESTPIPELINE_FAIL(&c->p, "stream %s holds %zu distinct events, the outbox %" PRId64,
                          c->stream, n - dups, rows);
    return dups;
}

/* The entries the workers' group was given and has not acknowledged (a testpipeline unacked). */
static int64_t group_pending(void *arg)
{
    struct ctx *c = arg;
    return testredis_group_pending(&c->redis, c->stream, c->group);
}

/* Waits until the workers' group has acknowledged everything it was given. */
static void wait_group_settled(struct ctx *c)
{
    testpipeline_wait_acked(&c->p, group_pending, c, 20000);
}

static const struct testpipeline_stock stock[] = {{"pen", 1000}};
static const char *const relay_args[] = {"--idle-sleep=50", "--batch-size=4", NULL};

/* ---- the worker dies between its commit and the XACK ---- */

#define ACK_CRASH_ORDERS 8

static void test_worker_crash_before_ack_redis(void **state)
{
    struct ctx *c = *state;
    testpipeline_set_initial_stock(&c->p, stock, TXO_ARRAY_LEN(stock));
    struct testpipeline_ack_crash ac = {.tag = "ackcrash",
                                        .n_orders = ACK_CRASH_ORDERS,
                                        .relay_args = relay_args,
                                        .unacked = group_pending,
                                        .arg = c};
    testpipeline_ack_crash(&c->p, &ac);
    double acked =
        testpipeline_metric(&c->p, ac.mport, "txo_redis_consumed_total{outcome=\"ack\"}");
    double claimed = testpipeline_metric(&c->p, ac.mport, "txo_redis_claimed_total");
    testpipeline_stop_clean(&c->p, ac.worker);
    testpipeline_stop_clean(&c->p, ac.relay);
    /* The 8 entries the dead worker read are claimed: 8 OrderCreated acked. */
    if (acked != ACK_CRASH_ORDERS || claimed < ACK_CRASH_ORDERS)
        TESTPIPELINE_FAIL(&c->p,
                          "txo_redis_consumed_total{outcome=\"ack\"} = %.0f (want %d), "
                          "txo_redis_claimed_total = %.0f (want >= %d)",
                          acked, ACK_CRASH_ORDERS, claimed, ACK_CRASH_ORDERS);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"),
                     ACK_CRASH_ORDERS);
    testpipeline_check_invariants(&c->p, stock, TXO_ARRAY_LEN(stock));
    assert_int_equal(check_stream_matches_outbox(c), 0);
    testpipeline_remove_logs(&c->p);
}

/* ---- redis-server SIGKILLed under `txo up` ---- */

#define OUTAGE_ORDERS 8

/* Short backoff, and no dead letter during the outage. */
static const char *const outage_args[] = {"--backoff-base=100", "--backoff-max=1000",
                                          "--max-attempts=1000", NULL};

static void test_broker_killed_end_to_end_redis(void **state)
{
    struct ctx *c = *state;
    testpipeline_set_initial_stock(&c->p, stock, TXO_ARRAY_LEN(stock));
    unsigned port;
    struct testproc *up = testpipeline_start_up(&c->p, "r_up", outage_args, &port);

    testpipeline_place_orders(&c->p, port, "warm", 1, false);
    testpipeline_wait_confirmed(&c->p, 1, 30000, "through Redis");

    testchild_server_kill(&c->redis.srv);
    testpipeline_place_orders_broker_down(&c->p, port, OUTAGE_ORDERS, false);

    testchild_server_restart(&c->redis.srv);
    int64_t ms =
        testpipeline_wait_confirmed(&c->p, OUTAGE_ORDERS + 1, 30000, "after Redis came back");
    print_message("all orders CONFIRMED %" PRId64 " ms after Redis came back\n", ms);
    testpipeline_wait_published(&c->p, 30000);
    wait_group_settled(c);
    testpipeline_stop_clean(&c->p, up);
    testpipeline_check_invariants(&c->p, stock, TXO_ARRAY_LEN(stock));
    size_t dups = check_stream_matches_outbox(c);
    print_message("order stream: %zu entries there twice\n", dups);
    testpipeline_remove_logs(&c->p);
}

/* ---- `txo relay` SIGKILLed between the publish and the commit ---- */

#define RELAY_CRASH_ORDERS 12

static void test_relay_crash_after_publish_redis(void **state)
{
    struct ctx *c = *state;
    testpipeline_set_initial_stock(&c->p, stock, TXO_ARRAY_LEN(stock));
    testpipeline_serve_orders(&c->p, "relaycrash", RELAY_CRASH_ORDERS, false);

    struct testproc *r1 =
        testpipeline_start_relay(&c->p, "r_relay_crash", relay_args, "relay.after_publish:1");
    testpipeline_expect_crash(&c->p, r1, 30000);
    /* The first batch (4) is marked; the second was published, its transaction rolled back. */
    assert_int_equal(
        testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'"), 4);
    assert_int_equal(testredis_xlen(&c->redis, c->stream), 8);

    struct testproc *r2 = testpipeline_start_relay(&c->p, "r_relay", relay_args, NULL);
    unsigned mport = 0;
    struct testproc *w = testpipeline_start_worker(&c->p, "r_worker", NULL, NULL, &mport);
    testpipeline_wait_terminal(&c->p, RELAY_CRASH_ORDERS, 30000, "after the relay restart");
    testpipeline_wait_published(&c->p, 30000);
    wait_group_settled(c);
    double dups = testpipeline_metric(&c->p, mport, "txo_inbox_duplicates_total");
    testpipeline_stop_clean(&c->p, w);
    testpipeline_stop_clean(&c->p, r2);
    size_t stream_dups = check_stream_matches_outbox(c);
    print_message("relay crash: %zu OrderCreated twice in the stream, "
                  "txo_inbox_duplicates_total %.0f\n",
                  stream_dups, dups);
    assert_int_equal(stream_dups, 4);
    if (dups != 4)
        TESTPIPELINE_FAIL(&c->p, "txo_inbox_duplicates_total = %.0f, want 4", dups);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"),
                     RELAY_CRASH_ORDERS);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM inbox_events"), RELAY_CRASH_ORDERS);
    testpipeline_check_invariants(&c->p, stock, TXO_ARRAY_LEN(stock));
    testpipeline_remove_logs(&c->p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_crash_before_ack_redis),
        cmocka_unit_test(test_broker_killed_end_to_end_redis),
        cmocka_unit_test(test_relay_crash_after_publish_redis),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
}
