/*
 * `txo clean --archive` killed between an archive file's rename and its DELETE's commit
 * (crash point retention.archive.after_rename), then run again: every expired row ends up in
 * exactly one file and none is left in the table, for the outbox and dead letters (files named
 * by ids) and for the inbox (files named by sequence, rows listed by event id). And a bad
 * --archive directory exits 2 before anything is deleted. Real MariaDB, real processes, real
 * files.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>

#include "testarchive.h"
#include "testrun.h"
#include "testchild.h"
#include "testdb.h"
#include "testproc.h"

/* `txo clean` with an archive, 10 rows a batch, a day's age, and extra (NULL-terminated). */
static int clean(struct testarchive_fixture *f, const char *archive, const char *extra)
{
    const char *args[] = {"clean",
                          "--outbox-retention=86400",
                          "--dead-letter-retention=86400",
                          "--clean-batch=10",
                          "--clean-pause=0",
                          archive != NULL ? "--archive" : "--clean-max-batches=0",
                          archive != NULL ? archive : "--clean-max-batches=0",
                          extra,
                          NULL};
    char *out = NULL;
    int rc = testproc_run_txo("archive_clean", args, 60000, &out);
    print_message("txo clean: %d\n%s", rc, out);
    free(out);
    (void)f;
    return rc;
}

/* Files of table under the archive, temporary ones included. */
static size_t count_files(struct testarchive_fixture *f, const char *table)
{
    char sub[300];
    snprintf(sub, sizeof(sub), "%s/%s", f->dir, table);
    DIR *d = opendir(sub);
    if (d == NULL)
        return 0;
    size_t n = 0;
    const struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

static void expect_archived(struct testarchive_fixture *f, const char *table, const int64_t *want,
                            size_t n)
{
    int64_t *got = NULL;
    size_t n_got = testarchive_ids(f->dir, table, &got);
    testarchive_expect_ids(got, n_got, want, n);
    free(got);
}

static void test_crash_between_file_and_delete_then_rerun(void **state)
{
    struct testarchive_fixture *f = *state;
    testarchive_insert_outbox(f->t.db, 35, "c");
    testarchive_insert_dead_letters(f->t.db, 14, "c");
    int64_t *outbox = NULL, *dlq = NULL;
    size_t n_outbox = testarchive_db_ids(f->t.db, "outbox_events", "1", &outbox);
    size_t n_dlq = testarchive_db_ids(f->t.db, "dead_letter_events", "1", &dlq);

    /* Killed at the second batch's file: the first batch is archived and deleted, the second
     * archived and still in the table. */
    assert_int_equal(clean(f, f->dir, "--crash-point=retention.archive.after_rename:1"), -1);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM outbox_events"), 25);
    assert_int_equal(count_files(f, "outbox_events"), 2);
    int64_t *got = NULL;
    assert_int_equal(testarchive_ids(f->dir, "outbox_events", &got), 20);
    free(got);

    /* Killed again, at the rerun's first file (the dead letters' first, as the outbox
     * finishes first): the outbox is complete, its interrupted file completed, not repeated. */
    assert_int_equal(clean(f, f->dir, "--crash-point=retention.archive.after_rename:2"), -1);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM outbox_events"), 0);
    expect_archived(f, "outbox_events", outbox, n_outbox);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM dead_letter_events"), 14);
    assert_int_equal(count_files(f, "dead_letter_events"), 1);

    /* The rerun completes the dead letters' file and archives the rest once. */
    assert_int_equal(clean(f, f->dir, NULL), 0);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM outbox_events"), 0);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM dead_letter_events"), 0);
    expect_archived(f, "outbox_events", outbox, n_outbox);
    expect_archived(f, "dead_letter_events", dlq, n_dlq);
    /* No temporary file left: 4 outbox files (10, 10, 10, 5), 2 dead-letter ones. */
    assert_int_equal(count_files(f, "outbox_events"), 4);
    assert_int_equal(count_files(f, "dead_letter_events"), 2);

    testarchive_expect_verified(f->dir, "6 files, 49 rows verified, 0 bad");
    free(outbox);
    free(dlq);
}

