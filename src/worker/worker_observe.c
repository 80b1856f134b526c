/*
 * What the worker tells observers (worker_observe.h): its metric families, the consume delay
 * and the consume spans.
 */
#include "core/common.h"

#include "core/text.h"
#include "txo/metrics.h"
#include "metrics/metrics_internal.h"
#include "txo/tracer.h"
#include "worker/worker_observe.h"

/* worker_observe.h. */
void txo__worker_observe_delay(struct txo_metric *delay, const struct txo_event *ev)
{
    int64_t at;
    if (delay == NULL || !txo__text_rfc3339_us(ev->created_at, &at))
        return;
    int64_t now = txo_realtime_us();
    const char *labels[] = {ev->aggregate_type != NULL ? ev->aggregate_type : ""};
    txo_metric_observe(delay, labels, now > at ? (double)(now - at) / 1e6 : 0.0);
}

/* worker_observe.h. */
bool txo__worker_consume_span(struct txo_event *ev, uint8_t parent[8])
{
    if (!ev->has_trace)
        return false;
    memcpy(parent, ev->trace.span_id, 8);
    txo_trace_child(&ev->trace, &ev->trace);
    return true;
}

/* The CONSUMER span "<what> process" of ctx (child of parent) with attrs, when sampled. */
static void record_process(struct txo_tracer *tracer, const struct txo_trace_ctx *ctx,
                           const uint8_t parent[8], const char *what,
                           const struct txo_span_attr *attrs, size_t n_attrs, int64_t start_us,
                           int rc)
{
    if (tracer == NULL || !(ctx->flags & TXO_TRACE_SAMPLED))
        return;
    char name[160];
    snprintf(name, sizeof(name), "%s process", what);
    struct txo_span s = {.ctx = *ctx,
                         .name = name,
                         .kind = TXO_SPAN_CONSUMER,
                         .start_us = start_us,
                         .end_us = txo_realtime_us(),
                         .status = rc,
                         .attrs = attrs,
                         .n_attrs = n_attrs};
    memcpy(s.parent_span_id, parent, 8);
    txo_tracer_record(tracer, &s);
}

/* worker_observe.h. */
void txo__worker_record_consume(struct txo_tracer *tracer, const struct txo_event *ev,
                                const uint8_t parent[8], int64_t start_us, int rc)
{
    if (!ev->has_trace)
        return;
    struct txo_span_attr attrs[] = {
        {.key = "messaging.operation.type", .str = "process"},
        {.key = "txo.event_type", .str = ev->type},
        {.key = "txo.aggregate_type", .str = ev->aggregate_type},
        {.key = "txo.idempotency_key", .str = ev->idempotency_key},
    };
    record_process(tracer, &ev->trace, parent, ev->type, attrs, ev->aggregate_type != NULL ? 4 : 2,
                   start_us, rc);
}

/* worker_observe.h. */
void txo__worker_record_command(struct txo_tracer *tracer, const struct txo_command *cmd,
                                const struct txo_trace_ctx *span, int64_t start_us, int rc)
{
    struct txo_span_attr attrs[] = {
        {.key = "messaging.operation.type", .str = "process"},
        {.key = "txo.command_type", .str = cmd->type},
        {.key = "txo.command_id", .num = cmd->id},
    };
    record_process(tracer, span, cmd->trace.span_id, cmd->type, attrs, TXO_ARRAY_LEN(attrs),
                   start_us, rc);
}

/* worker_observe.h. */
int txo__worker_metrics_register(struct txo_metrics *reg, struct worker_metrics *m,
                                 struct txo_error *err)
{
    memset(m, 0, sizeof(*m));
    if (reg == NULL)
        return 0;
    static const char *const outcome[] = {"outcome"};
    static const char *const table[] = {"table"};
    static const char *const deadline[] = {"kind", "saga_type"};
    const struct txo_metric_desc fams[] = {
        {TXO_METRIC_COUNTER, "txo_inbox_consumed_total",
         "Events whose handler's effect committed with their inbox row.", 0, NULL},
        {TXO_METRIC_COUNTER, "txo_inbox_duplicates_total",
         "Deliveries the inbox dropped as duplicates.", 0, NULL},
        {TXO_METRIC_COUNTER, "txo_saga_runs_total",
         "Saga runs by how they ended (COMPLETED, ABORTED, COMPENSATION_FAILED).", 1, outcome},
        {TXO_METRIC_COUNTER, "txo_saga_picked_up_total",
         "Sagas taken up by the scheduler without a live owner (new or resumed).", 0, NULL},
        {TXO_METRIC_COUNTER, "txo_saga_retries_total",
         "Automatic retries of COMPENSATION_FAILED sagas.", 0, NULL},
        {TXO_METRIC_COUNTER, "txo_saga_deadlines_passed_total",
         "Saga deadlines found passed, by kind (try: a call hung past its try timeout and was "
         "taken over; step; saga: the saga then compensates) and saga type.",
         2, deadline},
        {TXO_METRIC_COUNTER, "txo_commands_done_total", "command_queue commands completed.", 0,
         NULL},
        {TXO_METRIC_COUNTER, "txo_commands_failed_total",
         "command_queue command attempts that failed.", 0, NULL},
        {TXO_METRIC_COUNTER, "txo_retention_deleted_total",
         "Rows the retention cleaner deleted, by table.", 1, table},
    };
    struct txo_metric **slots[] = {&m->consumed,      &m->duplicates,      &m->runs,
                                   &m->picked_up,     &m->retries,         &m->deadlines,
                                   &m->commands_done, &m->commands_failed, &m->cleaned};
    struct txo_metric *got[TXO_ARRAY_LEN(fams)];
    int rc = txo_metrics_register_table(reg, fams, TXO_ARRAY_LEN(fams), got, err);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < TXO_ARRAY_LEN(fams); i++)
        *slots[i] = got[i];
    m->delay = txo__metrics_register_event_delay(
        reg, "txo_inbox_consume_delay_seconds",
        "From an event's insert (in its producer's transaction) to the commit of its handler's "
        "effect with its inbox row, by aggregate type.",
        &rc, err);
    return rc;
}
