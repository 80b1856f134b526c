/*
 * The partitioned inbox (txo/partition.h), on a real MariaDB, `txo partition` and `txo clean`
 * run as real processes:
 *   - the duplicate check holds on the partitioned layout: txo_inbox_record() and
 *     txo_inbox_record_many() see a recorded id as a duplicate, a plain INSERT of it fails with
 *     1062, and of two consumers recording one new id at once the second sees the first's
 *     row once it commits, and records the id itself when the first rolls back; a key left
 *     by a dropped partition does not make its id a duplicate;
 *   - enable and disable while consumers record new ids and repeat old ones: every id recorded
 *     once, every repeat a duplicate, no error, every row's key in inbox_keys;
 *   - enable killed in its copy and before its swap: the live table keeps working, status says
 *     so, and a run again finishes it;
 *   - writes placed between the copy triggers' DDL (after the first, after the second): each
 *     reaches the new layout as committed, none comes back deleted;
 *   - retention: expired partitions archived and dropped (killed after the first files and run
 *     again: every row in exactly one file), unfinished rows moved forward and kept with their
 *     keys, the dropped rows' keys deleted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "testarchive.h"
#include "testdb.h"
#include "testpartition.h"
#include "testchild.h"
#include "testproc.h"
#include "testrun.h"
#include "txo/txo.h"

/* `txo partition ACTION inbox [extra]`: its exit status. */
static int partition(const char *action, const char *extra)
{
    return testpartition_txo(action, TXO_PARTITION_INBOX, extra);
}

static bool partitioned(struct txo_db *db)
{
    return testpartition_enabled(db, TXO_PARTITION_INBOX);
}

/* ---- recording ---- */

struct record {
    const char *ids[3];
    size_t n;
    bool dup[3];
    unsigned hold_ms; /* sleep before the end of the transaction */
    int end_rc;       /* what the transaction returns after it: 0 commits */
};

static int record_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct record *r = arg;
    struct txo_inbox_entry e[3];
    for (size_t i = 0; i < r->n; i++)
        e[i] = (struct txo_inbox_entry){r->ids[i], "Recorded", "{\"n\": 1}"};
    int rc = r->n == 1 ? txo_inbox_record(tx, r->ids[0], "Recorded", "{\"n\": 1}", r->dup, err)
                       : txo_inbox_record_many(tx, e, r->n, r->dup, err);
    if (rc < 0)
        return rc;
    if (r->hold_ms > 0)
        txo_sleep_ms(r->hold_ms);
    return r->end_rc == 0 ? 0 : txo_error_set(err, r->end_rc, "rolled back by the test");
}

/* Records the ids in one transaction (one alone through txo_inbox_record()): its rc. */
static int record(struct txo_db *db, struct record *r)
{
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, record_tx, r, &err);
    if (rc < 0 && rc != r->end_rc)
        print_message("recording %s: %s\n", r->ids[0], err.msg);
    return rc;
}

static void expect_recorded(struct txo_db *db, const char *id, bool duplicate)
{
    struct record r = {.ids = {id}, .n = 1};
    assert_int_equal(record(db, &r), 0);
    assert_int_equal(r.dup[0], duplicate);
}

/* Every row's key is in inbox_keys with its created_at, and nothing else is. */
static void expect_keys_match(struct txo_db *db)
{
    int64_t rows = testdb_q(db, "SELECT COUNT(*) FROM inbox_events");
    assert_int_equal(testdb_q(db, "SELECT COUNT(*) FROM inbox_keys"), rows);
    assert_int_equal(testdb_q(db, "SELECT COUNT(*) FROM inbox_events e JOIN inbox_keys k "
                                  "ON k.event_id = e.event_id AND k.created_at = e.created_at"),
                     rows);
}

struct hold {
    struct testdb *t;
    struct record r;
    int rc;
};

