/*
 * `txo audit --outbox` against a real MariaDB and real brokers (a private nats-server and
 * redis-server per test, as the broker tests start them; for Kafka librdkafka's mock cluster,
 * the one the Kafka tests use), on a relay-only database (only
 * `txo migrate --only outbox`, rows inserted with plain SQL as another application would):
 * events are published by `txo relay --drain`, then the broker or the outbox is damaged
 * the way an incident would, and the `txo` binary runs as a child process for its exit status
 * and its output.
 *
 * Asserted: a clean run exits 0 (both envelope formats, a window whose edges cut through the
 * publishing, an id window) and leaves the outbox, the stream and its consumers as they were;
 * a PUBLISHED event the broker lacks (a message deleted at the broker, a row marked PUBLISHED
 * that never went out) is listed as missing, exit 1; a message at the broker the outbox does not
 * have (published by another client, with or without a key) is listed as extra; an old PENDING
 * event is listed, an event due later on purpose is not; a broker that dropped the start of the
 * window, and an outbox that deleted rows, give broker_trimmed and outbox_trimmed instead of
 * false findings; bad flags exit 2 before anything is connected to. The summary is the last
 * line of stdout, with the same keys every time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "testrun.h"
#include "testdb.h"
#include "testkafka.h"
#include "testnats.h"
#include "testproc.h"
#include "testredis.h"

#define STREAM "TXO_EVENTS"
/* The tests' brokers and database run on this host: their clocks are one. A small skew keeps
 * the sleeps that separate "before" from "after" short. */
#define SKEW_MS   "200"
#define SKEW_WAIT 400 /* ms: longer than the skew */

struct ctx {
    struct testdb db;
    struct testnats nats;
    struct testredis redis;
    struct testkafka kafka;
    char broker_url[300]; /* "--nats-url=...", "--redis-url=..." or "--kafka-brokers=..." */
    const char *publisher;
};

/*
 * A test's fixture: its relay-only database and, unless publisher is NULL, that broker
 * ("nats", "redis" or "kafka") started for it, with the flag that names it to txo. Kafka is
 * librdkafka's mock cluster in this process (Debian has no Kafka server), reached by the txo
 * processes over TCP; it cannot look offsets up by time, so the reader's fallback (the
 * partitions from their low watermark) is what runs here.
 */
static struct ctx *ctx_new(const char *publisher)
{
    struct ctx *c = testdb_fixture_new(sizeof(struct ctx), "auditob",
                                       TESTDB_NEW_OUTBOX_ONLY | TESTDB_NEW_EXPORT_ENV);
    c->publisher = publisher;
    if (publisher == NULL)
        return c;
    if (strcmp(publisher, "nats") == 0) {
        testnats_start(&c->nats);
        snprintf(c->broker_url, sizeof(c->broker_url), "--nats-url=%s", c->nats.url);
    } else if (strcmp(publisher, "redis") == 0) {
        testredis_start(&c->redis);
        snprintf(c->broker_url, sizeof(c->broker_url), "--redis-url=%s", c->redis.url);
    } else {
        testkafka_start(&c->kafka);
        testkafka_create_topic(&c->kafka, "txo.events.order", 2);
        testkafka_create_topic(&c->kafka, "txo.events.customer", 1);
        snprintf(c->broker_url, sizeof(c->broker_url), "--kafka-brokers=%s", c->kafka.bootstraps);
    }
    return c;
}

/* Stops whatever broker ctx_new() started, then drops the database and frees c. */
static void ctx_free(struct ctx *c)
{
    testnats_cleanup(&c->nats);
    testredis_cleanup(&c->redis);
    testkafka_stop(&c->kafka);
    testdb_fixture_free(c);
}

static int setup_nats(void **state)
{
    *state = ctx_new("nats");
    return 0;
}

static int setup_redis(void **state)
{
    *state = ctx_new("redis");
    return 0;
}

static int setup_kafka(void **state)
{
    *state = ctx_new("kafka");
    return 0;
}

static int setup_db_only(void **state)
{
    *state = ctx_new(NULL);
    return 0;
}

static int teardown(void **state)
{
    ctx_free(*state);
    return 0;
}

