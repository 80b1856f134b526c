/*
 * Apache Kafka transport (librdkafka): an idempotent producer for the relay and a consumer-group
 * consumer for workers.
 *
 * Published records (the contract a consumer in any language can rely on):
 *   topic    opts.topic_template with {aggregate_type} and {event_type} replaced, by default
 *            "txo.events.{aggregate_type}" ("txo.events.order"): all events of one aggregate
 *            type share a topic, so the events of one aggregate share a partition and keep
 *            their order there. Characters outside [A-Za-z0-9._-] become '_' (txo_kafka_topic()).
 *   key      the aggregate id ("7"): Kafka's partitioner maps one key to one partition
 *   value    the published envelope JSON (txo/publisher.h); with the CloudEvents binary format,
 *            the payload JSON itself
 *   headers  txo-idempotency-key  the event's idempotency key ("order:7:created"), the
 *                                 consumer's de-duplication key
 *            txo-event-type       the event type ("OrderCreated")
 *            binary CloudEvents only: content-type (application/json) and the attributes as
 *            ce_specversion, ce_id, ce_source, ce_type, ce_subject, ce_time, ce_txoid,
 *            ce_txoattempt, ce_txoaggregatetype, ce_txoaggregateid (the CloudEvents Kafka
 *            binding's names; values percent-encoded as txo_envelope_binary() says)
 *
 * Guarantees and their limits:
 *   - The producer is idempotent (enable.idempotence=true, acks=all): librdkafka's own retries
 *     after a lost response or a leader change never write a record twice and keep the order
 *     of one partition. That holds within one producer session only: a relay that publishes an
 *     event again (after a delivery timeout or a crash between the publish and the database
 *     update) writes a second record with the same txo-idempotency-key. Consumers de-duplicate
 *     on that header (the transactional inbox does).
 *   - Per-aggregate order on the partition holds with the relay's `--ordering aggregate`
 *     (one in-flight event per aggregate); otherwise a retried event lands after later ones.
 *   - Kafka keeps no per-message delivery count and has no per-message negative acknowledgement
 *     or dead letter; the consumer emulates what it can (txo_consumer_kafka_new()).
 *
 * Thread-safety: a publisher is used by one relay (one thread) at a time, a consumer is polled
 * by one thread at a time. librdkafka runs its own threads; the callbacks it runs on them only
 * log. Delivery reports and rebalances are served on the calling thread.
 */
#ifndef TXO_KAFKA_H
#define TXO_KAFKA_H

#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/consumer.h"
#include "txo/err.h"
#include "txo/history.h"
#include "txo/metrics.h"
#include "txo/publisher.h"

/* Every setting of both sides. Strings are borrowed for the creating call (copied). */
struct txo_kafka_opts {
    /* Both sides. */
    const char *brokers;        /* bootstrap servers, "host:port[,host:port...]";
                                 * default "127.0.0.1:9092" */
    const char *topic_template; /* "txo.events.{aggregate_type}"; {event_type} also expands */
    /*
     * Extra librdkafka properties, n_properties strings "key=value" (security.protocol,
     * sasl.*, linger.ms, ...), applied after txo's own. The ones txo sets for its guarantees
     * are refused (TXO_EINVAL): bootstrap.servers, group.id, enable.idempotence, acks,
     * enable.auto.commit, enable.auto.offset.store, message.timeout.ms.
     */
    const char *const *properties;
    size_t n_properties;

    /* Publisher. */
    int64_t delivery_timeout_ms; /* a batch waits up to this for its delivery reports (and
                                  * librdkafka's message.timeout.ms), default 10000 */

    /* Consumer. */
    const char *group;             /* consumer group (group.id), default "txo-worker" */
    const char *topics;            /* comma-separated topics to subscribe to; required */
    const char *event_type;        /* only events of this type (header txo-event-type) reach the
                                    * handler; others are committed past. NULL: every record */
    int64_t retry_delay_ms;        /* a record whose handler failed transiently is fetched again
                                    * after this, default 1000 */
    const char *dead_letter_topic; /* a record the handler rejected (permanent error) is
                                    * copied here before its offset is committed; NULL: it is
                                    * only logged */
};

/* Fills o with the defaults above (static strings; topics NULL). Never fails. */
TXO_API void txo_kafka_opts_init(struct txo_kafka_opts *o);

/*
 * Writes the topic of events (aggregate_type, event_type) under template into out:
 * "{aggregate_type}" and "{event_type}" are replaced by the types, every byte outside
 * [A-Za-z0-9._-] (of the template or the types) becomes '_', an empty type becomes "_".
 * ("txo.events.{aggregate_type}", "order", "OrderCreated") -> "txo.events.order".
 * Returns 0, or TXO_EINVAL (NULL argument, an unknown {placeholder}, a result longer than
 * Kafka's 249 bytes or than out_size - 1; out is then an empty string when out_size > 0).
 */
TXO_API TXO_MUST_CHECK int txo_kafka_topic(const char *template, const char *aggregate_type,
                                           const char *event_type, char *out, size_t out_size,
                                           struct txo_error *err);

