/*
 * The webhook publisher (include/txo/webhook.h) driven by the real relay against a real
 * MariaDB, posting to a receiver inside the test (the library's HTTP server) that records every
 * request and answers what the test tells it: a 2xx, an error status, or nothing for a while.
 *
 * Asserted: every event is delivered once with its Idempotency-Key, X-Txo-Event-Type,
 * X-Txo-Event-Id and Authorization headers and its envelope as the body, and its row is
 * PUBLISHED (any 2xx counts); a 500 or a 422 leaves every row PENDING with attempts = 1 and
 * the status and body excerpt in last_error, and the retry after recovery delivers the same
 * keys with attempt 2; a 503 stops the batch after its first request; a closed port fails the
 * batch in well under a second; a receiver that hangs costs one timeout per batch, not one per
 * event; bad settings are refused.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "testrun.h"
#include "testdb.h"
#include "testoutbox.h"
#include "testraw.h"
#include "testrelay.h"
#include "txo/webhook.h"

/* ---- the receiver ---- */

#define MAX_SEEN 512

struct seen {
    char key[128];
    char type[64];
    char id[32];
    char auth[64];
    char content_type[64];
    char *body;
};

struct receiver {
    struct txo_http_server *srv;
    char url[96];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int status; /* answer; 0 = 200 for even event ids, 204 for odd ones */
    bool hang;  /* hold requests until released (or 10 s) */
    bool released;
    struct seen seen[MAX_SEEN];
    size_t n;
};

static void header(const struct txo_http_request *req, const char *name, char *out, size_t cap)
{
    const char *v = txo_http_request_header(req, name);
    snprintf(out, cap, "%s", v != NULL ? v : "");
}

static void receive(void *arg, const struct txo_http_request *req, struct txo_http_response *resp)
{
    struct receiver *r = arg;
    pthread_mutex_lock(&r->mu);
    if (r->n < MAX_SEEN && strcmp(req->path, "/hooks/orders") == 0) {
        struct seen *s = &r->seen[r->n++];
        header(req, "Idempotency-Key", s->key, sizeof(s->key));
        header(req, "X-Txo-Event-Type", s->type, sizeof(s->type));
        header(req, "X-Txo-Event-Id", s->id, sizeof(s->id));
        header(req, "Authorization", s->auth, sizeof(s->auth));
        header(req, "Content-Type", s->content_type, sizeof(s->content_type));
        s->body = txo_strndup(req->body, req->body_len);
    }
    if (r->hang) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 10;
        while (!r->released) {
            if (pthread_cond_timedwait(&r->cv, &r->mu, &deadline) != 0)
                break;
        }
    }
    int status = r->status;
    pthread_mutex_unlock(&r->mu);
    if (strcmp(req->path, "/hooks/orders") != 0) {
        (void)txo_http_response_set(resp, 404, "{\"error\":\"not here\"}");
        return;
    }
    if (status == 0) {
        long id = strtol(txo_http_request_header(req, "X-Txo-Event-Id") != NULL
                             ? txo_http_request_header(req, "X-Txo-Event-Id")
                             : "0",
                         NULL, 10);
        (void)txo_http_response_set(resp, id % 2 == 0 ? 200 : 204,
                                    id % 2 == 0 ? "{\"ok\":true}" : NULL);
        return;
    }
    char body[96];
    snprintf(body, sizeof(body), "{\"error\":\"receiver says %d\"}", status);
    (void)txo_http_response_set(resp, status, body);
}

static void receiver_start(struct receiver *r)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    struct txo_http_server_opts o;
    txo_http_server_opts_init(&o);
    o.port = 0;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_http_server_start(&o, receive, r, &r->srv, &err) < 0)
        fail_msg("receiver: %s", err.msg);
    snprintf(r->url, sizeof(r->url), "http://127.0.0.1:%u/hooks/orders",
             txo_http_server_port(r->srv));
}

