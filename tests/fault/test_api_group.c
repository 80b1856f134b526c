/*
 * The order writer (app/order-service/order_writer.h): POST /orders committed in groups by
 * `txo serve --order-batch 50`, against a fresh database per test.
 *
 *   burst         200 POSTs from 50 concurrent clients: pairs of requests with one key and one
 *                 body, replays of keys completed before the burst, keys of those reused with
 *                 another body, unknown SKUs and plain new keys. Every answer is the one the
 *                 single path gives (201 with one order id per key, 422 idempotency_key_reused,
 *                 422 validation_failed), each distinct key has exactly one order, one
 *                 OrderCreated event and one COMPLETED key holding that order's id, the unknown
 *                 SKUs left nothing, and txo_order_batch_size shows groups of more than one.
 *   group fails   a key of a group is inserted meanwhile by another connection (as another
 *                 instance would): the group gets 1062, rolls back, and its requests go one by
 *                 one: the raced key replays the other connection's stored response, the others
 *                 are created.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>

#include "orders.h"
#include "testdb.h"
#include "testhttp.h"
#include "testorders.h"
#include "testproc.h"

/* ---- fixture ---- */

static int setup(void **state)
{
    *state = testhttp_api_new("api_group", 1000000);
    return 0;
}

static int64_t q_key(struct testhttp_api *c, const char *sql, const char *key)
{
    struct txo_param p[] = {txo_p_str(key)};
    return testdb_i64(c->t.db, sql, p, 1);
}

/* The body of request kind `body` (0: SKU-A x2 + SKU-B, 1: SKU-C, 2: another body, 3: an
 * unknown SKU), customer cust. */
static void order_body(char *out, size_t cap, int body, int cust)
{
    static const char *const items[] = {
        "[{\"sku\":\"SKU-A\",\"qty\":2,\"price_cents\":1250},"
        "{\"sku\":\"SKU-B\",\"qty\":1,\"price_cents\":99}]",
        "[{\"sku\":\"SKU-C\",\"qty\":3,\"price_cents\":500}]",
        "[{\"sku\":\"SKU-B\",\"qty\":9,\"price_cents\":1}]",
        "[{\"sku\":\"SKU-A\",\"qty\":1,\"price_cents\":1},{\"sku\":\"NO-SUCH\",\"qty\":1,"
        "\"price_cents\":1}]",
    };
    snprintf(out, cap, "{\"customer_id\":%d,\"items\":%s}", cust, items[body]);
}

/* ---- the burst ---- */

#define N_OLD     10
#define N_BURST   200
#define N_CLIENTS 50

enum kind { K_PAIR, K_REPLAY, K_REUSED, K_UNKNOWN_SKU, K_SOLO };

struct req {
    enum kind kind;
    char key[48];
    char body[256];
    struct testhttp_reply r;
};

/* Request i of the burst: 0..119 pairs (2k, 2k+1 share key and body), 120..149 replays of the
 * old keys, 150..159 old keys with another body, 160..169 unknown SKUs, 170..199 new keys. */
static void burst_req(struct req *q, int i)
{
    memset(q, 0, sizeof(*q));
    if (i < 120) {
        q->kind = K_PAIR;
        snprintf(q->key, sizeof(q->key), "pair-%d", i / 2);
        order_body(q->body, sizeof(q->body), (i / 2) % 2, 100 + i / 2);
    } else if (i < 150) {
        q->kind = K_REPLAY;
        snprintf(q->key, sizeof(q->key), "old-%d", (i - 120) % N_OLD);
        order_body(q->body, sizeof(q->body), 0, 1 + (i - 120) % N_OLD);
    } else if (i < 160) {
        q->kind = K_REUSED;
        snprintf(q->key, sizeof(q->key), "old-%d", i - 150);
        order_body(q->body, sizeof(q->body), 2, 1 + i - 150);
    } else if (i < 170) {
        q->kind = K_UNKNOWN_SKU;
        snprintf(q->key, sizeof(q->key), "bad-%d", i - 160);
        order_body(q->body, sizeof(q->body), 3, 50);
    } else {
        q->kind = K_SOLO;
        snprintf(q->key, sizeof(q->key), "solo-%d", i - 170);
        order_body(q->body, sizeof(q->body), 1, 300 + i);
    }
}

