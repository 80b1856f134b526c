/*
 * The partitioned layouts of the outbox and the inbox: outbox_events split into ranges of ids,
 * inbox_events into ranges of time, so that retention drops whole partitions (a file each)
 * instead of deleting rows one by one next to the writers. Each table's layout is chosen on its
 * own (enum txo_partition_table); both keep every promise of the unpartitioned table.
 *
 * The outbox. outbox_events is RANGE-partitioned on id: partitions p<B> hold the ids below their
 * bound B and above the previous one, and a last partition pmax (VALUES LESS THAN MAXVALUE)
 * catches whatever runs past the bounds. Ids come in commit order from AUTO_INCREMENT, so a
 * partition is a span of time; its width in ids follows the rate of appends
 * (txo_partition_opts.span_s). Lookups by id (the relay's marks, dead-letter sources, replay)
 * reach one partition; the relay's claim walks idx_outbox_due in every partition and merges
 * them in order (one index dive per partition per claim: keep a few dozen partitions, not
 * thousands).
 *
 * The idempotency key. MariaDB wants the partitioning column in every unique key, so the
 * partitioned table cannot keep uq_outbox_idempotency_key. The narrow table outbox_keys
 * (idempotency_key PRIMARY KEY, event_id) keeps the promise instead, maintained by triggers on
 * outbox_events: an append whose key is already there gets the existing event's id, so the
 * INSERT fails on the primary key with error 1062 as before (INSERT IGNORE and ON DUPLICATE KEY
 * UPDATE id = id keep working); two appends of one new key at the same moment: the second fails
 * with 1062 on outbox_keys when the first commits, INSERT IGNORE included. Each append writes one
 * outbox_keys row (and its event_id index entry) instead of the unique index entry; each dropped
 * partition's keys are deleted in batches after the drop (narrow rows, but a DELETE of each:
 * most of a pass's time and redo, bench/partition_retention.sh).
 *
 * Retention (txo_partition_retire(), run by txo_retention_run() when the outbox is
 * partitioned). A partition is dropped when its newest event and the first event above it were
 * created before the cutoff (so no append can still be adding to it) and every event in it is
 * finished: PUBLISHED, SKIPPED, FAILED with no dead letter left to
 * replay (dead-letter retention archived or deleted it), or PENDING at or below a binlog
 * source's high-water id (txo/binlog.h). A partition holding an unfinished event is kept, and
 * reported, until the event is finished (published, or its dead letter replayed or skipped with
 * `txo dlq`): moving it forward would put it behind later events of its aggregate. With an archive
 * directory, the partition's rows are first written to archive files (txo/archive.h), a batch per
 * file, all durable before the drop. Partitions are created ahead of the ids in use by the same
 * pass (txo_partition_maintain()).
 *
 * Locks. Dropping or creating a partition takes the table's metadata lock exclusively, which
 * waits for every open transaction that touched outbox_events, and new appends queue behind a
 * waiting request. So each DDL that copies no rows (DROP PARTITION, the swap, triggers) runs
 * with max_statement_time = opts.ddl_wait_ms (400 ms): when a long transaction keeps the lock,
 * the server stops the DDL, the queued appends go on, and the DDL is tried again after a
 * pause, up to opts.ddl_attempts times. An append waits for at most that long. A REORGANIZE,
 * which may copy rows, must never be stopped half way (MariaDB 10.11 then loses the rows not
 * copied yet, and reports success): its wait is bounded by lock_wait_timeout = 1 instead,
 * which counts whole seconds and lets an ALTER wait up to 2 s. It runs once per partition
 * created, on an empty pmax. *
 * The inbox. inbox_events is RANGE-partitioned on TO_SECONDS(created_at): partitions
 * p<YYYYMMDD_HHMMSS> hold the rows created before that time (UTC) and at or after the previous
 * bound, each opts.span_s wide and aligned to it (a day: midnight to midnight), and pmax the
 * rest. Its primary key becomes (event_id, created_at), which the partitioning needs; the
 * duplicate check moves to the narrow table inbox_keys (event_id PRIMARY KEY, created_at),
 * maintained by triggers: an insert of an id that is there takes the created_at it was
 * recorded with, so it fails on the primary key (1062) and `INSERT ... ON DUPLICATE KEY UPDATE
 * event_id = event_id` affects no row, as on one table, two consumers recording one new id at
 * the same moment included (the second waits for the first, then finds it). A lookup by
 * event_id alone is a dive into each partition: txo_inbox_record_many()'s check of the ids
 * recorded reads the view inbox_ids, which reads inbox_keys on this layout (one dive).
 * Retention drops a partition once its upper bound is older than the cutoff. Its rows not
 * processed yet, or processed after the cutoff, move forward first (their created_at becomes
 * now: the inbox has no order to keep), so de-duplication keeps every id as long as the
 * unpartitioned cleaner would. With an archive directory the partition's rows are written to
 * archive files (by sequence, as the inbox's always are) before the drop, and its keys are
 * deleted, so a key never outlives its row. An insert still open since before a partition's
 * bound would be older than the retention age: no such transaction lives.
 *
 * Changing layout online (txo_partition_enable(), txo_partition_disable()), either table. A
 * new table of the other layout is filled beside the live one: triggers on the live table copy
 * every insert, update and delete to it, and the existing rows are copied in batches in the
 * order of the primary key (the outbox's id, the inbox's event_id), each batch a short
 * transaction that shares the rows it reads. Then one RENAME TABLE swaps the two, and the old
 * table is dropped. Appends, the relay, consumers and the worker go on throughout; the copied
 * rows keep every column (ids, sequences, statuses, times). The binlog source does not publish
 * the outbox's copies again: they are written to the new table under its own name. Rows copied
 * with an explicit id keep the sequence they carry (an application never gives an id:
 * AUTO_INCREMENT does).
 *
 * Thread-safety: every call uses only the db it is given. Two layout changes must not run at
 * once (the second is refused while the first's table exists); retention passes may.
 */
