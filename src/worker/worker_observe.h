/*
 * The worker's observations of consumed events: the consume delay and the consume span
 * (worker_observe.c), and its metric families. Any thread.
 */
#ifndef TXO_WORKER_OBSERVE_H
#define TXO_WORKER_OBSERVE_H

#include <stdbool.h>
#include <stdint.h>

#include "txo/cmdq.h"
#include "txo/consumer.h"

struct txo_metric;
struct txo_metrics;
struct txo_tracer;

/* The worker's metric families (NULL each without a registry). */
struct worker_metrics {
    struct txo_metric *consumed, *duplicates, *runs, *picked_up, *retries, *deadlines,
        *commands_done, *commands_failed, *cleaned;
    struct txo_metric *delay; /* histogram by aggregate_type: event insert -> consumed */
};

/*
 * Registers the worker's families in reg (NULL: none, m all NULL): txo_inbox_consumed_total,
 * _duplicates_total, txo_saga_runs_total{outcome}, txo_saga_picked_up_total, _retries_total,
 * txo_saga_deadlines_passed_total{kind,saga_type}, txo_commands_done_total, _failed_total,
 * txo_retention_deleted_total{table} and txo_inbox_consume_delay_seconds{aggregate_type}.
 * Errors: those of txo_metrics_register().
 */
int txo__worker_metrics_register(struct txo_metrics *reg, struct worker_metrics *m,
                                 struct txo_error *err);

/* Observes the consume delay of ev, just committed, in delay (NULL: none): now minus its
 * insert time, both wall clocks (an insert time ahead of ours counts as 0; an envelope without
 * created_at is not observed). */
void txo__worker_observe_delay(struct txo_metric *delay, const struct txo_event *ev);

/*
 * The consume span of an event that has a trace context: its context becomes a child of the
 * producer's (parent gets the producer's span id), so the sagas it starts and the lines it
 * logs continue the consume span. False when it has none.
 */
bool txo__worker_consume_span(struct txo_event *ev, uint8_t parent[8]);

/* Records the CONSUMER span of ev ("<type> process") in tracer (NULL: none; sampled traces
 * only), begun at start_us (wall clock), with rc its outcome. */
void txo__worker_record_consume(struct txo_tracer *tracer, const struct txo_event *ev,
                                const uint8_t parent[8], int64_t start_us, int rc);

/* Records the CONSUMER span of a command run ("<type> process"), span, a child of the context
 * cmd was enqueued in, begun at start_us, with rc its outcome. */
void txo__worker_record_command(struct txo_tracer *tracer, const struct txo_command *cmd,
                                const struct txo_trace_ctx *span, int64_t start_us, int rc);

#endif