static void *hold_main(void *arg)
{
    struct hold *h = arg;
    struct txo_db *db = testdb_connect(h->t);
    h->rc = record(db, &h->r);
    txo_db_close(db);
    return NULL;
}

/* Another consumer records id and holds its transaction open for a second, then commits or
 * (rollback) rolls back; this one records id meanwhile: whether it saw a duplicate. */
static bool record_against(struct testdb *t, const char *id, bool rollback)
{
    struct hold h = {.t = t, .r = {.ids = {id}, .n = 1, .hold_ms = 1000}};
    h.r.end_rc = rollback ? TXO_EINVAL : 0;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, hold_main, &h), 0);
    txo_sleep_ms(300); /* the other one has recorded it and waits */
    struct record mine = {.ids = {id}, .n = 1};
    int64_t t0 = txo_monotonic_ms();
    assert_int_equal(record(t->db, &mine), 0);
    int64_t waited = txo_monotonic_ms() - t0;
    pthread_join(th, NULL);
    assert_int_equal(h.rc, rollback ? TXO_EINVAL : 0);
    assert_false(h.r.dup[0]);
    assert_true(waited >= 400); /* it waited for the other transaction's end */
    return mine.dup[0];
}

static void test_duplicates_on_partitions(void **state)
{
    struct testdb *t = *state;
    assert_int_equal(partition("enable", "--partition-span=60"), 0);
    assert_true(partitioned(t->db));
    /* Batches look their ids up in inbox_keys now: one dive, not one per partition. */
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM information_schema.VIEWS WHERE "
                                     "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'inbox_ids' AND "
                                     "VIEW_DEFINITION LIKE '%`inbox_keys`%'"),
                     1);

    expect_recorded(t->db, "d1", false);
    expect_recorded(t->db, "d1", true);
    struct record many = {.ids = {"d2", "d1", "d2"}, .n = 3};
    assert_int_equal(record(t->db, &many), 0);
    assert_false(many.dup[0]);
    assert_true(many.dup[1]);
    assert_true(many.dup[2]);
    /* An application's plain INSERT of a recorded id: the duplicate-key error, as on one
     * table; ON DUPLICATE KEY UPDATE affects no row. */
    struct txo_error err;
    txo_error_init(&err);
    struct txo_param id = txo_p_str("d1");
    assert_int_equal(txo_db_exec(t->db,
                                 "INSERT INTO inbox_events (event_id, event_type, payload, "
                                 "processed_at) VALUES (?, 'x', '{}', NOW(6))",
                                 &id, 1, NULL, &err),
                     TXO_EDUPLICATE);
    struct txo_exec_result res = {0};
    assert_int_equal(txo_db_exec(t->db,
                                 "INSERT INTO inbox_events (event_id, event_type, payload, "
                                 "processed_at) VALUES (?, 'x', '{}', NOW(6)) "
                                 "ON DUPLICATE KEY UPDATE event_id = event_id",
                                 &id, 1, &res, &err),
                     0);
    assert_int_equal(res.affected_rows, 0);

    /* Two consumers, one new id: the second waits, then sees the first's row. When the first
     * rolls back, the second records it. */
    assert_true(record_against(t, "c1", false));
    assert_false(record_against(t, "c2", true));
    /* A key whose row went with its partition (the key's delete still to come): the id is
     * recorded anew, and its key follows the new row. */
    testdb_exec(t->db, "INSERT INTO inbox_keys (event_id, created_at) VALUES "
                       "('gone-1', NOW(6) - INTERVAL 30 DAY)");
    expect_recorded(t->db, "gone-1", false);
    expect_recorded(t->db, "gone-1", true);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events"), 5);
    expect_keys_match(t->db);

    /* The way back keeps every row and the check. */
    assert_int_equal(partition("disable", NULL), 0);
    assert_false(partitioned(t->db));
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM information_schema.VIEWS WHERE "
                                     "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'inbox_ids' AND "
                                     "VIEW_DEFINITION LIKE '%`inbox_events`%'"),
                     1);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events"), 5);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM information_schema.TABLES WHERE "
                                     "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'inbox_keys'"),
                     0);
    expect_recorded(t->db, "c2", true);
    assert_int_equal(partition("disable", NULL), 2); /* already: a usage error, nothing done */
}

