/*
 * The gRPC publisher against a real EventSink server: the independent Python implementation
 * (tests/support/testgrpc.h, python3-grpcio), one server for the whole binary, told before each
 * case how to answer. What arrived is read from the server's own records, not through the code
 * under test.
 *
 *   - Every gRPC status the server may answer maps to the documented code, transient or
 *     permanent (the table in txo/grpc.h).
 *   - Per-event outcomes: accepted, rejected for now, rejected for good, each with the server's
 *     reason; a response with the wrong number of results delivers nothing.
 *   - A server slower than the deadline: TXO_ETIMEOUT within about the deadline.
 *   - Batches larger than max_batch_bytes go as several calls; an event larger than that alone
 *     fails permanently while the others are delivered.
 *   - Each event carries its own trace context in its fields, the Publish call none in its
 *     metadata (also a call of one event).
 *   - The metrics families count what happened.
 *   - Freeing the last publisher shuts gRPC down: none of its threads is left.
 * The contracts every transport keeps (publish, per-aggregate order, restart) are in
 * tests/conformance.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dirent.h>

#include <cmocka.h>

#include "testdb.h"
#include "testbatch.h"
#include "testgrpc.h"
#include "testrelay.h"
#include "txo/grpc.h"

static int setup(void **state)
{
    (void)state;
    testgrpc_control(&testgrpc_shared, "");
    testgrpc_reset_records(&testgrpc_shared);
    return 0;
}

static struct txo_publisher *new_publisher(const struct txo_grpc_opts *o, struct txo_metrics *m)
{
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_publisher_grpc_new(o, m, &pub, &err) < 0)
        fail_msg("txo_publisher_grpc_new: %s", err.msg);
    return pub;
}

static void default_opts(struct txo_grpc_opts *o)
{
    txo_grpc_opts_init(o);
    o->target = testgrpc_shared.target;
    o->deadline_ms = 3000;
}

/* ---- direct batches ---- */

/* Messages with ids first_id.., key "k:<id>", payload_bytes of JSON each (at least ~40). */
static void batch_init(struct testbatch *b, size_t n, int64_t first_id, size_t payload_bytes)
{
    testbatch_init(b, n, first_id, "k");
    size_t len = payload_bytes < 40 ? 40 : payload_bytes;
    char *payload = malloc(len + 1);
    assert_non_null(payload);
    for (size_t i = 0; i < n; i++) {
        int head = snprintf(payload, len + 1, "{\"n\":%lld,\"pad\":\"", (long long)b->msgs[i].id);
        memset(payload + head, 'x', len - (size_t)head - 2);
        memcpy(payload + len - 2, "\"}", 3);
        testbatch_set_payload(b, i, payload, len);
    }
    free(payload);
}

static void publish(struct txo_publisher *pub, struct testbatch *b)
{
    assert_int_equal(testbatch_publish(pub, b), 0);
}

struct status_case {
    const char *name;
    int code;
};

