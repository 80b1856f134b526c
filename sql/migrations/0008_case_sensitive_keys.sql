-- Idempotency keys are compared byte for byte. Under the server's default collation
-- (utf8mb4_*_ci) "Order-Key" and "order-key" were the same key: a second client got the
-- first one's order back, and two outbox events whose keys differed only in case could not
-- both be inserted. The request keys are printable ASCII (the API checks it), so ascii_bin;
-- outbox keys are written by any application, so they stay UTF-8, with a binary collation.
ALTER TABLE idempotency_keys
    MODIFY idempotency_key VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL;
ALTER TABLE outbox_events
    MODIFY idempotency_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
