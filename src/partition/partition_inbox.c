#include "core/common.h"

/*
 * The partitioned inbox's upkeep (include/txo/partition.h): partitions by time created ahead of
 * now, and the expired ones retired (unfinished rows moved forward, archive, keys, drop).
 *
 * Invariants: a partition is dropped only when its upper bound is older than the cutoff, none
 * of its rows is unfinished (moved forward just before), so every row dropped was processed
 * before the cutoff, as the unpartitioned cleaner's rule, and none of its keys is left (deleted
 * just before), so a key never outlives its row. Partition DDL never waits in the metadata lock
 * queue (txo__partition_ddl()).
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "partition/partition_internal.h"
#include "partition/partition_sql.h"
#include "txo/archive.h"
#include "txo/clock.h"
#include "txo/crash.h"
#include "txo/partition.h"

/* DATETIME's smallest value, 1000-01-01, in Unix seconds: the first partition's lower bound in
 * a statement (it holds everything older). */
#define DATETIME_MIN_S INT64_C(-30610224000)

void txo__partition_inbox_bounds(struct txo_partition_info *p)
{
    if (p->lower != 0)
        p->lower -= INBOX_TO_SECONDS_1970;
    if (p->upper != 0)
        p->upper -= INBOX_TO_SECONDS_1970;
}

void txo__partition_inbox_name(int64_t bound, char *name, size_t size)
{
    time_t t = (time_t)bound;
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL || strftime(name, size, "%Y%m%d_%H%M%S", &tm) == 0)
        snprintf(name, size, "%" PRId64, bound);
}

/* The partitions of inbox_events, bounds in Unix times. */
static int list(struct txo_db *db, struct txo_partition_info **parts, size_t *n,
                struct txo_error *err)
{
    int rc = txo__partition_list_of(db, INBOX_TABLE, parts, n, err);
    for (size_t i = 0; rc == 0 && i < *n; i++)
        txo__partition_inbox_bounds(&(*parts)[i]);
    return rc;
}

/* Now, the cutoff older_than_s before it (Unix seconds) and the cutoff as DATETIME(6). */
struct times {
    int64_t now;
    int64_t cutoff_s;
    char cutoff[32];
};

static int read_times(struct txo_db *db, unsigned older_than_s, struct times *t,
                      struct txo_error *err)
{
    struct txo_param age[] = {txo_p_i64(older_than_s), txo_p_i64(older_than_s)};
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, INBOX_SQL_TIMES, age, 2, &rows, err);
    if (rc < 0)
        return rc;
    t->now = txo_rows_i64(rows, 0, 0);
    t->cutoff_s = txo_rows_i64(rows, 0, 1);
    snprintf(t->cutoff, sizeof(t->cutoff), "%s", txo_rows_str(rows, 0, 2, NULL));
    txo_rows_free(rows);
    return 0;
}

static int64_t span_of(const struct txo_partition_opts *opts)
{
    return opts->span_s > 0 ? (int64_t)opts->span_s : 86400;
}

int txo__partition_inbox_first(struct txo_db *db, const struct txo_partition_opts *opts,
                               const char *head, char **ddl, struct txo_error *err)
{
    *ddl = NULL;
    int64_t oldest = 0;
    struct times t;
    int rc = txo__partition_query_i64(db, INBOX_SQL_OLDEST, NULL, 0, &oldest, NULL, err);
    if (rc == 0)
        rc = read_times(db, 0, &t, err);
    if (rc < 0)
        return rc;
    int64_t span = span_of(opts);
    *ddl =
        txo__partition_first_ddl(TXO_PARTITION_INBOX, head, oldest, t.now, span, span, opts->ahead);
    return *ddl == NULL ? txo_error_set(err, TXO_ENOMEM, "out of memory") : 0;
}

