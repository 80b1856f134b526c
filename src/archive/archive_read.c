#include "core/common.h"

/*
 * Reading archive files back (txo/archive.h has the format): one whole file is decompressed
 * into memory and checked line by line before anything is handed out, so `txo archive cat`
 * prints only files that verify and the cleaner's crash rule (src/retention) deletes rows only
 * by the ids or keys of a file that is whole. Both versions of the header are read: 1, files
 * named by ids, and 2, files named by sequence, whose keys come back as bytes (a binary key
 * written as {"base64":...} decoded). Also finds a table's newest file for that rule: the
 * highest sequence, or for files named by ids the latest modified.
 *
 * Thread-safety: no shared state.
 */

#include <dirent.h>
#include <limits.h>
#include <sys/stat.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <zlib.h>

#include "archive/archive_internal.h"
#include "core/buf.h"
#include "core/text.h"
#include "txo/archive.h"

#define SUFFIX TXO__ARCHIVE_SUFFIX

/* The whole decompressed content of path into *out. */
static int gunzip_file(const char *path, struct txo__buf *out, struct txo_error *err)
{
    gzFile gz = gzopen(path, "rb");
    if (gz == NULL)
        return txo_error_set(err, TXO_EIO, "%s: cannot open: %s", path,
                             errno != 0 ? strerror(errno) : "out of memory");
    int rc = 0;
    for (;;) {
        if (!txo__buf_reserve(out, 65536)) {
            rc = txo_error_set(err, TXO_ENOMEM, "%s: out of memory", path);
            break;
        }
        int n = gzread(gz, out->data + out->len, 65536);
        if (n < 0) {
            int zerr = 0;
            const char *msg = gzerror(gz, &zerr);
            rc = txo_error_set(err, TXO_EIO, "%s: damaged gzip stream: %s", path, msg);
            break;
        }
        if (n > 0 && gzdirect(gz)) {
            rc = txo_error_set(err, TXO_EINVAL, "%s: not a gzip file", path);
            break;
        }
        out->len += (size_t)n;
        out->data[out->len] = '\0';
        if (n == 0)
            break;
    }
    int zclose = gzclose_r(gz);
    if (rc == 0 && zclose != Z_OK)
        rc = txo_error_set(err, TXO_EIO, "%s: damaged gzip stream (cut short or corrupt)", path);
    if (rc == 0 && out->len == 0)
        rc = txo_error_set(err, TXO_EINVAL, "%s: empty", path);
    return rc;
}

/* The basename of path. */
static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash != NULL ? slash + 1 : path;
}

/*
 * Parses one line. A JSON column may hold an integer past 64 bits, which jansson refuses: such
 * a line is parsed again with every integer as a double (*as_real set), the row's id included.
 * A string may hold \u0000: the writer escapes a NUL character of a value that way.
 */
static json_t *parse_line(const char *s, size_t len, bool *as_real)
{
    json_error_t e;
    size_t flags = JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL;
    json_t *j = json_loadb(s, len, flags, &e);
    *as_real = false;
    if (j == NULL && json_error_code(&e) == json_error_numeric_overflow) {
        j = json_loadb(s, len, flags | JSON_DECODE_INT_AS_REAL, NULL);
        *as_real = true;
    }
    return j;
}

/* The row's id: an integer, or with as_real a double that holds one exactly. */
static bool id_value(const json_t *v, bool as_real, int64_t *id)
{
    if (!as_real) {
        *id = json_integer_value(v);
        return json_is_integer(v);
    }
    double d = json_real_value(v);
    /* The range first: casting a double outside int64 is undefined. */
    if (!json_is_real(v) || !(d <= 9007199254740992.0 && d >= -9007199254740992.0) ||
        d != (double)(int64_t)d)
        return false;
    *id = (int64_t)d;
    return true;
}

/* What the header says that the rows are checked against. */
struct header {
    json_t *columns;
    size_t n_rows;
    uint32_t crc;
    const char *id_col;   /* named by ids */
    const char *key_col;  /* named by sequence: the key, */
    const char *time_col; /* the time, */
    enum txo_archive_type key_type;
    int64_t first_us, last_us; /* and the first and last row's time */
};

