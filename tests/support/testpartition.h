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
 * Writes placed between the copy triggers of a layout change. The change creates 3 triggers,
 * one DDL each, and writers run between them; transactions that hold the table's metadata lock
 * put one transaction right after the first trigger, and in a later change after the second:
 * while a trigger's DDL waits for holder j-1, holder j queues behind the DDL; holder j-1
 * commits, the DDL creates its trigger and holder j is granted the lock as the DDL releases
 * it, before the next DDL asks for it.
 *
 * The transaction, in round r: inserts a row and updates it, inserts a row and deletes it
 * (keys "between-<r>-updated" and "between-<r>-deleted"), updates an older row and deletes
 * another (old_key followed by 10r + 1 and 10r + 2: the table holds them before the first
 * round).
 * After each change: both updated rows are in their updated state (count_updated of the key
 * is 1), both deleted ones are gone (count_key is 0), and check_keys holds when the table is
 * partitioned. Each statement takes the key as its one parameter.
 */
struct testpartition_writes {
    enum txo_partition_table table;
    const char *insert, *update, *delete;
    const char *old_key;                   /* an older row's key: this, then a number */
    const char *count_updated;             /* rows of the key in the state update leaves */
    const char *count_key;                 /* rows of the key */
    void (*check_keys)(struct txo_db *db); /* NULL: nothing more */
};

/*
 * Changes the table's layout (enable, disable, enable, ...) with the writes after the first
 * copy trigger, then after the second, checking after each change; a try where a capped wait
 * of the DDL ran out in the middle of the chain (the writes landed elsewhere, still checked)
 * is made again, up to 8 changes in all. The test fails unless both places were hit.
 */
void testpartition_writes_between_triggers(struct testdb *t, const struct testpartition_writes *w);

/* Whether the table has the partitioned layout. */
bool testpartition_enabled(struct txo_db *db, enum txo_partition_table table);

#endif
