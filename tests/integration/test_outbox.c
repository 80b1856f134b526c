/*
 * The transactional outbox against a real MariaDB: an appended event commits or rolls back
 * with the caller's transaction, duplicate idempotency keys, field and payload validation,
 * txo_outbox_append_many (the same rows as single appends, all or nothing), and the counts
 * behind the outbox metrics.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "testdb.h"

/* One transaction: a business row, then the event; rolls back when fail_with != 0. */
struct append_tx {
    struct txo_outbox_event ev;
    unsigned flags;
    int fail_with;
    bool inserted;
    int64_t id;
};

static int append_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct append_tx *a = arg;
    struct txo_param p = txo_p_str(a->ev.idempotency_key);
    int rc = txo_tx_exec(tx, "INSERT INTO biz (note) VALUES (?)", &p, 1, NULL, err);
    if (rc < 0)
        return rc;
    rc = txo_outbox_append(tx, &a->ev, a->flags, &a->inserted, &a->id, err);
    if (rc < 0)
        return rc;
    if (a->fail_with != 0)
        return txo_error_set(err, a->fail_with, "business rule says no");
    return 0;
}

static struct append_tx event(const char *key, const char *payload)
{
    struct append_tx a = {
        .ev = {.aggregate_type = "order",
               .aggregate_id = "7",
               .event_type = "OrderCreated",
               .payload_json = payload,
               .idempotency_key = key},
    };
    return a;
}

static int append(struct testdb *t, struct append_tx *a, struct txo_error *err)
{
    txo_error_init(err);
    return txo_db_transact(t->db, TXO_ISO_READ_COMMITTED, append_fn, a, err);
}

static void make_biz_table(struct testdb *t)
{
    testdb_exec(t->db, "CREATE TABLE biz (id BIGINT AUTO_INCREMENT PRIMARY KEY, note TEXT)");
}

static void test_commit_writes_pending_row(void **state)
{
    struct testdb *t = *state;
    make_biz_table(t);
    struct txo_error err;
    struct append_tx a = event("order:7:created", "{\"order_id\": 7, \"name\": \"Ärger ☃\"}");
    assert_int_equal(append(t, &a, &err), 0);
    assert_true(a.inserted);
    assert_true(a.id > 0);

    struct txo_param id = txo_p_i64(a.id);
    char *s = testdb_str(t->db,
                         "SELECT CONCAT_WS('|', status, aggregate_type, aggregate_id, event_type, "
                         "idempotency_key, attempts, JSON_VALUE(payload, '$.name'), "
                         "IFNULL(locked_by, 'nolock'), IFNULL(published_at, 'unpublished'), "
                         "next_attempt_at <= NOW(6)) FROM outbox_events WHERE id = ?",
                         &id, 1);
    assert_non_null(s);
    assert_string_equal(s, "PENDING|order|7|OrderCreated|order:7:created|0|Ärger ☃|nolock|"
                           "unpublished|1");
    txo_free(s);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM biz"), 1);
}

static void test_rollback_leaves_no_row(void **state)
{
    struct testdb *t = *state;
    make_biz_table(t);
    struct txo_error err;
    struct append_tx a = event("order:8:created", "{\"order_id\": 8}");
    a.fail_with = TXO_EBUSINESS;
    assert_int_equal(append(t, &a, &err), TXO_EBUSINESS);
    assert_true(a.inserted); /* it was written, then rolled back with the business row */
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events"), 0);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM biz"), 0);
}

static void test_duplicate_key(void **state)
{
    struct testdb *t = *state;
    make_biz_table(t);
    struct txo_error err;
    struct append_tx a = event("order:9:created", "{\"v\": 1}");
    assert_int_equal(append(t, &a, &err), 0);
    int64_t first_id = a.id;

    struct append_tx b = event("order:9:created", "{\"v\": 2}");
    assert_int_equal(append(t, &b, &err), TXO_EDUPLICATE);
    assert_non_null(strstr(err.msg, "order:9:created"));
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM biz"), 1); /* b rolled back */

    struct append_tx c = event("order:9:created", "{\"v\": 3}");
    c.flags = TXO_OUTBOX_IGNORE_DUPLICATE;
    c.inserted = true;
    c.id = -1;
    assert_int_equal(append(t, &c, &err), 0);
    assert_false(c.inserted);
    assert_int_equal(c.id, 0);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM biz"), 2); /* c committed */
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events"), 1);
    /* The first event is untouched. */
    assert_int_equal(testdb_q(t->db, "SELECT JSON_VALUE(payload, '$.v') FROM outbox_events"), 1);
    struct txo_param id = txo_p_i64(first_id);
    assert_int_equal(testdb_i64(t->db, "SELECT COUNT(*) FROM outbox_events WHERE id = ?", &id, 1),
                     1);

    /* A new key with the flag is inserted normally. */
    struct append_tx d = event("order:10:created", "{}");
    d.flags = TXO_OUTBOX_IGNORE_DUPLICATE;
    assert_int_equal(append(t, &d, &err), 0);
    assert_true(d.inserted);
    assert_true(d.id > first_id);
}

