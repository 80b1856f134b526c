/*
 * The Kafka transport against librdkafka's mock cluster (3 brokers, replication factor 3,
 * tests/support/testkafka.h; one cluster for the whole binary, each test on topics and groups
 * of its own). What reached the cluster is read back with kcat, not with our code.
 *
 *   - topic names from the template;
 *   - the record contract: topic, key = aggregate id, value = envelope, the two headers;
 *     CloudEvents binary mode as ce_* headers, decoded by the consumer;
 *   - 10,000 events through the relay with --ordering aggregate: none lost, every idempotency
 *     key once, each aggregate on one partition in its order;
 *   - brokers down: the relay keeps the events PENDING with backoff, dead-letters them at the
 *     attempt limit, and delivers the rest once the brokers are back; a leader change and
 *     NOT_LEADER errors are absorbed by the idempotent producer without duplicates; a record
 *     too large and a topic authorisation failure are permanent (dead-lettered at once);
 *   - the consumer: offsets committed only past handled records (a new member of the group
 *     starts after them, and a record failing transiently blocks its partition's commit), a
 *     transient error redelivered with delivery 2 in partition order, a permanent one skipped
 *     and copied to the dead-letter topic, types the consumer does not take committed past
 *     without calling the handler, a duplicate record applied once through the inbox, and a
 *     rebalance between two members of a group losing nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "testdb.h"
#include "testkafka.h"
#include "testrelay.h"
#include "txo/consumer.h"
#include "txo/inbox.h"
#include "txo/kafka.h"

#define PRODUCE_REQUEST 0 /* Kafka protocol ApiKey of ProduceRequest */

static struct testkafka cluster;
static atomic_uint next_id;

static int group_setup(void **state)
{
    (void)state;
    testkafka_start(&cluster);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    testkafka_stop(&cluster);
    return 0;
}

/* A fresh name "<what><n>" for this test's topics and groups. */
static void fresh(char *out, size_t size, const char *what)
{
    snprintf(out, size, "%s%u", what, atomic_fetch_add(&next_id, 1));
}

static void opts_for(struct txo_kafka_opts *o, const char *template)
{
    txo_kafka_opts_init(o);
    o->brokers = cluster.bootstraps;
    o->topic_template = template;
    o->delivery_timeout_ms = 5000;
}

static struct txo_publisher *new_publisher(const struct txo_kafka_opts *o)
{
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_publisher_kafka_new(o, NULL, &pub, &err) < 0)
        fail_msg("txo_publisher_kafka_new: %s", err.msg);
    return pub;
}

/* ---- messages ---- */

struct batch {
    struct txo_outbox_message *msgs;
    char (*keys)[48];
    char (*aggs)[24];
    char (*payloads)[64];
    int *results;
    struct txo_error *errors;
    size_t n;
};

/* Messages of aggregates "<i % n_aggs>", keys "<prefix>:<i>", type created / cancelled. */
static void batch_init(struct batch *b, size_t n, size_t n_aggs, const char *prefix)
{
    memset(b, 0, sizeof(*b));
    b->n = n;
    b->msgs = calloc(n, sizeof(*b->msgs));
    b->keys = calloc(n, sizeof(*b->keys));
    b->aggs = calloc(n, sizeof(*b->aggs));
    b->payloads = calloc(n, sizeof(*b->payloads));
    b->results = calloc(n, sizeof(*b->results));
    b->errors = calloc(n, sizeof(*b->errors));
    assert_true(b->msgs && b->keys && b->aggs && b->payloads && b->results && b->errors);
    for (size_t i = 0; i < n; i++) {
        snprintf(b->keys[i], sizeof(b->keys[i]), "%s:%zu", prefix, i);
        snprintf(b->aggs[i], sizeof(b->aggs[i]), "%zu", i % n_aggs);
        snprintf(b->payloads[i], sizeof(b->payloads[i]), "{\"n\":%zu,\"big\":9007199254740993}", i);
        struct txo_outbox_message *m = &b->msgs[i];
        m->id = (int64_t)i + 1;
        m->aggregate_type = "order";
        m->aggregate_id = b->aggs[i];
        m->event_type = "OrderCreated";
        m->payload = b->payloads[i];
        m->payload_len = strlen(b->payloads[i]);
        m->idempotency_key = b->keys[i];
        m->created_at = "2026-11-30T15:37:00.123456Z";
        m->attempt = 1;
    }
}

static void batch_free(struct batch *b)
{
    free(b->msgs);
    free(b->keys);
    free(b->aggs);
    free(b->payloads);
    free(b->results);
    free(b->errors);
}

static void publish(struct txo_publisher *pub, struct batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        b->results[i] = 99;
        txo_error_init(&b->errors[i]);
    }
    assert_int_equal(pub->ops->publish_batch(pub->self, b->msgs, b->n, b->results, b->errors), 0);
}

static void assert_all_published(const struct batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        if (b->results[i] != 0)
            fail_msg("message %zu (%s): result %d: %s", i, b->keys[i], b->results[i],
                     b->errors[i].msg);
    }
}

/* ---- topics and the record contract ---- */

