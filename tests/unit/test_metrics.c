/*
 * Unit tests for src/metrics/metrics.c: the exact text of a small registry (a counter with
 * labels, a gauge, histograms, a labelled family with no children yet), escaping, number
 * formatting, name and label validation, re-registration, collectors (called once per render;
 * a failure is counted, logged and does not fail the render), concurrent updates that add up
 * exactly while renders run, out-of-memory on every allocation, and a render of every kind of
 * family accepted by `promtool check metrics` (a required test dependency: the test fails when
 * /usr/bin/promtool is missing).
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "testpipe.h"
#include "txo/txo.h"
#include "txo/metrics.h"

#define PROMTOOL "/usr/bin/promtool"

#define L(...) ((const char *const[]){__VA_ARGS__})

static struct txo_metrics *new_registry(void)
{
    struct txo_metrics *reg = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_metrics_new(&reg, &err) != 0)
        fail_msg("txo_metrics_new: %s", err.msg);
    return reg;
}

static struct txo_metric *reg_or_fail(struct txo_metrics *reg, enum txo_metric_type type,
                                      const char *name, const char *help, size_t n_labels,
                                      const char *const *labels, const double *buckets,
                                      size_t n_buckets)
{
    struct txo_error err;
    txo_error_init(&err);
    struct txo_metric *m =
        txo_metrics_register(reg, type, name, help, n_labels, labels, buckets, n_buckets, &err);
    if (m == NULL)
        fail_msg("register %s: %s", name, err.msg);
    return m;
}

/* Renders reg; the caller frees the text with txo_free(). */
static char *render(struct txo_metrics *reg)
{
    char *text = NULL;
    size_t len = 0;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_metrics_render(reg, &text, &len, &err) != 0)
        fail_msg("render: %s", err.msg);
    assert_int_equal(strlen(text), len);
    return text;
}

static void assert_render(struct txo_metrics *reg, const char *expected)
{
    char *text = render(reg);
    if (strcmp(text, expected) != 0)
        fail_msg("render differs.\n--- expected\n%s--- got\n%s", expected, text);
    txo_free(text);
}

static void assert_contains(const char *text, const char *line)
{
    if (strstr(text, line) == NULL)
        fail_msg("missing \"%s\" in:\n%s", line, text);
}

static const char collector_errors_text[] =
    "# HELP txo_metrics_collector_errors_total Metric collectors that failed during a scrape "
    "(their metrics kept older values).\n"
    "# TYPE txo_metrics_collector_errors_total counter\n"
    "txo_metrics_collector_errors_total 0\n";

static void test_empty_registry(void **state)
{
    (void)state;
    struct txo_metrics *reg = new_registry();
    assert_render(reg, collector_errors_text);
    txo_metrics_free(reg);
    txo_metrics_free(NULL);
    assert_string_equal(txo_metric_type_name(TXO_METRIC_COUNTER), "counter");
    assert_string_equal(txo_metric_type_name(TXO_METRIC_GAUGE), "gauge");
    assert_string_equal(txo_metric_type_name(TXO_METRIC_HISTOGRAM), "histogram");
    assert_string_equal(txo_metric_type_name((enum txo_metric_type)3), "INVALID");
}

