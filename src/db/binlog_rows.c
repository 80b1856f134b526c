#include "core/common.h"

/*
 * The row images of the binary log, decoded (binlog_rows.h): what db_binlog.c hands over from
 * a TABLE_MAP event (column types, their metadata, and from binlog_row_metadata=FULL the column
 * names and ENUM values) and from a row event (the columns present, the images), turned into
 * text rows (db_rows.c's builder) holding the caller's columns.
 *
 * An image is a null bitmap of the columns present, then each non-NULL value in column order;
 * a value's size depends on its type and its table-map metadata (value_len()), and only the
 * caller's columns are converted (value_text()). Everything is bounds-checked against the
 * event: a value running past it, an unknown type before a wanted column, or metadata too
 * short is an error, never a read outside the event (fuzz/fuzz_binlog_rows.c).
 */

#include "db/binlog_rows.h"
#include "db/db_internal.h" /* <mysql.h>: the MYSQL_TYPE_* of the table map; the rows builder */

uint64_t txo__binlog_le(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;)
        v = v << 8 | p[i];
    return v;
}

/* Big-endian unsigned of n bytes at p. */

static uint64_t be(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* A length-encoded integer at p[*at..len): false when it runs past the end. */
static bool lenenc(const unsigned char *p, size_t len, size_t *at, uint64_t *v)
{
    if (*at >= len)
        return false;
    unsigned char b = p[(*at)++];
    size_t n = b < 251 ? 0 : b == 252 ? 2 : b == 253 ? 3 : b == 254 ? 8 : 9;
    if (n == 9 || len - *at < n)
        return false;
    *v = n == 0 ? b : txo__binlog_le(p + *at, n);
    *at += n;
    return true;
}

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
static int map_rule(struct txo__binlog_decoder *d, const struct txo__binlog_map *m,
                    struct txo_error *err)
{
    d->rule_at = -1;
    if (d->rule.column == NULL)
        return 0;
    long c = column_index(m->names, m->names_len, m->columns, d->rule.column);
    if (c < 0)
        return txo_error_set(err, TXO_ECONFIG, "binlog: %s has no column %s", d->what,
                             d->rule.column);
    const unsigned char *types = m->types;
    const unsigned char *meta = m->meta;
    size_t at = 0;
    unsigned enums = 0;
    for (long i = 0; i < c; i++) {
        if (types[i] == MYSQL_TYPE_STRING && (meta[at] | 0x30) == MYSQL_TYPE_ENUM)
            enums++;
        at += meta_len(types[i]);
    }
    d->rule_at = c;
    d->rule_enum = types[c] == MYSQL_TYPE_STRING && (meta[at] | 0x30) == MYSQL_TYPE_ENUM;
    if (d->rule_enum) {
        if (!enum_indexes(m->enums, m->enums_len, enums, d->rule.from, d->rule.to, &d->rule_from,
                          &d->rule_to))
            return txo_error_set(err, TXO_ECONFIG,
                                 "binlog: the ENUM values of %s.%s (%s, %s) are not in the "
                                 "row metadata: set binlog_row_metadata=FULL on the server",
                                 d->what, d->rule.column, d->rule.from, d->rule.to);
        return 0;
    }
    if (types[c] == MYSQL_TYPE_VARCHAR || types[c] == MYSQL_TYPE_VAR_STRING)
        d->rule_prefix = txo__binlog_le(meta + at, 2) > 255 ? 2 : 1;
    else if (types[c] == MYSQL_TYPE_STRING)
        d->rule_prefix = ((((meta[at] >> 4) & 0x300) ^ 0x300) + meta[at + 1]) > 255 ? 2 : 1;
    else
        return txo_error_set(err, TXO_ECONFIG,
                             "binlog: column %s of %s is neither an ENUM nor a string",
                             d->rule.column, d->what);
    d->rule_from = 1;
    d->rule_to = 2;
    return 0;
}

/* Where each column is in a new table map of the table, and whether it can be read. */
static int map_columns(struct txo__binlog_decoder *d, const struct txo__binlog_map *m,
                       struct txo_error *err)
{
    const unsigned char *types = m->types;
    const unsigned char *meta = m->meta;
    for (size_t k = 0; k < d->n_cols; k++) {
        d->at[k] = column_index(m->names, m->names_len, m->columns, d->cols[k].name);
        if (d->at[k] < 0 && m->names_len == 0)
            return txo_error_set(err, TXO_ECONFIG,
                                 "binlog: no column names in the row events of %s: set "
                                 "binlog_row_metadata=FULL on the server",
                                 d->what);
        if (d->at[k] < 0)
            return txo_error_set(err, TXO_ECONFIG, "binlog: %s has no column %s", d->what,
                                 d->cols[k].name);
    }
    size_t at = 0;
    for (uint32_t c = 0; c < m->columns; c++) {
        if (c >= m->types_len || at + meta_len(types[c]) > m->meta_len)
            return txo_error_set(err, TXO_EINVAL, "binlog: short table map of %s", d->what);
        for (size_t k = 0; k < d->n_cols; k++)
            if (d->at[k] == (long)c && !d->cols[k].is_set && !decodable(types[c], meta + at))
                return txo_error_set(err, TXO_ECONFIG,
                                     "binlog: column %s of %s has a type (%u) the binlog "
                                     "source does not read",
                                     d->cols[k].name, d->what, types[c]);
        at += meta_len(types[c]);
    }
    return map_rule(d, m, err);
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
        prefix = txo__binlog_le(m, 2) > 255 ? 2 : 1;
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
        n = prefix + txo__binlog_le(p, prefix);
    }
    return n <= left ? n : 0;
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
        uint64_t u = txo__binlog_le(p, len);
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
        prefix = txo__binlog_le(m, 2) > 255 ? 2 : 1;
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
static bool read_image(const struct txo__binlog_decoder *d, const struct layout *l,
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
        for (size_t k = 0; k < d->n_cols; k++)
            if (d->at[k] == (long)c) {
                im->vp[k] = *p;
                im->vl[k] = len;
            }
        if ((long)c == d->rule_at) {
            im->rule_v = *p;
            im->rule_len = len;
        }
        *p += len;
        *left -= len;
    }
    return true;
}

