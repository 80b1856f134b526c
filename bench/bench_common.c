/*
 * txo_bench: database set-up and small helpers shared by the benchmarks (see bench.h).
 *
 * The MYSQL_* handling mirrors tests/support/testdb.c (the bench does not link cmocka, so it
 * has its own copy): MYSQL_HOST, MYSQL_PORT, MYSQL_USER, MYSQL_PASSWORD, MYSQL_SOCKET, with
 * the defaults of txo_db_opts_init(). MYSQL_DATABASE is only the database we first connect to;
 * everything runs in txo_bench_<pid>, which the application user may create (db.sh grants it
 * ALL on txo\_%).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "orders.h"

/* Statements of the set-up, kept together. None takes input except the status read. */

/* information_schema.GLOBAL_STATUS: a full scan of a small in-memory table; locks nothing. */
#define BENCH_SQL_GLOBAL_STATUS                                                                    \
    "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = ?"

/* Server variables; no table read, no locks. */
#define BENCH_SQL_SERVER_INFO                                                                      \
    "SELECT @@version, @@innodb_flush_log_at_trx_commit, @@innodb_buffer_pool_size, "              \
    "@@sync_binlog, @@log_bin"

static unsigned parse_port(const char *s)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    return (*end == '\0' && v > 0 && v < 65536) ? (unsigned)v : 3306;
}

static void opts_from_env(struct txo_db_opts *opts)
{
    txo_db_opts_init(opts);
    const char *v = getenv("MYSQL_HOST");
    if (v && *v)
        opts->host = v;
    v = getenv("MYSQL_PORT");
    if (v && *v)
        opts->port = parse_port(v);
    v = getenv("MYSQL_USER");
    if (v && *v)
        opts->user = v;
    v = getenv("MYSQL_PASSWORD");
    if (v)
        opts->password = v;
    v = getenv("MYSQL_DATABASE");
    if (v && *v)
        opts->database = v;
    v = getenv("MYSQL_SOCKET");
    if (v && *v)
        opts->unix_socket = v;
    /* A 1M-row INSERT ... SELECT can take a while on a small machine. */
    opts->read_timeout_s = 600;
    opts->write_timeout_s = 600;
}

int bench_fail(int rc, const struct txo_error *err, const char *what)
{
    fprintf(stderr, "txo_bench: %s: %s (%s)\n", what, err && err->msg[0] ? err->msg : "",
            txo_err_name(rc));
    return rc;
}

int bench_exec_raw(struct txo_db *db, const char *sql)
{
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_exec_raw(db, sql, &err);
    if (rc < 0)
        return bench_fail(rc, &err, sql);
    return 0;
}

int bench_query_i64(struct txo_db *db, const char *sql, const struct txo_param *params, size_t n,
                    int64_t *out)
{
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_query(db, sql, params, n, &rows, &err);
    if (rc < 0)
        return bench_fail(rc, &err, sql);
    *out = txo_rows_count(rows) > 0 ? txo_rows_i64(rows, 0, 0) : 0;
    txo_rows_free(rows);
    return 0;
}

/*
 * MySQL and MariaDB < 10.8 count redo-log fsyncs in Innodb_os_log_fsyncs. MariaDB 10.8+ dropped
 * that counter (its redo log is written with O_DIRECT by default); there, Innodb_log_writes
 * counts the redo writes, one per group commit, which is what the figure is about.
 */
const char *bench_log_sync_counter(struct txo_db *db)
{
    static const char *const names[] = {"INNODB_OS_LOG_FSYNCS", "INNODB_LOG_WRITES"};
    for (size_t i = 0; i < TXO_ARRAY_LEN(names); i++) {
        struct txo_param p = txo_p_str(names[i]);
        struct txo_rows *rows = NULL;
        struct txo_error err;
        txo_error_init(&err);
        if (txo_db_query(db, BENCH_SQL_GLOBAL_STATUS, &p, 1, &rows, &err) < 0)
            return NULL;
        size_t n = txo_rows_count(rows);
        txo_rows_free(rows);
        if (n > 0)
            return names[i];
    }
    return NULL;
}

int64_t bench_log_syncs(struct txo_db *db)
{
    const char *name = bench_log_sync_counter(db);
    if (!name)
        return -1;
    struct txo_param p = txo_p_str(name);
    int64_t v = 0;
    if (bench_query_i64(db, BENCH_SQL_GLOBAL_STATUS, &p, 1, &v) < 0)
        return -1;
    return v;
}

