/*
 * `txo replay` with real processes: the replayed messages read from the log publisher's stdout
 * or, through a real broker, from NATS JetStream with the NATS C client (testnats.h), not txo.
 *
 *   - the messages are byte for byte the ones the relay published, for the events the filters
 *     choose (aggregate type and id, event type, id and time ranges), only published ones
 *     (PUBLISHED, or left PENDING by a binlog source below its high-water id), in id order;
 *     --new-keys changes the keys and nothing else;
 *   - throttled and SIGKILLed halfway, then run again: it resumes from its checkpoint, every
 *     event published, first copies in per-aggregate order, at most a batch again, and the
 *     rate held;
 *   - from the retention archive (txo clean --archive): the same messages, filtered, in
 *     order; a damaged file stops it, named;
 *   - a finished replay run again publishes nothing; SIGTERM while the publisher fails stops
 *     it (exit 0); another selection under the same name is
 *     refused (exit 2) until --restart; bad options exit 2 before any write;
 *   - 100,000 events to NATS, killed halfway and resumed: the stream holds each once, in
 *     per-aggregate order.
 */
#include <inttypes.h>
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
#include "testnats.h"
#include "testproc.h"

static int64_t q(struct testdb *t, const char *sql)
{
    return testdb_i64(t->db, sql, NULL, 0);
}

static void io_paths(char out[256], char errf[256], const char *tag)
{
    testproc_io_paths(out, errf, "txo_replay", tag);
}

/* Runs `$TXO_BIN <lead...> <args...>` to its end, stdout to out (truncated), stderr to errf;
 * returns its exit code (the test fails when it did not exit). */
static int run_txo(const char *const *lead, const char *const *args, const char *out,
                   const char *errf)
{
    unlink(out);
    int status = testproc_wait_pid(testproc_spawn_txo(lead, args, out, errf, true));
    if (!WIFEXITED(status)) {
        testproc_print_file(errf, "  ");
        fail_msg("txo did not exit: status 0x%x", status);
    }
    return WEXITSTATUS(status);
}

static int replay(const char *const *args, const char *out, const char *errf)
{
    static const char *const lead[] = {"replay", "--publisher", "log", NULL};
    return run_txo(lead, args, out, errf);
}

/* The lines of path, NULL-terminated; free with free_lines. */
static char **read_lines(const char *path, size_t *n)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char **lines = NULL;
    size_t cap = 0;
    *n = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) > 0) {
        if (*n + 1 >= cap) {
            cap = cap ? 2 * cap : 64;
            lines = txo_realloc(lines, cap * sizeof(*lines));
        }
        if (line[len - 1] == '\n')
            line[len - 1] = '\0';
        lines[(*n)++] = txo_strdup(line);
    }
    free(line);
    fclose(f);
    if (lines == NULL)
        lines = txo_calloc(1, sizeof(*lines));
    lines[*n] = NULL;
    return lines;
}

static void free_lines(char **lines, size_t n)
{
    for (size_t i = 0; i < n; i++)
        txo_free(lines[i]);
    txo_free(lines);
}

/* The number of lines of path. */
static size_t count_lines(const char *path)
{
    size_t n = 0;
    char **lines = read_lines(path, &n);
    free_lines(lines, n);
    return n;
}

static int64_t line_id(const char *line)
{
    json_error_t jerr;
    json_t *env = json_loads(line, 0, &jerr);
    if (env == NULL)
        fail_msg("not JSON (%s): %s", jerr.text, line);
    int64_t id = json_integer_value(json_object_get(env, "id"));
    json_decref(env);
    return id;
}

