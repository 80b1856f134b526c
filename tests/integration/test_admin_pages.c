/*
 * The admin endpoints behind the dashboard's pages, as JSON over HTTP from a real `txo serve`
 * with --admin-token, against the private MariaDB:
 *   - GET /outbox/stats tells one event waiting for its retry (retry_waiting 1, nothing due,
 *     the lag still counting it; an event held back behind a parked aggregate is not due
 *     either) from a stalled backlog (an event due for 100 s);
 *   - GET /dlq/events shows an event replayed once and dead twice as one entry with that
 *     history; POST /dlq/{id}/skip makes it SKIPPED (and the letter skipped), takes it off the
 *     list, and answers 409 a second time, 404 for an unknown letter, 405 for GET;
 *   - GET /sagas/{id} of a compensated saga has its times and its compensation plan, last
 *     step first; of a completed one, an empty plan;
 *   - GET /search finds a saga by id and an order by id (through the order service's finder:
 *     its items and its saga), nothing for an unknown id, and refuses a missing, repeated or
 *     too long q with 400;
 *   - every one of them is 401 without the token, and bad arguments are 400.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>

#include "testrun.h"
#include "order_saga.h"
#include "orders.h"
#include "testdb.h"
#include "testhttp.h"
#include "testhttpclient.h"
#include "testsql.h"
#include "testorders.h"
#include "testproc.h"

#define TOKEN "pages-s3cret"

struct ctx {
    struct testhttp_client hc; /* first: the database, the CURL handle and the reply */
    struct testproc serve;
    unsigned port;
};

static int setup(void **state)
{
    struct ctx *c = testhttp_client_new(sizeof(*c), "admin_pages");
    static const char *const args[] = {"--admin-token", TOKEN, NULL};
    c->port = testhttp_txo_start(&c->serve, "pages_serve", "serve", args);
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    testhttp_txo_stop(&c->serve, "txo serve");
    testproc_remove_log(&c->serve);
    testhttp_client_free(c);
    return 0;
}

static const char *const auth[] = {"Authorization: Bearer " TOKEN, NULL};

/* method path with the token; the reply's JSON when it answers want (the caller decrefs). */
static json_t *call(struct ctx *c, const char *method, const char *path, long want)
{
    testhttp_do(c->hc.h, method, c->port, path, auth, NULL, 0, &c->hc.r);
    testhttp_expect_status(&c->hc.r, want, path);
    return testhttp_json(&c->hc.r);
}

static void unauthorized(struct ctx *c, const char *method, const char *path)
{
    testhttp_do(c->hc.h, method, c->port, path, NULL, NULL, 0, &c->hc.r);
    testhttp_expect_error(&c->hc.r, 401, "unauthorized", NULL, path);
}

static void bad_request(struct ctx *c, const char *path)
{
    testhttp_do(c->hc.h, "GET", c->port, path, auth, NULL, 0, &c->hc.r);
    testhttp_expect_error(&c->hc.r, 400, "invalid_request", NULL, path);
}

static int64_t i64(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        fail_msg("\"%s\" is not an integer", key);
    return (int64_t)json_integer_value(v);
}

static double real(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v))
        fail_msg("\"%s\" is not a number", key);
    return json_number_value(v);
}

static const char *str(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    if (s == NULL)
        fail_msg("\"%s\" is not a string", key);
    return s;
}

