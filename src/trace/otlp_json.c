/*
 * The OTLP/HTTP JSON encoding of spans (tracer_internal.h), as the OpenTelemetry protocol's
 * JSON mapping says: trace and span ids as lower-case hex (not base64), 64-bit integers
 * (times in nanoseconds, integer attributes) as decimal strings, enums as numbers, field
 * names in lowerCamelCase.
 */
#include "core/common.h"

#include <inttypes.h>
#include <stdio.h>

#include <jansson.h>

#include "trace/tracer_internal.h"
#include "txo/features.h"

static json_t *hex(const uint8_t *b, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    char out[33];
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 0x0f];
    }
    out[2 * n] = '\0';
    return json_string(out);
}

static json_t *int64_str(int64_t v)
{
    char buf[24];
    snprintf(buf, sizeof(buf), "%" PRId64, v);
    return json_string(buf);
}

static json_t *kv(const char *key, const char *str, int64_t num)
{
    json_t *value = str != NULL ? json_pack("{s:s}", "stringValue", str)
                                : json_pack("{s:o}", "intValue", int64_str(num));
    return json_pack("{s:s,s:o}", "key", key, "value", value);
}

static bool all_zero(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0)
            return false;
    return true;
}

static json_t *span_json(const struct queued_span *q)
{
    const struct txo_span *s = &q->span;
    json_t *attrs = json_array(), *links = json_array();
    for (size_t i = 0; i < s->n_attrs; i++)
        json_array_append_new(attrs, kv(s->attrs[i].key, s->attrs[i].str, s->attrs[i].num));
    for (size_t i = 0; i < s->n_links; i++)
        json_array_append_new(links,
                              json_pack("{s:o,s:o}", "traceId", hex(s->links[i].trace_id, 16),
                                        "spanId", hex(s->links[i].span_id, 8)));
    /* Status: 1 OK, 2 ERROR with the code's name and the message. */
    json_t *status =
        s->status == 0
            ? json_pack("{s:i}", "code", 1)
            : json_pack("{s:i,s:s}", "code", 2, "message",
                        s->status_message != NULL ? s->status_message : txo_err_name(s->status));
    if (s->status != 0)
        json_array_append_new(attrs, kv("txo.error_code", txo_err_name(s->status), 0));
    json_t *span =
        json_pack("{s:o,s:o,s:s,s:i,s:o,s:o,s:o,s:o,s:o,s:I,s:I}", "traceId",
                  hex(s->ctx.trace_id, 16), "spanId", hex(s->ctx.span_id, 8), "name", s->name,
                  "kind", (int)s->kind, "startTimeUnixNano", int64_str(s->start_us * 1000),
                  "endTimeUnixNano", int64_str(s->end_us * 1000), "attributes", attrs, "links",
                  links, "status", status, "droppedAttributesCount", (json_int_t)q->dropped_attrs,
                  "droppedLinksCount", (json_int_t)q->dropped_links);
    if (span != NULL && !all_zero(s->parent_span_id, 8))
        json_object_set_new(span, "parentSpanId", hex(s->parent_span_id, 8));
    if (span != NULL && s->ctx.state[0] != '\0')
        json_object_set_new(span, "traceState", json_string(s->ctx.state));
    if (span != NULL)
        json_object_set_new(span, "flags", json_integer(s->ctx.flags));
    return span;
}

char *txo__otlp_json(const struct queued_span *first, size_t n, const char *service_name,
                     const char *instance_id, size_t *len)
{
    json_t *spans = json_array();
    size_t k = 0;
    for (const struct queued_span *q = first; q != NULL && k < n; q = q->next, k++)
        json_array_append_new(spans, span_json(q));
    json_t *resource =
        json_pack("{s:[o,o,o]}", "attributes", kv("service.name", service_name, 0),
                  kv("service.instance.id", instance_id, 0), kv("service.version", TXO_VERSION, 0));
    json_t *doc =
        json_pack("{s:[{s:o,s:[{s:{s:s,s:s},s:o}]}]}", "resourceSpans", "resource", resource,
                  "scopeSpans", "scope", "name", "txo", "version", TXO_VERSION, "spans", spans);
    char *text = doc != NULL ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (text == NULL)
        return NULL;
    *len = strlen(text);
    char *out = txo_strdup(text);
    free(text);
    return out;
}
