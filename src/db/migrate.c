/*
 * Schema migrations (`txo migrate`).
 *
 * Migrations come in sets (include/txo/db.h): the library's own, from sql/migrations/, and
 * each application's, each compiled into the code that owns its tables (see
 * cmake/embed_migrations.cmake), so a binary always carries the schema it was built for.
 * Applied migrations are recorded in txo_schema_migrations with a SHA-256 of their statements:
 * of the text in the normal form of db/sql_normalize.h (no comments, whitespace collapsed).
 * The comments of an applied migration may be edited; a recorded file whose statements changed
 * since is refused (add a new file instead). Databases migrated before the checksum left the
 * comments out recorded the SHA-256 of the whole text; verify_recorded() accepts those and
 * records the statement checksum in their place.
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
#include <strings.h>

#include "db/db_internal.h"
#include "db/migrate_data.h"
#include "db/sql_normalize.h"

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
/* Primary key; the old checksum in the WHERE so that only the row just read is replaced. */
#define SQL_MIGRATION_RECHECKSUM                                                                   \
    "UPDATE txo_schema_migrations SET checksum = ? WHERE version = ? AND checksum = ?"

/*
 * Checksums of earlier texts of migrations whose comments were reworded: the SHA-256 of the
 * whole file before the rewording (`git show 893d3ec:<path> | sha256sum`), which a database
 * migrated before the checksum left the comments out has recorded. Only comments changed, so
 * such a database has exactly the statements of the current file. Add a row here when the
 * comments of a migration that shipped with the whole-text checksum are edited.
 */
struct earlier_text_checksum {
    const char *name;     /* the migration's file name */
    const char *checksum; /* SHA-256 of its whole earlier text, hex */
};
static const struct earlier_text_checksum reworded_comment_earlier_checksums[] = {
    /* Citations of the design document reworded (sql/migrations, app/order-service). */
    {"0001_outbox.sql", "8cee2d314ba29f33503b26d397d1ec9178e29c145ee642841700c95b934fa517"},
    {"0002_idempotency_inbox.sql",
     "b12e7da6066bc51235c0fc90edcfe051863a47575e0f7e7f2618e2d2fd0ce0bc"},
    {"0003_saga.sql", "31bbae608f90fd6156f1a6564a19edab9beecff87ed6992decc965c1f0ca3891"},
    {"0004_orders.sql", "5f5011bd7cd1fb682fbe11de140b1e26fffee0b203f59622fa1b3d1668537b37"},
    {"0005_command_queue.sql", "2f9472f16e52fdb4cce95f76bd41f838ce6acde4c256dd8b6a3b70ae03eba27b"},
    {"0006_worker_queues.sql", "11167d3dbf5ac966ae00ce8b3dc05650a17ba79b4c44348dde1a22f40ca71fc5"},
    {"0007_idempotency_response.sql",
     "cd77e08203eae6d5183523badec5f3eef81d3154eeebd6d92ef11b2ebf954fa2"},
};

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

/* The checksum recorded for a migration: SHA-256 of its statements (sql normalized). */
static int statement_checksum(const char *name, const char *sql, char out[65],
                              struct txo_error *err)
{
    char *norm = txo__sql_normalize(sql);
    if (!norm)
        return txo_error_set(err, TXO_ENOMEM, "migration %s: out of memory", name);
    int rc = sha256_hex(norm, out, err);
    txo_free(norm);
    return rc;
}

static bool is_reworded_earlier_text(const char *name, const char *checksum)
{
    size_t n =
        sizeof reworded_comment_earlier_checksums / sizeof *reworded_comment_earlier_checksums;
    for (size_t i = 0; i < n; i++)
        if (strcmp(reworded_comment_earlier_checksums[i].name, name) == 0 &&
            strcmp(reworded_comment_earlier_checksums[i].checksum, checksum) == 0)
            return true;
    return false;
}

/*
 * Checks the checksum recorded for an applied migration against its current text. Accepted:
 * the statement checksum sum of the current text; or a checksum of the whole text, as recorded
 * before the checksum left the comments out: of the current text (its comments never edited)
 * or of an earlier text whose comments were reworded (reworded_comment_earlier_checksums). An
 * accepted whole-text checksum is replaced with sum, so the table converges on statement
 * checksums. Anything else means the statements changed: TXO_EMIGRATION.
 */
