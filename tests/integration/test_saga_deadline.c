/*
 * Deadlines of sagas and their steps against a real MariaDB: a saga Reserve (local) -> Charge
 * (remote + local) -> Ship (local), whose Charge call can be made to hang in the worker that
 * makes it until the test lets it go.
 *
 * What must hold:
 *   - a call that hangs past its try timeout under a live worker loses the saga: another
 *     worker takes it over, calls again with the same idempotency key and finishes it, and the
 *     hung worker's late result changes nothing (lease lost, its local part rolled back);
 *   - a step that hangs past its deadline is listed as stuck (where, which deadline) while it
 *     hangs, then failed as maybe done by the next worker and compensated, its call undone;
 *   - past the saga's deadline the saga stops going forward and compensates, and is listed as
 *     stuck before that even under a live owner;
 *   - the batch path asks the same rule: a saga past its deadline is left to the single path,
 *     and a batch's calls get the try's lease and deadline;
 *   - each deadline passed is counted by kind and saga type.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "testclock.h"
#include "testdb.h"
#include "testrun.h"
#include "testsaga.h"
#include "txo/txo.h"

#define N_STEPS 3

/* What the step functions saw, shared by the workers of a test (guarded by mu). */
struct probe {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool hang_first; /* the first Charge call hangs until `release` */
    bool hanging;    /* it is hanging now */
    bool release;    /* let it return */
    int charge_rc;   /* what every Charge call returns once it may */
    int charge_calls;
    char keys[4][96]; /* the idempotency keys of the first Charge calls */
    int undo_calls;
    char undo_key[96];
    int remote_batch_calls; /* calls of several sagas at once */
    int64_t batch_lease_us; /* lease left on the first saga while the batch's calls ran */
    const struct testdb *t;
};

struct fixture {
    struct testdb t;
    struct probe p;
    struct testclock clock;
    struct txo_saga_opts opts;
    struct txo_metrics *reg;
    struct txo_metric *deadlines;
    char id[TXO_SAGA_ID_LEN];
};

