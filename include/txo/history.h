/*
 * Broker history: reading back what a broker stored, without consuming it. The outbox auditor
 * (txo/audit.h) compares it with the outbox. One small interface (an ops table) with one
 * implementation per broker whose history can be read that way:
 *
 *   nats   the JetStream stream, through an ephemeral pull consumer that acknowledges
 *          nothing and is gone when the read ends (txo_history_nats_new(), txo/nats.h)
 *   kafka  every partition of the topics the topic template names, from offsets, by a
 *          consumer that belongs to no group and commits nothing (txo_history_kafka_new(),
 *          txo/kafka.h)
 *   redis  the streams the stream template names, with XRANGE (txo_history_redis_new(),
 *          txo/redis.h)
 *
 * The other transports have no reader, by their nature: reading a RabbitMQ queue consumes
 * it (the message is gone for the application's consumers), and a webhook or gRPC receiver
 * keeps nothing the relay could read back.
 *
 * A message is known by the idempotency key the publishers put beside the body, whatever the
 * envelope format: the Nats-Msg-Id header (NATS), the txo-idempotency-key header (Kafka), the
 * idempotency_key field (Redis). Its time is the broker's: when the server stored it (NATS,
 * Redis, both the server's clock) or the record's timestamp (Kafka: the producer's clock,
 * the relay's, unless the topic keeps LogAppendTime), in microseconds since the epoch.
 *
 * Thread-safety: a reader is used by one thread at a time.
 */
#ifndef TXO_HISTORY_H
#define TXO_HISTORY_H

#include <stdint.h>

#include "txo/common.h"
#include "txo/err.h"

/* held_from_us when the broker still holds every message it ever stored. */
#define TXO_HISTORY_ALL INT64_MIN

/* One stored message, as a reader hands it over. The strings are borrowed for the call. */
struct txo_history_msg {
    const char *key;      /* the idempotency key it carries; NULL when it carries none */
    const char *position; /* where it is stored, for people: "stream TXO_EVENTS seq 42,
                           * subject txo.events.order.OrderCreated" */
    int64_t time_us;      /* the broker's time of the message */
};

/* Called once per message. Returns 0 to go on, or a negative TXO_E* code that ends the read
 * with that code (the reader then returns it; err is left to the caller). */
typedef int (*txo_history_fn)(void *arg, const struct txo_history_msg *msg);

/*
 * What a read learnt about the part of the history the broker still holds. Retention (a
 * stream's age or size limits, a topic's retention.ms, XADD MAXLEN) drops the oldest messages:
 * a message stored before held_from_us may be gone without a trace, one stored at or after it
 * is still there unless someone deleted that very message.
 */
struct txo_history_span {
    /* Every message stored at or after this time is still held; TXO_HISTORY_ALL when the
     * broker never dropped one (as far as it can tell: see each reader). The latest such time
     * over every stream, topic partition or Redis stream that was read. */
    int64_t held_from_us;
    char held_from_where[256]; /* the stream or partition that time comes from; "" for ALL */
    uint64_t messages;         /* messages passed to fn */
    uint64_t sources;          /* streams, partitions or Redis streams read */
};

struct txo_history_ops {
    const char *name; /* "nats" */
    /*
     * Calls fn(arg, ...) for every message held that was stored in [from_us, to_us], and maybe
     * a few outside it (the caller filters by time), in the order of each stream or partition,
     * then fills *span. Reads only: nothing is acknowledged, committed, created or changed at
     * the broker (a NATS reader's consumer is ephemeral server state, deleted when the read
     * ends). Returns 0, fn's code, or TXO_EUNAVAILABLE / TXO_ETIMEOUT (broker unreachable or
     * silent), TXO_ENOTFOUND (the NATS stream does not exist), TXO_ECONFIG (refused: not
     * authorised), TXO_ENOMEM, with err set (not for fn's code).
     */
    int (*read)(void *self, int64_t from_us, int64_t to_us, txo_history_fn fn, void *arg,
                struct txo_history_span *span, struct txo_error *err);
    /* Frees self. */
    void (*destroy)(void *self);
};

struct txo_history {
    const struct txo_history_ops *ops;
    void *self;
};

/* Wraps ops and self (owned by the reader from now on, freed by ops->destroy, also when this
 * fails). Errors: TXO_EINVAL (no ops), TXO_ENOMEM. Free with txo_history_free(). */
TXO_API TXO_MUST_CHECK int txo_history_new(const struct txo_history_ops *ops, void *self,
                                           struct txo_history **out, struct txo_error *err);

/* ops->read(), with *span reset first (held_from_us TXO_HISTORY_ALL, counts 0). */
TXO_API TXO_MUST_CHECK int txo_history_read(struct txo_history *h, int64_t from_us, int64_t to_us,
                                            txo_history_fn fn, void *arg,
                                            struct txo_history_span *span, struct txo_error *err);

/* "nats", "kafka", "redis". */
TXO_API const char *txo_history_name(const struct txo_history *h);

/* Destroys the reader. NULL is a no-op. */
TXO_API void txo_history_free(struct txo_history *h);

/*
 * For readers: records that the source `where` holds every message from held_from_us on
 * (TXO_HISTORY_ALL: it never dropped one), keeping the latest such time in *span.
 */
TXO_API void txo_history_span_hold(struct txo_history_span *span, const char *where,
                                   int64_t held_from_us);

#endif
