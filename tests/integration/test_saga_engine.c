/*
 * The saga engine against a real MariaDB: a toy three-step saga whose actions and
 * compensations write rows into a scratch table `effects` (and an outbox event each), with
 * failures injected through the `user` pointer. Checks what is persisted: saga and step rows,
 * effects that committed (or were rolled back), the order of compensations, leases, fencing.
 *
 * Backoff sleeps go through a fake clock, so nothing here sleeps.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testclock.h"
#include "testdb.h"
#include "testrun.h"
#include "testsaga.h"
#include "txo/txo.h"

#define N_STEPS 3

/* Failure injection and observations; passed to the engine as `user`. Steps are 1-based. */
struct probe {
    int fail_step;       /* action fails with TXO_EBUSINESS (after writing its effect) */
    int transient_step;  /* action fails with TXO_EUNAVAILABLE ... */
    int transient_times; /* ... this many times */
    int fail_comp_step;  /* compensation fails with TXO_EBUSINESS (after writing) */
    int steal_in_step;   /* action hands the saga to 'thief': through steal_db (another
                          * worker, committed at once) or else inside its own transaction */
    struct txo_db *steal_db;
    char saga_id[TXO_SAGA_ID_LEN];

    int action_calls[N_STEPS + 1];
    int comp_calls[N_STEPS + 1];
    unsigned last_attempt[N_STEPS + 1];
    int comp_order[2 * N_STEPS]; /* step numbers, in the order compensations were called */
    int n_comp;
    int completed_calls;
    int aborted_calls;
    enum txo_saga_status aborted_with;
    int bad_ctx; /* a context field was not what it should be */
};

struct fixture {
    struct testdb t;
    struct probe p;
    struct testclock fc;
    struct txo_db *thief; /* when set, every sleep of fc hands the saga to 'thief' */
    struct txo_clock clock;
    struct txo_saga_opts opts;
};

/* testclock's on_sleep: while f->thief is set, another worker takes the saga at each sleep. */
static void steal_on_sleep(struct testclock *c)
{
    struct fixture *f = c->user;
    if (f->thief == NULL)
        return;
    struct txo_param p[] = {txo_p_str(f->p.saga_id)};
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_exec(f->thief, "UPDATE saga_instances SET owner = 'thief' WHERE id = ?", p, 1, NULL,
                    &err) < 0)
        fail_msg("steal: %s", err.msg);
}

/* ---- the toy saga ------------------------------------------------------------------------ */

static int write_effect(struct txo_tx *tx, const struct txo_saga_ctx *ctx, const char *step,
                        const char *kind, struct txo_error *err)
{
    struct txo_param p[] = {txo_p_str(ctx->saga_id), txo_p_str(step), txo_p_str(kind)};
    return txo_tx_exec(tx,
                       "INSERT INTO effects (saga_id, step, kind) VALUES (?, ?, ?) "
                       "ON DUPLICATE KEY UPDATE n = n + 1",
                       p, 3, NULL, err);
}

static int write_event(struct txo_tx *tx, const struct txo_saga_ctx *ctx, const char *kind,
                       struct txo_error *err)
{
    char key[128];
    char type[64];
    snprintf(key, sizeof(key), "saga:%s:%s:%s", ctx->saga_id, ctx->step_name, kind);
    snprintf(type, sizeof(type), "%s%s", ctx->step_name, kind);
    struct txo_outbox_event ev = {
        .aggregate_type = "saga-test",
        .aggregate_id = "1",
        .event_type = type,
        .payload_json = "{}",
        .idempotency_key = key,
    };
    return txo_outbox_append(tx, &ev, TXO_OUTBOX_IGNORE_DUPLICATE, NULL, NULL, err);
}

static void check_ctx(const struct txo_saga_ctx *ctx)
{
    struct probe *p = ctx->user;
    if (strcmp(ctx->saga_id, p->saga_id) != 0 || strcmp(ctx->saga_type, "ToySaga") != 0 ||
        strncmp(ctx->correlation_id, "toy:", 4) != 0 || ctx->payload == NULL ||
        ctx->payload_len != strlen(ctx->payload) || ctx->state == NULL ||
        strcmp(ctx->state, ctx->payload) != 0 || ctx->step_index >= N_STEPS ||
        ctx->step_name == NULL || ctx->attempt == 0)
        p->bad_ctx++;
}

static int toy_action_one(struct txo_tx *tx, const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    struct probe *p = ctx->user;
    int step = (int)ctx->step_index + 1;
    check_ctx(ctx);
    p->action_calls[step]++;
    p->last_attempt[step] = ctx->attempt;
    int rc = write_effect(tx, ctx, ctx->step_name, "do", err);
    if (rc == 0)
        rc = write_event(tx, ctx, "Done", err);
    if (rc != 0)
        return rc;
    if (p->steal_in_step == step) {
        struct txo_param sp[] = {txo_p_str(ctx->saga_id)};
        const char *steal = "UPDATE saga_instances SET owner = 'thief' WHERE id = ?";
        if (p->steal_db != NULL)
            rc = txo_db_exec(p->steal_db, steal, sp, 1, NULL, err);
        else
            rc = txo_tx_exec(tx, steal, sp, 1, NULL, err);
        if (rc != 0)
            return rc;
    }
    if (p->fail_step == step)
        return txo_error_set(err, TXO_EBUSINESS, "no stock for %s", ctx->step_name);
    if (p->transient_step == step && p->transient_times > 0) {
        p->transient_times--;
        return txo_error_set(err, TXO_EUNAVAILABLE, "%s: service unavailable", ctx->step_name);
    }
    return 0;
}

