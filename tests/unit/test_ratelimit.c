/*
 * Unit tests for src/resilience/ratelimit.c, on a fake clock (nothing sleeps): the burst is
 * admitted and the next call is told exactly how long to wait; tokens come back as the clock
 * advances, fractions included, up to the burst; acquire sleeps through the clock and
 * callers waiting for the same tokens queue behind each other; over 1,000,000 simulated ms
 * the count of admitted calls is exact whatever the step pattern (no drift); threads never
 * get more than the bucket holds.
 */
#include <pthread.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "txo/txo.h"
#include "txo/ratelimit.h"

#include "testclock.h"

struct fixture {
    struct testclock fc;
    struct txo_clock clock;
};

static void fixture_init(struct fixture *f)
{
    memset(f, 0, sizeof(*f));
    testclock_init(&f->fc);
    f->fc.now_ms = 123456;
    f->clock = f->fc.clock;
}

static struct txo_ratelimit *make(struct fixture *f, double rate, unsigned burst)
{
    struct txo_ratelimit *rl = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_ratelimit_new("api", rate, burst, &f->clock, &rl, &err) != 0)
        fail_msg("txo_ratelimit_new: %s", err.msg);
    return rl;
}

static void test_invalid_arguments(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f);
    struct txo_ratelimit *rl = NULL;
    struct txo_error err;
    txo_error_init(&err);
    const double bad_rates[] = {0.0, -1.0, 1e-7, 2e9, NAN, INFINITY};

    for (size_t i = 0; i < TXO_ARRAY_LEN(bad_rates); i++)
        assert_int_equal(txo_ratelimit_new("api", bad_rates[i], 5, &f.clock, &rl, &err),
                         TXO_EINVAL);
    assert_int_equal(txo_ratelimit_new("api", 10.0, 0, &f.clock, &rl, &err), TXO_EINVAL);
    assert_string_equal(err.msg, "rate limit api: burst must be >= 1");
    assert_int_equal(txo_ratelimit_new("", 10.0, 5, &f.clock, &rl, &err), TXO_EINVAL);
    for (long n = 0; n < 2; n++) {
        txo_alloc_fail_after(n);
        assert_int_equal(txo_ratelimit_new("api", 10.0, 5, &f.clock, &rl, &err), TXO_ENOMEM);
        txo_alloc_fail_after(-1);
    }
    assert_null(rl);
    txo_ratelimit_free(NULL);

    /* The extremes of the range are accepted; NULL clock means the system clock. */
    assert_int_equal(txo_ratelimit_new("slow", 1e-6, 1, &f.clock, &rl, &err), 0);
    txo_ratelimit_free(rl);
    assert_int_equal(txo_ratelimit_new("fast", 1e9, UINT32_MAX, NULL, &rl, &err), 0);
    assert_string_equal(txo_ratelimit_name(rl), "fast");
    assert_int_equal(txo_ratelimit_available(rl), UINT32_MAX);
    txo_ratelimit_free(rl);
}

static void test_burst_then_exact_wait(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f);
    struct txo_ratelimit *rl = make(&f, 10.0, 5); /* a token every 100 ms */
    int64_t wait = -1;

    assert_int_equal(txo_ratelimit_available(rl), 5);
    for (int i = 0; i < 5; i++) {
        assert_true(txo_ratelimit_try(rl, &wait));
        assert_int_equal(wait, 0);
    }
    assert_false(txo_ratelimit_try(rl, &wait));
    assert_int_equal(wait, 100);
    assert_false(txo_ratelimit_try(rl, NULL));

    f.fc.now_ms += 40;
    assert_false(txo_ratelimit_try(rl, &wait));
    assert_int_equal(wait, 60);
    f.fc.now_ms += 59;
    assert_false(txo_ratelimit_try(rl, &wait));
    assert_int_equal(wait, 1);
    f.fc.now_ms += 1;
    assert_true(txo_ratelimit_try(rl, &wait));
    assert_false(txo_ratelimit_try(rl, &wait));
    assert_int_equal(wait, 100);
    txo_ratelimit_free(rl);
}

