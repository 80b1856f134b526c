/*
 * End-to-end tests of the order API's operator side with a real `txo serve` against a fresh
 * database per test (the order endpoints are in test_api.c):
 *
 *   admin     with --admin-token: 401 without or with a wrong bearer token (nothing changes);
 *             GET /outbox/stats equals COUNT(*) per status; GET /sagas/{id} 200 with the steps,
 *             404 for an unknown id; POST /sagas/{id}/retry of a COMPLETED saga 409; a dead
 *             letter made with SQL is listed by GET /dlq, replayed once (the outbox row back to
 *             PENDING with attempts 0), a second replay 409, an unknown one 404.
 *   probes    /healthz and /readyz 200; /metrics in the Prometheus text format with the
 *             outbox, saga, MySQL and breaker families, accepted by `promtool check metrics`,
 *             and the outbox gauge equal to the table.
 *
 * Every server is stopped with SIGTERM and must exit 0 within 5 s (a sanitizer report would
 * make it non-zero; its log is printed). Teardown SIGKILLs whatever a failed test left running.
 * The HTTP and process helpers are shared with test_api.c (tests/support/testhttp.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>

#include "order_saga.h"
#include "orders.h"
#include "testdb.h"
#include "api.h"
#include "testhttp.h"
#include "testorders.h"
#include "testoutbox.h"
#include "testproc.h"

/* ---- fixture ---- */

static int setup(void **state)
{
    *state = testhttp_api_new("api_admin", 1000);
    return 0;
}

static const char ORDER_BODY[] =
    "{\"customer_id\":7,\"items\":[{\"sku\":\"SKU-A\",\"qty\":2,\"price_cents\":1250}]}";

#define AUTH "Authorization: Bearer s3cret"

/* An admin request with the right token; body NULL for GET. */
static void admin(CURL *h, const char *method, unsigned port, const char *path,
                  struct testhttp_reply *r)
{
    const char *headers[] = {AUTH, NULL};
    testhttp_do(h, method, port, path, headers, strcmp(method, "POST") == 0 ? "" : NULL, 0, r);
}

/* ---- admin ---- */

/* An admin request that must answer 200 with JSON; returns the document (json_decref). */
static json_t *admin_json(struct testhttp_api *c, const char *method, unsigned port,
                          const char *path, struct testhttp_reply *r)
{
    admin(c->h, method, port, path, r);
    char what[160];
    snprintf(what, sizeof(what), "%s %s", method, path);
    testhttp_expect_status(r, 200, what);
    return testhttp_json(r);
}

/* The one element of doc's array member, borrowed; the test fails unless there is exactly one. */
static json_t *only_item(json_t *doc, const char *member, const struct testhttp_reply *r)
{
    json_t *list = json_object_get(doc, member);
    if (json_array_size(list) != 1)
        fail_msg("\"%s\" should list exactly one: %s", member, r->body);
    return json_array_get(list, 0);
}

/* A COMPLETED CreateOrderSaga, run in this process with the in-process payment and shipment
 * stand-ins. Returns its order id; saga_id receives the saga's. */
static int64_t completed_saga(struct testhttp_api *c, char saga_id[TXO_SAGA_ID_LEN])
{
    const struct order_item items[] = {{"SKU-B", 1, 500}};
    return testorders_run_saga(c->t.db, 9, items, 1, NULL, NULL, TXO_SAGA_COMPLETED, saga_id);
}

/* GET /outbox/stats equals the table, counted here. */
static void expect_stats(struct testhttp_api *c, CURL *h, unsigned port, const char *when)
{
    struct testhttp_reply *r = &c->rep[2];
    admin(h, "GET", port, "/outbox/stats", r);
    testhttp_expect_status(r, 200, "GET /outbox/stats");
    json_t *doc = testhttp_json(r);
    static const char *const statuses[] = {"PENDING", "PROCESSING", "PUBLISHED", "FAILED"};
    static const char *const fields[] = {"pending", "processing", "published", "failed"};
    for (size_t i = 0; i < TXO_ARRAY_LEN(statuses); i++) {
        char sql[128];
        snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM outbox_events WHERE status = '%s'",
                 statuses[i]);
        int64_t want = testdb_q(c->t.db, sql);
        json_t *got = json_object_get(doc, fields[i]);
        if (!json_is_integer(got) || json_integer_value(got) != want)
            fail_msg("%s: /outbox/stats %s should be %lld: %s", when, fields[i], (long long)want,
                     r->body);
    }
    int64_t dead = testdb_q(c->t.db, "SELECT COUNT(*) FROM dead_letter_events");
    if (json_integer_value(json_object_get(doc, "dead_letters")) != dead)
        fail_msg("%s: /outbox/stats dead_letters should be %lld: %s", when, (long long)dead,
                 r->body);
    json_t *age = json_object_get(doc, "oldest_pending_age_seconds");
    if (!json_is_number(age) || json_number_value(age) < 0)
        fail_msg("%s: oldest_pending_age_seconds is not a number >= 0: %s", when, r->body);
    json_decref(doc);
}

