/*
 * Private to the NATS transport (nats_publisher.c, nats_consumer.c, nats_history.c): the
 * connection each side owns one of, option checks, the stream set-up and the mapping of cnats
 * statuses to TXO_E* codes. The helpers are defined in nats_publisher.c.
 *
 * Only src/broker includes <nats/nats.h>. This header is marked as a system header so that
 * -Wpedantic judges our code, not cnats's declarations.
 */
#ifndef TXO_BROKER_NATS_INTERNAL_H
#define TXO_BROKER_NATS_INTERNAL_H

#pragma GCC system_header

#include <nats/nats.h>

#include "txo/consumer.h"
#include "txo/nats.h"

/* The header carrying the event's idempotency key. */
#define TXO__NATS_MSG_ID_HEADER "Nats-Msg-Id"

/* Longest subject we build: prefix (<= 255) + aggregate_type (<= 64) + event_type (<= 128). */
#define TXO__NATS_SUBJECT_MAX 512

/*
 * One connection with its JetStream context and a copy of the settings. Owned by one publisher
 * or consumer; its fields are written only by the thread that owns it, except what cnats does
 * internally. The callbacks registered on the connection only log, with static strings, so
 * they are safe even when cnats runs them after the connection was destroyed.
 */
struct txo__nats_conn {
    const char *role; /* "publisher", "consumer" or "history" (static) */
    char *url;
    char *stream;
    char *prefix;
    char *stream_subject;      /* "<prefix>.>" */
    struct txo_nats_opts opts; /* strings point at the copies above, or NULL */
    natsOptions *nopts;
    natsConnection *nc;
    jsCtx *js;
    jsOptions jo; /* Wait = ack_timeout_ms; used for API requests and acks */
    bool stream_ready;
};

/* Checks every setting used by role ("publisher", "consumer" or "history"). Returns 0 or
 * TXO_EINVAL. */
int txo__nats_check_opts(const struct txo_nats_opts *o, const char *role, struct txo_error *err);

/*
 * Copies the settings and opens the connection (see txo/nats.h for when that may fail).
 * ack_handler (may be NULL) receives every async PubAck with ack_closure. On error everything
 * is released. Close with txo__nats_conn_close() after a success.
 */
int txo__nats_conn_open(struct txo__nats_conn *c, const struct txo_nats_opts *o, const char *role,
                        jsPubAckHandler ack_handler, void *ack_closure, struct txo_error *err);

/* Destroys the context and the connection and frees the copies. Safe on a zeroed struct. */
void txo__nats_conn_close(struct txo__nats_conn *c);

/* True while the connection is established (not connecting, reconnecting or closed). */
bool txo__nats_connected(struct txo__nats_conn *c);

/*
 * Fails with TXO_EUNAVAILABLE ("<role>: not connected to <url> (<state>)") unless connected.
 */
int txo__nats_require_connected(struct txo__nats_conn *c, struct txo_error *err);

/*
 * Creates or updates the stream once (when opts.create_stream); later calls return at once.
 * Errors: TXO_EUNAVAILABLE (no answer), TXO_ECONFIG (the server refused the configuration).
 */
int txo__nats_ensure_stream(struct txo__nats_conn *c, struct txo_error *err);

/* The txo code for a failed cnats call: transient for timeouts and connection trouble. */
int txo__nats_code(natsStatus s, jsErrCode jerr, int fallback);

/* A short description of a cnats failure, "<status text> (JetStream error <code>)". */
void txo__nats_describe(natsStatus s, jsErrCode jerr, char *out, size_t cap);

#endif
