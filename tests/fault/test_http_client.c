/*
 * The HTTP client (include/txo/http_client.h) against real servers, and the fake payment
 * and shipment service txo-fake-services it is meant to talk to.
 *
 * Each fake-service test starts `$TXO_FAKE_BIN --listen 127.0.0.1:0` as a child process,
 * reads the URL it prints, waits for /healthz, and at the end stops it with SIGTERM and
 * requires exit status 0 (a sanitizer report in the child fails the test that way).
 *
 * What is asserted: a charge is 201 and the same Idempotency-Key gets the same payment_id with
 * one charge for two requests (/stats); an injected failure is TXO_EUNAVAILABLE with status 503
 * and no effect; a decline is TXO_EBUSINESS (and stays the stored answer); a hanging service
 * ends the call at timeout_ms with TXO_ETIMEOUT (the building block of a hanging-service test); a
 * closed port is TXO_EUNAVAILABLE at once; 100 calls use one connection; start-up flags and
 * environment variables; shutdown while a call hangs. An in-process server answering any status
 * checks the whole status-to-code table, the headers sent, the response size limit and that a URL's
 * password never reaches an error message.
 *
 * Batches (txo_http_post_json_many): 20 POSTs to a service that takes 300 ms each end in well
 * under 20 x 300 ms, each key charged once, and a second batch reuses the 20 connections; one
 * batch with a 2xx, a 402, a 422, a 503, a hang, a closed port and bad input maps each request
 * as a single call would, sends only the valid ones and ends at timeout_ms; max_parallel 2 never
 * has more than 2 requests at the server at once.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "testproc.h"
#include "testrun.h"
#include "testraw.h"
#include "txo/http_client.h"
#include "txo/txo.h"

/* ---- the fake service process ---- */

struct fake_proc {
    pid_t pid;
    char url[128];
    char err_path[256];
};

/* Waits up to timeout_ms for pid; returns its wait status, or -1 when it is still running. */
static int wait_pid_ms(pid_t pid, int64_t timeout_ms)
{
    int64_t deadline = txo_monotonic_ms() + timeout_ms;
    for (;;) {
        int status = 0;
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid)
            return status;
        assert_true(got == 0);
        if (txo_monotonic_ms() > deadline)
            return -1;
        txo_sleep_ms(10);
    }
}

static struct txo_http_client *new_client(int64_t timeout_ms)
{
    struct txo_http_client_opts o;
    txo_http_client_opts_init(&o);
    o.timeout_ms = timeout_ms;
    o.user_agent = "txo-test";
    struct txo_http_client *c = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_http_client_new(&o, &c, &err) < 0)
        fail_msg("txo_http_client_new: %s", err.msg);
    return c;
}

/*
 * Runs `$TXO_FAKE_BIN --listen 127.0.0.1:0 args...`, reads its URL from stdout and
 * waits until /healthz answers. Returns the exit status when the process ended instead (with
 * expect_exit), else 0.
 */
