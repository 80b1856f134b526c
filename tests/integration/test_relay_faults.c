/*
 * Poison events, permanent failures and the circuit breaker, against a real MariaDB:
 *   - a publisher that abort()s the relay's process on one event: relays in child processes
 *     die on it one after the other until its lease expired max_lease_expiries times; then it
 *     is FAILED with a dead letter saying so and every other event is published; the events
 *     that shared its batches do not reach the limit with it (they are published before it
 *     once their own lease expired: a suspect is published alone);
 *   - a permanent publish error is dead-lettered at once with the broker's reason, a
 *     transient one goes back to PENDING with backoff;
 *   - the breaker: batches failing entirely open it, nothing is claimed while it is open (no
 *     attempt is used), one small probe batch half-opens it, success closes it; its state and
 *     the relay's counters are in the relay's own metrics.
 *
 * The publisher appends "id" lines to a file opened O_APPEND (the consumer's view).
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
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "testoutbox.h"
#include "testrun.h"
#include "testdb.h"
#include "testrelayfix.h"
#include "testsql.h"

struct poisoned {
    int fd;
    int64_t abort_id;     /* abort() the process when asked to publish this event */
    int64_t permanent_id; /* fail this one with TXO_EBUSINESS */
    int64_t transient_id; /* and this one with TXO_EUNAVAILABLE */
    bool down;            /* fail everything with TXO_EUNAVAILABLE */
    size_t last_batch;    /* size of the last batch handed over */
};

static int poisoned_publish(void *self, const struct txo_outbox_message *msgs, size_t n,
                            int *results, struct txo_error *errors)
{
    struct poisoned *p = self;
    p->last_batch = n;
    for (size_t i = 0; i < n; i++) {
        if (p->down) {
            results[i] = txo_error_set(&errors[i], TXO_EUNAVAILABLE, "broker down");
            continue;
        }
        if (msgs[i].id == p->abort_id)
            abort();
        if (msgs[i].id == p->permanent_id) {
            results[i] = txo_error_set(&errors[i], TXO_EBUSINESS, "HTTP 422: no such customer");
            continue;
        }
        if (msgs[i].id == p->transient_id) {
            results[i] = txo_error_set(&errors[i], TXO_EUNAVAILABLE, "HTTP 503: try later");
            continue;
        }
        char line[32];
        int len = snprintf(line, sizeof(line), "%lld\n", (long long)msgs[i].id);
        if (write(p->fd, line, (size_t)len) != len)
            abort();
        results[i] = 0;
    }
    return 0;
}

static struct txo_publisher *new_poisoned(int fd, struct poisoned **out)
{
    struct poisoned *p = txo_calloc(1, sizeof(*p));
    assert_non_null(p);
    p->fd = fd;
    struct txo_publisher *pub = testrelay_publisher("poisoned", poisoned_publish, p);
    *out = p;
    return pub;
}

static int setup(void **state)
{
    *state = testrelay_fixture_new(sizeof(struct testrelay_fixture), "poison", "poison");
    return 0;
}

static struct txo_relay_opts poison_opts(void)
{
    struct txo_relay_opts o;
    txo_relay_opts_init(&o);
    o.relay_id = "poisoned";
    o.batch_size = 10;
    o.lease_s = 1;
    o.shard_lease_ms = 1000; /* the next relay takes a dead one's shards over after 1 s */
    o.max_lease_expiries = 3;
    o.idle_sleep_ms = 5;
    o.drain = true;
    return o;
}

