/*
 * CloudEvents output (`txo relay --envelope cloudevents`), checked by an implementation that
 * is not ours: the CloudEvents JavaScript SDK (tests/js/check_cloudevents.mjs, installed by
 * scripts/deps.sh) parses and validates every event the log publisher prints.
 *
 * Asserted: each event is a valid CloudEvents 1.0 structured-mode event with id = the
 * idempotency key, type = event_type, subject = aggregate_type/aggregate_id, time =
 * created_at, data = the payload with its exact values; txo's own decoder reads it back to the
 * same fields; a bad --envelope is refused. Binary mode (`--envelope cloudevents-binary`)
 * through the webhook publisher: an HTTP endpoint built on the same SDK
 * (tests/js/ce_http_sink.mjs) reads each POST from its ce-* headers and body and finds the
 * same attributes, a value with spaces, quotes and non-ASCII bytes percent-encoded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "testdb.h"
#include "testproc.h"
#include "txo/consumer.h"

/* Runs argv to completion; returns its exit status and (malloc'd) output. */
static int run(const char *const *argv, char **out)
{
    return testproc_run("ce", argv, 60000, out);
}

/* The path of tests/js/name, in buf. */
static const char *js_file(char *buf, size_t cap, const char *name)
{
    const char *js_dir = getenv("TXO_JS_DIR");
    if (js_dir == NULL)
        fail_msg("TXO_JS_DIR is not set (CTest sets it)");
    snprintf(buf, cap, "%s/%s", js_dir, name);
    return buf;
}

/*
 * The next line at *cursor that starts with '{', its length in *len; *cursor moves past it.
 * NULL when no such line is left.
 */
static const char *next_object_line(const char **cursor, size_t *len)
{
    const char *line = *cursor;
    while (line != NULL && *line != '\0') {
        const char *eol = strchr(line, '\n');
        size_t n = eol != NULL ? (size_t)(eol - line) : strlen(line);
        *cursor = eol != NULL ? eol + 1 : line + n;
        if (n > 0 && line[0] == '{') {
            *len = n;
            return line;
        }
        line = *cursor;
    }
    return NULL;
}

/* The created_at of the outbox event with this key as RFC 3339 with microseconds; txo_free it. */
static char *created_at_of(struct testdb *t, const char *key)
{
    struct txo_param k = txo_p_str(key);
    return testdb_str(t->db,
                      "SELECT DATE_FORMAT(created_at, '%Y-%m-%dT%H:%i:%s.%fZ') "
                      "FROM outbox_events WHERE idempotency_key = ?",
                      &k, 1);
}

/*
 * Checks what an event the SDK parsed carries in both modes: spec version 1.0, the source, JSON
 * data, and, when it is the invoice, its subject and data. Returns its id (borrowed from ev).
 */
static const char *check_sdk_event(json_t *ev)
{
    assert_string_equal(json_string_value(json_object_get(ev, "specversion")), "1.0");
    assert_string_equal(json_string_value(json_object_get(ev, "source")), "urn:example:shop");
    assert_string_equal(json_string_value(json_object_get(ev, "datacontenttype")),
                        "application/json");
    const char *id = json_string_value(json_object_get(ev, "id"));
    assert_non_null(id);
    if (strcmp(id, "invoice:42:issued") == 0) {
        assert_string_equal(json_string_value(json_object_get(ev, "subject")), "invoice/42");
        assert_int_equal(
            json_integer_value(json_object_get(json_object_get(ev, "data"), "invoice_id")), 42);
    }
    return id;
}

