/*
 * `txo migrate`: applies the schema migrations compiled into txo to the configured database.
 */
#include <stdio.h>

#include "orders.h"
#include "settings.h"

static int run(int argc, char **argv);

const struct command cmd_migrate = {
    .name = "migrate",
    .summary = "create or upgrade the database schema (idempotent)",
    .usage = "txo migrate [options]",
    .description =
        "Applies every schema migration of this txo build that the database has not recorded\n"
        "yet in txo_schema_migrations, in order, under a server-side lock so concurrent runs\n"
        "cannot interleave: first the library's own set (sql/migrations: outbox, dead\n"
        "letters, inbox, idempotency keys, sagas, command queue), then the order service's\n"
        "(app/order-service/migrations). Running it again is a no-op. A recorded migration\n"
        "whose text changed since is refused.",
    .run = run,
};

static int run(int argc, char **argv)
{
    struct common_opts o;
    txo_db_opts_init(&o.db);
    struct settings_table t = {.n = 0};
    settings_add_common(&t, &o);
    enum settings_result r = settings_parse(&cmd_migrate, t.items, t.n, argc, argv, NULL);
    if (r != SETTINGS_OK)
        return r == SETTINGS_EXIT_OK ? 0 : 2;
    if (!common_apply(&o))
        return 2;
    struct txo_db *db = common_connect(&o);
    if (!db)
        return 1;
    struct txo_error err;
    txo_error_init(&err);
    unsigned applied = 0, total = 0;
    int rc = orders_migrate(db, &applied, &total, &err);
    txo_db_close(db);
    if (rc < 0) {
        cmd_report("migrate", "migration failed", &err);
        return 1;
    }
    fprintf(stderr,
            "txo migrate: database %s is up to date: %u migration(s) applied now, %u in all\n",
            o.db.database, applied, total);
    return 0;
}
