/*
 * The saga engine (include/txo/saga.h; design note docs/saga.md).
 *
 * A saga is driven from what is persisted, never from memory: txo_saga_run() takes the owner
 * lease, loads the instance and its steps, and then moves them one transaction at a time:
 *
 *   step try       fence + renew lease, step -> RUNNING (attempts + 1), action, step ->
 *                  COMPLETED: one transaction, so the step's status commits with the action's
 *                  own writes (business rows, outbox events) or not at all;
 *   failed try     the try rolled back; a new transaction records it (attempts + 1, error)
 *                  and, when the error is permanent or the tries are used up, fails the step
 *                  and moves the saga to FAILED (nothing to undo) or COMPENSATING;
 *   compensation   the same shape in reverse order over the COMPLETED steps, ending in
 *                  COMPENSATED, or COMPENSATION_FAILED when one keeps failing;
 *   finish         the terminal status, the definition's hook and the release of the lease in
 *                  one transaction.
 *
 * Invariants:
 *   - every write is fenced: the instance by (owner, expected status), a step by (saga_id,
 *     step_order, expected status), and each status change is first checked against the one
 *     transition table of saga_state.c;
 *   - struct run mirrors the persisted statuses as of the last commit, and is updated only
 *     after a transaction committed (txo_db_transact may run a body several times, so bodies
 *     write their results into their own argument struct, reset at their start);
 *   - a failed try is settled from the step's persisted status (read under lock), so a COMMIT
 *     whose outcome was unknown is never counted twice nor lost.
 *
 * Thread-safety: a run uses only the db it is given and its own memory. The default owner
 * name is per thread (thread-local).
 */
#include "core/common.h"

#include <stdatomic.h>
#include <sys/types.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include "saga/saga_internal.h"
#include "saga/saga_sql.h"

#define OWNER_MAX         128 /* saga_instances.owner VARCHAR(128) */
#define TYPE_MAX          128 /* saga_instances.saga_type */
#define CORRELATION_MAX   255 /* saga_instances.correlation_id */
#define STEP_NAME_MAX     128 /* saga_steps.step_name */
#define DEFAULT_LEASE_S   30
#define DEFAULT_MAX_TRIES 5

/* Columns of SAGA_SQL_SELECT_INSTANCE and SAGA_SQL_SELECT_STEPS. */
enum { INST_ID, INST_TYPE, INST_CORRELATION, INST_STATUS, INST_PAYLOAD, INST_OWNER };
enum { STEP_ORDER, STEP_NAME, STEP_STATUS, STEP_ERROR, STEP_ATTEMPTS };

/* One txo_saga_run / txo_saga_retry call. */
struct run {
    struct txo_db *db;
    const struct txo_saga_def *def;
    struct txo_saga_opts opts; /* a copy with the defaults filled in */
    const struct txo_clock *clock;
    char owner[OWNER_MAX + 1];
    char id[TXO_SAGA_ID_LEN];
    char *correlation_id;
    char *payload;
    size_t payload_len;
    void *state; /* def->decode's result */
    bool has_state;
    void *user;
    enum txo_saga_status status; /* persisted saga status, as of the last commit */
    enum txo_step_status *steps; /* persisted step statuses, def->n_steps of them */
};

/* ------------------------------------------------------------------------------------------ */
/* Options and the owner name */

static atomic_uint owner_seq;
static _Thread_local char thread_owner[OWNER_MAX + 1];
static _Thread_local pid_t thread_owner_pid;

/* "<hostname>:<pid>:<n>", n numbering the threads of this process that asked. */
static const char *default_owner(void)
{
    pid_t pid = getpid();
    if (thread_owner[0] == '\0' || thread_owner_pid != pid) {
        char host[64];
        if (gethostname(host, sizeof(host)) != 0) {
            snprintf(host, sizeof(host), "unknown");
        }
        host[sizeof(host) - 1] = '\0';
        unsigned n = atomic_fetch_add(&owner_seq, 1) + 1;
        snprintf(thread_owner, sizeof(thread_owner), "%s:%ld:%u", host, (long)pid, n);
        thread_owner_pid = pid;
    }
    return thread_owner;
}

void txo_saga_opts_init(struct txo_saga_opts *opts)
{
    opts->owner = NULL; /* NULL: default_owner() of the calling thread, computed per run */
    opts->lease_s = DEFAULT_LEASE_S;
    opts->step_max_attempts = DEFAULT_MAX_TRIES;
    opts->step_backoff.base_ms = 50;
    opts->step_backoff.max_ms = 2000;
    opts->step_backoff.jitter = 0.5;
    opts->clock = NULL;
}

