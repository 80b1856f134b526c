/*
 * End-to-end fault tests of the order pipeline through a real NATS JetStream server (a private
 * nats-server per test, tests/support/testnats.h), with real `txo` processes:
 *
 *   worker crash  `txo relay --publisher nats` + `txo worker --broker nats --crash-point
 *                 worker.after_consume`: the worker commits the inbox rows and the sagas of its
 *                 first fetch of OrderCreated (one transaction for the fetch), then dies before
 *                 acknowledging them. The restarted worker gets them again from NATS once the
 *                 ack wait (1 s) is over; the inbox drops them: one saga, one charge, one
 *                 shipment per order.
 *   broker down   `txo up --broker nats`; nats-server stops; orders still get 201 (the outbox is in
 *                 MariaDB), their OrderCreated stay PENDING with attempts and last_error; the
 *                 server comes back on the same port and store; every order ends CONFIRMED.
 *   relay only    rows inserted into outbox_events with plain SQL, as an application in another
 *                 language would (README "Outbox table contract"); `txo relay --publisher nats
 *                 --drain` exits 0 and the stream holds each event once, Nats-Msg-Id = its
 *                 idempotency_key, the envelope as documented (read back with the library's
 *                 consumer).
 *
 * After the pipeline scenarios every invariant of the order service is checked by SQL
 * (testpipeline_check_invariants in tests/support/testpipeline.h, shared with
 * test_pipeline_crash.c, where stock conservation is stated). Each test uses its own stream,
 * subject prefix and durable.
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
#include <jansson.h>

#include "testrun.h"
#include "orders.h"
#include "testdb.h"
#include "testoutbox.h"
#include "testnats.h"
#include "testpipeline.h"
#include "testproc.h"
#include "txo/nats.h"

struct ctx {
    struct testdb t;
    struct testnats nats;
    struct testpipeline p; /* the processes, the HTTP client, their logs */
    char stream[64];       /* unique per test */
    char prefix[64];       /* subject prefix */
    char durable[64];      /* the workers' durable consumer */
};

static int setup(void **state)
{
    static unsigned seq;
    struct ctx *c = testdb_fixture_new(sizeof(*c), "pipeline_nats", TESTDB_NEW_EXPORT_ENV);
    testnats_start(&c->nats);
    testpipeline_init(&c->p, c->t.db);
    snprintf(c->stream, sizeof(c->stream), "PIPE_%ld_%u", (long)getpid(), seq);
    snprintf(c->prefix, sizeof(c->prefix), "pipe%ld_%u.events", (long)getpid(), seq);
    snprintf(c->durable, sizeof(c->durable), "pipe-worker-%ld-%u", (long)getpid(), seq);
    seq++;
    struct testpipeline_args *a = testpipeline_broker(&c->p, "nats");
    testpipeline_args_addf(a, "--nats-url=%s", c->nats.url);
    testpipeline_args_addf(a, "--nats-stream=%s", c->stream);
    testpipeline_args_addf(a, "--nats-subject-prefix=%s", c->prefix);
    testpipeline_args_addf(a, "--nats-durable=%s", c->durable);
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    testpipeline_release(&c->p);
    testnats_cleanup(&c->nats);
    testdb_fixture_free(c);
    return 0;
}

/* ---- NATS ---- */

/*
 * The stream holds every outbox event exactly once: as many messages as rows, distinct
 * Nats-Msg-Ids, each the idempotency_key of one row.
 */
static void check_stream_matches_outbox(struct ctx *c)
{
    int64_t rows = testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events");
    uint64_t msgs = testnats_stream_msgs(&c->nats, c->stream);
    if (msgs != (uint64_t)rows)
        TESTPIPELINE_FAIL(&c->p,
                          "stream %s holds %" PRIu64 " messages, the outbox %" PRId64 " events",
                          c->stream, msgs, rows);
    char **ids = NULL;
    size_t n = testnats_stream_msg_ids(&c->nats, c->stream, &ids);
    assert_int_equal(n, rows);
    size_t twice = testoutbox_check_keys(
        c->t.db, ids, n, "SELECT COUNT(*) FROM outbox_events WHERE idempotency_key = ?");
    testnats_free_ids(ids, n);
    if (twice != 0)
        TESTPIPELINE_FAIL(&c->p, "%zu events stored twice in the stream", twice);
}

