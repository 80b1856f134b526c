/*
 * The worker's use of the inbox's order check, in-process against a real MariaDB, with
 * envelopes as txo publishes them (sequence, prev_sequence) handed to
 * txo_worker_handle_message and txo_worker_handle_many as a transport would:
 *   - events in order, after a gap and older after newer are all handled, the last two
 *     counted in txo_inbox_out_of_order_total by aggregate type and kind;
 *   - a handler that holds out-of-order events refuses one after a gap as transient (no
 *     effect, no inbox row) until its predecessor was handled, then takes it; held longer than
 *     its bound, the event is refused for good with the reason; a batch with such an event
 *     gives it that verdict alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testdb.h"
#include "testworker.h"
#include "txo/metrics.h"
#include "txo/worker.h"

static int apply(struct txo_tx *tx, const struct txo_event *ev, struct txo_handler_ctx *hc,
                 struct txo_error *err)
{
    (void)hc;
    struct txo_param p = txo_p_str(ev->idempotency_key);
    return txo_tx_exec(tx, "INSERT INTO effects (event_id) VALUES (?)", &p, 1, NULL, err);
}

static const struct txo_event_handler lenient[] = {{.event_type = "Moved", .fn = apply}};
static const struct txo_event_handler strict[] = {
    {.event_type = "Moved", .fn = apply, .hold_out_of_order_ms = 400}};

static int setup_with(void **state, const struct txo_event_handler *handlers)
{
    struct testworker *f = testdb_fixture_new(sizeof(*f), "worder", 0);
    testdb_exec(f->t.db, "CREATE TABLE effects (event_id VARCHAR(255) PRIMARY KEY)");
    struct txo_worker_opts wo;
    txo_worker_opts_init(&wo);
    wo.saga_threads = 1;
    wo.retention.interval_s = 0;
    wo.events = handlers;
    wo.n_events = 1;
    testworker_new(f, &wo);
    *state = f;
    return 0;
}

static int setup_lenient(void **state)
{
    return setup_with(state, lenient);
}

static int setup_strict(void **state)
{
    return setup_with(state, strict);
}

/* The envelope of event seq (following prev) of account `acct`; its key is "acct:<seq>". */
struct env {
    char key[48];
    char *text;
};

static void make(struct env *e, const char *acct, uint64_t seq, uint64_t prev)
{
    snprintf(e->key, sizeof(e->key), "%s:%llu", acct, (unsigned long long)seq);
    struct txo_outbox_message m = {.id = (int64_t)seq,
                                   .aggregate_type = "account",
                                   .aggregate_id = acct,
                                   .event_type = "Moved",
                                   .payload = "{}",
                                   .idempotency_key = e->key,
                                   .created_at = "2026-12-01T00:00:00.000000Z",
                                   .attempt = 1,
                                   .sequence = seq,
                                   .prev_sequence = prev};
    struct txo_error err;
    txo_error_init(&err);
    e->text = txo_envelope_encode_as(&m, TXO_ENVELOPE_TXO, NULL, NULL, &err);
    assert_non_null(e->text);
}

static struct txo_inbound_message inbound(const struct env *e)
{
    return (struct txo_inbound_message){
        .data = e->text, .len = strlen(e->text), .msg_id = e->key, .delivery = 1};
}

static int deliver(struct testworker *f, const char *acct, uint64_t seq, uint64_t prev,
                   struct txo_error *err)
{
    struct env e;
    make(&e, acct, seq, prev);
    struct txo_inbound_message msg = inbound(&e);
    txo_error_init(err);
    int rc = txo_worker_handle_message(f->w, &msg, err);
    txo_free(e.text);
    return rc;
}

static int64_t effects(struct testworker *f, const char *key)
{
    struct txo_param p = txo_p_str(key);
    return testdb_i64(f->t.db, "SELECT COUNT(*) FROM effects WHERE event_id = ?", &p, 1);
}

/* txo_inbox_out_of_order_total{aggregate_type="account",kind=...} as /metrics shows it. */
static double out_of_order(struct testworker *f, const char *kind)
{
    char *text = NULL;
    size_t len = 0;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_metrics_render(f->metrics, &text, &len, &err), 0);
    char line[128];
    snprintf(line, sizeof(line),
             "txo_inbox_out_of_order_total{aggregate_type=\"account\",kind=\"%s\"} ", kind);
    const char *at = strstr(text, line);
    double v = at != NULL ? strtod(at + strlen(line), NULL) : 0.0;
    txo_free(text);
    return v;
}

/* One event of a batch: its account, sequence and prev_sequence. */
struct batch_event {
    const char *acct;
    uint64_t seq, prev;
};