/* n events of aggregate type agg, keys "<prefix>:<i>", each INSERT its own transaction. */
static void insert_events(struct ctx *c, const char *agg, const char *prefix, int n)
{
    for (int i = 1; i <= n; i++) {
        char key[64], id[16];
        snprintf(key, sizeof(key), "%s:%d", prefix, i);
        snprintf(id, sizeof(id), "%d", i);
        struct txo_param p[] = {txo_p_str(agg), txo_p_str(id), txo_p_str(key)};
        struct txo_error err;
        txo_error_init(&err);
        if (txo_db_exec(c->db.db,
                        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                        "payload, idempotency_key) VALUES (?, ?, 'Happened', '{\"n\": 1}', ?)",
                        p, 3, NULL, &err) < 0)
            fail_msg("insert %s: %s", key, err.msg);
    }
}

/* `txo relay --drain` to the test's broker, with extra flags (NULL-terminated). */
static void relay_drain(struct ctx *c, const char *const *extra)
{
    const char *args[16] = {"relay", "--drain", "--publisher", c->publisher, c->broker_url};
    size_t n = 5;
    for (; extra != NULL && *extra != NULL; extra++)
        args[n++] = *extra;
    args[n] = NULL;
    char *out = NULL;
    int rc = testproc_run_txo("auditob-relay", args, 60000, &out);
    if (rc != 0)
        fail_msg("txo relay exited %d:\n%s", rc, out);
    free(out);
}

/* n events inserted as insert_events() does, then published by `txo relay --drain`. */
static void publish_events(struct ctx *c, const char *agg, const char *prefix, int n)
{
    insert_events(c, agg, prefix, n);
    relay_drain(c, NULL);
}

/*
 * Runs `txo audit --outbox` on the test's broker with args (NULL-terminated; NULL: none) and
 * returns its
 * exit status; *out gets its stdout alone (stderr is the log: the summary must be the last
 * line of stdout).
 */
static int audit(struct ctx *c, const char *const *args, char **out)
{
    const char *argv[40] = {"/bin/sh",          "-c",    "exec \"$0\" \"$@\" 2>/dev/null",
                            testproc_txo_bin(), "audit", "--outbox"};
    size_t n = 6;
    if (c->publisher != NULL) {
        argv[n++] = "--publisher";
        argv[n++] = c->publisher;
        argv[n++] = c->broker_url;
        argv[n++] = "--clock-skew=" SKEW_MS;
    }
    for (; args != NULL && *args != NULL; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    int rc = testproc_run("auditob", argv, 120000, out);
    print_message("txo audit --outbox exited %d:\n%s", rc, *out);
    return rc;
}

/* The last line of out, which must be the summary (the test fails otherwise). */
static const char *summary_line(const char *out)
{
    size_t len = strlen(out);
    while (len > 0 && out[len - 1] == '\n')
        len--;
    size_t start = len;
    while (start > 0 && out[start - 1] != '\n')
        start--;
    if (strncmp(out + start, "audit=outbox ", 13) != 0)
        fail_msg("the last line is not the summary: %.*s", (int)(len - start), out + start);
    return out + start;
}

/* The summary's value of key (-1 when absent). */
static int64_t summary(const char *out, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof(pat), " %s=", key);
    const char *v = strstr(summary_line(out), pat);
    return v != NULL ? strtoll(v + strlen(pat), NULL, 10) : -1;
}

/* Whether the summary holds key_value ("result=clean") as one of its fields. */
static bool summary_says(const char *out, const char *key_value)
{
    char pat[96];
    snprintf(pat, sizeof(pat), " %s ", key_value);
    return strstr(summary_line(out), pat) != NULL;
}

/* Whether out lists a finding of kind with this key: a line of the findings table whose first
 * cell is kind and another cell is key (cells are set apart by two spaces or more). */
static bool listed(const char *out, const char *kind, const char *key)
{
    size_t kind_len = strlen(kind), key_len = strlen(key);
    for (const char *line = out; *line != '\0';) {
        const char *eol = strchr(line, '\n');
        size_t n = eol != NULL ? (size_t)(eol - line) : strlen(line);
        if (n > kind_len + 2 && strncmp(line, kind, kind_len) == 0 &&
            strncmp(line + kind_len, "  ", 2) == 0) {
            for (const char *p = line + kind_len; p + key_len <= line + n; p++) {
                bool starts = p[-1] == ' ' && p[-2] == ' ';
                bool ends = p + key_len == line + n || (p[key_len] == ' ' && p[key_len + 1] == ' ');
                if (starts && ends && strncmp(p, key, key_len) == 0)
                    return true;
            }
        }
        line = eol != NULL ? eol + 1 : line + n;
    }
    return false;
}

