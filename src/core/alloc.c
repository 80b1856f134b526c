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

/* The pointer stored at arrp, which may be a pointer to any object pointer type: copied as
 * bytes, as all object pointers share one representation on the platforms the library runs on. */
static void *pointer_at(const void *arrp)
{
    void *p;
    memcpy(&p, arrp, sizeof(p));
    return p;
}

int txo__array_resize(void *arrp, size_t n, size_t elem)
{
    if (elem != 0 && n > SIZE_MAX / elem)
        return TXO_ENOMEM;
    void *p = txo_realloc(pointer_at(arrp), n * elem);
    if (p == NULL && n * elem != 0)
        return TXO_ENOMEM;
    memcpy(arrp, &p, sizeof(p));
    return 0;
}

/* txo__array_reserve() when the array is too small. */
int txo__array_grow(void *arrp, size_t *cap, size_t need, size_t elem, size_t first)
{
    size_t n = *cap > 0 ? *cap : (first > 0 ? first : 1);
    while (n < need) {
        if (n > SIZE_MAX / 2)
            return TXO_ENOMEM;
        n *= 2;
    }
    int rc = txo__array_resize(arrp, n, elem);
    if (rc == 0)
        *cap = n;
    return rc;
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
