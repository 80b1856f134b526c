/*
 * End-to-end tests of the order API (app/order-service/api.h) with real `txo serve` and
 * `txo worker` processes against a fresh database per test. Every test checks the HTTP answer
 * (status, JSON error code, stored response) AND the rows it left: orders, outbox_events,
 * idempotency_keys, command_queue, sagas.
 *
 *   idempotency   a repeat gets the stored response; key order and spacing do not matter
 *                 (canonical hash); 50 concurrent requests with one key create one order;
 *                 a key held by an open transaction answers 409 after --idempotency-wait;
 *                 another body with the same key answers 422; keys that differ only in
 *                 case are different keys; a stale PROCESSING row is taken over, a fresh
 *                 one answers 409.
 *   crash points  SIGKILL inside the request before COMMIT leaves nothing behind (a retry
 *                 creates the order); after COMMIT the order exists and a retry on a new
 *                 process gets its id back.
 *   bad input     every 4xx with its error code, and nothing written by any of them; the
 *                 limits themselves (255-byte key, body of exactly --max-body) are accepted,
 *                 and a key that got a 4xx can be used again.
 *   async         202 + StartOrderSaga; `txo worker --broker none` runs it to CONFIRMED;
 *                 GET /orders/{id} shows the items and the completed saga.
 *   shutdown      SIGTERM while a request waits: the request is answered, exit 0 within 5 s.
 *
 * The admin endpoints, /healthz, /readyz and /metrics are in test_api_admin.c.
 *
 * Every process a test starts is stopped with SIGTERM and must exit 0, so a leak or undefined
 * behaviour in a sanitized `txo` fails the test (its log is printed). Teardown SIGKILLs
 * whatever a failed test left running.
 */
#include <pthread.h>
#include <signal.h>
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
    *state = testhttp_api_new("api", 1000);
    return 0;
}

/* ---- processes ---- */

/* Waits until the sessions of a killed server are gone from the database server (so their
 * transactions are rolled back and their row locks released). */
static void wait_sessions_gone(struct testhttp_api *c)
{
    int64_t deadline = txo_monotonic_ms() + 10000;
    int64_t n = 0;
    do {
        n = testdb_i64(c->t.db,
                       "SELECT COUNT(*) FROM information_schema.PROCESSLIST"
                       " WHERE DB = DATABASE() AND ID <> CONNECTION_ID()",
                       NULL, 0);
        if (n == 0)
            return;
        txo_sleep_ms(20);
    } while (txo_monotonic_ms() < deadline);
    fail_msg("%lld sessions of the killed server still open after 10 s", (long long)n);
}

/* ---- database ---- */

static int64_t q_key(struct testhttp_api *c, const char *sql, const char *key)
{
    struct txo_param p[] = {txo_p_str(key)};
    return testdb_i64(c->t.db, sql, p, 1);
}

static char *q_key_str(struct testhttp_api *c, const char *sql, const char *key)
{
    struct txo_param p[] = {txo_p_str(key)};
    return testdb_str(c->t.db, sql, p, 1);
}

/* Rows of every table POST /orders writes. */
static void expect_rows(struct testhttp_api *c, int64_t orders, int64_t keys, const char *when)
{
    int64_t n_orders = testdb_q(c->t.db, "SELECT COUNT(*) FROM orders");
    int64_t n_events = testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events");
    int64_t n_created = testdb_q(
        c->t.db, "SELECT COUNT(*) FROM outbox_events o JOIN orders r ON r.id = o.aggregate_id"
                 " WHERE o.event_type = 'OrderCreated' AND o.aggregate_type = 'order'");
    int64_t n_keys = testdb_q(c->t.db, "SELECT COUNT(*) FROM idempotency_keys");
    int64_t n_items = testdb_q(c->t.db, "SELECT COUNT(*) FROM order_items");
    if (n_orders != orders || n_events != orders || n_created != orders || n_keys != keys ||
        (orders == 0 && n_items != 0))
        fail_msg("%s: want %lld orders with one OrderCreated each and %lld keys; found orders=%lld"
                 " outbox_events=%lld (OrderCreated of an order: %lld) idempotency_keys=%lld"
                 " order_items=%lld",
                 when, (long long)orders, (long long)keys, (long long)n_orders, (long long)n_events,
                 (long long)n_created, (long long)n_keys, (long long)n_items);
}

/* The key row is COMPLETED with response_status and a stored body naming order_id. */
static void expect_key_completed(struct testhttp_api *c, const char *key, int status,
                                 int64_t order_id)
{
    char *st = q_key_str(c, "SELECT status FROM idempotency_keys WHERE idempotency_key = ?", key);
    int64_t rs =
        q_key(c, "SELECT response_status FROM idempotency_keys WHERE idempotency_key = ?", key);
    int64_t oid = q_key(c,
                        "SELECT JSON_VALUE(response_body, '$.order_id') FROM idempotency_keys"
                        " WHERE idempotency_key = ?",
                        key);
    bool ok = st != NULL && strcmp(st, "COMPLETED") == 0 && rs == status && oid == order_id;
    if (!ok)
        fail_msg("key %s: want COMPLETED/%d/order %lld, got %s/%lld/order %lld", key, status,
                 (long long)order_id, st != NULL ? st : "(no row)", (long long)rs, (long long)oid);
    txo_free(st);
}

static const char ORDER_BODY[] =
    "{\"customer_id\":7,\"items\":[{\"sku\":\"SKU-A\",\"qty\":2,\"price_cents\":1250},"
    "{\"sku\":\"SKU-B\",\"qty\":1,\"price_cents\":99}]}";

/*
 * POSTs ORDER_BODY with key (answer in c->rep[0]) and expects a new order, after which that
 * order and its completed key are all the tables hold. Returns the order id.
 */
