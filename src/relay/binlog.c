#include "core/common.h"

/*
 * The relay's binlog source (txo/binlog.h): the lease, the server checks, the stored position
 * and the stream loop. Publishing one run is binlog_batch.c; reading the log is
 * src/db/db_binlog.c.
 *
 * The loop (txo_binlog_run):
 *   standby   take the lease (BINLOG_SQL_TAKE_LEASE) every lease_ms / 3 until it is ours;
 *   check     the server settings and grants (refusals, TXO_ECONFIG);
 *   position  the stored one, checked against the server's binary logs (a purged file is a
 *             refusal); none: the server's position now, the PENDING rows published by the
 *             polling relay (drained), then that position stored;
 *   stream    read the log from the position; inserted ids of a transaction join the run at
 *             its commit; the run is published at a commit after which nothing more has
 *             arrived (or, soon after the last run, for as long as that run took to publish, at
 *             most gather_ms: under load one run carries several commits), when run_ms passed
 *             since its first event, when it holds batch_size
 *             events, or at a heartbeat; the position alone is
 *             stored now and then when the log has no outbox events. The lease is renewed
 *             every lease_ms / 4; a reader that lost it goes back to standby.
 * A transient error (server or broker down) closes the stream and starts again from the
 * stored position after a backoff: what was published after it is published again.
 *
 * Thread-safety: one thread runs the source; stop and stats from any thread.
 */

#include "relay/binlog_internal.h"
#include "relay/binlog_sql.h"

#define POSITION_EVERY_MS 5000 /* a quiet position (no outbox events) is stored this often */
#define SETTLE_IDS        5000 /* ids per statement when settling (BINLOG_SQL_SETTLE) */

void txo_binlog_opts_init(struct txo_binlog_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->source_name = "default";
    opts->lease_ms = 10000;
    opts->heartbeat_ms = 1000;
    opts->run_ms = 20;
    opts->gather_ms = 4;
    opts->retry = (struct txo_backoff){250, 30000, 0.2};
    txo_relay_opts_init(&opts->relay);
}

bool txo__binlog_stopping(struct txo_binlog *b)
{
    return txo__waiter_stopped(&b->pause);
}

void txo_binlog_stop(struct txo_binlog *b)
{
    txo__waiter_stop(&b->pause);
    txo_relay_stop(b->poll); /* a first start's drain */
}

void txo_binlog_get_stats(const struct txo_binlog *b, struct txo_binlog_stats *out)
{
    struct txo_binlog *m = (struct txo_binlog *)b;
    out->published = atomic_load(&m->published);
    out->dead_lettered = atomic_load(&m->dead_lettered);
    out->runs = atomic_load(&m->runs);
    out->active = atomic_load(&m->active_flag);
    int64_t ev = atomic_load(&m->last_event_s);
    int64_t now_us = txo_realtime_us();
    out->seconds_behind = ev > 0 && now_us / 1000000 > ev ? (double)(now_us / 1000000 - ev) : 0;
    int64_t pub = atomic_load(&m->last_published_us);
    out->last_publish_age_s = pub > 0 ? (double)(now_us - pub) / 1e6 : -1;
}

static void observe(struct txo_binlog *b)
{
    struct txo_binlog_stats s;
    txo_binlog_get_stats(b, &s);
    if (b->behind_gauge != NULL)
        txo_metric_set(b->behind_gauge, NULL, s.seconds_behind);
    if (b->age_gauge != NULL && s.last_publish_age_s >= 0)
        txo_metric_set(b->age_gauge, NULL, s.last_publish_age_s);
}

int txo__binlog_lease(struct txo_binlog *b, struct txo_error *err)
{
    struct txo_param p[] = {txo_p_str(b->owner), txo_p_i64(b->opts.lease_ms),
                            txo_p_str(b->source_name), txo_p_str(b->owner)};
    struct txo_exec_result res = {0};
    int rc = txo_db_exec(b->db, BINLOG_SQL_TAKE_LEASE, p, TXO_ARRAY_LEN(p), &res, err);
    if (rc < 0)
        return rc;
    bool was = b->active;
    /* A renewal within the same millisecond changes nothing but still counts as held. */
    b->active = res.affected_rows == 1 ||
                (was && res.affected_rows == 0 && txo_monotonic_ms() - b->lease_renewed_ms < 2);
    if (b->active)
        b->lease_renewed_ms = txo_monotonic_ms();
    atomic_store(&b->active_flag, b->active);
    if (b->active && !was)
        TXO_LOG(TXO_LOG_INFO, "relay", "binlog: took the source's lease, reading",
                TXO_KV_STR("source", b->source_name), TXO_KV_STR("owner", b->owner));
    else if (!b->active && was)
        TXO_LOG(TXO_LOG_WARN, "relay", "binlog: lost the source's lease, standing by",
                TXO_KV_STR("source", b->source_name), TXO_KV_STR("owner", b->owner));
    return 0;
}

