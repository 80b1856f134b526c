#include "core/common.h"

/*
 * Handing a claimed batch to the publisher without letting an aggregate's later event reach
 * the broker before an earlier one.
 *
 * A batch of a relay that orders by aggregate may hold several events of one aggregate, in
 * claim order (which is their order). Two things could still invert them:
 *   - a failure inside the batch: the first event fails (it goes back to PENDING for a retry)
 *     while the next one is acknowledged. Most brokers accept pipelined messages
 *     independently (NATS, RabbitMQ confirms, Redis pipelines, a gRPC service, a local
 *     handler), so this publishes in waves: wave k holds the k-th event of every aggregate in
 *     the batch, and goes out only after wave k-1 was answered, without the aggregates that
 *     failed in it. A batch of distinct aggregates is one wave, one call, as before; only
 *     aggregates with several events in one batch cost a round trip more per event after the
 *     first. A publisher that keeps order across failures within one call on its own (it never
 *     sends an event of an aggregate after one of that aggregate failed: the null publisher)
 *     sets TXO_PUBLISHER_IN_ORDER and gets the whole batch in one call.
 *   - an event held back in this cycle: a suspect (published alone, later in the cycle) or
 *     one that failed in an earlier wave or batch of the cycle. Its aggregate is blocked for
 *     the rest of the cycle; its later events are not sent (RESULT_DEFERRED) and go back to
 *     PENDING unchanged, to be claimed again behind it.
 *
 * Aggregates are told apart by (aggregate_type, aggregate_id) in an open-addressing table
 * sized for the batch (FNV-1a over both strings), built once per cycle.
 */

#include "core/text.h"
#include "relay/relay_internal.h"

int txo__relay_publish_init(struct txo_relay *r, size_t batch)
{
    size_t slots = 4;
    while (slots < 2 * batch)
        slots *= 2;
    r->agg_slot_mask = slots - 1;
    r->agg_slots = txo_calloc(slots, sizeof(*r->agg_slots));
    r->agg_type = txo_calloc(batch, sizeof(*r->agg_type));
    r->agg_id = txo_calloc(batch, sizeof(*r->agg_id));
    r->agg_rank = txo_calloc(batch, sizeof(*r->agg_rank));
    r->agg_blocked = txo_calloc(batch, sizeof(*r->agg_blocked));
    r->wave_msgs = txo_calloc(batch, sizeof(*r->wave_msgs));
    r->wave_results = txo_calloc(batch, sizeof(*r->wave_results));
    r->wave_errors = txo_calloc(batch, sizeof(*r->wave_errors));
    r->wave_idx = txo_calloc(batch, sizeof(*r->wave_idx));
    if (r->agg_slots == NULL || r->agg_type == NULL || r->agg_id == NULL || r->agg_rank == NULL ||
        r->agg_blocked == NULL || r->wave_msgs == NULL || r->wave_results == NULL ||
        r->wave_errors == NULL || r->wave_idx == NULL)
        return TXO_ENOMEM;
    return 0;
}

void txo__relay_publish_release(struct txo_relay *r)
{
    txo_free(r->agg_slots);
    txo_free(r->agg_type);
    txo_free(r->agg_id);
    txo_free(r->agg_rank);
    txo_free(r->agg_blocked);
    txo_free(r->wave_msgs);
    txo_free(r->wave_results);
    txo_free(r->wave_errors);
    txo_free(r->wave_idx);
}

void txo__relay_group(struct txo_relay *r)
{
    memset(r->agg_slots, 0, (r->agg_slot_mask + 1) * sizeof(*r->agg_slots));
    r->n_aggs = 0;
    for (size_t i = 0; i < r->n; i++) {
        const char *type = r->msgs[i].aggregate_type != NULL ? r->msgs[i].aggregate_type : "";
        const char *id = r->msgs[i].aggregate_id != NULL ? r->msgs[i].aggregate_id : "";
        uint64_t h = txo__fnv1a(TXO__FNV1A_BASIS, type, strlen(type)) ^ 0xff;
        h = txo__fnv1a(h, id, strlen(id));
        size_t slot = (size_t)h & r->agg_slot_mask;
        for (;;) {
            uint32_t a = r->agg_slots[slot];
            if (a == 0) {
                a = (uint32_t)++r->n_aggs;
                r->agg_slots[slot] = a;
                r->agg_type[a - 1] = type;
                r->agg_id[a - 1] = id;
                r->agg_blocked[a - 1] = false;
            }
            if (strcmp(r->agg_type[a - 1], type) == 0 && strcmp(r->agg_id[a - 1], id) == 0) {
                r->entries[i].agg = a - 1;
                break;
            }
            slot = (slot + 1) & r->agg_slot_mask;
        }
    }
}

