/*
 * Test support: the whole order pipeline with real `txo` processes (test_pipeline_crash.c,
 * test_pipeline_nats.c). A test starts `txo serve`, `txo up`, `txo relay`, `txo worker` with
 * crash points and kills, places orders through the HTTP API, waits for the database to settle
 * and then checks every invariant of the pipeline by SQL (testpipeline_check_invariants).
 *
 * A struct testpipeline is the part of a test's fixture these helpers share: the test database
 * connection (borrowed), an HTTP client (owned) and every child process the test started
 * (owned, at most TESTPIPELINE_MAX_PROCS). When a helper fails the test it first prints the end
 * of every child's log (TESTPIPELINE_FAIL), so a failure in a multi-process scenario shows
 * what each process did. The logs of a test that passed are deleted with
 * testpipeline_remove_logs(); a failed test keeps them in /tmp.
 *
 * Like the other support modules, every helper fails the current cmocka test (fail_msg) on a
 * setup error or a broken expectation, so callers need no error handling. Children inherit the
 * environment: call testdb_export_env() before starting them. Not thread-safe: one test, one
 * thread.
 */
#ifndef TXO_TESTPIPELINE_H
#define TXO_TESTPIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "testproc.h"
#include "txo/txo.h"

#define TESTPIPELINE_MAX_PROCS 8

/*
 * A `txo` command line under construction: argv[0] is the txo binary, argv[1] the subcommand.
 * Up to 61 more arguments, 32 of them formatted (their text lives in the struct, so it must
 * outlive the process start); more fail the test.
 */
struct testpipeline_args {
    const char *v[64];
    size_t n;
    char buf[32][160];
    size_t n_buf;
};

struct testpipeline {
    struct txo_db *db;                             /* the test database; borrowed */
    struct txo_http_client *http;                  /* owned; default options */
    struct testproc procs[TESTPIPELINE_MAX_PROCS]; /* every process started, for logs */
    size_t n_procs;
    const char *broker;                   /* the daemons' broker (testpipeline_broker) */
    struct testpipeline_args broker_args; /* its arguments: only v[0..n) is used */
};

/* Prints the end of every child's log, then fails the test with the printf-style message
 * (cmocka fail_msg: the caller includes <cmocka.h>). */
#define TESTPIPELINE_FAIL(tp, ...)                                                                 \
    do {                                                                                           \
        testpipeline_dump_logs(tp);                                                                \
        fail_msg(__VA_ARGS__);                                                                     \
    } while (0)

/*
 * Sets tp up on db (borrowed: it must outlive tp) with a new HTTP client and no processes.
 * Fails the test when the client cannot be created.
 */
void testpipeline_init(struct testpipeline *tp, struct txo_db *db);

/* SIGKILLs every child still running, reaps it, and frees the HTTP client. Never fails. */
void testpipeline_release(struct testpipeline *tp);

/* Prints the last 4000 bytes of every child's log (cmocka print_message). Never fails. */
void testpipeline_dump_logs(const struct testpipeline *tp);

/* Deletes every child's log file (at the end of a test that passed). Never fails. */
void testpipeline_remove_logs(const struct testpipeline *tp);

/* ---- processes ---- */

/* Empties a and puts `txo <subcommand>` in it. */
void testpipeline_args_init(struct testpipeline_args *a, const char *subcommand);

/* Appends s (borrowed: it must outlive the process start). */
void testpipeline_args_add(struct testpipeline_args *a, const char *s);

/* Appends a formatted argument (copied into a, at most 159 bytes). */
TXO_PRINTF(2, 3)
void testpipeline_args_addf(struct testpipeline_args *a, const char *fmt, ...);

/*
 * Starts the command line a (NULL-terminating it) with its log named after tag, and records
 * the process in tp. Returns the process, owned by tp (valid until testpipeline_release).
 */
struct testproc *testpipeline_start(struct testpipeline *tp, const char *tag,
                                    struct testpipeline_args *a);

/* Waits up to 30 s until p answers GET /healthz on port; otherwise TESTPIPELINE_FAIL. */
void testpipeline_wait_ready(struct testpipeline *tp, struct testproc *p, unsigned port);

/*
 * p must die of SIGKILL (its crash point fired) within timeout_ms; otherwise (still running,
 * or ended another way) TESTPIPELINE_FAIL.
 */
void testpipeline_expect_crash(struct testpipeline *tp, struct testproc *p, int timeout_ms);

/* SIGTERM: p must stop gracefully and exit 0 within 30 s; otherwise TESTPIPELINE_FAIL. */
void testpipeline_stop_clean(struct testpipeline *tp, struct testproc *p);

/* Starts `txo serve` on a free port, returned in *port, and waits until it answers. */
struct testproc *testpipeline_start_serve(struct testpipeline *tp, const char *tag, unsigned *port);

/* Appends --crash-point=point, unless point is NULL. */
void testpipeline_args_crash_point(struct testpipeline_args *a, const char *point);

