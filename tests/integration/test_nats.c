/*
 * The NATS JetStream transport against a real nats-server (tests/support/testnats.h, a fresh
 * server per test): a published batch reaches the consumer once per message with the right
 * subject, Nats-Msg-Id and envelope; the same idempotency key published twice is stored once
 * (server-side dedupe); the consumer acks only after the handler succeeded (a transient error
 * brings the message back with delivery 2, a permanent one terminates it for good); two
 * consumers on one durable share the work without duplicates; a server that is down at
 * creation is not fatal and publishing fails fast until it is back; a consumer fails fast while
 * the server is down and receives again once it is back on the same store; a deleted stream is
 * re-created by the publisher; and the relay end to end:
 * rows appended with txo_outbox_append on a real MariaDB are drained into the stream, all
 * PUBLISHED, the stream holding exactly one message per row.
 *
 * What the broker stored is read back with cnats directly (testnats_stream_*), not through
 * the code under test.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testdb.h"
#include "testnats.h"
#include "txo/consumer.h"
#include "txo/nats.h"

#define STREAM "TXO_EVENTS"

struct ctx {
    struct testnats nats;
    struct txo_nats_opts o;
};

static int setup(void **state)
{
    struct ctx *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    testnats_start(&c->nats);
    txo_nats_opts_init(&c->o);
    c->o.url = c->nats.url;
    c->o.connect_timeout_ms = 1000;
    c->o.reconnect_wait_ms = 100;
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    txo_log_set_sink(NULL, NULL); /* a test that failed may have left its capturing sink */
    txo_log_set_level(TXO_LOG_INFO);
    testnats_cleanup(&c->nats);
    free(c);
    return 0;
}

/* ---- messages ---- */

struct batch {
    struct txo_outbox_message *msgs;
    char (*keys)[32];
    char (*payloads)[64];
    int *results;
    struct txo_error *errors;
    size_t n;
};

/* Messages 1..n (ids first_id ..), key "<prefix>:<id>"; odd ids are orders, even payments. */
static void batch_init(struct batch *b, size_t n, int64_t first_id, const char *prefix)
{
    memset(b, 0, sizeof(*b));
    b->n = n;
    b->msgs = calloc(n, sizeof(*b->msgs));
    b->keys = calloc(n, sizeof(*b->keys));
    b->payloads = calloc(n, sizeof(*b->payloads));
    b->results = calloc(n, sizeof(*b->results));
    b->errors = calloc(n, sizeof(*b->errors));
    assert_true(b->msgs && b->keys && b->payloads && b->results && b->errors);
    for (size_t i = 0; i < n; i++) {
        int64_t id = first_id + (int64_t)i;
        snprintf(b->keys[i], sizeof(b->keys[i]), "%s:%lld", prefix, (long long)id);
        snprintf(b->payloads[i], sizeof(b->payloads[i]), "{\"n\": %lld, \"big\": 9007199254740993}",
                 (long long)id);
        struct txo_outbox_message *m = &b->msgs[i];
        m->id = id;
        m->aggregate_type = id % 2 ? "order" : "pay.ment v2";
        m->aggregate_id = b->keys[i] + strlen(prefix) + 1; /* the id, as text */
        m->event_type = id % 2 ? "OrderCreated" : "Payment*Charged>";
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
    free(b->payloads);
    free(b->results);
    free(b->errors);
}

static int publish(struct txo_publisher *pub, struct batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        b->results[i] = 99;
        txo_error_init(&b->errors[i]);
    }
    return pub->ops->publish_batch(pub->self, b->msgs, b->n, b->results, b->errors);
}

static void assert_all_published(const struct batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        if (b->results[i] != 0)
            fail_msg("message %zu (%s): result %d: %s", i, b->keys[i], b->results[i],
                     b->errors[i].msg);
    }
}

static struct txo_publisher *new_publisher(const struct txo_nats_opts *o)
{
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_publisher_nats_new(o, &pub, &err) < 0)
        fail_msg("txo_publisher_nats_new: %s", err.msg);
    return pub;
}

/* ---- the recording handler ---- */

struct received {
    char subject[128];
    char msg_id[64];
    char *data;
    uint64_t delivery;
};

