/*
 * Test support: driving a txo_relay from a cmocka test, failing the test on any error.
 */
#ifndef TXO_TESTRELAY_H
#define TXO_TESTRELAY_H

#include <stddef.h>

#include "txo/relay.h"

/* txo_relay_new(), or the test fails with the error. */
struct txo_relay *testrelay_new(struct txo_db *db, struct txo_publisher *pub,
                                const struct txo_relay_opts *opts);

/* One txo_relay_run_once(); returns what it claimed, or the test fails with the error. */
size_t testrelay_run_once(struct txo_relay *relay);

/* txo_relay_run() until it returns (drain, or stop), or the test fails with the error. */
void testrelay_drain(struct txo_relay *relay);

#endif
