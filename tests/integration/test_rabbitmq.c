/*
 * The RabbitMQ transport against a real broker (tests/support/testrabbit.h, one private
 * rabbitmq-server for the whole binary, each test on its own queues):
 *   - routing keys are sanitised;
 *   - a published batch reaches a bound queue with the documented properties and headers
 *     (persistent, message_id = idempotency key, type, content_type, txo-* headers, the
 *     envelope as body);
 *   - a message no queue is bound for comes back (mandatory) and fails permanently, while the
 *     rest of its batch is confirmed;
 *   - the consumer acks after the handler (the inbox transaction) committed, delays a
 *     transient failure through the retry queue, dead-letters a permanent one into
 *     <queue>.dlq, and a message delivered twice has one effect through the inbox;
 *   - the batch consumer hands what is waiting to its handler in few calls, each message once,
 *     and settles a delivery of mixed verdicts message by message (ack, retry, dead letter);
 *   - a consumer the broker cancels (its queue deleted) is told at once, declares the queue
 *     again and consumes on.
 *
 * The contracts every transport keeps (publish, order, consume, restart, CloudEvents) are in
 * tests/conformance. What reached the queues is read with pika (rabbit_client.py), not with our
 * code or rabbitmq-c; consumer input is published with pika too.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "testdb.h"
#include "testproc.h"
#include "testbatch.h"
#include "testinbox.h"
#include "testrabbit.h"
#include "testrelay.h"
#include "txo/consumer.h"
#include "txo/inbox.h"
#include "txo/outbox.h"
#include "txo/rabbitmq.h"

#define EXCHANGE "txo.events"

static void opts(struct txo_rabbitmq_opts *o)
{
    testrabbit_opts(o, 2000, 5000);
}

static struct txo_publisher *new_publisher(void)
{
    struct txo_rabbitmq_opts o;
    opts(&o);
    return testrabbit_publisher(&o);
}

/* Every message of queue, drained with pika: a JSON array of objects (json_decref). */
static json_t *drain(const char *queue)
{
    char *out = testrabbit_client(&testrabbit_shared, "drain", queue, "0.7", NULL);
    json_t *all = json_array();
    char *save = NULL;
    for (char *line = strtok_r(out, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        json_error_t je;
        json_t *m = json_loads(line, 0, &je);
        if (m == NULL)
            fail_msg("drain %s: not JSON (%s): %s", queue, je.text, line);
        json_array_append_new(all, m);
    }
    free(out);
    return all;
}

static const char *jstr(json_t *obj, const char *path1, const char *path2)
{
    json_t *v = json_object_get(obj, path1);
    if (path2 != NULL)
        v = json_object_get(v, path2);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/*
 * A consumer's queues at the end: queue and queue.retry empty, and queue.dlq holding one
 * message, message_id, rejected from queue.
 */
static void assert_one_dead(const char *queue, const char *message_id)
{
    char name[64];
    assert_int_equal(testrabbit_count(&testrabbit_shared, queue), 0);
    snprintf(name, sizeof(name), "%s.retry", queue);
    assert_int_equal(testrabbit_count(&testrabbit_shared, name), 0);
    snprintf(name, sizeof(name), "%s.dlq", queue);
    json_t *dead = drain(name);
    assert_int_equal(json_array_size(dead), 1);
    json_t *d0 = json_array_get(dead, 0);
    assert_string_equal(jstr(d0, "message_id", NULL), message_id);
    json_t *xdeath = json_object_get(json_object_get(d0, "headers"), "x-death");
    assert_true(json_is_array(xdeath));
    assert_string_equal(jstr(json_array_get(xdeath, 0), "reason", NULL), "rejected");
    assert_string_equal(jstr(json_array_get(xdeath, 0), "queue", NULL), queue);
    json_decref(dead);
}

/* ---- messages ---- */

/* Messages 1..n, key "<prefix>:<id>", of aggregate type agg_type. */
static void batch_init(struct testbatch *b, size_t n, const char *prefix, const char *agg_type)
{
    testbatch_init(b, n, 1, prefix);
    for (size_t i = 0; i < n; i++)
        b->msgs[i].aggregate_type = agg_type;
}

/* ---- (1) routing keys ---- */

static void test_routing_key_sanitising(void **state)
{
    (void)state;
    char out[300];
    assert_int_equal(txo_rabbitmq_routing_key("order", "OrderCreated", out, sizeof(out), NULL), 0);
    assert_string_equal(out, "order.OrderCreated");
    assert_int_equal(txo_rabbitmq_routing_key("pay.ment v2", "A*B#", out, sizeof(out), NULL), 0);
    assert_string_equal(out, "pay_ment_v2.A_B_");
    assert_int_equal(txo_rabbitmq_routing_key("", "", out, sizeof(out), NULL), 0);
    assert_string_equal(out, "_._");
    char small[8];
    assert_int_equal(txo_rabbitmq_routing_key("order", "OrderCreated", small, sizeof(small), NULL),
                     TXO_EINVAL);
    assert_string_equal(small, "");
    char longer[300];
    memset(longer, 'a', 299);
    longer[299] = '\0';
    assert_int_equal(txo_rabbitmq_routing_key(longer, "x", out, sizeof(out), NULL), TXO_EINVAL);

    struct txo_rabbitmq_opts o;
    txo_rabbitmq_opts_init(&o);
    o.prefetch = 0;
    struct txo_consumer *cons = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_consumer_rabbitmq_new(
                         &o, &(struct txo_handler){.one = (txo_message_handler_fn)1, .arg = NULL},
                         NULL, &cons, &err),
                     TXO_EINVAL);
    assert_non_null(strstr(err.msg, "prefetch"));
    txo_rabbitmq_opts_init(&o);
    o.url = "http://nope";
    struct txo_publisher *pub = NULL;
    assert_int_equal(txo_publisher_rabbitmq_new(&o, NULL, &pub, &err), TXO_EINVAL);
    assert_null(pub);
}

/* ---- (2) properties and headers ---- */

static void test_published_properties(void **state)
{
    (void)state;
    char *o = testrabbit_client(&testrabbit_shared, "declare", "props", EXCHANGE, "order.#", NULL);
    free(o);
    struct txo_publisher *pub = new_publisher();
    struct testbatch b;
    batch_init(&b, 5, "props", "order");
    assert_int_equal(testbatch_publish(pub, &b), 0);
    testbatch_assert_published(&b);

    json_t *got = drain("props");
    assert_int_equal(json_array_size(got), 5);
    for (size_t i = 0; i < 5; i++) {
        json_t *m = json_array_get(got, i);
        char key[32];
        snprintf(key, sizeof(key), "props:%zu", i + 1);
        assert_string_equal(jstr(m, "message_id", NULL), key);
        assert_string_equal(jstr(m, "type", NULL), "OrderCreated");
        assert_string_equal(jstr(m, "content_type", NULL), "application/json");
        assert_string_equal(jstr(m, "routing_key", NULL), "order.OrderCreated");
        assert_string_equal(jstr(m, "exchange", NULL), EXCHANGE);
        assert_string_equal(jstr(m, "app_id", NULL), "txo");
        assert_int_equal(json_integer_value(json_object_get(m, "delivery_mode")), 2);
        assert_true(json_integer_value(json_object_get(m, "timestamp")) > 1700000000);
        assert_string_equal(jstr(m, "headers", "txo-aggregate-type"), "order");
        assert_string_equal(jstr(m, "headers", "txo-aggregate-id"), b.aggs[i]);
        assert_int_equal(
            json_integer_value(json_object_get(json_object_get(m, "headers"), "txo-event-id")),
            (json_int_t)i + 1);
        struct txo_event ev;
        struct txo_error err;
        txo_error_init(&err);
        const char *body = jstr(m, "body", NULL);
        if (txo_envelope_decode(body, strlen(body), &ev, &err) < 0)
            fail_msg("body is not the envelope: %s: %s", err.msg, body);
        assert_string_equal(ev.idempotency_key, key);
        assert_string_equal(ev.aggregate_type, "order");
        txo_event_release(&ev);
    }
    json_decref(got);
    testbatch_free(&b);
    txo_publisher_free(pub);
}

/* ---- (3) unroutable: returned, permanent ---- */

static void test_unroutable_is_permanent(void **state)
{
    (void)state;
    char *o =
        testrabbit_client(&testrabbit_shared, "declare", "routed", EXCHANGE, "routed.*", NULL);
    free(o);
    struct txo_publisher *pub = new_publisher();
    struct testbatch b;
    batch_init(&b, 6, "route", "routed");
    b.msgs[2].aggregate_type = "nobody";
    b.msgs[4].aggregate_type = "nobody";
    assert_int_equal(testbatch_publish(pub, &b), 0);
    for (size_t i = 0; i < b.n; i++) {
        if (i == 2 || i == 4) {
            assert_int_equal(b.results[i], TXO_ECONFIG);
            assert_false(txo_err_is_transient(b.results[i]));
            assert_non_null(strstr(b.errors[i].msg, "no queue bound"));
            assert_non_null(strstr(b.errors[i].msg, "NO_ROUTE"));
        } else if (b.results[i] != 0) {
            fail_msg("message %zu: %d %s", i, b.results[i], b.errors[i].msg);
        }
    }
    /* The same connection goes on working. */
    b.msgs[2].aggregate_type = "routed";
    b.msgs[4].aggregate_type = "routed";
    assert_int_equal(testbatch_publish(pub, &b), 0);
    testbatch_assert_published(&b);
    assert_int_equal(testrabbit_count(&testrabbit_shared, "routed"), 10);
    txo_publisher_free(pub);

    /* mandatory off: RabbitMQ confirms and drops what no queue takes. */
    struct txo_rabbitmq_opts o2;
    opts(&o2);
    o2.mandatory = false;
    assert_int_equal(txo_publisher_rabbitmq_new(&o2, NULL, &pub, NULL), 0);
    b.msgs[2].aggregate_type = "nobody";
    assert_int_equal(testbatch_publish(pub, &b), 0);
    testbatch_assert_published(&b);
    assert_int_equal(testrabbit_count(&testrabbit_shared, "routed"), 15);
    testbatch_free(&b);
    txo_publisher_free(pub);
}

static void test_server_down_fails_fast(void **state)
{
    (void)state;
    struct txo_rabbitmq_opts o;
    opts(&o);
    char url[96];
    snprintf(url, sizeof(url), "amqp://guest:guest@127.0.0.1:%u/", testproc_free_port());
    o.url = url;
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_publisher_rabbitmq_new(&o, NULL, &pub, &err), 0); /* lazy connect */
    struct testbatch b;
    batch_init(&b, 3, "down", "order");
    int64_t t0 = txo_monotonic_ms();
    assert_int_equal(testbatch_publish(pub, &b), 0);
    assert_true(txo_monotonic_ms() - t0 < 1000);
    for (size_t i = 0; i < b.n; i++) {
        assert_int_equal(b.results[i], TXO_EUNAVAILABLE);
        assert_non_null(strstr(b.errors[i].msg, "cannot connect"));
        assert_null(strstr(b.errors[i].msg, "guest")); /* never the credentials */
    }
    txo_publisher_free(pub);
    o.connect_required = true;
    assert_int_equal(txo_publisher_rabbitmq_new(&o, NULL, &pub, &err), TXO_EUNAVAILABLE);
    testbatch_free(&b);
}

