/*
 * What the daemon subcommands share: their settings (one group each, appended to a command's
 * table by settings_add_<group>() from daemon_settings.c, so `txo up` takes exactly the flags
 * of `txo serve`, `txo relay` and `txo worker`), and the code that turns those settings into
 * running components (HTTP API, relay, worker, metrics).
 *
 * Signals: every daemon stops the way signals.h describes.
 */
#ifndef TXO_CMD_DAEMONS_H
#define TXO_CMD_DAEMONS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "settings.h"
#include "clean.h"
#include "signals.h"
#include "tracing.h"
#include "api.h"
#include "order_services.h"
#include "worker.h"
#include "txo/binlog.h"
#include "txo/metrics.h"
#include "brokers.h"
#include "txo/registry.h"

/*
 * Each group's settings write straight into the options of the library (or of the order
 * service) they configure: settings_add_<group>() first sets those to their defaults, so the
 * fields no setting names keep them, then appends settings whose targets are the fields. What
 * a struct below holds besides is what needs turning into options: text to parse, or a value
 * in other units.
 */

/* ---- HTTP API (`txo serve`) ---- */
struct serve_settings {
    struct txo_http_server_opts http; /* host and port: from listen */
    struct order_api_opts api;
    const char *listen;
    unsigned idem_wait_s; /* the API's sessions' innodb_lock_wait_timeout */
    unsigned db_pool;
};

/* Appends the HTTP API settings, with targets in o. */
void settings_add_serve(struct settings_table *t, struct serve_settings *o);

/* ---- relay ---- */
struct relay_settings {
    struct txo_relay_opts opts;    /* claim, mode and ordering: parsed by daemon_relay_check() */
    struct txo_binlog_opts binlog; /* --source binlog; its relay options are opts */
    const char *claim;
    const char *claim_mode;
    const char *ordering;
    const char *source; /* polling or binlog */
};

/* Appends the relay settings, with targets in o. */
void settings_add_relay(struct settings_table *t, struct relay_settings *o);

/* ---- worker ---- */
struct worker_settings {
    struct txo_worker_opts opts; /* the runtime's; the order service adds its handlers */
    unsigned comp_retry_base_s;  /* opts.saga.compensation_backoff, in seconds */
    unsigned comp_retry_max_s;
};

/* Appends the worker settings, with targets in o. */
void settings_add_worker(struct settings_table *t, struct worker_settings *o);

/* ---- external services (payment, shipment) ---- */
struct services_settings {
    struct order_services_opts opts;
    unsigned rate; /* opts.rate_per_s, a whole number */
};

/* Appends the payment and shipment service settings, with targets in o. */
void settings_add_services(struct settings_table *t, struct services_settings *o);

/* Appends --metrics-listen (the /metrics server of `txo relay` and `txo worker`). */
void settings_add_metrics_listen(struct settings_table *t, const char **listen);

/* Checks the serve and services settings that can be checked without a database (the listen
 * address, the service URLs). Prints a message naming the setting and returns false. */
bool daemon_check_settings(const char *cmd, const struct serve_settings *serve,
                           const struct services_settings *services);

/* Splits "HOST:PORT". Prints a message naming the setting and returns false when invalid. */
bool daemon_parse_listen(const char *cmd, const char *setting, const char *text, char *host,
                         size_t host_size, unsigned *port);

/*
 * The process's metrics: a registry with the database collectors (outbox gauges from the
 * tables, on a connection of their own; MySQL error counters). The worker and the relay
 * register their own in it (txo/worker.h; txo/relay.h, opts.metrics). NULL after printing a
 * message on failure.
 */
struct daemon_metrics;
struct daemon_metrics *daemon_metrics_new(const struct common_opts *common);
struct txo_metrics *daemon_metrics_registry(struct daemon_metrics *d);
/* Adds txo_outbox_parked_aggregates to the collected gauges (for a relay that orders by
 * aggregate: without ordering nothing is held back). False (message printed) on failure. */
bool daemon_metrics_watch_parked(struct daemon_metrics *d);
void daemon_metrics_free(struct daemon_metrics *d);
/* Answers GET /metrics. */
void daemon_metrics_reply(struct txo_metrics *reg, struct txo_http_response *resp);
/* A /metrics + /healthz + /readyz (the database answers and has outbox_events) server for the
 * relay and the worker; listen NULL/"": none (*out NULL).
 * False (message printed) on failure. */
bool daemon_metrics_server_start(const char *cmd, const char *listen, struct daemon_metrics *d,
                                 struct txo_http_server **out);

/* External services from settings. False (message printed) on bad values. */
bool daemon_services_new(const char *cmd, const struct services_settings *s,
                         struct txo_metrics *metrics, struct order_services **out);

/*
 * The order service's worker from settings (txo/worker.h runtime + the order tables of
 * worker.h), with services (may be NULL) and metrics (may be NULL: it registers its own
 * families there), and, when broker is not NULL, that broker's consumer of OrderCreated attached.
 * Not started.
 * NULL after printing a message. The registry must not be rendered after daemon_worker_free.
 */
