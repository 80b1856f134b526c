/*
 * txo_bench orders: the order saga end to end (a Python reference implementation does
 * 178 orders/s sequential, 280/s with 4 processes; target >= 1,000 orders/s with 4 workers).
 *
 * One order, in two flows:
 *   separate  orders_create() (1-2 items: orders, order_items, OrderCreated in one
 *             transaction) + orders_start_saga() + orders_run_saga(), as when a consumer starts
 *             the saga from the OrderCreated event;
 *   combined  orders_create_with_saga() (order, items, event and saga in one transaction) +
 *             orders_run_saga(), as a synchronous API would;
 * each run without faults until the saga is COMPLETED and the order CONFIRMED (ReserveStock,
 * ChargePayment, CreateShipment: one transaction each). Latency is measured per order from
 * before the create to after orders_run_saga().
 *
 * Configurations: 1 thread x ORDERS_PER_WORKER orders, and 4 threads x ORDERS_PER_WORKER
 * orders, each thread with its own connection. Every run starts from emptied tables and
 * NUM_SKUS SKUs with STOCK_PER_SKU each, so runs are identical. Afterwards (or the bench
 * fails): every order CONFIRMED, every saga COMPLETED, one payment and one shipment per order,
 * available + reserved of every SKU equal to its initial stock, and reserved equal to the sum
 * of the ordered quantities of that SKU.
 *
 * Threads: workers share only the start barrier and their own struct order_worker (read by
 * the main thread after pthread_join).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "order_saga.h"
#include "orders.h"

#define ORDERS_PER_WORKER 2000
#define NUM_SKUS          8
#define STOCK_PER_SKU     1000000000
#define MAX_WORKERS       4

/*
 * Statements of the orders bench. The resets are DDL/SET without input (raw SQL, between
 * runs, the bench being the only client); the checks are full scans after a run.
 */
#define BENCH_SQL_FK_OFF "SET SESSION foreign_key_checks = 0"
#define BENCH_SQL_FK_ON  "SET SESSION foreign_key_checks = 1"
static const char *const reset_sql[] = {
    "TRUNCATE TABLE order_items", "TRUNCATE TABLE payments",
    "TRUNCATE TABLE shipments",   "TRUNCATE TABLE inventory_reservations",
    "TRUNCATE TABLE saga_steps",  "TRUNCATE TABLE saga_instances",
    "TRUNCATE TABLE orders",      "TRUNCATE TABLE outbox_events",
    "TRUNCATE TABLE inventory",
};
#define BENCH_SQL_ORDERS_ALL           "SELECT COUNT(*) FROM orders"
#define BENCH_SQL_ORDERS_NOT_CONFIRMED "SELECT COUNT(*) FROM orders WHERE status <> 'CONFIRMED'"
#define BENCH_SQL_SAGAS_ALL            "SELECT COUNT(*) FROM saga_instances"
#define BENCH_SQL_SAGAS_NOT_COMPLETED                                                              \
    "SELECT COUNT(*) FROM saga_instances WHERE status <> 'COMPLETED'"
#define BENCH_SQL_PAYMENTS_ALL  "SELECT COUNT(*) FROM payments"
#define BENCH_SQL_SHIPMENTS_ALL "SELECT COUNT(*) FROM shipments"
/* SKUs whose stock was not conserved (param: the initial stock). */
#define BENCH_SQL_STOCK_NOT_CONSERVED                                                              \
    "SELECT COUNT(*) FROM inventory WHERE available + reserved <> ?"
/* SKUs whose reserved differs from what the orders asked for. */
#define BENCH_SQL_RESERVED_MISMATCH                                                                \
    "SELECT COUNT(*) FROM inventory i WHERE i.reserved <> "                                        \
    "(SELECT COALESCE(SUM(oi.qty), 0) FROM order_items oi WHERE oi.sku = i.sku)"
#define BENCH_SQL_SKUS "SELECT COUNT(*) FROM inventory"

struct order_worker {
    const struct bench_env *env;
    pthread_barrier_t *start;
    double *t0; /* written by the barrier's serial thread */
    size_t n_orders;
    double *lat_ms; /* n_orders latencies, owned by the caller */
    uint64_t rng;
    bool combined; /* orders_create_with_saga() instead of orders_create() + start */
    int rc;
    pthread_t tid;
};

static void sku_name(char *buf, size_t size, unsigned i)
{
    snprintf(buf, size, "bench-sku-%02u", i);
}

