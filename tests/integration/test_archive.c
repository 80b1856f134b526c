/*
 * The retention archive against a real MariaDB and real files: a pass with an archive writes
 * every expired outbox row, replayed dead letter and processed inbox row to exactly one gzip
 * JSON-lines file, each holding what was inserted, before deleting it; rows that are not
 * expired stay; `txo archive cat` prints the rows and `txo archive verify` passes the files and
 * fails a file cut short, one with an edited line, and an inbox file out of order or misnamed.
 * The inbox's files are named by sequence, ordered by (processed_at, event_id), and an event
 * recorded again after its row was archived is not taken for the archived row. (The crash and
 * the bad directory: tests/fault/test_archive_crash.c.)
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
#include <fcntl.h>
#include <sys/stat.h>
#include <zlib.h>

#include "testarchive.h"
#include "testrun.h"
#include "testchild.h"
#include "testdb.h"
#include "testproc.h"
#include "txo/archive.h"
#include "txo/retention.h"

/* One pass with an archive, 10 rows a batch, a day's age; returns what it archived. */
static struct txo_retention_counts pass(struct testarchive_fixture *f)
{
    struct txo_retention_counts c;
    struct txo_retention_opts o;
    memset(&o, 0xa5, sizeof(o)); /* every field must come from the defaults, none from the stack */
    txo_retention_opts_init(&o);
    o.batch = 10;
    o.max_batches = 0;
    o.outbox_s = 86400;
    o.dead_letters_s = 86400;
    o.inbox_s = 86400;
    o.archive_dir = f->dir;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_retention_run(f->t.db, &o, &c, &err) < 0)
        fail_msg("retention: %s", err.msg);
    return c;
}

/* The rows sql selects (it takes no values); the test fails on an error. Free with
 * txo_rows_free(). */
static struct txo_rows *query(struct testarchive_fixture *f, const char *sql)
{
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_query(f->t.db, sql, NULL, 0, &rows, &err) < 0)
        fail_msg("%s: %s", sql, err.msg);
    return rows;
}

/*
 * `txo archive cat` of every file of table: each line is a row as inserted (the inbox's by
 * testarchive_insert_inbox(.., "in"), each once); returns the count.
 */
static size_t cat_and_check(struct testarchive_fixture *f, const char *table)
{
    bool inbox = strcmp(table, "inbox_events") == 0, seen[64] = {false};
    char glob[300];
    snprintf(glob, sizeof(glob), "%s/%s", f->dir, table);
    const char *args[64] = {"archive", "cat"};
    size_t n_args = 2;
    char paths[62][600];
    DIR *d = opendir(glob);
    assert_non_null(d);
    const struct dirent *e;
    while ((e = readdir(d)) != NULL && n_args < 62) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(paths[n_args], sizeof(paths[n_args]), "%s/%s", glob, e->d_name);
        args[n_args] = paths[n_args];
        n_args++;
    }
    closedir(d);
    args[n_args] = NULL;
    char *out = NULL;
    assert_int_equal(testproc_run_txo("archive_cat", args, 30000, &out), 0);
    size_t rows = 0;
    for (char *p = out; *p != '\0';) {
        char *nl = strchr(p, '\n');
        assert_non_null(nl);
        if (inbox) {
            unsigned i = testarchive_expect_inbox_row("in", p, (size_t)(nl - p));
            assert_true(i < TXO_ARRAY_LEN(seen) && !seen[i]);
            seen[i] = true;
        } else {
            testarchive_expect_row(table, p, (size_t)(nl - p));
        }
        rows++;
        p = nl + 1;
    }
    free(out);
    return rows;
}