/* ---- (4) the relay: 10,000 events, per-aggregate order ---- */

/*
 * 4 events per aggregate: the ordered claim's cost grows with the backlog behind each head
 * (txo/relay.h), and 200 per aggregate made this drain take minutes on a loaded machine. The
 * order is checked all the same: every aggregate has 4 events that must arrive in id order.
 */
#define RELAY_EVENTS     10000
#define RELAY_AGGREGATES 2500

/* ---- (5) the consumer ---- */

struct handler_ctx {
    struct txo_db *db;
    const char *transient_id; /* fails on its first delivery */
    const char *permanent_id; /* always fails with TXO_EINVAL */
    int64_t transient_first_ms, transient_second_ms;
    uint64_t transient_second_delivery;
    unsigned calls, effects, duplicates;
    uint64_t last_delivery;
    char last_ce_type[64];
};

/* Records the message in the inbox (the effect), committing before it returns 0. */
static int handle(void *arg, const struct txo_inbound_message *msg, struct txo_error *err)
{
    struct handler_ctx *h = arg;
    h->calls++;
    h->last_delivery = msg->delivery;
    if (msg->msg_id == NULL)
        return txo_error_set(err, TXO_EINVAL, "no message id");
    if (h->permanent_id != NULL && strcmp(msg->msg_id, h->permanent_id) == 0)
        return txo_error_set(err, TXO_EINVAL, "payload rejected by the test");
    if (h->transient_id != NULL && strcmp(msg->msg_id, h->transient_id) == 0) {
        if (h->transient_first_ms == 0) {
            h->transient_first_ms = txo_monotonic_ms();
            return txo_error_set(err, TXO_EUNAVAILABLE, "downstream away (test)");
        }
        h->transient_second_ms = txo_monotonic_ms();
        h->transient_second_delivery = msg->delivery;
    }
    bool duplicate = false;
    int rc = testinbox_record(h->db, msg, "OrderCreated", &duplicate, err);
    if (rc < 0)
        return rc;
    if (duplicate)
        h->duplicates++;
    else
        h->effects++;
    return 0;
}

