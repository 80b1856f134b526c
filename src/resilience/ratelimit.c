/*
 * Token bucket rate limiter (include/txo/ratelimit.h).
 *
 * The bucket's content is an integer count of units, UNITS_PER_TOKEN to a token, and it gains
 * units_per_ms units per millisecond of the clock. Everything is integer arithmetic on int64:
 * refilling for 3 ms then 4 ms adds exactly what refilling for 7 ms adds, so the count never
 * drifts from rate * time, however often the bucket is looked at. The only rounding is of
 * the rate itself, once, to a millionth of a token per second.
 *
 * Invariants (under the mutex): tokens <= cap; tokens < 0 only through reservations made by
 * txo_ratelimit_acquire() (debt that waiting callers are sleeping off); last_ms never goes
 * backwards (a clock reading older than last_ms refills nothing, so no time counts twice).
 *
 * Ranges: cap = burst * 10^9 <= 4.3 * 10^18 and units_per_ms <= 10^15 fit in int64; refill()
 * multiplies the elapsed time only when the product stays below the room left in the bucket.
 *
 * Thread-safety: the mutex guards tokens and last_ms; the rest never changes.
 */
#include "core/common.h"

#include <math.h>
#include <pthread.h>

#include "txo/ratelimit.h"

#define UNITS_PER_TOKEN INT64_C(1000000000)

struct txo_ratelimit {
    char *name;
    const struct txo_clock *clock;
    int64_t units_per_ms;
    int64_t cap; /* burst in units */
    pthread_mutex_t mu;
    int64_t tokens; /* in units; negative while in debt */
    int64_t last_ms;
};

int txo_ratelimit_new(const char *name, double rate_per_s, unsigned burst,
                      const struct txo_clock *clock, struct txo_ratelimit **out,
                      struct txo_error *err)
{
    if (name == NULL || name[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "rate limit needs a name");
    /* The negated test also rejects NaN. */
    if (!(rate_per_s >= 1e-6 && rate_per_s <= 1e9))
        return txo_error_set(err, TXO_EINVAL,
                             "rate limit %s: rate must be in [0.000001, 1e9] per second, got %g",
                             name, rate_per_s);
    if (burst == 0)
        return txo_error_set(err, TXO_EINVAL, "rate limit %s: burst must be >= 1", name);
    if (clock == NULL)
        clock = txo_clock_system();

    struct txo_ratelimit *rl = txo_calloc(1, sizeof(*rl));
    if (rl == NULL)
        return txo_error_set(err, TXO_ENOMEM, "rate limit %s", name);
    rl->name = txo_strdup(name);
    if (rl->name == NULL) {
        txo_free(rl);
        return txo_error_set(err, TXO_ENOMEM, "rate limit %s", name);
    }
    rl->clock = clock;
    rl->units_per_ms = (int64_t)llround(rate_per_s * 1e6);
    rl->cap = (int64_t)burst * UNITS_PER_TOKEN;
    rl->tokens = rl->cap;
    rl->last_ms = clock->now_ms(clock->arg);
    pthread_mutex_init(&rl->mu, NULL);
    *out = rl;
    return 0;
}

void txo_ratelimit_free(struct txo_ratelimit *rl)
{
    if (rl == NULL)
        return;
    pthread_mutex_destroy(&rl->mu);
    txo_free(rl->name);
    txo_free(rl);
}

const char *txo_ratelimit_name(const struct txo_ratelimit *rl)
{
    return rl->name;
}

/* Adds what the time since last_ms earned. Caller holds rl->mu. */
static void refill(struct txo_ratelimit *rl)
{
    int64_t now = rl->clock->now_ms(rl->clock->arg);

    if (now <= rl->last_ms)
        return;
    int64_t elapsed = now - rl->last_ms;
    rl->last_ms = now;
    if (rl->tokens >= rl->cap)
        return;
    int64_t room = rl->cap - rl->tokens;
    /* elapsed * units_per_ms exceeds room exactly when elapsed > room / units_per_ms. */
    if (elapsed > room / rl->units_per_ms)
        rl->tokens = rl->cap;
    else
        rl->tokens += elapsed * rl->units_per_ms;
}

/* Milliseconds until the bucket holds a whole token. Caller holds rl->mu; tokens < 1 token. */
static int64_t wait_for_token(const struct txo_ratelimit *rl)
{
    int64_t missing = UNITS_PER_TOKEN - rl->tokens;
    return (missing + rl->units_per_ms - 1) / rl->units_per_ms;
}

bool txo_ratelimit_try(struct txo_ratelimit *rl, int64_t *wait_ms)
{
    TXO_ASSERT(rl != NULL);
    bool ok;
    int64_t wait = 0;

    pthread_mutex_lock(&rl->mu);
    refill(rl);
    ok = rl->tokens >= UNITS_PER_TOKEN;
    if (ok)
        rl->tokens -= UNITS_PER_TOKEN;
    else
        wait = wait_for_token(rl);
    pthread_mutex_unlock(&rl->mu);
    if (wait_ms != NULL)
        *wait_ms = wait;
    return ok;
}

int txo_ratelimit_acquire(struct txo_ratelimit *rl, int64_t max_wait_ms, struct txo_error *err)
{
    TXO_ASSERT(rl != NULL);
    int64_t wait = 0;

    pthread_mutex_lock(&rl->mu);
    refill(rl);
    if (rl->tokens < UNITS_PER_TOKEN) {
        wait = wait_for_token(rl);
        if (wait > max_wait_ms) {
            pthread_mutex_unlock(&rl->mu);
            return txo_error_set(err, TXO_EUNAVAILABLE,
                                 "rate limit %s exceeded (next token in %" PRId64 " ms)", rl->name,
                                 wait);
        }
    }
    /* Takes the token now, in debt when it is not there yet: later callers queue behind. */
    rl->tokens -= UNITS_PER_TOKEN;
    pthread_mutex_unlock(&rl->mu);

    if (wait > 0)
        rl->clock->sleep_ms(rl->clock->arg, wait);
    return 0;
}

unsigned txo_ratelimit_available(struct txo_ratelimit *rl)
{
    TXO_ASSERT(rl != NULL);

    pthread_mutex_lock(&rl->mu);
    refill(rl);
    unsigned n = rl->tokens > 0 ? (unsigned)(rl->tokens / UNITS_PER_TOKEN) : 0;
    pthread_mutex_unlock(&rl->mu);
    return n;
}
