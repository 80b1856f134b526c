/*
 * External-service resilience end to end, with real processes: txo-fake-services plays
 * the payment and shipment services, `txo up` (API + relay + worker, local broker) or
 * `txo worker --broker none` runs the order saga against it, and the test drives both over
 * HTTP (include/txo/http_client.h) and checks the database, the fake service's /stats and
 * /metrics.
 *
 *   hang                the payment service hangs: ChargePayment ends at its timeout with an
 *                       unknown outcome, so the saga compensates it (a refund); the runners are not
 *                       stuck: once the hang is off, new orders are CONFIRMED, each charged exactly
 *                       once, and the owed refund lands. When the service is slow rather than hung
 *                       (it charges after the caller gave up), the cancelled order's charge is
 *                       refunded, even when the next try met the open breaker.
 *   breaker             the payment service is down (every call 503): after --breaker-failures
 *                       calls the circuit breaker opens, later orders fail fast without a request,
 *                       and after --breaker-open the half-open probe succeeds and closes it again.
 *   retries             COMPENSATION_FAILED sagas (the refund keeps failing at the service) are
 *                       retried with backoff until COMPENSATED, the refund applied once; after
 *                       --compensation-max-tries failures they are left alone with one error line
 *                       until an operator retries them.
 *   bad configuration:  the daemons refuse it with exit status 2 and a message naming the setting,
 *                       whatever other flags come with it.
 *
 * Every process gets fast loop settings (--idle-sleep 20 for the relay, --poll 50 for the
 * worker) so that the time from POST /orders to the saga's first step is a few tens of ms and
 * the time bounds below measure the resilience guards, not polling.
 *
 * Each test has its own database (testdb) and its own processes, killed in teardown when a
 * test fails half-way; on the success path they are stopped with SIGTERM and must exit 0 (so
 * the sanitizer builds also check the daemons' shutdown).
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
#include <jansson.h>

#include "testrun.h"
#include "orders.h"
#include "testdb.h"
#include "testorders.h"
#include "testproc.h"
#include "testserver.h"
#include "txo/http_client.h"

#define SKU           "sku-resil"
#define STOCK         100
#define PRICE_CENTS   1250
#define MAX_ARGS      64
#define LOG_TAIL      6000
#define START_WAIT_MS 30000 /* process start-up, generous for sanitizer builds */

/* One test's database, HTTP client and processes. */
struct rig {
    struct testdb t;
    struct txo_http_client *http;
    struct testproc fake, up, worker;
    unsigned fake_port, api_port;
    char fake_url[64]; /* http://127.0.0.1:<fake_port> */
    char fake_listen[32];
    char api_url[64]; /* http://127.0.0.1:<api_port> */
    char api_listen[32];
    char payment_flag[96];  /* --payment-url=<fake_url> */
    char shipment_flag[96]; /* --shipment-url=<fake_url> */
};

static int setup(void **state)
{
    struct rig *r = testdb_fixture_new(sizeof(*r), "resil_e2e", TESTDB_NEW_EXPORT_ENV);
    struct txo_error err;
    txo_error_init(&err);
    testorders_stock(r->t.db, SKU, STOCK);
    struct txo_http_client_opts co;
    txo_http_client_opts_init(&co);
    co.timeout_ms = 10000;
    co.user_agent = "test_resilience_e2e";
    if (txo_http_client_new(&co, &r->http, &err) != 0)
        fail_msg("http client: %s", err.msg);
    r->fake_port = testproc_free_port();
    snprintf(r->fake_listen, sizeof(r->fake_listen), "127.0.0.1:%u", r->fake_port);
    snprintf(r->fake_url, sizeof(r->fake_url), "http://127.0.0.1:%u", r->fake_port);
    snprintf(r->payment_flag, sizeof(r->payment_flag), "--payment-url=%s", r->fake_url);
    snprintf(r->shipment_flag, sizeof(r->shipment_flag), "--shipment-url=%s", r->fake_url);
    r->api_port = testproc_free_port();
    snprintf(r->api_listen, sizeof(r->api_listen), "127.0.0.1:%u", r->api_port);
    snprintf(r->api_url, sizeof(r->api_url), "http://127.0.0.1:%u", r->api_port);
    *state = r;
    return 0;
}

static int teardown(void **state)
{
    struct rig *r = *state;
    testproc_stop_hard(&r->up);
    testproc_stop_hard(&r->worker);
    testproc_stop_hard(&r->fake);
    txo_http_client_free(r->http);
    testdb_fixture_free(r);
    return 0;
}

/* ---- text kept across a failing assertion (fail_msg does not return: free first) ---- */

/* Copies s (txo_malloc'd, may be NULL) into dst and frees it. Returns dst. */
static const char *keep_txo(char *dst, size_t cap, char *s)
{
    snprintf(dst, cap, "%s", s != NULL ? s : "(null)");
    txo_free(s);
    return dst;
}

/* Same for a malloc'd s. */
static const char *keep_libc(char *dst, size_t cap, char *s)
{
    snprintf(dst, cap, "%s", s != NULL ? s : "(null)");
    free(s);
    return dst;
}

/* ---- processes ---- */

static void dump_log(const char *name, const struct testproc *p)
{
    if (p->log_path[0] == '\0')
        return;
    char *log = testproc_log(p);
    size_t len = strlen(log);
    const char *tail = len > LOG_TAIL ? log + len - LOG_TAIL : log;
    print_message("---- %s log (%s), last %zu bytes ----\n%s\n", name, p->log_path, strlen(tail),
                  tail);
    free(log);
}

static void dump_logs(const struct rig *r)
{
    dump_log("txo-fake-services", &r->fake);
    dump_log("up", &r->up);
    dump_log("worker", &r->worker);
}

