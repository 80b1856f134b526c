/*
 * The worker's consuming side (include/txo/worker.h): txo_worker_handle_message() runs an
 * event's handler in the transaction that records it in the inbox; txo_worker_handle_many()
 * does the same for a whole delivery in one transaction, creating the sagas its handlers start
 * with one statement per type, and falls back to one event at a time when it cannot;
 * txo_worker_handle_events() is the same for events local dispatch hands over decoded. Each
 * decodes first and shares the rest (handle_event, handle_batch). The sagas started are queued
 * for the runners (worker.c) once the transaction has committed.
 */
#include "core/common.h"

#include "core/text.h"
#include "txo/inbox.h"
#include "txo/metrics.h"
#include "txo/tracer.h"
#include "worker/worker_internal.h"

/* ---- handlers ---- */

void *txo_handler_arg(const struct txo_handler_ctx *hc)
{
    return hc->w->opts.handler_arg;
}

int txo_handler_start_saga(struct txo_handler_ctx *hc, const struct txo_saga_def *def,
                           const char *correlation_id, const char *payload_json, bool *created,
                           struct txo_error *err)
{
    if (def == NULL || txo__worker_find_saga(hc->w, def->type) != def)
        return txo_error_set(err, TXO_EINVAL, "saga type %s is not registered with the worker",
                             def != NULL && def->type != NULL ? def->type : "NULL");
    if (hc->batch) {
        if (created != NULL) { /* "was it new?" is known once the batch creates it */
            hc->needs_single = true;
            return txo_error_set(err, TXO_EUNSUPPORTED, "start_saga with created in a batch");
        }
        if (TXO_ARRAY_RESERVE(hc->pending, hc->cap_pending, hc->n_pending + 1, 16) < 0)
            return txo_error_set(err, TXO_ENOMEM, "starting a saga: out of memory");
        struct pending_saga *ps = &hc->pending[hc->n_pending];
        memset(ps, 0, sizeof(*ps));
        ps->def = def;
        ps->has_trace = hc->trace != NULL;
        if (hc->trace != NULL)
            ps->trace = *hc->trace;
        ps->s.correlation_id = txo_strdup(correlation_id != NULL ? correlation_id : "");
        ps->s.payload_json = payload_json != NULL ? txo_strdup(payload_json) : NULL;
        if (ps->s.correlation_id == NULL || (payload_json != NULL && ps->s.payload_json == NULL)) {
            txo_free((char *)ps->s.correlation_id);
            txo_free((char *)ps->s.payload_json);
            return txo_error_set(err, TXO_ENOMEM, "starting a saga: out of memory");
        }
        hc->n_pending++;
        return 0;
    }
    if (hc->n_started == STARTED_MAX)
        return txo_error_set(err, TXO_EINVAL, "a handler may start at most %d sagas", STARTED_MAX);
    struct txo_saga_ref *ref = &hc->started[hc->n_started];
    bool made = false;
    int rc =
        txo_saga_create(hc->tx, def, correlation_id, payload_json, hc->trace, ref->id, &made, err);
    if (rc != 0)
        return rc;
    snprintf(ref->type, sizeof(ref->type), "%s", def->type);
    if (made)
        hc->n_started++;
    if (created != NULL)
        *created = made;
    return 0;
}

void txo__worker_queue_started(struct txo_worker *w, const struct txo_handler_ctx *hc)
{
    for (size_t i = 0; i < hc->n_started; i++)
        txo__worker_enqueue(w, &hc->started[i], JOB_RUN);
}

struct consume_args {
    struct txo_worker *w;
    const struct txo_event *ev;
    const struct txo_event_handler *handler;
    bool duplicate;
    enum txo_inbox_order order;
    struct txo_handler_ctx hc;
};

