#include "core/common.h"

/*
 * Reading archive files back (txo/archive.h has the format): one whole file is decompressed
 * into memory and checked line by line before anything is handed out, so `txo archive cat`
 * prints only files that verify and the cleaner's crash rule (src/retention) deletes rows only
 * by the ids of a file that is whole. Also finds a table's newest file for that rule.
 *
 * Thread-safety: no shared state.
 */

#include <dirent.h>
#include <limits.h>
#include <sys/stat.h>

#include <jansson.h>
#include <zlib.h>

#include "archive/archive_internal.h"
#include "core/buf.h"
#include "txo/archive.h"

#define SUFFIX ".jsonl.gz"

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

/* Checks the header line and fills the file's table, range and count; *columns and *id_col out. */
static int check_header(const char *path, json_t *h, struct txo_archive_file *f, size_t *n_rows,
                        uint32_t *crc, const char **id_col, json_t **columns, struct txo_error *err)
{
    json_t *version = json_object_get(h, "txo_archive");
    if (!json_is_integer(version) || json_integer_value(version) != TXO_ARCHIVE_VERSION)
        return txo_error_set(err, TXO_EINVAL, "%s: not a txo archive of version %d", path,
                             TXO_ARCHIVE_VERSION);
    const char *table = json_string_value(json_object_get(h, "table"));
    *id_col = json_string_value(json_object_get(h, "id_column"));
    *columns = json_object_get(h, "columns");
    json_t *first = json_object_get(h, "first_id");
    json_t *last = json_object_get(h, "last_id");
    json_t *rows = json_object_get(h, "rows");
    const char *crc_hex = json_string_value(json_object_get(h, "crc32"));
    if (table == NULL || *id_col == NULL || !json_is_array(*columns) ||
        json_array_size(*columns) == 0 || !json_is_integer(first) || !json_is_integer(last) ||
        !json_is_integer(rows) || json_integer_value(rows) < 1 || crc_hex == NULL ||
        strlen(crc_hex) != 8)
        return txo_error_set(err, TXO_EINVAL, "%s: header lacks a member or has a bad one", path);
    size_t i;
    json_t *col;
    json_array_foreach(*columns, i, col)
    {
        enum txo_archive_type type;
        const char *name = json_string_value(json_object_get(col, "name"));
        const char *type_name = json_string_value(json_object_get(col, "type"));
        if (name == NULL || type_name == NULL || !txo__archive_type_parse(type_name, &type))
            return txo_error_set(err, TXO_EINVAL, "%s: header: column %zu is not valid", path, i);
    }
    f->first_id = (int64_t)json_integer_value(first);
    f->last_id = (int64_t)json_integer_value(last);
    *n_rows = (size_t)json_integer_value(rows);
    char *end = NULL;
    *crc = (uint32_t)strtoul(crc_hex, &end, 16);
    if (end == NULL || *end != '\0')
        return txo_error_set(err, TXO_EINVAL, "%s: header: crc32 is not hex", path);
    char want[NAME_MAX + 1];
    snprintf(want, sizeof(want), "%s.%" PRId64 "-%" PRId64 SUFFIX, table, f->first_id, f->last_id);
    if (strcmp(base_name(path), want) != 0)
        return txo_error_set(err, TXO_EINVAL,
                             "%s: the header says table %s, ids %" PRId64 "-%" PRId64
                             ": the name should be %s",
                             path, table, f->first_id, f->last_id, want);
    f->table = txo_strdup(table);
    return f->table != NULL ? 0 : txo_error_set(err, TXO_ENOMEM, "out of memory");
}

/* Checks one row line: an object with exactly the header's columns, its id after prev. */
static int check_row(const char *path, size_t line_no, const char *s, size_t len, json_t *columns,
                     const char *id_col, bool has_prev, int64_t prev, int64_t *id,
                     struct txo_error *err)
{
    bool as_real = false;
    json_t *row = parse_line(s, len, &as_real);
    int rc = 0;
    if (!json_is_object(row)) {
        rc = txo_error_set(err, TXO_EINVAL, "%s: line %zu is not a JSON object", path, line_no);
        goto out;
    }
    if (json_object_size(row) != json_array_size(columns)) {
        rc = txo_error_set(err, TXO_EINVAL, "%s: line %zu has %zu columns, the header %zu", path,
                           line_no, json_object_size(row), json_array_size(columns));
        goto out;
    }
    size_t i;
    json_t *col;
    json_array_foreach(columns, i, col)
    {
        const char *name = json_string_value(json_object_get(col, "name"));
        if (json_object_get(row, name) == NULL) {
            rc = txo_error_set(err, TXO_EINVAL, "%s: line %zu has no column %s", path, line_no,
                               name);
            goto out;
        }
    }
    if (!id_value(json_object_get(row, id_col), as_real, id)) {
        rc = txo_error_set(err, TXO_EINVAL, "%s: line %zu: %s is not an integer", path, line_no,
                           id_col);
        goto out;
    }
    if (has_prev && *id <= prev)
        rc = txo_error_set(err, TXO_EINVAL,
                           "%s: line %zu: id %" PRId64 " does not ascend (after %" PRId64 ")", path,
                           line_no, *id, prev);
out:
    json_decref(row);
    return rc;
}

