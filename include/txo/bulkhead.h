/*
 * Bulkhead: a bound on the calls in flight to one external service.
 *
 * A slow service then ties up at most max_concurrent of our threads (HTTP workers, saga
 * workers); the others fail fast with TXO_EUNAVAILABLE, or wait a bounded time for a slot,
 * instead of all blocking on the same dependency.
 *
 *     if (txo_bulkhead_acquire(bh, 0, err) != 0)
 *         return TXO_EUNAVAILABLE;
 *     rc = call_shipping(...);
 *     txo_bulkhead_release(bh);
 *
 * Waiting uses the real monotonic clock (pthread_cond_timedwait on CLOCK_MONOTONIC), not an
 * injected struct txo_clock: a slot is freed by another thread, which a fake clock cannot
 * simulate. Waiters are woken one per release; the order they are admitted in is not FIFO.
 *
 * Thread-safety: every function may be called from any thread (one mutex per bulkhead).
 */
#ifndef TXO_BULKHEAD_H
#define TXO_BULKHEAD_H

#include <stdint.h>

#include "txo/common.h"
#include "txo/err.h"

struct txo_bulkhead;

struct txo_bulkhead_stats {
    unsigned max_concurrent;
    unsigned in_flight; /* slots held now */
    unsigned waiting;   /* threads waiting for a slot now */
    unsigned peak;      /* highest in_flight seen */
    uint64_t admitted;  /* acquires that returned 0 */
    uint64_t rejected;  /* acquires that returned TXO_EUNAVAILABLE */
};

/*
 * Creates a bulkhead admitting at most max_concurrent (>= 1) calls at once. name (copied)
 * appears in errors ("shipping"). Errors: TXO_EINVAL (empty name, max_concurrent 0),
 * TXO_ENOMEM. *out is written only on success; free with txo_bulkhead_free().
 */
TXO_API TXO_MUST_CHECK int txo_bulkhead_new(const char *name, unsigned max_concurrent,
                                            struct txo_bulkhead **out, struct txo_error *err);

/* Frees the bulkhead; NULL is a no-op. No slot may be held and no thread may be waiting. */
TXO_API void txo_bulkhead_free(struct txo_bulkhead *b);

/*
 * Takes a slot. When all are taken, waits up to max_wait_ms for one to be released
 * (0 or negative: do not wait). Returns 0 (the caller must call txo_bulkhead_release() once)
 * or TXO_EUNAVAILABLE "bulkhead <name> is full (N calls in flight)".
 */
TXO_API TXO_MUST_CHECK int txo_bulkhead_acquire(struct txo_bulkhead *b, int64_t max_wait_ms,
                                                struct txo_error *err);

/* Gives back a slot taken by txo_bulkhead_acquire(). Releasing more than was taken is a bug. */
TXO_API void txo_bulkhead_release(struct txo_bulkhead *b);

/* Slots held right now. */
TXO_API unsigned txo_bulkhead_in_flight(struct txo_bulkhead *b);

/* The name given to txo_bulkhead_new(); valid until txo_bulkhead_free(). Takes no lock. */
TXO_API const char *txo_bulkhead_name(const struct txo_bulkhead *b);

/* A consistent snapshot of the counters. */
TXO_API void txo_bulkhead_get_stats(struct txo_bulkhead *b, struct txo_bulkhead_stats *out);

#endif
