/*
 * One connection of the HTTP server, on the I/O thread (server_internal.h): reads bytes, has
 * the strict parser (parse.h) frame the request, hands a complete request to the handler
 * pool, writes the response, and goes on with the next request (keep-alive, pipelining) or
 * lingers and closes.
 *
 *   IDLE -> HEAD -> BODY -> HANDLING -> WRITING -> IDLE | HEAD (pipelined) | LINGER -> closed
 *
 * A refusal (400, 408, 413, 414, 431, 501, 505) is queued as WRITING with close_after; the
 * write side is then shut and input discarded for LINGER_MS (LINGER), so the client reads the
 * answer instead of a reset, and no byte after a refused head is read as a request.
 *
 * Plain sockets and TLS (non-blocking SSL objects) share every path: conn_recv and conn_send
 * hide the difference, including TLS reads that need a writable socket and the reverse.
 */
#include "core/common.h"

#include "http/server_internal.h"

#include <openssl/err.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum {
    LINGER_MS = 2000,   /* discarding input after a refusal */
    READ_CHUNK = 16384, /* read window beyond the head or a chunked body */
};

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

void txo__http_conn_close(struct conn *c)
{
    struct txo_http_server *srv = c->srv;
    txo__http_slot_leave(c);
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

bool txo__http_conn_watch(struct conn *c)
{
    struct txo_http_server *srv = c->srv;
    txo__http_slot_file(c);
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
            txo__http_conn_close(c);
            return false;
        }
        c->out_off += (size_t)n;
    }
    /* Nothing is kept between writes: most responses never need this buffer. */
    txo_free(c->out);
    c->out = NULL;
    c->out_off = 0;
    c->out_len = 0;
    return true;
}

static bool keep_interest(struct conn *c)
{
    if (txo__http_conn_watch(c))
        return true;
    txo__http_conn_close(c);
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
    TXO_LOG(TXO_LOG_DEBUG, "http", "refused", TXO_KV_I64("http_status", why->status),
            TXO_KV_STR("error", why->error), TXO_KV_STR("message", why->message));
    char *body = txo__http_refusal_body(why);
    struct txo_http_response r = {.status = why->status,
                                  .body = body,
                                  .body_len = body != NULL ? strlen(body) : 0,
                                  .retry_after_s = why->status == 503 ? 1 : 0};
    size_t len = 0;
    char *buf = body != NULL ? txo__http_serialize(&r, false, true, false, &len) : NULL;
    txo_free(body);
    bool queued = buf != NULL && out_append(c, buf, len);
    txo_free(buf);
    if (!queued) {
        txo__http_conn_close(c);
        return false;
    }
    c->state = CONN_WRITING;
    c->close_after = true;
    c->deadline_ms = txo_monotonic_ms() + LINGER_MS;
    return write_and_continue(c);
}

bool txo__http_conn_refuse(struct conn *c, int status, const char *error, const char *message)
{
    struct txo__http_refusal why = {status, error, message};
    return refuse(c, &why);
}

static bool refuse_too_large(struct conn *c)
{
    char msg[96];
    snprintf(msg, sizeof(msg), "request body exceeds %zu bytes", c->srv->opts.max_body_bytes);
    return txo__http_conn_refuse(c, 413, "payload_too_large", msg); /* msg is copied */
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
    (void)txo__http_conn_watch(c);
    srv->n_handling++;
    pthread_mutex_lock(&srv->mu);
    txo__http_queue_push(&srv->work, c);
    pthread_cond_signal(&srv->work_cv);
    pthread_mutex_unlock(&srv->mu);
}

void txo__http_conn_start_request(struct conn *c, int64_t now)
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
            txo__http_conn_close(c);
            return false;
        }
        c->body_len = 0;
        c->feed_off = h->head_len;
        memset(&c->chunked, 0, sizeof(c->chunked));
    }
    if (h->expect_continue && c->in_len == h->head_len) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (!out_append(c, cont, sizeof(cont) - 1)) {
            txo__http_conn_close(c);
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
        txo__http_conn_start_request(c, txo_monotonic_ms());
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

/*
 * Frees the input buffer of a connection with nothing of a request in hand, as nginx does: an
 * idle or silent connection then costs its struct alone, and the buffer comes back with the
 * next bytes (grow_input).
 */
static void release_empty_input(struct conn *c)
{
    if (c->in_len > 0 || (c->state != CONN_IDLE && c->state != CONN_HEAD))
        return;
    txo_free(c->in);
    c->in = NULL;
    c->in_cap = 0;
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
                txo__http_conn_close(c);
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
            txo__http_conn_close(c);
            return false;
        }
        long n = conn_recv(c, c->in + c->in_len, want);
        if (n == IO_AGAIN)
            break;
        if (n == 0 || n == IO_ERROR) {
            /* EOF: fine between requests; a request cut short gets no answer. */
            txo__http_conn_close(c);
            return false;
        }
        c->in_len += (size_t)n;
        if (!process_input(c))
            return false;
    }
    if (c->state == CONN_HANDLING)
        return true;
    release_empty_input(c);
    return keep_interest(c);
}

static bool after_response(struct conn *c)
{
    if (atomic_load(&c->srv->stopping)) {
        /* The response is with the kernel, which still sends it after close. */
        txo__http_conn_close(c);
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
        txo__http_conn_start_request(c, now);
    } else {
        c->state = CONN_IDLE;
        c->deadline_ms = now + (int64_t)c->srv->opts.timeout_s * 1000;
        release_empty_input(c);
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
        txo__http_conn_close(c);
        return;
    }
    (void)write_and_continue(c);
}

void txo__http_conn_event(struct conn *c, uint32_t events)
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

void txo__http_take_done(struct txo_http_server *srv)
{
    uint64_t v;
    ssize_t rc = read(srv->wake_fd, &v, sizeof(v));
    (void)rc;
    pthread_mutex_lock(&srv->mu);
    struct conn_queue list = srv->done;
    srv->done = (struct conn_queue){NULL, NULL};
    pthread_mutex_unlock(&srv->mu);
    /* In the order the handlers answered: an idle connection's place in the reclaimable list
     * is when it went idle, and the longest idle is closed first to admit a new client. */
    for (struct conn *c = txo__http_queue_pop(&list); c != NULL; c = txo__http_queue_pop(&list))
        handled(c);
}