static int check_def(const struct txo_saga_def *def, struct txo_error *err)
{
    if (def == NULL || def->type == NULL || def->type[0] == '\0') {
        return txo_error_set(err, TXO_EINVAL, "saga definition without a type");
    }
    if (strlen(def->type) > TYPE_MAX) {
        return txo_error_set(err, TXO_EINVAL, "saga type '%.40s...' longer than %d bytes",
                             def->type, TYPE_MAX);
    }
    if (def->steps == NULL || def->n_steps == 0) {
        return txo_error_set(err, TXO_EINVAL, "saga %s: definition has no steps", def->type);
    }
    for (size_t i = 0; i < def->n_steps; i++) {
        const struct txo_saga_step_def *s = &def->steps[i];
        if (s->name == NULL || s->name[0] == '\0' || strlen(s->name) > STEP_NAME_MAX) {
            return txo_error_set(err, TXO_EINVAL, "saga %s: step %zu needs a name of 1..%d bytes",
                                 def->type, i + 1, STEP_NAME_MAX);
        }
        if (s->action == NULL) {
            return txo_error_set(err, TXO_EINVAL, "saga %s: step %s has no action", def->type,
                                 s->name);
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Fenced writes, used inside transactions */

static int lease_lost(const struct run *r, enum txo_saga_status expected, struct txo_error *err)
{
    return txo_error_set(err, TXO_ELEASELOST,
                         "saga %s: lease lost (no longer owned by %s in status %s)", r->id,
                         r->owner, txo_saga_status_name(expected));
}

/* Checks that the saga is still ours and in `expected`, and renews the lease. */
static int fence(struct txo_tx *tx, const struct run *r, enum txo_saga_status expected,
                 struct txo_error *err)
{
    struct txo_param p[] = {txo_p_i64(r->opts.lease_s), txo_p_str(r->id), txo_p_str(r->owner),
                            txo_p_str(txo_saga_status_name(expected))};
    struct txo_exec_result res;
    int rc = txo_tx_exec(tx, SAGA_SQL_FENCE, p, TXO_ARRAY_LEN(p), &res, err);
    if (rc != 0) {
        return rc;
    }
    return res.affected_rows == 1 ? 0 : lease_lost(r, expected, err);
}

/* The one way the saga's status changes; a terminal status releases the lease with it. */
static int saga_move(struct txo_tx *tx, const struct run *r, enum txo_saga_status from,
                     enum txo_saga_status to, struct txo_error *err)
{
    int rc = txo__saga_check_move(r->id, from, to, err);
    if (rc != 0) {
        return rc;
    }
    struct txo_exec_result res;
    if (txo_saga_is_terminal(to)) {
        struct txo_param p[] = {txo_p_str(txo_saga_status_name(to)), txo_p_str(r->id),
                                txo_p_str(r->owner), txo_p_str(txo_saga_status_name(from))};
        rc = txo_tx_exec(tx, SAGA_SQL_MOVE_RELEASE, p, TXO_ARRAY_LEN(p), &res, err);
    } else {
        struct txo_param p[] = {txo_p_str(txo_saga_status_name(to)), txo_p_i64(r->opts.lease_s),
                                txo_p_str(r->id), txo_p_str(r->owner),
                                txo_p_str(txo_saga_status_name(from))};
        rc = txo_tx_exec(tx, SAGA_SQL_MOVE, p, TXO_ARRAY_LEN(p), &res, err);
    }
    if (rc != 0) {
        return rc;
    }
    return res.affected_rows == 1 ? 0 : lease_lost(r, from, err);
}

/* How a step row is written: a status move, or the start or the failure of a try. */
enum step_write_kind {
    STEP_WRITE_MOVE,       /* SAGA_SQL_STEP_MOVE */
    STEP_WRITE_TRY,        /* SAGA_SQL_STEP_TRY */
    STEP_WRITE_TRY_FAILED, /* SAGA_SQL_STEP_TRY_FAILED, the only one storing `error` */
};

/*
 * The one way a step row changes. For a try, `to` may equal `from` (a retried RUNNING or
 * COMPENSATING step): that is not a move, so it is not checked against the table.
 */
static int step_write(struct txo_tx *tx, const struct run *r, size_t i, enum step_write_kind kind,
                      enum txo_step_status from, enum txo_step_status to, const char *error,
                      struct txo_error *err)
{
    unsigned order = (unsigned)i + 1;
    int rc = 0;
    if (from != to || kind == STEP_WRITE_MOVE) {
        rc = txo__step_check_move(r->id, order, from, to, err);
        if (rc != 0) {
            return rc;
        }
    }
    struct txo_exec_result res;
    if (kind == STEP_WRITE_TRY_FAILED) {
        struct txo_param p[] = {txo_p_str(txo_step_status_name(to)), txo_p_str(error),
                                txo_p_str(r->id), txo_p_i64(order),
                                txo_p_str(txo_step_status_name(from))};
        rc = txo_tx_exec(tx, SAGA_SQL_STEP_TRY_FAILED, p, TXO_ARRAY_LEN(p), &res, err);
    } else {
        struct txo_param p[] = {txo_p_str(txo_step_status_name(to)), txo_p_str(r->id),
                                txo_p_i64(order), txo_p_str(txo_step_status_name(from))};
        rc = txo_tx_exec(tx, kind == STEP_WRITE_TRY ? SAGA_SQL_STEP_TRY : SAGA_SQL_STEP_MOVE, p,
                         TXO_ARRAY_LEN(p), &res, err);
    }
    if (rc != 0) {
        return rc;
    }
    if (res.affected_rows != 1) {
        /* The instance row is locked by our fence, so nobody else can have moved the step. */
        TXO_LOG(TXO_LOG_ERROR, "saga",
                "step not in expected status saga_id=%s step=%u "
                "expected=%s",
                r->id, order, txo_step_status_name(from));
        return txo_error_set(err, TXO_ESTATE, "saga %s step %u: not in status %s", r->id, order,
                             txo_step_status_name(from));
    }
    return 0;
}

/* The persisted status of step i, row-locked. */
static int lock_step(struct txo_tx *tx, const struct run *r, size_t i, enum txo_step_status *out,
                     struct txo_error *err)
{
    struct txo_param p[] = {txo_p_str(r->id), txo_p_i64((int64_t)i + 1)};
    struct txo_rows *rows = NULL;
    int rc = txo_tx_query(tx, SAGA_SQL_LOCK_STEP, p, TXO_ARRAY_LEN(p), &rows, err);
    if (rc != 0) {
        goto out;
    }
    if (txo_rows_count(rows) != 1) {
        rc = txo_error_set(err, TXO_ENOTFOUND, "saga %s: step %zu not found", r->id, i + 1);
        goto out;
    }
    const char *name = txo_rows_str(rows, 0, 0, NULL);
    if (txo_step_status_parse(name, out) != 0) {
        rc = txo_error_set(err, TXO_EDB, "saga %s step %zu: unknown status '%s'", r->id, i + 1,
                           name != NULL ? name : "NULL");
    }
out:
    txo_rows_free(rows);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Contexts and hooks */

static void make_ctx(const struct run *r, size_t i, unsigned attempt, struct txo_saga_ctx *ctx)
{
    ctx->saga_id = r->id;
    ctx->saga_type = r->def->type;
    ctx->correlation_id = r->correlation_id;
    ctx->payload = r->payload;
    ctx->payload_len = r->payload_len;
    ctx->state = r->state;
    ctx->user = r->user;
    ctx->step_index = (unsigned)i;
    ctx->step_name = r->def->steps[i].name;
    ctx->attempt = attempt;
}

/* The step a finish hook is told about: the one that failed, else the last one. */
static size_t hook_step(const struct run *r, size_t failed)
{
    if (failed < r->def->n_steps) {
        return failed;
    }
    for (size_t i = 0; i < r->def->n_steps; i++) {
        if (r->steps[i] == TXO_STEP_FAILED) {
            return i;
        }
    }
    return r->def->n_steps - 1;
}

static int call_hook(struct txo_tx *tx, const struct run *r, txo_saga_finish_fn hook, size_t failed,
                     enum txo_saga_status final_status, struct txo_error *err)
{
    if (hook == NULL) {
        return 0;
    }
    struct txo_saga_ctx ctx;
    make_ctx(r, hook_step(r, failed), 1, &ctx);
    int rc = hook(tx, &ctx, final_status, err);
    if (rc != 0) {
        txo_error_wrap(err, "saga %s: %s hook", r->id,
                       final_status == TXO_SAGA_COMPLETED ? "on_completed" : "on_aborted");
        return rc < 0 ? rc : TXO_EINVAL;
    }
    return 0;
}

/*
 * Step `failed` of a RUNNING saga has failed for good: compensate the completed steps, or,
 * when there are none, end the saga FAILED with on_aborted. *after receives the new status.
 */
static int abort_saga(struct txo_tx *tx, const struct run *r, size_t failed,
                      enum txo_saga_status *after, struct txo_error *err)
{
    bool any_completed = false;
    for (size_t i = 0; i < r->def->n_steps; i++) {
        if (i != failed && r->steps[i] == TXO_STEP_COMPLETED) {
            any_completed = true;
        }
    }
    if (any_completed) {
        int rc = saga_move(tx, r, TXO_SAGA_RUNNING, TXO_SAGA_COMPENSATING, err);
        if (rc == 0) {
            *after = TXO_SAGA_COMPENSATING;
        }
        return rc;
    }
    int rc = saga_move(tx, r, TXO_SAGA_RUNNING, TXO_SAGA_FAILED, err);
    if (rc == 0) {
        rc = call_hook(tx, r, r->def->on_aborted, failed, TXO_SAGA_FAILED, err);
    }
    if (rc == 0) {
        *after = TXO_SAGA_FAILED;
    }
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* One try of an action or a compensation, and the record of a failed try */

struct try_tx {
    struct run *r;
    size_t i;
    bool compensate; /* false: the action; true: the compensation */
    unsigned attempt;
    /* out */
    bool fn_failed; /* the action/compensation itself returned fn_rc */
    int fn_rc;
};

static enum txo_step_status busy_status(bool compensate)
{
    return compensate ? TXO_STEP_COMPENSATING : TXO_STEP_RUNNING;
}

static enum txo_step_status done_status(bool compensate)
{
    return compensate ? TXO_STEP_COMPENSATED : TXO_STEP_COMPLETED;
}

static enum txo_saga_status driving_status(bool compensate)
{
    return compensate ? TXO_SAGA_COMPENSATING : TXO_SAGA_RUNNING;
}

static int try_tx_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct try_tx *a = arg;
    const struct run *r = a->r;
    const struct txo_saga_step_def *sd = &r->def->steps[a->i];
    enum txo_step_status busy = busy_status(a->compensate);

    a->fn_failed = false;
    a->fn_rc = 0;
    int rc = fence(tx, r, driving_status(a->compensate), err);
    if (rc != 0) {
        return rc;
    }
    rc = step_write(tx, r, a->i, STEP_WRITE_TRY, r->steps[a->i], busy, NULL, err);
    if (rc != 0) {
        return rc;
    }
    txo_saga_step_fn fn = a->compensate ? sd->compensate : sd->action;
    if (fn != NULL) {
        struct txo_saga_ctx ctx;
        make_ctx(r, a->i, a->attempt, &ctx);
        txo_error_init(err);
        rc = fn(tx, &ctx, err);
        if (rc != 0) {
            if (rc > 0) {
                rc = txo_error_set(err, TXO_EINVAL, "%s returned %d (not a TXO_E* code)", sd->name,
                                   rc);
            } else if (err != NULL && err->msg[0] == '\0') {
                txo_error_set(err, rc, "%s", txo_strerror(rc));
            }
            a->fn_failed = true;
            a->fn_rc = rc;
            return rc;
        }
    }
    txo_crash_point(a->compensate ? "saga.compensation.before_commit" : "saga.step.before_commit");
    return step_write(tx, r, a->i, STEP_WRITE_MOVE, busy, done_status(a->compensate), NULL, err);
}

struct record_tx {
    struct run *r;
    size_t i;
    bool compensate;
    bool final;        /* the step fails for good */
    const char *error; /* stored in saga_steps.error */
    /* out */
    bool already_done; /* the try had committed after all (COMMIT outcome was unknown) */
    enum txo_step_status step_after;
    enum txo_saga_status saga_after;
};

static int record_tx_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct record_tx *a = arg;
    const struct run *r = a->r;
    enum txo_step_status busy = busy_status(a->compensate);

    a->already_done = false;
    a->step_after = r->steps[a->i];
    a->saga_after = r->status;
    int rc = fence(tx, r, driving_status(a->compensate), err);
    if (rc != 0) {
        return rc;
    }
    enum txo_step_status cur = TXO_STEP_PENDING;
    rc = lock_step(tx, r, a->i, &cur, err);
    if (rc != 0) {
        return rc;
    }
    if (cur == done_status(a->compensate)) {
        a->already_done = true;
        a->step_after = cur;
        return 0;
    }
    rc = step_write(tx, r, a->i, STEP_WRITE_TRY_FAILED, cur, busy, a->error, err);
    if (rc != 0) {
        return rc;
    }
    a->step_after = busy;
    if (!a->final) {
        return 0;
    }
    if (!a->compensate) {
        rc = step_write(tx, r, a->i, STEP_WRITE_MOVE, busy, TXO_STEP_FAILED, NULL, err);
        if (rc == 0) {
            rc = abort_saga(tx, r, a->i, &a->saga_after, err);
        }
        if (rc == 0) {
            a->step_after = TXO_STEP_FAILED;
        }
        return rc;
    }
    rc = step_write(tx, r, a->i, STEP_WRITE_MOVE, busy, TXO_STEP_COMPENSATION_FAILED, NULL, err);
    if (rc == 0) {
        rc = saga_move(tx, r, TXO_SAGA_COMPENSATING, TXO_SAGA_COMPENSATION_FAILED, err);
    }
    if (rc == 0) {
        a->step_after = TXO_STEP_COMPENSATION_FAILED;
        a->saga_after = TXO_SAGA_COMPENSATION_FAILED;
    }
    return rc;
}

/*
 * Runs step i's action (or compensation) until it commits, fails for good, or the engine
 * cannot go on (lease lost, database down: returned as an error). Returns 0 when the step
 * reached COMPLETED/COMPENSATED or its failure was recorded (r->status then changed).
 */
static int drive_step(struct run *r, size_t i, bool compensate, struct txo_error *err)
{
    const char *name = r->def->steps[i].name;
    for (unsigned attempt = 1;; attempt++) {
        struct try_tx t = {.r = r, .i = i, .compensate = compensate, .attempt = attempt};
        struct txo_error terr;
        txo_error_init(&terr);
        int rc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, try_tx_fn, &t, &terr);
        if (rc == 0) {
            r->steps[i] = done_status(compensate);
            txo_crash_point(compensate ? "saga.compensation.after_commit"
                                       : "saga.step.after_commit");
            return 0;
        }
        bool own_failure = t.fn_failed && rc == t.fn_rc;
        bool transient = txo_err_is_transient(rc);
        if (!own_failure && !transient) {
            /* Lease lost, an illegal state, a database error: not the step's outcome. */
            if (err != NULL) {
                *err = terr;
            }
            return rc;
        }
        char error[TXO_ERROR_MSG_MAX + 32];
        snprintf(error, sizeof(error), "%s: %s", txo_err_name(rc), terr.msg);
        unsigned max_tries = r->opts.step_max_attempts;
        struct record_tx rec = {.r = r,
                                .i = i,
                                .compensate = compensate,
                                .final = !transient || attempt >= max_tries,
                                .error = error};
        int rrc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, record_tx_fn, &rec, err);
        if (rrc != 0) {
            return rrc;
        }
        r->steps[i] = rec.step_after;
        r->status = rec.saga_after;
        if (rec.already_done || rec.final) {
            if (rec.final && !compensate) {
                TXO_LOG(TXO_LOG_INFO, "saga",
                        "saga step failed saga_id=%s step=%s attempts=%u "
                        "error=\"%s\" next=%s",
                        r->id, name, attempt, error, txo_saga_status_name(r->status));
            } else if (rec.final) {
                TXO_LOG(TXO_LOG_ERROR, "saga",
                        "saga compensation failed saga_id=%s type=%s "
                        "step=%s attempts=%u error=\"%s\"",
                        r->id, r->def->type, name, attempt, error);
            }
            return 0;
        }
        int64_t delay_ms = txo_backoff_delay_ms(&r->opts.step_backoff, attempt, txo_rand01());
        TXO_LOG(TXO_LOG_WARN, "saga",
                "saga step retry saga_id=%s step=%s phase=%s attempt=%u "
                "delay_ms=%" PRId64 " error=\"%s\"",
                r->id, name, compensate ? "compensate" : "action", attempt, delay_ms, error);
        r->clock->sleep_ms(r->clock->arg, delay_ms);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Driving the saga */

struct finish_tx {
    struct run *r;
    enum txo_saga_status from;
    enum txo_saga_status to;
    size_t failed; /* for abort_saga: the failed step; n_steps otherwise */
    /* out */
    enum txo_saga_status after;
};

static int finish_tx_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct finish_tx *a = arg;
    const struct run *r = a->r;
    a->after = r->status;
    if (a->to == TXO_SAGA_FAILED) {
        /* A RUNNING saga found with a FAILED step: settle it as the failed try would have. */
        return abort_saga(tx, r, a->failed, &a->after, err);
    }
    int rc = saga_move(tx, r, a->from, a->to, err);
    if (rc != 0) {
        return rc;
    }
    txo_saga_finish_fn hook =
        a->to == TXO_SAGA_COMPLETED ? r->def->on_completed : r->def->on_aborted;
    rc = call_hook(tx, r, hook, r->def->n_steps, a->to, err);
    if (rc == 0) {
        a->after = a->to;
    }
    return rc;
}

static int finish(struct run *r, enum txo_saga_status from, enum txo_saga_status to, size_t failed,
                  struct txo_error *err)
{
    struct finish_tx f = {.r = r, .from = from, .to = to, .failed = failed};
    int rc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, finish_tx_fn, &f, err);
    if (rc == 0) {
        r->status = f.after;
    }
    return rc;
}

static int bad_step_state(const struct run *r, size_t i, struct txo_error *err)
{
    TXO_LOG(TXO_LOG_ERROR, "saga", "inconsistent saga saga_id=%s status=%s step=%zu step_status=%s",
            r->id, txo_saga_status_name(r->status), i + 1, txo_step_status_name(r->steps[i]));
    return txo_error_set(err, TXO_ESTATE, "saga %s (%s): step %zu is %s", r->id,
                         txo_saga_status_name(r->status), i + 1, txo_step_status_name(r->steps[i]));
}

/* RUNNING: run the steps not yet completed, in order. Returns with r->status changed. */
static int drive_forward(struct run *r, struct txo_error *err)
{
    size_t n = r->def->n_steps;
    for (size_t i = 0; i < n; i++) {
        switch (r->steps[i]) {
        case TXO_STEP_COMPLETED:
            break;
        case TXO_STEP_PENDING:
        case TXO_STEP_RUNNING: { /* RUNNING: a try was cut short; steps are idempotent */
            int rc = drive_step(r, i, false, err);
            if (rc != 0 || r->steps[i] != TXO_STEP_COMPLETED) {
                return rc;
            }
            break;
        }
        case TXO_STEP_FAILED:
            return finish(r, TXO_SAGA_RUNNING, TXO_SAGA_FAILED, i, err);
        default:
            return bad_step_state(r, i, err);
        }
    }
    return finish(r, TXO_SAGA_RUNNING, TXO_SAGA_COMPLETED, n, err);
}

/* COMPENSATING: undo the completed steps, last first. Returns with r->status changed. */
static int drive_back(struct run *r, struct txo_error *err)
{
    size_t n = r->def->n_steps;
    for (size_t k = n; k-- > 0;) {
        switch (r->steps[k]) {
        case TXO_STEP_COMPLETED:
        case TXO_STEP_COMPENSATING: { /* COMPENSATING: cut short or being retried */
            int rc = drive_step(r, k, true, err);
            if (rc != 0 || r->steps[k] != TXO_STEP_COMPENSATED) {
                return rc;
            }
            break;
        }
        case TXO_STEP_PENDING:     /* never ran */
        case TXO_STEP_FAILED:      /* rolled back: nothing to undo */
        case TXO_STEP_COMPENSATED: /* done earlier */
            break;
        default:
            return bad_step_state(r, k, err);
        }
    }
    return finish(r, TXO_SAGA_COMPENSATING, TXO_SAGA_COMPENSATED, n, err);
}

/* ------------------------------------------------------------------------------------------ */
/* Taking the lease and loading */

struct acquire_tx {
    struct run *r;
    bool retry; /* txo_saga_retry(): COMPENSATION_FAILED -> COMPENSATING */
    /* out */
    bool acquired;
    enum txo_saga_status status;
    enum txo_step_status *steps; /* def->n_steps, caller-allocated */
    struct txo_rows *inst;
};

static int parse_saga_status(const char *id, const char *name, enum txo_saga_status *out,
                             struct txo_error *err)
{
    if (txo_saga_status_parse(name, out) != 0) {
        return txo_error_set(err, TXO_EDB, "saga %s: unknown status '%s'", id,
                             name != NULL ? name : "NULL");
    }
    return 0;
}

/* Checks the stored steps against the definition and parses their statuses. */
static int load_steps(struct txo_tx *tx, const struct run *r, enum txo_step_status *out,
                      struct txo_error *err)
{
    const struct txo_saga_def *def = r->def;
    struct txo_param p[] = {txo_p_str(r->id)};
    struct txo_rows *rows = NULL;
    int rc = txo_tx_query(tx, SAGA_SQL_SELECT_STEPS, p, TXO_ARRAY_LEN(p), &rows, err);
    if (rc != 0) {
        goto out;
    }
    if (txo_rows_count(rows) != def->n_steps) {
        rc = txo_error_set(err, TXO_EINVAL, "saga %s has %zu steps stored, definition %s has %zu",
                           r->id, txo_rows_count(rows), def->type, def->n_steps);
        goto out;
    }
    for (size_t i = 0; i < def->n_steps; i++) {
        const char *name = txo_rows_str(rows, i, STEP_NAME, NULL);
        if (txo_rows_i64(rows, i, STEP_ORDER) != (int64_t)i + 1 || name == NULL ||
            strcmp(name, def->steps[i].name) != 0) {
            rc = txo_error_set(err, TXO_EINVAL,
                               "saga %s: stored step %zu is '%s', definition %s says '%s'", r->id,
                               i + 1, name != NULL ? name : "NULL", def->type, def->steps[i].name);
            goto out;
        }
        const char *st = txo_rows_str(rows, i, STEP_STATUS, NULL);
        if (txo_step_status_parse(st, &out[i]) != 0) {
            rc = txo_error_set(err, TXO_EDB, "saga %s step %zu: unknown status '%s'", r->id, i + 1,
                               st != NULL ? st : "NULL");
            goto out;
        }
    }
out:
    txo_rows_free(rows);
    return rc;
}

static int acquire_tx_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct acquire_tx *a = arg;
    struct run *r = a->r;

    txo_rows_free(a->inst); /* from an earlier attempt */
    a->inst = NULL;
    a->acquired = false;

    struct txo_param p[] = {txo_p_str(r->owner), txo_p_i64(r->opts.lease_s), txo_p_str(r->id),
                            txo_p_str(r->owner)};
    struct txo_exec_result res;
    int rc = txo_tx_exec(tx, a->retry ? SAGA_SQL_ACQUIRE_FOR_RETRY : SAGA_SQL_ACQUIRE, p,
                         TXO_ARRAY_LEN(p), &res, err);
    if (rc != 0) {
        return rc;
    }
    struct txo_param pi[] = {txo_p_str(r->id)};
    rc = txo_tx_query(tx, SAGA_SQL_SELECT_INSTANCE, pi, TXO_ARRAY_LEN(pi), &a->inst, err);
    if (rc != 0) {
        return rc;
    }
    if (txo_rows_count(a->inst) != 1) {
        return txo_error_set(err, TXO_ENOTFOUND, "saga %s not found", r->id);
    }
    rc = parse_saga_status(r->id, txo_rows_str(a->inst, 0, INST_STATUS, NULL), &a->status, err);
    if (rc != 0 || res.affected_rows == 0) {
        return rc; /* not ours: the caller tells why from the status */
    }
    const char *type = txo_rows_str(a->inst, 0, INST_TYPE, NULL);
    if (type == NULL || strcmp(type, r->def->type) != 0) {
        return txo_error_set(err, TXO_EINVAL, "saga %s is of type '%s', not '%s'", r->id,
                             type != NULL ? type : "NULL", r->def->type);
    }
    rc = load_steps(tx, r, a->steps, err);
    if (rc != 0) {
        return rc;
    }
    if (a->retry) {
        rc = saga_move(tx, r, TXO_SAGA_COMPENSATION_FAILED, TXO_SAGA_COMPENSATING, err);
        for (size_t i = 0; rc == 0 && i < r->def->n_steps; i++) {
            if (a->steps[i] == TXO_STEP_COMPENSATION_FAILED) {
                rc = step_write(tx, r, i, STEP_WRITE_MOVE, TXO_STEP_COMPENSATION_FAILED,
                                TXO_STEP_COMPENSATING, NULL, err);
                a->steps[i] = TXO_STEP_COMPENSATING;
            }
        }
        if (rc != 0) {
            return rc;
        }
        a->status = TXO_SAGA_COMPENSATING;
    }
    a->acquired = true;
    return 0;
}