static int consume_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct consume_args *a = arg;
    a->hc.tx = tx;
    a->hc.n_started = 0;
    int rc = txo_inbox_record(tx, a->ev->idempotency_key, a->ev->type, a->ev->payload,
                              &a->duplicate, err);
    if (rc != 0 || a->duplicate)
        return rc;
    struct txo_inbox_position pos = txo__order_position(a->ev);
    rc = txo_inbox_check_order(tx, &pos, 1, &a->order, err);
    if (rc == 0)
        rc = txo__order_hold(a->w->order, a->ev, a->order, a->handler->hold_out_of_order_ms, err);
    if (rc != 0)
        return rc; /* held: rolled back, delivered again; or parked for good */
    a->hc.trace = a->ev->has_trace ? &a->ev->trace : NULL;
    return a->handler->fn(tx, a->ev, &a->hc, err);
}

static const struct txo_event_handler *find_event_handler(const struct txo_worker *w,
                                                          const char *type)
{
    for (size_t i = 0; i < w->opts.n_events; i++)
        if (strcmp(w->opts.events[i].event_type, type) == 0)
            return &w->opts.events[i];
    return NULL;
}

/*
 * One decoded event: its inbox row, order check and handler in one transaction, then the
 * sagas it started queued. msg_id: the transport's id for it, checked against the event's key
 * (NULL: nothing to check).
 */
static int handle_event(struct txo_worker *w, const struct txo_event *in, const char *msg_id,
                        struct txo_error *err)
{
    struct txo_event copy = *in; /* its trace becomes the consume span's (the strings are in's) */
    struct txo_event *ev = &copy;
    const struct txo_event_handler *h = find_event_handler(w, ev->type);
    if (h == NULL)
        return 0; /* nobody here handles it: acknowledged */
    if (msg_id != NULL && strcmp(msg_id, ev->idempotency_key) != 0)
        /* The transport's dedupe id is the key; a mismatch means someone else published. */
        return txo_error_set(err, TXO_EINVAL, "message id %s differs from the envelope's key %s",
                             msg_id, ev->idempotency_key);
    uint8_t parent[8];
    bool traced = txo__worker_consume_span(ev, parent);
    int64_t start_us = txo_realtime_us();
    const struct txo_trace_ctx *prev_trace = txo_trace_set_current(traced ? &ev->trace : NULL);
    struct consume_args a = {.w = w, .ev = ev, .handler = h, .hc = {.w = w}};
    int rc;
    pthread_mutex_lock(&w->consume_mu);
    if (!txo__worker_ensure_db(w, &w->consume_db, "consumer")) {
        pthread_mutex_unlock(&w->consume_mu);
        txo_trace_set_current(prev_trace);
        return txo_error_set(err, TXO_ECONNECT, "worker database unreachable");
    }
    rc = txo_db_transact(w->consume_db, TXO_ISO_READ_COMMITTED, consume_tx, &a, err);
    txo__worker_drop_db_if_broken(&w->consume_db, rc);
    pthread_mutex_unlock(&w->consume_mu);
    txo_trace_set_current(prev_trace);
    if (traced && !a.duplicate)
        txo__worker_record_consume(w->opts.tracer, ev, parent, start_us, rc);
    if (rc == TXO_EBUSINESS && a.order == TXO_INBOX_GAP)
        txo__order_seen(w->order, ev, a.order); /* parked after its hold */
    if (rc != 0)
        return rc;
    /* Committed but not acknowledged yet: a crash here makes the transport deliver the event
     * again, and the inbox must drop it. */
    txo_crash_point("worker.after_consume");
    if (a.duplicate) {
        txo__worker_count(&w->duplicates, w->m.duplicates, NULL, 1);
        TXO_LOG(TXO_LOG_DEBUG, "worker", "duplicate delivery dropped",
                TXO_KV_STR("message_id", ev->idempotency_key));
    } else {
        txo__worker_count(&w->consumed, w->m.consumed, NULL, 1);
        txo__worker_observe_delay(w->m.delay, ev);
        txo__order_seen(w->order, ev, a.order);
        txo__worker_queue_started(w, &a.hc);
    }
    return 0;
}

