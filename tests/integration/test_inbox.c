/*
 * The transactional inbox against a real MariaDB: a message recorded with its effect in one
 * transaction, a duplicate skipped, a rolled-back record forgotten, ids compared byte for byte,
 * argument checks that write nothing, two concurrent transactions with the same id (the second
 * waits for the first, then sees the duplicate; or records it itself when the first rolls
 * back), the inbox retention purge (old rows only, in batches, along its index), and the
 * order check: in order, gap, older, skip, several events of one aggregate in one call.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testrun.h"
#include "inbox/inbox_sql.h"
#include "retention/retention_sql.h"
#include "testdb.h"
#include "txo/inbox.h"
#include "txo/retention.h"

static int setup(void **state)
{
    struct testdb *t = testdb_new("inbox", 0);
    /* The consumer's "effect": one row per applied message. */
    testdb_exec(t->db, "CREATE TABLE effects (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
                       "event_id VARCHAR(255) NOT NULL, applied_by VARCHAR(16) NOT NULL)");
    *state = t;
    return 0;
}

/* What a consumer does with one message: record it; apply the effect unless a duplicate. */
struct consume {
    const char *event_id;
    const char *who;
    bool duplicate;
    bool fail_after_effect; /* return an error after the effect: the transaction rolls back */
    /* Concurrency test hooks. */
    atomic_int *recorded;   /* set to 1 once the record and effect are done (not committed) */
    atomic_int *peer_ready; /* wait for this to be 1 before committing, then a bit longer */
};

static int consume_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct consume *c = arg;
    int rc =
        txo_inbox_record(tx, c->event_id, "OrderCreated", "{\"order_id\":7}", &c->duplicate, err);
    if (rc < 0)
        return rc;
    if (!c->duplicate) {
        struct txo_param p[] = {txo_p_str(c->event_id), txo_p_str(c->who)};
        rc = txo_tx_exec(tx, "INSERT INTO effects (event_id, applied_by) VALUES (?, ?)", p, 2, NULL,
                         err);
        if (rc < 0)
            return rc;
    }
    if (c->recorded != NULL)
        atomic_store(c->recorded, 1);
    if (c->peer_ready != NULL) {
        while (atomic_load(c->peer_ready) == 0)
            txo_sleep_ms(1);
        txo_sleep_ms(300); /* the peer is now blocked on our row lock */
    }
    if (c->fail_after_effect)
        return txo_error_set(err, TXO_EBUSINESS, "handler failed after its effect");
    return 0;
}

static int consume(struct txo_db *db, struct consume *c, struct txo_error *err)
{
    return txo_db_transact(db, TXO_ISO_READ_COMMITTED, consume_fn, c, err);
}

static void test_record_then_duplicate(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    struct consume c = {.event_id = "order:7:created", .who = "first"};
    assert_int_equal(consume(t->db, &c, &err), 0);
    assert_false(c.duplicate);
    assert_int_equal(testdb_q(t->db,
                              "SELECT COUNT(*) FROM inbox_events WHERE event_id = "
                              "'order:7:created' AND event_type = 'OrderCreated' "
                              "AND payload = '{\"order_id\":7}' AND processed_at IS NOT NULL "
                              "AND processed_at <= NOW(6)"),
                     1);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM effects"), 1);
    char *processed_at = testdb_str(t->db, "SELECT processed_at FROM inbox_events", NULL, 0);
    assert_non_null(processed_at);

    /* Redelivered: a duplicate, nothing changes, the effect is skipped. */
    struct consume again = {.event_id = "order:7:created", .who = "second"};
    assert_int_equal(consume(t->db, &again, &err), 0);
    assert_true(again.duplicate);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events"), 1);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM effects"), 1);
    char *still = testdb_str(t->db, "SELECT processed_at FROM inbox_events", NULL, 0);
    assert_string_equal(still, processed_at);
    txo_free(still);
    txo_free(processed_at);

    /* Another message is not a duplicate. */
    struct consume other = {.event_id = "order:8:created", .who = "first"};
    assert_int_equal(consume(t->db, &other, &err), 0);
    assert_false(other.duplicate);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM effects"), 2);
}

