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
 * What a relay test runs with, its cmocka prestate: the claim strategy, the claim mode and the
 * tag of the test database. The tests run once in each variant they look at, among these three:
 * skip-locked claims with leases, update-limit claims with leases, and skip-locked claims held
 * in a transaction (claim mode transaction). Read-only.
 */
struct testrelay_variant {
    enum txo_claim_strategy claim;
    enum txo_relay_claim_mode mode;
    const char *db;
};
extern struct testrelay_variant testrelay_skip_locked, testrelay_update_limit, testrelay_held;

/*
 * txo_relay_opts_init() with v's claim strategy and mode, batch_size and ordering by aggregate
 * (the default, named: these tests hold the relay to it).
 */
struct txo_relay_opts testrelay_variant_opts(const struct testrelay_variant *v, unsigned batch);

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
