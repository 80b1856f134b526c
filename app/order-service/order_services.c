/*
 * Payment and shipment over HTTP, behind the resilience guards: see order_services.h.
 *
 * One struct order_services holds, per service, the immutable base URL and the shared guards
 * (breaker, bulkhead, token bucket) and metric families. A session adds the per-thread HTTP
 * client. A call is one txo_retry_run() over attempt(), which passes the guards in the order
 * rate limit -> bulkhead -> breaker (guards_enter), so a rejected call never holds a bulkhead
 * slot, and the breaker only sees calls that really went out (guards_leave). A batch
 * (order_service_call_many) takes the bulkhead slots that are free (one per call at most),
 * passes the rate limit and the breaker per call, and runs its calls through those slots with
 * one txo_http_post_json_many(); the same guard functions count single and batched calls
 * alike.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "order_services.h"
#include "txo/alloc.h"
#include "txo/bulkhead.h"
#include "txo/http_client.h"
#include "txo/log.h"
#include "txo/metrics.h"
#include "txo/ratelimit.h"
#include "txo/retry.h"

static const char *const service_names[ORDER_SERVICE_COUNT] = {"payment", "shipment"};

struct service {
    char *base_url; /* NULL: stand-in */
    struct txo_breaker *breaker;
    struct txo_bulkhead *bulkhead;
    struct txo_ratelimit *ratelimit; /* NULL: unlimited */
};

struct order_services {
    struct order_services_opts opts;
    struct service svc[ORDER_SERVICE_COUNT];
    struct txo_metric *m_duration, *m_errors, *m_timeouts, *m_rejected, *m_breaker;
};

struct order_service_session {
    const struct order_services *services;
    struct txo_http_client *client;
};

void order_services_opts_init(struct order_services_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->connect_timeout_ms = 2000;
    opts->timeout_ms = 5000;
    opts->retry_attempts = 3;
    opts->retry_backoff.base_ms = 100;
    opts->retry_backoff.max_ms = 1000;
    opts->retry_backoff.jitter = 0.5;
    opts->breaker_failures = 5;
    opts->breaker_open_ms = 30000;
    opts->max_concurrent = 16;
    opts->bulkhead_wait_ms = 1000;
    opts->rate_burst = 50;
}

/* Runs under the breaker's mutex: logs and sets the gauge, nothing else. */
static void breaker_changed(void *arg, const struct txo_breaker *b, enum txo_breaker_state from,
                            enum txo_breaker_state to)
{
    struct order_services *s = arg;
    const char *name = txo_breaker_name(b);
    TXO_LOG(to == TXO_BREAKER_OPEN ? TXO_LOG_WARN : TXO_LOG_INFO, "services",
            "circuit breaker changed", TXO_KV_STR("service", name),
            TXO_KV_STR("from", txo_breaker_state_name(from)),
            TXO_KV_STR("to", txo_breaker_state_name(to)));
    if (s->m_breaker != NULL) {
        const char *labels[] = {name};
        txo_metric_set(s->m_breaker, labels, (double)to);
    }
}

static int register_metrics(struct order_services *s, struct txo_error *err)
{
    struct txo_metrics *reg = s->opts.metrics;
    if (reg == NULL)
        return 0;
    static const char *const so[] = {"service", "operation"};
    static const char *const sok[] = {"service", "operation", "kind"};
    static const char *const sg[] = {"service", "guard"};
    static const char *const sv[] = {"service"};
    s->m_duration =
        txo_metrics_register(reg, TXO_METRIC_HISTOGRAM, "txo_external_request_duration_seconds",
                             "Duration of HTTP calls to external services.", 2, so, NULL, 0, err);
    s->m_errors = txo_metrics_register(reg, TXO_METRIC_COUNTER, "txo_external_request_errors_total",
                                       "Failed HTTP calls to external services, by kind.", 3, sok,
                                       NULL, 0, err);
    s->m_timeouts = txo_metrics_register(
        reg, TXO_METRIC_COUNTER, "txo_external_request_timeouts_total",
        "HTTP calls to external services that timed out.", 2, so, NULL, 0, err);
    s->m_rejected = txo_metrics_register(reg, TXO_METRIC_COUNTER, "txo_external_rejected_total",
                                         "Calls refused by a guard (rate limit, bulkhead, "
                                         "breaker) without a request.",
                                         2, sg, NULL, 0, err);
    s->m_breaker = txo_metrics_register(reg, TXO_METRIC_GAUGE, "txo_circuit_breaker_state",
                                        "Circuit breaker state: 0 closed, 1 open, 2 half-open.", 1,
                                        sv, NULL, 0, err);
    if (s->m_duration == NULL || s->m_errors == NULL || s->m_timeouts == NULL ||
        s->m_rejected == NULL || s->m_breaker == NULL)
        return err != NULL && err->code != 0 ? err->code : TXO_ENOMEM;
    return 0;
}

