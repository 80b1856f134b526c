/*
 * Test support: a private EventSink server for one test binary, the independent Python
 * implementation tests/grpc/event_sink_server.py (python3-grpcio, python3-protobuf), run as a
 * child process on a free port:
 *
 *   python3 tests/grpc/event_sink_server.py --port <port> --pb2-dir <dir>/py
 *           --record <dir>/events.jsonl --calls <dir>/calls.jsonl --control <dir>/control.json
 *
 * testgrpc_start() makes a temporary directory, generates the Python classes of
 * proto/txo/v1/event_sink.proto into it (protoc --python_out), starts the server and waits
 * (up to 10 s) until its port answers. testchild_server_kill() (SIGKILL) on its srv ends it,
 * testchild_server_restart() starts it again on the same port with the same files (what it
 * recorded stays).
 * testgrpc_cleanup() stops it and removes the directory.
 *
 * Python is $TXO_PYTHON, else /usr/bin/python3 (Debian's, where python3-grpcio lives), protoc
 * is $TXO_PROTOC, else protoc on PATH. When either is missing or the server does not start, the
 * test FAILS (it is not skipped). The server's output goes to <dir>/server.log, printed when it
 * fails to start.
 *
 * The server records what it received; the readers below parse its files with jansson, so the
 * tests check what really arrived over gRPC. Every helper fails the current cmocka test on
 * error.
 */
#ifndef TXO_TESTGRPC_H
#define TXO_TESTGRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "testchild.h"
#include "txo/grpc.h"

struct testgrpc {
    char target[64]; /* "127.0.0.1:<port>" */
    unsigned port;
    char dir[256];
    char events_path[300];  /* <dir>/events.jsonl, one line per event the server took */
    char calls_path[300];   /* <dir>/calls.jsonl, one line per call */
    char control_path[300]; /* <dir>/control.json */
    char log_path[300];     /* <dir>/server.log */
    unsigned control_version;
    int tls; /* 0 plaintext, 1 TLS, 2 TLS requiring a client certificate */
    /* With TLS (testgrpc_start_tls): made with openssl in dir. */
    char ca_path[300];          /* the CA that signed the server's and the client's certificate */
    char other_ca_path[300];    /* an unrelated CA */
    char client_cert_path[300]; /* a client certificate and key signed by ca_path */
    char client_key_path[300];
    struct testchild_server srv; /* kill, restart: testchild.h (a stop is a kill) */
};

/* Starts a fresh server (new port, new directory). */
void testgrpc_start(struct testgrpc *g);

/*
 * The same with TLS: a CA and a server certificate for 127.0.0.1 and localhost (subjectAltName
 * IP and DNS), a client certificate, and an unrelated CA are made with openssl first
 * ($TXO_OPENSSL, else openssl on PATH). require_client_cert: mutual TLS.
 */
void testgrpc_start_tls(struct testgrpc *g, bool require_client_cert);

/* Stops the server if it runs and removes the directory. Safe on a zeroed struct. */
void testgrpc_cleanup(struct testgrpc *g);

/*
 * Tells the server how to answer from its next call on: rules_json is the inside of the control
 * object without "version" (e.g. "\"status\": \"UNAVAILABLE\", \"status_calls\": 1"; "" for
 * normal answers), see tests/grpc/event_sink_server.py. Written atomically (rename).
 */
void testgrpc_control(struct testgrpc *g, const char *rules_json);

/* Forgets what the server recorded so far (truncates both files). */
void testgrpc_reset_records(struct testgrpc *g);

/* One event the server took, from events.jsonl. Strings owned by the array. */
struct testgrpc_event {
    long call;
    int64_t id;
    char *type;
    char *aggregate_type;
    char *aggregate_id;
    char *idempotency_key;
    char *created_at;
    int attempt;
    unsigned char *payload; /* decoded from base64, NUL-terminated */
    size_t payload_len;
    char *traceparent; /* the event's trace fields; "" when it has none */
    char *tracestate;
};

/* Every event recorded so far, in the order the server took them. Free with
 * testgrpc_free_events(). */
size_t testgrpc_events(const struct testgrpc *g, struct testgrpc_event **out);
void testgrpc_free_events(struct testgrpc_event *events, size_t n);

/* Calls recorded so far whose answer (OK, WRONG_COUNT, a status name, CLIENT_GONE) is answer;
 * NULL counts every call. */
size_t testgrpc_count_calls(const struct testgrpc *g, const char *answer);

/* Calls recorded so far that carried traceparent or tracestate metadata. */
size_t testgrpc_count_traced_calls(const struct testgrpc *g);

/*
 * One gRPC server for a whole test program, as cmocka group fixtures: testgrpc_group_setup starts
 * testgrpc_shared and testgrpc_group_teardown stops it; the tests use testgrpc_shared.
 */
extern struct testgrpc testgrpc_shared;
int testgrpc_group_setup(void **state);
int testgrpc_group_teardown(void **state);

/*
 * Expects txo_publisher_grpc_new() to refuse o with the code want, its message naming about (NULL:
 * any message), and to make no publisher; the test fails otherwise.
 */
void testgrpc_expect_refused(const struct txo_grpc_opts *o, int want, const char *about);

#endif
