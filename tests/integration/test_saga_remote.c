/*
 * Remote step parts against a real MariaDB: a saga Reserve (local) -> Charge (remote + local)
 * -> Ship (remote + local) whose remote parts return scripted results, and the facts the
 * engine keeps about them (saga_steps.remote_state, error_code) and hands to on_aborted.
 *
 * What must hold:
 *   - the call runs with no transaction open and no row locked (another connection updates
 *     the saga's and the business rows meanwhile, with a 1 s lock wait);
 *   - a deadlock in the local part after a successful call re-runs the local part, not the call;
 *   - a call that may have taken effect (timed out at any try, or done while the local part
 *     failed) is compensated, also when later tries were refused; a refused call is not;
 *   - a call found in flight after a crash counts as "may have taken effect", and the step
 *     ends with remote state UNKNOWN, never CALLING, whatever ends it: the call refused, its
 *     guard refusing the next try, a definition without the remote part, a compensation;
 *   - COMPENSATION_FAILED sagas the engine gave up on never stand in front of a new failure.
 *
 * Backoff sleeps go through a fake clock.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "saga/saga_sql.h"
#include "testclock.h"
#include "testdb.h"
#include "testrun.h"
#include "testsaga.h"
#include "txo/txo.h"

#define N_STEPS   3
#define MAX_CALLS 8

struct probe {
    char saga_id[TXO_SAGA_ID_LEN];
    /* Scripted results of the remote calls of each step (1-based), in order; 0 past the end. */
    int remote_rc[N_STEPS + 1][MAX_CALLS];
    int remote_calls[N_STEPS + 1];
    int undo_calls[N_STEPS + 1];
    int undo_rc[N_STEPS + 1];  /* the remote undo's result */
    int guard_rc[N_STEPS + 1]; /* the guard refuses with this code (0: lets the call go) */
    int guard_calls[N_STEPS + 1];
    char last_key[N_STEPS + 1][96];
    char last_undo_key[N_STEPS + 1][96];
    int action_calls[N_STEPS + 1];
    int comp_calls[N_STEPS + 1];
    int action_fail[N_STEPS + 1];   /* the local part fails with this code (0: no) */
    int deadlock_once[N_STEPS + 1]; /* the local part returns TXO_EDEADLOCK the first time */
    bool probe_locks;               /* Charge's call checks that nothing is locked */
    const struct testdb *t;
    int lock_probe_ok; /* updates done by another connection during the call */
    /* What on_aborted was told. */
    int aborted_calls;
    int failed_step, failed_code;
    bool failed_remote_maybe;
    char failed_name[32];
};

struct fixture {
    struct testdb t;
    struct probe p;
    struct testclock clock;
    struct txo_saga_opts opts;
};

static int action_one(struct txo_tx *tx, const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    struct probe *p = ctx->user;
    int step = (int)ctx->step_index + 1;
    p->action_calls[step]++;
    int rc = testsaga_effect(tx, ctx, "do", err);
    if (rc != 0)
        return rc;
    if (p->deadlock_once[step] > 0) {
        p->deadlock_once[step]--;
        return txo_error_set(err, TXO_EDEADLOCK, "injected deadlock in %s", ctx->step_name);
    }
    if (p->action_fail[step] != 0)
        return txo_error_set(err, p->action_fail[step], "%s refused locally", ctx->step_name);
    return 0;
}

static int compensate_one(struct txo_tx *tx, const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    struct probe *p = ctx->user;
    p->comp_calls[ctx->step_index + 1]++;
    return testsaga_effect(tx, ctx, "undo", err);
}

/* Another connection updates the saga's rows and the business row of step 1 while the call
 * runs: with a 1 s lock wait, any lock our worker held would fail them. */
