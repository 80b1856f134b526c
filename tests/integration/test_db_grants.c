/*
 * The grants of docs/database.md are enough, and every one of them is needed by something
 * this test runs: on a MariaDB server of its own (testserver.h) it runs the SQL between the
 * doc's markers as root, migrates as txo_migrate, then runs `txo serve --async` as txo_api,
 * `txo worker --broker none` as txo_worker and `txo relay --publisher nats` (a private
 * nats-server) as txo_relay, places an order and waits until it is CONFIRMED with every outbox
 * event PUBLISHED, scrapes every daemon's /metrics, fails on any "command denied" in their logs,
 * and last runs `txo audit --outbox` as txo_audit, which must find the outbox and the stream
 * in agreement. A missing grant shows up as a daemon that cannot do its job or logs the
 * denial.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testdb.h"
#include "testhttp.h"
#include "testnats.h"
#include "testproc.h"
#include "testserver.h"

enum { P_API, P_WORKER, P_RELAY, N_PROCS };
static const char *const proc_names[N_PROCS] = {"txo serve", "txo worker", "txo relay"};

struct ctx {
    struct testserver server;
    struct testnats nats;
    char nats_url[300]; /* "--nats-url=..." */
    struct testproc procs[N_PROCS];
    struct txo_db *root_view; /* app (ALL on *.*) on appdb: checks only */
    CURL *h;
    struct testhttp_reply r;
};

/* The lines between "<!-- NAME:begin -->" and "<!-- NAME:end -->" of docs/database.md, without
 * the Markdown fences. malloc'd; free(). */
static char *doc_block(const char *name)
{
    const char *path = testserver_source_path("docs/database.md");
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s", path);
    char begin[64], end[64], line[512];
    snprintf(begin, sizeof(begin), "<!-- %s:begin -->", name);
    snprintf(end, sizeof(end), "<!-- %s:end -->", name);
    size_t cap = 16384, len = 0;
    char *out = calloc(1, cap);
    assert_non_null(out);
    bool in = false, found = false;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, begin, strlen(begin)) == 0) {
            in = true;
            continue;
        }
        if (strncmp(line, end, strlen(end)) == 0) {
            found = in;
            break;
        }
        if (!in || strncmp(line, "```", 3) == 0)
            continue;
        size_t n = strlen(line);
        assert_true(len + n < cap);
        memcpy(out + len, line, n + 1);
        len += n;
    }
    fclose(f);
    if (!found || len == 0)
        fail_msg("no %s ... %s block in %s", begin, end, path);
    return out;
}

static void run_doc_block(struct ctx *c, const char *name)
{
    char *sql = doc_block(name);
    testserver_sql(&c->server, sql);
    free(sql);
}

static void set_account(const char *user, const char *password)
{
    setenv("MYSQL_USER", user, 1);
    setenv("MYSQL_PASSWORD", password, 1);
}

static int setup(void **state)
{
    struct ctx *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    testserver_start(&c->server, TESTSERVER_PLAIN);
    testnats_start(&c->nats);
    snprintf(c->nats_url, sizeof(c->nats_url), "--nats-url=%s", c->nats.url);
    struct txo_db_opts opts;
    testserver_opts(&c->server, &opts);
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_open(&opts, &c->root_view, &err) < 0)
        fail_msg("connect as app: %s", err.msg);
    c->h = curl_easy_init();
    assert_non_null(c->h);
    char port[16];
    snprintf(port, sizeof(port), "%u", c->server.port);
    setenv("MYSQL_HOST", "127.0.0.1", 1);
    setenv("MYSQL_PORT", port, 1);
    setenv("MYSQL_DATABASE", "appdb", 1);
    unsetenv("MYSQL_SOCKET");
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    for (int i = 0; i < N_PROCS; i++)
        testproc_stop_hard(&c->procs[i]);
    testhttp_reply_release(&c->r);
    curl_easy_cleanup(c->h);
    txo_db_close(c->root_view);
    testserver_stop(&c->server);
    testnats_cleanup(&c->nats);
    free(c);
    return 0;
}

static void fail_with_logs(struct ctx *c, const char *what)
{
    for (int i = 0; i < N_PROCS; i++)
        if (c->procs[i].log_path[0])
            testproc_print_log(&c->procs[i], proc_names[i]);
    fail_msg("%s", what);
}

/* The first daemon whose log has a privilege error ("command denied to user"), or -1. */
static int denied_proc(struct ctx *c)
{
    for (int i = 0; i < N_PROCS; i++) {
        char *log = c->procs[i].log_path[0] ? testproc_log(&c->procs[i]) : NULL;
        bool denied = log && strstr(log, "denied");
        free(log);
        if (denied)
            return i;
    }
    return -1;
}

/* GET /metrics on port must answer 200 (its collectors read the tables the account sees). */
static void scrape(struct ctx *c, unsigned port, const char *what)
{
    testhttp_get(c->h, port, "/metrics", &c->r);
    if (c->r.status != 200)
        fail_with_logs(c, what);
}

