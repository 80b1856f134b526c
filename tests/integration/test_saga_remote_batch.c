/*
 * Batched remote steps (txo_saga_run_many: a step's remote part called for many sagas at once)
 * against a real MariaDB: a saga Reserve (local) -> Charge (remote, guarded) -> Ship (remote,
 * guarded), whose parts return scripted results per saga: a call of several sagas gets the
 * batch results, a saga called alone the single ones.
 *
 * What must hold:
 *   - a batch of sagas whose calls are all done makes one call of the remote part per step (no
 *     saga is called alone), records each call's key, and completes in a handful of statements
 *     per step for the whole batch; no row is locked while the calls run;
 *   - in one batch, a refused call fails its saga alone (compensated, not called again); a
 *     call that may have happened (timeout) is compensated also when its retry is refused; a
 *     transient failure is retried on its own, with the same key, and completes; a saga the
 *     guard refuses is never called; a saga whose local part cannot commit after its call was
 *     done is compensated; the others commit as a batch;
 *   - a crash right after the calls commits nothing of the local part and leaves every call
 *     CALLING: the next run counts them as maybe done, calls again with the same key, and
 *     completes; a saga whose next try is refused by its guard (the customer cancelled
 *     meanwhile) is compensated and its step ends with remote state UNKNOWN, never CALLING.
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

#include "testclock.h"
#include "testdb.h"
#include "testsaga.h"
#include "txo/txo.h"

#define N_STEPS 3
#define N_SAGAS 20

struct probe {
    /* Scripted, per step (1-based) and saga: the batch call's result, the single calls'. */
    int batch_rc[N_STEPS + 1][N_SAGAS];
    int single_rc[N_STEPS + 1][N_SAGAS];
    int guard_rc[N_STEPS + 1][N_SAGAS];
    int action_fail[N_STEPS + 1][N_SAGAS]; /* the local part fails with this code */
    /* Counted. */
    int batch_calls[N_STEPS + 1];  /* calls of several sagas at once */
    int batch_called[N_STEPS + 1]; /* sagas called through them */
    int single_calls[N_STEPS + 1][N_SAGAS];
    int undo_calls[N_STEPS + 1][N_SAGAS];
    int guard_batch_calls[N_STEPS + 1];
    char single_key[N_STEPS + 1][N_SAGAS][96];
    char batch_key[N_STEPS + 1][N_SAGAS][96];
    const struct testdb *t;
    bool probe_locks;
    int lock_probe_ok;
};

struct fixture {
    struct testdb t;
    struct probe p;
    struct testclock clock;
    struct txo_saga_opts opts;
    char ids[N_SAGAS][TXO_SAGA_ID_LEN];
    const char *idp[N_SAGAS];
};

/* The saga's index, from its correlation id "rb:<k>". */
static int index_of(const struct txo_saga_ctx *ctx)
{
    return atoi(ctx->correlation_id + 3);
}

