/*
 * Every SQL statement of the outbox auditor (src/audit), one named macro each. Above each: the
 * index it relies on (checked with EXPLAIN on MariaDB 10.11), the rows it locks and the
 * isolation it assumes.
 *
 * All of them are plain SELECTs on outbox_events, each run as a statement of its own
 * (txo_db_query: READ COMMITTED, a consistent read that locks nothing), so the audit runs
 * beside the relay and needs only SELECT on that one table. Every value is bound.
 *
 * Times cross the protocol as microseconds since the epoch: a DATETIME(6) column is read as
 * TIMESTAMPDIFF(MICROSECOND, '1970-01-01', column) and a bound time becomes
 * TIMESTAMPADD(MICROSECOND, ?, '1970-01-01'), a constant the optimizer folds before choosing a
 * range. The columns hold UTC (txo's sessions set time_zone +00:00), so no zone enters.
 */
#ifndef TXO_AUDIT_SQL_H
#define TXO_AUDIT_SQL_H

#define AUDIT_SQL__AT           "TIMESTAMPADD(MICROSECOND, ?, '1970-01-01')"
#define AUDIT_SQL__CREATED_US   "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', created_at)"
#define AUDIT_SQL__PUBLISHED_US "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', published_at)"
#define AUDIT_SQL__COLS                                                                            \
    "SELECT id, idempotency_key, " AUDIT_SQL__CREATED_US ", " AUDIT_SQL__PUBLISHED_US              \
    " FROM outbox_events "

/* Columns of the window statements. */
enum audit_window_col {
    AUDIT_WINDOW_ID = 0,
    AUDIT_WINDOW_KEY,
    AUDIT_WINDOW_CREATED_US,
    AUDIT_WINDOW_PUBLISHED_US,
};

/* The database's clock, once per audit: every age is measured against it. No table. */
#define AUDIT_SQL_NOW "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', NOW(6))"

/*
 * The PUBLISHED events of a created_at window, a page at a time in (created_at, id) order.
 * Index: idx_outbox_age (status, created_at [, id]), the PUBLISHED range of the window walked
 * in order and left after LIMIT rows (EXPLAIN: range, no filesort); FORCE INDEX keeps it a walk
 * when the window is most of the table. _AFTER continues after the last row of the previous
 * page (the cursor: its created_at twice, then its id). Locks: none (consistent read).
 * Params: since, until, [cursor (3)], limit.
 */
#define AUDIT_SQL__WINDOW_TIME                                                                     \
    AUDIT_SQL__COLS "FORCE INDEX (idx_outbox_age) WHERE status = 'PUBLISHED' "                     \
                    "AND created_at >= " AUDIT_SQL__AT " AND created_at < " AUDIT_SQL__AT " "
#define AUDIT_SQL__ORDER_TIME       "ORDER BY created_at, id LIMIT ?"
#define AUDIT_SQL_WINDOW_TIME_FIRST AUDIT_SQL__WINDOW_TIME AUDIT_SQL__ORDER_TIME
#define AUDIT_SQL_WINDOW_TIME_AFTER                                                                \
    AUDIT_SQL__WINDOW_TIME "AND (created_at > " AUDIT_SQL__AT " OR (created_at = " AUDIT_SQL__AT   \
                           " AND id > ?)) " AUDIT_SQL__ORDER_TIME

/*
 * The PUBLISHED events of an id window, a page at a time in id order. Index: PRIMARY, the
 * range [first, to_id]; the status is checked on each row. Locks: none.
 * Params: first id of the page, to_id, limit.
 */
#define AUDIT_SQL_WINDOW_IDS                                                                       \
    AUDIT_SQL__COLS "WHERE id >= ? AND id <= ? AND status = 'PUBLISHED' ORDER BY id LIMIT ?"

/*
 * Which of a list of idempotency keys (of broker messages the window did not match) an outbox
 * row has, whatever its status. Index: uq_outbox_idempotency_key, one unique lookup per key
 * (byte-for-byte: the column's collation is utf8mb4_bin). Locks: none. Ends in `IN `,
 * completed by txo_sql_in_list() (count rounded up to a power of two, last key repeated).
 * Columns: idempotency_key.
 */
#define AUDIT_SQL_KEYS_IN "SELECT idempotency_key FROM outbox_events WHERE idempotency_key IN "

/*
 * Whether the outbox still holds its PUBLISHED rows of time t: txo clean deletes PUBLISHED
 * rows by published_at, oldest first, so a row published at or before t that is still there
 * means no purge has reached t. Index: idx_outbox_age, the PUBLISHED range created up to t
 * walked from its oldest row (a row is created before it is published), stopping at the first
 * row published by t: usually the first one. Locks: none. Params: t, t. Columns: id.
 */
#define AUDIT_SQL_PUBLISHED_BY                                                                     \
    "SELECT id FROM outbox_events FORCE INDEX (idx_outbox_age) WHERE status = 'PUBLISHED' "        \
    "AND created_at <= " AUDIT_SQL__AT " AND published_at <= " AUDIT_SQL__AT " LIMIT 1"

