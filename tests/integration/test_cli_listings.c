/*
 * The listing commands in both output modes against a real database: `txo stats`, `txo dlq
 * list`, `txo saga show`, `txo saga list --stuck` and `txo audit`. Each test writes the rows,
 * runs the `txo` binary, parses its --json document (one on stdout) and checks it against the
 * rows, then checks the table mode shows the same values under its headers, long text cut with
 * an ellipsis only there. A bad flag exits 2 before anything is read.
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

#include "order_saga.h"
#include "orders.h"
#include "testdb.h"
#include "testsql.h"
#include "testorders.h"

/* Each test sells from 100 of pen. */
static void stock(struct testdb *t)
{
    testorders_stock(t->db, "pen", 100);
}

/*
 * Runs `$TXO_BIN args...` with its standard error thrown away (the listings' JSON must be the
 * whole of standard output); returns the output (free()) and the exit status in *rc.
 */
static char *run_stdout(const char *const *args, int *rc)
{
    char cmd[2048];
    size_t used = (size_t)snprintf(cmd, sizeof(cmd), "'%s'", getenv("TXO_BIN"));
    for (size_t i = 0; args[i] != NULL; i++)
        used += (size_t)snprintf(cmd + used, sizeof(cmd) - used, " '%s'", args[i]);
    snprintf(cmd + used, sizeof(cmd) - used, " 2>/dev/null </dev/null");
    assert_true(used < sizeof(cmd) - 32);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
    }
    buf[len] = '\0';
    int status = pclose(p);
    *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return buf;
}

/* Runs args with --json added, wants exit status `want` and one JSON document on stdout. */
static json_t *run_json(const char *const *args, int want)
{
    const char *with[32];
    size_t n = 0;
    for (; args[n] != NULL; n++)
        with[n] = args[n];
    with[n++] = "--json";
    with[n] = NULL;
    int rc = 0;
    char *out = run_stdout(with, &rc);
    if (rc != want)
        fail_msg("txo %s --json exited %d, want %d: %s", args[0], rc, want, out);
    json_error_t jerr;
    json_t *doc = json_loads(out, 0, &jerr);
    if (doc == NULL)
        fail_msg("txo %s --json printed no single JSON document (%s): %s", args[0], jerr.text, out);
    free(out);
    return doc;
}

/* Runs args (table mode), wants exit status want; returns the output (free()). */
static char *run_table(const char *const *args, int want)
{
    int rc = 0;
    char *out = run_stdout(args, &rc);
    if (rc != want)
        fail_msg("txo %s exited %d, want %d: %s", args[0], rc, want, out);
    return out;
}

/*
 * The cells of the first line of out whose first cell is first (and second cell second, when
 * not NULL): a table's cells are separated by two spaces or more. A JSON array of strings, or
 * NULL when there is no such line.
 */
static json_t *table_row(const char *out, const char *first, const char *second)
{
    for (const char *line = out; *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
        json_t *cells = json_array();
        size_t i = 0;
        while (i < len) {
            while (i < len && line[i] == ' ')
                i++;
            size_t start = i;
            while (i < len && !(line[i] == ' ' && (i + 1 >= len || line[i + 1] == ' ')))
                i++;
            if (i > start)
                json_array_append_new(cells, json_stringn(line + start, i - start));
        }
        const char *c0 = json_string_value(json_array_get(cells, 0));
        const char *c1 = json_string_value(json_array_get(cells, 1));
        if (c0 != NULL && strcmp(c0, first) == 0 &&
            (second == NULL || (c1 != NULL && strcmp(c1, second) == 0)))
            return cells;
        json_decref(cells);
        line = end != NULL ? end + 1 : line + len;
    }
    return NULL;
}

/* Cell i of a row from table_row() ("" past its end). */
static const char *cell(const json_t *row, size_t i)
{
    const char *s = json_string_value(json_array_get(row, i));
    return s != NULL ? s : "";
}

static int64_t q_id(struct testdb *t, const char *sql, const char *id)
{
    struct txo_param p = txo_p_str(id);
    return testdb_i64(t->db, sql, &p, 1);
}

