/*
 * One saga's run, a try at a time: txo_saga_run() and txo_saga_retry() (include/txo/saga.h;
 * design note docs/saga.md). The lease, the loading and the fenced writes a run makes are in
 * saga_store.c; txo_saga_run_many() (saga_batch.c) hands here what it cannot batch.
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
 *   failed try     txo__saga_settle_failed_try: a new transaction records it (attempts, error
 *                  text and code, remote state) and, when the error is permanent, the tries
 *                  are used up or a deadline passed, fails the step and aborts the saga
 *                  (txo__saga_abort: COMPENSATING when a step needs undoing, else FAILED), or
 *                  for a compensation ends COMPENSATION_FAILED with the next automatic retry
 *                  scheduled;
 *   deadlines      before each forward try, past the step's or the saga's deadline no try is
 *                  made and the step is settled as a final failed try (saga_deadline.c has
 *                  the design: the columns, the call's lease, the fence of a hung worker).
 *
 * Invariants:
 *   - every write is fenced: the instance by (owner, expected status), a step by (saga_id,
 *     step_order, expected status), and each status change is first checked against the one
 *     transition table of saga_state.c;
 *   - struct saga_run mirrors the persisted statuses as of the last commit, and is updated only
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
 * Thread-safety: a run uses only the db it is given and its own memory.
 */
#include "core/common.h"

#include "saga/saga_internal.h"
#include "txo/tracer.h"
#include "saga/saga_sql.h"

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

/* True when every step but i is COMPLETED: completing i completes the saga. */
static bool only_step_left(const struct saga_run *r, size_t i)
{
    for (size_t k = 0; k < r->def->n_steps; k++)
        if (k != i && r->steps[k].status != TXO_STEP_COMPLETED)
            return false;
    return true;
}

/*
 * A local part (action, compensation, guard) for one saga: a batch of one. Returns the saga's
 * result, the transaction's own error or the saga's code, with its message in err.
 */
static int step_one(txo_saga_step_fn fn, struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                    const char *what, struct txo_error *err)
{
    const struct txo_saga_ctx *cp[1] = {ctx};
    int one = 0;
    struct txo_error e;
    txo_error_init(&e);
    txo_error_init(err);
    int rc = fn(tx, cp, 1, &one, &e, err);
    if (rc == 0 && one != 0) {
        rc = one;
        if (err != NULL)
            *err = e;
    }
    if (rc > 0)
        return txo_error_set(err, TXO_EINVAL, "%s returned %d (not a TXO_E* code)", what, rc);
    if (rc == TXO_EALONE)
        return txo_error_set(err, TXO_EINVAL, "%s gave no verdict in a batch of one", what);
    if (rc != 0 && err != NULL && err->msg[0] == '\0')
        txo_error_set(err, rc, "%s", txo_strerror(rc));
    return rc;
}

