/*
 * The HTTP/1.1 server of the daemons (include/txo/http_server.h): one epoll I/O thread and a
 * fixed pool of handler threads.
 *
 * The I/O thread owns every connection: it accepts, reads, parses request heads with the
 * strict parser (parse.h), reads bodies, enforces the deadlines and the connection limits,
 * and writes responses. A complete request is handed to the handler pool, because handlers
 * block on the database; while a handler owns a connection the I/O thread does not touch it
 * (it is not even in the epoll set), and the handler gives it back through the done queue
 * with the serialized response. Nothing but the parser decides how a byte stream is framed.
 * Which connections hold the max_connections slots, and which one gives its slot up to a new
 * client, is the policy of server_slots.c.
 *
 * The files of the server, one job each, are listed in server_internal.h.
 *
 * Deadlines, checked by a sweep every TICK_MS, run for the whole phase, not per read, so a
 * client that trickles one byte a second gets no more time than one that sends nothing:
 *   head     from accept (or from the first byte of a keep-alive request): header_timeout_s
 *   body     from the end of the head: body_timeout_s
 *   idle     between keep-alive requests, and writing a response: timeout_s
 *   linger   after a refusal, reading and discarding what the client still sends: LINGER_MS
 *            (server_conn.c)
 *
 * Every refusal (400, 408, 413, 414, 431, 501, 505, and 503 to a request cut by a stop) is a
 * JSON {"error","message"} with Connection: close (and Retry-After: 1 on the 503), after which
 * the write side is shut down and the connection is closed: the bytes after a refused head
 * could be anything, so they are never read as a request.
 *
 * TLS (OpenSSL) runs on the same loop with non-blocking SSL objects: SSL_read performs the
 * handshake, which therefore counts against the head deadline.
 */
#include "core/common.h"

#include "http/server_internal.h"
#include "txo/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

enum {
    TICK_MS = 100, /* deadline sweep period */
    MAX_EVENTS = 64,
};

/* ---- options ---- */

void txo_http_server_opts_init(struct txo_http_server_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->host = "127.0.0.1";
    opts->port = 8080;
    opts->max_body_bytes = 65536;
    opts->timeout_s = 30;
    opts->max_connections = 512;
    opts->header_timeout_s = 10;
    opts->body_timeout_s = 30;
    opts->max_connections_per_client = 64;
    opts->max_header_bytes = 8192;
    opts->handler_threads = 32;
}

/* ---- the I/O thread ---- */

/*
 * Stop: no new connections, no new requests; responses in flight are still written. A client
 * that was sending a request gets 503 with Retry-After (it can go to another instance at once),
 * one between requests only the close it must expect of any keep-alive connection.
 */
static void begin_stop(struct txo_http_server *srv)
{
    if (srv->listen_fd >= 0) {
        epoll_ctl(srv->epoll_fd, EPOLL_CTL_DEL, srv->listen_fd, NULL);
        close(srv->listen_fd);
        srv->listen_fd = -1;
    }
    struct conn *next;
    for (struct conn *c = srv->conns; c != NULL; c = next) {
        next = c->next;
        if ((c->state == CONN_HEAD && c->in_len > 0) || c->state == CONN_BODY)
            (void)txo__http_conn_refuse(c, 503, "shutting_down",
                                        "the server is stopping; retry on another instance");
        else if (c->state == CONN_IDLE || c->state == CONN_HEAD || c->state == CONN_LINGER)
            txo__http_conn_close(c);
        else if (c->state == CONN_WRITING)
            c->close_after = true;
        /* HANDLING: the handler thread owns it and sees stopping itself. */
    }
}

