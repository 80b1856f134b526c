/*
 * What one run of a saga reads and writes (include/txo/saga.h; design note docs/saga.md): the
 * options and the owner name, the lease (taken, fenced, renewed and released), the loading of
 * an instance and its steps, every fenced write of a status, and the end of a run with its
 * hook. saga_run.c and saga_batch.c decide what to write; this file is how it is written. The
 * statements are in saga_sql.h, each with the index it uses and the rows it locks.
 *
 * Invariants: every write is fenced (the instance by owner and expected status, a step by
 * saga_id, step_order and expected status) and checked against the transition tables of
 * saga_state.c first. A txo_db_transact body here may run several times: it writes its results
 * into its own argument struct, reset at its start.
 *
 * Thread-safety: a run uses only the db it is given and its own memory. The default owner
 * name is per thread (thread-local).
 */
#include "core/common.h"

#include <stdatomic.h>
#include <sys/types.h>
#include <unistd.h>

#include "saga/saga_internal.h"
#include "txo/owner.h"
#include "saga/saga_sql.h"

#define DEFAULT_LEASE_S   30
#define DEFAULT_MAX_TRIES 5

/* ------------------------------------------------------------------------------------------ */
/* Options and the owner name */

static atomic_uint owner_seq;
static _Thread_local char thread_owner[SAGA_OWNER_MAX + 1];
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

int txo__saga_check_def(const struct txo_saga_def *def, struct txo_error *err)
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
        if (s->name == NULL || s->name[0] == '\0' || strlen(s->name) > SAGA_STEP_NAME_MAX)
            return txo_error_set(err, TXO_EINVAL, "saga %s: step %zu needs a name of 1..%d bytes",
                                 def->type, i + 1, SAGA_STEP_NAME_MAX);
        if (s->action == NULL)
            return txo_error_set(err, TXO_EINVAL, "saga %s: step %s has no action", def->type,
                                 s->name);
    }
    return 0;
}

int txo__saga_parse_status(const char *id, const char *name, enum txo_saga_status *out,
                           struct txo_error *err)
{
    if (txo_saga_status_parse(name, out) != 0)
        return txo_error_set(err, TXO_EDB, "saga %s: unknown status '%s'", id,
                             name != NULL ? name : "NULL");
    return 0;
}

/* A remote part that may have taken effect: the step must be undone if the saga aborts. */
static bool remote_maybe(enum txo_remote_state s)
{
    return s != TXO_REMOTE_NONE;
}

/* True when the step must be undone when the saga is compensated. */
bool txo__saga_needs_undo(const struct saga_step_row *s)
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
static int failed_step(const struct saga_run *r)
{
    for (size_t k = r->def->n_steps; k-- > 0;)
        if (r->steps[k].status != TXO_STEP_PENDING)
            return (int)k;
    return -1;
}
/* The idempotency key of step i's call (or of its undo's) is the saga id + this suffix, the
 * same in every worker and on every try. */
void txo__saga_key_suffix(size_t i, bool compensate, char *out, size_t cap)
{
    snprintf(out, cap, ":%zu:%s", i + 1, compensate ? "undo" : "do");
}

void txo__saga_call_key(const struct saga_run *r, size_t i, bool compensate, char out[SAGA_KEY_MAX])
{
    char suffix[32];
    txo__saga_key_suffix(i, compensate, suffix, sizeof(suffix));
    snprintf(out, SAGA_KEY_MAX, "%s%s", r->id, suffix);
}

void txo__saga_make_ctx(const struct saga_run *r, size_t i, unsigned attempt, bool compensate,
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
    /* Each step's try is a span of the saga's trace (its call a child span of it). */
    ctx->has_trace = r->has_trace;
    if (r->has_trace && r->in_call)
        ctx->trace = r->call_span;
    else if (r->has_trace && r->in_try)
        ctx->trace = r->try_span;
    else if (r->has_trace)
        txo_trace_child(&r->trace, &ctx->trace);
}

