#include "core/common.h"

/*
 * Replay of published history (txo/replay.h): the chosen rows read in id order a batch at a
 * time, turned into the relay's messages and published by the relay's own code, as the binlog
 * source does (txo__relay_load_batch() builds the messages, txo__relay_publish_settled()
 * publishes them in per-aggregate order and again after a transient failure), then the
 * checkpoint stored. Nothing is written to outbox_events.
 *
 *   start     the checkpoint of the name: none, or opts.restart: a new one from the filter's
 *             start to its end (the largest id now when the filter has none); the same
 *             selection: resume after its last id; another: refused;
 *   batch     SELECT the next batch_size chosen rows after the cursor (REPLAY_SQL_BATCH);
 *             none left: mark the checkpoint finished;
 *   publish   until settled; a permanent failure stops the replay (nothing is marked);
 *   store     the checkpoint after the batch's last id, then wait as long as opts.rate asks.
 *
 * Thread-safety: one thread runs it; stop and stats from any thread.
 */

#include "core/waiter.h"

#include <errno.h>
#include <pthread.h>
#include "relay/relay_internal.h"
#include "relay/replay_internal.h"
#include "relay/replay_sql.h"
#include "txo/binlog.h"
#include "txo/replay.h"

#define REPLAY_NAME_MAX  64
#define REPLAY_BATCH_MAX 10000
#define REPLAY_SPEC_MAX  2048
#define TIME_MIN         "0001-01-01 00:00:00"
#define TIME_MAX         "9999-12-31 23:59:59.999999"

struct txo_replay {
    struct txo_db *db;
    struct txo_relay *relay; /* builds and publishes the messages; never claims */
    struct txo_replay_opts opts;
    char name[REPLAY_NAME_MAX + 1];
    char spec[REPLAY_SPEC_MAX];
    struct txo__waiter pause; /* the throttle's and the backoff's waits; stop ends them */
    char **keys;              /* opts.new_keys: the batch's new keys */
    struct txo__replay_archive *archive; /* opts.archive_dir: the rows come from there */
    pthread_mutex_t mu;                  /* stats */
    struct txo_replay_stats stats;
};

void txo_replay_opts_init(struct txo_replay_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->name = "default";
    opts->batch_size = 500;
    opts->retry = (struct txo_backoff){250, 30000, 0.2};
}

