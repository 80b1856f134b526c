#include "core/common.h"

/*
 * The retention cleaner: deletes old terminal rows in small batches so the
 * outbox, the dead letters, the inbox and the command queue do not grow forever. One loop serves
 * the four tables, each described by a struct purge_table (its statements in retention_sql.h,
 * which also explains the two-step batch: SELECT keys along an index from a cursor, DELETE them by
 * primary key with the condition re-checked).
 *
 * Invariants: only rows that are terminal and older than the cutoff are deleted (outbox
 * PUBLISHED, command queue DONE, inbox rows with processed_at set); the DELETE re-checks that
 * on every row, whatever step 1 read. Each batch is its own short READ COMMITTED transaction,
 * retried as a whole by txo_db_transact() on deadlock or lock wait timeout; a batch that
 * failed for good leaves the earlier batches committed.
 *
 * With an archive directory (txo/archive.h) a batch has three steps: the selected rows are read
 * whole and locked, written to an archive file, and deleted by the keys the file holds, the
 * file durable before the DELETE commits. A crash between the two leaves a whole file whose rows
 * are still in the table: before its first batch a purge reads the newest file of its table and
 * deletes the rows it lists, in the first batch's transaction; a batch whose transaction is
 * retried does the same with the file its failed attempt wrote. So every archived row ends up
 * in exactly one file and out of the table. The outbox and the dead letters are archived in
 * files named by their ids; the inbox, whose key is a string event id, in files named by a
 * sequence the purge carries on from the table's newest file (one more per file written, so
 * the file a crash left is always the newest), and its rows of an interrupted file are deleted
 * by (event_id, processed_at): an event id may be recorded again once its row is gone, and
 * that new row is not the archived one.
 *
 * Thread-safety: no shared state; each call uses only the db it is given. Several cleaners
 * may run at once: they may select the same keys, and the loser's DELETE just deletes fewer.
 * Cleaners that archive must not share a directory (txo/archive.h).
 */

#include <errno.h>
#include <string.h>
#include <time.h>

#include "retention/retention_sql.h"
#include "txo/archive.h"
#include "txo/binlog.h"
#include "txo/cmdq.h"
#include "txo/inbox.h"
#include "txo/partition.h"
#include "txo/idempotency.h"
#include "txo/retention.h"

#define CURSOR_AT_MAX  32  /* "YYYY-MM-DD HH:MM:SS.ffffff" */
#define CURSOR_KEY_MAX 256 /* inbox_events.event_id VARBINARY(255) */

struct purge_table {
    const char *name;         /* for messages: "outbox_events" */
    const char *select_first; /* step 1 from the start: params cutoff x n_cutoff, limit */
    const char *select_after; /* step 1 after the cursor: cutoff x n_cutoff, cursor (3), limit */
    const char *delete_in;    /* step 2: params cutoff, keys... */
    const char *rows_in;      /* archiving: every column, params cutoff, ids...; NULL: cannot */
    const char *rows_in_end;  /* ends rows_in: the archive file's order, locked */
    const char *finish_in; /* an interrupted run's archive file: cutoff, ids...; NULL: delete_in */
    unsigned n_cutoff;     /* how many times step 1 binds the cutoff */
    bool through;          /* step 1 binds the binlog source's high-water id after them */
    bool text_key;         /* the key is a string (inbox event_id), not a BIGINT id */
    const char *key_col;   /* archiving: the key's column, "id" or "event_id" */
    const char *time_col;  /* archiving: files named by sequence, ordered by this column;
                              NULL: named by ids */
};

static const struct purge_table outbox_table = {
    .name = "outbox_events",
    .select_first = RETENTION_SQL_OUTBOX_FIRST,
    .select_after = RETENTION_SQL_OUTBOX_AFTER,
    .delete_in = RETENTION_SQL_OUTBOX_DELETE_IN,
    .rows_in = RETENTION_SQL_OUTBOX_ROWS_IN,
    .rows_in_end = RETENTION_SQL_ROWS_IN_END,
    .finish_in = RETENTION_SQL_OUTBOX_FINISH_IN,
    .n_cutoff = 2,
    .text_key = false,
    .key_col = "id",
};

