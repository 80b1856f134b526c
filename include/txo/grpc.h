/*
 * gRPC publisher: the relay delivers outbox events to a gRPC service of the application's own
 * that implements the EventSink contract, proto/txo/v1/event_sink.proto (package txo.v1):
 *
 *   service EventSink { rpc Publish(PublishRequest) returns (PublishResponse); }
 *
 * One unary call per relay batch (several when the encoded batch is larger than
 * opts.max_batch_bytes): the request carries every event with the envelope's fields (id,
 * type, aggregate, idempotency key, created_at, attempt, the payload JSON as bytes), the
 * response one Result per event, in order: ACCEPTED, REJECTED_TRANSIENT or
 * REJECTED_PERMANENT with a reason. The process's envelope format (txo_envelope_set_default)
 * does not apply: the protobuf message is the envelope.
 *
 * What the relay does with each answer (txo/publisher.h: transient = retried with backoff,
 * permanent = FAILED and dead-lettered at once):
 *
 *   status OK, Result ACCEPTED               0: delivered
 *   status OK, Result REJECTED_TRANSIENT     TXO_EPUBLISH, with the server's reason
 *              or OUTCOME_UNSPECIFIED
 *   status OK, Result REJECTED_PERMANENT     TXO_EBUSINESS, with the server's reason
 *   status OK, results count != events, a    TXO_EPUBLISH for every event of the call
 *              Result.event_id that does not
 *              match, or an unreadable body
 *   UNAVAILABLE                              TXO_EUNAVAILABLE (server down or unreachable:
 *                                            gRPC says the call was not processed)
 *   DEADLINE_EXCEEDED                        TXO_ETIMEOUT (maybe processed: the retry may be a
 *                                            duplicate, which the server de-duplicates)
 *   RESOURCE_EXHAUSTED                       TXO_EUNAVAILABLE (overloaded, rate limited)
 *   ABORTED, CANCELLED, INTERNAL, UNKNOWN,   TXO_EPUBLISH (a failure of the server or the
 *   DATA_LOSS, ALREADY_EXISTS                transport; UNKNOWN is also what an uncaught
 *                                            exception in a handler gives)
 *   INVALID_ARGUMENT, FAILED_PRECONDITION,   TXO_EINVAL, permanent: the server refuses the
 *   OUT_OF_RANGE                             request as it is
 *   NOT_FOUND, UNIMPLEMENTED,                TXO_ECONFIG, permanent: the target does not serve
 *   PERMISSION_DENIED, UNAUTHENTICATED       EventSink or refuses us; the events tried are
 *                                            dead-lettered (replay them with `txo dlq replay`
 *                                            once it is fixed)
 * A call-level status applies to every event of that call: a server that refuses some events
 * of a batch answers OK with per-event outcomes.
 *
 * Connection: one channel per publisher (plaintext, or TLS with opts.ca_file), opened at
 * creation and kept (gRPC reconnects by
 * itself, with a backoff between min and reconnect_max_ms). Calls do not wait for a channel
 * that is down ("fail fast"): while the server is unreachable every call fails at once with
 * UNAVAILABLE, so a relay cycle costs little and the rows go back to PENDING with backoff. A
 * server that is down at creation is not an error. Keep-alive pings every keepalive_ms while
 * a call is in flight detect a dead peer on a half-open connection; the server must permit
 * pings that often (gRPC servers refuse pings more frequent than 5 minutes by default when no
 * call is active; txo pings only during calls).
 *
 * Metrics (when a registry is given): txo_grpc_events_published_total,
 * txo_grpc_events_failed_total{kind="transient"|"permanent"}, txo_grpc_calls_total{status},
 * txo_grpc_calls_in_flight and txo_grpc_call_duration_seconds.
 *
 * Not TXO_PUBLISHER_QUICK: the server runs the application's handling before it answers, so
 * a batch may take as long as the deadline.
 *
 * Thread-safety: a publisher is used by one relay (one thread) at a time. gRPC runs its own
 * threads, which touch no state of this module. gRPC's process-wide state is reference
 * counted: each publisher takes a reference at creation and releases it when freed. Freeing
 * the last publisher of the process shuts gRPC down and waits (2 s at most) until it is: no
 * gRPC thread runs afterwards, unless the application holds a gRPC reference of its own (then
 * that free returns after the 2 s). Creating and freeing publishers from several threads is
 * safe.
 */
#ifndef TXO_GRPC_H
#define TXO_GRPC_H

#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/err.h"
#include "txo/metrics.h"
#include "txo/publisher.h"

/* The settings. Strings are borrowed for the creating call (copied). */
struct txo_grpc_opts {
    const char *target;           /* "host:port" (any gRPC target URI, e.g. "dns:///svc:50051"),
                                   * default "127.0.0.1:50051" */
    int64_t deadline_ms;          /* per Publish call, default 5000 */
    int64_t keepalive_ms;         /* keep-alive ping interval during calls, default 30000 */
    int64_t keepalive_timeout_ms; /* the connection is dropped when a ping is not answered
                                   * within this, default 10000 */
    int64_t reconnect_max_ms;     /* longest wait between reconnect attempts, default 5000 */
    size_t max_batch_bytes;       /* largest encoded request; a bigger batch is split into several
                                   * calls, one event bigger than this fails (TXO_EINVAL,
                                   * permanent). Default 4000000, under gRPC's 4 MiB receive limit */

    /* TLS. NULL ca_file (the default): plaintext. Set: TLS, the server's certificate verified
     * against the PEM certificates in ca_file and its name against the target's host (a
     * certificate for 127.0.0.1 needs an IP subjectAltName). cert_file and key_file (PEM, both
     * or neither): a client certificate for servers that require one (mutual TLS). The files
     * are read once, at creation; the key's copy is wiped right after gRPC took it. */
    const char *ca_file;
    const char *cert_file;
    const char *key_file;
};

/* Fills o with the defaults above (static strings). Never fails. */
TXO_API void txo_grpc_opts_init(struct txo_grpc_opts *o);

/*
 * Creates the publisher and its channel to o->target (see the top of this file). metrics may
 * be NULL; when given, it must outlive the publisher.
 *
 * publish_batch encodes the batch as PublishRequests of at most max_batch_bytes and makes one
 * call per request in order, each with its own deadline; it sets results[i] as in the table
 * above. When a call fails as a whole, the calls of the batch after it are not made and their
 * events fail with the same code. A batch never blocks longer than about deadline_ms per call.
 *
 * Errors: TXO_EINVAL (bad opts: empty target, a duration < 1, max_batch_bytes < 1024, only
 * one of cert_file and key_file), TXO_ECONFIG (a TLS file cannot be read or is empty, gRPC
 * refused the target or the credentials), TXO_ENOMEM. A TLS handshake that fails (wrong CA,
 * name mismatch, a plaintext server) is no creation error: the calls fail with UNAVAILABLE,
 * gRPC's reason in the message. Free with txo_publisher_free().
 */
TXO_API TXO_MUST_CHECK int txo_publisher_grpc_new(const struct txo_grpc_opts *o,
                                                  struct txo_metrics *metrics,
                                                  struct txo_publisher **out,
                                                  struct txo_error *err);

/* The relay's code for a gRPC status code (the table above); 0 for OK. */
TXO_API int txo_grpc_status_code(int grpc_status);

#endif