static void assert_clean(const char *out, int rc, int64_t events)
{
    assert_int_equal(rc, 0);
    assert_true(summary_says(out, "result=clean"));
    assert_int_equal(summary(out, "events"), events);
    static const char *const kinds[] = {"missing",        "extra",          "pending",
                                        "broker_trimmed", "outbox_trimmed", "sequence_gap"};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        assert_int_equal(summary(out, kinds[i]), 0);
    assert_null(strstr(out, "KIND  ")); /* no findings table */
}

/* audit() with args, which must find something (exit 1); returns its stdout (free it). */
static char *audit_findings(struct ctx *c, const char *const *args)
{
    char *out = NULL;
    assert_int_equal(audit(c, args, &out), 1);
    return out;
}

/* audit() with args, which must be clean over events events; returns its stdout (free it). */
static char *audit_clean(struct ctx *c, const char *const *args, int64_t events)
{
    char *out = NULL;
    int rc = audit(c, args, &out);
    assert_clean(out, rc, events);
    return out;
}

/* A row of aggregate type agg marked PUBLISHED though it never went out: key "<prefix>:1". */
static void published_unsent(struct ctx *c, const char *agg, const char *prefix)
{
    insert_events(c, agg, prefix, 1);
    char key[64];
    snprintf(key, sizeof(key), "%s:1", prefix);
    struct txo_param k = txo_p_str(key);
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_exec(c->db.db,
                    "UPDATE outbox_events SET status = 'PUBLISHED', published_time = NOW(6) "
                    "WHERE idempotency_key = ?",
                    &k, 1, NULL, &err) < 0)
        fail_msg("marking %s: %s", key, err.msg);
}

/*
 * An audit that finds one finding of kind, the event key, and nothing missing; its output
 * says says too (NULL: nothing more).
 */
static void assert_one_finding(struct ctx *c, const char *kind, const char *key, const char *says)
{
    char *out = audit_findings(c, NULL);
    assert_int_equal(summary(out, kind), 1);
    assert_int_equal(summary(out, "missing"), 0);
    assert_true(listed(out, kind, key));
    if (says != NULL && strstr(out, says) == NULL)
        fail_msg("the audit does not say \"%s\"", says);
    free(out);
}

/* ---- NATS ---- */

static void test_nats_clean_both_envelopes_and_windows(void **state)
{
    struct ctx *c = *state;
    publish_events(c, "order", "order", 6);
    /* The other envelope format: the key travels in Nats-Msg-Id either way. */
    insert_events(c, "customer", "customer", 4);
    const char *binary[] = {"--envelope", "cloudevents-binary", NULL};
    relay_drain(c, binary);
    assert_int_equal(testnats_stream_msgs(&c->nats, STREAM), 10);

    const char *checksum = "SELECT CRC32(GROUP_CONCAT(CONCAT_WS('|', id, status, attempts, "
                           "published_at, updated_at) ORDER BY id)) FROM outbox_events";
    int64_t before = testdb_q(c->db.db, checksum);
    char *out = audit_clean(c, NULL, 10);
    assert_int_equal(summary(out, "messages"), 10);
    assert_int_equal(summary(out, "duplicates"), 0);
    free(out);

    /* The other forms of a time window: an age, and a date alone (its midnight). */
    const char *age[] = {"--since=1d", "--until=now", NULL};
    out = audit_clean(c, age, 10);
    free(out);
    char *day = testdb_str(c->db.db, "SELECT DATE(MIN(created_at)) FROM outbox_events", NULL, 0);
    char since[64];
    snprintf(since, sizeof(since), "--since=%s", day);
    txo_free(day);
    const char *date[] = {since, NULL};
    out = audit_clean(c, date, 10);
    free(out);

    /* An id window: the customers only. Their messages are found, the orders' lie in the
     * window's time span but have rows: nothing to report. */
    const char *ids[] = {"--from-id=7", "--to-id=10", NULL};
    out = audit_clean(c, ids, 4);
    assert_true(summary_says(out, "window=id"));
    free(out);

    /* Reads only: the rows, the stream and its consumers are as they were. */
    assert_int_equal(testdb_q(c->db.db, checksum), before);
    assert_int_equal(testnats_stream_msgs(&c->nats, STREAM), 10);
    assert_int_equal(testnats_stream_consumers(&c->nats, STREAM), 0);
}