int txo__partition_inbox_maintain(struct txo_db *db, const struct txo_partition_opts *opts,
                                  unsigned *created, struct txo_error *err)
{
    struct txo_partition_info *parts = NULL;
    size_t n = 0;
    char *ddl = NULL;
    struct times t;
    int rc = list(db, &parts, &n, err);
    if (rc < 0 || n == 0)
        goto out;
    rc = read_times(db, 0, &t, err);
    if (rc < 0)
        goto out;
    int64_t span = span_of(opts);
    /* The last bound, and how many partitions stand wholly ahead of now (empty, ready). */
    int64_t bound = n >= 2 ? parts[n - 2].upper : 0;
    unsigned empty = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (parts[i].lower > t.now)
            empty++;
    unsigned add = empty < opts->ahead ? opts->ahead - empty : 0;
    if (bound <= t.now) { /* the bounds ran out: rows of now land in pmax */
        int64_t used = 0;
        rc = txo__partition_query_i64(db, INBOX_SQL_PMAX_USED, NULL, 0, &used, NULL, err);
        if (rc < 0)
            goto out;
        if (used != 0 && !opts->split_full) {
            TXO_LOG(TXO_LOG_ERROR, "partition",
                    "inbox pmax holds rows: no partition ahead was left. Run `txo partition "
                    "maintain inbox --split-full` at a quiet moment (inserts wait while its rows "
                    "are copied)",
                    TXO_KV_I64("last_bound", bound), TXO_KV_I64("now", t.now));
            goto out;
        }
        int64_t floor_now = t.now / span * span;
        bound = floor_now > bound ? floor_now : bound;
        add = opts->ahead + 1; /* the one holding now, then ahead */
    }
    if (add == 0)
        goto out;
    if (add > TXO_PARTITION_AHEAD_MAX)
        add = TXO_PARTITION_AHEAD_MAX;
    int64_t bounds[TXO_PARTITION_AHEAD_MAX];
    for (unsigned i = 0; i < add; i++)
        bounds[i] = bound = (bound / span + 1) * span;
    ddl = txo__partition_bounds_ddl(TXO_PARTITION_INBOX, INBOX_DDL_SPLIT_MAX, bounds, add);
    if (ddl == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "out of memory");
        goto out;
    }
    /* A REORGANIZE may copy rows (pmax's): never stopped half way. */
    rc = txo__partition_ddl_copying(db, ddl, opts, err);
    if (rc < 0)
        goto out;
    if (created != NULL)
        *created = add;
    TXO_LOG(TXO_LOG_INFO, "partition", "created", TXO_KV_STR("table", INBOX_TABLE),
            TXO_KV_U64("partitions", add), TXO_KV_I64("span_s", span), TXO_KV_I64("up_to", bound));
out:
    if (rc < 0)
        txo_error_wrap(err, "creating inbox partitions ahead");
    txo_free(ddl);
    txo_free(parts);
    return rc;
}

/* ---- retiring expired partitions ---- */

static int64_t lower_of(const struct txo_partition_info *p)
{
    return p->lower != 0 ? p->lower : DATETIME_MIN_S;
}

/* Moves p's unfinished rows forward (txo/partition.h), a batch per statement. */
static int move_forward(struct txo_db *db, const struct txo_partition_opts *opts,
                        const struct txo_partition_info *p, const struct times *t, uint64_t *moved,
                        struct txo_error *err)
{
    unsigned batch = opts->batch > 0 ? opts->batch : 1;
    for (;;) {
        struct txo_param params[] = {txo_p_i64(lower_of(p)), txo_p_i64(p->upper),
                                     txo_p_str(t->cutoff), txo_p_i64(batch)};
        struct txo_exec_result res = {0};
        int rc = txo_db_exec(db, INBOX_SQL_MOVE_FORWARD, params, 4, &res, err);
        if (rc < 0)
            return rc;
        *moved += res.affected_rows;
        if (res.affected_rows < batch)
            return 0;
    }
}

