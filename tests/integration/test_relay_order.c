/*
 * The relay's ordering by aggregate against a real MariaDB, once per claim strategy with
 * leases and, where leases are not what is looked at, once in claim mode transaction:
 *   - 10,000 events over 500 aggregates drained by 2 and by 3 relays at once, sharing the
 *     shards, with random publish failures, one of the relays a child process that SIGKILLs
 *     itself in the middle of a publish (its shards are taken over): per aggregate, the first
 *     copies the consumer saw are in outbox (id) order; a later copy of an earlier event is
 *     only the at-least-once republish of the killed relay's batch;
 *   - parking: one aggregate whose head keeps failing holds back only its own later events
 *     (every other event is published while it stays FAILED), txo_relay_list_parked() shows
 *     it, and `dlq skip` / `dlq replay` let it go on, in order;
 *   - a parked aggregate stays parked while another session's unpark has not committed;
 *   - commit order: a second append to an aggregate waits for the first transaction to end,
 *     a rolled-back append gives its sequence back, and a multi-row INSERT whose ids come
 *     before a later commit's is published after it: sequences 1, 2, 3, ... in commit order,
 *     each following the last (skip-locked; the update-limit claim waits for open
 *     transactions instead).
 *
 * The publisher appends "aggregate_id id pid call sequence prev_sequence" lines to a file opened
 * O_APPEND, shared by every relay, in threads and in the child process: the file is the consumer's
 * view.
 */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "testdb.h"
#include "testrelayfix.h"
#include "testrelaythread.h"

/* ---- the appending publisher ---- */

struct appender {
    int fd;                   /* O_APPEND, shared */
    unsigned fail_per_mille;  /* random transient failures */
    int64_t fail_aggregate_a; /* every event of these aggregates fails (0: none) */
    int64_t fail_aggregate_b;
    unsigned kill_at_call; /* SIGKILL itself half-way through this call (0: never) */
    unsigned calls;
    uint32_t rng;
};

static uint32_t next_rand(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static void append_line(int fd, int64_t aggregate_id, const struct txo_outbox_message *m,
                        unsigned call)
{
    char line[160];
    int len = snprintf(line, sizeof(line), "%lld %lld %d %u %llu %llu\n", (long long)aggregate_id,
                       (long long)m->id, (int)getpid(), call, (unsigned long long)m->sequence,
                       (unsigned long long)m->prev_sequence);
    if (write(fd, line, (size_t)len) != len)
        abort(); /* a short write to a local file: nothing sensible is left to test */
}

static int app_publish(void *self, const struct txo_outbox_message *msgs, size_t n, int *results,
                       struct txo_error *errors)
{
    struct appender *a = self;
    a->calls++;
    for (size_t i = 0; i < n; i++) {
        if (a->kill_at_call != 0 && a->calls == a->kill_at_call && i == n / 2)
            raise(SIGKILL); /* published half the batch, marked none of it */
        int64_t agg = strtoll(msgs[i].aggregate_id, NULL, 10); /* the test writes integers */
        bool fail = (a->fail_aggregate_a != 0 && agg == a->fail_aggregate_a) ||
                    (a->fail_aggregate_b != 0 && agg == a->fail_aggregate_b) ||
                    next_rand(&a->rng) % 1000 < a->fail_per_mille;
        if (fail) {
            results[i] = txo_error_set(&errors[i], TXO_EPUBLISH, "broker said no");
            continue;
        }
        append_line(a->fd, agg, &msgs[i], a->calls);
        results[i] = 0;
    }
    return 0;
}

static struct txo_publisher *new_appender(int fd, uint32_t rng_start, struct appender **out)
{
    struct appender *a = txo_calloc(1, sizeof(*a));
    assert_non_null(a);
    a->fd = fd;
    a->rng = rng_start != 0 ? rng_start : 1;
    struct txo_publisher *pub = testrelay_publisher("appender", app_publish, a);
    *out = a;
    return pub;
}

/* ---- fixtures ---- */

struct ctx {
    struct testrelay_fixture rf; /* first: the database, and the file the publisher appends */
    struct testrelay_variant v;  /* what the test runs with */
};

static int setup(void **state)
{
    const struct testrelay_variant *v = *state;
    struct ctx *c = testrelay_fixture_new(sizeof(*c), v->db, "order");
    c->v = *v;
    *state = c;
    return 0;
}

static struct txo_relay_opts relay_opts(const struct ctx *c, unsigned batch, const char *id)
{
    struct txo_relay_opts o = testrelay_variant_opts(&c->v, batch);
    o.relay_id = id;
    o.idle_sleep_ms = 2;
    o.lease_s = 1;
    o.max_attempts = 1000000;
    o.backoff.base_ms = 1;
    o.backoff.max_ms = 20;
    o.shard_lease_ms = 2000; /* a dead relay's shards are taken over after 2 s */
    return o;
}

/* n events; event `seq` belongs to aggregate `agg_sql` (an expression of seq). */
static void insert_events(struct testdb *t, unsigned n, const char *agg_sql)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "
             "idempotency_key) SELECT 'order', %s, 'OrderChanged', JSON_OBJECT('n', seq), "
             "CONCAT('k:', seq) FROM seq_1_to_%u ORDER BY seq",
             agg_sql, n);
    testdb_exec(t->db, sql);
}

