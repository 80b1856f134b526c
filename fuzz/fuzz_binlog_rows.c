/*
 * libFuzzer harness of the binary log's row-image decoder (src/db/binlog_rows.c), the part of
 * the binlog source that reads bytes a server (or whatever answers on its port) wrote. The
 * input is a table map and a row event:
 *   byte 0        the column count, 1..24 (taken modulo 24, plus one)
 *   byte 1        which columns are asked for (bit k: column k, as text; bit 7: the last
 *                 one asked for as is_set), and bit 6 of byte 2: an update event
 *   byte 2        the length of the ENUM values blob (low 6 bits)
 *   then          the column types (one byte each), twice as many metadata bytes, the ENUM
 *                 values blob, the columns-present bitmap (and the after bitmap of an
 *                 update), and the rest: the images.
 * Columns are named c0, c1, ...; the requeue rule is on c1 (FAILED -> PENDING). Whatever the
 * bytes, the decoder must not read outside them, and an accepted event must leave as many
 * whole rows as it says, each cell readable.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "db/binlog_rows.h"
#include "txo/txo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok)
{
    if (!ok)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    uint32_t columns = data[0] % 24 + 1;
    unsigned want = data[1];
    bool update = (data[2] & 0x40) != 0;
    size_t enums_len = data[2] & 0x3f;
    size_t bitmap = (columns + 7) / 8;
    size_t head = 3 + columns + 2 * (size_t)columns + enums_len + bitmap * (update ? 2 : 1);
    if (size < head)
        return 0;
    const uint8_t *types = data + 3, *meta = types + columns, *enums = meta + 2 * columns;
    const uint8_t *present = enums + enums_len, *after = update ? present + bitmap : NULL;

    unsigned char names[24 * 4];
    size_t names_len = 0;
    char name_store[24][4];
    struct txo__binlog_column cols[8];
    size_t n_cols = 0;
    for (uint32_t c = 0; c < columns; c++) {
        int n = snprintf(name_store[c], sizeof(name_store[c]), "c%u", c);
        names[names_len++] = (unsigned char)n;
        memcpy(names + names_len, name_store[c], (size_t)n);
        names_len += (size_t)n;
        if (c < 7 && (want >> c) & 1)
            cols[n_cols++] = (struct txo__binlog_column){name_store[c], false};
    }
    if (n_cols == 0)
        cols[n_cols++] = (struct txo__binlog_column){name_store[0], false};
    if (want & 0x80)
        cols[n_cols - 1].is_set = true;

    struct txo__binlog_map m = {
        .columns = columns,
        .types = types,
        .types_len = columns,
        .meta = meta,
        .meta_len = 2 * (size_t)columns,
        .names = names,
        .names_len = names_len,
        .enums = enums,
        .enums_len = enums_len,
    };
    static const struct txo__binlog_requeue rule = {"c1", "FAILED", "PENDING"};
    struct txo__binlog_decoder d;
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo__binlog_decoder_init(&d, "fuzz.t", cols, n_cols, columns > 1 ? &rule : NULL, &err);
    check(rc == 0);
    if (txo__binlog_decoder_map(&d, &m, &err) == 0) {
        struct txo_rows *rows = txo__rows_new(n_cols);
        check(rows != NULL);
        size_t n = 0;
        rc = txo__binlog_decoder_rows(&d, &m, present, after, data + head, size - head, rows, &n,
                                      &err);
        check(rc == 0 || err.msg[0] != '\0');
        check(txo_rows_count(rows) == n);
        for (size_t r = 0; r < n; r++)
            for (size_t c = 0; c < n_cols; c++) {
                size_t len = 0;
                const char *v = txo_rows_str(rows, r, c, &len);
                check(v == NULL || strlen(v) <= len);
            }
        txo_rows_free(rows);
    } else {
        check(err.msg[0] != '\0');
    }
    txo__binlog_decoder_release(&d);
    return 0;
}