static void test_exact_text(void **state)
{
    (void)state;
    struct txo_metrics *reg = new_registry();
    const double bounds[] = {0.25, 0.5, 1.0};

    struct txo_metric *req =
        reg_or_fail(reg, TXO_METRIC_COUNTER, "txo_http_requests_total", "HTTP requests answered.",
                    2, L("method", "code"), NULL, 0);
    struct txo_metric *pending =
        reg_or_fail(reg, TXO_METRIC_GAUGE, "txo_outbox_pending",
                    "Outbox events waiting to be published.", 0, NULL, NULL, 0);
    struct txo_metric *dur = reg_or_fail(
        reg, TXO_METRIC_HISTOGRAM, "txo_external_request_duration_seconds",
        "Duration of calls to external services.", 1, L("service"), bounds, TXO_ARRAY_LEN(bounds));
    struct txo_metric *relay = reg_or_fail(reg, TXO_METRIC_HISTOGRAM, "txo_relay_batch_seconds",
                                           "Time to publish one batch.", 0, NULL, bounds, 2);
    reg_or_fail(reg, TXO_METRIC_GAUGE, "txo_saga_running", "Sagas running, per type.", 1,
                L("saga_type"), NULL, 0);
    reg_or_fail(reg, TXO_METRIC_COUNTER, "txo_deadlocks_total", "Deadlocks seen.", 0, NULL, NULL,
                0);

    txo_metric_inc(req, L("POST", "201"));
    txo_metric_inc(req, L("POST", "201"));
    txo_metric_inc(req, L("GET", "200"));
    txo_metric_add(req, L("POST", "422"), 3);
    txo_metric_set(pending, NULL, 42);
    txo_metric_add(pending, NULL, -0.5);
    txo_metric_observe(dur, L("shipping"), 0.125);
    txo_metric_observe(dur, L("payment"), 0.25); /* on a bound: counted in it */
    txo_metric_observe(dur, L("payment"), 0.5);
    txo_metric_observe(dur, L("payment"), 0.75);
    txo_metric_observe(dur, L("payment"), 3.0); /* above every bound */
    txo_metric_observe(dur, L("payment"), NAN); /* ignored */
    txo_metric_observe(relay, NULL, 0.375);

    static const char expected[] =
        "# HELP txo_deadlocks_total Deadlocks seen.\n"
        "# TYPE txo_deadlocks_total counter\n"
        "txo_deadlocks_total 0\n"
        "# HELP txo_external_request_duration_seconds Duration of calls to external services.\n"
        "# TYPE txo_external_request_duration_seconds histogram\n"
        "txo_external_request_duration_seconds_bucket{service=\"payment\",le=\"0.25\"} 1\n"
        "txo_external_request_duration_seconds_bucket{service=\"payment\",le=\"0.5\"} 2\n"
        "txo_external_request_duration_seconds_bucket{service=\"payment\",le=\"1\"} 3\n"
        "txo_external_request_duration_seconds_bucket{service=\"payment\",le=\"+Inf\"} 4\n"
        "txo_external_request_duration_seconds_sum{service=\"payment\"} 4.5\n"
        "txo_external_request_duration_seconds_count{service=\"payment\"} 4\n"
        "txo_external_request_duration_seconds_bucket{service=\"shipping\",le=\"0.25\"} 1\n"
        "txo_external_request_duration_seconds_bucket{service=\"shipping\",le=\"0.5\"} 1\n"
        "txo_external_request_duration_seconds_bucket{service=\"shipping\",le=\"1\"} 1\n"
        "txo_external_request_duration_seconds_bucket{service=\"shipping\",le=\"+Inf\"} 1\n"
        "txo_external_request_duration_seconds_sum{service=\"shipping\"} 0.125\n"
        "txo_external_request_duration_seconds_count{service=\"shipping\"} 1\n"
        "# HELP txo_http_requests_total HTTP requests answered.\n"
        "# TYPE txo_http_requests_total counter\n"
        "txo_http_requests_total{method=\"GET\",code=\"200\"} 1\n"
        "txo_http_requests_total{method=\"POST\",code=\"201\"} 2\n"
        "txo_http_requests_total{method=\"POST\",code=\"422\"} 3\n"
        "# HELP txo_metrics_collector_errors_total Metric collectors that failed during a scrape "
        "(their metrics kept older values).\n"
        "# TYPE txo_metrics_collector_errors_total counter\n"
        "txo_metrics_collector_errors_total 0\n"
        "# HELP txo_outbox_pending Outbox events waiting to be published.\n"
        "# TYPE txo_outbox_pending gauge\n"
        "txo_outbox_pending 41.5\n"
        "# HELP txo_relay_batch_seconds Time to publish one batch.\n"
        "# TYPE txo_relay_batch_seconds histogram\n"
        "txo_relay_batch_seconds_bucket{le=\"0.25\"} 0\n"
        "txo_relay_batch_seconds_bucket{le=\"0.5\"} 1\n"
        "txo_relay_batch_seconds_bucket{le=\"+Inf\"} 1\n"
        "txo_relay_batch_seconds_sum 0.375\n"
        "txo_relay_batch_seconds_count 1\n"
        "# HELP txo_saga_running Sagas running, per type.\n"
        "# TYPE txo_saga_running gauge\n";
    assert_render(reg, expected);

    assert_true(txo_metric_value(req, L("POST", "201")) == 2.0);
    assert_true(txo_metric_value(req, L("PUT", "404")) == 0.0); /* not made by looking */
    assert_true(txo_metric_value(pending, NULL) == 41.5);
    assert_string_equal(txo_metric_name(req), "txo_http_requests_total");
    txo_metrics_free(reg);
}

static void test_default_buckets(void **state)
{
    (void)state;
    struct txo_metrics *reg = new_registry();
    struct txo_metric *h =
        reg_or_fail(reg, TXO_METRIC_HISTOGRAM, "txo_wait_seconds", "Waits.", 0, NULL, NULL, 0);
    txo_metric_observe(h, NULL, 0.02);
    txo_metric_observe(h, NULL, 7.0);

    char *text = render(reg);
    static const char expected[] = "txo_wait_seconds_bucket{le=\"0.005\"} 0\n"
                                   "txo_wait_seconds_bucket{le=\"0.01\"} 0\n"
                                   "txo_wait_seconds_bucket{le=\"0.025\"} 1\n"
                                   "txo_wait_seconds_bucket{le=\"0.05\"} 1\n"
                                   "txo_wait_seconds_bucket{le=\"0.1\"} 1\n"
                                   "txo_wait_seconds_bucket{le=\"0.25\"} 1\n"
                                   "txo_wait_seconds_bucket{le=\"0.5\"} 1\n"
                                   "txo_wait_seconds_bucket{le=\"1\"} 1\n"
                                   "txo_wait_seconds_bucket{le=\"2.5\"} 1\n"
                                   "txo_wait_seconds_bucket{le=\"5\"} 1\n"
                                   "txo_wait_seconds_bucket{le=\"10\"} 2\n"
                                   "txo_wait_seconds_bucket{le=\"+Inf\"} 2\n"
                                   "txo_wait_seconds_sum 7.02\n"
                                   "txo_wait_seconds_count 2\n";
    assert_contains(text, expected);
    txo_free(text);
    txo_metrics_free(reg);
}