static void test_invalid_payload_and_fields(void **state)
{
    struct testdb *t = *state;
    make_biz_table(t);
    struct txo_error err;

    struct append_tx a = event("order:11:created", "{\"a\": ");
    assert_int_equal(append(t, &a, &err), TXO_ECONSTRAINT);
    assert_non_null(strstr(err.msg, "order:11:created"));

    char long64[66], long128[130], long255[257];
    memset(long64, 'a', sizeof(long64) - 1);
    long64[65] = '\0';
    memset(long128, 'e', sizeof(long128) - 1);
    long128[129] = '\0';
    memset(long255, 'k', sizeof(long255) - 1);
    long255[256] = '\0';

    struct append_tx bad[5];
    bad[0] = event("", "{}");
    bad[1] = event("order:12:created", "{}");
    bad[1].ev.aggregate_type = long64; /* 65 bytes */
    bad[2] = event("order:13:created", "{}");
    bad[2].ev.event_type = long128; /* 129 bytes */
    bad[3] = event(long255, "{}");  /* 256 bytes */
    bad[4] = event("order:14:created", "");
    for (size_t i = 0; i < 5; i++) {
        if (append(t, &bad[i], &err) != TXO_EINVAL)
            fail_msg("bad event #%zu was not rejected with TXO_EINVAL: %s", i, err.msg);
    }
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events"), 0);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM biz"), 0);

    /* Exactly at the limits is fine. */
    long64[64] = '\0';
    long128[128] = '\0';
    long255[255] = '\0';
    struct append_tx ok = event(long255, "[1, 2, 3]");
    ok.ev.aggregate_type = long64;
    ok.ev.event_type = long128;
    assert_int_equal(append(t, &ok, &err), 0);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events"), 1);
}

/* ---- txo_outbox_append_many ---- */

struct many_tx {
    const struct txo_outbox_event *evs;
    size_t n;
    int fail_with;
    int rc; /* of txo_outbox_append_many */
};

static int many_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct many_tx *m = arg;
    struct txo_param p = txo_p_str("many");
    int rc = txo_tx_exec(tx, "INSERT INTO biz (note) VALUES (?)", &p, 1, NULL, err);
    if (rc < 0)
        return rc;
    m->rc = txo_outbox_append_many(tx, m->evs, m->n, err);
    if (m->rc != 0)
        return m->rc;
    if (m->fail_with != 0)
        return txo_error_set(err, m->fail_with, "business rule says no");
    return 0;
}

static int append_many(struct testdb *t, struct many_tx *m, struct txo_error *err)
{
    txo_error_init(err);
    m->rc = 1; /* "not called" */
    return txo_db_transact(t->db, TXO_ISO_READ_COMMITTED, many_fn, m, err);
}

/* Every column but id, idempotency_key and the timestamps (those compared with NOW(6), and
 * the due time in whole seconds after creation: 0, due at once) of the events whose key starts
 * with prefix, in id order. */
static char *rows_like(struct testdb *t, const char *prefix)
{
    struct txo_param p = txo_p_str(prefix);
    return testdb_str(t->db,
                      "SELECT GROUP_CONCAT(CONCAT_WS('|', status, aggregate_type, aggregate_id,"
                      " event_type, payload, attempts, lease_expiries, IFNULL(locked_by, 'n'),"
                      " IFNULL(locked_until, 'n'), IFNULL(last_error, 'n'),"
                      " IFNULL(published_at, 'n'),"
                      " next_attempt_at <= NOW(6),"
                      " created_at <= NOW(6), TIMESTAMPDIFF(SECOND, created_at, next_attempt_at),"
                      " SUBSTRING(idempotency_key, LENGTH(?) + 1)) ORDER BY id SEPARATOR '\\n')"
                      " FROM outbox_events WHERE LEFT(idempotency_key, LENGTH(?)) = ?",
                      (struct txo_param[]){p, p, p}, 3);
}

