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
#include "testproc.h"
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
             "idempotency_key, status, attempts, next_attempt_at, last_error, published_time) "
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

size_t testarchive_inbox_key(const char *prefix, unsigned i, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s%s:%u", i % 3 == 0 ? "\xfe" : "", prefix, i);
    assert_true(n > 0 && (size_t)n + 3 <= cap);
    size_t len = (size_t)n;
    if (i % 3 != 0 && i % 5 == 0) {
        out[len++] = '\0';
        out[len++] = 'x';
        out[len] = '\0';
    }
    return len;
}

void testarchive_insert_inbox(struct txo_db *db, unsigned n, const char *prefix)
{
    for (unsigned i = 1; i <= n; i++) {
        char key[64], payload[256], processed[64], created[64];
        size_t key_len = testarchive_inbox_key(prefix, i, key, sizeof(key));
        snprintf(payload, sizeof(payload), PAYLOAD_FMT, i);
        snprintf(processed, sizeof(processed), "2020-03-04 05:06:07.%06u", (i + 1) / 2);
        snprintf(created, sizeof(created), "2020-03-04 00:00:00.%06u", i);
        struct txo_param p[] = {txo_p_strn(key, key_len), txo_p_str(payload), txo_p_str(processed),
                                txo_p_str(created)};
        exec(db,
             "INSERT INTO inbox_events (event_id, event_type, payload, processed_at, created_at) "
             "VALUES (?, 'InEvt', ?, ?, ?)",
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

/* s[0..len) in base64 (RFC 4648, padded) into out. */
static void base64(const unsigned char *s, size_t len, char *out, size_t cap)
{
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t k = 0;
    assert_true(4 * ((len + 2) / 3) < cap);
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)s[i + 1] << 8;
        if (i + 2 < len)
            v |= s[i + 2];
        out[k++] = digits[(v >> 18) & 63];
        out[k++] = digits[(v >> 12) & 63];
        out[k++] = i + 1 < len ? digits[(v >> 6) & 63] : '=';
        out[k++] = i + 2 < len ? digits[v & 63] : '=';
    }
    out[k] = '\0';
}

unsigned testarchive_expect_inbox_row(const char *prefix, const char *line, size_t len)
{
    json_t *row = json_loadb(line, len, JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, NULL);
    if (!json_is_object(row))
        fail_msg("not a JSON object: %.*s", (int)len, line);
    assert_int_equal(json_object_size(row), 5); /* every column of inbox_events */
    const json_t *n = json_object_get(json_object_get(row, "payload"), "n");
    if (!json_is_real(n) || json_real_value(n) < 1)
        fail_msg("no row index in the payload: %.*s", (int)len, line);
    unsigned i = (unsigned)json_real_value(n);
    char buf[256], key[64], b64[128];
    snprintf(buf, sizeof(buf), PAYLOAD_FMT, i);
    expect_payload(row, buf);
    assert_true(contains(line, len, BIG_IN_LINE));
    assert_null(memchr(line, '\n', len));

    /* The event id as the format says: a string when UTF-8, else its bytes in base64. */
    size_t key_len = testarchive_inbox_key(prefix, i, key, sizeof(key));
    const json_t *id = json_object_get(row, "event_id");
    if (i % 3 == 0) {
        base64((const unsigned char *)key, key_len, b64, sizeof(b64));
        if (json_object_size(id) != 1)
            fail_msg("event_id of row %u: want {\"base64\": ...}", i);
        expect_str(id, "base64", b64);
    } else if (!json_is_string(id) || json_string_length(id) != key_len ||
               memcmp(json_string_value(id), key, key_len) != 0) {
        fail_msg("event_id of row %u is not %s (%zu bytes)", i, key, key_len);
    }
    expect_str(row, "event_type", "InEvt");
    snprintf(buf, sizeof(buf), "2020-03-04T05:06:07.%06uZ", (i + 1) / 2);
    expect_str(row, "processed_at", buf);
    snprintf(buf, sizeof(buf), "2020-03-04T00:00:00.%06uZ", i);
    expect_str(row, "created_at", buf);
    json_decref(row);
    return i;
}

static int compare_ids(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Calls fn(file, arg) for each archive file of table under dir, each read and verified. */
static void each_file(const char *dir, const char *table,
                      void (*fn)(const struct txo_archive_file *f, void *arg), void *arg)
{
    char sub[512];
    snprintf(sub, sizeof(sub), "%s/%s", dir, table);
    DIR *d = opendir(sub);
    if (d == NULL)
        return;
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
        fn(&f, arg);
        txo_archive_file_release(&f);
    }
    closedir(d);
}

struct id_list {
    int64_t *ids;
    size_t n;
};

static void add_ids(const struct txo_archive_file *f, void *arg)
{
    struct id_list *l = arg;
    l->ids = realloc(l->ids, (l->n + f->n_rows) * sizeof(*l->ids));
    assert_non_null(l->ids);
    memcpy(l->ids + l->n, f->ids, f->n_rows * sizeof(*l->ids));
    l->n += f->n_rows;
}

size_t testarchive_ids(const char *dir, const char *table, int64_t **ids)
{
    struct id_list l = {NULL, 0};
    each_file(dir, table, add_ids, &l);
    if (l.n > 1)
        qsort(l.ids, l.n, sizeof(*l.ids), compare_ids);
    *ids = l.ids;
    return l.n;
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

static int compare_keys(const void *a, const void *b)
{
    const struct testarchive_key *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = n > 0 ? memcmp(x->bytes, y->bytes, n) : 0;
    return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

static void keys_add(struct testarchive_keys *k, const char *bytes, size_t len)
{
    k->keys = realloc(k->keys, (k->n + 1) * sizeof(*k->keys));
    assert_non_null(k->keys);
    char *copy = malloc(len + 1);
    assert_non_null(copy);
    if (len > 0)
        memcpy(copy, bytes, len);
    k->keys[k->n++] = (struct testarchive_key){copy, len};
}

static void add_keys(const struct txo_archive_file *f, void *arg)
{
    assert_int_equal(f->version, TXO_ARCHIVE_VERSION_SEQ);
    for (size_t r = 0; r < f->n_rows; r++)
        keys_add(arg, f->keys[r].bytes, f->keys[r].len);
}

void testarchive_file_keys(const char *dir, struct testarchive_keys *out)
{
    memset(out, 0, sizeof(*out));
    each_file(dir, "inbox_events", add_keys, out);
    if (out->n > 1)
        qsort(out->keys, out->n, sizeof(*out->keys), compare_keys);
}

void testarchive_db_keys(struct txo_db *db, const char *where, struct testarchive_keys *out)
{
    memset(out, 0, sizeof(*out));
    char sql[512];
    snprintf(sql, sizeof(sql), "SELECT event_id FROM inbox_events WHERE %s", where);
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_query(db, sql, NULL, 0, &rows, &err) < 0)
        fail_msg("%s: %s", sql, err.msg);
    for (size_t r = 0; r < txo_rows_count(rows); r++) {
        size_t len = 0;
        const char *key = txo_rows_str(rows, r, 0, &len);
        keys_add(out, key, len);
    }
    txo_rows_free(rows);
    if (out->n > 1)
        qsort(out->keys, out->n, sizeof(*out->keys), compare_keys);
}

void testarchive_expect_keys(const struct testarchive_keys *got,
                             const struct testarchive_keys *want)
{
    if (got->n != want->n)
        fail_msg("%zu event ids archived, want %zu", got->n, want->n);
    for (size_t i = 0; i < got->n; i++)
        if (compare_keys(&got->keys[i], &want->keys[i]) != 0)
            fail_msg("archived event id #%zu is %.*s, want %.*s (each row in exactly one file)", i,
                     (int)got->keys[i].len, got->keys[i].bytes, (int)want->keys[i].len,
                     want->keys[i].bytes);
}

void testarchive_keys_free(struct testarchive_keys *k)
{
    for (size_t i = 0; i < k->n; i++)
        free(k->keys[i].bytes);
    free(k->keys);
    memset(k, 0, sizeof(*k));
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

void testarchive_expect_verified(const char *dir, const char *summary)
{
    const char *verify[] = {"archive", "verify", dir, NULL};
    char *out = NULL;
    int status = testproc_run_txo("archive_verify", verify, 30000, &out);
    if (status != 0 || (summary != NULL && strstr(out, summary) == NULL))
        fail_msg("txo archive verify %s: exit status %d, want 0%s%s; it said:\n%s", dir, status,
                 summary != NULL ? " and " : "", summary != NULL ? summary : "", out);
    free(out);
}
