/*
 * Every SQL statement of the partitioned outbox (src/partition/), one named macro each. Above
 * each: the index it relies on, the rows it locks and the isolation it assumes. The layout is
 * described in include/txo/partition.h.
 *
 * DDL takes no bound values: the statements marked "DDL" are put together from the pieces below,
 * integers this module computes and the column names of information_schema, never from input.
 */
#ifndef TXO_PARTITION_SQL_H
#define TXO_PARTITION_SQL_H

#define PARTITION_TABLE     "outbox_events"
#define PARTITION_NEW_TABLE "outbox_events_txo_new" /* the other layout, while it fills */
#define PARTITION_OLD_TABLE "outbox_events_txo_old" /* the live table after the swap */
#define PARTITION_KEYS      "outbox_keys"

/* ---- reading the layout ---- */

/*
 * The partitions of a table in order (none: one row with a NULL name). No lock (data
 * dictionary). Params: table name. Columns: name, bound ("MAXVALUE" for pmax), rows estimate.
 */
#define PARTITION_SQL_LIST                                                                         \
    "SELECT PARTITION_NAME, PARTITION_DESCRIPTION, TABLE_ROWS FROM information_schema.PARTITIONS " \
    "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY PARTITION_ORDINAL_POSITION"

/*
 * The newest (_NEWEST) or oldest (_OLDEST) event of an id range, one partition's. Index:
 * PRIMARY, one dive into the pruned partition. Locks: none (consistent read).
 * Params: lower, upper. Columns: id, created_at.
 */
#define PARTITION_SQL_NEWEST                                                                       \
    "SELECT id, created_at FROM outbox_events WHERE id >= ? AND id < ? ORDER BY id DESC LIMIT 1"
#define PARTITION_SQL_OLDEST                                                                       \
    "SELECT id, created_at FROM outbox_events WHERE id >= ? AND id < ? ORDER BY id LIMIT 1"

/* The largest id, 0 when empty. Index: PRIMARY (one dive per partition). No lock. */
#define PARTITION_SQL_MAX_ID "SELECT COALESCE(MAX(id), 0) FROM outbox_events"

/* The smallest id, 0 when empty. Index: PRIMARY. No lock. */
#define PARTITION_SQL_MIN_ID "SELECT COALESCE(MIN(id), 0) FROM outbox_events"

/* The next id after a gap of the copy, NULL when none. Index: PRIMARY. No lock. Params: id. */
#define PARTITION_SQL_NEXT_ID "SELECT MIN(id) FROM outbox_events WHERE id > ?"

/* The cutoff: now minus the age, in the session's time zone (UTC). Params: age seconds. */
#define PARTITION_SQL_CUTOFF "SELECT NOW(6) - INTERVAL ? SECOND"

/*
 * Whether an id range holds an event that is not finished: PROCESSING, FAILED with a dead
 * letter an operator may still replay (a replay moves the FAILED row back to PENDING: txo/dlq.h)
 * (_HELD), or PENDING above a binlog source's high-water id (_PENDING; every PENDING event when
 * there is none). Index: idx_outbox_due (status, ...) in the pruned partition: reads those
 * statuses' entries only (few in an old partition), and idx_dead_letter_source for each FAILED
 * one. Locks: none (consistent read). Params: lower, upper[, the high-water id]. Columns: the
 * smallest such id, NULL when none.
 */
#define PARTITION_SQL_UNFINISHED_HELD                                                              \
    "SELECT MIN(e.id) FROM outbox_events e FORCE INDEX (idx_outbox_due) "                          \
    "WHERE e.status IN ('PROCESSING', 'FAILED') AND e.id >= ? AND e.id < ? "                       \
    "AND (e.status = 'PROCESSING' OR EXISTS (SELECT 1 FROM dead_letter_events d "                  \
    "WHERE d.source_event_id = e.id))"
#define PARTITION_SQL_UNFINISHED_PENDING                                                           \
    "SELECT MIN(id) FROM outbox_events FORCE INDEX (idx_outbox_due) "                              \
    "WHERE status = 'PENDING' AND id >= ? AND id < ? AND id > ?"

/*
 * Archiving a partition before its drop: every column of the next rows of an id range, from
 * the cursor, in id order. Index: PRIMARY, a range of one partition. Locks: none (consistent
 * read: a finished partition's rows no longer change). Params: from (exclusive), upper, limit.
 */
#define PARTITION_SQL_ROWS_FROM                                                                    \
    "SELECT * FROM outbox_events WHERE id > ? AND id < ? ORDER BY id LIMIT ?"

