/*
 * txo_bench relay: how fast the outbox relay drains a backlog, and whether the rate stays flat
 * while the table fills with PUBLISHED rows (a reference Python relay, one row at a time,
 * does 1,442 events/s, falling from 2,300 to 1,200; target >= 20,000 events/s and flat).
 *
 * One drain:
 *   1. outbox_events is emptied (TRUNCATE) and filled with N PENDING events by multi-row
 *      INSERTs of 1,000 rows (bound parameters), ~200-byte JSON payloads, unique keys;
 *   2. `relays` threads, each with its own connection and a null publisher, call
 *      txo_relay_run_once() in a loop; after each batch the events it published are added to
 *      one atomic counter and (time, cumulative count) is recorded; the threads stop when
 *      the count reaches N (or nothing is due any more);
 *   3. afterwards every row must be PUBLISHED and the counter must equal N, or the bench
 *      fails: a drain that loses or duplicates events is not a measurement.
 * Figures per drain, from that timeline: overall events/s (N / time to 100%), first-10% events/s
 * (events of the batches up to the one that reached 10% / their time), last-10% events/s
 * (events after the last batch at or below 90% / time since it) and their ratio (1.0 = flat),
 * plus redo-log syncs per batch (Innodb_os_log_fsyncs, or Innodb_log_writes on MariaDB 10.8+,
 * delta / batches: with innodb_flush_log_at_trx_commit=1 each commit costs one unless group
 * commit merges them, so one relay should show ~2: the claim and the mark).
 *
 * The "behind published rows" line first adds 10 x N PUBLISHED rows (1,000,000 for the
 * default N) with one INSERT ... SELECT from MariaDB's Sequence engine, then drains N PENDING
 * rows R times without emptying the table, so the claim has to find PENDING rows among
 * >= 10 N PUBLISHED ones: it must use idx_outbox_due for the rate to hold.
 *
 * Threads: the main thread fills and verifies; relay threads share only struct drain (atomics,
 * and timeline slots each written by one thread and read after pthread_join).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

/* Rows per multi-row INSERT of the fill. */
#define FILL_ROWS_PER_STMT 1000
#define FILL_COLS          5
/* How often a relay that found nothing due looks again while others still hold rows. */
#define EMPTY_RETRIES  200
#define EMPTY_SLEEP_NS 2000000L
/* Transient errors tolerated per relay thread before the drain counts as failed. */
#define TRANSIENT_RETRIES 20

/*
 * Statements of the relay bench. The fill statement is BENCH_SQL_FILL_HEAD followed by
 * FILL_ROWS_PER_STMT copies of BENCH_SQL_FILL_ROW joined by commas: only the placeholder
 * count is generated (like txo_sql_in_list()), every value is bound.
 */

/* Appends PENDING rows. Index: PRIMARY (auto-increment, appended at the end) and the four
 * secondary indexes. Locks: the new rows. Isolation: READ COMMITTED (own transaction). */
#define BENCH_SQL_FILL_HEAD                                                                        \
    "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "               \
    "idempotency_key) VALUES "
#define BENCH_SQL_FILL_ROW "(?,?,?,?,?)"

/* Background of PUBLISHED rows from the Sequence engine (no input, so run as raw SQL).
 * Locks: the new rows. One statement, its own transaction. */
#define BENCH_SQL_FILL_PUBLISHED_FMT                                                               \
    "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, "       \
    "idempotency_key, published_time) SELECT 'order', seq, 'OrderCreated', "                       \
    "CONCAT('{\"order_id\":', seq, ',\"customer_id\":', MOD(seq, 9973), ',\"note\":\"', "          \
    "REPEAT('x', 150), '\"}'), 'PUBLISHED', CONCAT('published:', seq), NOW(6) "                    \
    "FROM seq_1_to_%zu"

/* Empties the outbox between drains (DDL, no input). */
#define BENCH_SQL_TRUNCATE_OUTBOX "TRUNCATE TABLE outbox_events"

/* Verification: full scans of outbox_events (the bench is the only client). */
#define BENCH_SQL_COUNT_NOT_PUBLISHED                                                              \
    "SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED'"
#define BENCH_SQL_COUNT_ALL  "SELECT COUNT(*) FROM outbox_events"
#define BENCH_SQL_COUNT_DEAD "SELECT COUNT(*) FROM dead_letter_events"

