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
 * aggregate (relay ordering "aggregate", the default): a due PENDING row is claimed only when
 * its shard is held by this relay (outbox_shards, src/relay/shard_sql.h) and its aggregate is
 * not parked behind another event (outbox_parked), RELAY_SQL__OWNED_UNPARKED. The outer table
 * of an ordered claim is aliased `e`.
 *
 * Every statement that changes a claimed row is fenced by the claim's lock token
 * (`locked_by = ?`): once a lease expired and another relay reclaimed the row, the first
 * relay's statements match nothing.
 *
 * A mark writes published_time, not published_at (the virtual column readers use, NULL until
 * then: sql/migrations/0026_outbox_published_in_place.sql): a NULL that becomes a time would
 * lengthen the row, which InnoDB cannot do in place.
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
 * The conditions of the ordered claims: the row's shard is held by this relay, and its
 * aggregate is not parked, or parked by this very event (the one that failed and waits for its
 * retry, or was replayed from the dead letters).
 *
 * The shard condition is `AND e.shard IN (?, ...)` with the shards the claim's first statement
 * found held and share-locked (RELAY_SHARD_SQL_HOLD), bound as values between the _HEAD and
 * the _TAIL of each ordered statement below (relay.c builds one statement per power-of-two
 * count, the last shard repeated); a relay that holds every shard runs the statement without
 * it. The shards are values, not a subquery: a join with outbox_shards inside a claim that
 * locks with SKIP LOCKED would lock shard rows too, and pass over the events of a shard whose
 * row another relay's statement touched for an instant: a later event of an aggregate could
 * be claimed while an earlier one was passed over.
 *
 * Why this keeps per-aggregate order. One relay at a time holds a shard, so one relay at a
 * time claims an aggregate's events, and it claims them in due order (next_attempt_at, id).
 * An event's due time only moves when it fails (backoff), and then its aggregate is parked in
 * the same transaction (RELAY_SQL_PARK_IN): its later events, whose due times are earlier now,
 * are not claimed until it is published or skipped. Within a batch the relay hands an
 * aggregate's events to the publisher in claim order and stops the aggregate at its first
 * failure (relay_publish.c). So an aggregate's events are published in id order.
 *
 * Index: idx_outbox_due as the unordered claims, walked in order; per row read, the shard
 * compared with the bound list and one primary key probe of outbox_parked in a dependent
 * subquery (a consistent read: no lock; the table is empty or tiny while brokers are healthy).
 * The cost per claimed event is flat: it does not depend on how many events wait behind each
 * aggregate, and the claim takes as many events of one aggregate as are due. Rows of other
 * relays' shards are read and passed over: with k relays each claim reads about k times its
 * batch.
 */
#define RELAY_SQL__UNPARKED                                                                        \
    "AND NOT EXISTS (SELECT 1 FROM outbox_parked p WHERE p.aggregate_type = e.aggregate_type "     \
    "AND p.aggregate_id = e.aggregate_id AND p.event_id <> e.id) "

/* Put between the _HEAD and the _TAIL of an ordered statement, followed by the shard list. */
#define RELAY_SQL_ORDERED_SHARD_IN "AND e.shard IN "

/* The columns of every claim query: see enum claim_col in relay.c. created_at is turned into
 * RFC 3339 by the relay (the session time zone is UTC; formatting it in C spares the server a
 * DATE_FORMAT per row); next_attempt_at is for the cursor; `last_error IS NOT NULL` (a bit of
 * the row's null map, the TEXT itself is not read) says an earlier attempt failed, so its
 * publish may unpark its aggregate; sequence and prev_sequence go into the envelope (NULL for an
 * event appended before the database had sequences), and so do traceparent and tracestate. */
#define RELAY_SQL__CLAIM_COLUMNS                                                                   \
    "SELECT id, aggregate_type, aggregate_id, event_type, payload, idempotency_key, created_at, "  \
    "attempts, next_attempt_at, lease_expiries, last_error IS NOT NULL, sequence, prev_sequence, " \
    "traceparent, tracestate "

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
 * Claim, skip-locked strategy, ordered by aggregate, step 1: the due rows of this relay's
 * shards whose aggregate is not parked, in due order, read from one snapshot without locking
 * them. HEAD [SHARD_IN list] TAIL; the _AFTER tail starts at the relay's claim cursor.
 *
 * Why a snapshot and not FOR UPDATE SKIP LOCKED: the rows of one transaction become visible to
 * a locking read one by one while that transaction commits, so a locking scan can pass over an
 * early row (still locked by the committing writer) and take a later row of the same
 * aggregate from the same transaction a moment after. A non-locking read under READ
 * COMMITTED sees a transaction's rows all or none. The shard holder is the only relay that
 * claims these rows, so there is no other claim to skip.
 *
 * Index: idx_outbox_due as RELAY_SQL_CLAIM_SELECT_SKIP_LOCKED (rows of other shards are read
 * and passed over). Locks: none (the next step locks the rows it marks).
 * Params: [shards...,] [cursor (3),] limit. Columns: RELAY_SQL__CLAIM_COLUMNS.
 */