/* One line of the consumer's view. */
struct seen {
    int64_t aggregate_id;
    int64_t id;
    uint64_t sequence, prev_sequence;
};

static struct seen *read_seen(const char *path, size_t *n)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t cap = 1024, k = 0;
    struct seen *s = txo_malloc(cap * sizeof(*s));
    long long agg, id;
    unsigned long long seq, prev;
    int pid;
    unsigned call;
    while (fscanf(f, "%lld %lld %d %u %llu %llu", &agg, &id, &pid, &call, &seq, &prev) == 6) {
        if (k == cap) {
            cap *= 2;
            s = txo_realloc(s, cap * sizeof(*s));
        }
        s[k].aggregate_id = agg;
        s[k].id = id;
        s[k].sequence = seq;
        s[k].prev_sequence = prev;
        k++;
    }
    fclose(f);
    *n = k;
    return s;
}

/*
 * Per aggregate, the first copies of its events come in id order (the tests insert in id
 * order), each one's prev_sequence the sequence of the one before (no gap, a skip included),
 * and every id 1..n_events was seen. A copy of an event seen before is the at-least-once republish
 * of a batch whose relay died (a duplicate for the consumer's inbox, not an inversion): counted,
 * not checked. Returns the number of repeats.
 */
static size_t assert_in_order(const char *path, unsigned n_events, unsigned n_aggregates)
{
    size_t n = 0;
    struct seen *s = read_seen(path, &n);
    int64_t *last = txo_calloc(n_aggregates + 1, sizeof(*last));
    uint64_t *last_seq = txo_calloc(n_aggregates + 1, sizeof(*last_seq));
    bool *got = txo_calloc(n_events + 1, sizeof(*got));
    size_t repeats = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t a = s[i].aggregate_id;
        assert_true(a >= 0 && a <= (int64_t)n_aggregates);
        assert_true(s[i].id >= 1 && s[i].id <= (int64_t)n_events);
        if (got[s[i].id]) {
            repeats++;
            continue;
        }
        /* The events were inserted in id order, one statement: their sequences follow it, and
         * each first copy follows the one before it without a gap. */
        if (s[i].id < last[a] || s[i].prev_sequence != last_seq[a] ||
            s[i].sequence != s[i].prev_sequence + 1) {
            char cmd[160];
            snprintf(cmd, sizeof(cmd), "grep -n '^%lld ' %s >&2", (long long)a, path);
            if (system(cmd) != 0)
                print_error("could not list the aggregate's lines\n");
            fail_msg("aggregate %lld: event %lld (sequence %llu after %llu) seen after event %lld "
                     "(sequence %llu) (line %zu)",
                     (long long)a, (long long)s[i].id, (unsigned long long)s[i].sequence,
                     (unsigned long long)s[i].prev_sequence, (long long)last[a],
                     (unsigned long long)last_seq[a], i + 1);
        }
        got[s[i].id] = true;
        last[a] = s[i].id;
        last_seq[a] = s[i].sequence;
    }
    for (unsigned id = 1; id <= n_events; id++) {
        if (!got[id])
            fail_msg("event %u was never published", id);
    }
    txo_free(got);
    txo_free(last);
    txo_free(last_seq);
    txo_free(s);
    return repeats;
}

