-- Replays of published history (txo replay): where each one stands, so that a replay that
-- was stopped or killed resumes where it was instead of starting again.
--
-- name          the replay's name (--name): one row per replay.
-- spec          the selection it was started with (filters, --new-keys), in a canonical text:
--               a resume with another selection is refused.
-- to_id         the last outbox_events.id it covers, fixed at its start: events appended
--               later are not part of it.
-- last_id       the id of the last event the publisher acknowledged (0: none yet); a resume
--               starts after it.
-- replayed      how many events it published (counted once each, across resumes).
-- finished_at   when it reached to_id; NULL while it is unfinished.
--
-- Index: PRIMARY (name) only; a handful of rows, one UPDATE per published batch.
CREATE TABLE IF NOT EXISTS outbox_replays (
    name VARCHAR(64) NOT NULL PRIMARY KEY,
    spec VARCHAR(2048) NOT NULL,
    to_id BIGINT NOT NULL,
    last_id BIGINT NOT NULL DEFAULT 0,
    replayed BIGINT NOT NULL DEFAULT 0,
    started_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    finished_at DATETIME(6) NULL
) ENGINE=InnoDB;
