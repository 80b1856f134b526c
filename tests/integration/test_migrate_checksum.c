/*
 * The checksum `txo migrate` records for a migration covers its statements, not its comments
 * (src/db/migrate.c, src/db/sql_normalize.c), against a real MariaDB.
 *
 * Asserted: a fresh database records the statement checksum; a database that recorded the
 * whole-text checksum of an earlier text (the seven migrations whose comments were reworded,
 * 0001_outbox.sql among them) or of the current text migrates without error, and its recorded
 * checksum becomes the statement checksum; a recorded checksum that matches none of these
 * (the statements changed) is refused with TXO_EMIGRATION and left as it was; and with a small
 * migration set of the test's own, a migration whose comments or whitespace were edited after
 * it was applied passes, one whose statements (a string literal that looks like a comment
 * included) changed is refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "db/sql_normalize.h"
#include "orders.h"
#include "testdb.h"

#define SQL_RECORDED     "SELECT checksum FROM txo_schema_migrations WHERE version = ?"
#define SQL_SET_RECORDED "UPDATE txo_schema_migrations SET checksum = ? WHERE version = ?"

static void sha256_hex(const char *text, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    assert_int_equal(EVP_Digest(text, strlen(text), md, &md_len, EVP_sha256(), NULL), 1);
    assert_int_equal(md_len, 32);
    for (unsigned i = 0; i < md_len; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* The checksum a migration should be recorded with: SHA-256 of its normalized text. */
static void statement_sum(const char *sql, char out[65])
{
    char *norm = txo__sql_normalize(sql);
    assert_non_null(norm);
    sha256_hex(norm, out);
    txo_free(norm);
}

/* The text of the library's or the order service's migration of that name. */
static const char *migration_sql(const char *name)
{
    const struct txo_migration_set *sets[] = {txo_core_migrations(), orders_migrations()};
    for (size_t s = 0; s < 2; s++)
        for (size_t i = 0; i < sets[s]->count; i++)
            if (strcmp(sets[s]->migrations[i].name, name) == 0)
                return sets[s]->migrations[i].sql;
    fail_msg("no migration %s", name);
    return NULL;
}

static void set_recorded(struct txo_db *db, const char *name, const char *checksum)
{
    struct txo_error err;
    txo_error_init(&err);
    struct txo_param p[2] = {txo_p_str(checksum), txo_p_str(name)};
    struct txo_exec_result res = {0};
    assert_int_equal(txo_db_exec(db, SQL_SET_RECORDED, p, 2, &res, &err), 0);
    assert_int_equal(res.affected_rows, 1);
}

static void assert_recorded(struct txo_db *db, const char *name, const char *want)
{
    struct txo_param p = txo_p_str(name);
    char *got = testdb_str(db, SQL_RECORDED, &p, 1);
    assert_non_null(got);
    if (strcmp(got, want) != 0)
        fail_msg("%s: recorded %s, want %s", name, got, want);
    txo_free(got);
}

static void migrate_all(struct txo_db *db, unsigned want_applied)
{
    struct txo_error err;
    txo_error_init(&err);
    unsigned applied = 99, total = 0;
    if (orders_migrate(db, &applied, &total, &err) != 0)
        fail_msg("orders_migrate: %s", err.msg);
    assert_int_equal(applied, want_applied);
}

/* A fresh database records the statement checksum of every migration. */
static void test_fresh_database_records_statement_checksums(void **state)
{
    (void)state;
    struct testdb t;
    testdb_setup(&t, "migsum");
    const struct txo_migration_set *sets[] = {txo_core_migrations(), orders_migrations()};
    for (size_t s = 0; s < 2; s++)
        for (size_t i = 0; i < sets[s]->count; i++) {
            char sum[65];
            statement_sum(sets[s]->migrations[i].sql, sum);
            assert_recorded(t.db, sets[s]->migrations[i].name, sum);
        }
    testdb_teardown(&t);
}

/* The whole-text checksums of the files before their comments were reworded (893d3ec), as a
 * database migrated then recorded them: written here independently of src/db/migrate.c. */
