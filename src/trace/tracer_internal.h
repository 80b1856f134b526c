/*
 * What the tracer (tracer.c) and its OTLP JSON encoder (otlp_json.c) share.
 */
#ifndef TXO_TRACE_TRACER_INTERNAL_H
#define TXO_TRACE_TRACER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "txo/tracer.h"

/* A recorded span: the struct, then in the same allocation its attributes, links and strings
 * (span's pointers point there). */
struct queued_span {
    struct queued_span *next;
    int64_t queued_ms; /* monotonic: when it was queued */
    struct txo_span span;
    size_t dropped_attrs; /* beyond TXO_SPAN_ATTRS_MAX */
    size_t dropped_links; /* beyond TXO_SPAN_LINKS_MAX */
};

/*
 * The OTLP/HTTP JSON body (an ExportTraceServiceRequest) of the n spans from `first` on (a
 * list through next): one resource with service.name, service.instance.id and
 * service.version, one scope "txo". Returns it (txo_free) with its length in *len, or NULL when
 * out of memory.
 */
char *txo__otlp_json(const struct queued_span *first, size_t n, const char *service_name,
                     const char *instance_id, size_t *len);

#endif
