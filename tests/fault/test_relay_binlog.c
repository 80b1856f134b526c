/*
 * The relay's binlog source with real processes: `txo relay --source binlog --publisher log`
 * reading the private MariaDB's binary log (log_bin, ROW, FULL metadata: scripts/db.sh), its
 * stdout (the log publisher's envelopes) parsed by the test, its rows checked.
 *
 *   - events committed in many transactions, interleaved aggregates, a rolled-back
 *     transaction, an outbox of another database on the same server, an ALTER TABLE adding a
 *     column and FLUSH BINARY LOGS in the middle: every committed event published once, in commit
 * order per aggregate, payload equal to the row's; nothing of the rollback or the other database;
 *   - SIGKILL mid-stream, again and again: nothing lost (at least once), and no row written;
 *   - two readers of one source: one publishes, the other stands by; killed, the standby
 *     takes over within the lease;
 *   - the database server SIGKILLed and restarted under a running relay and a writer (on a
 *     private server of the test's own): every committed event published, first copies in
 *     order, nothing that did not commit;
 *   - a live switch, while a writer commits events: polling relay, then the binlog source,
 *     then a hand-back and the polling relay again: every event published, first copies in
 *     order per aggregate, and no row left PENDING;
 *   - a stored position purged from the server, and a user without the replication grants:
 *     refused, exit 1, naming the fix; a bad --source-name: exit 2 before any write.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
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
#include "testhttp.h"
#include "testproc.h"
#include "testrelay.h"
#include "testrun.h"
#include "testserver.h"

static int64_t q(struct testdb *t, const char *sql)
{
    return testdb_i64(t->db, sql, NULL, 0);
}

static void temp_path(char *buf, size_t cap, const char *name)
{
    testproc_temp_path(buf, cap, "txo_relay_binlog", name);
}

/* A test's relay output and error files, removed. */
static void io_paths(char out[256], char errf[256], const char *tag)
{
    testproc_io_paths(out, errf, "txo_relay_binlog", tag);
}

/*
 * io_paths(), then a drain on the still empty outbox: the source stores its first position
 * before the test writes, so every event the test inserts is read from the log.
 */
static void io_paths_from_empty(char out[256], char errf[256], const char *tag)
{
    io_paths(out, errf, tag);
    testrelay_binlog_drain(out, errf);
}

/* Waits until count(where) reaches want, up to timeout_ms. */
static bool wait_rows(struct testdb *t, const char *sql, int64_t want, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 50) {
        if (q(t, sql) >= want)
            return true;
        txo_sleep_ms(50);
    }
    return q(t, sql) >= want;
}

static size_t file_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = 0;
    int c;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

/* Waits until path has want lines (envelopes), up to timeout_ms. */
static bool wait_lines(const char *path, size_t want, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 50) {
        if (file_lines(path) >= want)
            return true;
        txo_sleep_ms(50);
    }
    return file_lines(path) >= want;
}

/*
 * The number of distinct keys k:0 .. k:n-1 among the whole lines of the envelopes file at path
 * (a line still being written is not read).
 */
static size_t distinct_keys(const char *path, unsigned n)
{
    static const char mark[] = "\"idempotency_key\":\"k:";
    unsigned char *seen = txo_calloc(n > 0 ? n : 1, 1);
    assert_non_null(seen);
    size_t count = 0;
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while (f != NULL && (len = getline(&line, &cap, f)) > 0 && line[len - 1] == '\n') {
        const char *at = strstr(line, mark);
        unsigned k = 0;
        if (at != NULL && sscanf(at + sizeof(mark) - 1, "%u", &k) == 1 && k < n && !seen[k]) {
            seen[k] = 1;
            count++;
        }
    }
    free(line);
    if (f != NULL)
        fclose(f);
    txo_free(seen);
    return count;
}

