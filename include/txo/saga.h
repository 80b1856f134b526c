/*
 * The saga engine: a long business operation as a sequence of steps, each with a
 * compensation, persisted in saga_instances / saga_steps so that any worker can resume it.
 *
 * A saga type is a struct txo_saga_def: an ordered list of steps. txo_saga_create() records an
 * instance (RUNNING) and its steps (PENDING) inside the caller's transaction; txo_saga_run()
 * takes the instance's owner lease and drives it to a terminal state from whatever was
 * persisted, so a saga whose worker died is resumed by the next one (every part of a step must
 * therefore be idempotent).
 *
 * A step has a local part and, optionally, a remote part (a call to another service):
 *   local   `action` runs inside a transaction opened by the engine, and the step's state
 *           change commits in that same transaction with whatever the action wrote (business
 *           rows, outbox events): either both are there or neither is;
 *   remote  `remote` runs with NO transaction open and no row locked, in three phases:
 *             (a) a short transaction records the step RUNNING, its attempt and the
 *                 idempotency key the call uses (ctx->idempotency_key, the same on every try
 *                 and in every worker);
 *             (b) the call;
 *             (c) a short fenced transaction records the outcome: the local action, the
 *                 step's COMPLETED and its outbox event. A deadlock in (c) re-runs (c), never
 *                 the call.
 * The remote part's result tells the engine what happened:
 *   0                           done: it took effect;
 *   TXO_EUNKNOWN, TXO_ETIMEOUT  unknown: it may have taken effect. Remembered by the step for
 *                               good: tries after it that are refused do not erase it;
 *   another transient code      it did not take effect (service down, breaker open): tried
 *                               again after a backoff, with the same key;
 *   a permanent code            refused: a definite "no", nothing happened; the step fails.
 * A step whose remote part may have happened (unknown at any try, or done while its local
 * part could not commit, e.g. the order was cancelled meanwhile) is compensated like a
 * completed one, so its compensation must be a no-op when the call never took effect.
 * A compensation may have a remote part too (`remote_compensate`), run the same way.
 *
 * Errors returned by a step's parts are classified with txo_err_is_transient():
 *   transient (deadlock, timeout, service unavailable): the step runs again after a backoff,
 *     up to opts.step_max_attempts times; then it counts as failed;
 *   anything else (TXO_EBUSINESS: no stock, card declined): the step FAILS at once and the
 *     steps that need undoing are compensated in reverse order.
 *
 * Saga states (saga_instances.status):
 *   RUNNING        steps are being executed            -> COMPLETED, FAILED, COMPENSATING
 *   COMPLETED      every step completed (terminal)
 *   FAILED         a step failed and nothing needed compensating (terminal); on_aborted ran
 *   COMPENSATING   a step failed; the steps that need undoing are undone, last first
 *                                                      -> COMPENSATED, COMPENSATION_FAILED
 *   COMPENSATED    every step that needed it was undone and on_aborted ran (terminal)
 *   COMPENSATION_FAILED  a compensation kept failing. The engine schedules an automatic
 *                  retry (saga_instances.retry_at, exponential backoff from
 *                  opts.compensation_backoff) up to opts.compensation_max_tries times, then
 *                  gives up (retry_at NULL, one error log line) and leaves it to an operator
 *                  (`txo saga retry`)                       -> COMPENSATING (txo_saga_retry)
 *
 * Step states (saga_steps.status):
 *   PENDING -> RUNNING -> COMPLETED | FAILED
 *   COMPLETED -> COMPENSATING -> COMPENSATED | COMPENSATION_FAILED
 *   FAILED -> COMPENSATING (only when its remote part may have taken effect)
 *   COMPENSATION_FAILED -> COMPENSATING (retry)
 * All changes go through one transition check; an illegal one is a bug (TXO_ESTATE).
 *
 * Ownership: saga_instances.owner / lease_until. Every state change renews the lease and is
 * fenced by it (UPDATE ... WHERE owner = me): a worker that lost its lease stops with
 * TXO_ELEASELOST instead of racing the new owner.
 *
 * Deadlines (all optional, 0 = none, the default: a deadline is a business rule only the
 * definition knows; without one a call is bounded by its own client timeout and lease_s, as
 * before):
 *   step.try_timeout_ms  one try of a remote part. The call's lease (saga_instances.lease_until,
 *                        recorded with phase (a)) is this timeout, not lease_s, so a worker hung
 *                        in the call keeps the saga only until then: the resume poll hands it to
 *                        another worker, which counts the call as maybe done (UNKNOWN) and calls
 *                        again with the same key under the step's retry policy;
 *   step.deadline_ms     all the tries of a step, from its first. Past it the step fails as maybe
 *                        done (UNKNOWN when its remote part may have been called) and the saga
 *                        compensates;
 *   def.deadline_ms      the saga's forward progress, from its creation. Past it the next step
 *                        the saga would try fails and the saga compensates; compensation keeps
 *                        its own retry policy and is never cut by it.
 * The lease of a call is also cut to what is left of the step's and the saga's deadlines. A
 * worker that wakes from its call after the saga was taken over is fenced like any worker that
 * lost its lease: its late result changes nothing, and its call, if it happened, is covered by
 * the compensation (the service must refuse a late `do` whose `undo` it has seen). Deadlines
 * are checked with the run's clock from what was left when the saga was loaded (the database's
 * time), before every try. txo_saga_list_stuck() shows the sagas past one, even under a live
 * owner, with the step and by how long.
 *
 * Cost: a run takes the lease in a transaction of its own, then one transaction per local
 * step (the last one also completes the saga and releases the lease) and two per remote step
 * (docs/saga.md).
 *
 * Thread-safety: a definition is immutable and may be shared; txo_saga_run uses only the db
 * it is given (one thread at a time per db).
 */
