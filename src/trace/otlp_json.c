/*
 * The OTLP/HTTP JSON encoding of spans (tracer_internal.h), as the OpenTelemetry protocol's
 * JSON mapping says: trace and span ids as lower-case hex (not base64), 64-bit integers
 * (times in nanoseconds, integer attributes) as decimal strings, enums as numbers, field
 * names in lowerCamelCase.
 *
 * Written straight into one growing buffer: the exporter encodes every span the process
 * records (a dozen per order at full sampling), so no document tree is built. Strings are
 * escaped as RFC 8259 says ('"', '\\' and control characters); a byte that does not belong to
 * a well-formed UTF-8 character becomes '?', so the body is always valid JSON.
 */
#include "core/common.h"

#include <inttypes.h>
#include <stdio.h>

#include "core/buf.h"
#include "trace/tracer_internal.h"
#include "txo/features.h"
#include "txo/text.h"

/* s as a JSON string, quotes included. */
static void put_str(struct txo__buf *o, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t len = strlen(s);
    /* The worst case: every byte a \u00XX escape. */
    if (!txo__buf_reserve(o, 6 * len + 2))
        return;
    char *w = o->data + o->len;
    *w++ = '"';
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            size_t n = txo_utf8_char_len(s + i, len - i);
            if (n == 0) {
                *w++ = '?';
                i++;
            } else {
                memcpy(w, s + i, n);
                w += n;
                i += n;
            }
            continue;
        }
        if (c == '"' || c == '\\') {
            *w++ = '\\';
            *w++ = (char)c;
        } else if (c < 0x20) {
            memcpy(w, "\\u00", 4);
            w[4] = hex[c >> 4];
            w[5] = hex[c & 0x0f];
            w += 6;
        } else {
            *w++ = (char)c;
        }
        i++;
    }
    *w++ = '"';
    o->len = (size_t)(w - o->data);
    *w = '\0';
}

/* "name":"<hex of b[0..n)>" */
static void put_hex(struct txo__buf *o, const char *name, const uint8_t *b, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    char text[2 * 16 + 1];
    for (size_t i = 0; i < n; i++) {
        text[2 * i] = digits[b[i] >> 4];
        text[2 * i + 1] = digits[b[i] & 0x0f];
    }
    text[2 * n] = '\0';
    txo__buf_puts(o, "\"");
    txo__buf_puts(o, name);
    txo__buf_puts(o, "\":\"");
    txo__buf_put(o, text, 2 * n);
    txo__buf_puts(o, "\"");
}

/* v in decimal. */
static void put_i64(struct txo__buf *o, int64_t v)
{
    char text[24];
    int n = snprintf(text, sizeof(text), "%" PRId64, v);
    if (n > 0)
        txo__buf_put(o, text, (size_t)n);
}

/* "name":"v" (a 64-bit integer, which the JSON mapping writes as a string) */
static void put_i64_str(struct txo__buf *o, const char *name, int64_t v)
{
    txo__buf_puts(o, ",\"");
    txo__buf_puts(o, name);
    txo__buf_puts(o, "\":\"");
    put_i64(o, v);
    txo__buf_puts(o, "\"");
}

/* {"key":"k","value":{"stringValue":"s"}} or {..."intValue":"n"} */
static void put_kv(struct txo__buf *o, const char *key, const char *str, int64_t num)
{
    txo__buf_puts(o, "{\"key\":");
    put_str(o, key);
    if (str != NULL) {
        txo__buf_puts(o, ",\"value\":{\"stringValue\":");
        put_str(o, str);
        txo__buf_puts(o, "}}");
    } else {
        txo__buf_puts(o, ",\"value\":{\"intValue\":\"");
        put_i64(o, num);
        txo__buf_puts(o, "\"}}");
    }
}

static bool all_zero(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0)
            return false;
    return true;
}

static void put_span(struct txo__buf *o, const struct queued_span *q)
{
    const struct txo_span *s = &q->span;
    txo__buf_puts(o, "{");
    put_hex(o, "traceId", s->ctx.trace_id, 16);
    txo__buf_puts(o, ",");
    put_hex(o, "spanId", s->ctx.span_id, 8);
    if (!all_zero(s->parent_span_id, 8)) {
        txo__buf_puts(o, ",");
        put_hex(o, "parentSpanId", s->parent_span_id, 8);
    }
    if (s->ctx.state[0] != '\0') {
        txo__buf_puts(o, ",\"traceState\":");
        put_str(o, s->ctx.state);
    }
    txo__buf_puts(o, ",\"flags\":");
    put_i64(o, s->ctx.flags);
    txo__buf_puts(o, ",\"name\":");
    put_str(o, s->name);
    txo__buf_puts(o, ",\"kind\":");
    put_i64(o, (int64_t)s->kind);
    put_i64_str(o, "startTimeUnixNano", s->start_us * 1000);
    put_i64_str(o, "endTimeUnixNano", s->end_us * 1000);
    txo__buf_puts(o, ",\"attributes\":[");
    for (size_t i = 0; i < s->n_attrs; i++) {
        if (i > 0)
            txo__buf_puts(o, ",");
        put_kv(o, s->attrs[i].key, s->attrs[i].str, s->attrs[i].num);
    }
    if (s->status != 0) {
        if (s->n_attrs > 0)
            txo__buf_puts(o, ",");
        put_kv(o, "txo.error_code", txo_err_name(s->status), 0);
    }
    txo__buf_puts(o, "],\"droppedAttributesCount\":");
    put_i64(o, (int64_t)q->dropped_attrs);
    txo__buf_puts(o, ",\"links\":[");
    for (size_t i = 0; i < s->n_links; i++) {
        txo__buf_puts(o, i > 0 ? ",{" : "{");
        put_hex(o, "traceId", s->links[i].trace_id, 16);
        txo__buf_puts(o, ",");
        put_hex(o, "spanId", s->links[i].span_id, 8);
        txo__buf_puts(o, "}");
    }
    txo__buf_puts(o, "],\"droppedLinksCount\":");
    put_i64(o, (int64_t)q->dropped_links);
    /* Status: 1 OK, 2 ERROR with the message (or the code's name). */
    if (s->status == 0) {
        txo__buf_puts(o, ",\"status\":{\"code\":1}}");
    } else {
        txo__buf_puts(o, ",\"status\":{\"code\":2,\"message\":");
        put_str(o, s->status_message != NULL ? s->status_message : txo_err_name(s->status));
        txo__buf_puts(o, "}}");
    }
}

char *txo__otlp_json(const struct queued_span *first, size_t n, const char *service_name,
                     const char *instance_id, size_t *len)
{
    struct txo__buf o = {0};
    txo__buf_puts(&o, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[");
    put_kv(&o, "service.name", service_name, 0);
    txo__buf_puts(&o, ",");
    put_kv(&o, "service.instance.id", instance_id, 0);
    txo__buf_puts(&o, ",");
    put_kv(&o, "service.version", TXO_VERSION, 0);
    txo__buf_puts(&o, "]},\"scopeSpans\":[{\"scope\":{\"name\":\"txo\",\"version\":");
    put_str(&o, TXO_VERSION);
    txo__buf_puts(&o, "},\"spans\":[");
    size_t k = 0;
    for (const struct queued_span *q = first; q != NULL && k < n; q = q->next, k++) {
        if (k > 0)
            txo__buf_puts(&o, ",");
        put_span(&o, q);
    }
    txo__buf_puts(&o, "]}]}]}");
    if (o.oom) {
        txo_free(o.data);
        return NULL;
    }
    *len = o.len;
    return o.data;
}
