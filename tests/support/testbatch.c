/*
 * Test support: a batch of outbox messages for publish_batch (see testbatch.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testbatch.h"

void testbatch_init(struct testbatch *b, size_t n, int64_t first_id, const char *prefix)
{
    memset(b, 0, sizeof(*b));
    b->n = n;
    b->msgs = calloc(n, sizeof(*b->msgs));
    b->keys = calloc(n, sizeof(*b->keys));
    b->aggs = calloc(n, sizeof(*b->aggs));
    b->payloads = calloc(n, sizeof(*b->payloads));
    b->results = calloc(n, sizeof(*b->results));
    b->errors = calloc(n, sizeof(*b->errors));
    assert_true(b->msgs && b->keys && b->aggs && b->payloads && b->results && b->errors);
    for (size_t i = 0; i < n; i++) {
        int64_t id = first_id + (int64_t)i;
        char payload[32];
        int len = snprintf(payload, sizeof(payload), "{\"n\":%lld}", (long long)id);
        snprintf(b->keys[i], sizeof(b->keys[i]), "%s:%lld", prefix, (long long)id);
        snprintf(b->aggs[i], sizeof(b->aggs[i]), "%lld", (long long)id);
        struct txo_outbox_message *m = &b->msgs[i];
        m->id = id;
        m->aggregate_type = "order";
        m->aggregate_id = b->aggs[i];
        m->event_type = "OrderCreated";
        m->idempotency_key = b->keys[i];
        m->created_at = "2026-11-30T15:37:00.123456Z";
        m->attempt = 1;
        testbatch_set_payload(b, i, payload, (size_t)len);
    }
}

void testbatch_set_payload(struct testbatch *b, size_t i, const char *json, size_t len)
{
    char *copy = malloc(len + 1);
    assert_non_null(copy);
    memcpy(copy, json, len);
    copy[len] = '\0';
    free(b->payloads[i]);
    b->payloads[i] = copy;
    b->msgs[i].payload = copy;
    b->msgs[i].payload_len = len;
}

void testbatch_free(struct testbatch *b)
{
    for (size_t i = 0; i < b->n; i++)
        free(b->payloads[i]);
    free(b->msgs);
    free(b->keys);
    free(b->aggs);
    free(b->payloads);
    free(b->results);
    free(b->errors);
    memset(b, 0, sizeof(*b));
}

int testbatch_publish(struct txo_publisher *pub, struct testbatch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        b->results[i] = 99;
        txo_error_init(&b->errors[i]);
    }
    return pub->ops->publish_batch(pub->self, b->msgs, b->n, b->results, b->errors);
}

void testbatch_assert_published(const struct testbatch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        if (b->results[i] != 0)
            fail_msg("message %zu (%s): result %d: %s", i, b->keys[i], b->results[i],
                     b->errors[i].msg);
    }
}
