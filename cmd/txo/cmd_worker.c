/*
 * `txo worker`: consumes OrderCreated from NATS JetStream (or takes sagas and commands from the
 * database only, --broker none), runs sagas, the command queue, compensation retries and the
 * retention cleaner (app/order-service/worker.h). Run as many as you like against one database.
 */
#include <inttypes.h>
#include <stdio.h>

#include "clean.h"
#include "daemons.h"
#include "tracing.h"
#include "notify.h"

static int run(void);
static void add_settings(struct settings_table *t);

const struct command cmd_worker = {
    .name = "worker",
    .summary = "consume OrderCreated, run sagas, commands, compensation retries and cleanup",
    .usage = "txo worker [options]",
    .description =
        "Consumes OrderCreated events from a broker (--broker nats: the JetStream durable "
        "consumer)\n"
        "and records each in inbox_events in the same transaction as the saga it starts (a\n"
        "duplicate delivery is dropped). Runs sagas to a terminal state, resumes the sagas of\n"
        "workers that died (expired owner lease), runs StartOrderSaga commands of the async\n"
        "API, retries COMPENSATION_FAILED sagas with backoff, and deletes old PUBLISHED outbox\n"
        "rows, idempotency keys, inbox rows and DONE commands in small batches. With\n"
        "--broker none it does all of that except consuming (sagas then come from the async\n"
        "API's commands or from `txo up`). SIGTERM/SIGINT: finish the steps in flight, exit 0.",
    .add_settings = add_settings,
    .run = run,
    .examples = "# Consume OrderCreated from NATS and call the payment and shipment services:\n"
                "txo worker --broker nats --payment-url http://payments.internal:8081 "
                "--shipment-url http://shipments.internal:8082\n"
                "# Only the async API's commands, retries and cleanup (no broker):\n"
                "txo worker --broker none\n",
    .exit_status =
        "0 after a graceful stop (SIGTERM or SIGINT), 1 when the worker cannot start or fails, "
        "2 on a bad option or environment variable.",
};

struct worker_cmd_opts {
    struct common_opts common;
    struct tracing_settings tracing;
    struct worker_settings worker;
    struct services_settings services;
    const char *broker;
    const char *metrics_listen;
};

static struct worker_cmd_opts opts;

/* The settings of this command, in --help order. */
static void add_settings(struct settings_table *t)
{
    settings_add_common(t, &opts.common);
    settings_add_tracing(t, &opts.tracing);
    settings_add_worker(t, &opts.worker);
    settings_add_services(t, &opts.services);
    cmd_brokers_add_consumer_choice(t, CMD_BROKER_CHOICE_WORKER, &opts.broker);
    settings_add_metrics_listen(t, &opts.metrics_listen);
}

static int run(void)
{
    if (!daemon_check_settings("worker", NULL, &opts.services) ||
        !clean_archive_ok("worker", "clean-archive", opts.worker.opts.retention.archive_dir))
        return 2;
    const struct cmd_broker *broker = NULL;
    if (!cmd_broker_choose_consumer("worker", CMD_BROKER_CHOICE_WORKER, opts.broker, &broker))
        return 2;

    signals_block();
    int status = 1;
    struct txo_error err;
    txo_error_init(&err);
    struct daemon_base base = {.metrics = NULL};
    struct daemon_worker *worker = NULL;
    struct txo_http_server *msrv = NULL;
    /* The worker's threads ride out a database that goes away; at start-up it waits, like
     * serve and relay, so that READY=1 means the database answered. */
    if (!daemon_base_start("worker", &opts.common, true, &opts.tracing, &opts.services, &base,
                           &status))
        goto out;
    worker =
        daemon_worker_new("worker", &opts.common, &opts.worker, base.services, broker, base.reg);
    if (worker == NULL)
        goto out;
    if (!daemon_metrics_server_start("worker", opts.metrics_listen, base.metrics, &msrv))
        goto out;
    if (txo_worker_start(daemon_worker_runtime(worker), &err) != 0) {
        cmd_report("worker", "starting the worker", &err);
        goto out;
    }
    TXO_LOG(TXO_LOG_INFO, "worker", "worker started",
            TXO_KV_U64("saga_threads", opts.worker.opts.saga_threads),
            TXO_KV_STR("broker", opts.broker));
    daemon_base_register("worker", &base, NULL);
    notify_run_until_stopped("worker", "running sagas");
    status = 0;
out:
    daemon_base_unregister(&base); /* first: it reads the services' breakers */
    txo_http_server_stop(msrv);
    daemon_worker_stop("worker", worker);
    daemon_worker_free(worker);
    daemon_base_stop(&base);     /* after the worker: its last spans are sent */
    cmd_broker_shutdown(broker); /* the SDK's own threads, so nothing is left for valgrind */
    return status;
}
