/*
 * The strict request parser (parse.h). The head is validated in two passes: first every byte
 * received so far is checked for the ones no head may contain (NUL, a bare CR or LF, other
 * control bytes are judged per line later), so that garbage is refused at once instead of
 * when the head deadline expires; then, once the blank line is in, the request line and each
 * field line are parsed and the framing fields are counted and compared.
 */
#include "core/common.h"

#include "core/text.h"
#include "http/parse.h"

#include <strings.h>

static bool is_tchar(unsigned char c)
{
    /* RFC 9110 token: ALPHA DIGIT and !#$%&'*+-.^_`|~ */
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* field-vchar / SP / HTAB: visible ASCII and obs-text; never a control byte or DEL. */
static bool is_value_char(unsigned char c)
{
    return c == ' ' || c == '\t' || (c >= 0x21 && c != 0x7f);
}

static int refuse(struct txo__http_refusal *why, int status, const char *error, const char *message)
{
    why->status = status;
    why->error = error;
    why->message = message;
    return -1;
}

static bool span_ieq(struct txo__http_span s, const char *lit)
{
    size_t n = strlen(lit);
    return s.len == n && strncasecmp(s.p, lit, n) == 0;
}

/* Checks the received bytes for the ones that can never be part of a head. */
static int scan_bytes(const char *buf, size_t len, struct txo__http_refusal *why)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '\0')
            return refuse(why, 400, "bad_request", "NUL byte in the request head");
        if (c == '\n' && (i == 0 || buf[i - 1] != '\r'))
            return refuse(why, 400, "bad_request", "bare LF in the request head");
        if (c == '\r' && i + 1 < len && buf[i + 1] != '\n')
            return refuse(why, 400, "bad_request", "bare CR in the request head");
    }
    return 0;
}

static const char *find_crlf(const char *p, const char *end)
{
    for (; p + 1 < end; p++)
        if (p[0] == '\r' && p[1] == '\n')
            return p;
    return NULL;
}

/* A Content-Length value: 1 to 18 digits, nothing else (no sign, no list, no spaces). */
static bool parse_length(struct txo__http_span v, uint64_t *out)
{
    if (v.len == 0 || v.len > 18)
        return false;
    uint64_t n = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (v.p[i] < '0' || v.p[i] > '9')
            return false;
        n = n * 10 + (uint64_t)(v.p[i] - '0');
    }
    *out = n;
    return true;
}

/* Applies a Connection field: a comma-separated list of options. */
static void apply_connection(struct txo__http_head *head, struct txo__http_span v)
{
    size_t i = 0;
    while (i < v.len) {
        while (i < v.len && (v.p[i] == ' ' || v.p[i] == '\t' || v.p[i] == ','))
            i++;
        size_t start = i;
        while (i < v.len && v.p[i] != ',' && v.p[i] != ' ' && v.p[i] != '\t')
            i++;
        struct txo__http_span opt = {v.p + start, i - start};
        if (span_ieq(opt, "close"))
            head->keep_alive = false;
        else if (span_ieq(opt, "keep-alive") && head->version_minor == 0)
            head->keep_alive = true;
    }
}

