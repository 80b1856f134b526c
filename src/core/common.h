/*
 * Private header included FIRST by every .c file of the library (src/): the standard headers
 * everybody needs, the public API, the assertion macros, and banned.h last of all so that the
 * banned functions cannot be used by our code (system headers are already in by then).
 */
#ifndef TXO_CORE_COMMON_H
#define TXO_CORE_COMMON_H

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "txo/txo.h"

/* Aborts with file:line when cond is false. Stays on in release builds. Never use it on data
 * from the database, the network or a user: that is an error, not a bug. */
#define TXO_ASSERT(cond)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            txo__assert_fail(#cond, __FILE__, __LINE__);                                           \
    } while (0)

/* Marks a state that cannot happen unless the code is wrong. */
#define TXO_BUG(...) txo__bug(__FILE__, __LINE__, __VA_ARGS__)

_Noreturn void txo__assert_fail(const char *expr, const char *file, int line);
_Noreturn void txo__bug(const char *file, int line, const char *fmt, ...) TXO_PRINTF(3, 4);

/*
 * The index of name in names[0..n), or -1 (name NULL or not there). Every state machine keeps
 * its column values in one names table indexed by its enum; this is their shared parser.
 */
long txo__name_index(const char *const *names, size_t n, const char *name);

/*
 * names[value], or "INVALID" when value is outside names[0..n): the one contract of every
 * *_status_name() function. "INVALID" is no column value, so the parser refuses it back, and a
 * log line about a corrupted value still gets written.
 */
const char *txo__name_of(const char *const *names, size_t n, long value);

/*
 * names[value], for an enum whose values only the library's own code sets (options, modes):
 * a value outside names[0..n) is a bug, reported as "unknown <what> <value>".
 */
const char *txo__name_known(const char *const *names, size_t n, long value, const char *what);

/*
 * Checks the two ends of a state machine's move, from and to, against its n_states states:
 * an unknown state is a bug, reported as "unknown <what> <from> -> <to>".
 */
void txo__move_check(size_t n_states, long from, long to, const char *what);

/*
 * Defines the parser `int fn(const char *name, type *out)` of an enum kept as a names table
 * (names[] indexed by the enum): *out gets the value named name, or TXO_EINVAL is returned and
 * *out is left untouched. Every names table's parser is this one definition.
 */
#define TXO_NAME_PARSER(fn, type, names)                                                           \
    int fn(const char *name, type *out)                                                            \
    {                                                                                              \
        long found = txo__name_index(names, TXO_ARRAY_LEN(names), name);                           \
        if (found < 0)                                                                             \
            return TXO_EINVAL;                                                                     \
        *out = (type)found;                                                                        \
        return 0;                                                                                  \
    }

/*
 * Resizes the array whose pointer is at arrp (a T **) to n elements of elem bytes, with
 * txo_realloc. TXO_ENOMEM, the array as it was, when n * elem overflows or memory runs out.
 */
int txo__array_resize(void *arrp, size_t n, size_t elem);

/*
 * Room for need elements in the array whose pointer is at arrp (a T **) and whose capacity is
 * *cap: when *cap is smaller, the capacity doubles (from first when it is 0) until it holds
 * need, and the array is resized to it. TXO_ENOMEM, array and *cap as they were, when it
 * cannot. The growing arrays of the library and txo__buf_reserve() share it.
 */
int txo__array_grow(void *arrp, size_t *cap, size_t need, size_t elem, size_t first);
static inline int txo__array_reserve(void *arrp, size_t *cap, size_t need, size_t elem,
                                     size_t first)
{
    return need <= *cap ? 0 : txo__array_grow(arrp, cap, need, elem, first);
}

/* txo__array_resize() and txo__array_reserve() of the array arr (an lvalue of pointer type),
 * its elements' size taken from its type. */
#define TXO_ARRAY_RESIZE(arr, n) txo__array_resize(&(arr), (n), sizeof(*(arr)))
#define TXO_ARRAY_RESERVE(arr, cap, need, first)                                                   \
    txo__array_reserve(&(arr), &(cap), (need), sizeof(*(arr)), (first))

/*
 * Returns the free memory of every malloc arena to the kernel (glibc's malloc_trim); a no-op
 * with another C library. It walks the free lists with each arena locked in turn: call it at a
 * quiet point after much was freed, never per request. Thread-safe.
 */
void txo__alloc_trim(void);

/*
 * Overwrites the string s with NUL bytes through a volatile pointer, so a secret (password,
 * token, credential header) is not left behind in memory; NULL is a no-op. txo__wipe_free()
 * then frees it with txo_free(): the one way the library frees a secret.
 */
void txo__wipe(char *s);
void txo__wipe_free(char *s);

#include "banned.h"

#endif
