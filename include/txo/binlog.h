/*
 * The relay's binlog source: publishes the events of outbox_events as the server writes them
 * to its binary log, instead of polling the table for them.
 *
 * What it reads. The source connects as a replication client (REPLICATION SLAVE) and reads
 * the row events of `<database>.outbox_events` of the database it is connected to; another
 * database's outbox on the same server is not read. Inserts, and the update of a dead letter's
 * replay (status FAILED -> PENDING, txo/dlq.h), which is published as a new event; other
 * updates and deletes are passed over, and a rolled-back transaction never reaches the log.
 *
 * What it publishes. Each inserted row is decoded from the log's row image (the columns found
 * by name: binlog_row_metadata=FULL, binlog_row_image=FULL) and published as exactly the
 * message the polling relay builds for it (the same code: envelope, headers, trace context,
 * idempotency key, sequence), through the same publisher, in commit order; one publish batch
 * per run of committed events. The table is not read.
 *
 * Rows are left as inserted. A published row stays PENDING; the source's stored high-water id
 * says that it was published (txo_binlog_published_through(), which the outbox's statistics
 * and retention use). A transient failure is retried with backoff, in order: the stream waits.
 * A permanent one dead-letters the event (FAILED plus a dead_letter_events row, in one
 * transaction: the one write this source makes to an outbox row) and the stream moves on.
 *
 * Position. After the broker acknowledged a run, the position after its last transaction
 * (binlog file and offset, GTID, and the largest outbox id handled, the high-water id) is
 * stored in outbox_binlog_sources. A restart resumes there: delivery is at least once (what
 * was published after the stored position is published again; consumers de-duplicate on the
 * idempotency key).
 *
 * First start (no position stored): the source reads the server's current position,
 * publishes what is PENDING through the polling relay (opts.relay, drained; it marks those rows
 * as the polling relay does), stores the position, and streams from there. An event committed
 * between the two is published twice. A row whose position was cleared (binlog_file NULL,
 * after a purge) is resynced: its rows through the high-water id, created more than a minute
 * before the position was stored, are marked PUBLISHED first.
 *
 * Back to polling: opts.hand_back (see there).
 *
 * One active reader per source name: a lease row (owner, lease_until) taken and renewed every
 * lease_ms / 4. A standby waits; it takes over within lease_ms after the holder dies.
 *
 * Refusals at start (TXO_ECONFIG, the message naming the fix): binary log off,
 * binlog_format not ROW, binlog_row_metadata not FULL, the REPLICATION SLAVE or BINLOG
 * MONITOR (REPLICATION CLIENT) grant missing, or the stored position purged from the server;
 * while reading: a claim column missing from the table, of a type the reader does not decode,
 * or left out of the row images.
 *
 * Thread-safety: a source is driven by one thread; txo_binlog_stop() and
 * txo_binlog_get_stats() may be called from any thread (stop also from a signal handler).
 */
#ifndef TXO_BINLOG_H
#define TXO_BINLOG_H

#include <stdbool.h>
#include <stdint.h>

#include "txo/backoff.h"
#include "txo/common.h"
#include "txo/db.h"
#include "txo/metrics.h"
#include "txo/publisher.h"
#include "txo/relay.h"

struct txo_binlog_opts {
    const char *source_name; /* the position and lease row; default "default", max 64 bytes */
    const char *owner;       /* lease owner; default "<hostname>:<pid>" */
    /* The id the source registers with as a replica; unique among the server's replicas.
     * 0 (default): derived from the owner, in 0x40000000..0x7fffffff. */
    uint32_t server_id;
    int64_t lease_ms;     /* default 10000 */
    int64_t heartbeat_ms; /* the server speaks at least this often; default 1000 */
    int64_t run_ms;       /* a run closes this long after its first event; default 20 */
    /* Under load a commit soon after the last run waits for more, for as long as that run
     * took to publish and at most this long, so that busy consumers get fewer, larger
     * batches (a quiet stream sends each commit at once); 0: never wait; default 4. */
    int64_t gather_ms;
    struct txo_backoff retry; /* transient publish failures: 250 ms .. 30 s, jitter 0.2 */
    /* Return once the stored position reached the server's position at start. */
    bool drain;
    /*
     * Hand the outbox back to the polling relay, then return: the rows published through
     * the stored high-water id are marked PUBLISHED, the log is read (publishing and marking)
     * up to the server's position after that, and the position is forgotten. Run it with
     * every reader of the source stopped; the polling relay then publishes only what came
     * after. Without a stored position it only forgets the source.
     */
    bool hand_back;
    /*
     * The polling relay's options: batch_size (events per publish batch), max_attempts,
     * metrics, tracer, ordering, and the first start's drain (relay_id defaults to owner).
     */
    struct txo_relay_opts relay;
};