/* True for "YYYY-MM-DD", "YYYY-MM-DD HH:MM:SS" and that with ".f" to ".ffffff". */
static bool time_text(const char *s)
{
    static const char shape[] = "dddd-dd-dd dd:dd:dd";
    size_t n = strlen(s);
    if (n != 10 && n < 19)
        return false;
    for (size_t i = 0; i < n && i < 19; i++) {
        bool digit = s[i] >= '0' && s[i] <= '9';
        if (shape[i] == 'd' ? !digit : s[i] != shape[i])
            return false;
    }
    if (n <= 19)
        return true;
    if (s[19] != '.' || n > 26 || n == 20)
        return false;
    for (size_t i = 20; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

static const char *or_empty(const char *s)
{
    return s != NULL ? s : "";
}

/* The selection as stored: every filter and the key mode, in a fixed order. */
static bool make_spec(struct txo_replay *rp)
{
    const struct txo_replay_filter *f = &rp->opts.filter;
    int n = snprintf(rp->spec, sizeof(rp->spec),
                     "aggregate_type=%s;aggregate_id=%s;event_type=%s;from_id=%" PRId64
                     ";to_id=%" PRId64 ";since=%s;until=%s;new_keys=%d;archive=%s",
                     or_empty(f->aggregate_type), or_empty(f->aggregate_id),
                     or_empty(f->event_type), f->from_id, f->to_id, or_empty(f->since),
                     or_empty(f->until), rp->opts.new_keys ? 1 : 0, or_empty(rp->opts.archive_dir));
    return n > 0 && (size_t)n < sizeof(rp->spec);
}

int txo_replay_opts_check(const struct txo_replay_opts *opts, struct txo_error *err)
{
    const struct txo_replay_filter *f = &opts->filter;
    if (opts->name == NULL || opts->name[0] == '\0' || strlen(opts->name) > REPLAY_NAME_MAX)
        return txo_error_set(err, TXO_EINVAL, "replay: the name must be 1..%d bytes",
                             REPLAY_NAME_MAX);
    if (opts->batch_size < 1 || opts->batch_size > REPLAY_BATCH_MAX)
        return txo_error_set(err, TXO_EINVAL, "replay: the batch size must be 1..%d, got %zu",
                             REPLAY_BATCH_MAX, opts->batch_size);
    if (!(opts->rate >= 0) || opts->rate > 1e9)
        return txo_error_set(err, TXO_EINVAL,
                             "replay: the rate must be 0 (no limit) or a "
                             "positive number of events a second");
    if (f->from_id < 0 || f->to_id < 0 || (f->to_id > 0 && f->to_id < f->from_id))
        return txo_error_set(err, TXO_EINVAL,
                             "replay: the id range %" PRId64 "..%" PRId64 " is empty or negative",
                             f->from_id, f->to_id);
    if ((f->since != NULL && !time_text(f->since)) || (f->until != NULL && !time_text(f->until)))
        return txo_error_set(err, TXO_EINVAL,
                             "replay: since and until are UTC times, \"YYYY-MM-DD\" or "
                             "\"YYYY-MM-DD HH:MM:SS[.ffffff]\", got \"%s\"",
                             f->since != NULL && !time_text(f->since) ? f->since : f->until);
    size_t len = strlen(or_empty(f->aggregate_type)) + strlen(or_empty(f->aggregate_id)) +
                 strlen(or_empty(f->event_type)) + strlen(or_empty(opts->archive_dir));
    if (len > REPLAY_SPEC_MAX - 256)
        return txo_error_set(err, TXO_EINVAL, "replay: the filters are longer than %d bytes",
                             REPLAY_SPEC_MAX - 256);
    return 0;
}

int txo_replay_new(struct txo_db *db, struct txo_publisher *pub, const struct txo_replay_opts *opts,
                   struct txo_replay **out, struct txo_error *err)
{
    if (db == NULL || pub == NULL || opts == NULL || out == NULL)
        return txo_error_set(err, TXO_EINVAL, "replay: db, publisher, opts, out required");
    *out = NULL;
    int rc = txo_replay_opts_check(opts, err);
    if (rc < 0)
        return rc;
    struct txo_replay *rp = txo_calloc(1, sizeof(*rp));
    if (rp == NULL)
        return txo_error_set(err, TXO_ENOMEM, "replay: out of memory");
    rp->db = db;
    rp->opts = *opts;
    rp->pause.fd = -1;
    snprintf(rp->name, sizeof(rp->name), "%s", opts->name);
    rp->opts.name = rp->name;
    pthread_mutex_init(&rp->mu, NULL);
    if (!make_spec(rp))
        rc = txo_error_set(err, TXO_EINVAL, "replay: the filters are longer than %d bytes",
                           REPLAY_SPEC_MAX - 64);
    if (rc == 0 && txo__waiter_init(&rp->pause) < 0)
        rc = txo_error_set(err, TXO_EIO, "replay: cannot make an eventfd: %s", strerror(errno));
    if (rc == 0 && opts->new_keys) {
        rp->keys = txo_calloc(opts->batch_size, sizeof(*rp->keys));
        if (rp->keys == NULL)
            rc = txo_error_set(err, TXO_ENOMEM, "replay: out of memory");
    }
    if (rc == 0) {
        struct txo_relay_opts ro;
        txo_relay_opts_init(&ro);
        ro.relay_id = "replay";
        ro.batch_size = opts->batch_size;
        ro.ordering = TXO_RELAY_ORDER_AGGREGATE; /* per-aggregate order, in waves */
        ro.breaker_failures = 0;
        rc = txo_relay_new(db, pub, &ro, &rp->relay, err);
    }
    if (rc < 0) {
        txo_replay_free(rp);
        return rc;
    }
    *out = rp;
    return 0;
}

void txo_replay_stop(struct txo_replay *rp)
{
    txo__waiter_stop(&rp->pause);
}

void txo_replay_get_stats(struct txo_replay *rp, struct txo_replay_stats *out)
{
    pthread_mutex_lock(&rp->mu);
    *out = rp->stats;
    pthread_mutex_unlock(&rp->mu);
}

static void free_keys(struct txo_replay *rp)
{
    if (rp->keys == NULL)
        return;
    for (size_t i = 0; i < rp->opts.batch_size; i++) {
        txo_free(rp->keys[i]);
        rp->keys[i] = NULL;
    }
}

void txo_replay_free(struct txo_replay *rp)
{
    if (rp == NULL)
        return;
    txo_relay_free(rp->relay);
    txo__replay_archive_free(rp->archive);
    free_keys(rp);
    txo_free(rp->keys);
    if (rp->pause.fd >= 0)
        txo__waiter_destroy(&rp->pause);
    pthread_mutex_destroy(&rp->mu);
    txo_free(rp);
}

static int64_t query_i64(struct txo_db *db, const char *sql, const struct txo_param *p, size_t n,
                         int64_t *out, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(db, sql, p, n, &rows, err);
    if (rc == 0)
        *out = txo_rows_count(rows) > 0 ? txo_rows_i64(rows, 0, 0) : 0;
    txo_rows_free(rows);
    return rc;
}

/* The chosen-rows params after the cursor (REPLAY_SQL__CHOSEN), plus limit when > 0. */
static size_t chosen_params(const struct txo_replay *rp, int64_t cursor, int64_t through,
                            int64_t limit, struct txo_param *p)
{
    const struct txo_replay_filter *f = &rp->opts.filter;
    size_t n = 0;
    p[n++] = txo_p_i64(cursor);
    p[n++] = txo_p_i64(rp->stats.to_id);
    p[n++] = txo_p_i64(through);
    const char *fs[] = {or_empty(f->aggregate_type), or_empty(f->aggregate_id),
                        or_empty(f->event_type)};
    for (size_t i = 0; i < TXO_ARRAY_LEN(fs); i++) {
        p[n++] = txo_p_str(fs[i]);
        p[n++] = txo_p_str(fs[i]);
    }
    p[n++] = txo_p_str(f->since != NULL ? f->since : TIME_MIN);
    p[n++] = txo_p_str(f->until != NULL ? f->until : TIME_MAX);
    if (limit > 0)
        p[n++] = txo_p_i64(limit);
    return n;
}

/* Reads or makes the checkpoint into rp->stats; *done when a stored run had finished. */
static int start(struct txo_replay *rp, struct txo_error *err)
{
    int rc = txo_schema_require_table(rp->db, "outbox_replays", "replay", "0022_outbox_replays.sql",
                                      err);
    if (rc < 0)
        return rc;
    struct txo_param name[] = {txo_p_str(rp->name)};
    struct txo_rows *rows = NULL;
    rc = txo_db_query(rp->db, REPLAY_SQL_LOAD, name, 1, &rows, err);
    if (rc < 0)
        return rc;
    struct txo_replay_stats st = {0};
    bool stored = txo_rows_count(rows) > 0 && !rp->opts.restart;
    if (stored) {
        const char *spec = txo_rows_str(rows, 0, 0, NULL);
        if (strcmp(spec, rp->spec) != 0) {
            rc = txo_error_set(err, TXO_ECONFLICT,
                               "replay %s: its checkpoint was made for another selection (%s); "
                               "start it over (txo replay --restart) or choose another name",
                               rp->name, spec);
            txo_rows_free(rows);
            return rc;
        }
        st.to_id = txo_rows_i64(rows, 0, 1);
        st.last_id = txo_rows_i64(rows, 0, 2);
        st.replayed = (uint64_t)txo_rows_i64(rows, 0, 3);
        st.finished = txo_rows_i64(rows, 0, 4) != 0;
        st.resumed = true;
    }
    txo_rows_free(rows);
    if (!stored) {
        const struct txo_replay_filter *f = &rp->opts.filter;
        st.to_id = f->to_id;
        if (st.to_id == 0 && rp->archive != NULL)
            st.to_id = txo__replay_archive_last_id(rp->archive);
        else if (st.to_id == 0) {
            rc = query_i64(rp->db, REPLAY_SQL_MAX_ID, NULL, 0, &st.to_id, err);
            if (rc < 0)
                return rc;
        }
        st.last_id = f->from_id > 0 ? f->from_id - 1 : 0;
        struct txo_param p[] = {txo_p_str(rp->name), txo_p_str(rp->spec), txo_p_i64(st.to_id),
                                txo_p_i64(st.last_id)};
        rc = txo_db_exec(rp->db, REPLAY_SQL_BEGIN, p, TXO_ARRAY_LEN(p), NULL, err);
        if (rc < 0)
            return rc;
    }
    pthread_mutex_lock(&rp->mu);
    rp->stats = st;
    pthread_mutex_unlock(&rp->mu);
    return 0;
}

/* The batch's messages get their new keys (opts.new_keys). */
static int rekey(struct txo_replay *rp, struct txo_error *err)
{
    struct txo_relay *r = rp->relay;
    free_keys(rp);
    for (size_t i = 0; i < r->n; i++) {
        const char *key = r->msgs[i].idempotency_key;
        size_t len = strlen(key) + strlen(rp->name) + sizeof(":replay:");
        rp->keys[i] = txo_malloc(len);
        if (rp->keys[i] == NULL)
            return txo_error_set(err, TXO_ENOMEM, "replay: out of memory");
        snprintf(rp->keys[i], len, "%s:replay:%s", key, rp->name);
        r->msgs[i].idempotency_key = rp->keys[i];
    }
    return 0;
}

static bool wait_backoff(void *arg, int64_t ms)
{
    struct txo_replay *rp = arg;
    return txo__waiter_wait(&rp->pause, ms, false);
}

/* The first permanent failure of a settled batch, as the replay's error; 0 when none. */
static int first_failure(const struct txo_relay *r, struct txo_error *err)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->results[i] < 0)
            return txo_error_set(err, r->results[i],
                                 "replay: the publisher refused event %" PRId64
                                 " (%s): %s; the replay stops before it",
                                 r->msgs[i].id, txo_err_name(r->results[i]), r->errors[i].msg);
    return 0;
}