/* ---- many relays, random failures, one killed ---- */

struct runner {
    struct txo_db *db;
    struct txo_publisher *pub;
    struct testrelay_thread run;
};

/* A child process running one relay that kills itself mid-publish on its third call. */
static pid_t spawn_doomed_relay(struct ctx *c)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid != 0)
        return pid;
    struct txo_db *db = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_open(&c->rf.t.opts, &db, &err) < 0)
        _exit(3);
    struct appender *a = NULL;
    struct txo_publisher *pub = new_appender(c->rf.out.fd, 99, &a);
    a->fail_per_mille = 100;
    a->kill_at_call = 3;
    struct txo_relay_opts o = relay_opts(c, 100, "doomed");
    struct txo_relay *r = NULL;
    if (txo_relay_new(db, pub, &o, &r, &err) < 0)
        _exit(4);
    int rc = txo_relay_run(r, &err);
    _exit(rc < 0 ? 6 : 5); /* it should have died in publish */
}

static void drain_with_relays(struct ctx *c, unsigned n_threads)
{
    const unsigned n_events = 10000, n_aggregates = 500;

    pid_t child = spawn_doomed_relay(c);
    struct runner w[2];
    assert_true(n_threads <= 2);
    for (unsigned i = 0; i < n_threads; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].db = testdb_connect(&c->rf.t);
        struct appender *a = NULL;
        w[i].pub = new_appender(c->rf.out.fd, 1234 + i, &a);
        a->fail_per_mille = 100;
        struct txo_relay_opts o = relay_opts(c, 100, i == 0 ? "relay-a" : "relay-b");
        testrelay_thread_start(&w[i].run, testrelay_new(w[i].db, w[i].pub, &o));
    }
    /* Every relay holds its share of the shards before the events come, so that the doomed
     * one gets to publish (and die) while the others drain theirs. */
    int64_t until = txo_monotonic_ms() + 30000;
    while (testdb_q(c->rf.t.db,
                    "SELECT COUNT(DISTINCT owner) FROM outbox_shards WHERE owner IS NOT NULL") <
               (int64_t)n_threads + 1 &&
           txo_monotonic_ms() < until)
        txo_sleep_ms(20);
    insert_events(&c->rf.t, n_events, "CRC32(seq) % 500 + 1");
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
        fail_msg("the doomed relay did not die by SIGKILL (status %d)", status);

    int64_t deadline = txo_monotonic_ms() + 120000;
    int64_t published = 0;
    while ((published = TESTDB_COUNT(c->rf.t.db, "outbox_events WHERE status = "
                                                 "'PUBLISHED'")) < n_events &&
           txo_monotonic_ms() < deadline)
        txo_sleep_ms(50);
    for (unsigned i = 0; i < n_threads; i++)
        txo_relay_stop(w[i].run.relay);
    uint64_t reclaimed = 0, failed = 0;
    for (unsigned i = 0; i < n_threads; i++) {
        testrelay_thread_join(&w[i].run);
        struct txo_relay_stats st;
        txo_relay_get_stats(w[i].run.relay, &st);
        reclaimed += st.reclaimed;
        failed += st.failed_attempts;
        txo_relay_free(w[i].run.relay);
        txo_publisher_free(w[i].pub);
        txo_db_close(w[i].db);
    }
    assert_int_equal(published, n_events);
    size_t repeats = assert_in_order(c->rf.out.path, n_events, n_aggregates);
    print_message("%s, %s, %u relays (one killed): %zu repeats, %llu reclaimed, %llu failed "
                  "attempts\n",
                  txo_claim_strategy_name(c->v.claim), txo_relay_claim_mode_name(c->v.mode),
                  n_threads + 1, repeats, (unsigned long long)reclaimed,
                  (unsigned long long)failed);
    /* The killed relay's batch came back: by lease expiry, or (a held batch, its third and
     * so not the leased first) by the rollback of its transaction, with nothing to reclaim. */
    if (c->v.mode == TXO_RELAY_CLAIM_LEASE)
        assert_true(reclaimed > 0);
    assert_true(failed > 0);
}

