/*
 * The published envelope (txo_envelope_encode): exact text, key order, the payload embedded as
 * compact JSON with its numbers and UTF-8 untouched, and rejection of a payload that is not
 * JSON. And its inverse (txo_envelope_decode): every field back, the payload's exact text,
 * envelopes from other producers (another key order, a string aggregate id), bad input. And
 * txo_event_from_outbox(), the round trip without the envelope: the same event, the same
 * refusals.
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

/* txo_envelope_encode() of sample(payload), which must succeed; its length in *len. Free it with
 * txo_free(). */
static char *encode_sample(const char *payload, size_t *len)
{
    struct txo_outbox_message m = sample(payload);
    struct txo_error err;
    txo_error_init(&err);
    char *env = txo_envelope_encode(&m, len, &err);
    if (env == NULL)
        fail_msg("txo_envelope_encode: %s", err.msg);
    return env;
}

/* txo_envelope_encode() refuses m with TXO_EINVAL. */
static void assert_encode_refused(const struct txo_outbox_message *m)
{
    struct txo_error err;
    txo_error_init(&err);
    assert_null(txo_envelope_encode(m, NULL, &err));
    assert_int_equal(err.code, TXO_EINVAL);
}

static void test_exact_text(void **state)
{
    (void)state;
    /* Whitespace and newlines of all kinds between tokens, none inside strings kept. */
    const char *payload = "{ \"order_id\" : 7,\n  \"customer\": \"Jürgen Müller – «VIP» ☃\",\r\n"
                          "\t\"big\": 9007199254740993, \"price\": 0.1, \"neg\": -1.5e-7,\n"
                          "  \"items\": [ {\"sku\": \"iphone 15\", \"qty\": 1} , true, null ],\n"
                          "  \"esc\": \"a \\\"quoted\\\" \\\\ word\\n\" }\n";
    size_t len = 0;
    char *env = encode_sample(payload, &len);
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
    assert_encode_refused(&m);

    m.payload_len = 5;
    struct txo_error err;
    txo_error_init(&err);
    char *env = txo_envelope_encode(&m, NULL, &err);
    assert_non_null(env);
    assert_string_equal(env, "{\"id\":9223372036854775807,\"type\":\"Order\\\"Odd\\\"\\n\","
                             "\"aggregate_type\":\"order\",\"aggregate_id\":\"c-\\\"3\\\"\","
                             "\"idempotency_key\":\"key:ключ\","
                             "\"created_at\":\"2026-11-30T15:37:00.123456Z\",\"attempt\":10,"
                             "\"payload\":[1,2]}");
    txo_free(env);
}

/* Every string member is written as jansson writes the string (compact, UTF-8 as is): each
 * control byte, quote, backslash, DEL and multi-byte character, checked against jansson. */
static void test_header_strings_as_jansson_writes_them(void **state)
{
    (void)state;
    char s[160];
    size_t n = 0;
    for (int c = 1; c < 0x80; c++)
        s[n++] = (char)c;
    const char *wide = "é–☃😀";
    memcpy(s + n, wide, strlen(wide) + 1);
    const char *values[] = {s, "", "\x1f\"\\/\x7f", "tab\there"};
    for (size_t i = 0; i < TXO_ARRAY_LEN(values); i++) {
        struct txo_outbox_message m = sample("{}");
        m.event_type = values[i];
        m.aggregate_id = values[i];
        struct txo_error err;
        txo_error_init(&err);
        char *env = txo_envelope_encode(&m, NULL, &err);
        assert_non_null(env);
        json_t *str = json_string(values[i]);
        char *want = json_dumps(str, JSON_COMPACT | JSON_ENCODE_ANY);
        assert_non_null(want);
        char type[512], id[512];
        snprintf(type, sizeof(type), "\"type\":%s,", want);
        snprintf(id, sizeof(id), "\"aggregate_id\":%s,", want);
        if (strstr(env, type) == NULL || strstr(env, id) == NULL)
            fail_msg("value #%zu: jansson writes %s, the envelope is %s", i, want, env);
        free(want);
        json_decref(str);
        txo_free(env);
    }
}

static void test_scalar_payload(void **state)
{
    (void)state;
    char *env = encode_sample(" \"just a string\" ", NULL);
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
    assert_encode_refused(&m);
}

