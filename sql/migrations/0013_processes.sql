-- txo_processes: the daemons that are running (src/registry, include/txo/registry.h). Each
-- `txo relay`, `txo worker`, `txo serve` and `txo up` inserts its row when it starts, updates
-- heartbeat_at and status (a small JSON document: its circuit breakers) every few seconds, and
-- deletes its row when it stops cleanly. A row whose heartbeat is older than the liveness
-- window is a process that died (or lost the database); the heartbeats delete rows stale for
-- hours. Only the registry module reads or writes this table.
--
-- Not part of `txo migrate --only outbox`: a relay-only database keeps only the outbox's
-- tables, and a relay there runs without its heartbeat (one log line says so).
--
-- owner          "host:pid[:role]" (include/txo/owner.h), as in the lease columns.
-- idx_processes_heartbeat (heartbeat_at): the purge of stale rows is a range of it.
CREATE TABLE IF NOT EXISTS txo_processes (
    owner VARCHAR(255) NOT NULL,
    role VARCHAR(32) NOT NULL,
    host VARCHAR(255) NOT NULL,
    pid BIGINT NOT NULL,
    version VARCHAR(64) NOT NULL,
    started_at DATETIME(6) NOT NULL,
    heartbeat_at DATETIME(6) NOT NULL,
    status TEXT NOT NULL,
    PRIMARY KEY (owner),
    KEY idx_processes_heartbeat (heartbeat_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
