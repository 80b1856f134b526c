/*
 * End-to-end fault tests of the order pipeline through Kafka, with real `txo` processes talking
 * to librdkafka's mock cluster, which runs in this test process (tests/support/testkafka.h; it
 * listens on TCP, so the children reach it for as long as the test lives):
 *
 *   relay crash   `txo relay --publisher kafka` SIGKILLed after publishing its second batch and
 *                 before marking it (crash point relay.after_publish:1). The next relay
 *                 republishes that batch after the lease: the topic holds those events twice
 *                 (read with kcat). `txo worker --broker kafka` then applies every order once:
 *                 the inbox drops the second copies.
 *   worker crash  `txo worker --broker kafka --crash-point worker.after_consume`: the worker
 *                 commits the inbox row and the saga of an OrderCreated, then dies before the
 *                 Kafka offset is committed. The restarted worker (same group) gets it again;
 *                 the inbox drops it: one saga per order.
 *   up            `txo up --broker kafka`: orders go API -> outbox -> relay -> Kafka -> worker
 *                 and end CONFIRMED; the saga's own events share the order topic and the
 *                 worker commits past them without handling them.
 * After each scenario every invariant of the order service is checked by SQL
 * (testpipeline_check_invariants). Each test has its own topics and consumer group.
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
#include "testkafka.h"
#include "testpipeline.h"
#include "testproc.h"
#include "txo/kafka.h"

struct ctx {
    struct testdb t;
    struct testpipeline p;
    char prefix[64]; /* topics are <prefix>.<aggregate_type> */
    char topic[80];  /* <prefix>.order */
    char group[64];
};

static int setup(void **state)
{
    static unsigned seq;
    struct ctx *c = testdb_fixture_new(sizeof(*c), "pipeline_kafka", TESTDB_NEW_EXPORT_ENV);
    testpipeline_init(&c->p, c->t.db);
    snprintf(c->prefix, sizeof(c->prefix), "pipe%ld_%u", (long)getpid(), seq);
    snprintf(c->topic, sizeof(c->topic), "%s.order", c->prefix);
    snprintf(c->group, sizeof(c->group), "pipe-worker-%ld-%u", (long)getpid(), seq);
    seq++;
    struct testpipeline_args *a = testpipeline_broker(&c->p, "kafka");
    testpipeline_args_addf(a, "--kafka-brokers=%s", testkafka_shared.bootstraps);
    testpipeline_args_addf(a, "--kafka-topic-template=%s.{aggregate_type}", c->prefix);
    testpipeline_args_addf(a, "--kafka-group=%s", c->group);
    testpipeline_args_add(a, "--kafka-delivery-timeout=3000");
    testpipeline_args_add(a, "--kafka-retry-delay=200");
    testpipeline_args_add(a, "--kafka-property=session.timeout.ms=6000,heartbeat.interval.ms=300");
    testkafka_create_topic(&testkafka_shared, c->topic, 3);
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    testpipeline_release(&c->p);
    testdb_fixture_free(c);
    return 0;
}

/* How many records of the order topic carry each OrderCreated key; *dups the extra copies. */
static size_t created_records(struct ctx *c, size_t *dups)
{
    struct testkafka_record *r = NULL;
    size_t n = testkafka_read(&testkafka_shared, c->topic, &r);
    size_t created = 0;
    for (size_t i = 0; i < n; i++) {
        char *type = testkafka_header(&r[i], TXO_KAFKA_HEADER_EVENT_TYPE);
        created += type != NULL && strcmp(type, "OrderCreated") == 0;
        free(type);
    }
    /* Distinct keys: each is an outbox row's idempotency key. */
    size_t distinct = 0;
    for (size_t i = 0; i < n; i++) {
        char *id = testkafka_header(&r[i], TXO_KAFKA_HEADER_IDEMPOTENCY_KEY);
        char *type = testkafka_header(&r[i], TXO_KAFKA_HEADER_EVENT_TYPE);
        bool first = type != NULL && strcmp(type, "OrderCreated") == 0;
        for (size_t k = 0; first && k < i; k++) {
            char *other = testkafka_header(&r[k], TXO_KAFKA_HEADER_IDEMPOTENCY_KEY);
            first = other == NULL || strcmp(other, id) != 0;
            free(other);
        }
        if (first) {
            struct txo_param p = txo_p_str(id);
            assert_int_equal(testdb_i64(c->t.db,
                                        "SELECT COUNT(*) FROM outbox_events WHERE "
                                        "idempotency_key = ?",
                                        &p, 1),
                             1);
        }
        distinct += first;
        free(id);
        free(type);
    }
    testkafka_records_free(r, n);
    *dups = created - distinct;
    return distinct;
}