/* Waits up to timeout_ms until want distinct keys below n are in the file; returns how many. */
static size_t wait_keys(const char *path, unsigned n, size_t want, int timeout_ms)
{
    size_t have = distinct_keys(path, n);
    for (int waited = 0; have < want && waited < timeout_ms; waited += 50) {
        txo_sleep_ms(50);
        have = distinct_keys(path, n);
    }
    return have;
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

struct seen {
    unsigned *count;  /* per key */
    int64_t *last_id; /* per aggregate: the id of its last event seen */
    unsigned n, aggs;
    bool in_order;
};

struct envelope_check {
    struct testdb *t;
    struct seen *s;
};

/* One envelope into c->s: its key counted, the order of its aggregate; its payload the row's. */
static void check_envelope(void *ctx, json_t *env, unsigned k)
{
    struct envelope_check *c = ctx;
    struct seen *s = c->s;
    if (k >= s->n)
        fail_msg("unexpected key k:%u", k);
    int64_t id = json_integer_value(json_object_get(env, "id"));
    struct txo_param p[] = {txo_p_i64(id)};
    char *row = testdb_str(c->t->db, "SELECT payload FROM outbox_events WHERE id = ?", p, 1);
    json_error_t jerr;
    json_t *want = json_loads(row, 0, &jerr);
    assert_non_null(want);
    if (!json_equal(want, json_object_get(env, "payload")))
        fail_msg("payload of k:%u differs from its row: %s", k, row);
    json_decref(want);
    txo_free(row);
    unsigned a = k % s->aggs;
    if (s->count[k] == 0 && id < s->last_id[a])
        s->in_order = false;
    if (s->count[k] == 0)
        s->last_id[a] = id;
    s->count[k]++;
}

/* Parses the envelopes of path into s: counts per key, order per aggregate; payloads must
 * equal the rows'. Returns the number of envelopes. */
static size_t read_envelopes(struct testdb *t, const char *path, struct seen *s)
{
    struct envelope_check c = {.t = t, .s = s};
    return testrelay_read_envelopes(path, check_envelope, &c);
}

static void seen_init(struct seen *s, unsigned n, unsigned aggs)
{
    s->count = txo_calloc(n, sizeof(*s->count));
    s->last_id = txo_calloc(aggs, sizeof(*s->last_id));
    s->n = n;
    s->aggs = aggs;
    s->in_order = true;
}

static void seen_release(struct seen *s)
{
    txo_free(s->count);
    txo_free(s->last_id);
}

static void test_stream_each_once_in_order(void **state)
{
    struct testdb *t = *state;
    char out[256], errf[256];
    io_paths(out, errf, "stream");
    /* An event committed before the first start: published by the polling path. */
    insert_range(t, 0, 1, 1, 7);
    unsigned port = testproc_free_port();
    char listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", port);
    const char *args[] = {"--batch-size", "50", "--metrics-listen", listen, NULL};
    pid_t pid = testrelay_spawn_binlog(out, errf, args);
    assert_true(wait_rows(t,
                          "SELECT COUNT(*) FROM outbox_binlog_sources WHERE binlog_file "
                          "IS NOT NULL",
                          1, 20000));

    /* Another database's outbox on the same server. */
    struct testdb other = {.db = NULL};
    testdb_setup(&other, "binlog_other");
    testdb_exec(other.db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                          "payload, idempotency_key) VALUES ('order', 'x', 'E', '{}', 'k:other')");

    const unsigned n = 600, aggs = 7;
    insert_range(t, 1, 300, 13, aggs);
    testdb_exec(t->db, "START TRANSACTION");
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key) VALUES ('order', 'r', 'E', '{}', 'k:rolled')");
    testdb_exec(t->db, "ROLLBACK");
    testdb_exec(t->db, "UPDATE outbox_events SET last_error = NULL WHERE id < 10");
    /* The table changes under the running reader: its columns are found again by name. */
    testdb_exec(t->db, "ALTER TABLE outbox_events ADD COLUMN note VARCHAR(20) NULL AFTER id");
    testdb_exec(t->db, "FLUSH BINARY LOGS");
    insert_range(t, 300, n, 1, aggs);

    bool all = wait_lines(out, n, 60000);
    /* The lag gauges: caught up, and an event published moments ago. */
    CURL *h = curl_easy_init();
    struct testhttp_reply r = {.body = NULL};
    testhttp_get(h, port, "/metrics", &r);
    double behind = testhttp_metric_value(r.body, "txo_relay_binlog_seconds_behind");
    double age = testhttp_metric_value(r.body, "txo_relay_binlog_last_publish_age_seconds");
    testhttp_reply_release(&r);
    curl_easy_cleanup(h);
    kill(pid, SIGTERM);
    int status = testproc_wait_pid(pid);
    if (!all || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        testproc_print_file(errf, "  ");
        fail_msg("published %zu of %u, status 0x%x", file_lines(out), n, status);
    }
    struct seen s;
    seen_init(&s, n, aggs);
    assert_int_equal(read_envelopes(t, out, &s), n); /* nothing of the rollback or `other` */
    for (unsigned k = 0; k < n; k++)
        if (s.count[k] != 1)
            fail_msg("k:%u published %u times", k, s.count[k]);
    assert_true(s.in_order);
    /* The rows the stream published are as they were inserted (the first one went out by
     * polling at the first start, which marks it as the polling relay does). */
    assert_int_equal(q(t, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' AND "
                          "published_at IS NULL AND attempts = 0"),
                     n - 1);
    if (!(behind >= 0 && behind <= 2 && age >= 0 && age < 30))
        fail_msg("lag gauges: seconds_behind %g, last_publish_age %g", behind, age);
    assert_int_equal(testdb_i64(other.db,
                                "SELECT COUNT(*) FROM outbox_events WHERE status = "
                                "'PENDING'",
                                NULL, 0),
                     1);
    /* The high-water mark and a position in the log after the flush. */
    assert_int_equal(q(t, "SELECT high_water_id FROM outbox_binlog_sources"),
                     q(t, "SELECT MAX(id) FROM outbox_events"));
    testdb_teardown(&other);
    seen_release(&s);
    unlink(out);
    unlink(errf);
}

