/*
 * Hostile input against a real `txo serve`, sent as raw bytes on raw sockets (no libcurl: a
 * client library would normalize exactly the bytes these tests are about). Every case checks
 * the status and the JSON error body, whether the connection was closed (read returns 0), that
 * exactly one response came back, and that nothing was written (orders, items, outbox events,
 * idempotency keys).
 *
 *   smuggling   two Content-Length (equal or not, the first one short with a request hidden
 *               in the body), Content-Length with chunked, "Transfer-Encoding : chunked",
 *               unknown codings, obs-fold, bare LF, bad lengths and chunk sizes, missing or
 *               repeated Host, other HTTP versions: 400/501/505, closed, one response.
 *   NUL         in an Idempotency-Key, an Authorization header, the path (%00) and the query.
 *   slow        one byte at a time: the head and the body have deadlines (408, closed); a
 *               client address past its connection limit gets 503; on a full server a new
 *               connection takes the slot of the oldest silent one; the deadlines close the
 *               rest (test_http_slots.c has the connection policy at full scale).
 *   JSON        a body whose parse error quotes half a UTF-8 character, bad UTF-8, overlong
 *               encodings, encoded surrogates, deep nesting: 400 malformed_json, never 500.
 *   limits      huge heads (431), long request lines (414), many headers (431), bodies over
 *               --max-body (413): JSON, one head, closed.
 *   API         two Idempotency-Keys, after_id past int64, duplicate query arguments, tokens
 *               that differ in length or content.
 *   pipelining  requests written at once are answered in order; a refused one ends the
 *               connection after the answers before it.
 *   SKUs        another case or a trailing space is another SKU (binary collation).
 *
 * Runs under ASan/UBSan in `make test-asan` (TXO_BIN is then the sanitized build), and the
 * server must exit 0 on SIGTERM, so a leak or a sanitizer report fails the test.
 */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "testrun.h"
#include "orders.h"
#include "testdb.h"
#include "testhttp.h"
#include "testorders.h"
#include "testproc.h"
#include "testraw.h"

#define TOKEN "s3cret-token"

static int setup(void **state)
{
    struct testhttp_daemon *c = testdb_fixture_new(sizeof(*c), "hostile", TESTDB_NEW_EXPORT_ENV);
    testorders_stock(c->t.db, "SKU-A", 1000);
    *state = c;
    return 0;
}