static int toy_compensate_one(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                              struct txo_error *err)
{
    struct probe *p = ctx->user;
    int step = (int)ctx->step_index + 1;
    check_ctx(ctx);
    p->comp_calls[step]++;
    if (p->n_comp < (int)TXO_ARRAY_LEN(p->comp_order))
        p->comp_order[p->n_comp++] = step;
    int rc = write_effect(tx, ctx, ctx->step_name, "undo", err);
    if (rc == 0)
        rc = write_event(tx, ctx, "Undone", err);
    if (rc != 0)
        return rc;
    if (p->fail_comp_step == step)
        return txo_error_set(err, TXO_EBUSINESS, "cannot undo %s", ctx->step_name);
    return 0;
}

static int toy_completed(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                         enum txo_saga_status final_status, struct txo_error *err)
{
    struct probe *p = ctx->user;
    check_ctx(ctx);
    p->completed_calls++;
    return write_effect(tx, ctx, "saga", txo_saga_status_name(final_status), err);
}

static int toy_aborted(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                       enum txo_saga_status final_status, struct txo_error *err)
{
    struct probe *p = ctx->user;
    check_ctx(ctx);
    p->aborted_calls++;
    p->aborted_with = final_status;
    return write_effect(tx, ctx, "saga", txo_saga_status_name(final_status), err);
}

static int toy_decode(const char *payload, size_t len, void **state, struct txo_error *err)
{
    *state = txo_strndup(payload, len);
    return *state != NULL ? 0 : txo_error_set(err, TXO_ENOMEM, "decode");
}

static void toy_free_state(void *state)
{
    txo_free(state);
}

TESTSAGA_STEP(toy_action, toy_action_one)
TESTSAGA_STEP(toy_compensate, toy_compensate_one)

static const struct txo_saga_step_def toy_steps[N_STEPS] = {
    {.name = "Reserve", .action = toy_action, .compensate = toy_compensate},
    {.name = "Charge", .action = toy_action, .compensate = toy_compensate},
    {.name = "Ship", .action = toy_action, .compensate = toy_compensate},
};

static const struct txo_saga_def toy_def = {
    .type = "ToySaga",
    .steps = toy_steps,
    .n_steps = N_STEPS,
    .decode = toy_decode,
    .free_state = toy_free_state,
    .on_completed = toy_completed,
    .on_aborted = toy_aborted,
};

/* ---- helpers ----------------------------------------------------------------------------- */

static int setup(void **state)
{
    struct fixture *f = testdb_fixture_new(sizeof(*f), "saga", 0);
    testdb_exec(f->t.db, "CREATE TABLE effects ("
                         "  seq BIGINT AUTO_INCREMENT PRIMARY KEY,"
                         "  saga_id CHAR(36) NOT NULL,"
                         "  step VARCHAR(32) NOT NULL,"
                         "  kind VARCHAR(32) NOT NULL,"
                         "  n INT NOT NULL DEFAULT 1,"
                         "  UNIQUE KEY uq_effect (saga_id, step, kind)) ENGINE=InnoDB");
    testclock_init(&f->fc);
    f->fc.on_sleep = steal_on_sleep;
    f->fc.user = f;
    f->clock = f->fc.clock;
    testsaga_worker_opts(&f->opts, &f->clock, 100);
    *state = f;
    return 0;
}

struct create_arg {
    const struct txo_saga_def *def;
    const char *correlation_id;
    char *id;
    bool created;
};

static int create_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct create_arg *a = arg;
    return txo_saga_create(tx, a->def, a->correlation_id, "{\"order_id\": 7}", NULL, a->id,
                           &a->created, err);
}

static bool create(struct fixture *f, const char *correlation_id, char id[TXO_SAGA_ID_LEN])
{
    struct create_arg a = {&toy_def, correlation_id, id, false};
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_transact(f->t.db, TXO_ISO_READ_COMMITTED, create_fn, &a, &err) < 0)
        fail_msg("create %s: %s", correlation_id, err.msg);
    return a.created;
}

/* Creates toy:<n> and records its id in the probe. */
static void create_toy(struct fixture *f)
{
    assert_true(create(f, "toy:1", f->p.saga_id));
}

static int run(struct fixture *f, enum txo_saga_status *final, struct txo_error *err)
{
    txo_error_init(err);
    return txo_saga_run(f->t.db, &toy_def, f->p.saga_id, &f->opts, &f->p, final, err);
}

static void exec_id(struct fixture *f, const char *sql)
{
    struct txo_param p[] = {txo_p_str(f->p.saga_id)};
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_exec(f->t.db, sql, p, 1, NULL, &err) < 0)
        fail_msg("%s: %s", sql, err.msg);
}

static char *saga_col(struct fixture *f, const char *sql)
{
    struct txo_param p[] = {txo_p_str(f->p.saga_id)};
    return testdb_str(f->t.db, sql, p, 1);
}

static void assert_saga(struct fixture *f, const char *status, const char *owner)
{
    char *s = saga_col(f, "SELECT status FROM saga_instances WHERE id = ?");
    char *o = saga_col(f, "SELECT owner FROM saga_instances WHERE id = ?");
    assert_non_null(s);
    assert_string_equal(s, status);
    if (owner == NULL) { /* released: no owner and the lease's "none" time */
        assert_non_null(o);
        assert_string_equal(o, "");
        struct txo_param p[] = {txo_p_str(f->p.saga_id)};
        assert_int_equal(testdb_i64(f->t.db,
                                    "SELECT COUNT(*) FROM saga_instances WHERE id = ? "
                                    "AND lease_until = '1970-01-01 00:00:00'",
                                    p, 1),
                         1);
    } else {
        assert_non_null(o);
        assert_string_equal(o, owner);
    }
    txo_free(s);
    txo_free(o);
}

