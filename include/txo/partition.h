/*
 * The partitioned outbox: outbox_events split into ranges of ids, so that retention drops whole
 * partitions (a file each) instead of deleting rows one by one next to the writers.
 *
 * Layout. outbox_events is RANGE-partitioned on id: partitions p<B> hold the ids below their
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
 * Changing layout online (txo_partition_enable(), txo_partition_disable()). A new table of the
 * other layout is filled beside the live one: triggers on the live table copy every insert,
 * update and delete to it, and the existing rows are copied in batches of ids, each batch a
 * short transaction that shares the rows it reads. Then one RENAME TABLE swaps the two, and the
 * old table is dropped. Appends, the relay and the worker go on throughout; the copied rows
 * keep their ids, sequences and statuses. The binlog source does not publish them again: they
 * are written to the new table under its own name. Rows copied with an explicit id keep the
 * sequence they carry (an application never gives an id: AUTO_INCREMENT does).
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

struct txo_partition_opts {
    /* How long a partition should span: a new partition's width is the append rate measured
     * over the newest full partition times this. Default 86400 (a day). */
    unsigned span_s;
    /* Width of the first partitions (txo_partition_enable()); later ones without a measured
     * rate are as wide as the last one. Default 1,000,000 ids. */
    int64_t first_ids;
    /* Partitions kept ahead of the ids in use (empty, ready to fill), 1..TXO_PARTITION_AHEAD_MAX.
     * Default 2. */
    unsigned ahead;
    /* Longest a DDL on outbox_events may take, its wait for the metadata lock included, before
     * the server stops it (and the appends queued behind it go on); default 400 ms. */
    unsigned ddl_wait_ms;
    /* Tries of such a DDL before giving up for this pass; default 40, 50 to 100 ms apart. */
    unsigned ddl_attempts;
    /* Rows copied per transaction by a layout change, archived per file; outbox_keys rows
     * deleted per statement (at least 5,000). Default 2000. */
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

/* One partition of outbox_events, oldest first; pmax has upper 0. */
struct txo_partition_info {
    char name[32];      /* "p2000000", "pmax" */
    int64_t lower;      /* the ids it holds: lower <= id < upper */
    int64_t upper;      /* 0 for pmax (no bound) */
    uint64_t rows_est;  /* the server's estimate (information_schema) */
    int64_t newest_id;  /* 0 when empty */
    char newest_at[32]; /* created_at of newest_id, "YYYY-MM-DD HH:MM:SS.ffffff" UTC; "" empty */
};

/* *partitioned: whether outbox_events has the partitioned layout. Errors: DB errors. */
TXO_API TXO_MUST_CHECK int txo_partition_is_enabled(struct txo_db *db, bool *partitioned,
                                                    struct txo_error *err);

/*
 * The partitions of outbox_events, oldest first. On success *out (free with txo_free()) holds
 * *n entries; an unpartitioned table gives 0 entries. Errors: DB errors, TXO_ENOMEM.
 */
TXO_API TXO_MUST_CHECK int txo_partition_list(struct txo_db *db, struct txo_partition_info **out,
                                              size_t *n, struct txo_error *err);

/*
 * Creates partitions until opts->ahead empty ones stand above the largest id (splitting pmax,
 * which is empty then and costs no copy; when it holds events, only with opts->split_full).
 * *created (may be NULL) gets how many. A no-op on an unpartitioned table. Errors: TXO_ELOCKTIMEOUT
 * (the metadata lock was never free in opts->ddl_attempts tries; nothing changed), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_partition_maintain(struct txo_db *db,
                                                  const struct txo_partition_opts *opts,
                                                  unsigned *created, struct txo_error *err);

/* What one txo_partition_retire() pass did. */
struct txo_partition_retired {
    unsigned dropped;      /* partitions dropped */
    uint64_t rows;         /* rows they held: those archived, or the server's estimate without */
    uint64_t keys;         /* outbox_keys rows deleted */
    unsigned kept;         /* expired partitions kept for an unfinished event */
    int64_t unfinished_id; /* the first unfinished event of the oldest kept one; 0: none */
};

/*
 * One retention pass over a partitioned outbox: txo_partition_maintain(), then drops, oldest
 * first, each partition whose newest event is older than older_than_s and whose events are all
 * finished (see the top of this file), archiving its rows first when archive_dir is set, and
 * stops at the first partition that is not ready (the ones after it are newer). Then deletes the
 * outbox_keys rows below the oldest partition left. *out (may be NULL) gets the counts, also on
 * failure. Errors: TXO_ELOCKTIMEOUT (a DDL never got its lock: the pass stopped, to be tried
 * again), archive errors (nothing dropped after them), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_partition_retire(struct txo_db *db,
                                                const struct txo_partition_opts *opts,
                                                unsigned older_than_s, const char *archive_dir,
                                                struct txo_partition_retired *out,
                                                struct txo_error *err);

/* Progress of a layout change: rows copied so far of about total. May be NULL. */
typedef void (*txo_partition_progress_fn)(uint64_t copied, uint64_t total, void *arg);

/*
 * Moves outbox_events to the partitioned layout online (see the top of this file): bounds from
 * the smallest id in opts->first_ids steps up to opts->ahead partitions past the largest.
 * Resumable: a run interrupted by a crash leaves outbox_events as it was plus the half-filled
 * table outbox_events_txo_new and its triggers, and a run again starts that copy over.
 * Errors: TXO_ESTATE (already partitioned: nothing done), TXO_ELOCKTIMEOUT (the swap's metadata
 * lock was never free), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_partition_enable(struct txo_db *db,
                                                const struct txo_partition_opts *opts,
                                                txo_partition_progress_fn progress, void *arg,
                                                struct txo_error *err);

/*
 * The way back: outbox_events unpartitioned again, with uq_outbox_idempotency_key, online, by
 * the same copy; outbox_keys is dropped at the end. Errors: TXO_ESTATE (not partitioned:
 * nothing done), as txo_partition_enable().
 */
TXO_API TXO_MUST_CHECK int txo_partition_disable(struct txo_db *db,
                                                 const struct txo_partition_opts *opts,
                                                 txo_partition_progress_fn progress, void *arg,
                                                 struct txo_error *err);

#endif
