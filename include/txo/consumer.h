/*
 * The consuming side of every transport: what a worker's message handler receives and the
 * contract that decides whether a message is acknowledged, retried or dropped.
 *
 * Delivery is at least once end to end (the relay publishes again after a crash, a broker
 * redelivers an unacknowledged message), so a handler must be idempotent: it records
 * msg->msg_id (the event's idempotency key) in the transactional inbox in the same database
 * transaction as its effect, and skips a message whose id is already there.
 *
 * The handler contract, the same for every transport:
 *   return 0                 the message's effect is COMMITTED; the transport acknowledges it
 *                            (NATS: an ack confirmed by the server) and it is never seen again
 *                            unless that acknowledgement is lost;
 *   return a transient code  (txo_err_is_transient(): TXO_EUNAVAILABLE, TXO_EDEADLOCK, ...)
 *                            nothing was committed, try again later: the transport redelivers
 *                            the message after a delay (NATS: NAK with nak_delay_ms; local
 *                            dispatch: the outbox row goes back to PENDING with backoff);
 *   return a permanent code  (TXO_EINVAL, TXO_EBUSINESS, ...) the message can never succeed:
 *                            NATS terminates it (TERM, logged at error level with the reason,
 *                            never redelivered); local dispatch records the failure on the
 *                            outbox row, where the relay's attempt limit dead-letters it.
 * The reason goes into *err (txo_error_set), which is logged and, for local dispatch, stored
 * in outbox_events.last_error.
 *
 * Every consumer constructor takes a struct txo_handler (below): a per-message or a batch
 * handler, never a second constructor.
 *
 * Transports: NATS JetStream (txo/nats.h: txo_consumer_nats_new), Redis Streams (txo/redis.h:
 * txo_consumer_redis_new: XACK, transient failures claimed again after an idle time,
 * permanent ones copied to a dead-letter stream), Kafka (txo/kafka.h: txo_consumer_kafka_new:
 * offsets committed past settled records, transient failures sought back to), RabbitMQ
 * (txo/rabbitmq.h: txo_consumer_rabbitmq_new: basic.ack, transient failures back through the
 * retry queue, permanent ones to the dead-letter queue) and the in-process local dispatch
 * publisher below, which calls the handler from the relay itself.
 * Other transports plug in through struct txo_consumer_ops and txo_consumer_new().
 *
 * Thread-safety: a consumer is polled by one thread at a time; distinct consumers (even on the
 * same durable) may be polled from different threads. A handler runs on the polling thread
 * (for local dispatch: the relay's thread).
 */
#ifndef TXO_CONSUMER_H
#define TXO_CONSUMER_H

#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/err.h"
#include "txo/publisher.h"
#include "txo/trace.h"

/*
 * One received message, borrowed by the handler for the duration of the call (copy what it
 * keeps).
 */
struct txo_inbound_message {
    const char *subject; /* where it came from: the NATS subject, Kafka topic, RabbitMQ routing
                          * key or Redis stream; NULL for local dispatch */
    const char *data;    /* the published envelope JSON (txo/publisher.h), NUL-terminated */
    size_t len;          /* bytes of data, without the NUL */
    const char *msg_id;  /* the event's idempotency key as the transport carries it (NATS
                          * Nats-Msg-Id, Kafka and Redis txo header/field, AMQP message-id);
                          * NULL when the message carries none (published by something else) */
    uint64_t delivery;   /* 1 on the first delivery, 2 on the first redelivery, ...
                          * (local dispatch: the publish attempt of the outbox row) */
    /* The transport's header (NATS, Kafka, AMQP) or field (Redis) of that name, or NULL;
     * header NULL: the transport has none. transport is the transport's own message, for
     * header(). */
    const char *(*header)(const struct txo_inbound_message *msg, const char *name);
    const void *transport;
};

/*
 * Processes one message. Returns 0 once its effect is committed, or a negative TXO_E* code
 * with the reason in err (never NULL); see the contract at the top of this file. Must not
 * call back into the consumer that runs it.
 */
typedef int (*txo_message_handler_fn)(void *arg, const struct txo_inbound_message *msg,
                                      struct txo_error *err);

/*
 * Processes the n messages of one delivery together (a relay's batch with local dispatch):
 * results[i] gets msgs[i]'s verdict as a txo_message_handler_fn would return it, with the
 * reason in errors[i] (pre-initialised). Returns 0, or a negative code when it could not run
 * at all (then every message counts as failed with it). txo_worker_handle_many() is one.
 */