static int64_t member_i64(const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v))
        fail_msg("member %s is not an integer", key);
    return (int64_t)json_integer_value(v);
}

static const char *member_str(const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_string(v))
        fail_msg("member %s is not a string", key);
    return json_string_value(v);
}

/* A FAILED outbox event with its dead letter; returns the dead letter's id. */
static int64_t dead_letter(struct testdb *t, int aggregate, const char *error)
{
    struct txo_param p[] = {txo_p_i64(aggregate), txo_p_i64(aggregate), txo_p_i64(aggregate),
                            txo_p_str(error)};
    int64_t event_id =
        (int64_t)testsql_exec(t->db,
                              "INSERT INTO outbox_events (aggregate_type, aggregate_id, "
                              "event_type, payload, idempotency_key, status, attempts, "
                              "last_error) VALUES ('order', ?, 'OrderCreated', "
                              "CONCAT('{\"order_id\":', ?, '}'), CONCAT('order:', ?, ':created'), "
                              "'FAILED', 10, ?)",
                              p, 4)
            .insert_id;
    struct txo_param e = txo_p_i64(event_id);
    testsql_exec(t->db,
                 "INSERT INTO dead_letter_events (source_event_id, event_type, payload, error) "
                 "SELECT id, event_type, payload, last_error FROM outbox_events WHERE id = ?",
                 &e, 1);
    return testdb_q(t->db, "SELECT MAX(id) FROM dead_letter_events");
}

