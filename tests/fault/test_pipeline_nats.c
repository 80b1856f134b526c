/*
 * End-to-end fault tests of the order pipeline through a real NATS JetStream server (a private
 * nats-server per test, tests/support/testnats.h), with real `txo` processes:
 *
 *   F     `txo relay --publisher nats` + `txo worker --broker nats --crash-point
 *         worker.after_consume`: the worker commits the inbox row and the saga of an
 *         OrderCreated, then dies before acknowledging it. The restarted worker gets it again
 *         from NATS once the ack wait (1 s) is over; the inbox drops it: one saga, one charge,
 *         one shipment per order.
 *   D     `txo up --broker nats`; nats-server stops; orders still get 201 (the outbox is in
 *         MariaDB), their OrderCreated stay PENDING with attempts and last_error; the server
 *         comes back on the same port and store; every order ends CONFIRMED.
 *   relay only   rows inserted into outbox_events with plain SQL, as an application in another
 *         language would (README "Outbox table contract"); `txo relay --publisher nats
 *         --drain` exits 0 and the stream holds each event once, Nats-Msg-Id = its
 *         idempotency_key, the envelope as documented (read back with the library's consumer).
 *
 * After the pipeline scenarios every invariant of SPEC.md is checked by SQL (check_invariants,
 * the same rules as in test_pipeline_crash.c, where stock conservation is stated). Each test
 * uses its own stream, subject prefix and durable.
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
#include "testnats.h"
#include "testproc.h"
#include "txo/http_client.h"
#include "txo/nats.h"

#define MAX_PROCS 8

struct sku_stock {
    const char *sku;
    int32_t units;
};

struct ctx {
    struct testdb t;
    struct testnats nats;
    struct txo_http_client *http;
    struct testproc procs[MAX_PROCS]; /* every process started by the test, for logs */
    size_t n_procs;
    char stream[64];  /* unique per test */
    char prefix[64];  /* subject prefix */
    char durable[64]; /* the workers' durable consumer */
};

/* testdb_export_env() points MYSQL_DATABASE at the test database; the next setup needs the
 * original one back to connect before it creates its own. */
static char *orig_database;

