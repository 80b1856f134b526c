/*
 * RabbitMQ going away under a running pipeline: MariaDB + one private rabbitmq-server for the
 * binary + the relay (run_once in this process) publishing through the RabbitMQ publisher and,
 * in the same loop, a RabbitMQ consumer recording each event in the inbox.
 *
 *   unroutable  an event no queue is bound for comes back (mandatory) and is FAILED with a
 *               dead letter on its first attempt, while the rest of its batch is PUBLISHED.
 *   killed      SIGKILL mid-drain: every relay cycle and every poll fails fast
 *               (TXO_EUNAVAILABLE, no hang), the rows tried go back to PENDING with backoff;
 *               restarted on the same ports and data, the relay publishes the rest and the
 *               consumer reconnects and carries on. Nothing confirmed was lost (persistent
 *               messages, durable queues), each event is in the audit queue exactly once and
 *               in the inbox exactly once (a delivery left unacknowledged by the kill comes
 *               back and the inbox drops it).
 *   hung        SIGSTOP: connections open, nothing confirmed: a cycle costs the confirm
 *               timeout, its rows go back to PENDING with TXO_ETIMEOUT ("maybe delivered");
 *               the next cycle's new connection gets no handshake and costs the connect
 *               timeout (TXO_EUNAVAILABLE); after SIGCONT the broker processes what it had
 *               received, so the retries of the timed-out batch are duplicates in the queue:
 *               counted, and at most that batch.
 *
 *   blocked     a disk alarm (rabbitmqctl set_disk_free_limit above the free space): the
 *               broker stops reading publishing connections and says so (connection.blocked);
 *               a cycle costs the confirm timeout and its rows go back to PENDING with
 *               TXO_ETIMEOUT naming the alarm; cleared, the retries publish everything.
 *
 *   relay crash `txo relay --publisher rabbitmq` SIGKILLed at crash point relay.after_publish:1
 *               (the second batch published, not marked): the next relay publishes that batch
 *               again, the queue holds it twice, and the consumer's inbox makes it one effect
 *               per event.
 *
 * What reached the queues is read with pika (rabbit_client.py), not our code.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "testdb.h"
#include "testoutbox.h"
#include "testproc.h"
#include "testinbox.h"
#include "testrabbit.h"
#include "testrelay.h"
#include "txo/consumer.h"
#include "txo/inbox.h"
#include "txo/outbox.h"
#include "txo/rabbitmq.h"

#define EXCHANGE           "txo.events"
#define N_EVENTS           200
#define BATCH              20
#define CONFIRM_TIMEOUT_MS 1000
#define CONNECT_TIMEOUT_MS 2000 /* an AMQP handshake with a busy broker on a loaded machine */

static void opts(struct txo_rabbitmq_opts *o)
{
    testrabbit_opts(o, CONNECT_TIMEOUT_MS, CONFIRM_TIMEOUT_MS);
}

static struct txo_publisher *new_publisher(void)
{
    struct txo_rabbitmq_opts o;
    opts(&o);
    return testrabbit_publisher(&o);
}

static struct txo_relay *new_relay(struct testdb *t, struct txo_publisher *pub)
{
    struct txo_relay_opts ro;
    testrelay_outage_opts(&ro, "rabbit-outage", BATCH);
    ro.breaker_failures = 0; /* every cycle tries: the test counts what each one does */
    return testrelay_new(t->db, pub, &ro);
}

/*
 * One test's world: pika's queue "<kind>.audit" bound to "<kind>.#" (what reached the broker),
 * a database holding the events 1..n of aggregate type kind (the unroutable-th of type "nobody"
 * when not 0), and a relay publishing them through the RabbitMQ publisher.
 */
struct outage {
    const char *kind;
    struct testdb t;
    struct txo_publisher *pub;
    struct txo_relay *r;
};

static void outage_begin(struct outage *o, const char *kind, unsigned n, unsigned unroutable)
{
    char audit[64], key[64], tag[64];
    snprintf(audit, sizeof(audit), "%s.audit", kind);
    snprintf(key, sizeof(key), "%s.#", kind);
    snprintf(tag, sizeof(tag), "rabbit_%s", kind);
    free(testrabbit_client(&testrabbit_shared, "declare", audit, EXCHANGE, key, NULL));
    o->kind = kind;
    testdb_setup(&o->t, tag);
    testoutbox_append(o->t.db,
                      &(struct testoutbox_events){
                          .aggregate_type = kind, .from = 1, .to = n, .unroutable = unroutable});
    o->pub = new_publisher();
    o->r = new_relay(&o->t, o->pub);
}