static void test_stats_tell_backoff_from_a_stalled_relay(void **state)
{
    struct ctx *c = *state;
    unauthorized(c, "GET", "/outbox/stats");
    /* One event whose publish failed, waiting for its retry in an hour. */
    testdb_exec(c->hc.t.db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type,"
                            " payload, idempotency_key, attempts, created_at, next_attempt_at)"
                            " VALUES ('cart', 1, 'CartCheckedOut', '{}', 'pages-backoff', 3,"
                            " NOW(6) - INTERVAL 50 SECOND, NOW(6) + INTERVAL 1 HOUR)");
    /* An event held back behind its aggregate's FAILED one (parked): due, but not the relay's
     * to claim, so not a sign of a stalled relay either. */
    testdb_exec(c->hc.t.db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type,"
                            " payload, idempotency_key, status, attempts, created_at) VALUES"
                            " ('doc', 7, 'DocSigned', '{}', 'pages-head', 'FAILED', 10,"
                            " NOW(6) - INTERVAL 300 SECOND),"
                            " ('doc', 7, 'DocFiled', '{}', 'pages-behind', 'PENDING', 0,"
                            " NOW(6) - INTERVAL 200 SECOND)");
    testdb_exec(c->hc.t.db, "INSERT INTO outbox_parked (aggregate_type, aggregate_id, event_id)"
                            " SELECT aggregate_type, aggregate_id, id FROM outbox_events"
                            " WHERE idempotency_key = 'pages-head'");
    json_t *st = call(c, "GET", "/outbox/stats", 200);
    assert_int_equal(i64(st, "retry_waiting"), 1);
    if (real(st, "oldest_due_age_seconds") != 0.0)
        fail_msg("an event waiting for its retry or held back counts as due: %s", c->hc.r.body);
    if (real(st, "oldest_pending_age_seconds") < 200.0)
        fail_msg("the event in backoff is not counted in the lag: %s", c->hc.r.body);
    json_decref(st);

    /* An event due for 100 s that no relay took: stalled. */
    testdb_exec(c->hc.t.db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type,"
                            " payload, idempotency_key, created_at, next_attempt_at)"
                            " VALUES ('cart', 2, 'CartCheckedOut', '{}', 'pages-due',"
                            " NOW(6) - INTERVAL 100 SECOND, NOW(6) - INTERVAL 100 SECOND)");
    st = call(c, "GET", "/outbox/stats", 200);
    assert_int_equal(i64(st, "retry_waiting"), 1);
    double due = real(st, "oldest_due_age_seconds");
    if (due < 100.0 || due > 160.0)
        fail_msg("oldest_due_age_seconds %.3f, want 100..160: %s", due, c->hc.r.body);
    json_decref(st);
}

/* A FAILED event and its first dead letter; returns the letter's id, the event's in *ev. */
static int64_t dead_event(struct ctx *c, int64_t *ev)
{
    testdb_exec(c->hc.t.db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type,"
                            " payload, idempotency_key, status, attempts, last_error) VALUES"
                            " ('invoice', 9, 'InvoiceSent', '{\"invoice\":9}', 'pages-dead',"
                            " 'FAILED', 10, 'refused')");
    *ev = testdb_i64(c->hc.t.db,
                     "SELECT id FROM outbox_events WHERE idempotency_key = 'pages-dead'", NULL, 0);
    testdb_exec(c->hc.t.db, "INSERT INTO dead_letter_events (source_event_id, event_type, payload,"
                            " error) SELECT id, event_type, payload, 'refused' FROM outbox_events"
                            " WHERE idempotency_key = 'pages-dead'");
    return testdb_i64(c->hc.t.db, "SELECT MAX(id) FROM dead_letter_events", NULL, 0);
}