/* The relay's line for event id among lines, or NULL. */
static const char *line_of(char **lines, size_t n, int64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (line_id(lines[i]) == id)
            return lines[i];
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/*
 * Replays with args and checks the lines: exactly the events of want_ids (ascending), each
 * byte-equal to the relay's line for it, each aggregate's in id order (the aggregates are
 * interleaved as the relay's waves send them).
 */
static void assert_replayed(const char *const *args, char **relayed, size_t n_relayed,
                            const int64_t *want_ids, size_t n_want, const char *out,
                            const char *errf)
{
    if (replay(args, out, errf) != 0) {
        testproc_print_file(errf, "  ");
        fail_msg("txo replay failed");
    }
    size_t n = 0;
    char **lines = read_lines(out, &n);
    if (n != n_want)
        fail_msg("--name %s: %zu events replayed, want %zu", args[1], n, n_want);
    int64_t *ids = txo_calloc(n + 1, sizeof(*ids));
    for (size_t i = 0; i < n; i++) {
        ids[i] = line_id(lines[i]);
        const char *orig = line_of(relayed, n_relayed, ids[i]);
        if (orig == NULL)
            fail_msg("--name %s: id %" PRId64 " was never relayed", args[1], ids[i]);
        assert_string_equal(lines[i], orig);
        json_error_t jerr;
        json_t *a = json_loads(lines[i], 0, &jerr);
        for (size_t j = 0; j < i; j++) {
            json_t *b = json_loads(lines[j], 0, &jerr);
            bool same =
                json_equal(json_object_get(a, "aggregate_type"),
                           json_object_get(b, "aggregate_type")) &&
                json_equal(json_object_get(a, "aggregate_id"), json_object_get(b, "aggregate_id"));
            if (same && ids[j] > ids[i])
                fail_msg("--name %s: id %" PRId64 " after id %" PRId64 " of its aggregate", args[1],
                         ids[i], ids[j]);
            json_decref(b);
        }
        json_decref(a);
    }
    qsort(ids, n, sizeof(*ids), cmp_i64);
    for (size_t i = 0; i < n; i++)
        if (ids[i] != want_ids[i])
            fail_msg("--name %s: replayed id %" PRId64 ", want %" PRId64, args[1], ids[i],
                     want_ids[i]);
    txo_free(ids);
    free_lines(lines, n);
}

static void test_messages_are_the_relayed_ones(void **state)
{
    struct testdb *t = *state;
    char out[256], errf[256], rel[256];
    io_paths(out, errf, "same");
    testproc_temp_path(rel, sizeof(rel), "txo_replay", "relayed");
    /* ids 1..8: orders 1 and 2, a cart; two event types; ids 1..4 created on 2026-01-01. */
    testdb_exec(t->db,
                "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "
                "idempotency_key, created_at) VALUES "
                "('order', '1', 'Created', '{\"n\": 1, \"s\": \"caf\\\\u00e9\"}', 'k1', "
                "'2026-01-01 10:00:00'), "
                "('order', '2', 'Created', '{\"n\": 2}', 'k2', '2026-01-01 11:00:00'), "
                "('cart', '1', 'Created', '{\"n\": 3}', 'k3', '2026-01-01 12:00:00'), "
                "('order', '1', 'Paid', '{\"n\": 4}', 'k4', '2026-01-01 13:00:00'), "
                "('order', '2', 'Paid', '{\"n\": 5}', 'k5', '2026-01-02 10:00:00'), "
                "('order', '1', 'Shipped', '{\"n\": 6}', 'k6', '2026-01-02 11:00:00'), "
                "('cart', '1', 'Paid', '{\"n\": 7}', 'k7', '2026-01-02 12:00:00'), "
                "('order', '3', 'Created', '{\"n\": 8}', 'k8', '2026-01-02 13:00:00')");
    static const char *const relay[] = {"relay", "--publisher", "log", "--drain", NULL};
    const char *none[] = {NULL};
    assert_int_equal(run_txo(relay, none, rel, errf), 0);
    size_t n_relayed = 0;
    char **relayed = read_lines(rel, &n_relayed);
    assert_int_equal(n_relayed, 8);
    /* Not published: a FAILED event, and one appended after the relay ran. */
    testdb_exec(t->db, "UPDATE outbox_events SET status = 'FAILED' WHERE id = 8");
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key) VALUES ('order', '1', 'Late', '{}', 'k9')");

    const int64_t all[] = {1, 2, 3, 4, 5, 6, 7};
    const char *a_all[] = {"--name", "all", NULL};
    assert_replayed(a_all, relayed, n_relayed, all, 7, out, errf);
    const int64_t orders[] = {1, 2, 4, 5, 6};
    const char *a_type[] = {"--name", "type", "--aggregate-type", "order", NULL};
    assert_replayed(a_type, relayed, n_relayed, orders, 5, out, errf);
    const int64_t order1[] = {1, 4, 6};
    const char *a_id[] = {"--name", "id", "--aggregate-type", "order", "--aggregate-id", "1", NULL};
    assert_replayed(a_id, relayed, n_relayed, order1, 3, out, errf);
    const int64_t paid[] = {4, 5, 7};
    const char *a_ev[] = {"--name", "ev", "--event-type", "Paid", NULL};
    assert_replayed(a_ev, relayed, n_relayed, paid, 3, out, errf);
    const int64_t mid[] = {3, 4, 5};
    const char *a_range[] = {"--name", "range", "--from-id", "3", "--to-id", "5", NULL};
    assert_replayed(a_range, relayed, n_relayed, mid, 3, out, errf);
    const int64_t day2[] = {5, 6};
    const char *a_time[] = {
        "--name", "time", "--since", "2026-01-02", "--until", "2026-01-02 12:00:00", NULL};
    assert_replayed(a_time, relayed, n_relayed, day2, 2, out, errf);

    /* A binlog source's published rows stay PENDING below its high-water id: replayed. */
    testdb_exec(t->db, "UPDATE outbox_events SET status = 'PENDING' WHERE id IN (1, 2)");
    testdb_exec(t->db, "INSERT INTO outbox_binlog_sources (name, binlog_file, binlog_offset, "
                       "high_water_id) VALUES ('b', 'binlog.000001', 4, 2)");
    const int64_t first[] = {1, 2, 3};
    const char *a_hw[] = {"--name", "hw", "--to-id", "3", NULL};
    assert_replayed(a_hw, relayed, n_relayed, first, 3, out, errf);

    /* --new-keys: the same messages with the keys <key>:replay:<name>. */
    const char *a_keys[] = {"--name", "keys", "--to-id", "1", "--new-keys", NULL};
    assert_int_equal(replay(a_keys, out, errf), 0);
    size_t n = 0;
    char **lines = read_lines(out, &n);
    assert_int_equal(n, 1);
    json_error_t jerr;
    json_t *got = json_loads(lines[0], 0, &jerr), *want = json_loads(relayed[0], 0, &jerr);
    assert_string_equal(json_string_value(json_object_get(got, "idempotency_key")),
                        "k1:replay:keys");
    json_object_set_new(want, "idempotency_key", json_string("k1:replay:keys"));
    assert_true(json_equal(got, want));
    json_decref(got);
    json_decref(want);
    free_lines(lines, n);
    /* Nothing was written to the outbox. */
    assert_int_equal(q(t, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'"), 5);
    free_lines(relayed, n_relayed);
    unlink(rel);
    unlink(out);
    unlink(errf);
}

/* The events in out, by id, as JSON; each aggregate's in id order. */
static json_t *events_by_id(const char *out)
{
    size_t n = 0;
    char **lines = read_lines(out, &n);
    json_t *by_id = json_object(), *last = json_object();
    for (size_t i = 0; i < n; i++) {
        json_error_t jerr;
        json_t *env = json_loads(lines[i], JSON_ALLOW_NUL, &jerr); /* event 3's "a\u0000b" */
        assert_non_null(env);
        json_int_t id = json_integer_value(json_object_get(env, "id"));
        char key[32], agg[128];
        snprintf(key, sizeof(key), "%" JSON_INTEGER_FORMAT, id);
        snprintf(agg, sizeof(agg), "%s/%s",
                 json_string_value(json_object_get(env, "aggregate_type")),
                 json_string_value(json_object_get(env, "aggregate_id")));
        if (json_integer_value(json_object_get(last, agg)) >= id)
            fail_msg("id %s after a later id of %s", key, agg);
        json_object_set_new(last, agg, json_integer(id));
        json_object_set_new(by_id, key, env);
    }
    json_decref(last);
    free_lines(lines, n);
    return by_id;
}

/*
 * The events retention removed, from its archive: `txo clean --archive DIR` in batches of 7,
 * then `txo replay --archive DIR`: the relay's messages (equal as JSON: an archived payload is
 * the JSON value, its spacing may differ; one holds a NUL character), the filters applied,
 * each aggregate in order; the inbox's files, archived by the same pass, are not replayed, and
 * its directory given as the archive is refused; a damaged file stops the replay naming it.
 */
static void test_from_the_archive(void **state)
{
    struct testdb *t = *state;
    char out[256], errf[256], rel[256], dir[256];
    io_paths(out, errf, "arch");
    testproc_temp_path(rel, sizeof(rel), "txo_replay", "arch_relayed");
    testproc_temp_path(dir, sizeof(dir), "txo_replay", "archive");
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    assert_int_equal(system(cmd), 0);
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key, created_at) SELECT IF(seq MOD 5 = 0, 'cart', "
                       "'order'), CONCAT('a', seq MOD 3), IF(seq MOD 2 = 0, 'Even', 'Odd'), "
                       "JSON_OBJECT('n', seq, 's', IF(seq = 3, CONCAT('a', CHAR(0), 'b'), "
                       "'caf\\u00e9')), CONCAT('k:', seq), "
                       "'2026-01-01' + INTERVAL seq HOUR FROM seq_1_to_40");
    testdb_exec(t->db, "INSERT INTO inbox_events (event_id, event_type, payload, processed_at) "
                       "SELECT CONCAT('in:', seq), 'Odd', '{}', '2026-01-01' FROM seq_1_to_9");
    static const char *const relay[] = {"relay", "--publisher", "log", "--drain", NULL};
    const char *none[] = {NULL};
    assert_int_equal(run_txo(relay, none, rel, errf), 0);
    json_t *relayed = events_by_id(rel);
    assert_int_equal(json_object_size(relayed), 40);
    testdb_exec(t->db, "UPDATE outbox_events SET published_time = '2026-01-01', "
                       "next_attempt_at = '2026-01-01'");
    static const char *const clean[] = {"clean", NULL};
    const char *clean_args[] = {
        "--outbox-retention", "60", "--clean-batch", "7", "--archive", dir, NULL};
    if (run_txo(clean, clean_args, out, errf) != 0) {
        testproc_print_file(errf, "  ");
        fail_msg("txo clean --archive failed");
    }
    assert_int_equal(q(t, "SELECT COUNT(*) FROM outbox_events"), 0);
    assert_int_equal(q(t, "SELECT COUNT(*) FROM inbox_events"), 0); /* archived: 2 files */

    /* Everything, then a filtered part (orders, odd, created from 10:00 on day one). */
    const char *a_all[] = {"--name", "arch", "--archive", dir, "--batch-size", "4", NULL};
    assert_int_equal(replay(a_all, out, errf), 0);
    json_t *got = events_by_id(out);
    assert_int_equal(json_object_size(got), 40);
    const char *key;
    json_t *env;
    json_object_foreach(got, key, env)
    {
        if (!json_equal(env, json_object_get(relayed, key)))
            fail_msg("event %s from the archive differs from the relay's", key);
    }
    json_decref(got);
    const char *a_some[] = {"--name", "arch-some",    "--archive", dir,       "--aggregate-type",
                            "order",  "--event-type", "Odd",       "--since", "2026-01-01 10:00:00",
                            NULL};
    assert_int_equal(replay(a_some, out, errf), 0);
    got = events_by_id(out);
    size_t want = 0;
    for (unsigned k = 10; k <= 40; k++)
        want += k % 5 != 0 && k % 2 == 1;
    assert_int_equal(json_object_size(got), want);
    json_object_foreach(got, key, env)
    {
        assert_true(json_equal(env, json_object_get(relayed, key)));
        assert_string_equal(json_string_value(json_object_get(env, "type")), "Odd");
    }
    json_decref(got);

    /* The inbox's directory is not an archive of events. */
    char inbox_dir[300];
    snprintf(inbox_dir, sizeof(inbox_dir), "%s/inbox_events", dir);
    const char *a_inbox[] = {"--name", "arch-inbox", "--archive", inbox_dir, NULL};
    unlink(errf);
    assert_int_equal(replay(a_inbox, out, errf), 1);
    char text[4096];
    testproc_read_text(errf, text, sizeof(text));
    if (strstr(text, "has no outbox_events directory") == NULL ||
        strstr(text, "not the inbox's") == NULL)
        fail_msg("the inbox's directory is not refused clearly: %s", text);

    /* A file cut short: the replay stops naming it (exit 1). */
    snprintf(cmd, sizeof(cmd),
             "f=$(ls '%s'/outbox_events/*.jsonl.gz | head -1) && head -c 40 \"$f\" > \"$f.cut\" "
             "&& mv \"$f.cut\" \"$f\"",
             dir);
    assert_int_equal(system(cmd), 0);
    const char *a_cut[] = {"--name", "arch-cut", "--archive", dir, NULL};
    unlink(errf);
    assert_int_equal(replay(a_cut, out, errf), 1);
    testproc_read_text(errf, text, sizeof(text));
    if (strstr(text, "outbox_events.1-") == NULL)
        fail_msg("the error does not name the damaged file: %s", text);
    json_decref(relayed);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    unlink(rel);
    unlink(out);
    unlink(errf);
}

/* Inserts n PUBLISHED events k:0..k:n-1, aggregate k % aggs, payload {"n": k}. */
static void insert_published(struct testdb *t, unsigned n, unsigned aggs)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "
             "idempotency_key, status, published_time) SELECT 'order', CONCAT('a', seq MOD %u), "
             "'E', JSON_OBJECT('n', seq), CONCAT('k:', seq), 'PUBLISHED', NOW(6) "
             "FROM seq_0_to_%u",
             aggs, n - 1);
    testdb_exec(t->db, sql);
}