static void test_sdk_parses_what_the_relay_publishes(void **state)
{
    struct testdb *t = *state;
    char check[512], modules[512];
    js_file(check, sizeof(check), "check_cloudevents.mjs");
    js_file(modules, sizeof(modules), "node_modules/cloudevents/package.json");
    FILE *f = fopen(modules, "r");
    if (f == NULL)
        fail_msg("%s is missing: run scripts/deps.sh (npm ci in tests/js)", modules);
    fclose(f);

    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key) VALUES "
                       "('customer', '7f9c2e1a-55b0-4c1e-9d7a-0b6f3c2d1e00', 'CustomerSignedUp', "
                       "'{\"email\":\"zo\xc3\xab@example.com\",\"big\":9007199254740993}', "
                       "'customer:7f9c:signup'), "
                       "('invoice', 42, 'InvoiceIssued', '{\"invoice_id\":42,\"lines\":[1,2]}', "
                       "'invoice:42:issued')");

    char *out = NULL;
    const char *relay[] = {
        testproc_txo_bin(), "relay",       "--drain",           "--publisher",      "log",
        "--envelope",       "cloudevents", "--envelope-source", "urn:example:shop", NULL};
    int rc = run(relay, &out);
    if (rc != 0)
        fail_msg("txo relay exited %d:\n%s", rc, out);

    /* txo's own decoder reads the CloudEvents back. */
    char path[128];
    snprintf(path, sizeof(path), "/tmp/txo_ce_%ld.out", (long)getpid());
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(out, f);
    fclose(f);
    size_t decoded = 0;
    size_t len = 0;
    const char *cursor = out;
    for (const char *line; (line = next_object_line(&cursor, &len)) != NULL;) {
        struct txo_event ev;
        struct txo_error err;
        txo_error_init(&err);
        if (txo_envelope_decode(line, len, &ev, &err) != 0)
            fail_msg("txo_envelope_decode: %s: %.*s", err.msg, (int)len, line);
        assert_true(strstr(ev.idempotency_key, ":") != NULL);
        assert_non_null(ev.aggregate_id);
        assert_true(ev.attempt == 1 && ev.id > 0);
        char *db_time = created_at_of(t, ev.idempotency_key);
        assert_string_equal(ev.created_at, db_time);
        txo_free(db_time);
        txo_event_release(&ev);
        decoded++;
    }
    free(out);
    assert_int_equal(decoded, 2);

    const char *node[] = {"/usr/bin/env", "node", check, path, NULL};
    rc = run(node, &out);
    remove(path);
    if (rc != 0)
        fail_msg("the CloudEvents SDK rejected our output (exit %d):\n%s", rc, out);
    print_message("%s", out);
    size_t seen = 0;
    cursor = out;
    for (const char *line; (line = next_object_line(&cursor, &len)) != NULL;) {
        json_t *ev = json_loadb(line, len, 0, NULL);
        if (ev == NULL)
            continue;
        seen++;
        const char *id = check_sdk_event(ev);
        if (strcmp(id, "customer:7f9c:signup") == 0) {
            assert_string_equal(json_string_value(json_object_get(ev, "type")), "CustomerSignedUp");
            assert_string_equal(json_string_value(json_object_get(ev, "subject")),
                                "customer/7f9c2e1a-55b0-4c1e-9d7a-0b6f3c2d1e00");
            assert_string_equal(
                json_string_value(json_object_get(json_object_get(ev, "data"), "email")),
                "zo\xc3\xab@example.com");
        } else {
            assert_string_equal(id, "invoice:42:issued");
        }
        char *db_time = created_at_of(t, id);
        /* The SDK keeps time as a JavaScript Date: milliseconds. */
        char want[32];
        snprintf(want, sizeof(want), "%.23sZ", db_time);
        assert_string_equal(json_string_value(json_object_get(ev, "time")), want);
        txo_free(db_time);
        json_decref(ev);
    }
    free(out);
    assert_int_equal(seen, 2);
}