/* A time as a file holds it, "YYYY-MM-DDTHH:MM:SS[.f...]Z", in microseconds. */
static bool file_time(const char *s, int64_t *us)
{
    size_t len = s != NULL ? strlen(s) : 0;
    return len >= 20 && s[10] == 'T' && s[len - 1] == 'Z' && txo__text_rfc3339_us(s, us);
}

/* The type of the header's column name; false when there is no such column. */
static bool column_type(json_t *columns, const char *name, enum txo_archive_type *type)
{
    size_t i;
    json_t *col;
    json_array_foreach(columns, i, col)
    {
        const char *n = json_string_value(json_object_get(col, "name"));
        if (n != NULL && name != NULL && strcmp(n, name) == 0)
            return txo__archive_type_parse(json_string_value(json_object_get(col, "type")), type);
    }
    return false;
}

/* The members of a header named by ids; want receives the file's name. */
static int header_ids(const char *path, json_t *h, struct txo_archive_file *f, struct header *hd,
                      char *want, size_t want_size, struct txo_error *err)
{
    hd->id_col = json_string_value(json_object_get(h, "id_column"));
    json_t *first = json_object_get(h, "first_id");
    json_t *last = json_object_get(h, "last_id");
    if (hd->id_col == NULL || !json_is_integer(first) || !json_is_integer(last))
        return txo_error_set(err, TXO_EINVAL, "%s: header lacks an id member or has a bad one",
                             path);
    f->first_id = (int64_t)json_integer_value(first);
    f->last_id = (int64_t)json_integer_value(last);
    snprintf(want, want_size, "%s.%" PRId64 "-%" PRId64 SUFFIX, f->table, f->first_id, f->last_id);
    if (strcmp(base_name(path), want) != 0)
        return txo_error_set(err, TXO_EINVAL,
                             "%s: the header says table %s, ids %" PRId64 "-%" PRId64
                             ": the name should be %s",
                             path, f->table, f->first_id, f->last_id, want);
    return 0;
}

/* The members of a header named by sequence; want receives the file's name. */
static int header_seq(const char *path, json_t *h, struct txo_archive_file *f, struct header *hd,
                      char *want, size_t want_size, struct txo_error *err)
{
    enum txo_archive_type time_type = TXO_ARCHIVE_INT;
    hd->key_col = json_string_value(json_object_get(h, "key_column"));
    hd->time_col = json_string_value(json_object_get(h, "time_column"));
    json_t *seq = json_object_get(h, "seq");
    const char *first = json_string_value(json_object_get(h, "first_time"));
    const char *last = json_string_value(json_object_get(h, "last_time"));
    char stamp[TXO__ARCHIVE_STAMP_LEN];
    if (!column_type(hd->columns, hd->key_col, &hd->key_type) ||
        (hd->key_type != TXO_ARCHIVE_BINARY && hd->key_type != TXO_ARCHIVE_TEXT) ||
        !column_type(hd->columns, hd->time_col, &time_type) || time_type != TXO_ARCHIVE_TIME ||
        strcmp(hd->key_col, hd->time_col) == 0)
        return txo_error_set(err, TXO_EINVAL,
                             "%s: header: key_column is not a binary or text column, or "
                             "time_column not another, time one",
                             path);
    if (!json_is_integer(seq) || json_integer_value(seq) < 1 ||
        (uint64_t)json_integer_value(seq) > TXO_ARCHIVE_SEQ_MAX ||
        !file_time(first, &hd->first_us) || !file_time(last, &hd->last_us) ||
        !txo__archive_stamp(first, stamp))
        return txo_error_set(err, TXO_EINVAL,
                             "%s: header lacks a sequence or time member or has a bad one", path);
    f->seq = (uint64_t)json_integer_value(seq);
    if (!txo__archive_seq_name(want, want_size, f->table, f->seq, stamp) ||
        strcmp(base_name(path), want) != 0)
        return txo_error_set(err, TXO_EINVAL,
                             "%s: the header says table %s, sequence %" PRIu64
                             ", first time %s: the name should be %s",
                             path, f->table, f->seq, first, want);
    return 0;
}

