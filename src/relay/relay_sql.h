/*
 * Every SQL statement of the outbox relay (src/relay/relay.c), one named macro each. Above
 * each: the index it relies on, the rows it locks and the isolation it assumes. The schema is
 * sql/migrations/0001_outbox.sql.
 *
 * Statements whose name ends in _IN end with `id IN `: the relay appends the placeholder list
 * built by txo_sql_in_list() (count rounded up to a power of two, the last id repeated), so
 * each statement exists in at most ~15 prepared variants per connection. The values are
 * always bound.
 *
 * The claim statements come in two forms: unordered (any due PENDING row) and ordered by
 * aggregate (relay ordering "aggregate", the default): a due PENDING row is claimed only when it
 * is the head of its aggregate, i.e. the event just before it in its aggregate (same
 * aggregate_type and aggregate_id, next lower id) is PUBLISHED or SKIPPED, or there is none
 * (RELAY_SQL__HEAD_OF_AGGREGATE). The outer table of an ordered claim is aliased `e`.
 *
 * Every statement that changes a claimed row is fenced by the claim's lock token
 * (`locked_by = ?`): once a lease expired and another relay reclaimed the row, the first
 * relay's statements match nothing.
 */
#ifndef TXO_RELAY_SQL_H
#define TXO_RELAY_SQL_H

/*
 * The claim cursor. Each relay remembers (next_attempt_at, id) of the last row of its last
 * full batch, and its next claim starts after it: the start of the PENDING range of
 * idx_outbox_due is full of entries that earlier claims delete-marked (the rows moved to
 * PROCESSING) and that purge has not removed yet, and a claim from the start of the range
 * would step over all of them. Rows behind the cursor (committed late by a long transaction
 * with an early next_attempt_at, reclaimed, or skipped while another transaction held their
 * lock) are found by the claim without cursor, which the relay runs whenever a cursor claim
 * finds nothing (in the same transaction), after one that returned a short batch, and at
 * least once per second (relay.c, CLAIM_RESCAN_MS). The OR form gives the range optimizer
 * two ranges of idx_outbox_due ((t, id..] and (t.., now]), both walked in index order.
 * Params: cursor next_attempt_at, the same again, cursor id.
 */
#define RELAY_SQL__AFTER_CURSOR "AND (next_attempt_at > ? OR (next_attempt_at = ? AND id > ?)) "

/*
 * The head-of-aggregate condition of the ordered claims. Why the event just before is enough:
 * every event the ordered claims ever claimed was a head, so an event is PUBLISHED or SKIPPED
 * only after every earlier event of its aggregate was; "the one before is done" therefore
 * means "all before are done". A head stays a head until it is itself claimed (PUBLISHED is
 * terminal, SKIPPED too), so a head seen by one relay's read is still a head when another
 * relay's claim locks it. And since the one before a PENDING event is never PUBLISHED while
 * an earlier one is in flight, at most one event per aggregate is PROCESSING, across any
 * number of relays: the first relay's claim of the head makes every later event of the
 * aggregate fail the condition until its mark commits PUBLISHED.
 *
 * The subquery is a plain (consistent, non-locking) read under READ COMMITTED even inside
 * SELECT ... FOR UPDATE SKIP LOCKED and UPDATE: it sees the last committed status of the event
 * before, so another relay's uncommitted claim of it still reads PENDING (blocks) and its
 * uncommitted PUBLISHED mark still reads PROCESSING (blocks); a locked event before is never
 * skipped over. (tests/integration/test_relay.c holds the head of an aggregate locked and checks
 * that its successor is not claimed.)
 *
 * Index: idx_outbox_aggregate (aggregate_type, aggregate_id, id), ref on the aggregate read
 * backwards from its newest event and stopped at the first one before the candidate: the cost
 * per candidate grows with the candidate's own aggregate's events after it (its backlog), not
 * with the aggregate's history nor with the table. Columns are compared with columns (no
 * cast), so it works for aggregate_id of any type. A FAILED event before blocks the aggregate
 * until an operator replays (-> PENDING, it is the head again) or skips it (-> SKIPPED).
 * Rows written by writers that do not serialise per aggregate may commit out of id order; the
 * order kept is the id order of the rows committed when the claim reads them.
 */
#define RELAY_SQL__HEAD_OF_AGGREGATE                                                               \
    "AND COALESCE((SELECT p.status IN ('PUBLISHED', 'SKIPPED') "                                   \
    "FROM outbox_events p FORCE INDEX (idx_outbox_aggregate) "                                     \
    "WHERE p.aggregate_type = e.aggregate_type AND p.aggregate_id = e.aggregate_id "               \
    "AND p.id < e.id ORDER BY p.id DESC LIMIT 1), 1) = 1 "

