/*
 * The binary log's row images decoded without a server (src/db/binlog_rows.c): a table map
 * and images built byte by byte as MariaDB writes them, for a table with the outbox's kinds of
 * columns (BIGINT, an ENUM, a VARCHAR with a two-byte length, LONGTEXT, DATETIME(6), INT,
 * TEXT, a DECIMAL that is only skipped, a TINYINT):
 *   - every wanted column's text is what a query returns for it, NULL stays NULL, is_set
 *     gives "1"/"0";
 *   - of an update event only a row whose ENUM moved FAILED -> PENDING is kept, from its
 *     after image;
 *   - an image cut short, a column the map lacks, a type the decoder does not read, a map
 *     without names and images without a wanted column are refused with the reason.
 * The end-to-end path (a real server's log) is tests/integration/test_relay_binlog_publish.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "db/binlog_rows.h"
#include "txo/db.h"

enum { T_TINY = 1, T_LONG = 3, T_LONGLONG = 8, T_VARCHAR = 15, T_DATETIME2 = 18 };
enum { T_NEWDECIMAL = 246, T_ENUM = 247, T_BLOB = 252, T_STRING = 254 };

/* id, status, aggregate_id, payload, created_at, attempts, last_error, price, tiny */
static const unsigned char types[] = {T_LONGLONG, T_STRING, T_VARCHAR,    T_BLOB, T_DATETIME2,
                                      T_LONG,     T_BLOB,   T_NEWDECIMAL, T_TINY};
static const unsigned char meta[] = {T_ENUM, 1, 0xfc, 0x03, 4, 6, 2, 10, 2};
static const char names[] = "\x02id\x06status\x0c"
                            "aggregate_id\x07payload\x0a"
                            "created_at\x08"
                            "attempts\x0alast_error\x05price\x04tiny";
static const char enums[] = "\x05\x07PENDING\x0aPROCESSING\x09PUBLISHED\x06"
                            "FAILED\x07SKIPPED";

static struct txo__binlog_map outbox_map(void)
{
    return (struct txo__binlog_map){
        .columns = sizeof(types),
        .types = types,
        .types_len = sizeof(types),
        .meta = meta,
        .meta_len = sizeof(meta),
        .names = (const unsigned char *)names,
        .names_len = sizeof(names) - 1,
        .enums = (const unsigned char *)enums,
        .enums_len = sizeof(enums) - 1,
    };
}

static const struct txo__binlog_column wanted[] = {
    {"id", false},       {"aggregate_id", false}, {"payload", false}, {"created_at", false},
    {"attempts", false}, {"last_error", true},    {"tiny", false},    {"last_error", false},
};
static const struct txo__binlog_requeue replay = {"status", "FAILED", "PENDING"};
static const unsigned char all_present[] = {0xff, 0x01};

struct buf {
    unsigned char b[512];
    size_t n;
};

static void put(struct buf *b, const void *p, size_t n)
{
    assert_true(b->n + n <= sizeof(b->b));
    memcpy(b->b + b->n, p, n);
    b->n += n;
}

static void put_le(struct buf *b, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        b->b[b->n++] = (unsigned char)(v >> (8 * i));
}

static void put_be(struct buf *b, uint64_t v, size_t n)
{
    for (size_t i = n; i-- > 0;)
        b->b[b->n++] = (unsigned char)(v >> (8 * i));
}

/* One image with every column present; last_error NULL unless given. */
static void image(struct buf *b, int64_t id, unsigned status, const char *agg,
                  const char *last_error)
{
    put_le(b, last_error == NULL ? 1u << 6 : 0, 2); /* the null bitmap of 9 columns */
    put_le(b, (uint64_t)id, 8);
    put_le(b, status, 1);
    put_le(b, strlen(agg), 2);
    put(b, agg, strlen(agg));
    const char *payload = "{\"a\": 1}";
    put_le(b, strlen(payload), 4);
    put(b, payload, strlen(payload));
    /* 2026-12-03 01:02:03.456789 */
    uint64_t ymd = (uint64_t)(2026 * 13 + 12) << 5 | 3, hms = 1u << 12 | 2u << 6 | 3;
    put_be(b, (ymd << 17 | hms) + UINT64_C(0x8000000000), 5);
    put_be(b, 456789, 3);
    put_le(b, 0, 4);
    if (last_error != NULL) {
        put_le(b, strlen(last_error), 2);
        put(b, last_error, strlen(last_error));
    }
    put(b, "\x80\x00\x00\x01\x02", 5); /* DECIMAL(10,2): 4 + 1 bytes, never read */
    put_le(b, 0xfb, 1);                /* -5 */
}

static void expect(const struct txo_rows *rows, size_t r, size_t c, const char *want)
{
    size_t len = 0;
    const char *v = txo_rows_str(rows, r, c, &len);
    if (want == NULL) {
        if (v != NULL)
            fail_msg("row %zu column %zu: %s, want NULL", r, c, v);
        return;
    }
    if (v == NULL || len != strlen(want) || memcmp(v, want, len) != 0)
        fail_msg("row %zu column %zu: %s, want %s", r, c, v != NULL ? v : "NULL", want);
}

static void decoder(struct txo__binlog_decoder *d, const struct txo__binlog_map *m)
{
    struct txo_error err;
    txo_error_init(&err);
    assert_int_equal(txo__binlog_decoder_init(d, "appdb.outbox_events", wanted,
                                              TXO_ARRAY_LEN(wanted), &replay, &err),
                     0);
    if (txo__binlog_decoder_map(d, m, &err) < 0)
        fail_msg("map: %s", err.msg);
}