static void test_topic_names(void **state)
{
    (void)state;
    char t[300];
    assert_int_equal(
        txo_kafka_topic("txo.events.{aggregate_type}", "order", "OrderCreated", t, sizeof(t), NULL),
        0);
    assert_string_equal(t, "txo.events.order");
    assert_int_equal(txo_kafka_topic("app-{aggregate_type}.{event_type}", "pay ment/v2", "Charged*",
                                     t, sizeof(t), NULL),
                     0);
    assert_string_equal(t, "app-pay_ment_v2.Charged_");
    assert_int_equal(txo_kafka_topic("x.{aggregate_type}", "", "E", t, sizeof(t), NULL), 0);
    assert_string_equal(t, "x._");
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_kafka_topic("x.{aggregate}", "a", "b", t, sizeof(t), &err), TXO_EINVAL);
    assert_string_equal(t, "");
    char long_type[300];
    memset(long_type, 'a', sizeof(long_type) - 1);
    long_type[sizeof(long_type) - 1] = '\0';
    assert_int_equal(txo_kafka_topic("{aggregate_type}", long_type, "b", t, sizeof(t), NULL),
                     TXO_EINVAL);
    /* A property txo sets for its guarantees cannot be overridden. */
    struct txo_kafka_opts o;
    opts_for(&o, "t.{aggregate_type}");
    const char *props[] = {"enable.idempotence=false"};
    o.properties = props;
    o.n_properties = 1;
    struct txo_publisher *pub = NULL;
    assert_int_equal(txo_publisher_kafka_new(&o, NULL, &pub, &err), TXO_EINVAL);
    assert_non_null(strstr(err.msg, "enable.idempotence"));
    assert_null(pub);
}

/* Parses a record's value and checks it is the envelope of b's message i. */
static void assert_envelope(const char *value, const struct batch *b, size_t i)
{
    json_error_t jerr;
    json_t *doc = json_loads(value, 0, &jerr);
    if (doc == NULL)
        fail_msg("record value is not JSON (%s): %s", jerr.text, value);
    assert_string_equal(json_string_value(json_object_get(doc, "idempotency_key")), b->keys[i]);
    assert_string_equal(json_string_value(json_object_get(doc, "type")), "OrderCreated");
    assert_string_equal(json_string_value(json_object_get(doc, "aggregate_id")), b->aggs[i]);
    assert_non_null(json_object_get(json_object_get(doc, "payload"), "n"));
    json_decref(doc);
    /* The exact digits of the payload survive (no double rounding). */
    assert_non_null(strstr(value, "9007199254740993"));
}

/* Index of the message with idempotency key, or -1. Keys are "<prefix>:<i>". */
static long key_index(const char *key)
{
    const char *colon = key != NULL ? strrchr(key, ':') : NULL;
    return colon != NULL ? strtol(colon + 1, NULL, 10) : -1;
}

static void test_record_contract(void **state)
{
    (void)state;
    char prefix[32], template[64], topic[64];
    fresh(prefix, sizeof(prefix), "contract");
    snprintf(template, sizeof(template), "%s.{aggregate_type}", prefix);
    snprintf(topic, sizeof(topic), "%s.order", prefix);
    testkafka_create_topic(&cluster, topic, 4);
    struct txo_kafka_opts o;
    opts_for(&o, template);
    struct txo_publisher *pub = new_publisher(&o);
    struct batch b;
    batch_init(&b, 40, 7, prefix);
    int64_t t0 = txo_monotonic_ms();
    publish(pub, &b);
    int64_t elapsed = txo_monotonic_ms() - t0;
    assert_all_published(&b);
    print_message("40 records delivered (acks=all, 3 replicas) in %lld ms\n", (long long)elapsed);

    struct testkafka_record *r = NULL;
    size_t n = testkafka_read(&cluster, topic, &r);
    assert_int_equal(n, b.n);
    int32_t part_of_agg[7];
    for (size_t a = 0; a < 7; a++)
        part_of_agg[a] = -1;
    for (size_t k = 0; k < n; k++) {
        char *id = testkafka_header(&r[k], TXO_KAFKA_HEADER_IDEMPOTENCY_KEY);
        char *type = testkafka_header(&r[k], TXO_KAFKA_HEADER_EVENT_TYPE);
        assert_non_null(id);
        assert_non_null(type);
        assert_string_equal(type, "OrderCreated");
        long i = key_index(id);
        assert_true(i >= 0 && (size_t)i < b.n);
        assert_string_equal(r[k].key, b.aggs[i]);
        assert_envelope(r[k].value, &b, (size_t)i);
        /* One aggregate, one partition. */
        size_t agg = (size_t)i % 7;
        if (part_of_agg[agg] < 0)
            part_of_agg[agg] = r[k].partition;
        assert_int_equal(r[k].partition, part_of_agg[agg]);
        free(id);
        free(type);
    }
    testkafka_records_free(r, n);
    txo_publisher_free(pub);
    batch_free(&b);
}

/* ---- the consumer's recording handler ---- */

struct received {
    char msg_id[64];
    char subject[96];
    uint64_t delivery;
    char *data;
};

struct collector {
    struct received *got;
    size_t n, cap;
    const char *transient_id; /* fails with TXO_EUNAVAILABLE while delivery <= transient_times */
    unsigned transient_times;
    const char *permanent_id; /* always fails with TXO_EINVAL */
    /* Optional: record each message in the inbox of db (effects counts the first ones). */
    struct txo_db *db;
    size_t effects;
};

static void collector_release(struct collector *col)
{
    for (size_t i = 0; i < col->n; i++)
        free(col->got[i].data);
    free(col->got);
    memset(col, 0, sizeof(*col));
}

struct inbox_arg {
    const char *id;
    const char *payload;
    bool duplicate;
};

static int record_in_inbox(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct inbox_arg *a = arg;
    return txo_inbox_record(tx, a->id, "OrderCreated", a->payload, &a->duplicate, err);
}