/* The columns of every claim query: see enum claim_col in relay.c. created_at is turned into
 * RFC 3339 by the relay (the session time zone is UTC; formatting it in C spares the server a
 * DATE_FORMAT per row); next_attempt_at is for the cursor. */
#define RELAY_SQL__CLAIM_COLUMNS                                                                   \
    "SELECT id, aggregate_type, aggregate_id, event_type, payload, idempotency_key, created_at, "  \
    "attempts, next_attempt_at, lease_expiries "

/*
 * Claim, skip-locked strategy, step 1: the due PENDING rows in publish order.
 * Index: idx_outbox_due (status, next_attempt_at [, id]): one range scan of status = 'PENDING'
 * in index order, stopped after LIMIT rows; PUBLISHED rows are never read. The hint keeps it
 * so: with a large backlog the optimizer may otherwise read the range and filesort every
 * PENDING row on each claim (seen on MariaDB 10.11 for the UPDATE form with another
 * (status, ...) index: 20,000 rows sorted per claim, 3x slower).
 * Locks: exclusive locks on the returned rows; rows locked by another relay's claim are skipped,
 * not waited for. Isolation: READ COMMITTED (no gap locks; the claim transaction is short).
 * Params: limit. Columns: RELAY_SQL__CLAIM_COLUMNS.
 */
#define RELAY_SQL_CLAIM_SELECT_SKIP_LOCKED                                                         \
    RELAY_SQL__CLAIM_COLUMNS "FROM outbox_events FORCE INDEX (idx_outbox_due) "                    \
                             "WHERE status = 'PENDING' AND next_attempt_at <= NOW(6) "             \
                             "ORDER BY next_attempt_at, id LIMIT ? FOR UPDATE SKIP LOCKED"

/*
 * The same, starting after the relay's claim cursor (RELAY_SQL__AFTER_CURSOR): the range
 * scan begins at the cursor instead of the start of the PENDING range. Index, locks and
 * isolation as RELAY_SQL_CLAIM_SELECT_SKIP_LOCKED. Params: cursor (3), limit.
 */
#define RELAY_SQL_CLAIM_SELECT_SKIP_LOCKED_AFTER                                                   \
    RELAY_SQL__CLAIM_COLUMNS                                                                       \
    "FROM outbox_events FORCE INDEX (idx_outbox_due) "                                             \
    "WHERE status = 'PENDING' AND next_attempt_at <= NOW(6) " RELAY_SQL__AFTER_CURSOR              \
    "ORDER BY next_attempt_at, id LIMIT ? FOR UPDATE SKIP LOCKED"

/*
 * Claim, skip-locked strategy, step 2, same transaction: marks the selected rows PROCESSING
 * under the claim's token with a lease (next_attempt_at is left as it is). Index: PRIMARY (id
 * list); the row moves from the PENDING to the PROCESSING range of idx_outbox_due, the only
 * secondary index entry it changes. Locks: the same rows, already locked by step 1.
 * Isolation: READ COMMITTED. Params: lock token, lease seconds, ids...
 */
#define RELAY_SQL_CLAIM_BY_ID_IN                                                                   \
    "UPDATE outbox_events SET status = 'PROCESSING', locked_by = ?, "                              \
    "locked_until = NOW(6) + INTERVAL ? SECOND WHERE id IN "

/*
 * Claim, update-limit strategy (MySQL 5.7), step 1: marks up to LIMIT due PENDING rows
 * PROCESSING under the claim's token. Index: idx_outbox_due (status, next_attempt_at), walked
 * in order and stopped after LIMIT rows (forced, see RELAY_SQL_CLAIM_SELECT_SKIP_LOCKED).
 * Locks: exclusive locks on the rows it scans; concurrent claims wait for each other
 * (the price of having no SKIP LOCKED). Isolation: READ COMMITTED (locks on non-matching rows
 * are released at once). Params: lock token, lease seconds, limit.
 */
#define RELAY_SQL_CLAIM_UPDATE_LIMIT                                                               \
    "UPDATE outbox_events FORCE INDEX (idx_outbox_due) SET status = 'PROCESSING', "                \
    "locked_by = ?, locked_until = NOW(6) + INTERVAL ? SECOND "                                    \
    "WHERE status = 'PENDING' AND next_attempt_at <= NOW(6) "                                      \
    "ORDER BY next_attempt_at, id LIMIT ?"

