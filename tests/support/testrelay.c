#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testrelay.h"

struct txo_relay *testrelay_new(struct txo_db *db, struct txo_publisher *pub,
                                const struct txo_relay_opts *opts)
{
    struct txo_relay *r = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_relay_new(db, pub, opts, &r, &err) < 0)
        fail_msg("txo_relay_new: %s", err.msg);
    return r;
}

size_t testrelay_run_once(struct txo_relay *relay)
{
    size_t claimed = 0;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_relay_run_once(relay, &claimed, &err) < 0)
        fail_msg("txo_relay_run_once: %s", err.msg);
    return claimed;
}

void testrelay_drain(struct txo_relay *relay)
{
    struct txo_error err;
    txo_error_init(&err);
    if (txo_relay_run(relay, &err) < 0)
        fail_msg("txo_relay_run: %s", err.msg);
}
