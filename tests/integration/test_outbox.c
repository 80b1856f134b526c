/*
 * The transactional outbox against a real MariaDB: an appended event commits or rolls back
 * with the caller's transaction, duplicate idempotency keys, field and payload validation,
 * and the counts behind the outbox metrics.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "testdb.h"

static int setup(void **state)
{
    struct testdb *t = txo_calloc(1, sizeof(*t));
    testdb_setup(t, "outbox");
    *state = t;
    return 0;
}

static int teardown(void **state)
{
    testdb_teardown(*state);
    txo_free(*state);
    return 0;
}

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

static int64_t count_rows(struct testdb *t, const char *sql)
{
    return testdb_i64(t->db, sql, NULL, 0);
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
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM biz"), 1);
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
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM outbox_events"), 0);
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM biz"), 0);
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
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM biz"), 1); /* b rolled back */

    struct append_tx c = event("order:9:created", "{\"v\": 3}");
    c.flags = TXO_OUTBOX_IGNORE_DUPLICATE;
    c.inserted = true;
    c.id = -1;
    assert_int_equal(append(t, &c, &err), 0);
    assert_false(c.inserted);
    assert_int_equal(c.id, 0);
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM biz"), 2); /* c committed */
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM outbox_events"), 1);
    /* The first event is untouched. */
    assert_int_equal(count_rows(t, "SELECT JSON_VALUE(payload, '$.v') FROM outbox_events"), 1);
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
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM outbox_events"), 0);
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM biz"), 0);

    /* Exactly at the limits is fine. */
    long64[64] = '\0';
    long128[128] = '\0';
    long255[255] = '\0';
    struct append_tx ok = event(long255, "[1, 2, 3]");
    ok.ev.aggregate_type = long64;
    ok.ev.event_type = long128;
    assert_int_equal(append(t, &ok, &err), 0);
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM outbox_events"), 1);
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
        cmocka_unit_test_setup_teardown(test_commit_writes_pending_row, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rollback_leaves_no_row, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_payload_and_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