static void test_rollback_forgets_the_message(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    struct consume c = {.event_id = "m-1", .who = "failing", .fail_after_effect = true};
    assert_int_equal(consume(t->db, &c, &err), TXO_EBUSINESS);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events"), 0);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM effects"), 0);

    /* The redelivery is processed for real. */
    struct consume retry = {.event_id = "m-1", .who = "retry"};
    assert_int_equal(consume(t->db, &retry, &err), 0);
    assert_false(retry.duplicate);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM effects WHERE applied_by = 'retry'"), 1);
}

static void test_ids_are_compared_byte_for_byte(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    /* Under a case- and pad-insensitive collation these would collide. */
    const char *ids[] = {"Evt-1", "evt-1", "evt-1 ", "\xc3\xa9vt-1", "\xc3\x89vt-1"};
    for (size_t i = 0; i < TXO_ARRAY_LEN(ids); i++) {
        struct consume c = {.event_id = ids[i], .who = "x"};
        assert_int_equal(consume(t->db, &c, &err), 0);
        if (c.duplicate)
            fail_msg("id \"%s\" was taken for a duplicate", ids[i]);
    }
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events"), 5);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM effects"), 5);
    for (size_t i = 0; i < TXO_ARRAY_LEN(ids); i++) {
        struct consume c = {.event_id = ids[i], .who = "x"};
        assert_int_equal(consume(t->db, &c, &err), 0);
        assert_true(c.duplicate);
    }
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM effects"), 5);
}

struct record_args {
    const char *event_id;
    const char *type;
    const char *payload;
    bool duplicate;
};

static int record_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct record_args *a = arg;
    return txo_inbox_record(tx, a->event_id, a->type, a->payload, &a->duplicate, err);
}

static int record(struct testdb *t, const char *id, const char *type, const char *payload,
                  struct txo_error *err)
{
    struct record_args a = {id, type, payload, false};
    txo_error_init(err);
    return txo_db_transact(t->db, TXO_ISO_READ_COMMITTED, record_fn, &a, err);
}

static void test_bad_arguments_write_nothing(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    char id255[256], id256[257], type129[130];
    memset(id255, 'a', 255);
    id255[255] = '\0';
    memset(id256, 'b', 256);
    id256[256] = '\0';
    memset(type129, 't', 129);
    type129[129] = '\0';

    assert_int_equal(record(t, "", "T", "{}", &err), TXO_EINVAL);
    assert_int_equal(record(t, NULL, "T", "{}", &err), TXO_EINVAL);
    assert_int_equal(record(t, id256, "T", "{}", &err), TXO_EINVAL);
    assert_non_null(strstr(err.msg, "256 bytes"));
    assert_int_equal(record(t, "ok", "", "{}", &err), TXO_EINVAL);
    assert_int_equal(record(t, "ok", type129, "{}", &err), TXO_EINVAL);
    assert_int_equal(record(t, "ok", "T", NULL, &err), TXO_EINVAL);
    assert_int_equal(record(t, "ok", "T", "", &err), TXO_EINVAL);
    assert_int_equal(record(t, "ok", "T", "{not json", &err), TXO_ECONSTRAINT);
    assert_non_null(strstr(err.msg, "not JSON"));
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events"), 0);

    /* The limits themselves are fine; any JSON value is a payload. */
    assert_int_equal(record(t, id255, "T", "{}", &err), 0);
    assert_int_equal(record(t, "scalar", type129 + 1, "42", &err), 0);
    assert_int_equal(record(t, "big", "T", "{\"n\":123456789012345678901234567890}", &err), 0);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events"), 3);
    assert_int_equal(testdb_q(t->db, "SELECT MAX(LENGTH(event_id)) FROM inbox_events"), 255);
}

/* ---- two transactions, one id ---- */

