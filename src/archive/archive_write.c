#include "core/common.h"

/*
 * Writing one archive file (txo/archive.h has the format), named by ids or by sequence: the
 * rows of a batch are checked in the order their file's reader will check them, become JSON
 * lines in memory, the header goes in front with their count and CRC-32, the whole is gzipped
 * in one deflate pass and written under a temporary name that is fsynced, renamed into place,
 * and made durable by an fsync of the directory. A name ending in .jsonl.gz therefore always
 * holds a whole file, which is what the cleaner's crash rule relies on (src/retention).
 *
 * Values are encoded here by hand rather than through a parsed jansson tree so that a JSON
 * column keeps its numbers exactly as the server stored them (jansson would turn a large one
 * into a double); only its insignificant whitespace is dropped, which keeps a row on one line.
 *
 * Thread-safety: no shared state; the caller owns the rows and the directory.
 */

#include <limits.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <zlib.h>

#include "archive/archive_internal.h"
#include "core/buf.h"
#include "core/text.h"
#include "txo/archive.h"

int txo_archive_check_dir(const char *dir, struct txo_error *err)
{
    struct stat st;
    if (dir == NULL || dir[0] == '\0')
        return txo_error_set(err, TXO_ECONFIG, "archive directory: empty path");
    if (stat(dir, &st) != 0)
        return txo_error_set(err, TXO_ECONFIG, "archive directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return txo_error_set(err, TXO_ECONFIG, "archive directory %s: not a directory", dir);
    if (access(dir, W_OK | X_OK) != 0)
        return txo_error_set(err, TXO_ECONFIG, "archive directory %s: not writable: %s", dir,
                             strerror(errno));
    return 0;
}

/* Appends j in compact form. */
static void put_json(struct txo__buf *b, const json_t *j)
{
    size_t flags = JSON_COMPACT | JSON_ENCODE_ANY;
    size_t n = json_dumpb(j, NULL, 0, flags);
    if (n == 0 || !txo__buf_reserve(b, n))
        return;
    json_dumpb(j, b->data + b->len, n, flags);
    b->len += n;
    b->data[b->len] = '\0';
}

/* Appends s[0..len) as a JSON string; false when it is not UTF-8. */
static bool put_string(struct txo__buf *b, const char *s, size_t len)
{
    json_t *j = json_stringn(s, len);
    if (j == NULL)
        return false;
    put_json(b, j);
    json_decref(j);
    return true;
}

static bool put_base64(struct txo__buf *b, const char *s, size_t len)
{
    size_t n = 4 * ((len + 2) / 3);
    txo__buf_puts(b, "{\"base64\":\"");
    if (!txo__buf_reserve(b, n + 1))
        return false;
    EVP_EncodeBlock((unsigned char *)b->data + b->len, (const unsigned char *)s, (int)len);
    b->len += n;
    txo__buf_puts(b, "\"}");
    return true;
}

/* Appends the server's JSON text without the whitespace between its tokens. */
static void put_json_text(struct txo__buf *b, const char *s, size_t len)
{
    bool in_string = false;
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            txo__buf_put(b, s + start, i - start);
            start = i + 1;
        }
    }
    if (start < len)
        txo__buf_put(b, s + start, len - start);
}

/* "YYYY-MM-DD HH:MM:SS[.ffffff]" (the session is in UTC) as RFC 3339, into out. */
static bool time_text(const char *s, size_t len, char out[TXO_RFC3339_LEN])
{
    if (len < 19 || len + 1 >= TXO_RFC3339_LEN || s[10] != ' ')
        return false;
    memcpy(out, s, len);
    out[10] = 'T';
    out[len] = 'Z';
    out[len + 1] = '\0';
    return true;
}

static bool put_time(struct txo__buf *b, const char *s, size_t len)
{
    char text[TXO_RFC3339_LEN];
    if (!time_text(s, len, text))
        return false;
    txo__buf_put(b, "\"", 1);
    txo__buf_puts(b, text);
    txo__buf_put(b, "\"", 1);
    return true;
}