static int parse_request_line(const char *p, const char *eol, struct txo__http_head *head,
                              struct txo__http_refusal *why)
{
    const char *m = p;
    while (p < eol && is_tchar((unsigned char)*p))
        p++;
    if (p == m || p == eol || *p != ' ')
        return refuse(why, 400, "bad_request", "malformed request line");
    head->method = (struct txo__http_span){m, (size_t)(p - m)};
    p++;
    const char *t = p;
    while (p < eol && (unsigned char)*p >= 0x21 && (unsigned char)*p <= 0x7e)
        p++;
    if (p == t || p == eol || *p != ' ')
        return refuse(why, 400, "bad_request", "malformed request target");
    if (*t != '/')
        return refuse(why, 400, "bad_request", "the request target must be a path");
    const char *q = memchr(t, '?', (size_t)(p - t));
    if (q != NULL) {
        head->path = (struct txo__http_span){t, (size_t)(q - t)};
        head->query = (struct txo__http_span){q + 1, (size_t)(p - q - 1)};
    } else {
        head->path = (struct txo__http_span){t, (size_t)(p - t)};
        head->query = (struct txo__http_span){t, 0};
    }
    if (memchr(t, '#', (size_t)(p - t)) != NULL)
        return refuse(why, 400, "bad_request", "a fragment in the request target");
    p++;
    size_t vlen = (size_t)(eol - p);
    if (vlen != 8 || memcmp(p, "HTTP/", 5) != 0 || p[5] < '0' || p[5] > '9' || p[6] != '.' ||
        p[7] < '0' || p[7] > '9')
        return refuse(why, 400, "bad_request", "malformed HTTP version");
    if (p[5] != '1' || (p[7] != '0' && p[7] != '1'))
        return refuse(why, 505, "http_version_not_supported", "only HTTP/1.0 and 1.1 are served");
    head->version_minor = (unsigned)(p[7] - '0');
    head->keep_alive = head->version_minor == 1;
    return 0;
}

static int parse_field_line(const char *p, const char *eol, struct txo__http_head *head,
                            struct txo__http_refusal *why)
{
    if (*p == ' ' || *p == '\t')
        return refuse(why, 400, "bad_request", "obsolete line folding in a header");
    const char *n = p;
    while (p < eol && is_tchar((unsigned char)*p))
        p++;
    if (p == n)
        return refuse(why, 400, "bad_request", "malformed header name");
    if (p == eol || *p != ':')
        return refuse(why, 400, "bad_request",
                      "malformed header line (whitespace or a bad byte before the colon)");
    struct txo__http_span name = {n, (size_t)(p - n)};
    p++;
    for (const char *c = p; c < eol; c++)
        if (!is_value_char((unsigned char)*c))
            return refuse(why, 400, "bad_request", "control byte in a header value");
    while (p < eol && (*p == ' ' || *p == '\t'))
        p++;
    const char *end = eol;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (head->n_fields == TXO_HTTP_MAX_FIELDS)
        return refuse(why, 431, "header_too_large", "too many header fields");
    head->fields[head->n_fields].name = name;
    head->fields[head->n_fields].value = (struct txo__http_span){p, (size_t)(end - p)};
    head->n_fields++;
    return 0;
}

/* The framing: RFC 9112 section 6.3, with every ambiguous case refused. */
static int apply_fields(struct txo__http_head *head, struct txo__http_refusal *why)
{
    size_t n_cl = 0;
    size_t n_te = 0;
    size_t n_host = 0;
    const struct txo__http_span *cl = txo__http_head_field(head, "Content-Length", &n_cl);
    const struct txo__http_span *te = txo__http_head_field(head, "Transfer-Encoding", &n_te);
    (void)txo__http_head_field(head, "Host", &n_host);
    if (n_cl > 1)
        return refuse(why, 400, "bad_request", "more than one Content-Length");
    if (n_te > 1)
        return refuse(why, 400, "bad_request", "more than one Transfer-Encoding");
    if (cl != NULL && te != NULL)
        return refuse(why, 400, "bad_request", "both Content-Length and Transfer-Encoding");
    if (head->version_minor == 1 && n_host != 1)
        return refuse(why, 400, "bad_request", "an HTTP/1.1 request needs exactly one Host");
    head->body = TXO_HTTP_BODY_NONE;
    if (cl != NULL) {
        if (!parse_length(*cl, &head->content_length))
            return refuse(why, 400, "bad_request", "malformed Content-Length");
        head->body = TXO_HTTP_BODY_LENGTH;
    }
    if (te != NULL) {
        if (head->version_minor == 0)
            return refuse(why, 400, "bad_request", "Transfer-Encoding in an HTTP/1.0 request");
        if (!span_ieq(*te, "chunked"))
            return refuse(why, 501, "not_implemented",
                          "the only transfer coding served is chunked");
        head->body = TXO_HTTP_BODY_CHUNKED;
    }
    for (size_t i = 0; i < head->n_fields; i++) {
        if (span_ieq(head->fields[i].name, "Connection"))
            apply_connection(head, head->fields[i].value);
        else if (span_ieq(head->fields[i].name, "Expect") &&
                 span_ieq(head->fields[i].value, "100-continue"))
            head->expect_continue = head->version_minor == 1;
    }
    return 0;
}

