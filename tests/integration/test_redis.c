/*
 * The Redis Streams transport against a real redis-server (tests/support/testredis.h: one
 * private server for this binary, AOF with appendfsync always; each test uses streams of its
 * own):
 *   - stream names from the template, bad options refused;
 *   - published entries carry the documented fields, in the txo format and in CloudEvents
 *     binary mode (read back with redis-cli, and decoded by a consumer);
 *   - the consumer: a permanent failure copied to <stream>.dead with its dead_* fields and
 *     acknowledged; the entries of a consumer that died (read with redis-cli as another
 *     consumer, never acknowledged) claimed by ours; other event types acknowledged without
 *     the handler;
 *   - the batch consumer: 20 entries in fewer handler calls than entries, each once (other
 *     event types acknowledged without reaching it); one call with a transient, a permanent
 *     and successful verdicts settles each by its own (XPENDING shows the transient one alone,
 *     redelivered later with delivery 2; the permanent one in <stream>.dead); a call failing
 *     as a whole leaves every entry pending (claimed again in one call) or dead-letters all;
 *   - a server that is down: creation works, publishing and polling fail fast with
 *     TXO_EUNAVAILABLE and work again once it is back;
 *   - MAXLEN ~ keeps about maxlen entries, the newest;
 *   - a %-encoded password and a database number from the URL (a wrong password: transient,
 *     never echoed).
 * The contracts every transport keeps (publish, order, consume, restart, CloudEvents) are in
 * tests/conformance. What Redis stored is read with Debian's redis-cli, not through the code
 * under test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testconsume.h"
#include "testdb.h"
#include "testproc.h"
#include "testbatch.h"
#include "testredis.h"
#include "testrelay.h"
#include "txo/consumer.h"
#include "txo/inbox.h"
#include "txo/redis.h"

static void opts_for(struct txo_redis_opts *o, const char *stream)
{
    txo_redis_opts_init(o);
    o->url = testredis_shared.url;
    o->connect_timeout_ms = 1000;
    o->timeout_ms = 2000;
    o->stream = stream;
    o->claim_idle_ms = 400;
}

static struct txo_publisher *new_publisher(const struct txo_redis_opts *o,
                                           struct txo_metrics *metrics)
{
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_publisher_redis_new(o, metrics, &pub, &err) < 0)
        fail_msg("txo_publisher_redis_new: %s", err.msg);
    return pub;
}

/* ---- the recording handler ---- */

struct collector {
    struct testconsume_list rx; /* what the handler was given */
    const char *transient_id;   /* fails with TXO_EUNAVAILABLE on its first delivery */
    const char *permanent_id;   /* always fails with TXO_EINVAL */
    bool decode;                /* check txo_envelope_decode_message on every message */
};

static void collector_release(struct collector *col)
{
    testconsume_release(&col->rx);
    memset(col, 0, sizeof(*col));
}

static int collect(void *arg, const struct txo_inbound_message *msg, struct txo_error *err)
{
    struct collector *col = arg;
    struct testconsume_msg *r = testconsume_add(&col->rx, msg);
    if (col->decode) {
        struct txo_event ev;
        struct txo_error derr;
        txo_error_init(&derr);
        if (txo_envelope_decode_message(msg, &ev, &derr) < 0)
            fail_msg("decoding %s: %s", r->msg_id, derr.msg);
        assert_string_equal(ev.idempotency_key, r->msg_id);
        assert_string_equal(ev.type, "OrderCreated");
        txo_event_release(&ev);
    }
    if (col->permanent_id != NULL && strcmp(r->msg_id, col->permanent_id) == 0)
        return txo_error_set(err, TXO_EINVAL, "payload rejected by the test");
    if (col->transient_id != NULL && strcmp(r->msg_id, col->transient_id) == 0 &&
        msg->delivery == 1)
        return txo_error_set(err, TXO_EUNAVAILABLE, "downstream busy (test)");
    return 0;
}

