/*
 * Allocation wrappers. All txo code allocates through these so that tests can inject
 * out-of-memory failures (txo_alloc_fail_after) the way SQLite's and Redis's tests do.
 * They behave exactly like malloc/calloc/realloc/free/strdup otherwise.
 *
 * Thread-safety: safe from any thread; the failure-injection counter is atomic.
 */
#ifndef TXO_ALLOC_H
#define TXO_ALLOC_H

#include <stddef.h>

#include "txo/common.h"

TXO_API void *txo_malloc(size_t size);
TXO_API void *txo_calloc(size_t n, size_t size);
TXO_API void *txo_realloc(void *ptr, size_t size);
TXO_API void txo_free(void *ptr);
/* Copies s (NULL gives NULL). Free with txo_free(). */
TXO_API char *txo_strdup(const char *s);
TXO_API char *txo_strndup(const char *s, size_t n);

/*
 * Test hook: the n-th allocation from now on (and every one after it) fails; n < 0 turns
 * injection off. Only for tests. Counting from 0: n allocations succeed, so n = 0 fails the
 * very next one. txo_free() is never affected.
 */
TXO_API void txo_alloc_fail_after(long n);

#endif