static int fake_spawn(struct fake_proc *sp, const char *const *args, bool expect_exit)
{
    const char *bin = getenv("TXO_FAKE_BIN");
    if (bin == NULL || bin[0] == '\0')
        fail_msg("TXO_FAKE_BIN is not set (run through ctest)");
    memset(sp, 0, sizeof(*sp));
    const char *dir = getenv("TMPDIR");
    static unsigned counter;
    snprintf(sp->err_path, sizeof(sp->err_path), "%s/txo_fake_%ld_%u.err",
             dir != NULL && *dir ? dir : "/tmp", (long)getpid(), counter++);

    char *argv[24];
    size_t n = 0;
    argv[n++] = (char *)bin;
    argv[n++] = (char *)"--listen";
    argv[n++] = (char *)"127.0.0.1:0";
    for (size_t i = 0; args != NULL && args[i] != NULL && n < 23; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;

    int out[2];
    assert_int_equal(pipe(out), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int err = open(sp->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (err < 0 || dup2(out[1], 1) < 0 || dup2(err, 2) < 0)
            _exit(127);
        close(out[0]);
        execv(bin, argv);
        _exit(127);
    }
    close(out[1]);
    sp->pid = pid;

    /* The first line on stdout is the URL. */
    size_t len = 0;
    int64_t deadline = txo_monotonic_ms() + 15000;
    while (len + 1 < sizeof(sp->url)) {
        struct pollfd pfd = {.fd = out[0], .events = POLLIN};
        int64_t left = deadline - txo_monotonic_ms();
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            break;
        char ch;
        ssize_t got = read(out[0], &ch, 1);
        if (got <= 0 || ch == '\n')
            break;
        sp->url[len++] = ch;
    }
    sp->url[len] = '\0';
    close(out[0]);
    if (strncmp(sp->url, "http://", 7) != 0) {
        int status = wait_pid_ms(pid, 5000);
        if (expect_exit && status != -1) {
            unlink(sp->err_path);
            return status;
        }
        testproc_print_file(sp->err_path, "  | ");
        if (status == -1) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        fail_msg("txo-fake-services printed no URL, status 0x%x", status);
    }
    if (expect_exit)
        fail_msg("txo-fake-services started although it should have refused its settings");

    struct txo_http_client *c = new_client(1000);
    char health[160];
    snprintf(health, sizeof(health), "%s/healthz", sp->url);
    struct txo_error err;
    txo_error_init(&err);
    int rc = -1;
    for (int i = 0; i < 100 && rc != 0; i++) {
        rc = txo_http_get(c, health, NULL, NULL, &err);
        if (rc != 0)
            txo_sleep_ms(50);
    }
    txo_http_client_free(c);
    if (rc != 0)
        fail_msg("txo-fake-services at %s never became healthy: %s", sp->url, err.msg);
    return 0;
}

static void fake_start(struct fake_proc *sp, const char *const *args)
{
    (void)fake_spawn(sp, args, false);
}

/* SIGTERM, then requires a clean exit 0 within 5 s. */
static void fake_stop(struct fake_proc *sp)
{
    if (sp->pid <= 0)
        return;
    assert_int_equal(kill(sp->pid, SIGTERM), 0);
    int status = wait_pid_ms(sp->pid, 5000);
    if (status == -1) {
        kill(sp->pid, SIGKILL);
        waitpid(sp->pid, NULL, 0);
    }
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        testproc_print_file(sp->err_path, "  | ");
        fail_msg("txo-fake-services did not exit 0 on SIGTERM (status 0x%x)", status);
    }
    sp->pid = 0;
    unlink(sp->err_path);
}

static int setup_fake(void **state)
{
    struct fake_proc *sp = txo_calloc(1, sizeof(*sp));
    fake_start(sp, NULL);
    *state = sp;
    return 0;
}

static int teardown_fake(void **state)
{
    struct fake_proc *sp = *state;
    fake_stop(sp);
    txo_free(sp);
    return 0;
}

/* ---- calls ---- */

static void url_of(const struct fake_proc *sp, const char *path, char *out, size_t cap)
{
    snprintf(out, cap, "%s%s", sp->url, path);
}

static int post(struct txo_http_client *c, const struct fake_proc *sp, const char *path,
                const char *key, const char *body, struct txo_http_client_response *resp,
                struct txo_error *err)
{
    char url[256];
    url_of(sp, path, url, sizeof(url));
    txo_error_init(err);
    return txo_http_post_json(c, url, key, NULL, body, strlen(body), resp, err);
}

/* Parses a response body as a JSON object (fails the test otherwise). */
static json_t *body_json(const struct txo_http_client_response *resp)
{
    json_error_t jerr;
    json_t *v = json_loadb(resp->body != NULL ? resp->body : "", resp->body_len, 0, &jerr);
    if (!json_is_object(v))
        fail_msg("response body is not a JSON object: %s", resp->body ? resp->body : "(empty)");
    return v;
}

static const char *str_field(json_t *obj, const char *key)
{
    const char *v = json_string_value(json_object_get(obj, key));
    if (v == NULL)
        fail_msg("no string field \"%s\"", key);
    return v;
}

static void control(const struct fake_proc *sp, const char *json)
{
    struct txo_http_client *c = new_client(5000);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    int rc = post(c, sp, "/control", NULL, json, &resp, &err);
    if (rc != 0)
        fail_msg("POST /control %s: %s", json, err.msg);
    txo_http_client_response_release(&resp);
    txo_http_client_free(c);
}

/* One counter of GET /stats (with ?order_id=N: of the order when field starts "order."). */
static int64_t stat_of(const struct fake_proc *sp, const char *field)
{
    struct txo_http_client *c = new_client(5000);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    txo_error_init(&err);
    char url[256];
    url_of(sp, "/stats", url, sizeof(url));
    if (txo_http_get(c, url, NULL, &resp, &err) != 0)
        fail_msg("GET /stats: %s", err.msg);
    json_t *v = body_json(&resp);
    json_t *f = json_object_get(v, field);
    if (!json_is_integer(f))
        fail_msg("/stats has no \"%s\": %s", field, resp.body);
    int64_t n = json_integer_value(f);
    json_decref(v);
    txo_http_client_response_release(&resp);
    txo_http_client_free(c);
    return n;
}

/* ---- the fake service's contract ---- */

static void test_charge_is_idempotent(void **state)
{
    struct fake_proc *sp = *state;
    struct txo_http_client *c = new_client(5000);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    const char *body = "{\"order_id\":42,\"amount_cents\":100000}";

    assert_int_equal(post(c, sp, "/payments/charge", "order:42:charge", body, &resp, &err), 0);
    assert_int_equal(resp.status, 201);
    assert_true(resp.total_s > 0.0);
    json_t *first = body_json(&resp);
    assert_string_equal(str_field(first, "status"), "CHARGED");
    char payment_id[64];
    snprintf(payment_id, sizeof(payment_id), "%s", str_field(first, "payment_id"));
    json_decref(first);

    /* The retry with the same key: same answer, no second charge. */
    assert_int_equal(post(c, sp, "/payments/charge", "order:42:charge", body, &resp, &err), 0);
    assert_int_equal(resp.status, 201);
    json_t *second = body_json(&resp);
    assert_string_equal(str_field(second, "payment_id"), payment_id);
    json_decref(second);
    assert_int_equal(stat_of(sp, "charges"), 1);
    assert_int_equal(stat_of(sp, "charge_requests"), 2);
    assert_int_equal(stat_of(sp, "replays"), 1);

    /* The same key with a different request is refused: a permanent error. */
    assert_int_equal(post(c, sp, "/payments/charge", "order:42:charge",
                          "{\"order_id\":42,\"amount_cents\":1}", &resp, &err),
                     TXO_EBUSINESS);
    assert_int_equal(resp.status, 422);
    assert_int_equal(err.code, TXO_EBUSINESS);
    assert_non_null(strstr(err.msg, "HTTP 422"));
    assert_non_null(strstr(err.msg, "reused"));
    assert_false(txo_err_is_transient(err.code));

    /* Another key is another charge: that is what the key is for. */
    assert_int_equal(post(c, sp, "/payments/charge", "order:42:charge:again", body, &resp, &err),
                     0);
    json_t *third = body_json(&resp);
    assert_string_not_equal(str_field(third, "payment_id"), payment_id);
    json_decref(third);
    assert_int_equal(stat_of(sp, "charges"), 2);

    /* The request is checked: no key, bad JSON, a wrong field, an unknown path. */
    assert_int_equal(post(c, sp, "/payments/charge", NULL, body, &resp, &err), TXO_EBUSINESS);
    assert_int_equal(resp.status, 400);
    json_t *e = body_json(&resp);
    assert_non_null(strstr(str_field(e, "error"), "Idempotency-Key"));
    json_decref(e);
    assert_int_equal(post(c, sp, "/payments/charge", "k-bad", "{\"order_id\":", &resp, &err),
                     TXO_EBUSINESS);
    assert_int_equal(resp.status, 400);
    e = body_json(&resp);
    assert_non_null(strstr(str_field(e, "error"), "bad JSON"));
    json_decref(e);
    assert_int_equal(post(c, sp, "/payments/charge", "k-bad", "{\"order_id\":\"x\"}", &resp, &err),
                     TXO_EBUSINESS);
    assert_int_equal(resp.status, 400);
    assert_int_equal(post(c, sp, "/payments/nope", "k", "{}", &resp, &err), TXO_EBUSINESS);
    assert_int_equal(resp.status, 404);
    assert_int_equal(stat_of(sp, "charges"), 2);

    txo_http_client_response_release(&resp);
    txo_http_client_free(c);
}

static void test_refund_and_shipments(void **state)
{
    struct fake_proc *sp = *state;
    struct txo_http_client *c = new_client(5000);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    const char *order = "{\"order_id\":7}";

    assert_int_equal(post(c, sp, "/shipments/create", "order:7:ship", order, &resp, &err), 0);
    assert_int_equal(resp.status, 201);
    json_t *v = body_json(&resp);
    assert_string_equal(str_field(v, "status"), "CREATED");
    assert_non_null(strstr(str_field(v, "shipment_id"), "shp_"));
    json_decref(v);
    assert_int_equal(post(c, sp, "/shipments/cancel", "order:7:cancel", order, &resp, &err), 0);
    assert_int_equal(resp.status, 200);
    /* Refunds and cancellations are idempotent per order, whatever the key. */
    assert_int_equal(post(c, sp, "/payments/refund", "order:7:refund", order, &resp, &err), 0);
    assert_int_equal(resp.status, 200);
    v = body_json(&resp);
    assert_string_equal(str_field(v, "status"), "REFUNDED");
    json_decref(v);
    assert_int_equal(post(c, sp, "/payments/refund", "order:7:refund:2", order, &resp, &err), 0);
    assert_int_equal(post(c, sp, "/shipments/cancel", "order:7:cancel:2", order, &resp, &err), 0);
    assert_int_equal(stat_of(sp, "refunds"), 1);
    assert_int_equal(stat_of(sp, "refund_requests"), 2);
    assert_int_equal(stat_of(sp, "cancels"), 1);
    assert_int_equal(stat_of(sp, "cancel_requests"), 2);
    assert_int_equal(stat_of(sp, "shipments"), 1);

    /* A refused shipment is a business error, stored under its key. */
    control(sp, "{\"ship_decline_rate\":1}");
    assert_int_equal(
        post(c, sp, "/shipments/create", "order:8:ship", "{\"order_id\":8}", &resp, &err),
        TXO_EBUSINESS);
    assert_int_equal(resp.status, 422);
    assert_int_equal(stat_of(sp, "shipment_declines"), 1);
    assert_int_equal(stat_of(sp, "shipments"), 1);

    /* Per-order view. */
    char url[256];
    url_of(sp, "/stats?order_id=7", url, sizeof(url));
    txo_error_init(&err);
    assert_int_equal(txo_http_get(c, url, NULL, &resp, &err), 0);
    v = body_json(&resp);
    json_t *o = json_object_get(v, "order");
    assert_int_equal(json_integer_value(json_object_get(o, "refunds")), 1);
    assert_int_equal(json_integer_value(json_object_get(o, "shipments")), 1);
    assert_int_equal(json_integer_value(json_object_get(o, "cancels")), 1);
    assert_int_equal(json_integer_value(json_object_get(o, "charges")), 0);
    json_decref(v);

    /* Bad control input is refused and changes nothing. */
    assert_int_equal(post(c, sp, "/control", NULL, "{\"fail_rate\":2}", &resp, &err),
                     TXO_EBUSINESS);
    assert_int_equal(resp.status, 400);
    assert_int_equal(post(c, sp, "/control", NULL, "{\"fail_rat\":0}", &resp, &err), TXO_EBUSINESS);
    url_of(sp, "/control", url, sizeof(url));
    assert_int_equal(txo_http_get(c, url, NULL, &resp, &err), 0);
    v = body_json(&resp);
    assert_true(json_real_value(json_object_get(v, "fail_rate")) == 0.0);
    assert_true(json_real_value(json_object_get(v, "ship_decline_rate")) == 1.0);
    json_decref(v);

    /* reset clears effects and stored keys. */
    control(sp, "{\"reset\":true,\"ship_decline_rate\":0}");
    assert_int_equal(stat_of(sp, "shipments"), 0);
    assert_int_equal(
        post(c, sp, "/shipments/create", "order:8:ship", "{\"order_id\":8}", &resp, &err), 0);
    assert_int_equal(resp.status, 201);

    txo_http_client_response_release(&resp);
    txo_http_client_free(c);
}

static void test_failure_is_unavailable_without_effect(void **state)
{
    struct fake_proc *sp = *state;
    struct txo_http_client *c = new_client(5000);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    const char *body = "{\"order_id\":9,\"amount_cents\":500}";

    control(sp, "{\"fail_rate\":1}");
    for (int i = 0; i < 3; i++) {
        int rc = post(c, sp, "/payments/charge", "order:9:charge", body, &resp, &err);
        assert_int_equal(rc, TXO_EUNAVAILABLE);
        assert_true(txo_err_is_transient(rc));
        assert_int_equal(resp.status, 503);
        assert_non_null(resp.body);
        assert_non_null(strstr(resp.body, "injected failure"));
        assert_non_null(strstr(err.msg, "POST http://127.0.0.1:"));
        assert_non_null(strstr(err.msg, "/payments/charge: HTTP 503: {\"error\":"));
    }
    assert_int_equal(stat_of(sp, "charges"), 0);
    assert_int_equal(stat_of(sp, "failures_injected"), 3);

    /* The service recovers: the retry with the same key charges once. */
    control(sp, "{\"fail_rate\":0}");
    assert_int_equal(post(c, sp, "/payments/charge", "order:9:charge", body, &resp, &err), 0);
    assert_int_equal(resp.status, 201);
    assert_int_equal(stat_of(sp, "charges"), 1);

    /* A failure limited to one endpoint leaves the others alone. */
    control(sp, "{\"fail_rate\":1,\"fail_path\":\"/payments/refund\"}");
    assert_int_equal(
        post(c, sp, "/payments/refund", "order:9:refund", "{\"order_id\":9}", &resp, &err),
        TXO_EUNAVAILABLE);
    assert_int_equal(
        post(c, sp, "/shipments/create", "order:9:ship", "{\"order_id\":9}", &resp, &err), 0);
    txo_http_client_response_release(&resp);
    txo_http_client_free(c);
}

static void test_decline_is_business_and_final(void **state)
{
    struct fake_proc *sp = *state;
    struct txo_http_client *c = new_client(5000);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    const char *body = "{\"order_id\":10,\"amount_cents\":500}";

    control(sp, "{\"decline_rate\":1}");
    int rc = post(c, sp, "/payments/charge", "order:10:charge", body, &resp, &err);
    assert_int_equal(rc, TXO_EBUSINESS);
    assert_false(txo_err_is_transient(rc));
    assert_int_equal(resp.status, 402);
    json_t *v = body_json(&resp);
    assert_string_equal(str_field(v, "status"), "DECLINED");
    json_decref(v);
    assert_non_null(strstr(err.msg, "HTTP 402"));

    /* The refusal is the stored answer for that key, even once declines stop. */
    control(sp, "{\"decline_rate\":0}");
    assert_int_equal(post(c, sp, "/payments/charge", "order:10:charge", body, &resp, &err),
                     TXO_EBUSINESS);
    assert_int_equal(resp.status, 402);
    assert_int_equal(stat_of(sp, "declines"), 1);
    assert_int_equal(stat_of(sp, "charges"), 0);
    txo_http_client_response_release(&resp);
    txo_http_client_free(c);
}

static void test_hang_ends_at_the_timeout(void **state)
{
    struct fake_proc *sp = *state;
    struct txo_http_client *c = new_client(500);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    const char *body = "{\"order_id\":11,\"amount_cents\":500}";

    control(sp, "{\"hang\":true}");
    int64_t t0 = txo_monotonic_ms();
    int rc = post(c, sp, "/payments/charge", "order:11:charge", body, &resp, &err);
    int64_t elapsed = txo_monotonic_ms() - t0;
    assert_int_equal(rc, TXO_ETIMEOUT);
    assert_true(txo_err_is_transient(rc));
    assert_int_equal(resp.status, 0);
    assert_null(resp.body);
    if (elapsed < 450 || elapsed >= 2000)
        fail_msg("a 500 ms timeout took %lld ms", (long long)elapsed);
    assert_non_null(strstr(err.msg, "timed out after 500 ms"));
    assert_int_equal(stat_of(sp, "hangs"), 1);

    /* Released: the hung request had no effect, the retry charges once. */
    control(sp, "{\"hang\":false}");
    assert_int_equal(post(c, sp, "/payments/charge", "order:11:charge", body, &resp, &err), 0);
    assert_int_equal(resp.status, 201);
    assert_int_equal(stat_of(sp, "charges"), 1);

    /* Latency below the timeout is just slow. */
    control(sp, "{\"latency_ms\":200}");
    assert_int_equal(
        post(c, sp, "/payments/refund", "order:11:refund", "{\"order_id\":11}", &resp, &err), 0);
    assert_true(resp.total_s >= 0.19);
    txo_http_client_response_release(&resp);
    txo_http_client_free(c);
}

static void test_keepalive_reuses_one_connection(void **state)
{
    struct fake_proc *sp = *state;
    struct txo_http_client *c = new_client(5000);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    for (int i = 0; i < 100; i++) {
        char key[32], body[64];
        snprintf(key, sizeof(key), "order:%d:charge", 1000 + i);
        snprintf(body, sizeof(body), "{\"order_id\":%d,\"amount_cents\":%d}", 1000 + i, i);
        if (post(c, sp, "/payments/charge", key, body, &resp, &err) != 0)
            fail_msg("call %d: %s", i, err.msg);
    }
    assert_int_equal(txo_http_client_connections(c), 1);
    assert_int_equal(stat_of(sp, "charges"), 100);
    txo_http_client_response_release(&resp);
    txo_http_client_free(c);
}

/* ---- batches ---- */

#define BATCH 20

struct batch {
    char urls[BATCH][160];
    char keys[BATCH][32];
    char bodies[BATCH][64];
    struct txo_http_client_request reqs[BATCH];
};

/* n charges of orders first..first+n-1, each with its own key. */
static void batch_of_charges(struct batch *b, const struct fake_proc *sp, int first, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        int order = first + (int)k;
        url_of(sp, "/payments/charge", b->urls[k], sizeof(b->urls[k]));
        snprintf(b->keys[k], sizeof(b->keys[k]), "order:%d:charge", order);
        snprintf(b->bodies[k], sizeof(b->bodies[k]), "{\"order_id\":%d,\"amount_cents\":%d}", order,
                 100 + order);
        struct txo_http_client_request *r = &b->reqs[k];
        r->url = b->urls[k];
        r->idempotency_key = b->keys[k];
        r->body = b->bodies[k];
        r->len = strlen(b->bodies[k]);
    }
}

