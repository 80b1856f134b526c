/*
 * The HTTP server wrapper (include/txo/http_server.h) on loopback, checked at the protocol
 * level with a small blocking TCP client written here (no libcurl): what the handler answers
 * arrives exactly (status, body, Content-Type, Retry-After), request headers, query arguments
 * and bodies reach the handler, a connection stays open between requests, oversized bodies
 * are refused with 413 before the handler runs, a stalled client is disconnected, stopping
 * lets the request in flight finish and answers 503 to one still being read, bind errors are
 * reported, and 50 connections at once are all served correctly (run it under TSan too).
 *
 * No database. Every server listens on 127.0.0.1 port 0 (a free port chosen by the kernel).
 *
 * TXO_TEST_LOG=1 shows the library's log lines where the test allows it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "txo/txo.h"
#include "testraw.h"
#include "testrun.h"

/* ---- the handler under test ---- */

struct app {
    atomic_uint calls;         /* handler invocations */
    atomic_uint slow_entered;  /* /slow handlers that started */
    atomic_uint slow_finished; /* /slow handlers that returned */
};

/* Runs on the server's threads: no cmocka assertions here (they would longjmp across threads). */
static char *dup_mem(const char *p, size_t n)
{
    char *s = txo_malloc(n + 1);
    if (s == NULL)
        return NULL; /* the test then sees a bodiless answer and fails */
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

/*
 * Routes by path:
 *   /info   203 text/plain: method, path, X-Test header and q argument, one per line
 *   /echo   200 application/octet-stream: the request body, byte for byte
 *   /retry  503 with Retry-After: 7
 *   /slow   sleeps 300 ms, then 200 {"slow":"done"}
 *   other   404 {"error":"not_found"}
 */
static void handler(void *arg, const struct txo_http_request *req, struct txo_http_response *resp)
{
    struct app *app = arg;
    atomic_fetch_add(&app->calls, 1);
    if (strcmp(req->path, "/info") == 0) {
        const char *hdr = txo_http_request_header(req, "x-test"); /* case-insensitive */
        const char *q = txo_http_request_arg(req, "q");
        const char *missing = txo_http_request_header(req, "X-Not-Sent");
        char buf[512];
        int n = snprintf(buf, sizeof(buf), "method=%s\npath=%s\nx-test=%s\nq=%s\nmissing=%s\n",
                         req->method, req->path, hdr ? hdr : "(null)", q ? q : "(null)",
                         missing ? missing : "(null)");
        txo_http_response_take(resp, 203, dup_mem(buf, (size_t)n), (size_t)n);
        resp->content_type = "text/plain; charset=utf-8";
    } else if (strcmp(req->path, "/echo") == 0) {
        /* body is NUL-terminated and body_len counts the bytes before the NUL */
        if (req->body[req->body_len] != '\0') {
            (void)txo_http_response_set(resp, 500, "{\"error\":\"body not NUL-terminated\"}");
            return;
        }
        txo_http_response_take(resp, 200, dup_mem(req->body, req->body_len), req->body_len);
        resp->content_type = "application/octet-stream";
    } else if (strcmp(req->path, "/retry") == 0) {
        (void)txo_http_response_set(resp, 503, "{\"error\":\"overloaded\"}");
        resp->retry_after_s = 7;
    } else if (strcmp(req->path, "/slow") == 0) {
        atomic_fetch_add(&app->slow_entered, 1);
        txo_sleep_ms(300);
        (void)txo_http_response_set(resp, 200, "{\"slow\":\"done\"}");
        atomic_fetch_add(&app->slow_finished, 1);
    } else {
        (void)txo_http_response_set(resp, 404, "{\"error\":\"not_found\"}");
    }
}

struct fixture {
    struct app app;
    struct txo_http_server *srv;
    unsigned port;
};

static void start_with(struct fixture *f, const struct txo_http_server_opts *opts)
{
    memset(&f->app, 0, sizeof(f->app));
    struct txo_error err;
    txo_error_init(&err);
    f->srv = NULL;
    int rc = txo_http_server_start(opts, handler, &f->app, &f->srv, &err);
    if (rc != 0)
        fail_msg("txo_http_server_start: %s (%s)", err.msg, txo_err_name(rc));
    f->port = txo_http_server_port(f->srv);
    assert_true(f->port > 0 && f->port < 65536);
}

static void start_default(struct fixture *f)
{
    struct txo_http_server_opts opts;
    txo_http_server_opts_init(&opts);
    opts.port = 0;
    start_with(f, &opts);
}

/* start_default(), but a body may have at most max_body_bytes. */
static void start_with_body_limit(struct fixture *f, size_t max_body_bytes)
{
    struct txo_http_server_opts opts;
    txo_http_server_opts_init(&opts);
    opts.port = 0;
    opts.max_body_bytes = max_body_bytes;
    start_with(f, &opts);
}

static void stop(struct fixture *f)
{
    txo_http_server_stop(f->srv);
    f->srv = NULL;
}

/* The fixture of most tests: a server started as start_default() does. */
static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    start_default(f);
    *state = f;
    return 0;
}