static void test_escaping(void **state)
{
    (void)state;
    struct txo_metrics *reg = new_registry();
    struct txo_metric *g =
        reg_or_fail(reg, TXO_METRIC_GAUGE, "txo_escape", "Back\\slash, \"quotes\" and a\nnew line.",
                    1, L("v"), NULL, 0);
    txo_metric_set(g, L("a\\b\"c\nd"), 1);
    txo_metric_set(g, L("caf\xc3\xa9"), 2); /* valid UTF-8 is kept */
    txo_metric_set(g,
                   L("bad\xff"
                     "byte\xc3"),
                   3); /* invalid bytes become U+FFFD */
    txo_metric_set(g, L(""), 4);

    static const char expected[] = "# HELP txo_escape Back\\\\slash, \"quotes\" and a\\nnew line.\n"
                                   "# TYPE txo_escape gauge\n"
                                   "txo_escape{v=\"\"} 4\n"
                                   "txo_escape{v=\"a\\\\b\\\"c\\nd\"} 1\n"
                                   "txo_escape{v=\"bad\xef\xbf\xbd"
                                   "byte\xef\xbf\xbd\"} 3\n"
                                   "txo_escape{v=\"caf\xc3\xa9\"} 2\n";
    char *text = render(reg);
    assert_contains(text, expected);
    txo_free(text);
    txo_metrics_free(reg);
}

static void test_number_formatting(void **state)
{
    (void)state;
    struct txo_metrics *reg = new_registry();
    struct txo_metric *g =
        reg_or_fail(reg, TXO_METRIC_GAUGE, "txo_numbers", "Numbers.", 1, L("k"), NULL, 0);
    const struct {
        const char *k;
        double v;
        const char *text;
    } cases[] = {
        {"a", 0.1, "0.1"},
        {"b", 1e-05, "1e-05"},
        {"c", 1e300, "1e+300"},
        {"d", 12345678901.0, "12345678901"},
        {"e", -3.0, "-3"},
        {"f", NAN, "NaN"},
        {"g", INFINITY, "+Inf"},
        {"h", -INFINITY, "-Inf"},
        {"i", -0.0, "0"},
        {"j", 9007199254740991.0, "9007199254740991"},
        {"k", 9007199254740992.0, "9007199254740992"},
        {"l", 0.1 + 0.2, "0.30000000000000004"},
        {"m", 123456789.125, "123456789.125"},
        {"n", 1e21, "1e+21"},
        {"o", -2.5e-7, "-2.5e-07"},
        {"p", 5e-324, "5e-324"},
        {"q", 2.2250738585072014e-308, "2.2250738585072014e-308"},
        {"r", 1.7976931348623157e308, "1.7976931348623157e+308"},
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(cases); i++)
        txo_metric_set(g, L(cases[i].k), cases[i].v);

    char *text = render(reg);
    for (size_t i = 0; i < TXO_ARRAY_LEN(cases); i++) {
        char line[128];
        snprintf(line, sizeof(line), "txo_numbers{k=\"%s\"} %s\n", cases[i].k, cases[i].text);
        assert_contains(text, line);
        /* What is printed reads back as the same double (NaN aside). */
        if (!isnan(cases[i].v) && !isinf(cases[i].v))
            assert_true(strtod(cases[i].text, NULL) == cases[i].v);
    }
    txo_free(text);
    txo_metrics_free(reg);
}

static void assert_register_fails(struct txo_metrics *reg, enum txo_metric_type type,
                                  const char *name, const char *help, size_t n_labels,
                                  const char *const *labels, const double *buckets,
                                  size_t n_buckets, const char *msg)
{
    struct txo_error err;
    txo_error_init(&err);
    struct txo_metric *m =
        txo_metrics_register(reg, type, name, help, n_labels, labels, buckets, n_buckets, &err);
    if (m != NULL)
        fail_msg("register %s succeeded", name != NULL ? name : "(null)");
    assert_int_equal(err.code, TXO_EINVAL);
    if (msg != NULL)
        assert_string_equal(err.msg, msg);
}