static void probe_no_locks(struct probe *p)
{
    struct txo_db *other = testdb_connect(p->t);
    struct txo_error err;
    txo_error_init(&err);
    struct txo_param id[] = {txo_p_str(p->saga_id)};
    int ok = txo_db_exec_raw(other, "SET SESSION innodb_lock_wait_timeout = 1", &err) == 0;
    ok = ok && txo_db_exec(other,
                           "UPDATE saga_instances SET updated_at = NOW(6) + INTERVAL 1 SECOND "
                           "WHERE id = ?",
                           id, 1, NULL, &err) == 0;
    ok = ok && txo_db_exec(other,
                           "UPDATE saga_steps SET updated_at = NOW(6) + INTERVAL 1 SECOND "
                           "WHERE saga_id = ?",
                           id, 1, NULL, &err) == 0;
    ok = ok &&
         txo_db_exec(other, "UPDATE effects SET n = n WHERE saga_id = ?", id, 1, NULL, &err) == 0;
    if (!ok)
        print_error("lock probe: %s\n", err.msg);
    p->lock_probe_ok = ok;
    txo_db_close(other);
}

static int remote_one(const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    struct probe *p = ctx->user;
    int step = (int)ctx->step_index + 1;
    int n = p->remote_calls[step]++;
    snprintf(p->last_key[step], sizeof(p->last_key[step]), "%s", ctx->idempotency_key);
    if (p->probe_locks && step == 2)
        probe_no_locks(p);
    int rc = n < MAX_CALLS ? p->remote_rc[step][n] : 0;
    return rc == 0
               ? 0
               : txo_error_set(err, rc, "%s call %d: %s", ctx->step_name, n + 1, txo_err_name(rc));
}

static int remote_undo_one(const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    struct probe *p = ctx->user;
    int step = (int)ctx->step_index + 1;
    p->undo_calls[step]++;
    snprintf(p->last_undo_key[step], sizeof(p->last_undo_key[step]), "%s", ctx->idempotency_key);
    int rc = p->undo_rc[step];
    return rc == 0 ? 0 : txo_error_set(err, rc, "undo of %s refused", ctx->step_name);
}

static int guard_one(struct txo_tx *tx, const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    struct probe *p = ctx->user;
    int step = (int)ctx->step_index + 1;
    p->guard_calls[step]++;
    if (p->guard_rc[step] != 0)
        return txo_error_set(err, p->guard_rc[step], "%s: order no longer open", ctx->step_name);
    return testsaga_effect(tx, ctx, "guard", err); /* written in phase (a)'s transaction */
}

static int on_aborted(struct txo_tx *tx, const struct txo_saga_ctx *ctx, enum txo_saga_status final,
                      struct txo_error *err)
{
    (void)tx;
    (void) final;
    (void)err;
    struct probe *p = ctx->user;
    p->aborted_calls++;
    p->failed_step = ctx->failed_step;
    p->failed_code = ctx->failed_code;
    p->failed_remote_maybe = ctx->failed_remote_maybe;
    snprintf(p->failed_name, sizeof(p->failed_name), "%s",
             ctx->failed_step_name != NULL ? ctx->failed_step_name : "");
    return 0;
}

TESTSAGA_STEP(action, action_one)
TESTSAGA_STEP(compensate, compensate_one)
TESTSAGA_STEP(guard, guard_one)
TESTSAGA_REMOTE(remote, remote_one)
TESTSAGA_REMOTE(remote_undo, remote_undo_one)

static const struct txo_saga_step_def steps[N_STEPS] = {
    {.name = "Reserve", .action = action, .compensate = compensate},
    {.name = "Charge",
     .action = action,
     .compensate = compensate,
     .remote = remote,
     .remote_compensate = remote_undo,
     .guard = guard},
    {.name = "Ship",
     .action = action,
     .compensate = compensate,
     .remote = remote,
     .remote_compensate = remote_undo},
};

static const struct txo_saga_def def = {
    .type = "RemoteSaga",
    .steps = steps,
    .n_steps = N_STEPS,
    .on_aborted = on_aborted,
};

/* The same saga as run by a worker without the services configured: no remote parts. */
static const struct txo_saga_step_def local_steps[N_STEPS] = {
    {.name = "Reserve", .action = action, .compensate = compensate},
    {.name = "Charge", .action = action, .compensate = compensate},
    {.name = "Ship", .action = action, .compensate = compensate},
};

static const struct txo_saga_def local_def = {
    .type = "RemoteSaga",
    .steps = local_steps,
    .n_steps = N_STEPS,
    .on_aborted = on_aborted,
};

/* ---- fixture and helpers ---- */

