/*
 * The local dispatch publisher (txo_publisher_local_new) with the relay on a real MariaDB: each
 * event reaches the in-process handler once, as the published envelope with msg_id = the
 * idempotency key, and the handler's own transaction (an inbox row) commits; a handler
 * failure leaves the row PENDING with attempts, last_error and a backoff, and it is delivered
 * (delivery 2) once the handler recovers; a handler that keeps failing dead-letters the event
 * after max_attempts like any publish failure. The same again with the handler's events form
 * (struct txo_handler.events), which the publisher then uses instead of envelopes: the same
 * fields, the payload as the envelope would carry it, and a payload the decoder would refuse
 * failed before the handler.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "testrun.h"
#include "testdb.h"
#include "testoutbox.h"
#include "testrelay.h"
#include "txo/consumer.h"

struct ctx {
    struct testdb t;
    struct txo_db *consumer_db; /* the handler's own connection */
    int fail_code;              /* != 0: the handler fails with this */
    bool follow_up;             /* the handler appends OrderFollowed to each OrderCreated's order */
    bool events;                /* the publisher is given the events form too (and uses it) */
    unsigned event_batches;     /* calls of the events form */
    unsigned calls;
    uint64_t last_delivery;
    char last_msg_id[64];
    struct txo_publisher *pub; /* the test's local publisher and its relay (local_relay) */
    struct txo_relay *relay;
};

static int setup(void **state)
{
    struct ctx *c = testdb_fixture_new(sizeof(*c), "local_dispatch", 0);
    c->consumer_db = testdb_connect(&c->t);
    *state = c;
    return 0;
}

/* setup() with the events form given to the publisher: the same tests, no envelope. */
static int setup_events(void **state)
{
    int rc = setup(state);
    ((struct ctx *)*state)->events = true;
    return rc;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    txo_relay_free(c->relay);
    txo_publisher_free(c->pub);
    txo_db_close(c->consumer_db);
    testdb_fixture_free(c);
    return 0;
}

/* ---- the handler: an inbox row in its own transaction ---- */

struct inbox_row {
    const char *event_id;
    const char *event_type;
    const char *payload;
    const char *follow_up_of; /* an aggregate id: append its OrderFollowed in the same tx */
};

static int insert_inbox(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct inbox_row *r = arg;
    struct txo_param p[3] = {txo_p_str(r->event_id), txo_p_str(r->event_type),
                             txo_p_str(r->payload)};
    int rc = txo_tx_exec(tx,
                         "INSERT INTO inbox_events (event_id, event_type, payload, processed_at) "
                         "VALUES (?, ?, ?, NOW(6))",
                         p, 3, NULL, err);
    if (rc == TXO_EDUPLICATE)
        return 0; /* seen before: already applied */
    if (rc < 0 || r->follow_up_of == NULL)
        return rc;
    char key[64];
    snprintf(key, sizeof(key), "order:%s:followed", r->follow_up_of);
    const struct txo_outbox_event ev = {.aggregate_type = "order",
                                        .aggregate_id = r->follow_up_of,
                                        .event_type = "OrderFollowed",
                                        .payload_json = r->payload,
                                        .idempotency_key = key};
    return txo_outbox_append(tx, &ev, 0, NULL, NULL, err);
}

/*
 * What both handler forms check and do with one event: its fields as the relay wrote them,
 * then (unless told to fail) its inbox row, and the follow-up event, in one transaction.
 */
static int apply(struct ctx *c, const char *key, const char *type, const char *aggregate_type,
                 const char *aggregate_id, const json_t *payload, uint64_t delivery,
                 struct txo_error *err)
{
    c->calls++;
    c->last_delivery = delivery;
    snprintf(c->last_msg_id, sizeof(c->last_msg_id), "%s", key);
    assert_true(strcmp(type, "OrderCreated") == 0 ||
                (c->follow_up && strcmp(type, "OrderFollowed") == 0));
    assert_string_equal(aggregate_type, "order");
    assert_true(json_is_object(payload));
    char agg[24];
    snprintf(agg, sizeof(agg), "%" JSON_INTEGER_FORMAT,
             json_integer_value(json_object_get(payload, "order_id")));
    assert_string_equal(aggregate_id, agg);
    if (c->fail_code != 0)
        return txo_error_set(err, c->fail_code, "consumer database down");
    char *text = json_dumps(payload, JSON_COMPACT);
    assert_non_null(text);
    bool created = strcmp(type, "OrderCreated") == 0;
    struct inbox_row row = {key, type, text, c->follow_up && created ? agg : NULL};
    int rc = txo_db_transact(c->consumer_db, TXO_ISO_READ_COMMITTED, insert_inbox, &row, err);
    free(text);
    return rc;
}