static void test_status_codes_mapped(void **state)
{
    (void)state;
    static const struct status_case cases[] = {
        {"UNAVAILABLE", TXO_EUNAVAILABLE},
        {"DEADLINE_EXCEEDED", TXO_ETIMEOUT},
        {"RESOURCE_EXHAUSTED", TXO_EUNAVAILABLE},
        {"ABORTED", TXO_EPUBLISH},
        {"CANCELLED", TXO_EPUBLISH},
        {"INTERNAL", TXO_EPUBLISH},
        {"UNKNOWN", TXO_EPUBLISH},
        {"DATA_LOSS", TXO_EPUBLISH},
        {"ALREADY_EXISTS", TXO_EPUBLISH},
        {"INVALID_ARGUMENT", TXO_EINVAL},
        {"FAILED_PRECONDITION", TXO_EINVAL},
        {"OUT_OF_RANGE", TXO_EINVAL},
        {"NOT_FOUND", TXO_ECONFIG},
        {"UNIMPLEMENTED", TXO_ECONFIG},
        {"PERMISSION_DENIED", TXO_ECONFIG},
        {"UNAUTHENTICATED", TXO_ECONFIG},
    };
    struct txo_grpc_opts o;
    default_opts(&o);
    struct txo_publisher *pub = new_publisher(&o, NULL);
    struct testbatch b;
    batch_init(&b, 3, 1, 60);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char rules[128];
        snprintf(rules, sizeof(rules), "\"status\": \"%s\", \"status_calls\": 1", cases[c].name);
        testgrpc_control(&testgrpc_shared, rules);
        publish(pub, &b);
        for (size_t i = 0; i < b.n; i++) {
            if (b.results[i] != cases[c].code)
                fail_msg("status %s: event %zu got %s (%s), expected %s", cases[c].name, i,
                         txo_err_name(b.results[i]), b.errors[i].msg, txo_err_name(cases[c].code));
            if (strstr(b.errors[i].msg, cases[c].name) == NULL)
                fail_msg("status %s: the reason does not name it: %s", cases[c].name,
                         b.errors[i].msg);
        }
    }
    assert_int_equal(testgrpc_count_calls(&testgrpc_shared, "OK"), 0);
    struct testgrpc_event *ev = NULL;
    assert_int_equal(testgrpc_events(&testgrpc_shared, &ev), 0);
    testgrpc_free_events(ev, 0);

    /* Transient ones are retried, permanent ones dead-lettered (txo_err_is_transient). */
    assert_true(txo_err_is_transient(txo_grpc_status_code(14)));  /* UNAVAILABLE */
    assert_true(txo_err_is_transient(txo_grpc_status_code(4)));   /* DEADLINE_EXCEEDED */
    assert_false(txo_err_is_transient(txo_grpc_status_code(3)));  /* INVALID_ARGUMENT */
    assert_false(txo_err_is_transient(txo_grpc_status_code(12))); /* UNIMPLEMENTED */
    assert_int_equal(txo_grpc_status_code(0), 0);
    assert_int_equal(txo_grpc_status_code(100), TXO_EPUBLISH); /* a code of a later gRPC */
    testbatch_free(&b);
    txo_publisher_free(pub);
}

static void test_per_event_outcomes(void **state)
{
    (void)state;
    struct txo_metrics *reg = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_metrics_new(&reg, &err), 0);
    struct txo_grpc_opts o;
    default_opts(&o);
    struct txo_publisher *pub = new_publisher(&o, reg);
    struct testbatch b;
    batch_init(&b, 5, 101, 80);
    /* The permanent reason ends in a line break and 150 two-byte characters: it must come back
     * cut on a character boundary, the control character replaced (it goes to utf8mb4). */
    char rules[1024];
    int used = snprintf(rules, sizeof(rules),
                        "\"reject_permanent\": [\"k:102\"], \"reject_transient\": [\"k:104\"], "
                        "\"reason_suffix\": \"\\n");
    for (int k = 0; k < 150; k++)
        used += snprintf(rules + used, sizeof(rules) - (size_t)used, "\xc3\xa9");
    snprintf(rules + used, sizeof(rules) - (size_t)used, "\"");
    testgrpc_control(&testgrpc_shared, rules);
    publish(pub, &b);
    assert_int_equal(b.results[0], 0);
    assert_int_equal(b.results[1], TXO_EBUSINESS);
    assert_non_null(strstr(b.errors[1].msg, "unknown product in k:102?\xc3\xa9\xc3\xa9"));
    assert_true(txo_utf8_valid(b.errors[1].msg, strlen(b.errors[1].msg)));
    assert_in_range(strlen(strstr(b.errors[1].msg, "unknown product")), 190, 200);
    assert_int_equal(b.results[2], 0);
    assert_int_equal(b.results[3], TXO_EPUBLISH);
    assert_non_null(strstr(b.errors[3].msg, "inventory busy"));
    assert_int_equal(b.results[4], 0);

    struct testgrpc_event *ev = NULL;
    size_t n = testgrpc_events(&testgrpc_shared, &ev);
    assert_int_equal(n, 3);
    assert_string_equal(ev[0].idempotency_key, "k:101");
    assert_string_equal(ev[1].idempotency_key, "k:103");
    assert_string_equal(ev[2].idempotency_key, "k:105");
    testgrpc_free_events(ev, n);

    /* A response with one result too few: nothing counts as delivered. */
    testgrpc_control(&testgrpc_shared, "\"wrong_count_calls\": 1");
    publish(pub, &b);
    for (size_t i = 0; i < b.n; i++) {
        assert_int_equal(b.results[i], TXO_EPUBLISH);
        assert_non_null(strstr(b.errors[i].msg, "answered 4 results for 5 events"));
    }

    char *text = NULL;
    size_t len = 0;
    assert_int_equal(txo_metrics_render(reg, &text, &len, &err), 0);
    assert_non_null(strstr(text, "txo_grpc_events_published_total 3\n"));
    assert_non_null(strstr(text, "txo_grpc_events_failed_total{kind=\"permanent\"} 1\n"));
    assert_non_null(strstr(text, "txo_grpc_events_failed_total{kind=\"transient\"} 6\n"));
    assert_non_null(strstr(text, "txo_grpc_calls_total{status=\"OK\"} 2\n"));
    assert_non_null(strstr(text, "txo_grpc_calls_in_flight 0\n"));
    assert_non_null(strstr(text, "txo_grpc_call_duration_seconds_count 2\n"));
    txo_free(text);
    testbatch_free(&b);
    txo_publisher_free(pub);
    txo_metrics_free(reg);
}

