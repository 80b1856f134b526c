/*
 * SQL of the order writer (order_writer.c): the idempotency key rows of a group of POST /orders,
 * read and written in the group's READ COMMITTED transaction. The single-request path of the
 * same rows is txo_idem_begin()/txo_idem_complete() (src/idempotency/idempotency_sql.h); these
 * statements keep its table contract (sql/migrations/0002, 0007, 0008).
 */
#ifndef TXO_ORDER_WRITER_SQL_H
#define TXO_ORDER_WRITER_SQL_H

/*
 * The existing rows of the group's keys: BEFORE + "(?,?,...)" (txo_sql_in_list(), the last key
 * repeated). idempotency_keys PRIMARY (idempotency_key), point lookups. A consistent read, no
 * lock: a COMPLETED row never changes (only the retention purge deletes it, which at worst turns
 * a replay into the 1062 of the insert below), and a key another transaction holds uncommitted
 * is invisible here, so the group's insert of it waits for that transaction and fails with 1062
 * when it commits: the group then falls back to the single path, which waits for or replays it.
 */
#define ORDER_WRITER_SQL_KEYS_BEFORE                                                               \
    "SELECT idempotency_key, request_hash, status, response_status, response_body"                 \
    " FROM idempotency_keys WHERE idempotency_key IN "

/*
 * The group's new keys, COMPLETED with their responses at once (the whole group commits
 * atomically, so no PROCESSING state is ever visible): BEFORE + n x ROW (txo_sql_values_rows).
 * Params per row: key, request hash, response status, response body. PRIMARY: a key inserted
 * meanwhile by another transaction is 1062 (after waiting for its lock while it is open), which
 * fails the group. Locks the new rows.
 */
#define ORDER_WRITER_SQL_INSERT_KEYS                                                               \
    "INSERT INTO idempotency_keys (idempotency_key, request_hash, status, response_status,"        \
    " response_body) VALUES "
#define ORDER_WRITER_SQL_KEY_ROW "(?, ?, 'COMPLETED', ?, ?)"

#endif