static int setup(void **state)
{
    struct fixture *f = testdb_fixture_new(sizeof(*f), "sagaremote", 0);
    testsaga_create_effects(f->t.db);
    testclock_init(&f->clock);
    testsaga_worker_opts(&f->opts, &f->clock.clock, 10);
    f->p.t = &f->t;
    f->p.failed_step = -2;
    *state = f;
    return 0;
}

struct create_arg {
    const char *correlation;
    char *id;
};

static int create_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct create_arg *a = arg;
    return txo_saga_create(tx, &def, a->correlation, "{}", NULL, a->id, NULL, err);
}

static void create_saga(struct fixture *f, const char *correlation, char id[TXO_SAGA_ID_LEN])
{
    struct create_arg a = {correlation, id};
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_transact(f->t.db, TXO_ISO_READ_COMMITTED, create_fn, &a, &err) != 0)
        fail_msg("create: %s", err.msg);
}

static enum txo_saga_status run_def(struct fixture *f, const struct txo_saga_def *d)
{
    struct txo_error err;
    txo_error_init(&err);
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    int rc = txo_saga_run(f->t.db, d, f->p.saga_id, &f->opts, &f->p, &final, &err);
    if (rc != 0)
        fail_msg("txo_saga_run: %s (%s)", txo_err_name(rc), err.msg);
    return final;
}

static enum txo_saga_status run(struct fixture *f)
{
    return run_def(f, &def);
}

static char *step_str(struct fixture *f, int step, const char *col)
{
    return testsaga_step_col(f->t.db, f->p.saga_id, step, col);
}

static void assert_step(struct fixture *f, int step, const char *status, const char *remote)
{
    testsaga_assert_step(f->t.db, f->p.saga_id, step, status, remote);
}

static int64_t effects(struct fixture *f, const char *step, const char *kind)
{
    return testsaga_effects(f->t.db, f->p.saga_id, step, kind);
}

/* Runs statement sql with the fixture's saga id bound. */
static void exec_id(struct fixture *f, const char *sql)
{
    struct txo_param p[] = {txo_p_str(f->p.saga_id)};
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_exec(f->t.db, sql, p, 1, NULL, &err) != 0)
        fail_msg("%s: %s", sql, err.msg);
}

/* ---- tests ---- */

static void test_calls_done_complete_the_saga(void **state)
{
    struct fixture *f = *state;
    create_saga(f, "r:1", f->p.saga_id);
    f->p.probe_locks = true;
    assert_int_equal(run(f), TXO_SAGA_COMPLETED);
    assert_true(f->p.lock_probe_ok); /* nothing was locked while Charge's call ran */
    assert_step(f, 1, "COMPLETED", "NONE");
    assert_step(f, 2, "COMPLETED", "DONE");
    assert_step(f, 3, "COMPLETED", "DONE");
    assert_int_equal(f->p.remote_calls[2], 1);
    assert_int_equal(f->p.remote_calls[3], 1);
    char key[96];
    snprintf(key, sizeof(key), "%s:2:do", f->p.saga_id);
    assert_string_equal(f->p.last_key[2], key);
    char *stored = step_str(f, 2, "remote_key");
    assert_string_equal(stored, key); /* recorded in phase (a), before the call */
    txo_free(stored);
    char *attempts = step_str(f, 2, "attempts");
    assert_string_equal(attempts, "1"); /* phase (a) counted the try, (c) did not again */
    txo_free(attempts);
}

/* A deadlock in the local part after the call re-runs the local part only. */
static void test_deadlock_after_call_does_not_call_again(void **state)
{
    struct fixture *f = *state;
    create_saga(f, "r:1", f->p.saga_id);
    f->p.deadlock_once[2] = 1;
    assert_int_equal(run(f), TXO_SAGA_COMPLETED);
    assert_int_equal(f->p.remote_calls[2], 1);
    assert_int_equal(f->p.action_calls[2], 2);
    assert_int_equal(effects(f, "Charge", "do"), 1); /* the first local try rolled back */
    assert_step(f, 2, "COMPLETED", "DONE");
}