static void test_documented_grants_run_the_pipeline(void **state)
{
    struct ctx *c = *state;
    run_doc_block(c, "migrate-grants");
    set_account("txo_migrate", "migrate-secret");
    struct testproc migrate;
    const char *margv[] = {testproc_txo_bin(), "migrate", NULL};
    testproc_start(&migrate, "grants_migrate", margv, NULL);
    if (!testproc_wait(&migrate, 60000) || !testproc_exited_with(&migrate, 0)) {
        testproc_print_log(&migrate, "txo migrate");
        testproc_stop_hard(&migrate);
        fail_msg("txo migrate as txo_migrate failed");
    }
    testproc_remove_log(&migrate);
    run_doc_block(c, "grants");
    testserver_sql(&c->server, "INSERT INTO appdb.inventory (sku, available) VALUES ('pen', 10);");

    set_account("txo_api", "api-secret");
    static const char *const api_args[] = {"--async", NULL};
    unsigned api_port = testhttp_txo_start(&c->procs[P_API], "grants_api", "serve", api_args);

    unsigned worker_port = testproc_free_port();
    char worker_listen[64];
    snprintf(worker_listen, sizeof(worker_listen), "127.0.0.1:%u", worker_port);
    set_account("txo_worker", "worker-secret");
    const char *wargv[] = {testproc_txo_bin(), "worker",      "--broker", "none", "--poll", "50",
                           "--metrics-listen", worker_listen, NULL};
    testproc_start(&c->procs[P_WORKER], "grants_worker", wargv, NULL);

    unsigned relay_port = testproc_free_port();
    char relay_listen[64];
    snprintf(relay_listen, sizeof(relay_listen), "127.0.0.1:%u", relay_port);
    set_account("txo_relay", "relay-secret");
    const char *rargv[] = {testproc_txo_bin(), "relay",      "--publisher", "nats", c->nats_url,
                           "--metrics-listen", relay_listen, NULL};
    testproc_start(&c->procs[P_RELAY], "grants_relay", rargv, NULL);
    set_account("app", "secret");

    testhttp_post_order(c->h, api_port, "grants-1",
                        "{\"customer_id\":7,\"items\":[{\"sku\":\"pen\",\"qty\":2,"
                        "\"price_cents\":250}]}",
                        &c->r);
    if (c->r.status != 202)
        fail_with_logs(c, "POST /orders as txo_api did not answer 202");
    int64_t id = testhttp_expect_created(&c->r, 202, "async POST as txo_api");

    char sql[512];
    snprintf(sql, sizeof(sql),
             "SELECT (SELECT status = 'CONFIRMED' FROM orders WHERE id = %lld)"
             " AND (SELECT COUNT(*) FROM outbox_events) > 1"
             " AND (SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED') = 0"
             " AND (SELECT COUNT(*) FROM command_queue WHERE status <> 'DONE') = 0",
             (long long)id);
    int64_t t0 = txo_monotonic_ms();
    while (testdb_q(c->root_view, sql) != 1) {
        if (denied_proc(c) >= 0)
            fail_with_logs(c, "a daemon was denied a privilege before the order was CONFIRMED");
        if (txo_monotonic_ms() - t0 > 30000)
            fail_with_logs(c, "the order was not CONFIRMED with every event PUBLISHED in 30 s");
        txo_sleep_ms(100);
    }
    assert_int_equal(testdb_q(c->root_view, "SELECT reserved FROM inventory WHERE sku = 'pen'"), 2);

    snprintf(sql, sizeof(sql), "/orders/%lld", (long long)id);
    testhttp_get(c->h, api_port, sql, &c->r);
    testhttp_expect_status(&c->r, 200, "GET /orders/{id} as txo_api");
    scrape(c, api_port, "GET /metrics of txo serve");
    if (!testproc_wait_http(worker_port, "/metrics", 10000))
        fail_with_logs(c, "GET /metrics of txo worker");
    if (!testproc_wait_http(relay_port, "/metrics", 10000))
        fail_with_logs(c, "GET /metrics of txo relay");
    /* The collectors run on a timer too: give them a round before reading the logs. */
    txo_sleep_ms(1500);
    scrape(c, api_port, "GET /metrics of txo serve");

    for (int i = 0; i < N_PROCS; i++) {
        char *log = testproc_log(&c->procs[i]);
        bool denied = log && (strstr(log, "denied") || strstr(log, "level=error"));
        free(log);
        if (denied) {
            char what[96];
            snprintf(what, sizeof(what), "%s logged a denial or an error", proc_names[i]);
            fail_with_logs(c, what);
        }
    }
    /* The outbox auditor reads outbox_events and nothing else. */
    set_account("txo_audit", "audit-secret");
    const char *aargs[] = {"audit", "--outbox", "--publisher", "nats", c->nats_url, NULL};
    char *out = NULL;
    int rc = testproc_run_txo("grants_audit", aargs, 60000, &out);
    set_account("app", "secret");
    if (rc != 0 || strstr(out, "denied") != NULL || strstr(out, "result=clean") == NULL)
        fail_msg("txo audit --outbox as txo_audit exited %d:\n%s", rc, out);
    free(out);

    for (int i = 0; i < N_PROCS; i++) {
        if (!testproc_stop(&c->procs[i], 10000))
            fail_with_logs(c, "a daemon did not stop cleanly");
        testproc_remove_log(&c->procs[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_documented_grants_run_the_pipeline, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