static void test_insert_values(void **state)
{
    (void)state;
    struct txo__binlog_map m = outbox_map();
    struct txo__binlog_decoder d;
    decoder(&d, &m);
    struct buf b = {.n = 0};
    image(&b, 42, 1, "caf\xc3\xa9", NULL);
    image(&b, 43, 1, "o-2", "boom");
    struct txo_rows *rows = txo__rows_new(TXO_ARRAY_LEN(wanted));
    size_t n = 0;
    struct txo_error err;
    txo_error_init(&err);
    if (txo__binlog_decoder_rows(&d, &m, all_present, NULL, b.b, b.n, rows, &n, &err) < 0)
        fail_msg("rows: %s", err.msg);
    assert_int_equal(n, 2);
    assert_int_equal(txo_rows_count(rows), 2);
    expect(rows, 0, 0, "42");
    expect(rows, 0, 1, "caf\xc3\xa9");
    expect(rows, 0, 2, "{\"a\": 1}");
    expect(rows, 0, 3, "2026-12-03 01:02:03.456789");
    expect(rows, 0, 4, "0");
    expect(rows, 0, 5, "0");
    expect(rows, 0, 6, "-5");
    expect(rows, 0, 7, NULL);
    expect(rows, 1, 0, "43");
    expect(rows, 1, 5, "1");
    expect(rows, 1, 7, "boom");
    txo_rows_free(rows);
    txo__binlog_decoder_release(&d);
}

static void test_update_keeps_a_replay_only(void **state)
{
    (void)state;
    struct txo__binlog_map m = outbox_map();
    struct txo__binlog_decoder d;
    decoder(&d, &m);
    struct buf b = {.n = 0};
    image(&b, 7, 4, "a", "refused"); /* FAILED -> PENDING: a replay */
    image(&b, 7, 1, "a", "refused");
    image(&b, 8, 1, "b", NULL); /* PENDING -> PUBLISHED: passed over */
    image(&b, 8, 3, "b", NULL);
    image(&b, 9, 4, "c", "x"); /* FAILED -> SKIPPED: passed over */
    image(&b, 9, 5, "c", "x");
    struct txo_rows *rows = txo__rows_new(TXO_ARRAY_LEN(wanted));
    size_t n = 0;
    struct txo_error err;
    txo_error_init(&err);
    if (txo__binlog_decoder_rows(&d, &m, all_present, all_present, b.b, b.n, rows, &n, &err) < 0)
        fail_msg("rows: %s", err.msg);
    assert_int_equal(n, 1);
    expect(rows, 0, 0, "7");
    expect(rows, 0, 5, "1");
    txo_rows_free(rows);
    txo__binlog_decoder_release(&d);
}

static void test_refusals(void **state)
{
    (void)state;
    struct txo__binlog_map m = outbox_map();
    struct txo__binlog_decoder d;
    decoder(&d, &m);
    struct txo_error err;
    txo_error_init(&err);

    /* An image cut short: the whole rows before it stay, the cut one does not. */
    struct buf b = {.n = 0};
    image(&b, 1, 1, "a", NULL);
    size_t whole = b.n;
    image(&b, 2, 1, "b", NULL);
    struct txo_rows *rows = txo__rows_new(TXO_ARRAY_LEN(wanted));
    size_t n = 0;
    for (size_t cut = whole + 1; cut < b.n; cut += 7) {
        assert_int_equal(
            txo__binlog_decoder_rows(&d, &m, all_present, NULL, b.b, cut, rows, &n, &err),
            TXO_EINVAL);
        assert_int_equal(n, 1);
    }
    txo_rows_free(rows);

    /* A wanted column left out of the images. */
    static const unsigned char no_payload[] = {0xf7, 0x01};
    rows = txo__rows_new(TXO_ARRAY_LEN(wanted));
    assert_int_equal(txo__binlog_decoder_rows(&d, &m, no_payload, NULL, b.b, b.n, rows, &n, &err),
                     TXO_ECONFIG);
    assert_non_null(strstr(err.msg, "binlog_row_image=FULL"));
    txo_rows_free(rows);
    txo__binlog_decoder_release(&d);

    /* A column the table lacks; a DECIMAL asked for; a map without names. */
    static const struct txo__binlog_column missing[] = {{"id", false}, {"sequence", false}};
    static const struct txo__binlog_column decimal[] = {{"price", false}};
    assert_int_equal(txo__binlog_decoder_init(&d, "t", missing, 2, NULL, &err), 0);
    assert_int_equal(txo__binlog_decoder_map(&d, &m, &err), TXO_ECONFIG);
    assert_non_null(strstr(err.msg, "no column sequence"));
    txo__binlog_decoder_release(&d);
    assert_int_equal(txo__binlog_decoder_init(&d, "t", decimal, 1, NULL, &err), 0);
    assert_int_equal(txo__binlog_decoder_map(&d, &m, &err), TXO_ECONFIG);
    assert_non_null(strstr(err.msg, "price"));
    struct txo__binlog_map nameless = m;
    nameless.names_len = 0;
    assert_int_equal(txo__binlog_decoder_map(&d, &nameless, &err), TXO_ECONFIG);
    assert_non_null(strstr(err.msg, "binlog_row_metadata=FULL"));
    txo__binlog_decoder_release(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_insert_values),
        cmocka_unit_test(test_update_keeps_a_replay_only),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
