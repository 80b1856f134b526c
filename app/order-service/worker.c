/*
 * The order worker: see worker.h for what it runs. Layout of this file:
 *   - a small job queue (saga ids to run or retry) shared by the scheduler, the consumer and
 *     the runners, with an in-flight list so one process never runs a saga twice at once
 *     (between processes the saga's owner lease does that);
 *   - the OrderCreated consumer;
 *   - the runner, scheduler, cleaner and consumer threads.
 *
 * Every thread has its own database connection, opened lazily and reopened after a lost
 * connection; a thread that cannot reach the database logs, waits poll_ms and tries again, so
 * the worker rides out a database restart.
 *
 * Nothing here is lost when the process dies: the queue only mirrors what the database says
 * (a RUNNING saga nobody owns is found again by any scheduler), so it may be bounded and may
 * drop work when full.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "txo/txo.h"
#include "txo/cmdq.h"
#include "txo/consumer.h"
#include "txo/inbox.h"
#include "txo/retention.h"
#include "order_services.h"
#include "worker.h"

#define QUEUE_CAP     256
#define ABANDONED_CAP 1024

enum job_kind { JOB_RUN, JOB_RETRY };

struct job {
    char id[TXO_SAGA_ID_LEN];
    enum job_kind kind;
};

struct runner;

struct order_worker {
    struct txo_db_opts db_opts;
    struct order_worker_opts opts;

    pthread_mutex_t mu;
    pthread_cond_t work_ready; /* runners wait here */
    pthread_cond_t wake;       /* scheduler, cleaner, consumer wait here (stop, new space) */
    struct job queue[QUEUE_CAP];
    size_t head, len, limit;
    char (*inflight)[TXO_SAGA_ID_LEN];
    bool stopping;
    bool running;
    uint64_t kicks; /* bumped when a runner makes room in a full queue (wakes the scheduler) */

    pthread_t *runners;
    size_t n_runners;
    size_t n_runners_started;
    struct runner *runner_args;
    pthread_t scheduler, cleaner, consumer_thread;
    bool has_cleaner, has_consumer, has_scheduler;

    pthread_mutex_t consume_mu; /* order_worker_handle_message's connection */
    struct txo_db *consume_db;

    struct txo_consumer *consumer;
    char (*abandoned)[TXO_SAGA_ID_LEN]; /* COMPENSATION_FAILED sagas already alerted about */
    size_t n_abandoned;

    _Atomic uint64_t consumed, duplicates, completed, aborted, comp_failed, resumed, commands_done,
        commands_failed, cleaned;
};

void order_worker_opts_init(struct order_worker_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->saga_threads = 4;
    opts->poll_ms = 200;
    txo_saga_opts_init(&opts->saga);
    opts->command_lease_s = 30;
    opts->command_max_attempts = 10;
    opts->compensation_retry_base_s = 5;
    opts->compensation_retry_max_s = 300;
    opts->compensation_max_retries = 10;
    opts->outbox_retention_s = 7 * 86400;
    opts->idempotency_retention_s = 86400;
    opts->inbox_retention_s = 7 * 86400;
    opts->clean_interval_s = 60;
    opts->clean_batch = 1000;
}

/* ---- time and waiting ---- */

static struct timespec deadline_in(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/*
 * Waits up to ms, or until stop; with `wakeable` also until kick() (the scheduler: the queue
 * had been full and a runner made room). Spurious wake-ups and other threads' kicks do not
 * end the wait early. Returns false when stopping.
 */
static bool wait_for(struct order_worker *w, int64_t ms, bool wakeable)
{
    struct timespec until = deadline_in(ms);
    pthread_mutex_lock(&w->mu);
    uint64_t gen = w->kicks;
    while (!w->stopping && !(wakeable && w->kicks != gen) &&
           pthread_cond_timedwait(&w->wake, &w->mu, &until) != ETIMEDOUT)
        ;
    bool go_on = !w->stopping;
    pthread_mutex_unlock(&w->mu);
    return go_on;
}

/* Sleeps ms (cleaner, consumer back-off): only stop ends it early. */
static bool nap(struct order_worker *w, int64_t ms)
{
    return wait_for(w, ms, false);
}

static bool stopping(struct order_worker *w)
{
    pthread_mutex_lock(&w->mu);
    bool s = w->stopping;
    pthread_mutex_unlock(&w->mu);
    return s;
}

/* Opens *db when it is not open. Logs and returns false on failure. */
static bool ensure_db(struct order_worker *w, struct txo_db **db, const char *who)
{
    if (*db != NULL)
        return true;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_open(&w->db_opts, db, &err) != 0) {
        TXO_LOG(TXO_LOG_WARN, "worker", "cannot connect thread=%s err=\"%s\"", who, err.msg);
        *db = NULL;
        return false;
    }
    return true;
}

