/*
 * Every SQL statement of the process registry (src/registry/registry.c). The schema is
 * sql/migrations/0013_processes.sql. Each statement runs alone in its own READ COMMITTED
 * transaction on the heartbeat's own connection (or the caller's, for list), so it never holds
 * a lock beyond the one row it writes, and nothing else locks these rows. Times are DATETIME(6)
 * in UTC (the session time zone, src/db/db_conn.c).
 */
#ifndef TXO_REGISTRY_SQL_H
#define TXO_REGISTRY_SQL_H

/*
 * A process starts: its row, fresh. A restarted process with the same owner name (a pid
 * reused after a crash, in a container) takes the old row over. Index: PRIMARY (owner).
 * Locks: that row. Params: owner, role, host, pid, version, status.
 */
#define REGISTRY_SQL_REGISTER                                                                      \
    "INSERT INTO txo_processes (owner, role, host, pid, version, started_at, heartbeat_at, "       \
    "status) VALUES (?, ?, ?, ?, ?, NOW(6), NOW(6), ?) "                                           \
    "ON DUPLICATE KEY UPDATE role = VALUES(role), host = VALUES(host), pid = VALUES(pid), "        \
    "version = VALUES(version), started_at = VALUES(started_at), "                                 \
    "heartbeat_at = VALUES(heartbeat_at), status = VALUES(status)"

/*
 * One heartbeat. Index: PRIMARY (owner), one row. Locks: that row, for the statement only.
 * Params: status, owner. 0 affected rows: the row is gone (purged), register again.
 */
#define REGISTRY_SQL_HEARTBEAT                                                                     \
    "UPDATE txo_processes SET heartbeat_at = NOW(6), status = ? WHERE owner = ?"

/* A clean stop. Index: PRIMARY (owner). Locks: that row. Params: owner. */
#define REGISTRY_SQL_UNREGISTER "DELETE FROM txo_processes WHERE owner = ?"

/*
 * The purge of processes that stopped beating long ago (crashed, or cut off for hours).
 * Index: idx_processes_heartbeat (heartbeat_at), a range; bounded by LIMIT so one beat never
 * deletes much. Locks: the rows deleted (and the index gap before them). Params: stale_s.
 */
#define REGISTRY_SQL_PURGE                                                                         \
    "DELETE FROM txo_processes WHERE heartbeat_at < NOW(6) - INTERVAL ? SECOND "                   \
    "LIMIT 100"

/*
 * Every registered process, newest beat first, with its age and liveness computed on the
 * database's clock (the processes' clocks need not agree). Index: idx_processes_heartbeat,
 * walked backwards (the table holds one row per process: small). Locks: none (consistent
 * read). Params: alive_s, limit. Columns: enum list_col in registry.c.
 */
#define REGISTRY_SQL_LIST                                                                          \
    "SELECT owner, role, host, pid, version, started_at, heartbeat_at, "                           \
    "TIMESTAMPDIFF(MICROSECOND, heartbeat_at, NOW(6)) / 1000000, "                                 \
    "heartbeat_at >= NOW(6) - INTERVAL ? SECOND, status "                                          \
    "FROM txo_processes ORDER BY heartbeat_at DESC LIMIT ?"

#endif