static void test_killed_resumes_throttled(void **state)
{
    struct testdb *t = *state;
    char out[256], errf[256];
    io_paths(out, errf, "kill");
    const unsigned n = 3000, aggs = 7, rate = 1500;
    insert_published(t, n, aggs);
    static const char *const lead[] = {"replay", "--publisher", "log", NULL};
    const char *args[] = {"--rate", "1500", NULL};
    pid_t pid = testproc_spawn_txo(lead, args, out, errf, true);
    txo_sleep_ms(1000);
    kill(pid, SIGKILL);
    (void)testproc_wait_pid(pid);
    int64_t stored = q(t, "SELECT replayed FROM outbox_replays WHERE name = 'default'");
    size_t first_lines = count_lines(out);
    if (!(first_lines > 0 && first_lines < n))
        fail_msg("the first run published %zu of %u before the kill", first_lines, n);
    /* The rest, appended to the same file. */
    int64_t t0 = txo_monotonic_ms();
    int status = testproc_wait_pid(testproc_spawn_txo(lead, args, out, errf, true));
    double secs = (double)(txo_monotonic_ms() - t0) / 1000.0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        testproc_print_file(errf, "  ");
        fail_msg("the resumed replay: status 0x%x", status);
    }
    size_t total = 0;
    char **lines = read_lines(out, &total);
    unsigned *count = txo_calloc(n, sizeof(*count));
    int64_t last[7] = {0};
    for (size_t i = 0; i < total; i++) {
        json_error_t jerr;
        json_t *env = json_loads(lines[i], 0, &jerr);
        assert_non_null(env);
        unsigned k = 0;
        assert_int_equal(
            sscanf(json_string_value(json_object_get(env, "idempotency_key")), "k:%u", &k), 1);
        assert_true(k < n);
        int64_t id = json_integer_value(json_object_get(env, "id"));
        if (count[k]++ == 0) { /* first copies in per-aggregate order */
            if (id <= last[k % aggs])
                fail_msg("k:%u (id %" PRId64 ") after id %" PRId64 " of its aggregate", k, id,
                         last[k % aggs]);
            last[k % aggs] = id;
        }
        json_decref(env);
    }
    for (unsigned k = 0; k < n; k++)
        if (count[k] == 0)
            fail_msg("k:%u never replayed", k);
    /* Again: what was published after the last checkpoint, at most a batch (rate / 10). */
    size_t again = total - n;
    print_message("  killed after %zu (checkpoint %" PRId64 "), %zu published again; the rest "
                  "(%zu) in %.2f s\n",
                  first_lines, stored, again, (size_t)n - (size_t)stored, secs);
    assert_true(again <= rate / 10);
    assert_int_equal((int64_t)first_lines - stored, (int64_t)again);
    /* The rate: the resumed run took at least its events' share of time (less one batch). */
    double min_secs = ((double)(n - (unsigned)stored) - rate / 10.0) / rate;
    if (secs < min_secs)
        fail_msg("%u events in %.2f s: faster than --rate %u", n - (unsigned)stored, secs, rate);
    assert_int_equal(q(t, "SELECT finished_at IS NOT NULL FROM outbox_replays"), 1);
    txo_free(count);
    free_lines(lines, total);
    unlink(out);
    unlink(errf);
}

