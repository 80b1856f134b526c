/*
 * The order saga's external services (app/order-service/order_services.h) against a real
 * txo-fake-services process: the batched form, order_service_call_many(), one try of n calls
 * made at once through the same guards as single calls.
 *
 * What is asserted: 10 charges at once (300 ms each at the service) end in well under 10 x
 * 300 ms, each applied once (/stats), each timed in the duration histogram; with a bulkhead of 3,
 * a batch of 10 runs through 3 slots (every call made, never more than 3 at once), and a batch
 * that finds every slot held waits for the first as a single call does, then fails every call
 * naming the bulkhead; failures of a batch open
 * the breaker, which then refuses every call of the next batch without a request; declines are
 * each call's TXO_EBUSINESS and leave the breaker closed; a single retry after a batch gets the
 * stored answer; a service without a URL is TXO_EINVAL in every rc.
 *
 * And the order saga's batches of remote steps on top of it, against a real MariaDB: 20 orders
 * run as one batch with both services 200 ms away make each call once, together (well under
 * the 8 s of one call after another), and confirm; an order cancelled before its batch is
 * never charged; orders whose charge the service declines are compensated.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "testrun.h"
#include "order_services.h"
#include "order_saga.h"
#include "orders.h"
#include "testdb.h"
#include "testhttp.h"
#include "testsagabatch.h"
#include "testproc.h"
#include "txo/txo.h"

#define N_CALLS 10

struct rig {
    struct testproc fake;
    unsigned port;
    char url[64];
};

static int setup(void **state)
{
    struct rig *r = txo_calloc(1, sizeof(*r));
    assert_non_null(r);
    r->port = testproc_free_port();
    char listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", r->port);
    snprintf(r->url, sizeof(r->url), "http://127.0.0.1:%u", r->port);
    const char *argv[] = {testproc_fake_bin(), "--listen", listen, NULL};
    testproc_start(&r->fake, "order_services_fake", argv, NULL);
    if (!testproc_wait_http(r->port, "/healthz", 15000)) {
        testproc_print_log(&r->fake, "txo-fake-services");
        fail_msg("txo-fake-services did not answer on %s", listen);
    }
    *state = r;
    return 0;
}

static int teardown(void **state)
{
    struct rig *r = *state;
    bool clean = testproc_stop(&r->fake, 5000);
    if (!clean)
        testproc_print_log(&r->fake, "txo-fake-services");
    else
        testproc_remove_log(&r->fake);
    txo_free(r);
    assert_true(clean);
    return 0;
}

/* POST /control or GET /stats on the fake service; returns the parsed body of GET. */
static json_t *fake_call(const struct rig *r, const char *path, const char *control)
{
    struct txo_http_client *c = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_http_client_new(NULL, &c, &err), 0);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    char url[128];
    snprintf(url, sizeof(url), "%s%s", r->url, path);
    int rc = control != NULL
                 ? txo_http_post_json(c, url, NULL, NULL, control, strlen(control), &resp, &err)
                 : txo_http_get(c, url, NULL, &resp, &err);
    if (rc != 0)
        fail_msg("%s %s: %s", control != NULL ? "POST" : "GET", path, err.msg);
    json_error_t jerr;
    json_t *v = json_loadb(resp.body != NULL ? resp.body : "", resp.body_len, 0, &jerr);
    assert_true(json_is_object(v));
    txo_http_client_response_release(&resp);
    txo_http_client_free(c);
    return v;
}

static void control(const struct rig *r, const char *json)
{
    json_decref(fake_call(r, "/control", json));
}

static int64_t stat_of(const struct rig *r, const char *field)
{
    json_t *v = fake_call(r, "/stats", NULL);
    json_t *f = json_object_get(v, field);
    if (!json_is_integer(f))
        fail_msg("/stats has no \"%s\"", field);
    int64_t n = json_integer_value(f);
    json_decref(v);
    return n;
}

static struct order_services *services_of(const struct order_services_opts *o)
{
    struct order_services *svc = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (order_services_new(o, &svc, &err) != 0)
        fail_msg("order_services_new: %s", err.msg);
    return svc;
}