typedef int (*txo_batch_handler_fn)(void *arg, const struct txo_inbound_message *msgs, size_t n,
                                    int *results, struct txo_error *errors);

/*
 * A batch handler that takes events rather than messages: evs[i] is what decoding message i's
 * envelope would give (txo_event_from_outbox()), with delivery = evs[i].attempt and msg_id =
 * evs[i].idempotency_key. Verdicts and return value as txo_batch_handler_fn.
 * txo_worker_handle_events() is one.
 */
struct txo_event;
typedef int (*txo_event_batch_fn)(void *arg, const struct txo_event *evs, size_t n, int *results,
                                  struct txo_error *errors);

/*
 * What a consumer (or local dispatch) runs on the messages it receives; exactly one of one and
 * batch is set. Every transport hands its messages to the handler through this one description,
 * so a per-message and a batch handler get the same acknowledgement, retry and dead letters:
 *   one     called once per message, in order;
 *   batch   called once per delivery (a fetch, a read, a relay batch) with all its messages, so
 *           that it can apply them in one database transaction (txo_worker_handle_many()).
 *   events  optional, used by local dispatch only: the relay's batch as events, so that no
 *           envelope is written and read back in the same process; it must give the verdicts
 *           one / batch would give for the same events (txo_worker_handle_events() is
 *           txo_worker_handle_many() after decoding). Transports that carry bytes ignore it.
 * Kafka delivers one record at a time (txo/kafka.h): a batch handler gets batches of one.
 * Either way each message is settled by its own verdict once the handler has returned for the
 * delivery. The struct is copied at creation; arg is borrowed and must outlive the consumer.
 * A constructor given neither or both of one and batch fails with TXO_EINVAL.
 */
struct txo_handler {
    txo_message_handler_fn one;
    txo_batch_handler_fn batch;
    txo_event_batch_fn events;
    void *arg;
};

/* The transport behind a consumer handle. */
struct txo_consumer_ops {
    const char *name;
    /*
     * Receives up to max_msgs messages within timeout_ms and runs the handler on each,
     * acknowledging per the contract above. Sets *handled to the number of handler calls.
     * Returns 0 (also when nothing arrived) or a negative TXO_E* code.
     */
    int (*poll)(void *self, size_t max_msgs, int64_t timeout_ms, size_t *handled,
                struct txo_error *err);
    /* Frees self. */
    void (*destroy)(void *self);
};

/* A consumer: a handler bound to a transport. Opaque. */
struct txo_consumer;

/*
 * Wraps custom ops (the pointer is kept: ops must outlive the consumer; self is owned by the
 * consumer and freed by ops->destroy). Errors: TXO_EINVAL (no ops or no poll), TXO_ENOMEM;
 * on error self is not freed.
 */
TXO_API TXO_MUST_CHECK int txo_consumer_new(const struct txo_consumer_ops *ops, void *self,
                                            struct txo_consumer **out, struct txo_error *err);

/*
 * Fetches up to max_msgs (>= 1) messages, waiting at most timeout_ms (>= 1) for the first
 * ones, and runs the handler on each in order. *handled (may be NULL) receives the number of
 * messages handed to the handler, whatever it returned. A wait that ends with no message is
 * not an error (returns 0 with *handled = 0).
 * Errors: TXO_EINVAL (bad arguments), TXO_EUNAVAILABLE (broker unreachable: returned quickly,
 * retry later with backoff; polling works again once the broker is back), TXO_ECONFIG (the
 * broker refused the consumer's configuration), and transport errors. A failed
 * acknowledgement after a handler succeeded is reported as TXO_EUNAVAILABLE after the rest of
 * the batch: the message comes back later and the inbox drops it.
 */
TXO_API TXO_MUST_CHECK int txo_consumer_poll(struct txo_consumer *c, size_t max_msgs,
                                             int64_t timeout_ms, size_t *handled,
                                             struct txo_error *err);

/* The transport's name ("nats"). Never NULL. */
TXO_API const char *txo_consumer_name(const struct txo_consumer *c);

/*
 * Frees the consumer. A NATS durable consumer stays on the server (its unacknowledged
 * messages are redelivered to the next consumer on that durable). NULL is a no-op.
 */
TXO_API void txo_consumer_free(struct txo_consumer *c);

