/*
 * The saga engine: a long business operation as a sequence of local transactions, each with a
 * compensation, persisted in saga_instances / saga_steps so that any worker can resume it.
 *
 * A saga type is a struct txo_saga_def: an ordered list of steps, each an action and a
 * compensation. txo_saga_create() records an instance (RUNNING) and its steps (PENDING) inside
 * the caller's transaction; txo_saga_run() takes the instance's owner lease and drives it to a
 * terminal state from whatever was persisted, so a saga whose worker died is resumed by the
 * next one (every action and compensation must therefore be idempotent).
 *
 * A step is local: its action runs inside a transaction opened by the engine, and the step's
 * state change (RUNNING -> COMPLETED) commits in that same transaction, with whatever the
 * action wrote (business rows, outbox events). Either both are there or neither is.
 *
 * Errors returned by an action or compensation are classified with txo_err_is_transient():
 *   transient (deadlock, timeout, service unavailable): the step runs again after a backoff,
 *     up to opts.step_max_attempts times; then it counts as failed;
 *   anything else (TXO_EBUSINESS: no stock, card declined): the step FAILS at once and the
 *     completed steps are compensated in reverse order.
 *
 * Saga states (saga_instances.status):
 *   RUNNING        steps are being executed            -> COMPLETED, FAILED, COMPENSATING
 *   COMPLETED      every step completed (terminal)
 *   FAILED         the first step failed, so nothing needed compensating (terminal); the
 *                  definition's on_aborted hook ran (the order service cancels the order)
 *   COMPENSATING   a step failed; completed steps are being undone, last first
 *                                                      -> COMPENSATED, COMPENSATION_FAILED
 *   COMPENSATED    every completed step was undone and on_aborted ran (terminal)
 *   COMPENSATION_FAILED  a compensation kept failing; needs txo_saga_retry() (the worker
 *                  retries it with backoff)                  -> COMPENSATING
 *
 * Step states (saga_steps.status):
 *   PENDING -> RUNNING -> COMPLETED | FAILED
 *   COMPLETED -> COMPENSATING -> COMPENSATED | COMPENSATION_FAILED
 *   COMPENSATION_FAILED -> COMPENSATING (retry)
 * All changes go through one transition check; an illegal one is a bug (TXO_ESTATE).
 *
 * Ownership: saga_instances.owner / lease_until. Every state change renews the lease and is
 * fenced by it (UPDATE ... WHERE owner = me): a worker that lost its lease stops with
 * TXO_ELEASELOST instead of racing the new owner.
 *
 * Cost: the lease is taken in the transaction of the first step a run executes and released in
 * that of the last, so a successful run of a fresh n-step saga commits n transactions; each
 * step costs its action's statements plus one statement and the COMMIT (docs/saga.md).
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

enum txo_saga_status {
    TXO_SAGA_RUNNING = 0,
    TXO_SAGA_COMPLETED,
    TXO_SAGA_FAILED,
    TXO_SAGA_COMPENSATING,
    TXO_SAGA_COMPENSATED,
    TXO_SAGA_COMPENSATION_FAILED,
};

enum txo_step_status {
    TXO_STEP_PENDING = 0,
    TXO_STEP_RUNNING,
    TXO_STEP_COMPLETED,
    TXO_STEP_FAILED,
    TXO_STEP_COMPENSATING,
    TXO_STEP_COMPENSATED,
    TXO_STEP_COMPENSATION_FAILED,
};

TXO_API const char *txo_saga_status_name(enum txo_saga_status s);
TXO_API int txo_saga_status_parse(const char *name, enum txo_saga_status *out);
TXO_API bool txo_saga_can_move(enum txo_saga_status from, enum txo_saga_status to);
/* True for COMPLETED, FAILED, COMPENSATED, COMPENSATION_FAILED. */
TXO_API bool txo_saga_is_terminal(enum txo_saga_status s);

TXO_API const char *txo_step_status_name(enum txo_step_status s);
TXO_API int txo_step_status_parse(const char *name, enum txo_step_status *out);
TXO_API bool txo_step_can_move(enum txo_step_status from, enum txo_step_status to);

#define TXO_SAGA_ID_LEN 37 /* a UUID in text form plus NUL */

/* What an action, compensation or hook is told. All pointers are valid during the call. */
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
    unsigned attempt; /* 1 for the first try of this step in this run */
};

/*
 * A step action or compensation, run inside tx. Returns 0, TXO_EBUSINESS (or another
 * permanent code) to fail the step, or a transient code to have it retried. Describe the
 * failure in err: it is stored in saga_steps.error.
 */
typedef int (*txo_saga_step_fn)(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                                struct txo_error *err);

/* Runs in the same transaction as the saga's final status change. */
typedef int (*txo_saga_finish_fn)(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                                  enum txo_saga_status final_status, struct txo_error *err);