int txo_worker_handle_message(void *arg, const struct txo_inbound_message *msg,
                              struct txo_error *err)
{
    struct txo_event ev;
    int rc = txo_envelope_decode_message(msg, &ev, err);
    if (rc != 0) {
        txo_error_wrap(err, "message %s", msg->msg_id != NULL ? msg->msg_id : "?");
        return rc;
    }
    rc = handle_event(arg, &ev, msg->msg_id, err);
    txo_event_release(&ev);
    return rc;
}

/* ---- batches of messages ---- */

static void pending_clear(struct txo_handler_ctx *hc)
{
    for (size_t i = 0; i < hc->n_pending; i++) {
        txo_free((char *)hc->pending[i].s.correlation_id);
        txo_free((char *)hc->pending[i].s.payload_json);
    }
    hc->n_pending = 0;
}

struct batch_args {
    struct txo_worker *w;
    const struct txo_event *evs;
    const struct txo_event_handler **handlers;
    const size_t *idx; /* the messages handled here: indexes into evs */
    size_t m;
    struct txo_inbox_entry *entries;
    bool *duplicate;
    struct txo_inbox_position *pos; /* of the messages that are not duplicates */
    enum txo_inbox_order *order;    /* order[k] for message k */
    struct txo_handler_ctx hc;
};

/* Creates the pending sagas, one txo_saga_create_many() per saga type. */
static int flush_pending(struct batch_args *a, struct txo_error *err)
{
    struct txo_handler_ctx *hc = &a->hc;
    if (hc->n_pending == 0)
        return 0;
    struct txo_saga_new *made = txo_calloc(hc->n_pending, sizeof(*made));
    if (made == NULL)
        return txo_error_set(err, TXO_ENOMEM, "creating %zu sagas: out of memory", hc->n_pending);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < hc->n_pending; i++) {
        const struct txo_saga_def *def = hc->pending[i].def;
        bool first = true;
        for (size_t j = 0; j < i && first; j++)
            first = hc->pending[j].def != def;
        if (!first)
            continue;
        size_t k = 0;
        for (size_t j = i; j < hc->n_pending; j++)
            if (hc->pending[j].def == def) {
                made[k] = hc->pending[j].s;
                made[k++].trace = hc->pending[j].has_trace ? &hc->pending[j].trace : NULL;
            }
        rc = txo_saga_create_many(hc->tx, def, made, k, err);
        k = 0;
        for (size_t j = i; rc == 0 && j < hc->n_pending; j++)
            if (hc->pending[j].def == def)
                hc->pending[j].s = made[k++];
    }
    txo_free(made);
    return rc;
}

/*
 * The order verdicts of the batch's messages that are not duplicates, in one
 * txo_inbox_check_order(). An event after a gap for a handler that holds such events sends
 * the batch down the single path, which holds that one event alone.
 */
static int check_batch_order(struct txo_tx *tx, struct batch_args *a, struct txo_error *err)
{
    size_t n = 0;
    for (size_t k = 0; k < a->m; k++) {
        a->order[k] = TXO_INBOX_UNCHECKED;
        if (!a->duplicate[k])
            a->pos[n++] = txo__order_position(&a->evs[a->idx[k]]);
    }
    enum txo_inbox_order *got = a->order + a->m; /* n verdicts, then spread to order[] */
    int rc = txo_inbox_check_order(tx, a->pos, n, got, err);
    for (size_t k = 0, j = 0; rc == 0 && k < a->m; k++) {
        if (a->duplicate[k])
            continue;
        a->order[k] = got[j++];
        if (a->order[k] == TXO_INBOX_GAP && a->handlers[a->idx[k]]->hold_out_of_order_ms > 0)
            rc = txo_error_set(err, TXO_EUNSUPPORTED, "an event to hold in a batch");
    }
    return rc;
}

