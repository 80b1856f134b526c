/*
 * Private to src/saga: what the engine's files share.
 *
 *   - the transition checks every state change of the engine goes through. They wrap the
 *     transition tables of src/saga/saga_state.c: an illegal move is a bug of the engine (or
 *     rows edited by hand), so it is logged at error level and refused with TXO_ESTATE instead
 *     of being written;
 *   - one run of a saga (struct saga_run) and the calls on it: saga_store.c takes the lease,
 *     loads the saga and makes every fenced write of a run (the SQL is in saga_sql.h, with the
 *     index and the locks of each statement); saga_run.c drives one saga a try at a time;
 *     saga_batch.c drives one step of many sagas at once and hands what it cannot batch to
 *     saga_run.c; saga_deadline.c keeps the run's deadlines, asked by both; saga_create.c
 *     checks a definition with txo__saga_check_def.
 *
 * A struct saga_run belongs to one thread: it is filled by txo__saga_run_setup(), released
 * by txo__saga_run_release(), and mirrors the persisted statuses as of the last commit.
 */
#ifndef TXO_SAGA_INTERNAL_H
#define TXO_SAGA_INTERNAL_H

#include "txo/saga.h"
#include "txo/tracer.h"

/* 0 when the saga may move from -> to; else logs an error and returns TXO_ESTATE in err. */
int txo__saga_check_move(const char *saga_id, enum txo_saga_status from, enum txo_saga_status to,
                         struct txo_error *err);

/* 0 when step step_order (1-based) of the saga may move from -> to; else as above. */
int txo__step_check_move(const char *saga_id, unsigned step_order, enum txo_step_status from,
                         enum txo_step_status to, struct txo_error *err);

/*
 * True when a step whose status becomes (or stays) `step` may have its remote state written
 * from -> to: the same state, or a move of the remote state table of saga_state.c; and
 * CALLING only for a RUNNING step.
 */
bool txo__remote_can_move(enum txo_step_status step, enum txo_remote_state from,
                          enum txo_remote_state to);

/* 0 when txo__remote_can_move(); else logs an error and returns TXO_ESTATE in err. */
int txo__remote_check_move(const char *saga_id, unsigned step_order, enum txo_step_status step,
                           enum txo_remote_state from, enum txo_remote_state to,
                           struct txo_error *err);

/* Parses a saga_steps.remote_state value. Returns 0 or TXO_EINVAL. */
int txo__remote_state_parse(const char *name, enum txo_remote_state *out);

/* ------------------------------------------------------------------------------------------ */
/* One run of a saga */

#define SAGA_OWNER_MAX       128 /* saga_instances.owner VARCHAR(128) */
#define SAGA_CORRELATION_MAX 255 /* saga_instances.correlation_id */
#define SAGA_STEP_NAME_MAX   128 /* saga_steps.step_name */
#define SAGA_KEY_MAX         (TXO_SAGA_ID_LEN + 32)

/* Columns of SAGA_SQL_LOAD and SAGA_SQL_LOAD_MANY. */
enum saga_load_col {
    LOAD_TYPE,
    LOAD_CORRELATION,
    LOAD_STATUS,
    LOAD_PAYLOAD,
    LOAD_OWNER,
    LOAD_COMPENSATION_TRIES,
    LOAD_STEP_ORDER,
    LOAD_STEP_NAME,
    LOAD_STEP_STATUS,
    LOAD_STEP_REMOTE,
    LOAD_STEP_ERROR_CODE,
    LOAD_SAGA_LEFT_US, /* what is left of the saga's deadline; NULL: none */
    LOAD_STEP_LEFT_US, /* what is left of the step's deadline; NULL: none or not started */
    LOAD_TRY_EXPIRED,  /* the step's call is in flight past its try's deadline */
    LOAD_TRACEPARENT,  /* the trace context the saga was created in; NULL: none */
    LOAD_TRACESTATE,
    LOAD_ID, /* SAGA_SQL_LOAD_MANY only */
};

/* What the engine knows of one step, as of the last commit. */
struct saga_step_row {
    enum txo_step_status status;
    enum txo_remote_state remote;
    int error_code;
    char *error;          /* owned; NULL when none */
    unsigned batch_tries; /* tries of the action a batch made (and recorded) in this run */
    int64_t deadline_ms;  /* the step's deadline on the run's clock; INT64_MAX: none yet */
    bool try_expired;     /* loaded with its call in flight past the try's deadline */
};