/* Starts `txo <sub> <args...>` (args NULL-terminated). */
static void start_txo(struct testproc *p, const char *tag, const char *sub, const char *const *args)
{
    const char *argv[MAX_ARGS];
    size_t n = 0;
    argv[n++] = testproc_txo_bin();
    argv[n++] = sub;
    for (size_t i = 0; args[i] != NULL; i++) {
        assert_true(n + 1 < MAX_ARGS);
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    testproc_start(p, tag, argv, NULL);
}

/* Starts the fake service with extra (NULL-terminated) flags and waits until it answers. */
static void start_fake(struct rig *r, const char *const *extra)
{
    const char *argv[MAX_ARGS];
    size_t n = 0;
    argv[n++] = testproc_fake_bin();
    argv[n++] = "--listen";
    argv[n++] = r->fake_listen;
    for (size_t i = 0; extra[i] != NULL; i++) {
        assert_true(n + 1 < MAX_ARGS);
        argv[n++] = extra[i];
    }
    argv[n] = NULL;
    testproc_start(&r->fake, "resil_fake", argv, NULL);
    if (!testproc_wait_http(r->fake_port, "/healthz", START_WAIT_MS)) {
        dump_logs(r);
        fail_msg("txo-fake-services did not answer on %s", r->fake_listen);
    }
}

/* Starts `txo up` on the API port with fast loops and the extra flags, waits for /healthz. */
static void start_up(struct rig *r, const char *const *extra)
{
    const char *args[MAX_ARGS];
    size_t n = 0;
    const char *fixed[] = {"--listen", r->api_listen, "--idle-sleep",     "20",
                           "--poll",   "50",          "--clean-interval", "0",
                           NULL};
    for (size_t i = 0; fixed[i] != NULL; i++)
        args[n++] = fixed[i];
    for (size_t i = 0; extra[i] != NULL; i++) {
        assert_true(n + 1 < MAX_ARGS);
        args[n++] = extra[i];
    }
    args[n] = NULL;
    start_txo(&r->up, "resil_up", "up", args);
    if (!testproc_wait_http(r->api_port, "/healthz", START_WAIT_MS)) {
        dump_logs(r);
        fail_msg("txo up did not answer on %s", r->api_listen);
    }
}

/* SIGTERM, and the process must exit 0 by itself within 15 s. */
static void stop_clean(struct rig *r, struct testproc *p, const char *name)
{
    if (!testproc_stop(p, 15000)) {
        dump_logs(r);
        fail_msg("%s did not exit 0 after SIGTERM (status 0x%x)", name, p->status);
    }
}

/* Runs `txo <args>` to its end (at most 30 s) and returns its log; *exited gets the status
 * code, -1 when it did not exit normally. The log is freed with free(). */
static char *run_to_end(const char *tag, const char *sub, const char *const *args, int *exited)
{
    struct testproc p;
    start_txo(&p, tag, sub, args);
    if (!testproc_wait(&p, 30000)) {
        testproc_stop_hard(&p);
        char log[2048];
        fail_msg("txo %s did not exit within 30 s; log:\n%s", sub,
                 keep_libc(log, sizeof(log), testproc_log(&p)));
    }
    *exited = -1;
    for (int code = 0; code < 256; code++)
        if (testproc_exited_with(&p, code))
            *exited = code;
    return testproc_log(&p);
}

/* ---- HTTP ---- */

/* GET url; returns the body (free with json_decref) parsed as JSON; 200 required. */
static json_t *get_json(struct rig *r, const char *url)
{
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_http_get(r->http, url, NULL, &resp, &err);
    json_error_t jerr;
    json_t *v =
        rc == 0 ? json_loadb(resp.body != NULL ? resp.body : "", resp.body_len, 0, &jerr) : NULL;
    char body[512];
    snprintf(body, sizeof(body), "%s", resp.body != NULL ? resp.body : "");
    txo_http_client_response_release(&resp);
    if (rc != 0)
        fail_msg("GET %s: %s", url, err.msg);
    if (v == NULL)
        fail_msg("GET %s: not JSON (%s): %s", url, jerr.text, body);
    return v;
}

/* POSTs a behaviour change to the fake service's /control. */
static void fake_control(struct rig *r, const char *json)
{
    char url[96];
    snprintf(url, sizeof(url), "%s/control", r->fake_url);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_http_post_json(r->http, url, NULL, NULL, json, strlen(json), &resp, &err);
    txo_http_client_response_release(&resp);
    if (rc != 0)
        fail_msg("POST %s %s: %s", url, json, err.msg);
}

/* A counter of the fake service's /stats ("charge_requests", ...). */
static int64_t fake_stat(struct rig *r, const char *field)
{
    char url[96];
    snprintf(url, sizeof(url), "%s/stats", r->fake_url);
    json_t *v = get_json(r, url);
    json_t *f = json_object_get(v, field);
    bool ok = json_is_integer(f);
    int64_t n = ok ? json_integer_value(f) : 0;
    json_decref(v);
    if (!ok)
        fail_msg("/stats has no integer %s", field);
    return n;
}

/* A per-order counter of the fake service's /stats?order_id= ("charges", "refunds", ...). */
static int64_t fake_order_stat(struct rig *r, int64_t order_id, const char *field)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/stats?order_id=%lld", r->fake_url, (long long)order_id);
    json_t *v = get_json(r, url);
    json_t *f = json_object_get(json_object_get(v, "order"), field);
    bool ok = json_is_integer(f);
    int64_t n = ok ? json_integer_value(f) : 0;
    json_decref(v);
    if (!ok)
        fail_msg("/stats?order_id=%lld has no integer order.%s", (long long)order_id, field);
    return n;
}

/* POST /orders (one unit of SKU) with Idempotency-Key key; 201 required; the new order id. */
static int64_t place_order(struct rig *r, const char *key)
{
    char url[96];
    snprintf(url, sizeof(url), "%s/orders", r->api_url);
    char body[160];
    snprintf(body, sizeof(body),
             "{\"customer_id\":7,\"items\":[{\"sku\":\"%s\",\"qty\":1,\"price_cents\":%d}]}", SKU,
             PRICE_CENTS);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_http_post_json(r->http, url, key, NULL, body, strlen(body), &resp, &err);
    long status = resp.status;
    json_t *v = rc == 0 ? json_loadb(resp.body, resp.body_len, 0, NULL) : NULL;
    json_t *id = json_object_get(v, "order_id");
    int64_t order_id = json_is_integer(id) ? json_integer_value(id) : 0;
    char answer[512];
    snprintf(answer, sizeof(answer), "%s", resp.body != NULL ? resp.body : "");
    json_decref(v);
    txo_http_client_response_release(&resp);
    if (rc != 0 || status != 201 || order_id <= 0) {
        dump_logs(r);
        fail_msg("POST /orders key=%s: rc=%d status=%ld %s %s", key, rc, status, err.msg, answer);
    }
    return order_id;
}

/* The value of the /metrics series `series` (name{labels} exactly as rendered); -1 when the
 * series is not there. */
static double metric(struct rig *r, const char *series)
{
    char url[96];
    snprintf(url, sizeof(url), "%s/metrics", r->api_url);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    txo_error_init(&err);
    if (txo_http_get(r->http, url, NULL, &resp, &err) != 0)
        fail_msg("GET %s: %s", url, err.msg);
    double v = -1;
    size_t len = strlen(series);
    for (const char *line = resp.body; line != NULL && *line != '\0';) {
        if (strncmp(line, series, len) == 0 && line[len] == ' ') {
            v = strtod(line + len + 1, NULL);
            break;
        }
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    txo_http_client_response_release(&resp);
    return v;
}

/* ---- database ---- */

/* orders.status of order_id into buf ("" when there is no such order). */
static void order_status(struct rig *r, int64_t order_id, char *buf, size_t cap)
{
    struct txo_param p[] = {txo_p_i64(order_id)};
    char *s = testdb_str(r->t.db, "SELECT status FROM orders WHERE id = ?", p, 1);
    snprintf(buf, cap, "%s", s != NULL ? s : "");
    txo_free(s);
}

/* The order's saga id into id ("" when it has none yet). */
static void saga_of(struct rig *r, int64_t order_id, char id[TXO_SAGA_ID_LEN])
{
    char corr[48];
    snprintf(corr, sizeof(corr), "order:%lld", (long long)order_id);
    struct txo_param p[] = {txo_p_str(corr)};
    char *s = testdb_str(r->t.db, "SELECT id FROM saga_instances WHERE correlation_id = ?", p, 1);
    snprintf(id, TXO_SAGA_ID_LEN, "%s", s != NULL ? s : "");
    txo_free(s);
}

/* saga_instances.status of the order's saga into buf ("" when it has none). */
static void saga_status(struct rig *r, int64_t order_id, char *buf, size_t cap)
{
    char corr[48];
    snprintf(corr, sizeof(corr), "order:%lld", (long long)order_id);
    struct txo_param p[] = {txo_p_str(corr)};
    char *s =
        testdb_str(r->t.db, "SELECT status FROM saga_instances WHERE correlation_id = ?", p, 1);
    snprintf(buf, cap, "%s", s != NULL ? s : "");
    txo_free(s);
}

/* A column of the order's saga step `step` (status, attempts, error) as text (free with
 * txo_free; NULL for NULL). */
static char *step_col(struct rig *r, int64_t order_id, const char *step, const char *col)
{
    char corr[48];
    snprintf(corr, sizeof(corr), "order:%lld", (long long)order_id);
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT CAST(s.%s AS CHAR) FROM saga_steps s JOIN saga_instances i ON i.id = "
             "s.saga_id WHERE i.correlation_id = ? AND s.step_name = ?",
             col);
    struct txo_param p[] = {txo_p_str(corr), txo_p_str(step)};
    return testdb_str(r->t.db, sql, p, 2);
}

