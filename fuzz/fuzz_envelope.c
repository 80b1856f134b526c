/*
 * libFuzzer harness of the published envelope. The input is used twice:
 *   - as an envelope a consumer received: txo_envelope_decode() either refuses it or returns
 *     NUL-terminated strings whose lengths are right;
 *   - as an event payload: whenever txo_envelope_encode() accepts it, the envelope is one
 *     line of JSON whose "payload" equals the payload (the encoder copies the text without its
 *     whitespace, which must never change the meaning), and txo_envelope_decode() gives the
 *     event back; txo_event_from_outbox() (local dispatch: no envelope) accepts the payload
 *     exactly when that round trip does, and gives the same event;
 *   - as a CloudEvents attribute in binary mode: as the aggregate id it goes out in ce-*
 *     headers percent-encoded to printable ASCII (nothing a transport's header could break on)
 *     and txo_envelope_decode_message() gives it back unchanged; as a raw ce-id header a
 *     consumer received, the decoder refuses it or returns it decoded.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "txo/txo.h"

static void check(bool ok)
{
    if (!ok)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* txo_inbound_message.header over a txo_ce_headers (msg->transport). */
static const char *lookup(const struct txo_inbound_message *msg, const char *name)
{
    const struct txo_ce_headers *h = msg->transport;
    for (size_t i = 0; i < h->n; i++)
        if (strcmp(h->names[i], name) == 0)
            return h->values[i];
    return NULL;
}

static void binary_mode(const char *text, size_t size)
{
    if (strlen(text) != size)
        return; /* a C string cannot carry a NUL: the outbox's columns never hand one over */
    struct txo_outbox_message msg = {
        .id = 42,
        .aggregate_type = "order",
        .aggregate_id = text,
        .event_type = "OrderCreated",
        .payload = "{\"a\": 1}",
        .idempotency_key = "order:7:created",
        .created_at = "2026-11-30T15:37:00.123456Z",
        .attempt = 1,
    };
    struct txo_error err;
    txo_error_init(&err);
    struct txo_ce_headers h;
    size_t len = 0;
    char *body = txo_envelope_binary(&msg, &h, &len, &err);
    if (body == NULL) {
        check(err.code == TXO_EINVAL); /* not UTF-8 */
    } else {
        check(strcmp(body, "{\"a\":1}") == 0 && len == strlen(body));
        for (size_t i = 0; i < h.n; i++)
            for (const char *p = h.values[i]; *p != '\0'; p++)
                check(*p > 0x20 && *p < 0x7f && *p != '"');
        struct txo_inbound_message in = {.data = body, .len = len, .header = lookup,
                                         .transport = &h};
        struct txo_event ev;
        check(txo_envelope_decode_message(&in, &ev, &err) == 0);
        check(strcmp(ev.aggregate_id, text) == 0);
        txo_event_release(&ev);
    }
    txo_ce_headers_release(&h);
    txo_free(body);

    /* The input as the raw ce-id header of a received message. */
    struct txo_ce_headers raw = {.n = 3,
                                 .names = {"ce-specversion", "ce-type", "ce-id"},
                                 .values = {(char *)"1.0", (char *)"T", (char *)text}};
    struct txo_inbound_message in = {.data = "{}", .len = 2, .header = lookup, .transport = &raw};
    struct txo_event ev;
    if (txo_envelope_decode_message(&in, &ev, &err) == 0) {
        check(ev.idempotency_key != NULL && strlen(ev.idempotency_key) <= size);
        txo_event_release(&ev);
    } else {
        check(err.code == TXO_EINVAL);
    }
}

static bool same_str(const char *a, const char *b)
{
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}