/* True when one of grants[0..n) gives priv on *.* (or ALL PRIVILEGES there). */
static bool granted(const char *const *grants, size_t n, const char *priv, const char *alias)
{
    for (size_t i = 0; i < n; i++) {
        const char *g = grants[i];
        if (g == NULL || strstr(g, " ON *.* ") == NULL)
            continue;
        if (strstr(g, "ALL PRIVILEGES") != NULL || strstr(g, priv) != NULL ||
            (alias != NULL && strstr(g, alias) != NULL))
            return true;
    }
    return false;
}

int txo__binlog_check_settings(int64_t log_bin, const char *format, const char *meta,
                               struct txo_error *err)
{
    if (log_bin != 1)
        return txo_error_set(err, TXO_ECONFIG,
                             "binlog source: the server's binary log is off: start it with "
                             "log_bin, binlog_format=ROW, binlog_row_metadata=FULL and a "
                             "server_id (docs/binlog.md), or use --source polling");
    if (format == NULL || strcmp(format, "ROW") != 0)
        return txo_error_set(err, TXO_ECONFIG,
                             "binlog source: binlog_format is %s, not ROW: SET GLOBAL "
                             "binlog_format = 'ROW' (and in the server's configuration)",
                             format != NULL ? format : "NULL");
    if (meta == NULL || strcmp(meta, "FULL") != 0)
        return txo_error_set(err, TXO_ECONFIG,
                             "binlog source: binlog_row_metadata is %s, not FULL (the source "
                             "finds the columns by name): SET GLOBAL binlog_row_metadata = "
                             "'FULL' (and in the server's configuration)",
                             meta != NULL ? meta : "NULL");
    return 0;
}

int txo__binlog_check_grants(const char *const *grants, size_t n, struct txo_error *err)
{
    bool slave = granted(grants, n, "REPLICATION SLAVE", NULL);
    bool monitor = granted(grants, n, "BINLOG MONITOR", "REPLICATION CLIENT");
    if (slave && monitor)
        return 0;
    return txo_error_set(err, TXO_ECONFIG,
                         "binlog source: the database user lacks %s%s%s: GRANT REPLICATION "
                         "SLAVE, BINLOG MONITOR ON *.* TO <user> (MySQL and MariaDB before "
                         "10.5.2: REPLICATION CLIENT instead of BINLOG MONITOR)",
                         slave ? "" : "REPLICATION SLAVE", !slave && !monitor ? " and " : "",
                         monitor ? "" : "BINLOG MONITOR (REPLICATION CLIENT)");
}

int txo_binlog_check_server(struct txo_db *db, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, BINLOG_SQL_SERVER_SETTINGS, NULL, 0, &rows, err);
    if (rc < 0)
        return rc;
    rc = txo__binlog_check_settings(txo_rows_i64(rows, 0, 0), txo_rows_str(rows, 0, 1, NULL),
                                    txo_rows_str(rows, 0, 2, NULL), err);
    txo_rows_free(rows);
    if (rc < 0)
        return rc;
    rows = NULL;
    rc = txo_db_query(db, BINLOG_SQL_GRANTS, NULL, 0, &rows, err);
    if (rc < 0)
        return rc;
    const char *grants[64];
    size_t n = 0;
    for (size_t i = 0; i < txo_rows_count(rows) && n < TXO_ARRAY_LEN(grants); i++)
        grants[n++] = txo_rows_str(rows, i, 0, NULL);
    rc = txo__binlog_check_grants(grants, n, err);
    txo_rows_free(rows);
    return rc;
}