static void test_admin_endpoints(void **state)
{
    struct testhttp_api *c = *state;
    static const char *const args[] = {"--admin-token", "s3cret", NULL};
    unsigned port = testhttp_txo_start(&c->procs[0], "api_serve", "serve", args);
    struct testhttp_reply *r = &c->rep[0];
    testhttp_post_order(c->h, port, "admin-key", ORDER_BODY, r);
    testhttp_expect_created(r, 201, "POST /orders");
    char saga_id[TXO_SAGA_ID_LEN];
    completed_saga(c, saga_id);
    /* Every status present: some events published, one in flight. */
    testdb_exec(c->t.db, "UPDATE outbox_events SET status = 'PUBLISHED', published_time = NOW(6)"
                         " ORDER BY id LIMIT 2");
    testdb_exec(c->t.db, "UPDATE outbox_events SET status = 'PROCESSING', locked_by = 'test',"
                         " locked_until = NOW(6) + INTERVAL 1 HOUR WHERE status = 'PENDING'"
                         " ORDER BY id LIMIT 1");
    int64_t event_id = 0;
    int64_t dl_id = testoutbox_dead_letter(c->t.db, "broker unavailable", &event_id);

    /* No token, a wrong one, another scheme: 401, on reads and on writes alike. */
    testhttp_get(c->h, port, "/outbox/stats", r);
    testhttp_expect_error(r, 401, "unauthorized", NULL, "GET /outbox/stats without a token");
    const char *wrong[] = {"Authorization: Bearer s3cres", NULL};
    testhttp_do(c->h, "GET", port, "/outbox/stats", wrong, NULL, 0, r);
    testhttp_expect_error(r, 401, "unauthorized", NULL, "GET /outbox/stats with a wrong token");
    const char *longer[] = {"Authorization: Bearer s3cret2", NULL};
    testhttp_do(c->h, "GET", port, "/outbox/stats", longer, NULL, 0, r);
    testhttp_expect_error(r, 401, "unauthorized", NULL, "GET /outbox/stats with a longer token");
    const char *basic[] = {"Authorization: Basic s3cret", NULL};
    testhttp_do(c->h, "GET", port, "/dlq", basic, NULL, 0, r);
    testhttp_expect_error(r, 401, "unauthorized", NULL, "GET /dlq with another scheme");
    char path[128];
    snprintf(path, sizeof(path), "/dlq/%lld/replay", (long long)dl_id);
    testhttp_do(c->h, "POST", port, path, NULL, "", 0, r);
    testhttp_expect_error(r, 401, "unauthorized", NULL, "POST /dlq/{id}/replay without a token");
    snprintf(path, sizeof(path), "/sagas/%s/retry", saga_id);
    testhttp_do(c->h, "POST", port, path, wrong, "", 0, r);
    testhttp_expect_error(r, 401, "unauthorized", NULL,
                          "POST /sagas/{id}/retry with a wrong token");
    assert_int_equal(
        testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'FAILED'"), 1);
    assert_int_equal(testdb_q(c->t.db, "SELECT SUM(replay_count) FROM dead_letter_events"), 0);

    expect_stats(c, c->h, port, "before the replay");
    assert_int_equal(
        testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'FAILED'"), 1);
    assert_true(testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING'") >
                0);

    /* Sagas. */
    admin(c->h, "GET", port, "/sagas/00000000-0000-4000-8000-000000000000", r);
    testhttp_expect_error(r, 404, "not_found", NULL, "GET /sagas/<unknown>");
    snprintf(path, sizeof(path), "/sagas/%s", saga_id);
    json_t *doc = admin_json(c, "GET", port, path, r);
    assert_string_equal(json_string_value(json_object_get(doc, "saga_id")), saga_id);
    assert_string_equal(json_string_value(json_object_get(doc, "saga_type")), "CreateOrderSaga");
    assert_string_equal(json_string_value(json_object_get(doc, "status")), "COMPLETED");
    json_t *steps = json_object_get(doc, "steps");
    assert_int_equal(json_array_size(steps), 3);
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(json_string_value(json_object_get(json_array_get(steps, i), "status")),
                            "COMPLETED");
    json_decref(doc);
    snprintf(path, sizeof(path), "/sagas/%s/retry", saga_id);
    admin(c->h, "POST", port, path, r);
    testhttp_expect_error(r, 409, "conflict", NULL, "POST /sagas/{id}/retry of a COMPLETED saga");
    struct txo_param sp[] = {txo_p_str(saga_id)};
    char *st = testdb_str(c->t.db, "SELECT status FROM saga_instances WHERE id = ?", sp, 1);
    assert_non_null(st);
    assert_string_equal(st, "COMPLETED");
    txo_free(st);

    /* Dead letters. */
    doc = admin_json(c, "GET", port, "/dlq", r);
    json_t *dl = only_item(doc, "dead_letters", r);
    assert_int_equal(json_integer_value(json_object_get(dl, "id")), dl_id);
    assert_int_equal(json_integer_value(json_object_get(dl, "source_event_id")), event_id);
    assert_string_equal(json_string_value(json_object_get(dl, "event_type")), "OrderCreated");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(dl, "payload"), "order_id")), 4242);
    assert_string_equal(json_string_value(json_object_get(dl, "error")), "broker unavailable");
    assert_int_equal(json_integer_value(json_object_get(dl, "replay_count")), 0);
    assert_true(json_is_null(json_object_get(dl, "replayed_at")));
    assert_int_equal(json_integer_value(json_object_get(doc, "next_after_id")), dl_id);
    json_decref(doc);

    /* A FAILED event alone parks nothing; with a later event of its aggregate behind it (relay
     * --ordering aggregate) the aggregate is parked. */
    doc = admin_json(c, "GET", port, "/outbox/parked", r);
    assert_int_equal(json_array_size(json_object_get(doc, "parked")), 0);
    json_decref(doc);
    testdb_exec(c->t.db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                         "payload, idempotency_key) VALUES ('order', 4242, 'OrderConfirmed', "
                         "'{\"order_id\":4242}', 'order:4242:confirmed')");
    doc = admin_json(c, "GET", port, "/outbox/parked?limit=10", r);
    json_t *pk = only_item(doc, "parked", r);
    assert_string_equal(json_string_value(json_object_get(pk, "aggregate_id")), "4242");
    assert_int_equal(json_integer_value(json_object_get(pk, "event_id")), event_id);
    assert_string_equal(json_string_value(json_object_get(pk, "status")), "FAILED");
    assert_string_equal(json_string_value(json_object_get(pk, "last_error")), "broker unavailable");
    assert_int_equal(json_integer_value(json_object_get(pk, "waiting")), 1);
    assert_int_equal(json_integer_value(json_object_get(doc, "limit")), 10);
    json_decref(doc);

    snprintf(path, sizeof(path), "/dlq/%lld/replay", (long long)dl_id);
    doc = admin_json(c, "POST", port, path, r);
    assert_int_equal(json_integer_value(json_object_get(doc, "id")), dl_id);
    assert_string_equal(json_string_value(json_object_get(doc, "status")), "REPLAYED");
    json_decref(doc);
    struct txo_param ep[] = {txo_p_i64(event_id)};
    st = testdb_str(c->t.db, "SELECT status FROM outbox_events WHERE id = ?", ep, 1);
    assert_non_null(st);
    assert_string_equal(st, "PENDING");
    txo_free(st);
    assert_int_equal(testdb_i64(c->t.db, "SELECT attempts FROM outbox_events WHERE id = ?", ep, 1),
                     0);
    assert_int_equal(testdb_i64(c->t.db,
                                "SELECT COUNT(*) FROM outbox_events WHERE id = ? AND"
                                " locked_by IS NULL AND next_attempt_at <= NOW(6)",
                                ep, 1),
                     1);
    assert_int_equal(testdb_q(c->t.db, "SELECT SUM(replay_count) FROM dead_letter_events"), 1);
    assert_int_equal(
        testdb_q(c->t.db, "SELECT COUNT(*) FROM dead_letter_events WHERE replayed_at IS NULL"), 0);

    admin(c->h, "POST", port, path, r);
    testhttp_expect_error(r, 409, "conflict", NULL, "a second POST /dlq/{id}/replay");
    assert_int_equal(testdb_q(c->t.db, "SELECT SUM(replay_count) FROM dead_letter_events"), 1);
    admin(c->h, "POST", port, "/dlq/999999/replay", r);
    testhttp_expect_error(r, 404, "not_found", NULL, "POST /dlq/999999/replay");

    expect_stats(c, c->h, port, "after the replay");
    assert_int_equal(
        testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'FAILED'"), 0);

    testhttp_txo_stop(&c->procs[0], "txo serve");
}