/* Turns what the publisher said about msgs[i] into the relay's result, and counts it. */
static void settle(struct txo_relay *r, size_t i, int call_rc)
{
    if (call_rc < 0)
        r->results[i] = call_rc;
    if (r->results[i] == 0) {
        r->cycle_acked++;
        return;
    }
    if (r->results[i] > 0) /* not a TXO_E* code: count it as a publish failure */
        r->results[i] = TXO_EPUBLISH;
    if (txo_err_is_transient(r->results[i]))
        r->cycle_transient++;
    if (r->errors[i].msg[0] == '\0')
        txo_error_set(&r->errors[i], r->results[i], "%s publisher: %s", r->pub->ops->name,
                      txo_strerror(r->results[i]));
    if (r->ordered)
        r->agg_blocked[r->entries[i].agg] = true;
}

/* The whole batch in one call (unordered relays, batches of distinct aggregates, publishers
 * that keep order on their own). */
static void publish_once(struct txo_relay *r)
{
    int rc = r->pub->ops->publish_batch(r->pub->self, r->msgs, r->n, r->results, r->errors);
    for (size_t i = 0; i < r->n; i++) {
        bool after_failure = r->ordered && r->agg_blocked[r->entries[i].agg];
        settle(r, i, rc);
        if (after_failure && r->results[i] == 0)
            TXO_LOG(TXO_LOG_ERROR, "relay",
                    "the publisher acknowledged an event after an earlier event of its aggregate "
                    "failed in the same call: it does not keep order as it declares",
                    TXO_KV_STR("publisher", r->pub->ops->name), TXO_KV_STR("relay_id", r->relay_id),
                    TXO_KV_I64("event_id", r->msgs[i].id));
    }
}

/* Wave by wave: the k-th event of each aggregate not blocked goes in wave k (agg_rank[i] == k;
 * events already refused are not sent). */
static void publish_waves(struct txo_relay *r, uint32_t waves)
{
    for (uint32_t w = 0; w < waves; w++) {
        size_t m = 0;
        for (size_t i = 0; i < r->n; i++) {
            if (r->agg_rank[i] != w || r->results[i] != 0)
                continue;
            if (r->ordered && r->agg_blocked[r->entries[i].agg]) {
                r->results[i] = RESULT_DEFERRED;
                continue;
            }
            r->wave_idx[m] = i;
            r->wave_msgs[m] = r->msgs[i];
            r->wave_results[m] = 0;
            txo_error_init(&r->wave_errors[m]);
            m++;
        }
        if (m == 0)
            continue;
        int rc = r->pub->ops->publish_batch(r->pub->self, r->wave_msgs, m, r->wave_results,
                                            r->wave_errors);
        for (size_t k = 0; k < m; k++) {
            size_t i = r->wave_idx[k];
            r->results[i] = r->wave_results[k];
            r->errors[i] = r->wave_errors[k];
            settle(r, i, rc);
        }
    }
}

/*
 * Refuses the events whose text holds a NUL byte (TXO_EINVAL: dead-lettered, never sent; for
 * an ordered relay it blocks the aggregate like any failure). Returns how many.
 */
static size_t refuse_unrepresentable(struct txo_relay *r)
{
    size_t refused = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (r->entries[i].nul_col == NULL)
            continue;
        r->results[i] =
            txo_error_set(&r->errors[i], TXO_EINVAL,
                          "outbox event %" PRId64 ": column %s holds a NUL byte (at byte %zu), "
                          "which a published string cannot carry; refused rather than cut",
                          r->msgs[i].id, r->entries[i].nul_col, r->entries[i].nul_at);
        settle(r, i, 0);
        refused++;
    }
    return refused;
}

static void publish(struct txo_relay *r);

void txo__relay_publish(struct txo_relay *r)
{
    int64_t start_us = txo_realtime_us();
    publish(r);
    txo__relay_record_publish_span(r, start_us);
}

