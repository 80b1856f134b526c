/*
 * Redis Streams transport: a publisher for the relay (XADD) and a consumer-group consumer for
 * workers (XREADGROUP, XACK, XAUTOCLAIM).
 *
 * Published entries (the contract a consumer in any language can rely on):
 *   stream  the stream template with {aggregate_type} and {event_type} replaced by the event's
 *           values (default "txo.events.{aggregate_type}": all events of one aggregate type
 *           in one stream, so one aggregate's events keep their order there); control
 *           characters and spaces in the values become '_' (txo_redis_stream_name())
 *   id      chosen by the server (XADD ... *), "<ms>-<seq>", increasing within a stream
 *   fields, always:
 *     idempotency_key  the event's idempotency key, the consumer's de-duplication key
 *     event_type       "OrderCreated"
 *     aggregate_type   "order"
 *     aggregate_id     "7"
 *     outbox_id        the outbox row's id, decimal
 *   and in the txo or CloudEvents structured format (txo_envelope_set_default()):
 *     envelope         the published envelope JSON (txo/publisher.h)
 *   or in CloudEvents binary mode:
 *     data             the payload JSON itself
 *     content_type     "application/json"
 *     ce_specversion, ce_id, ce_source, ce_type, ce_subject, ce_time, ce_txoid,
 *     ce_txoattempt, ce_txoaggregatetype, ce_txoaggregateid
 *                      the CloudEvents attributes, with the values (percent-encoded) of the
 *                      ce-* headers of txo_envelope_binary()
 *   Trimming: with opts.maxlen > 0 every XADD carries MAXLEN ~ maxlen, so the server drops the
 *   oldest entries once the stream is longer (approximately: whole macro nodes), whether or not
 *   a group has read them. An entry trimmed before it was acknowledged is lost for that group.
 *
 * Guarantees and limits:
 *   - Redis has no producer-side de-duplication. A batch whose replies did not all arrive
 *     (timeout, connection lost) is published again by the relay, so an entry can be stored
 *     twice; consumers de-duplicate on the idempotency_key field (the transactional inbox).
 *   - An XADD is acknowledged when the server applied it in memory. It survives a server
 *     crash only when the server writes its append-only file with `appendonly yes` and
 *     `appendfsync always` (fsync before the reply); with `appendfsync everysec` (the usual
 *     setting) up to about one second of acknowledged entries can be lost on a crash or power
 *     loss, and without AOF everything since the last snapshot. Redis 7.0 has no command to wait
 *     for the fsync of one write (WAITAOF came with 7.2), so the publisher cannot make up for a
 *     weaker setting: it logs a warning at connection time when CONFIG GET shows one.
 *
 * Connections: each publisher and each consumer owns one connection, opened lazily (creation
 * never needs the server). While the server is down every publish fails at once with
 * TXO_EUNAVAILABLE (after at most connect_timeout_ms), a broken connection is dropped and
 * opened again on the next batch or poll.
 *
 * Thread-safety: a publisher is used by one relay (one thread) at a time, a consumer is polled
 * by one thread at a time; no threads of their own.
 */
#ifndef TXO_REDIS_H
#define TXO_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/consumer.h"
#include "txo/err.h"
#include "txo/history.h"
#include "txo/metrics.h"
#include "txo/publisher.h"

/* Every setting of both sides. Strings are borrowed for the creating call (copied). */
struct txo_redis_opts {
    /* Connection (both sides). */
    const char *url;            /* "redis://[[user]:password@]host[:port][/db]", default
                                 * "redis://127.0.0.1:6379/0"; the password is a secret: copied, wiped on
                                 * free, never logged */
    int64_t connect_timeout_ms; /* one connect attempt, default 2000 */
    int64_t timeout_ms;         /* a command's reply (a whole pipelined batch for the
                                 * publisher), default 5000 */

    /* Publisher. */
    const char *stream_template; /* "txo.events.{aggregate_type}"; {event_type} also allowed */
    int64_t maxlen;              /* 0 (default): no trimming; N: XADD ... MAXLEN ~ N */

    /* Consumer. */
    const char *stream;        /* the stream to read (required for the consumer) */
    const char *group;         /* consumer group, default "txo-worker"; created at "0" (the
                                * whole stream) with MKSTREAM when it does not exist */
    const char *consumer_name; /* NULL (default): "<hostname>:<pid>:<n>", unique per process */
    const char *event_type;    /* NULL (default): every entry goes to the handler; else entries
                                * of other event types are acknowledged without calling it */
    int64_t claim_idle_ms;     /* an entry delivered but not acknowledged for this long is
                                * claimed (XAUTOCLAIM) and handled again, default 30000 */
    bool dead_letter;          /* default true: an entry the handler rejects for good is copied
                                * to "<stream>.dead" before it is acknowledged; false: it is
                                * only logged and acknowledged */
};

/* Fills o with the defaults above (static strings). Never fails. */
TXO_API void txo_redis_opts_init(struct txo_redis_opts *o);

/*
 * Writes the stream name for (aggregate_type, event_type) from template into out
 * ("txo.events.{aggregate_type}" + "order" -> "txo.events.order"). Every "{aggregate_type}"
 * and "{event_type}" is replaced; an empty value becomes "_"; bytes <= 0x20 and 0x7f in the
 * values become '_'. Returns 0, or TXO_EINVAL (NULL argument, empty template, an unknown
 * "{...}" placeholder, out too small; out is then left an empty string when out_size > 0).
 */
TXO_API TXO_MUST_CHECK int txo_redis_stream_name(const char *stream_template,
                                                 const char *aggregate_type, const char *event_type,
                                                 char *out, size_t out_size, struct txo_error *err);

