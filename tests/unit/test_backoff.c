/*
 * Unit tests for src/core/backoff.c: exact delays for given random numbers, the cap, the
 * jitter bounds, inputs out of range, huge attempt numbers, and txo_rand01()'s range.
 */
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "txo/txo.h"

static void test_doubles_without_jitter(void **state)
{
    (void)state;
    const struct txo_backoff b = {.base_ms = 100, .max_ms = 10000, .jitter = 0.0};
    const int64_t expected[] = {100, 100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000};

    /* attempt 0 counts as attempt 1 */
    for (unsigned attempt = 0; attempt < TXO_ARRAY_LEN(expected); attempt++) {
        assert_int_equal(txo_backoff_delay_ms(&b, attempt, 0.0), expected[attempt]);
        assert_int_equal(txo_backoff_delay_ms(&b, attempt, 0.999), expected[attempt]);
    }
}

static void test_exact_delays_with_jitter(void **state)
{
    (void)state;
    const struct txo_backoff b = {.base_ms = 100, .max_ms = 10000, .jitter = 0.5};

    /* factor = 1 - jitter + 2 * jitter * rand01, rounded to the nearest millisecond */
    assert_int_equal(txo_backoff_delay_ms(&b, 1, 0.0), 50);
    assert_int_equal(txo_backoff_delay_ms(&b, 1, 0.5), 100);
    assert_int_equal(txo_backoff_delay_ms(&b, 1, 0.75), 125);
    assert_int_equal(txo_backoff_delay_ms(&b, 1, 0.999), 150);
    assert_int_equal(txo_backoff_delay_ms(&b, 3, 0.25), 300);
    assert_int_equal(txo_backoff_delay_ms(&b, 4, 0.1), 480);
    /* the cap applies before the jitter */
    assert_int_equal(txo_backoff_delay_ms(&b, 30, 0.0), 5000);
    assert_int_equal(txo_backoff_delay_ms(&b, 30, 0.5), 10000);
    assert_int_equal(txo_backoff_delay_ms(&b, 30, 0.9), 14000);

    /* a 1 s base, a 60 s cap and 20 % jitter */
    const struct txo_backoff slow = {.base_ms = 1000, .max_ms = 60000, .jitter = 0.2};
    assert_int_equal(txo_backoff_delay_ms(&slow, 2, 0.3), 1840);
    assert_int_equal(txo_backoff_delay_ms(&slow, 7, 0.5), 60000);
}

static void test_jitter_stays_in_bounds(void **state)
{
    (void)state;
    const struct txo_backoff b = {.base_ms = 250, .max_ms = 30000, .jitter = 0.3};

    for (unsigned attempt = 1; attempt <= 12; attempt++) {
        int64_t nominal = txo_backoff_delay_ms(&b, attempt, 0.5);
        int64_t lo = (int64_t)floor((double)nominal * 0.7);
        int64_t hi = (int64_t)ceil((double)nominal * 1.3);
        int64_t seen_min = INT64_MAX;
        int64_t seen_max = 0;
        for (int i = 0; i < 2000; i++) {
            double r = i < 1000 ? i / 1000.0 : txo_rand01();
            int64_t d = txo_backoff_delay_ms(&b, attempt, r);
            assert_in_range(d, lo, hi);
            seen_min = d < seen_min ? d : seen_min;
            seen_max = d > seen_max ? d : seen_max;
        }
        /* the spread is really used, not collapsed to the nominal value */
        assert_true(seen_min <= (int64_t)ceil((double)nominal * 0.71));
        assert_true(seen_max >= (int64_t)floor((double)nominal * 1.29));
    }
}

