#include "core/common.h"

/*
 * Shard membership: which relay publishes which aggregates.
 *
 * The problem. Per-aggregate order needs one publisher per aggregate at a time, and full
 * speed needs that publisher to take many events of an aggregate per batch without asking,
 * event by event, whether an earlier one is still in flight elsewhere. Any number of relays
 * may run, join, leave, die or hang.
 *
 * The shape, like a consumer group's partitions. outbox_events.shard maps each aggregate to
 * one of 64 shards. outbox_shards holds one row per shard with its holder and lease. Each
 * relay is a member (outbox_relays); every tick (a quarter of the lease) a member renews its
 * hold, computes its fair share (shards / live members, rounded up), gives back shards above
 * it, and takes free or expired ones below it. A new member therefore gets its share within
 * about two ticks (the others give back at their tick, it takes at its next); a member that
 * stops gives its shards back at once (txo__shards_leave); one that dies or hangs loses them
 * when its lease expires, and its live members count drops at the same moment.
 *
 * The fence. Every ordered claim first share-locks its member's valid shards
 * (RELAY_SHARD_SQL_HOLD) and claims only rows of those shards, in the same transaction; a
 * takeover locks the shard row exclusively, so it waits for a claim in progress to commit, and
 * then returns to PENDING every event of the shard still in flight under an earlier holder,
 * clearing its lock token. The earlier holder, if it is only slow, notices at its next claim
 * (its hold is gone, it claims nothing there) and its mark of the batch in flight changes
 * nothing (fenced by the token). What it may still send before noticing is a copy of events the
 * new holder publishes again from the start, in order: duplicates for the broker's or the
 * inbox's de-duplication, never a later event ahead of an earlier one.
 *
 * Thread-safety: one struct per relay, used by the relay's thread.
 */

#include "relay/shard_sql.h"
#include "relay/shards.h"

#define FORGET_EVERY_MS 60000 /* how often a member deletes the rows of long-gone members */

void txo__shards_init(struct txo__shards *s, const char *relay_id, int64_t lease_ms)
{
    memset(s, 0, sizeof(*s));
    txo__lease_token(s->member, sizeof(s->member), relay_id);
    s->lease_ms = lease_ms > 0 ? lease_ms : 1;
    s->tick_ms = s->lease_ms / 4 > 0 ? s->lease_ms / 4 : 1;
    txo__lease_in_init(&s->take, RELAY_SHARD_SQL_TAKE_IN);
    txo__lease_in_init(&s->reclaim, RELAY_SHARD_SQL_RECLAIM_IN);
}

void txo__shards_release(struct txo__shards *s)
{
    if (s == NULL)
        return;
    txo__lease_in_release(&s->take);
    txo__lease_in_release(&s->reclaim);
}

struct tick {
    struct txo__shards *s;
    unsigned owned, live, total;
    uint64_t taken, reclaimed;
};

/* Runs sql (one parameter p) whose rows are shard numbers, into out[0..*n). */
static int read_shards(struct txo_tx *tx, const char *sql, struct txo_param p, int64_t *out,
                       size_t *n, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    *n = 0;
    int rc = txo_tx_query(tx, sql, &p, 1, &rows, err);
    if (rc < 0)
        return rc;
    size_t count = txo_rows_count(rows);
    if (count > TXO__SHARDS_MAX)
        count = TXO__SHARDS_MAX; /* outbox_shards has at most that many rows */
    for (size_t i = 0; i < count; i++)
        out[i] = txo_rows_i64(rows, i, 0);
    txo_rows_free(rows);
    *n = count;
    return 0;
}

int txo__shards_hold(struct txo_tx *tx, const struct txo__shards *s, int64_t *held, size_t *n,
                     struct txo_error *err)
{
    return read_shards(tx, RELAY_SHARD_SQL_HOLD, txo_p_str(s->member), held, n, err);
}

/* Takes up to want free shards and reclaims what earlier holders left in flight in them. */
static int take_free(struct txo_tx *tx, struct tick *t, unsigned want, struct txo_error *err)
{
    struct txo__shards *s = t->s;
    size_t n = 0;
    int rc = read_shards(tx, RELAY_SHARD_SQL_FREE, txo_p_i64(want), s->ids, &n, err);
    if (rc < 0 || n == 0)
        return rc;
    uint64_t taken = 0;
    s->params[0] = txo_p_str(s->member);
    s->params[1] = txo_p_i64(s->lease_ms * 1000);
    rc = txo__lease_exec_in(tx, &s->take, s->params, TXO_ARRAY_LEN(s->params), 2, s->ids, n, &taken,
                            err);
    if (rc < 0 || taken == 0)
        return rc;
    s->params[0] = txo_p_str(s->member);
    rc = txo__lease_exec_in(tx, &s->reclaim, s->params, TXO_ARRAY_LEN(s->params), 1, s->ids, n,
                            &t->reclaimed, err);
    if (rc < 0)
        return rc;
    t->taken = taken;
    t->owned += (unsigned)taken;
    return 0;
}

