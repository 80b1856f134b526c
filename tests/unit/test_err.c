/*
 * Unit tests for src/core/err.c: the code table (values, names, descriptions), which codes are
 * transient, and how struct txo_error is filled, wrapped and cut at TXO_ERROR_MSG_MAX.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "txo/txo.h"

/*
 * Every code and whether it must be retried, written out by hand rather than generated from
 * TXO_ERR_MAP, so that changing a classification in the map makes this test fail.
 */
static const struct {
    int code;
    const char *name;
    bool transient;
} expected_codes[] = {
    {-1, "TXO_EINVAL", false},        {-2, "TXO_ENOMEM", false},
    {-3, "TXO_EDB", false},           {-4, "TXO_EDEADLOCK", true},
    {-5, "TXO_ELOCKTIMEOUT", true},   {-6, "TXO_ECONNLOST", true},
    {-7, "TXO_ECONNECT", true},       {-8, "TXO_ENOTFOUND", false},
    {-9, "TXO_EDUPLICATE", false},    {-10, "TXO_ECONSTRAINT", false},
    {-11, "TXO_ECONFIG", false},      {-12, "TXO_EPUBLISH", true},
    {-13, "TXO_ETIMEOUT", true},      {-14, "TXO_EBUSINESS", false},
    {-15, "TXO_ELEASELOST", false},   {-16, "TXO_ESTATE", false},
    {-17, "TXO_EIO", false},          {-18, "TXO_ECANCELED", false},
    {-19, "TXO_EMIGRATION", false},   {-20, "TXO_EUNAVAILABLE", true},
    {-21, "TXO_EUNSUPPORTED", false}, {-22, "TXO_ECONFLICT", false},
    {-23, "TXO_EUNKNOWN", true},      {-24, "TXO_EALONE", false},
};

static void test_codes_are_stable(void **state)
{
    (void)state;
    /* Codes are API: these values must never change. */
    assert_int_equal(TXO_OK, 0);
    assert_int_equal(TXO_EINVAL, -1);
    assert_int_equal(TXO_EDEADLOCK, -4);
    assert_int_equal(TXO_ELOCKTIMEOUT, -5);
    assert_int_equal(TXO_ECONNLOST, -6);
    assert_int_equal(TXO_EUNSUPPORTED, -21);
}

static void test_every_code_has_name_description_and_class(void **state)
{
    (void)state;
    size_t in_map = 0;
#define COUNT(name, value, transient, desc) in_map++;
    TXO_ERR_MAP(COUNT)
#undef COUNT
    /* A new code must be added to expected_codes (and to docs/errors.md) as well. */
    assert_int_equal(in_map, TXO_ARRAY_LEN(expected_codes));

    for (size_t i = 0; i < TXO_ARRAY_LEN(expected_codes); i++) {
        int code = expected_codes[i].code;
        assert_string_equal(txo_err_name(code), expected_codes[i].name);
        assert_true(strcmp(txo_strerror(code), "unknown error") != 0);
        assert_true(strlen(txo_strerror(code)) > 0);
        if (txo_err_is_transient(code) != expected_codes[i].transient) {
            fail_msg("%s: transient=%d, expected %d", expected_codes[i].name,
                     txo_err_is_transient(code), expected_codes[i].transient);
        }
    }
}