static int one_order(struct txo_db *db, uint64_t *rng, bool combined, struct txo_error *err)
{
    char skus[2][24];
    struct order_item items[2];
    uint64_t r = bench_rand(rng);
    size_t n = 1 + (size_t)(r & 1);
    unsigned first = (unsigned)((r >> 8) % NUM_SKUS);
    unsigned second = (first + 1 + (unsigned)((r >> 16) % (NUM_SKUS - 1))) % NUM_SKUS;
    sku_name(skus[0], sizeof(skus[0]), first);
    sku_name(skus[1], sizeof(skus[1]), second);
    for (size_t i = 0; i < n; i++) {
        items[i].sku = skus[i];
        items[i].qty = 1 + (int32_t)((r >> (24 + 4 * i)) % 2);
        items[i].price_cents = 999 + (int64_t)((r >> (32 + 8 * i)) % 100000);
    }
    int64_t customer_id = 1 + (int64_t)((r >> 48) % 100000);

    int64_t order_id = 0;
    char saga_id[TXO_SAGA_ID_LEN];
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    int rc;
    if (combined) {
        rc = orders_create_with_saga(db, customer_id, items, n, &order_id, saga_id, err);
        if (rc < 0) {
            txo_error_wrap(err, "orders_create_with_saga");
            goto out;
        }
    } else {
        rc = orders_create(db, customer_id, items, n, &order_id, err);
        if (rc < 0) {
            txo_error_wrap(err, "orders_create");
            goto out;
        }
        rc = orders_start_saga(db, order_id, saga_id, NULL, err);
        if (rc < 0) {
            txo_error_wrap(err, "orders_start_saga order_id=%lld", (long long)order_id);
            goto out;
        }
    }
    rc = orders_run_saga(db, saga_id, NULL, NULL, &final, err);
    if (rc < 0) {
        txo_error_wrap(err, "orders_run_saga saga_id=%s", saga_id);
        goto out;
    }
    if (final != TXO_SAGA_COMPLETED)
        rc = txo_error_set(err, TXO_ESTATE, "saga %s of order %lld ended %s, not COMPLETED",
                           saga_id, (long long)order_id, txo_saga_status_name(final));
out:
    return rc;
}

static void *worker_main(void *arg)
{
    struct order_worker *w = arg;
    struct txo_db *db = NULL;
    struct txo_error err;
    txo_error_init(&err);

    w->rc = bench_connect(w->env, &db);
    if (pthread_barrier_wait(w->start) == PTHREAD_BARRIER_SERIAL_THREAD)
        *w->t0 = bench_now_s();
    if (w->rc < 0)
        goto out;
    for (size_t i = 0; i < w->n_orders; i++) {
        double t = bench_now_s();
        w->rc = one_order(db, &w->rng, w->combined, &err);
        if (w->rc < 0) {
            bench_fail(w->rc, &err, "order");
            goto out;
        }
        w->lat_ms[i] = (bench_now_s() - t) * 1000.0;
    }
out:
    txo_db_close(db);
    return NULL;
}

static int reset_tables(struct txo_db *db)
{
    int rc = bench_exec_raw(db, BENCH_SQL_FK_OFF);
    for (size_t i = 0; rc == 0 && i < TXO_ARRAY_LEN(reset_sql); i++)
        rc = bench_exec_raw(db, reset_sql[i]);
    int rc2 = bench_exec_raw(db, BENCH_SQL_FK_ON);
    if (rc < 0)
        return rc;
    if (rc2 < 0)
        return rc2;
    for (unsigned i = 0; i < NUM_SKUS; i++) {
        char sku[24];
        struct txo_error err;
        txo_error_init(&err);
        sku_name(sku, sizeof(sku), i);
        rc = orders_set_inventory(db, sku, STOCK_PER_SKU, &err);
        if (rc < 0)
            return bench_fail(rc, &err, "setting the inventory");
    }
    return 0;
}

struct expect {
    const char *sql;
    int64_t want;
    const char *what;
};

static int verify_orders(struct txo_db *db, int64_t orders)
{
    const struct expect checks[] = {
        {BENCH_SQL_ORDERS_ALL, orders, "orders"},
        {BENCH_SQL_ORDERS_NOT_CONFIRMED, 0, "orders not CONFIRMED"},
        {BENCH_SQL_SAGAS_ALL, orders, "sagas"},
        {BENCH_SQL_SAGAS_NOT_COMPLETED, 0, "sagas not COMPLETED"},
        {BENCH_SQL_PAYMENTS_ALL, orders, "payments"},
        {BENCH_SQL_SHIPMENTS_ALL, orders, "shipments"},
        {BENCH_SQL_SKUS, NUM_SKUS, "SKUs"},
        {BENCH_SQL_RESERVED_MISMATCH, 0, "SKUs whose reserved != ordered quantity"},
    };
    int rc = 0;
    for (size_t i = 0; i < TXO_ARRAY_LEN(checks); i++) {
        int64_t got = 0;
        rc = bench_query_i64(db, checks[i].sql, NULL, 0, &got);
        if (rc < 0)
            return rc;
        if (got != checks[i].want) {
            fprintf(stderr, "txo_bench: ERROR: %s: %lld, expected %lld\n", checks[i].what,
                    (long long)got, (long long)checks[i].want);
            rc = TXO_EDB;
        }
    }
    struct txo_param stock = txo_p_i64(STOCK_PER_SKU);
    int64_t bad = 0;
    int rc2 = bench_query_i64(db, BENCH_SQL_STOCK_NOT_CONSERVED, &stock, 1, &bad);
    if (rc2 < 0)
        return rc2;
    if (bad != 0) {
        fprintf(stderr, "txo_bench: ERROR: %lld SKUs with available + reserved != %d\n",
                (long long)bad, STOCK_PER_SKU);
        rc = TXO_EDB;
    }
    return rc;
}

