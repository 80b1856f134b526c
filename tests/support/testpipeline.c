/*
 * Test support: real `txo` processes running the order pipeline, and the pipeline's
 * invariants checked by SQL (see testpipeline.h).
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "orders.h"
#include "testdb.h"
#include "testhttp.h"
#include "testpipeline.h"

void testpipeline_init(struct testpipeline *tp, struct txo_db *db)
{
    memset(tp, 0, sizeof(*tp));
    tp->db = db;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_http_client_new(NULL, &tp->http, &err) != 0)
        fail_msg("txo_http_client_new: %s", err.msg);
}

void testpipeline_release(struct testpipeline *tp)
{
    for (size_t i = 0; i < tp->n_procs; i++)
        testproc_stop_hard(&tp->procs[i]);
    txo_http_client_free(tp->http);
    tp->http = NULL;
}

void testpipeline_dump_logs(const struct testpipeline *tp)
{
    for (size_t i = 0; i < tp->n_procs; i++)
        testproc_print_tail(tp->procs[i].log_path, 4000);
}

void testpipeline_remove_logs(const struct testpipeline *tp)
{
    for (size_t i = 0; i < tp->n_procs; i++)
        testproc_remove_log(&tp->procs[i]);
}

/* ---- processes ---- */

void testpipeline_args_init(struct testpipeline_args *a, const char *subcommand)
{
    memset(a, 0, sizeof(*a));
    a->v[a->n++] = testproc_txo_bin();
    a->v[a->n++] = subcommand;
}

void testpipeline_args_add(struct testpipeline_args *a, const char *s)
{
    assert_true(a->n + 1 < TXO_ARRAY_LEN(a->v));
    a->v[a->n++] = s;
}

void testpipeline_args_addf(struct testpipeline_args *a, const char *fmt, ...)
{
    assert_true(a->n_buf < TXO_ARRAY_LEN(a->buf));
    char *b = a->buf[a->n_buf++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof(a->buf[0]), fmt, ap);
    va_end(ap);
    testpipeline_args_add(a, b);
}

struct testproc *testpipeline_start(struct testpipeline *tp, const char *tag,
                                    struct testpipeline_args *a)
{
    assert_true(tp->n_procs < TESTPIPELINE_MAX_PROCS);
    struct testproc *p = &tp->procs[tp->n_procs++];
    a->v[a->n] = NULL;
    testproc_start(p, tag, a->v, NULL);
    return p;
}

void testpipeline_wait_ready(struct testpipeline *tp, struct testproc *p, unsigned port)
{
    if (!testproc_wait_http(port, "/healthz", 30000))
        TESTPIPELINE_FAIL(tp, "%s did not answer /healthz on port %u", p->log_path, port);
}

void testpipeline_expect_crash(struct testpipeline *tp, struct testproc *p, int timeout_ms)
{
    if (!testproc_wait(p, timeout_ms))
        TESTPIPELINE_FAIL(tp, "%s did not reach its crash point within %d ms", p->log_path,
                          timeout_ms);
    if (!testproc_killed(p))
        TESTPIPELINE_FAIL(tp, "%s should have died of SIGKILL at its crash point, wait status 0x%x",
                          p->log_path, p->status);
}

void testpipeline_stop_clean(struct testpipeline *tp, struct testproc *p)
{
    if (!testproc_stop(p, 30000))
        TESTPIPELINE_FAIL(tp, "%s did not exit 0 after SIGTERM (wait status 0x%x)", p->log_path,
                          p->status);
}

/* ---- HTTP ---- */

struct testproc *testpipeline_start_serve(struct testpipeline *tp, const char *tag, unsigned *port)
{
    *port = testproc_free_port();
    struct testpipeline_args a;
    testpipeline_args_init(&a, "serve");
    testpipeline_args_addf(&a, "--listen=127.0.0.1:%u", *port);
    struct testproc *serve = testpipeline_start(tp, tag, &a);
    testpipeline_wait_ready(tp, serve, *port);
    return serve;
}