/* Checks the header line and fills the file's table, version, name members and count. */
static int check_header(const char *path, json_t *h, struct txo_archive_file *f, struct header *hd,
                        struct txo_error *err)
{
    json_t *version = json_object_get(h, "txo_archive");
    json_int_t v = json_is_integer(version) ? json_integer_value(version) : 0;
    if (v != TXO_ARCHIVE_VERSION && v != TXO_ARCHIVE_VERSION_SEQ)
        return txo_error_set(err, TXO_EINVAL, "%s: not a txo archive of version %d or %d", path,
                             TXO_ARCHIVE_VERSION, TXO_ARCHIVE_VERSION_SEQ);
    const char *table = json_string_value(json_object_get(h, "table"));
    hd->columns = json_object_get(h, "columns");
    json_t *rows = json_object_get(h, "rows");
    const char *crc_hex = json_string_value(json_object_get(h, "crc32"));
    if (table == NULL || !json_is_array(hd->columns) || json_array_size(hd->columns) == 0 ||
        !json_is_integer(rows) || json_integer_value(rows) < 1 || crc_hex == NULL ||
        strlen(crc_hex) != 8)
        return txo_error_set(err, TXO_EINVAL, "%s: header lacks a member or has a bad one", path);
    size_t i;
    json_t *col;
    json_array_foreach(hd->columns, i, col)
    {
        enum txo_archive_type type;
        const char *name = json_string_value(json_object_get(col, "name"));
        const char *type_name = json_string_value(json_object_get(col, "type"));
        if (name == NULL || type_name == NULL || !txo__archive_type_parse(type_name, &type))
            return txo_error_set(err, TXO_EINVAL, "%s: header: column %zu is not valid", path, i);
    }
    hd->n_rows = (size_t)json_integer_value(rows);
    char *end = NULL;
    hd->crc = (uint32_t)strtoul(crc_hex, &end, 16);
    if (end == NULL || *end != '\0')
        return txo_error_set(err, TXO_EINVAL, "%s: header: crc32 is not hex", path);
    f->version = (int)v;
    f->table = txo_strdup(table);
    if (f->table == NULL)
        return txo_error_set(err, TXO_ENOMEM, "out of memory");
    char want[NAME_MAX + 1];
    return v == TXO_ARCHIVE_VERSION ? header_ids(path, h, f, hd, want, sizeof(want), err)
                                    : header_seq(path, h, f, hd, want, sizeof(want), err);
}

/* Row r of a file named by ids: its id, after the previous row's. */
static int row_id(const char *path, size_t line_no, json_t *row, bool as_real,
                  const struct header *hd, struct txo_archive_file *f, size_t r,
                  struct txo_error *err)
{
    int64_t *id = &f->ids[r];
    if (!id_value(json_object_get(row, hd->id_col), as_real, id))
        return txo_error_set(err, TXO_EINVAL, "%s: line %zu: %s is not an integer", path, line_no,
                             hd->id_col);
    if (r > 0 && *id <= f->ids[r - 1])
        return txo_error_set(err, TXO_EINVAL,
                             "%s: line %zu: id %" PRId64 " does not ascend (after %" PRId64 ")",
                             path, line_no, *id, f->ids[r - 1]);
    return 0;
}

/* Appends the bytes base64 text s[0..len) encodes; false when it is not base64. */
static bool put_unbase64(struct txo__buf *b, const char *s, size_t len)
{
    size_t pad = len > 0 && s[len - 1] == '=' ? (len > 1 && s[len - 2] == '=' ? 2 : 1) : 0;
    if (len % 4 != 0 || len > INT_MAX)
        return false;
    for (size_t i = 0; i < len - pad; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '+' || c == '/'))
            return false;
    }
    if (!txo__buf_reserve(b, len / 4 * 3))
        return false;
    int n = EVP_DecodeBlock((unsigned char *)b->data + b->len, (const unsigned char *)s, (int)len);
    if (n < 0 || (size_t)n < pad)
        return false;
    b->len += (size_t)n - pad;
    b->data[b->len] = '\0';
    return true;
}

/* Appends the bytes of a key's value: a string, or for a binary column {"base64":...}. */
static bool put_key(struct txo__buf *b, json_t *v, enum txo_archive_type type)
{
    if (json_is_string(v)) {
        txo__buf_put(b, json_string_value(v), json_string_length(v));
        return true;
    }
    json_t *text = json_object_get(v, "base64");
    return type == TXO_ARCHIVE_BINARY && json_object_size(v) == 1 && json_is_string(text) &&
           put_unbase64(b, json_string_value(text), json_string_length(text));
}