static void test_dead_events_and_skip(void **state)
{
    struct ctx *c = *state;
    unauthorized(c, "GET", "/dlq/events");
    unauthorized(c, "POST", "/dlq/1/skip");
    bad_request(c, "/dlq/events?limit=0");
    bad_request(c, "/dlq/events?after_id=-1");
    bad_request(c, "/dlq/events?limit=1&limit=2");

    int64_t ev = 0;
    int64_t first = dead_event(c, &ev);
    char path[64];
    snprintf(path, sizeof(path), "/dlq/%lld/replay", (long long)first);
    json_decref(call(c, "POST", path, 200));
    /* The relay gives it up again: FAILED, and a second letter. */
    testdb_exec(c->hc.t.db, "UPDATE outbox_events SET status = 'FAILED' "
                            "WHERE idempotency_key = 'pages-dead'");
    testdb_exec(c->hc.t.db, "INSERT INTO dead_letter_events (source_event_id, event_type, payload,"
                            " error) SELECT id, event_type, payload, 'refused again' FROM"
                            " outbox_events WHERE idempotency_key = 'pages-dead'");
    int64_t second = testdb_i64(c->hc.t.db, "SELECT MAX(id) FROM dead_letter_events", NULL, 0);

    json_t *doc = call(c, "GET", "/dlq/events", 200);
    json_t *list = json_object_get(doc, "dead_events");
    if (json_array_size(list) != 1)
        fail_msg("want one dead event, got: %s", c->hc.r.body);
    json_t *e = json_array_get(list, 0);
    assert_int_equal(i64(e, "dead_letter_id"), second);
    assert_int_equal(i64(e, "source_event_id"), ev);
    assert_int_equal(i64(e, "letters"), 2);
    assert_int_equal(i64(e, "replays"), 1);
    assert_string_equal(str(e, "event_status"), "FAILED");
    assert_string_equal(str(e, "error"), "refused again");
    assert_non_null(json_string_value(json_object_get(e, "last_replayed_at")));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(e, "payload"), "invoice")),
                     9);
    assert_int_equal(i64(doc, "next_after_id"), second);
    json_decref(doc);

    snprintf(path, sizeof(path), "/dlq/%lld/skip", (long long)second);
    doc = call(c, "POST", path, 200);
    assert_int_equal(i64(doc, "id"), second);
    assert_string_equal(str(doc, "status"), "SKIPPED");
    json_decref(doc);
    assert_int_equal(
        testsql_i64_of(c->hc.t.db, "SELECT status = 'SKIPPED' FROM outbox_events WHERE id = ?", ev),
        1);
    assert_int_equal(
        testsql_i64_of(c->hc.t.db,
                       "SELECT skipped_at IS NOT NULL FROM dead_letter_events WHERE id = ?",
                       second),
        1);
    doc = call(c, "GET", "/dlq/events", 200);
    assert_int_equal(json_array_size(json_object_get(doc, "dead_events")), 0);
    json_decref(doc);

    testhttp_do(c->hc.h, "POST", c->port, path, auth, NULL, 0, &c->hc.r);
    testhttp_expect_error(&c->hc.r, 409, "conflict", "SKIPPED", "a second skip");
    testhttp_do(c->hc.h, "GET", c->port, path, auth, NULL, 0, &c->hc.r);
    testhttp_expect_error(&c->hc.r, 405, "method_not_allowed", NULL, "GET of a skip");
    testhttp_do(c->hc.h, "POST", c->port, "/dlq/999999/skip", auth, NULL, 0, &c->hc.r);
    testhttp_expect_error(&c->hc.r, 404, "not_found", NULL, "skip of an unknown letter");
}

/* An order and its saga, run to the end: COMPENSATED with fail_shipment, else COMPLETED. */
static int64_t order_with_saga(struct ctx *c, bool fail_shipment, char saga_id[TXO_SAGA_ID_LEN])
{
    testorders_stock(c->hc.t.db, "pen", 100);
    const struct order_item item = {"pen", 2, 250};
    const struct order_faults faults = {.fail_shipment = fail_shipment};
    return testorders_run_saga(c->hc.t.db, 5, &item, 1, &faults, NULL,
                               fail_shipment ? TXO_SAGA_COMPENSATED : TXO_SAGA_COMPLETED, saga_id);
}

