/*
 * The operator's dashboard (GET /ui of `txo serve`) in a real browser: Debian's chromium,
 * headless, driven over the DevTools protocol by tests/js/dashboard_driver.mjs, one step per
 * run, each in a fresh tab that must log no error and throw nothing.
 *
 * The database gets a backlog of PENDING outbox events, a FAILED event with its dead letter
 * (whose error text is HTML: it must show as text), and a CreateOrderSaga whose shipment and
 * refund failed, left COMPENSATION_FAILED with no automatic retry. Then, through the page:
 *   - it shows the backlog's size (the token given in the URL fragment, which the page
 *     removes from the address bar), says the relay is stalled (the oldest event is due for
 *     90 s), and draws counts and ages on two scales with distinct, round ticks;
 *   - the search box finds the saga (its steps, the refund's error, the compensation plan)
 *     and the order (its items, status, and the link to that saga's page);
 *   - Replay on the dead letter puts its event back to PENDING in the database; replayed
 *     twice and dead three times, the event is still one row, with that history; its payload
 *     view shows the JSON as text; Skip makes it SKIPPED and takes it off the list;
 *   - two other dead events ticked and replayed at once are both PENDING again;
 *   - Retry on the saga runs its compensations again (this time they work): COMPENSATED;
 *   - a `txo relay` and a `txo worker` started by the test are listed as alive; the relay
 *     disappears once stopped; the worker, SIGKILLed and its heartbeat aged, shows as stale.
 * At the end, with one event backing off and nothing due, the page says so, and it still
 * counts the event's age as not published. The overview, the saga's page and the order's
 * page are kept as ui_dashboard*.png in the test's directory.
 * Also: /ui answers without the token, the admin API still 401s, and GET /sagas lists the
 * saga with its failing step (ChargePayment, whose refund failed) and that step's error.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
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
#include "testhttp.h"
#include "testhttpclient.h"
#include "testsql.h"
#include "testorders.h"
#include "testoutbox.h"
#include "testproc.h"

enum { P_SERVE, P_CHROMIUM, P_RELAY, P_WORKER, N_PROCS };
static const char *const proc_names[N_PROCS] = {"txo serve", "chromium", "txo relay", "txo worker"};

#define TOKEN "dash-s3cret"
/* A saga the test writes past its deadline, under a live owner. */
#define LATE_SAGA "00000000-0000-4000-8000-00000000dead"

struct ctx {
    struct testhttp_client hc; /* first: the database, the CURL handle and the reply */
    struct testproc procs[N_PROCS];
    char profile[64]; /* chromium's --user-data-dir */
    unsigned api_port;
    unsigned cdp_port;
};

static int setup(void **state)
{
    *state = testhttp_client_new(sizeof(struct ctx), "ui");
    return 0;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    for (int i = 0; i < N_PROCS; i++)
        testproc_stop_hard(&c->procs[i]);
    if (c->profile[0] != '\0') {
        const char *rm[] = {"/bin/rm", "-rf", c->profile, NULL};
        char *out = NULL;
        (void)testproc_run("ui_rm", rm, 30000, &out);
        free(out);
    }
    testhttp_client_free(c);
    return 0;
}

static void fail_with_logs(struct ctx *c, const char *what)
{
    for (int i = 0; i < N_PROCS; i++)
        if (c->procs[i].pid != 0 || c->procs[i].log_path[0] != '\0')
            testproc_print_log(&c->procs[i], proc_names[i]);
    fail_msg("%s", what);
}

/* ---- the data the page shows ---- */

/* A CreateOrderSaga whose shipment is refused and whose refund then fails: COMPENSATION_FAILED,
 * given up at once (one try), so no worker retries it behind the test's back. */
static int64_t compensation_failed_saga(struct ctx *c, char saga_id[TXO_SAGA_ID_LEN])
{
    return testorders_compensation_failed(c->hc.t.db, saga_id);
}

/* A FAILED event and its dead letter, as the relay writes them, and a later event of its
 * aggregate that it holds back (parked); the error is HTML, which the page must show as text.
 * Returns the dead letter's id, *event_id the event's. */