/* `txo relay --drain` on the test's stream; fails unless it exits 0. */
static void drain_relay(struct ctx *c, const char *tag)
{
    static const char *const drain[] = {"--drain", NULL};
    struct testproc *relay = testpipeline_start_relay(&c->p, tag, drain, NULL);
    if (!testproc_wait(relay, 30000) || !testproc_exited_with(relay, 0))
        TESTPIPELINE_FAIL(&c->p, "%s: txo relay --drain did not exit 0 (wait status 0x%x)", tag,
                          relay->status);
}

/* ---- the worker dies between its commit and the ack ---- */

/* The messages the workers' durable was given and has not acknowledged (a testpipeline unacked). */
static int64_t ack_pending(void *arg)
{
    struct ctx *c = arg;
    return testnats_consumer_ack_pending(&c->nats, c->stream, c->durable);
}

#define ACK_CRASH_ORDERS 10

/* The workers' ack wait: a message a dead worker left unacknowledged comes back after 1 s. */
static const char *const worker_args[] = {"--nats-ack-wait=1000", NULL};

static void test_worker_crash_before_ack_nats(void **state)
{
    struct ctx *c = *state;
    static const struct testpipeline_stock stock[] = {{"pen", 1000}, {"book", 1000}};
    testpipeline_set_initial_stock(&c->p, stock, TXO_ARRAY_LEN(stock));

    /* The relay publishes every OrderCreated to JetStream; NATS delivers what the dead worker
     * left unacknowledged again, and every message (the saga events too) is acked in the end. */
    static const char *const relay_args[] = {"--idle-sleep=50", NULL};
    struct testpipeline_ack_crash ac = {.tag = "ackcrash",
                                        .n_orders = ACK_CRASH_ORDERS,
                                        .books = true,
                                        .relay_args = relay_args,
                                        .worker_args = worker_args,
                                        .unacked = ack_pending,
                                        .arg = c};
    testpipeline_ack_crash(&c->p, &ac);
    testpipeline_stop_clean(&c->p, ac.worker);
    testpipeline_stop_clean(&c->p, ac.relay);

    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"),
                     ACK_CRASH_ORDERS);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM saga_instances"), ACK_CRASH_ORDERS);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM payments WHERE status = 'CHARGED'"),
                     ACK_CRASH_ORDERS);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM shipments WHERE status = 'CREATED'"),
                     ACK_CRASH_ORDERS);
    testpipeline_check_invariants(&c->p, stock, TXO_ARRAY_LEN(stock));
    check_stream_matches_outbox(c);
    testpipeline_remove_logs(&c->p);
}

/* ---- the broker is down while orders come in ---- */

#define OUTAGE_ORDERS 10

static void test_broker_outage_end_to_end_nats(void **state)
{
    struct ctx *c = *state;
    static const struct testpipeline_stock stock[] = {{"pen", 1000}, {"book", 1000}};
    testpipeline_set_initial_stock(&c->p, stock, TXO_ARRAY_LEN(stock));

    /* A short publish timeout and backoff, and no dead letter during the outage. */
    static const char *const outage_args[] = {"--nats-ack-timeout=1000", "--backoff-base=100",
                                              "--backoff-max=1000", "--max-attempts=1000", NULL};
    unsigned port;
    struct testproc *up = testpipeline_start_up(&c->p, "d_up", outage_args, &port);

    /* One order end to end while the broker is up: stream and durable exist. */
    testpipeline_place_orders(&c->p, port, "d-warm", 1, true);
    testpipeline_wait_confirmed(&c->p, 1, 30000, "through NATS");

    /* Broker down: the API still answers 201, the events wait in the outbox. */
    testchild_server_stop(&c->nats.srv);
    testpipeline_place_orders_broker_down(&c->p, port, OUTAGE_ORDERS, true);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM inbox_events"), 1);

    /* Back on the same port and store: everything is delivered. */
    testchild_server_restart(&c->nats.srv);
    int64_t ms =
        testpipeline_wait_confirmed(&c->p, OUTAGE_ORDERS + 1, 30000, "after the broker came back");
    print_message("all orders CONFIRMED %" PRId64 " ms after the broker came back\n", ms);
    testpipeline_wait_published(&c->p, 30000);
    testpipeline_stop_clean(&c->p, up);
    assert_int_equal(testdb_q(c->t.db,
                              "SELECT COUNT(*) FROM outbox_events WHERE published_at IS NULL "
                              "OR locked_by IS NOT NULL"),
                     0);
    testpipeline_check_invariants(&c->p, stock, TXO_ARRAY_LEN(stock));
    check_stream_matches_outbox(c);
    testpipeline_remove_logs(&c->p);
}

