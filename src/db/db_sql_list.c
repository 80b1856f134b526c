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

char *txo_sql_in_list(const char *before, size_t n, const char *after)
{
    size_t lb = strlen(before), la = strlen(after);
    if (n == 0)
        return NULL;
    size_t len = lb + 2 + 2 * n - 1 + la;
    char *s = txo_malloc(len + 1);
    if (!s)
        return NULL;
    char *p = s;
    memcpy(p, before, lb);
    p += lb;
    *p++ = '(';
    for (size_t i = 0; i < n; i++) {
        if (i)
            *p++ = ',';
        *p++ = '?';
    }
    *p++ = ')';
    memcpy(p, after, la);
    p += la;
    *p = '\0';
    return s;
}

char *txo_sql_values_rows_then(const char *before, size_t n_rows, const char *row,
                               const char *after)
{
    if (n_rows == 0)
        return NULL;
    size_t lb = strlen(before), lr = strlen(row), la = strlen(after);
    char *s = txo_malloc(lb + n_rows * (lr + 1) + la + 1);
    if (!s)
        return NULL;
    char *p = s;
    memcpy(p, before, lb);
    p += lb;
    for (size_t i = 0; i < n_rows; i++) {
        if (i)
            *p++ = ',';
        memcpy(p, row, lr);
        p += lr;
    }
    memcpy(p, after, la + 1);
    return s;
}

char *txo_sql_values_rows(const char *before, size_t n_rows, const char *row)
{
    return txo_sql_values_rows_then(before, n_rows, row, "");
}
