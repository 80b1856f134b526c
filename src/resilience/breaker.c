/*
 * Circuit breaker (include/txo/breaker.h).
 *
 * All state sits behind one mutex and every transition goes through set_state(), which
 * checks that the move is legal, resets the counters of the state it enters and calls the
 * state-change callback (still under the mutex, so callbacks see transitions in order). An
 * illegal move is a bug.
 *
 *   CLOSED     consecutive_failures counts failures since the last success.
 *   OPEN       opened_at_ms is when it (re)opened; acquire and state() move it to HALF_OPEN
 *              once open_ms has passed. There is no timer thread.
 *   HALF_OPEN  probes_in_flight <= half_open_max_calls calls admitted and not yet recorded;
 *              probe_successes counts successful probes since it half-opened.
 *
 * Time is read only from the injected clock, and only while the mutex is held, so the clock
 * may be a fake that tests advance between calls.
 *
 * Thread-safety: the mutex guards everything except name and opts, which never change.
 */
#include "core/common.h"

#include <pthread.h>

#include "txo/breaker.h"

struct txo_breaker {
    char *name;
    struct txo_breaker_opts opts; /* clock never NULL here */
    pthread_mutex_t mu;
    enum txo_breaker_state state;
    unsigned consecutive_failures;
    int64_t opened_at_ms;
    unsigned probes_in_flight;
    unsigned probe_successes;
    struct txo_breaker_stats stats; /* the counters; state fields are filled on read */
};

static const char *const state_names[] = {
    [TXO_BREAKER_CLOSED] = "CLOSED",
    [TXO_BREAKER_OPEN] = "OPEN",
    [TXO_BREAKER_HALF_OPEN] = "HALF_OPEN",
};

const char *txo_breaker_state_name(enum txo_breaker_state s)
{
    return txo__name_of(state_names, TXO_ARRAY_LEN(state_names), (long)s);
}

void txo_breaker_opts_init(struct txo_breaker_opts *opts)
{
    TXO_ASSERT(opts != NULL);
    *opts = (struct txo_breaker_opts){
        .failure_threshold = 5,
        .open_ms = 30000,
        .half_open_max_calls = 1,
        .close_after_successes = 1,
        .clock = NULL,
        .on_state_change = NULL,
        .on_state_change_arg = NULL,
    };
}

int txo_breaker_new(const char *name, const struct txo_breaker_opts *opts, struct txo_breaker **out,
                    struct txo_error *err)
{
    struct txo_breaker_opts o;

