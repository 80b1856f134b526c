-- The outbox as a contract of its own, for applications in any language (docs/outbox-contract.md).
-- `txo migrate --only outbox` applies the migrations named NNNN_outbox*.sql, this one included,
-- and nothing else, so this file also brings the outbox parts of 0006 and 0008 (each is a
-- no-op where they already ran, and they are no-ops after this one).
--
-- aggregate_id     VARCHAR(255), binary collation: an application's key, a number or a UUID
--                  or any text, compared byte for byte ('A1' and 'a1' are two aggregates).
--                  Existing numbers become their decimal text; writers that insert integers
--                  keep working (the server converts them). Published as a JSON string.
-- idx_outbox_age   (status, created_at [, id]): the relay's lag is now minus the created_at of
--                  the oldest event not yet published, PENDING or PROCESSING, due or backing
--                  off. With this index each status's MIN(created_at) is one index dive
--                  (EXPLAIN: "Select tables optimized away") instead of a walk of a backlog
--                  that, during a broker outage, is exactly what grows. The same dive gives the
--                  age of the oldest FAILED event. It costs each insert one more index entry,
--                  and each claim and mark one more moved entry (status is its first column).
--
-- idx_dead_letter_replayed  (replayed_at [, id]): the retention cleaner deletes dead letters
--                  replayed long ago (txo clean), walking this index; letters are rare, so
--                  it costs nothing that matters.
--
-- Each change runs only when it is missing (checked in information_schema, then run through
-- PREPARE), so an interrupted run can be run again.

SET @txo_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics
        WHERE table_schema = DATABASE() AND table_name = 'outbox_events'
        AND index_name = 'idx_outbox_age') = 0,
    'ALTER TABLE outbox_events ADD KEY idx_outbox_age (status, created_at)',
    'DO 0');
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;

SET @txo_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
        WHERE table_schema = DATABASE() AND table_name = 'outbox_events'
        AND column_name = 'aggregate_id' AND data_type = 'bigint') = 1,
    'ALTER TABLE outbox_events
        MODIFY aggregate_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL',
    'DO 0');
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;

-- The outbox part of 0008: idempotency keys compared byte for byte.
SET @txo_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
        WHERE table_schema = DATABASE() AND table_name = 'outbox_events'
        AND column_name = 'idempotency_key' AND collation_name = 'utf8mb4_bin') = 0,
    'ALTER TABLE outbox_events
        MODIFY idempotency_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL',
    'DO 0');
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;

-- The dead-letter part of 0006: replay bookkeeping (txo dlq replay).
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
        WHERE table_schema = DATABASE() AND table_name = 'dead_letter_events'
        AND index_name = 'idx_dead_letter_replayed') = 0,
    'ALTER TABLE dead_letter_events ADD KEY idx_dead_letter_replayed (replayed_at)',
    'DO 0');
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;
