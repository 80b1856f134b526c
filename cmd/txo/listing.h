/*
 * How the commands that list things print them (`txo stats`, `txo dlq list`, `txo saga show`,
 * `txo saga list --stuck`, `txo audit`): each builds its result once as a jansson document and
 * hands it here, to be printed either as JSON (--json: the document itself, one on stdout) or as
 * text tables for a person. The tables therefore show exactly what the JSON holds.
 *
 * A table has a header line, then one line per row; each column is as wide as its widest cell,
 * numbers are right-aligned, null shows as "-", and text longer than the column's max_width is
 * cut, ending in "…" (only in tables: the JSON always carries the whole value). Control
 * characters in text show as spaces, so that a row stays on one line. Widths count UTF-8
 * characters, not bytes.
 *
 * Not thread-safe (the commands print from their main thread); documents are borrowed.
 */
#ifndef TXO_CMD_LISTING_H
#define TXO_CMD_LISTING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "settings.h"

/* One column of a table, or one line of a record. */
struct listing_column {
    const char *key;    /* the member of each row object it shows */
    const char *header; /* "EVENT_ID" */
    size_t max_width;   /* longer text is cut to this many characters, "…" last; 0: never cut */
    bool optional;      /* left out of the table when no row has a value (not null) in it */
};

/* Prints rows, a JSON array of objects, as a table of cols. Members not in cols are not
 * shown; a member missing from a row shows as "-". */
void listing_table(FILE *out, const struct listing_column *cols, size_t n_cols, const json_t *rows);

/* Prints the members of obj named by cols, one per line: the header, padded to the widest
 * header, then the value, formatted as in a table cell. */
void listing_record(FILE *out, const struct listing_column *cols, size_t n_cols, const json_t *obj);

/*
 * Prints doc as one compact JSON document and a newline, keys in insertion order. Returns 0,
 * or -1 after a message on stderr naming cmd when doc is NULL (building it ran out of memory)
 * or cannot be written.
 */
int listing_json(FILE *out, const char *cmd, const json_t *doc);

/* Prints tables of doc for a person; arg is listing_print()'s. */
typedef void listing_tables_fn(const json_t *doc, void *arg);

/*
 * Prints a command's result document on stdout and frees it (json_decref): as JSON
 * (listing_json()) with json, or when doc is NULL (building it ran out of memory), else as the
 * tables tables(doc, arg) prints. Returns 0, or -1 when the JSON was not written.
 */
int listing_print(const char *cmd, json_t *doc, bool json, listing_tables_fn *tables, void *arg);

/* The columns of a document that is one table (an array of rows). */
struct listing_columns {
    const struct listing_column *cols;
    size_t n;
};

/* A listing_tables_fn: doc as one table of the columns arg (a struct listing_columns). */
void listing_rows(const json_t *doc, void *arg);

/* Appends --json (TXO_JSON): print the JSON document instead of tables. help says what the
 * document is ("one JSON array of the dead letters"). */
void listing_add_json_setting(struct settings_table *t, bool *json, const char *help);

/* A string, or JSON null for NULL. */
json_t *listing_str(const char *s);

#endif
