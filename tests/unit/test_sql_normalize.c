/*
 * Unit tests for src/db/sql_normalize.c, the normal form of a migration's SQL that its
 * checksum covers: comments of the three kinds removed ("-- ", "#", block comments), MariaDB's
 * executable comments kept, whitespace collapsed and trimmed, and quoted text left alone
 * (comment markers, whitespace and escapes inside '...', "..." and `...`). Also the property
 * the checksum relies on: texts that differ only in comments normalize alike, texts whose
 * statements differ do not, and every embedded migration normalizes without losing its
 * statements.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "db/sql_normalize.h"
#include "txo/txo.h"

/* Fails the test unless sql normalizes to want. */
static void expect_norm(const char *sql, const char *want)
{
    char *got = txo__sql_normalize(sql);
    assert_non_null(got);
    if (strcmp(got, want) != 0)
        fail_msg("normalizing [%s]\n  got  [%s]\n  want [%s]", sql, got, want);
    txo_free(got);
}

static void test_whitespace(void **state)
{
    (void)state;
    expect_norm("", "");
    expect_norm(" \t\r\n\f\v ", "");
    expect_norm("SELECT 1", "SELECT 1");
    expect_norm("  SELECT\n\t 1 ;\r\n", "SELECT 1 ;");
    expect_norm("CREATE TABLE t (\n    a INT,\n    b INT\n);\n",
                "CREATE TABLE t ( a INT, b INT );");
}

static void test_line_comments(void **state)
{
    (void)state;
    expect_norm("-- a comment\nSELECT 1;", "SELECT 1;");
    expect_norm("SELECT 1; -- trailing comment\nSELECT 2;", "SELECT 1; SELECT 2;");
    expect_norm("SELECT 1;--\ttab after the dashes\n", "SELECT 1;");
    /* At the end of the text, with no newline after it. */
    expect_norm("SELECT 1;\n-- the end", "SELECT 1;");
    expect_norm("SELECT 1;\n-- ", "SELECT 1;");
    expect_norm("SELECT 1;\n--", "SELECT 1;");
    /* "--" not followed by whitespace is no comment in MariaDB: 1 - (-1). */
    expect_norm("SELECT 1--1;", "SELECT 1--1;");
    /* A comment between tokens separates them. */
    expect_norm("SELECT a-- x\nFROM t", "SELECT a FROM t");
}

static void test_hash_comments(void **state)
{
    (void)state;
    expect_norm("# a comment\nSELECT 1;", "SELECT 1;");
    expect_norm("SELECT 1; # trailing\nSELECT 2;", "SELECT 1; SELECT 2;");
    expect_norm("SELECT 1;#no space needed", "SELECT 1;");
    expect_norm("SELECT 1;\n#", "SELECT 1;");
    expect_norm("SELECT '#1', `a#b` FROM t # c\n", "SELECT '#1', `a#b` FROM t");
}

static void test_block_comments(void **state)
{
    (void)state;
    expect_norm("/* a comment */SELECT 1;", "SELECT 1;");
    expect_norm("SELECT /* multi\n line\n */ 1;", "SELECT 1;");
    expect_norm("SELECT a/**/FROM t", "SELECT a FROM t");
    expect_norm("SELECT 1 /*/ still a comment */;", "SELECT 1 ;");
    /* "--" and "#" inside a block comment are part of it. */
    expect_norm("SELECT 1 /* -- x # y */ + 2", "SELECT 1 + 2");
    /* A quote inside a comment opens no string. */
    expect_norm("SELECT 1 /* don't */, 2 -- it's\n, 3 # 'x\n;", "SELECT 1 , 2 , 3 ;");
    /* Unterminated: runs to the end. */
    expect_norm("SELECT 1; /* never closed\nSELECT 2;", "SELECT 1;");
}

static void test_executable_comments_are_kept(void **state)
{
    (void)state;
    expect_norm("/*!40101 SET NAMES utf8mb4 */;", "/*!40101 SET NAMES utf8mb4 */;");
    expect_norm("/*M!100500 SET a = 1 */;", "/*M!100500 SET a = 1 */;");
    expect_norm("/*!  SET\n  a = 1 */", "/*! SET a = 1 */");
    expect_norm("CREATE TABLE /*!32312 IF NOT EXISTS*/ t (a INT)",
                "CREATE TABLE /*!32312 IF NOT EXISTS*/ t (a INT)");
    /* "/" "*M" without the bang is an ordinary comment. */
    expect_norm("SELECT 1 /*M comment */;", "SELECT 1 ;");
}

