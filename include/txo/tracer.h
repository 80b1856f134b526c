/*
 * Spans, and their export to an OpenTelemetry collector over OTLP/HTTP with JSON bodies
 * (POST <endpoint>, usually http://collector:4318/v1/traces).
 *
 * Recording never blocks and never fails the work it describes: txo_tracer_record() copies
 * the span into a bounded queue and returns; an exporter thread sends the queue in batches.
 * A full queue, a collector that is down, slow or refusing drops spans, and every dropped
 * span is counted (txo_trace_spans_dropped_total{reason}), never retried into the queue.
 *
 * Sampling: a span whose trace context is sampled (TXO_TRACE_SAMPLED, decided where the trace
 * started, as W3C Trace Context carries it) is recorded; an unsampled one is not.
 * txo_tracer_sample() makes that decision for a new root: a share `sample_ratio` of traces,
 * chosen from the trace id so every process that starts the same trace decides alike.
 *
 * Every span carries the resource attributes service.name, service.instance.id and
 * service.version, and the instrumentation scope "txo".
 *
 * Thread-safety: txo_tracer_record() and txo_tracer_sample() may be called from any thread;
 * txo_tracer_new() and txo_tracer_free() from one.
 */
#ifndef TXO_TRACER_H
#define TXO_TRACER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/common.h"
#include "txo/err.h"
#include "txo/trace.h"

struct txo_metrics;
struct txo_tracer;

/* OTLP's SpanKind. */
enum txo_span_kind {
    TXO_SPAN_INTERNAL = 1,
    TXO_SPAN_SERVER = 2,   /* an HTTP request served */
    TXO_SPAN_CLIENT = 3,   /* a call to another service */
    TXO_SPAN_PRODUCER = 4, /* an event appended or published */
    TXO_SPAN_CONSUMER = 5, /* an event consumed */
};

/* A string or integer attribute of a span; key and str are copied when recorded. */
struct txo_span_attr {
    const char *key; /* "http.route", "messaging.system", ... */
    const char *str; /* NULL: the attribute is the integer num */
    int64_t num;
};

/* Another span this one is about (a batch's span links each item's context). */
struct txo_span_link {
    uint8_t trace_id[16];
    uint8_t span_id[8];
};

/* At most this many links and attributes of a span are kept; the rest are counted as dropped
 * in the exported span. */
#define TXO_SPAN_LINKS_MAX 256
#define TXO_SPAN_ATTRS_MAX 32

/* A finished span, as txo_tracer_record() takes it (everything is copied). */
struct txo_span {
    struct txo_trace_ctx ctx;  /* its trace, its own span id, the flags */
    uint8_t parent_span_id[8]; /* all zero: a root span */
    const char *name;          /* "POST /orders", "saga step ChargePayment" */
    enum txo_span_kind kind;
    int64_t start_us, end_us;   /* wall clock, microseconds since the epoch */
    int status;                 /* 0: ok; a negative TXO_E* code: the span failed */
    const char *status_message; /* NULL, or why it failed */
    const struct txo_span_attr *attrs;
    size_t n_attrs;
    const struct txo_span_link *links;
    size_t n_links;
};

struct txo_tracer_opts {
    const char *endpoint;        /* OTLP/HTTP traces URL, e.g. http://127.0.0.1:4318/v1/traces */
    double sample_ratio;         /* 0..1, for new roots; default 1 */
    size_t queue_max;            /* spans waiting to be sent; default 4096 */
    size_t batch_max;            /* spans per request; default 512 */
    int64_t flush_ms;            /* a partial batch waits at most this long; default 1000 */
    int64_t timeout_ms;          /* one export request, connect included; default 5000 */
    const char *service_name;    /* resource service.name; default "txo" */
    const char *instance_id;     /* resource service.instance.id; default "<hostname>:<pid>" */
    struct txo_metrics *metrics; /* NULL: no metrics; else the txo_trace_spans_* families */
};

/* Fills opts with the defaults above (endpoint NULL: must be set). */
TXO_API void txo_tracer_opts_init(struct txo_tracer_opts *opts);

/*
 * Starts the exporter thread. Errors: TXO_EINVAL (no endpoint, not http:// or https://, a
 * ratio outside 0..1, a zero queue or batch), TXO_ENOMEM, and the metrics registry's.
 */
TXO_API TXO_MUST_CHECK int txo_tracer_new(const struct txo_tracer_opts *opts,
                                          struct txo_tracer **out, struct txo_error *err);

/*
 * Sends what is queued, stops the thread, frees the tracer. Batches are sent while the
 * collector accepts them and the export timeout since this call has not passed; after a
 * failed request (the one in flight included) the rest is dropped (counted, reason export).
 * So it waits at most twice the export timeout, and about one timeout when the collector is
 * slow or away. NULL is a no-op.
 */
TXO_API void txo_tracer_free(struct txo_tracer *t);

/* Whether a new trace with this trace id is sampled (sample_ratio of them). */
TXO_API bool txo_tracer_sample(const struct txo_tracer *t, const uint8_t trace_id[16]);

/* Queues a copy of span for export when its context is sampled; drops it (counted) when the
 * queue is full. Never blocks on the network. t NULL: a no-op. */
TXO_API void txo_tracer_record(struct txo_tracer *t, const struct txo_span *span);

/* What the tracer did so far (for tests and `txo stats`). */
struct txo_tracer_stats {
    uint64_t recorded; /* queued */
    uint64_t exported; /* accepted by the collector */
    uint64_t dropped_queue_full;
    uint64_t dropped_export; /* lost with a request the collector did not accept */
};
TXO_API void txo_tracer_get_stats(const struct txo_tracer *t, struct txo_tracer_stats *out);

#endif