static struct order_services *services(const struct rig *r, unsigned max_concurrent,
                                       unsigned breaker_failures, struct txo_metrics *metrics)
{
    struct order_services_opts o;
    order_services_opts_init(&o);
    o.payment_url = r->url;
    o.max_concurrent = max_concurrent;
    o.breaker_failures = breaker_failures;
    o.metrics = metrics;
    return services_of(&o);
}

static struct order_service_session *session(const struct order_services *svc)
{
    struct order_service_session *s = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (order_service_session_new(svc, &s, &err) != 0)
        fail_msg("order_service_session_new: %s", err.msg);
    return s;
}

struct charges {
    char keys[N_CALLS][32];
    char bodies[N_CALLS][64];
    struct order_service_req reqs[N_CALLS];
};

/* Charges of orders first..first+N_CALLS-1, each with its own key. */
static void charges_of(struct charges *c, int first)
{
    memset(c, 0, sizeof(*c));
    for (size_t k = 0; k < N_CALLS; k++) {
        int order = first + (int)k;
        snprintf(c->keys[k], sizeof(c->keys[k]), "order:%d:charge", order);
        snprintf(c->bodies[k], sizeof(c->bodies[k]), "{\"order_id\":%d,\"amount_cents\":%d}", order,
                 500 + order);
        c->reqs[k].idempotency_key = c->keys[k];
        c->reqs[k].body_json = c->bodies[k];
    }
}

static double metric(struct txo_metrics *m, const char *series)
{
    char *text = NULL;
    size_t len = 0;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_metrics_render(m, &text, &len, &err), 0);
    double v = testhttp_metric_value(text, series);
    txo_free(text);
    return v;
}

/* A metrics registry, or the test fails. Free with txo_metrics_free. */
static struct txo_metrics *metrics_new(void)
{
    struct txo_metrics *m = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_metrics_new(&m, &err) != 0)
        fail_msg("txo_metrics_new: %s", err.msg);
    return m;
}

/* c's N_CALLS charges on s as one batch, every one of which must succeed; returns the
 * batch's duration in ms. */
static int64_t charge_all(struct order_service_session *s, struct charges *c)
{
    int64_t t0 = txo_monotonic_ms();
    order_service_call_many(s, ORDER_SERVICE_PAYMENT, "charge", "/payments/charge", c->reqs,
                            N_CALLS);
    int64_t elapsed = txo_monotonic_ms() - t0;
    for (size_t k = 0; k < N_CALLS; k++)
        if (c->reqs[k].rc != 0)
            fail_msg("call %zu: %s", k, c->reqs[k].err.msg);
    return elapsed;
}

