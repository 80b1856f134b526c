/*
 * Tracing never slows or fails the business work, with real processes: `txo up` (API, relay
 * and worker; the local broker, the in-process payment and shipment stand-ins) exports every
 * span (--trace-sample-ratio 1) to an OTLP collector that does not take them, while orders
 * come in through the HTTP API, half of them with a sampled `traceparent` of their own.
 *
 *   down   --otlp-endpoint names a port nothing listens on: every export is refused.
 *   slow   the collector (tests/support/http_recorder.py --delay) accepts the connection and
 *          reads the request, but answers only after the exporter's timeout (5 s): every
 *          export times out.
 *
 * Either way every POST /orders is answered 201 within the client's timeout (5 s, the
 * exporter's too: a POST that waited for an export would fail), every order reaches
 * CONFIRMED, no span is counted as exported, the spans the collector did not take are counted
 * in txo_trace_spans_dropped_total{reason="export"}, and `txo up` exits 0 soon after SIGTERM
 * (what is queued then is sent once, waiting at most the export timeout; the bound below is a
 * generous "did not hang", speed is measured in bench/tracing.sh).
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "testrun.h"
#include "testdb.h"
#include "testpipeline.h"
#include "testproc.h"
#include "testserver.h"

#define ORDERS          300
#define SKU             "trace-pen"
#define COLLECTOR_DELAY "8" /* seconds; the exporter gives up after 5 */
#define DROP_WAIT_MS    30000
#define STOP_BOUND_MS   20000 /* SIGTERM to exit: one export timeout, with room for slow builds */

#define DROPPED_EXPORT "txo_trace_spans_dropped_total{reason=\"export\"}"
#define EXPORTED       "txo_trace_spans_exported_total"

struct ctx {
    struct testdb t;
    struct testpipeline p;     /* txo up, the HTTP client, their logs */
    struct testproc collector; /* http_recorder.py, in the slow test */
    char collector_file[96];
};

static int setup(void **state)
{
    struct ctx *c = testdb_fixture_new(sizeof(*c), "trace_down", TESTDB_NEW_EXPORT_ENV);
    testpipeline_init(&c->p, c->t.db);
    static const struct testpipeline_stock stock[] = {{SKU, 100000}};
    testpipeline_set_initial_stock(&c->p, stock, TXO_ARRAY_LEN(stock));
    snprintf(c->collector_file, sizeof(c->collector_file), "/tmp/txo_test_otlp_slow_%ld.jsonl",
             (long)getpid());
    unlink(c->collector_file);
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    testproc_stop_hard(&c->collector);
    unlink(c->collector_file);
    testpipeline_release(&c->p);
    testdb_fixture_free(c);
    return 0;
}

/* Starts `txo up` exporting every span to endpoint; returns its API port once it answers. */
static unsigned start_up(struct ctx *c, const char *endpoint, struct testproc **out)
{
    unsigned port = testproc_free_port();
    struct testpipeline_args a;
    testpipeline_args_init(&a, "up");
    testpipeline_args_addf(&a, "--listen=127.0.0.1:%u", port);
    testpipeline_args_add(&a, "--idle-sleep=20");
    testpipeline_args_add(&a, "--poll=50");
    testpipeline_args_add(&a, "--clean-interval=0");
    testpipeline_args_addf(&a, "--otlp-endpoint=%s", endpoint);
    testpipeline_args_add(&a, "--trace-sample-ratio=1");
    *out = testpipeline_start(&c->p, "trace_down_up", &a);
    testpipeline_wait_ready(&c->p, *out, port);
    return port;
}

/* POSTs ORDERS orders, every other one with a sampled traceparent of its own; each must be
 * answered 201. */
static void place_orders(struct ctx *c, unsigned port)
{
    for (unsigned i = 0; i < ORDERS; i++) {
        char key[32], traceparent[96];
        snprintf(key, sizeof(key), "trace-down-%u", i);
        snprintf(traceparent, sizeof(traceparent),
                 "traceparent: 00-4bf92f3577b34da6a3ce929d%08x-00f067aa%08x-01", i + 1, i + 1);
        const char *headers[] = {traceparent, NULL};
        const char body[] =
            "{\"customer_id\":7,\"items\":[{\"sku\":\"" SKU "\",\"qty\":1,\"price_cents\":250}]}";
        (void)testpipeline_post_order_headers(&c->p, port, key, i % 2 == 0 ? headers : NULL, body);
    }
}

