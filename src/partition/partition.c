#include "core/common.h"

/*
 * What both partitioned layouts share (include/txo/partition.h): the options, reading the
 * partitions from the data dictionary, running partition DDL without waiting in the metadata
 * lock queue, and the public calls, which hand each table to its upkeep: partition_outbox.c
 * (ranges of ids) or partition_inbox.c (ranges of time). The layout change is
 * partition_layout.c.
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/buf.h"
#include "partition/partition_internal.h"
#include "partition/partition_sql.h"
#include "txo/backoff.h"
#include "txo/clock.h"
#include "txo/crash.h"
#include "txo/partition.h"

#define DDL_PAUSE_MS 50
/* Key rows deleted per statement at least: narrow rows nobody else touches. */
#define KEYS_BATCH_MIN 5000

void txo_partition_opts_init(struct txo_partition_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->span_s = 86400;
    opts->first_ids = 1000000;
    opts->ahead = 2;
    opts->ddl_attempts = 40;
    opts->ddl_wait_ms = 400;
    opts->batch = 2000;
}

const char *txo_partition_table_name(enum txo_partition_table table)
{
    switch (table) {
    case TXO_PARTITION_OUTBOX:
        return PARTITION_TABLE;
    case TXO_PARTITION_INBOX:
        return INBOX_TABLE;
    }
    return NULL;
}

int txo__partition_query_i64(struct txo_db *db, const char *sql, const struct txo_param *params,
                             size_t n, int64_t *out, bool *is_null, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, sql, params, n, &rows, err);
    if (rc < 0)
        return rc;
    bool none = txo_rows_count(rows) == 0 || txo_rows_is_null(rows, 0, 0);
    *out = none ? 0 : txo_rows_i64(rows, 0, 0);
    if (is_null != NULL)
        *is_null = none;
    txo_rows_free(rows);
    return 0;
}

/* Runs prefix + sql, tried again while it times out (txo/partition.h, Locks). */
static int run_ddl(struct txo_db *db, const char *prefix, const char *sql,
                   const struct txo_partition_opts *opts, struct txo_error *err)
{
    unsigned n = opts->ddl_attempts > 0 ? opts->ddl_attempts : 1;
    const char *const parts[] = {prefix, sql};
    char *full = txo__partition_concat(parts, 2);
    if (full == NULL)
        return txo_error_set(err, TXO_ENOMEM, "out of memory");
    int rc = 0;
    unsigned tries = 0;
    int64_t start = txo_monotonic_ms();
    while (tries < n) {
        if (tries++ > 0) /* the writes that queued behind the last try go first */
            txo_sleep_ms(DDL_PAUSE_MS + (int64_t)(txo_rand01() * DDL_PAUSE_MS));
        txo_error_init(err);
        rc = txo_db_exec_raw(db, full, err);
        if (rc != TXO_ETIMEOUT && rc != TXO_ELOCKTIMEOUT)
            break;
    }
    txo_free(full);
    TXO_LOG(TXO_LOG_DEBUG, "partition", "ddl", TXO_KV_STR("sql", sql), TXO_KV_U64("tries", tries),
            TXO_KV_I64("took_ms", txo_monotonic_ms() - start), TXO_KV_I64("rc", rc));
    if (rc == TXO_ETIMEOUT || rc == TXO_ELOCKTIMEOUT)
        return txo_error_set(err, TXO_ELOCKTIMEOUT,
                             "the table's metadata lock was not free in %u tries (%s): open "
                             "transactions kept it; try again later",
                             n, sql);
    return rc;
}

int txo__partition_ddl(struct txo_db *db, const char *sql, const struct txo_partition_opts *opts,
                       struct txo_error *err)
{
    unsigned wait_ms = opts->ddl_wait_ms > 0 ? opts->ddl_wait_ms : 1;
    char cap[sizeof(PARTITION_DDL_CAPPED) + 24];
    snprintf(cap, sizeof(cap), PARTITION_DDL_CAPPED, wait_ms / 1000, wait_ms % 1000);
    return run_ddl(db, cap, sql, opts, err);
}

int txo__partition_ddl_copying(struct txo_db *db, const char *sql,
                               const struct txo_partition_opts *opts, struct txo_error *err)
{
    return run_ddl(db, PARTITION_DDL_LOCK_WAIT, sql, opts, err);
}

