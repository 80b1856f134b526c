/*
 * Test support: runs a cmocka test table whose tests share one per-test fixture, so a test program
 * names its setup and teardown once instead of on every entry. tests[] lists cmocka_unit_test(f)
 * entries; each entry that names no fixture of its own gets setup and teardown, and an entry made
 * with cmocka_unit_test_setup_teardown keeps the fixture it names (testrun_no_fixture: none).
 * TESTRUN_SHARED_SERVER defines the group fixtures of a server that a whole program shares.
 */
#ifndef TXO_TESTRUN_H
#define TXO_TESTRUN_H

#include <stddef.h> /* and <cmocka.h> before this header, as cmocka asks */

/*
 * cmocka_run_group_tests(tests, group_setup, group_teardown) over a copy of tests[] in which every
 * entry without a setup or teardown has setup and teardown. Any fixture may be NULL. Returns what
 * cmocka returns: the number of tests that failed.
 */
int testrun_each(const struct CMUnitTest *tests, size_t n, CMFixtureFunction setup,
                 CMFixtureFunction teardown, CMFixtureFunction group_setup,
                 CMFixtureFunction group_teardown);

/*
 * A fixture that does nothing, for the entry of a test that runs without the table's fixture:
 * cmocka_unit_test_setup(test, testrun_no_fixture). Returns 0.
 */
int testrun_no_fixture(void **state);

/*
 * Defines the cmocka group fixtures of one server of type struct name that a whole test program
 * shares: the server name##_shared, name##_group_setup, which runs start(&name##_shared), and
 * name##_group_teardown, which runs stop(&name##_shared); both return 0. A server module states
 * it once (TESTRUN_SHARED_SERVER(testredis, testredis_start, testredis_cleanup)) and declares
 * the three in its header.
 */
#define TESTRUN_SHARED_SERVER(name, start, stop)                                                   \
    struct name name##_shared;                                                                     \
    int name##_group_setup(void **state)                                                           \
    {                                                                                              \
        (void)state;                                                                               \
        start(&name##_shared);                                                                     \
        return 0;                                                                                  \
    }                                                                                              \
    int name##_group_teardown(void **state)                                                        \
    {                                                                                              \
        (void)state;                                                                               \
        stop(&name##_shared);                                                                      \
        return 0;                                                                                  \
    }

#endif
