/*
 * The settings groups the daemon subcommands share (daemons.h), so that `txo up` takes
 * exactly the flags of `txo serve`, `txo relay` and `txo worker`. Each group sets the options
 * it configures to their defaults, then appends its entries, in --help order and with targets
 * in those options, to the table of the command that is being set up.
 */
#include "clean.h"
#include "daemons.h"

void settings_add_serve(struct settings_table *t, struct serve_settings *o)
{
    txo_http_server_opts_init(&o->http);
    order_api_opts_init(&o->api);
    const struct setting group[] = {
        {.name = "listen",
         .env = "TXO_LISTEN",
         .type = SETTING_STRING,
         .def = "127.0.0.1:8080",
         .help = "HTTP API address, IPv4 HOST:PORT",
         .target = &o->listen},
        {.name = "max-body",
         .env = "TXO_MAX_BODY_BYTES",
         .type = SETTING_SIZE,
         .def = "65536",
         .help = "largest request body accepted, bytes (larger: 413)",
         .min = 64,
         .max = 16777216,
         .target = &o->http.max_body_bytes},
        {.name = "http-timeout",
         .env = "TXO_HTTP_TIMEOUT",
         .type = SETTING_UINT,
         .def = "30",
         .help = "an idle keep-alive connection, or one that does not read its response, is "
                 "closed after this many seconds",
         .min = 1,
         .max = 3600,
         .target = &o->http.timeout_s},
        {.name = "max-connections",
         .env = "TXO_MAX_CONNECTIONS",
         .type = SETTING_UINT,
         .def = "512",
         .help = "concurrent HTTP connections; when all are in use, the longest-idle one is closed "
                 "to admit a new one (503 when none is idle)",
         .min = 1,
         .max = 10000,
         .target = &o->http.max_connections},
        {.name = "http-header-timeout",
         .env = "TXO_HTTP_HEADER_TIMEOUT",
         .type = SETTING_UINT,
         .def = "10",
         .help = "seconds for a whole request head, however slowly it trickles in (then 408, "
                 "closed)",
         .min = 1,
         .max = 3600,
         .target = &o->http.header_timeout_s},
        {.name = "http-body-timeout",
         .env = "TXO_HTTP_BODY_TIMEOUT",
         .type = SETTING_UINT,
         .def = "30",
         .help = "seconds for a whole request body after its head (then 408, closed)",
         .min = 1,
         .max = 3600,
         .target = &o->http.body_timeout_s},
        {.name = "max-connections-per-client",
         .env = "TXO_MAX_CONNECTIONS_PER_CLIENT",
         .type = SETTING_UINT,
         .def = "64",
         .help = "concurrent HTTP connections from one client IP address (more: 503); 0: no limit",
         .min = 0,
         .max = 10000,
         .target = &o->http.max_connections_per_client},
        {.name = "tls-cert",
         .env = "TXO_TLS_CERT",
         .type = SETTING_STRING,
         .help = "PEM certificate chain: the API speaks HTTPS only (with --tls-key)",
         .target = &o->http.tls_cert_file},
        {.name = "tls-key",
         .env = "TXO_TLS_KEY",
         .type = SETTING_STRING,
         .help = "PEM private key of --tls-cert",
         .target = &o->http.tls_key_file},
        {.name = "async",
         .env = "TXO_ASYNC",
         .type = SETTING_BOOL,
         .def = "false",
         .help = "POST /orders answers 202 and queues a StartOrderSaga command for the worker",
         .target = &o->api.async},
        {.name = "idempotency-stale",
         .env = "TXO_IDEMPOTENCY_STALE",
         .type = SETTING_UINT,
         .def = "60",
         .help = "seconds after which a PROCESSING idempotency key may be taken over",
         .min = 1,
         .max = 86400,
         .target = &o->api.idempotency_stale_s},
        {.name = "idempotency-wait",
         .env = "TXO_IDEMPOTENCY_WAIT",
         .type = SETTING_UINT,
         .def = "2",
         .help = "seconds a request waits for another one holding its Idempotency-Key before 409 "
                 "(the API's innodb_lock_wait_timeout)",
         .min = 1,
         .max = 60,
         .target = &o->idem_wait_s},
        {.name = "admin-token",
         .env = "TXO_ADMIN_TOKEN",
         .type = SETTING_STRING,
         .help = "bearer token the admin endpoints require (unset: no token needed)",
         .secret = true,
         .target = &o->api.admin_token},
        {.name = "db-pool",
         .env = "TXO_DB_POOL",
         .type = SETTING_UINT,
         .def = "16",
         .help = "database connections of the HTTP API",
         .min = 1,
         .max = 1000,
         .target = &o->db_pool},
        {.name = "order-batch",
         .env = "TXO_ORDER_BATCH",
         .type = SETTING_UINT,
         .def = "50",
         .help = "POST /orders committed together at most, by one writer thread (groups form "
                 "while the previous one commits; no timer); 1: each in its own transaction",
         .min = 1,
         .max = 1000,
         .target = &o->api.order_batch},
    };
    settings_add(t, group, TXO_ARRAY_LEN(group));
}