#ifndef TXO_SAGA_H
#define TXO_SAGA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/backoff.h"
#include "txo/clock.h"
#include "txo/common.h"
#include "txo/db.h"
#include "txo/trace.h"

enum txo_saga_status {
    TXO_SAGA_RUNNING = 0,
    TXO_SAGA_COMPLETED,
    TXO_SAGA_FAILED,
    TXO_SAGA_COMPENSATING,
    TXO_SAGA_COMPENSATED,
    TXO_SAGA_COMPENSATION_FAILED,
};
#define TXO_SAGA_STATUS_COUNT 6

enum txo_step_status {
    TXO_STEP_PENDING = 0,
    TXO_STEP_RUNNING,
    TXO_STEP_COMPLETED,
    TXO_STEP_FAILED,
    TXO_STEP_COMPENSATING,
    TXO_STEP_COMPENSATED,
    TXO_STEP_COMPENSATION_FAILED,
};

/*
 * The status names are the column values ("RUNNING", ...); "INVALID" for a value outside the
 * enum. Never NULL. The parsers return TXO_EINVAL for any other text.
 */
TXO_API const char *txo_saga_status_name(enum txo_saga_status s);
TXO_API int txo_saga_status_parse(const char *name, enum txo_saga_status *out);
TXO_API bool txo_saga_can_move(enum txo_saga_status from, enum txo_saga_status to);
/* True for COMPLETED, FAILED, COMPENSATED, COMPENSATION_FAILED. */
TXO_API bool txo_saga_is_terminal(enum txo_saga_status s);

TXO_API const char *txo_step_status_name(enum txo_step_status s);
TXO_API int txo_step_status_parse(const char *name, enum txo_step_status *out);
TXO_API bool txo_step_can_move(enum txo_step_status from, enum txo_step_status to);

#define TXO_SAGA_ID_LEN 37 /* a UUID in text form plus NUL */

/*
 * What the remote part of a step's action is known to have done (saga_steps.remote_state).
 * CALLING is held only while the step is RUNNING; a state that may have taken effect (UNKNOWN,
 * DONE) never goes back to NONE.
 */