/* A remote part for one saga: a batch of one. Returns its result, with its message in err. */
static int remote_one(txo_saga_remote_fn fn, const struct txo_saga_ctx *ctx, const char *what,
                      struct txo_error *err)
{
    const struct txo_saga_ctx *cp[1] = {ctx};
    int rc = 0;
    txo_error_init(err);
    fn(cp, 1, &rc, err);
    if (rc > 0)
        return txo_error_set(err, TXO_EINVAL, "%s: remote part returned %d", what, rc);
    if (rc != 0 && err != NULL && err->msg[0] == '\0')
        txo_error_set(err, rc, "%s", txo_strerror(rc));
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Phase (a): the record of a remote call about to be made */

struct call_tx {
    struct saga_run *r;
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
    const struct saga_run *r = a->r;
    const struct saga_step_row *s = &r->steps[a->i];
    enum txo_step_status busy = busy_status(a->compensate);
    txo_saga_step_fn guard = a->compensate ? NULL : r->def->steps[a->i].guard;
    a->guard_failed = false;
    if (guard != NULL) {
        struct txo_saga_ctx ctx;
        txo__saga_make_ctx(r, a->i, a->attempt, false, a->key, &ctx);
        int rc = step_one(guard, tx, &ctx, "guard", err);
        if (rc != 0) {
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
    /* The action's call has its deadlines and a lease of its own; a compensation's keeps
     * lease_s and is never cut by a deadline. */
    bool timed = !a->compensate;
    int64_t lease_us =
        timed ? txo__saga_call_lease_us(r, a->i) : (int64_t)r->opts.lease_s * 1000000;
    bool try_timeout = timed && r->def->steps[a->i].try_timeout_ms > 0;
    struct txo_param p[] = {txo_p_str(txo_step_status_name(busy)),
                            txo_p_str(a->key),
                            txo_p_str(txo_remote_state_name(a->remote)),
                            timed ? txo__saga_step_left_param(r, a->i) : txo_p_null(),
                            try_timeout ? txo_p_i64(lease_us) : txo_p_null(),
                            txo_p_i64(lease_us),
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
    rc = txo__saga_fence(tx, r, driving_status(a->compensate), err);
    return rc != 0 ? rc : txo__saga_step_not_in(r, a->i, s->status, err);
}

/* Phase (a). *guard_failed: the step's guard refused the call (rc is its code, err its
 * reason); nothing was written. */
static int begin_call(struct saga_run *r, size_t i, bool compensate, const char *key,
                      unsigned attempt, bool *guard_failed, struct txo_error *err)
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
    struct saga_run *r;
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
    const struct saga_run *r = t->r;
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
    /* The two statements differ in one parameter: the saga's new status when the step is its
     * last, else the lease the next step runs under. */
    struct txo_param p[] = {txo_p_str(txo_step_status_name(done)),
                            txo_p_i64(inc),
                            txo_p_str(remote),
                            t->finish ? txo_p_str(txo_saga_status_name(TXO_SAGA_COMPLETED))
                                      : txo_p_i64(r->opts.lease_s),
                            txo_p_str(r->id),
                            txo_p_str(txo_saga_status_name(driving)),
                            txo_p_str(r->owner),
                            txo_p_i64(order),
                            txo_p_str(txo_step_status_name(from))};
    rc = txo_tx_exec(tx, t->finish ? SAGA_SQL_STEP_DONE_FINISH : SAGA_SQL_STEP_DONE, p,
                     TXO_ARRAY_LEN(p), &res, err);
    if (rc != 0)
        return rc;
    if (res.affected_rows > 0)
        return 0; /* the step row always changes when the join matched */
    /* Nothing matched: the fence tells a lost lease from a step that moved (the transaction
     * rolls back either way). */
    rc = txo__saga_fence(tx, r, driving, err);
    return rc != 0 ? rc : txo__saga_step_not_in(r, t->i, from, err);
}

/* The body of one local try. Resets its outputs first: txo_db_transact may run it again. */
static int local_tx_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct local_tx *t = arg;
    const struct saga_run *r = t->r;
    const struct txo_saga_step_def *sd = &r->def->steps[t->i];

    t->fn_failed = false;
    t->fn_rc = 0;
    t->hook_failed = false;
    txo_saga_step_fn fn = t->compensate ? sd->compensate : sd->action;
    if (fn != NULL) {
        struct txo_saga_ctx ctx;
        txo__saga_make_ctx(r, t->i, t->attempt, t->compensate, NULL, &ctx);
        int rc = step_one(fn, tx, &ctx, sd->name, err);
        if (rc != 0) {
            t->fn_failed = true;
            t->fn_rc = rc;
            return rc;
        }
    }
    txo_crash_point(t->compensate ? "saga.compensation.before_commit" : "saga.step.before_commit");
    int rc = step_done(tx, t, err);
    if (rc == 0 && t->finish) {
        rc = txo__saga_call_hook(tx, r, r->def->on_completed, TXO_SAGA_COMPLETED, err);
        t->hook_failed = rc != 0;
    }
    return rc;
}

struct record_tx {
    struct saga_run *r;
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
static bool read_status(struct txo_tx *tx, const struct saga_run *r, enum txo_saga_status *out)
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
    struct saga_run *r = a->r;
    enum txo_step_status busy = busy_status(a->compensate);
    enum txo_saga_status driving = driving_status(a->compensate);