static void test_refill_keeps_fractions_and_caps(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f);
    struct txo_ratelimit *rl = make(&f, 10.0, 5);
    int64_t wait = 0;

    for (int i = 0; i < 5; i++)
        assert_true(txo_ratelimit_try(rl, NULL));

    f.fc.now_ms += 350; /* 3.5 tokens */
    assert_int_equal(txo_ratelimit_available(rl), 3);
    for (int i = 0; i < 3; i++)
        assert_true(txo_ratelimit_try(rl, NULL));
    assert_false(txo_ratelimit_try(rl, &wait));
    assert_int_equal(wait, 50); /* the half token is kept */

    f.fc.now_ms += 10 * 1000;
    assert_int_equal(txo_ratelimit_available(rl), 5); /* never more than the burst */
    for (int i = 0; i < 5; i++)
        assert_true(txo_ratelimit_try(rl, NULL));
    assert_false(txo_ratelimit_try(rl, &wait));
    assert_int_equal(wait, 100);
    txo_ratelimit_free(rl);
}

static void test_clock_going_back_counts_nothing_twice(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f);
    struct txo_ratelimit *rl = make(&f, 10.0, 1);
    int64_t t = f.fc.now_ms;

    assert_true(txo_ratelimit_try(rl, NULL));
    f.fc.now_ms = t + 100;
    assert_true(txo_ratelimit_try(rl, NULL));
    f.fc.now_ms = t + 50; /* back */
    assert_false(txo_ratelimit_try(rl, NULL));
    f.fc.now_ms = t + 100; /* the 50..100 stretch was already counted */
    assert_false(txo_ratelimit_try(rl, NULL));
    f.fc.now_ms = t + 200;
    assert_true(txo_ratelimit_try(rl, NULL));
    txo_ratelimit_free(rl);
}

static void test_acquire_sleeps_through_the_clock(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f);
    struct txo_ratelimit *rl = make(&f, 10.0, 1);
    struct txo_error err;
    txo_error_init(&err);
    int64_t t = f.fc.now_ms;

    assert_int_equal(txo_ratelimit_acquire(rl, 0, &err), 0);
    assert_int_equal(f.fc.sleeps, 0);

    assert_int_equal(txo_ratelimit_acquire(rl, 0, &err), TXO_EUNAVAILABLE);
    assert_string_equal(err.msg, "rate limit api exceeded (next token in 100 ms)");
    assert_int_equal(txo_ratelimit_acquire(rl, 99, &err), TXO_EUNAVAILABLE);
    assert_int_equal(f.fc.sleeps, 0);

    assert_int_equal(txo_ratelimit_acquire(rl, 100, &err), 0);
    assert_int_equal(f.fc.sleeps, 1);
    assert_int_equal(f.fc.slept_ms[0], 100);
    assert_int_equal(f.fc.now_ms, t + 100);
    /* The token it waited for is taken: the next one is 100 ms away again. */
    int64_t wait = 0;
    assert_false(txo_ratelimit_try(rl, &wait));
    assert_int_equal(wait, 100);
    txo_ratelimit_free(rl);
}

static void test_waiting_callers_queue(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f);
    f.fc.frozen = true; /* as if the callers were different threads */
    struct txo_ratelimit *rl = make(&f, 10.0, 1);

    assert_int_equal(txo_ratelimit_acquire(rl, 1000, NULL), 0);
    assert_int_equal(txo_ratelimit_acquire(rl, 1000, NULL), 0);
    assert_int_equal(txo_ratelimit_acquire(rl, 1000, NULL), 0);
    assert_int_equal(f.fc.sleeps, 2);
    assert_int_equal(f.fc.slept_ms[0], 100);
    assert_int_equal(f.fc.slept_ms[1], 200); /* behind the first waiter */

    int64_t wait = 0;
    assert_false(txo_ratelimit_try(rl, &wait));
    assert_int_equal(wait, 300);
    assert_int_equal(txo_ratelimit_available(rl), 0);
    /* A caller that would wait too long takes nothing. */
    assert_int_equal(txo_ratelimit_acquire(rl, 299, NULL), TXO_EUNAVAILABLE);
    f.fc.now_ms += 300;
    assert_true(txo_ratelimit_try(rl, NULL));
    assert_false(txo_ratelimit_try(rl, NULL));
    txo_ratelimit_free(rl);
}

