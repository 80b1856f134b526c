/*
 * Every SQL statement of the saga engine (src/saga/saga_*.c), one macro each.
 * Values are always bound (`?`); the only SQL assembled at run time is the placeholder lists:
 * of the multi-row step insert (txo_sql_values_rows) and of the batches' IN lists
 * (txo_sql_in_list).
 *
 * All statements run at READ COMMITTED. Fencing: every write to a saga that is being driven
 * carries `owner = ?` and the expected current `status = ?` in its WHERE clause and is judged
 * by its affected-row count (0 = the lease was lost or the row moved under us). The statements
 * that change a step (SAGA_SQL_STEP_*) are joins with the instance row, so the fence, the lease
 * renewal and the step change are ONE statement; it row-locks the instance until commit, so two
 * workers can never commit a change to the same saga at the same time.
 *
 * Every statement that moves a status is listed with its from/to states in SAGA_MOVES below
 * (parameterised statements take the states as bound values, checked against the transition
 * table of saga_state.c before they run).
 */
#ifndef TXO_SAGA_SQL_H
#define TXO_SAGA_SQL_H

/*
 * The lease_until of a released lease (whose owner is ''): a time long past, the value a new
 * saga starts with. Both columns have one size whatever they hold
 * (sql/migrations/0024_saga_lease_in_place.sql), so taking, renewing and releasing a lease
 * rewrites them in place. A saga is free when its lease_until has passed: released ones are
 * always in that range of idx_saga_resume.
 */
#define SAGA_SQL_NO_LEASE "'1970-01-01 00:00:00'"

/*
 * Every PENDING step of a new saga in one statement: SAGA_SQL_INSERT_STEPS followed by one
 * SAGA_SQL_INSERT_STEPS_ROW per step (txo_sql_values_rows; one prepared variant per saga
 * definition, since its step count is fixed). Params per row: saga id, step_order (1-based),
 * step_name. Index: the steps' PRIMARY (and the FK to saga_instances.id: a shared lock on the
 * instance row this transaction just inserted). Locks: the new rows.
 */
#define SAGA_SQL_INSERT_STEPS                                                                      \
    "INSERT INTO saga_steps (saga_id, step_order, step_name, status) VALUES "
#define SAGA_SQL_INSERT_STEPS_ROW "(?, ?, ?, 'PENDING')"

/*
 * txo_saga_create_many (txo_saga_create: a batch of one): the new instances in one statement, each
 * with its forward deadline (a NULL interval: none), skipping those whose (saga_type,
 * correlation_id) exists or came earlier in the list. INSERT_INSTANCES + n x
 * INSERT_INSTANCES_ROW + INSERT_INSTANCES_AFTER, params per row: id, type, correlation id,
 * payload, deadline in microseconds, traceparent, tracestate. Index: PRIMARY and
 * uq_saga_correlation (the duplicate check). Locks: the new rows, and each existing row met
 * (exclusive, as ON DUPLICATE KEY UPDATE does); a saga another transaction is creating is
 * waited for, then skipped. affected_rows: the number created (`id = id` changes nothing).
 * When it is less than n, FIND_MANY tells which: params type, correlation ids (IN list).
 * Index: uq_saga_correlation. Locks: none (consistent read; READ COMMITTED sees the rows the
 * insert skipped).
 */
#define SAGA_SQL_INSERT_INSTANCES                                                                  \
    "INSERT INTO saga_instances (id, saga_type, correlation_id, status, payload, deadline_at, "    \
    "traceparent, tracestate) VALUES "
#define SAGA_SQL_INSERT_INSTANCES_ROW                                                              \
    "(?, ?, ?, 'RUNNING', ?, NOW(6) + INTERVAL ? MICROSECOND, ?, ?)"
#define SAGA_SQL_INSERT_INSTANCES_AFTER " ON DUPLICATE KEY UPDATE id = id"
#define SAGA_SQL_FIND_MANY                                                                         \
    "SELECT correlation_id, id FROM saga_instances FORCE INDEX (uq_saga_correlation) "             \
    "WHERE saga_type = ? AND correlation_id IN "

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
    "AND (owner = ? OR lease_until < NOW(6))"

