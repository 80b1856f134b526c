/*
 * Results built row by row (src/db/db_rows.c): how src/db fills a struct txo_rows from a
 * statement's result, and from the binary log's row images (binlog_rows.c). Private to the
 * library.
 */
#ifndef TXO_DB_ROWS_BUILD_H
#define TXO_DB_ROWS_BUILD_H

#include <stddef.h>

#include "txo/db.h"

/* An empty result of n_cols (> 0) columns; NULL when out of memory. Free: txo_rows_free(). */
struct txo_rows *txo__rows_new(size_t n_cols);

/* Appends a value (v NULL: SQL NULL) to the row being built; the row counts once its n_cols-th
 * value is in. Returns 0 or TXO_ENOMEM. */
int txo__rows_put(struct txo_rows *rows, const char *v, size_t len);

/* Keeps the first keep (<= the count) rows and forgets the rest, and a row left half built (a
 * row image that could not be read, a transaction the log never committed). */
void txo__rows_truncate(struct txo_rows *rows, size_t keep);

/* A new result holding rows [from, from + n) of src. Returns 0 or TXO_ENOMEM. */
int txo__rows_copy(const struct txo_rows *src, size_t from, size_t n, struct txo_rows **out);

/* Removes the first n rows (those after them, and a row being built, move to the front). */
void txo__rows_drop_head(struct txo_rows *rows, size_t n);

#endif