static bool is_integer(const char *s, size_t len)
{
    size_t i = len > 0 && s[0] == '-' ? 1 : 0;
    if (i == len)
        return false;
    for (; i < len; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

static int put_value(struct txo__buf *b, const struct txo_archive_column *col,
                     const struct txo_rows *rows, size_t r, size_t c, struct txo_error *err)
{
    size_t len = 0;
    const char *v = txo_rows_str(rows, r, c, &len);
    if (v == NULL) {
        txo__buf_puts(b, "null");
        return 0;
    }
    bool ok = true;
    switch (col->type) {
    case TXO_ARCHIVE_INT:
        /* Past INT64_MAX (BIGINT UNSIGNED) a reader's integer would overflow: a string. */
        if (is_integer(v, len) && (len < 19 || txo_rows_i64(rows, r, c) != INT64_MAX))
            txo__buf_put(b, v, len);
        else
            ok = put_string(b, v, len);
        break;
    case TXO_ARCHIVE_REAL:
        txo__buf_put(b, v, len);
        break;
    case TXO_ARCHIVE_TEXT:
        ok = put_string(b, v, len);
        break;
    case TXO_ARCHIVE_BINARY:
        ok = put_string(b, v, len) || put_base64(b, v, len);
        break;
    case TXO_ARCHIVE_JSON:
        ok = len > 0;
        put_json_text(b, v, len);
        break;
    case TXO_ARCHIVE_TIME:
        ok = put_time(b, v, len);
        break;
    }
    if (!ok)
        return txo_error_set(err, TXO_EINVAL, "column %s of row %zu: a value a %s cannot hold",
                             col->name, r, txo__archive_type_name(col->type));
    return 0;
}

/* Checks that the ids of a file named by ids ascend. */
static int check_ids(const struct txo_rows *rows, size_t id_col, struct txo_error *err)
{
    size_t n = txo_rows_count(rows);
    for (size_t r = 1; r < n; r++) {
        int64_t id = txo_rows_i64(rows, r, id_col), prev = txo_rows_i64(rows, r - 1, id_col);
        if (id <= prev)
            return txo_error_set(err, TXO_EINVAL, "ids not ascending: %" PRId64 " after %" PRId64,
                                 id, prev);
    }
    return 0;
}

/*
 * Checks the rows of a file named by sequence as its reader will (archive_seq.c): key and time
 * never NULL, the rows ascending by (time, key), no key twice.
 */
static int check_seq_rows(const struct txo_rows *rows, const struct txo_archive_column *cols,
                          size_t key_col, size_t time_col, struct txo_error *err)
{
    size_t n = txo_rows_count(rows);
    struct txo_archive_key *keys = txo_calloc(n, sizeof(*keys));
    int64_t *times = txo_calloc(n, sizeof(*times));
    int rc = 0;
    if (keys == NULL || times == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t r = 0; r < n; r++) {
        keys[r].bytes = txo_rows_str(rows, r, key_col, &keys[r].len);
        const char *at = txo_rows_str(rows, r, time_col, NULL);
        if (keys[r].bytes == NULL || at == NULL || !txo__text_rfc3339_us(at, &times[r])) {
            rc = txo_error_set(err, TXO_EINVAL, "row %zu: no %s or no %s", r, cols[key_col].name,
                               cols[time_col].name);
            goto out;
        }
        if (r > 0 && txo__archive_row_cmp(times[r - 1], &keys[r - 1], times[r], &keys[r]) >= 0) {
            rc = txo_error_set(err, TXO_EINVAL, "row %zu is not after row %zu by (%s, %s)", r,
                               r - 1, cols[time_col].name, cols[key_col].name);
            goto out;
        }
    }
    bool twice = false;
    size_t dup = 0;
    if (txo__archive_key_twice(keys, n, &twice, &dup) < 0)
        rc = txo_error_set(err, TXO_ENOMEM, "out of memory");
    else if (twice)
        rc = txo_error_set(err, TXO_EINVAL, "row %zu: a %s an earlier row has", dup,
                           cols[key_col].name);
out:
    txo_free(keys);
    txo_free(times);
    return rc;
}

/* The row lines. */
static int encode_rows(struct txo__buf *body, const struct txo_archive_column *cols, size_t n_cols,
                       const struct txo_rows *rows, struct txo_error *err)
{
    size_t n = txo_rows_count(rows);
    for (size_t r = 0; r < n; r++) {
        txo__buf_put(body, "{", 1);
        for (size_t c = 0; c < n_cols; c++) {
            if (c > 0)
                txo__buf_put(body, ",", 1);
            if (!put_string(body, cols[c].name, strlen(cols[c].name)))
                return txo_error_set(err, TXO_EINVAL, "a column name that is not UTF-8");
            txo__buf_put(body, ":", 1);
            int rc = put_value(body, &cols[c], rows, r, c, err);
            if (rc < 0)
                return rc;
        }
        txo__buf_put(body, "}\n", 2);
    }
    return body->oom ? txo_error_set(err, TXO_ENOMEM, "out of memory") : 0;
}

static json_t *header_columns(const struct txo_archive_column *cols, size_t n_cols)
{
    json_t *columns = json_array();
    for (size_t c = 0; columns != NULL && c < n_cols; c++)
        json_array_append_new(columns, json_pack("{s:s, s:s}", "name", cols[c].name, "type",
                                                 txo__archive_type_name(cols[c].type)));
    return columns;
}

/* Appends the header h (NULL: out of memory) as the first line, and releases it. */
static int put_header(struct txo__buf *head, json_t *h, struct txo_error *err)
{
    if (h == NULL)
        return txo_error_set(err, TXO_ENOMEM, "out of memory building the archive header");
    put_json(head, h);
    json_decref(h);
    txo__buf_put(head, "\n", 1);
    return head->oom ? txo_error_set(err, TXO_ENOMEM, "out of memory") : 0;
}

static int encode_header_ids(struct txo__buf *head, const char *table,
                             const struct txo_archive_column *cols, size_t n_cols, size_t id_col,
                             int64_t first, int64_t last, size_t n_rows, const char *crc_hex,
                             struct txo_error *err)
{
    json_t *h =
        json_pack("{s:i, s:s, s:o, s:s, s:I, s:I, s:I, s:s}", "txo_archive", TXO_ARCHIVE_VERSION,
                  "table", table, "columns", header_columns(cols, n_cols), "id_column",
                  cols[id_col].name, "first_id", (json_int_t)first, "last_id", (json_int_t)last,
                  "rows", (json_int_t)n_rows, "crc32", crc_hex);
    return put_header(head, h, err);
}

static int encode_header_seq(struct txo__buf *head, const char *table,
                             const struct txo_archive_column *cols, size_t n_cols, size_t key_col,
                             size_t time_col, uint64_t seq, const char *first_time,
                             const char *last_time, size_t n_rows, const char *crc_hex,
                             struct txo_error *err)
{
    json_t *h =
        json_pack("{s:i, s:s, s:o, s:s, s:s, s:I, s:s, s:s, s:I, s:s}", "txo_archive",
                  TXO_ARCHIVE_VERSION_SEQ, "table", table, "columns", header_columns(cols, n_cols),
                  "key_column", cols[key_col].name, "time_column", cols[time_col].name, "seq",
                  (json_int_t)seq, "first_time", first_time, "last_time", last_time, "rows",
                  (json_int_t)n_rows, "crc32", crc_hex);
    return put_header(head, h, err);
}

/* gzip of head then body, into *out (txo_free). */
static int gzip_parts(const struct txo__buf *head, const struct txo__buf *body,
                      struct txo__buf *out, struct txo_error *err)
{
    z_stream z = {0};
    /* 15 + 16: a gzip wrapper around the deflate stream. */
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return txo_error_set(err, TXO_ENOMEM, "zlib: cannot start a gzip stream");
    int rc = 0;
    size_t cap = deflateBound(&z, (uLong)(head->len + body->len)) + 64;
    if (!txo__buf_reserve(out, cap)) {
        rc = txo_error_set(err, TXO_ENOMEM, "out of memory compressing %zu bytes", body->len);
        goto out;
    }
    z.next_out = (Bytef *)out->data;
    z.avail_out = (uInt)cap;
    z.next_in = (Bytef *)head->data;
    z.avail_in = (uInt)head->len;
    int zrc = deflate(&z, Z_NO_FLUSH);
    if (zrc == Z_OK) {
        z.next_in = (Bytef *)body->data;
        z.avail_in = (uInt)body->len;
        zrc = deflate(&z, Z_FINISH);
    }
    if (zrc != Z_STREAM_END) {
        rc = txo_error_set(err, TXO_EIO, "zlib: deflate failed (%d)", zrc);
        goto out;
    }
    out->len = z.total_out;
out:
    deflateEnd(&z);
    return rc;
}

static int fsync_dir(const char *dir, struct txo_error *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return txo_error_set(err, TXO_EIO, "open %s: %s", dir, strerror(errno));
    int rc = 0;
    if (fsync(fd) != 0)
        rc = txo_error_set(err, TXO_EIO, "fsync %s: %s", dir, strerror(errno));
    close(fd);
    return rc;
}

/* DIR/<table>, created (and made durable) when missing. */
static int table_dir(const char *dir, const char *table, char *out, size_t out_size,
                     struct txo_error *err)
{
    int n = snprintf(out, out_size, "%s/%s", dir, table);
    if (n < 0 || (size_t)n >= out_size)
        return txo_error_set(err, TXO_EINVAL, "archive path too long: %s/%s", dir, table);
    if (mkdir(out, 0755) == 0)
        return fsync_dir(dir, err);
    if (errno != EEXIST)
        return txo_error_set(err, TXO_EIO, "mkdir %s: %s", out, strerror(errno));
    return 0;
}

/*
 * Writes data to tmp, fsyncs it, renames it to path and fsyncs dir. No tmp is left behind.
 * Without replace, a file already at path is left and the call fails (TXO_ECONFLICT): a file
 * named by sequence is written once, and another one of its name can only come from a second
 * writer in the directory, whose rows the first file's would otherwise replace. (A check, not
 * a lock: two writers in the same instant can still both rename.)
 */
static int write_durably(const char *dir, const char *tmp, const char *path, bool replace,
                         const struct txo__buf *data, struct txo_error *err)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return txo_error_set(err, TXO_EIO, "create %s: %s", tmp, strerror(errno));
    int rc = 0;
    for (size_t off = 0; off < data->len;) {
        ssize_t w = write(fd, data->data + off, data->len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            rc = txo_error_set(err, TXO_EIO, "write %s: %s", tmp, strerror(errno));
            break;
        }
        off += (size_t)w;
    }
    if (rc == 0 && fsync(fd) != 0)
        rc = txo_error_set(err, TXO_EIO, "fsync %s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && rc == 0)
        rc = txo_error_set(err, TXO_EIO, "close %s: %s", tmp, strerror(errno));
    if (rc == 0 && !replace && access(path, F_OK) == 0)
        rc = txo_error_set(err, TXO_ECONFLICT,
                           "%s exists already: does another cleaner archive to this directory?",
                           path);
    if (rc == 0 && rename(tmp, path) != 0)
        rc = txo_error_set(err, TXO_EIO, "rename %s: %s", tmp, strerror(errno));
    if (rc < 0) {
        unlink(tmp);
        return rc;
    }
    rc = fsync_dir(dir, err);
    if (rc < 0)
        unlink(path); /* not durable: rather no file than one that may vanish */
    return rc;
}

/* Checks the arguments both writers share. */
static int check_args(const char *dir, const char *table, const struct txo_archive_column *cols,
                      size_t n_cols, const struct txo_rows *rows, struct txo_error *err)
{
    if (dir == NULL || table == NULL || cols == NULL || rows == NULL || txo_rows_count(rows) == 0 ||
        txo_rows_columns(rows) != n_cols)
        return txo_error_set(err, TXO_EINVAL, "archive %s: no rows or columns that do not match",
                             table != NULL ? table : "?");
    return 0;
}

/*
 * Writes head and body, gzipped, as DIR/<table>/<name> (durably, and replacing a file of that
 * name or not: see write_durably()). *path_out (may be NULL) receives the path.
 */
static int write_file(const char *dir, const char *table, const char *name, bool replace,
                      const struct txo__buf *head, const struct txo__buf *body, char **path_out,
                      struct txo_error *err)
{
    struct txo__buf gz = {0};
    char sub[PATH_MAX], path[PATH_MAX], tmp[PATH_MAX];
    int rc = gzip_parts(head, body, &gz, err);
    if (rc == 0)
        rc = table_dir(dir, table, sub, sizeof(sub), err);
    if (rc < 0)
        goto out;
    int np = snprintf(path, sizeof(path), "%s/%s", sub, name);
    int nt = snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", sub, name);
    if (np < 0 || (size_t)np >= sizeof(path) || nt < 0 || (size_t)nt >= sizeof(tmp)) {
        rc = txo_error_set(err, TXO_EINVAL, "archive path too long under %s", sub);
        goto out;
    }
    rc = write_durably(sub, tmp, path, replace, &gz, err);
    if (rc == 0 && path_out != NULL) {
        *path_out = txo_strdup(path);
        if (*path_out == NULL)
            rc = txo_error_set(err, TXO_ENOMEM, "out of memory");
    }
out:
    txo_free(gz.data);
    return rc;
}

static void crc_of(const struct txo__buf *body, char crc_hex[9])
{
    uint32_t crc = (uint32_t)crc32(0L, (const Bytef *)body->data, (uInt)body->len);
    snprintf(crc_hex, 9, "%08" PRIx32, crc);
}

/* An archive file as a writer encoded it, before it is written: its name and its parts. */
struct archive_file {
    char name[NAME_MAX + 1];
    struct txo__buf head, body;
};

/*
 * The end both writers share: writes f (write_file()) when its encoding went well (rc 0), then
 * frees its parts. Returns rc or the write's error, named after the table.
 */
static int write_and_release(const char *dir, const char *table, struct archive_file *f, int rc,
                             bool replace, char **path_out, struct txo_error *err)
{
    if (rc == 0)
        rc = write_file(dir, table, f->name, replace, &f->head, &f->body, path_out, err);
    if (rc < 0)
        txo_error_wrap(err, "archive %s", table != NULL ? table : "?");
    txo_free(f->body.data);
    txo_free(f->head.data);
    return rc;
}

static int encode_ids(struct archive_file *f, const char *dir, const char *table,
                      const struct txo_archive_column *cols, size_t n_cols, size_t id_col,
                      const struct txo_rows *rows, struct txo_error *err)
{
    char crc_hex[9];
    int rc = check_args(dir, table, cols, n_cols, rows, err);
    if (rc == 0 && id_col >= n_cols)
        rc = txo_error_set(err, TXO_EINVAL, "no id column %zu", id_col);
    if (rc == 0)
        rc = check_ids(rows, id_col, err);
    if (rc == 0)
        rc = encode_rows(&f->body, cols, n_cols, rows, err);
    if (rc < 0)
        return rc;
    size_t n = txo_rows_count(rows);
    int64_t first = txo_rows_i64(rows, 0, id_col);
    int64_t last = txo_rows_i64(rows, n - 1, id_col);
    crc_of(&f->body, crc_hex);
    rc = encode_header_ids(&f->head, table, cols, n_cols, id_col, first, last, n, crc_hex, err);
    if (rc < 0)
        return rc;
    int nn = snprintf(f->name, sizeof(f->name), "%s.%" PRId64 "-%" PRId64 TXO__ARCHIVE_SUFFIX,
                      table, first, last);
    if (nn < 0 || (size_t)nn >= sizeof(f->name))
        return txo_error_set(err, TXO_EINVAL, "archive file name too long");
    return 0;
}

int txo_archive_write(const char *dir, const char *table, const struct txo_archive_column *cols,
                      size_t n_cols, size_t id_col, const struct txo_rows *rows, char **path_out,
                      struct txo_error *err)
{
    struct archive_file f = {0};
    int rc = encode_ids(&f, dir, table, cols, n_cols, id_col, rows, err);
    return write_and_release(dir, table, &f, rc, true, path_out, err);
}

static int encode_seq(struct archive_file *f, const char *dir, const char *table,
                      const struct txo_archive_column *cols, size_t n_cols, size_t key_col,
                      size_t time_col, uint64_t seq, const struct txo_rows *rows,
                      struct txo_error *err)
{
    char crc_hex[9], stamp[TXO__ARCHIVE_STAMP_LEN];
    char first[TXO_RFC3339_LEN], last[TXO_RFC3339_LEN];
    int rc = check_args(dir, table, cols, n_cols, rows, err);
    if (rc == 0 &&
        (key_col >= n_cols || time_col >= n_cols || key_col == time_col ||
         (cols[key_col].type != TXO_ARCHIVE_BINARY && cols[key_col].type != TXO_ARCHIVE_TEXT) ||
         cols[time_col].type != TXO_ARCHIVE_TIME))
        rc = txo_error_set(err, TXO_EINVAL, "no binary or text key and time columns (%zu, %zu)",
                           key_col, time_col);
    if (rc == 0 && (seq < 1 || seq > TXO_ARCHIVE_SEQ_MAX))
        rc = txo_error_set(err, TXO_EINVAL, "sequence %" PRIu64 " is not in 1..%llu", seq,
                           TXO_ARCHIVE_SEQ_MAX);
    if (rc == 0)
        rc = check_seq_rows(rows, cols, key_col, time_col, err);
    if (rc == 0)
        rc = encode_rows(&f->body, cols, n_cols, rows, err);
    if (rc < 0)
        return rc;
    size_t n = txo_rows_count(rows), first_len = 0, last_len = 0;
    const char *first_at = txo_rows_str(rows, 0, time_col, &first_len);
    const char *last_at = txo_rows_str(rows, n - 1, time_col, &last_len);
    if (!time_text(first_at, first_len, first) || !time_text(last_at, last_len, last) ||
        !txo__archive_stamp(first_at, stamp) ||
        !txo__archive_seq_name(f->name, sizeof(f->name), table, seq, stamp))
        return txo_error_set(err, TXO_EINVAL, "a time %s cannot hold, or a name too long",
                             cols[time_col].name);
    crc_of(&f->body, crc_hex);
    return encode_header_seq(&f->head, table, cols, n_cols, key_col, time_col, seq, first, last, n,
                             crc_hex, err);
}

int txo_archive_write_seq(const char *dir, const char *table, const struct txo_archive_column *cols,
                          size_t n_cols, size_t key_col, size_t time_col, uint64_t seq,
                          const struct txo_rows *rows, char **path_out, struct txo_error *err)
{
    struct archive_file f = {0};
    int rc = encode_seq(&f, dir, table, cols, n_cols, key_col, time_col, seq, rows, err);
    return write_and_release(dir, table, &f, rc, false, path_out, err);
}