char *txo__partition_concat(const char *const *parts, size_t n)
{
    struct txo__buf b = {0};
    txo__buf_puts(&b, "");
    for (size_t i = 0; i < n; i++)
        txo__buf_puts(&b, parts[i]);
    if (!b.oom)
        return b.data;
    txo_free(b.data);
    return NULL;
}

char *txo__partition_bounds_ddl(enum txo_partition_table table, const char *head,
                                const int64_t *bounds, size_t n)
{
    struct txo__buf b = {0};
    txo__buf_puts(&b, head);
    for (size_t i = 0; i < n; i++) {
        char one[128];
        if (table == TXO_PARTITION_INBOX) {
            char name[24];
            txo__partition_inbox_name(bounds[i], name, sizeof(name));
            snprintf(one, sizeof(one), INBOX_DDL_ONE, name, bounds[i] + INBOX_TO_SECONDS_1970);
        } else {
            snprintf(one, sizeof(one), PARTITION_DDL_ONE, bounds[i], bounds[i]);
        }
        txo__buf_puts(&b, one);
    }
    txo__buf_puts(&b, PARTITION_DDL_PMAX);
    if (!b.oom)
        return b.data;
    txo_free(b.data);
    return NULL;
}

/* More partitions than this at the start of a layout change: the first width grows instead. */
#define FIRST_PARTITIONS_MAX 64

char *txo__partition_first_ddl(enum txo_partition_table table, const char *head, int64_t lo,
                               int64_t hi, int64_t width, int64_t align, unsigned ahead)
{
    if (hi > lo && (hi - lo) / width > FIRST_PARTITIONS_MAX)
        width = ((hi - lo) / FIRST_PARTITIONS_MAX / align + 1) * align;
    int64_t bounds[FIRST_PARTITIONS_MAX + TXO_PARTITION_AHEAD_MAX + 3];
    size_t n = 0;
    int64_t b = (lo / width + 1) * width;
    for (; b <= hi && n < FIRST_PARTITIONS_MAX + 1; b += width)
        bounds[n++] = b;
    for (unsigned i = 0; i <= ahead && i <= TXO_PARTITION_AHEAD_MAX; i++, b += width)
        bounds[n++] = b; /* the one holding hi, then ahead */
    return txo__partition_bounds_ddl(table, head, bounds, n);
}

int txo__partition_drop(struct txo_db *db, const struct txo_partition_opts *opts,
                        const char *drop_head, const struct txo_partition_info *p, uint64_t held,
                        bool archived, struct txo_error *err)
{
    const char *const parts[] = {drop_head, p->name};
    char *ddl = txo__partition_concat(parts, 2);
    if (ddl == NULL)
        return txo_error_set(err, TXO_ENOMEM, "out of memory");
    int rc = txo__partition_ddl(db, ddl, opts, err);
    txo_free(ddl);
    if (rc < 0) {
        txo_error_wrap(err, "dropping partition %s", p->name);
        return rc;
    }
    TXO_LOG(TXO_LOG_INFO, "partition", "dropped", TXO_KV_STR("partition", p->name),
            TXO_KV_U64("rows", held), TXO_KV_I64("lower", p->lower), TXO_KV_I64("upper", p->upper),
            TXO_KV_BOOL("archived", archived));
    txo_crash_point("partition.after_drop");
    return 0;
}

int txo__partition_delete_keys(struct txo_db *db, const struct txo_partition_opts *opts,
                               const char *keys_table, const char *sql,
                               const struct txo_param *range, size_t n, uint64_t *deleted,
                               bool *done, struct txo_error *err)
{
    struct txo_param params[4];
    TXO_ASSERT(n < TXO_ARRAY_LEN(params));
    memcpy(params, range, n * sizeof(*range));
    bool exists = false, all = false;
    int rc = txo_schema_has_table(db, keys_table, &exists, err);
    all = rc == 0 && !exists;
    for (unsigned k = 0; rc == 0 && exists; k++) {
        if (opts->max_batches > 0 && k == opts->max_batches)
            break; /* the rest next pass */
        if (k > 0 && opts->pause_ms > 0)
            txo_sleep_ms(opts->pause_ms);
        unsigned batch = opts->batch > KEYS_BATCH_MIN ? opts->batch : KEYS_BATCH_MIN;
        params[n] = txo_p_i64(batch);
        struct txo_exec_result res = {0};
        rc = txo_db_exec(db, sql, params, n + 1, &res, err);
        if (rc == 0)
            *deleted += res.affected_rows;
        if (rc == 0 && res.affected_rows < batch)
            all = true;
        if (rc < 0 || all)
            break;
    }
    if (done != NULL)
        *done = all;
    return rc;
}

