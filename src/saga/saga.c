/*
 * The saga engine (include/txo/saga.h; design note docs/saga.md).
 *
 * A saga is driven from what is persisted, never from memory. txo_saga_run() is a plain loop:
 *
 *   acquire        one transaction takes the owner lease and loads the instance and its steps;
 *   forward        while RUNNING: run the next step that is not COMPLETED (run_step);
 *   backward       while COMPENSATING: undo, last first, every step that needs it (completed,
 *                  or failed after its remote part may have taken effect);
 *   finish         the terminal status, the definition's hook and the release of the lease in
 *                  one transaction (the last forward step does this in its own transaction).
 *
 * One try of a step (run_step):
 *   local step     one transaction: the action, then one statement that fences the instance
 *                  (owner, status), renews the lease and moves the step to COMPLETED: the
 *                  step's status commits with the action's writes or not at all;
 *   remote step    (a) begin_call: a short transaction moves the step to RUNNING with its
 *                  attempt, idempotency key and remote state; (b) the call, with no
 *                  transaction open and no lock held; (c) the local transaction above, which
 *                  also records the remote state DONE. txo_db_transact() may re-run (c) on a
 *                  deadlock; it never re-runs (b). When (b) succeeded but (c) failed
 *                  transiently, the next try skips the call (remote state DONE);
 *   failed try     settle_failed_try: a new transaction records it (attempts, error text and
 *                  code, remote state) and, when the error is permanent or the tries are used
 *                  up, fails the step and aborts the saga (abort_saga: COMPENSATING when a step
 *                  needs undoing, else FAILED), or for a compensation ends COMPENSATION_FAILED
 *                  with the next automatic retry scheduled.
 *
 * Invariants:
 *   - every write is fenced: the instance by (owner, expected status), a step by (saga_id,
 *     step_order, expected status), and each status change is first checked against the one
 *     transition table of saga_state.c;
 *   - struct run mirrors the persisted statuses as of the last commit, and is updated only
 *     after a transaction committed (txo_db_transact may run a body several times, so bodies
 *     write their results into their own argument struct, reset at their start);
 *   - a failed try is settled from the step's persisted status (read under lock), so a COMMIT
 *     whose outcome was unknown is never counted twice nor lost;
 *   - a remote state that may have taken effect (UNKNOWN, DONE) is never written back to NONE,
 *     and CALLING is held only while the step is RUNNING: a call found CALLING by a later try
 *     was cut short, so whatever that try records (a refusal, the local part without a call,
 *     a compensation) says UNKNOWN. Every write of a remote state is checked against the
 *     table of saga_state.c (txo__remote_check_move) first.
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
#include "txo/owner.h"
#include "saga/saga_sql.h"

#define OWNER_MAX         128 /* saga_instances.owner VARCHAR(128) */
#define CORRELATION_MAX   255 /* saga_instances.correlation_id */
#define STEP_NAME_MAX     128 /* saga_steps.step_name */
#define KEY_MAX           (TXO_SAGA_ID_LEN + 32)
#define DEFAULT_LEASE_S   30
#define DEFAULT_MAX_TRIES 5

/* Columns of SAGA_SQL_LOAD. */
enum load_col {
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
    LOAD_ID, /* SAGA_SQL_LOAD_MANY only */
};

/* What the engine knows of one step, as of the last commit. */
struct step_row {
    enum txo_step_status status;
    enum txo_remote_state remote;
    int error_code;
    char *error;          /* owned; NULL when none */
    unsigned batch_tries; /* tries of the action a batch made (and recorded) in this run */
};

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
    unsigned compensation_tries;
    struct step_row *steps; /* def->n_steps of them */
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
        char n[16];
        snprintf(n, sizeof(n), "%u", atomic_fetch_add(&owner_seq, 1) + 1);
        if (txo_owner_name(thread_owner, sizeof(thread_owner), n) != 0)
            snprintf(thread_owner, sizeof(thread_owner), "saga:%ld:%s", (long)pid, n);
        thread_owner_pid = pid;
    }
    return thread_owner;
}

void txo_saga_opts_init(struct txo_saga_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->owner = NULL; /* NULL: default_owner() of the calling thread, computed per run */
    opts->lease_s = DEFAULT_LEASE_S;
    opts->step_max_attempts = DEFAULT_MAX_TRIES;
    opts->step_backoff.base_ms = 50;
    opts->step_backoff.max_ms = 2000;
    opts->step_backoff.jitter = 0.5;
    opts->compensation_max_tries = 10;
    opts->compensation_backoff.base_ms = 5000;
    opts->compensation_backoff.max_ms = 300000;
    opts->compensation_backoff.jitter = 0.5;
    opts->clock = NULL;
}

