#include "core/common.h"

/*
 * The relay's set-up and its small accessors: the names of its options, txo_relay_opts_init()
 * and their checks, txo_relay_new() (everything a batch needs is allocated here, once),
 * txo_relay_free(), its breaker and metric families, and the stats. The cycle itself is in
 * relay.c, the publish of a batch in relay_publish.c, the shards in shards.c.
 *
 * Thread-safety: as relay.c; txo_relay_stop(), txo_relay_wake(), txo_relay_breaker_state()
 * and txo_relay_get_stats() may be called from any thread.
 */

#include "metrics/metrics_internal.h"
#include "relay/relay_internal.h"
#include "relay/relay_sql.h"

static const char *const in_stmt_prefix[IN_STMT_COUNT] = {
    [IN_CLAIM_BY_ID] = RELAY_SQL_CLAIM_BY_ID_IN,
    [IN_ORDERED_CLAIM_BY_ID] = RELAY_SQL_ORDERED_CLAIM_BY_ID_IN,
    [IN_MARK_PUBLISHED] = RELAY_SQL_MARK_PUBLISHED_IN,
    [IN_MARK_FAILED] = RELAY_SQL_MARK_FAILED_IN,
    [IN_DEAD_LETTER] = RELAY_SQL_DEAD_LETTER_IN,
    [IN_UNLOCK_FAILED] = RELAY_SQL_UNLOCK_FAILED_IN,
    [IN_RECLAIM_POISON] = RELAY_SQL_RECLAIM_POISON_IN,
    [IN_HELD_PUBLISHED] = RELAY_SQL_HELD_PUBLISHED_IN,
    [IN_HELD_FAILED] = RELAY_SQL_HELD_FAILED_IN,
    [IN_HELD_DEAD_LETTER] = RELAY_SQL_HELD_DEAD_LETTER_IN,
    [IN_RELEASE] = RELAY_SQL_RELEASE_IN,
    [IN_PARK] = RELAY_SQL_PARK_IN,
    [IN_UNPARK] = RELAY_SQL_UNPARK_IN,
};

static const char *const ordering_names[] = {
    [TXO_RELAY_ORDER_AGGREGATE] = "aggregate",
    [TXO_RELAY_ORDER_NONE] = "none",
};

const char *txo_relay_ordering_name(enum txo_relay_ordering o)
{
    return txo__name_known(ordering_names, TXO_ARRAY_LEN(ordering_names), (long)o,
                           "relay ordering");
}

TXO_NAME_PARSER(txo_relay_ordering_parse, enum txo_relay_ordering, ordering_names)

static const char *const mode_names[] = {
    [TXO_RELAY_CLAIM_AUTO] = "auto",
    [TXO_RELAY_CLAIM_LEASE] = "lease",
    [TXO_RELAY_CLAIM_TRANSACTION] = "transaction",
};

const char *txo_relay_claim_mode_name(enum txo_relay_claim_mode m)
{
    return txo__name_known(mode_names, TXO_ARRAY_LEN(mode_names), (long)m, "relay claim mode");
}

TXO_NAME_PARSER(txo_relay_claim_mode_parse, enum txo_relay_claim_mode, mode_names)

void txo_relay_opts_init(struct txo_relay_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->relay_id = NULL; /* txo_relay_new() uses "<hostname>:<pid>" */
    opts->claim = TXO_CLAIM_AUTO;
    opts->mode = TXO_RELAY_CLAIM_AUTO;
    opts->ordering = TXO_RELAY_ORDER_AGGREGATE;
    opts->shard_lease_ms = 10000;
    opts->batch_size = 500;
    opts->lease_s = 30;
    opts->max_attempts = 10;
    opts->max_lease_expiries = 3;
    opts->backoff.base_ms = 500;
    opts->backoff.max_ms = 300000;
    opts->backoff.jitter = 0.5;
    opts->idle_sleep_ms = 200;
    opts->drain = false;
    opts->breaker_failures = 5;
    opts->breaker_open_ms = 5000;
    opts->breaker_probe_batch = 10;
    opts->clock = NULL;
    opts->metrics = NULL;
}