/* ---- consumers recording while the layout changes ---- */

#define CONSUMERS 2

struct consumer {
    struct testdb *t;
    int w;
    atomic_bool *stop;
    unsigned recorded; /* new ids recorded */
    unsigned wrong;    /* a new id seen as a duplicate, or a repeat as new */
    unsigned errors;
};

static void *consumer_main(void *arg)
{
    struct consumer *c = arg;
    struct txo_db *db = testdb_connect(c->t);
    for (unsigned i = 0; !atomic_load(c->stop); i++) {
        char id[32], old[32];
        snprintf(id, sizeof(id), "w%d-%u", c->w, c->recorded);
        snprintf(old, sizeof(old), "w%d-%u", c->w, c->recorded / 2);
        /* New ids alone, then now and then with a repeat (record_many), then a repeat alone. */
        struct record r = {.ids = {id}, .n = 1};
        bool repeat = c->recorded > 0 && i % 3 == 1;
        if (repeat)
            r = (struct record){.ids = {id, old}, .n = 2};
        if (record(db, &r) < 0) {
            c->errors++;
            continue;
        }
        c->wrong += r.dup[0] ? 1 : 0;
        c->wrong += repeat && !r.dup[1] ? 1 : 0;
        c->recorded++;
        if (i % 5 == 4) {
            struct record again = {.ids = {old}, .n = 1};
            if (record(db, &again) < 0)
                c->errors++;
            else
                c->wrong += again.dup[0] ? 0 : 1;
        }
    }
    txo_db_close(db);
    return NULL;
}

static void test_layout_changes_while_consuming(void **state)
{
    struct testdb *t = *state;
    testdb_exec(t->db, "INSERT INTO inbox_events (event_id, event_type, payload, processed_at) "
                       "SELECT CONCAT('pre-', seq), 'Pre', '{}', NOW(6) FROM seq_1_to_3000");
    atomic_bool stop = false;
    struct consumer cs[CONSUMERS];
    pthread_t th[CONSUMERS];
    for (int w = 0; w < CONSUMERS; w++) {
        cs[w] = (struct consumer){.t = t, .w = w, .stop = &stop};
        assert_int_equal(pthread_create(&th[w], NULL, consumer_main, &cs[w]), 0);
    }
    txo_sleep_ms(300);
    assert_int_equal(partition("enable", "--partition-span=60"), 0);
    assert_true(partitioned(t->db));
    txo_sleep_ms(500);
    assert_int_equal(partition("disable", NULL), 0);
    assert_false(partitioned(t->db));
    txo_sleep_ms(300);
    assert_int_equal(partition("enable", "--partition-span=60"), 0);
    txo_sleep_ms(300);
    atomic_store(&stop, true);
    unsigned recorded = 0;
    for (int w = 0; w < CONSUMERS; w++) {
        pthread_join(th[w], NULL);
        print_message("consumer %d: %u recorded, %u wrong, %u errors\n", w, cs[w].recorded,
                      cs[w].wrong, cs[w].errors);
        assert_int_equal(cs[w].wrong, 0);
        assert_int_equal(cs[w].errors, 0);
        assert_true(cs[w].recorded > 50);
        recorded += cs[w].recorded;
    }
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events"), 3000 + recorded);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(DISTINCT event_id) FROM inbox_events"),
                     3000 + recorded);
    expect_keys_match(t->db);
}

/* ---- writes between the copy triggers ---- */