/* One run with `workers` threads; fills orders/s, p50 and p99 (ms). */
static int run_once(struct bench_env *env, unsigned workers, bool combined, unsigned run,
                    double *rate, double *p50, double *p99, double *syncs_per_order)
{
    struct order_worker w[MAX_WORKERS];
    pthread_barrier_t start;
    double t0 = 0.0;
    size_t total = (size_t)workers * ORDERS_PER_WORKER;
    int rc = reset_tables(env->db);
    if (rc < 0)
        return rc;
    double *lat = txo_calloc(total, sizeof(double));
    if (!lat)
        return bench_fail(TXO_ENOMEM, NULL, "allocating latencies");
    if (pthread_barrier_init(&start, NULL, workers) != 0) {
        txo_free(lat);
        return bench_fail(TXO_ENOMEM, NULL, "pthread_barrier_init");
    }
    int64_t f0 = bench_log_syncs(env->db);
    for (unsigned i = 0; i < workers; i++) {
        w[i] = (struct order_worker){
            .env = env,
            .start = &start,
            .t0 = &t0,
            .n_orders = ORDERS_PER_WORKER,
            .lat_ms = lat + (size_t)i * ORDERS_PER_WORKER,
            .rng = UINT64_C(0x2545F4914F6CDD1D) * (run * MAX_WORKERS + i + 1),
            .combined = combined,
        };
        if (pthread_create(&w[i].tid, NULL, worker_main, &w[i]) != 0) {
            /* The barrier would never open: no way to recover cleanly. */
            fprintf(stderr, "txo_bench: pthread_create failed\n");
            abort();
        }
    }
    for (unsigned i = 0; i < workers; i++)
        pthread_join(w[i].tid, NULL);
    double elapsed = bench_now_s() - t0;
    int64_t f1 = bench_log_syncs(env->db);
    pthread_barrier_destroy(&start);
    for (unsigned i = 0; i < workers && rc == 0; i++)
        rc = w[i].rc;
    if (rc == 0)
        rc = verify_orders(env->db, (int64_t)total);
    if (rc == 0) {
        *rate = (double)total / elapsed;
        *p50 = bench_percentile(lat, total, 50.0);
        *p99 = bench_percentile(lat, total, 99.0);
        *syncs_per_order = f0 >= 0 && f1 >= 0 ? (double)(f1 - f0) / (double)total : -1.0;
    }
    txo_free(lat);
    return rc;
}

int bench_orders(struct bench_env *env, const struct bench_cfg *cfg)
{
    static const unsigned worker_counts[] = {1, MAX_WORKERS};
    unsigned runs = cfg->runs;
    int rc = 0;
    double *v = txo_calloc((size_t)runs * 4, sizeof(double));
    if (!v)
        return bench_fail(TXO_ENOMEM, NULL, "allocating results");

    printf("== order saga end to end: create + saga until CONFIRMED, %d orders per worker, "
           "medians of %u runs ==\n",
           ORDERS_PER_WORKER, runs);
    printf("   (Python reference implementation: 178 orders/s sequential, 280/s with 4 processes; "
           "target >= 1,000/s with 4 workers)\n"
           "   separate = orders_create + orders_start_saga + orders_run_saga; "
           "combined = orders_create_with_saga + orders_run_saga\n");
    printf("%-9s %-8s %8s %10s %9s %9s %13s\n", "flow", "workers", "orders", "orders/s", "p50 ms",
           "p99 ms", "syncs/order");
    printf("%-9s %-8s %8s %10s %9s %9s %13s\n", "---------", "--------", "--------", "----------",
           "---------", "---------", "-------------");
    for (int combined = 0; combined <= 1; combined++) {
        for (size_t k = 0; k < TXO_ARRAY_LEN(worker_counts); k++) {
            unsigned workers = worker_counts[k];
            size_t total = (size_t)workers * ORDERS_PER_WORKER;
            for (unsigned r = 0; r < runs; r++) {
                rc = run_once(env, workers, combined, r, &v[r], &v[runs + r], &v[2 * runs + r],
                              &v[3 * runs + r]);
                if (rc < 0)
                    goto out;
            }
            printf("%-9s %-8u %8zu %10.0f %9.2f %9.2f %13.1f\n", combined ? "combined" : "separate",
                   workers, total, bench_median(v, runs), bench_median(v + runs, runs),
                   bench_median(v + 2 * runs, runs), bench_median(v + 3 * runs, runs));
            fflush(stdout);
        }
    }
    printf("\n");
out:
    txo_free(v);
    return rc;
}
