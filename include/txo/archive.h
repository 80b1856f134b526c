/*
 * The retention archive: a copy of every row the cleaner deletes, written before the delete
 * commits (txo/retention.h, `txo clean --archive DIR`), so that rows removed from
 * outbox_events, dead_letter_events and inbox_events can still be read and restored.
 *
 * Format (stable; docs/archive.md). One file per table and batch, a gzip stream of JSON lines,
 * each line one JSON object ending in "\n". A file is named in one of two ways:
 *   - by ids, for a table with an ascending integer id (the outbox, the dead letters):
 *     DIR/<table>/<table>.<first_id>-<last_id>.jsonl.gz, header version 1;
 *   - by sequence, for a table without one (the inbox, keyed by a string event id):
 *     DIR/<table>/<table>.<seq>.<stamp>.jsonl.gz, header version 2, where seq is 1 more than
 *     the table's newest file, zero-padded to 10 digits, and stamp the first row's time to the
 *     second in UTC, "YYYYMMDDTHHMMSSZ". The sequence comes first so that the names sort as
 *     text in the order the files were written, whatever the times in them.
 *   - Line 1, the header:
 *     {"txo_archive":1,"table":"outbox_events","columns":[{"name":"id","type":"int"},...],
 *      "id_column":"id","first_id":1,"last_id":500,"rows":500,"crc32":"89abcdef"}
 *     or, named by sequence:
 *     {"txo_archive":2,"table":"inbox_events","columns":[...],"key_column":"event_id",
 *      "time_column":"processed_at","seq":7,"first_time":"2026-12-02T10:00:00.000001Z",
 *      "last_time":"2026-12-02T10:05:00.5Z","rows":500,"crc32":"89abcdef"}
 *     columns lists every column of the table in its order, with its type in the archive:
 *     "int", "real", "text", "binary", "json" or "time". crc32 is the zlib CRC-32 of every
 *     line after the header, bytes as written, in lowercase hex.
 *   - Then one line per row, with every column by name: int columns as JSON integers, real as
 *     numbers, text as strings (DECIMAL too, to keep every digit), json columns as the JSON
 *     value they hold, binary as a string when it is UTF-8 and otherwise as {"base64":"..."},
 *     time columns as RFC 3339 UTC strings ("2026-12-02T10:00:00.123456Z"), SQL NULL as null.
 *     By ids: ascending by id_column. By sequence: ascending by time_column, then by the bytes
 *     of key_column (as the database orders a VARBINARY), no key twice, neither ever null.
 *
 * Crash safety: a file is written under a temporary name (a leading '.'), fsynced, renamed and
 * its directory fsynced, so a name ending in .jsonl.gz always holds a whole file. The cleaner
 * writes it before the DELETE of its rows commits; a crash in between leaves a complete file
 * whose rows are still in the table, and the next run deletes those rows (by the ids or keys
 * the newest file of the table lists) before it selects anything new, so no row lands in two
 * files.
 *
 * Thread-safety: no shared state. Two writers must not share a directory and table at once
 * (the cleaners of one database do not: run one `txo clean --archive` at a time).
 */
#ifndef TXO_ARCHIVE_H
#define TXO_ARCHIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/db.h"

/* The "txo_archive" member of the header of a file named by ids. */
#define TXO_ARCHIVE_VERSION 1
/* The "txo_archive" member of the header of a file named by sequence. */
#define TXO_ARCHIVE_VERSION_SEQ 2
/* The largest sequence number a file's name holds (10 digits). */
#define TXO_ARCHIVE_SEQ_MAX 9999999999ULL

/* How a column's values are written. */
enum txo_archive_type {
    TXO_ARCHIVE_INT = 0, /* integer types: JSON integers (BIGINT UNSIGNED past 2^63: a string) */
    TXO_ARCHIVE_REAL,    /* FLOAT, DOUBLE: JSON numbers */
    TXO_ARCHIVE_TEXT,    /* character types, ENUM, SET, DECIMAL, DATE, TIME: JSON strings */
    TXO_ARCHIVE_BINARY,  /* BINARY, VARBINARY, BLOB: a string, or {"base64":...} */
    TXO_ARCHIVE_JSON,    /* JSON columns: the value itself */
    TXO_ARCHIVE_TIME,    /* DATETIME, TIMESTAMP in UTC: RFC 3339 strings */
};

struct txo_archive_column {
    const char *name;
    enum txo_archive_type type;
};

/*
 * Checks that dir is an existing directory this process may create files in, so that a bad
 * --archive fails before anything is deleted. Errors: TXO_ECONFIG (with the path and reason).
 */
TXO_API TXO_MUST_CHECK int txo_archive_check_dir(const char *dir, struct txo_error *err);

/*
 * Reads the columns of table in the current database from information_schema, in order, with
 * their archive types; SELECT * returns them in this order. On success *out (free with
 * txo_archive_columns_free()) and *n are set. Errors: TXO_ENOTFOUND (no such table), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_archive_columns(struct txo_db *db, const char *table,
                                               struct txo_archive_column **out, size_t *n,
                                               struct txo_error *err);
/* Frees what txo_archive_columns() returned. NULL is a no-op. */
TXO_API void txo_archive_columns_free(struct txo_archive_column *cols, size_t n);

