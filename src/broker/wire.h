/*
 * What an event looks like on the wire, made in one place for every transport's publisher
 * (NATS, Kafka, RabbitMQ, Redis Streams, webhooks): the body in the process's envelope format
 * (include/txo/publisher.h) and the headers that travel with it in every transport:
 *   headers  the CloudEvents attributes of binary mode (ce-id, ce-type, ...), which each
 *            transport spells as its binding says (Kafka ce_id, AMQP cloudEvents:id, ...);
 *   plain    the headers every transport sends under the same name: the W3C trace context
 *            (traceparent, tracestate), whatever the envelope format.
 * A publisher adds the headers that belong to its transport alone (NATS Nats-Msg-Id, Kafka's
 * txo-* headers, the AMQP properties, the Redis fields) and sends the body as it is. A header
 * every transport must carry is therefore added here, once.
 *
 * Thread-safety: none needed; a wire is owned by the thread that encoded it.
 */
#ifndef TXO_BROKER_WIRE_H
#define TXO_BROKER_WIRE_H

#include <stdbool.h>
#include <stddef.h>

#include "txo/publisher.h"

struct txo__wire {
    char *body; /* owned; the envelope, or in CloudEvents binary mode the payload itself */
    size_t len;
    bool binary; /* CloudEvents binary mode: the body is the payload (application/json) */
    struct txo_ce_headers headers; /* names static, values owned */
    struct {
        size_t n;
        const char *names[2];  /* static */
        const char *values[2]; /* the message's */
    } plain;
};

/*
 * Encodes m for the publisher named `who` ("nats publisher", for the error text). An event
 * without an idempotency key is refused: every transport carries it for de-duplication.
 * Returns 0, or a negative code with err set (TXO_EINVAL: no key, a payload that is not JSON,
 * a missing attribute; TXO_ENOMEM); on failure *w holds nothing to release.
 */
int txo__wire_encode(const char *who, const struct txo_outbox_message *m, struct txo__wire *w,
                     struct txo_error *err);

/*
 * Names an event's destination from a transport's template, the way txo_kafka_topic(),
 * txo_nats_subject() and txo_redis_stream_name() do: into out[out_size], 0 or a negative code
 * with err set.
 */
typedef int (*txo__wire_dest_fn)(const char *template, const char *aggregate_type,
                                 const char *event_type, char *out, size_t out_size,
                                 struct txo_error *err);

/*
 * Where m goes and what it carries, for the publisher who: names its destination with dest_fn
 * from template into dest[dest_size] (a missing aggregate or event type names as ""), then
 * encodes it as txo__wire_encode(). Returns 0 or the first failure's code with err set; on
 * failure *w holds nothing to release.
 */
int txo__wire_encode_to(const char *who, txo__wire_dest_fn dest_fn, const char *template,
                        const struct txo_outbox_message *m, char *dest, size_t dest_size,
                        struct txo__wire *w, struct txo_error *err);

/* Frees what txo__wire_encode() allocated; a zeroed or released wire is a no-op. */
void txo__wire_release(struct txo__wire *w);

#endif