static void test_out_of_range_inputs_are_clamped(void **state)
{
    (void)state;
    const struct txo_backoff wild = {.base_ms = 100, .max_ms = 1000, .jitter = 5.0};
    /* jitter > 1 counts as 1: factor in [0, 2] */
    assert_int_equal(txo_backoff_delay_ms(&wild, 1, 0.0), 0);
    assert_int_equal(txo_backoff_delay_ms(&wild, 1, 0.5), 100);

    const struct txo_backoff neg = {.base_ms = 100, .max_ms = 1000, .jitter = -0.5};
    assert_int_equal(txo_backoff_delay_ms(&neg, 1, 0.0), 100);

    const struct txo_backoff nan_jitter = {.base_ms = 100, .max_ms = 1000, .jitter = NAN};
    assert_int_equal(txo_backoff_delay_ms(&nan_jitter, 1, 0.3), 100);

    const struct txo_backoff b = {.base_ms = 100, .max_ms = 1000, .jitter = 0.5};
    /* rand01 outside [0, 1] is clamped; NaN counts as 0 */
    assert_int_equal(txo_backoff_delay_ms(&b, 1, -3.0), 50);
    assert_int_equal(txo_backoff_delay_ms(&b, 1, 7.0), 150);
    assert_int_equal(txo_backoff_delay_ms(&b, 1, NAN), 50);

    const struct txo_backoff negative = {.base_ms = -100, .max_ms = -5, .jitter = 0.5};
    assert_int_equal(txo_backoff_delay_ms(&negative, 3, 0.9), 0);

    /* max below base: the cap wins from the first attempt */
    const struct txo_backoff small_max = {.base_ms = 500, .max_ms = 200, .jitter = 0.0};
    assert_int_equal(txo_backoff_delay_ms(&small_max, 1, 0.0), 200);
}

static void test_large_attempts_do_not_overflow(void **state)
{
    (void)state;
    const struct txo_backoff b = {.base_ms = 100, .max_ms = 60000, .jitter = 0.0};
    const unsigned attempts[] = {31, 32, 33, 62, 63, 64, 65, 1000, UINT_MAX};
    for (size_t i = 0; i < TXO_ARRAY_LEN(attempts); i++) {
        assert_int_equal(txo_backoff_delay_ms(&b, attempts[i], 0.0), 60000);
    }

    /* with no useful cap the doubling itself must stop at INT64_MAX */
    const struct txo_backoff one = {.base_ms = 1, .max_ms = INT64_MAX, .jitter = 0.0};
    assert_int_equal(txo_backoff_delay_ms(&one, 63, 0.0), INT64_C(1) << 62);
    assert_int_equal(txo_backoff_delay_ms(&one, 64, 0.0), INT64_MAX);
    assert_int_equal(txo_backoff_delay_ms(&one, UINT_MAX, 0.0), INT64_MAX);

    const struct txo_backoff huge = {
        .base_ms = INT64_MAX / 2 + 1, .max_ms = INT64_MAX, .jitter = 1.0};
    assert_int_equal(txo_backoff_delay_ms(&huge, 2, 0.99), INT64_MAX);
    assert_int_equal(txo_backoff_delay_ms(&huge, 1, 0.0), 0);
}

static void test_rand01_range_and_spread(void **state)
{
    (void)state;
    enum { DRAWS = 100000, BUCKETS = 10 };
    int buckets[BUCKETS] = {0};
    double sum = 0.0;
    double first = txo_rand01();
    bool all_same = true;

    for (int i = 0; i < DRAWS; i++) {
        double r = txo_rand01();
        assert_true(r >= 0.0 && r < 1.0);
        if (r != first) {
            all_same = false;
        }
        buckets[(int)(r * BUCKETS)]++;
        sum += r;
    }
    assert_false(all_same);
    assert_true(fabs(sum / DRAWS - 0.5) < 0.01);
    for (int i = 0; i < BUCKETS; i++) {
        /* 10% each, allowing for far more than random variation */
        assert_in_range(buckets[i], DRAWS / BUCKETS * 9 / 10, DRAWS / BUCKETS * 11 / 10);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_doubles_without_jitter),
        cmocka_unit_test(test_exact_delays_with_jitter),
        cmocka_unit_test(test_jitter_stays_in_bounds),
        cmocka_unit_test(test_out_of_range_inputs_are_clamped),
        cmocka_unit_test(test_large_attempts_do_not_overflow),
        cmocka_unit_test(test_rand01_range_and_spread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
