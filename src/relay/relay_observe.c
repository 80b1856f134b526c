/*
 * What the relay tells observers about the events it moves (relay_internal.h): the trace
 * context each claimed row was appended in, the publish delay of what it marked PUBLISHED,
 * and the span of each published batch.
 */
#include "core/common.h"

#include "relay/relay_internal.h"
#include "txo/tracer.h"

/* relay_internal.h. */
void txo__relay_load_trace(struct txo_outbox_message *m, const struct txo_rows *rows, size_t i,
                           int col_parent, int col_state)
{
    m->traceparent = NULL;
    m->tracestate = NULL;
    if (txo_rows_is_null(rows, i, (size_t)col_parent))
        return;
    const char *parent = txo_rows_str(rows, i, (size_t)col_parent, NULL);
    const char *state = txo_rows_is_null(rows, i, (size_t)col_state)
                            ? NULL
                            : txo_rows_str(rows, i, (size_t)col_state, NULL);
    struct txo_trace_ctx ctx;
    if (!txo_trace_parse(parent, state, &ctx))
        return;
    m->traceparent = parent;
    /* Sent as stored when it is valid as a whole (the parser dropped it otherwise). */
    m->tracestate = state != NULL && state[0] != '\0' && ctx.state[0] != '\0' ? state : NULL;
}

void txo__relay_observe_delays(struct txo_relay *r)
{
    if (r->metrics.delay == NULL)
        return;
    int64_t now = txo_realtime_us();
    for (size_t i = 0; i < r->n; i++) {
        int64_t at;
        if (r->results[i] != 0 || !txo__text_rfc3339_us(r->msgs[i].created_at, &at))
            continue;
        const char *labels[] = {r->msgs[i].aggregate_type != NULL ? r->msgs[i].aggregate_type : ""};
        txo_metric_observe(r->metrics.delay, labels, now > at ? (double)(now - at) / 1e6 : 0.0);
    }
}

/* relay_internal.h. */
void txo__relay_record_publish_span(struct txo_relay *r, int64_t start_us)
{
    if (r->opts.tracer == NULL || r->n == 0)
        return;
    struct txo_span_link *links = txo_calloc(r->n, sizeof(*links));
    if (links == NULL)
        return; /* a span is never worth failing a batch */
    size_t n_links = 0, acked = 0;
    bool sampled = false;
    int failure = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (r->results[i] == 0)
            acked++;
        else if (r->results[i] < 0 && failure == 0)
            failure = r->results[i];
        struct txo_trace_ctx ctx;
        if (r->msgs[i].traceparent == NULL || !txo_trace_parse(r->msgs[i].traceparent, NULL, &ctx))
            continue;
        memcpy(links[n_links].trace_id, ctx.trace_id, 16);
        memcpy(links[n_links++].span_id, ctx.span_id, 8);
        sampled = sampled || (ctx.flags & TXO_TRACE_SAMPLED);
    }
    if (sampled) {
        struct txo_span_attr attrs[] = {
            {.key = "messaging.system", .str = r->pub->ops->name},
            {.key = "messaging.operation.type", .str = "send"},
            {.key = "messaging.batch.message_count", .num = (int64_t)r->n},
            {.key = "txo.relay_id", .str = r->relay_id},
            {.key = "txo.acknowledged", .num = (int64_t)acked},
        };
        struct txo_span s = {.name = "outbox publish",
                             .kind = TXO_SPAN_PRODUCER,
                             .start_us = start_us,
                             .end_us = txo_realtime_us(),
                             .status = failure,
                             .attrs = attrs,
                             .n_attrs = TXO_ARRAY_LEN(attrs),
                             .links = links,
                             .n_links = n_links};
        txo_trace_new_root(true, &s.ctx);
        txo_tracer_record(r->opts.tracer, &s);
    }
    txo_free(links);
}