    if (opts != NULL)
        o = *opts;
    else
        txo_breaker_opts_init(&o);
    if (name == NULL || name[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "circuit breaker needs a name");
    if (o.failure_threshold == 0)
        return txo_error_set(err, TXO_EINVAL, "circuit %s: failure_threshold must be >= 1", name);
    if (o.open_ms < 0)
        return txo_error_set(err, TXO_EINVAL, "circuit %s: open_ms must be >= 0, got %" PRId64,
                             name, o.open_ms);
    if (o.half_open_max_calls == 0)
        return txo_error_set(err, TXO_EINVAL, "circuit %s: half_open_max_calls must be >= 1", name);
    if (o.close_after_successes == 0)
        return txo_error_set(err, TXO_EINVAL, "circuit %s: close_after_successes must be >= 1",
                             name);
    if (o.clock == NULL)
        o.clock = txo_clock_system();

    struct txo_breaker *b = txo_calloc(1, sizeof(*b));
    if (b == NULL)
        return txo_error_set(err, TXO_ENOMEM, "circuit %s", name);
    b->name = txo_strdup(name);
    if (b->name == NULL) {
        txo_free(b);
        return txo_error_set(err, TXO_ENOMEM, "circuit %s", name);
    }
    b->opts = o;
    b->state = TXO_BREAKER_CLOSED;
    pthread_mutex_init(&b->mu, NULL);
    *out = b;
    return 0;
}

void txo_breaker_free(struct txo_breaker *b)
{
    if (b == NULL)
        return;
    pthread_mutex_destroy(&b->mu);
    txo_free(b->name);
    txo_free(b);
}

const char *txo_breaker_name(const struct txo_breaker *b)
{
    return b->name;
}

static int64_t now_ms(const struct txo_breaker *b)
{
    return b->opts.clock->now_ms(b->opts.clock->arg);
}

static bool legal_transition(enum txo_breaker_state from, enum txo_breaker_state to)
{
    switch (from) {
    case TXO_BREAKER_CLOSED:
        return to == TXO_BREAKER_OPEN;
    case TXO_BREAKER_OPEN:
        return to == TXO_BREAKER_HALF_OPEN;
    case TXO_BREAKER_HALF_OPEN:
        return to == TXO_BREAKER_OPEN || to == TXO_BREAKER_CLOSED;
    }
    return false;
}

/* The one place the state changes. Caller holds b->mu; now is the clock reading. */
static void set_state(struct txo_breaker *b, enum txo_breaker_state to, int64_t now)
{
    enum txo_breaker_state from = b->state;

    if (!legal_transition(from, to))
        TXO_BUG("circuit %s: illegal transition %s -> %s", b->name, txo_breaker_state_name(from),
                txo_breaker_state_name(to));
    b->state = to;
    switch (to) {
    case TXO_BREAKER_CLOSED:
        b->consecutive_failures = 0;
        break;
    case TXO_BREAKER_OPEN:
        b->opened_at_ms = now;
        b->stats.times_opened++;
        break;
    case TXO_BREAKER_HALF_OPEN:
        b->probes_in_flight = 0;
        b->probe_successes = 0;
        break;
    }
    if (b->opts.on_state_change != NULL)
        b->opts.on_state_change(b->opts.on_state_change_arg, b, from, to);
}

/* Moves OPEN to HALF_OPEN when open_ms has passed. Caller holds b->mu. */
static void refresh(struct txo_breaker *b, int64_t now)
{
    if (b->state == TXO_BREAKER_OPEN && now - b->opened_at_ms >= b->opts.open_ms)
        set_state(b, TXO_BREAKER_HALF_OPEN, now);
}

int txo_breaker_acquire(struct txo_breaker *b, struct txo_error *err)
{
    TXO_ASSERT(b != NULL);
    int rc = 0;

    pthread_mutex_lock(&b->mu);
    int64_t now = now_ms(b);
    refresh(b, now);
    switch (b->state) {
    case TXO_BREAKER_CLOSED:
        break;
    case TXO_BREAKER_OPEN: {
        int64_t left = b->opened_at_ms + b->opts.open_ms - now;
        rc = txo_error_set(err, TXO_EUNAVAILABLE, "circuit %s is open (retry in %" PRId64 " ms)",
                           b->name, left > 0 ? left : 1);
        break;
    }
    case TXO_BREAKER_HALF_OPEN:
        if (b->probes_in_flight < b->opts.half_open_max_calls)
            b->probes_in_flight++;
        else
            rc = txo_error_set(err, TXO_EUNAVAILABLE,
                               "circuit %s is half-open (%u probe calls in flight)", b->name,
                               b->probes_in_flight);
        break;
    }
    if (rc == 0)
        b->stats.calls_allowed++;
    else
        b->stats.calls_rejected++;
    pthread_mutex_unlock(&b->mu);
    return rc;
}

void txo_breaker_record(struct txo_breaker *b, bool success)
{
    TXO_ASSERT(b != NULL);

    pthread_mutex_lock(&b->mu);
    int64_t now = now_ms(b);
    refresh(b, now);
    bool counted = true;
    switch (b->state) {
    case TXO_BREAKER_CLOSED:
        if (success) {
            b->consecutive_failures = 0;
        } else if (++b->consecutive_failures >= b->opts.failure_threshold) {
            set_state(b, TXO_BREAKER_OPEN, now);
        }
        break;
    case TXO_BREAKER_OPEN:
        counted = false; /* admitted before the circuit opened: says nothing new */
        break;
    case TXO_BREAKER_HALF_OPEN:
        if (b->probes_in_flight == 0) {
            counted = false; /* admitted while CLOSED, not a probe */
            break;
        }
        b->probes_in_flight--;
        if (!success)
            set_state(b, TXO_BREAKER_OPEN, now);
        else if (++b->probe_successes >= b->opts.close_after_successes)
            set_state(b, TXO_BREAKER_CLOSED, now);
        break;
    }
    if (!counted)
        b->stats.results_ignored++;
    else if (success)
        b->stats.successes++;
    else
        b->stats.failures++;
    pthread_mutex_unlock(&b->mu);
}

enum txo_breaker_state txo_breaker_state(struct txo_breaker *b)
{
    TXO_ASSERT(b != NULL);

    pthread_mutex_lock(&b->mu);
    refresh(b, now_ms(b));
    enum txo_breaker_state s = b->state;
    pthread_mutex_unlock(&b->mu);
    return s;
}

void txo_breaker_get_stats(struct txo_breaker *b, struct txo_breaker_stats *out)
{
    TXO_ASSERT(b != NULL && out != NULL);

    pthread_mutex_lock(&b->mu);
    refresh(b, now_ms(b));
    *out = b->stats;
    out->state = b->state;
    out->consecutive_failures = b->state == TXO_BREAKER_CLOSED ? b->consecutive_failures : 0;
    out->probes_in_flight = b->state == TXO_BREAKER_HALF_OPEN ? b->probes_in_flight : 0;
    pthread_mutex_unlock(&b->mu);
}