static void pika_publish(const char *key, const char *id, const char *body)
{
    char *o = testrabbit_client(&testrabbit_shared, "publish", EXCHANGE, key, id, body, NULL);
    free(o);
}

static void poll_until(struct txo_consumer *cons, unsigned *counter, unsigned want,
                       int64_t within_ms)
{
    int64_t deadline = txo_monotonic_ms() + within_ms;
    while (*counter < want && txo_monotonic_ms() < deadline) {
        size_t handled = 0;
        struct txo_error err;
        txo_error_init(&err);
        int rc = txo_consumer_poll(cons, 10, 200, &handled, &err);
        if (rc < 0)
            fail_msg("poll: %s (%s)", err.msg, txo_err_name(rc));
    }
    if (*counter < want)
        fail_msg("only %u of %u within %" PRId64 " ms", *counter, want, within_ms);
}

static void test_consumer_ack_retry_dead_letter(void **state)
{
    (void)state;
    struct testdb t;
    testdb_setup(&t, "rabbit_consumer");
    struct handler_ctx h = {.db = t.db, .transient_id = "c:2", .permanent_id = "c:3"};
    struct txo_rabbitmq_opts o;
    opts(&o);
    o.queue = "cons";
    o.binding_key = "order.OrderCreated";
    o.prefetch = 5;
    o.retry_delay_ms = 700;
    struct txo_metrics *metrics = NULL;
    assert_int_equal(txo_metrics_new(&metrics, NULL), 0);
    struct txo_consumer *cons = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_rabbitmq_new(&o, &(struct txo_handler){.one = handle, .arg = &h}, metrics,
                                  &cons, &err) < 0)
        fail_msg("txo_consumer_rabbitmq_new: %s", err.msg);
    assert_string_equal(txo_consumer_name(cons), "rabbitmq");
    size_t handled = 0;
    assert_int_equal(txo_consumer_poll(cons, 10, 50, &handled, NULL), 0); /* declares */

    pika_publish("order.OrderCreated", "c:1", "{\"id\":1,\"type\":\"OrderCreated\"}");
    pika_publish("order.OrderCreated", "c:2", "{\"id\":2,\"type\":\"OrderCreated\"}");
    pika_publish("order.OrderCreated", "c:3", "{\"id\":3,\"type\":\"OrderCreated\"}");
    pika_publish("order.OrderCreated", "c:1", "{\"id\":1,\"type\":\"OrderCreated\"}"); /* dup */

    /* c:1 twice (one effect), c:2 failed then redelivered after the delay, c:3 rejected. */
    poll_until(cons, &h.calls, 5, 15000);
    assert_int_equal(h.effects, 2); /* c:1 and c:2 */
    assert_int_equal(h.duplicates, 1);
    assert_int_equal(testdb_i64(t.db, "SELECT COUNT(*) FROM inbox_events", NULL, 0), 2);
    assert_true(h.transient_second_ms - h.transient_first_ms >= 700);
    assert_int_equal(h.transient_second_delivery, 2);
    print_message("transient failure redelivered after %" PRId64 " ms (delay 700 ms)\n",
                  h.transient_second_ms - h.transient_first_ms);

    /* Nothing left anywhere but the permanent failure in the dead-letter queue. */
    txo_sleep_ms(300);
    assert_int_equal(txo_consumer_poll(cons, 10, 300, &handled, NULL), 0);
    assert_int_equal(handled, 0);
    assert_one_dead("cons", "c:3");

    /* The metrics counted each outcome. */
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(txo_metrics_render(metrics, &text, &len, NULL), 0);
    assert_non_null(strstr(text, "txo_rabbitmq_consumed_total{outcome=\"ack\"} 3"));
    assert_non_null(strstr(text, "txo_rabbitmq_consumed_total{outcome=\"retry\"} 1"));
    assert_non_null(strstr(text, "txo_rabbitmq_consumed_total{outcome=\"dead_letter\"} 1"));
    txo_free(text);

    txo_consumer_free(cons);
    txo_metrics_free(metrics);
    testdb_teardown(&t);
}