/* Every try timed out: the charge may have happened, so it is undone; on_aborted knows it. */
static void test_unknown_outcome_is_compensated(void **state)
{
    struct fixture *f = *state;
    create_saga(f, "r:1", f->p.saga_id);
    for (int i = 0; i < 3; i++)
        f->p.remote_rc[2][i] = TXO_ETIMEOUT;
    assert_int_equal(run(f), TXO_SAGA_COMPENSATED);
    assert_int_equal(f->p.remote_calls[2], 3);
    assert_int_equal(f->p.action_calls[2], 0); /* the local part never ran */
    assert_int_equal(f->p.undo_calls[2], 1);
    char key[96];
    snprintf(key, sizeof(key), "%s:2:undo", f->p.saga_id);
    assert_string_equal(f->p.last_undo_key[2], key);
    assert_int_equal(f->p.comp_calls[2], 1);
    assert_int_equal(f->p.comp_calls[1], 1);
    assert_int_equal(f->p.remote_calls[3], 0);
    assert_step(f, 2, "COMPENSATED", "UNKNOWN");
    assert_step(f, 1, "COMPENSATED", "NONE");
    assert_int_equal(f->p.aborted_calls, 1);
    assert_int_equal(f->p.failed_step, 1);
    assert_string_equal(f->p.failed_name, "Charge");
    assert_int_equal(f->p.failed_code, TXO_ETIMEOUT);
    assert_true(f->p.failed_remote_maybe);
    char *code = step_str(f, 2, "error_code");
    assert_int_equal(strtol(code, NULL, 10), TXO_ETIMEOUT);
    txo_free(code);
}

/* The first try's outcome is unknown; the later ones are refused by an open breaker
 * (transient, no effect): the unknown is not erased, so the step is still undone. */
static void test_unknown_then_refused_stays_unknown(void **state)
{
    struct fixture *f = *state;
    create_saga(f, "r:1", f->p.saga_id);
    f->p.remote_rc[2][0] = TXO_EUNKNOWN;
    f->p.remote_rc[2][1] = TXO_EUNAVAILABLE;
    f->p.remote_rc[2][2] = TXO_EUNAVAILABLE;
    assert_int_equal(run(f), TXO_SAGA_COMPENSATED);
    assert_step(f, 2, "COMPENSATED", "UNKNOWN");
    assert_int_equal(f->p.undo_calls[2], 1);
    assert_int_equal(f->p.failed_code, TXO_EUNAVAILABLE); /* the last error, for the record */
    assert_true(f->p.failed_remote_maybe);
}

/* The guard refuses (the order was cancelled): the call is never made nor recorded, the step
 * fails with nothing to undo, and what came before is undone. */
static void test_guard_refuses_before_the_call(void **state)
{
    struct fixture *f = *state;
    create_saga(f, "r:1", f->p.saga_id);
    f->p.guard_rc[2] = TXO_EBUSINESS;
    assert_int_equal(run(f), TXO_SAGA_COMPENSATED);
    assert_int_equal(f->p.guard_calls[2], 1);
    assert_int_equal(f->p.remote_calls[2], 0);
    assert_int_equal(f->p.undo_calls[2], 0);
    assert_step(f, 2, "FAILED", "NONE");
    char *key = step_str(f, 2, "remote_key");
    assert_null(key); /* phase (a) rolled back with the guard */
    assert_int_equal(effects(f, "Charge", "guard"), 0);
    assert_int_equal(f->p.comp_calls[1], 1);
    assert_int_equal(f->p.failed_code, TXO_EBUSINESS);
    assert_false(f->p.failed_remote_maybe);
}

/* A definite "no": nothing happened, so nothing is undone for that step. */
static void test_refused_call_is_not_compensated(void **state)
{
    struct fixture *f = *state;
    create_saga(f, "r:1", f->p.saga_id);
    f->p.remote_rc[2][0] = TXO_EBUSINESS;
    assert_int_equal(run(f), TXO_SAGA_COMPENSATED);
    assert_int_equal(f->p.remote_calls[2], 1);
    assert_int_equal(f->p.undo_calls[2], 0);
    assert_int_equal(f->p.comp_calls[2], 0);
    assert_int_equal(f->p.comp_calls[1], 1);
    assert_step(f, 2, "FAILED", "NONE");
    assert_false(f->p.failed_remote_maybe);
    assert_int_equal(f->p.failed_code, TXO_EBUSINESS);
}

