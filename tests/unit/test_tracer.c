/*
 * Unit tests for the span exporter (src/trace/tracer.c, otlp_json.c) against an OTLP receiver
 * in this process (the library's HTTP server, recording every body it is sent):
 *   - spans reach the receiver as OTLP/HTTP JSON: resource attributes, scope, hex ids, the
 *     parent, links, attributes, status, times in nanoseconds as strings; an unsampled span is
 *     not sent;
 *   - a partial batch goes out after flush_ms, a full one at once;
 *   - a receiver that is down or answers 500: record() stays fast, every span is counted as
 *     dropped (reason export), and free() returns;
 *   - a slow receiver and a small queue: record() never waits, the overflow is counted as
 *     dropped (reason queue_full) in the metrics;
 *   - a receiver slower than the timeout when the tracer stops: free() gives up on the queue
 *     after the request in flight fails, instead of waiting out a timeout per batch;
 *   - the sampling ratio: 0, 1, and about half for 0.5, decided from the trace id;
 *   - bad options are refused.
 */
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "txo/alloc.h"
#include "txo/clock.h"
#include "txo/http_server.h"
#include "txo/metrics.h"
#include "txo/tracer.h"

/* ---- the receiver ---- */

struct receiver {
    struct txo_http_server *srv;
    pthread_mutex_t mu;
    json_t *bodies;   /* every request body, parsed */
    int status;       /* what it answers */
    int64_t delay_ms; /* before answering */
    char url[64];
};

static void receive(void *arg, const struct txo_http_request *req, struct txo_http_response *resp)
{
    struct receiver *r = arg;
    if (r->delay_ms > 0)
        txo_sleep_ms(r->delay_ms);
    json_t *doc = json_loadb(req->body, req->body_len, 0, NULL);
    pthread_mutex_lock(&r->mu);
    if (strcmp(req->path, "/v1/traces") == 0 && strcmp(req->method, "POST") == 0 && doc != NULL)
        json_array_append(r->bodies, doc);
    pthread_mutex_unlock(&r->mu);
    json_decref(doc);
    (void)txo_http_response_set(resp, r->status, "{}");
}

static void receiver_start(struct receiver *r, int status, int64_t delay_ms)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    r->bodies = json_array();
    r->status = status;
    r->delay_ms = delay_ms;
    struct txo_http_server_opts o;
    txo_http_server_opts_init(&o);
    o.max_body_bytes = 16 << 20;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_http_server_start(&o, receive, r, &r->srv, &err), 0);
    snprintf(r->url, sizeof(r->url), "http://127.0.0.1:%u/v1/traces", txo_http_server_port(r->srv));
}

static void receiver_stop(struct receiver *r)
{
    txo_http_server_stop(r->srv);
    json_decref(r->bodies);
    pthread_mutex_destroy(&r->mu);
}

/* Every span the receiver got, in one array (new reference). */
static json_t *received_spans(struct receiver *r)
{
    json_t *all = json_array();
    pthread_mutex_lock(&r->mu);
    size_t i;
    json_t *body;
    json_array_foreach(r->bodies, i, body)
    {
        json_t *rs = json_array_get(json_object_get(body, "resourceSpans"), 0);
        json_t *ss = json_array_get(json_object_get(rs, "scopeSpans"), 0);
        json_array_extend(all, json_object_get(ss, "spans"));
    }
    pthread_mutex_unlock(&r->mu);
    return all;
}

static size_t wait_spans(struct receiver *r, size_t want, int64_t timeout_ms)
{
    int64_t until = txo_monotonic_ms() + timeout_ms;
    for (;;) {
        json_t *all = received_spans(r);
        size_t n = json_array_size(all);
        json_decref(all);
        if (n >= want || txo_monotonic_ms() >= until)
            return n;
        txo_sleep_ms(10);
    }
}

/* ---- helpers ---- */

static struct txo_tracer *tracer(const char *url, size_t queue_max, int64_t flush_ms,
                                 struct txo_metrics *reg)
{
    struct txo_tracer_opts o;
    txo_tracer_opts_init(&o);
    o.endpoint = url;
    o.service_name = "test-service";
    o.instance_id = "test-1";
    o.flush_ms = flush_ms;
    o.timeout_ms = 1000;
    o.batch_max = 64;
    if (queue_max > 0)
        o.queue_max = queue_max;
    o.metrics = reg;
    struct txo_tracer *t = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_tracer_new(&o, &t, &err), 0);
    return t;
}

static void simple_span(struct txo_span *s, struct txo_trace_ctx *ctx, const char *name)
{
    memset(s, 0, sizeof(*s));
    txo_trace_new_root(true, ctx);
    s->ctx = *ctx;
    s->name = name;
    s->kind = TXO_SPAN_INTERNAL;
    s->start_us = txo_realtime_us();
    s->end_us = s->start_us + 1500;
}

