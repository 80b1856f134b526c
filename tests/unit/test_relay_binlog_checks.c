/*
 * The binlog source's refusals at start (src/relay/binlog.c): each server setting that stops
 * it and a user without the replication grants, each with a message naming the fix. The
 * server-side path (SHOW GRANTS of a real user, a purged position) is in
 * tests/fault/test_relay_binlog.c; the settings cannot be changed there without disturbing
 * every other test of the server, so they are checked here on the values the server reports.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "relay/binlog_internal.h"

static void assert_refused(int rc, const struct txo_error *err, const char *fix)
{
    assert_int_equal(rc, TXO_ECONFIG);
    if (strstr(err->msg, fix) == NULL)
        fail_msg("message without \"%s\": %s", fix, err->msg);
}

static void test_settings(void **state)
{
    (void)state;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo__binlog_check_settings(1, "ROW", "FULL", &err), 0);
    assert_refused(txo__binlog_check_settings(0, "ROW", "FULL", &err), &err, "log_bin");
    assert_refused(txo__binlog_check_settings(1, "MIXED", "FULL", &err), &err,
                   "binlog_format is MIXED, not ROW: SET GLOBAL binlog_format = 'ROW'");
    assert_refused(txo__binlog_check_settings(1, "ROW", "MINIMAL", &err), &err,
                   "SET GLOBAL binlog_row_metadata = 'FULL'");
    assert_refused(txo__binlog_check_settings(1, "ROW", NULL, &err), &err, "is NULL, not FULL");
}

static void test_grants(void **state)
{
    (void)state;
    struct txo_error err;
    txo_error_init(&err);
    const char *ok[] = {"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `app`@`%`",
                        "GRANT ALL PRIVILEGES ON `appdb`.* TO `app`@`%`"};
    assert_int_equal(txo__binlog_check_grants(ok, 2, &err), 0);
    const char *mysql[] = {"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `app`@`%`"};
    assert_int_equal(txo__binlog_check_grants(mysql, 1, &err), 0);
    const char *all[] = {"GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"};
    assert_int_equal(txo__binlog_check_grants(all, 1, &err), 0);

    const char *none[] = {"GRANT USAGE ON *.* TO `app`@`%`",
                          "GRANT ALL PRIVILEGES ON `appdb`.* TO `app`@`%`"};
    assert_refused(txo__binlog_check_grants(none, 2, &err), &err,
                   "lacks REPLICATION SLAVE and BINLOG MONITOR");
    assert_refused(txo__binlog_check_grants(none, 2, &err), &err,
                   "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO");
    const char *no_monitor[] = {"GRANT REPLICATION SLAVE ON *.* TO `app`@`%`"};
    assert_refused(txo__binlog_check_grants(no_monitor, 1, &err), &err,
                   "lacks BINLOG MONITOR (REPLICATION CLIENT)");
    /* A database-level ALL is not a global grant. */
    const char *db_only[] = {"GRANT ALL PRIVILEGES ON `appdb`.* TO `app`@`%`"};
    assert_refused(txo__binlog_check_grants(db_only, 1, &err), &err, "REPLICATION SLAVE");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_settings),
        cmocka_unit_test(test_grants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