/* The fixture of the body-limit tests: a server whose bodies may have at most 1024 bytes. */
static int setup_body_limit(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    start_with_body_limit(f, 1024);
    *state = f;
    return 0;
}

/* Stops the server unless the test did, and frees the fixture. */
static int teardown(void **state)
{
    struct fixture *f = *state;
    if (f->srv != NULL)
        stop(f);
    free(f);
    return 0;
}

/* ---- a small blocking HTTP/1.1 client ---- */

#define MAX_HEADERS 32

struct http_resp {
    int status;
    size_t n_headers;
    char *names[MAX_HEADERS];
    char *values[MAX_HEADERS];
    char *body; /* NUL-terminated */
    size_t body_len;
    char head[8192];
};

static void resp_release(struct http_resp *r)
{
    free(r->body);
    memset(r, 0, sizeof(*r));
}

static const char *resp_header(const struct http_resp *r, const char *name)
{
    for (size_t i = 0; i < r->n_headers; i++)
        if (strcasecmp(r->names[i], name) == 0)
            return r->values[i];
    return NULL;
}

/*
 * Reads one response (status line, headers, a Content-Length body). Returns 0, or -1 when the
 * connection closed or timed out before a complete response arrived.
 */
static int read_response(int fd, struct http_resp *r)
{
    memset(r, 0, sizeof(*r));
    size_t len = 0;
    /* Byte by byte up to the blank line, so nothing of a following response is consumed. */
    for (;;) {
        if (len + 1 >= sizeof(r->head))
            return -1;
        if (!testraw_recv_exact(fd, r->head + len, 1))
            return -1;
        len++;
        if (len >= 4 && memcmp(r->head + len - 4, "\r\n\r\n", 4) == 0)
            break;
    }
    r->head[len] = '\0';
    if (sscanf(r->head, "HTTP/1.%*c %d", &r->status) != 1)
        return -1;
    char *line = strstr(r->head, "\r\n");
    line += 2;
    while (*line != '\r' && r->n_headers < MAX_HEADERS) {
        char *eol = strstr(line, "\r\n");
        *eol = '\0';
        char *colon = strchr(line, ':');
        if (colon != NULL) {
            *colon = '\0';
            char *v = colon + 1;
            while (*v == ' ')
                v++;
            r->names[r->n_headers] = line;
            r->values[r->n_headers] = v;
            r->n_headers++;
        }
        line = eol + 2;
    }
    const char *cl = resp_header(r, "Content-Length");
    size_t body_len = cl != NULL ? (size_t)strtoull(cl, NULL, 10) : 0;
    r->body = malloc(body_len + 1);
    assert_non_null(r->body);
    if (!testraw_recv_exact(fd, r->body, body_len))
        return -1;
    r->body[body_len] = '\0';
    r->body_len = body_len;
    return 0;
}

