/*
 * Test support: HTTP against a real `txo` daemon, for the end-to-end tests of the order API
 * (test_api.c, test_api_admin.c) and anything else that reads /metrics.
 *
 *   requests   testhttp_do() sends one request with libcurl on a caller-owned CURL handle to
 *              http://127.0.0.1:<port><path> and fills a struct testhttp_reply with the status,
 *              the body and the headers the tests look at (Content-Type, Retry-After). It
 *              never fails the test: a transport failure (refused, reset, the server died
 *              inside the request) is status 0 with the curl code in cc, so crash tests can
 *              assert on it.
 *   checks     testhttp_expect_*() fail the test with the status, curl error and body when an
 *              answer is not what the API promises (a status, the JSON error shape
 *              {"error": code, "message": text}, the order-created shape).
 *   metrics    testhttp_metric_value() reads one sample from Prometheus text.
 *   daemons    testhttp_txo_start() starts `txo <subcommand> --listen 127.0.0.1:<free port>` and
 *              waits for GET /healthz; testhttp_txo_stop() SIGTERMs it and requires exit 0 (a
 *              sanitizer report makes the exit status non-zero). Both print the child's log
 *              before failing.
 *
 * Like the other support modules, every helper that can meet a setup error or a wrong answer
 * fails the current cmocka test (fail_msg), so callers need no error handling.
 *
 * Thread-safety: testhttp_do() and the helpers built on it may run in several threads at once,
 * each with its own CURL handle and reply (the concurrency tests do). curl_global_init() must
 * have been called by the test program before any thread starts. The expect_* helpers fail
 * the test, which cmocka only supports on the test's own thread.
 */
#ifndef TXO_TESTHTTP_H
#define TXO_TESTHTTP_H

#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <jansson.h>

#include "testdb.h"
#include "testproc.h"

struct CMUnitTest; /* <cmocka.h> */

/*
 * One HTTP answer. A zeroed struct is a valid empty reply; every testhttp_do() on it releases
 * what it held before, so one reply can be reused across requests. Release with
 * testhttp_reply_release().
 */
struct testhttp_reply {
    long status;            /* 0: no HTTP answer (connection refused, closed, ...) */
    CURLcode cc;            /* the transfer's result; CURLE_OK when an answer arrived */
    char *body;             /* malloc'd, NUL-terminated, "" when empty; NULL only unfilled */
    size_t len;             /* bytes in body, without the NUL */
    char content_type[128]; /* "" when the answer had none */
    long retry_after_s;     /* -1: no Retry-After header */
    double total_s;         /* duration of the transfer, seconds */
};

/* Frees r->body and sets r to "no answer" (status 0, retry_after_s -1). Safe to call twice. */
void testhttp_reply_release(struct testhttp_reply *r);

/*
 * One request on h to http://127.0.0.1:port<path>. method is sent as is ("GET", "POST",
 * "DELETE", ...). headers is NULL or a NULL-terminated list of "Name: value" (a NULL entry
 * ends the list early, so an optional header can be left out by setting it to NULL). body
 * NULL sends none; otherwise len bytes of it are sent. Timeout 30 s; no signals are used.
 * What r held before is released first. Never fails the test: a transport failure is
 * r->status 0 with r->cc set, and r->body is "" then. h is reset before use, but its
 * connection cache is kept, so consecutive calls reuse one kept-alive connection.
 */
void testhttp_do(CURL *h, const char *method, unsigned port, const char *path,
                 const char *const *headers, const char *body, size_t len,
                 struct testhttp_reply *r);

/* GET path, no headers: testhttp_do(h, "GET", port, path, NULL, NULL, 0, r). */
void testhttp_get(CURL *h, unsigned port, const char *path, struct testhttp_reply *r);

/*
 * POST /orders with body (a NUL-terminated string) and Content-Type: application/json; key is
 * sent as Idempotency-Key, NULL sends no such header. Like testhttp_do, never fails the test.
 */
void testhttp_post_order(CURL *h, unsigned port, const char *key, const char *body,
                         struct testhttp_reply *r);

/* r's body parsed as JSON; the caller owns it (json_decref). Fails the test when it is not
 * JSON, printing the status and the body. */
json_t *testhttp_json(const struct testhttp_reply *r);

/* Fails the test unless r->status is status; the message names what, the curl error and the
 * body. */
void testhttp_expect_status(const struct testhttp_reply *r, long status, const char *what);

/*
 * Fails the test unless r is an API error: status, Content-Type application/json and a body
 * {"error": code, "message": "<non-empty, containing msg_has>"} (msg_has NULL: any message).
 */
