#include "core/common.h"

/*
 * The worker's use of the inbox's order verdicts: counts, logs once per aggregate, and holds
 * events found after a gap for handlers that ask for it (src/worker/order_watch.h).
 *
 * Memory is bounded: LOGGED_MAX aggregates remembered as logged (past three quarters full, new
 * ones are counted but not logged, which one line says), HOLDS_MAX events on hold remembered
 * with the time of their first hold (the oldest forgotten first: its hold starts again).
 * A hold's start lives in this process only: a restarted worker holds an event anew.
 */

#include <pthread.h>

#include "core/text.h"
#include "worker/order_watch.h"

#define LOGGED_MAX 4096 /* a power of two */
#define HOLDS_MAX  256

struct hold {
    uint64_t key; /* hash of the event's idempotency key; 0: free */
    int64_t since_ms;
};

struct txo__order_watch {
    pthread_mutex_t mu;
    struct txo_metric *m_out_of_order; /* labels: aggregate_type, kind */
    uint64_t logged[LOGGED_MAX];       /* hashes of aggregates logged; 0: free */
    size_t n_logged;
    bool logged_full;
    struct hold holds[HOLDS_MAX];
};

/* FNV-1a of a, a NUL, b; never 0 (0 marks a free slot). */
static uint64_t hash2(const char *a, const char *b)
{
    a = a != NULL ? a : "";
    b = b != NULL ? b : "";
    uint64_t h = txo__fnv1a(TXO__FNV1A_BASIS, a, strlen(a) + 1); /* with its NUL */
    h = txo__fnv1a(h, b, strlen(b));
    return h != 0 ? h : 1;
}

struct txo__order_watch *txo__order_watch_new(struct txo_metrics *reg, struct txo_error *err)
{
    struct txo__order_watch *ow = txo_calloc(1, sizeof(*ow));
    if (ow == NULL) {
        txo_error_set(err, TXO_ENOMEM, "worker: out of memory");
        return NULL;
    }
    pthread_mutex_init(&ow->mu, NULL);
    if (reg != NULL) {
        static const char *const labels[] = {"aggregate_type", "kind"};
        ow->m_out_of_order = txo_metrics_register(
            reg, TXO_METRIC_COUNTER, "txo_inbox_out_of_order_total",
            "Consumed events out of their aggregate's order, by aggregate type and kind: gap (an "
            "earlier event was not handled before it), older (it came after a newer one).",
            2, labels, NULL, 0, err);
        if (ow->m_out_of_order == NULL) {
            txo__order_watch_free(ow);
            return NULL;
        }
    }
    return ow;
}

void txo__order_watch_free(struct txo__order_watch *ow)
{
    if (ow == NULL)
        return;
    pthread_mutex_destroy(&ow->mu);
    txo_free(ow);
}

struct txo_inbox_position txo__order_position(const struct txo_event *ev)
{
    return (struct txo_inbox_position){
        .aggregate_type = ev->aggregate_type,
        .aggregate_id = ev->aggregate_id,
        .sequence = ev->sequence,
        .prev_sequence = ev->prev_sequence,
    };
}

/* Under ow->mu: true the first time aggregate h is seen here (and remembers it). */
static bool first_time(struct txo__order_watch *ow, uint64_t h)
{
    size_t i = (size_t)h & (LOGGED_MAX - 1);
    while (ow->logged[i] != 0) {
        if (ow->logged[i] == h)
            return false;
        i = (i + 1) & (LOGGED_MAX - 1);
    }
    if (ow->n_logged >= LOGGED_MAX / 4 * 3)
        return false; /* full: counted, not logged */
    ow->logged[i] = h;
    ow->n_logged++;
    return true;
}

void txo__order_seen(struct txo__order_watch *ow, const struct txo_event *ev,
                     enum txo_inbox_order o)
{
    if (o != TXO_INBOX_GAP && o != TXO_INBOX_OLDER)
        return;
    const char *type = ev->aggregate_type != NULL ? ev->aggregate_type : "";
    const char *labels[] = {type, txo_inbox_order_name(o)};
    if (ow->m_out_of_order != NULL)
        txo_metric_inc(ow->m_out_of_order, labels);
    pthread_mutex_lock(&ow->mu);
    bool log = first_time(ow, hash2(type, ev->aggregate_id));
    bool now_full = !log && !ow->logged_full && ow->n_logged >= LOGGED_MAX / 4 * 3;
    if (now_full)
        ow->logged_full = true;
    pthread_mutex_unlock(&ow->mu);
    if (log)
        TXO_LOG(TXO_LOG_WARN, "inbox",
                "event out of its aggregate's order (logged once per aggregate)",
                TXO_KV_STR("kind", txo_inbox_order_name(o)), TXO_KV_STR("aggregate_type", type),
                TXO_KV_STR("aggregate_id", ev->aggregate_id), TXO_KV_U64("sequence", ev->sequence),
                TXO_KV_U64("prev_sequence", ev->prev_sequence),
                TXO_KV_STR("message_id", ev->idempotency_key));
    if (now_full)
        TXO_LOG(TXO_LOG_WARN, "inbox",
                "too many aggregates had events out of order: further ones are counted in "
                "txo_inbox_out_of_order_total, not logged",
                TXO_KV_I64("aggregates", LOGGED_MAX / 4 * 3));
}

int txo__order_hold(struct txo__order_watch *ow, const struct txo_event *ev, enum txo_inbox_order o,
                    unsigned hold_ms, struct txo_error *err)
{
    if (hold_ms == 0)
        return 0;
    uint64_t key = hash2(ev->idempotency_key, ev->type);
    int64_t now = txo_monotonic_ms();
    pthread_mutex_lock(&ow->mu);
    /* h: this event's hold; spare: a free slot, else the oldest hold (forgotten for h). */
    struct hold *h = NULL, *spare = NULL;
    for (size_t i = 0; i < HOLDS_MAX && h == NULL; i++) {
        struct hold *s = &ow->holds[i];
        if (s->key == key)
            h = s;
        else if (spare == NULL ||
                 (spare->key != 0 && (s->key == 0 || s->since_ms < spare->since_ms)))
            spare = s;
    }
    if (o != TXO_INBOX_GAP) { /* its predecessor came: forget the hold */
        if (h != NULL)
            h->key = 0;
        pthread_mutex_unlock(&ow->mu);
        return 0;
    }
    if (h == NULL) {
        h = spare;
        h->key = key;
        h->since_ms = now;
    }
    int64_t held = now - h->since_ms;
    bool over = held >= (int64_t)hold_ms;
    if (over)
        h->key = 0;
    pthread_mutex_unlock(&ow->mu);
    if (over)
        return txo_error_set(err, TXO_EBUSINESS,
                             "parked: event %s (sequence %" PRIu64 " of %s/%s) follows sequence "
                             "%" PRIu64 ", which was not handled within %u ms",
                             ev->idempotency_key, ev->sequence, ev->aggregate_type,
                             ev->aggregate_id, ev->prev_sequence, hold_ms);
    return txo_error_set(err, TXO_EUNAVAILABLE,
                         "held: event %s (sequence %" PRIu64 " of %s/%s) waits for sequence "
                         "%" PRIu64 " to be handled (%lld of %u ms)",
                         ev->idempotency_key, ev->sequence, ev->aggregate_type, ev->aggregate_id,
                         ev->prev_sequence, (long long)held, hold_ms);
}