static void test_kill_mid_stream_loses_nothing(void **state)
{
    struct testdb *t = *state;
    char out[256], errf[256];
    io_paths_from_empty(out, errf, "kill");
    const unsigned n = 4000, aggs = 5;
    insert_range(t, 0, n, 2, aggs);
    /* Runs of one transaction of 2 events, each storing the position: slow enough that the
     * kills land mid-stream. */
    const char *args[] = {"--batch-size", "2", NULL};
    size_t after_first = 0;
    for (int round = 0; round < 5; round++) {
        pid_t pid = testrelay_spawn_binlog(out, errf, args);
        txo_sleep_ms(150 + 100 * round);
        kill(pid, SIGKILL);
        (void)testproc_wait_pid(pid);
        if (round == 0)
            after_first = file_lines(out);
        txo_sleep_ms(700); /* past the 600 ms lease */
    }
    testrelay_binlog_drain(out, errf);
    struct seen s;
    seen_init(&s, n, aggs);
    size_t lines = read_envelopes(t, out, &s);
    assert_true(lines >= n);
    /* Each kill publishes again what went out after the last stored position, which a full
     * batch stores: at most the run in flight. */
    print_message("  %u events, %zu published across 5 kills (%zu again)\n", n, lines, lines - n);
    print_message("  the first kill after %zu\n", after_first);
    assert_true(after_first < n);    /* the kills landed mid-stream ... */
    assert_true(lines - n <= 5 * 2); /* ... and each published again at most the run in flight */
    for (unsigned k = 0; k < n; k++)
        if (s.count[k] < 1)
            fail_msg("k:%u lost", k);
    assert_int_equal(q(t, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' AND "
                          "published_at IS NULL AND attempts = 0"),
                     n);
    seen_release(&s);
    unlink(out);
    unlink(errf);
}

