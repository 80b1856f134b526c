/*
 * Test support: a private EventSink server per test binary (see testgrpc.h); the process
 * mechanics are testchild's.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "testchild.h"
#include "testgrpc.h"
#include "testrun.h"
#include "testproc.h"

#ifndef TXO_TEST_SOURCE_DIR
#error "TXO_TEST_SOURCE_DIR must be defined (tests/CMakeLists.txt)"
#endif

#define READY_TIMEOUT_MS 10000
#define READY_POLL_MS    20

static const char *python_bin(void)
{
    const char *env = getenv("TXO_PYTHON");
    const char *bin = env != NULL && env[0] != '\0' ? env : "/usr/bin/python3";
    if (access(bin, X_OK) != 0)
        fail_msg("%s not found: the gRPC tests need Debian's python3 with python3-grpcio and "
                 "python3-protobuf (or set TXO_PYTHON)",
                 bin);
    return bin;
}

static void spawn(void *owner)
{
    struct testgrpc *g = owner;
    const char *py = python_bin();
    char script[512], port[16], pb2_dir[300];
    snprintf(script, sizeof(script), "%s/tests/grpc/event_sink_server.py", TXO_TEST_SOURCE_DIR);
    snprintf(port, sizeof(port), "%u", g->port);
    snprintf(pb2_dir, sizeof(pb2_dir), "%s/py", g->dir);
    char server_cert[320], server_key[320];
    snprintf(server_cert, sizeof(server_cert), "%s/server.pem", g->dir);
    snprintf(server_key, sizeof(server_key), "%s/server-key.pem", g->dir);
    const char *argv[24] = {py,          script,        "--port",    port,
                            "--pb2-dir", pb2_dir,       "--record",  g->events_path,
                            "--calls",   g->calls_path, "--control", g->control_path};
    size_t n = 12;
    if (g->tls) {
        argv[n++] = "--tls-cert";
        argv[n++] = server_cert;
        argv[n++] = "--tls-key";
        argv[n++] = server_key;
    }
    if (g->tls == 2) {
        argv[n++] = "--tls-client-ca";
        argv[n++] = g->ca_path;
    }
    argv[n] = NULL;
    g->srv.pid = testchild_spawn(argv, g->log_path, NULL, NULL);
    testchild_await(&g->srv.pid, "the EventSink server", g->log_path, testchild_port_answers,
                    &g->port, READY_TIMEOUT_MS, READY_POLL_MS);
}

static void start(struct testgrpc *g, int tls);

void testgrpc_start(struct testgrpc *g)
{
    start(g, 0);
}

static void openssl(const struct testgrpc *g, const char *const *args)
{
    const char *bin = getenv("TXO_OPENSSL");
    if (bin == NULL || bin[0] == '\0')
        bin = "openssl";
    const char *argv[32] = {"/usr/bin/env", bin};
    size_t n = 2;
    for (size_t i = 0; args[i] != NULL && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    char *out = NULL;
    int rc = testproc_run("grpc_openssl", argv, 60000, &out);
    if (rc != 0)
        fail_msg("openssl %s failed in %s (exit %d): %s", args[0], g->dir, rc,
                 out != NULL ? out : "");
    free(out);
}

/* A CA, a server and a client certificate it signs, and an unrelated CA, in g->dir. */
static void make_certs(struct testgrpc *g)
{
    char p[8][320];
    const char *names[8] = {"ca-key.pem", "other-ca-key.pem", "server-key.pem", "server.csr",
                            "server.pem", "client.csr",       "ext.cnf",        "server.ext"};
    for (int i = 0; i < 8; i++)
        snprintf(p[i], sizeof(p[i]), "%s/%s", g->dir, names[i]);
    snprintf(g->ca_path, sizeof(g->ca_path), "%s/ca.pem", g->dir);
    snprintf(g->other_ca_path, sizeof(g->other_ca_path), "%s/other-ca.pem", g->dir);
    snprintf(g->client_cert_path, sizeof(g->client_cert_path), "%s/client.pem", g->dir);
    snprintf(g->client_key_path, sizeof(g->client_key_path), "%s/client-key.pem", g->dir);
    FILE *f = fopen(p[7], "w");
    assert_non_null(f);
    fprintf(f, "subjectAltName=IP:127.0.0.1,DNS:localhost\n");
    fclose(f);
    const char *ca[] = {"req",      "-x509", "-newkey",         "rsa:2048", "-nodes", "-days",
                        "2",        "-subj", "/CN=txo test CA", "-keyout",  p[0],     "-out",
                        g->ca_path, NULL};
    openssl(g, ca);
    const char *other[] = {"req",
                           "-x509",
                           "-newkey",
                           "rsa:2048",
                           "-nodes",
                           "-days",
                           "2",
                           "-subj",
                           "/CN=txo other CA",
                           "-keyout",
                           p[1],
                           "-out",
                           g->other_ca_path,
                           NULL};
    openssl(g, other);
    const char *csr[] = {"req",     "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
                         "-keyout", p[2],      "-out",     p[3],     NULL};
    openssl(g, csr);
    const char *sign[] = {
        "x509",  "-req", "-in",      p[3], "-CA",  g->ca_path, "-CAkey", p[0], "-CAcreateserial",
        "-days", "2",    "-extfile", p[7], "-out", p[4],       NULL};
    openssl(g, sign);
    const char *ccsr[] = {
        "req",     "-newkey",          "rsa:2048", "-nodes", "-subj", "/CN=txo relay",
        "-keyout", g->client_key_path, "-out",     p[5],     NULL};
    openssl(g, ccsr);
    const char *csign[] = {"x509",
                           "-req",
                           "-in",
                           p[5],
                           "-CA",
                           g->ca_path,
                           "-CAkey",
                           p[0],
                           "-CAcreateserial",
                           "-days",
                           "2",
                           "-out",
                           g->client_cert_path,
                           NULL};
    openssl(g, csign);
}

