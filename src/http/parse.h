/*
 * The strict HTTP/1.1 request parser of the server (RFC 9112), kept apart from the sockets so
 * that it can be fuzzed on its own (fuzz/fuzz_http_head.c).
 *
 * Anything a proxy in front of us could read differently is refused rather than repaired,
 * because two readings of one byte stream are what request smuggling is made of: a second
 * Content-Length (equal or not), Content-Length with Transfer-Encoding, a Transfer-Encoding
 * other than a single "chunked", whitespace before a colon, obs-fold, a bare CR or LF, NUL
 * and other control bytes anywhere in the head, malformed chunk sizes. Every refusal carries
 * the status and the error code the server answers with; the connection is then closed.
 *
 * Pure: no I/O, no globals, thread-safe. Spans point into the caller's buffer.
 */
#ifndef TXO_HTTP_PARSE_H
#define TXO_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Header fields kept per request; one more is 431. */
#define TXO_HTTP_MAX_FIELDS 64

struct txo__http_span {
    const char *p;
    size_t len;
};

struct txo__http_field {
    struct txo__http_span name;  /* a token, case as sent */
    struct txo__http_span value; /* without the surrounding whitespace; never a NUL, CR or LF */
};

enum txo__http_body_kind {
    TXO_HTTP_BODY_NONE,    /* neither Content-Length nor Transfer-Encoding */
    TXO_HTTP_BODY_LENGTH,  /* Content-Length: content_length bytes follow the head */
    TXO_HTTP_BODY_CHUNKED, /* Transfer-Encoding: chunked */
};

struct txo__http_head {
    struct txo__http_span method;
    struct txo__http_span path;  /* the target up to '?', still percent-encoded */
    struct txo__http_span query; /* after '?', without it; len 0 when there is none */
    unsigned version_minor;      /* HTTP/1.0 or HTTP/1.1 */
    struct txo__http_field fields[TXO_HTTP_MAX_FIELDS];
    size_t n_fields;
    enum txo__http_body_kind body;
    uint64_t content_length; /* TXO_HTTP_BODY_LENGTH only */
    bool keep_alive;         /* the version's default, overridden by Connection */
    bool expect_continue;    /* Expect: 100-continue */
    size_t head_len;         /* bytes up to and including the blank line */
};

/* Why a request is refused: the status, the JSON error code and a human message (static). */
struct txo__http_refusal {
    int status;
    const char *error;
    const char *message;
};

/*
 * Parses the request head at the start of buf[0..len). Returns 1 when a complete, valid head
 * is there (*head filled in, head->head_len bytes of buf used), 0 when more bytes are needed
 * (and nothing seen so far is invalid), or -1 when the request must be refused (*why filled
 * in: 400, 414 or 431 for an oversized head, 501 for an unknown transfer coding, 505 for
 * another HTTP version). A head longer than max_head_bytes is refused, complete or not.
 */
int txo__http_parse_head(const char *buf, size_t len, size_t max_head_bytes,
                         struct txo__http_head *head, struct txo__http_refusal *why);

/* The value of the first field called name (case-insensitive), or NULL; *count (when not
 * NULL) is the number of fields of that name. */
const struct txo__http_span *txo__http_head_field(const struct txo__http_head *head,
                                                  const char *name, size_t *count);

/* The incremental decoder of a chunked body; zero it to start. */
struct txo__http_chunked {
    int state;
    uint64_t size;        /* of the chunk being read */
    unsigned digits;      /* of its size */
    size_t line_bytes;    /* of the current size or trailer line */
    size_t trailer_bytes; /* of all trailer lines */
};

/*
 * Decodes in[0..len) of a chunked body, appending the data to out[*out_len..): out has room
 * for max_body bytes. Sets *used to the bytes of in consumed. Returns 1 when the body is
 * complete (the bytes after *used belong to the next request), 0 when all of in was consumed
 * and more is needed, -1 on a malformed body (400) or a body over max_body (413).
 */
int txo__http_chunked_feed(struct txo__http_chunked *c, const char *in, size_t len, size_t *used,
                           char *out, size_t max_body, size_t *out_len,
                           struct txo__http_refusal *why);

/*
 * Percent-decodes in[0..len) into out (room for len bytes), '+' as a space when plus_is_space
 * (query strings). Returns the decoded length, or -1 when an escape is malformed or decodes to
 * NUL: such a byte would cut the C string handed to the application.
 */
long txo__http_pct_decode(const char *in, size_t len, bool plus_is_space, char *out);

#endif
