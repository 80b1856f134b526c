/*
 * What the files of src/partition/ share: partition.c (common ground and the public calls),
 * partition_outbox.c and partition_inbox.c (each table's upkeep), partition_layout.c (the
 * layout change). Not installed.
 */
#ifndef TXO_PARTITION_INTERNAL_H
#define TXO_PARTITION_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/db.h"
#include "txo/partition.h"

/* The first column of the first row of a query as an integer; *is_null (may be NULL) when there
 * is no row or it is NULL (then *out is 0). */
int txo__partition_query_i64(struct txo_db *db, const char *sql, const struct txo_param *params,
                             size_t n, int64_t *out, bool *is_null, struct txo_error *err);

/* Runs a DDL capped at opts->ddl_wait_ms, tried again while it times out, up to
 * opts->ddl_attempts times (txo/partition.h, Locks). Errors: TXO_ELOCKTIMEOUT when no try got
 * through, DB errors. */
int txo__partition_ddl(struct txo_db *db, const char *sql, const struct txo_partition_opts *opts,
                       struct txo_error *err);

/* The same for a DDL that may copy rows (REORGANIZE PARTITION): a server stopping it half way
 * can lose the rows it had not copied yet (MariaDB 10.11 returns success then), so it is never
 * capped; its wait for the metadata lock is bounded by lock_wait_timeout instead (whole
 * seconds: up to 2 s). */
int txo__partition_ddl_copying(struct txo_db *db, const char *sql,
                               const struct txo_partition_opts *opts, struct txo_error *err);

/* head, then a partition for each of bounds[0..n) (the outbox's ids: PARTITION_DDL_ONE; the
 * inbox's Unix times: INBOX_DDL_ONE), then PARTITION_DDL_PMAX. Free with txo_free(); NULL when
 * out of memory. */
char *txo__partition_bounds_ddl(enum txo_partition_table table, const char *head,
                                const int64_t *bounds, size_t n);

/* The partitions of a layout change, put after head: bounds every width from the first
 * multiple of width above lo, through the one holding hi, then ahead more. When that would
 * make too many (the claim merges, and a lookup by inbox event id dives into, every
 * partition), width grows, to a multiple of align. Free with txo_free(); NULL when out of
 * memory. */
char *txo__partition_first_ddl(enum txo_partition_table table, const char *head, int64_t lo,
                               int64_t hi, int64_t width, int64_t align, unsigned ahead);

/* The strings parts[0..n) one after the other. Free with txo_free(); NULL when out of
 * memory. */
char *txo__partition_concat(const char *const *parts, size_t n);

/* The partitions of table, oldest first, with the bounds as the server has them (the inbox's
 * in TO_SECONDS; the outbox's newest events not read). */
int txo__partition_list_of(struct txo_db *db, const char *table, struct txo_partition_info **out,
                           size_t *n, struct txo_error *err);

/* Drops partition p (drop_head: the table's "ALTER TABLE ... DROP PARTITION "), a DDL that
 * waits for nobody, and logs it with its rows (held) and whether they were archived. */
int txo__partition_drop(struct txo_db *db, const struct txo_partition_opts *opts,
                        const char *drop_head, const struct txo_partition_info *p, uint64_t held,
                        bool archived, struct txo_error *err);

/* Deletes rows of keys_table with sql (params: range[0..n), limit) a batch at a time,
 * honouring opts->pause_ms and opts->max_batches; adds them to *deleted, and *done (may be
 * NULL) tells whether none is left. No table: nothing (done). */
int txo__partition_delete_keys(struct txo_db *db, const struct txo_partition_opts *opts,
                               const char *keys_table, const char *sql,
                               const struct txo_param *range, size_t n, uint64_t *deleted,
                               bool *done, struct txo_error *err);

/* ---- partition_outbox.c ---- */

/* Fills p's newest event (none: newest_id 0). */
int txo__partition_outbox_newest(struct txo_db *db, struct txo_partition_info *p,
                                 struct txo_error *err);
int txo__partition_outbox_maintain(struct txo_db *db, const struct txo_partition_opts *opts,
                                   unsigned *created, struct txo_error *err);
int txo__partition_outbox_retire(struct txo_db *db, const struct txo_partition_opts *opts,
                                 unsigned older_than_s, const char *archive_dir,
                                 struct txo_partition_retired *out, struct txo_error *err);

/* ---- partition_inbox.c ---- */

/* p's bounds, as the server has them (TO_SECONDS), turned into Unix times. */
void txo__partition_inbox_bounds(struct txo_partition_info *p);
/* The name of the partition below the Unix time bound: "20261204_000000" (UTC). */
void txo__partition_inbox_name(int64_t bound, char *name, size_t size);
/* The partition clause of the layout change to the partitioned inbox, put after head: from
 * the oldest processed row in opts->span_s steps to opts->ahead partitions past now. Free with
 * txo_free(). */
int txo__partition_inbox_first(struct txo_db *db, const struct txo_partition_opts *opts,
                               const char *head, char **ddl, struct txo_error *err);
int txo__partition_inbox_maintain(struct txo_db *db, const struct txo_partition_opts *opts,
                                  unsigned *created, struct txo_error *err);
int txo__partition_inbox_retire(struct txo_db *db, const struct txo_partition_opts *opts,
                                unsigned older_than_s, const char *archive_dir,
                                struct txo_partition_retired *out, struct txo_error *err);

#endif