static int check_def(const struct txo_saga_def *def, struct txo_error *err)
{
    if (def == NULL || def->type == NULL || def->type[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "saga definition without a type");
    if (strlen(def->type) > TXO_SAGA_TYPE_MAX)
        return txo_error_set(err, TXO_EINVAL, "saga type '%.40s...' longer than %d bytes",
                             def->type, TXO_SAGA_TYPE_MAX);
    if (def->steps == NULL || def->n_steps == 0)
        return txo_error_set(err, TXO_EINVAL, "saga %s: definition has no steps", def->type);
    for (size_t i = 0; i < def->n_steps; i++) {
        const struct txo_saga_step_def *s = &def->steps[i];
        if (s->name == NULL || s->name[0] == '\0' || strlen(s->name) > STEP_NAME_MAX)
            return txo_error_set(err, TXO_EINVAL, "saga %s: step %zu needs a name of 1..%d bytes",
                                 def->type, i + 1, STEP_NAME_MAX);
        if (s->action == NULL)
            return txo_error_set(err, TXO_EINVAL, "saga %s: step %s has no action", def->type,
                                 s->name);
    }
    return 0;
}

static int parse_saga_status(const char *id, const char *name, enum txo_saga_status *out,
                             struct txo_error *err)
{
    if (txo_saga_status_parse(name, out) != 0)
        return txo_error_set(err, TXO_EDB, "saga %s: unknown status '%s'", id,
                             name != NULL ? name : "NULL");
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* What a step needs */

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

/* A remote part that may have taken effect: the step must be undone if the saga aborts. */
static bool remote_maybe(enum txo_remote_state s)
{
    return s != TXO_REMOTE_NONE;
}

/* True when the step must be undone when the saga is compensated. */
static bool needs_undo(const struct step_row *s)
{
    switch (s->status) {
    case TXO_STEP_COMPLETED:
    case TXO_STEP_COMPENSATING:
        return true;
    case TXO_STEP_FAILED:
        return remote_maybe(s->remote);
    default:
        return false;
    }
}

/* The step whose failure aborted the saga: the last one that ran (those after it never did),
 * or -1 when none ran. */
static int failed_step(const struct run *r)
{
    for (size_t k = r->def->n_steps; k-- > 0;)
        if (r->steps[k].status != TXO_STEP_PENDING)
            return (int)k;
    return -1;
}

/* True when every step but i is COMPLETED: completing i completes the saga. */
static bool only_step_left(const struct run *r, size_t i)
{
    for (size_t k = 0; k < r->def->n_steps; k++)
        if (k != i && r->steps[k].status != TXO_STEP_COMPLETED)
            return false;
    return true;
}

/* The idempotency key of step i's call (or of its undo's) is the saga id + this suffix, the
 * same in every worker and on every try. */
static void key_suffix(size_t i, bool compensate, char *out, size_t cap)
{
    snprintf(out, cap, ":%zu:%s", i + 1, compensate ? "undo" : "do");
}

static void call_key(const struct run *r, size_t i, bool compensate, char out[KEY_MAX])
{
    char suffix[32];
    key_suffix(i, compensate, suffix, sizeof(suffix));
    snprintf(out, KEY_MAX, "%s%s", r->id, suffix);
}

static void make_ctx(const struct run *r, size_t i, unsigned attempt, bool compensate,
                     const char *key, struct txo_saga_ctx *ctx)
{
    memset(ctx, 0, sizeof(*ctx));
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
    ctx->compensating = compensate;
    ctx->idempotency_key = key;
    ctx->failed_step = -1;
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
    if (rc != 0)
        return rc;
    return res.affected_rows == 1 ? 0 : lease_lost(r, expected, err);
}

/* The delay before automatic compensation retry number `tries` (1-based), in microseconds. */
static int64_t retry_delay_us(const struct run *r, unsigned tries)
{
    return txo_backoff_delay_ms(&r->opts.compensation_backoff, tries, txo_rand01()) * 1000;
}

/*
 * The one way the saga's status changes; a terminal status releases the lease with it, and
 * COMPENSATION_FAILED also schedules the automatic retry (or gives up, logged once here).
 */
static int saga_move(struct txo_tx *tx, const struct run *r, enum txo_saga_status from,
                     enum txo_saga_status to, struct txo_error *err)
{
    int rc = txo__saga_check_move(r->id, from, to, err);
    if (rc != 0)
        return rc;
    struct txo_exec_result res;
    if (to == TXO_SAGA_COMPENSATION_FAILED) {
        struct txo_param p[] = {txo_p_i64(r->opts.compensation_max_tries),
                                txo_p_i64(retry_delay_us(r, r->compensation_tries + 1)),
                                txo_p_str(r->id), txo_p_str(r->owner)};
        rc = txo_tx_exec(tx, SAGA_SQL_COMPENSATION_FAILED, p, TXO_ARRAY_LEN(p), &res, err);
    } else if (txo_saga_is_terminal(to)) {
        struct txo_param p[] = {txo_p_str(txo_saga_status_name(to)), txo_p_str(r->id),
                                txo_p_str(r->owner), txo_p_str(txo_saga_status_name(from))};
        rc = txo_tx_exec(tx, SAGA_SQL_MOVE_RELEASE, p, TXO_ARRAY_LEN(p), &res, err);
    } else {
        struct txo_param p[] = {txo_p_str(txo_saga_status_name(to)), txo_p_i64(r->opts.lease_s),
                                txo_p_str(r->id), txo_p_str(r->owner),
                                txo_p_str(txo_saga_status_name(from))};
        rc = txo_tx_exec(tx, SAGA_SQL_MOVE, p, TXO_ARRAY_LEN(p), &res, err);
    }
    if (rc != 0)
        return rc;
    return res.affected_rows == 1 ? 0 : lease_lost(r, from, err);
}

static int step_not_in(const struct run *r, size_t i, enum txo_step_status expected,
                       struct txo_error *err)
{
    TXO_LOG(TXO_LOG_ERROR, "saga", "step not in expected status saga_id=%s step=%zu expected=%s",
            r->id, i + 1, txo_step_status_name(expected));
    return txo_error_set(err, TXO_ESTATE, "saga %s step %zu: not in status %s", r->id, i + 1,
                         txo_step_status_name(expected));
}

/* A step status change under the instance lock this transaction holds. */
static int step_move(struct txo_tx *tx, const struct run *r, size_t i, enum txo_step_status from,
                     enum txo_step_status to, struct txo_error *err)
{
    int rc = txo__step_check_move(r->id, (unsigned)i + 1, from, to, err);
    if (rc != 0)
        return rc;
    struct txo_param p[] = {txo_p_str(txo_step_status_name(to)), txo_p_str(r->id),
                            txo_p_i64((int64_t)i + 1), txo_p_str(txo_step_status_name(from))};
    struct txo_exec_result res;
    rc = txo_tx_exec(tx, SAGA_SQL_STEP_MOVE, p, TXO_ARRAY_LEN(p), &res, err);
    if (rc != 0)
        return rc;
    return res.affected_rows == 1 ? 0 : step_not_in(r, i, from, err);
}

/* The persisted status and remote state of step i, row-locked. */
static int lock_step(struct txo_tx *tx, const struct run *r, size_t i, struct step_row *out,
                     struct txo_error *err)
{
    struct txo_param p[] = {txo_p_str(r->id), txo_p_i64((int64_t)i + 1)};
    struct txo_rows *rows = NULL;
    int rc = txo_tx_query(tx, SAGA_SQL_LOCK_STEP, p, TXO_ARRAY_LEN(p), &rows, err);
    if (rc != 0)
        goto out;
    if (txo_rows_count(rows) != 1) {
        rc = txo_error_set(err, TXO_ENOTFOUND, "saga %s: step %zu not found", r->id, i + 1);
        goto out;
    }
    const char *st = txo_rows_str(rows, 0, 0, NULL);
    const char *remote = txo_rows_str(rows, 0, 1, NULL);
    if (txo_step_status_parse(st, &out->status) != 0 ||
        txo__remote_state_parse(remote, &out->remote) != 0)
        rc = txo_error_set(err, TXO_EDB, "saga %s step %zu: unknown status '%s'/'%s'", r->id, i + 1,
                           st != NULL ? st : "NULL", remote != NULL ? remote : "NULL");
out:
    txo_rows_free(rows);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Hooks and the end of a run */

/* The stored message of step i (*out owned by the caller, NULL when none). */
static int step_error(struct txo_tx *tx, const struct run *r, size_t i, char **out,
                      struct txo_error *err)
{
    struct txo_param p[] = {txo_p_str(r->id), txo_p_i64((int64_t)i + 1)};
    struct txo_rows *rows = NULL;
    *out = NULL;
    int rc = txo_tx_query(tx, SAGA_SQL_STEP_ERROR, p, TXO_ARRAY_LEN(p), &rows, err);
    if (rc == 0 && txo_rows_count(rows) == 1 && !txo_rows_is_null(rows, 0, 0)) {
        *out = txo_strdup(txo_rows_str(rows, 0, 0, NULL));
        if (*out == NULL)
            rc = txo_error_set(err, TXO_ENOMEM, "saga %s: out of memory", r->id);
    }
    txo_rows_free(rows);
    return rc;
}

static int call_hook(struct txo_tx *tx, const struct run *r, txo_saga_finish_fn hook,
                     enum txo_saga_status final_status, struct txo_error *err)
{
    if (hook == NULL)
        return 0;
    struct txo_saga_ctx ctx;
    int failed = final_status == TXO_SAGA_COMPLETED ? -1 : failed_step(r);
    make_ctx(r, failed >= 0 ? (size_t)failed : r->def->n_steps - 1, 1, false, NULL, &ctx);
    char *loaded = NULL;
    if (failed >= 0) {
        const struct step_row *s = &r->steps[failed];
        if (s->error == NULL && s->error_code != 0) {
            int rc = step_error(tx, r, (size_t)failed, &loaded, err);
            if (rc != 0)
                return rc;
        }
        ctx.failed_step = failed;
        ctx.failed_step_name = r->def->steps[failed].name;
        ctx.failed_code = s->error_code;
        ctx.failed_message = s->error != NULL ? s->error : loaded;
        ctx.failed_remote_maybe = remote_maybe(s->remote);
    }
    int rc = hook(tx, &ctx, final_status, err);
    txo_free(loaded);
    if (rc != 0) {
        txo_error_wrap(err, "saga %s: %s hook", r->id,
                       final_status == TXO_SAGA_COMPLETED ? "on_completed" : "on_aborted");
        return rc < 0 ? rc : TXO_EINVAL;
    }
    return 0;
}

/*
 * A step of a RUNNING saga has failed for good (its row says so in this transaction): undo
 * what needs undoing, or, when nothing does, end the saga FAILED with on_aborted.
 * *after receives the new status.
 */
static int abort_saga(struct txo_tx *tx, const struct run *r, enum txo_saga_status *after,
                      struct txo_error *err)
{
    bool any = false;
    for (size_t i = 0; i < r->def->n_steps; i++)
        any = any || needs_undo(&r->steps[i]);
    enum txo_saga_status to = any ? TXO_SAGA_COMPENSATING : TXO_SAGA_FAILED;
    int rc = saga_move(tx, r, TXO_SAGA_RUNNING, to, err);
    if (rc == 0 && to == TXO_SAGA_FAILED)
        rc = call_hook(tx, r, r->def->on_aborted, TXO_SAGA_FAILED, err);
    if (rc == 0)
        *after = to;
    return rc;
}

struct finish_tx {
    struct run *r;
    enum txo_saga_status to; /* FAILED: abort; COMPLETED or COMPENSATED */
    enum txo_saga_status after;
};

static int finish_tx_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct finish_tx *a = arg;
    const struct run *r = a->r;
    a->after = r->status;
    if (a->to == TXO_SAGA_FAILED)
        return abort_saga(tx, r, &a->after, err);
    int rc = saga_move(tx, r, r->status, a->to, err);
    if (rc == 0)
        rc = call_hook(tx, r,
                       a->to == TXO_SAGA_COMPLETED ? r->def->on_completed : r->def->on_aborted,
                       a->to, err);
    if (rc == 0)
        a->after = a->to;
    return rc;
}

/* Moves the saga to `to` with its hook, in one transaction (FAILED: abort_saga decides). */
static int finish(struct run *r, enum txo_saga_status to, struct txo_error *err)
{
    struct finish_tx f = {.r = r, .to = to};
    int rc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, finish_tx_fn, &f, err);
    if (rc == 0)
        r->status = f.after;
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Phase (a): the record of a remote call about to be made */

struct call_tx {
    struct run *r;
    size_t i;
    bool compensate;
    const char *key;
    unsigned attempt;
    enum txo_remote_state remote; /* what the step's row says once this commits */
    bool guard_failed;            /* the step's guard refused the call (its code returned) */
};

/* The remote state a try starts from. A call found in flight (CALLING) was cut short, by a
 * dead worker or one that lost its lease during the call: it may have taken effect. */
static enum txo_remote_state found_remote(enum txo_remote_state now)
{
    return now == TXO_REMOTE_CALLING ? TXO_REMOTE_UNKNOWN : now;
}

/* The remote state phase (a) records for a new call of the action. */
static enum txo_remote_state starting_remote(enum txo_remote_state now)
{
    return now == TXO_REMOTE_NONE ? TXO_REMOTE_CALLING : found_remote(now);
}

static int call_tx_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct call_tx *a = arg;
    const struct run *r = a->r;
    const struct step_row *s = &r->steps[a->i];
    enum txo_step_status busy = busy_status(a->compensate);
    txo_saga_step_fn guard = a->compensate ? NULL : r->def->steps[a->i].guard;
    a->guard_failed = false;
    if (guard != NULL) {
        struct txo_saga_ctx ctx;
        make_ctx(r, a->i, a->attempt, false, a->key, &ctx);
        txo_error_init(err);
        int rc = guard(tx, &ctx, err);
        if (rc != 0) {
            if (rc > 0)
                rc = txo_error_set(err, TXO_EINVAL, "%s: guard returned %d (not a TXO_E* code)",
                                   ctx.step_name, rc);
            a->guard_failed = true;
            return rc;
        }
    }
    if (s->status != busy) {
        int rc = txo__step_check_move(r->id, (unsigned)a->i + 1, s->status, busy, err);
        if (rc != 0)
            return rc;
    }
    /* A compensation's call is not recorded in remote_state (the action's call is): it only
     * settles a CALLING it finds. */
    a->remote = a->compensate ? found_remote(s->remote) : starting_remote(s->remote);
    int mrc = txo__remote_check_move(r->id, (unsigned)a->i + 1, busy, s->remote, a->remote, err);
    if (mrc != 0)
        return mrc;
    struct txo_param p[] = {txo_p_str(txo_step_status_name(busy)),
                            txo_p_str(a->key),
                            txo_p_str(txo_remote_state_name(a->remote)),
                            txo_p_i64(r->opts.lease_s),
                            txo_p_str(r->id),
                            txo_p_str(txo_saga_status_name(driving_status(a->compensate))),
                            txo_p_str(r->owner),
                            txo_p_i64((int64_t)a->i + 1),
                            txo_p_str(txo_step_status_name(s->status))};
    struct txo_exec_result res;
    int rc = txo_tx_exec(tx, SAGA_SQL_STEP_BEGIN_CALL, p, TXO_ARRAY_LEN(p), &res, err);
    if (rc != 0)
        return rc;
    if (res.affected_rows > 0)
        return 0;
    rc = fence(tx, r, driving_status(a->compensate), err);
    return rc != 0 ? rc : step_not_in(r, a->i, s->status, err);
}

/* Phase (a). *guard_failed: the step's guard refused the call (rc is its code, err its
 * reason); nothing was written. */
static int begin_call(struct run *r, size_t i, bool compensate, const char *key, unsigned attempt,
                      bool *guard_failed, struct txo_error *err)
{
    struct call_tx a = {.r = r, .i = i, .compensate = compensate, .key = key, .attempt = attempt};
    int rc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, call_tx_fn, &a, err);
    *guard_failed = rc != 0 && a.guard_failed;
    if (rc == 0) {
        r->steps[i].status = busy_status(compensate);
        r->steps[i].remote = a.remote;
    }
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* The local part of a try, and the record of a failed one */

struct local_tx {
    struct run *r;
    size_t i;
    bool compensate;
    unsigned attempt;
    bool counted;                 /* phase (a) counted this attempt already */
    enum txo_remote_state remote; /* the remote state to record with the step's done status */
    bool finish;                  /* the last step to complete: the saga completes with it */
    /* out */
    bool fn_failed; /* the action/compensation itself returned fn_rc */
    int fn_rc;
    bool hook_failed; /* on_completed failed (not the step's outcome) */
};

/* The step's done status with its remote state, fencing the instance, in one statement. */
static int step_done(struct txo_tx *tx, const struct local_tx *t, struct txo_error *err)
{
    const struct run *r = t->r;
    enum txo_step_status from = r->steps[t->i].status;
    enum txo_step_status busy = busy_status(t->compensate);
    enum txo_step_status done = done_status(t->compensate);
    enum txo_saga_status driving = driving_status(t->compensate);
    unsigned order = (unsigned)t->i + 1;
    int rc = 0;
    if (from != busy)
        rc = txo__step_check_move(r->id, order, from, busy, err);
    if (rc == 0)
        rc = txo__step_check_move(r->id, order, busy, done, err);
    if (rc == 0)
        rc = txo__remote_check_move(r->id, order, done, r->steps[t->i].remote, t->remote, err);
    if (rc == 0 && t->finish)
        rc = txo__saga_check_move(r->id, driving, TXO_SAGA_COMPLETED, err);
    if (rc != 0)
        return rc;
    struct txo_exec_result res;
    int64_t inc = t->counted ? 0 : 1;
    const char *remote = txo_remote_state_name(t->remote);
    if (t->finish) {
        struct txo_param p[] = {txo_p_str(txo_step_status_name(done)),
                                txo_p_i64(inc),
                                txo_p_str(remote),
                                txo_p_str(txo_saga_status_name(TXO_SAGA_COMPLETED)),
                                txo_p_str(r->id),
                                txo_p_str(txo_saga_status_name(driving)),
                                txo_p_str(r->owner),
                                txo_p_i64(order),
                                txo_p_str(txo_step_status_name(from))};
        rc = txo_tx_exec(tx, SAGA_SQL_STEP_DONE_FINISH, p, TXO_ARRAY_LEN(p), &res, err);
    } else {
        struct txo_param p[] = {txo_p_str(txo_step_status_name(done)),
                                txo_p_i64(inc),
                                txo_p_str(remote),
                                txo_p_i64(r->opts.lease_s),
                                txo_p_str(r->id),
                                txo_p_str(txo_saga_status_name(driving)),
                                txo_p_str(r->owner),
                                txo_p_i64(order),
                                txo_p_str(txo_step_status_name(from))};
        rc = txo_tx_exec(tx, SAGA_SQL_STEP_DONE, p, TXO_ARRAY_LEN(p), &res, err);
    }
    if (rc != 0)
        return rc;
    if (res.affected_rows > 0)
        return 0; /* the step row always changes when the join matched */
    /* Nothing matched: the fence tells a lost lease from a step that moved (the transaction
     * rolls back either way). */
    rc = fence(tx, r, driving, err);
    return rc != 0 ? rc : step_not_in(r, t->i, from, err);
}

/* The body of one local try. Resets its outputs first: txo_db_transact may run it again. */
static int local_tx_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct local_tx *t = arg;
    const struct run *r = t->r;
    const struct txo_saga_step_def *sd = &r->def->steps[t->i];

    t->fn_failed = false;
    t->fn_rc = 0;
    t->hook_failed = false;
    txo_saga_step_fn fn = t->compensate ? sd->compensate : sd->action;
    if (fn != NULL) {
        struct txo_saga_ctx ctx;
        make_ctx(r, t->i, t->attempt, t->compensate, NULL, &ctx);
        txo_error_init(err);
        int rc = fn(tx, &ctx, err);
        if (rc != 0) {
            if (rc > 0)
                rc = txo_error_set(err, TXO_EINVAL, "%s returned %d (not a TXO_E* code)", sd->name,
                                   rc);
            else if (err != NULL && err->msg[0] == '\0')
                txo_error_set(err, rc, "%s", txo_strerror(rc));
            t->fn_failed = true;
            t->fn_rc = rc;
            return rc;
        }
    }
    txo_crash_point(t->compensate ? "saga.compensation.before_commit" : "saga.step.before_commit");
    int rc = step_done(tx, t, err);
    if (rc == 0 && t->finish) {
        rc = call_hook(tx, r, r->def->on_completed, TXO_SAGA_COMPLETED, err);
        t->hook_failed = rc != 0;
    }
    return rc;
}