struct collector {
    pthread_mutex_t mu; /* handlers of different consumers may share a collector */
    struct received *got;
    size_t n, cap;
    /* Behaviour: msg ids that fail on their first delivery with transient_code, and msg ids
     * that always fail with TXO_EINVAL. */
    const char *transient_id;
    int transient_code;
    const char *permanent_id;
    unsigned sleep_ms;
};

static void collector_init(struct collector *col)
{
    memset(col, 0, sizeof(*col));
    pthread_mutex_init(&col->mu, NULL);
}

static void collector_release(struct collector *col)
{
    for (size_t i = 0; i < col->n; i++)
        free(col->got[i].data);
    free(col->got);
    pthread_mutex_destroy(&col->mu);
}

static int collect(void *arg, const struct txo_inbound_message *msg, struct txo_error *err)
{
    struct collector *col = arg;
    if (col->sleep_ms > 0)
        txo_sleep_ms(col->sleep_ms);
    pthread_mutex_lock(&col->mu);
    if (col->n == col->cap) {
        col->cap = col->cap ? col->cap * 2 : 64;
        col->got = realloc(col->got, col->cap * sizeof(*col->got));
        assert_non_null(col->got);
    }
    struct received *r = &col->got[col->n++];
    snprintf(r->subject, sizeof(r->subject), "%s", msg->subject ? msg->subject : "(null)");
    snprintf(r->msg_id, sizeof(r->msg_id), "%s", msg->msg_id ? msg->msg_id : "(null)");
    r->data = malloc(msg->len + 1);
    assert_non_null(r->data);
    memcpy(r->data, msg->data, msg->len);
    r->data[msg->len] = '\0';
    r->delivery = msg->delivery;
    pthread_mutex_unlock(&col->mu);

    if (col->permanent_id != NULL && strcmp(r->msg_id, col->permanent_id) == 0)
        return txo_error_set(err, TXO_EINVAL, "payload rejected by the test");
    if (col->transient_id != NULL && strcmp(r->msg_id, col->transient_id) == 0 &&
        msg->delivery == 1)
        return txo_error_set(err, col->transient_code, "consumer database down");
    return 0;
}

static size_t count_id(struct collector *col, const char *id)
{
    size_t k = 0;
    pthread_mutex_lock(&col->mu);
    for (size_t i = 0; i < col->n; i++)
        k += strcmp(col->got[i].msg_id, id) == 0;
    pthread_mutex_unlock(&col->mu);
    return k;
}

static size_t collected(struct collector *col)
{
    pthread_mutex_lock(&col->mu);
    size_t n = col->n;
    pthread_mutex_unlock(&col->mu);
    return n;
}

static struct txo_consumer *new_consumer(const struct txo_nats_opts *o, struct collector *col)
{
    struct txo_consumer *cons = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_nats_new(o, &(struct txo_handler){.one = collect, .arg = col}, &cons, &err) <
        0)
        fail_msg("txo_consumer_nats_new: %s", err.msg);
    assert_string_equal(txo_consumer_name(cons), "nats");
    return cons;
}

static size_t poll_once(struct txo_consumer *cons, size_t max, int64_t timeout_ms)
{
    size_t handled = 0;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_poll(cons, max, timeout_ms, &handled, &err) < 0)
        fail_msg("txo_consumer_poll: %s", err.msg);
    return handled;
}

