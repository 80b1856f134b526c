/*
 * `txo demo`: a guided tour of the order service and its saga.
 *
 * Against the configured database it (1) applies the migrations (unless --migrate=false),
 * (2) resets the stock of its own SKUs (demo-*; nothing else in the database is touched),
 * (3) runs one order per scenario through the CreateOrderSaga with explicit failure
 * injection: success, payment service down twice (retried), not enough stock, card
 * declined, carrier rejects the shipment (refund then release), the refund fails too
 * (COMPENSATION_FAILED, then retried to COMPENSATED), (4) drains the outbox through the
 * relay with the log publisher, printing each published envelope, (5) prints the rows of the
 * orders it created in this run, and (6) checks each scenario's outcome against what the
 * order service promises. It exits 0 only when every check held.
 *
 * The relay drains every due event of the database, not only the demo's: that is what a
 * relay does. The tables and checks only look at the orders of this run.
 *
 * Its report queries of the order service's tables are listed below, in one place, like every
 * module's SQL; sagas are read through the saga engine's own API (txo_saga_load).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_errors.h"
#include "listing.h"
#include "order_saga.h"
#include "orders.h"
#include "settings.h"

/* ---- the demo's report queries (all non-locking reads, READ COMMITTED) ---- */

/* orders PRIMARY. */
#define DEMO_SQL_ORDER                                                                             \
    "SELECT id, customer_id, status, total_cents, version FROM orders WHERE id = ?"
/* inventory PRIMARY. */
#define DEMO_SQL_INVENTORY                                                                         \
    "SELECT sku, available, reserved, available + reserved FROM inventory WHERE sku = ?"
/* payments uq_payment_order. */
#define DEMO_SQL_PAYMENT                                                                           \
    "SELECT id, order_id, amount_cents, status FROM payments WHERE order_id = ?"
/* shipments uq_shipment_order. */
#define DEMO_SQL_SHIPMENT "SELECT id, order_id, status FROM shipments WHERE order_id = ?"
/* outbox_events: full scan filtered by aggregate (no index on aggregate_id: a demo-sized
 * table). Event types of one order in id (= append) order. */
#define DEMO_SQL_EVENTS                                                                            \
    "SELECT COALESCE(GROUP_CONCAT(event_type ORDER BY id SEPARATOR ' '), '') "                     \
    "FROM outbox_events WHERE aggregate_type = 'order' AND aggregate_id = ?"
/* outbox_events, same scan: counts per event type and status of one order. */
#define DEMO_SQL_OUTBOX_COUNTS                                                                     \
    "SELECT event_type, status, COUNT(*), MIN(id) FROM outbox_events "                             \
    "WHERE aggregate_type = 'order' AND aggregate_id = ? GROUP BY event_type, status "             \
    "ORDER BY MIN(id)"
/* payments / shipments / orders point reads for the checks. */
#define DEMO_SQL_ORDER_STATUS    "SELECT status FROM orders WHERE id = ?"
#define DEMO_SQL_PAYMENT_STATUS  "SELECT status FROM payments WHERE order_id = ?"
#define DEMO_SQL_SHIPMENT_STATUS "SELECT status FROM shipments WHERE order_id = ?"
#define DEMO_SQL_STOCK           "SELECT available, reserved FROM inventory WHERE sku = ?"
enum demo_stock_col { DEMO_STOCK_AVAILABLE, DEMO_STOCK_RESERVED };

static int run(void);
static void add_settings(struct settings_table *t);

const struct command cmd_demo = {
    .name = "demo",
    .summary = "run the order saga's failure scenarios, show the rows, check them",
    .usage = "txo demo [options]",
    .description =
        "Creates one order per scenario in the configured database and drives its\n"
        "CreateOrderSaga (ReserveStock -> ChargePayment -> CreateShipment) with explicit\n"
        "failure injection:\n"
        "  success       customer 123, iphone-15 x1 at 100000 cents\n"
        "  pay-retried   the payment service is unavailable twice: the step is retried,\n"
        "                then completes\n"
        "  no-stock      not enough stock: nothing to compensate, order CANCELLED, saga FAILED\n"
        "  declined      card declined: stock released, order CANCELLED, saga COMPENSATED\n"
        "  ship-refused  carrier rejects the shipment: refund, then release; saga COMPENSATED\n"
        "  refund-fails  the carrier rejects the shipment and the refund fails too:\n"
        "                COMPENSATION_FAILED, then a retry COMPENSATED\n"
        "Then it publishes the outbox through the relay with the log publisher (one JSON\n"
        "envelope per line), prints the rows of this run's orders, sagas, steps, stock,\n"
        "payments, shipments and events, and checks every scenario. Exit status 0 means\n"
        "every check held. Only the demo's own SKUs (demo-*) get their stock reset; no other\n"
        "row of the database is changed, though the relay publishes every due event.",
    .add_settings = add_settings,
    .run = run,
    .examples = "# Run every scenario against the private database of `make db`:\n"
                "eval \"$(scripts/db.sh env)\" && txo demo\n",
    .exit_status = "0 when every scenario ended as expected, 1 when a check failed or the database "
                   "could not be used, 2 on a bad option.",
};