/* The outbox rows a binlog source published: PENDING, through its high-water id. */
static const struct purge_table outbox_binlog_table = {
    .name = "outbox_events",
    .select_first = RETENTION_SQL_OUTBOX_BINLOG_FIRST,
    .select_after = RETENTION_SQL_OUTBOX_BINLOG_AFTER,
    .delete_in = RETENTION_SQL_OUTBOX_BINLOG_DELETE_IN,
    .rows_in = RETENTION_SQL_OUTBOX_BINLOG_ROWS_IN,
    .rows_in_end = RETENTION_SQL_ROWS_IN_END,
    .finish_in = RETENTION_SQL_OUTBOX_FINISH_IN,
    .n_cutoff = 1,
    .through = true,
    .text_key = false,
    .key_col = "id",
};

static const struct purge_table inbox_table = {
    .name = "inbox_events",
    .select_first = RETENTION_SQL_INBOX_FIRST,
    .select_after = RETENTION_SQL_INBOX_AFTER,
    .delete_in = RETENTION_SQL_INBOX_DELETE_IN,
    .rows_in = RETENTION_SQL_INBOX_ROWS_IN,
    .rows_in_end = RETENTION_SQL_INBOX_ROWS_IN_END,
    .n_cutoff = 1,
    .text_key = true,
    .key_col = "event_id",
    .time_col = "processed_at",
};

static const struct purge_table dlq_table = {
    .name = "dead_letter_events",
    .select_first = RETENTION_SQL_DLQ_FIRST,
    .select_after = RETENTION_SQL_DLQ_AFTER,
    .delete_in = RETENTION_SQL_DLQ_DELETE_IN,
    .rows_in = RETENTION_SQL_DLQ_ROWS_IN,
    .rows_in_end = RETENTION_SQL_ROWS_IN_END,
    .n_cutoff = 1,
    .text_key = false,
    .key_col = "id",
};

static const struct purge_table cmdq_table = {
    .name = "command_queue",
    .select_first = RETENTION_SQL_CMDQ_FIRST,
    .select_after = RETENTION_SQL_CMDQ_AFTER,
    .delete_in = RETENTION_SQL_CMDQ_DELETE_IN,
    .n_cutoff = 2,
    .text_key = false,
};

/* Columns of every step-1 query. */
enum select_col {
    COL_KEY = 0,
    COL_ORDER,
};

struct purge {
    const struct purge_table *t;
    unsigned batch_size;
    char cutoff[CURSOR_AT_MAX];
    int64_t through; /* t->through: the binlog source's high-water id */

    /* Where the next batch starts; unset for the first one. */
    bool cursor_set;
    char cursor_at[CURSOR_AT_MAX];
    int64_t cursor_id;
    char cursor_key[CURSOR_KEY_MAX];
    size_t cursor_key_len;

    /* The current batch (reset at the start of each attempt of its transaction). */
    struct txo_rows *rows;
    uint64_t deleted;

    struct txo_param *params; /* 1 + twice the largest IN list, or step 1's 7 */
    size_t params_cap;

    /* Archiving (archive_dir set): the table's columns (its key's and, for files named by
     * sequence, its time's), the sequence of the next file, the batch's whole rows, and the
     * file whose rows may still be in the table (the newest one at the start, then the one this
     * batch's transaction wrote), owned here. */
    const char *archive_dir;
    struct txo_archive_column *cols;
    size_t n_cols, key_col, time_col;
    uint64_t next_seq;
    struct txo_rows *whole;
    char *unfinished;
};

/* The key of row i of rows, in column col. */
static struct txo_param row_key(const struct purge *p, const struct txo_rows *rows, size_t i,
                                size_t col)
{
    if (!p->t->text_key)
        return txo_p_i64(txo_rows_i64(rows, i, col));
    size_t len = 0;
    const char *key = txo_rows_str(rows, i, col, &len);
    return txo_p_strn(key != NULL ? key : "", len);
}

/* Binds the key of row i of step 1 (or the cursor's key when rows is NULL) at *p. */
static struct txo_param key_param(const struct purge *p, const struct txo_rows *rows, size_t i)
{
    if (rows != NULL)
        return row_key(p, rows, i, COL_KEY);
    return p->t->text_key ? txo_p_strn(p->cursor_key, p->cursor_key_len) : txo_p_i64(p->cursor_id);
}