/* saga_internal.h. */
void txo__saga_record_span(const struct saga_run *r, const struct txo_trace_ctx *span,
                           const uint8_t parent[8], const char *name, enum txo_span_kind kind,
                           int64_t start_us, unsigned attempt, int rc, const char *why)
{
    if (r->opts.tracer == NULL || !r->has_trace || !(r->trace.flags & TXO_TRACE_SAMPLED))
        return;
    struct txo_span_attr attrs[] = {{.key = "txo.saga_id", .str = r->id},
                                    {.key = "txo.saga_type", .str = r->def->type},
                                    {.key = "txo.attempt", .num = attempt}};
    struct txo_span s = {.ctx = *span,
                         .name = name,
                         .kind = kind,
                         .start_us = start_us,
                         .end_us = txo_realtime_us(),
                         .status = rc,
                         .status_message = rc != 0 ? why : NULL,
                         .attrs = attrs,
                         .n_attrs = TXO_ARRAY_LEN(attrs)};
    memcpy(s.parent_span_id, parent, 8);
    txo_tracer_record(r->opts.tracer, &s);
}

/* ------------------------------------------------------------------------------------------ */
/* Fenced writes, used inside transactions */

static int lease_lost(const struct saga_run *r, enum txo_saga_status expected,
                      struct txo_error *err)
{
    return txo_error_set(err, TXO_ELEASELOST,
                         "saga %s: lease lost (no longer owned by %s in status %s)", r->id,
                         r->owner, txo_saga_status_name(expected));
}