int txo__partition_list_of(struct txo_db *db, const char *table, struct txo_partition_info **out,
                           size_t *n_out, struct txo_error *err)
{
    struct txo_param param = txo_p_str(table);
    struct txo_rows *rows = NULL;
    *out = NULL;
    *n_out = 0;
    int rc = txo_db_query(db, PARTITION_SQL_LIST, &param, 1, &rows, err);
    if (rc < 0)
        return rc;
    size_t n = txo_rows_count(rows);
    if (n == 0 || txo_rows_is_null(rows, 0, 0)) {
        txo_rows_free(rows);
        return 0;
    }
    struct txo_partition_info *parts = txo_calloc(n, sizeof(*parts));
    if (parts == NULL) {
        txo_rows_free(rows);
        return txo_error_set(err, TXO_ENOMEM, "out of memory listing %zu partitions", n);
    }
    int64_t lower = 0;
    for (size_t i = 0; i < n; i++) {
        struct txo_partition_info *p = &parts[i];
        snprintf(p->name, sizeof(p->name), "%s", txo_rows_str(rows, i, 0, NULL));
        const char *bound = txo_rows_str(rows, i, 1, NULL);
        p->lower = lower;
        p->upper = bound != NULL && strcmp(bound, "MAXVALUE") != 0 ? txo_rows_i64(rows, i, 1) : 0;
        p->rows_est = (uint64_t)txo_rows_i64(rows, i, 2);
        lower = p->upper;
    }
    txo_rows_free(rows);
    *out = parts;
    *n_out = n;
    return 0;
}

int txo_partition_list(struct txo_db *db, enum txo_partition_table table,
                       struct txo_partition_info **out, size_t *n, struct txo_error *err)
{
    const char *name = txo_partition_table_name(table);
    if (name == NULL)
        return txo_error_set(err, TXO_EINVAL, "no partitioned layout for table %d", (int)table);
    int rc = txo__partition_list_of(db, name, out, n, err);
    for (size_t i = 0; rc == 0 && i < *n; i++) {
        struct txo_partition_info *p = &(*out)[i];
        if (table == TXO_PARTITION_INBOX) /* TO_SECONDS bounds to Unix times */
            txo__partition_inbox_bounds(p);
        else
            rc = txo__partition_outbox_newest(db, p, err);
    }
    if (rc < 0) {
        txo_free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

int txo_partition_is_enabled(struct txo_db *db, enum txo_partition_table table, bool *partitioned,
                             struct txo_error *err)
{
    const char *name = txo_partition_table_name(table);
    if (name == NULL)
        return txo_error_set(err, TXO_EINVAL, "no partitioned layout for table %d", (int)table);
    struct txo_partition_info *parts = NULL;
    size_t n = 0;
    int rc = txo__partition_list_of(db, name, &parts, &n, err);
    if (rc == 0)
        *partitioned = n > 0;
    txo_free(parts);
    return rc;
}

int txo_partition_maintain(struct txo_db *db, enum txo_partition_table table,
                           const struct txo_partition_opts *opts, unsigned *created,
                           struct txo_error *err)
{
    if (created != NULL)
        *created = 0;
    switch (table) {
    case TXO_PARTITION_OUTBOX:
        return txo__partition_outbox_maintain(db, opts, created, err);
    case TXO_PARTITION_INBOX:
        return txo__partition_inbox_maintain(db, opts, created, err);
    }
    return txo_error_set(err, TXO_EINVAL, "no partitioned layout for table %d", (int)table);
}

int txo_partition_retire(struct txo_db *db, enum txo_partition_table table,
                         const struct txo_partition_opts *opts, unsigned older_than_s,
                         const char *archive_dir, struct txo_partition_retired *out,
                         struct txo_error *err)
{
    struct txo_partition_retired r = {0};
    int rc;
    switch (table) {
    case TXO_PARTITION_OUTBOX:
        rc = txo__partition_outbox_retire(db, opts, older_than_s, archive_dir, &r, err);
        break;
    case TXO_PARTITION_INBOX:
        rc = txo__partition_inbox_retire(db, opts, older_than_s, archive_dir, &r, err);
        break;
    default:
        rc = txo_error_set(err, TXO_EINVAL, "no partitioned layout for table %d", (int)table);
        break;
    }
    if (out != NULL)
        *out = r;
    return rc;
}
