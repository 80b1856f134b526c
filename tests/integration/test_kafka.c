/*
 * The Kafka transport against librdkafka's mock cluster (3 brokers, replication factor 3,
 * tests/support/testkafka.h; one cluster for the whole binary, each test on topics and groups
 * of its own). What reached the cluster is read back with kcat, not with our code.
 *
 *   - topic names from the template;
 *   - the record contract: topic, key = aggregate id, value = envelope, the two headers;
 *   - brokers down: the relay keeps the events PENDING with backoff, dead-letters them at the
 *     attempt limit, and delivers the rest once the brokers are back; a leader change and
 *     NOT_LEADER errors are absorbed by the idempotent producer without duplicates; a record
 *     too large and a topic authorisation failure are permanent (dead-lettered at once).
 * The consumer side is in test_kafka_consumer.c. The contracts every transport keeps
 * (publish, per-aggregate order, consume, restart, CloudEvents) are in tests/conformance.
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
    testkafka_opts(&testkafka_shared, &o, "t.{aggregate_type}");
    const char *props[] = {"enable.idempotence=false"};
    o.properties = props;
    o.n_properties = 1;
    struct txo_publisher *pub = NULL;
    assert_int_equal(txo_publisher_kafka_new(&o, NULL, &pub, &err), TXO_EINVAL);
    assert_non_null(strstr(err.msg, "enable.idempotence"));
    assert_null(pub);
}

/* A test's own topic on the shared cluster: "<prefix>.order", and the template that names it. */
struct fresh_topic {
    char prefix[32];   /* unused by any test before, after what */
    char template[64]; /* "<prefix>.{aggregate_type}" */
    char topic[64];    /* "<prefix>.order", created with the partitions asked for */
};

static void fresh_topic(struct fresh_topic *ft, const char *what, int partitions)
{
    testkafka_fresh(ft->prefix, sizeof(ft->prefix), what);
    snprintf(ft->template, sizeof(ft->template), "%s.{aggregate_type}", ft->prefix);
    snprintf(ft->topic, sizeof(ft->topic), "%s.order", ft->prefix);
    testkafka_create_topic(&testkafka_shared, ft->topic, partitions);
}

/* Parses a record's value and checks it is the envelope of b's message i. */
static void assert_envelope(const char *value, const struct testbatch *b, size_t i)
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

