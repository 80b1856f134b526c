/*
 * Span recording and OTLP/HTTP JSON export (include/txo/tracer.h).
 *
 * Data: a recorded span is copied into one allocation (struct queued_span, then its
 * attributes, links and strings) and appended to a FIFO behind `mu`, bounded by queue_max.
 * The exporter thread takes up to batch_max spans when that many wait, or when the oldest has
 * waited flush_ms, or at shutdown; encodes them as one ExportTraceServiceRequest
 * (otlp_json.c) and POSTs it with the library's HTTP client, with nothing locked. A request
 * the collector does not accept (an error, a timeout, a non-2xx answer) loses its spans,
 * counted as dropped: a tracer must not grow without bound while its collector is away.
 *
 * Stopping sends what is queued, batch after batch, but only while the collector takes it:
 * when the last request failed (before the stop or since), or the export timeout has passed
 * since the stop, the rest is dropped and counted. A collector that is slow or away thus holds
 * a stopping process up for one request, not for one timeout per queued batch; a healthy one
 * gets what is queued, within twice the timeout (the request in flight at the stop, and the
 * last one started before the deadline).
 *
 * Lock order: mu only. The exporter holds it only to take a batch; record() only to append.
 */
#include "core/common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "core/waiter.h"
#include "trace/tracer_internal.h"
#include "txo/http_client.h"
#include "txo/metrics.h"

struct txo_tracer {
    struct txo_tracer_opts opts; /* strings point into the copies below */
    char *endpoint;
    char *service_name;
    char *instance_id;
    struct txo_http_client *http; /* the exporter thread's */

    pthread_mutex_t mu;
    pthread_cond_t wake; /* CLOCK_MONOTONIC; a full batch, or stop */
    struct queued_span *head, *tail;
    size_t queued;
    bool stopping;
    int64_t stop_deadline_ms; /* monotonic, set with stopping: no batch is started after it */
    pthread_t thread;

    _Atomic uint64_t recorded, exported, dropped_queue_full, dropped_export;
    struct txo_metric *m_exported, *m_dropped;
};

void txo_tracer_opts_init(struct txo_tracer_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->sample_ratio = 1.0;
    opts->queue_max = 4096;
    opts->batch_max = 512;
    opts->flush_ms = 1000;
    opts->timeout_ms = 5000;
}

/* ---- recording ---- */

/* Bytes for a copy of s with its NUL (0 for NULL). */
static size_t str_size(const char *s)
{
    return s != NULL ? strlen(s) + 1 : 0;
}

/* Copies s to *at, advancing it; NULL stays NULL. */
static char *put_str(char **at, const char *s)
{
    if (s == NULL)
        return NULL;
    size_t n = strlen(s) + 1;
    char *out = memcpy(*at, s, n);
    *at += n;
    return out;
}

static struct queued_span *copy_span(const struct txo_span *s)
{
    size_t n_attrs = s->n_attrs < TXO_SPAN_ATTRS_MAX ? s->n_attrs : TXO_SPAN_ATTRS_MAX;
    size_t n_links = s->n_links < TXO_SPAN_LINKS_MAX ? s->n_links : TXO_SPAN_LINKS_MAX;
    size_t size = sizeof(struct queued_span) + n_attrs * sizeof(struct txo_span_attr) +
                  n_links * sizeof(struct txo_span_link) + str_size(s->name) +
                  str_size(s->status_message);
    for (size_t i = 0; i < n_attrs; i++)
        size += str_size(s->attrs[i].key) + str_size(s->attrs[i].str);
    struct queued_span *q = txo_malloc(size);
    if (q == NULL)
        return NULL;
    memset(q, 0, sizeof(*q));
    q->span = *s;
    struct txo_span_attr *attrs = (struct txo_span_attr *)(q + 1);
    struct txo_span_link *links = (struct txo_span_link *)(attrs + n_attrs);
    char *at = (char *)(links + n_links);
    q->span.name = put_str(&at, s->name != NULL ? s->name : "span");
    q->span.status_message = put_str(&at, s->status_message);
    for (size_t i = 0; i < n_attrs; i++) {
        attrs[i].key = put_str(&at, s->attrs[i].key);
        attrs[i].str = put_str(&at, s->attrs[i].str);
        attrs[i].num = s->attrs[i].num;
    }
    if (n_links > 0)
        memcpy(links, s->links, n_links * sizeof(*links));
    q->span.attrs = attrs;
    q->span.n_attrs = n_attrs;
    q->span.links = links;
    q->span.n_links = n_links;
    q->dropped_attrs = s->n_attrs - n_attrs;
    q->dropped_links = s->n_links - n_links;
    return q;
}

