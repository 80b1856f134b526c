/*
 * A growing text buffer (src/core/buf.c), for the encoders that write a whole document: the
 * metrics exposition, the OTLP JSON body. Writes append; after an allocation failure the
 * buffer only records it (oom), so a writer checks once at the end. data is NUL-terminated
 * after every write; the caller owns it (txo_free).
 */
#ifndef TXO_CORE_BUF_H
#define TXO_CORE_BUF_H

#include <stdbool.h>
#include <stddef.h>

struct txo__buf {
    char *data;
    size_t len, cap;
    bool oom;
};

/* Room for n more bytes and a NUL after them; false (oom set) when memory ran out. */
bool txo__buf_reserve(struct txo__buf *b, size_t n);

/* Appends s[0..n). */
void txo__buf_put(struct txo__buf *b, const char *s, size_t n);

/* Appends the string s. */
void txo__buf_puts(struct txo__buf *b, const char *s);

#endif
