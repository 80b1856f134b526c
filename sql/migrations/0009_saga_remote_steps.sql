-- Remote step parts and the compensation retry policy of the saga engine.
--
-- saga_steps:
--   error_code     the integer txo error code of the step's last failure, next to its text
--                  (`error`), so callers act on the code and never parse the text.
--   remote_state   what is known about the step action's remote part (a call to another
--                  service made with no transaction open):
--                    NONE     never called, or every call was refused / failed before it
--                             could take effect;
--                    CALLING  a call is (or was, when its worker died) in flight;
--                    UNKNOWN  a call may have taken effect (it timed out, or its worker died
--                             during it); never goes back to NONE;
--                    DONE     a call took effect.
--                  A FAILED step whose remote_state is not NONE is compensated like a
--                  COMPLETED one.
--   remote_key     the idempotency key the remote part is called with (the same on every
--                  try, by every worker).
-- saga_instances:
--   compensation_tries  how many times the saga ended COMPENSATION_FAILED.
--   retry_at            when a COMPENSATION_FAILED saga is due for its next automatic retry;
--                       NULL once the engine gave up (an operator retries it by hand).
--   idx_saga_retry      (status, retry_at): workers take due retries oldest first, so sagas
--                       that were given up on (NULL) never stand in front of new failures.
--
-- Each ALTER runs only when its first change is missing (checked in information_schema, run
-- through PREPARE), so an interrupted migration can be run again.

SET @txo_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
        WHERE table_schema = DATABASE() AND table_name = 'saga_steps'
        AND column_name = 'remote_state') = 0,
    'ALTER TABLE saga_steps
        ADD COLUMN error_code INT NULL AFTER error,
        ADD COLUMN remote_state ENUM(''NONE'', ''CALLING'', ''UNKNOWN'', ''DONE'')
            NOT NULL DEFAULT ''NONE'' AFTER error_code,
        ADD COLUMN remote_key VARCHAR(255) NULL AFTER remote_state',
    'DO 0');
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;

SET @txo_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
        WHERE table_schema = DATABASE() AND table_name = 'saga_instances'
        AND column_name = 'retry_at') = 0,
    'ALTER TABLE saga_instances
        ADD COLUMN compensation_tries INT NOT NULL DEFAULT 0 AFTER lease_until,
        ADD COLUMN retry_at DATETIME(6) NULL AFTER compensation_tries,
        ADD KEY idx_saga_retry (status, retry_at)',
    'DO 0');
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;

-- Sagas that failed their compensation before this migration are due for a retry now.
UPDATE saga_instances SET retry_at = CURRENT_TIMESTAMP(6)
    WHERE status = 'COMPENSATION_FAILED' AND retry_at IS NULL AND compensation_tries = 0;