static void *io_main(void *arg)
{
    struct txo_http_server *srv = arg;
    /* TLS writes go through write(2): a peer that left must not kill the process. */
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);

    struct epoll_event evs[MAX_EVENTS];
    int64_t next_sweep = txo_monotonic_ms() + TICK_MS;
    int64_t stop_deadline = 0;
    for (;;) {
        int n = epoll_wait(srv->epoll_fd, evs, MAX_EVENTS, TICK_MS);
        bool listen_ready = false;
        for (int i = 0; i < n; i++) {
            void *tag = evs[i].data.ptr;
            if (tag == &srv->tags[0])
                listen_ready = true;
            else if (tag == &srv->tags[1])
                txo__http_take_done(srv);
            else
                txo__http_conn_event(tag, evs[i].events);
        }
        txo__http_admit(srv, listen_ready);
        int64_t now = txo_monotonic_ms();
        if (now >= next_sweep) {
            txo__http_sweep(srv, now);
            next_sweep = now + TICK_MS;
        }
        if (atomic_load(&srv->stopping)) {
            if (stop_deadline == 0) {
                begin_stop(srv);
                unsigned s = srv->opts.timeout_s > 0 ? srv->opts.timeout_s : 30;
                stop_deadline = now + (int64_t)s * 1000;
            }
            if (srv->n_conns == 0 || now >= stop_deadline)
                break;
        }
    }
    return NULL;
}

/* ---- start and stop ---- */

static int tls_setup(struct txo_http_server *srv, const struct txo_http_server_opts *opts,
                     struct txo_error *err)
{
    bool cert = opts->tls_cert_file != NULL && opts->tls_cert_file[0] != '\0';
    bool key = opts->tls_key_file != NULL && opts->tls_key_file[0] != '\0';
    if (!cert && !key)
        return 0;
    if (cert != key)
        return txo_error_set(err, TXO_EINVAL, "TLS needs both a certificate and a key file");
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL)
        return txo_error_set(err, TXO_ENOMEM, "TLS context");
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    const char *what = NULL;
    const char *file = NULL;
    if (SSL_CTX_use_certificate_chain_file(ctx, opts->tls_cert_file) != 1) {
        what = "certificate";
        file = opts->tls_cert_file;
    } else if (SSL_CTX_use_PrivateKey_file(ctx, opts->tls_key_file, SSL_FILETYPE_PEM) != 1) {
        what = "key";
        file = opts->tls_key_file;
    } else if (SSL_CTX_check_private_key(ctx) != 1) {
        what = "key (it does not match the certificate)";
        file = opts->tls_key_file;
    }
    if (what != NULL) {
        char reason[256];
        ERR_error_string_n(ERR_get_error(), reason, sizeof(reason));
        ERR_clear_error();
        SSL_CTX_free(ctx);
        return txo_error_set(err, TXO_EINVAL, "cannot use the TLS %s %s: %s", what, file, reason);
    }
    srv->tls = ctx;
    return 0;
}

static void free_server(struct txo_http_server *srv)
{
    while (srv->conns != NULL)
        txo__http_conn_close(srv->conns);
    if (srv->listen_fd >= 0)
        close(srv->listen_fd);
    if (srv->epoll_fd >= 0)
        close(srv->epoll_fd);
    if (srv->wake_fd >= 0)
        close(srv->wake_fd);
    SSL_CTX_free(srv->tls);
    pthread_cond_destroy(&srv->work_cv);
    pthread_mutex_destroy(&srv->mu);
    txo_free(srv->workers);
    txo_free(srv);
}

static void join_workers(struct txo_http_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    srv->quit = true;
    pthread_cond_broadcast(&srv->work_cv);
    pthread_mutex_unlock(&srv->mu);
    for (unsigned i = 0; i < srv->n_workers; i++)
        pthread_join(srv->workers[i], NULL);
    srv->n_workers = 0;
}

/* The request families in opts.metrics (the ones already there when another server made
 * them). */