static int collect(void *arg, const struct txo_inbound_message *msg, struct txo_error *err)
{
    struct collector *col = arg;
    if (col->n == col->cap) {
        col->cap = col->cap ? col->cap * 2 : 64;
        col->got = realloc(col->got, col->cap * sizeof(*col->got));
        assert_non_null(col->got);
    }
    struct received *r = &col->got[col->n++];
    snprintf(r->msg_id, sizeof(r->msg_id), "%s", msg->msg_id ? msg->msg_id : "(null)");
    snprintf(r->subject, sizeof(r->subject), "%s", msg->subject ? msg->subject : "(null)");
    r->delivery = msg->delivery;
    r->data = strndup(msg->data, msg->len);
    assert_non_null(r->data);
    assert_int_equal(strlen(msg->data), msg->len); /* NUL-terminated at len */

    if (col->permanent_id != NULL && strcmp(r->msg_id, col->permanent_id) == 0)
        return txo_error_set(err, TXO_EINVAL, "payload rejected by the test");
    if (col->transient_id != NULL && strcmp(r->msg_id, col->transient_id) == 0 &&
        msg->delivery <= col->transient_times)
        return txo_error_set(err, TXO_EUNAVAILABLE, "consumer database down");
    if (col->db != NULL) {
        struct txo_event ev;
        int rc = txo_envelope_decode_message(msg, &ev, err);
        if (rc < 0)
            return rc;
        struct inbox_arg a = {ev.idempotency_key, ev.payload, false};
        rc = txo_db_transact(col->db, TXO_ISO_READ_COMMITTED, record_in_inbox, &a, err);
        if (rc == 0 && !a.duplicate)
            col->effects++;
        txo_event_release(&ev);
        return rc;
    }
    return 0;
}

static size_t count_id(const struct collector *col, const char *id)
{
    size_t k = 0;
    for (size_t i = 0; i < col->n; i++)
        k += strcmp(col->got[i].msg_id, id) == 0;
    return k;
}

static struct txo_consumer *new_consumer(const struct txo_kafka_opts *o, struct collector *col)
{
    struct txo_consumer *c = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_kafka_new(o, collect, col, NULL, &c, &err) < 0)
        fail_msg("txo_consumer_kafka_new: %s", err.msg);
    assert_string_equal(txo_consumer_name(c), "kafka");
    return c;
}

static size_t poll_once(struct txo_consumer *c, int64_t timeout_ms)
{
    size_t handled = 0;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_poll(c, 100, timeout_ms, &handled, &err) < 0)
        fail_msg("txo_consumer_poll: %s", err.msg);
    return handled;
}

/* Polls until col holds want records, failing after timeout_ms. */
static void poll_until(struct txo_consumer *c, struct collector *col, size_t want,
                       int64_t timeout_ms)
{
    int64_t deadline = txo_monotonic_ms() + timeout_ms;
    while (col->n < want && txo_monotonic_ms() < deadline)
        (void)poll_once(c, 200);
    if (col->n < want)
        fail_msg("received %zu of %zu records within %lld ms", col->n, want, (long long)timeout_ms);
}

/* Polls for quiet_ms and returns what arrived meanwhile. */
static size_t poll_for(struct txo_consumer *c, int64_t quiet_ms)
{
    size_t n = 0;
    int64_t deadline = txo_monotonic_ms() + quiet_ms;
    while (txo_monotonic_ms() < deadline)
        n += poll_once(c, 200);
    return n;
}

/* Consumer options for topic in a fresh group, with quick group membership for the mock. */
static const char *const group_props[] = {"session.timeout.ms=6000", "heartbeat.interval.ms=300",
                                          "topic.metadata.refresh.interval.ms=1000"};

static void consumer_opts(struct txo_kafka_opts *o, const char *topic, const char *group)
{
    opts_for(o, "unused.{aggregate_type}");
    o->topics = topic;
    o->group = group;
    o->retry_delay_ms = 300;
    o->properties = group_props;
    o->n_properties = sizeof(group_props) / sizeof(group_props[0]);
}

/* Publishes n events of n_aggs aggregates to "<prefix>.order" (created with parts). */
static void publish_events(const char *prefix, size_t n, size_t n_aggs, int parts, struct batch *b)
{
    char template[64], topic[64];
    snprintf(template, sizeof(template), "%s.{aggregate_type}", prefix);
    snprintf(topic, sizeof(topic), "%s.order", prefix);
    testkafka_create_topic(&cluster, topic, parts);
    struct txo_kafka_opts o;
    opts_for(&o, template);
    struct txo_publisher *pub = new_publisher(&o);
    batch_init(b, n, n_aggs, prefix);
    publish(pub, b);
    assert_all_published(b);
    txo_publisher_free(pub);
}

static void test_binary_cloudevents(void **state)
{
    (void)state;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_envelope_set_default(TXO_ENVELOPE_CLOUDEVENTS_BINARY, "urn:shop", &err),
                     0);
    char prefix[32], topic[64], group[32];
    fresh(prefix, sizeof(prefix), "ce");
    fresh(group, sizeof(group), "g");
    struct batch b;
    publish_events(prefix, 3, 3, 1, &b);
    assert_int_equal(txo_envelope_set_default(TXO_ENVELOPE_TXO, NULL, &err), 0);
    snprintf(topic, sizeof(topic), "%s.order", prefix);

    struct testkafka_record *r = NULL;
    size_t n = testkafka_read(&cluster, topic, &r);
    assert_int_equal(n, 3);
    char *spec = testkafka_header(&r[0], "ce_specversion");
    char *id = testkafka_header(&r[0], "ce_id");
    char *source = testkafka_header(&r[0], "ce_source");
    char *ct = testkafka_header(&r[0], "content-type");
    assert_string_equal(spec, "1.0");
    assert_string_equal(id, b.keys[0]);
    assert_string_equal(source, "urn:shop");
    assert_string_equal(ct, "application/json");
    assert_string_equal(r[0].value, b.payloads[0]); /* the payload itself is the value */
    free(spec);
    free(id);
    free(source);
    free(ct);
    testkafka_records_free(r, n);

    /* The consumer hands ce_* headers to the decoder as CloudEvents' ce-* attributes. */
    struct txo_kafka_opts o;
    consumer_opts(&o, topic, group);
    struct collector col;
    memset(&col, 0, sizeof(col));
    struct txo_consumer *c = new_consumer(&o, &col);
    poll_until(c, &col, 3, 20000);
    txo_consumer_free(c);
    assert_string_equal(col.got[0].msg_id, b.keys[0]);
    assert_string_equal(col.got[0].data, b.payloads[0]);
    collector_release(&col);
    batch_free(&b);
}

/* ---- the relay end to end ---- */

