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
#include <jansson.h>

#include "testdb.h"
#include "testproc.h"
#include "testnats.h"

static int setup(void **state)
{
    struct testdb *t = txo_calloc(1, sizeof(*t));
    testdb_setup(t, "binlog");
    testdb_export_env(t);
    *state = t;
    return 0;
}

static int teardown(void **state)
{
    testdb_teardown(*state);
    txo_free(*state);
    return 0;
}

static void temp_path(char *buf, size_t cap, const char *name)
{
    testproc_temp_path(buf, cap, "txo_relay_binlog_nats", name);
}

/* Starts `$TXO_BIN relay --source binlog --publisher log <args...>`, stdout appended to out,
 * stderr to err. */
static pid_t spawn_relay(const char *out, const char *errf, const char *const *args)
{
    static const char *const lead[] = {"relay", "--source",       "binlog", "--publisher",
                                       "log",   "--source-lease", "600",    NULL};
    return testproc_spawn_txo(lead, args, out, errf, true);
}

/* Runs a drain to the end: exit 0 or the test fails with its stderr. */
static void drain(const char *out, const char *errf)
{
    const char *args[] = {"--drain", NULL};
    int status = testproc_wait_pid(spawn_relay(out, errf, args));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        testproc_print_file(errf, "  ");
        fail_msg("binlog drain: status 0x%x", status);
    }
}

/* Inserts events k in [from, to) in transactions of per_tx, aggregate k % aggs. */
static void insert_range(struct testdb *t, unsigned from, unsigned to, unsigned per_tx,
                         unsigned aggs)
{
    for (unsigned k = from; k < to; k += per_tx) {
        unsigned end = k + per_tx < to ? k + per_tx : to;
        testdb_exec(t->db, "START TRANSACTION");
        for (unsigned j = k; j < end; j++) {
            char agg[16], key[24], payload[64];
            snprintf(agg, sizeof(agg), "a%u", j % aggs);
            snprintf(key, sizeof(key), "k:%u", j);
            snprintf(payload, sizeof(payload), "{\"n\": %u, \"s\": \"caf\\u00e9 %u\"}", j, j);
            struct txo_param p[] = {txo_p_str(agg), txo_p_str(key), txo_p_str(payload)};
            struct txo_error err;
            txo_error_init(&err);
            if (txo_db_exec(t->db,
                            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                            "payload, idempotency_key) VALUES ('order', ?, 'E', ?, ?)",
                            (struct txo_param[]){p[0], p[2], p[1]}, 3, NULL, &err) < 0)
                fail_msg("insert: %s", err.msg);
        }
        testdb_exec(t->db, "COMMIT");
    }
}

/*
 * Through a real broker: NATS JetStream, read back with the NATS C client (testnats.h), not
 * with txo: every event once (Nats-Msg-Id = its key), in commit order per aggregate, the
 * envelope's payload equal to the row's.
 */
static void test_nats_stream_holds_each_once(void **state)
{
    struct testdb *t = *state;
    struct testnats nats = {.pid = 0};
    testnats_start(&nats);
    char out[256], errf[256];
    temp_path(out, sizeof(out), "nats_out");
    temp_path(errf, sizeof(errf), "nats_err");
    unlink(out);
    unlink(errf);
    drain(out, errf); /* the first position, on an empty outbox */
    const unsigned n = 120, aggs = 4;
    insert_range(t, 0, n, 7, aggs);
    const char *args[] = {"--drain", "--publisher", "nats", "--nats-url", nats.url, NULL};
    int status = testproc_wait_pid(spawn_relay(out, errf, args));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        testproc_print_file(errf, "  ");
        fail_msg("binlog relay to NATS: status 0x%x", status);
    }
    char **ids = NULL, **data = NULL;
    size_t count = testnats_stream_read(&nats, "TXO_EVENTS", &ids, &data);
    assert_int_equal(count, n);
    unsigned *seen = txo_calloc(n, sizeof(*seen));
    int64_t last_id[4] = {0};
    for (size_t i = 0; i < count; i++) {
        unsigned k = 0;
        assert_non_null(ids[i]);
        if (sscanf(ids[i], "k:%u", &k) != 1 || k >= n)
            fail_msg("unexpected Nats-Msg-Id %s", ids[i]);
        seen[k]++;
        json_error_t jerr;
        json_t *env = json_loads(data[i], 0, &jerr);
        assert_non_null(env);
        int64_t id = json_integer_value(json_object_get(env, "id"));
        assert_true(id > last_id[k % aggs]);
        last_id[k % aggs] = id;
        struct txo_param p[] = {txo_p_i64(id)};
        char *row = testdb_str(t->db, "SELECT payload FROM outbox_events WHERE id = ?", p, 1);
        json_t *want = json_loads(row, 0, &jerr);
        assert_true(json_equal(want, json_object_get(env, "payload")));
        json_decref(want);
        json_decref(env);
        txo_free(row);
    }
    for (unsigned k = 0; k < n; k++)
        assert_int_equal(seen[k], 1);
    txo_free(seen);
    testnats_free_ids(ids, count);
    testnats_free_ids(data, count);
    testnats_cleanup(&nats);
    unlink(out);
    unlink(errf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nats_stream_holds_each_once, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
