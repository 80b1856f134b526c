/*
 * SQL of the idempotency keys (src/idempotency/idempotency.c). Every statement runs in the
 * caller's transaction at READ COMMITTED unless noted.
 */
#ifndef TXO_IDEMPOTENCY_SQL_H
#define TXO_IDEMPOTENCY_SQL_H

/*
 * Claims a new key. PRIMARY KEY (idempotency_key): inserts the row and holds its X lock, or,
 * when the key exists, waits for its lock, then takes it (the no-op update); affected rows
 * tell which (1 inserted, 0 existed). A wait longer than innodb_lock_wait_timeout fails with
 * 1205: the key is in use by a transaction still open.
 */
#define IDEM_SQL_CLAIM                                                                             \
    "INSERT INTO idempotency_keys (idempotency_key, request_hash, status)"                         \
    " VALUES (?, ?, 'PROCESSING')"                                                                 \
    " ON DUPLICATE KEY UPDATE idempotency_key = idempotency_key"

/* The existing row, already X-locked by IDEM_SQL_CLAIM (PRIMARY KEY lookup). `stale` is 1 when
 * the row has not changed for ? seconds. */
#define IDEM_SQL_READ                                                                              \
    "SELECT request_hash, status, response_status, response_body,"                                 \
    " updated_at < NOW(6) - INTERVAL ? SECOND AS stale"                                            \
    " FROM idempotency_keys WHERE idempotency_key = ? FOR UPDATE"

/* Takes over an abandoned PROCESSING row (PRIMARY KEY, row locked above). */
#define IDEM_SQL_TAKE_OVER                                                                         \
    "UPDATE idempotency_keys SET updated_at = NOW(6)"                                              \
    " WHERE idempotency_key = ? AND status = 'PROCESSING'"

/* Stores the response (PRIMARY KEY, the row is ours since IDEM_SQL_CLAIM). */
#define IDEM_SQL_COMPLETE                                                                          \
    "UPDATE idempotency_keys SET status = 'COMPLETED', response_status = ?,"                       \
    " response_body = ? WHERE idempotency_key = ? AND status = 'PROCESSING'"

/*
 * Retention, one batch per autocommitted transaction: idx_idempotency_created finds the oldest
 * rows; only COMPLETED ones go (a PROCESSING row belongs to a live or stale writer, FAILED is
 * never written by txo). Locks the deleted rows only.
 */
#define IDEM_SQL_PURGE                                                                             \
    "DELETE FROM idempotency_keys WHERE status = 'COMPLETED'"                                      \
    " AND created_at < NOW(6) - INTERVAL ? SECOND ORDER BY created_at LIMIT ?"

#endif
