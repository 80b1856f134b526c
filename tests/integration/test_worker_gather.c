/*
 * How the worker's saga runners share the queue (txo_worker_opts.saga_gather_ms), in-process
 * against a real MariaDB, with a saga of one local step whose action records when it ran and
 * can be held:
 *   - a saga queued while no runner is busy is taken at once, whatever the gather time;
 *   - a saga queued while a runner is busy waits the gather time for it, then an idle runner
 *     takes it (a runner held up never holds the queue longer than that);
 *   - a whole batch queued at once is taken at once, as one batch.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "testdb.h"
#include "core/waiter.h"
#include "testworker.h"
#include "txo/clock.h"
#include "txo/saga.h"
#include "txo/worker.h"

#define GATHER_MS 1000
#define BATCH     3
#define MAX_RUNS  16
/* "At once": well before the gather time would have let it go (the scheduler polls every
 * 20 ms; the rest is slack for a slow sanitizer build). */
#define SOON_US (GATHER_MS * INT64_C(1000) * 3 / 4)

/* What the step's action saw: when each saga's step ran, and in which batch. */
struct seen {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool hold; /* the saga "held" stays in its action until this is false */
    size_t n;
    struct {
        char correlation_id[32];
        int64_t at_us; /* txo_monotonic_us() when its action began */
        size_t batch;  /* how many sagas its action ran with */
    } runs[MAX_RUNS];
};

static struct seen seen = {.mu = PTHREAD_MUTEX_INITIALIZER}; /* cv: main() */

static int step(struct txo_tx *tx, const struct txo_saga_ctx *const *ctx, size_t n, int *rcs,
                struct txo_error *errs, struct txo_error *err)
{
    (void)tx, (void)errs, (void)err;
    bool held = false;
    pthread_mutex_lock(&seen.mu);
    for (size_t k = 0; k < n; k++) {
        rcs[k] = 0;
        if (seen.n < MAX_RUNS) {
            snprintf(seen.runs[seen.n].correlation_id, sizeof(seen.runs[seen.n].correlation_id),
                     "%s", ctx[k]->correlation_id);
            seen.runs[seen.n].at_us = txo_monotonic_us();
            seen.runs[seen.n].batch = n;
            seen.n++;
        }
        held = held || strcmp(ctx[k]->correlation_id, "held") == 0;
    }
    pthread_cond_broadcast(&seen.cv);
    while (held && seen.hold)
        pthread_cond_wait(&seen.cv, &seen.mu);
    pthread_mutex_unlock(&seen.mu);
    return 0;
}

static const struct txo_saga_step_def steps[] = {{.name = "Record", .action = step}};
static const struct txo_saga_def gather = {.type = "Gather", .steps = steps, .n_steps = 1};
static const struct txo_saga_def *const sagas[] = {&gather};

static int setup(void **state)
{
    struct testworker *f = testdb_fixture_new(sizeof(*f), "wgather", 0);
    struct txo_worker_opts wo;
    txo_worker_opts_init(&wo);
    wo.saga_threads = 2;
    wo.saga_batch = BATCH;
    wo.saga_gather_ms = GATHER_MS;
    wo.poll_ms = 20;
    wo.retention.interval_s = 0;
    wo.sagas = sagas;
    wo.n_sagas = 1;
    testworker_new(f, &wo);
    pthread_mutex_lock(&seen.mu);
    seen.n = 0;
    seen.hold = true;
    pthread_mutex_unlock(&seen.mu);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    pthread_mutex_lock(&seen.mu);
    seen.hold = false;
    pthread_cond_broadcast(&seen.cv);
    pthread_mutex_unlock(&seen.mu);
    return testworker_free_state(state);
}

struct create_tx {
    const char *const *ids;
    size_t n;
};

static int create_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct create_tx *c = arg;
    struct txo_saga_new s[BATCH];
    memset(s, 0, sizeof(s));
    for (size_t k = 0; k < c->n; k++) {
        s[k].correlation_id = c->ids[k];
        s[k].payload_json = "{}";
    }
    return txo_saga_create_many(tx, &gather, s, c->n, err);
}