struct demo_opts {
    struct common_opts common;
    bool migrate;
    bool publish;
    const char *relay_claim;
};

static struct demo_opts opts;

/* The demo's catalogue: SKU, its stock at the start, unit price. */
struct demo_sku {
    const char *sku;
    int32_t stock;
    int64_t price_cents;
};
static const struct demo_sku catalogue[] = {
    {"demo-iphone-15", 10, 100000},
    {"demo-airpods-pro", 20, 24900},
    {"demo-macbook-air", 2, 129900},
    {"demo-usb-c-cable", 100, 1900},
};

/* What must hold after a scenario. NULL payment/shipment: no row. */
struct expect {
    const char *order;
    const char *saga;
    const char *payment;
    const char *shipment;
    const char *events;       /* event types in append order; NULL: not checked */
    unsigned charge_attempts; /* 0: not checked */
};

struct scenario {
    const char *id;
    const char *title;
    int64_t customer_id;
    struct order_item items[3];
    size_t n_items;
    struct order_faults faults;
    bool retry;          /* after the faulty run, txo_saga_retry with no faults */
    struct expect first; /* with retry: after the faulty run */
    struct expect want;
    /* results */
    int64_t order_id;
    char saga_id[TXO_SAGA_ID_LEN];
    char problems[1024];
};

#define EV_OK "OrderCreated StockReserved PaymentCharged ShipmentCreated"

static struct scenario scenarios[] = {
    {.id = "success",
     .title = "success",
     .customer_id = 123,
     .items = {{"demo-iphone-15", 1, 100000}},
     .n_items = 1,
     .want = {"CONFIRMED", "COMPLETED", "CHARGED", "CREATED", EV_OK, 1}},
    {.id = "pay-retried",
     .title = "payment service down twice, retried",
     .customer_id = 124,
     .items = {{"demo-airpods-pro", 2, 24900}, {"demo-usb-c-cable", 3, 1900}},
     .n_items = 2,
     .faults = {.transient_charge_failures = 2},
     .want = {"CONFIRMED", "COMPLETED", "CHARGED", "CREATED", EV_OK, 3}},
    {.id = "no-stock",
     .title = "not enough stock",
     .customer_id = 125,
     .items = {{"demo-macbook-air", 5, 129900}},
     .n_items = 1,
     .want = {"CANCELLED", "FAILED", NULL, NULL, "OrderCreated OrderCancelled", 0}},
    {.id = "declined",
     .title = "card declined",
     .customer_id = 126,
     .items = {{"demo-airpods-pro", 1, 24900}},
     .n_items = 1,
     .faults = {.decline_payment = true},
     .want = {"CANCELLED", "COMPENSATED", NULL, NULL,
              "OrderCreated StockReserved StockReleased OrderCancelled", 0}},
    {.id = "ship-refused",
     .title = "carrier rejects the shipment",
     .customer_id = 127,
     .items = {{"demo-iphone-15", 1, 100000}, {"demo-usb-c-cable", 1, 1900}},
     .n_items = 2,
     .faults = {.fail_shipment = true},
     .want = {"CANCELLED", "COMPENSATED", "REFUNDED", NULL,
              "OrderCreated StockReserved PaymentCharged PaymentRefunded StockReleased "
              "OrderCancelled",
              0}},
    {.id = "refund-fails",
     .title = "shipment and refund fail, then retried",
     .customer_id = 128,
     .items = {{"demo-iphone-15", 2, 100000}},
     .n_items = 1,
     .faults = {.fail_shipment = true, .fail_refund = true},
     .retry = true,
     .first = {"CREATED", "COMPENSATION_FAILED", "CHARGED", NULL,
               "OrderCreated StockReserved PaymentCharged", 0},
     .want = {"CANCELLED", "COMPENSATED", "REFUNDED", NULL,
              "OrderCreated StockReserved PaymentCharged PaymentRefunded StockReleased "
              "OrderCancelled",
              0}},
};