struct racer {
    struct txo_db *db;
    struct consume c;
    int rc;
    int64_t elapsed_ms;
    char msg[TXO_ERROR_MSG_MAX];
};

static void *racer_main(void *arg)
{
    struct racer *r = arg;
    struct txo_error err;
    txo_error_init(&err);
    int64_t t0 = txo_monotonic_ms();
    r->rc = consume(r->db, &r->c, &err);
    r->elapsed_ms = txo_monotonic_ms() - t0;
    snprintf(r->msg, sizeof(r->msg), "%s", err.msg);
    return NULL;
}

/* Second's thread: waits until first holds the row (uncommitted), then records the same id. */
struct second_args {
    struct racer *r;
    atomic_int *first_recorded;
    atomic_int *second_started;
};

static void *second_main(void *arg)
{
    struct second_args *s = arg;
    while (atomic_load(s->first_recorded) == 0)
        txo_sleep_ms(1);
    atomic_store(s->second_started, 1);
    return racer_main(s->r);
}

static void race(struct testdb *t, bool first_rolls_back, struct racer *first, struct racer *second)
{
    atomic_int first_recorded = 0, second_started = 0;
    memset(first, 0, sizeof(*first));
    memset(second, 0, sizeof(*second));
    first->db = testdb_connect(t);
    second->db = testdb_connect(t);
    first->c = (struct consume){.event_id = "race-1",
                                .who = "first",
                                .fail_after_effect = first_rolls_back,
                                .recorded = &first_recorded,
                                .peer_ready = &second_started};
    second->c = (struct consume){.event_id = "race-1", .who = "second"};
    struct second_args sa = {second, &first_recorded, &second_started};
    pthread_t a, b;
    assert_int_equal(pthread_create(&a, NULL, racer_main, first), 0);
    assert_int_equal(pthread_create(&b, NULL, second_main, &sa), 0);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    txo_db_close(first->db);
    txo_db_close(second->db);
}

static void test_concurrent_duplicate_waits_then_skips(void **state)
{
    struct testdb *t = *state;
    struct racer first, second;
    race(t, false, &first, &second);
    if (first.rc != 0 || second.rc != 0)
        fail_msg("first: %d %s; second: %d %s", first.rc, first.msg, second.rc, second.msg);
    assert_false(first.c.duplicate);
    assert_true(second.c.duplicate);
    /* The second insert waited for the first transaction's row lock (held ~300 ms). */
    if (second.elapsed_ms < 150)
        fail_msg("the second transaction did not wait for the first: %lld ms",
                 (long long)second.elapsed_ms);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events"), 1);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM effects"), 1);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM effects WHERE applied_by = 'first'"), 1);
}

static void test_concurrent_first_rolls_back_second_applies(void **state)
{
    struct testdb *t = *state;
    struct racer first, second;
    race(t, true, &first, &second);
    assert_int_equal(first.rc, TXO_EBUSINESS);
    if (second.rc != 0)
        fail_msg("second: %d %s", second.rc, second.msg);
    assert_false(second.c.duplicate);
    if (second.elapsed_ms < 150)
        fail_msg("the second transaction did not wait for the first: %lld ms",
                 (long long)second.elapsed_ms);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events"), 1);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM effects"), 1);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM effects WHERE applied_by = 'second'"),
                     1);
}

/* ---- retention ---- */