/* encode -> decode gives every field back, and the payload as the encoder wrote it. */
static void test_round_trip(void **state)
{
    (void)state;
    const char *payload = "{ \"order_id\": 7, \"big\": 9007199254740993, \"price\": 0.1,"
                          " \"name\": \"J\\u00fcrgen \\u2603\", \"items\": [1, 2.50, null] }";
    size_t len = 0;
    char *env = encode_sample(payload, &len);
    struct txo_event ev;
    struct txo_error err;
    txo_error_init(&err);
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

/* A payload holding a "payload" member of its own still comes back as its exact text (2.50
 * stays 2.50: re-serialising it would write 2.5). */
static void test_round_trip_payload_named_payload(void **state)
{
    (void)state;
    const char *payload = "{\"x\": 2.50, \"payload\": {\"a\": 1}}";
    const enum txo_envelope_format formats[] = {TXO_ENVELOPE_TXO, TXO_ENVELOPE_CLOUDEVENTS};
    const char *nested[] = {"payload", "data"};
    for (size_t f = 0; f < TXO_ARRAY_LEN(formats); f++) {
        char text[64];
        snprintf(text, sizeof(text), "{\"x\": 2.50, \"%s\": {\"a\": 1}}", nested[f]);
        struct txo_outbox_message m = sample(f == 0 ? payload : text);
        struct txo_error err;
        txo_error_init(&err);
        size_t len = 0;
        char *env = txo_envelope_encode_as(&m, formats[f], "/t", &len, &err);
        assert_non_null(env);
        struct txo_event ev;
        assert_int_equal(txo_envelope_decode(env, len, &ev, &err), 0);
        char want[64];
        snprintf(want, sizeof(want), "{\"x\":2.50,\"%s\":{\"a\":1}}", nested[f]);
        assert_string_equal(ev.payload, want);
        txo_event_release(&ev);
        txo_free(env);
    }
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

/* A transport's headers for txo_envelope_decode_message(): the txo_ce_headers themselves. */
static const char *ce_lookup(const struct txo_inbound_message *msg, const char *name)
{
    const struct txo_ce_headers *h = msg->transport;
    for (size_t i = 0; i < h->n; i++)
        if (strcmp(h->names[i], name) == 0)
            return h->values[i];
    return NULL;
}

static void test_cloudevents_binary_mode(void **state)
{
    (void)state;
    struct txo_outbox_message m = sample("{ \"data\": 7, \"big\": 9007199254740993 }");
    m.aggregate_id = "c 7 \"z\xc3\xab\" 100%\r\nX-Evil: 1";
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_envelope_set_default(TXO_ENVELOPE_CLOUDEVENTS_BINARY, "urn:shop", &err),
                     0);
    struct txo_ce_headers h;
    size_t len = 0;
    char *body = txo_envelope_binary(&m, &h, &len, &err);
    assert_non_null(body);
    assert_string_equal(body, "{\"data\":7,\"big\":9007199254740993}"); /* compact, exact */
    assert_int_equal(len, strlen(body));
    const char *want[][2] = {
        {"ce-specversion", "1.0"},
        {"ce-id", "order:7:created"},
        {"ce-source", "urn:shop"},
        {"ce-type", "OrderCreated"},
        {"ce-subject", "order/c%207%20%22z%C3%AB%22%20100%25%0D%0AX-Evil:%201"},
        {"ce-time", "2026-11-30T15:37:00.123456Z"},
        {"ce-txoid", "42"},
        {"ce-txoattempt", "1"},
        {"ce-txoaggregatetype", "order"},
        {"ce-txoaggregateid", "c%207%20%22z%C3%AB%22%20100%25%0D%0AX-Evil:%201"},
    };
    assert_int_equal(h.n, TXO_ARRAY_LEN(want));
    for (size_t i = 0; i < h.n; i++) {
        assert_string_equal(h.names[i], want[i][0]);
        assert_string_equal(h.values[i], want[i][1]);
    }
    /* Read back from headers and body, as a transport delivers them. */
    struct txo_inbound_message in = {
        .data = body, .len = len, .header = ce_lookup, .transport = &h};
    struct txo_event ev;
    assert_int_equal(txo_envelope_decode_message(&in, &ev, &err), 0);
    assert_string_equal(ev.type, "OrderCreated");
    assert_string_equal(ev.idempotency_key, "order:7:created");
    assert_string_equal(ev.aggregate_type, "order");
    assert_string_equal(ev.aggregate_id, m.aggregate_id);
    assert_string_equal(ev.created_at, "2026-11-30T15:37:00.123456Z");
    assert_string_equal(ev.payload, body);
    assert_true(ev.id == 42 && ev.attempt == 1);
    txo_event_release(&ev);
    /* A header that encodes a NUL is refused; a missing ce-type too. */
    txo_free(h.values[1]);
    h.values[1] = txo_strdup("order%007");
    assert_int_equal(txo_envelope_decode_message(&in, &ev, &err), TXO_EINVAL);
    h.names[3] = "ce-other";
    assert_int_equal(txo_envelope_decode_message(&in, &ev, &err), TXO_EINVAL);
    txo_ce_headers_release(&h);
    txo_free(body);
    /* Without a ce-specversion header the body is the structured envelope, as before. */
    in.header = NULL;
    in.data = "{\"type\":\"T\",\"idempotency_key\":\"k\",\"payload\":{}}";
    in.len = strlen(in.data);
    assert_int_equal(txo_envelope_decode_message(&in, &ev, &err), 0);
    assert_string_equal(ev.type, "T");
    txo_event_release(&ev);
    /* A payload that is not JSON fails as in structured mode. */
    m.payload = "{nope";
    m.payload_len = 0;
    assert_null(txo_envelope_binary(&m, &h, &len, &err));
    assert_int_equal(err.code, TXO_EINVAL);
    txo_ce_headers_release(&h);
    enum txo_envelope_format f;
    assert_int_equal(txo_envelope_format_parse("cloudevents-binary", &f), 0);
    assert_int_equal(f, TXO_ENVELOPE_CLOUDEVENTS_BINARY);
    assert_int_equal(txo_envelope_default_format(), TXO_ENVELOPE_CLOUDEVENTS_BINARY);
    assert_int_equal(txo_envelope_set_default(TXO_ENVELOPE_TXO, NULL, &err), 0);
}

/*
 * Encodes m in format, which must hold want, and decodes that text into *ev (release it with
 * txo_event_release()).
 */
static void encode_decode(const struct txo_outbox_message *m, enum txo_envelope_format format,
                          const char *want, struct txo_event *ev)
{
    struct txo_error err;
    txo_error_init(&err);
    char *env = txo_envelope_encode_as(m, format, NULL, NULL, &err);
    assert_non_null(env);
    if (strstr(env, want) == NULL)
        fail_msg("%s: no %s", env, want);
    assert_int_equal(txo_envelope_decode(env, strlen(env), ev, &err), 0);
    txo_free(env);
}

/* encode_decode(): the sequence and prev_sequence of m come back. */
static void assert_sequence_kept(const struct txo_outbox_message *m,
                                 enum txo_envelope_format format, const char *want)
{
    struct txo_event ev;
    encode_decode(m, format, want, &ev);
    assert_true(ev.sequence == m->sequence && ev.prev_sequence == m->prev_sequence);
    txo_event_release(&ev);
}

/*
 * The sequence in every form: the txo envelope's integers, the CloudEvents sequence extension
 * as a 20-digit string (structured and binary), read back by both decoders; no sequence, no
 * keys; a foreign or inconsistent sequence reads as none rather than failing the event.
 */
static void test_sequence(void **state)
{
    (void)state;
    struct txo_outbox_message m = sample("{}");
    m.sequence = 12;
    m.prev_sequence = 9; /* 10 and 11 were skipped */
    assert_sequence_kept(&m, TXO_ENVELOPE_TXO,
                         "\"attempt\":1,\"sequence\":12,\"prev_sequence\":9,\"payload\":{}}");
    assert_sequence_kept(&m, TXO_ENVELOPE_CLOUDEVENTS,
                         "\"txoaggregateid\":\"7\",\"sequence\":\"00000000000000000012\","
                         "\"txoprevsequence\":\"00000000000000000009\",\"data\":{}}");

    struct txo_error err;
    txo_error_init(&err);
    struct txo_event ev;
    struct txo_ce_headers h;
    size_t len = 0;
    char *body = txo_envelope_binary(&m, &h, &len, &err);
    assert_non_null(body);
    struct txo_inbound_message in = {
        .data = body, .len = len, .header = ce_lookup, .transport = &h};
    assert_string_equal(ce_lookup(&in, "ce-sequence"), "00000000000000000012");
    assert_string_equal(ce_lookup(&in, "ce-txoprevsequence"), "00000000000000000009");
    assert_int_equal(txo_envelope_decode_message(&in, &ev, &err), 0);
    assert_true(ev.sequence == 12 && ev.prev_sequence == 9);
    txo_event_release(&ev);
    txo_ce_headers_release(&h);
    txo_free(body);

    /* The first event of an aggregate follows 0, which is written too. */
    m.sequence = 1;
    m.prev_sequence = 0;
    assert_sequence_kept(&m, TXO_ENVELOPE_CLOUDEVENTS,
                         "\"txoprevsequence\":\"00000000000000000000\"");

    /* No sequence: no keys, no headers. */
    m.sequence = 0;
    char *env = txo_envelope_encode_as(&m, TXO_ENVELOPE_TXO, NULL, NULL, &err);
    assert_null(strstr(env, "sequence"));
    txo_free(env);
    body = txo_envelope_binary(&m, &h, &len, &err);
    in.data = body;
    in.len = len;
    assert_null(ce_lookup(&in, "ce-sequence"));
    txo_ce_headers_release(&h);
    txo_free(body);

    /* Another producer's sequence, a prev_sequence that is not before it, or half of the pair:
     * delivered, without a sequence. */
    const char *odd[] = {
        "{\"specversion\":\"1.0\",\"id\":\"k\",\"type\":\"T\",\"sequence\":\"abc\","
        "\"txoprevsequence\":\"1\",\"data\":{}}",
        "{\"specversion\":\"1.0\",\"id\":\"k\",\"type\":\"T\",\"sequence\":\"5\","
        "\"txoprevsequence\":\"5\",\"data\":{}}",
        "{\"specversion\":\"1.0\",\"id\":\"k\",\"type\":\"T\",\"sequence\":\"5\",\"data\":{}}",
        "{\"type\":\"T\",\"idempotency_key\":\"k\",\"sequence\":-3,\"prev_sequence\":0,"
        "\"payload\":{}}",
        "{\"type\":\"T\",\"idempotency_key\":\"k\",\"sequence\":\"99999999999999999999999\","
        "\"prev_sequence\":1,\"payload\":{}}",
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(odd); i++) {
        assert_int_equal(txo_envelope_decode(odd[i], strlen(odd[i]), &ev, &err), 0);
        assert_true(ev.sequence == 0 && ev.prev_sequence == 0);
        txo_event_release(&ev);
    }
}

/* Headers for txo_envelope_decode_message(): the pairs of a NULL-terminated array. */
static const char *pair_lookup(const struct txo_inbound_message *msg, const char *name)
{
    const char *const *pairs = msg->transport;
    for (size_t i = 0; pairs[i] != NULL; i += 2)
        if (strcmp(pairs[i], name) == 0)
            return pairs[i + 1];
    return NULL;
}

/*
 * The trace context: traceparent and tracestate just before the payload in both structured
 * formats (CloudEvents: the distributed tracing extension), left out without one, and read
 * back by the decoder; in binary mode from the transport's headers; an invalid one reads as
 * none, never as a failure.
 */
static void test_trace_context(void **state)
{
    (void)state;
    static const char tp[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    struct txo_outbox_message m = sample("{\"a\":1}");
    m.traceparent = tp;
    m.tracestate = "rojo=00f067aa0ba902b7";
    struct txo_event ev;
    encode_decode(&m, TXO_ENVELOPE_TXO,
                  ",\"attempt\":1,\"traceparent\":\"00-4bf92f3577b34da6a3ce929d0e0e4736-"
                  "00f067aa0ba902b7-01\",\"tracestate\":\"rojo=00f067aa0ba902b7\","
                  "\"payload\":{\"a\":1}}",
                  &ev);
    assert_true(ev.has_trace);
    char back[TXO_TRACEPARENT_LEN + 1];
    txo_trace_format(&ev.trace, back);
    assert_string_equal(back, tp);
    assert_string_equal(ev.trace.state, "rojo=00f067aa0ba902b7");
    txo_event_release(&ev);

    encode_decode(&m, TXO_ENVELOPE_CLOUDEVENTS,
                  "\"traceparent\":\"00-4bf92f3577b34da6a3ce929d0e0e4736-", &ev);
    assert_true(ev.has_trace);
    txo_event_release(&ev);

    /* No trace context: no members, and none decoded. */
    m.traceparent = NULL;
    struct txo_error err;
    txo_error_init(&err);
    char *env = txo_envelope_encode_as(&m, TXO_ENVELOPE_TXO, NULL, NULL, &err);
    assert_null(strstr(env, "trace"));
    assert_int_equal(txo_envelope_decode(env, strlen(env), &ev, &err), 0);
    assert_false(ev.has_trace);
    txo_event_release(&ev);
    txo_free(env);

    /* A foreign envelope with an invalid traceparent: decoded, without a trace. */
    const char *bad = "{\"type\":\"T\",\"idempotency_key\":\"k\",\"traceparent\":\"00-xyz\","
                      "\"payload\":{}}";
    assert_int_equal(txo_envelope_decode(bad, strlen(bad), &ev, &err), 0);
    assert_false(ev.has_trace);
    txo_event_release(&ev);

    /* Binary mode, or an envelope without one: the transport's traceparent header. */
    const char *headers[] = {"traceparent", tp, "tracestate", "congo=t61rcWkgMzE", NULL};
    const char *plain = "{\"type\":\"T\",\"idempotency_key\":\"k\",\"payload\":{}}";
    struct txo_inbound_message in = {
        .data = plain, .len = strlen(plain), .header = pair_lookup, .transport = headers};
    assert_int_equal(txo_envelope_decode_message(&in, &ev, &err), 0);
    assert_true(ev.has_trace);
    assert_string_equal(ev.trace.state, "congo=t61rcWkgMzE");
    txo_event_release(&ev);
    const char *ce_headers[] = {"ce-specversion", "1.0", "ce-type", "T", "ce-id", "k",
                                "traceparent",    tp,    NULL};
    in.data = "{}";
    in.len = 2;
    in.transport = ce_headers;
    assert_int_equal(txo_envelope_decode_message(&in, &ev, &err), 0);
    assert_true(ev.has_trace);
    assert_int_equal(ev.trace.trace_id[0], 0x4b);
    txo_event_release(&ev);
}

/* a and b are the same event, field for field. */
static void assert_same_event(const struct txo_event *a, const struct txo_event *b)
{
    assert_int_equal(a->id, b->id);
    assert_string_equal(a->type, b->type);
    assert_string_equal(a->aggregate_type, b->aggregate_type);
    assert_string_equal(a->aggregate_id, b->aggregate_id);
    assert_string_equal(a->idempotency_key, b->idempotency_key);
    assert_string_equal(a->created_at, b->created_at);
    assert_int_equal(a->attempt, b->attempt);
    assert_int_equal(a->payload_len, b->payload_len);
    assert_memory_equal(a->payload, b->payload, a->payload_len + 1);
    assert_int_equal(a->sequence, b->sequence);
    assert_int_equal(a->prev_sequence, b->prev_sequence);
    assert_int_equal(a->has_trace, b->has_trace);
    assert_memory_equal(a->trace.trace_id, b->trace.trace_id, sizeof(a->trace.trace_id));
    assert_memory_equal(a->trace.span_id, b->trace.span_id, sizeof(a->trace.span_id));
    assert_int_equal(a->trace.flags, b->trace.flags);
    assert_string_equal(a->trace.state, b->trace.state);
}

/*
 * txo_event_from_outbox(m) is txo_envelope_decode(txo_envelope_encode(m)) without the envelope,
 * in both formats: the same event when the round trip succeeds, TXO_EINVAL where either half
 * refuses (a member missing or not UTF-8, a payload that is not a JSON object, or one the
 * decoder does not read: an integer beyond int64, a "\u0000").
 */
static void test_event_from_outbox_is_the_round_trip(void **state)
{
    (void)state;
    const char *tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    struct txo_outbox_message ok[6];
    ok[0] = sample("{ \"order_id\": 7, \"big\": 9007199254740993, \"price\": 0.1,\n"
                   " \"name\": \"J\\u00fcrgen \\u2603 \\\" }\", \"items\": [1, 2.50, null] }");
    ok[1] = sample("{}");
    ok[1].sequence = 3;
    ok[1].prev_sequence = 2;
    ok[1].traceparent = tp;
    ok[1].tracestate = "vendor=1";
    ok[2] = sample("{\"a\":{\"b\":[{\"c\":\"\xc3\xa9\"}]}}");
    ok[2].sequence = 2;
    ok[2].prev_sequence = 2; /* not before it: no sequence, as the decoder reads it */
    ok[2].traceparent = "not a traceparent";
    ok[3] = sample("{\"a\":1}   ");
    ok[3].attempt = 0;
    ok[3].aggregate_id = "c-123";
    ok[3].tracestate = "ignored without a traceparent";
    ok[4] = sample("{\"a\":1}trailing bytes past payload_len");
    ok[4].payload_len = 7;
    ok[5] = sample("{\"k\":\"tab\\tand \\u0001\"}");
    ok[5].sequence = (uint64_t)INT64_MAX + 1; /* beyond the txo envelope's integers: none */
    ok[5].prev_sequence = 1;
    const enum txo_envelope_format formats[] = {TXO_ENVELOPE_TXO, TXO_ENVELOPE_CLOUDEVENTS};
    struct txo_error err;
    txo_error_init(&err);
    for (size_t i = 0; i < TXO_ARRAY_LEN(ok); i++) {
        struct txo_event direct;
        if (txo_event_from_outbox(&ok[i], &direct, &err) != 0)
            fail_msg("message #%zu: %s", i, err.msg);
        for (size_t f = 0; f < TXO_ARRAY_LEN(formats); f++) {
            if (f == 1 && ok[i].sequence > INT64_MAX)
                continue; /* the CloudEvents sequence is a decimal string: it carries it */
            size_t len = 0;
            char *env = txo_envelope_encode_as(&ok[i], formats[f], "/t", &len, &err);
            if (env == NULL)
                fail_msg("message #%zu: %s", i, err.msg);
            struct txo_event back;
            if (txo_envelope_decode(env, len, &back, &err) != 0)
                fail_msg("message #%zu format %zu: %s", i, f, err.msg);
            assert_same_event(&direct, &back);
            txo_event_release(&back);
            txo_free(env);
        }
        txo_event_release(&direct);
    }
    /* The payload as the encoder writes it: the whitespace between tokens gone, nothing else. */
    struct txo_event ev;
    assert_int_equal(txo_event_from_outbox(&ok[0], &ev, &err), 0);
    assert_string_equal(ev.payload,
                        "{\"order_id\":7,\"big\":9007199254740993,\"price\":0.1,"
                        "\"name\":\"J\\u00fcrgen \\u2603 \\\" }\",\"items\":[1,2.50,null]}");
    txo_event_release(&ev);

    struct txo_outbox_message bad[9];
    bad[0] = sample("[1,2]");
    bad[1] = sample("\"text\"");
    bad[2] = sample("{\"a\":");
    bad[3] = sample("{\"a\":123456789012345678901234567890}");
    bad[4] = sample("{\"a\":\"\\u0000\"}");
    bad[5] = sample("{\"a\":1}\0{}");
    bad[5].payload_len = 10;
    bad[6] = sample("{}");
    bad[6].aggregate_id = "bad \xc3";
    bad[7] = sample("{}");
    bad[7].created_at = NULL;
    bad[8] = sample("{}");
    bad[8].traceparent = tp;
    bad[8].tracestate = "\xff";
    for (size_t i = 0; i < TXO_ARRAY_LEN(bad); i++) {
        struct txo_event untouched = {.id = 99};
        txo_error_init(&err);
        assert_int_equal(txo_event_from_outbox(&bad[i], &untouched, &err), TXO_EINVAL);
        assert_int_equal(untouched.id, 99);
        assert_non_null(strstr(err.msg, "event 42"));
        /* ... and so does the round trip. */
        size_t len = 0;
        char *env = txo_envelope_encode(&bad[i], &len, &err);
        struct txo_event back;
        if (env != NULL && txo_envelope_decode(env, len, &back, &err) == 0)
            fail_msg("message #%zu: the round trip accepts what txo_event_from_outbox refused", i);
        txo_free(env);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cloudevents_binary_mode),
        cmocka_unit_test(test_cloudevents_exact_text_and_round_trip),
        cmocka_unit_test(test_exact_text),
        cmocka_unit_test(test_header_fields_escaped_and_ints),
        cmocka_unit_test(test_header_strings_as_jansson_writes_them),
        cmocka_unit_test(test_scalar_payload),
        cmocka_unit_test(test_invalid_payload),
        cmocka_unit_test(test_invalid_header_string),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_round_trip_payload_named_payload),
        cmocka_unit_test(test_decode_foreign_envelope),
        cmocka_unit_test(test_decode_refuses_bad_envelopes),
        cmocka_unit_test(test_sequence),
        cmocka_unit_test(test_trace_context),
        cmocka_unit_test(test_event_from_outbox_is_the_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
