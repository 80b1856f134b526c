/*
 * Unit tests for src/core/text.c: UTF-8 validation and character lengths, cutting text to a
 * byte limit on a character boundary (cuts inside 2-, 3- and 4-byte characters, invalid
 * input), and the DATETIME to RFC 3339 conversion.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/text.h"
#include "txo/txo.h"

/* "a" + U+00E9 (2 bytes) + U+20AC (3 bytes) + U+1F600 (4 bytes) + "z": 11 bytes. */
static const char mixed[] = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";

static void test_char_len(void **state)
{
    (void)state;
    assert_int_equal(txo_utf8_char_len("a", 1), 1);
    assert_int_equal(txo_utf8_char_len("\xC3\xA9", 2), 2);
    assert_int_equal(txo_utf8_char_len("\xE2\x82\xAC", 3), 3);
    assert_int_equal(txo_utf8_char_len("\xF0\x9F\x98\x80", 4), 4);
    assert_int_equal(txo_utf8_char_len("", 0), 0);
    /* Cut short by len. */
    assert_int_equal(txo_utf8_char_len("\xC3\xA9", 1), 0);
    assert_int_equal(txo_utf8_char_len("\xE2\x82\xAC", 2), 0);
    assert_int_equal(txo_utf8_char_len("\xF0\x9F\x98\x80", 3), 0);
    /* A lone continuation byte, bytes that never occur, overlong forms. */
    assert_int_equal(txo_utf8_char_len("\x80", 1), 0);
    assert_int_equal(txo_utf8_char_len("\xFF", 1), 0);
    assert_int_equal(txo_utf8_char_len("\xC0\xAF", 2), 0);
    assert_int_equal(txo_utf8_char_len("\xC1\xBF", 2), 0);
    assert_int_equal(txo_utf8_char_len("\xE0\x80\xAF", 3), 0);
    assert_int_equal(txo_utf8_char_len("\xF0\x80\x80\xAF", 4), 0);
    /* Surrogates and code points above U+10FFFF; the edges just inside are valid. */
    assert_int_equal(txo_utf8_char_len("\xED\xA0\x80", 3), 0);
    assert_int_equal(txo_utf8_char_len("\xED\x9F\xBF", 3), 3);
    assert_int_equal(txo_utf8_char_len("\xF4\x90\x80\x80", 4), 0);
    assert_int_equal(txo_utf8_char_len("\xF4\x8F\xBF\xBF", 4), 4);
    assert_int_equal(txo_utf8_char_len("\xF5\x80\x80\x80", 4), 0);
    /* A lead byte followed by "a", which is not a continuation byte. */
    assert_int_equal(txo_utf8_char_len("\xC3\x61", 2), 0);
    assert_int_equal(txo_utf8_char_len("\xE2\x82\x61", 3), 0);
}

static void test_valid(void **state)
{
    (void)state;
    assert_true(txo_utf8_valid("", 0));
    assert_true(txo_utf8_valid(mixed, strlen(mixed)));
    assert_true(txo_utf8_valid("a\0b", 3));                 /* NUL is a character */
    assert_false(txo_utf8_valid(mixed, strlen(mixed) - 2)); /* ends inside U+1F600 */
    assert_false(txo_utf8_valid("abc\x80", 4));
    assert_false(txo_utf8_valid("\xED\xB0\x80", 3)); /* a low surrogate */
    assert_false(txo_utf8_valid("x\xC3(", 3));
    assert_true(txo_utf8_valid("\xEF\xBF\xBD", 3)); /* U+FFFD */
}

/* Where mixed is cut for each limit 0..11: every cut inside a character drops it whole. */
static void test_cut_inside_each_sequence_length(void **state)
{
    (void)state;
    static const size_t want[] = {
        0,  1,        /* "" "a" */
        1,  3,        /* inside U+00E9, after it */
        3,  3, 6,     /* inside U+20AC (after 1 and 2 of its bytes), after it */
        6,  6, 6, 10, /* inside U+1F600 (after 1, 2, 3 of its bytes), after it */
        11,           /* the whole text */
    };
    size_t len = strlen(mixed);
    for (size_t max = 0; max < TXO_ARRAY_LEN(want); max++) {
        size_t got = txo_utf8_cut(mixed, len, max);
        if (got != want[max])
            fail_msg("cut at %zu: got %zu, want %zu", max, got, want[max]);
        assert_true(txo_utf8_valid(mixed, got));
    }
    /* No cut when the text fits, whatever it holds. */
    assert_int_equal(txo_utf8_cut(mixed, len, 100), len);
    assert_int_equal(txo_utf8_cut("\xC3", 1, 1), 1);
}

/* The cut reads only s[0..max): a buffer holding the first max bytes of a longer text. */
static void test_cut_reads_only_the_prefix(void **state)
{
    (void)state;
    char buf[4];
    memcpy(buf, "ab\xE2\x82", 4); /* "ab" and the first two bytes of U+20AC; no NUL */
    assert_int_equal(txo_utf8_cut(buf, 1000, sizeof(buf)), 2);
}