/* After a failed call on db: a lost or unusable connection is closed, to be reopened. */
static void drop_db_if_broken(struct txo_db **db, int rc)
{
    if (rc == TXO_ECONNLOST || rc == TXO_ECONNECT) {
        txo_db_close(*db);
        *db = NULL;
    }
}

/* ---- the job queue ---- */

static bool known_locked(struct order_worker *w, const char *id)
{
    for (size_t i = 0; i < w->len; i++)
        if (strcmp(w->queue[(w->head + i) % QUEUE_CAP].id, id) == 0)
            return true;
    for (size_t i = 0; i < w->n_runners; i++)
        if (strcmp(w->inflight[i], id) == 0)
            return true;
    return false;
}

/* Queues a saga unless it is queued or running here already, or the queue is full (the
 * scheduler finds it again later). Returns true when queued. */
static bool enqueue(struct order_worker *w, const char *id, enum job_kind kind)
{
    bool queued = false;
    pthread_mutex_lock(&w->mu);
    if (!w->stopping && w->len < w->limit && !known_locked(w, id)) {
        struct job *j = &w->queue[(w->head + w->len) % QUEUE_CAP];
        snprintf(j->id, sizeof(j->id), "%s", id);
        j->kind = kind;
        w->len++;
        queued = true;
        pthread_cond_signal(&w->work_ready);
    }
    pthread_mutex_unlock(&w->mu);
    return queued;
}

static size_t queue_space(struct order_worker *w)
{
    pthread_mutex_lock(&w->mu);
    size_t space = w->limit - w->len;
    pthread_mutex_unlock(&w->mu);
    return space;
}

/* ---- the OrderCreated consumer ---- */

struct consume_args {
    const char *event_id;
    const char *event_type;
    const char *payload;
    int64_t order_id;
    bool duplicate;
    bool created;
    char saga_id[TXO_SAGA_ID_LEN];
};

static int consume_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct consume_args *a = arg;
    a->created = false;
    int rc = txo_inbox_record(tx, a->event_id, a->event_type, a->payload, &a->duplicate, err);
    if (rc != 0 || a->duplicate)
        return rc;
    return orders_start_saga_tx(tx, a->order_id, a->saga_id, &a->created, err);
}