static void expect_inbox_archived(struct testarchive_fixture *f,
                                  const struct testarchive_keys *want)
{
    struct testarchive_keys got;
    testarchive_file_keys(f->dir, &got);
    testarchive_expect_keys(&got, want);
    testarchive_keys_free(&got);
}

/*
 * The inbox alone (nothing else to archive, so every hit of the crash point is an inbox file):
 * killed at its second file, then at the rerun's second file, then run to the end. Without the
 * crash rule (the newest file's rows deleted first) a rerun archives the killed batch's rows
 * again and an event id shows up in two files.
 */
static void test_inbox_crash_between_file_and_delete_then_rerun(void **state)
{
    struct testarchive_fixture *f = *state;
    testarchive_insert_inbox(f->t.db, 35, "c");
    struct testarchive_keys all, got;
    testarchive_db_keys(f->t.db, "1", &all);
    assert_int_equal(all.n, 35);

    /* The first batch archived and deleted, the second archived and still in the table. */
    assert_int_equal(clean(f, f->dir, "--crash-point=retention.archive.after_rename:1"), -1);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM inbox_events"), 25);
    assert_int_equal(count_files(f, "inbox_events"), 2);
    testarchive_file_keys(f->dir, &got);
    assert_int_equal(got.n, 20);
    testarchive_keys_free(&got);

    /* The rerun deletes the second file's rows, archives 21-30 into the third, and is killed
     * at the fourth (31-35), which is then in the table and in a file. */
    assert_int_equal(clean(f, f->dir, "--crash-point=retention.archive.after_rename:1"), -1);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM inbox_events"), 5);
    assert_int_equal(count_files(f, "inbox_events"), 4);
    expect_inbox_archived(f, &all);

    /* The last run only deletes the fourth file's rows. */
    assert_int_equal(clean(f, f->dir, NULL), 0);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM inbox_events"), 0);
    assert_int_equal(count_files(f, "inbox_events"), 4);
    expect_inbox_archived(f, &all);

    testarchive_expect_verified(f->dir, "4 files, 35 rows verified, 0 bad");
    testarchive_keys_free(&all);
}

static void test_bad_archive_dir_exits_2_and_deletes_nothing(void **state)
{
    struct testarchive_fixture *f = *state;
    testarchive_insert_outbox(f->t.db, 5, "b");
    testarchive_insert_dead_letters(f->t.db, 3, "b");
    char missing[300], file[300];
    snprintf(missing, sizeof(missing), "%s/missing", f->dir);
    snprintf(file, sizeof(file), "%s/a-file", f->dir);
    FILE *fp = fopen(file, "w");
    assert_non_null(fp);
    fclose(fp);

    assert_int_equal(clean(f, missing, NULL), 2);
    assert_int_equal(clean(f, file, NULL), 2);
    assert_int_equal(clean(f, "", NULL), 2);
    /* The environment variable is checked the same way. */
    setenv("TXO_CLEAN_ARCHIVE_DIR", missing, 1);
    assert_int_equal(clean(f, NULL, NULL), 2);
    unsetenv("TXO_CLEAN_ARCHIVE_DIR");
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM outbox_events"), 5);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM dead_letter_events"), 3);

    const char *args[] = {"clean", "--archive", missing, NULL};
    char *out = NULL;
    assert_int_equal(testproc_run_txo("archive_clean", args, 30000, &out), 2);
    assert_non_null(strstr(out, missing));
    assert_non_null(strstr(out, "No such file or directory"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crash_between_file_and_delete_then_rerun),
        cmocka_unit_test(test_inbox_crash_between_file_and_delete_then_rerun),
        cmocka_unit_test(test_bad_archive_dir_exits_2_and_deletes_nothing),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), testarchive_setup, testarchive_teardown, NULL,
                        NULL);
}