void settings_add_relay(struct settings_table *t, struct relay_settings *o)
{
    txo_relay_opts_init(&o->opts);
    txo_binlog_opts_init(&o->binlog);
    const struct setting group[] = {
        {.name = "claim",
         .env = "TXO_CLAIM",
         .type = SETTING_STRING,
         .def = "auto",
         .help = "claim strategy: auto, skip-locked (MySQL 8.0.1+, MariaDB 10.6+) or update-limit "
                 "(MySQL 5.7)",
         .target = &o->claim},
        {.name = "claim-mode",
         .env = "TXO_CLAIM_MODE",
         .type = SETTING_STRING,
         .def = "auto",
         .help = "lease: claim, publish with nothing locked, mark (two updates per event; for "
                 "slow publishers such as webhooks); transaction: claim, publish and mark in "
                 "one transaction holding the rows' locks (one update per event, 1.6-1.9x the "
                 "events/s; for quick publishers, needs SKIP LOCKED); auto: transaction for the "
                 "quick ones (nats, rabbitmq, redis, log, null, local dispatch) when the server "
                 "has SKIP "
                 "LOCKED, else lease",
         .target = &o->claim_mode},
        {.name = "ordering",
         .env = "TXO_ORDERING",
         .type = SETTING_STRING,
         .def = "aggregate",
         .help = "aggregate: each aggregate's events published in outbox order, whatever fails, "
                 "by any number of relays sharing 64 shards; a failing event holds back only its "
                 "aggregate; none: any due event, for consumers that do not care about order "
                 "(every relay of one outbox table must use the same)",
         .target = &o->ordering},
        {.name = "shard-lease",
         .env = "TXO_SHARD_LEASE_MS",
         .type = SETTING_MS,
         .def = "10000",
         .help = "with --ordering aggregate: how long a relay's hold on its shards lasts without "
                 "renewal, milliseconds; a relay that dies or hangs loses its shards to the "
                 "others after this long (one that stops gives them back at once)",
         .min = 4,
         .max = 86400000,
         .target = &o->opts.shard_lease_ms},
        {.name = "batch-size",
         .env = "TXO_BATCH_SIZE",
         .type = SETTING_UINT,
         .def = "500",
         .help = "events claimed per batch",
         .min = 1,
         .max = 10000,
         .target = &o->opts.batch_size},
        {.name = "lease",
         .env = "TXO_LEASE_SECONDS",
         .type = SETTING_UINT,
         .def = "30",
         .help = "seconds a claimed batch stays reserved; after that another relay republishes it",
         .min = 1,
         .max = 86400,
         .target = &o->opts.lease_s},
        {.name = "max-attempts",
         .env = "TXO_MAX_ATTEMPTS",
         .type = SETTING_UINT,
         .def = "10",
         .help = "publish attempts (transient failures) before an event becomes FAILED and is "
                 "dead-lettered; a permanent failure dead-letters it at once",
         .min = 1,
         .max = 1000000,
         .target = &o->opts.max_attempts},
        {.name = "max-lease-expiries",
         .env = "TXO_MAX_LEASE_EXPIRIES",
         .type = SETTING_UINT,
         .def = "3",
         .help = "times an event's lease may expire (its relay died or hung publishing it) "
                 "before it is dead-lettered as a poison event",
         .min = 1,
         .max = 1000000,
         .target = &o->opts.max_lease_expiries},
        {.name = "relay-breaker-failures",
         .env = "TXO_RELAY_BREAKER_FAILURES",
         .type = SETTING_UINT,
         .def = "5",
         .help = "batches in a row failing entirely with transient errors (the broker is down) "
                 "before the relay stops claiming and probes with one small batch; 0: never",
         .max = 1000000,
         .target = &o->opts.breaker_failures},
        {.name = "relay-breaker-open",
         .env = "TXO_RELAY_BREAKER_OPEN_MS",
         .type = SETTING_MS,
         .def = "5000",
         .help = "how long the relay waits before each probe while the broker is down, "
                 "milliseconds",
         .min = 1,
         .max = 86400000,
         .target = &o->opts.breaker_open_ms},
        {.name = "backoff-base",
         .env = "TXO_BACKOFF_BASE_MS",
         .type = SETTING_MS,
         .def = "500",
         .help = "delay before the first retry of a failed publish, milliseconds (doubles per "
                 "attempt, jitter 50%)",
         .min = 1,
         .max = 86400000,
         .target = &o->opts.backoff.base_ms},
        {.name = "backoff-max",
         .env = "TXO_BACKOFF_MAX_MS",
         .type = SETTING_MS,
         .def = "300000",
         .help = "cap of the retry delay, milliseconds",
         .min = 1,
         .max = 86400000,
         .target = &o->opts.backoff.max_ms},
        {.name = "idle-sleep",
         .env = "TXO_IDLE_SLEEP_MS",
         .type = SETTING_UINT,
         .def = "200",
         .help = "pause when nothing is due, milliseconds",
         .min = 1,
         .max = 3600000,
         .target = &o->opts.idle_sleep_ms},
        {.name = "relay-id",
         .env = "TXO_RELAY_ID",
         .type = SETTING_STRING,
         .help = "name of this relay in lock tokens (default: hostname:pid)",
         .target = &o->opts.relay_id},
        {.name = "source",
         .env = "TXO_RELAY_SOURCE",
         .type = SETTING_STRING,
         .def = "polling",
         .help = "where the relay finds new events: polling (claims due rows of outbox_events) "
                 "or binlog (reads the inserts from the server's binary log as a replication "
                 "client, in commit order; needs log_bin, binlog_format=ROW, "
                 "binlog_row_metadata=FULL and the REPLICATION SLAVE, BINLOG MONITOR grants: "
                 "docs/binlog.md)",
         .target = &o->source},
        {.name = "source-name",
         .env = "TXO_RELAY_SOURCE_NAME",
         .type = SETTING_STRING,
         .def = "default",
         .help = "with --source binlog: the name of the stored position and of the lease (one "
                 "active reader per name; others stand by), 1..64 bytes",
         .target = &o->binlog.source_name},
        {.name = "source-lease",
         .env = "TXO_RELAY_SOURCE_LEASE_MS",
         .type = SETTING_MS,
         .def = "10000",
         .help = "with --source binlog: how long the reader's hold on its source lasts without "
                 "renewal (renewed every quarter of it), milliseconds; a standby takes over this "
                 "long after the reader dies",
         .min = 30,
         .max = 3600000,
         .target = &o->binlog.lease_ms},
        {.name = "source-gather",
         .env = "TXO_RELAY_SOURCE_GATHER_MS",
         .type = SETTING_MS,
         .def = "4",
         .help = "with --source binlog: under load, how long at most a commit that follows a "
                 "run closely waits for more before it goes out (as long as that run took to "
                 "publish, up to this): larger batches for busy consumers; 0 sends each commit "
                 "at once, milliseconds",
         .min = 0,
         .max = 1000,
         .target = &o->binlog.gather_ms},
    };
    settings_add(t, group, TXO_ARRAY_LEN(group));
}