static int select_batch(struct txo_tx *tx, struct purge *p, struct txo_error *err)
{
    size_t k = 0;
    for (unsigned i = 0; i < p->t->n_cutoff; i++)
        p->params[k++] = txo_p_str(p->cutoff);
    if (p->t->through)
        p->params[k++] = txo_p_i64(p->through);
    if (p->cursor_set) {
        p->params[k++] = txo_p_str(p->cursor_at);
        p->params[k++] = txo_p_str(p->cursor_at);
        p->params[k++] = key_param(p, NULL, 0);
    }
    p->params[k++] = txo_p_i64(p->batch_size);
    const char *sql = p->cursor_set ? p->t->select_after : p->t->select_first;
    return txo_tx_query(tx, sql, p->params, k, &p->rows, err);
}

/*
 * Runs stmt (ending in `IN `) with cutoff and the n keys already in params[1..n], the last one
 * repeated up to the IN list's size; a DELETE adds its rows to p->deleted, a query (out set)
 * returns its rows.
 */
static int run_in_list(struct txo_tx *tx, struct purge *p, const char *stmt, const char *end,
                       const char *cutoff, size_t n, struct txo_rows **out, struct txo_error *err)
{
    size_t m = txo_sql_in_list_size(n);
    TXO_ASSERT(n > 0 && 1 + m <= p->params_cap);
    char *sql = txo_sql_in_list(stmt, m, end);
    if (sql == NULL)
        return txo_error_set(err, TXO_ENOMEM, "out of memory building an IN list of %zu", m);
    p->params[0] = txo_p_str(cutoff);
    for (size_t i = n; i < m; i++)
        p->params[1 + i] = p->params[n];
    int rc;
    if (out != NULL) {
        rc = txo_tx_query(tx, sql, p->params, 1 + m, out, err);
    } else {
        struct txo_exec_result res;
        rc = txo_tx_exec(tx, sql, p->params, 1 + m, &res, err);
        if (rc == 0)
            p->deleted += res.affected_rows;
    }
    txo_free(sql);
    return rc;
}

/*
 * Deletes the n rows from row i of f (named by sequence) that are still in the table, by
 * (key, time): RETENTION_SQL_INBOX_FINISH, the last pair repeated up to the IN list's size.
 */
static int finish_keys(struct txo_tx *tx, struct purge *p, const struct txo_archive_file *f,
                       size_t i, size_t n, struct txo_error *err)
{
    size_t m = txo_sql_in_list_size(n);
    TXO_ASSERT(n > 0 && 2 * m <= p->params_cap);
    char(*at)[TXO_RFC3339_LEN] = txo_calloc(n, sizeof(*at));
    char *sql = txo_sql_values_rows_then(RETENTION_SQL_INBOX_FINISH, m,
                                         RETENTION_SQL_INBOX_FINISH_ROW, ")");
    int rc = 0;
    if (at == NULL || sql == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "out of memory building an IN list of %zu", m);
        goto out;
    }
    for (size_t k = 0; k < m; k++) {
        size_t r = i + (k < n ? k : n - 1);
        if (k < n) {
            /* "YYYY-MM-DDTHH:MM:SS.ffffffZ" as the column's "YYYY-MM-DD HH:MM:SS.ffffff". */
            txo_format_rfc3339(f->times_us[r], at[k]);
            at[k][10] = ' ';
            at[k][strlen(at[k]) - 1] = '\0';
        }
        p->params[2 * k] = txo_p_strn(f->keys[r].bytes, f->keys[r].len);
        p->params[2 * k + 1] = txo_p_str(at[k < n ? k : n - 1]);
    }
    struct txo_exec_result res;
    rc = txo_tx_exec(tx, sql, p->params, 2 * m, &res, err);
    if (rc == 0)
        p->deleted += res.affected_rows;
out:
    txo_free(sql);
    txo_free(at);
    return rc;
}