/*
 * The keys of dropped partitions: outbox_keys rows whose event is below the oldest partition
 * left, a batch at a time. Index: idx_outbox_keys_event (event_id), a range from the start.
 * Locks: the deleted rows, until the statement's autocommit (nothing else touches those keys:
 * their events are gone). Params: bound, limit.
 */
#define PARTITION_SQL_DELETE_KEYS_BELOW                                                            \
    "DELETE FROM outbox_keys WHERE event_id < ? ORDER BY event_id LIMIT ?"

/* ---- partition DDL ---- */

/*
 * Every DDL on outbox_events runs under this prefix (txo/partition.h, Locks): the server stops
 * it after %u.%03u seconds, waiting for the metadata lock or not, and appends queue behind it
 * for no longer. A timeout is error 1969 (TXO_ETIMEOUT), and the DDL is tried again.
 */
#define PARTITION_DDL_CAPPED "SET STATEMENT max_statement_time = %u.%03u FOR "

/*
 * The prefix of a DDL that may copy rows instead (REORGANIZE PARTITION): stopped half way, the
 * server can lose the rows not copied yet, so only its wait for the lock is bounded, in the
 * whole seconds lock_wait_timeout counts (an ALTER waits up to twice that). Error 1205.
 */
#define PARTITION_DDL_LOCK_WAIT "SET STATEMENT lock_wait_timeout = 1 FOR "

/* DDL: drops one partition, named after it. */
#define PARTITION_DDL_DROP "ALTER TABLE outbox_events DROP PARTITION "
/* DDL: splits the empty pmax; followed by the new partitions, PARTITION_DDL_ONE each, and
 * PARTITION_DDL_PMAX. */
#define PARTITION_DDL_SPLIT_MAX "ALTER TABLE outbox_events REORGANIZE PARTITION pmax INTO ("
#define PARTITION_DDL_ONE       "PARTITION p%" PRId64 " VALUES LESS THAN (%" PRId64 "), "
#define PARTITION_DDL_PMAX      "PARTITION pmax VALUES LESS THAN MAXVALUE)"

/* ---- layout change ---- */

/*
 * The columns a copy carries: every stored column of the live table (the generated ones are
 * computed again). No lock. Columns: name.
 */
#define PARTITION_SQL_COLUMNS                                                                      \
    "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "          \
    "AND TABLE_NAME = 'outbox_events' AND IS_GENERATED = 'NEVER' ORDER BY ORDINAL_POSITION"

/* Whether a table exists. Params: name. Columns: count. */
#define PARTITION_SQL_TABLE_EXISTS                                                                 \
    "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "              \
    "AND TABLE_NAME = ?"

/* DDL: a fresh start of a layout change (the copy triggers go first: they write to the new
 * table). */
#define PARTITION_DDL_DROP_COPY_INS "DROP TRIGGER IF EXISTS outbox_events_txo_copy_ins"
#define PARTITION_DDL_DROP_COPY_UPD "DROP TRIGGER IF EXISTS outbox_events_txo_copy_upd"
#define PARTITION_DDL_DROP_COPY_DEL "DROP TRIGGER IF EXISTS outbox_events_txo_copy_del"
#define PARTITION_DDL_DROP_NEW      "DROP TABLE IF EXISTS outbox_events_txo_new"
#define PARTITION_DDL_CREATE_NEW    "CREATE TABLE outbox_events_txo_new LIKE outbox_events"

/*
 * DDL: the new table partitioned (enable): without the unique key, and with id declared at the
 * end of the two indexes that are read in (column, id) order. InnoDB stores it there anyway (a
 * secondary index holds the primary key), so they cost the same; but the partition handler
 * merges the partitions' index walks in order only by declared columns: without it, the
 * relay's claim (ORDER BY next_attempt_at, id) would read and sort every due row. Then the
 * partitions, as PARTITION_DDL_SPLIT_MAX.
 */
#define PARTITION_DDL_NEW_DROP_UNIQUE                                                              \
    "ALTER TABLE outbox_events_txo_new DROP INDEX uq_outbox_idempotency_key, "                     \
    "DROP INDEX idx_outbox_due, ADD INDEX idx_outbox_due (status, next_attempt_at, id), "          \
    "DROP INDEX idx_outbox_age, ADD INDEX idx_outbox_age (status, created_at, id)"
#define PARTITION_DDL_NEW_PARTITION "ALTER TABLE outbox_events_txo_new PARTITION BY RANGE (id) ("
/* DDL: the new table unpartitioned (disable), then its unique key (MariaDB takes REMOVE
 * PARTITIONING alone). */