static int64_t post_the_one_order(struct testhttp_api *c, unsigned port, const char *key,
                                  const char *what)
{
    struct testhttp_reply *r = &c->rep[0];
    testhttp_post_order(c->h, port, key, ORDER_BODY, r);
    int64_t id = testhttp_expect_created(r, 201, what);
    expect_rows(c, 1, 1, what);
    expect_key_completed(c, key, 201, id);
    return id;
}

/* ---- idempotency: repeats ---- */

static void test_repeat_gets_stored_response(void **state)
{
    struct testhttp_api *c = *state;
    unsigned port = testhttp_txo_start(&c->procs[0], "api_serve", "serve", NULL);
    struct testhttp_reply *r1 = &c->rep[0], *r2 = &c->rep[1], *r3 = &c->rep[2];

    testhttp_post_order(c->h, port, "order-key-1", ORDER_BODY, r1);
    int64_t id = testhttp_expect_created(r1, 201, "first POST");
    testhttp_post_order(c->h, port, "order-key-1", ORDER_BODY, r2);
    testhttp_expect_status(r2, 201, "repeated POST");
    assert_string_equal(r2->body, r1->body);
    expect_rows(c, 1, 1, "after a repeat");
    expect_key_completed(c, "order-key-1", 201, id);
    assert_int_equal(testdb_q(c->t.db, "SELECT MIN(id) FROM orders"), id);
    assert_int_equal(testdb_q(c->t.db, "SELECT SUM(qty * price_cents) FROM order_items"),
                     2 * 1250 + 99);
    assert_int_equal(testdb_q(c->t.db, "SELECT total_cents FROM orders"), 2 * 1250 + 99);

    /* The same request with its keys reordered and other spacing: the canonical hash is equal,
     * so it is a repeat, not a conflict. */
    static const char reordered[] =
        "{ \"items\" : [ { \"price_cents\" : 1250, \"qty\" : 2, \"sku\" : \"SKU-A\" },\n"
        "\t{\"qty\":1, \"price_cents\":99, \"sku\":\"SKU-B\"} ],\n  \"customer_id\" : 7 }\n";
    testhttp_post_order(c->h, port, "order-key-1", reordered, r3);
    testhttp_expect_status(r3, 201, "POST with reordered keys");
    assert_string_equal(r3->body, r1->body);
    expect_rows(c, 1, 1, "after the reordered repeat");

    testhttp_txo_stop(&c->procs[0], "txo serve");
}

/* POST /orders with key and the given trace headers (NULL: left out); the new order's id. */
static int64_t post_traced(struct testhttp_api *c, unsigned port, const char *key,
                           const char *parent, const char *state)
{
    char kh[96], ph[160], sh[600];
    snprintf(kh, sizeof(kh), "Idempotency-Key: %s", key);
    snprintf(ph, sizeof(ph), "traceparent: %s", parent != NULL ? parent : "");
    snprintf(sh, sizeof(sh), "tracestate: %s", state != NULL ? state : "");
    const char *headers[] = {"Content-Type: application/json", kh, parent != NULL ? ph : NULL,
                             state != NULL ? sh : NULL, NULL};
    testhttp_do(c->h, "POST", port, "/orders", headers, ORDER_BODY, strlen(ORDER_BODY), &c->rep[0]);
    return testhttp_expect_created(&c->rep[0], 201, key);
}

/* The traceparent and tracestate stored with order id's OrderCreated ("" for NULL). */
static void created_trace(struct testhttp_api *c, int64_t id, char *parent, size_t pcap,
                          char *state, size_t scap)
{
    char agg[24];
    snprintf(agg, sizeof(agg), "%lld", (long long)id);
    char *p =
        q_key_str(c,
                  "SELECT COALESCE(traceparent, '') FROM outbox_events WHERE aggregate_id = ? "
                  "AND event_type = 'OrderCreated'",
                  agg);
    char *s = q_key_str(c,
                        "SELECT COALESCE(tracestate, '') FROM outbox_events WHERE aggregate_id = ? "
                        "AND event_type = 'OrderCreated'",
                        agg);
    snprintf(parent, pcap, "%s", p != NULL ? p : "");
    snprintf(state, scap, "%s", s != NULL ? s : "");
    txo_free(p);
    txo_free(s);
}

/*
 * W3C Trace Context on POST /orders: with a valid traceparent, the OrderCreated event carries a
 * child of it (same trace id and flags, a new span id) and the tracestate; without one, or with
 * one that is not valid, the order is created as without it, in a new trace.
 */