struct record_tx {
    struct run *r;
    size_t i;
    bool compensate;
    bool counted;                 /* phase (a) counted this attempt already */
    bool final;                   /* the step fails for good */
    enum txo_remote_state remote; /* the remote state to record */
    int code;
    const char *error; /* stored in saga_steps.error */
    /* out */
    bool already_done; /* the try had committed after all (COMMIT outcome was unknown) */
    enum txo_step_status step_after;
    enum txo_saga_status saga_after;
};

/* The saga's persisted status (consistent read); false when it cannot be read. */
static bool read_status(struct txo_tx *tx, const struct run *r, enum txo_saga_status *out)
{
    struct txo_param p[] = {txo_p_str(r->id)};
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    bool ok = txo_tx_query(tx, SAGA_SQL_STATUS, p, TXO_ARRAY_LEN(p), &rows, &err) == 0 &&
              txo_rows_count(rows) == 1 &&
              txo_saga_status_parse(txo_rows_str(rows, 0, 0, NULL), out) == 0;
    txo_rows_free(rows);
    return ok;
}

static int record_tx_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct record_tx *a = arg;
    struct run *r = a->r;
    enum txo_step_status busy = busy_status(a->compensate);
    enum txo_saga_status driving = driving_status(a->compensate);

    a->already_done = false;
    a->step_after = r->steps[a->i].status;
    a->saga_after = r->status;
    int rc = fence(tx, r, driving, err);
    if (rc == TXO_ELEASELOST && !a->compensate && only_step_left(r, a->i)) {
        /* A try that completes the saga also releases the lease: if its COMMIT (whose outcome
         * was unknown) went through after all, the saga is COMPLETED and unowned. */
        enum txo_saga_status now = TXO_SAGA_RUNNING;
        if (read_status(tx, r, &now) && now == TXO_SAGA_COMPLETED) {
            a->already_done = true;
            a->step_after = TXO_STEP_COMPLETED;
            a->saga_after = TXO_SAGA_COMPLETED;
            return 0;
        }
    }
    if (rc != 0)
        return rc;
    struct step_row cur = {0};
    rc = lock_step(tx, r, a->i, &cur, err);
    if (rc != 0)
        return rc;
    if (cur.status == done_status(a->compensate)) {
        a->already_done = true;
        a->step_after = cur.status;
        return 0;
    }
    enum txo_step_status to = busy;
    if (a->final)
        to = a->compensate ? TXO_STEP_COMPENSATION_FAILED : TXO_STEP_FAILED;
    if (cur.status != busy)
        rc = txo__step_check_move(r->id, (unsigned)a->i + 1, cur.status, busy, err);
    if (rc == 0 && to != busy)
        rc = txo__step_check_move(r->id, (unsigned)a->i + 1, busy, to, err);
    if (rc == 0)
        rc = txo__remote_check_move(r->id, (unsigned)a->i + 1, to, cur.remote, a->remote, err);
    if (rc != 0)
        return rc;
    struct txo_param p[] = {txo_p_str(txo_step_status_name(to)),
                            txo_p_i64(a->counted ? 0 : 1),
                            txo_p_str(a->error),
                            txo_p_i64(a->code),
                            txo_p_str(txo_remote_state_name(a->remote)),
                            txo_p_str(r->id),
                            txo_p_i64((int64_t)a->i + 1),
                            txo_p_str(txo_step_status_name(cur.status))};
    /* The row is locked (lock_step) and in cur.status, so the statement matches it; it may
     * change nothing (a repeated try with the same error after phase (a) counted it), and the
     * server reports changed rows, so its count is not checked. */
    rc = txo_tx_exec(tx, SAGA_SQL_STEP_TRY_FAILED, p, TXO_ARRAY_LEN(p), NULL, err);
    if (rc != 0)
        return rc;
    a->step_after = to;
    if (!a->final)
        return 0;
    /* abort_saga and the hook read r: show them the step as this transaction wrote it. */
    struct step_row saved = r->steps[a->i];
    r->steps[a->i].status = to;
    r->steps[a->i].remote = a->remote;
    r->steps[a->i].error_code = a->code;
    r->steps[a->i].error = (char *)a->error;
    if (a->compensate) {
        rc = saga_move(tx, r, TXO_SAGA_COMPENSATING, TXO_SAGA_COMPENSATION_FAILED, err);
        if (rc == 0)
            a->saga_after = TXO_SAGA_COMPENSATION_FAILED;
    } else {
        rc = abort_saga(tx, r, &a->saga_after, err);
    }
    r->steps[a->i] = saved;
    return rc;
}

/* Replaces the stored message of step i by a copy of msg (best effort: NULL on OOM). */
static void remember_error(struct step_row *s, int code, const char *msg)
{
    txo_free(s->error);
    s->error = txo_strdup(msg);
    s->error_code = code;
}

/*
 * A try of step i failed with rc (terr describes it). When that is the step's own outcome
 * (its part failed, or a transient error), records it in a new transaction and, when the step
 * may be tried again and `wait` is set, sleeps the backoff (not for a batch's failed call: it
 * was one try, and its single run tries again at once through a call with retries and a
 * backoff of its own); *stop is
 * set when the step is settled instead (done
 * after all, or failed for good: r->status then changed). Anything else (lease lost, illegal
 * state, database error, on_completed failing) is not the step's outcome and is returned as
 * it is.
 */
static int settle_failed_try(struct run *r, size_t i, bool compensate, unsigned attempt,
                             bool counted, enum txo_remote_state remote, bool own_failure, int rc,
                             const struct txo_error *terr, bool wait, bool *stop,
                             struct txo_error *err)
{
    const char *name = r->def->steps[i].name;
    bool transient = txo_err_is_transient(rc);
    *stop = true;
    if (!own_failure) {
        if (err != NULL)
            *err = *terr;
        return rc;
    }
    char error[TXO_ERROR_MSG_MAX + 32];
    snprintf(error, sizeof(error), "%s: %s", txo_err_name(rc), terr->msg);
    struct record_tx rec = {.r = r,
                            .i = i,
                            .compensate = compensate,
                            .counted = counted,
                            .final = !transient || attempt >= r->opts.step_max_attempts,
                            .remote = remote,
                            .code = rc,
                            .error = error};
    int rrc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, record_tx_fn, &rec, err);
    if (rrc != 0)
        return rrc;
    struct step_row *s = &r->steps[i];
    s->status = rec.step_after;
    r->status = rec.saga_after;
    if (rec.already_done)
        return 0;
    s->remote = remote;
    remember_error(s, rc, error);
    if (rec.final) {
        if (rec.saga_after == TXO_SAGA_COMPENSATION_FAILED) {
            r->compensation_tries++;
            bool gave_up = r->compensation_tries >= r->opts.compensation_max_tries;
            if (gave_up)
                TXO_LOG(TXO_LOG_ERROR, "saga",
                        "saga compensation failed, left for an operator (txo saga show / txo "
                        "saga retry) saga_id=%s type=%s step=%s tries=%u error=\"%s\"",
                        r->id, r->def->type, name, r->compensation_tries, error);
            else
                TXO_LOG(TXO_LOG_WARN, "saga",
                        "saga compensation failed, retry scheduled saga_id=%s type=%s step=%s "
                        "attempts=%u tries=%u error=\"%s\"",
                        r->id, r->def->type, name, attempt, r->compensation_tries, error);
        } else {
            TXO_LOG(
                TXO_LOG_INFO, "saga",
                "saga step failed saga_id=%s step=%s attempts=%u remote=%s next=%s error=\"%s\"",
                r->id, name, attempt, txo_remote_state_name(remote),
                txo_saga_status_name(r->status), error);
        }
        return 0;
    }
    *stop = false;
    if (!wait) {
        TXO_LOG(TXO_LOG_INFO, "saga",
                "saga step call failed in a batch, tried again on its own saga_id=%s step=%s "
                "attempt=%u remote=%s error=\"%s\"",
                r->id, name, attempt, txo_remote_state_name(remote), error);
        return 0;
    }
    int64_t delay_ms = txo_backoff_delay_ms(&r->opts.step_backoff, attempt, txo_rand01());
    TXO_LOG(TXO_LOG_WARN, "saga",
            "saga step retry saga_id=%s step=%s phase=%s attempt=%u delay_ms=%" PRId64
            " error=\"%s\"",
            r->id, name, compensate ? "compensate" : "action", attempt, delay_ms, error);
    r->clock->sleep_ms(r->clock->arg, delay_ms);
    return 0;
}

