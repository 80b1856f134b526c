/*
 * Test support: what a consumer's handler was given, copied message by message, for the tests
 * of the consumers (test_kafka_consumer.c, test_nats.c, test_redis.c) to read after a poll.
 * Not thread-safe: a handler that several threads call locks around testconsume_add().
 */
#ifndef TXO_TESTCONSUME_H
#define TXO_TESTCONSUME_H

#include <stddef.h>
#include <stdint.h>

#include "txo/consumer.h"

/* One message, copied. */
struct testconsume_msg {
    char msg_id[64];   /* "(null)" when it had none */
    char subject[128]; /* likewise */
    uint64_t delivery;
    char *data; /* its len bytes and a NUL, owned */
};

/* The messages, in the order they came. A zeroed struct is an empty list. */
struct testconsume_list {
    struct testconsume_msg *got;
    size_t n, cap;
};

/* Copies msg to the end of l and returns the copy; the test fails when out of memory. */
struct testconsume_msg *testconsume_add(struct testconsume_list *l,
                                        const struct txo_inbound_message *msg);

/* How many of l's messages have the id msg_id. */
size_t testconsume_count_id(const struct testconsume_list *l, const char *msg_id);

/* Frees l's messages; l is an empty list again. */
void testconsume_release(struct testconsume_list *l);

#endif
