/*
 * Rows with known values for the retention archive tests (testarchive.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>

#include "testarchive.h"
#include "testchild.h"
#include "txo/archive.h"
#include "txo/txo.h"

/* A JSON payload as an application writes it, spaces and a newline in it, and an integer past
 * 64 bits that the archive must keep digit for digit. */
#define PAYLOAD_FMT                                                                                \
    "{ \"n\" : %u, \"note\": \"line\\nbreak \\\"q\\\" \xc3\xa9\",\n \"big\": "                     \
    "123456789012345678901234 }"
#define BIG_IN_LINE "\"big\":123456789012345678901234"

static void exec(struct txo_db *db, const char *sql, const struct txo_param *p, size_t n)
{
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_exec(db, sql, p, n, NULL, &err) < 0)
        fail_msg("%s: %s", sql, err.msg);
}

void testarchive_insert_outbox(struct txo_db *db, unsigned n, const char *prefix)
{
    for (unsigned i = 1; i <= n; i++) {
        char payload[256], key[64], at[64], error[64];
        snprintf(payload, sizeof(payload), PAYLOAD_FMT, i);
        snprintf(key, sizeof(key), "%s:%u", prefix, i);
        snprintf(at, sizeof(at), "2020-01-02 03:04:05.%06u", i);
        snprintf(error, sizeof(error), "boom\n%u", i);
        struct txo_param p[] = {txo_p_i64(i),   txo_p_str(payload),
                                txo_p_str(key), txo_p_i64(i % 3),
                                txo_p_str(at),  i % 2 == 0 ? txo_p_str(error) : txo_p_null(),
                                txo_p_str(at)};
        exec(db,
             "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "
             "idempotency_key, status, attempts, next_attempt_at, last_error, published_at) "
             "VALUES ('order', ?, 'Evt', ?, ?, 'PUBLISHED', ?, ?, ?, ?)",
             p, TXO_ARRAY_LEN(p));
    }
}

void testarchive_insert_dead_letters(struct txo_db *db, unsigned n, const char *prefix)
{
    for (unsigned i = 1; i <= n; i++) {
        char payload[64], error[64], at[64];
        snprintf(payload, sizeof(payload), "{\"d\": %u, \"s\": \"x y\"}", i);
        snprintf(error, sizeof(error), "%s:%u\tfailed", prefix, i);
        snprintf(at, sizeof(at), "2020-02-03 04:05:06.%06u", i);
        struct txo_param p[] = {i % 2 == 1 ? txo_p_null() : txo_p_i64(1000 + i), txo_p_str(payload),
                                txo_p_str(error), txo_p_str(at)};
        exec(db,
             "INSERT INTO dead_letter_events (source_event_id, event_type, payload, error, "
             "replayed_at, replay_count) VALUES (?, 'Dead', ?, ?, ?, 1)",
             p, TXO_ARRAY_LEN(p));
    }
}

static bool contains(const char *s, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(s + i, needle, n) == 0)
            return true;
    return false;
}

static void expect_str(const json_t *row, const char *name, const char *want)
{
    const json_t *v = json_object_get(row, name);
    if (want == NULL) {
        if (!json_is_null(v))
            fail_msg("%s: want null", name);
        return;
    }
    if (!json_is_string(v) || strcmp(json_string_value(v), want) != 0)
        fail_msg("%s: got %s, want %s", name, json_is_string(v) ? json_string_value(v) : "?", want);
}

static void expect_int(const json_t *row, const char *name, int64_t want)
{
    const json_t *v = json_object_get(row, name);
    /* A line with an integer past 64 bits is parsed with every integer as a double. */
    if (json_is_real(v) ? json_real_value(v) != (double)want : json_integer_value(v) != want)
        fail_msg("%s: want %lld", name, (long long)want);
}

static unsigned index_after_colon(const char *s)
{
    const char *colon = s != NULL ? strchr(s, ':') : NULL;
    if (colon == NULL)
        fail_msg("no index in %s", s != NULL ? s : "(null)");
    return (unsigned)strtoul(colon + 1, NULL, 10);
}

static void expect_payload(const json_t *row, const char *text)
{
    json_t *want = json_loads(text, JSON_DECODE_INT_AS_REAL, NULL);
    assert_non_null(want);
    if (!json_equal(json_object_get(row, "payload"), want))
        fail_msg("payload differs from %s", text);
    json_decref(want);
}

