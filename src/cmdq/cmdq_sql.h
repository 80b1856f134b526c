/*
 * Every SQL statement of the command queue (src/cmdq/cmdq.c), one named macro each. Above
 * each: the index it relies on, the rows it locks and the isolation it assumes. The schema is
 * sql/migrations/0005_command_queue.sql plus 0006_worker_queues.sql (next_attempt_at,
 * last_error, lock_token, idx_cmdq_due) and 0020_command_trace.sql (traceparent, tracestate). The
 * purge of DONE commands is in src/retention/retention_sql.h.
 *
 * Statements whose name ends in _IN end with `id IN `: cmdq.c appends the placeholder list
 * built by txo_sql_in_list() (count rounded up to a power of two, the last id repeated). The
 * values are always bound.
 *
 * Every statement that finishes a claimed command is fenced by its claim's token
 * (`id = ? AND lock_token = ? AND status = 'PROCESSING'`): once the command was claimed again
 * (new token) or went back to PENDING (token cleared), the old claim's statements match
 * nothing.
 */
#ifndef TXO_CMDQ_SQL_H
#define TXO_CMDQ_SQL_H

/*
 * Appends a command (PENDING, due now: the column defaults). Inside the caller's transaction.
 * Index: PRIMARY (auto-increment), plus one idx_cmdq_due entry. Locks: the new row.
 * Params: command_type, payload, traceparent, tracestate (NULL: none; 0020_command_trace.sql).
 */
#define CMDQ_SQL_ENQUEUE                                                                           \
    "INSERT INTO command_queue (command_type, payload, traceparent, tracestate) "                  \
    "VALUES (?, ?, ?, ?)"

/* The columns of every claim query: see enum claim_col in cmdq.c. */
#define CMDQ_SQL__CLAIM_COLUMNS                                                                    \
    "SELECT id, command_type, payload, attempts, locked_by, traceparent, tracestate "

/*
 * Claim, skip-locked strategy, step 1a: PROCESSING commands whose lease expired, oldest due
 * first. Index: idx_cmdq_due, the status = 'PROCESSING' range (the commands in flight: a few
 * batches), locked_until checked on each row; forced so a large backlog elsewhere cannot make
 * the optimizer read and sort more. Locks: exclusive locks on the returned rows; rows locked
 * by another worker's claim or completion are skipped, not waited for. Isolation: READ
 * COMMITTED (no gap locks). Params: limit. Columns: CMDQ_SQL__CLAIM_COLUMNS.
 */
#define CMDQ_SQL_CLAIM_EXPIRED_SKIP_LOCKED                                                         \
    CMDQ_SQL__CLAIM_COLUMNS "FROM command_queue FORCE INDEX (idx_cmdq_due) "                       \
                            "WHERE status = 'PROCESSING' AND locked_until < NOW(6) "               \
                            "ORDER BY next_attempt_at, id LIMIT ? FOR UPDATE SKIP LOCKED"

/*
 * Claim, skip-locked strategy, step 1b: due PENDING commands in due order. Index:
 * idx_cmdq_due (status, next_attempt_at [, id]): one range scan of status = 'PENDING' in index
 * order, stopped after LIMIT rows; DONE rows are never read. Locks, isolation as step 1a.
 * Params: limit. Columns: CMDQ_SQL__CLAIM_COLUMNS.
 */
#define CMDQ_SQL_CLAIM_DUE_SKIP_LOCKED                                                             \
    CMDQ_SQL__CLAIM_COLUMNS "FROM command_queue FORCE INDEX (idx_cmdq_due) "                       \
                            "WHERE status = 'PENDING' AND next_attempt_at <= NOW(6) "              \
                            "ORDER BY next_attempt_at, id LIMIT ? FOR UPDATE SKIP LOCKED"

/*
 * Claim, skip-locked strategy, step 2, same transaction: the rows of step 1 become PROCESSING
 * under the claim's owner, token and lease; attempts + 1 (next_attempt_at is left as it is).
 * Index: PRIMARY (id list); each row moves to the PROCESSING range of idx_cmdq_due (or stays
 * there). Locks: the same rows, already locked by step 1. Isolation: READ COMMITTED.
 * Params: owner, token, lease seconds, ids...
 */
#define CMDQ_SQL_CLAIM_BY_ID_IN                                                                    \
    "UPDATE command_queue SET status = 'PROCESSING', locked_by = ?, lock_token = ?, "              \
    "locked_until = NOW(6) + INTERVAL ? SECOND, attempts = attempts + 1 WHERE id IN "

/*
 * Skip-locked strategy, same transaction: expired commands of step 1a that already used up the
 * claim's max_attempts (poison commands: their worker died or hung on each attempt) become
 * FAILED instead of being claimed again. Index: PRIMARY (id list). Locks: those rows, already
 * locked by step 1a. Isolation: READ COMMITTED. Params: max_attempts, ids...
 */