static void test_batch_is_concurrent_and_applied_once(void **state)
{
    struct rig *r = *state;
    struct txo_metrics *m = metrics_new();
    struct order_services *svc = services(r, 16, 5, m);
    struct order_service_session *s = session(svc);
    struct charges c;
    charges_of(&c, 100);
    control(r, "{\"latency_ms\":300}");

    int64_t elapsed = charge_all(s, &c);
    if (elapsed >= 2000)
        fail_msg("10 calls of 300 ms each took %lld ms", (long long)elapsed);
    assert_int_equal(stat_of(r, "charges"), N_CALLS);
    assert_int_equal(stat_of(r, "charge_requests"), N_CALLS);
    assert_int_equal(stat_of(r, "replays"), 0);
    assert_true(metric(m, "txo_external_request_duration_seconds_count{service=\"payment\","
                          "operation=\"charge\"}") == N_CALLS);
    assert_int_equal(order_services_breaker_state(svc, ORDER_SERVICE_PAYMENT), TXO_BREAKER_CLOSED);

    /* A single call (a retry of one of them) gets the stored answer: no second charge. */
    control(r, "{\"latency_ms\":0}");
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(order_service_call(s, ORDER_SERVICE_PAYMENT, "charge", "/payments/charge",
                                        c.keys[3], c.bodies[3], NULL, &err),
                     0);
    assert_int_equal(stat_of(r, "charges"), N_CALLS);
    assert_int_equal(stat_of(r, "replays"), 1);

    /* Declines are each call's final answer and do not count against the breaker. */
    control(r, "{\"decline_rate\":1}");
    charges_of(&c, 200);
    order_service_call_many(s, ORDER_SERVICE_PAYMENT, "charge", "/payments/charge", c.reqs,
                            N_CALLS);
    for (size_t k = 0; k < N_CALLS; k++) {
        assert_int_equal(c.reqs[k].rc, TXO_EBUSINESS);
        assert_non_null(strstr(c.reqs[k].err.msg, "HTTP 402"));
    }
    assert_int_equal(order_services_breaker_state(svc, ORDER_SERVICE_PAYMENT), TXO_BREAKER_CLOSED);
    assert_true(metric(m, "txo_external_request_errors_total{service=\"payment\","
                          "operation=\"charge\",kind=\"business\"}") == N_CALLS);

    /* No URL for shipments: every call is refused as a single call would be. */
    order_service_call_many(s, ORDER_SERVICE_SHIPMENT, "create", "/shipments/create", c.reqs,
                            N_CALLS);
    for (size_t k = 0; k < N_CALLS; k++) {
        assert_int_equal(c.reqs[k].rc, TXO_EINVAL);
        assert_non_null(strstr(c.reqs[k].err.msg, "no URL configured for the shipment service"));
    }
    order_service_call_many(s, ORDER_SERVICE_PAYMENT, "charge", "/payments/charge", c.reqs, 0);

    order_service_session_free(s);
    order_services_free(svc);
    txo_metrics_free(m);
}

/* Another session's batch on its own thread, holding the bulkhead's slots while it runs. */
struct holder {
    struct order_service_session *s;
    struct charges c;
};

static void *holder_main(void *arg)
{
    struct holder *h = arg;
    order_service_call_many(h->s, ORDER_SERVICE_PAYMENT, "charge", "/payments/charge", h->c.reqs,
                            3);
    return NULL;
}

/*
 * With a bulkhead of 3, a batch of 10 runs through its 3 slots: every call is made, never
 * more than 3 at once (so at least 4 rounds of the service's 300 ms), and the slots are given
 * back. A batch that finds no slot free while another holds them all waits bulkhead_wait_ms
 * for the first, as a single call does, then fails every call at once.
 */
static void test_bulkhead_bounds_a_batch(void **state)
{
    struct rig *r = *state;
    struct txo_metrics *m = metrics_new();
    struct order_services_opts o;
    order_services_opts_init(&o);
    o.payment_url = r->url;
    o.max_concurrent = 3;
    o.bulkhead_wait_ms = 200;
    o.metrics = m;
    struct order_services *svc = services_of(&o);
    struct order_service_session *s = session(svc);
    control(r, "{\"latency_ms\":300}");

    struct charges c;
    charges_of(&c, 300);
    int64_t elapsed = charge_all(s, &c);
    print_message("10 calls of 300 ms through 3 slots: %lld ms\n", (long long)elapsed);
    if (elapsed < 4 * 300 - 50 || elapsed >= N_CALLS * 300)
        fail_msg("10 calls through 3 slots took %lld ms: not 4 rounds of 300 ms",
                 (long long)elapsed);
    assert_int_equal(stat_of(r, "charges"), N_CALLS);
    assert_int_equal(stat_of(r, "charge_requests"), N_CALLS);
    /* Nothing refused by the bulkhead: no such sample at all (-1) or 0. */
    assert_true(metric(m, "txo_external_rejected_total{service=\"payment\",guard=\"bulkhead\"}") <=
                0);

    /* Every slot held by another batch: this one waits 200 ms for its first, then gives up. */
    struct holder h = {.s = session(svc)};
    charges_of(&h.c, 500);
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, holder_main, &h), 0);
    int64_t deadline = txo_monotonic_ms() + 5000;
    while (stat_of(r, "charge_requests") < N_CALLS + 3 && txo_monotonic_ms() < deadline)
        txo_sleep_ms(10);
    charges_of(&c, 600);
    int64_t t0 = txo_monotonic_ms();
    order_service_call_many(s, ORDER_SERVICE_PAYMENT, "charge", "/payments/charge", c.reqs,
                            N_CALLS);
    elapsed = txo_monotonic_ms() - t0;
    pthread_join(tid, NULL);
    for (size_t k = 0; k < N_CALLS; k++) {
        assert_int_equal(c.reqs[k].rc, TXO_EUNAVAILABLE);
        assert_non_null(strstr(c.reqs[k].err.msg, "bulkhead payment is full"));
    }
    if (elapsed < 150 || elapsed >= 290)
        fail_msg("a batch with no slot free took %lld ms (want the 200 ms wait)",
                 (long long)elapsed);
    for (size_t k = 0; k < 3; k++)
        assert_int_equal(h.c.reqs[k].rc, 0);
    assert_int_equal(stat_of(r, "charges"), N_CALLS + 3);

    order_service_session_free(h.s);
    order_service_session_free(s);
    order_services_free(svc);
    txo_metrics_free(m);
}