static void batch_release(struct batch *b)
{
    for (size_t k = 0; k < BATCH; k++)
        txo_http_client_response_release(&b->reqs[k].resp);
}

static void test_many_runs_concurrently_once_per_key(void **state)
{
    struct fake_proc *sp = *state;
    struct txo_http_client *c = new_client(5000);
    struct batch *b = txo_calloc(1, sizeof(*b));
    assert_non_null(b);
    struct txo_error err;
    txo_error_init(&err);
    control(sp, "{\"latency_ms\":300}");

    batch_of_charges(b, sp, 2000, BATCH);
    int64_t t0 = txo_monotonic_ms();
    assert_int_equal(txo_http_post_json_many(c, b->reqs, BATCH, NULL, 0, &err), 0);
    int64_t elapsed = txo_monotonic_ms() - t0;
    for (size_t k = 0; k < BATCH; k++) {
        if (b->reqs[k].rc != 0)
            fail_msg("request %zu: %s", k, b->reqs[k].err.msg);
        assert_int_equal(b->reqs[k].resp.status, 201);
        assert_true(b->reqs[k].resp.total_s >= 0.29);
        json_t *v = body_json(&b->reqs[k].resp);
        assert_string_equal(str_field(v, "status"), "CHARGED");
        json_decref(v);
    }
    /* One after the other they would take 6 s; at once, 300 ms and the overhead. */
    if (elapsed >= 2000)
        fail_msg("20 requests of 300 ms each took %lld ms", (long long)elapsed);
    /* Each key reached the service once and was charged once. */
    assert_int_equal(stat_of(sp, "charges"), BATCH);
    assert_int_equal(stat_of(sp, "charge_requests"), BATCH);
    assert_int_equal(stat_of(sp, "replays"), 0);
    uint64_t opened = txo_http_client_connections(c);
    assert_int_equal(opened, BATCH);

    /* A second batch of the same size reuses those connections, and so does a single call. */
    batch_of_charges(b, sp, 3000, BATCH);
    assert_int_equal(txo_http_post_json_many(c, b->reqs, BATCH, NULL, 0, &err), 0);
    for (size_t k = 0; k < BATCH; k++)
        if (b->reqs[k].rc != 0)
            fail_msg("second batch, request %zu: %s", k, b->reqs[k].err.msg);
    assert_int_equal(txo_http_client_connections(c), opened);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    assert_int_equal(post(c, sp, "/payments/charge", "order:2000:charge",
                          "{\"order_id\":2000,\"amount_cents\":2100}", &resp, &err),
                     0);
    assert_int_equal(txo_http_client_connections(c), opened);
    assert_int_equal(stat_of(sp, "charges"), 2 * BATCH);
    assert_int_equal(stat_of(sp, "replays"), 1);

    /* Nothing to do is done at once; no client is refused. */
    assert_int_equal(txo_http_post_json_many(c, b->reqs, 0, NULL, 0, &err), 0);
    assert_int_equal(txo_http_post_json_many(NULL, b->reqs, 1, NULL, 0, &err), TXO_EINVAL);

    txo_http_client_response_release(&resp);
    batch_release(b);
    txo_free(b);
    txo_http_client_free(c);
}

