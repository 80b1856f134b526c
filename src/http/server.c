/*
 * The HTTP server of the daemons (include/txo/http_server.h) on libmicrohttpd.
 *
 * libmicrohttpd calls the access handler several times per request: once when the headers are
 * in, once per chunk of body, and once more with no data when the body is complete. We
 * collect the body into a per-request buffer (freed by the completion callback) and call the
 * user's handler on that last call only. Answering on the first call would make
 * libmicrohttpd close a keep-alive connection, so only refusals (413) do that on purpose.
 *
 * Bodies are read raw: libmicrohttpd's POST processor is not used (form parsing we do not
 * need, with a history of CVEs).
 */
#include "core/common.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <time.h>

struct txo_http_server {
    struct MHD_Daemon *daemon;
    txo_http_handler_fn handler;
    void *arg;
    size_t max_body_bytes;
    unsigned port;
    unsigned timeout_s;
    /* Requests whose headers arrived and whose completion was not notified yet. */
    pthread_mutex_t mu;
    pthread_cond_t drained;
    unsigned in_flight;
    atomic_bool stopping; /* responses then say Connection: close */
};

/* One request being read. */
struct request_ctx {
    char *body;
    size_t len;
    size_t cap;
    bool too_large; /* over the limit: the rest of the body is discarded */
    bool refused;   /* the 413 is queued */
};

void txo_http_server_opts_init(struct txo_http_server_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->host = "127.0.0.1";
    opts->port = 8080;
    opts->max_body_bytes = 65536;
    opts->timeout_s = 30;
    opts->max_connections = 512;
}

const char *txo_http_request_header(const struct txo_http_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *txo_http_request_arg(const struct txo_http_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
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

static enum MHD_Result queue(struct txo_http_server *srv, struct MHD_Connection *conn, int status,
                             const char *body, size_t len, const char *content_type,
                             unsigned retry_after_s, const char *hname, const char *hvalue)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (retry_after_s > 0) {
        char value[16];
        snprintf(value, sizeof(value), "%u", retry_after_s);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, value);
    }
    if (hname != NULL && hname[0] != '\0')
        MHD_add_response_header(r, hname, hvalue);
    if (atomic_load(&srv->stopping))
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result refuse_too_large(struct txo_http_server *srv, struct MHD_Connection *conn)
{
    char body[128];
    int n = snprintf(body, sizeof(body),
                     "{\"error\":\"payload_too_large\",\"message\":\"request body exceeds %zu "
                     "bytes\"}",
                     srv->max_body_bytes);
    return queue(srv, conn, MHD_HTTP_CONTENT_TOO_LARGE, body, (size_t)n, "application/json", 0,
                 NULL, NULL);
}

static bool append_body(struct request_ctx *ctx, const char *data, size_t n, size_t max)
{
    if (ctx->len + n > max)
        return false;
    if (ctx->len + n + 1 > ctx->cap) {
        size_t cap = ctx->cap == 0 ? 1024 : ctx->cap;
        while (cap < ctx->len + n + 1)
            cap *= 2;
        char *grown = txo_realloc(ctx->body, cap);
        if (grown == NULL)
            return false;
        ctx->body = grown;
        ctx->cap = cap;
    }
    memcpy(ctx->body + ctx->len, data, n);
    ctx->len += n;
    ctx->body[ctx->len] = '\0';
    return true;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    struct txo_http_server *srv = cls;
    struct request_ctx *ctx = *con_cls;

    if (ctx == NULL) {
        /* Headers only: set up, refuse an announced oversized body at once. */
        ctx = txo_calloc(1, sizeof(*ctx));
        if (ctx == NULL)
            return MHD_NO;
        *con_cls = ctx;
        pthread_mutex_lock(&srv->mu);
        srv->in_flight++;
        pthread_mutex_unlock(&srv->mu);
        const char *cl =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl != NULL) {
            char *end = NULL;
            errno = 0;
            unsigned long long announced = strtoull(cl, &end, 10);
            if (errno != 0 || end == cl || announced > srv->max_body_bytes) {
                ctx->too_large = true;
                ctx->refused = true;
                return refuse_too_large(srv, conn);
            }
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        /* libmicrohttpd takes no response in the middle of a body: discard the rest and
         * refuse on the last call. */
        if (!ctx->too_large && !append_body(ctx, upload_data, n, srv->max_body_bytes))
            ctx->too_large = true;
        return MHD_YES;
    }
    if (ctx->refused)
        return MHD_YES;
    if (ctx->too_large) {
        ctx->refused = true;
        return refuse_too_large(srv, conn);
    }

    struct txo_http_request req = {
        .method = method,
        .path = url,
        .body = ctx->body != NULL ? ctx->body : "",
        .body_len = ctx->len,
        .conn = conn,
    };
    struct txo_http_response resp = {.status = 500, .content_type = "application/json"};
    srv->handler(srv->arg, &req, &resp);
    enum MHD_Result ret =
        queue(srv, conn, resp.status, resp.body != NULL ? resp.body : "", resp.body_len,
              resp.content_type != NULL ? resp.content_type : "application/json",
              resp.retry_after_s, resp.header_name, resp.header_value);
    txo_free(resp.body);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    (void)toe;
    struct txo_http_server *srv = cls;
    struct request_ctx *ctx = *con_cls;
    if (ctx == NULL)
        return;
    txo_free(ctx->body);
    txo_free(ctx);
    *con_cls = NULL;
    pthread_mutex_lock(&srv->mu);
    if (--srv->in_flight == 0)
        pthread_cond_broadcast(&srv->drained);
    pthread_mutex_unlock(&srv->mu);
}

TXO_PRINTF(2, 0) static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    TXO_LOG(TXO_LOG_WARN, "http", "libmicrohttpd: %s", line);
}