    a->already_done = false;
    a->step_after = r->steps[a->i].status;
    a->saga_after = r->status;
    int rc = txo__saga_fence(tx, r, driving, err);
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
    struct saga_step_row cur = {0};
    rc = txo__saga_lock_step(tx, r, a->i, &cur, err);
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
                            a->compensate ? txo_p_null() : txo__saga_step_left_param(r, a->i),
                            txo_p_str(r->id),
                            txo_p_i64((int64_t)a->i + 1),
                            txo_p_str(txo_step_status_name(cur.status))};
    /* The row is locked (txo__saga_lock_step) and in cur.status, so the statement matches it;
     * it may change nothing (a repeated try with the same error after phase (a) counted it),
     * and the server reports changed rows, so its count is not checked. */
    rc = txo_tx_exec(tx, SAGA_SQL_STEP_TRY_FAILED, p, TXO_ARRAY_LEN(p), NULL, err);
    if (rc != 0)
        return rc;
    a->step_after = to;
    if (!a->final)
        return 0;
    /* txo__saga_abort and the hook read r: show them the step as this transaction wrote it. */
    struct saga_step_row saved = r->steps[a->i];
    r->steps[a->i].status = to;
    r->steps[a->i].remote = a->remote;
    r->steps[a->i].error_code = a->code;
    r->steps[a->i].error = (char *)a->error;
    if (a->compensate) {
        rc = txo__saga_move(tx, r, TXO_SAGA_COMPENSATING, TXO_SAGA_COMPENSATION_FAILED, err);
        if (rc == 0)
            a->saga_after = TXO_SAGA_COMPENSATION_FAILED;
    } else {
        rc = txo__saga_abort(tx, r, &a->saga_after, err);
    }
    r->steps[a->i] = saved;
    return rc;
}

/* Replaces the stored message of step i by a copy of msg (best effort: NULL on OOM). */
static void remember_error(struct saga_step_row *s, int code, const char *msg)
{
    txo_free(s->error);
    s->error = txo_strdup(msg);
    s->error_code = code;
}

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
    /* Past a deadline the step's tries are over, whatever is left of them (never for a
     * compensation). */
    enum txo_saga_deadline late = compensate ? TXO_DEADLINE_NONE : txo__saga_deadline_passed(r, i);
    char error[TXO_ERROR_MSG_MAX + 64];
    if (late != TXO_DEADLINE_NONE)
        snprintf(error, sizeof(error), "%s: %s (%s deadline passed)", txo_err_name(rc), terr->msg,
                 txo_saga_deadline_name(late));
    else
        snprintf(error, sizeof(error), "%s: %s", txo_err_name(rc), terr->msg);
    struct record_tx rec = {.r = r,
                            .i = i,
                            .compensate = compensate,
                            .counted = counted,
                            .final = !transient || attempt >= r->opts.step_max_attempts ||
                                     late != TXO_DEADLINE_NONE,
                            .remote = remote,
                            .code = rc,
                            .error = error};
    int rrc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, record_tx_fn, &rec, err);
    if (rrc != 0)
        return rrc;
    struct saga_step_row *s = &r->steps[i];
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
                        "saga compensation failed, left for an operator (txo saga show / txo saga "
                        "retry)",
                        TXO_KV_STR("saga_id", r->id), TXO_KV_STR("type", r->def->type),
                        TXO_KV_STR("step", name), TXO_KV_U64("tries", r->compensation_tries),
                        TXO_KV_STR("error", error));
            else
                TXO_LOG(TXO_LOG_WARN, "saga", "saga compensation failed, retry scheduled",
                        TXO_KV_STR("saga_id", r->id), TXO_KV_STR("type", r->def->type),
                        TXO_KV_STR("step", name), TXO_KV_U64("attempts", attempt),
                        TXO_KV_U64("tries", r->compensation_tries), TXO_KV_STR("error", error));
        } else {
            if (late != TXO_DEADLINE_NONE)
                txo__saga_count_deadline(r, late);
            TXO_LOG(TXO_LOG_INFO, "saga", "saga step failed", TXO_KV_STR("saga_id", r->id),
                    TXO_KV_STR("step", name), TXO_KV_U64("attempts", attempt),
                    TXO_KV_STR("remote", txo_remote_state_name(remote)),
                    TXO_KV_STR("next", txo_saga_status_name(r->status)),
                    TXO_KV_STR("error", error));
        }
        return 0;
    }
    *stop = false;
    if (!wait) {
        TXO_LOG(TXO_LOG_INFO, "saga", "saga step call failed in a batch, tried again on its own",
                TXO_KV_STR("saga_id", r->id), TXO_KV_STR("step", name),
                TXO_KV_U64("attempt", attempt), TXO_KV_STR("remote", txo_remote_state_name(remote)),
                TXO_KV_STR("error", error));
        return 0;
    }
    int64_t delay_ms = txo_backoff_delay_ms(&r->opts.step_backoff, attempt, txo_rand01());
    TXO_LOG(TXO_LOG_WARN, "saga", "saga step retry", TXO_KV_STR("saga_id", r->id),
            TXO_KV_STR("step", name), TXO_KV_STR("phase", compensate ? "compensate" : "action"),
            TXO_KV_U64("attempt", attempt), TXO_KV_I64("delay_ms", delay_ms),
            TXO_KV_STR("error", error));
    r->clock->sleep_ms(r->clock->arg, delay_ms);
    return 0;
}