static void test_rerun_conflict_and_bad_options(void **state)
{
    struct testdb *t = *state;
    char out[256], errf[256];
    io_paths(out, errf, "rerun");
    insert_published(t, 10, 3);
    const char *args[] = {"--aggregate-id", "a1", NULL};
    assert_int_equal(replay(args, out, errf), 0);
    size_t n = 0;
    n = count_lines(out);
    assert_int_equal(n, 3); /* k:1, k:4, k:7 */
    /* Finished: run again, nothing is published. */
    assert_int_equal(replay(args, out, errf), 0);
    n = count_lines(out);
    assert_int_equal(n, 0);
    /* Another selection under the same name: refused, naming --restart. */
    const char *other[] = {"--aggregate-id", "a2", NULL};
    unlink(errf);
    assert_int_equal(replay(other, out, errf), 2);
    char text[4096];
    testproc_read_text(errf, text, sizeof(text));
    if (strstr(text, "--restart") == NULL)
        fail_msg("the refusal does not name --restart: %s", text);
    const char *restart[] = {"--aggregate-id", "a2", "--restart", NULL};
    assert_int_equal(replay(restart, out, errf), 0);
    n = count_lines(out);
    assert_int_equal(n, 3); /* k:2, k:5, k:8 */
    /* Bad options: exit 2, and no checkpoint written. */
    const char *bad[][4] = {{"--name", "b1", "--from-id", "0"},
                            {"--name", "b2", "--since", "2026-13"},
                            {"--name", "b3", "--to-id", "x"},
                            {"--name", "", NULL, NULL},
                            {"--name", "b4", "--batch-size", "0"}};
    for (size_t i = 0; i < TXO_ARRAY_LEN(bad); i++) {
        const char *a[5] = {bad[i][0], bad[i][1], bad[i][2], bad[i][3], NULL};
        assert_int_equal(replay(a, out, errf), 2);
    }
    assert_int_equal(q(t, "SELECT COUNT(*) FROM outbox_replays"), 1);

    /* A publisher that keeps failing (a webhook nobody listens on): the replay waits and
     * retries; SIGTERM stops it with exit 0, nothing counted as replayed. */
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/events", testproc_free_port());
    static const char *const lead[] = {"replay", NULL};
    const char *down[] = {"--name", "down", "--publisher", "webhook", "--webhook-url", url, NULL};
    unlink(errf);
    pid_t pid = testproc_spawn_txo(lead, down, out, errf, false);
    txo_sleep_ms(800);
    kill(pid, SIGTERM);
    int status = testproc_wait_pid(pid);
    testproc_read_text(errf, text, sizeof(text));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || strstr(text, "stopped") == NULL)
        fail_msg("want exit 0 and a stop, status 0x%x: %s", status, text);
    assert_int_equal(q(t, "SELECT replayed FROM outbox_replays WHERE name = 'down'"), 0);
    unlink(out);
    unlink(errf);
}

