#include "core/common.h"

/*
 * The columns of a table as the archive writes them: names in table order and the type each
 * is written as, read from information_schema so that a column a later migration adds is
 * archived too without a change here.
 *
 * Thread-safety: no shared state.
 */

#include "archive/archive_internal.h"
#include "txo/archive.h"

/*
 * Every column of table ? in the current database, in order, with its DATA_TYPE and whether a
 * json_valid() check of the table constrains it (how MariaDB marks a JSON column, which it
 * stores as LONGTEXT; MySQL says "json"). The check is found through TABLE_CONSTRAINTS, which
 * both servers have with the table's name (MySQL's CHECK_CONSTRAINTS lacks it). Index: the
 * data dictionary. Locks: none. Params: table name.
 */
#define ARCHIVE_SQL_COLUMNS                                                                        \
    "SELECT c.COLUMN_NAME, c.DATA_TYPE, "                                                          \
    "(SELECT COUNT(*) FROM information_schema.TABLE_CONSTRAINTS t "                                \
    " JOIN information_schema.CHECK_CONSTRAINTS k ON k.CONSTRAINT_SCHEMA = t.CONSTRAINT_SCHEMA "   \
    " AND k.CONSTRAINT_NAME = t.CONSTRAINT_NAME "                                                  \
    " WHERE t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME "                      \
    " AND t.CONSTRAINT_TYPE = 'CHECK' "                                                            \
    " AND k.CHECK_CLAUSE = CONCAT('json_valid(`', c.COLUMN_NAME, '`)')) "                          \
    "FROM information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = DATABASE() AND c.TABLE_NAME = ? "    \
    "ORDER BY c.ORDINAL_POSITION"

static const char *const type_names[] = {
    [TXO_ARCHIVE_INT] = "int",       [TXO_ARCHIVE_REAL] = "real", [TXO_ARCHIVE_TEXT] = "text",
    [TXO_ARCHIVE_BINARY] = "binary", [TXO_ARCHIVE_JSON] = "json", [TXO_ARCHIVE_TIME] = "time",
};

const char *txo__archive_type_name(enum txo_archive_type type)
{
    TXO_ASSERT((size_t)type < TXO_ARRAY_LEN(type_names));
    return type_names[type];
}

bool txo__archive_type_parse(const char *s, enum txo_archive_type *out)
{
    for (size_t i = 0; i < TXO_ARRAY_LEN(type_names); i++) {
        if (strcmp(s, type_names[i]) == 0) {
            *out = (enum txo_archive_type)i;
            return true;
        }
    }
    return false;
}

static bool one_of(const char *s, const char *const *list)
{
    for (; *list != NULL; list++)
        if (strcmp(s, *list) == 0)
            return true;
    return false;
}

static enum txo_archive_type type_of(const char *data_type, bool json_checked)
{
    static const char *const ints[] = {"tinyint", "smallint", "mediumint", "int",
                                       "bigint",  "bit",      "year",      NULL};
    static const char *const reals[] = {"float", "double", NULL};
    static const char *const binaries[] = {"binary",     "varbinary", "tinyblob", "blob",
                                           "mediumblob", "longblob",  NULL};
    static const char *const times[] = {"datetime", "timestamp", NULL};
    if (json_checked || strcmp(data_type, "json") == 0)
        return TXO_ARCHIVE_JSON;
    if (one_of(data_type, ints))
        return TXO_ARCHIVE_INT;
    if (one_of(data_type, reals))
        return TXO_ARCHIVE_REAL;
    if (one_of(data_type, binaries))
        return TXO_ARCHIVE_BINARY;
    if (one_of(data_type, times))
        return TXO_ARCHIVE_TIME;
    return TXO_ARCHIVE_TEXT;
}

void txo_archive_columns_free(struct txo_archive_column *cols, size_t n)
{
    if (cols == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        txo_free((char *)cols[i].name);
    txo_free(cols);
}

int txo_archive_columns(struct txo_db *db, const char *table, struct txo_archive_column **out,
                        size_t *n, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    struct txo_param p = txo_p_str(table);
    int rc = txo_db_query(db, ARCHIVE_SQL_COLUMNS, &p, 1, &rows, err);
    if (rc < 0)
        return rc;
    size_t count = txo_rows_count(rows);
    struct txo_archive_column *cols = count > 0 ? txo_calloc(count, sizeof(*cols)) : NULL;
    if (count == 0) {
        rc = txo_error_set(err, TXO_ENOTFOUND, "archive: no table %s", table);
        goto out;
    }
    if (cols == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        const char *name = txo_rows_str(rows, i, 0, NULL);
        const char *type = txo_rows_str(rows, i, 1, NULL);
        cols[i].name = txo_strdup(name != NULL ? name : "");
        cols[i].type = type_of(type != NULL ? type : "", txo_rows_i64(rows, i, 2) > 0);
        if (cols[i].name == NULL) {
            txo_archive_columns_free(cols, count);
            cols = NULL;
            rc = txo_error_set(err, TXO_ENOMEM, "out of memory");
            goto out;
        }
    }
    *out = cols;
    *n = count;
out:
    txo_rows_free(rows);
    return rc;
}