static void receiver_release(struct receiver *r)
{
    pthread_mutex_lock(&r->mu);
    r->released = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void receiver_stop(struct receiver *r)
{
    receiver_release(r);
    txo_http_server_stop(r->srv);
    for (size_t i = 0; i < r->n; i++)
        txo_free(r->seen[i].body);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

static size_t receiver_count(struct receiver *r)
{
    pthread_mutex_lock(&r->mu);
    size_t n = r->n;
    pthread_mutex_unlock(&r->mu);
    return n;
}

static void receiver_answer(struct receiver *r, int status)
{
    pthread_mutex_lock(&r->mu);
    r->status = status;
    pthread_mutex_unlock(&r->mu);
}

/* ---- fixtures ---- */

struct ctx {
    struct testdb t;
    struct receiver rcv;
    struct txo_publisher *pub; /* the test's webhook publisher and its relay (webhook_relay) */
    struct txo_relay *relay;
};

static int setup(void **state)
{
    struct ctx *c = testdb_fixture_new(sizeof(*c), "webhook", 0);
    receiver_start(&c->rcv);
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    txo_relay_free(c->relay);
    txo_publisher_free(c->pub);
    receiver_stop(&c->rcv);
    testdb_fixture_free(c);
    return 0;
}

/*
 * The test's relay (batch size batch, draining or not) and its webhook publisher to url
 * (timeout_ms, 0: the default; token, NULL: none), kept in c for teardown to free.
 */
static struct txo_relay *webhook_relay(struct ctx *c, const char *url, int64_t timeout_ms,
                                       const char *token, unsigned batch, bool drain)
{
    struct txo_webhook_opts wo;
    txo_webhook_opts_init(&wo);
    wo.url = url;
    if (timeout_ms > 0)
        wo.timeout_ms = timeout_ms;
    wo.bearer_token = token;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_publisher_webhook_new(&wo, &c->pub, &err) < 0)
        fail_msg("txo_publisher_webhook_new: %s", err.msg);
    struct txo_relay_opts o;
    txo_relay_opts_init(&o);
    o.batch_size = batch;
    o.relay_id = "webhook-test";
    o.idle_sleep_ms = 5;
    o.drain = drain;
    c->relay = testrelay_new(c->t.db, c->pub, &o);
    return c->relay;
}

/*
 * One relay cycle while the receiver answers status: it claims n events, and the receiver has
 * seen requests in all by then.
 */
static void cycle_answered(struct ctx *c, int status, size_t n, size_t requests)
{
    receiver_answer(&c->rcv, status);
    assert_int_equal(testrelay_run_once(c->relay), n);
    assert_int_equal(receiver_count(&c->rcv), requests);
}

/* Asserts that last_error is the same text on all n rows and contains want; returns nothing. */
static void assert_last_error(struct testdb *t, unsigned n, const char *prefix, const char *want)
{
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(DISTINCT last_error) FROM outbox_events"), 1);
    char *le = testdb_str(t->db, "SELECT MIN(last_error) FROM outbox_events", NULL, 0);
    assert_non_null(le);
    if (strncmp(le, prefix, strlen(prefix)) != 0 || strstr(le, want) == NULL)
        fail_msg("last_error \"%s\": want prefix \"%s\" and \"%s\"", le, prefix, want);
    txo_free(le);
    char sql[200];
    snprintf(sql, sizeof(sql),
             "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' AND attempts = 1 "
             "AND locked_by IS NULL AND published_at IS NULL");
    assert_int_equal(testdb_q(t->db, sql), n);
}

/* ---- tests ---- */

static void test_delivers_every_event_with_headers(void **state)
{
    struct ctx *c = *state;
    const unsigned n = 45;
    testoutbox_insert_seq(c->t.db, n, "k");
    struct txo_relay *r = webhook_relay(c, c->rcv.url, 0, "s3cret-token", 20, true);
    testrelay_drain(r);
    struct txo_relay_stats st;
    txo_relay_get_stats(r, &st);
    assert_int_equal(st.published, n);
    assert_int_equal(st.failed_attempts, 0);

    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED' "
                                           "AND attempts = 0 AND last_error IS NULL"),
                     n);
    assert_int_equal(receiver_count(&c->rcv), n);
    unsigned *count = txo_calloc(n + 1, sizeof(*count));
    for (size_t i = 0; i < n; i++) {
        const struct seen *s = &c->rcv.seen[i];
        json_error_t jerr;
        json_t *env = json_loads(s->body, 0, &jerr);
        if (env == NULL)
            fail_msg("request %zu: body is not JSON: %s", i, s->body);
        const char *key = json_string_value(json_object_get(env, "idempotency_key"));
        assert_non_null(key);
        /* The header carries the envelope's key, type and id. */
        assert_string_equal(s->key, key);
        assert_string_equal(s->type, "OrderCreated");
        assert_string_equal(json_string_value(json_object_get(env, "type")), "OrderCreated");
        char id[32];
        snprintf(id, sizeof(id), "%lld", (long long)json_integer_value(json_object_get(env, "id")));
        assert_string_equal(s->id, id);
        assert_string_equal(s->auth, "Bearer s3cret-token");
        assert_string_equal(s->content_type, "application/json");
        unsigned k = 0;
        if (sscanf(key, "k:%u", &k) != 1 || k < 1 || k > n)
            fail_msg("unexpected key %s", key);
        count[k]++;
        char agg[16];
        snprintf(agg, sizeof(agg), "%u", k);
        assert_string_equal(json_string_value(json_object_get(env, "aggregate_id")), agg);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(env, "payload"), "n")),
                         k);
        assert_int_equal(json_integer_value(json_object_get(env, "attempt")), 1);
        json_decref(env);
    }
    for (unsigned k = 1; k <= n; k++)
        assert_int_equal(count[k], 1);
    txo_free(count);
}