static void test_one_reader_then_takeover(void **state)
{
    struct testdb *t = *state;
    char out_a[256], out_b[256], errf[256];
    temp_path(out_a, sizeof(out_a), "a_out");
    temp_path(out_b, sizeof(out_b), "b_out");
    temp_path(errf, sizeof(errf), "ab_err");
    unlink(out_a);
    unlink(out_b);
    unlink(errf);
    testrelay_binlog_drain(out_a, errf);
    const char *args[] = {NULL};
    pid_t a = testrelay_spawn_binlog(out_a, errf, args);
    txo_sleep_ms(500);
    pid_t b = testrelay_spawn_binlog(out_b, errf, args);
    txo_sleep_ms(300);
    insert_range(t, 0, 100, 10, 3);
    assert_true(wait_lines(out_a, 100, 20000));
    txo_sleep_ms(200); /* nothing more comes */
    assert_int_equal(file_lines(out_a), 100);
    assert_int_equal(file_lines(out_b), 0);
    kill(a, SIGKILL);
    (void)testproc_wait_pid(a);
    insert_range(t, 100, 200, 10, 3);
    /* The standby publishes k:100..199 (and maybe again some of what a published last). */
    bool all = false;
    for (int waited = 0; !all && waited < 20000; waited += 100) {
        txo_sleep_ms(100);
        struct seen s;
        seen_init(&s, 200, 3);
        (void)read_envelopes(t, out_b, &s);
        all = true;
        for (unsigned k = 100; k < 200; k++)
            all = all && s.count[k] > 0;
        seen_release(&s);
    }
    kill(b, SIGTERM);
    (void)testproc_wait_pid(b);
    if (!all) {
        testproc_print_file(errf, "  ");
        fail_msg("the standby did not take over");
    }
    unlink(out_a);
    unlink(out_b);
    unlink(errf);
}

/* Commits events k:0, k:1, ... (1 to 3 a transaction, aggregate k % aggs) until stopped. */
struct writer {
    struct testdb *t;
    unsigned aggs;
    _Atomic bool stop;
    _Atomic unsigned next;
};

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    struct txo_db *db = testdb_connect(w->t);
    for (unsigned round = 0; !atomic_load(&w->stop); round++) {
        unsigned k = atomic_load(&w->next), per_tx = 1 + round % 3;
        testdb_exec(db, "START TRANSACTION");
        for (unsigned j = k; j < k + per_tx; j++) {
            char agg[16], key[24];
            snprintf(agg, sizeof(agg), "a%u", j % w->aggs);
            snprintf(key, sizeof(key), "k:%u", j);
            struct txo_param p[] = {txo_p_str(agg), txo_p_str(key)};
            struct txo_error err;
            txo_error_init(&err);
            if (txo_db_exec(db,
                            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                            "payload, idempotency_key) VALUES ('order', ?, 'E', '{}', ?)",
                            p, 2, NULL, &err) < 0)
                fail_msg("writer: %s", err.msg);
        }
        testdb_exec(db, "COMMIT");
        atomic_store(&w->next, k + per_tx);
        txo_sleep_ms(3);
    }
    txo_db_close(db);
    return NULL;
}

/* Stops a relay process with SIGTERM: it must exit 0. */
static void stop_relay(pid_t pid, const char *errf)
{
    kill(pid, SIGTERM);
    int status = testproc_wait_pid(pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        testproc_print_file(errf, "  ");
        fail_msg("relay exit status 0x%x", status);
    }
}

