#include "core/common.h"

/*
 * Changing the outbox's layout online (include/txo/partition.h): txo_partition_enable() and
 * txo_partition_disable() are one procedure with two targets.
 *
 *   1. the new table: outbox_events_txo_new, LIKE the live one, turned into the other layout
 *      while empty (instant), with that layout's triggers;
 *   2. copy triggers on the live table, so every write from now on reaches the new table in
 *      the writer's own transaction;
 *   3. the rows that were there before, copied in batches of ids, each a short transaction
 *      that shares the rows it reads (an upsert that leaves a row the triggers already wrote);
 *   4. RENAME TABLE swaps the two at once (capped and tried again); the old table is dropped with
 *      its triggers.
 * Until step 4 the live table is untouched but for its copy triggers: a crash leaves it
 * working, and a run again drops the half-filled table and starts over.
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/buf.h"
#include "partition/partition_internal.h"
#include "partition/partition_sql.h"
#include "txo/clock.h"
#include "txo/crash.h"

/* More partitions than this at the start would make each claim's merge costly: the first
 * width grows instead. */
#define FIRST_PARTITIONS_MAX 64

struct change {
    struct txo_db *db;
    const struct txo_partition_opts *opts;
    bool partitioned; /* the target */
    txo_partition_progress_fn progress;
    void *arg;
    /* The copied columns: "a, b", "NEW.a, NEW.b", "a = NEW.a, b = NEW.b". */
    struct txo__buf cols, values, assigns;
};

static int table_exists(struct txo_db *db, const char *name, bool *exists, struct txo_error *err)
{
    struct txo_param p = txo_p_str(name);
    int64_t n = 0;
    int rc = txo__partition_query_i64(db, PARTITION_SQL_TABLE_EXISTS, &p, 1, &n, NULL, err);
    *exists = rc == 0 && n > 0;
    return rc;
}

static int read_columns(struct change *c, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(c->db, PARTITION_SQL_COLUMNS, NULL, 0, &rows, err);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < txo_rows_count(rows); i++) {
        const char *name = txo_rows_str(rows, i, 0, NULL);
        const char *sep = i > 0 ? ", " : "";
        txo__buf_puts(&c->cols, sep);
        txo__buf_puts(&c->cols, name);
        txo__buf_puts(&c->values, sep);
        txo__buf_puts(&c->values, "NEW.");
        txo__buf_puts(&c->values, name);
        txo__buf_puts(&c->assigns, sep);
        txo__buf_puts(&c->assigns, name);
        txo__buf_puts(&c->assigns, " = NEW.");
        txo__buf_puts(&c->assigns, name);
    }
    txo_rows_free(rows);
    if (c->cols.oom || c->values.oom || c->assigns.oom || c->cols.len == 0)
        return txo_error_set(err, c->cols.len == 0 ? TXO_EDB : TXO_ENOMEM,
                             "reading the columns of outbox_events");
    return 0;
}

/* Puts parts[0..n) together and runs them: a DDL that waits for nobody (txo/partition.h). */
static int ddl_concat(struct change *c, const char *const *parts, size_t n, struct txo_error *err)
{
    char *sql = txo__partition_concat(parts, n);
    if (sql == NULL)
        return txo_error_set(err, TXO_ENOMEM, "out of memory");
    int rc = txo__partition_ddl(c->db, sql, c->opts, err);
    txo_free(sql);
    return rc;
}

/* The first bounds: from the smallest id in opts->first_ids steps (wider when that would make
 * too many) to opts->ahead partitions past the largest. */
static char *first_partitions(const struct txo_partition_opts *opts, int64_t min_id, int64_t max_id)
{
    int64_t width = opts->first_ids;
    if ((max_id - min_id) / width > FIRST_PARTITIONS_MAX)
        width = (max_id - min_id) / FIRST_PARTITIONS_MAX + 1;
    int64_t bounds[FIRST_PARTITIONS_MAX + TXO_PARTITION_AHEAD_MAX + 3];
    size_t n = 0;
    int64_t b = (min_id / width + 1) * width;
    for (; b <= max_id; b += width)
        bounds[n++] = b;
    for (unsigned i = 0; i <= opts->ahead; i++, b += width) /* the one holding max_id, then ahead */
        bounds[n++] = b;
    return txo__partition_bounds_ddl(PARTITION_DDL_NEW_PARTITION, bounds, n);
}

