/*
 * Every SQL statement of the saga engine (src/saga/saga.c), one macro each. Values are always
 * bound (`?`); the only SQL assembled at run time is the placeholder list of the multi-row
 * step insert (txo_sql_values_rows), so the engine also runs on MySQL 5.7.
 *
 * All statements run at READ COMMITTED. Fencing: every write to a saga that is being driven
 * carries `owner = ?` and the expected current `status = ?` in its WHERE clause and is judged
 * by its affected-row count (0 = the lease was lost or the row moved under us). A step's
 * completion is ONE statement (SAGA_SQL_STEP_DONE*) that fences, renews the lease and moves the
 * step, at the end of the step transaction: if it matches nothing the transaction rolls back,
 * the action's writes with it. It row-locks the instance until commit, so two workers can
 * never COMMIT a step of the same saga at the same time (retries and compensations also fence
 * first, SAGA_SQL_FENCE, and then hold that lock for the whole transaction).
 */
#ifndef TXO_SAGA_SQL_H
#define TXO_SAGA_SQL_H

/*
 * txo_saga_create: a new instance, or nothing when (saga_type, correlation_id) exists.
 * Index: PRIMARY and uq_saga_correlation (the duplicate check). Locks: the new row, or the
 * existing row (exclusive lock on the duplicate, as ON DUPLICATE KEY UPDATE does). affected_rows: 1
 * = new, 0 = existed (no change made by `id = id`).
 */
#define SAGA_SQL_INSERT_INSTANCE                                                                   \
    "INSERT INTO saga_instances (id, saga_type, correlation_id, status, payload) "                 \
    "VALUES (?, ?, ?, 'RUNNING', ?) ON DUPLICATE KEY UPDATE id = id"

/*
 * Every PENDING step of a new saga in one statement: SAGA_SQL_INSERT_STEPS followed by one
 * SAGA_SQL_INSERT_STEPS_ROW per step (txo_sql_values_rows; one prepared variant per saga
 * definition, since its step count is fixed). Params per row: saga id, step_order (1-based),
 * step_name. Index: uq_saga_step (and the FK to saga_instances.id: a shared lock on the
 * instance row this transaction just inserted). Locks: the new rows.
 */
#define SAGA_SQL_INSERT_STEPS                                                                      \
    "INSERT INTO saga_steps (saga_id, step_order, step_name, status) VALUES "
#define SAGA_SQL_INSERT_STEPS_ROW "(?, ?, ?, 'PENDING')"

/* The id of a saga by its idempotency key. Index: uq_saga_correlation. Locks: none
 * (consistent read). */
#define SAGA_SQL_FIND_ID "SELECT id FROM saga_instances WHERE saga_type = ? AND correlation_id = ?"

/*
 * Takes (or renews) the owner lease of a saga that still has work to do: free, ours already,
 * or held by an owner whose lease expired. Params: owner, lease_s, id, owner.
 * Index: PRIMARY. Locks: the instance row until the transaction ends.
 */
#define SAGA_SQL_ACQUIRE                                                                           \
    "UPDATE saga_instances SET owner = ?, lease_until = NOW(6) + INTERVAL ? SECOND "               \
    "WHERE id = ? AND status IN ('RUNNING', 'COMPENSATING') "                                      \
    "AND (owner IS NULL OR owner = ? OR lease_until < NOW(6))"

/* Same for txo_saga_retry(): only a COMPENSATION_FAILED saga. Params and locks as above. */
#define SAGA_SQL_ACQUIRE_FOR_RETRY                                                                 \
    "UPDATE saga_instances SET owner = ?, lease_until = NOW(6) + INTERVAL ? SECOND "               \
    "WHERE id = ? AND status = 'COMPENSATION_FAILED' "                                             \
    "AND (owner IS NULL OR owner = ? OR lease_until < NOW(6))"

/* One instance (txo_saga_load; and the status of a saga whose last try had an unknown
 * outcome). Index: PRIMARY. Locks: none (consistent read). */
