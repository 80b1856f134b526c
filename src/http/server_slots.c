/*
 * Which connections of the HTTP server get a slot, on the I/O thread (server_internal.h):
 * accepting, the connection limits, and the deadlines that free the slots of clients that are
 * too slow.
 */
#include "core/common.h"

#include "http/server_internal.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <sys/socket.h>
#include <unistd.h>

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

void txo__http_accept_all(struct txo_http_server *srv)
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
        txo__http_conn_start_request(c, txo_monotonic_ms());
        if (!txo__http_conn_watch(c))
            txo__http_conn_close(c);
    }
}

void txo__http_sweep(struct txo_http_server *srv, int64_t now)
{
    struct conn *next;
    for (struct conn *c = srv->conns; c != NULL; c = next) {
        next = c->next;
        if (c->state == CONN_HANDLING || c->deadline_ms == 0 || now < c->deadline_ms)
            continue;
        if ((c->state == CONN_HEAD && c->in_len > 0) || c->state == CONN_BODY) {
            TXO_LOG(TXO_LOG_DEBUG, "http", "request too slow state=%s",
                    c->state == CONN_BODY ? "body" : "head");
            (void)txo__http_conn_refuse(c, 408, "request_timeout",
                                        c->state == CONN_BODY ? "the request body took too long"
                                                              : "the request head took too long");
            /* refuse() gave it LINGER_MS to write the 408; a client that does not read it is
             * closed by the next sweep after that. */
        } else {
            txo__http_conn_close(c);
        }
    }
}
