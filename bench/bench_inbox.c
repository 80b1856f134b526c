/*
 * txo_bench inbox: what the partitioned inbox (txo/partition.h) costs a consumer. The same
 * messages are recorded on the unpartitioned inbox and on the partitioned one, in the same run,
 * layouts interleaved, and both rates printed.
 *
 * The table holds a week of history before each run (INBOX_HISTORY rows, created over the
 * last 7 days), as a table under the default retention does; partitioned, that is a partition
 * a day plus 2 ahead and pmax: 11 partitions, so a lookup by event_id alone dives into each.
 *
 * Shapes, INBOX_THREADS threads with a connection each, READ COMMITTED:
 *   single      txo_inbox_record(), one new message per transaction;
 *   batch x100  txo_inbox_record_many() of 100 new messages (a batch consumer): one lookup of
 *               the ids (the per-partition dives), one multi-row INSERT;
 *   redelivery  the same batches again: every message a duplicate.
 * Afterwards (or the bench fails): every message of a run recorded once, every redelivered one
 * seen as a duplicate.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define INBOX_THREADS  4
#define INBOX_MESSAGES 20000
#define INBOX_BATCH    100
#define INBOX_HISTORY  200000

#define BENCH_SQL_INBOX_ROWS "SELECT COUNT(*) FROM inbox_events"
/* A week of history, created evenly over the last 7 days. */
#define BENCH_SQL_INBOX_HISTORY                                                                    \
    "INSERT INTO inbox_events (event_id, event_type, payload, processed_at, created_at) "          \
    "SELECT CONCAT('h-', seq), 'History', '{\"n\":1}', "                                           \
    "NOW(6) - INTERVAL (seq * 3) SECOND, NOW(6) - INTERVAL (seq * 3) SECOND "                      \
    "FROM seq_1_to_200000"

enum shape { SHAPE_SINGLE, SHAPE_BATCH, SHAPE_REDELIVERY, SHAPE_N };
static const char *const shape_names[SHAPE_N] = {
    "single, 1 per transaction", "batch x100 (record_many)", "redelivery x100 (all duplicates)"};

struct consumer {
    const struct bench_env *env;
    pthread_barrier_t *start;
    enum shape shape;
    unsigned thread;
    size_t messages; /* this thread's share */
    unsigned run;
    size_t wrong; /* a new message seen as a duplicate, or a redelivered one as new */
    int rc;
    pthread_t tid;
};

struct record_tx {
    const struct consumer *c;
    size_t first, n;
    bool dup[INBOX_BATCH];
};

static int record_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct record_tx *t = arg;
    char ids[INBOX_BATCH][48];
    struct txo_inbox_entry e[INBOX_BATCH];
    for (size_t k = 0; k < t->n; k++) {
        snprintf(ids[k], sizeof(ids[k]), "r%u-t%u-%zu", t->c->run, t->c->thread, t->first + k);
        e[k] = (struct txo_inbox_entry){ids[k], "Paid", "{\"amount\":1}"};
    }
    if (t->n == 1)
        return txo_inbox_record(tx, e[0].event_id, e[0].event_type, e[0].payload_json, t->dup, err);
    return txo_inbox_record_many(tx, e, t->n, t->dup, err);
}

static void *consumer_main(void *arg)
{
    struct consumer *c = arg;
    struct txo_db *db = NULL;
    c->rc = bench_connect(c->env, &db);
    pthread_barrier_wait(c->start);
    size_t per_tx = c->shape == SHAPE_SINGLE ? 1 : INBOX_BATCH;
    for (size_t i = 0; c->rc == 0 && i < c->messages; i += per_tx) {
        struct record_tx t = {.c = c, .first = i, .n = per_tx};
        struct txo_error err;
        txo_error_init(&err);
        c->rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, record_tx, &t, &err);
        if (c->rc != 0)
            fprintf(stderr, "txo_bench inbox: %s\n", err.msg);
        for (size_t k = 0; c->rc == 0 && k < per_tx; k++)
            c->wrong += t.dup[k] != (c->shape == SHAPE_REDELIVERY);
    }
    txo_db_close(db);
    return NULL;
}

/* The threads of one shape; events/s into *rate. */
static int run_threads(const struct bench_env *env, enum shape shape, unsigned run, double *rate)
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, INBOX_THREADS + 1);
    struct consumer c[INBOX_THREADS];
    for (unsigned t = 0; t < INBOX_THREADS; t++) {
        c[t] = (struct consumer){.env = env,
                                 .start = &start,
                                 .shape = shape,
                                 .thread = t,
                                 .messages = INBOX_MESSAGES / INBOX_THREADS,
                                 .run = run};
        pthread_create(&c[t].tid, NULL, consumer_main, &c[t]);
    }
    pthread_barrier_wait(&start);
    double t0 = bench_now_s();
    int rc = 0;
    size_t wrong = 0;
    for (unsigned t = 0; t < INBOX_THREADS; t++) {
        pthread_join(c[t].tid, NULL);
        if (c[t].rc != 0)
            rc = c[t].rc;
        wrong += c[t].wrong;
    }
    double elapsed = bench_now_s() - t0;
    pthread_barrier_destroy(&start);
    if (rc == 0 && wrong > 0) {
        fprintf(stderr, "txo_bench inbox: %s: %zu messages judged wrongly\n", shape_names[shape],
                wrong);
        rc = TXO_EINVAL;
    }
    *rate = INBOX_MESSAGES / elapsed;
    return rc;
}