/* What an action's remote part is known to have done after a call that returned rc, from
 * `before` (CALLING while it was made). */
static enum txo_remote_state after_call(enum txo_remote_state before, int rc)
{
    if (rc == 0)
        return TXO_REMOTE_DONE;
    if (rc == TXO_EUNKNOWN || rc == TXO_ETIMEOUT)
        return TXO_REMOTE_UNKNOWN;
    return before == TXO_REMOTE_CALLING ? TXO_REMOTE_NONE : before; /* a definite "not done" */
}

/*
 * Runs step i's action (or compensation) from its first try until it commits, fails for good,
 * or the engine cannot go on (lease lost, database down: returned as an error). Returns 0 when
 * the step reached COMPLETED/COMPENSATED or its failure was recorded (r->status then changed).
 */
static int run_step(struct run *r, size_t i, bool compensate, struct txo_error *err)
{
    const struct txo_saga_step_def *sd = &r->def->steps[i];
    txo_saga_remote_fn remote = compensate ? sd->remote_compensate : sd->remote;
    char key[KEY_MAX];
    call_key(r, i, compensate, key);

    for (unsigned attempt = compensate ? 1 : 1 + r->steps[i].batch_tries;; attempt++) {
        struct txo_error terr;
        txo_error_init(&terr);
        bool counted = false;
        bool stop = false;
        int rc = 0;
        /* The action's remote state as this try leaves it (compensations keep it as it is,
         * but for a CALLING they find, which becomes UNKNOWN whatever the try records). */
        enum txo_remote_state state = found_remote(r->steps[i].remote);
        if (remote != NULL && (compensate || state != TXO_REMOTE_DONE)) {
            bool refused = false;
            rc = begin_call(r, i, compensate, key, attempt, &refused, &terr);
            if (rc != 0 && refused) {
                rc = settle_failed_try(r, i, compensate, attempt, false, state, true, rc, &terr,
                                       true, &stop, err);
                if (rc != 0 || stop)
                    return rc;
                continue;
            }
            if (rc != 0) {
                if (err != NULL)
                    *err = terr;
                return rc;
            }
            counted = true;
            state = r->steps[i].remote;
            struct txo_saga_ctx ctx;
            make_ctx(r, i, attempt, compensate, key, &ctx);
            rc = remote(&ctx, &terr);
            txo_crash_point(compensate ? "saga.compensation.after_call" : "saga.step.after_call");
            if (rc > 0)
                rc = txo_error_set(&terr, TXO_EINVAL, "%s: remote part returned %d", sd->name, rc);
            if (!compensate)
                state = after_call(state, rc);
            if (rc != 0) {
                rc = settle_failed_try(r, i, compensate, attempt, counted, state, true, rc, &terr,
                                       true, &stop, err);
                if (rc != 0 || stop)
                    return rc;
                continue;
            }
        }
        struct local_tx t = {.r = r,
                             .i = i,
                             .compensate = compensate,
                             .attempt = attempt,
                             .counted = counted,
                             .remote = state,
                             .finish = !compensate && only_step_left(r, i)};
        rc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, local_tx_fn, &t, &terr);
        if (rc == 0) {
            r->steps[i].status = done_status(compensate);
            r->steps[i].remote = state;
            if (t.finish)
                r->status = TXO_SAGA_COMPLETED;
            txo_crash_point(compensate ? "saga.compensation.after_commit"
                                       : "saga.step.after_commit");
            txo_crash_point("saga.step_committed");
            return 0;
        }
        bool own = (t.fn_failed && rc == t.fn_rc) || (txo_err_is_transient(rc) && !t.hook_failed);
        rc = settle_failed_try(r, i, compensate, attempt, counted, state, own, rc, &terr, true,
                               &stop, err);
        if (rc != 0 || stop)
            return rc;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Driving the saga */

static int bad_step_state(const struct run *r, size_t i, struct txo_error *err)
{
    TXO_LOG(TXO_LOG_ERROR, "saga", "inconsistent saga saga_id=%s status=%s step=%zu step_status=%s",
            r->id, txo_saga_status_name(r->status), i + 1,
            txo_step_status_name(r->steps[i].status));
    return txo_error_set(err, TXO_ESTATE, "saga %s (%s): step %zu is %s", r->id,
                         txo_saga_status_name(r->status), i + 1,
                         txo_step_status_name(r->steps[i].status));
}

/* RUNNING: run the steps not yet completed, in order. Returns with r->status changed (the
 * last step completes the saga in its own transaction). */
static int drive_forward(struct run *r, struct txo_error *err)
{
    for (size_t i = 0; i < r->def->n_steps && r->status == TXO_SAGA_RUNNING; i++) {
        switch (r->steps[i].status) {
        case TXO_STEP_COMPLETED:
            break;
        case TXO_STEP_PENDING:
        case TXO_STEP_RUNNING: { /* RUNNING: a try was cut short; steps are idempotent */
            int rc = run_step(r, i, false, err);
            if (rc != 0 || r->steps[i].status != TXO_STEP_COMPLETED)
                return rc;
            break;
        }
        case TXO_STEP_FAILED: /* failed, but the worker died before the saga moved */
            return finish(r, TXO_SAGA_FAILED, err);
        default:
            return bad_step_state(r, i, err);
        }
    }
    if (r->status != TXO_SAGA_RUNNING)
        return 0;
    return finish(r, TXO_SAGA_COMPLETED, err); /* every step was completed already */
}

/* COMPENSATING: undo the steps that need it, last first. Returns with r->status changed. */
static int drive_back(struct run *r, struct txo_error *err)
{
    for (size_t k = r->def->n_steps; k-- > 0;) {
        struct step_row *s = &r->steps[k];
        if (s->status == TXO_STEP_COMPENSATED || !needs_undo(s)) {
            if (s->status == TXO_STEP_COMPENSATION_FAILED || s->status == TXO_STEP_RUNNING)
                return bad_step_state(r, k, err);
            continue;
        }
        int rc = run_step(r, k, true, err);
        if (rc != 0 || s->status != TXO_STEP_COMPENSATED)
            return rc;
    }
    return finish(r, TXO_SAGA_COMPENSATED, err);
}

/* ------------------------------------------------------------------------------------------ */
/* Taking the lease and loading */

struct acquire_tx {
    struct run *r;
    bool retry; /* txo_saga_retry(): COMPENSATION_FAILED -> COMPENSATING */
    /* out */
    bool acquired;
    enum txo_saga_status status;
    char *owner; /* the holder, when not acquired */
};

/* The row index of the k-th row of a saga: idx[k], or k when idx is NULL (every row is its). */
static size_t row_at(const size_t *idx, size_t k)
{
    return idx != NULL ? idx[k] : k;
}

/* Checks the loaded steps (SAGA_SQL_LOAD rows, in any order: the rows idx[0..n_rows) of
 * rows, or all of them when idx is NULL) against the definition and parses them, each into
 * its place by step_order. */
static int load_steps(struct run *r, const struct txo_rows *rows, const size_t *idx, size_t n_rows,
                      struct txo_error *err)
{
    const struct txo_saga_def *def = r->def;
    size_t stored = n_rows;
    if (stored == 1 && txo_rows_is_null(rows, row_at(idx, 0), LOAD_STEP_ORDER))
        stored = 0;
    if (stored != def->n_steps)
        return txo_error_set(err, TXO_EINVAL, "saga %s has %zu steps stored, definition %s has %zu",
                             r->id, stored, def->type, def->n_steps);
    bool *seen = txo_calloc(def->n_steps, sizeof(*seen));
    if (seen == NULL)
        return txo_error_set(err, TXO_ENOMEM, "saga %s: out of memory loading it", r->id);
    int rc = 0;
    for (size_t k = 0; k < stored && rc == 0; k++) {
        size_t row = row_at(idx, k);
        int64_t order = txo_rows_i64(rows, row, LOAD_STEP_ORDER);
        const char *name = txo_rows_str(rows, row, LOAD_STEP_NAME, NULL);
        if (order < 1 || order > (int64_t)def->n_steps || seen[order - 1]) {
            rc = txo_error_set(err, TXO_EINVAL,
                               "saga %s: stored step number %" PRId64 " does not fit definition %s",
                               r->id, order, def->type);
            break;
        }
        size_t i = (size_t)order - 1;
        seen[i] = true;
        if (name == NULL || strcmp(name, def->steps[i].name) != 0) {
            rc = txo_error_set(err, TXO_EINVAL,
                               "saga %s: stored step %zu is '%s', definition %s says '%s'", r->id,
                               i + 1, name != NULL ? name : "NULL", def->type, def->steps[i].name);
            break;
        }
        struct step_row *s = &r->steps[i];
        const char *st = txo_rows_str(rows, row, LOAD_STEP_STATUS, NULL);
        const char *remote = txo_rows_str(rows, row, LOAD_STEP_REMOTE, NULL);
        if (txo_step_status_parse(st, &s->status) != 0 ||
            txo__remote_state_parse(remote, &s->remote) != 0) {
            rc = txo_error_set(err, TXO_EDB, "saga %s step %zu: unknown status '%s'/'%s'", r->id,
                               i + 1, st != NULL ? st : "NULL", remote != NULL ? remote : "NULL");
            break;
        }
        s->error_code = (int)txo_rows_i64(rows, row, LOAD_STEP_ERROR_CODE);
        txo_free(s->error);
        s->error = NULL; /* read when a hook needs it (step_error) */
    }
    txo_free(seen);
    return rc;
}

/* Copies the instance's correlation id and payload (from row `row` of rows) into r and
 * decodes the payload (again when a transaction body runs again). */
static int load_instance(struct run *r, const struct txo_rows *rows, size_t row,
                         struct txo_error *err)
{
    txo_free(r->correlation_id);
    txo_free(r->payload);
    if (r->has_state && r->def->free_state != NULL)
        r->def->free_state(r->state);
    r->state = NULL;
    r->has_state = false;
    size_t len = 0;
    const char *payload = txo_rows_str(rows, row, LOAD_PAYLOAD, &len);
    r->correlation_id = txo_strdup(txo_rows_str(rows, row, LOAD_CORRELATION, NULL));
    r->payload = txo_strndup(payload != NULL ? payload : "", payload != NULL ? len : 0);
    r->payload_len = payload != NULL ? len : 0;
    r->compensation_tries = (unsigned)txo_rows_i64(rows, row, LOAD_COMPENSATION_TRIES);
    if (r->correlation_id == NULL || r->payload == NULL)
        return txo_error_set(err, TXO_ENOMEM, "saga %s: out of memory loading it", r->id);
    if (r->def->decode != NULL) {
        int rc = r->def->decode(r->payload, r->payload_len, &r->state, err);
        if (rc != 0) {
            txo_error_wrap(err, "saga %s: decoding the payload", r->id);
            return rc < 0 ? rc : TXO_EINVAL;
        }
        r->has_state = true;
    }
    return 0;
}

static int acquire_tx_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct acquire_tx *a = arg;
    struct run *r = a->r;
    a->acquired = false;
    txo_free(a->owner);
    a->owner = NULL;

    int rc = 0;
    if (a->retry)
        rc = txo__saga_check_move(r->id, TXO_SAGA_COMPENSATION_FAILED, TXO_SAGA_COMPENSATING, err);
    if (rc != 0)
        return rc;
    struct txo_param pa[] = {txo_p_str(r->owner), txo_p_i64(r->opts.lease_s), txo_p_str(r->id),
                             txo_p_str(r->owner)};
    struct txo_exec_result res;
    rc = txo_tx_exec(tx, a->retry ? SAGA_SQL_ACQUIRE_FOR_RETRY : SAGA_SQL_ACQUIRE, pa,
                     TXO_ARRAY_LEN(pa), &res, err);
    if (rc != 0)
        return rc;
    bool taken = res.affected_rows == 1;
    struct txo_param pl[] = {txo_p_str(r->id)};
    struct txo_rows *rows = NULL;
    rc = txo_tx_query(tx, SAGA_SQL_LOAD, pl, TXO_ARRAY_LEN(pl), &rows, err);
    if (rc != 0)
        return rc;
    if (txo_rows_count(rows) == 0) {
        rc = txo_error_set(err, TXO_ENOTFOUND, "saga %s not found", r->id);
        goto out;
    }
    rc = parse_saga_status(r->id, txo_rows_str(rows, 0, LOAD_STATUS, NULL), &a->status, err);
    if (rc != 0 || !taken) {
        if (rc == 0 && !txo_rows_is_null(rows, 0, LOAD_OWNER))
            a->owner = txo_strdup(txo_rows_str(rows, 0, LOAD_OWNER, NULL));
        goto out; /* not ours: the caller tells why from the status */
    }
    const char *type = txo_rows_str(rows, 0, LOAD_TYPE, NULL);
    if (type == NULL || strcmp(type, r->def->type) != 0) {
        rc = txo_error_set(err, TXO_EINVAL, "saga %s is of type '%s', not '%s'", r->id,
                           type != NULL ? type : "NULL", r->def->type);
        goto out;
    }
    rc = load_steps(r, rows, NULL, txo_rows_count(rows), err);
    if (rc == 0)
        rc = load_instance(r, rows, 0, err);
    if (rc != 0)
        goto out;
    r->status = a->status;
    /* A retry moved the saga back to COMPENSATING; its failed compensations go with it. */
    for (size_t i = 0; a->retry && rc == 0 && i < r->def->n_steps; i++)
        if (r->steps[i].status == TXO_STEP_COMPENSATION_FAILED) {
            rc = step_move(tx, r, i, TXO_STEP_COMPENSATION_FAILED, TXO_STEP_COMPENSATING, err);
            r->steps[i].status = TXO_STEP_COMPENSATING;
        }
    a->acquired = rc == 0;
out:
    txo_rows_free(rows);
    return rc;
}