/* Takes the lease and fills r from the database. *terminal: not taken, the saga is over. */
static int acquire(struct run *r, bool retry, bool *terminal, struct txo_error *err)
{
    struct acquire_tx a = {.r = r, .retry = retry, .steps = r->steps};
    *terminal = false;
    int rc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, acquire_tx_fn, &a, err);
    if (rc != 0) {
        goto out;
    }
    r->status = a.status;
    if (!a.acquired) {
        const char *owner = txo_rows_str(a.inst, 0, INST_OWNER, NULL);
        if (retry && a.status != TXO_SAGA_COMPENSATION_FAILED) {
            rc = txo_error_set(err, TXO_ESTATE, "saga %s is %s, not COMPENSATION_FAILED", r->id,
                               txo_saga_status_name(a.status));
        } else if (!retry && txo_saga_is_terminal(a.status)) {
            *terminal = true;
        } else {
            rc = txo_error_set(err, TXO_ELEASELOST,
                               "saga %s is held by %s until its lease "
                               "expires",
                               r->id, owner != NULL ? owner : "NULL");
        }
        goto out;
    }
    size_t len = 0;
    const char *payload = txo_rows_str(a.inst, 0, INST_PAYLOAD, &len);
    r->correlation_id = txo_strdup(txo_rows_str(a.inst, 0, INST_CORRELATION, NULL));
    r->payload = txo_strndup(payload != NULL ? payload : "", payload != NULL ? len : 0);
    r->payload_len = payload != NULL ? len : 0;
    if (r->correlation_id == NULL || r->payload == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "saga %s: out of memory loading it", r->id);
    }
