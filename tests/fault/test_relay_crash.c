/*
 * A relay crash with real processes: `txo relay` killed with SIGKILL after publishing a batch and
 * before marking it (crash point relay.after_publish). The lease expires, the next relay
 * publishes that batch again: nothing is lost, the first batch is delivered twice
 * (at-least-once). The same kill in claim mode transaction, in the second batch (the first
 * after start is leased): that batch's transaction is rolled back, its rows are PENDING and
 * due at once (no lease to wait for), and the next relay publishes it again. And SIGTERM
 * mid-drain: the batch in flight is finished (published and
 * marked) before the relay exits 0, so the envelopes printed match the PUBLISHED rows exactly.
 *
 * The relay's stdout (the log publisher's stream) goes to a file that the test parses.
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
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "testoutbox.h"
#include "testproc.h"
#include "testrelay.h"
#include "testrun.h"
#include "testdb.h"

static int setup(void **state)
{
    *state = testdb_new("relay_crash", TESTDB_NEW_EXPORT_ENV);
    return 0;
}

static int teardown(void **state)
{
    testdb_free(*state);
    unsetenv("TXO_CRASH_POINT");
    return 0;
}

/* Starts `$TXO_BIN relay <args...>` with stdout to out_path, stderr to err_path. */
static pid_t spawn_relay(const char *out_path, const char *err_path, const char *const *args)
{
    static const char *const lead[] = {"relay", NULL};
    return testproc_spawn_txo(lead, args, out_path, err_path, false);
}

struct key_counts {
    unsigned *counts;
    unsigned n;
};

/* One envelope: counts[k] += 1, k in 1..n, its payload {"n": k} (it survived). */
static void count_envelope(void *ctx, json_t *env, unsigned k)
{
    struct key_counts *c = ctx;
    assert_non_null(json_object_get(env, "payload"));
    if (k < 1 || k > c->n)
        fail_msg("unexpected key k:%u", k);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(env, "payload"), "n")), k);
    c->counts[k]++;
}

/*
 * Parses the envelopes in path; counts[k] += 1 for each key "k:<k>" (k in 1..n). Returns the
 * number of lines. Every line must be a complete envelope.
 */
static size_t read_envelopes(const char *path, unsigned *counts, unsigned n)
{
    struct key_counts c = {.counts = counts, .n = n};
    return testrelay_read_envelopes(path, count_envelope, &c);
}

static void temp_path(char *buf, size_t cap, const char *name)
{
    testproc_temp_path(buf, cap, "txo_relay_crash", name);
}

static void test_crash_after_publish_republishes(void **state)
{
    struct testdb *t = *state;
    const unsigned n = 200;
    testoutbox_insert_seq(t->db, n, "k");
    char out1[256], out2[256], errf[256];
    temp_path(out1, sizeof(out1), "out1");
    temp_path(out2, sizeof(out2), "out2");
    temp_path(errf, sizeof(errf), "err");

    const char *args[] = {"--drain", "--publisher", "log",           "--batch-size", "50",
                          "--lease", "1",           "--shard-lease", "1000",         NULL};
    setenv("TXO_CRASH_POINT", "relay.after_publish", 1);
    int status = testproc_wait_pid(spawn_relay(out1, errf, args));
    unsetenv("TXO_CRASH_POINT");
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
        testproc_print_file(errf, "  ");
        fail_msg("relay should have died of SIGKILL at the crash point, status 0x%x", status);
    }

    unsigned *counts = txo_calloc(n + 1, sizeof(*counts));
    assert_int_equal(read_envelopes(out1, counts, n), 50);
    for (unsigned k = 1; k <= 50; k++)
        assert_int_equal(counts[k], 1); /* the first batch, in order of next_attempt_at/id */
    assert_int_equal(testdb_q(t->db,
                              "SELECT COUNT(*) FROM outbox_events WHERE status = 'PROCESSING' "
                              "AND idempotency_key IN (SELECT CONCAT('k:', seq) FROM seq_1_to_50)"),
                     50);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING'"),
                     150);

    txo_sleep_ms(1500); /* past the 1 s lease */
    status = testproc_wait_pid(spawn_relay(out2, errf, args));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        testproc_print_file(errf, "  ");
        fail_msg("second relay run: status 0x%x", status);
    }
    assert_int_equal(read_envelopes(out2, counts, n), n);
    assert_int_equal(testdb_q(t->db,
                              "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED' "
                              "AND locked_by IS NULL"),
                     n);
    for (unsigned k = 1; k <= n; k++) {
        unsigned want = k <= 50 ? 2 : 1; /* the first batch was published twice */
        if (counts[k] != want)
            fail_msg("key k:%u published %u times, want %u", k, counts[k], want);
    }
    txo_free(counts);
    unlink(out1);
    unlink(out2);
    unlink(errf);
}

