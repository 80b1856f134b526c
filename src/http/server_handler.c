/*
 * The handler side of the HTTP server (server_internal.h): the handler threads, what a handler
 * sees of a request (struct txo_http_request and its accessors), and the response it fills in,
 * serialized into the bytes the I/O thread writes (refusals included).
 *
 * A handler thread takes a HANDLING connection from the work queue, owns it while the handler
 * runs, writes what the socket takes of the response at once (plain sockets only: SSL objects
 * stay on the I/O thread), and gives the connection back through the done queue.
 */
#include "core/common.h"

#include "http/server_internal.h"
#include "txo/metrics.h"
#include "txo/tracer.h"

#include <stdatomic.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- the request and the response, as handlers see them ---- */

/* What a handler sees of a request: NUL-terminated copies, decoded, none with a NUL inside. */
struct req_view {
    const char **names;
    const char **values;
    size_t n_fields;
    const char **arg_names;
    const char **arg_values;
    size_t n_args;
};

/* Header field names compare without case (RFC 9110 5.1); query argument names do not. */
static bool same_name(const char *a, const char *b, bool fold_case)
{
    return fold_case ? strcasecmp(a, b) == 0 : strcmp(a, b) == 0;
}

/* The value of the first of names[0..n) that is name, or NULL. */
static const char *first_value(const char **names, const char **values, size_t n, const char *name,
                               bool fold_case)
{
    for (size_t i = 0; i < n; i++)
        if (same_name(names[i], name, fold_case))
            return values[i];
    return NULL;
}

/* How many of names[0..n) are name. */
static size_t count_names(const char **names, size_t n, const char *name, bool fold_case)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += same_name(names[i], name, fold_case);
    return count;
}

const char *txo_http_request_header(const struct txo_http_request *req, const char *name)
{
    const struct req_view *v = req->conn;
    return first_value(v->names, v->values, v->n_fields, name, true);
}

size_t txo_http_request_header_count(const struct txo_http_request *req, const char *name)
{
    const struct req_view *v = req->conn;
    return count_names(v->names, v->n_fields, name, true);
}

const char *txo_http_request_arg(const struct txo_http_request *req, const char *name)
{
    const struct req_view *v = req->conn;
    return first_value(v->arg_names, v->arg_values, v->n_args, name, false);
}

size_t txo_http_request_arg_count(const struct txo_http_request *req, const char *name)
{
    const struct req_view *v = req->conn;
    return count_names(v->arg_names, v->n_args, name, false);
}

int txo_http_response_set(struct txo_http_response *resp, int status, const char *body)
{
    txo_free(resp->body);
    resp->body = NULL;
    resp->body_len = 0;
    resp->status = status;
    if (body == NULL)
        return 0;
    resp->body = txo_strdup(body);
    if (resp->body == NULL) {
        resp->status = 500;
        return TXO_ENOMEM;
    }
    resp->body_len = strlen(body);
    return 0;
}

void txo_http_response_take(struct txo_http_response *resp, int status, char *body, size_t len)
{
    txo_free(resp->body);
    resp->status = status;
    resp->body = body;
    resp->body_len = body != NULL ? len : 0;
}

/* ---- responses ---- */

static const char *reason_phrase(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 203:
        return "Non-Authoritative Information";
    case 204:
        return "No Content";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 412:
        return "Precondition Failed";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 415:
        return "Unsupported Media Type";
    case 422:
        return "Unprocessable Content";
    case 428:
        return "Precondition Required";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Status";
    }
}

/* A header the handler set must not be able to add lines of its own. */
static bool header_is_safe(const char *s)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return false;
    return true;
}

/*
 * Serializes a response into one buffer (head and body: one write, no Nagle delay). Returns
 * the buffer (txo_free) and its length, or NULL when out of memory.
 */