static int64_t dead_letter(struct ctx *c, int64_t *event_id)
{
    int64_t letter =
        testoutbox_dead_letter(c->hc.t.db, "<b id=\"injected\">broker unavailable</b>", event_id);
    testdb_exec(c->hc.t.db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type,"
                            " payload, idempotency_key, status, attempts, last_error)"
                            " VALUES ('order', 4242, 'OrderConfirmed', '{\"order_id\":4242}',"
                            " 'order:4242:confirmed', 'PENDING', 0, NULL)");
    return letter;
}

/* The relay's work when a replayed event fails its attempts again: FAILED, and one more dead
 * letter for it. Returns the new letter's id. */
static int64_t dies_again(struct ctx *c, int64_t event_id)
{
    struct txo_param p[] = {txo_p_i64(event_id)};
    struct txo_error err;
    txo_error_init(&err);
    struct txo_exec_result res = {0, 0};
    if (txo_db_exec(c->hc.t.db, "UPDATE outbox_events SET status = 'FAILED' WHERE id = ?", p, 1,
                    NULL, &err) != 0 ||
        txo_db_exec(c->hc.t.db,
                    "INSERT INTO dead_letter_events (source_event_id, event_type, payload, error)"
                    " SELECT id, event_type, payload, 'broker unavailable again' FROM outbox_events"
                    " WHERE id = ?",
                    p, 1, &res, &err) != 0)
        fail_msg("the event dying again: %s", err.msg);
    return (int64_t)res.insert_id;
}

/* Another FAILED event of its own aggregate and its dead letter; returns the letter's id and
 * the event's in *event_id. */
static int64_t other_dead_letter(struct ctx *c, int n, int64_t *event_id)
{
    char key[64];
    snprintf(key, sizeof(key), "ui-dead-%d", n);
    struct txo_param p[] = {txo_p_i64(n), txo_p_str(key)};
    struct txo_error err;
    txo_error_init(&err);
    struct txo_exec_result res = {0, 0};
    if (txo_db_exec(c->hc.t.db,
                    "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,"
                    " idempotency_key, status, attempts, last_error) VALUES ('invoice', ?,"
                    " 'InvoiceSent', '{}', ?, 'FAILED', 10, 'refused')",
                    p, 2, &res, &err) != 0)
        fail_msg("inserting a failed event: %s", err.msg);
    *event_id = (int64_t)res.insert_id;
    struct txo_param ev[] = {txo_p_i64(*event_id)};
    if (txo_db_exec(c->hc.t.db,
                    "INSERT INTO dead_letter_events (source_event_id, event_type, payload, error)"
                    " VALUES (?, 'InvoiceSent', '{}', 'refused')",
                    ev, 1, &res, &err) != 0)
        fail_msg("inserting its dead letter: %s", err.msg);
    return (int64_t)res.insert_id;
}

/* An outbox event's status. */
static void expect_status(struct ctx *c, int64_t event_id, const char *want, const char *why)
{
    struct txo_param p[] = {txo_p_i64(event_id)};
    char *status = testdb_str(c->hc.t.db, "SELECT status FROM outbox_events WHERE id = ?", p, 1);
    bool ok = status != NULL && strcmp(status, want) == 0;
    if (!ok)
        print_message("event %lld is %s, want %s\n", (long long)event_id,
                      status != NULL ? status : "gone", want);
    txo_free(status);
    if (!ok)
        fail_with_logs(c, why);
}

/* Five events waiting since a minute and a half ago. */
static void backlog(struct ctx *c)
{
    testdb_exec(c->hc.t.db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type,"
                            " payload, idempotency_key, created_at) VALUES"
                            " ('cart', 1, 'CartCheckedOut', '{}', 'ui-backlog-1',"
                            "  NOW(6) - INTERVAL 90 SECOND),"
                            " ('cart', 2, 'CartCheckedOut', '{}', 'ui-backlog-2', NOW(6)),"
                            " ('cart', 3, 'CartCheckedOut', '{}', 'ui-backlog-3', NOW(6)),"
                            " ('cart', 4, 'CartCheckedOut', '{}', 'ui-backlog-4', NOW(6)),"
                            " ('cart', 5, 'CartCheckedOut', '{}', 'ui-backlog-5', NOW(6))");
}