static int check_opts(const struct txo_relay_opts *o, struct txo_error *err)
{
    if (o->batch_size < 1 || o->batch_size > TXO_RELAY_BATCH_MAX)
        return txo_error_set(err, TXO_EINVAL, "relay: batch_size must be 1..%u, got %u",
                             TXO_RELAY_BATCH_MAX, o->batch_size);
    if (o->lease_s < 1)
        return txo_error_set(err, TXO_EINVAL, "relay: lease_s must be >= 1, got %u", o->lease_s);
    if (o->max_lease_expiries < 1)
        return txo_error_set(err, TXO_EINVAL, "relay: max_lease_expiries must be >= 1, got %u",
                             o->max_lease_expiries);
    if (o->max_attempts < 1)
        return txo_error_set(err, TXO_EINVAL, "relay: max_attempts must be >= 1, got %u",
                             o->max_attempts);
    if (o->backoff.base_ms < 0 || o->backoff.max_ms < o->backoff.base_ms)
        return txo_error_set(err, TXO_EINVAL,
                             "relay: backoff must have 0 <= base_ms <= max_ms, got %" PRId64
                             " .. %" PRId64,
                             o->backoff.base_ms, o->backoff.max_ms);
    if (!(o->backoff.jitter >= 0.0 && o->backoff.jitter <= 1.0))
        return txo_error_set(err, TXO_EINVAL, "relay: backoff jitter must be 0..1, got %g",
                             o->backoff.jitter);
    if ((unsigned)o->claim > TXO_CLAIM_UPDATE_LIMIT)
        return txo_error_set(err, TXO_EINVAL, "relay: unknown claim strategy %d", (int)o->claim);
    if (o->breaker_failures > 0 && (o->breaker_open_ms < 0 || o->breaker_probe_batch < 1))
        return txo_error_set(err, TXO_EINVAL,
                             "relay: breaker needs open_ms >= 0 and probe_batch >= 1");
    if ((unsigned)o->mode >= TXO_ARRAY_LEN(mode_names))
        return txo_error_set(err, TXO_EINVAL, "relay: unknown claim mode %d", (int)o->mode);
    if ((unsigned)o->ordering >= TXO_ARRAY_LEN(ordering_names))
        return txo_error_set(err, TXO_EINVAL, "relay: unknown ordering %d", (int)o->ordering);
    if (o->ordering == TXO_RELAY_ORDER_AGGREGATE && o->shard_lease_ms < 4)
        return txo_error_set(err, TXO_EINVAL, "relay: shard_lease_ms must be >= 4, got %" PRId64,
                             o->shard_lease_ms);
    if (o->relay_id != NULL && o->relay_id[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "relay: relay_id is empty");
    return 0;
}

static char *default_relay_id(void)
{
    char id[TOKEN_MAX + 1];
    if (txo_owner_name(id, sizeof(id), NULL) < 0)
        snprintf(id, sizeof(id), "localhost"); /* a host name too long for locked_by */
    return txo_strdup(id);
}

static void on_breaker_change(void *arg, const struct txo_breaker *b, enum txo_breaker_state from,
                              enum txo_breaker_state to)
{
    (void)b;
    struct txo_relay *r = arg;
    atomic_store(&r->breaker_state, (int)to);
    if (r->metrics.breaker_state != NULL)
        txo_metric_set(r->metrics.breaker_state, NULL, (double)to);
    /* One line when the broker outage starts and one when it ends (not one per batch). */
    if (to == TXO_BREAKER_OPEN && from == TXO_BREAKER_CLOSED)
        TXO_LOG(TXO_LOG_WARN, "relay", "publisher failing: stopped claiming, probing",
                TXO_KV_I64("probe_ms", r->opts.breaker_open_ms),
                TXO_KV_STR("relay_id", r->relay_id), TXO_KV_STR("publisher", r->pub->ops->name),
                TXO_KV_U64("failed_batches", r->opts.breaker_failures));
    else if (to == TXO_BREAKER_CLOSED)
        TXO_LOG(TXO_LOG_WARN, "relay", "publisher back: claiming again",
                TXO_KV_STR("relay_id", r->relay_id), TXO_KV_STR("publisher", r->pub->ops->name));
    else
        TXO_LOG(TXO_LOG_DEBUG, "relay", "breaker changed",
                TXO_KV_STR("from", txo_breaker_state_name(from)),
                TXO_KV_STR("to", txo_breaker_state_name(to)), TXO_KV_STR("relay_id", r->relay_id));
}

static int setup_breaker(struct txo_relay *r, struct txo_error *err)
{
    if (r->opts.breaker_failures == 0)
        return 0;
    struct txo_breaker_opts bo;
    txo_breaker_opts_init(&bo);
    bo.failure_threshold = r->opts.breaker_failures;
    bo.open_ms = r->opts.breaker_open_ms;
    bo.half_open_max_calls = 1;
    bo.close_after_successes = 1;
    bo.clock = r->opts.clock;
    bo.on_state_change = on_breaker_change;
    bo.on_state_change_arg = r;
    return txo_breaker_new("relay publisher", &bo, &r->breaker, err);
}

/* Registers the relay's families in opts.metrics (the same ones when another relay did). */
static int register_metrics(struct txo_relay *r, struct txo_error *err)
{
    struct txo_metrics *reg = r->opts.metrics;
    if (reg == NULL)
        return 0;
    int rc = 0;
    struct relay_metrics *m = &r->metrics;
    m->attempts = txo_metrics_register_chained(
        reg, TXO_METRIC_COUNTER, "txo_outbox_publish_attempts_total",
        "Publish attempts of this process's relays.", 0, NULL, &rc, err);
    m->published = txo_metrics_register_chained(
        reg, TXO_METRIC_COUNTER, "txo_outbox_published_total",
        "Events this process's relays published and marked PUBLISHED.", 0, NULL, &rc, err);
    m->failures = txo_metrics_register_chained(
        reg, TXO_METRIC_COUNTER, "txo_outbox_publish_failures_total",
        "Publish attempts that failed and will be retried.", 0, NULL, &rc, err);
    m->dead_lettered = txo_metrics_register_chained(
        reg, TXO_METRIC_COUNTER, "txo_outbox_dead_lettered_total",
        "Events this process's relays moved to FAILED + dead letter (attempts used up, a "
        "permanent error, or a poison event).",
        0, NULL, &rc, err);
    if (r->opts.ordering == TXO_RELAY_ORDER_AGGREGATE)
        m->shards = txo_metrics_register_chained(
            reg, TXO_METRIC_GAUGE, "txo_relay_shards_held",
            "Shards (of 64) this process's ordered relay holds: the aggregates it publishes. 0 "
            "on a relay that waits for others to give some back, or that lost its hold.",
            0, NULL, &rc, err);
    m->delay = txo__metrics_register_event_delay(
        reg, "txo_outbox_publish_delay_seconds",
        "From an event's insert (in its producer's transaction) to the broker's "
        "acknowledgement of its publish, by aggregate type: the delay consumers see.",
        &rc, err);
    m->breaker_state = txo_metrics_register_chained(
        reg, TXO_METRIC_GAUGE, "txo_relay_breaker_state",
        "The relay's circuit breaker around its publisher: 0 closed, 1 open (not "
        "claiming), 2 half-open (probing with one small batch).",
        0, NULL, &rc, err);
    if (rc < 0)
        txo_error_wrap(err, "relay: registering its metrics");
    return rc;
}

enum txo_breaker_state txo_relay_breaker_state(const struct txo_relay *relay)
{
    return (enum txo_breaker_state)atomic_load(&((struct txo_relay *)relay)->breaker_state);
}

void txo_relay_free(struct txo_relay *relay)
{
    if (relay == NULL)
        return;
    if (relay->ordered) {
        txo__shards_leave(relay->db, &relay->shards);
        txo__shards_release(&relay->shards);
    }
    txo__relay_publish_release(relay);
    for (size_t l = 0; l < SHARD_LEVELS; l++)
        for (size_t a = 0; a < 2; a++)
            for (size_t k = 0; k < 3; k++)
                txo_free(relay->shard_passes[l][a].sql[k]);
    txo_rows_free(relay->rows);
    txo_breaker_free(relay->breaker);
    for (size_t s = 0; s < IN_STMT_COUNT; s++)
        txo__lease_in_release(&relay->in[s]);
    txo_free(relay->msgs);
    txo_free(relay->created_at);
    txo_free(relay->entries);
    txo_free(relay->defer_ids);
    txo_free(relay->unpark_ids);
    txo_free(relay->results);
    txo_free(relay->errors);
    txo_free(relay->ids);
    txo_free(relay->fail_order);
    txo_free(relay->group_end);
    txo_free(relay->fail_ids);
    txo_free(relay->params);
    txo_free(relay->relay_id);
    txo__waiter_destroy(&relay->pause);
    txo_free(relay);
}

int txo_relay_new(struct txo_db *db, struct txo_publisher *pub, const struct txo_relay_opts *opts,
                  struct txo_relay **out, struct txo_error *err)
{
    if (db == NULL || pub == NULL || opts == NULL || out == NULL)
        return txo_error_set(err, TXO_EINVAL, "relay: db, publisher, opts and out are required");
    int rc = check_opts(opts, err);
    if (rc < 0)
        return rc;

    enum txo_claim_strategy claim;
    rc = txo__lease_strategy(db, opts->claim, "relay", &claim, err);
    if (rc < 0)
        return rc;
    enum txo_relay_claim_mode mode = opts->mode;
    if (mode == TXO_RELAY_CLAIM_AUTO)
        mode = (pub->ops->flags & TXO_PUBLISHER_QUICK) != 0 && claim == TXO_CLAIM_SKIP_LOCKED
                   ? TXO_RELAY_CLAIM_TRANSACTION
                   : TXO_RELAY_CLAIM_LEASE;
    if (mode == TXO_RELAY_CLAIM_TRANSACTION && claim != TXO_CLAIM_SKIP_LOCKED)
        return txo_error_set(err, TXO_EUNSUPPORTED,
                             "relay: claim mode transaction needs the skip-locked claim "
                             "(SELECT ... FOR UPDATE SKIP LOCKED, MariaDB 10.6+ or MySQL "
                             "8.0.1+), not %s; use claim mode lease",
                             txo_claim_strategy_name(claim));

    struct txo_relay *r = txo_calloc(1, sizeof(*r));
    if (r == NULL)
        return txo_error_set(err, TXO_ENOMEM, "relay: out of memory");
    if (txo__waiter_init(&r->pause) != 0) {
        txo_free(r);
        return txo_error_set(err, TXO_ENOMEM, "relay: cannot make its eventfd: %s",
                             strerror(errno));
    }
    r->db = db;
    r->pub = pub;
    r->opts = *opts;
    r->claim = claim;
    r->mode = mode;
    r->lease_cycle = true;
    for (size_t s = 0; s < IN_STMT_COUNT; s++)
        txo__lease_in_init(&r->in[s], in_stmt_prefix[s]);
    r->relay_id = opts->relay_id != NULL ? txo_strdup(opts->relay_id) : default_relay_id();

    size_t batch = opts->batch_size;
    /* The larger of a mark (fixed + ids) and an ordered claim (set, shards, cursor, limit). */
    r->params_cap = MARK_FIXED_PARAMS + txo_sql_in_list_size(batch) + RANGE_PARAMS_MAX + 3;
    r->msgs = txo_calloc(batch, sizeof(*r->msgs));
    r->created_at = txo_calloc(batch, sizeof(*r->created_at));
    r->entries = txo_calloc(batch, sizeof(*r->entries));
    r->defer_ids = txo_calloc(batch, sizeof(*r->defer_ids));
    r->unpark_ids = txo_calloc(batch, sizeof(*r->unpark_ids));
    r->results = txo_calloc(batch, sizeof(*r->results));
    r->errors = txo_calloc(batch, sizeof(*r->errors));
    r->ids = txo_calloc(batch, sizeof(*r->ids));
    r->fail_order = txo_calloc(batch, sizeof(*r->fail_order));
    r->group_end = txo_calloc(batch, sizeof(*r->group_end));
    r->fail_ids = txo_calloc(batch, sizeof(*r->fail_ids));
    r->params = txo_calloc(r->params_cap, sizeof(*r->params));
    r->ordered = opts->ordering == TXO_RELAY_ORDER_AGGREGATE;
    if (r->relay_id == NULL || r->msgs == NULL || r->created_at == NULL || r->entries == NULL ||
        r->results == NULL || r->errors == NULL || r->ids == NULL || r->fail_order == NULL ||
        r->group_end == NULL || r->fail_ids == NULL || r->defer_ids == NULL ||
        r->unpark_ids == NULL || r->params == NULL || txo__relay_publish_init(r, batch) < 0) {
        txo_relay_free(r);
        return txo_error_set(err, TXO_ENOMEM, "relay: out of memory for a batch of %zu", batch);
    }
    r->opts.relay_id = r->relay_id;
    r->claim_limit = batch;
    if (r->ordered)
        txo__shards_init(&r->shards, r->relay_id, opts->shard_lease_ms);
    atomic_init(&r->breaker_state, TXO_BREAKER_CLOSED);
    rc = setup_breaker(r, err);
    if (rc == 0)
        rc = register_metrics(r, err);
    if (rc < 0) {
        txo_relay_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

enum txo_claim_strategy txo_relay_claim_strategy(const struct txo_relay *relay)
{
    return relay->claim;
}

enum txo_relay_claim_mode txo_relay_claim_mode(const struct txo_relay *relay)
{
    return relay->mode;
}

void txo_relay_wake(struct txo_relay *relay)
{
    txo__waiter_kick(&relay->pause);
}

void txo_relay_stop(struct txo_relay *relay)
{
    txo__waiter_stop(&relay->pause);
}

void txo_relay_get_stats(const struct txo_relay *relay, struct txo_relay_stats *out)
{
    /* The counters are only written by the relay's thread; relaxed loads are enough. */
    struct relay_counters *c = (struct relay_counters *)&relay->stats;
    out->claimed = atomic_load_explicit(&c->claimed, memory_order_relaxed);
    out->published = atomic_load_explicit(&c->published, memory_order_relaxed);
    out->failed_attempts = atomic_load_explicit(&c->failed_attempts, memory_order_relaxed);
    out->dead_lettered = atomic_load_explicit(&c->dead_lettered, memory_order_relaxed);
    out->fenced = atomic_load_explicit(&c->fenced, memory_order_relaxed);
    out->reclaimed = atomic_load_explicit(&c->reclaimed, memory_order_relaxed);
    out->poisoned = atomic_load_explicit(&c->poisoned, memory_order_relaxed);
    out->batches = atomic_load_explicit(&c->batches, memory_order_relaxed);
    out->shards = (unsigned)atomic_load_explicit(&c->shards, memory_order_relaxed);
    out->shards_taken = atomic_load_explicit(&c->shards_taken, memory_order_relaxed);
}

int txo__relay_tick_shards(struct txo_relay *r, bool force, struct txo_error *err)
{
    uint64_t reclaimed_before = r->shards.reclaimed_events;
    int rc = txo__shards_tick(r->db, &r->shards, force, err);
    if (rc < 0)
        return rc;
    atomic_fetch_add_explicit(&r->stats.reclaimed, r->shards.reclaimed_events - reclaimed_before,
                              memory_order_relaxed);
    atomic_store_explicit(&r->stats.shards, r->shards.owned, memory_order_relaxed);
    atomic_store_explicit(&r->stats.shards_taken, r->shards.taken, memory_order_relaxed);
    if (r->metrics.shards != NULL)
        txo_metric_set(r->metrics.shards, NULL, (double)r->shards.owned);
    return 0;
}

int txo_relay_rebalance(struct txo_relay *relay, struct txo_error *err)
{
    if (!relay->ordered)
        return 0;
    return txo__relay_tick_shards(relay, true, err);
}