#define IDEMPOTENCY_RETENTION_HELP                                                                 \
    "completed idempotency keys older than this many seconds are deleted"
#define INBOX_RETENTION_HELP "inbox rows and DONE commands older than this many seconds are deleted"

struct setting clean_retention_setting(enum clean_retention which, unsigned *target,
                                       bool maybe_absent)
{
    static const struct {
        const char *name, *env, *def, *help, *help_maybe_absent;
    } kinds[] = {
        [CLEAN_RETAIN_OUTBOX] = {"outbox-retention", "TXO_OUTBOX_RETENTION", "604800",
                                 "PUBLISHED outbox rows older than this many seconds are deleted",
                                 NULL},
        [CLEAN_RETAIN_IDEMPOTENCY] = {"idempotency-retention", "TXO_IDEMPOTENCY_RETENTION", "86400",
                                      IDEMPOTENCY_RETENTION_HELP,
                                      IDEMPOTENCY_RETENTION_HELP " (when the table exists)"},
        [CLEAN_RETAIN_INBOX] = {"inbox-retention", "TXO_INBOX_RETENTION", "604800",
                                INBOX_RETENTION_HELP,
                                INBOX_RETENTION_HELP " (when the tables exist)"},
    };
    const char *help = kinds[which].help;
    if (maybe_absent && kinds[which].help_maybe_absent != NULL)
        help = kinds[which].help_maybe_absent;
    return (struct setting){
        .name = kinds[which].name,
        .env = kinds[which].env,
        .type = SETTING_UINT,
        .def = kinds[which].def,
        .help = help,
        .min = 60,
        .max = 315360000,
        .target = target,
    };
}

