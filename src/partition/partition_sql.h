/*
 * Every SQL statement of the partitioned layouts (src/partition/), one named macro each: the
 * outbox's upkeep (PARTITION_*), the inbox's (INBOX_*), and the layout change of either table
 * (LAYOUT_*, macros of the table's name). Above each: the index it relies on, the rows it locks
 * and the isolation it assumes. The layouts are described in include/txo/partition.h.
 *
 * DDL takes no bound values: the statements marked "DDL" are put together from the pieces below,
 * integers this module computes and the column names of information_schema, never from input.
 */
#ifndef TXO_PARTITION_SQL_H
#define TXO_PARTITION_SQL_H

#define PARTITION_TABLE "outbox_events"
#define PARTITION_KEYS  "outbox_keys"
#define INBOX_TABLE     "inbox_events"
#define INBOX_KEYS      "inbox_keys"

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
 * Every DDL on a partitioned table runs under this prefix (txo/partition.h, Locks): the server
 * stops it after %u.%03u seconds, waiting for the metadata lock or not, and appends queue behind it
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
/* DDL: splits the empty pmax; followed by the new partitions, PARTITION_DDL_ONE each (by id;
 * INBOX_DDL_ONE by time), and PARTITION_DDL_PMAX. */
#define PARTITION_DDL_SPLIT_MAX "ALTER TABLE outbox_events REORGANIZE PARTITION pmax INTO ("
#define PARTITION_DDL_ONE       "PARTITION p%" PRId64 " VALUES LESS THAN (%" PRId64 "), "
#define PARTITION_DDL_PMAX      "PARTITION pmax VALUES LESS THAN MAXVALUE)"

/* ---- the partitioned inbox ---- */

/*
 * Times. inbox_events is partitioned on TO_SECONDS(created_at), seconds since year 0; this
 * module works in Unix seconds (INBOX_TO_SECONDS_1970 apart) and turns them into DATETIME(6)
 * with INBOX__AT, in the session's time zone (UTC, as every txo connection). TO_SECONDS drops
 * the fraction, so created_at < INBOX__AT(b) exactly when TO_SECONDS(created_at) < b's bound.
 */
#define INBOX_TO_SECONDS_1970 INT64_C(62167219200)
#define INBOX__AT             "TIMESTAMPADD(SECOND, ?, '1970-01-01')"

/* The time now and the cutoff (now minus the age), in Unix seconds and as DATETIME(6).
 * Params: age seconds, age seconds. Columns: now, cutoff seconds, cutoff. */
#define INBOX_SQL_TIMES                                                                            \
    "SELECT UNIX_TIMESTAMP(), UNIX_TIMESTAMP(NOW() - INTERVAL ? SECOND), "                         \
    "NOW(6) - INTERVAL ? SECOND"

/* Whether pmax holds rows. Index: PRIMARY, one partition. No lock. */
#define INBOX_SQL_PMAX_USED "SELECT EXISTS (SELECT 1 FROM inbox_events PARTITION (pmax))"

/* The oldest processed time in Unix seconds, now when none: where the first partitions of a
 * layout change start. Index: idx_inbox_processed, one dive. No lock. */
#define INBOX_SQL_OLDEST                                                                           \
    "SELECT COALESCE(UNIX_TIMESTAMP(MIN(processed_at)), UNIX_TIMESTAMP()) FROM inbox_events"

/*
 * Retention, step 1: rows of an expired partition that are not finished, not processed yet
 * (processed_at NULL) or processed after the cutoff, move to the partition of now: their
 * created_at becomes now (an UPDATE of the partitioning column moves the row; the trigger
 * inbox_events_rekey_p follows with its key). So de-duplication keeps them as long as it would
 * on the unpartitioned table, which keeps a row by processed_at. Index: idx_inbox_processed
 * (the NULL range and the range from the cutoff) in the pruned partition. Locks: the rows moved,
 * until the autocommit. Params: lower, upper (Unix seconds), cutoff, limit.
 */
#define INBOX_SQL_MOVE_FORWARD                                                                     \
    "UPDATE inbox_events SET created_at = NOW(6) WHERE created_at >= " INBOX__AT                   \
    " AND created_at < " INBOX__AT " AND (processed_at IS NULL OR processed_at >= ?) LIMIT ?"

