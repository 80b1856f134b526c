/*
 * The operations commands as an operator runs them, against a real database: `txo stats`,
 * `txo dlq list|replay`, `txo saga show|retry|list --stuck`, and the worker's retention cleaner
 * (both output modes of each listing: tests/integration/test_cli_listings.c).
 * Each test builds the state with the library (orders, sagas with injected faults, a dead-lettered
 * event), runs the `txo` binary and checks its exit status, its output, and the rows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "order_saga.h"
#include "orders.h"
#include "testdb.h"
#include "testorders.h"
#include "testproc.h"

/* Each test sells from 100 of pen. */
static void stock(struct testdb *t)
{
    testorders_stock(t->db, "pen", 100);
}

/* Runs `txo args...` to completion; returns its exit status and (malloc'd) output. */
static int run_txo(const char *const *args, char **out)
{
    return testproc_run_txo("cli", args, 30000, out);
}

static void test_stats_json_matches_tables(void **state)
{
    struct testdb *t = *state;
    char saga_id[TXO_SAGA_ID_LEN];
    testorders_pen_saga(t->db, NULL, TXO_SAGA_COMPLETED, saga_id);
    struct order_faults decline = {.decline_payment = true};
    testorders_pen_saga(t->db, &decline, TXO_SAGA_COMPENSATED, saga_id);

    char *out = NULL;
    const char *args[] = {"stats", "--json", NULL};
    assert_int_equal(run_txo(args, &out), 0);
    json_error_t jerr;
    json_t *doc = json_loads(out, 0, &jerr);
    if (doc == NULL)
        fail_msg("txo stats --json printed no JSON (%s): %s", jerr.text, out);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(doc, "outbox"), "pending")),
        testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING'"));
    json_t *sagas = json_object_get(doc, "sagas");
    assert_int_equal(json_integer_value(json_object_get(sagas, "COMPLETED")), 1);
    assert_int_equal(json_integer_value(json_object_get(sagas, "COMPENSATED")), 1);
    json_decref(doc);
    free(out);

    const char *table[] = {"stats", NULL};
    assert_int_equal(run_txo(table, &out), 0);
    assert_non_null(strstr(out, "AREA"));
    assert_non_null(strstr(out, "COMPENSATED"));
    free(out);
}

static void test_dlq_list_and_replay(void **state)
{
    struct testdb *t = *state;
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key, status, attempts, last_error) VALUES "
                       "('order', 9, 'OrderCreated', '{\"order_id\":9}', 'order:9:created', "
                       "'FAILED', 10, 'broker down')");
    testdb_exec(t->db, "INSERT INTO dead_letter_events (source_event_id, event_type, payload, "
                       "error) SELECT id, event_type, payload, 'broker down' FROM outbox_events "
                       "WHERE idempotency_key = 'order:9:created'");
    int64_t dl = testdb_q(t->db, "SELECT id FROM dead_letter_events");

    char *out = NULL;
    const char *list[] = {"dlq", "list", "--json", NULL};
    assert_int_equal(run_txo(list, &out), 0);
    assert_non_null(strstr(out, "\"event_type\":\"OrderCreated\""));
    assert_non_null(strstr(out, "broker down"));
    free(out);

    char id[32];
    snprintf(id, sizeof(id), "%lld", (long long)dl);
    const char *replay[] = {"dlq", "replay", id, NULL};
    assert_int_equal(run_txo(replay, &out), 0);
    free(out);
    assert_int_equal(testdb_q(t->db,
                              "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING' AND "
                              "attempts = 0 AND idempotency_key = 'order:9:created'"),
                     1);
    assert_int_equal(testdb_q(t->db, "SELECT replay_count FROM dead_letter_events"), 1);
    /* Replaying again: the event is not FAILED any more. */
    assert_int_equal(run_txo(replay, &out), 1);
    assert_non_null(strstr(out, "txo dlq"));
    free(out);
    const char *bad[] = {"dlq", "replay", "abc", NULL};
    assert_int_equal(run_txo(bad, &out), 2);
    free(out);
    const char *usage[] = {"dlq", "frobnicate", NULL};
    assert_int_equal(run_txo(usage, &out), 2);
    free(out);
}

