/*
 * Test support: a Kafka cluster for one test binary, and an independent reader of what reached
 * it.
 *
 * Debian ships no Kafka server, so the cluster is librdkafka's mock cluster
 * (rdkafka_mock.h): testkafka_start() runs one in the test process, 3 brokers on 127.0.0.1
 * with ephemeral ports, topics created with replication factor 3. It speaks the Kafka
 * protocol over TCP, so any client can use it (txo's publisher and consumer, `txo relay`
 * processes started by the test, kcat) for as long as the test process lives. The mock also
 * injects faults: request errors, brokers down, leader changes (testkafka_mock() gives the
 * handle for the rd_kafka_mock_* calls).
 *
 * testkafka_read() reads a topic with kcat (Debian package kcat), not with our code:
 *   kcat -b <bootstraps> -C -t <topic> -o beginning -e -q -f '%p\t%o\t%k\t%h\t%s\n'
 * The binary is $TXO_KCAT, else kcat on PATH; the test FAILS (is not skipped) without it.
 *
 * Every helper fails the current cmocka test on error.
 */
#ifndef TXO_TESTKAFKA_H
#define TXO_TESTKAFKA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "testbatch.h"
#include "txo/kafka.h"
#include "txo/publisher.h"

struct testkafka {
    char bootstraps[256]; /* "127.0.0.1:port,127.0.0.1:port,127.0.0.1:port" */
    void *rk;             /* the rd_kafka_t the mock cluster belongs to */
    void *mock;           /* rd_kafka_mock_cluster_t */
};

/* Starts a mock cluster of 3 brokers. */
void testkafka_start(struct testkafka *k);

/* Destroys the cluster (every connection to it breaks). Safe on a zeroed struct. */
void testkafka_stop(struct testkafka *k);

/* The rd_kafka_mock_cluster_t, for fault injection (include <librdkafka/rdkafka_mock.h>). */
void *testkafka_mock(const struct testkafka *k);

/* Creates topic with partitions partitions and replication factor 3. */
void testkafka_create_topic(const struct testkafka *k, const char *topic, int partitions);

/* One record as kcat printed it. Strings are malloc'd. */
struct testkafka_record {
    int32_t partition;
    int64_t offset;
    char *key;
    char *headers; /* "name=value,name=value" (kcat's %h) */
    char *value;
};

/* Every record of topic, in kcat's output order (per partition: offset order). Returns the
 * count; free with testkafka_records_free(). */
size_t testkafka_read(const struct testkafka *k, const char *topic, struct testkafka_record **out);
void testkafka_records_free(struct testkafka_record *r, size_t n);

/* The value of header name of r (malloc'd), or NULL when it has none. */
char *testkafka_header(const struct testkafka_record *r, const char *name);

/* Writes one record to topic with kcat -P (key, value, and headers "n=v" NULL-terminated). */
void testkafka_produce(const struct testkafka *k, const char *topic, const char *key,
                       const char *value, const char *const *headers);

/* Every broker of the cluster down (refusing connections) or up again. */
void testkafka_set_brokers(const struct testkafka *k, bool up);

/* A fresh name "<what><n>" (n counts up in this process), for a test's topics and groups. */
void testkafka_fresh(char *out, size_t size, const char *what);

/* txo_kafka_opts_init() aimed at k with topic template (borrowed), delivery timeout 5 s. */
void testkafka_opts(const struct testkafka *k, struct txo_kafka_opts *o, const char *template);

/* txo_publisher_kafka_new(o, no metrics), or the test fails. */
struct txo_publisher *testkafka_publisher(const struct txo_kafka_opts *o);

/*
 * n outbox messages for a publisher's publish_batch (testbatch.h), shaped for Kafka: message i
 * is OrderCreated of aggregate "order" / "<i % n_aggs>", idempotency key "<prefix>:<i>", payload
 * {"n":i,"big":2^53+1}. Publish, check and free it with testbatch_publish,
 * testbatch_assert_published and testbatch_free.
 */
void testkafka_batch_init(struct testbatch *b, size_t n, size_t n_aggs, const char *prefix);

/* i of an idempotency key "<prefix>:<i>", or -1. */
long testkafka_key_index(const char *key);

/*
 * One Kafka cluster for a whole test program, as cmocka group fixtures: testkafka_group_setup
 * starts testkafka_shared and testkafka_group_teardown stops it; the tests use testkafka_shared.
 */
extern struct testkafka testkafka_shared;
int testkafka_group_setup(void **state);
int testkafka_group_teardown(void **state);

#endif
