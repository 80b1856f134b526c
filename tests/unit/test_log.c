/*
 * Unit tests for src/core/log.c: a custom sink receives level, component, the constant message
 * and checked typed fields; the level filter drops events before their arguments are
 * evaluated; the logfmt and JSON encoders quote, escape, type and cut values so every line
 * stays valid, which parsers that are not ours (npm logfmt, node's JSON.parse, jansson) confirm;
 * bad and repeated keys are caught.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "testpipe.h"
#include "txo/trace.h"
#include <jansson.h>

#include "txo/txo.h"

#define TS "2026-11-30T15:37:00.123Z"

struct captured {
    int calls;
    enum txo_log_level level;
    char component[64];
    char msg[256];
    size_t n_fields; /* how many of them fields[] keeps */
    size_t all_fields;
    struct txo_log_field fields[8];
    char strs[8][64]; /* copies of the string values */
};

static void capture_sink(enum txo_log_level level, const char *component, const char *msg,
                         const struct txo_log_field *fields, size_t n_fields, void *arg)
{
    struct captured *c = arg;
    c->calls++;
    c->level = level;
    snprintf(c->component, sizeof(c->component), "%s", component);
    snprintf(c->msg, sizeof(c->msg), "%s", msg);
    c->all_fields = n_fields;
    c->n_fields = n_fields < 8 ? n_fields : 8;
    for (size_t i = 0; i < c->n_fields; i++) {
        c->fields[i] = fields[i];
        if (fields[i].kind == TXO_LOG_KIND_STR) {
            snprintf(c->strs[i], sizeof(c->strs[i]), "%.*s", (int)fields[i].v.str.len,
                     fields[i].v.str.ptr);
            c->fields[i].v.str.ptr = c->strs[i];
        }
    }
}

static int reset_log(void **state)
{
    (void)state;
    txo_log_set_sink(NULL, NULL);
    txo_log_set_level(TXO_LOG_INFO);
    txo_log_set_format(TXO_LOG_FORMAT_LOGFMT);
    return 0;
}

static void test_sink_receives_message_and_typed_fields(void **state)
{
    (void)state;
    struct captured c = {0};
    txo_log_set_sink(capture_sink, &c);

    const char *absent = NULL;
    TXO_LOG(TXO_LOG_WARN, "relay", "claimed batch", TXO_KV_U64("size", (size_t)3),
            TXO_KV_STR("token", "t-1"), TXO_KV_STR("gone", absent), TXO_KV_I64("delta", -2),
            TXO_KV_BOOL("drain", true), TXO_KV_STRN("part", "abcdef", 2));
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.level, TXO_LOG_WARN);
    assert_string_equal(c.component, "relay");
    assert_string_equal(c.msg, "claimed batch");
    /* The NULL string is left out; the others keep their order, type and value. */
    assert_int_equal(c.n_fields, 5);
    assert_string_equal(c.fields[0].key, "size");
    assert_int_equal(c.fields[0].kind, TXO_LOG_KIND_U64);
    assert_int_equal(c.fields[0].v.u64, 3);
    assert_string_equal(c.fields[1].key, "token");
    assert_int_equal(c.fields[1].v.str.len, 3);
    assert_string_equal(c.fields[1].v.str.ptr, "t-1");
    assert_string_equal(c.fields[2].key, "delta");
    assert_int_equal(c.fields[2].v.i64, -2);
    assert_true(c.fields[3].v.b);
    assert_int_equal(c.fields[4].v.str.len, 2);
    assert_string_equal(c.fields[4].v.str.ptr, "ab");

    TXO_LOG(TXO_LOG_ERROR, "db", "no fields");
    assert_int_equal(c.calls, 2);
    assert_int_equal(c.n_fields, 0);

    txo_log_emit(TXO_LOG_ERROR, NULL, "no component", NULL, 0);
    assert_int_equal(c.calls, 3);
    assert_string_equal(c.component, "txo");
}

/* Inside a traced operation every line carries its trace_id and span_id, after its own fields;
 * outside, none. */
