/*
 * Unit tests for src/core/clock.c and src/core/alloc.c: RFC 3339 formatting of known instants,
 * the system clock's basic properties (without sleeping), out-of-memory injection, and the
 * growing arrays every module shares.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/common.h"

static void test_rfc3339_known_instants(void **state)
{
    (void)state;
    static const struct {
        int64_t us;
        const char *text;
    } cases[] = {
        {0, "1970-01-01T00:00:00.000000Z"},
        {1700000000123456, "2023-11-14T22:13:20.123456Z"},
        {951782400000001, "2000-02-29T00:00:00.000001Z"},
        {1798761599999999, "2026-12-31T23:59:59.999999Z"},
        {-1, "1969-12-31T23:59:59.999999Z"},
        {-1500000, "1969-12-31T23:59:58.500000Z"},
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(cases); i++) {
        char out[TXO_RFC3339_LEN];
        memset(out, '#', sizeof(out));
        txo_format_rfc3339(cases[i].us, out);
        assert_string_equal(out, cases[i].text);
    }
}

static void test_system_clock(void **state)
{
    (void)state;
    const struct txo_clock *clock = txo_clock_system();
    assert_non_null(clock);
    assert_ptr_equal(clock, txo_clock_system());

    int64_t a = txo_monotonic_us();
    int64_t b = txo_monotonic_us();
    assert_true(b >= a);
    int64_t ms = clock->now_ms(clock->arg);
    assert_true(ms >= a / 1000);
    assert_true(txo_monotonic_ms() >= ms);

    /* later than 2020-01-01 and earlier than 2200-01-01 */
    int64_t now = txo_realtime_us();
    assert_true(now > INT64_C(1577836800000000));
    assert_true(now < INT64_C(7258118400000000));

    /* zero and negative sleeps return at once */
    clock->sleep_ms(clock->arg, 0);
    txo_sleep_ms(-5);
}

static int alloc_reset(void **state)
{
    (void)state;
    txo_alloc_fail_after(-1);
    return 0;
}

static void test_fail_after_zero_fails_at_once_then_recovers(void **state)
{
    (void)state;
    void *keep = txo_malloc(16);
    assert_non_null(keep);

    txo_alloc_fail_after(0);
    assert_null(txo_malloc(16));
    assert_null(txo_calloc(4, 4));
    assert_null(txo_strdup("x"));
    assert_null(txo_strndup("xyz", 2));
    /* a failed realloc leaves the old block valid */
    assert_null(txo_realloc(keep, 64));
    memset(keep, 0, 16);

    txo_alloc_fail_after(-1);
    void *p = txo_malloc(16);
    assert_non_null(p);
    keep = txo_realloc(keep, 64);
    assert_non_null(keep);
    txo_free(p);
    txo_free(keep);
}

static void test_fail_after_n_lets_n_through(void **state)
{
    (void)state;
    txo_alloc_fail_after(2);
    void *a = txo_malloc(8);
    char *b = txo_strdup("two");
    void *c = txo_calloc(1, 8);
    void *d = txo_malloc(8);
    assert_non_null(a);
    assert_non_null(b);
    assert_null(c);
    assert_null(d); /* and every allocation after it */

    txo_alloc_fail_after(-1);
    txo_free(a);
    txo_free(b);
    txo_free(NULL);
}

static void test_strdup_and_strndup(void **state)
{
    (void)state;
    assert_null(txo_strdup(NULL));
    assert_null(txo_strndup(NULL, 3));

    char *s = txo_strdup("outbox");
    assert_string_equal(s, "outbox");
    txo_free(s);

    s = txo_strndup("outbox", 3);
    assert_string_equal(s, "out");
    txo_free(s);

    /* n beyond the end copies up to the NUL and reads no further */
    char small[4] = {'a', 'b', '\0', 'z'};
    s = txo_strndup(small, 1000);
    assert_string_equal(s, "ab");
    txo_free(s);

    s = txo_strndup("abc", 0);
    assert_string_equal(s, "");
    txo_free(s);
}

static void test_array_reserve_doubles_and_keeps_on_failure(void **state)
{
    (void)state;
    int *v = NULL;
    size_t cap = 0;
    assert_int_equal(TXO_ARRAY_RESERVE(v, cap, 1, 4), 0);
    assert_int_equal(cap, 4);
    for (int i = 0; i < 4; i++)
        v[i] = i;
    assert_int_equal(TXO_ARRAY_RESERVE(v, cap, 4, 4), 0); /* room already: nothing moves */
    assert_int_equal(cap, 4);
    assert_int_equal(TXO_ARRAY_RESERVE(v, cap, 9, 4), 0); /* doubles until it holds 9 */
    assert_int_equal(cap, 16);
    assert_int_equal(v[3], 3);

    int *before = v;
    txo_alloc_fail_after(0);
    assert_int_equal(TXO_ARRAY_RESERVE(v, cap, 17, 4), TXO_ENOMEM);
    txo_alloc_fail_after(-1);
    assert_ptr_equal(v, before);
    assert_int_equal(cap, 16);
    assert_int_equal(v[2], 2);

    /* A size that overflows is refused before any allocation. */
    assert_int_equal(TXO_ARRAY_RESERVE(v, cap, SIZE_MAX / 2, 4), TXO_ENOMEM);
    assert_int_equal(TXO_ARRAY_RESIZE(v, SIZE_MAX / sizeof(*v) + 1), TXO_ENOMEM);
    assert_ptr_equal(v, before);
    assert_int_equal(TXO_ARRAY_RESIZE(v, 2), 0);
    assert_int_equal(v[1], 1);
    txo_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc3339_known_instants),
        cmocka_unit_test(test_system_clock),
        cmocka_unit_test_teardown(test_fail_after_zero_fails_at_once_then_recovers, alloc_reset),
        cmocka_unit_test_teardown(test_fail_after_n_lets_n_through, alloc_reset),
        cmocka_unit_test_teardown(test_strdup_and_strndup, alloc_reset),
        cmocka_unit_test_teardown(test_array_reserve_doubles_and_keeps_on_failure, alloc_reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
