/*
 * libFuzzer harness of the retention archive's reader (txo_archive_read). The input is the
 * decompressed file: its first line a header, the rest row lines. So that the fuzzer reaches
 * the rows instead of stopping at the checksum, the harness sets the header's crc32 to the
 * rows' real CRC-32 when the header is a JSON object, names the file after the header's table
 * and ids (version 1), or table, seq and first_time (version 2), when they make a name, gzips
 * it and reads it back. An accepted file named by ids must hold as many ids as rows,
 * ascending, from first_id to last_id; one named by sequence as many keys and times as rows,
 * ascending by (time, key bytes), no key twice; a refusal must say why (TXO_EINVAL or TXO_EIO,
 * with a message).
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "txo/txo.h"

static void check(bool ok)
{
    if (!ok)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The header with the rows' CRC-32, as a line; NULL when it is not a JSON object. */
static char *fixed_header(const uint8_t *data, size_t hlen, const uint8_t *rows, size_t rlen,
                          char *name, size_t name_cap)
{
    json_t *h = json_loadb((const char *)data, hlen, 0, NULL);
    if (!json_is_object(h)) {
        json_decref(h);
        return NULL;
    }
    char crc[9];
    snprintf(crc, sizeof(crc), "%08lx", crc32(0L, rows, (uInt)rlen));
    json_object_set_new(h, "crc32", json_string(crc));
    const char *table = json_string_value(json_object_get(h, "table"));
    json_t *first = json_object_get(h, "first_id");
    json_t *last = json_object_get(h, "last_id");
    json_t *seq = json_object_get(h, "seq");
    const char *at = json_string_value(json_object_get(h, "first_time"));
    bool table_ok = table != NULL && strlen(table) < 64 && strchr(table, '/') == NULL &&
                    table[0] != '.';
    if (table_ok && json_is_integer(first) && json_is_integer(last)) {
        snprintf(name, name_cap, "%s.%" JSON_INTEGER_FORMAT "-%" JSON_INTEGER_FORMAT ".jsonl.gz",
                 table, json_integer_value(first), json_integer_value(last));
    } else if (table_ok && json_is_integer(seq) && at != NULL && strlen(at) >= 19) {
        /* "YYYY-MM-DDTHH:MM:SS..." -> "YYYYMMDDTHHMMSSZ", as the writer stamps it; a time with
         * other characters there is refused anyway, and might hold a '/'. */
        char stamp[17];
        snprintf(stamp, sizeof(stamp), "%.4s%.2s%.2sT%.2s%.2s%.2sZ", at, at + 5, at + 8, at + 11,
                 at + 14, at + 17);
        bool digits = true;
        for (size_t i = 0; i < 15; i++)
            digits = digits && (i == 8 || (stamp[i] >= '0' && stamp[i] <= '9'));
        if (digits)
            snprintf(name, name_cap, "%s.%010" JSON_INTEGER_FORMAT ".%s.jsonl.gz", table,
                     json_integer_value(seq), stamp);
    }
    char *line = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    return line;
}

static int key_cmp(const struct txo_archive_key *a, const struct txo_archive_key *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n > 0 ? memcmp(a->bytes, b->bytes, n) : 0;
    return c != 0 ? c : (a->len > b->len) - (a->len < b->len);
}

static int key_cmp_qsort(const void *a, const void *b)
{
    return key_cmp(a, b);
}

/* What an accepted file named by sequence must hold. */
static void check_seq_file(const struct txo_archive_file *f)
{
    check(f->ids == NULL && f->keys != NULL && f->times_us != NULL && f->seq >= 1);
    for (size_t i = 1; i < f->n_rows; i++)
        check(f->times_us[i] > f->times_us[i - 1] ||
              (f->times_us[i] == f->times_us[i - 1] && key_cmp(&f->keys[i - 1], &f->keys[i]) < 0));
    struct txo_archive_key *sorted = malloc(f->n_rows * sizeof(*sorted));
    check(sorted != NULL);
    memcpy(sorted, f->keys, f->n_rows * sizeof(*sorted));
    qsort(sorted, f->n_rows, sizeof(*sorted), key_cmp_qsort);
    for (size_t i = 1; i < f->n_rows; i++)
        check(key_cmp(&sorted[i - 1], &sorted[i]) != 0);
    free(sorted);
}

static char dir[64]; /* this process's directory for the file of each input */

static void remove_dir(void)
{
    (void)rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (dir[0] == '\0') {
        snprintf(dir, sizeof(dir), "/tmp/fuzz-archive-%d", (int)getpid());
        check(mkdir(dir, 0700) == 0 || access(dir, W_OK) == 0);
        atexit(remove_dir);
    }
    const uint8_t *nl = memchr(data, '\n', size);
    size_t hlen = nl != NULL ? (size_t)(nl - data) : size;
    const uint8_t *rows = nl != NULL ? nl + 1 : data + size;
    size_t rlen = (size_t)(data + size - rows);
    char name[128] = "outbox_events.1-1.jsonl.gz";
    char *header = fixed_header(data, hlen, rows, rlen, name, sizeof(name));

    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    gzFile gz = gzopen(path, "wb");
    check(gz != NULL);
    if (header != NULL) {
        gzwrite(gz, header, (unsigned)strlen(header));
        gzwrite(gz, "\n", 1);
    } else if (hlen > 0) {
        gzwrite(gz, data, (unsigned)hlen);
        gzwrite(gz, "\n", 1);
    }
    if (rlen > 0)
        gzwrite(gz, rows, (unsigned)rlen);
    check(gzclose(gz) == Z_OK);
    free(header);

    struct txo_archive_file f;
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_archive_read(path, &f, &err);
    unlink(path);
    if (rc != 0) {
        check(rc == TXO_EINVAL || rc == TXO_EIO || rc == TXO_ENOMEM);
        check(err.msg[0] != '\0');
        return 0;
    }
    check(f.n_rows >= 1);
    if (f.version == TXO_ARCHIVE_VERSION_SEQ) {
        check_seq_file(&f);
    } else {
        check(f.version == TXO_ARCHIVE_VERSION && f.keys == NULL);
        check(f.ids[0] == f.first_id && f.ids[f.n_rows - 1] == f.last_id);
        for (size_t i = 1; i < f.n_rows; i++)
            check(f.ids[i] > f.ids[i - 1]);
    }
    size_t lines = 0;
    for (size_t i = 0; i < f.lines_len; i++)
        lines += f.lines[i] == '\n';
    check(lines == f.n_rows);
    txo_archive_file_release(&f);
    return 0;
}