/*
 * The oldest published_at of the PUBLISHED rows created up to t: the outbox's horizon, asked
 * only when AUDIT_SQL_PUBLISHED_BY found none before the broker messages in question, that
 * is when the range walked holds only rows published after the horizon (a window's worth,
 * plus any backlog published late). Index: idx_outbox_age, the PUBLISHED range up to t.
 * Locks: none. Params: t. Columns: the time (NULL when there is no such row).
 */
#define AUDIT_SQL_OLDEST_PUBLISHED                                                                 \
    "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', MIN(published_at)) FROM outbox_events "       \
    "FORCE INDEX (idx_outbox_age) WHERE status = 'PUBLISHED' AND created_at <= " AUDIT_SQL__AT

/*
 * Events of one status (PENDING or PROCESSING) created before the cutoff that are overdue: an
 * event with attempts counts from its created_at, one never attempted from its due time (an
 * application may insert an event due later on purpose). A page at a time in (created_at, id)
 * order. Index: idx_outbox_age (status, created_at [, id]), the status's range up to the
 * cutoff walked in order; attempts and next_attempt_at are checked on each row. Locks: none.
 * Params: status, cutoff, cutoff, [cursor (3)], limit.
 */
#define AUDIT_SQL__PENDING                                                                         \
    "SELECT id, idempotency_key, attempts, " AUDIT_SQL__CREATED_US ", last_error "                 \
    "FROM outbox_events FORCE INDEX (idx_outbox_age) WHERE status = ? "                            \
    "AND created_at < " AUDIT_SQL__AT " "                                                          \
    "AND (attempts > 0 OR next_attempt_at < " AUDIT_SQL__AT ") "
#define AUDIT_SQL_PENDING_FIRST AUDIT_SQL__PENDING AUDIT_SQL__ORDER_TIME
#define AUDIT_SQL_PENDING_AFTER                                                                    \
    AUDIT_SQL__PENDING "AND (created_at > " AUDIT_SQL__AT " OR (created_at = " AUDIT_SQL__AT       \
                       " AND id > ?)) " AUDIT_SQL__ORDER_TIME

/*
 * Sequence gaps: the PUBLISHED events of the window published before the event they follow in
 * their aggregate (prev_sequence): that one is not PUBLISHED, or was published later. An event
 * whose predecessor is gone (purged by retention) is not judged. The window as above:
 * _TIME on created_at through idx_outbox_age, _IDS on PRIMARY. Each candidate's predecessor is
 * found through idx_outbox_aggregate (aggregate_type, aggregate_id, id): the aggregate's rows
 * are walked and sequence checked on each, so the cost per event grows with the rows its
 * aggregate still has (an index with sequence would make it one dive, and cost every INSERT).
 * Locks: none. Params: since, until (or first id, last id), limit. Columns: see
 * enum audit_gap_col.
 */
#define AUDIT_SQL__GAP_COLS                                                                        \
    "SELECT e.id, e.idempotency_key, e.aggregate_type, e.aggregate_id, e.sequence, "               \
    "e.prev_sequence, p.status, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', e.published_at) "         \
    "FROM outbox_events e "
#define AUDIT_SQL__GAP_JOIN                                                                        \
    "JOIN outbox_events p FORCE INDEX (idx_outbox_aggregate) ON p.aggregate_type = "               \
    "e.aggregate_type AND p.aggregate_id = e.aggregate_id AND p.sequence = e.prev_sequence "
#define AUDIT_SQL__GAP_WHERE                                                                       \
    "AND e.status = 'PUBLISHED' AND e.prev_sequence > 0 AND (p.status <> 'PUBLISHED' OR "          \
    "p.published_at > e.published_at) ORDER BY e.id LIMIT ?"
#define AUDIT_SQL_GAPS_TIME                                                                        \
    AUDIT_SQL__GAP_COLS "FORCE INDEX (idx_outbox_age) " AUDIT_SQL__GAP_JOIN                        \
                        "WHERE e.created_at >= " AUDIT_SQL__AT                                     \
                        " AND e.created_at < " AUDIT_SQL__AT " " AUDIT_SQL__GAP_WHERE
#define AUDIT_SQL_GAPS_IDS                                                                         \
    AUDIT_SQL__GAP_COLS AUDIT_SQL__GAP_JOIN "WHERE e.id >= ? AND e.id <= ? " AUDIT_SQL__GAP_WHERE

enum audit_gap_col {
    AUDIT_GAP_ID = 0,
    AUDIT_GAP_KEY,
    AUDIT_GAP_AGGREGATE_TYPE,
    AUDIT_GAP_AGGREGATE_ID,
    AUDIT_GAP_SEQUENCE,
    AUDIT_GAP_PREV_SEQUENCE,
    AUDIT_GAP_PREV_STATUS,
    AUDIT_GAP_PUBLISHED_US,
};

/* Columns of the pending statements. */
enum audit_pending_col {
    AUDIT_PENDING_ID = 0,
    AUDIT_PENDING_KEY,
    AUDIT_PENDING_ATTEMPTS,
    AUDIT_PENDING_CREATED_US,
    AUDIT_PENDING_LAST_ERROR,
};

#endif
