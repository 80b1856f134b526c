/*
 * TLS to the database (txo_db_opts.ssl_mode and friends) against a MariaDB server this test
 * starts itself with certificates it makes (testserver.h): the server requires secure
 * transport, so a plain connection is refused. Also: required against the shared test server,
 * which offers no TLS, fails with a clear error instead of connecting in plain text.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "testdb.h"
#include "testserver.h"

/* The session's Ssl_cipher (empty when the connection is not encrypted); free with txo_free. */
static char *session_cipher(struct txo_db *db)
{
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_query(db, "SHOW SESSION STATUS LIKE 'Ssl_cipher'", NULL, 0, &rows, &err) < 0)
        fail_msg("SHOW STATUS: %s", err.msg);
    assert_int_equal(txo_rows_count(rows), 1);
    char *cipher = txo_strdup(txo_rows_str(rows, 0, 1, NULL));
    txo_rows_free(rows);
    return cipher;
}

static void expect_tls(const struct txo_db_opts *opts)
{
    struct txo_db *db = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_open(opts, &db, &err) < 0)
        fail_msg("ssl mode %s: %s", txo_db_ssl_mode_name(opts->ssl_mode), err.msg);
    char *cipher = session_cipher(db);
    assert_non_null(cipher);
    assert_true(strlen(cipher) > 0);
    txo_free(cipher);
    txo_db_close(db);
}

/* Opening must fail with code and a message that contains want. */
static void expect_refused(const struct txo_db_opts *opts, int code, const char *want)
{
    struct txo_db *db = NULL;
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_open(opts, &db, &err);
    assert_null(db);
    if (rc != code || !strstr(err.msg, want))
        fail_msg("ssl mode %s: want %s with \"%s\", got %s: %s",
                 txo_db_ssl_mode_name(opts->ssl_mode), txo_err_name(code), want, txo_err_name(rc),
                 err.msg);
}

static void test_required_encrypts(void **state)
{
    (void)state;
    struct txo_db_opts opts;
    testserver_opts(&testserver_shared, &opts);
    opts.ssl_mode = TXO_SSL_REQUIRED;
    expect_tls(&opts);
}

static void test_preferred_uses_tls_when_offered(void **state)
{
    (void)state;
    struct txo_db_opts opts;
    testserver_opts(&testserver_shared, &opts);
    assert_int_equal(opts.ssl_mode, TXO_SSL_PREFERRED); /* the default */
    expect_tls(&opts);
}

static void test_verify_ca_checks_the_chain_not_the_name(void **state)
{
    (void)state;
    struct txo_db_opts opts;
    testserver_opts(&testserver_shared, &opts);
    opts.ssl_mode = TXO_SSL_VERIFY_CA;
    opts.ssl_ca = testserver_shared.ca;
    expect_tls(&opts); /* 127.0.0.1 is not the certificate's name: verify-ca allows that */
    opts.ssl_ca = testserver_shared.other_ca;
    expect_refused(&opts, TXO_ECONFIG, "certificate");
}

static void test_verify_identity(void **state)
{
    (void)state;
    struct txo_db_opts opts;
    testserver_opts(&testserver_shared, &opts);
    opts.ssl_mode = TXO_SSL_VERIFY_IDENTITY;
    opts.ssl_ca = testserver_shared.ca;
    opts.host = "localhost"; /* the certificate's name; over TCP, not the default socket */
    expect_tls(&opts);

    opts.ssl_ca = testserver_shared.other_ca;
    expect_refused(&opts, TXO_ECONFIG, "ssl mode verify-identity: TLS/SSL error");

    opts.ssl_ca = testserver_shared.ca;
    opts.host = "127.0.0.1"; /* right CA, wrong name */
    expect_refused(&opts, TXO_ECONFIG, "ssl mode verify-identity: TLS/SSL error");
}

static void test_disabled_refused_by_secure_transport(void **state)
{
    (void)state;
    struct txo_db_opts opts;
    testserver_opts(&testserver_shared, &opts);
    opts.ssl_mode = TXO_SSL_DISABLED;
    expect_refused(&opts, TXO_ECONFIG, "requires secure transport");
}

static void test_required_against_a_server_without_tls(void **state)
{
    (void)state;
    struct txo_db_opts opts;
    testdb_opts_from_env(&opts); /* the shared test server: usually no TLS configured */
    if (opts.unix_socket)
        skip();
    opts.ssl_mode = TXO_SSL_PREFERRED; /* falls back to plain text */
    struct txo_db *db = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_open(&opts, &db, &err) < 0)
        fail_msg("preferred: %s", err.msg);
    char *cipher = session_cipher(db);
    bool has_tls = cipher && *cipher;
    txo_free(cipher);
    txo_db_close(db);
    if (has_tls)
        skip(); /* a server of your own (MYSQL_HOST) that offers TLS: nothing to check here */
    opts.ssl_mode = TXO_SSL_REQUIRED;
    expect_refused(&opts, TXO_ECONFIG, "the server offers no TLS");
}

static void test_bad_settings(void **state)
{
    (void)state;
    struct txo_db_opts opts;
    testserver_opts(&testserver_shared, &opts);
    opts.ssl_mode = TXO_SSL_VERIFY_IDENTITY;
    expect_refused(&opts, TXO_EINVAL, "needs the CA certificate");
    opts.ssl_mode = TXO_SSL_REQUIRED;
    opts.ssl_cert = testserver_shared.ca;
    expect_refused(&opts, TXO_EINVAL, "go together");

    enum txo_ssl_mode mode = TXO_SSL_DISABLED;
    assert_int_equal(txo_db_ssl_mode_parse("VERIFY_IDENTITY", &mode), 0);
    assert_int_equal(mode, TXO_SSL_VERIFY_IDENTITY);
    assert_int_equal(txo_db_ssl_mode_parse("verify-ca", &mode), 0);
    assert_int_equal(mode, TXO_SSL_VERIFY_CA);
    assert_int_equal(txo_db_ssl_mode_parse("sometimes", &mode), TXO_EINVAL);
    assert_int_equal(mode, TXO_SSL_VERIFY_CA);
    assert_string_equal(txo_db_ssl_mode_name(TXO_SSL_DISABLED), "disabled");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_required_encrypts),
        cmocka_unit_test(test_preferred_uses_tls_when_offered),
        cmocka_unit_test(test_verify_ca_checks_the_chain_not_the_name),
        cmocka_unit_test(test_verify_identity),
        cmocka_unit_test(test_disabled_refused_by_secure_transport),
        cmocka_unit_test(test_required_against_a_server_without_tls),
        cmocka_unit_test(test_bad_settings),
    };
    return cmocka_run_group_tests(tests, testserver_group_setup_tls, testserver_group_teardown);
}