/* Polls until the collector holds at least want messages (10 s at most). */
static void poll_until(struct txo_consumer *cons, struct collector *col, size_t want)
{
    int64_t deadline = txo_monotonic_ms() + 10000;
    while (collected(col) < want && txo_monotonic_ms() < deadline)
        (void)poll_once(cons, 25, 200);
    if (collected(col) < want)
        fail_msg("received %zu messages, want %zu", collected(col), want);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ---- (0) subjects ---- */

static void test_subject_sanitising(void **state)
{
    (void)state;
    char s[64];
    assert_int_equal(txo_nats_subject("txo.events", "order", "OrderCreated", s, sizeof(s), NULL),
                     0);
    assert_string_equal(s, "txo.events.order.OrderCreated");
    assert_int_equal(txo_nats_subject("x", "pay.ment v2", "A*B>\tC", s, sizeof(s), NULL), 0);
    assert_string_equal(s, "x.pay_ment_v2.A_B__C");
    assert_int_equal(txo_nats_subject("x", "", "E", s, sizeof(s), NULL), 0);
    assert_string_equal(s, "x._.E");
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_nats_subject("bad..prefix", "a", "b", s, sizeof(s), &err), TXO_EINVAL);
    assert_int_equal(txo_nats_subject("wild.*", "a", "b", s, sizeof(s), NULL), TXO_EINVAL);
    assert_int_equal(txo_nats_subject("p", "aaaaaaaaaa", "bbbbbbbbbb", s, 10, NULL), TXO_EINVAL);
    assert_string_equal(s, "");

    struct txo_nats_opts o;
    txo_nats_opts_init(&o);
    assert_string_equal(o.stream, "TXO_EVENTS");
    assert_string_equal(o.subject_prefix, "txo.events");
    assert_string_equal(o.durable, "txo-worker");
    assert_int_equal(o.ack_timeout_ms, 5000);
    assert_int_equal(o.duplicate_window_ms, 120000);
    assert_int_equal(o.max_deliver, -1);
    struct txo_publisher *pub = NULL;
    o.stream = "has.dot";
    assert_int_equal(txo_publisher_nats_new(&o, &pub, NULL), TXO_EINVAL);
    o.stream = "OK";
    o.durable = "a.b";
    struct txo_consumer *cons = NULL;
    assert_int_equal(
        txo_consumer_nats_new(&o, &(struct txo_handler){.one = collect, .arg = NULL}, &cons, NULL),
        TXO_EINVAL);
    assert_null(pub);
    assert_null(cons);
}

/* ---- (1) publish a batch, consume every message once ---- */

static void test_publish_and_consume_once(void **state)
{
    struct ctx *c = *state;
    const size_t n = 50;
    struct txo_publisher *pub = new_publisher(&c->o);
    struct batch b;
    batch_init(&b, n, 1, "k");
    assert_int_equal(publish(pub, &b), 0);
    assert_all_published(&b);
    assert_int_equal(testnats_stream_msgs(&c->nats, STREAM), n);

    struct collector col;
    collector_init(&col);
    struct txo_consumer *cons = new_consumer(&c->o, &col);
    poll_until(cons, &col, n);
    assert_int_equal(collected(&col), n);
    for (size_t i = 0; i < n; i++) {
        const struct txo_outbox_message *m = &b.msgs[i];
        assert_int_equal(count_id(&col, m->idempotency_key), 1);
        const struct received *r = NULL;
        for (size_t k = 0; k < col.n; k++) {
            if (strcmp(col.got[k].msg_id, m->idempotency_key) == 0)
                r = &col.got[k];
        }
        assert_non_null(r);
        char subject[128];
        assert_int_equal(txo_nats_subject("txo.events", m->aggregate_type, m->event_type, subject,
                                          sizeof(subject), NULL),
                         0);
        assert_string_equal(r->subject, subject);
        char *env = txo_envelope_encode(m, NULL, NULL);
        assert_non_null(env);
        assert_string_equal(r->data, env);
        txo_free(env);
        assert_int_equal(r->delivery, 1);
    }
    assert_string_equal(col.got[0].subject, "txo.events.order.OrderCreated");
    assert_non_null(strstr(col.got[1].subject, "txo.events.pay_ment_v2.Payment_Charged_"));

    /* Nothing more, and nothing left unacknowledged. */
    assert_int_equal(poll_once(cons, 10, 300), 0);
    assert_int_equal(testnats_consumer_ack_pending(&c->nats, STREAM, "txo-worker"), 0);

    /* Freeing the consumer keeps the durable (Destroy, not Unsubscribe). */
    txo_consumer_free(cons);
    assert_true(testnats_consumer_exists(&c->nats, STREAM, "txo-worker"));

    collector_release(&col);
    batch_free(&b);
    txo_publisher_free(pub);
}

/* ---- (1b) CloudEvents binary mode: attributes in headers, the payload as the body ---- */

struct decoded {
    size_t n;
    char types[8][32], keys[8][32], aggregate_ids[8][32], payloads[8][64];
};

