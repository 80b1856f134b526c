/*
 * The binary log's row images decoded into text rows (src/db/binlog_rows.c): the part of the
 * binlog reader (db_binlog.c) that reads bytes the server wrote, kept apart so that it is
 * tested and fuzzed (fuzz/fuzz_binlog_rows.c) without a server. Private to the library.
 *
 * Thread-safety: a decoder is used by one thread.
 */
#ifndef TXO_DB_BINLOG_ROWS_H
#define TXO_DB_BINLOG_ROWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db/binlog_stream.h"
#include "db/rows_build.h"

/* The little-endian unsigned of n (at most 8) bytes at p: the log's integers. */
uint64_t txo__binlog_le(const unsigned char *p, size_t n);

/* A TABLE_MAP event's parts: column types (one byte each), their metadata, and the optional
 * metadata of binlog_row_metadata=FULL: the names (each prefixed by its length) and the ENUM
 * values (for each ENUM column, its count of values, then each as a length-encoded string). */
struct txo__binlog_map {
    uint32_t columns;
    const unsigned char *types;
    size_t types_len;
    const unsigned char *meta;
    size_t meta_len;
    const unsigned char *names;
    size_t names_len;
    const unsigned char *enums;
    size_t enums_len;
};

/* What a stream decodes, and where it is in the current table map. */
struct txo__binlog_decoder {
    char what[140]; /* "schema.table", for messages */
    struct txo__binlog_column cols[TXO__BINLOG_COLS_MAX];
    char *names[TXO__BINLOG_COLS_MAX];
    size_t n_cols;
    long at[TXO__BINLOG_COLS_MAX]; /* each column's index in the map */
    bool mapped;
    /* The requeue rule (rule.column NULL: none), its column's index (-1: none), and how its
     * values compare: an ENUM's indexes, or a string after its length prefix (1: from, 2: to). */
    struct txo__binlog_requeue rule;
    char *rule_strs[3];
    long rule_at;
    bool rule_enum;
    size_t rule_prefix;
    unsigned rule_from, rule_to;
};

/* A decoder of cols[0..n_cols) (copied) and the requeue rule (copied; NULL: none).
 * Errors: TXO_EINVAL (no columns, or too many), TXO_ENOMEM. Release it in any case. */
int txo__binlog_decoder_init(struct txo__binlog_decoder *d, const char *what,
                             const struct txo__binlog_column *cols, size_t n_cols,
                             const struct txo__binlog_requeue *requeue, struct txo_error *err);
void txo__binlog_decoder_release(struct txo__binlog_decoder *d);

/*
 * Finds the columns in a new table map of the table. Errors: TXO_ECONFIG (no names: not FULL
 * metadata; a column missing or of a type the decoder does not read; the rule's ENUM values not
 * there), TXO_EINVAL (a map too short for its columns).
 */
int txo__binlog_decoder_map(struct txo__binlog_decoder *d, const struct txo__binlog_map *m,
                            struct txo_error *err);

/*
 * Appends to out the rows of a row event of the mapped table: present is the bitmap of the
 * columns its images carry; data[0..len) the images. present_after NULL: a WRITE_ROWS event,
 * every image is a row. Else an UPDATE_ROWS event: images come in pairs (before, with the
 * columns of present; after, with those of present_after), and only the after image of a row
 * whose rule column moved from rule.from to rule.to is a row. *n_rows: the rows appended.
 * Errors: TXO_ECONFIG (a column left out of the images), TXO_EINVAL (an image this decoder
 * cannot read: the rows of the event appended before it stay), TXO_ENOMEM.
 */
int txo__binlog_decoder_rows(const struct txo__binlog_decoder *d, const struct txo__binlog_map *m,
                             const unsigned char *present, const unsigned char *present_after,
                             const unsigned char *data, size_t len, struct txo_rows *out,
                             size_t *n_rows, struct txo_error *err);

#endif