#define RELAY_SQL_ORDERED_SELECT_HEAD                                                              \
    RELAY_SQL__CLAIM_COLUMNS "FROM outbox_events e FORCE INDEX (idx_outbox_due) "                  \
                             "WHERE status = 'PENDING' AND next_attempt_at <= NOW(6) "
#define RELAY_SQL_ORDERED_SELECT_TAIL RELAY_SQL__UNPARKED "ORDER BY next_attempt_at, id LIMIT ?"
#define RELAY_SQL_ORDERED_SELECT_TAIL_AFTER                                                        \
    RELAY_SQL__UNPARKED RELAY_SQL__AFTER_CURSOR "ORDER BY next_attempt_at, id LIMIT ?"
#define RELAY_SQL_CLAIM_SELECT_ORDERED RELAY_SQL_ORDERED_SELECT_HEAD RELAY_SQL_ORDERED_SELECT_TAIL
#define RELAY_SQL_CLAIM_SELECT_ORDERED_AFTER                                                       \
    RELAY_SQL_ORDERED_SELECT_HEAD RELAY_SQL_ORDERED_SELECT_TAIL_AFTER

/*
 * Step 2, leased claims: marks the rows step 1 read PROCESSING under the claim's token, if
 * they are still PENDING (a row changed in between makes the counts differ, and the relay
 * rolls the claim back and tries again next cycle). It waits for a row another session holds
 * (a dead-letter replay, briefly); nothing else locks a held shard's PENDING rows.
 * Index: PRIMARY (id list, forced: on idx_outbox_due the status condition alone would make it
 * lock every PENDING row it walks). Locks: those rows. Params: lock token, lease seconds, ids...
 */
#define RELAY_SQL_ORDERED_CLAIM_BY_ID_IN                                                           \
    "UPDATE outbox_events FORCE INDEX (PRIMARY) SET status = 'PROCESSING', locked_by = ?, "        \
    "locked_until = NOW(6) + INTERVAL ? SECOND WHERE status = 'PENDING' AND id IN "

/*
 * Held claims (claim mode TRANSACTION) of an ordered relay lock nothing more: the rows stay
 * PENDING and unlocked while the batch is published, the held mark statements below take
 * their locks, and the shard holding that the claim share-locked for the whole transaction is
 * the fence (no other relay claims these rows, and a takeover waits for the commit). A row
 * that changed in between is not matched by the mark (`status = 'PENDING'`) and counted as
 * fenced.
 */

/*
 * Claim, update-limit, ordered by aggregate: RELAY_SQL_CLAIM_UPDATE_LIMIT for the rows of this
 * relay's shards whose aggregate is not parked, built as above. The subquery reads another
 * table, which MySQL 5.7 allows in an UPDATE. Index, locks and isolation as
 * RELAY_SQL_CLAIM_UPDATE_LIMIT. Params: lock token, lease seconds, [shards...,]
 * [cursor (3),] limit.
 */
#define RELAY_SQL_ORDERED_UPDATE_HEAD                                                              \
    "UPDATE outbox_events e FORCE INDEX (idx_outbox_due) SET status = 'PROCESSING', "              \
    "locked_by = ?, locked_until = NOW(6) + INTERVAL ? SECOND "                                    \
    "WHERE status = 'PENDING' AND next_attempt_at <= NOW(6) "
#define RELAY_SQL_ORDERED_UPDATE_TAIL RELAY_SQL__UNPARKED "ORDER BY next_attempt_at, id LIMIT ?"
#define RELAY_SQL_ORDERED_UPDATE_TAIL_AFTER                                                        \
    RELAY_SQL__UNPARKED RELAY_SQL__AFTER_CURSOR "ORDER BY next_attempt_at, id LIMIT ?"
#define RELAY_SQL_CLAIM_UPDATE_LIMIT_ORDERED                                                       \
    RELAY_SQL_ORDERED_UPDATE_HEAD RELAY_SQL_ORDERED_UPDATE_TAIL
#define RELAY_SQL_CLAIM_UPDATE_LIMIT_ORDERED_AFTER                                                 \
    RELAY_SQL_ORDERED_UPDATE_HEAD RELAY_SQL_ORDERED_UPDATE_TAIL_AFTER

/*
 * Update-limit, ordered, step 2: RELAY_SQL_CLAIM_SELECT_BY_TOKEN(_AFTER) with the shards bound
 * as in step 1 (the lease pass binds the same range parameters to both steps); the shard
 * condition holds for every row step 1 claimed. Index, locks and isolation as there.
 * Params: [shards...,] [cursor (3),] lock token.
 */
#define RELAY_SQL_ORDERED_BY_TOKEN_HEAD                                                            \
    RELAY_SQL__CLAIM_COLUMNS "FROM outbox_events e FORCE INDEX (idx_outbox_due) "                  \
                             "WHERE status = 'PROCESSING' "
