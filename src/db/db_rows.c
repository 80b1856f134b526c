/*
 * Query results: txo_tx_query() runs a statement and buffers its whole result into one
 * struct txo_rows, which the txo_rows_* calls read.
 *
 * Data: a cell table (n_rows * n_cols, each an offset, a length and a NULL flag) plus one text
 * buffer holding every value in the server's text form, NUL-terminated. A result is built one
 * value at a time (txo__rows_put): from a statement's rows here, and from the binary log's
 * row images in db_binlog.c. The result is read
 * whole before txo_tx_query() returns, so no statement is left with rows pending and a
 * struct txo_rows outlives the connection it came from.
 *
 * Thread-safety: a struct txo_rows is only read once returned; the struct txo_db that
 * produced it is used by one thread at a time.
 */
#include "core/common.h"

#include "db/db_internal.h"

struct cell {
    size_t off;
    size_t len;
    bool null;
};

struct txo_rows {
    size_t n_rows, n_cols;
    struct cell *cells; /* n_rows * n_cols, then the cells of a row being built */
    char *data;         /* every value, NUL-terminated, at cells[i].off */
    size_t n_cells, cells_cap, data_len, data_cap;
};

struct txo_rows *txo__rows_new(size_t n_cols)
{
    TXO_ASSERT(n_cols > 0);
    struct txo_rows *rows = txo_calloc(1, sizeof(*rows));
    if (rows != NULL)
        rows->n_cols = n_cols;
    return rows;
}

int txo__rows_put(struct txo_rows *rows, const char *v, size_t len)
{
    if (TXO_ARRAY_RESERVE(rows->cells, rows->cells_cap, rows->n_cells + 1, 16) < 0 ||
        TXO_ARRAY_RESERVE(rows->data, rows->data_cap, rows->data_len + (v != NULL ? len : 0) + 1,
                          16) < 0)
        return TXO_ENOMEM;
    struct cell *cell = &rows->cells[rows->n_cells++];
    cell->null = v == NULL;
    cell->len = v != NULL ? len : 0;
    cell->off = rows->data_len;
    if (cell->len > 0)
        memcpy(rows->data + rows->data_len, v, cell->len);
    rows->data[rows->data_len + cell->len] = '\0';
    rows->data_len += cell->len + 1;
    if (rows->n_cells % rows->n_cols == 0)
        rows->n_rows++;
    return 0;
}

void txo__rows_truncate(struct txo_rows *rows, size_t keep)
{
    TXO_ASSERT(keep <= rows->n_rows);
    size_t whole = keep * rows->n_cols;
    if (rows->n_cells > whole) {
        rows->data_len = rows->cells[whole].off;
        rows->n_cells = whole;
    }
    rows->n_rows = keep;
}

int txo__rows_copy(const struct txo_rows *src, size_t from, size_t n, struct txo_rows **out)
{
    TXO_ASSERT(from + n <= src->n_rows);
    struct txo_rows *rows = txo__rows_new(src->n_cols);
    if (rows == NULL)
        return TXO_ENOMEM;
    for (size_t i = from * src->n_cols; i < (from + n) * src->n_cols; i++) {
        const struct cell *c = &src->cells[i];
        if (txo__rows_put(rows, c->null ? NULL : src->data + c->off, c->len) < 0) {
            txo_rows_free(rows);
            return TXO_ENOMEM;
        }
    }
    *out = rows;
    return 0;
}

void txo__rows_drop_head(struct txo_rows *rows, size_t n)
{
    TXO_ASSERT(n <= rows->n_rows);
    size_t cells = n * rows->n_cols;
    if (cells == 0)
        return;
    size_t bytes = cells < rows->n_cells ? rows->cells[cells].off : rows->data_len;
    memmove(rows->cells, rows->cells + cells, (rows->n_cells - cells) * sizeof(struct cell));
    rows->n_cells -= cells;
    rows->n_rows -= n;
    for (size_t i = 0; i < rows->n_cells; i++)
        rows->cells[i].off -= bytes;
    memmove(rows->data, rows->data + bytes, rows->data_len - bytes);
    rows->data_len -= bytes;
}

/*
 * Puts a cached statement whose result could not be read back to its state after prepare.
 *
 * Why: an error can arrive in the middle of a result set, after the column definitions that
 * mysql_stmt_execute() reads: a SELECT ... FOR UPDATE that waits for a row lock and becomes a
 * deadlock victim (1213) or times out (1205), a server that kills the query, and so on. Then
 * mysql_stmt_store_result() fails, and Connector/C (3.3) marks the connection ready but
 * leaves the statement waiting for its result; mysql_stmt_free_result() then moves it to
 * "fetching". The next mysql_stmt_execute() of that same handle (the retry of the
 * transaction runs the same SQL, so the cache hands out the same handle) first drains the
 * rest of that unbuffered result: it waits for packets the server never sends, before it
 * even sends the execute, until read_timeout (the relay's reclaim hung there). Errors in the
 * reply to the execute itself need nothing: the library puts the handle back to "prepared".
 *
 * mysql_stmt_reset() returns the handle to "prepared" (one COM_STMT_RESET round trip, only on
 * this error path). When that fails too, the session cannot be trusted: it is marked broken,
 * so the next transaction attempt reconnects (which drops every cached statement).
 */
static void forget_failed_result(struct txo_db *db, MYSQL_STMT *stmt)
{
    if (db->broken)
        return; /* reconnecting closes the handle anyway */
    if (mysql_stmt_reset(stmt) != 0)
        db->broken = true;
}

