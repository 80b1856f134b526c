/*
 * Unit tests for src/core/log.c: a custom sink receives level, component and message; the
 * level filter drops lines before their arguments are evaluated; level names parse; and the
 * default sink writes one logfmt line with the free text quoted and key=value pairs kept.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

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

/* Captures what the default sink writes to stderr while fn runs. */
static void capture(char *out, size_t out_size, void (*fn)(void))
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fds[1], STDERR_FILENO) >= 0);
    txo_log_set_sink(NULL, NULL);
    fn();
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    close(fds[1]);
    ssize_t n = read(fds[0], out, out_size - 1);
    close(fds[0]);
    assert_true(n > 0);
    out[n] = '\0';
}

#define NASTY "Duplicate entry 'a\"b' for key \\x=1\nnext line"

static void log_nasty_values(void)
{
    TXO_LOG(TXO_LOG_WARN, "worker", "retention cleaner failed err=\"%s\"", NASTY);
    TXO_LOG(TXO_LOG_INFO, "outbox", "append key=%s event_type=%s n=%d empty=%s", "a b=c",
            "OrderCreated", -5, "");
    TXO_LOG(TXO_LOG_INFO, "relay",
            "relay stopped claimed=%" PRIu64 " rate=%.2f batch=%zu id=%s pct=100%%",
            (uint64_t)18446744073709551615ULL, 2.5, (size_t)500, "r-1");
}

static void test_values_are_escaped_where_they_stand(void **state)
{
    (void)state;
    char out[8192];
    capture(out, sizeof(out), log_nasty_values);
    char *second = strchr(out, '\n') + 1;
    char *third = strchr(second, '\n') + 1;
    assert_memory_equal(skip_timestamp(out),
                        "level=warn component=worker msg=\"retention cleaner failed\" "
                        "err=\"Duplicate entry 'a\\\"b' for key \\\\x=1\\nnext line\"\n",
                        (size_t)(second - skip_timestamp(out)));
    assert_memory_equal(skip_timestamp(second),
                        "level=info component=outbox msg=\"append\" key=\"a b=c\" "
                        "event_type=OrderCreated n=-5 empty=\"\"\n",
                        (size_t)(third - skip_timestamp(second)));
    assert_string_equal(skip_timestamp(third),
                        "level=info component=relay msg=\"relay stopped\" "
                        "claimed=18446744073709551615 rate=2.50 batch=500 id=r-1 pct=100%\n");

    /* An independent logfmt parser (npm logfmt) reads the values back unchanged. */
    const char *js_dir = getenv("TXO_JS_DIR");
    if (js_dir == NULL)
        fail_msg("TXO_JS_DIR is not set (CTest sets it)");
    char path[64], cmd[1024];
    snprintf(path, sizeof(path), "/tmp/txo_logfmt_%ld.log", (long)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(out, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "node %s/check_logfmt.mjs %s", js_dir, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char parsed[8192];
    size_t n = fread(parsed, 1, sizeof(parsed) - 1, p);
    parsed[n] = '\0';
    int rc = pclose(p);
    remove(path);
    if (rc != 0)
        fail_msg("%s failed (%d): %s", cmd, rc, parsed);
    char *line2 = strchr(parsed, '\n');
    assert_non_null(line2);
    *line2++ = '\0';
    json_t *a = json_loads(parsed, 0, NULL);
    json_t *b = json_loads(line2, JSON_DISABLE_EOF_CHECK, NULL);
    assert_non_null(a);
    assert_non_null(b);
    /* The quote, the backslash and the '=' come back as they were and the newline stays in
     * the value; this parser undoes every backslash escape by dropping the backslash, so the
     * newline, which we write as "\n" like go-logfmt does, reads back as 'n'. */
    assert_string_equal(json_string_value(json_object_get(a, "err")),
                        "Duplicate entry 'a\"b' for key \\x=1nnext line");
    assert_string_equal(json_string_value(json_object_get(a, "msg")), "retention cleaner failed");
    assert_string_equal(json_string_value(json_object_get(b, "key")), "a b=c");
    assert_string_equal(json_string_value(json_object_get(b, "event_type")), "OrderCreated");
    json_decref(a);
    json_decref(b);
}

static void test_json_format(void **state)
{
    (void)state;
    char out[8192];
    txo_log_set_format(TXO_LOG_FORMAT_JSON);
    capture(out, sizeof(out), log_nasty_values);
    txo_log_set_format(TXO_LOG_FORMAT_LOGFMT);
    /* Each line is one JSON object (jansson), with the pairs as members. */
    char *lines[3];
    char *p = out;
    for (int i = 0; i < 3; i++) {
        lines[i] = p;
        char *eol = strchr(p, '\n');
        assert_non_null(eol);
        *eol = '\0';
        p = eol + 1;
    }
    assert_string_equal(p, "");
    json_error_t jerr;
    json_t *a = json_loads(lines[0], 0, &jerr);
    if (a == NULL)
        fail_msg("not JSON (%s): %s", jerr.text, lines[0]);
    assert_string_equal(json_string_value(json_object_get(a, "level")), "warn");
    assert_string_equal(json_string_value(json_object_get(a, "component")), "worker");
    assert_string_equal(json_string_value(json_object_get(a, "msg")), "retention cleaner failed");
    assert_string_equal(json_string_value(json_object_get(a, "err")), NASTY);
    assert_int_equal(strlen(json_string_value(json_object_get(a, "ts"))), 24);
    json_decref(a);
    json_t *b = json_loads(lines[1], 0, &jerr);
    assert_non_null(b);
    assert_string_equal(json_string_value(json_object_get(b, "key")), "a b=c");
    assert_string_equal(json_string_value(json_object_get(b, "n")), "-5");
    assert_string_equal(json_string_value(json_object_get(b, "empty")), "");
    json_decref(b);
    json_t *c = json_loads(lines[2], 0, &jerr);
    assert_non_null(c);
    assert_string_equal(json_string_value(json_object_get(c, "claimed")), "18446744073709551615");
    assert_string_equal(json_string_value(json_object_get(c, "pct")), "100%");
    json_decref(c);

    /* And jq, another parser, reads the same lines. */
    char path[64], cmd[256];
    snprintf(path, sizeof(path), "/tmp/txo_logjson_%ld.log", (long)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 3; i++)
        fprintf(f, "%s\n", lines[i]);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "jq -r .err %s | head -2", path);
    FILE *jq = popen(cmd, "r");
    assert_non_null(jq);
    char got[512];
    size_t n = fread(got, 1, sizeof(got) - 1, jq);
    got[n] = '\0';
    int rc = pclose(jq);
    remove(path);
    assert_int_equal(rc, 0);
    assert_string_equal(got, NASTY "\n");

    enum txo_log_format fmt;
    assert_int_equal(txo_log_format_parse("json", &fmt), 0);
    assert_int_equal(fmt, TXO_LOG_FORMAT_JSON);
    assert_int_equal(txo_log_format_parse("xml", &fmt), TXO_EINVAL);
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
        cmocka_unit_test_teardown(test_values_are_escaped_where_they_stand, reset_log),
        cmocka_unit_test_teardown(test_json_format, reset_log),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