static char *step_col(struct fixture *f, int step, const char *col)
{
    char sql[128];
    snprintf(sql, sizeof(sql), "SELECT %s FROM saga_steps WHERE saga_id = ? AND step_order = ?",
             col);
    struct txo_param p[] = {txo_p_str(f->p.saga_id), txo_p_i64(step)};
    return testdb_str(f->t.db, sql, p, 2);
}

static void assert_step(struct fixture *f, int step, const char *status, int attempts)
{
    char *s = step_col(f, step, "status");
    char *a = step_col(f, step, "attempts");
    assert_non_null(s);
    if (strcmp(s, status) != 0)
        fail_msg("step %d is %s, expected %s", step, s, status);
    if (attempts >= 0)
        assert_int_equal(strtol(a, NULL, 10), attempts);
    txo_free(s);
    txo_free(a);
}

/* How many times effect (step, kind) was applied by committed transactions (0 = never). */
static int64_t effect(struct fixture *f, const char *step, const char *kind)
{
    struct txo_param p[] = {txo_p_str(f->p.saga_id), txo_p_str(step), txo_p_str(kind)};
    return testdb_i64(f->t.db,
                      "SELECT COALESCE(SUM(n), 0) FROM effects WHERE saga_id = ? AND step = ? "
                      "AND kind = ?",
                      p, 3);
}

static int64_t effect_seq(struct fixture *f, const char *step, const char *kind)
{
    struct txo_param p[] = {txo_p_str(f->p.saga_id), txo_p_str(step), txo_p_str(kind)};
    return testdb_i64(f->t.db,
                      "SELECT seq FROM effects WHERE saga_id = ? AND step = ? AND kind = ?", p, 3);
}