static void test_validation(void **state)
{
    (void)state;
    struct txo_metrics *reg = new_registry();
    const double decreasing[] = {1.0, 0.5};
    const double with_nan[] = {0.1, NAN};
    const double with_neg_inf[] = {-INFINITY, 1.0};
    const double repeated[] = {1.0, 1.0};

    assert_register_fails(reg, TXO_METRIC_GAUGE, "1abc", "h", 0, NULL, NULL, 0,
                          "invalid metric name \"1abc\"");
    assert_register_fails(reg, TXO_METRIC_GAUGE, "a-b", "h", 0, NULL, NULL, 0, NULL);
    assert_register_fails(reg, TXO_METRIC_GAUGE, "", "h", 0, NULL, NULL, 0, NULL);
    assert_register_fails(reg, TXO_METRIC_GAUGE, NULL, "h", 0, NULL, NULL, 0, NULL);
    assert_register_fails(reg, TXO_METRIC_GAUGE, "a b", "h", 0, NULL, NULL, 0, NULL);
    assert_register_fails(reg, TXO_METRIC_GAUGE, "ok", "", 0, NULL, NULL, 0, NULL);
    assert_register_fails(reg, TXO_METRIC_GAUGE, "ok", NULL, 0, NULL, NULL, 0, NULL);
    assert_register_fails(reg, TXO_METRIC_GAUGE, "ok", "bad \xff", 0, NULL, NULL, 0, NULL);
    assert_register_fails(reg, (enum txo_metric_type)7, "ok", "h", 0, NULL, NULL, 0, NULL);
    assert_register_fails(reg, TXO_METRIC_GAUGE, "ok", "h", 1, L("__reserved"), NULL, 0,
                          "metric ok: invalid label name \"__reserved\"");
    assert_register_fails(reg, TXO_METRIC_GAUGE, "ok", "h", 1, L("a:b"), NULL, 0, NULL);
    assert_register_fails(reg, TXO_METRIC_GAUGE, "ok", "h", 1, L("9a"), NULL, 0, NULL);
    assert_register_fails(reg, TXO_METRIC_GAUGE, "ok", "h", 1, L(""), NULL, 0, NULL);
    assert_register_fails(reg, TXO_METRIC_GAUGE, "ok", "h", 2, L("a", "a"), NULL, 0,
                          "metric ok: label a given twice");
    assert_register_fails(reg, TXO_METRIC_GAUGE, "ok", "h", 2, NULL, NULL, 0, NULL);
    assert_register_fails(reg, TXO_METRIC_HISTOGRAM, "ok", "h", 1, L("le"), NULL, 0,
                          "metric ok: a histogram cannot have a label named le");
    assert_register_fails(reg, TXO_METRIC_HISTOGRAM, "ok", "h", 0, NULL, decreasing, 2,
                          "metric ok: buckets must be strictly increasing (bucket 1)");
    assert_register_fails(reg, TXO_METRIC_HISTOGRAM, "ok", "h", 0, NULL, repeated, 2, NULL);
    assert_register_fails(reg, TXO_METRIC_HISTOGRAM, "ok", "h", 0, NULL, with_nan, 2,
                          "metric ok: bucket 1 is not finite");
    assert_register_fails(reg, TXO_METRIC_HISTOGRAM, "ok", "h", 0, NULL, with_neg_inf, 2, NULL);

    /* Valid odd ones: colons in metric names, "le" on a gauge, a label named like a type. */
    reg_or_fail(reg, TXO_METRIC_GAUGE, "job:rate:5m", "h", 1, L("le"), NULL, 0);
    reg_or_fail(reg, TXO_METRIC_GAUGE, "_x", "h", 1, L("_y"), NULL, 0);

    /* Nothing half-registered is left behind by the failures. */
    char *text = render(reg);
    assert_null(strstr(text, " ok "));
    assert_null(strstr(text, "# HELP ok"));
    txo_free(text);
    txo_metrics_free(reg);
}