static void test_stats(void **state)
{
    struct testdb *t = *state;
    char saga_id[TXO_SAGA_ID_LEN];
    testorders_pen_saga(t->db, NULL, TXO_SAGA_COMPLETED, saga_id);
    struct order_faults decline = {.decline_payment = true};
    testorders_pen_saga(t->db, &decline, TXO_SAGA_COMPENSATED, saga_id);
    dead_letter(t, 900, "broker down");

    const char *args[] = {"stats", NULL};
    json_t *doc = run_json(args, 0);
    json_t *outbox = json_object_get(doc, "outbox");
    assert_int_equal(
        member_i64(outbox, "pending"),
        testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING'"));
    assert_int_equal(member_i64(outbox, "failed"), 1);
    assert_true(json_is_real(json_object_get(outbox, "oldest_pending_age_seconds")));
    json_t *sagas = json_object_get(doc, "sagas");
    assert_int_equal(
        member_i64(sagas, "COMPLETED"),
        testdb_q(t->db, "SELECT COUNT(*) FROM saga_instances WHERE status = 'COMPLETED'"));
    assert_int_equal(member_i64(sagas, "COMPENSATED"), 1);
    assert_int_equal(member_i64(json_object_get(doc, "dead_letters"), "total"),
                     testdb_q(t->db, "SELECT COUNT(*) FROM dead_letter_events"));
    assert_true(json_is_array(json_object_get(doc, "parked")));

    char *out = run_table(args, 0);
    json_t *header = table_row(out, "AREA", NULL);
    assert_non_null(header);
    assert_string_equal(cell(header, 2), "COUNT");
    json_t *row = table_row(out, "sagas", "COMPENSATED");
    assert_non_null(row);
    assert_string_equal(cell(row, 2), "1");
    json_decref(row);
    row = table_row(out, "outbox", "pending");
    char want[32];
    snprintf(want, sizeof(want), "%lld", (long long)member_i64(outbox, "pending"));
    assert_string_equal(cell(row, 2), want);
    json_decref(row);
    row = table_row(out, "dead letters", "total");
    assert_string_equal(cell(row, 2), "1");
    json_decref(row);
    /* Numbers are right-aligned: each ends in the column where the COUNT header ends (the
     * header is the first line). */
    size_t count_end = (size_t)(strstr(out, "COUNT") + strlen("COUNT") - out);
    const char *line = strstr(out, "\ndead letters  total");
    assert_non_null(line);
    line++;
    const char *p = line + strlen("dead letters  total");
    while (*p == ' ')
        p++;
    assert_int_equal(*p, '1');
    assert_int_equal((size_t)(p + 1 - line), count_end);
    json_decref(header);
    free(out);
    json_decref(doc);
}

static void test_dlq_list(void **state)
{
    struct testdb *t = *state;
    char long_error[200];
    memset(long_error, 'x', 150);
    memcpy(long_error, "broker refused: ", 16);
    long_error[150] = '\0';
    int64_t first = dead_letter(t, 901, "broker down");
    int64_t second = dead_letter(t, 902, long_error);

    const char *args[] = {"dlq", "list", NULL};
    json_t *doc = run_json(args, 0);
    assert_int_equal(json_array_size(doc), 2);
    json_t *d0 = json_array_get(doc, 0);
    json_t *d1 = json_array_get(doc, 1);
    assert_int_equal(member_i64(d0, "id"), first);
    assert_int_equal(member_i64(d1, "id"), second);
    assert_int_equal(member_i64(d0, "source_event_id"),
                     testdb_q(t->db, "SELECT id FROM outbox_events WHERE idempotency_key = "
                                     "'order:901:created'"));
    assert_string_equal(member_str(d0, "event_type"), "OrderCreated");
    assert_string_equal(member_str(d0, "error"), "broker down");
    assert_string_equal(member_str(d1, "error"), long_error); /* whole in JSON */
    assert_int_equal(member_i64(json_object_get(d0, "payload"), "order_id"), 901);
    assert_int_equal(member_i64(d0, "replay_count"), 0);
    assert_true(json_is_null(json_object_get(d0, "replayed_at")));
    json_decref(doc);

    const char *page[] = {"dlq", "list", "--limit=1", NULL};
    doc = run_json(page, 0);
    assert_int_equal(json_array_size(doc), 1);
    json_decref(doc);

    char *out = run_table(args, 0);
    json_t *header = table_row(out, "ID", NULL);
    assert_non_null(header);
    assert_string_equal(cell(header, 1), "EVENT_ID");
    assert_string_equal(cell(header, json_array_size(header) - 1), "ERROR");
    char id[32];
    snprintf(id, sizeof(id), "%lld", (long long)second);
    json_t *row = table_row(out, id, NULL);
    assert_non_null(row);
    const char *shown = cell(row, json_array_size(row) - 1);
    /* Cut to 60 characters, the last an ellipsis (3 bytes in UTF-8). */
    assert_int_equal(strlen(shown), 59 + 3);
    assert_memory_equal(shown, long_error, 59);
    assert_string_equal(shown + 59, "\xe2\x80\xa6");
    json_decref(row);
    json_decref(header);
    free(out);
}

static void test_saga_show(void **state)
{
    struct testdb *t = *state;
    char saga_id[TXO_SAGA_ID_LEN];
    struct order_faults faults = {.fail_shipment = true, .fail_refund = true};
    int64_t order = testorders_pen_saga(t->db, &faults, TXO_SAGA_COMPENSATION_FAILED, saga_id);

    const char *args[] = {"saga", "show", saga_id, NULL};
    json_t *doc = run_json(args, 0);
    assert_string_equal(member_str(doc, "saga_id"), saga_id);
    assert_string_equal(member_str(doc, "status"), "COMPENSATION_FAILED");
    struct txo_param p = txo_p_str(saga_id);
    char *created = testdb_str(t->db,
                               "SELECT DATE_FORMAT(created_at, '%Y-%m-%dT%H:%i:%s.%fZ') FROM "
                               "saga_instances WHERE id = ?",
                               &p, 1);
    assert_string_equal(member_str(doc, "created_at"), created);
    txo_free(created);
    json_t *steps = json_object_get(doc, "steps");
    assert_int_equal((int64_t)json_array_size(steps),
                     q_id(t, "SELECT COUNT(*) FROM saga_steps WHERE saga_id = ?", saga_id));
    json_t *ship = json_array_get(steps, 2);
    assert_string_equal(member_str(ship, "name"), "CreateShipment");
    assert_int_equal(
        member_i64(ship, "attempts"),
        q_id(t, "SELECT attempts FROM saga_steps WHERE saga_id = ? AND step_order = 3", saga_id));
    char *deadline = testdb_str(t->db,
                                "SELECT DATE_FORMAT(deadline_at, '%Y-%m-%dT%H:%i:%s.%fZ') FROM "
                                "saga_steps WHERE saga_id = ? AND step_order = 3",
                                &p, 1);
    assert_string_equal(member_str(ship, "deadline_at"), deadline);
    txo_free(deadline);
    json_t *charge = json_array_get(steps, 1);
    char *charge_status = testdb_str(
        t->db, "SELECT status FROM saga_steps WHERE saga_id = ? AND step_order = 2", &p, 1);
    assert_string_equal(member_str(charge, "status"), charge_status);
    txo_free(charge_status);

    /* Tables, here found by the order: the instance, then its steps. */
    char order_arg[32];
    snprintf(order_arg, sizeof(order_arg), "--order=%lld", (long long)order);
    const char *by_order[] = {"saga", "show", order_arg, NULL};
    char *out = run_table(by_order, 0);
    json_t *row = table_row(out, "SAGA_ID", NULL);
    assert_non_null(row);
    assert_string_equal(cell(row, 1), saga_id);
    json_decref(row);
    row = table_row(out, "STATUS", NULL);
    assert_string_equal(cell(row, 1), "COMPENSATION_FAILED");
    json_decref(row);
    row = table_row(out, "CREATED_AT", NULL);
    assert_string_equal(cell(row, 1), member_str(doc, "created_at"));
    json_decref(row);
    json_t *header = table_row(out, "STEP", "NAME");
    assert_non_null(header);
    assert_string_equal(cell(header, 4), "REMOTE");
    row = table_row(out, "3", "CreateShipment");
    assert_non_null(row);
    assert_string_equal(cell(row, 2), member_str(ship, "status"));
    char attempts[16];
    snprintf(attempts, sizeof(attempts), "%lld", (long long)member_i64(ship, "attempts"));
    assert_string_equal(cell(row, 3), attempts);
    assert_string_equal(cell(row, 5), member_str(ship, "deadline_at"));
    json_decref(row);
    json_decref(header);
    free(out);
    json_decref(doc);

    const char *unknown[] = {"saga", "show", "00000000-0000-0000-0000-000000000000", NULL};
    free(run_table(unknown, 1));
}

static void test_saga_list_stuck(void **state)
{
    struct testdb *t = *state;
    const char *args[] = {"saga", "list", "--stuck", "--idle=30", NULL};
    json_t *doc = run_json(args, 0);
    assert_int_equal(json_array_size(doc), 0);
    json_decref(doc);

    struct order_item item = {"pen", 1, 250};
    char orphan[TXO_SAGA_ID_LEN];
    int64_t order;
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(orders_create_with_saga(t->db, 3, &item, 1, &order, orphan, &err), 0);
    struct txo_param op = txo_p_str(orphan);
    assert_int_equal(txo_db_exec(t->db,
                                 "UPDATE saga_instances SET updated_at = NOW(6) - INTERVAL 90 "
                                 "SECOND, owner = 'gone:1', lease_until = NOW(6) - INTERVAL 60 "
                                 "SECOND WHERE id = ?",
                                 &op, 1, NULL, &err),
                     0);

    doc = run_json(args, 1);
    assert_int_equal(json_array_size(doc), 1);
    json_t *s0 = json_array_get(doc, 0);
    assert_string_equal(member_str(s0, "saga_id"), orphan);
    assert_string_equal(member_str(s0, "status"), "RUNNING");
    assert_string_equal(member_str(s0, "reason"), "no_live_owner");
    assert_true(member_i64(s0, "idle_seconds") >= 90);
    assert_true(json_is_null(json_object_get(s0, "deadline")));

    char *out = run_table(args, 1);
    json_t *header = table_row(out, "SAGA_ID", NULL);
    assert_non_null(header);
    assert_string_equal(cell(header, 4), "REASON");
    json_t *row = table_row(out, orphan, NULL);
    assert_non_null(row);
    assert_string_equal(cell(row, 2), "RUNNING");
    assert_string_equal(cell(row, 4), "no_live_owner");
    assert_true(atoi(cell(row, 3)) >= 90);
    json_decref(row);
    json_decref(header);
    free(out);
    json_decref(doc);
}

static void test_audit(void **state)
{
    struct testdb *t = *state;
    char saga_id[TXO_SAGA_ID_LEN];
    testorders_pen_saga(t->db, NULL, TXO_SAGA_COMPLETED, saga_id);
    int64_t lost = testorders_pen_saga(t->db, NULL, TXO_SAGA_COMPLETED, saga_id);
    testdb_exec(t->db, "UPDATE orders SET created_at = NOW(6) - INTERVAL 5 SECOND");
    testdb_exec(t->db, "UPDATE saga_instances SET updated_at = NOW(6) - INTERVAL 5 SECOND");

    const char *args[] = {"audit", "--settle=1", NULL};
    json_t *doc = run_json(args, 0);
    assert_int_equal(member_i64(doc, "orders_checked"),
                     testdb_q(t->db, "SELECT COUNT(*) FROM orders"));
    assert_int_equal(json_array_size(json_object_get(doc, "violations")), 0);
    json_decref(doc);

    struct txo_param p = txo_p_i64(lost);
    testsql_exec(t->db,
                 "DELETE FROM outbox_events WHERE aggregate_id = ? AND event_type = "
                 "'OrderCreated'",
                 &p, 1);
    doc = run_json(args, 1);
    json_t *violations = json_object_get(doc, "violations");
    assert_int_equal(json_array_size(violations), 1);
    json_t *v = json_array_get(violations, 0);
    assert_string_equal(member_str(v, "check"), "order_created_event");
    assert_int_equal(member_i64(v, "order_id"), lost);
    assert_true(strlen(member_str(v, "detail")) > 0);

    char *out = run_table(args, 1);
    json_t *header = table_row(out, "CHECK", NULL);
    assert_non_null(header);
    assert_string_equal(cell(header, 1), "ORDER_ID");
    json_t *row = table_row(out, "order_created_event", NULL);
    assert_non_null(row);
    char id[32];
    snprintf(id, sizeof(id), "%lld", (long long)lost);
    assert_string_equal(cell(row, 1), id);
    assert_non_null(strstr(out, "audit: 2 order(s) checked, 1 violation(s)"));
    json_decref(row);
    json_decref(header);
    free(out);
    json_decref(doc);
}

/* A bad flag or value of a listing command exits 2 before anything is read or printed. */
static void test_bad_flags_exit_2(void **state)
{
    (void)state;
    const char *const bad[][6] = {
        {"stats", "--no-such-flag", NULL},
        {"stats", "--json=maybe", NULL},
        {"dlq", "list", "--limit=0", NULL},
        {"dlq", "list", "--json", "--after-id=x", NULL},
        {"saga", "show", "--json", "--order=-1", NULL},
        {"saga", "list", "--stuck", "--idle=0", NULL},
        {"saga", "list", "--json", NULL}, /* a list needs --stuck */
        {"audit", "--json", "--window=0", NULL},
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(bad); i++) {
        int rc = 0;
        char *out = run_stdout(bad[i], &rc);
        if (rc != 2 || out[0] != '\0')
            fail_msg("txo %s %s: exit %d, want 2 with nothing on stdout: %s", bad[i][0], bad[i][1],
                     rc, out);
        free(out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats),     cmocka_unit_test(test_dlq_list),
        cmocka_unit_test(test_saga_show), cmocka_unit_test(test_saga_list_stuck),
        cmocka_unit_test(test_audit),     cmocka_unit_test(test_bad_flags_exit_2),
    };
    txo_log_set_level(TXO_LOG_ERROR);
    return testdb_run_each(tests, TXO_ARRAY_LEN(tests), "cli_list", TESTDB_NEW_EXPORT_ENV, stock);
}
