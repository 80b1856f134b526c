/*
 * A small HTTP/1.1 server for the txo daemons (the order API, the admin endpoints, /metrics).
 * It owns the protocol chores and nothing else:
 *   - a strict request parser: anything two HTTP implementations could frame differently
 *     (request smuggling), NUL and control bytes, oversized heads are refused with a JSON
 *     {"error","message"} response and the connection is closed (see docs/service.md),
 *   - keep-alive and pipelining, chunked request bodies, Expect: 100-continue,
 *   - limits: body size (413), head size (431/414), a deadline for the whole head and another
 *     for the whole body (408, however slowly the bytes trickle in), an idle timeout, a total
 *     and a per-client-address connection limit; when every connection slot is in use, the
 *     longest-idle keep-alive connection is closed to admit a new one, and at most a quarter
 *     of the slots may hold a request that is still being read (docs/service.md),
 *   - TLS (OpenSSL) when a certificate and a key are given,
 *   - graceful shutdown: stop accepting, let requests in flight finish, close.
 * Routing and everything about the content belong to the handler.
 *
 * Threading: one I/O thread (epoll) for every connection and a fixed pool of handler_threads
 * that run the handler, so a handler may block on the database. The handler is called from
 * many threads at once: it must be thread-safe.
 */
#ifndef TXO_HTTP_SERVER_H
#define TXO_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/err.h"
#include "txo/trace.h"

/*
 * A complete request (the body has been read), valid during the handler call. Every string
 * here and every header or argument value is NUL-terminated and contains no other NUL: the
 * server refuses a NUL byte in a head and a %00 in the path or the query (400), so strlen()
 * is the true length and no lookup can be cut short.
 */
struct txo_http_request {
    const char *method; /* "GET", "POST", ... */
    const char *path;   /* the URL path, percent-decoded, without the query string */
    const char *body;   /* NUL-terminated after body_len bytes (it may contain NULs); "" */
    size_t body_len;
    /* The request's span (W3C Trace Context): a child of the traceparent (and tracestate) the
     * caller sent in one header each, or a new trace when it sent none or one that is not
     * valid (never an error). It is the thread's current span during the handler call, so
     * log lines carry its ids; what the handler writes or calls on continues it. */
    const struct txo_trace_ctx *trace;
    void *conn; /* internal */
};

/* The first header of the request called name (case-insensitive), or NULL. */
TXO_API const char *txo_http_request_header(const struct txo_http_request *req, const char *name);
/* How many headers called name (case-insensitive) the request has: a caller that needs one
 * value refuses more than one instead of picking the first. */
TXO_API size_t txo_http_request_header_count(const struct txo_http_request *req, const char *name);
/* The first query-string argument called name (case-sensitive, decoded), or NULL. */
TXO_API const char *txo_http_request_arg(const struct txo_http_request *req, const char *name);
/* How many query-string arguments called name the request has. */
TXO_API size_t txo_http_request_arg_count(const struct txo_http_request *req, const char *name);

/* What the handler answers. The server frees body (txo_free) after sending it. */
struct txo_http_response {
    int status; /* default 500 */
    char *body; /* owned; NULL = empty */
    size_t body_len;
    const char *content_type; /* static string; default "application/json" */
    unsigned retry_after_s;   /* > 0: a Retry-After header */
    char header_name[32];     /* one more header when not "" (e.g. "ETag") */
    char header_value[96];
    /* The route template the request matched ("/orders/{id}"), a static string: the route
     * label of the request metrics (txo_http_server_opts.metrics). NULL: "unmatched". */
    const char *route;
};

/* Sets status and a copy of body (a JSON text unless content_type is changed). Returns 0 or
 * TXO_ENOMEM (then the response becomes a bodiless 500). */
TXO_API int txo_http_response_set(struct txo_http_response *resp, int status, const char *body);
/* Same with a body that is already allocated with txo_malloc: ownership moves to resp. */
TXO_API void txo_http_response_take(struct txo_http_response *resp, int status, char *body,
                                    size_t len);

