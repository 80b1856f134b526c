/*
 * NATS JetStream transport: a publisher for the relay and a durable pull consumer for workers.
 *
 * Published messages (the contract a consumer in any language can rely on):
 *   stream   opts.stream ("TXO_EVENTS"), file storage, subjects "<subject_prefix>.>"
 *   subject  "<subject_prefix>.<aggregate_type>.<event_type>" ("txo.events.order.OrderCreated");
 *            in the two last tokens '.', '*', '>', whitespace and control characters become '_'
 *            (see txo_nats_subject())
 *   header   Nats-Msg-Id: the event's idempotency key ("order:7:created"): JetStream drops a
 *            second message with the same id inside the stream's duplicate window, so a
 *            publish repeated after a timeout, a reconnect or a relay crash is stored once
 *   data     the published envelope JSON (txo/publisher.h)
 * Outside the duplicate window (default 2 minutes) a republished event is stored again, so
 * consumers still de-duplicate on the idempotency key (the transactional inbox).
 *
 * Connections: each publisher and each consumer owns one connection, opened at creation.
 * cnats reconnects in the background forever (MaxReconnect infinite, reconnect_wait_ms apart,
 * with an 8 MB reconnect buffer), including when the server was not reachable at creation.
 * A server that is down is never fatal for a daemon: creation succeeds unless
 * opts.connect_required is set; while the connection is down a publish fails every message
 * of the batch at once with TXO_EUNAVAILABLE (the relay keeps the rows PENDING with backoff)
 * and a poll returns TXO_EUNAVAILABLE at once. The stream is created (or updated) on the first
 * publish or poll that finds the connection up.
 *
 * Thread-safety: a publisher is used by one relay (one thread) at a time, a consumer is polled
 * by one thread at a time; cnats runs its own threads internally (acks, reconnects), which
 * touch only state guarded inside this module.
 */
#ifndef TXO_NATS_H
#define TXO_NATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/consumer.h"
#include "txo/err.h"
#include "txo/history.h"
#include "txo/publisher.h"

/* Every setting of both sides. Strings are borrowed for the creating call (copied). */
struct txo_nats_opts {
    /* Connection (both sides). */
    const char *url;            /* "nats://127.0.0.1:4222"; a comma-separated list is allowed */
    int64_t connect_timeout_ms; /* one connect attempt, default 2000 */
    int64_t reconnect_wait_ms;  /* between reconnect attempts, default 250 */
    bool connect_required;      /* default false: creation succeeds while the server is down
                                 * (cnats keeps trying); true: it fails with TXO_EUNAVAILABLE */

    /* Stream (both sides). */
    const char *stream;          /* "TXO_EVENTS" */
    const char *subject_prefix;  /* "txo.events"; subjects are <prefix>.<aggregate>.<event> */
    bool create_stream;          /* default true: create the stream (subjects <prefix>.>, file
                                  * storage) or update it to these settings if it exists */
    int64_t duplicate_window_ms; /* dedupe window of a created stream, default 120000 */
    /*
     * Copies of a created (or updated) stream, 1..5, default 1. On a JetStream cluster, 3 keeps
     * the stream through the loss of one server: a PubAck then means a majority of the
     * replicas stored the message, and a publish in flight while the stream's leader changes
     * gets no ack (TXO_ETIMEOUT) or an error, so the relay publishes it again under the same
     * Nats-Msg-Id, which the new leader de-duplicates.
     */
    int replicas;

    /* Publisher. */
    int64_t ack_timeout_ms; /* publish acks (PubAck) awaited up to this per batch, default 5000;
                             * also the timeout of JetStream API requests on both sides */

    /* Consumer. */
    const char *durable;        /* durable consumer name, default "txo-worker" (no '.') */
    const char *filter_subject; /* NULL = "<prefix>.>" */
    int64_t ack_wait_ms;        /* unacked message redelivered after this, default 30000 */
    int64_t nak_delay_ms;       /* redelivery delay after a transient handler error, 1000 */
    int max_deliver;            /* deliveries per message, -1 = unlimited (default) */
};

/* Fills o with the defaults above (static strings). Never fails. */
TXO_API void txo_nats_opts_init(struct txo_nats_opts *o);

/*
 * Writes the subject of events (aggregate_type, event_type) under prefix into out
 * ("txo.events" + "order" + "OrderCreated" -> "txo.events.order.OrderCreated"). The two tokens
 * are sanitised: '.', '*', '>', whitespace and control characters become '_', an empty token
 * becomes "_". Returns 0, or TXO_EINVAL (NULL argument, invalid prefix, out too small; out is
 * then left an empty string when out_size > 0).
 */
