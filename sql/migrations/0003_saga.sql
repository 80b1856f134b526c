-- Saga instances and their persisted steps.
--
-- Design choices:
--   owner, lease_until  the worker driving the saga and until when; every state change is
--                       fenced by owner, and a saga RUNNING/COMPENSATING with an expired
--                       lease is resumed by another worker (idx_saga_resume).
--   saga_steps.attempts how many times the step's action or compensation was tried.
CREATE TABLE IF NOT EXISTS saga_instances (
    id CHAR(36) PRIMARY KEY,
    saga_type VARCHAR(128) NOT NULL,
    correlation_id VARCHAR(255) NOT NULL,
    status ENUM(
        'RUNNING',
        'COMPLETED',
        'FAILED',
        'COMPENSATING',
        'COMPENSATED',
        'COMPENSATION_FAILED'
    ) NOT NULL DEFAULT 'RUNNING',
    payload JSON NOT NULL,
    owner VARCHAR(128) NULL,
    lease_until DATETIME(6) NULL,
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
        ON UPDATE CURRENT_TIMESTAMP(6),

    UNIQUE KEY uq_saga_correlation (saga_type, correlation_id),
    KEY idx_saga_resume (status, lease_until)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS saga_steps (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    saga_id CHAR(36) NOT NULL,
    step_order INT NOT NULL,
    step_name VARCHAR(128) NOT NULL,
    status ENUM(
        'PENDING',
        'RUNNING',
        'COMPLETED',
        'FAILED',
        'COMPENSATING',
        'COMPENSATED',
        'COMPENSATION_FAILED'
    ) NOT NULL DEFAULT 'PENDING',
    attempts INT NOT NULL DEFAULT 0,
    error TEXT NULL,
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
        ON UPDATE CURRENT_TIMESTAMP(6),

    UNIQUE KEY uq_saga_step (saga_id, step_order),
    FOREIGN KEY (saga_id) REFERENCES saga_instances(id)
) ENGINE=InnoDB;
