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
#include "orders.h"
#include "settings.h"

static int run(int argc, char **argv);

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
        "Prints one line per violation, then a summary. Exit status: 0 all held, 1 a violation\n"
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
        "outbox_trimmed, never as missing or extra. Prints one logfmt line per finding (at most\n"
        "--max-listed of each kind), then a summary line of fixed keys (audit=outbox result=...\n"
        "missing= extra= pending= ... sequence_gap=). Reads only: SELECT on outbox_events.",
    .run = run,
};

struct audit_cmd_opts {
    struct common_opts common;
    unsigned window_s;
    unsigned settle_s;
    unsigned max_orders;
    struct audit_outbox_settings outbox;
};

static struct audit_cmd_opts opts;

static void add_settings(struct settings_table *t)
{
    const struct setting own[] = {
        {.name = "window",
         .env = "TXO_AUDIT_WINDOW",
         .type = SETTING_UINT,
         .def = "86400",
         .help = "check the orders created in the last this many seconds",
         .min = 1,
         .max = 315360000,
         .target = &opts.window_s},
        {.name = "settle",
         .env = "TXO_AUDIT_SETTLE",
         .type = SETTING_UINT,
         .def = "60",
         .help = "seconds a saga may still be running before its order is held to its end state",
         .min = 1,
         .max = 86400,
         .target = &opts.settle_s},
        {.name = "max-orders",
         .env = "TXO_AUDIT_MAX_ORDERS",
         .type = SETTING_UINT,
         .def = "10000",
         .help = "check at most this many orders, newest first",
         .min = 1,
         .max = 10000000,
         .target = &opts.max_orders},
    };
    settings_add_common(t, &opts.common);
    settings_add(t, own, TXO_ARRAY_LEN(own));
    audit_outbox_add_settings(t, &opts.outbox);
}

static void print_violation(void *arg, const char *check, int64_t order_id, const char *detail)
{
    (void)arg;
    if (order_id > 0)
        printf("VIOLATION %-20s order %-8" PRId64 " %s\n", check, order_id, detail);
    else
        printf("VIOLATION %-20s %s\n", check, detail);
}

static int run(int argc, char **argv)
{
    txo_db_opts_init(&opts.common.db);
    struct settings_table t = {.n = 0};
    add_settings(&t);
    enum settings_result r = settings_parse(&cmd_audit, t.items, t.n, argc, argv, NULL);
    if (r != SETTINGS_OK)
        return r == SETTINGS_EXIT_OK ? 0 : 2;
    if (!common_apply(&opts.common))
        return 2;
    if (opts.outbox.outbox)
        return audit_outbox_run(&opts.outbox, &opts.common);
    struct txo_db *db = common_connect(&opts.common);
    if (db == NULL)
        return 1;
    struct orders_audit_opts ao;
    orders_audit_opts_init(&ao);
    ao.window_s = opts.window_s;
    ao.settle_s = opts.settle_s;
    ao.max_orders = opts.max_orders;
    ao.report = print_violation;
    struct orders_audit_report rep;
    struct txo_error err;
    txo_error_init(&err);
    int rc = orders_audit(db, &ao, &rep, &err);
    txo_db_close(db);
    if (rc != 0) {
        cmd_report("audit", "reading the database", &err);
        return 1;
    }
    printf("audit: %" PRIu64 " order(s) checked, %" PRIu64 " violation(s)\n", rep.orders,
           rep.violations);
    return rep.violations == 0 ? 0 : 1;
}
