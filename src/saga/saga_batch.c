/*
 * The batch engine: txo_saga_run_many() (include/txo/saga.h; design note docs/saga.md) runs
 * one step of many sagas in one transaction, each part of the step called once for all of them
 * (its action, guard and remote part take n sagas). A saga takes part only in its first try of
 * a step that was never called; every other saga (a refused guard, a failed call, an outcome
 * other than done, compensation, a lease not taken) leaves the batches and is driven alone by
 * saga_run.c, which meets the same rows and tells why.
 *
 * Invariants: a batch's transaction fences every saga it writes (owner, RUNNING) and checks
 * each move against the transition tables first; a count that does not match rolls it back.
 *
 * Thread-safety: a batch uses only the db it is given and its own memory.
 */
#include "core/common.h"

#include "saga/saga_internal.h"
#include "saga/saga_sql.h"

/* ------------------------------------------------------------------------------------------ */
/* Batches: one step of many sagas in one transaction */

/* One saga of txo_saga_run_many. */
struct batch_saga {
    struct saga_run r;
    bool set_up;   /* txo__saga_run_setup succeeded */
    bool acquired; /* its lease was taken by SAGA_SQL_ACQUIRE_MANY and it is loaded */
    bool single;   /* out of the batches: runs alone from now on */
    int rc;
    char key[SAGA_KEY_MAX]; /* the idempotency key of its call, in a batch of a remote step */
    /* Its try in the batch in progress: 0 done, else the code it left the batch with. */
    int try_rc;
    char try_why[128];
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
    const struct saga_run *r0 = &b[a->pick[0]].r;
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
        rc = txo__saga_parse_status(bs->r.id, txo_rows_str(rows, idx[0], LOAD_STATUS, NULL),
                                    &bs->r.status, err);
        if (rc == 0)
            rc = txo__saga_load_steps(&bs->r, rows, idx, got, err);
        if (rc == 0)
            rc = txo__saga_load_instance(&bs->r, rows, idx[0], err);
        if (rc == 0)
            txo__saga_load_deadlines(&bs->r, rows, idx, got);
        bs->acquired = rc == 0;
    }
out:
    txo_rows_free(rows);
    txo_free(idx);
    txo_free(sql);
    txo_free(p);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Spans: a saga's try of a batched step is a span of its own trace, as on the single path
 * (its call a CLIENT span within it); the batch is one span of a trace of its own, linking
 * the tries. */

struct batch_trace {
    bool sampled; /* some saga of the batch is in a sampled trace and a tracer is set */
    struct txo_trace_ctx ctx;
    int64_t start_us;
    const struct txo_trace_ctx *prev; /* the thread's span before the batch */
};

/* Opens the try span of each saga of the batch pick[0..m) and the batch's own span (the
 * thread's current span until batch_trace_end, so log lines carry it). */
static void batch_trace_begin(struct batch_saga *b, const size_t *pick, size_t m,
                              struct batch_trace *bt)
{
    memset(bt, 0, sizeof(*bt));
    bt->start_us = txo_realtime_us();
    for (size_t k = 0; k < m; k++) {
        struct batch_saga *bs = &b[pick[k]];
        struct saga_run *r = &bs->r;
        bs->try_rc = 0;
        bs->try_why[0] = '\0';
        r->in_try = r->has_trace;
        if (r->has_trace)
            txo_trace_child(&r->trace, &r->try_span);
        bt->sampled = bt->sampled || (r->opts.tracer != NULL && r->has_trace &&
                                      (r->trace.flags & TXO_TRACE_SAMPLED));
    }
    if (bt->sampled) {
        txo_trace_new_root(true, &bt->ctx);
        bt->prev = txo_trace_set_current(&bt->ctx);
    }
}

/* Notes why saga bs left the batch at its try (code rc, message why). */
static void batch_left(struct batch_saga *bs, int rc, const char *why)
{
    bs->try_rc = rc;
    size_t len = strnlen(why, sizeof(bs->try_why) - 1);
    memcpy(bs->try_why, why, len);
    bs->try_why[len] = '\0';
}

/* Records the try spans still open (a saga that made no try has none: its own run will) and
 * the batch's span with a link to each. */
