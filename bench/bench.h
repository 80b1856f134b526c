/*
 * txo_bench: shared set-up for the benchmarks (bench_relay.c, bench_orders.c, bench_http.c).
 *
 * Benchmarks print figures; they are never pass/fail tests. What they do check, and fail on
 * (exit status 1), is correctness afterwards: a benchmark that loses events or oversells
 * stock measures nothing.
 *
 * Each run works in its own database `txo_bench_<pid>` on the server named by the MYSQL_*
 * environment (the same variables as the tests: MYSQL_HOST/PORT/USER/PASSWORD/DATABASE/
 * SOCKET). It is created and migrated by bench_env_setup() and dropped by
 * bench_env_teardown() unless --keep was given.
 *
 * Thread-safety: struct bench_env is set up and torn down by the main thread; worker threads
 * only read env->opts (to open their own connections).
 */
#ifndef TXO_BENCH_H
#define TXO_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/txo.h"

/* What the command line asked for. */
struct bench_cfg {
    size_t events; /* --events: relay events per drain */
    unsigned runs; /* --runs: repetitions of each configuration (medians are printed) */
    bool keep;     /* --keep: leave the database for inspection */
    /* http: */
    size_t http_orders;        /* --orders: orders of the load phase */
    unsigned http_connections; /* --connections: client threads, one connection each */
    const char *txo_path;      /* --txo: the txo binary; NULL: <dir of txo_bench>/../txo */
    const char *up_args;       /* --up-args: more flags for `txo up`, split on blanks; or NULL */
};

struct bench_env {
    char name[64];           /* the database: txo_bench_<pid> */
    struct txo_db_opts opts; /* MYSQL_* from the environment, database = name */
    struct txo_db *db;       /* the main thread's connection to it, owned */
    bool created;            /* the database exists (and must be dropped) */
};

/* Creates, migrates and connects to txo_bench_<pid>. Prints the reason and returns < 0 on
 * failure. */
int bench_env_setup(struct bench_env *env);

/* Connects to the database MYSQL_DATABASE names, as it is (nothing created, migrated or
 * dropped: env->created stays false), and checks that it has outbox_events. Prints the reason
 * and returns < 0 on failure. */
int bench_env_attach(struct bench_env *env);

/* Drops the database (unless keep) and closes env->db. Safe on a half set-up env. */
void bench_env_teardown(struct bench_env *env, bool keep);

/* Opens another connection to the bench database (one per worker thread). Prints the
 * reason and returns < 0 on failure. */
int bench_connect(const struct bench_env *env, struct txo_db **out);

/* Prints the header: server version, innodb_flush_log_at_trx_commit, nproc, database. */
int bench_print_header(struct bench_env *env, const struct bench_cfg *cfg);

/* Runs SQL that takes no values (TRUNCATE, SET, bulk INSERT ... SELECT). Prints on failure. */
int bench_exec_raw(struct txo_db *db, const char *sql);

/* First column of the first row as an integer (0 when no row). Prints on failure. */
int bench_query_i64(struct txo_db *db, const char *sql, const struct txo_param *params, size_t n,
                    int64_t *out);

/*
 * Redo-log syncs so far (server-wide), or -1 when they cannot be read: Innodb_os_log_fsyncs,
 * or Innodb_log_writes on MariaDB 10.8+ which has no fsync counter. bench_log_sync_counter()
 * names the counter used (NULL when none).
 */
int64_t bench_log_syncs(struct txo_db *db);
const char *bench_log_sync_counter(struct txo_db *db);

/* Monotonic clock, seconds. */
double bench_now_s(void);

/* Median of v[0..n) (sorts v in place). 0 for n == 0. */
double bench_median(double *v, size_t n);

/* The p-th percentile (0..100, nearest rank) of v[0..n) (sorts v in place). 0 for n == 0. */
double bench_percentile(double *v, size_t n, double p);

/* Small deterministic PRNG (xorshift64*), one state per thread. */
uint64_t bench_rand(uint64_t *state);

/* Prints "what: <err>" on stderr. Returns rc. */
int bench_fail(int rc, const struct txo_error *err, const char *what);

/*
 * Appends n PENDING events to outbox_events with 1,000-row INSERTs (~200-byte payloads, keys
 * "<prefix>:<i>"): event i in aggregate i, or in aggregate (i - 1) % aggregates + 1 when
 * aggregates > 0; with hot, every 5th in aggregate 0 (bench_relay.c). Prints on failure.
 */
int bench_fill_pending(struct txo_db *db, size_t n, const char *prefix, size_t aggregates,
                       bool hot);

/* The benchmarks; each returns 0, or < 0 after printing why (lost events, DB failure). */
/* txo_bench ordering (bench_relay.c): ordering by aggregate against none, per backlog shape. */
int bench_ordering(struct bench_env *env, const struct bench_cfg *cfg);
int bench_relay(struct bench_env *env, const struct bench_cfg *cfg);
/* txo_bench append (bench_append.c): appends with the sequence trigger against without it. */
int bench_append(struct bench_env *env, const struct bench_cfg *cfg);

/* txo_bench inbox (bench_inbox.c): the unpartitioned inbox against the partitioned one. */
int bench_inbox(struct bench_env *env, const struct bench_cfg *cfg);
int bench_orders(struct bench_env *env, const struct bench_cfg *cfg);
/* txo_bench binlog (bench_binlog.c): the relay's binlog source against the polling relay. */
int bench_binlog(struct bench_env *env, const struct bench_cfg *cfg);

/*
 * txo_bench append-load (bench_append_load.c): appends at a fixed rate to an existing outbox
 * and prints the latency per phase, for scripts that run something next to it. Takes the
 * command line from "append-load" on; returns the exit status.
 */
int bench_append_load_main(int argc, char **argv);

/*
 * The order service through its HTTP API (bench_http.c): spawns `txo up --broker broker`
 * (broker NULL: local dispatch; else also a private broker of scripts/broker.sh) per run
 * against a fresh database env->name + "_http", loads it with POST /orders and waits for every
 * order to be CONFIRMED. The main thread must be the only thread (it forks).
 */
int bench_http(struct bench_env *env, const struct bench_cfg *cfg, const char *broker);

/* The brokers `txo_bench all` runs the HTTP benchmark through besides local dispatch. */
#define BENCH_HTTP_BROKERS "nats kafka rabbitmq"

#endif
