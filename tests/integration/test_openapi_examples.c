/*
 * The OpenAPI description says what `txo serve` does: every example in it is replayed against
 * a running server, and every answer is checked against the description by an implementation
 * that is not ours (tests/openapi/replay_examples.mjs: ajv, JSON Schema 2020-12, pinned in
 * tests/openapi/package-lock.json). The script reads the document the server itself serves at
 * GET /openapi.json.
 *
 * The examples name rows, so the database is made to hold them before the server starts:
 *   - order 1, whose CreateOrderSaga could not refund its payment: COMPENSATION_FAILED, given up,
 *     under the saga id the examples use (SAGA_ID); GET /search finds each by its id;
 *   - a FAILED outbox event with dead letter 1, and a later event of its aggregate held back
 *     behind it (GET /outbox/parked, POST /dlq/{id}/replay);
 *   - another aggregate's FAILED event with dead letter 2 (POST /dlq/{id}/skip: skipped, then
 *     409 as it is no longer FAILED);
 *   - the SKU "pen" in stock, which the POST /orders examples buy (their order is order 2);
 *   - an Idempotency-Key whose request is still being processed (409 request_in_progress).
 * The server runs with an admin token (the examples of 401 need one) and a 1 s head deadline
 * (the examples of 408); a second one with --async answers the examples of 202, and with
 * --max-connections-per-client 1 turns the script's second connection away (the examples of
 * 503 tooManyConnections). Then a server without
 * --admin-token answers the admin endpoints without a token: the security the description
 * declares optional is.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "order_saga.h"
#include "orders.h"
#include "testdb.h"
#include "testhttp.h"
#include "testhttpclient.h"
#include "testorders.h"
#include "testproc.h"

#define TOKEN "openapi-s3cret"
/* The saga id of the examples of GET /sagas/{id} and POST /sagas/{id}/retry. */
#define SAGA_ID "7d1f0c3a-5b2e-4a8f-9c6d-1e3b5a7c9f20"
/* The Idempotency-Key and body of the POST /orders example requestInProgress. */
#define BUSY_KEY  "0f6b9c2e-7d4a-4e1b-8c3f-5a2d9e8b7c61"
#define BUSY_BODY "{\"customer_id\":7,\"items\":[{\"sku\":\"pen\",\"qty\":2,\"price_cents\":150}]}"

struct ctx {
    struct testhttp_client hc; /* first: the database, the CURL handle and the reply */
    struct testproc serve;
    struct testproc second; /* --async --max-connections-per-client 1 */
};

static int setup(void **state)
{
    *state = testhttp_client_new(sizeof(struct ctx), "openapi");
    return 0;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    testproc_stop_hard(&c->serve);
    testproc_stop_hard(&c->second);
    testhttp_client_free(c);
    return 0;
}

/* Order 1 and its CreateOrderSaga, whose shipment is refused and whose refund then fails:
 * COMPENSATION_FAILED after its one try, so nothing retries it behind the test's back. The
 * saga then moves to SAGA_ID, the id the examples name. */
static void compensation_failed_saga(struct ctx *c)
{
    char saga_id[TXO_SAGA_ID_LEN];
    assert_int_equal(testorders_compensation_failed(c->hc.t.db, saga_id), 1);

    /* A copy under the new id takes the steps over, then the old row (renamed out of the way
     * of the unique correlation id) goes. */
    struct txo_param old[] = {txo_p_str(saga_id)};
    struct txo_exec_result res;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_exec(c->hc.t.db,
                    "CREATE TEMPORARY TABLE saga_copy AS SELECT * FROM saga_instances WHERE id = ?",
                    old, 1, &res, &err) != 0 ||
        txo_db_exec(c->hc.t.db, "UPDATE saga_instances SET correlation_id = 'moving' WHERE id = ?",
                    old, 1, &res, &err) != 0)
        fail_msg("copying the saga: %s", err.msg);
    testdb_exec(c->hc.t.db, "UPDATE saga_copy SET id = '" SAGA_ID "'");
    testdb_exec(c->hc.t.db, "INSERT INTO saga_instances SELECT * FROM saga_copy");
    testdb_exec(c->hc.t.db, "DROP TEMPORARY TABLE saga_copy");
    if (txo_db_exec(c->hc.t.db, "UPDATE saga_steps SET saga_id = '" SAGA_ID "' WHERE saga_id = ?",
                    old, 1, &res, &err) != 0 ||
        txo_db_exec(c->hc.t.db, "DELETE FROM saga_instances WHERE id = ?", old, 1, &res, &err) != 0)
        fail_msg("moving the saga to " SAGA_ID ": %s", err.msg);
}

/* A FAILED event with dead letter 1, as the relay leaves them, and a later event of the same
 * aggregate parked behind it; then another aggregate's FAILED event with dead letter 2, the one
 * POST /dlq/{id}/skip gives up (dead letter 1 is POST /dlq/{id}/replay's). */
