/*
 * What the daemon subcommands share: their settings (one macro per group, so `txo up` takes
 * exactly the flags of `txo serve`, `txo relay` and `txo worker`), and the code that turns
 * those settings into running components (HTTP API, relay, worker, metrics).
 *
 * Signals: daemons block SIGINT/SIGTERM in every thread (daemon_block_signals() before the
 * first thread starts) and wait for them in the main thread (daemon_wait_signal()); the first
 * one starts a graceful stop, a second one kills the process at once.
 */
#ifndef TXO_CMD_DAEMONS_H
#define TXO_CMD_DAEMONS_H

#include <stdbool.h>
#include <stdint.h>

#include "settings.h"
#include "api.h"
#include "order_services.h"
#include "worker.h"
#include "txo/metrics.h"
#include "txo/nats.h"

/* ---- HTTP API (`txo serve`) ---- */
struct serve_settings {
    const char *listen;
    unsigned max_body;
    unsigned http_timeout_s;
    unsigned max_connections;
    unsigned http_header_timeout_s;
    unsigned http_body_timeout_s;
    unsigned max_connections_per_client;
    const char *tls_cert;
    const char *tls_key;
    bool async;
    unsigned idem_stale_s;
    unsigned idem_wait_s;
    const char *admin_token;
    unsigned db_pool;
};

#define SERVE_SETTINGS(o)                                                                      \
    {"listen", "TXO_LISTEN", SETTING_STRING, "127.0.0.1:8080",                                 \
     "HTTP API address, IPv4 HOST:PORT", false, 0, 0, &(o).listen},                            \
    {"max-body", "TXO_MAX_BODY_BYTES", SETTING_UINT, "65536",                                  \
     "largest request body accepted, bytes (larger: 413)", false, 64, 16777216, &(o).max_body}, \
    {"http-timeout", "TXO_HTTP_TIMEOUT", SETTING_UINT, "30",                                   \
     "an idle keep-alive connection, or one that does not read its response, is closed "      \
     "after this many seconds",                                                                \
     false, 1, 3600, &(o).http_timeout_s},                                                     \
    {"max-connections", "TXO_MAX_CONNECTIONS", SETTING_UINT, "512",                            \
     "concurrent HTTP connections (more are answered 503 and closed)", false, 1, 10000,        \
     &(o).max_connections},                                                                    \
    {"http-header-timeout", "TXO_HTTP_HEADER_TIMEOUT", SETTING_UINT, "10",                     \
     "seconds for a whole request head, however slowly it trickles in (then 408, closed)",     \
     false, 1, 3600, &(o).http_header_timeout_s},                                              \
    {"http-body-timeout", "TXO_HTTP_BODY_TIMEOUT", SETTING_UINT, "30",                         \
     "seconds for a whole request body after its head (then 408, closed)", false, 1, 3600,     \
     &(o).http_body_timeout_s},                                                                \
    {"max-connections-per-client", "TXO_MAX_CONNECTIONS_PER_CLIENT", SETTING_UINT, "64",       \
     "concurrent HTTP connections from one client IP address (more: 503); 0: no limit", false, \
     0, 10000, &(o).max_connections_per_client},                                               \
    {"tls-cert", "TXO_TLS_CERT", SETTING_STRING, NULL,                                         \
     "PEM certificate chain: the API speaks HTTPS only (with --tls-key)", false, 0, 0,         \
     &(o).tls_cert},                                                                           \
    {"tls-key", "TXO_TLS_KEY", SETTING_STRING, NULL, "PEM private key of --tls-cert", false,   \
     0, 0, &(o).tls_key},                                                                      \
    {"async", "TXO_ASYNC", SETTING_BOOL, "false",                                              \
     "POST /orders answers 202 and queues a StartOrderSaga command (seed 9.12)", false, 0, 0,  \
     &(o).async},                                                                              \
    {"idempotency-stale", "TXO_IDEMPOTENCY_STALE", SETTING_UINT, "60",                         \
     "seconds after which a PROCESSING idempotency key may be taken over", false, 1, 86400,    \
     &(o).idem_stale_s},                                                                       \
    {"idempotency-wait", "TXO_IDEMPOTENCY_WAIT", SETTING_UINT, "2",                            \
     "seconds a request waits for another one holding its Idempotency-Key before 409 (the "    \
     "API's innodb_lock_wait_timeout)",                                                        \
     false, 1, 60, &(o).idem_wait_s},                                                          \
    {"admin-token", "TXO_ADMIN_TOKEN", SETTING_STRING, NULL,                                   \
     "bearer token the admin endpoints require (unset: no token needed)", true, 0, 0,          \
     &(o).admin_token},                                                                        \
    {"db-pool", "TXO_DB_POOL", SETTING_UINT, "16",                                             \
     "database connections of the HTTP API", false, 1, 1000, &(o).db_pool}

