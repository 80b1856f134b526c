/*
 * End-to-end fault tests of the whole order pipeline with real processes and the local broker
 * (`txo up`, whose relay hands each event to the in-process consumer): orders come in through
 * the HTTP API of `txo serve`, then `txo up` is started with a crash point, dies of SIGKILL,
 * and is started again without it. Afterwards every invariant of SPEC.md must hold, checked
 * by SQL on the test database (check_invariants()).
 *
 *   E+F   crash point relay.after_publish: the relay dispatched the batch of OrderCreated (the
 *         consumer committed inbox row + saga for each) and died before marking it PUBLISHED.
 *         The restarted relay reclaims the expired lease and dispatches the same events
 *         again; the inbox drops every one of them (txo_inbox_duplicates_total counts them).
 *   kill  crash point saga.step_committed:40: the process dies while its four saga runners
 *         own sagas half-way through; the restarted worker resumes them once their owner
 *         lease expired (txo_saga_picked_up_total) and every order ends CONFIRMED or
 *         CANCELLED (some SKUs run out on purpose, so both outcomes occur).
 *
 * Stock conservation, stated exactly as order_saga.c implements it: ReserveStock moves qty
 * from `available` to `reserved` (and records a RESERVED inventory_reservations row);
 * ReleaseStock moves it back (RELEASED); nothing else touches stock, and a CONFIRMED order keeps
 * its units in `reserved` (shipping them is outside the seed). So, per SKU, at the end:
 *   available + reserved = seeded stock
 *   reserved  = units of that SKU in CONFIRMED orders = qty of its RESERVED reservations
 *   available = seeded stock - units in CONFIRMED orders, and both are >= 0.
 *
 * The helpers are repeated in test_pipeline_nats.c (each fault test is one program).
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
#include <jansson.h>

#include "orders.h"
#include "testdb.h"
#include "testproc.h"
#include "txo/http_client.h"

#define MAX_PROCS 8

struct sku_stock {
    const char *sku;
    int32_t units;
};

struct ctx {
    struct testdb t;
    struct txo_http_client *http;
    struct testproc procs[MAX_PROCS]; /* every process started by the test, for logs */
    size_t n_procs;
};

/* testdb_export_env() points MYSQL_DATABASE at the test database; the next setup needs the
 * original one back to connect before it creates its own. */
static char *orig_database;

static int setup(void **state)
{
    struct ctx *c = txo_calloc(1, sizeof(*c));
    assert_non_null(c);
    testdb_setup(&c->t, "pipeline_crash");
    testdb_export_env(&c->t);
    struct txo_error err;
    txo_error_init(&err);
    if (txo_http_client_new(NULL, &c->http, &err) != 0)
        fail_msg("txo_http_client_new: %s", err.msg);
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    for (size_t i = 0; i < c->n_procs; i++)
        testproc_stop_hard(&c->procs[i]);
    txo_http_client_free(c->http);
    testdb_teardown(&c->t);
    txo_free(c);
    if (orig_database != NULL)
        setenv("MYSQL_DATABASE", orig_database, 1);
    else
        unsetenv("MYSQL_DATABASE");
    return 0;
}

/* ---- processes ---- */

/* Prints the end of every child's log (on failure). */
static void dump_logs(const struct ctx *c)
{
    for (size_t i = 0; i < c->n_procs; i++) {
        char *log = testproc_log(&c->procs[i]);
        size_t len = log != NULL ? strlen(log) : 0;
        const char *tail = len > 4000 ? log + len - 4000 : log;
        print_message("---- %s (last %zu bytes) ----\n%s\n", c->procs[i].log_path,
                      len > 4000 ? (size_t)4000 : len, tail != NULL ? tail : "");
        free(log);
    }
}

/* Removes the children's logs (at the end of a test that passed; a failed one keeps them). */
static void remove_logs(const struct ctx *c)
{
    for (size_t i = 0; i < c->n_procs; i++)
        unlink(c->procs[i].log_path);
}

#define FAIL(c, ...)                                                                               \
    do {                                                                                           \
        dump_logs(c);                                                                              \
        fail_msg(__VA_ARGS__);                                                                     \
    } while (0)

/* A command line under construction: argv[0] is the txo binary. */
struct args {
    const char *v[64];
    size_t n;
    char buf[32][160];
    size_t n_buf;
};

static void args_init(struct args *a, const char *subcommand)
{
    memset(a, 0, sizeof(*a));
    a->v[a->n++] = testproc_txo_bin();
    a->v[a->n++] = subcommand;
}

static void args_add(struct args *a, const char *s)
{
    assert_true(a->n + 1 < TXO_ARRAY_LEN(a->v));
    a->v[a->n++] = s;
}