static const char *str(json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

/* The value of attribute key in an OTLP attribute list (stringValue or intValue), or NULL. */
static const char *attr(json_t *list, const char *key)
{
    size_t i;
    json_t *a;
    json_array_foreach(list, i, a)
    {
        if (strcmp(str(a, "key"), key) == 0) {
            json_t *v = json_object_get(a, "value");
            const char *s = str(v, "stringValue");
            return s != NULL ? s : str(v, "intValue");
        }
    }
    return NULL;
}

/* ---- tests ---- */

static void test_spans_reach_the_receiver_as_otlp_json(void **state)
{
    (void)state;
    struct receiver r;
    receiver_start(&r, 200, 0);
    struct txo_tracer *t = tracer(r.url, 0, 50, NULL);

    struct txo_trace_ctx root, child, other;
    struct txo_span s;
    simple_span(&s, &root, "POST /orders");
    s.kind = TXO_SPAN_SERVER;
    struct txo_span_attr attrs[] = {{.key = "http.route", .str = "/orders"},
                                    {.key = "http.response.status_code", .num = 201}};
    s.attrs = attrs;
    s.n_attrs = 2;
    txo_tracer_record(t, &s);

    txo_trace_child(&root, &child);
    txo_trace_new_root(true, &other);
    struct txo_span_link link;
    memcpy(link.trace_id, other.trace_id, 16);
    memcpy(link.span_id, other.span_id, 8);
    struct txo_span c;
    memset(&c, 0, sizeof(c));
    c.ctx = child;
    memcpy(c.parent_span_id, root.span_id, 8);
    c.name = "outbox append";
    c.kind = TXO_SPAN_PRODUCER;
    c.start_us = s.start_us + 100;
    c.end_us = s.start_us + 900;
    c.status = TXO_EDUPLICATE;
    c.status_message = "duplicate key order:1:created";
    c.links = &link;
    c.n_links = 1;
    txo_tracer_record(t, &c);

    struct txo_trace_ctx unsampled;
    txo_trace_new_root(false, &unsampled);
    struct txo_span u;
    simple_span(&u, &unsampled, "not sampled");
    u.ctx.flags = 0;
    txo_tracer_record(t, &u);

    assert_int_equal(wait_spans(&r, 2, 3000), 2);
    txo_tracer_free(t); /* nothing left: the unsampled span was never queued */

    pthread_mutex_lock(&r.mu);
    assert_int_equal(json_array_size(r.bodies), 1); /* one batch, after flush_ms */
    json_t *rs = json_array_get(json_object_get(json_array_get(r.bodies, 0), "resourceSpans"), 0);
    json_t *rattrs = json_object_get(json_object_get(rs, "resource"), "attributes");
    assert_string_equal(attr(rattrs, "service.name"), "test-service");
    assert_string_equal(attr(rattrs, "service.instance.id"), "test-1");
    assert_non_null(attr(rattrs, "service.version"));
    json_t *scope = json_object_get(json_array_get(json_object_get(rs, "scopeSpans"), 0), "scope");
    assert_string_equal(str(scope, "name"), "txo");
    pthread_mutex_unlock(&r.mu);

    json_t *spans = received_spans(&r);
    json_t *a = json_array_get(spans, 0), *b = json_array_get(spans, 1);
    char tid[33], sid[17];
    txo_trace_id_hex(&root, tid);
    txo_trace_span_hex(&root, sid);
    assert_string_equal(str(a, "traceId"), tid);
    assert_string_equal(str(a, "spanId"), sid);
    assert_null(json_object_get(a, "parentSpanId"));
    assert_string_equal(str(a, "name"), "POST /orders");
    assert_int_equal(json_integer_value(json_object_get(a, "kind")), 2);
    char ns[32];
    snprintf(ns, sizeof(ns), "%lld", (long long)s.start_us * 1000);
    assert_string_equal(str(a, "startTimeUnixNano"), ns);
    assert_string_equal(attr(json_object_get(a, "attributes"), "http.route"), "/orders");
    assert_string_equal(attr(json_object_get(a, "attributes"), "http.response.status_code"), "201");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(a, "status"), "code")), 1);

    assert_string_equal(str(b, "traceId"), tid); /* the same trace */
    assert_string_equal(str(b, "parentSpanId"), sid);
    assert_int_equal(json_integer_value(json_object_get(b, "kind")), 4);
    json_t *st = json_object_get(b, "status");
    assert_int_equal(json_integer_value(json_object_get(st, "code")), 2);
    assert_string_equal(str(st, "message"), "duplicate key order:1:created");
    assert_string_equal(attr(json_object_get(b, "attributes"), "txo.error_code"), "TXO_EDUPLICATE");
    json_t *l = json_array_get(json_object_get(b, "links"), 0);
    char otid[33];
    txo_trace_id_hex(&other, otid);
    assert_string_equal(str(l, "traceId"), otid);
    json_decref(spans);
    receiver_stop(&r);
}

