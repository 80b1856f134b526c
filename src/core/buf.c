/* A growing text buffer: see buf.h. */
#include "core/common.h"

#include "core/buf.h"

bool txo__buf_reserve(struct txo__buf *b, size_t n)
{
    if (b->oom)
        return false;
    if (n > SIZE_MAX - b->len - 1 || TXO_ARRAY_RESERVE(b->data, b->cap, b->len + n + 1, 4096) < 0) {
        b->oom = true;
        return false;
    }
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
