/*
 * Test support: a raw-socket HTTP/1.1 client, for the tests about the bytes and the connections
 * themselves (test_http_hostile.c, test_http_slots.c, test_http_server.c) and the ports that
 * client tests aim at. No libcurl: a client library would normalize exactly the bytes these
 * tests are about, and could not hold hundreds of connections open from chosen source addresses.
 *
 *   connect   testraw_dial_from() connects to 127.0.0.1:port from a chosen loopback address
 *             (127.0.0.0/8 is all local on Linux), so one test can be many client addresses.
 *   send      testraw_send() writes all bytes, or reports that the server has gone.
 *   read      testraw_read_reply() reads one whole response (status, head, Content-Type,
 *             Connection: close, body), skipping interim 1xx answers.
 *   close     testraw_closed_within() tells whether the server closed the connection.
 *   ports     testraw_listen() holds a port that accepts and never answers;
 *             testraw_closed_port() names one that refuses.
 *
 * Like the other support modules, a setup error (socket, bind, connect) fails the current
 * cmocka test; the send and read helpers return false instead, because the server closing a
 * connection is often what a test expects. Thread-safety: the functions share no state.
 */
#ifndef TXO_TESTRAW_H
#define TXO_TESTRAW_H

#include <stdbool.h>
#include <stddef.h>

/* One response as read from the socket. */
struct testraw_reply {
    int status;
    char head[8192]; /* the status line and the headers, NUL-terminated */
    char content_type[128];
    bool conn_close; /* Connection: close */
    char body[8192]; /* NUL-terminated after len bytes */
    size_t len;
};

/*
 * Connects to 127.0.0.1:port from the loopback address from (NULL: the kernel chooses), with
 * TCP_NODELAY and 5 s send and receive timeouts. Returns the socket (close() it). Fails the
 * test when the socket cannot be made, bound or connected.
 */
int testraw_dial_from(unsigned port, const char *from);

/*
 * testraw_dial_from(port, NULL), but a connection the server refuses (or nothing listens) is no
 * failure: returns -1 with errno set, for the tests that expect it and for threads.
 */
int testraw_try_dial(unsigned port);

/* Writes all n bytes; false when the server has gone (it may close after a refusal). */
bool testraw_send(int fd, const char *p, size_t n);

/* testraw_send() of a NUL-terminated string. */
bool testraw_send_str(int fd, const char *s);

/* Reads exactly n bytes into p; false on EOF, an error or the receive timeout. */
bool testraw_recv_exact(int fd, char *p, size_t n);

/*
 * Reads one response into r; false when none came (EOF, reset, the 5 s timeout). Interim 1xx
 * answers are skipped. Fails the test when the bytes are not an HTTP/1.1 response or the body
 * is larger than r->body.
 */
bool testraw_read_reply(int fd, struct testraw_reply *r);

/*
 * True when the server closed fd (EOF or reset) within ms without sending anything more;
 * false on a timeout or when bytes arrived (the first cap - 1 of them, NUL-terminated, are
 * left in extra).
 */
bool testraw_closed_within(int fd, int ms, char *extra, size_t cap);

/*
 * A TCP socket on an ephemeral port of 127.0.0.1 (*port), listening with the given backlog:
 * the kernel accepts connections into it that nobody answers. Returns the socket (close() it).
 * Fails the test when it cannot be made.
 */
int testraw_listen(unsigned *port, int backlog);

/* A port of 127.0.0.1 that nothing listens on: bound a moment ago, then closed. */
unsigned testraw_closed_port(void);

#endif
