/*
 * End-to-end fault tests of the whole order pipeline with real processes and the local broker
 * (`txo up`, whose relay hands each event to the in-process consumer): orders come in through
 * the HTTP API of `txo serve`, then `txo up` is started with a crash point, dies of SIGKILL,
 * and is started again without it. Afterwards every invariant of the order service must hold,
 * checked by SQL on the test database (testpipeline_check_invariants()).
 *
 *   relay crash  crash point relay.after_publish: the relay dispatched the batch of
 *                OrderCreated (the consumer committed inbox row + saga for each) and died
 *                before marking it PUBLISHED. The restarted relay reclaims the expired lease and
 * dispatches the same events again; the inbox drops every one of them (txo_inbox_duplicates_total
 * counts them). kill         crash point saga.step_committed:40: the process dies while its four
 * saga runners own sagas half-way through; the restarted worker resumes them once their owner lease
 * expired (txo_saga_picked_up_total) and every order ends CONFIRMED or CANCELLED (some SKUs run out
 * on purpose, so both outcomes occur). kill mid batch: the same with batches of sagas, the
 * process killed inside a batch's transaction (saga.batch.before_commit): nothing of that
 * batch commits, and its sagas are resumed after their lease.
 *
 * Stock conservation, stated exactly as order_saga.c implements it: ReserveStock moves qty
 * from `available` to `reserved` (and records a RESERVED inventory_reservations row);
 * ReleaseStock moves it back (RELEASED); nothing else touches stock, and a CONFIRMED order keeps
 * its units in `reserved` (shipping them is outside the order service). So, per SKU, at the end:
 *   available + reserved = initial stock
 *   reserved  = units of that SKU in CONFIRMED orders = qty of its RESERVED reservations
 *   available = initial stock - units in CONFIRMED orders, and both are >= 0.
 *
 * The process, HTTP and invariant helpers are shared with test_pipeline_nats.c
 * (tests/support/testpipeline.h).
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "testrun.h"
#include "orders.h"
#include "testdb.h"
#include "testpipeline.h"
#include "testproc.h"

struct ctx {
    struct testdb t;
    struct testpipeline p; /* the processes, the HTTP client, their logs */
};

