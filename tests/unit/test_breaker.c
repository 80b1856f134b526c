/*
 * Unit tests for src/resilience/breaker.c, on a fake clock (nothing sleeps): the circuit opens
 * after N consecutive failures and a success resets the count; OPEN rejects with
 * TXO_EUNAVAILABLE without the service being called; it half-opens after open_ms; only
 * half_open_max_calls probes are admitted; a failed probe reopens and restarts the timer; good
 * probes close it; the callback sees every transition in order; stale results are ignored;
 * options are validated. A threaded test checks the invariants under contention (run it
 * under TSan).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testrun.h"
#include "txo/txo.h"
#include "txo/breaker.h"

/* The clock: tests move it by hand; `tick` is added on every reading (threaded test). */
struct fake_clock {
    _Atomic int64_t now_ms;
    int64_t tick;
};

static int64_t fake_now(void *arg)
{
    struct fake_clock *fc = arg;
    return atomic_fetch_add(&fc->now_ms, fc->tick) + fc->tick;
}

static void fake_sleep(void *arg, int64_t ms)
{
    struct fake_clock *fc = arg;
    atomic_fetch_add(&fc->now_ms, ms);
}

#define MAX_SEEN 64

/* What the state-change callback saw. Written with the breaker's mutex held. */
struct transitions {
    int n;
    enum txo_breaker_state from[MAX_SEEN];
    enum txo_breaker_state to[MAX_SEEN];
    int64_t at_ms[MAX_SEEN];
    char name[32];
    struct fake_clock *fc;
};

static void on_change(void *arg, const struct txo_breaker *b, enum txo_breaker_state from,
                      enum txo_breaker_state to)
{
    struct transitions *t = arg;
    if (t->n < MAX_SEEN) {
        t->from[t->n] = from;
        t->to[t->n] = to;
        t->at_ms[t->n] = atomic_load(&t->fc->now_ms);
    }
    t->n++;
    snprintf(t->name, sizeof(t->name), "%s", txo_breaker_name(b));
}

struct fixture {
    struct fake_clock fc;
    struct txo_clock clock;
    struct transitions seen;
    struct txo_breaker_opts opts;
    struct txo_breaker *b;
    int service_calls; /* calls that really reached the "service" */
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -1;
    atomic_init(&f->fc.now_ms, 10000);
    f->clock = (struct txo_clock){.now_ms = fake_now, .sleep_ms = fake_sleep, .arg = &f->fc};
    f->seen.fc = &f->fc;
    txo_breaker_opts_init(&f->opts);
    f->opts.failure_threshold = 3;
    f->opts.open_ms = 1000;
    f->opts.clock = &f->clock;
    f->opts.on_state_change = on_change;
    f->opts.on_state_change_arg = &f->seen;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    txo_breaker_free(f->b);
    free(f);
    return 0;
}

static void make(struct fixture *f)
{
    struct txo_error err;
    txo_error_init(&err);
    if (txo_breaker_new("payment", &f->opts, &f->b, &err) != 0)
        fail_msg("txo_breaker_new: %s", err.msg);
}

static void advance(struct fixture *f, int64_t ms)
{
    atomic_fetch_add(&f->fc.now_ms, ms);
}

/* One guarded call: the service is reached only when the breaker allows it. */
static int call(struct fixture *f, bool ok, struct txo_error *err)
{
    int rc = txo_breaker_acquire(f->b, err);
    if (rc != 0)
        return rc;
    f->service_calls++;
    txo_breaker_record(f->b, ok);
    return 0;
}

static void assert_transition(const struct transitions *t, int i, enum txo_breaker_state from,
                              enum txo_breaker_state to)
{
    assert_true(i < t->n);
    assert_string_equal(txo_breaker_state_name(t->from[i]), txo_breaker_state_name(from));
    assert_string_equal(txo_breaker_state_name(t->to[i]), txo_breaker_state_name(to));
}