/* A fresh inbox of the layout with a week of history: on one table, then copied by the layout
 * change into partitions of a day when partitioned (as a live table would be). */
static int fresh_inbox(const struct bench_env *env, bool partitioned)
{
    struct txo_error err;
    txo_error_init(&err);
    struct txo_partition_opts po;
    txo_partition_opts_init(&po);
    bool now = false;
    int rc = bench_exec_raw(env->db, "TRUNCATE TABLE inbox_events");
    if (rc == 0)
        rc = txo_partition_is_enabled(env->db, TXO_PARTITION_INBOX, &now, &err);
    if (rc == 0 && now) /* empty: no copy; its key table goes */
        rc = txo_partition_disable(env->db, TXO_PARTITION_INBOX, &po, NULL, NULL, &err);
    if (rc == 0)
        rc = bench_exec_raw(env->db, BENCH_SQL_INBOX_HISTORY);
    if (rc == 0 && partitioned)
        rc = txo_partition_enable(env->db, TXO_PARTITION_INBOX, &po, NULL, NULL, &err);
    if (rc < 0 && err.msg[0] != '\0')
        return bench_fail(rc, &err, "changing the inbox's layout");
    return rc < 0 ? rc : bench_exec_raw(env->db, "ANALYZE TABLE inbox_events");
}

/* One timed run of the three shapes on a layout; rates into rate[shape]. */
static int run_layout(const struct bench_env *env, bool partitioned, unsigned run,
                      double rate[SHAPE_N])
{
    int rc = fresh_inbox(env, partitioned);
    int64_t before = 0, after = 0;
    if (rc == 0)
        rc = bench_query_i64(env->db, BENCH_SQL_INBOX_ROWS, NULL, 0, &before);
    /* single writes ids r<2run>-..., batch r<2run+1>-..., redelivery repeats batch's. */
    if (rc == 0)
        rc = run_threads(env, SHAPE_SINGLE, 2 * run, &rate[SHAPE_SINGLE]);
    if (rc == 0)
        rc = run_threads(env, SHAPE_BATCH, 2 * run + 1, &rate[SHAPE_BATCH]);
    if (rc == 0)
        rc = run_threads(env, SHAPE_REDELIVERY, 2 * run + 1, &rate[SHAPE_REDELIVERY]);
    if (rc == 0)
        rc = bench_query_i64(env->db, BENCH_SQL_INBOX_ROWS, NULL, 0, &after);
    if (rc == 0 && after - before != 2 * INBOX_MESSAGES) {
        fprintf(stderr, "txo_bench inbox: %lld messages recorded of %d\n",
                (long long)(after - before), 2 * INBOX_MESSAGES);
        rc = TXO_EINVAL;
    }
    return rc;
}

int bench_inbox(struct bench_env *env, const struct bench_cfg *cfg)
{
    printf("\n## The inbox: unpartitioned against partitioned (%d threads, %d messages per "
           "shape and run, %d rows of history, median of %u)\n\n",
           INBOX_THREADS, INBOX_MESSAGES, INBOX_HISTORY, cfg->runs);
    printf("%-34s %16s %16s %8s\n", "shape", "one table msg/s", "partitioned msg/s", "ratio");
    int rc = 0;
    double *one[SHAPE_N], *parts[SHAPE_N];
    for (int s = 0; s < SHAPE_N; s++) {
        one[s] = txo_calloc(cfg->runs, sizeof(double));
        parts[s] = txo_calloc(cfg->runs, sizeof(double));
        if (one[s] == NULL || parts[s] == NULL)
            rc = TXO_ENOMEM;
    }
    for (unsigned r = 0; rc == 0 && r < cfg->runs; r++) {
        double a[SHAPE_N], b[SHAPE_N];
        rc = run_layout(env, false, 2 * r, a);
        if (rc == 0)
            rc = run_layout(env, true, 2 * r + 1, b);
        for (int s = 0; rc == 0 && s < SHAPE_N; s++) {
            one[s][r] = a[s];
            parts[s][r] = b[s];
        }
    }
    for (int s = 0; rc == 0 && s < SHAPE_N; s++) {
        double o = bench_median(one[s], cfg->runs), p = bench_median(parts[s], cfg->runs);
        printf("%-34s %16.0f %16.0f %7.0f%%\n", shape_names[s], o, p, 100.0 * p / o);
    }
    for (int s = 0; s < SHAPE_N; s++) {
        txo_free(one[s]);
        txo_free(parts[s]);
    }
    if (rc == 0) { /* leave the inbox as the schema made it */
        struct txo_error err;
        txo_error_init(&err);
        struct txo_partition_opts po;
        txo_partition_opts_init(&po);
        rc = bench_exec_raw(env->db, "TRUNCATE TABLE inbox_events");
        if (rc == 0 &&
            (rc = txo_partition_disable(env->db, TXO_PARTITION_INBOX, &po, NULL, NULL, &err)) < 0)
            rc = bench_fail(rc, &err, "the inbox back to one table");
    }
    fflush(stdout);
    return rc;
}