/* The server's position now into *pos. */
static int server_position(struct txo_db *db, struct txo__binlog_pos *pos, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, BINLOG_SQL_MASTER_STATUS, NULL, 0, &rows, err);
    if (rc < 0)
        return rc;
    const char *file = txo_rows_count(rows) == 1 ? txo_rows_str(rows, 0, 0, NULL) : NULL;
    if (file == NULL)
        rc = txo_error_set(err, TXO_ECONFIG,
                           "binlog source: SHOW MASTER STATUS returned nothing "
                           "(binary log off?)");
    else {
        snprintf(pos->file, sizeof(pos->file), "%s", file);
        pos->offset = (uint64_t)txo_rows_i64(rows, 0, 1);
    }
    txo_rows_free(rows);
    if (rc < 0)
        return rc;
    rows = NULL;
    pos->gtid[0] = '\0';
    if (txo_db_query(db, BINLOG_SQL_GTID_POS, NULL, 0, &rows, err) == 0) {
        const char *g = txo_rows_str(rows, 0, 0, NULL);
        snprintf(pos->gtid, sizeof(pos->gtid), "%s", g != NULL ? g : "");
    }
    txo_rows_free(rows);
    return 0;
}

/* Is file still among the server's binary logs. */
static int log_present(struct txo_binlog *b, const char *file, bool *present, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(b->db, BINLOG_SQL_LOGS, NULL, 0, &rows, err);
    if (rc < 0)
        return rc;
    *present = false;
    for (size_t i = 0; i < txo_rows_count(rows); i++) {
        const char *f = txo_rows_str(rows, i, 0, NULL);
        if (f != NULL && strcmp(f, file) == 0)
            *present = true;
    }
    txo_rows_free(rows);
    return 0;
}

static int store_first_position(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct txo_binlog *b = arg;
    struct txo_param p[] = {
        txo_p_str(b->run_pos.file), txo_p_i64((int64_t)b->run_pos.offset),
        txo_p_str(b->run_pos.gtid), txo_p_i64(b->first_high_water),
        txo_p_str(b->source_name),  txo_p_str(b->owner),
    };
    struct txo_exec_result res = {0};
    int rc = txo_tx_exec(tx, BINLOG_SQL_STORE_POSITION, p, TXO_ARRAY_LEN(p), &res, err);
    if (rc == 0 && res.affected_rows != 1)
        rc = txo_error_set(err, TXO_ELEASELOST, "binlog source %s: lease lost", b->source_name);
    return rc;
}

/*
 * Marks the rows the source published PENDING -> PUBLISHED, ids up to through in ranges of
 * SETTLE_IDS (BINLOG_SQL_SETTLE), created before the bound. Returns the rows changed.
 */
static int settle(struct txo_binlog *b, int64_t through, const char *before, uint64_t *settled,
                  struct txo_error *err)
{
    *settled = 0;
    for (int64_t from = 0; from < through && !txo__binlog_stopping(b); from += SETTLE_IDS) {
        int64_t to = through - from > SETTLE_IDS ? from + SETTLE_IDS : through;
        struct txo_param p[] = {txo_p_i64(from), txo_p_i64(to), txo_p_str(before)};
        struct txo_exec_result res = {0};
        int rc = txo_db_exec(b->db, BINLOG_SQL_SETTLE, p, TXO_ARRAY_LEN(p), &res, err);
        if (rc < 0)
            return rc;
        *settled += res.affected_rows;
    }
    if (txo__binlog_stopping(b))
        return txo_error_set(err, TXO_ECANCELED, "binlog source %s: stopped while settling",
                             b->source_name);
    return 0;
}

/*
 * No position stored: the server's position now, what is PENDING published by the polling
 * relay (drained), then the position stored. An event committed in between is published by
 * both (at least once). A resync (the row kept its high-water id, its file was cleared after a
 * purge) first settles the rows up to the high-water id that are older than a minute before the
 * position was stored, so that the drain does not publish the source's whole history again.
 */
static int first_position(struct txo_binlog *b, struct txo_error *err)
{
    int rc = server_position(b->db, &b->run_pos, err);
    if (rc < 0)
        return rc;
    struct txo_rows *rows = NULL;
    rc = txo_db_query(b->db, BINLOG_SQL_MAX_ID, NULL, 0, &rows, err);
    if (rc < 0)
        return rc;
    b->first_high_water = txo_rows_i64(rows, 0, 0);
    txo_rows_free(rows);
    if (b->stored_high_water > 0) {
        uint64_t settled = 0;
        rc = settle(b, b->stored_high_water, b->settle_before, &settled, err);
        if (rc < 0)
            return rc;
        TXO_LOG(TXO_LOG_WARN, "relay",
                "binlog: resync: rows up to the high-water id settled as published; the rest "
                "of what is PENDING goes out by polling",
                TXO_KV_STR("source", b->source_name),
                TXO_KV_I64("high_water_id", b->stored_high_water), TXO_KV_U64("settled", settled),
                TXO_KV_STR("created_before", b->settle_before));
    }
    TXO_LOG(TXO_LOG_INFO, "relay",
            "binlog: no stored position: publishing what is PENDING by polling, then streaming",
            TXO_KV_STR("source", b->source_name), TXO_KV_STR("file", b->run_pos.file),
            TXO_KV_U64("offset", b->run_pos.offset));
    rc = txo_relay_run(b->poll, err);
    if (b->poll->ordered) /* give the shards back to the polling relays at once */
        txo__shards_leave(b->db, &b->poll->shards);
    if (rc < 0)
        return rc;
    if (txo__binlog_stopping(b))
        return txo_error_set(err, TXO_ECANCELED, "binlog source %s: stopped while draining",
                             b->source_name);
    return txo_db_transact(b->db, TXO_ISO_READ_COMMITTED, store_first_position, b, err);
}

