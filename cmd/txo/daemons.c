/*
 * The pieces the daemon subcommands (serve, relay, worker, up) assemble: see daemons.h.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemons.h"
#include "tracing.h"
#include "cli_errors.h"
#include "notify.h"

bool daemon_parse_listen(const char *cmd, const char *setting, const char *text, char *host,
                         size_t host_size, unsigned *port)
{
    const char *colon = text != NULL ? strrchr(text, ':') : NULL;
    char *end = NULL;
    unsigned long p = colon != NULL ? strtoul(colon + 1, &end, 10) : 0;
    if (colon == NULL || colon == text || (size_t)(colon - text) >= host_size || colon[1] == '\0' ||
        *end != '\0' || p > 65535) {
        cli_error("txo %s: --%s must be HOST:PORT (e.g. 127.0.0.1:8080), got \"%s\"", cmd, setting,
                  text != NULL ? text : "");
        return false;
    }
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    *port = (unsigned)p;
    return true;
}

static bool url_ok(const char *cmd, const char *setting, const char *url)
{
    if (url == NULL || url[0] == '\0' || strncmp(url, "http://", 7) == 0 ||
        strncmp(url, "https://", 8) == 0)
        return true;
    cli_error("txo %s: --%s must start with http:// or https://, got \"%s\"", cmd, setting, url);
    return false;
}

bool daemon_check_settings(const char *cmd, const struct serve_settings *serve,
                           const struct services_settings *services)
{
    char host[64];
    unsigned port;
    if (serve != NULL) {
        if (!daemon_parse_listen(cmd, "listen", serve->listen, host, sizeof(host), &port))
            return false;
        struct in_addr addr;
        if (inet_pton(AF_INET, host, &addr) != 1) {
            cli_error("txo %s: --listen host must be an IPv4 address, got \"%s\"", cmd, host);
            return false;
        }
    }
    return services == NULL || (url_ok(cmd, "payment-url", services->opts.payment_url) &&
                                url_ok(cmd, "shipment-url", services->opts.shipment_url));
}

/* ---- metrics ---- */

/*
 * The registry of a daemon and its one scrape-time collector: each module registers and sets
 * its own families (txo_db_metrics_*, txo_outbox_metrics_*, txo_saga_metrics_*,
 * txo_relay_metrics_*; the worker and the relay count theirs as they go); what this file
 * keeps is the connection they read the tables on, opened at the first scrape and again after
 * a failed one, and which modules' tables this database has.
 */
struct daemon_metrics {
    struct txo_metrics *reg;
    struct txo_db_opts db_opts;
    pthread_mutex_t mu; /* collectors may run from several scrapes at once */
    struct txo_db *db;
    bool has_sagas; /* read when db was opened: a relay-only schema has no saga tables */
    bool parked;    /* a relay here orders by aggregate: export its parked aggregates */
};

static int collect(void *arg, struct txo_metrics *reg, struct txo_error *err)
{
    struct daemon_metrics *d = arg;
    pthread_mutex_lock(&d->mu);
    int rc = txo_db_metrics_collect(reg, err);
    if (rc == 0 && d->db == NULL) {
        rc = txo_db_open(&d->db_opts, &d->db, err);
        if (rc == 0)
            rc = txo_schema_has_table(d->db, "saga_instances", &d->has_sagas, err);
    }
    if (rc == 0)
        rc = txo_outbox_metrics_collect(reg, d->db, err);
    if (rc == 0 && d->has_sagas)
        rc = txo_saga_metrics_collect(reg, d->db, err);
    if (rc == 0 && d->parked)
        rc = txo_relay_metrics_collect(reg, d->db, err);
    if (rc != 0 && d->db != NULL) {
        txo_db_close(d->db); /* reopened at the next scrape */
        d->db = NULL;
    }
    pthread_mutex_unlock(&d->mu);
    return rc;
}