struct client {
    pthread_barrier_t *start;
    unsigned port;
    struct req *reqs; /* the whole burst; client k sends k, k + N_CLIENTS, ... */
    int k;
};

static void *client_main(void *arg)
{
    struct client *cl = arg;
    CURL *h = curl_easy_init();
    pthread_barrier_wait(cl->start);
    for (int i = cl->k; h != NULL && i < N_BURST; i += N_CLIENTS)
        testhttp_post_order(h, cl->port, cl->reqs[i].key, cl->reqs[i].body, &cl->reqs[i].r);
    curl_easy_cleanup(h);
    return NULL;
}

static double metric(struct testhttp_api *c, unsigned port, const char *series)
{
    struct testhttp_reply r = {0};
    testhttp_get(c->h, port, "/metrics", &r);
    testhttp_expect_status(&r, 200, "GET /metrics");
    double v = testhttp_metric_value(r.body, series);
    testhttp_reply_release(&r);
    return v;
}

static void test_burst(void **state)
{
    struct testhttp_api *c = *state;
    static const char *const args[] = {"--order-batch", "50", NULL};
    unsigned port = testhttp_txo_start(&c->procs[0], "api_group", "serve", args);

    /* The old keys, completed one by one before the burst. */
    int64_t old_id[N_OLD];
    for (int i = 0; i < N_OLD; i++) {
        char key[32], body[256];
        snprintf(key, sizeof(key), "old-%d", i);
        order_body(body, sizeof(body), 0, 1 + i);
        struct testhttp_reply r = {0};
        testhttp_post_order(c->h, port, key, body, &r);
        old_id[i] = testhttp_expect_created(&r, 201, "an old key");
        testhttp_reply_release(&r);
    }
    double groups_before = metric(c, port, "txo_order_batch_size_count");

    struct req *reqs = calloc(N_BURST, sizeof(*reqs));
    assert_non_null(reqs);
    for (int i = 0; i < N_BURST; i++)
        burst_req(&reqs[i], i);
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, N_CLIENTS), 0);
    struct client clients[N_CLIENTS];
    pthread_t threads[N_CLIENTS];
    for (int k = 0; k < N_CLIENTS; k++) {
        clients[k] = (struct client){.start = &start, .port = port, .reqs = reqs, .k = k};
        if (pthread_create(&threads[k], NULL, client_main, &clients[k]) != 0)
            abort();
    }
    for (int k = 0; k < N_CLIENTS; k++)
        pthread_join(threads[k], NULL);
    pthread_barrier_destroy(&start);

    int pair_409 = 0;
    for (int i = 0; i < N_BURST; i++) {
        struct req *rq = &reqs[i];
        char what[96];
        snprintf(what, sizeof(what), "burst request %d (key %s)", i, rq->key);
        switch (rq->kind) {
        case K_PAIR: {
            if (rq->r.status == 409) { /* only when the group fell back to the single path */
                testhttp_expect_error(&rq->r, 409, "request_in_progress", NULL, what);
                pair_409++;
                break;
            }
            int64_t id = testhttp_expect_created(&rq->r, 201, what);
            int64_t stored = q_key(c,
                                   "SELECT JSON_VALUE(response_body, '$.order_id') FROM"
                                   " idempotency_keys WHERE idempotency_key = ?"
                                   " AND status = 'COMPLETED' AND response_status = 201",
                                   rq->key);
            if (id != stored)
                fail_msg("%s: order %lld, but its key stores order %lld", what, (long long)id,
                         (long long)stored);
            break;
        }
        case K_REPLAY: {
            int64_t id = testhttp_expect_created(&rq->r, 201, what);
            if (id != old_id[(i - 120) % N_OLD])
                fail_msg("%s: replay answered order %lld, want %lld", what, (long long)id,
                         (long long)old_id[(i - 120) % N_OLD]);
            break;
        }
        case K_REUSED:
            testhttp_expect_error(&rq->r, 422, "idempotency_key_reused", NULL, what);
            break;
        case K_UNKNOWN_SKU:
            testhttp_expect_error(&rq->r, 422, "validation_failed",
                                  "unknown sku items[1].sku=NO-SUCH", what);
            break;
        case K_SOLO:
            (void)testhttp_expect_created(&rq->r, 201, what);
            break;
        }
    }

    /* One order, one OrderCreated and one COMPLETED key per distinct key: 10 + 60 + 30. */
    int64_t want = N_OLD + 60 + 30;
    int64_t orders = testdb_q(c->t.db, "SELECT COUNT(*) FROM orders");
    int64_t events =
        testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events o JOIN orders r ON r.id ="
                          " o.aggregate_id WHERE o.event_type = 'OrderCreated'"
                          " AND o.idempotency_key = CONCAT('order:', r.id, ':created')"
                          " AND JSON_VALUE(o.payload, '$.order_id') = r.id"
                          " AND JSON_VALUE(o.payload, '$.customer_id') = r.customer_id"
                          " AND JSON_VALUE(o.payload, '$.total_cents') = r.total_cents");
    int64_t all_events = testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events");
    int64_t keys =
        testdb_q(c->t.db, "SELECT COUNT(*) FROM idempotency_keys WHERE status = 'COMPLETED'");
    int64_t all_keys = testdb_q(c->t.db, "SELECT COUNT(*) FROM idempotency_keys");
    int64_t linked =
        testdb_q(c->t.db, "SELECT COUNT(DISTINCT r.id) FROM idempotency_keys k JOIN orders r ON"
                          " r.id = JSON_VALUE(k.response_body, '$.order_id')");
    /* Every order's items are those of its payload, in order. */
    int64_t items_ok =
        testdb_q(c->t.db, "SELECT COUNT(*) FROM orders r WHERE (SELECT COUNT(*) FROM order_items i"
                          " WHERE i.order_id = r.id) = (SELECT JSON_LENGTH(o.payload, '$.items')"
                          " FROM outbox_events o WHERE o.aggregate_id = r.id)"
                          " AND (SELECT SUM(i.qty * i.price_cents) FROM order_items i"
                          " WHERE i.order_id = r.id) = r.total_cents");
    print_message("burst of %d: orders=%lld events=%lld keys=%lld linked=%lld items_ok=%lld"
                  " pair 409s=%d\n",
                  N_BURST, (long long)orders, (long long)events, (long long)keys, (long long)linked,
                  (long long)items_ok, pair_409);
    if (orders != want || events != want || all_events != want || keys != want ||
        all_keys != want || linked != want || items_ok != want)
        fail_msg("want %lld of each: orders=%lld OrderCreated=%lld (of %lld events) COMPLETED"
                 " keys=%lld (of %lld) keys naming their order=%lld orders with their items=%lld",
                 (long long)want, (long long)orders, (long long)events, (long long)all_events,
                 (long long)keys, (long long)all_keys, (long long)linked, (long long)items_ok);
    assert_int_equal(
        testdb_q(c->t.db,
                 "SELECT COUNT(*) FROM idempotency_keys WHERE idempotency_key LIKE 'bad-%'"),
        0);

    /* Groups larger than one formed: fewer groups than requests in the burst. */
    double groups = metric(c, port, "txo_order_batch_size_count") - groups_before;
    double singles = metric(c, port, "txo_order_batch_size_bucket{le=\"1\"}");
    double sum = metric(c, port, "txo_order_batch_size_sum");
    print_message("the burst took %.0f groups (%.0f of one request overall), %.0f requests"
                  " grouped overall\n",
                  groups, singles, sum);
    if (!(groups >= 1 && groups < N_BURST / 2))
        fail_msg("the burst of %d took %.0f groups: no grouping", N_BURST, groups);
    for (int i = 0; i < N_BURST; i++)
        testhttp_reply_release(&reqs[i].r);
    free(reqs);
    testhttp_txo_stop(&c->procs[0], "txo serve");
}