/* Takes the lease and fills r from the database. *terminal: not taken, the saga is over. */
static int acquire(struct run *r, bool retry, bool *terminal, struct txo_error *err)
{
    struct acquire_tx a = {.r = r, .retry = retry};
    *terminal = false;
    int rc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, acquire_tx_fn, &a, err);
    if (rc != 0)
        goto out;
    if (a.acquired) {
        r->status = retry ? TXO_SAGA_COMPENSATING : a.status;
        goto out;
    }
    if (retry && a.status != TXO_SAGA_COMPENSATION_FAILED)
        rc = txo_error_set(err, TXO_ESTATE, "saga %s is %s, not COMPENSATION_FAILED", r->id,
                           txo_saga_status_name(a.status));
    else if (!retry && txo_saga_is_terminal(a.status))
        *terminal = true;
    else
        rc = txo_error_set(err, TXO_ELEASELOST, "saga %s is held by %s until its lease expires",
                           r->id, a.owner != NULL ? a.owner : "NULL");
    r->status = a.status;
out:
    txo_free(a.owner);
    return rc;
}

/* Fills r for a run of saga_id (nothing taken or loaded yet). Release with run_release(). */
static int run_setup(struct run *r, struct txo_db *db, const struct txo_saga_def *def,
                     const char *saga_id, const struct txo_saga_opts *opts, void *user,
                     struct txo_error *err)
{
    memset(r, 0, sizeof(*r));
    if (db == NULL || saga_id == NULL || strlen(saga_id) >= TXO_SAGA_ID_LEN)
        return txo_error_set(err, TXO_EINVAL, "saga run: missing db or bad saga id");
    if (opts != NULL)
        r->opts = *opts;
    else
        txo_saga_opts_init(&r->opts);
    if (r->opts.lease_s == 0)
        return txo_error_set(err, TXO_EINVAL, "saga %s: lease_s must be > 0", saga_id);
    if (r->opts.step_max_attempts == 0)
        r->opts.step_max_attempts = 1;
    if (r->opts.compensation_max_tries == 0)
        r->opts.compensation_max_tries = 1;
    const char *owner = r->opts.owner != NULL ? r->opts.owner : default_owner();
    if (owner[0] == '\0' || strlen(owner) > OWNER_MAX)
        return txo_error_set(err, TXO_EINVAL, "saga owner must be 1..%d bytes", OWNER_MAX);
    snprintf(r->owner, sizeof(r->owner), "%s", owner);
    snprintf(r->id, sizeof(r->id), "%s", saga_id);
    r->db = db;
    r->def = def;
    r->user = user;
    r->clock = r->opts.clock != NULL ? r->opts.clock : txo_clock_system();
    r->steps = txo_calloc(def->n_steps, sizeof(*r->steps));
    if (r->steps == NULL)
        return txo_error_set(err, TXO_ENOMEM, "saga %s: out of memory", saga_id);
    return 0;
}

static void run_release(struct run *r)
{
    if (r->has_state && r->def->free_state != NULL)
        r->def->free_state(r->state);
    for (size_t i = 0; r->steps != NULL && i < r->def->n_steps; i++)
        txo_free(r->steps[i].error);
    txo_free(r->steps);
    txo_free(r->correlation_id);
    txo_free(r->payload);
    memset(r, 0, sizeof(*r));
}

/* Drives a saga whose lease r holds from its loaded state to a terminal state. */
static int drive_run(struct run *r, struct txo_error *err)
{
    while (!txo_saga_is_terminal(r->status)) {
        enum txo_saga_status before = r->status;
        int rc = 0;
        if (r->status == TXO_SAGA_RUNNING)
            rc = drive_forward(r, err);
        else if (r->status == TXO_SAGA_COMPENSATING)
            rc = drive_back(r, err);
        else
            TXO_BUG("saga %s: non-terminal status %d", r->id, (int)r->status);
        if (rc != 0)
            return rc;
        TXO_ASSERT(r->status != before);
    }
    /* One line per saga is per-request noise when it completes; an abort is worth seeing. */
    TXO_LOG(r->status == TXO_SAGA_COMPLETED ? TXO_LOG_DEBUG : TXO_LOG_INFO, "saga",
            "saga finished saga_id=%s type=%s status=%s", r->id, r->def->type,
            txo_saga_status_name(r->status));
    return 0;
}

static int drive(struct txo_db *db, const struct txo_saga_def *def, const char *saga_id,
                 const struct txo_saga_opts *opts, void *user, bool retry,
                 enum txo_saga_status *final, struct txo_error *err)
{
    int rc = check_def(def, err);
    if (rc != 0)
        return rc;
    struct run r;
    rc = run_setup(&r, db, def, saga_id, opts, user, err);
    if (rc != 0)
        goto out;
    bool terminal;
    rc = acquire(&r, retry, &terminal, err);
    if (rc == 0 && !terminal)
        rc = drive_run(&r, err);
    if (rc == 0 && final != NULL)
        *final = r.status;
out:
    run_release(&r);
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
/* Batches: one step of many sagas in one transaction */

/* One saga of txo_saga_run_batch. */
struct batch_saga {
    struct run r;
    bool set_up;   /* run_setup succeeded */
    bool acquired; /* its lease was taken by SAGA_SQL_ACQUIRE_MANY and it is loaded */
    bool single;   /* out of the batches: runs the single way from now on */
    int rc;
    char key[KEY_MAX]; /* the idempotency key of its call, in a batch of a remote step */
};

/* The saga ids of b[k] for k in pick[0..m), as IN-list parameters after `lead` leading ones
 * (already in p), padded to txo_sql_in_list_size(m) by repeating the last id. */
static void batch_ids(const struct batch_saga *b, const size_t *pick, size_t m, struct txo_param *p,
                      size_t lead)
{
    size_t padded = txo_sql_in_list_size(m);
    for (size_t k = 0; k < padded; k++)
        p[lead + k] = txo_p_str(b[pick[k < m ? k : m - 1]].r.id);
}

/* Runs `before` + IN list of the sagas pick[0..m) with the lead params first; *affected gets
 * the affected rows. */
static int batch_exec(struct txo_tx *tx, const char *before, const struct txo_param *lead,
                      size_t n_lead, const struct batch_saga *b, const size_t *pick, size_t m,
                      uint64_t *affected, struct txo_error *err)
{
    size_t padded = txo_sql_in_list_size(m);
    char *sql = txo_sql_in_list(before, padded, "");
    struct txo_param *p = txo_calloc(n_lead + padded, sizeof(*p));
    int rc = 0;
    if (sql == NULL || p == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "saga batch of %zu: out of memory", m);
        goto out;
    }
    memcpy(p, lead, n_lead * sizeof(*p));
    batch_ids(b, pick, m, p, n_lead);
    struct txo_exec_result res;
    rc = txo_tx_exec(tx, sql, p, n_lead + padded, &res, err);
    if (rc == 0)
        *affected = res.affected_rows;
out:
    txo_free(sql);
    txo_free(p);
    return rc;
}

struct batch_acquire_tx {
    struct batch_saga *b;
    size_t *pick; /* every saga that was set up */
    size_t m;
};