static void test_append_many_equals_single_appends(void **state)
{
    struct testdb *t = *state;
    make_biz_table(t);
    struct txo_error err;
    const char *payloads[] = {"{\"order_id\": 1, \"name\": \"Ärger ☃\"}", "[1, 2, 3]",
                              "{\"big\": 9007199254740993}"};
    const char *agg[] = {"1", "a-uuid", "3"};
    char keys[2][3][32];
    struct txo_outbox_event evs[3];
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < 3; i++) {
            snprintf(keys[pass][i], sizeof(keys[pass][i]), "%s:%zu", pass ? "many" : "single", i);
            evs[i] = (struct txo_outbox_event){.aggregate_type = i == 1 ? "customer" : "order",
                                               .aggregate_id = agg[i],
                                               .event_type = "OrderCreated",
                                               .payload_json = payloads[i],
                                               .payload_len = i == 0 ? strlen(payloads[i]) : 0,
                                               .idempotency_key = keys[pass][i]};
            if (pass == 0) {
                struct append_tx a = {.ev = evs[i]};
                assert_int_equal(append(t, &a, &err), 0);
            }
        }
    struct many_tx m = {.evs = evs, .n = 3};
    assert_int_equal(append_many(t, &m, &err), 0);
    assert_int_equal(m.rc, 0);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events"), 6);

    char *single = rows_like(t, "single:");
    char *many = rows_like(t, "many:");
    assert_non_null(single);
    assert_non_null(many);
    assert_string_equal(many, single);
    assert_non_null(strstr(many, "PENDING|order|1|OrderCreated|"));
    txo_free(single);
    txo_free(many);
    /* In evs order, ids ascending. */
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events a JOIN outbox_events b"
                                     " ON a.idempotency_key = 'many:0' AND"
                                     " b.idempotency_key = 'many:2' AND a.id < b.id"),
                     1);

    /* Rolled back with the caller's transaction. */
    for (size_t i = 0; i < 3; i++)
        evs[i].idempotency_key = keys[0][i] + 1; /* "ingle:0", ...: new keys */
    m = (struct many_tx){.evs = evs, .n = 3, .fail_with = TXO_EBUSINESS};
    assert_int_equal(append_many(t, &m, &err), TXO_EBUSINESS);
    assert_int_equal(m.rc, 0);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events"), 6);

    /* n = 0 writes nothing. */
    m = (struct many_tx){.evs = evs, .n = 0};
    assert_int_equal(append_many(t, &m, &err), 0);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events"), 6);
}

static void test_append_many_duplicate_and_invalid(void **state)
{
    struct testdb *t = *state;
    make_biz_table(t);
    struct txo_error err;
    struct append_tx a = event("order:20:created", "{\"v\": 1}");
    assert_int_equal(append(t, &a, &err), 0);

    /* One key of the batch exists: TXO_EDUPLICATE, none of the batch is written. */
    struct txo_outbox_event evs[3];
    for (size_t i = 0; i < 3; i++)
        evs[i] = event("", "{\"v\": 2}").ev;
    evs[0].idempotency_key = "order:21:created";
    evs[1].idempotency_key = "order:20:created";
    evs[2].idempotency_key = "order:22:created";
    struct many_tx m = {.evs = evs, .n = 3};
    assert_int_equal(append_many(t, &m, &err), TXO_EDUPLICATE);
    assert_int_equal(m.rc, TXO_EDUPLICATE);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events"), 1);
    assert_int_equal(testdb_q(t->db, "SELECT JSON_VALUE(payload, '$.v') FROM outbox_events"), 1);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM biz"), 1); /* rolled back */

    /* The same key twice in one batch. */
    evs[1].idempotency_key = "order:21:created";
    m = (struct many_tx){.evs = evs, .n = 3};
    assert_int_equal(append_many(t, &m, &err), TXO_EDUPLICATE);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events"), 1);

    /* Each event is checked as txo_outbox_append checks it, before any write. */
    evs[1].idempotency_key = "order:23:created";
    struct txo_outbox_event ok1 = evs[1];
    evs[1].payload_json = "{\"a\": ";
    m = (struct many_tx){.evs = evs, .n = 3};
    assert_int_equal(append_many(t, &m, &err), TXO_ECONSTRAINT);
    assert_non_null(strstr(err.msg, "order:23:created"));
    evs[1] = ok1;
    evs[2].aggregate_id = "";
    assert_int_equal(append_many(t, &m, &err), TXO_EINVAL);
    evs[2].aggregate_id = "7";
    evs[2].event_type = NULL;
    assert_int_equal(append_many(t, &m, &err), TXO_EINVAL);
    evs[2].event_type = "OrderCreated";
    evs[2].payload_json = "";
    assert_int_equal(append_many(t, &m, &err), TXO_EINVAL);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events"), 1);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM biz"), 1);

    evs[2].payload_json = "{}";
    assert_int_equal(append_many(t, &m, &err), 0);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM outbox_events"), 4);
}

