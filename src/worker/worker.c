/*
 * The worker runtime (include/txo/worker.h). Layout of this file:
 *   - a small job queue (saga refs to run or retry) shared by the scheduler, the consumer and
 *     the runners, with an in-flight list so one process never runs a saga twice at once
 *     (between processes the saga's owner lease does that);
 *   - the runner, scheduler, cleaner and consumer threads;
 *   - the lifecycle and the counters.
 * The consuming of events (txo_worker_handle_message, _many) and the handler context are in
 * worker_consume.c; the state both files share is in worker_internal.h.
 *
 * Every thread has its own database connection, opened lazily and reopened after a lost
 * connection; a thread that cannot reach the database logs, waits poll_ms and tries again, so
 * the worker rides out a database restart.
 *
 * The queue only mirrors what the database says (a RUNNING saga nobody owns is found again by
 * any scheduler), so it is bounded and may drop work when full: nothing is lost.
 */
#include "core/common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "core/waiter.h"
#include "txo/metrics.h"
#include "txo/owner.h"
#include "txo/tracer.h"
#include "txo/worker.h"
#include "worker/worker_internal.h"
#include "saga/saga_table.h"

void txo_worker_opts_init(struct txo_worker_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->saga_threads = 4;
    opts->saga_batch = 50;
    opts->saga_gather_ms = 10;
    opts->poll_ms = 200;
    txo_saga_opts_init(&opts->saga);
    opts->command_lease_s = 30;
    opts->command_max_attempts = 10;
    opts->command_backoff.base_ms = 1000;
    opts->command_backoff.max_ms = 60000;
    opts->command_backoff.jitter = 0.5;
    txo_retention_opts_init(&opts->retention);
}

/* ---- metrics ---- */

void txo__worker_count(_Atomic uint64_t *counter, struct txo_metric *m, const char *const *labels,
                       uint64_t n)
{
    atomic_fetch_add(counter, n);
    if (m != NULL && n > 0)
        txo_metric_add(m, labels, (double)n);
}

/* ---- time and waiting ---- */

/*
 * Waits up to ms, or until stop; with `wakeable` also until a runner made room in a full
 * queue. Spurious wake-ups do not end the wait early. Returns false when stopping.
 */
static bool wait_for(struct txo_worker *w, int64_t ms, bool wakeable)
{
    struct timespec until;
    txo_monotonic_deadline(ms, &until);
    pthread_mutex_lock(&w->mu);
    uint64_t gen = w->kicks;
    while (!w->stopping && !(wakeable && w->kicks != gen) &&
           pthread_cond_timedwait(&w->wake, &w->mu, &until) != ETIMEDOUT)
        ;
    bool go_on = !w->stopping;
    pthread_mutex_unlock(&w->mu);
    return go_on;
}

static bool nap(struct txo_worker *w, int64_t ms)
{
    return wait_for(w, ms, false);
}

static bool stopping(struct txo_worker *w)
{
    pthread_mutex_lock(&w->mu);
    bool s = w->stopping;
    pthread_mutex_unlock(&w->mu);
    return s;
}

/* Opens *db when it is not open. Logs and returns false on failure. */
bool txo__worker_ensure_db(struct txo_worker *w, struct txo_db **db, const char *who)
{
    if (*db != NULL)
        return true;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_open(&w->db_opts, db, &err) != 0) {
        TXO_LOG(TXO_LOG_WARN, "worker", "cannot connect", TXO_KV_STR("thread", who),
                TXO_KV_STR("err", err.msg));
        *db = NULL;
        return false;
    }
    return true;
}

/* After a failed call on db: a lost or unusable connection is closed, to be reopened. */
void txo__worker_drop_db_if_broken(struct txo_db **db, int rc)
{
    if (rc == TXO_ECONNLOST || rc == TXO_ECONNECT) {
        txo_db_close(*db);
        *db = NULL;
    }
}

/* ---- the job queue ---- */

static bool known_locked(struct txo_worker *w, const char *id)
{
    for (size_t i = 0; i < w->len; i++)
        if (strcmp(w->queue[(w->head + i) % QUEUE_CAP].ref.id, id) == 0)
            return true;
    for (size_t i = 0; i < w->n_runners * w->opts.saga_batch; i++)
        if (strcmp(w->inflight[i], id) == 0)
            return true;
    return false;
}