/* One txo_saga_run / txo_saga_retry call, or one saga of txo_saga_run_many. */
struct saga_run {
    struct txo_db *db;
    const struct txo_saga_def *def;
    struct txo_saga_opts opts; /* a copy with the defaults filled in */
    const struct txo_clock *clock;
    char owner[SAGA_OWNER_MAX + 1];
    char id[TXO_SAGA_ID_LEN];
    char *correlation_id;
    char *payload;
    size_t payload_len;
    void *state; /* def->decode's result */
    bool has_state;
    void *user;
    enum txo_saga_status status; /* persisted saga status, as of the last commit */
    unsigned compensation_tries;
    int64_t deadline_ms;         /* the saga's deadline on the run's clock; INT64_MAX: none */
    struct saga_step_row *steps; /* def->n_steps of them */
    bool has_trace;              /* created in a trace context: trace is it */
    struct txo_trace_ctx trace;
    /* The span of the step try in progress (run_step), a child of trace, and of the call it
     * makes; txo__saga_make_ctx hands the current one to the step's parts. */
    bool in_try;
    struct txo_trace_ctx try_span;
    bool in_call;
    struct txo_trace_ctx call_span;
};

/* ---- saga_store.c: checks, the lease, loading, fenced writes, hooks ---- */

/* 0 when def can be run or created (a type, steps with names and actions); else TXO_EINVAL. */
int txo__saga_check_def(const struct txo_saga_def *def, struct txo_error *err);

/* Parses a saga_instances.status value of saga id; an unknown one is TXO_EDB. */
int txo__saga_parse_status(const char *id, const char *name, enum txo_saga_status *out,
                           struct txo_error *err);

/* True when the step must be undone when the saga is compensated. */
bool txo__saga_needs_undo(const struct saga_step_row *s);

/* The idempotency key of step i's call (or of its undo's) is the saga id + this suffix, the
 * same in every worker and on every try. */
void txo__saga_key_suffix(size_t i, bool compensate, char *out, size_t cap);

/* The whole idempotency key of step i's call (or of its undo's): the saga id + the suffix. */
void txo__saga_call_key(const struct saga_run *r, size_t i, bool compensate,
                        char out[SAGA_KEY_MAX]);

/* The context a step function of step i sees; it borrows from r and key. */
void txo__saga_make_ctx(const struct saga_run *r, size_t i, unsigned attempt, bool compensate,
                        const char *key, struct txo_saga_ctx *ctx);

/* Records span (a step's try, or its call) of the saga's trace, child of parent, when that
 * trace is sampled and a tracer is set; rc and why are the try's or call's outcome. */
void txo__saga_record_span(const struct saga_run *r, const struct txo_trace_ctx *span,
                           const uint8_t parent[8], const char *name, enum txo_span_kind kind,
                           int64_t start_us, unsigned attempt, int rc, const char *why);

/* Checks that the saga is still ours and in `expected`, and renews the lease. */
int txo__saga_fence(struct txo_tx *tx, const struct saga_run *r, enum txo_saga_status expected,
                    struct txo_error *err);

/*
 * The one way the saga's status changes; a terminal status releases the lease with it, and
 * COMPENSATION_FAILED also schedules the automatic retry (or gives up, logged once here).
 */
int txo__saga_move(struct txo_tx *tx, const struct saga_run *r, enum txo_saga_status from,
                   enum txo_saga_status to, struct txo_error *err);

/* Logs and returns TXO_ESTATE: step i was not in `expected` when a fenced write needed it. */
int txo__saga_step_not_in(const struct saga_run *r, size_t i, enum txo_step_status expected,
                          struct txo_error *err);

/* The persisted status and remote state of step i, row-locked. */
int txo__saga_lock_step(struct txo_tx *tx, const struct saga_run *r, size_t i,
                        struct saga_step_row *out, struct txo_error *err);

/* Calls hook (on_completed or on_aborted; none: 0) for the saga ending in final_status, with
 * the failed step's code and message in its context. */
int txo__saga_call_hook(struct txo_tx *tx, const struct saga_run *r, txo_saga_finish_fn hook,
                        enum txo_saga_status final_status, struct txo_error *err);

/*
 * A step of a RUNNING saga has failed for good (its row says so in this transaction): undo
 * what needs undoing, or, when nothing does, end the saga FAILED with on_aborted.
 * *after receives the new status.
 */
int txo__saga_abort(struct txo_tx *tx, const struct saga_run *r, enum txo_saga_status *after,
                    struct txo_error *err);

/* Moves the saga to `to` with its hook, in one transaction (FAILED: txo__saga_abort decides). */
int txo__saga_finish(struct saga_run *r, enum txo_saga_status to, struct txo_error *err);

