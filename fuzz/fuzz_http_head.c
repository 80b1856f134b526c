/*
 * libFuzzer harness of the HTTP request head and body parser (src/http/parse.c): the input is
 * what a client sends. Checks, beyond "no crash, no sanitizer report", the invariants the
 * server relies on: a parsed head lies within the input and its fields hold no NUL, CR or LF;
 * the framing is never ambiguous (a Content-Length and chunked never both); the chunked
 * decoder never writes past max_body and never consumes more than it was given; percent
 * decoding never yields a NUL.
 */
#include "core/common.h"

#include "http/parse.h"

enum { MAX_HEAD = 8192, MAX_BODY = 4096 };

static void check(bool ok)
{
    if (!ok)
        __builtin_trap();
}

static void check_span(const struct txo__http_span *s, const char *buf, size_t len)
{
    check(s->p >= buf && s->p + s->len <= buf + len);
    check(memchr(s->p, '\0', s->len) == NULL && memchr(s->p, '\r', s->len) == NULL &&
          memchr(s->p, '\n', s->len) == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    struct txo__http_head head;
    struct txo__http_refusal why;
    int rc = txo__http_parse_head(buf, size, MAX_HEAD, &head, &why);
    if (rc < 0) {
        check(why.status >= 400 && why.status <= 505 && why.error != NULL && why.message != NULL);
        return 0;
    }
    if (rc == 0) {
        check(size < MAX_HEAD);
        return 0;
    }
    check(head.head_len <= size && head.head_len <= MAX_HEAD);
    check(head.version_minor <= 1 && head.n_fields <= TXO_HTTP_MAX_FIELDS);
    check_span(&head.method, buf, size);
    check_span(&head.path, buf, size);
    check_span(&head.query, buf, size);
    for (size_t i = 0; i < head.n_fields; i++) {
        check_span(&head.fields[i].name, buf, size);
        check_span(&head.fields[i].value, buf, size);
    }
    size_t n_cl = 0;
    size_t n_te = 0;
    (void)txo__http_head_field(&head, "content-length", &n_cl);
    (void)txo__http_head_field(&head, "TRANSFER-ENCODING", &n_te);
    check(n_cl <= 1 && n_te <= 1 && n_cl + n_te <= 1);

    char *out = malloc(head.path.len + head.query.len + 1);
    check(out != NULL);
    long n = txo__http_pct_decode(head.path.p, head.path.len, false, out);
    check(n < 0 || ((size_t)n <= head.path.len && memchr(out, '\0', (size_t)n) == NULL));
    n = txo__http_pct_decode(head.query.p, head.query.len, true, out);
    check(n < 0 || ((size_t)n <= head.query.len && memchr(out, '\0', (size_t)n) == NULL));
    free(out);

    if (head.body == TXO_HTTP_BODY_CHUNKED) {
        /* Fed in pieces of 1, 2, 3... bytes, as a slow network would deliver them. */
        char *body = malloc(MAX_BODY + 1);
        check(body != NULL);
        struct txo__http_chunked ch;
        memset(&ch, 0, sizeof(ch));
        size_t off = head.head_len;
        size_t body_len = 0;
        size_t step = 1;
        while (off < size) {
            size_t piece = size - off < step ? size - off : step++;
            size_t used = 0;
            rc = txo__http_chunked_feed(&ch, buf + off, piece, &used, body, MAX_BODY, &body_len,
                                        &why);
            check(body_len <= MAX_BODY);
            if (rc < 0)
                break;
            check(used <= piece);
            check(rc == 1 || used == piece);
            off += used;
            if (rc == 1)
                break;
        }
        free(body);
    }
    return 0;
}