static void count_dropped(struct txo_tracer *t, const char *reason, _Atomic uint64_t *stat,
                          uint64_t n)
{
    atomic_fetch_add_explicit(stat, n, memory_order_relaxed);
    if (t->m_dropped != NULL) {
        const char *labels[] = {reason};
        txo_metric_add(t->m_dropped, labels, (double)n);
    }
}

void txo_tracer_record(struct txo_tracer *t, const struct txo_span *span)
{
    if (t == NULL || span == NULL || !(span->ctx.flags & TXO_TRACE_SAMPLED))
        return;
    pthread_mutex_lock(&t->mu);
    bool full = t->queued >= t->opts.queue_max || t->stopping;
    pthread_mutex_unlock(&t->mu);
    struct queued_span *q = full ? NULL : copy_span(span);
    if (q == NULL) {
        count_dropped(t, "queue_full", &t->dropped_queue_full, 1);
        return;
    }
    pthread_mutex_lock(&t->mu);
    if (t->queued >= t->opts.queue_max || t->stopping) {
        pthread_mutex_unlock(&t->mu);
        txo_free(q);
        count_dropped(t, "queue_full", &t->dropped_queue_full, 1);
        return;
    }
    q->queued_ms = txo_monotonic_ms();
    if (t->tail != NULL)
        t->tail->next = q;
    else
        t->head = q;
    t->tail = q;
    t->queued++;
    if (t->queued == t->opts.batch_max)
        pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->mu);
    atomic_fetch_add_explicit(&t->recorded, 1, memory_order_relaxed);
}

bool txo_tracer_sample(const struct txo_tracer *t, const uint8_t trace_id[16])
{
    if (t == NULL || t->opts.sample_ratio <= 0)
        return false;
    if (t->opts.sample_ratio >= 1)
        return true;
    /* The trace id's last 8 bytes, random in every id txo makes, against the ratio: every
     * process deciding for one trace decides alike. */
    uint64_t x = 0;
    for (int i = 8; i < 16; i++)
        x = x << 8 | trace_id[i];
    return (double)(x >> 11) * 0x1.0p-53 < t->opts.sample_ratio;
}

/* ---- export ---- */

static void free_spans(struct queued_span *first)
{
    while (first != NULL) {
        struct queued_span *next = first->next;
        txo_free(first);
        first = next;
    }
}

/* Sends the n spans of batch and frees them. Returns whether the collector accepted them. */
static bool export_batch(struct txo_tracer *t, struct queued_span *batch, size_t n)
{
    struct txo_error err;
    txo_error_init(&err);
    size_t len = 0;
    char *body = txo__otlp_json(batch, n, t->service_name, t->instance_id, &len);
    int rc = body != NULL ? 0 : TXO_ENOMEM;
    if (rc == 0)
        rc = txo_http_post_json(t->http, t->endpoint, NULL, NULL, body, len, NULL, &err);
    txo_free(body);
    if (rc == 0) {
        atomic_fetch_add_explicit(&t->exported, n, memory_order_relaxed);
        if (t->m_exported != NULL)
            txo_metric_add(t->m_exported, NULL, (double)n);
    } else {
        count_dropped(t, "export", &t->dropped_export, n);
        TXO_LOG(TXO_LOG_DEBUG, "trace", "spans not exported", TXO_KV_U64("spans", n),
                TXO_KV_STR("code", txo_err_name(rc)), TXO_KV_STR("error", err.msg));
    }
    free_spans(batch);
    return rc == 0;
}

