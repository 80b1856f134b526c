/*
 * The Kafka consumer against librdkafka's mock cluster (3 brokers, replication factor 3,
 * tests/support/testkafka.h; one cluster for the whole binary, each test on topics and groups
 * of its own). What reached the cluster is read back with kcat, not with our code.
 *
 *   - a record failing transiently blocks its partition's commit and is redelivered with
 *     delivery 2 in partition order; a permanent one is skipped and copied to the dead-letter
 *     topic; types the consumer does not take are committed past without calling the
 *     handler; a rebalance between two members of a group loses nothing.
 * The publishing side is in test_kafka.c. The contracts every consumer keeps (ack,
 * redelivery, dead letters, the inbox dropping duplicates, an outage, CloudEvents) are in
 * tests/conformance.
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

#include "testconsume.h"
#include "testdb.h"
#include "testkafka.h"
#include "testrelay.h"
#include "txo/consumer.h"
#include "txo/inbox.h"
#include "txo/kafka.h"

#define PRODUCE_REQUEST 0 /* Kafka protocol ApiKey of ProduceRequest */
/*
 * How long records may take to arrive: a group join on the mock waits 3 s before it assigns,
 * and a loaded sanitizer run has taken over 20 s. Waits end as soon as the records are there.
 */
#define ARRIVAL_MS 60000

/* ---- the consumer's recording handler ---- */

struct collector {
    struct testconsume_list rx; /* what the handler was given */
    const char *transient_id;   /* fails with TXO_EUNAVAILABLE while delivery <= transient_times */
    unsigned transient_times;
    const char *permanent_id; /* always fails with TXO_EINVAL */
    unsigned sleep_ms;        /* per record: a slow consumer */
    /* Optional: record each message in the inbox of db (effects counts the first ones). */
    struct txo_db *db;
    size_t effects;
};

static void collector_release(struct collector *col)
{
    testconsume_release(&col->rx);
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
    if (col->sleep_ms > 0)
        txo_sleep_ms(col->sleep_ms);
    struct testconsume_msg *r = testconsume_add(&col->rx, msg);
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

static struct txo_consumer *new_consumer(const struct txo_kafka_opts *o, struct collector *col)
{
    struct txo_consumer *c = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_kafka_new(o, &(struct txo_handler){.one = collect, .arg = col}, NULL, &c,
                               &err) < 0)
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
    while (col->rx.n < want && txo_monotonic_ms() < deadline)
        (void)poll_once(c, 200);
    if (col->rx.n < want)
        fail_msg("received %zu of %zu records within %lld ms", col->rx.n, want,
                 (long long)timeout_ms);
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
                                          "topic.metadata.refresh.interval.ms=1000",
                                          "reconnect.backoff.max.ms=500"};

static void consumer_opts(struct txo_kafka_opts *o, const char *topic, const char *group)
{
    testkafka_opts(&testkafka_shared, o, "unused.{aggregate_type}");
    o->topics = topic;
    o->group = group;
    o->retry_delay_ms = 300;
    o->properties = group_props;
    o->n_properties = sizeof(group_props) / sizeof(group_props[0]);
}

/* Publishes n events of n_aggs aggregates to "<prefix>.order" (created with parts). */
static void publish_events(const char *prefix, size_t n, size_t n_aggs, int parts,
                           struct testbatch *b)
{
    char template[64], topic[64];
    snprintf(template, sizeof(template), "%s.{aggregate_type}", prefix);
    snprintf(topic, sizeof(topic), "%s.order", prefix);
    testkafka_create_topic(&testkafka_shared, topic, parts);
    struct txo_kafka_opts o;
    testkafka_opts(&testkafka_shared, &o, template);
    struct txo_publisher *pub = testkafka_publisher(&o);
    testkafka_batch_init(b, n, n_aggs, prefix);
    assert_int_equal(testbatch_publish(pub, b), 0);
    testbatch_assert_published(b);
    txo_publisher_free(pub);
}

/*
 * A new member of o's group receives only records published after this call: everything before
 * was committed. Proof: one fresh marker per aggregate of the earlier batch (n_aggs), so every
 * partition that held records gets one; an uncommitted record would come before its
 * partition's marker.
 */
