/*
 * The outbox relay: claims due events from outbox_events, publishes them, marks the outcome.
 *
 * One cycle (txo_relay_run_once):
 *   1. Claim up to batch_size due PENDING rows in a short transaction, marking them PROCESSING
 *      with a fresh lock token in locked_by and a lease in locked_until. Two strategies:
 *        skip-locked   SELECT ... FOR UPDATE SKIP LOCKED, then UPDATE by id (MySQL 8.0.1+,
 *                      MariaDB 10.6+); concurrent relays take disjoint rows without waiting.
 *        update-limit  UPDATE ... ORDER BY ... LIMIT n with the token, then SELECT by token
 *                      (MySQL 5.7); concurrent relays serialise on the claim.
 *      The claim walks index (status, next_attempt_at), so its cost does not grow with the
 *      number of PUBLISHED rows.
 *   2. Publish the batch with no database lock held.
 *   3. Mark the outcome with one statement per batch, fenced by the lock token: a relay whose
 *      lease expired (and whose rows were reclaimed) changes nothing. Failures go back to
 *      PENDING with attempts+1 and next_attempt_at = now + backoff with jitter; at max_attempts
 *      they become FAILED and get a dead_letter_events row in the same transaction.
 *   Ordering (opts.ordering): with TXO_RELAY_ORDER_AGGREGATE, the default, an aggregate's
 *   events reach the publisher in the order of their ids, whatever fails, across any number of
 *   relays. Each aggregate maps to one of 64 shards (outbox_events.shard, computed by the
 *   server from aggregate_type and aggregate_id, so rows of any writer have it); relays share
 *   the shards like a consumer group shares partitions (a fair share each, rebalanced within a
 *   few shard_lease_ms / 4 ticks when relays join or leave, taken over within shard_lease_ms
 *   when one dies or hangs), and a relay claims only rows of the shards it holds, several events
 *   of an aggregate per batch, in due order. A failing event parks its aggregate alone
 *   (outbox_parked): while it waits for its retry, or sits FAILED in the dead letters until an
 *   operator replays or skips it (txo/dlq.h), the later events of that aggregate wait; every
 *   other aggregate keeps flowing. Within a batch an aggregate's events are handed to the
 *   publisher in order and the aggregate stops at its first failure: in waves of one event per
 *   aggregate unless the publisher keeps order across failures itself
 *   (TXO_PUBLISHER_IN_ORDER). The claim's cost per event does not grow with the backlog
 *   behind an aggregate. TXO_RELAY_ORDER_NONE claims any due event and publishes a batch in
 *   one call: for consumers that do not care about order. Every relay of one outbox table must
 *   use the same ordering: an unordered relay ignores shards and parked aggregates.
 *   Failures: a publisher's transient error (txo/publisher.h) sends the event back to PENDING
 *   with backoff, up to max_attempts; a permanent one (the broker refused this very message)
 *   dead-letters it at once with the broker's reason.
 *   Poison events: every lease expiry of an event is counted (outbox_events.lease_expiries);
 *   an event whose lease expired before is published in a batch of its own, so that if it
 *   kills its relay again only its own lease expires; at max_lease_expiries it becomes
 *   FAILED with a dead letter saying "lease expired N times".
 *   Expired leases (a relay died mid-batch) are returned to PENDING by every relay, at most
 *   once per lease_s/4, so their events are published again: delivery is at least once.
 *
 * Thread-safety: a relay is driven by one thread; txo_relay_stop() may be called from any
 * thread or a signal handler.
 */
#ifndef TXO_RELAY_H
#define TXO_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/backoff.h"
#include "txo/breaker.h"
#include "txo/claim.h" /* enum txo_claim_strategy */
#include "txo/common.h"
#include "txo/db.h"
#include "txo/metrics.h"
#include "txo/outbox.h" /* enum txo_outbox_status */
#include "txo/publisher.h"

/* The most events one claim may take (txo_relay_opts.batch_size). */
#define TXO_RELAY_BATCH_MAX 10000u

