/*
 * RabbitMQ (AMQP 0-9-1) transport: a publisher for the relay and a queue consumer for workers.
 *
 * Published messages (the contract a consumer in any language can rely on):
 *   exchange     opts.exchange ("txo.events"), type topic, durable; declared by both sides
 *                (opts.declare) with exactly these settings
 *   routing key  "<aggregate_type>.<event_type>" ("order.OrderCreated"); '.', '*', '#',
 *                whitespace and control characters inside either part become '_', an empty
 *                part becomes "_" (txo_rabbitmq_routing_key())
 *   properties   delivery_mode 2 (persistent), message_id = the event's idempotency key,
 *                type = the event type, content_type "application/json", timestamp = the
 *                publish time (seconds), app_id "txo"
 *   headers      txo-aggregate-type, txo-aggregate-id (strings), txo-event-id (the outbox
 *                row id, int64); in CloudEvents binary mode also ce_specversion, ce_id,
 *                ce_source, ce_type, ce_subject, ce_time, ce_txoid, ce_txoattempt,
 *                ce_txoaggregatetype, ce_txoaggregateid (the CloudEvents Kafka/AMQP style of
 *                naming: '_' after "ce", values as txo_envelope_binary() encodes them)
 *   body         the published envelope JSON (txo/publisher.h), or in CloudEvents binary
 *                mode the payload itself
 * Every message is published with mandatory set (opts.mandatory): a message that no queue is
 * bound to take comes back (basic.return) and fails permanently (TXO_ECONFIG, "no queue bound
 * for its routing key"): the relay marks it FAILED and dead-letters it at once instead of
 * letting the broker drop it silently. Bind the consumers' queues before the relay publishes,
 * and give events that nobody consumes yet a queue of their own (or turn mandatory off and
 * accept that RabbitMQ drops them).
 *
 * The consumer's topology (declared by the consumer, all durable, names from opts.queue):
 *   <queue>        bound to the exchange with opts.binding_key; x-dead-letter-exchange
 *                  "<queue>.dlx": a permanent handler error is NACKed with requeue=false and
 *                  lands in <queue>.dlq, with RabbitMQ's x-death header saying why
 *   <queue>.dlx    fanout exchange; <queue>.dlq the queue bound to it
 *   <queue>.retry  the delay of a transient error: the message is republished there (through
 *                  the default exchange, confirmed) with per-message TTL opts.retry_delay_ms
 *                  and header x-txo-delivery = its next delivery number, then acknowledged; at
 *                  expiry RabbitMQ dead-letters it (x-dead-letter-exchange "",
 *                  x-dead-letter-routing-key <queue>) straight back into <queue> only, so the
 *                  other queues bound to the exchange never see the retry
 *
 * Connections: each publisher and each consumer owns one connection (the consumer a second
 * one for republishing retries), opened lazily and again after a failure, at most once per
 * batch or poll: while the server is down a batch fails every message with TXO_EUNAVAILABLE
 * and a poll returns TXO_EUNAVAILABLE, each after at most connect_timeout_ms (at once when
 * the port refuses). No call blocks forever: connecting, the AMQP handshake and every RPC are
 * bounded by connect_timeout_ms, confirms by confirm_timeout_ms, and the socket gets
 * TCP_USER_TIMEOUT so unacknowledged writes to a hung server fail. Heartbeats are off
 * (rabbitmq-c answers them only inside its calls); a dead idle connection shows up on the
 * next write or read and is replaced.
 *
 * Thread-safety: a publisher is used by one relay (one thread) at a time, a consumer is polled
 * by one thread at a time. rabbitmq-c has no threads of its own.
 */
#ifndef TXO_RABBITMQ_H
#define TXO_RABBITMQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/consumer.h"
#include "txo/err.h"
#include "txo/metrics.h"
#include "txo/publisher.h"

/* Every setting of both sides. Strings are borrowed for the creating call (copied). */
struct txo_rabbitmq_opts {
    /* Connection (both sides). */
    const char *url;            /* "amqp://guest:guest@127.0.0.1:5672/" (user:password@host:
                                 * port/vhost, vhost percent-encoded; an empty vhost, as in
                                 * this default, is the default vhost "/"); a secret */
    int64_t connect_timeout_ms; /* TCP connect, AMQP handshake and every RPC; default 2000 */
    bool connect_required;      /* default false: creation succeeds while the server is down;
                                 * true: it connects at once and fails with TXO_EUNAVAILABLE */
    bool declare;               /* default true: declare the exchange (and, for the consumer,
                                 * its queues); false: they must exist */

    /* Exchange (both sides). */
    const char *exchange; /* "txo.events", a durable topic exchange */

    /* Publisher. */
    int64_t confirm_timeout_ms; /* publisher confirms awaited up to this per batch, 5000 */
    bool mandatory;             /* default true: an unroutable message fails permanently;
                                 * false: RabbitMQ drops it and confirms (it is "delivered"
                                 * to nobody) */

    /* Consumer. */
    const char *queue;       /* "txo-worker" (also names .dlx, .dlq and .retry) */
    const char *binding_key; /* "#" (everything); the worker uses "order.OrderCreated" */
    int prefetch;            /* unacknowledged deliveries in flight (basic.qos), 1..65535,
                              * default 100 */
    int64_t retry_delay_ms;  /* redelivery delay after a transient handler error, 1000 */
};

