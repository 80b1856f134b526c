/*
 * The worker: the consuming half of the pattern, the counterpart of txo_relay.
 *
 * The relay publishes what applications commit to outbox_events; the worker consumes those
 * events and does what they start. The application registers tables, the way an HTTP server
 * registers routes, and the library owns everything else:
 *
 *   event handlers    by event type. A handler runs inside the transaction that also records
 *                     the event's idempotency key in the transactional inbox, so its effect
 *                     is applied once although delivery is at least once; events of types
 *                     nobody handles are acknowledged and dropped (no inbox row);
 *   command handlers  by command type, for command_queue rows (txo/cmdq.h). A handler runs
 *                     inside the transaction that also marks the command DONE;
 *   saga definitions  by saga type. A handler starts a saga with txo_handler_start_saga()
 *                     in its transaction; once that commits the worker runs it.
 *
 *   struct txo_worker_opts o;
 *   txo_worker_opts_init(&o);
 *   o.events = order_events;      o.n_events = TXO_ARRAY_LEN(order_events);
 *   o.commands = order_commands;  o.n_commands = TXO_ARRAY_LEN(order_commands);
 *   o.sagas = order_sagas;        o.n_sagas = 1;
 *   o.metrics = registry;
 *   rc = txo_worker_new(&db_opts, &o, &w, &err);
 *   txo_worker_attach_consumer(w, consumer);  (or hand txo_worker_handle_message to a
 *                                              local dispatch publisher)
 *   rc = txo_worker_start(w, &err);  ...  txo_worker_stop(w);  txo_worker_free(w);
 *
 * What runs, each thread with its own database connection (reopened after a lost one; a
 * thread that cannot reach the database waits and tries again):
 *   - the transport's polling thread (when a consumer is attached), calling the event
 *     handlers through txo_worker_handle_message;
 *   - saga runners (saga_threads): drive sagas to a terminal state with txo_saga_run(), or
 *     several at once with txo_saga_run_many() (saga_batch);
 *   - the scheduler: finds the work no live process holds: RUNNING / COMPENSATING sagas with
 *     no owner or an expired owner lease (new sagas, and those whose worker died) are resumed;
 *     COMPENSATION_FAILED sagas whose retry is due (saga_instances.retry_at, oldest first)
 *     are retried with txo_saga_retry(); due commands are claimed with a lease and run;
 *   - the cleaner (every retention.interval_s): the retention of txo/retention.h.
 * Nothing is lost when the process dies: the in-process queue only mirrors the database.
 * Several workers (threads, processes, machines) share one database: saga ownership is a
 * lease, commands are claimed with a lease, and every state change is fenced.
 *
 * Metrics (when opts.metrics is set), registered and counted here:
 *   txo_inbox_consumed_total            events whose handler's effect committed
 *   txo_inbox_duplicates_total          deliveries the inbox dropped
 *   txo_saga_runs_total{outcome}        runs that ended COMPLETED, ABORTED (FAILED or
 *                                       COMPENSATED) or COMPENSATION_FAILED
 *   txo_saga_picked_up_total            sagas taken up by the scheduler (new or resumed)
 *   txo_saga_retries_total              automatic retries of COMPENSATION_FAILED sagas
 *   txo_commands_done_total, txo_commands_failed_total
 *   txo_retention_deleted_total{table}
 * (The gauges read from the tables, such as sagas per status, belong to whoever scrapes the
 * database: txo_saga_count().)
 *
 * Batches: a transport that delivers many messages at once (the local dispatch of a relay
 * batch) hands them to txo_worker_handle_many(): one transaction for the delivery's inbox
 * rows, handlers and new sagas. Handlers are the same per-event functions either way.
 *
 * Thread-safety: txo_worker_handle_message may be called from any thread (calls are
 * serialised on the worker's consumer connection). new/attach/start/stop/free from one thread.
 */
#ifndef TXO_WORKER_H
#define TXO_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/backoff.h"
#include "txo/cmdq.h"
#include "txo/common.h"
#include "txo/consumer.h"
#include "txo/db.h"
#include "txo/retention.h"
#include "txo/saga.h"

struct txo_metrics;
struct txo_worker;

/* What a handler is given besides its transaction: a way to start sagas, and the app's arg. */
struct txo_handler_ctx;