static int action(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                  struct txo_error *errs, struct txo_error *err)
{
    (void)errs;
    for (size_t k = 0; k < n; k++) {
        rcs[k] = 0;
        int rc = testsaga_effect(tx, ctx[k], "do", err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int charge_one(const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    struct probe *p = ctx->user;
    pthread_mutex_lock(&p->mu);
    int n = p->charge_calls++;
    if (n < 4)
        snprintf(p->keys[n], sizeof(p->keys[n]), "%s", ctx->idempotency_key);
    if (n == 0 && p->hang_first) {
        p->hanging = true;
        pthread_cond_broadcast(&p->cond);
        while (!p->release)
            pthread_cond_wait(&p->cond, &p->mu);
        p->hanging = false;
    }
    int rc = p->charge_rc;
    pthread_mutex_unlock(&p->mu);
    return rc == 0 ? 0 : txo_error_set(err, rc, "charge call %d: %s", n + 1, txo_err_name(rc));
}

static int charge_undo_one(const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    (void)err;
    struct probe *p = ctx->user;
    pthread_mutex_lock(&p->mu);
    p->undo_calls++;
    snprintf(p->undo_key, sizeof(p->undo_key), "%s", ctx->idempotency_key);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

/* Several sagas' calls at once (the batch engine's): all done; the lease left on the first
 * saga is read while they run. */
static void charge_many(const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                        struct txo_error *errs)
{
    struct probe *p = ctx[0]->user;
    p->remote_batch_calls++;
    struct txo_db *other = testdb_connect(p->t);
    struct txo_param id[] = {txo_p_str(ctx[0]->saga_id)};
    p->batch_lease_us =
        testdb_i64(other,
                   "SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), lease_until) FROM saga_instances "
                   "WHERE id = ?",
                   id, 1);
    txo_db_close(other);
    for (size_t k = 0; k < n; k++) {
        rcs[k] = 0;
        txo_error_init(&errs[k]);
    }
}

TESTSAGA_REMOTE_SPLIT(charge, charge_many, charge_one)

TESTSAGA_STEP(compensate, testsaga_undo)
TESTSAGA_REMOTE(charge_undo, charge_undo_one)

/* Charge: a try may hang 1 s; the step as a whole may take 60 s. */
static const struct txo_saga_step_def try_steps[N_STEPS] = {
    {.name = "Reserve", .action = action, .compensate = compensate},
    {.name = "Charge",
     .try_timeout_ms = 1000,
     .deadline_ms = 60000,
     .action = action,
     .compensate = compensate,
     .remote = charge,
     .remote_compensate = charge_undo},
    {.name = "Ship", .action = action, .compensate = compensate},
};
static const struct txo_saga_def try_def = {.type = "TrySaga", .steps = try_steps, .n_steps = 3};

/* Charge: no try timeout, but the step may take 1 s in all. */
static const struct txo_saga_step_def step_steps[N_STEPS] = {
    {.name = "Reserve", .action = action, .compensate = compensate},
    {.name = "Charge",
     .deadline_ms = 1000,
     .action = action,
     .compensate = compensate,
     .remote = charge,
     .remote_compensate = charge_undo},
    {.name = "Ship", .action = action, .compensate = compensate},
};
static const struct txo_saga_def step_def = {.type = "StepSaga", .steps = step_steps, .n_steps = 3};

/* The saga must be done in 60 s (of the fake clock, past which the test moves it). */
static const struct txo_saga_step_def saga_steps[N_STEPS] = {
    {.name = "Reserve", .action = action, .compensate = compensate},
    {.name = "Charge",
     .action = action,
     .compensate = compensate,
     .remote = charge,
     .remote_compensate = charge_undo},
    {.name = "Ship", .action = action, .compensate = compensate},
};
static const struct txo_saga_def saga_def = {
    .type = "SlowSaga", .steps = saga_steps, .n_steps = 3, .deadline_ms = 60000};

/* For batches: a saga deadline of 60 s and a Charge try timeout of 2 s. */
static const struct txo_saga_step_def batch_steps[N_STEPS] = {
    {.name = "Reserve", .action = action, .compensate = compensate},
    {.name = "Charge",
     .try_timeout_ms = 2000,
     .action = action,
     .compensate = compensate,
     .remote = charge,
     .remote_compensate = charge_undo},
    {.name = "Ship", .action = action, .compensate = compensate},
};
static const struct txo_saga_def batch_def = {
    .type = "BatchSaga", .steps = batch_steps, .n_steps = 3, .deadline_ms = 60000};
/* The same saga type created with a deadline of 1 ms: past it when it is first run. */
static const struct txo_saga_def late_def = {
    .type = "BatchSaga", .steps = batch_steps, .n_steps = 3, .deadline_ms = 1};

/* ---- fixture and helpers ---- */

static int setup(void **state)
{
    struct fixture *f = testdb_fixture_new(sizeof(*f), "sagadeadline", 0);
    testsaga_create_effects(f->t.db);
    pthread_mutex_init(&f->p.mu, NULL);
    pthread_cond_init(&f->p.cond, NULL);
    f->p.t = &f->t;
    testclock_init(&f->clock);
    txo_saga_opts_init(&f->opts);
    f->opts.owner = "worker-2";
    f->opts.step_max_attempts = 100;
    f->opts.step_backoff.base_ms = 20000;
    f->opts.step_backoff.max_ms = 20000;
    f->opts.step_backoff.jitter = 0;
    f->opts.clock = &f->clock.clock;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_metrics_new(&f->reg, &err), 0);
    static const char *const labels[] = {"kind", "saga_type"};
    f->deadlines =
        txo_metrics_register(f->reg, TXO_METRIC_COUNTER, "txo_saga_deadlines_passed_total",
                             "Deadlines passed.", 2, labels, NULL, 0, &err);
    assert_non_null(f->deadlines);
    f->opts.deadlines = f->deadlines;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    txo_metrics_free(f->reg);
    pthread_mutex_destroy(&f->p.mu);
    pthread_cond_destroy(&f->p.cond);
    testdb_fixture_free(f);
    return 0;
}

struct create_arg {
    const struct txo_saga_def *def;
    const char *correlation;
    char *id;
};

static int create_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct create_arg *a = arg;
    return txo_saga_create(tx, a->def, a->correlation, "{}", NULL, a->id, NULL, err);
}

static void create_saga(struct fixture *f, const struct txo_saga_def *def, const char *correlation,
                        char id[TXO_SAGA_ID_LEN])
{
    struct create_arg a = {def, correlation, id};
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_transact(f->t.db, TXO_ISO_READ_COMMITTED, create_fn, &a, &err) != 0)
        fail_msg("create: %s", err.msg);
}

static char *step_str(struct fixture *f, int step, const char *col)
{
    return testsaga_step_col(f->t.db, f->id, step, col);
}

static void assert_step(struct fixture *f, int step, const char *status, const char *remote)
{
    testsaga_assert_step(f->t.db, f->id, step, status, remote);
}

static int64_t effects(struct fixture *f, const char *step, const char *kind)
{
    return testsaga_effects(f->t.db, f->id, step, kind);
}

static double counted(struct fixture *f, const char *kind, const char *type)
{
    const char *labels[] = {kind, type};
    return txo_metric_value(f->deadlines, labels);
}

/* True when txo_saga_list_stuck lists saga id; *out (may be NULL) receives its entry. */
static bool find_stuck(struct fixture *f, const char *id, struct txo_saga_ref *out)
{
    struct txo_saga_ref refs[16];
    size_t n = 0;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_saga_list_stuck(f->t.db, 3600, 16, refs, &n, &err) != 0)
        fail_msg("list stuck: %s", err.msg);
    for (size_t k = 0; k < n; k++) {
        if (strcmp(refs[k].id, id) != 0)
            continue;
        if (out != NULL)
            *out = refs[k];
        return true;
    }
    return false;
}