static void test_switch_live_polling_binlog_polling(void **state)
{
    struct testdb *t = *state;
    char out[256], errf[256];
    io_paths(out, errf, "switch");
    static const char *const polling[] = {"relay", "--publisher", "log", NULL};
    const char *none[] = {NULL};
    struct writer w = {.t = t, .aggs = 5};
    atomic_init(&w.stop, false);
    atomic_init(&w.next, 0);
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, writer_main, &w), 0);

    pid_t pid = testproc_spawn_txo(polling, none, out, errf, true);
    txo_sleep_ms(1000);
    stop_relay(pid, errf);
    pid =
        testrelay_spawn_binlog(out, errf, none); /* first start: drains by polling, then streams */
    txo_sleep_ms(1500);
    stop_relay(pid, errf);
    const char *hand_back[] = {"--hand-back", NULL};
    int status = testproc_wait_pid(testrelay_spawn_binlog(out, errf, hand_back));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        testproc_print_file(errf, "  ");
        fail_msg("hand-back: status 0x%x", status);
    }
    pid = testproc_spawn_txo(polling, none, out, errf, true);
    txo_sleep_ms(1000);
    atomic_store(&w.stop, true);
    pthread_join(tid, NULL);
    unsigned n = atomic_load(&w.next);
    assert_true(
        wait_rows(t, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'", n, 30000));
    stop_relay(pid, errf);

    struct seen s;
    seen_init(&s, n, w.aggs);
    size_t lines = read_envelopes(t, out, &s);
    for (unsigned k = 0; k < n; k++)
        if (s.count[k] < 1)
            fail_msg("k:%u lost in the switch", k);
    assert_true(s.in_order);
    assert_int_equal(q(t, "SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED'"), 0);
    print_message("  %u events, %zu published (%zu again, at the switch to binlog)\n", n, lines,
                  lines - n);
    seen_release(&s);
    unlink(out);
    unlink(errf);
}

/* `txo partition ACTION [extra]`: exit 0 or the test fails with its output. */
static void partition(const char *action, const char *extra)
{
    const char *args[] = {"partition", action, "--partition-batch=50", extra, NULL};
    char *out = NULL;
    int rc = testproc_run_txo("binlog_partition", args, 120000, &out);
    if (rc != 0)
        fail_msg("txo partition %s: %d\n%s", action, rc, out);
    free(out);
}

/*
 * The outbox changes layout online, both ways, under a running binlog source and a writer:
 * the copied rows go to a table of another name, so the source publishes each event once.
 */
static void test_layout_change_not_published_again(void **state)
{
    struct testdb *t = *state;
    char out[256], errf[256];
    io_paths_from_empty(out, errf, "partition");
    insert_range(t, 0, 400, 3, 5);
    const char *none[] = {NULL};
    pid_t pid = testrelay_spawn_binlog(out, errf, none);
    struct writer w = {.t = t, .aggs = 5};
    atomic_init(&w.stop, false);
    atomic_init(&w.next, 400);
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, writer_main, &w), 0);
    txo_sleep_ms(300);
    partition("enable", "--partition-first-ids=150");
    txo_sleep_ms(300);
    partition("disable", NULL);
    txo_sleep_ms(300);
    partition("enable", "--partition-first-ids=150");
    txo_sleep_ms(300);
    atomic_store(&w.stop, true);
    pthread_join(tid, NULL);
    unsigned n = atomic_load(&w.next);
    bool all = wait_lines(out, n, 30000);
    stop_relay(pid, errf);
    if (!all)
        fail_msg("published %zu of %u", file_lines(out), n);

    struct seen s;
    seen_init(&s, n, w.aggs);
    size_t lines = read_envelopes(t, out, &s);
    for (unsigned k = 0; k < n; k++)
        if (s.count[k] != 1)
            fail_msg("k:%u published %u times", k, s.count[k]);
    assert_int_equal(lines, n);
    assert_true(s.in_order);
    assert_int_equal(q(t, "SELECT COUNT(*) FROM outbox_events"), n);
    print_message("  %u events across three layout changes, each published once\n", n);
    seen_release(&s);
    unlink(out);
    unlink(errf);
}

/* Commits events k:0, k:1, ... as the writer above, across a server crash: a statement that
 * fails closes the connection, and the writer connects again until the server is back. A
 * transaction whose COMMIT failed may or may not have committed; the table says which. */
static void *crash_writer_main(void *arg)
{
    struct writer *w = arg;
    struct txo_db_opts opts;
    testdb_opts_from_env(&opts);
    opts.database = w->t->name;
    struct txo_db *db = NULL;
    struct txo_error err;
    txo_error_init(&err);
    for (unsigned round = 0; !atomic_load(&w->stop); round++) {
        if (db == NULL && txo_db_open(&opts, &db, &err) < 0) {
            db = NULL;
            txo_sleep_ms(100);
            continue;
        }
        unsigned k = atomic_load(&w->next), per_tx = 1 + round % 3;
        bool ok = txo_db_exec(db, "START TRANSACTION", NULL, 0, NULL, &err) == 0;
        for (unsigned j = k; ok && j < k + per_tx; j++) {
            char agg[16], key[24];
            snprintf(agg, sizeof(agg), "a%u", j % w->aggs);
            snprintf(key, sizeof(key), "k:%u", j);
            struct txo_param p[] = {txo_p_str(agg), txo_p_str(key)};
            ok = txo_db_exec(db,
                             "INSERT INTO outbox_events (aggregate_type, aggregate_id, "
                             "event_type, payload, idempotency_key) VALUES ('order', ?, 'E', "
                             "'{}', ?)",
                             p, 2, NULL, &err) == 0;
        }
        ok = ok && txo_db_exec(db, "COMMIT", NULL, 0, NULL, &err) == 0;
        /* Keys are not reused: an unknown outcome leaves a gap or a row. */
        atomic_store(&w->next, k + per_tx);
        if (!ok) {
            txo_db_close(db);
            db = NULL;
        }
        txo_sleep_ms(3);
    }
    txo_db_close(db);
    return NULL;
}