static void test_pass_archives_each_row_once_then_deletes_it(void **state)
{
    struct testarchive_fixture *f = *state;
    testarchive_insert_outbox(f->t.db, 25, "old");
    testarchive_insert_dead_letters(f->t.db, 12, "old");
    testarchive_insert_inbox(f->t.db, 23, "in");
    /* Kept: not PUBLISHED, published recently, a letter never replayed, inbox rows not
     * processed or processed recently. */
    testdb_exec(f->t.db,
                "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                "payload, idempotency_key, status, next_attempt_at, published_time) "
                "VALUES ('order', 1, 'E', '{}', 'pending', 'PENDING', '2020-01-01', "
                "DEFAULT), ('order', 1, 'E', '{}', 'recent', 'PUBLISHED', NOW(6), NOW(6))");
    testdb_exec(f->t.db, "INSERT INTO dead_letter_events (event_type, payload, error) VALUES "
                         "('E', '{}', 'never replayed')");
    testdb_exec(f->t.db, "INSERT INTO inbox_events (event_id, event_type, payload, processed_at) "
                         "VALUES ('kept-1', 'E', '{}', NULL), ('kept-2', 'E', '{}', NOW(6))");
    int64_t *want_outbox = NULL, *want_dlq = NULL;
    size_t n_outbox =
        testarchive_db_ids(f->t.db, "outbox_events", "idempotency_key LIKE 'old:%'", &want_outbox);
    size_t n_dlq =
        testarchive_db_ids(f->t.db, "dead_letter_events", "error LIKE 'old:%'", &want_dlq);
    assert_int_equal(n_outbox, 25);
    assert_int_equal(n_dlq, 12);
    struct testarchive_keys want_inbox, got_inbox;
    testarchive_db_keys(f->t.db, "event_type = 'InEvt'", &want_inbox);
    assert_int_equal(want_inbox.n, 23);

    struct txo_retention_counts c = pass(f);
    assert_int_equal(c.outbox, 25);
    assert_int_equal(c.dead_letters, 12);
    assert_int_equal(c.inbox, 23);

    /* Gone from the tables, the others kept. */
    assert_int_equal(
        testdb_q(f->t.db, "SELECT COUNT(*) FROM outbox_events WHERE idempotency_key LIKE 'old:%'"),
        0);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM outbox_events"), 2);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM dead_letter_events"), 1);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM inbox_events"), 2);
    assert_int_equal(
        testdb_q(f->t.db, "SELECT COUNT(*) FROM inbox_events WHERE event_id LIKE 'kept-%'"), 2);

    /* Every deleted row in exactly one file: batches of 10 make 3, 2 and 3 files. */
    int64_t *got = NULL;
    size_t n = testarchive_ids(f->dir, "outbox_events", &got);
    testarchive_expect_ids(got, n, want_outbox, n_outbox);
    free(got);
    n = testarchive_ids(f->dir, "dead_letter_events", &got);
    testarchive_expect_ids(got, n, want_dlq, n_dlq);
    free(got);
    testarchive_file_keys(f->dir, &got_inbox);
    testarchive_expect_keys(&got_inbox, &want_inbox);
    testarchive_keys_free(&got_inbox);

    /* The inbox's files, named by sequence and their first row's second. */
    static const char *const inbox_files[] = {
        "inbox_events.0000000001.20200304T050607Z.jsonl.gz",
        "inbox_events.0000000002.20200304T050607Z.jsonl.gz",
        "inbox_events.0000000003.20200304T050607Z.jsonl.gz",
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(inbox_files); i++) {
        char path[600];
        snprintf(path, sizeof(path), "%s/inbox_events/%s", f->dir, inbox_files[i]);
        struct txo_archive_file file;
        struct txo_error err;
        txo_error_init(&err);
        if (txo_archive_read(path, &file, &err) < 0)
            fail_msg("%s", err.msg);
        assert_int_equal(file.seq, i + 1);
        assert_int_equal(file.n_rows, i < 2 ? 10 : 3);
        assert_null(file.ids);
        txo_archive_file_release(&file);
    }

    /* What `txo archive cat` prints is what was inserted. */
    assert_int_equal(cat_and_check(f, "outbox_events"), 25);
    assert_int_equal(cat_and_check(f, "dead_letter_events"), 12);
    assert_int_equal(cat_and_check(f, "inbox_events"), 23);

    /* A second pass finds nothing and writes nothing. */
    c = pass(f);
    assert_int_equal(c.outbox + c.dead_letters + c.inbox, 0);
    n = testarchive_ids(f->dir, "outbox_events", &got);
    assert_int_equal(n, 25);
    free(got);
    testarchive_file_keys(f->dir, &got_inbox);
    testarchive_expect_keys(&got_inbox, &want_inbox);
    testarchive_keys_free(&got_inbox);
    testarchive_keys_free(&want_inbox);
    free(want_outbox);
    free(want_dlq);
}