static struct txo_consumer *new_consumer(const struct txo_redis_opts *o, txo_message_handler_fn fn,
                                         void *arg)
{
    struct txo_consumer *c = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_redis_new(o, &(struct txo_handler){.one = fn, .arg = arg}, NULL, &c, &err) < 0)
        fail_msg("txo_consumer_redis_new: %s", err.msg);
    return c;
}

static size_t poll_once(struct txo_consumer *c, size_t max, int64_t timeout_ms)
{
    size_t handled = 0;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_poll(c, max, timeout_ms, &handled, &err) < 0)
        fail_msg("txo_consumer_poll: %s", err.msg);
    return handled;
}

/* ---- (1) names and options ---- */

static void test_stream_names_and_options(void **state)
{
    (void)state;
    char out[64];
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_redis_stream_name("txo.events.{aggregate_type}", "order", "OrderCreated",
                                           out, sizeof(out), &err),
                     0);
    assert_string_equal(out, "txo.events.order");
    assert_int_equal(txo_redis_stream_name("e:{aggregate_type}:{event_type}", "pay ment", "", out,
                                           sizeof(out), &err),
                     0);
    assert_string_equal(out, "e:pay_ment:_");
    assert_int_equal(txo_redis_stream_name("e:{aggregate}", "a", "b", out, sizeof(out), &err),
                     TXO_EINVAL);
    assert_string_equal(out, "");
    assert_int_equal(txo_redis_stream_name("{aggregate_type}", "0123456789", "b", out, 8, &err),
                     TXO_EINVAL);

    struct txo_redis_opts o;
    struct txo_publisher *pub = NULL;
    struct txo_consumer *c = NULL;
    const char *bad_urls[] = {"http://x",        "rediss://h",   "redis://",    "redis://h:0",
                              "redis://h:99999", "redis://pw@h", "redis://h/x", "redis://:p%zz@h"};
    for (size_t i = 0; i < sizeof(bad_urls) / sizeof(bad_urls[0]); i++) {
        txo_redis_opts_init(&o);
        o.url = bad_urls[i];
        txo_error_init(&err);
        if (txo_publisher_redis_new(&o, NULL, &pub, &err) != TXO_EINVAL)
            fail_msg("url %s accepted", bad_urls[i]);
        assert_null(strstr(err.msg, "%zz")); /* credentials never echoed */
    }
    txo_redis_opts_init(&o);
    o.maxlen = -1;
    assert_int_equal(txo_publisher_redis_new(&o, NULL, &pub, &err), TXO_EINVAL);
    txo_redis_opts_init(&o);
    assert_int_equal(txo_consumer_redis_new(&o, &(struct txo_handler){.one = collect, .arg = NULL},
                                            NULL, &c, &err),
                     TXO_EINVAL);
    assert_non_null(strstr(err.msg, "stream is required"));
}

/* ---- (2) the published fields ---- */

