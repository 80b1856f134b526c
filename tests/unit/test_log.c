/*
 * Unit tests for src/core/log.c: a custom sink receives level, component and message; the
 * level filter drops lines before their arguments are evaluated; level names parse; and the
 * default sink writes one logfmt line with the free text quoted and key=value pairs kept.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "txo/txo.h"

struct captured {
    int calls;
    enum txo_log_level level;
    char component[64];
    char msg[4096];
};

static void capture_sink(enum txo_log_level level, const char *component, const char *msg,
                         void *arg)
{
    struct captured *c = arg;
    c->calls++;
    c->level = level;
    snprintf(c->component, sizeof(c->component), "%s", component);
    snprintf(c->msg, sizeof(c->msg), "%s", msg);
}

static int reset_log(void **state)
{
    (void)state;
    txo_log_set_sink(NULL, NULL);
    txo_log_set_level(TXO_LOG_INFO);
    return 0;
}

static void test_sink_receives_level_component_msg(void **state)
{
    (void)state;
    struct captured c = {0};
    txo_log_set_sink(capture_sink, &c);

    TXO_LOG(TXO_LOG_WARN, "relay", "claimed batch size=%zu token=%s", (size_t)3, "t-1");
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.level, TXO_LOG_WARN);
    assert_string_equal(c.component, "relay");
    /* the sink gets the formatted text untouched; only the default sink splits it */
    assert_string_equal(c.msg, "claimed batch size=3 token=t-1");

    txo_log_write(TXO_LOG_ERROR, NULL, "no component");
    assert_int_equal(c.calls, 2);
    assert_int_equal(c.level, TXO_LOG_ERROR);
    assert_string_equal(c.component, "txo");
}

static int evaluated;

static int count_evaluation(void)
{
    return ++evaluated;
}

static void test_filtered_levels_do_not_evaluate_arguments(void **state)
{
    (void)state;
    struct captured c = {0};
    txo_log_set_sink(capture_sink, &c);
    evaluated = 0;

    txo_log_set_level(TXO_LOG_WARN);
    assert_int_equal(txo_log_get_level(), TXO_LOG_WARN);
    TXO_LOG(TXO_LOG_DEBUG, "t", "n=%d", count_evaluation());
    TXO_LOG(TXO_LOG_INFO, "t", "n=%d", count_evaluation());
    assert_int_equal(evaluated, 0);
    assert_int_equal(c.calls, 0);

    TXO_LOG(TXO_LOG_WARN, "t", "n=%d", count_evaluation());
    TXO_LOG(TXO_LOG_ERROR, "t", "n=%d", count_evaluation());
    assert_int_equal(evaluated, 2);
    assert_int_equal(c.calls, 2);
    assert_string_equal(c.msg, "n=2");

    /* a direct call is filtered too */
    txo_log_write(TXO_LOG_DEBUG, "t", "direct");
    assert_int_equal(c.calls, 2);

    txo_log_set_level(TXO_LOG_DEBUG);
    TXO_LOG(TXO_LOG_DEBUG, "t", "n=%d", count_evaluation());
    assert_int_equal(evaluated, 3);
    assert_int_equal(c.calls, 3);
}

static void test_level_parse(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        enum txo_log_level level;
    } ok[] = {
        {"error", TXO_LOG_ERROR}, {"warn", TXO_LOG_WARN},   {"info", TXO_LOG_INFO},
        {"debug", TXO_LOG_DEBUG}, {"DEBUG", TXO_LOG_DEBUG}, {"Warn", TXO_LOG_WARN},
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(ok); i++) {
        enum txo_log_level out = TXO_LOG_ERROR;
        assert_int_equal(txo_log_level_parse(ok[i].name, &out), 0);
        assert_int_equal(out, ok[i].level);
    }

    const char *bad[] = {"", "verbose", "inf", "info ", "trace", NULL};
    for (size_t i = 0; i < TXO_ARRAY_LEN(bad); i++) {
        enum txo_log_level out = TXO_LOG_INFO;
        assert_int_equal(txo_log_level_parse(bad[i], &out), TXO_EINVAL);
        assert_int_equal(out, TXO_LOG_INFO); /* untouched on failure */
    }
}