/* What an action's remote part is known to have done after a call that returned rc, from
 * `before` (CALLING while it was made). */
enum txo_remote_state txo__saga_after_call(enum txo_remote_state before, int rc)
{
    if (rc == 0)
        return TXO_REMOTE_DONE;
    if (rc == TXO_EUNKNOWN || rc == TXO_ETIMEOUT)
        return TXO_REMOTE_UNKNOWN;
    return before == TXO_REMOTE_CALLING ? TXO_REMOTE_NONE : before; /* a definite "not done" */
}

static int run_try(struct saga_run *r, size_t i, bool compensate, unsigned attempt, const char *key,
                   bool *again, int *try_rc, char *why, size_t why_cap, struct txo_error *err);

/*
 * Runs step i's action (or compensation) from its first try until it commits, fails for good,
 * or the engine cannot go on (lease lost, database down: returned as an error). Returns 0 when
 * the step reached COMPLETED/COMPENSATED or its failure was recorded (r->status then changed).
 */
static int run_step(struct saga_run *r, size_t i, bool compensate, struct txo_error *err)
{
    char key[SAGA_KEY_MAX];
    txo__saga_call_key(r, i, compensate, key);
    char name[SAGA_STEP_NAME_MAX + 16];
    snprintf(name, sizeof(name), "%s%s", r->def->steps[i].name, compensate ? " undo" : "");

    for (unsigned attempt = compensate ? 1 : 1 + r->steps[i].batch_tries;; attempt++) {
        bool again = false;
        int try_rc = 0;
        char why[TXO_ERROR_MSG_MAX] = "";
        int64_t start_us = txo_realtime_us();
        r->in_try = r->has_trace;
        if (r->has_trace)
            txo_trace_child(&r->trace, &r->try_span);
        const struct txo_trace_ctx *prev = txo_trace_set_current(r->in_try ? &r->try_span : NULL);
        int rc = run_try(r, i, compensate, attempt, key, &again, &try_rc, why, sizeof(why), err);
        txo_trace_set_current(prev);
        if (r->in_try)
            txo__saga_record_span(r, &r->try_span, r->trace.span_id, name, TXO_SPAN_INTERNAL,
                                  start_us, attempt, try_rc, why);
        r->in_try = false;
        if (!again)
            return rc;
    }
}

/* The outcome of a try for its span: rc, and why in why[0..cap). */
static void try_outcome(int rc, const struct txo_error *terr, int *try_rc, char *why, size_t cap)
{
    *try_rc = rc;
    snprintf(why, cap, "%s", terr->msg);
}

