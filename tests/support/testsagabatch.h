/*
 * Test support: order sagas run in batches (txo_saga_run_many through orders_run_saga_many),
 * for test_saga_batch.c and test_saga_batch_deadlock.c. Orders, their batches, the order
 * service's invariants afterwards, and the InnoDB lock waits between two connections, read
 * from information_schema on a server of the test's own (testserver.h), where the app user may
 * (the shared server does not grant it PROCESS).
 *
 * Every helper fails the current cmocka test (fail_msg) on error, so call them from the test's
 * thread only.
 */
#ifndef TXO_TESTSAGABATCH_H
#define TXO_TESTSAGABATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "order_saga.h"
#include "orders.h"
#include "testserver.h"
#include "txo/txo.h"

/*
 * A fresh database `name` on s with the order service's schema, and a connection to it; o
 * receives the options it was opened with (more connections may use them; the database name
 * is borrowed from the caller).
 */
struct txo_db *testsagabatch_open(const struct testserver *s, const char *name,
                                  struct txo_db_opts *o);

/* sku with qty units available. */
void testsagabatch_set_stock(struct txo_db *db, const char *sku, int32_t qty);

/* An order of customer for one unit of sku (and two airpods when with_airpods), its saga
 * started: *order_id and saga_id receive their ids. */
void testsagabatch_create(struct txo_db *db, int64_t customer, const char *sku, bool with_airpods,
                          int64_t *order_id, char saga_id[TXO_SAGA_ID_LEN]);

/* Runs the sagas ids[0..n) as one batch on db; fails when the batch or one of its sagas
 * returned an error. rcs and finals receive n entries each. */
void testsagabatch_run(struct txo_db *db, const char *const *ids, size_t n,
                       const struct order_faults *faults, const struct txo_saga_opts *opts,
                       int *rcs, enum txo_saga_status *finals);

/* The statements this connection has sent so far (Questions counts every one, prepared
 * executions included; the query asking counts too). */
int64_t testsagabatch_statements(struct txo_db *db);

/*
 * The order service's invariants for the n SKUs (initial: their stock before any order):
 * available + reserved conserved and never negative, reserved = the RESERVED reservations =
 * the quantity of the CONFIRMED orders, at most one payment and one shipment per order.
 */
void testsagabatch_assert_invariants(struct txo_db *db, const char *const *skus,
                                     const int32_t *initial, size_t n);

/* The index of the saga id that sorts last among ids[0..n): a batch locks its sagas' step
 * rows in saga id order (their PRIMARY (saga_id, step_order)), so that one's last. */
size_t testsagabatch_last_saga(const char *const *ids, size_t n);

/* CONNECTION_ID() of db, the trx_mysql_thread_id of its transactions in INNODB_TRX. */
int64_t testsagabatch_connection_id(struct txo_db *db);

/*
 * Polls information_schema (from probe, a third connection) until the transaction of the
 * connection `waiter` waits for a lock that the transaction of the connection `holder` holds,
 * for at most timeout_ms. Returns the waiter's trx_rows_locked at that moment, and its current
 * statement in query (size bytes; may be NULL); -1 when it did not wait in time.
 */
int64_t testsagabatch_wait_lock(struct txo_db *probe, int64_t waiter, int64_t holder,
                                int64_t timeout_ms, char *query, size_t size);

#endif