static int batch_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct batch_args *a = arg;
    a->hc.tx = tx;
    a->hc.n_started = 0;
    a->hc.needs_single = false;
    pending_clear(&a->hc);
    int rc = txo_inbox_record_many(tx, a->entries, a->m, a->duplicate, err);
    if (rc == 0)
        rc = check_batch_order(tx, a, err);
    for (size_t k = 0; rc == 0 && k < a->m; k++) {
        if (a->duplicate[k])
            continue;
        const struct txo_event *ev = &a->evs[a->idx[k]];
        a->hc.trace = ev->has_trace ? &ev->trace : NULL;
        const struct txo_trace_ctx *prev = txo_trace_set_current(a->hc.trace);
        rc = a->handlers[a->idx[k]]->fn(tx, ev, &a->hc, err);
        txo_trace_set_current(prev);
    }
    if (rc == 0)
        rc = flush_pending(a, err);
    return rc;
}

/*
 * The core of txo_worker_handle_many() and txo_worker_handle_events(): the events in[i] whose
 * results[i] is still 0 (decoded, and their transport id their key) in one transaction, or
 * one by one when the batch cannot be; results[i] / errors[i] get each verdict.
 */
static void handle_batch(struct txo_worker *w, const struct txo_event *in, size_t n, int *results,
                         struct txo_error *errors)
{
    /* Copies whose trace becomes each consume span's (the strings are in's). */
    struct txo_event *evs = txo_calloc(n, sizeof(*evs));
    int64_t start_us = txo_realtime_us();
    const struct txo_event_handler **handlers = txo_calloc(n, sizeof(*handlers));
    size_t *idx = txo_calloc(n, sizeof(*idx));
    struct txo_inbox_entry *entries = txo_calloc(n, sizeof(*entries));
    bool *duplicate = txo_calloc(n, sizeof(*duplicate));
    struct txo_inbox_position *pos = txo_calloc(n, sizeof(*pos));
    enum txo_inbox_order *order = txo_calloc(2 * n, sizeof(*order));
    uint8_t(*parents)[8] = txo_calloc(n, sizeof(*parents)); /* of the traced events' spans */
    bool *traced = txo_calloc(n, sizeof(*traced));
    struct batch_args a = {.w = w, .hc = {.w = w, .batch = true}};
    size_t m = 0;
    if (evs == NULL || handlers == NULL || idx == NULL || entries == NULL || duplicate == NULL ||
        pos == NULL || order == NULL || parents == NULL || traced == NULL) {
        for (size_t i = 0; i < n; i++)
            results[i] = txo_error_set(&errors[i], TXO_ENOMEM, "batch of %zu: out of memory", n);
        goto out;
    }
    memcpy(evs, in, n * sizeof(*evs));
    for (size_t i = 0; i < n; i++) {
        if (results[i] != 0)
            continue;
        handlers[i] = find_event_handler(w, evs[i].type);
        if (handlers[i] == NULL)
            continue; /* nobody here handles it: acknowledged */
        traced[i] = txo__worker_consume_span(&evs[i], parents[i]);
        entries[m] = (struct txo_inbox_entry){.event_id = evs[i].idempotency_key,
                                              .event_type = evs[i].type,
                                              .payload_json = evs[i].payload};
        idx[m++] = i;
    }
    if (m == 0)
        goto out;
    a.evs = evs;
    a.handlers = handlers;
    a.idx = idx;
    a.m = m;
    a.entries = entries;
    a.duplicate = duplicate;
    a.pos = pos;
    a.order = order;
    struct txo_error err;
    txo_error_init(&err);
    int rc = TXO_EINVAL; /* one message: the single path */
    if (m > 1) {
        pthread_mutex_lock(&w->consume_mu);
        if (txo__worker_ensure_db(w, &w->consume_db, "consumer")) {
            rc = txo_db_transact(w->consume_db, TXO_ISO_READ_COMMITTED, batch_tx, &a, &err);
            txo__worker_drop_db_if_broken(&w->consume_db, rc);
        } else {
            rc = TXO_ECONNECT;
        }
        pthread_mutex_unlock(&w->consume_mu);
    }
    if (rc != 0) {
        /* One by one: each message gets the single path's verdict (and a handler error is
         * only that message's). */
        if (m > 1)
            TXO_LOG(TXO_LOG_DEBUG, "worker", "message batch runs one by one",
                    TXO_KV_U64("messages", m), TXO_KV_STR("code", txo_err_name(rc)),
                    TXO_KV_STR("err", err.msg));
        for (size_t k = 0; k < m; k++) /* in[]: each run alone makes its own consume span */
            results[idx[k]] = handle_event(w, &in[idx[k]], NULL, &errors[idx[k]]);
        goto out;
    }
    txo_crash_point("worker.after_consume");
    size_t dups = 0;
    for (size_t k = 0; k < m; k++)
        dups += duplicate[k];
    if (dups > 0)
        txo__worker_count(&w->duplicates, w->m.duplicates, NULL, dups);
    txo__worker_count(&w->consumed, w->m.consumed, NULL, m - dups);
    for (size_t k = 0; k < m; k++) {
        if (!duplicate[k])
            txo__worker_observe_delay(w->m.delay, &evs[idx[k]]);
        if (!duplicate[k] && traced[idx[k]])
            txo__worker_record_consume(w->opts.tracer, &evs[idx[k]], parents[idx[k]], start_us, 0);
        txo__order_seen(w->order, &evs[idx[k]], order[k]);
    }
    for (size_t i = 0; i < a.hc.n_pending; i++) {
        const struct pending_saga *ps = &a.hc.pending[i];
        if (!ps->s.created)
            continue;
        struct txo_saga_ref ref = {.status = TXO_SAGA_RUNNING};
        snprintf(ref.id, sizeof(ref.id), "%s", ps->s.saga_id);
        snprintf(ref.type, sizeof(ref.type), "%s", ps->def->type);
        txo__worker_enqueue(w, &ref, JOB_RUN);
    }
out:
    pending_clear(&a.hc);
    txo_free(a.hc.pending);
    txo_free(evs);
    txo_free(handlers);
    txo_free(idx);
    txo_free(entries);
    txo_free(duplicate);
    txo_free(pos);
    txo_free(order);
    txo_free(parents);
    txo_free(traced);
}