/*
 * txo_saga_retry(): takes the lease of a COMPENSATION_FAILED saga and moves it back to
 * COMPENSATING in one statement (its retry is no longer scheduled). Params: owner, lease_s,
 * id, owner. Index: PRIMARY. Locks: the instance row.
 */
#define SAGA_SQL_ACQUIRE_FOR_RETRY                                                                 \
    "UPDATE saga_instances SET status = 'COMPENSATING', retry_at = NULL, owner = ?, "              \
    "lease_until = NOW(6) + INTERVAL ? SECOND "                                                    \
    "WHERE id = ? AND status = 'COMPENSATION_FAILED' "                                             \
    "AND (owner = ? OR lease_until < NOW(6))"

/*
 * A saga and its steps in one round trip, after SAGA_SQL_ACQUIRE* in the same transaction:
 * one row per step (the instance columns repeated), or one row with NULL step columns when no
 * step is stored. No ORDER BY, and no TEXT column of the steps: ordering by the joined table
 * with the payload in the row made MariaDB build an on-disk temporary table per load (and
 * 10.11 was seen to crash freeing one); the engine places each row by its step_order. Index:
 * PRIMARY of saga_instances, the steps' PRIMARY (saga_id, step_order) for the join. Locks: none
 * (consistent read; the instance row is locked by the acquire, and its steps only change under that
 * lock). Columns: enum saga_load_col in saga_internal.h. No TEXT column: the steps' messages are
 * read only when a hook needs one (SAGA_SQL_STEP_ERROR). The deadlines come as what is left of
 * them in microseconds by the database's clock (NULL: none), and whether a call's try expired.
 */
#define SAGA_LOAD_DEADLINES                                                                        \
    "TIMESTAMPDIFF(MICROSECOND, NOW(6), i.deadline_at), "                                          \
    "TIMESTAMPDIFF(MICROSECOND, NOW(6), s.deadline_at), "                                          \
    "s.status = 'RUNNING' AND s.remote_state = 'CALLING' AND s.try_deadline < NOW(6)"
#define SAGA_SQL_LOAD                                                                              \
    "SELECT i.saga_type, i.correlation_id, i.status, i.payload, NULLIF(i.owner, ''), "             \
    "i.compensation_tries, s.step_order, s.step_name, s.status, s.remote_state, "                  \
    "s.error_code, " SAGA_LOAD_DEADLINES ", i.traceparent, i.tracestate "                          \
    "FROM saga_instances i LEFT JOIN saga_steps s ON s.saga_id = i.id WHERE i.id = ?"

/* The stored message of one step, for on_aborted. Index: the steps' PRIMARY. Locks: none
 * (consistent read). */
#define SAGA_SQL_STEP_ERROR "SELECT error FROM saga_steps WHERE saga_id = ? AND step_order = ?"

/*
 * Fence + lease renewal: still ours and still in the status we think. Used first in the
 * transaction that records a failed try, and to tell why a SAGA_SQL_STEP_* matched nothing.
 * Params: lease_s, id, owner, status. Index: PRIMARY. Locks: the instance row until the
 * transaction ends (serialises everything done to this saga).
 */
#define SAGA_SQL_FENCE                                                                             \
    "UPDATE saga_instances SET lease_until = NOW(6) + INTERVAL ? SECOND "                          \
    "WHERE id = ? AND owner = ? AND status = ?"

/* A fenced status change that keeps the lease. Params: new status, lease_s, id, owner,
 * expected status. Index: PRIMARY. Locks: the instance row. */
#define SAGA_SQL_MOVE                                                                              \
    "UPDATE saga_instances SET status = ?, lease_until = NOW(6) + INTERVAL ? SECOND "              \
    "WHERE id = ? AND owner = ? AND status = ?"

/* A fenced change to a terminal status (COMPLETED, FAILED, COMPENSATED), releasing the lease in
 * the same statement. Params: new status, id, owner, expected status. Index: PRIMARY. Locks:
 * the instance row. */
