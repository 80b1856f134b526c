/*
 * The transactional inbox: how a consumer applies each message's effect once,
 * although delivery is at least once.
 *
 * The consumer records the message's id in inbox_events inside the SAME transaction that
 * applies the message's effect:
 *
 *   txo_db_transact(db, ..., fn) where fn does
 *       txo_inbox_record(tx, msg_id, type, payload, &dup, err);
 *       if (!dup)
 *           apply the effect with tx;
 *       return 0;                                  (commit: the row and the effect, or neither)
 *
 * Invariants:
 *   - a row in inbox_events means the message's effect is committed; a message whose id is
 *     there is a duplicate and its effect is skipped;
 *   - the id is compared byte for byte (inbox_events.event_id is VARBINARY(255) since
 *     migration 0006): "Evt-1" and "evt-1" are different messages;
 *   - two transactions recording the same id at the same time: the second one's insert waits
 *     for the first one's row lock; when the first commits the second sees a duplicate, when
 *     it rolls back the second records the id itself. So exactly one effect commits.
 *
 * Retention: the inbox remembers ids only as long as it keeps their rows. txo_inbox_purge()
 * deletes rows processed long ago; the age must exceed the longest time a message can be
 * redelivered (broker redelivery window, relay lease plus backoff, replays from the dead-letter
 * table), or a late duplicate is applied again.
 *
 * Thread-safety: no shared state; each call uses only the tx/db it is given.
 */
#ifndef TXO_INBOX_H
#define TXO_INBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/db.h"

/* Longest event id, in bytes (inbox_events.event_id VARBINARY(255)). */
#define TXO_INBOX_EVENT_ID_MAX 255

/*
 * Records message event_id (of type event_type, with the JSON document payload_json) as
 * processed now, inside tx, which also applies the message's effect. Nothing is committed
 * here. *duplicate is set to false when the row was inserted, to true when a row with this id
 * was already committed (nothing is changed then: the caller skips the effect and commits, so
 * the message is acknowledged). When another open transaction holds the same id, this call
 * waits for it (up to the session's innodb_lock_wait_timeout, then TXO_ELOCKTIMEOUT, which
 * txo_db_transact() retries).
 * On a duplicate the existing row stays locked (exclusively: the statement is an
 * INSERT ... ON DUPLICATE KEY UPDATE that changes nothing) until tx ends.
 * Errors: TXO_EINVAL (event_id empty or longer than TXO_INBOX_EVENT_ID_MAX bytes, event_type
 * empty or longer than 128 bytes, payload missing), TXO_ECONSTRAINT (payload is not JSON),
 * DB errors. On error *duplicate is not written.
 */
TXO_API TXO_MUST_CHECK int txo_inbox_record(struct txo_tx *tx, const char *event_id,
                                            const char *event_type, const char *payload_json,
                                            bool *duplicate, struct txo_error *err);

/* One message for txo_inbox_record_many(); strings borrowed for the call. */
struct txo_inbox_entry {
    const char *event_id;
    const char *event_type;
    const char *payload_json;
};

/*
 * txo_inbox_record() for n messages in two statements: one SELECT of the ids recorded
 * already, one multi-row INSERT of the others. duplicate[i] is set as txo_inbox_record()
 * sets it; an id given twice in entries is a duplicate the second time. Errors: those of
 * txo_inbox_record() for any entry (checked before anything is written), and TXO_ECONFLICT
 * when another transaction recorded one of the ids between the two statements (the caller
 * rolls back and records the messages one by one, where the row lock decides). n = 0 writes
 * nothing and succeeds.
 */
TXO_API TXO_MUST_CHECK int txo_inbox_record_many(struct txo_tx *tx,
                                                 const struct txo_inbox_entry *entries, size_t n,
                                                 bool *duplicate, struct txo_error *err);

/*
 * Order. Every event txo publishes carries its sequence in its aggregate and the sequence it
 * follows (txo/publisher.h, txo_event.sequence and prev_sequence). The inbox keeps the last
 * sequence handled per aggregate (inbox_aggregates) and judges each event against it:
 */
enum txo_inbox_order {
    TXO_INBOX_UNCHECKED = 0, /* the event has no sequence (or no aggregate): not judged */
    TXO_INBOX_IN_ORDER,      /* it follows the last event handled (prev_sequence <= last) */
    TXO_INBOX_GAP,           /* events between the last handled and this one were not handled
                              * (prev_sequence > last); nothing handled yet counts as last 0 */
    TXO_INBOX_OLDER,         /* sequence <= last: an older event after a newer one */
};

/* "unchecked", "in_order", "gap", "older" (metric label values). Never NULL. */
TXO_API const char *txo_inbox_order_name(enum txo_inbox_order o);

/* One event to judge; strings borrowed for the call. */
struct txo_inbox_position {
    const char *aggregate_type;
    const char *aggregate_id;
    uint64_t sequence; /* 0: the event has none, order[i] = TXO_INBOX_UNCHECKED */
    uint64_t prev_sequence;
};

/*
 * Judges pos[0..n) in that order (several events of one aggregate each against the one before)
 * into order[i], and moves each aggregate's last sequence to the highest one seen, inside tx:
 * call it in the transaction that handles the events, for the ones that are not duplicates,
 * so the last sequence moves exactly when the effects commit. To hold an event back until its
 * predecessor was handled, roll tx back when it is TXO_INBOX_GAP. Two statements whatever n
 * (one when no event has a sequence); the aggregates' rows stay locked until tx ends.
 * Errors: TXO_EINVAL (an aggregate string empty or too long with a sequence), TXO_ENOMEM,
 * DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_inbox_check_order(struct txo_tx *tx,
                                                 const struct txo_inbox_position *pos, size_t n,
                                                 enum txo_inbox_order *order,
                                                 struct txo_error *err);

/*
 * Retention: deletes inbox rows processed more than older_than_s seconds ago (rows with
 * processed_at NULL, which txo never writes, are kept), oldest first, at most batch_size
 * (1..10000) rows per short transaction of its own, until none is left or max_batches batches
 * ran (0 = no limit). Runs on db outside any transaction of the caller. *deleted (may be NULL)
 * receives the number of rows deleted, also when a later batch failed.
 * Errors: TXO_EINVAL (batch_size), DB errors. Implemented in src/retention/retention.c.
 */
TXO_API TXO_MUST_CHECK int txo_inbox_purge(struct txo_db *db, unsigned older_than_s,
                                           unsigned batch_size, unsigned max_batches,
                                           uint64_t *deleted, struct txo_error *err);

#endif
