/*
 * Publishers: where the relay sends outbox events. One small interface (an ops table) with one
 * implementation per transport; the relay knows nothing else about them.
 *
 *   log      one JSON envelope per line on a FILE (stdout for `txo relay --publisher log`);
 *            txo_publisher_log_new(), below
 *   null     accepts and discards everything (benchmarks); txo_publisher_null_new(), below
 *   local    hands each event to a handler in the same process, for a consumer without a
 *            broker (`txo up`); txo_publisher_local_new() in txo/consumer.h
 *   nats     NATS JetStream, one subject per aggregate and event type; txo/nats.h
 *   redis    Redis Streams, one pipelined XADD per event, a stream per aggregate type; txo/redis.h
 *   kafka    Apache Kafka, an idempotent producer, a topic per aggregate type keyed by aggregate
 *            id; txo/kafka.h
 *   webhook  one HTTP POST per event to a URL; txo/webhook.h
 * txo_publisher_new() wraps an ops table of the application's own.
 *
 * The published envelope (a public contract, see README "Published envelope"):
 *   {"id":42,"type":"OrderCreated","aggregate_type":"order","aggregate_id":"7",
 *    "idempotency_key":"order:7:created","created_at":"2026-11-30T15:37:00.123456Z",
 *    "attempt":1,"sequence":3,"prev_sequence":2,"payload":{...}}
 * The idempotency key is the consumer's de-duplication key: delivery is at least once.
 * sequence is the event's position in its aggregate (1, 2, 3, ... in commit order) and
 * prev_sequence the sequence of the aggregate's event published just before it (0 for the
 * first; sequence - 1 unless an operator skipped the event in between), so a consumer tells a
 * gap from a skip. Both are left out for an event that has no sequence (appended before the
 * database had sequences).
 *
 * Thread-safety: a publisher is used by one relay (one thread) at a time.
 */
#ifndef TXO_PUBLISHER_H
#define TXO_PUBLISHER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "txo/common.h"
#include "txo/err.h"

/* One claimed outbox event, as handed to a publisher. Strings are NUL-terminated, hold no
 * other NUL byte (the relay dead-letters an event whose column holds one, TXO_EINVAL, rather
 * than hand it over cut) and are borrowed for the duration of the publish call. */
struct txo_outbox_message {
    int64_t id;
    const char *aggregate_type;
    const char *aggregate_id; /* text: any application's key, "42" or a UUID */
    const char *event_type;
    const char *payload; /* JSON text */
    size_t payload_len;
    const char *idempotency_key;
    const char *created_at; /* RFC 3339 UTC */
    int attempt;            /* 1 for the first publish attempt */
    uint64_t sequence;      /* position in its aggregate, 1, 2, ...; 0: none (see above) */
    uint64_t prev_sequence; /* the sequence published just before it in its aggregate; 0: first */
    /* The W3C trace context the event was appended in (txo/trace.h), as the traceparent and
     * tracestate values to send on; NULL: none (or the stored value was not valid). */
    const char *traceparent;
    const char *tracestate;
};

struct txo_publisher_ops {
    const char *name;
    /*
     * Publishes msgs[0..n). Sets results[i] to 0 when msgs[i] was acknowledged, or to a
     * negative TXO_E* code with a reason in errors[i] (errors[i] is pre-initialised). Returns
     * 0, or a negative code when the publisher could not run at all (then every message
     * counts as failed with that error).
     *
     * The code says what the relay does next (txo_err_is_transient()):
     *   transient  (TXO_EPUBLISH, TXO_ETIMEOUT, TXO_EUNAVAILABLE, ...): the broker may take it
     *              later; back to PENDING with backoff, dead-lettered after max_attempts;
     *   permanent  (TXO_EINVAL, TXO_EBUSINESS, TXO_ECONFIG, ...): the broker refused this very
     *              message and would refuse it again (a webhook's 4xx other than 408 and 429,
     *              a payload over the stream's size limit, a local handler's permanent
     *              error); FAILED and dead-lettered at once, with errors[i].msg as the reason.
     * A code that is not a TXO_E* code (> 0) counts as TXO_EPUBLISH.
     */
    int (*publish_batch)(void *self, const struct txo_outbox_message *msgs, size_t n, int *results,
                         struct txo_error *errors);
    /* Frees self. */
    void (*destroy)(void *self);
    /* TXO_PUBLISHER_* bits; 0 for most. */
    unsigned flags;
};

/*
 * The publisher answers a batch in milliseconds and never waits on a lock of the outbox rows
 * it is handed (no broker round trip per event beyond an async ack; at most a short
 * transaction of the consuming side): the relay may publish while holding the batch's row
 * locks (claim mode TRANSACTION, txo/relay.h). The null, log, NATS, Redis and RabbitMQ
 * publishers and the local dispatch set it; the webhook (a remote service works before it
 * answers), Kafka (an outage makes a batch wait its delivery timeout) and gRPC do not.
 */
#define TXO_PUBLISHER_QUICK 1u

/*
 * The publisher keeps an aggregate's order across failures within one call: once an event
 * fails, it sends no later event of the same (aggregate_type, aggregate_id) in that call (it
 * reports them failed too). A relay that orders by aggregate then hands it a batch holding
 * several events of one aggregate in one call; without the flag it sends such a batch in waves
 * of one event per aggregate, each after the previous one was answered (txo/relay.h). The null
 * publisher sets it.
 */
#define TXO_PUBLISHER_IN_ORDER 2u

struct txo_publisher {
    const struct txo_publisher_ops *ops;
    void *self;
};