static void test_fields_as_documented(void **state)
{
    (void)state;
    struct txo_redis_opts o;
    opts_for(&o, "t2.events.order");
    o.stream_template = "t2.events.{aggregate_type}";
    o.maxlen = 1000;
    struct txo_metrics *reg = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_metrics_new(&reg, &err), 0);
    struct txo_publisher *pub = new_publisher(&o, reg);
    struct testbatch b;
    testbatch_init(&b, 3, 41, "order");
    assert_int_equal(testbatch_publish(pub, &b), 0);
    testbatch_assert_published(&b);

    json_t *entries = testredis_xrange(&testredis_shared, "t2.events.order");
    assert_int_equal(json_array_size(entries), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *e = json_array_get(entries, i);
        assert_string_equal(testredis_field(e, "idempotency_key"), b.keys[i]);
        assert_string_equal(testredis_field(e, "event_type"), "OrderCreated");
        assert_string_equal(testredis_field(e, "aggregate_type"), "order");
        assert_string_equal(testredis_field(e, "aggregate_id"), b.msgs[i].aggregate_id);
        char id[24];
        snprintf(id, sizeof(id), "%lld", (long long)b.msgs[i].id);
        assert_string_equal(testredis_field(e, "outbox_id"), id);
        const char *env = testredis_field(e, "envelope");
        assert_non_null(env);
        json_t *j = json_loads(env, 0, NULL);
        assert_non_null(j);
        assert_string_equal(json_string_value(json_object_get(j, "idempotency_key")), b.keys[i]);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "payload"), "n")),
                         b.msgs[i].id);
        json_decref(j);
        assert_null(testredis_field(e, "ce_specversion"));
    }
    json_decref(entries);
    assert_int_equal(
        txo_metric_value(txo_metrics_register(reg, TXO_METRIC_COUNTER, "txo_redis_published_total",
                                              "x", 0, NULL, NULL, 0, &err),
                         NULL),
        3);

    /* CloudEvents binary mode: the payload is the data field, the attributes ce_* fields. */
    assert_int_equal(txo_envelope_set_default(TXO_ENVELOPE_CLOUDEVENTS_BINARY, NULL, &err), 0);
    struct testbatch b2;
    testbatch_init(&b2, 2, 51, "order");
    assert_int_equal(testbatch_publish(pub, &b2), 0);
    assert_int_equal(txo_envelope_set_default(TXO_ENVELOPE_TXO, NULL, &err), 0);
    testbatch_assert_published(&b2);
    entries = testredis_xrange(&testredis_shared, "t2.events.order");
    assert_int_equal(json_array_size(entries), 5);
    json_t *e = json_array_get(entries, 3);
    assert_null(testredis_field(e, "envelope"));
    assert_string_equal(testredis_field(e, "data"), "{\"n\":51}");
    assert_string_equal(testredis_field(e, "content_type"), "application/json");
    assert_string_equal(testredis_field(e, "ce_specversion"), "1.0");
    assert_string_equal(testredis_field(e, "ce_id"), "order:51");
    assert_string_equal(testredis_field(e, "ce_type"), "OrderCreated");
    assert_string_equal(testredis_field(e, "ce_source"), "/txo/outbox");
    assert_string_equal(testredis_field(e, "ce_txoaggregateid"), "51");
    assert_string_equal(testredis_field(e, "idempotency_key"), "order:51");
    json_decref(entries);

    /* A consumer decodes both kinds (txo_envelope_decode_message reads ce-* from the fields). */
    struct collector col = {.decode = true};
    struct txo_consumer *c = new_consumer(&o, collect, &col);
    assert_int_equal(poll_once(c, 100, 200), 5);
    assert_string_equal(col.rx.got[0].subject, "t2.events.order");
    assert_string_equal(col.rx.got[4].msg_id, "order:52");
    assert_int_equal(testredis_group_pending(&testredis_shared, "t2.events.order", "txo-worker"),
                     0);
    txo_consumer_free(c);
    collector_release(&col);
    testbatch_free(&b);
    testbatch_free(&b2);
    txo_publisher_free(pub);
    txo_metrics_free(reg);
}

/* ---- (3) the relay: 10,000 events, per-aggregate order ---- */

#define RELAY_AGGREGATES_MAX 1000

/* ---- (4) the consumer ---- */

static void test_permanent_error_dead_lettered(void **state)
{
    (void)state;
    struct txo_redis_opts o;
    opts_for(&o, "t5.events.order");
    o.stream_template = "t5.events.{aggregate_type}";
    struct txo_publisher *pub = new_publisher(&o, NULL);
    struct testbatch b;
    testbatch_init(&b, 3, 1, "order");
    assert_int_equal(testbatch_publish(pub, &b), 0);
    testbatch_assert_published(&b);
    struct collector col = {.permanent_id = "order:2"};
    struct txo_consumer *c = new_consumer(&o, collect, &col);
    assert_int_equal(poll_once(c, 100, 200), 3);
    assert_int_equal(testredis_group_pending(&testredis_shared, "t5.events.order", "txo-worker"),
                     0);
    json_t *dead = testredis_xrange(&testredis_shared, "t5.events.order.dead");
    assert_int_equal(json_array_size(dead), 1);
    json_t *e = json_array_get(dead, 0);
    assert_string_equal(testredis_field(e, "idempotency_key"), "order:2");
    assert_string_equal(testredis_field(e, "dead_reason"), "payload rejected by the test");
    assert_string_equal(testredis_field(e, "dead_error"), "TXO_EINVAL");
    assert_string_equal(testredis_field(e, "dead_group"), "txo-worker");
    assert_string_equal(testredis_field(e, "dead_delivery"), "1");
    assert_non_null(testredis_field(e, "envelope"));
    json_decref(dead);
    /* Never redelivered. */
    txo_sleep_ms(o.claim_idle_ms + 100);
    poll_once(c, 100, 50);
    poll_once(c, 100, 50);
    assert_int_equal(testconsume_count_id(&col.rx, "order:2"), 1);
    txo_consumer_free(c);
    collector_release(&col);
    testbatch_free(&b);
    txo_publisher_free(pub);
}