/*
 * The same, starting after the relay's claim cursor (RELAY_SQL__AFTER_CURSOR). Index, locks
 * and isolation as RELAY_SQL_CLAIM_UPDATE_LIMIT. Params: lock token, lease seconds,
 * cursor (3), limit.
 */
#define RELAY_SQL_CLAIM_UPDATE_LIMIT_AFTER                                                         \
    "UPDATE outbox_events FORCE INDEX (idx_outbox_due) SET status = 'PROCESSING', "                \
    "locked_by = ?, locked_until = NOW(6) + INTERVAL ? SECOND "                                    \
    "WHERE status = 'PENDING' AND next_attempt_at <= NOW(6) " RELAY_SQL__AFTER_CURSOR              \
    "ORDER BY next_attempt_at, id LIMIT ?"

/*
 * Claim, skip-locked, ordered by aggregate: RELAY_SQL_CLAIM_SELECT_SKIP_LOCKED for heads of
 * their aggregates only (RELAY_SQL__HEAD_OF_AGGREGATE). Index: idx_outbox_due as there, plus
 * one lookup in idx_outbox_aggregate per candidate row walked. Locks: exclusive locks on the
 * returned rows (rows locked by another relay are skipped); the rows the condition rejects are
 * locked and released at once (READ COMMITTED), and the subquery locks nothing. Isolation:
 * READ COMMITTED. Params: limit. Columns: RELAY_SQL__CLAIM_COLUMNS.
 */
#define RELAY_SQL_CLAIM_SELECT_SKIP_LOCKED_ORDERED                                                 \
    RELAY_SQL__CLAIM_COLUMNS                                                                       \
    "FROM outbox_events e FORCE INDEX (idx_outbox_due) "                                           \
    "WHERE status = 'PENDING' AND next_attempt_at <= NOW(6) " RELAY_SQL__HEAD_OF_AGGREGATE         \
    "ORDER BY next_attempt_at, id LIMIT ? FOR UPDATE SKIP LOCKED"

/*
 * The same, starting after the relay's claim cursor. Index, locks and isolation as
 * RELAY_SQL_CLAIM_SELECT_SKIP_LOCKED_ORDERED. Params: cursor (3), limit.
 */
#define RELAY_SQL_CLAIM_SELECT_SKIP_LOCKED_ORDERED_AFTER                                           \
    RELAY_SQL__CLAIM_COLUMNS                                                                       \
    "FROM outbox_events e FORCE INDEX (idx_outbox_due) "                                           \
    "WHERE status = 'PENDING' AND next_attempt_at <= NOW(6) " RELAY_SQL__AFTER_CURSOR              \
        RELAY_SQL__HEAD_OF_AGGREGATE "ORDER BY next_attempt_at, id LIMIT ? FOR UPDATE SKIP LOCKED"

/*
 * Claim, update-limit, ordered by aggregate: RELAY_SQL_CLAIM_UPDATE_LIMIT for heads only. The
 * subquery reads the table being updated: MariaDB (10.3.2+) allows that, MySQL 5.7 does not
 * (error 1093), so on MySQL 5.7 run the relay with ordering "none". Rows this statement
 * already changed are seen by its own subquery as PROCESSING, so it never takes two events of
 * one aggregate. Index: idx_outbox_due plus one idx_outbox_aggregate lookup per row walked.
 * Locks: exclusive locks on the rows it scans (non-matching ones released at once, READ
 * COMMITTED); concurrent claims wait for each other. Params: lock token, lease seconds, limit.
 */
#define RELAY_SQL_CLAIM_UPDATE_LIMIT_ORDERED                                                       \
    "UPDATE outbox_events e FORCE INDEX (idx_outbox_due) SET status = 'PROCESSING', "              \
    "locked_by = ?, locked_until = NOW(6) + INTERVAL ? SECOND "                                    \
    "WHERE status = 'PENDING' AND next_attempt_at <= NOW(6) " RELAY_SQL__HEAD_OF_AGGREGATE         \
    "ORDER BY next_attempt_at, id LIMIT ?"

/*
 * The same, starting after the relay's claim cursor. Index, locks and isolation as
 * RELAY_SQL_CLAIM_UPDATE_LIMIT_ORDERED. Params: lock token, lease seconds, cursor (3), limit.
 */