#define SAGA_SQL_SELECT_INSTANCE                                                                   \
    "SELECT id, saga_type, correlation_id, status, payload, owner, "                               \
    "TIMESTAMPDIFF(SECOND, updated_at, NOW(6)) FROM saga_instances WHERE id = ?"

/*
 * A saga and its steps in one round trip, for txo_saga_run: one row per step in order (the
 * instance columns repeated), or one row with NULL step columns when no step is stored.
 * Index: PRIMARY of saga_instances, uq_saga_step (saga_id, step_order) for the join. Locks:
 * none (consistent read; it follows SAGA_SQL_ACQUIRE in the same transaction, so the instance
 * row is locked by us and its steps only change under that lock).
 */
#define SAGA_SQL_LOAD                                                                              \
    "SELECT i.saga_type, i.correlation_id, i.status, i.payload, i.owner, "                         \
    "s.step_order, s.step_name, s.status "                                                         \
    "FROM saga_instances i LEFT JOIN saga_steps s ON s.saga_id = i.id "                            \
    "WHERE i.id = ? ORDER BY s.step_order"

/*
 * The same, locking, for txo_saga_run: the instance row and its step rows (X) until the
 * transaction ends, plus whether the lease may be taken (free, ours, or expired: the condition
 * of SAGA_SQL_ACQUIRE). Params: owner, id. The lease itself is then written by the first
 * statement that changes the instance in this transaction (SAGA_SQL_STEP_DONE* with take = 1,
 * or SAGA_SQL_ACQUIRE), so taking it costs no statement of its own.
 */
#define SAGA_SQL_LOAD_FOR_UPDATE                                                                   \
    "SELECT i.saga_type, i.correlation_id, i.status, i.payload, i.owner, "                         \
    "s.step_order, s.step_name, s.status, "                                                        \
    "(i.owner IS NULL OR i.owner = ? OR i.lease_until < NOW(6)) AS takeable "                      \
    "FROM saga_instances i LEFT JOIN saga_steps s ON s.saga_id = i.id "                            \
    "WHERE i.id = ? ORDER BY s.step_order FOR UPDATE"

/* The steps of one saga in order. Index: uq_saga_step (saga_id, step_order). Locks: none. */
#define SAGA_SQL_SELECT_STEPS                                                                      \
    "SELECT step_order, step_name, status, error, attempts "                                       \
    "FROM saga_steps WHERE saga_id = ? ORDER BY step_order"

/*
 * Fence + lease renewal: still ours and still in the status we think. Used first in the
 * transactions that must not run anything unfenced (a retried try after its backoff, a
 * compensation, the record of a failed try), and to tell why a SAGA_SQL_STEP_DONE matched
 * nothing. Params: lease_s, id, owner, status. Index: PRIMARY. Locks: the instance row until
 * the transaction ends (serialises everything done to this saga).
 */
#define SAGA_SQL_FENCE                                                                             \
    "UPDATE saga_instances SET lease_until = NOW(6) + INTERVAL ? SECOND "                          \
    "WHERE id = ? AND owner = ? AND status = ?"

/* A fenced status change that keeps the lease. Params: new status, lease_s, id, owner,
 * expected status. Index: PRIMARY. Locks: the instance row. */
#define SAGA_SQL_MOVE                                                                              \
    "UPDATE saga_instances SET status = ?, lease_until = NOW(6) + INTERVAL ? SECOND "              \
    "WHERE id = ? AND owner = ? AND status = ?"

/* A fenced change to a terminal status, releasing the lease in the same statement. Params:
 * new status, id, owner, expected status. Index: PRIMARY. Locks: the instance row. */
#define SAGA_SQL_MOVE_RELEASE                                                                      \
    "UPDATE saga_instances SET status = ?, owner = NULL, lease_until = NULL "                      \
    "WHERE id = ? AND owner = ? AND status = ?"

/* The persisted status of one step, locked, to settle a failed attempt (whose commit outcome
 * may be unknown). Index: uq_saga_step. Locks: that step row (exclusive). */