/* Hands the three events to the worker in one txo_worker_handle_many(); their verdicts in
 * results. */
static void handle_three(struct testworker *f, const struct batch_event ev[3], int results[3])
{
    struct env e[3];
    struct txo_inbound_message msgs[3];
    struct txo_error errors[3];
    for (int i = 0; i < 3; i++) {
        make(&e[i], ev[i].acct, ev[i].seq, ev[i].prev);
        msgs[i] = inbound(&e[i]);
        txo_error_init(&errors[i]);
    }
    assert_int_equal(txo_worker_handle_many(f->w, msgs, 3, results, errors), 0);
    for (int i = 0; i < 3; i++)
        txo_free(e[i].text);
}

static void test_counted_and_handled(void **state)
{
    struct testworker *f = *state;
    struct txo_error err;
    assert_int_equal(deliver(f, "a", 1, 0, &err), 0);
    assert_int_equal(deliver(f, "a", 3, 2, &err), 0); /* 2 not handled yet: a gap */
    assert_int_equal(deliver(f, "a", 2, 1, &err), 0); /* late: older after newer */
    assert_int_equal(deliver(f, "a", 3, 2, &err), 0); /* a copy: the inbox drops it */
    assert_int_equal(deliver(f, "b", 5, 4, &err), 0); /* first seen mid-stream: a gap */
    assert_true(effects(f, "a:1") == 1 && effects(f, "a:2") == 1 && effects(f, "a:3") == 1);
    assert_int_equal(effects(f, "b:5"), 1);
    assert_true(out_of_order(f, "gap") == 2.0);
    assert_true(out_of_order(f, "older") == 1.0);

    /* A batch: judged in one check, each against the one before. */
    static const struct batch_event batch[3] = {{"c", 1, 0}, {"c", 2, 1}, {"c", 4, 3}};
    int results[3];
    handle_three(f, batch, results);
    assert_true(results[0] == 0 && results[1] == 0 && results[2] == 0);
    assert_true(out_of_order(f, "gap") == 3.0);
    assert_int_equal(testdb_i64(f->t.db,
                                "SELECT last_sequence FROM inbox_aggregates WHERE aggregate_id "
                                "= 'c'",
                                NULL, 0),
                     4);
}

static void test_held_until_the_predecessor_then_parked(void **state)
{
    struct testworker *f = *state;
    struct txo_error err;
    assert_int_equal(deliver(f, "a", 2, 1, &err), TXO_EUNAVAILABLE); /* 1 not handled yet */
    assert_non_null(strstr(err.msg, "held: event a:2"));
    assert_int_equal(effects(f, "a:2"), 0);
    assert_int_equal(testdb_i64(f->t.db, "SELECT COUNT(*) FROM inbox_events", NULL, 0), 0);
    assert_int_equal(deliver(f, "a", 1, 0, &err), 0);
    assert_int_equal(deliver(f, "a", 2, 1, &err), 0); /* delivered again: its turn now */
    assert_int_equal(effects(f, "a:2"), 1);
    assert_true(out_of_order(f, "gap") == 0.0);

    /* 3 never comes: 4 is held, then parked for good after 400 ms, the gap counted. */
    assert_int_equal(deliver(f, "a", 4, 3, &err), TXO_EUNAVAILABLE);
    txo_sleep_ms(200);
    assert_int_equal(deliver(f, "a", 4, 3, &err), TXO_EUNAVAILABLE);
    txo_sleep_ms(250);
    assert_int_equal(deliver(f, "a", 4, 3, &err), TXO_EBUSINESS);
    assert_non_null(strstr(err.msg, "parked: event a:4"));
    assert_non_null(strstr(err.msg, "not handled within 400 ms"));
    assert_int_equal(effects(f, "a:4"), 0);
    assert_true(out_of_order(f, "gap") == 1.0);

    /* In a batch, the held event gets its verdict alone; the others are handled. */
    static const struct batch_event batch[3] = {{"b", 1, 0}, {"b", 3, 2}, {"d", 1, 0}};
    int results[3];
    handle_three(f, batch, results);
    assert_int_equal(results[0], 0);
    assert_int_equal(results[1], TXO_EUNAVAILABLE);
    assert_int_equal(results[2], 0);
    assert_true(effects(f, "b:1") == 1 && effects(f, "b:3") == 0 && effects(f, "d:1") == 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_counted_and_handled, setup_lenient,
                                        testworker_free_state),
        cmocka_unit_test_setup_teardown(test_held_until_the_predecessor_then_parked, setup_strict,
                                        testworker_free_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