void testgrpc_start_tls(struct testgrpc *g, bool require_client_cert)
{
    start(g, require_client_cert ? 2 : 1);
}

static void start(struct testgrpc *g, int tls)
{
    memset(g, 0, sizeof(*g));
    g->tls = tls;
    testchild_make_dir(g->dir, sizeof(g->dir), "txo-grpc");
    snprintf(g->events_path, sizeof(g->events_path), "%s/events.jsonl", g->dir);
    snprintf(g->calls_path, sizeof(g->calls_path), "%s/calls.jsonl", g->dir);
    snprintf(g->control_path, sizeof(g->control_path), "%s/control.json", g->dir);
    snprintf(g->log_path, sizeof(g->log_path), "%s/server.log", g->dir);

    const char *protoc = getenv("TXO_PROTOC");
    if (protoc == NULL || protoc[0] == '\0')
        protoc = "protoc";
    char out_arg[320], proto_path[512];
    snprintf(out_arg, sizeof(out_arg), "--python_out=%s/py", g->dir);
    snprintf(proto_path, sizeof(proto_path), "--proto_path=%s/proto", TXO_TEST_SOURCE_DIR);
    char py_dir[300];
    snprintf(py_dir, sizeof(py_dir), "%s/py", g->dir);
    if (mkdir(py_dir, 0755) != 0)
        fail_msg("mkdir %s: %s", py_dir, strerror(errno));
    const char *gen[] = {
        "/usr/bin/env", protoc, proto_path, out_arg, "txo/v1/event_sink.proto", NULL};
    char *out = NULL;
    int rc = testproc_run("grpc_protoc", gen, 30000, &out);
    if (rc != 0)
        fail_msg("%s could not generate the Python classes of event_sink.proto (exit %d; "
                 "install protobuf-compiler or set TXO_PROTOC): %s",
                 protoc, rc, out != NULL ? out : "");
    free(out);

    if (tls)
        make_certs(g);
    g->port = testproc_free_port();
    snprintf(g->target, sizeof(g->target), "127.0.0.1:%u", g->port);
    testgrpc_control(g, "");
    /* The server keeps nothing worth a clean stop: it is always SIGKILLed. */
    testchild_server_start(&g->srv, 0, spawn, g);
}

void testgrpc_cleanup(struct testgrpc *g)
{
    testchild_server_kill(&g->srv);
    if (g->dir[0] == '\0')
        return;
    testchild_remove_dir(g->dir);
    g->dir[0] = '\0';
}

void testgrpc_control(struct testgrpc *g, const char *rules_json)
{
    char tmp[320];
    snprintf(tmp, sizeof(tmp), "%s.tmp", g->control_path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        fail_msg("%s: %s", tmp, strerror(errno));
    g->control_version++;
    fprintf(f, "{\"version\": %u%s%s}\n", g->control_version, rules_json[0] != '\0' ? ", " : "",
            rules_json);
    if (fclose(f) != 0 || rename(tmp, g->control_path) != 0)
        fail_msg("writing %s: %s", g->control_path, strerror(errno));
}

void testgrpc_reset_records(struct testgrpc *g)
{
    if (truncate(g->events_path, 0) != 0 && errno != ENOENT)
        fail_msg("truncate %s: %s", g->events_path, strerror(errno));
    if (truncate(g->calls_path, 0) != 0 && errno != ENOENT)
        fail_msg("truncate %s: %s", g->calls_path, strerror(errno));
}

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

static unsigned char *b64_decode(const char *s, size_t *len)
{
    size_t n = strlen(s);
    unsigned char *out = malloc(n / 4 * 3 + 4);
    assert_non_null(out);
    size_t o = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n && s[i] != '='; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0)
            fail_msg("bad base64 in the server's record: %s", s);
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    out[o] = '\0';
    *len = o;
    return out;
}