static int64_t count_sql(struct fixture *f, const char *sql)
{
    return testdb_i64(f->t.db, sql, NULL, 0);
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_all_steps_complete(void **state)
{
    struct fixture *f = *state;
    create_toy(f);
    assert_saga(f, "RUNNING", NULL);
    for (int s = 1; s <= N_STEPS; s++)
        assert_step(f, s, "PENDING", 0);

    struct txo_error err;
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(run(f, &final, &err), 0);
    assert_int_equal(final, TXO_SAGA_COMPLETED);
    assert_saga(f, "COMPLETED", NULL);
    for (int s = 1; s <= N_STEPS; s++) {
        assert_step(f, s, "COMPLETED", 1);
        assert_int_equal(f->p.action_calls[s], 1);
        assert_int_equal(f->p.last_attempt[s], 1);
        assert_int_equal(f->p.comp_calls[s], 0);
    }
    assert_int_equal(effect(f, "Reserve", "do"), 1);
    assert_int_equal(effect(f, "Charge", "do"), 1);
    assert_int_equal(effect(f, "Ship", "do"), 1);
    assert_int_equal(effect(f, "saga", "COMPLETED"), 1); /* on_completed committed */
    assert_int_equal(count_sql(f, "SELECT COUNT(*) FROM effects WHERE kind = 'undo'"), 0);
    assert_int_equal(count_sql(f, "SELECT COUNT(*) FROM outbox_events"), 3);
    assert_int_equal(f->p.completed_calls, 1);
    assert_int_equal(f->p.aborted_calls, 0);
    assert_int_equal(f->p.bad_ctx, 0);
    assert_int_equal(f->fc.sleeps, 0);

    /* A terminal saga is left alone. */
    final = TXO_SAGA_RUNNING;
    assert_int_equal(run(f, &final, &err), 0);
    assert_int_equal(final, TXO_SAGA_COMPLETED);
    assert_int_equal(f->p.action_calls[1], 1);
    assert_int_equal(f->p.completed_calls, 1);
    assert_saga(f, "COMPLETED", NULL);

    /* Inspection. */
    struct txo_saga_info info;
    assert_int_equal(txo_saga_load(f->t.db, f->p.saga_id, &info, &err), 0);
    assert_string_equal(info.id, f->p.saga_id);
    assert_string_equal(info.type, "ToySaga");
    assert_string_equal(info.correlation_id, "toy:1");
    assert_int_equal(info.status, TXO_SAGA_COMPLETED);
    assert_null(info.owner);
    assert_non_null(strstr(info.payload, "order_id"));
    assert_int_equal(info.n_steps, N_STEPS);
    for (size_t i = 0; i < N_STEPS; i++) {
        assert_int_equal(info.steps[i].step_order, i + 1);
        assert_string_equal(info.steps[i].name, toy_steps[i].name);
        assert_int_equal(info.steps[i].status, TXO_STEP_COMPLETED);
        assert_null(info.steps[i].error);
        assert_int_equal(info.steps[i].attempts, 1);
    }
    txo_saga_info_release(&info);

    struct txo_saga_counts counts;
    assert_int_equal(txo_saga_count(f->t.db, &counts, &err), 0);
    assert_int_equal(counts.by_status[TXO_SAGA_COMPLETED], 1);
    assert_int_equal(counts.by_status[TXO_SAGA_RUNNING], 0);
}

static void test_first_step_fails_nothing_to_compensate(void **state)
{
    struct fixture *f = *state;
    create_toy(f);
    f->p.fail_step = 1;
    struct txo_error err;
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(run(f, &final, &err), 0);
    assert_int_equal(final, TXO_SAGA_FAILED);
    assert_saga(f, "FAILED", NULL);
    assert_step(f, 1, "FAILED", 1);
    assert_step(f, 2, "PENDING", 0);
    assert_step(f, 3, "PENDING", 0);
    char *e = step_col(f, 1, "error");
    assert_non_null(e);
    assert_non_null(strstr(e, "TXO_EBUSINESS"));
    assert_non_null(strstr(e, "no stock for Reserve"));
    txo_free(e);
    assert_int_equal(f->p.action_calls[1], 1); /* permanent: no retry */
    assert_int_equal(f->p.action_calls[2], 0);
    for (int s = 1; s <= N_STEPS; s++)
        assert_int_equal(f->p.comp_calls[s], 0);
    assert_int_equal(effect(f, "Reserve", "do"), 0); /* rolled back with the failed try */
    assert_int_equal(f->p.aborted_calls, 1);
    assert_int_equal(f->p.aborted_with, TXO_SAGA_FAILED);
    assert_int_equal(effect(f, "saga", "FAILED"), 1);
    assert_int_equal(count_sql(f, "SELECT COUNT(*) FROM outbox_events"), 0);
    assert_int_equal(f->fc.sleeps, 0);
}

static void test_last_step_fails_compensates_in_reverse(void **state)
{
    struct fixture *f = *state;
    create_toy(f);
    f->p.fail_step = 3;
    struct txo_error err;
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(run(f, &final, &err), 0);
    assert_int_equal(final, TXO_SAGA_COMPENSATED);
    assert_saga(f, "COMPENSATED", NULL);
    assert_step(f, 1, "COMPENSATED", 2); /* one action try + one compensation try */
    assert_step(f, 2, "COMPENSATED", 2);
    assert_step(f, 3, "FAILED", 1);
    char *e = step_col(f, 3, "error");
    assert_non_null(e);
    assert_non_null(strstr(e, "no stock for Ship"));
    txo_free(e);

    /* Charge undone before Reserve; the failed step is not compensated. */
    assert_int_equal(f->p.n_comp, 2);
    assert_int_equal(f->p.comp_order[0], 2);
    assert_int_equal(f->p.comp_order[1], 1);
    assert_int_equal(f->p.comp_calls[3], 0);
    assert_true(effect_seq(f, "Charge", "undo") < effect_seq(f, "Reserve", "undo"));
    assert_int_equal(effect(f, "Reserve", "undo"), 1);
    assert_int_equal(effect(f, "Charge", "undo"), 1);
    assert_int_equal(effect(f, "Ship", "do"), 0);
    assert_int_equal(effect(f, "Ship", "undo"), 0);
    assert_int_equal(f->p.aborted_calls, 1);
    assert_int_equal(f->p.aborted_with, TXO_SAGA_COMPENSATED);
    assert_int_equal(effect(f, "saga", "COMPENSATED"), 1);
    /* Two step events and two compensation events went out through the outbox. */
    assert_int_equal(count_sql(f, "SELECT COUNT(*) FROM outbox_events"), 4);
    assert_int_equal(f->p.bad_ctx, 0);
}

static void test_failed_action_rolls_back_its_writes(void **state)
{
    struct fixture *f = *state;
    create_toy(f);
    f->p.fail_step = 2;
    struct txo_error err;
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(run(f, &final, &err), 0);
    assert_int_equal(final, TXO_SAGA_COMPENSATED);
    assert_int_equal(f->p.action_calls[2], 1);      /* it ran and wrote ... */
    assert_int_equal(effect(f, "Charge", "do"), 0); /* ... but its write was rolled back */
    assert_int_equal(count_sql(f, "SELECT COUNT(*) FROM outbox_events "
                                  "WHERE event_type = 'ChargeDone'"),
                     0);
    assert_int_equal(effect(f, "Reserve", "do"), 1);
    assert_int_equal(effect(f, "Reserve", "undo"), 1);
    assert_int_equal(f->p.comp_calls[2], 0);
    assert_int_equal(f->p.action_calls[3], 0);
    assert_step(f, 1, "COMPENSATED", 2);
    assert_step(f, 2, "FAILED", 1);
    assert_step(f, 3, "PENDING", 0);
    assert_saga(f, "COMPENSATED", NULL);
}

static void test_transient_failures_are_retried(void **state)
{
    struct fixture *f = *state;
    create_toy(f);
    f->p.transient_step = 2;
    f->p.transient_times = 2; /* < step_max_attempts (3) */
    struct txo_error err;
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(run(f, &final, &err), 0);
    assert_int_equal(final, TXO_SAGA_COMPLETED);
    assert_step(f, 1, "COMPLETED", 1);
    assert_step(f, 2, "COMPLETED", 3); /* attempts counts every try */
    assert_step(f, 3, "COMPLETED", 1);
    assert_int_equal(f->p.action_calls[2], 3);
    assert_int_equal(f->p.last_attempt[2], 3);
    assert_int_equal(effect(f, "Charge", "do"), 1); /* the failed tries left nothing */
    assert_int_equal(f->fc.sleeps, 2);              /* one backoff before each retry */
    assert_int_equal(f->fc.now_ms, 10 + 20);        /* base 10 ms, doubled, no jitter */
    char *e = step_col(f, 2, "error");              /* the last transient failure is kept */
    assert_non_null(e);
    assert_non_null(strstr(e, "TXO_EUNAVAILABLE"));
    txo_free(e);
    assert_int_equal(f->p.comp_calls[1] + f->p.comp_calls[2], 0);
    assert_saga(f, "COMPLETED", NULL);
}

/* The first step runs in the transaction that takes the lease; its transient failures are
 * recorded and retried like any other step's. */
static void test_transient_failures_of_first_step(void **state)
{
    struct fixture *f = *state;
    create_toy(f);
    f->p.transient_step = 1;
    f->p.transient_times = 2;
    struct txo_error err;
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(run(f, &final, &err), 0);
    assert_int_equal(final, TXO_SAGA_COMPLETED);
    assert_step(f, 1, "COMPLETED", 3);
    assert_step(f, 2, "COMPLETED", 1);
    assert_int_equal(f->p.action_calls[1], 3);
    assert_int_equal(f->p.last_attempt[1], 3);
    assert_int_equal(effect(f, "Reserve", "do"), 1);
    assert_int_equal(f->fc.sleeps, 2);
    assert_int_equal(f->fc.now_ms, 10 + 20);
    assert_saga(f, "COMPLETED", NULL);
}

/* A fresh saga of n local steps that succeeds costs n + 1 commits: the lease is taken in a
 * transaction of its own, and the saga completes (and releases the lease) with step n. */
static void test_successful_run_commits_once_per_step(void **state)
{
    struct fixture *f = *state;
    create_toy(f);
    struct txo_db_stats before, after;
    txo_db_get_stats(&before);
    struct txo_error err;
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(run(f, &final, &err), 0);
    txo_db_get_stats(&after);
    assert_int_equal(final, TXO_SAGA_COMPLETED);
    assert_int_equal(after.tx_commits - before.tx_commits, N_STEPS + 1);
    assert_int_equal(after.tx_retries - before.tx_retries, 0);
    assert_saga(f, "COMPLETED", NULL);
    assert_int_equal(effect(f, "saga", "COMPLETED"), 1);
}

static void test_transient_failures_exhausted_compensate(void **state)
{
    struct fixture *f = *state;
    create_toy(f);
    f->p.transient_step = 2;
    f->p.transient_times = 100;
    struct txo_error err;
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(run(f, &final, &err), 0);
    assert_int_equal(final, TXO_SAGA_COMPENSATED);
    assert_int_equal(f->p.action_calls[2], 3);
    assert_int_equal(f->fc.sleeps, 2);
    assert_step(f, 2, "FAILED", 3);
    assert_step(f, 1, "COMPENSATED", 2);
    assert_step(f, 3, "PENDING", 0);
    assert_int_equal(effect(f, "Reserve", "undo"), 1);
    assert_int_equal(effect(f, "Charge", "do"), 0);
    assert_saga(f, "COMPENSATED", NULL);
}

static void test_compensation_failure_then_retry(void **state)
{
    struct fixture *f = *state;
    create_toy(f);
    f->p.fail_step = 3;
    f->p.fail_comp_step = 1;
    struct txo_error err;
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(run(f, &final, &err), 0);
    assert_int_equal(final, TXO_SAGA_COMPENSATION_FAILED);
    assert_saga(f, "COMPENSATION_FAILED", NULL);
    assert_step(f, 3, "FAILED", 1);
    assert_step(f, 2, "COMPENSATED", 2);
    assert_step(f, 1, "COMPENSATION_FAILED", 2);
    char *e = step_col(f, 1, "error");
    assert_non_null(e);
    assert_non_null(strstr(e, "cannot undo Reserve"));
    txo_free(e);
    assert_int_equal(effect(f, "Reserve", "undo"), 0); /* the failed compensation rolled back */
    assert_int_equal(effect(f, "Charge", "undo"), 1);
    assert_int_equal(f->p.comp_calls[1], 1); /* permanent: not retried in this run */
    assert_int_equal(f->p.aborted_calls, 0);
    struct txo_saga_counts counts;
    assert_int_equal(txo_saga_count(f->t.db, &counts, &err), 0);
    assert_int_equal(counts.by_status[TXO_SAGA_COMPENSATION_FAILED], 1);
    assert_int_equal(counts.abandoned, 0); /* a retry is scheduled */

    /* Running it again does nothing: it needs an explicit retry. */
    assert_int_equal(run(f, &final, &err), 0);
    assert_int_equal(final, TXO_SAGA_COMPENSATION_FAILED);
    assert_int_equal(f->p.comp_calls[1], 1);

    /* The fault is fixed; the retry finishes the compensation. */
    f->p.fail_comp_step = 0;
    txo_error_init(&err);
    final = TXO_SAGA_RUNNING;
    assert_int_equal(txo_saga_retry(f->t.db, &toy_def, f->p.saga_id, &f->opts, &f->p, &final, &err),
                     0);
    assert_int_equal(final, TXO_SAGA_COMPENSATED);
    assert_saga(f, "COMPENSATED", NULL);
    assert_step(f, 1, "COMPENSATED", 3);
    assert_step(f, 2, "COMPENSATED", 2);
    assert_step(f, 3, "FAILED", 1);
    assert_int_equal(f->p.comp_calls[2], 1); /* not compensated twice */
    assert_int_equal(f->p.comp_calls[1], 2);
    assert_int_equal(effect(f, "Reserve", "undo"), 1); /* each compensation applied once */
    assert_int_equal(effect(f, "Charge", "undo"), 1);
    assert_int_equal(f->p.aborted_calls, 1);
    assert_int_equal(f->p.aborted_with, TXO_SAGA_COMPENSATED);

    /* Only a COMPENSATION_FAILED saga can be retried. */
    txo_error_init(&err);
    assert_int_equal(txo_saga_retry(f->t.db, &toy_def, f->p.saga_id, &f->opts, &f->p, &final, &err),
                     TXO_ESTATE);
    assert_non_null(strstr(err.msg, "COMPENSATED"));
    assert_saga(f, "COMPENSATED", NULL);
}

static void test_create_is_idempotent(void **state)
{
    struct fixture *f = *state;
    char id1[TXO_SAGA_ID_LEN];
    char id2[TXO_SAGA_ID_LEN];
    char id3[TXO_SAGA_ID_LEN];
    assert_true(create(f, "toy:42", id1));
    assert_int_equal(strlen(id1), 36);
    assert_int_equal(id1[14], '4'); /* UUID version 4 */
    assert_false(create(f, "toy:42", id2));
    assert_string_equal(id1, id2);
    assert_true(create(f, "toy:43", id3));
    assert_string_not_equal(id1, id3);
    assert_int_equal(count_sql(f, "SELECT COUNT(*) FROM saga_instances"), 2);
    assert_int_equal(count_sql(f, "SELECT COUNT(*) FROM saga_steps"), 2 * N_STEPS);

    char found[TXO_SAGA_ID_LEN];
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_saga_find(f->t.db, "ToySaga", "toy:42", found, &err), 0);
    assert_string_equal(found, id1);
    assert_int_equal(txo_saga_find(f->t.db, "ToySaga", "toy:44", found, &err), TXO_ENOTFOUND);
    assert_int_equal(txo_saga_find(f->t.db, "OtherSaga", "toy:42", found, &err), TXO_ENOTFOUND);
}