/* Publishes one batch of chosen rows after the cursor; *n_out: how many (0: none left). */
static int one_batch(struct txo_replay *rp, int64_t through, size_t limit, size_t *n_out,
                     struct txo_error *err)
{
    struct txo_relay *r = rp->relay;
    txo_rows_free(r->rows);
    r->rows = NULL;
    r->n = 0;
    int rc = 0;
    if (rp->archive != NULL) {
        rc = txo__replay_archive_next(rp->archive, &rp->opts.filter, rp->stats.last_id,
                                      rp->stats.to_id, limit, &r->rows, err);
    } else {
        struct txo_param p[16];
        size_t np = chosen_params(rp, rp->stats.last_id, through, (int64_t)limit, p);
        rc = txo_db_query(rp->db, REPLAY_SQL_BATCH, p, np, &r->rows, err);
    }
    if (rc < 0)
        return rc;
    txo__relay_load_batch(r);
    *n_out = r->n;
    if (r->n == 0)
        return 0;
    if (rp->opts.new_keys && (rc = rekey(rp, err)) < 0)
        return rc;
    char what[96];
    snprintf(what, sizeof(what), "replay %s", rp->name);
    if (txo__relay_publish_settled(r, &rp->opts.retry, what, wait_backoff, rp) != 0)
        return txo_error_set(err, TXO_ECANCELED,
                             "replay %s: stopped while the publisher failed; the batch from id "
                             "%" PRId64 " is published again at the next run",
                             rp->name, r->msgs[0].id);
    return first_failure(r, err);
}

