/*
 * The retention cleaner: without it outbox_events grows by every event ever
 * published. txo_outbox_purge_published() deletes PUBLISHED rows older than an age, in small
 * batches, each in a short transaction of its own, so it never holds many locks or a long
 * undo log and can run next to the relay at any time (`txo clean`, the worker).
 *
 * The same cleaner serves the inbox (txo_inbox_purge(), txo/inbox.h) and the command queue
 * (txo_cmdq_purge_done(), txo/cmdq.h); the idempotency keys have their own
 * (txo_idem_purge(), txo/idempotency.h).
 *
 * Only terminal rows that are old enough are deleted: PENDING, PROCESSING and FAILED outbox
 * rows are never touched (FAILED rows are the source of dead letters and are needed to replay
 * them, txo/dlq.h).
 *
 * Thread-safety: no shared state; each call uses only the db it is given.
 */
#ifndef TXO_RETENTION_H
#define TXO_RETENTION_H

#include <stdbool.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/db.h"
#include "txo/partition.h"

/* Most rows one batch may delete. */
#define TXO_PURGE_BATCH_MAX 10000

/*
 * Deletes outbox events that were PUBLISHED more than older_than_s seconds ago (by
 * published_at), at most batch_size (1..TXO_PURGE_BATCH_MAX) per short READ COMMITTED
 * transaction, oldest first, until none is left or max_batches batches ran (0 = no limit).
 * The age is measured once, at the start. A consumer's inbox de-duplicates on the event's
 * idempotency key, not its row: deleting the row does not let the event be published again.
 * *deleted (may be NULL) receives the number of rows deleted, also when a later batch failed.
 * Errors: TXO_EINVAL (batch_size), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_outbox_purge_published(struct txo_db *db, unsigned older_than_s,
                                                      unsigned batch_size, unsigned max_batches,
                                                      uint64_t *deleted, struct txo_error *err);

/*
 * Deletes dead letters that were replayed (replayed_at set) more than older_than_s seconds
 * ago, in batches as txo_outbox_purge_published(). Letters never replayed are never deleted:
 * they wait for an operator. *deleted as there. Errors: TXO_EINVAL (batch_size), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_dead_letter_purge_replayed(struct txo_db *db, unsigned older_than_s,
                                                          unsigned batch_size, unsigned max_batches,
                                                          uint64_t *deleted, struct txo_error *err);

/*
 * One retention pass over every table the library keeps rows of, each with its own age:
 * PUBLISHED outbox events, replayed dead letters, completed idempotency keys, inbox rows and
 * DONE commands; a table the database does not have (a relay-only schema has only the outbox
 * and the dead letters) is skipped. Used by the worker's cleaner (every interval_s), the
 * relay's (`txo relay --clean-interval`) and `txo clean` (which can archive what it deletes:
 * archive_dir below).
 */
struct txo_retention_opts {
    unsigned interval_s;     /* the worker's cleaner period; 0 = no cleaner (default 60) */
    unsigned batch;          /* rows per delete, 1..TXO_PURGE_BATCH_MAX; default 1000 */
    unsigned max_batches;    /* per table and pass, 0 = no limit; default 100 */
    unsigned outbox_s;       /* PUBLISHED outbox rows kept; default 7 days */
    unsigned idempotency_s;  /* COMPLETED idempotency keys kept; default 1 day */
    unsigned inbox_s;        /* inbox rows kept; default 7 days */
    unsigned commands_s;     /* DONE commands kept; default 7 days */
    unsigned dead_letters_s; /* replayed dead letters kept; 0 = never deleted; default 30 days */
    unsigned pause_ms;       /* sleep between two batches of a table; default 0 */
    bool relay_tables_only;  /* only the outbox and the dead letters; default false */
    /* When set, the outbox, dead-letter and inbox rows a pass deletes are first written to
     * archive files under this existing directory (txo/archive.h); the idempotency keys and
     * commands are deleted without. Borrowed for the call. Default NULL: no archive. */
    const char *archive_dir;
    /* A partitioned outbox or inbox (txo/partition.h) is retired by whole partitions, with
     * these options (txo_partition_opts_init()'s defaults), but with batch, pause_ms and
     * max_batches as above. */
    struct txo_partition_opts partition;
};

/* Fills opts with the defaults above. Never fails. */
TXO_API void txo_retention_opts_init(struct txo_retention_opts *opts);

/* Rows a pass deleted, per table. */
struct txo_retention_counts {
    uint64_t outbox, idempotency, inbox, commands, dead_letters;
};

/*
 * Runs one pass: each table in turn, in short batches of its own transactions. *out (may be
 * NULL) receives what was deleted, also when a later table failed. Errors: TXO_EINVAL, DB
 * errors (the first one; the tables after it are not visited).
 */
TXO_API TXO_MUST_CHECK int txo_retention_run(struct txo_db *db,
                                             const struct txo_retention_opts *opts,
                                             struct txo_retention_counts *out,
                                             struct txo_error *err);

#endif