static void test_reregister(void **state)
{
    (void)state;
    struct txo_metrics *reg = new_registry();
    const double bounds[] = {0.1, 1.0};
    const double bounds_inf[] = {0.1, 1.0, INFINITY};
    const double other_bounds[] = {0.1, 2.0};

    struct txo_metric *c =
        reg_or_fail(reg, TXO_METRIC_COUNTER, "txo_events_total", "Events.", 1, L("kind"), NULL, 0);
    txo_metric_inc(c, L("x"));
    /* Same type and labels: the same family, its values and first help text kept. */
    assert_ptr_equal(reg_or_fail(reg, TXO_METRIC_COUNTER, "txo_events_total", "Other help.", 1,
                                 L("kind"), NULL, 0),
                     c);
    assert_true(txo_metric_value(c, L("x")) == 1.0);

    assert_register_fails(reg, TXO_METRIC_GAUGE, "txo_events_total", "Events.", 1, L("kind"), NULL,
                          0,
                          "metric txo_events_total is already registered as a counter with 1 "
                          "labels and other labels or buckets");
    assert_register_fails(reg, TXO_METRIC_COUNTER, "txo_events_total", "Events.", 0, NULL, NULL, 0,
                          NULL);
    assert_register_fails(reg, TXO_METRIC_COUNTER, "txo_events_total", "Events.", 1, L("type"),
                          NULL, 0, NULL);
    assert_register_fails(reg, TXO_METRIC_COUNTER, "txo_events_total", "Events.", 2, L("kind", "x"),
                          NULL, 0, NULL);

    struct txo_metric *h =
        reg_or_fail(reg, TXO_METRIC_HISTOGRAM, "txo_call_seconds", "Calls.", 0, NULL, bounds, 2);
    assert_ptr_equal(reg_or_fail(reg, TXO_METRIC_HISTOGRAM, "txo_call_seconds", "Calls.", 0, NULL,
                                 bounds_inf, 3),
                     h); /* a trailing +Inf is implied */
    assert_register_fails(reg, TXO_METRIC_HISTOGRAM, "txo_call_seconds", "Calls.", 0, NULL,
                          other_bounds, 2, NULL);
    assert_register_fails(reg, TXO_METRIC_HISTOGRAM, "txo_call_seconds", "Calls.", 0, NULL, NULL, 0,
                          NULL); /* the defaults differ */

    /* Names that would render the same series as a histogram. */
    assert_register_fails(reg, TXO_METRIC_COUNTER, "txo_call_seconds_count", "h", 0, NULL, NULL, 0,
                          NULL);
    assert_register_fails(reg, TXO_METRIC_GAUGE, "txo_call_seconds_sum", "h", 0, NULL, NULL, 0,
                          NULL);
    assert_register_fails(reg, TXO_METRIC_GAUGE, "txo_call_seconds_bucket", "h", 0, NULL, NULL, 0,
                          NULL);
    reg_or_fail(reg, TXO_METRIC_GAUGE, "txo_lag_sum", "h", 0, NULL, NULL, 0);
    assert_register_fails(reg, TXO_METRIC_HISTOGRAM, "txo_lag", "h", 0, NULL, NULL, 0,
                          "metric txo_lag clashes with the _bucket, _sum or _count series of a "
                          "histogram");
    /* ...but a gauge may be called like that, and so may an unrelated _count. */
    reg_or_fail(reg, TXO_METRIC_GAUGE, "txo_lag", "h", 0, NULL, NULL, 0);
    reg_or_fail(reg, TXO_METRIC_GAUGE, "txo_rows_count", "h", 0, NULL, NULL, 0);
    txo_metrics_free(reg);
}

static void test_reset(void **state)
{
    (void)state;
    struct txo_metrics *reg = new_registry();
    struct txo_metric *by_status =
        reg_or_fail(reg, TXO_METRIC_GAUGE, "txo_rows", "Rows.", 1, L("status"), NULL, 0);
    struct txo_metric *h = reg_or_fail(reg, TXO_METRIC_HISTOGRAM, "txo_lat_seconds", "Lat.", 0,
                                       NULL, (const double[]){1.0}, 1);
    txo_metric_set(by_status, L("PENDING"), 3);
    txo_metric_set(by_status, L("FAILED"), 1);
    txo_metric_observe(h, NULL, 0.5);

    txo_metric_reset(by_status);
    txo_metric_reset(h);
    txo_metric_set(by_status, L("PENDING"), 5);
    char *text = render(reg);
    assert_null(strstr(text, "FAILED"));
    assert_contains(text, "txo_rows{status=\"PENDING\"} 5\n");
    assert_contains(text, "txo_lat_seconds_bucket{le=\"1\"} 0\n"
                          "txo_lat_seconds_bucket{le=\"+Inf\"} 0\n"
                          "txo_lat_seconds_sum 0\n"
                          "txo_lat_seconds_count 0\n");
    txo_free(text);
    txo_metrics_free(reg);
}

/* ---- collectors ---- */

struct captured_log {
    int warnings;
    char last[1024];
};

static void capture_sink(enum txo_log_level level, const char *component, const char *msg,
                         const struct txo_log_field *fields, size_t n_fields, void *arg)
{
    struct captured_log *c = arg;
    if (level == TXO_LOG_WARN && strcmp(component, "metrics") == 0) {
        c->warnings++;
        txo_log_format_line(c->last, sizeof(c->last), TXO_LOG_FORMAT_LOGFMT, "-", level, component,
                            msg, fields, n_fields);
    }
}

struct source {
    int calls;
    bool failing;
    struct txo_metric *gauge;
};

static int collect_source(void *arg, struct txo_metrics *reg, struct txo_error *err)
{
    (void)reg;
    struct source *s = arg;
    s->calls++;
    if (s->failing)
        return txo_error_set(err, TXO_EDB, "database is down");
    txo_metric_set(s->gauge, NULL, s->calls * 10);
    return 0;
}

/* Registers its family on its first call, proving collectors may register. */
static int collect_late(void *arg, struct txo_metrics *reg, struct txo_error *err)
{
    int *calls = arg;
    (*calls)++;
    struct txo_metric *m =
        txo_metrics_register(reg, TXO_METRIC_GAUGE, "txo_late", "Late.", 0, NULL, NULL, 0, err);
    if (m == NULL)
        return err->code;
    txo_metric_set(m, NULL, 7);
    return 0;
}

