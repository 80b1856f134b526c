#include "core/common.h"

/*
 * The replication client behind the relay's binlog source (binlog_stream.h): COM_BINLOG_DUMP
 * through Connector/C's mariadb_rpl_* API, reduced to inserts into one table and commits.
 *
 * The server sends every event of the log; this file keeps:
 *   ROTATE       the file the next events come from (the first one names the start file);
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
 * The table map event stays alive (mariadb_rpl_extract_rows() reads the column types from it)
 * until the next map of the table replaces it; other events are freed after use.
 */

#include "db/binlog_stream.h"
#include "db/db_internal.h" /* <mysql.h>, which mariadb_rpl.h needs first */

#include <mariadb_rpl.h>
#include <poll.h>

struct txo__binlog_stream {
    struct txo_db *db;
    MARIADB_RPL *rpl;
    char schema[65], table[65];
    MARIADB_RPL_EVENT *map; /* the last TABLE_MAP of schema.table, or NULL */
    uint64_t map_table_id;
    struct txo__binlog_pos pos;

    /* The caller's columns, and where each one is in the current map (-1 before one). */
    struct txo__binlog_column cols[TXO__BINLOG_COLS_MAX];
    char *names[TXO__BINLOG_COLS_MAX];
    size_t n_cols;
    long at[TXO__BINLOG_COLS_MAX];

    /* The requeue rule (rule.column NULL: none), and where its column is in the current map:
     * an ENUM (values compared by index) or a string (after a length prefix). */
    struct txo__binlog_requeue rule;
    char *rule_strs[3];
    long rule_at;
    bool rule_enum;
    size_t rule_prefix;
    unsigned rule_from, rule_to;

    struct txo_rows *rows; /* committed rows, then those of the open transaction */
    size_t n_committed;    /* rows[0..n_committed) are committed */
    size_t n_taken;        /* of which the first n_taken were taken */
};

/* Index of column name in a FULL metadata name list (each name prefixed by its length), or
 * -1. */
static long column_index(const unsigned char *p, size_t len, uint32_t columns, const char *name)
{
    size_t want = strlen(name), at = 0;
    for (uint32_t i = 0; i < columns && at < len; i++) {
        size_t n = p[at++];
        if (n >= 251 || at + n > len)
            return -1; /* names are at most 64 characters: one length byte */
        if (n == want && memcmp(p + at, name, n) == 0)
            return (long)i;
        at += n;
    }
    return -1;
}

/* True when a column of type t (a table map's type byte) and metadata m can be decoded. */
static bool decodable(unsigned t, const unsigned char *m)
{
    switch (t) {
    case MYSQL_TYPE_TINY:
    case MYSQL_TYPE_SHORT:
    case MYSQL_TYPE_INT24:
    case MYSQL_TYPE_LONG:
    case MYSQL_TYPE_LONGLONG:
    case MYSQL_TYPE_VARCHAR:
    case MYSQL_TYPE_VAR_STRING:
    case MYSQL_TYPE_BLOB:
    case MYSQL_TYPE_DATETIME2:
        return true;
    case MYSQL_TYPE_STRING: { /* CHAR, unless the metadata says ENUM or SET */
        unsigned real = m[0] | 0x30;
        return real != MYSQL_TYPE_ENUM && real != MYSQL_TYPE_SET;
    }
    default:
        return false;
    }
}

static size_t meta_len(unsigned t);
static uint64_t le(const unsigned char *p, size_t n);

/* A length-encoded integer at p[*at..len): false when it runs past the end. */
static bool lenenc(const unsigned char *p, size_t len, size_t *at, uint64_t *v)
{
    if (*at >= len)
        return false;
    unsigned char b = p[(*at)++];
    size_t n = b < 251 ? 0 : b == 252 ? 2 : b == 253 ? 3 : b == 254 ? 8 : 9;
    if (n == 9 || len - *at < n)
        return false;
    *v = n == 0 ? b : le(p + *at, n);
    *at += n;
    return true;
}

/*
 * The 1-based indexes of from and to among the values of the ordinal-th ENUM column, from the
 * table map's ENUM_STR_VALUE metadata (for each ENUM column: the count of its values, then
 * each as a length-encoded string). False when they cannot be found.
 */