struct daemon_worker;
struct daemon_worker *daemon_worker_new(const char *cmd, const struct common_opts *common,
                                        const struct worker_settings *s,
                                        const struct order_services *services,
                                        const struct cmd_broker *broker,
                                        struct txo_metrics *metrics);
/* The runtime, to start it or to hand txo_worker_handle_message to local dispatch. */
struct txo_worker *daemon_worker_runtime(struct daemon_worker *d);
/* Stops the worker (steps in flight finish) and logs what it did. NULL is a no-op. */
void daemon_worker_stop(const char *cmd, struct daemon_worker *d);
/* Frees the worker and its consumer (stopping it first). NULL is a no-op. */
void daemon_worker_free(struct daemon_worker *d);

/*
 * Parses and checks the relay settings s: claim, mode and ordering into s->opts, an empty
 * relay id as none; *binlog tells --source binlog from polling. False after a message naming
 * the setting on a bad value (exit 2). The caller copies s->opts into s->binlog.relay once it
 * has added its metrics and tracer.
 */
bool daemon_relay_check(const char *cmd, struct relay_settings *s, bool *binlog);

/*
 * The relay of `txo relay` and `txo up` on a thread of its own: a polling relay or a binlog
 * source, whichever the caller created into it (the other NULL). wake: when the run ends by
 * itself (--drain, an error), signals_wake() ends the main thread's wait.
 */
struct daemon_relay {
    struct txo_relay *relay;
    struct txo_binlog *binlog;
    bool wake;
    int rc; /* what the run returned, once stopped */
    struct txo_error err;
    pthread_t tid;
    bool running;
};

/* Starts the run on its thread; false when the thread cannot start. */
bool daemon_relay_start(struct daemon_relay *r);
/* Stops the run (the batch in flight completes) and joins the thread; a no-op unless running. */
void daemon_relay_stop(struct daemon_relay *r);
/* Frees the relay or the binlog source (stopping it first). */
void daemon_relay_free(struct daemon_relay *r);

/* False (after printing why and how to fix it) when a binlog source of db's outbox left rows it
 * published PENDING (txo_binlog_published_through()): a polling relay must not start then. */
bool daemon_polling_allowed(const char *cmd, struct txo_db *db);

/* The HTTP API: connection pool + order API + HTTP server (+ /metrics when metrics given).
 * NULL after printing a message on failure. */
struct api_daemon;
struct api_daemon *daemon_api_start(const char *cmd, const struct common_opts *common,
                                    const struct serve_settings *s,
                                    const struct order_services *services,
                                    struct txo_metrics *metrics, void (*on_commit)(void *),
                                    void *on_commit_arg);
unsigned daemon_api_port(const struct api_daemon *d);
/* Graceful: requests in flight finish. NULL is a no-op. */
void daemon_api_stop(struct api_daemon *d);

/* ---- the process registry (txo/registry.h) ---- */

/* What a daemon's heartbeat reports: the breakers of the external services it calls over
 * HTTP (services NULL: none) and of its relay's publisher (relay NULL: none). Both borrowed:
 * they must outlive the heartbeat. */
struct daemon_heartbeat_src {
    const struct order_services *services;
    const struct txo_relay *relay;
};

/*
 * Registers the process in txo_processes as `role` and keeps its row fresh every 5 s until
 * txo_heartbeat_stop() (which deletes the row). src (may be NULL) must outlive it. Never fatal:
 * NULL after one log line when the heartbeat cannot even start (out of memory), and a database
 * that is down or lacks the table only costs a log line (txo/registry.h).
 */
struct txo_heartbeat *daemon_heartbeat_start(const char *role, const struct common_opts *common,
                                             const struct daemon_heartbeat_src *src);

/* ---- what serve, worker and up start first ---- */

/* The process's metrics, tracer and external services, which the other components use, and
 * its registration. */
struct daemon_base {
    const struct common_opts *common;
    struct daemon_metrics *metrics;
    struct txo_metrics *reg; /* the registry of metrics */
    struct order_services *services;
    struct daemon_heartbeat_src hb_src;
    struct txo_heartbeat *hb;
};

/*
 * Waits for the database first when wait_db (daemon_db_wait()), then starts the metrics
 * (daemon_metrics_new()), the tracer (daemon_tracing_start()) and the external services
 * (daemon_services_new()) into *out. False after a message, with *exit_status 0 when a signal
 * ended the wait, 2 on a bad tracing or services setting and 1 otherwise. Call
 * daemon_base_stop() in either case.
 */
bool daemon_base_start(const char *cmd, const struct common_opts *common, bool wait_db,
                       const struct tracing_settings *tracing,
                       const struct services_settings *services, struct daemon_base *out,
                       int *exit_status);

/* Registers the process as role (daemon_heartbeat_start()): its heartbeat reports the breakers
 * of b's services and of relay (NULL: none), which must outlive it. */
void daemon_base_register(const char *role, struct daemon_base *b, const struct txo_relay *relay);

/* Ends the registration: first of all, before the components its heartbeat reads stop. */
void daemon_base_unregister(struct daemon_base *b);

/* Frees the services, stops the tracer (its last spans are sent) and frees the metrics: after
 * every component that uses them. */
void daemon_base_stop(struct daemon_base *b);

#endif