/* Waits until the exporter has counted spans dropped for export failures. */
static double wait_dropped(struct ctx *c, unsigned port)
{
    int64_t deadline = txo_monotonic_ms() + DROP_WAIT_MS;
    double dropped;
    while ((dropped = testpipeline_metric(&c->p, port, DROPPED_EXPORT)) <= 0) {
        if (txo_monotonic_ms() > deadline)
            TESTPIPELINE_FAIL(&c->p, "%s still %.0f after %d s", DROPPED_EXPORT, dropped,
                              DROP_WAIT_MS / 1000);
        txo_sleep_ms(200);
    }
    return dropped;
}

/* The orders, their outcome, the counters and the shutdown, as the file's top describes. */
static void check_tracing_stays_aside(struct ctx *c, const char *endpoint, const char *what)
{
    struct testproc *up;
    unsigned port = start_up(c, endpoint, &up);
    place_orders(c, port);
    testpipeline_wait_terminal(&c->p, ORDERS, 60000, "with the collector away");
    int64_t confirmed =
        testdb_i64(c->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'", NULL, 0);
    if (confirmed != ORDERS)
        TESTPIPELINE_FAIL(&c->p, "collector %s: %" PRId64 " of %d orders CONFIRMED", what,
                          confirmed, ORDERS);

    double dropped = wait_dropped(c, port);
    double exported = testpipeline_metric(&c->p, port, EXPORTED);
    double queue_full =
        testpipeline_metric(&c->p, port, "txo_trace_spans_dropped_total{reason=\"queue_full\"}");
    print_message("collector %s: %.0f spans dropped (export), %.0f (queue full), %.0f exported\n",
                  what, dropped, queue_full, exported);
    if (exported > 0)
        TESTPIPELINE_FAIL(&c->p, "collector %s: %s is %.0f", what, EXPORTED, exported);

    int64_t t0 = txo_monotonic_ms();
    if (!testproc_stop(up, STOP_BOUND_MS))
        TESTPIPELINE_FAIL(&c->p,
                          "collector %s: txo up did not exit 0 within %d s of SIGTERM "
                          "(wait status 0x%x)",
                          what, STOP_BOUND_MS / 1000, up->status);
    print_message("collector %s: txo up stopped %" PRId64 " ms after SIGTERM\n", what,
                  txo_monotonic_ms() - t0);
    testpipeline_remove_logs(&c->p);
}

static void test_collector_down(void **state)
{
    struct ctx *c = *state;
    char endpoint[64];
    snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%u/v1/traces", testproc_free_port());
    check_tracing_stays_aside(c, endpoint, "down");
}

static void test_collector_slow(void **state)
{
    struct ctx *c = *state;
    unsigned cport = testproc_free_port();
    char cport_s[16], endpoint[64];
    snprintf(cport_s, sizeof(cport_s), "%u", cport);
    snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%u/v1/traces", cport);
    const char *py = getenv("TXO_PYTHON");
    const char *argv[] = {py != NULL && py[0] != '\0' ? py : "/usr/bin/python3",
                          testserver_source_path("tests/support/http_recorder.py"),
                          "--delay",
                          COLLECTOR_DELAY,
                          cport_s,
                          c->collector_file,
                          NULL};
    testproc_start(&c->collector, "otlp_slow", argv, NULL);
    if (!testproc_wait_port(cport, 10000)) {
        testproc_print_log(&c->collector, "http_recorder.py");
        fail_msg("the slow OTLP collector did not listen on %u", cport);
    }
    check_tracing_stays_aside(c, endpoint, "slow");
    /* The collector received export requests (it was slow, not away) and is still there. */
    if (access(c->collector_file, F_OK) != 0 || testproc_wait(&c->collector, 0)) {
        testproc_print_log(&c->collector, "http_recorder.py");
        fail_msg("the slow collector received no export, or it died");
    }
    testproc_stop_hard(&c->collector);
    testproc_remove_log(&c->collector);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_collector_down),
        cmocka_unit_test(test_collector_slow),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
}
