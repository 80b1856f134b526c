/*
 * Every SQL statement of the transactional inbox (src/inbox/inbox.c). Above each: the index it
 * relies on, the rows it locks and the isolation it assumes. The schema is
 * sql/migrations/0002_idempotency_inbox.sql and 0006_worker_queues.sql (event_id VARBINARY).
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

#endif