int txo__http_parse_head(const char *buf, size_t len, size_t max_head_bytes,
                         struct txo__http_head *head, struct txo__http_refusal *why)
{
    size_t avail = len < max_head_bytes ? len : max_head_bytes;
    /* Empty lines before the request line are ignored (RFC 9112 section 2.2). */
    size_t start = 0;
    while (start + 1 < avail && buf[start] == '\r' && buf[start + 1] == '\n')
        start += 2;
    const char *end = NULL;
    for (size_t i = start; i + 3 < avail; i++) {
        if (buf[i] == '\r' && memcmp(buf + i, "\r\n\r\n", 4) == 0) {
            end = buf + i + 2; /* the blank line starts here */
            break;
        }
    }
    /* Only the head is judged byte by byte: what follows it is a body. */
    if (scan_bytes(buf, end != NULL ? (size_t)(end + 2 - buf) : avail, why) < 0)
        return -1;
    if (end == NULL) {
        if (len < max_head_bytes)
            return 0;
        if (find_crlf(buf + start, buf + avail) == NULL)
            return refuse(why, 414, "uri_too_long", "the request line is too long");
        return refuse(why, 431, "header_too_large", "the request head is too large");
    }

    memset(head, 0, sizeof(*head));
    const char *p = buf + start;
    const char *eol = find_crlf(p, end + 2);
    if (parse_request_line(p, eol, head, why) < 0)
        return -1;
    p = eol + 2;
    while (p < end) {
        eol = find_crlf(p, end + 2);
        if (parse_field_line(p, eol, head, why) < 0)
            return -1;
        p = eol + 2;
    }
    if (apply_fields(head, why) < 0)
        return -1;
    head->head_len = (size_t)(end + 2 - buf);
    return 1;
}

const struct txo__http_span *txo__http_head_field(const struct txo__http_head *head,
                                                  const char *name, size_t *count)
{
    const struct txo__http_span *first = NULL;
    size_t n = 0;
    for (size_t i = 0; i < head->n_fields; i++) {
        if (span_ieq(head->fields[i].name, name)) {
            if (first == NULL)
                first = &head->fields[i].value;
            n++;
        }
    }
    if (count != NULL)
        *count = n;
    return first;
}

/* ---- chunked bodies ---- */

enum chunk_state {
    CHUNK_SIZE,    /* hex digits of a chunk size */
    CHUNK_EXT,     /* after ';' up to CR: ignored */
    CHUNK_SIZE_LF, /* CR seen after the size line */
    CHUNK_DATA,    /* size bytes of data */
    CHUNK_DATA_CR, /* CRLF after the data */
    CHUNK_DATA_LF, /* CR seen after the data */
    CHUNK_TRAILER, /* start of a trailer line, or of the final CRLF */
    CHUNK_TRAILER_LINE,
    CHUNK_TRAILER_LF,
    CHUNK_FINAL_LF, /* CR of the final empty line seen */
};

/* Limits for the lines of a chunked body: a size with its extensions, all trailers. */
enum { CHUNK_LINE_MAX = 256, CHUNK_TRAILERS_MAX = 4096, CHUNK_DIGITS_MAX = 15 };

static int bad_chunk(struct txo__http_refusal *why, const char *message)
{
    return refuse(why, 400, "bad_request", message);
}