/* Queues a saga unless it is queued or running here already, or the queue is full (the
 * scheduler finds it again later). Returns true when queued. */
bool txo__worker_enqueue(struct txo_worker *w, const struct txo_saga_ref *ref, enum job_kind kind)
{
    bool queued = false;
    pthread_mutex_lock(&w->mu);
    if (!w->stopping && w->len < w->limit && !known_locked(w, ref->id)) {
        struct job *j = &w->queue[(w->head + w->len) % QUEUE_CAP];
        j->ref = *ref;
        j->kind = kind;
        j->queued_us = txo_monotonic_us();
        w->len++;
        queued = true;
        pthread_cond_signal(&w->work_ready);
    }
    pthread_mutex_unlock(&w->mu);
    return queued;
}

static size_t queue_space(struct txo_worker *w)
{
    pthread_mutex_lock(&w->mu);
    size_t space = w->limit - w->len;
    pthread_mutex_unlock(&w->mu);
    return space;
}

const struct txo_saga_def *txo__worker_find_saga(const struct txo_worker *w, const char *type)
{
    return txo__saga_table_find(w->opts.sagas, w->opts.n_sagas, type);
}

/* ---- runners ---- */

/* Counts a run that ended in final. */
static void count_final(struct txo_worker *w, enum txo_saga_status final)
{
    static const char *const completed[] = {"COMPLETED"};
    static const char *const aborted[] = {"ABORTED"};
    static const char *const comp_failed[] = {"COMPENSATION_FAILED"};
    switch (final) {
    case TXO_SAGA_COMPLETED:
        txo__worker_count(&w->completed, w->m.runs, completed, 1);
        break;
    case TXO_SAGA_COMPENSATION_FAILED:
        txo__worker_count(&w->comp_failed, w->m.runs, comp_failed, 1);
        break;
    default:
        txo__worker_count(&w->aborted, w->m.runs, aborted, 1);
        break;
    }
}

static void run_job(struct txo_worker *w, struct txo_db **db, void *user, const struct job *job)
{
    const struct txo_saga_def *def = txo__worker_find_saga(w, job->ref.type);
    if (def == NULL) {
        TXO_LOG(TXO_LOG_WARN, "worker", "saga of an unknown type skipped",
                TXO_KV_STR("saga_id", job->ref.id), TXO_KV_STR("type", job->ref.type));
        return;
    }
    struct txo_error err;
    txo_error_init(&err);
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    int rc = job->kind == JOB_RUN
                 ? txo_saga_run(*db, def, job->ref.id, &w->opts.saga, user, &final, &err)
                 : txo_saga_retry(*db, def, job->ref.id, &w->opts.saga, user, &final, &err);
    if (rc == TXO_ELEASELOST || rc == TXO_ESTATE) {
        /* Another worker has it, or it moved on meanwhile: nothing to do here. */
        TXO_LOG(TXO_LOG_DEBUG, "worker", "saga skipped", TXO_KV_STR("saga_id", job->ref.id),
                TXO_KV_STR("err", err.msg));
        return;
    }
    if (rc != 0) {
        TXO_LOG(TXO_LOG_WARN, "worker", "saga run interrupted", TXO_KV_STR("saga_id", job->ref.id),
                TXO_KV_STR("code", txo_err_name(rc)), TXO_KV_STR("err", err.msg));
        txo__worker_drop_db_if_broken(db, rc);
        return;
    }
    count_final(w, final);
}

/* Runs n JOB_RUN jobs of one saga type that batches (txo_saga_run_many). */
static void run_jobs(struct txo_worker *w, struct txo_db **db, void *user, const struct job *jobs,
                     size_t n)
{
    const struct txo_saga_def *def = txo__worker_find_saga(w, jobs[0].ref.type);
    const char **ids = txo_calloc(n, sizeof(*ids));
    int *rcs = txo_calloc(n, sizeof(*rcs));
    enum txo_saga_status *finals = txo_calloc(n, sizeof(*finals));
    struct txo_error err;
    txo_error_init(&err);
    int rc = TXO_ENOMEM;
    if (ids != NULL && rcs != NULL && finals != NULL) {
        for (size_t k = 0; k < n; k++)
            ids[k] = jobs[k].ref.id;
        rc = txo_saga_run_many(*db, def, ids, n, &w->opts.saga, user, rcs, finals, &err);
    }
    if (rc != 0) {
        TXO_LOG(TXO_LOG_WARN, "worker", "saga batch not run", TXO_KV_U64("sagas", n),
                TXO_KV_STR("code", txo_err_name(rc)), TXO_KV_STR("err", err.msg));
        goto out;
    }
    int broken = 0;
    for (size_t k = 0; k < n; k++) {
        if (rcs[k] == 0)
            count_final(w, finals[k]);
        else if (rcs[k] != TXO_ELEASELOST && rcs[k] != TXO_ESTATE)
            broken = rcs[k];
    }
    if (broken != 0) {
        TXO_LOG(TXO_LOG_WARN, "worker", "saga batch interrupted", TXO_KV_U64("sagas", n),
                TXO_KV_STR("code", txo_err_name(broken)));
        txo__worker_drop_db_if_broken(db, broken);
    }
out:
    txo_free(ids);
    txo_free(rcs);
    txo_free(finals);
}

