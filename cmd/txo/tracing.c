/*
 * The daemons' span export: see tracing.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_errors.h"
#include "tracing.h"

static struct txo_tracer *tracer; /* set before the daemons' threads start, read after */

void settings_add_tracing(struct settings_table *t, struct tracing_settings *o)
{
    txo_tracer_opts_init(&o->opts);
    const struct setting group[] = {
        {.name = "otlp-endpoint",
         .env = "TXO_OTLP_ENDPOINT",
         .type = SETTING_STRING,
         .help = "export spans as OTLP/HTTP JSON to this URL, e.g. "
                 "http://127.0.0.1:4318/v1/traces (unset: none; the trace context is "
                 "propagated either way)",
         .target = &o->opts.endpoint},
        {.name = "trace-sample-ratio",
         .env = "TXO_TRACE_SAMPLE_RATIO",
         .type = SETTING_STRING,
         .def = "1",
         .help = "share of the traces this process starts that are exported, 0..1 (a trace "
                 "started elsewhere follows its caller's decision)",
         .target = &o->sample_ratio},
        {.name = "service-name",
         .env = "TXO_SERVICE_NAME",
         .type = SETTING_STRING,
         .def = "txo",
         .help = "the service.name of the exported spans",
         .target = &o->opts.service_name},
    };
    settings_add(t, group, TXO_ARRAY_LEN(group));
}

bool daemon_tracing_start(const char *cmd, const struct tracing_settings *o,
                          struct txo_metrics *reg)
{
    if (o->opts.endpoint == NULL || o->opts.endpoint[0] == '\0')
        return true;
    char *end = NULL;
    double ratio = o->sample_ratio != NULL ? strtod(o->sample_ratio, &end) : 1.0;
    if (o->sample_ratio != NULL &&
        (end == o->sample_ratio || *end != '\0' || !(ratio >= 0) || ratio > 1)) {
        cli_error("txo %s: --trace-sample-ratio must be a number from 0 to 1, got \"%s\"", cmd,
                  o->sample_ratio);
        return false;
    }
    struct txo_tracer_opts to = o->opts;
    to.sample_ratio = ratio;
    to.metrics = reg;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_tracer_new(&to, &tracer, &err) != 0) {
        cli_error("txo %s: --otlp-endpoint: %s", cmd, err.msg);
        return false;
    }
    return true;
}

struct txo_tracer *daemon_tracer(void)
{
    return tracer;
}

void daemon_tracing_stop(void)
{
    txo_tracer_free(tracer);
    tracer = NULL;
}