/* A run of a saga whose first step is done: it completes, running steps 2 and 3 once each. */
static void run_completes_from_step_2(struct fixture *f)
{
    struct txo_error err;
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(run(f, &final, &err), 0);
    assert_int_equal(final, TXO_SAGA_COMPLETED);
    assert_int_equal(f->p.action_calls[1], 0);
    assert_int_equal(f->p.action_calls[2], 1);
    assert_int_equal(f->p.action_calls[3], 1);
}

static void test_resume_after_crash(void **state)
{
    struct fixture *f = *state;
    create_toy(f);
    /* A worker completed step 1, was in the middle of step 2 and died. */
    exec_id(f, "UPDATE saga_steps SET status = 'COMPLETED', attempts = 1 "
               "WHERE saga_id = ? AND step_order = 1");
    exec_id(f, "UPDATE saga_steps SET status = 'RUNNING', attempts = 1 "
               "WHERE saga_id = ? AND step_order = 2");
    exec_id(f, "UPDATE saga_instances SET owner = 'dead-worker', "
               "lease_until = NOW(6) - INTERVAL 1 MINUTE WHERE id = ?");

    run_completes_from_step_2(f);
    assert_step(f, 1, "COMPLETED", 1);
    assert_step(f, 2, "COMPLETED", 2);
    assert_step(f, 3, "COMPLETED", 1);
    assert_saga(f, "COMPLETED", NULL);
}