static void assert_step(struct rig *r, int64_t order_id, const char *step, const char *status)
{
    char got[32];
    keep_txo(got, sizeof(got), step_col(r, order_id, step, "status"));
    if (strcmp(got, status) != 0) {
        dump_logs(r);
        fail_msg("order %lld step %s is %s, want %s", (long long)order_id, step, got, status);
    }
}

static int64_t payments_with(struct rig *r, int64_t order_id, const char *status)
{
    struct txo_param p[] = {txo_p_i64(order_id), txo_p_str(status)};
    return testdb_i64(r->t.db, "SELECT COUNT(*) FROM payments WHERE order_id = ? AND status = ?", p,
                      2);
}

static int64_t payments_of(struct rig *r, int64_t order_id)
{
    struct txo_param p[] = {txo_p_i64(order_id)};
    return testdb_i64(r->t.db, "SELECT COUNT(*) FROM payments WHERE order_id = ?", p, 1);
}

/* The SKU's inventory row: a CONFIRMED order keeps its unit reserved (it ships), a cancelled
 * one gave it back to available. */
static void assert_stock(struct rig *r, int64_t available, int64_t reserved)
{
    struct txo_param p[] = {txo_p_str(SKU)};
    assert_int_equal(testdb_i64(r->t.db, "SELECT available FROM inventory WHERE sku = ?", p, 1),
                     available);
    assert_int_equal(testdb_i64(r->t.db, "SELECT reserved FROM inventory WHERE sku = ?", p, 1),
                     reserved);
}

static bool is_final_order(const char *status)
{
    return strcmp(status, "CONFIRMED") == 0 || strcmp(status, "CANCELLED") == 0;
}

/*
 * Waits until the order is CONFIRMED or CANCELLED (both set in the saga's last transaction,
 * with its terminal status), at most until deadline_ms (txo_monotonic_ms). Writes the status
 * to buf; fails the test on timeout.
 */
static void wait_order_final(struct rig *r, int64_t order_id, int64_t deadline_ms, char *buf,
                             size_t cap)
{
    for (;;) {
        order_status(r, order_id, buf, cap);
        if (is_final_order(buf))
            return;
        if (txo_monotonic_ms() >= deadline_ms)
            break;
        txo_sleep_ms(20);
    }
    char saga[32];
    saga_status(r, order_id, saga, sizeof(saga));
    dump_logs(r);
    fail_msg("order %lld still %s (saga %s) at the deadline", (long long)order_id, buf,
             saga[0] != '\0' ? saga : "none");
}

/* Waits until the order's saga is in `want`, at most timeout_ms. */
static void wait_saga_status(struct rig *r, int64_t order_id, const char *want, int timeout_ms)
{
    int64_t deadline = txo_monotonic_ms() + timeout_ms;
    char st[32];
    for (;;) {
        saga_status(r, order_id, st, sizeof(st));
        if (strcmp(st, want) == 0)
            return;
        if (txo_monotonic_ms() >= deadline)
            break;
        txo_sleep_ms(20);
    }
    dump_logs(r);
    fail_msg("saga of order %lld is %s after %d ms, want %s", (long long)order_id,
             st[0] != '\0' ? st : "(none)", timeout_ms, want);
}

/* ---- log lines ---- */

/* Lines of log containing every one of the NULL-terminated needles. */
static unsigned count_lines(const char *log, const char *const *needles)
{
    unsigned n = 0;
    for (const char *line = log; *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
        char *copy = strndup(line, len);
        assert_non_null(copy);
        bool all = true;
        for (size_t i = 0; needles[i] != NULL && all; i++)
            all = strstr(copy, needles[i]) != NULL;
        free(copy);
        n += all;
        if (end == NULL)
            break;
        line = end + 1;
    }
    return n;
}

/* ------------------------------------------------------------------------------------------ */
/* The payment service hangs */

/* Every span an OTLP receiver recorded in file (one JSON line per request, its body the
 * ExportTraceServiceRequest): one array of the span objects (new reference). */
static json_t *exported_spans(const char *file)
{
    json_t *all = json_array();
    FILE *f = fopen(file, "r");
    if (f == NULL)
        fail_msg("no OTLP request was recorded in %s", file);
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *rec = json_loads(line, 0, NULL);
        json_t *body = json_loads(json_string_value(json_object_get(rec, "body")), 0, NULL);
        size_t i, j;
        json_t *rs, *ss;
        json_array_foreach(json_object_get(body, "resourceSpans"), i, rs)
            json_array_foreach(json_object_get(rs, "scopeSpans"), j, ss)
                json_array_extend(all, json_object_get(ss, "spans"));
        json_decref(body);
        json_decref(rec);
    }
    free(line);
    fclose(f);
    return all;
}

/* The exported span named name (and of trace trace_id when not NULL), or NULL. */
static json_t *span_named(json_t *spans, const char *name, const char *trace_id)
{
    size_t i;
    json_t *s;
    json_array_foreach(spans, i, s)
    {
        const char *n = json_string_value(json_object_get(s, "name"));
        const char *t = json_string_value(json_object_get(s, "traceId"));
        if (n != NULL && strcmp(n, name) == 0 && (trace_id == NULL || strcmp(t, trace_id) == 0))
            return s;
    }
    return NULL;
}

static const char *span_str(json_t *s, const char *key)
{
    const char *v = json_string_value(json_object_get(s, key));
    return v != NULL ? v : "";
}

/* The exported span named name that has a link to span span_id, or NULL. */
static json_t *span_linking(json_t *spans, const char *name, const char *span_id)
{
    size_t i, k;
    json_t *s, *l;
    json_array_foreach(spans, i, s)
    {
        if (strcmp(span_str(s, "name"), name) != 0)
            continue;
        json_array_foreach(json_object_get(s, "links"), k, l)
        {
            if (strcmp(span_str(l, "spanId"), span_id) == 0)
                return s;
        }
    }
    return NULL;
}

/*
 * One trace from the request to CONFIRMED: a POST carrying a traceparent; every outbox event
 * of that order (OrderCreated from the API, the saga's events from its steps) carries the same
 * trace id with a span of its own, and the payment and shipment services received that trace
 * id in the traceparent of their calls (the fake service records them). With
 * --otlp-endpoint, the spans reach an OTLP receiver that is not ours (Python's http.server)
 * with their links: the request's SERVER span (a child of the caller's), the relay's PRODUCER
 * span linked to it, the worker's CONSUMER span (its child), each saga step's span (children
 * of the consume span) and each call's CLIENT span, whose id the service received.
 */