static bool url_ok(const char *url)
{
    return strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0;
}

int order_services_new(const struct order_services_opts *opts, struct order_services **out,
                       struct txo_error *err)
{
    const char *urls[ORDER_SERVICE_COUNT] = {opts->payment_url, opts->shipment_url};
    for (int k = 0; k < ORDER_SERVICE_COUNT; k++)
        if (urls[k] != NULL && urls[k][0] != '\0' && !url_ok(urls[k]))
            return txo_error_set(err, TXO_EINVAL, "%s URL must start with http:// or https://: %s",
                                 service_names[k], urls[k]);
    if (opts->retry_attempts == 0 || opts->max_concurrent == 0 || opts->timeout_ms <= 0 ||
        opts->connect_timeout_ms <= 0 || opts->rate_per_s < 0)
        return txo_error_set(err, TXO_EINVAL, "external service settings out of range");

    struct order_services *s = txo_calloc(1, sizeof(*s));
    if (s == NULL)
        return txo_error_set(err, TXO_ENOMEM, "external services");
    s->opts = *opts;
    s->opts.payment_url = NULL;
    s->opts.shipment_url = NULL;
    int rc = register_metrics(s, err);
    for (int k = 0; rc == 0 && k < ORDER_SERVICE_COUNT; k++) {
        struct service *sv = &s->svc[k];
        if (urls[k] != NULL && urls[k][0] != '\0') {
            size_t n = strlen(urls[k]);
            while (n > 0 && urls[k][n - 1] == '/')
                n--; /* the paths start with '/' */
            sv->base_url = txo_strndup(urls[k], n);
            if (sv->base_url == NULL) {
                rc = txo_error_set(err, TXO_ENOMEM, "external services");
                break;
            }
        }
        struct txo_breaker_opts bo;
        txo_breaker_opts_init(&bo);
        bo.failure_threshold = opts->breaker_failures;
        bo.open_ms = opts->breaker_open_ms;
        bo.clock = opts->clock;
        bo.on_state_change = breaker_changed;
        bo.on_state_change_arg = s;
        rc = txo_breaker_new(service_names[k], &bo, &sv->breaker, err);
        if (rc == 0)
            rc = txo_bulkhead_new(service_names[k], opts->max_concurrent, &sv->bulkhead, err);
        if (rc == 0 && opts->rate_per_s > 0)
            rc = txo_ratelimit_new(service_names[k], opts->rate_per_s, opts->rate_burst,
                                   opts->clock, &sv->ratelimit, err);
        if (rc == 0 && s->m_breaker != NULL) {
            const char *labels[] = {service_names[k]};
            txo_metric_set(s->m_breaker, labels, 0);
        }
    }
    if (rc != 0) {
        order_services_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void order_services_free(struct order_services *s)
{
    if (s == NULL)
        return;
    for (int k = 0; k < ORDER_SERVICE_COUNT; k++) {
        txo_free(s->svc[k].base_url);
        txo_breaker_free(s->svc[k].breaker);
        txo_bulkhead_free(s->svc[k].bulkhead);
        txo_ratelimit_free(s->svc[k].ratelimit);
    }
    txo_free(s);
}

bool order_services_remote(const struct order_services *s, enum order_service_kind kind)
{
    return s != NULL && s->svc[kind].base_url != NULL;
}

enum txo_breaker_state order_services_breaker_state(const struct order_services *s,
                                                    enum order_service_kind kind)
{
    return txo_breaker_state(s->svc[kind].breaker);
}

int order_service_session_new(const struct order_services *svc, struct order_service_session **out,
                              struct txo_error *err)
{
    struct order_service_session *s = txo_calloc(1, sizeof(*s));
    if (s == NULL)
        return txo_error_set(err, TXO_ENOMEM, "service session");
    s->services = svc;
    struct txo_http_client_opts co;
    txo_http_client_opts_init(&co);
    co.connect_timeout_ms = svc->opts.connect_timeout_ms;
    co.timeout_ms = svc->opts.timeout_ms;
    co.user_agent = "txo-order-service";
    int rc = txo_http_client_new(&co, &s->client, err);
    if (rc != 0) {
        txo_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void order_service_session_free(struct order_service_session *s)
{
    if (s == NULL)
        return;
    txo_http_client_free(s->client);
    txo_free(s);
}

const struct order_services *order_service_session_services(const struct order_service_session *s)
{
    return s != NULL ? s->services : NULL;
}

struct call {
    struct order_service_session *session;
    enum order_service_kind kind;
    const char *operation;
    const char *url;
    const char *key;
    const char *body;
    const char *const *headers; /* the call's own lines (traceparent); NULL: none */
    bool maybe;                 /* an attempt may have taken effect (it timed out) */
};

static void count_rejected(const struct order_services *s, enum order_service_kind kind,
                           const char *guard)
{
    if (s->m_rejected != NULL) {
        const char *labels[] = {service_names[kind], guard};
        txo_metric_add(s->m_rejected, labels, 1);
    }
}

/* A token of kind's rate limit (waiting up to wait_ms), counted when refused. */
static int guard_ratelimit(const struct order_services *s, enum order_service_kind kind,
                           int64_t wait_ms, struct txo_error *err)
{
    const struct service *sv = &s->svc[kind];
    int rc = sv->ratelimit != NULL ? txo_ratelimit_acquire(sv->ratelimit, wait_ms, err) : 0;
    if (rc != 0)
        count_rejected(s, kind, "ratelimit");
    return rc;
}

/* A slot of kind's bulkhead (waiting up to wait_ms), counted when refused. */
static int guard_bulkhead(const struct order_services *s, enum order_service_kind kind,
                          int64_t wait_ms, struct txo_error *err)
{
    int rc = txo_bulkhead_acquire(s->svc[kind].bulkhead, wait_ms, err);
    if (rc != 0)
        count_rejected(s, kind, "bulkhead");
    return rc;
}

/* A permit of kind's breaker, counted when refused. */
static int guard_breaker(const struct order_services *s, enum order_service_kind kind,
                         struct txo_error *err)
{
    int rc = txo_breaker_acquire(s->svc[kind].breaker, err);
    if (rc != 0)
        count_rejected(s, kind, "breaker");
    return rc;
}

/*
 * Passes the guards of kind in order, rate limit -> bulkhead -> breaker, waiting up to wait_ms
 * for a token and for a slot. Returns 0 holding a bulkhead slot and a breaker permit, which
 * guards_leave() gives back, or the refusal of the first guard that said no, holding nothing.
 */
static int guards_enter(const struct order_services *s, enum order_service_kind kind,
                        int64_t wait_ms, struct txo_error *err)
{
    int rc = guard_ratelimit(s, kind, wait_ms, err);
    if (rc == 0)
        rc = guard_bulkhead(s, kind, wait_ms, err);
    if (rc != 0)
        return rc;
    rc = guard_breaker(s, kind, err);
    if (rc != 0)
        txo_bulkhead_release(s->svc[kind].bulkhead);
    return rc;
}

/* Records the outcome rc of a call that passed the breaker (it took total_s seconds) with the
 * breaker and the metrics. */
static void call_done(const struct order_services *s, enum order_service_kind kind,
                      const char *operation, int rc, double total_s)
{
    const struct service *sv = &s->svc[kind];
    /* A refusal is the service working; only transient failures count against it. */
    txo_breaker_record(sv->breaker, rc == 0 || !txo_err_is_transient(rc));
    if (s->m_duration != NULL) {
        const char *labels[] = {service_names[kind], operation};
        txo_metric_observe(s->m_duration, labels, total_s);
        if (rc == TXO_ETIMEOUT)
            txo_metric_add(s->m_timeouts, labels, 1);
        if (rc != 0) {
            const char *what = rc == TXO_EBUSINESS      ? "business"
                               : rc == TXO_EUNAVAILABLE ? "unavailable"
                               : rc == TXO_ETIMEOUT     ? "timeout"
                                                        : "other";
            const char *elabels[] = {service_names[kind], operation, what};
            txo_metric_add(s->m_errors, elabels, 1);
        }
    }
}

/* call_done() for a call that passed guards_enter(), and its bulkhead slot given back. */
static void guards_leave(const struct order_services *s, enum order_service_kind kind,
                         const char *operation, int rc, double total_s)
{
    call_done(s, kind, operation, rc, total_s);
    txo_bulkhead_release(s->svc[kind].bulkhead);
}

static int attempt(void *arg, unsigned n, struct txo_error *err)
{
    (void)n;
    struct call *c = arg;
    const struct order_services *s = c->session->services;
    int rc = guards_enter(s, c->kind, s->opts.bulkhead_wait_ms, err);
    if (rc != 0)
        return rc;
    struct txo_http_client_response resp;
    txo_http_client_response_init(&resp);
    rc = txo_http_post_json(c->session->client, c->url, c->key, c->headers, c->body,
                            strlen(c->body), &resp, err);
    if (rc == TXO_ETIMEOUT)
        c->maybe = true;
    guards_leave(s, c->kind, c->operation, rc, resp.total_s);
    txo_http_client_response_release(&resp);
    return rc;
}

/* <base URL of kind><path>, malloc'd; NULL when out of memory. */
static char *service_url(const struct order_services *svc, enum order_service_kind kind,
                         const char *path)
{
    size_t n = strlen(svc->svc[kind].base_url) + strlen(path) + 1;
    char *url = txo_malloc(n);
    if (url != NULL)
        snprintf(url, n, "%s%s", svc->svc[kind].base_url, path);
    return url;
}

int order_service_call(struct order_service_session *s, enum order_service_kind kind,
                       const char *operation, const char *path, const char *idempotency_key,
                       const char *body_json, const char *const *headers, struct txo_error *err)
{
    const struct order_services *svc = s->services;
    if (!order_services_remote(svc, kind))
        return txo_error_set(err, TXO_EINVAL, "no URL configured for the %s service",
                             service_names[kind]);
    char *url = service_url(svc, kind, path);
    if (url == NULL)
        return txo_error_set(err, TXO_ENOMEM, "service URL");
    struct call c = {.session = s,
                     .kind = kind,
                     .operation = operation,
                     .url = url,
                     .key = idempotency_key,
                     .body = body_json,
                     .headers = headers};
    struct txo_retry_policy policy;
    txo_retry_policy_init(&policy);
    policy.max_attempts = svc->opts.retry_attempts;
    policy.backoff = svc->opts.retry_backoff;
    policy.clock = svc->opts.clock;
    unsigned attempts = 0;
    int rc = txo_retry_run(&policy, attempt, &c, &attempts, err);
    if (rc != 0 && c.maybe && txo_err_is_transient(rc)) {
        /* No attempt got a definite answer, and one of them may have been applied: the last
         * error (an open breaker, say) must not hide that. */
        txo_error_wrap(err, "outcome unknown (an attempt timed out)");
        rc = TXO_EUNKNOWN;
        if (err != NULL)
            err->code = rc;
    }
    if (rc != 0)
        TXO_LOG(TXO_LOG_DEBUG, "services", "call failed",
                TXO_KV_STR("service", service_names[kind]), TXO_KV_STR("operation", operation),
                TXO_KV_U64("attempts", attempts),
                TXO_KV_STR("key", idempotency_key != NULL ? idempotency_key : ""),
                TXO_KV_STR("code", txo_err_name(rc)));
    txo_free(url);
    return rc;
}

/* Gives every call of reqs[0..n) the same failure (nothing was sent). */
static void fail_all(struct order_service_req *reqs, size_t n, int code, const char *what)
{
    for (size_t k = 0; k < n; k++)
        reqs[k].rc = txo_error_set(&reqs[k].err, code, "%s", what);
}

void order_service_call_many(struct order_service_session *s, enum order_service_kind kind,
                             const char *operation, const char *path,
                             struct order_service_req *reqs, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        reqs[k].rc = 0;
        txo_error_init(&reqs[k].err);
    }
    if (n == 0)
        return;
    const struct order_services *svc = s->services;
    if (!order_services_remote(svc, kind)) {
        char what[64];
        snprintf(what, sizeof(what), "no URL configured for the %s service", service_names[kind]);
        fail_all(reqs, n, TXO_EINVAL, what);
        return;
    }
    char *url = service_url(svc, kind, path);
    struct txo_http_client_request *hreqs = txo_calloc(n, sizeof(*hreqs));
    size_t *of = txo_calloc(n, sizeof(*of)); /* hreqs[j] is the call reqs[of[j]] */
    if (url == NULL || hreqs == NULL || of == NULL) {
        fail_all(reqs, n, TXO_ENOMEM, "external service calls: out of memory");
        goto out;
    }

    /*
     * The batch's bulkhead slots: one per call, as many as are free, the first waiting as a
     * single call does. Waiting for more while holding some is how batches deadlock on a
     * shared bulkhead, so the others are taken only when free. The calls then run through
     * the slots held (max_parallel), so the bulkhead's bound holds and no call is refused for
     * want of a slot while the batch has one.
     */
    size_t slots = 0;
    int64_t wait_ms = svc->opts.bulkhead_wait_ms;
    struct txo_error slot_err;
    txo_error_init(&slot_err);
    if (guard_bulkhead(svc, kind, wait_ms, &slot_err) == 0)
        slots = 1;
    /* More slots only make the batch faster: not finding one is no refusal (not counted). */
    while (slots > 0 && slots < n && txo_bulkhead_acquire(svc->svc[kind].bulkhead, 0, NULL) == 0)
        slots++;
    if (slots == 0) {
        fail_all(reqs, n, slot_err.code != 0 ? slot_err.code : TXO_EUNAVAILABLE, slot_err.msg);
        goto out;
    }
    /* Per call, the rate limit (only the first waits for a token, for the same reason) and the
     * breaker, in the single call's order. */
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
        reqs[k].rc = guard_ratelimit(svc, kind, k == 0 ? wait_ms : 0, &reqs[k].err);
        if (reqs[k].rc == 0)
            reqs[k].rc = guard_breaker(svc, kind, &reqs[k].err);
        if (reqs[k].rc != 0)
            continue;
        struct txo_http_client_request *h = &hreqs[m];
        h->url = url;
        h->idempotency_key = reqs[k].idempotency_key;
        h->body = reqs[k].body_json;
        h->headers = reqs[k].headers;
        h->len = strlen(reqs[k].body_json);
        txo_http_client_response_init(&h->resp);
        of[m++] = k;
    }

    /* Every rc is set whatever this returns (a failed batch says so in each). */
    struct txo_error batch_err;
    txo_error_init(&batch_err);
    if (m > 0 && txo_http_post_json_many(s->client, hreqs, m, NULL, (unsigned)slots, &batch_err) ==
                     TXO_EINVAL) {
        /* Only for NULL arguments, never passed here; it leaves the rcs alone, and a call
         * whose rc stayed 0 would read as done. */
        for (size_t j = 0; j < m; j++)
            hreqs[j].rc = txo_error_set(&hreqs[j].err, TXO_EINVAL, "%s", batch_err.msg);
    }
    for (size_t j = 0; j < m; j++) {
        struct order_service_req *r = &reqs[of[j]];
        r->rc = hreqs[j].rc;
        if (r->rc != 0)
            r->err = hreqs[j].err;
        call_done(svc, kind, operation, r->rc, hreqs[j].resp.total_s);
        txo_http_client_response_release(&hreqs[j].resp);
    }
    for (size_t k = 0; k < slots; k++)
        txo_bulkhead_release(svc->svc[kind].bulkhead);
    for (size_t k = 0; k < n; k++)
        if (reqs[k].rc != 0)
            TXO_LOG(
                TXO_LOG_DEBUG, "services", "batched call failed",
                TXO_KV_STR("service", service_names[kind]), TXO_KV_STR("operation", operation),
                TXO_KV_STR("key", reqs[k].idempotency_key != NULL ? reqs[k].idempotency_key : ""),
                TXO_KV_STR("code", txo_err_name(reqs[k].rc)));
out:
    txo_free(of);
    txo_free(hreqs);
    txo_free(url);
}
