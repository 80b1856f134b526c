/*
 * The published envelope (txo_envelope_encode): exact text, key order, the payload embedded as
 * compact JSON with its numbers and UTF-8 untouched, and rejection of a payload that is not
 * JSON. And its inverse (txo_envelope_decode): every field back, the payload's exact text,
 * envelopes from other producers (another key order, a string aggregate id), bad input.
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
        .aggregate_id = "7",
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
        "{\"id\":42,\"type\":\"OrderCreated\",\"aggregate_type\":\"order\",\"aggregate_id\":\"7\","
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
    m.aggregate_id = "c-\"3\"";
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
                             "\"aggregate_type\":\"order\",\"aggregate_id\":\"c-\\\"3\\\"\","
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

/* encode -> decode gives every field back, and the payload as the encoder wrote it. */
static void test_round_trip(void **state)
{
    (void)state;
    const char *payload = "{ \"order_id\": 7, \"big\": 9007199254740993, \"price\": 0.1,"
                          " \"name\": \"J\\u00fcrgen \\u2603\", \"items\": [1, 2.50, null] }";
    struct txo_outbox_message m = sample(payload);
    struct txo_error err;
    txo_error_init(&err);
    size_t len = 0;
    char *env = txo_envelope_encode(&m, &len, &err);
    assert_non_null(env);
    struct txo_event ev;
    assert_int_equal(txo_envelope_decode(env, len, &ev, &err), 0);
    assert_int_equal(ev.id, 42);
    assert_string_equal(ev.type, "OrderCreated");
    assert_string_equal(ev.aggregate_type, "order");
    assert_string_equal(ev.aggregate_id, "7");
    assert_string_equal(ev.idempotency_key, "order:7:created");
    assert_string_equal(ev.created_at, "2026-11-30T15:37:00.123456Z");
    assert_int_equal(ev.attempt, 1);
    /* The exact text: 2.50 stays 2.50, the escapes stay escapes. */
    assert_string_equal(ev.payload, "{\"order_id\":7,\"big\":9007199254740993,\"price\":0.1,"
                                    "\"name\":\"J\\u00fcrgen \\u2603\",\"items\":[1,2.50,null]}");
    assert_int_equal(ev.payload_len, strlen(ev.payload));
    txo_event_release(&ev);
    txo_free(env);
}

/* An envelope written by another producer: other key order, a string aggregate id, no id. */
static void test_decode_foreign_envelope(void **state)
{
    (void)state;
    const char *env = "{\"payload\":{\"a\":1},\"type\":\"UserSignedUp\","
                      "\"aggregate_id\":\"c-123\",\"idempotency_key\":\"user:c-123:signup\"}";
    struct txo_event ev;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_envelope_decode(env, strlen(env), &ev, &err), 0);
    assert_string_equal(ev.type, "UserSignedUp");
    assert_string_equal(ev.aggregate_id, "c-123");
    assert_null(ev.aggregate_type);
    assert_null(ev.created_at);
    assert_int_equal(ev.id, 0);
    assert_string_equal(ev.payload, "{\"a\":1}");
    txo_event_release(&ev);
    txo_event_release(NULL);
}

static void test_decode_refuses_bad_envelopes(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "not json",
        "[1,2]",
        "{\"type\":\"T\",\"payload\":{}}",                              /* no key */
        "{\"idempotency_key\":\"k\",\"payload\":{}}",                   /* no type */
        "{\"type\":\"T\",\"idempotency_key\":\"k\"}",                   /* no payload */
        "{\"type\":\"T\",\"idempotency_key\":\"k\",\"payload\":\"x\"}", /* not an object */
        "{\"type\":7,\"idempotency_key\":\"k\",\"payload\":{}}",
        "{\"type\":\"T\",\"idempotency_key\":\"k\\u0000b\",\"payload\":{}}", /* NUL */
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(bad); i++) {
        struct txo_event ev;
        memset(&ev, 0x5a, sizeof(ev));
        struct txo_error err;
        txo_error_init(&err);
        assert_int_equal(txo_envelope_decode(bad[i], strlen(bad[i]), &ev, &err), TXO_EINVAL);
        assert_int_equal(err.code, TXO_EINVAL);
        assert_true(err.msg[0] != '\0');
    }
}

static void test_cloudevents_exact_text_and_round_trip(void **state)
{
    (void)state;
    struct txo_outbox_message m = sample("{ \"order_id\": 7, \"big\": 9007199254740993 }");
    struct txo_error err;
    txo_error_init(&err);
    char *env = txo_envelope_encode_as(&m, TXO_ENVELOPE_CLOUDEVENTS, "urn:shop", NULL, &err);
    assert_non_null(env);
    assert_string_equal(env, "{\"specversion\":\"1.0\",\"id\":\"order:7:created\","
                             "\"source\":\"urn:shop\",\"type\":\"OrderCreated\","
                             "\"subject\":\"order/7\",\"time\":\"2026-11-30T15:37:00.123456Z\","
                             "\"datacontenttype\":\"application/json\",\"txoid\":42,"
                             "\"txoattempt\":1,\"txoaggregatetype\":\"order\","
                             "\"txoaggregateid\":\"7\","
                             "\"data\":{\"order_id\":7,\"big\":9007199254740993}}");
    struct txo_event ev;
    assert_int_equal(txo_envelope_decode(env, strlen(env), &ev, &err), 0);
    assert_string_equal(ev.type, "OrderCreated");
    assert_string_equal(ev.idempotency_key, "order:7:created");
    assert_string_equal(ev.aggregate_type, "order");
    assert_string_equal(ev.aggregate_id, "7");
    assert_string_equal(ev.created_at, "2026-11-30T15:37:00.123456Z");
    assert_string_equal(ev.payload, "{\"order_id\":7,\"big\":9007199254740993}");
    assert_true(ev.id == 42 && ev.attempt == 1);
    txo_event_release(&ev);
    txo_free(env);

    enum txo_envelope_format f;
    assert_int_equal(txo_envelope_format_parse("cloudevents", &f), 0);
    assert_int_equal(f, TXO_ENVELOPE_CLOUDEVENTS);
    assert_int_equal(txo_envelope_format_parse("CloudEvents", &f), TXO_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cloudevents_exact_text_and_round_trip),
        cmocka_unit_test(test_exact_text),
        cmocka_unit_test(test_header_fields_escaped_and_ints),
        cmocka_unit_test(test_scalar_payload),
        cmocka_unit_test(test_invalid_payload),
        cmocka_unit_test(test_invalid_header_string),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_decode_foreign_envelope),
        cmocka_unit_test(test_decode_refuses_bad_envelopes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
