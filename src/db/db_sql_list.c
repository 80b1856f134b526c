/*
 * Statement text with a generated number of placeholders: an IN (?,?,...) list and the rows
 * of a multi-row INSERT ... VALUES. Only the count of placeholders is generated, never text
 * from values, which are still bound; the IN list size is rounded up to a power of two so a
 * connection prepares few variants of one statement.
 *
 * Thread-safety: pure functions.
 */
#include "core/common.h"

size_t txo_sql_in_list_size(size_t n)
{
    size_t size = 1;
    while (size < n)
        size *= 2;
    return size;
}

/* Copies the text t to p; returns the end of the copy. */
static char *put(char *p, const char *t, size_t len)
{
    memcpy(p, t, len);
    return p + len;
}

/*
 * before + open + n copies of item separated by commas + close + after, allocated (txo_free
 * it); NULL when n is 0 or out of memory. Both lists are this: "(?,?,?)" and "(?,?),(?,?)".
 */
static char *join_copies(const char *before, const char *open, const char *item, size_t n,
                         const char *close, const char *after)
{
    if (n == 0)
        return NULL;
    size_t lb = strlen(before), lo = strlen(open), li = strlen(item), lc = strlen(close),
           la = strlen(after);
    char *s = txo_malloc(lb + lo + n * (li + 1) - 1 + lc + la + 1);
    if (s == NULL)
        return NULL;
    char *p = put(put(s, before, lb), open, lo);
    for (size_t i = 0; i < n; i++)
        p = put(i > 0 ? put(p, ",", 1) : p, item, li);
    *put(put(p, close, lc), after, la) = '\0';
    return s;
}

char *txo_sql_in_list(const char *before, size_t n, const char *after)
{
    return join_copies(before, "(", "?", n, ")", after);
}

char *txo_sql_values_rows_then(const char *before, size_t n_rows, const char *row,
                               const char *after)
{
    return join_copies(before, "", row, n_rows, "", after);
}

char *txo_sql_values_rows(const char *before, size_t n_rows, const char *row)
{
    return txo_sql_values_rows_then(before, n_rows, row, "");
}
