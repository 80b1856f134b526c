/*
 * Test support: an in-process worker as a test's fixture (see testworker.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "testworker.h"

void testworker_new(struct testworker *f, struct txo_worker_opts *wo)
{
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_metrics_new(&f->metrics, &err), 0);
    wo->metrics = f->metrics;
    if (txo_worker_new(&f->t.opts, wo, &f->w, &err) != 0)
        fail_msg("txo_worker_new: %s", err.msg);
}

int testworker_free_state(void **state)
{
    struct testworker *f = *state;
    if (f != NULL) {
        txo_worker_free(f->w);
        txo_metrics_free(f->metrics);
    }
    return testdb_free_state(state);
}