static void test_deadline_exceeded(void **state)
{
    (void)state;
    struct txo_grpc_opts o;
    default_opts(&o);
    o.deadline_ms = 400;
    struct txo_publisher *pub = new_publisher(&o, NULL);
    struct testbatch b;
    batch_init(&b, 4, 201, 60);
    testgrpc_control(&testgrpc_shared, "\"sleep_ms\": 1500, \"sleep_calls\": 1");
    int64_t t0 = txo_monotonic_ms();
    publish(pub, &b);
    int64_t ms = txo_monotonic_ms() - t0;
    for (size_t i = 0; i < b.n; i++) {
        assert_int_equal(b.results[i], TXO_ETIMEOUT);
        assert_non_null(strstr(b.errors[i].msg, "DEADLINE_EXCEEDED"));
    }
    if (ms < 350 || ms > 1400)
        fail_msg("a call with a 400 ms deadline came back after %lld ms", (long long)ms);
    /* The next call is answered normally. */
    publish(pub, &b);
    for (size_t i = 0; i < b.n; i++)
        assert_int_equal(b.results[i], 0);
    testbatch_free(&b);
    txo_publisher_free(pub);
}

static void test_split_by_max_batch_bytes(void **state)
{
    (void)state;
    struct txo_grpc_opts o;
    default_opts(&o);
    o.max_batch_bytes = 2048;
    struct txo_publisher *pub = new_publisher(&o, NULL);
    struct testbatch b;
    batch_init(&b, 10, 301, 600);
    /* Event 306 is bigger than a whole request may be. */
    char big[3000];
    memset(big, ' ', sizeof(big));
    memcpy(big, "{}", 2);
    testbatch_set_payload(&b, 5, big, sizeof(big));
    publish(pub, &b);
    for (size_t i = 0; i < b.n; i++) {
        if (i == 5) {
            assert_int_equal(b.results[i], TXO_EINVAL);
            assert_non_null(strstr(b.errors[i].msg, "larger than max_batch_bytes"));
        } else {
            assert_int_equal(b.results[i], 0);
        }
    }
    /* About 680 bytes an event: three a call at most, in order. */
    size_t calls = testgrpc_count_calls(&testgrpc_shared, "OK");
    assert_in_range(calls, 4, 6);
    struct testgrpc_event *ev = NULL;
    size_t n = testgrpc_events(&testgrpc_shared, &ev);
    assert_int_equal(n, 9);
    for (size_t k = 0, i = 0; k < n; k++, i++) {
        if (i == 5)
            i++;
        assert_int_equal(ev[k].id, b.msgs[i].id);
        assert_int_equal(ev[k].payload_len, b.msgs[i].payload_len);
        assert_memory_equal(ev[k].payload, b.msgs[i].payload, b.msgs[i].payload_len);
    }
    testgrpc_free_events(ev, n);
    testbatch_free(&b);
    txo_publisher_free(pub);
}

