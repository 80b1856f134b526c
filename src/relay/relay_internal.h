/*
 * The relay's private parts shared by its files: src/relay/relay.c (claim, mark, the cycle),
 * relay_setup.c (options, new/free, stats, the shard tick's bookkeeping), relay_publish.c
 * (handing a batch to the publisher in per-aggregate order). Never installed.
 */
#ifndef TXO_RELAY_INTERNAL_H
#define TXO_RELAY_INTERNAL_H

#include <stdatomic.h>

#include "core/text.h"
#include "core/waiter.h"
#include "queue/lease.h"
#include "relay/shards.h"
#include "txo/relay.h"
#include "txo/trace.h"

#define TOKEN_MAX          128 /* outbox_events.locked_by VARCHAR(128) */
#define RECLAIM_LIMIT      10000
#define RETRY_MIN_MS       250
#define RETRY_MAX_MS       5000
#define MARK_FIXED_PARAMS  9     /* parameters of RELAY_SQL_MARK_FAILED_IN before the ids */
#define MARK_ATTEMPTS      3     /* mark transactions tried on a transient error */
#define CLAIM_RESCAN_MS    1000  /* a claim without cursor at least this often */
#define CURSOR_AT_MAX      32    /* "YYYY-MM-DD HH:MM:SS.ffffff" */
#define OUTAGE_REMINDER_MS 60000 /* a database outage is logged again this often */

/* Shard lists are padded to a power of two up to TXO__SHARDS_MAX: levels 0 (1) .. 6 (64). */
#define SHARD_LEVELS     7
#define RANGE_PARAMS_MAX (TXO__SHARDS_MAX + 3)

/*
 * results[i] of an event that was not handed to the publisher because an earlier event of its
 * aggregate failed or waits in this cycle: it goes back to PENDING unchanged (no attempt used).
 */
#define RESULT_DEFERRED 1

/* Columns of the claim queries. */
enum claim_col {
    COL_ID = 0,
    COL_AGGREGATE_TYPE,
    COL_AGGREGATE_ID,
    COL_EVENT_TYPE,
    COL_PAYLOAD,
    COL_IDEMPOTENCY_KEY,
    COL_CREATED_AT,
    COL_ATTEMPTS,
    COL_NEXT_ATTEMPT_AT,
    COL_LEASE_EXPIRIES,
    COL_HAD_ERROR,
    COL_SEQUENCE,
    COL_PREV_SEQUENCE,
    COL_TRACEPARENT,
    COL_TRACESTATE,
};

/* The statements that end in an IN list. */
enum in_stmt {
    IN_CLAIM_BY_ID,
    IN_ORDERED_CLAIM_BY_ID,
    IN_MARK_PUBLISHED,
    IN_MARK_FAILED,
    IN_DEAD_LETTER,
    IN_UNLOCK_FAILED,
    IN_RECLAIM_POISON,
    IN_HELD_PUBLISHED,
    IN_HELD_FAILED,
    IN_HELD_DEAD_LETTER,
    IN_RELEASE,
    IN_PARK,
    IN_UNPARK,
    IN_STMT_COUNT,
};

/* What the relay keeps of each event of the batch besides its message; moves with it. */
struct batch_entry {
    int64_t expiries; /* lease_expiries: > 0 makes it a suspect (maybe a poison event) */
    uint32_t agg;     /* its aggregate's number in this cycle (ordered only) */
    bool had_error;   /* last_error was set: an earlier attempt failed, it may park its aggregate */
    const char *nul_col; /* a text column holding a NUL byte (the event is refused), or NULL */
    size_t nul_at;       /* and the byte where */
};

struct relay_counters {
    _Atomic uint64_t claimed;
    _Atomic uint64_t published;
    _Atomic uint64_t failed_attempts;
    _Atomic uint64_t dead_lettered;
    _Atomic uint64_t fenced;
    _Atomic uint64_t reclaimed;
    _Atomic uint64_t poisoned;
    _Atomic uint64_t batches;
    _Atomic uint64_t shards; /* held after the last membership tick */
    _Atomic uint64_t shards_taken;
};

/* The relay's own metric families (NULL when opts.metrics is NULL). */
struct relay_metrics {
    struct txo_metric *published;
    struct txo_metric *attempts;
    struct txo_metric *failures;
    struct txo_metric *dead_lettered;
    struct txo_metric *breaker_state;
    struct txo_metric *shards; /* ordered relays only */
    struct txo_metric *delay;  /* histogram by aggregate_type: insert -> acknowledged */
};