static void test_lines_of_a_traced_operation_carry_its_ids(void **state)
{
    (void)state;
    struct captured c = {0};
    txo_log_set_sink(capture_sink, &c);
    struct txo_trace_ctx ctx;
    assert_true(
        txo_trace_parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", NULL, &ctx));
    const struct txo_trace_ctx *prev = txo_trace_set_current(&ctx);
    assert_null(prev);
    TXO_LOG(TXO_LOG_WARN, "saga", "step failed", TXO_KV_U64("step_order", 2));
    assert_int_equal(c.n_fields, 3);
    assert_string_equal(c.fields[0].key, "step_order");
    assert_string_equal(c.fields[1].key, "trace_id");
    assert_string_equal(c.fields[1].v.str.ptr, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_string_equal(c.fields[2].key, "span_id");
    assert_string_equal(c.fields[2].v.str.ptr, "00f067aa0ba902b7");
    assert_ptr_equal(txo_trace_set_current(prev), &ctx);
    TXO_LOG(TXO_LOG_WARN, "saga", "step failed", TXO_KV_U64("step_order", 2));
    assert_int_equal(c.n_fields, 1);
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
    TXO_LOG(TXO_LOG_DEBUG, "t", "counted", TXO_KV_I64("n", count_evaluation()));
    TXO_LOG(TXO_LOG_INFO, "t", "counted", TXO_KV_I64("n", count_evaluation()));
    assert_int_equal(evaluated, 0);
    assert_int_equal(c.calls, 0);

    TXO_LOG(TXO_LOG_WARN, "t", "counted", TXO_KV_I64("n", count_evaluation()));
    TXO_LOG(TXO_LOG_ERROR, "t", "counted", TXO_KV_I64("n", count_evaluation()));
    assert_int_equal(evaluated, 2);
    assert_int_equal(c.calls, 2);
    assert_int_equal(c.fields[0].v.i64, 2);

    /* a direct call is filtered too */
    txo_log_emit(TXO_LOG_DEBUG, "t", "direct", NULL, 0);
    assert_int_equal(c.calls, 2);

    txo_log_set_level(TXO_LOG_DEBUG);
    TXO_LOG(TXO_LOG_DEBUG, "t", "counted", TXO_KV_I64("n", count_evaluation()));
    assert_int_equal(evaluated, 3);
    assert_int_equal(c.calls, 3);
}

static void test_level_and_format_parse(void **state)
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

    enum txo_log_format fmt = TXO_LOG_FORMAT_LOGFMT;
    assert_int_equal(txo_log_format_parse("json", &fmt), 0);
    assert_int_equal(fmt, TXO_LOG_FORMAT_JSON);
    assert_int_equal(txo_log_format_parse("logfmt", &fmt), 0);
    assert_int_equal(fmt, TXO_LOG_FORMAT_LOGFMT);
    assert_int_equal(txo_log_format_parse("xml", &fmt), TXO_EINVAL);
    assert_int_equal(txo_log_format_parse(NULL, &fmt), TXO_EINVAL);
}

static void test_logging_preserves_errno(void **state)
{
    (void)state;
    struct captured c = {0};
    txo_log_set_sink(capture_sink, &c);
    errno = ECONNREFUSED;
    TXO_LOG(TXO_LOG_ERROR, "db", "connect failed", TXO_KV_STR("host", "h"));
    assert_int_equal(errno, ECONNREFUSED);
    txo_log_set_sink(NULL, NULL);
    txo_log_set_level(TXO_LOG_ERROR);
    int fd = dup(STDERR_FILENO);
    close(STDERR_FILENO); /* the default sink's write fails: errno still comes back unchanged */
    errno = ETIMEDOUT;
    TXO_LOG(TXO_LOG_ERROR, "db", "connect failed", TXO_KV_STR("host", "h"));
    int after = errno;
    dup2(fd, STDERR_FILENO);
    close(fd);
    assert_int_equal(after, ETIMEDOUT);
}

/* One event encoded by the default sink's encoder with the fixed timestamp TS. */
static const char *encode(enum txo_log_format format, const char *msg,
                          const struct txo_log_field *fields, size_t n)
{
    static char buf[TXO_LOG_LINE_MAX];
    size_t len =
        txo_log_format_line(buf, sizeof(buf), format, TS, TXO_LOG_INFO, "t", msg, fields, n);
    assert_int_equal(len, strlen(buf));
    assert_true(len > 0 && buf[len - 1] == '\n');
    assert_null(memchr(buf, '\n', len - 1)); /* one event, one line */
    return buf;
}

#define LOGFMT(msg, ...)                                                                           \
    encode(TXO_LOG_FORMAT_LOGFMT, msg, (const struct txo_log_field[]){__VA_ARGS__},                \
           sizeof((const struct txo_log_field[]){__VA_ARGS__}) / sizeof(struct txo_log_field))
#define JSON(msg, ...)                                                                             \
    encode(TXO_LOG_FORMAT_JSON, msg, (const struct txo_log_field[]){__VA_ARGS__},                  \
           sizeof((const struct txo_log_field[]){__VA_ARGS__}) / sizeof(struct txo_log_field))
#define HEAD_LOGFMT "ts=" TS " level=info component=t "
#define HEAD_JSON   "{\"ts\":\"" TS "\",\"level\":\"info\",\"component\":\"t\","

static void test_logfmt_quotes_only_what_needs_it(void **state)
{
    (void)state;
    assert_string_equal(LOGFMT("claimed batch", TXO_KV_U64("size", 10), TXO_KV_STR("token", "ab")),
                        HEAD_LOGFMT "msg=\"claimed batch\" size=10 token=ab\n");
    assert_string_equal(LOGFMT("started", TXO_KV_STR("path", "/a/b:c")),
                        HEAD_LOGFMT "msg=started path=/a/b:c\n");
    /* a space, an '=', a quote, a backslash, emptiness: each forces quotes */
    assert_string_equal(LOGFMT("m", TXO_KV_STR("a", "x y"), TXO_KV_STR("b", "k=v"),
                               TXO_KV_STR("c", "say \"hi\""), TXO_KV_STR("d", "C:\\dir"),
                               TXO_KV_STR("e", "")),
                        HEAD_LOGFMT "msg=m a=\"x y\" b=\"k=v\" c=\"say \\\"hi\\\"\" "
                                    "d=\"C:\\\\dir\" e=\"\"\n");
    /* control characters never split the line */
    assert_string_equal(LOGFMT("m", TXO_KV_STR("err", "one\ntwo\r\tthree\x01\x7f")),
                        HEAD_LOGFMT "msg=m err=\"one\\ntwo\\r\\tthree\\x01\\x7f\"\n");
    /* UTF-8 passes through unquoted */
    assert_string_equal(LOGFMT("m", TXO_KV_STR("city", "Zürich")),
                        HEAD_LOGFMT "msg=m city=Zürich\n");
}

static void test_numbers_and_bools(void **state)
{
    (void)state;
    assert_string_equal(LOGFMT("n", TXO_KV_I64("min", INT64_MIN), TXO_KV_I64("neg", -5),
                               TXO_KV_I64("zero", 0), TXO_KV_U64("max", UINT64_MAX),
                               TXO_KV_F64("rate", 2.5), TXO_KV_F64("tiny", 1e-300),
                               TXO_KV_BOOL("ok", true), TXO_KV_BOOL("no", false)),
                        HEAD_LOGFMT "msg=n min=-9223372036854775808 neg=-5 zero=0 "
                                    "max=18446744073709551615 rate=2.5 tiny=1e-300 ok=true "
                                    "no=false\n");
    assert_string_equal(
        LOGFMT("n", TXO_KV_F64("a", NAN), TXO_KV_F64("b", INFINITY), TXO_KV_F64("c", -INFINITY)),
        HEAD_LOGFMT "msg=n a=NaN b=+Inf c=-Inf\n");

    const char *line = JSON("n", TXO_KV_I64("min", INT64_MIN), TXO_KV_U64("max", UINT64_MAX),
                            TXO_KV_F64("rate", 0.1), TXO_KV_F64("nan", NAN),
                            TXO_KV_BOOL("ok", true), TXO_KV_STR("s", "7"));
    assert_string_equal(line, HEAD_JSON "\"msg\":\"n\",\"min\":-9223372036854775808,"
                                        "\"max\":18446744073709551615,\"rate\":0.1,"
                                        "\"nan\":null,\"ok\":true,\"s\":\"7\"}\n");
    /* jansson holds integers in int64: the same line without the uint64 maximum */
    line = JSON("n", TXO_KV_I64("min", INT64_MIN), TXO_KV_F64("rate", 0.1), TXO_KV_F64("nan", NAN),
                TXO_KV_BOOL("ok", true), TXO_KV_STR("s", "7"));
    json_error_t jerr;
    json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, &jerr);
    if (o == NULL)
        fail_msg("not JSON (%s): %s", jerr.text, line);
    assert_true(json_is_integer(json_object_get(o, "min")));
    assert_true(json_is_real(json_object_get(o, "rate")));
    assert_true(json_is_null(json_object_get(o, "nan")));
    assert_true(json_is_true(json_object_get(o, "ok")));
    assert_true(json_is_string(json_object_get(o, "s")));
    json_decref(o);
}

