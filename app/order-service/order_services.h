/*
 * The order saga's external services, payment and shipment, called
 * over HTTP when a URL is configured; without one the saga's steps use their in-process
 * stand-ins (the local payments/shipments tables only).
 *
 * Every call goes through the same guards, in this order:
 *   rate limit (token bucket)  -> bulkhead (bounded calls in flight)  -> circuit breaker
 *   -> HTTP POST with an Idempotency-Key, connect and total timeouts
 * and is retried with exponential backoff + jitter when it failed transiently (timeout, 5xx,
 * connection refused, breaker open); a business refusal (4xx) is final. The Idempotency-Key
 * makes the retry of a call whose outcome is unknown (a timeout) safe.
 *
 * The breaker counts transient failures only: a declined card is the service working.
 *
 * Metrics (when a registry is given), labels service="payment"|"shipment":
 *   txo_external_request_duration_seconds{service,operation}  histogram, every HTTP call
 *   txo_external_request_errors_total{service,operation,kind}  kind: unavailable, business, other
 *   txo_external_request_timeouts_total{service,operation}
 *   txo_external_rejected_total{service,guard}  calls refused by a guard without a request
 *   txo_circuit_breaker_state{service}  0 closed, 1 open, 2 half-open
 *
 * Thread-safety: struct order_services is shared by every thread (its guards are
 * thread-safe); each thread calls through its own struct order_service_session (an HTTP
 * client with its kept-alive connections).
 */
#ifndef TXO_ORDER_SERVICES_H
#define TXO_ORDER_SERVICES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/backoff.h"
#include "txo/breaker.h"
#include "txo/clock.h"
#include "txo/err.h"

struct txo_metrics;

enum order_service_kind { ORDER_SERVICE_PAYMENT, ORDER_SERVICE_SHIPMENT, ORDER_SERVICE_COUNT };

struct order_services_opts {
    const char *payment_url;          /* base URL ("http://127.0.0.1:8090"); NULL/"": stand-in */
    const char *shipment_url;         /* same for shipments */
    int64_t connect_timeout_ms;       /* default 2000 */
    int64_t timeout_ms;               /* whole call; default 5000 */
    unsigned retry_attempts;          /* tries of one call; default 3 */
    struct txo_backoff retry_backoff; /* default 100 ms .. 1 s, jitter 0.5 */
    unsigned breaker_failures;        /* consecutive transient failures that open it; default 5 */
    int64_t breaker_open_ms;          /* how long it stays open before a probe; default 30000 */
    unsigned max_concurrent;          /* bulkhead per service; default 16 */
    int64_t bulkhead_wait_ms;         /* wait for a slot; default 1000 */
    double rate_per_s;                /* token bucket per service; 0 = unlimited (default) */
    unsigned rate_burst;              /* default 50 */
    const struct txo_clock *clock;    /* NULL = system */
    struct txo_metrics *metrics;      /* NULL = none */
};

void order_services_opts_init(struct order_services_opts *opts);

struct order_services;

/* Errors: TXO_EINVAL (a URL that is not http:// or https://, bad numbers), TXO_ENOMEM. */
TXO_MUST_CHECK int order_services_new(const struct order_services_opts *opts,
                                      struct order_services **out, struct txo_error *err);
void order_services_free(struct order_services *svc);

/* True when kind is called over HTTP (a URL is configured). */
bool order_services_remote(const struct order_services *svc, enum order_service_kind kind);

/* The breaker of kind (for metrics and tests). */
enum txo_breaker_state order_services_breaker_state(const struct order_services *svc,
                                                    enum order_service_kind kind);

struct order_service_session;

/* One per thread. Errors: TXO_ENOMEM, TXO_EIO (libcurl). */
TXO_MUST_CHECK int order_service_session_new(const struct order_services *svc,
                                             struct order_service_session **out,
                                             struct txo_error *err);
void order_service_session_free(struct order_service_session *s);

/* The services a session calls (for the saga steps). */
const struct order_services *order_service_session_services(const struct order_service_session *s);

/*
 * POSTs body_json to <base url of kind><path> with idempotency_key, through the guards above.
 * operation names the call in metrics and messages ("charge"). Returns 0 (2xx), TXO_EBUSINESS
 * (the service refused: final), or, once the retries are spent:
 *   TXO_EUNKNOWN      an attempt timed out and none got a definite answer after it: the call
 *                     may have taken effect;
 *   TXO_EUNAVAILABLE  it did not take effect (down, 5xx, breaker open, bulkhead full, rate
 *                     limited). A 5xx counts as "nothing happened": that is the contract of
 *                     the services we call (the stand-in's 503 has no effect); a service
 *                     without that promise should map 5xx to TXO_EUNKNOWN here.
 * TXO_EINVAL when kind has no URL.
 */
TXO_MUST_CHECK int order_service_call(struct order_service_session *s, enum order_service_kind kind,
                                      const char *operation, const char *path,
                                      const char *idempotency_key, const char *body_json,
                                      const char *const *headers, struct txo_error *err);

/* One call of order_service_call_many(). */
struct order_service_req {
    const char *idempotency_key;
    const char *body_json;
    const char *const *headers; /* this call's own "Name: value" lines (traceparent); NULL */
    int rc;                     /* out: as order_service_call() would return for ONE try */
    struct txo_error err;       /* out */
};

/*
 * One try of each of n calls of the same kind and operation (all to <base url of kind><path>),
 * made concurrently on the session's HTTP client, through the same guards as
 * order_service_call(). The batch takes the bulkhead slots that are free, one per call at
 * most: the first waits up to bulkhead_wait_ms as a single call does, the others are taken
 * only if free, so a batch never waits holding slots (none free: every call fails with
 * TXO_EUNAVAILABLE "bulkhead ... is full"). Each call then passes the rate limit (only the
 * first waits for a token; the others take a free one or fail at once, "rate limit ...
 * exceeded") and the breaker (open: TXO_EUNAVAILABLE without a request). The calls that
 * passed are POSTed together through the slots held: never more in flight than those, each
 * one that ends handing its slot to the next.
 *
 * No retries: a call that failed is retried by the caller on its own (order_service_call).
 * reqs[k].rc is 0 (2xx), TXO_EBUSINESS (refused: final), TXO_EUNAVAILABLE (did not take
 * effect: down, 5xx, refused by a guard), TXO_ETIMEOUT (this try timed out: it may have taken
 * effect, unlike order_service_call's TXO_EUNKNOWN this is one try's answer), or what the HTTP
 * client returned (txo_http_post_json_many); err has the detail when rc != 0. Every rc is set
 * on return. The breaker and the metrics see each call as for single calls. TXO_EINVAL in every
 * rc when kind has no URL, TXO_ENOMEM in every rc when the batch cannot be set up.
 */
void order_service_call_many(struct order_service_session *s, enum order_service_kind kind,
                             const char *operation, const char *path,
                             struct order_service_req *reqs, size_t n);

#endif