/* The decompressed content of path (malloc'd), its length in *len. */
static char *gunzip(const char *path, size_t *len)
{
    gzFile gz = gzopen(path, "rb");
    assert_non_null(gz);
    char *buf = malloc(1 << 20);
    assert_non_null(buf);
    int n = gzread(gz, buf, 1 << 20);
    assert_true(n > 0);
    gzclose(gz);
    *len = (size_t)n;
    return buf;
}

static void write_gzip(const char *path, const char *data, size_t len)
{
    gzFile gz = gzopen(path, "wb");
    assert_non_null(gz);
    assert_int_equal(gzwrite(gz, data, (unsigned)len), (int)len);
    assert_int_equal(gzclose(gz), Z_OK);
}

static int verify(const char *path, char **out)
{
    const char *args[] = {"archive", "verify", path, NULL};
    return testproc_run_txo("archive_verify", args, 30000, out);
}

/* `txo archive verify path` exits with status, its output holding says (NULL: anything). */
static void expect_verify(const char *path, int status, const char *says)
{
    char *out = NULL;
    assert_int_equal(verify(path, &out), status);
    if (says != NULL && strstr(out, says) == NULL)
        fail_msg("txo archive verify %s: no \"%s\" in:\n%s", path, says, out);
    free(out);
}

/*
 * The byte at of the first mark in data[0..len) changed to to, path rewritten as that gzipped:
 * verify names the file and its CRC-32. The byte is put back.
 */
static void expect_edit_caught(const char *path, char *data, size_t len, const char *mark,
                               size_t at, char to)
{
    char *p = strstr(data, mark);
    assert_non_null(p);
    char was = p[at];
    p[at] = to;
    write_gzip(path, data, len);
    char *out = NULL;
    assert_int_equal(verify(path, &out), 1);
    assert_non_null(strstr(out, path));
    assert_non_null(strstr(out, "CRC-32"));
    free(out);
    p[at] = was;
}

/* The one file of 10 rows under f->dir, found whole by verify: path's content, gunzipped. */
static char *verified_content(struct testarchive_fixture *f, const char *path, size_t *len)
{
    expect_verify(f->dir, 0, "1 files, 10 rows verified, 0 bad");
    return gunzip(path, len);
}

/*
 * path, the only file under dir, cut to half of its gzip bytes: verify finds it bad, and cat
 * refuses it.
 */
static void expect_cut_short_caught(const char *dir, const char *path)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    char gz[65536];
    size_t gz_len = fread(gz, 1, sizeof(gz), fp);
    fclose(fp);
    fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(gz, 1, gz_len / 2, fp), gz_len / 2);
    fclose(fp);
    char *out = NULL;
    assert_int_equal(verify(dir, &out), 1);
    assert_non_null(strstr(out, path));
    assert_non_null(strstr(out, "0 files, 0 rows verified, 1 bad"));
    free(out);
    const char *cat[] = {"archive", "cat", path, NULL};
    assert_int_equal(testproc_run_txo("archive_cat", cat, 30000, &out), 1);
    free(out);
}

