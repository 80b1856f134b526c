/*
 * The transactional outbox: an event is appended to `outbox_events` inside the caller's own
 * transaction, next to the business rows it describes. Both commit or neither does; the relay
 * (txo/relay.h) publishes committed events later, at least once.
 *
 * Row states (column outbox_events.status), and the only moves between them:
 *
 *   PENDING     waiting to be published once next_attempt_at has passed
 *               -> PROCESSING (claimed by a relay)
 *               published without a claim (a relay holding the row locked in its claim
 *               transaction, or the binlog source, txo/binlog.h, which reads it from the log):
 *               -> PUBLISHED (held: acknowledged; binlog: only when handed back to polling,
 *                             until then its published rows stay PENDING)
 *               -> PENDING   (held: publish failed, attempts+1, next_attempt_at = backoff)
 *               -> FAILED    (refused for good, or attempts at the limit; dead letter)
 *   PROCESSING  claimed by the relay whose lock token is in locked_by, until locked_until
 *               -> PUBLISHED (publish acknowledged)
 *               -> PENDING   (publish failed: attempts+1, next_attempt_at = now + backoff;
 *                             or the lease expired and the row was reclaimed)
 *               -> FAILED    (publish failed and attempts reached the limit; a copy goes to
 *                             dead_letter_events in the same transaction)
 *   PUBLISHED   terminal (the retention cleaner may delete it)
 *   FAILED      until an operator acts on its dead letter (txo/dlq.h):
 *               -> PENDING   (replayed: published again like a new event)
 *               -> SKIPPED   (skipped: never published; its aggregate goes on without it)
 *   SKIPPED     terminal (an operator gave up on the event)
 *
 * With the relay's ordering by aggregate (txo/relay.h), every state but PUBLISHED and SKIPPED
 * holds back the later events of the same aggregate. A skipped event's successor is linked to
 * what the skipped one followed (its prev_sequence, txo/publisher.h), so consumers see no gap.
 *
 * Thread-safety: functions here use only the transaction they are given.
 */
#ifndef TXO_OUTBOX_H
#define TXO_OUTBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/db.h"
#include "txo/trace.h"

enum txo_outbox_status {
    TXO_OUTBOX_PENDING = 0,
    TXO_OUTBOX_PROCESSING,
    TXO_OUTBOX_PUBLISHED,
    TXO_OUTBOX_FAILED,
    TXO_OUTBOX_SKIPPED,
};

/* "PENDING", ... (the column values); "INVALID" for a value outside the enum. Never NULL. */
TXO_API const char *txo_outbox_status_name(enum txo_outbox_status s);
/* Parses a column value. Returns 0 or TXO_EINVAL. */
TXO_API int txo_outbox_status_parse(const char *name, enum txo_outbox_status *out);
/* True when the state machine above allows from -> to. */
TXO_API bool txo_outbox_can_move(enum txo_outbox_status from, enum txo_outbox_status to);

/* An event to append. All strings are borrowed for the call. */
struct txo_outbox_event {
    const char *aggregate_type;  /* "order"; at most 64 bytes */
    const char *aggregate_id;    /* "42", a UUID: any text of 1..255 characters */
    const char *event_type;      /* "OrderCreated"; at most 128 bytes */
    const char *payload_json;    /* a JSON document */
    size_t payload_len;          /* 0 = strlen(payload_json) */
    const char *idempotency_key; /* unique per event, e.g. "order:42:created"; <= 255 bytes */
    /* The trace context of the operation that appends it (txo/trace.h: the request's span, or
     * a child of it); NULL: none. Stored with the event, sent with it by the relay, continued
     * by its consumers. */
    const struct txo_trace_ctx *trace;
};

enum txo_outbox_append_flags {
    /* An event with the same idempotency key already there is not an error: nothing is
     * written and *inserted is false. This is what makes re-run saga steps safe. */
    TXO_OUTBOX_IGNORE_DUPLICATE = 1 << 0,
};