static const struct testpipeline_stock stock[] = {{"pen", 1000}};
static const char *const relay_args[] = {"--batch-size=5", "--lease=1", "--shard-lease=1000",
                                         "--idle-sleep=50", NULL};

#define RELAY_CRASH_ORDERS 10

static void test_relay_crash_republished_consumed_once(void **state)
{
    struct ctx *c = *state;
    testpipeline_set_initial_stock(&c->p, stock, TXO_ARRAY_LEN(stock));
    testpipeline_serve_orders(&c->p, "rcrash", RELAY_CRASH_ORDERS, false);

    /* Batch 1 (5 events) published and marked; batch 2 published, then SIGKILL. */
    struct testproc *r1 =
        testpipeline_start_relay(&c->p, "k_relay_crash", relay_args, "relay.after_publish:1");
    testpipeline_expect_crash(&c->p, r1, 30000);
    assert_int_equal(
        testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'"), 5);
    assert_int_equal(
        testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PROCESSING'"), 5);
    size_t dups = 0;
    assert_int_equal(created_records(c, &dups), RELAY_CRASH_ORDERS);
    assert_int_equal(dups, 0);

    /* After the 1 s lease the next relay publishes batch 2 again: a second copy each. */
    txo_sleep_ms(1200);
    struct testproc *r2 = testpipeline_start_relay(&c->p, "k_relay", relay_args, NULL);
    testpipeline_wait_published(&c->p, 30000);
    assert_int_equal(created_records(c, &dups), RELAY_CRASH_ORDERS);
    print_message("after the relay crash: %d OrderCreated events, %zu written twice to %s\n",
                  RELAY_CRASH_ORDERS, dups, c->topic);
    /* A new producer session: the idempotent producer cannot know the first copies. */
    assert_int_equal(dups, 5);

    /* The worker sees 15 OrderCreated records and applies 10. */
    unsigned mport = 0;
    struct testproc *w = testpipeline_start_worker(&c->p, "k_worker", NULL, NULL, &mport);
    testpipeline_wait_terminal(&c->p, RELAY_CRASH_ORDERS, 30000, "after the relay crash");
    testpipeline_wait_published(&c->p, 30000);
    /* The five second copies reach the worker too; wait until it has seen them all. */
    int64_t deadline = txo_monotonic_ms() + 20000;
    while (testpipeline_metric(&c->p, mport, "txo_inbox_duplicates_total") < 5 &&
           txo_monotonic_ms() < deadline)
        txo_sleep_ms(100);
    double dup_seen = testpipeline_metric(&c->p, mport, "txo_inbox_duplicates_total");
    double consumed = testpipeline_metric(&c->p, mport, "txo_inbox_consumed_total");
    /* Each consumed OrderCreated's delay observed once, the duplicates' not. */
    double delays = testpipeline_metric(
        &c->p, mport, "txo_inbox_consume_delay_seconds_count{aggregate_type=\"order\"}");
    print_message("worker: txo_inbox_consumed_total %.0f, txo_inbox_duplicates_total %.0f\n",
                  consumed, dup_seen);
    testpipeline_stop_clean(&c->p, w);
    testpipeline_stop_clean(&c->p, r2);
    assert_true(dup_seen >= 5);
    assert_true(consumed == RELAY_CRASH_ORDERS);
    assert_true(delays == consumed);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM saga_instances"), RELAY_CRASH_ORDERS);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"),
                     RELAY_CRASH_ORDERS);
    testpipeline_check_invariants(&c->p, stock, TXO_ARRAY_LEN(stock));
    testpipeline_remove_logs(&c->p);
}

