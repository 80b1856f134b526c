-- The W3C trace context a command was enqueued in, so that the handler that runs it (and the
-- saga it starts) continues the trace of the request that asked for it.
--
-- command_queue.traceparent  the traceparent of the enqueuing operation (55 characters,
--                            version 00); NULL: none.
-- command_queue.tracestate   its tracestate (at most 512 bytes); NULL or empty: none.
--
-- No index: they are read with the rows a worker claims. Nullable and last, so adding them is
-- an instant ALTER on MariaDB; a command without them stores nothing for them.
ALTER TABLE command_queue
    ADD COLUMN IF NOT EXISTS traceparent VARCHAR(55) NULL,
    ADD COLUMN IF NOT EXISTS tracestate VARCHAR(512) NULL;