TXO_API TXO_MUST_CHECK int txo_nats_subject(const char *prefix, const char *aggregate_type,
                                            const char *event_type, char *out, size_t out_size,
                                            struct txo_error *err);

/*
 * Creates the JetStream publisher and opens its connection (see the top of this file).
 *
 * publish_batch publishes every message of the batch asynchronously (header Nats-Msg-Id = the
 * idempotency key, data = the envelope), then waits up to ack_timeout_ms for all PubAcks.
 * results[i] = 0 only for a message whose PubAck arrived (a duplicate ack is success: the
 * server already stores that event). Otherwise, with the reason in errors[i]:
 *   TXO_EUNAVAILABLE  not connected (every message, at once) or the stream cannot be created;
 *   TXO_ETIMEOUT      no PubAck within ack_timeout_ms;
 *   TXO_EPUBLISH      the server refused the message or the write failed;
 *   TXO_EINVAL        the event cannot be encoded (payload not JSON);
 *   TXO_ECONFIG       the broker refused the stream configuration.
 * A batch never blocks longer than about ack_timeout_ms plus the time to write it (and, on
 * the first batch, one stream request of at most ack_timeout_ms).
 *
 * Errors: TXO_EINVAL / TXO_ECONFIG (bad opts), TXO_EUNAVAILABLE (server down and
 * opts.connect_required), TXO_ENOMEM. Free with txo_publisher_free().
 */
TXO_API TXO_MUST_CHECK int txo_publisher_nats_new(const struct txo_nats_opts *o,
                                                  struct txo_publisher **out,
                                                  struct txo_error *err);

/*
 * Creates a durable pull consumer (opts.durable, AckExplicit, AckWait = ack_wait_ms,
 * MaxDeliver = max_deliver, filter subject) that runs the handler h (txo/consumer.h) on the
 * messages of each fetch.
 * The durable is created on the first poll that reaches the server, or bound to when it
 * exists; consumers on the same durable share its messages, each delivered to one of them.
 *
 * txo_consumer_poll() fetches up to max_msgs within timeout_ms, hands them to the handler in
 * order (h->batch: in one call, for txo_worker_handle_many: one database transaction per
 * fetch), then settles each by its result: 0 -> ack, confirmed by the server (the acks of a
 * fetch are sent together and their confirmations awaited together, up to ack_timeout_ms: one
 * round trip a fetch; an ack not confirmed fails the poll with TXO_EUNAVAILABLE and its
 * message comes back after ack_wait_ms); transient -> NAK with nak_delay_ms; permanent ->
 * TERM (error log with the reason). When the
 * connection drops while the fetch is settled, the messages not yet settled are left alone:
 * the server redelivers them after ack_wait_ms and the inbox drops the effects already
 * committed.
 *
 * *h is copied; h->arg is borrowed and must outlive the consumer. Errors: TXO_EINVAL (h NULL or
 * not exactly one of h->one and h->batch) /
 * TXO_ECONFIG (bad opts), TXO_EUNAVAILABLE (server down and opts.connect_required),
 * TXO_ENOMEM. txo_consumer_free() keeps the durable on the server.
 */
TXO_API TXO_MUST_CHECK int txo_consumer_nats_new(const struct txo_nats_opts *o,
                                                 const struct txo_handler *h,
                                                 struct txo_consumer **out, struct txo_error *err);

/*
 * Creates a reader of the stream's history (txo/history.h) for the outbox auditor: it reads
 * the messages of "<subject_prefix>.>" in opts.stream through an ephemeral pull consumer
 * that acknowledges nothing, by their Nats-Msg-Id header, and tells from the stream's first
 * sequence whether the stream dropped its oldest messages. It never creates or changes the
 * stream (create_stream is ignored) and connects at once (connect_required is implied).
 * ack_timeout_ms bounds every request and each fetch of a read. The durable, filter and ack
 * settings are not used.
 * Errors: TXO_EINVAL (bad opts), TXO_EUNAVAILABLE (server unreachable), TXO_ENOMEM. Free with
 * txo_history_free().
 */
TXO_API TXO_MUST_CHECK int txo_history_nats_new(const struct txo_nats_opts *o,
                                                struct txo_history **out, struct txo_error *err);

/*
 * Releases cnats's process-wide resources (its internal threads and buffers), waiting up to
 * 2 s for them to end. Call it once at process exit, after every NATS publisher and consumer
 * was freed (and any other cnats object of the process destroyed), so that memory checkers
 * see no leak; a NATS object created afterwards re-initialises cnats. Not thread-safe: call it
 * from the main thread with no NATS object alive. Safe when NATS was never used.
 */
TXO_API void txo_nats_shutdown(void);

#endif