/* A handler that reads each message as txo's worker does (txo_envelope_decode_message). */
static int decode_collect(void *arg, const struct txo_inbound_message *msg, struct txo_error *err)
{
    struct decoded *d = arg;
    struct txo_event ev;
    int rc = txo_envelope_decode_message(msg, &ev, err);
    if (rc != 0)
        return rc;
    if (d->n < 8) {
        snprintf(d->types[d->n], sizeof(d->types[0]), "%s", ev.type);
        snprintf(d->keys[d->n], sizeof(d->keys[0]), "%s", ev.idempotency_key);
        snprintf(d->aggregate_ids[d->n], sizeof(d->aggregate_ids[0]), "%s", ev.aggregate_id);
        snprintf(d->payloads[d->n], sizeof(d->payloads[0]), "%s", ev.payload);
        d->n++;
    }
    txo_event_release(&ev);
    return 0;
}

static void test_cloudevents_binary_mode(void **state)
{
    struct ctx *c = *state;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_envelope_set_default(TXO_ENVELOPE_CLOUDEVENTS_BINARY, "urn:shop", &err),
                     0);
    struct txo_publisher *pub = new_publisher(&c->o);
    struct batch b;
    batch_init(&b, 2, 1, "k");
    assert_int_equal(publish(pub, &b), 0);
    assert_all_published(&b);

    /* What the broker stored, read with cnats: the body is the payload, compact. */
    char *v = NULL, *data = NULL;
    testnats_stream_msg(&c->nats, STREAM, 1, "ce-specversion", &v, &data);
    assert_string_equal(v, "1.0");
    assert_string_equal(data, "{\"n\":1,\"big\":9007199254740993}");
    free(v);
    free(data);
    const char *want[][2] = {
        {"ce-id", "k:2"},
        {"ce-source", "urn:shop"},
        {"ce-type", "Payment*Charged>"},
        {"ce-subject", "pay.ment%20v2/2"}, /* a space is percent-encoded */
        {"ce-time", "2026-11-30T15:37:00.123456Z"},
        {"ce-txoid", "2"},
        {"ce-txoattempt", "1"},
        {"ce-txoaggregatetype", "pay.ment%20v2"},
        {"ce-txoaggregateid", "2"},
        {"Content-Type", "application/json"},
        {"Nats-Msg-Id", "k:2"},
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(want); i++) {
        testnats_stream_msg(&c->nats, STREAM, 2, want[i][0], &v, NULL);
        if (v == NULL || strcmp(v, want[i][1]) != 0)
            fail_msg("header %s: \"%s\", want \"%s\"", want[i][0], v ? v : "(none)", want[i][1]);
        free(v);
    }

    /* txo's consumer reads them back (the worker decodes this way). */
    struct decoded d;
    memset(&d, 0, sizeof(d));
    struct txo_consumer *cons = NULL;
    if (txo_consumer_nats_new(&c->o, &(struct txo_handler){.one = decode_collect, .arg = &d}, &cons,
                              &err) < 0)
        fail_msg("txo_consumer_nats_new: %s", err.msg);
    int64_t deadline = txo_monotonic_ms() + 10000;
    while (d.n < 2 && txo_monotonic_ms() < deadline)
        (void)poll_once(cons, 10, 200);
    assert_int_equal(d.n, 2);
    assert_string_equal(d.types[0], "OrderCreated");
    assert_string_equal(d.keys[0], "k:1");
    assert_string_equal(d.payloads[0], "{\"n\":1,\"big\":9007199254740993}");
    assert_string_equal(d.types[1], "Payment*Charged>");
    assert_string_equal(d.aggregate_ids[1], "2");
    assert_int_equal(testnats_consumer_ack_pending(&c->nats, STREAM, "txo-worker"), 0);
    txo_consumer_free(cons);
    batch_free(&b);
    txo_publisher_free(pub);
    assert_int_equal(txo_envelope_set_default(TXO_ENVELOPE_TXO, NULL, &err), 0);
}

/* ---- (2) the same idempotency key twice is stored once ---- */