static int checkpoint(struct txo_replay *rp, int64_t last_id, size_t n, bool finished,
                      struct txo_error *err)
{
    struct txo_param p[] = {txo_p_i64(last_id), txo_p_i64((int64_t)n), txo_p_i64(finished),
                            txo_p_str(rp->name)};
    int rc = txo_db_exec(rp->db, REPLAY_SQL_CHECKPOINT, p, TXO_ARRAY_LEN(p), NULL, err);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&rp->mu);
    rp->stats.last_id = last_id;
    rp->stats.replayed += n;
    rp->stats.this_run += n;
    rp->stats.finished = finished;
    pthread_mutex_unlock(&rp->mu);
    return 0;
}

int txo_replay_run(struct txo_replay *rp, struct txo_error *err)
{
    int rc = 0;
    if (rp->opts.archive_dir != NULL && rp->archive == NULL)
        rc = txo__replay_archive_open(rp->opts.archive_dir, &rp->opts.filter, &rp->archive, err);
    if (rc == 0)
        rc = start(rp, err);
    if (rc < 0 || rp->stats.finished)
        return rc;
    int64_t through = 0;
    rc = txo_binlog_published_through(rp->db, &through, err);
    if (rc < 0)
        return rc;
    if (rp->opts.count && rp->archive == NULL) {
        struct txo_param p[16];
        int64_t from = rp->opts.filter.from_id > 0 ? rp->opts.filter.from_id - 1 : 0;
        size_t np = chosen_params(rp, from, through, 0, p);
        int64_t total = 0;
        rc = query_i64(rp->db, REPLAY_SQL_COUNT, p, np, &total, err);
        if (rc < 0)
            return rc;
        pthread_mutex_lock(&rp->mu);
        rp->stats.total = (uint64_t)total;
        pthread_mutex_unlock(&rp->mu);
    }
    /* Throttled: batches of a tenth of a second's events, each followed by its share of time. */
    size_t limit = rp->opts.batch_size;
    if (rp->opts.rate > 0 && rp->opts.rate / 10 < (double)limit)
        limit = rp->opts.rate / 10 >= 1 ? (size_t)(rp->opts.rate / 10) : 1;
    int64_t t0 = txo_monotonic_us();
    uint64_t sent = 0;
    while (!txo__waiter_stopped(&rp->pause)) {
        size_t n = 0;
        rc = one_batch(rp, through, limit, &n, err);
        if (rc == TXO_ECANCELED) { /* stopped while the publisher failed: a stop like any */
            rc = 0;
            break;
        }
        if (rc < 0)
            break;
        /* The batch's last id (a retry may have reordered its messages); a short batch ends
         * the range. */
        int64_t last = n < limit ? rp->stats.to_id : 0;
        for (size_t i = 0; i < n && n == limit; i++)
            if (rp->relay->msgs[i].id > last)
                last = rp->relay->msgs[i].id;
        rc = checkpoint(rp, last, n, n < limit, err);
        if (rc < 0 || n < limit)
            break;
        sent += n;
        if (rp->opts.rate > 0) {
            int64_t due_us = t0 + (int64_t)((double)sent * 1e6 / rp->opts.rate);
            int64_t wait_ms = (due_us - txo_monotonic_us()) / 1000;
            if (wait_ms > 0)
                (void)txo__waiter_wait(&rp->pause, wait_ms, false);
        }
    }
    txo_rows_free(rp->relay->rows);
    rp->relay->rows = NULL;
    rp->relay->n = 0;
    free_keys(rp);
    return rc;
}