/* Appends the caller's columns of an image to out. */
static int put_image(const struct txo__binlog_decoder *d, const struct layout *l,
                     const struct image *im, struct txo_rows *out, struct txo_error *err)
{
    for (size_t k = 0; k < d->n_cols; k++) {
        char buf[64];
        const char *v = NULL;
        size_t len = 0;
        if (d->cols[k].is_set) {
            v = im->vp[k] != NULL ? "1" : "0";
            len = 1;
        } else if (im->vp[k] != NULL) {
            long c = d->at[k];
            if (!value_text(l->types[c], l->meta + l->meta_at[c], im->vp[k], im->vl[k], buf, &v,
                            &len)) {
                txo__rows_truncate(out, txo_rows_count(out));
                return txo_error_set(err, TXO_EINVAL,
                                     "binlog: a DATETIME of %s this reader cannot read", d->what);
            }
        }
        if (txo__rows_put(out, v, len) < 0) {
            txo__rows_truncate(out, txo_rows_count(out));
            return txo_error_set(err, TXO_ENOMEM, "binlog: out of memory for a row");
        }
    }
    return 0;
}

/* The requeue rule's value of an image: its ENUM index, or for a string its position in
 * {from, to} plus one (0: neither). */
static unsigned rule_value(const struct txo__binlog_decoder *d, const struct image *im)
{
    if (im->rule_v == NULL)
        return 0;
    if (d->rule_enum)
        return (unsigned)txo__binlog_le(im->rule_v, im->rule_len);
    size_t prefix = d->rule_prefix, n = im->rule_len - prefix;
    const unsigned char *v = im->rule_v + prefix;
    if (n == strlen(d->rule.from) && memcmp(v, d->rule.from, n) == 0)
        return 1;
    if (n == strlen(d->rule.to) && memcmp(v, d->rule.to, n) == 0)
        return 2;
    return 0;
}