void testpipeline_args_crash_point(struct testpipeline_args *a, const char *point)
{
    if (point != NULL)
        testpipeline_args_addf(a, "--crash-point=%s", point);
}

struct testpipeline_args *testpipeline_broker(struct testpipeline *tp, const char *broker)
{
    tp->broker = broker;
    memset(&tp->broker_args, 0, sizeof(tp->broker_args));
    return &tp->broker_args;
}

void testpipeline_args_daemon(struct testpipeline *tp, struct testpipeline_args *a,
                              const char *subcommand)
{
    testpipeline_args_init(a, subcommand);
    if (tp->broker == NULL)
        return;
    testpipeline_args_addf(a, strcmp(subcommand, "relay") == 0 ? "--publisher=%s" : "--broker=%s",
                           tp->broker);
    for (size_t i = 0; i < tp->broker_args.n; i++)
        testpipeline_args_add(a, tp->broker_args.v[i]);
}

/* Starts a with extra (NULL-terminated, or NULL) and crash_point (unless NULL) appended. */
static struct testproc *start_with(struct testpipeline *tp, const char *tag,
                                   struct testpipeline_args *a, const char *const *extra,
                                   const char *crash_point)
{
    for (size_t i = 0; extra != NULL && extra[i] != NULL; i++)
        testpipeline_args_add(a, extra[i]);
    testpipeline_args_crash_point(a, crash_point);
    return testpipeline_start(tp, tag, a);
}

struct testproc *testpipeline_start_relay(struct testpipeline *tp, const char *tag,
                                          const char *const *extra, const char *crash_point)
{
    struct testpipeline_args a;
    testpipeline_args_daemon(tp, &a, "relay");
    return start_with(tp, tag, &a, extra, crash_point);
}

struct testproc *testpipeline_start_worker(struct testpipeline *tp, const char *tag,
                                           const char *const *extra, const char *crash_point,
                                           unsigned *mport)
{
    struct testpipeline_args a;
    testpipeline_args_daemon(tp, &a, "worker");
    testpipeline_args_add(&a, "--saga-lease=2");
    testpipeline_args_add(&a, "--poll=100");
    if (mport != NULL) {
        *mport = testproc_free_port();
        testpipeline_args_addf(&a, "--metrics-listen=127.0.0.1:%u", *mport);
    }
    struct testproc *w = start_with(tp, tag, &a, extra, crash_point);
    if (mport != NULL)
        testpipeline_wait_ready(tp, w, *mport);
    return w;
}

struct testproc *testpipeline_start_up(struct testpipeline *tp, const char *tag,
                                       const char *const *extra, unsigned *port)
{
    struct testpipeline_args a;
    testpipeline_args_daemon(tp, &a, "up");
    *port = testproc_free_port();
    testpipeline_args_addf(&a, "--listen=127.0.0.1:%u", *port);
    testpipeline_args_add(&a, "--saga-lease=2");
    testpipeline_args_add(&a, "--poll=100");
    struct testproc *up = start_with(tp, tag, &a, extra, NULL);
    testpipeline_wait_ready(tp, up, *port);
    return up;
}

void testpipeline_place_orders(struct testpipeline *tp, unsigned port, const char *key_prefix,
                               unsigned n, bool books)
{
    for (unsigned i = 0; i < n; i++) {
        char key[64], body[256];
        snprintf(key, sizeof(key), "%s-%u", key_prefix, i);
        snprintf(body, sizeof(body),
                 "{\"customer_id\":%u,\"items\":[{\"sku\":\"pen\",\"qty\":%u,\"price_cents\":"
                 "250}%s]}",
                 700 + i, 1 + i % 2,
                 books && i % 3 == 0 ? ",{\"sku\":\"book\",\"qty\":1,\"price_cents\":1500}" : "");
        (void)testpipeline_post_order(tp, port, key, body);
    }
}