#ifndef TXO_PARTITION_H
#define TXO_PARTITION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/db.h"

#define TXO_PARTITION_AHEAD_MAX 16

/* The tables with a partitioned layout. */
enum txo_partition_table {
    TXO_PARTITION_OUTBOX, /* outbox_events, by ranges of ids */
    TXO_PARTITION_INBOX,  /* inbox_events, by ranges of created_at */
};

/* "outbox_events" or "inbox_events"; NULL for another value. */
TXO_API const char *txo_partition_table_name(enum txo_partition_table table);

struct txo_partition_opts {
    /* How long a partition should span. The outbox's: a new partition's width is the append
     * rate measured over the newest full partition times this. The inbox's: exactly this,
     * aligned to it in UTC. Default 86400 (a day). */
    unsigned span_s;
    /* Width of the outbox's first partitions (txo_partition_enable()); later ones without a
     * measured rate are as wide as the last one. Default 1,000,000 ids. */
    int64_t first_ids;
    /* Partitions kept ahead of the ids in use (empty, ready to fill), 1..TXO_PARTITION_AHEAD_MAX.
     * Default 2. */
    unsigned ahead;
    /* Longest a DDL on the table may take, its wait for the metadata lock included, before
     * the server stops it (and the appends queued behind it go on); default 400 ms. */
    unsigned ddl_wait_ms;
    /* Tries of such a DDL before giving up for this pass; default 40, 50 to 100 ms apart. */
    unsigned ddl_attempts;
    /* Rows copied per transaction by a layout change, archived per file, moved forward per
     * statement; key rows deleted per statement (at least 5,000). Default 2000. */
    unsigned batch;
    /* Milliseconds slept between two copy batches and between two key deletes, to leave the
     * server to the writers. Default 0. */
    unsigned pause_ms;
    /* Key deletes per txo_partition_retire() pass, the rest left to the next pass; 0: all.
     * Default 0. */
    unsigned max_batches;
    /* Whether txo_partition_maintain() may split a pmax that holds events (the partitions
     * ahead ran out), copying them while appends wait. Default false: it logs an error and
     * leaves pmax as it is. */
    bool split_full;
};

TXO_API void txo_partition_opts_init(struct txo_partition_opts *opts);

/* One partition, oldest first; pmax has upper 0. */
struct txo_partition_info {
    char name[32]; /* "p2000000", "p20261204_000000", "pmax" */
    /* What it holds: the outbox's ids lower <= id < upper; the inbox's rows created at Unix
     * times lower <= created_at < upper (the first partition's lower is 0: it holds everything
     * older too). */
    int64_t lower;
    int64_t upper;      /* 0 for pmax (no bound) */
    uint64_t rows_est;  /* the server's estimate (information_schema) */
    int64_t newest_id;  /* the outbox's: 0 when empty; the inbox's: 0 */
    char newest_at[32]; /* created_at of newest_id, "YYYY-MM-DD HH:MM:SS.ffffff" UTC; "" empty */
};

