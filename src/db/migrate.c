/*
 * Schema migrations (`txo migrate`).
 *
 * Migrations come in sets (include/txo/db.h): the library's own, from sql/migrations/, and
 * each application's, each compiled into the code that owns its tables (see
 * cmake/embed_migrations.cmake), so a binary always carries the schema it was built for.
 * Applied migrations are recorded in txo_schema_migrations with the SHA-256 of their text; a
 * recorded file whose text changed since is refused (migrations are never edited after they
 * are merged: add a new file instead).
 *
 * MySQL DDL commits implicitly, so a migration cannot be atomic. The files therefore use
 * CREATE ... IF NOT EXISTS and similar, and a migration that failed half-way can simply be
 * run again. A server-side named lock (GET_LOCK) keeps two `txo migrate` runs from
 * interleaving.
 *
 * Thread-safety: uses only the db it is given.
 */
#include "core/common.h"

#include <openssl/evp.h>

#include "db/db_internal.h"
#include "db/migrate_data.h"

#define SQL_CREATE_MIGRATIONS_TABLE                                                                \
    "CREATE TABLE IF NOT EXISTS txo_schema_migrations ("                                           \
    " version VARCHAR(255) PRIMARY KEY,"                                                           \
    " checksum CHAR(64) NOT NULL,"                                                                 \
    " applied_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"                                \
    ") ENGINE=InnoDB"
/* A session-level named lock; waits up to 60 s for another migrate to finish. */
#define SQL_MIGRATE_LOCK   "SELECT GET_LOCK('txo_migrate', 60)"
#define SQL_MIGRATE_UNLOCK "SELECT RELEASE_LOCK('txo_migrate')"
/* Primary key lookup. */
#define SQL_MIGRATION_CHECKSUM "SELECT checksum FROM txo_schema_migrations WHERE version = ?"
#define SQL_MIGRATION_RECORD   "INSERT INTO txo_schema_migrations (version, checksum) VALUES (?, ?)"

static int sha256_hex(const char *text, char out[65], struct txo_error *err)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    if (EVP_Digest(text, strlen(text), md, &md_len, EVP_sha256(), NULL) != 1 || md_len != 32)
        return txo_error_set(err, TXO_EMIGRATION, "SHA-256 of a migration failed");
    for (unsigned i = 0; i < md_len; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    return 0;
}

/*
 * Runs the statements of one migration file. Statements end with ';' at the end of a line;
 * lines starting with "--" are comments. The files are ours, so this simple rule suffices.
 */
static int run_script(struct txo_db *db, const char *name, const char *text, struct txo_error *err)
{
    size_t cap = strlen(text) + 1;
    char *stmt = txo_malloc(cap);
    if (!stmt)
        return txo_error_set(err, TXO_ENOMEM, "migration %s: out of memory", name);
    size_t len = 0;
    int rc = 0;
    unsigned n = 0;
    const char *line = text;
    while (*line && rc == 0) {
        const char *eol = strchr(line, '\n');
        size_t line_len = eol ? (size_t)(eol - line) : strlen(line);
        const char *p = line;
        while (p < line + line_len && (*p == ' ' || *p == '\t'))
            p++;
        bool comment = (size_t)(line + line_len - p) >= 2 && p[0] == '-' && p[1] == '-';
        if (!comment && p < line + line_len) {
            memcpy(stmt + len, line, line_len);
            len += line_len;
            stmt[len++] = '\n';
            size_t end = len - 1;
            while (end > 0 &&
                   (stmt[end - 1] == ' ' || stmt[end - 1] == '\t' || stmt[end - 1] == '\r'))
                end--;
            if (end > 0 && stmt[end - 1] == ';') {
                stmt[end - 1] = '\0';
                n++;
                rc = txo_db_exec_raw(db, stmt, err);
                if (rc < 0)
                    txo_error_wrap(err, "migration %s, statement %u", name, n);
                len = 0;
            }
        }
        line = eol ? eol + 1 : line + line_len;
    }
    if (rc == 0 && len > 0) {
        stmt[len] = '\0';
        rc = txo_db_exec_raw(db, stmt, err);
        if (rc < 0)
            txo_error_wrap(err, "migration %s, last statement", name);
    }
    txo_free(stmt);
    return rc;
}

