/*
 * A small HTTP/1.1 server for the txo daemons (the order API, the admin endpoints, /metrics),
 * on libmicrohttpd. It owns the protocol chores and nothing else:
 *   - keep-alive (responses are queued so that the connection stays open),
 *   - a request body limit (413 as soon as Content-Length or the received bytes exceed it),
 *   - an idle/slow-client timeout per connection,
 *   - graceful shutdown: stop accepting, let requests in flight finish, close.
 * Routing and everything about the content belong to the handler.
 *
 * Threading: one thread per connection (bounded by max_connections), so a handler may block
 * on the database. The handler is called from many threads at once: it must be thread-safe.
 */
#ifndef TXO_HTTP_SERVER_H
#define TXO_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/err.h"

/* A complete request (the body has been read), valid during the handler call. */
struct txo_http_request {
    const char *method; /* "GET", "POST", ... */
    const char *path;   /* the URL path, without the query string */
    const char *body;   /* NUL-terminated; "" when there is none */
    size_t body_len;
    void *conn; /* internal */
};

/* A header of the request (case-insensitive name), or NULL. */
TXO_API const char *txo_http_request_header(const struct txo_http_request *req, const char *name);
/* A query-string argument of the request, or NULL. */
TXO_API const char *txo_http_request_arg(const struct txo_http_request *req, const char *name);

/* What the handler answers. The server frees body (txo_free) after sending it. */
struct txo_http_response {
    int status; /* default 500 */
    char *body; /* owned; NULL = empty */
    size_t body_len;
    const char *content_type; /* static string; default "application/json" */
    unsigned retry_after_s;   /* > 0: a Retry-After header */
    char header_name[32];     /* one more header when not "" (e.g. "ETag") */
    char header_value[96];
};

/* Sets status and a copy of body (a JSON text unless content_type is changed). Returns 0 or
 * TXO_ENOMEM (then the response becomes a bodiless 500). */
TXO_API int txo_http_response_set(struct txo_http_response *resp, int status, const char *body);
/* Same with a body that is already allocated with txo_malloc: ownership moves to resp. */
TXO_API void txo_http_response_take(struct txo_http_response *resp, int status, char *body,
                                    size_t len);

typedef void (*txo_http_handler_fn)(void *arg, const struct txo_http_request *req,
                                    struct txo_http_response *resp);

struct txo_http_server_opts {
    const char *host;         /* IPv4 address to bind; default "127.0.0.1" */
    unsigned port;            /* 0 = any free port (see txo_http_server_port) */
    size_t max_body_bytes;    /* default 65536 */
    unsigned timeout_s;       /* idle or slow connection closed after; default 30 */
    unsigned max_connections; /* default 512 */
};

TXO_API void txo_http_server_opts_init(struct txo_http_server_opts *opts);

struct txo_http_server;

/*
 * Starts serving in background threads. handler(arg, ...) answers every complete request
 * that passed the protocol checks. Errors: TXO_EINVAL (bad host), TXO_EIO (cannot bind: the
 * message names the address and the reason), TXO_ENOMEM.
 */
TXO_API TXO_MUST_CHECK int txo_http_server_start(const struct txo_http_server_opts *opts,
                                                 txo_http_handler_fn handler, void *arg,
                                                 struct txo_http_server **out,
                                                 struct txo_error *err);

/* The port the server listens on. */
TXO_API unsigned txo_http_server_port(const struct txo_http_server *srv);

/* Stops accepting, waits for the requests in flight, closes every connection and frees srv.
 * NULL is a no-op. */
TXO_API void txo_http_server_stop(struct txo_http_server *srv);

#endif