static void test_purge_old_rows_in_batches(void **state)
{
    struct testdb *t = *state;
    struct txo_error err;
    txo_error_init(&err);
    /* 10 rows 3 days old, 4 rows 1 hour old, 1 row never processed (3 days old too). */
    testdb_exec(t->db, "INSERT INTO inbox_events (event_id, event_type, payload, processed_at) "
                       "SELECT CONCAT('old-', seq), 'T', '{}', "
                       "NOW(6) - INTERVAL 3 DAY + INTERVAL seq SECOND FROM seq_1_to_10");
    testdb_exec(t->db, "INSERT INTO inbox_events (event_id, event_type, payload, processed_at) "
                       "SELECT CONCAT('new-', seq), 'T', '{}', NOW(6) - INTERVAL 1 HOUR "
                       "FROM seq_1_to_4");
    testdb_exec(t->db, "INSERT INTO inbox_events (event_id, event_type, payload, processed_at, "
                       "created_at) VALUES ('unprocessed', 'T', '{}', NULL, "
                       "NOW(6) - INTERVAL 3 DAY)");
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events"), 15);

    /* One batch of 3 only. */
    uint64_t deleted = 99;
    assert_int_equal(txo_inbox_purge(t->db, 86400, 3, 1, &deleted, &err), 0);
    assert_int_equal(deleted, 3);
    assert_int_equal(
        testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events WHERE event_id LIKE 'old-%'"), 7);
    /* The oldest went first. */
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events WHERE event_id IN "
                                     "('old-1', 'old-2', 'old-3')"),
                     0);

    /* The rest, 3 per batch: 7 old rows in 3 batches; the new and unprocessed ones stay. */
    assert_int_equal(txo_inbox_purge(t->db, 86400, 3, 0, &deleted, &err), 0);
    assert_int_equal(deleted, 7);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events"), 5);
    assert_int_equal(
        testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events WHERE event_id LIKE 'new-%'"), 4);
    assert_int_equal(
        testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events WHERE event_id = 'unprocessed'"), 1);
    assert_int_equal(txo_inbox_purge(t->db, 86400, 3, 0, &deleted, &err), 0);
    assert_int_equal(deleted, 0);

    /* A purged id is forgotten: recording it again is not a duplicate. */
    struct consume c = {.event_id = "old-1", .who = "late"};
    assert_int_equal(consume(t->db, &c, &err), 0);
    assert_false(c.duplicate);

    /* Age 0: everything processed before now goes, the unprocessed row stays. */
    assert_int_equal(txo_inbox_purge(t->db, 0, 1000, 0, &deleted, &err), 0);
    assert_int_equal(deleted, 5);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events"), 1);

    assert_int_equal(txo_inbox_purge(t->db, 0, 0, 0, &deleted, &err), TXO_EINVAL);
    assert_int_equal(txo_inbox_purge(t->db, 0, TXO_PURGE_BATCH_MAX + 1, 0, NULL, &err), TXO_EINVAL);
}

static void test_purge_walks_its_index(void **state)
{
    struct testdb *t = *state;
    testdb_exec(t->db, "INSERT INTO inbox_events (event_id, event_type, payload, processed_at) "
                       "SELECT CONCAT('e-', seq), 'T', '{}', NOW(6) - INTERVAL seq SECOND "
                       "FROM seq_1_to_5000");
    testdb_exec(t->db, "ANALYZE TABLE inbox_events");
    /* Every row is older than the cutoff: the walk must still stop after LIMIT entries. */
    const char *cutoff = "2100-01-01 00:00:00.000000";
    const char *cursor = "2000-01-01 00:00:00.000000";
    struct txo_param first[] = {txo_p_str(cutoff), txo_p_i64(500)};
    struct txo_param after[] = {txo_p_str(cutoff), txo_p_str(cursor), txo_p_str(cursor),
                                txo_p_str("e-1"), txo_p_i64(500)};
    const struct {
        const char *sql;
        const struct txo_param *params;
        size_t n;
    } cases[] = {
        {"EXPLAIN " RETENTION_SQL_INBOX_FIRST, first, 2},
        {"EXPLAIN " RETENTION_SQL_INBOX_AFTER, after, 5},
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(cases); i++) {
        struct txo_rows *rows = NULL;
        struct txo_error err;
        txo_error_init(&err);
        if (txo_db_query(t->db, cases[i].sql, cases[i].params, cases[i].n, &rows, &err) < 0)
            fail_msg("%s: %s", cases[i].sql, err.msg);
        const char *key = txo_rows_str(rows, 0, 5, NULL);
        const char *extra = txo_rows_str(rows, 0, 9, NULL);
        print_message("inbox purge select: key=%s extra=%s\n", key ? key : "NULL",
                      extra ? extra : "");
        assert_non_null(key);
        assert_string_equal(key, "idx_inbox_processed");
        if (extra != NULL && strstr(extra, "filesort") != NULL)
            fail_msg("the inbox purge sorts its rows: %s", extra);
        txo_rows_free(rows);
    }
}

/*
 * txo_inbox_record_many()'s lookup of the ids recorded: one dive per id into a primary key,
 * inbox_events' or, on the partitioned inbox (TXO_TEST_INBOX_LAYOUT), inbox_keys', whose
 * inbox_events would take one per partition.
 */
static void test_known_ids_one_dive_each(void **state)
{
    struct testdb *t = *state;
    testdb_exec(t->db, "INSERT INTO inbox_events (event_id, event_type, payload, processed_at) "
                       "SELECT CONCAT('e-', seq), 'T', '{}', NOW(6) FROM seq_1_to_2000");
    testdb_exec(t->db, "ANALYZE TABLE inbox_events");
    const char *layout = getenv("TXO_TEST_INBOX_LAYOUT");
    bool partitioned = layout != NULL && strcmp(layout, "partitioned") == 0;
    struct txo_param ids[] = {txo_p_str("e-1"), txo_p_str("e-2"), txo_p_str("nope")};
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_query(t->db, "EXPLAIN " INBOX_SQL_KNOWN_MANY "(?, ?, ?)", ids, 3, &rows, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(txo_rows_count(rows), 1);
    const char *table = txo_rows_str(rows, 0, 2, NULL);
    const char *key = txo_rows_str(rows, 0, 5, NULL);
    print_message("known ids: table=%s key=%s\n", table ? table : "NULL", key ? key : "NULL");
    assert_string_equal(table, partitioned ? "inbox_keys" : "inbox_events");
    assert_string_equal(key, "PRIMARY");
    txo_rows_free(rows);
}

/* ---- order: the last sequence handled per aggregate ---- */

struct order_call {
    const struct txo_inbox_position *pos;
    size_t n;
    enum txo_inbox_order *order;
    bool roll_back;
};

static int order_fn(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct order_call *c = arg;
    int rc = txo_inbox_check_order(tx, c->pos, c->n, c->order, err);
    if (rc == 0 && c->roll_back)
        rc = txo_error_set(err, TXO_EBUSINESS, "rolled back by the test");
    return rc;
}

static void check_order(struct testdb *t, const struct txo_inbox_position *pos, size_t n,
                        const enum txo_inbox_order *want, bool roll_back)
{
    enum txo_inbox_order got[16];
    assert_true(n <= 16);
    struct order_call c = {pos, n, got, roll_back};
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_transact(t->db, TXO_ISO_READ_COMMITTED, order_fn, &c, &err);
    assert_int_equal(rc, roll_back ? TXO_EBUSINESS : 0);
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("event %zu (%s/%s sequence %llu after %llu): %s, want %s", i,
                     pos[i].aggregate_type, pos[i].aggregate_id,
                     (unsigned long long)pos[i].sequence, (unsigned long long)pos[i].prev_sequence,
                     txo_inbox_order_name(got[i]), txo_inbox_order_name(want[i]));
}

static int64_t last_of(struct testdb *t, const char *id)
{
    struct txo_param p = txo_p_str(id);
    return testdb_i64(t->db,
                      "SELECT COALESCE((SELECT last_sequence FROM inbox_aggregates WHERE "
                      "aggregate_type = 'order' AND aggregate_id = ?), -1)",
                      &p, 1);
}

#define POS(id, seq, prev)                                                                         \
    {                                                                                              \
        "order", id, seq, prev                                                                     \
    }

/*
 * In order, a gap, an older event after a newer one, a skip (prev_sequence below sequence - 1,
 * not a gap), several events of one aggregate in one call each against the one before, events
 * without a sequence not judged, and a rolled-back call that moves nothing.
 */
static void test_order_verdicts(void **state)
{
    struct testdb *t = *state;
    const struct txo_inbox_position a[] = {POS("1", 1, 0), POS("1", 2, 1), POS("2", 1, 0)};
    const enum txo_inbox_order a_want[] = {TXO_INBOX_IN_ORDER, TXO_INBOX_IN_ORDER,
                                           TXO_INBOX_IN_ORDER};
    check_order(t, a, 3, a_want, false);
    assert_int_equal(last_of(t, "1"), 2);
    assert_int_equal(last_of(t, "2"), 1);

    /* 1: 3 is missing when 4 comes (gap), then 3 comes late (older); 2: 2 and 3 were skipped
     * by an operator, 4 follows 1 (in order); "x" has no sequence. */
    const struct txo_inbox_position b[] = {
        POS("1", 4, 3), POS("1", 3, 2), POS("2", 4, 1), {"order", "x", 0, 0}, POS("1", 5, 4)};
    const enum txo_inbox_order b_want[] = {TXO_INBOX_GAP, TXO_INBOX_OLDER, TXO_INBOX_IN_ORDER,
                                           TXO_INBOX_UNCHECKED, TXO_INBOX_IN_ORDER};
    check_order(t, b, 5, b_want, false);
    assert_int_equal(last_of(t, "1"), 5);
    assert_int_equal(last_of(t, "2"), 4);
    assert_int_equal(last_of(t, "x"), -1);

    /* Rolled back: judged, but the last sequence stays. */
    const struct txo_inbox_position c[] = {POS("1", 6, 5), POS("3", 2, 1)};
    const enum txo_inbox_order c_want[] = {TXO_INBOX_IN_ORDER, TXO_INBOX_GAP};
    check_order(t, c, 2, c_want, true);
    assert_int_equal(last_of(t, "1"), 5);
    assert_int_equal(last_of(t, "3"), -1);

    /* A copy of an event handled already is older, and moves nothing. */
    const struct txo_inbox_position d[] = {POS("1", 5, 4)};
    const enum txo_inbox_order d_want[] = {TXO_INBOX_OLDER};
    check_order(t, d, 1, d_want, false);
    assert_int_equal(last_of(t, "1"), 5);

    /* Many aggregates in one call: the padded statements still judge each one. */
    struct txo_inbox_position e[11];
    enum txo_inbox_order e_want[11];
    char ids[11][8];
    for (int i = 0; i < 11; i++) {
        snprintf(ids[i], sizeof(ids[i]), "m%d", i);
        e[i] = (struct txo_inbox_position)POS(ids[i], (uint64_t)(i % 3 + 1), (uint64_t)(i % 3));
        e_want[i] = i % 3 == 0 ? TXO_INBOX_IN_ORDER : TXO_INBOX_GAP;
    }
    check_order(t, e, 11, e_want, false);
    assert_int_equal(last_of(t, "m10"), 2);

    /* An over-long aggregate id with a sequence is refused before any statement. */
    char long_id[300];
    memset(long_id, 'z', sizeof(long_id) - 1);
    long_id[sizeof(long_id) - 1] = '\0';
    const struct txo_inbox_position f[] = {{"order", long_id, 1, 0}};
    enum txo_inbox_order got[1];
    struct order_call call = {f, 1, got, false};
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo_db_transact(t->db, TXO_ISO_READ_COMMITTED, order_fn, &call, &err),
                     TXO_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_then_duplicate),
        cmocka_unit_test(test_rollback_forgets_the_message),
        cmocka_unit_test(test_ids_are_compared_byte_for_byte),
        cmocka_unit_test(test_bad_arguments_write_nothing),
        cmocka_unit_test(test_concurrent_duplicate_waits_then_skips),
        cmocka_unit_test(test_concurrent_first_rolls_back_second_applies),
        cmocka_unit_test(test_purge_old_rows_in_batches),
        cmocka_unit_test(test_purge_walks_its_index),
        cmocka_unit_test(test_known_ids_one_dive_each),
        cmocka_unit_test(test_order_verdicts),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, testdb_free_state, NULL, NULL);
}