/* One relay in a child process, draining in the given claim mode; returns its wait status. */
static int run_child_relay(struct testrelay_fixture *c, int64_t abort_id,
                           enum txo_relay_claim_mode mode)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        (void)setrlimit(RLIMIT_CORE, &no_core);
        struct txo_db *db = NULL;
        struct txo_error err;
        txo_error_init(&err);
        if (txo_db_open(&c->t.opts, &db, &err) < 0)
            _exit(3);
        struct poisoned *p = NULL;
        struct txo_publisher *pub = new_poisoned(c->out.fd, &p);
        p->abort_id = abort_id;
        struct txo_relay_opts o = poison_opts();
        o.mode = mode;
        struct txo_relay *r = NULL;
        if (txo_relay_new(db, pub, &o, &r, &err) < 0)
            _exit(4);
        int rc = txo_relay_run(r, &err);
        _exit(rc < 0 ? 5 : 0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

/*
 * Relays die on event poison_id one after the other until it is dead-lettered; returns how
 * many died. Then checks the outcome (see the top of the file).
 */
static unsigned poison_rounds(struct testrelay_fixture *c, unsigned n, int64_t poison_id,
                              enum txo_relay_claim_mode mode)
{
    testoutbox_insert_seq(c->t.db, n, "k");
    unsigned crashes = 0;
    for (int round = 0; round < 8; round++) {
        int status = run_child_relay(c, poison_id, mode);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
            break;
        if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
            fail_msg("round %d: the relay ended with status %d, not by abort()", round, status);
        crashes++;
        txo_sleep_ms(1100); /* its lease expires */
    }
    struct txo_param poison = txo_p_i64(poison_id);
    assert_int_equal(testsql_i64_of(c->t.db,
                                    "SELECT COUNT(*) FROM outbox_events WHERE id = ? AND status = "
                                    "'FAILED' AND lease_expiries = 3 AND locked_by IS NULL",
                                    poison_id),
                     1);
    char *error = testdb_str(
        c->t.db, "SELECT error FROM dead_letter_events WHERE source_event_id = ?", &poison, 1);
    assert_non_null(error);
    if (strstr(error, "lease expired 3 times") == NULL)
        fail_msg("dead letter error \"%s\"", error);
    txo_free(error);
    assert_int_equal(TESTDB_COUNT(c->t.db, "dead_letter_events"), 1);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED'"), n - 1);
    /* The events of its batches expired with it at most twice. */
    assert_true(testsql_i64_of(c->t.db,
                               "SELECT MAX(lease_expiries) FROM outbox_events WHERE id <> ?",
                               poison_id) <= 2);

    /* The consumer saw every other event (some twice: published, then the relay died before
     * marking them), and never the poison one. */
    FILE *f = fopen(c->out.path, "r");
    assert_non_null(f);
    bool seen[21] = {false};
    long long id;
    while (fscanf(f, "%lld", &id) == 1) {
        assert_true(id >= 1 && id <= (long long)n && id != poison_id);
        seen[id] = true;
    }
    fclose(f);
    for (unsigned i = 1; i <= n; i++)
        assert_true(seen[i] == (i != poison_id));
    return crashes;
}

static void test_poison_event_dead_lettered_after_lease_limit(void **state)
{
    /* Leased claims: every kill counts. */
    assert_int_equal(poison_rounds(*state, 20, 5, TXO_RELAY_CLAIM_LEASE), 3);
}

static void test_poison_event_in_claim_mode_transaction(void **state)
{
    /*
     * Held claims: the poison event sits in the second batch (the first after start is
     * leased). The first kill rolls its transaction back and leaves no trace; the restarted
     * relay's first batch is leased and holds it, so every kill from the second on counts:
     * one kill more than with leases.
     */
    assert_int_equal(poison_rounds(*state, 20, 15, TXO_RELAY_CLAIM_TRANSACTION), 4);
}

static void test_permanent_failure_dead_lettered_at_once(void **state)
{
    struct testrelay_fixture *c = *state;
    testoutbox_insert_seq(c->t.db, 4, "k");
    struct poisoned *p = NULL;
    struct txo_publisher *pub = new_poisoned(c->out.fd, &p);
    p->permanent_id = 2;
    p->transient_id = 3;
    struct txo_relay_opts o = poison_opts();
    o.drain = false;
    struct txo_relay *r = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_relay_new(c->t.db, pub, &o, &r, &err), 0);
    size_t claimed = 0;
    assert_int_equal(txo_relay_run_once(r, &claimed, &err), 0);
    assert_int_equal(claimed, 4);

    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE id = 2 AND status = "
                                           "'FAILED' AND attempts = 1"),
                     1);
    assert_int_equal(TESTDB_COUNT(c->t.db,
                                  "dead_letter_events WHERE source_event_id = 2 "
                                  "AND error = 'TXO_EBUSINESS: HTTP 422: no such customer'"),
                     1);
    assert_int_equal(TESTDB_COUNT(c->t.db,
                                  "outbox_events WHERE id = 3 AND status = "
                                  "'PENDING' AND attempts = 1 AND next_attempt_at > NOW(6) AND "
                                  "last_error = 'TXO_EUNAVAILABLE: HTTP 503: try later'"),
                     1);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED'"), 2);
    struct txo_relay_stats st;
    txo_relay_get_stats(r, &st);
    assert_int_equal(st.dead_lettered, 1);
    assert_int_equal(st.failed_attempts, 1);
    assert_int_equal(st.published, 2);
    txo_relay_free(r);
    txo_publisher_free(pub);
}

static double metric(struct txo_metrics *reg, const char *name)
{
    struct txo_error err;
    txo_error_init(&err);
    /* Registering again returns the family the relay registered. */
    enum txo_metric_type type =
        strcmp(name, "txo_relay_breaker_state") == 0 ? TXO_METRIC_GAUGE : TXO_METRIC_COUNTER;
    struct txo_metric *m = txo_metrics_register(reg, type, name, "x", 0, NULL, NULL, 0, &err);
    if (m == NULL)
        fail_msg("metric %s: %s", name, err.msg);
    return txo_metric_value(m, NULL);
}

