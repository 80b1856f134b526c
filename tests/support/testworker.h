/*
 * Test support: an in-process txo_worker on a test's database, with a metrics registry of its
 * own: the per-test fixture of the worker tests (test_order_worker.c, test_worker_order.c).
 * Every helper fails the current cmocka test on error.
 */
#ifndef TXO_TESTWORKER_H
#define TXO_TESTWORKER_H

#include "testdb.h"
#include "txo/metrics.h"
#include "txo/worker.h"

struct testworker {
    struct testdb t;             /* first, so that testdb_fixture_new() makes the fixture */
    struct txo_metrics *metrics; /* the worker's registry, owned */
    struct txo_worker *w;        /* owned */
};

/*
 * Makes f->metrics, sets wo->metrics to it and makes f->w on f's database with wo (not started),
 * as txo_worker_new() does: what wo points to (handlers, their arguments) must outlive f->w.
 */
void testworker_new(struct testworker *f, struct txo_worker_opts *wo);

/*
 * A cmocka teardown for a struct testworker made by testdb_fixture_new(): frees the worker, its
 * registry and the database. Returns 0.
 */
int testworker_free_state(void **state);

#endif