/*
 * Whether an idle runner takes the queued jobs now (w->mu held). It does when no other runner
 * is running a batch (at low load: at once, one saga), when a whole batch is queued, or when
 * the oldest job has waited opts.saga_gather_ms. Otherwise the jobs gather for the runner that
 * is busy, which takes them all when it is done: under load fewer runners run larger batches
 * (a step is one transaction for all of a batch's sagas), and a runner held up (a slow call)
 * leaves the queue to another after the gather time. Else *wait_us: how long the oldest job may
 * still gather.
 */
static bool take_now(const struct txo_worker *w, int64_t *wait_us)
{
    int64_t gather_us = w->opts.saga_gather_ms * 1000;
    if (w->active == 0 || w->len >= w->opts.saga_batch || gather_us == 0)
        return true;
    int64_t waited = txo_monotonic_us() - w->queue[w->head].queued_us;
    if (waited >= gather_us)
        return true;
    *wait_us = gather_us - waited;
    return false;
}

static void *runner_main(void *arg)
{
    struct runner *r = arg;
    struct txo_worker *w = r->w;
    struct txo_db *db = NULL;
    void *user = w->opts.runner_user_new != NULL ? w->opts.runner_user_new(w->opts.runner_user_arg)
                                                 : w->opts.runner_user_arg;
    struct job *jobs = txo_calloc(w->opts.saga_batch, sizeof(*jobs));
    char(*held)[TXO_SAGA_ID_LEN] = &w->inflight[r->index * w->opts.saga_batch];
    while (jobs != NULL) {
        pthread_mutex_lock(&w->mu);
        for (;;) {
            while (!w->stopping && w->len == 0)
                pthread_cond_wait(&w->work_ready, &w->mu);
            int64_t wait_us = 0;
            if (w->stopping || take_now(w, &wait_us))
                break;
            struct timespec until;
            txo_monotonic_deadline((wait_us + 999) / 1000, &until);
            pthread_cond_timedwait(&w->work_ready, &w->mu, &until);
        }
        if (w->stopping) {
            pthread_mutex_unlock(&w->mu);
            break;
        }
        /* Natural batching: what is queued now of the first job's type (no waiting for more),
         * up to the cap; one job at low load. */
        bool full = w->len == w->limit;
        size_t n = 0;
        do {
            jobs[n] = w->queue[w->head];
            w->head = (w->head + 1) % QUEUE_CAP;
            w->len--;
            snprintf(held[n], TXO_SAGA_ID_LEN, "%s", jobs[n].ref.id);
            n++;
        } while (n < w->opts.saga_batch && w->len > 0 && jobs[0].kind == JOB_RUN &&
                 w->queue[w->head].kind == JOB_RUN &&
                 strcmp(w->queue[w->head].ref.type, jobs[0].ref.type) == 0);
        w->active++;
        if (full) { /* it was full: the scheduler may have more for us */
            w->kicks++;
            pthread_cond_broadcast(&w->wake);
        }
        pthread_mutex_unlock(&w->mu);

        /* Sagas to run go through the batch engine, one saga being a batch of one;
         * --saga-batch 1 runs each on its own. */
        if (!txo__worker_ensure_db(w, &db, "runner"))
            nap(w, w->opts.poll_ms);
        else if (n > 1 || (w->opts.saga_batch > 1 && jobs[0].kind == JOB_RUN))
            run_jobs(w, &db, user, jobs, n);
        else
            run_job(w, &db, user, &jobs[0]);

        pthread_mutex_lock(&w->mu);
        for (size_t k = 0; k < n; k++)
            held[k][0] = '\0';
        w->active--;
        pthread_mutex_unlock(&w->mu);
    }
    txo_free(jobs);
    if (w->opts.runner_user_new != NULL && w->opts.runner_user_free != NULL)
        w->opts.runner_user_free(user);
    txo_db_close(db);
    return NULL;
}