static void test_two_relays_in_order(void **state)
{
    drain_with_relays(*state, 1);
}

static void test_three_relays_in_order(void **state)
{
    drain_with_relays(*state, 2);
}

/* ---- parking ---- */

static int64_t dead_letter_of(struct testdb *t, int64_t event_id)
{
    struct txo_param p = txo_p_i64(event_id);
    return testdb_i64(t->db, "SELECT MAX(id) FROM dead_letter_events WHERE source_event_id = ?", &p,
                      1);
}

/* Relay cycles (at most 200, a short pause after an empty one) until count_sql counts want. */
static void run_until(struct txo_relay *r, struct txo_db *db, const char *count_sql, int64_t want)
{
    for (int i = 0; i < 200 && testdb_q(db, count_sql) != want; i++) {
        if (testrelay_run_once(r) == 0)
            txo_sleep_ms(3);
    }
}

static void test_failing_aggregate_parks_only_itself(void **state)
{
    struct ctx *c = *state;
    /* 50 aggregates x 6 events, round robin: aggregate a has ids a, a + 50, ... (a = 50: 50,
     * 100, ...). Aggregates 7 and 11 fail until told otherwise. */
    insert_events(&c->rf.t, 300, "(seq - 1) % 50 + 1");
    struct appender *a = NULL;
    struct txo_publisher *pub = new_appender(c->rf.out.fd, 7, &a);
    a->fail_aggregate_a = 7;
    a->fail_aggregate_b = 11;
    struct txo_relay_opts o = relay_opts(c, 500, "parking");
    o.max_attempts = 3;
    struct txo_relay *r = testrelay_new(c->rf.t.db, pub, &o);

    /* After one failure the head waits for its retry: parked, PENDING. */
    testrelay_run_once(r);
    struct txo_relay_parked parked[8];
    size_t n = 0;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_relay_list_parked(c->rf.t.db, parked, 8, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(parked[0].aggregate_id, "7");
    assert_int_equal(parked[0].event_id, 7);
    assert_int_equal(parked[0].status, TXO_OUTBOX_PENDING);
    assert_int_equal(parked[0].attempts, 1);
    assert_int_equal(parked[0].waiting, 5);
    assert_non_null(strstr(parked[0].last_error, "broker said no"));

    /* Everything else flows while 7 and 11 use up their attempts and stay FAILED. */
    run_until(r, c->rf.t.db,
              "SELECT COUNT(*) FROM outbox_events WHERE status IN ('PENDING', 'PROCESSING') "
              "AND id % 50 NOT IN (7, 11)",
              0);
    run_until(r, c->rf.t.db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'FAILED'", 2);
    assert_int_equal(TESTDB_COUNT(c->rf.t.db, "outbox_events WHERE status = 'PUBLISHED'"),
                     300 - 12);
    assert_int_equal(TESTDB_COUNT(c->rf.t.db, "outbox_events WHERE status = 'FAILED' "
                                              "AND attempts = 3 AND id IN (7, 11)"),
                     2);
    /* Their later events were never tried. */
    assert_int_equal(TESTDB_COUNT(c->rf.t.db,
                                  "outbox_events WHERE status = 'PENDING' "
                                  "AND attempts = 0 AND id % 50 IN (7, 11) AND id > 11"),
                     10);
    assert_int_equal(txo_relay_list_parked(c->rf.t.db, parked, 8, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(parked[1].event_id, 11);
    assert_int_equal(parked[1].status, TXO_OUTBOX_FAILED);
    assert_int_equal(parked[1].waiting, 5);
    assert_int_equal(testrelay_run_once(r),
                     0); /* a FAILED head holds its aggregate: nothing to claim */

    /* The operator skips 7 and replays 11 (whose broker is fixed). */
    a->fail_aggregate_a = 0;
    a->fail_aggregate_b = 0;
    assert_int_equal(txo_dlq_skip(c->rf.t.db, dead_letter_of(&c->rf.t, 7), &err), 0);
    assert_int_equal(txo_dlq_skip(c->rf.t.db, dead_letter_of(&c->rf.t, 7), &err), TXO_ESTATE);
    assert_int_equal(txo_dlq_replay(c->rf.t.db, dead_letter_of(&c->rf.t, 11), &err), 0);
    for (int i = 0; i < 50 && testrelay_run_once(r) > 0; i++)
        ;
    assert_int_equal(TESTDB_COUNT(c->rf.t.db, "outbox_events WHERE status = 'PUBLISHED'"), 299);
    assert_int_equal(TESTDB_COUNT(c->rf.t.db, "outbox_events WHERE status = 'SKIPPED' "
                                              "AND id = 7"),
                     1);
    assert_int_equal(TESTDB_COUNT(c->rf.t.db, "dead_letter_events WHERE skipped_at IS NOT "
                                              "NULL"),
                     1);
    assert_int_equal(txo_relay_list_parked(c->rf.t.db, parked, 8, &n, &err), 0);
    assert_int_equal(n, 0);

    /* The consumer's view: 11 then its later events, 7's later events but never 7 itself. */
    size_t n_seen = 0;
    struct seen *s = read_seen(c->rf.out.path, &n_seen);
    assert_int_equal(n_seen, 299);
    int64_t last7 = 0, last11 = 0;
    for (size_t i = 0; i < n_seen; i++) {
        if (s[i].aggregate_id == 7) {
            assert_true(s[i].id > last7 && s[i].id != 7);
            last7 = s[i].id;
        } else if (s[i].aggregate_id == 11) {
            assert_true(s[i].id > last11);
            if (last11 == 0)
                assert_int_equal(s[i].id, 11);
            last11 = s[i].id;
        }
    }
    assert_int_equal(last7, 257);
    assert_int_equal(last11, 261);
    txo_free(s);
    txo_relay_free(r);
    txo_publisher_free(pub);
}

/* ---- a parked aggregate stays parked until its unpark commits ---- */

struct holder {
    struct testdb *t;
    const char *sql;
    atomic_int held;
    int64_t hold_ms;
};

/* Runs h->sql, says so, waits, and rolls back (returns an error on purpose). */
static int hold_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct holder *h = arg;
    int rc = txo_tx_exec(tx, h->sql, NULL, 0, NULL, err);
    if (rc < 0)
        return rc;
    atomic_store(&h->held, 1);
    txo_sleep_ms(h->hold_ms);
    return txo_error_set(err, TXO_EINVAL, "rolled back on purpose");
}

static void *holder_main(void *arg)
{
    struct holder *h = arg;
    struct txo_db *db = testdb_connect(h->t);
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, hold_tx, h, &err);
    if (rc != TXO_EINVAL) /* the rollback on purpose; anything else is a failure to hold */
        print_error("holder: %s\n", err.msg);
    txo_db_close(db);
    return NULL;
}

/* Runs one relay cycle while another session holds sql uncommitted; the cycle must neither
 * wait for it nor claim other than want_claimed events. */
static void hold_while(struct ctx *c, const char *sql, struct txo_relay *r, size_t want_claimed)
{
    struct holder h = {.t = &c->rf.t, .sql = sql, .hold_ms = 700};
    atomic_init(&h.held, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, holder_main, &h), 0);
    while (atomic_load(&h.held) == 0)
        txo_sleep_ms(1);
    int64_t t0 = txo_monotonic_ms();
    size_t claimed = testrelay_run_once(r);
    int64_t took_ms = txo_monotonic_ms() - t0;
    if (took_ms >= h.hold_ms / 2)
        fail_msg("the claim waited %lld ms for the held row instead of passing it",
                 (long long)took_ms);
    assert_int_equal(claimed, want_claimed);
    pthread_join(th, NULL);
}

static void test_unpark_seen_after_commit(void **state)
{
    struct ctx *c = *state;
    if (c->v.claim != TXO_CLAIM_SKIP_LOCKED)
        skip(); /* update-limit waits for the locked row instead of passing it */
    struct appender *a = NULL;
    struct txo_publisher *pub = new_appender(c->rf.out.fd, 5, &a);
    struct txo_relay_opts o = relay_opts(c, 10, "pred");
    o.lease_s = 60;
    o.backoff.base_ms = 60000; /* a failed event waits: only the test makes it due */
    o.backoff.max_ms = 60000;
    struct txo_relay *r = testrelay_new(c->rf.t.db, pub, &o);
    /* The first cycle's lease reclaim would wait for a held row (it walks the PROCESSING
     * range); the next is due in lease_s / 4. */
    assert_int_equal(testrelay_run_once(r), 0);
    /* Aggregate 1: ids 1, 2; aggregate 2: ids 3, 4. Event 1 fails once and parks 1. */
    insert_events(&c->rf.t, 4, "(seq + 1) DIV 2");
    a->fail_aggregate_a = 1;
    assert_int_equal(testrelay_run_once(r), 4); /* 1 fails, 2 is held back, 3 and 4 go */
    a->fail_aggregate_a = 0;
    assert_int_equal(TESTDB_COUNT(c->rf.t.db, "outbox_parked WHERE event_id = 1"), 1);
    assert_int_equal(TESTDB_COUNT(c->rf.t.db, "outbox_events WHERE id = 2 AND status = "
                                              "'PENDING' AND attempts = 0"),
                     1);

    /* Another session removes the park of 1 without committing (as a skip would): 2 still
     * waits, and the claim does not wait for that session. */
    hold_while(c, "DELETE FROM outbox_parked WHERE event_id = 1", r, 0);
    testdb_exec(c->rf.t.db, "UPDATE outbox_events SET next_attempt_at = NOW(6) WHERE id = 1");
    /* Nothing holds it now: 1, then 2. */
    assert_int_equal(testrelay_run_once(r), 1);
    assert_int_equal(TESTDB_COUNT(c->rf.t.db, "outbox_parked"), 0);
    assert_int_equal(testrelay_run_once(r), 1);
    size_t n = 0;
    struct seen *s = read_seen(c->rf.out.path, &n);
    assert_int_equal(n, 4);
    assert_int_equal(s[0].id, 3);
    assert_int_equal(s[1].id, 4);
    assert_int_equal(s[2].id, 1);
    assert_int_equal(s[3].id, 2);
    txo_free(s);
    txo_relay_free(r);
    txo_publisher_free(pub);
}

/* ---- commit order: appends to one aggregate commit one after the other ---- */

struct appender_tx {
    struct testdb *t;
    const char *sql;     /* the INSERT, as it is */
    bool rollback;       /* end the transaction by rolling it back */
    atomic_int inserted; /* the INSERT returned: the rows are in, uncommitted */
    atomic_int end;      /* the test says: commit (or roll back) now */
    int64_t id;          /* the first row's id */
};

static int append_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct appender_tx *a = arg;
    struct txo_exec_result res = {0};
    int rc = txo_tx_exec(tx, a->sql, NULL, 0, &res, err);
    if (rc < 0)
        return rc;
    a->id = (int64_t)res.insert_id;
    atomic_store(&a->inserted, 1);
    while (atomic_load(&a->end) == 0)
        txo_sleep_ms(1);
    return a->rollback ? txo_error_set(err, TXO_EBUSINESS, "rolled back by the test") : 0;
}