enum txo_remote_state {
    TXO_REMOTE_NONE = 0, /* not called, or it did not take effect; -> CALLING */
    TXO_REMOTE_CALLING,  /* a call is in flight (or was, when its worker died);
                          * -> DONE, UNKNOWN (no answer, or found cut short), NONE (refused) */
    TXO_REMOTE_UNKNOWN,  /* a call may have taken effect; -> DONE */
    TXO_REMOTE_DONE,     /* a call took effect; final */
};

/* "NONE", "CALLING", "UNKNOWN", "DONE". */
TXO_API const char *txo_remote_state_name(enum txo_remote_state s);

/* What a step's parts or a hook are told. All pointers are valid during the call. */
struct txo_saga_ctx {
    const char *saga_id;
    const char *saga_type;
    const char *correlation_id;
    const char *payload; /* the JSON given to txo_saga_create() */
    size_t payload_len;
    void *state;         /* what def->decode produced from payload (NULL without decode) */
    void *user;          /* the `user` pointer given to txo_saga_run() */
    unsigned step_index; /* 0-based index of the step being run or compensated */
    const char *step_name;
    unsigned attempt;  /* 1 for the first try of this step in this run */
    bool compensating; /* the compensation is running, not the action */
    /* For a remote part: the key to send as the call's idempotency key, the same on every try
     * and in every worker ("<saga_id>:<step>:do" or ":undo"). NULL for local parts. */
    const char *idempotency_key;
    /* For on_aborted: the step whose failure aborted the saga (-1 when none), its txo error
     * code (saga_steps.error_code), its stored message (may be NULL), and whether its remote
     * part may have taken effect (and was therefore compensated). Zero for everything else. */
    int failed_step;
    const char *failed_step_name;
    int failed_code;
    const char *failed_message;
    bool failed_remote_maybe;
    /* The span of this step's run in the trace the saga was created in (txo/trace.h): what
     * the events it appends and the calls it makes carry. has_trace false: none. */
    bool has_trace;
    struct txo_trace_ctx trace;
};

/*
 * Every part of a step is written once, for n sagas at the same step: the engine hands it one
 * saga when it runs a saga on its own (txo_saga_run, a retry, a compensation) and several when
 * txo_saga_run_many() batches a step. A part that has a set-based form (one statement for the
 * rows of many sagas) writes it once and the single run gets it too; a part that works saga by
 * saga loops over ctx.
 *
 * A step's local part (action, compensation, guard), run inside tx. ctx[k] is saga k's
 * context; for each saga it sets rcs[k], and errs[k] when rcs[k] is not 0:
 *   0             done: what it wrote for saga k commits with the transaction;
 *   TXO_EALONE    no verdict in this batch (say, a rule that needs the saga's rows alone): it
 *                 wrote nothing for saga k, and the engine runs saga k's step in a batch of its
 *                 own, where it must give a verdict (TXO_EALONE in a batch of one is a bug);
 *   another code  the try's result for saga k: TXO_EBUSINESS (or another permanent code) fails
 *                 the step, a transient code has it retried after a backoff. With n > 1 it
 *                 must have written nothing for saga k; the engine then runs saga k alone, which
 *                 evaluates the rule again in the saga's own transaction and records it. With
 *                 n = 1 whatever it wrote is rolled back.
 * Describe a failure in errs[k]: it is stored in saga_steps.error, the code in error_code.
 * Returning non-zero (with err) fails the whole transaction: it rolls back, and with n > 1
 * every saga of it runs alone. A guard must write nothing: a non-zero rcs[k] refuses saga k's
 * call before anything is recorded for it.
 */
typedef int (*txo_saga_step_fn)(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n,
                                int *rcs, struct txo_error *errs, struct txo_error *err);

