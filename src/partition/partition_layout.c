#include "core/common.h"

/*
 * Changing a table's layout online (include/txo/partition.h): txo_partition_enable() and
 * txo_partition_disable() are one procedure with two targets, for the outbox and the inbox
 * alike (struct layout says what differs).
 *
 *   1. the new table: <table>_txo_new, LIKE the live one, turned into the other layout while
 *      empty (instant), with that layout's key table and triggers;
 *   2. copy triggers on the live table, so every write from now on reaches the new table in
 *      the writer's own transaction. They come one DDL at a time, and writers run between
 *      them, so they come in the order delete, update, insert: at each moment in between, a
 *      write either reaches the new table whole or not at all (step 3 then copies the row as
 *      it is). The other way round, an insert copied before the update trigger was there
 *      would keep its first version (step 3 leaves rows a trigger wrote), and a row inserted
 *      and deleted before the delete trigger would come back;
 *   3. the rows that were there before, copied in batches in primary-key order, each a short
 *      transaction that shares the rows it reads (an upsert that leaves a row the triggers
 *      already wrote);
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

/* inbox_events.event_id is VARBINARY(255). */
#define KEY_MAX 256

/* What a layout change of one table needs; the statements are partition_sql.h's. */
struct layout {
    enum txo_partition_table table;
    const char *name;     /* the live table */
    const char *old_name; /* the live table after the swap */
    const char *new_name; /* the other layout while it fills */
    const char *key;      /* the primary key's first column, the copy's order */
    bool int_key;         /* an integer (the outbox's id), else bytes (the inbox's event_id) */
    /* Either table's, from LAYOUT_* of its name. */
    const char *fresh[5]; /* a fresh start: copy triggers and new table dropped, new created */
    const char *min_key, *max_key;
    const char *batch_end_first, *batch_end, *copy_from_first, *copy_from, *copy_into;
    const char *copy_ins, *copy_upd, *copy_del;
    const char *unpartition, *analyze, *swap, *drop_old;
    /* Its own: the key table's drop; what the new table gets before its partitions (the key
     * table, the primary and unique keys), the partition clause's head, the triggers after;
     * and, unpartitioned, what it gets after REMOVE PARTITIONING. NULL-terminated. */
    const char *drop_keys;
    const char *partitioned_pre[4];
    const char *partition_head;
    const char *partitioned_post[4];
    const char *plain_post[3];
    /* A view that reads the one layout's table or the other's (NULL: none): pointed at the
     * partitioned layout's after the swap, at the unpartitioned one's before it. */
    const char *view_partitioned, *view_plain;
};

#define LAYOUT_OF(T, K)                                                                            \
    .name = T, .old_name = LAYOUT_OLD_TABLE(T), .new_name = LAYOUT_NEW_TABLE(T), .key = K,         \
    .fresh = {LAYOUT_DDL_DROP_COPY_INS(T), LAYOUT_DDL_DROP_COPY_UPD(T),                            \
              LAYOUT_DDL_DROP_COPY_DEL(T), LAYOUT_DDL_DROP_NEW(T), LAYOUT_DDL_CREATE_NEW(T)},      \
    .min_key = LAYOUT_SQL_MIN_KEY(T, K), .max_key = LAYOUT_SQL_MAX_KEY(T, K),                      \
    .batch_end_first = LAYOUT_SQL_BATCH_END_FIRST(T, K), .batch_end = LAYOUT_SQL_BATCH_END(T, K),  \
    .copy_from_first = LAYOUT_SQL_COPY_FROM_FIRST(T, K), .copy_from = LAYOUT_SQL_COPY_FROM(T, K),  \
    .copy_into = LAYOUT_SQL_COPY_BATCH(T), .copy_ins = LAYOUT_DDL_COPY_INS(T),                     \
    .copy_upd = LAYOUT_DDL_COPY_UPD(T), .copy_del = LAYOUT_DDL_COPY_DEL(T, K),                     \
    .unpartition = LAYOUT_DDL_UNPARTITION(T), .analyze = LAYOUT_DDL_ANALYZE_NEW(T),                \
    .swap = LAYOUT_DDL_SWAP(T), .drop_old = LAYOUT_DDL_DROP_OLD(T)