static void test_dedupe_by_msg_id(void **state)
{
    struct ctx *c = *state;
    struct txo_publisher *pub = new_publisher(&c->o);
    struct batch b;
    batch_init(&b, 2, 1, "k");
    assert_int_equal(publish(pub, &b), 0);
    assert_all_published(&b);

    /* Again (a relay retry after a lost ack), and twice within one batch. */
    assert_int_equal(publish(pub, &b), 0);
    assert_all_published(&b);
    struct batch twice;
    batch_init(&twice, 2, 3, "k");
    snprintf(twice.keys[1], sizeof(twice.keys[1]), "k:3");
    assert_int_equal(publish(pub, &twice), 0);
    assert_all_published(&twice);

    assert_int_equal(testnats_stream_msgs(&c->nats, STREAM), 3);
    char **ids = NULL;
    size_t count = testnats_stream_msg_ids(&c->nats, STREAM, &ids);
    assert_int_equal(count, 3);
    assert_string_equal(ids[0], "k:1");
    assert_string_equal(ids[1], "k:2");
    assert_string_equal(ids[2], "k:3");
    testnats_free_ids(ids, count);

    /* Deleting the stream (purging would keep the dedupe window) lets the publisher
     * re-create it on its next batch, with the same keys stored again. */
    testnats_delete_stream(&c->nats, STREAM);
    assert_int_equal(publish(pub, &b), 0);
    for (size_t i = 0; i < b.n; i++) {
        assert_int_equal(b.results[i], TXO_EUNAVAILABLE);
        assert_non_null(strstr(b.errors[i].msg, "no stream listens on the subject"));
    }
    assert_int_equal(publish(pub, &b), 0);
    assert_all_published(&b);
    assert_int_equal(testnats_stream_msgs(&c->nats, STREAM), 2);

    batch_free(&twice);
    batch_free(&b);
    txo_publisher_free(pub);
}

/*
 * --nats-url listing several servers (the nodes of a cluster): the publisher connects to one
 * that answers. cnats 3.4 takes such a list in natsOptions_SetURL as one URL and never
 * connects, so the publisher hands it to cnats as an array.
 */
static void test_url_list(void **state)
{
    struct ctx *c = *state;
    char list[300];
    snprintf(list, sizeof(list), "nats://127.0.0.1:1, %s", c->nats.url);
    c->o.url = list;
    c->o.connect_required = true;
    struct txo_publisher *pub = new_publisher(&c->o);
    struct batch b;
    batch_init(&b, 3, 1, "list");
    assert_int_equal(publish(pub, &b), 0);
    assert_all_published(&b);
    assert_int_equal(testnats_stream_msgs(&c->nats, STREAM), 3);
    batch_free(&b);
    txo_publisher_free(pub);

    struct txo_publisher *none = NULL;
    struct txo_error err;
    txo_error_init(&err);
    c->o.url = "nats://127.0.0.1:1,,nats://127.0.0.1:2";
    assert_int_not_equal(txo_publisher_nats_new(&c->o, &none, &err), 0);
    assert_null(none);
}

/* ---- (3) ack only after success: transient -> redelivered, permanent -> terminated ---- */

static void test_transient_failure_is_redelivered(void **state)
{
    struct ctx *c = *state;
    c->o.nak_delay_ms = 200;
    struct txo_publisher *pub = new_publisher(&c->o);
    struct batch b;
    batch_init(&b, 3, 1, "k");
    assert_int_equal(publish(pub, &b), 0);
    assert_all_published(&b);

    struct collector col;
    collector_init(&col);
    col.transient_id = "k:2";
    col.transient_code = TXO_EUNAVAILABLE;
    struct txo_consumer *cons = new_consumer(&c->o, &col);
    poll_until(cons, &col, 4);
    assert_int_equal(count_id(&col, "k:1"), 1);
    assert_int_equal(count_id(&col, "k:3"), 1);
    assert_int_equal(count_id(&col, "k:2"), 2);
    uint64_t deliveries[2];
    size_t k = 0;
    for (size_t i = 0; i < col.n; i++) {
        if (strcmp(col.got[i].msg_id, "k:2") == 0)
            deliveries[k++] = col.got[i].delivery;
        else
            assert_int_equal(col.got[i].delivery, 1);
    }
    assert_int_equal(deliveries[0], 1);
    assert_int_equal(deliveries[1], 2);

    /* Acked on the second delivery: never seen again. */
    int64_t until = txo_monotonic_ms() + 700;
    while (txo_monotonic_ms() < until)
        (void)poll_once(cons, 10, 100);
    assert_int_equal(collected(&col), 4);
    assert_int_equal(testnats_consumer_ack_pending(&c->nats, STREAM, "txo-worker"), 0);

    txo_consumer_free(cons);
    collector_release(&col);
    batch_free(&b);
    txo_publisher_free(pub);
}

struct log_capture {
    pthread_mutex_t mu;
    unsigned errors_with_reason;
};

