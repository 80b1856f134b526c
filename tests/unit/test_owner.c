/*
 * Unit tests for src/core/owner.c: the "<hostname>:<pid>[:<suffix>]" owner names written to
 * lease columns, and what happens when the caller's buffer is too small.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "txo/txo.h"

static void test_owner_name(void **state)
{
    (void)state;
    char host[256];
    if (gethostname(host, sizeof(host)) != 0 || host[0] == '\0')
        snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    char want[600];
    char buf[600];

    snprintf(want, sizeof(want), "%s:%ld", host, (long)getpid());
    assert_int_equal(txo_owner_name(buf, sizeof(buf), NULL), 0);
    assert_string_equal(buf, want);
    assert_int_equal(txo_owner_name(buf, sizeof(buf), ""), 0);
    assert_string_equal(buf, want);

    snprintf(want, sizeof(want), "%s:%ld:commands", host, (long)getpid());
    assert_int_equal(txo_owner_name(buf, sizeof(buf), "commands"), 0);
    assert_string_equal(buf, want);

    /* Too small (exactly one byte short): an error, and the buffer is left alone. */
    size_t need = strlen(want) + 1;
    memset(buf, 'q', sizeof(buf));
    assert_int_equal(txo_owner_name(buf, need - 1, "commands"), TXO_EINVAL);
    assert_int_equal(buf[0], 'q');
    assert_int_equal(txo_owner_name(buf, need, "commands"), 0);
    assert_string_equal(buf, want);
    assert_int_equal(txo_owner_name(NULL, 10, NULL), TXO_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_owner_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
