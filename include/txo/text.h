/*
 * UTF-8 text helpers, for code that stores or prints text it did not write itself: error
 * messages cut to fit a utf8mb4 column, metric help text, user-supplied SKUs.
 *
 * "Valid" means well-formed UTF-8 as RFC 3629 defines it: no overlong forms, no surrogates
 * (U+D800..U+DFFF), nothing above U+10FFFF, no bytes 0xC0, 0xC1 or 0xF5..0xFF.
 *
 * Thread-safety: pure functions; they read only the bytes they are given.
 */
#ifndef TXO_TEXT_H
#define TXO_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#include "txo/common.h"

/*
 * The length (1 to 4) of the valid UTF-8 character that starts at s, or 0 when the bytes at
 * s[0..len) do not start with one (invalid byte, overlong form, surrogate, above U+10FFFF, or
 * a sequence cut short by len). len 0 returns 0. Reads at most min(len, 4) bytes.
 */
TXO_API size_t txo_utf8_char_len(const char *s, size_t len);

/* True when s[0..len) is valid UTF-8 (an empty string is). NUL bytes count as characters. */
TXO_API bool txo_utf8_valid(const char *s, size_t len);

/*
 * Where to cut the text s of len bytes so that it fits in max bytes without ending inside a
 * character: len when len <= max, else the largest n <= max such that s[0..n) does not end
 * with an incomplete multi-byte sequence (so at most 3 bytes less than max). Only the
 * incomplete last character is dropped: invalid bytes before it are kept as they are (the
 * caller decides whether invalid text is acceptable). Reads only s[0..min(len, max)), so s may
 * be a buffer that already holds just the first max bytes of a longer text.
 * Write the NUL yourself: s[txo_utf8_cut(s, len, max)] = '\0'.
 */
TXO_API size_t txo_utf8_cut(const char *s, size_t len, size_t max);

#endif