static void assert_all_committed(const char *prefix, size_t n_aggs, const struct txo_kafka_opts *o)
{
    char template[64], mprefix[48];
    snprintf(template, sizeof(template), "%s.{aggregate_type}", prefix);
    snprintf(mprefix, sizeof(mprefix), "%s-marker", prefix);
    struct txo_kafka_opts po;
    testkafka_opts(&testkafka_shared, &po, template);
    struct txo_publisher *pub = testkafka_publisher(&po);
    struct testbatch m;
    testkafka_batch_init(&m, n_aggs, n_aggs, mprefix);
    assert_int_equal(testbatch_publish(pub, &m), 0);
    testbatch_assert_published(&m);
    txo_publisher_free(pub);
    struct txo_kafka_opts everything = *o;
    everything.event_type = NULL; /* a skipped type left uncommitted would show up too */
    struct collector col;
    memset(&col, 0, sizeof(col));
    struct txo_consumer *c = new_consumer(&everything, &col);
    poll_until(c, &col, n_aggs, ARRIVAL_MS);
    (void)poll_for(c, 300);
    txo_consumer_free(c);
    for (size_t i = 0; i < col.rx.n; i++) {
        if (strncmp(col.rx.got[i].msg_id, mprefix, strlen(mprefix)) != 0)
            fail_msg("record %s was delivered again to a new member: it was not committed",
                     col.rx.got[i].msg_id);
    }
    assert_int_equal(col.rx.n, n_aggs);
    collector_release(&col);
    testbatch_free(&m);
}

/* ---- the tests ---- */

/* A test's own names on the shared cluster: a fresh prefix, its topic and a fresh group. */
struct names {
    char prefix[32]; /* unused by any test before, after what */
    char topic[64];  /* "<prefix>.order" */
    char group[32];
};

static void fresh_names(struct names *nm, const char *what)
{
    testkafka_fresh(nm->prefix, sizeof(nm->prefix), what);
    testkafka_fresh(nm->group, sizeof(nm->group), "g");
    snprintf(nm->topic, sizeof(nm->topic), "%s.order", nm->prefix);
}

static void test_consumer_never_commits_past_a_failure(void **state)
{
    (void)state;
    struct names nm;
    fresh_names(&nm, "block");
    struct testbatch b;
    publish_events(nm.prefix, 20, 1, 1, &b); /* one aggregate, one partition: a strict sequence */

    struct txo_kafka_opts o;
    consumer_opts(&o, nm.topic, nm.group);
    o.retry_delay_ms = 60000; /* the failed record does not come back within this test */
    struct collector col;
    memset(&col, 0, sizeof(col));
    col.transient_id = b.keys[5];
    col.transient_times = 100;
    struct txo_consumer *c = new_consumer(&o, &col);
    poll_until(c, &col, 6, ARRIVAL_MS);
    assert_int_equal(poll_for(c, 1000), 0); /* blocked behind record 5 */
    assert_int_equal(col.rx.n, 6);
    txo_consumer_free(c); /* commits 0..4 on the way out, and nothing past 5 */

    /* The next member starts at the failed record: 5..19, none of 0..4 again. */
    struct collector next;
    memset(&next, 0, sizeof(next));
    c = new_consumer(&o, &next);
    poll_until(c, &next, 15, ARRIVAL_MS);
    assert_string_equal(next.rx.got[0].msg_id, b.keys[5]);
    assert_int_equal(next.rx.got[0].delivery, 1); /* Kafka keeps no count across members */
    for (size_t i = 0; i < next.rx.n; i++)
        assert_true(testkafka_key_index(next.rx.got[i].msg_id) >= 5);
    assert_int_equal(poll_for(c, 1000), 0);
    txo_consumer_free(c);
    collector_release(&next);
    collector_release(&col);
    testbatch_free(&b);
}

