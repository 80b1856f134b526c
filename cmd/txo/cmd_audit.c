/*
 * `txo audit`: checks the order service's invariants on a live database and prints each
 * violation with the rows involved (orders.h: orders_audit). `txo audit --outbox` checks the
 * outbox against the broker instead, on any database with the outbox tables
 * (audit_outbox.h). Exit status 0 when everything holds, 1 when anything does not (or the
 * database cannot be read), 2 for bad flags.
 *
 * One settings table for both, as every command has one: the order audit's settings, then the
 * outbox audit's (named "--outbox: ..." in their help); each audit ignores the other's.
 */
#include <inttypes.h>
#include <stdio.h>

#include "audit_outbox.h"
#include "listing.h"
#include "orders.h"
#include "settings.h"

static int run(void);
static void add_settings(struct settings_table *t);

const struct command cmd_audit = {
    .name = "audit",
    .summary = "check the order service's invariants, or (--outbox) the broker against the "
               "outbox; exit 1 on a finding",
    .usage = "txo audit [options] | txo audit --outbox --publisher nats|kafka|redis [options]",
    .description =
        "Reads (consistent reads, no locks: safe beside the daemons) the orders created in the\n"
        "last --window seconds and checks: every order has its OrderCreated event; once older\n"
        "than --settle seconds, a CREATED order has a saga, a CONFIRMED one has a COMPLETED\n"
        "saga, exactly one CHARGED payment and one CREATED shipment and its ShipmentCreated\n"
        "event, and a CANCELLED one whose saga ended has no charge or shipment left and an\n"
        "OrderCancelled event; per SKU, reserved equals what the RESERVED reservations hold\n"
        "and no stock is negative; no saga has gone --settle seconds without a live owner, and\n"
        "none was given up by the engine (COMPENSATION_FAILED with no retry scheduled).\n"
        "Prints a table of the violations (check, order, detail), then a summary line; --json\n"
        "prints one object instead. Exit status: 0 all held, 1 a violation\n"
        "(or a database error), 2 bad options. Keep --window below the outbox retention:\n"
        "PUBLISHED events older than it are purged.\n"
        "\n"
        "With --outbox, for any database with the outbox tables (a relay-only one too): over a\n"
        "window of created_at (--since, --until) or of ids (--from-id, --to-id), every PUBLISHED\n"
        "event is at the broker (matched by its idempotency key) and every message the broker\n"
        "stored in the window has an outbox row; every PUBLISHED event was published after the\n"
        "event it follows in its aggregate (prev_sequence; else a sequence_gap); and no event\n"
        "anywhere waits to be published longer than --pending-older-than. The broker's history is "
        "read without consuming it,\n"
        "with the relay's own --nats-*, --kafka-* or --redis-* settings: a JetStream stream\n"
        "through an ephemeral consumer that acks nothing, Kafka partitions from offsets without a\n"
        "consumer group, Redis streams with XRANGE. RabbitMQ cannot be audited (reading a\n"
        "queue consumes it), nor webhooks or gRPC (the receiver keeps no history to read back).\n"
        "The window must lie inside both retentions: an event the broker may have dropped is\n"
        "reported as broker_trimmed, a message whose row the outbox may have deleted as\n"
        "outbox_trimmed, never as missing or extra. Prints a table of the findings (at most\n"
        "--max-listed of each kind), then a logfmt summary line of fixed keys (audit=outbox\n"
        "result=... missing= extra= pending= ... sequence_gap=); --json prints one object of\n"
        "the same instead. Reads only: SELECT on outbox_events.",
    .add_settings = add_settings,
    .run = run,
    .examples = "# The orders of the last hour, as a table, then as JSON:\n"
                "txo audit --window 3600\n"
                "txo audit --window 3600 --json\n"
                "# The outbox of the last day against NATS JetStream:\n"
                "txo audit --outbox --publisher nats --since 24h\n",
    .exit_status =
        "0 when every check held, 1 on a violation or finding (or when the database or "
        "broker could not be read), 2 on a bad option, found before anything is connected to.",
};

struct audit_cmd_opts {
    struct common_opts common;
    struct orders_audit_opts orders;
    bool json;
    struct audit_outbox_settings outbox;
};

static struct audit_cmd_opts opts;

