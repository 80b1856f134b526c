/*
 * The outbox status names round-trip, the claim strategy names, and the relay's default
 * options. The moves of the state machine are checked against the SQL that makes them in
 * tests/unit/test_sql_moves.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "txo/txo.h"

#define N_STATES 5

static const enum txo_outbox_status all[N_STATES] = {TXO_OUTBOX_PENDING, TXO_OUTBOX_PROCESSING,
                                                     TXO_OUTBOX_PUBLISHED, TXO_OUTBOX_FAILED,
                                                     TXO_OUTBOX_SKIPPED};

static void test_names_round_trip(void **state)
{
    (void)state;
    const char *names[N_STATES] = {"PENDING", "PROCESSING", "PUBLISHED", "FAILED", "SKIPPED"};
    for (size_t i = 0; i < N_STATES; i++) {
        assert_string_equal(txo_outbox_status_name(all[i]), names[i]);
        enum txo_outbox_status s = TXO_OUTBOX_FAILED;
        assert_int_equal(txo_outbox_status_parse(names[i], &s), 0);
        assert_int_equal(s, all[i]);
    }
    enum txo_outbox_status s = TXO_OUTBOX_PENDING;
    assert_int_equal(txo_outbox_status_parse("pending", &s), TXO_EINVAL);
    assert_int_equal(txo_outbox_status_parse("", &s), TXO_EINVAL);
    assert_int_equal(txo_outbox_status_parse("PUBLISHEDX", &s), TXO_EINVAL);
    assert_int_equal(txo_outbox_status_parse(NULL, &s), TXO_EINVAL);
    assert_int_equal(s, TXO_OUTBOX_PENDING); /* untouched on failure */
    /* Outside the enum: a name no parser takes back, never a crash. */
    assert_string_equal(txo_outbox_status_name((enum txo_outbox_status)N_STATES), "INVALID");
    assert_string_equal(txo_outbox_status_name((enum txo_outbox_status) - 1), "INVALID");
    assert_int_equal(txo_outbox_status_parse("INVALID", &s), TXO_EINVAL);
    assert_string_equal(txo_cmdq_status_name((enum txo_cmdq_status)99), "INVALID");
}

static void test_claim_strategy_names(void **state)
{
    (void)state;
    const char *names[] = {"auto", "skip-locked", "update-limit"};
    const enum txo_claim_strategy values[] = {TXO_CLAIM_AUTO, TXO_CLAIM_SKIP_LOCKED,
                                              TXO_CLAIM_UPDATE_LIMIT};
    for (size_t i = 0; i < 3; i++) {
        enum txo_claim_strategy s;
        assert_int_equal(txo_claim_strategy_parse(names[i], &s), 0);
        assert_int_equal(s, values[i]);
        assert_string_equal(txo_claim_strategy_name(values[i]), names[i]);
    }
    enum txo_claim_strategy s;
    assert_int_equal(txo_claim_strategy_parse("skip_locked", &s), TXO_EINVAL);
}

static void test_relay_opts_defaults(void **state)
{
    (void)state;
    struct txo_relay_opts o;
    txo_relay_opts_init(&o);
    assert_null(o.relay_id);
    assert_int_equal(o.claim, TXO_CLAIM_AUTO);
    assert_int_equal(o.batch_size, 500);
    assert_int_equal(o.lease_s, 30);
    assert_int_equal(o.max_attempts, 10);
    assert_int_equal(o.backoff.base_ms, 500);
    assert_int_equal(o.backoff.max_ms, 300000);
    assert_true(o.backoff.jitter == 0.5);
    assert_int_equal(o.idle_sleep_ms, 200);
    assert_false(o.drain);
    assert_int_equal(o.ordering, TXO_RELAY_ORDER_AGGREGATE); /* order is the default contract */
    assert_int_equal(o.shard_lease_ms, 10000);
    enum txo_relay_ordering ord = TXO_RELAY_ORDER_AGGREGATE;
    assert_int_equal(txo_relay_ordering_parse("none", &ord), 0);
    assert_int_equal(ord, TXO_RELAY_ORDER_NONE);
    assert_string_equal(txo_relay_ordering_name(TXO_RELAY_ORDER_AGGREGATE), "aggregate");
    assert_int_equal(txo_relay_ordering_parse("Aggregate", &ord), TXO_EINVAL);
    assert_int_equal(ord, TXO_RELAY_ORDER_NONE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_round_trip),
        cmocka_unit_test(test_claim_strategy_names),
        cmocka_unit_test(test_relay_opts_defaults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