/*
 * Creates the publisher: an idempotent librdkafka producer (acks=all) connecting in the
 * background; a cluster that is down at creation is not an error.
 *
 * publish_batch produces every message of the batch (topic, key, value and headers as at the
 * top of this file), then serves delivery reports until each message has one, or for
 * delivery_timeout_ms plus one second at most. results[i] = 0 only for a message whose
 * delivery report said the cluster stored it (acks=all: every in-sync replica). Otherwise,
 * with the reason in errors[i]:
 *   TXO_ETIMEOUT      no delivery within delivery_timeout_ms ("maybe done": the record may
 *                     have been written, the relay's retry may write it again);
 *   TXO_EUNAVAILABLE  no broker reachable, no leader for the partition, transport failures;
 *   TXO_EPUBLISH      another error the cluster may get over (queue full, out of order, ...);
 *   TXO_EINVAL        permanent: the record is larger than the cluster accepts, the topic name
 *                     is invalid, or the event cannot be encoded (payload not JSON);
 *   TXO_ECONFIG       permanent: not authorised to write the topic (or the cluster).
 * After a fatal producer error (an idempotence sequence the cluster rejects) the batch fails
 * with TXO_EPUBLISH and the next batch uses a new producer.
 * The publisher is not TXO_PUBLISHER_QUICK: while the cluster is down a batch waits the full
 * delivery timeout.
 *
 * metrics (may be NULL) receives the families txo_kafka_messages_published_total,
 * txo_kafka_publish_errors_total{kind="transient"|"permanent"}, txo_kafka_messages_in_flight
 * and txo_kafka_delivery_seconds (produce to delivery report); it must outlive the publisher.
 * Errors: TXO_EINVAL (bad opts or property), TXO_ECONFIG (librdkafka refused a property),
 * TXO_ENOMEM. Free with txo_publisher_free() (it waits up to one second for records still
 * in flight).
 */
TXO_API TXO_MUST_CHECK int txo_publisher_kafka_new(const struct txo_kafka_opts *o,
                                                   struct txo_metrics *metrics,
                                                   struct txo_publisher **out,
                                                   struct txo_error *err);

/*
 * Creates a consumer in group opts.group subscribed to opts.topics (auto.offset.reset
 * earliest: a new group starts at the beginning), with automatic commits off. Each record goes
 * to the handler h (txo/consumer.h) in partition order, one record per call (h->batch gets
 * batches of one: a record's verdict decides whether the partition moves on, so it is settled
 * before the next record is handled): msg_id = the txo-idempotency-key header (NULL when
 * absent), subject = the topic, data = the record's value (NUL-terminated copy), header() =
 * the record's headers (a "ce-" name is looked up as "ce_", so txo_envelope_decode_message()
 * reads binary CloudEvents).
 *
 * txo_consumer_poll() waits up to timeout_ms for the first record, takes what is ready up to
 * max_msgs, and settles each record after its handler returned:
 *   0          done: its offset is committed (synchronously, once per poll, before the poll
 *              returns), so it is not fetched again by this group;
 *   transient  nothing is committed past it: the partition is sought back to it and paused
 *              for retry_delay_ms, then the record is handled again (later records of that
 *              partition wait behind it: partition order is kept);
 *   permanent  logged at error level with the reason and copied to dead_letter_topic when one
 *              is set (if that copy fails the record counts as transient), then committed past.
 * A record whose txo-event-type is not opts.event_type is committed past without calling the
 * handler and does not count in *handled.
 * delivery: Kafka does not count deliveries. It is 1 the first time this consumer handles a
 * record and goes up with each retry of it by this consumer; after a restart or a rebalance a
 * redelivered record starts at 1 again.
 * Rebalances (served inside poll): before partitions are revoked, the offsets of every record
 * handled so far are committed; a record handled but not committed (a crash, a failed commit)
 * is delivered again to the partition's next owner, where the inbox drops it.
 * A failed commit is reported as TXO_EUNAVAILABLE after the batch. While no broker is
 * reachable a poll returns TXO_EUNAVAILABLE.
 *
 * metrics (may be NULL): txo_kafka_messages_consumed_total{outcome="handled"|"retried"|
 * "rejected"|"skipped"} and txo_kafka_commit_errors_total. *h is copied; h->arg is borrowed
 * and must outlive the consumer. Errors: TXO_EINVAL (h NULL or not exactly one of h->one and
 * h->batch, no topics, bad opts),
 * TXO_ECONFIG (librdkafka refused a property), TXO_ENOMEM. txo_consumer_free() commits what
 * was handled and leaves the group (its partitions go to the other members).
 */
TXO_API TXO_MUST_CHECK int txo_consumer_kafka_new(const struct txo_kafka_opts *o,
                                                  const struct txo_handler *h,
                                                  struct txo_metrics *metrics,
                                                  struct txo_consumer **out, struct txo_error *err);

/*
 * Creates a reader of the topics' history (txo/history.h) for the outbox auditor: every
 * partition of the topics topic_template names (found in the cluster's metadata: each
 * placeholder stands for one or more topic characters; internal topics and
 * dead_letter_topic left out), read from the offset of the start time (ListOffsets by
 * timestamp; from the low watermark on a cluster that cannot look up by time) by librdkafka's
 * simple consumer: no group.id, no group joined, nothing committed. Each record is known by its
 * txo-idempotency-key header and its timestamp. A partition whose low watermark is above 0
 * holds from its oldest record's timestamp on; one emptied by retention is taken to hold
 * nothing. delivery_timeout_ms bounds each request and the wait for the next record. The
 * properties apply (security settings); group, topics and retry_delay_ms are not used.
 * Errors: TXO_EINVAL (bad opts or property), TXO_ECONFIG (librdkafka refused a property),
 * TXO_ENOMEM. Free with txo_history_free().
 */
TXO_API TXO_MUST_CHECK int txo_history_kafka_new(const struct txo_kafka_opts *o,
                                                 struct txo_history **out, struct txo_error *err);

/* The header names of the record contract above. */
#define TXO_KAFKA_HEADER_IDEMPOTENCY_KEY "txo-idempotency-key"
#define TXO_KAFKA_HEADER_EVENT_TYPE      "txo-event-type"
/* Added to a record copied to the dead-letter topic: the handler's reason. */
#define TXO_KAFKA_HEADER_DEAD_LETTER_REASON "txo-dead-letter-reason"

#endif
