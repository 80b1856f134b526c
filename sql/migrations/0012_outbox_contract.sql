-- The outbox as a contract of its own, for applications in any language (docs/outbox-contract.md).
--
-- idx_outbox_age   (status, created_at [, id]): the relay's lag is now minus the created_at of
--                  the oldest event not yet published, PENDING or PROCESSING, due or backing
--                  off. With this index each status's MIN(created_at) is one index dive
--                  (EXPLAIN: "Select tables optimized away") instead of a walk of a backlog
--                  that, during a broker outage, is exactly what grows. The same dive gives the
--                  age of the oldest FAILED event. It costs each insert one more index entry,
--                  and each claim and mark one more moved entry (status is its first column).
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
