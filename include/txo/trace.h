/*
 * W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` and
 * `tracestate` values that carry one trace through HTTP requests, outbox events, broker
 * messages and the calls a saga makes.
 *
 *   traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
 *                version-trace_id (32 hex)-parent_id (16 hex)-flags (01: sampled)
 *   tracestate:  vendor-specific key=value pairs, comma-separated (rojo=00f067aa0ba902b7)
 *
 * What is received is checked as the specification says, and anything it does not accept is
 * not an error for the caller: txo_trace_parse() returns false and the caller starts a new
 * trace (txo_trace_new_root()), answering the request as if no header had come. A tracestate
 * is kept only with a valid traceparent and only when it is itself valid (at most 32 members
 * of the right shape, at most TXO_TRACESTATE_MAX bytes); otherwise it is dropped whole.
 *
 * A txo_trace_ctx names one span: its trace, its own span id, and the flags. The span an
 * operation runs in is a child of the one it was handed (txo_trace_child()): same trace, new
 * span id, same flags and state; what it sends on carries the child's traceparent.
 *
 * Thread-safety: every function works on its arguments only; ids come from a per-thread
 * generator seeded from getrandom(2), so any thread may call them at any time.
 */
#ifndef TXO_TRACE_H
#define TXO_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"

/* The length of a version-00 traceparent, without the NUL. */
#define TXO_TRACEPARENT_LEN 55
/* The longest tracestate kept (the specification asks to propagate at least 512 bytes). */
#define TXO_TRACESTATE_MAX 512

/* Bit 0 of the flags: the caller may have recorded this span (sampled). */
#define TXO_TRACE_SAMPLED 0x01

struct txo_trace_ctx {
    uint8_t trace_id[16];               /* never all zero in a valid context */
    uint8_t span_id[8];                 /* never all zero in a valid context */
    uint8_t flags;                      /* TXO_TRACE_SAMPLED, other bits as received */
    char state[TXO_TRACESTATE_MAX + 1]; /* the tracestate to send on; "" when none */
};

/*
 * Reads a received traceparent (and tracestate, NULL or "" when none) into *out. Returns true
 * when the traceparent is valid; false (and *out untouched) when it is missing or invalid:
 * an unknown version whose fields still parse as version 00's is accepted as the
 * specification asks, version ff, upper-case hex, all-zero ids and wrong lengths are not.
 * An invalid tracestate leaves out->state empty and does not make the traceparent invalid.
 */
TXO_API bool txo_trace_parse(const char *traceparent, const char *tracestate,
                             struct txo_trace_ctx *out);

/* A new trace: random trace and span ids, the sampled flag as given, no tracestate. */
TXO_API void txo_trace_new_root(bool sampled, struct txo_trace_ctx *out);

/* A child span of parent: the same trace id, flags and state, a new random span id. out may be
 * parent. */
TXO_API void txo_trace_child(const struct txo_trace_ctx *parent, struct txo_trace_ctx *out);

/* Writes ctx's traceparent (version 00, lower-case hex) and a NUL into out, which has room for
 * TXO_TRACEPARENT_LEN + 1 bytes. */
TXO_API void txo_trace_format(const struct txo_trace_ctx *ctx, char *out);

/* The trace id (32 hex digits) and span id (16) as text, NUL-terminated: for log lines and
 * span export. out has room for 33 and 17 bytes. */
TXO_API void txo_trace_id_hex(const struct txo_trace_ctx *ctx, char *out);
TXO_API void txo_trace_span_hex(const struct txo_trace_ctx *ctx, char *out);

/*
 * The span the calling thread works in (NULL: none). While one is set, every log line the
 * thread writes carries its trace_id and span_id (txo/log.h). Set it at the start of a traced
 * operation and put the previous one back at its end: txo_trace_set_current() returns it. ctx
 * is borrowed and must stay valid while it is current.
 */
TXO_API const struct txo_trace_ctx *txo_trace_set_current(const struct txo_trace_ctx *ctx);
TXO_API const struct txo_trace_ctx *txo_trace_current(void);

#endif