static int setup(void **state)
{
    static unsigned seq;
    struct ctx *c = txo_calloc(1, sizeof(*c));
    assert_non_null(c);
    testdb_setup(&c->t, "pipeline_nats");
    testdb_export_env(&c->t);
    testnats_start(&c->nats);
    struct txo_error err;
    txo_error_init(&err);
    if (txo_http_client_new(NULL, &c->http, &err) != 0)
        fail_msg("txo_http_client_new: %s", err.msg);
    snprintf(c->stream, sizeof(c->stream), "PIPE_%ld_%u", (long)getpid(), seq);
    snprintf(c->prefix, sizeof(c->prefix), "pipe%ld_%u.events", (long)getpid(), seq);
    snprintf(c->durable, sizeof(c->durable), "pipe-worker-%ld-%u", (long)getpid(), seq);
    seq++;
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    for (size_t i = 0; i < c->n_procs; i++)
        testproc_stop_hard(&c->procs[i]);
    txo_http_client_free(c->http);
    testnats_cleanup(&c->nats);
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

/* ---- NATS ---- */

/* --nats-url/--nats-stream/--nats-subject-prefix/--nats-durable of this test. */
static void args_nats(struct ctx *c, struct args *a)
{
    args_addf(a, "--nats-url=%s", c->nats.url);
    args_addf(a, "--nats-stream=%s", c->stream);
    args_addf(a, "--nats-subject-prefix=%s", c->prefix);
    args_addf(a, "--nats-durable=%s", c->durable);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * The stream holds every outbox event exactly once: as many messages as rows, distinct
 * Nats-Msg-Ids, each the idempotency_key of one row.
 */
static void check_stream_matches_outbox(struct ctx *c)
{
    int64_t rows = q(c, "SELECT COUNT(*) FROM outbox_events");
    uint64_t msgs = testnats_stream_msgs(&c->nats, c->stream);
    if (msgs != (uint64_t)rows)
        FAIL(c, "stream %s holds %" PRIu64 " messages, the outbox %" PRId64 " events", c->stream,
             msgs, rows);
    char **ids = NULL;
    size_t n = testnats_stream_msg_ids(&c->nats, c->stream, &ids);
    assert_int_equal(n, rows);
    qsort(ids, n, sizeof(*ids), cmp_str);
    for (size_t i = 0; i < n; i++) {
        assert_non_null(ids[i]);
        if (i > 0 && strcmp(ids[i - 1], ids[i]) == 0)
            FAIL(c, "event %s stored twice in the stream", ids[i]);
        struct txo_param p = txo_p_str(ids[i]);
        if (testdb_i64(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE idempotency_key = ?", &p,
                       1) != 1)
            FAIL(c, "stream message %s is no outbox event", ids[i]);
    }
    testnats_free_ids(ids, n);
}

static void place_orders(struct ctx *c, unsigned port, const char *tag, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        char key[64], body[256];
        snprintf(key, sizeof(key), "%s-%u", tag, i);
        snprintf(body, sizeof(body),
                 "{\"customer_id\":%u,\"items\":[{\"sku\":\"pen\",\"qty\":%u,\"price_cents\":"
                 "250}%s]}",
                 700 + i, 1 + i % 2,
                 i % 3 == 0 ? ",{\"sku\":\"book\",\"qty\":1,\"price_cents\":1500}" : "");
        (void)post_order(c, port, key, body);
    }
}

/* ---- F: the worker dies between its commit and the ack ---- */

#define F_ORDERS 10

static void test_worker_crash_before_ack_nats(void **state)
{
    struct ctx *c = *state;
    static const struct sku_stock stock[] = {{"pen", 1000}, {"book", 1000}};
    seed_stock(c, stock, TXO_ARRAY_LEN(stock));

    unsigned port = testproc_free_port();
    struct args a;
    args_init(&a, "serve");
    args_addf(&a, "--listen=127.0.0.1:%u", port);
    struct testproc *serve = start(c, "f_serve", &a);
    wait_ready(c, serve, port);
    place_orders(c, port, "f", F_ORDERS);
    stop_clean(c, serve);

    /* The relay publishes every OrderCreated to JetStream. */
    args_init(&a, "relay");
    args_add(&a, "--publisher=nats");
    args_add(&a, "--idle-sleep=50");
    args_nats(c, &a);
    struct testproc *relay = start(c, "f_relay", &a);
    if (!wait_count(c, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'", F_ORDERS,
                    30000))
        FAIL(c, "the relay did not publish the %d OrderCreated events", F_ORDERS);

    /* The worker commits inbox row + saga of the first OrderCreated, then dies unacked. */
    args_init(&a, "worker");
    args_add(&a, "--broker=nats");
    args_nats(c, &a);
    args_add(&a, "--nats-ack-wait=1000");
    args_add(&a, "--saga-lease=2");
    args_add(&a, "--poll=100");
    args_add(&a, "--crash-point=worker.after_consume");
    struct testproc *w1 = start(c, "f_worker_crash", &a);
    expect_crash(c, w1, 30000);
    int64_t inbox = q(c, "SELECT COUNT(*) FROM inbox_events");
    int64_t sagas = q(c, "SELECT COUNT(*) FROM saga_instances");
    int64_t unacked = testnats_consumer_ack_pending(&c->nats, c->stream, c->durable);
    print_message("after the crash: %" PRId64 " inbox rows, %" PRId64 " sagas, %" PRId64
                  " messages delivered and not acknowledged\n",
                  inbox, sagas, unacked);
    if (inbox != 1 || sagas != 1 || unacked < 1)
        FAIL(c,
             "want 1 inbox row, 1 saga and >= 1 unacknowledged message after the crash, got "
             "%" PRId64 ", %" PRId64 ", %" PRId64,
             inbox, sagas, unacked);

    /* Restarted: NATS delivers the unacknowledged message again, the inbox drops it. */
    unsigned mport = testproc_free_port();
    args_init(&a, "worker");
    args_add(&a, "--broker=nats");
    args_nats(c, &a);
    args_add(&a, "--nats-ack-wait=1000");
    args_add(&a, "--saga-lease=2");
    args_add(&a, "--poll=100");
    args_addf(&a, "--metrics-listen=127.0.0.1:%u", mport);
    struct testproc *w2 = start(c, "f_worker", &a);
    wait_ready(c, w2, mport);
    if (!wait_count(c, "SELECT COUNT(*) FROM orders WHERE status IN ('CONFIRMED', 'CANCELLED')",
                    F_ORDERS, 30000))
        FAIL(c, "orders not terminal 30 s after the worker restart: %" PRId64 " of %d",
             q(c, "SELECT COUNT(*) FROM orders WHERE status IN ('CONFIRMED', 'CANCELLED')"),
             F_ORDERS);
    if (!wait_count(c, "SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED'", 0, 30000))
        FAIL(c, "%" PRId64 " outbox events still not PUBLISHED",
             q(c, "SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED'"));
    /* Every message (the saga events too) is acknowledged in the end. */
    int64_t deadline = txo_monotonic_ms() + 20000;
    while (testnats_consumer_ack_pending(&c->nats, c->stream, c->durable) != 0) {
        if (txo_monotonic_ms() > deadline)
            FAIL(c, "%" PRId64 " messages still unacknowledged",
                 testnats_consumer_ack_pending(&c->nats, c->stream, c->durable));
        txo_sleep_ms(100);
    }
    double dups = metric_value(c, mport, "txo_inbox_duplicates_total");
    double consumed = metric_value(c, mport, "txo_inbox_consumed_total");
    print_message("restarted worker: txo_inbox_duplicates_total %.0f, txo_inbox_consumed_total "
                  "%.0f\n",
                  dups, consumed);
    stop_clean(c, w2);
    stop_clean(c, relay);
    if (dups < 1)
        FAIL(c,
             "txo_inbox_duplicates_total = %.0f: the redelivered OrderCreated was not seen "
             "as a duplicate",
             dups);
    if (consumed != F_ORDERS - 1)
        FAIL(c,
             "txo_inbox_consumed_total = %.0f, want %d (the first one was consumed before "
             "the crash)",
             consumed, F_ORDERS - 1);

    assert_int_equal(q(c, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"), F_ORDERS);
    assert_int_equal(q(c, "SELECT COUNT(*) FROM saga_instances"), F_ORDERS);
    assert_int_equal(q(c, "SELECT COUNT(*) FROM payments WHERE status = 'CHARGED'"), F_ORDERS);
    assert_int_equal(q(c, "SELECT COUNT(*) FROM shipments WHERE status = 'CREATED'"), F_ORDERS);
    check_invariants(c, stock, TXO_ARRAY_LEN(stock));
    check_stream_matches_outbox(c);
    remove_logs(c);
}

/* ---- D: the broker is down while orders come in ---- */

#define D_ORDERS 10

static void test_broker_outage_end_to_end_nats(void **state)
{
    struct ctx *c = *state;
    static const struct sku_stock stock[] = {{"pen", 1000}, {"book", 1000}};
    seed_stock(c, stock, TXO_ARRAY_LEN(stock));

    unsigned port = testproc_free_port();
    struct args a;
    args_init(&a, "up");
    args_addf(&a, "--listen=127.0.0.1:%u", port);
    args_add(&a, "--broker=nats");
    args_nats(c, &a);
    args_add(&a, "--nats-ack-timeout=1000");
    args_add(&a, "--backoff-base=100");
    args_add(&a, "--backoff-max=1000");
    args_add(&a, "--max-attempts=1000"); /* no dead letter during the outage */
    args_add(&a, "--saga-lease=2");
    args_add(&a, "--poll=100");
    struct testproc *up = start(c, "d_up", &a);
    wait_ready(c, up, port);

    /* One order end to end while the broker is up: stream and durable exist. */
    place_orders(c, port, "d-warm", 1);
    if (!wait_count(c, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'", 1, 30000))
        FAIL(c, "the first order was not CONFIRMED through NATS");

    /* Broker down: the API still answers 201, the events wait in the outbox. */
    testnats_stop(&c->nats);
    place_orders(c, port, "d", D_ORDERS);
    const char *waiting = "SELECT COUNT(*) FROM outbox_events WHERE event_type = 'OrderCreated' "
                          "AND status = 'PENDING' AND attempts >= 1 AND last_error IS NOT NULL "
                          "AND published_at IS NULL";
    if (!wait_count(c, waiting, D_ORDERS, 20000))
        FAIL(c,
             "want the %d new OrderCreated PENDING with attempts >= 1 and last_error, got %" PRId64,
             D_ORDERS, q(c, waiting));
    char *last_error = testdb_str(c->t.db,
                                  "SELECT last_error FROM outbox_events WHERE event_type = "
                                  "'OrderCreated' AND status = 'PENDING' LIMIT 1",
                                  NULL, 0);
    int64_t max_attempts = q(c, "SELECT MAX(attempts) FROM outbox_events WHERE status = 'PENDING'");
    print_message("broker down: %d OrderCreated PENDING, attempts up to %" PRId64
                  ", last_error \"%s\"\n",
                  D_ORDERS, max_attempts, last_error != NULL ? last_error : "(null)");
    txo_free(last_error);
    assert_int_equal(q(c, "SELECT COUNT(*) FROM inbox_events"), 1);
    assert_int_equal(q(c, "SELECT COUNT(*) FROM orders WHERE status = 'CREATED'"), D_ORDERS);
    assert_int_equal(q(c, "SELECT COUNT(*) FROM outbox_events WHERE status = 'FAILED'"), 0);

    /* Back on the same port and store: everything is delivered. */
    testnats_restart(&c->nats);
    int64_t t0 = txo_monotonic_ms();
    if (!wait_count(c, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'", D_ORDERS + 1,
                    30000))
        FAIL(c, "%" PRId64 " of %d orders CONFIRMED 30 s after the broker came back",
             q(c, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"), D_ORDERS + 1);
    print_message("all orders CONFIRMED %" PRId64 " ms after the broker came back\n",
                  txo_monotonic_ms() - t0);
    if (!wait_count(c, "SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED'", 0, 30000))
        FAIL(c, "%" PRId64 " outbox events still not PUBLISHED",
             q(c, "SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED'"));
    stop_clean(c, up);
    assert_int_equal(q(c, "SELECT COUNT(*) FROM outbox_events WHERE published_at IS NULL "
                          "OR locked_by IS NOT NULL"),
                     0);
    check_invariants(c, stock, TXO_ARRAY_LEN(stock));
    check_stream_matches_outbox(c);
    remove_logs(c);
}

/* ---- `txo relay` alone, for applications in other languages ---- */

struct received {
    char subject[160];
    char msg_id[160];
    char *data;
};

struct reader {
    struct received got[16];
    size_t n;
};

static int record(void *arg, const struct txo_inbound_message *msg, struct txo_error *err)
{
    struct reader *r = arg;
    if (r->n == TXO_ARRAY_LEN(r->got))
        return txo_error_set(err, TXO_EINVAL, "too many messages");
    struct received *m = &r->got[r->n++];
    snprintf(m->subject, sizeof(m->subject), "%s", msg->subject ? msg->subject : "(null)");
    snprintf(m->msg_id, sizeof(m->msg_id), "%s", msg->msg_id ? msg->msg_id : "(null)");
    m->data = txo_malloc(msg->len + 1);
    if (m->data == NULL)
        return txo_error_set(err, TXO_ENOMEM, "copy");
    memcpy(m->data, msg->data, msg->len);
    m->data[msg->len] = '\0';
    return 0;
}

/* What another application inserts, and the subject token its event_type becomes. */
static const struct {
    const char *aggregate_type;
    int64_t aggregate_id;
    const char *event_type;
    const char *subject_type;
    const char *payload;
    const char *key;
} foreign[] = {
    {"invoice", 7, "InvoiceIssued", "InvoiceIssued",
     "{\"invoice_id\":7,\"amount\":{\"cents\":1250,\"currency\":\"EUR\"},\"lines\":[1,2]}",
     "invoice:7:issued"},
    {"invoice", 7, "Invoice.Paid", "Invoice_Paid", "{\"invoice_id\":7,\"paid\":true}",
     "invoice:7:paid"},
    {"customer", 42, "CustomerRenamed", "CustomerRenamed",
     "{\"customer_id\":42,\"name\":\"Zo\\u00eb \\u5f20\"}", "customer:42:renamed:1"},
};

static void test_relay_only_foreign_rows_nats(void **state)
{
    struct ctx *c = *state;
    /* Plain SQL as in README, each row in a transaction of its own (txo_db_exec is only the
     * means of sending it); next_attempt_at left to its default (this session is UTC) except
     * for the last row, which sets it explicitly as the README suggests for non-UTC sessions. */
    for (size_t i = 0; i < TXO_ARRAY_LEN(foreign); i++) {
        struct txo_param p[] = {txo_p_str(foreign[i].aggregate_type),
                                txo_p_i64(foreign[i].aggregate_id),
                                txo_p_str(foreign[i].event_type), txo_p_str(foreign[i].payload),
                                txo_p_str(foreign[i].key)};
        bool explicit_due = i + 1 == TXO_ARRAY_LEN(foreign);
        struct txo_error err;
        txo_error_init(&err);
        if (txo_db_exec(c->t.db,
                        explicit_due
                            ? "INSERT INTO outbox_events (aggregate_type, aggregate_id, "
                              "event_type, payload, idempotency_key, next_attempt_at) VALUES "
                              "(?, ?, ?, ?, ?, UTC_TIMESTAMP(6))"
                            : "INSERT INTO outbox_events (aggregate_type, aggregate_id, "
                              "event_type, payload, idempotency_key) VALUES (?, ?, ?, ?, ?)",
                        p, TXO_ARRAY_LEN(p), NULL, &err) != 0)
            fail_msg("insert: %s", err.msg);
    }

    struct args a;
    args_init(&a, "relay");
    args_add(&a, "--publisher=nats");
    args_add(&a, "--drain");
    args_nats(c, &a);
    struct testproc *relay = start(c, "relay_only", &a);
    if (!testproc_wait(relay, 30000) || !testproc_exited_with(relay, 0))
        FAIL(c, "txo relay --drain did not exit 0 (wait status 0x%x)", relay->status);
    assert_int_equal(q(c, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED' AND "
                          "published_at IS NOT NULL AND attempts = 0 AND last_error IS NULL"),
                     TXO_ARRAY_LEN(foreign));

    /* The stream, in order, with the idempotency keys as message ids. */
    char **ids = NULL;
    size_t n = testnats_stream_msg_ids(&c->nats, c->stream, &ids);
    assert_int_equal(n, TXO_ARRAY_LEN(foreign));
    for (size_t i = 0; i < n; i++)
        assert_string_equal(ids[i], foreign[i].key);
    testnats_free_ids(ids, n);

    /* Read back with the library's consumer, as a subscriber would. */
    struct txo_nats_opts o;
    txo_nats_opts_init(&o);
    o.url = c->nats.url;
    o.stream = c->stream;
    o.subject_prefix = c->prefix;
    o.durable = "relay-only-reader";
    struct txo_consumer *cons = NULL;
    struct reader r;
    memset(&r, 0, sizeof(r));
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_nats_new(&o, record, &r, &cons, &err) != 0)
        fail_msg("txo_consumer_nats_new: %s", err.msg);
    int64_t deadline = txo_monotonic_ms() + 10000;
    while (r.n < TXO_ARRAY_LEN(foreign) && txo_monotonic_ms() < deadline) {
        size_t handled = 0;
        txo_error_init(&err);
        if (txo_consumer_poll(cons, 16, 500, &handled, &err) != 0)
            fail_msg("txo_consumer_poll: %s", err.msg);
    }
    txo_consumer_free(cons);
    assert_int_equal(r.n, TXO_ARRAY_LEN(foreign));

    for (size_t i = 0; i < r.n; i++) {
        struct received *m = &r.got[i];
        char subject[160];
        snprintf(subject, sizeof(subject), "%s.%s.%s", c->prefix, foreign[i].aggregate_type,
                 foreign[i].subject_type);
        assert_string_equal(m->msg_id, foreign[i].key);
        assert_string_equal(m->subject, subject);
        json_error_t jerr;
        json_t *env = json_loads(m->data, 0, &jerr);
        if (env == NULL)
            fail_msg("message %zu is not JSON (%s): %s", i, jerr.text, m->data);
        struct txo_param kp = txo_p_str(foreign[i].key);
        int64_t id =
            testdb_i64(c->t.db, "SELECT id FROM outbox_events WHERE idempotency_key = ?", &kp, 1);
        assert_int_equal(json_integer_value(json_object_get(env, "id")), id);
        assert_string_equal(json_string_value(json_object_get(env, "type")), foreign[i].event_type);
        assert_string_equal(json_string_value(json_object_get(env, "aggregate_type")),
                            foreign[i].aggregate_type);
        assert_int_equal(json_integer_value(json_object_get(env, "aggregate_id")),
                         foreign[i].aggregate_id);
        assert_string_equal(json_string_value(json_object_get(env, "idempotency_key")),
                            foreign[i].key);
        assert_int_equal(json_integer_value(json_object_get(env, "attempt")), 1);
        const char *created = json_string_value(json_object_get(env, "created_at"));
        assert_non_null(created);
        assert_int_equal(strlen(created), strlen("2026-11-30T15:37:00.123456Z"));
        assert_int_equal(created[strlen(created) - 1], 'Z');
        json_t *want = json_loads(foreign[i].payload, 0, &jerr);
        assert_non_null(want);
        if (!json_equal(json_object_get(env, "payload"), want)) {
            char *got = json_dumps(json_object_get(env, "payload"), JSON_COMPACT);
            fail_msg("payload of %s: got %s, want %s", foreign[i].key, got ? got : "(none)",
                     foreign[i].payload);
        }
        json_decref(want);
        json_decref(env);
        txo_free(m->data);
        m->data = NULL;
    }

    /* A second drain finds nothing to do and publishes nothing again. */
    args_init(&a, "relay");
    args_add(&a, "--publisher=nats");
    args_add(&a, "--drain");
    args_nats(c, &a);
    relay = start(c, "relay_only_again", &a);
    if (!testproc_wait(relay, 30000) || !testproc_exited_with(relay, 0))
        FAIL(c, "second txo relay --drain did not exit 0 (wait status 0x%x)", relay->status);
    assert_int_equal(testnats_stream_msgs(&c->nats, c->stream), TXO_ARRAY_LEN(foreign));
    remove_logs(c);
}

int main(void)
{
    const char *db = getenv("MYSQL_DATABASE");
    orig_database = db != NULL ? txo_strdup(db) : NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_worker_crash_before_ack_nats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_broker_outage_end_to_end_nats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_relay_only_foreign_rows_nats, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    txo_free(orig_database);
    return rc;
}
