/*
 * The binary log read as a replication client (src/db/db_binlog.c), reduced to what the
 * relay's binlog source needs: the rows inserted into one table, decoded from the log's row
 * images into the columns the caller names (as text, as a query would return them), the
 * commits that end their transactions, and the positions to resume from. Private to the library;
 * the relay reaches the client library only through here (only src/db includes <mysql.h>).
 *
 * Thread-safety: one stream is driven by one thread. Ownership: the stream takes over the
 * connection of the txo_db it is opened on (a connection that sent COM_BINLOG_DUMP carries
 * nothing else); close the stream, then the db.
 */
#ifndef TXO_DB_BINLOG_STREAM_H
#define TXO_DB_BINLOG_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/db.h"

#define TXO__BINLOG_FILE_MAX 256 /* a binlog file name, with its NUL */
#define TXO__BINLOG_GTID_MAX 64  /* "domain-server-sequence", with its NUL */
#define TXO__BINLOG_COLS_MAX 32  /* columns a stream decodes */

enum txo__binlog_event_kind {
    TXO__BINLOG_NOTHING = 0, /* a heartbeat or an event of no interest: check the clock */
    TXO__BINLOG_INSERT,      /* n_rows rows inserted (or requeued) into the table, held until
                              * the commit */
    TXO__BINLOG_COMMIT,      /* the transaction of the inserts before it committed here: its
                              * rows joined the committed ones (txo__binlog_stream_take) */
};

/* Where the stream stands: the file and the offset of the next event, and the GTID of the
 * last transaction that began. */
struct txo__binlog_pos {
    char file[TXO__BINLOG_FILE_MAX];
    uint64_t offset;
    char gtid[TXO__BINLOG_GTID_MAX];
};

struct txo__binlog_event {
    enum txo__binlog_event_kind kind;
    size_t n_rows;       /* INSERT */
    int64_t timestamp_s; /* when the server wrote the event (0: heartbeat) */
};

/*
 * A column the stream decodes, found by name in the FULL row metadata of each table map (so a
 * column added while the stream runs is found at its new place). The value is the text a
 * query returns for it: integers in decimal (read as signed), "YYYY-MM-DD HH:MM:SS[.f...]"
 * for DATETIME(n), the bytes of CHAR, VARCHAR, BLOB, TEXT and MariaDB's JSON. Other types
 * (TIMESTAMP, ENUM, DECIMAL, ...) are refused when named. is_set: "1" or "0" for whether the
 * column is not NULL (its value unread, any type).
 */
struct txo__binlog_column {
    const char *name;
    bool is_set;
};

/*
 * An update the stream keeps as if it were an insert: a row whose column moved from `from` to
 * `to` (the relay: a dead letter replayed, status FAILED -> PENDING); its after image is read.
 * The column is an ENUM (its values found in the FULL row metadata) or a string.
 */
struct txo__binlog_requeue {
    const char *column, *from, *to;
};

struct txo__binlog_stream;

/*
 * Starts reading db's binary log at start (file and offset), keeping the inserted rows of
 * schema.table, and the updated ones requeue names (copied; NULL: none), decoded into
 * cols[0..n_cols) (copied; at most TXO__BINLOG_COLS_MAX). The server
 * sends a heartbeat after heartbeat_ms without events, so txo__binlog_stream_next() returns
 * at least that often. server_id: the id this client registers with (unique among the
 * server's replicas). Errors: TXO_ECONFIG (the server refused the dump: a purged file, no
 * grant), TXO_ECONNECT, TXO_ENOMEM. On success close *out with txo__binlog_stream_close().
 */
int txo__binlog_stream_open(struct txo_db *db, const struct txo__binlog_pos *start,
                            uint32_t server_id, const char *schema, const char *table,
                            const struct txo__binlog_column *cols, size_t n_cols,
                            const struct txo__binlog_requeue *requeue, int64_t heartbeat_ms,
                            struct txo__binlog_stream **out, struct txo_error *err);

/*
 * The next event into *ev, blocking until the server sends one (at most heartbeat_ms). *pos
 * receives where the stream stands after it. Errors: TXO_ECONNECT (transient: open again
 * from the last stored position), TXO_ECONFIG (the table lacks a column of cols, a column's
 * type the reader cannot decode, a row image without every column, compressed row events),
 * TXO_EINVAL (a row image this reader cannot read), TXO_ENOMEM.
 */
int txo__binlog_stream_next(struct txo__binlog_stream *s, struct txo__binlog_event *ev,
                            struct txo__binlog_pos *pos, struct txo_error *err);

/* The committed rows not taken yet. */
size_t txo__binlog_stream_committed(const struct txo__binlog_stream *s);

/*
 * Takes up to max of the committed rows, the oldest first (log order), as one result whose
 * columns are the cols of the open, in their order: the caller owns *out. Returns 0 or
 * TXO_ENOMEM.
 */
int txo__binlog_stream_take(struct txo__binlog_stream *s, size_t max, struct txo_rows **out,
                            struct txo_error *err);

/*
 * True when nothing more arrives from the server within wait_ms (0: nothing has arrived yet;
 * its socket has no bytes to read): the reader has everything the server wrote so far, so a
 * run can go out now instead of waiting for more. It may say so while the client library
 * still holds a buffered event; that only makes a run smaller.
 */
bool txo__binlog_stream_idle(struct txo__binlog_stream *s, int wait_ms);

/* Stops the dump and frees the stream. NULL is a no-op. */
void txo__binlog_stream_close(struct txo__binlog_stream *s);

#endif