static bool enum_indexes(const unsigned char *p, size_t len, unsigned ordinal, const char *from,
                         const char *to, unsigned *from_i, unsigned *to_i)
{
    size_t at = 0;
    *from_i = *to_i = 0;
    for (unsigned col = 0; col <= ordinal; col++) {
        uint64_t count = 0;
        if (!lenenc(p, len, &at, &count))
            return false;
        for (uint64_t i = 1; i <= count; i++) {
            uint64_t n = 0;
            if (!lenenc(p, len, &at, &n) || n > len - at)
                return false;
            if (col == ordinal && n == strlen(from) && memcmp(p + at, from, n) == 0)
                *from_i = (unsigned)i;
            if (col == ordinal && n == strlen(to) && memcmp(p + at, to, n) == 0)
                *to_i = (unsigned)i;
            at += n;
        }
    }
    return *from_i > 0 && *to_i > 0;
}

/* Where the requeue rule's column is in a new table map, and how its values are compared. */
static int map_rule(struct txo__binlog_stream *s, const struct st_mariadb_rpl_table_map_event *m,
                    struct txo_error *err)
{
    s->rule_at = -1;
    if (s->rule.column == NULL)
        return 0;
    long c =
        column_index(m->column_names.data, m->column_names.length, m->column_count, s->rule.column);
    if (c < 0)
        return txo_error_set(err, TXO_ECONFIG, "binlog: %s.%s has no column %s", s->schema,
                             s->table, s->rule.column);
    const unsigned char *types = (const unsigned char *)m->column_types.str;
    const unsigned char *meta = (const unsigned char *)m->metadata.str;
    size_t at = 0;
    unsigned enums = 0;
    for (long i = 0; i < c; i++) {
        if (types[i] == MYSQL_TYPE_STRING && (meta[at] | 0x30) == MYSQL_TYPE_ENUM)
            enums++;
        at += meta_len(types[i]);
    }
    s->rule_at = c;
    s->rule_enum = types[c] == MYSQL_TYPE_STRING && (meta[at] | 0x30) == MYSQL_TYPE_ENUM;
    if (s->rule_enum) {
        if (!enum_indexes(m->enum_values.data, m->enum_values.length, enums, s->rule.from,
                          s->rule.to, &s->rule_from, &s->rule_to))
            return txo_error_set(err, TXO_ECONFIG,
                                 "binlog: the ENUM values of %s.%s.%s (%s, %s) are not in the "
                                 "row metadata: set binlog_row_metadata=FULL on the server",
                                 s->schema, s->table, s->rule.column, s->rule.from, s->rule.to);
        return 0;
    }
    if (types[c] == MYSQL_TYPE_VARCHAR || types[c] == MYSQL_TYPE_VAR_STRING)
        s->rule_prefix = le(meta + at, 2) > 255 ? 2 : 1;
    else if (types[c] == MYSQL_TYPE_STRING)
        s->rule_prefix = ((((meta[at] >> 4) & 0x300) ^ 0x300) + meta[at + 1]) > 255 ? 2 : 1;
    else
        return txo_error_set(err, TXO_ECONFIG,
                             "binlog: column %s of %s.%s is neither an ENUM nor a string",
                             s->rule.column, s->schema, s->table);
    s->rule_from = 1;
    s->rule_to = 2;
    return 0;
}