/* The call took effect but the local part cannot commit (the order was cancelled meanwhile):
 * the step failed, and its call is undone. */
static void test_done_call_with_failed_local_part_is_compensated(void **state)
{
    struct fixture *f = *state;
    create_saga(f, "r:1", f->p.saga_id);
    f->p.action_fail[3] = TXO_EBUSINESS;
    assert_int_equal(run(f), TXO_SAGA_COMPENSATED);
    assert_int_equal(f->p.remote_calls[3], 1);
    assert_int_equal(f->p.undo_calls[3], 1);
    assert_int_equal(f->p.undo_calls[2], 1);
    assert_int_equal(effects(f, "Ship", "do"), 0);
    assert_step(f, 3, "COMPENSATED", "DONE");
    assert_step(f, 2, "COMPENSATED", "DONE");
    assert_int_equal(f->p.failed_step, 2);
}

/* A worker died during Charge's call (step RUNNING, remote CALLING, lease expired): whatever
 * the next try learns, the first call may have happened. */
static void test_call_in_flight_at_a_crash_counts_as_unknown(void **state)
{
    struct fixture *f = *state;
    create_saga(f, "r:1", f->p.saga_id);
    exec_id(f, "UPDATE saga_steps SET status = IF(step_order = 1, 'COMPLETED', 'RUNNING'), "
               "attempts = 1, remote_state = IF(step_order = 1, 'NONE', 'CALLING') "
               "WHERE saga_id = ? AND step_order <= 2");
    exec_id(f, "UPDATE saga_instances SET owner = 'dead-worker', "
               "lease_until = NOW(6) - INTERVAL 1 SECOND WHERE id = ?");
    f->p.remote_rc[2][0] = TXO_EBUSINESS; /* the service now says no */
    assert_int_equal(run(f), TXO_SAGA_COMPENSATED);
    assert_step(f, 2, "COMPENSATED", "UNKNOWN");
    assert_int_equal(f->p.undo_calls[2], 1);
}

/* Runs the saga in a child killed right after Charge's call (crash point), then expires its
 * lease: Charge is left RUNNING with its call CALLING. */
static void crash_in_charge_call(struct fixture *f)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct txo_db *db = testdb_connect(&f->t);
        txo_crash_point_set("saga.step.after_call", 0);
        enum txo_saga_status final = TXO_SAGA_RUNNING;
        struct txo_error err;
        txo_error_init(&err);
        int rc = txo_saga_run(db, &def, f->p.saga_id, &f->opts, &f->p, &final, &err);
        _exit(rc == 0 ? 3 : 4); /* not reached when the crash point fires */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_step(f, 1, "COMPLETED", "NONE");
    assert_step(f, 2, "RUNNING", "CALLING");
    exec_id(f, "UPDATE saga_instances SET lease_until = NOW(6) - INTERVAL 1 SECOND WHERE id = ?");
}

/* A worker died during Charge's call, and the next try is refused by the guard (the customer
 * cancelled meanwhile): never called again, but the first call may have happened, so the step
 * is undone remotely and ends UNKNOWN. */
static void test_crash_in_a_call_then_guard_refuses_ends_unknown(void **state)
{
    struct fixture *f = *state;
    create_saga(f, "r:1", f->p.saga_id);
    crash_in_charge_call(f);
    f->p.guard_rc[2] = TXO_EBUSINESS;
    assert_int_equal(run(f), TXO_SAGA_COMPENSATED);
    assert_int_equal(f->p.remote_calls[2], 0);
    assert_int_equal(f->p.guard_calls[2], 1);
    assert_step(f, 2, "COMPENSATED", "UNKNOWN");
    assert_int_equal(f->p.undo_calls[2], 1);
    assert_step(f, 1, "COMPENSATED", "NONE");
    assert_int_equal(f->p.failed_step, 1);
    assert_int_equal(f->p.failed_code, TXO_EBUSINESS);
    assert_true(f->p.failed_remote_maybe);
}

/* The same crash, resumed by a worker whose definition has no remote part (its services are
 * not configured): the step is finished locally, and its record still says the call may have
 * happened, whether the local part completes or is refused. */
