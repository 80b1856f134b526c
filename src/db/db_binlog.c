#include "core/common.h"

/*
 * The replication client behind the relay's binlog source (binlog_stream.h): COM_BINLOG_DUMP
 * through Connector/C's mariadb_rpl_* API, reduced to inserts into one table and commits.
 *
 * The server sends every event of the log; this file keeps:
 *   ROTATE       the file the next events come from (the first one names the start file);
 *   ROTATE, FORMAT_DESCRIPTION  a new file: what the open transaction read is dropped (a
 *                transaction never spans files: its tail was lost in a server crash) and so is
 *                the table map (table ids start again when the server does);
 *   GTID         the GTID of the transaction that begins (kept in the position);
 *   TABLE_MAP    of schema.table only: the map the row events after it refer to by table id,
 *                and where each column the caller asked for is, found by name in the FULL
 *                row metadata (binlog_row_metadata=FULL; without names the source refuses to
 *                start), with its type checked;
 *   WRITE_ROWS   of that table id: the inserted rows, decoded into the caller's columns and
 *                held with their transaction;
 *   UPDATE_ROWS  of that table id, with a requeue rule: the after image of each row whose
 *                rule column moved from one value to the other, kept as an insert (deletes
 *                and other updates are passed over);
 *   XID, COMMIT  the end of a transaction (an InnoDB XID event, or a QUERY "COMMIT"): its
 *                rows join the committed ones, which the caller takes;
 * everything else only moves the offset. A rolled-back transaction never reaches the log.
 *
 * The rows live in one result (db_rows.c's builder): the committed rows first, those of the
 * open transaction after them. Taking copies the oldest committed rows out; the taken ones are
 * dropped once every committed row is taken, so each row is copied twice in all.
 *
 * The table map event stays alive (the decoder reads the column types from it) until the next
 * map of the table replaces it, a map of another table takes its id, or a new file begins;
 * other events are freed after use.
 */

#include "db/binlog_rows.h"
#include "db/binlog_stream.h"
#include "db/db_internal.h" /* <mysql.h>, which mariadb_rpl.h needs first */

#include <ma_pvio.h>
#include <mariadb_rpl.h>
#include <poll.h>

struct txo__binlog_stream {
    struct txo_db *db;
    MARIADB_RPL *rpl;
    char schema[65], table[65];
    MARIADB_RPL_EVENT *map; /* the last TABLE_MAP of schema.table, or NULL */
    uint64_t map_table_id;
    struct txo__binlog_pos pos;

    struct txo__binlog_decoder dec; /* the caller's columns in the current map */
    struct txo_rows *rows;          /* committed rows, then those of the open transaction */
    size_t n_committed;             /* rows[0..n_committed) are committed */
    size_t n_taken;                 /* of which the first n_taken were taken */
};

/* The parts of a TABLE_MAP event the decoder reads. */
static struct txo__binlog_map map_of(const MARIADB_RPL_EVENT *e)
{
    const struct st_mariadb_rpl_table_map_event *m = &e->event.table_map;
    return (struct txo__binlog_map){
        .columns = m->column_count,
        .types = (const unsigned char *)m->column_types.str,
        .types_len = m->column_types.length,
        .meta = (const unsigned char *)m->metadata.str,
        .meta_len = m->metadata.length,
        .names = m->column_names.data,
        .names_len = m->column_names.length,
        .enums = m->enum_values.data,
        .enums_len = m->enum_values.length,
    };
}

static bool same(const MARIADB_STRING *s, const char *z)
{
    return s->length == strlen(z) && memcmp(s->str, z, s->length) == 0;
}

static int rpl_error(struct txo__binlog_stream *s, const char *what, struct txo_error *err)
{
    unsigned no = mariadb_rpl_errno(s->rpl);
    const char *msg = mariadb_rpl_error(s->rpl);
    if (no == 0) {
        no = mysql_errno(s->db->conn);
        msg = mysql_error(s->db->conn);
    }
    /* 1236: the server cannot send from this position (purged file, bad offset). */
    int code = no == 1236 || no == 1045 || no == 1227 ? TXO_ECONFIG : TXO_ECONNECT;
    int rc = txo_error_set(err, code, "binlog %s: %s (errno %u)", what, msg, no);
    if (err != NULL)
        err->mysql_errno = no;
    return rc;
}

