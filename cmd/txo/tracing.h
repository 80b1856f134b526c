/*
 * The daemons' span export (txo/tracer.h): the --otlp-* settings, and the one tracer of the
 * process that the HTTP server, the relay and the worker record into.
 */
#ifndef TXO_CMD_TRACING_H
#define TXO_CMD_TRACING_H

#include <stdbool.h>

#include "settings.h"
#include "txo/tracer.h"

struct tracing_settings {
    struct txo_tracer_opts opts; /* endpoint NULL or "": no export */
    const char *sample_ratio;    /* --trace-sample-ratio, parsed by daemon_tracing_start */
};

/* Appends --otlp-endpoint, --trace-sample-ratio and --service-name, with targets in o (o->opts
 * first set to the library's defaults). */
void settings_add_tracing(struct settings_table *t, struct tracing_settings *o);

/*
 * Starts the process's tracer when an endpoint is set (its drop counters in reg, which may be
 * NULL). False after a message naming cmd and the setting when a value is invalid (exit 2).
 */
bool daemon_tracing_start(const char *cmd, const struct tracing_settings *o,
                          struct txo_metrics *reg);

/* The process's tracer; NULL when spans are not exported. */
struct txo_tracer *daemon_tracer(void);

/* Sends what is queued and stops the tracer (at exit). */
void daemon_tracing_stop(void);

#endif
