#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "testdb.h"
#include "testproc.h"
#include "testrelay.h"
#include "txo/alloc.h"
#include "txo/clock.h"

void testrelay_file_open(struct testrelay_file *f, const char *name)
{
    snprintf(f->path, sizeof(f->path), "/tmp/txo_%s_%d.txt", name, (int)getpid());
    f->fd = open(f->path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (f->fd < 0)
        fail_msg("cannot create %s", f->path);
}

void testrelay_file_close(struct testrelay_file *f)
{
    close(f->fd);
    unlink(f->path);
}

struct txo_relay *testrelay_new(struct txo_db *db, struct txo_publisher *pub,
                                const struct txo_relay_opts *opts)
{
    struct txo_relay *r = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_relay_new(db, pub, opts, &r, &err) < 0)
        fail_msg("txo_relay_new: %s", err.msg);
    return r;
}

size_t testrelay_run_once(struct txo_relay *relay)
{
    size_t claimed = 0;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_relay_run_once(relay, &claimed, &err) < 0)
        fail_msg("txo_relay_run_once: %s", err.msg);
    return claimed;
}

size_t testrelay_run_once_ms(struct txo_relay *relay, int64_t *ms)
{
    int64_t t0 = txo_monotonic_ms();
    size_t claimed = testrelay_run_once(relay);
    *ms = txo_monotonic_ms() - t0;
    return claimed;
}

void testrelay_retry_pending(struct txo_db *db, struct txo_relay *relay, int timeout_ms,
                             int pause_ms, int64_t max_cycle_ms)
{
    static const char pending[] = "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING'";
    int64_t deadline = txo_monotonic_ms() + timeout_ms;
    while (testdb_q(db, pending) > 0) {
        if (txo_monotonic_ms() > deadline)
            fail_msg("%lld events still PENDING after %d s", (long long)testdb_q(db, pending),
                     timeout_ms / 1000);
        testdb_exec(db, "UPDATE outbox_events SET next_attempt_at = NOW(6) "
                        "WHERE status = 'PENDING'");
        int64_t ms = 0;
        (void)testrelay_run_once_ms(relay, &ms);
        if (max_cycle_ms > 0 && ms > max_cycle_ms)
            fail_msg("a relay cycle took %lld ms during recovery", (long long)ms);
        if (pause_ms > 0)
            txo_sleep_ms(pause_ms);
    }
}

void testrelay_drain(struct txo_relay *relay)
{
    struct txo_error err;
    txo_error_init(&err);
    if (txo_relay_run(relay, &err) < 0)
        fail_msg("txo_relay_run: %s", err.msg);
}

void testrelay_outage_opts(struct txo_relay_opts *ro, const char *relay_id, unsigned batch_size)
{
    txo_relay_opts_init(ro);
    ro->relay_id = relay_id;
    ro->batch_size = batch_size;
    ro->backoff.base_ms = 30000;
    ro->backoff.max_ms = 60000;
    ro->backoff.jitter = 0.0;
    ro->max_attempts = 1000;
}