/*
 * The stored position into b->run_pos, checked against the server; none stored: *stored false
 * (b->stored_high_water and b->settle_before say whether a resync is asked for).
 */
static int load_position(struct txo_binlog *b, bool *stored, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    struct txo_param p[] = {txo_p_str(b->source_name)};
    int rc = txo_db_query(b->db, BINLOG_SQL_LOAD_POSITION, p, 1, &rows, err);
    if (rc < 0)
        return rc;
    bool row = txo_rows_count(rows) == 1;
    *stored = row && !txo_rows_is_null(rows, 0, 0);
    b->stored_high_water = row ? txo_rows_i64(rows, 0, 3) : 0;
    const char *before = row ? txo_rows_str(rows, 0, 4, NULL) : NULL;
    snprintf(b->settle_before, sizeof(b->settle_before), "%s", before != NULL ? before : "");
    if (*stored) {
        const char *g = txo_rows_str(rows, 0, 2, NULL);
        snprintf(b->run_pos.file, sizeof(b->run_pos.file), "%s", txo_rows_str(rows, 0, 0, NULL));
        b->run_pos.offset = (uint64_t)txo_rows_i64(rows, 0, 1);
        snprintf(b->run_pos.gtid, sizeof(b->run_pos.gtid), "%s", g != NULL ? g : "");
    }
    txo_rows_free(rows);
    if (!*stored)
        return 0;
    bool present = false;
    rc = log_present(b, b->run_pos.file, &present, err);
    if (rc == 0 && !present)
        rc = txo_error_set(
            err, TXO_ECONFIG,
            "binlog source %s: its stored position %s:%" PRIu64
            " was purged from the server's binary logs, so events after it cannot be read from "
            "the log. To resync: UPDATE outbox_binlog_sources SET binlog_file = NULL WHERE name "
            "= '%s'; the next start marks the rows through its high-water id %" PRId64
            " (except the last minute's) as published, publishes what is PENDING by polling, "
            "and streams from the server's position. Keep binary logs longer than the longest "
            "relay outage (binlog_expire_logs_seconds)",
            b->source_name, b->run_pos.file, b->run_pos.offset, b->source_name,
            b->stored_high_water);
    return rc;
}

/* The stored position into b->run_pos (or the first one), checked against the server. */
static int start_position(struct txo_binlog *b, struct txo_error *err)
{
    bool stored = false;
    int rc = load_position(b, &stored, err);
    if (rc == 0 && !stored)
        rc = first_position(b, err);
    return rc;
}

static int stream(struct txo_binlog *b, const struct txo__binlog_pos *target, bool *done,
                  struct txo_error *err);

/*
 * A hand-back to the polling relay (opts.hand_back): the rows the source published through
 * its stored high-water id are settled PUBLISHED (BINLOG_SQL_SETTLE); then the log is read from
 * the stored position to the server's position after the settling, publishing and marking
 * each run; then the position is forgotten. Every row settled was published before the
 * stored position or is published by that read (a row still uncommitted while it was settled
 * is passed over, so it stays PENDING and is published by the read or by the polling relay);
 * what commits later stays PENDING for the polling relay. Interrupted, it is run again.
 */