int txo__binlog_decoder_init(struct txo__binlog_decoder *d, const char *what,
                             const struct txo__binlog_column *cols, size_t n_cols,
                             const struct txo__binlog_requeue *requeue, struct txo_error *err)
{
    memset(d, 0, sizeof(*d));
    d->rule_at = -1;
    if (n_cols == 0 || n_cols > TXO__BINLOG_COLS_MAX)
        return txo_error_set(err, TXO_EINVAL, "binlog: 1..%d columns, not %zu",
                             TXO__BINLOG_COLS_MAX, n_cols);
    snprintf(d->what, sizeof(d->what), "%s", what);
    bool ok = true;
    d->n_cols = n_cols;
    for (size_t k = 0; k < n_cols; k++) {
        d->names[k] = txo_strdup(cols[k].name);
        d->cols[k] = (struct txo__binlog_column){.name = d->names[k], .is_set = cols[k].is_set};
        d->at[k] = -1;
        ok = ok && d->names[k] != NULL;
    }
    if (requeue != NULL) {
        d->rule_strs[0] = txo_strdup(requeue->column);
        d->rule_strs[1] = txo_strdup(requeue->from);
        d->rule_strs[2] = txo_strdup(requeue->to);
        d->rule = (struct txo__binlog_requeue){d->rule_strs[0], d->rule_strs[1], d->rule_strs[2]};
        ok = ok && d->rule_strs[0] != NULL && d->rule_strs[1] != NULL && d->rule_strs[2] != NULL;
    }
    if (!ok) {
        txo__binlog_decoder_release(d);
        return txo_error_set(err, TXO_ENOMEM, "binlog: out of memory");
    }
    return 0;
}

void txo__binlog_decoder_release(struct txo__binlog_decoder *d)
{
    for (size_t k = 0; k < TXO__BINLOG_COLS_MAX; k++)
        txo_free(d->names[k]);
    for (size_t k = 0; k < 3; k++)
        txo_free(d->rule_strs[k]);
    memset(d, 0, sizeof(*d));
    d->rule_at = -1;
}

int txo__binlog_decoder_map(struct txo__binlog_decoder *d, const struct txo__binlog_map *m,
                            struct txo_error *err)
{
    d->mapped = false;
    int rc = map_columns(d, m, err);
    d->mapped = rc == 0;
    return rc;
}

int txo__binlog_decoder_rows(const struct txo__binlog_decoder *d, const struct txo__binlog_map *m,
                             const unsigned char *present, const unsigned char *present_after,
                             const unsigned char *data, size_t len, struct txo_rows *out,
                             size_t *n_rows, struct txo_error *err)
{
    *n_rows = 0;
    if (!d->mapped)
        return txo_error_set(err, TXO_EINVAL, "binlog: a row event of %s before its table map",
                             d->what);
    struct layout l;
    l.columns = m->columns;
    if (l.columns > TXO_ARRAY_LEN(l.meta_at) || m->types_len < l.columns)
        return txo_error_set(err, TXO_EINVAL, "binlog: a table map of %s this reader cannot read",
                             d->what);
    l.types = m->types;
    l.meta = m->meta;
    size_t at = 0;
    for (uint32_t c = 0; c < l.columns; c++) {
        l.meta_at[c] = at;
        at += meta_len(l.types[c]);
    }
    if (at > m->meta_len)
        return txo_error_set(err, TXO_EINVAL, "binlog: short table map of %s", d->what);
    bool update = present_after != NULL;
    const unsigned char *after = update ? present_after : present;
    for (size_t k = 0; k < d->n_cols; k++)
        if (((after[d->at[k] / 8] >> (d->at[k] % 8)) & 1) == 0)
            return txo_error_set(err, TXO_ECONFIG,
                                 "binlog: the row events of %s leave out column %s: set "
                                 "binlog_row_image=FULL on the server",
                                 d->what, d->cols[k].name);
    if (update && d->rule_at < 0)
        return 0;
    const unsigned char *p = data;
    size_t left = len;
    while (left > 0) {
        struct image old, row;
        if (update && !read_image(d, &l, present, &p, &left, &old))
            goto malformed;
        if (!read_image(d, &l, after, &p, &left, &row))
            goto malformed;
        if (update && (rule_value(d, &old) != d->rule_from || rule_value(d, &row) != d->rule_to))
            continue;
        int rc = put_image(d, &l, &row, out, err);
        if (rc < 0)
            return rc;
        (*n_rows)++;
    }
    return 0;
malformed:
    return txo_error_set(err, TXO_EINVAL,
                         "binlog: a row image of %s this reader cannot read "
                         "(column types of the table map)",
                         d->what);
}