static const struct layout outbox_layout = {
    LAYOUT_OF(PARTITION_TABLE, "id"),
    .table = TXO_PARTITION_OUTBOX,
    .int_key = true,
    .drop_keys = PARTITION_DDL_DROP_KEYS,
    .partitioned_pre = {PARTITION_DDL_DROP_KEYS, PARTITION_DDL_CREATE_KEYS,
                        PARTITION_DDL_NEW_DROP_UNIQUE, NULL},
    .partition_head = PARTITION_DDL_NEW_PARTITION,
    .partitioned_post = {PARTITION_DDL_TRIGGER_SEQUENCE_P, PARTITION_DDL_TRIGGER_KEY_P,
                         PARTITION_DDL_TRIGGER_UNKEY_P, NULL},
    .plain_post = {PARTITION_DDL_NEW_ADD_UNIQUE, PARTITION_DDL_TRIGGER_SEQUENCE, NULL},
};

static const struct layout inbox_layout = {
    LAYOUT_OF(INBOX_TABLE, "event_id"),
    .table = TXO_PARTITION_INBOX,
    .int_key = false,
    .drop_keys = INBOX_DDL_DROP_KEYS,
    .partitioned_pre = {INBOX_DDL_DROP_KEYS, INBOX_DDL_CREATE_KEYS, INBOX_DDL_NEW_PRIMARY_P, NULL},
    .partition_head = INBOX_DDL_NEW_PARTITION,
    .partitioned_post = {INBOX_DDL_TRIGGER_KEY_P, INBOX_DDL_TRIGGER_REKEY_P,
                         INBOX_DDL_TRIGGER_UNKEY_P, NULL},
    .plain_post = {INBOX_DDL_NEW_PRIMARY, NULL},
    .view_partitioned = INBOX_DDL_VIEW_KEYS,
    .view_plain = INBOX_DDL_VIEW_EVENTS,
};

struct change {
    struct txo_db *db;
    const struct layout *l;
    const struct txo_partition_opts *opts;
    bool partitioned; /* the target */
    txo_partition_progress_fn progress;
    void *arg;
    /* The copied columns: "a, b", "NEW.a, NEW.b", "a = NEW.a, b = NEW.b". */
    struct txo__buf cols, values, assigns;
};

/* A key of the copy's order, as read and bound. */
struct key {
    bool is_null;
    int64_t i;
    char bytes[KEY_MAX];
    size_t len;
};

static int table_exists(struct txo_db *db, const char *name, bool *exists, struct txo_error *err)
{
    struct txo_param p = txo_p_str(name);
    int64_t n = 0;
    int rc = txo__partition_query_i64(db, LAYOUT_SQL_TABLE_EXISTS, &p, 1, &n, NULL, err);
    *exists = rc == 0 && n > 0;
    return rc;
}

static int read_columns(struct change *c, struct txo_error *err)
{
    struct txo_param table = txo_p_str(c->l->name);
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(c->db, LAYOUT_SQL_COLUMNS, &table, 1, &rows, err);
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
                             "reading the columns of %s", c->l->name);
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

/* The statements of a NULL-terminated list, in order (on the new table: nobody waits). */
static int exec_all(struct txo_db *db, const char *const *sql, struct txo_error *err)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && sql[i] != NULL; i++)
        rc = txo_db_exec_raw(db, sql[i], err);
    return rc;
}

/* The outbox's first bounds: from the smallest id in opts->first_ids steps (wider when that
 * would make too many) to opts->ahead partitions past the largest. */
