/*
 * Which connections hold the server's max_connections slots, on the I/O thread
 * (server_internal.h). A connection with nothing of a request in hand is worth less than a new
 * client, and a client that sends its request slowly must not hold every slot; servers that
 * face the internet work the same way (nginx closes its "reusable" connections when it runs out,
 * HAProxy and h2o bound the time for a request head). Each connection's slot follows its state
 * (enum conn_slot):
 *
 *   reclaimable  idle keep-alive, silent since accept, or lingering after a refusal. When every
 *                slot is in use a new connection takes the slot of the first one in line:
 *                lingering connections first (their answer is already sent), then the one idle
 *                for the longest time. It is closed without an answer, as its idle or head
 *                deadline would have closed it.
 *   reading      a request (head or body) partly read. At most max_reading, a quarter of the
 *                slots: beyond that the oldest is refused with 408, so slow requests (slowloris)
 *                hold at most a quarter of the slots. A head that arrives in one read never
 *                counts.
 *   busy         a request handled or its response being written: never taken.
 *
 * A new connection is turned away (503, or a bare close over TLS) only when its address
 * already has max_connections_per_client connections, or when every slot is busy or reading.
 * The deadlines hold for every state (server.c): a head must be complete header_timeout_s
 * after accept or its first byte, whatever the slots.
 *
 * Memory. An open connection keeps its struct (about 2.4 KB, mostly the parsed head's field
 * table); its input buffer only while it holds unprocessed bytes and its output buffer only
 * while a write is pending (server_conn.c), so idle and silent connections cost the struct
 * alone. glibc gives freed memory back to the kernel only from the top of a heap, and one chunk
 * still in use above the buffers of closed connections keeps all of them resident. So when the
 * open connections have fallen to half their peak, and by at least TRIM_DROP, the sweep has
 * malloc_trim release the free pages of every arena (txo__alloc_trim). Between two trims the
 * free memory kept is bounded by what the connections open at the peak used; a trim follows at
 * least TRIM_DROP closes, so its cost (a walk of the free lists) stays small per connection.
 */
#include "core/common.h"

#include "http/server_internal.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum {
    TRIM_DROP = 256, /* fewer open connections than the peak before memory is trimmed */
};

/* ---- the slot lists ---- */

static enum conn_slot slot_of(const struct conn *c)
{
    switch (c->state) {
    case CONN_IDLE:
    case CONN_LINGER:
        return SLOT_RECLAIMABLE;
    case CONN_HEAD:
        return c->in_len == 0 ? SLOT_RECLAIMABLE : SLOT_READING;
    case CONN_BODY:
        return SLOT_READING;
    case CONN_HANDLING:
    case CONN_WRITING:
        return SLOT_BUSY;
    }
    TXO_BUG("connection state %d", (int)c->state);
}

static struct conn_list *list_of(struct txo_http_server *srv, enum conn_slot slot)
{
    return slot == SLOT_RECLAIMABLE ? &srv->reclaimable
           : slot == SLOT_READING   ? &srv->reading
                                    : NULL;
}

void txo__http_slot_leave(struct conn *c)
{
    struct conn_list *l = list_of(c->srv, c->slot);
    if (l == NULL)
        return;
    if (c->slot_prev != NULL)
        c->slot_prev->slot_next = c->slot_next;
    else
        l->head = c->slot_next;
    if (c->slot_next != NULL)
        c->slot_next->slot_prev = c->slot_prev;
    else
        l->tail = c->slot_prev;
    l->n--;
    c->slot_prev = NULL;
    c->slot_next = NULL;
    c->slot = SLOT_BUSY;
}

void txo__http_slot_file(struct conn *c)
{
    enum conn_slot slot = slot_of(c);
    if (slot == c->slot)
        return;
    txo__http_slot_leave(c);
    c->slot = slot;
    struct conn_list *l = list_of(c->srv, slot);
    if (l == NULL)
        return;
    if (c->state == CONN_LINGER) {
        /* First in line: the answer is sent, only a courtesy to the client is left. */
        c->slot_next = l->head;
        if (l->head != NULL)
            l->head->slot_prev = c;
        else
            l->tail = c;
        l->head = c;
    } else {
        c->slot_prev = l->tail;
        if (l->tail != NULL)
            l->tail->slot_next = c;
        else
            l->head = c;
        l->tail = c;
    }
    l->n++;
}

/* ---- admitting connections ---- */

/* True when c's peer has sent bytes, or closed, that the I/O loop has not read yet. */
static bool input_waiting(const struct conn *c)
{
    char b;
    ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}