/*
 * A running saga of a database migrated before the lease's columns had one size and the steps
 * were keyed by (saga_id, step_order): nobody's (owner and lease_until NULL), its first step
 * done. After the migrations it is free, keeps when it last moved and its steps, and runs on
 * to its end.
 */
static void test_migrations_keep_running_sagas(void **state)
{
    struct fixture *f = *state;
    create_toy(f);
    testdb_exec(f->t.db, "ALTER TABLE saga_instances MODIFY owner VARCHAR(128) NULL, "
                         "MODIFY lease_until DATETIME(6) NULL");
    testdb_exec(f->t.db, "ALTER TABLE saga_steps DROP PRIMARY KEY, "
                         "ADD COLUMN id BIGINT AUTO_INCREMENT PRIMARY KEY FIRST, "
                         "ADD UNIQUE KEY uq_saga_step (saga_id, step_order)");
    testdb_exec(f->t.db, "DELETE FROM txo_schema_migrations WHERE version IN "
                         "('0024_saga_lease_in_place.sql', '0025_saga_steps_key.sql')");
    exec_id(f, "UPDATE saga_steps SET status = 'COMPLETED', attempts = 1 "
               "WHERE saga_id = ? AND step_order = 1");
    exec_id(f, "UPDATE saga_instances SET owner = NULL, lease_until = NULL, "
               "updated_at = '2026-01-02 03:04:05' WHERE id = ?");

    struct txo_error err;
    txo_error_init(&err);
    unsigned applied = 0, total = 0;
    if (txo_migrate(f->t.db, &applied, &total, &err) != 0)
        fail_msg("txo_migrate: %s", err.msg);
    assert_int_equal(applied, 2);
    struct txo_param p[] = {txo_p_str(f->p.saga_id)};
    assert_int_equal(testdb_i64(f->t.db,
                                "SELECT COUNT(*) FROM saga_instances WHERE id = ? AND owner = '' "
                                "AND lease_until = '1970-01-01 00:00:00' "
                                "AND updated_at = '2026-01-02 03:04:05'",
                                p, 1),
                     1);
    assert_int_equal(TESTDB_COUNT(f->t.db, "information_schema.columns "
                                           "WHERE table_schema = DATABASE() AND table_name = "
                                           "'saga_instances' AND column_name IN ('owner', "
                                           "'lease_until') AND is_nullable = 'NO'"),
                     2);
    assert_int_equal(TESTDB_COUNT(f->t.db, "information_schema.statistics "
                                           "WHERE table_schema = DATABASE() AND table_name = "
                                           "'saga_steps' AND index_name = 'PRIMARY' AND "
                                           "column_name IN ('saga_id', 'step_order')"),
                     2);

    run_completes_from_step_2(f);
    for (int s = 1; s <= N_STEPS; s++)
        assert_step(f, s, "COMPLETED", 1);
    assert_saga(f, "COMPLETED", NULL);
}

static void test_live_lease_of_another_owner(void **state)
{
    struct fixture *f = *state;
    create_toy(f);
    exec_id(f, "UPDATE saga_instances SET owner = 'other-worker', "
               "lease_until = NOW(6) + INTERVAL 1 MINUTE WHERE id = ?");
    struct txo_error err;
    enum txo_saga_status final = TXO_SAGA_COMPLETED;
    assert_int_equal(run(f, &final, &err), TXO_ELEASELOST);
    assert_int_equal(err.code, TXO_ELEASELOST);
    assert_non_null(strstr(err.msg, "other-worker"));
    assert_int_equal(final, TXO_SAGA_COMPLETED); /* untouched on error */
    assert_saga(f, "RUNNING", "other-worker");
    for (int s = 1; s <= N_STEPS; s++) {
        assert_step(f, s, "PENDING", 0);
        assert_int_equal(f->p.action_calls[s], 0);
    }
    assert_int_equal(count_sql(f, "SELECT COUNT(*) FROM effects"), 0);
}

/*
 * Another worker takes the saga over (committed) while step 2's action runs: the statement
 * that ends step 2 is fenced, so step 2 rolls back whole (its effect too) and the run stops.
 */
