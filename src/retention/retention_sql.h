/*
 * Every SQL statement of the retention cleaner (src/retention/retention.c), one named macro
 * each. Above each: the index it relies on, the rows it locks and the isolation it assumes.
 *
 * Each table is purged the same way, one short READ COMMITTED transaction per batch:
 *   1. SELECT the keys of the next batch of old terminal rows, walking a secondary index in
 *      order from the purge's cursor (the (order column, key) of the last row of the previous
 *      batch) and stopping after LIMIT rows: a plain consistent read that locks nothing;
 *   2. DELETE those keys through the primary key, re-checking the condition on each row, so a
 *      row that changed between 1 and 2 stays.
 * The FORCE INDEX keeps step 1 an ordered walk of the index: a single
 * `DELETE ... ORDER BY ... LIMIT` cannot carry an index hint (MariaDB and MySQL accept none in
 * a single-table DELETE), and when most of a table is old the optimizer may choose to scan and
 * sort the whole table for it. The cursor keeps each batch from stepping again over the index
 * entries of rows deleted by the previous batches (InnoDB purges them later) and over the rows
 * the first check keeps.
 *
 * _FIRST statements start at the beginning of the range, _AFTER ones after the cursor
 * (params: cursor order value, the same again, cursor key). _DELETE_IN statements end in
 * `IN `, completed by txo_sql_in_list() (count rounded up to a power of two, last key
 * repeated); the values are always bound.
 *
 * The cutoff (`?` below) is one value computed once per purge, NOW(6) - INTERVAL age SECOND
 * (RETENTION_SQL_CUTOFF), bound as text in the session's time zone (UTC).
 */
#ifndef TXO_RETENTION_SQL_H
#define TXO_RETENTION_SQL_H

/* The purge's cutoff: now minus the age. No table. Params: age seconds. */
#define RETENTION_SQL_CUTOFF "SELECT NOW(6) - INTERVAL ? SECOND"

/*
 * Outbox, step 1. Index: idx_outbox_due (status, next_attempt_at [, id]), the PUBLISHED range
 * up to the cutoff, in order. A PUBLISHED row's next_attempt_at (the due time of its last
 * attempt: the relay claims a row only once it is due, and publishes it after) is never later
 * than its published_at, so `next_attempt_at < cutoff` bounds the walk to candidates and
 * `published_at < cutoff`, checked on the row, decides. No new index is needed: the one the
 * relay already maintains serves, and the insert path pays nothing for retention. The rows it
 * reads and keeps are those due before the cutoff but published after it (a backlog published
 * late), each read once per purge thanks to the cursor. Locks: none (consistent read).
 * Params: cutoff, cutoff, [cursor (3)], limit. Columns: id, next_attempt_at.
 */
#define RETENTION_SQL__OUTBOX_SELECT                                                               \
    "SELECT id, next_attempt_at FROM outbox_events FORCE INDEX (idx_outbox_due) "                  \
    "WHERE status = 'PUBLISHED' AND next_attempt_at < ? AND published_at < ? "
#define RETENTION_SQL__ORDER_BY_DUE "ORDER BY next_attempt_at, id LIMIT ?"
#define RETENTION_SQL__AFTER_DUE    "AND (next_attempt_at > ? OR (next_attempt_at = ? AND id > ?)) "

#define RETENTION_SQL_OUTBOX_FIRST RETENTION_SQL__OUTBOX_SELECT RETENTION_SQL__ORDER_BY_DUE
#define RETENTION_SQL_OUTBOX_AFTER                                                                 \
    RETENTION_SQL__OUTBOX_SELECT RETENTION_SQL__AFTER_DUE RETENTION_SQL__ORDER_BY_DUE

/*
 * Outbox, step 2: deletes the selected rows that are still PUBLISHED before the cutoff
 * (PENDING, PROCESSING and FAILED rows are never deleted). Index: PRIMARY (id list); each
 * deleted row also removes its idx_outbox_due and uq_outbox_idempotency_key entries.
 * Locks: the deleted rows, until the batch commits (the relay never locks PUBLISHED rows).
 * Isolation: READ COMMITTED (no gap locks). Params: cutoff, ids...
 */
