/*
 * An HTTP client for the external services a saga step calls (payment, shipment) and for the
 * webhook publisher, on libcurl. It exists so every caller gets the same three things right:
 * timeouts on every call, one kept-alive connection reused across calls, and one mapping from
 * "what went wrong" to a txo error code that says whether a retry can help.
 *
 * Error mapping (txo_http_post_json, txo_http_get, each request of txo_http_post_json_many):
 *
 *   outcome                                            code               resp filled
 *   2xx                                                0                  yes
 *   HTTP 5xx, 429 Too Many Requests, 408 Timeout       TXO_EUNAVAILABLE   yes (status, body)
 *   any other 4xx (402 declined, 422 refused, ...)     TXO_EBUSINESS      yes (status, body)
 *   1xx or 3xx (redirects are not followed)            TXO_EIO            yes (status, body)
 *   no answer within timeout_ms (or connect_timeout_ms)  TXO_ETIMEOUT       status 0
 *   cannot connect, DNS failure, connection reset,
 *   empty reply, any other transfer failure            TXO_EUNAVAILABLE   status 0
 *   response body larger than max_response_bytes       TXO_EIO            status, no body
 *   bad URL or scheme other than http/https            TXO_EINVAL         status 0
 *   a header value with CR or LF (not sent at all)     TXO_EINVAL         status 0
 *
 * TXO_EUNAVAILABLE and TXO_ETIMEOUT are transient (txo_err_is_transient): retry with backoff,
 * with the same Idempotency-Key. TXO_EBUSINESS is the service's final answer: compensate, do
 * not retry. A timeout has an unknown outcome: the service may have acted, which is why every
 * POST should carry an Idempotency-Key. Error messages read "POST <url>: HTTP 503: <first 200
 * bytes of the body>" or "POST <url>: timed out after 5000 ms"; user:password in a URL is shown
 * as ***. Messages do not depend on timing, so equal failures have equal messages.
 *
 * Timeouts: connect_timeout_ms bounds the TCP (and TLS) connect; timeout_ms bounds the whole
 * call, connect included, so no call ever takes longer than timeout_ms: a service that hangs
 * costs its caller timeout_ms, never more. In txo_http_post_json_many the limits apply to each
 * request from the moment it starts, so a batch with every request in flight at once ends
 * within timeout_ms too.
 *
 * Keep-alive: a client owns one connection cache (a libcurl multi handle) that keeps the
 * connections to each host open between calls, shared by single and batched calls: 100 calls
 * to one service open 1 connection, a batch of 20 opens 20 and the next batch of 20 reuses
 * them (txo_http_client_connections counts them). A connection the server closed while idle is
 * detected and replaced by libcurl.
 *
 * Thread-safety: a client is NOT thread-safe: use one per thread (a client may move between
 * threads when the caller synchronises). Clients in different threads are independent; the
 * process-wide libcurl initialisation runs once, on the first txo_http_client_new. A batch
 * runs in the calling thread (no thread is started). Signals are never used
 * (CURLOPT_NOSIGNAL), so timeouts work in threaded programs.
 */
#ifndef TXO_HTTP_CLIENT_H
#define TXO_HTTP_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/err.h"

struct txo_http_client_opts {
    int64_t connect_timeout_ms; /* TCP/TLS connect; default 2000 */
    int64_t timeout_ms;         /* whole call, connect included; default 5000 */
    const char *user_agent;     /* copied; default "txo" */
    size_t max_response_bytes;  /* longer bodies fail with TXO_EIO; default 1 MiB */
};

/* Sets the defaults above. Never fails. */
TXO_API void txo_http_client_opts_init(struct txo_http_client_opts *opts);

struct txo_http_client;

/*
 * Creates a client (opts NULL: the defaults). *out is written only on success; free it with
 * txo_http_client_free(). Errors: TXO_EINVAL (a timeout <= 0, max_response_bytes 0),
 * TXO_ENOMEM, TXO_EIO (libcurl could not be initialised).
 */
TXO_API TXO_MUST_CHECK int txo_http_client_new(const struct txo_http_client_opts *opts,
                                               struct txo_http_client **out, struct txo_error *err);

/* Closes the client's connections and frees it. NULL is a no-op. */
TXO_API void txo_http_client_free(struct txo_http_client *c);