/* ---- the browser ---- */

static void start_chromium(struct ctx *c)
{
    if (access("/usr/bin/chromium", X_OK) != 0)
        fail_msg("/usr/bin/chromium is missing: run scripts/deps.sh (Debian package chromium)");
    const char *js_dir = getenv("TXO_JS_DIR");
    if (js_dir == NULL)
        fail_msg("TXO_JS_DIR is not set (CTest sets it)");
    char ws[512];
    snprintf(ws, sizeof(ws), "%s/node_modules/ws/package.json", js_dir);
    if (access(ws, R_OK) != 0)
        fail_msg("%s is missing: run scripts/deps.sh (npm ci in tests/js)", ws);
    snprintf(c->profile, sizeof(c->profile), "/tmp/txo-ui-chromium-%ld", (long)getpid());
    c->cdp_port = testproc_free_port();
    char port_arg[64], profile_arg[128];
    snprintf(port_arg, sizeof(port_arg), "--remote-debugging-port=%u", c->cdp_port);
    snprintf(profile_arg, sizeof(profile_arg), "--user-data-dir=%s", c->profile);
    const char *argv[] = {"/usr/bin/chromium",
                          "--headless",
                          "--no-sandbox",
                          "--disable-gpu",
                          "--disable-dev-shm-usage",
                          "--no-first-run",
                          "--remote-debugging-address=127.0.0.1",
                          port_arg,
                          profile_arg,
                          "about:blank",
                          NULL};
    testproc_start(&c->procs[P_CHROMIUM], "ui_chromium", argv, NULL);
    if (!testproc_wait_http(c->cdp_port, "/json/version", 30000))
        fail_with_logs(c, "chromium's DevTools endpoint did not answer in 30 s");
}

/* Runs one step of the driver against the page; fails the test with its output and the logs
 * when the step fails. */
static void step(struct ctx *c, const char *name, const char *arg)
{
    char driver[512], port[16], url[128];
    snprintf(driver, sizeof(driver), "%s/dashboard_driver.mjs", getenv("TXO_JS_DIR"));
    snprintf(port, sizeof(port), "%u", c->cdp_port);
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/ui#token=%s", c->api_port, TOKEN);
    const char *argv[] = {"/usr/bin/env", "node", driver, port, url, name, arg, NULL};
    char *out = NULL;
    int rc = testproc_run("ui_driver", argv, 60000, &out);
    if (rc != 0) {
        print_message("---- dashboard_driver %s %s ----\n%s---- end ----\n", name,
                      arg != NULL ? arg : "", out);
        free(out);
        char what[128];
        snprintf(what, sizeof(what), "the dashboard step \"%s %s\" failed", name,
                 arg != NULL ? arg : "");
        fail_with_logs(c, what);
    }
    free(out);
}