/*
 * A step's remote part: the calls of n sagas at this step, with no transaction open (n > 1:
 * made concurrently, a multi-request HTTP client, say). ctx[k] carries saga k's idempotency key,
 * which the call must send. rcs[k] and errs[k] get saga k's result: 0 (done), TXO_EUNKNOWN or
 * TXO_ETIMEOUT (may have taken effect), another transient code (did not take effect, retry) or
 * a permanent code (refused). Make one try per call: the engine records a failed call and
 * retries it with its backoff.
 */
typedef void (*txo_saga_remote_fn)(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                                   struct txo_error *errs);

/* Runs in the same transaction as the saga's final status change. */
typedef int (*txo_saga_finish_fn)(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                                  enum txo_saga_status final_status, struct txo_error *err);

struct txo_saga_step_def {
    const char *name; /* "ReserveStock"; stored in saga_steps.step_name */
    /* Deadlines (see the top of this file); 0: none. try_timeout_ms applies to a remote part. */
    unsigned try_timeout_ms;
    unsigned deadline_ms;
    txo_saga_step_fn action;              /* the local part (required) */
    txo_saga_step_fn compensate;          /* its undo; NULL: nothing local to undo */
    txo_saga_remote_fn remote;            /* NULL: the step is local only */
    txo_saga_remote_fn remote_compensate; /* NULL: nothing remote to undo */
    /*
     * Optional, for a step with a remote part: runs inside phase (a), before the call is
     * recorded and made, and may refuse it (a permanent code fails the step: nothing was
     * called). The order service checks here that the order is still CREATED, so a customer's
     * cancel stops the saga before it charges. A cancel that commits after the guard is still
     * caught by the local part, and the call is undone.
     */
    txo_saga_step_fn guard;
};

struct txo_saga_def {
    const char *type; /* saga_instances.saga_type, e.g. "CreateOrderSaga" */
    const struct txo_saga_step_def *steps;
    size_t n_steps;
    /* Optional: parses the payload once per run into ctx->state; free_state releases it. */
    int (*decode)(const char *payload, size_t len, void **state, struct txo_error *err);
    void (*free_state)(void *state);
    /* Optional: with the change to COMPLETED. */
    txo_saga_finish_fn on_completed;
    /* Optional: with the change to FAILED or COMPENSATED (e.g. cancel the order). */
    txo_saga_finish_fn on_aborted;
    /* The saga's forward deadline from its creation (saga_instances.deadline_at); 0: none. */
    unsigned deadline_ms;
};

/* Which deadline a saga passed (a label of txo_saga_deadlines_passed_total, and what the stuck
 * listing says). */
enum txo_saga_deadline {
    TXO_DEADLINE_NONE = 0,
    TXO_DEADLINE_TRY,  /* a call did not answer by its step's try_timeout_ms */
    TXO_DEADLINE_STEP, /* a step's deadline_ms over all its tries */
    TXO_DEADLINE_SAGA, /* the saga's deadline_ms */
};

/* "none", "try", "step", "saga"; "INVALID" outside the enum. Never NULL. */
TXO_API const char *txo_saga_deadline_name(enum txo_saga_deadline d);

struct txo_metric;

struct txo_tracer;

struct txo_saga_opts {
    const char *owner;               /* lease owner; default "<hostname>:<pid>:<thread>" */
    unsigned lease_s;                /* owner lease, renewed at every step; default 30 */
    unsigned step_max_attempts;      /* tries of one step on transient errors; default 5 */
    struct txo_backoff step_backoff; /* between tries; default 50 ms .. 2 s, jitter 0.5 */
    /* COMPENSATION_FAILED: automatic retries before giving up (default 10), and the delay
     * before retry n (default 5 s doubling up to 300 s, jitter 0.5). */
    unsigned compensation_max_tries;
    struct txo_backoff compensation_backoff;
    const struct txo_clock *clock; /* for the backoff sleeps and the deadlines; NULL = the
                                    * system clock */
    /* Optional: a counter labelled (kind, saga_type), incremented once for each deadline the
     * engine finds passed: txo_saga_deadlines_passed_total of the worker runtime. */
    struct txo_metric *deadlines;
    /* NULL: none. Else each try of a step of a saga created in a sampled trace is a span
     * (INTERNAL, named after the step) and its remote call a CLIENT span within it, whose
     * context the call carries (struct txo_saga_ctx.trace); txo/tracer.h. */
    struct txo_tracer *tracer;
};