static int fetch_rows(struct txo_db *db, MYSQL_STMT *stmt, const char *sql, struct txo_rows **out,
                      struct txo_error *err)
{
    int rc = 0;
    MYSQL_RES *meta = mysql_stmt_result_metadata(stmt);
    MYSQL_BIND *binds = NULL;
    unsigned long *lengths = NULL;
    my_bool *nulls = NULL;
    char **bufs = NULL;
    struct txo_rows *rows = NULL;
    if (!meta)
        return txo_error_set(err, TXO_EINVAL, "statement \"%.80s\" returns no result set", sql);
    size_t n_cols = mysql_num_fields(meta);
    MYSQL_FIELD *fields = mysql_fetch_fields(meta);
    rows = n_cols > 0 ? txo__rows_new(n_cols) : txo_calloc(1, sizeof(*rows));
    binds = txo_calloc(n_cols, sizeof(*binds));
    lengths = txo_calloc(n_cols, sizeof(*lengths));
    nulls = txo_calloc(n_cols, sizeof(*nulls));
    bufs = txo_calloc(n_cols, sizeof(*bufs));
    if (!rows || !binds || !lengths || !nulls || !bufs) {
        rc = txo_error_set(err, TXO_ENOMEM, "buffering a result: out of memory");
        goto out;
    }
    /* max_length makes store_result compute the longest value of each column. */
    my_bool update_max = 1;
    mysql_stmt_attr_set(stmt, STMT_ATTR_UPDATE_MAX_LENGTH, &update_max);
    if (mysql_stmt_store_result(stmt) != 0) {
        rc = txo__db_stmt_error(db, stmt, sql, err);
        goto out;
    }
    for (size_t c = 0; c < n_cols; c++) {
        /* Numbers and dates are converted to text by the client: 64 bytes hold any of them. */
        size_t cap = fields[c].max_length > 64 ? fields[c].max_length + 1 : 65;
        bufs[c] = txo_malloc(cap);
        if (!bufs[c]) {
            rc = txo_error_set(err, TXO_ENOMEM, "buffering a result: out of memory");
            goto out;
        }
        binds[c].buffer_type = MYSQL_TYPE_STRING;
        binds[c].buffer = bufs[c];
        binds[c].buffer_length = (unsigned long)cap;
        binds[c].length = &lengths[c];
        binds[c].is_null = &nulls[c];
    }
    if (n_cols > 0 && mysql_stmt_bind_result(stmt, binds) != 0) {
        rc = txo__db_stmt_error(db, stmt, sql, err);
        goto out;
    }
    for (;;) {
        int f = mysql_stmt_fetch(stmt);
        if (f == MYSQL_NO_DATA)
            break;
        if (f == 1) {
            rc = txo__db_stmt_error(db, stmt, sql, err);
            goto out;
        }
        if (f == MYSQL_DATA_TRUNCATED) {
            rc = txo_error_set(err, TXO_EDB, "statement \"%.80s\": a value was truncated", sql);
            goto out;
        }
        for (size_t c = 0; c < n_cols; c++) {
            if (txo__rows_put(rows, nulls[c] ? NULL : bufs[c], nulls[c] ? 0 : lengths[c]) < 0) {
                rc = txo_error_set(err, TXO_ENOMEM, "buffering a result: out of memory");
                goto out;
            }
        }
    }
    *out = rows;
    rows = NULL;
out:
    mysql_stmt_free_result(stmt);
    if (rc < 0)
        forget_failed_result(db, stmt);
    mysql_free_result(meta);
    if (bufs)
        for (size_t c = 0; c < n_cols; c++)
            txo_free(bufs[c]);
    txo_free(bufs);
    txo_free(binds);
    txo_free(lengths);
    txo_free(nulls);
    txo_rows_free(rows);
    return rc;
}

int txo_tx_query(struct txo_tx *tx, const char *sql, const struct txo_param *params,
                 size_t n_params, struct txo_rows **out, struct txo_error *err)
{
    MYSQL_STMT *stmt = NULL;
    int rc = txo__db_execute(tx->db, sql, params, n_params, &stmt, err);
    if (rc < 0)
        return rc;
    return fetch_rows(tx->db, stmt, sql, out, err);
}

size_t txo_rows_count(const struct txo_rows *rows)
{
    return rows ? rows->n_rows : 0;
}

size_t txo_rows_columns(const struct txo_rows *rows)
{
    return rows ? rows->n_cols : 0;
}

static const struct cell *cell_at(const struct txo_rows *rows, size_t row, size_t col)
{
    TXO_ASSERT(rows && row < rows->n_rows && col < rows->n_cols);
    return &rows->cells[row * rows->n_cols + col];
}

bool txo_rows_is_null(const struct txo_rows *rows, size_t row, size_t col)
{
    return cell_at(rows, row, col)->null;
}

const char *txo_rows_str(const struct txo_rows *rows, size_t row, size_t col, size_t *len)
{
    const struct cell *c = cell_at(rows, row, col);
    if (len)
        *len = c->len;
    return c->null ? NULL : rows->data + c->off;
}

int64_t txo_rows_i64(const struct txo_rows *rows, size_t row, size_t col)
{
    const char *s = txo_rows_str(rows, row, col, NULL);
    if (!s)
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s)
        return 0;
    return (int64_t)v;
}

double txo_rows_f64(const struct txo_rows *rows, size_t row, size_t col)
{
    const char *s = txo_rows_str(rows, row, col, NULL);
    if (!s)
        return 0.0;
    return strtod(s, NULL);
}

void txo_rows_free(struct txo_rows *rows)
{
    if (!rows)
        return;
    txo_free(rows->cells);
    txo_free(rows->data);
    txo_free(rows);
}
