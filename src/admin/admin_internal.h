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

/* The signature of every route's handler; db is NULL for a route that needs none. */
typedef void txo__admin_route_fn(struct txo_admin *a, struct txo_db *db,
                                 const struct route_match *m, const struct txo_http_request *req,
                                 struct txo_http_response *resp);

/*
 * Loads the saga whose id is id (free info with txo_saga_info_release()) and finds its
 * definition among the service's (*def NULL: not a type this service runs). False when it
 * could not be loaded: resp then says why (404 for no such saga).
 */
bool txo__admin_load_saga(struct txo_admin *a, struct txo_db *db, const char *id,
                          struct txo_saga_info *info, const struct txo_saga_def **def,
                          struct txo_http_response *resp);

/* A decimal integer in lo..hi and nothing else; out of range (even past int64) is refused,
 * never clamped. */
bool txo__admin_parse_int64(const char *text, int64_t lo, int64_t hi, int64_t *out);

/*
 * A paged listing's ?after_id= (0..2^63-1, 0 when not given: from the start) and ?limit=
 * (1..1000, 50 when not given), each at most once. False when they are bad: resp then answers
 * 400 saying why.
 */
bool txo__admin_page_args(const struct txo_http_request *req, struct txo_http_response *resp,
                          int64_t *after_id, int64_t *max);

/* True when text (NUL-terminated) has the shape of a saga id: 1..36 hex digits and dashes. */
bool txo__admin_is_saga_id(const char *text, size_t len);

/* admin_pages.c: GET /dlq/events, GET /sagas/{id}, GET /search. */
txo__admin_route_fn txo__admin_list_dead_events;
txo__admin_route_fn txo__admin_get_saga;
txo__admin_route_fn txo__admin_search;

#endif