struct daemon_metrics *daemon_metrics_new(const struct common_opts *common)
{
    struct txo_error err;
    txo_error_init(&err);
    struct daemon_metrics *d = txo_calloc(1, sizeof(*d));
    if (d == NULL || txo_metrics_new(&d->reg, &err) != 0) {
        cli_error("txo: cannot create the metrics registry: %s", err.msg);
        txo_free(d);
        return NULL;
    }
    d->db_opts = common->db;
    pthread_mutex_init(&d->mu, NULL);
    /* The families show from the first scrape on, before the tables could be read. */
    int rc = txo_metrics_add_process(d->reg, &err);
    if (rc == 0)
        rc = txo_db_metrics_register(d->reg, &err);
    if (rc == 0)
        rc = txo_outbox_metrics_register(d->reg, &err);
    if (rc == 0)
        rc = txo_saga_metrics_register(d->reg, &err);
    if (rc == 0)
        rc = txo_metrics_add_collector(d->reg, collect, d, &err);
    if (rc != 0) {
        cli_error("txo: metrics: %s", err.msg);
        daemon_metrics_free(d);
        return NULL;
    }
    return d;
}

bool daemon_metrics_watch_parked(struct daemon_metrics *d)
{
    if (d == NULL)
        return true;
    struct txo_error err;
    txo_error_init(&err);
    pthread_mutex_lock(&d->mu);
    int rc = d->parked ? 0 : txo_relay_metrics_register(d->reg, &err);
    d->parked = rc == 0;
    pthread_mutex_unlock(&d->mu);
    if (rc != 0)
        cli_error("txo: metrics: %s", err.msg);
    return rc == 0;
}

struct txo_metrics *daemon_metrics_registry(struct daemon_metrics *d)
{
    return d != NULL ? d->reg : NULL;
}

void daemon_metrics_free(struct daemon_metrics *d)
{
    if (d == NULL)
        return;
    txo_metrics_free(d->reg);
    txo_db_close(d->db);
    pthread_mutex_destroy(&d->mu);
    txo_free(d);
}