void testhttp_expect_error(const struct testhttp_reply *r, long status, const char *code,
                           const char *msg_has, const char *what);

/*
 * Fails the test unless r is the answer to an accepted order: status (201, or 202 in async
 * mode) and exactly {"order_id": N > 0, "status": "CREATED"}. Returns N.
 */
int64_t testhttp_expect_created(const struct testhttp_reply *r, long status, const char *what);

/*
 * The value of the sample `series` in Prometheus text (a /metrics body): the first line that
 * is exactly `series` followed by a space, where series is a name with its labels exactly as
 * rendered ("txo_inbox_duplicates_total", "txo_sagas{status=\"RUNNING\"}"). Returns -1 when no
 * line matches (text NULL included). Pure; never fails the test.
 */
double testhttp_metric_value(const char *text, const char *series);

/*
 * Fails the test, with promtool's output and the text, unless `promtool check metrics` accepts
 * the len bytes of Prometheus text (a /metrics body). promtool is a required test dependency.
 */
void testhttp_expect_promtool_valid(const char *text, size_t len);

/*
 * Starts `txo <subcommand> --listen 127.0.0.1:<free port> args...` in p (args NULL or a
 * NULL-terminated list of at most 19 more arguments, borrowed until this returns; more fail
 * the test) with its log named after tag, and waits up to 10 s until GET /healthz answers 200.
 * Returns the port. On timeout prints the child's log and fails the test, leaving p running
 * (the caller's teardown SIGKILLs it with testproc_stop_hard).
 */
unsigned testhttp_txo_start(struct testproc *p, const char *tag, const char *subcommand,
                            const char *const *args);

/*
 * SIGTERM to p; it must exit with status 0 within 5 s. Otherwise (a hang is ended with
 * SIGKILL) prints p's log under the name what and fails the test with the wait status.
 */
void testhttp_txo_stop(struct testproc *p, const char *what);

/*
 * The fixture of a test of one txo process: the test's database, first so that
 * testdb_fixture_new(sizeof(struct testhttp_daemon), ...) makes it, and the process the test
 * started in srv; port is where it listens when it is a daemon (testhttp_txo_start()).
 */
struct testhttp_daemon {
    struct testdb t;
    struct testproc srv;
    unsigned port;
};

/*
 * A cmocka teardown for a struct testhttp_daemon made so: SIGKILLs the daemon if it still runs
 * (a test that failed), then frees the fixture and its database. Returns 0.
 */
int testhttp_daemon_free_state(void **state);

/*
 * The fixture of the order-API tests (test_api.c, test_api_admin.c, test_api_group.c): the
 * test's database first (testdb_fixture_new), with the SKUs of testorders_stock_abc() in stock,
 * the test's keep-alive HTTP client, and what a test leaves for the teardown to release when it
 * fails: the txo processes it started, its answers and its second connections.
 */
struct testhttp_api {
    struct testdb t;
    CURL *h;
    struct testproc procs[3];     /* servers and workers; SIGKILLed by the teardown */
    struct testhttp_reply rep[3]; /* the test's answers */
    struct testhttp_reply *many;  /* malloc'd answers of a concurrent test, n_many of them */
    size_t n_many;
    struct txo_db *hold[2]; /* connections holding rows locked; NULL when unused */
};

/*
 * Makes a struct testhttp_api with its database tagged tag and exported to child processes
 * (TESTDB_NEW_EXPORT_ENV), stock units of each SKU. The caller frees it with
 * testhttp_api_free_state(). Fails the test on error.
 */
struct testhttp_api *testhttp_api_new(const char *tag, int32_t stock);

/* A cmocka teardown for a struct testhttp_api: releases everything in it and it. Returns 0. */
int testhttp_api_free_state(void **state);

/*
 * A second connection to t's database that holds key as a request in progress would: in a
 * transaction it leaves open, the key's row PROCESSING with the request hash of POST /orders
 * with body. The caller owns the connection (txo_db_close, or ROLLBACK / COMMIT first). Fails
 * the test on error.
 */
struct txo_db *testhttp_hold_order_key(struct testdb *t, const char *key, const char *body);

/*
 * testrun_each() (testrun.h) between curl_global_init() and curl_global_cleanup(), for a test
 * program that uses libcurl, which wants its global set-up before any thread starts. Returns
 * what testrun_each returns, or 1 when libcurl cannot be set up.
 */
int testhttp_run_each(const struct CMUnitTest *tests, size_t n, int (*setup)(void **),
                      int (*teardown)(void **), int (*group_setup)(void **),
                      int (*group_teardown)(void **));

#endif