static void test_saga_show_and_retry(void **state)
{
    struct testdb *t = *state;
    char saga_id[TXO_SAGA_ID_LEN];
    int64_t order;
    struct order_faults faults = {.fail_shipment = true, .fail_refund = true};
    order = testorders_pen_saga(t->db, &faults, TXO_SAGA_COMPENSATION_FAILED, saga_id);

    char *out = NULL;
    char order_arg[32];
    snprintf(order_arg, sizeof(order_arg), "--order=%lld", (long long)order);
    const char *show[] = {"saga", "show", "--json", order_arg, NULL};
    assert_int_equal(run_txo(show, &out), 0);
    json_t *doc = json_loads(out, 0, NULL);
    if (doc == NULL)
        fail_msg("txo saga show printed no JSON: %s", out);
    assert_string_equal(json_string_value(json_object_get(doc, "saga_id")), saga_id);
    assert_string_equal(json_string_value(json_object_get(doc, "status")), "COMPENSATION_FAILED");
    assert_int_equal(json_array_size(json_object_get(doc, "steps")), 3);
    json_decref(doc);
    free(out);

    /* The refund works now (no faults in the retry): the saga ends COMPENSATED. */
    const char *retry[] = {"saga", "retry", saga_id, NULL};
    assert_int_equal(run_txo(retry, &out), 0);
    assert_non_null(strstr(out, "COMPENSATED"));
    free(out);
    struct txo_param p = txo_p_str(saga_id);
    char *st = testdb_str(t->db, "SELECT status FROM saga_instances WHERE id = ?", &p, 1);
    assert_string_equal(st, "COMPENSATED");
    txo_free(st);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM payments WHERE status = 'REFUNDED'"), 1);
    /* Retrying a COMPENSATED saga is refused. */
    assert_int_equal(run_txo(retry, &out), 1);
    free(out);
    const char *unknown[] = {"saga", "show", "00000000-0000-0000-0000-000000000000", NULL};
    assert_int_equal(run_txo(unknown, &out), 1);
    free(out);
}

/* Counts the lines of out that name saga_id. */
static int lines_naming(const char *out, const char *saga_id)
{
    int n = 0;
    for (const char *p = out; (p = strstr(p, saga_id)) != NULL; p += strlen(saga_id))
        n++;
    return n;
}

/* A running saga past a deadline is listed even under a live owner, with where and how long:
 * a worker hung in ChargePayment past the step's deadline, and a saga past its own between
 * steps. Their rows are written as such a worker leaves them. */
static void test_saga_list_stuck_past_deadline(void **state)
{
    struct testdb *t = *state;
    struct order_item item = {"pen", 1, 250};
    char hung[TXO_SAGA_ID_LEN], late[TXO_SAGA_ID_LEN], fresh[TXO_SAGA_ID_LEN];
    int64_t order;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(orders_create_with_saga(t->db, 3, &item, 1, &order, hung, &err), 0);
    assert_int_equal(orders_create_with_saga(t->db, 3, &item, 1, &order, late, &err), 0);
    assert_int_equal(orders_create_with_saga(t->db, 3, &item, 1, &order, fresh, &err), 0);
    assert_int_equal(txo_db_exec(t->db,
                                 "UPDATE saga_instances SET owner = 'hung:1', "
                                 "lease_until = NOW(6) + INTERVAL 1 HOUR",
                                 NULL, 0, NULL, &err),
                     0);
    struct txo_param hp = txo_p_str(hung);
    assert_int_equal(txo_db_exec(t->db,
                                 "UPDATE saga_steps SET status = IF(step_order = 1, 'COMPLETED', "
                                 "'RUNNING'), remote_state = 'CALLING', "
                                 "deadline_at = NOW(6) - INTERVAL 5 SECOND "
                                 "WHERE saga_id = ? AND step_order IN (1, 2)",
                                 &hp, 1, NULL, &err),
                     0);
    struct txo_param lp = txo_p_str(late);
    assert_int_equal(txo_db_exec(t->db,
                                 "UPDATE saga_instances SET deadline_at = NOW(6) - INTERVAL 7 "
                                 "SECOND WHERE id = ?",
                                 &lp, 1, NULL, &err),
                     0);

    const char *list[] = {"saga", "list", "--stuck", "--idle=3600", NULL};
    char *out = NULL;
    assert_int_equal(run_txo(list, &out), 1);
    assert_int_equal(lines_naming(out, hung), 1);
    assert_int_equal(lines_naming(out, late), 1);
    assert_int_equal(lines_naming(out, fresh), 0);
    free(out);
    /* Which deadline, at which step, by how long: the JSON of the same list. */
    const char *list_json[] = {
        "saga", "list", "--stuck", "--idle=3600", "--json", "--log-level=error", NULL};
    assert_int_equal(run_txo(list_json, &out), 1);
    json_t *doc = json_loads(out, JSON_DISABLE_EOF_CHECK, NULL);
    if (doc == NULL)
        fail_msg("txo saga list --stuck --json printed no JSON: %s", out);
    free(out);
    assert_int_equal(json_array_size(doc), 2);
    for (size_t i = 0; i < json_array_size(doc); i++) {
        json_t *s = json_array_get(doc, i);
        const char *id = json_string_value(json_object_get(s, "saga_id"));
        json_int_t overdue = json_integer_value(json_object_get(s, "overdue_seconds"));
        assert_string_equal(json_string_value(json_object_get(s, "reason")), "past_deadline");
        if (strcmp(id, hung) == 0) {
            assert_string_equal(json_string_value(json_object_get(s, "deadline")), "step");
            assert_string_equal(json_string_value(json_object_get(s, "step")), "ChargePayment");
            assert_true(overdue >= 5);
        } else {
            assert_string_equal(id, late);
            assert_string_equal(json_string_value(json_object_get(s, "deadline")), "saga");
            assert_true(json_is_null(json_object_get(s, "step")));
            assert_true(overdue >= 7);
        }
    }
    json_decref(doc);
}

