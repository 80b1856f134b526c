/*
 * The transports of the conformance suite (test_transport.c), one row each: how to start the
 * transport's private server, make its publisher and consumer for a namespace, and read back
 * what reached the server with a client that is not ours. Adding a transport is one row in
 * transports.c. A transport left out of the build has no row.
 *
 * A namespace (ns: letters and digits) names everything a contract creates on the server
 * (stream, topic, queue, group), so that the contracts share one server. A read-back is a JSON
 * array with one object per message, in the server's order: {"key": the idempotency key as
 * the transport carries it, or null; "body": what the server stored (the envelope, or in
 * CloudEvents binary mode the payload); "headers": {"ce-specversion", "ce-id", "ce-type",
 * "ce-source", "traceparent", "tracestate"} when present, in HTTP spelling (gRPC: its event's
 * traceparent and tracestate fields when not empty)}. Every function fails the current test on
 * error.
 */
#ifndef TXO_TEST_TRANSPORTS_H
#define TXO_TEST_TRANSPORTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "testproc.h"
#include "txo/consumer.h"
#include "txo/features.h"
#if TXO_WITH_NATS
#include "testnats.h"
#include "txo/nats.h"
#endif
#if TXO_WITH_KAFKA
#include "testkafka.h"
#include "txo/kafka.h"
#endif
#if TXO_WITH_REDIS
#include "testredis.h"
#include "txo/redis.h"
#endif
#if TXO_WITH_RABBITMQ
#include "testrabbit.h"
#include "txo/rabbitmq.h"
#endif
#if TXO_WITH_GRPC
#include "testgrpc.h"
#include "txo/grpc.h"
#endif

/* The servers of every transport; a row uses its own. */
struct env {
#if TXO_WITH_NATS
    struct testnats nats;
#endif
#if TXO_WITH_KAFKA
    struct testkafka kafka;
#endif
#if TXO_WITH_REDIS
    struct testredis redis;
#endif
#if TXO_WITH_RABBITMQ
    struct testrabbit rabbit;
#endif
#if TXO_WITH_GRPC
    struct testgrpc grpc;
#endif
    struct testproc web; /* http_recorder.py */
    unsigned web_port;
    char web_file[300];
};

enum contract {
    C_PUBLISH = 1 << 0,
    C_CLOUDEVENTS = 1 << 1,
    C_CONSUME = 1 << 2,
    C_RESTART = 1 << 3,
    C_TRACE = 1 << 4,
    C_FORGET = 1 << 5,
};

struct row {
    const char *name;
    unsigned contracts;
    void (*start)(struct env *e);
    void (*cleanup)(struct env *e);
    void (*kill)(struct env *e);    /* the server dies (SIGKILL, or every broker down) */
    void (*restart)(struct env *e); /* back on the same port and store */
    /* Before anything is published in namespace ns (topics, observer queues, records). */
    void (*prepare)(struct env *e, const char *ns);
    struct txo_publisher *(*publisher)(struct env *e, const char *ns);
    /* NULL: the receiving side is not ours to poll (the server is the consumer). */
    struct txo_consumer *(*consumer)(struct env *e, const char *ns, const struct txo_handler *h);
    /* Every message the server holds for ns, in the server's order, normalised (see top). */
    json_t *(*read_back)(struct env *e, const char *ns);
    /* Dead letters the server keeps for ns; NULL when the transport keeps none. */
    long (*dead_letters)(struct env *e, const char *ns);
    /* For a failure's message: what the server holds for ns' consumer; NULL: nothing to say. */
    void (*describe)(struct env *e, const char *ns);
    /* Deletes what the server keeps for ns' consumer (its queue, group or durable), as an
     * operator or a crash of the server's side would (C_FORGET). */
    void (*forget)(struct env *e, const char *ns);
    /* Releases the SDK's process-wide state at exit; NULL: nothing to do. */
    void (*shutdown)(void);
    /* The server may hand out one delivery of a message twice (same delivery number); the
     * consume contract then counts distinct deliveries. */
    bool repeats_deliveries;
};

/* Every transport this build has. */
extern const struct row transport_rows[];
extern const size_t transport_n_rows;

#endif