/* Takes the leases with one statement and loads the sagas taken with another. */
static int batch_acquire_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct batch_acquire_tx *a = arg;
    struct batch_saga *b = a->b;
    const struct run *r0 = &b[a->pick[0]].r;
    for (size_t k = 0; k < a->m; k++)
        b[a->pick[k]].acquired = false;
    struct txo_param lead[] = {txo_p_str(r0->owner), txo_p_i64(r0->opts.lease_s),
                               txo_p_str(r0->owner)};
    uint64_t taken = 0;
    int rc = batch_exec(tx, SAGA_SQL_ACQUIRE_MANY, lead, TXO_ARRAY_LEN(lead), b, a->pick, a->m,
                        &taken, err);
    if (rc != 0 || taken == 0)
        return rc;

    size_t padded = txo_sql_in_list_size(a->m);
    char *sql = txo_sql_in_list(SAGA_SQL_LOAD_MANY, padded, "");
    struct txo_param *p = txo_calloc(1 + padded, sizeof(*p));
    size_t *idx = NULL;
    struct txo_rows *rows = NULL;
    if (sql == NULL || p == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "saga batch: out of memory");
        goto out;
    }
    p[0] = txo_p_str(r0->owner);
    batch_ids(b, a->pick, a->m, p, 1);
    rc = txo_tx_query(tx, sql, p, 1 + padded, &rows, err);
    if (rc != 0)
        goto out;
    size_t n_rows = txo_rows_count(rows);
    idx = txo_calloc(n_rows > 0 ? n_rows : 1, sizeof(*idx));
    if (idx == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "saga batch: out of memory");
        goto out;
    }
    for (size_t k = 0; k < a->m && rc == 0; k++) {
        struct batch_saga *bs = &b[a->pick[k]];
        size_t got = 0;
        for (size_t row = 0; row < n_rows; row++) {
            const char *id = txo_rows_str(rows, row, LOAD_ID, NULL);
            if (id != NULL && strcmp(id, bs->r.id) == 0)
                idx[got++] = row;
        }
        if (got == 0)
            continue; /* not taken: the single path tells why */
        const char *type = txo_rows_str(rows, idx[0], LOAD_TYPE, NULL);
        if (type == NULL || strcmp(type, bs->r.def->type) != 0) {
            bs->single = true; /* the single path refuses it with the reason */
            continue;
        }
        rc = parse_saga_status(bs->r.id, txo_rows_str(rows, idx[0], LOAD_STATUS, NULL),
                               &bs->r.status, err);
        if (rc == 0)
            rc = load_steps(&bs->r, rows, idx, got, err);
        if (rc == 0)
            rc = load_instance(&bs->r, rows, idx[0], err);
        bs->acquired = rc == 0;
    }
out:
    txo_rows_free(rows);
    txo_free(idx);
    txo_free(sql);
    txo_free(p);
    return rc;
}

/* The step saga b runs next: the first that is not COMPLETED (n_steps when none). */
static size_t next_step(const struct run *r)
{
    size_t i = 0;
    while (i < r->def->n_steps && r->steps[i].status == TXO_STEP_COMPLETED)
        i++;
    return i;
}

/* True when step sd has a batch form: its action's, and its remote part's when it has one. */
static bool step_batches(const struct txo_saga_step_def *sd)
{
    return sd->action_batch != NULL && (sd->remote == NULL || sd->remote_batch != NULL);
}

/* True when saga b can take part in a batch of step i: its first try, never called. */
static bool batchable(const struct batch_saga *b, size_t i)
{
    const struct run *r = &b->r;
    return b->acquired && !b->single && r->status == TXO_SAGA_RUNNING && next_step(r) == i &&
           r->steps[i].status == TXO_STEP_PENDING && r->steps[i].remote == TXO_REMOTE_NONE &&
           step_batches(&r->def->steps[i]);
}

/*
 * The fence of a batch's transaction: the sagas pick[0..m) are RUNNING and ours, and their
 * leases are renewed, or, when `finish`, they complete and their leases are released. A count
 * that does not match is TXO_ELEASELOST (the transaction rolls back).
 */
static int batch_fence(struct txo_tx *tx, const struct batch_saga *b, const size_t *pick, size_t m,
                       bool finish, const char *step, struct txo_error *err)
{
    const struct run *r0 = &b[pick[0]].r;
    const char *running = txo_saga_status_name(TXO_SAGA_RUNNING);
    uint64_t affected = 0;
    int rc;
    if (finish) {
        struct txo_param lead[] = {txo_p_str(txo_saga_status_name(TXO_SAGA_COMPLETED)),
                                   txo_p_str(r0->owner), txo_p_str(running)};
        rc = batch_exec(tx, SAGA_SQL_FINISH_MANY, lead, TXO_ARRAY_LEN(lead), b, pick, m, &affected,
                        err);
    } else {
        struct txo_param lead[] = {txo_p_i64(r0->opts.lease_s), txo_p_str(r0->owner),
                                   txo_p_str(running)};
        rc = batch_exec(tx, SAGA_SQL_RENEW_MANY, lead, TXO_ARRAY_LEN(lead), b, pick, m, &affected,
                        err);
    }
    if (rc == 0 && affected != m)
        rc = txo_error_set(err, TXO_ELEASELOST,
                           "saga batch of %zu at step %s: %llu still owned by %s", m, step,
                           (unsigned long long)affected, r0->owner);
    return rc;
}

struct batch_step_tx {
    struct batch_saga *b;
    const size_t *pick; /* the batch: indexes into b */
    size_t m;
    size_t i;                          /* the step */
    bool finish;                       /* the sagas' last step: they complete with it */
    enum txo_step_status from;         /* PENDING, or RUNNING when the batch's calls recorded it */
    enum txo_remote_state remote_from; /* NONE, or CALLING when the batch's calls recorded it */
    enum txo_remote_state remote;      /* the remote state recorded with COMPLETED */
    /* out, reset per attempt */
    int *outcome;
    size_t *done; /* the sagas whose outcome is 0 */
    size_t n_done;
    bool body_failed; /* action_batch itself failed */
};

static int batch_step_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct batch_step_tx *t = arg;
    struct batch_saga *b = t->b;
    const struct run *r0 = &b[t->pick[0]].r;
    const struct txo_saga_step_def *sd = &r0->def->steps[t->i];
    unsigned order = (unsigned)t->i + 1;
    t->n_done = 0;
    t->body_failed = false;

    struct txo_saga_ctx *ctx = txo_calloc(t->m, sizeof(*ctx));
    const struct txo_saga_ctx **cp = txo_calloc(t->m, sizeof(*cp));
    int rc = 0;
    if (ctx == NULL || cp == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "saga batch of %zu: out of memory", t->m);
        goto out;
    }
    for (size_t k = 0; k < t->m; k++) {
        const struct run *r = &b[t->pick[k]].r;
        make_ctx(r, t->i, 1, false, NULL, &ctx[k]);
        cp[k] = &ctx[k];
        t->outcome[k] = 0;
        /* Checked before anything is written: (PENDING ->) RUNNING -> COMPLETED (and the
         * saga's COMPLETED) are the single path's moves, made here in one go. */
        if (t->from != TXO_STEP_RUNNING)
            rc = txo__step_check_move(r->id, order, t->from, TXO_STEP_RUNNING, err);
        if (rc == 0)
            rc = txo__step_check_move(r->id, order, TXO_STEP_RUNNING, TXO_STEP_COMPLETED, err);
        if (rc == 0)
            rc = txo__remote_check_move(r->id, order, TXO_STEP_COMPLETED, t->remote_from, t->remote,
                                        err);
        if (rc == 0 && t->finish)
            rc = txo__saga_check_move(r->id, TXO_SAGA_RUNNING, TXO_SAGA_COMPLETED, err);
        if (rc != 0)
            goto out;
    }
    txo_error_init(err);
    rc = sd->action_batch(tx, cp, t->m, t->outcome, err);
    if (rc != 0) {
        if (rc > 0)
            rc = txo_error_set(err, TXO_EINVAL, "%s batch returned %d (not a TXO_E* code)",
                               sd->name, rc);
        t->body_failed = true;
        goto out;
    }
    for (size_t k = 0; k < t->m; k++)
        if (t->outcome[k] == 0)
            t->done[t->n_done++] = t->pick[k];
    if (t->n_done == 0)
        goto out;
    txo_crash_point("saga.batch.before_commit");
    rc = batch_fence(tx, b, t->done, t->n_done, t->finish, sd->name, err);
    if (rc != 0)
        goto out;
    uint64_t affected = 0;
    /* The try is counted here unless the batch's call counted it. */
    struct txo_param steps[] = {txo_p_str(txo_step_status_name(TXO_STEP_COMPLETED)),
                                txo_p_i64(t->from == TXO_STEP_PENDING ? 1 : 0),
                                txo_p_str(txo_remote_state_name(t->remote)), txo_p_i64(order),
                                txo_p_str(txo_step_status_name(t->from))};
    rc = batch_exec(tx, SAGA_SQL_STEPS_DONE_MANY, steps, TXO_ARRAY_LEN(steps), b, t->done,
                    t->n_done, &affected, err);
    if (rc == 0 && affected != t->n_done)
        rc = txo_error_set(err, TXO_ESTATE, "saga batch at step %s: %llu of %zu steps %s", sd->name,
                           (unsigned long long)affected, t->n_done, txo_step_status_name(t->from));
    for (size_t k = 0; rc == 0 && t->finish && k < t->n_done; k++)
        rc = call_hook(tx, &b[t->done[k]].r, r0->def->on_completed, TXO_SAGA_COMPLETED, err);
out:
    txo_free(ctx);
    txo_free(cp);
    return rc;
}

/* The local part of a batch of step i over b[pick[0..m)], whose steps are in `from` with
 * remote state `remote_from` (and whose calls, when the step has a remote part, were done):
 * the sagas it completes move on, recorded with `remote`; the others leave the batches (they
 * run the single way). */
static void run_batch_step(struct batch_saga *b, const size_t *pick, size_t m, size_t i,
                           enum txo_step_status from, enum txo_remote_state remote_from,
                           enum txo_remote_state remote)
{
    const struct run *r0 = &b[pick[0]].r;
    struct batch_step_tx t = {.b = b,
                              .pick = pick,
                              .m = m,
                              .i = i,
                              .from = from,
                              .remote_from = remote_from,
                              .remote = remote};
    t.finish = i + 1 == r0->def->n_steps;
    t.outcome = txo_calloc(m, sizeof(*t.outcome));
    t.done = txo_calloc(m, sizeof(*t.done));
    struct txo_error err;
    txo_error_init(&err);
    int rc = t.outcome != NULL && t.done != NULL
                 ? txo_db_transact(r0->db, TXO_ISO_READ_COMMITTED, batch_step_fn, &t, &err)
                 : TXO_ENOMEM;
    if (rc != 0) {
        TXO_LOG(txo_err_is_transient(rc) || t.body_failed ? TXO_LOG_INFO : TXO_LOG_WARN, "saga",
                "saga batch rolled back, its sagas run one by one step=%s sagas=%zu code=%s "
                "error=\"%s\"",
                r0->def->steps[i].name, m, txo_err_name(rc), err.msg);
        for (size_t k = 0; k < m; k++)
            b[pick[k]].single = true;
    } else {
        for (size_t k = 0; k < m; k++)
            b[pick[k]].single = t.outcome[k] != 0;
        for (size_t k = 0; k < t.n_done; k++) {
            struct run *r = &b[t.done[k]].r;
            r->steps[i].status = TXO_STEP_COMPLETED;
            r->steps[i].remote = remote;
            if (t.finish)
                r->status = TXO_SAGA_COMPLETED;
        }
        TXO_LOG(TXO_LOG_DEBUG, "saga", "saga batch committed step=%s sagas=%zu done=%zu",
                r0->def->steps[i].name, m, t.n_done);
        txo_crash_point("saga.batch.after_commit");
    }
    txo_free(t.outcome);
    txo_free(t.done);
}