static int tick_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct tick *t = arg;
    struct txo__shards *s = t->s;
    t->owned = t->live = t->total = 0;
    t->taken = t->reclaimed = 0;

    struct txo_param hb[] = {txo_p_str(s->member), txo_p_i64(s->lease_ms * 1000)};
    int rc = txo_tx_exec(tx, RELAY_SHARD_SQL_HEARTBEAT, hb, TXO_ARRAY_LEN(hb), NULL, err);
    if (rc < 0)
        return rc;
    struct txo_rows *rows = NULL;
    rc = txo_tx_query(tx, RELAY_SHARD_SQL_CENSUS, NULL, 0, &rows, err);
    if (rc < 0)
        return rc;
    int64_t live = txo_rows_count(rows) == 1 ? txo_rows_i64(rows, 0, 0) : 0;
    int64_t total = txo_rows_count(rows) == 1 ? txo_rows_i64(rows, 0, 1) : 0;
    txo_rows_free(rows);
    if (total <= 0 || total > TXO__SHARDS_MAX)
        return txo_error_set(err, TXO_ECONFIG,
                             "outbox_shards has %" PRId64
                             " rows, expected 1..%d: run `txo migrate` "
                             "(or `txo migrate --only outbox`)",
                             total, TXO__SHARDS_MAX);
    t->total = (unsigned)total;
    t->live = live > 0 ? (unsigned)live : 1; /* this member's own row counts, even on a skew */

    struct txo_exec_result res = {0};
    struct txo_param renew[] = {txo_p_i64(s->lease_ms * 1000), txo_p_str(s->member)};
    rc = txo_tx_exec(tx, RELAY_SHARD_SQL_RENEW, renew, TXO_ARRAY_LEN(renew), &res, err);
    if (rc < 0)
        return rc;
    t->owned = (unsigned)res.affected_rows;

    unsigned share = (t->total + t->live - 1) / t->live;
    if (t->owned > share) {
        struct txo_param rel[] = {txo_p_str(s->member), txo_p_i64(t->owned - share)};
        rc = txo_tx_exec(tx, RELAY_SHARD_SQL_RELEASE, rel, TXO_ARRAY_LEN(rel), &res, err);
        if (rc < 0)
            return rc;
        t->owned -= (unsigned)res.affected_rows;
    } else if (t->owned < share) {
        rc = take_free(tx, t, share - t->owned, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int txo__shards_tick(struct txo_db *db, struct txo__shards *s, bool force, struct txo_error *err)
{
    int64_t now = txo_monotonic_ms();
    if (!force && s->joined && now < s->next_tick_ms)
        return 0;
    struct tick t = {.s = s};
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, tick_tx, &t, err);
    if (rc < 0) {
        txo_error_wrap(err, "relay member %s: renewing its shards", s->member);
        /* Try again soon; the hold lapses by itself if this goes on for a lease. */
        s->next_tick_ms = now + (s->tick_ms < 1000 ? s->tick_ms : 1000);
        return rc;
    }
    bool moved = !s->joined || t.owned != s->owned || t.taken > 0;
    if (moved)
        TXO_LOG(TXO_LOG_INFO, "relay", "shards rebalanced", TXO_KV_STR("member", s->member),
                TXO_KV_U64("shards", t.owned), TXO_KV_U64("of", t.total),
                TXO_KV_U64("members", t.live), TXO_KV_U64("taken", t.taken),
                TXO_KV_U64("reclaimed", t.reclaimed));
    s->joined = true;
    s->owned = t.owned;
    s->live = t.live;
    s->total = t.total;
    s->taken += t.taken;
    s->reclaimed_events += t.reclaimed;
    s->next_tick_ms = now + s->tick_ms;
    if (now - s->forgot_ms >= FORGET_EVERY_MS) {
        s->forgot_ms = now;
        struct txo_error e;
        txo_error_init(&e);
        if (txo_db_exec(db, RELAY_SHARD_SQL_FORGET, NULL, 0, NULL, &e) < 0)
            TXO_LOG(TXO_LOG_DEBUG, "relay", "forgetting members gone for an hour failed",
                    TXO_KV_STR("error", e.msg));
    }
    return 0;
}

static int leave_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct txo__shards *s = arg;
    struct txo_param m = txo_p_str(s->member);
    int rc = txo_tx_exec(tx, RELAY_SHARD_SQL_LEAVE_SHARDS, &m, 1, NULL, err);
    if (rc < 0)
        return rc;
    return txo_tx_exec(tx, RELAY_SHARD_SQL_LEAVE_MEMBER, &m, 1, NULL, err);
}

void txo__shards_leave(struct txo_db *db, struct txo__shards *s)
{
    if (!s->joined)
        return;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_transact(db, TXO_ISO_READ_COMMITTED, leave_tx, s, &err) < 0)
        TXO_LOG(TXO_LOG_WARN, "relay",
                "could not give back the shards; others take them when the hold expires",
                TXO_KV_STR("member", s->member), TXO_KV_STR("error", err.msg));
    s->joined = false;
    s->owned = 0;
}