int order_worker_handle_message(void *arg, const struct txo_inbound_message *msg,
                                struct txo_error *err)
{
    struct order_worker *w = arg;
    json_error_t jerr;
    json_t *env = json_loadb(msg->data, msg->len, 0, &jerr);
    char *payload = NULL;
    int rc = 0;
    if (env == NULL) {
        rc = txo_error_set(err, TXO_EINVAL, "message %s is not JSON: %s",
                           msg->msg_id != NULL ? msg->msg_id : "?", jerr.text);
        goto out;
    }
    const char *type = json_string_value(json_object_get(env, "type"));
    if (type == NULL || strcmp(type, "OrderCreated") != 0)
        goto out; /* not ours: acknowledged */
    const char *key = msg->msg_id != NULL
                          ? msg->msg_id
                          : json_string_value(json_object_get(env, "idempotency_key"));
    json_t *body = json_object_get(env, "payload");
    json_t *order_id = json_object_get(body, "order_id");
    if (key == NULL || !json_is_integer(order_id) || json_integer_value(order_id) <= 0) {
        rc = txo_error_set(err, TXO_EINVAL,
                           "OrderCreated without idempotency key or positive order_id");
        goto out;
    }
    payload = json_dumps(body, JSON_COMPACT);
    if (payload == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "OrderCreated payload");
        goto out;
    }
    struct consume_args a = {.event_id = key,
                             .event_type = type,
                             .payload = payload,
                             .order_id = json_integer_value(order_id)};
    pthread_mutex_lock(&w->consume_mu);
    if (!ensure_db(w, &w->consume_db, "consumer")) {
        pthread_mutex_unlock(&w->consume_mu);
        rc = txo_error_set(err, TXO_ECONNECT, "worker database unreachable");
        goto out;
    }
    rc = txo_db_transact(w->consume_db, TXO_ISO_READ_COMMITTED, consume_tx, &a, err);
    drop_db_if_broken(&w->consume_db, rc);
    pthread_mutex_unlock(&w->consume_mu);
    if (rc != 0)
        goto out;
    /* Committed but not acknowledged yet: a crash here makes the transport deliver the event
     * again, and the inbox must drop it (scenario F). */
    txo_crash_point("worker.after_consume");
    if (a.duplicate) {
        atomic_fetch_add(&w->duplicates, 1);
        TXO_LOG(TXO_LOG_DEBUG, "worker", "duplicate delivery dropped message_id=%s", key);
    } else {
        atomic_fetch_add(&w->consumed, 1);
        if (a.created)
            enqueue(w, a.saga_id, JOB_RUN);
    }
out:
    free(payload); /* jansson allocates with malloc */
    json_decref(env);
    return rc;
}

/* ---- runners ---- */

struct runner {
    struct order_worker *w;
    size_t index;
};

static void run_job(struct order_worker *w, struct txo_db **db,
                    struct order_service_session *session, const struct job *job)
{
    struct txo_error err;
    txo_error_init(&err);
    struct order_saga_env env;
    order_saga_env_init(&env, w->opts.faults);
    env.session = session;
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    int rc =
        job->kind == JOB_RUN
            ? txo_saga_run(*db, order_saga_def(), job->id, &w->opts.saga, &env, &final, &err)
            : txo_saga_retry(*db, order_saga_def(), job->id, &w->opts.saga, &env, &final, &err);
    if (rc == TXO_ELEASELOST || rc == TXO_ESTATE) {
        /* Another worker has it, or it moved on meanwhile: nothing to do here. */
        TXO_LOG(TXO_LOG_DEBUG, "worker", "saga skipped saga_id=%s err=\"%s\"", job->id, err.msg);
        return;
    }
    if (rc != 0) {
        TXO_LOG(TXO_LOG_WARN, "worker", "saga run interrupted saga_id=%s code=%s err=\"%s\"",
                job->id, txo_err_name(rc), err.msg);
        drop_db_if_broken(db, rc);
        return;
    }
    switch (final) {
    case TXO_SAGA_COMPLETED:
        atomic_fetch_add(&w->completed, 1);
        break;
    case TXO_SAGA_COMPENSATION_FAILED:
        atomic_fetch_add(&w->comp_failed, 1);
        TXO_LOG(TXO_LOG_WARN, "worker", "saga compensation failed saga_id=%s (will retry)",
                job->id);
        break;
    default:
        atomic_fetch_add(&w->aborted, 1);
        break;
    }
}

static void *runner_main(void *arg)
{
    struct runner *r = arg;
    struct order_worker *w = r->w;
    struct txo_db *db = NULL;
    struct order_service_session *session = NULL;
    if (w->opts.services != NULL) {
        struct txo_error err;
        txo_error_init(&err);
        if (order_service_session_new(w->opts.services, &session, &err) != 0)
            TXO_LOG(TXO_LOG_ERROR, "worker", "no external service session err=\"%s\"", err.msg);
    }
    for (;;) {
        struct job job;
        pthread_mutex_lock(&w->mu);
        while (!w->stopping && w->len == 0)
            pthread_cond_wait(&w->work_ready, &w->mu);
        if (w->stopping) {
            pthread_mutex_unlock(&w->mu);
            break;
        }
        job = w->queue[w->head];
        w->head = (w->head + 1) % QUEUE_CAP;
        w->len--;
        snprintf(w->inflight[r->index], TXO_SAGA_ID_LEN, "%s", job.id);
        if (w->len + 1 == w->limit) { /* it was full: the scheduler may have more for us */
            w->kicks++;
            pthread_cond_broadcast(&w->wake);
        }
        pthread_mutex_unlock(&w->mu);

        if (ensure_db(w, &db, "runner"))
            run_job(w, &db, session, &job);
        else
            nap(w, w->opts.poll_ms);

        pthread_mutex_lock(&w->mu);
        w->inflight[r->index][0] = '\0';
        pthread_mutex_unlock(&w->mu);
    }
    order_service_session_free(session);
    txo_db_close(db);
    return NULL;
}