/* Log publisher writing envelopes to out (not closed by the publisher). */
TXO_API TXO_MUST_CHECK int txo_publisher_log_new(FILE *out, struct txo_publisher **pub,
                                                 struct txo_error *err);
/* Null publisher: acknowledges everything, sends nothing. */
TXO_API TXO_MUST_CHECK int txo_publisher_null_new(struct txo_publisher **pub,
                                                  struct txo_error *err);
/* Wraps custom ops (copied pointer; self owned by the publisher, freed by ops->destroy). */
TXO_API TXO_MUST_CHECK int txo_publisher_new(const struct txo_publisher_ops *ops, void *self,
                                             struct txo_publisher **pub, struct txo_error *err);
/* Destroys the publisher. NULL is a no-op. */
TXO_API void txo_publisher_free(struct txo_publisher *pub);

/*
 * Envelope formats. Both are one compact JSON object on one line, the payload embedded last
 * as JSON with its exact text:
 *   TXO_ENVELOPE_TXO          the envelope above (the default)
 *   TXO_ENVELOPE_CLOUDEVENTS  CloudEvents 1.0, structured JSON mode:
 *     {"specversion":"1.0","id":"order:7:created","source":"/txo/outbox",
 *      "type":"OrderCreated","subject":"order/7","time":"2026-11-30T15:37:00.123456Z",
 *      "datacontenttype":"application/json","txoid":42,"txoattempt":1,
 *      "txoaggregatetype":"order","txoaggregateid":"7","sequence":"00000000000000000003",
 *      "txoprevsequence":"00000000000000000002","data":{...}}
 *     id is the idempotency key (consumers de-duplicate on source + id); time is created_at,
 *     the time of the INSERT inside the producer's transaction, not of its commit: events
 *     are neither published nor delivered in `time` order. sequence is the CloudEvents
 *     sequence extension, meaningful per subject (one aggregate): the event's sequence as a
 *     20-digit zero-padded decimal, so that it also sorts as text; txoprevsequence is its
 *     prev_sequence, written alike. Both are left out when the event has no sequence.
 *   TXO_ENVELOPE_CLOUDEVENTS_BINARY  CloudEvents 1.0, binary mode: the message body is the
 *     payload itself (Content-Type application/json) and the attributes travel as transport
 *     headers, ce-specversion, ce-id, ce-source, ce-type, ce-subject, ce-time and the
 *     extensions ce-txoid, ce-txoattempt, ce-txoaggregatetype, ce-txoaggregateid, ce-sequence,
 *     ce-txoprevsequence, with the same values as above (txo_envelope_binary()). The webhook and
 * NATS publishers send it so; the log publisher, which has no headers, writes structured mode
 * instead.
 */
enum txo_envelope_format {
    TXO_ENVELOPE_TXO = 0,
    TXO_ENVELOPE_CLOUDEVENTS,
    TXO_ENVELOPE_CLOUDEVENTS_BINARY,
};

/* "txo", "cloudevents" or "cloudevents-binary". Returns 0 or TXO_EINVAL. */
TXO_API int txo_envelope_format_parse(const char *name, enum txo_envelope_format *out);

/*
 * The format (and CloudEvents source, copied; NULL: "/txo/outbox") txo_envelope_encode()
 * uses from now on in this process, i.e. what every publisher sends. Not thread-safe: call it
 * at start-up, before any publisher runs. Errors: TXO_EINVAL (source longer than 255 bytes).
 */
TXO_API TXO_MUST_CHECK int txo_envelope_set_default(enum txo_envelope_format format,
                                                    const char *source, struct txo_error *err);

/*
 * Encodes msg as the published envelope in the process's format (txo_envelope_set_default;
 * the txo envelope unless changed): compact JSON, one line, no trailing newline. Returns a
 * string to free with txo_free(), or NULL with err set (TXO_EINVAL when the payload is not
 * JSON, TXO_ENOMEM).
 */
TXO_API char *txo_envelope_encode(const struct txo_outbox_message *msg, size_t *len,
                                  struct txo_error *err);

/* The process's format (txo_envelope_set_default). */
TXO_API enum txo_envelope_format txo_envelope_default_format(void);

/* The headers of a CloudEvent in binary mode: names[i] (static) and values[i] (owned). */
#define TXO_CE_HEADERS_MAX 12
struct txo_ce_headers {
    size_t n;
    const char *names[TXO_CE_HEADERS_MAX];
    char *values[TXO_CE_HEADERS_MAX];
};

/*
 * CloudEvents binary mode for msg with the process's source: fills *headers (release with
 * txo_ce_headers_release(), also after a failure) and returns the body, the payload as compact
 * JSON, to free with txo_free(); *len gets its length. Header values are percent-encoded as
 * the CloudEvents HTTP binding says (space, '"', '%' and every byte outside printable ASCII),
 * so no value can carry a line break into a transport's headers. NULL with err set:
 * TXO_EINVAL (the payload is not JSON, an attribute is missing), TXO_ENOMEM.
 */
TXO_API char *txo_envelope_binary(const struct txo_outbox_message *msg,
                                  struct txo_ce_headers *headers, size_t *len,
                                  struct txo_error *err);
TXO_API void txo_ce_headers_release(struct txo_ce_headers *headers);

/* The same in the given format; source as for txo_envelope_set_default (CloudEvents only).
 * CLOUDEVENTS_BINARY encodes as CLOUDEVENTS (structured mode: one self-contained JSON). */
TXO_API char *txo_envelope_encode_as(const struct txo_outbox_message *msg,
                                     enum txo_envelope_format format, const char *source,
                                     size_t *len, struct txo_error *err);

#endif
