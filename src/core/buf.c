/* A growing text buffer: see buf.h. */
#include "core/common.h"

#include "core/buf.h"

bool txo__buf_reserve(struct txo__buf *b, size_t n)
{
    if (b->oom)
        return false;
    if (b->len + n + 1 <= b->cap)
        return true;
    size_t cap = b->cap > 0 ? b->cap : 4096;
    while (b->len + n + 1 > cap)
        cap *= 2;
    char *data = txo_realloc(b->data, cap);
    if (data == NULL) {
        b->oom = true;
        return false;
    }
    b->data = data;
    b->cap = cap;
    return true;
}

void txo__buf_put(struct txo__buf *b, const char *s, size_t n)
{
    if (!txo__buf_reserve(b, n))
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void txo__buf_puts(struct txo__buf *b, const char *s)
{
    txo__buf_put(b, s, strlen(s));
}
