/*
 * What the admin API's files share (src/admin/admin.c has the routes and the dispatch,
 * admin_pages.c the endpoints behind the dashboard's pages). Private to the library.
 */
#ifndef TXO_ADMIN_INTERNAL_H
#define TXO_ADMIN_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "txo/admin.h"

struct txo_admin {
    struct txo_admin_opts opts;
    char *token; /* opts.token copied; NULL: no token asked */
    struct txo_db_pool *pool;
};

/* What a route's path carried: a dead letter's id, or a saga id. */
struct route_match {
    int64_t id;
    char saga_id[TXO_SAGA_ID_LEN];
};

/* One request to a route, as its handler gets it. */
struct admin_call {
    struct txo_admin *a;
    struct txo_db
        *db; /* the pooled connection lent for the call; NULL for a route that needs none */
    struct route_match m;
    const struct txo_http_request *req;
    struct txo_http_response *resp;
    struct txo_error err; /* initialised: what went wrong, for the answer */
};

/* The signature of every route's handler: it answers in c->resp. */
typedef void txo__admin_route_fn(struct admin_call *c);

/*
 * Loads the saga whose id the path carried (free info with txo_saga_info_release()) and finds its
 * definition among the service's (*def NULL: not a type this service runs). False when it
 * could not be loaded: resp then says why (404 for no such saga).
 */
bool txo__admin_load_saga(struct admin_call *c, struct txo_saga_info *info,
                          const struct txo_saga_def **def);

/* A decimal integer in lo..hi and nothing else; out of range (even past int64) is refused,
 * never clamped. */
bool txo__admin_parse_int64(const char *text, int64_t lo, int64_t hi, int64_t *out);

/*
 * A paged listing's ?after_id= (0..2^63-1, 0 when not given: from the start) and ?limit=
 * (1..1000, 50 when not given), each at most once. False when they are bad: resp then answers
 * 400 saying why.
 */
bool txo__admin_page_args(struct admin_call *c, int64_t *after_id, int64_t *max);

/* True when text (NUL-terminated) has the shape of a saga id: 1..36 hex digits and dashes. */
bool txo__admin_is_saga_id(const char *text, size_t len);

/* admin_pages.c: GET /dlq/events, GET /sagas/{id}, GET /search. */
txo__admin_route_fn txo__admin_list_dead_events;
txo__admin_route_fn txo__admin_get_saga;
txo__admin_route_fn txo__admin_search;

#endif