/* The opts.handler_arg the application gave the worker. */
TXO_API void *txo_handler_arg(const struct txo_handler_ctx *hc);

/*
 * Starts a saga of def (one of the worker's registered definitions) inside the handler's
 * transaction (txo_saga_create: idempotent on the correlation id). Once the transaction
 * commits, the worker hands the saga to a runner. *created (may be NULL) tells whether it is
 * new. Errors: those of txo_saga_create().
 */
TXO_API TXO_MUST_CHECK int txo_handler_start_saga(struct txo_handler_ctx *hc,
                                                  const struct txo_saga_def *def,
                                                  const char *correlation_id,
                                                  const char *payload_json, bool *created,
                                                  struct txo_error *err);

/*
 * An event handler: applies ev's effect with tx. Returns 0 to commit (the inbox row with it),
 * a transient code to have the event delivered again later, a permanent code to refuse it
 * for good (see txo/consumer.h for what each transport then does).
 */
typedef int (*txo_event_handler_fn)(struct txo_tx *tx, const struct txo_event *ev,
                                    struct txo_handler_ctx *hc, struct txo_error *err);

struct txo_event_handler {
    const char *event_type; /* "OrderCreated" */
    txo_event_handler_fn fn;
    /*
     * Order (txo/inbox.h): every event is judged against the last one handled of its
     * aggregate; gaps and older-after-newer events are counted in
     * txo_inbox_out_of_order_total{aggregate_type,kind} and logged once per aggregate, and
     * handled. With hold_out_of_order_ms > 0 an event found after a gap is not handled: it is
     * refused as transient (delivered again) until its predecessor was handled, for at most
     * that long from its first hold in this process, then refused for good (TXO_EBUSINESS,
     * the reason in the error: TERM on NATS, dead-lettered with local dispatch). 0: never held.
     */
    unsigned hold_out_of_order_ms;
};

/* A command handler: applies cmd's effect with tx, the transaction that marks it DONE.
 * Transient errors retry the command with backoff, permanent ones make it FAILED. */
typedef int (*txo_command_handler_fn)(struct txo_tx *tx, const struct txo_command *cmd,
                                      struct txo_handler_ctx *hc, struct txo_error *err);

struct txo_command_handler {
    const char *command_type; /* "StartOrderSaga" */
    txo_command_handler_fn fn;
};

struct txo_tracer;

struct txo_worker_opts {
    const struct txo_event_handler *events;
    size_t n_events;
    const struct txo_command_handler *commands;
    size_t n_commands;
    const struct txo_saga_def *const *sagas;
    size_t n_sagas;
    void *handler_arg; /* txo_handler_arg() */

    unsigned saga_threads; /* saga runners; default 4, max 256 */
    /* The most sagas a runner takes at once (1..1000, default 50). A runner takes what is
     * queued when it takes work, never waiting for a batch to fill, so at low load a batch is
     * one saga. The sagas a runner takes run as txo_saga_run_many(); 1 runs each with
     * txo_saga_run(). */
    unsigned saga_batch;
    /* How long queued sagas may wait for a busy runner to take them all (0..1000 ms, default
     * 10) before an idle one takes them. A runner never waits when no other is busy (at low
     * load a batch is one saga) or when a whole batch is queued. 0: any idle runner takes
     * what is queued at once. */
    int64_t saga_gather_ms;
    int64_t poll_ms;           /* scheduler period when idle; default 200 */
    struct txo_saga_opts saga; /* lease, step tries, compensation retry policy (owner: per
                                * runner thread) */
    /* ctx->user of the sagas a runner thread runs: made once per runner thread by
     * runner_user_new(runner_user_arg) (may be NULL: ctx->user is then runner_user_arg) and
     * released by runner_user_free when the thread ends. */
    void *(*runner_user_new)(void *arg);
    void (*runner_user_free)(void *user);
    void *runner_user_arg;

    unsigned command_lease_s;            /* default 30 */
    unsigned command_max_attempts;       /* default 10, then FAILED */
    struct txo_backoff command_backoff;  /* default 1 s .. 60 s, jitter 0.5 */
    struct txo_retention_opts retention; /* interval_s 0: no cleaner */
    struct txo_metrics *metrics;         /* NULL: none */
    /* NULL: none. Else every consumed event that carries a sampled trace context is a
     * CONSUMER span ("<type> process", a child of the producer's span; txo/tracer.h), and so
     * is every saga step's run (the engine's, struct txo_saga_opts.tracer). */
    struct txo_tracer *tracer;
};