static void test_logging_preserves_errno(void **state)
{
    (void)state;
    struct captured c = {0};
    txo_log_set_sink(capture_sink, &c);
    errno = ECONNREFUSED;
    TXO_LOG(TXO_LOG_ERROR, "db", "connect failed host=%s", "h");
    assert_int_equal(errno, ECONNREFUSED);
}

static void test_long_message_is_cut(void **state)
{
    (void)state;
    struct captured c = {0};
    txo_log_set_sink(capture_sink, &c);
    char big[3000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';

    TXO_LOG(TXO_LOG_INFO, "t", "%s", big);
    size_t len = strlen(c.msg);
    assert_true(len > 1000 && len < sizeof(big) - 1);
    assert_string_equal(c.msg + len - 3, "...");
}

/* Runs one TXO_LOG through the default sink with stderr redirected, returns the output. */
static void default_sink_output(char *out, size_t out_size, enum txo_log_level level,
                                const char *component, const char *msg)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fds[1], STDERR_FILENO) >= 0);

    txo_log_set_sink(NULL, NULL);
    TXO_LOG(level, component, "%s", msg);

    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    close(fds[1]);
    ssize_t n = read(fds[0], out, out_size - 1);
    close(fds[0]);
    assert_true(n > 0);
    out[n] = '\0';
}

/* Checks "ts=YYYY-MM-DDTHH:MM:SS.mmmZ " and returns what follows it. */
static const char *skip_timestamp(const char *line)
{
    assert_memory_equal(line, "ts=", 3);
    const char *ts = line + 3;
    const char *shape = "dddd-dd-ddTdd:dd:dd.dddZ ";
    for (size_t i = 0; shape[i] != '\0'; i++) {
        if (shape[i] == 'd') {
            assert_true(ts[i] >= '0' && ts[i] <= '9');
        } else if (ts[i] != shape[i]) {
            fail_msg("bad timestamp in line: %s", line);
        }
    }
    return ts + strlen(shape);
}

static void test_default_sink_logfmt(void **state)
{
    (void)state;
    char out[8192];

    default_sink_output(out, sizeof(out), TXO_LOG_INFO, "relay",
                        "claimed batch size=10 token=ab12");
    assert_string_equal(skip_timestamp(out),
                        "level=info component=relay msg=\"claimed batch\" size=10 token=ab12\n");

    default_sink_output(out, sizeof(out), TXO_LOG_ERROR, "db", "just free text");
    assert_string_equal(skip_timestamp(out), "level=error component=db msg=\"just free text\"\n");

    default_sink_output(out, sizeof(out), TXO_LOG_WARN, "saga", "saga_id=7 step=charge");
    assert_string_equal(skip_timestamp(out),
                        "level=warn component=saga msg=\"\" saga_id=7 step=charge\n");

    /* quotes, backslashes and newlines cannot break the line or the quoting */
    default_sink_output(out, sizeof(out), TXO_LOG_WARN, "http", "bad \"body\" a\\b\nnext err=x\ny");
    assert_string_equal(skip_timestamp(out),
                        "level=warn component=http msg=\"bad \\\"body\\\" a\\\\b\\nnext\" "
                        "err=x\\ny\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_sink_receives_level_component_msg, reset_log),
        cmocka_unit_test_teardown(test_filtered_levels_do_not_evaluate_arguments, reset_log),
        cmocka_unit_test_teardown(test_level_parse, reset_log),
        cmocka_unit_test_teardown(test_logging_preserves_errno, reset_log),
        cmocka_unit_test_teardown(test_long_message_is_cut, reset_log),
        cmocka_unit_test_teardown(test_default_sink_logfmt, reset_log),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