/* Commits the effect through handle(), then dies before the consumer can ack. */
static int handle_then_crash(void *arg, const struct txo_inbound_message *msg,
                             struct txo_error *err)
{
    int rc = handle(arg, msg, err);
    _exit(rc == 0 ? 42 : 43);
}

/*
 * The ack comes only after the commit: a worker killed between its commit and its ack leaves
 * the message unacknowledged; RabbitMQ redelivers it (redelivered, delivery 2) to the next
 * consumer, and the inbox turns the second delivery into no effect.
 */
static void test_crash_between_commit_and_ack(void **state)
{
    (void)state;
    struct testdb t;
    testdb_setup(&t, "rabbit_crash");
    struct txo_rabbitmq_opts o;
    opts(&o);
    o.queue = "crash";
    o.binding_key = "crash.*";
    struct handler_ctx h = {.db = t.db};
    struct txo_consumer *cons = NULL;
    assert_int_equal(txo_consumer_rabbitmq_new(&o, &(struct txo_handler){.one = handle, .arg = &h},
                                               NULL, &cons, NULL),
                     0);
    size_t handled = 0;
    assert_int_equal(txo_consumer_poll(cons, 10, 50, &handled, NULL), 0); /* declares */
    txo_consumer_free(cons);
    pika_publish("crash.X", "x:1", "{\"id\":1}");

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct handler_ctx ch = {.db = testdb_connect(&t)};
        struct txo_consumer *cc = NULL;
        if (txo_consumer_rabbitmq_new(&o,
                                      &(struct txo_handler){.one = handle_then_crash, .arg = &ch},
                                      NULL, &cc, NULL) < 0)
            _exit(2);
        for (int i = 0; i < 50; i++) {
            size_t n = 0;
            if (txo_consumer_poll(cc, 10, 200, &n, NULL) < 0)
                txo_sleep_ms(50);
        }
        _exit(3); /* the message never came */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 42); /* committed, then died before the ack */
    assert_int_equal(testdb_i64(t.db, "SELECT COUNT(*) FROM inbox_events", NULL, 0), 1);

    unsigned calls_before = h.calls;
    assert_int_equal(txo_consumer_rabbitmq_new(&o, &(struct txo_handler){.one = handle, .arg = &h},
                                               NULL, &cons, NULL),
                     0);
    poll_until(cons, &h.calls, (unsigned)calls_before + 1, 10000);
    assert_int_equal(h.duplicates, 1);
    assert_int_equal(h.effects, 0);
    assert_int_equal(h.last_delivery, 2); /* redelivered by RabbitMQ */
    assert_int_equal(testdb_i64(t.db, "SELECT COUNT(*) FROM inbox_events", NULL, 0), 1);
    txo_consumer_free(cons);
    assert_int_equal(testrabbit_count(&testrabbit_shared, "crash"), 0);
    assert_int_equal(testrabbit_count(&testrabbit_shared, "crash.dlq"), 0);
    testdb_teardown(&t);
}