struct append_ctx {
    unsigned from, to, n_aggs;
    const char *prefix;
    const char *event_type;
    size_t payload_bytes; /* 0: a small payload */
};

static int append_events(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct append_ctx *a = arg;
    char *big = NULL;
    if (a->payload_bytes > 0) {
        big = malloc(a->payload_bytes + 32);
        assert_non_null(big);
        int n = snprintf(big, a->payload_bytes + 32, "{\"pad\":\"");
        memset(big + n, 'x', a->payload_bytes);
        strcpy(big + n + a->payload_bytes, "\"}");
    }
    int rc = 0;
    for (unsigned i = a->from; rc == 0 && i <= a->to; i++) {
        char key[64], payload[96], agg[16];
        unsigned aggregate = i % a->n_aggs;
        /* seq: the event's place in its aggregate, in append (= id) order. */
        snprintf(key, sizeof(key), "%s:%u", a->prefix, i);
        snprintf(payload, sizeof(payload), "{\"aggregate\":%u,\"seq\":%u}", aggregate,
                 i / a->n_aggs);
        snprintf(agg, sizeof(agg), "%u", aggregate);
        struct txo_outbox_event ev = {
            .aggregate_type = "order",
            .aggregate_id = agg,
            .event_type = a->event_type != NULL ? a->event_type : "OrderCreated",
            .payload_json = big != NULL ? big : payload,
            .idempotency_key = key,
        };
        rc = txo_outbox_append(tx, &ev, 0, NULL, NULL, err);
    }
    free(big);
    return rc;
}

static void append(struct testdb *t, struct append_ctx a, unsigned per_tx)
{
    unsigned last = a.to;
    for (unsigned from = a.from; from <= last; from += per_tx) {
        a.from = from;
        a.to = from + per_tx - 1 < last ? from + per_tx - 1 : last;
        struct txo_error err;
        txo_error_init(&err);
        if (txo_db_transact(t->db, TXO_ISO_READ_COMMITTED, append_events, &a, &err) < 0)
            fail_msg("appending events: %s", err.msg);
    }
}

static int64_t count_status(struct testdb *t, const char *status)
{
    struct txo_param p = txo_p_str(status);
    return testdb_i64(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = ?", &p, 1);
}

static int cmp_record(const void *x, const void *y)
{
    const struct testkafka_record *a = x, *b = y;
    if (a->partition != b->partition)
        return a->partition < b->partition ? -1 : 1;
    return (a->offset > b->offset) - (a->offset < b->offset);
}

static void test_relay_10000_in_aggregate_order(void **state)
{
    (void)state;
    const unsigned n = 10000, n_aggs = 500;
    char prefix[32], template[64], topic[64];
    fresh(prefix, sizeof(prefix), "relay");
    snprintf(template, sizeof(template), "%s.{aggregate_type}", prefix);
    snprintf(topic, sizeof(topic), "%s.order", prefix);
    testkafka_create_topic(&cluster, topic, 6);
    struct testdb t;
    testdb_setup(&t, "kafka_relay");
    append(&t, (struct append_ctx){1, n, n_aggs, prefix, NULL, 0}, 1000);

    struct txo_kafka_opts o;
    opts_for(&o, template);
    struct txo_metrics *reg = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_metrics_new(&reg, &err), 0);
    struct txo_publisher *pub = NULL;
    if (txo_publisher_kafka_new(&o, reg, &pub, &err) < 0)
        fail_msg("txo_publisher_kafka_new: %s", err.msg);
    struct txo_relay_opts ro;
    txo_relay_opts_init(&ro);
    ro.relay_id = "kafka-relay";
    ro.batch_size = 500;
    ro.ordering = TXO_RELAY_ORDER_AGGREGATE;
    ro.drain = true;
    struct txo_relay *relay = testrelay_new(t.db, pub, &ro);
    int64_t t0 = txo_monotonic_ms();
    testrelay_drain(relay);
    int64_t elapsed = txo_monotonic_ms() - t0;
    assert_int_equal(count_status(&t, "PUBLISHED"), n);
    struct txo_relay_stats st;
    txo_relay_get_stats(relay, &st);
    assert_int_equal(st.published, n);
    assert_int_equal(st.failed_attempts, 0);
    print_message("relay: %u events to Kafka in %lld ms (%u batches, ordering aggregate)\n", n,
                  (long long)elapsed, (unsigned)st.batches);

    /* The metrics saw every delivery. */
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(txo_metrics_render(reg, &text, &len, &err), 0);
    assert_non_null(strstr(text, "txo_kafka_messages_published_total 10000"));
    assert_non_null(strstr(text, "txo_kafka_delivery_seconds_count 10000"));
    const char *sum = strstr(text, "txo_kafka_delivery_seconds_sum ");
    assert_non_null(sum);
    print_message("publisher: mean delivery report latency %.1f ms\n",
                  strtod(sum + strlen("txo_kafka_delivery_seconds_sum "), NULL) / n * 1000.0);
    txo_free(text);

    struct testkafka_record *r = NULL;
    size_t got = testkafka_read(&cluster, topic, &r);
    qsort(r, got, sizeof(*r), cmp_record);
    unsigned char *seen = calloc(n + 1, 1);
    int32_t *part_of = malloc(n_aggs * sizeof(*part_of));
    long *last_seq = malloc(n_aggs * sizeof(*last_seq));
    assert_true(seen && part_of && last_seq);
    for (unsigned a = 0; a < n_aggs; a++) {
        part_of[a] = -1;
        last_seq[a] = -1;
    }
    size_t dups = 0;
    for (size_t k = 0; k < got; k++) {
        char *id = testkafka_header(&r[k], TXO_KAFKA_HEADER_IDEMPOTENCY_KEY);
        long i = key_index(id);
        assert_true(i >= 1 && i <= (long)n);
        dups += seen[i]++ > 0;
        json_t *doc = json_loads(r[k].value, 0, NULL);
        assert_non_null(doc);
        json_t *payload = json_object_get(doc, "payload");
        unsigned agg = (unsigned)json_integer_value(json_object_get(payload, "aggregate"));
        long seq = (long)json_integer_value(json_object_get(payload, "seq"));
        json_decref(doc);
        assert_true(agg < n_aggs);
        char agg_key[16];
        snprintf(agg_key, sizeof(agg_key), "%u", agg);
        assert_string_equal(r[k].key, agg_key);
        if (part_of[agg] < 0)
            part_of[agg] = r[k].partition;
        assert_int_equal(r[k].partition, part_of[agg]);
        if (seq <= last_seq[agg])
            fail_msg("aggregate %u: seq %ld after %ld on partition %d (offset %lld)", agg, seq,
                     last_seq[agg], r[k].partition, (long long)r[k].offset);
        last_seq[agg] = seq;
        free(id);
    }
    /* No retry happened (failed_attempts 0), so a duplicate would be a bug: none expected. */
    assert_int_equal(dups, 0);
    assert_int_equal(got, n);
    for (unsigned i = 1; i <= n; i++)
        assert_int_equal(seen[i], 1);
    free(seen);
    free(part_of);
    free(last_seq);
    testkafka_records_free(r, got);
    txo_relay_free(relay);
    txo_publisher_free(pub);
    txo_metrics_free(reg);
    testdb_teardown(&t);
}