static void test_crash_in_a_call_then_no_remote_part_ends_unknown(void **state)
{
    struct fixture *f = *state;
    create_saga(f, "r:1", f->p.saga_id);
    crash_in_charge_call(f);
    f->p.action_fail[2] = TXO_EBUSINESS;
    assert_int_equal(run_def(f, &local_def), TXO_SAGA_COMPENSATED);
    assert_step(f, 2, "COMPENSATED", "UNKNOWN");
    assert_true(f->p.failed_remote_maybe);

    create_saga(f, "r:2", f->p.saga_id);
    crash_in_charge_call(f);
    f->p.action_fail[2] = 0;
    assert_int_equal(run_def(f, &local_def), TXO_SAGA_COMPLETED);
    assert_step(f, 2, "COMPLETED", "UNKNOWN");
    assert_int_equal(testdb_i64(f->t.db,
                                "SELECT COUNT(*) FROM saga_steps WHERE remote_state = 'CALLING'",
                                NULL, 0),
                     0);
}

/* A step left FAILED with its call CALLING (as an earlier version of the engine recorded a
 * refused retry): its compensation records UNKNOWN. */
static void test_failed_step_found_calling_is_compensated_unknown(void **state)
{
    struct fixture *f = *state;
    create_saga(f, "r:1", f->p.saga_id);
    exec_id(f, "UPDATE saga_steps SET status = IF(step_order = 1, 'COMPLETED', 'FAILED'), "
               "attempts = 1, remote_state = IF(step_order = 1, 'NONE', 'CALLING') "
               "WHERE saga_id = ? AND step_order <= 2");
    exec_id(f, "UPDATE saga_instances SET status = 'COMPENSATING', owner = 'dead-worker', "
               "lease_until = NOW(6) - INTERVAL 1 SECOND WHERE id = ?");
    assert_int_equal(run(f), TXO_SAGA_COMPENSATED);
    assert_step(f, 2, "COMPENSATED", "UNKNOWN");
    assert_int_equal(f->p.undo_calls[2], 1);
    assert_step(f, 1, "COMPENSATED", "NONE");
}

/* Fifty sagas the engine gave up on, older than anything else, and one new failure: the new
 * one is listed (and retried), however many given-up ones there are. */
static void test_given_up_sagas_never_starve_a_new_failure(void **state)
{
    struct fixture *f = *state;
    for (int i = 0; i < 50; i++) {
        char corr[32], id[TXO_SAGA_ID_LEN];
        snprintf(corr, sizeof(corr), "old:%d", i);
        create_saga(f, corr, id);
    }
    testdb_exec(f->t.db, "UPDATE saga_instances SET status = 'COMPENSATION_FAILED', "
                         "compensation_tries = 10, retry_at = NULL, "
                         "updated_at = NOW(6) - INTERVAL 1 DAY");
    /* The new one: Ship's local part fails after its call, and undoing that call is refused:
     * COMPENSATION_FAILED with its retry due at once. */
    create_saga(f, "r:new", f->p.saga_id);
    f->opts.compensation_backoff.base_ms = 0;
    f->opts.compensation_backoff.max_ms = 0;
    f->p.action_fail[3] = TXO_EBUSINESS;
    f->p.undo_rc[3] = TXO_EBUSINESS;
    assert_int_equal(run(f), TXO_SAGA_COMPENSATION_FAILED);
    assert_step(f, 3, "COMPENSATION_FAILED", "DONE");

    struct txo_saga_ref refs[32];
    size_t n = 0;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_saga_list_due(f->t.db, TXO_SAGA_COMPENSATION_FAILED, 32, refs, &n, &err),
                     0);
    assert_int_equal(n, 1);
    assert_string_equal(refs[0].id, f->p.saga_id);
    assert_string_equal(refs[0].type, "RemoteSaga");
    struct txo_saga_counts c;
    assert_int_equal(txo_saga_count(f->t.db, &c, &err), 0);
    assert_int_equal(c.by_status[TXO_SAGA_COMPENSATION_FAILED], 51);
    assert_int_equal(c.abandoned, 50);

    /* Retried once the undo works: COMPENSATED, and no longer listed. */
    f->p.undo_rc[3] = 0;
    enum txo_saga_status final;
    txo_error_init(&err);
    assert_int_equal(txo_saga_retry(f->t.db, &def, f->p.saga_id, &f->opts, &f->p, &final, &err), 0);
    assert_int_equal(final, TXO_SAGA_COMPENSATED);
    assert_int_equal(txo_saga_list_due(f->t.db, TXO_SAGA_COMPENSATION_FAILED, 32, refs, &n, &err),
                     0);
    assert_int_equal(n, 0);
}