struct txo_relay {
    struct txo_db *db;
    struct txo_publisher *pub;
    struct txo_relay_opts opts; /* opts.relay_id points at relay_id below */
    char *relay_id;
    enum txo_claim_strategy claim;
    enum txo_relay_claim_mode mode; /* LEASE or TRANSACTION (AUTO resolved) */
    /* Claim mode TRANSACTION: the next cycle claims with a lease (the first one after start,
     * and the one after a held claim met suspects; see txo/relay.h). */
    bool lease_cycle;

    /* The relay's pauses (idle, backoff), and whether it was asked to stop: txo_relay_wake()
     * kicks it (something was committed, end the idle sleep), txo_relay_stop() stops it. */
    struct txo__waiter pause;
    struct relay_counters stats;
    struct txo__lease_reclaimer reclaimer;
    struct relay_metrics metrics;
    struct txo_breaker *breaker; /* NULL: none */
    atomic_int breaker_state;    /* enum txo_breaker_state, for other threads */
    bool breaker_probe;          /* the current batch is the breaker's probe */
    bool breaker_rejected;       /* the last cycle claimed nothing because it is open */
    size_t claim_limit;          /* rows the current claim may take */
    size_t cycle_acked;          /* this cycle's events acknowledged by the publisher */
    size_t cycle_transient;      /* and those failed with a transient error */

    /*
     * The claim cursor (relay_sql.h, RELAY_SQL__AFTER_CURSOR): (next_attempt_at, id) of the
     * last row of the last full batch. cursor_set is false until a full batch was claimed and
     * after a short one; the claim then scans from the start of the PENDING range.
     */
    bool cursor_set;
    char cursor_at[CURSOR_AT_MAX];
    int64_t cursor_id;
    int64_t last_full_scan_ms;
    bool claim_after_cursor;   /* this claim starts at the cursor (decided before it runs) */
    bool claim_raced;          /* ordered: a row changed between the claim's read and its mark */
    bool claimed_after_cursor; /* and it did (false when it fell back to a full scan) */

    /* The current batch. */
    char token[TOKEN_MAX + 1];
    struct txo_rows *rows; /* claim result; msgs[] point into it */
    size_t n;
    struct txo_outbox_message *msgs;
    char (*created_at)[TXO_RFC3339_LEN]; /* msgs[i].created_at points at created_at[i] */
    struct batch_entry *entries;         /* what the relay keeps of msgs[i] */
    int *results;                        /* 0, a TXO_E* code, or RESULT_DEFERRED */
    struct txo_error *errors;

    /*
     * Ordering by aggregate (ordered): the shards this relay holds, and the current cycle's
     * events grouped by aggregate (relay_publish.c): agg_slots is an open-addressing table of
     * agg number + 1 (0: empty) with agg_slot_mask + 1 slots; agg_type/agg_id name each
     * aggregate (pointing into rows); agg_blocked marks an aggregate whose event failed or was
     * held back in this cycle, so no later event of it is published in this cycle.
     */
    bool ordered;
    struct txo__shards shards;
    int64_t held[TXO__SHARDS_MAX]; /* the shards the current claim share-locked */
    size_t n_held;
    struct shard_pass {
        struct txo__lease_pass pass;
        char *sql[3];                /* select_locked, update_limit, select_by_token */
    } shard_passes[SHARD_LEVELS][2]; /* [padded shard count level][after cursor] */
    uint32_t *agg_slots;
    size_t agg_slot_mask;
    size_t n_aggs;
    const char **agg_type;
    const char **agg_id;
    uint32_t *agg_rank;
    bool *agg_blocked;
    /* One publish call's worth of a batch (a wave: at most one event per aggregate). */
    struct txo_outbox_message *wave_msgs;
    int *wave_results;
    struct txo_error *wave_errors;
    size_t *wave_idx;

    /* Scratch for marking, sized for batch_size. */
    int64_t *ids;        /* ids of one statement's IN list */
    size_t *fail_order;  /* indices of failed messages, grouped by error */
    size_t *group_end;   /* end (exclusive) of each group in fail_order */
    int64_t *fail_ids;   /* ids of fail_order, same order */
    int64_t *defer_ids;  /* events held back unpublished, to be released */
    int64_t *unpark_ids; /* published events that had failed before (maybe parking) */
    struct txo_param *params;
    size_t params_cap;

    struct txo__lease_in in[IN_STMT_COUNT];
};

/* Results of one mark transaction attempt (reset at the start of each attempt). */
struct mark_result {
    uint64_t published;
    uint64_t failed_attempts;
    uint64_t dead_lettered;
    uint64_t fenced;
};

