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
 *
 * Deadlines, checked by a sweep every TICK_MS, run for the whole phase, not per read, so a
 * client that trickles one byte a second gets no more time than one that sends nothing:
 *   head     from accept (or from the first byte of a keep-alive request): header_timeout_s
 *   body     from the end of the head: body_timeout_s
 *   idle     between keep-alive requests, and writing a response: timeout_s
 *   linger   after a refusal, reading and discarding what the client still sends: LINGER_MS
 *
 * Every refusal (400, 408, 413, 414, 431, 501, 505) is a JSON {"error","message"} with
 * Connection: close, after which the write side is shut down and the connection is closed:
 * the bytes after a refused head could be anything, so they are never read as a request.
 *
 * TLS (OpenSSL) runs on the same loop with non-blocking SSL objects: SSL_read performs the
 * handshake, which therefore counts against the head deadline.
 */
#include "core/common.h"

#include "http/parse.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum {
    TICK_MS = 100,      /* deadline sweep period */
    LINGER_MS = 2000,   /* discarding input after a refusal */
    READ_CHUNK = 16384, /* read window beyond the head or a chunked body */
    MAX_EVENTS = 64,
};

/*
 * Where a connection is. All transitions are made by the I/O thread, except HANDLING, which a
 * handler thread leaves by pushing the connection on the done queue.
 */
enum conn_state {
    CONN_IDLE,     /* keep-alive, no byte of the next request yet; -> HEAD, closed */
    CONN_HEAD,     /* reading a request head; -> BODY, HANDLING, WRITING (refused), closed */
    CONN_BODY,     /* reading the body; -> HANDLING, WRITING (refused), closed */
    CONN_HANDLING, /* queued for or run by a handler thread; -> WRITING */
    CONN_WRITING,  /* writing the response; -> IDLE, HEAD (pipelined), LINGER, closed */
    CONN_LINGER,   /* write side shut, discarding input until EOF or the deadline; -> closed */
};

struct conn {
    struct conn *prev, *next; /* srv->conns: every open connection */
    struct conn *queue_next;  /* the work queue or the done queue */
    struct txo_http_server *srv;
    int fd;
    SSL *ssl;
    uint32_t peer; /* IPv4 address, network order */
    enum conn_state state;
    bool registered; /* in the epoll set */
    uint32_t events; /* registered for */
    int64_t deadline_ms;

    char *in; /* received bytes: the request being read, then what follows it */
    size_t in_len, in_cap;
    struct txo__http_head head; /* valid from BODY to WRITING; spans point into in */
    size_t req_end;             /* bytes of in that belong to the current request */
    struct txo__http_chunked chunked;
    size_t feed_off;  /* chunked: bytes of in decoded so far */
    char *body;       /* chunked: the decoded body (max_body_bytes + 1) */
    size_t body_len;  /* chunked: decoded so far */
    bool close_after; /* close once the response is written */

    char *out; /* bytes to write: an interim 100 Continue, then the response */
    size_t out_len, out_off;
    char *resp; /* HANDLING -> WRITING: the serialized response from the handler thread */
    size_t resp_len;
    size_t resp_off; /* bytes of resp the handler thread already wrote */
    bool resp_close;

    bool write_blocked;    /* the last write would block: wait for EPOLLOUT */
    bool read_wants_write; /* TLS: SSL_read needs the socket writable */
    bool write_wants_read; /* TLS: SSL_write needs the socket readable */
};

struct txo_http_server {
    struct txo_http_server_opts opts; /* host is not kept */
    txo_http_handler_fn handler;
    void *arg;
    unsigned port;
    SSL_CTX *tls;

    int listen_fd;
    int epoll_fd;
    int wake_fd;  /* eventfd: the done queue or stop */
    char tags[2]; /* epoll data for listen_fd and wake_fd */
    pthread_t io_thread;
    struct conn *conns; /* I/O thread only */
    unsigned n_conns;
    unsigned n_handling;
    atomic_bool stopping;

    pthread_mutex_t mu; /* the two queues and quit */
    pthread_cond_t work_cv;
    struct conn *work_head, *work_tail;
    struct conn *done_head;
    bool quit;
    pthread_t *workers;
    unsigned n_workers;
};