static void test_trace_context_reaches_order_created(void **state)
{
    struct testhttp_api *c = *state;
    unsigned port = testhttp_txo_start(&c->procs[0], "api_trace", "serve", NULL);
    static const char caller[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    char parent[64], st[600];

    int64_t id = post_traced(c, port, "trace-1", caller, "rojo=00f067aa0ba902b7");
    created_trace(c, id, parent, sizeof(parent), st, sizeof(st));
    assert_int_equal(strlen(parent), 55);
    assert_memory_equal(parent, caller, 36);               /* version and trace id */
    assert_memory_not_equal(parent + 36, caller + 36, 16); /* the request's own span */
    assert_string_equal(parent + 53, "01");
    assert_string_equal(st, "rojo=00f067aa0ba902b7");

    /* None, or not valid: a new trace, the order created all the same. */
    static const char *const bad[] = {
        NULL, "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "garbage"};
    char first_new[64] = "";
    for (size_t i = 0; i < TXO_ARRAY_LEN(bad); i++) {
        char key[32];
        snprintf(key, sizeof(key), "trace-new-%zu", i);
        id = post_traced(c, port, key, bad[i], NULL);
        created_trace(c, id, parent, sizeof(parent), st, sizeof(st));
        assert_int_equal(strlen(parent), 55);
        assert_memory_not_equal(parent + 3, caller + 3, 32);
        assert_string_equal(st, "");
        if (i == 0)
            snprintf(first_new, sizeof(first_new), "%s", parent);
        else
            assert_memory_not_equal(parent + 3, first_new + 3, 32); /* each a trace of its own */
    }
    testhttp_txo_stop(&c->procs[0], "txo serve");
}

/*
 * The customer's cancel, optimistic locking on orders.version over HTTP: If-Match is required
 * (428), a version nobody read is 412 version_conflict, the right one cancels (200, version + 1,
 * one OrderCancelled), and then the old version is 412 and the new one 409 (not CREATED).
 */
static void test_cancel_with_if_match(void **state)
{
    struct testhttp_api *c = *state;
    unsigned port = testhttp_txo_start(&c->procs[0], "api_cancel", "serve", NULL);
    struct testhttp_reply *r = &c->rep[0];
    testhttp_post_order(c->h, port, "cancel-key", ORDER_BODY, r);
    int64_t id = testhttp_expect_created(r, 201, "POST");
    char path[64];
    snprintf(path, sizeof(path), "/orders/%lld/cancel", (long long)id);

    testhttp_do(c->h, "POST", port, path, NULL, "", 0, r);
    testhttp_expect_error(r, 428, "precondition_required", "If-Match", "cancel without If-Match");
    static const char *const v1[] = {"If-Match: \"1\"", NULL};
    static const char *const v0[] = {"If-Match: \"0\"", NULL};
    testhttp_do(c->h, "POST", port, path, v1, "", 0, r);
    testhttp_expect_error(r, 412, "version_conflict", "version", "cancel at an unread version");
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CREATED'"), 1);

    testhttp_do(c->h, "POST", port, path, v0, "", 0, r);
    testhttp_expect_status(r, 200, "cancel at the version read");
    json_t *doc = testhttp_json(r);
    assert_string_equal(json_string_value(json_object_get(doc, "status")), "CANCELLED");
    assert_int_equal(json_integer_value(json_object_get(doc, "version")), 1);
    json_decref(doc);
    assert_int_equal(testdb_q(c->t.db, "SELECT version FROM orders"), 1);
    assert_int_equal(
        testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE event_type = 'OrderCancelled'"),
        1);

    testhttp_do(c->h, "POST", port, path, v0, "", 0, r);
    testhttp_expect_error(r, 412, "version_conflict", NULL, "second cancel at the old version");
    testhttp_do(c->h, "POST", port, path, v1, "", 0, r);
    testhttp_expect_error(r, 409, "conflict", "CREATED", "cancel of a CANCELLED order");
    assert_int_equal(
        testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE event_type = 'OrderCancelled'"),
        1);
    testhttp_do(c->h, "POST", port, "/orders/999999/cancel", v0, "", 0, r);
    testhttp_expect_error(r, 404, "not_found", NULL, "cancel of an unknown order");
    testhttp_txo_stop(&c->procs[0], "txo serve");
}

#define N_CONCURRENT 50

struct racer {
    pthread_barrier_t *start;
    unsigned port;
    struct testhttp_reply *r;
};

static void *race(void *arg)
{
    struct racer *rc = arg;
    CURL *h = curl_easy_init(); /* each thread its own client */
    pthread_barrier_wait(rc->start);
    if (h != NULL)
        testhttp_post_order(h, rc->port, "race-key", ORDER_BODY, rc->r);
    curl_easy_cleanup(h);
    return NULL;
}

static void test_concurrent_same_key(void **state)
{
    struct testhttp_api *c = *state;
    unsigned port = testhttp_txo_start(&c->procs[0], "api_serve", "serve", NULL);
    c->many = calloc(N_CONCURRENT, sizeof(*c->many));
    assert_non_null(c->many);
    c->n_many = N_CONCURRENT;
    struct racer racers[N_CONCURRENT];
    pthread_t threads[N_CONCURRENT];
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, N_CONCURRENT), 0);
    for (int i = 0; i < N_CONCURRENT; i++) {
        racers[i] = (struct racer){.start = &start, .port = port, .r = &c->many[i]};
        if (pthread_create(&threads[i], NULL, race, &racers[i]) != 0)
            abort(); /* the others would wait at the barrier for ever */
    }
    for (int i = 0; i < N_CONCURRENT; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&start);

    int created = 0, in_progress = 0;
    const char *first = NULL;
    for (int i = 0; i < N_CONCURRENT; i++) {
        struct testhttp_reply *r = &c->many[i];
        char what[64];
        snprintf(what, sizeof(what), "concurrent POST %d", i);
        if (r->status == 201) {
            testhttp_expect_created(r, 201, what);
            if (first == NULL)
                first = r->body;
            else if (strcmp(first, r->body) != 0)
                fail_msg("two different 201 answers for one key: %s and %s", first, r->body);
            created++;
        } else {
            testhttp_expect_error(r, 409, "request_in_progress", NULL, what);
            in_progress++;
        }
    }
    print_message("%d concurrent POSTs with one key: %d x 201, %d x 409\n", N_CONCURRENT, created,
                  in_progress);
    assert_true(created >= 1);
    expect_rows(c, 1, 1, "after 50 concurrent POSTs with one key");
    expect_key_completed(c, "race-key", 201, testdb_q(c->t.db, "SELECT MIN(id) FROM orders"));

    testhttp_txo_stop(&c->procs[0], "txo serve");
}

/* ---- 409 while another transaction holds the key ---- */

