/*
 * `txo migrate`: applies the schema migrations compiled into txo to the configured database:
 * all of them, or with --only outbox just the tables `txo relay` needs.
 */
#include <stdio.h>
#include <string.h>

#include "cli_errors.h"
#include "orders.h"
#include "settings.h"

static int run(void);
static void add_settings(struct settings_table *t);

const struct command cmd_migrate = {
    .name = "migrate",
    .summary = "create or upgrade the database schema (idempotent)",
    .usage = "txo migrate [options]",
    .description =
        "Applies every schema migration of this txo build that the database has not recorded\n"
        "yet in txo_schema_migrations, in order, under a server-side lock so concurrent runs\n"
        "cannot interleave: first the library's own set (sql/migrations: outbox, dead\n"
        "letters, inbox, idempotency keys, sagas, command queue), then the order service's\n"
        "(app/order-service/migrations). --only outbox applies only what `txo relay` needs\n"
        "(outbox_events and dead_letter_events, for an application in another language);\n"
        "a later run without it adds the rest. Running it again is a no-op. A recorded\n"
        "migration whose statements changed since is refused (comments may be edited).\n\n"
        "--outbox-layout partitioned then gives outbox_events the partitioned layout, and\n"
        "--inbox-layout partitioned inbox_events, for a new install (on a table with rows it is\n"
        "the online copy of `txo partition enable`).",
    .add_settings = add_settings,
    .run = run,
    .examples = "# Create or upgrade the whole schema:\n"
                "txo migrate\n"
                "# Only the tables `txo relay` needs, for an application in another language:\n"
                "txo migrate --only outbox\n"
                "# A new install whose outbox is dropped by partitions, not deleted by rows:\n"
                "txo migrate --outbox-layout partitioned\n"
                "# Both the outbox and the inbox partitioned:\n"
                "txo migrate --outbox-layout partitioned --inbox-layout partitioned\n",
};

static struct {
    struct common_opts common;
    const char *only;
    const char *outbox_layout;
    const char *inbox_layout;
} opts;

static void add_settings(struct settings_table *t)
{
    const struct setting own[] = {
        {.name = "only",
         .env = "TXO_MIGRATE_ONLY",
         .type = SETTING_STRING,
         .help = "outbox: only the relay's tables (outbox_events, dead_letter_events); unset: all",
         .target = &opts.only},
        {.name = "outbox-layout",
         .env = "TXO_OUTBOX_LAYOUT",
         .type = SETTING_STRING,
         .help = "partitioned: partition outbox_events by id ranges after migrating (txo "
                 "partition); unset: leave its layout as it is",
         .target = &opts.outbox_layout},
        {.name = "inbox-layout",
         .env = "TXO_INBOX_LAYOUT",
         .type = SETTING_STRING,
         .help = "partitioned: partition inbox_events by days after migrating (txo partition); "
                 "unset: leave its layout as it is",
         .target = &opts.inbox_layout},
    };
    settings_add_common(t, &opts.common);
    settings_add(t, own, TXO_ARRAY_LEN(own));
}

static int run(void)
{
    bool outbox_only = opts.only != NULL && strcmp(opts.only, "outbox") == 0;
    if (opts.only != NULL && opts.only[0] != '\0' && !outbox_only) {
        cli_error("txo migrate: --only must be outbox, got \"%s\"", opts.only);
        return 2;
    }
    static const enum txo_partition_table tables[2] = {TXO_PARTITION_OUTBOX, TXO_PARTITION_INBOX};
    const char *const layouts[2] = {opts.outbox_layout, opts.inbox_layout};
    bool partition[2] = {false, false};
    for (int i = 0; i < 2; i++) {
        partition[i] = layouts[i] != NULL && strcmp(layouts[i], "partitioned") == 0;
        if (layouts[i] != NULL && layouts[i][0] != '\0' && !partition[i]) {
            cli_error("txo migrate: --%s-layout must be partitioned, got \"%s\"",
                      i == 0 ? "outbox" : "inbox", layouts[i]);
            return 2;
        }
    }
    if (partition[1] && outbox_only) {
        cli_error("txo migrate: --inbox-layout needs the inbox: not with --only outbox");
        return 2;
    }
    struct txo_db *db = common_connect(&opts.common);
    if (!db)
        return 1;
    struct txo_error err;
    txo_error_init(&err);
    unsigned applied = 0, total = 0;
    int rc = outbox_only ? txo_migrate_set(db, txo_outbox_migrations(), &applied, &total, &err)
                         : orders_migrate(db, &applied, &total, &err);
    for (int i = 0; rc == 0 && i < 2; i++) {
        bool partitioned = false;
        if (partition[i])
            rc = txo_partition_is_enabled(db, tables[i], &partitioned, &err);
        if (rc == 0 && partition[i] && !partitioned) {
            struct txo_partition_opts po;
            txo_partition_opts_init(&po);
            rc = txo_partition_enable(db, tables[i], &po, NULL, NULL, &err);
        }
    }
    txo_db_close(db);
    if (rc < 0) {
        cmd_report("migrate", "migration failed", &err);
        return 1;
    }
    if (cli_errors_structured())
        TXO_LOG(TXO_LOG_INFO, "migrate", "database up to date",
                TXO_KV_STR("database", opts.common.db.database),
                TXO_KV_BOOL("outbox_only", outbox_only), TXO_KV_U64("applied", applied),
                TXO_KV_U64("total", total));
    else
        fprintf(stderr,
                "txo migrate: database %s is up to date%s: %u migration(s) applied now, %u in "
                "all\n",
                opts.common.db.database, outbox_only ? " (outbox only)" : "", applied, total);
    return 0;
}