static void test_json_escapes_strings(void **state)
{
    (void)state;
    const char *line = JSON("quote \" here", TXO_KV_STR("err", "a\"b\\c\nd\x01\x7f"),
                            TXO_KV_STR("empty", ""), TXO_KV_STR("city", "Zürich"));
    assert_string_equal(line, HEAD_JSON "\"msg\":\"quote \\\" here\","
                                        "\"err\":\"a\\\"b\\\\c\\nd\\u0001\\u007f\","
                                        "\"empty\":\"\",\"city\":\"Zürich\"}\n");
    json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, NULL);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "err")), "a\"b\\c\nd\x01\x7f");
    json_decref(o);
}

/* A value of n bytes of 'x' with a 2-byte UTF-8 character straddling byte 1024. */
static char *long_value(size_t n)
{
    char *v = malloc(n + 1);
    assert_non_null(v);
    memset(v, 'x', n);
    memcpy(v + 1023, "\xc3\xa9", 2); /* é at bytes 1023..1024 */
    v[n] = '\0';
    return v;
}

static void test_long_values_are_cut_and_lines_stay_valid(void **state)
{
    (void)state;
    char *v = long_value(5000);

    /* One long value: cut before the character that crosses 1024 bytes, marked by "...". */
    const char *line = LOGFMT("m", TXO_KV_STR("v", v), TXO_KV_I64("after", 1));
    const char *val = strstr(line, " v=\"");
    assert_non_null(val);
    const char *end = strstr(val, "...\" after=1\n");
    assert_non_null(end);
    assert_int_equal(end - (val + 4), 1023);

    line = JSON("m", TXO_KV_STR("v", v), TXO_KV_I64("after", 1));
    json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, NULL);
    assert_non_null(o);
    assert_int_equal(strlen(json_string_value(json_object_get(o, "v"))), 1023 + 3);
    assert_int_equal(json_integer_value(json_object_get(o, "after")), 1);
    json_decref(o);

    /* Values that expand six times when escaped, more than a line holds: the fields that do
     * not fit are dropped whole and the line says so, and is still one valid line. */
    char *ctl = malloc(1001);
    assert_non_null(ctl);
    memset(ctl, '\x01', 1000);
    ctl[1000] = '\0';
    for (int f = 0; f < 2; f++) {
        enum txo_log_format format = f == 0 ? TXO_LOG_FORMAT_LOGFMT : TXO_LOG_FORMAT_JSON;
        const struct txo_log_field many[] = {
            TXO_KV_STR("a", ctl), TXO_KV_STR("b", ctl), TXO_KV_STR("c", ctl),
            TXO_KV_STR("d", ctl), TXO_KV_U64("e", 5),   TXO_KV_STR("f", ctl),
        };
        line = encode(format, "m", many, TXO_ARRAY_LEN(many));
        assert_true(strlen(line) < TXO_LOG_LINE_MAX);
        if (format == TXO_LOG_FORMAT_JSON) {
            o = json_loads(line, JSON_REJECT_DUPLICATES, NULL);
            assert_non_null(o);
            assert_true(json_is_true(json_object_get(o, "truncated")));
            assert_non_null(json_object_get(o, "a"));
            assert_null(json_object_get(o, "f"));
            json_decref(o);
        } else {
            assert_non_null(strstr(line, " a=\""));
            assert_null(strstr(line, " f="));
            size_t len = strlen(line);
            assert_string_equal(line + len - strlen(" truncated=true\n"), " truncated=true\n");
        }
    }
    free(ctl);
    free(v);
}

