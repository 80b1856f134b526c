/*
 * Retry with exponential backoff and jitter, for transient failures only.
 *
 * txo_retry_run() calls a function until it succeeds, fails permanently, or has been called
 * max_attempts times. Between two calls it sleeps txo_backoff_delay_ms(&backoff, n, rand),
 * where n is the number of failed calls so far (include/txo/backoff.h), through the policy's
 * clock, so tests inject a fake clock and never sleep. Whether a failure is worth another call
 * is decided by txo_err_is_transient() (include/txo/err.h): deadlocks, lock wait timeouts,
 * lost connections, TXO_ETIMEOUT, TXO_EUNAVAILABLE (an open circuit breaker, a full bulkhead,
 * an exceeded rate limit) are retried; everything else is returned at once.
 *
 * A retried operation must be safe to repeat: idempotent, or wrapped in a transaction that
 * was rolled back.
 *
 * Thread-safety: a policy is read-only during txo_retry_run(), so one policy may be shared by
 * any number of threads, provided its clock and rand01 functions are thread-safe (the system
 * clock and txo_rand01() are).
 */
#ifndef TXO_RETRY_H
#define TXO_RETRY_H

#include "txo/backoff.h"
#include "txo/clock.h"
#include "txo/common.h"
#include "txo/err.h"

struct txo_retry_policy {
    /* Calls in all, the first one included; must be >= 1. Default 3. */
    unsigned max_attempts;
    /* Delay between calls. Default 100 ms doubling up to 2 s, jitter 0.5. */
    struct txo_backoff backoff;
    /* Where sleeps go (borrowed, must outlive the calls). NULL = txo_clock_system(). */
    const struct txo_clock *clock;
    /* Source of the jitter, a number in [0, 1). NULL = txo_rand01() (rand_arg unused). */
    double (*rand01)(void *arg);
    void *rand_arg;
};

/* Sets the defaults above: 3 attempts, 100 ms .. 2 s, jitter 0.5, system clock, txo_rand01. */
TXO_API void txo_retry_policy_init(struct txo_retry_policy *p);

/*
 * The operation to retry. `attempt` is 1 for the first call, 2 for the first retry, ...
 * Returns 0 on success or a negative TXO_E* code, with detail in err (which it may leave
 * untouched: a bare code is fine). A positive return value is not retried and is returned
 * as it is.
 */
typedef int (*txo_retry_fn)(void *arg, unsigned attempt, struct txo_error *err);

/*
 * Calls fn(arg, attempt, ...) until it returns 0, returns a permanent error, or has been
 * called p->max_attempts times, sleeping through p->clock between calls.
 *
 * Returns 0 when a call succeeded (err is left untouched, even when earlier calls failed), the
 * permanent error at once, or after the last attempt the last transient error; on failure err
 * receives the detail fn wrote for that call (or the code's description when fn wrote none).
 * TXO_EINVAL when max_attempts is 0 (fn is not called then).
 * *attempts_out (may be NULL) receives the number of calls made, on success and on failure.
 *
 * Each retry is logged at debug level (component "retry"); the final failure is not logged,
 * it is the caller's to handle.
 */
TXO_API TXO_MUST_CHECK int txo_retry_run(const struct txo_retry_policy *p, txo_retry_fn fn,
                                         void *arg, unsigned *attempts_out, struct txo_error *err);

#endif
