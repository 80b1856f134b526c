/*
 * The operator's API of a txo service: the HTTP endpoints that look into and repair what the
 * library keeps in the database (the outbox, its dead letters and parked aggregates, sagas,
 * the registered processes), and the dashboard that shows them. Every service built on libtxo
 * shares those tables, so each mounts this instead of writing its own.
 *
 * The routes, with their answers (every error body is {"error":"<code>","message":"..."}):
 *
 *   with the token (Authorization: Bearer <token> when opts.token is set, else 401):
 *   GET  /outbox/stats        counts per status, the oldest pending age, the events waiting
 *                             for a retry and the age of the oldest due one.
 *   GET  /outbox/parked       aggregates held back by a failed event (relay ordering
 *                             aggregate), oldest first (?limit= 1..1000, default 50).
 *   GET  /dlq                 dead letters (?after_id= 0..2^63-1, ?limit= 1..1000, default 50)
 *                             and next_after_id, the cursor of the next page.
 *   GET  /dlq/events          one entry per dead event (its letters grouped: a replay that
 *                             fails again adds one), with its newest letter, its replays and
 *                             its event's status now; skipped and published ones left out
 *                             (?after_id=, ?limit= as /dlq; the cursor is the newest letter's id).
 *   POST /dlq/{id}/replay     the dead letter's event back to PENDING; 404, 409 not FAILED.
 *   POST /dlq/{id}/skip       the dead letter's event given up (SKIPPED); 404, 409 not FAILED.
 *   GET  /sagas/{id}          the saga and its steps with their times and deadlines, and its
 *                             compensation plan; 404.
 *   POST /sagas/{id}/retry    retries a COMPENSATION_FAILED saga now, through the definition
 *                             of its type in opts.sagas; 409 other states or a type not given.
 *   GET  /sagas               counts per status, and every COMPENSATION_FAILED saga and the
 *                             stuck ones, each with its failing step and error.
 *   GET  /processes           the daemons registered in txo_processes (txo/registry.h): alive
 *                             or stale, with their circuit breaker states.
 *   GET  /search?q=           the saga whose id is q, and what each of opts.finders finds for q
 *                             (q: 1..200 bytes; 400 otherwise).
 *   without it (a browser cannot send the header when it navigates; the page holds no data,
 *   asks for the token and sends it on every call it makes):
 *   GET  /ui, /ui/app.js, /ui/chart.js, /ui/pages.js, /ui/app.css   the dashboard.
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

/*
 * A search the service adds to the dashboard's search box, for its own records that the
 * library knows nothing about (the order service finds an order by id). The dashboard shows a
 * record as a page of its own, and links the sagas it names to their saga pages.
 */
struct txo_admin_finder {
    /* What it finds, one lowercase word ("order"): shown on the page. Borrowed. */
    const char *kind;
    /*
     * Looks query up (the search box's text, 1..200 bytes, as typed) over db, a pooled
     * connection in autocommit lent for the call. A hit: *json is a JSON object, text the
     * caller frees with txo_free(), and 0. No such record: TXO_ENOTFOUND (*json untouched).
     * Any other error fails the whole search with its status (txo_http_response_fail()).
     * Called from any handler thread, several at once. Every member of the object is optional:
     *   {"title": "Order 42", "status": "CONFIRMED",
     *    "fields": {"name": value, ...},
     *    "tables": [{"title": "items", "columns": ["sku", ...], "rows": [["pen", ...], ...]}],
     *    "sagas": ["<saga id>", ...]}
     * Values are shown as text, never as HTML.
     */
    int (*find)(void *arg, struct txo_db *db, const char *query, char **json,
                struct txo_error *err);
    void *arg;
};

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
    /* GET /search: the service's finders, asked in this order after the saga lookup; borrowed,
     * they must outlive the admin. None: the search finds sagas only. */
    const struct txo_admin_finder *finders;
    size_t n_finders;
};

/* Fills opts with the defaults above: no token, no sagas. Never fails. */
TXO_API void txo_admin_opts_init(struct txo_admin_opts *opts);

struct txo_admin;

/*
 * Makes the admin API over pool (borrowed: it must outlive the admin). Errors: TXO_EINVAL (a
 * saga definition without a type, or two of one type; a finder without a kind or a find),
 * TXO_ENOMEM. Free with txo_admin_free().
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