out:
    txo_rows_free(a.inst);
    return rc;
}

static int drive(struct txo_db *db, const struct txo_saga_def *def, const char *saga_id,
                 const struct txo_saga_opts *opts, void *user, bool retry,
                 enum txo_saga_status *final, struct txo_error *err)
{
    struct run r;
    memset(&r, 0, sizeof(r));
    int rc = check_def(def, err);
    if (rc != 0) {
        return rc;
    }
    if (db == NULL || saga_id == NULL || strlen(saga_id) >= TXO_SAGA_ID_LEN) {
        return txo_error_set(err, TXO_EINVAL, "saga run: missing db or bad saga id");
    }
    if (opts != NULL) {
        r.opts = *opts;
    } else {
        txo_saga_opts_init(&r.opts);
    }
    if (r.opts.lease_s == 0) {
        return txo_error_set(err, TXO_EINVAL, "saga %s: lease_s must be > 0", saga_id);
    }
    if (r.opts.step_max_attempts == 0) {
        r.opts.step_max_attempts = 1;
    }
    const char *owner = r.opts.owner != NULL ? r.opts.owner : default_owner();
    if (owner[0] == '\0' || strlen(owner) > OWNER_MAX) {
        return txo_error_set(err, TXO_EINVAL, "saga owner must be 1..%d bytes", OWNER_MAX);
    }
    snprintf(r.owner, sizeof(r.owner), "%s", owner);
    snprintf(r.id, sizeof(r.id), "%s", saga_id);
    r.db = db;
    r.def = def;
    r.user = user;
    r.clock = r.opts.clock != NULL ? r.opts.clock : txo_clock_system();
    r.steps = txo_calloc(def->n_steps, sizeof(*r.steps));
    if (r.steps == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "saga %s: out of memory", saga_id);
        goto out;
    }

    bool terminal;
    rc = acquire(&r, retry, &terminal, err);
    if (rc != 0 || terminal) {
        goto out;
    }
    if (def->decode != NULL) {
        rc = def->decode(r.payload, r.payload_len, &r.state, err);
        if (rc != 0) {
            txo_error_wrap(err, "saga %s: decoding the payload", r.id);
            rc = rc < 0 ? rc : TXO_EINVAL;
            goto out;
        }
        r.has_state = true;
    }
    while (!txo_saga_is_terminal(r.status)) {
        enum txo_saga_status before = r.status;
        if (r.status == TXO_SAGA_RUNNING) {
            rc = drive_forward(&r, err);
        } else if (r.status == TXO_SAGA_COMPENSATING) {
            rc = drive_back(&r, err);
        } else {
            TXO_BUG("saga %s: non-terminal status %d", r.id, (int)r.status);
        }
        if (rc != 0) {
            goto out;
        }
        TXO_ASSERT(r.status != before);
    }
    TXO_LOG(TXO_LOG_INFO, "saga", "saga finished saga_id=%s type=%s status=%s", r.id, def->type,
            txo_saga_status_name(r.status));