static void test_crash_in_held_transaction_rolls_back(void **state)
{
    struct testdb *t = *state;
    const unsigned n = 200;
    testoutbox_insert_seq(t->db, n, "k");
    char out1[256], out2[256], errf[256];
    temp_path(out1, sizeof(out1), "held_out1");
    temp_path(out2, sizeof(out2), "held_out2");
    temp_path(errf, sizeof(errf), "held_err");

    const char *args[] = {"--drain",      "--publisher", "log",           "--batch-size", "50",
                          "--claim-mode", "transaction", "--shard-lease", "1000",         NULL};
    setenv("TXO_CRASH_POINT", "relay.after_publish:1", 1); /* the second batch */
    int status = testproc_wait_pid(spawn_relay(out1, errf, args));
    unsetenv("TXO_CRASH_POINT");
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
        testproc_print_file(errf, "  ");
        fail_msg("relay should have died of SIGKILL at the crash point, status 0x%x", status);
    }
    unsigned *counts = txo_calloc(n + 1, sizeof(*counts));
    assert_int_equal(read_envelopes(out1, counts, n), 100);
    /* The leased first batch is marked; the held second one rolled back, untouched. */
    assert_int_equal(
        testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'"), 50);
    assert_int_equal(
        testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PROCESSING'"), 0);
    assert_int_equal(testdb_q(t->db,
                              "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' AND "
                              "locked_by IS NULL AND attempts = 0 AND next_attempt_at <= NOW(6)"),
                     150);

    status = testproc_wait_pid(spawn_relay(out2, errf, args)); /* at once: nothing to expire */
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        testproc_print_file(errf, "  ");
        fail_msg("second relay run: status 0x%x", status);
    }
    assert_int_equal(read_envelopes(out2, counts, n), n - 50);
    assert_int_equal(testdb_q(t->db,
                              "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED' "
                              "AND locked_by IS NULL"),
                     n);
    for (unsigned k = 1; k <= n; k++) {
        unsigned want = k > 50 && k <= 100 ? 2 : 1; /* the rolled-back batch went out twice */
        if (counts[k] != want)
            fail_msg("key k:%u published %u times, want %u", k, counts[k], want);
    }
    txo_free(counts);
    unlink(out1);
    unlink(out2);
    unlink(errf);
}

static off_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : 0;
}

static void test_sigterm_finishes_batch(void **state)
{
    struct testdb *t = *state;
    const unsigned n = 20000;
    testoutbox_insert_seq(t->db, n, "k");
    char out1[256], out2[256], errf[256];
    temp_path(out1, sizeof(out1), "term_out1");
    temp_path(out2, sizeof(out2), "term_out2");
    temp_path(errf, sizeof(errf), "term_err");

    const char *args[] = {"--publisher", "log", "--batch-size", "100", NULL};
    pid_t pid = spawn_relay(out1, errf, args);
    int64_t deadline = txo_monotonic_ms() + 20000;
    while (file_size(out1) == 0 && txo_monotonic_ms() < deadline)
        txo_sleep_ms(1);
    assert_true(file_size(out1) > 0);
    assert_int_equal(kill(pid, SIGTERM), 0);
    int status = testproc_wait_pid(pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        testproc_print_file(errf, "  ");
        fail_msg("relay after SIGTERM: status 0x%x, want exit 0", status);
    }

    int64_t published =
        testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'");
    int64_t pending =
        testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING'");
    print_message("SIGTERM after %lld of %u events published\n", (long long)published, n);
    assert_int_equal(
        testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PROCESSING'"), 0);
    assert_int_equal(published + pending, n);

    unsigned *counts = txo_calloc(n + 1, sizeof(*counts));
    assert_int_equal(read_envelopes(out1, counts, n), published);

    const char *drain_args[] = {"--drain", "--publisher", "log", "--batch-size", "500", NULL};
    status = testproc_wait_pid(spawn_relay(out2, errf, drain_args));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        testproc_print_file(errf, "  ");
        fail_msg("draining relay: status 0x%x", status);
    }
    assert_int_equal(read_envelopes(out2, counts, n), pending);
    for (unsigned k = 1; k <= n; k++) {
        if (counts[k] != 1)
            fail_msg("key k:%u published %u times, want 1", k, counts[k]);
    }
    assert_int_equal(
        testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'"), n);
    txo_free(counts);
    unlink(out1);
    unlink(out2);
    unlink(errf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crash_after_publish_republishes),
        cmocka_unit_test(test_crash_in_held_transaction_rolls_back),
        cmocka_unit_test(test_sigterm_finishes_batch),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
}