/* ---- scheduler ---- */

/* Queues sagas in status that no live process holds. Returns how many were queued. */
static size_t schedule_due(struct order_worker *w, struct txo_db **db, enum txo_saga_status status)
{
    size_t space = queue_space(w);
    if (space == 0)
        return 0;
    char(*ids)[TXO_SAGA_ID_LEN] = txo_calloc(space, TXO_SAGA_ID_LEN);
    if (ids == NULL)
        return 0;
    size_t n = 0, queued = 0;
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_saga_list_due(*db, status, 0, space, ids, &n, &err);
    if (rc != 0) {
        TXO_LOG(TXO_LOG_WARN, "worker", "listing due sagas failed err=\"%s\"", err.msg);
        drop_db_if_broken(db, rc);
    }
    for (size_t i = 0; i < n; i++)
        if (enqueue(w, ids[i], JOB_RUN)) {
            queued++;
            atomic_fetch_add(&w->resumed, 1);
        }
    txo_free(ids);
    return queued;
}

struct command_args {
    int64_t order_id;
    const struct txo_command *cmd;
    char saga_id[TXO_SAGA_ID_LEN];
};

static int start_saga_command_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct command_args *a = arg;
    int rc = orders_start_saga_tx(tx, a->order_id, a->saga_id, NULL, err);
    if (rc != 0)
        return rc;
    return txo_cmdq_complete_tx(tx, a->cmd, err);
}

/*
 * Undo calls owed to an external service after a step's call timed out (its outcome unknown)
 * and the saga gave up on it (see on_aborted in order_saga.c). Each is sent with the same
 * idempotency key as the step's own compensation, so repeating it, or sending it for a call
 * that never took effect, is harmless; the command is DONE once the service answered.
 */
struct undo_command {
    const char *type;
    enum order_service_kind kind;
    const char *operation;
    const char *path;
};

static const struct undo_command undo_commands[] = {
    {ORDERS_REFUND_COMMAND, ORDER_SERVICE_PAYMENT, "refund", "/payments/refund"},
    {ORDERS_CANCEL_SHIPMENT_COMMAND, ORDER_SERVICE_SHIPMENT, "cancel", "/shipments/cancel"},
};

static int run_undo(struct txo_db *db, struct order_service_session *session,
                    const struct undo_command *u, const struct txo_command *cmd, int64_t order_id,
                    json_t *doc, struct txo_error *err)
{
    if (session == NULL || !order_services_remote(order_service_session_services(session), u->kind))
        return txo_error_set(err, TXO_ECONFIG,
                             "%s command %" PRId64 " needs its service URL (--payment-url, "
                             "--shipment-url)",
                             u->type, cmd->id);
    char key[64];
    snprintf(key, sizeof(key), "order:%" PRId64 ":%s", order_id, u->operation);
    char body[96];
    json_t *amount = json_object_get(doc, "amount_cents");
    if (json_is_integer(amount))
        snprintf(body, sizeof(body),
                 "{\"order_id\":%" PRId64 ",\"amount_cents\":%" JSON_INTEGER_FORMAT "}", order_id,
                 json_integer_value(amount));
    else
        snprintf(body, sizeof(body), "{\"order_id\":%" PRId64 "}", order_id);
    int rc = order_service_call(session, u->kind, u->operation, u->path, key, body, err);
    if (rc == 0)
        rc = txo_cmdq_complete(db, cmd, err);
    if (rc == 0)
        TXO_LOG(TXO_LOG_INFO, "worker",
                "undo of an uncertain call sent command=%s order_id=%" PRId64, u->type, order_id);
    return rc;
}