static void test_open_breaker_refuses_without_a_request(void **state)
{
    struct rig *r = *state;
    struct order_services *svc = services(r, 16, 3, NULL);
    struct order_service_session *s = session(svc);
    struct charges c;

    /* The batch's own failures open the breaker: three 503s in one batch. */
    control(r, "{\"fail_rate\":1}");
    charges_of(&c, 500);
    order_service_call_many(s, ORDER_SERVICE_PAYMENT, "charge", "/payments/charge", c.reqs, 3);
    for (size_t k = 0; k < 3; k++) {
        assert_int_equal(c.reqs[k].rc, TXO_EUNAVAILABLE);
        assert_non_null(strstr(c.reqs[k].err.msg, "HTTP 503"));
    }
    assert_int_equal(order_services_breaker_state(svc, ORDER_SERVICE_PAYMENT), TXO_BREAKER_OPEN);

    control(r, "{\"fail_rate\":0}");
    int64_t before = stat_of(r, "charge_requests");
    charges_of(&c, 600);
    order_service_call_many(s, ORDER_SERVICE_PAYMENT, "charge", "/payments/charge", c.reqs,
                            N_CALLS);
    for (size_t k = 0; k < N_CALLS; k++) {
        assert_int_equal(c.reqs[k].rc, TXO_EUNAVAILABLE);
        if (strstr(c.reqs[k].err.msg, "circuit payment is open") == NULL)
            fail_msg("call %zu: %s", k, c.reqs[k].err.msg);
    }
    assert_int_equal(stat_of(r, "charge_requests"), before);
    assert_int_equal(stat_of(r, "charges"), 0);

    order_service_session_free(s);
    order_services_free(svc);
}

/* ---- the order saga's remote steps in batches ---- */

#define N_ORDERS 20

static int64_t count_orders(struct txo_db *db, const char *status)
{
    struct txo_param p = txo_p_str(status);
    return testdb_i64(db, "SELECT COUNT(*) FROM orders WHERE status = ?", &p, 1);
}