#define CMDQ_SQL_EXPIRE_BY_ID_IN                                                                   \
    "UPDATE command_queue SET status = 'FAILED', "                                                 \
    "last_error = CONCAT('TXO_ELEASELOST: lease of ', COALESCE(locked_by, 'unknown'), "            \
    "' expired on attempt ', attempts, ' of ', ?), "                                               \
    "locked_until = NULL WHERE status = 'PROCESSING' AND id IN "

/*
 * Claim, update-limit strategy (no SKIP LOCKED), step 0: is any lease expired? A plain read,
 * so that the locking statements below, which walk the PROCESSING range through the secondary
 * index and would wait for (and can deadlock with) workers completing their commands through
 * the primary key, only run when there is something to take over. Index: idx_cmdq_due, the
 * PROCESSING range (the commands in flight), locked_until checked on each row. Locks: none
 * (consistent read). Isolation: READ COMMITTED.
 */
#define CMDQ_SQL_ANY_EXPIRED                                                                       \
    "SELECT 1 FROM command_queue FORCE INDEX (idx_cmdq_due) "                                      \
    "WHERE status = 'PROCESSING' AND locked_until < NOW(6) LIMIT 1"

/*
 * Claim, update-limit strategy, step 0b (when step 0 found one): the poison commands of
 * CMDQ_SQL_EXPIRE_BY_ID_IN, found directly. Index: idx_cmdq_due, the PROCESSING range (forced).
 * Locks: the rows it scans in that short range; waits for rows another worker holds.
 * Isolation: READ COMMITTED. Params: max_attempts, max_attempts, limit.
 */
#define CMDQ_SQL_EXPIRE_UPDATE_LIMIT                                                               \
    "UPDATE command_queue FORCE INDEX (idx_cmdq_due) SET status = 'FAILED', "                      \
    "last_error = CONCAT('TXO_ELEASELOST: lease of ', COALESCE(locked_by, 'unknown'), "            \
    "' expired on attempt ', attempts, ' of ', ?), locked_until = NULL "                           \
    "WHERE status = 'PROCESSING' AND locked_until < NOW(6) AND attempts >= ? LIMIT ?"

/*
 * Claim, update-limit strategy, step 1a: expired PROCESSING commands are taken over under the
 * claim's owner, token and lease, attempts + 1. Index: idx_cmdq_due, the PROCESSING range,
 * walked in order and stopped after LIMIT rows (forced). Locks: exclusive locks on the rows it
 * scans; concurrent claims wait for each other (the price of having no SKIP LOCKED).
 * Isolation: READ COMMITTED (locks on non-matching rows are released at once).
 * Params: owner, token, lease seconds, limit.
 */
#define CMDQ_SQL_RECLAIM_UPDATE_LIMIT                                                              \
    "UPDATE command_queue FORCE INDEX (idx_cmdq_due) SET locked_by = ?, lock_token = ?, "          \
    "locked_until = NOW(6) + INTERVAL ? SECOND, attempts = attempts + 1 "                          \
    "WHERE status = 'PROCESSING' AND locked_until < NOW(6) "                                       \
    "ORDER BY next_attempt_at, id LIMIT ?"

/*
 * Claim, update-limit strategy, step 1b: due PENDING commands become PROCESSING under the
 * claim's owner, token and lease, attempts + 1. Index: idx_cmdq_due, the PENDING range in due
 * order, stopped after LIMIT rows (forced). Locks and isolation as step 1a.
 * Params: owner, token, lease seconds, limit.
 */
#define CMDQ_SQL_CLAIM_UPDATE_LIMIT                                                                \
    "UPDATE command_queue FORCE INDEX (idx_cmdq_due) SET status = 'PROCESSING', locked_by = ?, "   \
    "lock_token = ?, locked_until = NOW(6) + INTERVAL ? SECOND, attempts = attempts + 1 "          \
    "WHERE status = 'PENDING' AND next_attempt_at <= NOW(6) "                                      \
    "ORDER BY next_attempt_at, id LIMIT ?"

/*
 * Claim, update-limit strategy, step 2, same transaction: reads back the rows of this token.
 * Index: idx_cmdq_due, the PROCESSING range (the commands in flight), walked in order;
 * lock_token is checked on the row. Locks: none beyond step 1's (plain read). Isolation: READ
 * COMMITTED (sees step 1's own changes). Params: token. Columns: CMDQ_SQL__CLAIM_COLUMNS
 * (attempts already incremented).
 */
#define CMDQ_SQL_CLAIM_SELECT_BY_TOKEN                                                             \
    CMDQ_SQL__CLAIM_COLUMNS "FROM command_queue FORCE INDEX (idx_cmdq_due) "                       \
                            "WHERE status = 'PROCESSING' AND lock_token = ? "                      \
                            "ORDER BY next_attempt_at, id"

/*
 * Complete: DONE, lease released, fenced by the claim's token. locked_by and lock_token stay as
 * the record of who finished it (and let a repeated complete be told apart from a lost lease).
 * Runs in the caller's transaction, next to the command's effect (any isolation; the UPDATE
 * reads the latest committed row). Index: PRIMARY. Locks: the row, until that transaction
 * ends. Params: id, token.
 */
