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

/* A test's files: what its first and second relay printed, and their stderr. */
struct files {
    char out1[256], out2[256], errf[256];
};

/* The files of a test, their names starting with prefix. */
static void files_init(struct files *f, const char *prefix)
{
    char name[64];
    snprintf(name, sizeof(name), "%sout1", prefix);
    testproc_temp_path(f->out1, sizeof(f->out1), "txo_relay_crash", name);
    snprintf(name, sizeof(name), "%sout2", prefix);
    testproc_temp_path(f->out2, sizeof(f->out2), "txo_relay_crash", name);
    snprintf(name, sizeof(name), "%serr", prefix);
    testproc_temp_path(f->errf, sizeof(f->errf), "txo_relay_crash", name);
}

static void files_remove(const struct files *f)
{
    unlink(f->out1);
    unlink(f->out2);
    unlink(f->errf);
}

/* Runs a relay with args and TXO_CRASH_POINT=point: it must die of SIGKILL there. */
static void crash_at(const char *point, const char *out, const char *errf, const char *const *args)
{
    setenv("TXO_CRASH_POINT", point, 1);
    int status = testproc_wait_pid(spawn_relay(out, errf, args));
    unsetenv("TXO_CRASH_POINT");
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
        testproc_print_file(errf, "  ");
        fail_msg("relay should have died of SIGKILL at the crash point, status 0x%x", status);
    }
}

/* Runs a relay with args to its end: it must exit 0, or the test fails naming it what. */
static void run_to_end(const char *what, const char *out, const char *errf, const char *const *args)
{
    int status = testproc_wait_pid(spawn_relay(out, errf, args));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        testproc_print_file(errf, "  ");
        fail_msg("%s: status 0x%x", what, status);
    }
}

static void test_crash_after_publish_republishes(void **state)
{
    struct testdb *t = *state;
    const unsigned n = 200;
    testoutbox_insert_seq(t->db, n, "k");
    struct files f;
    files_init(&f, "");

    const char *args[] = {"--drain", "--publisher", "log",           "--batch-size", "50",
                          "--lease", "1",           "--shard-lease", "1000",         NULL};
    crash_at("relay.after_publish", f.out1, f.errf, args);

    unsigned *counts = txo_calloc(n + 1, sizeof(*counts));
    assert_int_equal(read_envelopes(f.out1, counts, n), 50);
    for (unsigned k = 1; k <= 50; k++)
        assert_int_equal(counts[k], 1); /* the first batch, in order of next_attempt_at/id */
    assert_int_equal(
        TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PROCESSING' "
                            "AND idempotency_key IN (SELECT CONCAT('k:', seq) FROM seq_1_to_50)"),
        50);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PENDING'"), 150);

    txo_sleep_ms(1500); /* past the 1 s lease */
    run_to_end("second relay run", f.out2, f.errf, args);
    assert_int_equal(read_envelopes(f.out2, counts, n), n);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PUBLISHED' "
                                         "AND locked_by IS NULL"),
                     n);
    for (unsigned k = 1; k <= n; k++) {
        unsigned want = k <= 50 ? 2 : 1; /* the first batch was published twice */
        if (counts[k] != want)
            fail_msg("key k:%u published %u times, want %u", k, counts[k], want);
    }
    txo_free(counts);
    files_remove(&f);
}

static void test_crash_in_held_transaction_rolls_back(void **state)
{
    struct testdb *t = *state;
    const unsigned n = 200;
    testoutbox_insert_seq(t->db, n, "k");
    struct files f;
    files_init(&f, "held_");

    const char *args[] = {"--drain",      "--publisher", "log",           "--batch-size", "50",
                          "--claim-mode", "transaction", "--shard-lease", "1000",         NULL};
    crash_at("relay.after_publish:1", f.out1, f.errf, args); /* the second batch */
    unsigned *counts = txo_calloc(n + 1, sizeof(*counts));
    assert_int_equal(read_envelopes(f.out1, counts, n), 100);
    /* The leased first batch is marked; the held second one rolled back, untouched. */
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PUBLISHED'"), 50);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PROCESSING'"), 0);
    assert_int_equal(
        TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PENDING' AND "
                            "locked_by IS NULL AND attempts = 0 AND next_attempt_at <= NOW(6)"),
        150);

    run_to_end("second relay run", f.out2, f.errf, args); /* at once: nothing to expire */
    assert_int_equal(read_envelopes(f.out2, counts, n), n - 50);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PUBLISHED' "
                                         "AND locked_by IS NULL"),
                     n);
    for (unsigned k = 1; k <= n; k++) {
        unsigned want = k > 50 && k <= 100 ? 2 : 1; /* the rolled-back batch went out twice */
        if (counts[k] != want)
            fail_msg("key k:%u published %u times, want %u", k, counts[k], want);
    }
    txo_free(counts);
    files_remove(&f);
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
    struct files f;
    files_init(&f, "term_");

    const char *args[] = {"--publisher", "log", "--batch-size", "100", NULL};
    pid_t pid = spawn_relay(f.out1, f.errf, args);
    int64_t deadline = txo_monotonic_ms() + 20000;
    while (file_size(f.out1) == 0 && txo_monotonic_ms() < deadline)
        txo_sleep_ms(1);
    assert_true(file_size(f.out1) > 0);
    assert_int_equal(kill(pid, SIGTERM), 0);
    int status = testproc_wait_pid(pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        testproc_print_file(f.errf, "  ");
        fail_msg("relay after SIGTERM: status 0x%x, want exit 0", status);
    }

    int64_t published = TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PUBLISHED'");
    int64_t pending = TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PENDING'");
    print_message("SIGTERM after %lld of %u events published\n", (long long)published, n);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PROCESSING'"), 0);
    assert_int_equal(published + pending, n);

    unsigned *counts = txo_calloc(n + 1, sizeof(*counts));
    assert_int_equal(read_envelopes(f.out1, counts, n), published);

    const char *drain_args[] = {"--drain", "--publisher", "log", "--batch-size", "500", NULL};
    run_to_end("draining relay", f.out2, f.errf, drain_args);
    assert_int_equal(read_envelopes(f.out2, counts, n), pending);
    for (unsigned k = 1; k <= n; k++) {
        if (counts[k] != 1)
            fail_msg("key k:%u published %u times, want 1", k, counts[k]);
    }
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events WHERE status = 'PUBLISHED'"), n);
    txo_free(counts);
    files_remove(&f);
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