/*
 * Appends ev to the outbox inside tx (no commit: it commits with the caller's transaction).
 * *inserted (may be NULL) tells whether a row was written. *id (may be NULL) receives the new
 * row id (0 when a duplicate was ignored).
 *
 * The event is numbered in its aggregate (outbox_events.sequence, 1, 2, 3, ...) from the
 * aggregate's counter row in outbox_aggregates (the counter a trigger keeps for the rows
 * other applications insert), which stays locked until tx ends: another transaction
 * appending to the same aggregate waits for this one to commit or roll back, which makes
 * sequence order, and so publish order, commit order. Keep transactions that append short,
 * and append to several aggregates in one order (a lock order, as for any rows) to avoid
 * deadlocks, which txo_db_transact() retries.
 * Errors: TXO_EINVAL (missing or oversized field), TXO_EDUPLICATE (same idempotency key, without
 * TXO_OUTBOX_IGNORE_DUPLICATE), TXO_ECONSTRAINT (payload is not valid JSON), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_outbox_append(struct txo_tx *tx, const struct txo_outbox_event *ev,
                                             unsigned flags, bool *inserted, int64_t *id,
                                             struct txo_error *err);

/*
 * Appends evs[0..n) to the outbox inside tx in one multi-row INSERT: the same rows, columns and
 * defaults as n calls of txo_outbox_append() without flags, in one round trip. Every event is
 * checked as txo_outbox_append() checks it before anything is written. All or nothing: an
 * idempotency key that is already there (or given twice in evs) fails the whole statement,
 * and no row of evs is written. n = 0 writes nothing and succeeds.
 * Errors: TXO_EINVAL (missing or oversized field), TXO_ECONSTRAINT (a payload is not valid
 * JSON), TXO_EDUPLICATE (an idempotency key exists), TXO_ENOMEM, DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_outbox_append_many(struct txo_tx *tx,
                                                  const struct txo_outbox_event *evs, size_t n,
                                                  struct txo_error *err);

/*
 * Counts by state, and two ages measured from created_at (the insert's time):
 * oldest_pending_age_s is the relay's lag, the age of the oldest event not yet published
 * (PENDING or PROCESSING, due or waiting for a retry after a failed publish), 0 when every
 * event is published or failed; oldest_failed_age_s is the age of the oldest FAILED event, 0
 * when none. Both come from one index (idx_outbox_age), so reading them costs the same on an
 * empty table and on a million-row backlog.
 *
 * The lag alone cannot tell one event waiting for its retry (after a failed publish) from a
 * relay that stopped: retry_waiting counts the PENDING events whose next attempt is still
 * ahead, and oldest_due_age_s is the age (from created_at) of the oldest PENDING event a relay
 * could claim now (due, and not held back behind a parked aggregate: txo_relay_list_parked()
 * counts those), 0 when none. A working relay keeps oldest_due_age_s near its poll
 * interval; a stalled one lets it grow with the lag.
 */
struct txo_outbox_stats {
    uint64_t pending;
    uint64_t processing;
    uint64_t published;
    uint64_t failed;
    uint64_t skipped;
    uint64_t dead_letters;
    double oldest_pending_age_s;
    double oldest_failed_age_s;
    uint64_t retry_waiting;
    double oldest_due_age_s;
};
TXO_API TXO_MUST_CHECK int txo_outbox_get_stats(struct txo_db *db, struct txo_outbox_stats *out,
                                                struct txo_error *err);

struct txo_metrics;

/*
 * The outbox's gauges: txo_outbox_pending, _failed, _oldest_pending_age_seconds,
 * _oldest_failed_age_seconds, _retry_waiting, _oldest_due_age_seconds and _dead_letters.
 * _register adds them to reg (at start-up, so they show before the first scrape);
 * _collect sets them from txo_outbox_get_stats() on db (a scrape-time collector's work).
 * Errors: those of txo_metrics_register() and txo_outbox_get_stats().
 */
TXO_API TXO_MUST_CHECK int txo_outbox_metrics_register(struct txo_metrics *reg,
                                                       struct txo_error *err);
TXO_API TXO_MUST_CHECK int txo_outbox_metrics_collect(struct txo_metrics *reg, struct txo_db *db,
                                                      struct txo_error *err);

#endif