#define RETENTION_SQL_OUTBOX_DELETE_IN                                                             \
    "DELETE FROM outbox_events WHERE status = 'PUBLISHED' AND published_at < ? AND id IN "

/*
 * Outbox, step 2 of a purge that archives (txo/archive.h): every column of the selected rows
 * still PUBLISHED before the cutoff, which step 3 (RETENTION_SQL_OUTBOX_DELETE_IN, by the ids
 * this returns) deletes once the archive file is written. Index: PRIMARY (id list). Locks: the
 * rows returned, until the batch commits, so none changes between the file and the DELETE.
 * Isolation: READ COMMITTED. Params: cutoff, ids... Columns: the table's, in order.
 */
#define RETENTION_SQL_OUTBOX_ROWS_IN                                                               \
    "SELECT * FROM outbox_events WHERE status = 'PUBLISHED' AND published_at < ? AND id IN "

/*
 * Outbox rows a binlog source published (txo_binlog_published_through()): they stay PENDING,
 * so the age is their created_at, and only ids through the source's high-water id qualify.
 * Step 1. Index: idx_outbox_age (status, created_at [, id]), the PENDING range up to the
 * cutoff, in order, the id checked on each row (rows above it, not yet published, are read and
 * kept: the source's current run). Locks: none (consistent read).
 * Params: cutoff, the high-water id, [cursor (3)], limit. Columns: id, created_at.
 */
#define RETENTION_SQL__OUTBOX_BINLOG_SELECT                                                        \
    "SELECT id, created_at FROM outbox_events FORCE INDEX (idx_outbox_age) "                       \
    "WHERE status = 'PENDING' AND created_at < ? AND id <= ? "
#define RETENTION_SQL__ORDER_BY_CREATED "ORDER BY created_at, id LIMIT ?"
#define RETENTION_SQL__AFTER_CREATED    "AND (created_at > ? OR (created_at = ? AND id > ?)) "
#define RETENTION_SQL_OUTBOX_BINLOG_FIRST                                                          \
    RETENTION_SQL__OUTBOX_BINLOG_SELECT RETENTION_SQL__ORDER_BY_CREATED
#define RETENTION_SQL_OUTBOX_BINLOG_AFTER                                                          \
    RETENTION_SQL__OUTBOX_BINLOG_SELECT RETENTION_SQL__AFTER_CREATED RETENTION_SQL__ORDER_BY_CREATED

/*
 * Step 2 (step 3 when archiving): deletes the selected rows still PENDING before the cutoff
 * (their ids were at most the high-water id when selected). Index: PRIMARY (id list). Locks:
 * the deleted rows, until the batch commits. Isolation: READ COMMITTED. Params: cutoff, ids...
 */
#define RETENTION_SQL_OUTBOX_BINLOG_DELETE_IN                                                      \
    "DELETE FROM outbox_events WHERE status = 'PENDING' AND created_at < ? AND id IN "

/* Archiving, step 2: as RETENTION_SQL_OUTBOX_ROWS_IN for those rows. */
#define RETENTION_SQL_OUTBOX_BINLOG_ROWS_IN                                                        \
    "SELECT * FROM outbox_events WHERE status = 'PENDING' AND created_at < ? AND id IN "

/*
 * Inbox, step 1. Index: idx_inbox_processed (processed_at [, event_id]), the range before the
 * cutoff, in order (rows with processed_at NULL are outside the range and kept).
 * Locks: none (consistent read). Params: cutoff, [cursor (3)], limit.
 * Columns: event_id, processed_at.
 */
#define RETENTION_SQL__INBOX_SELECT                                                                \
    "SELECT event_id, processed_at FROM inbox_events FORCE INDEX (idx_inbox_processed) "           \
    "WHERE processed_at < ? "