#define WORKER_CRASH_ORDERS 6

static void test_worker_crash_before_commit(void **state)
{
    struct ctx *c = *state;
    testpipeline_set_initial_stock(&c->p, stock, TXO_ARRAY_LEN(stock));
    testpipeline_serve_orders(&c->p, "wcrash", WORKER_CRASH_ORDERS, false);
    struct testproc *relay = testpipeline_start_relay(&c->p, "k_relay", relay_args, NULL);
    testpipeline_wait_published(&c->p, 30000);

    struct testproc *w1 =
        testpipeline_start_worker(&c->p, "k_worker_crash", NULL, "worker.after_consume", NULL);
    testpipeline_expect_crash(&c->p, w1, 30000);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM inbox_events"), 1);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM saga_instances"), 1);

    /* The offset was not committed: the same group gets the record again. */
    unsigned mport = 0;
    struct testproc *w2 = testpipeline_start_worker(&c->p, "k_worker", NULL, NULL, &mport);
    testpipeline_wait_terminal(&c->p, WORKER_CRASH_ORDERS, 30000, "after the worker restart");
    testpipeline_wait_published(&c->p, 30000);
    double dup_seen = testpipeline_metric(&c->p, mport, "txo_inbox_duplicates_total");
    double consumed = testpipeline_metric(&c->p, mport, "txo_inbox_consumed_total");
    print_message("restarted worker: consumed %.0f, duplicates %.0f\n", consumed, dup_seen);
    testpipeline_stop_clean(&c->p, w2);
    testpipeline_stop_clean(&c->p, relay);
    assert_true(dup_seen >= 1);
    assert_true(consumed == WORKER_CRASH_ORDERS - 1);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM saga_instances"), WORKER_CRASH_ORDERS);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"),
                     WORKER_CRASH_ORDERS);
    testpipeline_check_invariants(&c->p, stock, TXO_ARRAY_LEN(stock));
    testpipeline_remove_logs(&c->p);
}

#define UP_ORDERS 8

static void test_up_through_kafka(void **state)
{
    struct ctx *c = *state;
    testpipeline_set_initial_stock(&c->p, stock, TXO_ARRAY_LEN(stock));
    unsigned port;
    struct testproc *up = testpipeline_start_up(&c->p, "k_up", NULL, &port);
    testpipeline_place_orders(&c->p, port, "up", UP_ORDERS, false);
    testpipeline_wait_terminal(&c->p, UP_ORDERS, 30000, "through txo up");
    testpipeline_wait_published(&c->p, 30000);
    double skipped =
        testpipeline_metric(&c->p, port, "txo_kafka_messages_consumed_total{outcome=\"skipped\"}");
    double handled =
        testpipeline_metric(&c->p, port, "txo_kafka_messages_consumed_total{outcome=\"handled\"}");
    print_message("txo up: handled %.0f, skipped (other event types on the topic) %.0f\n", handled,
                  skipped);
    testpipeline_stop_clean(&c->p, up);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"),
                     UP_ORDERS);
    assert_true(handled >= UP_ORDERS);
    size_t dups = 0;
    assert_int_equal(created_records(c, &dups), UP_ORDERS);
    testpipeline_check_invariants(&c->p, stock, TXO_ARRAY_LEN(stock));
    testpipeline_remove_logs(&c->p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relay_crash_republished_consumed_once),
        cmocka_unit_test(test_worker_crash_before_commit),
        cmocka_unit_test(test_up_through_kafka),
    };
    if (getenv("TXO_TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TXO_TEST_FILTER"));
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, testkafka_group_setup,
                        testkafka_group_teardown);
}