/* Phase (a) of a batch's remote step: the guards, then every call that may go ahead recorded
 * (RUNNING, CALLING, its key), fenced by the leases. */
struct batch_call_tx {
    struct batch_saga *b;
    const size_t *pick; /* the batch: indexes into b */
    size_t m;
    size_t i;
    const struct txo_saga_ctx *const *ctx; /* per pick, with the calls' keys */
    /* out, reset per attempt */
    int *refused; /* per pick: the guard's code, 0 when the call may be made */
    size_t *in;   /* the sagas whose call is recorded (indexes into b) */
    size_t n_in;
};

static int batch_call_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct batch_call_tx *t = arg;
    struct batch_saga *b = t->b;
    const struct run *r0 = &b[t->pick[0]].r;
    const struct txo_saga_step_def *sd = &r0->def->steps[t->i];
    unsigned order = (unsigned)t->i + 1;
    int rc = 0;
    t->n_in = 0;
    memset(t->refused, 0, t->m * sizeof(*t->refused));
    if (sd->guard_batch != NULL) {
        txo_error_init(err);
        rc = sd->guard_batch(tx, t->ctx, t->m, t->refused, err);
        if (rc > 0)
            rc = txo_error_set(err, TXO_EINVAL, "%s: batch guard returned %d (not a TXO_E* code)",
                               sd->name, rc);
        if (rc != 0)
            return rc;
    } else if (sd->guard != NULL) {
        for (size_t k = 0; k < t->m; k++) {
            struct txo_error gerr;
            txo_error_init(&gerr);
            int g = sd->guard(tx, t->ctx[k], &gerr);
            if (g != 0 && (g > 0 || txo_err_is_transient(g))) {
                /* Not the guard's verdict (a deadlock, the server gone): the whole batch
                 * runs the single way, which meets it again. */
                if (err != NULL)
                    *err = gerr;
                return g > 0 ? txo_error_set(err, TXO_EINVAL, "%s: guard returned %d", sd->name, g)
                             : g;
            }
            t->refused[k] = g;
        }
    }
    for (size_t k = 0; k < t->m; k++) {
        if (t->refused[k] != 0)
            continue;
        const struct run *r = &b[t->pick[k]].r;
        rc = txo__step_check_move(r->id, order, TXO_STEP_PENDING, TXO_STEP_RUNNING, err);
        if (rc == 0)
            rc = txo__remote_check_move(r->id, order, TXO_STEP_RUNNING, r->steps[t->i].remote,
                                        TXO_REMOTE_CALLING, err);
        if (rc != 0)
            return rc;
        t->in[t->n_in++] = t->pick[k];
    }
    if (t->n_in == 0)
        return 0;
    rc = batch_fence(tx, b, t->in, t->n_in, false, sd->name, err);
    if (rc != 0)
        return rc;
    uint64_t affected = 0;
    char suffix[32];
    key_suffix(t->i, false, suffix, sizeof(suffix));
    struct txo_param steps[] = {txo_p_str(txo_step_status_name(TXO_STEP_RUNNING)),
                                txo_p_str(txo_remote_state_name(TXO_REMOTE_CALLING)),
                                txo_p_str(suffix), txo_p_i64(order),
                                txo_p_str(txo_step_status_name(TXO_STEP_PENDING))};
    rc = batch_exec(tx, SAGA_SQL_STEPS_CALL_MANY, steps, TXO_ARRAY_LEN(steps), b, t->in, t->n_in,
                    &affected, err);
    if (rc == 0 && affected != t->n_in)
        rc = txo_error_set(err, TXO_ESTATE, "saga batch calling %s: %llu of %zu steps PENDING",
                           sd->name, (unsigned long long)affected, t->n_in);
    return rc;
}

/*
 * A batch of step i (with a remote part) over b[pick[0..m)]: phase (a) for all of them in one
 * transaction, the calls made together with nothing locked, then the local part of the sagas
 * whose call was done in one transaction (run_batch_step). A saga whose guard refused, or
 * whose call did not return "done", leaves the batches: a failed call is recorded the single
 * path's way (tried again on its own, failed, or maybe done and then compensated).
 */
static void run_remote_batch_step(struct batch_saga *b, const size_t *pick, size_t m, size_t i)
{
    const struct run *r0 = &b[pick[0]].r;
    const struct txo_saga_step_def *sd = &r0->def->steps[i];
    struct txo_saga_ctx *ctx = txo_calloc(m, sizeof(*ctx));
    const struct txo_saga_ctx **cp = txo_calloc(m, sizeof(*cp));
    int *refused = txo_calloc(m, sizeof(*refused));
    size_t *in = txo_calloc(m, sizeof(*in));
    size_t *done = txo_calloc(m, sizeof(*done));
    int *rcs = txo_calloc(m, sizeof(*rcs));
    struct txo_error *errs = txo_calloc(m, sizeof(*errs));
    struct txo_error err;
    txo_error_init(&err);
    size_t n_in = 0, n_done = 0;
    int rc = 0;
    if (ctx == NULL || cp == NULL || refused == NULL || in == NULL || done == NULL || rcs == NULL ||
        errs == NULL) {
        rc = txo_error_set(&err, TXO_ENOMEM, "saga batch of %zu: out of memory", m);
    } else {
        for (size_t k = 0; k < m; k++) {
            struct batch_saga *bs = &b[pick[k]];
            call_key(&bs->r, i, false, bs->key);
            make_ctx(&bs->r, i, 1, false, bs->key, &ctx[k]);
            cp[k] = &ctx[k];
        }
        struct batch_call_tx t = {
            .b = b, .pick = pick, .m = m, .i = i, .ctx = cp, .refused = refused, .in = in};
        rc = txo_db_transact(r0->db, TXO_ISO_READ_COMMITTED, batch_call_fn, &t, &err);
        n_in = t.n_in;
    }
    if (rc != 0) {
        TXO_LOG(txo_err_is_transient(rc) ? TXO_LOG_INFO : TXO_LOG_WARN, "saga",
                "saga batch could not record its calls, its sagas run one by one step=%s "
                "sagas=%zu code=%s error=\"%s\"",
                sd->name, m, txo_err_name(rc), err.msg);
        for (size_t k = 0; k < m; k++)
            b[pick[k]].single = true;
        goto out;
    }
    for (size_t k = 0; k < m; k++)
        if (refused[k] != 0)
            b[pick[k]].single = true; /* its own run meets the guard and records why */
    for (size_t k = 0; k < n_in; k++) {
        struct batch_saga *bs = &b[in[k]];
        bs->r.steps[i].status = TXO_STEP_RUNNING;
        bs->r.steps[i].remote = TXO_REMOTE_CALLING;
        make_ctx(&bs->r, i, 1, false, bs->key, &ctx[k]);
        cp[k] = &ctx[k];
        txo_error_init(&errs[k]);
    }
    if (n_in > 0) {
        sd->remote_batch(cp, n_in, rcs, errs);
        txo_crash_point("saga.batch.after_call");
    }
    for (size_t k = 0; k < n_in; k++) {
        struct batch_saga *bs = &b[in[k]];
        struct run *r = &bs->r;
        int crc = rcs[k];
        if (crc > 0)
            crc = txo_error_set(&errs[k], TXO_EINVAL, "%s: remote part returned %d", sd->name, crc);
        r->steps[i].remote = after_call(TXO_REMOTE_CALLING, crc);
        if (crc == 0) {
            done[n_done++] = in[k];
            continue;
        }
        bs->single = true;
        r->steps[i].batch_tries = 1;
        bool stop = false;
        struct txo_error e;
        txo_error_init(&e);
        if (settle_failed_try(r, i, false, 1, true, r->steps[i].remote, true, crc, &errs[k], false,
                              &stop, &e) != 0)
            TXO_LOG(TXO_LOG_INFO, "saga",
                    "saga batch could not record a failed call, its own run does saga_id=%s "
                    "step=%s error=\"%s\"",
                    r->id, sd->name, e.msg);
    }
    TXO_LOG(TXO_LOG_DEBUG, "saga", "saga batch calls made step=%s sagas=%zu called=%zu done=%zu",
            sd->name, m, n_in, n_done);
    if (n_done > 0)
        run_batch_step(b, done, n_done, i, TXO_STEP_RUNNING, TXO_REMOTE_CALLING, TXO_REMOTE_DONE);
out:
    txo_free(ctx);
    txo_free(cp);
    txo_free(refused);
    txo_free(in);
    txo_free(done);
    txo_free(rcs);
    txo_free(errs);
}

bool txo_saga_def_batches(const struct txo_saga_def *def)
{
    for (size_t i = 0; def != NULL && i < def->n_steps; i++)
        if (step_batches(&def->steps[i]))
            return true;
    return false;
}