/* ---- (6) the batch consumer ---- */

struct batch_ctx {
    struct handler_ctx h; /* each message's verdict and effect, as handle() */
    unsigned batch_calls;
    size_t first_batch, largest; /* messages of the first call, of the largest */
};

/* Handles the delivery as handle() would each message, counting the calls. */
static int handle_batch(void *arg, const struct txo_inbound_message *msgs, size_t n, int *results,
                        struct txo_error *errors)
{
    struct batch_ctx *b = arg;
    if (b->batch_calls++ == 0)
        b->first_batch = n;
    if (n > b->largest)
        b->largest = n;
    for (size_t i = 0; i < n; i++)
        results[i] = handle(&b->h, &msgs[i], &errors[i]);
    return 0;
}

static struct txo_consumer *new_batch_consumer(struct txo_rabbitmq_opts *o, struct batch_ctx *b)
{
    struct txo_consumer *cons = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_rabbitmq_new(o, &(struct txo_handler){.batch = handle_batch, .arg = b}, NULL,
                                  &cons, &err) < 0)
        fail_msg("txo_consumer_rabbitmq_new: %s", err.msg);
    return cons;
}

/*
 * Twenty messages waiting in the queue reach the batch handler in fewer calls than messages,
 * each once, and are all acknowledged: nothing comes back once the consumer is gone.
 */