struct setting clean_archive_setting(const char **target)
{
    return (struct setting){
        .name = "clean-archive",
        .env = "TXO_CLEAN_ARCHIVE_DIR",
        .type = SETTING_STRING,
        .help = CLEAN_ARCHIVE_HELP,
        .target = target,
    };
}

void settings_add_worker(struct settings_table *t, struct worker_settings *o)
{
    txo_worker_opts_init(&o->opts);
    struct txo_retention_opts *ro = &o->opts.retention;
    const struct setting group[] = {
        {.name = "saga-threads",
         .env = "TXO_SAGA_THREADS",
         .type = SETTING_UINT,
         .def = "4",
         .help = "saga runner threads",
         .min = 1,
         .max = 256,
         .target = &o->opts.saga_threads},
        {.name = "saga-batch",
         .env = "TXO_SAGA_BATCH",
         .type = SETTING_UINT,
         .def = "50",
         .help = "the most sagas a runner takes at once; a step then runs for all of them "
                 "in one transaction (1: one saga at a time). At low load a batch "
                 "is one saga (see --saga-gather)",
         .min = 1,
         .max = 1000,
         .target = &o->opts.saga_batch},
        {.name = "saga-gather",
         .env = "TXO_SAGA_GATHER_MS",
         .type = SETTING_MS,
         .def = "10",
         .help = "how long queued sagas wait at most for a busy runner, which then takes them "
                 "all in one batch, before an idle runner takes them; never when no runner is "
                 "busy or a whole --saga-batch is queued (0: an idle runner takes them at "
                 "once), milliseconds",
         .min = 0,
         .max = 1000,
         .target = &o->opts.saga_gather_ms},
        {.name = "poll",
         .env = "TXO_POLL_MS",
         .type = SETTING_I64,
         .def = "200",
         .help = "how often idle workers look for due sagas and commands, milliseconds",
         .min = 10,
         .max = 60000,
         .target = &o->opts.poll_ms},
        {.name = "saga-lease",
         .env = "TXO_SAGA_LEASE",
         .type = SETTING_UINT,
         .def = "30",
         .help =
             "seconds a worker owns a saga between steps; a dead worker's sagas resume after it",
         .min = 1,
         .max = 3600,
         .target = &o->opts.saga.lease_s},
        {.name = "step-attempts",
         .env = "TXO_STEP_ATTEMPTS",
         .type = SETTING_UINT,
         .def = "5",
         .help = "tries of a saga step that fails transiently before it counts as failed",
         .min = 1,
         .max = 100,
         .target = &o->opts.saga.step_max_attempts},
        {.name = "command-lease",
         .env = "TXO_COMMAND_LEASE",
         .type = SETTING_UINT,
         .def = "30",
         .help = "seconds a claimed command stays reserved",
         .min = 1,
         .max = 3600,
         .target = &o->opts.command_lease_s},
        {.name = "command-attempts",
         .env = "TXO_COMMAND_ATTEMPTS",
         .type = SETTING_UINT,
         .def = "10",
         .help = "tries of a command before it becomes FAILED",
         .min = 1,
         .max = 1000,
         .target = &o->opts.command_max_attempts},
        {.name = "compensation-retry",
         .env = "TXO_COMPENSATION_RETRY",
         .type = SETTING_UINT,
         .def = "5",
         .help = "seconds before the first automatic retry of a COMPENSATION_FAILED saga "
                 "(doubles each time, jitter 50%)",
         .min = 1,
         .max = 86400,
         .target = &o->comp_retry_base_s},
        {.name = "compensation-retry-max",
         .env = "TXO_COMPENSATION_RETRY_MAX",
         .type = SETTING_UINT,
         .def = "300",
         .help = "cap of that delay, seconds",
         .min = 1,
         .max = 86400,
         .target = &o->comp_retry_max_s},
        {.name = "compensation-max-tries",
         .env = "TXO_COMPENSATION_MAX_TRIES",
         .type = SETTING_UINT,
         .def = "10",
         .help = "times a saga may end COMPENSATION_FAILED before automatic retries stop and it "
                 "is left to an operator (one error line; txo saga retry)",
         .min = 1,
         .max = 1000,
         .target = &o->opts.saga.compensation_max_tries},
        clean_retention_setting(CLEAN_RETAIN_OUTBOX, &ro->outbox_s, false),
        clean_retention_setting(CLEAN_RETAIN_IDEMPOTENCY, &ro->idempotency_s, false),
        clean_retention_setting(CLEAN_RETAIN_INBOX, &ro->inbox_s, false),
        {.name = "clean-interval",
         .env = "TXO_CLEAN_INTERVAL",
         .type = SETTING_UINT,
         .def = "60",
         .help = "seconds between retention passes (0: no cleaner)",
         .max = 86400,
         .target = &ro->interval_s},
        {.name = "clean-batch",
         .env = "TXO_CLEAN_BATCH",
         .type = SETTING_UINT,
         .def = "1000",
         .help = "rows deleted per statement",
         .min = 1,
         .max = 100000,
         .target = &ro->batch},
        clean_archive_setting(&ro->archive_dir),
    };
    settings_add(t, group, TXO_ARRAY_LEN(group));
    settings_add_partition(t, &ro->partition, false);
}

