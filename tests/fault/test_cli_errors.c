/*
 * How `txo` reports a bad command line: exit status 2 before anything runs, as plain text for
 * a person, or as one log line in the format --log-format or TXO_LOG_FORMAT chose (even when
 * the bad flag comes first); --help stays plain text on stdout. Every log line the runs write
 * is also checked by tests/js/check_logs.mjs (testproc does it when the child is gone).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "testproc.h"
#include "txo/retention.h"

/* What `txo args...` wrote (free()); the test fails unless it exited with status. */
static char *run_txo(const char *const *args, int status)
{
    char *out = NULL;
    assert_int_equal(testproc_run_txo("cli_errors", args, 30000, &out), status);
    return out;
}

static int clear_env(void **state)
{
    (void)state;
    unsetenv("TXO_LOG_FORMAT");
    return 0;
}

/* The one JSON log line of out (which must hold nothing else). */
static json_t *only_json_line(const char *out)
{
    json_error_t jerr;
    json_t *o = json_loads(out, JSON_REJECT_DUPLICATES, &jerr);
    if (o == NULL)
        fail_msg("not one JSON line (%s): %s", jerr.text, out);
    assert_string_equal(json_string_value(json_object_get(o, "level")), "error");
    assert_string_equal(json_string_value(json_object_get(o, "component")), "cli");
    assert_string_equal(json_string_value(json_object_get(o, "msg")), "cannot run");
    return o;
}

/* The error of the one JSON log line of `txo args...`, which must exit 2 (free()). */
static char *json_error(const char *const *args)
{
    char *out = run_txo(args, 2);
    json_t *o = only_json_line(out);
    char *error = strdup(json_string_value(json_object_get(o, "error")));
    assert_non_null(error);
    json_decref(o);
    free(out);
    return error;
}

static void test_plain_text_without_a_chosen_format(void **state)
{
    (void)state;
    const char *args[] = {"relay", "--bogus", NULL};
    char *out = run_txo(args, 2);
    assert_string_equal(out, "txo relay: unknown option --bogus (see txo relay --help)\n");
    free(out);
}

static void test_flag_chooses_json_even_after_the_bad_flag(void **state)
{
    (void)state;
    const char *args[] = {"relay", "--bogus", "--log-format", "json", NULL};
    char *error = json_error(args);
    assert_string_equal(error, "txo relay: unknown option --bogus (see txo relay --help)");
    free(error);

    const char *range[] = {"relay", "--log-format=json", "--batch-size=0", NULL};
    error = json_error(range);
    assert_non_null(strstr(error, "--batch-size must be a whole number from 1 to"));
    free(error);
}

static void test_environment_chooses_logfmt(void **state)
{
    (void)state;
    setenv("TXO_LOG_FORMAT", "logfmt", 1);
    const char *args[] = {"relay", "--claim=sometimes", NULL};
    char *out = run_txo(args, 2);
    assert_memory_equal(out, "ts=", 3);
    assert_non_null(strstr(out, " level=error component=cli msg=\"cannot run\" error=\"txo relay: "
                                "--claim must be auto, skip-locked or update-limit, got "
                                "\\\"sometimes\\\"\"\n"));
    assert_string_equal(strchr(out, '\n'), "\n"); /* one line */
    free(out);
}

static void test_unknown_command_in_json_has_no_usage_text(void **state)
{
    (void)state;
    setenv("TXO_LOG_FORMAT", "json", 1);
    const char *args[] = {"nosuch", NULL};
    char *error = json_error(args);
    assert_string_equal(error, "txo: unknown command \"nosuch\" (see txo --help)");
    free(error);
}

static void test_help_stays_plain_text(void **state)
{
    (void)state;
    setenv("TXO_LOG_FORMAT", "json", 1);
    const char *args[] = {"relay", "--help", NULL};
    char *out = run_txo(args, 0);
    assert_memory_equal(out, "Usage: txo relay", strlen("Usage: txo relay"));
    assert_null(strstr(out, "\"level\""));
    free(out);
}

/* A format that is not one cannot choose itself: the error about it is plain text. */
static void test_bad_format_is_reported_plainly(void **state)
{
    (void)state;
    const char *args[] = {"relay", "--log-format=xml", NULL};
    char *out = run_txo(args, 2);
    assert_string_equal(out, "txo: --log-format must be logfmt or json, got \"xml\"\n");
    free(out);
}

/* Every command with a cleaner takes --clean-batch in the range the library's cleaner accepts,
 * so a batch it would refuse is a bad flag (exit 2 before any connection), not a failed start. */
static void test_clean_batch_range_is_the_cleaners(void **state)
{
    (void)state;
    char want[96];
    snprintf(want, sizeof(want), "--clean-batch must be a whole number from 1 to %d, got \"%d\"",
             TXO_PURGE_BATCH_MAX, TXO_PURGE_BATCH_MAX + 1);
    char flag[48];
    snprintf(flag, sizeof(flag), "--clean-batch=%d", TXO_PURGE_BATCH_MAX + 1);
    static const char *const commands[] = {"relay", "worker", "up", "clean"};
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        const char *args[] = {commands[i], "--log-format=json", flag, NULL};
        char *error = json_error(args);
        if (strstr(error, want) == NULL)
            fail_msg("txo %s: %s", commands[i], error);
        free(error);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_plain_text_without_a_chosen_format, clear_env),
        cmocka_unit_test_teardown(test_flag_chooses_json_even_after_the_bad_flag, clear_env),
        cmocka_unit_test_teardown(test_environment_chooses_logfmt, clear_env),
        cmocka_unit_test_teardown(test_unknown_command_in_json_has_no_usage_text, clear_env),
        cmocka_unit_test_teardown(test_help_stays_plain_text, clear_env),
        cmocka_unit_test_teardown(test_bad_format_is_reported_plainly, clear_env),
        cmocka_unit_test_teardown(test_clean_batch_range_is_the_cleaners, clear_env),
    };
    clear_env(NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