/* Checks the loaded steps (SAGA_SQL_LOAD rows, in any order: the rows idx[0..n_rows) of
 * rows, or all of them when idx is NULL) against the definition and parses them, each into
 * its place by step_order. */
int txo__saga_load_steps(struct saga_run *r, const struct txo_rows *rows, const size_t *idx,
                         size_t n_rows, struct txo_error *err);

/* Copies the instance's correlation id and payload (from row `row` of rows) into r and
 * decodes the payload (again when a transaction body runs again). */
int txo__saga_load_instance(struct saga_run *r, const struct txo_rows *rows, size_t row,
                            struct txo_error *err);

/* Takes the lease and fills r from the database. *terminal: not taken, the saga is over. */
int txo__saga_acquire(struct saga_run *r, bool retry, bool *terminal, struct txo_error *err);

/* Fills r for a run of saga_id (nothing taken or loaded yet). Release with
 * txo__saga_run_release(), also after a failure. */
int txo__saga_run_setup(struct saga_run *r, struct txo_db *db, const struct txo_saga_def *def,
                        const char *saga_id, const struct txo_saga_opts *opts, void *user,
                        struct txo_error *err);

/* Frees what r holds and zeroes it; r is not freed. */
void txo__saga_run_release(struct saga_run *r);

/* ---- saga_deadline.c: the deadlines of a run ---- */

/* The deadline of step i (its own, else the saga's) that has passed on the run's clock, or
 * NONE. The one rule the single and the batch paths ask before a forward try. */
enum txo_saga_deadline txo__saga_deadline_passed(const struct saga_run *r, size_t i);

/* Starts step i's deadline at its first try (kept when it has one already). */
void txo__saga_deadline_start(struct saga_run *r, size_t i);

/* What is left of step i's deadline in microseconds, as a parameter: NULL when it has none. */
struct txo_param txo__saga_step_left_param(const struct saga_run *r, size_t i);

/* The lease of a call of step i's action in microseconds: its try timeout (lease_s when it has
 * none), cut to what is left of the step's and the saga's deadlines. */
int64_t txo__saga_call_lease_us(const struct saga_run *r, size_t i);

/* Reads the loaded deadlines of a saga (row `row` of rows: the instance's; rows idx[..] the
 * steps', as txo__saga_load_steps) onto the run's clock, and counts the tries that expired. */
void txo__saga_load_deadlines(struct saga_run *r, const struct txo_rows *rows, const size_t *idx,
                              size_t n_rows);

/* Logs and counts the calls the load found past their try's deadline (after the lease was
 * taken: the load's transaction may run more than once). */
void txo__saga_count_expired_tries(const struct saga_run *r);

/* Counts a deadline that passed in r->opts.deadlines (labels kind, saga_type). */
void txo__saga_count_deadline(const struct saga_run *r, enum txo_saga_deadline kind);

/* ---- saga_run.c: one saga, a try at a time ---- */

/*
 * A try of step i failed with rc (terr describes it). When that is the step's own outcome
 * (its part failed, or a transient error), records it in a new transaction (final when rc is
 * permanent, the tries are used up or, going forward, a deadline passed) and, when the step
 * may be tried again and `wait` is set, sleeps the backoff (not for a batch's failed call: it
 * was one try, and its single run tries again at once through a call with retries and a
 * backoff of its own); *stop is set when the step is settled instead (done after all, or
 * failed for good: r->status then changed). Anything else (lease lost, illegal state, database
 * error, on_completed failing) is not the step's outcome and is returned as it is.
 */
int txo__saga_settle_failed_try(struct saga_run *r, size_t i, bool compensate, unsigned attempt,
                                bool counted, enum txo_remote_state remote, bool own_failure,
                                int rc, const struct txo_error *terr, bool wait, bool *stop,
                                struct txo_error *err);

/* What an action's remote part is known to have done after a call that returned rc, from
 * `before` (CALLING while it was made). */
enum txo_remote_state txo__saga_after_call(enum txo_remote_state before, int rc);

/* Drives a saga whose lease r holds from its loaded state to a terminal state. */
int txo__saga_drive_run(struct saga_run *r, struct txo_error *err);

/* txo_saga_run (retry false) and txo_saga_retry (retry true): set up, take the lease, drive. */
int txo__saga_drive(struct txo_db *db, const struct txo_saga_def *def, const char *saga_id,
                    const struct txo_saga_opts *opts, void *user, bool retry,
                    enum txo_saga_status *final, struct txo_error *err);

#endif
