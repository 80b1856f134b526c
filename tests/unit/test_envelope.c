/*
 * The published envelope (txo_envelope_encode): exact text, key order, the payload embedded as
 * compact JSON with its numbers and UTF-8 untouched, and rejection of a payload that is not
 * JSON.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "txo/txo.h"

static struct txo_outbox_message sample(const char *payload)
{
    struct txo_outbox_message m = {
        .id = 42,
        .aggregate_type = "order",
        .aggregate_id = 7,
        .event_type = "OrderCreated",
        .payload = payload,
        .payload_len = 0,
        .idempotency_key = "order:7:created",
        .created_at = "2026-11-30T15:37:00.123456Z",
        .attempt = 1,
    };
    return m;
}

static void test_exact_text(void **state)
{
    (void)state;
    /* Whitespace and newlines of all kinds between tokens, none inside strings kept. */
    const char *payload = "{ \"order_id\" : 7,\n  \"customer\": \"Jürgen Müller – «VIP» ☃\",\r\n"
                          "\t\"big\": 9007199254740993, \"price\": 0.1, \"neg\": -1.5e-7,\n"
                          "  \"items\": [ {\"sku\": \"iphone 15\", \"qty\": 1} , true, null ],\n"
                          "  \"esc\": \"a \\\"quoted\\\" \\\\ word\\n\" }\n";
    struct txo_outbox_message m = sample(payload);
    struct txo_error err;
    txo_error_init(&err);
    size_t len = 0;
    char *env = txo_envelope_encode(&m, &len, &err);
    assert_non_null(env);
    const char *expected =
        "{\"id\":42,\"type\":\"OrderCreated\",\"aggregate_type\":\"order\",\"aggregate_id\":7,"
        "\"idempotency_key\":\"order:7:created\",\"created_at\":\"2026-11-30T15:37:00.123456Z\","
        "\"attempt\":1,\"payload\":{\"order_id\":7,\"customer\":\"Jürgen Müller – «VIP» ☃\","
        "\"big\":9007199254740993,\"price\":0.1,\"neg\":-1.5e-7,"
        "\"items\":[{\"sku\":\"iphone 15\",\"qty\":1},true,null],"
        "\"esc\":\"a \\\"quoted\\\" \\\\ word\\n\"}}";
    assert_string_equal(env, expected);
    assert_int_equal(len, strlen(expected));
    assert_null(strchr(env, '\n'));
    txo_free(env);
}

static void test_header_fields_escaped_and_ints(void **state)
{
    (void)state;
    struct txo_outbox_message m = sample("[1,2]");
    m.id = INT64_MAX;
    m.aggregate_id = -3;
    m.event_type = "Order\"Odd\"\n";
    m.idempotency_key = "key:ключ";
    m.attempt = 10;
    m.payload_len = 3; /* only "[1," is the payload: not JSON */
    struct txo_error err;
    txo_error_init(&err);
    assert_null(txo_envelope_encode(&m, NULL, &err));
    assert_int_equal(err.code, TXO_EINVAL);

    m.payload_len = 5;
    char *env = txo_envelope_encode(&m, NULL, &err);
    assert_non_null(env);
    assert_string_equal(env, "{\"id\":9223372036854775807,\"type\":\"Order\\\"Odd\\\"\\n\","
                             "\"aggregate_type\":\"order\",\"aggregate_id\":-3,"
                             "\"idempotency_key\":\"key:ключ\","
                             "\"created_at\":\"2026-11-30T15:37:00.123456Z\",\"attempt\":10,"
                             "\"payload\":[1,2]}");
    txo_free(env);
}

static void test_scalar_payload(void **state)
{
    (void)state;
    struct txo_outbox_message m = sample(" \"just a string\" ");
    char *env = txo_envelope_encode(&m, NULL, NULL);
    assert_non_null(env);
    const char *tail = ",\"payload\":\"just a string\"}";
    assert_string_equal(env + strlen(env) - strlen(tail), tail);
    txo_free(env);
}

static void test_invalid_payload(void **state)
{
    (void)state;
    const char *bad[] = {
        "", "{", "{\"a\":}", "not json", "{\"a\":1} trailing", "{'a':1}", "{\"a\":\"\xff\"}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct txo_outbox_message m = sample(bad[i]);
        struct txo_error err;
        txo_error_init(&err);
        size_t len = 99;
        char *env = txo_envelope_encode(&m, &len, &err);
        if (env != NULL)
            fail_msg("payload #%zu \"%s\" was accepted: %s", i, bad[i], env);
        assert_int_equal(err.code, TXO_EINVAL);
        assert_non_null(strstr(err.msg, "event 42"));
    }
}

static void test_invalid_header_string(void **state)
{
    (void)state;
    struct txo_outbox_message m = sample("{}");
    m.event_type = "bad \xc3";
    struct txo_error err;
    txo_error_init(&err);
    assert_null(txo_envelope_encode(&m, NULL, &err));
    assert_int_equal(err.code, TXO_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_text),
        cmocka_unit_test(test_header_fields_escaped_and_ints),
        cmocka_unit_test(test_scalar_payload),
        cmocka_unit_test(test_invalid_payload),
        cmocka_unit_test(test_invalid_header_string),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