static void test_key_held_answers_409(void **state)
{
    struct testhttp_api *c = *state;
    static const char *const args[] = {"--idempotency-wait", "1", NULL};
    unsigned port = testhttp_txo_start(&c->procs[0], "api_serve", "serve", args);

    /* The test's own transaction holds the key row, as a request in progress would. */
    c->hold[0] = testhttp_hold_order_key(&c->t, "held-key", ORDER_BODY);

    struct testhttp_reply *r = &c->rep[0];
    int64_t t0 = txo_monotonic_ms();
    testhttp_post_order(c->h, port, "held-key", ORDER_BODY, r);
    int64_t ms = txo_monotonic_ms() - t0;
    testhttp_expect_error(r, 409, "request_in_progress", NULL, "POST while the key is held");
    if (r->retry_after_s < 1 || r->retry_after_s > 3)
        fail_msg("409 with Retry-After %ld, want 1..3 s (-1: no header)", r->retry_after_s);
    print_message("409 after %lld ms (--idempotency-wait 1)\n", (long long)ms);
    if (ms < 900 || ms > 3500)
        fail_msg("409 after %lld ms, want about 1 s (the API's lock wait timeout)", (long long)ms);
    expect_rows(c, 0, 0, "while the key is held");

    testdb_exec(c->hold[0], "ROLLBACK");
    post_the_one_order(c, port, "held-key", "POST after the holder rolled back");

    testhttp_txo_stop(&c->procs[0], "txo serve");
}

/* ---- 422: one key, two bodies ---- */

static void test_key_reused_with_other_body(void **state)
{
    struct testhttp_api *c = *state;
    unsigned port = testhttp_txo_start(&c->procs[0], "api_serve", "serve", NULL);
    struct testhttp_reply *r = &c->rep[0], *again = &c->rep[1];
    testhttp_post_order(c->h, port, "reused-key", ORDER_BODY, r);
    int64_t id = testhttp_expect_created(r, 201, "first POST");

    static const char other[] =
        "{\"customer_id\":7,\"items\":[{\"sku\":\"SKU-A\",\"qty\":3,\"price_cents\":1250},"
        "{\"sku\":\"SKU-B\",\"qty\":1,\"price_cents\":99}]}";
    testhttp_post_order(c->h, port, "reused-key", other, again);
    testhttp_expect_error(again, 422, "idempotency_key_reused", NULL, "same key, other body");
    expect_rows(c, 1, 1, "after reusing the key");
    expect_key_completed(c, "reused-key", 201, id);

    testhttp_post_order(c->h, port, "reused-key", ORDER_BODY, again);
    testhttp_expect_status(again, 201, "the original body again");
    assert_string_equal(again->body, r->body);
    expect_rows(c, 1, 1, "after the original body again");

    testhttp_txo_stop(&c->procs[0], "txo serve");
}

/*
 * Idempotency keys are opaque strings: "Order-Key" and "order-key" are two clients' keys, so the
 * second must create its own order, and with another body it is no conflict.
 */
static void test_keys_differing_in_case_are_distinct(void **state)
{
    struct testhttp_api *c = *state;
    unsigned port = testhttp_txo_start(&c->procs[0], "api_serve", "serve", NULL);
    struct testhttp_reply *r1 = &c->rep[0], *r2 = &c->rep[1], *r3 = &c->rep[2];
    testhttp_post_order(c->h, port, "Order-Key", ORDER_BODY, r1);
    int64_t id1 = testhttp_expect_created(r1, 201, "POST with key Order-Key");
    testhttp_post_order(c->h, port, "order-key", ORDER_BODY, r2);
    int64_t id2 = testhttp_expect_created(r2, 201, "POST with key order-key");
    if (id2 == id1)
        fail_msg("key \"order-key\" got the stored response of key \"Order-Key\" (order %lld):"
                 " keys are compared case-insensitively",
                 (long long)id1);
    static const char other[] =
        "{\"customer_id\":8,\"items\":[{\"sku\":\"SKU-C\",\"qty\":1,\"price_cents\":5}]}";
    testhttp_post_order(c->h, port, "ORDER-KEY", other, r3);
    int64_t id3 = testhttp_expect_created(r3, 201, "POST with key ORDER-KEY and another body");
    assert_true(id3 != id1 && id3 != id2);
    expect_rows(c, 3, 3, "after three keys differing only in case");

    testhttp_txo_stop(&c->procs[0], "txo serve");
}

/* ---- stale PROCESSING rows ---- */

static void insert_processing_key(struct testhttp_api *c, const char *key, const char *age)
{
    struct txo_error err;
    txo_error_init(&err);
    char hash[TXO_IDEM_HASH_LEN];
    assert_int_equal(txo_idem_hash("POST", "/orders", ORDER_BODY, strlen(ORDER_BODY), hash, &err),
                     0);
    /* age is one of two literals below, never input. */
    char sql[320];
    snprintf(sql, sizeof(sql),
             "INSERT INTO idempotency_keys (idempotency_key, request_hash, status, created_at,"
             " updated_at) VALUES (?, ?, 'PROCESSING', NOW(6) - INTERVAL %s, NOW(6) - INTERVAL %s)",
             age, age);
    struct txo_param p[] = {txo_p_str(key), txo_p_str(hash)};
    if (txo_db_exec(c->t.db, sql, p, 2, NULL, &err) != 0)
        fail_msg("%s: %s", sql, err.msg);
}