static void test_collectors(void **state)
{
    (void)state;
    struct captured_log log = {0};
    txo_log_set_sink(capture_sink, &log);
    struct txo_metrics *reg = new_registry();
    struct source src = {
        .gauge =
            reg_or_fail(reg, TXO_METRIC_GAUGE, "txo_outbox_pending", "Pending.", 0, NULL, NULL, 0),
    };
    int late_calls = 0;
    struct txo_error err;
    txo_error_init(&err);

    assert_int_equal(txo_metrics_add_collector(reg, NULL, NULL, &err), TXO_EINVAL);
    assert_int_equal(txo_metrics_add_collector(reg, collect_source, &src, &err), 0);
    assert_int_equal(txo_metrics_add_collector(reg, collect_late, &late_calls, &err), 0);

    char *text = render(reg);
    assert_int_equal(src.calls, 1);
    assert_int_equal(late_calls, 1);
    assert_contains(text, "txo_outbox_pending 10\n");
    assert_contains(text, "# TYPE txo_late gauge\ntxo_late 7\n");
    assert_contains(text, "txo_metrics_collector_errors_total 0\n");
    txo_free(text);

    /* A failing collector: the render still succeeds, the failure is counted and logged, and
     * its gauge keeps the older value. */
    src.failing = true;
    text = render(reg);
    assert_int_equal(src.calls, 2);
    assert_contains(text, "txo_outbox_pending 10\n");
    assert_contains(text, "txo_metrics_collector_errors_total 1\n");
    txo_free(text);
    assert_int_equal(log.warnings, 1);
    assert_non_null(strstr(log.last, "database is down"));
    assert_non_null(strstr(log.last, "TXO_EDB"));

    text = render(reg);
    assert_contains(text, "txo_metrics_collector_errors_total 2\n");
    txo_free(text);

    src.failing = false;
    text = render(reg);
    assert_int_equal(src.calls, 4);
    assert_int_equal(late_calls, 4);
    assert_contains(text, "txo_outbox_pending 40\n");
    assert_contains(text, "txo_metrics_collector_errors_total 2\n");
    txo_free(text);
    assert_int_equal(log.warnings, 2);

    txo_log_set_sink(NULL, NULL);
    txo_metrics_free(reg);
}

/* ---- threads ---- */

enum { THREADS = 4, ITERATIONS = 10000 };

struct shared {
    struct txo_metric *counter;
    struct txo_metric *gauge;
    struct txo_metric *hist;
    struct txo_metrics *reg;
    atomic_int workers_left;
    int renders;
    int render_failures;
};

static void *update(void *arg)
{
    struct shared *s = arg;
    for (int i = 0; i < ITERATIONS; i++) {
        txo_metric_inc(s->counter, L(i % 2 == 0 ? "even" : "odd"));
        txo_metric_add(s->gauge, NULL, 1);
        txo_metric_observe(s->hist, L(i % 3 == 0 ? "x" : "y"), 0.125);
        txo_metric_add(s->gauge, NULL, -1);
    }
    atomic_fetch_sub(&s->workers_left, 1);
    return NULL;
}

static void *keep_rendering(void *arg)
{
    struct shared *s = arg;
    while (atomic_load(&s->workers_left) > 0) {
        char *text = NULL;
        if (txo_metrics_render(s->reg, &text, NULL, NULL) != 0)
            s->render_failures++;
        txo_free(text);
        s->renders++;
    }
    return NULL;
}

static void test_concurrent_updates_sum_exactly(void **state)
{
    (void)state;
    struct shared s = {.reg = new_registry()};
    s.counter =
        reg_or_fail(s.reg, TXO_METRIC_COUNTER, "txo_ops_total", "Ops.", 1, L("parity"), NULL, 0);
    s.gauge = reg_or_fail(s.reg, TXO_METRIC_GAUGE, "txo_busy", "Busy.", 0, NULL, NULL, 0);
    s.hist =
        reg_or_fail(s.reg, TXO_METRIC_HISTOGRAM, "txo_op_seconds", "Op time.", 1, L("k"), NULL, 0);
    atomic_init(&s.workers_left, THREADS);

    pthread_t renderer;
    pthread_t t[THREADS];
    assert_int_equal(pthread_create(&renderer, NULL, keep_rendering, &s), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, update, &s), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(pthread_join(renderer, NULL), 0);
    assert_int_equal(s.render_failures, 0);

    assert_true(txo_metric_value(s.counter, L("even")) == THREADS * ITERATIONS / 2);
    assert_true(txo_metric_value(s.counter, L("odd")) == THREADS * ITERATIONS / 2);
    assert_true(txo_metric_value(s.gauge, NULL) == 0.0);
    char *text = render(s.reg);
    char line[128];
    /* i % 3 == 0 for 3334 of every 10000 iterations. */
    snprintf(line, sizeof(line), "txo_op_seconds_count{k=\"x\"} %d\n", THREADS * 3334);
    assert_contains(text, line);
    snprintf(line, sizeof(line), "txo_op_seconds_count{k=\"y\"} %d\n", THREADS * 6666);
    assert_contains(text, line);
    snprintf(line, sizeof(line), "txo_op_seconds_bucket{k=\"y\",le=\"0.25\"} %d\n", THREADS * 6666);
    assert_contains(text, line);
    snprintf(line, sizeof(line), "txo_op_seconds_sum{k=\"y\"} %.0f\n", THREADS * 6666 * 0.125);
    assert_contains(text, line);
    txo_free(text);
    txo_metrics_free(s.reg);
}

