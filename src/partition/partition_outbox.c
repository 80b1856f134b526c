#include "core/common.h"

/*
 * The partitioned outbox's upkeep (include/txo/partition.h): creating partitions ahead of the
 * ids in use, and retiring the expired ones (archive, drop, keys). What both layouts share is
 * partition.c; the layout change is partition_layout.c.
 *
 * Invariants: a partition is dropped only when its newest event is older than the cutoff and
 * none of its events is unfinished, both read just before the drop; partitions are dropped
 * oldest first, so the keys of every dropped event are exactly the outbox_keys rows below the
 * oldest partition left, whatever pass dropped it (a crash between a drop and its keys' delete
 * is finished by the next pass). Partition DDL never waits in the metadata lock queue
 * (capped, tried again: txo__partition_ddl()).
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "partition/partition_internal.h"
#include "partition/partition_sql.h"
#include "txo/archive.h"
#include "txo/binlog.h"
#include "txo/clock.h"
#include "txo/crash.h"
#include "txo/partition.h"

int txo__partition_outbox_newest(struct txo_db *db, struct txo_partition_info *p,
                                 struct txo_error *err)
{
    struct txo_param params[] = {txo_p_i64(p->lower), txo_p_i64(p->upper ? p->upper : INT64_MAX)};
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, PARTITION_SQL_NEWEST, params, 2, &rows, err);
    if (rc < 0)
        return rc;
    p->newest_id = 0;
    p->newest_at[0] = '\0';
    if (txo_rows_count(rows) == 1) {
        p->newest_id = txo_rows_i64(rows, 0, 0);
        const char *at = txo_rows_str(rows, 0, 1, NULL);
        snprintf(p->newest_at, sizeof(p->newest_at), "%s", at != NULL ? at : "");
    }
    txo_rows_free(rows);
    return 0;
}

/* ---- creating partitions ahead ---- */

/*
 * The width of the next partition: the append rate over the newest full partition (the last
 * bounded one below the largest id) times opts->span_s; without a rate (no full partition, or
 * its events all of one instant), the width of the last partition, or opts->first_ids.
 */
static int next_width(struct txo_db *db, const struct txo_partition_opts *opts,
                      const struct txo_partition_info *parts, size_t n, int64_t max_id,
                      int64_t *width, struct txo_error *err)
{
    *width = opts->first_ids;
    const struct txo_partition_info *full = NULL;
    for (size_t i = 0; i < n; i++) {
        if (parts[i].upper != 0 && parts[i].lower > 0)
            *width = parts[i].upper - parts[i].lower; /* no rate yet: as wide as the last one */
        if (parts[i].upper != 0 && parts[i].upper <= max_id)
            full = &parts[i];
    }
    if (full == NULL || opts->span_s == 0)
        return 0;
    struct txo_param params[] = {txo_p_i64(full->lower), txo_p_i64(full->upper)};
    struct txo_rows *rows = NULL;
    int rc = 0;
    /* The oldest and the newest events of the partition: two dives. */
    int64_t first = 0, last = 0;
    char first_at[32] = "", last_at[32] = "";
    for (int k = 0; k < 2; k++) {
        rc = txo_db_query(db, k == 0 ? PARTITION_SQL_OLDEST : PARTITION_SQL_NEWEST, params, 2,
                          &rows, err);
        if (rc < 0)
            return rc;
        if (txo_rows_count(rows) == 1) {
            *(k == 0 ? &first : &last) = txo_rows_i64(rows, 0, 0);
            snprintf(k == 0 ? first_at : last_at, sizeof(first_at), "%s",
                     txo_rows_str(rows, 0, 1, NULL));
        }
        txo_rows_free(rows);
        rows = NULL;
    }
    if (last <= first)
        return 0;
    struct txo_param span[] = {txo_p_str(first_at), txo_p_str(last_at)};
    int64_t us = 0;
    rc = txo__partition_query_i64(db, "SELECT TIMESTAMPDIFF(MICROSECOND, ?, ?)", span, 2, &us, NULL,
                                  err);
    if (rc < 0 || us <= 0)
        return rc;
    double per_s = (double)(last - first) * 1e6 / (double)us;
    double w = per_s * (double)opts->span_s;
    *width = w < 1.0 ? 1 : w < 1e15 ? (int64_t)w : (int64_t)1e15;
    return 0;
}