static void test_stale_key_taken_over(void **state)
{
    struct testhttp_api *c = *state;
    static const char *const args[] = {"--idempotency-stale", "60", NULL};
    unsigned port = testhttp_txo_start(&c->procs[0], "api_serve", "serve", args);
    insert_processing_key(c, "stale-key", "10 MINUTE");
    insert_processing_key(c, "fresh-key", "0 SECOND");

    struct testhttp_reply *r = &c->rep[0];
    testhttp_post_order(c->h, port, "stale-key", ORDER_BODY, r);
    int64_t id = testhttp_expect_created(r, 201, "POST over a PROCESSING key 10 minutes old");
    expect_key_completed(c, "stale-key", 201, id);

    testhttp_post_order(c->h, port, "fresh-key", ORDER_BODY, r);
    testhttp_expect_error(r, 409, "request_in_progress", NULL, "POST over a fresh PROCESSING key");
    if (r->retry_after_s < 1)
        fail_msg("409 without a Retry-After header");
    char *st =
        q_key_str(c, "SELECT status FROM idempotency_keys WHERE idempotency_key = ?", "fresh-key");
    assert_non_null(st);
    assert_string_equal(st, "PROCESSING");
    txo_free(st);
    expect_rows(c, 1, 2, "after the takeover and the 409");

    testhttp_txo_stop(&c->procs[0], "txo serve");
}

/* ---- crash points: before and after COMMIT ---- */

/* POST on a server that dies inside it: no HTTP answer at all, and death by SIGKILL. */
static void post_into_crash(struct testhttp_api *c, unsigned port, const char *point)
{
    struct testhttp_reply *r = &c->rep[0];
    testhttp_post_order(c->h, port, "crash-key", ORDER_BODY, r);
    if (r->status != 0 || r->cc == CURLE_OK)
        fail_msg("%s: want a transport failure, got HTTP %ld (curl: %s) %s", point, r->status,
                 curl_easy_strerror(r->cc), r->body);
    print_message("%s: POST failed with curl error: %s\n", point, curl_easy_strerror(r->cc));
    if (!testproc_wait(&c->procs[0], 5000) || !testproc_killed(&c->procs[0])) {
        testproc_print_log(&c->procs[0], "txo serve with a crash point");
        fail_msg("%s: txo serve did not die by SIGKILL (wait status 0x%x)", point,
                 c->procs[0].status);
    }
    wait_sessions_gone(c);
}

static void test_crash_before_commit(void **state)
{
    struct testhttp_api *c = *state;
    static const char *const crash[] = {"--crash-point", "api.before_commit", NULL};
    unsigned port = testhttp_txo_start(&c->procs[0], "api_serve", "serve", crash);
    post_into_crash(c, port, "api.before_commit");
    expect_rows(c, 0, 0, "after a crash before COMMIT");
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM order_items"), 0);

    port = testhttp_txo_start(&c->procs[1], "api_serve", "serve", NULL);
    post_the_one_order(c, port, "crash-key", "POST after the restart");
    testhttp_txo_stop(&c->procs[1], "txo serve (restarted)");
}

static void test_crash_after_commit(void **state)
{
    struct testhttp_api *c = *state;
    static const char *const crash[] = {"--crash-point", "api.after_commit", NULL};
    unsigned port = testhttp_txo_start(&c->procs[0], "api_serve", "serve", crash);
    post_into_crash(c, port, "api.after_commit");
    expect_rows(c, 1, 1, "after a crash after COMMIT");
    int64_t id = testdb_q(c->t.db, "SELECT MIN(id) FROM orders");
    expect_key_completed(c, "crash-key", 201, id);

    port = testhttp_txo_start(&c->procs[1], "api_serve", "serve", NULL);
    struct testhttp_reply *r = &c->rep[0];
    testhttp_post_order(c->h, port, "crash-key", ORDER_BODY, r);
    assert_int_equal(testhttp_expect_created(r, 201, "POST after the restart"), id);
    expect_rows(c, 1, 1, "after the retry");
    testhttp_txo_stop(&c->procs[1], "txo serve (restarted)");
}

/* ---- bad input ---- */

struct bad_case {
    const char *what;
    const char *key;          /* NULL: no Idempotency-Key header */
    const char *content_type; /* NULL: application/json */
    const char *body;
    long status;
    const char *code;
    const char *msg_has; /* NULL: any message */
};

#define ITEM_A "{\"sku\":\"SKU-A\",\"qty\":1,\"price_cents\":100}"

/* Writes a valid order of exactly len bytes (an item plus a "pad" string) into body, which
 * holds len + 1 bytes. Returns body. */
static char *padded_order(char *body, size_t len)
{
    int head = snprintf(body, len, "{\"customer_id\":1,\"items\":[" ITEM_A "],\"pad\":\"");
    assert_true(head > 0 && (size_t)head + 2 <= len);
    memset(body + head, 'x', len - (size_t)head - 2);
    memcpy(body + len - 2, "\"}", 3);
    return body;
}

/* Writes {"customer_id":1,"items":[item,item,...]} with n items into body[cap]. Returns body. */
static char *order_with_items(char *body, size_t cap, const char *item, size_t n)
{
    assert_true(cap > 64 + n * (strlen(item) + 1));
    size_t len = (size_t)snprintf(body, cap, "{\"customer_id\":1,\"items\":[");
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(body + len, cap - len, "%s%s", i > 0 ? "," : "", item);
    snprintf(body + len, cap - len, "]}");
    return body;
}