#define SAGA_SQL_LOCK_STEP                                                                         \
    "SELECT status FROM saga_steps WHERE saga_id = ? AND step_order = ? FOR UPDATE"

/* A step status change. Params: new status, saga_id, step_order, expected status.
 * Index: uq_saga_step. Locks: that step row. */
#define SAGA_SQL_STEP_MOVE                                                                         \
    "UPDATE saga_steps SET status = ? WHERE saga_id = ? AND step_order = ? AND status = ?"

/*
 * The end of a successful try, last statement of the step transaction: fence + lease renewal
 * of the instance and the step's move to its done status with one more attempt, in one
 * statement. Matches (affected rows > 0: the step row always changes) only when the saga is
 * in the driving status and ours (or, with take = 1, free or expired: the lease is taken
 * here, by the first try of a run, which locked the row with SAGA_SQL_LOAD_FOR_UPDATE), and
 * the step still in the status we loaded. Params: new step status, owner, lease_s, id,
 * expected saga status, owner, take (0/1), step_order, expected step status.
 * Index: PRIMARY of saga_instances and uq_saga_step, both point lookups. Locks: the instance
 * row and the step row (X) until commit.
 */
#define SAGA_SQL_STEP_DONE                                                                         \
    "UPDATE saga_instances i JOIN saga_steps s ON s.saga_id = i.id "                               \
    "SET s.status = ?, s.attempts = s.attempts + 1, "                                              \
    "i.owner = ?, i.lease_until = NOW(6) + INTERVAL ? SECOND "                                     \
    "WHERE i.id = ? AND i.status = ? "                                                             \
    "AND (i.owner = ? OR (? = 1 AND (i.owner IS NULL OR i.lease_until < NOW(6)))) "                \
    "AND s.step_order = ? AND s.status = ?"

/*
 * The same for the last step of a saga: the saga moves to its terminal status and the lease
 * is released in the same statement. Params: new step status, new saga status, id, expected
 * saga status, owner, take (0/1), step_order, expected step status. Index and locks as above.
 */
#define SAGA_SQL_STEP_DONE_FINISH                                                                  \
    "UPDATE saga_instances i JOIN saga_steps s ON s.saga_id = i.id "                               \
    "SET s.status = ?, s.attempts = s.attempts + 1, "                                              \
    "i.status = ?, i.owner = NULL, i.lease_until = NULL "                                          \
    "WHERE i.id = ? AND i.status = ? "                                                             \
    "AND (i.owner = ? OR (? = 1 AND (i.owner IS NULL OR i.lease_until < NOW(6)))) "                \
    "AND s.step_order = ? AND s.status = ?"

/* A failed try, recorded after its transaction rolled back: status, one more attempt, error.
 * Params: new status, error, saga_id, step_order, expected status. Index/locks as above. */
#define SAGA_SQL_STEP_TRY_FAILED                                                                   \
    "UPDATE saga_steps SET status = ?, attempts = attempts + 1, error = ? "                        \
    "WHERE saga_id = ? AND step_order = ? AND status = ?"

/*
 * Sagas in one status that nobody holds and that have rested min_age seconds (workers poll
 * this). Params: status, min_age_s, limit. Index: idx_saga_resume (status, lease_until):
 * lease_until NULL or in the past is a range of it. Locks: none (consistent read; the lease is
 * taken afterwards by SAGA_SQL_ACQUIRE, which re-checks).
 */
#define SAGA_SQL_LIST_DUE                                                                          \
    "SELECT id FROM saga_instances WHERE status = ? "                                              \
    "AND (lease_until IS NULL OR lease_until < NOW(6)) "                                           \
    "AND updated_at <= NOW(6) - INTERVAL ? SECOND ORDER BY lease_until, id LIMIT ?"

/* Number of sagas per status (metrics, `txo stats`). Index: idx_saga_resume (status prefix,
 * index-only scan). Locks: none. */
#define SAGA_SQL_COUNT_BY_STATUS "SELECT status, COUNT(*) FROM saga_instances GROUP BY status"

#endif