char *txo__http_serialize(const struct txo_http_response *r, bool head_only, bool close,
                          bool http10_keep_alive, size_t *len)
{
    int status = r->status >= 100 && r->status <= 999 ? r->status : 500;
    bool bodiless = status < 200 || status == 204 || status == 304;
    const char *ctype = r->content_type != NULL ? r->content_type : "application/json";
    size_t body_len = bodiless ? 0 : r->body_len;
    char date[64];
    struct tm tm;
    time_t now = time(NULL);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&now, &tm));

    char head[512 + sizeof(r->header_name) + sizeof(r->header_value)];
    int n = snprintf(head, sizeof(head), "HTTP/1.1 %d %s\r\nDate: %s\r\n", status,
                     reason_phrase(status), date);
    if (!bodiless)
        n += snprintf(head + n, sizeof(head) - (size_t)n,
                      "Content-Type: %s\r\nContent-Length: %zu\r\n",
                      header_is_safe(ctype) ? ctype : "application/octet-stream", body_len);
    if (r->retry_after_s > 0)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "Retry-After: %u\r\n", r->retry_after_s);
    if (r->header_name[0] != '\0' && memchr(r->header_name, '\0', sizeof(r->header_name)) &&
        memchr(r->header_value, '\0', sizeof(r->header_value)) && header_is_safe(r->header_name) &&
        header_is_safe(r->header_value))
        n += snprintf(head + n, sizeof(head) - (size_t)n, "%s: %s\r\n", r->header_name,
                      r->header_value);
    if (close)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "Connection: close\r\n");
    else if (http10_keep_alive)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "Connection: keep-alive\r\n");
    n += snprintf(head + n, sizeof(head) - (size_t)n, "\r\n");

    size_t send_body = head_only ? 0 : body_len;
    char *buf = txo_malloc((size_t)n + send_body);
    if (buf == NULL)
        return NULL;
    memcpy(buf, head, (size_t)n);
    if (send_body > 0)
        memcpy(buf + n, r->body, send_body);
    *len = (size_t)n + send_body;
    return buf;
}

/* A refusal's body: {"error":code,"message":text}; both are static ASCII without quotes. */
char *txo__http_refusal_body(const struct txo__http_refusal *why)
{
    size_t cap = strlen(why->error) + strlen(why->message) + 32;
    char *body = txo_malloc(cap);
    if (body != NULL)
        snprintf(body, cap, "{\"error\":\"%s\",\"message\":\"%s\"}", why->error, why->message);
    return body;
}
/* ---- handler threads ---- */

/* Builds the handler's view of the request in one allocation (txo_free). NULL and *why set
 * when the target does not decode. */
static void *build_view(const struct conn *c, struct txo_http_request *req,
                        struct txo__http_refusal *why)
{
    const struct txo__http_head *h = &c->head;
    size_t n_args_max = 0;
    for (size_t i = 0; i < h->query.len; i++)
        n_args_max += h->query.p[i] == '&';
    n_args_max += h->query.len > 0;
    size_t ptrs = 2 * h->n_fields + 2 * n_args_max;
    size_t text = h->method.len + h->path.len + 2 + h->query.len + 2 * n_args_max + 2;
    for (size_t i = 0; i < h->n_fields; i++)
        text += h->fields[i].name.len + h->fields[i].value.len + 2;
    struct req_view *v = txo_malloc(sizeof(*v) + ptrs * sizeof(const char *) + text);
    if (v == NULL) {
        *why = (struct txo__http_refusal){500, "out_of_memory", "out of memory"};
        return NULL;
    }
    const char **p = (const char **)(v + 1);
    v->names = p;
    v->values = p + h->n_fields;
    v->arg_names = p + 2 * h->n_fields;
    v->arg_values = v->arg_names + n_args_max;
    char *t = (char *)(p + ptrs);
    v->n_fields = h->n_fields;
    v->n_args = 0;

    memcpy(t, h->method.p, h->method.len);
    t[h->method.len] = '\0';
    req->method = t;
    t += h->method.len + 1;
    long plen = txo__http_pct_decode(h->path.p, h->path.len, false, t);
    if (plen < 0) {
        txo_free(v);
        *why = (struct txo__http_refusal){400, "bad_request",
                                          "malformed or NUL percent-escape in the path"};
        return NULL;
    }
    t[plen] = '\0';
    req->path = t;
    t += plen + 1;
    for (size_t i = 0; i < h->n_fields; i++) {
        memcpy(t, h->fields[i].name.p, h->fields[i].name.len);
        t[h->fields[i].name.len] = '\0';
        v->names[i] = t;
        t += h->fields[i].name.len + 1;
        memcpy(t, h->fields[i].value.p, h->fields[i].value.len);
        t[h->fields[i].value.len] = '\0';
        v->values[i] = t;
        t += h->fields[i].value.len + 1;
    }
    size_t i = 0;
    while (i < h->query.len) {
        size_t end = i;
        while (end < h->query.len && h->query.p[end] != '&')
            end++;
        if (end > i) {
            const char *pair = h->query.p + i;
            size_t plen2 = end - i;
            const char *eq = memchr(pair, '=', plen2);
            size_t nlen = eq != NULL ? (size_t)(eq - pair) : plen2;
            long dn = txo__http_pct_decode(pair, nlen, true, t);
            long dv =
                dn < 0 ? -1
                       : txo__http_pct_decode(eq != NULL ? eq + 1 : pair + nlen,
                                              eq != NULL ? plen2 - nlen - 1 : 0, true, t + dn + 1);
            if (dn < 0 || dv < 0) {
                txo_free(v);
                *why = (struct txo__http_refusal){400, "bad_request",
                                                  "malformed or NUL percent-escape in the query"};
                return NULL;
            }
            t[dn] = '\0';
            t[dn + 1 + dv] = '\0';
            v->arg_names[v->n_args] = t;
            v->arg_values[v->n_args] = t + dn + 1;
            v->n_args++;
            t += dn + dv + 2;
        }
        i = end + 1;
    }
    return v;
}

