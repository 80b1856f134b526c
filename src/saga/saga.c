/*
 * The saga engine (include/txo/saga.h; design note docs/saga.md).
 *
 * A saga is driven from what is persisted, never from memory: txo_saga_run() takes the owner
 * lease, loads the instance and its steps, and then moves them one transaction at a time:
 *
 *   first step     a fresh run takes the lease, loads the saga (one join) and runs the next
 *                  step in ONE transaction: the lease it took fences that step;
 *   step try       the action, then one statement that fences the instance (owner, status),
 *                  renews the lease and moves the step PENDING/RUNNING -> COMPLETED with
 *                  attempts + 1: the step's status commits with the action's own writes
 *                  (business rows, outbox events) or not at all; if the fence matches nothing
 *                  the whole transaction rolls back. A retry (after a backoff) fences first;
 *   last step      the same statement also moves the saga to COMPLETED and releases the lease,
 *                  and on_completed runs in that transaction: no separate finish;
 *   failed try     the try rolled back; a new transaction records it (attempts + 1, error)
 *                  and, when the error is permanent or the tries are used up, fails the step
 *                  and moves the saga to FAILED (nothing to undo) or COMPENSATING;
 *   compensation   the same shape in reverse order over the COMPLETED steps (fenced first),
 *                  ending in COMPENSATED, or COMPENSATION_FAILED when one keeps failing;
 *   finish         otherwise, the terminal status, the definition's hook and the release of
 *                  the lease in one transaction.
 * So a saga of n steps that succeeds costs n commits after its creation.
 *
 * Invariants:
 *   - every write is fenced: the instance by (owner, expected status), a step by (saga_id,
 *     step_order, expected status), and each status change is first checked against the one
 *     transition table of saga_state.c (a step completing in one write still checks
 *     PENDING -> RUNNING and RUNNING -> COMPLETED);
 *   - struct run mirrors the persisted statuses as of the last commit, and is updated only
 *     after a transaction committed (txo_db_transact may run a body several times, so bodies
 *     write their results into their own argument struct, reset at their start; the acquire
 *     body reloads r itself, and a failure after it reloads r with a new acquire);
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

/* Columns of SAGA_SQL_SELECT_INSTANCE, SAGA_SQL_SELECT_STEPS and SAGA_SQL_LOAD. */
enum { INST_ID, INST_TYPE, INST_CORRELATION, INST_STATUS, INST_PAYLOAD, INST_OWNER, INST_IDLE };
enum { STEP_ORDER, STEP_NAME, STEP_STATUS, STEP_ERROR, STEP_ATTEMPTS };
enum {
    LOAD_TYPE,
    LOAD_CORRELATION,
    LOAD_STATUS,
    LOAD_PAYLOAD,
    LOAD_OWNER,
    LOAD_STEP_ORDER,
    LOAD_STEP_NAME,
    LOAD_STEP_STATUS,
    LOAD_TAKEABLE, /* SAGA_SQL_LOAD_FOR_UPDATE only */
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
    enum txo_step_status *steps; /* persisted step statuses, def->n_steps of them */
    /* A step whose first try failed in the acquire transaction goes on with try next_attempt
     * (next_attempt_step == n_steps: none). */
    size_t next_attempt_step;
    unsigned next_attempt;
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

static int parse_saga_status(const char *id, const char *name, enum txo_saga_status *out,
                             struct txo_error *err)
{
    if (txo_saga_status_parse(name, out) != 0) {
        return txo_error_set(err, TXO_EDB, "saga %s: unknown status '%s'", id,
                             name != NULL ? name : "NULL");
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

/* How a step row is written outside a successful try: a status move, or a failed try. */
enum step_write_kind {
    STEP_WRITE_MOVE,       /* SAGA_SQL_STEP_MOVE */
    STEP_WRITE_TRY_FAILED, /* SAGA_SQL_STEP_TRY_FAILED, the only one storing `error` */
};

/*
 * A step row change other than a successful try (see step_done). For a failed try, `to` may
 * equal `from` (a retried RUNNING or COMPENSATING step): that is not a move, so it is not
 * checked against the table.
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
        rc = txo_tx_exec(tx, SAGA_SQL_STEP_MOVE, p, TXO_ARRAY_LEN(p), &res, err);
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
/* The end of a successful try */

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

/*
 * Step i's try succeeded: in one statement, fence the instance and renew the lease, and move
 * the step from its persisted status through busy to done with one more attempt (both moves
 * checked against the table). With finish (forward only), the saga also moves RUNNING ->
 * COMPLETED and releases the lease. TXO_ELEASELOST when the saga is no longer ours (or not in
 * the driving status), TXO_ESTATE when the step moved.
 */
static int step_done(struct txo_tx *tx, const struct run *r, size_t i, bool compensate, bool finish,
                     bool take, struct txo_error *err)
{
    unsigned order = (unsigned)i + 1;
    enum txo_step_status from = r->steps[i];
    enum txo_step_status busy = busy_status(compensate);
    enum txo_step_status done = done_status(compensate);
    enum txo_saga_status driving = driving_status(compensate);
    TXO_ASSERT(!finish || !compensate);
    int rc = 0;
    if (from != busy) {
        rc = txo__step_check_move(r->id, order, from, busy, err);
    }
    if (rc == 0) {
        rc = txo__step_check_move(r->id, order, busy, done, err);
    }
    if (rc == 0 && finish) {
        rc = txo__saga_check_move(r->id, driving, TXO_SAGA_COMPLETED, err);
    }
    if (rc != 0) {
        return rc;
    }
    struct txo_exec_result res;
    if (finish) {
        struct txo_param p[] = {txo_p_str(txo_step_status_name(done)),
                                txo_p_str(txo_saga_status_name(TXO_SAGA_COMPLETED)),
                                txo_p_str(r->id),
                                txo_p_str(txo_saga_status_name(driving)),
                                txo_p_str(r->owner),
                                txo_p_i64(take ? 1 : 0),
                                txo_p_i64(order),
                                txo_p_str(txo_step_status_name(from))};
        rc = txo_tx_exec(tx, SAGA_SQL_STEP_DONE_FINISH, p, TXO_ARRAY_LEN(p), &res, err);
    } else {
        struct txo_param p[] = {txo_p_str(txo_step_status_name(done)),
                                txo_p_str(r->owner),
                                txo_p_i64(r->opts.lease_s),
                                txo_p_str(r->id),
                                txo_p_str(txo_saga_status_name(driving)),
                                txo_p_str(r->owner),
                                txo_p_i64(take ? 1 : 0),
                                txo_p_i64(order),
                                txo_p_str(txo_step_status_name(from))};
        rc = txo_tx_exec(tx, SAGA_SQL_STEP_DONE, p, TXO_ARRAY_LEN(p), &res, err);
    }
    if (rc != 0) {
        return rc;
    }
    if (res.affected_rows > 0) {
        return 0; /* the step row always changes when the join matched */
    }
    /* Nothing matched: the fence tells a lost lease from a step that moved (the transaction
     * rolls back either way). */
    rc = fence(tx, r, driving, err);
    if (rc != 0) {
        return rc;
    }
    TXO_LOG(TXO_LOG_ERROR, "saga", "step not in expected status saga_id=%s step=%u expected=%s",
            r->id, order, txo_step_status_name(from));
    return txo_error_set(err, TXO_ESTATE, "saga %s step %u: not in status %s", r->id, order,
                         txo_step_status_name(from));
}

/* ------------------------------------------------------------------------------------------ */
/* One try of an action or a compensation, and the record of a failed try */

struct try_tx {
    struct run *r;
    size_t i;
    bool compensate; /* false: the action; true: the compensation */
    unsigned attempt;
    bool fence_first; /* fence before the action (retries, compensations) */
    bool finish;      /* the last step to complete: the saga completes in this transaction */
    bool take;        /* the first try of a run: its step_done takes the lease (row locked) */
    /* out */
    bool fn_failed; /* the action/compensation itself returned fn_rc */
    int fn_rc;
    bool hook_failed; /* on_completed failed (not the step's outcome) */
};

/* True when every step but i is COMPLETED: completing i completes the saga. */
static bool only_step_left(const struct run *r, size_t i)
{
    for (size_t k = 0; k < r->def->n_steps; k++) {
        if (k != i && r->steps[k] != TXO_STEP_COMPLETED) {
            return false;
        }
    }
    return true;
}

static void try_init(struct try_tx *t, struct run *r, size_t i, bool compensate, unsigned attempt)
{
    memset(t, 0, sizeof(*t));
    t->r = r;
    t->i = i;
    t->compensate = compensate;
    t->attempt = attempt;
    /* A first forward try is fenced by its last statement (step_done); after a backoff sleep,
     * and for compensations, the fence comes first so nothing runs for a saga we lost. */
    t->fence_first = compensate || attempt > 1;
    t->finish = !compensate && only_step_left(r, i);
}

/* The body of one try, inside a transaction that may already hold other statements (the
 * acquire of a fresh run). Resets its outputs first: txo_db_transact may run it again. */
static int try_body(struct txo_tx *tx, struct try_tx *a, struct txo_error *err)
{
    const struct run *r = a->r;
    const struct txo_saga_step_def *sd = &r->def->steps[a->i];

    a->fn_failed = false;
    a->fn_rc = 0;
    a->hook_failed = false;
    int rc = 0;
    if (a->fence_first) {
        rc = fence(tx, r, driving_status(a->compensate), err);
        if (rc != 0) {
            return rc;
        }
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
    rc = step_done(tx, r, a->i, a->compensate, a->finish, a->take, err);
    if (rc == 0 && a->finish) {
        rc = call_hook(tx, r, r->def->on_completed, r->def->n_steps, TXO_SAGA_COMPLETED, err);
        a->hook_failed = rc != 0;
    }
    return rc;
}

static int try_tx_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    return try_body(tx, arg, err);
}

/* A try committed: mirror it. */
static void try_committed(struct run *r, const struct try_tx *t)
{
    r->steps[t->i] = done_status(t->compensate);
    if (t->finish) {
        r->status = TXO_SAGA_COMPLETED;
    }
    txo_crash_point(t->compensate ? "saga.compensation.after_commit" : "saga.step.after_commit");
}

struct record_tx {
    struct run *r;
    size_t i;
    bool compensate;
    bool finish;       /* the failed try would have completed the saga */
    bool final;        /* the step fails for good */
    const char *error; /* stored in saga_steps.error */
    /* out */
    bool already_done; /* the try had committed after all (COMMIT outcome was unknown) */
    enum txo_step_status step_after;
    enum txo_saga_status saga_after;
};

/* The saga's persisted status (consistent read), for the rare paths that must look. */
static int read_saga_status(struct txo_tx *tx, const struct run *r, enum txo_saga_status *out,
                            struct txo_error *err)
{
    struct txo_param p[] = {txo_p_str(r->id)};
    struct txo_rows *rows = NULL;
    int rc = txo_tx_query(tx, SAGA_SQL_SELECT_INSTANCE, p, TXO_ARRAY_LEN(p), &rows, err);
    if (rc == 0 && txo_rows_count(rows) != 1) {
        rc = txo_error_set(err, TXO_ENOTFOUND, "saga %s not found", r->id);
    }
    if (rc == 0) {
        rc = parse_saga_status(r->id, txo_rows_str(rows, 0, INST_STATUS, NULL), out, err);
    }
    txo_rows_free(rows);
    return rc;
}

static int record_tx_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct record_tx *a = arg;
    const struct run *r = a->r;
    enum txo_step_status busy = busy_status(a->compensate);

    a->already_done = false;
    a->step_after = r->steps[a->i];
    a->saga_after = r->status;
    int rc = fence(tx, r, driving_status(a->compensate), err);
    if (rc == TXO_ELEASELOST && a->finish) {
        /* A try that completes the saga also releases the lease: if its COMMIT went through
         * after all, the saga is COMPLETED and unowned. */
        enum txo_saga_status now = TXO_SAGA_RUNNING;
        struct txo_error serr;
        txo_error_init(&serr);
        if (read_saga_status(tx, r, &now, &serr) == 0 && now == TXO_SAGA_COMPLETED) {
            a->already_done = true;
            a->step_after = done_status(a->compensate);
            a->saga_after = TXO_SAGA_COMPLETED;
            return 0;
        }
    }
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
 * Try t failed with rc (terr describes it; its transaction rolled back). When that is the
 * step's own outcome (its function failed, or a transient error), records it in a new
 * transaction and, when the step may be tried again, sleeps the backoff; *stop is set when the
 * step is settled instead (done after all, or failed for good: r->status then changed).
 * Anything else (lease lost, illegal state, database error, on_completed failing) is not the
 * step's outcome and is returned as it is.
 */
static int settle_failed_try(struct run *r, const struct try_tx *t, int rc,
                             const struct txo_error *terr, bool *stop, struct txo_error *err)
{
    const char *name = r->def->steps[t->i].name;
    bool own_failure = t->fn_failed && rc == t->fn_rc;
    bool transient = txo_err_is_transient(rc) && !t->hook_failed;
    *stop = true;
    if (!own_failure && !transient) {
        if (err != NULL) {
            *err = *terr;
        }
        return rc;
    }
    char error[TXO_ERROR_MSG_MAX + 32];
    snprintf(error, sizeof(error), "%s: %s", txo_err_name(rc), terr->msg);
    struct record_tx rec = {.r = r,
                            .i = t->i,
                            .compensate = t->compensate,
                            .finish = t->finish,
                            .final = !transient || t->attempt >= r->opts.step_max_attempts,
                            .error = error};
    int rrc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, record_tx_fn, &rec, err);
    if (rrc != 0) {
        return rrc;
    }
    r->steps[t->i] = rec.step_after;
    r->status = rec.saga_after;
    if (rec.already_done || rec.final) {
        if (rec.final && !rec.already_done && !t->compensate) {
            TXO_LOG(TXO_LOG_INFO, "saga",
                    "saga step failed saga_id=%s step=%s attempts=%u "
                    "error=\"%s\" next=%s",
                    r->id, name, t->attempt, error, txo_saga_status_name(r->status));
        } else if (rec.final && !rec.already_done) {
            TXO_LOG(TXO_LOG_ERROR, "saga",
                    "saga compensation failed saga_id=%s type=%s "
                    "step=%s attempts=%u error=\"%s\"",
                    r->id, r->def->type, name, t->attempt, error);
        }
        return 0;
    }
    *stop = false;
    int64_t delay_ms = txo_backoff_delay_ms(&r->opts.step_backoff, t->attempt, txo_rand01());
    TXO_LOG(TXO_LOG_WARN, "saga",
            "saga step retry saga_id=%s step=%s phase=%s attempt=%u "
            "delay_ms=%" PRId64 " error=\"%s\"",
            r->id, name, t->compensate ? "compensate" : "action", t->attempt, delay_ms, error);
    r->clock->sleep_ms(r->clock->arg, delay_ms);
    return 0;
}

/*
 * Runs step i's action (or compensation), from try first_attempt on, until it commits, fails
 * for good, or the engine cannot go on (lease lost, database down: returned as an error).
 * Returns 0 when the step reached COMPLETED/COMPENSATED or its failure was recorded (r->status
 * then changed).
 */
static int drive_step(struct run *r, size_t i, bool compensate, unsigned first_attempt,
                      struct txo_error *err)
{
    for (unsigned attempt = first_attempt;; attempt++) {
        struct try_tx t;
        try_init(&t, r, i, compensate, attempt);
        struct txo_error terr;
        txo_error_init(&terr);
        int rc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, try_tx_fn, &t, &terr);
        if (rc == 0) {
            try_committed(r, &t);
            txo_crash_point("saga.step_committed");
            return 0;
        }
        bool stop;
        rc = settle_failed_try(r, &t, rc, &terr, &stop, err);
        if (rc != 0 || stop) {
            return rc;
        }
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

/* The try to start step i with: 1, or the next one when this run already tried it. */
static unsigned first_attempt(const struct run *r, size_t i)
{
    return r->next_attempt_step == i ? r->next_attempt : 1;
}

/* RUNNING: run the steps not yet completed, in order. Returns with r->status changed (the
 * last step completes the saga in its own transaction). */
static int drive_forward(struct run *r, struct txo_error *err)
{
    size_t n = r->def->n_steps;
    for (size_t i = 0; i < n && r->status == TXO_SAGA_RUNNING; i++) {
        switch (r->steps[i]) {
        case TXO_STEP_COMPLETED:
            break;
        case TXO_STEP_PENDING:
        case TXO_STEP_RUNNING: { /* RUNNING: a try was cut short; steps are idempotent */
            int rc = drive_step(r, i, false, first_attempt(r, i), err);
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
    if (r->status != TXO_SAGA_RUNNING) {
        return 0;
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
            int rc = drive_step(r, k, true, 1, err);
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
    bool fold;  /* a RUNNING saga: run its next step in this transaction too */
    /* out */
    bool acquired;
    enum txo_saga_status status;
    struct txo_rows *rows; /* SAGA_SQL_LOAD */
    bool tried;            /* the first try `t` ran in this transaction */
    struct try_tx t;
};

/* Checks the loaded steps (SAGA_SQL_LOAD rows) against the definition and parses them. */
static int load_steps(const struct run *r, const struct txo_rows *rows, enum txo_step_status *out,
                      struct txo_error *err)
{
    const struct txo_saga_def *def = r->def;
    size_t stored = txo_rows_count(rows);
    if (stored == 1 && txo_rows_is_null(rows, 0, LOAD_STEP_ORDER)) {
        stored = 0;
    }
    if (stored != def->n_steps) {
        return txo_error_set(err, TXO_EINVAL, "saga %s has %zu steps stored, definition %s has %zu",
                             r->id, stored, def->type, def->n_steps);
    }
    for (size_t i = 0; i < def->n_steps; i++) {
        const char *name = txo_rows_str(rows, i, LOAD_STEP_NAME, NULL);
        if (txo_rows_i64(rows, i, LOAD_STEP_ORDER) != (int64_t)i + 1 || name == NULL ||
            strcmp(name, def->steps[i].name) != 0) {
            return txo_error_set(
                err, TXO_EINVAL, "saga %s: stored step %zu is '%s', definition %s says '%s'", r->id,
                i + 1, name != NULL ? name : "NULL", def->type, def->steps[i].name);
        }
        const char *st = txo_rows_str(rows, i, LOAD_STEP_STATUS, NULL);
        if (txo_step_status_parse(st, &out[i]) != 0) {
            return txo_error_set(err, TXO_EDB, "saga %s step %zu: unknown status '%s'", r->id,
                                 i + 1, st != NULL ? st : "NULL");
        }
    }
    return 0;
}

/* Copies the instance's correlation id and payload into r and decodes the payload (again
 * when a transaction body runs again). */
static int load_instance(struct run *r, const struct txo_rows *rows, struct txo_error *err)
{
    txo_free(r->correlation_id);
    txo_free(r->payload);
    if (r->has_state && r->def->free_state != NULL) {
        r->def->free_state(r->state);
    }
    r->state = NULL;
    r->has_state = false;
    size_t len = 0;
    const char *payload = txo_rows_str(rows, 0, LOAD_PAYLOAD, &len);
    r->correlation_id = txo_strdup(txo_rows_str(rows, 0, LOAD_CORRELATION, NULL));
    r->payload = txo_strndup(payload != NULL ? payload : "", payload != NULL ? len : 0);
    r->payload_len = payload != NULL ? len : 0;
    if (r->correlation_id == NULL || r->payload == NULL) {
        return txo_error_set(err, TXO_ENOMEM, "saga %s: out of memory loading it", r->id);
    }
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

/* The step a fresh RUNNING saga would run next (PENDING, or RUNNING: a try cut short), or
 * n_steps when there is none (a FAILED step to settle, or an inconsistent row). */
static size_t next_forward_step(const struct run *r)
{
    for (size_t i = 0; i < r->def->n_steps; i++) {
        if (r->steps[i] == TXO_STEP_PENDING || r->steps[i] == TXO_STEP_RUNNING) {
            return i;
        }
        if (r->steps[i] != TXO_STEP_COMPLETED) {
            break;
        }
    }
    return r->def->n_steps;
}

/* The lease of a saga whose row this transaction locked (or may lock): SAGA_SQL_ACQUIRE*.
 * *taken is false when it is held by a live owner or has no work left. */
static int take_lease(struct txo_tx *tx, const struct run *r, bool retry, bool *taken,
                      struct txo_error *err)
{
    struct txo_param p[] = {txo_p_str(r->owner), txo_p_i64(r->opts.lease_s), txo_p_str(r->id),
                            txo_p_str(r->owner)};
    struct txo_exec_result res;
    int rc = txo_tx_exec(tx, retry ? SAGA_SQL_ACQUIRE_FOR_RETRY : SAGA_SQL_ACQUIRE, p,
                         TXO_ARRAY_LEN(p), &res, err);
    *taken = rc == 0 && res.affected_rows == 1;
    return rc;
}

/*
 * Two shapes. Without fold: take the lease (UPDATE), then load. With fold (txo_saga_run): load
 * with the rows locked, decide in C whether the lease may be taken, and let the first try's
 * closing statement write it (no statement of its own); when there is no step to fold (a
 * COMPENSATING saga, a FAILED step to settle) the lease is written by SAGA_SQL_ACQUIRE.
 */
static int acquire_tx_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct acquire_tx *a = arg;
    struct run *r = a->r;

    txo_rows_free(a->rows); /* from an earlier attempt */
    a->rows = NULL;
    a->acquired = false;
    a->tried = false;

    bool taken = false;
    int rc = 0;
    if (!a->fold) {
        rc = take_lease(tx, r, a->retry, &taken, err);
        if (rc != 0) {
            return rc;
        }
    }
    struct txo_param pl[] = {txo_p_str(r->owner), txo_p_str(r->id)};
    if (a->fold) {
        rc = txo_tx_query(tx, SAGA_SQL_LOAD_FOR_UPDATE, pl, TXO_ARRAY_LEN(pl), &a->rows, err);
    } else {
        rc = txo_tx_query(tx, SAGA_SQL_LOAD, pl + 1, 1, &a->rows, err);
    }
    if (rc != 0) {
        return rc;
    }
    if (txo_rows_count(a->rows) == 0) {
        return txo_error_set(err, TXO_ENOTFOUND, "saga %s not found", r->id);
    }
    rc = parse_saga_status(r->id, txo_rows_str(a->rows, 0, LOAD_STATUS, NULL), &a->status, err);
    if (rc != 0) {
        return rc;
    }
    if (a->fold) {
        bool has_work = a->status == TXO_SAGA_RUNNING || a->status == TXO_SAGA_COMPENSATING;
        taken = has_work && txo_rows_i64(a->rows, 0, LOAD_TAKEABLE) == 1;
    }
    if (!taken) {
        return 0; /* not ours: the caller tells why from the status */
    }
    const char *type = txo_rows_str(a->rows, 0, LOAD_TYPE, NULL);
    if (type == NULL || strcmp(type, r->def->type) != 0) {
        return txo_error_set(err, TXO_EINVAL, "saga %s is of type '%s', not '%s'", r->id,
                             type != NULL ? type : "NULL", r->def->type);
    }
    rc = load_steps(r, a->rows, r->steps, err);
    if (rc == 0) {
        rc = load_instance(r, a->rows, err);
    }
    if (rc != 0) {
        return rc;
    }
    /* From here on r mirrors what this transaction sees (steps, status): a try run in it
     * checks its moves against that. */
    r->status = a->status;
    if (a->retry) {
        rc = saga_move(tx, r, TXO_SAGA_COMPENSATION_FAILED, TXO_SAGA_COMPENSATING, err);
        for (size_t i = 0; rc == 0 && i < r->def->n_steps; i++) {
            if (r->steps[i] == TXO_STEP_COMPENSATION_FAILED) {
                rc = step_write(tx, r, i, STEP_WRITE_MOVE, TXO_STEP_COMPENSATION_FAILED,
                                TXO_STEP_COMPENSATING, NULL, err);
                r->steps[i] = TXO_STEP_COMPENSATING;
            }
        }
        if (rc != 0) {
            return rc;
        }
        a->status = TXO_SAGA_COMPENSATING;
        r->status = TXO_SAGA_COMPENSATING;
    }
    size_t i = a->fold && a->status == TXO_SAGA_RUNNING ? next_forward_step(r) : r->def->n_steps;
    if (i == r->def->n_steps) {
        if (a->fold) {
            /* Nothing to fold: write the lease now (the row is locked by us, so it takes). */
            rc = take_lease(tx, r, false, &taken, err);
            if (rc != 0 || !taken) {
                return rc != 0
                           ? rc
                           : txo_error_set(err, TXO_EDB, "saga %s: locked but not taken", r->id);
            }
        }
        a->acquired = true;
        return 0;
    }
    /* The row lock taken by the load fences this try; its closing statement takes the lease. */
    try_init(&a->t, r, i, false, 1);
    a->t.fence_first = false;
    a->t.take = true;
    a->tried = true;
    a->acquired = true;
    return try_body(tx, &a->t, err);
}

/*
 * Takes the lease and fills r from the database; with fold, also runs the saga's next step in
 * the same transaction (one commit fewer per run). *terminal: not taken, the saga is over.
 */
static int acquire(struct run *r, bool retry, bool fold, bool *terminal, struct txo_error *err)
{
    struct acquire_tx a;
    memset(&a, 0, sizeof(a));
    a.r = r;
    a.retry = retry;
    a.fold = fold;
    *terminal = false;
    struct txo_error terr;
    txo_error_init(&terr);
    int rc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, acquire_tx_fn, &a, &terr);
    if (rc != 0 && a.tried) {
        /* The try failed and rolled back with the lease: take the lease alone (reloading r),
         * then settle the try as drive_step would, if nobody moved the step meanwhile. */
        enum txo_step_status before = r->steps[a.t.i];
        bool own_failure = a.t.fn_failed && rc == a.t.fn_rc;
        bool transient = txo_err_is_transient(rc) && !a.t.hook_failed;
        if (!own_failure && !transient) {
            if (err != NULL) {
                *err = terr;
            }
            goto out;
        }
        int arc = acquire(r, false, false, terminal, err);
        if (arc != 0 || *terminal) {
            rc = arc;
            goto out;
        }
        int try_rc = rc;
        rc = 0;
        if (r->status == TXO_SAGA_RUNNING && r->steps[a.t.i] == before) {
            bool stop;
            rc = settle_failed_try(r, &a.t, try_rc, &terr, &stop, err);
            if (rc == 0 && !stop) {
                r->next_attempt_step = a.t.i;
                r->next_attempt = a.t.attempt + 1;
            }
        }
        goto out;
    }
    if (rc != 0) {
        if (err != NULL) {
            *err = terr;
        }
        goto out;
    }
    r->status = a.status;
    if (!a.acquired) {
        const char *owner = txo_rows_str(a.rows, 0, LOAD_OWNER, NULL);
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
    if (a.tried) {
        try_committed(r, &a.t);
        txo_crash_point("saga.step_committed"); /* the step that ran with the acquire */
    }
out:
    txo_rows_free(a.rows);
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
    r.next_attempt_step = def->n_steps; /* none */
    r.steps = txo_calloc(def->n_steps, sizeof(*r.steps));
    if (r.steps == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "saga %s: out of memory", saga_id);
        goto out;
    }

    bool terminal;
    rc = acquire(&r, retry, !retry, &terminal, err);
    if (rc != 0 || terminal) {
        goto out;
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
    /* One line per saga is per-request noise when it completes; an abort is worth seeing. */
    if (r.status == TXO_SAGA_COMPLETED)
        TXO_LOG(TXO_LOG_DEBUG, "saga", "saga finished saga_id=%s type=%s status=%s", r.id,
                def->type, txo_saga_status_name(r.status));
    else
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
    if (rc == 0 && res.affected_rows != def->n_steps) {
        rc = txo_error_set(err, TXO_EDB, "saga %s: %llu of %zu steps created", id,
                           (unsigned long long)res.affected_rows, def->n_steps);
    }
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
        rc = insert_steps(tx, def, id, err);
        if (rc != 0) {
            txo_error_wrap(err, "creating the steps of saga %s", id);
            return rc;
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
    info.idle_s = txo_rows_i64(a.inst, 0, INST_IDLE);
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