#define RELAY_SQL_CLAIM_UPDATE_LIMIT_ORDERED_AFTER                                                 \
    "UPDATE outbox_events e FORCE INDEX (idx_outbox_due) SET status = 'PROCESSING', "              \
    "locked_by = ?, locked_until = NOW(6) + INTERVAL ? SECOND "                                    \
    "WHERE status = 'PENDING' AND next_attempt_at <= NOW(6) " RELAY_SQL__AFTER_CURSOR              \
        RELAY_SQL__HEAD_OF_AGGREGATE "ORDER BY next_attempt_at, id LIMIT ?"

/*
 * Claim, update-limit strategy, step 2, same transaction: reads back the rows of this token.
 * Index: idx_outbox_due, the status = 'PROCESSING' range (the rows in flight: this and other
 * relays' current batches, expired leases not yet reclaimed, and entries of published rows
 * that purge has not removed yet), walked in order, so the batch comes back in claim order
 * without a sort; locked_by is checked on the row. Locks: none beyond step 1's (plain read).
 * Isolation: READ COMMITTED (sees step 1's own changes). Params: lock token.
 * Columns: RELAY_SQL__CLAIM_COLUMNS.
 */
#define RELAY_SQL_CLAIM_SELECT_BY_TOKEN                                                            \
    RELAY_SQL__CLAIM_COLUMNS "FROM outbox_events FORCE INDEX (idx_outbox_due) "                    \
                             "WHERE status = 'PROCESSING' AND locked_by = ? "                      \
                             "ORDER BY next_attempt_at, id"

/*
 * The same after a claim that started at the cursor: the batch lies after the cursor, so the
 * scan starts there and skips the older entries of the PROCESSING range. Index, locks and
 * isolation as RELAY_SQL_CLAIM_SELECT_BY_TOKEN. Params: cursor (3), lock token.
 */
#define RELAY_SQL_CLAIM_SELECT_BY_TOKEN_AFTER                                                      \
    RELAY_SQL__CLAIM_COLUMNS "FROM outbox_events FORCE INDEX (idx_outbox_due) "                    \
                             "WHERE status = 'PROCESSING' " RELAY_SQL__AFTER_CURSOR                \
                             "AND locked_by = ? ORDER BY next_attempt_at, id"

/*
 * Mark: the acknowledged rows become PUBLISHED and release their lease, fenced by the token.
 * Index: PRIMARY (id list). Locks: those rows, until the mark transaction commits.
 * Isolation: READ COMMITTED. Params: lock token, ids...
 */
#define RELAY_SQL_MARK_PUBLISHED_IN                                                                \
    "UPDATE outbox_events SET status = 'PUBLISHED', published_at = NOW(6), locked_by = NULL, "     \
    "locked_until = NULL, last_error = NULL "                                                      \
    "WHERE locked_by = ? AND status = 'PROCESSING' AND id IN "

/*
 * Mark: rows whose publish failed with one same error. attempts + 1 < max: back to PENDING,
 * lease released, next_attempt_at = now + backoff. attempts + 1 >= max: FAILED, keeping
 * locked_by so RELAY_SQL_DEAD_LETTER_IN can pick exactly these rows by token.
 *
 * The backoff is txo_backoff_delay_ms() in SQL, with attempt = attempts + 1:
 *   min(max_ms, base_ms * 2^(attempt - 1)) * (1 - jitter + 2 * jitter * RAND())  [ms]
 * rounded to the millisecond like the C function, then turned into microseconds
 * (the exponent is capped at 62, where max_ms has long won, so POW() cannot overflow).
 *
 * Order of the SET list matters: MySQL evaluates single-table UPDATE assignments left to
 * right and a later one sees the NEW value of a column assigned earlier. So `attempts` is
 * assigned LAST and every expression before it reads the OLD attempts (attempt - 1 ==
 * attempts). Under MariaDB's SIMULTANEOUS_ASSIGNMENT mode every expression reads old values
 * anyway, so this order is right under both semantics.
 *
 * Index: PRIMARY (id list). Locks: those rows. Isolation: READ COMMITTED.
 * Params: last_error, max_attempts, max_ms, base_ms, jitter, jitter, max_attempts,
 * max_attempts, lock token, ids...
 */
