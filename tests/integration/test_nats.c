/*
 * What is NATS's own in the JetStream transport, against a real nats-server
 * (tests/support/testnats.h, a fresh server per test); the contracts every transport keeps
 * (publish, order, consume, redelivery, dead letters, restart, CloudEvents) are checked in
 * tests/conformance. Here: subject names; the same idempotency key published twice is stored
 * once (server-side dedupe, Nats-Msg-Id) and a deleted stream is re-created by the publisher;
 * a list of server URLs; two consumers on one durable share the work without duplicates and
 * the durable outlives them; a server that is down at creation is not fatal
 * (connect_required makes it so), publishing and polling fail fast until it is back.
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

#include "testrun.h"
#include "testconsume.h"
#include "testdb.h"
#include "testbatch.h"
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

/* Messages 1..n (ids first_id ..), key "<prefix>:<id>"; odd ids are orders, even payments. */
static void batch_init(struct testbatch *b, size_t n, int64_t first_id, const char *prefix)
{
    testbatch_init(b, n, first_id, prefix);
    for (size_t i = 0; i < n; i++) {
        int64_t id = b->msgs[i].id;
        char payload[64];
        int len = snprintf(payload, sizeof(payload), "{\"n\": %lld, \"big\": 9007199254740993}",
                           (long long)id);
        testbatch_set_payload(b, i, payload, (size_t)len);
        b->msgs[i].aggregate_type = id % 2 ? "order" : "pay.ment v2";
        b->msgs[i].event_type = id % 2 ? "OrderCreated" : "Payment*Charged>";
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

struct collector {
    pthread_mutex_t mu;         /* handlers of different consumers may share a collector */
    struct testconsume_list rx; /* what the handlers were given */
    unsigned sleep_ms;
};

static void collector_init(struct collector *col)
{
    memset(col, 0, sizeof(*col));
    pthread_mutex_init(&col->mu, NULL);
}

static void collector_release(struct collector *col)
{
    testconsume_release(&col->rx);
    pthread_mutex_destroy(&col->mu);
}

static int collect(void *arg, const struct txo_inbound_message *msg, struct txo_error *err)
{
    struct collector *col = arg;
    if (col->sleep_ms > 0)
        txo_sleep_ms(col->sleep_ms);
    pthread_mutex_lock(&col->mu);
    (void)testconsume_add(&col->rx, msg);
    pthread_mutex_unlock(&col->mu);
    (void)err;
    return 0;
}

static size_t collected(struct collector *col)
{
    pthread_mutex_lock(&col->mu);
    size_t n = col->rx.n;
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

/* ---- (1b) CloudEvents binary mode: attributes in headers, the payload as the body ---- */

/* ---- (2) the same idempotency key twice is stored once ---- */

static void test_dedupe_by_msg_id(void **state)
{
    struct ctx *c = *state;
    struct txo_publisher *pub = new_publisher(&c->o);
    struct testbatch b;
    batch_init(&b, 2, 1, "k");
    assert_int_equal(testbatch_publish(pub, &b), 0);
    testbatch_assert_published(&b);

    /* Again (a relay retry after a lost ack), and twice within one batch. */
    assert_int_equal(testbatch_publish(pub, &b), 0);
    testbatch_assert_published(&b);
    struct testbatch twice;
    batch_init(&twice, 2, 3, "k");
    snprintf(twice.keys[1], sizeof(twice.keys[1]), "k:3");
    assert_int_equal(testbatch_publish(pub, &twice), 0);
    testbatch_assert_published(&twice);

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
    assert_int_equal(testbatch_publish(pub, &b), 0);
    for (size_t i = 0; i < b.n; i++) {
        assert_int_equal(b.results[i], TXO_EUNAVAILABLE);
        assert_non_null(strstr(b.errors[i].msg, "no stream listens on the subject"));
    }
    assert_int_equal(testbatch_publish(pub, &b), 0);
    testbatch_assert_published(&b);
    assert_int_equal(testnats_stream_msgs(&c->nats, STREAM), 2);

    testbatch_free(&twice);
    testbatch_free(&b);
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
    struct testbatch b;
    batch_init(&b, 3, 1, "list");
    assert_int_equal(testbatch_publish(pub, &b), 0);
    testbatch_assert_published(&b);
    assert_int_equal(testnats_stream_msgs(&c->nats, STREAM), 3);
    testbatch_free(&b);
    txo_publisher_free(pub);

    struct txo_publisher *none = NULL;
    struct txo_error err;
    txo_error_init(&err);
    c->o.url = "nats://127.0.0.1:1,,nats://127.0.0.1:2";
    assert_int_not_equal(txo_publisher_nats_new(&c->o, &none, &err), 0);
    assert_null(none);
}

/* ---- (3) ack only after success: transient -> redelivered, permanent -> terminated ---- */

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
    struct testbatch b;
    batch_init(&b, n, 1, "k");
    assert_int_equal(testbatch_publish(pub, &b), 0);
    testbatch_assert_published(&b);

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

    assert_int_equal(col[0].rx.n + col[1].rx.n, n);
    if (col[0].rx.n == 0 || col[1].rx.n == 0)
        fail_msg("work not shared: %zu and %zu messages", col[0].rx.n, col[1].rx.n);
    char **all = calloc(n, sizeof(*all));
    assert_non_null(all);
    size_t k = 0;
    for (int i = 0; i < 2; i++) {
        for (size_t j = 0; j < col[i].rx.n; j++) {
            assert_int_equal(col[i].rx.got[j].delivery, 1);
            all[k++] = col[i].rx.got[j].msg_id;
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
    /* Freeing the consumers keeps the durable (Destroy, not Unsubscribe). */
    assert_true(testnats_consumer_exists(&c->nats, STREAM, "txo-worker"));
    testbatch_free(&b);
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
    struct testbatch b;
    batch_init(&b, 5, 1, "k");
    int64_t t0 = txo_monotonic_ms();
    assert_int_equal(testbatch_publish(pub, &b), 0);
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
        assert_int_equal(testbatch_publish(pub, &b), 0);
    } while (b.results[0] != 0 && txo_monotonic_ms() < deadline);
    testbatch_assert_published(&b);
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
    testbatch_free(&b);
    txo_publisher_free(pub);
}

/* ---- (6) the relay end to end: MariaDB -> relay -> NATS ---- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_subject_sanitising, testrun_no_fixture),
        cmocka_unit_test(test_dedupe_by_msg_id),
        cmocka_unit_test(test_two_consumers_share_a_durable),
        cmocka_unit_test(test_server_down_at_creation),
        cmocka_unit_test(test_url_list),
    };
    return testnats_run_each(tests, TXO_ARRAY_LEN(tests), setup, teardown);
}
