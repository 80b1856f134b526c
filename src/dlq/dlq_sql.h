/*
 * Every SQL statement of the dead-letter module (src/dlq/dlq.c). Above each: the index it
 * relies on, the rows it locks and the isolation it assumes. The schema is
 * sql/migrations/0001_outbox.sql plus 0006_worker_queues.sql (replayed_at, replay_count),
 * 0010_outbox_ordering.sql (skipped_at, status SKIPPED) and 0015_outbox_sequence.sql
 * (sequence, prev_sequence, outbox_aggregates).
 *
 * Lock order of a replay: the dead letter, then its source outbox row. Nothing else locks a
 * dead letter, and the relay never locks a FAILED outbox row (it claims PENDING and
 * expired PROCESSING rows only; the mark that made the row FAILED committed before the dead
 * letter became visible), so a replay cannot deadlock with the relay. A skip then locks the
 * aggregate's counter row, as an append does first: an append waits for the skip (or the skip
 * for the append), and only the skip goes on to lock outbox rows of the aggregate.
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
 * One page of dead events: the dead letters grouped by their source outbox event (a replayed
 * event that fails again gets a letter more), each group as its newest letter (the columns of
 * DLQ_SQL_LIST) plus the group's letter count, replays, newest replay and the event's status
 * now (NULL when the row is gone). A letter without a source event is a group of its own.
 * Groups whose event is SKIPPED or PUBLISHED are left out: nothing is left to do about them.
 * Pages go by the newest letter's id. Index: PRIMARY of both tables (a scan of
 * dead_letter_events, which holds only events that failed every attempt, so it stays small,
 * and one outbox_events lookup per letter: an operator's page, not a hot path). Locks: none
 * (consistent read, READ COMMITTED). Params: after id, limit.
 */
#define DLQ_SQL_LIST_EVENTS                                                                        \
    "SELECT d.id, d.source_event_id, d.event_type, d.payload, d.error, d.created_at, "             \
    "d.replayed_at, d.replay_count, d.skipped_at, g.letters, g.replays, g.last_replayed_at, "      \
    "o.status FROM (SELECT MAX(l.id) AS last_id, COUNT(*) AS letters, "                            \
    "SUM(l.replay_count) AS replays, MAX(l.replayed_at) AS last_replayed_at "                      \
    "FROM dead_letter_events l LEFT JOIN outbox_events e ON e.id = l.source_event_id "             \
    "WHERE e.status IS NULL OR e.status NOT IN ('SKIPPED', 'PUBLISHED') "                          \
    "GROUP BY COALESCE(l.source_event_id, -l.id) HAVING MAX(l.id) > ? "                            \
    "ORDER BY last_id LIMIT ?) AS g JOIN dead_letter_events d ON d.id = g.last_id "                \
    "LEFT JOIN outbox_events o ON o.id = d.source_event_id ORDER BY d.id"

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
 * Replay, step 2: the source outbox row, its state and its place in its aggregate, locked.
 * Index: PRIMARY. Locks: that row (exclusive) until the replay commits. Isolation: READ
 * COMMITTED. Params: outbox event id. Columns: status, aggregate_type, aggregate_id, sequence,
 * prev_sequence.
 */
#define DLQ_SQL_LOCK_SOURCE                                                                        \
    "SELECT status, aggregate_type, aggregate_id, sequence, prev_sequence FROM outbox_events "     \
    "WHERE id = ? FOR UPDATE"

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
 * Skip, same transaction, for an event with a sequence: its aggregate's counter row, locked, so
 * no event of the aggregate is appended until the skip commits. last_kept is the sequence the
 * next appended event will follow. Index: PRIMARY of outbox_aggregates. Locks: that row
 * (exclusive). Isolation: READ COMMITTED. Params: aggregate_type, aggregate_id.
 */
#define DLQ_SQL_LOCK_AGGREGATE                                                                     \
    "SELECT last_kept FROM outbox_aggregates WHERE aggregate_type = ? AND aggregate_id = ? "       \
    "FOR UPDATE"

/*
 * Skip, when the skipped event is the aggregate's last: the next event appended follows what
 * the skipped one followed, so consumers see no gap. Index: PRIMARY of outbox_aggregates.
 * Locks: that row (already locked). Params: prev_sequence of the skipped event,
 * aggregate_type, aggregate_id.
 */
#define DLQ_SQL_UNLINK_LAST                                                                        \
    "UPDATE outbox_aggregates SET last_kept = ? WHERE aggregate_type = ? AND aggregate_id = ?"

/*
 * Skip, when a later event of the aggregate exists: the one that followed the skipped event
 * follows what the skipped one followed. Index: idx_outbox_aggregate (aggregate_type,
 * aggregate_id, id), the aggregate's rows (those retention has not purged). Locks: the
 * aggregate's rows it reads, until commit (READ COMMITTED releases those that do not match
 * at once). Params: prev_sequence of the skipped event, aggregate_type, aggregate_id, sequence
 * of the skipped event.
 */
#define DLQ_SQL_UNLINK_BEFORE_NEXT                                                                 \
    "UPDATE outbox_events FORCE INDEX (idx_outbox_aggregate) SET prev_sequence = ? "               \
    "WHERE aggregate_type = ? AND aggregate_id = ? AND prev_sequence = ?"

/*
 * Skip, step 4: the dead letter records the skip. Index: PRIMARY. Locks: the row (already
 * locked). Isolation: READ COMMITTED. Params: dead letter id.
 */
#define DLQ_SQL_MARK_SKIPPED "UPDATE dead_letter_events SET skipped_at = NOW(6) WHERE id = ?"

#endif
