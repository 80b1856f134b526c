/*
 * Exponential backoff with jitter, used by the whole-transaction retry, saga step retries and
 * (the same formula, in SQL) the relay's next_attempt_at.
 *
 * delay(attempt) = min(max_ms, base_ms * 2^(attempt-1)) * uniform(1 - jitter, 1 + jitter)
 *
 * `attempt` counts failures so far (1 = the first retry). Randomness is injected as a number
 * in [0, 1) so the formula is pure and tests are exact.
 *
 * Thread-safety: pure functions; txo_rand01() uses a thread-local generator.
 */
#ifndef TXO_BACKOFF_H
#define TXO_BACKOFF_H

#include <stdint.h>

#include "txo/common.h"

struct txo_backoff {
    int64_t base_ms; /* delay before the first retry, before jitter */
    int64_t max_ms;  /* cap before jitter */
    double jitter;   /* 0 = none, 0.5 = delay * [0.5, 1.5) */
};

/* Delay before retry number `attempt` (>= 1); `rand01` in [0, 1). Never negative. */
TXO_API int64_t txo_backoff_delay_ms(const struct txo_backoff *b, unsigned attempt, double rand01);

/* A uniform number in [0, 1) from a per-thread generator started from the OS's randomness. */
TXO_API double txo_rand01(void);

#endif
