/*
 * Every SQL statement of the saga engine (src/saga/saga.c), one macro each. Values are always
 * bound (`?`); nothing here is assembled at run time.
 *
 * All statements run at READ COMMITTED. Fencing: every write to a saga that is being driven
 * carries `owner = ?` and the expected current `status = ?` in its WHERE clause and is judged
 * by its affected-row count (0 = the lease was lost or the row moved under us). The UPDATE of
 * saga_instances in each step transaction also row-locks the instance for the rest of that
 * transaction, so two workers can never run a step of the same saga at the same time.
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

/* One PENDING step of a new saga. Index: uq_saga_step (and the FK to saga_instances.id).
 * Locks: the new row. */
#define SAGA_SQL_INSERT_STEP                                                                       \
    "INSERT INTO saga_steps (saga_id, step_order, step_name, status) "                             \
    "VALUES (?, ?, ?, 'PENDING')"

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

/* One instance. Index: PRIMARY. Locks: none (consistent read; when it follows SAGA_SQL_ACQUIRE
 * in the same transaction the row is already locked by us). */
#define SAGA_SQL_SELECT_INSTANCE                                                                   \
    "SELECT id, saga_type, correlation_id, status, payload, owner "                                \
    "FROM saga_instances WHERE id = ?"

/* The steps of one saga in order. Index: uq_saga_step (saga_id, step_order). Locks: none. */
#define SAGA_SQL_SELECT_STEPS                                                                      \
    "SELECT step_order, step_name, status, error, attempts "                                       \
    "FROM saga_steps WHERE saga_id = ? ORDER BY step_order"

/*
 * Fence + lease renewal at the start of every step transaction: still ours and still in the
 * status we think. Params: lease_s, id, owner, status. Index: PRIMARY. Locks: the instance row
 * until the transaction ends (serialises everything done to this saga).
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

/* The start of one try of an action or compensation: new status (may equal the old one) and
 * one more attempt. Params as SAGA_SQL_STEP_MOVE. Index: uq_saga_step. Locks: that step row. */
#define SAGA_SQL_STEP_TRY                                                                          \
    "UPDATE saga_steps SET status = ?, attempts = attempts + 1 "                                   \
    "WHERE saga_id = ? AND step_order = ? AND status = ?"

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