/* *partitioned: whether the table has the partitioned layout. Errors: DB errors. */
TXO_API TXO_MUST_CHECK int txo_partition_is_enabled(struct txo_db *db,
                                                    enum txo_partition_table table,
                                                    bool *partitioned, struct txo_error *err);

/*
 * The partitions of the table, oldest first. On success *out (free with txo_free()) holds *n
 * entries; an unpartitioned table (or none) gives 0 entries. Errors: DB errors, TXO_ENOMEM.
 */
TXO_API TXO_MUST_CHECK int txo_partition_list(struct txo_db *db, enum txo_partition_table table,
                                              struct txo_partition_info **out, size_t *n,
                                              struct txo_error *err);

/*
 * Creates partitions until opts->ahead empty ones stand above the largest id (the outbox) or
 * above now (the inbox), splitting pmax, which is empty then and costs no copy; when it holds
 * rows, only with opts->split_full. *created (may be NULL) gets how many. A no-op on an
 * unpartitioned table. Errors: TXO_ELOCKTIMEOUT (the metadata lock was never free in
 * opts->ddl_attempts tries; nothing changed), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_partition_maintain(struct txo_db *db, enum txo_partition_table table,
                                                  const struct txo_partition_opts *opts,
                                                  unsigned *created, struct txo_error *err);

/* What one txo_partition_retire() pass did. */
struct txo_partition_retired {
    unsigned dropped;      /* partitions dropped */
    uint64_t rows;         /* rows they held: those archived, or the server's estimate without */
    uint64_t keys;         /* outbox_keys or inbox_keys rows deleted */
    uint64_t moved;        /* the inbox's unfinished rows moved forward */
    unsigned kept;         /* the outbox's expired partitions kept for an unfinished event */
    int64_t unfinished_id; /* the first unfinished event of the oldest kept one; 0: none */
};

/*
 * One retention pass over a partitioned table: txo_partition_maintain(), then drops, oldest
 * first, each partition that expired older_than_s ago and is finished (see the top of this
 * file for each table's rule), archiving its rows first when archive_dir is set, and stops at
 * the first partition that is not ready (the ones after it are newer). Then deletes the key
 * rows below the oldest partition left. *out (may be NULL) gets the counts, also on failure.
 * Errors: TXO_ELOCKTIMEOUT (a DDL never got its lock: the pass stopped, to be tried again),
 * archive errors (nothing dropped after them), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_partition_retire(struct txo_db *db, enum txo_partition_table table,
                                                const struct txo_partition_opts *opts,
                                                unsigned older_than_s, const char *archive_dir,
                                                struct txo_partition_retired *out,
                                                struct txo_error *err);

/* Progress of a layout change: rows copied so far of about total. May be NULL. */
typedef void (*txo_partition_progress_fn)(uint64_t copied, uint64_t total, void *arg);

/*
 * Moves the table to the partitioned layout online (see the top of this file). The outbox's
 * bounds: from the smallest id in opts->first_ids steps up to opts->ahead partitions past the
 * largest. The inbox's: from its oldest processed row in opts->span_s steps up to opts->ahead
 * partitions past now. Resumable: a run interrupted by a crash leaves the table as it was plus
 * the half-filled table <table>_txo_new and its triggers, and a run again starts that copy
 * over. Errors: TXO_ESTATE (already partitioned: nothing done), TXO_ENOTFOUND (no such table),
 * TXO_ELOCKTIMEOUT (the swap's metadata lock was never free), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_partition_enable(struct txo_db *db, enum txo_partition_table table,
                                                const struct txo_partition_opts *opts,
                                                txo_partition_progress_fn progress, void *arg,
                                                struct txo_error *err);

/*
 * *pending: whether a layout change of the table is under way, or was stopped before its swap
 * (killed, or its swap never got the lock): its table <table>_txo_new is there, and the
 * live table's triggers copy every write into it until a txo_partition_enable() or
 * txo_partition_disable() runs to the end. Errors: DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_partition_change_pending(struct txo_db *db,
                                                        enum txo_partition_table table,
                                                        bool *pending, struct txo_error *err);

/*
 * The way back: the table unpartitioned again (the outbox with uq_outbox_idempotency_key, the
 * inbox with event_id its primary key), online, by the same copy; the key table is dropped at
 * the end. Errors: TXO_ESTATE (not partitioned: nothing done), as txo_partition_enable().
 */
TXO_API TXO_MUST_CHECK int txo_partition_disable(struct txo_db *db, enum txo_partition_table table,
                                                 const struct txo_partition_opts *opts,
                                                 txo_partition_progress_fn progress, void *arg,
                                                 struct txo_error *err);

#endif