TXO_API void txo_binlog_opts_init(struct txo_binlog_opts *opts);

struct txo_binlog_stats {
    uint64_t published;        /* events acknowledged */
    uint64_t dead_lettered;    /* events the broker refused for good */
    uint64_t runs;             /* publish runs stored */
    bool active;               /* holds the lease now */
    double seconds_behind;     /* now minus the time of the last event read; 0 when caught up */
    double last_publish_age_s; /* since the last event was published; -1: none yet */
};

struct txo_binlog;

/*
 * Creates a source reading the database of db_opts (copied; the source opens two connections
 * with it: one for statements, one for the stream) and publishing through pub (borrowed).
 * Errors: TXO_EINVAL, TXO_ENOMEM, the errors of txo_db_open() and txo_relay_new().
 */
TXO_API TXO_MUST_CHECK int txo_binlog_new(const struct txo_db_opts *db_opts,
                                          struct txo_publisher *pub,
                                          const struct txo_binlog_opts *opts,
                                          struct txo_binlog **out, struct txo_error *err);
TXO_API void txo_binlog_free(struct txo_binlog *b);

/*
 * The server checks of the source, on db (borrowed): binary log on, ROW format, FULL row
 * metadata, the replication grants. Returns 0 or TXO_ECONFIG with the fix in err.
 */
TXO_API TXO_MUST_CHECK int txo_binlog_check_server(struct txo_db *db, struct txo_error *err);

/*
 * Runs the source until txo_binlog_stop() or, with opts.drain, until caught up: waits as a
 * standby while another reader holds the lease. Transient errors (the server or the broker
 * down) are retried with backoff; a refusal (TXO_ECONFIG) or another permanent error ends it
 * and is returned.
 */
TXO_API TXO_MUST_CHECK int txo_binlog_run(struct txo_binlog *b, struct txo_error *err);

/* Asks txo_binlog_run() to return soon (within heartbeat_ms). Async-signal-safe. */
TXO_API void txo_binlog_stop(struct txo_binlog *b);

TXO_API void txo_binlog_get_stats(const struct txo_binlog *b, struct txo_binlog_stats *out);

/*
 * The id through which the binlog sources of db's outbox published every row, in *id: the
 * smallest high-water id of the sources that stored a position; 0 when there is none (or the
 * table is not there). Published rows stay PENDING in this mode, so the outbox's statistics
 * and retention count the PENDING rows at or below it as published (txo/outbox.h,
 * txo/retention.h). A row of a transaction still open when a position was stored may be below
 * it and not published yet: the source publishes it when its commit is read. Any thread.
 * Errors: DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_binlog_published_through(struct txo_db *db, int64_t *id,
                                                        struct txo_error *err);

/* A binlog source as stored in outbox_binlog_sources (txo_binlog_list_sources()). */
struct txo_binlog_source_info {
    char name[65];
    char owner[129]; /* the lease's holder, "" when none */
    bool reading;    /* its lease is valid now */
    char file[256];  /* the stored position: "" before the first */
    uint64_t offset;
    char gtid[64];
    int64_t high_water_id; /* the largest outbox id the source handled */
    double position_age_s; /* since the position was last stored: the reader stores it after
                            * each run and every 5 s of a quiet log, so a larger age means the
                            * reader is behind, stuck or gone */
};

/*
 * Lists up to cap sources into out[0..*n), by name; *n is 0 when the table does not exist
 * (not migrated). For operators (`txo stats`). Uses db only; any thread. Errors: DB errors.
 */
TXO_API TXO_MUST_CHECK int txo_binlog_list_sources(struct txo_db *db,
                                                   struct txo_binlog_source_info *out, size_t cap,
                                                   size_t *n, struct txo_error *err);

#endif