/*
 * Which events a claim may take (see Ordering above). AGGREGATE, the default, keeps each
 * entity's events in order (OrderCreated before OrderCancelled), which consumers assume and
 * which two relays, or one retried failure, would otherwise break silently. NONE is an
 * explicit opt-out for consumers that do not care.
 */
enum txo_relay_ordering {
    TXO_RELAY_ORDER_AGGREGATE = 0, /* per (aggregate_type, aggregate_id), in id order */
    TXO_RELAY_ORDER_NONE,          /* any due event, in due order */
};

/* "aggregate", "none". Never NULL; an unknown value is a bug. */
TXO_API const char *txo_relay_ordering_name(enum txo_relay_ordering o);
/* Parses one of the names above. Returns 0, or TXO_EINVAL (*out untouched). */
TXO_API int txo_relay_ordering_parse(const char *name, enum txo_relay_ordering *out);

/*
 * How a claimed batch is held while it is published:
 *   LEASE        three short transactions: claim (rows to PROCESSING with a lock token and a
 *                lease), publish with nothing locked, mark (fenced by the token). Each event
 *                is updated twice; a publisher may take as long as the lease.
 *   TRANSACTION  one transaction: SELECT ... FOR UPDATE SKIP LOCKED, publish while the rows'
 *                locks are held, mark PUBLISHED, commit. Each event is updated once (1.6-1.7x
 *                the events/s of LEASE in `make bench`); the locks fence the batch (other
 *                relays skip locked rows), and a relay that dies rolls back, leaving its rows
 *                due again at once. For publishers that answer in milliseconds: a slow one
 *                keeps a transaction open as long as it takes. Needs SKIP LOCKED.
 *                A poison event that kills its relay leaves no trace in a rolled-back
 *                transaction, so a relay in this mode claims its first batch after start, and
 *                every batch after one that met an event whose lease expired before, with a
 *                lease: a poison event is counted from its second kill on and is
 *                dead-lettered after max_lease_expiries more, as in LEASE.
 *                On a Galera cluster with relays writing through different nodes, row locks
 *                do not fence across nodes: both relays take the same rows and publish them,
 *                the COMMIT of one fails certification (1213), and its publish was a
 *                duplicate of the other's (at least once: up to one batch per conflict,
 *                dropped by the broker's dedupe or the inbox). LEASE meets the conflict at
 *                the claim, before publishing: use it there (docs/deploy.md).
 *   AUTO         the default: TRANSACTION when the publisher declares itself quick
 *                (TXO_PUBLISHER_QUICK: null, log, NATS, Redis, RabbitMQ, the local
 *                dispatch) and the server has SKIP LOCKED; else LEASE (webhooks, Kafka, gRPC,
 *                the application's own publishers unless they set the flag).
 * Delivery is at least once and ordering (opts.ordering) is kept in every mode (on a Galera
 * cluster as long as the events of an aggregate are written through one node: ids from
 * different nodes do not follow commit order, docs/deploy.md); relays in
 * different modes may share one table.
 */
enum txo_relay_claim_mode {
    TXO_RELAY_CLAIM_AUTO = 0,
    TXO_RELAY_CLAIM_LEASE,
    TXO_RELAY_CLAIM_TRANSACTION,
};

/* "auto", "lease", "transaction". Never NULL; an unknown value is a bug. */
TXO_API const char *txo_relay_claim_mode_name(enum txo_relay_claim_mode m);
/* Parses one of the names above. Returns 0, or TXO_EINVAL (*out untouched). */
TXO_API int txo_relay_claim_mode_parse(const char *name, enum txo_relay_claim_mode *out);

struct txo_tracer;