/* How the order's saga is run: one saga at a time, in batches, or started by a command. */
enum trace_mode { TRACE_SINGLE, TRACE_BATCHED, TRACE_ASYNC };

static void check_one_trace(struct rig *r, enum trace_mode mode)
{
    const char *fake_args[] = {NULL};
    start_fake(r, fake_args);
    unsigned otlp_port = testproc_free_port();
    char otlp_file[96], otlp_port_s[16], otlp_flag[96];
    snprintf(otlp_file, sizeof(otlp_file), "/tmp/txo_test_otlp_%ld.jsonl", (long)getpid());
    unlink(otlp_file);
    snprintf(otlp_port_s, sizeof(otlp_port_s), "%u", otlp_port);
    snprintf(otlp_flag, sizeof(otlp_flag), "--otlp-endpoint=http://127.0.0.1:%u/v1/traces",
             otlp_port);
    struct testproc receiver;
    const char *rargv[] = {"/usr/bin/python3",
                           testserver_source_path("tests/support/http_recorder.py"), otlp_port_s,
                           otlp_file, NULL};
    testproc_start(&receiver, "otlp_recorder", rargv, NULL);
    if (!testproc_wait_port(otlp_port, 10000))
        fail_msg("the OTLP receiver did not listen on %u", otlp_port);
    /* --saga-batch 1 runs each saga on its own; the default runs a step of many sagas in one
     * transaction and their calls together. */
    const char *up_args[] = {r->payment_flag,
                             r->shipment_flag,
                             otlp_flag,
                             "--log-level=debug",
                             mode == TRACE_SINGLE ? "--saga-batch=1" : "--saga-batch=64",
                             mode == TRACE_ASYNC ? "--async" : NULL,
                             NULL};
    start_up(r, up_args);

    static const char trace_id[] = "4bf92f3577b34da6a3ce929d0e0e4736";
    char url[96], body[160];
    snprintf(url, sizeof(url), "%s/orders", r->api_url);
    snprintf(body, sizeof(body),
             "{\"customer_id\":7,\"items\":[{\"sku\":\"%s\",\"qty\":1,\"price_cents\":%d}]}", SKU,
             PRICE_CENTS);
    const char *headers[] = {"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                             NULL};
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(
        txo_http_post_json(r->http, url, "trace-1", headers, body, strlen(body), &resp, &err), 0);
    json_t *v = json_loadb(resp.body, resp.body_len, 0, NULL);
    int64_t id = json_integer_value(json_object_get(v, "order_id"));
    json_decref(v);
    txo_http_client_response_release(&resp);
    assert_true(id > 0);
    char status[32];
    wait_order_final(r, id, txo_monotonic_ms() + 15000, status, sizeof(status));
    assert_string_equal(status, "CONFIRMED");

    /* Every event of the order: the request's trace, a span of its own for each step. */
    struct txo_param p[] = {txo_p_i64(id)};
    int64_t events =
        testdb_i64(r->t.db, "SELECT COUNT(*) FROM outbox_events WHERE aggregate_id = ?", p, 1);
    int64_t traced =
        testdb_i64(r->t.db,
                   "SELECT COUNT(*) FROM outbox_events WHERE aggregate_id = ? AND "
                   "SUBSTRING(traceparent, 4, 32) = '4bf92f3577b34da6a3ce929d0e0e4736'",
                   p, 1);
    int64_t n_spans =
        testdb_i64(r->t.db,
                   "SELECT COUNT(DISTINCT SUBSTRING(traceparent, 37, 16)) FROM outbox_events WHERE "
                   "aggregate_id = ?",
                   p, 1);
    if (events < 3 || traced != events || n_spans != events)
        fail_msg("order %lld: %lld events, %lld in the request's trace, %lld distinct spans",
                 (long long)id, (long long)events, (long long)traced, (long long)n_spans);

    /* What the services received. */
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/stats?order_id=%lld", r->fake_port,
             (long long)id);
    json_t *st = get_json(r, url);
    json_t *tp = json_object_get(json_object_get(st, "order"), "traceparent");
    const char *charge = json_string_value(json_object_get(tp, "/payments/charge"));
    const char *ship = json_string_value(json_object_get(tp, "/shipments/create"));
    if (charge == NULL || ship == NULL || strncmp(charge + 3, trace_id, 32) != 0 ||
        strncmp(ship + 3, trace_id, 32) != 0 || strcmp(charge, ship) == 0)
        fail_msg("services got traceparent %s (charge) and %s (shipment)",
                 charge != NULL ? charge : "none", ship != NULL ? ship : "none");
    char charge_span[17], created_span[17];
    snprintf(charge_span, sizeof(charge_span), "%.16s", charge + 36);
    char *created = testdb_str(r->t.db,
                               "SELECT SUBSTRING(traceparent, 37, 16) FROM outbox_events WHERE "
                               "aggregate_id = ? AND event_type = 'OrderCreated'",
                               p, 1);
    snprintf(created_span, sizeof(created_span), "%s", created != NULL ? created : "");
    txo_free(created);
    json_decref(st);
    /* The API's line about this order carries the request's trace. */
    char *log = testproc_log(&r->up);
    char order_kv[48];
    snprintf(order_kv, sizeof(order_kv), "order_id=%lld", (long long)id);
    const char *api_line[] = {"component=api", "msg=\"order created\"", order_kv,
                              "trace_id=4bf92f3577b34da6a3ce929d0e0e4736", NULL};
    if (count_lines(log, api_line) != 1) {
        dump_logs(r);
        fail_msg("no API line for order %lld with the request's trace_id", (long long)id);
    }
    free(log);
    stop_clean(r, &r->up, "txo up"); /* sends the spans still queued */
    testproc_stop_hard(&receiver);

    json_t *spans = exported_spans(otlp_file);
    json_t *server = span_named(spans, "POST /orders", trace_id);
    json_t *consume = span_named(spans, "OrderCreated process", trace_id);
    /* With --async the saga is started by the StartOrderSaga command the request enqueued. */
    json_t *starter =
        mode == TRACE_ASYNC ? span_named(spans, "StartOrderSaga process", trace_id) : consume;
    json_t *step = span_named(spans, "ChargePayment", trace_id);
    json_t *call = span_named(spans, "ChargePayment call", trace_id);
    json_t *publish = span_linking(spans, "outbox publish", created_span); /* OrderCreated's */
    if (server == NULL || consume == NULL || starter == NULL || step == NULL || call == NULL ||
        publish == NULL)
        fail_msg("spans missing (server %d, consume %d, saga starter %d, step %d, call %d, "
                 "publish %d) among %zu",
                 server != NULL, consume != NULL, starter != NULL, step != NULL, call != NULL,
                 publish != NULL, json_array_size(spans));
    /* The request is a child of the caller's span, OrderCreated was appended in it, the
     * consume span is its child, the step the span of what started the saga (the consume span,
     * or with --async the command's), the call the step's, and the payment service received
     * the call's span. */
    assert_string_equal(span_str(server, "parentSpanId"), "00f067aa0ba902b7");
    assert_string_equal(span_str(server, "spanId"), created_span);
    assert_int_equal(json_integer_value(json_object_get(server, "kind")), 2);
    assert_string_equal(span_str(consume, "parentSpanId"), created_span);
    assert_int_equal(json_integer_value(json_object_get(consume, "kind")), 5);
    assert_string_equal(span_str(starter, "parentSpanId"), created_span);
    assert_int_equal(json_integer_value(json_object_get(starter, "kind")), 5);
    assert_string_equal(span_str(step, "parentSpanId"), span_str(starter, "spanId"));
    assert_string_equal(span_str(call, "parentSpanId"), span_str(step, "spanId"));
    assert_int_equal(json_integer_value(json_object_get(call, "kind")), 3);
    assert_string_equal(span_str(call, "spanId"), charge_span);
    assert_int_equal(json_integer_value(json_object_get(publish, "kind")), 4);
    /* The POST was committed by the order writer's group (--order-batch): a span of its own
     * trace linking the request's. */
    bool grouped = span_linking(spans, "orders group write", created_span) != NULL;
    if (!grouped)
        fail_msg("no \"orders group write\" span links the request's span %s", created_span);
    if (mode != TRACE_SINGLE) {
        /* The batch that ran the step is a span of its own trace linking the saga's try. */
        json_t *batch = span_linking(spans, "ChargePayment batch", span_str(step, "spanId"));
        if (batch == NULL)
            fail_msg("no \"ChargePayment batch\" span links the step's span %s",
                     span_str(step, "spanId"));
        assert_string_equal(span_str(batch, "parentSpanId"), "");
    }
    json_decref(spans);
    unlink(otlp_file);
}

