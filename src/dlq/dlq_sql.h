/*
 * Every SQL statement of the dead-letter module (src/dlq/dlq.c). Above each: the index it
 * relies on, the rows it locks and the isolation it assumes. The schema is
 * sql/migrations/0001_outbox.sql plus 0006_worker_queues.sql (replayed_at, replay_count) and
 * 0010_outbox_ordering.sql (skipped_at, status SKIPPED).
 *
 * Lock order of a replay: the dead letter, then its source outbox row. Nothing else locks a
 * dead letter, and the relay never locks a FAILED outbox row (it claims PENDING and
 * expired PROCESSING rows only; the mark that made the row FAILED committed before the dead
 * letter became visible), so a replay cannot deadlock with the relay.
 */
#ifndef TXO_DLQ_SQL_H
#define TXO_DLQ_SQL_H

/*
 * One page of dead letters after a cursor, in id order. created_at and replayed_at are
 * DATETIME(6) in UTC (the session time zone) and turned into RFC 3339 by dlq.c.
 * Index: PRIMARY (range id > ?, walked in order, stopped after LIMIT rows).
 * Locks: none (consistent read, READ COMMITTED). Params: after_id, limit.
 */
#define DLQ_SQL_LIST                                                                               \
    "SELECT id, source_event_id, event_type, payload, error, created_at, replayed_at, "            \
    "replay_count, skipped_at FROM dead_letter_events WHERE id > ? ORDER BY id LIMIT ?"

/*
 * Counts all dead letters and those never replayed. Index: PRIMARY (a full scan: the table
 * holds only events that failed every attempt, so it stays small; an operator's list, not a
 * hot path). Locks: none (consistent read, READ COMMITTED).
 */
#define DLQ_SQL_COUNT                                                                              \
    "SELECT COUNT(*), COALESCE(SUM(replayed_at IS NULL AND skipped_at IS NULL), 0) "               \
    "FROM dead_letter_events"

/*
 * Replay, step 1: the dead letter, locked so two replays of it run one after the other.
 * Index: PRIMARY. Locks: that row (exclusive) until the replay commits.
 * Isolation: READ COMMITTED. Params: dead letter id.
 */
#define DLQ_SQL_LOCK_DEAD_LETTER                                                                   \
    "SELECT source_event_id FROM dead_letter_events WHERE id = ? FOR UPDATE"

/*
 * Replay, step 2: the source outbox row and its state, locked. Index: PRIMARY. Locks: that row
 * (exclusive) until the replay commits. Isolation: READ COMMITTED. Params: outbox event id.
 */
#define DLQ_SQL_LOCK_SOURCE "SELECT status FROM outbox_events WHERE id = ? FOR UPDATE"

/*
 * Replay, step 3: FAILED -> PENDING, due now, attempts from zero, no lock. last_error is kept
 * (the next failure replaces it, a publish clears it). Index: PRIMARY; the row moves from the
 * FAILED to the PENDING range of idx_outbox_due, where the relay's claim finds it. Locks: the
 * row (already locked). Isolation: READ COMMITTED. Params: outbox event id.
 */
#define DLQ_SQL_REQUEUE_SOURCE                                                                     \
    "UPDATE outbox_events SET status = 'PENDING', attempts = 0, next_attempt_at = NOW(6), "        \
    "locked_by = NULL, locked_until = NULL WHERE id = ? AND status = 'FAILED'"

/*
 * Replay, step 4: the dead letter records the replay. Index: PRIMARY. Locks: the row (already
 * locked). Isolation: READ COMMITTED. Params: dead letter id.
 */
#define DLQ_SQL_MARK_REPLAYED                                                                      \
    "UPDATE dead_letter_events SET replayed_at = NOW(6), replay_count = replay_count + 1 "         \
    "WHERE id = ?"

/*
 * Skip, step 3 (steps 1 and 2 as a replay's): FAILED -> SKIPPED, no lock. The event is never
 * published; with the relay's ordering by aggregate, the next event of its aggregate is
 * claimed once DLQ_SQL_UNPARK_SOURCE has freed the aggregate. last_error is kept. Index: PRIMARY;
 * the row moves from the FAILED to the SKIPPED range of idx_outbox_due. Locks: the row (already
 * locked). Isolation: READ COMMITTED. Params: outbox event id.
 */
#define DLQ_SQL_SKIP_SOURCE                                                                        \
    "UPDATE outbox_events SET status = 'SKIPPED', locked_by = NULL, locked_until = NULL "          \
    "WHERE id = ? AND status = 'FAILED'"

/*
 * Skip, same transaction: the aggregate the event parked (outbox_parked, written by the
 * relay's mark when it failed) is free again, so the relay claims its next event. A no-op when
 * it parked nothing. Index: uq_parked_event. Locks: that row. Isolation: READ COMMITTED.
 * Params: outbox event id.
 */
#define DLQ_SQL_UNPARK_SOURCE "DELETE FROM outbox_parked WHERE event_id = ?"

/*
 * Skip, step 4: the dead letter records the skip. Index: PRIMARY. Locks: the row (already
 * locked). Isolation: READ COMMITTED. Params: dead letter id.
 */
#define DLQ_SQL_MARK_SKIPPED "UPDATE dead_letter_events SET skipped_at = NOW(6) WHERE id = ?"

#endif