out:
    if (rc == 0 && final != NULL) {
        *final = r.status;
    }
    if (r.has_state && def->free_state != NULL) {
        def->free_state(r.state);
    }
    txo_free(r.steps);
    txo_free(r.correlation_id);
    txo_free(r.payload);
    return rc;
}

int txo_saga_run(struct txo_db *db, const struct txo_saga_def *def, const char *saga_id,
                 const struct txo_saga_opts *opts, void *user, enum txo_saga_status *final,
                 struct txo_error *err)
{
    return drive(db, def, saga_id, opts, user, false, final, err);
}

int txo_saga_retry(struct txo_db *db, const struct txo_saga_def *def, const char *saga_id,
                   const struct txo_saga_opts *opts, void *user, enum txo_saga_status *final,
                   struct txo_error *err)
{
    return drive(db, def, saga_id, opts, user, true, final, err);
}

/* ------------------------------------------------------------------------------------------ */
/* Creating */

int txo_saga_create(struct txo_tx *tx, const struct txo_saga_def *def, const char *correlation_id,
                    const char *payload_json, char saga_id[TXO_SAGA_ID_LEN], bool *created,
                    struct txo_error *err)
{
    int rc = check_def(def, err);
    if (rc != 0) {
        return rc;
    }
    if (correlation_id == NULL || correlation_id[0] == '\0' ||
        strlen(correlation_id) > CORRELATION_MAX) {
        return txo_error_set(err, TXO_EINVAL, "saga %s: correlation id must be 1..%d bytes",
                             def->type, CORRELATION_MAX);
    }
    if (payload_json == NULL) {
        return txo_error_set(err, TXO_EINVAL, "saga %s %s: payload is required", def->type,
                             correlation_id);
    }
    uuid_t uuid;
    char id[TXO_SAGA_ID_LEN];
    uuid_generate_random(uuid);
    uuid_unparse_lower(uuid, id);