/*
 * Writes rows of a table with an integer id (every column of table, as cols describes them, in
 * that order; ascending by the integer column id_col; at least one row) as the file named by
 * ids, DIR/<table>/<table>.<first>-<last>.jsonl.gz, creating DIR/<table> when needed; durable
 * when it returns 0 (see the top of this file). A file of that name already there is replaced.
 * *path_out (may be NULL) receives the file's path, to free with txo_free(). Errors: TXO_EINVAL (no
 * rows, ids not ascending, a value its type cannot hold), TXO_EIO (the file system), TXO_ENOMEM. On
 * failure no file is left.
 */
TXO_API TXO_MUST_CHECK int txo_archive_write(const char *dir, const char *table,
                                             const struct txo_archive_column *cols, size_t n_cols,
                                             size_t id_col, const struct txo_rows *rows,
                                             char **path_out, struct txo_error *err);

/*
 * Writes rows of a table without an integer id (every column of table, as cols describes them,
 * in that order; at least one row) as the file named by sequence seq,
 * DIR/<table>/<table>.<seq>.<stamp>.jsonl.gz, creating DIR/<table> when needed; durable when
 * it returns 0, as txo_archive_write(). time_col is a TXO_ARCHIVE_TIME column and key_col a
 * TXO_ARCHIVE_BINARY or TXO_ARCHIVE_TEXT one; the rows ascend by time, then by the key's bytes
 * (`ORDER BY time_col, key_col` on a VARBINARY key), with no key twice and neither ever NULL.
 * seq is 1..TXO_ARCHIVE_SEQ_MAX, one more than txo_archive_last_seq() said. *path_out (may
 * be NULL) as txo_archive_write(). A file of that name already there is not replaced: only a
 * second writer in the directory can have written it (TXO_ECONFLICT). Errors: TXO_EINVAL (no
 * rows, a column of the wrong type, rows out of order, a key twice, a NULL key or time, seq
 * out of range, a value its type cannot hold), TXO_ECONFLICT, TXO_EIO, TXO_ENOMEM. On failure
 * no file is left (and one already there is kept).
 */
TXO_API TXO_MUST_CHECK int txo_archive_write_seq(const char *dir, const char *table,
                                                 const struct txo_archive_column *cols,
                                                 size_t n_cols, size_t key_col, size_t time_col,
                                                 uint64_t seq, const struct txo_rows *rows,
                                                 char **path_out, struct txo_error *err);

/*
 * The newest archive file of table under dir, or *path_out NULL when there is none. When the
 * table's files are named by sequence, the one with the highest sequence; by ids, the latest
 * modified (then the greatest name). *path_out is freed with txo_free().
 * Errors: TXO_EIO, TXO_ENOMEM.
 */
TXO_API TXO_MUST_CHECK int txo_archive_newest(const char *dir, const char *table, char **path_out,
                                              struct txo_error *err);

/*
 * The highest sequence among the files of table under dir that are named by sequence, 0 when
 * there is none, into *seq: the next file of the table gets one more.
 * Errors: TXO_EIO, TXO_ENOMEM.
 */
TXO_API TXO_MUST_CHECK int txo_archive_last_seq(const char *dir, const char *table, uint64_t *seq,
                                                struct txo_error *err);

/* The key of one row of a file named by sequence: its bytes, decoded from the JSON value. */
struct txo_archive_key {
    const char *bytes; /* not NUL-terminated; owned by the struct txo_archive_file */
    size_t len;
};

/*
 * A verified archive file in memory: header checked, every row line parsed with exactly the
 * header's columns, the rows in order (see the top of this file) and as the file's name and
 * header say, the count and the CRC-32 as the header says. version says which members are
 * set: ids and their range for a file named by ids, seq, keys and times for one named by
 * sequence; the others are NULL or 0.
 */
struct txo_archive_file {
    char *table;      /* from the header */
    char *lines;      /* the row lines, each ending in '\n' (the header left out) */
    size_t lines_len; /* bytes in lines */
    int64_t *ids;     /* named by ids: the id of each row, ascending */
    size_t n_rows;    /* rows in the file */
    int64_t first_id; /* named by ids: as in the name and the header */
    int64_t last_id;
    int version;                  /* TXO_ARCHIVE_VERSION or TXO_ARCHIVE_VERSION_SEQ */
    uint64_t seq;                 /* named by sequence: as in the name and the header */
    struct txo_archive_key *keys; /* named by sequence: the key of each row, in row order */
    int64_t *times_us; /* named by sequence: the time of each row, microseconds since the epoch */
    char *key_bytes;   /* what keys point into */
};

/*
 * Reads and verifies the file at path into *f. On failure f is left empty and err says what is
 * wrong with the file (one line, naming it). Release with txo_archive_file_release().
 * Errors: TXO_EIO (cannot read it, or the gzip stream is damaged or cut short), TXO_EINVAL
 * (not a valid archive), TXO_ENOMEM.
 */
TXO_API TXO_MUST_CHECK int txo_archive_read(const char *path, struct txo_archive_file *f,
                                            struct txo_error *err);
/* Frees the contents of f and empties it. Safe on an empty f. */
TXO_API void txo_archive_file_release(struct txo_archive_file *f);

#endif
