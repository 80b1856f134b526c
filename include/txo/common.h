/*
 * Macros shared by every public txo header: symbol export and compiler attributes.
 */
#ifndef TXO_COMMON_H
#define TXO_COMMON_H

/* Marks a symbol as part of the public API (the library is built with hidden visibility). */
#define TXO_API __attribute__((visibility("default")))

/* The result of a fallible call must be checked. */
#define TXO_MUST_CHECK __attribute__((warn_unused_result))

#define TXO_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))

#define TXO_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