TXO_API void txo_saga_opts_init(struct txo_saga_opts *opts);

/*
 * Records a new saga inside tx: an instance (RUNNING, no owner) and one PENDING row per step.
 * Idempotent on (def->type, correlation_id): when that saga exists already nothing is written,
 * *created is false and saga_id receives the existing id. payload_json is stored as given;
 * trace (NULL: none) is the trace context of the operation that creates the saga, which its
 * steps continue (struct txo_saga_ctx.trace).
 */
TXO_API TXO_MUST_CHECK int txo_saga_create(struct txo_tx *tx, const struct txo_saga_def *def,
                                           const char *correlation_id, const char *payload_json,
                                           const struct txo_trace_ctx *trace,
                                           char saga_id[TXO_SAGA_ID_LEN], bool *created,
                                           struct txo_error *err);

/* One saga for txo_saga_create_many(): what to create, and what happened. */
struct txo_saga_new {
    const char *correlation_id;        /* borrowed */
    const char *payload_json;          /* borrowed */
    const struct txo_trace_ctx *trace; /* the creating operation's; NULL: none (borrowed) */
    char saga_id[TXO_SAGA_ID_LEN];     /* out: the new or the existing saga's id */
    bool created;                      /* out: false when it existed (or came twice in the list) */
};

/*
 * txo_saga_create() for n sagas of def inside tx (txo_saga_create() is a batch of one): one
 * multi-row INSERT of the instances that skips those that exist, one of all the new ones'
 * steps, and one SELECT only when some existed. A saga another transaction is creating at the
 * same moment is waited for and then found, never created twice. A correlation id given twice
 * in sagas gets one saga (created true for the first). Errors: those of txo_saga_create()
 * (checked before anything is written). n = 0 writes nothing and succeeds.
 */
TXO_API TXO_MUST_CHECK int txo_saga_create_many(struct txo_tx *tx, const struct txo_saga_def *def,
                                                struct txo_saga_new *sagas, size_t n,
                                                struct txo_error *err);

/*
 * Takes the saga's owner lease and drives it from its persisted state to a terminal state:
 * RUNNING runs the remaining steps, COMPENSATING undoes the completed ones. A saga already
 * terminal is left as it is. opts NULL: txo_saga_opts_init()'s defaults. *final (may be NULL)
 * receives the state it ended in. Returns 0 when the saga is terminal (whatever the outcome:
 * look at *final).
 * Errors: TXO_ENOTFOUND, TXO_ELEASELOST (another live owner holds it), TXO_EINVAL (the stored
 * type is not def->type or the step list differs), DB errors (the saga stays as persisted and
 * is resumed by whoever runs it after the lease expires).
 */
TXO_API TXO_MUST_CHECK int txo_saga_run(struct txo_db *db, const struct txo_saga_def *def,
                                        const char *saga_id, const struct txo_saga_opts *opts,
                                        void *user, enum txo_saga_status *final,
                                        struct txo_error *err);

/*
 * Drives n sagas of def to a terminal state, as txo_saga_run() does each, but the first try of a
 * step that several of them have next runs for all of them at once: the leases are taken with
 * one statement, the sagas loaded with one, and a local step runs its action for the whole
 * batch in one transaction, plus two fenced statements (the instances' lease or completion,
 * the steps' status) instead of a transaction per saga. A step with a remote part runs its
 * three phases for the whole batch: one transaction runs the guard and records every call
 * (RUNNING, CALLING, its key), the calls are made together with nothing locked, and one
 * transaction runs the action for the sagas whose call was done. A saga whose call failed, was
 * refused or may have happened leaves the batch: its outcome is recorded and it goes on alone.
 * A saga the batch did not complete (a non-zero rcs of the action), a saga past a deadline,
 * retries and compensations run alone (txo_saga_run's way, each part a batch of one). A crash
 * anywhere inside a batch's transaction commits nothing of it, and a crash after its calls
 * leaves them CALLING, i.e. maybe done: every saga is resumed from its persisted state after
 * its lease expires. rcs[k] (may be NULL) gets what txo_saga_run() would have returned for
 * ids[k], finals[k] (may be NULL) the state it ended in. Returns 0 when every saga was handled
 * (look at rcs), or an error that stopped the whole batch (bad arguments, out of memory).
 */