static void test_dead_consumer_entries_claimed(void **state)
{
    (void)state;
    struct txo_redis_opts o;
    opts_for(&o, "t6.events.order");
    o.stream_template = "t6.events.{aggregate_type}";
    o.claim_idle_ms = 1500; /* longer than the redis-cli calls below take on a busy machine */
    struct txo_publisher *pub = new_publisher(&o, NULL);
    struct collector col = {0};
    struct txo_consumer *c = new_consumer(&o, collect, &col);
    assert_int_equal(poll_once(c, 10, 10), 0); /* creates the group */
    struct testbatch b;
    testbatch_init(&b, 6, 1, "order");
    assert_int_equal(testbatch_publish(pub, &b), 0);
    testbatch_assert_published(&b);
    /* Another consumer reads four entries and dies without acknowledging them. */
    int64_t t_read = txo_monotonic_ms(); /* before that delivery */
    json_t *j =
        testredis_cli(&testredis_shared,
                      (const char *const[]){"XREADGROUP", "GROUP", "txo-worker", "doomed", "COUNT",
                                            "4", "STREAMS", "t6.events.order", ">", NULL});
    json_decref(j);
    assert_int_equal(testredis_group_pending(&testredis_shared, "t6.events.order", "txo-worker"),
                     4);
    /* Ours gets the other two at once, the dead one's four only after claim_idle_ms. */
    assert_int_equal(poll_once(c, 100, 100), 2);
    int64_t deadline = txo_monotonic_ms() + 5000;
    while (col.rx.n < 6 && txo_monotonic_ms() < deadline)
        poll_once(c, 100, 50);
    assert_int_equal(col.rx.n, 6);
    assert_true(txo_monotonic_ms() - t_read >= o.claim_idle_ms);
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(testconsume_count_id(&col.rx, b.keys[i]), 1);
    for (size_t i = 2; i < 6; i++)
        assert_int_equal(col.rx.got[i].delivery, 2); /* read once by the dead consumer */
    assert_int_equal(testredis_group_pending(&testredis_shared, "t6.events.order", "txo-worker"),
                     0);
    txo_consumer_free(c);
    collector_release(&col);
    testbatch_free(&b);
    txo_publisher_free(pub);
}

static void test_other_event_types_skipped(void **state)
{
    (void)state;
    struct txo_redis_opts o;
    opts_for(&o, "t7.events.order");
    o.stream_template = "t7.events.{aggregate_type}";
    o.event_type = "OrderCreated";
    struct txo_publisher *pub = new_publisher(&o, NULL);
    struct testbatch b;
    testbatch_init(&b, 4, 1, "order");
    b.msgs[1].event_type = "OrderCancelled";
    b.msgs[3].event_type = "OrderShipped";
    assert_int_equal(testbatch_publish(pub, &b), 0);
    testbatch_assert_published(&b);
    struct collector col = {0};
    struct txo_consumer *c = new_consumer(&o, collect, &col);
    assert_int_equal(poll_once(c, 100, 100), 2);
    assert_string_equal(col.rx.got[0].msg_id, "order:1");
    assert_string_equal(col.rx.got[1].msg_id, "order:3");
    assert_int_equal(testredis_group_pending(&testredis_shared, "t7.events.order", "txo-worker"),
                     0);
    txo_consumer_free(c);
    collector_release(&col);
    testbatch_free(&b);
    txo_publisher_free(pub);
}