static void add_settings(struct settings_table *t)
{
    orders_audit_opts_init(&opts.orders);
    const struct setting own[] = {
        {.name = "window",
         .env = "TXO_AUDIT_WINDOW",
         .type = SETTING_UINT,
         .def = "86400",
         .help = "check the orders created in the last this many seconds",
         .min = 1,
         .max = 315360000,
         .target = &opts.orders.window_s},
        {.name = "settle",
         .env = "TXO_AUDIT_SETTLE",
         .type = SETTING_UINT,
         .def = "60",
         .help = "seconds a saga may still be running before its order is held to its end state",
         .min = 1,
         .max = 86400,
         .target = &opts.orders.settle_s},
        {.name = "max-orders",
         .env = "TXO_AUDIT_MAX_ORDERS",
         .type = SETTING_UINT,
         .def = "10000",
         .help = "check at most this many orders, newest first",
         .min = 1,
         .max = 10000000,
         .target = &opts.orders.max_orders},
    };
    settings_add_common(t, &opts.common);
    settings_add(t, own, TXO_ARRAY_LEN(own));
    listing_add_json_setting(t, &opts.json,
                             "print one JSON object (orders_checked, violations; with --outbox "
                             "the summary's counts, findings and notes) instead of the tables");
    audit_outbox_add_settings(t, &opts.outbox);
}

/* Appends a violation {"check","order_id","detail"} to the array arg (order_id null when the
 * violation is not an order's). An append that fails (out of memory) leaves the array a row
 * short, which run() notices against the report's count. */
static void add_violation(void *arg, const char *check, int64_t order_id, const char *detail)
{
    json_t *violations = arg;
    json_array_append_new(violations,
                          json_pack("{s:o,s:o,s:o}", "check", listing_str(check), "order_id",
                                    order_id > 0 ? json_integer(order_id) : json_null(), "detail",
                                    listing_str(detail)));
}

/* The audit's document as a table of the violations and a summary line. */
static void print_audit_tables(const json_t *doc, void *arg)
{
    static const struct listing_column cols[] = {
        {.key = "check", .header = "CHECK"},
        {.key = "order_id", .header = "ORDER_ID"},
        {.key = "detail", .header = "DETAIL", .max_width = 100},
    };
    (void)arg;
    const json_t *violations = json_object_get(doc, "violations");
    if (json_array_size(violations) > 0)
        listing_table(stdout, cols, TXO_ARRAY_LEN(cols), violations);
    printf("audit: %" PRIu64 " order(s) checked, %zu violation(s)\n",
           (uint64_t)json_integer_value(json_object_get(doc, "orders_checked")),
           json_array_size(violations));
}

/*
 * Prints the audit's document: with --json {"orders_checked":N,"violations":[{"check",
 * "order_id","detail"}]}, else its tables. 0, or -1 when the document could not be built or
 * written.
 */
static int print_audit(uint64_t orders, json_t *violations)
{
    json_t *doc =
        json_pack("{s:I,s:O}", "orders_checked", (json_int_t)orders, "violations", violations);
    return listing_print("audit", doc, opts.json, print_audit_tables, NULL);
}

static int run(void)
{
    if (opts.outbox.outbox)
        return audit_outbox_run(&opts.outbox, &opts.common, opts.json);
    struct txo_db *db = common_connect(&opts.common);
    if (db == NULL)
        return 1;
    struct orders_audit_opts ao = opts.orders;
    json_t *violations = json_array();
    if (violations == NULL) {
        txo_db_close(db);
        fputs("txo audit: out of memory\n", stderr);
        return 1;
    }
    ao.report = add_violation;
    ao.report_arg = violations;
    struct orders_audit_report rep;
    struct txo_error err;
    txo_error_init(&err);
    int rc = orders_audit(db, &ao, &rep, &err);
    txo_db_close(db);
    int status = 1;
    if (rc != 0) {
        cmd_report("audit", "reading the database", &err);
    } else if (json_array_size(violations) != rep.violations) {
        fputs("txo audit: out of memory listing the violations\n", stderr);
    } else if (print_audit(rep.orders, violations) == 0) {
        status = rep.violations == 0 ? 0 : 1;
    }
    json_decref(violations);
    return status;
}