/* ---- start-up flags, environment, shutdown ---- */

static void test_flags_and_environment(void **state)
{
    (void)state;
    struct fake_proc sp;
    struct txo_http_client *c = new_client(5000);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;

    const char *fail_refunds[] = {"--fail-rate",  "1",   "--fail-path", "/payments/refund",
                                  "--latency-ms", "150", NULL};
    fake_start(&sp, fail_refunds);
    assert_int_equal(
        post(c, &sp, "/payments/charge", "k1", "{\"order_id\":1,\"amount_cents\":1}", &resp, &err),
        0);
    assert_true(resp.total_s >= 0.14);
    assert_int_equal(post(c, &sp, "/payments/refund", "k2", "{\"order_id\":1}", &resp, &err),
                     TXO_EUNAVAILABLE);
    assert_int_equal(resp.status, 503);
    fake_stop(&sp);

    setenv("TXO_FAKE_DECLINE_RATE", "1", 1);
    fake_start(&sp, NULL);
    unsetenv("TXO_FAKE_DECLINE_RATE");
    assert_int_equal(
        post(c, &sp, "/payments/charge", "k1", "{\"order_id\":1,\"amount_cents\":1}", &resp, &err),
        TXO_EBUSINESS);
    assert_int_equal(resp.status, 402);
    fake_stop(&sp);

    /* Invalid settings are refused at start-up with exit status 2. */
    const char *bad_rate[] = {"--fail-rate", "1.5", NULL};
    int status = fake_spawn(&sp, bad_rate, true);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 2);
    const char *bad_path[] = {"--fail-path", "/nope", NULL};
    status = fake_spawn(&sp, bad_path, true);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 2);

    txo_http_client_response_release(&resp);
    txo_http_client_free(c);
}

