/*
 * The two columns in which the outbox, the saga instances and the command queue store a trace
 * context (traceparent VARCHAR(55), tracestate VARCHAR(512), both nullable), as the bound
 * parameters of an INSERT. Implemented in trace.c.
 */
#ifndef TXO_TRACE_TRACE_PARAMS_H
#define TXO_TRACE_TRACE_PARAMS_H

#include "txo/db.h"
#include "txo/trace.h"

/* trace's traceparent (formatted into tp, which must outlive the statement) and tracestate
 * into p[0] and p[1]; NULL parameters when trace is NULL, p[1] NULL for an empty state. */
void txo__trace_params(const struct txo_trace_ctx *trace, char tp[TXO_TRACEPARENT_LEN + 1],
                       struct txo_param p[2]);

#endif