static void test_saga_batch_calls_the_services_together(void **state)
{
    struct rig *r = *state;
    struct testdb t;
    testdb_setup(&t, "ordersvcbatch");
    testsagabatch_set_stock(t.db, "iphone-15", 1000);
    testsagabatch_set_stock(t.db, "airpods", 1000);
    int64_t order_ids[N_ORDERS];
    char saga_ids[N_ORDERS][TXO_SAGA_ID_LEN];
    const char *ids[N_ORDERS];
    for (size_t k = 0; k < N_ORDERS; k++) {
        testsagabatch_create(t.db, 300 + (int64_t)k, "iphone-15", false, &order_ids[k],
                             saga_ids[k]);
        ids[k] = saga_ids[k];
    }
    /* The customer cancels the first order before its saga runs. */
    struct txo_param first = txo_p_i64(order_ids[0]);
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_db_exec(t.db,
                                 "UPDATE orders SET status = 'CANCELLED', version = version + 1 "
                                 "WHERE id = ?",
                                 &first, 1, NULL, &err),
                     0);

    struct order_services_opts o;
    order_services_opts_init(&o);
    o.payment_url = r->url;
    o.shipment_url = r->url;
    o.max_concurrent = 32;
    struct order_services *svc = services_of(&o);
    struct order_saga_env env;
    order_saga_env_init(&env, NULL);
    env.session = session(svc);
    control(r, "{\"latency_ms\":200}");

    struct txo_saga_opts so;
    txo_saga_opts_init(&so);
    int rcs[N_ORDERS];
    enum txo_saga_status finals[N_ORDERS];
    int64_t t0 = txo_monotonic_ms();
    assert_int_equal(txo_saga_run_many(t.db, order_saga_def_for(svc), ids, N_ORDERS, &so, &env, rcs,
                                       finals, &err),
                     0);
    int64_t elapsed = txo_monotonic_ms() - t0;
    print_message("%d orders, two calls each of 200 ms, as one batch: %lld ms\n", N_ORDERS,
                  (long long)elapsed);
    if (elapsed >= 3000)
        fail_msg("the batch took %lld ms: its calls were not made together", (long long)elapsed);
    assert_int_equal(finals[0], TXO_SAGA_COMPENSATED);
    for (size_t k = 1; k < N_ORDERS; k++) {
        assert_int_equal(rcs[k], 0);
        assert_int_equal(finals[k], TXO_SAGA_COMPLETED);
    }
    /* Each confirmed order charged and shipped once, each in one request; the cancelled one
     * never called. */
    assert_int_equal(count_orders(t.db, "CONFIRMED"), N_ORDERS - 1);
    assert_int_equal(stat_of(r, "charges"), N_ORDERS - 1);
    assert_int_equal(stat_of(r, "charge_requests"), N_ORDERS - 1);
    assert_int_equal(stat_of(r, "shipments"), N_ORDERS - 1);
    assert_int_equal(stat_of(r, "shipment_requests"), N_ORDERS - 1);
    assert_int_equal(stat_of(r, "refunds"), 0);
    assert_int_equal(testdb_i64(t.db,
                                "SELECT COUNT(*) FROM saga_steps WHERE step_name IN "
                                "('ChargePayment', 'CreateShipment') AND status = 'COMPLETED' "
                                "AND attempts = 1 AND remote_state = 'DONE'",
                                NULL, 0),
                     2 * (N_ORDERS - 1));

    /* Declined by the service in a batch: each order is compensated (stock released, nothing
     * charged, so nothing refunded). */
    control(r, "{\"latency_ms\":0,\"decline_rate\":1}");
    char more_ids[2][TXO_SAGA_ID_LEN];
    int64_t more_orders[2];
    const char *more[2];
    for (size_t k = 0; k < 2; k++) {
        testsagabatch_create(t.db, 400 + (int64_t)k, "airpods", false, &more_orders[k],
                             more_ids[k]);
        more[k] = more_ids[k];
    }
    assert_int_equal(
        txo_saga_run_many(t.db, order_saga_def_for(svc), more, 2, &so, &env, rcs, finals, &err), 0);
    assert_int_equal(finals[0], TXO_SAGA_COMPENSATED);
    assert_int_equal(finals[1], TXO_SAGA_COMPENSATED);
    assert_int_equal(stat_of(r, "declines"), 2);
    assert_int_equal(stat_of(r, "charges"), N_ORDERS - 1);
    const char *skus[] = {"iphone-15", "airpods"};
    const int32_t initial[] = {1000, 1000};
    testsagabatch_assert_invariants(t.db, skus, initial, 2);

    order_service_session_free(env.session);
    order_services_free(svc);
    testdb_teardown(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_is_concurrent_and_applied_once),
        cmocka_unit_test(test_bulkhead_bounds_a_batch),
        cmocka_unit_test(test_saga_batch_calls_the_services_together),
        cmocka_unit_test(test_open_breaker_refuses_without_a_request),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
}