struct hung_call {
    const struct fake_proc *sp;
    int rc;
    int64_t ended_ms;
    struct txo_error err;
};

static void *hung_call_thread(void *arg)
{
    struct hung_call *h = arg;
    struct txo_http_client *c = new_client(20000);
    char url[256];
    url_of(h->sp, "/payments/charge", url, sizeof(url));
    const char *body = "{\"order_id\":5,\"amount_cents\":5}";
    txo_error_init(&h->err);
    h->rc = txo_http_post_json(c, url, "order:5:charge", NULL, body, strlen(body), NULL, &h->err);
    h->ended_ms = txo_monotonic_ms();
    txo_http_client_free(c);
    return NULL;
}

static void test_sigterm_releases_a_hung_call(void **state)
{
    (void)state;
    struct fake_proc sp;
    const char *hang[] = {"--hang", NULL};
    fake_start(&sp, hang);
    struct hung_call h = {.sp = &sp};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, hung_call_thread, &h), 0);
    /* Wait until the call is held by the fake service. */
    for (int i = 0; i < 200 && stat_of(&sp, "hangs") == 0; i++)
        txo_sleep_ms(10);
    assert_int_equal(stat_of(&sp, "hangs"), 1);
    int64_t t0 = txo_monotonic_ms();
    fake_stop(&sp); /* requires exit 0 within 5 s */
    int64_t stopped_in = txo_monotonic_ms() - t0;
    assert_int_equal(pthread_join(th, NULL), 0);
    if (stopped_in > 2000)
        fail_msg("txo-fake-services took %lld ms to stop", (long long)stopped_in);
    /* The client got a 503 or a closed connection, not its 20 s timeout. */
    assert_int_equal(h.rc, TXO_EUNAVAILABLE);
    if (h.ended_ms - t0 > 2000)
        fail_msg("the hung call ended %lld ms after SIGTERM", (long long)(h.ended_ms - t0));
}

/* ---- the client against an in-process server that answers any status ---- */

struct echo_server {
    struct txo_http_server *srv;
    char base[64];
    pthread_mutex_t mu;
    unsigned requests;
    char last_key[128];
    char last_type[128];
    char last_extra[128];
    char last_agent[128];
    char last_body[256];
    unsigned in_flight;     /* /slow requests being answered now */
    unsigned max_in_flight; /* the most at once */
};

static void copy_header(const struct txo_http_request *req, const char *name, char *out, size_t cap)
{
    const char *v = txo_http_request_header(req, name);
    snprintf(out, cap, "%s", v != NULL ? v : "");
}

/* /status/NNN answers NNN with {"status":NNN,"note":"line1\nline2"}; /big answers 4000 bytes;
 * /slow answers 200 after 200 ms, counting how many it answers at once. */
static void echo_handler(void *arg, const struct txo_http_request *req,
                         struct txo_http_response *resp)
{
    struct echo_server *es = arg;
    pthread_mutex_lock(&es->mu);
    es->requests++;
    copy_header(req, "Idempotency-Key", es->last_key, sizeof(es->last_key));
    copy_header(req, "Content-Type", es->last_type, sizeof(es->last_type));
    copy_header(req, "X-Extra", es->last_extra, sizeof(es->last_extra));
    copy_header(req, "User-Agent", es->last_agent, sizeof(es->last_agent));
    snprintf(es->last_body, sizeof(es->last_body), "%s", req->body);
    pthread_mutex_unlock(&es->mu);