static void batch_trace_end(struct batch_saga *b, const size_t *pick, size_t m, size_t i,
                            struct batch_trace *bt)
{
    const char *step = b[pick[0]].r.def->steps[i].name;
    struct txo_span_link *links = bt->sampled ? txo_calloc(m, sizeof(*links)) : NULL;
    size_t n_links = 0, n_done = 0;
    int failure = 0;
    for (size_t k = 0; k < m; k++) {
        struct batch_saga *bs = &b[pick[k]];
        struct saga_run *r = &bs->r;
        if (!r->in_try)
            continue;
        r->in_try = false;
        txo__saga_record_span(r, &r->try_span, r->trace.span_id, step, TXO_SPAN_INTERNAL,
                              bt->start_us, 1, bs->try_rc, bs->try_why);
        if (bs->try_rc == 0)
            n_done++;
        else if (failure == 0)
            failure = bs->try_rc;
        if (links != NULL && (r->trace.flags & TXO_TRACE_SAMPLED)) {
            memcpy(links[n_links].trace_id, r->try_span.trace_id, 16);
            memcpy(links[n_links++].span_id, r->try_span.span_id, 8);
        }
    }
    if (!bt->sampled)
        return;
    txo_trace_set_current(bt->prev);
    char name[SAGA_STEP_NAME_MAX + 16];
    snprintf(name, sizeof(name), "%s batch", step);
    struct txo_span_attr attrs[] = {{.key = "txo.saga_type", .str = b[pick[0]].r.def->type},
                                    {.key = "txo.batch.sagas", .num = (int64_t)m},
                                    {.key = "txo.batch.done", .num = (int64_t)n_done}};
    struct txo_span s = {.ctx = bt->ctx,
                         .name = name,
                         .kind = TXO_SPAN_INTERNAL,
                         .start_us = bt->start_us,
                         .end_us = txo_realtime_us(),
                         .status = failure,
                         .status_message = failure != 0 ? "some sagas left the batch" : NULL,
                         .attrs = attrs,
                         .n_attrs = TXO_ARRAY_LEN(attrs),
                         .links = links,
                         .n_links = n_links};
    txo_tracer_record(b[pick[0]].r.opts.tracer, &s);
    txo_free(links);
}

/* The step saga b runs next: the first that is not COMPLETED (n_steps when none). */
static size_t next_step(const struct saga_run *r)
{
    size_t i = 0;
    while (i < r->def->n_steps && r->steps[i].status == TXO_STEP_COMPLETED)
        i++;
    return i;
}

/* True when saga b can take part in a batch of step i: its first try, never called, and no
 * deadline passed (the single path fails that step, by the same rule). */
static bool batchable(const struct batch_saga *b, size_t i)
{
    const struct saga_run *r = &b->r;
    return b->acquired && !b->single && r->status == TXO_SAGA_RUNNING && next_step(r) == i &&
           r->steps[i].status == TXO_STEP_PENDING && r->steps[i].remote == TXO_REMOTE_NONE &&
           txo__saga_deadline_passed(r, i) == TXO_DEADLINE_NONE;
}

/*
 * The fence of a batch's transaction: the sagas pick[0..m) are RUNNING and ours, and their
 * leases are renewed for lease_us, or, when `finish`, they complete and their leases are
 * released. A count that does not match is TXO_ELEASELOST (the transaction rolls back).
 */
static int batch_fence(struct txo_tx *tx, const struct batch_saga *b, const size_t *pick, size_t m,
                       bool finish, int64_t lease_us, const char *step, struct txo_error *err)
{
    const struct saga_run *r0 = &b[pick[0]].r;
    const char *running = txo_saga_status_name(TXO_SAGA_RUNNING);
    uint64_t affected = 0;
    int rc;
    if (finish) {
        struct txo_param lead[] = {txo_p_str(txo_saga_status_name(TXO_SAGA_COMPLETED)),
                                   txo_p_str(r0->owner), txo_p_str(running)};
        rc = batch_exec(tx, SAGA_SQL_FINISH_MANY, lead, TXO_ARRAY_LEN(lead), b, pick, m, &affected,
                        err);
    } else {
        struct txo_param lead[] = {txo_p_i64(lease_us), txo_p_str(r0->owner), txo_p_str(running)};
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
    struct txo_error *errs; /* per pick: why outcome is not 0 */
    size_t *done;           /* the sagas whose outcome is 0 */
    size_t n_done;
    bool body_failed; /* the action itself failed (its own error, not a saga's) */
};

static int batch_step_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct batch_step_tx *t = arg;
    struct batch_saga *b = t->b;
    const struct saga_run *r0 = &b[t->pick[0]].r;
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
        const struct saga_run *r = &b[t->pick[k]].r;
        txo__saga_make_ctx(r, t->i, 1, false, NULL, &ctx[k]);
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
    for (size_t k = 0; k < t->m; k++)
        txo_error_init(&t->errs[k]);
    rc = sd->action(tx, cp, t->m, t->outcome, t->errs, err);
    if (rc != 0) {
        if (rc > 0)
            rc = txo_error_set(err, TXO_EINVAL, "%s returned %d (not a TXO_E* code)", sd->name, rc);
        t->body_failed = true;
        goto out;
    }
    for (size_t k = 0; k < t->m; k++)
        if (t->outcome[k] == 0)
            t->done[t->n_done++] = t->pick[k];
    if (t->n_done == 0)
        goto out;
    txo_crash_point("saga.batch.before_commit");
    rc = batch_fence(tx, b, t->done, t->n_done, t->finish, (int64_t)r0->opts.lease_s * 1000000,
                     sd->name, err);
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
        rc = txo__saga_call_hook(tx, &b[t->done[k]].r, r0->def->on_completed, TXO_SAGA_COMPLETED,
                                 err);
out:
    txo_free(ctx);
    txo_free(cp);
    return rc;
}