/* ---- relay ---- */
struct relay_settings {
    const char *claim;
    unsigned batch_size;
    unsigned lease_s;
    unsigned max_attempts;
    int64_t backoff_base_ms;
    int64_t backoff_max_ms;
    unsigned idle_sleep_ms;
    const char *relay_id;
};

#define RELAY_SETTINGS(o)                                                                      \
    {"claim", "TXO_CLAIM", SETTING_STRING, "auto",                                             \
     "claim strategy: auto, skip-locked (MySQL 8.0.1+, MariaDB 10.6+) or update-limit "        \
     "(MySQL 5.7)",                                                                            \
     false, 0, 0, &(o).claim},                                                                 \
    {"batch-size", "TXO_BATCH_SIZE", SETTING_UINT, "500", "events claimed per batch", false,   \
     1, 10000, &(o).batch_size},                                                               \
    {"lease", "TXO_LEASE_SECONDS", SETTING_UINT, "30",                                         \
     "seconds a claimed batch stays reserved; after that another relay republishes it", false, \
     1, 86400, &(o).lease_s},                                                                  \
    {"max-attempts", "TXO_MAX_ATTEMPTS", SETTING_UINT, "10",                                   \
     "publish attempts before an event becomes FAILED and is dead-lettered", false, 1,         \
     1000000, &(o).max_attempts},                                                              \
    {"backoff-base", "TXO_BACKOFF_BASE_MS", SETTING_MS, "500",                                 \
     "delay before the first retry of a failed publish, milliseconds (doubles per attempt, "   \
     "jitter 50%)",                                                                            \
     false, 1, 86400000, &(o).backoff_base_ms},                                                \
    {"backoff-max", "TXO_BACKOFF_MAX_MS", SETTING_MS, "300000",                                \
     "cap of the retry delay, milliseconds", false, 1, 86400000, &(o).backoff_max_ms},         \
    {"idle-sleep", "TXO_IDLE_SLEEP_MS", SETTING_UINT, "200",                                   \
     "pause when nothing is due, milliseconds", false, 1, 3600000, &(o).idle_sleep_ms},        \
    {"relay-id", "TXO_RELAY_ID", SETTING_STRING, NULL,                                         \
     "name of this relay in lock tokens (default: hostname:pid)", false, 0, 0, &(o).relay_id}

/* ---- broker (NATS JetStream) ---- */
struct nats_settings {
    const char *url;
    const char *stream;
    const char *subject_prefix;
    const char *durable;
    int64_t ack_timeout_ms;
    int64_t ack_wait_ms;
};

#define NATS_SETTINGS(o)                                                                       \
    {"nats-url", "TXO_NATS_URL", SETTING_STRING, "nats://127.0.0.1:4222",                      \
     "NATS server(s), comma-separated", false, 0, 0, &(o).url},                                \
    {"nats-stream", "TXO_NATS_STREAM", SETTING_STRING, "TXO_EVENTS",                           \
     "JetStream stream (created when missing)", false, 0, 0, &(o).stream},                     \
    {"nats-subject-prefix", "TXO_NATS_SUBJECT_PREFIX", SETTING_STRING, "txo.events",           \
     "subjects are <prefix>.<aggregate_type>.<event_type>", false, 0, 0,                       \
     &(o).subject_prefix},                                                                     \
    {"nats-durable", "TXO_NATS_DURABLE", SETTING_STRING, "txo-worker",                         \
     "durable pull consumer the workers share", false, 0, 0, &(o).durable},                    \
    {"nats-ack-timeout", "TXO_NATS_ACK_TIMEOUT_MS", SETTING_MS, "5000",                        \
     "publish acknowledgements awaited up to, milliseconds", false, 1, 600000,                 \
     &(o).ack_timeout_ms},                                                                     \
    {"nats-ack-wait", "TXO_NATS_ACK_WAIT_MS", SETTING_MS, "30000",                             \
     "a consumed message not acknowledged within this is delivered again, milliseconds",       \
     false, 100, 86400000, &(o).ack_wait_ms}

/* ---- worker ---- */
struct worker_settings {
    unsigned saga_threads;
    unsigned poll_ms;
    unsigned saga_lease_s;
    unsigned step_attempts;
    unsigned command_lease_s;
    unsigned command_attempts;
    unsigned comp_retry_base_s;
    unsigned comp_retry_max_s;
    unsigned comp_max_retries;
    unsigned outbox_retention_s;
    unsigned idem_retention_s;
    unsigned inbox_retention_s;
    unsigned clean_interval_s;
    unsigned clean_batch;
};