static void test_verify_catches_a_truncated_and_an_edited_file(void **state)
{
    struct testarchive_fixture *f = *state;
    testarchive_insert_outbox(f->t.db, 10, "v");
    assert_int_equal(pass(f).outbox, 10);
    char path[512];
    snprintf(path, sizeof(path), "%s/outbox_events/outbox_events.1-10.jsonl.gz", f->dir);
    size_t len = 0;
    char *data = verified_content(f, path, &len);

    /* A line edited, the file gzipped anew (so gzip's own CRC is right). */
    expect_edit_caught(path, data, len, "\"v:3\"", 3, '4');

    /* Cut short: the original content, half of its gzip bytes. */
    write_gzip(path, data, len);
    expect_verify(path, 0, NULL);
    expect_cut_short_caught(f->dir, path);
    free(data);
}

/* data[0..len) gzipped as path, after its header's crc32 is set to that of the rows. */
static void write_gzip_fixing_crc(const char *path, char *data, size_t len)
{
    char *rows = memchr(data, '\n', len);
    char *crc = strstr(data, "\"crc32\":\"");
    assert_non_null(rows);
    assert_true(crc != NULL && crc < rows);
    rows++;
    char hex[9];
    snprintf(hex, sizeof(hex), "%08lx", crc32(0L, (const Bytef *)rows, (uInt)(data + len - rows)));
    memcpy(crc + strlen("\"crc32\":\""), hex, 8);
    write_gzip(path, data, len);
}

static void test_verify_catches_a_damaged_inbox_file(void **state)
{
    struct testarchive_fixture *f = *state;
    testarchive_insert_inbox(f->t.db, 10, "in");
    assert_int_equal(pass(f).inbox, 10);
    char path[512], renamed[512];
    snprintf(path, sizeof(path),
             "%s/inbox_events/inbox_events.0000000001.20200304T050607Z.jsonl.gz", f->dir);
    size_t len = 0;
    char *data = verified_content(f, path, &len);

    /* A byte of an event id changed: the CRC-32 no longer matches. */
    expect_edit_caught(path, data, len, "\"in:7\"", 4, '8');

    /* Two rows swapped, the CRC-32 made right: the order of (processed_at, event_id) is not. */
    char *line2 = (char *)memchr(data, '\n', len) + 1;
    char *line3 = strchr(line2, '\n') + 1;
    char *line4 = strchr(line3, '\n') + 1;
    size_t l2 = (size_t)(line3 - line2), l3 = (size_t)(line4 - line3);
    char *swapped = malloc(len);
    assert_non_null(swapped);
    size_t at = (size_t)(line2 - data);
    memcpy(swapped, data, at);
    memcpy(swapped + at, line3, l3);
    memcpy(swapped + at + l3, line2, l2);
    memcpy(swapped + at + l3 + l2, line4, len - (size_t)(line4 - data));
    write_gzip_fixing_crc(path, swapped, len);
    free(swapped);
    expect_verify(path, 1, "line 3 does not come after the line before");

    /* Whole again, under another sequence's name: the name is not the header's. */
    write_gzip(path, data, len);
    snprintf(renamed, sizeof(renamed),
             "%s/inbox_events/inbox_events.0000000002.20200304T050607Z.jsonl.gz", f->dir);
    assert_int_equal(rename(path, renamed), 0);
    expect_verify(renamed, 1, "the name should be inbox_events.0000000001.");
    assert_int_equal(rename(renamed, path), 0);

    /* Cut short: half of its gzip bytes. */
    expect_cut_short_caught(f->dir, path);
    free(data);
}

/*
 * An event recorded again after its row was archived and deleted (a redelivery older than
 * the retention age) is a new row with the old event id: the next pass, which finishes the
 * table's newest file by its rows' (event_id, processed_at), leaves it.
 */
