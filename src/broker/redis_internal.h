/*
 * Private to the Redis Streams transport (redis_conn.c, redis_publisher.c, redis_consumer.c,
 * redis_history.c):
 * the connection both sides own one of, option checks, and the mapping of hiredis failures
 * and error replies to TXO_E* codes. Defined in redis_conn.c.
 *
 * Only src/broker/redis_*.c include <hiredis/hiredis.h>. This header is marked as a system
 * header so that -Wpedantic judges our code, not hiredis's declarations.
 */
#ifndef TXO_BROKER_REDIS_INTERNAL_H
#define TXO_BROKER_REDIS_INTERNAL_H

#pragma GCC system_header

#include <hiredis/hiredis.h>

#include "txo/redis.h"

/* Longest stream name we build or accept. */
#define TXO__REDIS_STREAM_MAX 512

/* The published fields (txo/redis.h). */
#define TXO__REDIS_F_KEY      "idempotency_key"
#define TXO__REDIS_F_TYPE     "event_type"
#define TXO__REDIS_F_AGG_TYPE "aggregate_type"
#define TXO__REDIS_F_AGG_ID   "aggregate_id"
#define TXO__REDIS_F_ID       "outbox_id"
#define TXO__REDIS_F_ENVELOPE "envelope"
#define TXO__REDIS_F_DATA     "data"
#define TXO__REDIS_F_CTYPE    "content_type"

/*
 * One connection and the parsed URL. Owned by one publisher or consumer and used by its
 * thread only. ctx is NULL while not connected; any I/O failure drops it (a hiredis context
 * is unusable after one), and the next call connects again.
 */
struct txo__redis_conn {
    const char *role; /* "publisher" or "consumer" (static) */
    char *host;
    int port;
    long db;
    char *user;      /* NULL: AUTH with the password only */
    char *password;  /* NULL: no AUTH; wiped on release */
    char where[300]; /* "redis://host:port/db" without credentials, for messages */
    int64_t connect_timeout_ms;
    int64_t timeout_ms;
    bool check_durability; /* publisher: warn once when AOF is not fsync'd on every write */
    redisContext *ctx;
};

/* Checks the settings used by role ("publisher", "consumer" or "history"). Returns 0 or
 * TXO_EINVAL. */
int txo__redis_check_opts(const struct txo_redis_opts *o, const char *role, struct txo_error *err);

/* Parses opts.url and copies what the connection needs. Release with txo__redis_conn_release. */
int txo__redis_conn_init(struct txo__redis_conn *c, const struct txo_redis_opts *o,
                         const char *role, struct txo_error *err);

/* Closes the connection, wipes the password and frees the copies. Safe on a zeroed struct. */
void txo__redis_conn_release(struct txo__redis_conn *c);

/*
 * Connects (AUTH, SELECT) unless connected. Errors: TXO_EUNAVAILABLE (refused, unreachable
 * within connect_timeout_ms, credentials refused), TXO_ENOMEM.
 */
int txo__redis_connect(struct txo__redis_conn *c, struct txo_error *err);

/* Drops the connection (after an I/O failure); the next txo__redis_connect opens a new one. */
void txo__redis_drop(struct txo__redis_conn *c);

/* Sets the socket's read and write timeout. Returns 0 or TXO_EUNAVAILABLE (connection dropped). */
int txo__redis_set_timeout(struct txo__redis_conn *c, int64_t ms, struct txo_error *err);

/*
 * Runs one command and returns its reply in *reply (free with freeReplyObject), which may be an
 * error reply: the caller decides what it means. On an I/O failure the connection is dropped
 * and the call fails: TXO_ETIMEOUT (no reply within the socket timeout) or TXO_EUNAVAILABLE.
 */
int txo__redis_command(struct txo__redis_conn *c, int argc, const char **argv, const size_t *lens,
                       redisReply **reply, struct txo_error *err);

/*
 * The code for an I/O failure of the context (after redisGetReply/redisCommand failed):
 * TXO_ETIMEOUT when the socket timed out (saved_errno EAGAIN), else TXO_EUNAVAILABLE.
 */
int txo__redis_io_code(const redisContext *ctx, int saved_errno);

/*
 * The code for an error reply (its text starts with the error's name): TXO_ECONFIG for
 * WRONGTYPE, TXO_EUNAVAILABLE for conditions that pass (OOM, LOADING, BUSY, READONLY,
 * MASTERDOWN, TRYAGAIN, CLUSTERDOWN, MISCONF, NOAUTH, WRONGPASS, NOPERM), otherwise fallback.
 */
int txo__redis_reply_code(const char *text, int fallback);

#endif
