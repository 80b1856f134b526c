/*
 * libFuzzer harness of the W3C Trace Context parser (txo_trace_parse). The input is a
 * traceparent, then after the first newline a tracestate. Whatever comes in: a context that
 * parses formats to a version-00 traceparent that parses back to the same ids and flags
 * (version 00 keeps the received flags, a later one only the sampled bit), its tracestate is at
 * most TXO_TRACESTATE_MAX bytes, and the tracestate it kept is accepted again unchanged.
 */
#include <stdlib.h>
#include <string.h>

#include "txo/trace.h"

static void check(bool ok)
{
    if (!ok)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *nl = strchr(text, '\n');
    const char *state = NULL;
    if (nl != NULL) {
        *nl = '\0';
        state = nl + 1;
    }
    struct txo_trace_ctx c;
    if (txo_trace_parse(text, state, &c)) {
        check(strlen(c.state) <= TXO_TRACESTATE_MAX);
        char out[TXO_TRACEPARENT_LEN + 1];
        txo_trace_format(&c, out);
        check(strlen(out) == TXO_TRACEPARENT_LEN);
        struct txo_trace_ctx back;
        check(txo_trace_parse(out, c.state, &back));
        check(memcmp(back.trace_id, c.trace_id, sizeof(c.trace_id)) == 0);
        check(memcmp(back.span_id, c.span_id, sizeof(c.span_id)) == 0);
        check(back.flags == c.flags);
        check(strcmp(back.state, c.state) == 0);
    }
    free(text);
    return 0;
}