/* ---- (4b) the batch consumer ---- */

/* A batch handler: each message through collect(), the calls counted. */
struct batch_collector {
    struct collector col;
    size_t calls;
    size_t largest;  /* messages in the largest call */
    int fail_first;  /* non-zero: the first call fails as a whole with this code */
    size_t failed_n; /* messages of that call */
};

static int collect_batch(void *arg, const struct txo_inbound_message *msgs, size_t n, int *results,
                         struct txo_error *errors)
{
    struct batch_collector *bc = arg;
    bc->calls++;
    if (n > bc->largest)
        bc->largest = n;
    if (bc->calls == 1 && bc->fail_first != 0) {
        bc->failed_n = n;
        return bc->fail_first;
    }
    for (size_t i = 0; i < n; i++)
        results[i] = collect(&bc->col, &msgs[i], &errors[i]);
    return 0;
}

static struct txo_consumer *new_batch_consumer(const struct txo_redis_opts *o,
                                               struct batch_collector *bc)
{
    struct txo_consumer *c = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_redis_new(o, &(struct txo_handler){.batch = collect_batch, .arg = bc}, NULL,
                               &c, &err) < 0)
        fail_msg("txo_consumer_redis_new: %s", err.msg);
    return c;
}

/* The stream entry id of the entry whose idempotency_key is key (redis-cli XRANGE). */
static void entry_id_of(const char *stream, const char *key, char *out, size_t out_size)
{
    json_t *all = testredis_xrange(&testredis_shared, stream);
    out[0] = '\0';
    for (size_t i = 0; i < json_array_size(all); i++) {
        json_t *e = json_array_get(all, i);
        const char *k = testredis_field(e, "idempotency_key");
        if (k != NULL && strcmp(k, key) == 0)
            snprintf(out, out_size, "%s", json_string_value(json_array_get(e, 0)));
    }
    json_decref(all);
    assert_true(out[0] != '\0');
}

static void test_batch_consumer_reads_in_few_calls(void **state)
{
    (void)state;
    struct txo_redis_opts o;
    opts_for(&o, "t13.events.order");
    o.stream_template = "t13.events.{aggregate_type}";
    o.event_type = "OrderCreated";
    struct txo_publisher *pub = new_publisher(&o, NULL);
    struct testbatch b;
    testbatch_init(&b, 22, 1, "order");
    b.msgs[4].event_type = "OrderCancelled";
    b.msgs[17].event_type = "OrderShipped";
    assert_int_equal(testbatch_publish(pub, &b), 0);
    testbatch_assert_published(&b);
    struct batch_collector bc = {.col = {.decode = true}};
    struct txo_consumer *c = new_batch_consumer(&o, &bc);
    int64_t deadline = txo_monotonic_ms() + 5000;
    size_t handled = 0;
    while (bc.col.rx.n < 20 && txo_monotonic_ms() < deadline)
        handled += poll_once(c, 100, 100);
    /* The 20 OrderCreated entries, each once, in fewer calls than entries; the other two
     * types acknowledged without reaching the handler. */
    assert_int_equal(bc.col.rx.n, 20);
    assert_int_equal(handled, 20);
    assert_true(bc.calls < 20);
    assert_true(bc.largest > 1);
    for (size_t i = 0; i < b.n; i++)
        assert_int_equal(testconsume_count_id(&bc.col.rx, b.keys[i]), i == 4 || i == 17 ? 0 : 1);
    for (size_t i = 0; i < bc.col.rx.n; i++) {
        assert_string_equal(bc.col.rx.got[i].subject, "t13.events.order");
        assert_int_equal(bc.col.rx.got[i].delivery, 1);
    }
    assert_int_equal(testredis_group_pending(&testredis_shared, "t13.events.order", "txo-worker"),
                     0);
    assert_int_equal(testredis_xlen(&testredis_shared, "t13.events.order.dead"), 0);
    txo_consumer_free(c);
    collector_release(&bc.col);
    testbatch_free(&b);
    txo_publisher_free(pub);
}

