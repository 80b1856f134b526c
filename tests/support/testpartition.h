/*
 * The partition tests' ways in (tests/fault/test_partition.c, test_partition_inbox.c): `txo
 * partition` run as a real process, and the table's layout read through the library. Every
 * function fails the test on a setup error.
 */
#ifndef TXO_TESTPARTITION_H
#define TXO_TESTPARTITION_H

#include <stdbool.h>
#include <stdint.h>

#include "testdb.h"
#include "txo/db.h"
#include "txo/partition.h"

/* `txo partition ACTION TABLE --partition-batch=300 [extra]` (extra may be NULL): its exit
 * status, -1 when killed (its output printed). */
int testpartition_txo(const char *action, enum txo_partition_table table, const char *extra);

/*
 * `txo partition ACTION TABLE [extra]` with write(tx, arg) run in one transaction that commits
 * right after the change's k-th copy trigger (k = 1 or 2; the change creates 3, one DDL each,
 * and writers run between them). Transactions holding the table's metadata lock put it there:
 * while a trigger's DDL waits for holder j-1, holder j queues behind the DDL; holder j-1
 * commits, the DDL creates its trigger and holder j is granted the lock as the DDL releases
 * it, before the next DDL asks for it. The change must exit 0. Returns how many copy triggers
 * there were when write ran: k, unless a capped wait of a DDL ran out between two steps of
 * the chain (the caller then tries again).
 */
int64_t testpartition_write_between_triggers(struct testdb *t, const char *action,
                                             enum txo_partition_table table, const char *extra,
                                             int k, txo_tx_fn write, void *arg);

/* Whether the table has the partitioned layout. */
bool testpartition_enabled(struct txo_db *db, enum txo_partition_table table);

#endif
