/*
 * Test support: a batch of outbox messages for a publisher's publish_batch, with the arrays the
 * call fills (a result and an error per message), for the broker tests that drive a publisher
 * directly. Message i has id first_id + i, idempotency key "<prefix>:<id>", aggregate
 * "order" / "<id>", type OrderCreated and payload {"n":<id>}; a test changes what it needs in
 * msgs[] after testbatch_init (payloads through testbatch_set_payload, which keeps the copy).
 *
 * The batch owns every array and string; testbatch_free releases them. Helpers fail the current
 * cmocka test on error. Not thread-safe.
 */
#ifndef TXO_TESTBATCH_H
#define TXO_TESTBATCH_H

#include <stddef.h>
#include <stdint.h>

#include "txo/txo.h"

struct testbatch {
    struct txo_outbox_message *msgs;
    char (*keys)[48];         /* msgs[i].idempotency_key */
    char (*aggs)[24];         /* msgs[i].aggregate_id */
    char **payloads;          /* msgs[i].payload, NUL-terminated; each malloc'd */
    int *results;             /* what publish_batch said of msgs[i] */
    struct txo_error *errors; /* and why */
    size_t n;
};

void testbatch_init(struct testbatch *b, size_t n, int64_t first_id, const char *prefix);

/* Makes msgs[i]'s payload a copy of the len bytes of json. */
void testbatch_set_payload(struct testbatch *b, size_t i, const char *json, size_t len);

/* Frees what b holds (not b). */
void testbatch_free(struct testbatch *b);

/* Runs pub's publish_batch on b with every result and error reset first; returns its rc. */
int testbatch_publish(struct txo_publisher *pub, struct testbatch *b);

/* Every message of b was acknowledged, or the test fails naming the first that was not. */
void testbatch_assert_published(const struct testbatch *b);

#endif