/* Deletes the rows of p->unfinished still in the table, batch_size per statement. */
static int finish_file(struct txo_tx *tx, struct purge *p, struct txo_error *err)
{
    struct txo_archive_file f;
    int rc = txo_archive_read(p->unfinished, &f, err);
    if (rc < 0) {
        txo_error_wrap(err, "the newest archive file cannot be trusted");
        return rc;
    }
    int version = p->t->time_col != NULL ? TXO_ARCHIVE_VERSION_SEQ : TXO_ARCHIVE_VERSION;
    if (strcmp(f.table, p->t->name) != 0)
        rc = txo_error_set(err, TXO_EINVAL, "%s holds rows of %s", p->unfinished, f.table);
    else if (f.version != version)
        rc = txo_error_set(err, TXO_EINVAL, "%s is a version %d file, %s's are version %d",
                           p->unfinished, f.version, p->t->name, version);
    for (size_t i = 0; rc == 0 && i < f.n_rows; i += p->batch_size) {
        size_t n = f.n_rows - i < p->batch_size ? f.n_rows - i : p->batch_size;
        if (version == TXO_ARCHIVE_VERSION_SEQ) {
            rc = finish_keys(tx, p, &f, i, n, err);
            continue;
        }
        for (size_t k = 0; k < n; k++)
            p->params[1 + k] = txo_p_i64(f.ids[i + k]);
        rc = run_in_list(tx, p, p->t->finish_in != NULL ? p->t->finish_in : p->t->delete_in, "",
                         RETENTION_ARCHIVED_CUTOFF, n, NULL, err);
    }
    txo_archive_file_release(&f);
    return rc;
}

/* Reads the batch's rows whole and locked, writes them to a file, then deletes them. */
static int archive_batch(struct txo_tx *tx, struct purge *p, size_t n, struct txo_error *err)
{
    for (size_t i = 0; i < n; i++)
        p->params[1 + i] = key_param(p, p->rows, i);
    int rc = run_in_list(tx, p, p->t->rows_in, p->t->rows_in_end, p->cutoff, n, &p->whole, err);
    size_t w = rc == 0 ? txo_rows_count(p->whole) : 0;
    if (w == 0)
        return rc;
    if (txo_rows_columns(p->whole) != p->n_cols)
        return txo_error_set(err, TXO_ESTATE, "%s changed its columns during the purge",
                             p->t->name);
    char *path = NULL;
    if (p->t->time_col != NULL)
        rc = txo_archive_write_seq(p->archive_dir, p->t->name, p->cols, p->n_cols, p->key_col,
                                   p->time_col, p->next_seq, p->whole, &path, err);
    else
        rc = txo_archive_write(p->archive_dir, p->t->name, p->cols, p->n_cols, p->key_col, p->whole,
                               &path, err);
    if (rc < 0)
        return rc;
    if (p->t->time_col != NULL)
        p->next_seq++; /* taken, whether or not this transaction commits */
    txo_free(p->unfinished);
    p->unfinished = path;
    txo_crash_point("retention.archive.after_rename");
    for (size_t i = 0; i < w; i++)
        p->params[1 + i] = row_key(p, p->whole, i, p->key_col);
    return run_in_list(tx, p, p->t->delete_in, "", p->cutoff, w, NULL, err);
}

static int batch_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct purge *p = arg;
    txo_rows_free(p->rows); /* a previous attempt of this transaction */
    p->rows = NULL;
    txo_rows_free(p->whole);
    p->whole = NULL;
    p->deleted = 0;

    int rc = p->unfinished != NULL ? finish_file(tx, p, err) : 0;
    if (rc == 0)
        rc = select_batch(tx, p, err);
    if (rc < 0)
        return rc;
    size_t n = txo_rows_count(p->rows);
    if (n == 0)
        return 0;
    if (p->archive_dir != NULL)
        return archive_batch(tx, p, n, err);
    for (size_t i = 0; i < n; i++)
        p->params[1 + i] = key_param(p, p->rows, i);
    return run_in_list(tx, p, p->t->delete_in, "", p->cutoff, n, NULL, err);
}