static void test_trace_reaches_events_and_services(void **state)
{
    check_one_trace(*state, TRACE_SINGLE);
}

/* The same trace when the saga's steps run in batches of many sagas. */
static void test_trace_through_saga_batches(void **state)
{
    check_one_trace(*state, TRACE_BATCHED);
}

/* The same trace when the request queues a StartOrderSaga command that starts the saga. */
static void test_trace_through_async_command(void **state)
{
    check_one_trace(*state, TRACE_ASYNC);
}

static void test_hanging_payment_times_out(void **state)
{
    struct rig *r = *state;
    const char *fake_args[] = {"--hang", NULL};
    start_fake(r, fake_args);
    const char *up_args[] = {r->payment_flag,
                             "--service-timeout=500",
                             "--service-retries=1",
                             "--step-attempts=2",
                             "--saga-threads=2",
                             "--compensation-retry=1",
                             "--compensation-retry-max=1",
                             NULL};
    start_up(r, up_args);

    /*
     * Every payment call hangs. ChargePayment: 2 tries (--step-attempts), each one HTTP call
     * (--service-retries 1) that libcurl ends at --service-timeout 500 ms. A timed-out charge
     * may have been applied, so the step is compensated like a completed one: RefundPayment
     * is called, and hangs too: 2 more tries, then the saga is COMPENSATION_FAILED with an
     * automatic retry due in about 1 s. About 4 x 500 ms in all; asserted < 15 s, and at least
     * 2 x 500 ms (the tries waited for their timeout instead of failing at once).
     */
    int64_t t0 = txo_monotonic_ms();
    int64_t hung = place_order(r, "l-hung-1");
    wait_saga_status(r, hung, "COMPENSATION_FAILED", 15000);
    int64_t took = txo_monotonic_ms() - t0;
    print_message("hang: hung order's saga COMPENSATION_FAILED after %lld ms\n", (long long)took);
    if (took < 1900)
        fail_msg("hung order's saga failed after %lld ms: less than its 4 tries x 500 ms",
                 (long long)took);
    char st[32];
    order_status(r, hung, st, sizeof(st));
    assert_string_equal(st, "CREATED"); /* not cancelled while the refund is owed */
    assert_step(r, hung, "ChargePayment", "COMPENSATION_FAILED");
    char remote[32];
    keep_txo(remote, sizeof(remote), step_col(r, hung, "ChargePayment", "remote_state"));
    assert_string_equal(remote, "UNKNOWN");
    char code[16];
    keep_txo(code, sizeof(code), step_col(r, hung, "ChargePayment", "error_code"));
    assert_int_equal(strtol(code, NULL, 10), TXO_EUNKNOWN);
    assert_int_equal(payments_of(r, hung), 0);
    assert_int_equal(fake_stat(r, "charge_requests"), 2);
    assert_int_equal(fake_stat(r, "charges"), 0);
    double timeouts =
        metric(r, "txo_external_request_timeouts_total{service=\"payment\",operation=\"charge\"}");
    print_message("hang: txo_external_request_timeouts_total{payment,charge} = %g\n", timeouts);
    assert_true(timeouts == 2); /* one per try: --service-retries 1 x --step-attempts 2 */

    /* The runners are not stuck, and the owed refund lands at the next automatic retry once
     * the service answers again (a no-op there: nothing was charged). */
    fake_control(r, "{\"hang\":false}");
    t0 = txo_monotonic_ms();
    int64_t ok[3];
    for (int i = 0; i < 3; i++) {
        char key[32];
        snprintf(key, sizeof(key), "l-ok-%d", i);
        ok[i] = place_order(r, key);
    }
    for (int i = 0; i < 3; i++) {
        wait_order_final(r, ok[i], t0 + 10000, st, sizeof(st));
        assert_string_equal(st, "CONFIRMED");
    }
    print_message("hang: 3 orders CONFIRMED after %lld ms\n", (long long)(txo_monotonic_ms() - t0));
    for (int i = 0; i < 3; i++) {
        assert_int_equal(fake_order_stat(r, ok[i], "charges"), 1);
        assert_int_equal(fake_order_stat(r, ok[i], "charged_cents"), PRICE_CENTS);
        assert_int_equal(payments_with(r, ok[i], "CHARGED"), 1);
    }
    wait_order_final(r, hung, t0 + 15000, st, sizeof(st));
    assert_string_equal(st, "CANCELLED");
    wait_saga_status(r, hung, "COMPENSATED", 5000);
    assert_step(r, hung, "ChargePayment", "COMPENSATED");
    assert_step(r, hung, "ReserveStock", "COMPENSATED");
    assert_int_equal(fake_order_stat(r, hung, "refunds"), 1);
    assert_int_equal(fake_order_stat(r, hung, "charges"), 0);
    assert_int_equal(fake_stat(r, "charges"), 3);
    assert_stock(r, STOCK - 3, 3); /* the 3 CONFIRMED orders hold theirs */
    stop_clean(r, &r->up, "txo up");
    stop_clean(r, &r->fake, "txo-fake-services");
}

/* Waits until the order's step exists and has left RUNNING/PENDING (its tries are over). */
static void wait_step_settled(struct rig *r, int64_t order_id, const char *step, int timeout_ms)
{
    int64_t deadline = txo_monotonic_ms() + timeout_ms;
    char st[32] = "";
    while (txo_monotonic_ms() < deadline) {
        keep_txo(st, sizeof(st), step_col(r, order_id, step, "status"));
        if (strcmp(st, "(null)") != 0 && strcmp(st, "PENDING") != 0 && strcmp(st, "RUNNING") != 0)
            return;
        txo_sleep_ms(10);
    }
    dump_logs(r);
    fail_msg("order %lld step %s still %s after %d ms", (long long)order_id, step, st, timeout_ms);
}

/*
 * The other kind of payment timeout: the service is slow, not hung. It applies the charge
 * after the caller gave up (the fake service sleeps --latency-ms before the effect), so the
 * timed-out call HAD an effect: a timeout's outcome is unknown. Then the breaker opens
 * (--breaker-failures 1), so the step's later try is refused without a request: that refusal must
 * not erase the unknown outcome of the first try. The saga must not leave the customer charged for
 * a cancelled order: the charge is refunded.
 */