/*
 * Closes the first reclaimable connection to free its slot; false when there is none. Silent or
 * idle means the client sent nothing: a connection whose bytes (or EOF) arrived but were not
 * read yet, because the I/O loop was accepting a burst, is read first. That moves it to reading
 * or busy, or closes it at EOF, which frees the slot.
 */
static bool reclaim_slot(struct txo_http_server *srv)
{
    struct conn *c;
    while ((c = srv->reclaimable.head) != NULL && c->state != CONN_LINGER && c->in_len == 0 &&
           input_waiting(c)) {
        unsigned open = srv->n_conns;
        txo__http_conn_event(c, EPOLLIN); /* may free c */
        if (srv->n_conns < open)
            return true;
        if (srv->reclaimable.head == c)
            break; /* still nothing of a request (a TLS record cut short): it goes */
    }
    if (c == NULL)
        return false;
    TXO_LOG(TXO_LOG_DEBUG, "http", "closing a connection to admit another",
            TXO_KV_STR("state", c->state == CONN_LINGER ? "lingering" : "idle"));
    txo__http_conn_close(c);
    return true;
}

/* Refuses the oldest requests still being read beyond max_reading. */
static void cap_reading(struct txo_http_server *srv)
{
    while (srv->reading.n > srv->max_reading) {
        unsigned before = srv->reading.n;
        TXO_LOG(TXO_LOG_DEBUG, "http", "refusing the oldest request still being read",
                TXO_KV_U64("reading", before));
        /* Either way it leaves the list: refused (WRITING, then LINGER) or closed. */
        (void)txo__http_conn_refuse(srv->reading.head, 408, "request_timeout",
                                    "the server is busy and the request came too slowly");
        TXO_ASSERT(srv->reading.n < before);
    }
}

/* Answers a connection over a limit with a 503 if the socket takes it at once, and closes. */
static void turn_away(struct txo_http_server *srv, int fd, const char *why)
{
    TXO_LOG(TXO_LOG_DEBUG, "http", "connection refused", TXO_KV_STR("reason", why));
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
                TXO_LOG(TXO_LOG_WARN, "http", "accept failed",
                        TXO_KV_STR("error", strerror(errno)));
            return;
        }
        uint32_t peer = sa.sin_addr.s_addr;
        unsigned same = 0;
        for (const struct conn *o = srv->conns; o != NULL; o = o->next)
            same += o->peer == peer;
        if (srv->opts.max_connections_per_client > 0 &&
            same >= srv->opts.max_connections_per_client) {
            turn_away(srv, fd, "too many connections from this address");
            continue;
        }
        if (srv->n_conns >= srv->opts.max_connections && !reclaim_slot(srv)) {
            turn_away(srv, fd, "the server has too many connections");
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
        if (srv->n_conns > srv->peak_conns)
            srv->peak_conns = srv->n_conns;
        txo__http_conn_start_request(c, txo_monotonic_ms());
        if (!txo__http_conn_watch(c))
            txo__http_conn_close(c);
    }
}

void txo__http_admit(struct txo_http_server *srv, bool listen_ready)
{
    cap_reading(srv);
    if (listen_ready)
        accept_all(srv);
}

/* ---- deadlines and memory ---- */

/* Returns free memory to the kernel once the connections have fallen well below their peak. */
static void trim_after_drop(struct txo_http_server *srv)
{
    if (srv->peak_conns < srv->n_conns + TRIM_DROP || srv->n_conns > srv->peak_conns / 2)
        return;
    TXO_LOG(TXO_LOG_DEBUG, "http", "returning free memory", TXO_KV_U64("conns", srv->n_conns),
            TXO_KV_U64("peak_conns", srv->peak_conns));
    txo__alloc_trim();
    srv->peak_conns = srv->n_conns;
}

void txo__http_sweep(struct txo_http_server *srv, int64_t now)
{
    struct conn *next;
    for (struct conn *c = srv->conns; c != NULL; c = next) {
        next = c->next;
        if (c->state == CONN_HANDLING || c->deadline_ms == 0 || now < c->deadline_ms)
            continue;
        if ((c->state == CONN_HEAD && c->in_len > 0) || c->state == CONN_BODY) {
            TXO_LOG(TXO_LOG_DEBUG, "http", "request too slow",
                    TXO_KV_STR("state", c->state == CONN_BODY ? "body" : "head"));
            (void)txo__http_conn_refuse(c, 408, "request_timeout",
                                        c->state == CONN_BODY ? "the request body took too long"
                                                              : "the request head took too long");
            /* refuse() gave it LINGER_MS to write the 408; a client that does not read it is
             * closed by the next sweep after that. */
        } else {
            txo__http_conn_close(c);
        }
    }
    trim_after_drop(srv);
}