/* ---- scheduler ---- */

/* Queues the due sagas in status (see txo_saga_list_due). Returns how many were queued. */
static size_t schedule_sagas(struct txo_worker *w, struct txo_db **db, enum txo_saga_status status)
{
    size_t space = queue_space(w);
    if (space == 0)
        return 0;
    struct txo_saga_ref *refs = txo_calloc(space, sizeof(*refs));
    if (refs == NULL)
        return 0;
    size_t n = 0, queued = 0;
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_saga_list_due(*db, status, space, refs, &n, &err);
    if (rc != 0) {
        TXO_LOG(TXO_LOG_WARN, "worker", "listing due sagas failed",
                TXO_KV_STR("status", txo_saga_status_name(status)), TXO_KV_STR("err", err.msg));
        txo__worker_drop_db_if_broken(db, rc);
    }
    bool retry = status == TXO_SAGA_COMPENSATION_FAILED;
    for (size_t i = 0; i < n; i++) {
        if (!txo__worker_enqueue(w, &refs[i], retry ? JOB_RETRY : JOB_RUN))
            continue;
        queued++;
        if (retry)
            txo__worker_count(&w->retries, w->m.retries, NULL, 1);
        else
            txo__worker_count(&w->picked_up, w->m.picked_up, NULL, 1);
    }
    txo_free(refs);
    return queued;
}

static const struct txo_command_handler *find_command_handler(const struct txo_worker *w,
                                                              const char *type)
{
    for (size_t i = 0; i < w->opts.n_commands; i++)
        if (strcmp(w->opts.commands[i].command_type, type) == 0)
            return &w->opts.commands[i];
    return NULL;
}

struct command_args {
    const struct txo_command *cmd;
    const struct txo_command_handler *handler;
    struct txo_handler_ctx hc;
};

static int command_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct command_args *a = arg;
    a->hc.tx = tx;
    a->hc.n_started = 0;
    int rc = a->handler->fn(tx, a->cmd, &a->hc, err);
    if (rc != 0)
        return rc;
    return txo_cmdq_complete_tx(tx, a->cmd, err);
}

static int run_command(struct txo_worker *w, struct txo_db *db, const struct txo_command *cmd,
                       struct txo_error *err)
{
    const struct txo_command_handler *h = find_command_handler(w, cmd->type);
    if (h == NULL)
        return txo_error_set(err, TXO_EINVAL, "no handler for command type %s", cmd->type);
    struct command_args a = {.cmd = cmd, .handler = h, .hc = {.w = w}};
    /* A command enqueued in a trace is run in a span of it: the sagas it starts and the lines
     * it logs continue that span. */
    struct txo_trace_ctx span;
    if (cmd->has_trace) {
        txo_trace_child(&cmd->trace, &span);
        a.hc.trace = &span;
    }
    int64_t start_us = txo_realtime_us();
    const struct txo_trace_ctx *prev = txo_trace_set_current(a.hc.trace);
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, command_tx, &a, err);
    txo_trace_set_current(prev);
    if (cmd->has_trace)
        txo__worker_record_command(w->opts.tracer, cmd, &span, start_us, rc);
    if (rc == 0)
        txo__worker_queue_started(w, &a.hc);
    return rc;
}