static char *dup_field(json_t *obj, const char *name)
{
    const char *s = json_string_value(json_object_get(obj, name));
    if (s == NULL)
        fail_msg("the server's record has no string \"%s\"", name);
    char *d = strdup(s);
    assert_non_null(d);
    return d;
}

size_t testgrpc_events(const struct testgrpc *g, struct testgrpc_event **out)
{
    *out = NULL;
    FILE *f = fopen(g->events_path, "r");
    if (f == NULL)
        return 0;
    size_t n = 0, cap = 0;
    struct testgrpc_event *ev = NULL;
    char *line = NULL;
    size_t line_cap = 0;
    while (getline(&line, &line_cap, f) > 0) {
        json_error_t jerr;
        json_t *o = json_loads(line, 0, &jerr);
        if (o == NULL)
            fail_msg("%s: unreadable line (%s): %s", g->events_path, jerr.text, line);
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            ev = realloc(ev, cap * sizeof(*ev));
            assert_non_null(ev);
        }
        struct testgrpc_event *e = &ev[n++];
        e->call = (long)json_integer_value(json_object_get(o, "call"));
        e->id = (int64_t)json_integer_value(json_object_get(o, "id"));
        e->attempt = (int)json_integer_value(json_object_get(o, "attempt"));
        e->type = dup_field(o, "type");
        e->aggregate_type = dup_field(o, "aggregate_type");
        e->aggregate_id = dup_field(o, "aggregate_id");
        e->idempotency_key = dup_field(o, "idempotency_key");
        e->created_at = dup_field(o, "created_at");
        e->traceparent = dup_field(o, "traceparent");
        e->tracestate = dup_field(o, "tracestate");
        e->payload =
            b64_decode(json_string_value(json_object_get(o, "payload_b64")), &e->payload_len);
        json_decref(o);
    }
    free(line);
    fclose(f);
    *out = ev;
    return n;
}

void testgrpc_free_events(struct testgrpc_event *events, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(events[i].type);
        free(events[i].aggregate_type);
        free(events[i].aggregate_id);
        free(events[i].idempotency_key);
        free(events[i].created_at);
        free(events[i].payload);
        free(events[i].traceparent);
        free(events[i].tracestate);
    }
    free(events);
}

/* Calls of calls.jsonl for which match(call, arg) holds. */
static size_t count_calls(const struct testgrpc *g, bool (*match)(json_t *call, const void *arg),
                          const void *arg)
{
    FILE *f = fopen(g->calls_path, "r");
    if (f == NULL)
        return 0;
    size_t n = 0;
    char *line = NULL;
    size_t line_cap = 0;
    while (getline(&line, &line_cap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        if (o == NULL)
            fail_msg("%s: unreadable line: %s", g->calls_path, line);
        if (match(o, arg))
            n++;
        json_decref(o);
    }
    free(line);
    fclose(f);
    return n;
}

static bool answered(json_t *call, const void *answer)
{
    const char *a = json_string_value(json_object_get(call, "answer"));
    return answer == NULL || (a != NULL && strcmp(a, answer) == 0);
}

size_t testgrpc_count_calls(const struct testgrpc *g, const char *answer)
{
    return count_calls(g, answered, answer);
}

static bool traced(json_t *call, const void *arg)
{
    (void)arg;
    return json_array_size(json_object_get(call, "trace_metadata")) > 0;
}

size_t testgrpc_count_traced_calls(const struct testgrpc *g)
{
    return count_calls(g, traced, NULL);
}

TESTRUN_SHARED_SERVER(testgrpc, testgrpc_start, testgrpc_cleanup)

void testgrpc_expect_refused(const struct txo_grpc_opts *o, int want, const char *about)
{
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_publisher_grpc_new(o, NULL, &pub, &err), want);
    if (about != NULL && strstr(err.msg, about) == NULL)
        fail_msg("refused with \"%s\", which does not name %s", err.msg, about);
    assert_null(pub);
}