/* Creates the sagas of ids (at most BATCH) in one transaction: the scheduler queues them
 * together. Returns txo_monotonic_us() from before the transaction. */
static int64_t create(struct testworker *f, const char *const *ids, size_t n)
{
    struct create_tx c = {.ids = ids, .n = n};
    struct txo_error err;
    txo_error_init(&err);
    int64_t before = txo_monotonic_us();
    assert_int_equal(txo_db_transact(f->t.db, TXO_ISO_READ_COMMITTED, create_fn, &c, &err), 0);
    return before;
}

/* Waits (at most 20 s) until the step of correlation_id ran; returns its record's index. */
static size_t wait_ran(const char *correlation_id)
{
    struct timespec until;
    txo_monotonic_deadline(20000, &until);
    pthread_mutex_lock(&seen.mu);
    do {
        for (size_t i = 0; i < seen.n; i++)
            if (strcmp(seen.runs[i].correlation_id, correlation_id) == 0) {
                pthread_mutex_unlock(&seen.mu);
                return i;
            }
    } while (pthread_cond_timedwait(&seen.cv, &seen.mu, &until) == 0);
    pthread_mutex_unlock(&seen.mu);
    fail_msg("the step of saga %s never ran", correlation_id);
    return 0;
}

/* Waits (at most 10 s) until want sagas are COMPLETED, and checks that no more are. */
static void expect_completed(struct testworker *f, int64_t want)
{
    const char *sql = "SELECT COUNT(*) FROM saga_instances WHERE status = 'COMPLETED'";
    for (int i = 0; i < 500 && testdb_q(f->t.db, sql) < want; i++)
        txo_sleep_ms(20);
    assert_int_equal(testdb_q(f->t.db, sql), want);
}

static void test_runners_gather_behind_a_busy_one(void **state)
{
    struct testworker *f = *state;
    struct txo_error err;
    txo_error_init(&err);

    /* No runner busy: the first saga is taken at once (the scheduler's poll is 20 ms), far
     * sooner than the gather time, and a runner holds it. */
    const char *held[] = {"held"};
    (void)create(f, held, 1);
    assert_int_equal(txo_worker_start(f->w, &err), 0);
    int64_t t0 = txo_monotonic_us();
    size_t h = wait_ran("held");
    assert_true(seen.runs[h].at_us - t0 < SOON_US);

    /* A runner busy: the next saga waits the gather time for it, then the idle runner takes
     * it while the busy one is still held up. */
    const char *one[] = {"alone"};
    int64_t t1 = create(f, one, 1);
    size_t a = wait_ran("alone");
    int64_t waited_ms = (seen.runs[a].at_us - t1) / 1000;
    if (waited_ms < GATHER_MS)
        fail_msg("a saga queued behind a busy runner was taken after %lld ms, want >= %d",
                 (long long)waited_ms, GATHER_MS);
    assert_int_equal(seen.runs[a].batch, 1);
    expect_completed(f, 1); /* "alone"; "held" is still in its step */

    /* A whole batch queued: taken at once, as one batch. */
    const char *three[] = {"b1", "b2", "b3"};
    int64_t t2 = create(f, three, BATCH);
    size_t b = wait_ran("b1");
    assert_true(seen.runs[b].at_us - t2 < SOON_US);
    assert_int_equal(seen.runs[b].batch, BATCH);
    assert_int_equal(seen.runs[wait_ran("b3")].batch, BATCH);

    /* Released, the held saga completes too. */
    pthread_mutex_lock(&seen.mu);
    seen.hold = false;
    pthread_cond_broadcast(&seen.cv);
    pthread_mutex_unlock(&seen.mu);
    expect_completed(f, 5);
    txo_worker_stop(f->w);
}

int main(void)
{
    txo__cond_init_monotonic(&seen.cv); /* the clock of txo_monotonic_deadline() */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_runners_gather_behind_a_busy_one, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