struct txo_relay_opts {
    const char *relay_id;             /* prefix of lock tokens; default "<hostname>:<pid>" */
    enum txo_claim_strategy claim;    /* default AUTO */
    enum txo_relay_claim_mode mode;   /* default AUTO (see above) */
    enum txo_relay_ordering ordering; /* default AGGREGATE (see Ordering above) */
    /*
     * Ordered relays: how long a relay's hold on its shards lasts without renewal (renewed
     * every quarter of it). A relay that dies or hangs loses its shards to the others after
     * this long; one that stops gives them back at once. Default 10000.
     */
    int64_t shard_lease_ms;
    unsigned batch_size;         /* events per claim, default 500, 1..TXO_RELAY_BATCH_MAX */
    unsigned lease_s;            /* claim lease, default 30 */
    unsigned max_attempts;       /* publish attempts before FAILED, default 10 */
    unsigned max_lease_expiries; /* lease expiries before FAILED (poison), default 3 */
    struct txo_backoff backoff;  /* failed-publish delay: 500 ms .. 300 s, jitter 0.5 */
    /*
     * The circuit breaker around the publisher: after breaker_failures batches in a row whose
     * every event failed with a transient error (the broker is down), the relay stops claiming
     * for breaker_open_ms, then claims one probe batch of at most breaker_probe_batch events;
     * if any of it is acknowledged it resumes, else it waits again. Events are not claimed
     * while it is open, so they use no attempts. breaker_failures 0: no breaker. Defaults 5,
     * 5000 ms, 10.
     */
    unsigned breaker_failures;
    int64_t breaker_open_ms;
    unsigned breaker_probe_batch;
    const struct txo_clock *clock; /* for the breaker; NULL = the system clock; borrowed */
    /*
     * Where the relay registers and counts its metrics (borrowed, may be shared by several
     * relays; NULL = none): txo_outbox_published_total, txo_outbox_publish_attempts_total,
     * txo_outbox_publish_failures_total, txo_outbox_dead_lettered_total (counters) and
     * txo_relay_breaker_state (gauge: 0 closed, 1 open, 2 half-open).
     */
    struct txo_metrics *metrics;
    /* NULL: none. Else each published batch is a PRODUCER span ("outbox publish", a trace of its
     * own linked to each event's context; txo/tracer.h), recorded when one of its events was
     * appended in a sampled trace. */
    struct txo_tracer *tracer;
    unsigned idle_sleep_ms; /* pause when nothing is due, default 200 */
    bool drain;             /* txo_relay_run returns when nothing is due (ordered: in any shard) */
};

TXO_API void txo_relay_opts_init(struct txo_relay_opts *opts);

struct txo_relay_stats {
    uint64_t claimed;
    uint64_t published;
    uint64_t failed_attempts; /* publish failures that went back to PENDING */
    uint64_t dead_lettered;   /* events that became FAILED */
    uint64_t fenced;          /* marks that changed no row because the lease was lost */
    uint64_t reclaimed;       /* expired leases returned to PENDING */
    uint64_t poisoned;        /* events dead-lettered for max_lease_expiries expired leases */
    uint64_t batches;
    unsigned shards;       /* ordered: shards held now (of 64) */
    uint64_t shards_taken; /* ordered: shards taken over (free or from a lapsed hold) */
};

struct txo_relay;

/*
 * Creates a relay on db (borrowed; one connection per relay) publishing through pub
 * (borrowed). Resolves TXO_CLAIM_AUTO from the server version. Errors: TXO_EINVAL,
 * TXO_EUNSUPPORTED (skip-locked or claim mode TRANSACTION requested on a server without SKIP
 * LOCKED, or TRANSACTION with the update-limit strategy), TXO_ENOMEM.
 */
TXO_API TXO_MUST_CHECK int txo_relay_new(struct txo_db *db, struct txo_publisher *pub,
                                         const struct txo_relay_opts *opts, struct txo_relay **out,
                                         struct txo_error *err);
TXO_API void txo_relay_free(struct txo_relay *relay);

/* The breaker's state (TXO_BREAKER_CLOSED when there is no breaker). Any thread. */
TXO_API enum txo_breaker_state txo_relay_breaker_state(const struct txo_relay *relay);

/* The strategy in use after AUTO was resolved. */
TXO_API enum txo_claim_strategy txo_relay_claim_strategy(const struct txo_relay *relay);

/* The claim mode in use after AUTO was resolved (LEASE or TRANSACTION). */
TXO_API enum txo_relay_claim_mode txo_relay_claim_mode(const struct txo_relay *relay);

