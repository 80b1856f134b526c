/*
 * `txo serve`: the order service's HTTP API (app/order-service/api.h), with /metrics. It only
 * writes orders and their OrderCreated events; `txo relay` publishes them and `txo worker`
 * runs the sagas (or `txo up` runs all three in one process).
 */
#include <stdio.h>

#include "daemons.h"
#include "tracing.h"
#include "notify.h"

static int run(void);
static void add_settings(struct settings_table *t);

const struct command cmd_serve = {
    .name = "serve",
    .summary = "run the HTTP API (POST /orders with Idempotency-Key, admin, /metrics)",
    .usage = "txo serve [options]",
    .description =
        "Serves the order API over HTTP/1.1 (keep-alive). POST /orders writes the idempotency\n"
        "key, the order, its items, the OrderCreated outbox event and the stored response in\n"
        "one transaction; a repeat with the same Idempotency-Key and body gets the stored\n"
        "response. Admin endpoints (/outbox/stats, /dlq, /sagas, /processes) need\n"
        "`Authorization: Bearer <token>` when --admin-token is set; /ui is the operator's\n"
        "dashboard, which asks for that token. GET /metrics is the Prometheus text format.\n"
        "The process registers itself in txo_processes and heartbeats every 5 s.\n"
        "SIGTERM/SIGINT: stop accepting, finish the requests in flight, exit 0. Endpoints\n"
        "and status codes: README.md.",
    .add_settings = add_settings,
    .run = run,
    .examples =
        "# The API on all interfaces, admin endpoints behind a token:\n"
        "txo serve --listen 0.0.0.0:8080 --admin-token \"$(cat /etc/txo/admin-token)\"\n"
        "# Create an order (the API answers 201 with its id):\n"
        "curl -X POST http://127.0.0.1:8080/orders -H 'Idempotency-Key: k1' -d "
        "'{\"customer_id\":1,\"items\":[{\"sku\":\"pen\",\"qty\":1,\"price_cents\":250}]}'\n",
    .exit_status =
        "0 after a graceful stop (SIGTERM or SIGINT), 1 when the server cannot start (the "
        "address is taken, the database cannot be reached), 2 on a bad option or environment "
        "variable.",
};

struct serve_cmd_opts {
    struct common_opts common;
    struct tracing_settings tracing;
    struct serve_settings serve;
    struct services_settings services;
};

static struct serve_cmd_opts opts;

/* The settings of this command, in --help order. */
static void add_settings(struct settings_table *t)
{
    settings_add_common(t, &opts.common);
    settings_add_tracing(t, &opts.tracing);
    settings_add_serve(t, &opts.serve);
    settings_add_services(t, &opts.services);
}

static int run(void)
{
    if (!daemon_check_settings("serve", &opts.serve, &opts.services))
        return 2;

    signals_block();
    int status = 1;
    struct daemon_base base = {.metrics = NULL};
    struct api_daemon *api = NULL;
    if (!daemon_base_start("serve", &opts.common, true, &opts.tracing, &opts.services, &base,
                           &status))
        goto out;
    api = daemon_api_start("serve", &opts.common, &opts.serve, base.services, base.reg, NULL, NULL);
    if (api == NULL)
        goto out;
    daemon_base_register("serve", &base, NULL);
    notify_run_until_stopped("serve", "serving the HTTP API");
    status = 0;
out:
    daemon_base_unregister(&base); /* first: it reads the services' breakers */
    daemon_api_stop(api);
    daemon_base_stop(&base); /* after the API: its last spans are sent */
    return status;
}