/* Names, attributes and messages are any bytes: the body stays valid JSON, escaped as RFC 8259
 * says, with every byte outside a well-formed UTF-8 character replaced by '?'. */
static void test_strings_escaped_as_json(void **state)
{
    (void)state;
    struct receiver r;
    receiver_start(&r, 200, 0);
    struct txo_tracer *t = tracer(r.url, 0, 50, NULL);
    struct txo_trace_ctx ctx;
    struct txo_span s;
    simple_span(&s, &ctx, "q\" b\\ n\n t\t c\x01 bad\xff cut\xc3 \xc3\xa9 \xe2\x82\xac");
    struct txo_span_attr attrs[] = {{.key = "k\"ey", .str = "v\x7f\x1f"}};
    s.attrs = attrs;
    s.n_attrs = 1;
    s.status = TXO_EBUSINESS;
    s.status_message = "declined:\r\n\"card\"";
    txo_tracer_record(t, &s);
    assert_int_equal(wait_spans(&r, 1, 3000), 1);
    txo_tracer_free(t);
    json_t *spans = received_spans(&r);
    json_t *a = json_array_get(spans, 0);
    assert_string_equal(str(a, "name"), "q\" b\\ n\n t\t c\x01 bad? cut? \xc3\xa9 \xe2\x82\xac");
    assert_string_equal(attr(json_object_get(a, "attributes"), "k\"ey"), "v\x7f\x1f");
    assert_string_equal(str(json_object_get(a, "status"), "message"), "declined:\r\n\"card\"");
    json_decref(spans);
    receiver_stop(&r);
}

static void test_full_batch_goes_at_once(void **state)
{
    (void)state;
    struct receiver r;
    receiver_start(&r, 200, 0);
    struct txo_tracer *t = tracer(r.url, 0, 60000, NULL); /* no flush by time */
    struct txo_span s;
    struct txo_trace_ctx ctx;
    for (int i = 0; i < 64; i++) {
        simple_span(&s, &ctx, "one of a batch");
        txo_tracer_record(t, &s);
    }
    assert_int_equal(wait_spans(&r, 64, 3000), 64);
    /* The receiver keeps a body before it answers: the tracer counts the batch exported when
     * the answer is back, a moment later. */
    struct txo_tracer_stats ts;
    int64_t until = txo_monotonic_ms() + 3000;
    do {
        txo_sleep_ms(5);
        txo_tracer_get_stats(t, &ts);
    } while (ts.exported < 64 && txo_monotonic_ms() < until);
    assert_int_equal(ts.exported, 64);
    txo_tracer_free(t);
    receiver_stop(&r);
}

static void test_receiver_down_or_failing(void **state)
{
    (void)state;
    struct txo_metrics *reg = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_metrics_new(&reg, &err), 0);
    /* Nothing listens there. */
    struct txo_tracer *t = tracer("http://127.0.0.1:9/v1/traces", 0, 20, reg);
    struct txo_span s;
    struct txo_trace_ctx ctx;
    int64_t t0 = txo_monotonic_ms();
    for (int i = 0; i < 100; i++) {
        simple_span(&s, &ctx, "lost");
        txo_tracer_record(t, &s);
    }
    assert_true(txo_monotonic_ms() - t0 < 500); /* recording never waits on the network */
    txo_tracer_free(t);                         /* sends what is queued: fails, counted */
    const char *export_label[] = {"export"};
    struct txo_metric *dropped =
        txo_metrics_register(reg, TXO_METRIC_COUNTER, "txo_trace_spans_dropped_total", "x", 1,
                             (const char *const[]){"reason"}, NULL, 0, &err);
    assert_non_null(dropped);
    assert_true(txo_metric_value(dropped, export_label) == 100);

    /* A receiver answering 500: the same. */
    struct receiver r;
    receiver_start(&r, 500, 0);
    t = tracer(r.url, 0, 20, NULL);
    for (int i = 0; i < 10; i++) {
        simple_span(&s, &ctx, "refused");
        txo_tracer_record(t, &s);
    }
    txo_tracer_free(t);
    receiver_stop(&r);
    txo_metrics_free(reg);
}