/*
 * A published event, decoded from its envelope (txo/publisher.h): the inverse of
 * txo_envelope_encode(). Every string is NUL-terminated and owned by the struct; release it
 * with txo_event_release().
 */
struct txo_event {
    int64_t id;
    char *type;
    char *aggregate_type;
    char *aggregate_id; /* as text: the envelope may carry it as a number or a string */
    char *idempotency_key;
    char *created_at; /* RFC 3339 UTC; NULL when the envelope has none */
    int attempt;      /* 0 when the envelope has none */
    char *payload;    /* the payload JSON, compact; the exact text our encoder wrote */
    size_t payload_len;
    uint64_t sequence;      /* position in its aggregate (txo/publisher.h); 0: none */
    uint64_t prev_sequence; /* the aggregate's sequence published just before it; 0: first */
    /* The trace context it was appended in (the envelope's traceparent and tracestate, or the
     * transport's headers of those names); has_trace false: none or not valid. */
    bool has_trace;
    struct txo_trace_ctx trace;
};

/*
 * Decodes an envelope. Required members: "type" (a string), "idempotency_key" (a string) and
 * "payload" (an object); the others are filled when present. *out is written only on success.
 * Errors: TXO_EINVAL (not JSON, not an object, a member missing or of the wrong type: the
 * message names it), TXO_ENOMEM.
 */
TXO_API TXO_MUST_CHECK int txo_envelope_decode(const char *data, size_t len, struct txo_event *out,
                                               struct txo_error *err);

/*
 * Decodes what a transport delivered: a CloudEvent in binary mode when the message has a
 * ce-specversion header (the attributes from the ce-* headers, percent-decoded; the body the
 * payload, a JSON object), else the envelope in msg->data (txo_envelope_decode()). Required:
 * ce-type and ce-id. Errors as txo_envelope_decode().
 */
TXO_API TXO_MUST_CHECK int txo_envelope_decode_message(const struct txo_inbound_message *msg,
                                                       struct txo_event *out,
                                                       struct txo_error *err);

/*
 * The event an outbox row's envelope decodes to, without writing or reading the envelope:
 * *out is what txo_envelope_decode() returns for txo_envelope_encode(msg), field for field, and
 * it fails where that round trip fails (a string member missing or not UTF-8, a payload that
 * is not a JSON object the decoder reads). Local dispatch hands events this way. *out is
 * written only on success; release it with txo_event_release(). Errors: TXO_EINVAL (err names
 * the member), TXO_ENOMEM.
 */
TXO_API TXO_MUST_CHECK int txo_event_from_outbox(const struct txo_outbox_message *msg,
                                                 struct txo_event *out, struct txo_error *err);

/* Frees the strings of ev and zeroes it. NULL is a no-op. */
TXO_API void txo_event_release(struct txo_event *ev);

/*
 * The local dispatch publisher: the embedded default when there is no broker. The relay's
 * publish_batch hands the batch to the handler synchronously, in the relay's thread, in batch
 * order. With h->events, as events (txo_event_from_outbox(): no envelope is written); else
 * each event encoded as the published envelope (h->one: once per message; h->batch: one call
 * per relay batch), with subject NULL, msg_id = the idempotency key and delivery = the event's
 * publish attempt (1, 2, ...).
 * A message's handler result is its publish result: 0 marks the row PUBLISHED; a failure
 * leaves it PENDING with attempts+1, last_error = the handler's reason and a backoff, so the
 * relay delivers it again later (at least once, end to end); after the relay's max_attempts it
 * becomes FAILED with a dead letter, as for any publisher. A failure does not stop the batch:
 * later messages are still delivered, so per-aggregate order is not kept across a failure.
 * An event whose payload cannot be encoded (or decoded: not a JSON object) fails with
 * TXO_EINVAL without reaching h->events, as it would from the handler's decoding with one /
 * batch.
 *
 * *h is copied; h->arg is borrowed and must outlive the publisher. Errors: TXO_EINVAL (h NULL,
 * or not exactly one of h->one and h->batch), TXO_ENOMEM. Free with txo_publisher_free().
 * Thread-safety: as any publisher (one relay at a time); the handler runs on that relay's
 * thread.
 */
TXO_API TXO_MUST_CHECK int txo_publisher_local_new(const struct txo_handler *h,
                                                   struct txo_publisher **out,
                                                   struct txo_error *err);

#endif