static void outage_end(struct outage *o)
{
    txo_relay_free(o->r);
    txo_publisher_free(o->pub);
    testdb_teardown(&o->t);
}

/*
 * Runs relay cycles until at least want events are PUBLISHED and none is left backed off after
 * a failed try; returns how many are PUBLISHED. A cycle whose connection could not be opened in
 * time (a loaded machine: the AMQP handshake has CONNECT_TIMEOUT_MS) is tried again at once, as
 * the relay would after its backoff: the phases below start from a working connection.
 */
static int64_t publish_until(struct outage *o, int64_t want)
{
    struct testdb *t = &o->t;
    int64_t deadline = txo_monotonic_ms() + 30000;
    for (;;) {
        int64_t published = TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PUBLISHED'");
        int64_t retried = TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PENDING' AND "
                                              "attempts > 0");
        if (published >= want && retried == 0)
            return published;
        if (txo_monotonic_ms() > deadline)
            fail_msg("the broker is up, yet after 30 s only %lld of %lld events are published "
                     "(%lld backed off after a failed try)",
                     (long long)published, (long long)want, (long long)retried);
        testdb_exec(t->db, "UPDATE outbox_events SET next_attempt_at = NOW(6) "
                           "WHERE status = 'PENDING' AND attempts > 0");
        int64_t ms = 0;
        (void)testrelay_run_once_ms(o->r, &ms);
    }
}

