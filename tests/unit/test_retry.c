/*
 * Unit tests for src/resilience/retry.c: transient failures are retried with the backoff
 * delays (checked against txo_backoff_delay_ms() for the injected random numbers, slept
 * through a fake clock that only records), permanent failures stop at once, exhaustion
 * returns the last error with its detail, and a success leaves the caller's err untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "txo/txo.h"
#include "txo/retry.h"

#include "testclock.h"

/* Hands out the numbers of `values` in turn, repeating the last one. */
struct rand_seq {
    const double *values;
    size_t n;
    size_t next;
};

static double seq_rand01(void *arg)
{
    struct rand_seq *rs = arg;
    double v = rs->values[rs->next < rs->n ? rs->next : rs->n - 1];
    rs->next++;
    return v;
}

/* The operation: fails with codes[attempt - 1] (0 = success), writing detail unless bare. */
struct script {
    const int *codes;
    size_t n_codes;
    bool bare; /* return the code without writing err */
    unsigned calls;
    unsigned seen[16]; /* the attempt numbers fn was called with */
};

static int scripted(void *arg, unsigned attempt, struct txo_error *err)
{
    struct script *s = arg;
    if (s->calls < TXO_ARRAY_LEN(s->seen))
        s->seen[s->calls] = attempt;
    s->calls++;
    int rc = s->codes[attempt - 1 < s->n_codes ? attempt - 1 : s->n_codes - 1];
    if (rc == 0 || s->bare)
        return rc;
    return txo_error_set(err, rc, "%s on attempt %u", txo_err_name(rc), attempt);
}

struct fixture {
    struct testclock fc;
    struct txo_clock clock;
    struct rand_seq rs;
    struct txo_retry_policy p;
};

static const double fixed_rand[] = {0.25};

static void fixture_init(struct fixture *f, unsigned max_attempts)
{
    memset(f, 0, sizeof(*f));
    testclock_init(&f->fc);
    f->fc.now_ms = 1000;
    f->clock = f->fc.clock;
    f->rs = (struct rand_seq){.values = fixed_rand, .n = 1};
    txo_retry_policy_init(&f->p);
    f->p.max_attempts = max_attempts;
    f->p.backoff = (struct txo_backoff){.base_ms = 100, .max_ms = 1000, .jitter = 0.5};
    f->p.clock = &f->clock;
    f->p.rand01 = seq_rand01;
    f->p.rand_arg = &f->rs;
}

/* An err holding a marker, to see whether txo_retry_run wrote it. */
static void mark(struct txo_error *err)
{
    txo_error_init(err);
    txo_error_set(err, TXO_ENOTFOUND, "marker");
}

static void test_policy_defaults(void **state)
{
    (void)state;
    struct txo_retry_policy p;
    memset(&p, 0xAB, sizeof(p));
    txo_retry_policy_init(&p);
    assert_int_equal(p.max_attempts, 3);
    assert_int_equal(p.backoff.base_ms, 100);
    assert_int_equal(p.backoff.max_ms, 2000);
    assert_true(p.backoff.jitter == 0.5);
    assert_null(p.clock);
    assert_null(p.rand01);
    assert_null(p.rand_arg);
}

static void test_transient_then_success(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5);
    const int codes[] = {TXO_EDEADLOCK, TXO_ELOCKTIMEOUT, 0};
    struct script s = {.codes = codes, .n_codes = 3};
    struct txo_error err;
    mark(&err);
    unsigned attempts = 99;

    assert_int_equal(txo_retry_run(&f.p, scripted, &s, &attempts, &err), 0);
    assert_int_equal(attempts, 3);
    assert_int_equal(s.calls, 3);
    assert_int_equal(s.seen[0], 1);
    assert_int_equal(s.seen[1], 2);
    assert_int_equal(s.seen[2], 3);

    /* One sleep after each failure, the delay for that failure number and the fixed rand. */
    assert_int_equal(f.fc.sleeps, 2);
    assert_int_equal(f.fc.slept_ms[0], txo_backoff_delay_ms(&f.p.backoff, 1, 0.25));
    assert_int_equal(f.fc.slept_ms[1], txo_backoff_delay_ms(&f.p.backoff, 2, 0.25));
    assert_int_equal(f.fc.slept_ms[0], 75);
    assert_int_equal(f.fc.slept_ms[1], 150);
    assert_int_equal(f.fc.now_ms, 1000 + 75 + 150);

    /* A success leaves err as it was, even though two calls failed on the way. */
    assert_int_equal(err.code, TXO_ENOTFOUND);
    assert_string_equal(err.msg, "marker");
}

static void test_each_retry_draws_a_new_random_number(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 4);
    const double values[] = {0.0, 0.999, 0.5};
    f.rs = (struct rand_seq){.values = values, .n = 3};
    const int codes[] = {TXO_ECONNLOST, TXO_ECONNLOST, TXO_ECONNLOST, 0};
    struct script s = {.codes = codes, .n_codes = 4};
    unsigned attempts = 0;

    assert_int_equal(txo_retry_run(&f.p, scripted, &s, &attempts, NULL), 0);
    assert_int_equal(attempts, 4);
    assert_int_equal(f.rs.next, 3);
    assert_int_equal(f.fc.sleeps, 3);
    assert_int_equal(f.fc.slept_ms[0], txo_backoff_delay_ms(&f.p.backoff, 1, 0.0));
    assert_int_equal(f.fc.slept_ms[1], txo_backoff_delay_ms(&f.p.backoff, 2, 0.999));
    assert_int_equal(f.fc.slept_ms[2], txo_backoff_delay_ms(&f.p.backoff, 3, 0.5));
    assert_int_equal(f.fc.slept_ms[0], 50);
    assert_int_equal(f.fc.slept_ms[1], 300);
    assert_int_equal(f.fc.slept_ms[2], 400);
}