static void start_daemon(struct ctx *c, int which, const char *tag, const char *const *args)
{
    const char *argv[8] = {testproc_txo_bin()};
    size_t n = 1;
    for (; args[n - 1] != NULL && n + 1 < TXO_ARRAY_LEN(argv); n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    testproc_start(&c->procs[which], tag, argv, NULL);
}

static void test_dashboard_in_chromium(void **state)
{
    struct ctx *c = *state;
    char saga_id[TXO_SAGA_ID_LEN];
    int64_t order = compensation_failed_saga(c, saga_id);
    int64_t event_id = 0;
    int64_t letter = dead_letter(c, &event_id);
    backlog(c);
    int64_t pending =
        testdb_q(c->hc.t.db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING'");
    assert_true(pending >= 5);

    static const char *const serve_args[] = {"--admin-token", TOKEN, NULL};
    c->api_port = testhttp_txo_start(&c->procs[P_SERVE], "ui_serve", "serve", serve_args);

    /* The page needs no token; the data does. */
    testhttp_get(c->hc.h, c->api_port, "/ui", &c->hc.r);
    testhttp_expect_status(&c->hc.r, 200, "GET /ui without a token");
    if (strstr(c->hc.r.body, "/ui/app.js") == NULL)
        fail_msg("GET /ui is not the dashboard: %s", c->hc.r.body);
    testhttp_get(c->hc.h, c->api_port, "/processes", &c->hc.r);
    testhttp_expect_status(&c->hc.r, 401, "GET /processes without a token");

    /* A saga past its deadline under a live owner (a worker hung between its steps). */
    testdb_exec(c->hc.t.db,
                "INSERT INTO saga_instances (id, saga_type, correlation_id, status, payload, "
                "owner, lease_until, deadline_at) VALUES ('" LATE_SAGA "', 'CreateOrderSaga', "
                "'late:1', 'RUNNING', '{}', 'hung:1', NOW(6) + INTERVAL 1 HOUR, "
                "NOW(6) - INTERVAL 30 SECOND)");

    /* What the page will show about the saga: the step whose compensation failed, and why. */
    const char *auth[] = {"Authorization: Bearer " TOKEN, NULL};
    testhttp_do(c->hc.h, "GET", c->api_port, "/sagas", auth, NULL, 0, &c->hc.r);
    testhttp_expect_status(&c->hc.r, 200, "GET /sagas");
    json_t *doc = testhttp_json(&c->hc.r);
    assert_int_equal(json_integer_value(
                         json_object_get(json_object_get(doc, "by_status"), "COMPENSATION_FAILED")),
                     1);
    assert_int_equal(json_integer_value(json_object_get(doc, "abandoned")), 1);
    json_t *late = json_array_get(json_object_get(doc, "sagas"), 1);
    json_t *passed = json_object_get(late, "deadline");
    if (late == NULL ||
        strcmp(json_string_value(json_object_get(late, "saga_id")), LATE_SAGA) != 0 ||
        json_string_value(json_object_get(passed, "kind")) == NULL ||
        strcmp(json_string_value(json_object_get(passed, "kind")), "saga") != 0 ||
        json_integer_value(json_object_get(passed, "overdue_seconds")) < 30)
        fail_msg("GET /sagas does not list the saga past its deadline: %s", c->hc.r.body);
    json_t *saga = json_array_get(json_object_get(doc, "sagas"), 0);
    json_t *failing = json_object_get(saga, "failing_step");
    if (saga == NULL || strcmp(json_string_value(json_object_get(saga, "saga_id")), saga_id) != 0 ||
        json_object_get(failing, "name") == NULL ||
        strcmp(json_string_value(json_object_get(failing, "name")), "ChargePayment") != 0 ||
        strcmp(json_string_value(json_object_get(failing, "status")), "COMPENSATION_FAILED") != 0 ||
        strstr(json_string_value(json_object_get(failing, "error")), "refund failed") == NULL)
        fail_msg("GET /sagas does not list the saga with its failing ChargePayment: %s",
                 c->hc.r.body);
    json_decref(doc);

    start_chromium(c);
    char n[32];
    snprintf(n, sizeof(n), "%lld", (long long)pending);
    step(c, "load", n);
    step(c, "stalled", NULL);
    step(c, "charts", NULL);

    /* The search box: the saga's page, and the order's page through the service's finder. */
    step(c, "saga", saga_id);
    char arg[128];
    snprintf(arg, sizeof(arg), "%lld,%s", (long long)order, saga_id);
    step(c, "order", arg);

    snprintf(n, sizeof(n), "%lld", (long long)letter);
    step(c, "replay", n);
    if (testsql_i64_of(c->hc.t.db,
                       "SELECT status = 'PENDING' AND attempts = 0 FROM outbox_events WHERE id = ?",
                       event_id) != 1)
        fail_with_logs(c, "after Replay on the page, the dead letter's event is not PENDING");
    assert_int_equal(testsql_i64_of(c->hc.t.db,
                                    "SELECT replay_count FROM dead_letter_events WHERE id = ?",
                                    letter),
                     1);

    /* Replayed, it dies again; replayed again, and dies a third time: one row all along. */
    int64_t second = dies_again(c, event_id);
    snprintf(n, sizeof(n), "%lld", (long long)second);
    step(c, "replay", n);
    expect_status(c, event_id, "PENDING", "after the second Replay the event is not PENDING");
    int64_t third = dies_again(c, event_id);
    snprintf(arg, sizeof(arg), "%lld,3,2", (long long)event_id);
    step(c, "history", arg);
    snprintf(n, sizeof(n), "%lld", (long long)third);
    step(c, "payload", n);
    step(c, "skip", n);
    expect_status(c, event_id, "SKIPPED", "after Skip on the page the event is not SKIPPED");
    assert_int_equal(
        testsql_i64_of(c->hc.t.db,
                       "SELECT skipped_at IS NOT NULL FROM dead_letter_events WHERE id = ?", third),
        1);

    /* Two dead events ticked and replayed at once. */
    int64_t ev_a = 0, ev_b = 0;
    int64_t dl_a = other_dead_letter(c, 1, &ev_a);
    int64_t dl_b = other_dead_letter(c, 2, &ev_b);
    snprintf(arg, sizeof(arg), "%lld,%lld", (long long)dl_a, (long long)dl_b);
    step(c, "bulk-replay", arg);
    expect_status(c, ev_a, "PENDING", "after Replay selected the first event is not PENDING");
    expect_status(c, ev_b, "PENDING", "after Replay selected the second event is not PENDING");

    step(c, "retry", saga_id);
    struct txo_param p[] = {txo_p_str(saga_id)};
    char *status = testdb_str(c->hc.t.db, "SELECT status FROM saga_instances WHERE id = ?", p, 1);
    assert_non_null(status);
    if (strcmp(status, "COMPENSATED") != 0) {
        print_message("saga %s is %s\n", saga_id, status);
        txo_free(status);
        fail_with_logs(c, "after Retry on the page, the saga is not COMPENSATED");
    }
    txo_free(status);

    /* The processes: serve itself, then a relay and a worker. */
    step(c, "alive", "serve");
    static const char *const relay[] = {"relay", "--publisher", "null", NULL};
    static const char *const worker[] = {"worker", "--broker", "none", NULL};
    start_daemon(c, P_RELAY, "ui_relay", relay);
    start_daemon(c, P_WORKER, "ui_worker", worker);
    step(c, "alive", "relay");
    step(c, "alive", "worker");
    if (!testproc_stop(&c->procs[P_RELAY], 10000))
        fail_with_logs(c, "txo relay did not stop cleanly");
    step(c, "gone", "relay");
    /* A worker that dies keeps its row; once its heartbeat is old it is shown as stale. */
    testproc_signal(&c->procs[P_WORKER], SIGKILL);
    assert_true(testproc_wait(&c->procs[P_WORKER], 10000));
    testdb_exec(c->hc.t.db, "UPDATE txo_processes SET heartbeat_at = NOW(6) - INTERVAL 60 SECOND "
                            "WHERE role = 'worker'");
    step(c, "stale", "worker");

    /* One event backing off, every other one published (the relay above published some of
     * them already): nothing is due, one waits. */
    testdb_exec(c->hc.t.db,
                "UPDATE outbox_events SET status = 'PUBLISHED', published_time = NOW(6) "
                "WHERE status = 'PENDING' AND idempotency_key <> 'ui-backlog-1'");
    testdb_exec(c->hc.t.db,
                "UPDATE outbox_events SET status = 'PENDING', published_time = '1970-01-01', "
                "next_attempt_at = NOW(6) + INTERVAL 1 HOUR, attempts = 3 "
                "WHERE idempotency_key = 'ui-backlog-1'");
    step(c, "backoff", "90");
    step(c, "artifact", "ui_dashboard.png");
    char shot[128];
    snprintf(shot, sizeof(shot), "ui_dashboard_saga.png,#/saga/%s", saga_id);
    step(c, "artifact", shot);
    snprintf(shot, sizeof(shot), "ui_dashboard_order.png,#/record/order/%lld", (long long)order);
    step(c, "artifact", shot);
    /* The API stops cleanly (under a sanitizer: no leak in the routes the page used). */
    if (!testproc_stop(&c->procs[P_SERVE], 10000))
        fail_with_logs(c, "txo serve did not stop cleanly");

    for (int i = 0; i < N_PROCS; i++)
        testproc_remove_log(&c->procs[i]);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dashboard_in_chromium, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