/* Row r of a file named by sequence: its key and time, after the previous row's. The key's
 * bytes go to keys at key_off[r]; f->keys[r].bytes is set once keys has stopped growing. */
static int row_key(const char *path, size_t line_no, json_t *row, const struct header *hd,
                   struct txo_archive_file *f, size_t r, struct txo__buf *keys, size_t *key_off,
                   struct txo_error *err)
{
    key_off[r] = keys->len;
    if (!put_key(keys, json_object_get(row, hd->key_col), hd->key_type))
        return keys->oom ? txo_error_set(err, TXO_ENOMEM, "out of memory")
                         : txo_error_set(err, TXO_EINVAL, "%s: line %zu: %s is not a key", path,
                                         line_no, hd->key_col);
    f->keys[r].len = keys->len - key_off[r];
    if (!file_time(json_string_value(json_object_get(row, hd->time_col)), &f->times_us[r]))
        return txo_error_set(err, TXO_EINVAL, "%s: line %zu: %s is not an RFC 3339 UTC time", path,
                             line_no, hd->time_col);
    if (r == 0)
        return 0;
    struct txo_archive_key prev = {keys->data + key_off[r - 1], f->keys[r - 1].len};
    struct txo_archive_key cur = {keys->data + key_off[r], f->keys[r].len};
    if (txo__archive_row_cmp(f->times_us[r - 1], &prev, f->times_us[r], &cur) >= 0)
        return txo_error_set(err, TXO_EINVAL,
                             "%s: line %zu does not come after the line before by (%s, %s)", path,
                             line_no, hd->time_col, hd->key_col);
    return 0;
}

/* Checks one row line: an object with exactly the header's columns, then its id or key. */
static int check_row(const char *path, size_t line_no, const char *s, size_t len,
                     const struct header *hd, struct txo_archive_file *f, size_t r,
                     struct txo__buf *keys, size_t *key_off, struct txo_error *err)
{
    bool as_real = false;
    json_t *row = parse_line(s, len, &as_real);
    int rc = 0;
    if (!json_is_object(row)) {
        rc = txo_error_set(err, TXO_EINVAL, "%s: line %zu is not a JSON object", path, line_no);
        goto out;
    }
    if (json_object_size(row) != json_array_size(hd->columns)) {
        rc = txo_error_set(err, TXO_EINVAL, "%s: line %zu has %zu columns, the header %zu", path,
                           line_no, json_object_size(row), json_array_size(hd->columns));
        goto out;
    }
    size_t i;
    json_t *col;
    json_array_foreach(hd->columns, i, col)
    {
        const char *name = json_string_value(json_object_get(col, "name"));
        if (json_object_get(row, name) == NULL) {
            rc = txo_error_set(err, TXO_EINVAL, "%s: line %zu has no column %s", path, line_no,
                               name);
            goto out;
        }
    }
    if (f->version == TXO_ARCHIVE_VERSION)
        rc = row_id(path, line_no, row, as_real, hd, f, r, err);
    else
        rc = row_key(path, line_no, row, hd, f, r, keys, key_off, err);
out:
    json_decref(row);
    return rc;
}

/* After every row of a file named by ids: its range is the one of the name. */
static int check_id_range(const char *path, const struct txo_archive_file *f, struct txo_error *err)
{
    if (f->ids[0] != f->first_id || f->ids[f->n_rows - 1] != f->last_id)
        return txo_error_set(err, TXO_EINVAL,
                             "%s: ids %" PRId64 "-%" PRId64 ", the name says %" PRId64 "-%" PRId64,
                             path, f->ids[0], f->ids[f->n_rows - 1], f->first_id, f->last_id);
    return 0;
}

/* After every row of a file named by sequence: the header's times, no key twice. */
static int check_keys(const char *path, const struct txo_archive_file *f, const struct header *hd,
                      struct txo_error *err)
{
    if (f->times_us[0] != hd->first_us || f->times_us[f->n_rows - 1] != hd->last_us)
        return txo_error_set(err, TXO_EINVAL,
                             "%s: the first and last %s are not the header's first_time and "
                             "last_time",
                             path, hd->time_col);
    bool twice = false;
    size_t dup = 0;
    if (txo__archive_key_twice(f->keys, f->n_rows, &twice, &dup) < 0)
        return txo_error_set(err, TXO_ENOMEM, "out of memory");
    if (twice)
        return txo_error_set(err, TXO_EINVAL, "%s: line %zu: a %s an earlier line has", path,
                             dup + 2, hd->key_col);
    return 0;
}

