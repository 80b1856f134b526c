/*
 * Time. Components that wait or measure durations (backoff, leases in tests, breakers) take a
 * struct txo_clock so tests can inject a fake clock and never sleep.
 *
 * Thread-safety: txo_clock_system() is immutable and safe from any thread.
 */
#ifndef TXO_CLOCK_H
#define TXO_CLOCK_H

#include <stdint.h>

#include "txo/common.h"

struct txo_clock {
    /* Monotonic milliseconds since an arbitrary origin. */
    int64_t (*now_ms)(void *arg);
    /* Blocks for ms milliseconds (a fake clock advances its time instead). */
    void (*sleep_ms)(void *arg, int64_t ms);
    void *arg;
};

/* The real clock: CLOCK_MONOTONIC and nanosleep. Never NULL, never freed. */
TXO_API const struct txo_clock *txo_clock_system(void);

TXO_API int64_t txo_monotonic_ms(void);
TXO_API int64_t txo_monotonic_us(void);
/* Wall-clock microseconds since the Unix epoch. */
TXO_API int64_t txo_realtime_us(void);
TXO_API void txo_sleep_ms(int64_t ms);

struct timespec;
/* The CLOCK_MONOTONIC time ms milliseconds from now (a negative ms counts as 0) into *out: the
 * deadline of a pthread_cond_timedwait() on a condition variable set to CLOCK_MONOTONIC. */
TXO_API void txo_monotonic_deadline(int64_t ms, struct timespec *out);

/* Formats wall-clock microseconds as RFC 3339 UTC ("2026-11-30T15:37:00.123456Z"). */
#define TXO_RFC3339_LEN 32
TXO_API void txo_format_rfc3339(int64_t realtime_us, char out[TXO_RFC3339_LEN]);

#endif