static bool listed_stuck(struct fixture *f, const char *id)
{
    return find_stuck(f, id, NULL);
}

/* The stuck listing's entry for saga id (fails when it is not listed). */
static struct txo_saga_ref stuck_entry(struct fixture *f, const char *id)
{
    struct txo_saga_ref ref;
    if (!find_stuck(f, id, &ref))
        fail_msg("saga %s is not listed as stuck", id);
    return ref;
}

/* Worker 1: runs the saga on a connection of its own, in a thread, with the system clock. */
struct hung_worker {
    struct fixture *f;
    const struct txo_saga_def *def;
    pthread_t thread;
    int rc;
    struct txo_error err;
};

static void *hung_worker_main(void *arg)
{
    struct hung_worker *w = arg;
    struct txo_db *db = testdb_connect(&w->f->t);
    struct txo_saga_opts opts;
    txo_saga_opts_init(&opts);
    opts.owner = "worker-1";
    opts.deadlines = w->f->deadlines;
    txo_error_init(&w->err);
    w->rc = txo_saga_run(db, w->def, w->f->id, &opts, &w->f->p, NULL, &w->err);
    txo_db_close(db);
    return NULL;
}

/* Starts worker 1 and returns once its Charge call hangs. */
static void start_hung_worker(struct fixture *f, struct hung_worker *w,
                              const struct txo_saga_def *def)
{
    f->p.hang_first = true;
    w->f = f;
    w->def = def;
    assert_int_equal(pthread_create(&w->thread, NULL, hung_worker_main, w), 0);
    pthread_mutex_lock(&f->p.mu);
    while (!f->p.hanging)
        pthread_cond_wait(&f->p.cond, &f->p.mu);
    pthread_mutex_unlock(&f->p.mu);
}

/* Lets worker 1's call return (done) and waits for its run to end. */
static void release_hung_worker(struct fixture *f, struct hung_worker *w)
{
    pthread_mutex_lock(&f->p.mu);
    f->p.release = true;
    pthread_cond_broadcast(&f->p.cond);
    pthread_mutex_unlock(&f->p.mu);
    pthread_join(w->thread, NULL);
}

static int run_as_worker2(struct fixture *f, const struct txo_saga_def *def,
                          enum txo_saga_status *final)
{
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_saga_run(f->t.db, def, f->id, &f->opts, &f->p, final, &err);
    if (rc != 0 && rc != TXO_ELEASELOST)
        fail_msg("txo_saga_run: %s (%s)", txo_err_name(rc), err.msg);
    return rc;
}

/* ---- tests ---- */

/* A call hung past its try timeout: taken over, called again with the same key, finished; the
 * hung worker's late result changes nothing. */