/* Runs fn with stderr redirected to a pipe and returns what the default sink wrote. */
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
    size_t n = 0;
    ssize_t r;
    while (n + 1 < out_size && (r = read(fds[0], out + n, out_size - 1 - n)) > 0)
        n += (size_t)r;
    close(fds[0]);
    assert_true(n > 0);
    out[n] = '\0';
}

#define NASTY "Duplicate entry 'a\"b' for key \\x=1\nnext line"

static void log_nasty_values(void)
{
    TXO_LOG(TXO_LOG_WARN, "worker", "retention cleaner failed", TXO_KV_STR("err", NASTY));
    TXO_LOG(TXO_LOG_INFO, "outbox", "append", TXO_KV_STR("key", "a b=c"),
            TXO_KV_STR("event_type", "OrderCreated"), TXO_KV_I64("n", -5), TXO_KV_STR("empty", ""));
    TXO_LOG(TXO_LOG_INFO, "relay", "relay stopped", TXO_KV_U64("claimed", UINT64_C(1) << 60),
            TXO_KV_F64("rate", 2.5), TXO_KV_U64("size", 500), TXO_KV_STR("id", "r-1"),
            TXO_KV_STR("pct", "100%"), TXO_KV_I64("delay_ms", 20));
    TXO_LOG(TXO_LOG_INFO, "dlq", "replayed dead letter, its event is PENDING again",
            TXO_KV_I64("dead_letter_id", 4), TXO_KV_I64("event_id", 9));
}