static void test_defaults_and_names(void **state)
{
    (void)state;
    struct txo_breaker_opts o;
    memset(&o, 0xAB, sizeof(o));
    txo_breaker_opts_init(&o);
    assert_int_equal(o.failure_threshold, 5);
    assert_int_equal(o.open_ms, 30000);
    assert_int_equal(o.half_open_max_calls, 1);
    assert_int_equal(o.close_after_successes, 1);
    assert_null(o.clock);
    assert_null(o.on_state_change);

    assert_string_equal(txo_breaker_state_name(TXO_BREAKER_CLOSED), "CLOSED");
    assert_string_equal(txo_breaker_state_name(TXO_BREAKER_OPEN), "OPEN");
    assert_string_equal(txo_breaker_state_name(TXO_BREAKER_HALF_OPEN), "HALF_OPEN");
    assert_string_equal(txo_breaker_state_name((enum txo_breaker_state)42), "INVALID");

    /* NULL options: the defaults and the system clock. */
    struct txo_breaker *b = NULL;
    assert_int_equal(txo_breaker_new("inventory", NULL, &b, NULL), 0);
    assert_string_equal(txo_breaker_name(b), "inventory");
    assert_int_equal(txo_breaker_state(b), TXO_BREAKER_CLOSED);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(txo_breaker_acquire(b, NULL), 0);
        txo_breaker_record(b, false);
    }
    assert_int_equal(txo_breaker_state(b), TXO_BREAKER_CLOSED);
    assert_int_equal(txo_breaker_acquire(b, NULL), 0);
    txo_breaker_record(b, false);
    assert_int_equal(txo_breaker_state(b), TXO_BREAKER_OPEN); /* the 5th failure */
    txo_breaker_free(b);
    txo_breaker_free(NULL);
}

static void test_invalid_options(void **state)
{
    struct fixture *f = *state;
    struct txo_breaker *b = NULL;
    struct txo_error err;
    txo_error_init(&err);

    assert_int_equal(txo_breaker_new("", &f->opts, &b, &err), TXO_EINVAL);
    assert_int_equal(txo_breaker_new(NULL, &f->opts, &b, &err), TXO_EINVAL);

    struct txo_breaker_opts o = f->opts;
    o.failure_threshold = 0;
    assert_int_equal(txo_breaker_new("x", &o, &b, &err), TXO_EINVAL);
    assert_string_equal(err.msg, "circuit x: failure_threshold must be >= 1");
    o = f->opts;
    o.open_ms = -1;
    assert_int_equal(txo_breaker_new("x", &o, &b, &err), TXO_EINVAL);
    o = f->opts;
    o.half_open_max_calls = 0;
    assert_int_equal(txo_breaker_new("x", &o, &b, &err), TXO_EINVAL);
    o = f->opts;
    o.close_after_successes = 0;
    assert_int_equal(txo_breaker_new("x", &o, &b, &err), TXO_EINVAL);
    assert_null(b); /* *out untouched on failure */

    /* Out of memory at each allocation: an error, nothing leaked (ASan). */
    for (long n = 0; n < 2; n++) {
        txo_alloc_fail_after(n);
        assert_int_equal(txo_breaker_new("x", &f->opts, &b, &err), TXO_ENOMEM);
        txo_alloc_fail_after(-1);
        assert_null(b);
    }
}

static void test_opens_after_consecutive_failures(void **state)
{
    struct fixture *f = *state;
    make(f);

    assert_int_equal(call(f, false, NULL), 0);
    assert_int_equal(call(f, false, NULL), 0);
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_CLOSED);
    struct txo_breaker_stats st;
    txo_breaker_get_stats(f->b, &st);
    assert_int_equal(st.consecutive_failures, 2);
    assert_int_equal(f->seen.n, 0);

    assert_int_equal(call(f, false, NULL), 0);
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_OPEN);
    assert_int_equal(f->seen.n, 1);
    assert_transition(&f->seen, 0, TXO_BREAKER_CLOSED, TXO_BREAKER_OPEN);
    assert_string_equal(f->seen.name, "payment");

    txo_breaker_get_stats(f->b, &st);
    assert_int_equal(st.state, TXO_BREAKER_OPEN);
    assert_int_equal(st.times_opened, 1);
    assert_int_equal(st.calls_allowed, 3);
    assert_int_equal(st.failures, 3);
    assert_int_equal(st.successes, 0);
}

static void test_success_resets_the_count(void **state)
{
    struct fixture *f = *state;
    make(f);

    for (int round = 0; round < 5; round++) {
        assert_int_equal(call(f, false, NULL), 0);
        assert_int_equal(call(f, false, NULL), 0);
        assert_int_equal(call(f, true, NULL), 0);
    }
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_CLOSED);
    assert_int_equal(f->seen.n, 0);
    struct txo_breaker_stats st;
    txo_breaker_get_stats(f->b, &st);
    assert_int_equal(st.consecutive_failures, 0);
    assert_int_equal(st.failures, 10);
    assert_int_equal(st.successes, 5);

    for (int i = 0; i < 3; i++)
        assert_int_equal(call(f, false, NULL), 0);
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_OPEN);
}

static void open_it(struct fixture *f)
{
    for (unsigned i = 0; i < f->opts.failure_threshold; i++)
        assert_int_equal(call(f, false, NULL), 0);
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_OPEN);
}