static void test_hung_try_is_taken_over(void **state)
{
    struct fixture *f = *state;
    create_saga(f, &try_def, "t:1", f->id);
    struct hung_worker w;
    start_hung_worker(f, &w, &try_def);

    /* While the try is within its timeout, worker 1's lease keeps worker 2 out. */
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(run_as_worker2(f, &try_def, &final), TXO_ELEASELOST);
    char *try_deadline = step_str(f, 2, "try_deadline");
    assert_non_null(try_deadline); /* recorded with phase (a) */
    txo_free(try_deadline);

    txo_sleep_ms(1200); /* past the 1 s try timeout; worker 1 still hangs */
    struct txo_saga_ref ref = stuck_entry(f, f->id);
    assert_int_equal(ref.deadline, TXO_DEADLINE_TRY);
    assert_string_equal(ref.step, "Charge");
    assert_int_equal(ref.status, TXO_SAGA_RUNNING);

    assert_int_equal(run_as_worker2(f, &try_def, &final), 0);
    assert_int_equal(final, TXO_SAGA_COMPLETED);
    assert_int_equal(f->p.charge_calls, 2);
    assert_string_equal(f->p.keys[0], f->p.keys[1]); /* the same idempotency key */
    assert_step(f, 2, "COMPLETED", "DONE");
    char *attempts = step_str(f, 2, "attempts");
    assert_string_equal(attempts, "2"); /* the expired try counts as one */
    txo_free(attempts);
    assert_true(counted(f, "try", "TrySaga") == 1);

    /* Worker 1 wakes with a "done": fenced, its local part rolled back. */
    release_hung_worker(f, &w);
    assert_int_equal(w.rc, TXO_ELEASELOST);
    assert_int_equal(effects(f, "Charge", "do"), 1);
    assert_int_equal(effects(f, "Ship", "do"), 1);
    assert_int_equal(f->p.undo_calls, 0);
    assert_false(listed_stuck(f, f->id));
}

/* A step hung past its deadline: listed as stuck while it hangs, then failed as maybe done by
 * the next worker and compensated; the hung worker's late result changes nothing. */
static void test_step_deadline_compensates(void **state)
{
    struct fixture *f = *state;
    create_saga(f, &step_def, "s:1", f->id);
    struct hung_worker w;
    start_hung_worker(f, &w, &step_def);
    assert_false(listed_stuck(f, f->id));

    txo_sleep_ms(1200); /* past the step's 1 s */
    struct txo_saga_ref ref = stuck_entry(f, f->id);
    assert_int_equal(ref.deadline, TXO_DEADLINE_STEP);
    assert_string_equal(ref.step, "Charge");
    assert_true(ref.overdue_s >= 0);

    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(run_as_worker2(f, &step_def, &final), 0);
    assert_int_equal(final, TXO_SAGA_COMPENSATED);
    assert_int_equal(f->p.charge_calls, 1); /* no further try */
    assert_step(f, 2, "COMPENSATED", "UNKNOWN");
    char *code = step_str(f, 2, "error_code");
    assert_int_equal(atoi(code), TXO_ETIMEOUT);
    txo_free(code);
    char *error = step_str(f, 2, "error");
    assert_non_null(strstr(error, "step deadline passed"));
    txo_free(error);
    char key[96];
    snprintf(key, sizeof(key), "%s:2:undo", f->id);
    assert_string_equal(f->p.undo_key, key); /* the call that may have happened is undone */
    assert_int_equal(effects(f, "Reserve", "undo"), 1);
    assert_true(counted(f, "step", "StepSaga") == 1);

    release_hung_worker(f, &w);
    assert_int_equal(w.rc, TXO_ELEASELOST);
    assert_int_equal(effects(f, "Charge", "do"), 0);
    assert_int_equal(f->p.undo_calls, 1);
    assert_false(listed_stuck(f, f->id));
}

/* Past the saga's deadline the saga stops going forward and compensates; a call that keeps
 * failing is not tried again. */