struct mark_ctx {
    struct txo_relay *relay;
    bool held; /* claim mode TRANSACTION: the RELAY_SQL_HELD_* statements, no token */
    /* The binlog source: acknowledged rows are left as they are (counted, not marked
     * PUBLISHED); only failures, and the unparking after a replayed event, are written. */
    bool acked_unmarked;
    size_t n_published;
    size_t n_groups;
    size_t n_failed;
    size_t n_deferred; /* r->defer_ids: held back, back to PENDING unchanged */
    size_t n_unpark;   /* r->unpark_ids: published after an earlier failure */
    struct mark_result res;
};

/* Points r->msgs[0..r->n) into the rows of r->rows (claim columns, enum claim_col), moves the
 * claim cursor, and numbers the aggregates when ordered. */
void txo__relay_load_batch(struct txo_relay *r);

/* Sorts the published batch's outcome into ctx: the acknowledged ids and the failure groups. */
void txo__relay_mark_prepare(struct txo_relay *r, struct mark_ctx *ctx);

/*
 * The body of a mark transaction (arg: a prepared struct mark_ctx): PUBLISHED for the
 * acknowledged rows (unless ctx->acked_unmarked), PENDING with backoff or FAILED with a dead letter
 * (a permanent error: at once) for the failed ones, parking and unparking aggregates when ordered.
 * With ctx->held the RELAY_SQL_HELD_* statements (rows still PENDING, no token).
 */
int txo__relay_mark_tx(struct txo_tx *tx, void *arg, struct txo_error *err);

/* Counts a committed mark in the stats and metrics, and logs what an operator should see. */
void txo__relay_mark_account(struct txo_relay *r, const struct mark_ctx *ctx);

/* Numbers the aggregates of msgs[0..n) into entries[i].agg and clears their state: run once
 * per cycle, right after the claim, when ordered. */
void txo__relay_group(struct txo_relay *r);

/*
 * Publishes r->msgs[0..r->n) and fills r->results and r->errors. When ordered, an event whose
 * aggregate failed or was held back earlier in this cycle is not sent (RESULT_DEFERRED), and
 * unless the publisher keeps an aggregate's order across failures within one call
 * (TXO_PUBLISHER_IN_ORDER) the batch goes out in waves of at most one event per aggregate, each
 * wave after the previous one was answered. Counts cycle_acked and cycle_transient.
 */
void txo__relay_publish(struct txo_relay *r);

/* Swaps batch entries i and j (message and entry: lease expiries, aggregate, ...). */
void txo__relay_swap_entries(struct txo_relay *r, size_t i, size_t j);

/* Waits ms (a backoff) for txo__relay_publish_settled(); false: stop waiting and give up. */
typedef bool (*txo__relay_wait_fn)(void *arg, int64_t ms);

/*
 * Publishes r->msgs[0..r->n) until no event in it is to be sent again: the events that failed
 * transiently, and those held back behind them (RESULT_DEFERRED), are published again in order
 * after a backoff (wait), until the publisher takes them; acknowledged events are not sent
 * again, and a permanent failure stays as it is. Leaves every event's final result in
 * r->results for the caller (the binlog source dead-letters; a replay stops). what names the
 * caller in the log. Returns 0 when settled, 1 when wait gave up.
 */
int txo__relay_publish_settled(struct txo_relay *r, const struct txo_backoff *retry,
                               const char *what, txo__relay_wait_fn wait, void *arg);

/* Ordered relays: runs a shard membership tick (forced, or when due) and publishes its outcome
 * to the stats and the txo_relay_shards_held gauge (relay_setup.c). */
int txo__relay_tick_shards(struct txo_relay *r, bool force, struct txo_error *err);

/* Allocates the ordered scratch for batches of up to batch events. Returns 0 or TXO_ENOMEM. */
int txo__relay_publish_init(struct txo_relay *r, size_t batch);
void txo__relay_publish_release(struct txo_relay *r);

/* ---- relay_observe.c: trace context, delays and spans ---- */

/*
 * The trace context of row i (columns col_parent and col_state) into m, checked as a receiver
 * of the headers would check it: a traceparent that is not valid W3C Trace Context is left
 * out (with its tracestate), never an error; the tracestate alone is left out when it is not
 * valid. Another application may have written either column.
 */
void txo__relay_load_trace(struct txo_outbox_message *m, const struct txo_rows *rows, size_t i,
                           int col_parent, int col_state);

/* Observes the publish delay of the events of the batch marked PUBLISHED (results 0): now
 * minus their insert time (both wall clocks; a database clock ahead of ours counts as 0). */
void txo__relay_observe_delays(struct txo_relay *r);

/*
 * The batch's PRODUCER span (opts.tracer): a trace of its own, as the messaging conventions
 * have it for a batch, linked to the context of each event it carried that has one; recorded
 * when one of those is sampled. start_us: when the publish began (wall clock).
 */
void txo__relay_record_publish_span(struct txo_relay *r, int64_t start_us);

#endif