static int setup(void **state)
{
    struct ctx *c = testdb_fixture_new(sizeof(*c), "pipeline_crash", TESTDB_NEW_EXPORT_ENV);
    testpipeline_init(&c->p, c->t.db);
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

/*
 * `txo up` on port, dispatching locally, with short leases (--lease=2 --shard-lease=2000
 * --saga-lease=2 --poll=100), the arguments extra (NULL-terminated) and crash_point unless it
 * is NULL; without a crash point, waits until it answers.
 */
static struct testproc *start_up(struct ctx *c, const char *tag, unsigned port,
                                 const char *const *extra, const char *crash_point)
{
    struct testpipeline_args a;
    testpipeline_args_init(&a, "up");
    testpipeline_args_addf(&a, "--listen=127.0.0.1:%u", port);
    testpipeline_args_add(&a, "--lease=2");
    testpipeline_args_add(&a, "--shard-lease=2000");
    testpipeline_args_add(&a, "--saga-lease=2");
    testpipeline_args_add(&a, "--poll=100");
    for (size_t i = 0; extra[i] != NULL; i++)
        testpipeline_args_add(&a, extra[i]);
    testpipeline_args_crash_point(&a, crash_point);
    struct testproc *up = testpipeline_start(&c->p, tag, &a);
    if (crash_point == NULL)
        testpipeline_wait_ready(&c->p, up, port);
    return up;
}

static const char *const no_args[] = {NULL};

/* ---- relay crash after publishing, with local dispatch ---- */

#define RELAY_CRASH_ORDERS 20

static void test_relay_crash_after_publish_local(void **state)
{
    struct ctx *c = *state;
    static const struct testpipeline_stock stock[] = {{"pen", 1000}, {"book", 1000}};
    testpipeline_set_initial_stock(&c->p, stock, TXO_ARRAY_LEN(stock));

    /* 1. Orders through the API only: all PENDING in the outbox. */
    unsigned port;
    struct testproc *serve = testpipeline_start_serve(&c->p, "ef_serve", &port);
    for (unsigned i = 0; i < RELAY_CRASH_ORDERS; i++) {
        char key[64], body[256];
        snprintf(key, sizeof(key), "ef-%u", i);
        snprintf(body, sizeof(body),
                 "{\"customer_id\":%u,\"items\":[{\"sku\":\"pen\",\"qty\":1,\"price_cents\":250}"
                 "%s]}",
                 100 + i, i % 4 == 0 ? ",{\"sku\":\"book\",\"qty\":2,\"price_cents\":1500}" : "");
        (void)testpipeline_post_order(&c->p, port, key, body);
    }
    testpipeline_stop_clean(&c->p, serve);
    assert_int_equal(testdb_q(c->t.db,
                              "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' "
                              "AND event_type = 'OrderCreated'"),
                     RELAY_CRASH_ORDERS);

    /* 2. `txo up` dispatches the batch, then dies before marking it. */
    struct testproc *up1 = start_up(c, "ef_up_crash", port, no_args, "relay.after_publish");
    testpipeline_expect_crash(&c->p, up1, 30000);
    /* Every event reached the consumer (inbox row + saga committed) and none was marked. */
    int64_t processing =
        testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE event_type = "
                          "'OrderCreated' AND status = 'PROCESSING' AND locked_by IS NOT NULL");
    int64_t inbox = testdb_q(c->t.db, "SELECT COUNT(*) FROM inbox_events");
    int64_t sagas = testdb_q(c->t.db, "SELECT COUNT(*) FROM saga_instances");
    print_message("after the crash: %" PRId64 " OrderCreated PROCESSING, %" PRId64
                  " inbox rows, %" PRId64 " sagas\n",
                  processing, inbox, sagas);
    if (processing != RELAY_CRASH_ORDERS || inbox != RELAY_CRASH_ORDERS ||
        sagas != RELAY_CRASH_ORDERS)
        TESTPIPELINE_FAIL(
            &c->p,
            "crash between publish and mark: want %d PROCESSING events, inbox rows and "
            "sagas, got %" PRId64 ", %" PRId64 ", %" PRId64,
            RELAY_CRASH_ORDERS, processing, inbox, sagas);

    /* 3. Restart: the lease expires, the batch is dispatched again, the inbox drops it. */
    struct testproc *up2 = start_up(c, "ef_up", port, no_args, NULL);
    testpipeline_wait_terminal(&c->p, RELAY_CRASH_ORDERS, 30000, "after the restart");
    testpipeline_wait_published(&c->p, 30000);
    double dups = testpipeline_metric(&c->p, port, "txo_inbox_duplicates_total");
    double consumed = testpipeline_metric(&c->p, port, "txo_inbox_consumed_total");
    print_message("second run: txo_inbox_duplicates_total %.0f, txo_inbox_consumed_total %.0f\n",
                  dups, consumed);
    char *log = testproc_log(up2);
    /* Back to PENDING by the lease reclaim, or by the takeover of the dead relay's shards (a
     * "shards rebalanced" line with reclaimed= above 0). */
    bool reclaimed = strstr(log, "reclaimed events whose lease expired") != NULL;
    for (const char *p = strstr(log, "reclaimed="); !reclaimed && p != NULL;
         p = strstr(p + 1, "reclaimed="))
        reclaimed = p[10] >= '1' && p[10] <= '9';
    free(log);
    testpipeline_stop_clean(&c->p, up2);

    /* The same 20 events were delivered again and each was dropped by the inbox. */
    if (dups < RELAY_CRASH_ORDERS)
        TESTPIPELINE_FAIL(&c->p,
                          "txo_inbox_duplicates_total = %.0f, want >= %d (every event redelivered)",
                          dups, RELAY_CRASH_ORDERS);
    assert_true(consumed == 0); /* no OrderCreated was new to the second run */
    assert_true(reclaimed);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"),
                     RELAY_CRASH_ORDERS);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM payments"), RELAY_CRASH_ORDERS);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM shipments"), RELAY_CRASH_ORDERS);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM inbox_events"), RELAY_CRASH_ORDERS);
    assert_int_equal(testdb_q(c->t.db,
                              "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED' "
                              "AND locked_by IS NULL AND published_at IS NOT NULL"),
                     testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events"));
    testpipeline_check_invariants(&c->p, stock, TXO_ARRAY_LEN(stock));
    testpipeline_remove_logs(&c->p);
}