static void test_saga_list_stuck(void **state)
{
    struct testdb *t = *state;
    const char *list[] = {"saga", "list", "--stuck", "--idle=1", NULL};
    char *out = NULL;
    /* Nothing stuck: exit 0, no saga listed. */
    assert_int_equal(run_txo(list, &out), 0);
    assert_null(strstr(out, "no_live_owner"));
    assert_null(strstr(out, "given_up"));
    free(out);

    /* A saga whose compensation failed, its retries given up (retry_at NULL). */
    char given_up[TXO_SAGA_ID_LEN];
    int64_t order;
    struct order_faults faults = {.fail_shipment = true, .fail_refund = true};
    order = testorders_pen_saga(t->db, &faults, TXO_SAGA_COMPENSATION_FAILED, given_up);
    struct txo_error err;
    txo_error_init(&err);
    struct txo_param gp = txo_p_str(given_up);
    assert_int_equal(txo_db_exec(t->db, "UPDATE saga_instances SET retry_at = NULL WHERE id = ?",
                                 &gp, 1, NULL, &err),
                     0);

    /* A running saga that no worker runs, unmoved for a minute; and a fresh one, not listed. */
    struct order_item item = {"pen", 1, 250};
    char orphan[TXO_SAGA_ID_LEN], fresh[TXO_SAGA_ID_LEN];
    assert_int_equal(orders_create_with_saga(t->db, 3, &item, 1, &order, orphan, &err), 0);
    assert_int_equal(orders_create_with_saga(t->db, 3, &item, 1, &order, fresh, &err), 0);
    struct txo_param op = txo_p_str(orphan);
    assert_int_equal(txo_db_exec(t->db,
                                 "UPDATE saga_instances SET updated_at = NOW(6) - INTERVAL 60 "
                                 "SECOND, owner = 'gone:1', lease_until = NOW(6) - INTERVAL 30 "
                                 "SECOND WHERE id = ?",
                                 &op, 1, NULL, &err),
                     0);

    assert_int_equal(run_txo(list, &out), 1); /* something needs an operator */
    assert_int_equal(lines_naming(out, given_up), 1);
    assert_int_equal(lines_naming(out, orphan), 1);
    assert_int_equal(lines_naming(out, fresh), 0);
    const char *line = strstr(out, orphan);
    const char *end = strchr(line, '\n');
    const char *where = strstr(line, "RUNNING");
    assert_true(where != NULL && where < end);
    where = strstr(line, "no_live_owner");
    assert_true(where != NULL && where < end);
    line = strstr(out, given_up);
    end = strchr(line, '\n');
    where = strstr(line, "COMPENSATION_FAILED");
    assert_true(where != NULL && where < end);
    where = strstr(line, "given_up");
    assert_true(where != NULL && where < end);
    free(out);

    /* The orphan counts only past --idle: with an hour, the given-up saga alone. */
    const char *patient[] = {"saga", "list", "--stuck", "--idle=3600", NULL};
    assert_int_equal(run_txo(patient, &out), 1);
    assert_int_equal(lines_naming(out, orphan), 0);
    assert_int_equal(lines_naming(out, given_up), 1);
    free(out);

    /* A list needs --stuck: a usage error before any connection. */
    const char *bare[] = {"saga", "list", NULL};
    assert_int_equal(run_txo(bare, &out), 2);
    free(out);
}