TXO_API TXO_MUST_CHECK int txo_saga_run_many(struct txo_db *db, const struct txo_saga_def *def,
                                             const char *const *ids, size_t n,
                                             const struct txo_saga_opts *opts, void *user, int *rcs,
                                             enum txo_saga_status *finals, struct txo_error *err);

/*
 * Retries a COMPENSATION_FAILED saga: moves it (and its COMPENSATION_FAILED steps) back to
 * COMPENSATING and runs it as txo_saga_run does. TXO_ESTATE when the saga is in another state.
 */
TXO_API TXO_MUST_CHECK int txo_saga_retry(struct txo_db *db, const struct txo_saga_def *def,
                                          const char *saga_id, const struct txo_saga_opts *opts,
                                          void *user, enum txo_saga_status *final,
                                          struct txo_error *err);

/* A persisted saga, for inspection (`txo saga show`). */
struct txo_saga_step_info {
    unsigned step_order; /* 1-based, as stored */
    char *name;
    enum txo_step_status status;
    char *error;                  /* NULL when none */
    int error_code;               /* the txo code of that error; 0 when none */
    unsigned attempts;            /* tries of the action and compensation so far */
    enum txo_remote_state remote; /* what the action's remote part is known to have done */
    /* RFC 3339 UTC ("2026-12-01T12:00:00.123456Z"): the step's deadline over all its tries,
     * set by its first recorded try; "" when none. */
    char deadline_at[TXO_RFC3339_LEN];
};
struct txo_saga_info {
    char id[TXO_SAGA_ID_LEN];
    char *type;
    char *correlation_id;
    enum txo_saga_status status;
    char *payload;
    char *owner;                 /* NULL when unowned */
    int64_t idle_s;              /* seconds since the instance last changed */
    unsigned compensation_tries; /* times it ended COMPENSATION_FAILED */
    bool retry_scheduled;        /* COMPENSATION_FAILED with an automatic retry due */
    struct txo_saga_step_info *steps;
    size_t n_steps;
    /* RFC 3339 UTC, as the steps' deadline_at: when the saga must have reached its end ("" when
     * it has no deadline), when it was created and when it last changed. */
    char deadline_at[TXO_RFC3339_LEN];
    char created_at[TXO_RFC3339_LEN];
    char updated_at[TXO_RFC3339_LEN];
};

/* Loads a saga and its steps. Release with txo_saga_info_release(). Errors: TXO_ENOTFOUND. */
TXO_API TXO_MUST_CHECK int txo_saga_load(struct txo_db *db, const char *saga_id,
                                         struct txo_saga_info *out, struct txo_error *err);
TXO_API void txo_saga_info_release(struct txo_saga_info *info);

/*
 * The saga as compact JSON: {"saga_id","saga_type","correlation_id","status","owner",
 * "compensation_tries","retry_scheduled","deadline_at","created_at","updated_at","payload":{...},
 * "steps":[{"step":1,"name","status","attempts","error","error_code","remote","deadline_at"}]}
 * (owner, error, error_code and deadline_at are null when unset; times are RFC 3339 UTC).
 * Returns a string to free with txo_free(), or NULL with err set (TXO_ENOMEM).
 */
TXO_API char *txo_saga_info_json(const struct txo_saga_info *info, struct txo_error *err);

