/*
 * Test support: one fresh, migrated database per test on the real server (see testdb.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "testdb.h"
#include "testrun.h"
#include "orders.h"

static unsigned long parse_port(const char *s)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    return (*end == '\0' && v > 0 && v < 65536) ? v : 3306;
}

void testdb_opts_from_env(struct txo_db_opts *opts)
{
    txo_db_opts_init(opts);
    const char *v;
    if ((v = getenv("MYSQL_HOST")) && *v)
        opts->host = v;
    if ((v = getenv("MYSQL_PORT")) && *v)
        opts->port = (unsigned)parse_port(v);
    if ((v = getenv("MYSQL_USER")) && *v)
        opts->user = v;
    if ((v = getenv("MYSQL_PASSWORD")))
        opts->password = v;
    if ((v = getenv("MYSQL_DATABASE")) && *v)
        opts->database = v;
    if ((v = getenv("MYSQL_SOCKET")) && *v)
        opts->unix_socket = v;
}

static struct txo_db *connect_or_fail(const struct txo_db_opts *opts)
{
    struct txo_db *db = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_open(opts, &db, &err) < 0)
        fail_msg("cannot connect to the test server (start it with `make db`): %s", err.msg);
    return db;
}

void testdb_exec(struct txo_db *db, const char *sql)
{
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_exec_raw(db, sql, &err) < 0)
        fail_msg("%s: %s", sql, err.msg);
}

void testdb_setup_empty(struct testdb *t, const char *tag)
{
    static unsigned counter;
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "txo_test_%.24s_%ld_%u", tag, (long)getpid(), counter++);
    struct txo_db_opts opts;
    testdb_opts_from_env(&opts);
    struct txo_db *admin = connect_or_fail(&opts);
    char sql[160];
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS `%s`", t->name);
    testdb_exec(admin, sql);
    snprintf(sql, sizeof(sql), "CREATE DATABASE `%s` CHARACTER SET utf8mb4", t->name);
    testdb_exec(admin, sql);
    txo_db_close(admin);

    t->opts = opts;
    t->opts.database = t->name;
    t->db = connect_or_fail(&t->opts);
}

void testdb_setup(struct testdb *t, const char *tag)
{
    testdb_setup_empty(t, tag);
    struct txo_error err;
    txo_error_init(&err);
    unsigned applied = 0, total = 0;
    if (orders_migrate(t->db, &applied, &total, &err) < 0)
        fail_msg("migrating %s: %s", t->name, err.msg);
    if (applied != total || total == 0)
        fail_msg("migrating %s applied %u of %u", t->name, applied, total);
    /* The same tests on the partitioned outbox and inbox (tests/CMakeLists.txt:
     * *_partitioned): the outbox in partitions of a few ids so that every claim spans several,
     * the inbox in partitions of a minute (inserts cross their bounds). */
    static const struct {
        const char *env;
        enum txo_partition_table table;
    } layouts[] = {{"TXO_TEST_OUTBOX_LAYOUT", TXO_PARTITION_OUTBOX},
                   {"TXO_TEST_INBOX_LAYOUT", TXO_PARTITION_INBOX}};
    for (size_t i = 0; i < TXO_ARRAY_LEN(layouts); i++) {
        const char *layout = getenv(layouts[i].env);
        if (layout == NULL || strcmp(layout, "partitioned") != 0)
            continue;
        struct txo_partition_opts po;
        txo_partition_opts_init(&po);
        po.first_ids = 16;
        po.span_s = 60;
        po.ahead = TXO_PARTITION_AHEAD_MAX;
        if (txo_partition_enable(t->db, layouts[i].table, &po, NULL, NULL, &err) < 0)
            fail_msg("partitioning %s: %s", t->name, err.msg);
    }
}

void testdb_teardown(struct testdb *t)
{
    if (t->env_exported) {
        if (t->env_database != NULL)
            setenv("MYSQL_DATABASE", t->env_database, 1);
        else
            unsetenv("MYSQL_DATABASE");
        free(t->env_database);
        t->env_database = NULL;
        t->env_exported = false;
    }
    if (!t->db)
        return;
    const char *keep = getenv("TXO_TEST_KEEP_DB");
    if (!keep || strcmp(keep, "1") != 0) {
        char sql[160];
        snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS `%s`", t->name);
        testdb_exec(t->db, sql);
    }
    txo_db_close(t->db);
    t->db = NULL;
}