/* One configuration of the table. */
struct relay_case {
    enum txo_claim_strategy claim;
    bool held; /* claim mode transaction (claim, publish, mark in one transaction); else lease */
    unsigned relays;
    unsigned batch;
    bool behind_published; /* drain behind 10 x N PUBLISHED rows */
    /* The ordering section (zero in the first table: ordering by aggregate, one aggregate per
     * event, so every event is the head of its aggregate): */
    enum txo_relay_ordering ordering;
    unsigned events_per_aggregate; /* 0: one aggregate per event; else N / this aggregates,
                                      filled round robin */
    unsigned aggregates;           /* instead of events_per_aggregate: this many, round robin */
    bool hot;                      /* every 5th event in one hot aggregate, the rest alone */
    unsigned parked_per_mille;     /* aggregates whose first event is FAILED (dead-lettered) */
    const char *shape;             /* the ordering table's label of the backlog */
};

/*
 * The ordering section parks aggregates by making their first event FAILED, as a dead letter
 * would, before the drain; the events behind it stay PENDING. Index: PRIMARY (range id <=
 * aggregates: in a round-robin fill the first event of aggregate a has id a). Locks: those
 * rows. Params: aggregates, per-mille step (every step-th aggregate).
 */
#define BENCH_SQL_PARK_AGGREGATES                                                                  \
    "UPDATE outbox_events SET status = 'FAILED', attempts = 10, last_error = 'bench: parked' "     \
    "WHERE id <= ? AND aggregate_id % ? = 0"

/* ... and parks their aggregates as the relay's mark would (outbox_parked). Index: the FAILED
 * range of idx_outbox_due. Locks: the new outbox_parked rows. */
#define BENCH_SQL_PARK_ROWS                                                                        \
    "INSERT INTO outbox_parked (aggregate_type, aggregate_id, event_id) "                          \
    "SELECT aggregate_type, aggregate_id, id FROM outbox_events WHERE status = 'FAILED'"

/* Between drains: no parked aggregates, no shard holders, no members. */
#define BENCH_SQL_CLEAR_PARKED  "DELETE FROM outbox_parked"
#define BENCH_SQL_CLEAR_SHARDS  "UPDATE outbox_shards SET owner = NULL, lease_until = NULL"
#define BENCH_SQL_CLEAR_MEMBERS "DELETE FROM outbox_relays"

/* The events the parked aggregates hold back (their first ones included). */
#define BENCH_SQL_COUNT_PARKED "SELECT COUNT(*) FROM outbox_events WHERE aggregate_id % ? = 0"

/* The figures of one drain. */
struct drain_result {
    double overall; /* events/s, whole drain */
    double first10; /* events/s, first 10% */
    double last10;  /* events/s, last 10% */
    double ratio;   /* last10 / first10 */
    double syncs_per_batch;
    double fill_s; /* seconds to insert the N PENDING rows */
};

struct drain_point {
    double t;
    uint64_t cum;
};

/* What the relay threads of one drain share. */
struct drain {
    const struct bench_env *env;
    enum txo_claim_strategy claim;
    enum txo_relay_claim_mode mode;
    enum txo_relay_ordering ordering;
    unsigned batch;
    uint64_t target;
    pthread_barrier_t start;
    atomic_uint_fast64_t total;   /* events published so far, all relays */
    atomic_uint_fast64_t batches; /* batches marked, all relays */
    atomic_bool stop;
    atomic_int failed_rc; /* first error of any relay thread */
    /* One point per marked batch: (time, cumulative count after it). Slots are taken with
     * an atomic index; read by the main thread after pthread_join. */
    struct drain_point *points;
    size_t points_cap;
    atomic_size_t n_points;
    double t0; /* written by the barrier's serial thread */
};

struct relay_thread {
    struct drain *d;
    unsigned index;
    pthread_t tid;
    bool unsupported; /* the server has no SKIP LOCKED */
};

