/*
 * The example of docs/outbox-contract.md, run as written: a Node.js service (mysql2) inserts
 * a business row and its outbox event in one transaction into a database that only saw
 * `txo migrate --only outbox`, and `txo relay --publisher log` publishes the event.
 *
 * Asserted: both rows are there after the commit; the relay publishes exactly that event,
 * with the key the example printed, the UUID aggregate id as a string and its payload.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <jansson.h>

#include "testdb.h"
#include "testproc.h"

/* Runs argv to completion; returns its exit status and (malloc'd) output. */
static int run(const char *const *argv, char **out)
{
    return testproc_run("contract", argv, 60000, out);
}

static void test_node_example_then_relay(void **state)
{
    struct testdb *t = *state;
    const char *js_dir = getenv("TXO_JS_DIR");
    if (js_dir == NULL)
        fail_msg("TXO_JS_DIR is not set (CTest sets it)");
    char *out = NULL;
    const char *migrate[] = {testproc_txo_bin(), "migrate", "--only", "outbox", NULL};
    if (run(migrate, &out) != 0)
        fail_msg("txo migrate --only outbox: %s", out);
    free(out);

    char example[512];
    snprintf(example, sizeof(example), "%s/../../docs/examples/outbox-node.mjs", js_dir);
    const char *node[] = {"/usr/bin/env", "node", example, "zoe@example.com", NULL};
    int rc = run(node, &out);
    if (rc != 0)
        fail_msg("the example exited %d:\n%s", rc, out);
    char key[128];
    if (sscanf(out, "%127s", key) != 1 || strncmp(key, "customer:", 9) != 0)
        fail_msg("the example printed no key: %s", out);
    free(out);
    assert_int_equal(testdb_i64(t->db,
                                "SELECT COUNT(*) FROM customers WHERE email = "
                                "'zoe@example.com'",
                                NULL, 0),
                     1);

    const char *relay[] = {testproc_txo_bin(), "relay", "--drain", "--publisher", "log", NULL};
    rc = run(relay, &out);
    if (rc != 0)
        fail_msg("txo relay exited %d:\n%s", rc, out);
    json_t *env = NULL;
    for (const char *line = out; line != NULL && *line != '\0';) {
        const char *eol = strchr(line, '\n');
        size_t len = eol != NULL ? (size_t)(eol - line) : strlen(line);
        if (len > 0 && line[0] == '{') {
            assert_null(env); /* exactly one event */
            env = json_loadb(line, len, 0, NULL);
            assert_non_null(env);
        }
        line = eol != NULL ? eol + 1 : NULL;
    }
    free(out);
    assert_non_null(env);
    assert_string_equal(json_string_value(json_object_get(env, "idempotency_key")), key);
    assert_string_equal(json_string_value(json_object_get(env, "type")), "CustomerSignedUp");
    const char *agg = json_string_value(json_object_get(env, "aggregate_id"));
    assert_non_null(agg);
    assert_int_equal(strlen(agg), 36);
    json_t *payload = json_object_get(env, "payload");
    assert_string_equal(json_string_value(json_object_get(payload, "email")), "zoe@example.com");
    assert_string_equal(json_string_value(json_object_get(payload, "customer_id")), agg);
    json_decref(env);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_node_example_then_relay),
    };
    return testdb_run_each(tests, TXO_ARRAY_LEN(tests), "contract",
                           TESTDB_NEW_EMPTY | TESTDB_NEW_EXPORT_ENV, NULL);
}