void settings_add_services(struct settings_table *t, struct services_settings *o)
{
    order_services_opts_init(&o->opts);
    const struct setting group[] = {
        {.name = "payment-url",
         .env = "TXO_PAYMENT_URL",
         .type = SETTING_STRING,
         .help = "payment service base URL (unset: in-process stand-in)",
         .target = &o->opts.payment_url},
        {.name = "shipment-url",
         .env = "TXO_SHIPMENT_URL",
         .type = SETTING_STRING,
         .help = "shipment service base URL (unset: in-process stand-in)",
         .target = &o->opts.shipment_url},
        {.name = "service-connect-timeout",
         .env = "TXO_SERVICE_CONNECT_TIMEOUT_MS",
         .type = SETTING_MS,
         .def = "2000",
         .help = "connect timeout of external calls, milliseconds",
         .min = 1,
         .max = 600000,
         .target = &o->opts.connect_timeout_ms},
        {.name = "service-timeout",
         .env = "TXO_SERVICE_TIMEOUT_MS",
         .type = SETTING_MS,
         .def = "5000",
         .help = "whole-call timeout of external calls, milliseconds",
         .min = 1,
         .max = 600000,
         .target = &o->opts.timeout_ms},
        {.name = "service-retries",
         .env = "TXO_SERVICE_RETRIES",
         .type = SETTING_UINT,
         .def = "3",
         .help = "tries of one external call on transient errors (backoff 100 ms .. 1 s, jitter)",
         .min = 1,
         .max = 100,
         .target = &o->opts.retry_attempts},
        {.name = "breaker-failures",
         .env = "TXO_BREAKER_FAILURES",
         .type = SETTING_UINT,
         .def = "5",
         .help = "consecutive transient failures that open a service's circuit breaker",
         .min = 1,
         .max = 1000,
         .target = &o->opts.breaker_failures},
        {.name = "breaker-open",
         .env = "TXO_BREAKER_OPEN_MS",
         .type = SETTING_MS,
         .def = "30000",
         .help = "how long an open breaker fails fast before a probe, milliseconds",
         .min = 1,
         .max = 86400000,
         .target = &o->opts.breaker_open_ms},
        {.name = "bulkhead",
         .env = "TXO_BULKHEAD",
         .type = SETTING_UINT,
         .def = "16",
         .help = "external calls in flight per service",
         .min = 1,
         .max = 10000,
         .target = &o->opts.max_concurrent},
        {.name = "service-rate",
         .env = "TXO_SERVICE_RATE",
         .type = SETTING_UINT,
         .def = "0",
         .help = "external calls per second per service (token bucket, burst 50; 0: unlimited)",
         .max = 1000000,
         .target = &o->rate},
    };
    settings_add(t, group, TXO_ARRAY_LEN(group));
}

void settings_add_metrics_listen(struct settings_table *t, const char **listen)
{
    const struct setting group[] = {
        {.name = "metrics-listen",
         .env = "TXO_METRICS_LISTEN",
         .type = SETTING_STRING,
         .help = "serve /metrics, /healthz and /readyz on this HOST:PORT (unset: no HTTP)",
         .target = listen},
    };
    settings_add(t, group, TXO_ARRAY_LEN(group));
}
