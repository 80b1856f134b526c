/*
 * Test support: driving a txo_relay from a cmocka test, failing the test on any error, and the
 * in-test publishers such tests hand it.
 */
#ifndef TXO_TESTRELAY_H
#define TXO_TESTRELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "txo/relay.h"

/*
 * The file an in-test publisher appends its lines to, as a consumer would see them:
 * /tmp/txo_<name>_<pid>.txt, opened O_APPEND (one write is one line, whoever writes it).
 */
struct testrelay_file {
    char path[64];
    int fd;
};

/* Creates f's file empty and opens it; the test fails when it cannot. */
void testrelay_file_open(struct testrelay_file *f, const char *name);

/* Closes f's file and deletes it. */
void testrelay_file_close(struct testrelay_file *f);

/* txo_relay_new(), or the test fails with the error. */
struct txo_relay *testrelay_new(struct txo_db *db, struct txo_publisher *pub,
                                const struct txo_relay_opts *opts);

/* One txo_relay_run_once(); returns what it claimed, or the test fails with the error. */
size_t testrelay_run_once(struct txo_relay *relay);

/* testrelay_run_once(), and how long it took in *ms. */
size_t testrelay_run_once_ms(struct txo_relay *relay, int64_t *ms);

/*
 * The recovery of a broker-outage test: until no row is PENDING (at most timeout_ms), skips the
 * backoff of every PENDING row (next_attempt_at = now), runs one relay cycle and sleeps
 * pause_ms. A cycle that takes longer than max_cycle_ms (0: any time) fails the test, as does
 * the timeout.
 */
void testrelay_retry_pending(struct txo_db *db, struct txo_relay *relay, int timeout_ms,
                             int pause_ms, int64_t max_cycle_ms);

/* txo_relay_run() until it returns (drain, or stop), or the test fails with the error. */
void testrelay_drain(struct txo_relay *relay);

/*
 * Relay options for a broker-outage test: relay_id, batch_size, a backoff of 30 s to 60 s
 * without jitter (far enough to see; the tests skip it by SQL when they retry) and up to 1000
 * attempts (nothing is dead-lettered while the broker is away). The rest is the default.
 */
void testrelay_outage_opts(struct txo_relay_opts *ro, const char *relay_id, unsigned batch_size);

/*
 * One broker outage as a relay in this process sees it, in three steps around the test's own
 * stop and start of its broker:
 *
 *   testrelay_outage_up()    the broker is up: one cycle publishes one batch.
 *   (the test kills, stops or pauses its broker)
 *   testrelay_outage_down()  cycles until nothing is claimed (a hanging broker: two cycles).
 *                            Every cycle ends within timeout_ms + slack_ms, one against a
 *                            hanging broker not before timeout_ms - 50 (it waited the timeout),
 *                            one against a gone broker within dead_max_ms when set (it failed
 *                            fast). The rows tried: all but the first batch (two batches when
 *                            hanging); nothing more is PUBLISHED; pending_sql counts exactly
 *                            them (PENDING with their last_error and backoff); the relay
 *                            counted them as failed attempts and dead-lettered nothing; with
 *                            a gone broker nothing is due, so the next cycle claims nothing.
 *   (the test restarts or resumes its broker)
 *   testrelay_outage_back()  testrelay_retry_pending() until every row is PUBLISHED with no
 *                            last_error; no dead letter.
 *
 * The outbox holds n_events PENDING rows before testrelay_outage_up(); the relay claims batch
 * rows a cycle and backs off for 20 s or more (testrelay_outage_opts()). Every failure fails
 * the test. The struct is the test's; it owns relay.
 */
struct testrelay_outage {
    struct txo_db *db;
    struct txo_relay *relay;
    unsigned n_events;
    unsigned batch;
    bool hang;               /* the broker hangs (SIGSTOP) rather than going away */
    int timeout_ms;          /* the publisher's publish timeout */
    int slack_ms;            /* what a cycle may take beyond timeout_ms */
    int dead_max_ms;         /* 0, or the most a cycle against a gone broker may take */
    const char *pending_sql; /* SELECT COUNT(*) of the rows left PENDING by the outage */
    size_t tried;            /* set by testrelay_outage_down() */
};

void testrelay_outage_up(struct testrelay_outage *o);
void testrelay_outage_down(struct testrelay_outage *o);

/* pause_ms and max_cycle_ms as for testrelay_retry_pending() (timeout 30 s). */
void testrelay_outage_back(struct testrelay_outage *o, int pause_ms, int64_t max_cycle_ms);

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

/*
 * Starts `$TXO_BIN relay --source binlog --publisher log --source-lease 600 <args...>` (args ends
 * with NULL; a later --publisher wins), stdout appended to out, stderr to errf. Returns its pid.
 */
pid_t testrelay_spawn_binlog(const char *out, const char *errf, const char *const *args);

/* testrelay_spawn_binlog() of `--drain`, waited for: exit 0, or the test fails with its stderr. */
void testrelay_binlog_drain(const char *out, const char *errf);

/*
 * Reads the envelopes the log publisher wrote to path, one a line, and calls each(ctx, env, k)
 * for every one: k is the number of its idempotency key "k:<k>", env is borrowed for the call. A
 * line that is not JSON, or whose key is not of that form, fails the test. Returns the number of
 * lines.
 */
size_t testrelay_read_envelopes(const char *path, void (*each)(void *ctx, json_t *env, unsigned k),
                                void *ctx);

#endif