static void test_batch_consumer_mixed_verdicts(void **state)
{
    (void)state;
    struct txo_redis_opts o;
    opts_for(&o, "t14.events.order");
    o.stream_template = "t14.events.{aggregate_type}";
    struct txo_publisher *pub = new_publisher(&o, NULL);
    struct testbatch b;
    testbatch_init(&b, 6, 1, "order");
    assert_int_equal(testbatch_publish(pub, &b), 0);
    testbatch_assert_published(&b);
    char transient_entry[64];
    entry_id_of("t14.events.order", "order:3", transient_entry, sizeof(transient_entry));

    struct batch_collector bc = {.col = {.transient_id = "order:3", .permanent_id = "order:5"}};
    struct txo_consumer *c = new_batch_consumer(&o, &bc);
    int64_t t_fail = txo_monotonic_ms(); /* before the first delivery */
    assert_int_equal(poll_once(c, 100, 200), 6);
    assert_int_equal(bc.calls, 1);
    /* The transient one alone pending (XPENDING by redis-cli), the permanent one in the dead
     * stream and acknowledged, the other four acknowledged. */
    json_t *p =
        testredis_cli(&testredis_shared, (const char *const[]){"XPENDING", "t14.events.order",
                                                               "txo-worker", "-", "+", "10", NULL});
    assert_int_equal(json_array_size(p), 1);
    assert_string_equal(json_string_value(json_array_get(json_array_get(p, 0), 0)),
                        transient_entry);
    json_decref(p);
    assert_int_equal(testredis_xlen(&testredis_shared, "t14.events.order.dead"), 1);
    json_t *dead = testredis_xrange(&testredis_shared, "t14.events.order.dead");
    json_t *e = json_array_get(dead, 0);
    assert_string_equal(testredis_field(e, "idempotency_key"), "order:5");
    assert_string_equal(testredis_field(e, "dead_reason"), "payload rejected by the test");
    assert_string_equal(testredis_field(e, "dead_error"), "TXO_EINVAL");
    assert_string_equal(testredis_field(e, "dead_delivery"), "1");
    json_decref(dead);

    /* The transient one comes back after claim_idle_ms, delivery 2, and is acknowledged. */
    int64_t deadline = txo_monotonic_ms() + 5000;
    while (testconsume_count_id(&bc.col.rx, "order:3") < 2 && txo_monotonic_ms() < deadline)
        poll_once(c, 100, 50);
    assert_int_equal(testconsume_count_id(&bc.col.rx, "order:3"), 2);
    assert_true(txo_monotonic_ms() - t_fail >= o.claim_idle_ms);
    assert_int_equal(bc.col.rx.got[bc.col.rx.n - 1].delivery, 2);
    assert_int_equal(testredis_group_pending(&testredis_shared, "t14.events.order", "txo-worker"),
                     0);
    /* The rest never again. */
    txo_sleep_ms(o.claim_idle_ms + 100);
    poll_once(c, 100, 50);
    poll_once(c, 100, 50);
    assert_int_equal(bc.col.rx.n, 7);
    for (size_t i = 0; i < b.n; i++)
        assert_int_equal(testconsume_count_id(&bc.col.rx, b.keys[i]), i == 2 ? 2 : 1);
    assert_int_equal(testredis_xlen(&testredis_shared, "t14.events.order.dead"), 1);
    txo_consumer_free(c);
    collector_release(&bc.col);
    testbatch_free(&b);
    txo_publisher_free(pub);
}