void testarchive_expect_row(const char *table, const char *line, size_t len)
{
    json_t *row = json_loadb(line, len, JSON_DECODE_INT_AS_REAL, NULL);
    if (!json_is_object(row))
        fail_msg("not a JSON object: %.*s", (int)len, line);
    char buf[256];
    if (strcmp(table, "outbox_events") == 0) {
        unsigned i = index_after_colon(json_string_value(json_object_get(row, "idempotency_key")));
        snprintf(buf, sizeof(buf), PAYLOAD_FMT, i);
        expect_payload(row, buf);
        /* The big integer, digit for digit, and the row on one line. */
        assert_true(contains(line, len, BIG_IN_LINE));
        assert_null(memchr(line, '\n', len));
        expect_str(row, "aggregate_type", "order");
        expect_str(row, "event_type", "Evt");
        expect_str(row, "status", "PUBLISHED");
        expect_int(row, "attempts", i % 3);
        snprintf(buf, sizeof(buf), "boom\n%u", i);
        expect_str(row, "last_error", i % 2 == 0 ? buf : NULL);
        expect_str(row, "locked_by", NULL);
        snprintf(buf, sizeof(buf), "2020-01-02T03:04:05.%06uZ", i);
        expect_str(row, "published_at", buf);
        expect_str(row, "next_attempt_at", buf);
    } else {
        const char *error = json_string_value(json_object_get(row, "error"));
        unsigned i = index_after_colon(error);
        snprintf(buf, sizeof(buf), "{\"d\": %u, \"s\": \"x y\"}", i);
        expect_payload(row, buf);
        if (i % 2 == 1)
            assert_true(json_is_null(json_object_get(row, "source_event_id")));
        else
            expect_int(row, "source_event_id", 1000 + i);
        expect_str(row, "event_type", "Dead");
        snprintf(buf, sizeof(buf), "2020-02-03T04:05:06.%06uZ", i);
        expect_str(row, "replayed_at", buf);
        expect_int(row, "replay_count", 1);
    }
    json_decref(row);
}

static int compare_ids(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

size_t testarchive_ids(const char *dir, const char *table, int64_t **ids)
{
    char sub[512];
    snprintf(sub, sizeof(sub), "%s/%s", dir, table);
    *ids = NULL;
    size_t n = 0;
    DIR *d = opendir(sub);
    if (d == NULL)
        return 0;
    const struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", sub, e->d_name);
        struct txo_archive_file f;
        struct txo_error err;
        txo_error_init(&err);
        if (txo_archive_read(path, &f, &err) < 0)
            fail_msg("%s", err.msg);
        assert_string_equal(f.table, table);
        *ids = realloc(*ids, (n + f.n_rows) * sizeof(**ids));
        assert_non_null(*ids);
        memcpy(*ids + n, f.ids, f.n_rows * sizeof(**ids));
        n += f.n_rows;
        txo_archive_file_release(&f);
    }
    closedir(d);
    qsort(*ids, n, sizeof(**ids), compare_ids);
    return n;
}

size_t testarchive_db_ids(struct txo_db *db, const char *table, const char *where, int64_t **ids)
{
    char sql[512];
    snprintf(sql, sizeof(sql), "SELECT id FROM %s WHERE %s ORDER BY id", table, where);
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_query(db, sql, NULL, 0, &rows, &err) < 0)
        fail_msg("%s: %s", sql, err.msg);
    size_t n = txo_rows_count(rows);
    *ids = calloc(n + 1, sizeof(**ids));
    assert_non_null(*ids);
    for (size_t i = 0; i < n; i++)
        (*ids)[i] = txo_rows_i64(rows, i, 0);
    txo_rows_free(rows);
    return n;
}

void testarchive_expect_ids(const int64_t *got, size_t n_got, const int64_t *want, size_t n_want)
{
    if (n_got != n_want)
        fail_msg("%zu ids archived, want %zu", n_got, n_want);
    for (size_t i = 0; i < n_got; i++)
        if (got[i] != want[i])
            fail_msg("archived id #%zu is %lld, want %lld (each row in exactly one file)", i,
                     (long long)got[i], (long long)want[i]);
}

int testarchive_setup(void **state)
{
    struct testarchive_fixture *f =
        testdb_fixture_new(sizeof(*f), "archive", TESTDB_NEW_EXPORT_ENV);
    testchild_make_dir(f->dir, sizeof(f->dir), "txo-archive");
    *state = f;
    return 0;
}

int testarchive_teardown(void **state)
{
    struct testarchive_fixture *f = *state;
    testchild_remove_dir(f->dir);
    testdb_fixture_free(f);
    return 0;
}