static void test_binary_mode_over_webhook(void **state)
{
    struct testdb *t = *state;
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key) VALUES "
                       "('customer', 'c 7 \"z\xc3\xab\" 100%', 'CustomerSignedUp', "
                       "'{\"email\":\"zo\xc3\xab@example.com\",\"big\":9007199254740993}', "
                       "'customer:7:signup'), "
                       "('invoice', 42, 'InvoiceIssued', '{\"invoice_id\":42}', "
                       "'invoice:42:issued')");
    char sink_js[512];
    unsigned port = testproc_free_port();
    char port_s[16], url[64];
    snprintf(port_s, sizeof(port_s), "%u", port);
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/events", port);
    const char *sink_argv[] = {"/usr/bin/node",
                               js_file(sink_js, sizeof(sink_js), "ce_http_sink.mjs"), port_s, NULL};
    struct testproc sink;
    testproc_start(&sink, "ce_sink", sink_argv, NULL);
    if (!testproc_wait_port(port, 20000)) {
        testproc_print_log(&sink, "the CloudEvents sink");
        fail_msg("the CloudEvents sink did not listen on %u", port);
    }
    char *out = NULL;
    const char *relay[] = {
        "relay", "--drain",    "--publisher",        "webhook",           "--webhook-url",
        url,     "--envelope", "cloudevents-binary", "--envelope-source", "urn:example:shop",
        NULL};
    int rc = testproc_run_txo("ce_binary", relay, 60000, &out);
    if (rc != 0)
        fail_msg("txo relay exited %d:\n%s", rc, out);
    free(out);
    assert_int_equal(
        testdb_i64(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'", NULL, 0),
        2);
    char *log = testproc_log(&sink);
    testproc_stop_hard(&sink);
    size_t seen = 0;
    size_t len = 0;
    const char *cursor = log;
    for (const char *line; (line = next_object_line(&cursor, &len)) != NULL;) {
        json_t *ev = json_loadb(line, len, 0, NULL);
        if (ev == NULL)
            continue;
        if (json_object_get(ev, "rejected") != NULL)
            fail_msg("the SDK rejected a POST: %s",
                     json_string_value(json_object_get(ev, "rejected")));
        seen++;
        assert_true(json_is_true(json_object_get(ev, "binary")));
        const char *id = check_sdk_event(ev);
        if (strcmp(id, "customer:7:signup") == 0) {
            assert_string_equal(json_string_value(json_object_get(ev, "type")), "CustomerSignedUp");
            /* On the wire as the HTTP binding says: space, '"', '%' and non-ASCII bytes
             * percent-encoded. This SDK hands header values over without decoding them (as the
             * Go and Java SDKs do; cloudevents/spec#1397), so it shows the encoded form; txo's
             * own decoder (tests/unit/test_envelope.c) and conforming SDKs decode it. */
            assert_string_equal(json_string_value(json_object_get(ev, "subject")),
                                "customer/c%207%20%22z%C3%AB%22%20100%25");
            assert_string_equal(json_string_value(json_object_get(ev, "txoaggregateid")),
                                "c%207%20%22z%C3%AB%22%20100%25");
            assert_string_equal(
                json_string_value(json_object_get(json_object_get(ev, "data"), "email")),
                "zo\xc3\xab@example.com");
        } else {
            assert_string_equal(id, "invoice:42:issued");
        }
        assert_string_equal(json_string_value(json_object_get(ev, "txoattempt")), "1");
        json_decref(ev);
    }
    if (seen != 2) {
        testproc_print_log(&sink, "the CloudEvents sink");
        fail_msg("the sink parsed %zu events, want 2", seen);
    }
    free(log);
    testproc_remove_log(&sink);
}

static void test_bad_envelope_is_refused(void **state)
{
    (void)state;
    char *out = NULL;
    const char *relay[] = {testproc_txo_bin(), "relay", "--drain", "--envelope", "avro", NULL};
    assert_int_equal(run(relay, &out), 2);
    assert_non_null(strstr(out, "--envelope must be txo, cloudevents or cloudevents-binary"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sdk_parses_what_the_relay_publishes),
        cmocka_unit_test(test_binary_mode_over_webhook),
        cmocka_unit_test(test_bad_envelope_is_refused),
    };
    return testdb_run_each(tests, TXO_ARRAY_LEN(tests), "ce", TESTDB_NEW_EXPORT_ENV, NULL);
}