/* ---- small query helpers ---- */

/* The first column of the first row, copied; NULL for no row or SQL NULL (err untouched). */
static int query_str(struct txo_db *db, const char *sql, const struct txo_param *p, size_t np,
                     char **out, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, sql, p, np, &rows, err);

    if (rc < 0)
        return rc;
    const char *s = txo_rows_count(rows) > 0 ? txo_rows_str(rows, 0, 0, NULL) : NULL;
    *out = s != NULL ? txo_strdup(s) : NULL;
    txo_rows_free(rows);
    if (s != NULL && *out == NULL)
        return txo_error_set(err, TXO_ENOMEM, "out of memory");
    return 0;
}

/* Appends "; <text>" to the scenario's problem list. */
static void problem(struct scenario *sc, const char *fmt, ...) TXO_PRINTF(2, 3);
static void problem(struct scenario *sc, const char *fmt, ...)
{
    size_t len = strlen(sc->problems);
    va_list ap;

    if (len > 0 && len + 2 < sizeof(sc->problems)) {
        memcpy(sc->problems + len, "; ", 3);
        len += 2;
    }
    va_start(ap, fmt);
    vsnprintf(sc->problems + len, sizeof(sc->problems) - len, fmt, ap);
    va_end(ap);
}

/* Compares one column read by sql with the expected value (NULL: no row). */
static int expect_value(struct txo_db *db, struct scenario *sc, const char *what, const char *sql,
                        struct txo_param p, const char *want, struct txo_error *err)
{
    char *got = NULL;
    int rc = query_str(db, sql, &p, 1, &got, err);

    if (rc < 0)
        return rc;
    bool same =
        (got == NULL && want == NULL) || (got != NULL && want != NULL && strcmp(got, want) == 0);
    if (!same)
        problem(sc, "%s is %s, expected %s", what, got != NULL ? got : "none",
                want != NULL ? want : "none");
    txo_free(got);
    return 0;
}

/* The saga's status and ChargePayment's attempts, through the saga engine's API. */
static int check_saga(struct txo_db *db, struct scenario *sc, const struct expect *e,
                      const char *when, struct txo_error *err)
{
    struct txo_saga_info info;
    int rc = txo_saga_load(db, sc->saga_id, &info, err);
    if (rc < 0)
        return rc;
    const char *status = txo_saga_status_name(info.status);
    if (strcmp(status, e->saga) != 0)
        problem(sc, "%ssaga is %s, expected %s", when, status, e->saga);
    for (size_t i = 0; e->charge_attempts > 0 && i < info.n_steps; i++)
        if (strcmp(info.steps[i].name, "ChargePayment") == 0 &&
            info.steps[i].attempts != e->charge_attempts)
            problem(sc, "%sChargePayment attempts are %u, expected %u", when,
                    info.steps[i].attempts, e->charge_attempts);
    txo_saga_info_release(&info);
    return 0;
}

static int check(struct txo_db *db, struct scenario *sc, const struct expect *e, const char *when,
                 struct txo_error *err)
{
    char what[64];
    int rc;

    snprintf(what, sizeof(what), "%sorder", when);
    rc = expect_value(db, sc, what, DEMO_SQL_ORDER_STATUS, txo_p_i64(sc->order_id), e->order, err);
    if (rc == 0)
        rc = check_saga(db, sc, e, when, err);
    snprintf(what, sizeof(what), "%spayment", when);
    if (rc == 0)
        rc = expect_value(db, sc, what, DEMO_SQL_PAYMENT_STATUS, txo_p_i64(sc->order_id),
                          e->payment, err);
    snprintf(what, sizeof(what), "%sshipment", when);
    if (rc == 0)
        rc = expect_value(db, sc, what, DEMO_SQL_SHIPMENT_STATUS, txo_p_i64(sc->order_id),
                          e->shipment, err);
    snprintf(what, sizeof(what), "%sevents", when);
    if (rc == 0 && e->events != NULL)
        rc = expect_value(db, sc, what, DEMO_SQL_EVENTS, txo_p_i64(sc->order_id), e->events, err);
    return rc;
}