/* The local part of a batch of step i over b[pick[0..m)], whose steps are in `from` with
 * remote state `remote_from` (and whose calls, when the step has a remote part, were done):
 * the sagas it completes move on, recorded with `remote`; the others leave the batches (they
 * run alone). */
static void run_batch_step(struct batch_saga *b, const size_t *pick, size_t m, size_t i,
                           enum txo_step_status from, enum txo_remote_state remote_from,
                           enum txo_remote_state remote)
{
    const struct saga_run *r0 = &b[pick[0]].r;
    struct batch_step_tx t = {.b = b,
                              .pick = pick,
                              .m = m,
                              .i = i,
                              .from = from,
                              .remote_from = remote_from,
                              .remote = remote};
    t.finish = i + 1 == r0->def->n_steps;
    t.outcome = txo_calloc(m, sizeof(*t.outcome));
    t.errs = txo_calloc(m, sizeof(*t.errs));
    t.done = txo_calloc(m, sizeof(*t.done));
    struct txo_error err;
    txo_error_init(&err);
    int rc = t.outcome != NULL && t.errs != NULL && t.done != NULL
                 ? txo_db_transact(r0->db, TXO_ISO_READ_COMMITTED, batch_step_fn, &t, &err)
                 : TXO_ENOMEM;
    if (rc != 0) {
        TXO_LOG(txo_err_is_transient(rc) || t.body_failed ? TXO_LOG_INFO : TXO_LOG_WARN, "saga",
                "saga batch rolled back, its sagas run one by one",
                TXO_KV_STR("step", r0->def->steps[i].name), TXO_KV_U64("sagas", m),
                TXO_KV_STR("code", txo_err_name(rc)), TXO_KV_STR("error", err.msg));
        for (size_t k = 0; k < m; k++) {
            b[pick[k]].single = true;
            batch_left(&b[pick[k]], rc, err.msg);
        }
    } else {
        for (size_t k = 0; k < m; k++) {
            b[pick[k]].single = t.outcome[k] != 0;
            if (t.outcome[k] != 0)
                batch_left(&b[pick[k]], t.outcome[k],
                           t.errs[k].msg[0] != '\0' ? t.errs[k].msg : txo_strerror(t.outcome[k]));
        }
        for (size_t k = 0; k < t.n_done; k++) {
            struct saga_run *r = &b[t.done[k]].r;
            r->steps[i].status = TXO_STEP_COMPLETED;
            r->steps[i].remote = remote;
            if (t.finish)
                r->status = TXO_SAGA_COMPLETED;
        }
        TXO_LOG(TXO_LOG_DEBUG, "saga", "saga batch committed",
                TXO_KV_STR("step", r0->def->steps[i].name), TXO_KV_U64("sagas", m),
                TXO_KV_U64("done", t.n_done));
        txo_crash_point("saga.batch.after_commit");
    }
    txo_free(t.outcome);
    txo_free(t.errs);
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
    int *refused;          /* per pick: the guard's code, 0 when the call may be made */
    struct txo_error *why; /* per pick: the guard's reason (its own run records it) */
    size_t *in;            /* the sagas whose call is recorded (indexes into b) */
    size_t n_in;
};