static void test_batch_consumer_takes_what_is_waiting(void **state)
{
    (void)state;
    struct testdb t;
    testdb_setup(&t, "rabbit_batch");
    struct batch_ctx b = {.h = {.db = t.db}};
    struct txo_rabbitmq_opts o;
    opts(&o);
    o.queue = "batch";
    o.binding_key = "batch.*";
    struct txo_consumer *cons = new_batch_consumer(&o, &b); /* declares: the server is up */
    struct txo_consumer *none = NULL;
    assert_int_equal(txo_consumer_rabbitmq_new(&o, &(struct txo_handler){.batch = NULL, .arg = &b},
                                               NULL, &none, NULL),
                     TXO_EINVAL);
    assert_null(none);
    enum { N = 20 };
    for (int i = 1; i <= N; i++) {
        char id[16], body[48];
        snprintf(id, sizeof(id), "b:%d", i);
        snprintf(body, sizeof(body), "{\"id\":%d,\"type\":\"OrderCreated\"}", i);
        pika_publish("batch.OrderCreated", id, body);
    }
    poll_until(cons, &b.h.calls, N, 15000);
    print_message("%d messages in %u batch handler calls (largest %zu)\n", N, b.batch_calls,
                  b.largest);
    assert_true(b.batch_calls < N);
    assert_true(b.largest > 1);
    assert_int_equal(b.h.calls, N);
    assert_int_equal(b.h.effects, N);
    assert_int_equal(b.h.duplicates, 0);
    assert_int_equal(testdb_i64(t.db, "SELECT COUNT(DISTINCT event_id) FROM inbox_events", NULL, 0),
                     N);
    size_t handled = 0;
    assert_int_equal(txo_consumer_poll(cons, 100, 300, &handled, NULL), 0);
    assert_int_equal(handled, 0);
    /* Unacknowledged deliveries would go back to the queue when the connection closes. */
    txo_consumer_free(cons);
    assert_int_equal(testrabbit_count(&testrabbit_shared, "batch"), 0);
    assert_int_equal(testrabbit_count(&testrabbit_shared, "batch.retry"), 0);
    assert_int_equal(testrabbit_count(&testrabbit_shared, "batch.dlq"), 0);
    testdb_teardown(&t);
}

/*
 * One delivery with every verdict: the transient failure waits in <queue>.retry and comes back
 * after the delay, the permanent one lands in <queue>.dlq, the rest are acknowledged.
 */
