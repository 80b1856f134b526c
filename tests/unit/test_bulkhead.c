/*
 * Unit tests for src/resilience/bulkhead.c: N slots are handed out and the N+1th call is
 * rejected at once with TXO_EUNAVAILABLE; a release admits another; a bounded wait times out
 * (30 ms) or is ended early by a release from another thread; threads hammering it never see
 * more than N calls in flight, and waiters are never lost. The only real waiting is in the two
 * timed-wait tests, each well under 50 ms.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "txo/txo.h"
#include "txo/bulkhead.h"

static struct txo_bulkhead *make(const char *name, unsigned max)
{
    struct txo_bulkhead *b = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_bulkhead_new(name, max, &b, &err) != 0)
        fail_msg("txo_bulkhead_new: %s", err.msg);
    return b;
}

static void test_invalid_arguments(void **state)
{
    (void)state;
    struct txo_bulkhead *b = NULL;
    struct txo_error err;
    txo_error_init(&err);

    assert_int_equal(txo_bulkhead_new("shipping", 0, &b, &err), TXO_EINVAL);
    assert_string_equal(err.msg, "bulkhead shipping: max_concurrent must be >= 1");
    assert_int_equal(txo_bulkhead_new("", 3, &b, &err), TXO_EINVAL);
    assert_int_equal(txo_bulkhead_new(NULL, 3, &b, &err), TXO_EINVAL);
    for (long n = 0; n < 2; n++) {
        txo_alloc_fail_after(n);
        assert_int_equal(txo_bulkhead_new("shipping", 3, &b, &err), TXO_ENOMEM);
        txo_alloc_fail_after(-1);
    }
    assert_null(b);
    txo_bulkhead_free(NULL);
}

static void test_full_rejects_and_release_admits(void **state)
{
    (void)state;
    struct txo_bulkhead *b = make("shipping", 3);
    struct txo_error err;
    txo_error_init(&err);

    assert_string_equal(txo_bulkhead_name(b), "shipping");
    for (unsigned i = 0; i < 3; i++) {
        assert_int_equal(txo_bulkhead_acquire(b, 0, &err), 0);
        assert_int_equal(txo_bulkhead_in_flight(b), i + 1);
    }
    assert_int_equal(txo_bulkhead_acquire(b, 0, &err), TXO_EUNAVAILABLE);
    assert_int_equal(err.code, TXO_EUNAVAILABLE);
    assert_string_equal(err.msg, "bulkhead shipping is full (3 calls in flight)");
    /* A negative wait means no wait, too. */
    assert_int_equal(txo_bulkhead_acquire(b, -5, NULL), TXO_EUNAVAILABLE);
    assert_int_equal(txo_bulkhead_in_flight(b), 3);

    txo_bulkhead_release(b);
    assert_int_equal(txo_bulkhead_in_flight(b), 2);
    assert_int_equal(txo_bulkhead_acquire(b, 0, &err), 0);
    assert_int_equal(txo_bulkhead_acquire(b, 0, &err), TXO_EUNAVAILABLE);

    struct txo_bulkhead_stats st;
    txo_bulkhead_get_stats(b, &st);
    assert_int_equal(st.max_concurrent, 3);
    assert_int_equal(st.in_flight, 3);
    assert_int_equal(st.peak, 3);
    assert_int_equal(st.admitted, 4);
    assert_int_equal(st.rejected, 3);
    assert_int_equal(st.waiting, 0);

    for (int i = 0; i < 3; i++)
        txo_bulkhead_release(b);
    assert_int_equal(txo_bulkhead_in_flight(b), 0);
    txo_bulkhead_free(b);
}

static void test_timed_wait_times_out(void **state)
{
    (void)state;
    struct txo_bulkhead *b = make("payment", 1);
    struct txo_error err;
    txo_error_init(&err);

    assert_int_equal(txo_bulkhead_acquire(b, 0, NULL), 0);
    int64_t t0 = txo_monotonic_us();
    assert_int_equal(txo_bulkhead_acquire(b, 30, &err), TXO_EUNAVAILABLE);
    int64_t waited_us = txo_monotonic_us() - t0;
    assert_string_equal(err.msg, "bulkhead payment is full (1 calls in flight)");
    /* It really waited the 30 ms, and not much longer. */
    assert_true(waited_us >= 30000);
    assert_true(waited_us < 1000000);

    struct txo_bulkhead_stats st;
    txo_bulkhead_get_stats(b, &st);
    assert_int_equal(st.waiting, 0);
    assert_int_equal(st.rejected, 1);
    txo_bulkhead_release(b);
    txo_bulkhead_free(b);
}