static int batch_call_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct batch_call_tx *t = arg;
    struct batch_saga *b = t->b;
    const struct saga_run *r0 = &b[t->pick[0]].r;
    const struct txo_saga_step_def *sd = &r0->def->steps[t->i];
    unsigned order = (unsigned)t->i + 1;
    int rc = 0;
    t->n_in = 0;
    memset(t->refused, 0, t->m * sizeof(*t->refused));
    if (sd->guard != NULL) {
        for (size_t k = 0; k < t->m; k++)
            txo_error_init(&t->why[k]);
        txo_error_init(err);
        rc = sd->guard(tx, t->ctx, t->m, t->refused, t->why, err);
        if (rc > 0)
            rc = txo_error_set(err, TXO_EINVAL, "%s: guard returned %d (not a TXO_E* code)",
                               sd->name, rc);
        if (rc != 0)
            return rc;
    }
    for (size_t k = 0; k < t->m; k++) {
        if (t->refused[k] != 0)
            continue;
        const struct saga_run *r = &b[t->pick[k]].r;
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
    /* The calls' lease: the shortest of theirs (the try timeout, cut to what is left of each
     * saga's deadline), as a single call's is. */
    int64_t lease_us = INT64_MAX;
    for (size_t k = 0; k < t->n_in; k++) {
        struct saga_run *r = &b[t->in[k]].r;
        txo__saga_deadline_start(r, t->i);
        int64_t l = txo__saga_call_lease_us(r, t->i);
        if (l < lease_us)
            lease_us = l;
    }
    rc = batch_fence(tx, b, t->in, t->n_in, false, lease_us, sd->name, err);
    if (rc != 0)
        return rc;
    uint64_t affected = 0;
    char suffix[32];
    txo__saga_key_suffix(t->i, false, suffix, sizeof(suffix));
    struct txo_param steps[] = {txo_p_str(txo_step_status_name(TXO_STEP_RUNNING)),
                                txo_p_str(txo_remote_state_name(TXO_REMOTE_CALLING)),
                                txo_p_str(suffix),
                                sd->deadline_ms > 0 ? txo_p_i64((int64_t)sd->deadline_ms * 1000)
                                                    : txo_p_null(),
                                sd->try_timeout_ms > 0 ? txo_p_i64(lease_us) : txo_p_null(),
                                txo_p_i64(order),
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
    const struct saga_run *r0 = &b[pick[0]].r;
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
            txo__saga_call_key(&bs->r, i, false, bs->key);
            txo__saga_make_ctx(&bs->r, i, 1, false, bs->key, &ctx[k]);
            cp[k] = &ctx[k];
        }
        struct batch_call_tx t = {.b = b,
                                  .pick = pick,
                                  .m = m,
                                  .i = i,
                                  .ctx = cp,
                                  .refused = refused,
                                  .why = errs,
                                  .in = in};
        rc = txo_db_transact(r0->db, TXO_ISO_READ_COMMITTED, batch_call_fn, &t, &err);
        n_in = t.n_in;
    }
    if (rc != 0) {
        TXO_LOG(txo_err_is_transient(rc) ? TXO_LOG_INFO : TXO_LOG_WARN, "saga",
                "saga batch could not record its calls, its sagas run one by one",
                TXO_KV_STR("step", sd->name), TXO_KV_U64("sagas", m),
                TXO_KV_STR("code", txo_err_name(rc)), TXO_KV_STR("error", err.msg));
        for (size_t k = 0; k < m; k++) {
            b[pick[k]].single = true;
            b[pick[k]].r.in_try = false; /* no try was made: its own run's is its first */
        }
        goto out;
    }
    for (size_t k = 0; k < m; k++)
        if (refused[k] != 0) {
            b[pick[k]].single = true; /* its own run meets the guard and records why */
            b[pick[k]].r.in_try = false;
        }
    for (size_t k = 0; k < n_in; k++) {
        struct saga_run *r = &b[in[k]].r;
        r->steps[i].status = TXO_STEP_RUNNING;
        r->steps[i].remote = TXO_REMOTE_CALLING;
        r->in_call = r->in_try;
        if (r->in_call)
            txo_trace_child(&r->try_span, &r->call_span);
        txo__saga_make_ctx(r, i, 1, false, b[in[k]].key, &ctx[k]);
        cp[k] = &ctx[k];
        txo_error_init(&errs[k]);
    }
    int64_t call_start_us = txo_realtime_us();
    if (n_in > 0) {
        sd->remote(cp, n_in, rcs, errs);
        txo_crash_point("saga.batch.after_call");
    }
    char call_name[SAGA_STEP_NAME_MAX + 16];
    snprintf(call_name, sizeof(call_name), "%s call", sd->name);
    for (size_t k = 0; k < n_in; k++) {
        struct batch_saga *bs = &b[in[k]];
        struct saga_run *r = &bs->r;
        int crc = rcs[k];
        if (crc > 0)
            crc = txo_error_set(&errs[k], TXO_EINVAL, "%s: remote part returned %d", sd->name, crc);
        if (r->in_call)
            txo__saga_record_span(r, &r->call_span, r->try_span.span_id, call_name, TXO_SPAN_CLIENT,
                                  call_start_us, 1, crc, errs[k].msg);
        r->in_call = false;
        r->steps[i].remote = txo__saga_after_call(TXO_REMOTE_CALLING, crc);
        if (crc == 0) {
            done[n_done++] = in[k];
            continue;
        }
        batch_left(bs, crc, errs[k].msg);
        bs->single = true;
        r->steps[i].batch_tries = 1;
        bool stop = false;
        struct txo_error e;
        txo_error_init(&e);
        if (txo__saga_settle_failed_try(r, i, false, 1, true, r->steps[i].remote, true, crc,
                                        &errs[k], false, &stop, &e) != 0)
            TXO_LOG(TXO_LOG_INFO, "saga",
                    "saga batch could not record a failed call, its own run does",
                    TXO_KV_STR("saga_id", r->id), TXO_KV_STR("step", sd->name),
                    TXO_KV_STR("error", e.msg));
    }
    TXO_LOG(TXO_LOG_DEBUG, "saga", "saga batch calls made", TXO_KV_STR("step", sd->name),
            TXO_KV_U64("sagas", m), TXO_KV_U64("called", n_in), TXO_KV_U64("done", n_done));
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

