/*
 * The library's worker runtime (txo/worker.h) with the order service's tables (worker.h),
 * in-process against a real MariaDB: messages handed to txo_worker_handle_message as a
 * transport would, the inbox, the one path that starts an order's saga in each mode, the
 * runners and the command scheduler driving sagas to their end, and the worker's own metrics.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "testrun.h"
#include "orders.h"
#include "testdb.h"
#include "testorders.h"
#include "testworker.h"
#include "txo/metrics.h"
#include "worker.h"

/* The configuration the worker's handlers read, for the test that runs. */
static struct order_worker_config config;

static int setup(void **state)
{
    struct testworker *f = testdb_fixture_new(sizeof(*f), "oworker", 0);
    testorders_stock(f->t.db, "iphone-15", 10);
    struct txo_worker_opts wo;
    txo_worker_opts_init(&wo);
    wo.saga_threads = 2;
    wo.poll_ms = 20;
    wo.retention.interval_s = 0;
    order_worker_setup(&config, NULL, NULL, &wo);
    testworker_new(f, &wo);
    *state = f;
    return 0;
}

/*
 * The envelope the relay would publish for the OrderCreated of order id, which is in the outbox;
 * the event's payload as stored in *payload. The caller frees both with txo_free().
 */
static char *order_created_envelope(struct testworker *f, int64_t id, char **payload_out)
{
    struct txo_param p[] = {txo_p_i64(id)};
    char *payload = testdb_str(f->t.db,
                               "SELECT CAST(payload AS CHAR) FROM outbox_events WHERE "
                               "aggregate_id = ? AND event_type = 'OrderCreated'",
                               p, 1);
    assert_non_null(payload);
    char key[64], agg[24];
    snprintf(key, sizeof(key), "order:%lld:created", (long long)id);
    snprintf(agg, sizeof(agg), "%lld", (long long)id);
    struct txo_outbox_message m = {.id = 1,
                                   .aggregate_type = "order",
                                   .aggregate_id = agg,
                                   .event_type = "OrderCreated",
                                   .payload = payload,
                                   .idempotency_key = key,
                                   .created_at = "2026-12-01T00:00:00.000000Z",
                                   .attempt = 1};
    struct txo_error err;
    txo_error_init(&err);
    char *envelope = txo_envelope_encode(&m, NULL, &err);
    assert_non_null(envelope);
    *payload_out = payload;
    return envelope;
}

/* An order created in the database (its OrderCreated is in the outbox); returns its id and the
 * envelope the relay would publish for it. */
static int64_t create_order(struct testworker *f, char **envelope)
{
    struct order_item item = {.sku = "iphone-15", .qty = 1, .price_cents = 1000};
    struct txo_error err;
    txo_error_init(&err);
    int64_t id = 0;
    assert_int_equal(orders_create(f->t.db, 7, &item, 1, &id, &err), 0);
    char *payload = NULL;
    *envelope = order_created_envelope(f, id, &payload);
    txo_free(payload);
    return id;
}

static int deliver(struct testworker *f, const char *envelope, const char *msg_id,
                   struct txo_error *err)
{
    struct txo_inbound_message msg = {
        .data = envelope, .len = strlen(envelope), .msg_id = msg_id, .delivery = 1};
    txo_error_init(err);
    return txo_worker_handle_message(f->w, &msg, err);
}

/* Polls until every saga is COMPLETED, at most 10 s. */
static void wait_completed(struct testworker *f, int64_t want)
{
    for (int i = 0; i < 500; i++) {
        if (testdb_q(f->t.db, "SELECT COUNT(*) FROM saga_instances WHERE status = 'COMPLETED'") ==
            want)
            return;
        txo_sleep_ms(20);
    }
    fail_msg("%lld sagas COMPLETED, want %lld",
             (long long)testdb_q(f->t.db,
                                 "SELECT COUNT(*) FROM saga_instances WHERE status = 'COMPLETED'"),
             (long long)want);
}