static void *release_soon(void *arg)
{
    struct txo_bulkhead *b = arg;
    /* Wait until the main thread is waiting, then free the slot. */
    for (;;) {
        struct txo_bulkhead_stats st;
        txo_bulkhead_get_stats(b, &st);
        if (st.waiting > 0)
            break;
        sched_yield();
    }
    txo_sleep_ms(5);
    txo_bulkhead_release(b);
    return NULL;
}

static void test_waiter_admitted_by_release(void **state)
{
    (void)state;
    struct txo_bulkhead *b = make("payment", 1);
    assert_int_equal(txo_bulkhead_acquire(b, 0, NULL), 0);

    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, release_soon, b), 0);
    int64_t t0 = txo_monotonic_us();
    /* The long limit is never reached: the release ends the wait after about 5 ms. */
    assert_int_equal(txo_bulkhead_acquire(b, 10000, NULL), 0);
    int64_t waited_us = txo_monotonic_us() - t0;
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(waited_us >= 5000);
    assert_true(waited_us < 5000000);
    assert_int_equal(txo_bulkhead_in_flight(b), 1);

    txo_bulkhead_release(b);
    txo_bulkhead_free(b);
}

/* ---- threads ---- */

enum { THREADS = 4, ITERATIONS = 20000, MAX_CONCURRENT = 2 };

struct shared {
    struct txo_bulkhead *b;
    int64_t max_wait_ms;
    atomic_int current; /* callers between acquire and release, as the callers count them */
    atomic_int max_seen;
    atomic_long admitted;
    atomic_long rejected;
    atomic_long bad_codes;
};

static void *hammer(void *arg)
{
    struct shared *s = arg;

    for (int i = 0; i < ITERATIONS; i++) {
        int rc = txo_bulkhead_acquire(s->b, s->max_wait_ms, NULL);
        if (rc != 0) {
            atomic_fetch_add(&s->rejected, 1);
            if (rc != TXO_EUNAVAILABLE)
                atomic_fetch_add(&s->bad_codes, 1);
            continue;
        }
        int now = atomic_fetch_add(&s->current, 1) + 1;
        int seen = atomic_load(&s->max_seen);
        while (now > seen && !atomic_compare_exchange_weak(&s->max_seen, &seen, now)) {
        }
        if (i % 8 == 0)
            sched_yield(); /* hold the slot a little, so others find it full */
        atomic_fetch_sub(&s->current, 1);
        atomic_fetch_add(&s->admitted, 1);
        txo_bulkhead_release(s->b);
    }
    return NULL;
}

static void run_hammer(int64_t max_wait_ms, struct shared *s)
{
    memset(s, 0, sizeof(*s));
    s->b = make("stress", MAX_CONCURRENT);
    s->max_wait_ms = max_wait_ms;
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, hammer, s), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);

    struct txo_bulkhead_stats st;
    txo_bulkhead_get_stats(s->b, &st);
    assert_int_equal(atomic_load(&s->bad_codes), 0);
    assert_true(atomic_load(&s->max_seen) <= MAX_CONCURRENT);
    assert_true(st.peak <= MAX_CONCURRENT);
    assert_int_equal(st.in_flight, 0);
    assert_int_equal(st.waiting, 0);
    assert_int_equal(st.admitted, (uint64_t)atomic_load(&s->admitted));
    assert_int_equal(st.rejected, (uint64_t)atomic_load(&s->rejected));
    assert_int_equal(atomic_load(&s->admitted) + atomic_load(&s->rejected),
                     (long)THREADS * ITERATIONS);
    txo_bulkhead_free(s->b);
}

static void test_threads_never_exceed_max(void **state)
{
    (void)state;
    struct shared s;
    run_hammer(0, &s);
    assert_true(atomic_load(&s.admitted) > 0);
}

static void test_threads_waiting_are_all_admitted(void **state)
{
    (void)state;
    struct shared s;
    /* Slots are held for microseconds; a 10 s limit is never reached unless a wake-up is lost. */
    run_hammer(10000, &s);
    assert_int_equal(atomic_load(&s.rejected), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invalid_arguments),
        cmocka_unit_test(test_full_rejects_and_release_admits),
        cmocka_unit_test(test_timed_wait_times_out),
        cmocka_unit_test(test_waiter_admitted_by_release),
        cmocka_unit_test(test_threads_never_exceed_max),
        cmocka_unit_test(test_threads_waiting_are_all_admitted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
