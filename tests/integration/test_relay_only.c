/*
 * The outbox on its own, as a team in another language adopts it: a database that only ever
 * saw `txo migrate --only outbox`, rows inserted with plain SQL, and the `txo` binary.
 *
 * Asserted: --only outbox creates outbox_events and dead_letter_events (and the relay's own
 * tables) and nothing else; text and integer aggregate ids both go in and come out of
 * `txo relay --publisher log` as JSON strings, numbered in their aggregate (sequence 1,
 * prev_sequence 0); `txo stats`, `txo dlq list`, `txo dlq replay`, the relay's /metrics and
 * /readyz work without the saga and command tables; `txo clean` deletes old PUBLISHED rows
 * and old replayed dead letters and nothing else; `txo relay --clean-interval` does the same
 * in-process, archiving with --clean-archive; the relay's heartbeat finds no txo_processes and says
 * so in one log line; a later full `txo migrate` adds the rest of the schema; an outbox whose
 * published_at was stored keeps its times through the migration that makes it virtual.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include <sys/wait.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>

#include "testarchive.h"
#include "testdb.h"
#include "testhttp.h"
#include "testproc.h"

/* Runs `txo args...` to completion; returns its exit status and (malloc'd) output. */
static int run_txo(const char *const *args, char **out)
{
    return testproc_run_txo("relayonly-cli", args, 60000, out);
}

/* run_txo that must exit 0; returns the output (free()). */
static char *txo_ok(const char *const *args)
{
    char *out = NULL;
    int rc = run_txo(args, &out);
    if (rc != 0)
        fail_msg("txo %s exited %d:\n%s", args[0], rc, out);
    return out;
}

static void migrate_outbox_only(struct testdb *t)
{
    const char *args[] = {"migrate", "--only", "outbox", NULL};
    free(txo_ok(args));
    assert_int_equal(testdb_q(t->db,
                              "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = "
                              "DATABASE() AND table_name NOT IN ('outbox_events', "
                              "'dead_letter_events', 'outbox_shards', 'outbox_relays', "
                              "'outbox_parked', 'outbox_aggregates', 'outbox_replays', "
                              "'txo_schema_migrations')"),
                     0);
    assert_int_equal(testdb_q(t->db,
                              "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = "
                              "DATABASE()"),
                     8);
}

/* What another application's code does, each INSERT in its own transaction. */
static void insert_foreign_rows(struct testdb *t)
{
    testdb_exec(t->db, "START TRANSACTION");
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key) VALUES ('customer', "
                       "'7f9c2e1a-55b0-4c1e-9d7a-0b6f3c2d1e00', 'CustomerSignedUp', "
                       "'{\"email\":\"zoe@example.com\"}', 'customer:7f9c:signup')");
    testdb_exec(t->db, "COMMIT");
    testdb_exec(t->db, "START TRANSACTION");
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key) VALUES ('invoice', 42, 'InvoiceIssued', "
                       "'{\"invoice_id\":42}', 'invoice:42:issued')");
    testdb_exec(t->db, "COMMIT");
}

/* The envelopes a log relay printed (lines starting with '{'), in order. */
static json_t *envelopes(const char *out)
{
    json_t *all = json_array();
    for (const char *line = out; line != NULL && *line != '\0';) {
        const char *eol = strchr(line, '\n');
        size_t len = eol != NULL ? (size_t)(eol - line) : strlen(line);
        if (len > 0 && line[0] == '{') {
            json_error_t jerr;
            json_t *env = json_loadb(line, len, 0, &jerr);
            if (env == NULL)
                fail_msg("not JSON (%s): %.*s", jerr.text, (int)len, line);
            json_array_append_new(all, env);
        }
        line = eol != NULL ? eol + 1 : NULL;
    }
    return all;
}

static const char *str_of(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_string(v))
        fail_msg("\"%s\" is not a string", key);
    return json_string_value(v);
}

/*
 * `txo relay --publisher null` with --ordering ordering (NULL: its default) and
 * --metrics-listen on a free port, started in p under tag and up once /healthz answers;
 * returns the port.
 */
static unsigned start_relay(struct testproc *p, const char *tag, const char *ordering)
{
    unsigned port = testproc_free_port();
    char listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", port);
    const char *argv[10] = {testproc_txo_bin(), "relay", "--publisher", "null"};
    size_t n = 4;
    if (ordering != NULL) {
        argv[n++] = "--ordering";
        argv[n++] = ordering;
    }
    argv[n++] = "--metrics-listen";
    argv[n++] = listen;
    argv[n] = NULL;
    testproc_start(p, tag, argv, NULL);
    if (!testproc_wait_http(port, "/healthz", 10000)) {
        testproc_print_log(p, tag);
        fail_msg("no /healthz");
    }
    return port;
}

