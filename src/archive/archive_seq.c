#include "core/common.h"

/*
 * Files named by sequence (txo/archive.h): what their writer and their reader must agree on.
 * A table without an integer id (the inbox, keyed by a string event id) cannot name a file by
 * its rows' range, and the time its rows were processed does not always grow from one file to
 * the next (a row restored, or committed late, may be older than the newest file), so a file
 * is named first by a sequence number one more than the table's newest file, zero-padded so
 * that the names sort as text in the order they were written, then by the stamp of its first
 * row's time, for the reader who looks for a period. Inside a file the rows follow the
 * cleaner's walk of its index: by time, then by key.
 *
 * Thread-safety: no shared state.
 */

#include "archive/archive_internal.h"
#include "core/text.h"

#define SEQ_DIGITS 10

/* True when the n bytes at s are all digits. */
static bool all_digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

bool txo__archive_stamp(const char *time, char out[TXO__ARCHIVE_STAMP_LEN])
{
    int64_t us;
    if (time == NULL || !txo__text_rfc3339_us(time, &us))
        return false;
    /* Fixed positions of "YYYY-MM-DD?HH:MM:SS", checked above. */
    static const unsigned char from[] = {0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18};
    size_t k = 0;
    for (size_t i = 0; i < sizeof(from); i++) {
        if (i == 8)
            out[k++] = 'T';
        out[k++] = time[from[i]];
    }
    out[k++] = 'Z';
    out[k] = '\0';
    return true;
}

bool txo__archive_seq_name(char *out, size_t out_size, const char *table, uint64_t seq,
                           const char *stamp)
{
    int n = snprintf(out, out_size, "%s.%0*" PRIu64 ".%s" TXO__ARCHIVE_SUFFIX, table, SEQ_DIGITS,
                     seq, stamp);
    return n > 0 && (size_t)n < out_size;
}

bool txo__archive_seq_of(const char *name, const char *table, uint64_t *seq)
{
    /* "<table>." "0000000007" "." "20261202T100000Z" ".jsonl.gz" */
    size_t tl = strlen(table), sl = strlen(TXO__ARCHIVE_SUFFIX);
    size_t stamp = TXO__ARCHIVE_STAMP_LEN - 1;
    if (strlen(name) != tl + 1 + SEQ_DIGITS + 1 + stamp + sl || strncmp(name, table, tl) != 0 ||
        name[tl] != '.')
        return false;
    const char *p = name + tl + 1;
    if (!all_digits(p, SEQ_DIGITS) || p[SEQ_DIGITS] != '.')
        return false;
    const char *s = p + SEQ_DIGITS + 1;
    if (!all_digits(s, 8) || s[8] != 'T' || !all_digits(s + 9, 6) || s[15] != 'Z' ||
        strcmp(s + stamp, TXO__ARCHIVE_SUFFIX) != 0)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < SEQ_DIGITS; i++)
        v = v * 10 + (uint64_t)(p[i] - '0');
    *seq = v;
    return true;
}

static int key_cmp(const struct txo_archive_key *a, const struct txo_archive_key *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n > 0 ? memcmp(a->bytes, b->bytes, n) : 0;
    if (c != 0)
        return c;
    return (a->len > b->len) - (a->len < b->len);
}

int txo__archive_row_cmp(int64_t a_us, const struct txo_archive_key *a, int64_t b_us,
                         const struct txo_archive_key *b)
{
    if (a_us != b_us)
        return a_us < b_us ? -1 : 1;
    return key_cmp(a, b);
}

struct placed_key {
    struct txo_archive_key key;
    size_t at; /* its row */
};

static int placed_cmp(const void *a, const void *b)
{
    const struct placed_key *x = a, *y = b;
    int c = key_cmp(&x->key, &y->key);
    return c != 0 ? c : (x->at > y->at) - (x->at < y->at);
}

int txo__archive_key_twice(const struct txo_archive_key *keys, size_t n, bool *twice, size_t *dup)
{
    *twice = false;
    if (n < 2)
        return 0;
    struct placed_key *sorted = txo_calloc(n, sizeof(*sorted));
    if (sorted == NULL)
        return TXO_ENOMEM;
    for (size_t i = 0; i < n; i++)
        sorted[i] = (struct placed_key){keys[i], i};
    qsort(sorted, n, sizeof(*sorted), placed_cmp);
    for (size_t i = 1; i < n && !*twice; i++) {
        if (key_cmp(&sorted[i - 1].key, &sorted[i].key) == 0) {
            *twice = true;
            *dup = sorted[i].at;
        }
    }
    txo_free(sorted);
    return 0;
}