/*
 * One cycle: reclaim expired leases (when due), claim, publish, mark. *claimed (may be NULL)
 * receives the batch size (0 = nothing due). Database errors are returned as they are;
 * publish failures are not errors (they are recorded on the rows).
 */
TXO_API TXO_MUST_CHECK int txo_relay_run_once(struct txo_relay *relay, size_t *claimed,
                                              struct txo_error *err);

/*
 * Cycles until txo_relay_stop() (finishing the current batch) or, with opts.drain, until
 * nothing is due. Transient database errors are logged and retried with backoff; a permanent
 * one ends the loop and is returned.
 */
TXO_API TXO_MUST_CHECK int txo_relay_run(struct txo_relay *relay, struct txo_error *err);

/*
 * Ends the relay's idle pause early: call it after committing an outbox event in the same
 * process (`txo up` does, after each order), so the event is published within milliseconds
 * instead of up to idle_sleep_ms later. Relays in other processes still find it by polling.
 * Async-signal-safe; any thread.
 */
TXO_API void txo_relay_wake(struct txo_relay *relay);

/*
 * Ordered relays: runs the shard membership now instead of at its next tick (joins, renews,
 * gives back or takes shards to the fair share). For tests and benchmarks that start several
 * relays and want them balanced before a measurement; the cycle does it by itself. A no-op
 * for unordered relays. Errors: DB errors, TXO_ECONFIG (outbox_shards missing: migrate).
 */
TXO_API TXO_MUST_CHECK int txo_relay_rebalance(struct txo_relay *relay, struct txo_error *err);

/* Asks txo_relay_run to return after the current batch. Async-signal-safe. */
TXO_API void txo_relay_stop(struct txo_relay *relay);

/* An aggregate whose events are held back by a failed one (txo_relay_list_parked()). */
struct txo_relay_parked {
    char aggregate_type[65];
    char aggregate_id[65];         /* as text, whatever the column's type */
    int64_t event_id;              /* the event that holds the aggregate back */
    enum txo_outbox_status status; /* PENDING: waits for its retry; FAILED: dead-lettered */
    unsigned attempts;             /* failed publish attempts so far */
    char last_error[256];          /* why (cut on a character boundary) */
    uint64_t waiting;              /* later events of the aggregate held back */
};

/*
 * Lists up to cap parked aggregates into out[0..*n), oldest event first: the aggregates an
 * ordered relay parked behind a failed event (outbox_parked) that have later events waiting
 * behind it (waiting >= 1). Meaningful for relays that run with TXO_RELAY_ORDER_AGGREGATE (with
 * NONE nothing is held back). For operators (`txo stats`): it reads the parked aggregates and
 * counts each one's waiting events. Uses db only; any thread.
 * Errors: TXO_EINVAL (cap 0), DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_relay_list_parked(struct txo_db *db, struct txo_relay_parked *out,
                                                 size_t cap, size_t *n, struct txo_error *err);

/*
 * *n = how many aggregates txo_relay_list_parked() would list, counting at most cap (so the
 * cost of a scrape stays bounded). The same query; any thread. Errors: TXO_EINVAL (cap 0),
 * DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_relay_count_parked(struct txo_db *db, uint64_t cap, uint64_t *n,
                                                  struct txo_error *err);

TXO_API void txo_relay_get_stats(const struct txo_relay *relay, struct txo_relay_stats *out);

/*
 * The gauge of the aggregates ordered relays hold back, txo_outbox_parked_aggregates (what
 * txo_relay_count_parked() counts, up to 1000): _register adds it to reg, _collect sets it from
 * the tables (a scrape-time collector's work). A process whose relays order by aggregate
 * exports it. Errors: those of txo_metrics_register() and txo_relay_count_parked(). (The
 * relay's own counters are registered by txo_relay_new(), struct txo_relay_opts.metrics.)
 */
TXO_API TXO_MUST_CHECK int txo_relay_metrics_register(struct txo_metrics *reg,
                                                      struct txo_error *err);
TXO_API TXO_MUST_CHECK int txo_relay_metrics_collect(struct txo_metrics *reg, struct txo_db *db,
                                                     struct txo_error *err);

#endif