static void test_error_status_leaves_rows_pending(void **state)
{
    struct ctx *c = *state;
    const unsigned n = 5;
    testoutbox_insert_seq(c->t.db, n, "k");
    webhook_relay(c, c->rcv.url, 0, NULL, 10, false);

    /* 500: every event is tried (the next one may succeed), none counts as delivered. */
    cycle_answered(c, 500, n, n);
    assert_last_error(&c->t, n, "TXO_EUNAVAILABLE: POST http://127.0.0.1:",
                      "/hooks/orders: HTTP 500: {\"error\":\"receiver says 500\"}");
    assert_string_equal(c->rcv.seen[0].auth, ""); /* no token, no Authorization header */

    /* The receiver recovers: the retry delivers the same keys with attempt 2. */
    testdb_exec(c->t.db, "UPDATE outbox_events SET next_attempt_at = NOW(6)");
    cycle_answered(c, 201, n, 2 * n);
    for (size_t i = n; i < 2 * n; i++) {
        assert_string_equal(c->rcv.seen[i].key, c->rcv.seen[i - n].key);
        json_t *env = json_loads(c->rcv.seen[i].body, 0, NULL);
        assert_non_null(env);
        assert_int_equal(json_integer_value(json_object_get(env, "attempt")), 2);
        json_decref(env);
    }
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED' "
                                           "AND last_error IS NULL"),
                     n);
}

static void test_refusal_and_overload(void **state)
{
    struct ctx *c = *state;
    const unsigned n = 6;
    testoutbox_insert_seq(c->t.db, n, "k");
    struct txo_relay *r = webhook_relay(c, c->rcv.url, 0, NULL, 10, false);

    /* 422, a permanent refusal of each event: every one is tried, none delivered, and each is
     * dead-lettered at once with the endpoint's answer (a retry would be refused again). */
    cycle_answered(c, 422, n, n);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'FAILED' "
                                           "AND attempts = 1 AND locked_by IS NULL"),
                     n);
    assert_int_equal(TESTDB_COUNT(c->t.db, "dead_letter_events WHERE error LIKE "
                                           "'TXO_EBUSINESS: POST %HTTP 422: %'"),
                     n);
    assert_int_equal(testrelay_run_once(r), 0);

    /* 503: the endpoint says it is down; the rest of the batch is not tried. */
    testdb_exec(c->t.db, "UPDATE outbox_events SET status = 'PENDING', next_attempt_at = NOW(6), "
                         "attempts = 0");
    cycle_answered(c, 503, n, n + 1);
    assert_last_error(&c->t, n, "TXO_EUNAVAILABLE: POST ", "HTTP 503: ");
}