void testpipeline_serve_orders(struct testpipeline *tp, const char *key_prefix, unsigned n,
                               bool books)
{
    char tag[64];
    snprintf(tag, sizeof(tag), "%s_serve", key_prefix);
    unsigned port;
    struct testproc *serve = testpipeline_start_serve(tp, tag, &port);
    testpipeline_place_orders(tp, port, key_prefix, n, books);
    testpipeline_stop_clean(tp, serve);
}

int64_t testpipeline_post_order(struct testpipeline *tp, unsigned port, const char *key,
                                const char *body)
{
    return testpipeline_post_order_headers(tp, port, key, NULL, body);
}

int64_t testpipeline_post_order_headers(struct testpipeline *tp, unsigned port, const char *key,
                                        const char *const *headers, const char *body)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/orders", port);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_http_post_json(tp->http, url, key, headers, body, strlen(body), &resp, &err);
    if (rc != 0 || resp.status != 201)
        TESTPIPELINE_FAIL(tp, "POST /orders key=%s: rc=%s status=%ld body=%s err=%s", key,
                          txo_err_name(rc), resp.status, resp.body != NULL ? resp.body : "",
                          err.msg);
    json_error_t jerr;
    json_t *doc = json_loads(resp.body, 0, &jerr);
    assert_non_null(doc);
    json_t *id = json_object_get(doc, "order_id");
    assert_true(json_is_integer(id));
    assert_string_equal(json_string_value(json_object_get(doc, "status")), "CREATED");
    int64_t order_id = json_integer_value(id);
    json_decref(doc);
    txo_http_client_response_release(&resp);
    return order_id;
}

double testpipeline_metric(struct testpipeline *tp, unsigned port, const char *series)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/metrics", port);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    txo_error_init(&err);
    if (txo_http_get(tp->http, url, NULL, &resp, &err) != 0 || resp.body == NULL)
        TESTPIPELINE_FAIL(tp, "GET /metrics on port %u: %s", port, err.msg);
    double v = testhttp_metric_value(resp.body, series);
    txo_http_client_response_release(&resp);
    return v;
}

/* ---- database ---- */

bool testpipeline_wait_count(struct testpipeline *tp, const char *sql, int64_t want, int timeout_ms)
{
    int64_t deadline = txo_monotonic_ms() + timeout_ms;
    for (;;) {
        if (testdb_q(tp->db, sql) == want)
            return true;
        if (txo_monotonic_ms() > deadline)
            return false;
        txo_sleep_ms(100);
    }
}

void testpipeline_wait_terminal(struct testpipeline *tp, int n_orders, int timeout_ms,
                                const char *when)
{
    static const char terminal[] =
        "SELECT COUNT(*) FROM orders WHERE status IN ('CONFIRMED', 'CANCELLED')";
    if (!testpipeline_wait_count(tp, terminal, n_orders, timeout_ms))
        TESTPIPELINE_FAIL(tp, "orders not terminal %d s %s: %" PRId64 " of %d", timeout_ms / 1000,
                          when, testdb_q(tp->db, terminal), n_orders);
}

void testpipeline_wait_published(struct testpipeline *tp, int timeout_ms)
{
    static const char unpublished[] =
        "SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED'";
    if (!testpipeline_wait_count(tp, unpublished, 0, timeout_ms))
        TESTPIPELINE_FAIL(tp, "%" PRId64 " outbox events still not PUBLISHED",
                          testdb_q(tp->db, unpublished));
}

void testpipeline_wait_relayed(struct testpipeline *tp, int n, int timeout_ms)
{
    static const char published[] = "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'";
    if (!testpipeline_wait_count(tp, published, n, timeout_ms))
        TESTPIPELINE_FAIL(tp, "the relay did not publish the %d OrderCreated events: %" PRId64, n,
                          testdb_q(tp->db, published));
}