static TXO_PRINTF(2, 3) void args_addf(struct args *a, const char *fmt, ...)
{
    assert_true(a->n_buf < TXO_ARRAY_LEN(a->buf));
    char *b = a->buf[a->n_buf++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof(a->buf[0]), fmt, ap);
    va_end(ap);
    args_add(a, b);
}

static struct testproc *start(struct ctx *c, const char *tag, struct args *a)
{
    assert_true(c->n_procs < MAX_PROCS);
    struct testproc *p = &c->procs[c->n_procs++];
    a->v[a->n] = NULL;
    testproc_start(p, tag, a->v, NULL);
    return p;
}

static void wait_ready(struct ctx *c, struct testproc *p, unsigned port)
{
    if (!testproc_wait_http(port, "/healthz", 30000))
        FAIL(c, "%s did not answer /healthz on port %u", p->log_path, port);
}

/* A process that must die of SIGKILL at its crash point within timeout_ms. */
static void expect_crash(struct ctx *c, struct testproc *p, int timeout_ms)
{
    if (!testproc_wait(p, timeout_ms))
        FAIL(c, "%s did not reach its crash point within %d ms", p->log_path, timeout_ms);
    if (!testproc_killed(p))
        FAIL(c, "%s should have died of SIGKILL at its crash point, wait status 0x%x", p->log_path,
             p->status);
}

/* SIGTERM: the daemon must stop gracefully and exit 0. */
static void stop_clean(struct ctx *c, struct testproc *p)
{
    if (!testproc_stop(p, 30000))
        FAIL(c, "%s did not exit 0 after SIGTERM (wait status 0x%x)", p->log_path, p->status);
}

/* ---- HTTP ---- */

/* POSTs body to /orders with Idempotency-Key key and returns the order_id; 201 required. */
static int64_t post_order(struct ctx *c, unsigned port, const char *key, const char *body)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/orders", port);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_http_post_json(c->http, url, key, NULL, body, strlen(body), &resp, &err);
    if (rc != 0 || resp.status != 201)
        FAIL(c, "POST /orders key=%s: rc=%s status=%ld body=%s err=%s", key, txo_err_name(rc),
             resp.status, resp.body != NULL ? resp.body : "", err.msg);
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

/*
 * The value of an unlabelled sample `name` in GET /metrics on port, or -1 when it is missing.
 */