/* Checks that the saga is still ours and in `expected`, and renews the lease. */
int txo__saga_fence(struct txo_tx *tx, const struct saga_run *r, enum txo_saga_status expected,
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
static int64_t retry_delay_us(const struct saga_run *r, unsigned tries)
{
    return txo_backoff_delay_ms(&r->opts.compensation_backoff, tries, txo_rand01()) * 1000;
}

/*
 * The one way the saga's status changes; a terminal status releases the lease with it, and
 * COMPENSATION_FAILED also schedules the automatic retry (or gives up, logged once here).
 */
int txo__saga_move(struct txo_tx *tx, const struct saga_run *r, enum txo_saga_status from,
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

int txo__saga_step_not_in(const struct saga_run *r, size_t i, enum txo_step_status expected,
                          struct txo_error *err)
{
    TXO_LOG(TXO_LOG_ERROR, "saga", "step not in expected status", TXO_KV_STR("saga_id", r->id),
            TXO_KV_U64("step_order", i + 1),
            TXO_KV_STR("expected", txo_step_status_name(expected)));
    return txo_error_set(err, TXO_ESTATE, "saga %s step %zu: not in status %s", r->id, i + 1,
                         txo_step_status_name(expected));
}

/* A step status change under the instance lock this transaction holds. */
static int step_move(struct txo_tx *tx, const struct saga_run *r, size_t i,
                     enum txo_step_status from, enum txo_step_status to, struct txo_error *err)
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
    return res.affected_rows == 1 ? 0 : txo__saga_step_not_in(r, i, from, err);
}

/* The persisted status and remote state of step i, row-locked. */
int txo__saga_lock_step(struct txo_tx *tx, const struct saga_run *r, size_t i,
                        struct saga_step_row *out, struct txo_error *err)
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
static int step_error(struct txo_tx *tx, const struct saga_run *r, size_t i, char **out,
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

int txo__saga_call_hook(struct txo_tx *tx, const struct saga_run *r, txo_saga_finish_fn hook,
                        enum txo_saga_status final_status, struct txo_error *err)
{
    if (hook == NULL)
        return 0;
    struct txo_saga_ctx ctx;
    int failed = final_status == TXO_SAGA_COMPLETED ? -1 : failed_step(r);
    txo__saga_make_ctx(r, failed >= 0 ? (size_t)failed : r->def->n_steps - 1, 1, false, NULL, &ctx);
    char *loaded = NULL;
    if (failed >= 0) {
        const struct saga_step_row *s = &r->steps[failed];
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
int txo__saga_abort(struct txo_tx *tx, const struct saga_run *r, enum txo_saga_status *after,
                    struct txo_error *err)
{
    bool any = false;
    for (size_t i = 0; i < r->def->n_steps; i++)
        any = any || txo__saga_needs_undo(&r->steps[i]);
    enum txo_saga_status to = any ? TXO_SAGA_COMPENSATING : TXO_SAGA_FAILED;
    int rc = txo__saga_move(tx, r, TXO_SAGA_RUNNING, to, err);
    if (rc == 0 && to == TXO_SAGA_FAILED)
        rc = txo__saga_call_hook(tx, r, r->def->on_aborted, TXO_SAGA_FAILED, err);
    if (rc == 0)
        *after = to;
    return rc;
}

struct finish_tx {
    struct saga_run *r;
    enum txo_saga_status to; /* FAILED: abort; COMPLETED or COMPENSATED */
    enum txo_saga_status after;
};

static int finish_tx_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct finish_tx *a = arg;
    const struct saga_run *r = a->r;
    a->after = r->status;
    if (a->to == TXO_SAGA_FAILED)
        return txo__saga_abort(tx, r, &a->after, err);
    int rc = txo__saga_move(tx, r, r->status, a->to, err);
    if (rc == 0)
        rc = txo__saga_call_hook(
            tx, r, a->to == TXO_SAGA_COMPLETED ? r->def->on_completed : r->def->on_aborted, a->to,
            err);
    if (rc == 0)
        a->after = a->to;
    return rc;
}

/* Moves the saga to `to` with its hook, in one transaction (FAILED: txo__saga_abort decides). */
int txo__saga_finish(struct saga_run *r, enum txo_saga_status to, struct txo_error *err)
{
    struct finish_tx f = {.r = r, .to = to};
    int rc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, finish_tx_fn, &f, err);
    if (rc == 0)
        r->status = f.after;
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Taking the lease and loading */

struct acquire_tx {
    struct saga_run *r;
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
int txo__saga_load_steps(struct saga_run *r, const struct txo_rows *rows, const size_t *idx,
                         size_t n_rows, struct txo_error *err)
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
        struct saga_step_row *s = &r->steps[i];
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
int txo__saga_load_instance(struct saga_run *r, const struct txo_rows *rows, size_t row,
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
    r->has_trace = !txo_rows_is_null(rows, row, LOAD_TRACEPARENT) &&
                   txo_trace_parse(txo_rows_str(rows, row, LOAD_TRACEPARENT, NULL),
                                   txo_rows_is_null(rows, row, LOAD_TRACESTATE)
                                       ? NULL
                                       : txo_rows_str(rows, row, LOAD_TRACESTATE, NULL),
                                   &r->trace);
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
    struct saga_run *r = a->r;
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
    rc = txo__saga_parse_status(r->id, txo_rows_str(rows, 0, LOAD_STATUS, NULL), &a->status, err);
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
    rc = txo__saga_load_steps(r, rows, NULL, txo_rows_count(rows), err);
    if (rc == 0)
        rc = txo__saga_load_instance(r, rows, 0, err);
    if (rc != 0)
        goto out;
    txo__saga_load_deadlines(r, rows, NULL, txo_rows_count(rows));
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
int txo__saga_acquire(struct saga_run *r, bool retry, bool *terminal, struct txo_error *err)
{
    struct acquire_tx a = {.r = r, .retry = retry};
    *terminal = false;
    int rc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, acquire_tx_fn, &a, err);
    if (rc != 0)
        goto out;
    if (a.acquired) {
        r->status = retry ? TXO_SAGA_COMPENSATING : a.status;
        txo__saga_count_expired_tries(r);
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

/* Fills r for a run of saga_id (nothing taken or loaded yet). Release with
 * txo__saga_run_release(). */
int txo__saga_run_setup(struct saga_run *r, struct txo_db *db, const struct txo_saga_def *def,
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
    if (owner[0] == '\0' || strlen(owner) > SAGA_OWNER_MAX)
        return txo_error_set(err, TXO_EINVAL, "saga owner must be 1..%d bytes", SAGA_OWNER_MAX);
    snprintf(r->owner, sizeof(r->owner), "%s", owner);
    snprintf(r->id, sizeof(r->id), "%s", saga_id);
    r->db = db;
    r->def = def;
    r->user = user;
    r->clock = r->opts.clock != NULL ? r->opts.clock : txo_clock_system();
    r->steps = txo_calloc(def->n_steps, sizeof(*r->steps));
    if (r->steps == NULL)
        return txo_error_set(err, TXO_ENOMEM, "saga %s: out of memory", saga_id);
    r->deadline_ms = INT64_MAX; /* none until the load says otherwise */
    for (size_t i = 0; i < def->n_steps; i++)
        r->steps[i].deadline_ms = INT64_MAX;
    return 0;
}

void txo__saga_run_release(struct saga_run *r)
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