/* ---- running the scenarios ---- */

static int run_scenario(struct txo_db *db, struct scenario *sc, struct txo_error *err)
{
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    bool created = false;
    int rc;

    rc = orders_create(db, sc->customer_id, sc->items, sc->n_items, &sc->order_id, err);
    if (rc < 0)
        return txo_error_wrap(err, "scenario %s: create order", sc->id);
    rc = orders_start_saga(db, sc->order_id, sc->saga_id, &created, err);
    if (rc < 0)
        return txo_error_wrap(err, "scenario %s: start saga of order %" PRId64, sc->id,
                              sc->order_id);
    rc = orders_run_saga(db, sc->saga_id, &sc->faults, NULL, &final, err);
    if (rc < 0)
        return txo_error_wrap(err, "scenario %s: run saga %s", sc->id, sc->saga_id);
    printf("  %-12s  %-40s order %-6" PRId64 " saga %s -> %s\n", sc->id, sc->title, sc->order_id,
           sc->saga_id, txo_saga_status_name(final));
    if (!sc->retry)
        return check(db, sc, &sc->want, "", err);

    rc = check(db, sc, &sc->first, "before retry: ", err);
    if (rc < 0)
        return rc;
    rc = orders_retry_saga(db, sc->saga_id, NULL, NULL, &final, err);
    if (rc < 0)
        return txo_error_wrap(err, "scenario %s: retry saga %s", sc->id, sc->saga_id);
    printf("  %-12s  %-40s order %-6" PRId64 " saga %s -> %s (retried, faults cleared)\n", sc->id,
           "", sc->order_id, sc->saga_id, txo_saga_status_name(final));
    return check(db, sc, &sc->want, "", err);
}

/* ---- the report's tables (printed by listing.c, as every listing of txo) ---- */

#define TABLE_MAX_COLS 8
#define CELL_MAX       64 /* longer cells are cut with an ellipsis */

struct table {
    size_t ncols;
    struct listing_column cols[TABLE_MAX_COLS]; /* each column's key is its header */
    json_t *rows;                               /* NULL when out of memory */
};

static void table_init(struct table *t, size_t ncols, const char *const *head)
{
    memset(t, 0, sizeof(*t));
    t->ncols = ncols;
    for (size_t c = 0; c < ncols; c++)
        t->cols[c] =
            (struct listing_column){.key = head[c], .header = head[c], .max_width = CELL_MAX};
    t->rows = json_array();
}

static void table_release(struct table *t)
{
    json_decref(t->rows);
    t->rows = NULL;
}