/* Where each column is in a new table map of the table, and whether it can be read. */
static int map_columns(struct txo__binlog_stream *s, const struct st_mariadb_rpl_table_map_event *m,
                       struct txo_error *err)
{
    const unsigned char *types = (const unsigned char *)m->column_types.str;
    const unsigned char *meta = (const unsigned char *)m->metadata.str;
    for (size_t k = 0; k < s->n_cols; k++) {
        s->at[k] = column_index(m->column_names.data, m->column_names.length, m->column_count,
                                s->cols[k].name);
        if (s->at[k] < 0 && m->column_names.length == 0)
            return txo_error_set(err, TXO_ECONFIG,
                                 "binlog: no column names in the row events of %s.%s: set "
                                 "binlog_row_metadata=FULL on the server",
                                 s->schema, s->table);
        if (s->at[k] < 0)
            return txo_error_set(err, TXO_ECONFIG, "binlog: %s.%s has no column %s", s->schema,
                                 s->table, s->cols[k].name);
    }
    size_t at = 0;
    for (uint32_t c = 0; c < m->column_count; c++) {
        if (c >= m->column_types.length || at + meta_len(types[c]) > m->metadata.length)
            return txo_error_set(err, TXO_EINVAL, "binlog: short table map of %s.%s", s->schema,
                                 s->table);
        for (size_t k = 0; k < s->n_cols; k++)
            if (s->at[k] == (long)c && !s->cols[k].is_set && !decodable(types[c], meta + at))
                return txo_error_set(err, TXO_ECONFIG,
                                     "binlog: column %s of %s.%s has a type (%u) the binlog "
                                     "source does not read",
                                     s->cols[k].name, s->schema, s->table, types[c]);
        at += meta_len(types[c]);
    }
    return map_rule(s, m, err);
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
    if (n_cols == 0 || n_cols > TXO__BINLOG_COLS_MAX)
        return txo_error_set(err, TXO_EINVAL, "binlog: 1..%d columns, not %zu",
                             TXO__BINLOG_COLS_MAX, n_cols);
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
    s->n_cols = n_cols;
    s->rows = txo__rows_new(n_cols);
    bool names_ok = s->rows != NULL;
    for (size_t k = 0; k < n_cols; k++) {
        s->names[k] = txo_strdup(cols[k].name);
        s->cols[k] = (struct txo__binlog_column){.name = s->names[k], .is_set = cols[k].is_set};
        s->at[k] = -1;
        names_ok = names_ok && s->names[k] != NULL;
    }
    s->rule_at = -1;
    if (requeue != NULL) {
        s->rule_strs[0] = txo_strdup(requeue->column);
        s->rule_strs[1] = txo_strdup(requeue->from);
        s->rule_strs[2] = txo_strdup(requeue->to);
        s->rule = (struct txo__binlog_requeue){s->rule_strs[0], s->rule_strs[1], s->rule_strs[2]};
        names_ok = names_ok && s->rule_strs[0] != NULL && s->rule_strs[1] != NULL &&
                   s->rule_strs[2] != NULL;
    }
    if (!names_ok) {
        txo__binlog_stream_close(s);
        return txo_error_set(err, TXO_ENOMEM, "binlog: out of memory");
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

/* Little-endian unsigned of n bytes at p. */
static uint64_t le(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;)
        v = v << 8 | p[i];
    return v;
}

/* Bytes of the metadata of a column of type t in a TABLE_MAP. */
static size_t meta_len(unsigned t)
{
    switch (t) {
    case MYSQL_TYPE_FLOAT:
    case MYSQL_TYPE_DOUBLE:
    case MYSQL_TYPE_BLOB:
    case MYSQL_TYPE_GEOMETRY:
    case MYSQL_TYPE_TIME2:
    case MYSQL_TYPE_DATETIME2:
    case MYSQL_TYPE_TIMESTAMP2:
    case 245: /* JSON (MySQL) */
        return 1;
    case MYSQL_TYPE_VARCHAR:
    case MYSQL_TYPE_VAR_STRING:
    case MYSQL_TYPE_STRING:
    case MYSQL_TYPE_ENUM:
    case MYSQL_TYPE_SET:
    case MYSQL_TYPE_BIT:
    case MYSQL_TYPE_NEWDECIMAL:
        return 2;
    default:
        return 0;
    }
}

/* Bytes of a packed decimal of digits digits (9 digits in 4 bytes, the rest by count). */
static size_t decimal_bytes(unsigned digits)
{
    static const unsigned char rest[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};
    return digits / 9 * 4 + rest[digits % 9];
}

/*
 * The size in the row image of a value of type t with metadata m at p (left bytes there), or
 * 0 when it cannot be told (an unknown type, or a value running past the event).
 */
static size_t value_len(unsigned t, const unsigned char *m, const unsigned char *p, size_t left)
{
    size_t n = 0, prefix = 0;
    switch (t) {
    case MYSQL_TYPE_TINY:
    case MYSQL_TYPE_YEAR:
        n = 1;
        break;
    case MYSQL_TYPE_SHORT:
        n = 2;
        break;
    case MYSQL_TYPE_INT24:
    case MYSQL_TYPE_DATE:
    case MYSQL_TYPE_TIME:
        n = 3;
        break;
    case MYSQL_TYPE_LONG:
    case MYSQL_TYPE_FLOAT:
    case MYSQL_TYPE_TIMESTAMP:
        n = 4;
        break;
    case MYSQL_TYPE_LONGLONG:
    case MYSQL_TYPE_DOUBLE:
    case MYSQL_TYPE_DATETIME:
        n = 8;
        break;
    case MYSQL_TYPE_TIMESTAMP2:
        n = 4 + (m[0] + 1u) / 2;
        break;
    case MYSQL_TYPE_DATETIME2:
        n = 5 + (m[0] + 1u) / 2;
        break;
    case MYSQL_TYPE_TIME2:
        n = 3 + (m[0] + 1u) / 2;
        break;
    case MYSQL_TYPE_NEWDECIMAL:
        n = decimal_bytes(m[0] - m[1]) + decimal_bytes(m[1]);
        break;
    case MYSQL_TYPE_BIT:
        n = m[1] + (m[0] + 7u) / 8;
        break;
    case MYSQL_TYPE_VARCHAR:
    case MYSQL_TYPE_VAR_STRING:
        prefix = le(m, 2) > 255 ? 2 : 1;
        break;
    case MYSQL_TYPE_BLOB:
    case MYSQL_TYPE_GEOMETRY:
    case 245:
        prefix = m[0];
        break;
    case MYSQL_TYPE_STRING:
    case MYSQL_TYPE_ENUM:
    case MYSQL_TYPE_SET: {
        unsigned real = m[0] | 0x30;
        if (real == MYSQL_TYPE_ENUM || real == MYSQL_TYPE_SET) {
            n = m[1];
            break;
        }
        unsigned max = (((m[0] >> 4) & 0x300) ^ 0x300) + m[1];
        prefix = max > 255 ? 2 : 1;
        break;
    }
    default:
        return 0;
    }
    if (prefix > 0) {
        if (prefix > 4 || left < prefix)
            return 0;
        n = prefix + le(p, prefix);
    }
    return n <= left ? n : 0;
}

/* Big-endian unsigned of n bytes at p. */
static uint64_t be(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/*
 * The text of the value p[0..len) of a column of type t (metadata m; decodable()): the bytes
 * themselves for strings, else written into buf. False for a DATETIME before year 0.
 */
static bool value_text(unsigned t, const unsigned char *m, const unsigned char *p, size_t len,
                       char buf[64], const char **out, size_t *out_len)
{
    size_t prefix = 0;
    switch (t) {
    case MYSQL_TYPE_TINY:
    case MYSQL_TYPE_SHORT:
    case MYSQL_TYPE_INT24:
    case MYSQL_TYPE_LONG:
    case MYSQL_TYPE_LONGLONG: {
        uint64_t u = le(p, len);
        if (len < 8 && (u >> (8 * len - 1)) & 1)
            u |= ~UINT64_C(0) << (8 * len); /* sign-extended */
        *out_len = (size_t)snprintf(buf, 64, "%" PRId64, (int64_t)u);
        *out = buf;
        return true;
    }
    case MYSQL_TYPE_DATETIME2: {
        /* 40 bits big-endian, offset by 2^39: year*13+month (17 bits), day (5), hour (5),
         * minute (6), second (6); then (fsp + 1) / 2 bytes of fraction. */
        uint64_t packed = be(p, 5);
        if (packed < UINT64_C(0x8000000000))
            return false;
        packed -= UINT64_C(0x8000000000);
        uint64_t ymd = packed >> 17, hms = packed & 0x1ffff, ym = ymd >> 5;
        unsigned fsp = m[0] <= 6 ? m[0] : 6;
        uint64_t frac = be(p + 5, (fsp + 1) / 2);
        static const unsigned scale[7] = {1, 10000, 10000, 100, 100, 1, 1};
        int n = snprintf(buf, 64, "%04u-%02u-%02u %02u:%02u:%02u", (unsigned)(ym / 13),
                         (unsigned)(ym % 13), (unsigned)(ymd & 31), (unsigned)(hms >> 12),
                         (unsigned)((hms >> 6) & 63), (unsigned)(hms & 63));
        if (fsp > 0) {
            char digits[8];
            snprintf(digits, sizeof(digits), "%06u", (unsigned)(frac * scale[fsp] % 1000000));
            n += snprintf(buf + n, (size_t)(64 - n), ".%.*s", (int)fsp, digits);
        }
        *out_len = (size_t)n;
        *out = buf;
        return true;
    }
    case MYSQL_TYPE_VARCHAR:
    case MYSQL_TYPE_VAR_STRING:
        prefix = le(m, 2) > 255 ? 2 : 1;
        break;
    case MYSQL_TYPE_BLOB:
        prefix = m[0];
        break;
    default: { /* CHAR */
        unsigned max = (((m[0] >> 4) & 0x300) ^ 0x300) + m[1];
        prefix = max > 255 ? 2 : 1;
        break;
    }
    }
    *out = (const char *)p + prefix;
    *out_len = len - prefix;
    return true;
}

/* One row image's values: where each caller column's value is (NULL: SQL NULL or absent). */
struct image {
    const unsigned char *vp[TXO__BINLOG_COLS_MAX];
    size_t vl[TXO__BINLOG_COLS_MAX];
    const unsigned char *rule_v; /* the requeue rule's column */
    size_t rule_len;
};

/* A table map's layout for reading images: types, metadata, where each column's starts. */
struct layout {
    uint32_t columns;
    const unsigned char *types, *meta;
    size_t meta_at[1024];
};

/*
 * Reads one row image at *p (*left bytes there) into im: a null bitmap of the columns present
 * (bitmap present), then their non-NULL values in column order, sized by type and metadata.
 * False when it cannot be read.
 */
static bool read_image(const struct txo__binlog_stream *s, const struct layout *l,
                       const unsigned char *present, const unsigned char **p, size_t *left,
                       struct image *im)
{
    memset(im, 0, sizeof(*im));
    size_t n_present = 0;
    for (uint32_t c = 0; c < l->columns; c++)
        n_present += (present[c / 8] >> (c % 8)) & 1;
    size_t nulls_len = (n_present + 7) / 8;
    if (*left < nulls_len)
        return false;
    const unsigned char *nulls = *p;
    *p += nulls_len;
    *left -= nulls_len;
    for (uint32_t c = 0, i = 0; c < l->columns; c++) {
        if (((present[c / 8] >> (c % 8)) & 1) == 0)
            continue;
        bool is_null = (nulls[i / 8] >> (i % 8)) & 1;
        i++;
        if (is_null)
            continue;
        size_t len = value_len(l->types[c], l->meta + l->meta_at[c], *p, *left);
        if (len == 0)
            return false;
        for (size_t k = 0; k < s->n_cols; k++)
            if (s->at[k] == (long)c) {
                im->vp[k] = *p;
                im->vl[k] = len;
            }
        if ((long)c == s->rule_at) {
            im->rule_v = *p;
            im->rule_len = len;
        }
        *p += len;
        *left -= len;
    }
    return true;
}

/* Appends the caller's columns of an image to s->rows. */
static int put_image(struct txo__binlog_stream *s, const struct layout *l, const struct image *im,
                     struct txo_error *err)
{
    for (size_t k = 0; k < s->n_cols; k++) {
        char buf[64];
        const char *v = NULL;
        size_t len = 0;
        if (s->cols[k].is_set) {
            v = im->vp[k] != NULL ? "1" : "0";
            len = 1;
        } else if (im->vp[k] != NULL) {
            long c = s->at[k];
            if (!value_text(l->types[c], l->meta + l->meta_at[c], im->vp[k], im->vl[k], buf, &v,
                            &len)) {
                txo__rows_drop_partial(s->rows);
                return txo_error_set(err, TXO_EINVAL,
                                     "binlog: a DATETIME of %s.%s this reader cannot read",
                                     s->schema, s->table);
            }
        }
        if (txo__rows_put(s->rows, v, len) < 0) {
            txo__rows_drop_partial(s->rows);
            return txo_error_set(err, TXO_ENOMEM, "binlog: out of memory for a row");
        }
    }
    return 0;
}

/* The requeue rule's value of an image: its ENUM index, or for a string its position in
 * {from, to} plus one (0: neither). */
static unsigned rule_value(const struct txo__binlog_stream *s, const struct image *im)
{
    if (im->rule_v == NULL)
        return 0;
    if (s->rule_enum)
        return (unsigned)le(im->rule_v, im->rule_len);
    size_t prefix = s->rule_prefix, n = im->rule_len - prefix;
    const unsigned char *v = im->rule_v + prefix;
    if (n == strlen(s->rule.from) && memcmp(v, s->rule.from, n) == 0)
        return 1;
    if (n == strlen(s->rule.to) && memcmp(v, s->rule.to, n) == 0)
        return 2;
    return 0;
}

/*
 * The rows of a row event of the table, decoded into the caller's columns at the end of
 * s->rows: every row of a WRITE_ROWS event; of an UPDATE_ROWS event (before and after images in
 * pairs), the after image of each row the requeue rule's column moved from rule.from to
 * rule.to. Connector/C's mariadb_rpl_extract_rows() is not used: 3.3 refuses the images of
 * outbox_events ("Malformed row data").
 */
static int read_rows(struct txo__binlog_stream *s, MARIADB_RPL_EVENT *e, bool update,
                     struct txo__binlog_event *ev, struct txo_error *err)
{
    const struct st_mariadb_rpl_table_map_event *map = &s->map->event.table_map;
    struct layout l;
    l.columns = map->column_count;
    if (e->event.rows.column_count != l.columns || map->column_types.length < l.columns)
        return txo_error_set(err, TXO_EINVAL,
                             "binlog: a row event of %s.%s does not match its table map", s->schema,
                             s->table);
    if (l.columns > TXO_ARRAY_LEN(l.meta_at))
        return txo_error_set(err, TXO_EINVAL, "binlog: %s.%s has too many columns", s->schema,
                             s->table);
    l.types = (const unsigned char *)map->column_types.str;
    l.meta = (const unsigned char *)map->metadata.str;
    size_t at = 0;
    for (uint32_t c = 0; c < l.columns; c++) {
        l.meta_at[c] = at;
        at += meta_len(l.types[c]);
    }
    const unsigned char *before = e->event.rows.column_bitmap;
    const unsigned char *after = update ? e->event.rows.column_update_bitmap : before;
    if (after == NULL)
        return txo_error_set(err, TXO_EINVAL, "binlog: an update of %s.%s without its columns",
                             s->schema, s->table);
    for (size_t k = 0; k < s->n_cols; k++)
        if (((after[s->at[k] / 8] >> (s->at[k] % 8)) & 1) == 0)
            return txo_error_set(err, TXO_ECONFIG,
                                 "binlog: the row events of %s.%s leave out column %s: set "
                                 "binlog_row_image=FULL on the server",
                                 s->schema, s->table, s->cols[k].name);
    const unsigned char *p = e->event.rows.row_data;
    size_t left = e->event.rows.row_data_size;
    while (left > 0) {
        struct image old, row;
        if (update && !read_image(s, &l, before, &p, &left, &old))
            goto malformed;
        if (!read_image(s, &l, after, &p, &left, &row))
            goto malformed;
        if (update && (s->rule_at < 0 || rule_value(s, &old) != s->rule_from ||
                       rule_value(s, &row) != s->rule_to))
            continue;
        int rc = put_image(s, &l, &row, err);
        if (rc < 0)
            return rc;
        ev->n_rows++;
    }
    return 0;
malformed:
    return txo_error_set(err, TXO_EINVAL,
                         "binlog: a row image of %s.%s this reader cannot read "
                         "(column types of the table map)",
                         s->schema, s->table);
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
    s->pos.offset = le(ev + header, 8);
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
            rc = map_columns(s, &e->event.table_map, err);
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
        if (ours && (write || (update && s->rule_at >= 0))) {
            size_t before = ev->n_rows;
            rc = read_rows(s, e, update, ev, err);
            if (ev->n_rows > before)
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

bool txo__binlog_stream_idle(struct txo__binlog_stream *s)
{
    struct pollfd pfd = {.fd = (int)mysql_get_socket(s->db->conn), .events = POLLIN};
    return poll(&pfd, 1, 0) == 0;
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
    for (size_t k = 0; k < s->n_cols; k++)
        txo_free(s->names[k]);
    for (size_t k = 0; k < 3; k++)
        txo_free(s->rule_strs[k]);
    txo_free(s);
}