/* One transaction: a batch that fails on a duplicate key, then the events after, committed. */
struct past_dup_tx {
    struct txo_outbox_event dup[2];
    const struct txo_outbox_event *after; /* 2 */
    int dup_rc;
};

static int past_dup_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct past_dup_tx *p = arg;
    p->dup_rc = txo_outbox_append_many(tx, p->dup, 2, err);
    txo_error_init(err);
    return txo_outbox_append_many(tx, p->after, 2, err);
}

/* An aggregate's events as "key=sequence/prev_sequence ...", by sequence. */
static char *numbers_of(struct testdb *t, const char *aggregate_id)
{
    struct txo_param p = txo_p_str(aggregate_id);
    return testdb_str(t->db,
                      "SELECT GROUP_CONCAT(CONCAT(idempotency_key, '=', sequence, '/', "
                      "prev_sequence) ORDER BY sequence SEPARATOR ' ') FROM outbox_events "
                      "WHERE aggregate_type = 'order' AND aggregate_id = ?",
                      &p, 1);
}

static void assert_numbers(struct testdb *t, const char *aggregate_id, const char *want)
{
    char *got = numbers_of(t, aggregate_id);
    assert_non_null(got);
    assert_string_equal(got, want);
    txo_free(got);
}

/*
 * An append numbers its events per aggregate in the order it lists them, 1, 2, 3, ... each
 * following the one before, and carries on the counter the trigger keeps for an
 * application's own INSERTs (and the trigger carries on its numbers). Aggregates are compared
 * as the database compares them ('ORDER' is 'order'). Due times grow with the sequence. An
 * ignored duplicate gives its number back: the next event follows the last one written.
 */
static void test_append_numbers_per_aggregate(void **state)
{
    struct testdb *t = *state;
    make_biz_table(t);
    struct txo_error err;
    const char *plain = "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                        "payload, idempotency_key) VALUES ('order', 'A', 'E', '{}', ?)";
    struct txo_param key = txo_p_str("plain:1");
    assert_int_equal(txo_db_exec(t->db, plain, &key, 1, NULL, &err), 0);

    const char *ids[] = {"A", "B", "A", "A", "B", "A"};
    char keys[6][16];
    struct txo_outbox_event evs[6];
    for (size_t i = 0; i < 6; i++) {
        snprintf(keys[i], sizeof(keys[i]), "many:%zu", i);
        evs[i] = event(keys[i], "{}").ev;
        evs[i].aggregate_id = ids[i];
    }
    evs[3].aggregate_type = "ORDER";
    struct many_tx m = {.evs = evs, .n = 6};
    assert_int_equal(append_many(t, &m, &err), 0);
    key = txo_p_str("plain:2");
    assert_int_equal(txo_db_exec(t->db, plain, &key, 1, NULL, &err), 0);

    assert_numbers(t, "B", "many:1=1/0 many:4=2/1");
    /* many:3 ('ORDER') takes its place between many:2 and many:5. */
    assert_numbers(t, "A", "plain:1=1/0 many:0=2/1 many:2=3/2 many:3=4/3 many:5=5/4 plain:2=6/5");
    assert_int_equal(TESTDB_COUNT(t->db, "outbox_events a JOIN outbox_events b ON "
                                         "a.aggregate_id = b.aggregate_id AND a.sequence < "
                                         "b.sequence AND a.next_attempt_at >= b.next_attempt_at"),
                     0);

    /* Duplicates in a transaction that goes on and commits: no gap after them, for one event
     * (numbered by the trigger) and for a batch (numbered by the append, then given back). */
    struct append_tx dup = event("many:0", "{}");
    dup.ev.aggregate_id = "A";
    dup.flags = TXO_OUTBOX_IGNORE_DUPLICATE;
    assert_int_equal(append(t, &dup, &err), 0);
    assert_false(dup.inserted);
    struct txo_outbox_event after[2] = {event("after:1", "{}").ev, event("after:2", "{}").ev};
    after[0].aggregate_id = after[1].aggregate_id = "A";
    struct past_dup_tx p = {.dup = {evs[0], evs[2]}, .after = after};
    txo_error_init(&err);
    assert_int_equal(txo_db_transact(t->db, TXO_ISO_READ_COMMITTED, past_dup_fn, &p, &err), 0);
    assert_int_equal(p.dup_rc, TXO_EDUPLICATE);
    assert_numbers(t, "A",
                   "plain:1=1/0 many:0=2/1 many:2=3/2 many:3=4/3 many:5=5/4 "
                   "plain:2=6/5 after:1=7/6 after:2=8/7");
    assert_int_equal(testdb_q(t->db, "SELECT last_sequence * 10 + last_kept FROM "
                                     "outbox_aggregates WHERE aggregate_id = 'A'"),
                     88);
}

