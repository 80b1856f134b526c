/*
 * txo_bench append: what numbering events costs an application's transaction. Every event is
 * numbered in its aggregate from its counter row in outbox_aggregates, locked to the end of
 * the appending transaction. This bench appends the same events three ways, in the same run,
 * interleaved, and prints the rates:
 *   libtxo     txo_outbox_append / _many: for several events one upsert of the counters with
 *              RETURNING for the whole call, then the events' INSERT with their numbers; one
 *              event is left to the trigger, so the single-event shapes run the trigger's way;
 *   trigger    the same rows as an application's plain INSERT of the contract's columns: the
 *              trigger outbox_events_sequence numbers each row (a probe of the idempotency key
 *              and the counter's upsert, two statements of its own per row);
 *   none       that plain INSERT with the trigger dropped: no numbers at all, the floor.
 *
 * Shapes, APPEND_THREADS threads with a connection each, one transaction per append call,
 * READ COMMITTED:
 *   new        every event to an aggregate never seen (an order's OrderCreated): the counter
 *              row is inserted;
 *   existing   events to 1,000 aggregates appended to before (an order's later events): the
 *              counter row is updated;
 *   batch x10  10 events of one existing aggregate per transaction (append_many, or one
 *              10-row INSERT).
 *
 * The trigger is dropped and re-created from its own definition as the server reports it
 * (information_schema.TRIGGERS), so the bench measures exactly what was migrated. Afterwards
 * (or the bench fails): every event of a run is in the table, and but for `none` every
 * aggregate's sequences are 1..n without a gap.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define APPEND_THREADS 4
#define APPEND_EVENTS  20000
#define EXISTING_AGGS  1000
#define BATCH_EVENTS   10

#define BENCH_SQL_TRIGGER_BODY                                                                     \
    "SELECT ACTION_STATEMENT FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() "  \
    "AND TRIGGER_NAME = 'outbox_events_sequence'"
#define BENCH_SQL_TRIGGER_DROP "DROP TRIGGER outbox_events_sequence"
#define BENCH_SQL_TRIGGER_HEAD                                                                     \
    "CREATE TRIGGER outbox_events_sequence BEFORE INSERT ON outbox_events FOR EACH ROW "
#define BENCH_SQL_EVENTS "SELECT COUNT(*) FROM outbox_events"
/* Aggregates whose sequences are not exactly 1..n. */
#define BENCH_SQL_SEQUENCE_HOLES                                                                   \
    "SELECT COUNT(*) FROM (SELECT aggregate_id FROM outbox_events GROUP BY aggregate_type, "       \
    "aggregate_id HAVING MIN(sequence) <> 1 OR MAX(sequence) <> COUNT(*) OR "                      \
    "COUNT(DISTINCT sequence) <> COUNT(*)) h"

enum shape { SHAPE_NEW, SHAPE_EXISTING, SHAPE_BATCH, SHAPE_N };
enum how { HOW_LIBTXO, HOW_TRIGGER, HOW_NONE, HOW_N };
static const char *const how_names[HOW_N] = {"libtxo ev/s", "trigger ev/s", "none ev/s"};

/* An application's own INSERT of the contract's columns, per row. */
#define BENCH_SQL_PLAIN_BEFORE                                                                     \
    "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "               \
    "idempotency_key) VALUES "
#define BENCH_SQL_PLAIN_ROW "(?, ?, ?, ?, ?)"
static const char *const shape_names[SHAPE_N] = {
    "new aggregate per event", "1,000 existing aggregates", "batch x10, one aggregate"};

struct appender {
    const struct bench_env *env;
    pthread_barrier_t *start;
    enum shape shape;
    enum how how;
    unsigned thread;
    size_t events; /* this thread's share */
    unsigned run;
    int rc;
    pthread_t tid;
};

struct append_tx {
    const struct appender *a;
    size_t first; /* index of the first event of this transaction */
    size_t n;
};

