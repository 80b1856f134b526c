-- Deadlines of sagas and of their steps (docs/saga.md, "Deadlines").
--
-- saga_instances:
--   deadline_at    when the saga must have gone forward to its end: set at creation from the
--                  definition (NULL: none). Past it the engine fails the next step it would
--                  try and compensates; compensation is not cut by it.
-- saga_steps:
--   deadline_at    the step's deadline over all its tries: set by its first recorded try
--                  (phase (a) of a call, or the record of a failed try) and kept by later
--                  ones (COALESCE). Past it the step counts as maybe done and the saga
--                  compensates.
--   try_deadline   when the call in flight must have answered: set with phase (a), cleared
--                  when the try is recorded. It equals the instance's lease_until during the
--                  call, so a worker hung in a call past it loses the saga to the resume poll
--                  that already exists (idx_saga_resume); the column is what the stuck listing
--                  shows (where, how long) and how the worker that takes over tells an expired
--                  try from a dead worker.
--
-- No index: the engine reads these columns with rows it loads by PRIMARY / uq_saga_step
-- anyway, and the stuck listing walks the RUNNING range of idx_saga_resume (the sagas in
-- flight) joined to their RUNNING step by uq_saga_step.
--
-- Each ALTER runs only when its first change is missing (checked in information_schema, run
-- through PREPARE), so an interrupted migration can be run again.

SET @txo_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
        WHERE table_schema = DATABASE() AND table_name = 'saga_instances'
        AND column_name = 'deadline_at') = 0,
    'ALTER TABLE saga_instances ADD COLUMN deadline_at DATETIME(6) NULL AFTER retry_at',
    'DO 0');
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;

SET @txo_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
        WHERE table_schema = DATABASE() AND table_name = 'saga_steps'
        AND column_name = 'deadline_at') = 0,
    'ALTER TABLE saga_steps
        ADD COLUMN deadline_at DATETIME(6) NULL AFTER remote_key,
        ADD COLUMN try_deadline DATETIME(6) NULL AFTER deadline_at',
    'DO 0');
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;