static void capture_sink(enum txo_log_level level, const char *component, const char *msg,
                         void *arg)
{
    struct log_capture *lc = arg;
    (void)component;
    pthread_mutex_lock(&lc->mu);
    if (level == TXO_LOG_ERROR && strstr(msg, "terminated") != NULL &&
        strstr(msg, "message_id=k:1") != NULL &&
        strstr(msg, "payload rejected by the test") != NULL)
        lc->errors_with_reason++;
    pthread_mutex_unlock(&lc->mu);
}

static void test_permanent_failure_is_terminated(void **state)
{
    struct ctx *c = *state;
    c->o.ack_wait_ms = 800; /* an unacked (not terminated) message would be back within this */
    c->o.nak_delay_ms = 100;
    struct txo_publisher *pub = new_publisher(&c->o);
    struct batch b;
    batch_init(&b, 2, 1, "k");
    assert_int_equal(publish(pub, &b), 0);
    assert_all_published(&b);

    struct log_capture lc = {.errors_with_reason = 0};
    pthread_mutex_init(&lc.mu, NULL);
    txo_log_set_sink(capture_sink, &lc);

    struct collector col;
    collector_init(&col);
    col.permanent_id = "k:1";
    struct txo_consumer *cons = new_consumer(&c->o, &col);
    poll_until(cons, &col, 2);
    int64_t until = txo_monotonic_ms() + 2500; /* three ack waits */
    while (txo_monotonic_ms() < until)
        (void)poll_once(cons, 10, 100);
    txo_log_set_sink(NULL, NULL);

    assert_int_equal(count_id(&col, "k:1"), 1);
    assert_int_equal(count_id(&col, "k:2"), 1);
    assert_int_equal(collected(&col), 2);
    assert_int_equal(lc.errors_with_reason, 1);
    assert_int_equal(testnats_consumer_ack_pending(&c->nats, STREAM, "txo-worker"), 0);

    txo_consumer_free(cons);
    pthread_mutex_destroy(&lc.mu);
    collector_release(&col);
    batch_free(&b);
    txo_publisher_free(pub);
}

/* ---- (4) two consumers on one durable share the work ---- */

struct worker {
    struct txo_consumer *cons;
    struct collector *col;
    atomic_size_t *total;
    size_t want;
    size_t handled;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    int64_t deadline = txo_monotonic_ms() + 20000;
    while (atomic_load(w->total) < w->want && txo_monotonic_ms() < deadline) {
        size_t handled = 0;
        if (txo_consumer_poll(w->cons, 5, 100, &handled, NULL) == 0) {
            w->handled += handled;
            atomic_fetch_add(w->total, handled);
        }
    }
    return NULL;
}

static void test_two_consumers_share_a_durable(void **state)
{
    struct ctx *c = *state;
    const size_t n = 200;
    struct txo_publisher *pub = new_publisher(&c->o);
    struct batch b;
    batch_init(&b, n, 1, "k");
    assert_int_equal(publish(pub, &b), 0);
    assert_all_published(&b);

    struct collector col[2];
    struct worker w[2];
    pthread_t th[2];
    atomic_size_t total;
    atomic_init(&total, 0);
    for (int i = 0; i < 2; i++) {
        collector_init(&col[i]);
        col[i].sleep_ms = 1;
        w[i] = (struct worker){new_consumer(&c->o, &col[i]), &col[i], &total, n, 0};
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);

    assert_int_equal(col[0].n + col[1].n, n);
    if (col[0].n == 0 || col[1].n == 0)
        fail_msg("work not shared: %zu and %zu messages", col[0].n, col[1].n);
    char **all = calloc(n, sizeof(*all));
    assert_non_null(all);
    size_t k = 0;
    for (int i = 0; i < 2; i++) {
        for (size_t j = 0; j < col[i].n; j++) {
            assert_int_equal(col[i].got[j].delivery, 1);
            all[k++] = col[i].got[j].msg_id;
        }
    }
    qsort(all, n, sizeof(*all), cmp_str);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(all[i - 1], all[i]) == 0)
            fail_msg("message %s delivered twice", all[i]);
    }
    free(all);
    for (int i = 0; i < 2; i++) {
        txo_consumer_free(w[i].cons);
        collector_release(&col[i]);
    }
    batch_free(&b);
    txo_publisher_free(pub);
}

/* ---- (5) a server that is down: not fatal, fails fast, recovers ---- */