#define WORKER_SETTINGS(o)                                                                     \
    {"saga-threads", "TXO_SAGA_THREADS", SETTING_UINT, "4", "sagas run at once", false, 1,     \
     256, &(o).saga_threads},                                                                  \
    {"poll", "TXO_POLL_MS", SETTING_UINT, "200",                                               \
     "how often idle workers look for due sagas and commands, milliseconds", false, 10,        \
     60000, &(o).poll_ms},                                                                     \
    {"saga-lease", "TXO_SAGA_LEASE", SETTING_UINT, "30",                                       \
     "seconds a worker owns a saga between steps; a dead worker's sagas resume after it",      \
     false, 1, 3600, &(o).saga_lease_s},                                                       \
    {"step-attempts", "TXO_STEP_ATTEMPTS", SETTING_UINT, "5",                                  \
     "tries of a saga step that fails transiently before it counts as failed", false, 1, 100,  \
     &(o).step_attempts},                                                                      \
    {"command-lease", "TXO_COMMAND_LEASE", SETTING_UINT, "30",                                 \
     "seconds a claimed command stays reserved", false, 1, 3600, &(o).command_lease_s},        \
    {"command-attempts", "TXO_COMMAND_ATTEMPTS", SETTING_UINT, "10",                           \
     "tries of a command before it becomes FAILED", false, 1, 1000, &(o).command_attempts},    \
    {"compensation-retry", "TXO_COMPENSATION_RETRY", SETTING_UINT, "5",                        \
     "seconds before the first retry of a COMPENSATION_FAILED saga (doubles each time)",       \
     false, 1, 86400, &(o).comp_retry_base_s},                                                 \
    {"compensation-retry-max", "TXO_COMPENSATION_RETRY_MAX", SETTING_UINT, "300",              \
     "cap of that delay, seconds", false, 1, 86400, &(o).comp_retry_max_s},                    \
    {"compensation-max-tries", "TXO_COMPENSATION_MAX_TRIES", SETTING_UINT, "10",               \
     "tries of a failing step after which its saga is left to an operator (error log)",        \
     false, 1, 1000, &(o).comp_max_retries},                                                   \
    {"outbox-retention", "TXO_OUTBOX_RETENTION", SETTING_UINT, "604800",                       \
     "PUBLISHED outbox rows older than this many seconds are deleted", false, 60, 315360000,   \
     &(o).outbox_retention_s},                                                                 \
    {"idempotency-retention", "TXO_IDEMPOTENCY_RETENTION", SETTING_UINT, "86400",              \
     "completed idempotency keys older than this many seconds are deleted", false, 60,         \
     315360000, &(o).idem_retention_s},                                                        \
    {"inbox-retention", "TXO_INBOX_RETENTION", SETTING_UINT, "604800",                         \
     "inbox rows and DONE commands older than this many seconds are deleted", false, 60,       \
     315360000, &(o).inbox_retention_s},                                                       \
    {"clean-interval", "TXO_CLEAN_INTERVAL", SETTING_UINT, "60",                               \
     "seconds between retention passes (0: no cleaner)", false, 0, 86400,                      \
     &(o).clean_interval_s},                                                                   \
    {"clean-batch", "TXO_CLEAN_BATCH", SETTING_UINT, "1000", "rows deleted per statement",      \
     false, 1, 100000, &(o).clean_batch}

/* ---- external services (payment, shipment) ---- */
struct services_settings {
    const char *payment_url;
    const char *shipment_url;
    int64_t connect_timeout_ms;
    int64_t timeout_ms;
    unsigned retries;
    unsigned breaker_failures;
    int64_t breaker_open_ms;
    unsigned bulkhead;
    unsigned rate;
};