static void test_stats(void **state)
{
    struct testdb *t = *state;
    make_biz_table(t);
    struct txo_error err;
    struct txo_outbox_stats st;

    assert_int_equal(txo_outbox_get_stats(t->db, &st, &err), 0);
    assert_int_equal(st.pending + st.processing + st.published + st.failed + st.dead_letters, 0);
    assert_true(st.oldest_pending_age_s == 0.0);

    for (int i = 0; i < 7; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k:%d", i);
        struct append_tx a = event(key, "{}");
        assert_int_equal(append(t, &a, &err), 0);
    }
    testdb_exec(t->db,
                "UPDATE outbox_events SET status = 'PROCESSING' WHERE idempotency_key = 'k:0'");
    testdb_exec(t->db, "UPDATE outbox_events SET status = 'PUBLISHED' "
                       "WHERE idempotency_key IN ('k:1', 'k:2')");
    testdb_exec(t->db, "UPDATE outbox_events SET status = 'FAILED' WHERE idempotency_key = 'k:3'");
    testdb_exec(t->db,
                "INSERT INTO dead_letter_events (source_event_id, event_type, payload, error)"
                " SELECT id, event_type, payload, 'boom' FROM outbox_events"
                " WHERE idempotency_key = 'k:3'");
    /*
     * Three PENDING: one created 40 s ago and backing off for another hour (the oldest not yet
     * published: it counts although it is not due), one overdue, one due now; the PUBLISHED
     * row created a day ago does not count, the FAILED one has an age of its own.
     */
    testdb_exec(t->db, "UPDATE outbox_events SET next_attempt_at = NOW(6) - INTERVAL 5 SECOND "
                       "WHERE idempotency_key = 'k:4'");
    testdb_exec(t->db, "UPDATE outbox_events SET created_at = NOW(6) - INTERVAL 1 DAY, "
                       "status = 'PUBLISHED' WHERE idempotency_key = 'k:2'");
    testdb_exec(t->db, "UPDATE outbox_events SET next_attempt_at = NOW(6) + INTERVAL 1 HOUR, "
                       "created_at = NOW(6) - INTERVAL 40 SECOND, attempts = 3 "
                       "WHERE idempotency_key = 'k:6'");
    testdb_exec(t->db, "UPDATE outbox_events SET created_at = NOW(6) - INTERVAL 2 HOUR "
                       "WHERE idempotency_key = 'k:3'");

    assert_int_equal(txo_outbox_get_stats(t->db, &st, &err), 0);
    assert_int_equal(st.pending, 3);
    assert_int_equal(st.processing, 1);
    assert_int_equal(st.published, 2);
    assert_int_equal(st.failed, 1);
    assert_int_equal(st.dead_letters, 1);
    if (!(st.oldest_pending_age_s >= 40.0 && st.oldest_pending_age_s < 100.0))
        fail_msg("oldest_pending_age_s = %f, want 40..100", st.oldest_pending_age_s);
    if (!(st.oldest_failed_age_s >= 7200.0 && st.oldest_failed_age_s < 7300.0))
        fail_msg("oldest_failed_age_s = %f, want 7200..7300", st.oldest_failed_age_s);

    /* A PROCESSING row created earlier still is the lag (claimed, not yet published). */
    testdb_exec(t->db, "UPDATE outbox_events SET created_at = NOW(6) - INTERVAL 10 MINUTE "
                       "WHERE idempotency_key = 'k:0'");
    assert_int_equal(txo_outbox_get_stats(t->db, &st, &err), 0);
    if (!(st.oldest_pending_age_s >= 600.0 && st.oldest_pending_age_s < 660.0))
        fail_msg("oldest_pending_age_s = %f, want 600..660", st.oldest_pending_age_s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_writes_pending_row),
        cmocka_unit_test(test_rollback_leaves_no_row),
        cmocka_unit_test(test_duplicate_key),
        cmocka_unit_test(test_invalid_payload_and_fields),
        cmocka_unit_test(test_append_many_equals_single_appends),
        cmocka_unit_test(test_append_many_duplicate_and_invalid),
        cmocka_unit_test(test_append_numbers_per_aggregate),
        cmocka_unit_test(test_stats),
    };
    return testdb_run_each(tests, TXO_ARRAY_LEN(tests), "outbox", 0, NULL);
}
