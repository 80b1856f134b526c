/*
 * Prepared statements: the per-connection statement cache, binding the parameters of a call,
 * and executing a statement that returns no rows (txo_tx_exec).
 *
 * Every statement is a server-side prepared statement with bound parameters. A struct txo_db
 * keeps the statements it prepared in a cache keyed by SQL text (open addressing, FNV-1a hash):
 * a statement is prepared on first use and lives until the connection closes or is lost, when
 * txo__db_stmt_cache_clear() drops them all. Parameters are borrowed for the call; up to
 * STACK_PARAMS of them bind without an allocation.
 *
 * Thread-safety: a struct txo_db, and so its cache, is used by one thread at a time.
 */
#include "core/common.h"

#include <mysqld_error.h>

#include "core/text.h"
#include "db/db_internal.h"

struct txo_param txo_p_str(const char *s)
{
    if (!s)
        return txo_p_null();
    return txo_p_strn(s, strlen(s));
}

/* ---- statement cache ---- */

void txo__db_stmt_cache_clear(struct txo_db *db)
{
    for (size_t i = 0; i < db->n_slots; i++) {
        struct stmt_entry *e = &db->stmts[i];
        if (!e->sql)
            continue;
        if (e->stmt)
            mysql_stmt_close(e->stmt);
        txo_free(e->sql);
    }
    txo_free(db->stmts);
    db->stmts = NULL;
    db->n_slots = 0;
    db->n_stmts = 0;
}

static struct stmt_entry *stmt_slot(struct stmt_entry *slots, size_t n_slots, const char *sql,
                                    size_t len, uint64_t h)
{
    size_t mask = n_slots - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        struct stmt_entry *e = &slots[i];
        if (!e->sql)
            return e;
        if (e->hash == h && e->sql_len == len && memcmp(e->sql, sql, len) == 0)
            return e;
    }
}

static int stmt_cache_grow(struct txo_db *db)
{
    size_t n = db->n_slots ? db->n_slots * 2 : 64;
    struct stmt_entry *slots = txo_calloc(n, sizeof(*slots));
    if (!slots)
        return TXO_ENOMEM;
    for (size_t i = 0; i < db->n_slots; i++) {
        struct stmt_entry *e = &db->stmts[i];
        if (e->sql)
            *stmt_slot(slots, n, e->sql, e->sql_len, e->hash) = *e;
    }
    txo_free(db->stmts);
    db->stmts = slots;
    db->n_slots = n;
    return 0;
}

/* Returns the prepared statement for sql, preparing it on first use on this connection. */
static int stmt_get(struct txo_db *db, const char *sql, MYSQL_STMT **out, struct txo_error *err)
{
    size_t len = strlen(sql);
    uint64_t h = txo__fnv1a(TXO__FNV1A_BASIS, sql, len);
    if ((db->n_stmts + 1) * 10 > db->n_slots * 7 && stmt_cache_grow(db) < 0)
        return txo_error_set(err, TXO_ENOMEM, "statement cache: out of memory");
    struct stmt_entry *e = stmt_slot(db->stmts, db->n_slots, sql, len, h);
    if (e->sql) {
        *out = e->stmt;
        return 0;
    }
    MYSQL_STMT *stmt = mysql_stmt_init(db->conn);
    if (!stmt)
        return txo_error_set(err, TXO_ENOMEM, "mysql_stmt_init: out of memory");
    if (mysql_stmt_prepare(stmt, sql, (unsigned long)len) != 0) {
        int rc = txo__db_stmt_error(db, stmt, sql, err);
        mysql_stmt_close(stmt);
        return rc;
    }
    char *copy = txo_strndup(sql, len);
    if (!copy) {
        mysql_stmt_close(stmt);
        return txo_error_set(err, TXO_ENOMEM, "statement cache: out of memory");
    }
    e->sql = copy;
    e->sql_len = len;
    e->hash = h;
    e->stmt = stmt;
    db->n_stmts++;
    *out = stmt;
    return 0;
}

/*
 * Prepares sql again in its cache slot, for a statement the server no longer runs as prepared.
 * *out gets the new handle.
 */
static int stmt_reprepare(struct txo_db *db, const char *sql, MYSQL_STMT **out,
                          struct txo_error *err)
{
    size_t len = strlen(sql);
    struct stmt_entry *e =
        stmt_slot(db->stmts, db->n_slots, sql, len, txo__fnv1a(TXO__FNV1A_BASIS, sql, len));
    TXO_ASSERT(e->sql != NULL);
    mysql_stmt_close(e->stmt);
    e->stmt = mysql_stmt_init(db->conn);
    if (e->stmt == NULL)
        return txo_error_set(err, TXO_ENOMEM, "mysql_stmt_init: out of memory");
    if (mysql_stmt_prepare(e->stmt, sql, (unsigned long)len) != 0)
        return txo__db_stmt_error(db, e->stmt, sql, err);
    *out = e->stmt;
    return 0;
}

/* ---- statements ---- */