/* ---- a worker killed while it owns sagas ---- */

#define KILL_ORDERS 100
#define LAMPS       10

/*
 * The kill tests below, one body. single: one saga at a time (--saga-batch=1), killed at
 * saga.step_committed, and the kill must leave a saga half-way (a step COMPLETED, the saga
 * RUNNING); else batches of up to 50 sagas, killed at saga.batch.before_commit (inside a
 * batch's transaction, its statements sent, before COMMIT), and the kill must leave sagas
 * under the dead process's lease: the batch committed nothing, and they are resumed once the
 * lease expired.
 */
static void kill_mid_sagas(struct ctx *c, bool single)
{
    /* Every order takes a pen; every third one also a lamp, of which there are only 10: the
     * other lamp orders fail at ReserveStock and are cancelled. */
    static const struct testpipeline_stock stock[] = {{"pen", 1000}, {"lamp", LAMPS}};
    static const char *const threads[] = {"--saga-threads=4", NULL};
    static const char *const single_threads[] = {"--saga-threads=4", "--saga-batch=1", NULL};
    testpipeline_set_initial_stock(&c->p, stock, TXO_ARRAY_LEN(stock));

    unsigned port;
    struct testproc *serve = testpipeline_start_serve(&c->p, "kill_serve", &port);
    unsigned lamp_orders = 0;
    for (unsigned i = 0; i < KILL_ORDERS; i++) {
        char key[64], body[256];
        bool lamp = i % 3 == 0;
        lamp_orders += lamp;
        snprintf(key, sizeof(key), "kill-%u", i);
        snprintf(body, sizeof(body),
                 "{\"customer_id\":%u,\"items\":[{\"sku\":\"pen\",\"qty\":1,\"price_cents\":199}"
                 "%s]}",
                 500 + i, lamp ? ",{\"sku\":\"lamp\",\"qty\":1,\"price_cents\":4900}" : "");
        (void)testpipeline_post_order(&c->p, port, key, body);
    }
    testpipeline_stop_clean(&c->p, serve);

    /*
     * 1. Four saga runners; the process dies right after the 41st saga step committed by
     * drive_step (the first step of a run commits with the lease and does not pass this crash
     * point). Whether a saga is left half-way depends on what the other runners were doing at
     * that instant (a crash right after CreateShipment leaves its own saga COMPLETED), so on
     * the rare run that left none the process is started again, with the crash point a few
     * steps ahead: a second crash is a fault like the first. With batches the same holds for
     * the size of the batch the crash point meets: the first deliveries may make batches of
     * one (an idle runner takes a saga at once), so the process is started again until a kill
     * left at least two sagas of one batch under lease.
     */
    int64_t completed_steps = 0, unfinished = 0, owned = 0, half_done = 0, terminal = 0;
    unsigned crashes = 0;
    while ((single ? half_done < 1 : owned < 2) && crashes < 5) {
        const char *crash_point;
        if (single)
            crash_point = crashes == 0 ? "saga.step_committed:40" : "saga.step_committed:5";
        else
            crash_point = crashes == 0 ? "saga.batch.before_commit:2" : "saga.batch.before_commit";
        struct testproc *up1 =
            start_up(c, "kill_up_crash", port, single ? single_threads : threads, crash_point);
        testpipeline_expect_crash(&c->p, up1, 60000);
        crashes++;

        /* What the dead process left behind. */
        completed_steps =
            testdb_q(c->t.db, "SELECT COUNT(*) FROM saga_steps WHERE status = 'COMPLETED'");
        unfinished = testdb_q(c->t.db, "SELECT COUNT(*) FROM saga_instances "
                                       "WHERE status IN ('RUNNING', 'COMPENSATING')");
        owned =
            testdb_q(c->t.db, "SELECT COUNT(*) FROM saga_instances WHERE status IN ('RUNNING', "
                              "'COMPENSATING') AND owner <> '' AND lease_until > UTC_TIMESTAMP(6)");
        half_done = testdb_q(c->t.db,
                             "SELECT COUNT(DISTINCT s.id) FROM saga_instances s JOIN saga_steps st "
                             "ON st.saga_id = s.id WHERE s.status IN ('RUNNING', 'COMPENSATING') "
                             "AND st.status = 'COMPLETED'");
        terminal = testdb_q(c->t.db, "SELECT COUNT(*) FROM orders WHERE status <> 'CREATED'");
        print_message("after kill %u: %" PRId64 " steps COMPLETED, %" PRId64
                      " sagas unfinished (%" PRId64 " owned by the dead process under lease, "
                      "%" PRId64 " with a step already COMPLETED), %" PRId64 " orders terminal\n",
                      crashes, completed_steps, unfinished, owned, half_done, terminal);
        if (single && crashes == 1 && completed_steps < 41)
            TESTPIPELINE_FAIL(&c->p,
                              "the crash point fires after the 41st committed step, found %" PRId64
                              " steps COMPLETED",
                              completed_steps);
    }
    if (single && half_done < 1)
        TESTPIPELINE_FAIL(&c->p, "%u kills left no saga half-way (RUNNING with a COMPLETED step)",
                          crashes);
    if (!single && owned < 2)
        TESTPIPELINE_FAIL(&c->p, "%u kills inside a batch left %" PRId64 " sagas under lease",
                          crashes, owned);
    assert_true(unfinished >= half_done);
    assert_true(terminal < KILL_ORDERS);

    /* 2. Restart without the crash point: every saga is resumed or run, all end terminal. */
    struct testproc *up2 = start_up(c, "kill_up", port, threads, NULL);
    int64_t t0 = txo_monotonic_ms();
    testpipeline_wait_terminal(&c->p, KILL_ORDERS, 30000, "after the restart");
    print_message("all %d orders terminal %" PRId64 " ms after the restart\n", KILL_ORDERS,
                  txo_monotonic_ms() - t0);
    testpipeline_wait_published(&c->p, 30000);
    double picked_up = testpipeline_metric(&c->p, port, "txo_saga_picked_up_total");
    print_message("second run: txo_saga_picked_up_total %.0f (sagas unfinished at the kill: "
                  "%" PRId64 ")\n",
                  picked_up, unfinished);
    testpipeline_stop_clean(&c->p, up2);

    /* Every saga left unfinished by the dead process was picked up by the scheduler of the
     * second one (the consumer only hands over the sagas it creates itself). */
    if (picked_up < (double)unfinished)
        TESTPIPELINE_FAIL(&c->p,
                          "txo_saga_picked_up_total = %.0f, fewer than the %" PRId64
                          " sagas left unfinished",
                          picked_up, unfinished);
    int64_t want_confirmed = KILL_ORDERS - (lamp_orders - LAMPS);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"),
                     want_confirmed);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CANCELLED'"),
                     lamp_orders - LAMPS);
    assert_int_equal(testdb_q(c->t.db, "SELECT available FROM inventory WHERE sku = 'lamp'"), 0);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM saga_instances"), KILL_ORDERS);
    testpipeline_check_invariants(&c->p, stock, TXO_ARRAY_LEN(stock));
    testpipeline_remove_logs(&c->p);
}

static void test_worker_killed_mid_sagas(void **state)
{
    kill_mid_sagas(*state, true);
}

static void test_worker_killed_mid_batch(void **state)
{
    kill_mid_sagas(*state, false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relay_crash_after_publish_local),
        cmocka_unit_test(test_worker_killed_mid_sagas),
        cmocka_unit_test(test_worker_killed_mid_batch),
    };
    int rc = testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
    return rc;
}
