-- The inbox checks the order of what it consumes: each event carries its sequence in its
-- aggregate and the sequence it follows (outbox_events.sequence and prev_sequence, published in
-- the envelope), and the consumer keeps the last sequence it handled per aggregate.
--
-- inbox_aggregates   one row per aggregate the consumer handled an event of; last_sequence is
--                    the highest sequence handled. Written in the transaction that handles the
--                    event (src/inbox/inbox_sql.h, INBOX_SQL_ORDER_*), kept when the inbox rows
--                    are purged: an aggregate's next event is checked against it however late.
--                    The primary key is the only index.

CREATE TABLE IF NOT EXISTS inbox_aggregates (
    aggregate_type VARCHAR(64) NOT NULL,
    aggregate_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    last_sequence BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
) ENGINE=InnoDB;