static void test_receiver_down_fails_fast(void **state)
{
    struct ctx *c = *state;
    const unsigned n = 100;
    testoutbox_insert_seq(c->t.db, n, "k");
    char url[96];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/hooks/orders", testraw_closed_port());
    struct txo_relay *r = webhook_relay(c, url, 0, "tok", n, false);
    int64_t t0 = txo_monotonic_ms();
    assert_int_equal(testrelay_run_once(r), n);
    int64_t elapsed = txo_monotonic_ms() - t0;
    if (elapsed > 1000)
        fail_msg("a batch to a closed port took %lld ms", (long long)elapsed);
    assert_last_error(&c->t, n, "TXO_EUNAVAILABLE: POST http://127.0.0.1:", ": cannot connect");
    struct txo_relay_stats st;
    txo_relay_get_stats(r, &st);
    assert_int_equal(st.failed_attempts, n);
    assert_int_equal(st.published, 0);
}

static void test_hanging_receiver_costs_one_timeout(void **state)
{
    struct ctx *c = *state;
    const unsigned n = 10;
    testoutbox_insert_seq(c->t.db, n, "k");
    pthread_mutex_lock(&c->rcv.mu);
    c->rcv.hang = true;
    pthread_mutex_unlock(&c->rcv.mu);
    struct txo_relay *r = webhook_relay(c, c->rcv.url, 300, NULL, n, false);
    int64_t t0 = txo_monotonic_ms();
    assert_int_equal(testrelay_run_once(r), n);
    int64_t elapsed = txo_monotonic_ms() - t0;
    /* One 300 ms timeout, not ten. */
    if (elapsed < 290 || elapsed > 1500)
        fail_msg("a batch to a hanging receiver took %lld ms", (long long)elapsed);
    assert_int_equal(receiver_count(&c->rcv), 1);
    assert_last_error(&c->t, n, "TXO_ETIMEOUT: POST ", "/hooks/orders: timed out after 300 ms");
    receiver_release(&c->rcv);
}

static void test_bad_settings_are_refused(void **state)
{
    (void)state;
    struct txo_webhook_opts o;
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    txo_webhook_opts_init(&o);
    assert_int_equal(txo_publisher_webhook_new(&o, &pub, &err), TXO_ECONFIG);
    o.url = "ftp://127.0.0.1/x";
    assert_int_equal(txo_publisher_webhook_new(&o, &pub, &err), TXO_ECONFIG);
    o.url = "http://127.0.0.1/x y";
    assert_int_equal(txo_publisher_webhook_new(&o, &pub, &err), TXO_ECONFIG);
    o.url = "HTTP://127.0.0.1:9/x";
    o.bearer_token = "abc\r\nX-Evil: 1";
    assert_int_equal(txo_publisher_webhook_new(&o, &pub, &err), TXO_ECONFIG);
    /* The message never repeats the token. */
    assert_null(strstr(err.msg, "abc"));
    o.bearer_token = NULL;
    o.timeout_ms = -1;
    assert_int_equal(txo_publisher_webhook_new(&o, &pub, &err), TXO_EINVAL);
    assert_null(pub);
    o.timeout_ms = 0; /* default */
    assert_int_equal(txo_publisher_webhook_new(&o, &pub, &err), 0);
    assert_non_null(pub);
    txo_publisher_free(pub);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delivers_every_event_with_headers),
        cmocka_unit_test(test_error_status_leaves_rows_pending),
        cmocka_unit_test(test_refusal_and_overload),
        cmocka_unit_test(test_receiver_down_fails_fast),
        cmocka_unit_test(test_hanging_receiver_costs_one_timeout),
        cmocka_unit_test_setup(test_bad_settings_are_refused, testrun_no_fixture),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
}
