-- Per-aggregate order for the relay at full speed, with any number of relays
-- (src/relay/relay_sql.h and src/relay/shard_sql.h describe the statements that use these;
-- docs/design.md "Ordering" the design and the measurements that chose it).
--
-- outbox_events.shard   CRC32(CONCAT(aggregate_type, ':', aggregate_id)) MOD 64, a VIRTUAL
--                       generated column: computed when read, stored nowhere, indexed nowhere,
--                       so it costs an insert nothing and rows written by any application,
--                       naming only the contract's columns, have it too. Every event of one
--                       aggregate has the same shard.
-- outbox_shards         one row per shard (64). A relay that orders by aggregate claims only
--                       the rows of the shards it owns (owner = its member id, lease_until in
--                       the future), so one aggregate's events are claimed by one relay at a
--                       time, several per batch, in due order. Relays take shards that are
--                       free or whose lease expired, renew their own, and give back what is
--                       above their fair share (64 / live relays, rounded up).
--   idx_shards_owner    (owner): a relay's own shards, read and share-locked by every claim.
-- outbox_relays         the live relays (seen_until in the future): how many there are decides
--                       each one's share. A relay that stops deletes its row and frees its
--                       shards; one that dies stops counting when seen_until passes.
--   idx_relays_seen     (seen_until): the rows of members gone for an hour are deleted.
-- outbox_parked         aggregates held back by a failed event: event_id is the event that
--                       failed (PENDING and backing off, or FAILED and dead-lettered); the
--                       claim takes no other event of its aggregate until that one is
--                       published or skipped. One primary-key probe per claimed row (an empty
--                       or tiny table when brokers are healthy).
--   uq_parked_event     (event_id): the mark of a published event removes its row by id.
--
-- Events that were already held back (FAILED, or PENDING after a failed attempt) park their
-- aggregate here, so the order kept before this migration is kept after it.
--
-- Each change runs only when it is missing, so an interrupted run can be run again.

SET @txo_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
        WHERE table_schema = DATABASE() AND table_name = 'outbox_events'
        AND column_name = 'shard') = 0,
    'ALTER TABLE outbox_events
        ADD COLUMN shard SMALLINT UNSIGNED
            AS (CRC32(CONCAT(aggregate_type, '':'', aggregate_id)) MOD 64) VIRTUAL',
    'DO 0');
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;

CREATE TABLE IF NOT EXISTS outbox_shards (
    shard SMALLINT UNSIGNED NOT NULL PRIMARY KEY,
    owner VARCHAR(128) NULL,
    lease_until DATETIME(6) NULL,
    KEY idx_shards_owner (owner)
) ENGINE=InnoDB;

INSERT IGNORE INTO outbox_shards (shard) VALUES
    (0), (1), (2), (3), (4), (5), (6), (7), (8), (9), (10), (11), (12), (13), (14), (15),
    (16), (17), (18), (19), (20), (21), (22), (23), (24), (25), (26), (27), (28), (29), (30),
    (31), (32), (33), (34), (35), (36), (37), (38), (39), (40), (41), (42), (43), (44), (45),
    (46), (47), (48), (49), (50), (51), (52), (53), (54), (55), (56), (57), (58), (59), (60),
    (61), (62), (63);

CREATE TABLE IF NOT EXISTS outbox_relays (
    member VARCHAR(128) NOT NULL PRIMARY KEY,
    seen_until DATETIME(6) NOT NULL,
    KEY idx_relays_seen (seen_until)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS outbox_parked (
    aggregate_type VARCHAR(64) NOT NULL,
    aggregate_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    event_id BIGINT NOT NULL,
    parked_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (aggregate_type, aggregate_id),
    UNIQUE KEY uq_parked_event (event_id)
) ENGINE=InnoDB;

INSERT IGNORE INTO outbox_parked (aggregate_type, aggregate_id, event_id)
    SELECT aggregate_type, aggregate_id, MIN(id) FROM outbox_events
    WHERE status = 'FAILED' OR (status = 'PENDING' AND attempts > 0)
    GROUP BY aggregate_type, aggregate_id;