/*
 * The window's edges: events created before --since but published inside the window are at
 * the broker in it; they have rows, so they are not extra (and, out of the window, not checked
 * for missing). Events created after --until are left out the same way.
 */
static void test_nats_window_edges(void **state)
{
    struct ctx *c = *state;
    insert_events(c, "order", "before", 3);
    txo_sleep_ms(1200);
    char since[TXO_RFC3339_LEN];
    txo_format_rfc3339(txo_realtime_us(), since);
    relay_drain(c, NULL); /* the events of before the window, published inside it */
    publish_events(c, "order", "inside", 3);
    txo_sleep_ms(1200);
    char until[TXO_RFC3339_LEN];
    txo_format_rfc3339(txo_realtime_us(), until);
    publish_events(c, "order", "after", 3);

    char a1[64], a2[64];
    snprintf(a1, sizeof(a1), "--since=%s", since);
    snprintf(a2, sizeof(a2), "--until=%s", until);
    const char *args[] = {a1, a2, NULL};
    char *out = audit_clean(c, args, 3);
    assert_true(summary(out, "messages") >= 6);
    free(out);
}

static void test_nats_missing(void **state)
{
    struct ctx *c = *state;
    publish_events(c, "order", "order", 5);
    /* Lost at the broker: message 3 deleted (the stream keeps its start). */
    testnats_delete_msg(&c->nats, STREAM, 3);
    /* Marked PUBLISHED but never sent. */
    published_unsent(c, "invoice", "invoice");
    char *out = audit_findings(c, NULL);
    assert_true(summary_says(out, "result=findings"));
    assert_int_equal(summary(out, "missing"), 2);
    assert_int_equal(summary(out, "extra"), 0);
    assert_int_equal(summary(out, "broker_trimmed"), 0);
    assert_true(listed(out, "missing", "order:3"));
    assert_true(listed(out, "missing", "invoice:1"));
    assert_false(listed(out, "missing", "order:2"));
    free(out);
}

static void test_nats_extra(void **state)
{
    struct ctx *c = *state;
    publish_events(c, "order", "order", 3);
    txo_sleep_ms(SKEW_WAIT);
    /* Another application publishes into the relay's stream: with a key no row has, and
     * without a key at all. */
    testnats_publish(&c->nats, "txo.events.order.Happened", "forged:1", "{\"n\":1}");
    testnats_publish(&c->nats, "txo.events.order.Happened", NULL, "{\"n\":2}");
    char *out = audit_findings(c, NULL);
    assert_int_equal(summary(out, "extra"), 2);
    assert_int_equal(summary(out, "missing"), 0);
    assert_int_equal(summary(out, "outbox_trimmed"), 0);
    assert_true(listed(out, "extra", "forged:1"));
    assert_true(listed(out, "extra", "-")); /* a message without a key */
    assert_non_null(strstr(out, "  stream TXO_EVENTS seq 4, subject txo.events.order.Happened"));
    free(out);

    /* The same as one JSON document: the summary's counts, then the findings. */
    const char *json[] = {"--json", NULL};
    out = audit_findings(c, json);
    json_error_t jerr;
    json_t *doc = json_loads(out, 0, &jerr);
    if (doc == NULL)
        fail_msg("txo audit --outbox --json printed no single JSON document (%s): %s", jerr.text,
                 out);
    free(out);
    assert_string_equal(json_string_value(json_object_get(doc, "result")), "findings");
    assert_int_equal(json_integer_value(json_object_get(doc, "extra")), 2);
    assert_int_equal(json_integer_value(json_object_get(doc, "events")), 3);
    json_t *findings = json_object_get(doc, "findings");
    assert_int_equal(json_array_size(findings), 2);
    bool keyed = false, unkeyed = false;
    for (size_t i = 0; i < json_array_size(findings); i++) {
        json_t *f = json_array_get(findings, i);
        assert_string_equal(json_string_value(json_object_get(f, "kind")), "extra");
        const char *position = json_string_value(json_object_get(f, "position"));
        assert_non_null(position);
        if (json_is_null(json_object_get(f, "key"))) {
            unkeyed = true;
        } else {
            assert_string_equal(json_string_value(json_object_get(f, "key")), "forged:1");
            assert_string_equal(position, "stream TXO_EVENTS seq 4, subject "
                                          "txo.events.order.Happened");
            keyed = true;
        }
    }
    assert_true(keyed && unkeyed);
    json_decref(doc);
}

