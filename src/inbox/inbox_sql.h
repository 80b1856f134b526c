/*
 * Every SQL statement of the transactional inbox (src/inbox/inbox.c). Above each: the index it
 * relies on, the rows it locks and the isolation it assumes. The schema is
 * sql/migrations/0002_idempotency_inbox.sql, 0006_worker_queues.sql (event_id VARBINARY),
 * 0016_inbox_sequence.sql (inbox_aggregates) and 0023_inbox_ids.sql (the view of the ids).
 * The inbox's retention statements are in src/retention/retention_sql.h.
 */
#ifndef TXO_INBOX_SQL_H
#define TXO_INBOX_SQL_H

/*
 * Records a message as processed, inside the caller's transaction (any isolation).
 * Index: PRIMARY (event_id). `event_id = event_id` changes nothing, so affected_rows is 1 for
 * a new row and 0 for a duplicate (the connection does not set CLIENT_FOUND_ROWS).
 * Locks: the new row; on a duplicate, the existing row (exclusive, until the caller's
 * transaction ends). When another open transaction inserted the same id, this statement waits
 * for its lock: after its COMMIT it finds the duplicate, after its ROLLBACK it inserts.
 * Params: event_id, event_type, payload.
 */
#define INBOX_SQL_RECORD                                                                           \
    "INSERT INTO inbox_events (event_id, event_type, payload, processed_at) "                      \
    "VALUES (?, ?, ?, NOW(6)) ON DUPLICATE KEY UPDATE event_id = event_id"

/*
 * txo_inbox_record_many: which of these ids are recorded already (committed). The view
 * inbox_ids (sql/migrations/0023_inbox_ids.sql) reads inbox_events, or inbox_keys when the
 * inbox is partitioned (txo/partition.h). Index: that table's PRIMARY, one dive per id.
 * Locks: none (consistent read). Followed by an IN list (txo_sql_in_list).
 */
#define INBOX_SQL_KNOWN_MANY "SELECT event_id FROM inbox_ids WHERE event_id IN "

/*
 * txo_inbox_record_many: the new ids in one statement, INBOX_SQL_RECORD_MANY + n x
 * INBOX_SQL_RECORD_ROW (txo_sql_values_rows) + INBOX_SQL_RECORD_MANY_END. As INBOX_SQL_RECORD,
 * affected rows counts the rows inserted: fewer than given means another transaction
 * recorded one of them since INBOX_SQL_KNOWN_MANY looked. Params per row: event_id,
 * event_type, payload. Locks: the new rows (and waits, as INBOX_SQL_RECORD, for an open
 * transaction that inserted one of the ids).
 */
#define INBOX_SQL_RECORD_MANY                                                                      \
    "INSERT INTO inbox_events (event_id, event_type, payload, processed_at) VALUES "
#define INBOX_SQL_RECORD_ROW      "(?, ?, ?, NOW(6))"
#define INBOX_SQL_RECORD_MANY_END " ON DUPLICATE KEY UPDATE event_id = event_id"

/*
 * txo_inbox_check_order, step 1: the last sequence handled of each aggregate of the call,
 * locked, so consumers of one aggregate check it one after the other. INBOX_SQL_ORDER_LAST +
 * n x INBOX_SQL_ORDER_LAST_ROW (txo_sql_values_rows) + INBOX_SQL_ORDER_LAST_END.
 * Index: PRIMARY (aggregate_type, aggregate_id), one lookup per pair. Locks: the rows found
 * (exclusive, until the caller's transaction ends); none for an aggregate without a row (READ
 * COMMITTED: no gap lock), whose first two events, checked at the same moment by two
 * consumers, may both be judged against "nothing handled yet". Params per row: aggregate_type,
 * aggregate_id. Columns: aggregate_type, aggregate_id, last_sequence.
 */
#define INBOX_SQL_ORDER_LAST                                                                       \
    "SELECT aggregate_type, aggregate_id, last_sequence FROM inbox_aggregates "                    \
    "WHERE (aggregate_type, aggregate_id) IN ("
#define INBOX_SQL_ORDER_LAST_ROW "(?, ?)"
#define INBOX_SQL_ORDER_LAST_END ") FOR UPDATE"

/*
 * txo_inbox_check_order, step 2: the new last sequence of each aggregate that moved, one row
 * each; GREATEST keeps a higher one another consumer wrote meanwhile. INBOX_SQL_ORDER_MOVE +
 * n x INBOX_SQL_ORDER_MOVE_ROW + INBOX_SQL_ORDER_MOVE_END. Index: PRIMARY. Locks: those rows.
 * Params per row: aggregate_type, aggregate_id, last_sequence.
 */
#define INBOX_SQL_ORDER_MOVE                                                                       \
    "INSERT INTO inbox_aggregates (aggregate_type, aggregate_id, last_sequence) VALUES "
#define INBOX_SQL_ORDER_MOVE_ROW "(?, ?, ?)"
#define INBOX_SQL_ORDER_MOVE_END                                                                   \
    " ON DUPLICATE KEY UPDATE last_sequence = GREATEST(last_sequence, VALUES(last_sequence))"

#endif