static void test_slow_payment_charge_is_refunded(void **state)
{
    struct rig *r = *state;
    const char *fake_args[] = {"--latency-ms", "800", NULL};
    start_fake(r, fake_args);
    const char *up_args[] = {r->payment_flag,      "--service-timeout=500",  "--service-retries=1",
                             "--step-attempts=2",  "--saga-threads=2",       "--breaker-failures=1",
                             "--breaker-open=800", "--compensation-retry=1", NULL};
    start_up(r, up_args);

    int64_t t0 = txo_monotonic_ms();
    int64_t id = place_order(r, "l-slow-1");
    wait_step_settled(r, id, "ChargePayment", 15000);
    /* The refund is not slow: the service is back to normal for it. */
    fake_control(r, "{\"latency_ms\":0}");
    char st[32];
    wait_order_final(r, id, t0 + 15000, st, sizeof(st));
    if (strcmp(st, "CANCELLED") != 0)
        dump_logs(r);
    assert_string_equal(st, "CANCELLED");
    assert_int_equal(fake_order_stat(r, id, "charges"), 1);
    assert_int_equal(fake_order_stat(r, id, "refunds"), 1);
    assert_int_equal(fake_stat(r, "charge_requests"), 1); /* the second try met the breaker */
    char remote[32];
    keep_txo(remote, sizeof(remote), step_col(r, id, "ChargePayment", "remote_state"));
    assert_string_equal(remote, "UNKNOWN");
    assert_step(r, id, "ChargePayment", "COMPENSATED");
    assert_stock(r, STOCK, 0);
    stop_clean(r, &r->up, "txo up");
    stop_clean(r, &r->fake, "txo-fake-services");
}

/*
 * A hang for the shipment: CreateShipment times out (the fake service hangs on
 * /shipments/create only). Its outcome is unknown, so it is compensated like a completed step:
 * CancelShipment is called (not hung), then the charge that did happen is refunded.
 */
static void test_shipment_timeout_is_cancelled(void **state)
{
    struct rig *r = *state;
    const char *fake_args[] = {"--hang", "--fail-path=/shipments/create", NULL};
    start_fake(r, fake_args);
    const char *up_args[] = {r->payment_flag,
                             r->shipment_flag,
                             "--service-timeout=500",
                             "--service-retries=1",
                             "--step-attempts=2",
                             "--poll=50",
                             NULL};
    start_up(r, up_args);

    int64_t t0 = txo_monotonic_ms();
    int64_t id = place_order(r, "l-ship-1");
    char st[32];
    wait_order_final(r, id, t0 + 15000, st, sizeof(st));
    assert_string_equal(st, "CANCELLED");
    assert_step(r, id, "CreateShipment", "COMPENSATED");
    assert_step(r, id, "ChargePayment", "COMPENSATED");
    assert_int_equal(fake_order_stat(r, id, "charges"), 1);
    assert_int_equal(fake_order_stat(r, id, "refunds"), 1);
    assert_int_equal(fake_order_stat(r, id, "cancels"), 1);
    assert_int_equal(testdb_q(r->t.db, "SELECT COUNT(*) FROM command_queue"), 0);
    stop_clean(r, &r->up, "txo up");
    stop_clean(r, &r->fake, "txo-fake-services");
}

/*
 * The customer cancels while CreateShipment's call is in flight (the service is slow: it
 * creates the shipment after --latency-ms). The call holds no lock, so the cancel (If-Match
 * on the order's version) succeeds at once; the shipment is then created at the service, the
 * step's local part finds the order CANCELLED and fails: its call took effect, so it is undone
 * (CancelShipment), then the charge is refunded. No live shipment, no kept charge.
 */
static void test_customer_cancel_during_shipment_call(void **state)
{
    struct rig *r = *state;
    const char *fake_args[] = {"--latency-ms", "1500", NULL};
    start_fake(r, fake_args);
    const char *up_args[] = {r->payment_flag, r->shipment_flag, "--service-timeout=5000",
                             "--service-retries=1", NULL};
    start_up(r, up_args);

    int64_t id = place_order(r, "cancel-race-1");
    /* Wait until the shipment call is in flight. */
    int64_t deadline = txo_monotonic_ms() + 15000;
    char remote[32] = "";
    while (txo_monotonic_ms() < deadline) {
        keep_txo(remote, sizeof(remote), step_col(r, id, "CreateShipment", "remote_state"));
        if (strcmp(remote, "CALLING") == 0)
            break;
        txo_sleep_ms(10);
    }
    assert_string_equal(remote, "CALLING");

    char url[128];
    snprintf(url, sizeof(url), "%s/orders/%lld", r->api_url, (long long)id);
    json_t *order = get_json(r, url);
    json_t *version = json_object_get(order, "version");
    assert_true(json_is_integer(version));
    char if_match[64];
    snprintf(if_match, sizeof(if_match), "If-Match: \"%lld\"",
             (long long)json_integer_value(version));
    json_decref(order);
    const char *const headers[] = {if_match, NULL};
    snprintf(url, sizeof(url), "%s/orders/%lld/cancel", r->api_url, (long long)id);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    txo_error_init(&err);
    int64_t t0 = txo_monotonic_ms();
    int rc = txo_http_post_json(r->http, url, NULL, headers, "{}", 2, &resp, &err);
    int64_t took = txo_monotonic_ms() - t0;
    long status = resp.status;
    txo_http_client_response_release(&resp);
    if (rc != 0 || status != 200)
        fail_msg("cancel: rc=%d status=%ld %s", rc, status, err.msg);
    print_message("cancel answered 200 in %lld ms while the shipment call was in flight\n",
                  (long long)took);
    assert_true(took < 1000); /* nothing waited for the call's locks: there are none */

    char st[32];
    wait_saga_status(r, id, "COMPENSATED", 20000);
    order_status(r, id, st, sizeof(st));
    assert_string_equal(st, "CANCELLED");
    assert_step(r, id, "CreateShipment", "COMPENSATED");
    keep_txo(remote, sizeof(remote), step_col(r, id, "CreateShipment", "remote_state"));
    assert_string_equal(remote, "DONE");
    assert_int_equal(fake_order_stat(r, id, "shipments"), 1);
    assert_int_equal(fake_order_stat(r, id, "cancels"), 1);
    assert_int_equal(fake_order_stat(r, id, "charges"), 1);
    assert_int_equal(fake_order_stat(r, id, "refunds"), 1);
    assert_int_equal(testdb_q(r->t.db, "SELECT COUNT(*) FROM shipments WHERE status = 'CREATED'"),
                     0);
    assert_int_equal(testdb_q(r->t.db, "SELECT COUNT(*) FROM payments WHERE status = 'CHARGED'"),
                     0);
    /* One OrderCancelled: the customer's; the saga's end wrote none. */
    assert_int_equal(testdb_q(r->t.db, "SELECT COUNT(*) FROM outbox_events WHERE event_type = "
                                       "'OrderCancelled'"),
                     1);
    assert_stock(r, STOCK, 0);
    stop_clean(r, &r->up, "txo up");
    stop_clean(r, &r->fake, "txo-fake-services");
}