static void test_saga_deadline_compensates(void **state)
{
    struct fixture *f = *state;
    create_saga(f, &saga_def, "g:1", f->id);
    f->p.charge_rc = TXO_EUNAVAILABLE; /* did not take effect; tried again after 20 s */
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    assert_int_equal(run_as_worker2(f, &saga_def, &final), 0);
    assert_int_equal(final, TXO_SAGA_COMPENSATED);
    assert_int_equal(f->p.charge_calls, 3); /* at 0, 20 and 40 s; at 60 s the deadline passed */
    assert_step(f, 1, "COMPENSATED", "NONE");
    assert_step(f, 2, "FAILED", "NONE"); /* refused every time: nothing to undo remotely */
    assert_step(f, 3, "PENDING", "NONE");
    assert_int_equal(f->p.undo_calls, 0);
    assert_int_equal(effects(f, "Reserve", "undo"), 1);
    char *error = step_str(f, 2, "error");
    assert_non_null(strstr(error, "saga deadline passed"));
    txo_free(error);
    assert_true(counted(f, "saga", "SlowSaga") == 1);
}

/* A saga past its deadline is listed as stuck even while a live owner holds it. */
static void test_saga_deadline_listed_under_live_owner(void **state)
{
    struct fixture *f = *state;
    char in_time[TXO_SAGA_ID_LEN];
    create_saga(f, &batch_def, "l:1", in_time); /* 60 s */
    create_saga(f, &late_def, "l:2", f->id);    /* 1 ms */
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_db_exec(f->t.db,
                                 "UPDATE saga_instances SET owner = 'worker-9', "
                                 "lease_until = NOW(6) + INTERVAL 1 HOUR",
                                 NULL, 0, NULL, &err),
                     0);
    txo_sleep_ms(50);
    assert_false(listed_stuck(f, in_time));
    struct txo_saga_ref ref = stuck_entry(f, f->id);
    assert_int_equal(ref.deadline, TXO_DEADLINE_SAGA);
    assert_string_equal(ref.step, ""); /* between steps */
}

/* The batch path asks the same rule: sagas past their deadline leave the batch and fail the
 * single way; the others' calls get the try's lease. */
static void test_batch_asks_the_same_rule(void **state)
{
    struct fixture *f = *state;
    char late[2][TXO_SAGA_ID_LEN], early[2][TXO_SAGA_ID_LEN];
    create_saga(f, &late_def, "b:late:1", late[0]);
    create_saga(f, &late_def, "b:late:2", late[1]);
    txo_sleep_ms(50); /* past the 1 ms of these two */
    create_saga(f, &batch_def, "b:early:1", early[0]);
    create_saga(f, &batch_def, "b:early:2", early[1]);
    const char *ids[] = {late[0], late[1], early[0], early[1]};
    int rcs[4];
    enum txo_saga_status finals[4];
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(
        txo_saga_run_many(f->t.db, &batch_def, ids, 4, &f->opts, &f->p, rcs, finals, &err), 0);
    for (int k = 0; k < 4; k++)
        assert_int_equal(rcs[k], 0);
    assert_int_equal(finals[0], TXO_SAGA_FAILED); /* its first step was never tried */
    assert_int_equal(finals[1], TXO_SAGA_FAILED);
    assert_int_equal(finals[2], TXO_SAGA_COMPLETED);
    assert_int_equal(finals[3], TXO_SAGA_COMPLETED);
    assert_int_equal(f->p.remote_batch_calls, 1);
    assert_int_equal(f->p.charge_calls, 0);
    /* The calls' lease was the try timeout (2 s), not lease_s (30 s). */
    assert_true(f->p.batch_lease_us > 0 && f->p.batch_lease_us <= 2000000);
    snprintf(f->id, sizeof(f->id), "%s", late[0]);
    assert_step(f, 1, "FAILED", "NONE");
    assert_int_equal(effects(f, "Reserve", "do"), 0);
    snprintf(f->id, sizeof(f->id), "%s", early[0]);
    char *try_deadline = step_str(f, 2, "try_deadline");
    assert_non_null(try_deadline);
    txo_free(try_deadline);
    assert_true(counted(f, "saga", "BatchSaga") == 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hung_try_is_taken_over),
        cmocka_unit_test(test_step_deadline_compensates),
        cmocka_unit_test(test_saga_deadline_compensates),
        cmocka_unit_test(test_saga_deadline_listed_under_live_owner),
        cmocka_unit_test(test_batch_asks_the_same_rule),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
}
