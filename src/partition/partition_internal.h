/*
 * What the files of src/partition/ share: partition.c (upkeep) and partition_layout.c (the
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

/* head, then PARTITION_DDL_ONE for each of bounds[0..n), then PARTITION_DDL_PMAX. Free with
 * txo_free(); NULL when out of memory. */
char *txo__partition_bounds_ddl(const char *head, const int64_t *bounds, size_t n);

/* The strings parts[0..n) one after the other. Free with txo_free(); NULL when out of
 * memory. */
char *txo__partition_concat(const char *const *parts, size_t n);

/* The partitions of table, oldest first (their newest events not read). */
int txo__partition_list_of(struct txo_db *db, const char *table, struct txo_partition_info **out,
                           size_t *n, struct txo_error *err);

#endif
