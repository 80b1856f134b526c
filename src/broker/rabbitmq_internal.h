/*
 * Private to the RabbitMQ transport (rabbitmq_publisher.c, rabbitmq_consumer.c): one AMQP
 * connection with its settings, opened lazily and dropped on any failure, and the mapping of
 * rabbitmq-c results to TXO_E* codes. The helpers are defined in rabbitmq_publisher.c.
 *
 * Only src/broker/rabbitmq_*.c include rabbitmq-c. This header is marked as a system header
 * so that -Wpedantic judges our code, not rabbitmq-c's declarations.
 */
#ifndef TXO_BROKER_RABBITMQ_INTERNAL_H
#define TXO_BROKER_RABBITMQ_INTERNAL_H

#pragma GCC system_header

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>

#include "txo/rabbitmq.h"

/* The one channel every connection uses. */
#define TXO__RMQ_CHANNEL 1

/* Longest name or routing key AMQP 0-9-1 carries (shortstr). */
#define TXO__RMQ_NAME_MAX 255

/* The header counting deliveries across retries (the consumer's retry queue). */
#define TXO__RMQ_DELIVERY_HEADER "x-txo-delivery"

/*
 * One connection and a copy of the settings. Owned by one publisher or consumer and touched
 * only by the thread using it. url_buf holds the URL parsed in place (amqp_parse_url): it
 * carries the password and is wiped when released.
 */
struct txo__rmq_conn {
    const char *role; /* "publisher", "consumer", "consumer retry" (static) */
    char *url_buf;
    size_t url_len;
    struct amqp_connection_info info; /* points into url_buf (vhost maybe default_vhost) */
    char default_vhost[2];            /* "/" */
    char *exchange;
    struct txo_rabbitmq_opts opts; /* strings NULL or pointing at copies */
    bool confirm;                  /* put the channel in confirm mode */
    amqp_connection_state_t st;    /* NULL while down */
    uint64_t next_tag;             /* the delivery tag of the next publish (confirm mode) */
    char blocked[128];             /* why the broker blocks this connection's publishing, or "" */
};

/*
 * If frame is connection.blocked or connection.unblocked (a memory or disk alarm of the
 * broker: publishing connections stop being read), records it in c->blocked, logs it, and
 * returns true.
 */
bool txo__rmq_blocked_frame(struct txo__rmq_conn *c, const amqp_frame_t *frame);

#define TXO__RMQ_BLOCKED_NOTE_MAX 192 /* the note below, with the longest reason kept */

/* ": the broker blocks publishing (<reason>)" in buf while c is blocked, else "": for the
 * message of a confirm that did not come. Returns buf. */
const char *txo__rmq_blocked_note(const struct txo__rmq_conn *c, char *buf, size_t cap);

/* Checks every setting used by role. Returns 0 or TXO_EINVAL naming the setting. */
int txo__rmq_check_opts(const struct txo_rabbitmq_opts *o, bool consumer, struct txo_error *err);

/* Copies the settings and parses the URL; does not connect. On error everything is released. */
int txo__rmq_conn_init(struct txo__rmq_conn *c, const struct txo_rabbitmq_opts *o, const char *role,
                       bool confirm, struct txo_error *err);

/*
 * Opens the connection when it is down: TCP connect, login, channel, confirm.select (when
 * confirm) and, with opts.declare, the exchange. 0 when up. Errors: TXO_EUNAVAILABLE
 * (unreachable, refused, timed out), TXO_ECONFIG (login refused, the exchange exists with
 * other settings). A failure leaves the connection down.
 */
int txo__rmq_conn_open(struct txo__rmq_conn *c, struct txo_error *err);

/* Drops the connection at once (no close handshake: it may be broken). Safe when down. */
void txo__rmq_conn_drop(struct txo__rmq_conn *c);

/* Closes politely (bounded by connect_timeout_ms), frees the copies, wipes the URL. */
void txo__rmq_conn_release(struct txo__rmq_conn *c);

/*
 * The txo code and description of a failed RPC reply, what = "declaring queue x". Drops the
 * connection: after a channel or connection exception it cannot be used any more.
 */
int txo__rmq_reply_error(struct txo__rmq_conn *c, amqp_rpc_reply_t r, const char *what,
                         struct txo_error *err);

/* The last RPC's reply as above, or 0 when it was normal. */
int txo__rmq_check_rpc(struct txo__rmq_conn *c, const char *what, struct txo_error *err);

/* "host:port/vhost" of the URL, for messages (never the credentials). */
const char *txo__rmq_where(const struct txo__rmq_conn *c, char *buf, size_t cap);

/* A NUL-terminated copy of b (txo_free), or NULL when out of memory. */
char *txo__rmq_strdup_bytes(amqp_bytes_t b);

/* amqp_bytes_t of a C string (rabbitmq-c's amqp_cstring_bytes takes a non-const char *). */
amqp_bytes_t txo__rmq_bytes(const char *s);

#endif
