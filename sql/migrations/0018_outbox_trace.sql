-- The W3C trace context an event was appended in, so that its publish, its consumers and the
-- calls they make continue the trace of the request that produced it.
--
-- outbox_events.traceparent  the traceparent of the appending operation (55 characters,
--                            version 00: 00-<trace id>-<span id>-<flags>); NULL: none.
-- outbox_events.tracestate   its tracestate (vendor key=value list, at most 512 bytes); NULL or
--                            empty: none.
--
-- Both are part of the outbox contract: an application in any language may fill them. The
-- relay checks them as a receiver of those headers would (an invalid value is left out, never
-- an error) and sends them with the event: as headers or fields of every transport, and in the
-- envelope (CloudEvents: the distributed tracing extension's attributes).
--
-- No index: they are read with the rows the relay claims. Nullable and last, so adding them is
-- an instant ALTER on MariaDB; a row without them stores nothing for them.
ALTER TABLE outbox_events
    ADD COLUMN IF NOT EXISTS traceparent VARCHAR(55) NULL,
    ADD COLUMN IF NOT EXISTS tracestate VARCHAR(512) NULL;
