-- Idempotency keys keep the HTTP status of the stored response next to its body, so
-- a repeated request gets exactly what the first one got (201 for an order, 202 in async
-- mode). The index serves the retention cleaner (`txo worker` purges old keys in batches).
ALTER TABLE idempotency_keys
    ADD COLUMN response_status SMALLINT NULL AFTER response_body,
    ADD KEY idx_idempotency_created (created_at);