/*
 * Retention, step 2 with an archive: every column of the next rows of a partition, in the
 * order of its archive files (processed_at, then event_id's bytes), from the start (_FIRST) or
 * after the last row archived (_FROM). Index: idx_inbox_processed (processed_at, event_id,
 * created_at) in the pruned partition, walked in order. Locks: none (consistent read: the
 * partition's rows are finished and no longer change). Params: lower, upper[, time, time,
 * key], limit.
 */
#define INBOX__ROWS                                                                                \
    "SELECT * FROM inbox_events FORCE INDEX (idx_inbox_processed) WHERE created_at >= " INBOX__AT  \
    " AND created_at < " INBOX__AT
#define INBOX__ROWS_ORDER    " ORDER BY processed_at, event_id LIMIT ?"
#define INBOX_SQL_ROWS_FIRST INBOX__ROWS INBOX__ROWS_ORDER
#define INBOX_SQL_ROWS_FROM                                                                        \
    INBOX__ROWS " AND (processed_at > ? OR (processed_at = ? AND event_id > ?))" INBOX__ROWS_ORDER

/* Whether a row is still in a partition: the last row of the newest archive file, to resume
 * after it. Index: PRIMARY (event_id, created_at) in the pruned partition. No lock.
 * Params: event_id, processed_at, lower, upper. */
#define INBOX_SQL_HAS_ROW                                                                          \
    "SELECT COUNT(*) FROM inbox_events WHERE event_id = ? AND processed_at = ? "                   \
    "AND created_at >= " INBOX__AT " AND created_at < " INBOX__AT

/*
 * Retention, step 3: the keys of a partition's rows, before its drop, a batch at a time (so
 * that a key never outlives its row: the lookups of inbox_ids and the triggers agree on which
 * ids are recorded). A row moved forward took its key out of the range. Index:
 * idx_inbox_keys_created, the partition's range. Locks: the deleted rows, until the
 * autocommit. Params: lower, upper (Unix seconds), limit.
 */
#define INBOX_SQL_DELETE_KEYS                                                                      \
    "DELETE FROM inbox_keys WHERE created_at >= " INBOX__AT " AND created_at < " INBOX__AT         \
    " ORDER BY created_at LIMIT ?"

/* DDL: as the outbox's: drop one partition; split the empty pmax into INBOX_DDL_ONE each
 * (named after the bound's time in UTC, with its TO_SECONDS value), then PARTITION_DDL_PMAX. */
#define INBOX_DDL_DROP      "ALTER TABLE inbox_events DROP PARTITION "
#define INBOX_DDL_SPLIT_MAX "ALTER TABLE inbox_events REORGANIZE PARTITION pmax INTO ("
#define INBOX_DDL_ONE       "PARTITION p%s VALUES LESS THAN (%" PRId64 "), "

/* ---- layout change: the outbox's own pieces ---- */

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
/* DDL: the new table's unique key, once unpartitioned (disable). */
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
 * declare `given`, and run it only for a row that does not give prev_sequence: one whose
 * writer numbered it (libtxo's append, 0027_outbox_numbered_by_writer.sql) is left alone.
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
 * DUPLICATE KEY UPDATE updates that row); any other append is numbered unless it gives
 * prev_sequence. A row given an id is a copy and keeps its numbers. Index: outbox_keys PRIMARY (one
 * dive; a consistent read: a key another transaction is inserting now is caught by
 * outbox_events_key_p instead). outbox_events_key_p: records the key; a duplicate is 1062 on
 * outbox_keys. Locks: the new key. outbox_events_unkey_p: a deleted event's key goes with it.
 * Index: outbox_keys PRIMARY.
 */
#define PARTITION_DDL_TRIGGER_SEQUENCE_P                                                           \
    "CREATE TRIGGER outbox_events_sequence_p BEFORE INSERT ON outbox_events_txo_new "              \
    "FOR EACH ROW BEGIN DECLARE given BIGINT UNSIGNED DEFAULT NEW.sequence; "                      \
    "DECLARE existing BIGINT DEFAULT NULL; "                                                       \
    "IF NEW.id IS NULL OR NEW.id = 0 THEN "                                                        \
    "SET existing = (SELECT event_id FROM outbox_keys "                                            \
    "WHERE idempotency_key = NEW.idempotency_key); "                                               \
    "IF existing IS NOT NULL THEN SET NEW.id = existing; "                                         \
    "ELSEIF NEW.prev_sequence IS NULL THEN " PARTITION__SEQUENCE_ASSIGN "END IF; END IF; END"
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
    "IF (NEW.id IS NULL OR NEW.id = 0) AND NEW.prev_sequence IS NULL THEN "                        \
    "IF NOT EXISTS (SELECT 1 FROM outbox_events "                                                  \
    "WHERE idempotency_key = NEW.idempotency_key) THEN " PARTITION__SEQUENCE_ASSIGN                \
    "END IF; END IF; END"