int txo_worker_handle_many(void *arg, const struct txo_inbound_message *msgs, size_t n,
                           int *results, struct txo_error *errors)
{
    struct txo_worker *w = arg;
    struct txo_event *evs = txo_calloc(n, sizeof(*evs));
    if (evs == NULL) {
        for (size_t i = 0; i < n; i++)
            results[i] = txo_error_set(&errors[i], TXO_ENOMEM, "batch of %zu: out of memory", n);
        return 0;
    }
    /* Each message's own verdict first: not an envelope (permanent), its transport id not its
     * key when it is handled here (permanent). */
    for (size_t i = 0; i < n; i++) {
        results[i] = txo_envelope_decode_message(&msgs[i], &evs[i], &errors[i]);
        if (results[i] != 0) {
            txo_error_wrap(&errors[i], "message %s", msgs[i].msg_id ? msgs[i].msg_id : "?");
            continue;
        }
        if (msgs[i].msg_id != NULL && find_event_handler(w, evs[i].type) != NULL &&
            strcmp(msgs[i].msg_id, evs[i].idempotency_key) != 0)
            results[i] = txo_error_set(&errors[i], TXO_EINVAL,
                                       "message id %s differs from the envelope's key %s",
                                       msgs[i].msg_id, evs[i].idempotency_key);
    }
    handle_batch(w, evs, n, results, errors);
    for (size_t i = 0; i < n; i++)
        txo_event_release(&evs[i]); /* zeroed when it did not decode */
    txo_free(evs);
    return 0;
}

int txo_worker_handle_events(void *arg, const struct txo_event *evs, size_t n, int *results,
                             struct txo_error *errors)
{
    for (size_t i = 0; i < n; i++)
        results[i] = 0;
    handle_batch(arg, evs, n, results, errors);
    return 0;
}
