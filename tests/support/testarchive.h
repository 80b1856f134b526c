/*
 * Rows for the retention archive tests (tests/integration/test_archive.c,
 * tests/fault/test_archive_crash.c): outbox events, dead letters and inbox rows with values
 * known in advance, so that what an archive file holds is compared with what the test
 * inserted, and the ids (or the inbox's event ids) held by every file of a table. Every
 * function fails the test on a setup error.
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

/*
 * `txo archive verify dir` must exit 0 and, unless summary is NULL, say summary (such as
 * "6 files, 49 rows verified, 0 bad"); otherwise the test fails with what it said.
 */
void testarchive_expect_verified(const char *dir, const char *summary);

/* n PUBLISHED outbox rows, keys "<prefix>:1".."<prefix>:n", published long ago (in 2020). */
void testarchive_insert_outbox(struct txo_db *db, unsigned n, const char *prefix);

/* n dead letters replayed long ago (in 2020), error "<prefix>:1".."<prefix>:n". */
void testarchive_insert_dead_letters(struct txo_db *db, unsigned n, const char *prefix);

/*
 * n inbox rows processed long ago (in 2020), rows 2k-1 and 2k at the same microsecond, so that
 * their event ids decide their order. Row i's event id (testarchive_inbox_key()) is
 * "<prefix>:<i>", led by the byte 0xfe (not UTF-8, so archived as base64) when i is a multiple
 * of 3, else ended by a NUL byte and an 'x' when i is a multiple of 5.
 */
void testarchive_insert_inbox(struct txo_db *db, unsigned n, const char *prefix);

/* The event id of inbox row i of testarchive_insert_inbox(db, n, prefix) into out (cap bytes);
 * returns its length. */
size_t testarchive_inbox_key(const char *prefix, unsigned i, char *out, size_t cap);

/*
 * Fails unless line (one archived row, without its '\n') holds exactly what
 * testarchive_insert_<table> wrote.
 */
void testarchive_expect_row(const char *table, const char *line, size_t len);

/*
 * Fails unless line (one archived inbox row, without its '\n') holds exactly what
 * testarchive_insert_inbox(db, n, prefix) wrote as one of its rows; returns that row's i.
 */
unsigned testarchive_expect_inbox_row(const char *prefix, const char *line, size_t len);

/*
 * The ids of every archive file of table under dir, each file read and verified, ascending
 * (duplicates kept, so a caller sees a row archived twice). *ids is malloc'd (free()).
 */
size_t testarchive_ids(const char *dir, const char *table, int64_t **ids);

/* The ids of table's rows matching where (SQL), ascending, as testarchive_ids. */
size_t testarchive_db_ids(struct txo_db *db, const char *table, const char *where, int64_t **ids);

/* Fails unless the two id lists are equal. */
void testarchive_expect_ids(const int64_t *got, size_t n_got, const int64_t *want, size_t n_want);

/* Event ids (byte strings that may hold NUL), sorted by their bytes, duplicates kept. */
struct testarchive_keys {
    size_t n;
    struct testarchive_key {
        char *bytes; /* malloc'd */
        size_t len;
    } * keys;
};

/* The event ids of every archive file of inbox_events under dir, each file read and verified. */
void testarchive_file_keys(const char *dir, struct testarchive_keys *out);

/* The event ids of the inbox rows matching where (SQL). */
void testarchive_db_keys(struct txo_db *db, const char *where, struct testarchive_keys *out);

/* Fails unless the two lists are equal (so a key archived twice, or not at all, fails). */
void testarchive_expect_keys(const struct testarchive_keys *got,
                             const struct testarchive_keys *want);

void testarchive_keys_free(struct testarchive_keys *k);

#endif