/*
 * Creates the publisher. Nothing is sent until the first batch (see the top of this file).
 *
 * publish_batch sends one XADD per message, pipelined (all written, then every reply read),
 * and waits at most timeout_ms for the replies. results[i] = 0 only for a message whose XADD
 * answered with an entry id. Otherwise, with the reason in errors[i]:
 *   TXO_EUNAVAILABLE  not connected (every message, at once), the connection broke, or the
 *                     server answered with a passing condition: OOM (maxmemory reached),
 *                     LOADING, BUSY, READONLY (a replica after a failover), MASTERDOWN,
 *                     TRYAGAIN, CLUSTERDOWN, MISCONF (the server cannot persist),
 *                     NOAUTH/WRONGPASS/NOPERM (fix the credentials: the rows wait);
 *   TXO_ETIMEOUT      no reply within timeout_ms: maybe stored (published again: a duplicate);
 *   TXO_ECONFIG       WRONGTYPE: the stream's key holds another type; every retry would fail,
 *                     so the event is dead-lettered at once (permanent) with the server's text;
 *   TXO_EINVAL        the event cannot be encoded (payload not JSON, no idempotency key);
 *   TXO_EPUBLISH      any other error reply (the relay retries, then dead-letters).
 *
 * metrics (may be NULL, must outlive the publisher) gets the families
 * txo_redis_published_total, txo_redis_publish_failed_total, txo_redis_in_flight and
 * txo_redis_reply_seconds (the time from sending a batch to its last reply).
 *
 * Errors: TXO_EINVAL (bad opts: the message names the setting), TXO_ENOMEM. Free with
 * txo_publisher_free().
 */
TXO_API TXO_MUST_CHECK int txo_publisher_redis_new(const struct txo_redis_opts *o,
                                                   struct txo_metrics *metrics,
                                                   struct txo_publisher **out,
                                                   struct txo_error *err);

/*
 * Creates a consumer in group opts.group on opts.stream that runs the handler h
 * (txo/consumer.h) on its entries: the entries of each read (XREADGROUP) or claim (XAUTOCLAIM)
 * go to it in order (h->batch: in one call, for txo_worker_handle_many: one database
 * transaction per poll), then each is settled by its result and all those acknowledged go in
 * one XACK. A batch handler that returns non-zero fails every entry of the call with that
 * code. The inbound message has subject = the stream name, data = the envelope field (data in
 * CloudEvents binary mode, with header("ce-type") etc. reading the ce_* fields), msg_id = the
 * idempotency_key field, delivery = 1 for a new entry or the group's delivery count for a
 * claimed one.
 *
 * txo_consumer_poll() first claims up to max_msgs entries idle for claim_idle_ms or longer
 * (XAUTOCLAIM, at most every claim_idle_ms / 4, and at once again while there are more); when
 * it claimed none it reads new entries (XREADGROUP ... COUNT max_msgs BLOCK timeout_ms ... >).
 * Each entry's outcome:
 *   handler 0          XACK: done (an entry of another event type than opts.event_type is
 *                      acknowledged without calling the handler);
 *   transient code     nothing: the entry stays pending and is claimed again after
 *                      claim_idle_ms, its delivery count one higher (the redelivery delay);
 *   permanent code     with dead_letter: XADD to "<stream>.dead" with the entry's fields plus
 *                      dead_reason (the handler's message), dead_error (the code's name),
 *                      dead_group, dead_entry_id and dead_delivery, then XACK; without: an
 *                      error log line, then XACK. If the dead-letter XADD fails the entry is
 *                      not acknowledged (it comes back after claim_idle_ms).
 * A consumer that died leaves its entries pending; any consumer of the group claims them
 * after claim_idle_ms. Idle time counts from the delivery, so claim_idle_ms must exceed the
 * time to handle one poll's batch, or another consumer may claim entries still waiting in it
 * (both then handle them; the inbox keeps one effect). When the connection breaks mid-batch
 * the rest of the batch is left pending. An entry trimmed (MAXLEN) while pending is dropped
 * from the group with a warning.
 *
 * metrics (may be NULL) gets txo_redis_consumed_total{outcome="ack|retry|dead|skipped"} and
 * txo_redis_claimed_total.
 *
 * *h is copied; h->arg is borrowed and must outlive the consumer. Errors: TXO_EINVAL (bad opts,
 * no stream, h NULL or not exactly one of h->one and h->batch), TXO_ENOMEM.
 * txo_consumer_free() leaves the group and its pending entries on the server.
 */
TXO_API TXO_MUST_CHECK int txo_consumer_redis_new(const struct txo_redis_opts *o,
                                                  const struct txo_handler *h,
                                                  struct txo_metrics *metrics,
                                                  struct txo_consumer **out, struct txo_error *err);

/*
 * Creates a reader of the streams' history (txo/history.h) for the outbox auditor: XRANGE over
 * every stream stream_template names (the template itself, or the keys of type stream its glob
 * matches with SCAN, each placeholder a '*', leaving out a worker's "<stream>.dead" beside a
 * matched stream), each entry known by its idempotency_key field. Nothing is consumed or
 * acknowledged; consumer groups are not touched. A stream that lost entries (MAXLEN trimming
 * or XDEL: entries-added above the length, or any stream before Redis 7, which does not tell)
 * is taken to hold only from its first entry on. Needs Redis 6.2 (SCAN TYPE, exclusive XRANGE
 * ids). The connection opens on the first read; timeout_ms bounds each command. The group,
 * consumer and maxlen settings are not used.
 * Errors: TXO_EINVAL (bad opts), TXO_ENOMEM. Free with txo_history_free().
 */
TXO_API TXO_MUST_CHECK int txo_history_redis_new(const struct txo_redis_opts *o,
                                                 struct txo_history **out, struct txo_error *err);

#endif