static void test_unknown_environment_variable_warned(void **state)
{
    (void)state;
    /* A misspelt setting is named with the closest known one; known settings and the test
     * scripts' own TXO_TEST_* variables are not reported; the command runs as usual. */
    setenv("TXO_LOG_LEVLE", "debug", 1);
    setenv("TXO_NO_SUCH_THING_AT_ALL", "1", 1);
    setenv("TXO_LOG_LEVEL", "info", 1);
    setenv("TXO_TEST_SOMETHING", "1", 1);
    const char *stats[] = {"stats", NULL};
    char *out = NULL;
    int status = run_txo(stats, &out);
    unsetenv("TXO_LOG_LEVLE");
    unsetenv("TXO_NO_SUCH_THING_AT_ALL");
    unsetenv("TXO_LOG_LEVEL");
    unsetenv("TXO_TEST_SOMETHING");
    assert_int_equal(status, 0);
    assert_non_null(strstr(out, "txo stats: warning: TXO_LOG_LEVLE is not a txo setting (did you "
                                "mean TXO_LOG_LEVEL?); ignored"));
    assert_non_null(strstr(out, "txo stats: warning: TXO_NO_SUCH_THING_AT_ALL is not a txo "
                                "setting; ignored"));
    assert_null(strstr(out, "TXO_LOG_LEVEL is not"));
    assert_null(strstr(out, "TXO_TEST_SOMETHING"));
    free(out);
}

static void test_worker_cleaner_deletes_old_rows(void **state)
{
    struct testdb *t = *state;
    for (int i = 0; i < 5; i++) {
        char sql[512];
        snprintf(sql, sizeof(sql),
                 "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "
                 "idempotency_key, status, published_time, next_attempt_at, created_at) VALUES "
                 "('order', %d, 'OrderCreated', '{}', 'old:%d', 'PUBLISHED', "
                 "UTC_TIMESTAMP(6) - INTERVAL 2 DAY, UTC_TIMESTAMP(6) - INTERVAL 2 DAY, "
                 "UTC_TIMESTAMP(6) - INTERVAL 2 DAY)",
                 i, i);
        testdb_exec(t->db, sql);
    }
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key, status, published_time) VALUES ('order', 99, "
                       "'OrderCreated', '{}', 'recent', 'PUBLISHED', UTC_TIMESTAMP(6))");
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key, status, created_at, next_attempt_at) VALUES "
                       "('order', 98, 'OrderCreated', '{}', 'old-pending', 'PENDING', "
                       "UTC_TIMESTAMP(6) - INTERVAL 2 DAY, UTC_TIMESTAMP(6) + INTERVAL 1 DAY)");

    const char *argv[] = {testproc_txo_bin(),
                          "worker",
                          "--broker=none",
                          "--clean-interval=1",
                          "--outbox-retention=86400",
                          "--clean-batch=2",
                          NULL};
    struct testproc w;
    testproc_start(&w, "cli_worker", argv, NULL);
    int64_t deadline = txo_monotonic_ms() + 20000;
    while (testdb_q(t->db,
                    "SELECT COUNT(*) FROM outbox_events WHERE idempotency_key LIKE 'old:%'") > 0 &&
           txo_monotonic_ms() < deadline)
        txo_sleep_ms(100);
    bool stopped = testproc_stop(&w, 10000);
    if (!stopped)
        testproc_print_log(&w, "txo worker");
    assert_true(stopped);
    testproc_remove_log(&w);
    assert_int_equal(
        testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE idempotency_key LIKE 'old:%'"),
        0);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE idempotency_key IN "
                                     "('recent', 'old-pending')"),
                     2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_json_matches_tables),
        cmocka_unit_test(test_dlq_list_and_replay),
        cmocka_unit_test(test_saga_show_and_retry),
        cmocka_unit_test(test_saga_list_stuck),
        cmocka_unit_test(test_saga_list_stuck_past_deadline),
        cmocka_unit_test(test_unknown_environment_variable_warned),
        cmocka_unit_test(test_worker_cleaner_deletes_old_rows),
    };
    txo_log_set_level(TXO_LOG_ERROR);
    int rc = testdb_run_each(tests, TXO_ARRAY_LEN(tests), "cli", TESTDB_NEW_EXPORT_ENV, stock);
    return rc;
}