static int bind_params(MYSQL_STMT *stmt, const char *sql, const struct txo_param *params, size_t n,
                       MYSQL_BIND *binds, unsigned long *lengths, struct txo_error *err)
{
    unsigned long expected = mysql_stmt_param_count(stmt);
    if (expected != n)
        return txo_error_set(err, TXO_EINVAL, "statement \"%.80s\" takes %lu parameters, got %zu",
                             sql, expected, n);
    for (size_t i = 0; i < n; i++) {
        MYSQL_BIND *b = &binds[i];
        memset(b, 0, sizeof(*b));
        switch (params[i].type) {
        case TXO_PARAM_NULL:
            b->buffer_type = MYSQL_TYPE_NULL;
            break;
        case TXO_PARAM_I64:
            b->buffer_type = MYSQL_TYPE_LONGLONG;
            b->buffer = (void *)&params[i].i64;
            break;
        case TXO_PARAM_DOUBLE:
            b->buffer_type = MYSQL_TYPE_DOUBLE;
            b->buffer = (void *)&params[i].f64;
            break;
        case TXO_PARAM_STR:
            b->buffer_type = MYSQL_TYPE_STRING;
            b->buffer = (void *)params[i].str;
            lengths[i] = (unsigned long)params[i].len;
            b->buffer_length = lengths[i];
            b->length = &lengths[i];
            break;
        }
    }
    return 0;
}

#define STACK_PARAMS 16

int txo__db_execute(struct txo_db *db, const char *sql, const struct txo_param *params,
                    size_t n_params, MYSQL_STMT **out, struct txo_error *err)
{
    if (db->broken || !db->conn)
        return txo_error_set(err, TXO_ECONNLOST, "connection lost earlier in this transaction");
    MYSQL_STMT *stmt = NULL;
    int rc = stmt_get(db, sql, &stmt, err);
    if (rc < 0)
        return rc;
    MYSQL_BIND stack_binds[STACK_PARAMS];
    unsigned long stack_lengths[STACK_PARAMS];
    MYSQL_BIND *binds = stack_binds;
    unsigned long *lengths = stack_lengths;
    if (n_params > STACK_PARAMS) {
        binds = txo_calloc(n_params, sizeof(*binds));
        lengths = txo_calloc(n_params, sizeof(*lengths));
        if (!binds || !lengths) {
            rc = txo_error_set(err, TXO_ENOMEM, "binding %zu parameters: out of memory", n_params);
            goto out;
        }
    }
    for (int again = 0;; again++) {
        rc = bind_params(stmt, sql, params, n_params, binds, lengths, err);
        if (rc < 0)
            goto out;
        if (n_params > 0 && mysql_stmt_bind_param(stmt, binds) != 0) {
            rc = txo__db_stmt_error(db, stmt, sql, err);
            goto out;
        }
        if (mysql_stmt_execute(stmt) == 0)
            break;
        /*
         * 1146 from a statement prepared earlier, when the table it names is there: a table
         * its triggers wrote to at prepare time was renamed or dropped since (the last step of
         * an online table swap, txo/partition.h), and the server does not prepare it again by
         * itself. Nothing ran: prepare it again and run it once more.
         */
        if (again == 0 && mysql_stmt_errno(stmt) == ER_NO_SUCH_TABLE) {
            TXO_LOG(TXO_LOG_INFO, "db", "statement prepared again after a table change",
                    TXO_KV_STR("sql", sql));
            rc = stmt_reprepare(db, sql, &stmt, err);
            if (rc < 0)
                goto out;
            continue;
        }
        rc = txo__db_stmt_error(db, stmt, sql, err);
        goto out;
    }
    *out = stmt;
out:
    if (binds != stack_binds) {
        txo_free(binds);
        txo_free(lengths);
    }
    return rc;
}

int txo__db_exec(struct txo_db *db, const char *sql, const struct txo_param *params,
                 size_t n_params, struct txo_exec_result *res, struct txo_error *err)
{
    MYSQL_STMT *stmt = NULL;
    int rc = txo__db_execute(db, sql, params, n_params, &stmt, err);
    if (rc < 0)
        return rc;
    if (res) {
        my_ulonglong affected = mysql_stmt_affected_rows(stmt);
        res->affected_rows = affected == (my_ulonglong)-1 ? 0 : (uint64_t)affected;
        res->insert_id = (uint64_t)mysql_stmt_insert_id(stmt);
    }
    /* A statement that unexpectedly returned rows must not leave them pending. */
    mysql_stmt_free_result(stmt);
    return 0;
}

int txo_tx_exec(struct txo_tx *tx, const char *sql, const struct txo_param *params, size_t n_params,
                struct txo_exec_result *res, struct txo_error *err)
{
    return txo__db_exec(tx->db, sql, params, n_params, res, err);
}

int txo_tx_exec_rows(struct txo_tx *tx, const char *before, size_t n_rows, const char *row,
                     const char *after, const struct txo_param *params, size_t per_row,
                     struct txo_exec_result *res, struct txo_error *err)
{
    if (n_rows == 0)
        return txo_error_set(err, TXO_EINVAL, "a multi-row statement of 0 rows");
    char *sql = txo_sql_values_rows_then(before, n_rows, row, after);
    if (sql == NULL)
        return txo_error_set(err, TXO_ENOMEM, "a statement of %zu rows: out of memory", n_rows);
    int rc = txo_tx_exec(tx, sql, params, n_rows * per_row, res, err);
    txo_free(sql);
    return rc;
}
