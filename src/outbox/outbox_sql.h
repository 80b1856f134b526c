/*
 * Every SQL statement of the outbox module (src/outbox/outbox.c), one named macro each.
 * Above each: the index it relies on, the rows it locks and the isolation it assumes.
 * The schema is sql/migrations/0001_outbox.sql, 0012_outbox_contract.sql and
 * 0015_outbox_sequence.sql.
 */
#ifndef TXO_OUTBOX_SQL_H
#define TXO_OUTBOX_SQL_H

#include "relay/relay_sql.h" /* RELAY_SQL__UNPARKED: which due events the relay may claim */

/*
 * Appends n events in one statement (txo_outbox_append and _many, which is n = 1): BEFORE +
 * n x ROW (txo_sql_values_rows). Params per row: aggregate_type, aggregate_id, event_type,
 * payload, idempotency_key, traceparent, tracestate (NULL: none); the other columns keep their
 * defaults (PENDING, next_attempt_at now, attempts 0). Inside the caller's transaction (any
 * isolation).
 * Index: uq_outbox_idempotency_key: a duplicate key is 1062 (-> TXO_EDUPLICATE) and fails the
 * whole statement, which is undone while the transaction goes on; that is how
 * TXO_OUTBOX_IGNORE_DUPLICATE ignores it (an INSERT ... ON DUPLICATE KEY UPDATE would run the
 * sequence trigger first and could use up a number for nothing when another transaction
 * appends the same key at the same moment).
 * The trigger outbox_events_sequence (sql/migrations/0015_outbox_sequence.sql) gives each row
 * its sequence and prev_sequence from outbox_aggregates.
 * Locks: the new rows (and insert-intention/gap locks on the unique index); each aggregate's
 * row of outbox_aggregates, exclusively, until the caller's transaction ends (so appends to
 * one aggregate commit one after the other, in sequence order); on a duplicate, the existing
 * index record (shared).
 */
#define OUTBOX_SQL_INSERT_BEFORE                                                                   \
    "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "               \
    "idempotency_key, traceparent, tracestate) VALUES "
#define OUTBOX_SQL_INSERT_ROW "(?, ?, ?, ?, ?, ?, ?)"

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