static void test_fence_owner_changed_during_step(void **state)
{
    struct fixture *f = *state;
    create_toy(f);
    f->p.steal_in_step = 2;
    f->p.steal_db = testdb_connect(&f->t);
    struct txo_error err;
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    int rc = run(f, &final, &err);
    txo_db_close(f->p.steal_db);
    f->p.steal_db = NULL;
    assert_int_equal(rc, TXO_ELEASELOST);
    assert_non_null(strstr(err.msg, "lease lost"));
    assert_int_equal(f->p.action_calls[1], 1);
    assert_int_equal(f->p.action_calls[2], 1);
    assert_int_equal(f->p.action_calls[3], 0);
    assert_step(f, 1, "COMPLETED", 1);
    assert_step(f, 2, "PENDING", 0); /* not even recorded as a failed try: not ours any more */
    assert_saga(f, "RUNNING", "thief");
    assert_int_equal(effect(f, "Reserve", "do"), 1);
    assert_int_equal(effect(f, "Charge", "do"), 0);
    assert_int_equal(count_sql(f, "SELECT COUNT(*) FROM outbox_events"), 1);
}

/*
 * The owner changes inside the first step's own transaction: its closing fence fails, and the
 * step and its effect roll back (with the change of owner: the lease stays ours until it
 * expires, and the run stops).
 */
static void test_fence_owner_changed_in_first_step(void **state)
{
    struct fixture *f = *state;
    create_toy(f);
    f->p.steal_in_step = 1;
    struct txo_error err;
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(run(f, &final, &err), TXO_ELEASELOST);
    assert_non_null(strstr(err.msg, "lease lost"));
    assert_int_equal(f->p.action_calls[1], 1);
    assert_int_equal(f->p.action_calls[2], 0);
    assert_step(f, 1, "PENDING", 0);
    assert_saga(f, "RUNNING", "worker-1");
    assert_int_equal(count_sql(f, "SELECT COUNT(*) FROM effects"), 0);
    assert_int_equal(count_sql(f, "SELECT COUNT(*) FROM outbox_events"), 0);
}

/* Another connection takes the saga while we back off between tries of step 1. */
static void test_fence_owner_changed_between_tries(void **state)
{
    struct fixture *f = *state;
    create_toy(f);
    f->p.transient_step = 1;
    f->p.transient_times = 1;
    f->thief = testdb_connect(&f->t);
    struct txo_error err;
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    int rc = run(f, &final, &err);
    txo_db_close(f->thief);
    f->thief = NULL;
    assert_int_equal(rc, TXO_ELEASELOST);
    assert_int_equal(f->fc.sleeps, 1);
    assert_int_equal(f->p.action_calls[1], 2); /* the retry's action rolled back: */
    assert_step(f, 1, "RUNNING", 1);           /* only the failed try was recorded */
    assert_saga(f, "RUNNING", "thief");
    assert_int_equal(count_sql(f, "SELECT COUNT(*) FROM effects"), 0);
}

static void test_wrong_definition_and_unknown_saga(void **state)
{
    struct fixture *f = *state;
    create_toy(f);
    struct txo_error err;
    enum txo_saga_status final;

    struct txo_saga_def other = toy_def;
    other.type = "OtherSaga";
    txo_error_init(&err);
    assert_int_equal(txo_saga_run(f->t.db, &other, f->p.saga_id, &f->opts, &f->p, &final, &err),
                     TXO_EINVAL);
    assert_non_null(strstr(err.msg, "ToySaga"));

    struct txo_saga_def shorter = toy_def;
    shorter.n_steps = 2;
    txo_error_init(&err);
    assert_int_equal(txo_saga_run(f->t.db, &shorter, f->p.saga_id, &f->opts, &f->p, &final, &err),
                     TXO_EINVAL);
    assert_saga(f, "RUNNING", NULL); /* the lease taken in that transaction was rolled back */
    assert_int_equal(f->p.action_calls[1], 0);

    txo_error_init(&err);
    assert_int_equal(txo_saga_run(f->t.db, &toy_def, "00000000-0000-4000-8000-000000000000",
                                  &f->opts, &f->p, &final, &err),
                     TXO_ENOTFOUND);
    struct txo_saga_info info;
    assert_int_equal(txo_saga_load(f->t.db, "00000000-0000-4000-8000-000000000000", &info, &err),
                     TXO_ENOTFOUND);
}

/* A step with nothing to undo passes through COMPENSATING to COMPENSATED without a call. */
static void test_step_without_compensation(void **state)
{
    struct fixture *f = *state;
    static const struct txo_saga_step_def steps[N_STEPS] = {
        {.name = "Reserve", .action = toy_action, .compensate = NULL},
        {.name = "Charge", .action = toy_action, .compensate = toy_compensate},
        {.name = "Ship", .action = toy_action, .compensate = toy_compensate},
    };
    struct txo_saga_def def = toy_def;
    def.steps = steps;
    create_toy(f);
    f->p.fail_step = 3;
    struct txo_error err;
    txo_error_init(&err);
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(txo_saga_run(f->t.db, &def, f->p.saga_id, &f->opts, &f->p, &final, &err), 0);
    assert_int_equal(final, TXO_SAGA_COMPENSATED);
    assert_step(f, 1, "COMPENSATED", 2);
    assert_step(f, 2, "COMPENSATED", 2);
    assert_int_equal(f->p.comp_calls[1], 0);
    assert_int_equal(f->p.comp_calls[2], 1);
    assert_int_equal(effect(f, "Reserve", "do"), 1); /* nothing undid it: by definition */
    assert_saga(f, "COMPENSATED", NULL);
}

static bool has_id(const struct txo_saga_ref *refs, size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(refs[i].id, id) == 0 && strcmp(refs[i].type, "ToySaga") == 0)
            return true;
    }
    return false;
}