static void test_consumer_permanent_and_filter(void **state)
{
    (void)state;
    struct names nm;
    fresh_names(&nm, "perm");
    char dlq[64];
    snprintf(dlq, sizeof(dlq), "%s.dead", nm.prefix);
    testkafka_create_topic(&testkafka_shared, dlq, 1);
    struct testbatch b;
    publish_events(nm.prefix, 10, 2, 1, &b);
    /* Another event type on the same topic (one aggregate type, one topic), written by kcat. */
    const char *hdrs[] = {"txo-idempotency-key=other:1", "txo-event-type=OrderCancelled", NULL};
    testkafka_produce(&testkafka_shared, nm.topic, "0", "{\"type\":\"OrderCancelled\"}", hdrs);

    struct txo_kafka_opts o;
    consumer_opts(&o, nm.topic, nm.group);
    o.event_type = "OrderCreated";
    o.dead_letter_topic = dlq;
    struct collector col;
    memset(&col, 0, sizeof(col));
    col.permanent_id = b.keys[3];
    struct txo_consumer *c = new_consumer(&o, &col);
    poll_until(c, &col, 10, ARRIVAL_MS);
    assert_int_equal(poll_for(c, 1000), 0);
    assert_int_equal(testconsume_count_id(&col.rx, "other:1"), 0); /* never handed to the handler */
    assert_int_equal(testconsume_count_id(&col.rx, b.keys[3]),
                     1); /* rejected once, not redelivered */
    txo_consumer_free(c);

    /* The rejected record is in the dead-letter topic, with the reason. */
    struct testkafka_record *r = NULL;
    size_t n = testkafka_read(&testkafka_shared, dlq, &r);
    assert_int_equal(n, 1);
    char *id = testkafka_header(&r[0], TXO_KAFKA_HEADER_IDEMPOTENCY_KEY);
    char *reason = testkafka_header(&r[0], TXO_KAFKA_HEADER_DEAD_LETTER_REASON);
    assert_string_equal(id, b.keys[3]);
    assert_string_equal(reason, "payload rejected by the test");
    free(id);
    free(reason);
    testkafka_records_free(r, n);

    /* All of it, the skipped type included, was committed. */
    assert_all_committed(nm.prefix, 2, &o);
    collector_release(&col);
    testbatch_free(&b);
}

static void test_consumer_rebalance_loses_nothing(void **state)
{
    (void)state;
    struct names nm;
    fresh_names(&nm, "rebal");
    struct testbatch b;
    publish_events(nm.prefix, 400, 40, 4, &b);

    struct txo_kafka_opts o;
    consumer_opts(&o, nm.topic, nm.group);
    struct collector ca, cb;
    memset(&ca, 0, sizeof(ca));
    memset(&cb, 0, sizeof(cb));
    ca.sleep_ms = 15; /* a is slow: the rebalance happens while it still has work */
    struct txo_consumer *a = new_consumer(&o, &ca);
    poll_until(a, &ca, 20, ARRIVAL_MS); /* a owns every partition and has started */
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
        for (size_t i = 0; i < ca.rx.n; i++)
            seen[testkafka_key_index(ca.rx.got[i].msg_id)] = 1;
        for (size_t i = 0; i < cb.rx.n; i++)
            seen[testkafka_key_index(cb.rx.got[i].msg_id)] = 1;
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
    size_t total = ca.rx.n + cb.rx.n;
    print_message("rebalance: a handled %zu, b handled %zu, handled twice %zu of %zu\n", ca.rx.n,
                  cb.rx.n, total - b.n, b.n);
    assert_true(cb.rx.n > 0);
    txo_consumer_free(a);
    txo_consumer_free(c2);
    /* Once the group is settled everything is committed: a new member gets none of it. */
    assert_all_committed(nm.prefix, 40, &o);
    free(seen);
    collector_release(&ca);
    collector_release(&cb);
    testbatch_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_consumer_never_commits_past_a_failure),
        cmocka_unit_test(test_consumer_permanent_and_filter),
        cmocka_unit_test(test_consumer_rebalance_loses_nothing),
    };
    /* librdkafka's connection chatter (info, warn) only with TXO_TEST_LOG set. */
    if (getenv("TXO_TEST_LOG") == NULL)
        txo_log_set_level(TXO_LOG_ERROR);
    if (getenv("TXO_TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TXO_TEST_FILTER"));
    return cmocka_run_group_tests(tests, testkafka_group_setup, testkafka_group_teardown);
}