/* Answers GET /metrics from the registry. */
void daemon_metrics_reply(struct txo_metrics *reg, struct txo_http_response *resp)
{
    struct txo_error err;
    txo_error_init(&err);
    char *text = NULL;
    size_t len = 0;
    if (txo_metrics_render(reg, &text, &len, &err) != 0) {
        (void)txo_http_response_set(resp, 500, "{\"error\":\"internal\",\"message\":\"metrics\"}");
        return;
    }
    txo_http_response_take(resp, 200, text, len);
    resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

/*
 * Ready when the database answers, takes queries (a Galera node in the primary component,
 * txo_db_check_ready) and has the outbox table: all a relay needs, so a relay-only schema
 * (`txo migrate --only outbox`) is ready. Uses the collectors' connection.
 */
static bool outbox_ready(struct daemon_metrics *d)
{
    struct txo_error err;
    txo_error_init(&err);
    bool exists = false;
    pthread_mutex_lock(&d->mu);
    int rc = 0;
    if (d->db == NULL) {
        rc = txo_db_open(&d->db_opts, &d->db, &err);
        if (rc == 0)
            rc = txo_schema_has_table(d->db, "saga_instances", &d->has_sagas, &err);
    }
    if (rc == 0)
        rc = txo_db_check_ready(d->db, &err);
    if (rc == 0)
        rc = txo_schema_has_table(d->db, "outbox_events", &exists, &err);
    if (rc != 0 && d->db != NULL) {
        txo_db_close(d->db); /* reopened at the next scrape or probe */
        d->db = NULL;
    }
    pthread_mutex_unlock(&d->mu);
    if (rc != 0)
        TXO_LOG(TXO_LOG_WARN, "metrics", "readiness check failed", TXO_KV_STR("error", err.msg));
    return rc == 0 && exists;
}

static void metrics_only_handler(void *arg, const struct txo_http_request *req,
                                 struct txo_http_response *resp)
{
    struct daemon_metrics *d = arg;
    if (strcmp(req->method, "GET") == 0 && strcmp(req->path, "/metrics") == 0)
        daemon_metrics_reply(d->reg, resp);
    else if (strcmp(req->method, "GET") == 0 && strcmp(req->path, "/healthz") == 0)
        (void)txo_http_response_set(resp, 200, "{\"status\":\"ok\"}");
    else if (strcmp(req->method, "GET") == 0 && strcmp(req->path, "/readyz") == 0) {
        bool ready = outbox_ready(d);
        (void)txo_http_response_set(resp, ready ? 200 : 503,
                                    ready ? "{\"status\":\"ready\"}"
                                          : "{\"status\":\"not ready\"}");
    } else
        (void)txo_http_response_set(resp, 404,
                                    "{\"error\":\"not_found\",\"message\":\"no such endpoint\"}");
}

bool daemon_metrics_server_start(const char *cmd, const char *listen, struct daemon_metrics *d,
                                 struct txo_http_server **out)
{
    *out = NULL;
    if (listen == NULL || listen[0] == '\0')
        return true;
    struct txo_http_server_opts so;
    txo_http_server_opts_init(&so);
    char host[64];
    if (!daemon_parse_listen(cmd, "metrics-listen", listen, host, sizeof(host), &so.port))
        return false;
    so.host = host;
    so.max_connections = 16;
    so.handler_threads = 2; /* GET /metrics and /healthz only */
    struct txo_error err;
    txo_error_init(&err);
    if (txo_http_server_start(&so, metrics_only_handler, d, out, &err) != 0) {
        cmd_report(cmd, "starting the metrics server", &err);
        return false;
    }
    TXO_LOG(TXO_LOG_INFO, cmd, "metrics listening", TXO_KV_STR("host", host),
            TXO_KV_U64("port", txo_http_server_port(*out)), TXO_KV_STR("path", "/metrics"));
    return true;
}

/* ---- components from settings ---- */

bool daemon_services_new(const char *cmd, const struct services_settings *s,
                         struct txo_metrics *metrics, struct order_services **out)
{
    struct order_services_opts so = s->opts;
    so.rate_per_s = (double)s->rate;
    so.metrics = metrics;
    struct txo_error err;
    txo_error_init(&err);
    if (order_services_new(&so, out, &err) != 0) {
        cmd_report(cmd, "external services", &err);
        return false;
    }
    return true;
}

/* The worker of the order service: the library's runtime with the order tables. */
struct daemon_worker {
    struct txo_worker *worker;
    struct txo_consumer *consumer; /* NULL: fed by local dispatch, or no broker */
    struct order_worker_config config;
};

struct daemon_worker *daemon_worker_new(const char *cmd, const struct common_opts *common,
                                        const struct worker_settings *s,
                                        const struct order_services *services,
                                        const struct cmd_broker *broker,
                                        struct txo_metrics *metrics)
{
    struct txo_error err;
    txo_error_init(&err);
    struct daemon_worker *d = txo_calloc(1, sizeof(*d));
    if (d == NULL) {
        cli_error("txo %s: out of memory", cmd);
        return NULL;
    }
    struct txo_worker_opts wo = s->opts;
    wo.saga.compensation_backoff.base_ms = (int64_t)s->comp_retry_base_s * 1000;
    wo.saga.compensation_backoff.max_ms = (int64_t)s->comp_retry_max_s * 1000;
    clean_settings_derive(&wo.retention); /* archive_dir checked by clean_archive_ok() */
    wo.metrics = metrics;
    wo.tracer = daemon_tracer();
    order_worker_setup(&d->config, services, NULL, &wo);
    if (txo_worker_new(&common->db, &wo, &d->worker, &err) != 0) {
        cmd_report(cmd, "creating the worker", &err);
        txo_free(d);
        return NULL;
    }
    if (broker != NULL) {
        /* Each delivery is applied in one transaction (a single message: the single path). */
        const struct txo_handler h = {.batch = txo_worker_handle_many, .arg = d->worker};
        int rc = broker->consumer_new("order", "OrderCreated", &h, metrics, &d->consumer, &err);
        if (rc != 0) {
            char what[96];
            snprintf(what, sizeof(what), "creating the %s consumer", broker->name);
            cmd_report(cmd, what, &err);
            daemon_worker_free(d);
            return NULL;
        }
        txo_worker_attach_consumer(d->worker, d->consumer);
    }
    return d;
}

struct txo_worker *daemon_worker_runtime(struct daemon_worker *d)
{
    return d->worker;
}

void daemon_worker_stop(const char *cmd, struct daemon_worker *d)
{
    if (d == NULL)
        return;
    txo_worker_stop(d->worker);
    struct txo_worker_stats st;
    txo_worker_get_stats(d->worker, &st);
    TXO_LOG(TXO_LOG_INFO, cmd, "worker stopped", TXO_KV_U64("consumed", st.consumed),
            TXO_KV_U64("duplicates", st.duplicates), TXO_KV_U64("completed", st.sagas_completed),
            TXO_KV_U64("aborted", st.sagas_aborted),
            TXO_KV_U64("compensation_failed", st.sagas_comp_failed),
            TXO_KV_U64("commands", st.commands_done));
}

void daemon_worker_free(struct daemon_worker *d)
{
    if (d == NULL)
        return;
    txo_worker_free(d->worker);
    txo_consumer_free(d->consumer);
    txo_free(d);
}

bool daemon_relay_check(const char *cmd, struct relay_settings *s, bool *binlog)
{
    struct txo_relay_opts *ro = &s->opts;
    if (txo_claim_strategy_parse(s->claim, &ro->claim) < 0) {
        cli_error("txo %s: --claim must be auto, skip-locked or update-limit, got \"%s\"", cmd,
                  s->claim);
        return false;
    }
    if (txo_relay_claim_mode_parse(s->claim_mode, &ro->mode) < 0) {
        cli_error("txo %s: --claim-mode must be auto, lease or transaction, got \"%s\"", cmd,
                  s->claim_mode);
        return false;
    }
    if (txo_relay_ordering_parse(s->ordering, &ro->ordering) < 0) {
        cli_error("txo %s: --ordering must be aggregate or none, got \"%s\"", cmd, s->ordering);
        return false;
    }
    if (ro->backoff.max_ms < ro->backoff.base_ms) {
        cli_error("txo %s: --backoff-max (%" PRId64 ") must be >= --backoff-base (%" PRId64 ")",
                  cmd, ro->backoff.max_ms, ro->backoff.base_ms);
        return false;
    }
    if (ro->relay_id != NULL && ro->relay_id[0] == '\0')
        ro->relay_id = NULL;
    *binlog = strcmp(s->source, "binlog") == 0;
    if (!*binlog && strcmp(s->source, "polling") != 0) {
        cli_error("txo %s: --source must be polling or binlog, got \"%s\"", cmd, s->source);
        return false;
    }
    const char *name = s->binlog.source_name;
    if (name[0] == '\0' || strlen(name) > 64) {
        cli_error("txo %s: --source-name must be 1..64 bytes, got \"%s\"", cmd, name);
        return false;
    }
    return true;
}

static void *relay_main(void *arg)
{
    struct daemon_relay *r = arg;
    r->rc =
        r->binlog != NULL ? txo_binlog_run(r->binlog, &r->err) : txo_relay_run(r->relay, &r->err);
    if (r->wake)
        signals_wake();
    return NULL;
}

bool daemon_relay_start(struct daemon_relay *r)
{
    txo_error_init(&r->err);
    r->rc = 0;
    r->running = pthread_create(&r->tid, NULL, relay_main, r) == 0;
    return r->running;
}

void daemon_relay_stop(struct daemon_relay *r)
{
    if (!r->running)
        return;
    if (r->binlog != NULL)
        txo_binlog_stop(r->binlog);
    else
        txo_relay_stop(r->relay);
    pthread_join(r->tid, NULL);
    r->running = false;
}

void daemon_relay_free(struct daemon_relay *r)
{
    daemon_relay_stop(r);
    txo_relay_free(r->relay);
    txo_binlog_free(r->binlog);
    r->relay = NULL;
    r->binlog = NULL;
}

bool daemon_polling_allowed(const char *cmd, struct txo_db *db)
{
    int64_t through = 0;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_binlog_published_through(db, &through, &err) < 0) {
        cmd_report(cmd, "reading the binlog sources", &err);
        return false;
    }
    if (through == 0)
        return true;
    cli_error("txo %s: a binlog source of this outbox published its events up to id %" PRId64
              " and left them PENDING, so a polling relay would publish them all again. Hand the "
              "outbox back first: txo relay --source binlog --hand-back (docs/binlog.md, "
              "\"Switching\"), or run with --source binlog",
              cmd, through);
    return false;
}

