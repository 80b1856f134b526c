-- Where each binlog source of the relay (txo relay --source binlog) stands, and who reads it.
--
-- name           the source's name (--source-name): one row, one active reader.
-- binlog_file,   the position after the last transaction whose events the broker
-- binlog_offset  acknowledged: a reader that starts resumes there (at least once: what was
--                published after it is published again). NULL until the first position.
-- gtid           the GTID of that transaction (domain-server-sequence), for operators and
--                for a move to another server of the same replication topology.
-- high_water_id  the largest outbox_events.id the source published or dead-lettered. The
--                source marks every row it handles PUBLISHED (or FAILED) as the polling relay
--                does, so a switch back to polling republishes nothing; the id says how far
--                it got.
-- owner,         the lease: the reader that holds the source and until when. Another reader
-- lease_until    takes it over only after lease_until has passed.
--
-- Index: PRIMARY (name) only; a handful of rows.
CREATE TABLE IF NOT EXISTS outbox_binlog_sources (
    name VARCHAR(64) NOT NULL PRIMARY KEY,
    binlog_file VARCHAR(255) NULL,
    binlog_offset BIGINT UNSIGNED NULL,
    gtid VARCHAR(64) NULL,
    high_water_id BIGINT NOT NULL DEFAULT 0,
    owner VARCHAR(128) NULL,
    lease_until DATETIME(6) NULL,
    updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;