/* True when the server has closed fd (EOF or reset) within timeout_ms. */
static bool closed_within(int fd, int timeout_ms)
{
    int64_t deadline = txo_monotonic_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - txo_monotonic_ms();
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, (int)left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        char c;
        ssize_t got = recv(fd, &c, 1, MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR))
            return true;
    }
}

/* One request on fd, the response in r; fails the test when no response arrives. */
static void roundtrip(int fd, const char *request, struct http_resp *r)
{
    assert_true(testraw_send_str(fd, request));
    if (read_response(fd, r) != 0)
        fail_msg("no complete response to: %.60s", request);
}

/* roundtrip() on a connection of its own to port, closed after the response. */
static void request_once(unsigned port, const char *request, struct http_resp *r)
{
    int fd = testraw_dial_from(port, NULL);
    roundtrip(fd, request, r);
    close(fd);
}

/* ---- tests ---- */

static void test_get_status_body_headers_args(void **state)
{
    struct fixture *f = *state;
    int fd = testraw_dial_from(f->port, NULL);
    struct http_resp r;
    roundtrip(fd,
              "GET /info?q=hello%20world&other=1 HTTP/1.1\r\nHost: localhost\r\n"
              "X-Test: abc 123\r\n\r\n",
              &r);
    assert_int_equal(r.status, 203);
    assert_string_equal(r.body, "method=GET\npath=/info\nx-test=abc 123\nq=hello world\n"
                                "missing=(null)\n");
    assert_string_equal(resp_header(&r, "Content-Type"), "text/plain; charset=utf-8");
    assert_int_equal(r.body_len, strlen(r.body));
    assert_null(resp_header(&r, "Retry-After"));
    resp_release(&r);

    /* Other methods and the default JSON content type. */
    roundtrip(fd, "DELETE /nowhere HTTP/1.1\r\nHost: localhost\r\n\r\n", &r);
    assert_int_equal(r.status, 404);
    assert_string_equal(r.body, "{\"error\":\"not_found\"}");
    assert_string_equal(resp_header(&r, "Content-Type"), "application/json");
    resp_release(&r);
    close(fd);
    assert_int_equal(atomic_load(&f->app.calls), 2);
    stop(f);
}

/*
 * POST /echo of body (len bytes, a multiple of pieces) in pieces writes 20 ms apart, so that the
 * server reads it in as many: the answer must be 200 with the body whole, of content_type (NULL:
 * any).
 */