/* ---- out of memory ---- */

static void test_out_of_memory(void **state)
{
    (void)state;
    struct captured_log log = {0};
    txo_log_set_sink(capture_sink, &log);

    /* txo_metrics_new: fails cleanly at every allocation, then succeeds. */
    struct txo_metrics *reg = NULL;
    long n;
    for (n = 0;; n++) {
        txo_alloc_fail_after(n);
        int rc = txo_metrics_new(&reg, NULL);
        txo_alloc_fail_after(-1);
        if (rc == 0)
            break;
        assert_int_equal(rc, TXO_ENOMEM);
        assert_null(reg);
    }
    assert_true(n > 3);
    txo_metrics_free(reg);

    /* Registration and render, at every allocation. */
    reg = new_registry();
    struct txo_metric *m = NULL;
    for (n = 0;; n++) {
        struct txo_error err;
        txo_error_init(&err);
        txo_alloc_fail_after(n);
        m = txo_metrics_register(reg, TXO_METRIC_HISTOGRAM, "txo_h_seconds", "H.", 2, L("a", "b"),
                                 NULL, 0, &err);
        txo_alloc_fail_after(-1);
        if (m != NULL)
            break;
        assert_int_equal(err.code, TXO_ENOMEM);
    }
    assert_true(n > 3);
    txo_metric_observe(m, L("1", "2"), 0.3);

    char *baseline = render(reg);
    for (n = 0;; n++) {
        char *text = NULL;
        txo_alloc_fail_after(n);
        int rc = txo_metrics_render(reg, &text, NULL, NULL);
        txo_alloc_fail_after(-1);
        if (rc == 0) {
            assert_string_equal(text, baseline);
            txo_free(text);
            break;
        }
        assert_int_equal(rc, TXO_ENOMEM);
        assert_null(text);
    }
    assert_true(n > 0);
    txo_free(baseline);

    /* An update that cannot make its child is dropped with a warning. */
    txo_alloc_fail_after(0);
    txo_metric_observe(m, L("new", "child"), 0.3);
    txo_alloc_fail_after(-1);
    assert_int_equal(log.warnings, 1);
    assert_non_null(strstr(log.last, "txo_h_seconds"));
    char *text = render(reg);
    assert_null(strstr(text, "new"));
    txo_free(text);

    txo_log_set_sink(NULL, NULL);
    txo_metrics_free(reg);
}

/* ---- the process families ---- */

/* The value of the unlabelled series `name` in text, or -1 when it is not there. */
static double series(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; (p = strstr(p, name)) != NULL; p += n)
        if ((p == text || p[-1] == '\n') && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return -1;
}

static void test_process_families(void **state)
{
    (void)state;
    struct txo_metrics *reg = new_registry();
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_metrics_add_process(reg, &err), 0);
    /* Some CPU time to count. */
    volatile double x = 0;
    for (int i = 0; i < 20000000; i++)
        x += i * 0.5;
    char *text = render(reg);
    assert_non_null(strstr(text, "txo_build_info{version=\"" TXO_VERSION "\",revision=\""));
    assert_non_null(strstr(text, "# TYPE process_cpu_seconds_total counter\n"));
    double cpu = series(text, "process_cpu_seconds_total");
    assert_true(cpu > 0 && cpu < 3600);
    double rss = series(text, "process_resident_memory_bytes");
    assert_true(rss > 1024 * 1024 && rss <= series(text, "process_virtual_memory_bytes"));
    double fds = series(text, "process_open_fds");
    assert_true(fds >= 3 && fds <= series(text, "process_max_fds"));
    /* Started a moment ago: within the last 10 minutes, not in the future. */
    double start = series(text, "process_start_time_seconds");
    double now = (double)time(NULL);
    assert_true(start > now - 600 && start <= now + 1);
    txo_free(text);
    /* The counter only moves up, by the CPU time spent in between. */
    for (int i = 0; i < 20000000; i++)
        x += i * 0.5;
    assert_true(x > 0); /* the loops' work is used, so it is done */
    text = render(reg);
    assert_true(series(text, "process_cpu_seconds_total") >= cpu);
    txo_free(text);
    txo_metrics_free(reg);
}