/* Moves the cursor to the last row of the committed batch. Returns false when it cannot. */
static bool advance_cursor(struct purge *p)
{
    size_t n = txo_rows_count(p->rows);
    size_t at_len = 0;
    const char *at = txo_rows_str(p->rows, n - 1, COL_ORDER, &at_len);
    if (at == NULL || at_len == 0 || at_len >= sizeof(p->cursor_at))
        return false; /* cannot happen for a DATETIME(6) in the range; stop rather than loop */
    memcpy(p->cursor_at, at, at_len + 1);
    if (p->t->text_key) {
        size_t key_len = 0;
        const char *key = txo_rows_str(p->rows, n - 1, COL_KEY, &key_len);
        if (key == NULL || key_len > sizeof(p->cursor_key))
            return false;
        memcpy(p->cursor_key, key, key_len);
        p->cursor_key_len = key_len;
    } else {
        p->cursor_id = txo_rows_i64(p->rows, n - 1, COL_KEY);
    }
    p->cursor_set = true;
    return true;
}

static int read_cutoff(struct txo_db *db, unsigned older_than_s, char out[CURSOR_AT_MAX],
                       struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    struct txo_param age = txo_p_i64(older_than_s);
    int rc = txo_db_query(db, RETENTION_SQL_CUTOFF, &age, 1, &rows, err);
    if (rc < 0)
        return rc;
    size_t len = 0;
    const char *at = txo_rows_count(rows) > 0 ? txo_rows_str(rows, 0, 0, &len) : NULL;
    if (at == NULL || len == 0 || len >= CURSOR_AT_MAX)
        rc = txo_error_set(err, TXO_EDB, "the server returned no cutoff time");
    else
        memcpy(out, at, len + 1);
    txo_rows_free(rows);
    return rc;
}

static void pause_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The index of the column named name, or p->n_cols when there is none. */
static size_t column_of(const struct purge *p, const char *name)
{
    size_t c = 0;
    while (c < p->n_cols && strcmp(p->cols[c].name, name) != 0)
        c++;
    return c;
}

/*
 * Reads the table's columns, its newest archive file, whose rows may still be there, and (for
 * files named by sequence) the sequence the next file takes.
 */
static int archive_start(struct txo_db *db, struct purge *p, struct txo_error *err)
{
    TXO_ASSERT(p->t->rows_in != NULL);
    int rc = txo_archive_check_dir(p->archive_dir, err);
    if (rc == 0)
        rc = txo_archive_columns(db, p->t->name, &p->cols, &p->n_cols, err);
    if (rc < 0)
        return rc;
    p->key_col = column_of(p, p->t->key_col);
    enum txo_archive_type key_type = p->key_col < p->n_cols ? p->cols[p->key_col].type : 0;
    bool key_ok = p->t->text_key ? key_type == TXO_ARCHIVE_BINARY || key_type == TXO_ARCHIVE_TEXT
                                 : key_type == TXO_ARCHIVE_INT;
    if (p->key_col == p->n_cols || !key_ok)
        return txo_error_set(err, TXO_ESTATE, "%s has no %s column of the type its archive needs",
                             p->t->name, p->t->key_col);
    if (p->t->time_col != NULL) {
        p->time_col = column_of(p, p->t->time_col);
        if (p->time_col == p->n_cols || p->cols[p->time_col].type != TXO_ARCHIVE_TIME)
            return txo_error_set(err, TXO_ESTATE, "%s has no %s time column", p->t->name,
                                 p->t->time_col);
        uint64_t last = 0;
        rc = txo_archive_last_seq(p->archive_dir, p->t->name, &last, err);
        if (rc < 0)
            return rc;
        p->next_seq = last + 1;
    }
    return txo_archive_newest(p->archive_dir, p->t->name, &p->unfinished, err);
}