/* ---- a group that fails ---- */

struct one {
    unsigned port;
    char key[32];
    char body[256];
    struct testhttp_reply r;
};

static void *post_one(void *arg)
{
    struct one *o = arg;
    CURL *h = curl_easy_init();
    if (h != NULL)
        testhttp_post_order(h, o->port, o->key, o->body, &o->r);
    curl_easy_cleanup(h);
    return NULL;
}

/* ... and completes it with a response naming order `order_id` (which it does not create). */
static void complete_key(struct txo_db *db, const char *key, int64_t order_id)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "UPDATE idempotency_keys SET status = 'COMPLETED', response_status = 201,"
             " response_body = '{\"order_id\":%lld,\"status\":\"CREATED\"}'"
             " WHERE idempotency_key = '%s'",
             (long long)order_id, key);
    testdb_exec(db, sql);
    testdb_exec(db, "COMMIT");
}

#define N_GROUP 8

static void test_group_fails_and_goes_one_by_one(void **state)
{
    struct testhttp_api *c = *state;
    static const char *const args[] = {"--order-batch", "50", "--idempotency-wait", "10", NULL};
    unsigned port = testhttp_txo_start(&c->procs[0], "api_group_fail", "serve", args);

    /* First group: the key "block" alone, which the writer's insert waits for. */
    struct one block = {.port = port};
    snprintf(block.key, sizeof(block.key), "block");
    order_body(block.body, sizeof(block.body), 1, 1);
    c->hold[0] = testhttp_hold_order_key(&c->t, block.key, block.body);
    pthread_t bt;
    assert_int_equal(pthread_create(&bt, NULL, post_one, &block), 0);
    txo_sleep_ms(400);

    /* Meanwhile N_GROUP requests queue up behind it; one of them, "raced", is held too. */
    struct one many[N_GROUP];
    pthread_t mt[N_GROUP];
    order_body(many[0].body, sizeof(many[0].body), 0, 2);
    c->hold[1] = testhttp_hold_order_key(&c->t, "raced", many[0].body);
    for (int i = 0; i < N_GROUP; i++) {
        many[i] = (struct one){.port = port};
        if (i == 0)
            snprintf(many[i].key, sizeof(many[i].key), "raced");
        else
            snprintf(many[i].key, sizeof(many[i].key), "group-%d", i);
        order_body(many[i].body, sizeof(many[i].body), i % 2, 2 + i);
        assert_int_equal(pthread_create(&mt[i], NULL, post_one, &many[i]), 0);
    }
    txo_sleep_ms(400);

    /* The other "instance" finishes "block": the first group fails with 1062 and "block"
     * replays its response; then the second group waits for "raced", which completes too. */
    complete_key(c->hold[0], "block", 900001);
    pthread_join(bt, NULL);
    txo_sleep_ms(400);
    complete_key(c->hold[1], "raced", 900002);
    for (int i = 0; i < N_GROUP; i++)
        pthread_join(mt[i], NULL);

    int64_t id = testhttp_expect_created(&block.r, 201, "the raced key of the first group");
    assert_int_equal(id, 900001);
    id = testhttp_expect_created(&many[0].r, 201, "the raced key of the second group");
    assert_int_equal(id, 900002);
    for (int i = 1; i < N_GROUP; i++) {
        char what[64];
        snprintf(what, sizeof(what), "request %s of the failed group", many[i].key);
        id = testhttp_expect_created(&many[i].r, 201, what);
        int64_t stored =
            q_key(c,
                  "SELECT JSON_VALUE(response_body, '$.order_id') FROM"
                  " idempotency_keys WHERE idempotency_key = ? AND status = 'COMPLETED'",
                  many[i].key);
        assert_int_equal(id, stored);
    }
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM orders"), N_GROUP - 1);
    assert_int_equal(
        testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE event_type = 'OrderCreated'"),
        N_GROUP - 1);
    assert_int_equal(
        testdb_q(c->t.db, "SELECT COUNT(*) FROM idempotency_keys WHERE status = 'COMPLETED'"),
        N_GROUP + 1);
    testhttp_txo_stop(&c->procs[0], "txo serve");
    char *log = testproc_log(&c->procs[0]);
    bool rolled_back = log != NULL && strstr(log, "order group rolled back") != NULL;
    free(log);
    if (!rolled_back) {
        testproc_print_log(&c->procs[0], "txo serve");
        fail_msg("no group was rolled back");
    }
    for (int i = 0; i < N_GROUP; i++)
        testhttp_reply_release(&many[i].r);
    testhttp_reply_release(&block.r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst),
        cmocka_unit_test(test_group_fails_and_goes_one_by_one),
    };
    return testhttp_run_each(tests, TXO_ARRAY_LEN(tests), setup, testhttp_api_free_state, NULL,
                             NULL);
}