static void test_bad_input_writes_nothing(void **state)
{
    struct testhttp_api *c = *state;
    unsigned port = testhttp_txo_start(&c->procs[0], "api_serve", "serve", NULL);

    char long_key[257];
    memset(long_key, 'k', 256);
    long_key[256] = '\0';
    char long_sku_body[256];
    snprintf(long_sku_body, sizeof(long_sku_body),
             "{\"customer_id\":1,\"items\":[{\"sku\":\"%065d\",\"qty\":1,\"price_cents\":1}]}", 0);
    /* Static, so a failing assertion leaks nothing. */
    static char items_101[8192], overflow[8192], big[70 * 1024 + 1], just_over[65536 + 2];
    static char at_limit[65536 + 1];
    order_with_items(items_101, sizeof(items_101), ITEM_A, 101);
    order_with_items(overflow, sizeof(overflow),
                     "{\"sku\":\"SKU-A\",\"qty\":1000000,"
                     "\"price_cents\":1000000000000}",
                     100);
    padded_order(big, sizeof(big) - 1);
    padded_order(just_over, sizeof(just_over) - 1);

    const struct bad_case cases[] = {
        {"no Idempotency-Key", NULL, NULL, ORDER_BODY, 400, "missing_idempotency_key", NULL},
        {"256-byte key", long_key, NULL, ORDER_BODY, 400, "invalid_idempotency_key", "256"},
        {"key with a space", "has space", NULL, ORDER_BODY, 400, "invalid_idempotency_key", NULL},
        {"malformed JSON", "bad-json", NULL, "{\"customer_id\":1,", 400, "malformed_json", NULL},
        {"duplicate JSON keys", "bad-dup", NULL,
         "{\"customer_id\":1,\"customer_id\":2,\"items\":[" ITEM_A "]}", 400, "malformed_json",
         "duplicate"},
        {"array body", "bad-array", NULL, "[" ITEM_A "]", 400, "invalid_request", NULL},
        {"customer_id a string", "bad-1", NULL, "{\"customer_id\":\"1\",\"items\":[" ITEM_A "]}",
         400, "invalid_request", "customer_id"},
        {"items not an array", "bad-2", NULL, "{\"customer_id\":1,\"items\":{}}", 400,
         "invalid_request", "items"},
        {"sku a number", "bad-3", NULL,
         "{\"customer_id\":1,\"items\":[{\"sku\":5,\"qty\":1,\"price_cents\":1}]}", 400,
         "invalid_request", "sku"},
        {"qty a string", "bad-4", NULL,
         "{\"customer_id\":1,\"items\":[{\"sku\":\"SKU-A\",\"qty\":\"1\",\"price_cents\":1}]}", 400,
         "invalid_request", "qty"},
        {"price a float", "bad-5", NULL,
         "{\"customer_id\":1,\"items\":[{\"sku\":\"SKU-A\",\"qty\":1,\"price_cents\":1.5}]}", 400,
         "invalid_request", "price_cents"},
        {"qty 0", "bad-6", NULL,
         "{\"customer_id\":1,\"items\":[{\"sku\":\"SKU-A\",\"qty\":0,\"price_cents\":1}]}", 422,
         "validation_failed", "qty"},
        {"qty -1", "bad-7", NULL,
         "{\"customer_id\":1,\"items\":[{\"sku\":\"SKU-A\",\"qty\":-1,\"price_cents\":1}]}", 422,
         "validation_failed", "qty"},
        {"qty 10^10", "bad-8", NULL,
         "{\"customer_id\":1,\"items\":[{\"sku\":\"SKU-A\",\"qty\":10000000000,"
         "\"price_cents\":1}]}",
         422, "validation_failed", "qty"},
        {"price -1", "bad-9", NULL,
         "{\"customer_id\":1,\"items\":[{\"sku\":\"SKU-A\",\"qty\":1,\"price_cents\":-1}]}", 422,
         "validation_failed", "price_cents"},
        {"no items", "bad-10", NULL, "{\"customer_id\":1,\"items\":[]}", 422, "validation_failed",
         NULL},
        {"101 items", "bad-11", NULL, items_101, 422, "validation_failed", "101"},
        {"total overflows int64", "bad-12", NULL, overflow, 422, "validation_failed", "overflow"},
        {"customer_id 0", "bad-13", NULL, "{\"customer_id\":0,\"items\":[" ITEM_A "]}", 422,
         "validation_failed", "customer_id"},
        {"empty sku", "bad-14", NULL,
         "{\"customer_id\":1,\"items\":[{\"sku\":\"\",\"qty\":1,\"price_cents\":1}]}", 422,
         "validation_failed", "sku"},
        {"65-byte sku", "bad-15", NULL, long_sku_body, 422, "validation_failed", "sku"},
        {"unknown SKU", "bad-sku", NULL,
         "{\"customer_id\":1,\"items\":[" ITEM_A
         ",{\"sku\":\"NO-SUCH-SKU\",\"qty\":1,\"price_cents\":1}]}",
         422, "validation_failed", "NO-SUCH-SKU"},
        {"text/plain", "bad-16", "text/plain", ORDER_BODY, 415, "unsupported_media_type", NULL},
        {"70 KB body", "bad-17", NULL, big, 413, "payload_too_large", NULL},
        {"65537-byte body", "bad-18", NULL, just_over, 413, "payload_too_large", "65536"},
    };
    struct testhttp_reply *r = &c->rep[0];
    for (size_t i = 0; i < TXO_ARRAY_LEN(cases); i++) {
        const struct bad_case *bc = &cases[i];
        char key_header[512], ct_header[128];
        snprintf(key_header, sizeof(key_header), "Idempotency-Key: %s", bc->key ? bc->key : "");
        snprintf(ct_header, sizeof(ct_header), "Content-Type: %s",
                 bc->content_type ? bc->content_type : "application/json");
        const char *headers[] = {ct_header, bc->key != NULL ? key_header : NULL, NULL};
        testhttp_do(c->h, "POST", port, "/orders", headers, bc->body, strlen(bc->body), r);
        testhttp_expect_error(r, bc->status, bc->code, bc->msg_has, bc->what);
    }
    /* The body limit also holds without Content-Length (chunked upload). */
    const char *chunked[] = {"Content-Type: application/json", "Idempotency-Key: bad-19",
                             "Transfer-Encoding: chunked", NULL};
    testhttp_do(c->h, "POST", port, "/orders", chunked, big, strlen(big), r);
    testhttp_expect_error(r, 413, "payload_too_large", NULL, "70 KB chunked body");

    testhttp_get(c->h, port, "/orders/999999", r);
    testhttp_expect_error(r, 404, "not_found", "999999", "GET /orders/999999");
    testhttp_get(c->h, port, "/orders/abc", r);
    testhttp_expect_error(r, 404, "not_found", NULL, "GET /orders/abc");
    testhttp_do(c->h, "DELETE", port, "/orders/1", NULL, NULL, 0, r);
    testhttp_expect_error(r, 405, "method_not_allowed", NULL, "DELETE /orders/1");
    testhttp_get(c->h, port, "/nope", r);
    testhttp_expect_error(r, 404, "not_found", NULL, "GET /nope");

    expect_rows(c, 0, 0, "after every bad request");
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM command_queue"), 0);

    /* A key that got a 4xx is free: the unknown SKU's reached the database and was rolled
     * back, the malformed JSON's never got there. */
    testhttp_post_order(c->h, port, "bad-sku", ORDER_BODY, r);
    int64_t id1 = testhttp_expect_created(r, 201, "the unknown-SKU key with a good body");
    testhttp_post_order(c->h, port, "bad-json", ORDER_BODY, r);
    int64_t id2 = testhttp_expect_created(r, 201, "the malformed-JSON key with a good body");
    assert_true(id1 != id2);
    expect_rows(c, 2, 2, "after the corrected requests");
    expect_key_completed(c, "bad-sku", 201, id1);
    expect_key_completed(c, "bad-json", 201, id2);

    /* The limits themselves are allowed: a 255-byte key, a body of exactly --max-body. */
    long_key[255] = '\0';
    testhttp_post_order(c->h, port, long_key, ORDER_BODY, r);
    int64_t id3 = testhttp_expect_created(r, 201, "a 255-byte key");
    expect_key_completed(c, long_key, 201, id3);
    padded_order(at_limit, sizeof(at_limit) - 1);
    testhttp_post_order(c->h, port, "at-limit", at_limit, r);
    testhttp_expect_created(r, 201, "a body of exactly 65536 bytes");
    expect_rows(c, 4, 4, "after the requests at the limits");

    testhttp_txo_stop(&c->procs[0], "txo serve");
}

