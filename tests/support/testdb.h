/*
 * Test support: a private database per test on the real MariaDB server named by the MYSQL_*
 * environment (the Makefile starts a private server and sets them). Each test gets a fresh,
 * migrated database txo_test_<tag>_<pid>_<n>, so tests can run in parallel; it is dropped on
 * teardown unless TXO_TEST_KEEP_DB=1 is set (for debugging a failure).
 *
 * Every helper fails the current cmocka test (fail_msg) on error, so tests stay short.
 */
#ifndef TXO_TESTDB_H
#define TXO_TESTDB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/txo.h"

struct CMUnitTest; /* <cmocka.h> */

struct testdb {
    char name[64];           /* the database name */
    struct txo_db_opts opts; /* MYSQL_* from the environment, database = name */
    struct txo_db *db;       /* a connection to it, owned */
    bool env_exported;       /* testdb_export_env() ran: teardown puts MYSQL_DATABASE back */
    char *env_database;      /* MYSQL_DATABASE before that (NULL: it was unset); owned */
};

/* Reads MYSQL_HOST/PORT/USER/PASSWORD/DATABASE into opts (defaults of txo_db_opts_init). */
void testdb_opts_from_env(struct txo_db_opts *opts);

/* Creates a fresh database with no tables and connects to it. */
void testdb_setup_empty(struct testdb *t, const char *tag);
/* Creates and migrates a fresh database and connects to it. */
void testdb_setup(struct testdb *t, const char *tag);

/* Drops the database (unless TXO_TEST_KEEP_DB=1) and closes t->db. */
void testdb_teardown(struct testdb *t);

/* How testdb_new() sets the database up. */
enum testdb_new_flags {
    TESTDB_NEW_EMPTY = 1 << 0,       /* no tables (testdb_setup_empty), else migrated */
    TESTDB_NEW_EXPORT_ENV = 1 << 1,  /* testdb_export_env(): child processes use it */
    TESTDB_NEW_OUTBOX_ONLY = 1 << 2, /* only the outbox's migrations, as a relay's own database */
};

/*
 * A heap struct testdb set up as flags say: the usual cmocka fixture state of a test that needs
 * nothing but its database. The caller owns it and frees it with testdb_free().
 */
struct testdb *testdb_new(const char *tag, unsigned flags);

/* testdb_teardown(t), then frees t. NULL is a no-op. */
void testdb_free(struct testdb *t);

/*
 * The same for a test's own fixture struct, whose first member is its struct testdb: a zeroed
 * block of size bytes, the database in it set up as flags say. Free it with testdb_fixture_free,
 * which tears that database down first. NULL is a no-op there.
 */
void *testdb_fixture_new(size_t size, const char *tag, unsigned flags);
void testdb_fixture_free(void *fixture);

/*
 * Defines the cmocka fixtures setup and teardown of a test program whose fixture, struct type,
 * holds its struct testdb first and one server in member. setup makes the fixture
 * (testdb_fixture_new(sizeof(struct type), tag, flags)) and runs start(&member); teardown puts
 * the default log sink and level back (a test that failed may have left a capturing sink), runs
 * cleanup(&member) and frees the fixture. Both return 0.
 */
#define TESTDB_SERVER_FIXTURE(type, tag, flags, member, start, cleanup)                            \
    static int setup(void **state)                                                                 \
    {                                                                                              \
        struct type *fixture = testdb_fixture_new(sizeof(*fixture), (tag), (flags));               \
        start(&fixture->member);                                                                   \
        *state = fixture;                                                                          \
        return 0;                                                                                  \
    }                                                                                              \
    static int teardown(void **state)                                                              \
    {                                                                                              \
        struct type *fixture = *state;                                                             \
        txo_log_set_sink(NULL, NULL);                                                              \
        txo_log_set_level(TXO_LOG_INFO);                                                           \
        cleanup(&fixture->member);                                                                 \
        testdb_fixture_free(fixture);                                                              \
        return 0;                                                                                  \
    }

/*
 * A cmocka teardown for a state made by testdb_new(), or by testdb_fixture_new() when the fixture
 * holds nothing else to release: frees it (testdb_fixture_free) and returns 0.
 */
int testdb_free_state(void **state);

/*
 * The main() of a test program whose tests each want a fresh database and nothing else of their
 * own: runs tests[] as testrun_each() does, with a state made by testdb_new(tag, flags) for each
 * entry that names no fixture of its own, init(that state) run on it first when init is not NULL
 * (a catalogue, a table the tests share), and testdb_free_state after the test. Returns the
 * number of tests that failed.
 */
int testdb_run_each(const struct CMUnitTest *tests, size_t n, const char *tag, unsigned flags,
                    void (*init)(struct testdb *t));

/* Another connection to the same database (for concurrency tests). Close with txo_db_close. */
struct txo_db *testdb_connect(const struct testdb *t);

/* Runs SQL that takes no values (setup only). */
void testdb_exec(struct txo_db *db, const char *sql);

/* Runs a query with bound parameters and returns the first column of the first row as an
 * integer (0 when there is no row or it is NULL). */
int64_t testdb_i64(struct txo_db *db, const char *sql, const struct txo_param *params, size_t n);

/* testdb_i64() of a query that takes no values: a count or one number the test reads. */
int64_t testdb_q(struct txo_db *db, const char *sql);

/*
 * The number of rows a test expects somewhere, rows being what follows FROM as a string literal:
 * TESTDB_COUNT(db, "outbox_events WHERE status = 'PUBLISHED'"). The literals join at compile
 * time, so the statement stays one fixed text.
 */
#define TESTDB_COUNT(db, rows) testdb_q((db), "SELECT COUNT(*) FROM " rows)

/*
 * Runs `EXPLAIN ...` sql with its bound params and fails the test unless its first row uses the
 * index want and does not sort (no filesort). Prints the key, row estimate and extra it saw.
 */
void testdb_assert_explain(struct txo_db *db, const char *sql, const struct txo_param *params,
                           size_t n, const char *want);

/* Same, returning a string to free with txo_free() (NULL for no row or NULL). */
char *testdb_str(struct txo_db *db, const char *sql, const struct txo_param *params, size_t n);

/* Exports MYSQL_* (with MYSQL_DATABASE = t->name) into this process's environment, so child
 * processes (the txo binary in fault tests) use the test database. testdb_teardown() restores
 * the MYSQL_DATABASE of before, so the next test's setup connects where the first one did. */
void testdb_export_env(struct testdb *t);

#endif