static int check_rows(const char *path, struct txo_archive_file *f, size_t n_rows, uint32_t crc,
                      const char *id_col, json_t *columns, struct txo_error *err)
{
    if (f->lines_len > 0 && f->lines[f->lines_len - 1] != '\n')
        return txo_error_set(err, TXO_EINVAL, "%s: the last line is cut short", path);
    uint32_t got = (uint32_t)crc32(0L, (const Bytef *)f->lines, (uInt)f->lines_len);
    if (got != crc)
        return txo_error_set(err, TXO_EINVAL,
                             "%s: rows changed: CRC-32 %08" PRIx32 ", the header says %08" PRIx32,
                             path, got, crc);
    size_t lines = 0;
    for (const char *q = f->lines; (q = memchr(q, '\n', (size_t)(f->lines + f->lines_len - q)));
         q++)
        lines++;
    if (lines != n_rows) /* before the header's count sizes anything */
        return txo_error_set(err, TXO_EINVAL, "%s: %zu rows, the header says %zu", path, lines,
                             n_rows);
    f->ids = txo_calloc(n_rows, sizeof(*f->ids));
    if (f->ids == NULL)
        return txo_error_set(err, TXO_ENOMEM, "out of memory");
    size_t count = 0;
    const char *p = f->lines, *end = f->lines + f->lines_len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (count == n_rows)
            return txo_error_set(err, TXO_EINVAL, "%s: more rows than the header's %zu", path,
                                 n_rows);
        int64_t id = 0;
        int rc = check_row(path, count + 2, p, (size_t)(nl - p), columns, id_col, count > 0,
                           count > 0 ? f->ids[count - 1] : 0, &id, err);
        if (rc < 0)
            return rc;
        f->ids[count++] = id;
        p = nl + 1;
    }
    if (count != n_rows)
        return txo_error_set(err, TXO_EINVAL, "%s: %zu rows, the header says %zu", path, count,
                             n_rows);
    if (f->ids[0] != f->first_id || f->ids[count - 1] != f->last_id)
        return txo_error_set(err, TXO_EINVAL,
                             "%s: ids %" PRId64 "-%" PRId64 ", the name says %" PRId64 "-%" PRId64,
                             path, f->ids[0], f->ids[count - 1], f->first_id, f->last_id);
    f->n_rows = count;
    return 0;
}

void txo_archive_file_release(struct txo_archive_file *f)
{
    txo_free(f->table);
    txo_free(f->lines);
    txo_free(f->ids);
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
    size_t n_rows = 0;
    uint32_t crc = 0;
    const char *id_col = NULL;
    json_t *columns = NULL;
    rc = check_header(path, header, f, &n_rows, &crc, &id_col, &columns, err);
    if (rc < 0)
        goto out;
    /* The row lines move to the front of the buffer, which f then owns. */
    f->lines_len = data.len - (size_t)(nl + 1 - data.data);
    memmove(data.data, nl + 1, f->lines_len);
    data.data[f->lines_len] = '\0';
    f->lines = data.data;
    data.data = NULL;
    rc = check_rows(path, f, n_rows, crc, id_col, columns, err);
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

int txo_archive_newest(const char *dir, const char *table, char **path_out, struct txo_error *err)
{
    char sub[PATH_MAX], path[PATH_MAX], best[PATH_MAX] = "";
    struct stat best_st = {0};
    *path_out = NULL;
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
        struct stat st;
        n = snprintf(path, sizeof(path), "%s/%s", sub, e->d_name);
        if (n < 0 || (size_t)n >= sizeof(path))
            continue;
        if (stat(path, &st) != 0) {
            rc = txo_error_set(err, TXO_EIO, "%s: %s", path, strerror(errno));
            break;
        }
        if (best[0] == '\0' || newer(&st, path, &best_st, best)) {
            memcpy(best, path, (size_t)n + 1);
            best_st = st;
        }
    }
    closedir(d);
    if (rc == 0 && best[0] != '\0') {
        *path_out = txo_strdup(best);
        if (*path_out == NULL)
            rc = txo_error_set(err, TXO_ENOMEM, "out of memory");
    }
    return rc;
}