static int outbox_first(struct change *c, char **ddl, struct txo_error *err)
{
    int64_t min_id = 0, max_id = 0;
    int rc = txo__partition_query_i64(c->db, PARTITION_SQL_MIN_ID, NULL, 0, &min_id, NULL, err);
    if (rc == 0)
        rc = txo__partition_query_i64(c->db, PARTITION_SQL_MAX_ID, NULL, 0, &max_id, NULL, err);
    if (rc < 0)
        return rc;
    *ddl = txo__partition_first_ddl(TXO_PARTITION_OUTBOX, PARTITION_DDL_NEW_PARTITION, min_id,
                                    max_id, c->opts->first_ids, 1, c->opts->ahead);
    return *ddl == NULL ? txo_error_set(err, TXO_ENOMEM, "out of memory") : 0;
}

/* Step 1: the new table of the target layout, empty, with its triggers. */
static int create_new_table(struct change *c, struct txo_error *err)
{
    const struct layout *l = c->l;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < TXO_ARRAY_LEN(l->fresh); i++)
        rc = txo__partition_ddl(c->db, l->fresh[i], c->opts, err);
    if (rc < 0)
        return rc;
    if (!c->partitioned) {
        rc = txo_db_exec_raw(c->db, l->unpartition, err);
        return rc < 0 ? rc : exec_all(c->db, l->plain_post, err);
    }
    char *partition = NULL;
    rc = exec_all(c->db, l->partitioned_pre, err);
    if (rc == 0)
        rc = l->table == TXO_PARTITION_INBOX
                 ? txo__partition_inbox_first(c->db, c->opts, l->partition_head, &partition, err)
                 : outbox_first(c, &partition, err);
    if (rc == 0)
        rc = txo_db_exec_raw(c->db, partition, err);
    if (rc == 0)
        rc = exec_all(c->db, l->partitioned_post, err);
    txo_free(partition);
    return rc;
}

/* Step 2: the live table's writes reach the new table from now on; delete, update, insert, in
 * that order (the file's head says why). */
static int create_copy_triggers(struct change *c, struct txo_error *err)
{
    const char *const upd[] = {c->l->copy_upd, c->cols.data,           LAYOUT_DDL_COPY_VALUES,
                               c->values.data, LAYOUT_DDL_COPY_UPDATE, c->assigns.data};
    const char *const ins[] = {c->l->copy_ins, c->cols.data,           LAYOUT_DDL_COPY_VALUES,
                               c->values.data, LAYOUT_DDL_COPY_UPDATE, c->assigns.data};
    int rc = txo__partition_ddl(c->db, c->l->copy_del, c->opts, err);
    if (rc == 0)
        rc = ddl_concat(c, upd, TXO_ARRAY_LEN(upd), err);
    if (rc == 0)
        rc = ddl_concat(c, ins, TXO_ARRAY_LEN(ins), err);
    return rc;
}

static struct txo_param key_param(const struct change *c, const struct key *k)
{
    return c->l->int_key ? txo_p_i64(k->i) : txo_p_strn(k->bytes, k->len);
}

/* The first column of the first row of sql into *k (is_null when none). */
static int read_key(struct change *c, const char *sql, const struct txo_param *params, size_t n,
                    struct key *k, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(c->db, sql, params, n, &rows, err);
    if (rc < 0)
        return rc;
    k->is_null = txo_rows_count(rows) == 0 || txo_rows_is_null(rows, 0, 0);
    if (!k->is_null && c->l->int_key) {
        k->i = txo_rows_i64(rows, 0, 0);
    } else if (!k->is_null) {
        const char *v = txo_rows_str(rows, 0, 0, &k->len);
        if (k->len > sizeof(k->bytes))
            rc = txo_error_set(err, TXO_EINVAL, "a key of %s is longer than %zu bytes", c->l->name,
                               sizeof(k->bytes));
        else
            memcpy(k->bytes, v, k->len);
    }
    txo_rows_free(rows);
    return rc;
}