/* ---- async + worker ---- */

static void expect_completed_steps(json_t *saga, const char *what)
{
    static const char *const names[] = {"ReserveStock", "ChargePayment", "CreateShipment"};
    json_t *steps = json_object_get(saga, "steps");
    if (json_array_size(steps) != 3)
        fail_msg("%s: want 3 steps, got %zu", what, json_array_size(steps));
    for (size_t i = 0; i < 3; i++) {
        json_t *st = json_array_get(steps, i);
        const char *name = json_string_value(json_object_get(st, "name"));
        const char *status = json_string_value(json_object_get(st, "status"));
        if (name == NULL || strcmp(name, names[i]) != 0 || status == NULL ||
            strcmp(status, "COMPLETED") != 0)
            fail_msg("%s: step %zu is %s %s, want %s COMPLETED", what, i, name ? name : "?",
                     status ? status : "?", names[i]);
    }
}

static void test_async_order_runs_on_worker(void **state)
{
    struct testhttp_api *c = *state;
    static const char *const args[] = {"--async", NULL};
    unsigned port = testhttp_txo_start(&c->procs[0], "api_serve", "serve", args);
    struct testhttp_reply *r = &c->rep[0], *again = &c->rep[1];
    testhttp_post_order(c->h, port, "async-key", ORDER_BODY, r);
    int64_t id = testhttp_expect_created(r, 202, "async POST");
    expect_rows(c, 1, 1, "after the async POST");
    expect_key_completed(c, "async-key", 202, id);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM command_queue"), 1);
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT COUNT(*) FROM command_queue WHERE command_type = 'StartOrderSaga'"
             " AND status = 'PENDING' AND JSON_VALUE(payload, '$.order_id') = %lld",
             (long long)id);
    assert_int_equal(testdb_q(c->t.db, sql), 1);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM saga_instances"), 0);

    testhttp_post_order(c->h, port, "async-key", ORDER_BODY, again);
    testhttp_expect_status(again, 202, "repeated async POST");
    assert_string_equal(again->body, r->body);
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM command_queue"), 1);

    /* Before the worker runs, the order exists without a saga. */
    snprintf(sql, sizeof(sql), "/orders/%lld", (long long)id);
    testhttp_get(c->h, port, sql, again);
    testhttp_expect_status(again, 200, "GET /orders/{id} before the worker");
    json_t *before = testhttp_json(again);
    assert_string_equal(json_string_value(json_object_get(before, "status")), "CREATED");
    assert_true(json_is_null(json_object_get(before, "saga")));
    json_decref(before);

    const char *wargv[] = {testproc_txo_bin(), "worker", "--broker", "none", "--poll", "50", NULL};
    testproc_start(&c->procs[1], "api_worker", wargv, NULL);
    snprintf(sql, sizeof(sql),
             "SELECT (SELECT status = 'CONFIRMED' FROM orders WHERE id = %lld)"
             " AND (SELECT COUNT(*) FROM saga_instances WHERE status = 'COMPLETED'"
             " AND correlation_id = 'order:%lld') = 1"
             " AND (SELECT COUNT(*) FROM command_queue WHERE status = 'DONE') = 1",
             (long long)id, (long long)id);
    int64_t t0 = txo_monotonic_ms();
    while (testdb_q(c->t.db, sql) != 1) {
        if (txo_monotonic_ms() - t0 > 20000 || c->procs[1].pid == 0 ||
            testproc_wait(&c->procs[1], 0)) {
            testproc_print_log(&c->procs[1], "txo worker");
            fail_msg("order %lld not CONFIRMED with its saga COMPLETED and the command DONE "
                     "within 20 s (worker running: %s)",
                     (long long)id, c->procs[1].pid != 0 ? "yes" : "no");
        }
        txo_sleep_ms(50);
    }
    print_message("async order confirmed by the worker after %lld ms\n",
                  (long long)(txo_monotonic_ms() - t0));
    testhttp_txo_stop(&c->procs[1], "txo worker");

    /* GET /orders/{id}: items, CONFIRMED, the saga with its three steps COMPLETED. */
    snprintf(sql, sizeof(sql), "/orders/%lld", (long long)id);
    testhttp_get(c->h, port, sql, r);
    testhttp_expect_status(r, 200, "GET /orders/{id}");
    json_t *doc = testhttp_json(r);
    assert_int_equal(json_integer_value(json_object_get(doc, "order_id")), id);
    assert_int_equal(json_integer_value(json_object_get(doc, "customer_id")), 7);
    assert_string_equal(json_string_value(json_object_get(doc, "status")), "CONFIRMED");
    assert_int_equal(json_integer_value(json_object_get(doc, "total_cents")), 2 * 1250 + 99);
    json_t *items = json_object_get(doc, "items");
    assert_int_equal(json_array_size(items), 2);
    json_t *want = json_loads("[{\"sku\":\"SKU-A\",\"qty\":2,\"price_cents\":1250},"
                              "{\"sku\":\"SKU-B\",\"qty\":1,\"price_cents\":99}]",
                              0, NULL);
    if (!json_equal(items, want))
        fail_msg("GET /orders/%lld items: %s", (long long)id, r->body);
    json_decref(want);
    json_t *saga = json_object_get(doc, "saga");
    assert_true(json_is_object(saga));
    assert_string_equal(json_string_value(json_object_get(saga, "status")), "COMPLETED");
    expect_completed_steps(saga, "GET /orders/{id} saga");
    json_decref(doc);

    testhttp_txo_stop(&c->procs[0], "txo serve");
}