#define PARTITION_DDL_NEW_UNPARTITION "ALTER TABLE outbox_events_txo_new REMOVE PARTITIONING"
#define PARTITION_DDL_NEW_ADD_UNIQUE                                                               \
    "ALTER TABLE outbox_events_txo_new ADD UNIQUE KEY uq_outbox_idempotency_key (idempotency_key)"

/*
 * DDL: the key table of the partitioned layout. One row per event: the key is the primary
 * key (the uniqueness check), idx_outbox_keys_event serves the delete of a dropped
 * partition's keys. Narrow: about 60 bytes of row per key of 20 characters.
 */
#define PARTITION_DDL_DROP_KEYS "DROP TABLE IF EXISTS outbox_keys"
#define PARTITION_DDL_CREATE_KEYS                                                                  \
    "CREATE TABLE outbox_keys (idempotency_key VARCHAR(255) CHARACTER SET utf8mb4 "                \
    "COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, event_id BIGINT NOT NULL, "                         \
    "KEY idx_outbox_keys_event (event_id)) ENGINE=InnoDB"

/*
 * The per-aggregate numbering of an append, as in sql/migrations/0015_outbox_sequence.sql
 * (read it for the why): takes the aggregate's counter row and gives the event its sequence,
 * prev_sequence and due time. A body fragment of the BEFORE INSERT triggers below, which
 * declare `given`.
 */
#define PARTITION__SEQUENCE_ASSIGN                                                                 \
    "INSERT INTO outbox_aggregates "                                                               \
    "(aggregate_type, aggregate_id, last_sequence, last_kept, prev_kept, last_due) "               \
    "VALUES (NEW.aggregate_type, NEW.aggregate_id, @txo_seq := COALESCE(given, 1), "               \
    "COALESCE(given, 1), @txo_prev := 0, @txo_due := NEW.next_attempt_at) "                        \
    "ON DUPLICATE KEY UPDATE prev_kept = @txo_prev := last_kept, "                                 \
    "last_sequence = @txo_seq := GREATEST(last_sequence + 1, COALESCE(given, 0)), "                \
    "last_kept = last_sequence, last_due = @txo_due := "                                           \
    "GREATEST(VALUES(last_due), last_due + INTERVAL 1 MICROSECOND); "                              \
    "IF given IS NOT NULL AND given <> @txo_seq THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = "  \
    "'outbox_events.sequence must be greater than the aggregate''s last sequence'; END IF; "       \
    "SET NEW.sequence = @txo_seq, NEW.prev_sequence = @txo_prev, NEW.next_attempt_at = @txo_due; "

/*
 * DDL: the triggers of the partitioned layout on the new table.
 * outbox_events_sequence_p: an append (no id given) whose key is in outbox_keys takes the
 * existing event's id, so the INSERT fails on the primary key (1062; INSERT IGNORE skips it, ON
 * DUPLICATE KEY UPDATE updates that row); any other append is numbered. A row given an id is
 * a copy and keeps its numbers. Index: outbox_keys PRIMARY (one dive; a consistent read: a key
 * another transaction is inserting now is caught by outbox_events_key_p instead).
 * outbox_events_key_p: records the key; a duplicate is 1062 on outbox_keys. Locks: the new key.
 * outbox_events_unkey_p: a deleted event's key goes with it. Index: outbox_keys PRIMARY.
 */
#define PARTITION_DDL_TRIGGER_SEQUENCE_P                                                           \
    "CREATE TRIGGER outbox_events_sequence_p BEFORE INSERT ON outbox_events_txo_new "              \
    "FOR EACH ROW BEGIN DECLARE given BIGINT UNSIGNED DEFAULT NEW.sequence; "                      \
    "DECLARE existing BIGINT DEFAULT NULL; "                                                       \
    "IF NEW.id IS NULL OR NEW.id = 0 THEN "                                                        \
    "SET existing = (SELECT event_id FROM outbox_keys "                                            \
    "WHERE idempotency_key = NEW.idempotency_key); "                                               \
    "IF existing IS NOT NULL THEN SET NEW.id = existing; "                                         \
    "ELSE " PARTITION__SEQUENCE_ASSIGN "END IF; END IF; END"
#define PARTITION_DDL_TRIGGER_KEY_P                                                                \
    "CREATE TRIGGER outbox_events_key_p AFTER INSERT ON outbox_events_txo_new FOR EACH ROW "       \
    "INSERT INTO outbox_keys (idempotency_key, event_id) VALUES (NEW.idempotency_key, NEW.id)"