int64_t testpipeline_wait_confirmed(struct testpipeline *tp, int n, int timeout_ms,
                                    const char *when)
{
    static const char confirmed[] = "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'";
    int64_t t0 = txo_monotonic_ms();
    if (!testpipeline_wait_count(tp, confirmed, n, timeout_ms))
        TESTPIPELINE_FAIL(tp, "%" PRId64 " of %d orders CONFIRMED %d s %s",
                          testdb_q(tp->db, confirmed), n, timeout_ms / 1000, when);
    return txo_monotonic_ms() - t0;
}

void testpipeline_place_orders_broker_down(struct testpipeline *tp, unsigned port, unsigned n,
                                           bool books)
{
    testpipeline_place_orders(tp, port, "outage", n, books);
    static const char waiting[] =
        "SELECT COUNT(*) FROM outbox_events WHERE event_type = 'OrderCreated' "
        "AND status = 'PENDING' AND attempts >= 1 AND last_error IS NOT NULL "
        "AND published_at IS NULL";
    if (!testpipeline_wait_count(tp, waiting, n, 20000))
        TESTPIPELINE_FAIL(
            tp,
            "want the %u new OrderCreated PENDING with attempts >= 1 and last_error, got %" PRId64,
            n, testdb_q(tp->db, waiting));
    char *last_error = testdb_str(tp->db,
                                  "SELECT last_error FROM outbox_events WHERE event_type = "
                                  "'OrderCreated' AND status = 'PENDING' LIMIT 1",
                                  NULL, 0);
    int64_t max_attempts =
        testdb_q(tp->db, "SELECT MAX(attempts) FROM outbox_events WHERE status = 'PENDING'");
    print_message("broker down: %u OrderCreated PENDING, attempts up to %" PRId64
                  ", last_error \"%s\"\n",
                  n, max_attempts, last_error != NULL ? last_error : "(null)");
    txo_free(last_error);
    assert_int_equal(testdb_q(tp->db, "SELECT COUNT(*) FROM orders WHERE status = 'CREATED'"), n);
    assert_int_equal(testdb_q(tp->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'FAILED'"),
                     0);
}

int64_t testpipeline_check_died_unacked(struct testpipeline *tp, int64_t unacked)
{
    int64_t inbox = testdb_q(tp->db, "SELECT COUNT(*) FROM inbox_events");
    int64_t sagas = testdb_q(tp->db, "SELECT COUNT(*) FROM saga_instances");
    print_message("after the crash: %" PRId64 " inbox rows, %" PRId64 " sagas, %" PRId64
                  " messages delivered and not acknowledged\n",
                  inbox, sagas, unacked);
    if (inbox < 1 || inbox != sagas || unacked < inbox)
        TESTPIPELINE_FAIL(tp,
                          "want as many inbox rows as sagas (>= 1) and at least as many "
                          "unacknowledged messages after the crash, got %" PRId64 ", %" PRId64
                          ", %" PRId64,
                          inbox, sagas, unacked);
    return inbox;
}

void testpipeline_check_redelivered(struct testpipeline *tp, double dups, double consumed,
                                    int64_t consumed_before, int n_orders)
{
    print_message("restarted worker: txo_inbox_duplicates_total %.0f, txo_inbox_consumed_total "
                  "%.0f\n",
                  dups, consumed);
    if (dups < (double)consumed_before)
        TESTPIPELINE_FAIL(tp,
                          "txo_inbox_duplicates_total = %.0f: the %" PRId64
                          " OrderCreated delivered again were not all seen as duplicates",
                          dups, consumed_before);
    if (consumed != (double)(n_orders - consumed_before))
        TESTPIPELINE_FAIL(tp,
                          "txo_inbox_consumed_total = %.0f, want %" PRId64 " (%" PRId64
                          " were consumed before the crash)",
                          consumed, n_orders - consumed_before, consumed_before);
}

void testpipeline_wait_acked(struct testpipeline *tp, int64_t (*unacked)(void *arg), void *arg,
                             int timeout_ms)
{
    int64_t deadline = txo_monotonic_ms() + timeout_ms;
    while (unacked(arg) != 0) {
        if (txo_monotonic_ms() > deadline)
            TESTPIPELINE_FAIL(tp, "%" PRId64 " messages still unacknowledged after %d s",
                              unacked(arg), timeout_ms / 1000);
        txo_sleep_ms(100);
    }
}

void testpipeline_ack_crash(struct testpipeline *tp, struct testpipeline_ack_crash *ac)
{
    char tag[64];
    testpipeline_serve_orders(tp, ac->tag, (unsigned)ac->n_orders, ac->books);
    snprintf(tag, sizeof(tag), "%s_relay", ac->tag);
    ac->relay = testpipeline_start_relay(tp, tag, ac->relay_args, NULL);
    testpipeline_wait_relayed(tp, ac->n_orders, 30000);

    /* The worker commits the inbox rows and sagas of its first read, then dies unacked. */
    snprintf(tag, sizeof(tag), "%s_worker_crash", ac->tag);
    struct testproc *w1 =
        testpipeline_start_worker(tp, tag, ac->worker_args, "worker.after_consume", NULL);
    testpipeline_expect_crash(tp, w1, 30000);
    int64_t inbox = testpipeline_check_died_unacked(tp, ac->unacked(ac->arg));

    /* Restarted: the broker delivers the unacknowledged messages again, the inbox drops them. */
    snprintf(tag, sizeof(tag), "%s_worker", ac->tag);
    ac->worker = testpipeline_start_worker(tp, tag, ac->worker_args, NULL, &ac->mport);
    testpipeline_wait_terminal(tp, ac->n_orders, 30000, "after the worker restart");
    testpipeline_wait_published(tp, 30000);
    testpipeline_wait_acked(tp, ac->unacked, ac->arg, 20000); /* the saga events' too */
    double dups = testpipeline_metric(tp, ac->mport, "txo_inbox_duplicates_total");
    double consumed = testpipeline_metric(tp, ac->mport, "txo_inbox_consumed_total");
    testpipeline_check_redelivered(tp, dups, consumed, inbox, ac->n_orders);
}

void testpipeline_set_initial_stock(struct testpipeline *tp, const struct testpipeline_stock *stock,
                                    size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct txo_error err;
        txo_error_init(&err);
        if (orders_set_inventory(tp->db, stock[i].sku, stock[i].units, &err) != 0)
            fail_msg("setting the stock of %s: %s", stock[i].sku, err.msg);
    }
}