/* The message form: the published envelope, msg_id its key, delivery its attempt. */
static int handler(void *arg, const struct txo_inbound_message *msg, struct txo_error *err)
{
    struct ctx *c = arg;
    assert_false(c->events); /* the events form is preferred when given */
    assert_null(msg->subject);
    assert_non_null(msg->msg_id);
    assert_int_equal(strlen(msg->data), msg->len);
    json_error_t jerr;
    json_t *env = json_loadb(msg->data, msg->len, 0, &jerr);
    if (env == NULL)
        fail_msg("envelope is not JSON: %s", jerr.text);
    assert_string_equal(json_string_value(json_object_get(env, "idempotency_key")), msg->msg_id);
    assert_int_equal(json_integer_value(json_object_get(env, "attempt")), msg->delivery);
    int rc = apply(c, msg->msg_id, json_string_value(json_object_get(env, "type")),
                   json_string_value(json_object_get(env, "aggregate_type")),
                   json_string_value(json_object_get(env, "aggregate_id")),
                   json_object_get(env, "payload"), msg->delivery, err);
    json_decref(env);
    return rc;
}

/* The events form: the relay's batch as events, each with its verdict. */
static int events_handler(void *arg, const struct txo_event *evs, size_t n, int *results,
                          struct txo_error *errors)
{
    struct ctx *c = arg;
    assert_true(c->events);
    c->event_batches++;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(strlen(evs[i].payload), evs[i].payload_len);
        json_error_t jerr;
        json_t *payload = json_loadb(evs[i].payload, evs[i].payload_len, 0, &jerr);
        if (payload == NULL)
            fail_msg("payload is not JSON: %s", jerr.text);
        /* The text the envelope would carry: compact. */
        char *compact = json_dumps(payload, JSON_COMPACT | JSON_PRESERVE_ORDER);
        assert_string_equal(evs[i].payload, compact);
        free(compact);
        assert_true(evs[i].id > 0);
        assert_non_null(evs[i].created_at);
        results[i] = apply(c, evs[i].idempotency_key, evs[i].type, evs[i].aggregate_type,
                           evs[i].aggregate_id, payload, (uint64_t)evs[i].attempt, &errors[i]);
        json_decref(payload);
    }
    return 0;
}

/* ---- helpers ---- */

/*
 * The test's relay in claim mode mode, up to max_attempts per event, and its local publisher,
 * which calls handler: kept in c for teardown to free (a relay made before is freed first).
 */
static struct txo_relay *local_relay_in(struct ctx *c, unsigned max_attempts,
                                        enum txo_relay_claim_mode mode)
{
    txo_relay_free(c->relay);
    txo_publisher_free(c->pub);
    c->relay = NULL;
    struct txo_error err;
    txo_error_init(&err);
    const struct txo_handler h = {
        .one = handler, .events = c->events ? events_handler : NULL, .arg = c};
    if (txo_publisher_local_new(&h, &c->pub, &err) < 0)
        fail_msg("txo_publisher_local_new: %s", err.msg);
    assert_string_equal(c->pub->ops->name, "local");
    struct txo_relay_opts o;
    txo_relay_opts_init(&o);
    o.mode = mode;
    o.relay_id = "local-relay";
    o.batch_size = 8;
    o.max_attempts = max_attempts;
    o.backoff.base_ms = 60000; /* a failed event is clearly not due again by itself */
    o.backoff.max_ms = 60000;
    o.backoff.jitter = 0.0;
    c->relay = testrelay_new(c->t.db, c->pub, &o);
    return c->relay;
}

/* local_relay_in() in claim mode auto. */
static struct txo_relay *local_relay(struct ctx *c, unsigned max_attempts)
{
    return local_relay_in(c, max_attempts, TXO_RELAY_CLAIM_AUTO);
}

/* ---- tests ---- */

static void test_each_event_reaches_the_handler(void **state)
{
    struct ctx *c = *state;
    const unsigned n = 20;
    testoutbox_append_orders(c->t.db, n);
    struct txo_relay *r = local_relay(c, 10);
    while (testrelay_run_once(r) > 0) {
    }
    assert_int_equal(c->calls, n);
    assert_int_equal(c->last_delivery, 1);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED' "
                                           "AND attempts = 0 AND last_error IS NULL"),
                     n);
    assert_int_equal(TESTDB_COUNT(c->t.db,
                                  "inbox_events i JOIN outbox_events e "
                                  "ON e.idempotency_key = i.event_id "
                                  "WHERE JSON_EXTRACT(i.payload, '$.order_id') = e.aggregate_id"),
                     n);
}