int txo_saga_run_batch(struct txo_db *db, const struct txo_saga_def *def, const char *const *ids,
                       size_t n, const struct txo_saga_opts *opts, void *user, int *rcs,
                       enum txo_saga_status *finals, struct txo_error *err)
{
    int rc = check_def(def, err);
    if (rc != 0)
        return rc;
    if (db == NULL || ids == NULL || n == 0)
        return txo_error_set(err, TXO_EINVAL, "saga batch: missing db or no saga ids");
    struct batch_saga *b = txo_calloc(n, sizeof(*b));
    size_t *pick = txo_calloc(n, sizeof(*pick));
    if (b == NULL || pick == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "saga batch of %zu: out of memory", n);
        goto out;
    }
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
        struct txo_error e;
        txo_error_init(&e);
        b[k].rc = run_setup(&b[k].r, db, def, ids[k], opts, user, &e);
        b[k].set_up = b[k].rc == 0;
        if (b[k].set_up)
            pick[m++] = k;
    }
    if (m > 0) {
        struct batch_acquire_tx a = {.b = b, .pick = pick, .m = m};
        struct txo_error e;
        txo_error_init(&e);
        if (txo_db_transact(db, TXO_ISO_READ_COMMITTED, batch_acquire_fn, &a, &e) != 0) {
            TXO_LOG(TXO_LOG_INFO, "saga",
                    "saga batch could not take its leases sagas=%zu "
                    "error=\"%s\"",
                    m, e.msg);
            for (size_t k = 0; k < m; k++)
                b[pick[k]].acquired = false;
        }
    }
    /* Batches, one step at a time, the earliest step first. */
    for (;;) {
        size_t step = def->n_steps;
        for (size_t k = 0; k < n; k++)
            if (b[k].acquired && !b[k].single && b[k].r.status == TXO_SAGA_RUNNING &&
                next_step(&b[k].r) < step && batchable(&b[k], next_step(&b[k].r)))
                step = next_step(&b[k].r);
        if (step == def->n_steps)
            break;
        m = 0;
        for (size_t k = 0; k < n; k++)
            if (batchable(&b[k], step))
                pick[m++] = k;
        if (def->steps[step].remote != NULL)
            run_remote_batch_step(b, pick, m, step);
        else
            run_batch_step(b, pick, m, step, TXO_STEP_PENDING, TXO_REMOTE_NONE, TXO_REMOTE_NONE);
    }
    /* What is left, the single way: sagas out of the batches, steps without a batch form,
     * compensation, and the sagas whose lease the batch did not take (drive() tells why). */
    for (size_t k = 0; k < n; k++) {
        struct batch_saga *bs = &b[k];
        struct txo_error e;
        txo_error_init(&e);
        enum txo_saga_status final = TXO_SAGA_RUNNING;
        if (!bs->set_up) {
            /* rc set by run_setup */
        } else if (bs->acquired) {
            bs->rc = drive_run(&bs->r, &e);
            final = bs->r.status;
        } else {
            bs->rc = drive(db, def, ids[k], opts, user, false, &final, &e);
        }
        if (bs->rc != 0 && txo_err_is_transient(bs->rc) == false && bs->rc != TXO_ELEASELOST)
            TXO_LOG(TXO_LOG_DEBUG, "saga",
                    "saga in a batch stopped saga_id=%s code=%s "
                    "error=\"%s\"",
                    ids[k], txo_err_name(bs->rc), e.msg);
        if (rcs != NULL)
            rcs[k] = bs->rc;
        if (finals != NULL)
            finals[k] = final;
    }
out:
    for (size_t k = 0; b != NULL && k < n; k++)
        run_release(&b[k].r);
    txo_free(b);
    txo_free(pick);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Creating */

/* Inserts the PENDING rows of every step of a new saga with one statement. */
static int insert_steps(struct txo_tx *tx, const struct txo_saga_def *def, const char *id,
                        struct txo_error *err)
{
    char *sql = txo_sql_values_rows(SAGA_SQL_INSERT_STEPS, def->n_steps, SAGA_SQL_INSERT_STEPS_ROW);
    struct txo_param *ps = txo_calloc(3 * def->n_steps, sizeof(*ps));
    int rc = 0;
    if (sql == NULL || ps == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "creating the steps of saga %s: out of memory", id);
        goto out;
    }
    for (size_t i = 0; i < def->n_steps; i++) {
        ps[3 * i] = txo_p_str(id);
        ps[3 * i + 1] = txo_p_i64((int64_t)i + 1);
        ps[3 * i + 2] = txo_p_str(def->steps[i].name);
    }
    struct txo_exec_result res;
    rc = txo_tx_exec(tx, sql, ps, 3 * def->n_steps, &res, err);
    if (rc == 0 && res.affected_rows != def->n_steps)
        rc = txo_error_set(err, TXO_EDB, "saga %s: %llu of %zu steps created", id,
                           (unsigned long long)res.affected_rows, def->n_steps);
out:
    txo_free(sql);
    txo_free(ps);
    return rc;
}

int txo_saga_create(struct txo_tx *tx, const struct txo_saga_def *def, const char *correlation_id,
                    const char *payload_json, char saga_id[TXO_SAGA_ID_LEN], bool *created,
                    struct txo_error *err)
{
    int rc = check_def(def, err);
    if (rc != 0)
        return rc;
    if (correlation_id == NULL || correlation_id[0] == '\0' ||
        strlen(correlation_id) > CORRELATION_MAX)
        return txo_error_set(err, TXO_EINVAL, "saga %s: correlation id must be 1..%d bytes",
                             def->type, CORRELATION_MAX);
    if (payload_json == NULL)
        return txo_error_set(err, TXO_EINVAL, "saga %s %s: payload is required", def->type,
                             correlation_id);
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
        rc = insert_steps(tx, def, id, err);
        if (rc != 0) {
            txo_error_wrap(err, "creating the steps of saga %s", id);
            return rc;
        }
        memcpy(saga_id, id, TXO_SAGA_ID_LEN);
        if (created != NULL)
            *created = true;
        return 0;
    }
    struct txo_param pf[] = {txo_p_str(def->type), txo_p_str(correlation_id)};
    struct txo_rows *rows = NULL;
    rc = txo_tx_query(tx, SAGA_SQL_FIND_ID, pf, TXO_ARRAY_LEN(pf), &rows, err);
    if (rc != 0)
        return rc;
    const char *found = txo_rows_count(rows) == 1 ? txo_rows_str(rows, 0, 0, NULL) : NULL;
    if (found == NULL || strlen(found) >= TXO_SAGA_ID_LEN) {
        rc = txo_error_set(err, TXO_EDB, "saga %s %s: exists but cannot be read back", def->type,
                           correlation_id);
    } else {
        snprintf(saga_id, TXO_SAGA_ID_LEN, "%s", found);
        if (created != NULL)
            *created = false;
    }
    txo_rows_free(rows);
    return rc;
}

/* The steps of the sagas made[0..m) (indexes into sagas), in one statement. */
static int insert_steps_many(struct txo_tx *tx, const struct txo_saga_def *def,
                             const struct txo_saga_new *sagas, const size_t *made, size_t m,
                             struct txo_error *err)
{
    size_t rows = m * def->n_steps;
    char *sql = txo_sql_values_rows(SAGA_SQL_INSERT_STEPS, rows, SAGA_SQL_INSERT_STEPS_ROW);
    struct txo_param *ps = txo_calloc(3 * rows, sizeof(*ps));
    int rc = 0;
    if (sql == NULL || ps == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "creating the steps of %zu sagas: out of memory", m);
        goto out;
    }
    size_t np = 0;
    for (size_t k = 0; k < m; k++)
        for (size_t i = 0; i < def->n_steps; i++) {
            ps[np++] = txo_p_str(sagas[made[k]].saga_id);
            ps[np++] = txo_p_i64((int64_t)i + 1);
            ps[np++] = txo_p_str(def->steps[i].name);
        }
    struct txo_exec_result res;
    rc = txo_tx_exec(tx, sql, ps, np, &res, err);
    if (rc == 0 && res.affected_rows != rows)
        rc = txo_error_set(err, TXO_EDB, "%llu of %zu saga steps created",
                           (unsigned long long)res.affected_rows, rows);
out:
    txo_free(sql);
    txo_free(ps);
    return rc;
}

int txo_saga_create_many(struct txo_tx *tx, const struct txo_saga_def *def,
                         struct txo_saga_new *sagas, size_t n, struct txo_error *err)
{
    int rc = check_def(def, err);
    if (rc != 0 || n == 0)
        return rc;
    for (size_t k = 0; k < n; k++) {
        const char *c = sagas[k].correlation_id;
        if (c == NULL || c[0] == '\0' || strlen(c) > CORRELATION_MAX)
            return txo_error_set(err, TXO_EINVAL, "saga %s: correlation id must be 1..%d bytes",
                                 def->type, CORRELATION_MAX);
        if (sagas[k].payload_json == NULL)
            return txo_error_set(err, TXO_EINVAL, "saga %s %s: payload is required", def->type, c);
        sagas[k].saga_id[0] = '\0';
        sagas[k].created = false;
    }
    size_t padded = txo_sql_in_list_size(n);
    char *find = txo_sql_in_list(SAGA_SQL_FIND_MANY, padded, "");
    char *insert = txo_sql_values_rows(SAGA_SQL_INSERT_INSTANCES, n, SAGA_SQL_INSERT_INSTANCES_ROW);
    struct txo_param *p = txo_calloc(4 * n + padded + 1, sizeof(*p));
    size_t *made = txo_calloc(n, sizeof(*made));
    struct txo_rows *rows = NULL;
    if (find == NULL || insert == NULL || p == NULL || made == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "creating %zu sagas %s: out of memory", n, def->type);
        goto out;
    }
    p[0] = txo_p_str(def->type);
    for (size_t k = 0; k < padded; k++)
        p[1 + k] = txo_p_str(sagas[k < n ? k : n - 1].correlation_id);
    rc = txo_tx_query(tx, find, p, 1 + padded, &rows, err);
    if (rc != 0)
        goto out;
    for (size_t r = 0; r < txo_rows_count(rows); r++) {
        const char *c = txo_rows_str(rows, r, 0, NULL);
        const char *id = txo_rows_str(rows, r, 1, NULL);
        for (size_t k = 0; c != NULL && id != NULL && k < n; k++)
            if (strcmp(sagas[k].correlation_id, c) == 0)
                snprintf(sagas[k].saga_id, TXO_SAGA_ID_LEN, "%s", id);
    }
    size_t m = 0, np = 0;
    for (size_t k = 0; k < n; k++) {
        if (sagas[k].saga_id[0] != '\0')
            continue; /* exists (or given earlier in this list) */
        uuid_t uuid;
        uuid_generate_random(uuid);
        uuid_unparse_lower(uuid, sagas[k].saga_id);
        sagas[k].created = true;
        made[m++] = k;
        p[np++] = txo_p_str(sagas[k].saga_id);
        p[np++] = txo_p_str(def->type);
        p[np++] = txo_p_str(sagas[k].correlation_id);
        p[np++] = txo_p_str(sagas[k].payload_json);
        for (size_t j = k + 1; j < n; j++)
            if (strcmp(sagas[j].correlation_id, sagas[k].correlation_id) == 0)
                memcpy(sagas[j].saga_id, sagas[k].saga_id, TXO_SAGA_ID_LEN);
    }
    if (m == 0)
        goto out;
    txo_free(insert);
    insert = txo_sql_values_rows(SAGA_SQL_INSERT_INSTANCES, m, SAGA_SQL_INSERT_INSTANCES_ROW);
    struct txo_exec_result res;
    rc = insert != NULL ? txo_tx_exec(tx, insert, p, np, &res, err)
                        : txo_error_set(err, TXO_ENOMEM, "creating sagas: out of memory");
    if (rc == 0 && res.affected_rows != m)
        rc = txo_error_set(err, TXO_EDB, "%llu of %zu sagas %s created",
                           (unsigned long long)res.affected_rows, m, def->type);
    if (rc == 0)
        rc = insert_steps_many(tx, def, sagas, made, m, err);
    if (rc != 0)
        txo_error_wrap(err, "creating %zu sagas %s", m, def->type);
out:
    txo_rows_free(rows);
    txo_free(find);
    txo_free(insert);
    txo_free(p);
    txo_free(made);
    return rc;
}
