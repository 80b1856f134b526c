/*
 * Test support: a cmocka test table with one per-test fixture (see testrun.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testrun.h"

int testrun_each(const struct CMUnitTest *tests, size_t n, CMFixtureFunction setup,
                 CMFixtureFunction teardown, CMFixtureFunction group_setup,
                 CMFixtureFunction group_teardown)
{
    struct CMUnitTest *copy = calloc(n, sizeof(*copy));
    if (copy == NULL) {
        fprintf(stderr, "testrun_each: out of memory for %zu tests\n", n);
        return (int)n;
    }
    for (size_t i = 0; i < n; i++) {
        copy[i] = tests[i];
        if (copy[i].setup_func == NULL && copy[i].teardown_func == NULL) {
            copy[i].setup_func = setup;
            copy[i].teardown_func = teardown;
        }
    }
    /* "tests": the name cmocka_run_group_tests gives a table named tests, as the output had. */
    int failed = _cmocka_run_group_tests("tests", copy, n, group_setup, group_teardown);
    free(copy);
    return failed;
}

int testrun_no_fixture(void **state)
{
    (void)state;
    return 0;
}