/*
 * Step 3: the rows from the smallest key through the largest once the triggers were there
 * (the triggers copy every later write), a batch of opts->batch rows per transaction.
 */
static int copy_rows(struct change *c, struct txo_error *err)
{
    const struct layout *l = c->l;
    struct key from = {0}, last = {0}, end = {0};
    int rc = read_key(c, l->max_key, NULL, 0, &last, err);
    if (rc == 0)
        rc = read_key(c, l->min_key, NULL, 0, &from, err);
    if (rc < 0 || last.is_null || from.is_null)
        return rc; /* empty */
    int64_t total = 0;
    struct txo_param table = txo_p_str(l->name);
    rc = txo__partition_query_i64(c->db, LAYOUT_SQL_ROWS_EST, &table, 1, &total, NULL, err);
    if (rc < 0)
        return rc;
    const char *const first_parts[] = {l->copy_into, c->cols.data, LAYOUT_SQL_COPY_SELECT,
                                       c->cols.data, l->copy_from_first};
    const char *const next_parts[] = {l->copy_into, c->cols.data, LAYOUT_SQL_COPY_SELECT,
                                      c->cols.data, l->copy_from};
    char *first_sql = txo__partition_concat(first_parts, TXO_ARRAY_LEN(first_parts));
    char *next_sql = txo__partition_concat(next_parts, TXO_ARRAY_LEN(next_parts));
    if (first_sql == NULL || next_sql == NULL)
        rc = txo_error_set(err, TXO_ENOMEM, "out of memory");
    uint64_t done = 0, copied = 0;
    for (bool first = true; rc == 0; first = false) {
        struct txo_param range[] = {key_param(c, &from), key_param(c, &last),
                                    txo_p_i64((int64_t)c->opts->batch - 1)};
        rc = read_key(c, first ? l->batch_end_first : l->batch_end, range, 3, &end, err);
        if (rc < 0)
            break;
        bool tail = end.is_null; /* fewer than a batch left: through the last key */
        range[1] = tail ? key_param(c, &last) : key_param(c, &end);
        struct txo_exec_result res = {0};
        rc = txo_db_exec(c->db, first ? first_sql : next_sql, range, 2, &res, err);
        if (rc < 0)
            break;
        copied += res.affected_rows;
        done += tail ? res.affected_rows : c->opts->batch;
        uint64_t about = total > 0 && (uint64_t)total > done ? (uint64_t)total : done;
        if (tail)
            done = about;
        txo_crash_point("partition.copy.after_batch");
        if (c->progress != NULL)
            c->progress(done, about, c->arg);
        if (tail)
            break;
        from = end;
        if (c->opts->pause_ms > 0)
            txo_sleep_ms(c->opts->pause_ms);
    }
    txo_free(first_sql);
    txo_free(next_sql);
    TXO_LOG(TXO_LOG_INFO, "partition", "copied", TXO_KV_STR("table", l->name),
            TXO_KV_U64("rows", copied));
    return rc;
}