int txo__http_chunked_feed(struct txo__http_chunked *c, const char *in, size_t len, size_t *used,
                           char *out, size_t max_body, size_t *out_len,
                           struct txo__http_refusal *why)
{
    size_t i = 0;
    while (i < len) {
        char ch = in[i];
        switch ((enum chunk_state)c->state) {
        case CHUNK_SIZE: {
            int d = txo__hex_digit(ch);
            if (d >= 0) {
                if (++c->digits > CHUNK_DIGITS_MAX)
                    return bad_chunk(why, "chunk size too long");
                c->size = c->size * 16 + (uint64_t)d;
            } else if (c->digits > 0 && (ch == ';' || ch == '\r')) {
                c->state = ch == ';' ? CHUNK_EXT : CHUNK_SIZE_LF;
            } else {
                return bad_chunk(why, "malformed chunk size");
            }
            c->line_bytes++;
            i++;
            break;
        }
        case CHUNK_EXT:
            if (ch == '\r')
                c->state = CHUNK_SIZE_LF;
            else if (!is_value_char((unsigned char)ch))
                return bad_chunk(why, "control byte in a chunk extension");
            if (++c->line_bytes > CHUNK_LINE_MAX)
                return bad_chunk(why, "chunk extension too long");
            i++;
            break;
        case CHUNK_SIZE_LF:
            if (ch != '\n')
                return bad_chunk(why, "malformed chunk size line");
            i++;
            if (c->size > max_body - *out_len)
                return refuse(why, 413, "payload_too_large", "request body too large");
            c->state = c->size == 0 ? CHUNK_TRAILER : CHUNK_DATA;
            c->line_bytes = 0;
            c->digits = 0;
            break;
        case CHUNK_DATA: {
            size_t n = len - i;
            if (n > c->size)
                n = (size_t)c->size;
            memcpy(out + *out_len, in + i, n);
            *out_len += n;
            c->size -= n;
            i += n;
            if (c->size == 0)
                c->state = CHUNK_DATA_CR;
            break;
        }
        case CHUNK_DATA_CR:
            if (ch != '\r')
                return bad_chunk(why, "chunk data longer than its size");
            c->state = CHUNK_DATA_LF;
            i++;
            break;
        case CHUNK_DATA_LF:
            if (ch != '\n')
                return bad_chunk(why, "chunk data longer than its size");
            c->state = CHUNK_SIZE;
            i++;
            break;
        case CHUNK_TRAILER:
            if (ch == '\r') {
                c->state = CHUNK_FINAL_LF;
            } else if (is_tchar((unsigned char)ch)) {
                c->state = CHUNK_TRAILER_LINE;
            } else {
                return bad_chunk(why, "malformed trailer field");
            }
            if (++c->trailer_bytes > CHUNK_TRAILERS_MAX)
                return refuse(why, 431, "header_too_large", "trailer fields too large");
            i++;
            break;
        case CHUNK_TRAILER_LINE:
            if (ch == '\r')
                c->state = CHUNK_TRAILER_LF;
            else if (!is_value_char((unsigned char)ch))
                return bad_chunk(why, "control byte in a trailer field");
            if (++c->trailer_bytes > CHUNK_TRAILERS_MAX)
                return refuse(why, 431, "header_too_large", "trailer fields too large");
            i++;
            break;
        case CHUNK_TRAILER_LF:
            if (ch != '\n')
                return bad_chunk(why, "bare CR in a trailer field");
            c->state = CHUNK_TRAILER;
            i++;
            break;
        case CHUNK_FINAL_LF:
            if (ch != '\n')
                return bad_chunk(why, "malformed end of a chunked body");
            *used = i + 1;
            return 1;
        default:
            TXO_BUG("chunk state %d", c->state);
        }
    }
    *used = i;
    return 0;
}

long txo__http_pct_decode(const char *in, size_t len, bool plus_is_space, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = in[i];
        if (ch == '%') {
            if (i + 2 >= len)
                return -1;
            int hi = txo__hex_digit(in[i + 1]);
            int lo = txo__hex_digit(in[i + 2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                return -1;
            out[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else if (ch == '+' && plus_is_space) {
            out[o++] = ' ';
        } else {
            out[o++] = ch;
        }
    }
    return (long)o;
}