/*
 * One try of step i (run_step): the deadline check, the call (recorded before and after,
 * with its own span), then the local part in its transaction. Returns the step's result with
 * *again false, or 0 with *again true when the failed try was settled and another is due.
 * *try_rc and why get this try's own outcome.
 */
static int run_try(struct saga_run *r, size_t i, bool compensate, unsigned attempt, const char *key,
                   bool *again, int *try_rc, char *why, size_t why_cap, struct txo_error *err)
{
    const struct txo_saga_step_def *sd = &r->def->steps[i];
    txo_saga_remote_fn remote = compensate ? sd->remote_compensate : sd->remote;
    struct txo_error terr;
    txo_error_init(&terr);
    bool counted = false;
    bool stop = false;
    int rc = 0;
    *again = false;
    /* The action's remote state as this try leaves it (compensations keep it as it is, but
     * for a CALLING they find, which becomes UNKNOWN whatever the try records). */
    enum txo_remote_state state = found_remote(r->steps[i].remote);
    if (!compensate) {
        /* Past a deadline no try is made: the step fails as it stands (a call in flight
         * counts as maybe done) and the settling aborts the saga. No attempt is counted. */
        enum txo_saga_deadline late = txo__saga_deadline_passed(r, i);
        if (late != TXO_DEADLINE_NONE) {
            txo_error_set(&terr, TXO_ETIMEOUT, "no further try");
            try_outcome(TXO_ETIMEOUT, &terr, try_rc, why, why_cap);
            return txo__saga_settle_failed_try(r, i, false, attempt, true, state, true,
                                               TXO_ETIMEOUT, &terr, true, &stop, err);
        }
        txo__saga_deadline_start(r, i);
    }
    if (remote != NULL && (compensate || state != TXO_REMOTE_DONE)) {
        bool refused = false;
        rc = begin_call(r, i, compensate, key, attempt, &refused, &terr);
        if (rc != 0 && refused) {
            try_outcome(rc, &terr, try_rc, why, why_cap);
            rc = txo__saga_settle_failed_try(r, i, compensate, attempt, false, state, true, rc,
                                             &terr, true, &stop, err);
            *again = rc == 0 && !stop;
            return rc;
        }
        if (rc != 0) {
            try_outcome(rc, &terr, try_rc, why, why_cap);
            if (err != NULL)
                *err = terr;
            return rc;
        }
        counted = true;
        state = r->steps[i].remote;
        int64_t call_start_us = txo_realtime_us();
        r->in_call = r->in_try;
        if (r->in_call)
            txo_trace_child(&r->try_span, &r->call_span);
        struct txo_saga_ctx ctx;
        txo__saga_make_ctx(r, i, attempt, compensate, key, &ctx);
        rc = remote_one(remote, &ctx, sd->name, &terr);
        txo_crash_point(compensate ? "saga.compensation.after_call" : "saga.step.after_call");
        if (r->in_call) {
            char name[SAGA_STEP_NAME_MAX + 16];
            snprintf(name, sizeof(name), "%s %s", sd->name, compensate ? "undo call" : "call");
            txo__saga_record_span(r, &r->call_span, r->try_span.span_id, name, TXO_SPAN_CLIENT,
                                  call_start_us, attempt, rc, terr.msg);
        }
        r->in_call = false;
        if (!compensate)
            state = txo__saga_after_call(state, rc);
        if (rc != 0) {
            try_outcome(rc, &terr, try_rc, why, why_cap);
            rc = txo__saga_settle_failed_try(r, i, compensate, attempt, counted, state, true, rc,
                                             &terr, true, &stop, err);
            *again = rc == 0 && !stop;
            return rc;
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
        txo_crash_point(compensate ? "saga.compensation.after_commit" : "saga.step.after_commit");
        txo_crash_point("saga.step_committed");
        return 0;
    }
    try_outcome(rc, &terr, try_rc, why, why_cap);
    bool own = (t.fn_failed && rc == t.fn_rc) || (txo_err_is_transient(rc) && !t.hook_failed);
    rc = txo__saga_settle_failed_try(r, i, compensate, attempt, counted, state, own, rc, &terr,
                                     true, &stop, err);
    *again = rc == 0 && !stop;
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Driving the saga */

static int bad_step_state(const struct saga_run *r, size_t i, struct txo_error *err)
{
    TXO_LOG(TXO_LOG_ERROR, "saga", "inconsistent saga", TXO_KV_STR("saga_id", r->id),
            TXO_KV_STR("status", txo_saga_status_name(r->status)), TXO_KV_U64("step_order", i + 1),
            TXO_KV_STR("step_status", txo_step_status_name(r->steps[i].status)));
    return txo_error_set(err, TXO_ESTATE, "saga %s (%s): step %zu is %s", r->id,
                         txo_saga_status_name(r->status), i + 1,
                         txo_step_status_name(r->steps[i].status));
}

/* RUNNING: run the steps not yet completed, in order. Returns with r->status changed (the
 * last step completes the saga in its own transaction). */
static int drive_forward(struct saga_run *r, struct txo_error *err)
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
            return txo__saga_finish(r, TXO_SAGA_FAILED, err);
        default:
            return bad_step_state(r, i, err);
        }
    }
    if (r->status != TXO_SAGA_RUNNING)
        return 0;
    return txo__saga_finish(r, TXO_SAGA_COMPLETED, err); /* every step was completed already */
}