/* Step 1: the new table of the target layout, empty, with its triggers. */
static int create_new_table(struct change *c, int64_t min_id, int64_t max_id, struct txo_error *err)
{
    static const char *const fresh_start[] = {
        PARTITION_DDL_DROP_COPY_INS, PARTITION_DDL_DROP_COPY_UPD, PARTITION_DDL_DROP_COPY_DEL,
        PARTITION_DDL_DROP_NEW,      PARTITION_DDL_CREATE_NEW,
    };
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < TXO_ARRAY_LEN(fresh_start); i++)
        rc = txo__partition_ddl(c->db, fresh_start[i], c->opts, err);
    if (rc < 0)
        return rc;
    if (!c->partitioned) {
        static const char *const plain[] = {PARTITION_DDL_NEW_UNPARTITION,
                                            PARTITION_DDL_NEW_ADD_UNIQUE,
                                            PARTITION_DDL_TRIGGER_SEQUENCE};
        for (size_t i = 0; rc == 0 && i < TXO_ARRAY_LEN(plain); i++)
            rc = txo_db_exec_raw(c->db, plain[i], err);
        return rc;
    }
    char *partition = first_partitions(c->opts, min_id, max_id);
    if (partition == NULL)
        return txo_error_set(err, TXO_ENOMEM, "out of memory");
    const char *const steps[] = {
        PARTITION_DDL_DROP_KEYS,          PARTITION_DDL_CREATE_KEYS,
        PARTITION_DDL_NEW_DROP_UNIQUE,    partition,
        PARTITION_DDL_TRIGGER_SEQUENCE_P, PARTITION_DDL_TRIGGER_KEY_P,
        PARTITION_DDL_TRIGGER_UNKEY_P,
    };
    for (size_t i = 0; rc == 0 && i < TXO_ARRAY_LEN(steps); i++)
        rc = txo_db_exec_raw(c->db, steps[i], err);
    txo_free(partition);
    return rc;
}

/* Step 2: the live table's writes reach the new table from now on. */
static int create_copy_triggers(struct change *c, struct txo_error *err)
{
    const char *const ins[] = {PARTITION_DDL_COPY_INS,    c->cols.data,
                               PARTITION_DDL_COPY_VALUES, c->values.data,
                               PARTITION_DDL_COPY_UPDATE, c->assigns.data};
    const char *const upd[] = {PARTITION_DDL_COPY_UPD,    c->cols.data,
                               PARTITION_DDL_COPY_VALUES, c->values.data,
                               PARTITION_DDL_COPY_UPDATE, c->assigns.data};
    int rc = ddl_concat(c, ins, TXO_ARRAY_LEN(ins), err);
    if (rc == 0)
        rc = ddl_concat(c, upd, TXO_ARRAY_LEN(upd), err);
    if (rc == 0)
        rc = txo__partition_ddl(c->db, PARTITION_DDL_COPY_DEL, c->opts, err);
    return rc;
}

/* Step 3: the rows from after `from` through `last`, in batches of ids. */
static int copy_rows(struct change *c, int64_t from, int64_t last, struct txo_error *err)
{
    const char *const parts[] = {PARTITION_SQL_COPY_BATCH, c->cols.data, PARTITION_SQL_COPY_SELECT,
                                 c->cols.data, PARTITION_SQL_COPY_FROM};
    char *sql = txo__partition_concat(parts, TXO_ARRAY_LEN(parts));
    if (sql == NULL)
        return txo_error_set(err, TXO_ENOMEM, "out of memory");
    int64_t first = from;
    uint64_t copied = 0;
    int rc = 0;
    while (from < last) {
        int64_t to = from + (int64_t)c->opts->batch;
        if (to > last)
            to = last;
        struct txo_param params[] = {txo_p_i64(from), txo_p_i64(to)};
        struct txo_exec_result res = {0};
        rc = txo_db_exec(c->db, sql, params, 2, &res, err);
        if (rc < 0)
            break;
        copied += res.affected_rows;
        txo_crash_point("partition.copy.after_batch");
        if (c->progress != NULL)
            c->progress((uint64_t)(to - first), (uint64_t)(last - first), c->arg);
        from = to;
        if (res.affected_rows == 0 && from < last) { /* a gap (rows deleted): jump over it */
            struct txo_param p = txo_p_i64(from);
            int64_t next = 0;
            bool none = true;
            rc = txo__partition_query_i64(c->db, PARTITION_SQL_NEXT_ID, &p, 1, &next, &none, err);
            if (rc < 0)
                break;
            from = none || next > last ? last : next - 1;
        }
        if (c->opts->pause_ms > 0)
            txo_sleep_ms(c->opts->pause_ms);
    }
    txo_free(sql);
    TXO_LOG(TXO_LOG_INFO, "partition", "copied", TXO_KV_U64("rows", copied),
            TXO_KV_I64("through_id", last));
    return rc;
}