#define RELAY_SQL_ORDERED_BY_TOKEN_TAIL "AND locked_by = ? ORDER BY next_attempt_at, id"
#define RELAY_SQL_ORDERED_BY_TOKEN_TAIL_AFTER                                                      \
    RELAY_SQL__AFTER_CURSOR "AND locked_by = ? ORDER BY next_attempt_at, id"

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
    "UPDATE outbox_events SET status = 'PUBLISHED', published_time = NOW(6), locked_by = NULL, "   \
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
    "UPDATE outbox_events SET status = 'PUBLISHED', published_time = NOW(6), last_error = NULL "   \
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
 * Mark, same transaction, ordered relays: the events that failed park their aggregate (its
 * later events are not claimed until this one is published or skipped). An aggregate already
 * parked keeps its event (IGNORE): it can only be this one again (nothing else of a parked
 * aggregate is claimed), and a batch hands the publisher no event of an aggregate after one
 * that failed. Only rows whose failure this mark recorded qualify (PENDING or FAILED with a
 * last_error): an event whose mark was fenced (its shard was taken over) and that another relay
 * holds is PROCESSING or PUBLISHED, and one back in PENDING carries a last_error, so its
 * publish unparks (RELAY_SQL_UNPARK_IN) whatever it parked. Index: PRIMARY of outbox_events (id
 * list); PRIMARY and uq_parked_event of outbox_parked. Locks: the new or changed outbox_parked
 * rows. Params: ids...
 */
#define RELAY_SQL_PARK_IN                                                                          \
    "INSERT IGNORE INTO outbox_parked (aggregate_type, aggregate_id, event_id) "                   \
    "SELECT aggregate_type, aggregate_id, id FROM outbox_events "                                  \
    "WHERE last_error IS NOT NULL AND status IN ('PENDING', 'FAILED') AND id IN "

/*
 * Mark, same transaction: published events that had failed before unpark their aggregate
 * (a no-op for an event that parked nothing). Index: uq_parked_event. Locks: those rows.
 * Params: ids...
 */
#define RELAY_SQL_UNPARK_IN "DELETE FROM outbox_parked WHERE event_id IN "

/*
 * Events claimed but held back unpublished (their aggregate failed or waits earlier in the
 * cycle) go back to PENDING unchanged: no attempt used, due as before. Fenced by the token.
 * Index: PRIMARY (id list). Locks: those rows. Params: lock token, ids...
 */
#define RELAY_SQL_RELEASE_IN                                                                       \
    "UPDATE outbox_events SET status = 'PENDING', locked_by = NULL, locked_until = NULL "          \
    "WHERE locked_by = ? AND status = 'PROCESSING' AND id IN "

/*
 * Is any event due that an ordered relay could claim, in any shard: a draining relay that does
 * not hold every shard (the others are held by a relay that died, or is draining too) waits
 * while this holds rather than stop with events left. Index: idx_outbox_due, the due PENDING
 * range, stopped at the first row whose aggregate is not parked. Locks: none (consistent read).
 */
#define RELAY_SQL_ANY_DUE                                                                          \
    "SELECT EXISTS (SELECT 1 FROM outbox_events e FORCE INDEX (idx_outbox_due) "                   \
    "WHERE status = 'PENDING' AND next_attempt_at <= NOW(6) " RELAY_SQL__UNPARKED ")"

/*
 * The parked aggregates (txo_relay_list_parked): each outbox_parked row with the event that
 * holds its aggregate back (PENDING and waiting for its retry, or FAILED in the dead letters)
 * and how many later events of the aggregate wait behind it. A failed event with nothing behind
 * it parks nothing worth listing: it is a retry or a dead letter, counted as such. Index:
 * PRIMARY of outbox_parked (small), PRIMARY of outbox_events per row, and a covering count of
 * the aggregate's later entries in idx_outbox_aggregate. Locks: none (consistent read, READ
 * COMMITTED). Params: limit.
 */
#define RELAY_SQL_LIST_PARKED                                                                      \
    "SELECT p.aggregate_type, p.aggregate_id, e.id, e.status, e.attempts, e.last_error, "          \
    "(SELECT COUNT(*) FROM outbox_events w FORCE INDEX (idx_outbox_aggregate) "                    \
    "WHERE w.aggregate_type = p.aggregate_type AND w.aggregate_id = p.aggregate_id "               \
    "AND w.id > p.event_id) AS waiting FROM outbox_parked p JOIN outbox_events e "                 \
    "ON e.id = p.event_id HAVING waiting > 0 ORDER BY e.id LIMIT ?"

/* How many aggregates RELAY_SQL_LIST_PARKED finds, up to its limit (txo_relay_count_parked).
 * Index, locks and isolation as there. Params: limit. */
#define RELAY_SQL_COUNT_PARKED "SELECT COUNT(*) FROM (" RELAY_SQL_LIST_PARKED ") parked"

#endif
