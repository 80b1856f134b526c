/*
 * A bounded connection pool (include/txo/db.h, txo_db_pool_*): a stack of idle connections
 * behind one mutex, plus a count of connections handed out. A thread that finds the pool
 * exhausted waits on a condition variable (CLOCK_MONOTONIC) for a connection to come back.
 *
 * Connections are opened outside the mutex (a connect may take seconds), with the slot
 * reserved first so the pool never exceeds max_size.
 */
#include "core/common.h"

#include <pthread.h>
#include <time.h>

#include "core/waiter.h"

struct txo_db_pool {
    struct txo_db_opts opts;
    unsigned max_size;
    unsigned open; /* connections that exist (idle + in use + being opened) */
    unsigned n_idle;
    struct txo_db **idle;
    pthread_mutex_t mu;
    pthread_cond_t returned;
};

int txo_db_pool_new(const struct txo_db_opts *opts, unsigned max_size, struct txo_db_pool **out,
                    struct txo_error *err)
{
    if (max_size == 0)
        return txo_error_set(err, TXO_EINVAL, "connection pool size must be > 0");
    struct txo_db_pool *pool = txo_calloc(1, sizeof(*pool));
    if (pool == NULL)
        return txo_error_set(err, TXO_ENOMEM, "connection pool");
    pool->idle = txo_calloc(max_size, sizeof(*pool->idle));
    if (pool->idle == NULL) {
        txo_free(pool);
        return txo_error_set(err, TXO_ENOMEM, "connection pool");
    }
    pool->opts = *opts;
    pool->max_size = max_size;
    txo__cond_init_monotonic(&pool->returned);
    pthread_mutex_init(&pool->mu, NULL);
    *out = pool;
    return 0;
}

int txo_db_pool_get(struct txo_db_pool *pool, int64_t wait_ms, struct txo_db **db,
                    struct txo_error *err)
{
    struct timespec deadline;
    txo_monotonic_deadline(wait_ms, &deadline);

    pthread_mutex_lock(&pool->mu);
    for (;;) {
        if (pool->n_idle > 0) {
            *db = pool->idle[--pool->n_idle];
            pthread_mutex_unlock(&pool->mu);
            return 0;
        }
        if (pool->open < pool->max_size) {
            pool->open++; /* reserve the slot, connect unlocked */
            pthread_mutex_unlock(&pool->mu);
            int rc = txo_db_open(&pool->opts, db, err);
            if (rc != 0) {
                pthread_mutex_lock(&pool->mu);
                pool->open--;
                pthread_cond_signal(&pool->returned);
                pthread_mutex_unlock(&pool->mu);
            }
            return rc;
        }
        if (pthread_cond_timedwait(&pool->returned, &pool->mu, &deadline) == ETIMEDOUT &&
            pool->n_idle == 0 && pool->open >= pool->max_size) {
            pthread_mutex_unlock(&pool->mu);
            return txo_error_set(err, TXO_ETIMEOUT,
                                 "all %u database connections busy for %" PRId64 " ms",
                                 pool->max_size, wait_ms);
        }
    }
}

void txo_db_pool_put(struct txo_db_pool *pool, struct txo_db *db, bool broken)
{
    if (db == NULL)
        return;
    if (broken)
        txo_db_close(db);
    pthread_mutex_lock(&pool->mu);
    if (broken)
        pool->open--;
    else
        pool->idle[pool->n_idle++] = db;
    pthread_cond_signal(&pool->returned);
    pthread_mutex_unlock(&pool->mu);
}

void txo_db_pool_free(struct txo_db_pool *pool)
{
    if (pool == NULL)
        return;
    TXO_ASSERT(pool->n_idle == pool->open);
    for (unsigned i = 0; i < pool->n_idle; i++)
        txo_db_close(pool->idle[i]);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->returned);
    txo_free(pool->idle);
    txo_free(pool);
}