/* OrderCreated starts the order's saga from the event's payload, once; a second delivery is
 * dropped by the inbox; the runners take it to COMPLETED. */
static void test_order_created_starts_the_saga_once(void **state)
{
    struct testworker *f = *state;
    char *env = NULL;
    int64_t id = create_order(f, &env);
    struct txo_error err;
    assert_int_equal(txo_worker_start(f->w, &err), 0);
    char key[64];
    snprintf(key, sizeof(key), "order:%lld:created", (long long)id);
    assert_int_equal(deliver(f, env, key, &err), 0);
    assert_int_equal(deliver(f, env, key, &err), 0); /* redelivered */
    wait_completed(f, 1);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM saga_instances"), 1);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM inbox_events"), 1);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"),
                     1);
    struct txo_worker_stats st;
    txo_worker_get_stats(f->w, &st);
    assert_int_equal(st.consumed, 1);
    assert_int_equal(st.duplicates, 1);
    assert_int_equal(st.sagas_completed, 1);
    /* The worker counted into its own metric families. */
    assert_true(txo_metric_value(txo_metrics_register(f->metrics, TXO_METRIC_COUNTER,
                                                      "txo_inbox_duplicates_total", "x", 0, NULL,
                                                      NULL, 0, &err),
                                 NULL) == 1);
    txo_free(env);
}

/* A saga found past its deadline stops going forward, and the worker counts it by kind and
 * saga type. */
static void test_saga_past_its_deadline_is_counted(void **state)
{
    struct testworker *f = *state;
    struct order_item item = {.sku = "iphone-15", .qty = 1, .price_cents = 1000};
    struct txo_error err;
    txo_error_init(&err);
    int64_t order = 0;
    char saga_id[TXO_SAGA_ID_LEN];
    assert_int_equal(orders_create_with_saga(f->t.db, 7, &item, 1, &order, saga_id, &err), 0);
    struct txo_param p[] = {txo_p_str(saga_id)};
    assert_int_equal(txo_db_exec(f->t.db,
                                 "UPDATE saga_instances SET deadline_at = NOW(6) - INTERVAL 1 "
                                 "SECOND WHERE id = ?",
                                 p, 1, NULL, &err),
                     0);
    assert_int_equal(txo_worker_start(f->w, &err), 0);
    for (int i = 0;
         i < 500 && testdb_q(f->t.db, "SELECT COUNT(*) FROM saga_instances WHERE status = "
                                      "'FAILED'") == 0;
         i++)
        txo_sleep_ms(20);
    assert_int_equal(
        testdb_q(f->t.db, "SELECT COUNT(*) FROM saga_instances WHERE status = 'FAILED'"), 1);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CANCELLED'"),
                     1);
    static const char *const names[] = {"kind", "saga_type"};
    const char *labels[] = {"saga", "CreateOrderSaga"};
    assert_true(txo_metric_value(txo_metrics_register(f->metrics, TXO_METRIC_COUNTER,
                                                      "txo_saga_deadlines_passed_total", "x", 2,
                                                      names, NULL, 0, &err),
                                 labels) == 1);
}

struct async_create {
    int64_t id;
};

static int async_create_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct async_create *a = arg;
    struct order_item item = {.sku = "iphone-15", .qty = 2, .price_cents = 500};
    return orders_create_async_tx(tx, 8, &item, 1, &a->id, err);
}

/* --async: the OrderCreated event says its saga starts by command, so consuming it starts
 * nothing; the StartOrderSaga command, run by the scheduler, starts it. */