static void test_slow_receiver_small_queue(void **state)
{
    (void)state;
    struct receiver r;
    receiver_start(&r, 200, 700);
    struct txo_metrics *reg = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_metrics_new(&reg, &err), 0);
    struct txo_tracer *t = tracer(r.url, 10, 10, reg);
    struct txo_span s;
    struct txo_trace_ctx ctx;
    int64_t t0 = txo_monotonic_ms();
    for (int i = 0; i < 200; i++) {
        simple_span(&s, &ctx, "many");
        txo_tracer_record(t, &s);
    }
    assert_true(txo_monotonic_ms() - t0 < 300);
    struct txo_tracer_stats ts;
    txo_tracer_get_stats(t, &ts);
    assert_true(ts.dropped_queue_full >= 170); /* at most the queue and one batch in flight */
    assert_int_equal(ts.recorded + ts.dropped_queue_full, 200);
    const char *full_label[] = {"queue_full"};
    struct txo_metric *dropped =
        txo_metrics_register(reg, TXO_METRIC_COUNTER, "txo_trace_spans_dropped_total", "x", 1,
                             (const char *const[]){"reason"}, NULL, 0, &err);
    assert_true(txo_metric_value(dropped, full_label) == (double)ts.dropped_queue_full);
    int64_t t1 = txo_monotonic_ms();
    txo_tracer_free(t);
    assert_true(txo_monotonic_ms() - t1 < 5000); /* the queue's few requests, each under 1 s */
    receiver_stop(&r);
    txo_metrics_free(reg);
}

static void test_stop_with_slow_receiver_is_bounded(void **state)
{
    (void)state;
    /* Answers after 3 s; the tracer gives up on a request after 1 s. Ten full batches wait:
     * the first in flight, nine queued when free() is called. */
    struct receiver r;
    receiver_start(&r, 200, 3000);
    struct txo_tracer *t = tracer(r.url, 0, 60000, NULL);
    struct txo_span s;
    struct txo_trace_ctx ctx;
    for (int i = 0; i < 640; i++) {
        simple_span(&s, &ctx, "late");
        txo_tracer_record(t, &s);
    }
    struct txo_tracer_stats ts;
    txo_tracer_get_stats(t, &ts);
    assert_int_equal(ts.recorded, 640);
    /* The request in flight times out, and the collector that did not take it is not sent
     * the other nine: free() returns after one timeout, not ten. */
    int64_t t0 = txo_monotonic_ms();
    txo_tracer_free(t);
    int64_t stop_ms = txo_monotonic_ms() - t0;
    if (stop_ms >= 3000)
        fail_msg("txo_tracer_free took %lld ms with a receiver slower than the 1 s timeout",
                 (long long)stop_ms);
    receiver_stop(&r);
}

static void test_sampling_ratio(void **state)
{
    (void)state;
    struct txo_tracer_opts o;
    txo_tracer_opts_init(&o);
    o.endpoint = "http://127.0.0.1:9/v1/traces";
    struct txo_error err;
    txo_error_init(&err);
    double ratios[] = {0, 0.5, 1};
    for (size_t k = 0; k < 3; k++) {
        o.sample_ratio = ratios[k];
        struct txo_tracer *t = NULL;
        assert_int_equal(txo_tracer_new(&o, &t, &err), 0);
        int sampled = 0;
        for (int i = 0; i < 10000; i++) {
            struct txo_trace_ctx c;
            txo_trace_new_root(false, &c);
            sampled += txo_tracer_sample(t, c.trace_id);
            /* The decision follows the trace id: asked again, the same answer. */
            assert_int_equal(txo_tracer_sample(t, c.trace_id), txo_tracer_sample(t, c.trace_id));
        }
        if (k == 0)
            assert_int_equal(sampled, 0);
        else if (k == 2)
            assert_int_equal(sampled, 10000);
        else
            assert_true(sampled > 4500 && sampled < 5500);
        txo_tracer_free(t);
    }
}

static void test_bad_options(void **state)
{
    (void)state;
    struct txo_tracer_opts o;
    txo_tracer_opts_init(&o);
    struct txo_tracer *t = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_tracer_new(&o, &t, &err), TXO_EINVAL); /* no endpoint */
    o.endpoint = "grpc://collector:4317";
    assert_int_equal(txo_tracer_new(&o, &t, &err), TXO_EINVAL);
    o.endpoint = "http://collector:4318/v1/traces";
    o.sample_ratio = 1.5;
    assert_int_equal(txo_tracer_new(&o, &t, &err), TXO_EINVAL);
    o.sample_ratio = 1;
    o.queue_max = 0;
    assert_int_equal(txo_tracer_new(&o, &t, &err), TXO_EINVAL);
    assert_null(t);
    txo_tracer_record(NULL, NULL); /* a no-op */
    txo_tracer_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spans_reach_the_receiver_as_otlp_json),
        cmocka_unit_test(test_strings_escaped_as_json),
        cmocka_unit_test(test_full_batch_goes_at_once),
        cmocka_unit_test(test_receiver_down_or_failing),
        cmocka_unit_test(test_slow_receiver_small_queue),
        cmocka_unit_test(test_stop_with_slow_receiver_is_bounded),
        cmocka_unit_test(test_sampling_ratio),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