    int status = 0;
    if (sscanf(req->path, "/status/%d", &status) == 1) {
        char body[96];
        snprintf(body, sizeof(body), "{\"status\":%d,\"note\":\"line1\\nline2\"}\n", status);
        (void)txo_http_response_set(resp, status, status == 204 ? NULL : body);
        return;
    }
    if (strcmp(req->path, "/big") == 0) {
        char *big = txo_malloc(4001);
        assert_non_null(big);
        memset(big, 'x', 4000);
        big[4000] = '\0';
        txo_http_response_take(resp, 200, big, 4000);
        return;
    }
    if (strcmp(req->path, "/slow") == 0) {
        pthread_mutex_lock(&es->mu);
        if (++es->in_flight > es->max_in_flight)
            es->max_in_flight = es->in_flight;
        pthread_mutex_unlock(&es->mu);
        txo_sleep_ms(200);
        pthread_mutex_lock(&es->mu);
        es->in_flight--;
        pthread_mutex_unlock(&es->mu);
        (void)txo_http_response_set(resp, 200, "{\"slow\":true}");
        return;
    }
    (void)txo_http_response_set(resp, 404, "{\"error\":\"no\"}");
}

static int start_echo(void **state, unsigned idle_timeout_s)
{
    struct echo_server *es = txo_calloc(1, sizeof(*es));
    pthread_mutex_init(&es->mu, NULL);
    struct txo_http_server_opts o;
    txo_http_server_opts_init(&o);
    o.port = 0;
    o.timeout_s = idle_timeout_s;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_http_server_start(&o, echo_handler, es, &es->srv, &err) < 0)
        fail_msg("echo server: %s", err.msg);
    snprintf(es->base, sizeof(es->base), "http://127.0.0.1:%u", txo_http_server_port(es->srv));
    *state = es;
    return 0;
}

static int setup_echo(void **state)
{
    return start_echo(state, 30);
}

/* The server closes a connection idle for 1 s. */
static int setup_echo_short_idle(void **state)
{
    return start_echo(state, 1);
}

static int teardown_echo(void **state)
{
    struct echo_server *es = *state;
    txo_http_server_stop(es->srv);
    pthread_mutex_destroy(&es->mu);
    txo_free(es);
    return 0;
}

static void test_status_mapping(void **state)
{
    struct echo_server *es = *state;
    struct txo_http_client *c = new_client(5000);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    static const struct {
        int status;
        int code;
    } cases[] = {
        {200, 0},
        {201, 0},
        {202, 0},
        {204, 0},
        {408, TXO_EUNAVAILABLE},
        {429, TXO_EUNAVAILABLE},
        {500, TXO_EUNAVAILABLE},
        {502, TXO_EUNAVAILABLE},
        {503, TXO_EUNAVAILABLE},
        {504, TXO_EUNAVAILABLE},
        {400, TXO_EBUSINESS},
        {401, TXO_EBUSINESS},
        {402, TXO_EBUSINESS},
        {404, TXO_EBUSINESS},
        {409, TXO_EBUSINESS},
        {422, TXO_EBUSINESS},
        {302, TXO_EIO},
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(cases); i++) {
        char url[128];
        snprintf(url, sizeof(url), "%s/status/%d", es->base, cases[i].status);
        txo_error_init(&err);
        int rc = txo_http_post_json(c, url, "key-1", NULL, "{}", 2, &resp, &err);
        if (rc != cases[i].code)
            fail_msg("HTTP %d: got %s, want %s (%s)", cases[i].status, txo_err_name(rc),
                     txo_err_name(cases[i].code), err.msg);
        assert_int_equal(resp.status, cases[i].status);
        if (cases[i].status == 204) {
            assert_null(resp.body);
            assert_int_equal(resp.body_len, 0);
        } else {
            /* The body is there for every status, 2xx or not. */
            assert_non_null(resp.body);
            assert_int_equal(resp.body_len, strlen(resp.body));
            assert_non_null(strstr(resp.body, "\"status\":"));
        }
        if (rc != 0) {
            char want[64];
            snprintf(want, sizeof(want), "/status/%d: %sHTTP %d: {\"status\":%d", cases[i].status,
                     rc == TXO_EIO ? "unexpected " : "", cases[i].status, cases[i].status);
            if (strstr(err.msg, want) == NULL)
                fail_msg("message \"%s\" lacks \"%s\"", err.msg, want);
            /* The excerpt is one line. */
            assert_null(strchr(err.msg, '\n'));
        } else {
            assert_int_equal(err.code, 0); /* untouched on success */
        }
        /* GET maps the same way. */
        rc = txo_http_get(c, url, NULL, &resp, &err);
        assert_int_equal(rc, cases[i].code);
    }
    /* Every call used the one kept-alive connection. */
    assert_int_equal(txo_http_client_connections(c), 1);
    txo_http_client_response_release(&resp);
    txo_http_client_free(c);
}