#define RETENTION_SQL__ORDER_BY_PROCESSED "ORDER BY processed_at, event_id LIMIT ?"
#define RETENTION_SQL__AFTER_PROCESSED                                                             \
    "AND (processed_at > ? OR (processed_at = ? AND event_id > ?)) "

#define RETENTION_SQL_INBOX_FIRST RETENTION_SQL__INBOX_SELECT RETENTION_SQL__ORDER_BY_PROCESSED
#define RETENTION_SQL_INBOX_AFTER                                                                  \
    RETENTION_SQL__INBOX_SELECT RETENTION_SQL__AFTER_PROCESSED RETENTION_SQL__ORDER_BY_PROCESSED

/*
 * Inbox, step 2 (step 3 when archiving). Index: PRIMARY (event_id list). Locks: the deleted rows
 * until the batch commits; a consumer recording one of these ids at that moment waits for the batch
 * and then inserts it anew (the id was older than the retention age: see txo/inbox.h). Isolation:
 * READ COMMITTED. Params: cutoff, event ids...
 */
#define RETENTION_SQL_INBOX_DELETE_IN                                                              \
    "DELETE FROM inbox_events WHERE processed_at < ? AND event_id IN "

/*
 * Inbox, step 2 of a purge that archives (txo/archive.h): every column of the selected rows
 * still processed before the cutoff, which step 3 (RETENTION_SQL_INBOX_DELETE_IN, by the event
 * ids this returns) deletes once the archive file is written. In step 1's order, which is the
 * file's: processed_at, then event_id byte for byte (a VARBINARY). Index: PRIMARY (event_id
 * list). Locks: the rows returned, until the batch commits, so none changes between the file
 * and the DELETE. Isolation: READ COMMITTED. Params: cutoff, event ids...
 * Columns: the table's, in order.
 */
#define RETENTION_SQL_INBOX_ROWS_IN                                                                \
    "SELECT * FROM inbox_events WHERE processed_at < ? AND event_id IN "
#define RETENTION_SQL_INBOX_ROWS_IN_END " ORDER BY processed_at, event_id FOR UPDATE"

/*
 * Inbox, finishing an archive file an interrupted run left (its rows may still be there): the
 * file's rows deleted by (event_id, processed_at), not by event id alone, so that an event
 * recorded again since its row was deleted (redelivered after its retention) is not deleted
 * with it, unarchived. RETENTION_SQL_INBOX_FINISH + n x RETENTION_SQL_INBOX_FINISH_ROW
 * (txo_sql_values_rows_then) + ")". Index: a point lookup per pair (PRIMARY, or
 * idx_inbox_processed, which holds both columns). Locks: the deleted rows, until the batch
 * commits. Isolation: READ COMMITTED. Params per row: event_id, processed_at.
 */
#define RETENTION_SQL_INBOX_FINISH "DELETE FROM inbox_events WHERE (event_id, processed_at) IN ("
/* A row of its IN list. */
#define RETENTION_SQL_INBOX_FINISH_ROW "(?, ?)"

/*
 * Command queue, step 1. Index: idx_cmdq_due (status, next_attempt_at [, id]), the DONE range
 * up to the cutoff, in order. As for the outbox, a DONE command's next_attempt_at (the due
 * time of its last claim) is never later than the time it was finished (updated_at: nothing
 * changes a DONE row), so the index bounds the walk and `updated_at < cutoff` decides.
 * Locks: none (consistent read). Params: cutoff, cutoff, [cursor (3)], limit.
 * Columns: id, next_attempt_at.
 */
#define RETENTION_SQL__CMDQ_SELECT                                                                 \
    "SELECT id, next_attempt_at FROM command_queue FORCE INDEX (idx_cmdq_due) "                    \
    "WHERE status = 'DONE' AND next_attempt_at < ? AND updated_at < ? "

#define RETENTION_SQL_CMDQ_FIRST RETENTION_SQL__CMDQ_SELECT RETENTION_SQL__ORDER_BY_DUE
#define RETENTION_SQL_CMDQ_AFTER                                                                   \
    RETENTION_SQL__CMDQ_SELECT RETENTION_SQL__AFTER_DUE RETENTION_SQL__ORDER_BY_DUE

