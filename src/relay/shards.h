/*
 * Shard membership of relays that publish in per-aggregate order (src/relay/shards.c). Every
 * event's shard is a function of its aggregate (outbox_events.shard); a relay claims only the
 * rows of the shards it holds, so each aggregate is published by one relay at a time and that
 * relay may take several of its events per batch. Private to the relay.
 *
 * Lifecycle: txo__shards_init() once, txo__shards_tick() before every claim (it talks to the
 * database only when a tick is due), txo__shards_leave() when the relay stops,
 * txo__shards_release() to free. One thread at a time.
 */
#ifndef TXO_RELAY_SHARDS_H
#define TXO_RELAY_SHARDS_H

#include <stdbool.h>
#include <stdint.h>

#include "queue/lease.h"
#include "txo/db.h"

/* outbox_events.shard is ... MOD 64 (sql/migrations/0014_outbox_shards.sql). */
#define TXO__SHARDS_MAX 64

struct txo__shards {
    char member[129]; /* "<relay_id>:<uuid>", outbox_shards.owner */
    int64_t lease_ms; /* how long a tick's hold lasts without the next one */
    int64_t tick_ms;  /* how often the hold is renewed and the share recomputed */
    int64_t next_tick_ms;
    int64_t forgot_ms;         /* monotonic time of the last RELAY_SHARD_SQL_FORGET */
    bool joined;               /* a tick committed since init or the last leave */
    unsigned owned;            /* shards held after the last tick */
    unsigned live;             /* live members seen by the last tick */
    unsigned total;            /* rows of outbox_shards */
    uint64_t taken;            /* shards taken over since init (from a free or expired hold) */
    uint64_t reclaimed_events; /* in-flight events of taken shards returned to PENDING */
    struct txo__lease_in take, reclaim;
    struct txo_param params[TXO__SHARDS_MAX + 2];
    int64_t ids[TXO__SHARDS_MAX];
};

/* Sets up s for a relay named relay_id (the member id adds a fresh UUID). Cannot fail. */
void txo__shards_init(struct txo__shards *s, const char *relay_id, int64_t lease_ms);

/*
 * When a tick is due (or force): in one transaction, says the member is alive, renews its
 * shards, gives back those above its fair share (shards / live members, rounded up) or takes
 * free ones up to it, returning to PENDING the events a previous holder left in flight in the
 * shards it takes. Errors: DB errors; TXO_ECONFIG when outbox_shards is empty (the
 * migration is missing).
 */
TXO_MUST_CHECK int txo__shards_tick(struct txo_db *db, struct txo__shards *s, bool force,
                                    struct txo_error *err);

/*
 * The claim's fence, first statement of an ordered claim transaction: share-locks the shards
 * the member holds with a valid lease until tx ends and returns them in held[0..*n) (room for
 * TXO__SHARDS_MAX), in shard order. Errors: DB errors.
 */
TXO_MUST_CHECK int txo__shards_hold(struct txo_tx *tx, const struct txo__shards *s, int64_t *held,
                                    size_t *n, struct txo_error *err);

/* Frees the member's shards and forgets it, so others take them at their next tick. Best
 * effort (a failure is logged: the hold then lapses after lease_ms). */
void txo__shards_leave(struct txo_db *db, struct txo__shards *s);

void txo__shards_release(struct txo__shards *s);

#endif
