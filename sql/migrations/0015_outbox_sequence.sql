-- Every event carries its position in its aggregate, and an aggregate's events are published
-- in the order their appending transactions committed.
--
-- outbox_events.sequence       1, 2, 3, ... per aggregate (aggregate_type, aggregate_id):
--                              grows by one per event, or takes the application's own version
--                              when the INSERT names it (it must grow). NULL only for events
--                              appended before this migration.
-- outbox_events.prev_sequence  the sequence of the aggregate's event that consumers see just
--                              before this one: sequence - 1, 0 for the first, or less after
--                              an operator skipped an event (txo dlq skip rewrites it), so a
--                              consumer tells a gap from a skip.
-- outbox_aggregates            one row per aggregate ever appended to: the counter.
--   last_sequence              the highest sequence given out;
--   last_kept                  the sequence the next event follows (last_sequence, unless the
--                              last event was skipped);
--   prev_kept                  what the last event given out follows (read back by the trigger);
--   last_due                   the last event's next_attempt_at.
--   It is kept when the aggregate's events are purged: a sequence never starts again.
--
-- The trigger outbox_events_sequence runs for every INSERT, by txo or by any application that
-- writes only the contract's columns, and takes the aggregate's counter row with an exclusive
-- lock held to the end of the inserting transaction. So two transactions appending to one
-- aggregate are serialized: the second gets its sequence after the first committed (or rolled
-- back, giving the number back). Sequence order is commit order.
--
-- It also makes next_attempt_at grow strictly within an aggregate (at least 1 microsecond past
-- the previous event's), so the relay's claim order, (next_attempt_at, id), is sequence order
-- for every aggregate even when ids are not (a multi-row INSERT takes all its ids before its
-- later rows wait for their counters) or the clock stepped back.
--
-- Cost per appended event: a probe of uq_outbox_idempotency_key and the counter row's upsert,
-- inside the INSERT (no round trip); one row of outbox_aggregates per aggregate. The upsert
-- hands its numbers to the trigger through session variables (@txo_seq, @txo_prev, @txo_due),
-- which saves reading the row back. The columns are added at the end of
-- the table, an instant ALTER on MariaDB 10.3 and later.
--
-- The trigger runs with the rights of the account that ran this migration (its DEFINER):
-- keep that account, or re-create the trigger under another (docs/database.md). With binary
-- logging on, creating it needs SUPER or log_bin_trust_function_creators = 1.
--
-- Each change runs only when it is missing, so an interrupted run can be run again.

SET @txo_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
        WHERE table_schema = DATABASE() AND table_name = 'outbox_events'
        AND column_name = 'sequence') = 0,
    'ALTER TABLE outbox_events
        ADD COLUMN sequence BIGINT UNSIGNED NULL,
        ADD COLUMN prev_sequence BIGINT UNSIGNED NULL',
    'DO 0');
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;

CREATE TABLE IF NOT EXISTS outbox_aggregates (
    aggregate_type VARCHAR(64) NOT NULL,
    aggregate_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    last_sequence BIGINT UNSIGNED NOT NULL,
    last_kept BIGINT UNSIGNED NOT NULL,
    prev_kept BIGINT UNSIGNED NOT NULL,
    last_due DATETIME(6) NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
) ENGINE=InnoDB;

DROP TRIGGER IF EXISTS outbox_events_sequence;

DELIMITER //
CREATE TRIGGER outbox_events_sequence BEFORE INSERT ON outbox_events FOR EACH ROW
BEGIN
    DECLARE given BIGINT UNSIGNED DEFAULT NEW.sequence;
    -- An INSERT IGNORE or ON DUPLICATE KEY UPDATE of an event already there (an application
    -- retrying its append) writes no row and must not use up a number: such an insert leaves
    -- the counter alone. (A plain INSERT that fails on the key rolls the counter back with it.)
    IF NOT EXISTS (SELECT 1 FROM outbox_events WHERE idempotency_key = NEW.idempotency_key) THEN
        -- One statement takes the counter row (inserted, or updated under its lock) and leaves
        -- the event's numbers in session variables: the VALUES for a new aggregate; for one
        -- seen before, the assignments, which run left to right (prev_kept reads the old
        -- last_kept, last_kept the new last_sequence) and overwrite them.
        INSERT INTO outbox_aggregates
                (aggregate_type, aggregate_id, last_sequence, last_kept, prev_kept, last_due)
            VALUES (NEW.aggregate_type, NEW.aggregate_id, @txo_seq := COALESCE(given, 1),
                COALESCE(given, 1), @txo_prev := 0, @txo_due := NEW.next_attempt_at)
            ON DUPLICATE KEY UPDATE
                prev_kept = @txo_prev := last_kept,
                last_sequence = @txo_seq := GREATEST(last_sequence + 1, COALESCE(given, 0)),
                last_kept = last_sequence,
                last_due = @txo_due := GREATEST(VALUES(last_due), last_due + INTERVAL 1 MICROSECOND);
        -- A given sequence must grow: GREATEST chose another one when it does not.
        IF given IS NOT NULL AND given <> @txo_seq THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
                'outbox_events.sequence must be greater than the aggregate''s last sequence';
        END IF;
        SET NEW.sequence = @txo_seq, NEW.prev_sequence = @txo_prev, NEW.next_attempt_at = @txo_due;
    END IF;
END//
DELIMITER ;
