#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "testrelayfix.h"

struct testrelay_variant testrelay_skip_locked = {TXO_CLAIM_SKIP_LOCKED, TXO_RELAY_CLAIM_LEASE,
                                                  "relay_sl"};
struct testrelay_variant testrelay_update_limit = {TXO_CLAIM_UPDATE_LIMIT, TXO_RELAY_CLAIM_LEASE,
                                                   "relay_ul"};
struct testrelay_variant testrelay_held = {TXO_CLAIM_SKIP_LOCKED, TXO_RELAY_CLAIM_TRANSACTION,
                                           "relay_tx"};

struct txo_relay_opts testrelay_variant_opts(const struct testrelay_variant *v, unsigned batch)
{
    struct txo_relay_opts o;
    txo_relay_opts_init(&o);
    o.claim = v->claim;
    o.mode = v->mode;
    o.batch_size = batch;
    o.ordering = TXO_RELAY_ORDER_AGGREGATE;
    return o;
}

void *testrelay_fixture_new(size_t size, const char *tag, const char *name)
{
    struct testrelay_fixture *f = testdb_fixture_new(size, tag, 0);
    testrelay_file_open(&f->out, name);
    return f;
}

void testrelay_fixture_free(void *fixture)
{
    struct testrelay_fixture *f = fixture;
    if (f == NULL)
        return;
    testrelay_file_close(&f->out);
    testdb_fixture_free(f);
}

int testrelay_fixture_free_state(void **state)
{
    testrelay_fixture_free(*state);
    *state = NULL;
    return 0;
}