static void test_permanent_error_stops_at_once(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5);
    const int codes[] = {TXO_EBUSINESS, 0};
    struct script s = {.codes = codes, .n_codes = 2};
    struct txo_error err;
    mark(&err);
    unsigned attempts = 0;

    assert_int_equal(txo_retry_run(&f.p, scripted, &s, &attempts, &err), TXO_EBUSINESS);
    assert_int_equal(attempts, 1);
    assert_int_equal(s.calls, 1);
    assert_int_equal(f.fc.sleeps, 0);
    assert_int_equal(f.rs.next, 0); /* no delay was even computed */
    assert_int_equal(err.code, TXO_EBUSINESS);
    assert_string_equal(err.msg, "TXO_EBUSINESS on attempt 1");
}

static void test_transient_then_permanent(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5);
    const int codes[] = {TXO_EUNAVAILABLE, TXO_ECONSTRAINT};
    struct script s = {.codes = codes, .n_codes = 2};
    struct txo_error err;
    txo_error_init(&err);
    unsigned attempts = 0;

    assert_int_equal(txo_retry_run(&f.p, scripted, &s, &attempts, &err), TXO_ECONSTRAINT);
    assert_int_equal(attempts, 2);
    assert_int_equal(f.fc.sleeps, 1);
    assert_int_equal(f.fc.slept_ms[0], 75);
    assert_string_equal(err.msg, "TXO_ECONSTRAINT on attempt 2");
}

static void test_exhaustion_returns_last_error(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 4);
    f.p.backoff = (struct txo_backoff){.base_ms = 100, .max_ms = 250, .jitter = 0.0};
    const int codes[] = {TXO_EDEADLOCK, TXO_EDEADLOCK, TXO_EDEADLOCK, TXO_ETIMEOUT, 0};
    struct script s = {.codes = codes, .n_codes = 5};
    struct txo_error err;
    txo_error_init(&err);
    unsigned attempts = 0;

    assert_int_equal(txo_retry_run(&f.p, scripted, &s, &attempts, &err), TXO_ETIMEOUT);
    assert_int_equal(attempts, 4);
    assert_int_equal(s.calls, 4);
    /* No sleep after the last attempt; the cap applies to the third delay. */
    assert_int_equal(f.fc.sleeps, 3);
    assert_int_equal(f.fc.slept_ms[0], 100);
    assert_int_equal(f.fc.slept_ms[1], 200);
    assert_int_equal(f.fc.slept_ms[2], 250);
    assert_int_equal(err.code, TXO_ETIMEOUT);
    assert_string_equal(err.msg, "TXO_ETIMEOUT on attempt 4");
}

static void test_bare_code_gets_a_description(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 2);
    const int codes[] = {TXO_ECONNLOST};
    struct script s = {.codes = codes, .n_codes = 1, .bare = true};
    struct txo_error err;
    mark(&err);

    assert_int_equal(txo_retry_run(&f.p, scripted, &s, NULL, &err), TXO_ECONNLOST);
    assert_int_equal(s.calls, 2);
    assert_int_equal(err.code, TXO_ECONNLOST);
    assert_string_equal(err.msg, txo_strerror(TXO_ECONNLOST));
}

static void test_single_attempt_never_sleeps(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 1);
    const int codes[] = {TXO_EDEADLOCK};
    struct script s = {.codes = codes, .n_codes = 1};
    unsigned attempts = 0;

    assert_int_equal(txo_retry_run(&f.p, scripted, &s, &attempts, NULL), TXO_EDEADLOCK);
    assert_int_equal(attempts, 1);
    assert_int_equal(f.fc.sleeps, 0);
}

static void test_zero_delay_is_not_slept(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 3);
    f.p.backoff = (struct txo_backoff){.base_ms = 0, .max_ms = 0, .jitter = 0.0};
    const int codes[] = {TXO_EDEADLOCK, TXO_EDEADLOCK, 0};
    struct script s = {.codes = codes, .n_codes = 3};

    assert_int_equal(txo_retry_run(&f.p, scripted, &s, NULL, NULL), 0);
    assert_int_equal(s.calls, 3);
    assert_int_equal(f.fc.sleeps, 0);
}

static void test_zero_attempts_is_invalid(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 0);
    const int codes[] = {0};
    struct script s = {.codes = codes, .n_codes = 1};
    struct txo_error err;
    txo_error_init(&err);
    unsigned attempts = 7;

    assert_int_equal(txo_retry_run(&f.p, scripted, &s, &attempts, &err), TXO_EINVAL);
    assert_int_equal(err.code, TXO_EINVAL);
    assert_int_equal(s.calls, 0);
    assert_int_equal(attempts, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy_defaults),
        cmocka_unit_test(test_transient_then_success),
        cmocka_unit_test(test_each_retry_draws_a_new_random_number),
        cmocka_unit_test(test_permanent_error_stops_at_once),
        cmocka_unit_test(test_transient_then_permanent),
        cmocka_unit_test(test_exhaustion_returns_last_error),
        cmocka_unit_test(test_bare_code_gets_a_description),
        cmocka_unit_test(test_single_attempt_never_sleeps),
        cmocka_unit_test(test_zero_delay_is_not_slept),
        cmocka_unit_test(test_zero_attempts_is_invalid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