/*
 * The copy triggers come one DDL at a time, and consumers record between them. Writes placed
 * after the first and after the second reach the new layout as committed: an id recorded and
 * processed there is processed, an older one processed again keeps its new time, and a row
 * deleted there stays deleted (its id would read as a duplicate).
 */
static void test_writes_between_copy_triggers(void **state)
{
    struct testdb *t = *state;
    testdb_exec(t->db, "INSERT INTO inbox_events (event_id, event_type, payload, processed_at) "
                       "SELECT CONCAT('pre-', seq), 'Pre', '{}', NOW(6) FROM seq_1_to_100");
    const struct testpartition_writes w = {
        .table = TXO_PARTITION_INBOX,
        .insert = "INSERT INTO inbox_events (event_id, event_type, payload) "
                  "VALUES (?, 'Between', '{}')",
        .update = "UPDATE inbox_events SET processed_at = '2001-02-03 04:05:06' "
                  "WHERE event_id = ?",
        .delete = "DELETE FROM inbox_events WHERE event_id = ?",
        .old_key = "pre-",
        .count_updated = "SELECT COUNT(*) FROM inbox_events WHERE event_id = ? "
                         "AND processed_at = '2001-02-03 04:05:06'",
        .count_key = "SELECT COUNT(*) FROM inbox_events WHERE event_id = ?",
        .check_keys = expect_keys_match,
    };
    testpartition_writes_between_triggers(t, &w);
}

/* `txo partition status inbox`: its output (the test fails unless it exits 0). */
static char *status_out(void)
{
    const char *args[] = {"partition", "status", "inbox", NULL};
    char *out = NULL;
    assert_int_equal(testproc_run_txo("partition_inbox_status", args, 30000, &out), 0);
    return out;
}

/*
 * A layout change killed half way through its copy, then again just before its swap: the live
 * table keeps working (its copy triggers on), status says a change is pending, and a run to
 * the end finishes it with every row.
 */
static void test_layout_change_killed_then_rerun(void **state)
{
    struct testdb *t = *state;
    testdb_exec(t->db, "INSERT INTO inbox_events (event_id, event_type, payload, processed_at) "
                       "SELECT CONCAT('pre-', seq), 'Pre', '{}', NOW(6) FROM seq_1_to_1000");
    static const char *const points[] = {"--crash-point=partition.copy.after_batch:1",
                                         "--crash-point=partition.before_swap"};
    for (size_t i = 0; i < TXO_ARRAY_LEN(points); i++) {
        assert_int_equal(partition("enable", points[i]), -1);
        assert_false(partitioned(t->db));
        char *out = status_out();
        if (strstr(out, "a layout change is under way or was stopped") == NULL)
            fail_msg("status does not say the change is pending:\n%s", out);
        free(out);
        char id[32];
        snprintf(id, sizeof(id), "during-%zu", i);
        expect_recorded(t->db, id, false); /* the live table, its copy triggers on */
        expect_recorded(t->db, "pre-7", true);
    }
    assert_int_equal(partition("enable", NULL), 0);
    assert_true(partitioned(t->db));
    char *out = status_out();
    assert_null(strstr(out, "under way"));
    free(out);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events"), 1002);
    expect_keys_match(t->db);
    expect_recorded(t->db, "during-0", true);
    expect_recorded(t->db, "during-1", true);
}

/* ---- retention ---- */

/* `txo clean` with a week's inbox retention, batches of 100, extra (may be NULL). */
static int clean(const char *archive, const char *extra)
{
    const char *args[] = {"clean", "--inbox-retention=604800", "--clean-batch=100", archive, extra,
                          NULL};
    char *out = NULL;
    int rc = testproc_run_txo("partition_inbox_clean", args, 120000, &out);
    print_message("txo clean: %d\n%s", rc, out);
    free(out);
    return rc;
}

