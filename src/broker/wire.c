/*
 * The wire form of an event, shared by the publishers: see wire.h.
 */
#include "core/common.h"

#include "broker/wire.h"

int txo__wire_encode(const char *who, const struct txo_outbox_message *m, struct txo__wire *w,
                     struct txo_error *err)
{
    memset(w, 0, sizeof(*w));
    if (m->idempotency_key == NULL || m->idempotency_key[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "%s: event has no idempotency key", who);
    w->binary = txo_envelope_default_format() == TXO_ENVELOPE_CLOUDEVENTS_BINARY;
    w->body = w->binary ? txo_envelope_binary(m, &w->headers, &w->len, err)
                        : txo_envelope_encode(m, &w->len, err);
    if (w->body == NULL) {
        int rc = err != NULL && err->code != 0 ? err->code : TXO_EINVAL;
        txo__wire_release(w);
        return rc;
    }
    if (m->traceparent != NULL) {
        w->plain.names[w->plain.n] = "traceparent";
        w->plain.values[w->plain.n++] = m->traceparent;
        if (m->tracestate != NULL) {
            w->plain.names[w->plain.n] = "tracestate";
            w->plain.values[w->plain.n++] = m->tracestate;
        }
    }
    return 0;
}

int txo__wire_encode_to(const char *who, txo__wire_dest_fn dest_fn, const char *template,
                        const struct txo_outbox_message *m, char *dest, size_t dest_size,
                        struct txo__wire *w, struct txo_error *err)
{
    memset(w, 0, sizeof(*w));
    int rc = dest_fn(template, m->aggregate_type != NULL ? m->aggregate_type : "",
                     m->event_type != NULL ? m->event_type : "", dest, dest_size, err);
    if (rc < 0)
        return rc;
    return txo__wire_encode(who, m, w, err);
}

void txo__wire_release(struct txo__wire *w)
{
    txo_free(w->body);
    txo_ce_headers_release(&w->headers);
    memset(w, 0, sizeof(*w));
}