int txo__binlog_stream_open(struct txo_db *db, const struct txo__binlog_pos *start,
                            uint32_t server_id, const char *schema, const char *table,
                            const struct txo__binlog_column *cols, size_t n_cols,
                            const struct txo__binlog_requeue *requeue, int64_t heartbeat_ms,
                            struct txo__binlog_stream **out, struct txo_error *err)
{
    if (strlen(schema) >= 65 || strlen(table) >= 65)
        return txo_error_set(err, TXO_EINVAL, "binlog: schema or table name too long");
    int rc = txo__db_ensure_connected(db, err);
    if (rc < 0)
        return rc;
    /* The heartbeat (nanoseconds) makes the server speak when the log is quiet, so that the
     * reader can renew its lease and see a stop request. */
    char sql[96];
    snprintf(sql, sizeof(sql), "SET @master_heartbeat_period = %" PRId64,
             (heartbeat_ms > 0 ? heartbeat_ms : 1000) * 1000000);
    rc = txo__db_raw_query(db, sql, err);
    if (rc == 0)
        rc = txo__db_raw_query(db, "SET @master_binlog_checksum = @@global.binlog_checksum", err);
    /* GTID events instead of the BEGIN queries the server sends a client that cannot read
     * them. */
    if (rc == 0)
        rc = txo__db_raw_query(db, "SET @mariadb_slave_capability = 4", err);
    if (rc < 0)
        return rc;
    struct txo__binlog_stream *s = txo_calloc(1, sizeof(*s));
    if (s == NULL)
        return txo_error_set(err, TXO_ENOMEM, "binlog: out of memory");
    s->db = db;
    char what[140];
    snprintf(what, sizeof(what), "%s.%s", schema, table);
    rc = txo__binlog_decoder_init(&s->dec, what, cols, n_cols, requeue, err);
    s->rows = rc == 0 ? txo__rows_new(n_cols) : NULL;
    if (s->rows == NULL) {
        txo__binlog_stream_close(s);
        return rc < 0 ? rc : txo_error_set(err, TXO_ENOMEM, "binlog: out of memory");
    }
    snprintf(s->schema, sizeof(s->schema), "%s", schema);
    snprintf(s->table, sizeof(s->table), "%s", table);
    s->pos = *start;
    s->rpl = mariadb_rpl_init(db->conn);
    if (s->rpl == NULL) {
        txo__binlog_stream_close(s);
        return txo_error_set(err, TXO_ENOMEM, "binlog: out of memory for the replication handle");
    }
    unsigned long offset = (unsigned long)(start->offset > 4 ? start->offset : 4);
    unsigned int flags = 0; /* no ANNOTATE_ROWS: the statements' text is not needed */
    if (mariadb_rpl_optionsv(s->rpl, MARIADB_RPL_FILENAME, start->file, strlen(start->file)) ||
        mariadb_rpl_optionsv(s->rpl, MARIADB_RPL_START, offset) ||
        mariadb_rpl_optionsv(s->rpl, MARIADB_RPL_SERVER_ID, server_id) ||
        mariadb_rpl_optionsv(s->rpl, MARIADB_RPL_FLAGS, flags)) {
        rc = rpl_error(s, "options", err);
        txo__binlog_stream_close(s);
        return rc;
    }
    if (mariadb_rpl_open(s->rpl) != 0) {
        rc = rpl_error(s, "dump request", err);
        txo__binlog_stream_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* True when p[0..n) looks like a binary log's file name: it ends in "." and six digits. */
static bool log_name(const unsigned char *p, size_t n)
{
    if (n < 8 || p[n - 7] != '.')
        return false;
    for (size_t i = n - 6; i < n; i++)
        if (p[i] < '0' || p[i] > '9')
            return false;
    return true;
}

/*
 * A ROTATE event: the file the next events come from, and where in it. Read from the raw
 * event (header, 8-byte position, file name, the checksum when the log has them):
 * Connector/C 3.3 parses the first one (the artificial one at the start) right, but not the
 * ones written to the log.
 */
static void rotate(struct txo__binlog_stream *s, const MARIADB_RPL_EVENT *e)
{
    const size_t header = 19, post = 8;
    if (e->raw_data == NULL || e->raw_data_size < e->event_length ||
        e->event_length < header + post)
        return;
    const unsigned char *ev = e->raw_data + (e->raw_data_size - e->event_length);
    size_t n = e->event_length - header - post;
    /* With or without a 4-byte checksum after it (the artificial first event comes before the
     * format description that says): the name is the one that ends in ".NNNNNN". */
    if (!log_name(ev + header + post, n) && n > 4 && log_name(ev + header + post, n - 4))
        n -= 4;
    if (n == 0 || n >= sizeof(s->pos.file) || !log_name(ev + header + post, n))
        return;
    memcpy(s->pos.file, ev + header + post, n);
    s->pos.file[n] = '\0';
    s->pos.offset = txo__binlog_le(ev + header, 8);
}

static void forget_map(struct txo__binlog_stream *s)
{
    mariadb_free_rpl_event(s->map);
    s->map = NULL;
}

/*
 * At a new log file: a transaction never spans two files, so rows read and not committed belong
 * to one the server never finished (its tail was lost in a crash; recovery rolled it back), and
 * table ids start again after a server restart, so the table map no longer holds.
 */
static void forget_open(struct txo__binlog_stream *s)
{
    forget_map(s);
    txo__rows_truncate(s->rows, s->n_committed);
}

int txo__binlog_stream_next(struct txo__binlog_stream *s, struct txo__binlog_event *ev,
                            struct txo__binlog_pos *pos, struct txo_error *err)
{
    ev->kind = TXO__BINLOG_NOTHING;
    ev->n_rows = 0;
    ev->timestamp_s = 0;
    MARIADB_RPL_EVENT *e = mariadb_rpl_fetch(s->rpl, NULL);
    if (e == NULL) {
        s->db->broken = true;
        return rpl_error(s, "read", err);
    }
    int rc = 0;
    bool keep = false;
    if (e->event_type != HEARTBEAT_LOG_EVENT)
        ev->timestamp_s = e->timestamp;
    switch (e->event_type) {
    case ROTATE_EVENT:
        rotate(s, e);
        forget_open(s);
        break;
    case FORMAT_DESCRIPTION_EVENT:
        forget_open(s);
        break;
    case GTID_EVENT:
        snprintf(s->pos.gtid, sizeof(s->pos.gtid), "%u-%u-%" PRIu64, e->event.gtid.domain_id,
                 e->server_id, e->event.gtid.sequence_nr);
        break;
    case TABLE_MAP_EVENT:
        if (same(&e->event.table_map.database, s->schema) &&
            same(&e->event.table_map.table, s->table)) {
            mariadb_free_rpl_event(s->map);
            s->map = e;
            keep = true;
            s->map_table_id = e->event.table_map.table_id;
            struct txo__binlog_map m = map_of(e);
            rc = txo__binlog_decoder_map(&s->dec, &m, err);
        } else if (s->map != NULL && e->event.table_map.table_id == s->map_table_id) {
            forget_map(s); /* the id names another table now */
        }
        break;
    case XID_EVENT:
        ev->kind = TXO__BINLOG_COMMIT;
        break;
    case QUERY_EVENT:
        if (same(&e->event.query.statement, "COMMIT"))
            ev->kind = TXO__BINLOG_COMMIT;
        break;
    default: {
        bool write = e->event_type == WRITE_ROWS_EVENT_V1 || e->event_type == WRITE_ROWS_EVENT;
        bool update = e->event_type == UPDATE_ROWS_EVENT_V1 || e->event_type == UPDATE_ROWS_EVENT;
        bool compressed = e->event_type == WRITE_ROWS_COMPRESSED_EVENT_V1 ||
                          e->event_type == WRITE_ROWS_COMPRESSED_EVENT ||
                          e->event_type == UPDATE_ROWS_COMPRESSED_EVENT_V1 ||
                          e->event_type == UPDATE_ROWS_COMPRESSED_EVENT;
        /* The rows member of the event is only filled for row events. */
        bool ours = (write || update || compressed) && s->map != NULL &&
                    e->event.rows.table_id == s->map_table_id;
        if (ours && (write || update)) {
            struct txo__binlog_map m = map_of(s->map);
            if (e->event.rows.column_count != m.columns)
                rc = txo_error_set(err, TXO_EINVAL,
                                   "binlog: a row event of %s.%s does not match its table map",
                                   s->schema, s->table);
            else
                rc = txo__binlog_decoder_rows(&s->dec, &m, e->event.rows.column_bitmap,
                                              update ? e->event.rows.column_update_bitmap : NULL,
                                              e->event.rows.row_data, e->event.rows.row_data_size,
                                              s->rows, &ev->n_rows, err);
            if (ev->n_rows > 0)
                ev->kind = TXO__BINLOG_INSERT;
        } else if (ours && compressed) {
            rc = txo_error_set(err, TXO_ECONFIG,
                               "binlog: compressed row events of %s.%s: SET GLOBAL "
                               "log_bin_compress = OFF (the reader does not read them)",
                               s->schema, s->table);
        }
        break;
    }
    }
    /* An artificial event (the first ROTATE, a heartbeat) has no position of its own. */
    if (e->event_type != ROTATE_EVENT && e->next_event_pos != 0 &&
        e->event_type != HEARTBEAT_LOG_EVENT)
        s->pos.offset = e->next_event_pos;
    if (ev->kind == TXO__BINLOG_COMMIT)
        s->n_committed = txo_rows_count(s->rows);
    if (!keep)
        mariadb_free_rpl_event(e);
    *pos = s->pos;
    return rc;
}

size_t txo__binlog_stream_committed(const struct txo__binlog_stream *s)
{
    return s->n_committed - s->n_taken;
}

int txo__binlog_stream_take(struct txo__binlog_stream *s, size_t max, struct txo_rows **out,
                            struct txo_error *err)
{
    size_t n = s->n_committed - s->n_taken;
    if (n > max)
        n = max;
    if (txo__rows_copy(s->rows, s->n_taken, n, out) < 0)
        return txo_error_set(err, TXO_ENOMEM, "binlog: out of memory for %zu rows", n);
    s->n_taken += n;
    if (s->n_taken == s->n_committed) { /* only the open transaction's rows are left */
        txo__rows_drop_head(s->rows, s->n_taken);
        s->n_committed = s->n_taken = 0;
    }
    return 0;
}

/*
 * Bytes the client library read from the socket and has not handed out yet. Connector/C reads
 * ahead up to 16 KB into the connection's cache (ma_pvio.h), which holds dozens of small row
 * events: a reader that looked only at the socket would see a backlog as "nothing more" and
 * send one commit a run. (Under TLS the TLS library may hold more; a run is then smaller.)
 */
static size_t buffered(MYSQL *conn)
{
    const MARIADB_PVIO *pvio = conn->net.pvio;
    if (pvio == NULL || pvio->cache == NULL || pvio->cache_pos == NULL)
        return 0;
    const unsigned char *end = pvio->cache + pvio->cache_size;
    return pvio->cache_pos < end ? (size_t)(end - pvio->cache_pos) : 0;
}

bool txo__binlog_stream_idle(struct txo__binlog_stream *s, int wait_ms)
{
    if (buffered(s->db->conn) > 0)
        return false;
    struct pollfd pfd = {.fd = (int)mysql_get_socket(s->db->conn), .events = POLLIN};
    return poll(&pfd, 1, wait_ms) == 0;
}

void txo__binlog_stream_close(struct txo__binlog_stream *s)
{
    if (s == NULL)
        return;
    mariadb_free_rpl_event(s->map);
    if (s->rpl != NULL)
        mariadb_rpl_close(s->rpl);
    /* The connection carried the dump: it cannot run statements any more. */
    s->db->broken = true;
    txo_rows_free(s->rows);
    txo__binlog_decoder_release(&s->dec);
    txo_free(s);
}