static int check_rows(const char *path, struct txo_archive_file *f, const struct header *hd,
                      struct txo_error *err)
{
    size_t n_rows = hd->n_rows;
    if (f->lines_len > 0 && f->lines[f->lines_len - 1] != '\n')
        return txo_error_set(err, TXO_EINVAL, "%s: the last line is cut short", path);
    uint32_t got = (uint32_t)crc32(0L, (const Bytef *)f->lines, (uInt)f->lines_len);
    if (got != hd->crc)
        return txo_error_set(err, TXO_EINVAL,
                             "%s: rows changed: CRC-32 %08" PRIx32 ", the header says %08" PRIx32,
                             path, got, hd->crc);
    size_t lines = 0;
    for (const char *q = f->lines; (q = memchr(q, '\n', (size_t)(f->lines + f->lines_len - q)));
         q++)
        lines++;
    if (lines != n_rows) /* before the header's count sizes anything */
        return txo_error_set(err, TXO_EINVAL, "%s: %zu rows, the header says %zu", path, lines,
                             n_rows);
    struct txo__buf keys = {0};
    size_t *key_off = NULL;
    int rc = 0;
    if (f->version == TXO_ARCHIVE_VERSION) {
        f->ids = txo_calloc(n_rows, sizeof(*f->ids));
    } else {
        f->keys = txo_calloc(n_rows, sizeof(*f->keys));
        f->times_us = txo_calloc(n_rows, sizeof(*f->times_us));
        key_off = txo_calloc(n_rows, sizeof(*key_off));
    }
    if (f->version == TXO_ARCHIVE_VERSION
            ? f->ids == NULL
            : f->keys == NULL || f->times_us == NULL || key_off == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "out of memory");
        goto out;
    }
    size_t count = 0;
    const char *p = f->lines, *end = f->lines + f->lines_len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        rc = check_row(path, count + 2, p, (size_t)(nl - p), hd, f, count, &keys, key_off, err);
        if (rc < 0)
            goto out;
        count++;
        p = nl + 1;
    }
    f->n_rows = count;
    if (f->version == TXO_ARCHIVE_VERSION) {
        rc = check_id_range(path, f, err);
        goto out;
    }
    f->key_bytes = keys.data;
    keys.data = NULL;
    for (size_t r = 0; r < count; r++)
        f->keys[r].bytes = f->key_bytes != NULL ? f->key_bytes + key_off[r] : "";
    rc = check_keys(path, f, hd, err);
out:
    txo_free(keys.data);
    txo_free(key_off);
    return rc;
}

void txo_archive_file_release(struct txo_archive_file *f)
{
    txo_free(f->table);
    txo_free(f->lines);
    txo_free(f->ids);
    txo_free(f->keys);
    txo_free(f->times_us);
    txo_free(f->key_bytes);
    memset(f, 0, sizeof(*f));
}

int txo_archive_read(const char *path, struct txo_archive_file *f, struct txo_error *err)
{
    memset(f, 0, sizeof(*f));
    struct txo__buf data = {0};
    json_t *header = NULL;
    int rc = gunzip_file(path, &data, err);
    if (rc < 0)
        goto out;
    char *nl = data.len > 0 ? memchr(data.data, '\n', data.len) : NULL;
    bool as_real = false;
    header = nl != NULL ? parse_line(data.data, (size_t)(nl - data.data), &as_real) : NULL;
    if (!json_is_object(header) || as_real) {
        rc = txo_error_set(err, TXO_EINVAL, "%s: the first line is not an archive header", path);
        goto out;
    }
    struct header hd = {0};
    rc = check_header(path, header, f, &hd, err);
    if (rc < 0)
        goto out;
    /* The row lines move to the front of the buffer, which f then owns. */
    f->lines_len = data.len - (size_t)(nl + 1 - data.data);
    memmove(data.data, nl + 1, f->lines_len);
    data.data[f->lines_len] = '\0';
    f->lines = data.data;
    data.data = NULL;
    rc = check_rows(path, f, &hd, err);
out:
    json_decref(header);
    txo_free(data.data);
    if (rc < 0)
        txo_archive_file_release(f);
    return rc;
}