static int purge_run(struct txo_db *db, const struct purge_table *t, int64_t through,
                     unsigned older_than_s, unsigned batch_size, unsigned max_batches,
                     unsigned pause, const char *archive_dir, uint64_t *deleted,
                     struct txo_error *err)
{
    TXO_ASSERT(db != NULL);
    uint64_t total = 0;
    unsigned batches = 0;
    struct purge p = {
        .t = t, .batch_size = batch_size, .archive_dir = archive_dir, .through = through};
    int rc = 0;
    if (batch_size < 1 || batch_size > TXO_PURGE_BATCH_MAX) {
        if (deleted != NULL)
            *deleted = 0;
        return txo_error_set(err, TXO_EINVAL, "purge %s: batch_size must be 1..%d, got %u", t->name,
                             TXO_PURGE_BATCH_MAX, batch_size);
    }
    /* An IN list binds the cutoff and a key a row, the inbox's finish (finish_keys()) two
     * values a row. */
    p.params_cap = 1 + 2 * txo_sql_in_list_size(batch_size);
    if (p.params_cap < 8)
        p.params_cap = 8; /* step 1 binds up to 2 cutoffs, 3 cursor values and the limit */
    p.params = txo_calloc(p.params_cap, sizeof(*p.params));
    if (p.params == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "out of memory");
        goto out;
    }
    rc = read_cutoff(db, older_than_s, p.cutoff, err);
    if (rc == 0 && archive_dir != NULL)
        rc = archive_start(db, &p, err);
    if (rc < 0)
        goto out;

    while (max_batches == 0 || batches < max_batches) {
        if (batches > 0 && pause > 0)
            pause_ms(pause);
        rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, batch_tx, &p, err);
        if (rc < 0)
            goto out;
        batches++;
        total += p.deleted;
        txo_free(p.unfinished); /* its rows are gone with this commit */
        p.unfinished = NULL;
        size_t n = txo_rows_count(p.rows);
        if (n < batch_size || !advance_cursor(&p))
            break;
    }
    if (total > 0)
        TXO_LOG(TXO_LOG_INFO, "retention", "purged", TXO_KV_STR("table", t->name),
                TXO_KV_U64("rows", total), TXO_KV_U64("batches", batches),
                TXO_KV_U64("older_than_s", older_than_s), TXO_KV_STR("cutoff", p.cutoff));
out:
    if (rc < 0)
        txo_error_wrap(err, "purge %s (%" PRIu64 " rows deleted before the failure)", t->name,
                       total);
    if (deleted != NULL)
        *deleted = total;
    txo_rows_free(p.rows);
    txo_rows_free(p.whole);
    txo_archive_columns_free(p.cols, p.n_cols);
    txo_free(p.unfinished);
    txo_free(p.params);
    return rc;
}

int txo_outbox_purge_published(struct txo_db *db, unsigned older_than_s, unsigned batch_size,
                               unsigned max_batches, uint64_t *deleted, struct txo_error *err)
{
    return purge_run(db, &outbox_table, 0, older_than_s, batch_size, max_batches, 0, NULL, deleted,
                     err);
}

int txo_dead_letter_purge_replayed(struct txo_db *db, unsigned older_than_s, unsigned batch_size,
                                   unsigned max_batches, uint64_t *deleted, struct txo_error *err)
{
    return purge_run(db, &dlq_table, 0, older_than_s, batch_size, max_batches, 0, NULL, deleted,
                     err);
}

int txo_inbox_purge(struct txo_db *db, unsigned older_than_s, unsigned batch_size,
                    unsigned max_batches, uint64_t *deleted, struct txo_error *err)
{
    return purge_run(db, &inbox_table, 0, older_than_s, batch_size, max_batches, 0, NULL, deleted,
                     err);
}

int txo_cmdq_purge_done(struct txo_db *db, unsigned older_than_s, unsigned batch_size,
                        unsigned max_batches, uint64_t *deleted, struct txo_error *err)
{
    return purge_run(db, &cmdq_table, 0, older_than_s, batch_size, max_batches, 0, NULL, deleted,
                     err);
}

void txo_retention_opts_init(struct txo_retention_opts *opts)
{
    memset(opts, 0, sizeof(*opts)); /* pause_ms 0, relay_tables_only false, archive_dir NULL */
    opts->interval_s = 60;
    opts->batch = 1000;
    opts->max_batches = 100;
    opts->outbox_s = 7 * 86400;
    opts->idempotency_s = 86400;
    opts->inbox_s = 7 * 86400;
    opts->commands_s = 7 * 86400;
    opts->dead_letters_s = 30 * 86400;
    txo_partition_opts_init(&opts->partition);
}

/* True in *exists when the table is there (a relay-only schema has only the outbox and the
 * dead letters). */
