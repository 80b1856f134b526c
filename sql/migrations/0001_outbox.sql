-- The transactional outbox and its dead-letter table: everything `txo relay` needs.
-- This layout is a public contract (README, "Outbox table contract"): applications in any
-- language insert rows here inside their own transactions and `txo relay` publishes them.
--
-- Beyond the seed:
--   next_attempt_at  when a PENDING row is next due; failed publishes push it out with
--                    exponential backoff + jitter instead of retrying in a hot loop.
--   idx_outbox_due   (status, next_attempt_at): the claim query walks this index in order
--                    and stops after LIMIT rows, so it never reads PUBLISHED rows. It
--                    replaces the seed's (status, created_at) index.
--   idx_outbox_locked_by: the update-limit claim selects its batch by lock token.
CREATE TABLE IF NOT EXISTS outbox_events (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,

    aggregate_type VARCHAR(64) NOT NULL,
    aggregate_id BIGINT NOT NULL,
    event_type VARCHAR(128) NOT NULL,

    payload JSON NOT NULL,

    status ENUM('PENDING', 'PROCESSING', 'PUBLISHED', 'FAILED')
        NOT NULL DEFAULT 'PENDING',

    attempts INT NOT NULL DEFAULT 0,
    next_attempt_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    locked_by VARCHAR(128) NULL,
    locked_until DATETIME(6) NULL,

    last_error TEXT NULL,
    published_at DATETIME(6) NULL,

    idempotency_key VARCHAR(255) NOT NULL,

    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
        ON UPDATE CURRENT_TIMESTAMP(6),

    UNIQUE KEY uq_outbox_idempotency_key (idempotency_key),
    KEY idx_outbox_due (status, next_attempt_at),
    KEY idx_outbox_lock (status, locked_until),
    KEY idx_outbox_locked_by (locked_by)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS dead_letter_events (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    source_event_id BIGINT NULL,
    event_type VARCHAR(128) NOT NULL,
    payload JSON NOT NULL,
    error TEXT NOT NULL,
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    KEY idx_dead_letter_source (source_event_id)
) ENGINE=InnoDB;