/* ---- graceful shutdown ---- */

struct waiter {
    CURL *h;
    unsigned port;
    struct testhttp_reply *r;
};

static void *post_waiting(void *arg)
{
    struct waiter *w = arg;
    testhttp_post_order(w->h, w->port, "term-key", ORDER_BODY, w->r);
    return NULL;
}

/* SIGTERM while a request waits for a held key: the request is still answered (409 after the
 * 2 s lock wait), then the process exits 0, all within 5 s; the port is closed afterwards. */
static void test_sigterm_finishes_requests(void **state)
{
    struct testhttp_api *c = *state;
    unsigned port = testhttp_txo_start(&c->procs[0], "api_serve", "serve", NULL);
    struct testhttp_reply *r = &c->rep[0];
    testhttp_post_order(c->h, port, "first-key", ORDER_BODY, r);
    testhttp_expect_created(r, 201, "POST before the shutdown");

    c->hold[0] = testdb_connect(&c->t);
    testdb_exec(c->hold[0], "START TRANSACTION");
    testdb_exec(c->hold[0], "INSERT INTO idempotency_keys (idempotency_key, request_hash, status)"
                            " VALUES ('term-key', REPEAT('0', 64), 'PROCESSING')");
    struct waiter w = {.h = curl_easy_init(), .port = port, .r = &c->rep[1]};
    assert_non_null(w.h);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, post_waiting, &w), 0);
    /* The request is in the server, waiting on the key row, when the signal comes. */
    int64_t deadline = txo_monotonic_ms() + 5000;
    while (
        testdb_q(c->t.db,
                 "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID()"
                 " AND INFO LIKE 'INSERT INTO idempotency_keys%'") == 0 &&
        txo_monotonic_ms() < deadline)
        txo_sleep_ms(10);
    int64_t t0 = txo_monotonic_ms();
    testproc_signal(&c->procs[0], SIGTERM);
    bool exited = testproc_wait(&c->procs[0], 5000);
    int64_t ms = txo_monotonic_ms() - t0;
    pthread_join(th, NULL);
    curl_easy_cleanup(w.h);
    testdb_exec(c->hold[0], "ROLLBACK");
    if (!exited || !testproc_exited_with(&c->procs[0], 0)) {
        testproc_print_log(&c->procs[0], "txo serve");
        fail_msg("SIGTERM: exited=%d wait status 0x%x after %lld ms, want exit 0 within 5 s",
                 exited, c->procs[0].status, (long long)ms);
    }
    print_message("SIGTERM with a request in flight: exit 0 after %lld ms\n", (long long)ms);
    testhttp_expect_error(w.r, 409, "request_in_progress", NULL,
                          "the request in flight at SIGTERM");
    assert_false(testproc_wait_port(port, 200));
    expect_rows(c, 1, 1, "after the shutdown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repeat_gets_stored_response),
        cmocka_unit_test(test_cancel_with_if_match),
        cmocka_unit_test(test_trace_context_reaches_order_created),
        cmocka_unit_test(test_concurrent_same_key),
        cmocka_unit_test(test_key_held_answers_409),
        cmocka_unit_test(test_key_reused_with_other_body),
        cmocka_unit_test(test_keys_differing_in_case_are_distinct),
        cmocka_unit_test(test_stale_key_taken_over),
        cmocka_unit_test(test_crash_before_commit),
        cmocka_unit_test(test_crash_after_commit),
        cmocka_unit_test(test_bad_input_writes_nothing),
        cmocka_unit_test(test_async_order_runs_on_worker),
        cmocka_unit_test(test_sigterm_finishes_requests),
    };
    return testhttp_run_each(tests, TXO_ARRAY_LEN(tests), setup, testhttp_api_free_state, NULL,
                             NULL);
}