int bench_connect(const struct bench_env *env, struct txo_db **out)
{
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_open(&env->opts, out, &err);
    if (rc < 0)
        return bench_fail(rc, &err, "connecting to the bench database");
    return 0;
}

int bench_env_setup(struct bench_env *env)
{
    struct txo_db *admin = NULL;
    struct txo_error err;
    char sql[160];
    int rc;

    memset(env, 0, sizeof(*env));
    snprintf(env->name, sizeof(env->name), "txo_bench_%ld", (long)getpid());
    opts_from_env(&env->opts);

    txo_error_init(&err);
    rc = txo_db_open(&env->opts, &admin, &err);
    if (rc < 0) {
        bench_fail(rc, &err,
                   "cannot connect (start the server: scripts/db.sh start, then "
                   "eval \"$(scripts/db.sh env)\")");
        goto out;
    }
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS `%s`", env->name);
    rc = bench_exec_raw(admin, sql);
    if (rc < 0)
        goto out;
    snprintf(sql, sizeof(sql), "CREATE DATABASE `%s` CHARACTER SET utf8mb4", env->name);
    rc = bench_exec_raw(admin, sql);
    if (rc < 0)
        goto out;
    env->created = true;

    env->opts.database = env->name;
    rc = bench_connect(env, &env->db);
    if (rc < 0)
        goto out;
    unsigned applied = 0;
    unsigned total = 0;
    rc = orders_migrate(env->db, &applied, &total, &err);
    if (rc < 0) {
        bench_fail(rc, &err, "migrating the bench database");
        goto out;
    }
out:
    txo_db_close(admin);
    return rc;
}

int bench_env_attach(struct bench_env *env)
{
    memset(env, 0, sizeof(*env));
    opts_from_env(&env->opts);
    snprintf(env->name, sizeof(env->name), "%s", env->opts.database);
    int rc = bench_connect(env, &env->db);
    bool exists = false;
    struct txo_error err;
    txo_error_init(&err);
    if (rc == 0)
        rc = txo_schema_has_table(env->db, "outbox_events", &exists, &err);
    if (rc < 0 && err.msg[0] != '\0')
        bench_fail(rc, &err, "looking for outbox_events");
    if (rc == 0 && !exists) {
        fprintf(stderr, "txo_bench: database %s has no outbox_events (run txo migrate)\n",
                env->name);
        rc = TXO_EINVAL;
    }
    return rc;
}

void bench_env_teardown(struct bench_env *env, bool keep)
{
    if (env->created && !keep) {
        char sql[160];
        snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS `%s`", env->name);
        if (env->db)
            (void)bench_exec_raw(env->db, sql);
    } else if (env->created) {
        printf("kept database %s\n", env->name);
    }
    txo_db_close(env->db);
    env->db = NULL;
}

int bench_print_header(struct bench_env *env, const struct bench_cfg *cfg)
{
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_query(env->db, BENCH_SQL_SERVER_INFO, NULL, 0, &rows, &err);
    if (rc < 0)
        return bench_fail(rc, &err, "reading server variables");
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    printf("txo_bench  server %s  innodb_flush_log_at_trx_commit=%s  "
           "innodb_buffer_pool_size=%lldM  sync_binlog=%s log_bin=%s\n",
           txo_rows_str(rows, 0, 0, NULL), txo_rows_str(rows, 0, 1, NULL),
           (long long)(txo_rows_i64(rows, 0, 2) >> 20), txo_rows_str(rows, 0, 3, NULL),
           txo_rows_str(rows, 0, 4, NULL));
    const char *counter = bench_log_sync_counter(env->db);
    printf("           nproc=%ld  database=%s  events=%zu  runs=%u (figures are medians)\n", nproc,
           env->name, cfg->events, cfg->runs);
    printf("           log syncs = delta of %s\n\n", counter ? counter : "(no counter)");
    txo_rows_free(rows);
    fflush(stdout);
    return 0;
}

double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, size_t n)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

double bench_percentile(double *v, size_t n, double p)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof(*v), cmp_double);
    /* Nearest rank: the smallest value with at least p% of the sample at or below it. */
    size_t rank = (size_t)((p / 100.0) * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return v[rank - 1];
}

uint64_t bench_rand(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * UINT64_C(2685821657736338717);
}