/* ------------------------------------------------------------------------------------------ */
/* The payment service is down; the circuit breaker */

#define BREAKER_STATE    "txo_circuit_breaker_state{service=\"payment\"}"
#define BREAKER_REJECTED "txo_external_rejected_total{service=\"payment\",guard=\"breaker\"}"

static void test_breaker_opens_fails_fast_and_closes(void **state)
{
    struct rig *r = *state;
    const char *fake_args[] = {"--fail-rate", "1", NULL};
    start_fake(r, fake_args);
    const char *up_args[] = {r->payment_flag,
                             "--breaker-failures=3",
                             "--breaker-open=2000",
                             "--service-retries=1",
                             "--step-attempts=1",
                             "--saga-threads=1",
                             NULL};
    start_up(r, up_args);
    assert_true(metric(r, BREAKER_STATE) == 0);

    char st[32];
    char key[32];
    int64_t ids[8];
    /* Orders 1..3: each ChargePayment is one request (--service-retries 1, --step-attempts
     * 1), answered 503: the order is cancelled and the breaker counts a failure. */
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof(key), "m-%d", i + 1);
        ids[i] = place_order(r, key);
        wait_order_final(r, ids[i], txo_monotonic_ms() + 10000, st, sizeof(st));
        assert_string_equal(st, "CANCELLED");
        assert_int_equal(fake_stat(r, "charge_requests"), i + 1);
        if (i < 2)
            assert_true(metric(r, BREAKER_STATE) == 0);
    }
    /* The third consecutive failure opened it. */
    assert_true(metric(r, BREAKER_STATE) == 1);
    assert_true(metric(r, BREAKER_REJECTED) <= 0); /* absent (-1) or 0 so far */

    /* Orders 4..6 are refused by the open breaker without a request, and fail fast. The
     * three must be done within --breaker-open 2000 ms of the opening (else a half-open
     * probe would reach the fake service): each takes ~100 ms here. */
    for (int i = 3; i < 6; i++) {
        snprintf(key, sizeof(key), "m-%d", i + 1);
        int64_t t0 = txo_monotonic_ms();
        ids[i] = place_order(r, key);
        wait_order_final(r, ids[i], t0 + 10000, st, sizeof(st));
        int64_t took = txo_monotonic_ms() - t0;
        print_message("breaker: order %d %s %lld ms after its POST (breaker open)\n", i + 1, st,
                      (long long)took);
        assert_string_equal(st, "CANCELLED");
        if (took >= 2000)
            fail_msg("order %d took %lld ms with the breaker open: not failing fast", i + 1,
                     (long long)took);
        assert_int_equal(fake_stat(r, "charge_requests"), 3);
        char error[600];
        keep_txo(error, sizeof(error), step_col(r, ids[i], "ChargePayment", "error"));
        if (strstr(error, "circuit payment is open") == NULL)
            fail_msg("order %d ChargePayment error should name the open circuit: %s", i + 1, error);
    }
    assert_true(metric(r, BREAKER_STATE) == 1);
    double rejected = metric(r, BREAKER_REJECTED);
    print_message("breaker: %s = %g\n", BREAKER_REJECTED, rejected);
    assert_true(rejected >= 3); /* one refused call per order 4..6 */
    for (int i = 0; i < 6; i++) {
        char saga[32];
        saga_status(r, ids[i], saga, sizeof(saga));
        assert_string_equal(saga, "COMPENSATED"); /* ReserveStock undone */
        assert_int_equal(payments_of(r, ids[i]), 0);
    }
    assert_int_equal(fake_stat(r, "charges"), 0);
    assert_stock(r, STOCK, 0);

    /* The service recovers; after the open time the next call is the half-open probe. */
    fake_control(r, "{\"fail_rate\":0}");
    txo_sleep_ms(2200);
    ids[6] = place_order(r, "m-7");
    wait_order_final(r, ids[6], txo_monotonic_ms() + 10000, st, sizeof(st));
    assert_string_equal(st, "CONFIRMED");
    assert_int_equal(fake_stat(r, "charge_requests"), 4);
    assert_true(metric(r, BREAKER_STATE) == 0);
    ids[7] = place_order(r, "m-8");
    wait_order_final(r, ids[7], txo_monotonic_ms() + 10000, st, sizeof(st));
    assert_string_equal(st, "CONFIRMED");
    assert_int_equal(fake_stat(r, "charge_requests"), 5);
    assert_true(metric(r, BREAKER_STATE) == 0);
    for (int i = 6; i < 8; i++) {
        assert_int_equal(fake_order_stat(r, ids[i], "charges"), 1);
        assert_int_equal(payments_with(r, ids[i], "CHARGED"), 1);
    }
    assert_int_equal(fake_stat(r, "charges"), 2);
    assert_stock(r, STOCK - 2, 2); /* the 2 CONFIRMED orders hold theirs */
    char *log = testproc_log(&r->up);
    const char *opened[] = {"circuit breaker changed", "service=payment", "to=OPEN", NULL};
    const char *closed[] = {"circuit breaker changed", "service=payment", "from=HALF_OPEN",
                            "to=CLOSED", NULL};
    assert_int_equal(count_lines(log, opened), 1);
    assert_int_equal(count_lines(log, closed), 1);
    free(log);

    stop_clean(r, &r->up, "txo up");
    stop_clean(r, &r->fake, "txo-fake-services");
}

/* ------------------------------------------------------------------------------------------ */
/* A compensation that fails, worker side: COMPENSATION_FAILED sagas retried by `txo worker` */

/* Starts `txo worker --broker none` against the fake service, retrying compensations after 1 s (cap
 * 2 s) and leaving a saga to an operator once its failing step had max_tries tries. */
/* Waits until the worker's log has `count` lines with all needles, at most timeout_ms. */
static void wait_log_lines(struct rig *r, const struct testproc *p, const char *const *needles,
                           unsigned count, int timeout_ms)
{
    int64_t deadline = txo_monotonic_ms() + timeout_ms;
    for (;;) {
        char *log = testproc_log(p);
        unsigned n = count_lines(log, needles);
        free(log);
        if (n >= count)
            return;
        if (txo_monotonic_ms() >= deadline)
            break;
        txo_sleep_ms(50);
    }
    dump_logs(r);
    fail_msg("no %u log line(s) with \"%s\" ... within %d ms", count, needles[0], timeout_ms);
}

static int64_t saga_col_i64(struct rig *r, int64_t order_id, const char *col)
{
    char corr[48];
    snprintf(corr, sizeof(corr), "order:%lld", (long long)order_id);
    char sql[160];
    snprintf(sql, sizeof(sql), "SELECT %s FROM saga_instances WHERE correlation_id = ?", col);
    struct txo_param p[] = {txo_p_str(corr)};
    return testdb_i64(r->t.db, sql, p, 1);
}

/*
 * A compensation keeps failing. Every shipment is refused (422, a business answer: the saga
 * compensates) and every refund fails (503: transient). The saga ends COMPENSATION_FAILED with
 * an automatic retry scheduled (saga_instances.retry_at), retried with backoff; after
 * --compensation-max-tries failures the engine gives up: one error line, no more retries (a
 * later worker does not pick it up either), until an operator runs `txo saga retry`.
 */