static bool is_number(const char *s)
{
    if (*s == '-')
        s++;
    if (*s == '\0' || strlen(s) > 18)
        return false;
    for (; *s != '\0'; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* Adds one row: vals[0..ncols) (NULL shows as "-"; whole numbers are right-aligned). */
static int table_add(struct table *t, const char *const *vals)
{
    json_t *row = json_object();
    for (size_t c = 0; row != NULL && c < t->ncols; c++) {
        const char *v = vals[c];
        json_t *cell = v == NULL      ? json_null()
                       : is_number(v) ? json_integer(strtoll(v, NULL, 10))
                                      : listing_str(v);
        if (json_object_set_new(row, t->cols[c].key, cell) != 0) {
            json_decref(row);
            row = NULL;
        }
    }
    if (t->rows == NULL || json_array_append_new(t->rows, row) != 0)
        return TXO_ENOMEM;
    return 0;
}

/* Adds every row of a query, each prefixed with the `nprefix` values of prefix. */
static int table_add_query(struct table *t, struct txo_db *db, const char *sql, struct txo_param p,
                           const char *const *prefix, size_t nprefix, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, sql, &p, 1, &rows, err);

    if (rc < 0)
        return rc;
    for (size_t r = 0; r < txo_rows_count(rows) && rc == 0; r++) {
        const char *vals[TABLE_MAX_COLS];
        for (size_t c = 0; c < nprefix; c++)
            vals[c] = prefix[c];
        for (size_t c = nprefix; c < t->ncols; c++)
            vals[c] = txo_rows_str(rows, r, c - nprefix, NULL);
        rc = table_add(t, vals);
        if (rc < 0)
            txo_error_set(err, rc, "out of memory");
    }
    txo_rows_free(rows);
    return rc;
}

static void table_print(const struct table *t, const char *title)
{
    printf("\n%s\n", title);
    if (json_array_size(t->rows) == 0) {
        printf("(no rows)\n");
        return;
    }
    listing_table(stdout, t->cols, t->ncols, t->rows);
}

/* The sagas and their steps of this run, read with txo_saga_load(). */
static int print_sagas(struct txo_db *db, struct txo_error *err)
{
    const char *shead[] = {"scenario", "saga_id", "status"};
    const char *thead[] = {"scenario", "order_id", "#",      "step",
                           "status",   "attempts", "remote", "error"};
    struct table sagas, steps;
    table_init(&sagas, TXO_ARRAY_LEN(shead), shead);
    table_init(&steps, TXO_ARRAY_LEN(thead), thead);
    int rc = 0;
    for (size_t i = 0; i < TXO_ARRAY_LEN(scenarios) && rc == 0; i++) {
        struct txo_saga_info info;
        rc = txo_saga_load(db, scenarios[i].saga_id, &info, err);
        if (rc < 0)
            break;
        const char *srow[] = {scenarios[i].id, info.id, txo_saga_status_name(info.status)};
        rc = table_add(&sagas, srow);
        char order[24];
        snprintf(order, sizeof(order), "%" PRId64, scenarios[i].order_id);
        for (size_t k = 0; k < info.n_steps && rc == 0; k++) {
            const struct txo_saga_step_info *st = &info.steps[k];
            char num[16], attempts[16];
            snprintf(num, sizeof(num), "%u", st->step_order);
            snprintf(attempts, sizeof(attempts), "%u", st->attempts);
            const char *row[] = {scenarios[i].id,
                                 order,
                                 num,
                                 st->name,
                                 txo_step_status_name(st->status),
                                 attempts,
                                 txo_remote_state_name(st->remote),
                                 st->error};
            rc = table_add(&steps, row);
        }
        txo_saga_info_release(&info);
        if (rc == TXO_ENOMEM)
            txo_error_set(err, rc, "out of memory");
    }
    if (rc == 0) {
        table_print(&sagas, "Their sagas (type " ORDER_SAGA_TYPE ")");
        table_print(&steps, "Their steps");
    }
    table_release(&sagas);
    table_release(&steps);
    return rc;
}

/*
 * Prints the table titled title whose columns are "scenario" and then what sql selects for the
 * order of each scenario (sql takes its id).
 */
static int print_per_scenario(struct txo_db *db, const char *title, const char *const *head,
                              size_t ncols, const char *sql, struct txo_error *err)
{
    struct table t;
    table_init(&t, ncols, head);
    int rc = 0;
    for (size_t i = 0; i < TXO_ARRAY_LEN(scenarios) && rc == 0; i++) {
        const char *pre[] = {scenarios[i].id};
        rc = table_add_query(&t, db, sql, txo_p_i64(scenarios[i].order_id), pre, 1, err);
    }
    if (rc == 0)
        table_print(&t, title);
    table_release(&t);
    return rc;
}

/* Prints what the run left in every table it touched, scenario by scenario. */
static int print_report(struct txo_db *db, struct txo_error *err)
{
    static const char *const orders[] = {"scenario", "order_id",    "customer",
                                         "status",   "total_cents", "version"};
    static const char *const inventory[] = {"sku", "available", "reserved", "available+reserved"};
    static const char *const payments[] = {"scenario", "payment_id", "order_id", "amount_cents",
                                           "status"};
    static const char *const shipments[] = {"scenario", "shipment_id", "order_id", "status"};
    static const char *const outbox[] = {"scenario", "event_type", "status", "count", "first_id"};
    int rc = print_per_scenario(db, "Orders created by this run (orders)", orders,
                                TXO_ARRAY_LEN(orders), DEMO_SQL_ORDER, err);
    if (rc == 0)
        rc = print_sagas(db, err);
    if (rc == 0) {
        struct table t;
        table_init(&t, TXO_ARRAY_LEN(inventory), inventory);
        for (size_t i = 0; i < TXO_ARRAY_LEN(catalogue) && rc == 0; i++)
            rc = table_add_query(&t, db, DEMO_SQL_INVENTORY, txo_p_str(catalogue[i].sku), NULL, 0,
                                 err);
        if (rc == 0)
            table_print(&t, "Stock of the demo SKUs (inventory)");
        table_release(&t);
    }
    if (rc == 0)
        rc = print_per_scenario(db, "Payments (payments)", payments, TXO_ARRAY_LEN(payments),
                                DEMO_SQL_PAYMENT, err);
    if (rc == 0)
        rc = print_per_scenario(db, "Shipments (shipments)", shipments, TXO_ARRAY_LEN(shipments),
                                DEMO_SQL_SHIPMENT, err);
    if (rc == 0)
        rc = print_per_scenario(db, "Their outbox events by type and status (outbox_events)",
                                outbox, TXO_ARRAY_LEN(outbox), DEMO_SQL_OUTBOX_COUNTS, err);
    return rc;
}

/* available/reserved of every demo SKU must be what the completed orders explain. */
static int check_stock(struct txo_db *db, char *problems, size_t cap, struct txo_error *err)
{
    problems[0] = '\0';
    for (size_t k = 0; k < TXO_ARRAY_LEN(catalogue); k++) {
        int64_t reserved = 0;
        for (size_t i = 0; i < TXO_ARRAY_LEN(scenarios); i++) {
            if (strcmp(scenarios[i].want.saga, "COMPLETED") != 0)
                continue;
            for (size_t j = 0; j < scenarios[i].n_items; j++)
                if (strcmp(scenarios[i].items[j].sku, catalogue[k].sku) == 0)
                    reserved += scenarios[i].items[j].qty;
        }
        struct txo_rows *rows = NULL;
        struct txo_param p = txo_p_str(catalogue[k].sku);
        int rc = txo_db_query(db, DEMO_SQL_STOCK, &p, 1, &rows, err);
        if (rc < 0)
            return rc;
        int64_t avail = txo_rows_count(rows) > 0 ? txo_rows_i64(rows, 0, DEMO_STOCK_AVAILABLE) : -1;
        int64_t res = txo_rows_count(rows) > 0 ? txo_rows_i64(rows, 0, DEMO_STOCK_RESERVED) : -1;
        txo_rows_free(rows);
        if (avail != catalogue[k].stock - reserved || res != reserved) {
            size_t len = strlen(problems);
            snprintf(problems + len, cap - len,
                     "%s%s available=%" PRId64 " reserved=%" PRId64 ", expected %" PRId64
                     "/%" PRId64,
                     len > 0 ? "; " : "", catalogue[k].sku, avail, res,
                     catalogue[k].stock - reserved, reserved);
        }
    }
    return 0;
}

static void describe(const struct expect *e, char *buf, size_t cap)
{
    snprintf(buf, cap, "order %s, saga %s, %s%s, %s%s", e->order, e->saga,
             e->payment != NULL ? "payment " : "no payment", e->payment != NULL ? e->payment : "",
             e->shipment != NULL ? "shipment " : "no shipment",
             e->shipment != NULL ? e->shipment : "");
}

static int publish(struct txo_db *db, const struct demo_opts *o, struct txo_error *err)
{
    struct txo_publisher *pub = NULL;
    struct txo_relay *relay = NULL;
    struct txo_relay_opts ro;
    int rc;

    txo_relay_opts_init(&ro);
    ro.drain = true;
    ro.relay_id = "txo-demo";
    rc = txo_claim_strategy_parse(o->relay_claim, &ro.claim);
    if (rc < 0) {
        rc = txo_error_set(err, TXO_ECONFIG,
                           "relay-claim must be auto, skip-locked or update-limit, got \"%s\"",
                           o->relay_claim);
        goto out;
    }
    rc = txo_publisher_log_new(stdout, &pub, err);
    if (rc < 0)
        goto out;
    rc = txo_relay_new(db, pub, &ro, &relay, err);
    if (rc < 0)
        goto out;
    printf("\n== Publishing the outbox: relay (%s claim) -> log publisher, one envelope per line\n",
           txo_claim_strategy_name(txo_relay_claim_strategy(relay)));
    fflush(stdout);
    rc = txo_relay_run(relay, err);
    fflush(stdout);
    if (rc < 0)
        goto out;
    struct txo_relay_stats st;
    txo_relay_get_stats(relay, &st);
    printf("-- published %" PRIu64 " event(s) in %" PRIu64 " batch(es)\n", st.published,
           st.batches);
out:
    txo_relay_free(relay);
    txo_publisher_free(pub);
    return rc;
}

/* The settings of this command, in --help order. */
static void add_settings(struct settings_table *t)
{
    const struct setting own[] = {
        {.name = "migrate",
         .env = "TXO_DEMO_MIGRATE",
         .type = SETTING_BOOL,
         .def = "true",
         .help = "apply the schema migrations first (idempotent)",
         .target = &opts.migrate},
        {.name = "publish",
         .env = "TXO_DEMO_PUBLISH",
         .type = SETTING_BOOL,
         .def = "true",
         .help = "drain the outbox through the relay with the log publisher (prints envelopes)",
         .target = &opts.publish},
        {.name = "relay-claim",
         .env = "TXO_RELAY_CLAIM",
         .type = SETTING_STRING,
         .def = "auto",
         .help = "relay claim strategy: auto, skip-locked or update-limit",
         .target = &opts.relay_claim},
    };
    settings_add_common(t, &opts.common);
    settings_add(t, own, TXO_ARRAY_LEN(own));
}

static int run(void)
{
    enum txo_claim_strategy claim;
    if (txo_claim_strategy_parse(opts.relay_claim, &claim) < 0) {
        cli_error("txo demo: --relay-claim must be auto, skip-locked or update-limit, "
                  "got \"%s\"",
                  opts.relay_claim);
        return 2;
    }
    struct txo_db *db = common_connect(&opts.common);
    if (db == NULL)
        return 1;

    struct txo_error err;
    txo_error_init(&err);
    int status = 1;
    int rc = 0;
    printf("txo demo: the order saga on database %s\n", opts.common.db.database);
    if (opts.migrate) {
        unsigned applied = 0, total = 0;
        rc = orders_migrate(db, &applied, &total, &err);
        if (rc < 0) {
            cmd_report("demo", "migration failed", &err);
            goto out;
        }
        printf("schema: %u migration(s) applied now, %u in all\n", applied, total);
    }
    for (size_t i = 0; i < TXO_ARRAY_LEN(catalogue); i++) {
        rc = orders_set_inventory(db, catalogue[i].sku, catalogue[i].stock, &err);
        if (rc < 0) {
            cmd_report("demo", "setting the inventory failed", &err);
            goto out;
        }
    }
    printf("initial stock:");
    for (size_t i = 0; i < TXO_ARRAY_LEN(catalogue); i++)
        printf(" %s=%" PRId32, catalogue[i].sku, catalogue[i].stock);
    printf("\n\n== Running the scenarios (one order and one CreateOrderSaga each)\n");

    for (size_t i = 0; i < TXO_ARRAY_LEN(scenarios); i++) {
        scenarios[i].problems[0] = '\0';
        rc = run_scenario(db, &scenarios[i], &err);
        if (rc < 0) {
            cmd_report("demo", "scenario failed to run", &err);
            goto out;
        }
    }
    if (opts.publish) {
        rc = publish(db, &opts, &err);
        if (rc < 0) {
            cmd_report("demo", "relay failed", &err);
            goto out;
        }
    }
    rc = print_report(db, &err);
    if (rc < 0) {
        cmd_report("demo", "report query failed", &err);
        goto out;
    }

    printf("\n== Checks\n");
    bool all_ok = true;
    for (size_t i = 0; i < TXO_ARRAY_LEN(scenarios); i++) {
        struct scenario *sc = &scenarios[i];
        char want[256];
        describe(&sc->want, want, sizeof(want));
        bool ok = sc->problems[0] == '\0';
        all_ok = all_ok && ok;
        printf("  %-12s  %s: %s%s -- %s\n", sc->id, sc->title,
               sc->retry ? "COMPENSATION_FAILED, then " : "", want, ok ? "OK" : "FAILED");
        if (!ok)
            printf("                problems: %s\n", sc->problems);
    }
    char stock_problems[1024];
    rc = check_stock(db, stock_problems, sizeof(stock_problems), &err);
    if (rc < 0) {
        cmd_report("demo", "stock check failed", &err);
        goto out;
    }
    bool stock_ok = stock_problems[0] == '\0';
    all_ok = all_ok && stock_ok;
    printf("  %-12s  stock conserved: available + reserved unchanged, reserved = completed "
           "orders -- %s\n",
           "*", stock_ok ? "OK" : "FAILED");
    if (!stock_ok)
        printf("                problems: %s\n", stock_problems);
    printf("\n%s\n", all_ok ? "demo: every scenario held." : "demo: SOME CHECKS FAILED.");
    status = all_ok ? 0 : 1;
out:
    txo_db_close(db);
    return status;
}