static size_t schedule_commands(struct txo_worker *w, struct txo_db **db, const char *owner)
{
    size_t space = queue_space(w);
    if (space == 0 || w->opts.n_commands == 0)
        return 0;
    struct txo_command *cmds = NULL;
    size_t n = 0;
    struct txo_error err;
    txo_error_init(&err);
    struct txo_cmdq_claim_opts co;
    txo_cmdq_claim_opts_init(&co);
    co.owner = owner;
    co.lease_s = w->opts.command_lease_s;
    co.max = space < TXO_CMDQ_CLAIM_MAX ? space : TXO_CMDQ_CLAIM_MAX;
    co.max_attempts = w->opts.command_max_attempts; /* a command that kills its worker */
    int rc = txo_cmdq_claim_ex(*db, &co, &cmds, &n, &err);
    if (rc != 0) {
        TXO_LOG(TXO_LOG_WARN, "worker", "claiming commands failed", TXO_KV_STR("err", err.msg));
        txo__worker_drop_db_if_broken(db, rc);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        txo_error_init(&err);
        rc = run_command(w, *db, &cmds[i], &err);
        if (rc == 0) {
            txo__worker_count(&w->commands_done, w->m.commands_done, NULL, 1);
            continue;
        }
        txo__worker_count(&w->commands_failed, w->m.commands_failed, NULL, 1);
        TXO_LOG(TXO_LOG_WARN, "worker", "command failed", TXO_KV_I64("command_id", cmds[i].id),
                TXO_KV_STR("type", cmds[i].type), TXO_KV_STR("err", err.msg));
        struct txo_error ferr;
        txo_error_init(&ferr);
        bool failed = false;
        if (txo_cmdq_fail(*db, &cmds[i], err.msg, !txo_err_is_transient(rc),
                          w->opts.command_max_attempts, &w->opts.command_backoff, &failed,
                          &ferr) != 0)
            TXO_LOG(TXO_LOG_WARN, "worker", "recording command failure failed",
                    TXO_KV_STR("err", ferr.msg));
        else if (failed)
            TXO_LOG(TXO_LOG_ERROR, "worker", "command FAILED for good",
                    TXO_KV_I64("command_id", cmds[i].id), TXO_KV_STR("type", cmds[i].type),
                    TXO_KV_STR("err", err.msg));
    }
    txo_commands_free(cmds, n);
    return n;
}

static void *scheduler_main(void *arg)
{
    struct txo_worker *w = arg;
    struct txo_db *db = NULL;
    char owner[TXO_CMDQ_OWNER_MAX + 1];
    if (txo_owner_name(owner, sizeof(owner), "commands") != 0)
        snprintf(owner, sizeof(owner), "worker:%ld:commands", (long)getpid());
    int64_t next_retry_check = 0;
    while (!stopping(w)) {
        if (!txo__worker_ensure_db(w, &db, "scheduler")) {
            nap(w, 1000);
            continue;
        }
        size_t found = schedule_sagas(w, &db, TXO_SAGA_RUNNING);
        if (db != NULL)
            found += schedule_sagas(w, &db, TXO_SAGA_COMPENSATING);
        if (db != NULL)
            found += schedule_commands(w, &db, owner);
        int64_t now = txo_monotonic_ms();
        if (db != NULL && now >= next_retry_check) {
            found += schedule_sagas(w, &db, TXO_SAGA_COMPENSATION_FAILED);
            next_retry_check = now + 1000;
        }
        if (found == 0 || queue_space(w) == 0)
            wait_for(w, w->opts.poll_ms, true);
    }
    txo_db_close(db);
    return NULL;
}

/* ---- cleaner ---- */

static void clean_once(struct txo_worker *w, struct txo_db **db)
{
    struct txo_error err;
    txo_error_init(&err);
    struct txo_retention_counts c;
    int rc = txo_retention_run(*db, &w->opts.retention, &c, &err);
    if (rc != 0) {
        TXO_LOG(TXO_LOG_WARN, "worker", "retention cleaner failed", TXO_KV_STR("err", err.msg));
        txo__worker_drop_db_if_broken(db, rc);
    }
    static const char *const outbox[] = {"outbox_events"};
    static const char *const idem[] = {"idempotency_keys"};
    static const char *const inbox[] = {"inbox_events"};
    static const char *const commands[] = {"command_queue"};
    txo__worker_count(&w->cleaned, w->m.cleaned, outbox, c.outbox);
    txo__worker_count(&w->cleaned, w->m.cleaned, idem, c.idempotency);
    txo__worker_count(&w->cleaned, w->m.cleaned, inbox, c.inbox);
    txo__worker_count(&w->cleaned, w->m.cleaned, commands, c.commands);
    uint64_t total = c.outbox + c.idempotency + c.inbox + c.commands;
    if (total > 0)
        TXO_LOG(TXO_LOG_INFO, "worker", "retention cleaner deleted", TXO_KV_U64("rows", total),
                TXO_KV_U64("outbox", c.outbox), TXO_KV_U64("idempotency", c.idempotency),
                TXO_KV_U64("inbox", c.inbox), TXO_KV_U64("commands", c.commands));
}