static void *exporter(void *arg)
{
    struct txo_tracer *t = arg;
    bool collector_ok = true; /* the last request was accepted */
    pthread_mutex_lock(&t->mu);
    for (;;) {
        /* Wait for a full batch, the oldest span's flush time, or the stop. */
        while (!t->stopping && t->queued < t->opts.batch_max) {
            int64_t wait_ms = t->opts.flush_ms;
            if (t->head != NULL) {
                int64_t due = t->head->queued_ms + t->opts.flush_ms - txo_monotonic_ms();
                if (due <= 0)
                    break;
                wait_ms = due;
            }
            struct timespec until;
            txo_monotonic_deadline(wait_ms, &until);
            pthread_cond_timedwait(&t->wake, &t->mu, &until);
        }
        if (t->head == NULL) {
            if (t->stopping)
                break;
            continue;
        }
        if (t->stopping && (!collector_ok || txo_monotonic_ms() >= t->stop_deadline_ms)) {
            struct queued_span *rest = t->head;
            size_t n = t->queued;
            t->head = t->tail = NULL;
            t->queued = 0;
            pthread_mutex_unlock(&t->mu);
            count_dropped(t, "export", &t->dropped_export, n);
            free_spans(rest);
            return NULL;
        }
        struct queued_span *batch = t->head, *last = t->head;
        size_t n = 1;
        while (n < t->opts.batch_max && last->next != NULL) {
            last = last->next;
            n++;
        }
        t->head = last->next;
        if (t->head == NULL)
            t->tail = NULL;
        last->next = NULL;
        t->queued -= n;
        pthread_mutex_unlock(&t->mu);
        collector_ok = export_batch(t, batch, n);
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* ---- life ---- */

static bool http_url(const char *url)
{
    return url != NULL && (strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0);
}

static int register_metrics(struct txo_tracer *t, struct txo_error *err)
{
    struct txo_metrics *reg = t->opts.metrics;
    if (reg == NULL)
        return 0;
    static const char *const reason[] = {"reason"};
    int rc = 0;
    t->m_exported =
        txo_metrics_register_chained(reg, TXO_METRIC_COUNTER, "txo_trace_spans_exported_total",
                                     "Spans the OTLP collector accepted.", 0, NULL, &rc, err);
    t->m_dropped = txo_metrics_register_chained(
        reg, TXO_METRIC_COUNTER, "txo_trace_spans_dropped_total",
        "Spans not exported, by reason: queue_full (recorded faster than the collector takes "
        "them) or export (a request the collector did not accept).",
        1, reason, &rc, err);
    return rc;
}

/* Frees what txo_tracer_new() made (the thread is not running). */
static void tracer_release(struct txo_tracer *t)
{
    pthread_cond_destroy(&t->wake);
    pthread_mutex_destroy(&t->mu);
    txo_http_client_free(t->http);
    txo_free(t->endpoint);
    txo_free(t->service_name);
    txo_free(t->instance_id);
    txo_free(t);
}

int txo_tracer_new(const struct txo_tracer_opts *opts, struct txo_tracer **out,
                   struct txo_error *err)
{
    if (!http_url(opts->endpoint))
        return txo_error_set(err, TXO_EINVAL,
                             "OTLP endpoint must be an http:// or https:// URL, got \"%s\"",
                             opts->endpoint != NULL ? opts->endpoint : "");
    if (!(opts->sample_ratio >= 0 && opts->sample_ratio <= 1))
        return txo_error_set(err, TXO_EINVAL, "trace sample ratio must be from 0 to 1, got %g",
                             opts->sample_ratio);
    if (opts->queue_max == 0 || opts->batch_max == 0 || opts->flush_ms <= 0 ||
        opts->timeout_ms <= 0)
        return txo_error_set(err, TXO_EINVAL, "tracer queue, batch, flush and timeout must be > 0");

    struct txo_tracer *t = txo_calloc(1, sizeof(*t));
    if (t == NULL)
        return txo_error_set(err, TXO_ENOMEM, "tracer");
    t->opts = *opts;
    /* Made before anything can fail: tracer_release() destroys them on every path. */
    pthread_mutex_init(&t->mu, NULL);
    txo__cond_init_monotonic(&t->wake);
    char host[256] = "localhost", instance[300];
    (void)gethostname(host, sizeof(host) - 1);
    snprintf(instance, sizeof(instance), "%s:%ld", host, (long)getpid());
    t->endpoint = txo_strdup(opts->endpoint);
    t->service_name = txo_strdup(opts->service_name != NULL ? opts->service_name : "txo");
    t->instance_id = txo_strdup(opts->instance_id != NULL ? opts->instance_id : instance);
    int rc = t->endpoint != NULL && t->service_name != NULL && t->instance_id != NULL
                 ? 0
                 : txo_error_set(err, TXO_ENOMEM, "tracer");
    if (rc == 0)
        rc = register_metrics(t, err);
    if (rc == 0) {
        struct txo_http_client_opts ho;
        txo_http_client_opts_init(&ho);
        ho.timeout_ms = opts->timeout_ms;
        ho.connect_timeout_ms = opts->timeout_ms < 2000 ? opts->timeout_ms : 2000;
        ho.user_agent = "txo-otlp";
        rc = txo_http_client_new(&ho, &t->http, err);
    }
    int e = rc == 0 ? pthread_create(&t->thread, NULL, exporter, t) : 0;
    if (e != 0)
        rc = txo_error_set(err, TXO_ENOMEM, "tracer: cannot start its thread: %s", strerror(e));
    if (rc != 0) {
        tracer_release(t);
        return rc;
    }
    *out = t;
    return 0;
}

void txo_tracer_free(struct txo_tracer *t)
{
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    t->stopping = true;
    t->stop_deadline_ms = txo_monotonic_ms() + t->opts.timeout_ms;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    tracer_release(t);
}

void txo_tracer_get_stats(const struct txo_tracer *t, struct txo_tracer_stats *out)
{
    struct txo_tracer *m = (struct txo_tracer *)t;
    out->recorded = atomic_load(&m->recorded);
    out->exported = atomic_load(&m->exported);
    out->dropped_queue_full = atomic_load(&m->dropped_queue_full);
    out->dropped_export = atomic_load(&m->dropped_export);
}