static void test_record_contract(void **state)
{
    (void)state;
    struct fresh_topic ft;
    fresh_topic(&ft, "contract", 4);
    struct txo_kafka_opts o;
    testkafka_opts(&testkafka_shared, &o, ft.template);
    struct txo_publisher *pub = testkafka_publisher(&o);
    struct testbatch b;
    testkafka_batch_init(&b, 40, 7, ft.prefix);
    int64_t t0 = txo_monotonic_ms();
    assert_int_equal(testbatch_publish(pub, &b), 0);
    int64_t elapsed = txo_monotonic_ms() - t0;
    testbatch_assert_published(&b);
    print_message("40 records delivered (acks=all, 3 replicas) in %lld ms\n", (long long)elapsed);

    struct testkafka_record *r = NULL;
    size_t n = testkafka_read(&testkafka_shared, ft.topic, &r);
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
        long i = testkafka_key_index(id);
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
    testbatch_free(&b);
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

/* A publisher to ft's topics waiting up to delivery_timeout_ms, with n extra properties. */
static struct txo_publisher *publisher_to(const struct fresh_topic *ft, int64_t delivery_timeout_ms,
                                          const char *const *props, size_t n)
{
    struct txo_kafka_opts o;
    testkafka_opts(&testkafka_shared, &o, ft->template);
    o.delivery_timeout_ms = delivery_timeout_ms;
    o.properties = props;
    o.n_properties = n;
    return testkafka_publisher(&o);
}

/* The relay of these tests: a backoff of base_ms to max_ms without jitter, no breaker. */
static struct txo_relay_opts relay_opts(const char *id, int64_t base_ms, int64_t max_ms,
                                        unsigned max_attempts)
{
    struct txo_relay_opts ro;
    txo_relay_opts_init(&ro);
    ro.relay_id = id;
    ro.backoff = (struct txo_backoff){.base_ms = base_ms, .max_ms = max_ms, .jitter = 0};
    ro.breaker_failures = 0;
    ro.max_attempts = max_attempts;
    return ro;
}

/* Ids (their key index) of the records of topic; counts duplicates into *dups. */
static size_t read_ids(const char *topic, unsigned n, size_t *dups)
{
    struct testkafka_record *r = NULL;
    size_t got = testkafka_read(&testkafka_shared, topic, &r);
    unsigned char *seen = calloc(n + 1, 1);
    assert_non_null(seen);
    size_t distinct = 0;
    *dups = 0;
    for (size_t k = 0; k < got; k++) {
        char *id = testkafka_header(&r[k], TXO_KAFKA_HEADER_IDEMPOTENCY_KEY);
        long i = testkafka_key_index(id);
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
    struct fresh_topic ft;
    fresh_topic(&ft, "down", 3);
    struct testdb t;
    testdb_setup(&t, "kafka_down");
    append(&t, (struct append_ctx){1, n, 5, ft.prefix, NULL, 0}, n);

    const char *props[] = {"reconnect.backoff.ms=50", "reconnect.backoff.max.ms=200"};
    struct txo_publisher *pub = publisher_to(&ft, 1000, props, 2);
    struct txo_relay_opts ro = relay_opts("kafka-down", 200, 400, 10);
    ro.ordering = TXO_RELAY_ORDER_AGGREGATE;
    ro.drain = true;
    struct txo_relay *relay = testrelay_new(t.db, pub, &ro);

    testkafka_set_brokers(&testkafka_shared, false);
    int64_t t0 = txo_monotonic_ms();
    size_t claimed = testrelay_run_once(relay);
    int64_t waited = txo_monotonic_ms() - t0;
    assert_true(claimed > 0);
    /* The first event of each of the 5 aggregates failed transiently (PENDING again, attempt
     * counted, backoff set); the later ones waited behind it, unsent, using no attempt. */
    assert_int_equal(count_status(&t, "PUBLISHED"), 0);
    assert_int_equal(count_status(&t, "PENDING"), n);
    struct txo_param none = txo_p_str("%delivery%");
    assert_int_equal(testdb_i64(t.db,
                                "SELECT COUNT(*) FROM outbox_events WHERE attempts = 1 AND "
                                "last_error LIKE ? AND next_attempt_at > NOW(6) - INTERVAL 1 "
                                "SECOND",
                                &none, 1),
                     5);
    assert_int_equal(
        testdb_i64(t.db, "SELECT COUNT(*) FROM outbox_events WHERE attempts = 0", NULL, 0), n - 5);
    print_message("brokers down: a batch of %zu failed after %lld ms (delivery timeout 1000)\n",
                  claimed, (long long)waited);

    testkafka_set_brokers(&testkafka_shared, true);
    txo_sleep_ms(500); /* the backoff */
    testrelay_drain(relay);
    assert_int_equal(count_status(&t, "PUBLISHED"), n);
    size_t dups = 0;
    assert_int_equal(read_ids(ft.topic, n, &dups), n);
    /* While every broker refused connections nothing was written, so no duplicate either. */
    assert_int_equal(dups, 0);

    /* A leader change and NOT_LEADER answers: librdkafka retries inside one idempotent
     * session, so everything is written exactly once. */
    append(&t, (struct append_ctx){n + 1, 2 * n, 5, ft.prefix, NULL, 0}, n);
    assert_int_equal(
        rd_kafka_mock_partition_set_leader(testkafka_mock(&testkafka_shared), ft.topic, 0, 2), 0);
    assert_int_equal(
        rd_kafka_mock_partition_set_leader(testkafka_mock(&testkafka_shared), ft.topic, 1, 3), 0);
    rd_kafka_mock_push_request_errors(testkafka_mock(&testkafka_shared), PRODUCE_REQUEST, 3,
                                      RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                                      RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                                      RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS);
    testrelay_drain(relay);
    assert_int_equal(count_status(&t, "PUBLISHED"), 2 * n);
    assert_int_equal(read_ids(ft.topic, 2 * n, &dups), 2 * n);
    assert_int_equal(dups, 0);
    rd_kafka_mock_clear_request_errors(testkafka_mock(&testkafka_shared), PRODUCE_REQUEST);

    txo_relay_free(relay);
    txo_publisher_free(pub);
    testdb_teardown(&t);
}

static void test_dead_letters(void **state)
{
    (void)state;
    struct fresh_topic ft;
    fresh_topic(&ft, "dead", 1);
    struct testdb t;
    testdb_setup(&t, "kafka_dead");

    /* Reconnect quickly once the brokers are back (librdkafka backs off up to 10 s). */
    const char *props[] = {"message.max.bytes=10000", "reconnect.backoff.ms=50",
                           "reconnect.backoff.max.ms=200"};
    struct txo_publisher *pub = publisher_to(&ft, 3000, props, 3);
    struct txo_relay_opts ro = relay_opts("kafka-dead", 1, 1, 2);
    struct txo_relay *relay = testrelay_new(t.db, pub, &ro);

    /* (1) A record larger than the cluster takes: permanent, dead-lettered at once. */
    /* Each event in an aggregate of its own (aggregate = its number), so that a dead letter
     * holds back nothing the next step publishes. */
    append(&t, (struct append_ctx){1, 1, 100, ft.prefix, NULL, 20000}, 1);
    assert_int_equal(testrelay_run_once(relay), 1);
    assert_int_equal(count_status(&t, "FAILED"), 1);
    assert_int_equal(testdb_i64(t.db, "SELECT attempts FROM outbox_events", NULL, 0), 1);
    assert_int_equal(testdb_i64(t.db, "SELECT COUNT(*) FROM dead_letter_events", NULL, 0), 1);
    char *why = testdb_str(t.db, "SELECT last_error FROM outbox_events", NULL, 0);
    assert_non_null(strstr(why, "MSG_SIZE_TOO_LARGE"));
    txo_free(why);

    /* (2) Transient until the attempt limit: brokers down for two attempts. */
    append(&t, (struct append_ctx){2, 2, 100, ft.prefix, NULL, 0}, 1);
    testkafka_set_brokers(&testkafka_shared, false);
    assert_int_equal(testrelay_run_once(relay), 1);
    assert_int_equal(count_status(&t, "PENDING"), 1);
    txo_sleep_ms(5);
    assert_int_equal(testrelay_run_once(relay), 1);
    testkafka_set_brokers(&testkafka_shared, true);
    assert_int_equal(count_status(&t, "FAILED"), 2);
    assert_int_equal(testdb_i64(t.db, "SELECT COUNT(*) FROM dead_letter_events", NULL, 0), 2);

    /* (3) Not authorised to write the topic: permanent too (last: librdkafka then fails
     * the topic at once until its metadata is refreshed). */
    append(&t, (struct append_ctx){3, 3, 100, ft.prefix, NULL, 0}, 1);
    rd_kafka_mock_push_request_errors(testkafka_mock(&testkafka_shared), PRODUCE_REQUEST, 1,
                                      RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
    assert_int_equal(testrelay_run_once(relay), 1);
    assert_int_equal(count_status(&t, "FAILED"), 3);
    assert_int_equal(testdb_i64(t.db, "SELECT COUNT(*) FROM dead_letter_events", NULL, 0), 3);
    rd_kafka_mock_clear_request_errors(testkafka_mock(&testkafka_shared), PRODUCE_REQUEST);

    txo_relay_free(relay);
    txo_publisher_free(pub);
    testdb_teardown(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topic_names),
        cmocka_unit_test(test_record_contract),
        cmocka_unit_test(test_brokers_down_then_back),
        cmocka_unit_test(test_dead_letters),
    };
    /* librdkafka's connection chatter (info, warn) only with TXO_TEST_LOG set. */
    if (getenv("TXO_TEST_LOG") == NULL)
        txo_log_set_level(TXO_LOG_ERROR);
    if (getenv("TXO_TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TXO_TEST_FILTER"));
    return cmocka_run_group_tests(tests, testkafka_group_setup, testkafka_group_teardown);
}