static void test_handler_failure_keeps_the_event_pending(void **state)
{
    struct ctx *c = *state;
    const unsigned n = 5;
    testoutbox_append_orders(c->t.db, n);
    struct txo_relay *r = local_relay(c, 10);

    /* The consumer's database is down: nothing is applied, every row stays PENDING. */
    c->fail_code = TXO_EUNAVAILABLE;
    assert_int_equal(testrelay_run_once(r), n);
    assert_int_equal(c->calls, n);
    assert_int_equal(TESTDB_COUNT(c->t.db, "inbox_events"), 0);
    assert_int_equal(TESTDB_COUNT(c->t.db,
                                  "outbox_events WHERE status = 'PENDING' "
                                  "AND attempts = 1 AND locked_by IS NULL "
                                  "AND last_error = 'TXO_EUNAVAILABLE: consumer database down' "
                                  "AND next_attempt_at > NOW(6) + INTERVAL 50 SECOND"),
                     n);
    /* Backing off: not offered again before it is due. */
    assert_int_equal(testrelay_run_once(r), 0);
    assert_int_equal(c->calls, n);

    /* Recovered: once due, each event is delivered again, now as delivery 2. */
    c->fail_code = 0;
    testdb_exec(c->t.db, "UPDATE outbox_events SET next_attempt_at = NOW(6)");
    assert_int_equal(testrelay_run_once(r), n);
    assert_int_equal(c->calls, 2 * n);
    assert_int_equal(c->last_delivery, 2);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED' "
                                           "AND last_error IS NULL"),
                     n);
    assert_int_equal(TESTDB_COUNT(c->t.db, "inbox_events"), n);
}

static void test_permanent_failure_dead_letters(void **state)
{
    struct ctx *c = *state;
    testoutbox_append_orders(c->t.db, 1);
    struct txo_relay *r = local_relay(c, 2);
    /* A permanent error is dead-lettered at once, not retried up to max_attempts. */
    c->fail_code = TXO_EBUSINESS;
    assert_int_equal(testrelay_run_once(r), 1);
    testdb_exec(c->t.db, "UPDATE outbox_events SET next_attempt_at = NOW(6)");
    assert_int_equal(testrelay_run_once(r), 0);
    assert_int_equal(c->calls, 1);
    assert_string_equal(c->last_msg_id, "order:1:created");
    assert_int_equal(TESTDB_COUNT(c->t.db,
                                  "outbox_events WHERE status = 'FAILED' "
                                  "AND attempts = 1 AND last_error = 'TXO_EBUSINESS: consumer "
                                  "database down'"),
                     1);
    assert_int_equal(TESTDB_COUNT(c->t.db, "dead_letter_events"), 1);
    assert_int_equal(TESTDB_COUNT(c->t.db, "inbox_events"), 0);
}

/*
 * The handler's transaction appends the next event of the very aggregate whose event the relay
 * is dispatching. In claim mode auto the relay holds that event's row lock while the handler
 * runs (local dispatch is a quick publisher): the append must not wait on it. Each event is
 * handled once and published without a retry, the follow-ups come next in their aggregates'
 * order, and the same holds with leases.
 */
static void test_handler_appends_to_its_aggregate(void **state)
{
    struct ctx *c = *state;
    const unsigned n = 6;
    const enum txo_relay_claim_mode modes[] = {TXO_RELAY_CLAIM_AUTO, TXO_RELAY_CLAIM_LEASE};
    const enum txo_relay_claim_mode expect[] = {TXO_RELAY_CLAIM_TRANSACTION, TXO_RELAY_CLAIM_LEASE};
    c->follow_up = true;
    for (size_t m = 0; m < TXO_ARRAY_LEN(modes); m++) {
        testdb_exec(c->t.db, "DELETE FROM inbox_events");
        testdb_exec(c->t.db, "DELETE FROM outbox_events");
        testdb_exec(c->t.db, "DELETE FROM outbox_aggregates");
        c->calls = 0;
        testoutbox_append_orders(c->t.db, n);
        struct txo_relay *r = local_relay_in(c, 10, modes[m]);
        assert_int_equal(txo_relay_claim_mode(r), expect[m]);
        assert_int_equal(testrelay_run_once(r), n);
        assert_int_equal(c->calls, n);
        assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED' "
                                               "AND event_type = 'OrderCreated' AND attempts = 0 "
                                               "AND last_error IS NULL AND sequence = 1"),
                         n);
        assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PENDING' "
                                               "AND event_type = 'OrderFollowed' AND sequence = 2 "
                                               "AND prev_sequence = 1"),
                         n);
        while (testrelay_run_once(r) > 0) {
        }
        assert_int_equal(c->calls, 2 * n);
        assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events "
                                               "WHERE status = 'PUBLISHED' AND attempts = 0"),
                         2 * n);
        assert_int_equal(TESTDB_COUNT(c->t.db, "inbox_events"), 2 * n);
    }
}

