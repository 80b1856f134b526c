/*
 * Test support: fills the outbox of a test database with numbered order events, the way the
 * relay, broker-outage and DLQ tests start. Event i is OrderCreated of aggregate
 * "<type>" / "<i>", with idempotency key "<type>:<i>:created" and payload {"order_id":i}
 * (testoutbox_insert_seq writes rows of its own shape, see there).
 * Every helper fails the current cmocka test on error. Not thread-safe.
 */
#ifndef TXO_TESTOUTBOX_H
#define TXO_TESTOUTBOX_H

#include "txo/txo.h"

struct testoutbox_events {
    const char *aggregate_type; /* NULL: "order" */
    unsigned from, to;          /* the events from..to, both included */
    unsigned unroutable;        /* this one has aggregate type "nobody" (key unchanged); 0: none */
};

/* Appends the events e names to db's outbox in one READ COMMITTED transaction. */
void testoutbox_append(struct txo_db *db, const struct testoutbox_events *e);

/* testoutbox_append of order events 1..n. */
void testoutbox_append_orders(struct txo_db *db, unsigned n);

/*
 * Inserts order events 1..n straight into outbox_events in one statement, in order of seq: event
 * seq is OrderCreated of aggregate "order" / seq, with payload {"n": seq} and idempotency key
 * "<key_prefix>:<seq>". For the tests that need many rows fast and no library call.
 */
void testoutbox_insert_seq(struct txo_db *db, unsigned n, const char *key_prefix);

/*
 * Order 4242's OrderCreated as the relay leaves an event it gave up on: FAILED after 10
 * attempts with last_error "broker unavailable", its aggregate parked, and its dead letter with
 * error (bound as given: a test may pass markup that a page must show as text). Returns the
 * dead letter's id; *event_id receives the outbox row's.
 */
int64_t testoutbox_dead_letter(struct txo_db *db, const char *error, int64_t *event_id);

/*
 * Sorts the n keys (not NULL) a broker holds and returns how many stand there again: keys equal
 * to the one before them once sorted.
 */
size_t testoutbox_sort_repeats(char **keys, size_t n);

/*
 * The idempotency keys a broker holds, checked against the outbox: sorts them
 * (testoutbox_sort_repeats) and fails the test unless count_sql, a COUNT(*) of outbox_events
 * with the key as its one parameter, is 1 for each distinct key. Returns the repeats.
 */
size_t testoutbox_check_keys(struct txo_db *db, char **keys, size_t n, const char *count_sql);

#endif
