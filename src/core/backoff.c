/*
 * Exponential backoff with jitter (include/txo/backoff.h):
 *
 *   delay(attempt) = min(max_ms, base_ms * 2^(attempt-1)) * uniform(1 - jitter, 1 + jitter)
 *
 * The jitter spreads out workers that failed together (a deadlock, a broker restart) so they
 * do not all retry in the same millisecond. The random number is a parameter, which keeps the
 * formula pure and lets tests check exact values; txo_rand01() supplies it in production.
 *
 * Robust against any input: attempt 0 counts as 1; negative base/max count as 0; jitter and
 * rand01 are clamped to [0, 1] (NaN counts as 0); the doubling never overflows, however large
 * the attempt number; the result is rounded to the nearest millisecond, never negative, and
 * never more than INT64_MAX.
 *
 * Thread-safety: txo_backoff_delay_ms() is pure. txo_rand01() keeps one xorshift64* state per
 * thread, started from getrandom() (or the clocks and the state's own address when that fails),
 * so threads neither share nor lock anything. Not for cryptography.
 */
#include "core/common.h"

#include <math.h>
#include <sys/random.h>
#include <unistd.h>

/* Clamps x to [0, 1]; NaN becomes 0. */
static double clamp01(double x)
{
    if (!(x > 0.0)) {
        return 0.0;
    }
    return x < 1.0 ? x : 1.0;
}

int64_t txo_backoff_delay_ms(const struct txo_backoff *b, unsigned attempt, double rand01)
{
    TXO_ASSERT(b != NULL);

    int64_t base = b->base_ms > 0 ? b->base_ms : 0;
    int64_t max = b->max_ms > 0 ? b->max_ms : 0;
    unsigned shift = attempt > 0 ? attempt - 1 : 0;

    /* base << shift <= max exactly when base <= max >> shift, and then the shift cannot
     * overflow; otherwise the cap applies. */
    int64_t capped;
    if (shift >= 63 || base > (max >> shift)) {
        capped = max;
    } else {
        capped = base << shift;
    }

    double jitter = clamp01(b->jitter);
    double factor = 1.0 - jitter + 2.0 * jitter * clamp01(rand01);
    double delay = (double)capped * factor;

    /* 2^63 is the first double that does not fit in int64_t. */
    if (delay >= 9223372036854775808.0) {
        return INT64_MAX;
    }
    return (int64_t)llround(delay);
}

/* xorshift64* (Vigna 2016): small, fast, and good enough for spreading out retries. */
static _Thread_local uint64_t rand_state;

static uint64_t initial_state(void)
{
    uint64_t state = 0;

    if (getrandom(&state, sizeof(state), GRND_NONBLOCK) != (ssize_t)sizeof(state)) {
        /* No entropy yet (early boot) or no getrandom: mix what differs between threads and
         * processes. The address of the thread-local state is unique per live thread. */
        state = (uint64_t)txo_realtime_us() * 0x9E3779B97F4A7C15u;
        state ^= (uint64_t)txo_monotonic_us() << 17;
        state ^= (uint64_t)(uintptr_t)&rand_state;
        state ^= (uint64_t)getpid() << 40;
    }
    return state != 0 ? state : 0x2545F4914F6CDD1Du; /* xorshift state must not be 0 */
}

double txo_rand01(void)
{
    uint64_t x = rand_state;

    if (x == 0) {
        x = initial_state();
    }
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rand_state = x;
    /* The top 53 bits of the product give a double in [0, 1) with every value equally likely. */
    return (double)((x * 0x2545F4914F6CDD1Du) >> 11) * 0x1.0p-53;
}