static void sleep_ns(long ns)
{
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

static void record_point(struct drain *d, uint64_t before, uint64_t delta)
{
    double now = bench_now_s();
    size_t i = atomic_fetch_add(&d->n_points, 1);
    if (i < d->points_cap)
        d->points[i] = (struct drain_point){now, before + delta};
    if (before < d->target && before + delta >= d->target)
        atomic_store(&d->stop, true);
}

static int cmp_point(const void *a, const void *b)
{
    const struct drain_point *x = a;
    const struct drain_point *y = b;
    return (x->cum > y->cum) - (x->cum < y->cum);
}

/*
 * The figures from the batch timeline, at batch granularity so that no window is empty:
 * first 10% = events up to the first batch that reached 10% of N over its time; last 10% =
 * events after the last batch that stayed at or below 90% over the time since it.
 */
static void compute_rates(struct drain *d, struct drain_result *res)
{
    size_t n = atomic_load(&d->n_points);
    if (n > d->points_cap)
        n = d->points_cap;
    qsort(d->points, n, sizeof(*d->points), cmp_point);
    double t_end = n > 0 ? d->points[n - 1].t : d->t0;
    uint64_t total = n > 0 ? d->points[n - 1].cum : 0;
    struct drain_point first = {t_end, total};
    struct drain_point before_last = {d->t0, 0};
    for (size_t i = 0; i < n; i++) {
        if (d->points[i].cum * 10 >= d->target) {
            first = d->points[i];
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (d->points[i].cum * 10 <= d->target * 9)
            before_last = d->points[i];
    }
    res->overall = t_end > d->t0 ? (double)total / (t_end - d->t0) : 0.0;
    res->first10 = first.t > d->t0 ? (double)first.cum / (first.t - d->t0) : 0.0;
    res->last10 =
        t_end > before_last.t ? (double)(total - before_last.cum) / (t_end - before_last.t) : 0.0;
    res->ratio = res->first10 > 0 ? res->last10 / res->first10 : 0.0;
}

static void fail_drain(struct drain *d, int rc, const struct txo_error *err, const char *what)
{
    int expected = 0;
    if (atomic_compare_exchange_strong(&d->failed_rc, &expected, rc))
        bench_fail(rc, err, what);
    atomic_store(&d->stop, true);
}

static void *relay_thread_main(void *arg)
{
    struct relay_thread *t = arg;
    struct drain *d = t->d;
    struct txo_db *db = NULL;
    struct txo_publisher *pub = NULL;
    struct txo_relay *relay = NULL;
    struct txo_error err;
    char relay_id[32];
    bool ready = false;

    txo_error_init(&err);
    snprintf(relay_id, sizeof(relay_id), "bench-relay-%u", t->index);
    struct txo_relay_opts ro;
    txo_relay_opts_init(&ro);
    ro.relay_id = relay_id;
    ro.claim = d->claim;
    ro.mode = d->mode;
    ro.ordering = d->ordering;
    ro.batch_size = d->batch;

    int rc = bench_connect(d->env, &db);
    if (rc == 0)
        rc = txo_publisher_null_new(&pub, &err);
    if (rc == 0)
        rc = txo_relay_new(db, pub, &ro, &relay, &err);
    if (rc == TXO_EUNSUPPORTED)
        t->unsupported = true;
    else if (rc < 0)
        fail_drain(d, rc, &err, "starting a relay");
    ready = rc == 0;

    /* Ordered relays share the shards: three membership rounds (join; give back above the
     * share; take up to it), each after every relay finished the one before, so the drain
     * starts balanced as a long-running group would be. */
    for (int round = 0; round < 3; round++) {
        pthread_barrier_wait(&d->start);
        if (ready && d->ordering == TXO_RELAY_ORDER_AGGREGATE &&
            txo_relay_rebalance(relay, &err) < 0)
            fail_drain(d, TXO_EDB, &err, "balancing the relays' shards");
    }

    /* Everybody (ready or not) meets here, so the clock starts once all are connected. */
    if (pthread_barrier_wait(&d->start) == PTHREAD_BARRIER_SERIAL_THREAD)
        d->t0 = bench_now_s();
    if (!ready || t->unsupported) {
        atomic_store(&d->stop, true);
        goto out;
    }

    uint64_t published_before = 0;
    unsigned empty = 0;
    unsigned transient = 0;
    while (!atomic_load(&d->stop)) {
        size_t claimed = 0;
        txo_error_init(&err);
        rc = txo_relay_run_once(relay, &claimed, &err);
        if (rc < 0 && txo_err_is_transient(rc) && ++transient <= TRANSIENT_RETRIES)
            continue;
        if (rc < 0) {
            fail_drain(d, rc, &err, "txo_relay_run_once");
            break;
        }
        struct txo_relay_stats st;
        txo_relay_get_stats(relay, &st);
        uint64_t delta = st.published - published_before;
        published_before = st.published;
        if (delta > 0) {
            uint64_t before = atomic_fetch_add(&d->total, delta);
            atomic_fetch_add(&d->batches, 1);
            record_point(d, before, delta);
        }
        if (claimed > 0) {
            empty = 0;
            continue;
        }
        /* Nothing due: done, unless another relay still holds the last rows (they may come
         * back if its publish fails), so look again a few times first. */
        if (atomic_load(&d->total) >= d->target || ++empty > EMPTY_RETRIES)
            break;
        sleep_ns(EMPTY_SLEEP_NS);
    }
out:
    txo_relay_free(relay);
    txo_publisher_free(pub);
    txo_db_close(db);
    return NULL;
}

/* See bench.h. */
int bench_fill_pending(struct txo_db *db, size_t n, const char *prefix, size_t aggregates, bool hot)
{
    enum { PAYLOAD_MAX = 256, KEY_MAX = 48 };
    int rc = 0;
    char *sql_full = NULL;
    char *sql_rest = NULL;
    struct txo_param *params = txo_calloc(FILL_ROWS_PER_STMT * FILL_COLS, sizeof(*params));
    char *payloads = txo_malloc((size_t)FILL_ROWS_PER_STMT * PAYLOAD_MAX);
    char *keys = txo_malloc((size_t)FILL_ROWS_PER_STMT * KEY_MAX);
    if (!params || !payloads || !keys) {
        rc = bench_fail(TXO_ENOMEM, NULL, "allocating the fill buffers");
        goto out;
    }

    uint64_t rng = UINT64_C(0x9E3779B97F4A7C15);
    for (size_t done = 0; done < n;) {
        size_t rows = n - done < FILL_ROWS_PER_STMT ? n - done : FILL_ROWS_PER_STMT;
        char **sqlp = rows == FILL_ROWS_PER_STMT ? &sql_full : &sql_rest;
        if (*sqlp == NULL) {
            size_t head = strlen(BENCH_SQL_FILL_HEAD);
            size_t row = strlen(BENCH_SQL_FILL_ROW);
            char *s = txo_malloc(head + rows * (row + 1) + 1);
            if (!s) {
                rc = bench_fail(TXO_ENOMEM, NULL, "allocating the fill statement");
                goto out;
            }
            memcpy(s, BENCH_SQL_FILL_HEAD, head);
            char *p = s + head;
            for (size_t i = 0; i < rows; i++) {
                if (i > 0)
                    *p++ = ',';
                memcpy(p, BENCH_SQL_FILL_ROW, row);
                p += row;
            }
            *p = '\0';
            *sqlp = s;
        }
        for (size_t i = 0; i < rows; i++) {
            size_t seq = done + i + 1;
            uint64_t r = bench_rand(&rng);
            unsigned qty = 1 + (unsigned)(r % 3);
            unsigned price = 999 + (unsigned)((r >> 8) % 200000);
            char *payload = payloads + i * PAYLOAD_MAX;
            char *key = keys + i * KEY_MAX;
            /* ~200 bytes, shaped like the order service's OrderCreated payload. */
            int len = snprintf(payload, PAYLOAD_MAX,
                               "{\"order_id\":%zu,\"customer_id\":%u,\"items\":[{\"sku\":"
                               "\"sku-%04u\",\"qty\":%u,\"price_cents\":%u}],\"total_cents\":%u,"
                               "\"created_at\":\"2026-11-30T15:37:00.123456Z\",\"note\":\"%.*s\"}",
                               seq, (unsigned)((r >> 20) % 100000), (unsigned)((r >> 40) % 5000),
                               qty, price, qty * price, 24, "bench-payload-padding-xxxxxxxxxx");
            snprintf(key, KEY_MAX, "%s:%zu", prefix, seq);
            struct txo_param *p = params + i * FILL_COLS;
            p[0] = txo_p_str("order");
            int64_t agg = (int64_t)(aggregates > 0 ? (seq - 1) % aggregates + 1 : seq);
            if (hot && seq % 5 == 0)
                agg = 0;
            p[1] = txo_p_i64(agg);
            p[2] = txo_p_str("OrderCreated");
            p[3] = txo_p_strn(payload, (size_t)len);
            p[4] = txo_p_str(key);
        }
        struct txo_error err;
        txo_error_init(&err);
        rc = txo_db_exec(db, *sqlp, params, rows * FILL_COLS, NULL, &err);
        if (rc < 0) {
            bench_fail(rc, &err, "filling outbox_events");
            goto out;
        }
        done += rows;
    }
out:
    txo_free(sql_full);
    txo_free(sql_rest);
    txo_free(params);
    txo_free(payloads);
    txo_free(keys);
    return rc;
}

/* Every row but the `parked` ones must be PUBLISHED, there must be `rows` of them and no dead
 * letters. */
static int verify_drain(struct txo_db *db, uint64_t rows, uint64_t parked)
{
    int64_t not_published = 0;
    int64_t all = 0;
    int64_t dead = 0;
    int rc = bench_query_i64(db, BENCH_SQL_COUNT_NOT_PUBLISHED, NULL, 0, &not_published);
    if (rc == 0)
        rc = bench_query_i64(db, BENCH_SQL_COUNT_ALL, NULL, 0, &all);
    if (rc == 0)
        rc = bench_query_i64(db, BENCH_SQL_COUNT_DEAD, NULL, 0, &dead);
    if (rc < 0)
        return rc;
    if ((uint64_t)not_published != parked || (uint64_t)all != rows || dead != 0) {
        fprintf(stderr,
                "txo_bench: ERROR: relay drain lost events: %lld of %llu rows not PUBLISHED, "
                "%lld rows in the table, %lld dead letters\n",
                (long long)not_published, (unsigned long long)rows, (long long)all,
                (long long)dead);
        return TXO_EDB;
    }
    return 0;
}

/*
 * One drain of n PENDING events (already in the table) by c->relays threads. Fills *res.
 * unsupported is set (and 0 returned) when the server cannot run c->claim.
 */
static int drain_once(struct bench_env *env, const struct relay_case *c, uint64_t n,
                      struct drain_result *res, bool *unsupported)
{
    struct drain d;
    struct relay_thread threads[2];
    unsigned started = 0;
    int rc = 0;

    if (c->relays < 1 || c->relays > TXO_ARRAY_LEN(threads))
        return bench_fail(TXO_EINVAL, NULL, "relay count out of range");
    memset(&d, 0, sizeof(d));
    d.env = env;
    d.claim = c->claim;
    d.ordering = c->ordering;
    d.mode = c->held ? TXO_RELAY_CLAIM_TRANSACTION : TXO_RELAY_CLAIM_LEASE;
    d.batch = c->batch;
    d.target = n;
    atomic_init(&d.total, 0);
    atomic_init(&d.batches, 0);
    atomic_init(&d.stop, false);
    atomic_init(&d.failed_rc, 0);
    atomic_init(&d.n_points, 0);
    /* Every marked batch holds at least one event; the margin covers batches that race past
     * the target. */
    d.points_cap = (size_t)n + 64;
    d.points = txo_calloc(d.points_cap, sizeof(*d.points));
    if (!d.points)
        return bench_fail(TXO_ENOMEM, NULL, "allocating the drain timeline");
    if (pthread_barrier_init(&d.start, NULL, c->relays) != 0) {
        rc = bench_fail(TXO_ENOMEM, NULL, "pthread_barrier_init");
        goto out;
    }

    int64_t syncs0 = bench_log_syncs(env->db);
    for (unsigned i = 0; i < c->relays; i++) {
        threads[i] = (struct relay_thread){.d = &d, .index = i};
        if (pthread_create(&threads[i].tid, NULL, relay_thread_main, &threads[i]) != 0) {
            /* The barrier would never open: no way to recover cleanly. */
            fprintf(stderr, "txo_bench: pthread_create failed\n");
            abort();
        }
        started++;
    }
    for (unsigned i = 0; i < started; i++)
        pthread_join(threads[i].tid, NULL);
    int64_t syncs1 = bench_log_syncs(env->db);
    pthread_barrier_destroy(&d.start);

    *unsupported = false;
    for (unsigned i = 0; i < started; i++)
        *unsupported = *unsupported || threads[i].unsupported;
    if (*unsupported)
        goto out;
    rc = atomic_load(&d.failed_rc);
    if (rc < 0)
        goto out;
    uint64_t total = atomic_load(&d.total);
    if (total != n) {
        fprintf(stderr, "txo_bench: ERROR: relays published %llu events, expected %llu\n",
                (unsigned long long)total, (unsigned long long)n);
        rc = TXO_EDB;
        goto out;
    }

    compute_rates(&d, res);
    uint64_t batches = atomic_load(&d.batches);
    res->syncs_per_batch = syncs0 >= 0 && syncs1 >= 0 && batches > 0
                               ? (double)(syncs1 - syncs0) / (double)batches
                               : -1.0;
out:
    txo_free(d.points);
    return rc;
}

static void print_table_head(void)
{
    printf("%-13s %-11s %6s %6s %12s %12s %12s %10s %12s %8s\n", "claim", "mode", "relays", "batch",
           "events/s", "first10%/s", "last10%/s", "last/first", "syncs/batch", "fill s");
    printf("%-13s %-11s %6s %6s %12s %12s %12s %10s %12s %8s\n", "-------------", "-----------",
           "------", "------", "------------", "------------", "------------", "----------",
           "------------", "--------");
}

static const char *mode_name(const struct relay_case *c)
{
    return txo_relay_claim_mode_name(c->held ? TXO_RELAY_CLAIM_TRANSACTION : TXO_RELAY_CLAIM_LEASE);
}

static void print_row(const struct relay_case *c, const struct drain_result *m, const char *note)
{
    printf("%-13s %-11s %6u %6u %12.0f %12.0f %12.0f %10.2f %12.2f %8.2f%s%s\n",
           txo_claim_strategy_name(c->claim), mode_name(c), c->relays, c->batch, m->overall,
           m->first10, m->last10, m->ratio, m->syncs_per_batch, m->fill_s, note ? "  " : "",
           note ? note : "");
    fflush(stdout);
}

/* Runs one configuration cfg->runs times and prints the medians. */
static int run_case(struct bench_env *env, const struct bench_cfg *cfg, const struct relay_case *c,
                    uint64_t background)
{
    int rc = 0;
    unsigned runs = cfg->runs;
    double *v = txo_calloc((size_t)runs * 6, sizeof(double));
    if (!v)
        return bench_fail(TXO_ENOMEM, NULL, "allocating results");

    bool unsupported = false;
    for (unsigned r = 0; r < runs; r++) {
        char prefix[32];
        if (!c->behind_published) {
            rc = bench_exec_raw(env->db, BENCH_SQL_TRUNCATE_OUTBOX);
            if (rc == 0)
                rc = bench_exec_raw(env->db, BENCH_SQL_CLEAR_PARKED);
            if (rc < 0)
                goto out;
        }
        rc = bench_exec_raw(env->db, BENCH_SQL_CLEAR_SHARDS);
        if (rc == 0)
            rc = bench_exec_raw(env->db, BENCH_SQL_CLEAR_MEMBERS);
        if (rc < 0)
            goto out;
        snprintf(prefix, sizeof(prefix), "bench:%u", r);
        double f0 = bench_now_s();
        size_t aggregates = c->events_per_aggregate > 0 ? cfg->events / c->events_per_aggregate : 0;
        if (c->events_per_aggregate > 0 && aggregates == 0)
            aggregates = 1;
        if (c->aggregates > 0)
            aggregates = c->aggregates;
        rc = bench_fill_pending(env->db, cfg->events, prefix, aggregates, c->hot);
        if (rc < 0)
            goto out;
        int64_t parked = 0;
        if (c->parked_per_mille > 0 && aggregates > 0) {
            struct txo_param pp[] = {txo_p_i64((int64_t)aggregates),
                                     txo_p_i64(1000 / c->parked_per_mille)};
            struct txo_error err;
            txo_error_init(&err);
            rc = txo_db_exec(env->db, BENCH_SQL_PARK_AGGREGATES, pp, 2, NULL, &err);
            if (rc == 0)
                rc = txo_db_exec(env->db, BENCH_SQL_PARK_ROWS, NULL, 0, NULL, &err);
            if (rc == 0)
                rc = bench_query_i64(env->db, BENCH_SQL_COUNT_PARKED, &pp[1], 1, &parked);
            if (rc < 0) {
                bench_fail(rc, &err, "parking aggregates");
                goto out;
            }
        }
        struct drain_result res;
        memset(&res, 0, sizeof(res));
        res.fill_s = bench_now_s() - f0;
        rc = drain_once(env, c, cfg->events - (uint64_t)parked, &res, &unsupported);
        if (rc < 0 || unsupported)
            goto out;
        uint64_t rows =
            c->behind_published ? background + (uint64_t)(r + 1) * cfg->events : cfg->events;
        rc = verify_drain(env->db, rows, (uint64_t)parked);
        if (rc < 0)
            goto out;
        v[0 * runs + r] = res.overall;
        v[1 * runs + r] = res.first10;
        v[2 * runs + r] = res.last10;
        v[3 * runs + r] = res.ratio;
        v[4 * runs + r] = res.syncs_per_batch;
        v[5 * runs + r] = res.fill_s;
    }
    struct drain_result m = {
        .overall = bench_median(v + 0 * runs, runs),
        .first10 = bench_median(v + 1 * runs, runs),
        .last10 = bench_median(v + 2 * runs, runs),
        .ratio = bench_median(v + 3 * runs, runs),
        .syncs_per_batch = bench_median(v + 4 * runs, runs),
        .fill_s = bench_median(v + 5 * runs, runs),
    };
    char note[96];
    note[0] = '\0';
    if (c->behind_published)
        snprintf(note, sizeof(note), "behind >= %llu PUBLISHED rows",
                 (unsigned long long)background);
    else if (c->shape != NULL)
        snprintf(note, sizeof(note), "%-8s %s%s", txo_relay_ordering_name(c->ordering), c->shape,
                 c->parked_per_mille > 0 ? ", 1% of aggregates parked" : "");
    else if (c->events_per_aggregate > 0)
        snprintf(note, sizeof(note), "ordering %s, %u events per aggregate%s",
                 txo_relay_ordering_name(c->ordering), c->events_per_aggregate,
                 c->parked_per_mille > 0 ? ", 1% of aggregates parked" : "");
    print_row(c, &m, note[0] ? note : NULL);
out:
    if (unsupported) {
        printf("%-13s %-11s %6u %6u  n/a: the server has no SELECT ... FOR UPDATE SKIP LOCKED\n",
               txo_claim_strategy_name(c->claim), mode_name(c), c->relays, c->batch);
        rc = 0;
    }
    txo_free(v);
    return rc;
}

int bench_relay(struct bench_env *env, const struct bench_cfg *cfg)
{
    static const struct relay_case cases[] = {
        {.claim = TXO_CLAIM_SKIP_LOCKED, .relays = 1, .batch = 500, .behind_published = false},
        {.claim = TXO_CLAIM_SKIP_LOCKED, .relays = 2, .batch = 500, .behind_published = false},
        {.claim = TXO_CLAIM_UPDATE_LIMIT, .relays = 1, .batch = 500, .behind_published = false},
        {.claim = TXO_CLAIM_UPDATE_LIMIT, .relays = 2, .batch = 500, .behind_published = false},
        {.claim = TXO_CLAIM_SKIP_LOCKED, .relays = 1, .batch = 1000, .behind_published = false},
        {.claim = TXO_CLAIM_SKIP_LOCKED, .relays = 1, .batch = 200, .behind_published = false},
        {.claim = TXO_CLAIM_SKIP_LOCKED, .held = true, .relays = 1, .batch = 500},
        {.claim = TXO_CLAIM_SKIP_LOCKED, .held = true, .relays = 2, .batch = 500},
        {.claim = TXO_CLAIM_SKIP_LOCKED, .held = true, .relays = 1, .batch = 1000},
    };
    int rc = 0;

    printf("== relay drain: %zu PENDING events, null publisher, medians of %u runs ==\n",
           cfg->events, cfg->runs);
    printf("   (Python reference relay: 1,442 events/s, 2,300 -> 1,200 as the table fills; "
           "target >= 20,000 and flat)\n");
    print_table_head();
    for (size_t i = 0; i < TXO_ARRAY_LEN(cases); i++) {
        rc = run_case(env, cfg, &cases[i], 0);
        if (rc < 0)
            return rc;
    }

    /* The same drain behind 10 x N PUBLISHED rows (1,000,000 for the default N). */
    size_t background = cfg->events * 10;
    char sql[sizeof(BENCH_SQL_FILL_PUBLISHED_FMT) + 32];
    rc = bench_exec_raw(env->db, BENCH_SQL_TRUNCATE_OUTBOX);
    if (rc < 0)
        return rc;
    snprintf(sql, sizeof(sql), BENCH_SQL_FILL_PUBLISHED_FMT, background);
    double t0 = bench_now_s();
    rc = bench_exec_raw(env->db, sql);
    if (rc < 0)
        return rc;
    double fill_s = bench_now_s() - t0;
    static const struct relay_case behind = {
        .claim = TXO_CLAIM_SKIP_LOCKED, .relays = 1, .batch = 500, .behind_published = true};
    rc = run_case(env, cfg, &behind, background);
    if (rc < 0)
        return rc;
    printf("   (%zu PUBLISHED rows inserted in %.1f s by INSERT ... SELECT FROM seq_1_to_%zu; "
           "the table grows by N PUBLISHED rows per run)\n\n",
           background, fill_s, background);
    fflush(stdout);
    rc = bench_exec_raw(env->db, BENCH_SQL_TRUNCATE_OUTBOX);
    if (rc < 0)
        return rc;

    return bench_ordering(env, cfg);
}

/*
 * Ordering by aggregate against ordering none on the same backlogs, in one run: the shapes a
 * busy system leaves (one event per aggregate; 10 each; ~333 each over 300 aggregates, what an
 * outage leaves on busy aggregates; one hot aggregate with a fifth of the events among cold
 * ones; three very deep ones), one and two relays, leased and held claims, and a drain with 1%
 * of the aggregates parked by a dead letter. Every backlog is filled round robin, so a batch
 * holds events of many aggregates, several of each on the deep shapes.
 */
int bench_ordering(struct bench_env *env, const struct bench_cfg *cfg)
{
    struct shape {
        const char *label;
        unsigned per_aggregate, aggregates;
        bool hot;
    };
    char label[4][48];
    snprintf(label[0], sizeof(label[0]), "%zu aggregates x 1", cfg->events);
    snprintf(label[1], sizeof(label[1]), "%zu aggregates x 10", cfg->events / 10);
    snprintf(label[2], sizeof(label[2]), "300 aggregates x %zu", cfg->events / 300);
    snprintf(label[3], sizeof(label[3]), "3 aggregates x %zu", cfg->events / 3);
    const struct shape shapes[] = {
        {label[0], 0, 0, false},   {label[1], 10, 0, false},
        {label[2], 0, 300, false}, {"1 hot aggregate (20%) + cold x 1", 0, 0, true},
        {label[3], 0, 3, false},
    };
    int rc = 0;
    printf("== relay ordering: %zu PENDING events per drain, null publisher, batch 500, medians "
           "of %u runs ==\n",
           cfg->events, cfg->runs);
    print_table_head();
    for (size_t k = 0; k < TXO_ARRAY_LEN(shapes); k++) {
        const struct shape *sh = &shapes[k];
        const struct relay_case cases[] = {
            {.claim = TXO_CLAIM_SKIP_LOCKED, .relays = 1, .ordering = TXO_RELAY_ORDER_NONE},
            {.claim = TXO_CLAIM_SKIP_LOCKED, .relays = 1, .ordering = TXO_RELAY_ORDER_AGGREGATE},
            {.claim = TXO_CLAIM_SKIP_LOCKED, .relays = 2, .ordering = TXO_RELAY_ORDER_NONE},
            {.claim = TXO_CLAIM_SKIP_LOCKED, .relays = 2, .ordering = TXO_RELAY_ORDER_AGGREGATE},
            {.claim = TXO_CLAIM_SKIP_LOCKED,
             .held = true,
             .relays = 1,
             .ordering = TXO_RELAY_ORDER_NONE},
            {.claim = TXO_CLAIM_SKIP_LOCKED,
             .held = true,
             .relays = 1,
             .ordering = TXO_RELAY_ORDER_AGGREGATE},
        };
        for (size_t i = 0; i < TXO_ARRAY_LEN(cases); i++) {
            struct relay_case c = cases[i];
            c.batch = 500;
            c.events_per_aggregate = sh->per_aggregate;
            c.aggregates = sh->aggregates;
            c.hot = sh->hot;
            c.shape = sh->label;
            rc = run_case(env, cfg, &c, 0);
            if (rc < 0)
                return rc;
        }
    }
    const struct relay_case parked[] = {
        {.claim = TXO_CLAIM_SKIP_LOCKED,
         .relays = 1,
         .batch = 500,
         .ordering = TXO_RELAY_ORDER_AGGREGATE,
         .events_per_aggregate = 20,
         .parked_per_mille = 10,
         .shape = "20 per aggregate"},
        {.claim = TXO_CLAIM_UPDATE_LIMIT,
         .relays = 1,
         .batch = 500,
         .ordering = TXO_RELAY_ORDER_NONE,
         .events_per_aggregate = 20,
         .shape = "20 per aggregate"},
        {.claim = TXO_CLAIM_UPDATE_LIMIT,
         .relays = 1,
         .batch = 500,
         .ordering = TXO_RELAY_ORDER_AGGREGATE,
         .events_per_aggregate = 20,
         .shape = "20 per aggregate"},
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(parked); i++) {
        rc = run_case(env, cfg, &parked[i], 0);
        if (rc < 0)
            return rc;
    }
    printf("\n");
    fflush(stdout);
    return bench_exec_raw(env->db, BENCH_SQL_TRUNCATE_OUTBOX);
}