static void *append_main(void *arg)
{
    struct appender_tx *a = arg;
    struct txo_db *db = testdb_connect(a->t);
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_transact(db, TXO_ISO_READ_COMMITTED, append_tx, a, &err) < 0 && !a->rollback)
        print_error("appender %s: %s\n", a->sql, err.msg);
    txo_db_close(db);
    return NULL;
}

/* Starts an appending transaction; does not wait for its INSERT. */
static void start_append(struct appender_tx *a, pthread_t *th)
{
    atomic_init(&a->inserted, 0);
    atomic_init(&a->end, 0);
    assert_int_equal(pthread_create(th, NULL, append_main, a), 0);
}

static void wait_inserted(struct appender_tx *a)
{
    int64_t deadline = txo_monotonic_ms() + 10000;
    while (atomic_load(&a->inserted) == 0) {
        if (txo_monotonic_ms() > deadline)
            fail_msg("%s did not return within 10 s", a->sql);
        txo_sleep_ms(1);
    }
}

/* The INSERT is still waiting (for the aggregate's counter another transaction holds). */
static void assert_waiting(struct appender_tx *a)
{
    txo_sleep_ms(300);
    if (atomic_load(&a->inserted) != 0)
        fail_msg("%s went through while another transaction held its aggregate", a->sql);
}