static void test_quoted_text_is_untouched(void **state)
{
    (void)state;
    /* Comment markers inside strings. */
    expect_norm("SELECT '-- not a comment';", "SELECT '-- not a comment';");
    expect_norm("SELECT \"# nor this\", '/* nor this */';",
                "SELECT \"# nor this\", '/* nor this */';");
    expect_norm("SELECT `--  odd  name` FROM t", "SELECT `--  odd  name` FROM t");
    /* Whitespace inside strings. */
    expect_norm("SELECT 'a  \n\t b'", "SELECT 'a  \n\t b'");
    /* Backslash escapes: the quote after a backslash does not close the string. */
    expect_norm("SELECT 'it\\'s -- here'  -- there\n", "SELECT 'it\\'s -- here'");
    expect_norm("SELECT \"a\\\" # b\"  # c", "SELECT \"a\\\" # b\"");
    expect_norm("SELECT 'a\\\\'  -- c", "SELECT 'a\\\\'");
    /* Doubled quotes. */
    expect_norm("SELECT 'it''s -- here'  -- there", "SELECT 'it''s -- here'");
    expect_norm("SELECT \"a\"\"b -- c\" -- d", "SELECT \"a\"\"b -- c\"");
    expect_norm("SELECT `a``b -- c` -- d", "SELECT `a``b -- c`");
    /* No backslash escape between backticks: the second backtick closes the name. */
    expect_norm("SELECT `a\\` -- c", "SELECT `a\\`");
    /* The empty string and adjacent strings. */
    expect_norm("SELECT '' , ''''", "SELECT '' , ''''");
    /* Unterminated: copied to the end. */
    expect_norm("SELECT 'a -- b\n  c", "SELECT 'a -- b\n  c");
}

static void test_comment_edits_normalize_alike(void **state)
{
    (void)state;
    static const char before[] = "-- Saga instances (see the design document, 5).\n"
                                 "CREATE TABLE IF NOT EXISTS saga (\n"
                                 "    id BIGINT PRIMARY KEY, -- the id\n"
                                 "    state VARCHAR(32) NOT NULL DEFAULT 'NEW'\n"
                                 ") ENGINE=InnoDB;\n";
    static const char after[] = "-- Saga instances and their persisted steps.\n"
                                "--\n"
                                "# Design choices: none.\n"
                                "CREATE TABLE IF NOT EXISTS saga (\n"
                                "    id BIGINT PRIMARY KEY, /* the saga's id */\n"
                                "    state VARCHAR(32) NOT NULL DEFAULT 'NEW'\n"
                                ") ENGINE=InnoDB;";
    static const char changed[] = "CREATE TABLE IF NOT EXISTS saga (\n"
                                  "    id BIGINT PRIMARY KEY,\n"
                                  "    state VARCHAR(32) NOT NULL DEFAULT 'OLD'\n"
                                  ") ENGINE=InnoDB;\n";
    char *a = txo__sql_normalize(before);
    char *b = txo__sql_normalize(after);
    char *c = txo__sql_normalize(changed);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_string_equal(a, b);
    assert_string_not_equal(a, c);
    txo_free(a);
    txo_free(b);
    txo_free(c);
}

/* Every migration the library embeds keeps its statements (a CREATE TABLE in the text is in
 * the normal form) and loses its header comment, and normalizing is idempotent. */
static void test_embedded_migrations(void **state)
{
    (void)state;
    const struct txo_migration_set *set = txo_core_migrations();
    assert_true(set->count > 0);
    for (size_t i = 0; i < set->count; i++) {
        const char *sql = set->migrations[i].sql;
        char *norm = txo__sql_normalize(sql);
        assert_non_null(norm);
        assert_true(strlen(norm) > 0);
        assert_true(strlen(norm) <= strlen(sql));
        assert_true(norm[0] != ' ' && norm[strlen(norm) - 1] != ' ');
        if (strncmp(sql, "-- ", 3) == 0) {
            /* The header comment's first line (up to 40 bytes of it) is gone. */
            char first[41];
            size_t n = strcspn(sql + 3, "\n");
            n = n < 40 ? n : 40;
            memcpy(first, sql + 3, n);
            first[n] = '\0';
            if (n > 10 && strstr(norm, first))
                fail_msg("%s kept its comment [%s]", set->migrations[i].name, first);
        }
        if (strstr(sql, "CREATE TABLE") && !strstr(norm, "CREATE TABLE"))
            fail_msg("%s lost its CREATE TABLE", set->migrations[i].name);
        /* Idempotent. */
        char *again = txo__sql_normalize(norm);
        assert_non_null(again);
        assert_string_equal(norm, again);
        txo_free(again);
        txo_free(norm);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_line_comments),
        cmocka_unit_test(test_hash_comments),
        cmocka_unit_test(test_block_comments),
        cmocka_unit_test(test_executable_comments_are_kept),
        cmocka_unit_test(test_quoted_text_is_untouched),
        cmocka_unit_test(test_comment_edits_normalize_alike),
        cmocka_unit_test(test_embedded_migrations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