/* Admitted calls over 1,000,000 ms, taking every token as soon as it is there. */
static int64_t admitted_over_a_million_ms(double rate, unsigned burst, const int *steps,
                                          size_t n_steps)
{
    struct fixture f;
    fixture_init(&f);
    struct txo_ratelimit *rl = make(&f, rate, burst);
    int64_t end = f.fc.now_ms + 1000000;
    int64_t admitted = 0;

    for (size_t i = 0;; i++) {
        while (txo_ratelimit_try(rl, NULL))
            admitted++;
        if (f.fc.now_ms == end)
            break;
        int64_t step = steps[i % n_steps];
        f.fc.now_ms = f.fc.now_ms + step < end ? f.fc.now_ms + step : end;
    }
    txo_ratelimit_free(rl);
    return admitted;
}

static void test_no_drift_over_a_million_ms(void **state)
{
    (void)state;
    const int every_ms[] = {1};
    const int irregular[] = {7, 1, 13, 3, 2, 11, 5};
    const int bursty[] = {1, 1, 1, 997};

    /* The burst, plus rate * 1000 s, exactly, however the time is sliced. (The bursts are big
     * enough that the bucket never fills up between two looks at it: a full bucket rightly
     * discards what it earns.) */
    assert_int_equal(admitted_over_a_million_ms(3.7, 2, every_ms, 1), 2 + 3700);
    assert_int_equal(admitted_over_a_million_ms(3.7, 2, irregular, 7), 2 + 3700);
    assert_int_equal(admitted_over_a_million_ms(1.0 / 3.0, 2, every_ms, 1), 2 + 333);
    assert_int_equal(admitted_over_a_million_ms(1.0 / 3.0, 2, irregular, 7), 2 + 333);
    assert_int_equal(admitted_over_a_million_ms(1000.5, 100, every_ms, 1), 100 + 1000500);
    assert_int_equal(admitted_over_a_million_ms(1000.5, 100, irregular, 7), 100 + 1000500);
    assert_int_equal(admitted_over_a_million_ms(0.001, 1, bursty, 4), 1 + 1);
    assert_int_equal(admitted_over_a_million_ms(100.0, 1000, bursty, 4), 1000 + 100000);
}

/* ---- threads ---- */

enum { THREADS = 4, ITERATIONS = 10000 };

struct shared {
    struct txo_ratelimit *rl;
    atomic_long admitted;
};

static void *take(void *arg)
{
    struct shared *s = arg;
    for (int i = 0; i < ITERATIONS; i++) {
        if (txo_ratelimit_try(s->rl, NULL))
            atomic_fetch_add(&s->admitted, 1);
    }
    return NULL;
}

static void test_threads_get_exactly_the_burst(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f); /* the clock stands still: only the burst is there */
    struct shared s = {.rl = make(&f, 5.0, 1234)};
    atomic_init(&s.admitted, 0);

    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, take, &s), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(atomic_load(&s.admitted), 1234);
    assert_int_equal(txo_ratelimit_available(s.rl), 0);
    txo_ratelimit_free(s.rl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invalid_arguments),
        cmocka_unit_test(test_burst_then_exact_wait),
        cmocka_unit_test(test_refill_keeps_fractions_and_caps),
        cmocka_unit_test(test_clock_going_back_counts_nothing_twice),
        cmocka_unit_test(test_acquire_sleeps_through_the_clock),
        cmocka_unit_test(test_waiting_callers_queue),
        cmocka_unit_test(test_no_drift_over_a_million_ms),
        cmocka_unit_test(test_threads_get_exactly_the_burst),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