static void test_descriptions_come_from_the_map(void **state)
{
    (void)state;
#define CHECK(name, value, transient, desc)                                                        \
    assert_string_equal(txo_strerror(value), desc);                                                \
    assert_string_equal(txo_err_name(value), "TXO_" #name);                                        \
    assert_int_equal(txo_err_is_transient(value), transient);
    TXO_ERR_MAP(CHECK)
#undef CHECK
    assert_string_equal(txo_strerror(TXO_EDEADLOCK), "deadlock detected (MySQL 1213)");
}

static void test_ok_and_unknown_codes(void **state)
{
    (void)state;
    assert_string_equal(txo_err_name(TXO_OK), "TXO_OK");
    assert_string_equal(txo_strerror(TXO_OK), "success");
    assert_false(txo_err_is_transient(TXO_OK));

    const int unknown[] = {1, 42, -25, -1000, INT_MIN, INT_MAX};
    for (size_t i = 0; i < TXO_ARRAY_LEN(unknown); i++) {
        assert_string_equal(txo_strerror(unknown[i]), "unknown error");
        assert_string_equal(txo_err_name(unknown[i]), "TXO_E?");
        assert_false(txo_err_is_transient(unknown[i]));
    }
}

static void test_init_clears(void **state)
{
    (void)state;
    struct txo_error err;
    memset(&err, 0x5a, sizeof(err));
    txo_error_init(&err);
    assert_int_equal(err.code, TXO_OK);
    assert_int_equal(err.mysql_errno, 0);
    assert_string_equal(err.sqlstate, "");
    assert_string_equal(err.msg, "");
    txo_error_init(NULL); /* accepted, does nothing */
}

static void test_set_formats_and_returns_code(void **state)
{
    (void)state;
    struct txo_error err;
    txo_error_init(&err);
    err.mysql_errno = 1213;
    memcpy(err.sqlstate, "40001", 6);

    int rc = txo_error_set(&err, TXO_EINVAL, "qty must be > 0, got %d for sku=%s", -3, "A-1");
    assert_int_equal(rc, TXO_EINVAL);
    assert_int_equal(err.code, TXO_EINVAL);
    assert_string_equal(err.msg, "qty must be > 0, got -3 for sku=A-1");
    /* A new failure does not inherit the server detail of an older one. */
    assert_int_equal(err.mysql_errno, 0);
    assert_string_equal(err.sqlstate, "");
}

static void test_null_err_is_accepted(void **state)
{
    (void)state;
    assert_int_equal(txo_error_set(NULL, TXO_ENOTFOUND, "order %d", 7), TXO_ENOTFOUND);
    /* Without err the code is unknown; wrap says so instead of claiming success. */
    assert_int_equal(txo_error_wrap(NULL, "ctx"), TXO_EINVAL);
}

static void test_wrap_prepends_context(void **state)
{
    (void)state;
    struct txo_error err;
    txo_error_init(&err);
    txo_error_set(&err, TXO_EDEADLOCK, "Deadlock found when trying to get lock");
    err.mysql_errno = 1213;

    int rc = txo_error_wrap(&err, "reserve stock sku=%s", "B-2");
    assert_int_equal(rc, TXO_EDEADLOCK);
    assert_int_equal(err.code, TXO_EDEADLOCK);
    assert_int_equal(err.mysql_errno, 1213);
    assert_string_equal(err.msg, "reserve stock sku=B-2: Deadlock found when trying to get lock");

    txo_error_wrap(&err, "saga id=%d", 9);
    assert_string_equal(err.msg,
                        "saga id=9: reserve stock sku=B-2: Deadlock found when trying to get lock");
}

static void test_set_truncates_long_message(void **state)
{
    (void)state;
    char big[2 * TXO_ERROR_MSG_MAX];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';

    struct txo_error err;
    txo_error_init(&err);
    txo_error_set(&err, TXO_EDB, "%s", big);
    assert_int_equal(strlen(err.msg), TXO_ERROR_MSG_MAX - 1);
    assert_memory_equal(err.msg, big, TXO_ERROR_MSG_MAX - 1);

    /* Exactly TXO_ERROR_MSG_MAX - 1 bytes fit without a cut. */
    big[TXO_ERROR_MSG_MAX - 1] = '\0';
    txo_error_set(&err, TXO_EDB, "%s", big);
    assert_string_equal(err.msg, big);
}

static void test_truncation_keeps_utf8_whole(void **state)
{
    (void)state;
    /* 510 ASCII bytes then a 2-byte character: only 511 bytes fit, so the character goes. */
    char text[TXO_ERROR_MSG_MAX + 8];
    memset(text, 'a', TXO_ERROR_MSG_MAX - 2);
    memcpy(text + TXO_ERROR_MSG_MAX - 2, "\xc3\xa9z", 4);

    struct txo_error err;
    txo_error_init(&err);
    txo_error_set(&err, TXO_EDB, "%s", text);
    assert_int_equal(strlen(err.msg), TXO_ERROR_MSG_MAX - 2);
    assert_memory_equal(err.msg, text, TXO_ERROR_MSG_MAX - 2);

    /* 509 ASCII bytes then the character fits whole (511 bytes). */
    memset(text, 'a', TXO_ERROR_MSG_MAX - 3);
    memcpy(text + TXO_ERROR_MSG_MAX - 3, "\xc3\xa9z", 4);
    txo_error_set(&err, TXO_EDB, "%s", text);
    assert_int_equal(strlen(err.msg), TXO_ERROR_MSG_MAX - 1);
    assert_memory_equal(err.msg + TXO_ERROR_MSG_MAX - 3, "\xc3\xa9", 2);

    /* A 3-byte character cut after its first byte or its second is dropped whole. */
    memset(text, 'a', TXO_ERROR_MSG_MAX - 3);
    memcpy(text + TXO_ERROR_MSG_MAX - 3, "\xe2\x82\xac", 4); /* euro sign */
    txo_error_set(&err, TXO_EDB, "%s", text);
    assert_int_equal(strlen(err.msg), TXO_ERROR_MSG_MAX - 3);
}

static void test_wrap_truncates(void **state)
{
    (void)state;
    char big[TXO_ERROR_MSG_MAX];
    memset(big, 'b', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';

    struct txo_error err;
    txo_error_init(&err);
    txo_error_set(&err, TXO_ETIMEOUT, "%s", big);
    assert_int_equal(txo_error_wrap(&err, "ctx"), TXO_ETIMEOUT);
    assert_int_equal(strlen(err.msg), TXO_ERROR_MSG_MAX - 1);
    assert_memory_equal(err.msg, "ctx: bbb", 8);

    /* A context longer than the buffer leaves nothing of the old message. */
    txo_error_wrap(&err, "%s", big);
    assert_int_equal(strlen(err.msg), TXO_ERROR_MSG_MAX - 1);
    assert_int_equal(err.msg[TXO_ERROR_MSG_MAX - 2], 'b');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codes_are_stable),
        cmocka_unit_test(test_every_code_has_name_description_and_class),
        cmocka_unit_test(test_descriptions_come_from_the_map),
        cmocka_unit_test(test_ok_and_unknown_codes),
        cmocka_unit_test(test_init_clears),
        cmocka_unit_test(test_set_formats_and_returns_code),
        cmocka_unit_test(test_null_err_is_accepted),
        cmocka_unit_test(test_wrap_prepends_context),
        cmocka_unit_test(test_set_truncates_long_message),
        cmocka_unit_test(test_truncation_keeps_utf8_whole),
        cmocka_unit_test(test_wrap_truncates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