static int append_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct append_tx *t = arg;
    struct txo_outbox_event ev[BATCH_EVENTS];
    char keys[BATCH_EVENTS][64], agg[32];
    size_t i0 = t->first;
    if (t->a->shape == SHAPE_NEW)
        snprintf(agg, sizeof(agg), "n%u-%u-%zu", t->a->run, t->a->thread, i0);
    else
        snprintf(agg, sizeof(agg), "e%zu", (i0 * 7919 + t->a->thread) % EXISTING_AGGS);
    for (size_t k = 0; k < t->n; k++) {
        snprintf(keys[k], sizeof(keys[k]), "r%u-t%u-%zu", t->a->run, t->a->thread, i0 + k);
        ev[k] = (struct txo_outbox_event){.aggregate_type = "account",
                                          .aggregate_id = agg,
                                          .event_type = "Moved",
                                          .payload_json = "{\"amount\":1}",
                                          .idempotency_key = keys[k]};
    }
    if (t->a->how == HOW_LIBTXO && t->n == 1)
        return txo_outbox_append(tx, &ev[0], 0, NULL, NULL, err);
    if (t->a->how == HOW_LIBTXO)
        return txo_outbox_append_many(tx, ev, t->n, err);
    struct txo_param p[5 * BATCH_EVENTS];
    for (size_t k = 0; k < t->n; k++) {
        p[5 * k] = txo_p_str(ev[k].aggregate_type);
        p[5 * k + 1] = txo_p_str(ev[k].aggregate_id);
        p[5 * k + 2] = txo_p_str(ev[k].event_type);
        p[5 * k + 3] = txo_p_str(ev[k].payload_json);
        p[5 * k + 4] = txo_p_str(ev[k].idempotency_key);
    }
    return txo_tx_exec_rows(tx, BENCH_SQL_PLAIN_BEFORE, t->n, BENCH_SQL_PLAIN_ROW, "", p, 5, NULL,
                            err);
}

static void *appender_main(void *arg)
{
    struct appender *a = arg;
    struct txo_db *db = NULL;
    a->rc = bench_connect(a->env, &db);
    pthread_barrier_wait(a->start);
    size_t per_tx = a->shape == SHAPE_BATCH ? BATCH_EVENTS : 1;
    for (size_t i = 0; a->rc == 0 && i < a->events; i += per_tx) {
        struct append_tx t = {.a = a, .first = i, .n = per_tx};
        struct txo_error err;
        txo_error_init(&err);
        a->rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, append_tx, &t, &err);
        if (a->rc != 0)
            fprintf(stderr, "txo_bench append: %s\n", err.msg);
    }
    txo_db_close(db);
    return NULL;
}

/* The counters of the existing aggregates, so that the timed appends update them. */
static int warm_existing(const struct bench_env *env)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "
             "idempotency_key) SELECT 'account', CONCAT('e', seq - 1), 'Opened', '{}', "
             "CONCAT('warm-', seq) FROM seq_1_to_%d",
             EXISTING_AGGS);
    return bench_exec_raw(env->db, sql);
}

/* One timed run of shape; events/s into *rate. */
static int run_shape(const struct bench_env *env, enum shape shape, enum how how, unsigned run,
                     double *rate)
{
    int rc = bench_exec_raw(env->db, "TRUNCATE TABLE outbox_events");
    if (rc == 0)
        rc = bench_exec_raw(env->db, "TRUNCATE TABLE outbox_aggregates");
    if (rc == 0 && shape != SHAPE_NEW)
        rc = warm_existing(env);
    if (rc < 0)
        return rc;
    int64_t before = 0;
    rc = bench_query_i64(env->db, BENCH_SQL_EVENTS, NULL, 0, &before);
    if (rc < 0)
        return rc;
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, APPEND_THREADS + 1);
    struct appender a[APPEND_THREADS];
    for (unsigned t = 0; t < APPEND_THREADS; t++) {
        a[t] = (struct appender){.env = env,
                                 .start = &start,
                                 .shape = shape,
                                 .how = how,
                                 .thread = t,
                                 .events = APPEND_EVENTS / APPEND_THREADS,
                                 .run = run};
        pthread_create(&a[t].tid, NULL, appender_main, &a[t]);
    }
    pthread_barrier_wait(&start);
    double t0 = bench_now_s();
    for (unsigned t = 0; t < APPEND_THREADS; t++) {
        pthread_join(a[t].tid, NULL);
        if (a[t].rc != 0)
            rc = a[t].rc;
    }
    double elapsed = bench_now_s() - t0;
    pthread_barrier_destroy(&start);
    if (rc != 0)
        return rc;
    int64_t after = 0, holes = 0;
    rc = bench_query_i64(env->db, BENCH_SQL_EVENTS, NULL, 0, &after);
    if (rc == 0 && how != HOW_NONE)
        rc = bench_query_i64(env->db, BENCH_SQL_SEQUENCE_HOLES, NULL, 0, &holes);
    if (rc < 0)
        return rc;
    if (after - before != APPEND_EVENTS || holes != 0) {
        fprintf(stderr,
                "txo_bench append: %s: %lld events appended of %d, %lld aggregates with a "
                "sequence gap\n",
                shape_names[shape], (long long)(after - before), APPEND_EVENTS, (long long)holes);
        return TXO_EINVAL;
    }
    *rate = APPEND_EVENTS / elapsed;
    return 0;
}

