/*
 * Bulkhead (include/txo/bulkhead.h): a counting semaphore with a name, statistics and a
 * bounded wait.
 *
 * in_flight <= max_concurrent always holds under the mutex. A release signals one waiter;
 * a waiter re-checks the count after every wake-up (wake-ups may be spurious, and a thread
 * that did not wait may have taken the slot first). The deadline is computed once, on
 * CLOCK_MONOTONIC, and the condition variable is set to that clock, so neither spurious
 * wake-ups nor a change of the wall clock stretch the wait.
 *
 * Thread-safety: the mutex guards everything but name and max_concurrent, which never change.
 */
#include "core/common.h"

#include <pthread.h>
#include <time.h>

#include "core/waiter.h"
#include "txo/bulkhead.h"

/* Longest wait honoured; longer ones are cut to it (about 24 days, far past any timeout). */
#define MAX_WAIT_MS (INT64_C(1) << 31)

struct txo_bulkhead {
    char *name;
    unsigned max_concurrent;
    pthread_mutex_t mu;
    pthread_cond_t released;
    struct txo_bulkhead_stats stats; /* in_flight, waiting, ... : all under mu */
};

int txo_bulkhead_new(const char *name, unsigned max_concurrent, struct txo_bulkhead **out,
                     struct txo_error *err)
{
    if (name == NULL || name[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "bulkhead needs a name");
    if (max_concurrent == 0)
        return txo_error_set(err, TXO_EINVAL, "bulkhead %s: max_concurrent must be >= 1", name);

    struct txo_bulkhead *b = txo_calloc(1, sizeof(*b));
    if (b == NULL)
        return txo_error_set(err, TXO_ENOMEM, "bulkhead %s", name);
    b->name = txo_strdup(name);
    if (b->name == NULL) {
        txo_free(b);
        return txo_error_set(err, TXO_ENOMEM, "bulkhead %s", name);
    }
    b->max_concurrent = max_concurrent;
    b->stats.max_concurrent = max_concurrent;

    txo__cond_init_monotonic(&b->released);
    pthread_mutex_init(&b->mu, NULL);
    *out = b;
    return 0;
}

void txo_bulkhead_free(struct txo_bulkhead *b)
{
    if (b == NULL)
        return;
    TXO_ASSERT(b->stats.in_flight == 0 && b->stats.waiting == 0);
    pthread_cond_destroy(&b->released);
    pthread_mutex_destroy(&b->mu);
    txo_free(b->name);
    txo_free(b);
}

const char *txo_bulkhead_name(const struct txo_bulkhead *b)
{
    return b->name;
}

/* Takes a slot. Caller holds b->mu and has checked that one is free. */
static void take_slot(struct txo_bulkhead *b)
{
    b->stats.in_flight++;
    b->stats.admitted++;
    if (b->stats.in_flight > b->stats.peak)
        b->stats.peak = b->stats.in_flight;
}

int txo_bulkhead_acquire(struct txo_bulkhead *b, int64_t max_wait_ms, struct txo_error *err)
{
    TXO_ASSERT(b != NULL);
    int rc = 0;

    pthread_mutex_lock(&b->mu);
    if (b->stats.in_flight < b->max_concurrent) {
        take_slot(b);
        goto out;
    }
    if (max_wait_ms > 0) {
        struct timespec deadline;
        txo_monotonic_deadline(max_wait_ms < MAX_WAIT_MS ? max_wait_ms : MAX_WAIT_MS, &deadline);
        bool timed_out = false;
        b->stats.waiting++;
        while (b->stats.in_flight >= b->max_concurrent && !timed_out) {
            int wrc = pthread_cond_timedwait(&b->released, &b->mu, &deadline);
            if (wrc == ETIMEDOUT)
                timed_out = true;
            else if (wrc != 0)
                TXO_BUG("pthread_cond_timedwait: %d", wrc);
        }
        b->stats.waiting--;
        /* A slot freed just as the wait timed out is still taken. */
        if (b->stats.in_flight < b->max_concurrent) {
            take_slot(b);
            goto out;
        }
    }
    b->stats.rejected++;
    rc = txo_error_set(err, TXO_EUNAVAILABLE, "bulkhead %s is full (%u calls in flight)", b->name,
                       b->stats.in_flight);
out:
    pthread_mutex_unlock(&b->mu);
    return rc;
}

void txo_bulkhead_release(struct txo_bulkhead *b)
{
    TXO_ASSERT(b != NULL);

    pthread_mutex_lock(&b->mu);
    if (b->stats.in_flight == 0)
        TXO_BUG("bulkhead %s: release without a matching acquire", b->name);
    b->stats.in_flight--;
    if (b->stats.waiting > 0)
        pthread_cond_signal(&b->released);
    pthread_mutex_unlock(&b->mu);
}

unsigned txo_bulkhead_in_flight(struct txo_bulkhead *b)
{
    TXO_ASSERT(b != NULL);

    pthread_mutex_lock(&b->mu);
    unsigned n = b->stats.in_flight;
    pthread_mutex_unlock(&b->mu);
    return n;
}

void txo_bulkhead_get_stats(struct txo_bulkhead *b, struct txo_bulkhead_stats *out)
{
    TXO_ASSERT(b != NULL && out != NULL);

    pthread_mutex_lock(&b->mu);
    *out = b->stats;
    pthread_mutex_unlock(&b->mu);
}