static void test_server_down_at_creation(void **state)
{
    struct ctx *c = *state;
    testnats_stop(&c->nats);

    /* connect_required: creation fails. */
    struct txo_nats_opts strict = c->o;
    strict.connect_required = true;
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_publisher_nats_new(&strict, &pub, &err), TXO_EUNAVAILABLE);
    assert_null(pub);

    /* Default: creation succeeds, publishing and polling fail fast and transiently. */
    pub = new_publisher(&c->o);
    struct collector col;
    collector_init(&col);
    struct txo_consumer *cons = new_consumer(&c->o, &col);
    struct batch b;
    batch_init(&b, 5, 1, "k");
    int64_t t0 = txo_monotonic_ms();
    assert_int_equal(publish(pub, &b), 0);
    int64_t publish_ms = txo_monotonic_ms() - t0;
    if (publish_ms > 500)
        fail_msg("publishing while the server is down took %lld ms", (long long)publish_ms);
    for (size_t i = 0; i < b.n; i++) {
        assert_int_equal(b.results[i], TXO_EUNAVAILABLE);
        assert_true(txo_err_is_transient(b.results[i]));
        assert_non_null(strstr(b.errors[i].msg, "not connected"));
    }
    size_t handled = 99;
    t0 = txo_monotonic_ms();
    txo_error_init(&err);
    assert_int_equal(txo_consumer_poll(cons, 10, 2000, &handled, &err), TXO_EUNAVAILABLE);
    assert_true(txo_monotonic_ms() - t0 < 500);
    assert_int_equal(handled, 0);

    /* Back: both sides reconnect in the background and work again. */
    testnats_restart(&c->nats);
    int64_t deadline = txo_monotonic_ms() + 10000;
    do {
        txo_sleep_ms(50);
        assert_int_equal(publish(pub, &b), 0);
    } while (b.results[0] != 0 && txo_monotonic_ms() < deadline);
    assert_all_published(&b);
    deadline = txo_monotonic_ms() + 10000;
    while (collected(&col) < b.n && txo_monotonic_ms() < deadline) {
        handled = 0;
        if (txo_consumer_poll(cons, 10, 200, &handled, NULL) < 0)
            txo_sleep_ms(50);
    }
    assert_int_equal(collected(&col), b.n);
    assert_int_equal(testnats_stream_msgs(&c->nats, STREAM), b.n);

    txo_consumer_free(cons);
    collector_release(&col);
    batch_free(&b);
    txo_publisher_free(pub);
}

static void test_consumer_survives_a_restart(void **state)
{
    struct ctx *c = *state;
    struct txo_publisher *pub = new_publisher(&c->o);
    struct batch b;
    batch_init(&b, 3, 1, "k");
    assert_int_equal(publish(pub, &b), 0);
    assert_all_published(&b);
    struct collector col;
    collector_init(&col);
    struct txo_consumer *cons = new_consumer(&c->o, &col);
    poll_until(cons, &col, 3);

    /* Down: a poll fails fast and transiently, even with a long wait. */
    testnats_stop(&c->nats);
    int64_t deadline = txo_monotonic_ms() + 5000;
    int rc = 0;
    size_t handled = 0;
    while (rc == 0 && txo_monotonic_ms() < deadline)
        rc = txo_consumer_poll(cons, 10, 100, &handled, NULL); /* until cnats noticed */
    assert_int_equal(rc, TXO_EUNAVAILABLE);
    int64_t t0 = txo_monotonic_ms();
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_consumer_poll(cons, 10, 3000, &handled, &err), TXO_EUNAVAILABLE);
    assert_true(txo_monotonic_ms() - t0 < 500);
    assert_int_equal(handled, 0);
    assert_non_null(strstr(err.msg, "not connected"));

    /* Back on the same store: the durable is still there and new messages arrive. */
    testnats_restart(&c->nats);
    struct batch more;
    batch_init(&more, 2, 4, "k");
    deadline = txo_monotonic_ms() + 10000;
    do {
        txo_sleep_ms(50);
        assert_int_equal(publish(pub, &more), 0);
    } while (more.results[0] != 0 && txo_monotonic_ms() < deadline);
    assert_all_published(&more);
    deadline = txo_monotonic_ms() + 10000;
    while (collected(&col) < 5 && txo_monotonic_ms() < deadline) {
        if (txo_consumer_poll(cons, 10, 200, &handled, NULL) < 0)
            txo_sleep_ms(50);
    }
    assert_int_equal(collected(&col), 5);
    assert_int_equal(count_id(&col, "k:4"), 1);
    assert_int_equal(count_id(&col, "k:5"), 1);
    assert_int_equal(count_id(&col, "k:1"), 1); /* acked before the restart: not redelivered */
    assert_true(testnats_consumer_exists(&c->nats, STREAM, "txo-worker"));

    txo_consumer_free(cons);
    collector_release(&col);
    batch_free(&more);
    batch_free(&b);
    txo_publisher_free(pub);
}

