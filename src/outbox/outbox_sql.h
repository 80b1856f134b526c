/*
 * Every SQL statement of the outbox module (src/outbox/outbox.c), one named macro each.
 * Above each: the index it relies on, the rows it locks and the isolation it assumes.
 * The schema is sql/migrations/0001_outbox.sql, 0012_outbox_contract.sql,
 * 0015_outbox_sequence.sql and 0027_outbox_numbered_by_writer.sql.
 */
#ifndef TXO_OUTBOX_SQL_H
#define TXO_OUTBOX_SQL_H

#include "relay/relay_sql.h" /* RELAY_SQL__UNPARKED: which due events the relay may claim */

/*
 * An append of several events numbers them itself, in two statements inside the caller's
 * transaction (any isolation): first the counters, then the events with their numbers. The
 * trigger outbox_events_sequence (sql/migrations/0027_outbox_numbered_by_writer.sql) numbers
 * the rows of an INSERT that leaves prev_sequence out the same way, one row at a time, with two
 * statements of its own per row: about 130 us of server CPU an event, against about 50 for
 * these two statements over a batch (docs/benchmarks.md). For one event the trigger is the
 * cheaper way (one round trip instead of two), so an append of one event leaves its numbers
 * to it (OUTBOX_SQL_INSERT_*); the numbers come out the same either way.
 *
 * The counters: BEFORE + n x ROW + AFTER, one row per event in the append's order, each the
 * trigger's upsert: the aggregate's counter row is inserted (sequence 1) or moved on by one.
 * Rows of one aggregate (as the columns' collation compares them) each see the one before, so
 * its events are numbered in the order of the append. The assignments run left to right:
 * prev_kept reads the old last_kept (what the event follows: the last sequence, or less after
 * a dlq skip), last_kept the new last_sequence. last_due moves to at least a microsecond past
 * the aggregate's last due time, so each aggregate's due times grow strictly and the relay's
 * claim order, (next_attempt_at, id), is sequence order even when ids are not.
 * Params per row: aggregate_type, aggregate_id. Columns, one row per row of the statement, in
 * its order: the event's sequence, its prev_sequence and its due time in microseconds since
 * 1970-01-01 (calendar arithmetic, no time zone).
 * Index: PRIMARY of outbox_aggregates. Locks: each aggregate's row, exclusively, until the
 * caller's transaction ends: a second transaction appending to one of them waits for this one
 * to commit or roll back, so sequence order is commit order.
 */
#define OUTBOX_SQL_NUMBER_BEFORE                                                                   \
    "INSERT INTO outbox_aggregates (aggregate_type, aggregate_id, last_sequence, last_kept, "      \
    "prev_kept, last_due) VALUES "
#define OUTBOX_SQL_NUMBER_ROW "(?, ?, 1, 1, 0, NOW(6))"
#define OUTBOX_SQL_NUMBER_AFTER                                                                    \
    " ON DUPLICATE KEY UPDATE prev_kept = last_kept, last_sequence = last_sequence + 1, "          \
    "last_kept = last_sequence, "                                                                  \
    "last_due = GREATEST(VALUES(last_due), last_due + INTERVAL 1 MICROSECOND) "                    \
    "RETURNING last_sequence, prev_kept, "                                                         \
    "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', last_due)"

/*
 * The events: BEFORE + n x ROW, one statement (txo_sql_values_rows). Params per row:
 * aggregate_type, aggregate_id, event_type, payload, idempotency_key, traceparent, tracestate
 * (NULL: none); in the NUMBERED form also sequence, prev_sequence, and the due time in
 * microseconds since 1970-01-01 (OUTBOX_SQL_NUMBER_*), while the plain form, for one event,
 * has the trigger number it. The other columns keep their defaults (PENDING, attempts 0, and
 * in the plain form next_attempt_at now).
 * Index: uq_outbox_idempotency_key: a duplicate key is 1062 (-> TXO_EDUPLICATE) and fails the
 * whole statement, which is undone while the transaction goes on: the trigger's numbering with
 * it, or, in the NUMBERED form, the numbers are given back (OUTBOX_SQL_UNNUMBER). That is how
 * TXO_OUTBOX_IGNORE_DUPLICATE ignores it without a gap in the numbers.
 * Locks: the new rows (and insert-intention/gap locks on the unique index); in the plain form
 * the aggregate's counter row, as OUTBOX_SQL_NUMBER_*; on a duplicate, the existing index
 * record (shared).
 */
#define OUTBOX_SQL_INSERT_BEFORE                                                                   \
    "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "               \
    "idempotency_key, traceparent, tracestate) VALUES "
#define OUTBOX_SQL_INSERT_ROW "(?, ?, ?, ?, ?, ?, ?)"
#define OUTBOX_SQL_INSERT_NUMBERED_BEFORE                                                          \
    "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "               \
    "idempotency_key, traceparent, tracestate, sequence, prev_sequence, next_attempt_at) VALUES "