/* Finds the id of the saga of `type` with this correlation id. Errors: TXO_ENOTFOUND. */
TXO_API TXO_MUST_CHECK int txo_saga_find(struct txo_db *db, const char *type,
                                         const char *correlation_id, char saga_id[TXO_SAGA_ID_LEN],
                                         struct txo_error *err);

/* A saga found by txo_saga_list_due() or txo_saga_list_stuck(): its id and type (which
 * definition runs it); the stuck list also fills status, idle_s and the deadline fields. */
#define TXO_SAGA_TYPE_MAX 128
#define TXO_SAGA_STEP_MAX 128
struct txo_saga_ref {
    char id[TXO_SAGA_ID_LEN];
    char type[TXO_SAGA_TYPE_MAX + 1];
    enum txo_saga_status status;
    int64_t idle_s; /* seconds since it last changed */
    /* A RUNNING saga past a deadline: which one, the step being tried ("" between steps) and
     * how many seconds ago it passed. NONE and 0 otherwise. */
    enum txo_saga_deadline deadline;
    char step[TXO_SAGA_STEP_MAX + 1];
    int64_t overdue_s;
};

/*
 * For workers: sagas in `status` that are due, at most `max` of them:
 *   RUNNING / COMPENSATING   nobody holds them (no owner, or the owner's lease expired):
 *                            resume them with txo_saga_run();
 *   COMPENSATION_FAILED      their retry_at has passed, oldest first (given-up sagas have no
 *                            retry_at and are never listed): retry them with txo_saga_retry().
 * out must have room for max entries; *n receives how many were written.
 * Errors: TXO_EINVAL (another status), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_saga_list_due(struct txo_db *db, enum txo_saga_status status,
                                             size_t max, struct txo_saga_ref *out, size_t *n,
                                             struct txo_error *err);

/*
 * Sagas that need an operator's eye: RUNNING or COMPENSATING with no live owner that have not
 * moved for idle_s seconds (no worker runs them: are the workers down?), RUNNING ones past a
 * deadline (the saga's, or its running step's or call's), even under a live owner (a worker hung
 * in a step), with where and how long, and COMPENSATION_FAILED ones the engine gave up on. At
 * most max, the longest idle first. Errors: TXO_EINVAL, DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_saga_list_stuck(struct txo_db *db, unsigned idle_s, size_t max,
                                               struct txo_saga_ref *out, size_t *n,
                                               struct txo_error *err);

/*
 * Every COMPENSATION_FAILED saga, whether a retry is scheduled or the engine gave up on it (the
 * given-up ones first, then by when their retry is due), at most max, with status and idle_s
 * filled: for the operator's dashboard, which shows them before the engine gives up.
 * Errors: TXO_EINVAL, DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_saga_list_compensation_failed(struct txo_db *db, size_t max,
                                                             struct txo_saga_ref *out, size_t *n,
                                                             struct txo_error *err);

/* How many sagas there are per status, and how many COMPENSATION_FAILED ones the engine gave
 * up on (no retry scheduled: an operator must look). */
struct txo_saga_counts {
    uint64_t by_status[TXO_SAGA_STATUS_COUNT]; /* indexed by enum txo_saga_status */
    uint64_t abandoned;
};

TXO_API TXO_MUST_CHECK int txo_saga_count(struct txo_db *db, struct txo_saga_counts *out,
                                          struct txo_error *err);

struct txo_metrics;

/*
 * The sagas' gauges: txo_sagas{status}, txo_saga_compensation_abandoned and txo_sagas_stuck
 * (what txo_saga_list_stuck() finds with 60 s of idleness, up to 100). _register adds them to
 * reg; _collect sets them from the tables (a scrape-time collector's work).
 * Errors: those of txo_metrics_register(), txo_saga_count() and txo_saga_list_stuck().
 */
TXO_API TXO_MUST_CHECK int txo_saga_metrics_register(struct txo_metrics *reg,
                                                     struct txo_error *err);
TXO_API TXO_MUST_CHECK int txo_saga_metrics_collect(struct txo_metrics *reg, struct txo_db *db,
                                                    struct txo_error *err);

#endif