static int run_command(struct order_worker *w, struct txo_db *db,
                       struct order_service_session *session, const struct txo_command *cmd,
                       struct txo_error *err)
{
    bool start = strcmp(cmd->type, ORDERS_START_SAGA_COMMAND) == 0;
    const struct undo_command *undo = NULL;
    for (size_t i = 0; i < TXO_ARRAY_LEN(undo_commands); i++)
        if (strcmp(cmd->type, undo_commands[i].type) == 0)
            undo = &undo_commands[i];
    if (!start && undo == NULL)
        return txo_error_set(err, TXO_EINVAL, "unknown command type %s", cmd->type);
    json_t *doc = json_loads(cmd->payload, 0, NULL);
    json_t *order_id = json_object_get(doc, "order_id");
    if (!json_is_integer(order_id)) {
        json_decref(doc);
        return txo_error_set(err, TXO_EINVAL, "%s command %" PRId64 " without order_id", cmd->type,
                             cmd->id);
    }
    int rc;
    if (undo != NULL) {
        rc = run_undo(db, session, undo, cmd, json_integer_value(order_id), doc, err);
    } else {
        struct command_args a = {.order_id = json_integer_value(order_id), .cmd = cmd};
        rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, start_saga_command_tx, &a, err);
        if (rc == 0)
            enqueue(w, a.saga_id, JOB_RUN);
    }
    json_decref(doc);
    return rc;
}

static size_t schedule_commands(struct order_worker *w, struct txo_db **db, const char *owner,
                                struct order_service_session *session)
{
    size_t space = queue_space(w);
    if (space == 0)
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
        TXO_LOG(TXO_LOG_WARN, "worker", "claiming commands failed err=\"%s\"", err.msg);
        drop_db_if_broken(db, rc);
        return 0;
    }
    struct txo_backoff backoff = {.base_ms = 1000, .max_ms = 60000, .jitter = 0.5};
    for (size_t i = 0; i < n; i++) {
        txo_error_init(&err);
        rc = run_command(w, *db, session, &cmds[i], &err);
        if (rc == 0) {
            atomic_fetch_add(&w->commands_done, 1);
            continue;
        }
        atomic_fetch_add(&w->commands_failed, 1);
        TXO_LOG(TXO_LOG_WARN, "worker", "command failed command_id=%" PRId64 " err=\"%s\"",
                cmds[i].id, err.msg);
        struct txo_error ferr;
        txo_error_init(&ferr);
        bool failed = false;
        if (txo_cmdq_fail(*db, &cmds[i], err.msg, !txo_err_is_transient(rc),
                          w->opts.command_max_attempts, &backoff, &failed, &ferr) != 0)
            TXO_LOG(TXO_LOG_WARN, "worker", "recording command failure failed err=\"%s\"",
                    ferr.msg);
        else if (failed)
            TXO_LOG(TXO_LOG_ERROR, "worker",
                    "command FAILED for good command_id=%" PRId64 " type=%s err=\"%s\"", cmds[i].id,
                    cmds[i].type, err.msg);
    }
    txo_commands_free(cmds, n);
    return n;
}

static bool abandoned_before(struct order_worker *w, const char *id)
{
    for (size_t i = 0; i < w->n_abandoned; i++)
        if (strcmp(w->abandoned[i], id) == 0)
            return true;
    if (w->n_abandoned < ABANDONED_CAP)
        snprintf(w->abandoned[w->n_abandoned++], TXO_SAGA_ID_LEN, "%s", id);
    return false;
}