static void test_batch_handler_failing_as_a_whole(void **state)
{
    (void)state;
    struct txo_redis_opts o;
    opts_for(&o, "t15.events.order");
    o.stream_template = "t15.events.{aggregate_type}";
    struct txo_publisher *pub = new_publisher(&o, NULL);
    struct testbatch b;
    testbatch_init(&b, 5, 1, "order");
    assert_int_equal(testbatch_publish(pub, &b), 0);
    testbatch_assert_published(&b);
    /* A transient failure of the call leaves every entry pending; the claim after
     * claim_idle_ms hands them all to the handler again, in one call, delivery 2. */
    struct batch_collector bc = {.fail_first = TXO_EDEADLOCK};
    struct txo_consumer *c = new_batch_consumer(&o, &bc);
    assert_int_equal(poll_once(c, 100, 200), 5);
    assert_int_equal(bc.failed_n, 5);
    assert_int_equal(testredis_group_pending(&testredis_shared, "t15.events.order", "txo-worker"),
                     5);
    int64_t deadline = txo_monotonic_ms() + 5000;
    while (bc.col.rx.n < 5 && txo_monotonic_ms() < deadline)
        poll_once(c, 100, 50);
    assert_int_equal(bc.col.rx.n, 5);
    assert_int_equal(bc.calls, 2);
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(bc.col.rx.got[i].delivery, 2);
    assert_int_equal(testredis_group_pending(&testredis_shared, "t15.events.order", "txo-worker"),
                     0);
    txo_consumer_free(c);
    collector_release(&bc.col);

    /* A permanent failure of the call dead-letters every entry. */
    struct testbatch b2;
    testbatch_init(&b2, 3, 100, "order");
    assert_int_equal(testbatch_publish(pub, &b2), 0);
    testbatch_assert_published(&b2);
    struct batch_collector bc2 = {.fail_first = TXO_EINVAL};
    c = new_batch_consumer(&o, &bc2);
    assert_int_equal(poll_once(c, 100, 200), 3);
    assert_int_equal(testredis_group_pending(&testredis_shared, "t15.events.order", "txo-worker"),
                     0);
    json_t *dead = testredis_xrange(&testredis_shared, "t15.events.order.dead");
    assert_int_equal(json_array_size(dead), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *e = json_array_get(dead, i);
        assert_string_equal(testredis_field(e, "idempotency_key"), b2.keys[i]);
        assert_string_equal(testredis_field(e, "dead_error"), "TXO_EINVAL");
    }
    json_decref(dead);
    txo_consumer_free(c);
    collector_release(&bc2.col);
    testbatch_free(&b2);
    testbatch_free(&b);
    txo_publisher_free(pub);
}

/* ---- (5) duplicates through the inbox; a server SIGKILLed while consuming ---- */

static void test_server_down_at_creation(void **state)
{
    (void)state;
    struct txo_redis_opts o;
    opts_for(&o, "t9.events.order");
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%u/0", testproc_free_port());
    o.url = url;
    struct txo_publisher *pub = new_publisher(&o, NULL);
    struct testbatch b;
    testbatch_init(&b, 3, 1, "order");
    int64_t t0 = txo_monotonic_ms();
    assert_int_equal(testbatch_publish(pub, &b), 0);
    assert_true(txo_monotonic_ms() - t0 < 500);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(b.results[i], TXO_EUNAVAILABLE);
        assert_non_null(strstr(b.errors[i].msg, "cannot connect"));
    }
    struct collector col = {0};
    struct txo_consumer *c = new_consumer(&o, collect, &col);
    size_t handled = 9;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_consumer_poll(c, 10, 100, &handled, &err), TXO_EUNAVAILABLE);
    assert_int_equal(handled, 0);
    txo_consumer_free(c);
    testbatch_free(&b);
    txo_publisher_free(pub);
}

/* ---- (6) credentials and database from the URL ---- */