/* Writes text to a fresh file and runs tests/js/check_logs.mjs --all --print on it; returns
 * the parsed lines, one JSON object per line, in out. */
static void check_with_node(const char *text, char *out, size_t out_size)
{
    const char *js_dir = getenv("TXO_JS_DIR");
    if (js_dir == NULL)
        fail_msg("TXO_JS_DIR is not set (CTest sets it)");
    char node[512];
    snprintf(node, sizeof(node), "node %s/check_logs.mjs --all --print", js_dir);
    int rc = testpipe_run(text, node, "2>&1", out, out_size);
    if (rc != 0)
        fail_msg("%s failed (%d): %s", node, rc, out);
}

/* The i-th line of text as a jansson object (the caller frees it). */
static json_t *nth_object(const char *text, int i)
{
    for (; i > 0; i--) {
        text = strchr(text, '\n');
        assert_non_null(text);
        text++;
    }
    json_error_t jerr;
    json_t *o = json_loads(text, JSON_DISABLE_EOF_CHECK | JSON_REJECT_DUPLICATES, &jerr);
    if (o == NULL)
        fail_msg("not JSON (%s): %s", jerr.text, text);
    return o;
}

static void test_default_sink_logfmt_read_by_npm_logfmt(void **state)
{
    (void)state;
    char out[8192];
    capture(out, sizeof(out), log_nasty_values);
    /* "ts=YYYY-MM-DDTHH:MM:SS.mmmZ level=warn ..." */
    assert_int_equal(strspn(out + 3, "0123456789-T:."), 23);
    assert_memory_equal(out + 26,
                        "Z level=warn component=worker msg=\"retention cleaner failed\" "
                        "err=\"Duplicate entry 'a\\\"b' for key \\\\x=1\\nnext line\"\n",
                        strlen("Z level=warn component=worker msg=\"retention cleaner failed\" "
                               "err=\"Duplicate entry 'a\\\"b' for key \\\\x=1\\nnext line\"\n"));

    char parsed[8192];
    check_with_node(out, parsed, sizeof(parsed));
    json_t *a = nth_object(parsed, 0);
    json_t *b = nth_object(parsed, 1);
    json_t *d = nth_object(parsed, 3);
    /* The quote, the backslash and the '=' come back as they were and the newline stays in
     * the value; this parser undoes every backslash escape by dropping the backslash, so the
     * newline, which we write as "\n" like go-logfmt does, reads back as 'n'. */
    assert_string_equal(json_string_value(json_object_get(a, "err")),
                        "Duplicate entry 'a\"b' for key \\x=1nnext line");
    assert_string_equal(json_string_value(json_object_get(a, "msg")), "retention cleaner failed");
    assert_string_equal(json_string_value(json_object_get(b, "key")), "a b=c");
    assert_string_equal(json_string_value(json_object_get(b, "event_type")), "OrderCreated");
    assert_string_equal(json_string_value(json_object_get(d, "msg")),
                        "replayed dead letter, its event is PENDING again");
    assert_string_equal(json_string_value(json_object_get(d, "event_id")), "9");
    json_decref(a);
    json_decref(b);
    json_decref(d);
}