#define SAGA_SQL_MOVE_RELEASE                                                                      \
    "UPDATE saga_instances SET status = ?, owner = '', lease_until = " SAGA_SQL_NO_LEASE " "       \
    "WHERE id = ? AND owner = ? AND status = ?"

/*
 * COMPENSATING -> COMPENSATION_FAILED, releasing the lease, counting the failure and
 * scheduling the next automatic retry (NULL once the tries are used up: given up). The
 * assignments run left to right, so retry_at reads the count before it is incremented.
 * Params: max tries, delay in microseconds, id, owner. Index: PRIMARY. Locks: the instance row.
 */
#define SAGA_SQL_COMPENSATION_FAILED                                                               \
    "UPDATE saga_instances SET status = 'COMPENSATION_FAILED', owner = '', "                       \
    "lease_until = " SAGA_SQL_NO_LEASE ", "                                                        \
    "retry_at = IF(compensation_tries + 1 >= ?, NULL, NOW(6) + INTERVAL ? MICROSECOND), "          \
    "compensation_tries = compensation_tries + 1 "                                                 \
    "WHERE id = ? AND owner = ? AND status = 'COMPENSATING'"

/* The saga's status, when a try that would have completed it lost the lease: had its COMMIT
 * gone through after all? Index: PRIMARY. Locks: none (consistent read). */
#define SAGA_SQL_STATUS "SELECT status FROM saga_instances WHERE id = ?"

/* The persisted status of one step, locked, to settle a failed attempt (whose commit outcome
 * may be unknown). Index: the steps' PRIMARY. Locks: that step row (exclusive). */
#define SAGA_SQL_LOCK_STEP                                                                         \
    "SELECT status, remote_state FROM saga_steps WHERE saga_id = ? AND step_order = ? FOR UPDATE"

/* A step status change under the instance lock taken earlier in the transaction. Params: new
 * status, saga_id, step_order, expected status. Index: the steps' PRIMARY. Locks: that step row. */
#define SAGA_SQL_STEP_MOVE                                                                         \
    "UPDATE saga_steps SET status = ? WHERE saga_id = ? AND step_order = ? AND status = ?"

/*
 * Phase (a) of a remote part: fence + lease renewal of the instance, and the step moved to
 * its busy status (RUNNING or COMPENSATING) with one more attempt, the idempotency key and the
 * remote state the call starts from, in one statement. The step's deadline is set by its first
 * try (then kept), the try's deadline recorded, and the lease is the call's: the try's deadline,
 * so a worker hung in the call loses the saga then. Params: busy status, remote key,
 * remote_state, step deadline us (NULL: none), try deadline us (NULL: none), lease us, id, saga
 * status, owner, step_order, expected step status.
 * Index: PRIMARY of saga_instances and the steps' PRIMARY, point lookups. Locks: both rows until
 * commit.
 */
#define SAGA_SQL_STEP_BEGIN_CALL                                                                   \
    "UPDATE saga_instances i JOIN saga_steps s ON s.saga_id = i.id "                               \
    "SET s.status = ?, s.attempts = s.attempts + 1, s.remote_key = ?, s.remote_state = ?, "        \
    "s.deadline_at = COALESCE(s.deadline_at, NOW(6) + INTERVAL ? MICROSECOND), "                   \
    "s.try_deadline = NOW(6) + INTERVAL ? MICROSECOND, "                                           \
    "i.lease_until = NOW(6) + INTERVAL ? MICROSECOND "                                             \
    "WHERE i.id = ? AND i.status = ? AND i.owner = ? AND s.step_order = ? AND s.status = ?"

/*
 * The end of a successful try, last statement of the step transaction: fence + lease renewal
 * of the instance and the step's move to its done status (attempts + 1 when the try had no
 * phase (a) to count it) with its remote state, in one statement. Matches (affected rows > 0:
 * the step row always changes) only when the saga is in the driving status and ours, and the
 * step still in the status we loaded. Params: new step status, attempts increment (0/1),
 * remote_state, lease_s, id, expected saga status, owner, step_order, expected step status.
 * Index: PRIMARY of saga_instances and the steps' PRIMARY, both point lookups. Locks: the instance
 * row and the step row (X) until commit.
 */