static void test_nats_pending(void **state)
{
    struct ctx *c = *state;
    publish_events(c, "order", "order", 2);
    /* Stuck for ten minutes after failed attempts, and one inserted to be due in an hour (on
     * purpose: not stuck). */
    testdb_exec(c->db.db,
                "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "
                "idempotency_key, attempts, last_error, created_at, next_attempt_at) VALUES "
                "('order', '9', 'Happened', '{}', 'stuck:1', 3, 'TXO_EUNAVAILABLE: broker down', "
                "NOW(6) - INTERVAL 10 MINUTE, NOW(6) + INTERVAL 1 MINUTE)");
    testdb_exec(c->db.db,
                "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "
                "idempotency_key, created_at, next_attempt_at) VALUES ('order', '8', 'Happened', "
                "'{}', 'later:1', NOW(6) - INTERVAL 10 MINUTE, NOW(6) + INTERVAL 1 HOUR)");
    char *out = audit_findings(c, NULL);
    assert_int_equal(summary(out, "pending"), 1);
    assert_true(listed(out, "pending", "stuck:1"));
    assert_false(listed(out, "pending", "later:1"));
    assert_true(listed(out, "pending", "PENDING")); /* its status */
    assert_true(listed(out, "pending", "3"));       /* its attempts */
    assert_non_null(strstr(out, "  TXO_EUNAVAILABLE: broker down"));
    free(out);

    /* Under a longer threshold, or with the check off, it is clean. */
    const char *longer[] = {"--pending-older-than=3600", NULL};
    out = audit_clean(c, longer, 2);
    free(out);
    const char *off[] = {"--pending-older-than=0", NULL};
    out = audit_clean(c, off, 2);
    free(out);
}

/*
 * Retention on either side gives no false finding: the broker dropped the start of the window
 * (the stream's first message deleted, as max-age would), the outbox deleted PUBLISHED rows
 * (as txo clean does). What cannot be judged is reported as such, with a note.
 */
/*
 * A sequence gap: a relay with --ordering none publishes event 2 of an aggregate while event 1
 * waits for a retry; consumers saw 2 follow 1 without 1. Skipping 1 (txo dlq skip) links 2
 * past it: no gap any more.
 */