static void *cleaner_main(void *arg)
{
    struct txo_worker *w = arg;
    struct txo_db *db = NULL;
    while (nap(w, (int64_t)w->opts.retention.interval_s * 1000)) {
        if (txo__worker_ensure_db(w, &db, "cleaner"))
            clean_once(w, &db);
    }
    txo_db_close(db);
    return NULL;
}

/* ---- consumer ---- */

static void *consumer_main(void *arg)
{
    struct txo_worker *w = arg;
    while (!stopping(w)) {
        struct txo_error err;
        txo_error_init(&err);
        size_t handled = 0;
        int rc = txo_consumer_poll(w->consumer, 64, 500, &handled, &err);
        if (rc != 0) {
            TXO_LOG(TXO_LOG_WARN, "worker", "consumer poll failed",
                    TXO_KV_STR("code", txo_err_name(rc)), TXO_KV_STR("err", err.msg));
            nap(w, 1000);
        }
    }
    return NULL;
}

/* ---- lifecycle ---- */

static int check_opts(const struct txo_worker_opts *o, struct txo_error *err)
{
    if (o->saga_threads == 0 || o->saga_threads > 256)
        return txo_error_set(err, TXO_EINVAL, "saga threads must be 1..256, got %u",
                             o->saga_threads);
    if (o->saga_batch == 0 || o->saga_batch > 1000)
        return txo_error_set(err, TXO_EINVAL, "saga batch must be 1..1000, got %u", o->saga_batch);
    if (o->saga_gather_ms < 0 || o->saga_gather_ms > 1000)
        return txo_error_set(err, TXO_EINVAL, "saga gather must be 0..1000 ms, got %lld",
                             (long long)o->saga_gather_ms);
    if (o->poll_ms <= 0 || o->retention.batch == 0 || o->retention.batch > TXO_PURGE_BATCH_MAX)
        return txo_error_set(err, TXO_EINVAL, "poll interval and retention batch out of range");
    if ((o->n_events > 0 && o->events == NULL) || (o->n_commands > 0 && o->commands == NULL) ||
        (o->n_sagas > 0 && o->sagas == NULL))
        return txo_error_set(err, TXO_EINVAL, "worker table given without its entries");
    for (size_t i = 0; i < o->n_events; i++)
        if (o->events[i].event_type == NULL || o->events[i].fn == NULL)
            return txo_error_set(err, TXO_EINVAL, "event handler %zu needs a type and a function",
                                 i);
    for (size_t i = 0; i < o->n_commands; i++)
        if (o->commands[i].command_type == NULL || o->commands[i].fn == NULL)
            return txo_error_set(err, TXO_EINVAL, "command handler %zu needs a type and a function",
                                 i);
    return txo__saga_table_check(o->sagas, o->n_sagas, err);
}

void txo_worker_attach_consumer(struct txo_worker *w, struct txo_consumer *consumer)
{
    if (!w->running) /* attaching to a running worker would race its threads: ignored */
        w->consumer = consumer;
}