/* ---- layout change: the inbox's own pieces ---- */

/*
 * DDL: the new inbox table partitioned (enable). MariaDB wants the partitioning column in the
 * primary key: (event_id, created_at), so a lookup by event_id alone (the record's duplicate
 * check) is one dive per partition. idx_inbox_processed declares event_id after processed_at:
 * InnoDB stores it there anyway, but the partition handler merges the partitions' walks in
 * order only by declared columns (the cleaner's ORDER BY processed_at, event_id). Then the
 * partitions by time, INBOX_DDL_ONE each. The way back: the primary key (event_id) and the
 * index as they were, once unpartitioned.
 */
#define INBOX_DDL_NEW_PRIMARY_P                                                                    \
    "ALTER TABLE inbox_events_txo_new DROP PRIMARY KEY, ADD PRIMARY KEY (event_id, created_at), "  \
    "DROP INDEX idx_inbox_processed, ADD INDEX idx_inbox_processed (processed_at, event_id)"
#define INBOX_DDL_NEW_PARTITION                                                                    \
    "ALTER TABLE inbox_events_txo_new PARTITION BY RANGE (TO_SECONDS(created_at)) ("
#define INBOX_DDL_NEW_PRIMARY                                                                      \
    "ALTER TABLE inbox_events_txo_new DROP PRIMARY KEY, ADD PRIMARY KEY (event_id), "              \
    "DROP INDEX idx_inbox_processed, ADD INDEX idx_inbox_processed (processed_at)"

/*
 * DDL: the key table of the partitioned inbox, one row per recorded event: event_id is the
 * primary key (the duplicate check across partitions), created_at the row's, which places it
 * in its partition; idx_inbox_keys_created serves the delete of a dropped partition's keys.
 */
#define INBOX_DDL_DROP_KEYS "DROP TABLE IF EXISTS inbox_keys"
#define INBOX_DDL_CREATE_KEYS                                                                      \
    "CREATE TABLE inbox_keys (event_id VARBINARY(255) NOT NULL PRIMARY KEY, "                      \
    "created_at DATETIME(6) NOT NULL, KEY idx_inbox_keys_created (created_at)) ENGINE=InnoDB"

/*
 * DDL: the triggers of the partitioned inbox, on the new table.
 * inbox_events_key_p: records the event id with the row's created_at, or, when it is there,
 * takes the created_at it was recorded with, so a duplicate fails on the primary key
 * (event_id, created_at) exactly as on one table: 1062, and `ON DUPLICATE KEY UPDATE event_id =
 * event_id` affects no row. One statement on inbox_keys: the upsert inserts the key, or (a
 * duplicate) reads the created_at it holds into @txo_at, changing nothing. Index: inbox_keys
 * PRIMARY. Locks: the key (exclusive, until the transaction ends). An id another open
 * transaction is recording makes the upsert wait; after its COMMIT the upsert finds its key (a
 * duplicate), after its ROLLBACK the id is ours.
 * A key whose row is gone (its partition dropped, the key's delete still to come) is the id's
 * no longer: the id is recorded anew and the key takes the new row's created_at. That check is
 * a locking read of inbox_events by its primary key, one partition, on duplicates only. It
 * names inbox_events, the table the trigger is on after the swap; before, it sees only copies,
 * whose created_at is the key's.
 */
#define INBOX_DDL_TRIGGER_KEY_P                                                                    \
    "CREATE TRIGGER inbox_events_key_p BEFORE INSERT ON inbox_events_txo_new FOR EACH ROW BEGIN "  \
    "INSERT INTO inbox_keys (event_id, created_at) "                                               \
    "VALUES (NEW.event_id, @txo_at := NEW.created_at) "                                            \
    "ON DUPLICATE KEY UPDATE created_at = (@txo_at := created_at); "                               \
    "IF @txo_at <> NEW.created_at AND NOT EXISTS (SELECT 1 FROM inbox_events "                     \
    "WHERE event_id = NEW.event_id AND created_at = @txo_at LOCK IN SHARE MODE) THEN "             \
    "UPDATE inbox_keys SET created_at = NEW.created_at WHERE event_id = NEW.event_id; "            \
    "ELSE SET NEW.created_at = @txo_at; END IF; END"