int txo_saga_run_many(struct txo_db *db, const struct txo_saga_def *def, const char *const *ids,
                      size_t n, const struct txo_saga_opts *opts, void *user, int *rcs,
                      enum txo_saga_status *finals, struct txo_error *err)
{
    int rc = txo__saga_check_def(def, err);
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
        b[k].rc = txo__saga_run_setup(&b[k].r, db, def, ids[k], opts, user, &e);
        b[k].set_up = b[k].rc == 0;
        if (b[k].set_up)
            pick[m++] = k;
    }
    if (m > 0) {
        struct batch_acquire_tx a = {.b = b, .pick = pick, .m = m};
        struct txo_error e;
        txo_error_init(&e);
        if (txo_db_transact(db, TXO_ISO_READ_COMMITTED, batch_acquire_fn, &a, &e) != 0) {
            TXO_LOG(TXO_LOG_INFO, "saga", "saga batch could not take its leases",
                    TXO_KV_U64("sagas", m), TXO_KV_STR("error", e.msg));
            for (size_t k = 0; k < m; k++)
                b[pick[k]].acquired = false;
        }
        for (size_t k = 0; k < m; k++)
            if (b[pick[k]].acquired)
                txo__saga_count_expired_tries(&b[pick[k]].r);
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
        struct batch_trace bt;
        batch_trace_begin(b, pick, m, &bt);
        if (def->steps[step].remote != NULL)
            run_remote_batch_step(b, pick, m, step);
        else
            run_batch_step(b, pick, m, step, TXO_STEP_PENDING, TXO_REMOTE_NONE, TXO_REMOTE_NONE);
        batch_trace_end(b, pick, m, step, &bt);
    }
    /* What is left, alone: sagas out of the batches, compensation, and the sagas whose lease
     * the batch did not take (txo__saga_drive() tells why). */
    for (size_t k = 0; k < n; k++) {
        struct batch_saga *bs = &b[k];
        struct txo_error e;
        txo_error_init(&e);
        enum txo_saga_status final = TXO_SAGA_RUNNING;
        if (!bs->set_up) {
            /* rc set by txo__saga_run_setup */
        } else if (bs->acquired) {
            bs->rc = txo__saga_drive_run(&bs->r, &e);
            final = bs->r.status;
        } else {
            bs->rc = txo__saga_drive(db, def, ids[k], opts, user, false, &final, &e);
        }
        if (bs->rc != 0 && txo_err_is_transient(bs->rc) == false && bs->rc != TXO_ELEASELOST)
            TXO_LOG(TXO_LOG_DEBUG, "saga", "saga in a batch stopped", TXO_KV_STR("saga_id", ids[k]),
                    TXO_KV_STR("code", txo_err_name(bs->rc)), TXO_KV_STR("error", e.msg));
        if (rcs != NULL)
            rcs[k] = bs->rc;
        if (finals != NULL)
            finals[k] = final;
    }
out:
    for (size_t k = 0; b != NULL && k < n; k++)
        txo__saga_run_release(&b[k].r);
    txo_free(b);
    txo_free(pick);
    return rc;
}