/* Fills opts with the defaults above and empty tables. Never fails. */
TXO_API void txo_worker_opts_init(struct txo_worker_opts *opts);

/*
 * Creates a worker; db_opts is copied (its strings borrowed for the worker's life) and opens
 * one connection per thread; the tables in opts are borrowed. Errors: TXO_EINVAL (bad opts,
 * a handler without a type or function, two sagas of one type), TXO_ENOMEM, metric
 * registration errors.
 */
TXO_API TXO_MUST_CHECK int txo_worker_new(const struct txo_db_opts *db_opts,
                                          const struct txo_worker_opts *opts,
                                          struct txo_worker **out, struct txo_error *err);

/*
 * Has the worker poll consumer (a transport created with txo_worker_handle_message and this
 * worker as its handler) on a thread of its own. Call before txo_worker_start(); the
 * consumer is borrowed and must outlive the worker's threads (free it after stop).
 */
TXO_API void txo_worker_attach_consumer(struct txo_worker *w, struct txo_consumer *consumer);

/* Starts the threads. Errors: TXO_ESTATE (started already), TXO_ENOMEM, TXO_EIO. */
TXO_API TXO_MUST_CHECK int txo_worker_start(struct txo_worker *w, struct txo_error *err);

/* Asks every thread to finish what it is doing (a saga step in flight completes) and joins
 * them. Idempotent. */
TXO_API void txo_worker_stop(struct txo_worker *w);

/* Stops (if running) and frees. NULL is a no-op. */
TXO_API void txo_worker_free(struct txo_worker *w);

/*
 * The worker's message handler, a txo_message_handler_fn (arg = the worker): decodes the
 * envelope, and for a registered event type records the inbox row and runs the handler in one
 * transaction, then queues the sagas it started. Errors: TXO_EINVAL (not an envelope, or no
 * idempotency key: permanent), the handler's errors, DB errors.
 */
TXO_API int txo_worker_handle_message(void *arg, const struct txo_inbound_message *msg,
                                      struct txo_error *err);

/*
 * txo_worker_handle_message() for a whole delivery at once, a txo_batch_handler_fn (arg =
 * the worker): the messages the worker handles are recorded in the inbox with one statement
 * (duplicates dropped), their handlers run in that same transaction, and the sagas they start
 * are created with one statement per saga type at its end. results[i] / errors[i] get each
 * message's verdict, as txo_worker_handle_message() would give it. Whatever the batch cannot
 * do in one transaction (a handler error, an id raced by another consumer, a handler asking
 * txo_handler_start_saga() whether the saga was new) rolls it back and runs its messages one
 * by one through txo_worker_handle_message(). Returns 0.
 */
TXO_API int txo_worker_handle_many(void *arg, const struct txo_inbound_message *msgs, size_t n,
                                   int *results, struct txo_error *errors);

/*
 * txo_worker_handle_many() for events already decoded, a txo_event_batch_fn (arg = the
 * worker): what local dispatch hands over (struct txo_handler.events), so that no envelope is
 * written and read back in one process. The same transaction, fallback and verdicts as
 * txo_worker_handle_many() for the messages these events decode from. Returns 0.
 */
TXO_API int txo_worker_handle_events(void *arg, const struct txo_event *evs, size_t n, int *results,
                                     struct txo_error *errors);

/* What the worker did so far (also in the metrics). */
struct txo_worker_stats {
    uint64_t consumed;   /* events whose effect committed */
    uint64_t duplicates; /* deliveries dropped by the inbox */
    uint64_t sagas_completed;
    uint64_t sagas_aborted; /* FAILED or COMPENSATED */
    uint64_t sagas_comp_failed;
    uint64_t picked_up; /* sagas taken up by the scheduler (new or resumed) */
    uint64_t retries;   /* automatic retries of COMPENSATION_FAILED sagas */
    uint64_t commands_done;
    uint64_t commands_failed; /* attempts that failed */
    uint64_t cleaned;         /* rows deleted by the cleaner */
};

TXO_API void txo_worker_get_stats(struct txo_worker *w, struct txo_worker_stats *out);

#endif
