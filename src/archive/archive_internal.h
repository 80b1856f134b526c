/*
 * Shared between the archive's files (src/archive/): the names of the column types as the
 * header writes them, and what the writer and the reader of files named by sequence must agree
 * on (archive_seq.c): the name, and the order and uniqueness of the rows' keys.
 */
#ifndef TXO_ARCHIVE_INTERNAL_H
#define TXO_ARCHIVE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/archive.h"

#define TXO__ARCHIVE_SUFFIX ".jsonl.gz"

/* "YYYYMMDDTHHMMSSZ" and its NUL. */
#define TXO__ARCHIVE_STAMP_LEN 17

/* "int", "real", "text", "binary", "json" or "time". */
const char *txo__archive_type_name(enum txo_archive_type type);

/* The type named s; false when s names none. */
bool txo__archive_type_parse(const char *s, enum txo_archive_type *out);

/*
 * The stamp a file named by sequence carries: time ("YYYY-MM-DD HH:MM:SS[.ffffff]" as the
 * server sends it, or the RFC 3339 form the file holds) to the second, "YYYYMMDDTHHMMSSZ".
 * False when time is not such a time.
 */
bool txo__archive_stamp(const char *time, char out[TXO__ARCHIVE_STAMP_LEN]);

/* "<table>.<seq, 10 digits>.<stamp>.jsonl.gz" into out; false when it does not fit. */
bool txo__archive_seq_name(char *out, size_t out_size, const char *table, uint64_t seq,
                           const char *stamp);

/* True, with *seq, when name is a file of table named by sequence. */
bool txo__archive_seq_of(const char *name, const char *table, uint64_t *seq);

/* Two rows of a file named by sequence in order: by time, then by key bytes (a prefix first,
 * as the database orders a VARBINARY). Negative, 0 or positive. */
int txo__archive_row_cmp(int64_t a_us, const struct txo_archive_key *a, int64_t b_us,
                         const struct txo_archive_key *b);

/* Whether two of the n keys are equal, into *dup (the index of one of them when so).
 * Errors: TXO_ENOMEM. */
int txo__archive_key_twice(const struct txo_archive_key *keys, size_t n, bool *twice, size_t *dup);

#endif
