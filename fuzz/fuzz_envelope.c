/*
 * libFuzzer harness of the published envelope. The input is used twice:
 *   - as an envelope a consumer received: txo_envelope_decode() either refuses it or returns
 *     NUL-terminated strings whose lengths are right;
 *   - as an event payload: whenever txo_envelope_encode() accepts it, the envelope is one
 *     line of JSON whose "payload" equals the payload (the encoder copies the text without its
 *     whitespace, which must never change the meaning), and txo_envelope_decode() gives the
 *     event back.
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