/* ---- the HTTP API ---- */

struct api_daemon {
    struct txo_db_pool *pool;
    struct order_api *api;
    struct txo_http_server *server;
    struct txo_metrics *metrics;
    struct txo_db_opts db_opts;
};

/*
 * /metrics is answered here, as the order API answers its own paths: HEAD as GET, another
 * method 405. Everything else goes to the order API.
 */
static void api_handler(void *arg, const struct txo_http_request *req,
                        struct txo_http_response *resp)
{
    struct api_daemon *d = arg;
    if (d->metrics == NULL || strcmp(req->path, "/metrics") != 0) {
        order_api_handle(d->api, req, resp);
        return;
    }
    resp->route = "/metrics";
    if (strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0)
        daemon_metrics_reply(d->metrics, resp);
    else
        txo_http_response_error(resp, 405, "method_not_allowed",
                                "this method is not allowed on this path");
}

struct api_daemon *daemon_api_start(const char *cmd, const struct common_opts *common,
                                    const struct serve_settings *s,
                                    const struct order_services *services,
                                    struct txo_metrics *metrics, void (*on_commit)(void *),
                                    void *on_commit_arg)
{
    struct txo_http_server_opts so = s->http;
    char host[64];
    if (!daemon_parse_listen(cmd, "listen", s->listen, host, sizeof(host), &so.port))
        return NULL;
    so.host = host;
    so.metrics = metrics; /* txo_http_requests_total, txo_http_request_duration_seconds */
    so.tracer = daemon_tracer();

    struct api_daemon *d = txo_calloc(1, sizeof(*d));
    if (d == NULL)
        return NULL;
    d->metrics = metrics;
    d->db_opts = common->db;
    /* The API's sessions wait for a busy Idempotency-Key at most this long (then 409). */
    d->db_opts.lock_wait_timeout_s = s->idem_wait_s;

    struct txo_error err;
    txo_error_init(&err);
    struct order_api_opts ao = s->api;
    ao.tracer = daemon_tracer();
    ao.services = services;
    ao.on_commit = on_commit;
    ao.on_commit_arg = on_commit_arg;
    ao.metrics = metrics; /* txo_order_batch_size; GET /metrics is answered by api_handler */
    if (txo_db_pool_new(&d->db_opts, s->db_pool, &d->pool, &err) != 0 ||
        order_api_new(&ao, d->pool, &d->api, &err) != 0) {
        cmd_report(cmd, "starting the API", &err);
        daemon_api_stop(d);
        return NULL;
    }
    /* Fail at start-up, not at the first request, when the database is unreachable. */
    struct txo_db *probe = NULL;
    if (txo_db_pool_get(d->pool, 1000, &probe, &err) != 0) {
        cmd_report(cmd, "connecting to the database", &err);
        daemon_api_stop(d);
        return NULL;
    }
    txo_db_pool_put(d->pool, probe, false);
    if (txo_http_server_start(&so, api_handler, d, &d->server, &err) != 0) {
        cmd_report(cmd, "starting the HTTP server", &err);
        daemon_api_stop(d);
        return NULL;
    }
    TXO_LOG(TXO_LOG_INFO, cmd, "HTTP API listening",
            TXO_KV_STR("scheme", so.tls_cert_file != NULL ? "https" : "http"),
            TXO_KV_STR("host", host), TXO_KV_U64("port", txo_http_server_port(d->server)),
            TXO_KV_BOOL("async", s->api.async));
    return d;
}

