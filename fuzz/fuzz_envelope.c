/*
 * libFuzzer harness of the published envelope (txo_envelope_encode), decoded again the way a
 * consumer does: the input is an event payload. Whenever the payload is accepted, the
 * envelope must be one line of JSON whose "payload" equals the payload (same values; the
 * encoder copies the text without its whitespace, and that must never change the meaning).
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
    /* payload_len 0 means NUL-terminated text (publisher.h): give it a terminated copy. */
    char *text = malloc(size + 1);
    check(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    struct txo_outbox_message msg = {
        .id = 42,
        .aggregate_type = "order",
        .aggregate_id = 7,
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
    json_decref(payload);
    json_decref(doc);
    txo_free(env);
    free(text);
    return 0;
}