static void set_brokers(bool up)
{
    for (int32_t id = 1; id <= 3; id++) {
        rd_kafka_resp_err_t e = up ? rd_kafka_mock_broker_set_up(testkafka_mock(&cluster), id)
                                   : rd_kafka_mock_broker_set_down(testkafka_mock(&cluster), id);
        assert_int_equal(e, RD_KAFKA_RESP_ERR_NO_ERROR);
    }
}

/* Ids (their key index) of the records of topic; counts duplicates into *dups. */
static size_t read_ids(const char *topic, unsigned n, size_t *dups)
{
    struct testkafka_record *r = NULL;
    size_t got = testkafka_read(&cluster, topic, &r);
    unsigned char *seen = calloc(n + 1, 1);
    assert_non_null(seen);
    size_t distinct = 0;
    *dups = 0;
    for (size_t k = 0; k < got; k++) {
        char *id = testkafka_header(&r[k], TXO_KAFKA_HEADER_IDEMPOTENCY_KEY);
        long i = key_index(id);
        assert_true(i >= 1 && i <= (long)n);
        if (seen[i]++ == 0)
            distinct++;
        else
            (*dups)++;
        free(id);
    }
    free(seen);
    testkafka_records_free(r, got);
    return distinct;
}

static void test_brokers_down_then_back(void **state)
{
    (void)state;
    const unsigned n = 30;
    char prefix[32], template[64], topic[64];
    fresh(prefix, sizeof(prefix), "down");
    snprintf(template, sizeof(template), "%s.{aggregate_type}", prefix);
    snprintf(topic, sizeof(topic), "%s.order", prefix);
    testkafka_create_topic(&cluster, topic, 3);
    struct testdb t;
    testdb_setup(&t, "kafka_down");
    append(&t, (struct append_ctx){1, n, 5, prefix, NULL, 0}, n);

    struct txo_kafka_opts o;
    opts_for(&o, template);
    o.delivery_timeout_ms = 1000;
    struct txo_publisher *pub = new_publisher(&o);
    struct txo_relay_opts ro;
    txo_relay_opts_init(&ro);
    ro.relay_id = "kafka-down";
    ro.ordering = TXO_RELAY_ORDER_AGGREGATE;
    ro.backoff = (struct txo_backoff){.base_ms = 200, .max_ms = 400, .jitter = 0};
    ro.breaker_failures = 0;
    ro.max_attempts = 10;
    ro.drain = true;
    struct txo_relay *relay = testrelay_new(t.db, pub, &ro);

    set_brokers(false);
    int64_t t0 = txo_monotonic_ms();
    size_t claimed = testrelay_run_once(relay);
    int64_t waited = txo_monotonic_ms() - t0;
    assert_true(claimed > 0);
    /* Every claimed event failed transiently: PENDING again, attempt counted, backoff set. */
    assert_int_equal(count_status(&t, "PUBLISHED"), 0);
    assert_int_equal(count_status(&t, "PENDING"), n);
    struct txo_param none = txo_p_str("%delivery%");
    assert_int_equal(testdb_i64(t.db,
                                "SELECT COUNT(*) FROM outbox_events WHERE attempts = 1 AND "
                                "last_error LIKE ? AND next_attempt_at > NOW(6) - INTERVAL 1 "
                                "SECOND",
                                &none, 1),
                     (int64_t)claimed);
    print_message("brokers down: a batch of %zu failed after %lld ms (delivery timeout 1000)\n",
                  claimed, (long long)waited);

    set_brokers(true);
    txo_sleep_ms(500); /* the backoff */
    testrelay_drain(relay);
    assert_int_equal(count_status(&t, "PUBLISHED"), n);
    size_t dups = 0;
    assert_int_equal(read_ids(topic, n, &dups), n);
    /* While every broker refused connections nothing was written, so no duplicate either. */
    assert_int_equal(dups, 0);

    /* A leader change and NOT_LEADER answers: librdkafka retries inside one idempotent
     * session, so everything is written exactly once. */
    append(&t, (struct append_ctx){n + 1, 2 * n, 5, prefix, NULL, 0}, n);
    assert_int_equal(rd_kafka_mock_partition_set_leader(testkafka_mock(&cluster), topic, 0, 2), 0);
    assert_int_equal(rd_kafka_mock_partition_set_leader(testkafka_mock(&cluster), topic, 1, 3), 0);
    rd_kafka_mock_push_request_errors(
        testkafka_mock(&cluster), PRODUCE_REQUEST, 3, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS);
    testrelay_drain(relay);
    assert_int_equal(count_status(&t, "PUBLISHED"), 2 * n);
    assert_int_equal(read_ids(topic, 2 * n, &dups), 2 * n);
    assert_int_equal(dups, 0);

    txo_relay_free(relay);
    txo_publisher_free(pub);
    testdb_teardown(&t);
}