/* A breaker made from f->opts, opened, and open_ms later (HALF_OPEN on the next look). */
static void make_open_elapsed(struct fixture *f)
{
    make(f);
    open_it(f);
    advance(f, f->opts.open_ms);
}

static void test_open_rejects_without_calling(void **state)
{
    struct fixture *f = *state;
    make(f);
    open_it(f);
    int calls = f->service_calls;
    struct txo_error err;
    txo_error_init(&err);

    assert_int_equal(call(f, true, &err), TXO_EUNAVAILABLE);
    assert_int_equal(err.code, TXO_EUNAVAILABLE);
    assert_string_equal(err.msg, "circuit payment is open (retry in 1000 ms)");
    assert_true(txo_err_is_transient(err.code));

    advance(f, 400);
    assert_int_equal(call(f, true, &err), TXO_EUNAVAILABLE);
    assert_string_equal(err.msg, "circuit payment is open (retry in 600 ms)");
    advance(f, 599);
    assert_int_equal(call(f, true, &err), TXO_EUNAVAILABLE);
    assert_string_equal(err.msg, "circuit payment is open (retry in 1 ms)");

    assert_int_equal(f->service_calls, calls); /* the service was never reached */
    struct txo_breaker_stats st;
    txo_breaker_get_stats(f->b, &st);
    assert_int_equal(st.calls_rejected, 3);
    assert_int_equal(st.calls_allowed, 3);
}

static void test_half_opens_after_open_ms(void **state)
{
    struct fixture *f = *state;
    make(f);
    open_it(f);

    advance(f, 999);
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_OPEN);
    assert_int_equal(f->seen.n, 1);
    advance(f, 1);
    /* Moved lazily, by looking at it. */
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_HALF_OPEN);
    assert_int_equal(f->seen.n, 2);
    assert_transition(&f->seen, 1, TXO_BREAKER_OPEN, TXO_BREAKER_HALF_OPEN);
    assert_int_equal(f->seen.at_ms[1] - f->seen.at_ms[0], 1000);
}

static void test_only_max_probes_admitted(void **state)
{
    struct fixture *f = *state;
    f->opts.half_open_max_calls = 2;
    f->opts.close_after_successes = 3;
    make_open_elapsed(f);
    struct txo_error err;
    txo_error_init(&err);

    assert_int_equal(txo_breaker_acquire(f->b, &err), 0);
    assert_int_equal(txo_breaker_acquire(f->b, &err), 0);
    assert_int_equal(txo_breaker_acquire(f->b, &err), TXO_EUNAVAILABLE);
    assert_string_equal(err.msg, "circuit payment is half-open (2 probe calls in flight)");
    struct txo_breaker_stats st;
    txo_breaker_get_stats(f->b, &st);
    assert_int_equal(st.state, TXO_BREAKER_HALF_OPEN);
    assert_int_equal(st.probes_in_flight, 2);

    /* A finished probe frees its slot; successes accumulate until close_after_successes. */
    txo_breaker_record(f->b, true);
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_HALF_OPEN);
    assert_int_equal(txo_breaker_acquire(f->b, &err), 0);
    assert_int_equal(txo_breaker_acquire(f->b, &err), TXO_EUNAVAILABLE);
    txo_breaker_record(f->b, true);
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_HALF_OPEN);
    txo_breaker_record(f->b, true);
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_CLOSED);
    assert_transition(&f->seen, 2, TXO_BREAKER_HALF_OPEN, TXO_BREAKER_CLOSED);

    txo_breaker_get_stats(f->b, &st);
    assert_int_equal(st.calls_rejected, 2);
    assert_int_equal(st.probes_in_flight, 0);
    assert_int_equal(st.successes, 3);
}

static void test_probe_failure_reopens_and_restarts_timer(void **state)
{
    struct fixture *f = *state;
    make_open_elapsed(f);
    struct txo_error err;
    txo_error_init(&err);

    assert_int_equal(txo_breaker_acquire(f->b, &err), 0);
    advance(f, 50); /* the probe takes 50 ms and fails */
    txo_breaker_record(f->b, false);
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_OPEN);
    assert_transition(&f->seen, 2, TXO_BREAKER_HALF_OPEN, TXO_BREAKER_OPEN);

    /* The full open_ms again, counted from the failed probe. */
    assert_int_equal(txo_breaker_acquire(f->b, &err), TXO_EUNAVAILABLE);
    assert_string_equal(err.msg, "circuit payment is open (retry in 1000 ms)");
    advance(f, 999);
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_OPEN);
    advance(f, 1);
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_HALF_OPEN);

    struct txo_breaker_stats st;
    txo_breaker_get_stats(f->b, &st);
    assert_int_equal(st.times_opened, 2);
}