static void test_cut_invalid_input(void **state)
{
    (void)state;
    /* Stray continuation bytes are invalid text, not an incomplete character: kept. */
    assert_int_equal(txo_utf8_cut("a\x80\x80\x80\x80\x62", 6, 5), 5);
    assert_int_equal(txo_utf8_cut("\x80\x80\x80\x80\x80", 5, 3), 3);
    assert_int_equal(txo_utf8_cut("\x80\x80\x80", 3, 2), 2);
    /* A byte that can never start a character is not a lead byte either. */
    assert_int_equal(txo_utf8_cut("a\xFF\x80\x62", 4, 3), 3);
    /* A lead byte alone at the end is an incomplete character: dropped. */
    assert_int_equal(txo_utf8_cut("ab\xF0\x63\x64", 5, 3), 2);
    /* A lead byte whose sequence is longer than the continuation bytes allow for. */
    assert_int_equal(txo_utf8_cut("\xC3\x80\x80\x7A", 4, 3), 3);
}

/* The cut gives err.c the same result as before: messages end on a character boundary. */
static void test_error_messages_are_cut_on_a_boundary(void **state)
{
    (void)state;
    char long_text[2 * TXO_ERROR_MSG_MAX];
    size_t n = 0;
    while (n + 3 < sizeof(long_text)) {
        memcpy(long_text + n, "\xE2\x82\xAC", 3);
        n += 3;
    }
    long_text[n] = '\0';
    for (size_t prefix = 0; prefix < 3; prefix++) {
        struct txo_error e;
        txo_error_init(&e);
        txo_error_set(&e, TXO_EINVAL, "%.*s%s", (int)prefix, "xx", long_text);
        size_t len = strlen(e.msg);
        assert_true(len <= TXO_ERROR_MSG_MAX - 1);
        assert_true(len + 3 > TXO_ERROR_MSG_MAX - 1);
        assert_true(txo_utf8_valid(e.msg, len));
    }
}

static void test_rfc3339(void **state)
{
    (void)state;
    char out[TXO_RFC3339_LEN];
    assert_string_equal(txo__text_rfc3339("2026-11-30 15:37:00.123456", out),
                        "2026-11-30T15:37:00.123456Z");
    assert_string_equal(txo__text_rfc3339("2026-11-30 15:37:00", out),
                        "2026-11-30T15:37:00.000000Z");
    assert_string_equal(txo__text_rfc3339("2026-11-30 15:37:00.5", out),
                        "2026-11-30T15:37:00.500000Z");
    assert_string_equal(txo__text_rfc3339("2026-11-30 15:37:00.123", out),
                        "2026-11-30T15:37:00.123000Z");
    /* Not a DATETIME: passed on as it is. */
    assert_string_equal(txo__text_rfc3339(NULL, out), "");
    assert_string_equal(txo__text_rfc3339("", out), "");
    assert_string_equal(txo__text_rfc3339("yesterday", out), "yesterday");
    assert_string_equal(txo__text_rfc3339("2026-11-30T15:37:00", out), "2026-11-30T15:37:00");
    assert_string_equal(txo__text_rfc3339("2026-11-30 15:37:00.", out), "2026-11-30 15:37:00.");
    assert_string_equal(txo__text_rfc3339("2026-11-30 15:37:00.1234567", out),
                        "2026-11-30 15:37:00.1234567");
    assert_string_equal(txo__text_rfc3339("2026-11-30 15:37:0x", out), "2026-11-30 15:37:0x");
    /* Too long for the buffer: cut, still terminated. */
    const char *junk = "0123456789012345678901234567890123456789";
    assert_int_equal(strlen(txo__text_rfc3339(junk, out)), TXO_RFC3339_LEN - 1);
}

static void test_rfc3339_us(void **state)
{
    (void)state;
    int64_t us = 0;
    assert_true(txo__text_rfc3339_us("1970-01-01T00:00:01.000002Z", &us));
    assert_int_equal(us, 1000002);
    assert_true(txo__text_rfc3339_us("2026-12-02 13:20:10.5", &us)); /* MariaDB's DATETIME */
    assert_int_equal(us, 1796217610LL * 1000000 + 500000);
    assert_true(txo__text_rfc3339_us("2026-12-02T13:20:10Z", &us));
    assert_int_equal(us, 1796217610LL * 1000000);
    assert_true(txo__text_rfc3339_us("2026-12-02T13:20:10.1234567Z", &us)); /* cut to us */
    assert_int_equal(us % 1000000, 123456);
    assert_false(txo__text_rfc3339_us(NULL, &us));
    assert_false(txo__text_rfc3339_us("", &us));
    assert_false(txo__text_rfc3339_us("2026-12-02X13:20:10Z", &us));
    assert_false(txo__text_rfc3339_us("2026-12-02T13:20:10+01:00", &us));
    assert_false(txo__text_rfc3339_us("2026-12-2T13:20:10Z", &us));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc3339_us),
        cmocka_unit_test(test_char_len),
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_cut_inside_each_sequence_length),
        cmocka_unit_test(test_cut_reads_only_the_prefix),
        cmocka_unit_test(test_cut_invalid_input),
        cmocka_unit_test(test_error_messages_are_cut_on_a_boundary),
        cmocka_unit_test(test_rfc3339),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
