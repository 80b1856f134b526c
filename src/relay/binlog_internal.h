/*
 * The binlog source's private parts shared by src/relay/binlog.c (lease, server checks,
 * position, the stream loop) and binlog_batch.c (publishing one run through the polling
 * relay's code and storing the position). Never installed.
 */
#ifndef TXO_RELAY_BINLOG_INTERNAL_H
#define TXO_RELAY_BINLOG_INTERNAL_H

#include <stdatomic.h>

#include "core/waiter.h"
#include "db/binlog_stream.h"
#include "relay/relay_internal.h"
#include "txo/binlog.h"

#define BINLOG_NAME_MAX 64 /* outbox_binlog_sources.name */

struct txo_binlog {
    struct txo_binlog_opts opts; /* strings point at the copies below */
    char *source_name, *owner, *database;
    struct txo_db *db;       /* statements: lease, position, dead letters */
    struct txo_db *stream;   /* the replication connection */
    struct txo_relay *relay; /* the polling relay whose code builds, publishes, dead-letters */
    struct txo_relay *poll;  /* the polling relay that drains PENDING at a first start */
    struct txo_publisher *pub;
    struct txo__waiter pause;
    bool active;              /* holds the lease */
    int64_t lease_renewed_ms; /* monotonic, when it was last taken or renewed */

    /* The position after the current run (the stream holds its rows), and the last one
     * stored, when (monotonic ms). */
    struct txo__binlog_pos run_pos, stored_pos;
    int64_t stored_ms;
    int64_t high_water;        /* the largest id published (stored with each position) */
    int64_t first_high_water;  /* the largest id when the first position was read */
    int64_t stored_high_water; /* the stored position's high-water id */
    char settle_before[32];    /* a resync's bound (BINLOG_SQL_LOAD_POSITION) */
    bool marking;              /* a hand-back: acknowledged rows are marked PUBLISHED */

    _Atomic uint64_t published, dead_lettered, runs;
    _Atomic int64_t last_event_s;      /* wall time of the last event read (0: caught up) */
    _Atomic int64_t last_published_us; /* wall time of the last publish, 0: none */
    _Atomic bool active_flag;
    struct txo_metric *behind_gauge, *age_gauge;
};

/* Takes or renews the lease (BINLOG_SQL_TAKE_LEASE) into b->active. */
int txo__binlog_lease(struct txo_binlog *b, struct txo_error *err);

/*
 * Publishes the committed rows of s in batches of opts.relay.batch_size and stores b->run_pos
 * after the last batch (with the dead letters of that batch, in one transaction fenced by the
 * lease; a batch before the last stores only its dead letters), when force, when the run is a
 * full batch, or when the last store is TXO__BINLOG_STORE_MS old: a steady flow of small runs
 * stores the position a few times a second, not after every run, and a backlog after every
 * batch, so a restart publishes again at most one batch or TXO__BINLOG_STORE_MS of events.
 * Transient publish failures are retried with backoff (renewing the lease) until acknowledged or
 * the source is stopped (TXO_ECANCELED: the position is not stored). Takes every committed row of
 * s. Errors: DB errors, TXO_ELEASELOST, TXO_ECANCELED, TXO_ENOMEM.
 */
#define TXO__BINLOG_STORE_MS 100
int txo__binlog_publish_run(struct txo_binlog *b, struct txo__binlog_stream *s, bool force,
                            struct txo_error *err);

bool txo__binlog_stopping(struct txo_binlog *b);

/* The server-settings refusals of txo_binlog_check_server(): 0 or TXO_ECONFIG naming the fix. */
int txo__binlog_check_settings(int64_t log_bin, const char *format, const char *meta,
                               struct txo_error *err);

/* The grant refusal of txo_binlog_check_server(), over the lines of SHOW GRANTS. */
int txo__binlog_check_grants(const char *const *grants, size_t n, struct txo_error *err);

#endif