static int hand_back(struct txo_binlog *b, bool *done, struct txo_error *err)
{
    bool stored = false;
    int rc = load_position(b, &stored, err);
    uint64_t settled = 0;
    if (rc == 0 && stored)
        rc = settle(b, b->stored_high_water, "9999-12-31", &settled, err);
    struct txo__binlog_pos target;
    if (rc == 0 && stored)
        rc = server_position(b->db, &target, err);
    if (rc == 0 && stored) {
        b->marking = true;
        rc = stream(b, &target, done, err);
        b->marking = false;
    }
    if (rc < 0 || (stored && !*done))
        return rc;
    struct txo_param p[] = {txo_p_str(b->source_name), txo_p_str(b->owner)};
    struct txo_exec_result res = {0};
    rc = txo_db_exec(b->db, BINLOG_SQL_FORGET_SOURCE, p, TXO_ARRAY_LEN(p), &res, err);
    if (rc < 0)
        return rc;
    if (stored && res.affected_rows != 1) { /* another reader took the lease: start again */
        *done = false;
        return txo_error_set(err, TXO_ELEASELOST,
                             "binlog source %s: lease lost before the hand-back ended",
                             b->source_name);
    }
    *done = true;
    b->active = false;
    atomic_store(&b->active_flag, false);
    TXO_LOG(TXO_LOG_INFO, "relay",
            "binlog: handed back to the polling relay: published rows marked, position "
            "forgotten",
            TXO_KV_STR("source", b->source_name), TXO_KV_U64("settled", settled),
            TXO_KV_I64("high_water_id", b->stored_high_water));
    return 0;
}

int txo_binlog_published_through(struct txo_db *db, int64_t *id, struct txo_error *err)
{
    *id = 0;
    struct txo_rows *rows = NULL;
    struct txo_error e;
    txo_error_init(&e);
    int rc = txo_db_query(db, BINLOG_SQL_PUBLISHED_THROUGH, NULL, 0, &rows, &e);
    if (rc < 0) {
        if (e.mysql_errno == 1146) /* no such table: not migrated, or a relay-only schema */
            return 0;
        if (err != NULL)
            *err = e;
        return rc;
    }
    *id = txo_rows_i64(rows, 0, 0);
    txo_rows_free(rows);
    return 0;
}

/* True when a is at or after b (file names of one server sort in log order). */
static bool reached(const struct txo__binlog_pos *a, const struct txo__binlog_pos *b)
{
    int c = strcmp(a->file, b->file);
    return c > 0 || (c == 0 && a->offset >= b->offset);
}

/* The columns the stream decodes: the polling relay's claim columns (enum claim_col). */
static const struct txo__binlog_column claim_columns[] = {
    [COL_ID] = {"id", false},
    [COL_AGGREGATE_TYPE] = {"aggregate_type", false},
    [COL_AGGREGATE_ID] = {"aggregate_id", false},
    [COL_EVENT_TYPE] = {"event_type", false},
    [COL_PAYLOAD] = {"payload", false},
    [COL_IDEMPOTENCY_KEY] = {"idempotency_key", false},
    [COL_CREATED_AT] = {"created_at", false},
    [COL_ATTEMPTS] = {"attempts", false},
    [COL_NEXT_ATTEMPT_AT] = {"next_attempt_at", false},
    [COL_LEASE_EXPIRIES] = {"lease_expiries", false},
    [COL_HAD_ERROR] = {"last_error", true},
    [COL_SEQUENCE] = {"sequence", false},
    [COL_PREV_SEQUENCE] = {"prev_sequence", false},
    [COL_TRACEPARENT] = {"traceparent", false},
    [COL_TRACESTATE] = {"tracestate", false},
};