#define SAGA_SQL_STEP_DONE                                                                         \
    "UPDATE saga_instances i JOIN saga_steps s ON s.saga_id = i.id "                               \
    "SET s.status = ?, s.attempts = s.attempts + ?, s.remote_state = ?, "                          \
    "i.lease_until = NOW(6) + INTERVAL ? SECOND "                                                  \
    "WHERE i.id = ? AND i.status = ? AND i.owner = ? AND s.step_order = ? AND s.status = ?"

/*
 * The same for the last step of a saga: the saga moves to COMPLETED and the lease is released
 * in the same statement. Params: new step status, attempts increment, remote_state, new saga
 * status, id, expected saga status, owner, step_order, expected step status. Index and locks
 * as above.
 */
#define SAGA_SQL_STEP_DONE_FINISH                                                                  \
    "UPDATE saga_instances i JOIN saga_steps s ON s.saga_id = i.id "                               \
    "SET s.status = ?, s.attempts = s.attempts + ?, s.remote_state = ?, "                          \
    "i.status = ?, i.owner = '', i.lease_until = " SAGA_SQL_NO_LEASE " "                           \
    "WHERE i.id = ? AND i.status = ? AND i.owner = ? AND s.step_order = ? AND s.status = ?"

/*
 * A failed try, recorded after its transaction rolled back (or after its call): status, one
 * more attempt when the try had no phase (a), its error text and code, and the remote state;
 * the step's deadline is set if no try set it yet, and the try's is over. Params: new status,
 * attempts increment, error, error_code, remote_state, step deadline us (what is left of it;
 * NULL: none), saga_id, step_order, expected status. Index/locks: the steps' PRIMARY, under the
 * instance lock of SAGA_SQL_FENCE.
 */
#define SAGA_SQL_STEP_TRY_FAILED                                                                   \
    "UPDATE saga_steps SET status = ?, attempts = attempts + ?, error = ?, error_code = ?, "       \
    "remote_state = ?, deadline_at = COALESCE(deadline_at, NOW(6) + INTERVAL ? MICROSECOND), "     \
    "try_deadline = NULL WHERE saga_id = ? AND step_order = ? AND status = ?"

/* ---- txo_saga_run_many: one statement for many sagas ----
 *
 * Each is the text before an IN list of saga ids built with txo_sql_in_list() (n rounded up,
 * the last id repeated). Every one names its access path: FORCE INDEX (PRIMARY) on the
 * instances, (PRIMARY) on the steps, so that the rows it locks are exactly the batch's
 * (an index on status would have the server walk, and X-lock, the running sagas of other
 * batches). Single-table statements only, for the same reason.
 */

/* The leases of many sagas, as SAGA_SQL_ACQUIRE (RUNNING ones only). Params: owner, lease_s,
 * owner, ids. Locks: the instance rows taken (X). */
#define SAGA_SQL_ACQUIRE_MANY                                                                      \
    "UPDATE saga_instances FORCE INDEX (PRIMARY) "                                                 \
    "SET owner = ?, lease_until = NOW(6) + INTERVAL ? SECOND "                                     \
    "WHERE status = 'RUNNING' AND (owner = ? OR lease_until < NOW(6)) "                            \
    "AND id IN "

/* SAGA_SQL_LOAD for the sagas of this owner among ids, with the id as the last column (rows
 * of different sagas come in any order). Params: owner, ids. Locks: none (consistent read). */
#define SAGA_SQL_LOAD_MANY                                                                         \
    "SELECT i.saga_type, i.correlation_id, i.status, i.payload, NULLIF(i.owner, ''), "             \
    "i.compensation_tries, s.step_order, s.step_name, s.status, s.remote_state, "                  \
    "s.error_code, " SAGA_LOAD_DEADLINES ", i.traceparent, i.tracestate, "                         \
    "i.id FROM saga_instances i FORCE INDEX (PRIMARY) LEFT JOIN saga_steps s "                     \
    "ON s.saga_id = i.id WHERE i.owner = ? AND i.id IN "