/* txo_event_from_outbox(msg) against the round trip through env (NULL: the encoder refused). */
static void from_outbox(const struct txo_outbox_message *msg, const char *env, size_t len,
                        size_t payload_len)
{
    struct txo_error err;
    txo_error_init(&err);
    struct txo_event direct, back;
    int d = txo_event_from_outbox(msg, &direct, &err);
    check(d == 0 || err.code == TXO_EINVAL);
    int b = env != NULL ? txo_envelope_decode(env, len, &back, &err) : TXO_EINVAL;
    /* jansson caps nesting at 2,048 levels and the envelope puts the payload one level
     * deeper: a payload at the cap (4,096 bytes at least) parses alone and not in an
     * envelope. Shorter ones must get the same verdict both ways. */
    if (payload_len < 4096)
        check((d == 0) == (b == 0));
    if (d == 0 && b == 0) {
        check(direct.id == back.id && same_str(direct.type, back.type) &&
              same_str(direct.aggregate_type, back.aggregate_type) &&
              same_str(direct.aggregate_id, back.aggregate_id) &&
              same_str(direct.idempotency_key, back.idempotency_key) &&
              same_str(direct.created_at, back.created_at) && direct.attempt == back.attempt &&
              direct.payload_len == back.payload_len &&
              memcmp(direct.payload, back.payload, direct.payload_len + 1) == 0 &&
              direct.sequence == back.sequence && direct.has_trace == back.has_trace);
    }
    if (d == 0)
        txo_event_release(&direct);
    if (b == 0)
        txo_event_release(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct txo_error derr;
    txo_error_init(&derr);
    struct txo_event ev;
    if (txo_envelope_decode((const char *)data, size, &ev, &derr) == 0) {
        check(ev.type != NULL && ev.idempotency_key != NULL && ev.payload != NULL);
        check(strlen(ev.payload) == ev.payload_len);
        txo_event_release(&ev);
    } else {
        check(derr.code == TXO_EINVAL);
    }

    /* payload_len 0 means NUL-terminated text (publisher.h): give it a terminated copy. */
    char *text = malloc(size + 1);
    check(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    binary_mode(text, size);
    struct txo_outbox_message msg = {
        .id = 42,
        .aggregate_type = "order",
        .aggregate_id = "7",
        .event_type = "OrderCreated",
        .payload = text,
        .payload_len = size,
        .idempotency_key = "order:7:created",
        .created_at = "2026-11-30T15:37:00.123456Z",
        .attempt = 1,
    };
    struct txo_error err;
    txo_error_init(&err);
    size_t len = 0;
    char *env = txo_envelope_encode(&msg, &len, &err);
    from_outbox(&msg, env, len, size != 0 ? size : strlen(text));
    if (env == NULL) {
        check(err.code == TXO_EINVAL);
        free(text);
        return 0;
    }
    check(memchr(env, '\n', len) == NULL && strlen(env) == len);
    json_error_t jerr;
    size_t flags = JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL;
    json_t *doc = json_loadb(env, len, flags, &jerr);
    check(doc != NULL);
    check(json_real_value(json_object_get(doc, "id")) == 42.0);
    check(strcmp(json_string_value(json_object_get(doc, "type")), "OrderCreated") == 0);
    size_t plen = size != 0 ? size : strlen(text);
    json_t *payload = json_loadb(text, plen, flags, &jerr);
    if (payload != NULL)
        check(json_equal(payload, json_object_get(doc, "payload")));
    /*
     * Known gaps, left to the decoder's owners: txo_envelope_decode() reads with jansson's
     * default flags, so it refuses two kinds of payload the encoder passes on: an integer
     * beyond int64 (kept with its exact digits) and a "\u0000" in a string (the outbox allows
     * it). The round trip is checked for the other payloads.
     */
    json_t *exact = json_loadb(text, plen, JSON_DECODE_ANY, &jerr);
    if (json_is_object(payload) && exact != NULL) {
        check(txo_envelope_decode(env, len, &ev, &derr) == 0);
        check(ev.id == 42 && strcmp(ev.type, "OrderCreated") == 0 &&
              strcmp(ev.idempotency_key, "order:7:created") == 0 && ev.attempt == 1);
        json_t *back = json_loadb(ev.payload, ev.payload_len, flags, &jerr);
        check(json_equal(back, payload));
        json_decref(back);
        txo_event_release(&ev);
    }
    json_decref(exact);
    json_decref(payload);
    json_decref(doc);
    txo_free(env);
    free(text);
    return 0;
}
