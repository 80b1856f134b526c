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
 * The existing rows of a batch of keys (txo_idem_lookup_many): BEFORE + "(?,?,...)"
 * (txo_sql_in_list(), the last key repeated). PRIMARY KEY (idempotency_key), point lookups. A
 * consistent read, no lock: a COMPLETED row never changes (only the retention purge deletes
 * it, which at worst turns a replay into the 1062 of IDEM_SQL_INSERT_COMPLETED_BEFORE), and a
 * key another transaction holds uncommitted is invisible here, so the caller's insert of it
 * waits for that transaction and fails with 1062 when it commits: the order writer then falls
 * back to the single path, which waits for or replays it.
 */
#define IDEM_SQL_LOOKUP_MANY_BEFORE                                                                \
    "SELECT idempotency_key, request_hash, status, response_status, response_body"                 \
    " FROM idempotency_keys WHERE idempotency_key IN "

/*
 * A batch of keys COMPLETED with their responses at once (txo_idem_store_completed_many): the
 * batch commits with its effects, so no PROCESSING state is ever visible. BEFORE + n x ROW
 * (txo_sql_values_rows). Params per row: key, request hash, response status, response body.
 * PRIMARY KEY: a key inserted meanwhile by another transaction is 1062 (-> TXO_EDUPLICATE)
 * after waiting for its lock while it is open (1205 when the wait runs out). Locks the new rows.
 */
#define IDEM_SQL_INSERT_COMPLETED_BEFORE                                                           \
    "INSERT INTO idempotency_keys (idempotency_key, request_hash, status, response_status,"        \
    " response_body) VALUES "
#define IDEM_SQL_INSERT_COMPLETED_ROW "(?, ?, 'COMPLETED', ?, ?)"

/*
 * Retention, one batch per autocommitted transaction: idx_idempotency_created finds the oldest
 * rows; only COMPLETED ones go (a PROCESSING row belongs to a live or stale writer, FAILED is
 * never written by txo). Locks the deleted rows only.
 */
#define IDEM_SQL_PURGE                                                                             \
    "DELETE FROM idempotency_keys WHERE status = 'COMPLETED'"                                      \
    " AND created_at < NOW(6) - INTERVAL ? SECOND ORDER BY created_at LIMIT ?"

#endif