int txo_worker_new(const struct txo_db_opts *db_opts, const struct txo_worker_opts *opts,
                   struct txo_worker **out, struct txo_error *err)
{
    int rc = check_opts(opts, err);
    if (rc != 0)
        return rc;
    struct txo_worker *w = txo_calloc(1, sizeof(*w));
    if (w == NULL)
        return txo_error_set(err, TXO_ENOMEM, "worker");
    w->db_opts = *db_opts;
    w->opts = *opts;
    w->opts.saga.tracer = opts->tracer; /* the engine records the steps' spans */
    w->n_runners = opts->saga_threads;
    /* Room for two batches per runner (the next ones form while these run), and at least for
     * the sagas of one delivery (a relay batch consumed at once), which would otherwise wait
     * for the scheduler's next look. */
    size_t room = 2 * w->n_runners * w->opts.saga_batch;
    if (room < QUEUE_MIN)
        room = QUEUE_MIN;
    w->limit = room < QUEUE_CAP ? room : QUEUE_CAP;
    w->inflight = txo_calloc(w->n_runners * w->opts.saga_batch, TXO_SAGA_ID_LEN);
    w->runners = txo_calloc(w->n_runners, sizeof(*w->runners));
    if (w->inflight == NULL || w->runners == NULL) {
        txo_free(w->inflight);
        txo_free(w->runners);
        txo_free(w);
        return txo_error_set(err, TXO_ENOMEM, "worker");
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->consume_mu, NULL);
    txo__cond_init_monotonic(&w->work_ready);
    txo__cond_init_monotonic(&w->wake);
    rc = txo__worker_metrics_register(w->opts.metrics, &w->m, err);
    w->opts.saga.deadlines = w->m.deadlines; /* the engine counts them as it finds them */
    if (rc == 0) {
        w->order = txo__order_watch_new(opts->metrics, err);
        if (w->order == NULL)
            rc = err != NULL && err->code != 0 ? err->code : TXO_ENOMEM;
    }
    if (rc != 0) {
        txo_worker_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

int txo_worker_start(struct txo_worker *w, struct txo_error *err)
{
    if (w->running)
        return txo_error_set(err, TXO_ESTATE, "worker already started");
    struct runner *args = txo_calloc(w->n_runners, sizeof(*args));
    if (args == NULL)
        return txo_error_set(err, TXO_ENOMEM, "worker threads");
    w->running = true;
    w->stopping = false;
    size_t started = 0;
    for (; started < w->n_runners; started++) {
        args[started].w = w;
        args[started].index = started;
        if (pthread_create(&w->runners[started], NULL, runner_main, &args[started]) != 0)
            break;
    }
    int rc = 0;
    if (started < w->n_runners) {
        rc = txo_error_set(err, TXO_EIO, "cannot start saga runner threads");
    } else if (pthread_create(&w->scheduler, NULL, scheduler_main, w) != 0) {
        rc = txo_error_set(err, TXO_EIO, "cannot start the scheduler thread");
    } else {
        w->has_scheduler = true;
        if (w->opts.retention.interval_s > 0) {
            if (pthread_create(&w->cleaner, NULL, cleaner_main, w) != 0)
                rc = txo_error_set(err, TXO_EIO, "cannot start the cleaner thread");
            else
                w->has_cleaner = true;
        }
        if (rc == 0 && w->consumer != NULL) {
            if (pthread_create(&w->consumer_thread, NULL, consumer_main, w) != 0)
                rc = txo_error_set(err, TXO_EIO, "cannot start the consumer thread");
            else
                w->has_consumer = true;
        }
    }
    w->n_runners_started = started;
    w->runner_args = args;
    if (rc != 0)
        txo_worker_stop(w);
    return rc;
}

void txo_worker_stop(struct txo_worker *w)
{
    if (w == NULL || !w->running)
        return;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    pthread_cond_broadcast(&w->work_ready);
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->mu);
    for (size_t i = 0; i < w->n_runners_started; i++)
        pthread_join(w->runners[i], NULL);
    if (w->has_scheduler)
        pthread_join(w->scheduler, NULL);
    if (w->has_cleaner)
        pthread_join(w->cleaner, NULL);
    if (w->has_consumer)
        pthread_join(w->consumer_thread, NULL);
    w->has_scheduler = w->has_cleaner = w->has_consumer = false;
    w->n_runners_started = 0;
    txo_free(w->runner_args);
    w->runner_args = NULL;
    w->len = 0;
    w->running = false;
}

void txo_worker_free(struct txo_worker *w)
{
    if (w == NULL)
        return;
    txo_worker_stop(w);
    txo_db_close(w->consume_db);
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->consume_mu);
    pthread_cond_destroy(&w->work_ready);
    pthread_cond_destroy(&w->wake);
    txo_free(w->inflight);
    txo_free(w->runners);
    txo__order_watch_free(w->order);
    txo_free(w);
}

void txo_worker_get_stats(struct txo_worker *w, struct txo_worker_stats *out)
{
    out->consumed = atomic_load(&w->consumed);
    out->duplicates = atomic_load(&w->duplicates);
    out->sagas_completed = atomic_load(&w->completed);
    out->sagas_aborted = atomic_load(&w->aborted);
    out->sagas_comp_failed = atomic_load(&w->comp_failed);
    out->picked_up = atomic_load(&w->picked_up);
    out->retries = atomic_load(&w->retries);
    out->commands_done = atomic_load(&w->commands_done);
    out->commands_failed = atomic_load(&w->commands_failed);
    out->cleaned = atomic_load(&w->cleaned);
}