/*
 * Every compensation event undoes an event of the action: not true of a step whose call may
 * have happened while its local part never committed (undo_covers_action_sql below).
 */
static const char undo_matches_action_sql[] =
    "SELECT COUNT(*) FROM orders o WHERE o.status = 'CANCELLED' AND ("
    "(SELECT COUNT(*) FROM outbox_events e WHERE e.aggregate_id = o.id AND e.aggregate_type "
    "= 'order' AND e.event_type = 'StockReserved') <> (SELECT COUNT(*) FROM outbox_events e "
    "WHERE e.aggregate_id = o.id AND e.aggregate_type = 'order' AND e.event_type = "
    "'StockReleased') OR (SELECT COUNT(*) FROM outbox_events e WHERE e.aggregate_id = o.id "
    "AND e.aggregate_type = 'order' AND e.event_type = 'PaymentCharged') <> (SELECT COUNT(*) "
    "FROM outbox_events e WHERE e.aggregate_id = o.id AND e.aggregate_type = 'order' AND "
    "e.event_type = 'PaymentRefunded') OR (SELECT COUNT(*) FROM outbox_events e WHERE "
    "e.aggregate_id = o.id AND e.aggregate_type = 'order' AND e.event_type = "
    "'ShipmentCreated') <> (SELECT COUNT(*) FROM outbox_events e WHERE e.aggregate_id = o.id "
    "AND e.aggregate_type = 'order' AND e.event_type = 'ShipmentCancelled'))";

/*
 * Every invariant of the order pipeline over all orders in the database, by SQL (the list is
 * in testpipeline.h, testpipeline_check_invariants). Each query counts the rows that break one
 * rule; all must be 0.
 */
