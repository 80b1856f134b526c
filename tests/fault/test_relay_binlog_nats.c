/*
 * The relay's binlog source through a real broker: `txo relay --source binlog --publisher
 * nats` against a private nats-server with JetStream, the stream read back with the NATS C
 * client (tests/support/testnats.h), not with txo. The other binlog cases, with the log
 * publisher, are in test_relay_binlog.c.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "testdb.h"
#include "testproc.h"
#include "testrelay.h"
#include "testnats.h"

static void temp_path(char *buf, size_t cap, const char *name)
{
    testproc_temp_path(buf, cap, "txo_relay_binlog_nats", name);
}

/*
 * Through a real broker: 100,000 events (one transaction of 10,000 among them) drained to NATS
 * JetStream, read back with the NATS C client (testnats.h), not with txo: every event once
 * (Nats-Msg-Id = its key), in commit order per aggregate, the envelope's payload the row's.
 */
static void test_nats_stream_holds_each_once(void **state)
{
    struct testdb *t = *state;
    struct testnats nats = {.port = 0};
    testnats_start(&nats);
    char out[256], errf[256];
    temp_path(out, sizeof(out), "nats_out");
    temp_path(errf, sizeof(errf), "nats_err");
    unlink(out);
    unlink(errf);
    testrelay_binlog_drain(out, errf); /* the first position, on an empty outbox */
    /* 100,000 events: one transaction of 10,000, then transactions of 1,000 (multi-row
     * INSERTs from MariaDB's sequence engine), payload {"n": k}, aggregate k % 4. */
    const unsigned n = 100000, aggs = 4;
    for (unsigned from = 0; from < n;) {
        unsigned per_tx = from == 0 ? 10000 : 1000;
        char sql[512];
        snprintf(sql, sizeof(sql),
                 "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "
                 "idempotency_key) SELECT 'order', CONCAT('a', seq MOD %u), 'E', "
                 "JSON_OBJECT('n', seq), CONCAT('k:', seq) FROM seq_%u_to_%u",
                 aggs, from, from + per_tx - 1);
        testdb_exec(t->db, sql);
        from += per_tx;
    }
    const char *args[] = {"--drain", "--publisher", "nats", "--nats-url", nats.url, NULL};
    int status = testproc_wait_pid(testrelay_spawn_binlog(out, errf, args));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        testproc_print_file(errf, "  ");
        fail_msg("binlog relay to NATS: status 0x%x", status);
    }
    (void)testnats_expect_each_once(&nats, "TXO_EVENTS", n, aggs);
    testnats_cleanup(&nats);
    unlink(out);
    unlink(errf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nats_stream_holds_each_once),
    };
    return testdb_run_each(tests, TXO_ARRAY_LEN(tests), "binlog", TESTDB_NEW_EXPORT_ENV, NULL);
}