static void test_batch_consumer_mixed_verdicts(void **state)
{
    (void)state;
    struct testdb t;
    testdb_setup(&t, "rabbit_batch_mixed");
    struct batch_ctx b = {.h = {.db = t.db, .transient_id = "m:2", .permanent_id = "m:4"}};
    struct txo_rabbitmq_opts o;
    opts(&o);
    o.queue = "bmix";
    o.binding_key = "bmix.*";
    o.retry_delay_ms = 2000;
    struct txo_consumer *cons = new_batch_consumer(&o, &b);
    for (int i = 1; i <= 5; i++) {
        char id[16], body[48];
        snprintf(id, sizeof(id), "m:%d", i);
        snprintf(body, sizeof(body), "{\"id\":%d,\"type\":\"OrderCreated\"}", i);
        pika_publish("bmix.OrderCreated", id, body);
    }
    size_t handled = 0;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_poll(cons, 100, 2000, &handled, &err) < 0)
        fail_msg("poll: %s", err.msg);
    assert_int_equal(handled, 5);
    assert_int_equal(b.batch_calls, 1);
    assert_int_equal(b.first_batch, 5);
    assert_int_equal(b.h.effects, 3); /* m:1, m:3, m:5 */
    /* Seen by pika while the delay runs: the retry waits, the main queue has nothing ready. */
    assert_int_equal(testrabbit_count(&testrabbit_shared, "bmix.retry"), 1);
    assert_int_equal(testrabbit_count(&testrabbit_shared, "bmix"), 0);

    poll_until(cons, &b.h.calls, 6, 15000);
    assert_true(b.h.transient_second_ms - b.h.transient_first_ms >= 2000);
    assert_int_equal(b.h.transient_second_delivery, 2);
    assert_int_equal(b.h.effects, 4);
    assert_int_equal(testdb_i64(t.db, "SELECT COUNT(*) FROM inbox_events", NULL, 0), 4);
    print_message("transient failure of a batch redelivered after %" PRId64 " ms (delay 2000)\n",
                  b.h.transient_second_ms - b.h.transient_first_ms);

    txo_consumer_free(cons); /* anything unacknowledged would now be ready again */
    assert_one_dead("bmix", "m:4");
    testdb_teardown(&t);
}

/*
 * The broker cancels a consumer whose queue goes away (deleted here; a queue that crashes, or
 * whose node fails, is the same to the consumer). The poll says so at once instead of waiting
 * on a subscription that will never deliver again, and the next poll declares the queue anew
 * and consumes what is published to it from then on.
 */
static void test_consumer_cancelled_by_the_broker(void **state)
{
    (void)state;
    struct testdb t;
    testdb_setup(&t, "rabbit_cancelled");
    struct batch_ctx b = {.h = {.db = t.db}};
    struct txo_rabbitmq_opts o;
    opts(&o);
    o.queue = "cancelled";
    o.binding_key = "cancelled.*";
    struct txo_consumer *cons = new_batch_consumer(&o, &b);
    pika_publish("cancelled.OrderCreated", "c:1", "{\"id\":1,\"type\":\"OrderCreated\"}");
    poll_until(cons, &b.h.calls, 1, 15000);

    free(testrabbit_client(&testrabbit_shared, "delete", "cancelled", NULL));
    size_t handled = 0;
    struct txo_error err;
    txo_error_init(&err);
    int64_t t0 = txo_monotonic_ms();
    int rc = txo_consumer_poll(cons, 10, 5000, &handled, &err);
    int64_t ms = txo_monotonic_ms() - t0;
    if (rc != TXO_EUNAVAILABLE || ms >= 5000)
        fail_msg("after its queue was deleted, a poll returned %s after %lld ms (%s): the "
                 "consumer was not told that the broker cancelled it",
                 txo_err_name(rc), (long long)ms, err.msg);
    assert_non_null(strstr(err.msg, "cancelled the consumer"));

    assert_int_equal(txo_consumer_poll(cons, 10, 100, &handled, NULL), 0); /* declared again */
    pika_publish("cancelled.OrderCreated", "c:2", "{\"id\":2,\"type\":\"OrderCreated\"}");
    poll_until(cons, &b.h.calls, 2, 15000);
    assert_int_equal(b.h.effects, 2);
    txo_consumer_free(cons);
    assert_int_equal(testrabbit_count(&testrabbit_shared, "cancelled"), 0);
    testdb_teardown(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routing_key_sanitising),
        cmocka_unit_test(test_published_properties),
        cmocka_unit_test(test_unroutable_is_permanent),
        cmocka_unit_test(test_server_down_fails_fast),
        cmocka_unit_test(test_consumer_ack_retry_dead_letter),
        cmocka_unit_test(test_crash_between_commit_and_ack),
        cmocka_unit_test(test_batch_consumer_takes_what_is_waiting),
        cmocka_unit_test(test_batch_consumer_mixed_verdicts),
        cmocka_unit_test(test_consumer_cancelled_by_the_broker),
    };
    return cmocka_run_group_tests(tests, testrabbit_group_setup, testrabbit_group_teardown);
}