static void post_echoed(int fd, const char *body, size_t len, int pieces, const char *content_type)
{
    char head[256];
    snprintf(head, sizeof(head),
             "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: %zu\r\n\r\n", len);
    assert_true(testraw_send_str(fd, head));
    size_t piece = len / (size_t)pieces;
    for (int i = 0; i < pieces; i++) {
        assert_true(testraw_send(fd, body + (size_t)i * piece, piece));
        if (pieces > 1)
            txo_sleep_ms(20); /* separate TCP segments, separate reads on the server */
    }
    struct http_resp r;
    assert_int_equal(read_response(fd, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, len);
    assert_memory_equal(r.body, body, len);
    if (content_type != NULL)
        assert_string_equal(resp_header(&r, "Content-Type"), content_type);
    resp_release(&r);
}

static void test_post_body_delivered_exactly(void **state)
{
    struct fixture *f = *state;
    int fd = testraw_dial_from(f->port, NULL);

    /* A small JSON body, then 60 KB of every byte value but NUL sent in six writes. */
    struct http_resp r;
    roundtrip(fd,
              "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
              "Content-Length: 13\r\n\r\n{\"a\": [1, 2]}",
              &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"a\": [1, 2]}");
    resp_release(&r);

    enum { BIG = 60 * 1024, PIECES = 6 };
    char *body = malloc(BIG);
    assert_non_null(body);
    for (size_t i = 0; i < BIG; i++)
        body[i] = (char)(1 + (i * 7 + i / 251) % 255);
    post_echoed(fd, body, BIG, PIECES, "application/octet-stream");

    /* Exactly max_body_bytes is still accepted. */
    size_t max = 65536;
    char *full = malloc(max);
    assert_non_null(full);
    memset(full, 'x', max);
    post_echoed(fd, full, max, 1, NULL);
    free(full);
    free(body);
    close(fd);
    assert_int_equal(atomic_load(&f->app.calls), 3);
    stop(f);
}

static void test_keep_alive(void **state)
{
    struct fixture *f = *state;
    int fd = testraw_dial_from(f->port, NULL);
    struct http_resp r;
    /* Both requests written at once (pipelined), then a third after the answers. */
    assert_true(
        testraw_send_str(fd, "GET /info?q=1 HTTP/1.1\r\nHost: a\r\n\r\n"
                             "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"));
    assert_int_equal(read_response(fd, &r), 0);
    assert_int_equal(r.status, 203);
    assert_non_null(strstr(r.body, "q=1\n"));
    const char *conn = resp_header(&r, "Connection");
    assert_true(conn == NULL || strcasecmp(conn, "close") != 0);
    resp_release(&r);
    assert_int_equal(read_response(fd, &r), 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "hello");
    conn = resp_header(&r, "Connection");
    assert_true(conn == NULL || strcasecmp(conn, "close") != 0);
    resp_release(&r);
    roundtrip(fd, "GET /info?q=3 HTTP/1.1\r\nHost: a\r\n\r\n", &r);
    assert_int_equal(r.status, 203);
    assert_non_null(strstr(r.body, "q=3\n"));
    resp_release(&r);
    assert_false(closed_within(fd, 100));
    close(fd);
    assert_int_equal(atomic_load(&f->app.calls), 3);
    stop(f);
}

static void assert_413_json(const struct http_resp *r, size_t max)
{
    assert_int_equal(r->status, 413);
    assert_string_equal(resp_header(r, "Content-Type"), "application/json");
    json_error_t jerr;
    json_t *doc = json_loadb(r->body, r->body_len, 0, &jerr);
    if (doc == NULL)
        fail_msg("413 body is not JSON: %s (%s)", r->body, jerr.text);
    assert_string_equal(json_string_value(json_object_get(doc, "error")), "payload_too_large");
    char limit[32];
    snprintf(limit, sizeof(limit), "%zu", max);
    assert_non_null(strstr(json_string_value(json_object_get(doc, "message")), limit));
    json_decref(doc);
}

/* Reads the answer of /echo on fd, which must be 200 with a body of len bytes, and closes fd. */
static void assert_echoed(int fd, size_t len)
{
    struct http_resp r;
    assert_int_equal(read_response(fd, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, len);
    resp_release(&r);
    close(fd);
}

static void test_announced_body_over_limit_is_413(void **state)
{
    struct fixture *f = *state;

    /* The refusal comes on the headers alone: the client never has to send the body. */
    struct http_resp r;
    request_once(f->port, "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1025\r\n\r\n", &r);
    assert_413_json(&r, 1024);
    resp_release(&r);

    /* A huge announced length (beyond size_t arithmetic games) is refused the same way. */
    request_once(f->port,
                 "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551615\r\n\r\n",
                 &r);
    assert_true(r.status == 413 || r.status == 400);
    resp_release(&r);

    /* At the limit the handler gets it. */
    int fd = testraw_dial_from(f->port, NULL);
    char body[1024];
    memset(body, 'b', sizeof(body));
    assert_true(
        testraw_send_str(fd, "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1024\r\n\r\n"));
    assert_true(testraw_send(fd, body, sizeof(body)));
    assert_echoed(fd, 1024);
    assert_int_equal(atomic_load(&f->app.calls), 1); /* only the last one */
    stop(f);
}

#define CHUNKED_POST "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"

/*
 * n chunks of size bytes of 'c' (size at most 1024), pause_ms after each; false as soon as a
 * send fails (a server that refused the body may have closed).
 */
static bool send_chunks(int fd, int n, size_t size, int pause_ms)
{
    char chunk[1024], head[16];
    assert_true(size <= sizeof(chunk));
    memset(chunk, 'c', size);
    snprintf(head, sizeof(head), "%zx\r\n", size);
    for (int i = 0; i < n; i++) {
        if (!testraw_send_str(fd, head) || !testraw_send(fd, chunk, size) ||
            !testraw_send_str(fd, "\r\n"))
            return false;
        if (pause_ms > 0)
            txo_sleep_ms(pause_ms);
    }
    return true;
}

static void test_chunked_body_within_limit(void **state)
{
    struct fixture *f = *state;

    /* A chunked body is assembled for the handler, also when it ends exactly at the limit. */
    int fd = testraw_dial_from(f->port, NULL);
    struct http_resp r;
    roundtrip(fd, CHUNKED_POST "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "hello world");
    resp_release(&r);

    assert_true(testraw_send_str(fd, CHUNKED_POST));
    assert_true(send_chunks(fd, 2, 512, 0));
    assert_true(testraw_send_str(fd, "0\r\n\r\n"));
    assert_echoed(fd, 1024);
    assert_int_equal(atomic_load(&f->app.calls), 2);
    stop(f);
}

/* The refusal comes in the middle of the upload, as soon as the limit is crossed. */
static void test_chunked_body_over_limit_is_413(void **state)
{
    struct fixture *f = *state;

    /* 3 chunks of 400 bytes: the third crosses the limit. */
    int fd = testraw_dial_from(f->port, NULL);
    struct http_resp r;
    assert_true(testraw_send_str(fd, CHUNKED_POST));
    (void)send_chunks(fd, 3, 400, 20); /* the server may close once it has refused */
    (void)testraw_send_str(fd, "0\r\n\r\n");
    if (read_response(fd, &r) != 0)
        fail_msg("chunked body over the limit: connection closed without a response");
    assert_413_json(&r, 1024);
    resp_release(&r);
    close(fd);
    assert_int_equal(atomic_load(&f->app.calls), 0); /* not called for the refused body */
    stop(f);
}

static void test_retry_after(void **state)
{
    struct fixture *f = *state;
    struct http_resp r;
    request_once(f->port, "GET /retry HTTP/1.1\r\nHost: a\r\n\r\n", &r);
    assert_int_equal(r.status, 503);
    assert_string_equal(resp_header(&r, "Retry-After"), "7");
    assert_string_equal(r.body, "{\"error\":\"overloaded\"}");
    resp_release(&r);
    stop(f);
}

static void test_slow_client_is_disconnected(void **state)
{
    (void)state;
    struct fixture f;
    struct txo_http_server_opts opts;
    txo_http_server_opts_init(&opts);
    opts.port = 0;
    opts.timeout_s = 1;
    opts.header_timeout_s = 1;
    opts.body_timeout_s = 1;
    start_with(&f, &opts);

    /* Half a request line and headers, then silence. */
    int fd = testraw_dial_from(f.port, NULL);
    int64_t t0 = txo_monotonic_ms();
    assert_true(testraw_send_str(fd, "GET /info HTTP/1.1\r\nHost: a\r\n"));
    assert_true(closed_within(fd, 3000));
    int64_t elapsed = txo_monotonic_ms() - t0;
    assert_true(elapsed >= 800); /* not at once: after the timeout */
    close(fd);

    /* Half a body, then silence. */
    fd = testraw_dial_from(f.port, NULL);
    t0 = txo_monotonic_ms();
    assert_true(
        testraw_send_str(fd, "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nabc"));
    assert_true(closed_within(fd, 3000));
    assert_true(txo_monotonic_ms() - t0 >= 800);
    close(fd);

    /* An idle keep-alive connection is closed too. */
    fd = testraw_dial_from(f.port, NULL);
    struct http_resp r;
    roundtrip(fd, "GET /info HTTP/1.1\r\nHost: a\r\n\r\n", &r);
    assert_int_equal(r.status, 203);
    resp_release(&r);
    assert_true(closed_within(fd, 3000));
    close(fd);
    assert_int_equal(atomic_load(&f.app.calls), 1);
    stop(&f);
}

struct slow_client {
    unsigned port;
    int rc; /* read_response's result */
    int status;
    char body[64];
};

static void *slow_client_main(void *arg)
{
    struct slow_client *c = arg;
    int fd = testraw_try_dial(c->port);
    c->rc = -1;
    if (fd < 0)
        return NULL;
    if (testraw_send_str(fd, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")) {
        struct http_resp r;
        c->rc = read_response(fd, &r);
        if (c->rc == 0) {
            c->status = r.status;
            snprintf(c->body, sizeof(c->body), "%s", r.body);
        }
        resp_release(&r);
    }
    close(fd);
    return NULL;
}

/* The response of a handler that is still running when stop is called is delivered. */
static void test_stop_finishes_request_in_flight(void **state)
{
    struct fixture *f = *state;
    unsigned port = f->port;
    struct slow_client c = {.port = port};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, slow_client_main, &c), 0);
    int64_t deadline = txo_monotonic_ms() + 5000;
    while (atomic_load(&f->app.slow_entered) == 0 && txo_monotonic_ms() < deadline)
        txo_sleep_ms(1);
    assert_int_equal(atomic_load(&f->app.slow_entered), 1);

    int64_t t0 = txo_monotonic_ms();
    stop(f);
    int64_t stop_ms = txo_monotonic_ms() - t0;
    /* stop waited for the handler (it sleeps 300 ms) */
    assert_int_equal(atomic_load(&f->app.slow_finished), 1);
    pthread_join(th, NULL);
    if (c.rc != 0)
        fail_msg("the request in flight lost its response on stop (stop took %lld ms)",
                 (long long)stop_ms);
    assert_int_equal(c.status, 200);
    assert_string_equal(c.body, "{\"slow\":\"done\"}");

    /* Nothing listens any more. */
    int fd = testraw_try_dial(port);
    int saved = errno;
    if (fd >= 0)
        close(fd);
    assert_int_equal(fd, -1);
    assert_int_equal(saved, ECONNREFUSED);
}

static void test_stop_when_idle(void **state)
{
    struct fixture *f = *state;
    unsigned port = f->port;
    /* An idle keep-alive connection does not hold stop up for the 30 s timeout. */
    int fd = testraw_dial_from(port, NULL);
    struct http_resp r;
    roundtrip(fd, "GET /info HTTP/1.1\r\nHost: a\r\n\r\n", &r);
    resp_release(&r);
    int64_t t0 = txo_monotonic_ms();
    stop(f);
    assert_true(txo_monotonic_ms() - t0 < 2000);
    assert_true(closed_within(fd, 1000));
    close(fd);
    fd = testraw_try_dial(port);
    assert_int_equal(fd, -1);
    txo_http_server_stop(NULL); /* no-op */
}

/* A request still being read when stop is called is answered 503 with Retry-After, not cut:
 * its client can send it to another instance at once. */
static void test_stop_answers_request_being_read(void **state)
{
    struct fixture *f = *state;
    int fd = testraw_dial_from(f->port, NULL);
    assert_true(testraw_send_str(fd, "POST /echo HTTP/1.1\r\nHost: a\r\n")); /* half a head */
    txo_sleep_ms(500); /* the I/O thread reads it at once; this is ample */
    int64_t t0 = txo_monotonic_ms();
    stop(f); /* the answer waits in the socket; stop lingers for the client at most 2 s */
    assert_true(txo_monotonic_ms() - t0 < 5000);
    struct http_resp r;
    if (read_response(fd, &r) != 0)
        fail_msg("no answer to a request cut by stop");
    assert_int_equal(r.status, 503);
    assert_string_equal(resp_header(&r, "Retry-After"), "1");
    assert_string_equal(resp_header(&r, "Connection"), "close");
    assert_non_null(strstr(r.body, "\"error\":\"shutting_down\""));
    resp_release(&r);
    close(fd);
}

static void test_bind_errors(void **state)
{
    (void)state;
    struct app app;
    memset(&app, 0, sizeof(app));
    struct txo_http_server_opts opts;
    txo_http_server_opts_init(&opts);
    opts.port = 0;
    struct txo_http_server *srv = NULL;
    struct txo_error err;

    const char *bad_hosts[] = {"localhost", "not-an-ip", "256.1.1.1", "::1", ""};
    for (size_t i = 0; i < TXO_ARRAY_LEN(bad_hosts); i++) {
        txo_error_init(&err);
        opts.host = bad_hosts[i];
        assert_int_equal(txo_http_server_start(&opts, handler, &app, &srv, &err), TXO_EINVAL);
        assert_int_equal(err.code, TXO_EINVAL);
        assert_non_null(strstr(err.msg, bad_hosts[i]));
        assert_null(srv);
    }
    opts.host = "127.0.0.1";
    opts.port = 70000;
    txo_error_init(&err);
    assert_int_equal(txo_http_server_start(&opts, handler, &app, &srv, &err), TXO_EINVAL);
    assert_null(srv);

    /* A port held by a plain listening socket. */
    unsigned busy;
    int holder = testraw_listen(&busy, 4);
    opts.port = busy;
    txo_error_init(&err);
    assert_int_equal(txo_http_server_start(&opts, handler, &app, &srv, &err), TXO_EIO);
    assert_null(srv);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", busy);
    assert_non_null(strstr(err.msg, addr));
    assert_non_null(strstr(err.msg, "in use"));
    close(holder);
    assert_int_equal(app.calls, 0);
}

/*
 * A second server on the port of a running one fails too (no SO_REUSEPORT: the kernel would
 * otherwise split the connections between the two silently).
 */
static void test_port_held_by_another_server(void **state)
{
    struct fixture *f = *state;
    struct app app;
    memset(&app, 0, sizeof(app));
    struct txo_http_server_opts opts;
    txo_http_server_opts_init(&opts);
    opts.port = f->port;
    struct txo_http_server *srv = NULL;
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_http_server_start(&opts, handler, &app, &srv, &err);
    txo_http_server_stop(srv); /* when it wrongly succeeded */
    assert_int_equal(rc, TXO_EIO);
    assert_null(srv);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", f->port);
    assert_non_null(strstr(err.msg, addr));

    /* The first one still serves. */
    struct http_resp r;
    request_once(f->port, "GET /info HTTP/1.1\r\nHost: a\r\n\r\n", &r);
    assert_int_equal(r.status, 203);
    resp_release(&r);
    stop(f);
}

/* A restart binds the same port at once, although the old connections are in TIME_WAIT. */
static void test_restart_on_same_port(void **state)
{
    struct fixture *f = *state;
    unsigned port = f->port;
    int fd = testraw_dial_from(port, NULL);
    struct http_resp r;
    roundtrip(fd, "GET /info HTTP/1.1\r\nHost: a\r\n\r\n", &r);
    resp_release(&r);
    stop(f); /* the server closes the connection first: TIME_WAIT on its side */
    close(fd);

    struct txo_http_server_opts opts;
    txo_http_server_opts_init(&opts);
    opts.port = port;
    start_with(f, &opts);
    assert_int_equal(f->port, port);
    request_once(port, "GET /info HTTP/1.1\r\nHost: a\r\n\r\n", &r);
    assert_int_equal(r.status, 203);
    resp_release(&r);
    stop(f);
}

/* Log lines at warn or worse, captured from any thread. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned log_warnings;
static char log_first[256];

static void capture_sink(enum txo_log_level level, const char *component, const char *msg,
                         const struct txo_log_field *fields, size_t n_fields, void *arg)
{
    (void)arg;
    if (level > TXO_LOG_WARN)
        return;
    pthread_mutex_lock(&log_mu);
    if (log_warnings++ == 0)
        txo_log_format_line(log_first, sizeof(log_first), TXO_LOG_FORMAT_LOGFMT, "-", level,
                            component, msg, fields, n_fields);
    pthread_mutex_unlock(&log_mu);
}

/* Starting and stopping log nothing at warn. */
static void test_start_and_stop_are_quiet(void **state)
{
    (void)state;
    log_warnings = 0;
    log_first[0] = '\0';
    txo_log_set_sink(capture_sink, NULL);
    txo_log_set_level(TXO_LOG_WARN);
    struct fixture f;
    start_default(&f);
    stop(&f);
    txo_log_set_level(TXO_LOG_ERROR);
    txo_log_set_sink(NULL, NULL);
    if (log_warnings != 0)
        fail_msg("%u warning(s), first: %s", log_warnings, log_first);
}

/* ---- 50 connections x 20 requests ---- */

enum { CLIENTS = 50, REQUESTS = 20 };

struct load_client {
    unsigned port;
    int id;
    int ok; /* correct responses */
    char failure[160];
};

static void *load_client_main(void *arg)
{
    struct load_client *c = arg;
    int fd = testraw_try_dial(c->port);
    if (fd < 0) {
        snprintf(c->failure, sizeof(c->failure), "connect: %s", strerror(errno));
        return NULL;
    }
    for (int i = 0; i < REQUESTS; i++) {
        char body[64], req[256];
        int blen = snprintf(body, sizeof(body), "{\"client\":%d,\"request\":%d}", c->id, i);
        snprintf(req, sizeof(req), "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s",
                 blen, body);
        struct http_resp r;
        memset(&r, 0, sizeof(r));
        if (!testraw_send_str(fd, req) || read_response(fd, &r) != 0) {
            snprintf(c->failure, sizeof(c->failure), "request %d: no response", i);
            resp_release(&r);
            break;
        }
        if (r.status != 200 || strcmp(r.body, body) != 0) {
            snprintf(c->failure, sizeof(c->failure), "request %d: %d %.60s", i, r.status, r.body);
            resp_release(&r);
            break;
        }
        resp_release(&r);
        c->ok++;
    }
    close(fd);
    return NULL;
}

static void test_concurrent_connections(void **state)
{
    struct fixture *f = *state;
    static struct load_client clients[CLIENTS];
    pthread_t th[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        memset(&clients[i], 0, sizeof(clients[i]));
        clients[i].port = f->port;
        clients[i].id = i;
        assert_int_equal(pthread_create(&th[i], NULL, load_client_main, &clients[i]), 0);
    }
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < CLIENTS; i++) {
        if (clients[i].ok != REQUESTS)
            fail_msg("client %d: %d of %d answered: %s", i, clients[i].ok, REQUESTS,
                     clients[i].failure);
    }
    assert_int_equal(atomic_load(&f->app.calls), CLIENTS * REQUESTS);
    stop(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_status_body_headers_args),
        cmocka_unit_test(test_post_body_delivered_exactly),
        cmocka_unit_test(test_keep_alive),
        cmocka_unit_test_setup_teardown(test_announced_body_over_limit_is_413, setup_body_limit,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunked_body_within_limit, setup_body_limit, teardown),
        cmocka_unit_test_setup_teardown(test_chunked_body_over_limit_is_413, setup_body_limit,
                                        teardown),
        cmocka_unit_test(test_retry_after),
        cmocka_unit_test_setup(test_slow_client_is_disconnected, testrun_no_fixture),
        cmocka_unit_test(test_stop_finishes_request_in_flight),
        cmocka_unit_test(test_stop_when_idle),
        cmocka_unit_test(test_stop_answers_request_being_read),
        cmocka_unit_test_setup(test_bind_errors, testrun_no_fixture),
        cmocka_unit_test(test_port_held_by_another_server),
        cmocka_unit_test(test_restart_on_same_port),
        cmocka_unit_test_setup(test_start_and_stop_are_quiet, testrun_no_fixture),
        cmocka_unit_test(test_concurrent_connections),
    };
    txo_log_set_level(getenv("TXO_TEST_LOG") ? TXO_LOG_DEBUG : TXO_LOG_ERROR);
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
}