/* The fence and lease renewal of a batch: affected rows must be the batch's size. Params:
 * lease in microseconds (lease_s, or the calls' lease), owner, expected status, ids. Locks: the
 * instance rows (X) until commit. */
#define SAGA_SQL_RENEW_MANY                                                                        \
    "UPDATE saga_instances FORCE INDEX (PRIMARY) "                                                 \
    "SET lease_until = NOW(6) + INTERVAL ? MICROSECOND "                                           \
    "WHERE owner = ? AND status = ? AND id IN "

/* The same for a batch whose step was the sagas' last: they complete and the leases are
 * released. Params: new status, owner, expected status, ids. Locks: the instance rows (X). */
#define SAGA_SQL_FINISH_MANY                                                                       \
    "UPDATE saga_instances FORCE INDEX (PRIMARY) SET status = ?, owner = '', "                     \
    "lease_until = " SAGA_SQL_NO_LEASE " WHERE owner = ? AND status = ? AND id IN "

/* One step of every saga of a batch to its done status with its remote state, attempts + the
 * increment (1, or 0 when the batch's call counted the try). Params: new status, increment,
 * remote_state, step_order, expected status, ids. Index: the steps' PRIMARY (saga_id, step_order),
 * point lookups. Locks: those step rows (X), under the instance locks of SAGA_SQL_RENEW_MANY /
 * SAGA_SQL_FINISH_MANY. */
#define SAGA_SQL_STEPS_DONE_MANY                                                                   \
    "UPDATE saga_steps FORCE INDEX (PRIMARY) SET status = ?, attempts = attempts + ?, "            \
    "remote_state = ? WHERE step_order = ? AND status = ? AND saga_id IN "

/* Phase (a) of a batch's remote step: every call recorded as made (SAGA_SQL_STEP_BEGIN_CALL
 * for the batch), its idempotency key being the saga id + a suffix common to the batch, with
 * the step's and the try's deadlines. Params: new status, remote_state, key suffix, step
 * deadline us, try deadline us (NULL: none), step_order, expected status, ids. Index and locks:
 * as SAGA_SQL_STEPS_DONE_MANY, under SAGA_SQL_RENEW_MANY's fence. */
#define SAGA_SQL_STEPS_CALL_MANY                                                                   \
    "UPDATE saga_steps FORCE INDEX (PRIMARY) SET status = ?, attempts = attempts + 1, "            \
    "remote_state = ?, remote_key = CONCAT(saga_id, ?), "                                          \
    "deadline_at = COALESCE(deadline_at, NOW(6) + INTERVAL ? MICROSECOND), "                       \
    "try_deadline = NOW(6) + INTERVAL ? MICROSECOND "                                              \
    "WHERE step_order = ? AND status = ? AND saga_id IN "

/* ---- saga_timeline.c: the times of a saga for the dashboard's saga page ---- */

/*
 * A saga's times and each step's: when the instance was made and last changed and its
 * deadline; for each step when it last changed, its deadline and its current try's deadline.
 * DATETIME(6) in UTC (the session time zone). Index: PRIMARY (the instance), the steps' PRIMARY
 * (saga_id, step_order) for its steps, in step order. Locks: none (consistent read). Params:
 * saga id. A saga without steps is one row with NULL step columns.
 */
#define SAGA_SQL_TIMELINE                                                                          \
    "SELECT i.created_at, i.updated_at, i.deadline_at, s.step_order, s.updated_at, "               \
    "s.deadline_at, s.try_deadline FROM saga_instances i LEFT JOIN saga_steps s "                  \
    "ON s.saga_id = i.id WHERE i.id = ? ORDER BY s.step_order"

/* ---- saga_query.c: inspection and the workers' polls ---- */

/* One instance (txo_saga_load). Index: PRIMARY. Locks: none (consistent read). Columns: enum
 * inst_col in saga_query.c. */
#define SAGA_SQL_SELECT_INSTANCE                                                                   \
    "SELECT id, saga_type, correlation_id, status, payload, NULLIF(owner, ''), "                   \
    "TIMESTAMPDIFF(SECOND, updated_at, NOW(6)), compensation_tries, retry_at IS NOT NULL, "        \
    "deadline_at, created_at, updated_at FROM saga_instances WHERE id = ?"

