/*
 * Test support: driving a txo_relay from a cmocka test, failing the test on any error, and the
 * in-test publishers such tests hand it.
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

/*
 * Relay options for a broker-outage test: relay_id, batch_size, a backoff of 30 s to 60 s
 * without jitter (far enough to see; the tests skip it by SQL when they retry) and up to 1000
 * attempts (nothing is dead-lettered while the broker is away). The rest is the default.
 */
void testrelay_outage_opts(struct txo_relay_opts *ro, const char *relay_id, unsigned batch_size);

/*
 * A publisher called name whose publish_batch is publish(self, ...) (see struct
 * txo_publisher_ops). The publisher owns self, which must come from txo_malloc or txo_calloc:
 * txo_publisher_free() frees it with txo_free. The test fails when it cannot be made.
 */
struct txo_publisher *
testrelay_publisher(const char *name,
                    int (*publish)(void *self, const struct txo_outbox_message *msgs, size_t n,
                                   int *results, struct txo_error *errors),
                    void *self);

#endif
