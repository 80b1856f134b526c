/*
 * `txo up --stock` is checked before `txo up` touches the database: a malformed list, or one
 * whose entry the inventory table would refuse (a SKU over 64 bytes or not UTF-8, the same
 * SKU twice), exits 2 (a usage error) with a message naming the entry, without connecting,
 * migrating or writing any of its good items; a good list creates its SKUs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testrun.h"
#include "orders.h"
#include "testdb.h"
#include "testhttp.h"
#include "testorders.h"
#include "testproc.h"

static int setup(void **state)
{
    struct testhttp_daemon *c = testdb_fixture_new(sizeof(*c), "upstock", TESTDB_NEW_EXPORT_ENV);
    *state = c;
    return 0;
}

/* Runs `txo up args...` and returns once it has exited (fails after 10 s). */
static void run_up(struct testhttp_daemon *c, const char *const *args)
{
    const char *argv[16] = {testproc_txo_bin(), "up", "--listen", "127.0.0.1:0"};
    size_t n = 4;
    for (size_t i = 0; args[i] != NULL; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    testproc_start(&c->srv, "upstock", argv, NULL);
    if (!testproc_wait(&c->srv, 10000)) {
        testproc_print_log(&c->srv, "txo up");
        fail_msg("txo up did not exit within 10 s");
    }
}

/* The entry the message of a refused list must name ("entry 2"), or NULL. */
static void expect_usage_error_naming(struct testhttp_daemon *c, const char *what,
                                      const char *entry)
{
    if (!testproc_exited_with(&c->srv, 2)) {
        testproc_print_log(&c->srv, "txo up");
        fail_msg("%s: want exit 2, wait status 0x%x", what, c->srv.status);
    }
    char *log = testproc_log(&c->srv);
    if (strstr(log, "--stock") == NULL) {
        testproc_print_log(&c->srv, "txo up");
        fail_msg("%s: the message does not name --stock", what);
    }
    if (strstr(log, "migrat") != NULL || strstr(log, "connect") != NULL) {
        testproc_print_log(&c->srv, "txo up");
        fail_msg("%s: the database was used before the flag was checked", what);
    }
    if (entry != NULL && strstr(log, entry) == NULL) {
        testproc_print_log(&c->srv, "txo up");
        fail_msg("%s: the message does not name %s", what, entry);
    }
    free(log);
    testproc_remove_log(&c->srv);
}

static void expect_usage_error(struct testhttp_daemon *c, const char *what)
{
    expect_usage_error_naming(c, what, NULL);
}

static int64_t stock_rows(struct testhttp_daemon *c)
{
    return testdb_i64(c->t.db, "SELECT COUNT(*) FROM inventory", NULL, 0);
}

static void test_bad_stock_exits_2_before_the_database(void **state)
{
    struct testhttp_daemon *c = *state;
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

/* A SKU of n bytes: "sku-" and then 'x's. */
static char *sku_of(size_t n)
{
    char *s = malloc(n + 1);
    assert_non_null(s);
    memset(s, 'x', n);
    memcpy(s, "sku-", n < 4 ? n : 4);
    s[n] = '\0';
    return s;
}

/*
 * Entries that parse but that the database would refuse: the list is refused as a whole, with
 * exit 2 and the entry named, before anything is written (not the first entries written and
 * then exit 1).
 */
static void test_entry_the_database_refuses_writes_nothing(void **state)
{
    struct testhttp_daemon *c = *state;
    char *long_sku = sku_of(ORDER_SKU_MAX + 1);
    char specs[4][256];
    snprintf(specs[0], sizeof(specs[0]), "ok=1,%s=1", long_sku);
    snprintf(specs[1], sizeof(specs[1]), "ok=1,bad-\xff-utf8=1");
    snprintf(specs[2], sizeof(specs[2]), "ok=1,other=2,ok=3");
    snprintf(specs[3], sizeof(specs[3]), "ok=1,two=2,%s=3", long_sku);
    static const char *const entry[] = {"entry 2", "entry 2", "entry 3", "entry 3"};
    for (size_t i = 0; i < TXO_ARRAY_LEN(specs); i++) {
        const char *args[] = {"--stock", specs[i], NULL};
        run_up(c, args);
        expect_usage_error_naming(c, specs[i], entry[i]);
        if (stock_rows(c) != 0)
            fail_msg("--stock %s wrote %lld inventory rows before failing", specs[i],
                     (long long)stock_rows(c));
    }
    free(long_sku);
}

/* A good list, with a SKU of exactly the column's 64 bytes, is written whole; SKUs that exist
 * keep their stock. */
static void test_good_list_is_written(void **state)
{
    struct testhttp_daemon *c = *state;
    testorders_stock(c->t.db, "kept", 3);
    char *max_sku = sku_of(ORDER_SKU_MAX);
    char spec[256];
    snprintf(spec, sizeof(spec), "zeta=5,%s=7,kept=100,alpha=0", max_sku);
    unsigned port = testproc_free_port();
    char listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", port);
    const char *argv[] = {testproc_txo_bin(), "up", "--listen", listen, "--stock", spec, NULL};
    testproc_start(&c->srv, "upstock", argv, NULL);
    if (!testproc_wait_http(port, "/healthz", 15000)) {
        testproc_print_log(&c->srv, "txo up");
        fail_msg("txo up --stock %s did not start", spec);
    }
    assert_true(testproc_stop(&c->srv, 10000));
    assert_int_equal(stock_rows(c), 4);
    struct txo_param p[] = {txo_p_str(max_sku)};
    assert_int_equal(testdb_i64(c->t.db, "SELECT available FROM inventory WHERE sku = ?", p, 1), 7);
    assert_int_equal(
        testdb_i64(c->t.db, "SELECT available FROM inventory WHERE sku = 'kept'", NULL, 0), 3);
    assert_int_equal(
        testdb_i64(c->t.db, "SELECT available FROM inventory WHERE sku = 'alpha'", NULL, 0), 0);
    assert_int_equal(
        testdb_i64(c->t.db, "SELECT available FROM inventory WHERE sku = 'zeta'", NULL, 0), 5);
    free(max_sku);
    testproc_remove_log(&c->srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_stock_exits_2_before_the_database),
        cmocka_unit_test(test_entry_the_database_refuses_writes_nothing),
        cmocka_unit_test(test_good_list_is_written),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, testhttp_daemon_free_state, NULL, NULL);
}
