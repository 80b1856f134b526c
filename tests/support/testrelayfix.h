/*
 * Test support: the per-test fixture of a relay test whose in-test publisher appends to a file:
 * the test's database and that file, set up and released together.
 */
#ifndef TXO_TESTRELAYFIX_H
#define TXO_TESTRELAYFIX_H

#include <stddef.h>

#include "testdb.h"
#include "testrelay.h"

struct testrelay_fixture {
    struct testdb t;           /* first, as testdb_fixture_new() wants */
    struct testrelay_file out; /* what the test's publisher appends */
};

/*
 * A test's fixture struct of size bytes whose first member is a struct testrelay_fixture:
 * testdb_fixture_new(size, tag, 0), then its out opened as name (testrelay_file_open). The
 * caller owns it and frees it with testrelay_fixture_free().
 */
void *testrelay_fixture_new(size_t size, const char *tag, const char *name);

/* Closes and deletes the file, then testdb_fixture_free(). NULL is a no-op. */
void testrelay_fixture_free(void *fixture);

/* A cmocka teardown for a state made by testrelay_fixture_new(): frees it and returns 0. */
int testrelay_fixture_free_state(void **state);

#endif