#define CMDQ_SQL_COMPLETE                                                                          \
    "UPDATE command_queue SET status = 'DONE', locked_until = NULL, last_error = NULL "            \
    "WHERE id = ? AND lock_token = ? AND status = 'PROCESSING'"

/*
 * Fail, transient: back to PENDING, due after the backoff (computed by txo_backoff_delay_ms()
 * in cmdq.c: the row's attempts is known, since only a claim changes it and the fence pins
 * the claim), with the error kept; lease, owner and token cleared. Fenced by the token.
 * Index: PRIMARY; the row moves from the PROCESSING to the PENDING range of idx_cmdq_due.
 * Locks: the row. Isolation: READ COMMITTED. Params: last_error, delay in microseconds, id,
 * token.
 */
#define CMDQ_SQL_RETRY                                                                             \
    "UPDATE command_queue SET status = 'PENDING', last_error = ?, "                                \
    "next_attempt_at = NOW(6) + INTERVAL ? MICROSECOND, locked_by = NULL, locked_until = NULL, "   \
    "lock_token = NULL WHERE id = ? AND lock_token = ? AND status = 'PROCESSING'"

/*
 * Fail, permanent or out of attempts: FAILED with the error; lease released, owner and token
 * kept (as for DONE). Fenced by the token. Index: PRIMARY. Locks: the row.
 * Isolation: READ COMMITTED. Params: last_error, id, token.
 */
#define CMDQ_SQL_FAIL                                                                              \
    "UPDATE command_queue SET status = 'FAILED', last_error = ?, locked_until = NULL "             \
    "WHERE id = ? AND lock_token = ? AND status = 'PROCESSING'"

/*
 * After a fenced statement matched nothing: what the row looks like now, to tell a lost lease
 * from a repeated call or a missing command. Same transaction as the fenced statement.
 * Index: PRIMARY. Locks: none (consistent read). Params: id.
 */
#define CMDQ_SQL_FENCE_STATE "SELECT status, lock_token FROM command_queue WHERE id = ?"

/*
 * Row counts by status. Index: idx_cmdq_due (status, next_attempt_at), scanned as a covering
 * index (GROUP BY on its first column). Locks: none (consistent read, READ COMMITTED).
 */
#define CMDQ_SQL_COUNT_BY_STATUS "SELECT status, COUNT(*) FROM command_queue GROUP BY status"

/*
 * Every statement above that changes command_queue.status, with the moves it makes: the
 * state machine of include/txo/cmdq.h (txo_cmdq_can_move(), cmdq.c) as the SQL runs it.
 * tests/unit/test_sql_moves.c checks each statement's SQL text (the status it sets and the
 * status its WHERE picks) against this list and the list against txo_cmdq_can_move(). A new
 * statement that changes the status belongs here.
 *
 * X(STMT, PICKED_BY, FROM, TO): STMT moves rows from FROM to TO. PICKED_BY is the statement
 * whose WHERE selects the rows: STMT itself, or, for an UPDATE by id list, the locking SELECT
 * that returned those ids in the same transaction (a lease pass of src/queue/lease.c). A
 * statement without `status =` in its SET list leaves the rows in their state (FROM = TO).
 * FROM and TO are enum txo_cmdq_status names without the TXO_CMDQ_ prefix.
 */
#define CMDQ_MOVES(X)                                                                              \
    /* Claim, skip-locked: due commands, and expired leases taken over. */                         \
    X(CMDQ_SQL_CLAIM_BY_ID_IN, CMDQ_SQL_CLAIM_DUE_SKIP_LOCKED, PENDING, PROCESSING)                \
    X(CMDQ_SQL_CLAIM_BY_ID_IN, CMDQ_SQL_CLAIM_EXPIRED_SKIP_LOCKED, PROCESSING, PROCESSING)         \
    X(CMDQ_SQL_EXPIRE_BY_ID_IN, CMDQ_SQL_EXPIRE_BY_ID_IN, PROCESSING, FAILED)                      \
    /* Claim, update-limit. */                                                                     \
    X(CMDQ_SQL_EXPIRE_UPDATE_LIMIT, CMDQ_SQL_EXPIRE_UPDATE_LIMIT, PROCESSING, FAILED)              \
    X(CMDQ_SQL_RECLAIM_UPDATE_LIMIT, CMDQ_SQL_RECLAIM_UPDATE_LIMIT, PROCESSING, PROCESSING)        \
    X(CMDQ_SQL_CLAIM_UPDATE_LIMIT, CMDQ_SQL_CLAIM_UPDATE_LIMIT, PENDING, PROCESSING)               \
    /* Finishing a claimed command, fenced by its token. */                                        \
    X(CMDQ_SQL_COMPLETE, CMDQ_SQL_COMPLETE, PROCESSING, DONE)                                      \
    X(CMDQ_SQL_RETRY, CMDQ_SQL_RETRY, PROCESSING, PENDING)                                         \
    X(CMDQ_SQL_FAIL, CMDQ_SQL_FAIL, PROCESSING, FAILED)

#endif