int txo__partition_outbox_maintain(struct txo_db *db, const struct txo_partition_opts *opts,
                                   unsigned *created, struct txo_error *err)
{
    struct txo_partition_info *parts = NULL;
    size_t n = 0;
    char *ddl = NULL;
    if (created != NULL)
        *created = 0;
    int rc = txo__partition_list_of(db, PARTITION_TABLE, &parts, &n, err);
    if (rc < 0 || n == 0)
        goto out;
    int64_t max_id = 0, width = 0;
    rc = txo__partition_query_i64(db, PARTITION_SQL_MAX_ID, NULL, 0, &max_id, NULL, err);
    if (rc == 0)
        rc = next_width(db, opts, parts, n, max_id, &width, err);
    if (rc < 0)
        goto out;
    /* The last bound, and how many bounded partitions stand empty above the largest id. */
    int64_t bound = n >= 2 ? parts[n - 2].upper : 0;
    unsigned empty = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (parts[i].lower > max_id)
            empty++;
    bool full = bound <= max_id;
    if (full && !opts->split_full) {
        TXO_LOG(TXO_LOG_ERROR, "partition",
                "pmax holds events: no partition ahead was left. Run `txo partition maintain "
                "--split-full` at a quiet moment (appends wait while its events are copied)",
                TXO_KV_I64("max_id", max_id), TXO_KV_I64("last_bound", bound));
        goto out;
    }
    if (full) { /* the next bound goes past pmax's events */
        bound = max_id + 1;
        empty = 0;
    }
    if (empty >= opts->ahead)
        goto out;
    unsigned add = opts->ahead - empty;
    int64_t bounds[TXO_PARTITION_AHEAD_MAX];
    if (add > TXO_PARTITION_AHEAD_MAX)
        add = TXO_PARTITION_AHEAD_MAX;
    for (unsigned i = 0; i < add; i++)
        bounds[i] = bound += width;
    ddl = txo__partition_bounds_ddl(TXO_PARTITION_OUTBOX, PARTITION_DDL_SPLIT_MAX, bounds, add);
    if (ddl == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "out of memory");
        goto out;
    }
    /* A REORGANIZE may copy rows (pmax's, or ids that jumped past the last bound meanwhile):
     * never stopped half way (txo__partition_ddl_copying()). */
    rc = txo__partition_ddl_copying(db, ddl, opts, err);
    if (rc < 0)
        goto out;
    if (created != NULL)
        *created = add;
    TXO_LOG(TXO_LOG_INFO, "partition", "created", TXO_KV_U64("partitions", add),
            TXO_KV_I64("width", width), TXO_KV_I64("up_to", bound));
out:
    if (rc < 0)
        txo_error_wrap(err, "creating outbox partitions ahead");
    txo_free(ddl);
    txo_free(parts);
    return rc;
}

/* ---- retiring expired partitions ---- */

/* *first gets the smallest unfinished id of p (0: none). */
static int unfinished(struct txo_db *db, const struct txo_partition_info *p, int64_t through,
                      int64_t *first, struct txo_error *err)
{
    struct txo_param params[] = {txo_p_i64(p->lower), txo_p_i64(p->upper), txo_p_i64(through)};
    int64_t id = 0;
    bool none = true;
    int rc =
        txo__partition_query_i64(db, PARTITION_SQL_UNFINISHED_HELD, params, 2, &id, &none, err);
    *first = none ? 0 : id;
    /* Every PENDING event is published when the source's high-water id covers the range. */
    if (rc < 0 || (through > 0 && through >= p->upper - 1))
        return rc;
    rc = txo__partition_query_i64(db, PARTITION_SQL_UNFINISHED_PENDING, params, 3, &id, &none, err);
    if (rc == 0 && !none && (*first == 0 || id < *first))
        *first = id;
    return rc;
}

/*
 * *past: the appends had moved past p before the cutoff: the first event above p was created
 * before it. Ids come in order, so an append that took an id of p and has not committed yet
 * (invisible to the checks, yet dropped with p once it commits) would have been open since
 * then, longer than the retention age: no such transaction lives. The partition still filling
 * never qualifies.
 */
static int appended_past(struct txo_db *db, const struct txo_partition_info *p, const char *cutoff,
                         bool *past, struct txo_error *err)
{
    struct txo_param params[] = {txo_p_i64(p->upper), txo_p_i64(INT64_MAX)};
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, PARTITION_SQL_OLDEST, params, 2, &rows, err);
    if (rc < 0)
        return rc;
    const char *at = txo_rows_count(rows) == 1 ? txo_rows_str(rows, 0, 1, NULL) : NULL;
    *past = at != NULL && strcmp(at, cutoff) < 0;
    txo_rows_free(rows);
    return 0;
}

/*
 * Writes p's rows to archive files, a batch each, in id order; *archived gets how many. A pass that
 * stopped half way (killed, or its drop never got the lock) left files for the first rows: the
 * newest file of the table tells where to go on, so no row is archived twice.
 */
