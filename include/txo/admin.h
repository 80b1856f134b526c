/*
 * The operator's API of a txo service: the HTTP endpoints that look into and repair what the
 * library keeps in the database (the outbox, its dead letters and parked aggregates, sagas,
 * the registered processes), and the dashboard that shows them. Every service built on libtxo
 * shares those tables, so each mounts this instead of writing its own.
 *
 * The routes, with their answers (every error body is {"error":"<code>","message":"..."}):
 *
 *   with the token (Authorization: Bearer <token> when opts.token is set, else 401):
 *   GET  /outbox/stats        counts per status and the oldest pending age.
 *   GET  /outbox/parked       aggregates held back by a failed event (relay ordering
 *                             aggregate), oldest first (?limit= 1..1000, default 50).
 *   GET  /dlq                 dead letters (?after_id= 0..2^63-1, ?limit= 1..1000, default 50)
 *                             and next_after_id, the cursor of the next page.
 *   POST /dlq/{id}/replay     the dead letter's event back to PENDING; 404, 409 not FAILED.
 *   GET  /sagas/{id}          the saga and its steps; 404.
 *   POST /sagas/{id}/retry    retries a COMPENSATION_FAILED saga now, through the definition
 *                             of its type in opts.sagas; 409 other states or a type not given.
 *   GET  /sagas               counts per status, and every COMPENSATION_FAILED saga and the
 *                             stuck ones, each with its failing step and error.
 *   GET  /processes           the daemons registered in txo_processes (txo/registry.h): alive
 *                             or stale, with their circuit breaker states.
 *   without it (a browser cannot send the header when it navigates; the page holds no data,
 *   asks for the token and sends it on every call it makes):
 *   GET  /ui, /ui/app.js, /ui/app.css   the dashboard.
 * A path above with another method is 405. HEAD is answered as GET. A bad query argument is
 * 400, a database that cannot lend a connection within opts.db_wait_ms 503 with Retry-After.
 *
 * Mounting: a service answers its own routes and hands every other request to
 * txo_admin_handle(), which answers the ones above and leaves the rest to the service:
 *
 *   static void handler(void *arg, const struct txo_http_request *req,
 *                       struct txo_http_response *resp)
 *   {
 *       struct my_service *s = arg;
 *       if (!my_routes_handle(s, req, resp) && !txo_admin_handle(s->admin, req, resp))
 *           txo_http_response_error(resp, 404, "not_found", "no such endpoint");
 *   }
 *
 * A server with nothing else to serve passes txo_admin_http_handler and the admin itself to
 * txo_http_server_start().
 *
 * Thread-safety: once made, a struct txo_admin is read-only; txo_admin_handle() may be called
 * from every handler thread at once, and each request borrows its own pooled connection.
 */
#ifndef TXO_ADMIN_H
#define TXO_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/db.h"
#include "txo/err.h"
#include "txo/http_server.h"
#include "txo/saga.h"

struct txo_admin_opts {
    /* The bearer token of the routes that need one; NULL or "": no token asked. Copied. */
    const char *token;
    /* How long a request waits for a pooled connection before its 503; default 5000. */
    int64_t db_wait_ms;
    /* POST /sagas/{id}/retry: the saga definitions, by type, exactly as registered with the
     * worker (txo_worker_opts.sagas); borrowed, they must outlive the admin. None: every retry
     * answers 409. */
    const struct txo_saga_def *const *sagas;
    size_t n_sagas;
    /* ctx->user of a retried saga, as the worker's runner_user_new/free/arg: made for the one
     * retry by saga_user_new(saga_user_arg) (may be NULL: ctx->user is then saga_user_arg), and
     * released by saga_user_free once the retry returned. */
    void *(*saga_user_new)(void *arg);
    void (*saga_user_free)(void *user);
    void *saga_user_arg;
    /* The retry's lease, step tries and owner; defaults: txo_saga_opts_init(). */
    struct txo_saga_opts saga;
};

/* Fills opts with the defaults above: no token, no sagas. Never fails. */
TXO_API void txo_admin_opts_init(struct txo_admin_opts *opts);

struct txo_admin;

/*
 * Makes the admin API over pool (borrowed: it must outlive the admin). Errors: TXO_EINVAL (a
 * saga definition without a type, or two of one type), TXO_ENOMEM. Free with txo_admin_free().
 */
TXO_API TXO_MUST_CHECK int txo_admin_new(const struct txo_admin_opts *opts,
                                         struct txo_db_pool *pool, struct txo_admin **out,
                                         struct txo_error *err);

/* Frees admin and wipes its copy of the token. NULL is a no-op. */
TXO_API void txo_admin_free(struct txo_admin *admin);

/*
 * Answers req when its path is one of the routes above (with 401 or 405 when that is the
 * answer) and returns true; returns false and leaves resp untouched for any other path.
 */
TXO_API bool txo_admin_handle(struct txo_admin *admin, const struct txo_http_request *req,
                              struct txo_http_response *resp);

/*
 * A txo_http_handler_fn that serves the admin API alone (arg is the struct txo_admin):
 * txo_admin_handle(), and 404 for every other path.
 */
TXO_API void txo_admin_http_handler(void *arg, const struct txo_http_request *req,
                                    struct txo_http_response *resp);

/*
 * Route i of the list above, for a service that describes its API (OpenAPI) and checks the
 * description against the routes: its method, its path as a template ("/dlq/{id}/replay")
 * written into path (cap bytes), and whether it needs the token. False past the last route.
 */
TXO_API bool txo_admin_route(size_t i, const char **method, char *path, size_t cap, bool *token);

#endif
