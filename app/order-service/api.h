/*
 * The order service's HTTP API, served by txo's HTTP server
 * (include/txo/http_server.h). Routes, with their answers:
 *
 *   POST /orders              Idempotency-Key required. 201 {"order_id","status":"CREATED"}
 *                             (202 in async mode) with Location: /orders/{id}, a repeat with
 *                             the same key and body gets the stored response again (and the
 *                             Location); 400 malformed key/JSON/types,
 *                             422 invalid values, unknown SKU, or the key reused with another
 *                             body; 409 the key is still being processed (Retry-After);
 *                             413 body too large; 415 not JSON; 503 database unavailable
 *                             (Retry-After).
 *   GET  /orders/{id}         200 the order, its items and its saga with every step (ETag:
 *                             the order's version); 404.
 *   POST /orders/{id}/cancel  If-Match: "<version>" required (428 without): 200 CANCELLED;
 *                             412 version_conflict (someone changed it: read again); 409 not
 *                             CREATED any more; 404. Optimistic locking on orders.version.
 *   GET  /healthz             200 while the process runs.
 *   GET  /readyz              200 when the database answers, else 503.
 *   GET  /metrics             Prometheus text format (when a registry is given).
 *   and the library's admin API (txo/admin.h), mounted behind these routes: GET /outbox/stats,
 *   GET /outbox/parked, GET /dlq, POST /dlq/{id}/replay, GET /sagas/{id}, POST /sagas/{id}/retry
 *   (through the saga definitions the worker registers, worker.h), GET /sagas, GET /processes
 *   with the admin token, and the dashboard GET /ui, /ui/app.js, /ui/app.css without it.
 * A path above with another method is 405; HEAD is answered as GET. Every error body is
 * {"error":"<code>","message":"<what and why>"}. openapi.json describes every route, every
 * status (the HTTP layer's refusals too) and an example of each exchange.
 *
 * The POST /orders transaction writes, together or not at all: the idempotency key row, the
 * order, its items, the OrderCreated outbox event, in async mode the StartOrderSaga command,
 * and the stored response.
 *
 * With order_batch > 1 the order writer (order_writer.h) commits the POST /orders requests
 * queued meanwhile in one transaction with the same rows and the same answers; a group that
 * fails is rolled back and its requests run one by one as above.
 *
 * Thread-safety: order_api_handle() is called from many server threads at once; each request
 * borrows its own connection from the pool (POST /orders with the writer: only when it falls
 * back to the single path; the writer borrows one per group).
 */
#ifndef TXO_ORDER_API_H
#define TXO_ORDER_API_H

#include <stdbool.h>
#include <stdint.h>

#include "txo/db.h"
#include "txo/err.h"
#include "txo/http_server.h"

struct txo_metrics;
struct order_services;

struct order_api_opts {
    bool async;                            /* 202 + StartOrderSaga in command_queue */
    unsigned idempotency_stale_s;          /* PROCESSING keys older than this may be taken over */
    const char *admin_token;               /* NULL or "": admin endpoints need no token (copied) */
    int64_t db_wait_ms;                    /* wait for a pooled connection; then 503 */
    struct txo_metrics *metrics;           /* NULL: /metrics answers 404 */
    struct txo_tracer *tracer;             /* spans of grouped writes; NULL: none */
    const struct order_services *services; /* for POST /sagas/{id}/retry; NULL: local stand-ins */
    /* Called after an order (and its OrderCreated) committed, from the request's thread (the
     * order writer's, once per group, with order_batch > 1); must be quick and thread-safe. `txo
     * up` wakes its relay with it. NULL: none. */
    void (*on_commit)(void *arg);
    void *on_commit_arg;
    /* POST /orders per group transaction (order_writer.h): 1 (the default) runs each request
     * in its own transaction as described above; more starts the order writer, one thread
     * that commits whatever is queued, up to this many, in one transaction (no timer). */
    unsigned order_batch;
};

void order_api_opts_init(struct order_api_opts *opts);

struct order_api;

/* Creates the API over pool (borrowed: it must outlive the API). Errors: TXO_ENOMEM. */
TXO_MUST_CHECK int order_api_new(const struct order_api_opts *opts, struct txo_db_pool *pool,
                                 struct order_api **out, struct txo_error *err);
void order_api_free(struct order_api *api);

/*
 * The checks of POST /orders that need no database, on the values of its Idempotency-Key
 * headers (n_keys of them, key the first or NULL), its Content-Type (NULL: none) and its body:
 * true when the request would go on to the database, false with resp answered (400, 415, 422,
 * and 500 only for a failed allocation). The caller frees resp->body (txo_free). Pure and
 * thread-safe; the fuzzer of the request parsing calls it (fuzz/fuzz_order_post.c).
 */
bool order_api_check_post(const char *key, size_t n_keys, const char *content_type,
                          const char *body, size_t len, struct txo_http_response *resp);

/* The txo_http_handler_fn of the API; arg is the struct order_api. */
void order_api_handle(void *arg, const struct txo_http_request *req,
                      struct txo_http_response *resp);

/* The OpenAPI 3.1 description the API serves as GET /openapi.json (static, NUL-terminated). */
const char *order_api_openapi(void);

/*
 * The routes the API answers, for the test that holds the OpenAPI description to them:
 * route i's method and its path as an OpenAPI template ("/orders/{id}/cancel"), written into
 * path (cap bytes), and whether it is an admin endpoint (the admin API's routes come after the
 * order routes). False past the last route.
 */
bool order_api_route(size_t i, const char **method, char *path, size_t cap, bool *admin);

#endif