static void test_default_sink_json_read_by_node_and_jq(void **state)
{
    (void)state;
    char out[8192];
    txo_log_set_format(TXO_LOG_FORMAT_JSON);
    assert_int_equal(txo_log_get_format(), TXO_LOG_FORMAT_JSON);
    capture(out, sizeof(out), log_nasty_values);
    txo_log_set_format(TXO_LOG_FORMAT_LOGFMT);

    /* node's JSON.parse, with the repeated-key and number checks of check_logs.mjs */
    char parsed[8192];
    check_with_node(out, parsed, sizeof(parsed));

    json_t *a = nth_object(out, 0);
    assert_string_equal(json_string_value(json_object_get(a, "level")), "warn");
    assert_string_equal(json_string_value(json_object_get(a, "component")), "worker");
    assert_string_equal(json_string_value(json_object_get(a, "msg")), "retention cleaner failed");
    assert_string_equal(json_string_value(json_object_get(a, "err")), NASTY);
    assert_int_equal(strlen(json_string_value(json_object_get(a, "ts"))), 24);
    json_decref(a);
    json_t *b = nth_object(out, 1);
    assert_string_equal(json_string_value(json_object_get(b, "key")), "a b=c");
    assert_int_equal(json_integer_value(json_object_get(b, "n")), -5);
    assert_string_equal(json_string_value(json_object_get(b, "empty")), "");
    json_decref(b);
    json_t *c = nth_object(out, 2);
    assert_true(json_is_integer(json_object_get(c, "claimed")));
    assert_true(json_is_real(json_object_get(c, "rate")));
    assert_string_equal(json_string_value(json_object_get(c, "pct")), "100%");
    json_decref(c);

    /* And jq, another parser, reads the same lines. */
    char got[512];
    assert_int_equal(testpipe_run(out, "jq -r .err", "| head -2", got, sizeof(got)), 0);
    assert_string_equal(got, NASTY "\n");
}

/* The checker itself rejects what the old printf-style lines looked like. */
static void test_checker_rejects_free_text_and_repeated_keys(void **state)
{
    (void)state;
    const char *js_dir = getenv("TXO_JS_DIR");
    if (js_dir == NULL)
        fail_msg("TXO_JS_DIR is not set (CTest sets it)");
    static const char *const bad[] = {
        "ts=" TS " level=info component=dlq msg=\"replayed dead letter\" dead_letter_id=4 "
        "event_id=9: the event is PENDING again\n",
        "ts=" TS " level=info component=t msg=m a=1 a=2\n",
        "{\"ts\":\"" TS "\",\"level\":\"info\",\"component\":\"t\",\"msg\":\"m\",\"rest\":\"a\","
        "\"rest\":\"b\"}\n",
        "{\"ts\":\"" TS "\",\"level\":\"info\",\"component\":\"t\",\"msg\":\"m\","
        "\"delay_ms\":\"20\"}\n",
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(bad); i++) {
        char path[64], cmd[1024];
        snprintf(path, sizeof(path), "/tmp/txo_logbad_%ld.log", (long)getpid());
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(bad[i], f);
        fclose(f);
        snprintf(cmd, sizeof(cmd), "node %s/check_logs.mjs %s >/dev/null 2>&1", js_dir, path);
        int rc = system(cmd);
        remove(path);
        if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 1)
            fail_msg("check_logs.mjs accepted: %s", bad[i]);
    }
}