static void test_async_order_starts_from_the_command_only(void **state)
{
    struct testworker *f = *state;
    struct txo_error err;
    txo_error_init(&err);
    struct async_create a = {0};
    assert_int_equal(txo_db_transact(f->t.db, TXO_ISO_READ_COMMITTED, async_create_fn, &a, &err),
                     0);
    char *payload = NULL;
    char *env = order_created_envelope(f, a.id, &payload);
    assert_non_null(strstr(payload, "\"saga_start\":\"command\""));
    char key[64];
    snprintf(key, sizeof(key), "order:%lld:created", (long long)a.id);
    /* Consumed before any worker thread runs: recorded, but no saga. */
    assert_int_equal(deliver(f, env, key, &err), 0);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM inbox_events"), 1);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM saga_instances"), 0);
    /* The command starts it. */
    assert_int_equal(txo_worker_start(f->w, &err), 0);
    wait_completed(f, 1);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM command_queue WHERE status = 'DONE'"),
                     1);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"),
                     1);
    struct txo_worker_stats st;
    txo_worker_get_stats(f->w, &st);
    assert_int_equal(st.commands_done, 1);
    txo_free(env);
    txo_free(payload);
}

/* Events nobody handles are acknowledged without an inbox row; bad envelopes are refused for
 * good (TXO_EINVAL: the transport terminates them). */
static void test_unhandled_and_bad_messages(void **state)
{
    struct testworker *f = *state;
    struct txo_error err;
    const char *other = "{\"id\":1,\"type\":\"StockReserved\",\"idempotency_key\":\"k1\","
                        "\"payload\":{\"order_id\":1}}";
    assert_int_equal(deliver(f, other, "k1", &err), 0);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM inbox_events"), 0);
    assert_int_equal(deliver(f, "{not json", NULL, &err), TXO_EINVAL);
    const char *no_order = "{\"type\":\"OrderCreated\",\"idempotency_key\":\"k2\","
                           "\"payload\":{\"customer_id\":1}}";
    assert_int_equal(deliver(f, no_order, "k2", &err), TXO_EINVAL);
    assert_non_null(strstr(err.msg, "order_id"));
    /* The refused event left nothing: its inbox row rolled back with it. */
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM inbox_events"), 0);
    const char *mismatch = "{\"type\":\"OrderCreated\",\"idempotency_key\":\"k3\","
                           "\"payload\":{\"order_id\":1}}";
    assert_int_equal(deliver(f, mismatch, "other-id", &err), TXO_EINVAL);
}

/* n orders made by create_order(): their envelopes in env (txo_free each) and their keys. */
static void create_orders(struct testworker *f, size_t n, char **env, char (*keys)[64])
{
    for (size_t i = 0; i < n; i++) {
        int64_t id = create_order(f, &env[i]);
        snprintf(keys[i], sizeof(keys[i]), "order:%lld:created", (long long)id);
    }
}

/* The n messages data[i], with the ids ids[i], handed to the worker in one
 * txo_worker_handle_many(); each one's verdict in results[i] and errors[i]. */
static void handle_batch(struct testworker *f, const char *const *data, const char *const *ids,
                         size_t n, int *results, struct txo_error *errors)
{
    struct txo_inbound_message *msgs = txo_calloc(n, sizeof(*msgs));
    assert_non_null(msgs);
    for (size_t i = 0; i < n; i++) {
        msgs[i] = (struct txo_inbound_message){
            .data = data[i], .len = strlen(data[i]), .msg_id = ids[i], .delivery = 1};
        txo_error_init(&errors[i]);
        results[i] = 99;
    }
    assert_int_equal(txo_worker_handle_many(f->w, msgs, n, results, errors), 0);
    txo_free(msgs);
}

/*
 * A delivery of many messages handled at once (txo_worker_handle_many, what local dispatch
 * hands a relay batch to): 6 orders, each OrderCreated once, one of them twice more inside the
 * batch, one already consumed before, a message that is not an envelope, and an event type
 * nobody handles. One saga per order, one inbox row per event, each message its own verdict.
 */
