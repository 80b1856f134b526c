/*
 * `txo migrate`: applies the schema migrations compiled into txo to the configured database.
 */
#include <stdio.h>

#include "settings.h"

static int run(int argc, char **argv);

const struct command cmd_migrate = {
    .name = "migrate",
    .summary = "create or upgrade the database schema (idempotent)",
    .usage = "txo migrate [options]",
    .description =
        "Applies every schema migration of this txo build (sql/migrations/NNNN_*.sql) that\n"
        "the database has not recorded yet in txo_schema_migrations, in order, under a\n"
        "server-side lock so concurrent runs cannot interleave. Running it again is a no-op.\n"
        "A recorded migration whose text changed since is refused.",
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
    int rc = txo_migrate(db, &applied, &total, &err);
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