/* ---- `txo relay` alone, for applications in other languages ---- */

struct received {
    char subject[160];
    char msg_id[160];
    char *data;
};

struct reader {
    struct received got[16];
    size_t n;
};

static int record(void *arg, const struct txo_inbound_message *msg, struct txo_error *err)
{
    struct reader *r = arg;
    if (r->n == TXO_ARRAY_LEN(r->got))
        return txo_error_set(err, TXO_EINVAL, "too many messages");
    struct received *m = &r->got[r->n++];
    snprintf(m->subject, sizeof(m->subject), "%s", msg->subject ? msg->subject : "(null)");
    snprintf(m->msg_id, sizeof(m->msg_id), "%s", msg->msg_id ? msg->msg_id : "(null)");
    m->data = txo_malloc(msg->len + 1);
    if (m->data == NULL)
        return txo_error_set(err, TXO_ENOMEM, "copy");
    memcpy(m->data, msg->data, msg->len);
    m->data[msg->len] = '\0';
    return 0;
}

/* What another application inserts, and the subject token its event_type becomes. */
static const struct {
    const char *aggregate_type;
    int64_t aggregate_id;
    const char *event_type;
    const char *subject_type;
    const char *payload;
    const char *key;
} foreign[] = {
    {"invoice", 7, "InvoiceIssued", "InvoiceIssued",
     "{\"invoice_id\":7,\"amount\":{\"cents\":1250,\"currency\":\"EUR\"},\"lines\":[1,2]}",
     "invoice:7:issued"},
    {"invoice", 7, "Invoice.Paid", "Invoice_Paid", "{\"invoice_id\":7,\"paid\":true}",
     "invoice:7:paid"},
    {"customer", 42, "CustomerRenamed", "CustomerRenamed",
     "{\"customer_id\":42,\"name\":\"Zo\\u00eb \\u5f20\"}", "customer:42:renamed:1"},
};