static void test_retention_drops_partitions(void **state)
{
    struct testdb *t = *state;
    /* 450 rows processed 10 days ago; 5 created 9 days ago but not finished: 2 not processed,
     * 3 processed an hour ago; 100 recorded now. */
    testdb_exec(t->db, "INSERT INTO inbox_events (event_id, event_type, payload, processed_at, "
                       "created_at) SELECT CONCAT('old-', seq), 'Old', JSON_OBJECT('n', seq), "
                       "NOW(6) - INTERVAL 10 DAY, NOW(6) - INTERVAL 10 DAY FROM seq_1_to_450");
    testdb_exec(t->db, "INSERT INTO inbox_events (event_id, event_type, payload, processed_at, "
                       "created_at) SELECT CONCAT('late-', seq), 'Late', '{}', "
                       "IF(seq <= 2, NULL, NOW(6) - INTERVAL 1 HOUR), NOW(6) - INTERVAL 9 DAY "
                       "FROM seq_1_to_5");
    testdb_exec(t->db, "INSERT INTO inbox_events (event_id, event_type, payload, processed_at) "
                       "SELECT CONCAT('new-', seq), 'New', '{}', NOW(6) FROM seq_1_to_100");
    assert_int_equal(partition("enable", NULL), 0);
    int64_t parts = testdb_q(t->db, "SELECT COUNT(*) FROM information_schema.PARTITIONS WHERE "
                                    "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'inbox_events'");
    assert_true(parts >= 10); /* a day each from 10 days ago, 2 ahead, pmax */

    char dir[256], archive[300];
    testproc_temp_path(dir, sizeof(dir), "txo-partition-inbox-archive", "dir");
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(archive, sizeof(archive), "--archive=%s", dir);
    struct testarchive_keys want, got;
    testarchive_db_keys(t->db, "event_id LIKE 'old-%'", &want);
    assert_int_equal(want.n, 450);

    /* Killed after the second file of the oldest partition: it is still there. */
    assert_int_equal(clean(archive, "--crash-point=partition.archive.after_file:1"), -1);
    testarchive_file_keys(dir, &got);
    assert_int_equal(got.n, 200);
    testarchive_keys_free(&got);
    assert_int_equal(
        testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events WHERE event_id LIKE 'old-%'"), 450);

    /* Run again: the archive goes on after the files there, every expired row in one file,
     * the expired partitions gone. */
    assert_int_equal(clean(archive, NULL), 0);
    testarchive_file_keys(dir, &got);
    testarchive_expect_keys(&got, &want);
    testarchive_keys_free(&got);
    testarchive_keys_free(&want);
    assert_int_equal(
        testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events WHERE event_id LIKE 'old-%'"), 0);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM information_schema.PARTITIONS WHERE "
                                     "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'inbox_events' "
                                     "AND PARTITION_DESCRIPTION <> 'MAXVALUE' AND "
                                     "PARTITION_DESCRIPTION < TO_SECONDS(NOW() - INTERVAL 7 DAY)"),
                     0);
    /* The unfinished rows moved to now's partition, kept with their keys: still duplicates. */
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events WHERE event_id LIKE "
                                     "'late-%' AND created_at > NOW(6) - INTERVAL 1 HOUR"),
                     5);
    assert_int_equal(testdb_q(t->db, "SELECT COUNT(*) FROM inbox_events"), 105);
    expect_keys_match(t->db);
    expect_recorded(t->db, "late-1", true);
    expect_recorded(t->db, "new-7", true);

    testarchive_expect_verified(dir, NULL);
    testchild_remove_dir(dir);
}

static int setup(void **state)
{
    *state = testdb_new("partition_inbox", TESTDB_NEW_EXPORT_ENV);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duplicates_on_partitions),
        cmocka_unit_test(test_layout_changes_while_consuming),
        cmocka_unit_test(test_layout_change_killed_then_rerun),
        cmocka_unit_test(test_retention_drops_partitions),
        cmocka_unit_test(test_writes_between_copy_triggers),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, testdb_free_state, NULL, NULL);
}
