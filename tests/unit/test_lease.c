/*
 * Unit tests for the parts of src/queue/lease.c that need no server: lock tokens (fresh per
 * claim, prefix cut so the token fits its column) and the claim strategy names. The claims
 * themselves run against MariaDB in tests/integration/test_relay.c and test_cmdq.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "queue/lease.h"
#include "txo/txo.h"

static void test_token_without_prefix_is_a_uuid(void **state)
{
    (void)state;
    char a[TXO__LEASE_UUID_LEN + 1];
    char b[TXO__LEASE_UUID_LEN + 1];
    txo__lease_token(a, sizeof(a), NULL);
    txo__lease_token(b, sizeof(b), NULL);
    assert_int_equal(strlen(a), TXO__LEASE_UUID_LEN);
    assert_int_equal(a[8], '-');
    assert_int_equal(a[14], '4'); /* version 4: random */
    assert_string_not_equal(a, b);
}

static void test_token_prefix_is_cut_to_fit(void **state)
{
    (void)state;
    char token[129]; /* locked_by VARCHAR(128) */
    txo__lease_token(token, sizeof(token), "host:42");
    assert_int_equal(strlen(token), strlen("host:42:") + TXO__LEASE_UUID_LEN);
    assert_memory_equal(token, "host:42:", 8);

    char prefix[300];
    memset(prefix, 'p', sizeof(prefix) - 1);
    prefix[sizeof(prefix) - 1] = '\0';
    txo__lease_token(token, sizeof(token), prefix);
    assert_int_equal(strlen(token), sizeof(token) - 1);
    assert_int_equal(token[sizeof(token) - 2 - TXO__LEASE_UUID_LEN], ':');
}

static void test_strategy_names_round_trip(void **state)
{
    (void)state;
    const enum txo_claim_strategy all[] = {TXO_CLAIM_AUTO, TXO_CLAIM_SKIP_LOCKED,
                                           TXO_CLAIM_UPDATE_LIMIT};
    for (size_t i = 0; i < TXO_ARRAY_LEN(all); i++) {
        enum txo_claim_strategy s = TXO_CLAIM_AUTO;
        assert_int_equal(txo_claim_strategy_parse(txo_claim_strategy_name(all[i]), &s), 0);
        assert_int_equal(s, all[i]);
    }
    enum txo_claim_strategy s = TXO_CLAIM_UPDATE_LIMIT;
    assert_int_equal(txo_claim_strategy_parse(NULL, &s), TXO_EINVAL);
    assert_int_equal(txo_claim_strategy_parse("SKIP-LOCKED", &s), TXO_EINVAL);
    assert_int_equal(s, TXO_CLAIM_UPDATE_LIMIT); /* untouched on failure */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_without_prefix_is_a_uuid),
        cmocka_unit_test(test_token_prefix_is_cut_to_fit),
        cmocka_unit_test(test_strategy_names_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