#define RELAY_SQL_MARK_FAILED_IN                                                                   \
    "UPDATE outbox_events SET last_error = ?, "                                                    \
    "status = IF(attempts + 1 >= ?, 'FAILED', 'PENDING'), "                                        \
    "next_attempt_at = NOW(6) + INTERVAL ROUND(LEAST(?, ? * POW(2, LEAST(attempts, 62))) "         \
    "* (1 - ? + 2 * ? * RAND())) * 1000 MICROSECOND, "                                             \
    "locked_by = IF(attempts + 1 >= ?, locked_by, NULL), "                                         \
    "locked_until = IF(attempts + 1 >= ?, locked_until, NULL), "                                   \
    "attempts = attempts + 1 "                                                                     \
    "WHERE locked_by = ? AND status = 'PROCESSING' AND id IN "

/*
 * Mark, same transaction: a dead-letter copy of every row this batch just made FAILED.
 * Index: PRIMARY (id list) on outbox_events. Locks: the FAILED rows (already locked by the
 * previous statement) and the new dead_letter_events rows. Isolation: READ COMMITTED.
 * Params: lock token, ids...
 */
#define RELAY_SQL_DEAD_LETTER_IN                                                                   \
    "INSERT INTO dead_letter_events (source_event_id, event_type, payload, error) "                \
    "SELECT id, event_type, payload, last_error FROM outbox_events "                               \
    "WHERE locked_by = ? AND status = 'FAILED' AND id IN "

/*
 * Mark, same transaction: releases the lease of the rows made FAILED above.
 * Index: PRIMARY (id list). Locks: those rows. Isolation: READ COMMITTED.
 * Params: lock token, ids...
 */
#define RELAY_SQL_UNLOCK_FAILED_IN                                                                 \
    "UPDATE outbox_events SET locked_by = NULL, locked_until = NULL "                              \
    "WHERE locked_by = ? AND status = 'FAILED' AND id IN "

/*
 * The claim mode "transaction" (relay.c, held_tx): the batch is claimed with the
 * RELAY_SQL_CLAIM_SELECT_SKIP_LOCKED* statements above, published while their row locks are
 * held, and marked in the same transaction with the three statements below. The rows stay
 * PENDING until the mark, so each event's idx_outbox_due entry moves once (PENDING ->
 * PUBLISHED) instead of twice; the locks are the fence: no other relay can claim or change a
 * row this transaction holds, and if the relay dies the transaction rolls back and the rows
 * are due again at once, untouched.
 */

/*
 * Held mark: the acknowledged rows become PUBLISHED. Index: PRIMARY (id list). Locks: those
 * rows, already locked by the claim. Isolation: READ COMMITTED. Params: ids...
 */
#define RELAY_SQL_HELD_PUBLISHED_IN                                                                \
    "UPDATE outbox_events SET status = 'PUBLISHED', published_at = NOW(6), last_error = NULL "     \
    "WHERE status = 'PENDING' AND id IN "

/*
 * Held mark: rows whose publish failed with one same error, as RELAY_SQL_MARK_FAILED_IN (the
 * same backoff in SQL and the same order of the SET list) without the lease columns, which a
 * held claim never set. Index: PRIMARY (id list). Locks: those rows (already locked).
 * Isolation: READ COMMITTED. Params: last_error, max_attempts, max_ms, base_ms, jitter,
 * jitter, ids...
 */
#define RELAY_SQL_HELD_FAILED_IN                                                                   \
    "UPDATE outbox_events SET last_error = ?, "                                                    \
    "status = IF(attempts + 1 >= ?, 'FAILED', 'PENDING'), "                                        \
    "next_attempt_at = NOW(6) + INTERVAL ROUND(LEAST(?, ? * POW(2, LEAST(attempts, 62))) "         \
    "* (1 - ? + 2 * ? * RAND())) * 1000 MICROSECOND, "                                             \
    "attempts = attempts + 1 "                                                                     \
    "WHERE status = 'PENDING' AND id IN "

/*
 * Held mark, same transaction: a dead-letter copy of every row of the list the previous
 * statement made FAILED (they were PENDING when claimed and are still locked, so no older
 * FAILED row is among them). Index: PRIMARY (id list) on outbox_events. Locks: those rows and
 * the new dead_letter_events rows. Isolation: READ COMMITTED. Params: ids...
 */
#define RELAY_SQL_HELD_DEAD_LETTER_IN                                                              \
    "INSERT INTO dead_letter_events (source_event_id, event_type, payload, error) "                \
    "SELECT id, event_type, payload, last_error FROM outbox_events "                               \
    "WHERE status = 'FAILED' AND id IN "