static int archive_partition(struct txo_db *db, const struct txo_partition_opts *opts,
                             const struct txo_partition_info *p, const char *dir,
                             uint64_t *archived, struct txo_error *err)
{
    *archived = 0;
    struct txo_archive_column *cols = NULL;
    size_t n_cols = 0, id_col = 0;
    struct txo_rows *rows = NULL;
    char *newest = NULL;
    int64_t from = p->lower - 1;
    int rc = txo_archive_columns(db, PARTITION_TABLE, &cols, &n_cols, err);
    if (rc == 0)
        rc = txo_archive_newest(dir, PARTITION_TABLE, &newest, err);
    if (rc < 0)
        goto out;
    for (size_t i = 0; i < n_cols; i++)
        if (strcmp(cols[i].name, "id") == 0)
            id_col = i;
    if (newest != NULL) {
        struct txo_archive_file f;
        rc = txo_archive_read(newest, &f, err);
        if (rc < 0)
            goto out;
        if (f.last_id >= p->lower && f.last_id < p->upper)
            from = f.last_id;
        txo_archive_file_release(&f);
    }
    for (;;) {
        struct txo_param params[] = {txo_p_i64(from), txo_p_i64(p->upper), txo_p_i64(opts->batch)};
        rc = txo_db_query(db, PARTITION_SQL_ROWS_FROM, params, 3, &rows, err);
        if (rc < 0)
            goto out;
        size_t n = txo_rows_count(rows);
        if (n == 0)
            break;
        char *path = NULL;
        rc = txo_archive_write(dir, PARTITION_TABLE, cols, n_cols, id_col, rows, &path, err);
        txo_free(path);
        if (rc < 0)
            goto out;
        txo_crash_point("partition.archive.after_file");
        *archived += n;
        from = txo_rows_i64(rows, n - 1, id_col);
        txo_rows_free(rows);
        rows = NULL;
        if (n < opts->batch)
            break;
    }
out:
    if (rc < 0)
        txo_error_wrap(err, "archiving partition %s", p->name);
    txo_rows_free(rows);
    txo_free(newest);
    txo_archive_columns_free(cols, n_cols);
    return rc;
}

int txo__partition_outbox_retire(struct txo_db *db, const struct txo_partition_opts *opts,
                                 unsigned older_than_s, const char *archive_dir,
                                 struct txo_partition_retired *out, struct txo_error *err)
{
    struct txo_partition_retired r = {0};
    struct txo_partition_info *parts = NULL;
    size_t n = 0;
    char cutoff[32] = "";
    int64_t through = 0;
    int rc = txo__partition_outbox_maintain(db, opts, NULL, err);
    if (rc == 0)
        rc = txo_partition_list(db, TXO_PARTITION_OUTBOX, &parts, &n, err);
    if (rc == 0 && n > 0)
        rc = txo_binlog_published_through(db, &through, err);
    if (rc < 0 || n == 0)
        goto out;
    struct txo_rows *rows = NULL;
    struct txo_param age = txo_p_i64(older_than_s);
    rc = txo_db_query(db, PARTITION_SQL_CUTOFF, &age, 1, &rows, err);
    if (rc < 0)
        goto out;
    snprintf(cutoff, sizeof(cutoff), "%s", txo_rows_str(rows, 0, 0, NULL));
    txo_rows_free(rows);

    /* Oldest first; the last bounded partition below the ids in use and pmax are never dropped
     * (a partition still filling could not be finished). */
    size_t i = 0;
    for (; i + 1 < n; i++) {
        struct txo_partition_info *p = &parts[i];
        if (p->newest_id != 0 && strcmp(p->newest_at, cutoff) >= 0)
            break; /* not expired, and neither is any newer one */
        if (p->newest_id == 0 && parts[i + 1].newest_id == 0)
            break; /* the empty partitions ahead */
        bool past = false;
        rc = appended_past(db, p, cutoff, &past, err);
        if (rc < 0)
            goto out;
        if (!past)
            break; /* ids of p may still be in flight: see appended_past() */
        int64_t first = 0;
        rc = p->newest_id == 0 ? 0 : unfinished(db, p, through, &first, err);
        if (rc < 0)
            goto out;
        if (first != 0) {
            r.kept++;
            r.unfinished_id = first;
            TXO_LOG(TXO_LOG_WARN, "partition",
                    "expired partition kept: it holds an unfinished event (publish or skip it)",
                    TXO_KV_STR("partition", p->name), TXO_KV_I64("event_id", first));
            break; /* the newer ones wait too: dropped oldest first */
        }
        /* The server's estimate, or the rows archived now (counting them would read it all). */
        uint64_t held = p->rows_est;
        if (archive_dir != NULL && p->newest_id != 0) {
            rc = archive_partition(db, opts, p, archive_dir, &held, err);
            if (rc < 0)
                goto out;
        }
        rc = txo__partition_drop(db, opts, PARTITION_DDL_DROP, p, held, archive_dir != NULL, err);
        if (rc < 0)
            goto out;
        r.dropped++;
        r.rows += held;
    }
    /* The keys of every event below the oldest partition left are gone with their events. */
    struct txo_param below = txo_p_i64(parts[i].lower);
    rc = txo__partition_delete_keys(db, opts, PARTITION_KEYS, PARTITION_SQL_DELETE_KEYS_BELOW,
                                    &below, 1, &r.keys, NULL, err);
out:
    if (out != NULL)
        *out = r;
    if (rc < 0)
        txo_error_wrap(err, "outbox partition retention");
    txo_free(parts);
    return rc;
}