static void test_relay_only_foreign_rows_nats(void **state)
{
    struct ctx *c = *state;
    /* Plain SQL as in README, each row in a transaction of its own (txo_db_exec is only the
     * means of sending it); next_attempt_at left to its default (this session is UTC) except
     * for the last row, which sets it explicitly as the README suggests for non-UTC sessions. */
    for (size_t i = 0; i < TXO_ARRAY_LEN(foreign); i++) {
        struct txo_param p[] = {txo_p_str(foreign[i].aggregate_type),
                                txo_p_i64(foreign[i].aggregate_id),
                                txo_p_str(foreign[i].event_type), txo_p_str(foreign[i].payload),
                                txo_p_str(foreign[i].key)};
        bool explicit_due = i + 1 == TXO_ARRAY_LEN(foreign);
        struct txo_error err;
        txo_error_init(&err);
        if (txo_db_exec(c->t.db,
                        explicit_due
                            ? "INSERT INTO outbox_events (aggregate_type, aggregate_id, "
                              "event_type, payload, idempotency_key, next_attempt_at) VALUES "
                              "(?, ?, ?, ?, ?, UTC_TIMESTAMP(6))"
                            : "INSERT INTO outbox_events (aggregate_type, aggregate_id, "
                              "event_type, payload, idempotency_key) VALUES (?, ?, ?, ?, ?)",
                        p, TXO_ARRAY_LEN(p), NULL, &err) != 0)
            fail_msg("insert: %s", err.msg);
    }

    drain_relay(c, "relay_only");
    assert_int_equal(testdb_q(c->t.db,
                              "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED' AND "
                              "published_at IS NOT NULL AND attempts = 0 AND last_error IS NULL"),
                     TXO_ARRAY_LEN(foreign));

    /* The stream, with the idempotency keys as message ids, each once and each aggregate's
     * events in outbox order (the relay orders by aggregate: the heads of both aggregates go in
     * the first batch, invoice 7's second event in the next). */
    char **ids = NULL;
    size_t n = testnats_stream_msg_ids(&c->nats, c->stream, &ids);
    assert_int_equal(n, TXO_ARRAY_LEN(foreign));
    size_t pos[TXO_ARRAY_LEN(foreign)];
    for (size_t k = 0; k < TXO_ARRAY_LEN(foreign); k++) {
        pos[k] = n;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(ids[i], foreign[k].key) == 0)
                pos[k] = i;
        }
        if (pos[k] == n)
            fail_msg("%s is not in the stream", foreign[k].key);
    }
    assert_true(pos[0] < pos[1]); /* invoice:7:issued before invoice:7:paid */
    testnats_free_ids(ids, n);

    /* Read back with the library's consumer, as a subscriber would. */
    struct txo_nats_opts o;
    txo_nats_opts_init(&o);
    o.url = c->nats.url;
    o.stream = c->stream;
    o.subject_prefix = c->prefix;
    o.durable = "relay-only-reader";
    struct txo_consumer *cons = NULL;
    struct reader r;
    memset(&r, 0, sizeof(r));
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_nats_new(&o, &(struct txo_handler){.one = record, .arg = &r}, &cons, &err) !=
        0)
        fail_msg("txo_consumer_nats_new: %s", err.msg);
    int64_t deadline = txo_monotonic_ms() + 10000;
    while (r.n < TXO_ARRAY_LEN(foreign) && txo_monotonic_ms() < deadline) {
        size_t handled = 0;
        txo_error_init(&err);
        if (txo_consumer_poll(cons, 16, 500, &handled, &err) != 0)
            fail_msg("txo_consumer_poll: %s", err.msg);
    }
    txo_consumer_free(cons);
    assert_int_equal(r.n, TXO_ARRAY_LEN(foreign));

    for (size_t i = 0; i < r.n; i++) {
        struct received *m = &r.got[i];
        /* The row this message came from, by its key (the order across aggregates is the
         * relay's, see above). */
        size_t k = 0;
        while (k + 1 < TXO_ARRAY_LEN(foreign) && strcmp(m->msg_id, foreign[k].key) != 0)
            k++;
        char subject[160];
        snprintf(subject, sizeof(subject), "%s.%s.%s", c->prefix, foreign[k].aggregate_type,
                 foreign[k].subject_type);
        assert_string_equal(m->msg_id, foreign[k].key);
        assert_string_equal(m->subject, subject);
        json_error_t jerr;
        json_t *env = json_loads(m->data, 0, &jerr);
        if (env == NULL)
            fail_msg("message %zu is not JSON (%s): %s", i, jerr.text, m->data);
        struct txo_param kp = txo_p_str(foreign[k].key);
        int64_t id =
            testdb_i64(c->t.db, "SELECT id FROM outbox_events WHERE idempotency_key = ?", &kp, 1);
        assert_int_equal(json_integer_value(json_object_get(env, "id")), id);
        assert_string_equal(json_string_value(json_object_get(env, "type")), foreign[k].event_type);
        assert_string_equal(json_string_value(json_object_get(env, "aggregate_type")),
                            foreign[k].aggregate_type);
        char agg[24];
        snprintf(agg, sizeof(agg), "%" PRId64, foreign[k].aggregate_id);
        assert_string_equal(json_string_value(json_object_get(env, "aggregate_id")), agg);
        assert_string_equal(json_string_value(json_object_get(env, "idempotency_key")),
                            foreign[k].key);
        assert_int_equal(json_integer_value(json_object_get(env, "attempt")), 1);
        const char *created = json_string_value(json_object_get(env, "created_at"));
        assert_non_null(created);
        assert_int_equal(strlen(created), strlen("2026-11-30T15:37:00.123456Z"));
        assert_int_equal(created[strlen(created) - 1], 'Z');
        json_t *want = json_loads(foreign[k].payload, 0, &jerr);
        assert_non_null(want);
        if (!json_equal(json_object_get(env, "payload"), want)) {
            char *got = json_dumps(json_object_get(env, "payload"), JSON_COMPACT);
            fail_msg("payload of %s: got %s, want %s", foreign[k].key, got ? got : "(none)",
                     foreign[k].payload);
        }
        json_decref(want);
        json_decref(env);
        txo_free(m->data);
        m->data = NULL;
    }

    /* A second drain finds nothing to do and publishes nothing again. */
    drain_relay(c, "relay_only_again");
    assert_int_equal(testnats_stream_msgs(&c->nats, c->stream), TXO_ARRAY_LEN(foreign));
    testpipeline_remove_logs(&c->p);
}

