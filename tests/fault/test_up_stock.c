/*
 * `txo up --stock` is checked before `txo up` touches the database: a malformed list exits 2
 * (a usage error) without connecting, migrating or writing any of its good items; a good list
 * creates its SKUs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testdb.h"
#include "testproc.h"

struct ctx {
    struct testdb t;
    struct testproc p;
};

static int setup(void **state)
{
    struct ctx *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    testdb_setup(&c->t, "upstock");
    testdb_export_env(&c->t);
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    testproc_stop_hard(&c->p);
    testdb_teardown(&c->t);
    free(c);
    return 0;
}

/* Runs `txo up args...` and returns once it has exited (fails after 10 s). */
static void run_up(struct ctx *c, const char *const *args)
{
    const char *argv[16] = {testproc_txo_bin(), "up", "--listen", "127.0.0.1:0"};
    size_t n = 4;
    for (size_t i = 0; args[i] != NULL; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    testproc_start(&c->p, "upstock", argv, NULL);
    if (!testproc_wait(&c->p, 10000)) {
        testproc_print_log(&c->p, "txo up");
        fail_msg("txo up did not exit within 10 s");
    }
}

static void expect_usage_error(struct ctx *c, const char *what)
{
    if (!testproc_exited_with(&c->p, 2)) {
        testproc_print_log(&c->p, "txo up");
        fail_msg("%s: want exit 2, wait status 0x%x", what, c->p.status);
    }
    char *log = testproc_log(&c->p);
    if (strstr(log, "--stock") == NULL) {
        testproc_print_log(&c->p, "txo up");
        fail_msg("%s: the message does not name --stock", what);
    }
    if (strstr(log, "migrat") != NULL || strstr(log, "connect") != NULL) {
        testproc_print_log(&c->p, "txo up");
        fail_msg("%s: the database was used before the flag was checked", what);
    }
    free(log);
    testproc_remove_log(&c->p);
}

static int64_t stock_rows(struct ctx *c)
{
    return testdb_i64(c->t.db, "SELECT COUNT(*) FROM inventory", NULL, 0);
}

static void test_bad_stock_exits_2_before_the_database(void **state)
{
    struct ctx *c = *state;
    /* No database at all: port 1 refuses connections, so only the flag check can answer. */
    const char *no_db[] = {"--mysql-port", "1", "--stock", "x", NULL};
    run_up(c, no_db);
    expect_usage_error(c, "--stock x without a database");

    static const char *const bad[] = {"ok=5,bad",          "ok=5,=3",
                                      "ok=5,x=",           "ok=5,x=-1",
                                      "ok=5,x=2147483648", "ok=5,x=99999999999999999999",
                                      "ok=5,x=1y"};
    for (size_t i = 0; i < TXO_ARRAY_LEN(bad); i++) {
        const char *args[] = {"--stock", bad[i], NULL};
        run_up(c, args);
        expect_usage_error(c, bad[i]);
        if (stock_rows(c) != 0)
            fail_msg("--stock %s wrote %lld inventory rows before failing", bad[i],
                     (long long)stock_rows(c));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bad_stock_exits_2_before_the_database, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