/* COMPENSATION_FAILED sagas whose backoff elapsed go back to the runners as retries. */
static void schedule_compensation_retries(struct order_worker *w, struct txo_db **db)
{
    char ids[32][TXO_SAGA_ID_LEN];
    size_t n = 0;
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_saga_list_due(*db, TXO_SAGA_COMPENSATION_FAILED, w->opts.compensation_retry_base_s,
                               32, ids, &n, &err);
    if (rc != 0) {
        drop_db_if_broken(db, rc);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        struct txo_saga_info info;
        txo_error_init(&err);
        if (txo_saga_load(*db, ids[i], &info, &err) != 0)
            continue;
        unsigned tries = 0;
        for (size_t s = 0; s < info.n_steps; s++)
            if (info.steps[s].status == TXO_STEP_COMPENSATION_FAILED &&
                info.steps[s].attempts > tries)
                tries = info.steps[s].attempts;
        int64_t idle_s = info.idle_s;
        txo_saga_info_release(&info);
        if (tries >= w->opts.compensation_max_retries) {
            if (!abandoned_before(w, ids[i]))
                TXO_LOG(TXO_LOG_ERROR, "worker",
                        "saga still COMPENSATION_FAILED after %u tries, left for an operator "
                        "(txo saga show / txo saga retry) saga_id=%s",
                        tries, ids[i]);
            continue;
        }
        struct txo_backoff b = {.base_ms = (int64_t)w->opts.compensation_retry_base_s * 1000,
                                .max_ms = (int64_t)w->opts.compensation_retry_max_s * 1000,
                                .jitter = 0};
        if (idle_s * 1000 >= txo_backoff_delay_ms(&b, tries > 0 ? tries : 1, 0.5))
            enqueue(w, ids[i], JOB_RETRY);
    }
}

static void *scheduler_main(void *arg)
{
    struct order_worker *w = arg;
    struct txo_db *db = NULL;
    char owner[128];
    char host[64] = "localhost";
    gethostname(host, sizeof(host) - 1);
    snprintf(owner, sizeof(owner), "%s:%ld:commands", host, (long)getpid());
    int64_t next_retry_check = 0;
    struct order_service_session *session = NULL; /* for RefundPayment commands */
    if (w->opts.services != NULL) {
        struct txo_error err;
        txo_error_init(&err);
        if (order_service_session_new(w->opts.services, &session, &err) != 0)
            TXO_LOG(TXO_LOG_ERROR, "worker", "no external service session err=\"%s\"", err.msg);
    }
    while (!stopping(w)) {
        if (!ensure_db(w, &db, "scheduler")) {
            nap(w, 1000);
            continue;
        }
        size_t found = schedule_due(w, &db, TXO_SAGA_RUNNING);
        if (db != NULL)
            found += schedule_due(w, &db, TXO_SAGA_COMPENSATING);
        if (db != NULL)
            found += schedule_commands(w, &db, owner, session);
        int64_t now = txo_monotonic_ms();
        if (db != NULL && now >= next_retry_check) {
            schedule_compensation_retries(w, &db);
            next_retry_check = now + 1000;
        }
        if (found == 0 || queue_space(w) == 0)
            wait_for(w, w->opts.poll_ms, true);
    }
    order_service_session_free(session);
    txo_db_close(db);
    return NULL;
}

/* ---- cleaner ---- */

static void clean_once(struct order_worker *w, struct txo_db **db)
{
    struct txo_error err;
    txo_error_init(&err);
    uint64_t n = 0, total = 0;
    const unsigned batch = w->opts.clean_batch;
    int rc = txo_outbox_purge_published(*db, w->opts.outbox_retention_s, batch, 100, &n, &err);
    total += n;
    if (rc == 0)
        rc = txo_idem_purge(*db, w->opts.idempotency_retention_s, batch, 100, &n, &err);
    total += rc == 0 ? n : 0;
    if (rc == 0)
        rc = txo_inbox_purge(*db, w->opts.inbox_retention_s, batch, 100, &n, &err);
    total += rc == 0 ? n : 0;
    if (rc == 0)
        rc = txo_cmdq_purge_done(*db, w->opts.inbox_retention_s, batch, 100, &n, &err);
    total += rc == 0 ? n : 0;
    if (rc != 0) {
        TXO_LOG(TXO_LOG_WARN, "worker", "retention cleaner failed err=\"%s\"", err.msg);
        drop_db_if_broken(db, rc);
    }
    atomic_fetch_add(&w->cleaned, total);
    if (total > 0)
        TXO_LOG(TXO_LOG_INFO, "worker", "retention cleaner deleted rows=%" PRIu64, total);
}