static void test_a_delivery_is_consumed_in_one_transaction(void **state)
{
    struct testworker *f = *state;
    struct txo_error err;
    char *env[6];
    char keys[6][64];
    create_orders(f, 6, env, keys);
    assert_int_equal(deliver(f, env[5], keys[5], &err), 0); /* consumed before the batch */
    const char *other = "{\"id\":9,\"type\":\"Unrelated\",\"aggregate_type\":\"x\","
                        "\"aggregate_id\":\"1\",\"idempotency_key\":\"x:1\",\"payload\":{}}";
    const char *data[10] = {env[0], env[1], env[2], env[0], env[3], "not an envelope",
                            env[4], env[5], env[0], other};
    const char *ids[10] = {keys[0],  keys[1], keys[2], keys[0], keys[3],
                           "junk:1", keys[4], keys[5], keys[0], "x:1"};
    int results[10];
    struct txo_error errors[10];
    int64_t before = testdb_i64(f->t.db,
                                "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
                                "WHERE VARIABLE_NAME = 'COM_COMMIT'",
                                NULL, 0);
    handle_batch(f, data, ids, 10, results, errors);
    int64_t commits = testdb_i64(f->t.db,
                                 "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
                                 "WHERE VARIABLE_NAME = 'COM_COMMIT'",
                                 NULL, 0) -
                      before;
    for (size_t i = 0; i < 10; i++)
        if (i == 5)
            assert_int_equal(results[i], TXO_EINVAL);
        else if (results[i] != 0)
            fail_msg("message %zu: %s %s", i, txo_err_name(results[i]), errors[i].msg);
    /* One transaction for the batch (the server counts other tests' commits too: at most a
     * few, never one per message). */
    print_message("the batch of 10 messages: %lld commits on the server\n", (long long)commits);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM inbox_events"), 6);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM saga_instances"), 6);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM saga_steps"), 18);
    struct txo_worker_stats st;
    txo_worker_get_stats(f->w, &st);
    assert_int_equal(st.consumed, 6);   /* 1 before + 5 in the batch */
    assert_int_equal(st.duplicates, 3); /* env[0] twice more, env[5] again */
    assert_int_equal(txo_worker_start(f->w, &err), 0);
    wait_completed(f, 6);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"),
                     6);
    for (size_t i = 0; i < 6; i++)
        txo_free(env[i]);
}

/* A handler that fails one message of a batch: the batch rolls back and runs one by one, so
 * that message alone gets the error and the others are consumed. */
static void test_a_failing_message_does_not_fail_its_batch(void **state)
{
    struct testworker *f = *state;
    struct txo_error err;
    char *env[3];
    char keys[3][64];
    create_orders(f, 3, env, keys);
    /* An OrderCreated whose payload the handler refuses (no order_id). */
    const char *bad = "{\"id\":9,\"type\":\"OrderCreated\",\"aggregate_type\":\"order\","
                      "\"aggregate_id\":\"999\",\"idempotency_key\":\"order:999:created\","
                      "\"payload\":{\"nothing\":1}}";
    const char *data[4] = {env[0], bad, env[1], env[2]};
    const char *ids[4] = {keys[0], "order:999:created", keys[1], keys[2]};
    int results[4];
    struct txo_error errors[4];
    handle_batch(f, data, ids, 4, results, errors);
    assert_int_equal(results[0], 0);
    assert_true(results[1] < 0 && !txo_err_is_transient(results[1]));
    assert_int_equal(results[2], 0);
    assert_int_equal(results[3], 0);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM inbox_events"), 3);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM saga_instances"), 3);
    assert_int_equal(txo_worker_start(f->w, &err), 0);
    wait_completed(f, 3);
    for (size_t i = 0; i < 3; i++)
        txo_free(env[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_created_starts_the_saga_once),
        cmocka_unit_test(test_async_order_starts_from_the_command_only),
        cmocka_unit_test(test_saga_past_its_deadline_is_counted),
        cmocka_unit_test(test_unhandled_and_bad_messages),
        cmocka_unit_test(test_a_delivery_is_consumed_in_one_transaction),
        cmocka_unit_test(test_a_failing_message_does_not_fail_its_batch),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, testworker_free_state, NULL, NULL);
}