static int verify_recorded(struct txo_db *db, const struct txo_migration *m, const char *stored,
                           const char sum[65], struct txo_error *err)
{
    if (strcmp(stored, sum) == 0)
        return 0;
    char whole[65];
    int rc = sha256_hex(m->sql, whole, err);
    if (rc < 0)
        return rc;
    if (strcmp(stored, whole) != 0 && !is_reworded_earlier_text(m->name, stored))
        return txo_error_set(err, TXO_EMIGRATION,
                             "migration %s was edited after it was applied (the checksum of its "
                             "statements differs); add a new migration instead",
                             m->name);
    struct txo_param p[3] = {txo_p_str(sum), txo_p_str(m->name), txo_p_str(stored)};
    rc = txo_db_exec(db, SQL_MIGRATION_RECHECKSUM, p, 3, NULL, err);
    if (rc < 0) {
        txo_error_wrap(err, "recording the statement checksum of migration %s", m->name);
        return rc;
    }
    TXO_LOG(TXO_LOG_INFO, "migrate", "recorded the statement checksum",
            TXO_KV_STR("migration", m->name));
    return 0;
}

/*
 * Runs the statements of one migration file, read the way the mariadb client reads a script:
 * a statement ends with the delimiter (';' unless changed) at the end of a line; a line
 * "DELIMITER x" changes it, so a trigger's body can hold ';' (the same file runs through
 * `mariadb < file`); lines starting with "--" are comments.
 */
static int run_script(struct txo_db *db, const char *name, const char *text, struct txo_error *err)
{
    size_t cap = strlen(text) + 1;
    char *stmt = txo_malloc(cap);
    if (!stmt)
        return txo_error_set(err, TXO_ENOMEM, "migration %s: out of memory", name);
    char delim[16] = ";";
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
        size_t rest = (size_t)(line + line_len - p);
        bool comment = rest >= 2 && p[0] == '-' && p[1] == '-';
        if (!comment && len == 0 && rest > 10 && strncasecmp(p, "DELIMITER ", 10) == 0) {
            const char *d = p + 10;
            size_t d_len = (size_t)(line + line_len - d);
            while (d_len > 0 &&
                   (d[d_len - 1] == ' ' || d[d_len - 1] == '\t' || d[d_len - 1] == '\r'))
                d_len--;
            if (d_len == 0 || d_len >= sizeof(delim)) {
                rc = txo_error_set(err, TXO_EMIGRATION, "migration %s: bad DELIMITER line", name);
                break;
            }
            memcpy(delim, d, d_len);
            delim[d_len] = '\0';
        } else if (!comment && p < line + line_len) {
            memcpy(stmt + len, line, line_len);
            len += line_len;
            stmt[len++] = '\n';
            size_t end = len - 1;
            while (end > 0 &&
                   (stmt[end - 1] == ' ' || stmt[end - 1] == '\t' || stmt[end - 1] == '\r'))
                end--;
            size_t d_len = strlen(delim);
            if (end >= d_len && memcmp(stmt + end - d_len, delim, d_len) == 0) {
                stmt[end - d_len] = '\0';
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
    int rc = statement_checksum(m->name, m->sql, sum, err);
    if (rc < 0)
        return rc;
    struct txo_rows *rows = NULL;
    struct txo_param key = txo_p_str(m->name);
    rc = txo_db_query(db, SQL_MIGRATION_CHECKSUM, &key, 1, &rows, err);
    if (rc < 0)
        return rc;
    if (txo_rows_count(rows) > 0) {
        const char *stored = txo_rows_str(rows, 0, 0, NULL);
        rc = verify_recorded(db, m, stored ? stored : "", sum, err);
        txo_rows_free(rows);
        *applied = false;
        return rc;
    }
    txo_rows_free(rows);
    TXO_LOG(TXO_LOG_INFO, "migrate", "applying", TXO_KV_STR("migration", m->name));
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

int txo_schema_require_table(struct txo_db *db, const char *table, const char *who,
                             const char *migration, struct txo_error *err)
{
    bool exists = false;
    int rc = txo_schema_has_table(db, table, &exists, err);
    if (rc == 0 && !exists)
        rc = txo_error_set(err, TXO_ECONFIG, "%s: table %s missing: run txo migrate (migration %s)",
                           who, table, migration);
    return rc;
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
        TXO_LOG(TXO_LOG_WARN, "migrate", "releasing the migration lock failed",
                TXO_KV_STR("error", unlock_err.msg));
    txo_rows_free(rows);
    if (rc < 0)
        return rc;
    if (applied)
        *applied = n_applied;
    if (total)
        *total = (unsigned)set->count;
    return 0;
}
