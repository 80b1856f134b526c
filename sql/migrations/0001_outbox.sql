-- The transactional outbox and its dead-letter table: everything `txo relay` needs.
-- This layout is a public contract (README, "Outbox table contract"): applications in any
-- language insert rows here inside their own transactions and `txo relay` publishes them.
--
-- Design choices:
--   next_attempt_at  when the row is due; what it means per status:
--                      PENDING     when it may be claimed (insert: now; after a failed
--                                  publish: now + exponential backoff with jitter);
--                      PROCESSING  unchanged by the claim: the due time it was claimed at
--                                  (the lease is locked_until);
--                      PUBLISHED   the due time of its last attempt (not used any more);
--                      FAILED      when the next attempt would have been (not used).
--   idx_outbox_due   (status, next_attempt_at [, id]): the only index the relay uses besides
--                    the primary key. The claim walks its PENDING range in order and stops
--                    after LIMIT rows, so it never reads PUBLISHED rows (instead of a
--                    plain (status, created_at) index). Its PROCESSING range holds only the
--                    rows in flight (a few batches), so the lease reclaim (PROCESSING and
--                    locked_until in the past) and the update-limit claim's read-back by lock
--                    token walk that short range instead of having indexes of their own.
--   No index contains locked_by or locked_until: a claim and a mark each move one
--   secondary index entry per row (the status in idx_outbox_due) instead of three, which
--   is most of the relay's server CPU per event.
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
    KEY idx_outbox_due (status, next_attempt_at)
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