static void test_headers_limits_and_bad_input(void **state)
{
    struct echo_server *es = *state;
    struct txo_http_client_opts o;
    txo_http_client_opts_init(&o);
    o.max_response_bytes = 1000;
    o.user_agent = "svc/1.0";
    struct txo_http_client *c = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_http_client_new(&o, &c, &err), 0);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    char url[128];

    /* Headers and body as sent. */
    snprintf(url, sizeof(url), "%s/status/200", es->base);
    const char *extra[] = {"X-Extra: forty two", NULL};
    assert_int_equal(
        txo_http_post_json(c, url, "order:1:charge", extra, "{\"a\":1}", 7, &resp, &err), 0);
    pthread_mutex_lock(&es->mu);
    assert_string_equal(es->last_key, "order:1:charge");
    assert_string_equal(es->last_type, "application/json");
    assert_string_equal(es->last_extra, "forty two");
    assert_string_equal(es->last_agent, "svc/1.0");
    assert_string_equal(es->last_body, "{\"a\":1}");
    unsigned before = es->requests;
    pthread_mutex_unlock(&es->mu);

    /* Without a key no header is sent. */
    assert_int_equal(txo_http_post_json(c, url, NULL, NULL, "{}", 2, &resp, &err), 0);
    pthread_mutex_lock(&es->mu);
    assert_string_equal(es->last_key, "");
    before = es->requests;
    pthread_mutex_unlock(&es->mu);

    /* Header injection is refused before anything is sent. */
    assert_int_equal(txo_http_post_json(c, url, "k\r\nX-Evil: 1", NULL, "{}", 2, &resp, &err),
                     TXO_EINVAL);
    const char *evil[] = {"X-Extra: a\r\nX-Evil: 1", NULL};
    txo_error_init(&err);
    assert_int_equal(txo_http_post_json(c, url, "k", evil, "{}", 2, &resp, &err), TXO_EINVAL);
    const char *no_colon[] = {"nonsense", NULL};
    assert_int_equal(txo_http_post_json(c, url, "k", no_colon, "{}", 2, &resp, &err), TXO_EINVAL);
    pthread_mutex_lock(&es->mu);
    assert_int_equal(es->requests, before);
    pthread_mutex_unlock(&es->mu);

    /* A response over max_response_bytes fails; the client still works afterwards. */
    snprintf(url, sizeof(url), "%s/big", es->base);
    txo_error_init(&err);
    assert_int_equal(txo_http_get(c, url, NULL, &resp, &err), TXO_EIO);
    assert_non_null(strstr(err.msg, "larger than 1000 bytes"));
    assert_null(resp.body);
    snprintf(url, sizeof(url), "%s/status/201", es->base);
    assert_int_equal(txo_http_get(c, url, NULL, &resp, &err), 0);
    assert_int_equal(resp.status, 201);

    /* Bad URLs and arguments. */
    txo_error_init(&err);
    assert_int_equal(txo_http_get(c, "ftp://127.0.0.1/x", NULL, &resp, &err), TXO_EINVAL);
    assert_int_equal(txo_http_get(c, "http://", NULL, &resp, &err), TXO_EINVAL);
    assert_int_equal(txo_http_post_json(c, NULL, NULL, NULL, "{}", 2, &resp, &err), TXO_EINVAL);
    o.timeout_ms = 0;
    struct txo_http_client *bad = NULL;
    assert_int_equal(txo_http_client_new(&o, &bad, &err), TXO_EINVAL);
    assert_null(bad);
    txo_http_client_response_release(&resp);
    txo_http_client_free(c);
    txo_http_client_free(NULL);
}

static void test_idle_connection_closed_by_the_server(void **state)
{
    struct echo_server *es = *state;
    struct txo_http_client *c = new_client(5000);
    struct txo_error err;
    txo_error_init(&err);
    char url[128];
    snprintf(url, sizeof(url), "%s/status/200", es->base);
    assert_int_equal(txo_http_post_json(c, url, "k1", NULL, "{}", 2, NULL, &err), 0);
    assert_int_equal(txo_http_client_connections(c), 1);
    txo_sleep_ms(2200); /* the server drops the idle connection */
    /* The dead connection is noticed and replaced; the call does not fail. */
    if (txo_http_post_json(c, url, "k2", NULL, "{}", 2, NULL, &err) != 0)
        fail_msg("call after the server closed the idle connection: %s", err.msg);
    assert_int_equal(txo_http_client_connections(c), 2);
    txo_http_client_free(c);
}

static void test_closed_port_is_unavailable_fast(void **state)
{
    (void)state;
    struct txo_http_client *c = new_client(5000);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    txo_error_init(&err);
    char url[128];
    snprintf(url, sizeof(url), "http://user:hunter2@127.0.0.1:%u/payments/charge",
             testraw_closed_port());
    int64_t t0 = txo_monotonic_ms();
    int rc = txo_http_post_json(c, url, "k", NULL, "{}", 2, &resp, &err);
    int64_t elapsed = txo_monotonic_ms() - t0;
    assert_int_equal(rc, TXO_EUNAVAILABLE);
    assert_int_equal(resp.status, 0);
    assert_null(resp.body);
    if (elapsed > 1000)
        fail_msg("a refused connection took %lld ms", (long long)elapsed);
    assert_non_null(strstr(err.msg, "cannot connect"));
    /* The password in the URL is not in the message. */
    assert_null(strstr(err.msg, "hunter2"));
    assert_non_null(strstr(err.msg, "POST http://***@127.0.0.1:"));
    txo_http_client_response_release(&resp);
    txo_http_client_free(c);
}

static unsigned echo_requests(struct echo_server *es)
{
    pthread_mutex_lock(&es->mu);
    unsigned n = es->requests;
    pthread_mutex_unlock(&es->mu);
    return n;
}