/* ---- public helpers ---- */

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

/* What a handler sees of a request: NUL-terminated copies, decoded, none with a NUL inside. */
struct req_view {
    const char **names;
    const char **values;
    size_t n_fields;
    const char **arg_names;
    const char **arg_values;
    size_t n_args;
};

const char *txo_http_request_header(const struct txo_http_request *req, const char *name)
{
    const struct req_view *v = req->conn;
    for (size_t i = 0; i < v->n_fields; i++)
        if (strcasecmp(v->names[i], name) == 0)
            return v->values[i];
    return NULL;
}

size_t txo_http_request_header_count(const struct txo_http_request *req, const char *name)
{
    const struct req_view *v = req->conn;
    size_t n = 0;
    for (size_t i = 0; i < v->n_fields; i++)
        n += strcasecmp(v->names[i], name) == 0;
    return n;
}

const char *txo_http_request_arg(const struct txo_http_request *req, const char *name)
{
    const struct req_view *v = req->conn;
    for (size_t i = 0; i < v->n_args; i++)
        if (strcmp(v->arg_names[i], name) == 0)
            return v->arg_values[i];
    return NULL;
}

size_t txo_http_request_arg_count(const struct txo_http_request *req, const char *name)
{
    const struct req_view *v = req->conn;
    size_t n = 0;
    for (size_t i = 0; i < v->n_args; i++)
        if (strcmp(v->arg_names[i], name) == 0)
            n++;
    return n;
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
static char *serialize(const struct txo_http_response *r, bool head_only, bool close,
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
static char *refusal_body(const struct txo__http_refusal *why)
{
    size_t cap = strlen(why->error) + strlen(why->message) + 32;
    char *body = txo_malloc(cap);
    if (body != NULL)
        snprintf(body, cap, "{\"error\":\"%s\",\"message\":\"%s\"}", why->error, why->message);
    return body;
}

/* ---- socket I/O, plain or TLS ---- */

enum { IO_AGAIN = -1, IO_ERROR = -2 };

/* Bytes read (> 0), 0 at EOF, IO_AGAIN or IO_ERROR. */
static long conn_recv(struct conn *c, char *buf, size_t n)
{
    c->read_wants_write = false;
    if (c->ssl != NULL) {
        int got = SSL_read(c->ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n);
        if (got > 0)
            return got;
        switch (SSL_get_error(c->ssl, got)) {
        case SSL_ERROR_WANT_READ:
            return IO_AGAIN;
        case SSL_ERROR_WANT_WRITE:
            c->read_wants_write = true;
            return IO_AGAIN;
        case SSL_ERROR_ZERO_RETURN:
            return 0;
        default:
            ERR_clear_error();
            return IO_ERROR;
        }
    }
    for (;;) {
        ssize_t got = recv(c->fd, buf, n, 0);
        if (got >= 0)
            return (long)got;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? IO_AGAIN : IO_ERROR;
    }
}

/* Bytes written (> 0), IO_AGAIN or IO_ERROR. */
static long conn_send(struct conn *c, const char *buf, size_t n)
{
    c->write_wants_read = false;
    if (c->ssl != NULL) {
        int put = SSL_write(c->ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n);
        if (put > 0)
            return put;
        switch (SSL_get_error(c->ssl, put)) {
        case SSL_ERROR_WANT_WRITE:
            return IO_AGAIN;
        case SSL_ERROR_WANT_READ:
            c->write_wants_read = true;
            return IO_AGAIN;
        default:
            ERR_clear_error();
            return IO_ERROR;
        }
    }
    for (;;) {
        ssize_t put = send(c->fd, buf, n, MSG_NOSIGNAL);
        if (put >= 0)
            return (long)put;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? IO_AGAIN : IO_ERROR;
    }
}

/* ---- connections (I/O thread) ---- */

static void conn_close(struct conn *c)
{
    struct txo_http_server *srv = c->srv;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    srv->n_conns--;
    if (c->registered)
        epoll_ctl(srv->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->ssl != NULL)
        SSL_free(c->ssl);
    close(c->fd);
    txo_free(c->in);
    txo_free(c->body);
    txo_free(c->out);
    txo_free(c->resp);
    txo_free(c);
}

static bool reading(const struct conn *c)
{
    return c->state == CONN_IDLE || c->state == CONN_HEAD || c->state == CONN_BODY ||
           c->state == CONN_LINGER;
}

/* Registers the events the state needs. False when epoll failed (the caller closes). */
static bool update_interest(struct conn *c)
{
    struct txo_http_server *srv = c->srv;
    if (c->state == CONN_HANDLING) {
        /* Out of the set while a handler owns it: even with no events asked for, a hang-up
         * would be reported in a loop until the handler ends. */
        if (c->registered)
            epoll_ctl(srv->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
        c->registered = false;
        return true;
    }
    uint32_t ev = 0;
    if (reading(c) || c->write_wants_read)
        ev |= EPOLLIN;
    if (c->write_blocked || c->read_wants_write)
        ev |= EPOLLOUT;
    if (c->registered && ev == c->events)
        return true;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    int rc = epoll_ctl(srv->epoll_fd, c->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &e);
    if (rc != 0)
        return false;
    c->registered = true;
    c->events = ev;
    return true;
}

static bool out_append(struct conn *c, const char *p, size_t n)
{
    if (c->out_off == c->out_len) {
        c->out_off = 0;
        c->out_len = 0;
    }
    char *grown = txo_realloc(c->out, c->out_len + n);
    if (grown == NULL)
        return false;
    memcpy(grown + c->out_len, p, n);
    c->out = grown;
    c->out_len += n;
    return true;
}

/*
 * The functions below that may close the connection return whether it is still open ("alive");
 * after false, c is freed and must not be touched.
 */
static bool after_response(struct conn *c);
static bool process_input(struct conn *c);
static bool read_input(struct conn *c);

static bool flush_out(struct conn *c)
{
    c->write_blocked = false;
    while (c->out_off < c->out_len) {
        long n = conn_send(c, c->out + c->out_off, c->out_len - c->out_off);
        if (n == IO_AGAIN) {
            c->write_blocked = !c->write_wants_read;
            return true;
        }
        if (n == IO_ERROR) {
            conn_close(c);
            return false;
        }
        c->out_off += (size_t)n;
    }
    c->out_off = 0;
    c->out_len = 0;
    return true;
}

static bool keep_interest(struct conn *c)
{
    if (update_interest(c))
        return true;
    conn_close(c);
    return false;
}

/* Writes what is queued; after a complete response goes on with the connection. */
static bool write_and_continue(struct conn *c)
{
    if (!flush_out(c))
        return false;
    if (c->state == CONN_WRITING && c->out_len == 0)
        return after_response(c);
    return keep_interest(c);
}

/* Queues a refusal and closes the connection once it is written. */
static bool refuse(struct conn *c, const struct txo__http_refusal *why)
{
    TXO_LOG(TXO_LOG_DEBUG, "http", "refused status=%d error=%s message=\"%s\"", why->status,
            why->error, why->message);
    char *body = refusal_body(why);
    struct txo_http_response r = {
        .status = why->status, .body = body, .body_len = body != NULL ? strlen(body) : 0};
    size_t len = 0;
    char *buf = body != NULL ? serialize(&r, false, true, false, &len) : NULL;
    txo_free(body);
    bool queued = buf != NULL && out_append(c, buf, len);
    txo_free(buf);
    if (!queued) {
        conn_close(c);
        return false;
    }
    c->state = CONN_WRITING;
    c->close_after = true;
    c->deadline_ms = txo_monotonic_ms() + LINGER_MS;
    return write_and_continue(c);
}

static bool refuse_with(struct conn *c, int status, const char *error, const char *message)
{
    struct txo__http_refusal why = {status, error, message};
    return refuse(c, &why);
}

static bool refuse_too_large(struct conn *c)
{
    char msg[96];
    snprintf(msg, sizeof(msg), "request body exceeds %zu bytes", c->srv->opts.max_body_bytes);
    return refuse_with(c, 413, "payload_too_large", msg); /* msg is copied */
}

/* Shuts the write side and discards input for a while, so the client reads the response
 * before the close (closing with unread input would reset the connection). */
static bool start_linger(struct conn *c)
{
    if (c->ssl != NULL)
        (void)SSL_shutdown(c->ssl);
    ERR_clear_error();
    shutdown(c->fd, SHUT_WR);
    c->state = CONN_LINGER;
    c->deadline_ms = txo_monotonic_ms() + LINGER_MS;
    c->write_blocked = false;
    c->read_wants_write = false;
    c->write_wants_read = false;
    return keep_interest(c);
}

static void dispatch(struct conn *c)
{
    struct txo_http_server *srv = c->srv;
    c->state = CONN_HANDLING;
    c->deadline_ms = 0;
    (void)update_interest(c);
    srv->n_handling++;
    pthread_mutex_lock(&srv->mu);
    c->queue_next = NULL;
    if (srv->work_tail != NULL)
        srv->work_tail->queue_next = c;
    else
        srv->work_head = c;
    srv->work_tail = c;
    pthread_cond_signal(&srv->work_cv);
    pthread_mutex_unlock(&srv->mu);
}

static void start_request(struct conn *c, int64_t now)
{
    c->state = CONN_HEAD;
    c->deadline_ms = now + (int64_t)c->srv->opts.header_timeout_s * 1000;
}

/* The head is in: check it against the limits, then dispatch it or start reading the body. */
static bool head_done(struct conn *c)
{
    struct txo_http_server *srv = c->srv;
    struct txo__http_head *h = &c->head;
    if (h->body == TXO_HTTP_BODY_LENGTH && h->content_length > srv->opts.max_body_bytes)
        return refuse_too_large(c);
    c->close_after = !h->keep_alive;
    if (h->body == TXO_HTTP_BODY_NONE ||
        (h->body == TXO_HTTP_BODY_LENGTH && h->content_length == 0)) {
        c->req_end = h->head_len;
        dispatch(c);
        return true;
    }
    c->state = CONN_BODY;
    c->deadline_ms = txo_monotonic_ms() + (int64_t)srv->opts.body_timeout_s * 1000;
    if (h->body == TXO_HTTP_BODY_CHUNKED) {
        c->body = txo_malloc(srv->opts.max_body_bytes + 1);
        if (c->body == NULL) {
            conn_close(c);
            return false;
        }
        c->body_len = 0;
        c->feed_off = h->head_len;
        memset(&c->chunked, 0, sizeof(c->chunked));
    }
    if (h->expect_continue && c->in_len == h->head_len) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (!out_append(c, cont, sizeof(cont) - 1)) {
            conn_close(c);
            return false;
        }
        return flush_out(c);
    }
    return true;
}

/* Consumes what is buffered in the current state. */
static bool process_input(struct conn *c)
{
    struct txo_http_server *srv = c->srv;
    if (c->state == CONN_IDLE && c->in_len > 0)
        start_request(c, txo_monotonic_ms());
    if (c->state == CONN_HEAD) {
        struct txo__http_refusal why;
        int rc = txo__http_parse_head(c->in, c->in_len, srv->opts.max_header_bytes, &c->head, &why);
        if (rc == 0)
            return true;
        if (rc < 0)
            return refuse(c, &why);
        if (!head_done(c))
            return false;
    }
    if (c->state != CONN_BODY)
        return true;
    struct txo__http_head *h = &c->head;
    if (h->body == TXO_HTTP_BODY_LENGTH) {
        if (c->in_len >= h->head_len + h->content_length) {
            c->req_end = h->head_len + (size_t)h->content_length;
            dispatch(c);
        }
        return true;
    }
    size_t used = 0;
    struct txo__http_refusal why;
    int rc = txo__http_chunked_feed(&c->chunked, c->in + c->feed_off, c->in_len - c->feed_off,
                                    &used, c->body, srv->opts.max_body_bytes, &c->body_len, &why);
    if (rc < 0 && why.status == 413)
        return refuse_too_large(c);
    if (rc < 0)
        return refuse(c, &why);
    /* Drop the decoded chunk bytes; the head stays (its spans point into in). */
    size_t rest = c->in_len - c->feed_off - used;
    memmove(c->in + h->head_len, c->in + c->feed_off + used, rest);
    c->in_len = h->head_len + rest;
    c->feed_off = h->head_len;
    if (rc == 1) {
        c->body[c->body_len] = '\0';
        c->req_end = h->head_len;
        dispatch(c);
    }
    return true;
}

/* How many bytes the current state may buffer. */
static size_t read_limit(const struct conn *c)
{
    const struct txo_http_server_opts *o = &c->srv->opts;
    switch (c->state) {
    case CONN_IDLE:
    case CONN_HEAD:
        return o->max_header_bytes;
    case CONN_BODY:
        if (c->head.body == TXO_HTTP_BODY_LENGTH)
            return c->head.head_len + (size_t)c->head.content_length;
        return c->head.head_len + READ_CHUNK;
    default:
        return 0;
    }
}

/* Makes room for want more bytes in c->in; the head's spans move with the buffer. */
static bool grow_input(struct conn *c, size_t want)
{
    if (c->in_len + want <= c->in_cap)
        return true;
    size_t cap = c->in_cap == 0 ? 4096 : c->in_cap;
    while (cap < c->in_len + want)
        cap *= 2;
    char *grown = txo_realloc(c->in, cap);
    if (grown == NULL)
        return false;
    if (c->state == CONN_BODY && grown != c->in) {
        struct txo__http_head *h = &c->head;
        const char *old = c->in;
#define TXO_REBASE(ptr) ((ptr) = grown + ((ptr)-old))
        TXO_REBASE(h->method.p);
        TXO_REBASE(h->path.p);
        TXO_REBASE(h->query.p);
        for (size_t i = 0; i < h->n_fields; i++) {
            TXO_REBASE(h->fields[i].name.p);
            TXO_REBASE(h->fields[i].value.p);
        }
#undef TXO_REBASE
    }
    c->in = grown;
    c->in_cap = cap;
    return true;
}

static bool read_input(struct conn *c)
{
    if (c->state == CONN_LINGER) {
        char sink[4096];
        for (;;) {
            long n = conn_recv(c, sink, sizeof(sink));
            if (n == IO_AGAIN)
                break;
            if (n <= 0) {
                conn_close(c);
                return false;
            }
        }
        return keep_interest(c);
    }
    while (c->state == CONN_IDLE || c->state == CONN_HEAD || c->state == CONN_BODY) {
        size_t limit = read_limit(c);
        if (c->in_len >= limit)
            break;
        size_t want = limit - c->in_len;
        if (want > READ_CHUNK)
            want = READ_CHUNK;
        if (!grow_input(c, want)) {
            conn_close(c);
            return false;
        }
        long n = conn_recv(c, c->in + c->in_len, want);
        if (n == IO_AGAIN)
            break;
        if (n == 0 || n == IO_ERROR) {
            /* EOF: fine between requests; a request cut short gets no answer. */
            conn_close(c);
            return false;
        }
        c->in_len += (size_t)n;
        if (!process_input(c))
            return false;
    }
    if (c->state == CONN_HANDLING)
        return true;
    return keep_interest(c);
}

static bool after_response(struct conn *c)
{
    if (atomic_load(&c->srv->stopping)) {
        /* The response is with the kernel, which still sends it after close. */
        conn_close(c);
        return false;
    }
    if (c->close_after)
        return start_linger(c);
    memmove(c->in, c->in + c->req_end, c->in_len - c->req_end);
    c->in_len -= c->req_end;
    c->req_end = 0;
    txo_free(c->body);
    c->body = NULL;
    c->body_len = 0;
    memset(&c->head, 0, sizeof(c->head));
    int64_t now = txo_monotonic_ms();
    if (c->in_len > 0) {
        start_request(c, now);
    } else {
        c->state = CONN_IDLE;
        c->deadline_ms = now + (int64_t)c->srv->opts.timeout_s * 1000;
    }
    if (!process_input(c))
        return false;
    /* OpenSSL may hold decrypted input that epoll cannot see: read it without waiting. */
    if (reading(c))
        return c->ssl != NULL ? read_input(c) : keep_interest(c);
    return true;
}

/* The handler is done: the response goes out from here. */
static void handled(struct conn *c)
{
    struct txo_http_server *srv = c->srv;
    srv->n_handling--;
    c->state = CONN_WRITING;
    c->deadline_ms = txo_monotonic_ms() + (int64_t)srv->opts.timeout_s * 1000;
    c->close_after = c->close_after || c->resp_close;
    bool ok = c->resp != NULL && (c->resp_off == c->resp_len ||
                                  out_append(c, c->resp + c->resp_off, c->resp_len - c->resp_off));
    txo_free(c->resp);
    c->resp = NULL;
    if (!ok) {
        conn_close(c);
        return;
    }
    (void)write_and_continue(c);
}

/* Answers a connection over a limit with a 503 if the socket takes it at once, and closes. */
static void turn_away(struct txo_http_server *srv, int fd, const char *why)
{
    TXO_LOG(TXO_LOG_DEBUG, "http", "connection refused: %s", why);
    if (srv->tls == NULL) {
        char resp[256];
        char body[160];
        int bn = snprintf(body, sizeof(body),
                          "{\"error\":\"too_many_connections\",\"message\":\"%s\"}", why);
        int n = snprintf(resp, sizeof(resp),
                         "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                         "Content-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n%s",
                         bn, body);
        if (send(fd, resp, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) == n)
            shutdown(fd, SHUT_WR);
    }
    close(fd);
}

static void accept_all(struct txo_http_server *srv)
{
    for (;;) {
        struct sockaddr_in sa;
        socklen_t sl = sizeof(sa);
        int fd = accept(srv->listen_fd, (struct sockaddr *)&sa, &sl);
        if (fd >= 0 &&
            (fcntl(fd, F_SETFL, O_NONBLOCK) != 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)) {
            close(fd);
            continue;
        }
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                TXO_LOG(TXO_LOG_WARN, "http", "accept: %s", strerror(errno));
            return;
        }
        uint32_t peer = sa.sin_addr.s_addr;
        if (srv->n_conns >= srv->opts.max_connections) {
            turn_away(srv, fd, "the server has too many connections");
            continue;
        }
        unsigned same = 0;
        for (const struct conn *o = srv->conns; o != NULL; o = o->next)
            same += o->peer == peer;
        if (srv->opts.max_connections_per_client > 0 &&
            same >= srv->opts.max_connections_per_client) {
            turn_away(srv, fd, "too many connections from this address");
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        struct conn *c = txo_calloc(1, sizeof(*c));
        SSL *ssl = NULL;
        if (c != NULL && srv->tls != NULL) {
            ssl = SSL_new(srv->tls);
            if (ssl == NULL || SSL_set_fd(ssl, fd) != 1) {
                SSL_free(ssl);
                ssl = NULL;
                txo_free(c);
                c = NULL;
                ERR_clear_error();
            } else {
                SSL_set_accept_state(ssl);
            }
        }
        if (c == NULL) {
            close(fd);
            continue;
        }
        c->srv = srv;
        c->fd = fd;
        c->ssl = ssl;
        c->peer = peer;
        c->next = srv->conns;
        if (srv->conns != NULL)
            srv->conns->prev = c;
        srv->conns = c;
        srv->n_conns++;
        start_request(c, txo_monotonic_ms());
        if (!update_interest(c))
            conn_close(c);
    }
}

static void conn_event(struct conn *c, uint32_t events)
{
    if (c->state == CONN_HANDLING)
        return;
    bool hup = (events & (EPOLLHUP | EPOLLERR)) != 0;
    bool can_write = (events & EPOLLOUT) || ((events & EPOLLIN) && c->write_wants_read) || hup;
    bool can_read = (events & EPOLLIN) || ((events & EPOLLOUT) && c->read_wants_write) || hup;
    if (c->out_len > c->out_off && can_write) {
        if (!flush_out(c))
            return;
        if (c->state == CONN_WRITING && c->out_len == 0) {
            (void)after_response(c);
            return;
        }
    }
    if (reading(c) && can_read) {
        (void)read_input(c);
        return;
    }
    (void)keep_interest(c);
}

static void take_done(struct txo_http_server *srv)
{
    uint64_t v;
    ssize_t rc = read(srv->wake_fd, &v, sizeof(v));
    (void)rc;
    pthread_mutex_lock(&srv->mu);
    struct conn *list = srv->done_head;
    srv->done_head = NULL;
    pthread_mutex_unlock(&srv->mu);
    /* done_head is LIFO; the order between connections does not matter */
    while (list != NULL) {
        struct conn *c = list;
        list = c->queue_next;
        c->queue_next = NULL;
        handled(c);
    }
}

static void sweep(struct txo_http_server *srv, int64_t now)
{
    struct conn *next;
    for (struct conn *c = srv->conns; c != NULL; c = next) {
        next = c->next;
        if (c->state == CONN_HANDLING || c->deadline_ms == 0 || now < c->deadline_ms)
            continue;
        if ((c->state == CONN_HEAD && c->in_len > 0) || c->state == CONN_BODY) {
            TXO_LOG(TXO_LOG_DEBUG, "http", "request too slow state=%s",
                    c->state == CONN_BODY ? "body" : "head");
            (void)refuse_with(c, 408, "request_timeout",
                              c->state == CONN_BODY ? "the request body took too long"
                                                    : "the request head took too long");
            /* refuse() gave it LINGER_MS to write the 408; a client that does not read it is
             * closed by the next sweep after that. */
        } else {
            conn_close(c);
        }
    }
}

/* Stop: no new connections, no new requests; responses in flight are still written. */
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
        if (c->state == CONN_IDLE || c->state == CONN_HEAD || c->state == CONN_BODY ||
            c->state == CONN_LINGER)
            conn_close(c);
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
        for (int i = 0; i < n; i++) {
            void *tag = evs[i].data.ptr;
            if (tag == &srv->tags[0])
                accept_all(srv);
            else if (tag == &srv->tags[1])
                take_done(srv);
            else
                conn_event(tag, evs[i].events);
        }
        int64_t now = txo_monotonic_ms();
        if (now >= next_sweep) {
            sweep(srv, now);
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

static void handle(struct txo_http_server *srv, struct conn *c)
{
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
        resp.body = refusal_body(&why);
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
            srv->handler(srv->arg, &req, &resp);
        }
        if (h->body == TXO_HTTP_BODY_LENGTH && h->content_length > 0)
            txo_free((char *)req.body);
    }
    close = close || atomic_load(&srv->stopping);
    /* From the head, not from req: req points into the view, which a failed build freed. */
    bool head_only = h->method.len == 4 && memcmp(h->method.p, "HEAD", 4) == 0;
    c->resp = serialize(&resp, head_only, close, h->version_minor == 0 && !close, &c->resp_len);
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

static void *worker_main(void *arg)
{
    struct txo_http_server *srv = arg;
    for (;;) {
        pthread_mutex_lock(&srv->mu);
        while (srv->work_head == NULL && !srv->quit)
            pthread_cond_wait(&srv->work_cv, &srv->mu);
        struct conn *c = srv->work_head;
        if (c == NULL) {
            pthread_mutex_unlock(&srv->mu);
            return NULL;
        }
        srv->work_head = c->queue_next;
        if (srv->work_head == NULL)
            srv->work_tail = NULL;
        pthread_mutex_unlock(&srv->mu);

        handle(srv, c);

        pthread_mutex_lock(&srv->mu);
        bool wake = srv->done_head == NULL; /* else the I/O thread is woken already */
        c->queue_next = srv->done_head;
        srv->done_head = c;
        pthread_mutex_unlock(&srv->mu);
        if (wake) {
            uint64_t one = 1;
            ssize_t rc = write(srv->wake_fd, &one, sizeof(one));
            (void)rc;
        }
    }
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
        conn_close(srv->conns);
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
        if (pthread_create(&srv->workers[i], NULL, worker_main, srv) != 0) {
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