#define OUTBOX_SQL_INSERT_NUMBERED_ROW                                                             \
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, TIMESTAMP'1970-01-01 00:00:00' + INTERVAL ? MICROSECOND)"

/*
 * Gives an event's number back when the events' INSERT failed: its aggregate's counter as it
 * was before the event's upsert (run for the events in reverse order, that is the counter
 * before the append), but for last_due, a few microseconds later, which moves the next
 * event's due time as far. Its row is still this transaction's (locked by
 * OUTBOX_SQL_NUMBER_*), so nothing was numbered in between. Index: PRIMARY of
 * outbox_aggregates. Params: sequence - 1, prev_sequence, aggregate_type, aggregate_id.
 */
#define OUTBOX_SQL_UNNUMBER                                                                        \
    "UPDATE outbox_aggregates SET last_sequence = ?, last_kept = ? "                               \
    "WHERE aggregate_type = ? AND aggregate_id = ?"

/*
 * Row counts by status. Index: idx_outbox_due (status, next_attempt_at), scanned as a covering
 * index (GROUP BY on its first column). Locks: none (consistent read, READ COMMITTED).
 */
#define OUTBOX_SQL_COUNT_BY_STATUS "SELECT status, COUNT(*) FROM outbox_events GROUP BY status"

/* Dead letters. Index: the primary key (full count). Locks: none (consistent read). */
#define OUTBOX_SQL_COUNT_DEAD_LETTERS "SELECT COUNT(*) FROM dead_letter_events"

/*
 * Ages in microseconds of the oldest PENDING, PROCESSING and FAILED events by created_at
 * (each NULL when there is none), so the lag counts every event not yet published, due or
 * backing off. Index: idx_outbox_age (status, created_at): each MIN() is one dive to the first
 * entry of its status range (EXPLAIN: "Select tables optimized away"), whatever the backlog.
 * Locks: none (consistent read, READ COMMITTED). Columns: pending, processing, failed.
 */
#define OUTBOX_SQL__AGE_US(status)                                                                 \
    "TIMESTAMPDIFF(MICROSECOND, (SELECT MIN(created_at) FROM outbox_events WHERE status = "        \
    "'" status "'), NOW(6))"
#define OUTBOX_SQL_OLDEST_AGES_US                                                                  \
    "SELECT " OUTBOX_SQL__AGE_US("PENDING") ", " OUTBOX_SQL__AGE_US(                               \
        "PROCESSING") ", " OUTBOX_SQL__AGE_US("FAILED")

/*
 * What tells one event backing off from a stalled relay: how many PENDING events wait for a
 * retry (next_attempt_at in the future), and the age in microseconds by created_at of the
 * oldest PENDING event the relay could claim now: due (next_attempt_at <= now) and not held
 * back behind a parked aggregate (the relay's own rule, RELAY_SQL__UNPARKED; those events are
 * counted by the parked aggregates instead). NULL when there is none. A relay that keeps up
 * leaves no such event behind for long, whatever waits for a retry or behind a parked event.
 * Index: the count is a range of idx_outbox_due (status, next_attempt_at), read from the index
 * alone, as long as the events backing off. The age walks idx_outbox_age (status, created_at)
 * from the oldest PENDING event, with one primary key probe of outbox_parked per row, and
 * stops at the first claimable one: it reads one entry plus the older events still backing
 * off or held back. FORCE INDEX keeps the optimizer from reading every due row of
 * idx_outbox_due for it instead. Locks: none (consistent read, READ COMMITTED).
 * Columns: waiting, oldest due age.
 */
#define OUTBOX_SQL_RETRY_WAIT                                                                      \
    "SELECT (SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' "                         \
    "AND next_attempt_at > NOW(6)), TIMESTAMPDIFF(MICROSECOND, (SELECT e.created_at "              \
    "FROM outbox_events e FORCE INDEX (idx_outbox_age) WHERE e.status = 'PENDING' "                \
    "AND e.next_attempt_at <= NOW(6) " RELAY_SQL__UNPARKED "ORDER BY e.created_at LIMIT 1), "      \
    "NOW(6))"

/*
 * With a binlog source (txo_binlog_published_through()), published rows stay PENDING: what
 * still waits is only the PENDING rows above the id it published through. Their count and the
 * age in microseconds of the oldest by created_at (NULL when none). Index: PRIMARY, the range
 * above the id (the events the source has not passed yet: about one run). Locks: none
 * (consistent read, READ COMMITTED). Params: the id. Columns: count, oldest age.
 */
#define OUTBOX_SQL_PENDING_ABOVE                                                                   \
    "SELECT COUNT(*), TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)) FROM outbox_events "     \
    "WHERE id > ? AND status = 'PENDING'"

#endif