static void test_many_maps_each_request(void **state)
{
    struct echo_server *es = *state;
    struct txo_http_client *c = new_client(1000);
    unsigned hang_port = 0;
    int hang_fd = testraw_listen(&hang_port, 16);
    unsigned dead_port = testraw_closed_port();
    enum { OK, DECLINED, REFUSED, DOWN, HANG, CLOSED, BAD_KEY, BAD_URL, NO_BODY, N };
    char urls[N][128];
    snprintf(urls[OK], sizeof(urls[OK]), "%s/status/201", es->base);
    snprintf(urls[DECLINED], sizeof(urls[DECLINED]), "%s/status/402", es->base);
    snprintf(urls[REFUSED], sizeof(urls[REFUSED]), "%s/status/422", es->base);
    snprintf(urls[DOWN], sizeof(urls[DOWN]), "%s/status/503", es->base);
    snprintf(urls[HANG], sizeof(urls[HANG]), "http://127.0.0.1:%u/payments/charge", hang_port);
    snprintf(urls[CLOSED], sizeof(urls[CLOSED]), "http://127.0.0.1:%u/payments/charge", dead_port);
    snprintf(urls[BAD_KEY], sizeof(urls[BAD_KEY]), "%s/status/200", es->base);
    snprintf(urls[BAD_URL], sizeof(urls[BAD_URL]), "ftp://127.0.0.1:%u/x", dead_port);
    snprintf(urls[NO_BODY], sizeof(urls[NO_BODY]), "%s/status/200", es->base);
    struct txo_http_client_request reqs[N];
    memset(reqs, 0, sizeof(reqs));
    for (size_t k = 0; k < N; k++) {
        reqs[k].url = urls[k];
        reqs[k].idempotency_key = "key-1";
        reqs[k].body = "{}";
        reqs[k].len = 2;
        txo_http_client_response_init(&reqs[k].resp);
    }
    reqs[BAD_KEY].idempotency_key = "k\r\nX-Evil: 1";
    reqs[NO_BODY].body = NULL;
    unsigned before = echo_requests(es);

    struct txo_error err;
    txo_error_init(&err);
    int64_t t0 = txo_monotonic_ms();
    assert_int_equal(txo_http_post_json_many(c, reqs, N, NULL, 0, &err), 0);
    int64_t elapsed = txo_monotonic_ms() - t0;
    /* The hang costs the batch its timeout, once, not one per request. */
    if (elapsed < 950 || elapsed >= 1800)
        fail_msg("a batch with a 1000 ms timeout took %lld ms", (long long)elapsed);

    static const struct {
        int code;
        long status;
        const char *text;
    } want[N] = {
        [OK] = {0, 201, NULL},
        [DECLINED] = {TXO_EBUSINESS, 402, "/status/402: HTTP 402: {\"status\":402"},
        [REFUSED] = {TXO_EBUSINESS, 422, "/status/422: HTTP 422: {\"status\":422"},
        [DOWN] = {TXO_EUNAVAILABLE, 503, "/status/503: HTTP 503: {\"status\":503"},
        [HANG] = {TXO_ETIMEOUT, 0, "/payments/charge: timed out after 1000 ms"},
        [CLOSED] = {TXO_EUNAVAILABLE, 0, "/payments/charge: cannot connect"},
        [BAD_KEY] = {TXO_EINVAL, 0, "the Idempotency-Key contains CR or LF"},
        [BAD_URL] = {TXO_EINVAL, 0, "POST ftp://127.0.0.1:"},
        [NO_BODY] = {TXO_EINVAL, 0, "the body is NULL"},
    };
    for (size_t k = 0; k < N; k++) {
        const struct txo_http_client_request *r = &reqs[k];
        if (r->rc != want[k].code)
            fail_msg("request %zu: got %s, want %s (%s)", k, txo_err_name(r->rc),
                     txo_err_name(want[k].code), r->err.msg);
        assert_int_equal(r->resp.status, want[k].status);
        if (r->rc == 0) {
            assert_int_equal(r->err.code, 0);
            assert_non_null(r->resp.body);
            assert_non_null(strstr(r->resp.body, "\"status\":201"));
        } else {
            assert_int_equal(r->err.code, r->rc);
            if (strstr(r->err.msg, want[k].text) == NULL)
                fail_msg("request %zu: message \"%s\" lacks \"%s\"", k, r->err.msg, want[k].text);
        }
    }
    assert_int_equal(reqs[DOWN].resp.body_len, strlen(reqs[DOWN].resp.body));
    /* Only the four valid requests to the echo server reached it. */
    assert_int_equal(echo_requests(es) - before, 4);

    /* The same requests again (responses reused), with one bad extra header for all: every
     * request is refused alike and none is sent. */
    const char *evil[] = {"X-Extra: a\r\nX-Evil: 1", NULL};
    before = echo_requests(es);
    assert_int_equal(txo_http_post_json_many(c, reqs, N, evil, 0, &err), 0);
    for (size_t k = 0; k < N; k++) {
        assert_int_equal(reqs[k].rc, TXO_EINVAL);
        assert_int_equal(reqs[k].resp.status, 0);
        assert_null(reqs[k].resp.body);
    }
    assert_int_equal(echo_requests(es), before);

    for (size_t k = 0; k < N; k++)
        txo_http_client_response_release(&reqs[k].resp);
    close(hang_fd);
    txo_http_client_free(c);
}

static void test_many_bounds_requests_in_flight(void **state)
{
    struct echo_server *es = *state;
    struct txo_http_client *c = new_client(5000);
    char url[128];
    snprintf(url, sizeof(url), "%s/slow", es->base);
    enum { N = 6 };
    struct txo_http_client_request reqs[N];
    memset(reqs, 0, sizeof(reqs));
    char keys[N][16];
    for (size_t k = 0; k < N; k++) {
        snprintf(keys[k], sizeof(keys[k]), "slow-%zu", k);
        reqs[k].url = url;
        reqs[k].idempotency_key = keys[k];
        reqs[k].body = "{}";
        reqs[k].len = 2;
    }
    struct txo_error err;
    txo_error_init(&err);
    for (int round = 0; round < 2; round++) {
        int64_t t0 = txo_monotonic_ms();
        assert_int_equal(txo_http_post_json_many(c, reqs, N, NULL, 2, &err), 0);
        int64_t elapsed = txo_monotonic_ms() - t0;
        for (size_t k = 0; k < N; k++) {
            if (reqs[k].rc != 0)
                fail_msg("round %d, request %zu: %s", round, k, reqs[k].err.msg);
            assert_int_equal(reqs[k].resp.status, 200);
        }
        /* 6 requests of 200 ms, 2 at a time: 3 rounds. */
        if (elapsed < 580)
            fail_msg("6 requests of 200 ms, 2 at a time, took %lld ms", (long long)elapsed);
        pthread_mutex_lock(&es->mu);
        unsigned most = es->max_in_flight;
        pthread_mutex_unlock(&es->mu);
        assert_int_equal(most, 2);
        /* Two handles, two connections, kept for the next batch. */
        assert_int_equal(txo_http_client_connections(c), 2);
    }
    for (size_t k = 0; k < N; k++)
        txo_http_client_response_release(&reqs[k].resp);
    txo_http_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_charge_is_idempotent),
        cmocka_unit_test(test_refund_and_shipments),
        cmocka_unit_test(test_failure_is_unavailable_without_effect),
        cmocka_unit_test(test_decline_is_business_and_final),
        cmocka_unit_test(test_hang_ends_at_the_timeout),
        cmocka_unit_test(test_keepalive_reuses_one_connection),
        cmocka_unit_test(test_many_runs_concurrently_once_per_key),
        cmocka_unit_test_setup(test_flags_and_environment, testrun_no_fixture),
        cmocka_unit_test_setup(test_sigterm_releases_a_hung_call, testrun_no_fixture),
        cmocka_unit_test_setup_teardown(test_status_mapping, setup_echo, teardown_echo),
        cmocka_unit_test_setup_teardown(test_headers_limits_and_bad_input, setup_echo,
                                        teardown_echo),
        cmocka_unit_test_setup_teardown(test_idle_connection_closed_by_the_server,
                                        setup_echo_short_idle, teardown_echo),
        cmocka_unit_test_setup(test_closed_port_is_unavailable_fast, testrun_no_fixture),
        cmocka_unit_test_setup_teardown(test_many_maps_each_request, setup_echo, teardown_echo),
        cmocka_unit_test_setup_teardown(test_many_bounds_requests_in_flight, setup_echo,
                                        teardown_echo),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup_fake, teardown_fake, NULL, NULL);
}