static void *cleaner_main(void *arg)
{
    struct order_worker *w = arg;
    struct txo_db *db = NULL;
    while (nap(w, (int64_t)w->opts.clean_interval_s * 1000)) {
        if (ensure_db(w, &db, "cleaner"))
            clean_once(w, &db);
    }
    txo_db_close(db);
    return NULL;
}

/* ---- consumer ---- */

static void *consumer_main(void *arg)
{
    struct order_worker *w = arg;
    while (!stopping(w)) {
        struct txo_error err;
        txo_error_init(&err);
        size_t handled = 0;
        int rc = txo_consumer_poll(w->consumer, 64, 500, &handled, &err);
        if (rc != 0) {
            TXO_LOG(TXO_LOG_WARN, "worker", "consumer poll failed code=%s err=\"%s\"",
                    txo_err_name(rc), err.msg);
            nap(w, 1000);
        }
    }
    return NULL;
}

/* ---- lifecycle ---- */

void order_worker_attach_consumer(struct order_worker *w, struct txo_consumer *consumer)
{
    if (!w->running) /* attaching to a running worker would race its threads: ignored */
        w->consumer = consumer;
}

int order_worker_new(const struct txo_db_opts *db_opts, const struct order_worker_opts *opts,
                     struct order_worker **out, struct txo_error *err)
{
    if (opts->saga_threads == 0 || opts->saga_threads > 256)
        return txo_error_set(err, TXO_EINVAL, "saga threads must be 1..256, got %u",
                             opts->saga_threads);
    if (opts->poll_ms <= 0 || opts->clean_batch == 0)
        return txo_error_set(err, TXO_EINVAL, "poll interval and clean batch must be > 0");
    struct order_worker *w = txo_calloc(1, sizeof(*w));
    if (w == NULL)
        return txo_error_set(err, TXO_ENOMEM, "worker");
    w->db_opts = *db_opts;
    w->opts = *opts;
    w->n_runners = opts->saga_threads;
    w->limit = 2 * w->n_runners < QUEUE_CAP ? 2 * w->n_runners : QUEUE_CAP;
    w->inflight = txo_calloc(w->n_runners, TXO_SAGA_ID_LEN);
    w->runners = txo_calloc(w->n_runners, sizeof(*w->runners));
    w->abandoned = txo_calloc(ABANDONED_CAP, TXO_SAGA_ID_LEN);
    if (w->inflight == NULL || w->runners == NULL || w->abandoned == NULL) {
        txo_free(w->inflight);
        txo_free(w->runners);
        txo_free(w->abandoned);
        txo_free(w);
        return txo_error_set(err, TXO_ENOMEM, "worker");
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->consume_mu, NULL);
    pthread_cond_init(&w->work_ready, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&w->wake, &attr);
    pthread_condattr_destroy(&attr);
    *out = w;
    return 0;
}

int order_worker_start(struct order_worker *w, struct txo_error *err)
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
        if (w->opts.clean_interval_s > 0) {
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
        order_worker_stop(w);
    return rc;
}

void order_worker_stop(struct order_worker *w)
{
    if (!w->running)
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

void order_worker_free(struct order_worker *w)
{
    if (w == NULL)
        return;
    order_worker_stop(w);
    txo_db_close(w->consume_db);
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->consume_mu);
    pthread_cond_destroy(&w->work_ready);
    pthread_cond_destroy(&w->wake);
    txo_free(w->inflight);
    txo_free(w->runners);
    txo_free(w->abandoned);
    txo_free(w);
}

void order_worker_get_stats(struct order_worker *w, struct order_worker_stats *out)
{
    out->consumed = atomic_load(&w->consumed);
    out->duplicates = atomic_load(&w->duplicates);
    out->sagas_completed = atomic_load(&w->completed);
    out->sagas_aborted = atomic_load(&w->aborted);
    out->sagas_comp_failed = atomic_load(&w->comp_failed);
    out->resumed = atomic_load(&w->resumed);
    out->commands_done = atomic_load(&w->commands_done);
    out->commands_failed = atomic_load(&w->commands_failed);
    out->cleaned = atomic_load(&w->cleaned);
}