#define TRACEPARENT "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static void test_trace_per_event(void **state)
{
    (void)state;
    struct txo_grpc_opts o;
    default_opts(&o);
    struct txo_publisher *pub = new_publisher(&o, NULL);
    struct testbatch b;
    batch_init(&b, 4, 401, 40);
    b.msgs[0].traceparent = TRACEPARENT;
    b.msgs[0].tracestate = "vendor=x";
    b.msgs[1].traceparent = TRACEPARENT;
    b.msgs[3].tracestate = "vendor=x"; /* without a traceparent it means nothing */
    publish(pub, &b);
    b.n = 1; /* a call of one event */
    publish(pub, &b);
    b.n = 4;
    assert_int_equal(testgrpc_count_calls(&testgrpc_shared, "OK"), 2);
    assert_int_equal(testgrpc_count_traced_calls(&testgrpc_shared), 0);
    struct testgrpc_event *ev = NULL;
    size_t n = testgrpc_events(&testgrpc_shared, &ev);
    assert_int_equal(n, 5);
    for (size_t k = 0; k < n; k++) {
        size_t i = k % 4;
        assert_int_equal(ev[k].id, b.msgs[i].id);
        assert_string_equal(ev[k].traceparent, i < 2 ? TRACEPARENT : "");
        assert_string_equal(ev[k].tracestate, i == 0 ? "vendor=x" : "");
    }
    testgrpc_free_events(ev, n);
    testbatch_free(&b);
    txo_publisher_free(pub);
}

static void test_bad_options(void **state)
{
    (void)state;
    struct txo_grpc_opts o;
    txo_grpc_opts_init(&o);
    o.target = "";
    testgrpc_expect_refused(&o, TXO_EINVAL, "target");
    txo_grpc_opts_init(&o);
    o.deadline_ms = 0;
    testgrpc_expect_refused(&o, TXO_EINVAL, NULL);
    txo_grpc_opts_init(&o);
    o.max_batch_bytes = 10;
    testgrpc_expect_refused(&o, TXO_EINVAL, NULL);
}

static size_t thread_count(void)
{
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void test_no_thread_left_after_free(void **state)
{
    (void)state;
    size_t before = thread_count();
    struct txo_grpc_opts o;
    default_opts(&o);
    struct txo_publisher *pub = new_publisher(&o, NULL);
    struct testbatch b;
    batch_init(&b, 2, 401, 50);
    publish(pub, &b);
    assert_int_equal(b.results[0], 0);
    assert_true(thread_count() > before); /* gRPC runs its own threads meanwhile */
    txo_publisher_free(pub);
    /* A thread gRPC has told to stop may take a moment to be gone from /proc (seen under TSan),
     * and one an earlier test's publisher left stopping may be gone by now (seen under ASan):
     * what counts is that no thread more than before stays. */
    size_t after = thread_count();
    for (int i = 0; i < 60 && after > before; i++) {
        txo_sleep_ms(50);
        after = thread_count();
    }
    if (after > before)
        fail_msg("%zu threads before the publisher, %zu after it was freed", before, after);
    testbatch_free(&b);
}

/* ---- the relay end to end: MariaDB -> relay -> gRPC ---- */

#define N_EVENTS      10000
#define N_AGGREGATES  1000
#define APPEND_PER_TX 500

/* Event i (1-based) belongs to aggregate i % N_AGGREGATES; its payload has escapes, non-ASCII
 * text and a number beyond 2^53, which must arrive byte for byte. */
int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test_setup(test_status_codes_mapped, setup),
        cmocka_unit_test_setup(test_per_event_outcomes, setup),
        cmocka_unit_test_setup(test_deadline_exceeded, setup),
        cmocka_unit_test_setup(test_split_by_max_batch_bytes, setup),
        cmocka_unit_test_setup(test_trace_per_event, setup),
        cmocka_unit_test_setup(test_no_thread_left_after_free, setup),
    };
    return cmocka_run_group_tests(tests, testgrpc_group_setup, testgrpc_group_teardown);
}
