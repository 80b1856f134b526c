/*
 * Publishing while the broker is down, then back: MariaDB + a private nats-server + the relay
 * (run_once in this process) publishing through the NATS publisher, N events.
 *
 *   1. The server is up: the first batch is published.
 *   2. The server goes away (SIGTERM; SIGKILL in the second test; in the third it hangs with
 *      SIGSTOP, connections open and nothing acknowledged): every cycle returns within the ack
 *      timeout (no hang; a hanging broker costs exactly the ack timeout), publishes nothing,
 *      and the rows it claimed go back to PENDING with attempts >= 1, last_error set
 *      (TXO_EUNAVAILABLE "not connected", or TXO_ETIMEOUT "no publish ack") and
 *      next_attempt_at in the future (backoff), so the relay does not spin on them.
 *   3. The server comes back on the same port and store directory (or resumes with SIGCONT):
 *      cnats reconnects by itself, the relay (with the backoff skipped by moving
 *      next_attempt_at to now) publishes the rest until every row is PUBLISHED.
 * Afterwards the stream holds exactly N messages with N distinct msg ids, one per row: none
 * lost (the store survived), none duplicated (a retry of a message the server had stored is
 * dropped by the Nats-Msg-Id dedupe).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testoutbox.h"
#include "testrelay.h"
#include "testdb.h"
#include "testnats.h"
#include "txo/nats.h"

#define STREAM         "TXO_EVENTS"
#define N_EVENTS       120
#define BATCH          20
#define ACK_TIMEOUT_MS 1000

struct ctx {
    struct testdb t;
    struct testnats nats;
};

TESTDB_SERVER_FIXTURE(ctx, "nats_outage", 0, nats, testnats_start, testnats_cleanup)

/* Sums "duplicates=N" of the publisher's per-batch debug lines (cnats threads log too). */
struct dup_counter {
    pthread_mutex_t mu;
    unsigned long duplicates;
};

static void count_duplicates(enum txo_log_level level, const char *component, const char *msg,
                             const struct txo_log_field *fields, size_t n_fields, void *arg)
{
    struct dup_counter *dc = arg;
    (void)msg;
    const struct txo_log_field *d = NULL;
    for (size_t i = 0; i < n_fields; i++)
        if (strcmp(fields[i].key, "duplicates") == 0 && fields[i].kind == TXO_LOG_KIND_U64)
            d = &fields[i];
    if (level != TXO_LOG_DEBUG || strcmp(component, "nats") != 0 || d == NULL)
        return;
    pthread_mutex_lock(&dc->mu);
    dc->duplicates += d->v.u64;
    pthread_mutex_unlock(&dc->mu);
}

enum outage_mode {
    OUTAGE_STOP, /* SIGTERM, later restarted on the same port and store */
    OUTAGE_KILL, /* SIGKILL, later restarted on the same port and store */
    OUTAGE_HANG, /* SIGSTOP: connections stay open, nothing is acked; later SIGCONT */
};

static void outage(struct ctx *c, enum outage_mode mode)
{
    struct txo_error err;
    txo_error_init(&err);
    testoutbox_append_orders(c->t.db, N_EVENTS);

    struct txo_nats_opts o;
    txo_nats_opts_init(&o);
    o.url = c->nats.url;
    o.ack_timeout_ms = ACK_TIMEOUT_MS;
    o.connect_timeout_ms = 500;
    o.reconnect_wait_ms = 100;
    struct txo_publisher *pub = NULL;
    if (txo_publisher_nats_new(&o, &pub, &err) < 0)
        fail_msg("txo_publisher_nats_new: %s", err.msg);

    struct txo_relay_opts ro;
    /* The recovery loop below retries often while cnats reconnects. */
    testrelay_outage_opts(&ro, "outage-relay", BATCH);
    struct testrelay_outage out = {
        .db = c->t.db,
        .relay = testrelay_new(c->t.db, pub, &ro),
        .n_events = N_EVENTS,
        .batch = BATCH,
        .hang = mode == OUTAGE_HANG,
        .timeout_ms = ACK_TIMEOUT_MS,
        .slack_ms = 2000,
        .pending_sql =
            mode == OUTAGE_HANG
                ? "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' "
                  "AND attempts = 1 AND locked_by IS NULL AND published_at IS NULL "
                  "AND last_error = 'TXO_ETIMEOUT: nats publisher: no publish ack within 1000 ms' "
                  "AND next_attempt_at > NOW(6) + INTERVAL 20 SECOND"
                : "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' "
                  "AND attempts >= 1 AND locked_by IS NULL AND published_at IS NULL "
                  "AND (last_error LIKE 'TXO_EUNAVAILABLE: nats%' "
                  "OR last_error LIKE 'TXO_ETIMEOUT: nats%') "
                  "AND next_attempt_at > NOW(6) + INTERVAL 20 SECOND",
    };
    testrelay_outage_up(&out);
    if (mode == OUTAGE_KILL)
        testchild_server_kill(&c->nats.srv);
    else if (mode == OUTAGE_STOP)
        testchild_server_stop(&c->nats.srv);
    else
        testchild_server_pause(&c->nats.srv);
    testrelay_outage_down(&out);

    /* 3. Back (on the same port and store): the relay drains the rest. A hung broker stored the
     * timed-out messages once it resumed; their retries get duplicate acks. */
    struct dup_counter dc = {.duplicates = 0};
    pthread_mutex_init(&dc.mu, NULL);
    enum txo_log_level level = txo_log_get_level();
    txo_log_set_level(TXO_LOG_DEBUG);
    txo_log_set_sink(count_duplicates, &dc);
    if (mode == OUTAGE_HANG)
        testchild_server_resume(&c->nats.srv);
    else
        testchild_server_restart(&c->nats.srv);
    /* cnats reconnects within about reconnect_wait_ms: a pause of 50 ms between tries. */
    testrelay_outage_back(&out, 50, ACK_TIMEOUT_MS + 2000);
    txo_log_set_sink(NULL, NULL);
    txo_log_set_level(level);
    pthread_mutex_destroy(&dc.mu);
    if (mode == OUTAGE_HANG) {
        /* The hung server stored the timed-out messages when it resumed: every retry of them
         * was answered as a duplicate, which is what keeps the stream at one copy. */
        assert_int_equal(dc.duplicates, 2 * BATCH);
    }

    /* Exactly one stored message per event. */
    assert_int_equal(testnats_stream_msgs(&c->nats, STREAM), N_EVENTS);
    char **ids = NULL;
    size_t count = testnats_stream_msg_ids(&c->nats, STREAM, &ids);
    assert_int_equal(count, N_EVENTS);
    size_t twice = testoutbox_check_keys(
        c->t.db, ids, count, "SELECT COUNT(*) FROM outbox_events WHERE idempotency_key = ?");
    testnats_free_ids(ids, count);
    assert_int_equal(twice, 0);

    txo_relay_free(out.relay);
    txo_publisher_free(pub);
}

static void test_broker_stopped_then_back(void **state)
{
    outage(*state, OUTAGE_STOP);
}

static void test_broker_killed_then_back(void **state)
{
    outage(*state, OUTAGE_KILL);
}

static void test_broker_hangs_then_resumes(void **state)
{
    outage(*state, OUTAGE_HANG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_broker_stopped_then_back),
        cmocka_unit_test(test_broker_killed_then_back),
        cmocka_unit_test(test_broker_hangs_then_resumes),
    };
    return testnats_run_each(tests, TXO_ARRAY_LEN(tests), setup, teardown);
}