static int table_there(struct txo_db *db, const char *table, bool *exists, struct txo_error *err)
{
    *exists = false;
    return txo_schema_has_table(db, table, exists, err);
}

/* The outbox's rows, one by one: PUBLISHED ones, and those a binlog source published. */
static int purge_outbox(struct txo_db *db, const struct txo_retention_opts *opts, uint64_t *deleted,
                        struct txo_error *err)
{
    int rc = purge_run(db, &outbox_table, 0, opts->outbox_s, opts->batch, opts->max_batches,
                       opts->pause_ms, opts->archive_dir, deleted, err);
    /* With a binlog source, the rows it published stay PENDING: through its high-water id. */
    int64_t through = 0;
    if (rc == 0)
        rc = txo_binlog_published_through(db, &through, err);
    uint64_t binlog_rows = 0;
    if (rc == 0 && through > 0)
        rc = purge_run(db, &outbox_binlog_table, through, opts->outbox_s, opts->batch,
                       opts->max_batches, opts->pause_ms, opts->archive_dir, &binlog_rows, err);
    *deleted += binlog_rows;
    return rc;
}

/* A partitioned table: whole partitions (txo/partition.h). */
static int retire_partitions(struct txo_db *db, enum txo_partition_table table,
                             const struct txo_retention_opts *opts, unsigned older_than_s,
                             uint64_t *deleted, struct txo_error *err)
{
    struct txo_partition_opts po = opts->partition;
    po.batch = opts->batch;
    po.pause_ms = opts->pause_ms;
    po.max_batches = opts->max_batches;
    struct txo_partition_retired r = {0};
    int rc = txo_partition_retire(db, table, &po, older_than_s, opts->archive_dir, &r, err);
    *deleted += r.rows;
    return rc;
}

int txo_retention_run(struct txo_db *db, const struct txo_retention_opts *opts,
                      struct txo_retention_counts *out, struct txo_error *err)
{
    struct txo_retention_counts c = {0};
    if (db == NULL || opts == NULL)
        return txo_error_set(err, TXO_EINVAL, "retention: missing argument");
    unsigned pause = opts->pause_ms;
    const char *archive = opts->archive_dir;
    bool partitioned = false;
    int rc = txo_partition_is_enabled(db, TXO_PARTITION_OUTBOX, &partitioned, err);
    if (rc == 0 && partitioned)
        rc = retire_partitions(db, TXO_PARTITION_OUTBOX, opts, opts->outbox_s, &c.outbox, err);
    else if (rc == 0)
        rc = purge_outbox(db, opts, &c.outbox, err);
    if (rc == 0 && opts->dead_letters_s > 0)
        rc = purge_run(db, &dlq_table, 0, opts->dead_letters_s, opts->batch, opts->max_batches,
                       pause, archive, &c.dead_letters, err);
    bool idem = false, inbox = false, cmdq = false;
    if (rc == 0 && !opts->relay_tables_only)
        rc = table_there(db, "idempotency_keys", &idem, err);
    if (rc == 0 && idem)
        rc = txo_idem_purge(db, opts->idempotency_s, opts->batch, opts->max_batches, &c.idempotency,
                            err);
    if (rc == 0 && !opts->relay_tables_only)
        rc = table_there(db, inbox_table.name, &inbox, err);
    if (rc == 0 && inbox)
        rc = txo_partition_is_enabled(db, TXO_PARTITION_INBOX, &partitioned, err);
    if (rc == 0 && inbox && partitioned)
        rc = retire_partitions(db, TXO_PARTITION_INBOX, opts, opts->inbox_s, &c.inbox, err);
    else if (rc == 0 && inbox)
        rc = purge_run(db, &inbox_table, 0, opts->inbox_s, opts->batch, opts->max_batches, pause,
                       archive, &c.inbox, err);
    if (rc == 0 && !opts->relay_tables_only)
        rc = table_there(db, cmdq_table.name, &cmdq, err);
    if (rc == 0 && cmdq)
        rc = purge_run(db, &cmdq_table, 0, opts->commands_s, opts->batch, opts->max_batches, pause,
                       NULL, &c.commands, err);
    if (out != NULL)
        *out = c;
    return rc;
}