static void test_worker_retries_compensation(void **state)
{
    struct rig *r = *state;
    const char *fake_args[] = {"--fail-path", "/payments/refund", "--fail-rate", "1", NULL};
    start_fake(r, fake_args);
    fake_control(r, "{\"ship_decline_rate\":1}");
    const char *up_args[] = {r->payment_flag,
                             r->shipment_flag,
                             "--step-attempts=2",
                             "--service-retries=1",
                             "--compensation-retry=1",
                             "--compensation-retry-max=1",
                             "--compensation-max-tries=2",
                             "--saga-threads=2",
                             NULL};
    start_up(r, up_args);

    int64_t id = place_order(r, "j-1");
    char saga[TXO_SAGA_ID_LEN];
    const char *left[] = {"level=error", "left for an operator", NULL};
    wait_log_lines(r, &r->up, left, 1, 20000);
    saga_of(r, id, saga);
    char st[32];
    saga_status(r, id, st, sizeof(st));
    assert_string_equal(st, "COMPENSATION_FAILED");
    order_status(r, id, st, sizeof(st));
    assert_string_equal(st, "CREATED");             /* not cancelled while the refund is owed */
    assert_step(r, id, "CreateShipment", "FAILED"); /* refused: nothing to undo there */
    assert_step(r, id, "ChargePayment", "COMPENSATION_FAILED");
    assert_step(r, id, "ReserveStock", "COMPLETED"); /* not undone yet: in order */
    /* Two failures (the first scheduled a retry, the second gave up), 2 refund tries each. */
    assert_int_equal(saga_col_i64(r, id, "compensation_tries"), 2);
    assert_int_equal(saga_col_i64(r, id, "retry_at IS NULL"), 1);
    assert_int_equal(fake_stat(r, "refund_requests"), 4);
    assert_int_equal(fake_order_stat(r, id, "charges"), 1);
    txo_sleep_ms(2500); /* more scheduler passes: nothing is retried, no second line */
    assert_int_equal(fake_stat(r, "refund_requests"), 4);
    char *log = testproc_log(&r->up);
    const char *mine[] = {"left for an operator", saga, NULL};
    assert_int_equal(count_lines(log, mine), 1);
    free(log);
    assert_true(metric(r, "txo_saga_compensation_abandoned") == 1);

    /* A second saga, failed once, with its retry due: it is retried and, once the service is
     * back, COMPENSATED, although the given-up one sorts first by id or age. */
    int64_t id2 = place_order(r, "j-2");
    wait_saga_status(r, id2, "COMPENSATION_FAILED", 15000);
    fake_control(r, "{\"fail_rate\":0}");
    int64_t t0 = txo_monotonic_ms();
    wait_order_final(r, id2, t0 + 15000, st, sizeof(st));
    assert_string_equal(st, "CANCELLED");
    wait_saga_status(r, id2, "COMPENSATED", 5000);
    assert_int_equal(fake_order_stat(r, id2, "refunds"), 1);
    saga_status(r, id, st, sizeof(st));
    assert_string_equal(st, "COMPENSATION_FAILED"); /* still left alone */
    stop_clean(r, &r->up, "txo up");

    /* The operator retries it by hand. */
    const char *retry_args[] = {"retry", saga, r->payment_flag, r->shipment_flag, NULL};
    int exited = -1;
    char *out = run_to_end("resil_retry", "saga", retry_args, &exited);
    if (exited != 0)
        fail_msg("txo saga retry exited %d: %s", exited, out != NULL ? out : "");
    free(out);
    saga_status(r, id, st, sizeof(st));
    assert_string_equal(st, "COMPENSATED");
    order_status(r, id, st, sizeof(st));
    assert_string_equal(st, "CANCELLED");
    for (int i = 0; i < 2; i++) {
        int64_t o = i == 0 ? id : id2;
        assert_step(r, o, "ChargePayment", "COMPENSATED");
        assert_step(r, o, "ReserveStock", "COMPENSATED");
        assert_int_equal(payments_with(r, o, "REFUNDED"), 1);
        assert_int_equal(fake_order_stat(r, o, "refunds"), 1);
        assert_int_equal(fake_order_stat(r, o, "charges"), 1);
    }
    assert_stock(r, STOCK, 0);
    stop_clean(r, &r->fake, "txo-fake-services");
}

/* ------------------------------------------------------------------------------------------ */
/* Bad configuration */

/*
 * Runs `txo <sub> <args>` to its end and checks it exits 2 with output containing every one of
 * the NULL-terminated needles (the setting's name and the bad value).
 */
static void expect_refused(const char *tag, const char *sub, const char *const *args,
                           const char *const *needles)
{
    int code = 0;
    char log[2048];
    keep_libc(log, sizeof(log), run_to_end(tag, sub, args, &code));
    const char *missing = NULL;
    for (size_t i = 0; needles[i] != NULL && missing == NULL; i++)
        if (strstr(log, needles[i]) == NULL)
            missing = needles[i];
    if (code != 2 || missing != NULL)
        fail_msg("txo %s %s %s: exit %d (want 2)%s%s%s; output:\n%.600s", sub, args[0],
                 args[1] != NULL ? args[1] : "", code,
                 missing != NULL ? ", the message does not name \"" : "",
                 missing != NULL ? missing : "", missing != NULL ? "\"" : "", log);
}

static void test_bad_payment_url(void **state)
{
    struct rig *r = *state;
    /* --listen: if the URL were accepted, the process must not take port 8080. */
    const char *args[] = {"--payment-url", "ftp://x", "--listen", r->api_listen, NULL};
    const char *needles[] = {"payment-url", "ftp://x", NULL};
    expect_refused("resil_badurl", "up", args, needles);
}

static void test_bad_listen(void **state)
{
    (void)state;
    const char *args[] = {"--listen", "nonsense", NULL};
    const char *needles[] = {"--listen", "nonsense", NULL};
    expect_refused("resil_badlisten", "up", args, needles);
}

static void test_bad_worker_broker(void **state)
{
    (void)state;
    const char *args[] = {"--broker", "pigeon", NULL};
    const char *needles[] = {"--broker", "pigeon", NULL};
    expect_refused("resil_badbroker", "worker", args, needles);
}

/*
 * Every flag must be parsed as itself. The 5th entry of each settings table (--mysql-password
 * of the daemons, --ship-decline-rate of txo-fake-services) must not be taken for --help: with it,
 * a bad --broker must still be refused.
 */
static void test_fifth_setting_is_not_help(void **state)
{
    (void)state;
    const char *args[] = {"--mysql-password", "secret", "--broker", "pigeon", NULL};
    const char *needles[] = {"--broker", "pigeon", NULL};
    expect_refused("resil_password", "worker", args, needles);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trace_reaches_events_and_services),
        cmocka_unit_test(test_trace_through_saga_batches),
        cmocka_unit_test(test_trace_through_async_command),
        cmocka_unit_test(test_hanging_payment_times_out),
        cmocka_unit_test(test_slow_payment_charge_is_refunded),
        cmocka_unit_test(test_shipment_timeout_is_cancelled),
        cmocka_unit_test(test_customer_cancel_during_shipment_call),
        cmocka_unit_test(test_breaker_opens_fails_fast_and_closes),
        cmocka_unit_test(test_worker_retries_compensation),
        cmocka_unit_test(test_bad_payment_url),
        cmocka_unit_test(test_bad_listen),
        cmocka_unit_test(test_bad_worker_broker),
        cmocka_unit_test(test_fifth_setting_is_not_help),
    };
    int failed = testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
    return failed;
}
