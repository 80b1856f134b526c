-- What the relay needs to publish each aggregate's events in order and to give up on poison
-- events (src/relay/relay_sql.h describes the statements that use these).
--
-- outbox_events:
--   status SKIPPED        an operator gave up on a FAILED event (`txo dlq skip`): it is never
--                         published, and the later events of its aggregate go on. Terminal.
--   lease_expiries        how many times a lease on this event expired before its publish was
--                         marked (its relay died or hung mid-batch, maybe because of this very
--                         event). Counted apart from attempts, with a limit of its own: an event
--                         that keeps killing its relay is dead-lettered instead of killing every
--                         relay in turn.
--   idx_outbox_aggregate  (aggregate_type, aggregate_id, id): the ordered claim looks up the
--                         event just before a candidate in its aggregate here. None of these
--                         columns ever changes, so claims and marks never move its entries: it
--                         costs an insert one more secondary index entry and nothing else.
-- dead_letter_events:
--   skipped_at            when an operator skipped the letter's event (`txo dlq skip`).
--
-- Each ALTER runs only when its first change is missing (as in 0006), so an interrupted run
-- can be repeated.

SET @txo_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
        WHERE table_schema = DATABASE() AND table_name = 'outbox_events'
        AND column_name = 'lease_expiries') = 0,
    'ALTER TABLE outbox_events
        MODIFY status ENUM(''PENDING'', ''PROCESSING'', ''PUBLISHED'', ''FAILED'', ''SKIPPED'')
            NOT NULL DEFAULT ''PENDING'',
        ADD COLUMN lease_expiries INT NOT NULL DEFAULT 0 AFTER attempts,
        ADD KEY idx_outbox_aggregate (aggregate_type, aggregate_id, id)',
    'DO 0');
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;

SET @txo_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
        WHERE table_schema = DATABASE() AND table_name = 'dead_letter_events'
        AND column_name = 'skipped_at') = 0,
    'ALTER TABLE dead_letter_events
        ADD COLUMN skipped_at DATETIME(6) NULL',
    'DO 0');
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;
