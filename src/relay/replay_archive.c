#include "core/common.h"

/*
 * The replay's second source: the outbox rows that retention removed, from the files of
 * `txo clean --archive DIR` (txo/archive.h), for events the table no longer has.
 *
 * Only the outbox's files are read: the dead letters' and the inbox's, in DIR's other table
 * directories, are not events to publish, and a DIR without an outbox_events directory (the
 * inbox's own directory given by mistake, say) is refused, saying so.
 *
 * The files of DIR/outbox_events are listed once and sorted by their first id; they cover
 * disjoint, ascending id ranges, so reading them in that order is reading the events in id
 * order, and the replay's cursor (the last id acknowledged) says where to go on. A file is
 * read and verified whole (txo_archive_read()) when the cursor reaches it. Each row line is a
 * JSON object with every column; the chosen ones are turned into the relay's claim columns
 * (enum claim_col), values as the server would have sent them, so that the relay's own code
 * builds the messages. Published rows only: PUBLISHED, or PENDING (a binlog source published
 * it and retention removed it as published).
 *
 * Thread-safety: the replay's thread only.
 */

#include "db/rows_build.h"
#include "relay/relay_internal.h"
#include "relay/replay_internal.h"
#include "txo/archive.h"

#include <dirent.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#define OUTBOX "outbox_events"

struct archived {
    char *path;
    int64_t first_id, last_id;
};

struct txo__replay_archive {
    struct archived *files; /* sorted by first_id */
    size_t n_files;
    size_t at;   /* the file loaded (when loaded) or to load next */
    bool loaded; /* file holds files[at] */
    struct txo_archive_file file;
    size_t row;                 /* the next row line of file to look at */
    size_t line_at;             /* its offset in file.lines */
    int64_t since_us, until_us; /* the filter's times; INT64_MIN/MAX: none */
};

static int cmp_files(const void *a, const void *b)
{
    const struct archived *x = a, *y = b;
    return (x->first_id > y->first_id) - (x->first_id < y->first_id);
}

/* "outbox_events.<first>-<last>.jsonl.gz": the id range, or false for another name. */
static bool file_range(const char *name, int64_t *first, int64_t *last)
{
    long long a = 0, b = 0;
    int used = 0;
    if (sscanf(name, OUTBOX ".%lld-%lld.jsonl.gz%n", &a, &b, &used) != 2 || name[used] != '\0' ||
        a < 1 || b < a)
        return false;
    *first = a;
    *last = b;
    return true;
}

/* A filter time ("YYYY-MM-DD" or with a time of day) in microseconds. */
static bool filter_us(const char *t, int64_t none, int64_t *us)
{
    if (t == NULL) {
        *us = none;
        return true;
    }
    char full[40];
    snprintf(full, sizeof(full), "%s%s", t, strlen(t) == 10 ? " 00:00:00" : "");
    return txo__text_rfc3339_us(full, us);
}