static void dead_letters(struct ctx *c)
{
    testdb_exec(c->hc.t.db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type,"
                            " payload, idempotency_key, status, attempts, last_error)"
                            " VALUES ('order', 4242, 'OrderCreated', '{\"order_id\":4242}',"
                            " 'order:4242:created', 'FAILED', 10, 'broker unavailable'),"
                            " ('order', 4242, 'OrderConfirmed', '{\"order_id\":4242}',"
                            " 'order:4242:confirmed', 'PENDING', 0, NULL),"
                            " ('order', 4343, 'OrderCreated', '{\"order_id\":4343}',"
                            " 'order:4343:created', 'FAILED', 10, 'message too large')");
    testdb_exec(c->hc.t.db, "INSERT INTO outbox_parked (aggregate_type, aggregate_id, event_id) "
                            "SELECT aggregate_type, aggregate_id, id FROM outbox_events "
                            "WHERE idempotency_key = 'order:4242:created'");
    testdb_exec(c->hc.t.db, "INSERT INTO dead_letter_events (source_event_id, event_type, payload,"
                            " error) SELECT id, event_type, payload, last_error FROM outbox_events"
                            " WHERE status = 'FAILED' ORDER BY id");
    assert_int_equal(testdb_i64(c->hc.t.db,
                                "SELECT COUNT(*) FROM dead_letter_events d JOIN outbox_events e"
                                " ON e.id = d.source_event_id WHERE (d.id, e.idempotency_key)"
                                " IN ((1, 'order:4242:created'), (2, 'order:4343:created'))",
                                NULL, 0),
                     2);
}

/* BUSY_KEY as a request that is still running leaves it: PROCESSING, fresh, the same body. */
static void key_in_flight(struct ctx *c)
{
    struct txo_error err;
    txo_error_init(&err);
    char hash[TXO_IDEM_HASH_LEN];
    if (txo_idem_hash("POST", "/orders", BUSY_BODY, strlen(BUSY_BODY), hash, &err) != 0)
        fail_msg("hashing the request: %s", err.msg);
    struct txo_param p[] = {txo_p_str(BUSY_KEY), txo_p_str(hash)};
    struct txo_exec_result res;
    if (txo_db_exec(c->hc.t.db,
                    "INSERT INTO idempotency_keys (idempotency_key, request_hash, status)"
                    " VALUES (?, ?, 'PROCESSING')",
                    p, 2, &res, &err) != 0)
        fail_msg("inserting the key in flight: %s", err.msg);
}

/* Runs the replay against the server on port, and second_port for the examples of --async and
 * of a client over its connection limit; fails with its output and the servers' logs. */
static void replay(struct ctx *c, unsigned port, unsigned second_port)
{
    const char *dir = getenv("TXO_TEST_OPENAPI_DIR");
    if (dir == NULL)
        fail_msg("TXO_TEST_OPENAPI_DIR is not set (CTest sets it)");
    char script[512], ajv[512], port_arg[16], second_arg[16];
    snprintf(ajv, sizeof(ajv), "%s/node_modules/ajv/package.json", dir);
    if (access(ajv, R_OK) != 0)
        fail_msg("%s is missing: run scripts/deps.sh (npm ci in tests/openapi)", ajv);
    snprintf(script, sizeof(script), "%s/replay_examples.mjs", dir);
    snprintf(port_arg, sizeof(port_arg), "%u", port);
    snprintf(second_arg, sizeof(second_arg), "%u", second_port);
    const char *argv[] = {"/usr/bin/env", "node", script, port_arg, TOKEN, second_arg, NULL};
    char *out = NULL;
    int rc = testproc_run("openapi_replay", argv, 120000, &out);
    /* One line at a time: the whole output is longer than one message may be. */
    for (char *line = out, *next; line != NULL && *line != '\0'; line = next) {
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        print_message("%s\n", line);
    }
    free(out);
    if (rc != 0) {
        testproc_print_log(&c->serve, "txo serve");
        testproc_print_log(&c->second, "txo serve --async");
        fail_msg("replay_examples.mjs exited with %d: the server and openapi.json disagree", rc);
    }
}

static void test_every_example_replays(void **state)
{
    struct ctx *c = *state;
    compensation_failed_saga(c);
    dead_letters(c);
    key_in_flight(c);

    static const char *const args[] = {"--admin-token", TOKEN, "--http-header-timeout", "1", NULL};
    unsigned port = testhttp_txo_start(&c->serve, "openapi_serve", "serve", args);
    static const char *const second_args[] = {"--async", "--max-connections-per-client", "1", NULL};
    unsigned second = testhttp_txo_start(&c->second, "openapi_second", "serve", second_args);
    replay(c, port, second);
    /* Under a sanitizer: no leak or race in any route the examples took. */
    testhttp_txo_stop(&c->second, "txo serve --async");
    testproc_remove_log(&c->second);
    testhttp_txo_stop(&c->serve, "txo serve");
    testproc_remove_log(&c->serve);

    /* Without --admin-token the admin endpoints need no token. */
    port = testhttp_txo_start(&c->serve, "openapi_open", "serve", NULL);
    testhttp_get(c->hc.h, port, "/outbox/stats", &c->hc.r);
    testhttp_expect_status(&c->hc.r, 200, "GET /outbox/stats without --admin-token nor a token");
    testhttp_get(c->hc.h, port, "/sagas/" SAGA_ID, &c->hc.r);
    testhttp_expect_status(&c->hc.r, 200, "GET /sagas/{id} without --admin-token nor a token");
    testhttp_get(c->hc.h, port, "/dlq/events", &c->hc.r);
    testhttp_expect_status(&c->hc.r, 200, "GET /dlq/events without --admin-token nor a token");
    testhttp_txo_stop(&c->serve, "txo serve without --admin-token");
    testproc_remove_log(&c->serve);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_example_replays, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