static void test_server_crash_and_restart(void **state)
{
    (void)state;
    struct testserver server;
    testserver_start(&server, TESTSERVER_BINLOG);
    /* The test's database, the relay and the writer on that server. */
    const char *env[] = {"MYSQL_HOST", "MYSQL_PORT", "MYSQL_USER", "MYSQL_PASSWORD",
                         "MYSQL_SOCKET"};
    char *saved[5];
    for (size_t i = 0; i < 5; i++) {
        const char *v = getenv(env[i]);
        saved[i] = v != NULL ? txo_strdup(v) : NULL;
    }
    char port[16];
    snprintf(port, sizeof(port), "%u", server.port);
    setenv("MYSQL_HOST", "127.0.0.1", 1);
    setenv("MYSQL_PORT", port, 1);
    setenv("MYSQL_USER", "app", 1);
    setenv("MYSQL_PASSWORD", "secret", 1);
    unsetenv("MYSQL_SOCKET");
    struct testdb t;
    testdb_setup(&t, "binlog_crash");
    testdb_export_env(&t);

    char out[256], errf[256];
    io_paths_from_empty(out, errf, "crash");
    const char *args[] = {"--batch-size", "20", NULL};
    pid_t pid = testrelay_spawn_binlog(out, errf, args);
    struct writer w = {.t = &t, .aggs = 5};
    atomic_init(&w.stop, false);
    atomic_init(&w.next, 0);
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, crash_writer_main, &w), 0);
    for (int crash = 0; crash < 2; crash++) {
        assert_true(wait_lines(out, 150 * (size_t)(crash + 1), 30000));
        testserver_crash(&server);
        txo_sleep_ms(300);
        testserver_restart(&server);
    }
    /* Events committed after the last restart reach the relay too. */
    unsigned after = atomic_load(&w.next);
    while (atomic_load(&w.next) < after + 100)
        txo_sleep_ms(20);
    atomic_store(&w.stop, true);
    pthread_join(tid, NULL);

    txo_db_close(t.db);
    t.db = testdb_connect(&t);
    int64_t rows = q(&t, "SELECT COUNT(*) FROM outbox_events");
    /* Wait for every committed event by its key, not for as many lines: the lines count what
     * was published again after each crash, so they reach the row count while the reader, which
     * re-reads from its stored position, has not reached the last events yet. */
    unsigned n = atomic_load(&w.next);
    size_t published = wait_keys(out, n, (size_t)rows, 60000);
    stop_relay(pid, errf);
    if (published != (size_t)rows)
        fail_msg("%zu of %" PRId64 " committed events published (%zu envelopes)", published, rows,
                 file_lines(out));

    /* read_envelopes() fails on an envelope without its row (not committed); every row must
     * have been published. */
    struct seen s;
    seen_init(&s, n, w.aggs);
    size_t lines = read_envelopes(&t, out, &s);
    assert_true(s.in_order);
    struct txo_rows *keys = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(
        txo_db_query(t.db, "SELECT idempotency_key FROM outbox_events", NULL, 0, &keys, &err), 0);
    for (size_t i = 0; i < txo_rows_count(keys); i++) {
        unsigned k = 0;
        assert_int_equal(sscanf(txo_rows_str(keys, i, 0, NULL), "k:%u", &k), 1);
        if (k >= n || s.count[k] == 0)
            fail_msg("k:%u committed and not published", k);
    }
    txo_rows_free(keys);
    print_message("  %" PRId64 " events committed across 2 server crashes, %zu published "
                  "(%zu again)\n",
                  rows, lines, lines - (size_t)rows);
    /* Published again after each crash: the batch in flight and what was published since the
     * position was last stored (at most a batch of 20, or 100 ms of the writer's ~600/s). */
    assert_true(lines - (size_t)rows <= 2 * 120);
    seen_release(&s);
    unlink(out);
    unlink(errf);
    testdb_teardown(&t);
    for (size_t i = 0; i < 5; i++) {
        if (saved[i] != NULL)
            setenv(env[i], saved[i], 1);
        else
            unsetenv(env[i]);
        txo_free(saved[i]);
    }
    testserver_stop(&server);
}