/* The archive cursor: the (processed_at, event_id) of the last row archived. */
struct cursor {
    bool set;
    char at[TXO_RFC3339_LEN]; /* "YYYY-MM-DD HH:MM:SS.ffffff" */
    char key[256];
    size_t key_len;
};

/*
 * Where the archive of p goes on: after the last row of the table's newest file when that row
 * is still in p (a pass that stopped half way wrote the files of p's first rows, in order), from
 * the start otherwise.
 */
static int resume_from(struct txo_db *db, const struct txo_partition_info *p, const char *newest,
                       struct cursor *c, struct txo_error *err)
{
    c->set = false;
    if (newest == NULL)
        return 0;
    struct txo_archive_file f;
    int rc = txo_archive_read(newest, &f, err);
    if (rc < 0)
        return rc;
    if (f.version == TXO_ARCHIVE_VERSION_SEQ && f.n_rows > 0 &&
        f.keys[f.n_rows - 1].len < sizeof(c->key)) {
        const struct txo_archive_key *k = &f.keys[f.n_rows - 1];
        memcpy(c->key, k->bytes, k->len);
        c->key_len = k->len;
        /* "YYYY-MM-DDTHH:MM:SS.ffffffZ" as the column's "YYYY-MM-DD HH:MM:SS.ffffff". */
        txo_format_rfc3339(f.times_us[f.n_rows - 1], c->at);
        c->at[10] = ' ';
        c->at[strlen(c->at) - 1] = '\0';
        struct txo_param params[] = {txo_p_strn(c->key, c->key_len), txo_p_str(c->at),
                                     txo_p_i64(lower_of(p)), txo_p_i64(p->upper)};
        int64_t there = 0;
        rc = txo__partition_query_i64(db, INBOX_SQL_HAS_ROW, params, 4, &there, NULL, err);
        c->set = rc == 0 && there > 0;
    }
    txo_archive_file_release(&f);
    return rc;
}

/* Writes p's rows to archive files named by sequence, a batch each; *archived gets how many. */
static int archive_partition(struct txo_db *db, const struct txo_partition_opts *opts,
                             const struct txo_partition_info *p, const char *dir,
                             uint64_t *archived, struct txo_error *err)
{
    *archived = 0;
    struct txo_archive_column *cols = NULL;
    size_t n_cols = 0, key_col = SIZE_MAX, time_col = SIZE_MAX;
    struct txo_rows *rows = NULL;
    char *newest = NULL;
    uint64_t seq = 0;
    struct cursor c = {0};
    int rc = txo_archive_columns(db, INBOX_TABLE, &cols, &n_cols, err);
    if (rc == 0)
        rc = txo_archive_last_seq(dir, INBOX_TABLE, &seq, err);
    if (rc == 0)
        rc = txo_archive_newest(dir, INBOX_TABLE, &newest, err);
    if (rc == 0)
        rc = resume_from(db, p, newest, &c, err);
    if (rc < 0)
        goto out;
    for (size_t i = 0; i < n_cols; i++) {
        if (strcmp(cols[i].name, "event_id") == 0)
            key_col = i;
        else if (strcmp(cols[i].name, "processed_at") == 0)
            time_col = i;
    }
    if (key_col == SIZE_MAX || time_col == SIZE_MAX) {
        rc = txo_error_set(err, TXO_ESTATE, "inbox_events has no event_id or processed_at column");
        goto out;
    }
    unsigned batch = opts->batch > 0 ? opts->batch : 1;
    for (;;) {
        struct txo_param params[6];
        size_t np = 0;
        params[np++] = txo_p_i64(lower_of(p));
        params[np++] = txo_p_i64(p->upper);
        if (c.set) {
            params[np++] = txo_p_str(c.at);
            params[np++] = txo_p_str(c.at);
            params[np++] = txo_p_strn(c.key, c.key_len);
        }
        params[np++] = txo_p_i64(batch);
        rc = txo_db_query(db, c.set ? INBOX_SQL_ROWS_FROM : INBOX_SQL_ROWS_FIRST, params, np, &rows,
                          err);
        if (rc < 0)
            goto out;
        size_t n = txo_rows_count(rows);
        if (n == 0)
            break;
        char *path = NULL;
        rc = txo_archive_write_seq(dir, INBOX_TABLE, cols, n_cols, key_col, time_col, ++seq, rows,
                                   &path, err);
        txo_free(path);
        if (rc < 0)
            goto out;
        txo_crash_point("partition.archive.after_file");
        *archived += n;
        size_t len = 0;
        const char *key = txo_rows_str(rows, n - 1, key_col, &len);
        const char *at = txo_rows_str(rows, n - 1, time_col, NULL);
        TXO_ASSERT(key != NULL && at != NULL && len < sizeof(c.key)); /* checked by the write */
        memcpy(c.key, key, len);
        c.key_len = len;
        snprintf(c.at, sizeof(c.at), "%s", at);
        c.set = true;
        txo_rows_free(rows);
        rows = NULL;
        if (n < batch)
            break;
    }
out:
    if (rc < 0)
        txo_error_wrap(err, "archiving inbox partition %s", p->name);
    txo_rows_free(rows);
    txo_free(newest);
    txo_archive_columns_free(cols, n_cols);
    return rc;
}