int txo__replay_archive_open(const char *dir, const struct txo_replay_filter *f,
                             struct txo__replay_archive **out, struct txo_error *err)
{
    *out = NULL;
    struct txo__replay_archive *a = txo_calloc(1, sizeof(*a));
    if (a == NULL)
        return txo_error_set(err, TXO_ENOMEM, "replay: out of memory");
    if (!filter_us(f->since, INT64_MIN, &a->since_us) ||
        !filter_us(f->until, INT64_MAX, &a->until_us)) {
        txo__replay_archive_free(a);
        return txo_error_set(err, TXO_EINVAL, "replay: since or until is not a time");
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/" OUTBOX, dir);
    DIR *d = opendir(path);
    if (d == NULL && errno == ENOENT) {
        txo__replay_archive_free(a);
        return txo_error_set(err, TXO_ECONFIG,
                             "replay: %s has no " OUTBOX " directory: --archive takes the "
                             "directory `txo clean --archive` wrote to, and only the outbox's "
                             "files are replayed, not the inbox's or the dead letters'",
                             dir);
    }
    if (d == NULL) {
        txo__replay_archive_free(a);
        return txo_error_set(err, TXO_ECONFIG, "replay: cannot read the archive directory %s: %s",
                             path, strerror(errno));
    }
    size_t cap = 0;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        int64_t first = 0, last = 0;
        if (!file_range(e->d_name, &first, &last))
            continue; /* temporary files (a leading '.') and anything else */
        if (TXO_ARRAY_RESERVE(a->files, cap, a->n_files + 1, 64) < 0) {
            rc = txo_error_set(err, TXO_ENOMEM, "replay: out of memory");
            break;
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        char *p = txo_malloc(len);
        if (p == NULL) {
            rc = txo_error_set(err, TXO_ENOMEM, "replay: out of memory");
            break;
        }
        snprintf(p, len, "%s/%s", path, e->d_name);
        a->files[a->n_files++] = (struct archived){p, first, last};
    }
    closedir(d);
    if (rc < 0) {
        txo__replay_archive_free(a);
        return rc;
    }
    if (a->n_files > 1)
        qsort(a->files, a->n_files, sizeof(*a->files), cmp_files);
    *out = a;
    return 0;
}

int64_t txo__replay_archive_last_id(const struct txo__replay_archive *a)
{
    return a->n_files > 0 ? a->files[a->n_files - 1].last_id : 0;
}

void txo__replay_archive_free(struct txo__replay_archive *a)
{
    if (a == NULL)
        return;
    for (size_t i = 0; i < a->n_files; i++)
        txo_free(a->files[i].path);
    txo_free(a->files);
    txo_archive_file_release(&a->file);
    txo_free(a);
}

static bool str_is(json_t *row, const char *col, const char *want)
{
    const char *v = json_string_value(json_object_get(row, col));
    return want == NULL || (v != NULL && strcmp(v, want) == 0);
}

/* True when the archived row is a published event the filter chooses. */
static bool chosen(const struct txo__replay_archive *a, const struct txo_replay_filter *f,
                   json_t *row)
{
    const char *status = json_string_value(json_object_get(row, "status"));
    if (status == NULL || (strcmp(status, "PUBLISHED") != 0 && strcmp(status, "PENDING") != 0))
        return false;
    if (!str_is(row, "aggregate_type", f->aggregate_type) ||
        !str_is(row, "aggregate_id", f->aggregate_id) || !str_is(row, "event_type", f->event_type))
        return false;
    int64_t us = 0;
    const char *created = json_string_value(json_object_get(row, "created_at"));
    return created != NULL && txo__text_rfc3339_us(created, &us) && us >= a->since_us &&
           us < a->until_us;
}

/* Appends value v of the row (NULL: SQL NULL) as the server sends it, as text. */
static int put_value(struct txo_rows *rows, json_t *v)
{
    char num[32];
    if (v == NULL || json_is_null(v))
        return txo__rows_put(rows, NULL, 0);
    if (json_is_integer(v)) {
        int n = snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return txo__rows_put(rows, num, (size_t)n);
    }
    if (json_is_boolean(v))
        return txo__rows_put(rows, json_is_true(v) ? "1" : "0", 1);
    if (json_is_string(v))
        return txo__rows_put(rows, json_string_value(v), json_string_length(v));
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (text == NULL)
        return TXO_ENOMEM;
    int rc = txo__rows_put(rows, text, strlen(text));
    free(text);
    return rc;
}

/* A time column archived as RFC 3339, back to the server's "YYYY-MM-DD HH:MM:SS.ffffff". */
static int put_time(struct txo_rows *rows, json_t *v)
{
    const char *s = json_string_value(v);
    if (s == NULL)
        return txo__rows_put(rows, NULL, 0);
    char dt[40];
    size_t len = strlen(s);
    if (len < 20 || len >= sizeof(dt) || s[10] != 'T' || s[len - 1] != 'Z')
        return txo__rows_put(rows, s, len);
    memcpy(dt, s, len - 1);
    dt[10] = ' ';
    return txo__rows_put(rows, dt, len - 1);
}

/* The row in the claim columns (enum claim_col). */
static int put_row(struct txo_rows *rows, json_t *row)
{
    static const char *const plain[] = {
        [COL_ID] = "id",
        [COL_AGGREGATE_TYPE] = "aggregate_type",
        [COL_AGGREGATE_ID] = "aggregate_id",
        [COL_EVENT_TYPE] = "event_type",
        [COL_PAYLOAD] = "payload",
        [COL_IDEMPOTENCY_KEY] = "idempotency_key",
        [COL_CREATED_AT] = NULL,
        [COL_ATTEMPTS] = "attempts",
        [COL_NEXT_ATTEMPT_AT] = NULL,
        [COL_LEASE_EXPIRIES] = "lease_expiries",
        [COL_HAD_ERROR] = NULL,
        [COL_SEQUENCE] = "sequence",
        [COL_PREV_SEQUENCE] = "prev_sequence",
        [COL_TRACEPARENT] = "traceparent",
        [COL_TRACESTATE] = "tracestate",
    };
    int rc = 0;
    for (size_t c = 0; rc == 0 && c < TXO_ARRAY_LEN(plain); c++) {
        if (c == COL_CREATED_AT || c == COL_NEXT_ATTEMPT_AT)
            rc = put_time(
                rows, json_object_get(row, c == COL_CREATED_AT ? "created_at" : "next_attempt_at"));
        else if (c == COL_HAD_ERROR)
            rc = txo__rows_put(rows, json_is_null(json_object_get(row, "last_error")) ? "0" : "1",
                               1);
        else
            rc = put_value(rows, json_object_get(row, plain[c]));
    }
    if (rc < 0)
        txo__rows_truncate(rows, txo_rows_count(rows));
    return rc;
}

/* Loads files[a->at]; false when it is past to_id or there is none. */
static int load(struct txo__replay_archive *a, int64_t cursor, int64_t to_id, bool *have,
                struct txo_error *err)
{
    *have = false;
    while (!a->loaded) {
        if (a->at >= a->n_files || a->files[a->at].first_id > to_id)
            return 0;
        if (a->files[a->at].last_id <= cursor) { /* replayed already */
            a->at++;
            continue;
        }
        int rc = txo_archive_read(a->files[a->at].path, &a->file, err);
        if (rc < 0)
            return rc;
        if (strcmp(a->file.table, OUTBOX) != 0) {
            txo_archive_file_release(&a->file);
            return txo_error_set(err, TXO_EINVAL, "replay: %s holds rows of %s, not " OUTBOX,
                                 a->files[a->at].path, a->file.table);
        }
        a->loaded = true;
        a->row = 0;
        a->line_at = 0;
    }
    *have = true;
    return 0;
}

int txo__replay_archive_next(struct txo__replay_archive *a, const struct txo_replay_filter *f,
                             int64_t cursor, int64_t to_id, size_t limit, struct txo_rows **out,
                             struct txo_error *err)
{
    struct txo_rows *rows = txo__rows_new(COL_TRACESTATE + 1);
    if (rows == NULL)
        return txo_error_set(err, TXO_ENOMEM, "replay: out of memory");
    int rc = 0;
    while (txo_rows_count(rows) < limit) {
        bool have = false;
        rc = load(a, cursor, to_id, &have, err);
        if (rc < 0 || !have)
            break;
        if (a->row == a->file.n_rows) {
            txo_archive_file_release(&a->file);
            a->loaded = false;
            a->at++;
            continue;
        }
        const char *line = a->file.lines + a->line_at;
        const char *nl = memchr(line, '\n', a->file.lines_len - a->line_at);
        size_t len = nl != NULL ? (size_t)(nl - line) : a->file.lines_len - a->line_at;
        int64_t id = a->file.ids[a->row];
        a->row++;
        a->line_at += len + 1;
        if (id <= cursor)
            continue;
        if (id > to_id) {
            a->at = a->n_files; /* the end of the range */
            break;
        }
        json_error_t jerr;
        json_t *row = json_loadb(line, len, JSON_ALLOW_NUL, &jerr); /* as the file's reader */
        if (row == NULL) {
            rc = txo_error_set(err, TXO_EINVAL, "replay: %s: row %" PRId64 ": %s",
                               a->files[a->at].path, id, jerr.text);
            break;
        }
        if (chosen(a, f, row) && put_row(rows, row) < 0)
            rc = txo_error_set(err, TXO_ENOMEM, "replay: out of memory");
        json_decref(row);
        if (rc < 0)
            break;
    }
    if (rc < 0) {
        txo_rows_free(rows);
        return rc;
    }
    *out = rows;
    return 0;
}