/* inbox_events_rekey_p: a row whose event id or created_at changes (retention moving an
 * unfinished row forward) takes its key along. inbox_events_unkey_p: a deleted row's key goes
 * with it. Index: inbox_keys PRIMARY. */
#define INBOX_DDL_TRIGGER_REKEY_P                                                                  \
    "CREATE TRIGGER inbox_events_rekey_p AFTER UPDATE ON inbox_events_txo_new FOR EACH ROW "       \
    "BEGIN IF NEW.event_id <> OLD.event_id OR NEW.created_at <> OLD.created_at THEN "              \
    "DELETE FROM inbox_keys WHERE event_id = OLD.event_id; "                                       \
    "INSERT INTO inbox_keys (event_id, created_at) VALUES (NEW.event_id, NEW.created_at); "        \
    "END IF; END"
#define INBOX_DDL_TRIGGER_UNKEY_P                                                                  \
    "CREATE TRIGGER inbox_events_unkey_p AFTER DELETE ON inbox_events_txo_new FOR EACH ROW "       \
    "DELETE FROM inbox_keys WHERE event_id = OLD.event_id AND created_at = OLD.created_at"

/* DDL: the view of the recorded ids (sql/migrations/0023_inbox_ids.sql) on the partitioned
 * layout's key table, or on inbox_events itself. Capped like the other DDL. */
#define INBOX_DDL_VIEW_KEYS                                                                        \
    "CREATE OR REPLACE VIEW inbox_ids AS SELECT event_id FROM inbox_keys FORCE INDEX (PRIMARY)"
#define INBOX_DDL_VIEW_EVENTS                                                                      \
    "CREATE OR REPLACE VIEW inbox_ids AS SELECT event_id FROM inbox_events FORCE INDEX (PRIMARY)"

/* ---- layout change: either table (T its name, K the key the copy walks) ---- */

/*
 * The columns a copy carries: every stored column of the live table (the generated ones are
 * computed again). No lock. Params: table. Columns: name.
 */
#define LAYOUT_SQL_COLUMNS                                                                         \
    "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "          \
    "AND TABLE_NAME = ? AND IS_GENERATED = 'NEVER' ORDER BY ORDINAL_POSITION"

/* Whether a table exists. Params: name. Columns: count. */
#define LAYOUT_SQL_TABLE_EXISTS                                                                    \
    "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "              \
    "AND TABLE_NAME = ?"

/* The server's estimate of a table's rows (the copy's progress). Params: name. */
#define LAYOUT_SQL_ROWS_EST                                                                        \
    "SELECT COALESCE(TABLE_ROWS, 0) FROM information_schema.TABLES "                               \
    "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?"

/* The smallest and the largest key; NULL when empty. Index: PRIMARY (K is its first column).
 * No lock. */
#define LAYOUT_SQL_MIN_KEY(T, K) "SELECT MIN(" K ") FROM " T
#define LAYOUT_SQL_MAX_KEY(T, K) "SELECT MAX(" K ") FROM " T

/* DDL: a fresh start of a layout change (the copy triggers go first: they write to the new
 * table), and the new table, LIKE the live one. */
#define LAYOUT_DDL_DROP_COPY_INS(T) "DROP TRIGGER IF EXISTS " T "_txo_copy_ins"
#define LAYOUT_DDL_DROP_COPY_UPD(T) "DROP TRIGGER IF EXISTS " T "_txo_copy_upd"
#define LAYOUT_DDL_DROP_COPY_DEL(T) "DROP TRIGGER IF EXISTS " T "_txo_copy_del"
#define LAYOUT_DDL_DROP_NEW(T)      "DROP TABLE IF EXISTS " T "_txo_new"
#define LAYOUT_DDL_CREATE_NEW(T)    "CREATE TABLE " T "_txo_new LIKE " T
/* DDL: the new table unpartitioned (disable); MariaDB takes REMOVE PARTITIONING alone. */
#define LAYOUT_DDL_UNPARTITION(T) "ALTER TABLE " T "_txo_new REMOVE PARTITIONING"