/*
 * Command queue, step 2: only DONE commands (FAILED ones stay for operators). Index: PRIMARY
 * (id list). Locks: the deleted rows until the batch commits. Isolation: READ COMMITTED.
 * Params: cutoff, ids...
 */
#define RETENTION_SQL_CMDQ_DELETE_IN                                                               \
    "DELETE FROM command_queue WHERE status = 'DONE' AND updated_at < ? AND id IN "

/*
 * Dead letters, step 1: letters replayed before the cutoff (their event went back to the
 * outbox; the letter is only history now). Letters never replayed are kept: they are what an
 * operator has to look at. Index: idx_dead_letter_replayed (replayed_at [, id], migration
 * 0012), the range before the cutoff, in order (NULL, never replayed, is outside it).
 * Locks: none (consistent read). Params: cutoff, [cursor (3)], limit. Columns: id, replayed_at.
 */
#define RETENTION_SQL__DLQ_SELECT                                                                  \
    "SELECT id, replayed_at FROM dead_letter_events FORCE INDEX (idx_dead_letter_replayed) "       \
    "WHERE replayed_at < ? "
#define RETENTION_SQL__ORDER_BY_REPLAYED "ORDER BY replayed_at, id LIMIT ?"
#define RETENTION_SQL__AFTER_REPLAYED    "AND (replayed_at > ? OR (replayed_at = ? AND id > ?)) "

#define RETENTION_SQL_DLQ_FIRST RETENTION_SQL__DLQ_SELECT RETENTION_SQL__ORDER_BY_REPLAYED
#define RETENTION_SQL_DLQ_AFTER                                                                    \
    RETENTION_SQL__DLQ_SELECT RETENTION_SQL__AFTER_REPLAYED RETENTION_SQL__ORDER_BY_REPLAYED

/*
 * Dead letters, step 2. Index: PRIMARY (id list). Locks: the deleted rows until the batch
 * commits (a replay of one of them at that moment waits, then finds no letter).
 * Isolation: READ COMMITTED. Params: cutoff, ids...
 */
#define RETENTION_SQL_DLQ_DELETE_IN                                                                \
    "DELETE FROM dead_letter_events WHERE replayed_at < ? AND id IN "

/*
 * Dead letters, step 2 of a purge that archives: every column of the selected letters still
 * replayed before the cutoff, as RETENTION_SQL_OUTBOX_ROWS_IN. Index: PRIMARY (id list).
 * Locks: the rows returned, until the batch commits. Isolation: READ COMMITTED.
 * Params: cutoff, ids... Columns: the table's, in order.
 */
#define RETENTION_SQL_DLQ_ROWS_IN                                                                  \
    "SELECT * FROM dead_letter_events WHERE replayed_at < ? AND id IN "

/* Ends the outbox's and dead letters' _ROWS_IN statements: ids ascending, as the archive file
 * lists them; locked. */
#define RETENTION_SQL_ROWS_IN_END " ORDER BY id FOR UPDATE"

/*
 * Outbox, finishing an archive file an interrupted run left (its rows may still be there): the
 * file's rows, archived by either outbox purge (PUBLISHED rows, or PENDING ones a binlog source
 * published, which a hand-back may have marked PUBLISHED since), deleted by id. Index: PRIMARY
 * (id list). Locks: the deleted rows, until the batch commits. Isolation: READ COMMITTED.
 * Params: cutoff (RETENTION_ARCHIVED_CUTOFF), ids...
 */
#define RETENTION_SQL_OUTBOX_FINISH_IN                                                             \
    "DELETE FROM outbox_events WHERE status IN ('PUBLISHED', 'PENDING') AND "                      \
    "COALESCE(published_at, created_at) < ? AND id IN "

/*
 * The cutoff bound when the rows of an archive file left by an interrupted run are deleted:
 * those rows were old enough when they were archived, whatever age this run uses.
 */
#define RETENTION_ARCHIVED_CUTOFF "9999-12-31 23:59:59.999999"

#endif
