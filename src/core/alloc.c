/*
 * Allocation wrappers (include/txo/alloc.h). All library code allocates through these so the
 * fault tests can make the n-th allocation fail and check that every path copes with
 * out-of-memory: returns TXO_ENOMEM, leaks nothing and leaves no half-done state (the SQLite
 * and Redis OOM tests work the same way).
 *
 * Injection: txo_alloc_fail_after(n) lets n more allocations succeed; the one after them and
 * every later one return NULL until txo_alloc_fail_after(-1) turns injection off. So n = 0
 * makes the very next allocation fail. txo_free() is never affected.
 *
 * Thread-safety: the countdown is one atomic; with several threads allocating, which thread
 * sees the first failure is not defined, but exactly n allocations succeed before it.
 *
 * txo__alloc_trim() (core/common.h) hands free memory back to the kernel, for code that knows
 * when much was just freed (the HTTP server after connections close, src/http/server_slots.c).
 */
#include "core/common.h"

#include <stdatomic.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

/* Allocations left before injected failures start; negative = injection off. */
static _Atomic long fail_countdown = -1;

/* True when this allocation must fail; consumes one unit of the countdown otherwise. */
static bool inject_failure(void)
{
    long n = atomic_load_explicit(&fail_countdown, memory_order_relaxed);

    while (n > 0) {
        if (atomic_compare_exchange_weak_explicit(&fail_countdown, &n, n - 1, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            return false;
        }
    }
    return n == 0;
}

void txo_alloc_fail_after(long n)
{
    atomic_store_explicit(&fail_countdown, n < 0 ? -1 : n, memory_order_relaxed);
}

void *txo_malloc(size_t size)
{
    if (inject_failure()) {
        return NULL;
    }
    return malloc(size);
}

void *txo_calloc(size_t n, size_t size)
{
    if (inject_failure()) {
        return NULL;
    }
    return calloc(n, size);
}

/* Like realloc: on failure (injected or real) ptr is left valid and unchanged. */
void *txo_realloc(void *ptr, size_t size)
{
    if (inject_failure()) {
        return NULL;
    }
    return realloc(ptr, size);
}

void txo_free(void *ptr)
{
    free(ptr);
}

char *txo_strdup(const char *s)
{
    if (s == NULL) {
        return NULL;
    }
    size_t len = strlen(s);
    char *copy = txo_malloc(len + 1);
    if (copy == NULL) {
        return NULL;
    }
    memcpy(copy, s, len + 1);
    return copy;
}

/* Copies at most n bytes of s and always terminates the copy (NULL s gives NULL). */
char *txo_strndup(const char *s, size_t n)
{
    if (s == NULL) {
        return NULL;
    }
    size_t len = strnlen(s, n);
    char *copy = txo_malloc(len + 1);
    if (copy == NULL) {
        return NULL;
    }
    memcpy(copy, s, len);
    copy[len] = '\0';
    return copy;
}

void txo__wipe(char *s)
{
    if (s == NULL)
        return;
    volatile char *p = s;
    while (*p != '\0')
        *p++ = '\0';
}

void txo__wipe_free(char *s)
{
    txo__wipe(s);
    txo_free(s);
}

void txo__alloc_trim(void)
{
#ifdef __GLIBC__
    (void)malloc_trim(0);
#endif
}
