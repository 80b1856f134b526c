/*
 * The raw-socket HTTP/1.1 client of the tests (testraw.h): blocking sockets with timeouts,
 * byte-at-a-time head reads so that nothing after a response is consumed.
 */
#define _DEFAULT_SOURCE
#include "testraw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

/* A socket to 127.0.0.1:port from from (NULL: any), connected, or -1 with errno. */
static int dial(unsigned port, const char *from)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        fail_msg("socket: %s", strerror(errno));
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    if (from != NULL) {
        if (inet_pton(AF_INET, from, &sa.sin_addr) != 1)
            fail_msg("not an IPv4 address: %s", from);
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
            fail_msg("bind %s: %s", from, strerror(errno));
    }
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

int testraw_dial_from(unsigned port, const char *from)
{
    int fd = dial(port, from);
    if (fd < 0)
        fail_msg("connect to port %u from %s: %s", port, from != NULL ? from : "any",
                 strerror(errno));
    return fd;
}

int testraw_try_dial(unsigned port)
{
    return dial(port, NULL);
}

bool testraw_send(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t put = send(fd, p, n, MSG_NOSIGNAL);
        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0)
            return false;
        p += put;
        n -= (size_t)put;
    }
    return true;
}

bool testraw_send_str(int fd, const char *s)
{
    return testraw_send(fd, s, strlen(s));
}

bool testraw_recv_exact(int fd, char *p, size_t n)
{
    while (n > 0) {
        ssize_t got = recv(fd, p, n, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return false;
        p += got;
        n -= (size_t)got;
    }
    return true;
}

bool testraw_read_reply(int fd, struct testraw_reply *r)
{
    for (;;) {
        memset(r, 0, sizeof(*r));
        size_t len = 0;
        while (len < 4 || memcmp(r->head + len - 4, "\r\n\r\n", 4) != 0) {
            if (len + 1 >= sizeof(r->head) || !testraw_recv_exact(fd, r->head + len, 1))
                return false;
            len++;
        }
        if (sscanf(r->head, "HTTP/1.1 %d ", &r->status) != 1)
            fail_msg("not an HTTP/1.1 status line: %.80s", r->head);
        if (r->status >= 200)
            break;
    }
    size_t cl = 0;
    for (char *line = strstr(r->head, "\r\n") + 2; *line != '\r';) {
        char *eol = strstr(line, "\r\n");
        *eol = '\0';
        if (strncasecmp(line, "Content-Length: ", 16) == 0)
            cl = strtoul(line + 16, NULL, 10);
        else if (strncasecmp(line, "Content-Type: ", 14) == 0)
            snprintf(r->content_type, sizeof(r->content_type), "%s", line + 14);
        else if (strcasecmp(line, "Connection: close") == 0)
            r->conn_close = true;
        *eol = '\r';
        line = eol + 2;
    }
    if (cl >= sizeof(r->body))
        fail_msg("response body of %zu bytes is larger than the test expects", cl);
    if (!testraw_recv_exact(fd, r->body, cl))
        return false;
    r->body[cl] = '\0';
    r->len = cl;
    return true;
}

bool testraw_closed_within(int fd, int ms, char *extra, size_t cap)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0)
        return false;
    ssize_t got = recv(fd, extra, cap - 1, 0);
    if (got > 0) {
        extra[got] = '\0';
        return false;
    }
    return true;
}

/* A socket bound to an ephemeral port of 127.0.0.1; *port receives the port. */
static int bound_socket(unsigned *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        fail_msg("socket: %s", strerror(errno));
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        fail_msg("bind 127.0.0.1:0: %s", strerror(errno));
    socklen_t len = sizeof(a);
    if (getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        fail_msg("getsockname: %s", strerror(errno));
    *port = ntohs(a.sin_port);
    return fd;
}

int testraw_listen(unsigned *port, int backlog)
{
    int fd = bound_socket(port);
    if (listen(fd, backlog) != 0)
        fail_msg("listen: %s", strerror(errno));
    return fd;
}

unsigned testraw_closed_port(void)
{
    unsigned port;
    close(bound_socket(&port));
    return port;
}