/*
 * Scale-out: every daemon as its own process, two of each, against one database and one
 * JetStream stream (the two workers share the durable consumer). Orders arrive through both
 * APIs; each is consumed exactly once across the workers (the inbox), every saga ends, and
 * the invariants hold.
 */
#define SCALE_ORDERS 60

static unsigned start_daemon(struct ctx *c, const char *tag, const char *sub,
                             const char *const *extra, bool nats)
{
    unsigned port = testproc_free_port();
    struct testpipeline_args a;
    if (nats)
        testpipeline_args_daemon(&c->p, &a, sub);
    else
        testpipeline_args_init(&a, sub);
    for (size_t i = 0; extra[i] != NULL; i++)
        testpipeline_args_add(&a, extra[i]);
    testpipeline_args_addf(
        &a, strcmp(sub, "serve") == 0 ? "--listen=127.0.0.1:%u" : "--metrics-listen=127.0.0.1:%u",
        port);
    struct testproc *p = testpipeline_start(&c->p, tag, &a);
    testpipeline_wait_ready(&c->p, p, port);
    return port;
}

static void test_two_of_each_daemon_nats(void **state)
{
    struct ctx *c = *state;
    static const struct testpipeline_stock stock[] = {{"pen", 1000}, {"book", 1000}};
    testpipeline_set_initial_stock(&c->p, stock, TXO_ARRAY_LEN(stock));

    static const char *const none[] = {NULL};
    static const char *const relay[] = {"--batch-size=5", "--idle-sleep=20", NULL};
    static const char *const worker[] = {"--poll=50", "--saga-threads=2", NULL};
    unsigned api[2], workers[2];
    for (int i = 0; i < 2; i++) {
        api[i] = start_daemon(c, i == 0 ? "scale_serve1" : "scale_serve2", "serve", none, false);
        (void)start_daemon(c, i == 0 ? "scale_relay1" : "scale_relay2", "relay", relay, true);
        workers[i] =
            start_daemon(c, i == 0 ? "scale_worker1" : "scale_worker2", "worker", worker, true);
    }
    for (int i = 0; i < 2; i++)
        testpipeline_place_orders(&c->p, api[i], i == 0 ? "scale-a" : "scale-b", SCALE_ORDERS / 2,
                                  true);
    testpipeline_wait_terminal(&c->p, SCALE_ORDERS, 60000, "with two of each daemon");
    testpipeline_wait_published(&c->p, 30000);

    double consumed = 0;
    for (int i = 0; i < 2; i++) {
        double n = testpipeline_metric(&c->p, workers[i], "txo_inbox_consumed_total");
        print_message("worker %d consumed %.0f OrderCreated events\n", i + 1, n);
        consumed += n;
    }
    if (consumed != SCALE_ORDERS)
        TESTPIPELINE_FAIL(&c->p, "the workers consumed %.0f events in all, want %d (each once)",
                          consumed, SCALE_ORDERS);
    for (size_t i = 0; i < c->p.n_procs; i++)
        testpipeline_stop_clean(&c->p, &c->p.procs[i]);
    testpipeline_check_invariants(&c->p, stock, TXO_ARRAY_LEN(stock));
    check_stream_matches_outbox(c);
    testpipeline_remove_logs(&c->p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_crash_before_ack_nats),
        cmocka_unit_test(test_broker_outage_end_to_end_nats),
        cmocka_unit_test(test_relay_only_foreign_rows_nats),
        cmocka_unit_test(test_two_of_each_daemon_nats),
    };
    int rc = testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
    return rc;
}