static void test_dead_letters(void **state)
{
    (void)state;
    char prefix[32], template[64], topic[64];
    fresh(prefix, sizeof(prefix), "dead");
    snprintf(template, sizeof(template), "%s.{aggregate_type}", prefix);
    snprintf(topic, sizeof(topic), "%s.order", prefix);
    testkafka_create_topic(&cluster, topic, 1);
    struct testdb t;
    testdb_setup(&t, "kafka_dead");

    struct txo_kafka_opts o;
    opts_for(&o, template);
    o.delivery_timeout_ms = 3000;
    const char *props[] = {"message.max.bytes=10000"};
    o.properties = props;
    o.n_properties = 1;
    struct txo_publisher *pub = new_publisher(&o);
    struct txo_relay_opts ro;
    txo_relay_opts_init(&ro);
    ro.relay_id = "kafka-dead";
    ro.backoff = (struct txo_backoff){.base_ms = 1, .max_ms = 1, .jitter = 0};
    ro.breaker_failures = 0;
    ro.max_attempts = 2;
    struct txo_relay *relay = testrelay_new(t.db, pub, &ro);

    /* (1) A record larger than the cluster takes: permanent, dead-lettered at once. */
    append(&t, (struct append_ctx){1, 1, 1, prefix, NULL, 20000}, 1);
    assert_int_equal(testrelay_run_once(relay), 1);
    assert_int_equal(count_status(&t, "FAILED"), 1);
    assert_int_equal(testdb_i64(t.db, "SELECT attempts FROM outbox_events", NULL, 0), 1);
    assert_int_equal(testdb_i64(t.db, "SELECT COUNT(*) FROM dead_letter_events", NULL, 0), 1);
    char *why = testdb_str(t.db, "SELECT last_error FROM outbox_events", NULL, 0);
    assert_non_null(strstr(why, "MSG_SIZE_TOO_LARGE"));
    txo_free(why);

    /* (2) Transient until the attempt limit: brokers down for two attempts. */
    append(&t, (struct append_ctx){2, 2, 1, prefix, NULL, 0}, 1);
    set_brokers(false);
    assert_int_equal(testrelay_run_once(relay), 1);
    assert_int_equal(count_status(&t, "PENDING"), 1);
    txo_sleep_ms(5);
    assert_int_equal(testrelay_run_once(relay), 1);
    set_brokers(true);
    assert_int_equal(count_status(&t, "FAILED"), 2);
    assert_int_equal(testdb_i64(t.db, "SELECT COUNT(*) FROM dead_letter_events", NULL, 0), 2);

    /* (3) Not authorised to write the topic: permanent too (last: librdkafka then fails
     * the topic at once until its metadata is refreshed). */
    append(&t, (struct append_ctx){3, 3, 1, prefix, NULL, 0}, 1);
    rd_kafka_mock_push_request_errors(testkafka_mock(&cluster), PRODUCE_REQUEST, 1,
                                      RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
    assert_int_equal(testrelay_run_once(relay), 1);
    assert_int_equal(count_status(&t, "FAILED"), 3);
    assert_int_equal(testdb_i64(t.db, "SELECT COUNT(*) FROM dead_letter_events", NULL, 0), 3);

    txo_relay_free(relay);
    txo_publisher_free(pub);
    testdb_teardown(&t);
}

/* ---- the consumer ---- */

static void test_consumer_commits_after_success(void **state)
{
    (void)state;
    char prefix[32], topic[64], group[32];
    fresh(prefix, sizeof(prefix), "commit");
    fresh(group, sizeof(group), "g");
    snprintf(topic, sizeof(topic), "%s.order", prefix);
    struct batch b;
    publish_events(prefix, 60, 6, 2, &b);

    struct txo_kafka_opts o;
    consumer_opts(&o, topic, group);
    struct collector col;
    memset(&col, 0, sizeof(col));
    /* One record fails transiently on its first two deliveries. */
    col.transient_id = b.keys[13];
    col.transient_times = 2;
    struct txo_consumer *c = new_consumer(&o, &col);
    poll_until(c, &col, 62, 20000);
    assert_int_equal(count_id(&col, b.keys[13]), 3);
    /* It came back with delivery 2, then 3, and nothing of its partition passed it. */
    size_t pos[3], k = 0;
    for (size_t i = 0; i < col.n; i++) {
        if (strcmp(col.got[i].msg_id, b.keys[13]) == 0) {
            assert_int_equal(col.got[i].delivery, k + 1);
            pos[k++] = i;
        }
    }
    /* Records of the same aggregate after it are handled only after its success. */
    for (size_t i = 0; i < col.n; i++) {
        long idx = key_index(col.got[i].msg_id);
        if (idx > 13 && idx % 6 == 13 % 6)
            assert_true(i > pos[2]);
    }
    for (size_t i = 0; i < b.n; i++)
        assert_int_equal(count_id(&col, b.keys[i]), i == 13 ? 3 : 1);
    txo_consumer_free(c);

    /* Everything was committed: a new member of the group gets nothing. */
    struct collector again;
    memset(&again, 0, sizeof(again));
    c = new_consumer(&o, &again);
    assert_int_equal(poll_for(c, 3000), 0);
    txo_consumer_free(c);
    collector_release(&again);
    collector_release(&col);
    batch_free(&b);
}

static void test_consumer_never_commits_past_a_failure(void **state)
{
    (void)state;
    char prefix[32], topic[64], group[32];
    fresh(prefix, sizeof(prefix), "block");
    fresh(group, sizeof(group), "g");
    snprintf(topic, sizeof(topic), "%s.order", prefix);
    struct batch b;
    publish_events(prefix, 20, 1, 1, &b); /* one aggregate, one partition: a strict sequence */

    struct txo_kafka_opts o;
    consumer_opts(&o, topic, group);
    o.retry_delay_ms = 60000; /* the failed record does not come back within this test */
    struct collector col;
    memset(&col, 0, sizeof(col));
    col.transient_id = b.keys[5];
    col.transient_times = 100;
    struct txo_consumer *c = new_consumer(&o, &col);
    poll_until(c, &col, 6, 20000);
    assert_int_equal(poll_for(c, 1000), 0); /* blocked behind record 5 */
    assert_int_equal(col.n, 6);
    txo_consumer_free(c); /* commits 0..4 on the way out, and nothing past 5 */

    /* The next member starts at the failed record: 5..19, none of 0..4 again. */
    struct collector next;
    memset(&next, 0, sizeof(next));
    c = new_consumer(&o, &next);
    poll_until(c, &next, 15, 20000);
    assert_string_equal(next.got[0].msg_id, b.keys[5]);
    assert_int_equal(next.got[0].delivery, 1); /* Kafka keeps no count across members */
    for (size_t i = 0; i < next.n; i++)
        assert_true(key_index(next.got[i].msg_id) >= 5);
    assert_int_equal(poll_for(c, 1000), 0);
    txo_consumer_free(c);
    collector_release(&next);
    collector_release(&col);
    batch_free(&b);
}

static void test_consumer_permanent_and_filter(void **state)
{
    (void)state;
    char prefix[32], topic[64], group[32], dlq[64];
    fresh(prefix, sizeof(prefix), "perm");
    fresh(group, sizeof(group), "g");
    snprintf(topic, sizeof(topic), "%s.order", prefix);
    snprintf(dlq, sizeof(dlq), "%s.dead", prefix);
    testkafka_create_topic(&cluster, dlq, 1);
    struct batch b;
    publish_events(prefix, 10, 2, 1, &b);
    /* Another event type on the same topic (one aggregate type, one topic), written by kcat. */
    const char *hdrs[] = {"txo-idempotency-key=other:1", "txo-event-type=OrderCancelled", NULL};
    testkafka_produce(&cluster, topic, "0", "{\"type\":\"OrderCancelled\"}", hdrs);

    struct txo_kafka_opts o;
    consumer_opts(&o, topic, group);
    o.event_type = "OrderCreated";
    o.dead_letter_topic = dlq;
    struct collector col;
    memset(&col, 0, sizeof(col));
    col.permanent_id = b.keys[3];
    struct txo_consumer *c = new_consumer(&o, &col);
    poll_until(c, &col, 10, 20000);
    assert_int_equal(poll_for(c, 1000), 0);
    assert_int_equal(count_id(&col, "other:1"), 0); /* never handed to the handler */
    assert_int_equal(count_id(&col, b.keys[3]), 1); /* rejected once, not redelivered */
    txo_consumer_free(c);

    /* The rejected record is in the dead-letter topic, with the reason. */
    struct testkafka_record *r = NULL;
    size_t n = testkafka_read(&cluster, dlq, &r);
    assert_int_equal(n, 1);
    char *id = testkafka_header(&r[0], TXO_KAFKA_HEADER_IDEMPOTENCY_KEY);
    char *reason = testkafka_header(&r[0], TXO_KAFKA_HEADER_DEAD_LETTER_REASON);
    assert_string_equal(id, b.keys[3]);
    assert_string_equal(reason, "payload rejected by the test");
    free(id);
    free(reason);
    testkafka_records_free(r, n);

    /* All of it, the skipped type included, was committed. */
    struct collector again;
    memset(&again, 0, sizeof(again));
    c = new_consumer(&o, &again);
    assert_int_equal(poll_for(c, 2000), 0);
    txo_consumer_free(c);
    collector_release(&again);
    collector_release(&col);
    batch_free(&b);
}

static void test_consumer_duplicate_applied_once(void **state)
{
    (void)state;
    char prefix[32], template[64], topic[64], group[32];
    fresh(prefix, sizeof(prefix), "dup");
    fresh(group, sizeof(group), "g");
    snprintf(template, sizeof(template), "%s.{aggregate_type}", prefix);
    snprintf(topic, sizeof(topic), "%s.order", prefix);
    testkafka_create_topic(&cluster, topic, 2);
    struct testdb t;
    testdb_setup(&t, "kafka_dup");

    /* The same events published twice: what a relay does after a delivery timeout or a crash
     * between the publish and its database update (a new producer session). */
    struct txo_kafka_opts po;
    opts_for(&po, template);
    struct batch b;
    batch_init(&b, 8, 3, prefix);
    for (int round = 0; round < 2; round++) {
        struct txo_publisher *pub = new_publisher(&po);
        publish(pub, &b);
        assert_all_published(&b);
        txo_publisher_free(pub);
    }
    size_t dups = 0;
    struct testkafka_record *r = NULL;
    size_t n = testkafka_read(&cluster, topic, &r);
    assert_int_equal(n, 16);
    testkafka_records_free(r, n);
    (void)dups;

    struct txo_kafka_opts o;
    consumer_opts(&o, topic, group);
    struct collector col;
    memset(&col, 0, sizeof(col));
    col.db = t.db;
    struct txo_consumer *c = new_consumer(&o, &col);
    poll_until(c, &col, 16, 20000);
    txo_consumer_free(c);
    assert_int_equal(col.effects, 8);
    assert_int_equal(testdb_i64(t.db, "SELECT COUNT(*) FROM inbox_events", NULL, 0), 8);
    collector_release(&col);
    batch_free(&b);
    testdb_teardown(&t);
}

static void test_consumer_rebalance_loses_nothing(void **state)
{
    (void)state;
    char prefix[32], topic[64], group[32];
    fresh(prefix, sizeof(prefix), "rebal");
    fresh(group, sizeof(group), "g");
    snprintf(topic, sizeof(topic), "%s.order", prefix);
    struct batch b;
    publish_events(prefix, 400, 40, 4, &b);

    struct txo_kafka_opts o;
    consumer_opts(&o, topic, group);
    struct collector ca, cb;
    memset(&ca, 0, sizeof(ca));
    memset(&cb, 0, sizeof(cb));
    struct txo_consumer *a = new_consumer(&o, &ca);
    poll_until(a, &ca, 20, 20000); /* a owns every partition and has started */
    struct txo_consumer *c2 = new_consumer(&o, &cb);
    /* Both poll (rebalances are served inside poll) until every event was handled. */
    int64_t deadline = txo_monotonic_ms() + 30000;
    unsigned char *seen = calloc(b.n, 1);
    assert_non_null(seen);
    size_t distinct = 0;
    while (distinct < b.n && txo_monotonic_ms() < deadline) {
        (void)poll_once(a, 100);
        (void)poll_once(c2, 100);
        distinct = 0;
        memset(seen, 0, b.n);
        for (size_t i = 0; i < ca.n; i++)
            seen[key_index(ca.got[i].msg_id)] = 1;
        for (size_t i = 0; i < cb.n; i++)
            seen[key_index(cb.got[i].msg_id)] = 1;
        for (size_t i = 0; i < b.n; i++)
            distinct += seen[i];
    }
    assert_int_equal(distinct, b.n);
    /*
     * Both members took part, nothing was lost. Records handled twice are the ones handled
     * but not committed when their partition moved: the mock cluster refuses every commit
     * while the group rebalances (REBALANCE_IN_PROGRESS, also the one made on revoke), so
     * what the first member handled between the second one's arrival and the revoke is
     * handled again by the new owner. The inbox makes that harmless
     * (test_consumer_duplicate_applied_once).
     */
    size_t total = ca.n + cb.n;
    print_message("rebalance: a handled %zu, b handled %zu, handled twice %zu of %zu\n", ca.n, cb.n,
                  total - b.n, b.n);
    assert_true(cb.n > 0);
    txo_consumer_free(a);
    txo_consumer_free(c2);
    /* Once the group is settled everything is committed: a new member gets nothing. */
    struct collector after;
    memset(&after, 0, sizeof(after));
    struct txo_consumer *late = new_consumer(&o, &after);
    assert_int_equal(poll_for(late, 3000), 0);
    txo_consumer_free(late);
    collector_release(&after);
    free(seen);
    collector_release(&ca);
    collector_release(&cb);
    batch_free(&b);
}

static void test_consumer_through_an_outage(void **state)
{
    (void)state;
    char prefix[32], topic[64], group[32];
    fresh(prefix, sizeof(prefix), "outage");
    fresh(group, sizeof(group), "g");
    snprintf(topic, sizeof(topic), "%s.order", prefix);
    struct batch b;
    publish_events(prefix, 10, 2, 2, &b);
    struct txo_kafka_opts o;
    consumer_opts(&o, topic, group);
    struct collector col;
    memset(&col, 0, sizeof(col));
    struct txo_consumer *c = new_consumer(&o, &col);
    poll_until(c, &col, 10, 20000);

    /* Every broker down: polls report TXO_EUNAVAILABLE (quickly) instead of waiting silently. */
    set_brokers(false);
    int rc = 0;
    int64_t deadline = txo_monotonic_ms() + 15000;
    while (rc == 0 && txo_monotonic_ms() < deadline) {
        size_t handled = 0;
        struct txo_error err;
        txo_error_init(&err);
        rc = txo_consumer_poll(c, 10, 200, &handled, &err);
    }
    assert_int_equal(rc, TXO_EUNAVAILABLE);
    set_brokers(true);

    /* Back: the consumer picks up where its committed offsets are, nothing handled twice. */
    struct txo_kafka_opts po;
    char template[64];
    snprintf(template, sizeof(template), "%s.{aggregate_type}", prefix);
    opts_for(&po, template);
    struct txo_publisher *pub = new_publisher(&po);
    struct batch more;
    batch_init(&more, 10, 2, "more");
    publish(pub, &more);
    assert_all_published(&more);
    txo_publisher_free(pub);
    deadline = txo_monotonic_ms() + 20000;
    while (col.n < 20 && txo_monotonic_ms() < deadline) {
        size_t handled = 0;
        struct txo_error err;
        txo_error_init(&err);
        if (txo_consumer_poll(c, 100, 200, &handled, &err) < 0)
            print_message("poll after the outage: %s\n", err.msg); /* until reconnected */
    }
    assert_int_equal(col.n, 20);
    for (size_t i = 0; i < more.n; i++)
        assert_int_equal(count_id(&col, more.keys[i]), 1);
    for (size_t i = 0; i < b.n; i++)
        assert_int_equal(count_id(&col, b.keys[i]), 1);
    txo_consumer_free(c);
    collector_release(&col);
    batch_free(&more);
    batch_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topic_names),
        cmocka_unit_test(test_record_contract),
        cmocka_unit_test(test_binary_cloudevents),
        cmocka_unit_test(test_relay_10000_in_aggregate_order),
        cmocka_unit_test(test_brokers_down_then_back),
        cmocka_unit_test(test_dead_letters),
        cmocka_unit_test(test_consumer_commits_after_success),
        cmocka_unit_test(test_consumer_never_commits_past_a_failure),
        cmocka_unit_test(test_consumer_permanent_and_filter),
        cmocka_unit_test(test_consumer_duplicate_applied_once),
        cmocka_unit_test(test_consumer_rebalance_loses_nothing),
        cmocka_unit_test(test_consumer_through_an_outage),
    };
    /* librdkafka's connection chatter (info, warn) only with TXO_TEST_LOG set. */
    if (getenv("TXO_TEST_LOG") == NULL)
        txo_log_set_level(TXO_LOG_ERROR);
    if (getenv("TXO_TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TXO_TEST_FILTER"));
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
