/*
 * Private text helpers of the library (src/core/text.c); the public ones are in
 * include/txo/text.h.
 */
#ifndef TXO_CORE_TEXT_H
#define TXO_CORE_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/clock.h" /* TXO_RFC3339_LEN */

struct txo_error;

/*
 * A DATETIME or DATETIME(n) value as the client library prints it, "YYYY-MM-DD HH:MM:SS" with
 * an optional ".f" to ".ffffff", read as UTC (the library sets the session time zone to UTC),
 * written to out as RFC 3339 with microseconds: "YYYY-MM-DDTHH:MM:SS.ffffffZ" (fewer digits
 * are padded with zeros). Anything else (NULL, another shape) cannot come from a DATETIME
 * column: it is copied to out as it is, cut to fit (NULL as ""). Returns out.
 */
const char *txo__text_rfc3339(const char *datetime, char out[TXO_RFC3339_LEN]);

/*
 * Copies text into out (cap bytes, NUL-terminated, cut to fit) with every byte that is not part
 * of a well-formed UTF-8 character replaced by '?', so that it can go into a JSON string:
 * messages quote bytes a client or another service sent (jansson's error text does, and may
 * cut a character in half).
 */
void txo__utf8_sanitize(const char *text, char *out, size_t cap);

/* The value of hex digit c (0-9, a-f, A-F), or -1 when c is not one. */
/*
 * The microseconds since the epoch of a UTC time written "YYYY-MM-DDTHH:MM:SS[.ffffff][Z]"
 * (what txo__text_rfc3339() writes; a space instead of 'T', as MariaDB writes a DATETIME, is
 * accepted too). False when text is not such a time.
 */
bool txo__text_rfc3339_us(const char *text, int64_t *us);

int txo__hex_digit(char c);

/*
 * Checks a text field the library stores: set, not empty and at most max bytes. Otherwise
 * returns TXO_EINVAL with "<whose>: <field> is empty" or "<whose>: <field> is N bytes, at most
 * max" in err (whose names the event or command, e.g. "outbox event <key>").
 */
int txo__check_text_field(const char *value, size_t max, const char *whose, const char *field,
                          struct txo_error *err);

/*
 * Checks that text[0..len) is one JSON document: the payload of an event or a command the
 * library stores. When it is not, returns TXO_ECONSTRAINT with "<what> <id>: payload is not
 * JSON: <reason> at line L column C" in err. Integers are read as reals only so that integers
 * beyond int64 (valid JSON, accepted by the server) are not refused; allow_nul admits the
 * \u0000 escape. The text itself is never changed.
 */
int txo__json_check_payload(const char *text, size_t len, bool allow_nul, const char *what,
                            const char *id, struct txo_error *err);

/* The 64-bit FNV-1a offset basis: the hash of no bytes, where a hash starts. */
#define TXO__FNV1A_BASIS 14695981039346656037u

/*
 * The 64-bit FNV-1a hash h (TXO__FNV1A_BASIS to start) continued over the n bytes of data: the
 * hash of the library's in-memory tables. Not for anything stored or sent: those must not
 * depend on a hash function another version may change.
 */
uint64_t txo__fnv1a(uint64_t h, const void *data, size_t n);

/*
 * Appends part to out[*n..cap) as one part of a broker's name (a NATS subject token, a Redis
 * stream name, an AMQP routing key), with controls, spaces, DEL and every byte of reserved
 * written as '_', so that no event can make a name that means something else; an empty part
 * is written "_". False, leaving out as it was, when it does not fit with its NUL.
 */
bool txo__text_append_name_part(char *out, size_t cap, size_t *n, const char *part,
                                const char *reserved);

#endif