    struct txo_param pi[] = {txo_p_str(id), txo_p_str(def->type), txo_p_str(correlation_id),
                             txo_p_str(payload_json)};
    struct txo_exec_result res;
    rc = txo_tx_exec(tx, SAGA_SQL_INSERT_INSTANCE, pi, TXO_ARRAY_LEN(pi), &res, err);
    if (rc != 0) {
        txo_error_wrap(err, "creating saga %s %s", def->type, correlation_id);
        return rc;
    }
    if (res.affected_rows == 1) {
        for (size_t i = 0; i < def->n_steps; i++) {
            struct txo_param ps[] = {txo_p_str(id), txo_p_i64((int64_t)i + 1),
                                     txo_p_str(def->steps[i].name)};
            rc = txo_tx_exec(tx, SAGA_SQL_INSERT_STEP, ps, TXO_ARRAY_LEN(ps), NULL, err);
            if (rc != 0) {
                txo_error_wrap(err, "creating step %s of saga %s", def->steps[i].name, id);
                return rc;
            }
        }
        memcpy(saga_id, id, TXO_SAGA_ID_LEN);
        if (created != NULL) {
            *created = true;
        }
        return 0;
    }
    struct txo_param pf[] = {txo_p_str(def->type), txo_p_str(correlation_id)};
    struct txo_rows *rows = NULL;
    rc = txo_tx_query(tx, SAGA_SQL_FIND_ID, pf, TXO_ARRAY_LEN(pf), &rows, err);
    if (rc != 0) {
        return rc;
    }
    const char *found = txo_rows_count(rows) == 1 ? txo_rows_str(rows, 0, 0, NULL) : NULL;
    if (found == NULL || strlen(found) >= TXO_SAGA_ID_LEN) {
        rc = txo_error_set(err, TXO_EDB, "saga %s %s: exists but cannot be read back", def->type,
                           correlation_id);
    } else {
        snprintf(saga_id, TXO_SAGA_ID_LEN, "%s", found);
        if (created != NULL) {
            *created = false;
        }
    }
    txo_rows_free(rows);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Inspection */

struct load_tx {
    const char *id;
    struct txo_rows *inst;
    struct txo_rows *steps;
};

static int load_tx_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct load_tx *a = arg;
    txo_rows_free(a->inst);
    txo_rows_free(a->steps);
    a->inst = NULL;
    a->steps = NULL;
    struct txo_param p[] = {txo_p_str(a->id)};
    int rc = txo_tx_query(tx, SAGA_SQL_SELECT_INSTANCE, p, TXO_ARRAY_LEN(p), &a->inst, err);
    if (rc == 0) {
        rc = txo_tx_query(tx, SAGA_SQL_SELECT_STEPS, p, TXO_ARRAY_LEN(p), &a->steps, err);
    }
    return rc;
}