int txo_http_server_start(const struct txo_http_server_opts *opts, txo_http_handler_fn handler,
                          void *arg, struct txo_http_server **out, struct txo_error *err)
{
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)opts->port);
    if (opts->port > 65535 || inet_pton(AF_INET, opts->host, &addr.sin_addr) != 1)
        return txo_error_set(err, TXO_EINVAL, "cannot listen on %s:%u: not an IPv4 address:port",
                             opts->host, opts->port);

    struct txo_http_server *srv = txo_calloc(1, sizeof(*srv));
    if (srv == NULL)
        return txo_error_set(err, TXO_ENOMEM, "HTTP server");
    srv->handler = handler;
    srv->arg = arg;
    srv->max_body_bytes = opts->max_body_bytes;
    srv->timeout_s = opts->timeout_s;
    pthread_mutex_init(&srv->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&srv->drained, &attr);
    pthread_condattr_destroy(&attr);

    /* Thread per connection: handlers may block on the database without stalling others. */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    errno = 0;
    srv->daemon = MHD_start_daemon(flags, (uint16_t)opts->port, NULL, NULL, on_request, srv,
                                   MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
                                   MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                   MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)opts->timeout_s,
                                   MHD_OPTION_CONNECTION_LIMIT, (unsigned int)opts->max_connections,
                                   MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_END);
    if (srv->daemon == NULL) {
        int saved = errno;
        pthread_cond_destroy(&srv->drained);
        pthread_mutex_destroy(&srv->mu);
        txo_free(srv);
        return txo_error_set(err, TXO_EIO, "cannot listen on %s:%u: %s", opts->host, opts->port,
                             saved != 0 ? strerror(saved) : "libmicrohttpd refused to start");
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info != NULL ? info->port : opts->port;
    *out = srv;
    return 0;
}

unsigned txo_http_server_port(const struct txo_http_server *srv)
{
    return srv->port;
}

void txo_http_server_stop(struct txo_http_server *srv)
{
    if (srv == NULL)
        return;
    /* Stop accepting first; MHD_stop_daemon then joins the connection threads, each of which
     * finishes the request it is handling. */
    MHD_socket listener = MHD_quiesce_daemon(srv->daemon);
    if (listener != MHD_INVALID_SOCKET)
        close(listener);
    /* MHD_stop_daemon shuts every socket down at once: first let the requests in flight
     * finish (bounded by the connection timeout); keep-alive clients are told to leave. */
    atomic_store(&srv->stopping, true);
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += srv->timeout_s > 0 ? srv->timeout_s : 30;
    pthread_mutex_lock(&srv->mu);
    while (srv->in_flight > 0 &&
           pthread_cond_timedwait(&srv->drained, &srv->mu, &deadline) != ETIMEDOUT)
        ;
    pthread_mutex_unlock(&srv->mu);
    MHD_stop_daemon(srv->daemon);
    pthread_cond_destroy(&srv->drained);
    pthread_mutex_destroy(&srv->mu);
    txo_free(srv);
}