/* The sum over every aggregate type of the histogram series `name` (e.g. "..._count{"). */
static double histogram_total(struct txo_metrics *reg, const char *series)
{
    struct txo_error err;
    txo_error_init(&err);
    char *text = NULL;
    size_t len = 0;
    if (txo_metrics_render(reg, &text, &len, &err) != 0)
        fail_msg("render: %s", err.msg);
    double total = 0;
    size_t n = strlen(series);
    for (const char *p = text; (p = strstr(p, series)) != NULL; p += n)
        if (p == text || p[-1] == '\n')
            total += strtod(strchr(p, ' ') + 1, NULL);
    txo_free(text);
    return total;
}

static void test_breaker_open_half_open_closed(void **state)
{
    struct testrelay_fixture *c = *state;
    testoutbox_insert_seq(c->t.db, 50, "k");
    struct txo_metrics *reg = NULL;
    assert_int_equal(txo_metrics_new(&reg, NULL), 0);
    struct poisoned *p = NULL;
    struct txo_publisher *pub = new_poisoned(c->out.fd, &p);
    struct txo_relay_opts o = poison_opts();
    o.drain = false;
    o.breaker_failures = 2;
    o.breaker_open_ms = 300;
    o.breaker_probe_batch = 3;
    o.backoff.base_ms = 1;
    o.backoff.max_ms = 1;
    o.backoff.jitter = 0;
    o.metrics = reg;
    struct txo_relay *r = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_relay_new(c->t.db, pub, &o, &r, &err), 0);
    assert_true(metric(reg, "txo_relay_breaker_state") == 0);

    /* Two batches of 10 fail entirely: open. */
    p->down = true;
    assert_int_equal(testrelay_run_once(r), 10);
    assert_int_equal(txo_relay_breaker_state(r), TXO_BREAKER_CLOSED);
    txo_sleep_ms(5);
    assert_int_equal(testrelay_run_once(r), 10);
    assert_int_equal(txo_relay_breaker_state(r), TXO_BREAKER_OPEN);
    assert_true(metric(reg, "txo_relay_breaker_state") == 1);
    assert_int_equal(testdb_q(c->t.db, "SELECT SUM(attempts) FROM outbox_events"), 20);

    /* Open: nothing is claimed, no attempt is used, though events are due. */
    for (int i = 0; i < 5; i++)
        assert_int_equal(testrelay_run_once(r), 0);
    assert_int_equal(testdb_q(c->t.db, "SELECT SUM(attempts) FROM outbox_events"), 20);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PENDING'"), 50);

    /* After open_ms, a probe of 3 while still down: open again. */
    txo_sleep_ms(350);
    assert_int_equal(testrelay_run_once(r), 3);
    assert_int_equal(p->last_batch, 3);
    assert_int_equal(txo_relay_breaker_state(r), TXO_BREAKER_OPEN);
    assert_int_equal(testrelay_run_once(r), 0);
    assert_int_equal(testdb_q(c->t.db, "SELECT SUM(attempts) FROM outbox_events"), 23);

    /* The broker is back: the next probe succeeds, the breaker closes, the rest flows. */
    p->down = false;
    txo_sleep_ms(350);
    assert_int_equal(testrelay_run_once(r), 3);
    assert_int_equal(txo_relay_breaker_state(r), TXO_BREAKER_CLOSED);
    assert_true(metric(reg, "txo_relay_breaker_state") == 0);
    for (int i = 0; i < 20 && TESTDB_COUNT(c->t.db, "outbox_events WHERE status <> "
                                                    "'PUBLISHED'") > 0;
         i++)
        (void)testrelay_run_once(r);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED'"), 50);
    /* Each event was tried once while the broker was down at most (20 + 3 attempts). */
    assert_int_equal(testdb_q(c->t.db, "SELECT MAX(attempts) FROM outbox_events"), 1);

    /* The relay's own counters. */
    assert_true(metric(reg, "txo_outbox_published_total") == 50);
    assert_true(metric(reg, "txo_outbox_publish_failures_total") == 23);
    assert_true(metric(reg, "txo_outbox_publish_attempts_total") == 73);
    assert_true(metric(reg, "txo_outbox_dead_lettered_total") == 0);
    /* Each published event's delay was observed once; none was published before the broker
     * came back, 0.7 s after the inserts. */
    assert_true(histogram_total(reg, "txo_outbox_publish_delay_seconds_count{") == 50);
    double delay_sum = histogram_total(reg, "txo_outbox_publish_delay_seconds_sum{");
    if (delay_sum < 50 * 0.6 || delay_sum > 50 * 60)
        fail_msg("publish delays summing to %g s for 50 events", delay_sum);
    txo_relay_free(r);
    txo_publisher_free(pub);
    txo_metrics_free(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_permanent_failure_dead_lettered_at_once),
        cmocka_unit_test(test_poison_event_in_claim_mode_transaction),
        cmocka_unit_test(test_poison_event_dead_lettered_after_lease_limit),
        cmocka_unit_test(test_breaker_open_half_open_closed),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, testrelay_fixture_free_state, NULL,
                        NULL);
}
