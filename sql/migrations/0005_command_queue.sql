-- Commands to run asynchronously: the async API answers 202 Accepted and queues a
-- StartOrderSaga command here.
CREATE TABLE IF NOT EXISTS command_queue (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    command_type VARCHAR(128) NOT NULL,
    payload JSON NOT NULL,
    status ENUM('PENDING', 'PROCESSING', 'DONE', 'FAILED')
        NOT NULL DEFAULT 'PENDING',
    attempts INT NOT NULL DEFAULT 0,
    locked_by VARCHAR(128) NULL,
    locked_until DATETIME(6) NULL,
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
        ON UPDATE CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;