static void test_probe_success_closes(void **state)
{
    struct fixture *f = *state;
    make_open_elapsed(f);

    assert_int_equal(call(f, true, NULL), 0);
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_CLOSED);

    /* Closed afresh: it takes failure_threshold new failures to open again. */
    assert_int_equal(call(f, false, NULL), 0);
    assert_int_equal(call(f, false, NULL), 0);
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_CLOSED);
    assert_int_equal(call(f, false, NULL), 0);
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_OPEN);
}

static void test_callback_sees_every_transition(void **state)
{
    struct fixture *f = *state;
    make(f);

    open_it(f); /* CLOSED -> OPEN */
    advance(f, 1000);
    assert_int_equal(call(f, false, NULL), 0); /* OPEN -> HALF_OPEN -> OPEN */
    advance(f, 1000);
    assert_int_equal(call(f, true, NULL), 0); /* OPEN -> HALF_OPEN -> CLOSED */

    assert_int_equal(f->seen.n, 5);
    assert_transition(&f->seen, 0, TXO_BREAKER_CLOSED, TXO_BREAKER_OPEN);
    assert_transition(&f->seen, 1, TXO_BREAKER_OPEN, TXO_BREAKER_HALF_OPEN);
    assert_transition(&f->seen, 2, TXO_BREAKER_HALF_OPEN, TXO_BREAKER_OPEN);
    assert_transition(&f->seen, 3, TXO_BREAKER_OPEN, TXO_BREAKER_HALF_OPEN);
    assert_transition(&f->seen, 4, TXO_BREAKER_HALF_OPEN, TXO_BREAKER_CLOSED);
    assert_int_equal(f->seen.at_ms[1], f->seen.at_ms[0] + 1000);
    assert_int_equal(f->seen.at_ms[3], f->seen.at_ms[2] + 1000);
}

static void test_stale_results_are_ignored(void **state)
{
    struct fixture *f = *state;
    make(f);

    /* A slow call admitted while CLOSED... */
    assert_int_equal(txo_breaker_acquire(f->b, NULL), 0);
    /* ...others fail meanwhile and open the circuit... */
    open_it(f);
    /* ...then the slow one reports: it changes nothing. */
    txo_breaker_record(f->b, true);
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_OPEN);

    /* Half-open with no probe taken: a result recorded now is not a probe's. */
    advance(f, 1000);
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_HALF_OPEN);
    txo_breaker_record(f->b, false);
    assert_int_equal(txo_breaker_state(f->b), TXO_BREAKER_HALF_OPEN);

    struct txo_breaker_stats st;
    txo_breaker_get_stats(f->b, &st);
    assert_int_equal(st.results_ignored, 2);
    assert_int_equal(st.failures, 3);
    assert_int_equal(st.successes, 0);
    assert_int_equal(st.calls_allowed, 4);
}

/* ---- threads ---- */

enum { THREADS = 4, ITERATIONS = 10000 };

struct chain_check {
    pthread_mutex_t mu; /* the callback runs under the breaker's mutex; this is belt and braces */
    enum txo_breaker_state last;
    int transitions;
    int to_open;
    int to_closed;
    int to_half_open;
    int broken; /* a transition whose `from` was not the previous `to`, or an illegal one */
};

static void on_change_chain(void *arg, const struct txo_breaker *b, enum txo_breaker_state from,
                            enum txo_breaker_state to)
{
    (void)b;
    struct chain_check *c = arg;
    pthread_mutex_lock(&c->mu);
    bool legal =
        (from == TXO_BREAKER_CLOSED && to == TXO_BREAKER_OPEN) ||
        (from == TXO_BREAKER_OPEN && to == TXO_BREAKER_HALF_OPEN) ||
        (from == TXO_BREAKER_HALF_OPEN && (to == TXO_BREAKER_OPEN || to == TXO_BREAKER_CLOSED));
    if (from != c->last || !legal)
        c->broken++;
    c->last = to;
    c->transitions++;
    c->to_open += to == TXO_BREAKER_OPEN;
    c->to_closed += to == TXO_BREAKER_CLOSED;
    c->to_half_open += to == TXO_BREAKER_HALF_OPEN;
    pthread_mutex_unlock(&c->mu);
}