/* SIGTERM to the relay in p, which must stop cleanly; what names it in its printed log. */
static void stop_relay(struct testproc *p, const char *what)
{
    if (!testproc_stop(p, 10000)) {
        testproc_print_log(p, what);
        fail_msg("the relay did not stop cleanly");
    }
}

static void test_relay_only_database_end_to_end(void **state)
{
    struct testdb *t = *state;
    migrate_outbox_only(t);
    insert_foreign_rows(t);

    const char *drain[] = {"relay", "--drain", "--publisher", "log", NULL};
    char *out = txo_ok(drain);
    json_t *envs = envelopes(out);
    free(out);
    assert_int_equal(json_array_size(envs), 2);
    assert_string_equal(str_of(json_array_get(envs, 0), "aggregate_id"),
                        "7f9c2e1a-55b0-4c1e-9d7a-0b6f3c2d1e00");
    assert_string_equal(str_of(json_array_get(envs, 1), "aggregate_id"), "42");
    assert_string_equal(str_of(json_array_get(envs, 1), "type"), "InvoiceIssued");
    /* Rows that name only the contract's columns are numbered in their aggregate too. */
    for (size_t i = 0; i < 2; i++) {
        json_t *e = json_array_get(envs, i);
        assert_int_equal(json_integer_value(json_object_get(e, "sequence")), 1);
        assert_int_equal(json_integer_value(json_object_get(e, "prev_sequence")), 0);
    }
    json_decref(envs);
    assert_int_equal(
        testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'"), 2);

    /* A poison event: one attempt against a receiver that is not there. */
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key) VALUES ('invoice', 'inv-43', 'InvoiceIssued', "
                       "'{\"invoice_id\":43}', 'invoice:43:issued')");
    char url[64], port[16];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/hooks", testproc_free_port());
    const char *fail_once[] = {"relay", "--drain",        "--publisher", "webhook", "--webhook-url",
                               url,     "--max-attempts", "1",           NULL};
    free(txo_ok(fail_once));
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'FAILED'"),
                     1);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM dead_letter_events"), 1);

    const char *stats[] = {"stats", "--json", NULL};
    out = txo_ok(stats);
    json_error_t jerr;
    json_t *doc = json_loads(out, 0, &jerr);
    if (doc == NULL)
        fail_msg("txo stats --json printed no JSON (%s): %s", jerr.text, out);
    free(out);
    json_t *outbox = json_object_get(doc, "outbox");
    assert_int_equal(json_integer_value(json_object_get(outbox, "published")), 2);
    assert_int_equal(json_integer_value(json_object_get(outbox, "failed")), 1);
    assert_true(json_is_null(json_object_get(doc, "sagas")));
    assert_true(json_is_null(json_object_get(doc, "commands")));
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(doc, "dead_letters"), "total")), 1);
    json_decref(doc);
    const char *stats_table[] = {"stats", NULL};
    out = txo_ok(stats_table);
    assert_non_null(strstr(out, "outbox-only schema"));
    free(out);

    /* A later event of the failed one's aggregate is parked behind it (ordering aggregate):
     * `txo stats` and the relay's metrics show it, and the relay leaves it alone. */
    testdb_exec(t->db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                       "payload, idempotency_key) VALUES ('invoice', 'inv-43', 'InvoicePaid', "
                       "'{\"invoice_id\":43}', 'invoice:43:paid')");
    out = txo_ok(stats);
    doc = json_loads(out, 0, &jerr);
    if (doc == NULL)
        fail_msg("txo stats --json printed no JSON (%s): %s", jerr.text, out);
    free(out);
    json_t *parked = json_object_get(doc, "parked");
    assert_int_equal(json_array_size(parked), 1);
    json_t *p0 = json_array_get(parked, 0);
    assert_string_equal(str_of(p0, "aggregate_type"), "invoice");
    assert_string_equal(str_of(p0, "aggregate_id"), "inv-43");
    assert_string_equal(str_of(p0, "status"), "FAILED");
    assert_int_equal(json_integer_value(json_object_get(p0, "waiting")), 1);
    assert_non_null(strstr(str_of(p0, "last_error"), "TXO_E"));
    json_decref(doc);
    out = txo_ok(stats_table);
    assert_non_null(strstr(out, "Parked: 1 aggregate held back by a failed event"));
    const char *row = strstr(out, "\ninvoice ");
    assert_non_null(row);
    const char *agg = strstr(row, "inv-43");
    assert_true(agg != NULL && agg < strchr(row + 1, '\n'));
    free(out);
    {
        struct testproc prelay;
        unsigned pport = start_relay(&prelay, "relayonly-parked", "aggregate");
        CURL *ph = curl_easy_init();
        struct testhttp_reply pr = {0};
        testhttp_get(ph, pport, "/metrics", &pr);
        testhttp_expect_status(&pr, 200, "GET /metrics");
        assert_true(testhttp_metric_value(pr.body, "txo_outbox_parked_aggregates") == 1.0);
        testhttp_reply_release(&pr);
        curl_easy_cleanup(ph);
        stop_relay(&prelay, "txo relay --ordering aggregate");
        testproc_remove_log(&prelay);
        assert_int_equal(testdb_q(t->db,
                                  "SELECT COUNT(*) FROM outbox_events WHERE idempotency_key = "
                                  "'invoice:43:paid' AND status = 'PENDING'"),
                         1);
        testdb_exec(t->db, "DELETE FROM outbox_events WHERE idempotency_key = 'invoice:43:paid'");
    }

    const char *list[] = {"dlq", "list", "--json", NULL};
    out = txo_ok(list);
    assert_non_null(strstr(out, "\"event_type\":\"InvoiceIssued\""));
    free(out);
    int64_t letter = testdb_q(t->db, "SELECT MIN(id) FROM dead_letter_events");
    snprintf(port, sizeof(port), "%" PRId64, letter);
    const char *replay[] = {"dlq", "replay", port, NULL};
    free(txo_ok(replay));
    out = txo_ok(drain);
    envs = envelopes(out);
    free(out);
    assert_int_equal(json_array_size(envs), 1);
    assert_string_equal(str_of(json_array_get(envs, 0), "aggregate_id"), "inv-43");
    json_decref(envs);

    /* The relay's /metrics and /readyz on this schema. */
    struct testproc relay;
    unsigned mport = start_relay(&relay, "relayonly-relay", NULL);
    CURL *h = curl_easy_init();
    struct testhttp_reply r = {0};
    testhttp_get(h, mport, "/readyz", &r);
    testhttp_expect_status(&r, 200, "GET /readyz");
    testhttp_get(h, mport, "/metrics", &r);
    testhttp_expect_status(&r, 200, "GET /metrics");
    assert_true(testhttp_metric_value(r.body, "txo_outbox_pending") == 0.0);
    assert_true(testhttp_metric_value(r.body, "txo_outbox_oldest_pending_age_seconds") == 0.0);
    assert_true(testhttp_metric_value(r.body, "txo_metrics_collector_errors_total") <= 0.0);
    testhttp_reply_release(&r);
    curl_easy_cleanup(h);
    stop_relay(&relay, "txo relay");
    /* No txo_processes here: the heartbeat said so in one line, and nothing else failed. */
    char *log = testproc_log(&relay);
    size_t registry_lines = 0;
    for (const char *p = log; (p = strstr(p, "component=registry")) != NULL; p++)
        registry_lines++;
    bool named = strstr(log, "txo_processes does not exist") != NULL;
    bool errors = strstr(log, "level=error") != NULL;
    free(log);
    if (registry_lines != 1 || !named || errors) {
        testproc_print_log(&relay, "txo relay");
        fail_msg("a relay-only database: want one registry line naming txo_processes and no "
                 "error, got %zu line(s)",
                 registry_lines);
    }
    testproc_remove_log(&relay);

    /* Retention: rows published two hours ago and the letter replayed two hours ago go. */
    testdb_exec(t->db, "UPDATE outbox_events SET published_time = NOW(6) - INTERVAL 2 HOUR, "
                       "next_attempt_at = NOW(6) - INTERVAL 2 HOUR "
                       "WHERE idempotency_key LIKE 'customer:%'");
    testdb_exec(t->db, "UPDATE dead_letter_events SET replayed_at = NOW(6) - INTERVAL 2 HOUR");
    const char *clean[] = {"clean", "--outbox-retention", "3600", "--dead-letter-retention", "3600",
                           NULL};
    out = txo_ok(clean);
    assert_non_null(strstr(out, "deleted outbox=1 dead_letters=1"));
    free(out);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events"), 2);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM dead_letter_events"), 0);

    /* The same, in the relay. */
    testdb_exec(t->db, "UPDATE outbox_events SET published_time = NOW(6) - INTERVAL 2 HOUR, "
                       "next_attempt_at = NOW(6) - INTERVAL 2 HOUR "
                       "WHERE idempotency_key = 'invoice:42:issued'");
    int64_t old_id = testdb_q(t->db, "SELECT id FROM outbox_events WHERE idempotency_key = "
                                     "'invoice:42:issued'");
    char dir[256];
    testproc_temp_path(dir, sizeof(dir), "relayonly", "archive");
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    assert_int_equal(system(cmd), 0);
    const char *in_relay[] = {testproc_txo_bin(),
                              "relay",
                              "--publisher",
                              "null",
                              "--clean-interval",
                              "1",
                              "--outbox-retention",
                              "3600",
                              "--clean-archive",
                              dir,
                              NULL};
    testproc_start(&relay, "relayonly-clean", in_relay, NULL);
    bool gone = false;
    for (int i = 0; i < 100 && !gone; i++) {
        gone = testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events") == 1;
        if (!gone)
            nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
    }
    if (!testproc_stop(&relay, 10000) || !gone) {
        testproc_print_log(&relay, "txo relay --clean-interval 1");
        fail_msg("the relay's cleaner did not delete the old PUBLISHED row");
    }
    testproc_remove_log(&relay);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events WHERE idempotency_key = "
                                     "'invoice:43:issued'"),
                     1);
    /* --clean-archive: the row deleted is in the archive, once. */
    int64_t *archived = NULL;
    size_t n_archived = testarchive_ids(dir, "outbox_events", &archived);
    testarchive_expect_ids(archived, n_archived, &old_id, 1);
    free(archived);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);

    /* A later full migrate adds the rest of the schema. */
    const char *full[] = {"migrate", NULL};
    free(txo_ok(full));
    assert_true(testdb_q(t->db,
                         "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = "
                         "DATABASE() AND table_name = 'saga_instances'") == 1);
    out = txo_ok(stats);
    doc = json_loads(out, 0, &jerr);
    assert_non_null(doc);
    free(out);
    assert_true(json_is_object(json_object_get(doc, "sagas")));
    json_decref(doc);
}