static void test_password_and_database_from_the_url(void **state)
{
    (void)state;
    /* A password with ':' and '@', %-encoded in the URL. */
    json_decref(
        testredis_cli(&testredis_shared,
                      (const char *const[]){"CONFIG", "SET", "requirepass", "s3cr:t@x", NULL}));
    char url[128];
    snprintf(url, sizeof(url), "redis://:s3cr%%3At%%40x@127.0.0.1:%u/3", testredis_shared.port);
    struct txo_redis_opts o;
    opts_for(&o, "t10.events.order");
    o.url = url;
    o.stream_template = "t10.events.{aggregate_type}";
    struct txo_publisher *pub = new_publisher(&o, NULL);
    struct testbatch b;
    testbatch_init(&b, 2, 1, "order");
    assert_int_equal(testbatch_publish(pub, &b), 0);
    testbatch_assert_published(&b);
    json_t *len = testredis_cli(&testredis_shared,
                                (const char *const[]){"-a", "s3cr:t@x", "--no-auth-warning", "-n",
                                                      "3", "XLEN", "t10.events.order", NULL});
    assert_int_equal(json_integer_value(len), 2);
    json_decref(len);
    len = testredis_cli(&testredis_shared,
                        (const char *const[]){"-a", "s3cr:t@x", "--no-auth-warning", "XLEN",
                                              "t10.events.order", NULL});
    assert_int_equal(json_integer_value(len), 0); /* not in database 0 */
    json_decref(len);
    txo_publisher_free(pub);

    /* A wrong password: the rows wait (transient), the password is never in the message. */
    snprintf(url, sizeof(url), "redis://:wrong-pw@127.0.0.1:%u/3", testredis_shared.port);
    pub = new_publisher(&o, NULL);
    assert_int_equal(testbatch_publish(pub, &b), 0);
    for (size_t i = 0; i < b.n; i++) {
        assert_int_equal(b.results[i], TXO_EUNAVAILABLE);
        assert_non_null(strstr(b.errors[i].msg, "AUTH refused"));
        assert_null(strstr(b.errors[i].msg, "wrong-pw"));
    }
    txo_publisher_free(pub);
    testbatch_free(&b);
    json_decref(testredis_cli(&testredis_shared,
                              (const char *const[]){"-a", "s3cr:t@x", "--no-auth-warning", "CONFIG",
                                                    "SET", "requirepass", "", NULL}));
}

/* ---- (7) trimming ---- */

static void test_maxlen_trims_the_stream(void **state)
{
    (void)state;
    struct txo_redis_opts o;
    opts_for(&o, "t11.events.order");
    o.stream_template = "t11.events.{aggregate_type}";
    o.maxlen = 100;
    struct txo_publisher *pub = new_publisher(&o, NULL);
    struct testbatch b;
    testbatch_init(&b, 1000, 1, "order");
    assert_int_equal(testbatch_publish(pub, &b), 0);
    testbatch_assert_published(&b);
    /* MAXLEN ~ trims whole macro nodes (100 entries each by default): at least 100 stay. */
    int64_t len = testredis_xlen(&testredis_shared, "t11.events.order");
    print_message("1000 XADDs with MAXLEN ~ 100: %lld entries kept\n", (long long)len);
    assert_true(len >= 100 && len < 300);
    json_t *entries = testredis_xrange(&testredis_shared, "t11.events.order");
    json_t *last = json_array_get(entries, json_array_size(entries) - 1);
    assert_string_equal(testredis_field(last, "idempotency_key"), "order:1000"); /* the newest */
    json_decref(entries);
    testbatch_free(&b);
    txo_publisher_free(pub);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_names_and_options),
        cmocka_unit_test(test_fields_as_documented),
        cmocka_unit_test(test_permanent_error_dead_lettered),
        cmocka_unit_test(test_dead_consumer_entries_claimed),
        cmocka_unit_test(test_other_event_types_skipped),
        cmocka_unit_test(test_batch_consumer_reads_in_few_calls),
        cmocka_unit_test(test_batch_consumer_mixed_verdicts),
        cmocka_unit_test(test_batch_handler_failing_as_a_whole),
        cmocka_unit_test(test_server_down_at_creation),
        cmocka_unit_test(test_password_and_database_from_the_url),
        cmocka_unit_test(test_maxlen_trims_the_stream),
    };
    return cmocka_run_group_tests(tests, testredis_group_setup, testredis_group_teardown);
}