static const struct {
    const char *what;
    const char *sql;
} violations[] = {
    {"order not CONFIRMED or CANCELLED",
     "SELECT COUNT(*) FROM orders WHERE status NOT IN ('CONFIRMED', 'CANCELLED')"},
    {"order without exactly one saga",
     "SELECT COUNT(*) FROM orders o WHERE (SELECT COUNT(*) FROM saga_instances s "
     "WHERE s.saga_type = 'CreateOrderSaga' AND s.correlation_id = CONCAT('order:', o.id)) <> 1"},
    {"saga without its order",
     "SELECT COUNT(*) FROM saga_instances s WHERE NOT EXISTS (SELECT 1 FROM orders o "
     "WHERE s.correlation_id = CONCAT('order:', o.id))"},
    {"saga left RUNNING, COMPENSATING or COMPENSATION_FAILED",
     "SELECT COUNT(*) FROM saga_instances "
     "WHERE status IN ('RUNNING', 'COMPENSATING', 'COMPENSATION_FAILED')"},
    {"CONFIRMED order whose saga is not COMPLETED",
     "SELECT COUNT(*) FROM orders o JOIN saga_instances s "
     "ON s.correlation_id = CONCAT('order:', o.id) "
     "WHERE o.status = 'CONFIRMED' AND s.status <> 'COMPLETED'"},
    {"CANCELLED order whose saga is not COMPENSATED or FAILED",
     "SELECT COUNT(*) FROM orders o JOIN saga_instances s "
     "ON s.correlation_id = CONCAT('order:', o.id) "
     "WHERE o.status = 'CANCELLED' AND s.status NOT IN ('COMPENSATED', 'FAILED')"},
    {"step of a COMPLETED saga not COMPLETED",
     "SELECT COUNT(*) FROM saga_steps st JOIN saga_instances s ON s.id = st.saga_id "
     "WHERE s.status = 'COMPLETED' AND st.status <> 'COMPLETED'"},
    {"step of an aborted saga left completed or in flight (not compensated)",
     "SELECT COUNT(*) FROM saga_steps st JOIN saga_instances s ON s.id = st.saga_id "
     "WHERE s.status IN ('COMPENSATED', 'FAILED') "
     "AND st.status IN ('RUNNING', 'COMPLETED', 'COMPENSATING', 'COMPENSATION_FAILED')"},
    {"order with more than one payment",
     "SELECT COUNT(*) FROM (SELECT order_id FROM payments GROUP BY order_id "
     "HAVING COUNT(*) > 1) x"},
    {"order with more than one shipment",
     "SELECT COUNT(*) FROM (SELECT order_id FROM shipments GROUP BY order_id "
     "HAVING COUNT(*) > 1) x"},
    {"CONFIRMED order without a CHARGED payment of its total",
     "SELECT COUNT(*) FROM orders o WHERE o.status = 'CONFIRMED' AND NOT EXISTS (SELECT 1 "
     "FROM payments p WHERE p.order_id = o.id AND p.status = 'CHARGED' "
     "AND p.amount_cents = o.total_cents)"},
    {"CONFIRMED order without a CREATED shipment",
     "SELECT COUNT(*) FROM orders o WHERE o.status = 'CONFIRMED' AND NOT EXISTS (SELECT 1 "
     "FROM shipments s WHERE s.order_id = o.id AND s.status = 'CREATED')"},
    {"CANCELLED order with a payment not REFUNDED",
     "SELECT COUNT(*) FROM orders o JOIN payments p ON p.order_id = o.id "
     "WHERE o.status = 'CANCELLED' AND p.status <> 'REFUNDED'"},
    {"CANCELLED order with a shipment not CANCELLED",
     "SELECT COUNT(*) FROM orders o JOIN shipments s ON s.order_id = o.id "
     "WHERE o.status = 'CANCELLED' AND s.status <> 'CANCELLED'"},
    {"payment or shipment of no order",
     "SELECT (SELECT COUNT(*) FROM payments p WHERE NOT EXISTS (SELECT 1 FROM orders o "
     "WHERE o.id = p.order_id)) + (SELECT COUNT(*) FROM shipments s WHERE NOT EXISTS "
     "(SELECT 1 FROM orders o WHERE o.id = s.order_id))"},
    {"negative stock", "SELECT COUNT(*) FROM inventory WHERE available < 0 OR reserved < 0"},
    {"order without exactly one OrderCreated (key order:<id>:created)",
     "SELECT COUNT(*) FROM orders o WHERE (SELECT COUNT(*) FROM outbox_events e "
     "WHERE e.aggregate_type = 'order' AND e.aggregate_id = o.id "
     "AND e.event_type = 'OrderCreated') <> 1 OR NOT EXISTS (SELECT 1 FROM outbox_events e "
     "WHERE e.idempotency_key = CONCAT('order:', o.id, ':created') "
     "AND e.event_type = 'OrderCreated' AND e.aggregate_id = o.id)"},
    {"CONFIRMED order without exactly one StockReserved, PaymentCharged and ShipmentCreated",
     "SELECT COUNT(*) FROM orders o WHERE o.status = 'CONFIRMED' AND ((SELECT COUNT(*) "
     "FROM outbox_events e WHERE e.aggregate_type = 'order' AND e.aggregate_id = o.id "
     "AND e.event_type IN ('StockReserved', 'PaymentCharged', 'ShipmentCreated')) <> 3 OR "
     "(SELECT COUNT(DISTINCT e.event_type) FROM outbox_events e WHERE e.aggregate_type = "
     "'order' AND e.aggregate_id = o.id AND e.event_type IN ('StockReserved', "
     "'PaymentCharged', 'ShipmentCreated')) <> 3)"},
    {"CONFIRMED order with a cancellation or compensation event",
     "SELECT COUNT(*) FROM orders o JOIN outbox_events e ON e.aggregate_type = 'order' "
     "AND e.aggregate_id = o.id WHERE o.status = 'CONFIRMED' AND e.event_type IN "
     "('OrderCancelled', 'StockReleased', 'PaymentRefunded', 'ShipmentCancelled')"},
    {"CANCELLED order without exactly one OrderCancelled",
     "SELECT COUNT(*) FROM orders o WHERE o.status = 'CANCELLED' AND (SELECT COUNT(*) "
     "FROM outbox_events e WHERE e.aggregate_type = 'order' AND e.aggregate_id = o.id "
     "AND e.event_type = 'OrderCancelled') <> 1"},
    {"CANCELLED order with ShipmentCreated not cancelled, or a compensation event missing",
     undo_matches_action_sql},
    {"order without exactly one inbox row order:<id>:created",
     "SELECT COUNT(*) FROM orders o WHERE (SELECT COUNT(*) FROM inbox_events i "
     "WHERE i.event_id = CONCAT('order:', o.id, ':created')) <> 1"},
    {"inbox row that is not an order's OrderCreated",
     "SELECT COUNT(*) FROM inbox_events i WHERE NOT EXISTS (SELECT 1 FROM orders o "
     "WHERE i.event_id = CONCAT('order:', o.id, ':created'))"},
    {"outbox event FAILED or dead-lettered",
     "SELECT (SELECT COUNT(*) FROM outbox_events WHERE status = 'FAILED') + "
     "(SELECT COUNT(*) FROM dead_letter_events)"},
};