#define PARTITION_DDL_TRIGGER_UNKEY_P                                                              \
    "CREATE TRIGGER outbox_events_unkey_p AFTER DELETE ON outbox_events_txo_new FOR EACH ROW "     \
    "DELETE FROM outbox_keys WHERE idempotency_key = OLD.idempotency_key AND event_id = OLD.id"

/*
 * DDL: the unpartitioned layout's trigger on the new table (the way back): the trigger of
 * 0015_outbox_sequence.sql (the existing key found through uq_outbox_idempotency_key), except
 * that a row given an id is a copy and keeps its numbers. It names outbox_events, the table it
 * is on after the swap; before, it only sees copies, which never read it.
 */
#define PARTITION_DDL_TRIGGER_SEQUENCE                                                             \
    "CREATE TRIGGER outbox_events_sequence BEFORE INSERT ON outbox_events_txo_new "                \
    "FOR EACH ROW BEGIN DECLARE given BIGINT UNSIGNED DEFAULT NEW.sequence; "                      \
    "IF NEW.id IS NULL OR NEW.id = 0 THEN IF NOT EXISTS (SELECT 1 FROM outbox_events "             \
    "WHERE idempotency_key = NEW.idempotency_key) THEN " PARTITION__SEQUENCE_ASSIGN                \
    "END IF; END IF; END"

/*
 * DDL: the copy triggers on the live table. Each insert and update is written to the new
 * table (an upsert: the batch copy may have been there first), each delete removed from it, in
 * the writer's transaction. Index: the new table's PRIMARY. Locks: the copied row.
 * Put together as _INS or _UPD, the column list, _VALUES, NEW.<column> for each, _UPDATE,
 * "<column> = NEW.<column>" for each.
 */
#define PARTITION_DDL__COPY_UPSERT "FOR EACH ROW INSERT INTO outbox_events_txo_new ("
#define PARTITION_DDL_COPY_INS                                                                     \
    "CREATE TRIGGER outbox_events_txo_copy_ins AFTER INSERT ON "                                   \
    "outbox_events " PARTITION_DDL__COPY_UPSERT
#define PARTITION_DDL_COPY_UPD                                                                     \
    "CREATE TRIGGER outbox_events_txo_copy_upd AFTER UPDATE ON "                                   \
    "outbox_events " PARTITION_DDL__COPY_UPSERT
#define PARTITION_DDL_COPY_VALUES ") VALUES ("
#define PARTITION_DDL_COPY_UPDATE ") ON DUPLICATE KEY UPDATE "
#define PARTITION_DDL_COPY_DEL                                                                     \
    "CREATE TRIGGER outbox_events_txo_copy_del AFTER DELETE ON outbox_events FOR EACH ROW "        \
    "DELETE FROM outbox_events_txo_new WHERE id = OLD.id"

/*
 * One batch of the copy: the live rows of an id range, those already there left as they are
 * (a trigger wrote a newer version). Index: PRIMARY of both tables. Locks: the rows read,
 * shared, until the batch commits, so none changes between its read and its copy (a writer
 * waits for the batch; its trigger then writes the change). Isolation: READ COMMITTED.
 * Put together as _BATCH, the column list, _SELECT, the column list, _FROM.
 * Params: from (exclusive), to (inclusive).
 */
#define PARTITION_SQL_COPY_BATCH  "INSERT INTO outbox_events_txo_new ("
#define PARTITION_SQL_COPY_SELECT ") SELECT "
#define PARTITION_SQL_COPY_FROM                                                                    \
    " FROM outbox_events WHERE id > ? AND id <= ? LOCK IN SHARE MODE "                             \
    "ON DUPLICATE KEY UPDATE id = outbox_events_txo_new.id"

/*
 * DDL: fresh index statistics for the filled table before it goes live. It was created empty,
 * and with the statistics of an empty table the optimizer plans the relay's statements badly
 * (100,000 events drained at 15,000/s instead of 32,000/s) until InnoDB recomputes them in the
 * background. Reads the table (a sample of pages per index); capped like the other DDL.
 */
#define PARTITION_DDL_ANALYZE_NEW "ANALYZE TABLE outbox_events_txo_new"

/* DDL: the swap, atomic. */
#define PARTITION_DDL_SWAP                                                                         \
    "RENAME TABLE outbox_events TO outbox_events_txo_old, "                                        \
    "outbox_events_txo_new TO outbox_events"
/* DDL: the old table, its triggers with it. */
#define PARTITION_DDL_DROP_OLD "DROP TABLE outbox_events_txo_old"

#endif