/*
 * Through a real broker: 100,000 events replayed to NATS JetStream, killed halfway and run
 * again, the stream read back with the NATS C client: every event once (the broker drops the
 * copies of the batch in flight at the kill by their Nats-Msg-Id), in per-aggregate order,
 * payloads those of the rows.
 */
static void test_nats_100k_killed_and_resumed(void **state)
{
    struct testdb *t = *state;
    struct testnats nats = {.port = 0};
    testnats_start(&nats);
    char out[256], errf[256];
    io_paths(out, errf, "nats");
    const unsigned n = 100000, aggs = 4;
    insert_published(t, n, aggs);
    static const char *const lead[] = {"replay", NULL};
    const char *args[] = {"--publisher", "nats", "--nats-url", nats.url, NULL};
    pid_t pid = testproc_spawn_txo(lead, args, out, errf, true);
    for (int waited = 0; waited < 60000; waited += 20) {
        if (q(t, "SELECT COALESCE(MAX(replayed), 0) FROM outbox_replays") >= n / 2)
            break;
        txo_sleep_ms(20);
    }
    kill(pid, SIGKILL);
    (void)testproc_wait_pid(pid);
    int64_t half = q(t, "SELECT replayed FROM outbox_replays");
    if (!(half >= n / 2 && half < n))
        fail_msg("killed at %" PRId64 " of %u", half, n);
    int status = testproc_wait_pid(testproc_spawn_txo(lead, args, out, errf, true));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        testproc_print_file(errf, "  ");
        fail_msg("the resumed replay: status 0x%x", status);
    }
    size_t count = testnats_expect_each_once(&nats, "TXO_EVENTS", n, aggs);
    print_message("  killed at %" PRId64 ", resumed: %zu events in the stream\n", half, count);
    testnats_cleanup(&nats);
    unlink(out);
    unlink(errf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_messages_are_the_relayed_ones),
        cmocka_unit_test(test_killed_resumes_throttled),
        cmocka_unit_test(test_rerun_conflict_and_bad_options),
        cmocka_unit_test(test_from_the_archive),
        cmocka_unit_test(test_nats_100k_killed_and_resumed),
    };
    return testdb_run_each(tests, TXO_ARRAY_LEN(tests), "replay", TESTDB_NEW_EXPORT_ENV, NULL);
}