/* Streams from b->run_pos while this reader holds the lease. *done: drained. */
static int stream(struct txo_binlog *b, const struct txo__binlog_pos *target, bool *done,
                  struct txo_error *err)
{
    struct txo__binlog_stream *s = NULL;
    uint32_t server_id = b->opts.server_id;
    if (server_id == 0) {
        uint32_t h = 2166136261u;
        for (const char *c = b->owner; *c != '\0'; c++)
            h = (h ^ (unsigned char)*c) * 16777619u;
        server_id = 0x40000000u | (h & 0x3fffffffu);
    }
    /* The server speaks at least every quarter of the lease, so it is renewed in time. */
    int64_t heartbeat_ms = b->opts.heartbeat_ms;
    if (heartbeat_ms > b->opts.lease_ms / 4)
        heartbeat_ms = b->opts.lease_ms / 4;
    /* A dead letter's replay (FAILED -> PENDING) is read as the insert of an event. */
    static const struct txo__binlog_requeue replay = {"status", "FAILED", "PENDING"};
    int rc = txo__binlog_stream_open(b->stream, &b->run_pos, server_id, b->database,
                                     "outbox_events", claim_columns, TXO_ARRAY_LEN(claim_columns),
                                     &replay, heartbeat_ms, &s, err);
    if (rc < 0)
        return rc;
    struct txo__binlog_event ev_store, *ev = &ev_store;
    struct txo__binlog_pos pos = b->run_pos, committed = b->run_pos;
    int64_t run_start_ms = 0, last_run_ms = 0, publish_ms = 0;
    b->stored_pos = b->run_pos; /* where the stream starts is the stored position */
    b->stored_ms = txo_monotonic_ms();
    bool in_txn = false; /* rows of a transaction whose commit was not read yet */
    while (!txo__binlog_stopping(b)) {
        size_t before = txo__binlog_stream_committed(s);
        rc = txo__binlog_stream_next(s, ev, &pos, err);
        if (rc < 0)
            goto out;
        int64_t now = txo_monotonic_ms();
        atomic_store(&b->last_event_s, ev->timestamp_s);
        if (ev->kind == TXO__BINLOG_INSERT) {
            in_txn = true;
        } else if (ev->kind == TXO__BINLOG_COMMIT) {
            committed = pos;
            in_txn = false;
            if (before == 0 && txo__binlog_stream_committed(s) > 0)
                run_start_ms = now;
        }
        size_t n_run = txo__binlog_stream_committed(s);
        bool quiet = ev->timestamp_s == 0; /* a heartbeat: the log has nothing more now */
        if (quiet)
            atomic_store(&b->last_event_s, 0);
        /* A run goes out when the reader has read all the server sent (at a commit), when it is
         * full, or run_ms after its first event under a steady flow. Under load the reader
         * gathers: at a commit soon after the last run it waits for more, up to as long as the
         * last run took to publish (at most gather_ms) after that run, so that one run carries
         * several commits when the consumers are busy and each commit goes out at once when
         * they are not. */
        int64_t window = publish_ms < b->opts.gather_ms ? publish_ms : b->opts.gather_ms;
        int gather = (int)(window - (now - last_run_ms));
        bool publish = n_run > 0 && (quiet || n_run >= b->opts.relay.batch_size ||
                                     now - run_start_ms >= b->opts.run_ms ||
                                     (ev->kind == TXO__BINLOG_COMMIT &&
                                      txo__binlog_stream_idle(s, gather > 0 ? gather : 0)));
        /* The position not stored yet: a quiet log's, or a run's the throttle passed over. */
        bool unsaved = strcmp(committed.file, b->stored_pos.file) != 0 ||
                       committed.offset != b->stored_pos.offset;
        bool at_target = target != NULL && reached(&committed, target);
        bool due = quiet || at_target || now - b->stored_ms >= POSITION_EVERY_MS;
        if (publish || (unsaved && !in_txn && due)) {
            b->run_pos = committed;
            int64_t t0 = txo_monotonic_us();
            rc = txo__binlog_publish_run(b, s, !publish || quiet || at_target, err);
            if (rc < 0)
                goto out;
            last_run_ms = txo_monotonic_ms();
            if (publish)
                publish_ms = (txo_monotonic_us() - t0 + 500) / 1000;
        }
        observe(b);
        if (target != NULL && txo__binlog_stream_committed(s) == 0 &&
            reached(&b->stored_pos, target)) {
            *done = true;
            break;
        }
        if (txo_monotonic_ms() - b->lease_renewed_ms >= b->opts.lease_ms / 4) {
            rc = txo__binlog_lease(b, err);
            if (rc < 0 || !b->active)
                goto out;
        }
    }
    /* Stopped: the position of what was published, if the throttle left it unstored. */
    if (rc == 0 && (strcmp(b->run_pos.file, b->stored_pos.file) != 0 ||
                    b->run_pos.offset != b->stored_pos.offset)) {
        size_t held = txo__binlog_stream_committed(s);
        if (held == 0)
            rc = txo__binlog_publish_run(b, s, true, err);
    }
out:
    txo__binlog_stream_close(s); /* what it held unpublished is read again from the position */
    return rc;
}