struct txo_saga_step_def {
    const char *name; /* "ReserveStock"; stored in saga_steps.step_name */
    txo_saga_step_fn action;
    txo_saga_step_fn compensate; /* NULL: nothing to undo */
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
};

struct txo_saga_opts {
    const char *owner;               /* lease owner; default "<hostname>:<pid>:<thread>" */
    unsigned lease_s;                /* owner lease, renewed at every step; default 30 */
    unsigned step_max_attempts;      /* tries of one step on transient errors; default 5 */
    struct txo_backoff step_backoff; /* between tries; default 50 ms .. 2 s, jitter 0.5 */
    const struct txo_clock *clock;   /* for the backoff sleeps; NULL = the system clock */
};

TXO_API void txo_saga_opts_init(struct txo_saga_opts *opts);

/*
 * Records a new saga inside tx: an instance (RUNNING, no owner) and one PENDING row per step.
 * Idempotent on (def->type, correlation_id): when that saga exists already nothing is written,
 * *created is false and saga_id receives the existing id. payload_json is stored as given.
 */
TXO_API TXO_MUST_CHECK int txo_saga_create(struct txo_tx *tx, const struct txo_saga_def *def,
                                           const char *correlation_id, const char *payload_json,
                                           char saga_id[TXO_SAGA_ID_LEN], bool *created,
                                           struct txo_error *err);

/*
 * Takes the saga's owner lease and drives it from its persisted state to a terminal state:
 * RUNNING runs the remaining steps, COMPENSATING undoes the completed ones. A saga already
 * terminal is left as it is. *final (may be NULL) receives the state it ended in.
 * Returns 0 when the saga is terminal (whatever the outcome: look at *final).
 * Errors: TXO_ENOTFOUND, TXO_ELEASELOST (another live owner holds it), TXO_EINVAL (the stored
 * type is not def->type or the step list differs), DB errors (the saga stays as persisted and
 * is resumed by whoever runs it after the lease expires).
 */
TXO_API TXO_MUST_CHECK int txo_saga_run(struct txo_db *db, const struct txo_saga_def *def,
                                        const char *saga_id, const struct txo_saga_opts *opts,
                                        void *user, enum txo_saga_status *final,
                                        struct txo_error *err);

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
    char *error;       /* NULL when none */
    unsigned attempts; /* tries of the action and compensation so far */
};
struct txo_saga_info {
    char id[TXO_SAGA_ID_LEN];
    char *type;
    char *correlation_id;
    enum txo_saga_status status;
    char *payload;
    char *owner;    /* NULL when unowned */
    int64_t idle_s; /* seconds since the instance last changed (workers space retries by it) */
    struct txo_saga_step_info *steps;
    size_t n_steps;
};

/* Loads a saga and its steps. Release with txo_saga_info_release(). Errors: TXO_ENOTFOUND. */
TXO_API TXO_MUST_CHECK int txo_saga_load(struct txo_db *db, const char *saga_id,
                                         struct txo_saga_info *out, struct txo_error *err);
TXO_API void txo_saga_info_release(struct txo_saga_info *info);

/*
 * The saga as compact JSON: {"saga_id","saga_type","correlation_id","status","owner",
 * "payload":{...},"steps":[{"step":1,"name","status","attempts","error"}]} (owner and error
 * are null when unset). Returns a string to free with txo_free(), or NULL with err set
 * (TXO_ENOMEM).
 */
TXO_API char *txo_saga_info_json(const struct txo_saga_info *info, struct txo_error *err);

/* Finds the id of the saga of `type` with this correlation id. Errors: TXO_ENOTFOUND. */
TXO_API TXO_MUST_CHECK int txo_saga_find(struct txo_db *db, const char *type,
                                         const char *correlation_id, char saga_id[TXO_SAGA_ID_LEN],
                                         struct txo_error *err);

/*
 * For workers: ids of sagas in `status` that nobody holds (no owner, or the owner's lease
 * expired) and that did not change in the last min_age_s seconds, at most `max` of them.
 * RUNNING / COMPENSATING ones are to be resumed with txo_saga_run(), COMPENSATION_FAILED ones
 * retried with txo_saga_retry() (min_age_s then spaces the retries out). ids must have room
 * for max entries; *n receives how many were written. Errors: TXO_EINVAL, DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_saga_list_due(struct txo_db *db, enum txo_saga_status status,
                                             unsigned min_age_s, size_t max,
                                             char (*ids)[TXO_SAGA_ID_LEN], size_t *n,
                                             struct txo_error *err);

/* Number of sagas per status, indexed by enum txo_saga_status. */
TXO_API TXO_MUST_CHECK int txo_saga_count_by_status(struct txo_db *db, uint64_t counts[6],
                                                    struct txo_error *err);

#endif