/* Drains queue with pika; returns the distinct message ids, *dups the repeated ones. */
static size_t drain_distinct(const char *queue, size_t *total, size_t *dups)
{
    char *out = testrabbit_client(&testrabbit_shared, "drain", queue, "0.7", NULL);
    size_t n = 0, cap = 256;
    char **ids = malloc(cap * sizeof(*ids));
    assert_non_null(ids);
    char *save = NULL;
    for (char *line = strtok_r(out, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *m = json_loads(line, 0, NULL);
        assert_non_null(m);
        const char *id = json_string_value(json_object_get(m, "message_id"));
        assert_non_null(id);
        if (n == cap) {
            cap *= 2;
            ids = realloc(ids, cap * sizeof(*ids));
            assert_non_null(ids);
        }
        ids[n++] = strdup(id);
        json_decref(m);
    }
    free(out);
    *dups = testoutbox_sort_repeats(ids, n);
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
    *total = n;
    return n - *dups;
}

/*
 * After an outage: retries until every event is PUBLISHED with no dead letter, then drains the
 * audit queue, where each of the events must be at least once. Returns the duplicates
 * (retries of messages the broker had taken without confirming them); *total gets the
 * messages drained.
 */
static size_t publish_rest_and_drain(struct outage *o, size_t events, size_t *total)
{
    testrelay_retry_pending(o->t.db, o->r, 30000, 0, 0);
    assert_int_equal(TESTDB_COUNT(o->t.db, "outbox_events WHERE status <> 'PUBLISHED'"), 0);
    assert_int_equal(TESTDB_COUNT(o->t.db, "dead_letter_events"), 0);
    char audit[64];
    snprintf(audit, sizeof(audit), "%s.audit", o->kind);
    size_t dups = 0;
    assert_int_equal(drain_distinct(audit, total, &dups), events);
    return dups;
}

/* ---- unroutable ---- */

static void test_unroutable_dead_lettered_at_once(void **state)
{
    (void)state;
    struct outage o;
    outage_begin(&o, "unrouted", BATCH, 7);
    struct txo_db *db = o.t.db;
    struct txo_relay *r = o.r;
    int64_t ms = 0;
    assert_int_equal(testrelay_run_once_ms(r, &ms), BATCH);
    assert_int_equal(TESTDB_COUNT(db, "outbox_events WHERE status = 'PUBLISHED'"), BATCH - 1);
    assert_int_equal(TESTDB_COUNT(db,
                                  "outbox_events WHERE status = 'FAILED' AND "
                                  "aggregate_type = 'nobody' AND attempts = 1 AND last_error LIKE "
                                  "'TXO_ECONFIG: rabbitmq publisher: unroutable%no queue bound%'"),
                     1);
    assert_int_equal(TESTDB_COUNT(db,
                                  "dead_letter_events d JOIN outbox_events e ON "
                                  "e.id = d.source_event_id WHERE e.aggregate_type = 'nobody' AND "
                                  "d.error LIKE '%NO_ROUTE%'"),
                     1);
    size_t total = 0, dups = 0;
    assert_int_equal(drain_distinct("unrouted.audit", &total, &dups), BATCH - 1);
    assert_int_equal(dups, 0);
    outage_end(&o);
}

/* ---- the consumer: inbox, one effect per event ---- */

struct worker {
    struct txo_db *db;
    unsigned calls, effects, duplicates;
};

static int handle(void *arg, const struct txo_inbound_message *msg, struct txo_error *err)
{
    struct worker *w = arg;
    w->calls++;
    bool duplicate = false;
    int rc = testinbox_record(w->db, msg, "OrderCreated", &duplicate, err);
    if (rc < 0)
        return rc;
    if (duplicate)
        w->duplicates++;
    else
        w->effects++;
    return 0;
}

/* The last failed poll's error, for a failure's message. */
static char last_poll_error[TXO_ERROR_MSG_MAX] = "none";

/* One poll; returns its duration in ms; *rc its code. */
static int64_t poll_once(struct txo_consumer *cons, int64_t timeout_ms, int *rc)
{
    size_t handled = 0;
    struct txo_error err;
    txo_error_init(&err);
    int64_t t0 = txo_monotonic_ms();
    *rc = txo_consumer_poll(cons, 10, timeout_ms, &handled, &err);
    if (*rc < 0)
        snprintf(last_poll_error, sizeof(last_poll_error), "%s", err.msg);
    return txo_monotonic_ms() - t0;
}

/* ---- killed mid-drain ---- */

/* The events no delivery applied, as key/relay attempts (1: out before the kill). */
static void print_not_applied(struct txo_db *db)
{
    char *missing = testdb_str(db,
                               "SELECT GROUP_CONCAT(CONCAT(e.idempotency_key, '/', e.attempts) "
                               "ORDER BY e.id SEPARATOR ' ') FROM outbox_events e WHERE NOT "
                               "EXISTS (SELECT 1 FROM inbox_events i WHERE i.event_id = "
                               "e.idempotency_key)",
                               NULL, 0);
    print_message("---- not applied (key/attempts) ----\n%s\n", missing != NULL ? missing : "none");
    txo_free(missing);
}

static const char *const killed_queues[] = {"killed.audit", "killed.worker", "killed.worker.retry",
                                            "killed.worker.dlq", NULL};

static void test_broker_killed_mid_drain(void **state)
{
    (void)state;
    struct outage o;
    outage_begin(&o, "killed", N_EVENTS, 0); /* the relay publishes nothing before step 1 */
    struct txo_db *db = o.t.db;
    struct txo_relay *r = o.r;

    struct worker w = {.db = db};
    struct txo_rabbitmq_opts co;
    opts(&co);
    co.queue = "killed.worker";
    co.binding_key = "killed.OrderCreated";
    co.prefetch = 10;
    struct txo_consumer *cons = NULL;
    assert_int_equal(txo_consumer_rabbitmq_new(&co, &(struct txo_handler){.one = handle, .arg = &w},
                                               NULL, &cons, NULL),
                     0);
    int prc = 0;
    (void)poll_once(cons, 50, &prc); /* declares and binds before anything is published */
    assert_int_equal(prc, 0);

    int64_t ms = 0;

    /* 1. Up: three batches go out, the worker takes some. */
    const int64_t before = publish_until(&o, 3 * BATCH);
    (void)poll_once(cons, 200, &prc);
    assert_int_equal(prc, 0);
    assert_true(w.calls > 0);

    /* 2. Killed: every cycle and poll fails fast, the rows back off. */
    testrabbit_print_queues(&testrabbit_shared, killed_queues, "before the kill");
    testchild_server_kill(&testrabbit_shared.srv);
    size_t tried = 0;
    for (int cycle = 0; cycle < 50; cycle++) {
        size_t claimed = testrelay_run_once_ms(r, &ms);
        if (ms > CONNECT_TIMEOUT_MS + CONFIRM_TIMEOUT_MS + 1000)
            fail_msg("a relay cycle took %lld ms while the broker was down", (long long)ms);
        if (claimed == 0)
            break;
        tried += claimed;
    }
    assert_int_equal(tried, N_EVENTS - before);
    /* The first cycle finds its connection broken while it publishes (TXO_EUNAVAILABLE, or
     * TXO_ETIMEOUT for what was written before the break: maybe delivered); the next ones
     * cannot connect. */
    assert_int_equal(TESTDB_COUNT(db, "outbox_events WHERE status = 'PENDING' AND "
                                      "attempts >= 1 AND locked_by IS NULL AND (last_error LIKE "
                                      "'TXO_EUNAVAILABLE: rabbitmq publisher:%' OR last_error LIKE "
                                      "'TXO_ETIMEOUT: rabbitmq publisher:%') AND "
                                      "next_attempt_at > NOW(6) + INTERVAL 20 SECOND"),
                     (int64_t)tried);
    assert_true(TESTDB_COUNT(db, "outbox_events WHERE last_error LIKE "
                                 "'TXO_EUNAVAILABLE: rabbitmq publisher: cannot connect%'") >=
                (int64_t)tried - BATCH);
    assert_int_equal(TESTDB_COUNT(db, "dead_letter_events"), 0);
    for (int i = 0; i < 3; i++) {
        int64_t pms = poll_once(cons, 3000, &prc);
        assert_int_equal(prc, TXO_EUNAVAILABLE);
        if (pms > CONNECT_TIMEOUT_MS + 1000)
            fail_msg("a poll took %lld ms while the broker was down", (long long)pms);
    }

    /* 3. Back on the same ports and data: the rest goes out, the worker carries on. */
    testchild_server_restart(&testrabbit_shared.srv);
    snprintf(last_poll_error, sizeof(last_poll_error), "none since the restart");
    /* The queues as recovered, and after the first cycle, before the worker reconnects (and
     * declares its binding again): a batch the broker confirmed went to both queues. */
    const long recovered[2] = {testrabbit_count(&testrabbit_shared, "killed.worker"),
                               testrabbit_count(&testrabbit_shared, "killed.audit")};
    const int64_t published = TESTDB_COUNT(db, "outbox_events WHERE status = 'PUBLISHED'");
    long first_cycle[2] = {-1, -1}; /* worker, audit */
    int64_t deadline = txo_monotonic_ms() + 60000;
    while (TESTDB_COUNT(db, "outbox_events WHERE status <> 'PUBLISHED'") > 0 ||
           w.effects < N_EVENTS) {
        if (txo_monotonic_ms() > deadline) {
            testrabbit_print_state(&testrabbit_shared, killed_queues);
            print_not_applied(db);
            fail_msg("after the restart: %lld events not published, %u of %d consumed "
                     "(%u calls, %u duplicates, last poll %s; last failed poll: %s); queues: "
                     "audit %ld, worker %ld (%ld as recovered, %ld after the first cycle, when "
                     "audit had %ld), retry %ld, dlq %ld; inbox %lld rows",
                     (long long)TESTDB_COUNT(db, "outbox_events WHERE status <> "
                                                 "'PUBLISHED'"),
                     w.effects, N_EVENTS, w.calls, w.duplicates, txo_err_name(prc), last_poll_error,
                     testrabbit_count(&testrabbit_shared, "killed.audit"),
                     testrabbit_count(&testrabbit_shared, "killed.worker"), recovered[0],
                     first_cycle[0], first_cycle[1],
                     testrabbit_count(&testrabbit_shared, "killed.worker.retry"),
                     testrabbit_count(&testrabbit_shared, "killed.worker.dlq"),
                     (long long)TESTDB_COUNT(db, "inbox_events"));
        }
        testdb_exec(db, "UPDATE outbox_events SET next_attempt_at = NOW(6) "
                        "WHERE status = 'PENDING'");
        (void)testrelay_run_once_ms(r, &ms);
        if (first_cycle[0] < 0) {
            first_cycle[0] = testrabbit_count(&testrabbit_shared, "killed.worker");
            first_cycle[1] = testrabbit_count(&testrabbit_shared, "killed.audit");
            int64_t confirmed =
                TESTDB_COUNT(db, "outbox_events WHERE status = 'PUBLISHED'") - published;
            if (first_cycle[1] - recovered[1] == confirmed &&
                first_cycle[0] - recovered[0] != confirmed) {
                testrabbit_print_view(&testrabbit_shared);
                fail_msg("the first batch after the restart: %lld confirmed, %ld more in the "
                         "audit queue (%ld as recovered), %ld more in the worker's (%ld as "
                         "recovered), both bound to the exchange before the kill",
                         (long long)confirmed, first_cycle[1] - recovered[1], recovered[1],
                         first_cycle[0] - recovered[0], recovered[0]);
            }
        }
        if (poll_once(cons, 200, &prc) > 3000)
            fail_msg("a poll took more than 3 s after the restart");
    }
    print_message("killed: %u handler calls, %u effects, %u inbox duplicates\n", w.calls, w.effects,
                  w.duplicates);
    assert_int_equal(TESTDB_COUNT(db, "inbox_events"), N_EVENTS);
    assert_int_equal(w.effects, N_EVENTS);
    assert_int_equal(w.calls, w.effects + w.duplicates);

    /* Exactly one copy per event reached the queues: nothing confirmed was lost in the kill,
     * nothing was published twice (no batch was in flight when it came). */
    size_t total = 0, dups = 0;
    assert_int_equal(drain_distinct("killed.audit", &total, &dups), N_EVENTS);
    assert_int_equal(dups, 0);
    assert_int_equal(testrabbit_count(&testrabbit_shared, "killed.worker"), 0);
    assert_int_equal(testrabbit_count(&testrabbit_shared, "killed.worker.dlq"), 0);

    txo_consumer_free(cons);
    outage_end(&o);
}

/* ---- hung ---- */

static void test_broker_hangs_then_resumes(void **state)
{
    (void)state;
    struct outage o;
    outage_begin(&o, "hung", N_EVENTS, 0);
    struct txo_db *db = o.t.db;
    struct txo_relay *r = o.r;
    int64_t ms = 0;
    (void)publish_until(&o, BATCH);

    /* The first cycle publishes into the hung connection and waits out the confirm timeout;
     * the next one, on a new connection, gets no AMQP handshake within the connect timeout
     * (the kernel still accepts the TCP connection). Both are bounded, neither hangs. */
    testchild_server_pause(&testrabbit_shared.srv);
    txo_sleep_ms(300); /* SIGSTOP reaches every thread of the VM a moment after kill() */
    assert_int_equal(testrelay_run_once_ms(r, &ms), BATCH);
    int64_t first_ms = ms;
    assert_int_equal(testrelay_run_once_ms(r, &ms), BATCH);
    int64_t second_ms = ms;
    testchild_server_resume(&testrabbit_shared.srv);
    print_message("hung broker: a cycle took %lld ms (confirm timeout %d ms), the next %lld ms "
                  "(connect timeout %d ms)\n",
                  (long long)first_ms, CONFIRM_TIMEOUT_MS, (long long)second_ms,
                  CONNECT_TIMEOUT_MS);
    assert_true(first_ms >= CONFIRM_TIMEOUT_MS - 50 && first_ms < CONFIRM_TIMEOUT_MS + 2000);
    assert_true(second_ms >= CONNECT_TIMEOUT_MS - 50 && second_ms < CONNECT_TIMEOUT_MS + 2000);
    assert_int_equal(
        TESTDB_COUNT(db, "outbox_events WHERE status = 'PENDING' AND "
                         "attempts = 1 AND last_error LIKE 'TXO_ETIMEOUT: rabbitmq publisher: "
                         "no confirm within 1000 ms%' "
                         "AND next_attempt_at > NOW(6) + INTERVAL 20 SECOND"),
        BATCH);
    assert_int_equal(TESTDB_COUNT(db,
                                  "outbox_events WHERE status = 'PENDING' AND "
                                  "attempts = 1 AND last_error LIKE 'TXO_EUNAVAILABLE: rabbitmq "
                                  "publisher:%' AND next_attempt_at > NOW(6) + INTERVAL 20 SECOND"),
                     BATCH);

    size_t total = 0, dups = publish_rest_and_drain(&o, N_EVENTS, &total);
    print_message("hung: %zu messages in the queue for %d events: %zu duplicates (the retries "
                  "of the %d messages whose confirm timed out, which the broker had received)\n",
                  total, N_EVENTS, dups, BATCH);
    assert_true(dups <= BATCH);
    outage_end(&o);
}

/* ---- blocked by an alarm ---- */

static void test_broker_blocked_by_an_alarm(void **state)
{
    (void)state;
    struct outage o;
    outage_begin(&o, "blocked", 3 * BATCH, 0);
    struct txo_db *db = o.t.db;
    struct txo_relay *r = o.r;
    (void)publish_until(&o, BATCH);

    /* More free space asked for than any disk has: the disk alarm goes off at once. */
    free(testrabbit_ctl(&testrabbit_shared, "set_disk_free_limit", "1000000000000000", NULL));
    int64_t ms = 0;
    assert_int_equal(testrelay_run_once_ms(r, &ms), BATCH);
    /* Back to the default. */
    free(testrabbit_ctl(&testrabbit_shared, "set_disk_free_limit", "50000000", NULL));
    print_message("blocked: a cycle took %lld ms (confirm timeout %d ms)\n", (long long)ms,
                  CONFIRM_TIMEOUT_MS);
    assert_true(ms >= CONFIRM_TIMEOUT_MS - 50 && ms < CONFIRM_TIMEOUT_MS + 2000);
    assert_int_equal(TESTDB_COUNT(db, "outbox_events WHERE status = 'PENDING' AND attempts = 1 "
                                      "AND last_error LIKE 'TXO_ETIMEOUT: rabbitmq publisher: no "
                                      "confirm within 1000 ms: the broker blocks publishing "
                                      "(low on disk) (maybe delivered)%'"),
                     BATCH);

    size_t total = 0;
    /* At most what the broker read before it blocked, sent again. */
    assert_true(publish_rest_and_drain(&o, 3 * BATCH, &total) <= BATCH);
    outage_end(&o);
}

/* ---- the relay process killed between publish and mark ---- */

static void test_relay_crash_after_publish(void **state)
{
    (void)state;
    const unsigned n = 150, batch = 50;
    char *o =
        testrabbit_client(&testrabbit_shared, "declare", "crash.audit", EXCHANGE, "crash.#", NULL);
    free(o);
    struct testdb t;
    testdb_setup(&t, "rabbit_relay_crash");
    testdb_export_env(&t);
    testoutbox_append(t.db,
                      &(struct testoutbox_events){.aggregate_type = "crash", .from = 1, .to = n});
    struct worker w = {.db = t.db};
    struct txo_rabbitmq_opts co;
    opts(&co);
    co.queue = "crash.worker";
    co.binding_key = "crash.OrderCreated";
    struct txo_consumer *cons = NULL;
    assert_int_equal(txo_consumer_rabbitmq_new(&co, &(struct txo_handler){.one = handle, .arg = &w},
                                               NULL, &cons, NULL),
                     0);
    int prc = 0;
    (void)poll_once(cons, 50, &prc);
    assert_int_equal(prc, 0);

    const char *args[] = {"relay",
                          "--drain",
                          "--publisher",
                          "rabbitmq",
                          "--rabbitmq-url",
                          testrabbit_shared.url,
                          "--batch-size",
                          "50",
                          "--shard-lease",
                          "1000",
                          NULL};
    char *out = NULL;
    setenv("TXO_CRASH_POINT", "relay.after_publish:1", 1);
    int status = testproc_run_txo("rabbit_relay_crash", args, 60000, &out);
    unsetenv("TXO_CRASH_POINT");
    if (status != -1)
        fail_msg("the relay should have died at the crash point, status %d; output:\n%s", status,
                 out);
    free(out);
    assert_int_equal(TESTDB_COUNT(t.db, "outbox_events WHERE status = 'PUBLISHED'"), batch);

    status = testproc_run_txo("rabbit_relay_crash2", args, 60000, &out);
    if (status != 0)
        fail_msg("the second relay run failed, status %d; output:\n%s", status, out);
    free(out);
    assert_int_equal(TESTDB_COUNT(t.db, "outbox_events WHERE status = 'PUBLISHED'"), n);

    int64_t deadline = txo_monotonic_ms() + 30000;
    while (w.calls < n + batch && txo_monotonic_ms() < deadline)
        (void)poll_once(cons, 200, &prc);
    print_message("relay crash: %u deliveries, %u effects, %u inbox duplicates\n", w.calls,
                  w.effects, w.duplicates);
    assert_int_equal(w.calls, n + batch); /* the crashed batch twice */
    assert_int_equal(w.effects, n);
    assert_int_equal(w.duplicates, batch);
    assert_int_equal(TESTDB_COUNT(t.db, "inbox_events"), n);

    size_t total = 0, dups = 0;
    assert_int_equal(drain_distinct("crash.audit", &total, &dups), n);
    assert_int_equal(dups, batch);
    txo_consumer_free(cons);
    testdb_teardown(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unroutable_dead_lettered_at_once),
        cmocka_unit_test(test_broker_hangs_then_resumes),
        cmocka_unit_test(test_broker_blocked_by_an_alarm),
        cmocka_unit_test(test_broker_killed_mid_drain),
        cmocka_unit_test(test_relay_crash_after_publish),
    };
    return cmocka_run_group_tests(tests, testrabbit_group_setup, testrabbit_group_teardown);
}