int txo_binlog_run(struct txo_binlog *b, struct txo_error *err)
{
    unsigned failures = 0;
    TXO_LOG(TXO_LOG_INFO, "relay", "binlog source started", TXO_KV_STR("source", b->source_name),
            TXO_KV_STR("owner", b->owner), TXO_KV_I64("lease_ms", b->opts.lease_ms),
            TXO_KV_STR("publisher", b->pub->ops->name), TXO_KV_BOOL("drain", b->opts.drain));
    int rc = txo_binlog_check_server(b->db, err);
    if (rc < 0)
        return rc;
    rc = txo_schema_require_table(b->db, "outbox_binlog_sources", "binlog source",
                                  "0021_relay_binlog.sql", err);
    if (rc < 0)
        return rc;
    struct txo_param p[] = {txo_p_str(b->source_name)};
    struct txo__binlog_pos target;
    bool have_target = false;
    while (!txo__binlog_stopping(b)) {
        struct txo_error e;
        txo_error_init(&e);
        rc = txo_db_exec(b->db, BINLOG_SQL_ENSURE_SOURCE, p, 1, NULL, &e);
        if (rc == 0)
            rc = txo__binlog_lease(b, &e);
        if (rc == 0 && !b->active) {
            (void)txo__waiter_wait(&b->pause, b->opts.lease_ms / 3, false);
            continue;
        }
        if (rc == 0)
            rc = txo_binlog_check_server(b->db, &e);
        bool done = false;
        if (rc == 0 && b->opts.hand_back) {
            rc = hand_back(b, &done, &e);
        } else {
            if (rc == 0)
                rc = start_position(b, &e);
            if (rc == 0 && b->opts.drain && !have_target) {
                rc = server_position(b->db, &target, &e);
                have_target = rc == 0;
            }
            if (rc == 0)
                rc = stream(b, have_target ? &target : NULL, &done, &e);
        }
        if (rc == 0 && done)
            break;
        if (rc == 0 || rc == TXO_ELEASELOST || rc == TXO_ECANCELED) {
            failures = 0;
            continue;
        }
        if (!txo_err_is_transient(rc)) {
            if (err != NULL)
                *err = e;
            return rc;
        }
        failures++;
        TXO_LOG(TXO_LOG_WARN, "relay",
                "binlog source: error, starting again from the stored "
                "position after a backoff",
                TXO_KV_STR("source", b->source_name), TXO_KV_STR("error", txo_err_name(rc)),
                TXO_KV_STR("reason", e.msg), TXO_KV_U64("attempts", failures));
        (void)txo__waiter_wait(&b->pause,
                               txo_backoff_delay_ms(&b->opts.retry, failures, txo_rand01()), false);
    }
    if (b->active) {
        struct txo_param d[] = {txo_p_str(b->source_name), txo_p_str(b->owner)};
        struct txo_error e;
        txo_error_init(&e);
        if (txo_db_exec(b->db, BINLOG_SQL_DROP_LEASE, d, 2, NULL, &e) < 0)
            TXO_LOG(TXO_LOG_WARN, "relay", "binlog: could not give the lease back; it lapses",
                    TXO_KV_STR("source", b->source_name), TXO_KV_STR("reason", e.msg));
        b->active = false;
        atomic_store(&b->active_flag, false);
    }
    return 0;
}

static void copy_col(char *dst, size_t cap, const struct txo_rows *rows, size_t i, size_t col)
{
    const char *v = txo_rows_str(rows, i, col, NULL);
    snprintf(dst, cap, "%s", v != NULL ? v : "");
}

int txo_binlog_list_sources(struct txo_db *db, struct txo_binlog_source_info *out, size_t cap,
                            size_t *n, struct txo_error *err)
{
    *n = 0;
    bool exists = false;
    int rc = txo_schema_has_table(db, "outbox_binlog_sources", &exists, err);
    if (rc < 0 || !exists || cap == 0)
        return rc;
    struct txo_rows *rows = NULL;
    struct txo_param p[] = {txo_p_i64((int64_t)cap)};
    rc = txo_db_query(db, BINLOG_SQL_LIST_SOURCES, p, 1, &rows, err);
    if (rc < 0)
        return rc;
    size_t count = txo_rows_count(rows);
    for (size_t i = 0; i < count && i < cap; i++) {
        struct txo_binlog_source_info *s = &out[i];
        copy_col(s->name, sizeof(s->name), rows, i, 0);
        copy_col(s->owner, sizeof(s->owner), rows, i, 1);
        s->reading = txo_rows_i64(rows, i, 2) != 0;
        copy_col(s->file, sizeof(s->file), rows, i, 3);
        s->offset = (uint64_t)txo_rows_i64(rows, i, 4);
        copy_col(s->gtid, sizeof(s->gtid), rows, i, 5);
        s->high_water_id = txo_rows_i64(rows, i, 6);
        s->position_age_s = txo_rows_f64(rows, i, 7);
        *n = i + 1;
    }
    txo_rows_free(rows);
    return 0;
}

