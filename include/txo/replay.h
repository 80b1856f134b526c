/*
 * Replay of published history: publishes again events the relay already published, chosen by
 * aggregate, event type, id range or time range, to a publisher of the caller's choice (another
 * stream, topic or webhook), for a consumer that joined late or must rebuild its state.
 *
 * What it sends. Each chosen event goes out as exactly the message the relay built for it
 * (the same code: envelope, headers, trace context, sequence), with the same idempotency key,
 * so a consumer that saw it drops it; with opts.new_keys each key becomes
 * "<key>:replay:<name>", for a consumer that must take every event again.
 *
 * Which events. The rows of outbox_events whose publication is done: PUBLISHED, and the rows a
 * binlog source published and left PENDING (txo_binlog_published_through()). FAILED, SKIPPED and
 * unpublished rows are not replayed. Events in id order, which is each aggregate's commit
 * order, published in per-aggregate order as the relay does. The range ends at the largest id
 * when the replay starts: what is appended later is not part of it.
 *
 * Resumable. A replay has a name; its selection, its end and the last id the publisher
 * acknowledged are stored in outbox_replays after every batch. A replay run again under the
 * same name with the same selection resumes after that id (delivery stays at least once: the
 * batch in flight when it was stopped or killed is sent again); with another selection it is
 * refused unless opts.restart. A finished replay run again does nothing unless opts.restart.
 *
 * Failures. A transient publish failure is retried with backoff, in order (the replay waits);
 * a permanent one stops the replay with the event's id and the broker's reason; the rows are
 * never written.
 *
 * From the archive (opts.archive_dir): the same, for the rows retention removed; a payload
 * is the archived JSON value, so it equals the original as JSON (its spacing may differ).
 *
 * Cost. One SELECT per batch, a range of the primary key from the last id (the filters are
 * checked on the rows of that range, so a narrow filter over a long range reads the range), and
 * one UPDATE of the replay's row.
 *
 * Thread-safety: a replay is driven by one thread; txo_replay_stop() and
 * txo_replay_get_stats() may be called from any thread (stop also from a signal handler).
 */
#ifndef TXO_REPLAY_H
#define TXO_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "txo/backoff.h"
#include "txo/common.h"
#include "txo/db.h"
#include "txo/publisher.h"

/* Which events: every field left 0 or NULL matches all. */
struct txo_replay_filter {
    const char *aggregate_type; /* "order" */
    const char *aggregate_id;   /* with or without aggregate_type */
    const char *event_type;     /* "OrderCreated" */
    int64_t from_id;            /* ids >= from_id */
    int64_t to_id;              /* ids <= to_id (0: through the largest id at start) */
    const char *since;          /* created_at >= since, "YYYY-MM-DD[ HH:MM:SS[.ffffff]]" UTC */
    const char *until;          /* created_at < until, same form */
};

struct txo_replay_opts {
    const char *name; /* the checkpoint's name, 1..64 bytes; default "default" */
    struct txo_replay_filter filter;
    double rate;       /* at most this many events a second; 0 (default): no limit */
    size_t batch_size; /* events a SELECT and a publish call; default 500, max 10000 */
    bool new_keys;     /* idempotency keys "<key>:replay:<name>" instead of the originals */
    bool restart;      /* forget what is stored under name and start from the beginning */
    bool count;        /* count the chosen events first (stats.total), for progress */
    /* Replay from the retention archive of `txo clean --archive DIR` (txo/archive.h) instead of
     * the table: the outbox rows retention removed, in the same order, with the same filters
     * (published ones: PUBLISHED, or PENDING as a binlog source leaves them). The files are
     * verified as they are read; the range ends at the archive's last id. Only the files of
     * DIR/outbox_events are read (not the inbox's or the dead letters'); a DIR without that
     * directory is refused (TXO_ECONFIG). NULL: the table. */
    const char *archive_dir;
    struct txo_backoff retry; /* transient publish failures: 250 ms .. 30 s, jitter 0.2 */
};

/* Sets the defaults above. */
TXO_API void txo_replay_opts_init(struct txo_replay_opts *opts);

/* Checks opts as txo_replay_new() does, without a database: TXO_EINVAL naming the bad one. */
TXO_API TXO_MUST_CHECK int txo_replay_opts_check(const struct txo_replay_opts *opts,
                                                 struct txo_error *err);

struct txo_replay_stats {
    uint64_t replayed; /* events published, this run and the runs it resumes */
    uint64_t this_run; /* of which in this run */
    uint64_t total;    /* with opts.count (not from an archive): the events chosen, else 0 */
    int64_t last_id;   /* the last id acknowledged (0: none) */
    int64_t to_id;     /* where the replay ends */
    bool resumed;      /* it went on from a stored checkpoint */
    bool finished;     /* it reached to_id (now, or in an earlier run) */
};

struct txo_replay;

/*
 * A replay over db (borrowed; used by the replay's thread only) publishing with pub
 * (borrowed). Checks opts; the selection is read and stored by txo_replay_run().
 * Errors: TXO_EINVAL (a bad option: name, batch size, rate, a since/until that is not a time),
 * TXO_ENOMEM.
 */
TXO_API TXO_MUST_CHECK int txo_replay_new(struct txo_db *db, struct txo_publisher *pub,
                                          const struct txo_replay_opts *opts,
                                          struct txo_replay **out, struct txo_error *err);

/*
 * Runs the replay to its end, or until txo_replay_stop() (also while it waits for a failing
 * publisher). Returns 0 when it finished or was stopped (stats.finished says which). Errors:
 * TXO_ECONFIG (outbox_replays missing: txo migrate), TXO_ECONFLICT (a checkpoint of that name with
 * another selection, opts.restart not set), a permanent publish failure's code (TXO_EPUBLISH, ...),
 * database errors.
 */
TXO_API TXO_MUST_CHECK int txo_replay_run(struct txo_replay *rp, struct txo_error *err);

/* Asks txo_replay_run() to return after the batch in flight. Async-signal-safe. */
TXO_API void txo_replay_stop(struct txo_replay *rp);

TXO_API void txo_replay_get_stats(struct txo_replay *rp, struct txo_replay_stats *out);

/* NULL is a no-op. */
TXO_API void txo_replay_free(struct txo_replay *rp);

#endif