static int change_layout(struct change *c, struct txo_error *err)
{
    struct txo_db *db = c->db;
    bool old_there = false, now = false;
    int rc = table_exists(db, PARTITION_OLD_TABLE, &old_there, err);
    if (rc == 0 && old_there) /* a change that swapped and then stopped */
        rc = txo_db_exec_raw(db, PARTITION_DDL_DROP_OLD, err);
    if (rc == 0)
        rc = txo_partition_is_enabled(db, &now, err);
    if (rc < 0)
        return rc;
    if (now == c->partitioned) {
        if (!now && (rc = txo_db_exec_raw(db, PARTITION_DDL_DROP_KEYS, err)) < 0)
            return rc;
        return txo_error_set(err, TXO_ESTATE, "outbox_events is already %s",
                             now ? "partitioned" : "unpartitioned");
    }
    int64_t min_id = 0, max_id = 0;
    rc = read_columns(c, err);
    if (rc == 0)
        rc = txo__partition_query_i64(db, PARTITION_SQL_MIN_ID, NULL, 0, &min_id, NULL, err);
    if (rc == 0)
        rc = txo__partition_query_i64(db, PARTITION_SQL_MAX_ID, NULL, 0, &max_id, NULL, err);
    if (rc == 0)
        rc = create_new_table(c, min_id, max_id, err);
    if (rc == 0)
        rc = create_copy_triggers(c, err);
    /* What the triggers did not see: the rows up to the largest id once they were there. */
    if (rc == 0)
        rc = txo__partition_query_i64(db, PARTITION_SQL_MAX_ID, NULL, 0, &max_id, NULL, err);
    if (rc == 0)
        rc = copy_rows(c, min_id > 0 ? min_id - 1 : 0, max_id, err);
    if (rc < 0)
        return rc;
    rc = txo__partition_ddl(db, PARTITION_DDL_ANALYZE_NEW, c->opts, err);
    if (rc < 0)
        return rc;
    txo_crash_point("partition.before_swap");
    rc = txo__partition_ddl(db, PARTITION_DDL_SWAP, c->opts, err);
    if (rc == 0)
        rc = txo_db_exec_raw(db, PARTITION_DDL_DROP_OLD, err);
    if (rc == 0 && !c->partitioned)
        rc = txo_db_exec_raw(db, PARTITION_DDL_DROP_KEYS, err);
    if (rc == 0)
        TXO_LOG(TXO_LOG_INFO, "partition", "layout changed",
                TXO_KV_STR("layout", c->partitioned ? "partitioned" : "unpartitioned"));
    return rc;
}

static int run_change(struct txo_db *db, const struct txo_partition_opts *opts, bool partitioned,
                      txo_partition_progress_fn progress, void *arg, struct txo_error *err)
{
    if (db == NULL || opts == NULL || opts->batch == 0 || opts->first_ids <= 0 ||
        opts->ahead == 0 || opts->ahead > TXO_PARTITION_AHEAD_MAX)
        return txo_error_set(err, TXO_EINVAL, "partition layout change: bad options");
    struct change c = {
        .db = db, .opts = opts, .partitioned = partitioned, .progress = progress, .arg = arg};
    int rc = change_layout(&c, err);
    if (rc < 0 && rc != TXO_ESTATE)
        txo_error_wrap(err, "changing outbox_events to the %s layout",
                       partitioned ? "partitioned" : "unpartitioned");
    txo_free(c.cols.data);
    txo_free(c.values.data);
    txo_free(c.assigns.data);
    return rc;
}

int txo_partition_enable(struct txo_db *db, const struct txo_partition_opts *opts,
                         txo_partition_progress_fn progress, void *arg, struct txo_error *err)
{
    return run_change(db, opts, true, progress, arg, err);
}

int txo_partition_disable(struct txo_db *db, const struct txo_partition_opts *opts,
                          txo_partition_progress_fn progress, void *arg, struct txo_error *err)
{
    return run_change(db, opts, false, progress, arg, err);
}