/* Fills o with the defaults above (static strings). Never fails. */
TXO_API void txo_rabbitmq_opts_init(struct txo_rabbitmq_opts *o);

/*
 * Writes the routing key of events (aggregate_type, event_type) into out
 * ("order" + "OrderCreated" -> "order.OrderCreated"), sanitised as described at the top of
 * this file. Returns 0, or TXO_EINVAL (NULL argument, out too small or the key longer than
 * AMQP's 255 bytes; out is then an empty string when out_size > 0).
 */
TXO_API TXO_MUST_CHECK int txo_rabbitmq_routing_key(const char *aggregate_type,
                                                    const char *event_type, char *out,
                                                    size_t out_size, struct txo_error *err);

/*
 * Creates the publisher (one connection, one channel in confirm mode).
 *
 * publish_batch publishes the whole batch (persistent, mandatory), then reads the broker's
 * basic.ack / basic.nack (single or multiple) and basic.return frames until every message is
 * settled or confirm_timeout_ms passed. results[i] = 0 only for a message the broker
 * confirmed (it is on disk in every queue it was routed to). Otherwise, in errors[i]:
 *   TXO_EUNAVAILABLE  not connected and the connection cannot be opened (every message, at
 *                     once), or the connection broke before the message was written;
 *   TXO_ETIMEOUT      no confirm within confirm_timeout_ms, or the connection broke after
 *                     the message was written: maybe delivered (a retry may duplicate it);
 *   TXO_EPUBLISH      the broker NACKed it (internal error);
 *   TXO_ECONFIG       returned unroutable (no queue bound for its routing key), or the
 *                     broker refused the exchange declaration (exists with another type);
 *   TXO_EINVAL        the event cannot be encoded (payload not JSON, no idempotency key).
 * After a timeout or any protocol error the connection is closed and reopened by the next
 * batch, so a late confirm can never be taken for one of a later batch.
 *
 * metrics (may be NULL; borrowed, must outlive the publisher) receives
 * txo_rabbitmq_published_total, txo_rabbitmq_publish_failures_total,
 * txo_rabbitmq_in_flight and txo_rabbitmq_confirm_latency_seconds.
 * Errors: TXO_EINVAL (bad opts, the message names the setting), TXO_EUNAVAILABLE (server
 * down and opts.connect_required), TXO_ENOMEM. Free with txo_publisher_free().
 */
TXO_API TXO_MUST_CHECK int txo_publisher_rabbitmq_new(const struct txo_rabbitmq_opts *o,
                                                      struct txo_metrics *metrics,
                                                      struct txo_publisher **out,
                                                      struct txo_error *err);

/*
 * Creates a consumer of opts.queue (topology at the top of this file) that runs the handler h
 * (txo/consumer.h) on its messages: basic.qos prefetch, basic.consume with manual acks.
 *
 * txo_consumer_poll() takes the first delivery within timeout_ms, then every delivery already
 * received without waiting, up to max_msgs and opts.prefetch, and hands them to the handler in
 * delivery order (h->batch: in one call, for txo_worker_handle_many: one database transaction
 * per poll); then it settles each by its result, in delivery order:
 *   0          basic.ack (only now: the effect is committed, so a crash before it is a
 *              redelivery, never a loss);
 *   transient  republished to <queue>.retry with the delay (confirmed), then acked; when the
 *              republish fails the message is NACKed with requeue=true (redelivered at once);
 *   permanent  basic.nack requeue=false: dead-lettered into <queue>.dlq (error log).
 * msg_id is the message_id property; delivery is x-txo-delivery (retries), plus 1 when
 * RabbitMQ marks the message redelivered (a connection was lost before its ack), else 1.
 * subject is the routing key; header() reads the AMQP headers (string values), and a
 * "ce-*" name also finds its "ce_*" spelling, so txo_envelope_decode_message() reads the
 * CloudEvents binary mode of the publisher. An ack or nack is a write RabbitMQ does not
 * confirm: if the connection breaks, the message is redelivered and the inbox drops it.
 *
 * A batch handler that returns non-zero fails every message with that code. A delivery that
 * cannot be copied for the handler (out of memory) is NACKed with requeue=true without
 * reaching it. When the connection drops before the handler ran, nothing is handed to it;
 * when it drops while the poll is settled, the messages not yet settled are redelivered and
 * the inbox drops the effects already committed.
 *
 * *h is copied; h->arg is borrowed and must outlive the consumer; metrics (may be NULL)
 * receives txo_rabbitmq_consumed_total{outcome="ack|retry|dead_letter"}.
 * Errors: TXO_EINVAL (bad opts, h NULL or not exactly one of h->one and h->batch),
 * TXO_EUNAVAILABLE (server down and opts.connect_required), TXO_ENOMEM. txo_consumer_free()
 * closes the connections; the queues stay.
 */
TXO_API TXO_MUST_CHECK int txo_consumer_rabbitmq_new(const struct txo_rabbitmq_opts *o,
                                                     const struct txo_handler *h,
                                                     struct txo_metrics *metrics,
                                                     struct txo_consumer **out,
                                                     struct txo_error *err);

#endif
