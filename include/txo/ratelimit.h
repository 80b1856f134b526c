/*
 * Rate limiter: a token bucket.
 *
 * The bucket holds at most `burst` tokens and gains rate_per_s tokens per second; every
 * admitted call takes one. It starts full, so a quiet client may send `burst` calls at once,
 * and over any long period no more than burst + rate * period calls get through.
 *
 * The arithmetic is exact integer arithmetic: a token is 10^9 units and the bucket gains
 * round(rate_per_s * 10^6) units per millisecond of the injected clock, so the rate is kept to
 * a millionth of a token per second, and refills add up to the same count however the time
 * is sliced into calls (no drift, ever).
 *
 * txo_ratelimit_acquire() may reserve a token that is not there yet: the bucket then goes
 * into debt and the caller sleeps (through the clock) until the debt is paid off. Later
 * callers see the debt and wait behind it, so waiting callers are served in order.
 *
 * Thread-safety: every function may be called from any thread (one mutex per limiter); the
 * clock must be thread-safe too when several threads share the limiter.
 */
#ifndef TXO_RATELIMIT_H
#define TXO_RATELIMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "txo/clock.h"
#include "txo/common.h"
#include "txo/err.h"

struct txo_ratelimit;

/*
 * Creates a limiter, full. rate_per_s must be finite and in [0.000001, 10^9]; burst >= 1.
 * name (copied) appears in errors; clock is borrowed and must outlive the limiter
 * (NULL = txo_clock_system()). Errors: TXO_EINVAL, TXO_ENOMEM. *out is written only on
 * success; free with txo_ratelimit_free().
 */
TXO_API TXO_MUST_CHECK int txo_ratelimit_new(const char *name, double rate_per_s, unsigned burst,
                                             const struct txo_clock *clock,
                                             struct txo_ratelimit **out, struct txo_error *err);

/* Frees the limiter; NULL is a no-op. No other thread may be using it. */
TXO_API void txo_ratelimit_free(struct txo_ratelimit *rl);

/*
 * Takes a token when one is there and returns true. Otherwise returns false and takes
 * nothing. *wait_ms (may be NULL) receives 0 on success, else the milliseconds until a token
 * will be there (>= 1) if nobody else takes it first.
 */
TXO_API bool txo_ratelimit_try(struct txo_ratelimit *rl, int64_t *wait_ms);

/*
 * Takes a token, waiting for it through clock->sleep_ms when it will be there within
 * max_wait_ms (0 or negative: do not wait). Returns 0, or TXO_EUNAVAILABLE
 * "rate limit <name> exceeded (next token in N ms)" without waiting and without taking
 * anything when the wait would be longer.
 */
TXO_API TXO_MUST_CHECK int txo_ratelimit_acquire(struct txo_ratelimit *rl, int64_t max_wait_ms,
                                                 struct txo_error *err);

/* Whole tokens in the bucket now (0 while it is in debt). */
TXO_API unsigned txo_ratelimit_available(struct txo_ratelimit *rl);

/* The name given to txo_ratelimit_new(); valid until txo_ratelimit_free(). Takes no lock. */
TXO_API const char *txo_ratelimit_name(const struct txo_ratelimit *rl);

#endif