static void end_append(struct appender_tx *a, pthread_t th)
{
    atomic_store(&a->end, 1);
    pthread_join(th, NULL);
}

#define APPEND_SQL(rows)                                                                           \
    "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "               \
    "idempotency_key) VALUES " rows
#define APPEND_ONE(agg, key) APPEND_SQL("('order', '" agg "', 'OrderChanged', '{}', '" key "')")

/*
 * Commit order is sequence order is publish order, for aggregate 9:
 *   a, b   b's INSERT waits while a is open; a commits and is published alone, then b;
 *   c, d   c rolls back: d, which waited, takes the number c gave back (no gap);
 *   e, f, g  ids out of commit order: f is one multi-row INSERT (x, y, 9) that takes its ids
 *          at its first row, then waits for y's counter (held by e); meanwhile g appends to
 *          9 with a later id and holds it; f's row of 9 waits for g. g commits first, so g
 *          comes before f although f's id is lower.
 * The consumer sees 9's events a, b, d, g, f with sequences 1..5, each following the last.
 */
static void test_commit_order(void **state)
{
    struct ctx *c = *state;
    if (c->v.claim != TXO_CLAIM_SKIP_LOCKED)
        skip(); /* update-limit waits for the open transaction's rows: it cannot pass them */
    struct appender *ap = NULL;
    struct txo_publisher *pub = new_appender(c->rf.out.fd, 5, &ap);
    struct txo_relay_opts o = relay_opts(c, 10, "commit-order");
    struct txo_relay *r = testrelay_new(c->rf.t.db, pub, &o);
    assert_int_equal(testrelay_run_once(r), 0);
    pthread_t ta, tb;

    struct appender_tx a = {.t = &c->rf.t, .sql = APPEND_ONE("9", "a")};
    struct appender_tx b = {.t = &c->rf.t, .sql = APPEND_ONE("9", "b")};
    start_append(&a, &ta);
    wait_inserted(&a);
    start_append(&b, &tb);
    assert_waiting(&b);
    assert_int_equal(testrelay_run_once(r), 0); /* nothing committed */
    end_append(&a, ta);
    wait_inserted(&b);
    assert_true(a.id < b.id);
    assert_int_equal(testrelay_run_once(r), 1); /* a; b is not committed */
    end_append(&b, tb);
    assert_int_equal(testrelay_run_once(r), 1);

    struct appender_tx cc = {.t = &c->rf.t, .sql = APPEND_ONE("9", "c"), .rollback = true};
    struct appender_tx d = {.t = &c->rf.t, .sql = APPEND_ONE("9", "d")};
    start_append(&cc, &ta);
    wait_inserted(&cc);
    start_append(&d, &tb);
    assert_waiting(&d);
    end_append(&cc, ta);
    wait_inserted(&d);
    end_append(&d, tb);
    assert_int_equal(testrelay_run_once(r), 1);

    pthread_t tc;
    struct appender_tx e = {.t = &c->rf.t, .sql = APPEND_ONE("10", "e")};
    struct appender_tx f = {.t = &c->rf.t,
                            .sql = APPEND_SQL("('order', '11', 'OrderChanged', '{}', 'f1'), "
                                              "('order', '10', 'OrderChanged', '{}', 'f2'), "
                                              "('order', '9', 'OrderChanged', '{}', 'f3')")};
    struct appender_tx g = {.t = &c->rf.t, .sql = APPEND_ONE("9", "g")};
    start_append(&e, &ta);
    wait_inserted(&e);
    start_append(&f, &tb);
    assert_waiting(&f); /* its row of 11 is in, with the statement's ids; it waits for 10 */
    start_append(&g, &tc);
    wait_inserted(&g);
    end_append(&e, ta);
    assert_waiting(&f); /* now for 9, which g holds */
    end_append(&g, tc);
    wait_inserted(&f);
    end_append(&f, tb);
    int64_t f3 = testdb_q(c->rf.t.db, "SELECT id FROM outbox_events WHERE idempotency_key = 'f3'");
    if (f3 > g.id)
        fail_msg("f's row of 9 has id %lld, g's %lld: the ids came in commit order, so this "
                 "does not test what it says (innodb_autoinc_lock_mode = 2?)",
                 (long long)f3, (long long)g.id);
    while (testrelay_run_once(r) > 0)
        ;

    size_t n = 0;
    struct seen *s = read_seen(c->rf.out.path, &n);
    const int64_t want[] = {a.id, b.id, d.id, g.id, f3};
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i].aggregate_id != 9)
            continue;
        assert_true(k < TXO_ARRAY_LEN(want));
        if (s[i].id != want[k] || s[i].sequence != k + 1 || s[i].prev_sequence != k)
            fail_msg("aggregate 9, event %zu seen: id %lld sequence %llu after %llu; want id "
                     "%lld sequence %zu after %zu",
                     k + 1, (long long)s[i].id, (unsigned long long)s[i].sequence,
                     (unsigned long long)s[i].prev_sequence, (long long)want[k], k + 1, k);
        k++;
    }
    assert_int_equal(k, TXO_ARRAY_LEN(want));
    assert_int_equal(n, TXO_ARRAY_LEN(want) + 3); /* and e, f1, f2 */
    txo_free(s);
    txo_relay_free(r);
    txo_publisher_free(pub);
}

#define ONE(fn, v)                                                                                 \
    cmocka_unit_test_prestate_setup_teardown(fn, setup, testrelay_fixture_free_state, &v)
#define BOTH(fn) ONE(fn, testrelay_skip_locked), ONE(fn, testrelay_update_limit)
#define ALL(fn)  BOTH(fn), ONE(fn, testrelay_held)

int main(void)
{
    const struct CMUnitTest tests[] = {
        BOTH(test_unpark_seen_after_commit),
        ALL(test_commit_order),
        ALL(test_failing_aggregate_parks_only_itself),
        ALL(test_two_relays_in_order),
        ALL(test_three_relays_in_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