static void test_refusals(void **state)
{
    struct testdb *t = *state;
    char out[256], errf[256];
    io_paths(out, errf, "ref");
    const char *bad[] = {"--source-name", "", NULL};
    int status = testproc_wait_pid(testrelay_spawn_binlog(out, errf, bad));
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 2);

    testrelay_binlog_drain(out, errf);
    /* Three events of long ago, published by the source (and left PENDING). */
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key, created_at) VALUES "
                       "('order', 'o', 'E', '{}', 'k:0', '2020-01-01'), "
                       "('order', 'o', 'E', '{}', 'k:1', '2020-01-01'), "
                       "('order', 'p', 'E', '{}', 'k:2', '2020-01-01')");
    testrelay_binlog_drain(out, errf);
    assert_int_equal(file_lines(out), 3);
    /* A polling relay now would publish them again: it refuses to start, naming the hand-back. */
    static const char *const polling[] = {"relay", "--publisher", "log", "--drain", NULL};
    const char *none[] = {NULL};
    unlink(errf);
    status = testproc_wait_pid(testproc_spawn_txo(polling, none, out, errf, true));
    char text[8192];
    testproc_read_text(errf, text, sizeof(text));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 1 || strstr(text, "--hand-back") == NULL)
        fail_msg("want exit 1 naming the hand-back, status 0x%x: %s", status, text);
    assert_int_equal(file_lines(out), 3);
    testdb_exec(t->db, "UPDATE outbox_binlog_sources SET binlog_file = 'binlog.999999'");
    unlink(errf);
    const char *args[] = {"--drain", NULL};
    status = testproc_wait_pid(testrelay_spawn_binlog(out, errf, args));
    testproc_read_text(errf, text, sizeof(text));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 1 || strstr(text, "purged") == NULL ||
        strstr(text, "UPDATE outbox_binlog_sources SET binlog_file = NULL WHERE name = "
                     "'default'") == NULL)
        fail_msg("want exit 1 naming the purge and its fix, status 0x%x: %s", status, text);

    /* The fix as the message gives it: the resync settles the old events through the
     * high-water id instead of publishing them again, publishes a PENDING one above it by
     * polling, and streams on. */
    testdb_exec(t->db, "UPDATE outbox_binlog_sources SET binlog_file = NULL WHERE name = "
                       "'default'");
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key) VALUES ('order', 'o', 'E', '{}', 'k:3')");
    testrelay_binlog_drain(out, errf);
    assert_int_equal(file_lines(out), 4);
    assert_int_equal(q(t, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'"), 4);

    /* A user without REPLICATION SLAVE and BINLOG MONITOR (scripts/db.sh: txo_norepl). */
    unlink(errf);
    const char *user = getenv("MYSQL_USER");
    char *saved = txo_strdup(user != NULL ? user : "app");
    setenv("MYSQL_USER", "txo_norepl", 1);
    status = testproc_wait_pid(testrelay_spawn_binlog(out, errf, args));
    setenv("MYSQL_USER", saved, 1);
    txo_free(saved);
    testproc_read_text(errf, text, sizeof(text));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 1 ||
        strstr(text, "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO") == NULL)
        fail_msg("want exit 1 printing the GRANT, status 0x%x: %s", status, text);
    unlink(out);
    unlink(errf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_each_once_in_order),
        cmocka_unit_test(test_kill_mid_stream_loses_nothing),
        cmocka_unit_test(test_one_reader_then_takeover),
        cmocka_unit_test(test_switch_live_polling_binlog_polling),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_layout_change_not_published_again),
        cmocka_unit_test_setup(test_server_crash_and_restart, testrun_no_fixture),
    };
    return testdb_run_each(tests, TXO_ARRAY_LEN(tests), "binlog", TESTDB_NEW_EXPORT_ENV, NULL);
}