/* What a worker polls: unheld sagas of a status, resting long enough. */
static void test_list_due(void **state)
{
    struct fixture *f = *state;
    char fresh[TXO_SAGA_ID_LEN], held[TXO_SAGA_ID_LEN], expired[TXO_SAGA_ID_LEN];
    char done[TXO_SAGA_ID_LEN];
    assert_true(create(f, "toy:1", fresh));
    assert_true(create(f, "toy:2", held));
    assert_true(create(f, "toy:3", expired));
    assert_true(create(f, "toy:4", done));
    snprintf(f->p.saga_id, sizeof(f->p.saga_id), "%s", held);
    exec_id(f, "UPDATE saga_instances SET owner = 'other-worker', "
               "lease_until = NOW(6) + INTERVAL 1 MINUTE WHERE id = ?");
    snprintf(f->p.saga_id, sizeof(f->p.saga_id), "%s", expired);
    exec_id(f, "UPDATE saga_instances SET owner = 'dead-worker', "
               "lease_until = NOW(6) - INTERVAL 1 MINUTE WHERE id = ?");
    snprintf(f->p.saga_id, sizeof(f->p.saga_id), "%s", done);
    struct txo_error err;
    enum txo_saga_status final;
    assert_int_equal(run(f, &final, &err), 0);
    assert_int_equal(final, TXO_SAGA_COMPLETED);

    struct txo_saga_ref ids[8];
    size_t n = 99;
    txo_error_init(&err);
    assert_int_equal(txo_saga_list_due(f->t.db, TXO_SAGA_RUNNING, 8, ids, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_true(has_id(ids, n, fresh));
    assert_true(has_id(ids, n, expired));
    assert_int_equal(txo_saga_list_due(f->t.db, TXO_SAGA_RUNNING, 1, ids, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(txo_saga_list_due(f->t.db, TXO_SAGA_COMPENSATION_FAILED, 8, ids, &n, &err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(txo_saga_list_due(f->t.db, TXO_SAGA_COMPLETED, 8, ids, &n, &err), TXO_EINVAL);
}

/* The dashboard's list: every COMPENSATION_FAILED saga, the given-up ones first, then by when
 * their retry is due; nothing in another state. */
static void test_list_compensation_failed(void **state)
{
    struct fixture *f = *state;
    char later[TXO_SAGA_ID_LEN], soon[TXO_SAGA_ID_LEN], given_up[TXO_SAGA_ID_LEN];
    char running[TXO_SAGA_ID_LEN];
    assert_true(create(f, "toy:1", later));
    assert_true(create(f, "toy:2", soon));
    assert_true(create(f, "toy:3", given_up));
    assert_true(create(f, "toy:4", running));
    snprintf(f->p.saga_id, sizeof(f->p.saga_id), "%s", later);
    exec_id(f, "UPDATE saga_instances SET status = 'COMPENSATION_FAILED', "
               "retry_at = NOW(6) + INTERVAL 10 MINUTE WHERE id = ?");
    snprintf(f->p.saga_id, sizeof(f->p.saga_id), "%s", soon);
    exec_id(f, "UPDATE saga_instances SET status = 'COMPENSATION_FAILED', "
               "retry_at = NOW(6) + INTERVAL 1 MINUTE WHERE id = ?");
    snprintf(f->p.saga_id, sizeof(f->p.saga_id), "%s", given_up);
    exec_id(f, "UPDATE saga_instances SET status = 'COMPENSATION_FAILED', retry_at = NULL "
               "WHERE id = ?");

    struct txo_saga_ref refs[8];
    size_t n = 99;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_saga_list_compensation_failed(f->t.db, 8, refs, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_string_equal(refs[0].id, given_up);
    assert_string_equal(refs[1].id, soon);
    assert_string_equal(refs[2].id, later);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(refs[i].status, TXO_SAGA_COMPENSATION_FAILED);
        assert_string_equal(refs[i].type, "ToySaga");
    }
    /* The stuck list has only the given-up one: the others still have a retry coming. */
    assert_int_equal(txo_saga_list_stuck(f->t.db, 3600, 8, refs, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_string_equal(refs[0].id, given_up);
    assert_int_equal(txo_saga_list_compensation_failed(f->t.db, 1, refs, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(txo_saga_list_compensation_failed(f->t.db, 0, refs, &n, &err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(txo_saga_list_compensation_failed(NULL, 8, refs, &n, &err), TXO_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_steps_complete),
        cmocka_unit_test(test_first_step_fails_nothing_to_compensate),
        cmocka_unit_test(test_last_step_fails_compensates_in_reverse),
        cmocka_unit_test(test_failed_action_rolls_back_its_writes),
        cmocka_unit_test(test_transient_failures_are_retried),
        cmocka_unit_test(test_transient_failures_of_first_step),
        cmocka_unit_test(test_successful_run_commits_once_per_step),
        cmocka_unit_test(test_transient_failures_exhausted_compensate),
        cmocka_unit_test(test_compensation_failure_then_retry),
        cmocka_unit_test(test_create_is_idempotent),
        cmocka_unit_test(test_resume_after_crash),
        cmocka_unit_test(test_migrations_keep_running_sagas),
        cmocka_unit_test(test_live_lease_of_another_owner),
        cmocka_unit_test(test_fence_owner_changed_during_step),
        cmocka_unit_test(test_fence_owner_changed_in_first_step),
        cmocka_unit_test(test_fence_owner_changed_between_tries),
        cmocka_unit_test(test_wrong_definition_and_unknown_saga),
        cmocka_unit_test(test_step_without_compensation),
        cmocka_unit_test(test_list_due),
        cmocka_unit_test(test_list_compensation_failed),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, testdb_free_state, NULL, NULL);
}