static void expect_published(const struct testrelay_outage *o, int64_t want)
{
    assert_int_equal(
        testdb_q(o->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'"), want);
}

void testrelay_outage_up(struct testrelay_outage *o)
{
    int64_t ms = 0;
    assert_int_equal(testrelay_run_once_ms(o->relay, &ms), o->batch);
    expect_published(o, o->batch);
}

void testrelay_outage_down(struct testrelay_outage *o)
{
    o->tried = 0;
    int max_cycles = o->hang ? 2 : 50; /* a hanging broker costs the timeout each */
    for (int cycle = 0; cycle < max_cycles; cycle++) {
        int64_t ms = 0;
        size_t claimed = testrelay_run_once_ms(o->relay, &ms);
        if (ms > o->timeout_ms + o->slack_ms)
            fail_msg("a relay cycle took %lld ms while the broker was down (timeout %d ms)",
                     (long long)ms, o->timeout_ms);
        if (o->hang && ms < o->timeout_ms - 50)
            fail_msg("a cycle against a hanging broker ended after %lld ms, before the timeout "
                     "of %d ms",
                     (long long)ms, o->timeout_ms);
        if (!o->hang && o->dead_max_ms > 0 && ms > o->dead_max_ms)
            fail_msg("a cycle against a dead broker took %lld ms: not failing fast", (long long)ms);
        if (claimed == 0)
            break;
        o->tried += claimed;
    }
    assert_int_equal(o->tried, o->hang ? 2 * o->batch : o->n_events - o->batch);
    expect_published(o, o->batch);
    assert_int_equal(testdb_q(o->db, o->pending_sql), o->tried);
    struct txo_relay_stats st;
    txo_relay_get_stats(o->relay, &st);
    assert_int_equal(st.failed_attempts, o->tried);
    assert_int_equal(st.dead_lettered, 0);
    if (!o->hang) {
        /* Nothing is due: the relay waits instead of hammering the broker. */
        int64_t ms = 0;
        assert_int_equal(testrelay_run_once_ms(o->relay, &ms), 0);
    }
}

void testrelay_outage_back(struct testrelay_outage *o, int pause_ms, int64_t max_cycle_ms)
{
    int64_t t0 = txo_monotonic_ms();
    testrelay_retry_pending(o->db, o->relay, 30000, pause_ms, max_cycle_ms);
    print_message("every event published %lld ms after the broker came back\n",
                  (long long)(txo_monotonic_ms() - t0));
    assert_int_equal(testdb_q(o->db,
                              "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED' "
                              "AND last_error IS NULL AND published_at IS NOT NULL"),
                     o->n_events);
    assert_int_equal(testdb_q(o->db, "SELECT COUNT(*) FROM dead_letter_events"), 0);
}

/* The ops of a testrelay_publisher live with it, so every test's publisher has its own. */
struct fn_publisher {
    struct txo_publisher_ops ops;
    int (*publish)(void *self, const struct txo_outbox_message *msgs, size_t n, int *results,
                   struct txo_error *errors);
    void *self;
};

static int fn_publish(void *arg, const struct txo_outbox_message *msgs, size_t n, int *results,
                      struct txo_error *errors)
{
    struct fn_publisher *fp = arg;
    return fp->publish(fp->self, msgs, n, results, errors);
}

static void fn_destroy(void *arg)
{
    struct fn_publisher *fp = arg;
    txo_free(fp->self);
    txo_free(fp);
}

struct txo_publisher *
testrelay_publisher(const char *name,
                    int (*publish)(void *self, const struct txo_outbox_message *msgs, size_t n,
                                   int *results, struct txo_error *errors),
                    void *self)
{
    struct fn_publisher *fp = txo_calloc(1, sizeof(*fp));
    assert_non_null(fp);
    fp->ops.name = name;
    fp->ops.publish_batch = fn_publish;
    fp->ops.destroy = fn_destroy;
    fp->publish = publish;
    fp->self = self;
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_publisher_new(&fp->ops, fp, &pub, &err) < 0) {
        txo_free(fp);
        fail_msg("txo_publisher_new(%s): %s", name, err.msg);
    }
    return pub;
}

pid_t testrelay_spawn_binlog(const char *out, const char *errf, const char *const *args)
{
    static const char *const lead[] = {"relay", "--source",       "binlog", "--publisher",
                                       "log",   "--source-lease", "600",    NULL};
    return testproc_spawn_txo(lead, args, out, errf, true);
}

void testrelay_binlog_drain(const char *out, const char *errf)
{
    const char *args[] = {"--drain", NULL};
    int status = testproc_wait_pid(testrelay_spawn_binlog(out, errf, args));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        testproc_print_file(errf, "  ");
        fail_msg("binlog drain: status 0x%x", status);
    }
}

size_t testrelay_read_envelopes(const char *path, void (*each)(void *ctx, json_t *env, unsigned k),
                                void *ctx)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t lines = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        json_error_t jerr;
        json_t *env = json_loadb(line, (size_t)len, 0, &jerr);
        if (env == NULL)
            fail_msg("%s line %zu is not JSON (%s): %s", path, lines + 1, jerr.text, line);
        const char *key = json_string_value(json_object_get(env, "idempotency_key"));
        unsigned k = 0;
        if (key == NULL || sscanf(key, "k:%u", &k) != 1)
            fail_msg("%s line %zu has no key k:<n>: %s", path, lines + 1, line);
        each(ctx, env, k);
        json_decref(env);
        lines++;
    }
    free(line);
    fclose(f);
    return lines;
}