/*
 * Names the broker (a static string: "nats", "redis", ...) of the daemons the helpers below
 * start, and returns the list of its arguments, empty, for the caller to fill (the URL, the
 * stream, the consumer group: what every daemon of the test needs to reach it). Owned by tp.
 */
struct testpipeline_args *testpipeline_broker(struct testpipeline *tp, const char *broker);

/*
 * Empties a and puts `txo <subcommand>` in it with the broker of testpipeline_broker():
 * --publisher=<broker> for the relay, --broker=<broker> for the others, then its arguments.
 */
void testpipeline_args_daemon(struct testpipeline *tp, struct testpipeline_args *a,
                              const char *subcommand);

/*
 * Starts `txo relay` (testpipeline_args_daemon), with the arguments extra (NULL-terminated) and
 * --crash-point=crash_point unless it is NULL. Returns the process, owned by tp.
 */
struct testproc *testpipeline_start_relay(struct testpipeline *tp, const char *tag,
                                          const char *const *extra, const char *crash_point);

/*
 * Starts `txo worker` (testpipeline_args_daemon) with the quick saga timing of these tests
 * (--saga-lease=2 --poll=100), extra (NULL-terminated) and --crash-point=crash_point unless it
 * is NULL. With mport it also serves its metrics on a free port, returned in *mport, and is
 * waited for until it answers there. Returns the process, owned by tp.
 */
struct testproc *testpipeline_start_worker(struct testpipeline *tp, const char *tag,
                                           const char *const *extra, const char *crash_point,
                                           unsigned *mport);

/*
 * Starts `txo up` (testpipeline_args_daemon) with --saga-lease=2 --poll=100, extra
 * (NULL-terminated) and --listen on a free port, returned in *port; waits until it answers.
 */
struct testproc *testpipeline_start_up(struct testpipeline *tp, const char *tag,
                                       const char *const *extra, unsigned *port);

/* ---- HTTP ---- */

/*
 * POSTs body (NUL-terminated JSON) to http://127.0.0.1:port/orders with Idempotency-Key key;
 * the answer must be 201 {"order_id": N, "status": "CREATED"}. Returns N.
 */
int64_t testpipeline_post_order(struct testpipeline *tp, unsigned port, const char *key,
                                const char *body);

/* testpipeline_post_order() with more request headers (NULL or NULL-terminated "Name: value"
 * lines, e.g. a traceparent). */
int64_t testpipeline_post_order_headers(struct testpipeline *tp, unsigned port, const char *key,
                                        const char *const *headers, const char *body);

/*
 * Posts n orders (testpipeline_post_order) with Idempotency-Key "<key_prefix>-<i>": order i is
 * customer 700 + i buying 1 + i % 2 pens at 250 cents and, when books, every third one
 * (i % 3 == 0) also a book at 1500 cents.
 */
void testpipeline_place_orders(struct testpipeline *tp, unsigned port, const char *key_prefix,
                               unsigned n, bool books);

/* testpipeline_place_orders through a `txo serve` of its own, stopped cleanly afterwards. */
void testpipeline_serve_orders(struct testpipeline *tp, const char *key_prefix, unsigned n,
                               bool books);

/*
 * The value of the sample `series` (testhttp_metric_value) in GET /metrics on port, or -1
 * when it is missing. TESTPIPELINE_FAIL when the GET fails.
 */
double testpipeline_metric(struct testpipeline *tp, unsigned port, const char *series);

/* ---- database ---- */

/* Polls sql (a COUNT) every 100 ms until it returns want; false after timeout_ms. */
bool testpipeline_wait_count(struct testpipeline *tp, const char *sql, int64_t want,
                             int timeout_ms);

/*
 * Waits up to timeout_ms until all n_orders orders are CONFIRMED or CANCELLED; otherwise
 * TESTPIPELINE_FAIL with "orders not terminal <timeout> s <when>: <n> of <n_orders>" (when
 * says after what, e.g. "after the restart").
 */
void testpipeline_wait_terminal(struct testpipeline *tp, int n_orders, int timeout_ms,
                                const char *when);

/* Waits up to timeout_ms until every outbox event is PUBLISHED; otherwise TESTPIPELINE_FAIL. */
void testpipeline_wait_published(struct testpipeline *tp, int timeout_ms);

/*
 * Waits up to timeout_ms until n outbox events are PUBLISHED (the OrderCreated a relay alone
 * publishes); otherwise TESTPIPELINE_FAIL.
 */
void testpipeline_wait_relayed(struct testpipeline *tp, int n, int timeout_ms);

/*
 * Waits up to timeout_ms until n orders are CONFIRMED; otherwise TESTPIPELINE_FAIL with
 * "<got> of <n> orders CONFIRMED <timeout> s <when>". Returns how long it waited, in ms.
 */
