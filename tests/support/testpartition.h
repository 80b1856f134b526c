/*
 * The partition tests' ways in (tests/fault/test_partition.c, test_partition_inbox.c): `txo
 * partition` run as a real process, and the table's layout read through the library. Every
 * function fails the test on a setup error.
 */
#ifndef TXO_TESTPARTITION_H
#define TXO_TESTPARTITION_H

#include <stdbool.h>

#include "txo/partition.h"

/* `txo partition ACTION TABLE --partition-batch=300 [extra]` (extra may be NULL): its exit
 * status, -1 when killed (its output printed). */
int testpartition_txo(const char *action, enum txo_partition_table table, const char *extra);

/* Whether the table has the partitioned layout. */
bool testpartition_enabled(struct txo_db *db, enum txo_partition_table table);

#endif