/*
 * The rule that replaces the strict one when remote calls may have happened: a charge or
 * shipment call that timed out (or succeeded while the order was cancelled meanwhile) is
 * undone, and its undo writes PaymentRefunded or ShipmentCancelled, although the action's
 * local part, and so its PaymentCharged or ShipmentCreated, never committed. Every action
 * event of a CANCELLED order still has its undo event; the stock, a local step, still pairs.
 */
static const char undo_covers_action_sql[] =
    "SELECT COUNT(*) FROM orders o WHERE o.status = 'CANCELLED' AND ("
    "(SELECT COUNT(*) FROM outbox_events e WHERE e.aggregate_id = o.id AND e.aggregate_type "
    "= 'order' AND e.event_type = 'StockReserved') <> (SELECT COUNT(*) FROM outbox_events e "
    "WHERE e.aggregate_id = o.id AND e.aggregate_type = 'order' AND e.event_type = "
    "'StockReleased') OR (SELECT COUNT(*) FROM outbox_events e WHERE e.aggregate_id = o.id "
    "AND e.aggregate_type = 'order' AND e.event_type = 'PaymentCharged') > (SELECT COUNT(*) "
    "FROM outbox_events e WHERE e.aggregate_id = o.id AND e.aggregate_type = 'order' AND "
    "e.event_type = 'PaymentRefunded') OR (SELECT COUNT(*) FROM outbox_events e WHERE "
    "e.aggregate_id = o.id AND e.aggregate_type = 'order' AND e.event_type = "
    "'ShipmentCreated') > (SELECT COUNT(*) FROM outbox_events e WHERE e.aggregate_id = o.id "
    "AND e.aggregate_type = 'order' AND e.event_type = 'ShipmentCancelled'))";