/* ---- promtool ---- */

static int collect_ok(void *arg, struct txo_metrics *reg, struct txo_error *err)
{
    (void)arg;
    (void)reg;
    (void)err;
    return 0;
}

static int collect_broken(void *arg, struct txo_metrics *reg, struct txo_error *err)
{
    (void)arg;
    (void)reg;
    return txo_error_set(err, TXO_ETIMEOUT, "query timed out");
}

static void test_promtool_accepts_every_type(void **state)
{
    (void)state;
    if (access(PROMTOOL, X_OK) != 0)
        fail_msg(PROMTOOL " is missing: promtool (Debian package prometheus) is required");
    txo_log_set_level(TXO_LOG_ERROR); /* the broken collector's warning is expected */

    struct txo_metrics *reg = new_registry();
    struct txo_error perr;
    txo_error_init(&perr);
    assert_int_equal(txo_metrics_add_process(reg, &perr), 0); /* the process families too */
    struct txo_metric *req =
        reg_or_fail(reg, TXO_METRIC_COUNTER, "txo_http_requests_total", "HTTP requests answered.",
                    2, L("route", "status"), NULL, 0);
    struct txo_metric *dl = reg_or_fail(reg, TXO_METRIC_COUNTER, "txo_mysql_deadlocks_total",
                                        "Deadlocks (MySQL 1213) seen.", 0, NULL, NULL, 0);
    struct txo_metric *pend = reg_or_fail(reg, TXO_METRIC_GAUGE, "txo_outbox_pending",
                                          "Outbox events not published.", 0, NULL, NULL, 0);
    struct txo_metric *odd = reg_or_fail(reg, TXO_METRIC_GAUGE, "txo_odd_values",
                                         "Values with \\ and \nnewline.", 1, L("which"), NULL, 0);
    struct txo_metric *dur =
        reg_or_fail(reg, TXO_METRIC_HISTOGRAM, "txo_external_request_duration_seconds",
                    "Duration of calls to external services.", 2, L("service", "outcome"), NULL, 0);
    struct txo_metric *batch =
        reg_or_fail(reg, TXO_METRIC_HISTOGRAM, "txo_relay_batch_size", "Events per batch.", 0, NULL,
                    (const double[]){1, 10, 100, 1000}, 4);
    reg_or_fail(reg, TXO_METRIC_HISTOGRAM, "txo_only_inf_seconds", "Only the +Inf bucket.", 0, NULL,
                (const double[]){0}, 0);
    reg_or_fail(reg, TXO_METRIC_GAUGE, "txo_saga_running", "Sagas running, per type.", 1,
                L("saga_type"), NULL, 0); /* no children: HELP and TYPE only */
    reg_or_fail(reg, TXO_METRIC_HISTOGRAM, "txo_unused_seconds", "Never observed.", 1, L("x"), NULL,
                0);

    txo_metric_inc(req, L("/orders", "201"));
    txo_metric_add(req, L("/orders/{id}", "404"), 12);
    txo_metric_inc(req, L("quote\"back\\slash\nnewline", "500"));
    txo_metric_inc(req, L("caf\xc3\xa9 \xe2\x82\xac", "200"));
    txo_metric_inc(req, L("bad\xff", "200"));
    txo_metric_add(dl, NULL, 3);
    txo_metric_set(pend, NULL, 1234567);
    txo_metric_set(odd, L("nan"), NAN);
    txo_metric_set(odd, L("pinf"), INFINITY);
    txo_metric_set(odd, L("ninf"), -INFINITY);
    txo_metric_set(odd, L("tiny"), 5e-324);
    txo_metric_set(odd, L("huge"), 1.7976931348623157e308);
    txo_metric_set(odd, L("neg"), -0.30000000000000004);
    for (int i = 0; i < 50; i++) {
        txo_metric_observe(dur, L("payment", i % 5 == 0 ? "error" : "ok"), 0.003 * i);
        txo_metric_observe(batch, NULL, i * 37);
    }
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_metrics_add_collector(reg, collect_ok, NULL, &err), 0);
    assert_int_equal(txo_metrics_add_collector(reg, collect_broken, NULL, &err), 0);

    char *text = render(reg);
    assert_contains(text, "txo_metrics_collector_errors_total 1\n");

    char output[8192];
    int status = testpipe_run(text, PROMTOOL " check metrics <", "2>&1", output, sizeof(output));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("promtool check metrics failed (status %d):\n%s\n--- input\n%s", status, output,
                 text);
    txo_free(text);
    txo_log_set_level(TXO_LOG_INFO);
    txo_metrics_free(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_registry),
        cmocka_unit_test(test_exact_text),
        cmocka_unit_test(test_default_buckets),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_number_formatting),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_reregister),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_collectors),
        cmocka_unit_test(test_concurrent_updates_sum_exactly),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_process_families),
        cmocka_unit_test(test_promtool_accepts_every_type),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