static void test_an_event_recorded_again_is_not_deleted_with_its_old_file(void **state)
{
    struct testarchive_fixture *f = *state;
    testarchive_insert_inbox(f->t.db, 4, "in");
    struct txo_retention_counts c = pass(f);
    assert_int_equal(c.inbox, 4);
    testdb_exec(f->t.db, "INSERT INTO inbox_events (event_id, event_type, payload, processed_at) "
                         "VALUES ('in:1', 'InEvt', '{}', NOW(6))");
    c = pass(f);
    assert_int_equal(c.inbox, 0);
    assert_int_equal(testdb_q(f->t.db, "SELECT COUNT(*) FROM inbox_events WHERE event_id = 'in:1'"),
                     1);
}

/*
 * Files named by sequence through the library: the name, the header, the rows in (time, key)
 * order with a key that is not UTF-8 and one holding a NUL byte, read back as bytes; rows the
 * reader would refuse are refused by the writer, and so is a sequence already written; the
 * newest file is the highest sequence, not the latest time or the latest modified.
 */
static void test_files_named_by_sequence(void **state)
{
    struct testarchive_fixture *f = *state;
    struct txo_error err;
    txo_error_init(&err);
    const struct txo_archive_column cols[] = {
        {"event_id", TXO_ARCHIVE_BINARY},
        {"n", TXO_ARCHIVE_INT},
        {"processed_at", TXO_ARCHIVE_TIME},
    };
    struct txo_rows *rows =
        query(f, "SELECT CONCAT('a', CHAR(0), 'b'), 1, '2026-12-02 10:00:00.000001' UNION ALL "
                 "SELECT X'FE41', 2, '2026-12-02 10:00:00.000001' UNION ALL "
                 "SELECT 'Z', 3, '2026-12-02 10:00:01.5'");
    char *path = NULL;
    if (txo_archive_write_seq(f->dir, "t", cols, TXO_ARRAY_LEN(cols), 0, 2, 7, rows, &path, &err) <
        0)
        fail_msg("%s", err.msg);
    txo_rows_free(rows);
    assert_non_null(strstr(path, "/t/t.0000000007.20261202T100000Z.jsonl.gz"));
    size_t len = 0;
    char *data = gunzip(path, &len);
    char *nl = memchr(data, '\n', len);
    assert_non_null(nl);
    *nl = '\0';
    assert_string_equal(data, "{\"txo_archive\":2,\"table\":\"t\",\"columns\":["
                              "{\"name\":\"event_id\",\"type\":\"binary\"},"
                              "{\"name\":\"n\",\"type\":\"int\"},"
                              "{\"name\":\"processed_at\",\"type\":\"time\"}],"
                              "\"key_column\":\"event_id\",\"time_column\":\"processed_at\","
                              "\"seq\":7,\"first_time\":\"2026-12-02T10:00:00.000001Z\","
                              "\"last_time\":\"2026-12-02T10:00:01.5Z\",\"rows\":3,"
                              "\"crc32\":\"408f2369\"}");
    free(data);
    struct txo_archive_file file;
    if (txo_archive_read(path, &file, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(file.version, TXO_ARCHIVE_VERSION_SEQ);
    assert_int_equal(file.seq, 7);
    assert_int_equal(file.n_rows, 3);
    assert_null(file.ids);
    assert_string_equal(
        file.lines, "{\"event_id\":\"a\\u0000b\",\"n\":1,"
                    "\"processed_at\":\"2026-12-02T10:00:00.000001Z\"}\n"
                    "{\"event_id\":{\"base64\":\"/kE=\"},\"n\":2,"
                    "\"processed_at\":\"2026-12-02T10:00:00.000001Z\"}\n"
                    "{\"event_id\":\"Z\",\"n\":3,\"processed_at\":\"2026-12-02T10:00:01.5Z\"}\n");
    assert_int_equal(file.keys[0].len, 3);
    assert_memory_equal(file.keys[0].bytes, "a\0b", 3);
    assert_int_equal(file.keys[1].len, 2);
    assert_memory_equal(file.keys[1].bytes,
                        "\xfe"
                        "A",
                        2);
    assert_int_equal(file.keys[2].len, 1);
    assert_memory_equal(file.keys[2].bytes, "Z", 1);
    assert_int_equal(file.times_us[0], 1796205600000001LL);
    assert_int_equal(file.times_us[2], 1796205601500000LL);
    txo_archive_file_release(&file);

    /* Refused: rows out of order, a key twice, a NULL key, sequence 0. No file is left. */
    static const char *const bad[] = {
        "SELECT 'b', 1, '2026-12-02 10:00:00' UNION ALL SELECT 'a', 2, '2026-12-02 10:00:00'",
        "SELECT 'a', 1, '2026-12-02 10:00:00' UNION ALL SELECT 'a', 2, '2026-12-02 10:00:01'",
        "SELECT NULL, 1, '2026-12-02 10:00:00'",
        "SELECT 'a', 1, '2026-12-02 10:00:00'",
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(bad); i++) {
        if (txo_db_query(f->t.db, bad[i], NULL, 0, &rows, &err) < 0)
            fail_msg("%s", err.msg);
        uint64_t seq = i == 3 ? 0 : 9;
        assert_int_equal(txo_archive_write_seq(f->dir, "t", cols, TXO_ARRAY_LEN(cols), 0, 2, seq,
                                               rows, NULL, &err),
                         TXO_EINVAL);
        txo_rows_free(rows);
    }
    uint64_t last = 0;
    assert_int_equal(txo_archive_last_seq(f->dir, "t", &last, &err), 0);
    assert_int_equal(last, 7);

    /* Sequence 7 again (a second writer in the directory): refused, the first file kept. */
    if (txo_db_query(f->t.db, "SELECT 'other', 1, '2026-12-02 10:00:00.000001'", NULL, 0, &rows,
                     &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(
        txo_archive_write_seq(f->dir, "t", cols, TXO_ARRAY_LEN(cols), 0, 2, 7, rows, NULL, &err),
        TXO_ECONFLICT);
    txo_rows_free(rows);
    if (txo_archive_read(path, &file, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(file.n_rows, 3);
    txo_archive_file_release(&file);

    /* Sequence 8 holds older rows and is modified long ago: still the newest. */
    if (txo_db_query(f->t.db, "SELECT 'old', 1, '2020-01-01 00:00:00'", NULL, 0, &rows, &err) < 0)
        fail_msg("%s", err.msg);
    char *path8 = NULL;
    if (txo_archive_write_seq(f->dir, "t", cols, TXO_ARRAY_LEN(cols), 0, 2, 8, rows, &path8, &err) <
        0)
        fail_msg("%s", err.msg);
    txo_rows_free(rows);
    struct timespec long_ago[2] = {{.tv_sec = 946684800}, {.tv_sec = 946684800}};
    assert_int_equal(utimensat(AT_FDCWD, path8, long_ago, 0), 0);
    char *newest = NULL;
    assert_int_equal(txo_archive_newest(f->dir, "t", &newest, &err), 0);
    assert_string_equal(newest, path8);
    assert_int_equal(txo_archive_last_seq(f->dir, "t", &last, &err), 0);
    assert_int_equal(last, 8);
    txo_free(newest);
    txo_free(path8);
    txo_free(path);
}

/*
 * A value holding a NUL character, as a JSON payload may ("\u0000") and a text column may
 * (the byte itself): the writer escapes it as \u0000, and the file must still verify and cat,
 * or the next run's crash rule would stop at this newest file for good.
 */
static void test_a_nul_in_a_value_keeps_the_file_readable(void **state)
{
    struct testarchive_fixture *f = *state;
    testdb_exec(f->t.db, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                         "payload, idempotency_key, status, next_attempt_at, last_error, "
                         "published_time) VALUES ('order', 1, 'E', '{\"s\": \"a\\\\u0000b\"}', "
                         "'nul', 'PUBLISHED', '2020-01-01', CONCAT('x', CHAR(0), 'y'), "
                         "'2020-01-01')");
    assert_int_equal(pass(f).outbox, 1);
    expect_verify(f->dir, 0, "1 files, 1 rows verified, 0 bad");
    char path[512];
    snprintf(path, sizeof(path), "%s/outbox_events/outbox_events.1-1.jsonl.gz", f->dir);
    const char *cat[] = {"archive", "cat", path, NULL};
    char *out = NULL;
    assert_int_equal(testproc_run_txo("archive_cat", cat, 30000, &out), 0);
    assert_non_null(strstr(out, "\"payload\":{\"s\":\"a\\u0000b\"}"));
    assert_non_null(strstr(out, "\"last_error\":\"x\\u0000y\""));
    free(out);
}

/* Each column type as the format says, through the library's writer and reader. */
static void test_values_of_each_type(void **state)
{
    struct testarchive_fixture *f = *state;
    struct txo_rows *rows =
        query(f, "SELECT 7, X'FF00', 'plain', '2026-12-02 10:00:00.123456', 1.5, NULL, "
                 "'{\"a\": [1, 2]}', 12.50 UNION ALL SELECT 9, 'abc', 'tab\there', "
                 "'2026-12-02 10:00:01', -2, 'x', '[]', 0.00");
    struct txo_error err;
    txo_error_init(&err);
    const struct txo_archive_column cols[] = {
        {"id", TXO_ARCHIVE_INT},   {"bin", TXO_ARCHIVE_BINARY}, {"txt", TXO_ARCHIVE_TEXT},
        {"at", TXO_ARCHIVE_TIME},  {"real", TXO_ARCHIVE_REAL},  {"none", TXO_ARCHIVE_TEXT},
        {"doc", TXO_ARCHIVE_JSON}, {"dec", TXO_ARCHIVE_TEXT},
    };
    char *path = NULL;
    assert_int_equal(
        txo_archive_write(f->dir, "t", cols, TXO_ARRAY_LEN(cols), 0, rows, &path, &err), 0);
    txo_rows_free(rows);
    struct txo_archive_file file;
    if (txo_archive_read(path, &file, &err) < 0)
        fail_msg("%s", err.msg);
    assert_string_equal(file.table, "t");
    assert_int_equal(file.n_rows, 2);
    assert_int_equal(file.first_id, 7);
    assert_int_equal(file.last_id, 9);
    assert_non_null(strstr(path, "/t/t.7-9.jsonl.gz"));
    assert_string_equal(file.lines,
                        "{\"id\":7,\"bin\":{\"base64\":\"/wA=\"},\"txt\":\"plain\","
                        "\"at\":\"2026-12-02T10:00:00.123456Z\",\"real\":1.5,\"none\":null,"
                        "\"doc\":{\"a\":[1,2]},\"dec\":\"12.50\"}\n"
                        "{\"id\":9,\"bin\":\"abc\",\"txt\":\"tab\\there\","
                        "\"at\":\"2026-12-02T10:00:01Z\",\"real\":-2.0,\"none\":\"x\","
                        "\"doc\":[],\"dec\":\"0.00\"}\n");
    txo_archive_file_release(&file);
    txo_free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pass_archives_each_row_once_then_deletes_it),
        cmocka_unit_test(test_verify_catches_a_truncated_and_an_edited_file),
        cmocka_unit_test(test_a_nul_in_a_value_keeps_the_file_readable),
        cmocka_unit_test(test_verify_catches_a_damaged_inbox_file),
        cmocka_unit_test(test_an_event_recorded_again_is_not_deleted_with_its_old_file),
        cmocka_unit_test(test_files_named_by_sequence),
        cmocka_unit_test(test_values_of_each_type),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), testarchive_setup, testarchive_teardown, NULL,
                        NULL);
}
