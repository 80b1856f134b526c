/*
 * The deadlines of a saga run (include/txo/saga.h; design note docs/saga.md, "Deadlines"): a
 * step's try timeout, a step's deadline over all its tries, and the saga's forward deadline.
 *
 * Design:
 *   - the deadlines live in the database, so every worker sees the same ones:
 *     saga_instances.deadline_at, set at creation; saga_steps.deadline_at, set by the step's
 *     first recorded try (phase (a), or the record of a failed try) and kept by later ones; and
 *     saga_steps.try_deadline, set with phase (a), cleared when the try is recorded
 *     (sql/migrations/0017_saga_deadlines.sql). Each is written by a statement that runs
 *     anyway (the insert of the instance, phase (a), the record of a failed try): no new
 *     statement and no index on the hot path;
 *   - a run reads what is left of them with the load it makes anyway (two columns computed by
 *     the database's clock) and from then on measures them with its own clock (the injected one
 *     in tests), so checking a deadline before each try costs nothing;
 *   - an expired try lets another worker take the saga over: the lease of a call is the try's
 *     deadline (cut to what is left of the step's and the saga's), not lease_s. A worker hung in
 *     a call therefore keeps the saga only until the call's deadline, and the resume poll that
 *     already exists (idx_saga_resume on lease_until) hands it to another worker, which counts
 *     the call as maybe done and calls again with the same key, or fails the step when its
 *     deadline passed. Why: a live but hung worker renews nothing, and a timeout that keeps
 *     everybody out for lease_s is no timeout; the lease is already the fence, so no second
 *     ownership rule is needed;
 *   - the hung worker is fenced as any worker that lost its lease: every write it makes carries
 *     owner = me and matches nothing once another worker took the saga (or finished it), so
 *     its late result rolls back and changes nothing. Its call, if it happened, is covered: the
 *     taker recorded the step UNKNOWN, and a step that may have been called is compensated;
 *   - the deadlines only stop the saga going forward: a compensation is never cut by them and
 *     keeps its own retry policy.
 *
 * Thread-safety: these read and write only the run they are given.
 */
#include "core/common.h"

#include "saga/saga_internal.h"
#include "txo/metrics.h"

#define NO_DEADLINE INT64_MAX

static const char *const deadline_names[] = {
    [TXO_DEADLINE_NONE] = "none",
    [TXO_DEADLINE_TRY] = "try",
    [TXO_DEADLINE_STEP] = "step",
    [TXO_DEADLINE_SAGA] = "saga",
};

const char *txo_saga_deadline_name(enum txo_saga_deadline d)
{
    return txo__name_of(deadline_names, TXO_ARRAY_LEN(deadline_names), (long)d);
}

static int64_t now_ms(const struct saga_run *r)
{
    return r->clock->now_ms(r->clock->arg);
}

enum txo_saga_deadline txo__saga_deadline_passed(const struct saga_run *r, size_t i)
{
    int64_t now = now_ms(r);
    if (r->steps[i].deadline_ms != NO_DEADLINE && now >= r->steps[i].deadline_ms)
        return TXO_DEADLINE_STEP;
    if (r->deadline_ms != NO_DEADLINE && now >= r->deadline_ms)
        return TXO_DEADLINE_SAGA;
    return TXO_DEADLINE_NONE;
}

void txo__saga_deadline_start(struct saga_run *r, size_t i)
{
    unsigned ms = r->def->steps[i].deadline_ms;
    if (ms > 0 && r->steps[i].deadline_ms == NO_DEADLINE)
        r->steps[i].deadline_ms = now_ms(r) + ms;
}

/* Milliseconds left before `deadline` (0 once passed); NO_DEADLINE for none. */
static int64_t left_ms(const struct saga_run *r, int64_t deadline)
{
    if (deadline == NO_DEADLINE)
        return NO_DEADLINE;
    int64_t left = deadline - now_ms(r);
    return left > 0 ? left : 0;
}

struct txo_param txo__saga_step_left_param(const struct saga_run *r, size_t i)
{
    int64_t left = left_ms(r, r->steps[i].deadline_ms);
    return left == NO_DEADLINE ? txo_p_null() : txo_p_i64(left * 1000);
}

int64_t txo__saga_call_lease_us(const struct saga_run *r, size_t i)
{
    unsigned try_ms = r->def->steps[i].try_timeout_ms;
    int64_t lease = try_ms > 0 ? (int64_t)try_ms : (int64_t)r->opts.lease_s * 1000;
    int64_t step = left_ms(r, r->steps[i].deadline_ms);
    int64_t saga = left_ms(r, r->deadline_ms);
    if (step < lease)
        lease = step;
    if (saga < lease)
        lease = saga;
    return lease * 1000;
}

/* A deadline `col` of row `row`, read as microseconds left, onto the run's clock. */
static int64_t loaded(const struct saga_run *r, const struct txo_rows *rows, size_t row, size_t col)
{
    if (txo_rows_is_null(rows, row, col))
        return NO_DEADLINE;
    return now_ms(r) + txo_rows_i64(rows, row, col) / 1000;
}

void txo__saga_load_deadlines(struct saga_run *r, const struct txo_rows *rows, const size_t *idx,
                              size_t n_rows)
{
    r->deadline_ms = NO_DEADLINE;
    for (size_t i = 0; i < r->def->n_steps; i++)
        r->steps[i].deadline_ms = NO_DEADLINE;
    for (size_t k = 0; k < n_rows; k++) {
        size_t row = idx != NULL ? idx[k] : k;
        if (k == 0)
            r->deadline_ms = loaded(r, rows, row, LOAD_SAGA_LEFT_US);
        if (txo_rows_is_null(rows, row, LOAD_STEP_ORDER))
            continue;
        int64_t order = txo_rows_i64(rows, row, LOAD_STEP_ORDER);
        if (order < 1 || order > (int64_t)r->def->n_steps)
            continue; /* txo__saga_load_steps refused it already */
        r->steps[order - 1].deadline_ms = loaded(r, rows, row, LOAD_STEP_LEFT_US);
        r->steps[order - 1].try_expired = !txo_rows_is_null(rows, row, LOAD_TRY_EXPIRED) &&
                                          txo_rows_i64(rows, row, LOAD_TRY_EXPIRED) != 0;
    }
}

void txo__saga_count_expired_tries(const struct saga_run *r)
{
    for (size_t i = 0; i < r->def->n_steps; i++) {
        if (!r->steps[i].try_expired)
            continue;
        TXO_LOG(TXO_LOG_WARN, "saga", "saga call past its try deadline, taken over",
                TXO_KV_STR("saga_id", r->id), TXO_KV_STR("type", r->def->type),
                TXO_KV_STR("step", r->def->steps[i].name));
        txo__saga_count_deadline(r, TXO_DEADLINE_TRY);
    }
}

void txo__saga_count_deadline(const struct saga_run *r, enum txo_saga_deadline kind)
{
    const char *labels[] = {txo_saga_deadline_name(kind), r->def->type};
    if (r->opts.deadlines != NULL)
        txo_metric_inc(r->opts.deadlines, labels);
}
