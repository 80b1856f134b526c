/*
 * Every SQL statement of the relay's binlog source (src/relay/binlog.c, binlog_batch.c), one
 * named macro each, with the index it uses, the rows it locks and the isolation it assumes.
 * The schema is sql/migrations/0021_relay_binlog.sql (outbox_binlog_sources) and
 * 0001_outbox.sql (outbox_events).
 */
#ifndef TXO_RELAY_BINLOG_SQL_H
#define TXO_RELAY_BINLOG_SQL_H

/*
 * The source's row, made once. Index: PRIMARY. Locks: the new row (a duplicate is ignored).
 * Params: name.
 */
#define BINLOG_SQL_ENSURE_SOURCE "INSERT IGNORE INTO outbox_binlog_sources (name) VALUES (?)"

/*
 * Takes or renews the lease: succeeds (1 row) when nobody holds it, this reader holds it, or
 * the holder's lease ran out. Index: PRIMARY. Locks: that row, in its own autocommit
 * statement. Isolation: any. Params: owner, lease ms, name, owner.
 */
#define BINLOG_SQL_TAKE_LEASE                                                                      \
    "UPDATE outbox_binlog_sources SET owner = ?, "                                                 \
    "lease_until = NOW(6) + INTERVAL ? * 1000 MICROSECOND "                                        \
    "WHERE name = ? AND (owner IS NULL OR owner = ? OR lease_until < NOW(6))"

/* Gives the lease back at a clean stop. Index: PRIMARY. Locks: that row. Params: name, owner. */
#define BINLOG_SQL_DROP_LEASE                                                                      \
    "UPDATE outbox_binlog_sources SET owner = NULL, lease_until = NULL "                           \
    "WHERE name = ? AND owner = ?"

/*
 * The stored position. Index: PRIMARY. Locks: none (consistent read). Params: name.
 * Columns: binlog_file, binlog_offset, gtid, high_water_id, and the time the position was
 * stored less a minute (a resync's bound: BINLOG_SQL_SETTLE).
 */
#define BINLOG_SQL_LOAD_POSITION                                                                   \
    "SELECT binlog_file, binlog_offset, gtid, high_water_id, updated_at - INTERVAL 60 SECOND "     \
    "FROM outbox_binlog_sources WHERE name = ?"

/*
 * The id through which every source of this outbox published every row (the rows stay
 * PENDING): the smallest high-water id of the sources with a position; 0 when there is none.
 * Index: PRIMARY (a few rows). Locks: none (consistent read).
 */
#define BINLOG_SQL_PUBLISHED_THROUGH                                                               \
    "SELECT COALESCE(MIN(high_water_id), 0) FROM outbox_binlog_sources "                           \
    "WHERE binlog_file IS NOT NULL"

/*
 * Settles one id range of rows the source published without writing them: PENDING ->
 * PUBLISHED, for a hand-back to the polling relay (or a resync after a purged position), so
 * that it does not publish them again. Rows created at or after the bound are left (a resync
 * cannot tell them from rows of a transaction still open when the position was stored).
 * Index: PRIMARY, the range (from, through]. Locks: the rows it changes, in its own autocommit
 * statement; a row inserted by a transaction not yet committed is passed over (READ
 * COMMITTED's semi-consistent read), so it stays PENDING and is published by whoever reads it.
 * Isolation: READ COMMITTED. Params: from, through, created-before bound.
 */
#define BINLOG_SQL_SETTLE                                                                          \
    "UPDATE outbox_events SET status = 'PUBLISHED', published_time = NOW(6) "                      \
    "WHERE id > ? AND id <= ? AND status = 'PENDING' AND created_at < ?"

/*
 * A hand-back's end: the source forgets its position, so a later start of the binlog source
 * is a first start. Fenced by the lease. Index: PRIMARY. Locks: that row. Params: name, owner.
 */
#define BINLOG_SQL_FORGET_SOURCE "DELETE FROM outbox_binlog_sources WHERE name = ? AND owner = ?"

/*
 * Stores the position after a run the broker acknowledged, in the transaction that writes its
 * dead letters (if any), fenced by the lease: a reader that lost it changes nothing (and its
 * dead letters roll back).
 * Index: PRIMARY. Locks: that row until the commit. Isolation: READ COMMITTED.
 * Params: file, offset, gtid, high-water id, name, owner.
 */
#define BINLOG_SQL_STORE_POSITION                                                                  \
    "UPDATE outbox_binlog_sources SET binlog_file = ?, binlog_offset = ?, gtid = ?, "              \
    "high_water_id = GREATEST(high_water_id, ?), updated_at = NOW(6) "                             \
    "WHERE name = ? AND owner = ? AND lease_until >= NOW(6)"

/*
 * The server's checks before the source starts. Columns: log_bin, binlog_format,
 * binlog_row_metadata. Locks: none.
 */
#define BINLOG_SQL_SERVER_SETTINGS                                                                 \
    "SELECT @@global.log_bin, @@global.binlog_format, @@global.binlog_row_metadata"

/* This session's grants, one row each. Locks: none. */
#define BINLOG_SQL_GRANTS "SHOW GRANTS FOR CURRENT_USER()"

/* The server's binary logs (Log_name, File_size). Locks: none. */
#define BINLOG_SQL_LOGS "SHOW BINARY LOGS"

/* The position the server writes at now (File, Position). Locks: none. */
#define BINLOG_SQL_MASTER_STATUS "SHOW MASTER STATUS"

/* The GTID of the last transaction written to the log. Locks: none. */
#define BINLOG_SQL_GTID_POS "SELECT @@global.gtid_binlog_pos"

/*
 * The sources for operators (txo_binlog_list_sources). Index: PRIMARY, walked in order.
 * Locks: none (consistent read). Params: limit.
 */
#define BINLOG_SQL_LIST_SOURCES                                                                    \
    "SELECT name, COALESCE(owner, ''), COALESCE(lease_until >= NOW(6), 0), "                       \
    "COALESCE(binlog_file, ''), COALESCE(binlog_offset, 0), COALESCE(gtid, ''), high_water_id, "   \
    "TIMESTAMPDIFF(MICROSECOND, updated_at, NOW(6)) / 1e6 FROM outbox_binlog_sources "             \
    "ORDER BY name LIMIT ?"

/* The largest outbox id now: the high-water mark of the first position. Index: PRIMARY. */
#define BINLOG_SQL_MAX_ID "SELECT COALESCE(MAX(id), 0) FROM outbox_events"

#endif
