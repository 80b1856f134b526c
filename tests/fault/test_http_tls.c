/*
 * TLS for the API: `txo serve --tls-cert --tls-key` with a self-signed certificate the test
 * makes (openssl req), talked to with libcurl that trusts only that certificate. Checks GET
 * and POST over HTTPS, that HTTP/1.1 keep-alive still holds (the second request opens no new
 * connection), that plain HTTP on the TLS port gets no answer, that a client that never
 * finishes its handshake is closed by the head deadline, and that a key file that cannot be
 * used stops the start with a message naming it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "orders.h"
#include "testdb.h"
#include "testhttp.h"
#include "testorders.h"
#include "testproc.h"

struct ctx {
    struct testdb t;
    struct testproc srv;
    char dir[64];
    char cert[128];
    char key[128];
    unsigned port;
    char base[64];
    unsigned body_reads; /* times curl asked for a request body through its read callback */
};

static int setup(void **state)
{
    struct ctx *c = testdb_fixture_new(sizeof(*c), "tls", TESTDB_NEW_EXPORT_ENV);
    testorders_stock(c->t.db, "SKU-A", 100);
    snprintf(c->dir, sizeof(c->dir), "/tmp/txo-tls-XXXXXX");
    assert_non_null(mkdtemp(c->dir));
    snprintf(c->cert, sizeof(c->cert), "%s/cert.pem", c->dir);
    snprintf(c->key, sizeof(c->key), "%s/key.pem", c->dir);
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
             "-addext subjectAltName=IP:127.0.0.1 -keyout %s -out %s 2>/dev/null",
             c->key, c->cert);
    if (system(cmd) != 0)
        fail_msg("could not make a certificate: %s", cmd);
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    testproc_stop_hard(&c->srv);
    unlink(c->cert);
    unlink(c->key);
    rmdir(c->dir);
    testdb_fixture_free(c);
    return 0;
}

static size_t sink(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return size * n;
}

/*
 * curl's read callback: only a request without a body given as POSTFIELDS reads one, and
 * curl's default reads stdin (a test run at a terminal then waits on the keyboard). Counted,
 * and an empty body.
 */
static size_t no_body(char *buf, size_t size, size_t n, void *arg)
{
    (void)buf;
    (void)size;
    (void)n;
    struct ctx *c = arg;
    c->body_reads++;
    return 0;
}

/* One request over HTTPS on h, with body (a POST's) or without (NULL: the handle is set back
 * to a GET, whatever the request before it was); returns the status (0: no HTTP answer). */
static long https(struct ctx *c, CURL *h, const char *method, const char *path,
                  struct curl_slist *headers, const char *body)
{
    char url[128];
    snprintf(url, sizeof(url), "%s%s", c->base, path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CAINFO, c->cert);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, no_body);
    curl_easy_setopt(h, CURLOPT_READDATA, c);
    /* A POST's POSTFIELDS stay on the handle: without HTTPGET the next request would still
     * be a POST, its body read through the read callback. */
    if (body != NULL)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    else
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    long status = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

static void start_tls(struct ctx *c, const char *key)
{
    c->port = testproc_free_port();
    char listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", c->port);
    snprintf(c->base, sizeof(c->base), "https://127.0.0.1:%u", c->port);
    const char *argv[] = {testproc_txo_bin(),
                          "serve",
                          "--listen",
                          listen,
                          "--tls-cert",
                          c->cert,
                          "--tls-key",
                          key,
                          "--http-header-timeout",
                          "1",
                          NULL};
    testproc_start(&c->srv, "tls", argv, NULL);
}

static void test_https_with_keep_alive(void **state)
{
    struct ctx *c = *state;
    start_tls(c, c->key);
    CURL *h = curl_easy_init();
    assert_non_null(h);
    int64_t deadline = txo_monotonic_ms() + 10000;
    while (https(c, h, "GET", "/healthz", NULL, NULL) != 200) {
        if (txo_monotonic_ms() > deadline) {
            testproc_print_log(&c->srv, "txo serve");
            fail_msg("no HTTPS answer on port %u within 10 s", c->port);
        }
        txo_sleep_ms(50);
    }
    /* The same connection serves the next requests. */
    struct curl_slist *hdr = curl_slist_append(NULL, "Idempotency-Key: tls-1");
    hdr = curl_slist_append(hdr, "Content-Type: application/json");
    long st = https(c, h, "POST", "/orders", hdr,
                    "{\"customer_id\":7,\"items\":[{\"sku\":\"SKU-A\",\"qty\":1,"
                    "\"price_cents\":100}]}");
    assert_int_equal(st, 201);
    long opened = -1;
    curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &opened);
    assert_int_equal(opened, 0);
    assert_int_equal(https(c, h, "GET", "/orders/1", NULL, NULL), 200);
    curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &opened);
    assert_int_equal(opened, 0);
    /* The GET after the POST on the same handle sent no body: nothing was read for one. */
    assert_int_equal(c->body_reads, 0);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    assert_int_equal(testdb_i64(c->t.db, "SELECT COUNT(*) FROM orders", NULL, 0), 1);

    /* Plain HTTP on the TLS port: no HTTP answer, the connection is closed. */
    CURL *plain = curl_easy_init();
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/healthz", c->port);
    curl_easy_setopt(plain, CURLOPT_URL, url);
    curl_easy_setopt(plain, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(plain, CURLOPT_WRITEFUNCTION, sink);
    CURLcode cc = curl_easy_perform(plain);
    long status = 0;
    curl_easy_getinfo(plain, CURLINFO_RESPONSE_CODE, &status);
    assert_true(cc != CURLE_OK || status == 0);
    curl_easy_cleanup(plain);

    /* A handshake that never starts counts against the head deadline (1 s). */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_true(send(fd, "\x16\x03\x01", 3, MSG_NOSIGNAL) == 3); /* half a record header */
    struct pollfd p = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 4000), 1);
    char b[64];
    assert_true(recv(fd, b, sizeof(b), 0) <= 0);
    close(fd);

    assert_true(testproc_stop(&c->srv, 5000));
}

static void test_unusable_key_stops_the_start(void **state)
{
    struct ctx *c = *state;
    char missing[160];
    snprintf(missing, sizeof(missing), "%s/none.pem", c->dir);
    start_tls(c, missing);
    if (!testproc_wait(&c->srv, 10000))
        fail_msg("txo serve with a missing key file did not exit");
    assert_false(testproc_exited_with(&c->srv, 0));
    char *log = testproc_log(&c->srv);
    if (strstr(log, missing) == NULL)
        fail_msg("the message does not name %s:\n%s", missing, log);
    free(log);

    /* The certificate given as the key: a PEM file, but no key. */
    start_tls(c, c->cert);
    if (!testproc_wait(&c->srv, 10000))
        fail_msg("txo serve with a certificate as its key did not exit");
    assert_false(testproc_exited_with(&c->srv, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_https_with_keep_alive),
        cmocka_unit_test(test_unusable_key_stops_the_start),
    };
    return testhttp_run_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
}