/* A method as a bounded label value. */
static const char *method_label(const struct txo__http_head *h)
{
    static const char *const known[] = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"};
    for (size_t i = 0; i < TXO_ARRAY_LEN(known); i++)
        if (h->method.len == strlen(known[i]) && memcmp(h->method.p, known[i], h->method.len) == 0)
            return known[i];
    return "other";
}

/* Counts and times one answer (opts.metrics). */
static void count_request(struct txo_http_server *srv, const struct txo__http_head *h,
                          const struct txo_http_response *resp, bool refused, int64_t t0_us)
{
    if (srv->m_requests == NULL)
        return;
    char status[8];
    snprintf(status, sizeof(status), "%d", resp->status);
    const char *route = refused ? "refused" : resp->route != NULL ? resp->route : "unmatched";
    const char *method = refused ? "other" : method_label(h);
    const char *counted[] = {method, route, status};
    txo_metric_inc(srv->m_requests, counted);
    const char *timed[] = {method, route};
    txo_metric_observe(srv->m_duration, timed, (double)(txo_monotonic_us() - t0_us) / 1e6);
}

/*
 * The request's span into *span: a child of the caller's traceparent when it sent one valid
 * header (and its tracestate when that came in one header), else a new trace, sampled as the
 * tracer says (not at all without one). *parent gets the caller's span id (zero: none).
 */
static void request_trace(const struct txo_http_server *srv, const struct txo_http_request *req,
                          struct txo_trace_ctx *span, uint8_t parent[8])
{
    struct txo_trace_ctx caller;
    bool one_state = txo_http_request_header_count(req, "tracestate") == 1;
    memset(parent, 0, 8);
    if (txo_http_request_header_count(req, "traceparent") == 1 &&
        txo_trace_parse(txo_http_request_header(req, "traceparent"),
                        one_state ? txo_http_request_header(req, "tracestate") : NULL, &caller)) {
        memcpy(parent, caller.span_id, 8);
        txo_trace_child(&caller, span);
        return;
    }
    txo_trace_new_root(false, span);
    if (srv->opts.tracer != NULL && txo_tracer_sample(srv->opts.tracer, span->trace_id))
        span->flags |= TXO_TRACE_SAMPLED;
}

/* Records the request's SERVER span (opts.tracer; only a sampled one is kept). */
static void record_span(const struct txo_http_server *srv, const struct txo_http_request *req,
                        const struct txo_http_response *resp, const struct txo_trace_ctx *span,
                        const uint8_t parent[8], int64_t start_us)
{
    if (srv->opts.tracer == NULL || !(span->flags & TXO_TRACE_SAMPLED))
        return;
    const char *route = resp->route != NULL ? resp->route : "unmatched";
    char name[160];
    snprintf(name, sizeof(name), "%s %s", req->method, route);
    struct txo_span_attr attrs[] = {{.key = "http.request.method", .str = req->method},
                                    {.key = "http.route", .str = route},
                                    {.key = "url.path", .str = req->path},
                                    {.key = "http.response.status_code", .num = resp->status}};
    struct txo_span s = {.ctx = *span,
                         .name = name,
                         .kind = TXO_SPAN_SERVER,
                         .start_us = start_us,
                         .end_us = txo_realtime_us(),
                         .status = resp->status >= 500 ? TXO_EUNAVAILABLE : 0,
                         .attrs = attrs,
                         .n_attrs = TXO_ARRAY_LEN(attrs)};
    memcpy(s.parent_span_id, parent, 8);
    txo_tracer_record(srv->opts.tracer, &s);
}

