/*
 * What the worker's files share (src/worker/worker.c: the queue, the threads and the
 * lifecycle; worker_consume.c: the handlers and the consuming of messages): the worker's state
 * and the few helpers both call. Not a public header.
 */
#ifndef TXO_WORKER_INTERNAL_H
#define TXO_WORKER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "txo/cmdq.h"
#include "txo/saga.h"
#include "txo/trace.h"
#include "txo/worker.h"
#include "worker/order_watch.h"
#include "worker/worker_observe.h"

#define QUEUE_CAP       1024
#define QUEUE_MIN       512 /* the least room of the queue, whatever saga_threads and saga_batch */
#define STARTED_MAX     8   /* sagas one handler call may start */
#define COMMAND_TYPE_SZ (TXO_CMDQ_TYPE_MAX + 1)

enum job_kind { JOB_RUN, JOB_RETRY };

struct job {
    struct txo_saga_ref ref;
    enum job_kind kind;
    int64_t queued_us; /* txo_monotonic_us() when it was queued */
};

/* A saga a handler started inside a batch, created with the others at the batch's end. */
struct pending_saga {
    const struct txo_saga_def *def;
    struct txo_saga_new s; /* correlation id and payload: copies, owned; trace: set at flush */
    bool has_trace;        /* the event being handled had a trace context: trace is a copy */
    struct txo_trace_ctx trace;
};

struct txo_handler_ctx {
    struct txo_worker *w;
    struct txo_tx *tx;
    /* Sagas started in this transaction, queued once it commits (reset per attempt). */
    struct txo_saga_ref started[STARTED_MAX];
    size_t n_started;
    /* In a batch (txo_worker_handle_many): the sagas to create with one statement at its
     * end, and whether a handler asked for something only the single path can answer. */
    bool batch;
    struct pending_saga *pending;
    size_t n_pending, cap_pending;
    bool needs_single;
    /* The span of the event or command being handled (NULL: none): the sagas it starts
     * continue it. */
    const struct txo_trace_ctx *trace;
};

struct runner {
    struct txo_worker *w;
    size_t index;
};

struct txo_worker {
    struct txo_db_opts db_opts;
    struct txo_worker_opts opts;

    pthread_mutex_t mu;
    pthread_cond_t work_ready; /* runners wait here */
    pthread_cond_t wake;       /* scheduler, cleaner, consumer wait here (stop, new space) */
    struct job queue[QUEUE_CAP];
    size_t head, len, limit;
    char (*inflight)[TXO_SAGA_ID_LEN]; /* n_runners x batch: what each runner holds */
    size_t active;                     /* runners running a batch now */
    bool stopping;
    bool running;
    uint64_t kicks; /* bumped when a runner makes room in a full queue (wakes the scheduler) */

    pthread_t *runners;
    size_t n_runners;
    size_t n_runners_started;
    struct runner *runner_args;
    pthread_t scheduler, cleaner, consumer_thread;
    bool has_cleaner, has_consumer, has_scheduler;

    pthread_mutex_t consume_mu; /* txo_worker_handle_message's connection */
    struct txo_db *consume_db;
    struct txo_consumer *consumer;

    _Atomic uint64_t consumed, duplicates, completed, aborted, comp_failed, picked_up, retries,
        commands_done, commands_failed, cleaned;

    struct worker_metrics m;        /* worker_observe.h; NULLs without opts.metrics */
    struct txo__order_watch *order; /* the inbox's order verdicts: counted, logged, held */
};

/* Adds n to the worker's counter and, when it is registered, to its metric. */
void txo__worker_count(_Atomic uint64_t *counter, struct txo_metric *m, const char *const *labels,
                       uint64_t n);

/* Opens *db when it is not open. Logs and returns false on failure. */
bool txo__worker_ensure_db(struct txo_worker *w, struct txo_db **db, const char *who);

/* After a failed call on db: a lost or unusable connection is closed, to be reopened. */
void txo__worker_drop_db_if_broken(struct txo_db **db, int rc);

/* Queues a saga for the runners unless the queue is full, the worker stopping or the saga
 * already queued or running here. Returns whether it was queued. */
bool txo__worker_enqueue(struct txo_worker *w, const struct txo_saga_ref *ref, enum job_kind kind);

/* Hands the sagas a committed handler (or command) started to the runners. */
void txo__worker_queue_started(struct txo_worker *w, const struct txo_handler_ctx *hc);

/* The registered definition of a saga type, or NULL. */
const struct txo_saga_def *txo__worker_find_saga(const struct txo_worker *w, const char *type);

#endif