unsigned daemon_api_port(const struct api_daemon *d)
{
    return txo_http_server_port(d->server);
}

void daemon_api_stop(struct api_daemon *d)
{
    if (d == NULL)
        return;
    txo_http_server_stop(d->server);
    order_api_free(d->api);
    txo_db_pool_free(d->pool);
    txo_free(d);
}

/* ---- what serve, worker and up start first ---- */

bool daemon_base_start(const char *cmd, const struct common_opts *common, bool wait_db,
                       const struct tracing_settings *tracing,
                       const struct services_settings *services, struct daemon_base *out,
                       int *exit_status)
{
    *out = (struct daemon_base){.common = common};
    *exit_status = 1;
    if (wait_db) {
        int sig = 0;
        struct txo_db *probe = daemon_db_wait(cmd, common, &sig);
        if (probe == NULL) {
            *exit_status = sig != 0 ? 0 : 1;
            return false;
        }
        txo_db_close(probe);
    }
    out->metrics = daemon_metrics_new(common);
    if (out->metrics == NULL)
        return false;
    out->reg = daemon_metrics_registry(out->metrics);
    if (!daemon_tracing_start(cmd, tracing, out->reg) ||
        !daemon_services_new(cmd, services, out->reg, &out->services)) {
        *exit_status = 2;
        return false;
    }
    return true;
}