struct worker {
    pthread_t thread;
    struct txo_breaker *b;
    unsigned id;
    unsigned half_open_max;
    uint64_t allowed;
    uint64_t rejected;
    uint64_t bad_rejections;  /* not TXO_EUNAVAILABLE */
    uint64_t probe_overflows; /* a snapshot with more probes in flight than allowed */
};

static void *work(void *arg)
{
    struct worker *w = arg;
    /* A deterministic, per-thread mix: runs of failures long enough to open the circuit. */
    uint64_t x = 0x9E3779B97F4A7C15u * (w->id + 1);

    for (unsigned i = 0; i < ITERATIONS; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bool ok = (i / 50) % 3 != 0 || (x & 7) == 0; /* mostly failing one phase in three */
        int rc = txo_breaker_acquire(w->b, NULL);
        if (rc == 0) {
            w->allowed++;
            txo_breaker_record(w->b, ok);
        } else {
            w->rejected++;
            w->bad_rejections += rc != TXO_EUNAVAILABLE;
        }
        if (i % 64 == 0) {
            struct txo_breaker_stats st;
            txo_breaker_get_stats(w->b, &st);
            w->probe_overflows += st.probes_in_flight > w->half_open_max;
        }
    }
    return NULL;
}

static void test_threads_hold_invariants(void **state)
{
    (void)state;
    struct fake_clock fc = {.tick = 1}; /* every reading advances time by 1 ms */
    atomic_init(&fc.now_ms, 0);
    struct txo_clock clock = {.now_ms = fake_now, .sleep_ms = fake_sleep, .arg = &fc};
    struct chain_check chain = {.last = TXO_BREAKER_CLOSED};
    pthread_mutex_init(&chain.mu, NULL);

    struct txo_breaker_opts o;
    txo_breaker_opts_init(&o);
    o.failure_threshold = 3;
    o.open_ms = 40;
    o.half_open_max_calls = 2;
    o.close_after_successes = 2;
    o.clock = &clock;
    o.on_state_change = on_change_chain;
    o.on_state_change_arg = &chain;
    struct txo_breaker *b = NULL;
    assert_int_equal(txo_breaker_new("stress", &o, &b, NULL), 0);

    struct worker w[THREADS];
    memset(w, 0, sizeof(w));
    for (unsigned i = 0; i < THREADS; i++) {
        w[i].id = i;
        w[i].b = b;
        w[i].half_open_max = o.half_open_max_calls;
        assert_int_equal(pthread_create(&w[i].thread, NULL, work, &w[i]), 0);
    }
    uint64_t allowed = 0;
    uint64_t rejected = 0;
    for (unsigned i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(w[i].thread, NULL), 0);
        allowed += w[i].allowed;
        rejected += w[i].rejected;
        assert_int_equal(w[i].bad_rejections, 0);
        assert_int_equal(w[i].probe_overflows, 0);
    }

    struct txo_breaker_stats st;
    txo_breaker_get_stats(b, &st);
    assert_int_equal(allowed + rejected, (uint64_t)THREADS * ITERATIONS);
    assert_int_equal(st.calls_allowed, allowed);
    assert_int_equal(st.calls_rejected, rejected);
    /* Every allowed call was recorded exactly once: counted or ignored. */
    assert_int_equal(st.successes + st.failures + st.results_ignored, allowed);
    /* The callback saw one chain of legal transitions, the same ones the counters saw. */
    assert_int_equal(chain.broken, 0);
    assert_int_equal((uint64_t)chain.to_open, st.times_opened);
    assert_int_equal(chain.last, st.state);
    /* All three states were really exercised. */
    assert_true(chain.to_open > 10);
    assert_true(chain.to_half_open > 10);
    assert_true(chain.to_closed > 0);
    assert_true(rejected > 0);
    /* Nothing is in flight any more, so no probe slot leaked. */
    assert_int_equal(st.probes_in_flight, 0);

    txo_breaker_free(b);
    pthread_mutex_destroy(&chain.mu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_defaults_and_names, testrun_no_fixture),
        cmocka_unit_test(test_invalid_options),
        cmocka_unit_test(test_opens_after_consecutive_failures),
        cmocka_unit_test(test_success_resets_the_count),
        cmocka_unit_test(test_open_rejects_without_calling),
        cmocka_unit_test(test_half_opens_after_open_ms),
        cmocka_unit_test(test_only_max_probes_admitted),
        cmocka_unit_test(test_probe_failure_reopens_and_restarts_timer),
        cmocka_unit_test(test_probe_success_closes),
        cmocka_unit_test(test_callback_sees_every_transition),
        cmocka_unit_test(test_stale_results_are_ignored),
        cmocka_unit_test_setup(test_threads_hold_invariants, testrun_no_fixture),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
}
