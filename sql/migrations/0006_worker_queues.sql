-- What the worker needs from the command queue, the dead-letter table and the inbox.
-- docs/worker-tables.md describes the contracts.
--
-- command_queue: a lease-and-retry queue like the outbox relay's.
--   next_attempt_at  when a PENDING command may be claimed (insert: now; after a transient
--                    failure: now + exponential backoff with jitter). PROCESSING: unchanged
--                    by the claim (the lease is locked_until). DONE/FAILED: the due time of
--                    the last attempt, never after the row was finished (the retention
--                    cleaner relies on that to walk idx_cmdq_due).
--   last_error       why the last attempt failed (kept on PENDING and FAILED).
--   lock_token       a fresh UUID per claim; complete and fail are fenced by id + token, so a
--                    worker whose lease expired and whose command was claimed again changes
--                    nothing. locked_by keeps the claiming worker's name for operators.
--   idx_cmdq_due     (status, next_attempt_at [, id]): the claim walks the PENDING range in
--                    due order and the (short) PROCESSING range for expired leases; stats
--                    count by its first column; the retention cleaner walks its DONE range.
-- dead_letter_events: replay bookkeeping (txo dlq replay).
-- inbox_events:
--   event_id         VARBINARY: ids are compared byte for byte. As VARCHAR under the
--                    database's default utf8mb4 collation, 'Evt-1' and 'evt-1' (or 'a' and
--                    'a ') were the same key, so a different event was dropped as a duplicate.
--   idx_inbox_processed  the retention cleaner's index (oldest processed rows first). It costs
--                    every inbox insert one more secondary index entry.
--
-- MySQL DDL commits implicitly, so a migration cannot be atomic; each ALTER below is (all of its
-- changes or none), and runs only when its first change is missing (checked in
-- information_schema, then run through PREPARE, which both MariaDB 10.11 and MySQL 8 accept),
-- so a migration interrupted half-way (e.g. a lost connection while the server finished an
-- ALTER) can be run again.

SET @txo_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
        WHERE table_schema = DATABASE() AND table_name = 'command_queue'
        AND column_name = 'lock_token') = 0,
    'ALTER TABLE command_queue
        ADD COLUMN next_attempt_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) AFTER attempts,
        ADD COLUMN last_error TEXT NULL AFTER locked_until,
        ADD COLUMN lock_token CHAR(36) NULL AFTER locked_until,
        ADD KEY idx_cmdq_due (status, next_attempt_at)',
    'DO 0');
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;

SET @txo_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
        WHERE table_schema = DATABASE() AND table_name = 'dead_letter_events'
        AND column_name = 'replay_count') = 0,
    'ALTER TABLE dead_letter_events
        ADD COLUMN replayed_at DATETIME(6) NULL AFTER created_at,
        ADD COLUMN replay_count INT NOT NULL DEFAULT 0 AFTER replayed_at',
    'DO 0');
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;

SET @txo_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics
        WHERE table_schema = DATABASE() AND table_name = 'inbox_events'
        AND index_name = 'idx_inbox_processed') = 0,
    'ALTER TABLE inbox_events
        MODIFY event_id VARBINARY(255) NOT NULL,
        ADD KEY idx_inbox_processed (processed_at)',
    'DO 0');
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;