static void test_nats_sequence_gap(void **state)
{
    struct ctx *c = *state;
    testdb_exec(c->db.db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                          "payload, idempotency_key) VALUES ('ledger', 'L1', 'Moved', '{}', "
                          "'ledger:1'), ('ledger', 'L1', 'Moved', '{}', 'ledger:2')");
    /* 1 waits for a retry (as after a failed publish); an unordered relay does not wait. */
    testdb_exec(c->db.db, "UPDATE outbox_events SET next_attempt_at = NOW(6) + INTERVAL 1 HOUR "
                          "WHERE idempotency_key = 'ledger:1'");
    const char *unordered[] = {"--ordering", "none", NULL};
    relay_drain(c, unordered);
    assert_int_equal(
        testdb_q(c->db.db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'"), 1);
    assert_one_finding(c, "sequence_gap", "ledger:2",
                       "ledger/L1: sequence 2 follows 1, which is not published");

    /* Given up on: 2 now follows what 1 followed. */
    testdb_exec(c->db.db, "UPDATE outbox_events SET status = 'FAILED', last_error = 'e' WHERE "
                          "idempotency_key = 'ledger:1'");
    testdb_exec(c->db.db, "INSERT INTO dead_letter_events (source_event_id, event_type, payload, "
                          "error) SELECT id, event_type, payload, 'e' FROM outbox_events WHERE "
                          "idempotency_key = 'ledger:1'");
    char id[24];
    snprintf(id, sizeof(id), "%lld",
             (long long)testdb_q(c->db.db, "SELECT MAX(id) FROM dead_letter_events"));
    const char *skip[] = {"dlq", "skip", id, NULL};
    char *skipped = NULL;
    assert_int_equal(testproc_run_txo("auditob-skip", skip, 60000, &skipped), 0);
    free(skipped);
    free(audit_clean(c, NULL, 1));
}

static void test_nats_trimmed_windows(void **state)
{
    struct ctx *c = *state;
    publish_events(c, "order", "old", 3);
    txo_sleep_ms(SKEW_WAIT);
    publish_events(c, "order", "new", 3);

    testnats_delete_msg(&c->nats, STREAM, 1);
    assert_one_finding(c, "broker_trimmed", "old:1", "note: the broker no longer holds");

    /* The outbox deleted the old rows (published first, so purged first). */
    testdb_exec(c->db.db, "DELETE FROM outbox_events WHERE idempotency_key LIKE 'old:%'");
    char *out = audit_findings(c, NULL);
    assert_int_equal(summary(out, "extra"), 0);
    assert_int_equal(summary(out, "missing"), 0);
    assert_int_equal(summary(out, "outbox_trimmed"), 2); /* old:2 and old:3 */
    assert_true(listed(out, "outbox_trimmed", "old:2"));
    assert_non_null(strstr(out, "note: the oldest PUBLISHED event"));
    free(out);

    /* A window after both horizons is clean. */
    const char *ids[] = {"--from-id=4", "--to-id=6", NULL};
    out = audit_clean(c, ids, 3);
    free(out);
}

/* A clean audit over n events and as many messages. */
static void assert_clean_messages(struct ctx *c, int64_t n)
{
    char *out = audit_clean(c, NULL, n);
    assert_int_equal(summary(out, "messages"), n);
    free(out);
}

/*
 * The audit after a row "ghost:1" marked PUBLISHED that never went out (published_unsent) and a
 * message another client published with the key forged: one missing and one extra, both listed.
 * Returns its stdout (free it).
 */
static char *audit_ghost_and_forged(struct ctx *c, const char *forged)
{
    char *out = audit_findings(c, NULL);
    assert_int_equal(summary(out, "missing"), 1);
    assert_int_equal(summary(out, "extra"), 1);
    assert_true(listed(out, "missing", "ghost:1"));
    assert_true(listed(out, "extra", forged));
    return out;
}

/* ---- Redis ---- */

static void test_redis_clean_missing_extra(void **state)
{
    struct ctx *c = *state;
    insert_events(c, "order", "order", 4);
    publish_events(c, "customer", "customer", 2);
    const char *binary[] = {"--envelope", "cloudevents-binary", NULL};
    insert_events(c, "invoice", "invoice", 2);
    relay_drain(c, binary);
    assert_int_equal(testredis_xlen(&c->redis, "txo.events.order"), 4);

    assert_clean_messages(c, 8);

    /* A row marked PUBLISHED that never went out, and an entry another client added. */
    published_unsent(c, "order", "ghost");
    txo_sleep_ms(SKEW_WAIT);
    const char *xadd[] = {"XADD",     "txo.events.customer", "*",        "idempotency_key",
                          "forged:7", "event_type",          "Happened", NULL};
    json_decref(testredis_cli(&c->redis, xadd));
    /* A worker's dead-letter stream beside it is not the relay's: not read. */
    const char *dead[] = {"XADD", "txo.events.customer.dead", "*", "idempotency_key", "forged:8",
                          NULL};
    json_decref(testredis_cli(&c->redis, dead));
    char *out = audit_ghost_and_forged(c, "forged:7");
    assert_false(listed(out, "extra", "forged:8"));
    assert_non_null(strstr(out, "  stream txo.events.customer id "));
    free(out);
}

/* Redis cannot tell a trimmed head from an entry deleted in the middle: once a stream lost an
 * entry, what is not found before its first entry is broker_trimmed, not missing. */
static void test_redis_trimmed(void **state)
{
    struct ctx *c = *state;
    publish_events(c, "order", "order", 3);
    json_t *entries = testredis_xrange(&c->redis, "txo.events.order");
    const char *first = json_string_value(json_array_get(json_array_get(entries, 0), 0));
    assert_non_null(first);
    const char *xdel[] = {"XDEL", "txo.events.order", first, NULL};
    json_decref(testredis_cli(&c->redis, xdel));
    json_decref(entries);
    assert_one_finding(c, "broker_trimmed", "order:1", NULL);
}

/* ---- Kafka ---- */

static void test_kafka_clean_missing_extra(void **state)
{
    struct ctx *c = *state;
    insert_events(c, "order", "order", 5);
    publish_events(c, "customer", "customer", 2);
    assert_clean_messages(c, 7);

    published_unsent(c, "order", "ghost");
    txo_sleep_ms(SKEW_WAIT);
    const char *headers[] = {"txo-idempotency-key=forged:3", "txo-event-type=Happened", NULL};
    testkafka_produce(&c->kafka, "txo.events.customer", "3", "{}", headers);
    char *out = audit_ghost_and_forged(c, "forged:3");
    assert_non_null(strstr(out, "  topic txo.events.customer partition 0 offset 2"));
    free(out);
}

/* ---- flags ---- */

/* Bad flags exit 2 before anything is connected to: the database and the broker named here
 * do not exist, and the message says what is wrong. */
static void test_bad_flags_exit_2(void **state)
{
    (void)state;
    static const struct {
        const char *args[6];
        const char *says;
    } cases[] = {
        {{NULL}, "--publisher"},
        {{"--publisher=rabbitmq", NULL}, "reading a queue consumes it"},
        {{"--publisher=webhook", NULL}, "keeps no history"},
        {{"--publisher=grpc", NULL}, "keeps no history"},
        {{"--publisher=nats", "--since=yesterday", NULL}, "--since"},
        {{"--publisher=nats", "--since=2026-13-01T00:00:00Z", NULL}, "--since"},
        {{"--publisher=nats", "--since=2026-02-30", NULL}, "--since"},
        {{"--publisher=nats", "--since=12", NULL}, "--since"},
        {{"--publisher=nats", "--since=2026-12", NULL}, "--since"},
        {{"--publisher=nats", "--since=2026-12-01T10:00:00+02:00", NULL}, "--since"},
        {{"--publisher=nats", "--until=soon", NULL}, "--until"},
        {{"--publisher=nats", "--since=1h", "--until=2h", NULL}, "after it starts"},
        {{"--publisher=nats", "--since=1h", "--from-id=1", "--to-id=2", NULL}, "give one"},
        {{"--publisher=nats", "--from-id=5", "--to-id=2", NULL}, "--from-id"},
        {{"--publisher=nats", "--from-id=5", NULL}, "--to-id"},
        {{"--publisher=nats", "--clock-skew=-1", NULL}, "--clock-skew"},
        {{"--publisher=nats", "--no-such-flag", NULL}, "unknown option"},
        {{"--publisher=kafka", "--kafka-property=acks=0", NULL}, "acks"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *argv[16] = {testproc_txo_bin(),
                                "audit",
                                "--outbox",
                                "--mysql-host=127.0.0.1",
                                "--mysql-port=1",
                                "--mysql-socket=",
                                "--nats-url=nats://127.0.0.1:1",
                                "--kafka-brokers=127.0.0.1:1"};
        size_t n = 8;
        for (const char *const *a = cases[i].args; *a != NULL; a++)
            argv[n++] = *a;
        argv[n] = NULL;
        char *out = NULL;
        int rc = testproc_run("auditob-flags", argv, 30000, &out);
        if (rc != 2 || strstr(out, cases[i].says) == NULL)
            fail_msg("case %zu: exit %d, want 2 and \"%s\" in:\n%s", i, rc, cases[i].says, out);
        assert_null(strstr(out, "audit=outbox")); /* it did not run */
        free(out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nats_clean_both_envelopes_and_windows),
        cmocka_unit_test(test_nats_window_edges),
        cmocka_unit_test(test_nats_missing),
        cmocka_unit_test(test_nats_extra),
        cmocka_unit_test(test_nats_pending),
        cmocka_unit_test(test_nats_trimmed_windows),
        cmocka_unit_test(test_nats_sequence_gap),
        cmocka_unit_test_setup_teardown(test_redis_clean_missing_extra, setup_redis, teardown),
        cmocka_unit_test_setup_teardown(test_redis_trimmed, setup_redis, teardown),
        cmocka_unit_test_setup_teardown(test_kafka_clean_missing_extra, setup_kafka, teardown),
        cmocka_unit_test_setup_teardown(test_bad_flags_exit_2, setup_db_only, teardown),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup_nats, teardown, NULL, NULL);
}