/*
 * Reclaim: PROCESSING rows whose lease expired (their relay died or hung) go back to PENDING,
 * due at once (next_attempt_at is unchanged by the claim, so already past), and count the
 * expiry in lease_expiries. Rows at the lease-expiry limit were taken out just before, in the
 * same transaction (RELAY_SQL_RECLAIM_SELECT_POISON). Index: idx_outbox_due, the
 * status = 'PROCESSING' range (the rows in flight, a few batches), with locked_until checked on
 * each row. Locks: the expired rows, in its own short transaction (a row of a claim not yet
 * committed is waited for, for as long as that claim takes). Isolation: READ COMMITTED.
 * Params: limit.
 */
#define RELAY_SQL_RECLAIM_EXPIRED                                                                  \
    "UPDATE outbox_events FORCE INDEX (idx_outbox_due) SET status = 'PENDING', "                   \
    "locked_by = NULL, locked_until = NULL, lease_expiries = lease_expiries + 1 "                  \
    "WHERE status = 'PROCESSING' AND locked_until < NOW(6) LIMIT ?"

/*
 * Reclaim, first step: the expired rows whose lease would now expire for the limit's time:
 * poison events, which kill or hang every relay that publishes them. Index: idx_outbox_due,
 * the PROCESSING range, as RELAY_SQL_RECLAIM_EXPIRED. Locks: the returned rows (waits for a
 * claim not yet committed, like the reclaim). Isolation: READ COMMITTED.
 * Params: max lease expiries, limit.
 */
#define RELAY_SQL_RECLAIM_SELECT_POISON                                                            \
    "SELECT id FROM outbox_events FORCE INDEX (idx_outbox_due) "                                   \
    "WHERE status = 'PROCESSING' AND locked_until < NOW(6) AND lease_expiries + 1 >= ? "           \
    "LIMIT ? FOR UPDATE"

/*
 * Reclaim, second step, same transaction: the poison rows become FAILED under the reclaim's
 * own token (so RELAY_SQL_DEAD_LETTER_IN and RELAY_SQL_UNLOCK_FAILED_IN pick exactly them),
 * with the reason. last_error is assigned before lease_expiries and reads it + 1, which is
 * right whether the server assigns left to right or simultaneously (see
 * RELAY_SQL_MARK_FAILED_IN). Index: PRIMARY (id list). Locks: those rows (already locked).
 * Isolation: READ COMMITTED. Params: token, ids...
 */
#define RELAY_SQL_RECLAIM_POISON_IN                                                                \
    "UPDATE outbox_events SET last_error = CONCAT('TXO_ELEASELOST: lease expired ', "              \
    "lease_expiries + 1, ' times: the relay publishing it died or hung each time'), "              \
    "status = 'FAILED', locked_by = ?, lease_expiries = lease_expiries + 1 "                       \
    "WHERE status = 'PROCESSING' AND locked_until < NOW(6) AND id IN "

/*
 * The parked aggregates (txo_relay_list_parked): heads of their aggregate (as the ordered claim
 * sees them) that failed, either FAILED (dead-lettered, waiting for an operator) or PENDING
 * after a failed attempt (waiting for the retry), and that hold back at least one later event
 * of their aggregate (`waiting`: how many). A failed event with nothing behind it parks
 * nothing: it is a retry or a dead letter, counted as such. Index: idx_outbox_due, the PENDING and
 * FAILED ranges (an operator's query, not a hot path: it reads every due row once), one
 * idx_outbox_aggregate lookup per candidate and a covering count of the aggregate's later entries.
 * Locks: none (consistent read, READ COMMITTED). Params: limit.
 */
#define RELAY_SQL_LIST_PARKED                                                                      \
    "SELECT e.aggregate_type, e.aggregate_id, e.id, e.status, e.attempts, e.last_error, "          \
    "(SELECT COUNT(*) FROM outbox_events w FORCE INDEX (idx_outbox_aggregate) "                    \
    "WHERE w.aggregate_type = e.aggregate_type AND w.aggregate_id = e.aggregate_id "               \
    "AND w.id > e.id) AS waiting FROM outbox_events e FORCE INDEX (idx_outbox_due) "               \
    "WHERE e.status IN ('PENDING', 'FAILED') AND (e.status = 'FAILED' OR e.attempts > "            \
    "0) " RELAY_SQL__HEAD_OF_AGGREGATE "HAVING waiting > 0 ORDER BY e.id LIMIT ?"

/* How many aggregates RELAY_SQL_LIST_PARKED finds, up to its limit (txo_relay_count_parked).
 * Index, locks and isolation as there. Params: limit. */
#define RELAY_SQL_COUNT_PARKED "SELECT COUNT(*) FROM (" RELAY_SQL_LIST_PARKED ") parked"

#endif