static int register_metrics(struct txo_http_server *srv, struct txo_error *err)
{
    struct txo_metrics *reg = srv->opts.metrics;
    if (reg == NULL)
        return 0;
    static const char *const counted[] = {"method", "route", "status"};
    static const char *const timed[] = {"method", "route"};
    static const double buckets[] = {.0005, .001, .0025, .005, .01, .025, .05,
                                     .1,    .25,  .5,    1,    2.5, 5,    10};
    srv->m_requests = txo_metrics_register(reg, TXO_METRIC_COUNTER, "txo_http_requests_total",
                                           "HTTP requests answered, by method, route template "
                                           "and status.",
                                           3, counted, NULL, 0, err);
    srv->m_duration =
        srv->m_requests == NULL
            ? NULL
            : txo_metrics_register(reg, TXO_METRIC_HISTOGRAM, "txo_http_request_duration_seconds",
                                   "From a complete request to its answer ready "
                                   "to send, by method and route template.",
                                   2, timed, buckets, TXO_ARRAY_LEN(buckets), err);
    if (srv->m_duration == NULL) {
        srv->m_requests = NULL;
        return err != NULL && err->code != 0 ? err->code : TXO_ENOMEM;
    }
    return 0;
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
    srv->opts = *opts;
    srv->opts.host = NULL;
    int mrc = register_metrics(srv, err);
    if (mrc != 0) {
        txo_free(srv);
        return mrc;
    }
    if (srv->opts.max_header_bytes < 256)
        srv->opts.max_header_bytes = 256;
    if (srv->opts.handler_threads == 0)
        srv->opts.handler_threads = 1;
    if (srv->opts.header_timeout_s == 0)
        srv->opts.header_timeout_s = 10;
    if (srv->opts.body_timeout_s == 0)
        srv->opts.body_timeout_s = 30;
    if (srv->opts.timeout_s == 0)
        srv->opts.timeout_s = 30;
    srv->max_reading = srv->opts.max_connections / 4 > 0 ? srv->opts.max_connections / 4 : 1;
    srv->handler = handler;
    srv->arg = arg;
    srv->listen_fd = -1;
    srv->epoll_fd = -1;
    srv->wake_fd = -1;
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->work_cv, NULL);

    int rc = tls_setup(srv, opts, err);
    if (rc != 0)
        goto fail;
    srv->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (srv->listen_fd < 0 ||
        setsockopt(srv->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(srv->listen_fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
        listen(srv->listen_fd, 511) != 0) {
        rc = txo_error_set(err, TXO_EIO, "cannot listen on %s:%u: %s", opts->host, opts->port,
                           strerror(errno));
        goto fail;
    }
    socklen_t sl = sizeof(addr);
    getsockname(srv->listen_fd, (struct sockaddr *)&addr, &sl);
    srv->port = ntohs(addr.sin_port);
    srv->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    srv->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event le = {.events = EPOLLIN, .data.ptr = &srv->tags[0]};
    struct epoll_event we = {.events = EPOLLIN, .data.ptr = &srv->tags[1]};
    if (srv->epoll_fd < 0 || srv->wake_fd < 0 ||
        epoll_ctl(srv->epoll_fd, EPOLL_CTL_ADD, srv->listen_fd, &le) != 0 ||
        epoll_ctl(srv->epoll_fd, EPOLL_CTL_ADD, srv->wake_fd, &we) != 0) {
        rc = txo_error_set(err, TXO_EIO, "HTTP server: epoll: %s", strerror(errno));
        goto fail;
    }
    srv->workers = txo_calloc(srv->opts.handler_threads, sizeof(pthread_t));
    if (srv->workers == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "HTTP server threads");
        goto fail;
    }
    for (unsigned i = 0; i < srv->opts.handler_threads; i++) {
        if (pthread_create(&srv->workers[i], NULL, txo__http_worker_main, srv) != 0) {
            rc = txo_error_set(err, TXO_EIO, "HTTP server: cannot start a handler thread");
            join_workers(srv);
            goto fail;
        }
        srv->n_workers++;
    }
    if (pthread_create(&srv->io_thread, NULL, io_main, srv) != 0) {
        rc = txo_error_set(err, TXO_EIO, "HTTP server: cannot start the I/O thread");
        join_workers(srv);
        goto fail;
    }
    *out = srv;
    return 0;
fail:
    free_server(srv);
    return rc;
}

unsigned txo_http_server_port(const struct txo_http_server *srv)
{
    return srv->port;
}

void txo_http_server_stop(struct txo_http_server *srv)
{
    if (srv == NULL)
        return;
    atomic_store(&srv->stopping, true);
    uint64_t one = 1;
    ssize_t rc = write(srv->wake_fd, &one, sizeof(one));
    (void)rc;
    pthread_join(srv->io_thread, NULL);
    /* Handlers still running (the stop deadline passed) finish; their connections, now on
     * the done queue, are closed with the rest. */
    join_workers(srv);
    free_server(srv);
}