/* The steps of one saga in order. Index: the steps' PRIMARY (saga_id, step_order). Locks: none.
 * Columns: enum step_col in saga_query.c. */
#define SAGA_SQL_SELECT_STEPS                                                                      \
    "SELECT step_order, step_name, status, error, attempts, error_code, remote_state, "            \
    "deadline_at "                                                                                 \
    "FROM saga_steps WHERE saga_id = ? ORDER BY step_order"

/*
 * RUNNING / COMPENSATING sagas nobody holds, for the workers' resume poll. Params: status,
 * limit. Index: idx_saga_resume (status, lease_until): lease_until in the past (released ones
 * included, SAGA_SQL_NO_LEASE) is a range of it. Locks: none (consistent read; the lease is
 * taken afterwards by SAGA_SQL_ACQUIRE, which re-checks).
 */
#define SAGA_SQL_LIST_UNOWNED                                                                      \
    "SELECT id, saga_type FROM saga_instances WHERE status = ? "                                   \
    "AND lease_until < NOW(6) ORDER BY lease_until LIMIT ?"

/*
 * COMPENSATION_FAILED sagas whose retry is due, oldest due first; given-up ones (retry_at
 * NULL) are outside the range. Params: limit. Index: idx_saga_retry (status, retry_at), a
 * range scan in index order. Locks: none (SAGA_SQL_ACQUIRE_FOR_RETRY re-checks).
 */
#define SAGA_SQL_LIST_RETRY_DUE                                                                    \
    "SELECT id, saga_type FROM saga_instances WHERE status = 'COMPENSATION_FAILED' "               \
    "AND retry_at <= NOW(6) ORDER BY retry_at LIMIT ?"

/*
 * Stuck sagas (txo_saga_list_stuck): unowned RUNNING/COMPENSATING ones idle for ? seconds
 * (idx_saga_resume range per status, updated_at checked on the row), RUNNING ones past a
 * deadline whoever owns them (the saga's, its RUNNING step's or that step's call's: the
 * RUNNING range of idx_saga_resume, the sagas in flight, joined to their RUNNING step by
 * the steps' PRIMARY) and given-up COMPENSATION_FAILED ones (idx_saga_retry, retry_at NULL). The
 * deadline reported is the first that passed in the order try, step, saga, with how long ago.
 * Params: idle_s, limit. Locks: none. Columns: enum stuck_col in saga_query.c.
 */
#define SAGA_SQL_LIST_STUCK                                                                        \
    "SELECT i.id, i.saga_type, i.status, TIMESTAMPDIFF(SECOND, i.updated_at, NOW(6)) AS idle, "    \
    "CASE WHEN s.try_deadline < NOW(6) THEN 'try' WHEN s.deadline_at < NOW(6) THEN 'step' "        \
    "WHEN i.deadline_at < NOW(6) THEN 'saga' END AS kind, s.step_name, "                           \
    "TIMESTAMPDIFF(SECOND, CASE WHEN s.try_deadline < NOW(6) THEN s.try_deadline "                 \
    "WHEN s.deadline_at < NOW(6) THEN s.deadline_at ELSE i.deadline_at END, NOW(6)) "              \
    "FROM saga_instances i LEFT JOIN saga_steps s "                                                \
    "ON s.saga_id = i.id AND s.status = 'RUNNING' AND i.status = 'RUNNING' "                       \
    "WHERE (i.status IN ('RUNNING', 'COMPENSATING') "                                              \
    "AND i.lease_until < NOW(6) "                                                                  \
    "AND i.updated_at < NOW(6) - INTERVAL ? SECOND) "                                              \
    "OR (i.status = 'RUNNING' AND (i.deadline_at < NOW(6) OR s.try_deadline < NOW(6) "             \
    "OR s.deadline_at < NOW(6))) "                                                                 \
    "OR (i.status = 'COMPENSATION_FAILED' AND i.retry_at IS NULL) ORDER BY idle DESC LIMIT ?"