static double metric_value(struct ctx *c, unsigned port, const char *name)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/metrics", port);
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    struct txo_error err;
    txo_error_init(&err);
    if (txo_http_get(c->http, url, NULL, &resp, &err) != 0 || resp.body == NULL)
        FAIL(c, "GET /metrics on port %u: %s", port, err.msg);
    double v = -1;
    size_t len = strlen(name);
    for (const char *line = resp.body; line != NULL && *line != '\0';) {
        if (strncmp(line, name, len) == 0 && line[len] == ' ') {
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

static int64_t q(struct ctx *c, const char *sql)
{
    return testdb_i64(c->t.db, sql, NULL, 0);
}

/* Polls sql (a COUNT) until it returns want; false after timeout_ms. */
static bool wait_count(struct ctx *c, const char *sql, int64_t want, int timeout_ms)
{
    int64_t deadline = txo_monotonic_ms() + timeout_ms;
    for (;;) {
        if (q(c, sql) == want)
            return true;
        if (txo_monotonic_ms() > deadline)
            return false;
        txo_sleep_ms(100);
    }
}

static void seed_stock(struct ctx *c, const struct sku_stock *stock, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct txo_error err;
        txo_error_init(&err);
        if (orders_seed_inventory(c->t.db, stock[i].sku, stock[i].units, &err) != 0)
            fail_msg("seeding %s: %s", stock[i].sku, err.msg);
    }
}

/*
 * Every invariant of SPEC.md over all orders in the database, by SQL. Each query counts the
 * rows that break one rule; all must be 0.
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
     "AND e.aggregate_type = 'order' AND e.event_type = 'ShipmentCancelled'))"},
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

static void check_invariants(struct ctx *c, const struct sku_stock *stock, size_t n_stock)
{
    for (size_t i = 0; i < TXO_ARRAY_LEN(violations); i++) {
        int64_t bad = q(c, violations[i].sql);
        if (bad != 0)
            FAIL(c, "invariant broken: %s (%" PRId64 " rows)", violations[i].what, bad);
    }
    for (size_t i = 0; i < n_stock; i++) {
        struct txo_param p = txo_p_str(stock[i].sku);
        int64_t total =
            testdb_i64(c->t.db, "SELECT available + reserved FROM inventory WHERE sku = ?", &p, 1);
        int64_t reserved =
            testdb_i64(c->t.db, "SELECT reserved FROM inventory WHERE sku = ?", &p, 1);
        int64_t confirmed_units =
            testdb_i64(c->t.db,
                       "SELECT COALESCE(SUM(i.qty), 0) FROM order_items i JOIN orders o ON o.id = "
                       "i.order_id WHERE o.status = 'CONFIRMED' AND i.sku = ?",
                       &p, 1);
        int64_t held = testdb_i64(c->t.db,
                                  "SELECT COALESCE(SUM(qty), 0) FROM inventory_reservations "
                                  "WHERE sku = ? AND status = 'RESERVED'",
                                  &p, 1);
        if (total != stock[i].units)
            FAIL(c, "sku %s: available + reserved = %" PRId64 ", seeded %d", stock[i].sku, total,
                 stock[i].units);
        if (reserved != confirmed_units || reserved != held)
            FAIL(c,
                 "sku %s: reserved = %" PRId64 ", units in CONFIRMED orders = %" PRId64
                 ", RESERVED reservations = %" PRId64,
                 stock[i].sku, reserved, confirmed_units, held);
    }
}

/* ---- E + F with local dispatch ---- */

#define EF_ORDERS 20

static void test_relay_crash_after_publish_local(void **state)
{
    struct ctx *c = *state;
    static const struct sku_stock stock[] = {{"pen", 1000}, {"book", 1000}};
    seed_stock(c, stock, TXO_ARRAY_LEN(stock));

    /* 1. Orders through the API only: all PENDING in the outbox. */
    unsigned port = testproc_free_port();
    struct args a;
    args_init(&a, "serve");
    args_addf(&a, "--listen=127.0.0.1:%u", port);
    struct testproc *serve = start(c, "ef_serve", &a);
    wait_ready(c, serve, port);
    for (unsigned i = 0; i < EF_ORDERS; i++) {
        char key[64], body[256];
        snprintf(key, sizeof(key), "ef-%u", i);
        snprintf(body, sizeof(body),
                 "{\"customer_id\":%u,\"items\":[{\"sku\":\"pen\",\"qty\":1,\"price_cents\":250}"
                 "%s]}",
                 100 + i, i % 4 == 0 ? ",{\"sku\":\"book\",\"qty\":2,\"price_cents\":1500}" : "");
        (void)post_order(c, port, key, body);
    }
    stop_clean(c, serve);
    assert_int_equal(q(c, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' "
                          "AND event_type = 'OrderCreated'"),
                     EF_ORDERS);

    /* 2. `txo up` dispatches the batch, then dies before marking it. */
    args_init(&a, "up");
    args_addf(&a, "--listen=127.0.0.1:%u", port);
    args_add(&a, "--lease=2");
    args_add(&a, "--saga-lease=2");
    args_add(&a, "--poll=100");
    args_add(&a, "--crash-point=relay.after_publish");
    struct testproc *up1 = start(c, "ef_up_crash", &a);
    expect_crash(c, up1, 30000);
    /* Every event reached the consumer (inbox row + saga committed) and none was marked. */
    int64_t processing = q(c, "SELECT COUNT(*) FROM outbox_events WHERE event_type = "
                              "'OrderCreated' AND status = 'PROCESSING' AND locked_by IS NOT NULL");
    int64_t inbox = q(c, "SELECT COUNT(*) FROM inbox_events");
    int64_t sagas = q(c, "SELECT COUNT(*) FROM saga_instances");
    print_message("after the crash: %" PRId64 " OrderCreated PROCESSING, %" PRId64
                  " inbox rows, %" PRId64 " sagas\n",
                  processing, inbox, sagas);
    if (processing != EF_ORDERS || inbox != EF_ORDERS || sagas != EF_ORDERS)
        FAIL(c,
             "crash between publish and mark: want %d PROCESSING events, inbox rows and "
             "sagas, got %" PRId64 ", %" PRId64 ", %" PRId64,
             EF_ORDERS, processing, inbox, sagas);

    /* 3. Restart: the lease expires, the batch is dispatched again, the inbox drops it. */
    args_init(&a, "up");
    args_addf(&a, "--listen=127.0.0.1:%u", port);
    args_add(&a, "--lease=2");
    args_add(&a, "--saga-lease=2");
    args_add(&a, "--poll=100");
    struct testproc *up2 = start(c, "ef_up", &a);
    wait_ready(c, up2, port);
    if (!wait_count(c, "SELECT COUNT(*) FROM orders WHERE status IN ('CONFIRMED', 'CANCELLED')",
                    EF_ORDERS, 30000))
        FAIL(c, "orders not terminal 30 s after the restart: %" PRId64 " of %d",
             q(c, "SELECT COUNT(*) FROM orders WHERE status IN ('CONFIRMED', 'CANCELLED')"),
             EF_ORDERS);
    if (!wait_count(c, "SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED'", 0, 30000))
        FAIL(c, "%" PRId64 " outbox events still not PUBLISHED",
             q(c, "SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED'"));
    double dups = metric_value(c, port, "txo_inbox_duplicates_total");
    double consumed = metric_value(c, port, "txo_inbox_consumed_total");
    print_message("second run: txo_inbox_duplicates_total %.0f, txo_inbox_consumed_total %.0f\n",
                  dups, consumed);
    char *log = testproc_log(up2);
    bool reclaimed = strstr(log, "reclaimed events whose lease expired") != NULL;
    free(log);
    stop_clean(c, up2);

    /* The same 20 events were delivered again and each was dropped by the inbox. */
    if (dups < EF_ORDERS)
        FAIL(c, "txo_inbox_duplicates_total = %.0f, want >= %d (every event redelivered)", dups,
             EF_ORDERS);
    assert_true(consumed == 0); /* no OrderCreated was new to the second run */
    assert_true(reclaimed);
    assert_int_equal(q(c, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"), EF_ORDERS);
    assert_int_equal(q(c, "SELECT COUNT(*) FROM payments"), EF_ORDERS);
    assert_int_equal(q(c, "SELECT COUNT(*) FROM shipments"), EF_ORDERS);
    assert_int_equal(q(c, "SELECT COUNT(*) FROM inbox_events"), EF_ORDERS);
    assert_int_equal(q(c, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED' "
                          "AND locked_by IS NULL AND published_at IS NOT NULL"),
                     q(c, "SELECT COUNT(*) FROM outbox_events"));
    check_invariants(c, stock, TXO_ARRAY_LEN(stock));
    remove_logs(c);
}

/* ---- a worker killed while it owns sagas ---- */

#define KILL_ORDERS 100
#define LAMPS       10

static void test_worker_killed_mid_sagas(void **state)
{
    struct ctx *c = *state;
    /* Every order takes a pen; every third one also a lamp, of which there are only 10: the
     * other lamp orders fail at ReserveStock and are cancelled. */
    static const struct sku_stock stock[] = {{"pen", 1000}, {"lamp", LAMPS}};
    seed_stock(c, stock, TXO_ARRAY_LEN(stock));

    unsigned port = testproc_free_port();
    struct args a;
    args_init(&a, "serve");
    args_addf(&a, "--listen=127.0.0.1:%u", port);
    struct testproc *serve = start(c, "kill_serve", &a);
    wait_ready(c, serve, port);
    unsigned lamp_orders = 0;
    for (unsigned i = 0; i < KILL_ORDERS; i++) {
        char key[64], body[256];
        bool lamp = i % 3 == 0;
        lamp_orders += lamp;
        snprintf(key, sizeof(key), "kill-%u", i);
        snprintf(body, sizeof(body),
                 "{\"customer_id\":%u,\"items\":[{\"sku\":\"pen\",\"qty\":1,\"price_cents\":199}"
                 "%s]}",
                 500 + i, lamp ? ",{\"sku\":\"lamp\",\"qty\":1,\"price_cents\":4900}" : "");
        (void)post_order(c, port, key, body);
    }
    stop_clean(c, serve);

    /*
     * 1. Four saga runners; the process dies right after the 41st saga step committed by
     * drive_step (the first step of a run commits with the lease and does not pass this crash
     * point). Whether a saga is left half-way depends on what the other runners were doing at
     * that instant (a crash right after CreateShipment leaves its own saga COMPLETED), so on
     * the rare run that left none the process is started again, with the crash point a few
     * steps ahead: a second crash is a fault like the first.
     */
    int64_t completed_steps = 0, unfinished = 0, owned = 0, half_done = 0, terminal = 0;
    unsigned crashes = 0;
    while (half_done == 0 && crashes < 5) {
        args_init(&a, "up");
        args_addf(&a, "--listen=127.0.0.1:%u", port);
        args_add(&a, "--saga-threads=4");
        args_add(&a, "--saga-lease=2");
        args_add(&a, "--lease=2");
        args_add(&a, "--poll=100");
        args_add(&a, crashes == 0 ? "--crash-point=saga.step_committed:40"
                                  : "--crash-point=saga.step_committed:5");
        struct testproc *up1 = start(c, "kill_up_crash", &a);
        expect_crash(c, up1, 60000);
        crashes++;

        /* What the dead process left behind. */
        completed_steps = q(c, "SELECT COUNT(*) FROM saga_steps WHERE status = 'COMPLETED'");
        unfinished = q(c, "SELECT COUNT(*) FROM saga_instances "
                          "WHERE status IN ('RUNNING', 'COMPENSATING')");
        owned = q(c, "SELECT COUNT(*) FROM saga_instances WHERE status IN ('RUNNING', "
                     "'COMPENSATING') AND owner IS NOT NULL AND lease_until > UTC_TIMESTAMP(6)");
        half_done = q(c, "SELECT COUNT(DISTINCT s.id) FROM saga_instances s JOIN saga_steps st "
                         "ON st.saga_id = s.id WHERE s.status IN ('RUNNING', 'COMPENSATING') "
                         "AND st.status = 'COMPLETED'");
        terminal = q(c, "SELECT COUNT(*) FROM orders WHERE status <> 'CREATED'");
        print_message("after kill %u: %" PRId64 " steps COMPLETED, %" PRId64
                      " sagas unfinished (%" PRId64 " owned by the dead process under lease, "
                      "%" PRId64 " with a step already COMPLETED), %" PRId64 " orders terminal\n",
                      crashes, completed_steps, unfinished, owned, half_done, terminal);
        if (crashes == 1 && completed_steps < 41)
            FAIL(c,
                 "the crash point fires after the 41st committed step, found %" PRId64
                 " steps COMPLETED",
                 completed_steps);
    }
    if (half_done < 1)
        FAIL(c, "%u kills left no saga half-way (RUNNING with a COMPLETED step)", crashes);
    assert_true(unfinished >= half_done);
    assert_true(terminal < KILL_ORDERS);

    /* 2. Restart without the crash point: every saga is resumed or run, all end terminal. */
    args_init(&a, "up");
    args_addf(&a, "--listen=127.0.0.1:%u", port);
    args_add(&a, "--saga-threads=4");
    args_add(&a, "--saga-lease=2");
    args_add(&a, "--lease=2");
    args_add(&a, "--poll=100");
    struct testproc *up2 = start(c, "kill_up", &a);
    wait_ready(c, up2, port);
    int64_t t0 = txo_monotonic_ms();
    if (!wait_count(c, "SELECT COUNT(*) FROM orders WHERE status IN ('CONFIRMED', 'CANCELLED')",
                    KILL_ORDERS, 30000))
        FAIL(c, "orders not terminal 30 s after the restart: %" PRId64 " of %d",
             q(c, "SELECT COUNT(*) FROM orders WHERE status IN ('CONFIRMED', 'CANCELLED')"),
             KILL_ORDERS);
    print_message("all %d orders terminal %" PRId64 " ms after the restart\n", KILL_ORDERS,
                  txo_monotonic_ms() - t0);
    if (!wait_count(c, "SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED'", 0, 30000))
        FAIL(c, "%" PRId64 " outbox events still not PUBLISHED",
             q(c, "SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED'"));
    double picked_up = metric_value(c, port, "txo_saga_picked_up_total");
    print_message("second run: txo_saga_picked_up_total %.0f (sagas unfinished at the kill: "
                  "%" PRId64 ")\n",
                  picked_up, unfinished);
    stop_clean(c, up2);

    /* Every saga left unfinished by the dead process was picked up by the scheduler of the
     * second one (the consumer only hands over the sagas it creates itself). */
    if (picked_up < (double)unfinished)
        FAIL(c, "txo_saga_picked_up_total = %.0f, fewer than the %" PRId64 " sagas left unfinished",
             picked_up, unfinished);
    int64_t want_confirmed = KILL_ORDERS - (lamp_orders - LAMPS);
    assert_int_equal(q(c, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"),
                     want_confirmed);
    assert_int_equal(q(c, "SELECT COUNT(*) FROM orders WHERE status = 'CANCELLED'"),
                     lamp_orders - LAMPS);
    assert_int_equal(q(c, "SELECT available FROM inventory WHERE sku = 'lamp'"), 0);
    assert_int_equal(q(c, "SELECT COUNT(*) FROM saga_instances"), KILL_ORDERS);
    check_invariants(c, stock, TXO_ARRAY_LEN(stock));
    remove_logs(c);
}

int main(void)
{
    const char *db = getenv("MYSQL_DATABASE");
    orig_database = db != NULL ? txo_strdup(db) : NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_relay_crash_after_publish_local, setup, teardown),
        cmocka_unit_test_setup_teardown(test_worker_killed_mid_sagas, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    txo_free(orig_database);
    return rc;
}
