-- The W3C trace context a saga was started in (the event or request that created it), so that
-- each of its steps, the events they append and the calls they make to other services
-- continue that trace, in whichever worker runs them.
--
-- saga_instances.traceparent  the creating operation's traceparent (version 00, 55 characters);
--                             NULL: none.
-- saga_instances.tracestate   its tracestate (at most 512 bytes); NULL: none.
--
-- No index: read with the instance the engine loads by PRIMARY. Nullable and last: an instant
-- ALTER on MariaDB.
ALTER TABLE saga_instances
    ADD COLUMN IF NOT EXISTS traceparent VARCHAR(55) NULL,
    ADD COLUMN IF NOT EXISTS tracestate VARCHAR(512) NULL;