static int apply_one(struct txo_db *db, const struct txo_migration *m, bool *applied,
                     struct txo_error *err)
{
    char sum[65];
    int rc = sha256_hex(m->sql, sum, err);
    if (rc < 0)
        return rc;
    struct txo_rows *rows = NULL;
    struct txo_param key = txo_p_str(m->name);
    rc = txo_db_query(db, SQL_MIGRATION_CHECKSUM, &key, 1, &rows, err);
    if (rc < 0)
        return rc;
    if (txo_rows_count(rows) > 0) {
        const char *stored = txo_rows_str(rows, 0, 0, NULL);
        bool same = stored && strcmp(stored, sum) == 0;
        txo_rows_free(rows);
        if (!same)
            return txo_error_set(err, TXO_EMIGRATION,
                                 "migration %s was edited after it was applied (checksum "
                                 "differs); add a new migration instead",
                                 m->name);
        *applied = false;
        return 0;
    }
    txo_rows_free(rows);
    TXO_LOG(TXO_LOG_INFO, "migrate", "applying migration=%s", m->name);
    rc = run_script(db, m->name, m->sql, err);
    if (rc < 0)
        return rc;
    struct txo_param rec[2] = {txo_p_str(m->name), txo_p_str(sum)};
    rc = txo_db_exec(db, SQL_MIGRATION_RECORD, rec, 2, NULL, err);
    if (rc < 0) {
        txo_error_wrap(err, "recording migration %s", m->name);
        return rc;
    }
    *applied = true;
    return 0;
}

const struct txo_migration_set *txo_core_migrations(void)
{
    return &txo__core_migrations;
}

const struct txo_migration_set *txo_outbox_migrations(void)
{
    return &txo__outbox_migrations;
}

#define SQL_TABLE_EXISTS                                                                           \
    "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND "          \
    "table_name = ?"

int txo_schema_has_table(struct txo_db *db, const char *table, bool *exists, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    struct txo_param p = txo_p_str(table);
    int rc = txo_db_query(db, SQL_TABLE_EXISTS, &p, 1, &rows, err);
    if (rc < 0) {
        txo_error_wrap(err, "looking for table %s", table);
        return rc;
    }
    *exists = txo_rows_count(rows) == 1 && txo_rows_i64(rows, 0, 0) > 0;
    txo_rows_free(rows);
    return 0;
}

int txo_migrate(struct txo_db *db, unsigned *applied, unsigned *total, struct txo_error *err)
{
    return txo_migrate_set(db, &txo__core_migrations, applied, total, err);
}

int txo_migrate_set(struct txo_db *db, const struct txo_migration_set *set, unsigned *applied,
                    unsigned *total, struct txo_error *err)
{
    if (db == NULL || set == NULL || (set->count > 0 && set->migrations == NULL))
        return txo_error_set(err, TXO_EINVAL, "migrate: missing database or migration set");
    unsigned n_applied = 0;
    int rc = txo_db_exec_raw(db, SQL_CREATE_MIGRATIONS_TABLE, err);
    if (rc < 0) {
        txo_error_wrap(err, "creating txo_schema_migrations");
        return rc;
    }
    struct txo_rows *rows = NULL;
    rc = txo_db_query(db, SQL_MIGRATE_LOCK, NULL, 0, &rows, err);
    if (rc < 0) {
        txo_error_wrap(err, "taking the migration lock");
        return rc;
    }
    bool locked = txo_rows_count(rows) == 1 && txo_rows_i64(rows, 0, 0) == 1;
    txo_rows_free(rows);
    if (!locked)
        return txo_error_set(err, TXO_ETIMEOUT,
                             "another `txo migrate` held the migration lock for 60 s");
    for (size_t i = 0; i < set->count && rc == 0; i++) {
        bool done = false;
        rc = apply_one(db, &set->migrations[i], &done, err);
        if (done)
            n_applied++;
    }
    struct txo_error unlock_err;
    txo_error_init(&unlock_err);
    rows = NULL;
    if (txo_db_query(db, SQL_MIGRATE_UNLOCK, NULL, 0, &rows, &unlock_err) < 0)
        TXO_LOG(TXO_LOG_WARN, "migrate", "releasing the migration lock failed: %s", unlock_err.msg);
    txo_rows_free(rows);
    if (rc < 0)
        return rc;
    if (applied)
        *applied = n_applied;
    if (total)
        *total = (unsigned)set->count;
    return 0;
}