void daemon_base_register(const char *role, struct daemon_base *b, const struct txo_relay *relay)
{
    b->hb_src = (struct daemon_heartbeat_src){.services = b->services, .relay = relay};
    b->hb = daemon_heartbeat_start(role, b->common, &b->hb_src);
}

void daemon_base_unregister(struct daemon_base *b)
{
    txo_heartbeat_stop(b->hb);
    b->hb = NULL;
}

void daemon_base_stop(struct daemon_base *b)
{
    daemon_base_unregister(b);
    order_services_free(b->services);
    daemon_tracing_stop();
    daemon_metrics_free(b->metrics);
}

/* ---- the process registry ---- */

static size_t heartbeat_breakers(void *arg, struct txo_heartbeat_breaker *out, size_t cap)
{
    const struct daemon_heartbeat_src *src = arg;
    static const char *const names[ORDER_SERVICE_COUNT] = {"payment", "shipment"};
    size_t n = 0;
    if (src->relay != NULL && n < cap)
        out[n++] = (struct txo_heartbeat_breaker){.name = "publisher",
                                                  .state = txo_relay_breaker_state(src->relay)};
    for (int k = 0; src->services != NULL && k < ORDER_SERVICE_COUNT && n < cap; k++) {
        enum order_service_kind kind = (enum order_service_kind)k;
        if (order_services_remote(src->services, kind))
            out[n++] = (struct txo_heartbeat_breaker){
                .name = names[k], .state = order_services_breaker_state(src->services, kind)};
    }
    return n;
}

struct txo_heartbeat *daemon_heartbeat_start(const char *role, const struct common_opts *common,
                                             const struct daemon_heartbeat_src *src)
{
    struct txo_heartbeat_opts ho;
    txo_heartbeat_opts_init(&ho);
    ho.role = role;
    ho.version = TXO_VERSION;
    if (src != NULL) {
        ho.breakers = heartbeat_breakers;
        ho.breakers_arg = (void *)src;
    }
    struct txo_error err;
    txo_error_init(&err);
    struct txo_heartbeat *hb = NULL;
    if (txo_heartbeat_start(&common->db, &ho, &hb, &err) != 0) {
        TXO_LOG(TXO_LOG_WARN, role, "running without a heartbeat in txo_processes",
                TXO_KV_STR("err", err.msg));
        return NULL;
    }
    return hb;
}