static int register_metrics(struct txo_binlog *b, struct txo_error *err)
{
    struct txo_metrics *reg = b->opts.relay.metrics;
    if (reg == NULL)
        return 0;
    int rc = 0;
    b->behind_gauge = txo_metrics_register_chained(
        reg, TXO_METRIC_GAUGE, "txo_relay_binlog_seconds_behind",
        "The binlog source's lag: now minus the time the server wrote the last event read (0 "
        "when it is caught up).",
        0, NULL, &rc, err);
    b->age_gauge = txo_metrics_register_chained(
        reg, TXO_METRIC_GAUGE, "txo_relay_binlog_last_publish_age_seconds",
        "Seconds since the binlog source last published an event.", 0, NULL, &rc, err);
    return rc;
}

void txo_binlog_free(struct txo_binlog *b)
{
    if (b == NULL)
        return;
    txo_relay_free(b->poll);
    txo_relay_free(b->relay);
    txo_db_close(b->stream);
    txo_db_close(b->db);
    txo_free(b->source_name);
    txo_free(b->owner);
    txo_free(b->database);
    txo__waiter_destroy(&b->pause);
    txo_free(b);
}

int txo_binlog_new(const struct txo_db_opts *db_opts, struct txo_publisher *pub,
                   const struct txo_binlog_opts *opts, struct txo_binlog **out,
                   struct txo_error *err)
{
    if (db_opts == NULL || pub == NULL || opts == NULL || out == NULL)
        return txo_error_set(err, TXO_EINVAL, "binlog: db_opts, publisher, opts, out required");
    if (opts->source_name == NULL || opts->source_name[0] == '\0' ||
        strlen(opts->source_name) > BINLOG_NAME_MAX)
        return txo_error_set(err, TXO_EINVAL, "binlog: source name must be 1..%d bytes",
                             BINLOG_NAME_MAX);
    if (opts->lease_ms < 30 || opts->heartbeat_ms < 1 || opts->run_ms < 0 || opts->gather_ms < 0 ||
        opts->gather_ms > 1000)
        return txo_error_set(err, TXO_EINVAL,
                             "binlog: lease_ms must be >= 30, heartbeat_ms >= 1, run_ms >= 0, "
                             "gather_ms in 0..1000");
    struct txo_binlog *b = txo_calloc(1, sizeof(*b));
    if (b == NULL)
        return txo_error_set(err, TXO_ENOMEM, "binlog: out of memory");
    if (txo__waiter_init(&b->pause) != 0) {
        txo_free(b);
        return txo_error_set(err, TXO_ENOMEM, "binlog: cannot make its eventfd");
    }
    b->opts = *opts;
    b->pub = pub;
    char owner[TOKEN_MAX + 1];
    if (opts->owner == NULL && txo_owner_name(owner, sizeof(owner), NULL) < 0)
        snprintf(owner, sizeof(owner), "localhost");
    b->owner = txo_strdup(opts->owner != NULL ? opts->owner : owner);
    b->source_name = txo_strdup(opts->source_name);
    b->database = txo_strdup(db_opts->database != NULL ? db_opts->database : "");
    int rc = 0;
    if (b->owner == NULL || b->source_name == NULL || b->database == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "binlog: out of memory");
        goto fail;
    }
    b->opts.owner = b->owner;
    b->opts.source_name = b->source_name;
    rc = txo_db_open(db_opts, &b->db, err);
    if (rc == 0)
        rc = txo_db_open(db_opts, &b->stream, err);
    if (rc < 0)
        goto fail;
    struct txo_relay_opts ro = opts->relay;
    ro.relay_id = b->owner;
    ro.ordering = TXO_RELAY_ORDER_AGGREGATE; /* publish in per-aggregate order */
    ro.mode = TXO_RELAY_CLAIM_LEASE;
    ro.breaker_failures = 0;
    rc = txo_relay_new(b->db, pub, &ro, &b->relay, err);
    /* The first start's drain of what is PENDING: the polling relay as configured. Made here,
     * so that txo_binlog_stop() can always reach it. */
    struct txo_relay_opts po = opts->relay;
    po.drain = true;
    po.relay_id = b->owner;
    if (rc == 0)
        rc = txo_relay_new(b->db, pub, &po, &b->poll, err);
    if (rc == 0)
        rc = register_metrics(b, err);
    if (rc < 0)
        goto fail;
    *out = b;
    return 0;
fail:
    txo_binlog_free(b);
    return rc;
}