/* ---- probes and metrics ---- */

static void expect_contains(const struct testhttp_reply *r, const char *needle)
{
    if (strstr(r->body, needle) == NULL)
        fail_msg("/metrics does not contain \"%s\":\n%s", needle, r->body);
}

static void test_probes_and_metrics(void **state)
{
    struct testhttp_api *c = *state;
    unsigned port = testhttp_txo_start(&c->procs[0], "api_serve", "serve", NULL);
    struct testhttp_reply *r = &c->rep[0];
    testhttp_get(c->h, port, "/healthz", r);
    testhttp_expect_status(r, 200, "GET /healthz");
    testhttp_get(c->h, port, "/readyz", r);
    testhttp_expect_status(r, 200, "GET /readyz");
    json_t *doc = testhttp_json(r);
    assert_string_equal(json_string_value(json_object_get(doc, "status")), "ready");
    json_decref(doc);
    /* The OpenAPI description, byte for byte what the binary carries. */
    testhttp_get(c->h, port, "/openapi.json", r);
    testhttp_expect_status(r, 200, "GET /openapi.json");
    assert_string_equal(r->body, order_api_openapi());

    testhttp_post_order(c->h, port, "metrics-key", ORDER_BODY, r);
    int64_t id = testhttp_expect_created(r, 201, "POST /orders");
    char path[48];
    snprintf(path, sizeof(path), "/orders/%lld", (long long)id);
    testhttp_get(c->h, port, path, r);
    testhttp_expect_status(r, 200, "GET /orders/{id}");
    testhttp_get(c->h, port, "/no/such/path", r);
    testhttp_expect_status(r, 404, "GET /no/such/path");
    testhttp_get(c->h, port, "/metrics", r);
    testhttp_expect_status(r, 200, "GET /metrics");
    if (strncmp(r->content_type, "text/plain", 10) != 0)
        fail_msg("/metrics Content-Type %s, want text/plain", r->content_type);
    static const char *const families[] = {
        "# TYPE txo_outbox_oldest_pending_age_seconds gauge\n",
        "# TYPE txo_outbox_pending gauge\n",
        "# TYPE txo_sagas gauge\n",
        "# TYPE txo_mysql_deadlocks_total counter\n",
        "# TYPE txo_circuit_breaker_state gauge\n",
        "\ntxo_outbox_oldest_pending_age_seconds ",
        "\ntxo_mysql_deadlocks_total ",
        /* The gauges read the tables at the scrape: the order's OrderCreated is pending. */
        "\ntxo_outbox_pending 1\n",
        "\ntxo_sagas{status=\"RUNNING\"} 0\n",
        "\ntxo_circuit_breaker_state{service=\"payment\"} 0\n",
        /* The API's own requests, by route template, never by path. */
        "\ntxo_http_requests_total{method=\"POST\",route=\"/orders\",status=\"201\"} 1\n",
        "\ntxo_http_requests_total{method=\"GET\",route=\"/orders/{id}\",status=\"200\"} 1\n",
        "\ntxo_http_requests_total{method=\"GET\",route=\"unmatched\",status=\"404\"} 1\n",
        "\ntxo_http_requests_total{method=\"GET\",route=\"/healthz\",status=\"200\"} ",
        "\ntxo_http_request_duration_seconds_count{method=\"POST\",route=\"/orders\"} 1\n",
        "\nprocess_start_time_seconds ",
        "\ntxo_build_info{version=\"",
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(families); i++)
        expect_contains(r, families[i]);
    testhttp_expect_promtool_valid(r->body, r->len);

    testhttp_txo_stop(&c->procs[0], "txo serve");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admin_endpoints),
        cmocka_unit_test(test_probes_and_metrics),
    };
    return testhttp_run_each(tests, TXO_ARRAY_LEN(tests), setup, testhttp_api_free_state, NULL,
                             NULL);
}