int txo__partition_inbox_retire(struct txo_db *db, const struct txo_partition_opts *opts,
                                unsigned older_than_s, const char *archive_dir,
                                struct txo_partition_retired *out, struct txo_error *err)
{
    struct txo_partition_retired r = {0};
    struct txo_partition_info *parts = NULL;
    size_t n = 0;
    struct times t;
    int rc = txo__partition_inbox_maintain(db, opts, NULL, err);
    if (rc == 0)
        rc = list(db, &parts, &n, err);
    if (rc == 0 && n > 0)
        rc = read_times(db, older_than_s, &t, err);
    if (rc < 0 || n == 0)
        goto out;
    /* Oldest first, while the partition's bound is older than the cutoff (the one holding now
     * and pmax never are). */
    for (size_t i = 0; i + 1 < n && parts[i].upper <= t.cutoff_s; i++) {
        struct txo_partition_info *p = &parts[i];
        uint64_t moved = 0;
        rc = move_forward(db, opts, p, &t, &moved, err);
        r.moved += moved;
        if (rc < 0)
            goto out;
        if (moved > 0)
            TXO_LOG(TXO_LOG_INFO, "partition", "unfinished inbox rows moved forward",
                    TXO_KV_STR("partition", p->name), TXO_KV_U64("rows", moved));
        uint64_t held = p->rows_est;
        if (archive_dir != NULL) {
            rc = archive_partition(db, opts, p, archive_dir, &held, err);
            if (rc < 0)
                goto out;
        }
        /* Its keys, then the partition: a pass stopped in between leaves rows without keys, old
         * enough to be recorded anew. Dropped only once every key is gone. */
        struct txo_param range[] = {txo_p_i64(lower_of(p)), txo_p_i64(p->upper)};
        bool done = false;
        rc = txo__partition_delete_keys(db, opts, INBOX_KEYS, INBOX_SQL_DELETE_KEYS, range, 2,
                                        &r.keys, &done, err);
        if (rc < 0 || !done)
            goto out; /* the rest of its keys, and the drop, next pass */
        txo_crash_point("partition.inbox.keys_deleted");
        rc = txo__partition_drop(db, opts, INBOX_DDL_DROP, p, held, archive_dir != NULL, err);
        if (rc < 0)
            goto out;
        r.dropped++;
        r.rows += held;
    }
out:
    if (out != NULL)
        *out = r;
    if (rc < 0)
        txo_error_wrap(err, "inbox partition retention");
    txo_free(parts);
    return rc;
}