/*
 * Every COMPENSATION_FAILED saga (txo_saga_list_compensation_failed), given-up ones (retry_at
 * NULL, which sorts first) first. Index: idx_saga_retry (status, retry_at): one status is a
 * range of it, already in retry_at order. Params: limit. Locks: none. Columns: enum stuck_col
 * in saga_query.c.
 */
#define SAGA_SQL_LIST_COMPENSATION_FAILED                                                          \
    "SELECT id, saga_type, status, TIMESTAMPDIFF(SECOND, updated_at, NOW(6)) AS idle, "            \
    "NULL, NULL, NULL "                                                                            \
    "FROM saga_instances WHERE status = 'COMPENSATION_FAILED' ORDER BY retry_at LIMIT ?"

/* Number of sagas per status, and the given-up ones (metrics, `txo stats`). Index:
 * idx_saga_retry (status prefix, index-only scan). Locks: none. */
#define SAGA_SQL_COUNT_BY_STATUS                                                                   \
    "SELECT status, COUNT(*), SUM(status = 'COMPENSATION_FAILED' AND retry_at IS NULL) "           \
    "FROM saga_instances GROUP BY status"

/*
 * Every statement that moves a status, with the moves it makes: X(statement, machine, from,
 * to), machine saga (saga_instances.status), step (saga_steps.status) or remote
 * (saga_steps.remote_state, what the action's call is known to have done). BOUND means the
 * state is a bound value, checked against the transition table of saga_state.c by the function
 * that runs the statement (saga_move, step_move, call_tx_fn, step_done, record_tx_fn,
 * batch_call_fn, batch_step_fn) before it runs; a remote state's `from` is the one the engine
 * knows under the instance lock (a step's remote state is only written under it), so only its
 * `to` is in the SQL. A test walks this list: literal states must be what the SQL says and a
 * legal move; BOUND ones must be bound in the SQL; a statement that writes remote_state must be
 * listed for the remote machine.
 */
#define SAGA_MOVES(X)                                                                              \
    X(SAGA_SQL_ACQUIRE_FOR_RETRY, saga, COMPENSATION_FAILED, COMPENSATING)                         \
    X(SAGA_SQL_COMPENSATION_FAILED, saga, COMPENSATING, COMPENSATION_FAILED)                       \
    X(SAGA_SQL_MOVE, saga, BOUND, BOUND)                                                           \
    X(SAGA_SQL_MOVE_RELEASE, saga, BOUND, BOUND)                                                   \
    X(SAGA_SQL_FINISH_MANY, saga, BOUND, BOUND)                                                    \
    X(SAGA_SQL_STEPS_DONE_MANY, step, BOUND, BOUND)                                                \
    X(SAGA_SQL_STEPS_CALL_MANY, step, BOUND, BOUND)                                                \
    X(SAGA_SQL_STEP_DONE_FINISH, saga, BOUND, BOUND)                                               \
    X(SAGA_SQL_STEP_MOVE, step, BOUND, BOUND)                                                      \
    X(SAGA_SQL_STEP_BEGIN_CALL, step, BOUND, BOUND)                                                \
    X(SAGA_SQL_STEP_DONE, step, BOUND, BOUND)                                                      \
    X(SAGA_SQL_STEP_DONE_FINISH, step, BOUND, BOUND)                                               \
    X(SAGA_SQL_STEP_TRY_FAILED, step, BOUND, BOUND)                                                \
    X(SAGA_SQL_STEPS_DONE_MANY, remote, BOUND, BOUND)                                              \
    X(SAGA_SQL_STEPS_CALL_MANY, remote, BOUND, BOUND)                                              \
    X(SAGA_SQL_STEP_BEGIN_CALL, remote, BOUND, BOUND)                                              \
    X(SAGA_SQL_STEP_DONE, remote, BOUND, BOUND)                                                    \
    X(SAGA_SQL_STEP_DONE_FINISH, remote, BOUND, BOUND)                                             \
    X(SAGA_SQL_STEP_TRY_FAILED, remote, BOUND, BOUND)

#endif