void *testdb_fixture_new(size_t size, const char *tag, unsigned flags)
{
    struct testdb *t = txo_calloc(1, size);
    if (t == NULL)
        fail_msg("out of memory for the fixture of %s", tag);
    if (flags & (TESTDB_NEW_EMPTY | TESTDB_NEW_OUTBOX_ONLY))
        testdb_setup_empty(t, tag);
    else
        testdb_setup(t, tag);
    if (flags & TESTDB_NEW_OUTBOX_ONLY) {
        struct txo_error err;
        txo_error_init(&err);
        if (txo_migrate_set(t->db, txo_outbox_migrations(), NULL, NULL, &err) < 0)
            fail_msg("migrating the outbox of %s: %s", t->name, err.msg);
    }
    if (flags & TESTDB_NEW_EXPORT_ENV)
        testdb_export_env(t);
    return t;
}

void testdb_fixture_free(void *fixture)
{
    if (fixture == NULL)
        return;
    testdb_teardown(fixture);
    txo_free(fixture);
}

struct testdb *testdb_new(const char *tag, unsigned flags)
{
    return testdb_fixture_new(sizeof(struct testdb), tag, flags);
}

void testdb_free(struct testdb *t)
{
    testdb_fixture_free(t);
}

int testdb_free_state(void **state)
{
    testdb_free(*state);
    *state = NULL;
    return 0;
}

/* What testdb_run_each() was asked for: one table runs at a time in a test program. */
static struct {
    const char *tag;
    unsigned flags;
    void (*init)(struct testdb *t);
} run;

static int run_setup(void **state)
{
    struct testdb *t = testdb_new(run.tag, run.flags);
    if (run.init != NULL)
        run.init(t);
    *state = t;
    return 0;
}

int testdb_run_each(const struct CMUnitTest *tests, size_t n, const char *tag, unsigned flags,
                    void (*init)(struct testdb *t))
{
    run.tag = tag;
    run.flags = flags;
    run.init = init;
    return testrun_each(tests, n, run_setup, testdb_free_state, NULL, NULL);
}

struct txo_db *testdb_connect(const struct testdb *t)
{
    return connect_or_fail(&t->opts);
}

int64_t testdb_i64(struct txo_db *db, const char *sql, const struct txo_param *params, size_t n)
{
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_query(db, sql, params, n, &rows, &err) < 0)
        fail_msg("%s: %s", sql, err.msg);
    int64_t v = txo_rows_count(rows) > 0 ? txo_rows_i64(rows, 0, 0) : 0;
    txo_rows_free(rows);
    return v;
}

int64_t testdb_q(struct txo_db *db, const char *sql)
{
    return testdb_i64(db, sql, NULL, 0);
}

void testdb_assert_explain(struct txo_db *db, const char *sql, const struct txo_param *params,
                           size_t n, const char *want)
{
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_query(db, sql, params, n, &rows, &err) < 0)
        fail_msg("%s: %s", sql, err.msg);
    /* Columns 5, 8 and 9 of EXPLAIN's row are key, rows and Extra. */
    const char *key = txo_rows_str(rows, 0, 5, NULL);
    const char *extra = txo_rows_str(rows, 0, 9, NULL);
    const char *n_rows = txo_rows_str(rows, 0, 8, NULL);
    print_message("%.60s...: key=%s rows=%s extra=%s\n", sql + 8, key ? key : "NULL",
                  n_rows ? n_rows : "NULL", extra ? extra : "");
    if (key == NULL || strcmp(key, want) != 0)
        fail_msg("%s uses key %s, want %s", sql, key ? key : "NULL", want);
    if (extra != NULL && strstr(extra, "filesort") != NULL)
        fail_msg("%s sorts its rows (%s)", sql, extra);
    txo_rows_free(rows);
}

char *testdb_str(struct txo_db *db, const char *sql, const struct txo_param *params, size_t n)
{
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_query(db, sql, params, n, &rows, &err) < 0)
        fail_msg("%s: %s", sql, err.msg);
    char *v = NULL;
    if (txo_rows_count(rows) > 0 && !txo_rows_is_null(rows, 0, 0))
        v = txo_strdup(txo_rows_str(rows, 0, 0, NULL));
    txo_rows_free(rows);
    return v;
}

void testdb_export_env(struct testdb *t)
{
    if (!t->env_exported) {
        const char *before = getenv("MYSQL_DATABASE");
        t->env_database = before != NULL ? strdup(before) : NULL;
        t->env_exported = true;
    }
    char port[16];
    snprintf(port, sizeof(port), "%u", t->opts.port);
    setenv("MYSQL_HOST", t->opts.host, 1);
    setenv("MYSQL_PORT", port, 1);
    setenv("MYSQL_USER", t->opts.user, 1);
    setenv("MYSQL_PASSWORD", t->opts.password ? t->opts.password : "", 1);
    setenv("MYSQL_DATABASE", t->name, 1);
    if (t->opts.unix_socket)
        setenv("MYSQL_SOCKET", t->opts.unix_socket, 1);
}