static const struct {
    const char *name, *checksum;
} earlier[] = {
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

/* The old whole-text checksum of 0001_outbox.sql alone: accepted, then replaced. */
static void test_earlier_text_checksum_of_outbox_is_accepted(void **state)
{
    (void)state;
    struct testdb t;
    testdb_setup(&t, "migsum");
    char sum[65], whole[65];
    statement_sum(migration_sql("0001_outbox.sql"), sum);
    sha256_hex(migration_sql("0001_outbox.sql"), whole);
    /* The comments were reworded: the earlier text is neither of today's checksums. */
    assert_string_not_equal(earlier[0].checksum, whole);
    assert_string_not_equal(earlier[0].checksum, sum);
    set_recorded(t.db, "0001_outbox.sql", earlier[0].checksum);
    migrate_all(t.db, 0);
    assert_recorded(t.db, "0001_outbox.sql", sum);
    /* And again: the table converged, nothing more to do. */
    migrate_all(t.db, 0);
    assert_recorded(t.db, "0001_outbox.sql", sum);
    testdb_teardown(&t);
}

/* A database that applied all seven files before their comments were reworded. */
static void test_earlier_text_checksums_of_all_reworded_files(void **state)
{
    (void)state;
    struct testdb t;
    testdb_setup(&t, "migsum");
    for (size_t i = 0; i < sizeof earlier / sizeof *earlier; i++)
        set_recorded(t.db, earlier[i].name, earlier[i].checksum);
    migrate_all(t.db, 0);
    for (size_t i = 0; i < sizeof earlier / sizeof *earlier; i++) {
        char sum[65];
        statement_sum(migration_sql(earlier[i].name), sum);
        assert_recorded(t.db, earlier[i].name, sum);
    }
    testdb_teardown(&t);
}

/* A migration applied before the change whose comments were never edited recorded the
 * whole-text checksum of today's file: accepted, then replaced. */
static void test_whole_text_checksum_of_current_text_is_accepted(void **state)
{
    (void)state;
    struct testdb t;
    testdb_setup(&t, "migsum");
    const char *name = "0012_outbox_contract.sql";
    char sum[65], whole[65];
    statement_sum(migration_sql(name), sum);
    sha256_hex(migration_sql(name), whole);
    set_recorded(t.db, name, whole);
    migrate_all(t.db, 0);
    assert_recorded(t.db, name, sum);
    testdb_teardown(&t);
}

/* A recorded checksum that is none of the accepted ones: the statements changed. */
static void test_changed_statements_are_refused(void **state)
{
    (void)state;
    struct testdb t;
    testdb_setup(&t, "migsum");
    static const char bogus[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    set_recorded(t.db, "0001_outbox.sql", bogus);
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_migrate(t.db, NULL, NULL, &err), TXO_EMIGRATION);
    assert_non_null(strstr(err.msg, "0001_outbox.sql"));
    assert_non_null(strstr(err.msg, "edited after it was applied"));
    /* Refused, not overwritten. */
    assert_recorded(t.db, "0001_outbox.sql", bogus);
    /* An earlier text's checksum is accepted only for its own file. */
    set_recorded(t.db, "0001_outbox.sql", earlier[1].checksum);
    txo_error_init(&err);
    assert_int_equal(txo_migrate(t.db, NULL, NULL, &err), TXO_EMIGRATION);
    assert_recorded(t.db, "0001_outbox.sql", earlier[1].checksum);
    testdb_teardown(&t);
}

/* The test's own migration set, applied once, then applied again edited. */
#define CKT_NAME "9901_checksum_test.sql"
static const char ckt_v1[] = "-- A table of the checksum test.\n"
                             "CREATE TABLE IF NOT EXISTS ckt (\n"
                             "    a INT NOT NULL,\n"
                             "    s VARCHAR(20) NOT NULL DEFAULT '-- a'\n"
                             ") ENGINE=InnoDB;\n"
                             "INSERT INTO ckt (a) VALUES (1);\n";

static int apply_ckt(struct txo_db *db, const char *sql, unsigned *applied, struct txo_error *err)
{
    const struct txo_migration m = {CKT_NAME, sql};
    const struct txo_migration_set set = {"checksum-test", &m, 1};
    return txo_migrate_set(db, &set, applied, NULL, err);
}

static void test_own_set_comment_edits_pass_statement_edits_do_not(void **state)
{
    (void)state;
    struct testdb t;
    testdb_setup_empty(&t, "migsum");
    struct txo_error err;
    txo_error_init(&err);
    unsigned applied = 0;
    assert_int_equal(apply_ckt(t.db, ckt_v1, &applied, &err), 0);
    assert_int_equal(applied, 1);
    assert_int_equal(testdb_i64(t.db, "SELECT COUNT(*) FROM ckt", NULL, 0), 1);
    char sum[65];
    statement_sum(ckt_v1, sum);
    assert_recorded(t.db, CKT_NAME, sum);

    /* Comments reworded, added (all three kinds) and removed, whitespace moved. */
    static const char comments_edited[] = "-- The checksum test's table: reworded.\n"
                                          "--\n"
                                          "# One row, a = 1.\n"
                                          "/* A block comment\n   over two lines. */\n"
                                          "CREATE TABLE IF NOT EXISTS ckt (\n"
                                          "  a INT NOT NULL,   -- the number\n"
                                          "  s VARCHAR(20) NOT NULL DEFAULT '-- a'\n"
                                          ")   ENGINE=InnoDB;\n"
                                          "\n"
                                          "INSERT INTO ckt (a) VALUES (1);";
    applied = 99;
    if (apply_ckt(t.db, comments_edited, &applied, &err) != 0)
        fail_msg("comment edit refused: %s", err.msg);
    assert_int_equal(applied, 0);
    assert_recorded(t.db, CKT_NAME, sum);
    assert_int_equal(testdb_i64(t.db, "SELECT COUNT(*) FROM ckt", NULL, 0), 1); /* not rerun */

    /* Statements changed: refused. */
    static const char *const statements_edited[] = {
        /* a value */
        "-- A table of the checksum test.\n"
        "CREATE TABLE IF NOT EXISTS ckt (\n"
        "    a INT NOT NULL,\n"
        "    s VARCHAR(20) NOT NULL DEFAULT '-- a'\n"
        ") ENGINE=InnoDB;\n"
        "INSERT INTO ckt (a) VALUES (2);\n",
        /* text inside a string that looks like a comment */
        "-- A table of the checksum test.\n"
        "CREATE TABLE IF NOT EXISTS ckt (\n"
        "    a INT NOT NULL,\n"
        "    s VARCHAR(20) NOT NULL DEFAULT '-- b'\n"
        ") ENGINE=InnoDB;\n"
        "INSERT INTO ckt (a) VALUES (1);\n",
        /* an executable comment is a statement */
        "-- A table of the checksum test.\n"
        "CREATE TABLE IF NOT EXISTS ckt (\n"
        "    a INT NOT NULL,\n"
        "    s VARCHAR(20) NOT NULL DEFAULT '-- a'\n"
        ") ENGINE=InnoDB /*!100000 ROW_FORMAT=DYNAMIC */;\n"
        "INSERT INTO ckt (a) VALUES (1);\n",
    };
    for (size_t i = 0; i < sizeof statements_edited / sizeof *statements_edited; i++) {
        txo_error_init(&err);
        assert_int_equal(apply_ckt(t.db, statements_edited[i], NULL, &err), TXO_EMIGRATION);
        assert_non_null(strstr(err.msg, CKT_NAME));
        assert_recorded(t.db, CKT_NAME, sum);
    }
    testdb_teardown(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fresh_database_records_statement_checksums),
        cmocka_unit_test(test_earlier_text_checksum_of_outbox_is_accepted),
        cmocka_unit_test(test_earlier_text_checksums_of_all_reworded_files),
        cmocka_unit_test(test_whole_text_checksum_of_current_text_is_accepted),
        cmocka_unit_test(test_changed_statements_are_refused),
        cmocka_unit_test(test_own_set_comment_edits_pass_statement_edits_do_not),
    };
    txo_log_set_level(TXO_LOG_ERROR);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
