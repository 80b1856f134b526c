/*
 * txo_bench binlog: the relay's binlog source (txo/binlog.h) against the polling relay, on the
 * same server and table, in the same run: N PENDING events drained with the null publisher.
 *
 *   polling  one relay (batch 500, ordered by aggregate: the defaults) drains N events
 *            appended before it starts (txo_relay_run with drain);
 *   binlog   a source is started on the empty table (its first start stores the server's
 *            position) and stopped; the same N events are appended; then the source runs with
 *            drain until it has published up to the position the server had when it started:
 *            the time of that run is its drain.
 * The fill is txo_bench relay's (bench_fill_pending: 1,000-row INSERTs, ~200-byte payloads,
 * 1,000 aggregates). The polling drain ends with every row PUBLISHED; the binlog one with
 * every row still PENDING (the source writes nothing to them) and its count equal to N, or the
 * bench fails. Figures: events/s of each run and the medians, and binlog / polling.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "txo/binlog.h"

#define BENCH_SQL_TRUNCATE_OUTBOX "TRUNCATE TABLE outbox_events"
#define BENCH_SQL_FORGET_SOURCES  "DELETE FROM outbox_binlog_sources"
#define BENCH_SQL_COUNT_OTHER     "SELECT COUNT(*) FROM outbox_events WHERE status <> ?"

/* Every row in status, n of them. */
static int verify(struct txo_db *db, size_t n, const char *status)
{
    int64_t left = -1, all = -1;
    struct txo_param p = txo_p_str(status);
    if (bench_query_i64(db, BENCH_SQL_COUNT_OTHER, &p, 1, &left) < 0 ||
        bench_query_i64(db, "SELECT COUNT(*) FROM outbox_events", NULL, 0, &all) < 0)
        return -1;
    if (left != 0 || all != (int64_t)n) {
        fprintf(stderr, "binlog bench: %lld of %lld rows not %s (want %zu rows)\n", (long long)left,
                (long long)all, status, n);
        return -1;
    }
    return 0;
}

static int reset(struct bench_env *env)
{
    return bench_exec_raw(env->db, BENCH_SQL_TRUNCATE_OUTBOX) < 0 ||
                   bench_exec_raw(env->db, BENCH_SQL_FORGET_SOURCES) < 0
               ? -1
               : 0;
}

/* One polling drain of n events: events/s, or < 0. */
static double polling_drain(struct bench_env *env, size_t n)
{
    struct txo_error err;
    txo_error_init(&err);
    struct txo_publisher *pub = NULL;
    struct txo_relay *r = NULL;
    struct txo_relay_opts o;
    txo_relay_opts_init(&o);
    o.drain = true;
    double rate = -1;
    if (reset(env) < 0 || bench_fill_pending(env->db, n, "poll", 1000, false) < 0)
        return -1;
    if (txo_publisher_null_new(&pub, &err) != 0 || txo_relay_new(env->db, pub, &o, &r, &err) != 0) {
        bench_fail(err.code, &err, "polling relay");
        goto out;
    }
    double t0 = bench_now_s();
    if (txo_relay_run(r, &err) != 0) {
        bench_fail(err.code, &err, "polling drain");
        goto out;
    }
    double s = bench_now_s() - t0;
    if (verify(env->db, n, "PUBLISHED") == 0)
        rate = (double)n / s;
out:
    txo_relay_free(r);
    txo_publisher_free(pub);
    return rate;
}

/* One binlog drain of n events: events/s, or < 0. */
static double binlog_drain(struct bench_env *env, size_t n)
{
    struct txo_error err;
    txo_error_init(&err);
    struct txo_publisher *pub = NULL;
    struct txo_binlog *b = NULL;
    struct txo_binlog_opts o;
    txo_binlog_opts_init(&o);
    o.source_name = "bench";
    o.drain = true;
    double rate = -1;
    if (reset(env) < 0)
        return -1;
    if (txo_publisher_null_new(&pub, &err) != 0 ||
        txo_binlog_new(&env->opts, pub, &o, &b, &err) != 0 || txo_binlog_run(b, &err) != 0) {
        bench_fail(err.code, &err, "binlog source, first start");
        goto out;
    }
    txo_binlog_free(b);
    b = NULL;
    if (bench_fill_pending(env->db, n, "binlog", 1000, false) < 0)
        goto out;
    if (txo_binlog_new(&env->opts, pub, &o, &b, &err) != 0) {
        bench_fail(err.code, &err, "binlog source");
        goto out;
    }
    double t0 = bench_now_s();
    if (txo_binlog_run(b, &err) != 0) {
        bench_fail(err.code, &err, "binlog drain");
        goto out;
    }
    double s = bench_now_s() - t0;
    struct txo_binlog_stats st;
    txo_binlog_get_stats(b, &st);
    if (st.published != n) {
        fprintf(stderr, "binlog bench: the source published %llu events, want %zu\n",
                (unsigned long long)st.published, n);
        goto out;
    }
    if (verify(env->db, n, "PENDING") == 0)
        rate = (double)n / s;
out:
    txo_binlog_free(b);
    txo_publisher_free(pub);
    return rate;
}

int bench_binlog(struct bench_env *env, const struct bench_cfg *cfg)
{
    struct txo_error err;
    txo_error_init(&err);
    if (txo_binlog_check_server(env->db, &err) != 0) {
        fprintf(stderr, "binlog bench skipped: %s\n", err.msg);
        return 0;
    }
    printf("== binlog source against polling: %zu PENDING events, null publisher, medians of %u "
           "runs ==\n",
           cfg->events, cfg->runs);
    double *poll = calloc(cfg->runs, sizeof(*poll));
    double *blog = calloc(cfg->runs, sizeof(*blog));
    int rc = poll != NULL && blog != NULL ? 0 : -1;
    for (unsigned i = 0; rc == 0 && i < cfg->runs; i++) {
        poll[i] = polling_drain(env, cfg->events);
        blog[i] = binlog_drain(env, cfg->events);
        if (poll[i] < 0 || blog[i] < 0)
            rc = -1;
        else
            printf("  run %u: polling %.0f events/s, binlog %.0f events/s\n", i + 1, poll[i],
                   blog[i]);
    }
    if (rc == 0) {
        double p = bench_median(poll, cfg->runs), bl = bench_median(blog, cfg->runs);
        printf("  median: polling %.0f events/s, binlog %.0f events/s, binlog / polling %.2f\n", p,
               bl, bl / p);
    }
    free(poll);
    free(blog);
    return rc;
}