/* New connections the client has opened so far (1 after any number of kept-alive calls to a
 * single service). */
TXO_API uint64_t txo_http_client_connections(const struct txo_http_client *c);

/*
 * What the service answered. Initialise with txo_http_client_response_init() (or zero it);
 * every call that fills it releases what it held before, so one can be reused in a loop.
 */
struct txo_http_client_response {
    long status; /* HTTP status; 0 when no response arrived */
    char *body;  /* NUL-terminated (body_len excludes the NUL), owned; NULL when empty */
    size_t body_len;
    double total_s; /* duration of the call, seconds (also on failure) */
};

/* Sets resp to "no response". Never fails. */
TXO_API void txo_http_client_response_init(struct txo_http_client_response *resp);

/* Frees resp->body and sets resp to "no response". */
TXO_API void txo_http_client_response_release(struct txo_http_client_response *resp);

/*
 * POSTs body[0..len) to url with Content-Type: application/json and Accept: application/json.
 * idempotency_key (NULL: none) is sent as the Idempotency-Key header. extra_headers is NULL or
 * a NULL-terminated array of "Name: value" strings (an Authorization header, say; they are
 * wiped from memory after the call). resp (may be NULL: the body is discarded) is filled as
 * the table at the top says. Returns 0 for a 2xx answer, else the code in that table with the
 * detail in err.
 */
TXO_API TXO_MUST_CHECK int txo_http_post_json(struct txo_http_client *c, const char *url,
                                              const char *idempotency_key,
                                              const char *const *extra_headers, const char *body,
                                              size_t len, struct txo_http_client_response *resp,
                                              struct txo_error *err);

/* One request of txo_http_post_json_many(): what to send, and (out) what happened. */
struct txo_http_client_request {
    const char *url;
    const char *idempotency_key; /* NULL: none */
    /* This request's own "Name: value" lines (its traceparent, say), sent after the call's
     * extra_headers; NULL-terminated, NULL: none. */
    const char *const *headers;
    const char *body;
    size_t len;
    /* out */
    int rc;                               /* what txo_http_post_json() would have returned */
    struct txo_error err;                 /* its detail when rc != 0 (reset by the call) */
    struct txo_http_client_response resp; /* initialise it like any response; may be reused */
};

/*
 * POSTs every request of reqs[0..n), at most max_parallel (0 = all) in flight at once, on the
 * client's own connections (kept alive between calls, as for single calls). Each request gets
 * the same headers (extra_headers as for txo_http_post_json, sent with every request),
 * timeouts and error mapping as txo_http_post_json() (the table at the top), in reqs[k].rc /
 * err / resp: bad input in one request (a key with CR or LF, a bad URL, body NULL with len > 0)
 * fails that request alone with TXO_EINVAL, and the others are still sent. Requests are
 * started in the order of reqs; each one that ends hands its place to the next.
 *
 * With max_parallel >= n the whole call takes at most about timeout_ms; with fewer, up to
 * ceil(n / max_parallel) times that. The client keeps one libcurl handle per request in
 * flight, as many as the widest call so far, and one connection each to reuse.
 *
 * Returns:
 *   0                every request has its own outcome in rc (look at each one);
 *   TXO_EINVAL       c or reqs is NULL (n > 0): nothing sent, reqs untouched;
 *   TXO_ENOMEM       the handles could not be made: nothing sent, every rc is TXO_ENOMEM;
 *   TXO_EIO          libcurl's multi interface failed: every rc is set, the requests in
 *                    flight at that moment with TXO_EUNKNOWN (they may have reached the
 *                    service), those not started yet with TXO_EIO (not sent); when it failed
 *                    before the first request started, nothing was sent.
 * n == 0 returns 0 at once. err (may be NULL) has the detail of a non-zero return.
 */
TXO_API TXO_MUST_CHECK int txo_http_post_json_many(struct txo_http_client *c,
                                                   struct txo_http_client_request *reqs, size_t n,
                                                   const char *const *extra_headers,
                                                   unsigned max_parallel, struct txo_error *err);

/* GETs url (for admin calls and tests). Same results and errors as txo_http_post_json. */
TXO_API TXO_MUST_CHECK int txo_http_get(struct txo_http_client *c, const char *url,
                                        const char *const *extra_headers,
                                        struct txo_http_client_response *resp,
                                        struct txo_error *err);

#endif