/* Starts `txo serve` with the admin token and args (NULL-terminated, at most 12). */
static void start(struct testhttp_daemon *c, const char *const *args)
{
    const char *argv[16] = {"--admin-token", TOKEN};
    size_t n = 2;
    for (size_t i = 0; args != NULL && args[i] != NULL; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    c->port = testhttp_txo_start(&c->srv, "hostile", "serve", argv);
}

static void stop(struct testhttp_daemon *c)
{
    testhttp_txo_stop(&c->srv, "txo serve");
}

/* ---- raw client (testraw.h) ---- */

static int dial(unsigned port)
{
    return testraw_dial_from(port, NULL);
}

/* r is {"error": code (NULL: any), "message": non-empty}, as JSON. */
static void expect_json_error(const struct testraw_reply *r, int status, const char *code,
                              const char *what)
{
    if (r->status != status)
        fail_msg("%s: want %d, got %d: %s", what, status, r->status, r->body);
    if (strcmp(r->content_type, "application/json") != 0)
        fail_msg("%s: Content-Type %s, want application/json", what, r->content_type);
    json_error_t jerr;
    json_t *doc = json_loadb(r->body, r->len, 0, &jerr);
    if (doc == NULL)
        fail_msg("%s: body is not JSON (%s): %s", what, jerr.text, r->body);
    const char *err = json_string_value(json_object_get(doc, "error"));
    const char *msg = json_string_value(json_object_get(doc, "message"));
    if (err == NULL || msg == NULL || msg[0] == '\0' || (code != NULL && strcmp(err, code) != 0))
        fail_msg("%s: want {\"error\":\"%s\",\"message\":...}, got %s", what,
                 code != NULL ? code : "*", r->body);
    json_decref(doc);
}

static int64_t count(struct testhttp_daemon *c, const char *table)
{
    char sql[128];
    snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM %s", table);
    return testdb_i64(c->t.db, sql, NULL, 0);
}

/* The rows POST /orders writes: orders, items, events, keys. */
static void expect_rows(struct testhttp_daemon *c, int64_t orders, const char *what)
{
    int64_t o = count(c, "orders");
    int64_t i = count(c, "order_items");
    int64_t e = count(c, "outbox_events");
    int64_t k = count(c, "idempotency_keys");
    if (o != orders || e != orders || k != orders || (orders == 0 && i != 0))
        fail_msg("%s: want %lld orders/events/keys, found orders=%lld items=%lld events=%lld "
                 "keys=%lld",
                 what, (long long)orders, (long long)o, (long long)i, (long long)e, (long long)k);
}

/*
 * Sends n bytes on a new connection and expects exactly one answer: status with the JSON error
 * code, Connection: close, then the server closes the connection without another byte.
 */
static void expect_refused(struct testhttp_daemon *c, const char *bytes, size_t n, int status,
                           const char *code, const char *what)
{
    int fd = dial(c->port);
    (void)testraw_send(fd, bytes, n);
    struct testraw_reply r;
    if (!testraw_read_reply(fd, &r))
        fail_msg("%s: no response", what);
    expect_json_error(&r, status, code, what);
    if (!r.conn_close)
        fail_msg("%s: %d without Connection: close", what, status);
    char extra[512];
    if (!testraw_closed_within(fd, 3000, extra, sizeof(extra)))
        fail_msg("%s: the connection stayed open (or more came: %.80s)", what, extra);
    close(fd);
}

#define REFUSED(c, lit, status, code, what)                                                        \
    expect_refused(c, lit, sizeof(lit) - 1, status, code, what)

static const char ORDER[] =
    "{\"customer_id\":7,\"items\":[{\"sku\":\"SKU-A\",\"qty\":1,\"price_cents\":100}]}";

/* A complete POST /orders with key and body (lengths as given). */
static size_t order_request(char *buf, size_t cap, const char *key, const char *body,
                            size_t body_len)
{
    int n = snprintf(buf, cap,
                     "POST /orders HTTP/1.1\r\nHost: t\r\nIdempotency-Key: %s\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     key, body_len);
    assert_true(n > 0 && (size_t)n + body_len < cap);
    memcpy(buf + n, body, body_len);
    return (size_t)n + body_len;
}

/* One request on fd, kept alive; returns the reply. */
static void exchange(int fd, const char *bytes, size_t n, struct testraw_reply *r, const char *what)
{
    if (!testraw_send(fd, bytes, n) || !testraw_read_reply(fd, r))
        fail_msg("%s: no response", what);
}

static void exchange_str(int fd, const char *request, struct testraw_reply *r, const char *what)
{
    exchange(fd, request, strlen(request), r, what);
}

/* ---- smuggling ---- */

struct shape {
    const char *what;
    const char *bytes;
    int status;
    const char *code;
};

#define POST_ORDERS "POST /orders HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
#define BODY_LEN    "69"

static void test_smuggling_shapes_are_refused(void **state)
{
    struct testhttp_daemon *c = *state;
    start(c, NULL);
    assert_int_equal(strlen(ORDER), 69);
    static const struct shape shapes[] = {
        {"two different Content-Length",
         POST_ORDERS "Idempotency-Key: s1\r\nContent-Length: 5\r\nContent-Length: " BODY_LEN
                     "\r\n\r\n"
                     "{\"customer_id\":7,\"items\":[{\"sku\":\"SKU-A\",\"qty\":1,"
                     "\"price_cents\":100}]}",
         400, "bad_request"},
        {"two equal Content-Length",
         POST_ORDERS "Idempotency-Key: s2\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", 400,
         "bad_request"},
        {"Content-Length: 5, the body holds a second request",
         POST_ORDERS "Idempotency-Key: s3\r\nContent-Length: 5\r\nContent-Length: 44\r\n\r\n"
                     "{\"a\":GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n",
         400, "bad_request"},
        {"Content-Length with chunked",
         POST_ORDERS "Idempotency-Key: s4\r\nContent-Length: 7\r\nTransfer-Encoding: chunked\r\n"
                     "\r\n2\r\n{}\r\n0\r\n\r\n",
         400, "bad_request"},
        {"chunked, then Content-Length",
         POST_ORDERS "Idempotency-Key: s5\r\nTransfer-Encoding: chunked\r\nContent-Length: 7\r\n"
                     "\r\n2\r\n{}\r\n0\r\n\r\n",
         400, "bad_request"},
        {"space before the colon",
         POST_ORDERS
         "Idempotency-Key: s6\r\nTransfer-Encoding : chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
         400, "bad_request"},
        {"tab before the colon", POST_ORDERS "Content-Length\t: 2\r\n\r\n{}", 400, "bad_request"},
        {"two Transfer-Encoding",
         POST_ORDERS "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         400, "bad_request"},
        {"gzip, chunked", POST_ORDERS "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501,
         "not_implemented"},
        {"chunked, chunked", POST_ORDERS "Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
         501, "not_implemented"},
        {"xchunked", POST_ORDERS "Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", 501,
         "not_implemented"},
        {"chunked in HTTP/1.0",
         "POST /orders HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
         "bad_request"},
        {"obs-fold", "GET /healthz HTTP/1.1\r\nHost: t\r\nX-A: a\r\n b\r\n\r\n", 400,
         "bad_request"},
        {"folded Content-Length", POST_ORDERS "Content-Length:\r\n 2\r\n\r\n{}", 400,
         "bad_request"},
        {"bare LF", "GET /healthz HTTP/1.1\nHost: t\n\n", 400, "bad_request"},
        {"bare CR", "GET /healthz HTTP/1.1\rHost: t\r\n\r\n", 400, "bad_request"},
        {"Content-Length +2", POST_ORDERS "Content-Length: +2\r\n\r\n{}", 400, "bad_request"},
        {"Content-Length list", POST_ORDERS "Content-Length: 2, 2\r\n\r\n{}", 400, "bad_request"},
        {"Content-Length -1", POST_ORDERS "Content-Length: -1\r\n\r\n{}", 400, "bad_request"},
        {"Content-Length hex", POST_ORDERS "Content-Length: 0x2\r\n\r\n{}", 400, "bad_request"},
        {"Content-Length abc", POST_ORDERS "Content-Length: abc\r\n\r\n{}", 400, "bad_request"},
        {"Content-Length of 30 digits",
         POST_ORDERS "Content-Length: 100000000000000000000000000002\r\n\r\n{}", 400,
         "bad_request"},
        {"chunk size not hex", POST_ORDERS "Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400,
         "bad_request"},
        {"chunk size overflow",
         POST_ORDERS "Transfer-Encoding: chunked\r\n\r\n10000000000000002\r\n{}\r\n0\r\n\r\n", 400,
         "bad_request"},
        {"chunk size with a space", POST_ORDERS "Transfer-Encoding: chunked\r\n\r\n 2\r\n{}\r\n",
         400, "bad_request"},
        {"chunk size negative", POST_ORDERS "Transfer-Encoding: chunked\r\n\r\n-2\r\n{}\r\n", 400,
         "bad_request"},
        {"chunk longer than its size",
         POST_ORDERS "Transfer-Encoding: chunked\r\n\r\n1\r\n{}\r\n0\r\n\r\n", 400, "bad_request"},
        {"chunk size without CRLF", POST_ORDERS "Transfer-Encoding: chunked\r\n\r\n2\n{}\n0\n\n",
         400, "bad_request"},
        {"no Host in HTTP/1.1", "GET /healthz HTTP/1.1\r\n\r\n", 400, "bad_request"},
        {"two Host", "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "bad_request"},
        {"HTTP/2.0", "GET /healthz HTTP/2.0\r\nHost: t\r\n\r\n", 505, "http_version_not_supported"},
        {"HTTP/1.2", "GET /healthz HTTP/1.2\r\nHost: t\r\n\r\n", 505, "http_version_not_supported"},
        {"HTTP/1.10", "GET /healthz HTTP/1.10\r\nHost: t\r\n\r\n", 400, "bad_request"},
        {"lower-case version", "GET /healthz http/1.1\r\nHost: t\r\n\r\n", 400, "bad_request"},
        {"two spaces", "GET  /healthz HTTP/1.1\r\nHost: t\r\n\r\n", 400, "bad_request"},
        {"absolute form", "GET http://t/healthz HTTP/1.1\r\nHost: t\r\n\r\n", 400, "bad_request"},
        {"control byte in a value", "GET /healthz HTTP/1.1\r\nHost: t\r\nX-A: a\x01b\r\n\r\n", 400,
         "bad_request"},
        {"DEL in a value", "GET /healthz HTTP/1.1\r\nHost: t\r\nX-A: a\x7f\r\n\r\n", 400,
         "bad_request"},
        {"empty header name", "GET /healthz HTTP/1.1\r\nHost: t\r\n: a\r\n\r\n", 400,
         "bad_request"},
        {"bad byte in a name", "GET /healthz HTTP/1.1\r\nHost: t\r\nX(A): a\r\n\r\n", 400,
         "bad_request"},
        {"space in the target", "GET /heal thz HTTP/1.1\r\nHost: t\r\n\r\n", 400, "bad_request"},
        {"UTF-8 in the target", "GET /\xc3\xa9 HTTP/1.1\r\nHost: t\r\n\r\n", 400, "bad_request"},
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(shapes); i++)
        expect_refused(c, shapes[i].bytes, strlen(shapes[i].bytes), shapes[i].status,
                       shapes[i].code, shapes[i].what);
    expect_rows(c, 0, "after the smuggling shapes");
    stop(c);
}

/* ---- NUL bytes ---- */

static void test_nul_bytes_are_refused(void **state)
{
    struct testhttp_daemon *c = *state;
    start(c, NULL);
    /* Order 1 exists, so a path cut at the NUL would find it. */
    char req[1024];
    size_t n = order_request(req, sizeof(req), "first", ORDER, strlen(ORDER));
    int fd = dial(c->port);
    struct testraw_reply r;
    exchange(fd, req, n, &r, "the first order");
    assert_int_equal(r.status, 201);
    close(fd);
    expect_rows(c, 1, "after the first order");

    char key_a[1024];
    static const char head_a[] = "POST /orders HTTP/1.1\r\nHost: t\r\nIdempotency-Key: k\0a\r\n"
                                 "Content-Type: application/json\r\nContent-Length: 69\r\n\r\n";
    memcpy(key_a, head_a, sizeof(head_a) - 1);
    memcpy(key_a + sizeof(head_a) - 1, ORDER, 69);
    expect_refused(c, key_a, sizeof(head_a) - 1 + 69, 400, "bad_request", "Idempotency-Key k\\0a");
    key_a[sizeof("POST /orders HTTP/1.1\r\nHost: t\r\nIdempotency-Key: k\0") - 1] = 'b';
    expect_refused(c, key_a, sizeof(head_a) - 1 + 69, 400, "bad_request", "Idempotency-Key k\\0b");
    REFUSED(c, "GET /dlq HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " TOKEN "\0junk\r\n\r\n", 400,
            "bad_request", "a token followed by NUL and junk");
    REFUSED(c, "GET /orders/1%00 HTTP/1.1\r\nHost: t\r\n\r\n", 400, "bad_request", "/orders/1%00");
    REFUSED(c, "GET /orders/1%00x HTTP/1.1\r\nHost: t\r\n\r\n", 400, "bad_request",
            "/orders/1%00x");
    REFUSED(c, "GET /dlq?limit=1%00 HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " TOKEN "\r\n\r\n",
            400, "bad_request", "/dlq?limit=1%00");
    REFUSED(c, "GET /orders/1%zz HTTP/1.1\r\nHost: t\r\n\r\n", 400, "bad_request",
            "a malformed escape");
    REFUSED(c, "GET /orders/1%0 HTTP/1.1\r\nHost: t\r\n\r\n", 400, "bad_request",
            "a truncated escape");
    REFUSED(c, "GET /he\0althz HTTP/1.1\r\nHost: t\r\n\r\n", 400, "bad_request", "NUL in the path");
    REFUSED(c, "GET /healthz HTTP/1.1\r\nHo\0st: t\r\n\r\n", 400, "bad_request",
            "NUL in a header name");
    expect_rows(c, 1, "after the NUL requests");

    /* The real order is still served, and the same key replays it. */
    fd = dial(c->port);
    exchange_str(fd, "GET /orders/1 HTTP/1.1\r\nHost: t\r\n\r\n", &r, "GET /orders/1");
    assert_int_equal(r.status, 200);
    close(fd);
    stop(c);
}

/* ---- slow clients ---- */

/* Sends head one byte every 100 ms until a response arrives; returns it, or fails. */
static void trickle_until_answer(int fd, const char *bytes, struct testraw_reply *r,
                                 int64_t *took_ms, const char *what)
{
    int64_t t0 = txo_monotonic_ms();
    for (size_t i = 0;; i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0)
            break;
        if (bytes[i % strlen(bytes)] != '\0')
            (void)testraw_send(fd, &bytes[i % strlen(bytes)], 1);
        if (txo_monotonic_ms() - t0 > 8000)
            fail_msg("%s: still no answer after 8 s of trickling", what);
    }
    *took_ms = txo_monotonic_ms() - t0;
    if (!testraw_read_reply(fd, r))
        fail_msg("%s: the connection was closed without a 408", what);
}

static void test_slow_clients_are_closed(void **state)
{
    struct testhttp_daemon *c = *state;
    const char *args[] = {"--http-header-timeout",
                          "1",
                          "--http-body-timeout",
                          "1",
                          "--max-connections",
                          "16",
                          "--max-connections-per-client",
                          "8",
                          NULL};
    start(c, args);

    /* A head trickling in, one byte per 100 ms, never ends (the header repeats). */
    int fd = dial(c->port);
    assert_true(testraw_send_str(fd, "GET /healthz HTTP/1.1\r\nHost: t\r\n"));
    struct testraw_reply r;
    int64_t ms = 0;
    trickle_until_answer(fd, "X-Slow: aaaaaaaaaaaaaaaa\r\n", &r, &ms, "slow head");
    expect_json_error(&r, 408, "request_timeout", "slow head");
    assert_true(ms < 3000);
    char extra[256];
    assert_true(testraw_closed_within(fd, 3000, extra, sizeof(extra)));
    close(fd);

    /* A body of 1000 bytes trickling in. */
    fd = dial(c->port);
    assert_true(
        testraw_send_str(fd, POST_ORDERS "Idempotency-Key: slow\r\nContent-Length: 1000\r\n\r\n"));
    trickle_until_answer(fd, "{", &r, &ms, "slow body");
    expect_json_error(&r, 408, "request_timeout", "slow body");
    assert_true(ms < 3000);
    assert_true(testraw_closed_within(fd, 3000, extra, sizeof(extra)));
    close(fd);

    /* 8 silent connections from 127.0.0.1 are its limit: a 9th is turned away, and 8 more
     * from 127.0.0.2 fill the server. */
    txo_sleep_ms(200); /* the server has seen the two closes */
    int held[16];
    for (int i = 0; i < 8; i++)
        held[i] = testraw_dial_from(c->port, "127.0.0.1");
    for (int i = 8; i < 16; i++)
        held[i] = testraw_dial_from(c->port, "127.0.0.2");
    txo_sleep_ms(100);
    fd = testraw_dial_from(c->port, "127.0.0.1");
    (void)testraw_send_str(fd, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    if (testraw_read_reply(fd, &r))
        expect_json_error(&r, 503, "too_many_connections", "9th connection of one address");
    assert_true(testraw_closed_within(fd, 3000, extra, sizeof(extra)));
    close(fd);
    /* A 17th takes the slot of the oldest silent connection, long before its deadline. */
    fd = testraw_dial_from(c->port, "127.0.0.3");
    exchange_str(fd, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n", &r, "17th connection");
    assert_int_equal(r.status, 200);
    close(fd);
    if (!testraw_closed_within(held[0], 300, extra, sizeof(extra)))
        fail_msg("the oldest silent connection kept its slot");
    struct pollfd second = {.fd = held[1], .events = POLLIN};
    if (poll(&second, 1, 0) != 0)
        fail_msg("the second silent connection was closed too, before its deadline");

    /* The head deadline frees them all. */
    for (int i = 0; i < 16; i++) {
        if (!testraw_closed_within(held[i], 3000, extra, sizeof(extra)))
            fail_msg("silent connection %d was not closed by the head deadline", i);
        close(held[i]);
    }
    fd = testraw_dial_from(c->port, "127.0.0.3");
    exchange_str(fd, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n", &r, "after the deadline");
    assert_int_equal(r.status, 200);
    close(fd);
    expect_rows(c, 0, "after the slow clients");
    stop(c);
}

/* ---- JSON bodies ---- */

static void test_malformed_bodies_are_400(void **state)
{
    struct testhttp_daemon *c = *state;
    start(c, NULL);
    struct body {
        const char *what;
        const char *bytes;
        size_t len;
    };
    char *deep = malloc(60001);
    assert_non_null(deep);
    for (size_t i = 0; i < 30000; i++) {
        deep[i] = '[';
        deep[59999 - i] = ']';
    }
    deep[60000] = '\0';
    const struct body bodies[] = {
#define B(what, lit) {what, lit, sizeof(lit) - 1}
        B("an escape cut before half a UTF-8 character", "{\"x\\\xc3\xa9\":1}"),
        B("an invalid escape", "{\"x\\q\":1}"),
        B("invalid UTF-8", "{\"customer_id\":7,\"items\":[{\"sku\":\"\xff\xfe\"}]}"),
        B("an overlong slash", "{\"customer_id\":7,\"items\":[{\"sku\":\"\xc0\xaf\"}]}"),
        B("an overlong NUL", "{\"customer_id\":7,\"items\":[{\"sku\":\"\xc0\x80\"}]}"),
        B("an encoded surrogate", "{\"customer_id\":7,\"items\":[{\"sku\":\"\xed\xa0\x80\"}]}"),
        B("a truncated character", "{\"customer_id\":7,\"items\":[{\"sku\":\"\xe2\x82\"}]}"),
        B("beyond U+10FFFF", "{\"sku\":\"\xf4\x90\x80\x80\"}"),
        B("a raw NUL", "{\"customer_id\":7\0}"),
        B("truncated", "{\"customer_id\":7,\"items\":["),
        B("a lone surrogate escape", "{\"x\":\"\\ud800\"}"),
#undef B
        {"deep nesting", deep, 60000},
    };
    int fd = dial(c->port);
    for (size_t i = 0; i < TXO_ARRAY_LEN(bodies); i++) {
        char *req = malloc(bodies[i].len + 512);
        assert_non_null(req);
        char key[32];
        snprintf(key, sizeof(key), "bad-%zu", i);
        size_t n = order_request(req, bodies[i].len + 512, key, bodies[i].bytes, bodies[i].len);
        struct testraw_reply r;
        exchange(fd, req, n, &r, bodies[i].what);
        free(req);
        expect_json_error(&r, 400, "malformed_json", bodies[i].what);
        assert_false(r.conn_close); /* a body error does not end the connection */
    }
    close(fd);
    free(deep);
    expect_rows(c, 0, "after the malformed bodies");
    stop(c);
}

/* ---- the server's limits ---- */

static void test_limits_answer_json(void **state)
{
    struct testhttp_daemon *c = *state;
    const char *args[] = {"--max-body", "1024", NULL};
    start(c, args);
    size_t big = 20000;
    char *buf = malloc(big + 256);
    assert_non_null(buf);

    /* A header of 10000 bytes. */
    int n = snprintf(buf, 256, "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: ");
    memset(buf + n, 'a', 10000);
    memcpy(buf + n + 10000, "\r\n\r\n", 4);
    expect_refused(c, buf, (size_t)n + 10004, 431, "header_too_large", "a 10 KB header");

    /* A request line of 10000 bytes. */
    n = snprintf(buf, 256, "GET /");
    memset(buf + n, 'a', 10000);
    memcpy(buf + n + 10000, " HTTP/1.1\r\nHost: t\r\n\r\n", 22);
    expect_refused(c, buf, (size_t)n + 10022, 414, "uri_too_long", "a 10 KB request line");

    /* 100 small headers. */
    size_t len = (size_t)snprintf(buf, big, "GET /healthz HTTP/1.1\r\nHost: t\r\n");
    for (int i = 0; i < 100; i++)
        len += (size_t)snprintf(buf + len, big - len, "X-%d: v\r\n", i);
    len += (size_t)snprintf(buf + len, big - len, "\r\n");
    expect_refused(c, buf, len, 431, "header_too_large", "100 headers");

    /* Bodies over --max-body: announced, and chunked. */
    REFUSED(c, POST_ORDERS "Idempotency-Key: big\r\nContent-Length: 1025\r\n\r\n{", 413,
            "payload_too_large", "Content-Length over the limit");
    len = (size_t)snprintf(buf, big,
                           POST_ORDERS "Idempotency-Key: big2\r\n"
                                       "Transfer-Encoding: chunked\r\n\r\n401\r\n");
    memset(buf + len, ' ', 1025);
    expect_refused(c, buf, len + 1025, 413, "payload_too_large", "a chunk over the limit");
    free(buf);

    /* HTTP/1.0 is served and closed; 1.0 keep-alive is kept. */
    int fd = dial(c->port);
    struct testraw_reply r;
    exchange_str(fd, "GET /healthz HTTP/1.0\r\n\r\n", &r, "HTTP/1.0");
    assert_int_equal(r.status, 200);
    char extra[256];
    assert_true(testraw_closed_within(fd, 3000, extra, sizeof(extra)));
    close(fd);
    fd = dial(c->port);
    exchange_str(fd, "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &r,
                 "HTTP/1.0 keep-alive");
    assert_int_equal(r.status, 200);
    exchange_str(fd, "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &r,
                 "HTTP/1.0 keep-alive, again");
    assert_int_equal(r.status, 200);
    close(fd);
    expect_rows(c, 0, "after the limits");
    stop(c);
}

/* ---- API input ---- */

static void test_api_refuses_ambiguous_input(void **state)
{
    struct testhttp_daemon *c = *state;
    start(c, NULL);
    int fd = dial(c->port);
    struct testraw_reply r;
    char req[1024];
    int n = snprintf(req, sizeof(req),
                     POST_ORDERS "Idempotency-Key: one\r\nIdempotency-Key: two\r\n"
                                 "Content-Length: %zu\r\n\r\n%s",
                     strlen(ORDER), ORDER);
    exchange(fd, req, (size_t)n, &r, "two Idempotency-Keys");
    expect_json_error(&r, 400, "invalid_idempotency_key", "two Idempotency-Keys");
    expect_rows(c, 0, "after two Idempotency-Keys");

#define AUTH "Authorization: Bearer " TOKEN "\r\n"
    static const struct {
        const char *request;
        int status;
    } cases[] = {
        {"GET /dlq?after_id=99999999999999999999 HTTP/1.1\r\nHost: t\r\n" AUTH "\r\n", 400},
        {"GET /dlq?after_id=9223372036854775808 HTTP/1.1\r\nHost: t\r\n" AUTH "\r\n", 400},
        {"GET /dlq?after_id=-1 HTTP/1.1\r\nHost: t\r\n" AUTH "\r\n", 400},
        {"GET /dlq?after_id=1&after_id=2 HTTP/1.1\r\nHost: t\r\n" AUTH "\r\n", 400},
        {"GET /dlq?limit=1&limit=1000 HTTP/1.1\r\nHost: t\r\n" AUTH "\r\n", 400},
        {"GET /dlq?after_id=9223372036854775807&limit=1 HTTP/1.1\r\nHost: t\r\n" AUTH "\r\n", 200},
        {"GET /dlq HTTP/1.1\r\nHost: t\r\n\r\n", 401},
        {"GET /dlq HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " TOKEN "x\r\n\r\n", 401},
        {"GET /dlq HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer s3cret\r\n\r\n", 401},
        {"GET /dlq HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer S3cret-token\r\n\r\n", 401},
        {"GET /dlq HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer \r\n\r\n", 401},
        {"GET /dlq HTTP/1.1\r\nHost: t\r\n" AUTH AUTH "\r\n", 401},
        {"GET /dlq HTTP/1.1\r\nHost: t\r\n" AUTH "\r\n", 200},
        {"GET /outbox/parked?limit=0 HTTP/1.1\r\nHost: t\r\n" AUTH "\r\n", 400},
        {"GET /outbox/parked?limit=1001 HTTP/1.1\r\nHost: t\r\n" AUTH "\r\n", 400},
        {"GET /outbox/parked?limit=1&limit=2 HTTP/1.1\r\nHost: t\r\n" AUTH "\r\n", 400},
        {"GET /outbox/parked HTTP/1.1\r\nHost: t\r\n\r\n", 401},
        {"GET /outbox/parked?limit=1000 HTTP/1.1\r\nHost: t\r\n" AUTH "\r\n", 200},
    };
#undef AUTH
    for (size_t i = 0; i < TXO_ARRAY_LEN(cases); i++) {
        exchange(fd, cases[i].request, strlen(cases[i].request), &r, cases[i].request);
        if (r.status != cases[i].status)
            fail_msg("%s: want %d, got %d %s", cases[i].request, cases[i].status, r.status, r.body);
        if (r.status >= 400)
            expect_json_error(&r, r.status, NULL, cases[i].request);
    }
    close(fd);
    expect_rows(c, 0, "after the API cases");
    stop(c);
}

/* ---- pipelining ---- */

static void test_pipelined_requests(void **state)
{
    struct testhttp_daemon *c = *state;
    start(c, NULL);
    char req[2048];
    size_t n = 0;
    n += (size_t)snprintf(req + n, sizeof(req) - n, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    n += order_request(req + n, sizeof(req) - n, "piped", ORDER, strlen(ORDER));
    n += (size_t)snprintf(req + n, sizeof(req) - n,
                          "POST /orders HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                          "Idempotency-Key: piped\r\nContent-Type: application/json\r\n\r\n"
                          "20\r\n%.32s\r\n25\r\n%s\r\n0\r\n\r\n",
                          ORDER, ORDER + 32);
    n += (size_t)snprintf(req + n, sizeof(req) - n,
                          "GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n"
                          "Content-Length: 2\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    int fd = dial(c->port);
    assert_true(testraw_send(fd, req, n));
    struct testraw_reply r;
    assert_true(testraw_read_reply(fd, &r));
    assert_int_equal(r.status, 200);
    assert_true(testraw_read_reply(fd, &r));
    assert_int_equal(r.status, 201);
    char first[sizeof(r.body)];
    memcpy(first, r.body, sizeof(first));
    assert_true(testraw_read_reply(fd, &r)); /* the same order again, chunked: the stored answer */
    assert_int_equal(r.status, 201);
    assert_string_equal(r.body, first);
    assert_true(testraw_read_reply(fd, &r));
    expect_json_error(&r, 400, "bad_request", "the smuggling request after three good ones");
    char extra[256];
    if (!testraw_closed_within(fd, 3000, extra, sizeof(extra)))
        fail_msg("the request hidden after the refused one was answered: %.80s", extra);
    close(fd);
    expect_rows(c, 1, "after the pipeline");
    stop(c);
}

/* ---- SKUs ---- */

/* SKUs are matched byte for byte: another case or a trailing space is another (unknown) SKU. */
static void test_sku_match_is_exact(void **state)
{
    struct testhttp_daemon *c = *state;
    testorders_stock(c->t.db, "fuzz-sku", 5);
    start(c, NULL);
    int fd = dial(c->port);
    static const char *const others[] = {"FUZZ-SKU", "fuzz-sku ", "Fuzz-Sku"};
    struct testraw_reply r;
    char body[256];
    char req[1024];
    for (size_t i = 0; i < TXO_ARRAY_LEN(others); i++) {
        int bl = snprintf(body, sizeof(body),
                          "{\"customer_id\":7,\"items\":[{\"sku\":\"%s\",\"qty\":1,"
                          "\"price_cents\":1}]}",
                          others[i]);
        char key[16];
        snprintf(key, sizeof(key), "sku-%zu", i);
        size_t n = order_request(req, sizeof(req), key, body, (size_t)bl);
        exchange(fd, req, n, &r, others[i]);
        if (r.status != 422)
            fail_msg("SKU \"%s\" matched fuzz-sku: %d %s", others[i], r.status, r.body);
        expect_json_error(&r, 422, NULL, others[i]);
    }
    expect_rows(c, 0, "after the other SKUs");
    int bl = snprintf(body, sizeof(body),
                      "{\"customer_id\":7,\"items\":[{\"sku\":\"fuzz-sku\",\"qty\":1,"
                      "\"price_cents\":1}]}");
    size_t n = order_request(req, sizeof(req), "sku-ok", body, (size_t)bl);
    exchange(fd, req, n, &r, "fuzz-sku itself");
    assert_int_equal(r.status, 201);
    close(fd);
    expect_rows(c, 1, "after fuzz-sku");
    stop(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smuggling_shapes_are_refused),
        cmocka_unit_test(test_nul_bytes_are_refused),
        cmocka_unit_test(test_slow_clients_are_closed),
        cmocka_unit_test(test_malformed_bodies_are_400),
        cmocka_unit_test(test_limits_answer_json),
        cmocka_unit_test(test_api_refuses_ambiguous_input),
        cmocka_unit_test(test_pipelined_requests),
        cmocka_unit_test(test_sku_match_is_exact),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, testhttp_daemon_free_state, NULL, NULL);
}