static void handle(struct txo_http_server *srv, struct conn *c)
{
    int64_t t0_us = txo_monotonic_us();
    const struct txo__http_head *h = &c->head;
    struct txo_http_request req = {0};
    struct txo_http_response resp = {.status = 500, .content_type = "application/json"};
    struct txo__http_refusal why;
    void *view = build_view(c, &req, &why);
    bool close = c->close_after;
    if (view == NULL) {
        req.method = NULL; /* they pointed into the freed view */
        req.path = NULL;
        resp.status = why.status;
        resp.body = txo__http_refusal_body(&why);
        resp.body_len = resp.body != NULL ? strlen(resp.body) : 0;
        close = true;
    } else {
        req.conn = view;
        if (h->body == TXO_HTTP_BODY_CHUNKED) {
            req.body = c->body;
            req.body_len = c->body_len;
        } else if (h->body == TXO_HTTP_BODY_LENGTH && h->content_length > 0) {
            /* The body is followed by the next request or by spare room: copy to terminate. */
            char *b = txo_malloc((size_t)h->content_length + 1);
            if (b != NULL) {
                memcpy(b, c->in + h->head_len, (size_t)h->content_length);
                b[h->content_length] = '\0';
            }
            req.body = b;
            req.body_len = (size_t)h->content_length;
        } else {
            req.body = "";
            req.body_len = 0;
        }
        if (req.body == NULL) {
            (void)txo_http_response_set(&resp, 500,
                                        "{\"error\":\"out_of_memory\",\"message\":\"out of "
                                        "memory\"}");
        } else {
            struct txo_trace_ctx span;
            uint8_t parent[8];
            request_trace(srv, &req, &span, parent);
            req.trace = &span;
            int64_t start_us = txo_realtime_us();
            const struct txo_trace_ctx *prev = txo_trace_set_current(&span);
            srv->handler(srv->arg, &req, &resp);
            txo_trace_set_current(prev);
            record_span(srv, &req, &resp, &span, parent, start_us);
        }
        if (h->body == TXO_HTTP_BODY_LENGTH && h->content_length > 0)
            txo_free((char *)req.body);
    }
    close = close || atomic_load(&srv->stopping);
    /* From the head, not from req: req points into the view, which a failed build freed. */
    bool head_only = h->method.len == 4 && memcmp(h->method.p, "HEAD", 4) == 0;
    c->resp =
        txo__http_serialize(&resp, head_only, close, h->version_minor == 0 && !close, &c->resp_len);
    count_request(srv, h, &resp, view == NULL, t0_us);
    c->resp_close = close;
    c->resp_off = 0;
    /*
     * The connection is this thread's until it is handed back: write what the socket takes at
     * once, so the answer does not wait for the I/O thread to be scheduled. The rest (and any
     * TLS record: SSL objects stay on the I/O thread) is written by the I/O thread.
     */
    if (c->resp != NULL && c->ssl == NULL && c->out_off == c->out_len) {
        ssize_t put = send(c->fd, c->resp, c->resp_len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (put > 0)
            c->resp_off = (size_t)put;
    }
    txo_free(resp.body);
    txo_free(view);
}

void txo__http_queue_push(struct conn_queue *q, struct conn *c)
{
    c->queue_next = NULL;
    if (q->tail != NULL)
        q->tail->queue_next = c;
    else
        q->head = c;
    q->tail = c;
}

struct conn *txo__http_queue_pop(struct conn_queue *q)
{
    struct conn *c = q->head;
    if (c == NULL)
        return NULL;
    q->head = c->queue_next;
    if (q->head == NULL)
        q->tail = NULL;
    c->queue_next = NULL;
    return c;
}

void *txo__http_worker_main(void *arg)
{
    struct txo_http_server *srv = arg;
    for (;;) {
        pthread_mutex_lock(&srv->mu);
        while (srv->work.head == NULL && !srv->quit)
            pthread_cond_wait(&srv->work_cv, &srv->mu);
        struct conn *c = txo__http_queue_pop(&srv->work);
        pthread_mutex_unlock(&srv->mu);
        if (c == NULL)
            return NULL;

        handle(srv, c);

        pthread_mutex_lock(&srv->mu);
        bool wake = srv->done.head == NULL; /* else the I/O thread is woken already */
        txo__http_queue_push(&srv->done, c);
        pthread_mutex_unlock(&srv->mu);
        if (wake) {
            uint64_t one = 1;
            ssize_t rc = write(srv->wake_fd, &one, sizeof(one));
            (void)rc;
        }
    }
}