int txo_saga_load(struct txo_db *db, const char *saga_id, struct txo_saga_info *out,
                  struct txo_error *err)
{
    if (db == NULL || saga_id == NULL || out == NULL) {
        return txo_error_set(err, TXO_EINVAL, "saga load: missing argument");
    }
    struct txo_saga_info info;
    memset(&info, 0, sizeof(info));
    struct load_tx a = {.id = saga_id};
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, load_tx_fn, &a, err);
    if (rc != 0) {
        goto out;
    }
    if (txo_rows_count(a.inst) != 1) {
        rc = txo_error_set(err, TXO_ENOTFOUND, "saga %s not found", saga_id);
        goto out;
    }
    snprintf(info.id, sizeof(info.id), "%s", txo_rows_str(a.inst, 0, INST_ID, NULL));
    rc = parse_saga_status(saga_id, txo_rows_str(a.inst, 0, INST_STATUS, NULL), &info.status, err);
    if (rc != 0) {
        goto out;
    }
    info.type = txo_strdup(txo_rows_str(a.inst, 0, INST_TYPE, NULL));
    info.correlation_id = txo_strdup(txo_rows_str(a.inst, 0, INST_CORRELATION, NULL));
    info.payload = txo_strdup(txo_rows_str(a.inst, 0, INST_PAYLOAD, NULL));
    bool oom = info.type == NULL || info.correlation_id == NULL || info.payload == NULL;
    if (!txo_rows_is_null(a.inst, 0, INST_OWNER)) {
        info.owner = txo_strdup(txo_rows_str(a.inst, 0, INST_OWNER, NULL));
        oom = oom || info.owner == NULL;
    }
    size_t n = txo_rows_count(a.steps);
    if (n > 0) {
        info.steps = txo_calloc(n, sizeof(*info.steps));
        oom = oom || info.steps == NULL;
    }
    for (size_t i = 0; !oom && i < n; i++) {
        struct txo_saga_step_info *s = &info.steps[i];
        info.n_steps = i + 1;
        s->step_order = (unsigned)txo_rows_i64(a.steps, i, STEP_ORDER);
        s->attempts = (unsigned)txo_rows_i64(a.steps, i, STEP_ATTEMPTS);
        s->name = txo_strdup(txo_rows_str(a.steps, i, STEP_NAME, NULL));
        oom = s->name == NULL;
        if (!txo_rows_is_null(a.steps, i, STEP_ERROR)) {
            s->error = txo_strdup(txo_rows_str(a.steps, i, STEP_ERROR, NULL));
            oom = oom || s->error == NULL;
        }
        const char *st = txo_rows_str(a.steps, i, STEP_STATUS, NULL);
        if (txo_step_status_parse(st, &s->status) != 0) {
            rc = txo_error_set(err, TXO_EDB, "saga %s step %u: unknown status '%s'", saga_id,
                               s->step_order, st != NULL ? st : "NULL");
            goto out;
        }
    }
    if (oom) {
        rc = txo_error_set(err, TXO_ENOMEM, "saga %s: out of memory loading it", saga_id);
    }