/* The counter table's rows and data bytes, as InnoDB counts them after ANALYZE. */
static int counter_size(const struct bench_env *env, int64_t *rows, int64_t *bytes)
{
    struct txo_rows *res = NULL;
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_query(env->db, "ANALYZE TABLE outbox_aggregates", NULL, 0, &res, &err);
    txo_rows_free(res);
    if (rc < 0)
        return bench_fail(rc, &err, "ANALYZE TABLE outbox_aggregates");
    if (rc == 0)
        rc = bench_query_i64(env->db, "SELECT COUNT(*) FROM outbox_aggregates", NULL, 0, rows);
    if (rc == 0)
        rc = bench_query_i64(env->db,
                             "SELECT DATA_LENGTH FROM information_schema.TABLES WHERE "
                             "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox_aggregates'",
                             NULL, 0, bytes);
    return rc;
}

int bench_append(struct bench_env *env, const struct bench_cfg *cfg)
{
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_query(env->db, BENCH_SQL_TRIGGER_BODY, NULL, 0, &rows, &err) != 0 ||
        txo_rows_count(rows) != 1) {
        fprintf(stderr, "txo_bench append: the trigger outbox_events_sequence is missing: %s\n",
                err.msg);
        txo_rows_free(rows);
        return TXO_EINVAL;
    }
    const char *body = txo_rows_str(rows, 0, 0, NULL);
    size_t len = strlen(BENCH_SQL_TRIGGER_HEAD) + strlen(body) + 1;
    char *create = txo_malloc(len);
    if (create == NULL) {
        txo_rows_free(rows);
        return TXO_ENOMEM;
    }
    snprintf(create, len, "%s%s", BENCH_SQL_TRIGGER_HEAD, body);
    txo_rows_free(rows);

    printf("\n## Appending events: what numbering costs (%d threads, %d events per run, "
           "median of %u)\n\n",
           APPEND_THREADS, APPEND_EVENTS, cfg->runs);
    printf("%-28s %14s %14s %14s %8s %8s\n", "shape", how_names[HOW_LIBTXO], how_names[HOW_TRIGGER],
           how_names[HOW_NONE], "libtxo", "trigger");
    int rc = 0;
    int64_t agg_rows = 0, agg_bytes = 0;
    double *rates = txo_calloc((size_t)HOW_N * cfg->runs, sizeof(double));
    if (rates == NULL)
        rc = TXO_ENOMEM;
    for (int s = 0; rc == 0 && s < SHAPE_N; s++) {
        for (unsigned r = 0; rc == 0 && r < cfg->runs; r++) {
            for (int h = 0; rc == 0 && h < HOW_N; h++) {
                if (h == HOW_NONE)
                    rc = bench_exec_raw(env->db, BENCH_SQL_TRIGGER_DROP);
                if (rc == 0)
                    rc = run_shape(env, (enum shape)s, (enum how)h, HOW_N * r + (unsigned)h,
                                   &rates[h * cfg->runs + r]);
                if (h == HOW_NONE) {
                    int again = bench_exec_raw(env->db, create); /* always put it back */
                    if (rc == 0)
                        rc = again;
                }
                if (rc == 0 && s == SHAPE_NEW && r == 0 && h == HOW_LIBTXO)
                    rc = counter_size(env, &agg_rows, &agg_bytes);
            }
        }
        if (rc == 0) {
            double m[HOW_N];
            for (int h = 0; h < HOW_N; h++)
                m[h] = bench_median(&rates[h * cfg->runs], cfg->runs);
            printf("%-28s %14.0f %14.0f %14.0f %7.0f%% %7.0f%%\n", shape_names[s], m[HOW_LIBTXO],
                   m[HOW_TRIGGER], m[HOW_NONE], 100.0 * m[HOW_LIBTXO] / m[HOW_NONE],
                   100.0 * m[HOW_TRIGGER] / m[HOW_NONE]);
            fflush(stdout);
        }
    }
    if (rc == 0 && agg_rows > 0)
        printf("\noutbox_aggregates: one row per aggregate, %lld bytes of data pages per row "
               "(%lld rows after a run of the first shape)\n",
               (long long)(agg_bytes / agg_rows), (long long)agg_rows);
    txo_free(rates);
    txo_free(create);
    return rc;
}
