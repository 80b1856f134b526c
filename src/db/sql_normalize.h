/*
 * Private to the library: the normal form of a migration's SQL that its checksum covers
 * (src/db/sql_normalize.c), so that a migration's comments may be edited after it was applied
 * and its statements may not.
 */
#ifndef TXO_DB_SQL_NORMALIZE_H
#define TXO_DB_SQL_NORMALIZE_H

/*
 * Returns sql with its comments removed and its whitespace collapsed, as a string to free
 * with txo_free() (NULL when out of memory):
 *   - comments are removed: "-- " to the end of the line ("--" followed by a space, a control
 *     character or the end of the text, as MariaDB reads it: "1--1" is no comment), "#" to the
 *     end of the line, and block comments (slash-star to the next star-slash, or to the end of
 *     the text);
 *   - MariaDB's executable comments (slash-star-bang and slash-star-M-bang, "/" "*!" and
 *     "/" "*M!") are statements, not comments: they are kept, their content normalized like
 *     the rest of the text;
 *   - a run of whitespace (space, tab, newline, CR, FF, VT) and comments becomes one space,
 *     none at the start or the end;
 *   - quoted text is copied as it is, comment markers and whitespace included: '...' and
 *     "..." (a backslash escapes the next character, a doubled quote is a quote), `...` (only
 *     a doubled backtick escapes, as in MariaDB). An unterminated one runs to the end.
 * Two texts that differ only in comments and in the amount of whitespace between tokens give
 * the same result.
 */
char *txo__sql_normalize(const char *sql);

#endif
