/*
 * Test support: HTTP requests, answer checks, /metrics samples and `txo` daemons with an HTTP
 * port (see testhttp.h). libcurl directly, not the library's client: the tests need the
 * transport error of a request the server died in, any method, and headers the library's
 * client does not return.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cmocka.h>

#include "testhttp.h"
#include "testorders.h"
#include "testrun.h"
#include "testsql.h"
#include "txo/txo.h"

void testhttp_reply_release(struct testhttp_reply *r)
{
    free(r->body);
    memset(r, 0, sizeof(*r));
    r->retry_after_s = -1;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct testhttp_reply *r = arg;
    size_t n = size * nmemb;
    char *grown = realloc(r->body, r->len + n + 1);
    if (grown == NULL)
        return 0;
    memcpy(grown + r->len, data, n);
    r->len += n;
    grown[r->len] = '\0';
    r->body = grown;
    return n;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
    struct testhttp_reply *r = arg;
    size_t n = size * nmemb;
    static const char name[] = "Retry-After:";
    if (n > sizeof(name) - 1 && strncasecmp(data, name, sizeof(name) - 1) == 0)
        r->retry_after_s = strtol(data + sizeof(name) - 1, NULL, 10);
    return n;
}

void testhttp_do(CURL *h, const char *method, unsigned port, const char *path,
                 const char *const *headers, const char *body, size_t len, struct testhttp_reply *r)
{
    testhttp_reply_release(r);
    char url[512];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", port, path);
    struct curl_slist *list = NULL;
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i++)
        list = curl_slist_append(list, headers[i]);
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (body != NULL) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, list);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    r->cc = curl_easy_perform(h);
    if (r->cc == CURLE_OK) {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
        char *ct = NULL;
        if (curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ct) == CURLE_OK && ct != NULL)
            snprintf(r->content_type, sizeof(r->content_type), "%s", ct);
    }
    curl_easy_getinfo(h, CURLINFO_TOTAL_TIME, &r->total_s);
    curl_slist_free_all(list);
    if (r->body == NULL)
        r->body = calloc(1, 1);
}

void testhttp_get(CURL *h, unsigned port, const char *path, struct testhttp_reply *r)
{
    testhttp_do(h, "GET", port, path, NULL, NULL, 0, r);
}

void testhttp_post_order(CURL *h, unsigned port, const char *key, const char *body,
                         struct testhttp_reply *r)
{
    char key_header[512];
    snprintf(key_header, sizeof(key_header), "Idempotency-Key: %s", key != NULL ? key : "");
    const char *headers[] = {"Content-Type: application/json", key != NULL ? key_header : NULL,
                             NULL};
    testhttp_do(h, "POST", port, "/orders", headers, body, strlen(body), r);
}

json_t *testhttp_json(const struct testhttp_reply *r)
{
    json_error_t jerr;
    json_t *doc = json_loadb(r->body, r->len, 0, &jerr);
    if (doc == NULL)
        fail_msg("HTTP %ld body is not JSON (%s): %s", r->status, jerr.text, r->body);
    return doc;
}

void testhttp_expect_status(const struct testhttp_reply *r, long status, const char *what)
{
    if (r->status != status)
        fail_msg("%s: want HTTP %ld, got %ld (curl: %s), body: %s", what, status, r->status,
                 curl_easy_strerror(r->cc), r->body);
}

void testhttp_expect_error(const struct testhttp_reply *r, long status, const char *code,
                           const char *msg_has, const char *what)
{
    testhttp_expect_status(r, status, what);
    if (strncmp(r->content_type, "application/json", 16) != 0)
        fail_msg("%s: Content-Type %s, want application/json", what, r->content_type);
    json_t *doc = testhttp_json(r);
    const char *got = json_string_value(json_object_get(doc, "error"));
    const char *msg = json_string_value(json_object_get(doc, "message"));
    bool ok = got != NULL && strcmp(got, code) == 0 && msg != NULL && msg[0] != '\0' &&
              (msg_has == NULL || strstr(msg, msg_has) != NULL);
    json_decref(doc);
    if (!ok)
        fail_msg("%s: want error \"%s\" with a message containing \"%s\", got %s", what, code,
                 msg_has != NULL ? msg_has : "", r->body);
}

int64_t testhttp_expect_created(const struct testhttp_reply *r, long status, const char *what)
{
    testhttp_expect_status(r, status, what);
    json_t *doc = testhttp_json(r);
    json_int_t id = json_integer_value(json_object_get(doc, "order_id"));
    const char *st = json_string_value(json_object_get(doc, "status"));
    bool ok = json_object_size(doc) == 2 && id > 0 && st != NULL && strcmp(st, "CREATED") == 0;
    json_decref(doc);
    if (!ok)
        fail_msg("%s: want {\"order_id\":N,\"status\":\"CREATED\"}, got %s", what, r->body);
    return (int64_t)id;
}

double testhttp_metric_value(const char *text, const char *series)
{
    size_t len = strlen(series);
    for (const char *line = text; line != NULL && *line != '\0';) {
        if (strncmp(line, series, len) == 0 && line[len] == ' ')
            return strtod(line + len + 1, NULL);
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    return -1;
}

unsigned testhttp_txo_start(struct testproc *p, const char *tag, const char *subcommand,
                            const char *const *args)
{
    unsigned port = testproc_free_port();
    char listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", port);
    const char *argv[24];
    size_t n = 0;
    argv[n++] = testproc_txo_bin();
    argv[n++] = subcommand;
    argv[n++] = "--listen";
    argv[n++] = listen;
    for (size_t i = 0; args != NULL && args[i] != NULL; i++) {
        if (n == TXO_ARRAY_LEN(argv) - 1)
            fail_msg("txo %s: more than %zu arguments", subcommand, TXO_ARRAY_LEN(argv) - 5);
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    testproc_start(p, tag, argv, NULL);
    if (!testproc_wait_http(port, "/healthz", 10000)) {
        char what[64];
        snprintf(what, sizeof(what), "txo %s", subcommand);
        testproc_print_log(p, what);
        fail_msg("%s on port %u did not answer GET /healthz within 10 s", what, port);
    }
    return port;
}

void testhttp_txo_stop(struct testproc *p, const char *what)
{
    int64_t t0 = txo_monotonic_ms();
    bool ok = testproc_stop(p, 5000);
    int64_t ms = txo_monotonic_ms() - t0;
    if (!ok) {
        testproc_print_log(p, what);
        fail_msg("%s: SIGTERM did not end in exit 0 within 5 s (wait status 0x%x after %lld ms)",
                 what, p->status, (long long)ms);
    }
}

int testhttp_daemon_free_state(void **state)
{
    struct testhttp_daemon *d = *state;
    if (d != NULL)
        testproc_stop_hard(&d->srv);
    testdb_fixture_free(d);
    *state = NULL;
    return 0;
}

struct testhttp_api *testhttp_api_new(const char *tag, int32_t stock)
{
    struct testhttp_api *c = testdb_fixture_new(sizeof(*c), tag, TESTDB_NEW_EXPORT_ENV);
    c->h = curl_easy_init();
    assert_non_null(c->h);
    testorders_stock_abc(c->t.db, stock);
    return c;
}

int testhttp_api_free_state(void **state)
{
    struct testhttp_api *c = *state;
    if (c == NULL)
        return 0;
    for (size_t i = 0; i < TXO_ARRAY_LEN(c->procs); i++)
        testproc_stop_hard(&c->procs[i]);
    for (size_t i = 0; i < TXO_ARRAY_LEN(c->rep); i++)
        testhttp_reply_release(&c->rep[i]);
    for (size_t i = 0; i < c->n_many; i++)
        testhttp_reply_release(&c->many[i]);
    free(c->many);
    for (size_t i = 0; i < TXO_ARRAY_LEN(c->hold); i++)
        txo_db_close(c->hold[i]);
    curl_easy_cleanup(c->h);
    testdb_fixture_free(c);
    *state = NULL;
    return 0;
}

int testhttp_run_each(const struct CMUnitTest *tests, size_t n, int (*setup)(void **),
                      int (*teardown)(void **), int (*group_setup)(void **),
                      int (*group_teardown)(void **))
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return 1;
    int failed = testrun_each(tests, n, setup, teardown, group_setup, group_teardown);
    curl_global_cleanup();
    return failed;
}

void testhttp_expect_promtool_valid(const char *text, size_t len)
{
    char path[] = "/tmp/txo_test_metrics_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    const char *argv[] = {"/bin/sh", "-c", "promtool check metrics < \"$0\" 2>&1", path, NULL};
    char *out = NULL;
    int status = testproc_run("promtool", argv, 30000, &out);
    unlink(path);
    if (status != 0)
        fail_msg("promtool check metrics: exit status %d, output:\n%s\nmetrics:\n%s", status,
                 out != NULL ? out : "", text);
    free(out);
}

struct txo_db *testhttp_hold_order_key(struct testdb *t, const char *key, const char *body)
{
    struct txo_error err;
    txo_error_init(&err);
    char hash[TXO_IDEM_HASH_LEN];
    if (txo_idem_hash("POST", "/orders", body, strlen(body), hash, &err) != 0)
        fail_msg("txo_idem_hash: %s", err.msg);
    /* A statement with bound parameters runs in a transaction of its own, and START
     * TRANSACTION must span the INSERT: the values are bound into session variables first,
     * then the INSERT reads them inside the transaction left open. */
    struct txo_db *db = testdb_connect(t);
    const struct txo_param p[] = {txo_p_str(key), txo_p_str(hash)};
    testsql_exec(db, "SET @txo_test_key = ?, @txo_test_hash = ?", p, 2);
    testdb_exec(db, "START TRANSACTION");
    testdb_exec(db, "INSERT INTO idempotency_keys (idempotency_key, request_hash, status)"
                    " VALUES (@txo_test_key, @txo_test_hash, 'PROCESSING')");
    return db;
}
