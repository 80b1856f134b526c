/*
 * Rows for the retention archive tests (tests/integration/test_archive.c,
 * tests/fault/test_archive_crash.c): outbox events and dead letters with values known in
 * advance, so that what an archive file holds is compared with what the test inserted, and
 * the ids held by every file of a table. Every function fails the test on a setup error.
 */
#ifndef TXO_TESTARCHIVE_H
#define TXO_TESTARCHIVE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "testdb.h"
#include "txo/db.h"

/* The archive tests' fixture: a migrated database (children see it: testdb_export_env) and an
 * empty directory for the archive, removed with everything in it afterwards. */
struct testarchive_fixture {
    struct testdb t;
    char dir[256];
};

/* cmocka setup and teardown of a struct testarchive_fixture. */
int testarchive_setup(void **state);
int testarchive_teardown(void **state);

/* n PUBLISHED outbox rows, keys "<prefix>:1".."<prefix>:n", published long ago (in 2020). */
void testarchive_insert_outbox(struct txo_db *db, unsigned n, const char *prefix);

/* n dead letters replayed long ago (in 2020), error "<prefix>:1".."<prefix>:n". */
void testarchive_insert_dead_letters(struct txo_db *db, unsigned n, const char *prefix);

/*
 * Fails unless line (one archived row, without its '\n') holds exactly what
 * testarchive_insert_<table> wrote.
 */
void testarchive_expect_row(const char *table, const char *line, size_t len);

/*
 * The ids of every archive file of table under dir, each file read and verified, ascending
 * (duplicates kept, so a caller sees a row archived twice). *ids is malloc'd (free()).
 */
size_t testarchive_ids(const char *dir, const char *table, int64_t **ids);

/* The ids of table's rows matching where (SQL), ascending, as testarchive_ids. */
size_t testarchive_db_ids(struct txo_db *db, const char *table, const char *where, int64_t **ids);

/* Fails unless the two id lists are equal. */
void testarchive_expect_ids(const int64_t *got, size_t n_got, const int64_t *want, size_t n_want);

#endif