/* The local part: saga k's scripted failure (nothing written for it), else its effect. */
static int action(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                  struct txo_error *errs, struct txo_error *err)
{
    struct probe *p = ctx[0]->user;
    for (size_t k = 0; k < n; k++) {
        rcs[k] = p->action_fail[ctx[k]->step_index + 1][index_of(ctx[k])];
        if (rcs[k] != 0) {
            txo_error_set(&errs[k], rcs[k], "%s refused locally", ctx[k]->step_name);
            continue;
        }
        int rc = testsaga_effect(tx, ctx[k], "do", err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Another connection updates the batch's saga and step rows while the calls run: with a 1 s
 * lock wait, any lock our worker held would fail them. */
static void probe_no_locks(struct probe *p, const struct txo_saga_ctx *const *ctx, size_t n)
{
    struct txo_db *other = testdb_connect(p->t);
    struct txo_error err;
    txo_error_init(&err);
    int ok = txo_db_exec_raw(other, "SET SESSION innodb_lock_wait_timeout = 1", &err) == 0;
    for (size_t k = 0; ok && k < n; k++) {
        struct txo_param id[] = {txo_p_str(ctx[k]->saga_id)};
        ok = txo_db_exec(other,
                         "UPDATE saga_instances SET updated_at = NOW(6) + INTERVAL 1 SECOND "
                         "WHERE id = ?",
                         id, 1, NULL, &err) == 0 &&
             txo_db_exec(other,
                         "UPDATE saga_steps SET updated_at = NOW(6) + INTERVAL 1 SECOND "
                         "WHERE saga_id = ?",
                         id, 1, NULL, &err) == 0;
    }
    if (!ok)
        print_error("lock probe: %s\n", err.msg);
    p->lock_probe_ok = ok;
    txo_db_close(other);
}

/* Several sagas' calls at once (the batch engine's first try): the scripted batch results. */
static void remote_many(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                        struct txo_error *errs)
{
    struct probe *p = ctx[0]->user;
    unsigned step = ctx[0]->step_index + 1;
    p->batch_calls[step]++;
    p->batch_called[step] += (int)n;
    if (p->probe_locks)
        probe_no_locks(p, ctx, n);
    for (size_t k = 0; k < n; k++) {
        int s = index_of(ctx[k]);
        snprintf(p->batch_key[step][s], sizeof(p->batch_key[step][s]), "%s",
                 ctx[k]->idempotency_key);
        rcs[k] = p->batch_rc[step][s];
        if (rcs[k] != 0)
            txo_error_set(&errs[k], rcs[k], "batch call of saga %d: %s", s, txo_err_name(rcs[k]));
    }
}

/* One saga's call (a saga alone): the scripted single results. */
static int remote_one(const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    struct probe *p = ctx->user;
    unsigned step = ctx->step_index + 1;
    int s = index_of(ctx);
    p->single_calls[step][s]++;
    snprintf(p->single_key[step][s], sizeof(p->single_key[step][s]), "%s", ctx->idempotency_key);
    int rc = p->single_rc[step][s];
    return rc == 0 ? 0 : txo_error_set(err, rc, "single call of saga %d", s);
}

static int remote_undo_one(const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    struct probe *p = ctx->user;
    p->undo_calls[ctx->step_index + 1][index_of(ctx)]++;
    (void)err;
    return 0;
}

TESTSAGA_REMOTE_SPLIT(remote, remote_many, remote_one)

/* The guard: saga k's scripted refusal; one call for a batch of several is counted. */
static int guard(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                 struct txo_error *errs, struct txo_error *err)
{
    (void)tx;
    (void)err;
    struct probe *p = ctx[0]->user;
    if (n > 1)
        p->guard_batch_calls[ctx[0]->step_index + 1]++;
    for (size_t k = 0; k < n; k++) {
        rcs[k] = p->guard_rc[ctx[k]->step_index + 1][index_of(ctx[k])];
        if (rcs[k] != 0)
            txo_error_set(&errs[k], rcs[k], "%s: order no longer open", ctx[k]->step_name);
    }
    return 0;
}

TESTSAGA_STEP(compensate, testsaga_undo)
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
     .remote_compensate = remote_undo,
     .guard = guard},
};

static const struct txo_saga_def def = {
    .type = "RemoteBatchSaga",
    .steps = steps,
    .n_steps = N_STEPS,
};

/* ---- fixture and helpers ---- */

static int create_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct fixture *f = arg;
    for (int k = 0; k < N_SAGAS; k++) {
        char correlation[16];
        snprintf(correlation, sizeof(correlation), "rb:%d", k);
        int rc = txo_saga_create(tx, &def, correlation, "{}", NULL, f->ids[k], NULL, err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int setup(void **state)
{
    struct fixture *f = testdb_fixture_new(sizeof(*f), "sagarbatch", 0);
    testsaga_create_effects(f->t.db);
    testclock_init(&f->clock);
    testsaga_worker_opts(&f->opts, &f->clock.clock, 10);
    f->p.t = &f->t;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_transact(f->t.db, TXO_ISO_READ_COMMITTED, create_fn, f, &err) != 0)
        fail_msg("create: %s", err.msg);
    for (int k = 0; k < N_SAGAS; k++)
        f->idp[k] = f->ids[k];
    *state = f;
    return 0;
}

static void run_batch(struct fixture *f, struct txo_db *db, enum txo_saga_status *finals)
{
    int rcs[N_SAGAS];
    struct txo_error err;
    txo_error_init(&err);
    if (txo_saga_run_many(db, &def, f->idp, N_SAGAS, &f->opts, &f->p, rcs, finals, &err) != 0)
        fail_msg("txo_saga_run_many: %s", err.msg);
    for (int k = 0; k < N_SAGAS; k++)
        if (rcs[k] != 0)
            fail_msg("saga %d: %s", k, txo_err_name(rcs[k]));
}

static char *step_col(struct fixture *f, int k, int step, const char *col)
{
    return testsaga_step_col(f->t.db, f->ids[k], step, col);
}

static void assert_step(struct fixture *f, int k, int step, const char *status, const char *remote,
                        const char *attempts)
{
    char *s = step_col(f, k, step, "status");
    char *r = step_col(f, k, step, "remote_state");
    char *a = step_col(f, k, step, "attempts");
    if (s == NULL || r == NULL || a == NULL || strcmp(s, status) != 0 || strcmp(r, remote) != 0 ||
        (attempts != NULL && strcmp(a, attempts) != 0))
        fail_msg("saga %d step %d is %s/%s after %s tries, want %s/%s after %s", k, step,
                 s != NULL ? s : "NULL", r != NULL ? r : "NULL", a != NULL ? a : "NULL", status,
                 remote, attempts != NULL ? attempts : "any");
    txo_free(s);
    txo_free(r);
    txo_free(a);
}

static int64_t effects(struct fixture *f, int k, const char *step, const char *kind)
{
    return testsaga_effects(f->t.db, f->ids[k], step, kind);
}

static int64_t statements(struct txo_db *db)
{
    return testdb_i64(db,
                      "SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS "
                      "WHERE VARIABLE_NAME = 'QUESTIONS'",
                      NULL, 0);
}

/* ---- tests ---- */

static void test_batch_of_calls_completes(void **state)
{
    struct fixture *f = *state;
    f->p.probe_locks = true;
    enum txo_saga_status finals[N_SAGAS];
    int64_t before = statements(f->t.db);
    run_batch(f, f->t.db, finals);
    int64_t used = statements(f->t.db) - before - 1;
    print_message("a batch of %d sagas with two remote steps took %lld statements, ", N_SAGAS,
                  (long long)used);
    for (int k = 0; k < N_SAGAS; k++) {
        assert_int_equal(finals[k], TXO_SAGA_COMPLETED);
        assert_step(f, k, 1, "COMPLETED", "NONE", "1");
        assert_step(f, k, 2, "COMPLETED", "DONE", "1");
        assert_step(f, k, 3, "COMPLETED", "DONE", "1");
        for (int s = 2; s <= 3; s++) {
            assert_int_equal(f->p.single_calls[s][k], 0);
            char want[96];
            snprintf(want, sizeof(want), "%s:%d:do", f->ids[k], s);
            assert_string_equal(f->p.batch_key[s][k], want);
            char *stored = step_col(f, k, s, "remote_key");
            assert_string_equal(stored, want);
            txo_free(stored);
        }
        assert_int_equal(effects(f, k, "Reserve", "do"), 1);
        assert_int_equal(effects(f, k, "Charge", "do"), 1);
        assert_int_equal(effects(f, k, "Ship", "do"), 1);
    }
    for (int s = 2; s <= 3; s++) {
        assert_int_equal(f->p.batch_calls[s], 1);
        assert_int_equal(f->p.batch_called[s], N_SAGAS);
    }
    assert_int_equal(f->p.guard_batch_calls[2], 1);
    assert_true(f->p.lock_probe_ok);
    /*
     * The engine's own statements, for all 20 sagas: the leases (2); Reserve's fence and
     * steps (2); per remote step, recording the calls (2) and the local part's fence and
     * steps (2); and the transactions' commits (6). The test's action adds one INSERT
     * per saga and step (not set-based, unlike the order saga's). The single path costs
     * about 9 statements per saga.
     */
    int64_t engine = used - 3 * N_SAGAS;
    print_message("of which the engine's: %lld\n", (long long)engine);
    assert_true(engine <= 20);
}

static void test_mixed_outcomes_in_one_batch(void **state)
{
    struct fixture *f = *state;
    f->p.batch_rc[2][3] = TXO_EBUSINESS;     /* declined: fails alone */
    f->p.batch_rc[2][5] = TXO_ETIMEOUT;      /* may have happened */
    f->p.single_rc[2][5] = TXO_EBUSINESS;    /* ... and its retry is refused */
    f->p.batch_rc[2][7] = TXO_EUNAVAILABLE;  /* did not happen: retried on its own */
    f->p.guard_rc[2][9] = TXO_EBUSINESS;     /* cancelled before the call */
    f->p.action_fail[2][11] = TXO_EBUSINESS; /* done, but its local part cannot commit */
    f->p.batch_rc[3][13] = TXO_EUNAVAILABLE; /* Ship retried on its own */
    f->p.guard_rc[3][15] = TXO_EBUSINESS;    /* refused by Ship's guard */
    enum txo_saga_status finals[N_SAGAS];
    run_batch(f, f->t.db, finals);

    /* Declined: failed, nothing remote to undo, Reserve undone; never called again. */
    assert_int_equal(finals[3], TXO_SAGA_COMPENSATED);
    assert_step(f, 3, 2, "FAILED", "NONE", "1");
    assert_step(f, 3, 1, "COMPENSATED", "NONE", NULL);
    assert_int_equal(f->p.single_calls[2][3], 0);
    assert_int_equal(f->p.undo_calls[2][3], 0);
    /* Timed out, then refused: still maybe done, so undone remotely. */
    assert_int_equal(finals[5], TXO_SAGA_COMPENSATED);
    assert_step(f, 5, 2, "COMPENSATED", "UNKNOWN", NULL);
    assert_int_equal(f->p.single_calls[2][5], 1);
    assert_int_equal(f->p.undo_calls[2][5], 1);
    assert_string_equal(f->p.single_key[2][5], f->p.batch_key[2][5]);
    /* Unavailable in the batch, done on its own with the same key. */
    assert_int_equal(finals[7], TXO_SAGA_COMPLETED);
    assert_step(f, 7, 2, "COMPLETED", "DONE", "2");
    assert_int_equal(f->p.single_calls[2][7], 1);
    assert_string_equal(f->p.single_key[2][7], f->p.batch_key[2][7]);
    /* Refused by the guard: never called, nothing to undo remotely. */
    assert_int_equal(finals[9], TXO_SAGA_COMPENSATED);
    assert_step(f, 9, 2, "FAILED", "NONE", NULL);
    assert_int_equal(f->p.single_calls[2][9], 0);
    assert_string_equal(f->p.batch_key[2][9], "");
    assert_int_equal(f->p.undo_calls[2][9], 0);
    /* Called, local part refused: the call is undone. */
    assert_int_equal(finals[11], TXO_SAGA_COMPENSATED);
    assert_step(f, 11, 2, "COMPENSATED", "DONE", NULL);
    assert_int_equal(f->p.single_calls[2][11], 0);
    assert_int_equal(f->p.undo_calls[2][11], 1);
    assert_int_equal(effects(f, 11, "Charge", "do"), 0);
    /* Ship: one retried on its own, one refused by the guard. */
    assert_int_equal(finals[13], TXO_SAGA_COMPLETED);
    assert_step(f, 13, 3, "COMPLETED", "DONE", "2");
    assert_int_equal(finals[15], TXO_SAGA_COMPENSATED);
    assert_step(f, 15, 3, "FAILED", "NONE", NULL);
    assert_int_equal(f->p.undo_calls[2][15], 1); /* its Charge is undone */

    /* Everyone else went through both batches and completed. */
    int completed = 0;
    for (int k = 0; k < N_SAGAS; k++) {
        completed += finals[k] == TXO_SAGA_COMPLETED;
        if (k == 3 || k == 5 || k == 7 || k == 9 || k == 11 || k == 13 || k == 15)
            continue;
        assert_int_equal(finals[k], TXO_SAGA_COMPLETED);
        assert_step(f, k, 2, "COMPLETED", "DONE", "1");
        assert_step(f, k, 3, "COMPLETED", "DONE", "1");
        assert_int_equal(f->p.single_calls[2][k] + f->p.single_calls[3][k], 0);
        assert_int_equal(effects(f, k, "Charge", "do"), 1);
        assert_int_equal(effects(f, k, "Ship", "do"), 1);
    }
    assert_int_equal(completed, N_SAGAS - 5);
    assert_int_equal(f->p.batch_calls[2], 1);
    assert_int_equal(f->p.batch_called[2], N_SAGAS - 1); /* not the guarded one */
    /* Ship's batch: the 15 sagas whose Charge committed in the batch, less the one its guard
     * refused. Saga 7 finished on its own. */
    assert_int_equal(f->p.batch_called[3], 14);
    assert_int_equal(f->p.single_calls[3][7], 1);
}

/* Runs the batch in a child killed right after Charge's calls (crash point), then expires the
 * leases: every saga is left with Charge RUNNING and CALLING. */
static void crash_after_the_calls(struct fixture *f)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* The child: its own connection, killed right after Charge's calls. */
        struct txo_db *db = testdb_connect(&f->t);
        txo_crash_point_set("saga.batch.after_call", 0);
        enum txo_saga_status finals[N_SAGAS];
        int rcs[N_SAGAS];
        struct txo_error err;
        txo_error_init(&err);
        int rc = txo_saga_run_many(db, &def, f->idp, N_SAGAS, &f->opts, &f->p, rcs, finals, &err);
        _exit(rc == 0 ? 3 : 4); /* not reached when the crash point fires */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    for (int k = 0; k < N_SAGAS; k++) {
        assert_step(f, k, 1, "COMPLETED", "NONE", "1");
        assert_step(f, k, 2, "RUNNING", "CALLING", "1"); /* called; nothing of its local part */
        assert_int_equal(effects(f, k, "Charge", "do"), 0);
    }
    testdb_exec(f->t.db, "UPDATE saga_instances SET lease_until = NOW(6) - INTERVAL 1 SECOND");
}

static void test_crash_after_the_calls_counts_them_as_maybe_done(void **state)
{
    struct fixture *f = *state;
    crash_after_the_calls(f);
    enum txo_saga_status finals[N_SAGAS];
    run_batch(f, f->t.db, finals);
    for (int k = 0; k < N_SAGAS; k++) {
        assert_int_equal(finals[k], TXO_SAGA_COMPLETED);
        /* Called again on its own (it may have happened: the key makes that safe). */
        assert_int_equal(f->p.single_calls[2][k], 1);
        char want[96];
        snprintf(want, sizeof(want), "%s:2:do", f->ids[k]);
        assert_string_equal(f->p.single_key[2][k], want);
        assert_step(f, k, 2, "COMPLETED", "DONE", "2");
        /* A saga resumed in the middle of a step goes on the single way. */
        assert_step(f, k, 3, "COMPLETED", "DONE", "1");
        assert_int_equal(f->p.single_calls[3][k], 1);
        assert_int_equal(effects(f, k, "Charge", "do"), 1);
    }
    assert_int_equal(f->p.batch_calls[3], 0);
}

/*
 * The calls were made, the worker died before recording what they returned, and by the next
 * try the customer has cancelled: the guard refuses it. The first call may have taken effect,
 * so the step is undone (remotely too), and its remote state says so: UNKNOWN, not CALLING.
 */
static void test_crash_after_the_calls_then_refused_ends_unknown(void **state)
{
    struct fixture *f = *state;
    crash_after_the_calls(f);
    f->p.guard_rc[2][4] = TXO_EBUSINESS;
    f->p.guard_rc[2][12] = TXO_EBUSINESS;
    enum txo_saga_status finals[N_SAGAS];
    run_batch(f, f->t.db, finals);
    for (int k = 0; k < N_SAGAS; k++) {
        if (k == 4 || k == 12) {
            assert_int_equal(finals[k], TXO_SAGA_COMPENSATED);
            assert_int_equal(f->p.single_calls[2][k], 0); /* refused before calling again */
            assert_step(f, k, 2, "COMPENSATED", "UNKNOWN", NULL);
            assert_int_equal(f->p.undo_calls[2][k], 1);
            assert_step(f, k, 1, "COMPENSATED", "NONE", NULL);
            assert_step(f, k, 3, "PENDING", "NONE", "0");
            continue;
        }
        assert_int_equal(finals[k], TXO_SAGA_COMPLETED);
        assert_step(f, k, 2, "COMPLETED", "DONE", "2");
        assert_int_equal(f->p.undo_calls[2][k], 0);
    }
    /* Whatever the path, no step of a finished saga is left CALLING. */
    assert_int_equal(testdb_i64(f->t.db,
                                "SELECT COUNT(*) FROM saga_steps WHERE remote_state = 'CALLING'",
                                NULL, 0),
                     0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_batch_of_calls_completes, setup, testdb_free_state),
        cmocka_unit_test_setup_teardown(test_mixed_outcomes_in_one_batch, setup, testdb_free_state),
        cmocka_unit_test_setup_teardown(test_crash_after_the_calls_counts_them_as_maybe_done, setup,
                                        testdb_free_state),
        cmocka_unit_test_setup_teardown(test_crash_after_the_calls_then_refused_ends_unknown, setup,
                                        testdb_free_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