/*
 * An outbox of a txo whose published_at was a stored column, NULL until the mark: `txo migrate
 * --only outbox` keeps every published time (and updated_at), leaves the unpublished events
 * unpublished, and the relay then marks them as it publishes them.
 */
static void test_publish_mark_migration_keeps_the_times(void **state)
{
    struct testdb *t = *state;
    migrate_outbox_only(t);
    testdb_exec(t->db, "ALTER TABLE outbox_events DROP COLUMN published_at, "
                       "DROP COLUMN published_time, "
                       "ADD COLUMN published_at DATETIME(6) NULL AFTER last_error");
    testdb_exec(t->db, "DELETE FROM txo_schema_migrations "
                       "WHERE version = '0026_outbox_published_in_place.sql'");
    insert_foreign_rows(t);
    testdb_exec(t->db, "UPDATE outbox_events SET status = 'PUBLISHED', "
                       "published_at = '2026-01-02 03:04:05.123456', "
                       "updated_at = '2026-01-02 03:04:05.123456' "
                       "WHERE idempotency_key = 'customer:7f9c:signup'");

    const char *migrate[] = {"migrate", "--only", "outbox", NULL};
    free(txo_ok(migrate));
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events "
                                         "WHERE idempotency_key = 'customer:7f9c:signup' "
                                         "AND status = 'PUBLISHED' "
                                         "AND published_at = '2026-01-02 03:04:05.123456' "
                                         "AND updated_at = '2026-01-02 03:04:05.123456'"),
                     1);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events "
                                         "WHERE idempotency_key = 'invoice:42:issued' "
                                         "AND status = 'PENDING' AND published_at IS NULL"),
                     1);
    assert_int_equal(TESTDB_COUNT(t->db, "information_schema.columns "
                                         "WHERE table_schema = DATABASE() AND table_name = "
                                         "'outbox_events' AND column_name = 'published_at' "
                                         "AND is_generated = 'ALWAYS'"),
                     1);

    const char *drain[] = {"relay", "--drain", "--publisher", "log", NULL};
    char *out = txo_ok(drain);
    json_t *envs = envelopes(out);
    free(out);
    assert_int_equal(json_array_size(envs), 1);
    assert_string_equal(str_of(json_array_get(envs, 0), "aggregate_id"), "42");
    json_decref(envs);
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events "
                                         "WHERE idempotency_key = 'invoice:42:issued' "
                                         "AND status = 'PUBLISHED' "
                                         "AND published_at >= created_at"),
                     1);
}

static void test_only_takes_outbox(void **state)
{
    (void)state;
    char *out = NULL;
    const char *args[] = {"migrate", "--only", "sagas", NULL};
    assert_int_equal(run_txo(args, &out), 2);
    assert_non_null(strstr(out, "--only must be outbox"));
    free(out);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relay_only_database_end_to_end),
        cmocka_unit_test(test_publish_mark_migration_keeps_the_times),
        cmocka_unit_test(test_only_takes_outbox),
    };
    int rc = testdb_run_each(tests, TXO_ARRAY_LEN(tests), "relayonly",
                             TESTDB_NEW_EMPTY | TESTDB_NEW_EXPORT_ENV, NULL);
    curl_global_cleanup();
    return rc;
}