int64_t testpipeline_wait_confirmed(struct testpipeline *tp, int n, int timeout_ms,
                                    const char *when);

/*
 * Places n orders (testpipeline_place_orders, keys "outage-<i>") through `txo up` on port while
 * its broker is down: each must get its 201, and its OrderCreated must wait PENDING in the
 * outbox within 20 s, tried (attempts >= 1, a last_error) and never published, its order
 * CREATED and no event FAILED; otherwise the test fails.
 */
void testpipeline_place_orders_broker_down(struct testpipeline *tp, unsigned port, unsigned n,
                                           bool books);

/*
 * After a worker died at crash point worker.after_consume: it committed the inbox rows and the
 * sagas of its first read (as many of each, at least one) and acknowledged none of them, so the
 * broker counts at least as many unacked. TESTPIPELINE_FAIL otherwise. Returns the inbox rows.
 */
int64_t testpipeline_check_died_unacked(struct testpipeline *tp, int64_t unacked);

/*
 * The metrics dups (txo_inbox_duplicates_total) and consumed (txo_inbox_consumed_total) of the
 * worker restarted after that: each of the consumed_before OrderCreated delivered again was
 * dropped as a duplicate, and only the rest of the n_orders consumed. TESTPIPELINE_FAIL
 * otherwise.
 */
void testpipeline_check_redelivered(struct testpipeline *tp, double dups, double consumed,
                                    int64_t consumed_before, int n_orders);

/*
 * Waits up to timeout_ms until unacked(arg), the broker's count of messages delivered and not
 * acknowledged (a consumer group's pending entries, a durable's ack-pending), is 0;
 * TESTPIPELINE_FAIL otherwise.
 */
void testpipeline_wait_acked(struct testpipeline *tp, int64_t (*unacked)(void *arg), void *arg,
                             int timeout_ms);

/*
 * The worker dies between its commit and its acknowledgement, the scenario every consuming
 * broker is put through: n_orders placed through `txo serve` (books as testpipeline_place_orders
 * says), a relay (relay_args) publishing them, a worker (worker_args) SIGKILLed at crash point
 * worker.after_consume, what it left checked (testpipeline_check_died_unacked with unacked(arg)),
 * then a second worker until every order is terminal, every event published and nothing
 * unacknowledged (testpipeline_wait_acked, 20 s), and what the second worker counted checked
 * (testpipeline_check_redelivered). The relay and the second worker still run: the caller
 * reads what else it wants from the worker's metrics on *mport, then stops both
 * (testpipeline_stop_clean). Processes are tagged tag_relay, tag_worker_crash and tag_worker.
 */
struct testpipeline_ack_crash {
    const char *tag;
    int n_orders;
    bool books;
    const char *const *relay_args;  /* NULL or NULL-terminated */
    const char *const *worker_args; /* NULL or NULL-terminated */
    int64_t (*unacked)(void *arg);
    void *arg;
    /* Set by testpipeline_ack_crash(): */
    struct testproc *relay;
    struct testproc *worker;
    unsigned mport;
};

void testpipeline_ack_crash(struct testpipeline *tp, struct testpipeline_ack_crash *ac);

/* Initial units of one SKU in inventory. */
struct testpipeline_stock {
    const char *sku;
    int32_t units;
};

/* Sets the initial stock of n SKUs (orders_set_inventory). */
void testpipeline_set_initial_stock(struct testpipeline *tp, const struct testpipeline_stock *stock,
                                    size_t n);

/*
 * Every invariant of the order pipeline over all orders in the database, by SQL: orders
 * terminal, one saga per order in the matching final state with its steps completed or
 * compensated, at most one payment and shipment per order and in the matching state, the
 * outbox events of each outcome exactly once, one inbox row per OrderCreated, nothing FAILED
 * or dead-lettered, and, per stocked SKU (stock, n_stock), stock conservation as
 * test_pipeline_crash.c states it: available + reserved = initial units, and reserved = units
 * in CONFIRMED orders = qty of the RESERVED reservations. TESTPIPELINE_FAIL on the first rule
 * broken, naming it.
 */
void testpipeline_check_invariants(struct testpipeline *tp, const struct testpipeline_stock *stock,
                                   size_t n_stock);

enum testpipeline_check_flags {
    /*
     * Remote calls ran (--payment-url/--shipment-url) and some may have happened without their
     * step's local part: a CANCELLED order's PaymentRefunded / ShipmentCancelled may then have
     * no PaymentCharged / ShipmentCreated before it. Each action event still needs its undo
     * event (events have fixed keys, so none is there twice).
     */
    TESTPIPELINE_CHECK_UNDO_MAYBE = 1 << 0,
};

/* testpipeline_check_invariants() with the rules flags (enum testpipeline_check_flags) relax. */
void testpipeline_check_invariants_flags(struct testpipeline *tp,
                                         const struct testpipeline_stock *stock, size_t n_stock,
                                         unsigned flags);

#endif