/*
 * Answers status with the error shape of every txo endpoint, {"error":code,"message":message}.
 * The message may quote bytes a client or another service sent: every byte that is not part
 * of a well-formed UTF-8 character becomes '?' and the message is cut to 511 bytes, so the body
 * is always valid JSON. code is one of the caller's fixed names ("not_found"). Never fails: a
 * failed allocation leaves a 500 as txo_http_response_set() does.
 */
TXO_API void txo_http_response_error(struct txo_http_response *resp, int status, const char *code,
                                     const char *message);

/*
 * Answers a library error rc by what a client can do about it: 404 not_found (TXO_ENOTFOUND),
 * 422 validation_failed (TXO_EINVAL), 409 conflict (TXO_ESTATE), 503 unavailable with
 * Retry-After: 1 (TXO_ETIMEOUT, TXO_ECONNECT, TXO_ECONNLOST, TXO_EDEADLOCK, TXO_ELOCKTIMEOUT,
 * TXO_EUNAVAILABLE), anything else 500 internal, logged at error level. The message is err's
 * (txo_strerror(rc) when err holds none).
 */
TXO_API void txo_http_response_fail(struct txo_http_response *resp, int rc,
                                    const struct txo_error *err);

/* txo_http_response_json(), which answers a jansson document, is in txo/jansson.h. */

/*
 * Reads a route's numeric path parameter: true when path is prefix, a decimal id of
 * 0..INT64_MAX and then exactly suffix ("/orders/42/cancel" with "/orders/" and "/cancel"),
 * with the id in *id; false (and *id untouched) for anything else.
 */
TXO_API bool txo_http_path_id(const char *path, const char *prefix, const char *suffix,
                              int64_t *id);

typedef void (*txo_http_handler_fn)(void *arg, const struct txo_http_request *req,
                                    struct txo_http_response *resp);

struct txo_metrics;
struct txo_tracer;

struct txo_http_server_opts {
    const char *host;          /* IPv4 address to bind; default "127.0.0.1" */
    unsigned port;             /* 0 = any free port (see txo_http_server_port) */
    size_t max_body_bytes;     /* default 65536; larger: 413 */
    unsigned timeout_s;        /* idle keep-alive, and writing a response; default 30 */
    unsigned max_connections;  /* default 512; more: an idle one is closed, else 503 */
    unsigned header_timeout_s; /* the whole head, from accept or its first byte; default 10 */
    unsigned body_timeout_s;   /* the whole body, from the end of the head; default 30 */
    unsigned max_connections_per_client; /* per client IPv4 address; default 64; 0 = none */
    size_t max_header_bytes;             /* request line and headers; default 8192 */
    unsigned handler_threads;            /* the handler pool; default 32 */
    const char *tls_cert_file;           /* PEM certificate chain; with tls_key_file: HTTPS only */
    const char *tls_key_file;            /* PEM private key */
    /* NULL: none. Else the server counts every answer in txo_http_requests_total{method,route,
     * status} and times it in txo_http_request_duration_seconds{method,route} (from the
     * complete request to the answer ready to send): route is what the handler set in
     * txo_http_response.route ("unmatched" when none, "refused" for a request the HTTP layer
     * refused), method one of GET HEAD POST PUT PATCH DELETE OPTIONS or "other". */
    struct txo_metrics *metrics;
    /* NULL: none. Else every request's span is recorded (txo/tracer.h: SERVER, named
     * "<method> <route>", with its status) when it is sampled: the caller's decision, or the
     * tracer's ratio for a new trace. */
    struct txo_tracer *tracer;
};

TXO_API void txo_http_server_opts_init(struct txo_http_server_opts *opts);

struct txo_http_server;

/*
 * Starts serving in background threads. handler(arg, ...) answers every complete request
 * that passed the protocol checks. Errors: TXO_EINVAL (bad host, or a TLS certificate or key
 * that cannot be used: the message names the file), TXO_EIO (cannot bind: the message names
 * the address and the reason), TXO_ENOMEM.
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