static void test_saga_page(void **state)
{
    struct ctx *c = *state;
    char saga_id[TXO_SAGA_ID_LEN];
    (void)order_with_saga(c, true, saga_id);
    char path[96];
    snprintf(path, sizeof(path), "/sagas/%s", saga_id);
    unauthorized(c, "GET", path);
    json_t *g = call(c, "GET", path, 200);
    assert_string_equal(str(g, "status"), "COMPENSATED");
    assert_non_null(json_string_value(json_object_get(g, "created_at")));
    assert_non_null(json_string_value(json_object_get(g, "updated_at")));
    json_t *steps = json_object_get(g, "steps");
    assert_true(json_array_size(steps) >= 3);
    for (size_t i = 0; i < json_array_size(steps); i++)
        assert_non_null(json_string_value(json_object_get(json_array_get(steps, i), "updated_at")));
    /* The shipment failed: the charge and the reservation were undone, the charge first. */
    json_t *plan = json_object_get(g, "compensation_plan");
    if (json_array_size(plan) != 2)
        fail_msg("want a plan of two steps: %s", c->hc.r.body);
    assert_int_equal(i64(json_array_get(plan, 0), "step"), 2);
    assert_int_equal(i64(json_array_get(plan, 1), "step"), 1);
    for (size_t i = 0; i < 2; i++) {
        assert_string_equal(str(json_array_get(plan, i), "state"), "done");
        if (strcmp(str(json_array_get(plan, i), "undo"), "nothing to undo") == 0 ||
            strncmp(str(json_array_get(plan, i), "undo"), "unknown", 7) == 0)
            fail_msg("the plan does not know the steps' undo: %s", c->hc.r.body);
    }
    json_decref(g);

    char done[TXO_SAGA_ID_LEN];
    (void)order_with_saga(c, false, done);
    snprintf(path, sizeof(path), "/sagas/%s", done);
    g = call(c, "GET", path, 200);
    assert_string_equal(str(g, "status"), "COMPLETED");
    assert_int_equal(json_array_size(json_object_get(g, "compensation_plan")), 0);
    json_decref(g);
}

static void test_search(void **state)
{
    struct ctx *c = *state;
    unauthorized(c, "GET", "/search?q=1");
    bad_request(c, "/search");
    bad_request(c, "/search?q=");
    bad_request(c, "/search?q=1&q=2");
    char longq[260] = "/search?q=";
    memset(longq + strlen(longq), '7', 201);
    bad_request(c, longq);

    char saga_id[TXO_SAGA_ID_LEN];
    int64_t order = order_with_saga(c, false, saga_id);
    char path[96];
    snprintf(path, sizeof(path), "/search?q=%s", saga_id);
    json_t *doc = call(c, "GET", path, 200);
    json_t *results = json_object_get(doc, "results");
    if (json_array_size(results) != 1)
        fail_msg("want the saga alone: %s", c->hc.r.body);
    assert_string_equal(str(json_array_get(results, 0), "kind"), "saga");
    assert_string_equal(str(json_array_get(results, 0), "id"), saga_id);
    assert_string_equal(str(json_array_get(results, 0), "status"), "COMPLETED");
    json_decref(doc);

    snprintf(path, sizeof(path), "/search?q=%lld", (long long)order);
    doc = call(c, "GET", path, 200);
    results = json_object_get(doc, "results");
    if (json_array_size(results) != 1)
        fail_msg("want the order alone: %s", c->hc.r.body);
    json_t *hit = json_array_get(results, 0);
    assert_string_equal(str(hit, "kind"), "order");
    json_t *record = json_object_get(hit, "record");
    char title[64];
    snprintf(title, sizeof(title), "Order %lld", (long long)order);
    assert_string_equal(str(record, "title"), title);
    assert_string_equal(str(record, "status"), "CONFIRMED");
    assert_string_equal(json_string_value(json_array_get(json_object_get(record, "sagas"), 0)),
                        saga_id);
    json_t *items = json_array_get(json_object_get(record, "tables"), 0);
    assert_string_equal(str(items, "title"), "items");
    json_t *row = json_array_get(json_object_get(items, "rows"), 0);
    assert_string_equal(json_string_value(json_array_get(row, 0)), "pen");
    assert_int_equal(json_integer_value(json_array_get(row, 1)), 2);
    json_decref(doc);

    doc = call(c, "GET", "/search?q=987654321", 200);
    assert_int_equal(json_array_size(json_object_get(doc, "results")), 0);
    json_decref(doc);
    doc = call(c, "GET", "/search?q=no%20such%20thing", 200);
    assert_int_equal(json_array_size(json_object_get(doc, "results")), 0);
    assert_string_equal(str(doc, "query"), "no such thing");
    json_decref(doc);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_tell_backoff_from_a_stalled_relay),
        cmocka_unit_test(test_dead_events_and_skip),
        cmocka_unit_test(test_saga_page),
        cmocka_unit_test(test_search),
    };
    int rc = testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
