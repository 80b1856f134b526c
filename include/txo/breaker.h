/*
 * Circuit breaker, one per external service (payment, shipping, ...).
 *
 * A service that keeps failing is not called for a while: callers fail fast with
 * TXO_EUNAVAILABLE instead of piling up behind timeouts, and the service gets time to recover.
 *
 *   CLOSED     calls go through; failure_threshold consecutive failures open the circuit.
 *   OPEN       calls are rejected without being made; after open_ms the next look at the
 *              breaker moves it to HALF_OPEN (lazily: there is no timer thread).
 *   HALF_OPEN  at most half_open_max_calls probe calls at a time go through; one failed probe
 *              opens the circuit again (and restarts the open_ms timer), close_after_successes
 *              successful probes close it.
 *
 * Use: call txo_breaker_acquire(); when it returns 0 make the call and report its outcome
 * with txo_breaker_record() exactly once; when it fails, do not make the call and do not
 * record anything.
 *
 *     if (txo_breaker_acquire(br, err) != 0)
 *         return TXO_EUNAVAILABLE;             (transient: a retry or a saga step retries it)
 *     rc = call_payment(...);
 *     txo_breaker_record(br, rc == 0 || !txo_err_is_transient(rc));
 *
 * Which outcomes count as failures is the caller's choice: count what says the service is
 * unwell (timeouts, connection errors, 5xx), not a business "card declined".
 *
 * A result is attributed to the state the breaker is in when it is recorded: results recorded
 * while OPEN (calls admitted before it opened) are ignored, and so are results recorded in
 * HALF_OPEN while no probe is in flight. Choose open_ms longer than the call timeout, so no
 * call admitted while CLOSED is still running when the breaker half-opens.
 *
 * Time comes from an injected struct txo_clock (tests use a fake one; nothing sleeps here).
 *
 * Thread-safety: every function may be called from any thread; one mutex per breaker guards
 * its state. The state-change callback runs with that mutex held (see txo_breaker_state_fn).
 */
#ifndef TXO_BREAKER_H
#define TXO_BREAKER_H

#include <stdbool.h>
#include <stdint.h>

#include "txo/clock.h"
#include "txo/common.h"
#include "txo/err.h"

enum txo_breaker_state {
    /* Calls go through; failures are counted. Moves to OPEN. */
    TXO_BREAKER_CLOSED = 0,
    /* Calls are rejected until open_ms has passed. Moves to HALF_OPEN. */
    TXO_BREAKER_OPEN,
    /* A few probe calls go through. Moves to CLOSED (probes succeeded) or OPEN (one failed). */
    TXO_BREAKER_HALF_OPEN,
};

/* "CLOSED", "OPEN", "HALF_OPEN"; "INVALID" for a value outside the enum. Static strings. */
TXO_API const char *txo_breaker_state_name(enum txo_breaker_state s);

struct txo_breaker;

/*
 * Called once for every state change, in order, with the breaker's mutex held (so the
 * transitions a callback sees always chain: each `from` is the previous `to`). It must be
 * quick (logging a line, setting a gauge) and must not call any txo_breaker_* function on
 * this breaker except txo_breaker_name(), which takes no lock.
 */
typedef void (*txo_breaker_state_fn)(void *arg, const struct txo_breaker *b,
                                     enum txo_breaker_state from, enum txo_breaker_state to);

struct txo_breaker_opts {
    unsigned failure_threshold;           /* consecutive failures that open it; default 5, >= 1 */
    int64_t open_ms;                      /* time OPEN before probing; default 30000, >= 0 */
    unsigned half_open_max_calls;         /* probes in flight at once; default 1, >= 1 */
    unsigned close_after_successes;       /* successful probes that close it; default 1, >= 1 */
    const struct txo_clock *clock;        /* borrowed, must outlive the breaker; NULL = system */
    txo_breaker_state_fn on_state_change; /* optional */
    void *on_state_change_arg;
};

/* Sets the defaults above, with no callback and the system clock. */
TXO_API void txo_breaker_opts_init(struct txo_breaker_opts *opts);

struct txo_breaker_stats {
    enum txo_breaker_state state;  /* as txo_breaker_state() would return it */
    unsigned consecutive_failures; /* in CLOSED */
    unsigned probes_in_flight;     /* in HALF_OPEN */
    uint64_t calls_allowed;        /* acquires that returned 0 */
    uint64_t calls_rejected;       /* acquires that returned TXO_EUNAVAILABLE */
    uint64_t successes;            /* results recorded as success (ignored ones excluded) */
    uint64_t failures;             /* results recorded as failure (ignored ones excluded) */
    uint64_t results_ignored;      /* recorded while OPEN, or in HALF_OPEN with no probe */
    uint64_t times_opened;         /* transitions to OPEN */
};

/*
 * Creates a breaker in CLOSED. name (copied) names it in errors and logs ("payment").
 * opts is copied; NULL means the defaults. Errors: TXO_EINVAL (empty name, a zero count,
 * negative open_ms), TXO_ENOMEM. *out is written only on success; free with
 * txo_breaker_free().
 */
TXO_API TXO_MUST_CHECK int txo_breaker_new(const char *name, const struct txo_breaker_opts *opts,
                                           struct txo_breaker **out, struct txo_error *err);

/* Frees the breaker; NULL is a no-op. No other thread may be using it. */
TXO_API void txo_breaker_free(struct txo_breaker *b);

/*
 * Asks to make one call. Returns 0 when it may be made (in HALF_OPEN this reserves one of the
 * probe slots), and then the caller must call txo_breaker_record() once. Returns
 * TXO_EUNAVAILABLE without waiting when the call must not be made:
 *   "circuit <name> is open (retry in N ms)" while OPEN, N >= 1;
 *   "circuit <name> is half-open (N probe calls in flight)" when every probe slot is taken.
 */
TXO_API TXO_MUST_CHECK int txo_breaker_acquire(struct txo_breaker *b, struct txo_error *err);

/* Reports the outcome of a call that txo_breaker_acquire() allowed (see the file comment). */
TXO_API void txo_breaker_record(struct txo_breaker *b, bool success);

/* The current state; moves OPEN to HALF_OPEN first when open_ms has passed. */
TXO_API enum txo_breaker_state txo_breaker_state(struct txo_breaker *b);

/* The name given to txo_breaker_new(); valid until txo_breaker_free(). Takes no lock. */
TXO_API const char *txo_breaker_name(const struct txo_breaker *b);

/* A consistent snapshot of the counters (the state is refreshed as by txo_breaker_state()). */
TXO_API void txo_breaker_get_stats(struct txo_breaker *b, struct txo_breaker_stats *out);

#endif