#define SERVICES_SETTINGS(o)                                                                   \
    {"payment-url", "TXO_PAYMENT_URL", SETTING_STRING, NULL,                                   \
     "payment service base URL (unset: in-process stand-in)", false, 0, 0, &(o).payment_url},  \
    {"shipment-url", "TXO_SHIPMENT_URL", SETTING_STRING, NULL,                                 \
     "shipment service base URL (unset: in-process stand-in)", false, 0, 0,                    \
     &(o).shipment_url},                                                                       \
    {"service-connect-timeout", "TXO_SERVICE_CONNECT_TIMEOUT_MS", SETTING_MS, "2000",          \
     "connect timeout of external calls, milliseconds", false, 1, 600000,                      \
     &(o).connect_timeout_ms},                                                                 \
    {"service-timeout", "TXO_SERVICE_TIMEOUT_MS", SETTING_MS, "5000",                          \
     "whole-call timeout of external calls, milliseconds", false, 1, 600000, &(o).timeout_ms}, \
    {"service-retries", "TXO_SERVICE_RETRIES", SETTING_UINT, "3",                              \
     "tries of one external call on transient errors (backoff 100 ms .. 1 s, jitter)", false,  \
     1, 100, &(o).retries},                                                                    \
    {"breaker-failures", "TXO_BREAKER_FAILURES", SETTING_UINT, "5",                            \
     "consecutive transient failures that open a service's circuit breaker", false, 1, 1000,   \
     &(o).breaker_failures},                                                                   \
    {"breaker-open", "TXO_BREAKER_OPEN_MS", SETTING_MS, "30000",                               \
     "how long an open breaker fails fast before a probe, milliseconds", false, 1, 86400000,   \
     &(o).breaker_open_ms},                                                                    \
    {"bulkhead", "TXO_BULKHEAD", SETTING_UINT, "16",                                           \
     "external calls in flight per service", false, 1, 10000, &(o).bulkhead},                  \
    {"service-rate", "TXO_SERVICE_RATE", SETTING_UINT, "0",                                    \
     "external calls per second per service (token bucket, burst 50; 0: unlimited)", false, 0, \
     1000000, &(o).rate}

/* Checks the serve and services settings that can be checked without a database (the listen
 * address, the service URLs). Prints a message naming the setting and returns false. */
bool daemon_check_settings(const char *cmd, const struct serve_settings *serve,
                           const struct services_settings *services);

/* Splits "HOST:PORT". Prints a message naming the setting and returns false when invalid. */
bool daemon_parse_listen(const char *cmd, const char *setting, const char *text, char *host,
                         size_t host_size, unsigned *port);

/* Blocks SIGINT/SIGTERM in this thread and every thread created after. */
void daemon_block_signals(void);
/* Waits for SIGINT/SIGTERM; afterwards a second one terminates the process. Returns it. */
int daemon_wait_signal(void);

/*
 * The process's metrics: a registry with the database collectors (outbox and saga gauges from
 * the tables, on a connection of their own; MySQL error counters) and, once watched, the
 * counters of this process's relay and worker. NULL after printing a message on failure.
 */
struct daemon_metrics;
struct daemon_metrics *daemon_metrics_new(const struct common_opts *common);
struct txo_metrics *daemon_metrics_registry(struct daemon_metrics *d);
bool daemon_metrics_watch_relay(struct daemon_metrics *d, struct txo_relay *relay);
bool daemon_metrics_watch_worker(struct daemon_metrics *d, struct order_worker *w);
/* Stops reading the relay and worker (before they are freed). */
void daemon_metrics_forget(struct daemon_metrics *d);
void daemon_metrics_free(struct daemon_metrics *d);
/* Answers GET /metrics. */
void daemon_metrics_reply(struct txo_metrics *reg, struct txo_http_response *resp);
/* A /metrics + /healthz server for the relay and the worker; listen NULL/"": none (*out NULL).
 * False (message printed) on failure. */
bool daemon_metrics_server_start(const char *cmd, const char *listen, struct daemon_metrics *d,
                                 struct txo_http_server **out);

/* External services from settings. False (message printed) on bad values. */
bool daemon_services_new(const char *cmd, const struct services_settings *s,
                         struct txo_metrics *metrics, struct order_services **out);

/* Worker options from settings. */
void daemon_worker_opts(const struct worker_settings *s, struct order_worker_opts *out);

/*
 * A worker from settings, with services (may be NULL) and, when nats is not NULL, a NATS
 * durable consumer attached (*consumer receives it; free it after the worker). Not started.
 * NULL after printing a message.
 */
struct order_worker *daemon_worker_new(const char *cmd, const struct common_opts *common,
                                       const struct worker_settings *s,
                                       const struct order_services *services,
                                       const struct nats_settings *nats,
                                       struct txo_consumer **consumer);

/* Stops the worker (steps in flight finish) and logs what it did. NULL is a no-op. */
void daemon_worker_stop(const char *cmd, struct order_worker *w);

/* Relay options from settings. False (message printed) on bad values. */
bool daemon_relay_opts(const char *cmd, const struct relay_settings *s,
                       struct txo_relay_opts *out);

/* NATS options from settings (strings borrowed). */
void daemon_nats_opts(const struct nats_settings *s, struct txo_nats_opts *out);

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

#endif