static void publish(struct txo_relay *r)
{
    for (size_t i = 0; i < r->n; i++) {
        r->results[i] = 0;
        txo_error_init(&r->errors[i]);
    }
    size_t refused = refuse_unrepresentable(r);
    if (!r->ordered) {
        if (refused == 0) {
            publish_once(r);
            return;
        }
        for (size_t i = 0; i < r->n; i++) /* the others in one call, in claim order */
            r->agg_rank[i] = 0;
        publish_waves(r, 1);
        return;
    }
    /*
     * agg_rank is reused twice: first as each aggregate's running count, then (in place, per
     * event) as the event's rank within its aggregate in this batch. Events of aggregates
     * blocked earlier in the cycle are deferred before anything is sent.
     */
    uint32_t *count = r->agg_rank;
    for (size_t a = 0; a < r->n_aggs; a++)
        count[a] = 0;
    uint32_t waves = 0;
    bool deferred = false;
    for (size_t i = 0; i < r->n; i++) {
        uint32_t a = r->entries[i].agg;
        if (r->results[i] != 0)
            continue; /* refused above */
        if (r->agg_blocked[a]) {
            r->results[i] = RESULT_DEFERRED;
            deferred = true;
            continue;
        }
        uint32_t rank = count[a]++;
        if (rank + 1 > waves)
            waves = rank + 1;
    }
    deferred = deferred || refused > 0;
    if (waves <= 1 && !deferred) {
        publish_once(r);
        return;
    }
    if ((r->pub->ops->flags & TXO_PUBLISHER_IN_ORDER) != 0 && !deferred) {
        publish_once(r);
        return;
    }
    /* Ranks per event, in batch order (count[] is rebuilt as it goes). */
    for (size_t a = 0; a < r->n_aggs; a++)
        count[a] = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (r->results[i] != 0) { /* deferred or refused */
            r->wave_idx[i] = SIZE_MAX;
            continue;
        }
        r->wave_idx[i] = count[r->entries[i].agg]++;
    }
    /* publish_waves needs agg_rank per event: move the ranks there (wave_idx is its scratch). */
    for (size_t i = 0; i < r->n; i++)
        r->agg_rank[i] = r->wave_idx[i] == SIZE_MAX ? UINT32_MAX : (uint32_t)r->wave_idx[i];
    publish_waves(r, waves);
}

/* Swaps entries i and j with their outcomes. */
static void swap_all(struct txo_relay *r, size_t i, size_t j)
{
    txo__relay_swap_entries(r, i, j);
    int res = r->results[i];
    r->results[i] = r->results[j];
    r->results[j] = res;
    struct txo_error er = r->errors[i];
    r->errors[i] = r->errors[j];
    r->errors[j] = er;
}

/* True when msgs[i] has to be sent again: a transient failure, or held back behind one. */
static bool again(const struct txo_relay *r, size_t i)
{
    return r->results[i] == RESULT_DEFERRED ||
           (r->results[i] < 0 && txo_err_is_transient(r->results[i]));
}

int txo__relay_publish_settled(struct txo_relay *r, const struct txo_backoff *retry,
                               const char *what, txo__relay_wait_fn wait, void *arg)
{
    size_t total = r->n, left = total;
    for (unsigned attempt = 1;; attempt++) {
        r->n = left;
        txo__relay_group(r);
        txo__relay_publish(r);
        /* The ones to send again to the front, in order; the settled ones behind. */
        size_t k = 0, transient = 0;
        int code = 0;
        char reason[TXO_ERROR_MSG_MAX];
        reason[0] = '\0';
        for (size_t i = 0; i < left; i++) {
            if (!again(r, i))
                continue;
            if (r->results[i] != RESULT_DEFERRED && transient++ == 0) {
                code = r->results[i];
                snprintf(reason, sizeof(reason), "%s", r->errors[i].msg);
            }
            for (size_t j = i; j > k; j--)
                swap_all(r, j, j - 1);
            k++;
        }
        left = k;
        r->n = total;
        if (left == 0)
            return 0;
        if (transient == 0)
            continue; /* only held back behind a failed event: go on at once */
        int64_t ms = txo_backoff_delay_ms(retry, attempt, txo_rand01());
        TXO_LOG(TXO_LOG_WARN, "relay", "publish failed; waiting, then publishing again in order",
                TXO_KV_STR("who", what), TXO_KV_U64("waiting", left), TXO_KV_I64("retry_ms", ms),
                TXO_KV_STR("error", txo_err_name(code)), TXO_KV_STR("reason", reason));
        if (!wait(arg, ms))
            return 1;
    }
}
