/*
 * Test support: what a consumer test's handler does with a message, its one effect: the
 * message recorded in the test database's inbox in a transaction of its own, so a test can
 * count the messages handled once and the duplicates. Thread-safe as far as db is (one
 * connection per thread).
 */
#ifndef TXO_TESTINBOX_H
#define TXO_TESTINBOX_H

#include <stdbool.h>

#include "txo/txo.h"

/*
 * Records msg in db's inbox (txo_inbox_record: its msg_id as the event id, its data as the
 * payload, type as the event type) in one READ COMMITTED transaction. *duplicate says whether
 * the inbox had it already. Returns 0, or a negative TXO_E* code with err set.
 */
int testinbox_record(struct txo_db *db, const struct txo_inbound_message *msg, const char *type,
                     bool *duplicate, struct txo_error *err);

#endif