/* A batch handler that must never run: given with a message handler, creation fails. */
static int batch_never(void *arg, const struct txo_inbound_message *msgs, size_t n, int *results,
                       struct txo_error *errors)
{
    (void)arg;
    (void)msgs;
    (void)n;
    (void)results;
    (void)errors;
    fail();
    return 0;
}

static void test_bad_arguments(void **state)
{
    (void)state;
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_publisher_local_new(NULL, &pub, &err), TXO_EINVAL);
    assert_null(pub);
    /* A handler description names exactly one of the two forms. */
    assert_int_equal(txo_publisher_local_new(&(struct txo_handler){.arg = &err}, &pub, &err),
                     TXO_EINVAL);
    assert_null(pub);
    const struct txo_handler both = {.one = handler, .batch = batch_never};
    assert_int_equal(txo_publisher_local_new(&both, &pub, &err), TXO_EINVAL);
    assert_non_null(strstr(err.msg, "exactly one"));
    assert_null(pub);
    assert_int_equal(txo_consumer_new(NULL, NULL, NULL, NULL), TXO_EINVAL);
    size_t handled = 7;
    assert_int_equal(txo_consumer_poll(NULL, 1, 1, &handled, NULL), TXO_EINVAL);
    assert_int_equal(handled, 0);
    txo_consumer_free(NULL);
}

/*
 * With the events form, an event whose payload the decoder would refuse (a JSON array) is
 * failed by the publisher without reaching the handler, permanently, as the worker's decoding
 * fails it in the message form: FAILED and dead-lettered on its first attempt, with the
 * reason. The events around it in the batch are delivered in one call.
 */
static void test_events_refused_payload(void **state)
{
    struct ctx *c = *state;
    testoutbox_append_orders(c->t.db, 2);
    testdb_exec(c->t.db, "UPDATE outbox_events SET payload = '[1, 2]' WHERE aggregate_id = '1'");
    struct txo_relay *r = local_relay(c, 5);
    assert_int_equal(testrelay_run_once(r), 2);
    assert_int_equal(c->calls, 1);
    assert_int_equal(c->event_batches, 1);
    assert_string_equal(c->last_msg_id, "order:2:created");
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'FAILED' "
                                           "AND aggregate_id = '1' AND attempts = 1 "
                                           "AND last_error LIKE '%payload must be an object%'"),
                     1);
    assert_int_equal(TESTDB_COUNT(c->t.db, "dead_letter_events"), 1);
    assert_int_equal(TESTDB_COUNT(c->t.db, "outbox_events WHERE status = 'PUBLISHED'"), 1);
    assert_int_equal(TESTDB_COUNT(c->t.db, "inbox_events"), 1);
}

/* A test run again with the events form given to the publisher. */
#define EVENTS_FORM(f)                                                                             \
    {                                                                                              \
#f " (events)", f, setup_events, teardown, NULL                                            \
    }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_bad_arguments, testrun_no_fixture),
        cmocka_unit_test(test_each_event_reaches_the_handler),
        cmocka_unit_test(test_handler_failure_keeps_the_event_pending),
        cmocka_unit_test(test_permanent_failure_dead_letters),
        cmocka_unit_test(test_handler_appends_to_its_aggregate),
        EVENTS_FORM(test_each_event_reaches_the_handler),
        EVENTS_FORM(test_handler_failure_keeps_the_event_pending),
        EVENTS_FORM(test_permanent_failure_dead_letters),
        EVENTS_FORM(test_handler_appends_to_its_aggregate),
        cmocka_unit_test_setup_teardown(test_events_refused_payload, setup_events, teardown),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
}
