/*
 * Test support: runs a cmocka test table whose tests share one per-test fixture, so a test program
 * names its setup and teardown once instead of on every entry. tests[] lists cmocka_unit_test(f)
 * entries; each entry that names no fixture of its own gets setup and teardown, and an entry made
 * with cmocka_unit_test_setup_teardown keeps the fixture it names (testrun_no_fixture: none).
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

#endif
