/*
 * The gRPC publisher over TLS, against the independent Python EventSink server serving TLS
 * with certificates made by openssl for the test (tests/support/testgrpc.h):
 *
 *   - with the CA that signed the server's certificate, events are delivered (the server's
 *     records show them);
 *   - with an unrelated CA, or in plaintext against the TLS server, every call fails with
 *     TXO_EUNAVAILABLE (transient: the relay keeps the rows and retries) and nothing arrives;
 *   - a server that requires a client certificate takes the events only from a publisher that
 *     presents one signed by its CA;
 *   - unreadable or half-given TLS files fail the creation with a message naming the file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testgrpc.h"
#include "txo/grpc.h"

/*
 * ThreadSanitizer, in this binary only: gRPC runs OpenSSL for a TLS channel on its own threads
 * and on the caller's, handing the connection's buffers over under Abseil locks that TSan
 * cannot see (Debian's gRPC, Abseil and OpenSSL are not built with it), so it reports races on
 * OpenSSL's buffers with only libssl or libcrypto frames on the stack, which tests/tsan.supp's
 * gRPC entries do not match, and on std::string copies inside gRPC (libstdc++ frames only).
 * The entries below ignore the races in those libraries and the accesses they make through
 * TSan's interceptors (memcpy); in this binary OpenSSL and libstdc++ are used by gRPC only,
 * our C code shares no memory with gRPC's threads.
 */
const char *__tsan_default_suppressions(void);
__attribute__((visibility("default"))) const char *__tsan_default_suppressions(void)
{
    return "race:libcrypto.so*\n"
           "race:libssl.so*\n"
           "called_from_lib:libcrypto.so*\n"
           "called_from_lib:libssl.so*\n"
           "called_from_lib:libstdc++.so*\n";
}

static void one_message(struct txo_outbox_message *m, int64_t id, char *key, size_t key_cap)
{
    snprintf(key, key_cap, "tls:%lld", (long long)id);
    memset(m, 0, sizeof(*m));
    m->id = id;
    m->aggregate_type = "order";
    m->aggregate_id = "1";
    m->event_type = "OrderCreated";
    m->payload = "{\"n\":1}";
    m->payload_len = strlen(m->payload);
    m->idempotency_key = key;
    m->created_at = "2026-11-30T15:37:00.123456Z";
    m->attempt = 1;
}

/* Publishes one event through a publisher made from o; returns its result. */
static int publish_one(const struct txo_grpc_opts *o, int64_t id, struct txo_error *why)
{
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_publisher_grpc_new(o, NULL, &pub, &err) < 0)
        fail_msg("txo_publisher_grpc_new: %s", err.msg);
    struct txo_outbox_message m;
    char key[32];
    one_message(&m, id, key, sizeof(key));
    int result = 99;
    txo_error_init(why);
    assert_int_equal(pub->ops->publish_batch(pub->self, &m, 1, &result, why), 0);
    txo_publisher_free(pub);
    return result;
}

static size_t recorded(const struct testgrpc *g)
{
    struct testgrpc_event *ev = NULL;
    size_t n = testgrpc_events(g, &ev);
    testgrpc_free_events(ev, n);
    return n;
}

static void base_opts(struct txo_grpc_opts *o, const struct testgrpc *g)
{
    txo_grpc_opts_init(o);
    o->target = g->target;
    o->deadline_ms = 3000;
}

static void test_server_verified_by_ca(void **state)
{
    (void)state;
    struct testgrpc g;
    testgrpc_start_tls(&g, false);
    struct txo_grpc_opts o;
    struct txo_error why;

    base_opts(&o, &g);
    o.ca_file = g.ca_path;
    assert_int_equal(publish_one(&o, 1, &why), 0);
    assert_int_equal(recorded(&g), 1);

    /* "localhost" is in the certificate too. */
    char target[64];
    snprintf(target, sizeof(target), "localhost:%u", g.port);
    o.target = target;
    assert_int_equal(publish_one(&o, 2, &why), 0);
    assert_int_equal(recorded(&g), 2);

    base_opts(&o, &g);
    o.ca_file = g.other_ca_path;
    assert_int_equal(publish_one(&o, 3, &why), TXO_EUNAVAILABLE);
    assert_non_null(strstr(why.msg, "UNAVAILABLE"));

    base_opts(&o, &g); /* plaintext against TLS */
    assert_int_equal(publish_one(&o, 4, &why), TXO_EUNAVAILABLE);
    assert_int_equal(recorded(&g), 2);
    testgrpc_cleanup(&g);
}

static void test_client_certificate_required(void **state)
{
    (void)state;
    struct testgrpc g;
    testgrpc_start_tls(&g, true);
    struct txo_grpc_opts o;
    struct txo_error why;

    base_opts(&o, &g);
    o.ca_file = g.ca_path;
    assert_int_equal(publish_one(&o, 1, &why), TXO_EUNAVAILABLE);
    assert_int_equal(recorded(&g), 0);

    o.cert_file = g.client_cert_path;
    o.key_file = g.client_key_path;
    assert_int_equal(publish_one(&o, 2, &why), 0);
    assert_int_equal(recorded(&g), 1);
    testgrpc_cleanup(&g);
}

static void test_bad_tls_files(void **state)
{
    (void)state;
    struct txo_grpc_opts o;
    txo_grpc_opts_init(&o);
    o.ca_file = "/nonexistent/ca.pem";
    testgrpc_expect_refused(&o, TXO_ECONFIG, "/nonexistent/ca.pem");
    o.ca_file = "/dev/null";
    testgrpc_expect_refused(&o, TXO_ECONFIG, "empty");
    o.cert_file = "/etc/hostname";
    testgrpc_expect_refused(&o, TXO_EINVAL, "key_file");
    txo_grpc_opts_init(&o);
    o.cert_file = "/etc/hostname";
    o.key_file = "/etc/hostname";
    testgrpc_expect_refused(&o, TXO_EINVAL, "ca_file");
}

int main(void)
{
    /*
     * The "localhost" case resolves a name: with gRPC's default resolver, c-ares, Debian 12's
     * c-ares 1.18 leaks the 10 bytes of a copy of "localhost" per resolution (its built-in
     * answer for that name), which LeakSanitizer reports. gRPC's native resolver
     * (getaddrinfo) has no such leak; docs/brokers.md says so too.
     */
    setenv("GRPC_DNS_RESOLVER", "native", 1);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_tls_files),
        cmocka_unit_test(test_server_verified_by_ca),
        cmocka_unit_test(test_client_certificate_required),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