/* True when name is "<table>.*.jsonl.gz" (temporary files start with '.'). */
static bool is_table_file(const char *name, const char *table)
{
    size_t tl = strlen(table), nl = strlen(name), sl = strlen(SUFFIX);
    return nl > tl + 1 + sl && strncmp(name, table, tl) == 0 && name[tl] == '.' &&
           strcmp(name + nl - sl, SUFFIX) == 0;
}

static bool newer(const struct stat *a, const char *a_name, const struct stat *b,
                  const char *b_name)
{
    if (a->st_mtim.tv_sec != b->st_mtim.tv_sec)
        return a->st_mtim.tv_sec > b->st_mtim.tv_sec;
    if (a->st_mtim.tv_nsec != b->st_mtim.tv_nsec)
        return a->st_mtim.tv_nsec > b->st_mtim.tv_nsec;
    return strcmp(a_name, b_name) > 0;
}

/* The newest file of each naming in a table's directory. */
struct newest {
    char by_ids[PATH_MAX]; /* "" when none */
    struct stat by_ids_st;
    char by_seq[PATH_MAX]; /* "" when none */
    uint64_t seq;
};

static int scan(const char *dir, const char *table, struct newest *out, struct txo_error *err)
{
    char sub[PATH_MAX], path[PATH_MAX];
    out->by_ids[0] = '\0';
    out->by_seq[0] = '\0';
    out->seq = 0;
    int n = snprintf(sub, sizeof(sub), "%s/%s", dir, table);
    if (n < 0 || (size_t)n >= sizeof(sub))
        return txo_error_set(err, TXO_EINVAL, "archive path too long: %s/%s", dir, table);
    DIR *d = opendir(sub);
    if (d == NULL)
        return errno == ENOENT ? 0 : txo_error_set(err, TXO_EIO, "%s: %s", sub, strerror(errno));
    int rc = 0;
    const struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!is_table_file(e->d_name, table))
            continue;
        n = snprintf(path, sizeof(path), "%s/%s", sub, e->d_name);
        if (n < 0 || (size_t)n >= sizeof(path))
            continue;
        uint64_t seq;
        if (txo__archive_seq_of(e->d_name, table, &seq)) {
            /* Never two files of one sequence from one writer; the greater name if so. */
            if (out->by_seq[0] == '\0' || seq > out->seq ||
                (seq == out->seq && strcmp(path, out->by_seq) > 0)) {
                memcpy(out->by_seq, path, (size_t)n + 1);
                out->seq = seq;
            }
            continue;
        }
        struct stat st;
        if (stat(path, &st) != 0) {
            rc = txo_error_set(err, TXO_EIO, "%s: %s", path, strerror(errno));
            break;
        }
        if (out->by_ids[0] == '\0' || newer(&st, path, &out->by_ids_st, out->by_ids)) {
            memcpy(out->by_ids, path, (size_t)n + 1);
            out->by_ids_st = st;
        }
    }
    closedir(d);
    return rc;
}

int txo_archive_newest(const char *dir, const char *table, char **path_out, struct txo_error *err)
{
    *path_out = NULL;
    struct newest *nw = txo_malloc(sizeof(*nw));
    if (nw == NULL)
        return txo_error_set(err, TXO_ENOMEM, "out of memory");
    int rc = scan(dir, table, nw, err);
    const char *best = nw->by_seq[0] != '\0' ? nw->by_seq : nw->by_ids;
    if (rc == 0 && best[0] != '\0') {
        *path_out = txo_strdup(best);
        if (*path_out == NULL)
            rc = txo_error_set(err, TXO_ENOMEM, "out of memory");
    }
    txo_free(nw);
    return rc;
}

int txo_archive_last_seq(const char *dir, const char *table, uint64_t *seq, struct txo_error *err)
{
    struct newest *nw = txo_malloc(sizeof(*nw));
    if (nw == NULL)
        return txo_error_set(err, TXO_ENOMEM, "out of memory");
    int rc = scan(dir, table, nw, err);
    if (rc == 0)
        *seq = nw->seq;
    txo_free(nw);
    return rc;
}