/* COMPENSATING: undo the steps that need it, last first. Returns with r->status changed. */
static int drive_back(struct saga_run *r, struct txo_error *err)
{
    for (size_t k = r->def->n_steps; k-- > 0;) {
        struct saga_step_row *s = &r->steps[k];
        if (s->status == TXO_STEP_COMPENSATED || !txo__saga_needs_undo(s)) {
            if (s->status == TXO_STEP_COMPENSATION_FAILED || s->status == TXO_STEP_RUNNING)
                return bad_step_state(r, k, err);
            continue;
        }
        int rc = run_step(r, k, true, err);
        if (rc != 0 || s->status != TXO_STEP_COMPENSATED)
            return rc;
    }
    return txo__saga_finish(r, TXO_SAGA_COMPENSATED, err);
}

/* Drives a saga whose lease r holds from its loaded state to a terminal state. */
int txo__saga_drive_run(struct saga_run *r, struct txo_error *err)
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
    TXO_LOG(r->status == TXO_SAGA_COMPLETED ? TXO_LOG_DEBUG : TXO_LOG_INFO, "saga", "saga finished",
            TXO_KV_STR("saga_id", r->id), TXO_KV_STR("type", r->def->type),
            TXO_KV_STR("status", txo_saga_status_name(r->status)));
    return 0;
}

int txo__saga_drive(struct txo_db *db, const struct txo_saga_def *def, const char *saga_id,
                    const struct txo_saga_opts *opts, void *user, bool retry,
                    enum txo_saga_status *final, struct txo_error *err)
{
    int rc = txo__saga_check_def(def, err);
    if (rc != 0)
        return rc;
    struct saga_run r;
    rc = txo__saga_run_setup(&r, db, def, saga_id, opts, user, err);
    if (rc != 0)
        goto out;
    bool terminal;
    rc = txo__saga_acquire(&r, retry, &terminal, err);
    if (rc == 0 && !terminal)
        rc = txo__saga_drive_run(&r, err);
    if (rc == 0 && final != NULL)
        *final = r.status;
out:
    txo__saga_run_release(&r);
    return rc;
}

int txo_saga_run(struct txo_db *db, const struct txo_saga_def *def, const char *saga_id,
                 const struct txo_saga_opts *opts, void *user, enum txo_saga_status *final,
                 struct txo_error *err)
{
    return txo__saga_drive(db, def, saga_id, opts, user, false, final, err);
}

int txo_saga_retry(struct txo_db *db, const struct txo_saga_def *def, const char *saga_id,
                   const struct txo_saga_opts *opts, void *user, enum txo_saga_status *final,
                   struct txo_error *err)
{
    return txo__saga_drive(db, def, saga_id, opts, user, true, final, err);
}