static int change_layout(struct change *c, struct txo_error *err)
{
    struct txo_db *db = c->db;
    const struct layout *l = c->l;
    bool there = false, old_there = false, now = false;
    int rc = table_exists(db, l->name, &there, err);
    if (rc == 0 && !there)
        return txo_error_set(err, TXO_ENOTFOUND, "there is no table %s (run txo migrate)", l->name);
    if (rc == 0)
        rc = table_exists(db, l->old_name, &old_there, err);
    if (rc == 0 && old_there) /* a change that swapped and then stopped */
        rc = txo_db_exec_raw(db, l->drop_old, err);
    if (rc == 0)
        rc = txo_partition_is_enabled(db, l->table, &now, err);
    if (rc < 0)
        return rc;
    if (now == c->partitioned) { /* finish what a change stopped after its swap left */
        const char *view = now ? l->view_partitioned : l->view_plain;
        if (view != NULL && (rc = txo__partition_ddl(db, view, c->opts, err)) < 0)
            return rc;
        if (!now && (rc = txo_db_exec_raw(db, l->drop_keys, err)) < 0)
            return rc;
        return txo_error_set(err, TXO_ESTATE, "%s is already %s", l->name,
                             now ? "partitioned" : "unpartitioned");
    }
    rc = read_columns(c, err);
    if (rc == 0)
        rc = create_new_table(c, err);
    if (rc == 0)
        rc = create_copy_triggers(c, err);
    if (rc == 0)
        rc = copy_rows(c, err);
    if (rc < 0)
        return rc;
    rc = txo__partition_ddl(db, l->analyze, c->opts, err);
    if (rc < 0)
        return rc;
    /* The way back: the view reads the live table (partitioned still, every row there) before
     * the key table goes. */
    if (!c->partitioned && l->view_plain != NULL)
        rc = txo__partition_ddl(db, l->view_plain, c->opts, err);
    if (rc < 0)
        return rc;
    txo_crash_point("partition.before_swap");
    rc = txo__partition_ddl(db, l->swap, c->opts, err);
    if (rc == 0)
        rc = txo_db_exec_raw(db, l->drop_old, err);
    if (rc == 0 && c->partitioned && l->view_partitioned != NULL)
        rc = txo__partition_ddl(db, l->view_partitioned, c->opts, err);
    if (rc == 0 && !c->partitioned)
        rc = txo_db_exec_raw(db, l->drop_keys, err);
    if (rc == 0)
        TXO_LOG(TXO_LOG_INFO, "partition", "layout changed", TXO_KV_STR("table", l->name),
                TXO_KV_STR("layout", c->partitioned ? "partitioned" : "unpartitioned"));
    return rc;
}

static const struct layout *layout_of(enum txo_partition_table table)
{
    return table == TXO_PARTITION_OUTBOX  ? &outbox_layout
           : table == TXO_PARTITION_INBOX ? &inbox_layout
                                          : NULL;
}

int txo_partition_change_pending(struct txo_db *db, enum txo_partition_table table, bool *pending,
                                 struct txo_error *err)
{
    const struct layout *l = layout_of(table);
    if (l == NULL)
        return txo_error_set(err, TXO_EINVAL, "no partitioned layout for table %d", (int)table);
    return table_exists(db, l->new_name, pending, err);
}

static int run_change(struct txo_db *db, enum txo_partition_table table,
                      const struct txo_partition_opts *opts, bool partitioned,
                      txo_partition_progress_fn progress, void *arg, struct txo_error *err)
{
    const struct layout *l = layout_of(table);
    if (db == NULL || l == NULL || opts == NULL || opts->batch == 0 || opts->first_ids <= 0 ||
        opts->ahead == 0 || opts->ahead > TXO_PARTITION_AHEAD_MAX)
        return txo_error_set(err, TXO_EINVAL, "partition layout change: bad options");
    struct change c = {.db = db,
                       .l = l,
                       .opts = opts,
                       .partitioned = partitioned,
                       .progress = progress,
                       .arg = arg};
    int rc = change_layout(&c, err);
    if (rc < 0 && rc != TXO_ESTATE && rc != TXO_ENOTFOUND)
        txo_error_wrap(err, "changing %s to the %s layout", l->name,
                       partitioned ? "partitioned" : "unpartitioned");
    txo_free(c.cols.data);
    txo_free(c.values.data);
    txo_free(c.assigns.data);
    return rc;
}

int txo_partition_enable(struct txo_db *db, enum txo_partition_table table,
                         const struct txo_partition_opts *opts, txo_partition_progress_fn progress,
                         void *arg, struct txo_error *err)
{
    return run_change(db, table, opts, true, progress, arg, err);
}

int txo_partition_disable(struct txo_db *db, enum txo_partition_table table,
                          const struct txo_partition_opts *opts, txo_partition_progress_fn progress,
                          void *arg, struct txo_error *err)
{
    return run_change(db, table, opts, false, progress, arg, err);
}