void testpipeline_check_invariants(struct testpipeline *tp, const struct testpipeline_stock *stock,
                                   size_t n_stock)
{
    testpipeline_check_invariants_flags(tp, stock, n_stock, 0);
}

void testpipeline_check_invariants_flags(struct testpipeline *tp,
                                         const struct testpipeline_stock *stock, size_t n_stock,
                                         unsigned flags)
{
    bool maybe = (flags & TESTPIPELINE_CHECK_UNDO_MAYBE) != 0;
    if (maybe) {
        int64_t bad = testdb_q(tp->db, undo_covers_action_sql);
        if (bad != 0)
            TESTPIPELINE_FAIL(tp,
                              "invariant broken: CANCELLED order with an action event not "
                              "undone or its stock not released (%" PRId64 " rows)",
                              bad);
    }
    for (size_t i = 0; i < TXO_ARRAY_LEN(violations); i++) {
        if (maybe && violations[i].sql == undo_matches_action_sql)
            continue;
        int64_t bad = testdb_q(tp->db, violations[i].sql);
        if (bad != 0)
            TESTPIPELINE_FAIL(tp, "invariant broken: %s (%" PRId64 " rows)", violations[i].what,
                              bad);
    }
    for (size_t i = 0; i < n_stock; i++) {
        struct txo_param p = txo_p_str(stock[i].sku);
        int64_t total =
            testdb_i64(tp->db, "SELECT available + reserved FROM inventory WHERE sku = ?", &p, 1);
        int64_t reserved =
            testdb_i64(tp->db, "SELECT reserved FROM inventory WHERE sku = ?", &p, 1);
        int64_t confirmed_units =
            testdb_i64(tp->db,
                       "SELECT COALESCE(SUM(i.qty), 0) FROM order_items i JOIN orders o ON o.id = "
                       "i.order_id WHERE o.status = 'CONFIRMED' AND i.sku = ?",
                       &p, 1);
        int64_t held = testdb_i64(tp->db,
                                  "SELECT COALESCE(SUM(qty), 0) FROM inventory_reservations "
                                  "WHERE sku = ? AND status = 'RESERVED'",
                                  &p, 1);
        if (total != stock[i].units)
            TESTPIPELINE_FAIL(tp, "sku %s: available + reserved = %" PRId64 ", initial %d",
                              stock[i].sku, total, stock[i].units);
        if (reserved != confirmed_units || reserved != held)
            TESTPIPELINE_FAIL(tp,
                              "sku %s: reserved = %" PRId64 ", units in CONFIRMED orders = %" PRId64
                              ", RESERVED reservations = %" PRId64,
                              stock[i].sku, reserved, confirmed_units, held);
    }
}
