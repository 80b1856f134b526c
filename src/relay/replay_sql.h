/*
 * The statements of the replay of published history (replay.c). The schema is
 * sql/migrations/0022_outbox_replays.sql (outbox_replays) and 0001_outbox.sql (outbox_events).
 * Every statement runs on its own (autocommit): nothing is held while the publisher is called.
 */
#ifndef TXO_RELAY_REPLAY_SQL_H
#define TXO_RELAY_REPLAY_SQL_H

#include "relay/relay_sql.h" /* RELAY_SQL__CLAIM_COLUMNS */

/* The replay's checkpoint. Index: PRIMARY (name). Locks: none (a plain read).
 * Params: name. Columns: spec, to_id, last_id, replayed, finished (0/1). */
#define REPLAY_SQL_LOAD                                                                            \
    "SELECT spec, to_id, last_id, replayed, finished_at IS NOT NULL FROM outbox_replays "          \
    "WHERE name = ?"

/* A new checkpoint, or a restarted one. Index: PRIMARY (name). Locks: the row.
 * Params: name, spec, to_id, last_id. */
#define REPLAY_SQL_BEGIN                                                                           \
    "INSERT INTO outbox_replays (name, spec, to_id, last_id, replayed) VALUES (?, ?, ?, ?, 0) "    \
    "ON DUPLICATE KEY UPDATE spec = VALUES(spec), to_id = VALUES(to_id), "                         \
    "last_id = VALUES(last_id), replayed = 0, started_at = NOW(6), updated_at = NOW(6), "          \
    "finished_at = NULL"

/* Where an unbounded replay ends: the largest id now. Index: PRIMARY (its last entry). */
#define REPLAY_SQL_MAX_ID "SELECT COALESCE(MAX(id), 0) FROM outbox_events"

/*
 * The chosen events after the cursor, in id order. Index: PRIMARY, the range (cursor, to_id];
 * the filters are checked on the rows of the range. Locks: none (a consistent read).
 * Published: PUBLISHED, or PENDING at or below the binlog sources' high-water id. An empty
 * filter string matches every value; since/until default to the widest times.
 * Params: cursor, to_id, published-through id, aggregate_type x2, aggregate_id x2,
 * event_type x2, since, until, limit. Columns: RELAY_SQL__CLAIM_COLUMNS.
 */
#define REPLAY_SQL__CHOSEN                                                                         \
    "FROM outbox_events WHERE id > ? AND id <= ? "                                                 \
    "AND (status = 'PUBLISHED' OR (status = 'PENDING' AND id <= ?)) "                              \
    "AND (? = '' OR aggregate_type = ?) AND (? = '' OR aggregate_id = ?) "                         \
    "AND (? = '' OR event_type = ?) AND created_at >= ? AND created_at < ? "
#define REPLAY_SQL_BATCH RELAY_SQL__CLAIM_COLUMNS REPLAY_SQL__CHOSEN "ORDER BY id LIMIT ?"

/* How many events the replay chooses (for progress), the same params without the limit.
 * Index: PRIMARY, the whole range. */
#define REPLAY_SQL_COUNT "SELECT COUNT(*) " REPLAY_SQL__CHOSEN

/* After an acknowledged batch. Index: PRIMARY (name). Locks: the row.
 * Params: last_id, events, finished (0/1), name. */
#define REPLAY_SQL_CHECKPOINT                                                                      \
    "UPDATE outbox_replays SET last_id = ?, replayed = replayed + ?, updated_at = NOW(6), "        \
    "finished_at = IF(? = 1, NOW(6), NULL) WHERE name = ?"

#endif