/*
 * DDL: the copy triggers on the live table. Each insert and update is written to the new
 * table (an upsert: the batch copy may have been there first), each delete removed from it, in
 * the writer's transaction. Index: the new table's PRIMARY. Locks: the copied row.
 * Put together as _INS or _UPD, the column list, _VALUES, NEW.<column> for each, _UPDATE,
 * "<column> = NEW.<column>" for each.
 */
#define LAYOUT_DDL__COPY_UPSERT(T) "FOR EACH ROW INSERT INTO " T "_txo_new ("
#define LAYOUT_DDL_COPY_INS(T)                                                                     \
    "CREATE TRIGGER " T "_txo_copy_ins AFTER INSERT ON " T " " LAYOUT_DDL__COPY_UPSERT(T)
#define LAYOUT_DDL_COPY_UPD(T)                                                                     \
    "CREATE TRIGGER " T "_txo_copy_upd AFTER UPDATE ON " T " " LAYOUT_DDL__COPY_UPSERT(T)
#define LAYOUT_DDL_COPY_VALUES ") VALUES ("
#define LAYOUT_DDL_COPY_UPDATE ") ON DUPLICATE KEY UPDATE "
#define LAYOUT_DDL_COPY_DEL(T, K)                                                                  \
    "CREATE TRIGGER " T "_txo_copy_del AFTER DELETE ON " T " FOR EACH ROW "                        \
    "DELETE FROM " T "_txo_new WHERE " K " = OLD." K

/*
 * One batch of the copy, in key order: _END finds the batch's last key (the offset-th after
 * the cursor; none: the batch runs to the end), then the live rows of the range are copied,
 * those already there left as they are (a trigger wrote a newer version). The first batch
 * starts at the smallest key (_FIRST: >=), the next ones after the last key copied. Index:
 * PRIMARY of both tables (K its first column). Locks: the rows read, shared, until the batch
 * commits, so none changes between its read and its copy (a writer waits for the batch; its
 * trigger then writes the change). Isolation: READ COMMITTED (no gap locks).
 * _END params: cursor, last key, offset. The copy is put together as _BATCH, the column list,
 * _SELECT, the column list, _FROM; params: cursor, the batch's last key.
 */
#define LAYOUT__RANGE(T, K, OP) " FROM " T " WHERE " K " " OP " ? AND " K " <= ?"
#define LAYOUT_SQL_BATCH_END_FIRST(T, K)                                                           \
    "SELECT " K LAYOUT__RANGE(T, K, ">=") " ORDER BY " K " LIMIT 1 OFFSET ?"
#define LAYOUT_SQL_BATCH_END(T, K)                                                                 \
    "SELECT " K LAYOUT__RANGE(T, K, ">") " ORDER BY " K " LIMIT 1 OFFSET ?"
#define LAYOUT_SQL_COPY_BATCH(T) "INSERT INTO " T "_txo_new ("
#define LAYOUT_SQL_COPY_SELECT   ") SELECT "
#define LAYOUT__COPY_UPSERT(T, K)                                                                  \
    " LOCK IN SHARE MODE ON DUPLICATE KEY UPDATE " K " = " T "_txo_new." K
#define LAYOUT_SQL_COPY_FROM_FIRST(T, K) LAYOUT__RANGE(T, K, ">=") LAYOUT__COPY_UPSERT(T, K)
#define LAYOUT_SQL_COPY_FROM(T, K)       LAYOUT__RANGE(T, K, ">") LAYOUT__COPY_UPSERT(T, K)

/*
 * DDL: fresh index statistics for the filled table before it goes live. It was created empty,
 * and with the statistics of an empty table the optimizer plans the relay's statements badly
 * (100,000 events drained at 15,000/s instead of 32,000/s) until InnoDB recomputes them in the
 * background. Reads the table (a sample of pages per index); capped like the other DDL.
 */
#define LAYOUT_DDL_ANALYZE_NEW(T) "ANALYZE TABLE " T "_txo_new"

/* DDL: the swap, atomic; then the old table, its triggers with it. */
#define LAYOUT_DDL_SWAP(T)     "RENAME TABLE " T " TO " T "_txo_old, " T "_txo_new TO " T
#define LAYOUT_DDL_DROP_OLD(T) "DROP TABLE " T "_txo_old"
#define LAYOUT_OLD_TABLE(T)    T "_txo_old"
#define LAYOUT_NEW_TABLE(T)    T "_txo_new"

#endif
