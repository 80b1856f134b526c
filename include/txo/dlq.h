/*
 * Dead letters: outbox events the relay gave up on. When an event's publish fails
 * max_attempts times, the relay makes its outbox_events row FAILED and, in the same
 * transaction, copies it into dead_letter_events (source_event_id, event_type, payload, error).
 * Operators list them, fix the cause (the broker, the consumer, the payload's receiver) and
 * replay them; the relay then publishes the event again like any other. Or they skip them:
 * the event is given up (SKIPPED) and, with ordering by aggregate, its aggregate goes on.
 *
 * A replay moves the SOURCE outbox row back to PENDING: the event keeps its id and idempotency
 * key, so consumers that did see an earlier attempt still de-duplicate it. The dead-letter row
 * stays (replayed_at, replay_count record the replays), so the table is the history of what
 * failed. If the replayed event fails max_attempts times again, the relay adds a second dead
 * letter for the same source event.
 *
 * Thread-safety: no shared state; each call uses only the db it is given.
 */
#ifndef TXO_DLQ_H
#define TXO_DLQ_H

#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/db.h"

/* Most dead letters one txo_dlq_list() call returns. */
#define TXO_DLQ_LIST_MAX 10000

/* One dead letter. Owned by the array it came in: free with txo_dead_letters_free(). */
struct txo_dead_letter {
    int64_t id;
    int64_t source_event_id; /* outbox_events.id; 0 when NULL (inserted by someone else) */
    char *event_type;
    char *payload;       /* JSON text */
    char *error;         /* the relay's last_error when it gave up */
    char created_at[32]; /* RFC 3339 UTC, "2026-11-30T15:37:00.123456Z" */
    char *replayed_at;   /* same format, time of the last replay; NULL when never */
    unsigned replay_count;
    char *skipped_at; /* same format, when an operator skipped the event; NULL when never */
};

/*
 * Lists up to limit (1..TXO_DLQ_LIST_MAX) dead letters with id > after_id, in id order (pass
 * 0 first, then the last id received, to page through). On success *out is an array of *n
 * entries (NULL when *n is 0), freed with txo_dead_letters_free().
 * Errors: TXO_EINVAL (limit), TXO_ENOMEM, DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_dlq_list(struct txo_db *db, int64_t after_id, size_t limit,
                                        struct txo_dead_letter **out, size_t *n,
                                        struct txo_error *err);

/* Frees the array of n dead letters from txo_dlq_list(). NULL is a no-op. */
TXO_API void txo_dead_letters_free(struct txo_dead_letter *dl, size_t n);

/*
 * One dead event: the dead letters of one source outbox event, which gets one more each time
 * a replay of it fails again. Owned by the array it came in: free with txo_dead_events_free().
 */
struct txo_dead_event {
    struct txo_dead_letter last; /* the newest letter: the one to replay or skip */
    unsigned letters;            /* dead letters of the event (>= 1) */
    unsigned replays;            /* replays over all of them */
    char *last_replayed_at;      /* RFC 3339 UTC, the newest replay; NULL when never */
    char status[16];             /* the outbox event's status now; "" when the row is gone */
};

/*
 * Lists up to limit (1..TXO_DLQ_LIST_MAX) dead events whose newest letter's id is > after_id,
 * in the order of that id (pass 0 first, then the last one's last.id, to page through). Events
 * that were skipped or published after a replay are left out. On success *out is an array of
 * *n entries (NULL when *n is 0), freed with txo_dead_events_free().
 * Errors: TXO_EINVAL (limit), TXO_ENOMEM, DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_dlq_list_events(struct txo_db *db, int64_t after_id, size_t limit,
                                               struct txo_dead_event **out, size_t *n,
                                               struct txo_error *err);

/* Frees the array of n dead events from txo_dlq_list_events(). NULL is a no-op. */
TXO_API void txo_dead_events_free(struct txo_dead_event *ev, size_t n);

/*
 * Counts dead letters: *total all of them, *unreplayed those never replayed nor skipped
 * (either may be NULL). Errors: DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_dlq_count(struct txo_db *db, uint64_t *total, uint64_t *unreplayed,
                                         struct txo_error *err);

/*
 * Replays dead letter dead_letter_id, in one READ COMMITTED transaction: its source outbox row,
 * which must be FAILED, goes back to PENDING with attempts = 0, next_attempt_at = now and no
 * lock (locked_by, locked_until NULL); last_error is kept until the next attempt replaces it or
 * the publish succeeds (then the relay clears it). The dead letter gets replayed_at = now and
 * replay_count + 1. The relay then publishes the event as usual.
 * Errors:
 *   TXO_ENOTFOUND  no such dead letter; or its source event is gone: source_event_id is NULL,
 *                  or the outbox row was deleted (a dead letter is never re-inserted as a new
 *                  outbox row: that event would need a new idempotency key and would no longer
 *                  be the event consumers may have seen);
 *   TXO_ESTATE     the source event is not FAILED (replayed already and now pending, in flight
 *                  or published);
 *   DB errors.
 * Nothing changes on error.
 */
TXO_API TXO_MUST_CHECK int txo_dlq_replay(struct txo_db *db, int64_t dead_letter_id,
                                          struct txo_error *err);

/*
 * Skips dead letter dead_letter_id: the operator gives up on its event. In one READ COMMITTED
 * transaction its source outbox row, which must be FAILED, becomes SKIPPED (never published,
 * lock released, last_error kept) and the dead letter gets skipped_at = now. With the relay's
 * ordering by aggregate (txo/relay.h), a FAILED event holds back the later events of its
 * aggregate; after the skip the next one is claimed as usual.
 * Errors: as txo_dlq_replay() (TXO_ENOTFOUND, TXO_ESTATE, DB errors). Nothing changes on
 * error.
 */
TXO_API TXO_MUST_CHECK int txo_dlq_skip(struct txo_db *db, int64_t dead_letter_id,
                                        struct txo_error *err);

#endif