out:
    txo_rows_free(a.inst);
    txo_rows_free(a.steps);
    if (rc == 0) {
        *out = info;
    } else {
        txo_saga_info_release(&info);
    }
    return rc;
}

void txo_saga_info_release(struct txo_saga_info *info)
{
    if (info == NULL) {
        return;
    }
    for (size_t i = 0; i < info->n_steps; i++) {
        txo_free(info->steps[i].name);
        txo_free(info->steps[i].error);
    }
    txo_free(info->steps);
    txo_free(info->type);
    txo_free(info->correlation_id);
    txo_free(info->payload);
    txo_free(info->owner);
    memset(info, 0, sizeof(*info));
}

int txo_saga_find(struct txo_db *db, const char *type, const char *correlation_id,
                  char saga_id[TXO_SAGA_ID_LEN], struct txo_error *err)
{
    if (db == NULL || type == NULL || correlation_id == NULL) {
        return txo_error_set(err, TXO_EINVAL, "saga find: missing argument");
    }
    struct txo_param p[] = {txo_p_str(type), txo_p_str(correlation_id)};
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, SAGA_SQL_FIND_ID, p, TXO_ARRAY_LEN(p), &rows, err);
    if (rc != 0) {
        return rc;
    }
    const char *id = txo_rows_count(rows) == 1 ? txo_rows_str(rows, 0, 0, NULL) : NULL;
    if (id == NULL || strlen(id) >= TXO_SAGA_ID_LEN) {
        rc = txo_error_set(err, TXO_ENOTFOUND, "no saga %s with correlation id %s", type,
                           correlation_id);
    } else {
        snprintf(saga_id, TXO_SAGA_ID_LEN, "%s", id);
    }
    txo_rows_free(rows);
    return rc;
}

int txo_saga_count_by_status(struct txo_db *db, uint64_t counts[6], struct txo_error *err)
{
    if (db == NULL || counts == NULL) {
        return txo_error_set(err, TXO_EINVAL, "saga count: missing argument");
    }
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, SAGA_SQL_COUNT_BY_STATUS, NULL, 0, &rows, err);
    if (rc != 0) {
        return rc;
    }
    uint64_t c[6] = {0};
    for (size_t i = 0; i < txo_rows_count(rows); i++) {
        enum txo_saga_status s;
        rc = parse_saga_status("-", txo_rows_str(rows, i, 0, NULL), &s, err);
        if (rc != 0) {
            goto out;
        }
        int64_t v = txo_rows_i64(rows, i, 1);
        c[s] = v > 0 ? (uint64_t)v : 0;
    }
    memcpy(counts, c, sizeof(c));
out:
    txo_rows_free(rows);
    return rc;
}

int txo_saga_list_due(struct txo_db *db, enum txo_saga_status status, unsigned min_age_s,
                      size_t max, char (*ids)[TXO_SAGA_ID_LEN], size_t *n, struct txo_error *err)
{
    bool pollable = status == TXO_SAGA_RUNNING || status == TXO_SAGA_COMPENSATING ||
                    status == TXO_SAGA_COMPENSATION_FAILED;
    if (db == NULL || n == NULL || (ids == NULL && max > 0) || !pollable || max > INT32_MAX) {
        return txo_error_set(err, TXO_EINVAL, "saga list due: bad argument (status %s)",
                             txo_saga_status_name(status));
    }
    if (max == 0) {
        *n = 0;
        return 0;
    }
    struct txo_param p[] = {txo_p_str(txo_saga_status_name(status)), txo_p_i64(min_age_s),
                            txo_p_i64((int64_t)max)};
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, SAGA_SQL_LIST_DUE, p, TXO_ARRAY_LEN(p), &rows, err);
    if (rc != 0) {
        return rc;
    }
    size_t k = 0;
    for (size_t i = 0; i < txo_rows_count(rows) && k < max; i++) {
        const char *id = txo_rows_str(rows, i, 0, NULL);
        if (id != NULL && strlen(id) < TXO_SAGA_ID_LEN) {
            snprintf(ids[k++], TXO_SAGA_ID_LEN, "%s", id);
        }
    }
    *n = k;
    txo_rows_free(rows);
    return 0;
}