/* ---- (6) the relay end to end: MariaDB -> relay -> NATS ---- */

struct append_ctx {
    unsigned from, to;
};

static int append_events(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct append_ctx *a = arg;
    for (unsigned i = a->from; i <= a->to; i++) {
        char key[32], payload[64];
        snprintf(key, sizeof(key), "order:%u:created", i);
        snprintf(payload, sizeof(payload), "{\"order_id\":%u,\"total_cents\":%u}", i, i * 100);
        char agg[16];
        snprintf(agg, sizeof(agg), "%u", i);
        struct txo_outbox_event ev = {
            .aggregate_type = "order",
            .aggregate_id = agg,
            .event_type = "OrderCreated",
            .payload_json = payload,
            .idempotency_key = key,
        };
        int rc = txo_outbox_append(tx, &ev, 0, NULL, NULL, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void test_relay_drains_into_the_stream(void **state)
{
    struct ctx *c = *state;
    const unsigned n = 300;
    struct testdb t;
    testdb_setup(&t, "nats_relay");
    for (unsigned from = 1; from <= n; from += 100) {
        struct append_ctx a = {from, from + 99};
        struct txo_error err;
        txo_error_init(&err);
        if (txo_db_transact(t.db, TXO_ISO_READ_COMMITTED, append_events, &a, &err) < 0)
            fail_msg("appending events: %s", err.msg);
    }

    struct txo_publisher *pub = new_publisher(&c->o);
    struct txo_relay_opts ro;
    txo_relay_opts_init(&ro);
    ro.relay_id = "nats-relay";
    ro.batch_size = 128;
    ro.drain = true;
    struct txo_relay *relay = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_relay_new(t.db, pub, &ro, &relay, &err) < 0)
        fail_msg("txo_relay_new: %s", err.msg);
    if (txo_relay_run(relay, &err) < 0)
        fail_msg("txo_relay_run: %s", err.msg);

    assert_int_equal(testdb_i64(t.db,
                                "SELECT COUNT(*) FROM outbox_events WHERE status = "
                                "'PUBLISHED' AND attempts = 0 AND last_error IS NULL",
                                NULL, 0),
                     n);
    struct txo_relay_stats st;
    txo_relay_get_stats(relay, &st);
    assert_int_equal(st.published, n);
    assert_int_equal(st.failed_attempts, 0);

    assert_int_equal(testnats_stream_msgs(&c->nats, STREAM), n);
    char **ids = NULL;
    size_t count = testnats_stream_msg_ids(&c->nats, STREAM, &ids);
    assert_int_equal(count, n);
    qsort(ids, count, sizeof(*ids), cmp_str);
    for (size_t i = 0; i < count; i++) {
        assert_non_null(ids[i]);
        if (i > 0 && strcmp(ids[i - 1], ids[i]) == 0)
            fail_msg("msg id %s stored twice", ids[i]);
        struct txo_param p = txo_p_str(ids[i]);
        assert_int_equal(testdb_i64(t.db,
                                    "SELECT COUNT(*) FROM outbox_events WHERE "
                                    "idempotency_key = ?",
                                    &p, 1),
                         1);
    }
    testnats_free_ids(ids, count);

    txo_relay_free(relay);
    txo_publisher_free(pub);
    testdb_teardown(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_subject_sanitising),
        cmocka_unit_test_setup_teardown(test_publish_and_consume_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cloudevents_binary_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dedupe_by_msg_id, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transient_failure_is_redelivered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_permanent_failure_is_terminated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_consumers_share_a_durable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_down_at_creation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_consumer_survives_a_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_relay_drains_into_the_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_url_list, setup, teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    txo_nats_shutdown(); /* cnats's threads, so leak checkers see a clean exit */
    return failed;
}