/* The last allowed failure gives up: no retry scheduled, counted as abandoned. */
static void test_last_try_gives_up(void **state)
{
    struct fixture *f = *state;
    create_saga(f, "r:1", f->p.saga_id);
    f->opts.compensation_max_tries = 1;
    f->p.action_fail[3] = TXO_EBUSINESS;
    f->p.undo_rc[3] = TXO_EBUSINESS;
    assert_int_equal(run(f), TXO_SAGA_COMPENSATION_FAILED);
    struct txo_param id[] = {txo_p_str(f->p.saga_id)};
    assert_int_equal(testdb_i64(f->t.db,
                                "SELECT COUNT(*) FROM saga_instances WHERE id = ? AND "
                                "retry_at IS NULL AND compensation_tries = 1",
                                id, 1),
                     1);
    exec_id(f, "UPDATE saga_instances SET updated_at = NOW(6) - INTERVAL 1 DAY WHERE id = ?");
    struct txo_saga_ref refs[4];
    size_t n = 9;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_saga_list_due(f->t.db, TXO_SAGA_COMPENSATION_FAILED, 4, refs, &n, &err),
                     0);
    assert_int_equal(n, 0);
}

/* The load of every run reads the instance by PRIMARY and its steps by theirs, with no
 * temporary table and no filesort (the payload is a JSON column: a temporary table with it
 * would go to disk on every run). */
static void test_load_uses_no_temporary_table(void **state)
{
    struct fixture *f = *state;
    create_saga(f, "r:1", f->p.saga_id);
    struct txo_param id = txo_p_str(f->p.saga_id);
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_db_query(f->t.db, "EXPLAIN " SAGA_SQL_LOAD, &id, 1, &rows, &err), 0);
    assert_int_equal(txo_rows_count(rows), 2);
    for (size_t i = 0; i < txo_rows_count(rows); i++) {
        /* EXPLAIN columns: id, select_type, table, type, possible_keys, key, key_len, ref,
         * rows, Extra. */
        const char *key = txo_rows_str(rows, i, 5, NULL);
        const char *extra = txo_rows_str(rows, i, 9, NULL);
        print_message("load: table %s key %s extra %s\n", txo_rows_str(rows, i, 2, NULL),
                      key != NULL ? key : "NULL", extra != NULL ? extra : "");
        assert_non_null(key);
        assert_true(strcmp(key, "PRIMARY") == 0);
        assert_true(extra == NULL ||
                    (strstr(extra, "temporary") == NULL && strstr(extra, "filesort") == NULL));
    }
    txo_rows_free(rows);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calls_done_complete_the_saga),
        cmocka_unit_test(test_deadlock_after_call_does_not_call_again),
        cmocka_unit_test(test_unknown_outcome_is_compensated),
        cmocka_unit_test(test_unknown_then_refused_stays_unknown),
        cmocka_unit_test(test_refused_call_is_not_compensated),
        cmocka_unit_test(test_guard_refuses_before_the_call),
        cmocka_unit_test(test_done_call_with_failed_local_part_is_compensated),
        cmocka_unit_test(test_call_in_flight_at_a_crash_counts_as_unknown),
        cmocka_unit_test(test_crash_in_a_call_then_guard_refuses_ends_unknown),
        cmocka_unit_test(test_crash_in_a_call_then_no_remote_part_ends_unknown),
        cmocka_unit_test(test_failed_step_found_calling_is_compensated_unknown),
        cmocka_unit_test(test_given_up_sagas_never_starve_a_new_failure),
        cmocka_unit_test(test_last_try_gives_up),
        cmocka_unit_test(test_load_uses_no_temporary_table),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, testdb_free_state, NULL, NULL);
}