/* Logs one event with a repeated key (or a bad one) in a child; returns its wait status. */
static int log_in_child(int which)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, STDERR_FILENO);
        txo_log_set_sink(NULL, NULL);
        if (which == 0)
            TXO_LOG(TXO_LOG_ERROR, "t", "m", TXO_KV_I64("a", 1), TXO_KV_I64("a", 2));
        else if (which == 1)
            TXO_LOG(TXO_LOG_ERROR, "t", "m", TXO_KV_I64("Bad-Key", 1));
        else
            TXO_LOG(TXO_LOG_ERROR, "t", "m", TXO_KV_STR("msg", "again"));
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void test_bad_or_repeated_keys_are_caught(void **state)
{
    (void)state;
    for (int which = 0; which < 3; which++) {
        int status = log_in_child(which);
#ifdef NDEBUG
        /* Release builds keep running and drop the field (test_check_log_keys catches it in
         * the source). */
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
#else
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
#endif
    }
#ifdef NDEBUG
    struct captured c = {0};
    txo_log_set_sink(capture_sink, &c);
    TXO_LOG(TXO_LOG_ERROR, "t", "m", TXO_KV_I64("a", 1), TXO_KV_I64("a", 2), TXO_KV_I64("b", 3));
    assert_int_equal(c.n_fields, 2);
    assert_int_equal(c.fields[0].v.i64, 1);
    assert_string_equal(c.fields[1].key, "b");
#endif
}

static void test_twenty_fields(void **state)
{
    (void)state;
    struct captured c = {0};
    txo_log_set_sink(capture_sink, &c);
    TXO_LOG(TXO_LOG_INFO, "t", "m", TXO_KV_I64("f1", 1), TXO_KV_I64("f2", 2), TXO_KV_I64("f3", 3),
            TXO_KV_I64("f4", 4), TXO_KV_I64("f5", 5), TXO_KV_I64("f6", 6), TXO_KV_I64("f7", 7),
            TXO_KV_I64("f8", 8), TXO_KV_I64("f9", 9), TXO_KV_I64("f10", 10), TXO_KV_I64("f11", 11),
            TXO_KV_I64("f12", 12), TXO_KV_I64("f13", 13), TXO_KV_I64("f14", 14),
            TXO_KV_I64("f15", 15), TXO_KV_I64("f16", 16), TXO_KV_I64("f17", 17),
            TXO_KV_I64("f18", 18), TXO_KV_I64("f19", 19), TXO_KV_I64("f20", 20));
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.all_fields, 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_lines_of_a_traced_operation_carry_its_ids, reset_log),
        cmocka_unit_test_teardown(test_sink_receives_message_and_typed_fields, reset_log),
        cmocka_unit_test_teardown(test_filtered_levels_do_not_evaluate_arguments, reset_log),
        cmocka_unit_test_teardown(test_level_and_format_parse, reset_log),
        cmocka_unit_test_teardown(test_logging_preserves_errno, reset_log),
        cmocka_unit_test_teardown(test_logfmt_quotes_only_what_needs_it, reset_log),
        cmocka_unit_test_teardown(test_numbers_and_bools, reset_log),
        cmocka_unit_test_teardown(test_json_escapes_strings, reset_log),
        cmocka_unit_test_teardown(test_long_values_are_cut_and_lines_stay_valid, reset_log),
        cmocka_unit_test_teardown(test_default_sink_logfmt_read_by_npm_logfmt, reset_log),
        cmocka_unit_test_teardown(test_default_sink_json_read_by_node_and_jq, reset_log),
        cmocka_unit_test_teardown(test_checker_rejects_free_text_and_repeated_keys, reset_log),
        cmocka_unit_test_teardown(test_bad_or_repeated_keys_are_caught, reset_log),
        cmocka_unit_test_teardown(test_twenty_fields, reset_log),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
