#include "core/common.h"

/*
 * The outbox relay: moves committed events from outbox_events to a
 * publisher, at least once.
 *
 * One cycle, txo_relay_run_once():
 *   reclaim  expired leases back to PENDING (at most once per max(1, lease_s / 4) seconds on
 *            the monotonic clock, and always on the first cycle);
 *   claim    one short READ COMMITTED transaction marks up to batch_size due rows PROCESSING
 *            under a fresh lock token "<relay_id>:<uuid v4>" with a lease (skip-locked or
 *            update-limit: the lease passes of src/queue/lease.c over the statements of
 *            relay_sql.h). It starts at the relay's claim cursor, just after
 *            the last row of its previous full batch, so it does not step over the
 *            delete-marked index entries that earlier claims left at the start of the PENDING
 *            range; it scans from the start when the cursor finds nothing, after a short
 *            batch, after a reclaim and at least every CLAIM_RESCAN_MS, so rows committed
 *            late behind the cursor wait at most about a second;
 *   publish  the batch through the publisher, with no transaction open and no row lock held;
 *   mark     one transaction: PUBLISHED for acknowledged rows, PENDING + backoff or FAILED +
 *            dead letter for failed ones. Every statement is fenced by the token, so a relay
 *            whose lease expired meanwhile changes nothing (counted in stats.fenced).
 * In claim mode TRANSACTION (txo/relay.h) a cycle is one transaction instead: the claim's
 * skip-locked SELECT alone, publish with the rows locked and still PENDING, mark with the
 * RELAY_SQL_HELD_* statements, commit (held_tx); a relay in that mode claims its first batch
 * after start, and the one after meeting a suspect, with a lease, as above.
 * A crash between claim and mark leaves rows PROCESSING until their lease expires (a held
 * claim: rolled back, due again at once); any relay then reclaims and publishes them again. That is
 * the at-least-once guarantee: consumers de-duplicate on the idempotency key.
 *
 * Memory: everything a batch needs is allocated once in txo_relay_new() (messages, results,
 * error slots, ids, bound parameters); the strings of a batch live in the one buffered result
 * of the claim query (struct txo_rows), which the messages point into and which is freed when
 * the batch is marked. The IN-list statements are built once per power-of-two size.
 *
 * Files: this one runs the cycle (claim, mark, suspects, the run loop); relay_setup.c the
 * options, txo_relay_new()/free() and the stats; relay_publish.c hands a batch to the publisher
 * in per-aggregate order; shards.c the shard membership; relay_parked.c the parked list.
 *
 * Thread-safety: a relay is driven by one thread. txo_relay_stop() only stores to a lock-free
 * atomic and writes to an eventfd (core/waiter.h), so it is safe from any thread and from a
 * signal handler; the stats are atomics too,
 * so another thread may read them while the relay runs.
 */

#include "relay/relay_internal.h"
#include "relay/relay_sql.h"

/*
 * The claim's lease passes (src/queue/lease.c): from the start of the due PENDING range of
 * idx_outbox_due, and from the relay's claim cursor on; each unordered and ordered by
 * aggregate over every shard (passes[ordered][after_cursor]). An ordered relay that holds only
 * some shards uses the passes shard_pass() builds from the same statements with its shards.
 */
static const struct txo__lease_pass passes[2][2] = {
    [0][0] =
        {
            .select_locked = RELAY_SQL_CLAIM_SELECT_SKIP_LOCKED,
            .mark_by_id_in = RELAY_SQL_CLAIM_BY_ID_IN,
            .update_limit = RELAY_SQL_CLAIM_UPDATE_LIMIT,
            .select_by_token = RELAY_SQL_CLAIM_SELECT_BY_TOKEN,
            .id_col = COL_ID,
        },
    [0][1] =
        {
            .select_locked = RELAY_SQL_CLAIM_SELECT_SKIP_LOCKED_AFTER,
            .mark_by_id_in = RELAY_SQL_CLAIM_BY_ID_IN,
            .update_limit = RELAY_SQL_CLAIM_UPDATE_LIMIT_AFTER,
            .select_by_token = RELAY_SQL_CLAIM_SELECT_BY_TOKEN_AFTER,
            .id_col = COL_ID,
        },
    [1][0] =
        {
            .select_locked = RELAY_SQL_CLAIM_SELECT_ORDERED,
            .mark_by_id_in = RELAY_SQL_ORDERED_CLAIM_BY_ID_IN,
            .update_limit = RELAY_SQL_CLAIM_UPDATE_LIMIT_ORDERED,
            .select_by_token = RELAY_SQL_CLAIM_SELECT_BY_TOKEN,
            .id_col = COL_ID,
        },
    [1][1] =
        {
            .select_locked = RELAY_SQL_CLAIM_SELECT_ORDERED_AFTER,
            .mark_by_id_in = RELAY_SQL_ORDERED_CLAIM_BY_ID_IN,
            .update_limit = RELAY_SQL_CLAIM_UPDATE_LIMIT_ORDERED_AFTER,
            .select_by_token = RELAY_SQL_CLAIM_SELECT_BY_TOKEN_AFTER,
            .id_col = COL_ID,
        },
};

/* Adds n to counter c and to its metric m (when there is one). */
static void count_metric(_Atomic uint64_t *c, struct txo_metric *m, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
    if (m != NULL && n > 0)
        txo_metric_add(m, NULL, (double)n);
}

static void count(_Atomic uint64_t *counter, uint64_t n)
{
    atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

/*
 * Runs statement s with the `fixed` parameters already in r->params[0..fixed) followed by the
 * ids (txo__lease_exec_in()).
 */
static int exec_in(struct txo_tx *tx, struct txo_relay *r, enum in_stmt s, size_t fixed,
                   const int64_t *ids, size_t n, uint64_t *affected, struct txo_error *err)
{
    return txo__lease_exec_in(tx, &r->in[s], r->params, r->params_cap, fixed, ids, n, affected,
                              err);
}

/*
 * The parameters that narrow a claim pass into p: the held shards when the relay holds only
 * some (padded like any IN list, the last repeated), then the cursor of RELAY_SQL__AFTER_CURSOR
 * when after_cursor. Returns how many (at most RANGE_PARAMS_MAX).
 */
static size_t range_params(const struct txo_relay *r, bool after_cursor, struct txo_param *p)
{
    size_t n = 0;
    if (r->ordered && r->n_held < r->shards.total) {
        size_t padded = txo_sql_in_list_size(r->n_held);
        for (size_t i = 0; i < padded; i++)
            p[n++] = txo_p_i64(r->held[i < r->n_held ? i : r->n_held - 1]);
    }
    if (after_cursor) {
        p[n++] = txo_p_str(r->cursor_at);
        p[n++] = txo_p_str(r->cursor_at);
        p[n++] = txo_p_i64(r->cursor_id);
    }
    return n;
}

static size_t shard_level(size_t padded)
{
    size_t level = 0;
    while (((size_t)1 << level) < padded)
        level++;
    return level;
}

/*
 * The claim pass for this claim: the static ones, or for an ordered relay that holds only some
 * shards, the ordered statements with a shard list of its padded size (built on first use,
 * kept until the relay is freed). NULL when out of memory.
 */
static const struct txo__lease_pass *claim_pass(struct txo_relay *r, bool after_cursor)
{
    if (!r->ordered || r->n_held >= r->shards.total)
        return &passes[r->ordered][after_cursor];
    size_t padded = txo_sql_in_list_size(r->n_held);
    struct shard_pass *sp = &r->shard_passes[shard_level(padded)][after_cursor];
    if (sp->sql[0] == NULL) {
        sp->sql[0] =
            txo_sql_in_list(RELAY_SQL_ORDERED_SELECT_HEAD RELAY_SQL_ORDERED_SHARD_IN, padded,
                            after_cursor ? " " RELAY_SQL_ORDERED_SELECT_TAIL_AFTER
                                         : " " RELAY_SQL_ORDERED_SELECT_TAIL);
        sp->sql[1] =
            txo_sql_in_list(RELAY_SQL_ORDERED_UPDATE_HEAD RELAY_SQL_ORDERED_SHARD_IN, padded,
                            after_cursor ? " " RELAY_SQL_ORDERED_UPDATE_TAIL_AFTER
                                         : " " RELAY_SQL_ORDERED_UPDATE_TAIL);
        sp->sql[2] =
            txo_sql_in_list(RELAY_SQL_ORDERED_BY_TOKEN_HEAD RELAY_SQL_ORDERED_SHARD_IN, padded,
                            after_cursor ? " " RELAY_SQL_ORDERED_BY_TOKEN_TAIL_AFTER
                                         : " " RELAY_SQL_ORDERED_BY_TOKEN_TAIL);
        if (sp->sql[0] == NULL || sp->sql[1] == NULL || sp->sql[2] == NULL) {
            for (size_t k = 0; k < 3; k++) {
                txo_free(sp->sql[k]);
                sp->sql[k] = NULL;
            }
            return NULL;
        }
        sp->pass = (struct txo__lease_pass){
            .select_locked = sp->sql[0],
            .mark_by_id_in = RELAY_SQL_ORDERED_CLAIM_BY_ID_IN,
            .update_limit = sp->sql[1],
            .select_by_token = sp->sql[2],
            .id_col = COL_ID,
        };
    }
    return &sp->pass;
}

/*
 * Ordered relays: share-locks this relay's valid shard holding for the rest of the claim
 * transaction (RELAY_SHARD_SQL_HOLD) into r->held[0..r->n_held); *held is false when it holds
 * none (the claim then takes nothing). Always true for unordered relays.
 */
static int hold_shards(struct txo_tx *tx, struct txo_relay *r, bool *held, struct txo_error *err)
{
    *held = true;
    if (!r->ordered)
        return 0;
    int rc = txo__shards_hold(tx, &r->shards, r->held, &r->n_held, err);
    *held = rc == 0 && r->n_held > 0;
    return rc;
}

/*
 * The claim transaction: a lease pass from the relay's cursor when the claim starts there,
 * and one from the start of the PENDING range when it does not or the first found nothing.
 */
static int claim_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct txo_relay *r = arg;
    txo_rows_free(r->rows); /* a previous attempt of this transaction */
    r->rows = NULL;
    r->claimed_after_cursor = false;

    bool held = false;
    int rc = hold_shards(tx, r, &held, err);
    if (rc < 0 || !held)
        return rc;
    struct txo_param set[] = {txo_p_str(r->token), txo_p_i64(r->opts.lease_s)};
    struct txo_param range[RANGE_PARAMS_MAX];
    struct txo__lease_claim c = {
        .strategy = r->claim,
        .token = r->token,
        .set = set,
        .n_set = TXO_ARRAY_LEN(set),
        .limit = r->claim_limit,
        .mark_in = &r->in[r->ordered ? IN_ORDERED_CLAIM_BY_ID : IN_CLAIM_BY_ID],
        .ids = r->ids,
        .params = r->params,
        .params_cap = r->params_cap,
    };
    uint64_t marked = 0;
    /* From the cursor when the claim starts there; from the start of the range when it does
     * not, or when the cursor found nothing. */
    for (int after = r->claim_after_cursor; after >= 0; after--) {
        txo_rows_free(r->rows);
        r->rows = NULL;
        const struct txo__lease_pass *pass = claim_pass(r, after != 0);
        if (pass == NULL)
            return txo_error_set(err, TXO_ENOMEM, "relay: out of memory for a claim statement");
        c.where = range;
        c.n_where = range_params(r, after != 0, range);
        rc = txo__lease_claim(tx, pass, &c, &r->rows, &marked, err);
        if (rc < 0)
            return rc;
        r->claimed_after_cursor = after != 0 && (marked > 0 || txo_rows_count(r->rows) > 0);
        if (after == 0 || r->claimed_after_cursor)
            break;
    }
    size_t n = txo_rows_count(r->rows);
    if (r->ordered && r->claim == TXO_CLAIM_SKIP_LOCKED && marked != n) {
        /* A row changed between the snapshot and the mark: claim nothing this cycle rather
         * than a batch with a hole in an aggregate. */
        r->claim_raced = true;
        return txo_error_set(err, TXO_ECONFLICT,
                             "relay %s: %zu rows read, %" PRIu64 " still PENDING when marked",
                             r->relay_id, n, marked);
    }
    if (r->claim == TXO_CLAIM_SKIP_LOCKED && marked != n)
        TXO_LOG(TXO_LOG_WARN, "relay", "claim marked fewer rows than it locked",
                TXO_KV_STR("relay_id", r->relay_id), TXO_KV_U64("locked", n),
                TXO_KV_U64("marked", marked));
    return 0;
}

/*
 * Moves the claim cursor after a claim of n rows: to the last row of a full batch; a short
 * batch clears it, so the next claim scans the PENDING range from its start.
 */
static void advance_cursor(struct txo_relay *r, size_t n)
{
    r->cursor_set = false;
    /*
     * Ordered relays scan from the start every time: rows behind a cursor (committed late,
     * held back unpublished, released) could be earlier events of an aggregate whose later
     * events lie after it, and a claim from the cursor would take those first.
     */
    if (r->ordered || n == 0 || n < r->opts.batch_size)
        return;
    size_t len = 0;
    const char *at = txo_rows_str(r->rows, n - 1, COL_NEXT_ATTEMPT_AT, &len);
    if (at == NULL || len == 0 || len >= sizeof(r->cursor_at))
        return; /* cannot happen for a DATETIME(6); without a cursor the claim still works */
    memcpy(r->cursor_at, at, len + 1);
    r->cursor_id = txo_rows_i64(r->rows, n - 1, COL_ID);
    r->cursor_set = true;
}

/* Claims a batch into r->msgs[0..r->n). */
static int claim(struct txo_relay *r, struct txo_error *err)
{
    r->n = 0;
    txo__lease_token(r->token, sizeof(r->token), r->relay_id);
    int64_t now = txo_monotonic_ms();
    r->claim_after_cursor = r->cursor_set && now - r->last_full_scan_ms < CLAIM_RESCAN_MS;
    r->claim_raced = false;
    int rc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, claim_tx, r, err);
    if (rc < 0 && r->claim_raced) {
        TXO_LOG(TXO_LOG_DEBUG, "relay", "claim rolled back, trying again next cycle",
                TXO_KV_STR("error", err != NULL ? err->msg : ""));
        txo_rows_free(r->rows);
        r->rows = NULL;
        r->cursor_set = false;
        return 0;
    }
    if (rc < 0) {
        txo_error_wrap(err, "relay %s: claim (%s)", r->relay_id, txo_claim_strategy_name(r->claim));
        return rc;
    }
    if (!r->claimed_after_cursor)
        r->last_full_scan_ms = now;
    txo__relay_load_batch(r);
    return 0;
}

/* The text columns of a claimed row, as a message carries them. */
static const struct {
    enum claim_col col;
    const char *name;
} text_cols[] = {
    {COL_AGGREGATE_TYPE, "aggregate_type"},   {COL_AGGREGATE_ID, "aggregate_id"},
    {COL_EVENT_TYPE, "event_type"},           {COL_PAYLOAD, "payload"},
    {COL_IDEMPOTENCY_KEY, "idempotency_key"},
};

/*
 * The name of the first text column of row i that holds a NUL byte (*at: its offset), or
 * NULL. A message's strings end at their first NUL (txo/publisher.h), so such a column, which
 * another application can store with raw SQL, would be published cut, as another value; the
 * relay refuses the event instead (relay_publish.c: TXO_EINVAL, dead-lettered, never sent).
 */
static const char *first_nul_column(const struct txo_rows *rows, size_t i, size_t *at)
{
    for (size_t k = 0; k < TXO_ARRAY_LEN(text_cols); k++) {
        size_t len = 0;
        const char *v = txo_rows_str(rows, i, text_cols[k].col, &len);
        const char *nul = v != NULL ? memchr(v, '\0', len) : NULL;
        if (nul != NULL) {
            *at = (size_t)(nul - v);
            return text_cols[k].name;
        }
    }
    return NULL;
}

/* Points r->msgs[0..r->n) into the claim's rows and moves the cursor. */
void txo__relay_load_batch(struct txo_relay *r)
{
    size_t n = r->rows != NULL ? txo_rows_count(r->rows) : 0;
    if (n > r->opts.batch_size) {
        /* Cannot happen unless a token was reused; never publish more than we have room for. */
        TXO_LOG(TXO_LOG_ERROR, "relay", "claim returned more rows than the batch holds",
                TXO_KV_U64("rows", n), TXO_KV_U64("batch_size", r->opts.batch_size),
                TXO_KV_STR("token", r->token));
        n = r->opts.batch_size;
    }
    for (size_t i = 0; i < n; i++) {
        struct txo_outbox_message *m = &r->msgs[i];
        const struct txo_rows *rows = r->rows;
        m->id = txo_rows_i64(rows, i, COL_ID);
        m->aggregate_type = txo_rows_str(rows, i, COL_AGGREGATE_TYPE, NULL);
        m->aggregate_id = txo_rows_str(rows, i, COL_AGGREGATE_ID, NULL);
        m->event_type = txo_rows_str(rows, i, COL_EVENT_TYPE, NULL);
        m->payload = txo_rows_str(rows, i, COL_PAYLOAD, &m->payload_len);
        m->idempotency_key = txo_rows_str(rows, i, COL_IDEMPOTENCY_KEY, NULL);
        m->created_at =
            txo__text_rfc3339(txo_rows_str(rows, i, COL_CREATED_AT, NULL), r->created_at[i]);
        int64_t expiries = txo_rows_i64(rows, i, COL_LEASE_EXPIRIES);
        r->entries[i].expiries = expiries > 0 ? expiries : 0;
        r->entries[i].had_error = txo_rows_i64(rows, i, COL_HAD_ERROR) != 0;
        r->entries[i].agg = 0;
        int64_t attempts = txo_rows_i64(rows, i, COL_ATTEMPTS);
        m->attempt = attempts >= 0 && attempts < INT32_MAX ? (int)attempts + 1 : 1;
        bool has_sequence = !txo_rows_is_null(rows, i, COL_SEQUENCE) &&
                            !txo_rows_is_null(rows, i, COL_PREV_SEQUENCE);
        int64_t seq = has_sequence ? txo_rows_i64(rows, i, COL_SEQUENCE) : 0;
        int64_t prev = has_sequence ? txo_rows_i64(rows, i, COL_PREV_SEQUENCE) : 0;
        m->sequence = seq > 0 ? (uint64_t)seq : 0;
        m->prev_sequence = seq > 0 && prev > 0 ? (uint64_t)prev : 0;
        txo__relay_load_trace(m, rows, i, COL_TRACEPARENT, COL_TRACESTATE);
        r->entries[i].nul_col = first_nul_column(rows, i, &r->entries[i].nul_at);
    }
    advance_cursor(r, n);
    r->n = n;
    if (r->ordered)
        txo__relay_group(r);
}

static bool same_failure(const struct txo_relay *r, size_t a, size_t b)
{
    return r->results[a] == r->results[b] && strcmp(r->errors[a].msg, r->errors[b].msg) == 0;
}

/*
 * Sorts the failed messages into groups with the same error (usually one group), so each group
 * is one UPDATE. Fills fail_order, group_end and fail_ids; returns the number of groups.
 */
static size_t group_failures(struct txo_relay *r, size_t *n_failed)
{
    size_t nf = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (r->results[i] < 0)
            r->fail_order[nf++] = i;
    }
    size_t groups = 0;
    for (size_t start = 0; start < nf; groups++) {
        /* Move every later message with the leader's error right after the group. */
        size_t end = start + 1;
        for (size_t j = end; j < nf; j++) {
            if (same_failure(r, r->fail_order[start], r->fail_order[j])) {
                size_t t = r->fail_order[end];
                r->fail_order[end] = r->fail_order[j];
                r->fail_order[j] = t;
                end++;
            }
        }
        r->group_end[groups] = end;
        start = end;
    }
    for (size_t k = 0; k < nf; k++)
        r->fail_ids[k] = r->msgs[r->fail_order[k]].id;
    *n_failed = nf;
    return groups;
}

/* "TXO_EPUBLISH: <message>", cut to TXO__LEASE_LAST_ERROR_MAX bytes on a character boundary. */
static void format_last_error(const struct txo_error *e, int code, char *out, size_t cap)
{
    snprintf(out, cap, "%s: %s", txo_err_name(code), e->msg);
    out[txo_utf8_cut(out, strlen(out), TXO__LEASE_LAST_ERROR_MAX)] = '\0';
}

int txo__relay_mark_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct mark_ctx *ctx = arg;
    struct txo_relay *r = ctx->relay;
    uint64_t affected = 0;
    int rc = 0;

    memset(&ctx->res, 0, sizeof(ctx->res));

    /* Held (claim mode TRANSACTION): the rows are still PENDING and locked by this
     * transaction, there is no token. Leased: fenced by the token. */
    size_t tok = ctx->held ? 0 : 1; /* the token parameter, when there is one */
    if (ctx->acked_unmarked) {
        ctx->res.published = ctx->n_published;
    } else if (ctx->n_published > 0) {
        r->params[0] = txo_p_str(r->token);
        rc = exec_in(tx, r, ctx->held ? IN_HELD_PUBLISHED : IN_MARK_PUBLISHED, tok, r->ids,
                     ctx->n_published, &affected, err);
        if (rc < 0)
            return rc;
        ctx->res.published = affected;
        ctx->res.fenced += ctx->n_published - affected;
    }
    if (ctx->n_unpark > 0) {
        rc = exec_in(tx, r, IN_UNPARK, 0, r->unpark_ids, ctx->n_unpark, NULL, err);
        if (rc < 0)
            return rc;
    }
    if (ctx->n_deferred > 0 && !ctx->held) {
        r->params[0] = txo_p_str(r->token);
        rc = exec_in(tx, r, IN_RELEASE, 1, r->defer_ids, ctx->n_deferred, NULL, err);
        if (rc < 0)
            return rc;
    }

    uint64_t failed_updated = 0;
    char last_error[TXO_ERROR_MSG_MAX + 64];
    for (size_t g = 0, start = 0; g < ctx->n_groups; start = r->group_end[g], g++) {
        size_t leader = r->fail_order[start];
        size_t size = r->group_end[g] - start;
        format_last_error(&r->errors[leader], r->results[leader], last_error, sizeof(last_error));
        /* A permanent error (txo/publisher.h) is dead-lettered now: with a limit of one
         * attempt the statement's IF picks FAILED. */
        int64_t max_attempts =
            txo_err_is_transient(r->results[leader]) ? (int64_t)r->opts.max_attempts : 1;
        r->params[0] = txo_p_str(last_error);
        r->params[1] = txo_p_i64(max_attempts);
        r->params[2] = txo_p_i64(r->opts.backoff.max_ms);
        r->params[3] = txo_p_i64(r->opts.backoff.base_ms);
        r->params[4] = txo_p_f64(r->opts.backoff.jitter);
        r->params[5] = txo_p_f64(r->opts.backoff.jitter);
        r->params[6] = txo_p_i64(max_attempts);
        r->params[7] = txo_p_i64(max_attempts);
        r->params[8] = txo_p_str(r->token);
        /* RELAY_SQL_HELD_FAILED_IN takes the first six: no lease columns, no token. */
        rc = ctx->held
                 ? exec_in(tx, r, IN_HELD_FAILED, 6, &r->fail_ids[start], size, &affected, err)
                 : exec_in(tx, r, IN_MARK_FAILED, MARK_FIXED_PARAMS, &r->fail_ids[start], size,
                           &affected, err);
        if (rc < 0)
            return rc;
        failed_updated += affected;
        ctx->res.fenced += size - affected;
    }

    if (ctx->n_failed > 0 && failed_updated > 0) {
        r->params[0] = txo_p_str(r->token);
        rc = exec_in(tx, r, ctx->held ? IN_HELD_DEAD_LETTER : IN_DEAD_LETTER, tok, r->fail_ids,
                     ctx->n_failed, &affected, err);
        if (rc < 0)
            return rc;
        ctx->res.dead_lettered = affected;
        if (affected > 0 && !ctx->held) {
            r->params[0] = txo_p_str(r->token);
            rc = exec_in(tx, r, IN_UNLOCK_FAILED, 1, r->fail_ids, ctx->n_failed, NULL, err);
            if (rc < 0)
                return rc;
        }
    }
    ctx->res.failed_attempts = failed_updated - ctx->res.dead_lettered;
    if (r->ordered && failed_updated > 0) {
        rc = exec_in(tx, r, IN_PARK, 0, r->fail_ids, ctx->n_failed, NULL, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Records the outcome of the published batch on its rows, in one transaction. */
/* Sorts the published batch's outcome into ctx: the acknowledged ids and the failure groups. */
void txo__relay_mark_prepare(struct txo_relay *r, struct mark_ctx *ctx)
{
    ctx->relay = r;
    ctx->n_published = 0;
    ctx->n_deferred = 0;
    ctx->n_unpark = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (r->results[i] == 0) {
            r->ids[ctx->n_published++] = r->msgs[i].id;
            if (r->entries[i].had_error)
                r->unpark_ids[ctx->n_unpark++] = r->msgs[i].id;
        } else if (r->results[i] == RESULT_DEFERRED) {
            r->defer_ids[ctx->n_deferred++] = r->msgs[i].id;
        }
    }
    ctx->n_groups = group_failures(r, &ctx->n_failed);
}

static int mark(struct txo_relay *r, struct txo_error *err)
{
    struct mark_ctx ctx = {.relay = r};
    txo__relay_mark_prepare(r, &ctx);

    /*
     * txo_db_transact() already retries deadlocks, lock wait timeouts and a connection lost
     * before COMMIT. What remains transient is a COMMIT with an unknown outcome: running the
     * fenced mark again is safe (if the first one committed, the second matches no row and is
     * counted as fenced), and finishing the batch now beats republishing it a lease later.
     */
    int rc = 0;
    for (unsigned attempt = 1; attempt <= MARK_ATTEMPTS; attempt++) {
        rc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, txo__relay_mark_tx, &ctx, err);
        if (rc == 0 || !txo_err_is_transient(rc) || attempt == MARK_ATTEMPTS)
            break;
        TXO_LOG(TXO_LOG_WARN, "relay", "marking a batch failed, retrying",
                TXO_KV_STR("relay_id", r->relay_id), TXO_KV_STR("token", r->token),
                TXO_KV_U64("attempt", attempt), TXO_KV_STR("error", txo_err_name(rc)));
        txo_sleep_ms(100 * (int64_t)attempt);
    }
    if (rc < 0) {
        txo_error_wrap(err,
                       "relay %s: marking a batch of %zu (ids %" PRId64 "..%" PRId64
                       "; they are published again when their lease expires)",
                       r->relay_id, r->n, r->msgs[0].id, r->msgs[r->n - 1].id);
        return rc;
    }
    txo__relay_mark_account(r, &ctx);
    return 0;
}

/* Counts a committed mark in the stats and metrics, and logs what an operator should see. */
void txo__relay_mark_account(struct txo_relay *r, const struct mark_ctx *ctx)
{
    if (ctx->res.fenced == 0) /* fenced rows are published again by another relay */
        txo__relay_observe_delays(r);
    count_metric(&r->stats.published, r->metrics.published, ctx->res.published);
    count_metric(&r->stats.failed_attempts, r->metrics.failures, ctx->res.failed_attempts);
    count_metric(&r->stats.dead_lettered, r->metrics.dead_lettered, ctx->res.dead_lettered);
    if (r->metrics.attempts != NULL)
        txo_metric_add(
            r->metrics.attempts, NULL,
            (double)(ctx->res.published + ctx->res.failed_attempts + ctx->res.dead_lettered));
    count(&r->stats.fenced, ctx->res.fenced);
    if (ctx->res.fenced > 0)
        TXO_LOG(TXO_LOG_WARN, "relay",
                "lease lost before marking: rows were reclaimed by another relay and will be "
                "published again",
                TXO_KV_STR("relay_id", r->relay_id), TXO_KV_STR("token", r->token),
                TXO_KV_U64("fenced", ctx->res.fenced), TXO_KV_U64("batch", r->n));
    if (ctx->res.dead_lettered > 0)
        TXO_LOG(TXO_LOG_WARN, "relay",
                "events dead-lettered (a permanent error, or max_attempts used up)",
                TXO_KV_U64("max_attempts", r->opts.max_attempts),
                TXO_KV_STR("relay_id", r->relay_id), TXO_KV_U64("count", ctx->res.dead_lettered),
                TXO_KV_STR("first_error", txo_err_name(r->results[r->fail_order[0]])),
                TXO_KV_STR("first_reason", r->errors[r->fail_order[0]].msg));
    if (ctx->n_failed > 0)
        TXO_LOG(TXO_LOG_DEBUG, "relay", "publish failed", TXO_KV_STR("relay_id", r->relay_id),
                TXO_KV_U64("failed", ctx->n_failed),
                TXO_KV_STR("error", r->errors[r->fail_order[0]].msg));
}

struct poison_ctx {
    struct txo_relay *r;
    char token[TOKEN_MAX + 1];
    uint64_t dead_lettered;
};

/* The reclaim's first transaction: expired leases at the limit become FAILED + dead letter. */
static int poison_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct poison_ctx *p = arg;
    struct txo_relay *r = p->r;
    struct txo_rows *rows = NULL;
    p->dead_lettered = 0;
    struct txo_param sel[] = {txo_p_i64(r->opts.max_lease_expiries),
                              txo_p_i64((int64_t)r->opts.batch_size)};
    int rc = txo_tx_query(tx, RELAY_SQL_RECLAIM_SELECT_POISON, sel, TXO_ARRAY_LEN(sel), &rows, err);
    size_t n = rc == 0 ? txo_rows_count(rows) : 0;
    if (n > r->opts.batch_size)
        n = r->opts.batch_size;
    for (size_t i = 0; i < n; i++)
        r->fail_ids[i] = txo_rows_i64(rows, i, 0);
    txo_rows_free(rows);
    if (rc < 0 || n == 0)
        return rc;
    uint64_t affected = 0;
    r->params[0] = txo_p_str(p->token);
    rc = exec_in(tx, r, IN_RECLAIM_POISON, 1, r->fail_ids, n, &affected, err);
    if (rc < 0 || affected == 0)
        return rc;
    r->params[0] = txo_p_str(p->token);
    rc = exec_in(tx, r, IN_DEAD_LETTER, 1, r->fail_ids, n, &p->dead_lettered, err);
    if (rc < 0)
        return rc;
    r->params[0] = txo_p_str(p->token);
    rc = exec_in(tx, r, IN_UNLOCK_FAILED, 1, r->fail_ids, n, NULL, err);
    if (rc < 0 || !r->ordered)
        return rc;
    return exec_in(tx, r, IN_PARK, 0, r->fail_ids, n, NULL, err);
}

void txo__relay_swap_entries(struct txo_relay *r, size_t i, size_t j)
{
    struct txo_outbox_message m = r->msgs[i];
    r->msgs[i] = r->msgs[j];
    r->msgs[j] = m;
    struct batch_entry e = r->entries[i];
    r->entries[i] = r->entries[j];
    r->entries[j] = e;
}

/*
 * Ordered relays: takes out of the batch every event that follows a suspect of its own
 * aggregate in claim order, keeping the order of the rest, so that nothing of an aggregate is
 * published ahead of its suspect, which goes out alone at the end of the cycle (claim mode
 * TRANSACTION: in the leased cycle after). Their ids go to r->defer_ids[0..returned); they
 * go back to PENDING unchanged (a leased claim releases them, a held one leaves them alone).
 */
static bool stopping(struct txo_relay *r)
{
    return txo__waiter_stopped(&r->pause);
}

static size_t take_out_behind_suspects(struct txo_relay *r)
{
    if (!r->ordered)
        return 0;
    size_t kept = 0, out = 0;
    for (size_t i = 0; i < r->n; i++) {
        uint32_t a = r->entries[i].agg;
        if (r->agg_blocked[a]) {
            r->defer_ids[out++] = r->msgs[i].id;
            continue;
        }
        if (r->entries[i].expiries != 0)
            r->agg_blocked[a] = true; /* "has a suspect" while this runs */
        if (kept != i)
            txo__relay_swap_entries(r, kept, i);
        kept++;
    }
    for (size_t a = 0; a < r->n_aggs; a++)
        r->agg_blocked[a] = false;
    r->n = kept;
    return out;
}

struct release_ctx {
    struct txo_relay *r;
    size_t n;
};

static int release_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct release_ctx *c = arg;
    c->r->params[0] = txo_p_str(c->r->token);
    return exec_in(tx, c->r, IN_RELEASE, 1, c->r->defer_ids, c->n, NULL, err);
}

/* Leased claims: r->defer_ids[0..n) back to PENDING unchanged, in a transaction of its own
 * (events held back behind a suspect, or suspects a stopping relay did not publish). */
static int release_taken_out(struct txo_relay *r, size_t n, struct txo_error *err)
{
    struct release_ctx c = {r, n};
    int rc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, release_tx, &c, err);
    if (rc < 0)
        txo_error_wrap(err, "relay %s: handing back %zu events not published", r->relay_id, n);
    return rc;
}

/* True when suspect a is published after suspect b (see order_suspects). */
static bool suspect_after(const struct txo_relay *r, size_t a, size_t b)
{
    if (r->entries[a].expiries != r->entries[b].expiries)
        return r->entries[a].expiries > r->entries[b].expiries;
    bool ascending = r->entries[a].expiries % 2 == 1;
    return ascending ? r->msgs[a].id > r->msgs[b].id : r->msgs[a].id < r->msgs[b].id;
}

/*
 * Orders the batch for publishing: events whose lease never expired first, in claim order,
 * then the suspects (an earlier lease of theirs expired: maybe a poison event that kills its
 * relay), each to be published and marked alone, fewest expiries first. Among suspects with
 * the same count the direction alternates with the count (odd: ascending id, even:
 * descending): when a poison event killed its relay in the middle of the suspects, the ones
 * after it expire with it, but in the next round it comes after them, so they are published
 * before it kills the relay again and do not reach the limit with it. Returns the number of
 * events that are not suspects.
 */
static size_t order_suspects(struct txo_relay *r)
{
    size_t k = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (r->entries[i].expiries != 0)
            continue;
        for (size_t j = i; j > k; j--) /* stable: move it down past the suspects */
            txo__relay_swap_entries(r, j, j - 1);
        k++;
    }
    for (size_t i = k + 1; i < r->n; i++) {
        for (size_t j = i; j > k && suspect_after(r, j - 1, j); j--)
            txo__relay_swap_entries(r, j, j - 1);
    }
    return k;
}

static int reclaim_if_due(struct txo_relay *r, struct txo_error *err)
{
    if (!txo__lease_reclaim_due(&r->reclaimer, r->opts.lease_s))
        return 0;
    struct poison_ctx p = {.r = r};
    txo__lease_token(p.token, sizeof(p.token), r->relay_id);
    int prc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, poison_tx, &p, err);
    if (prc < 0) {
        txo_error_wrap(err, "relay %s: dead-lettering events whose lease expired %u times",
                       r->relay_id, r->opts.max_lease_expiries);
        return prc;
    }
    if (p.dead_lettered > 0) {
        count(&r->stats.poisoned, p.dead_lettered);
        count_metric(&r->stats.dead_lettered, r->metrics.dead_lettered, p.dead_lettered);
        TXO_LOG(TXO_LOG_ERROR, "relay",
                "dead-lettered poison events: their lease expired max_lease_expiries times (each "
                "time their relay died or hung while publishing them)",
                TXO_KV_U64("max_lease_expiries", r->opts.max_lease_expiries),
                TXO_KV_STR("relay_id", r->relay_id), TXO_KV_U64("count", p.dead_lettered));
    }
    uint64_t reclaimed = 0;
    int rc = txo__lease_reclaim(r->db, &r->reclaimer, r->opts.lease_s, RELAY_SQL_RECLAIM_EXPIRED,
                                RECLAIM_LIMIT, &reclaimed, err);
    if (rc < 0) {
        txo_error_wrap(err, "relay %s: reclaiming expired leases", r->relay_id);
        return rc;
    }
    if (reclaimed > 0) {
        r->cursor_set = false; /* the reclaimed rows lie behind the cursor: scan from the start */
        count(&r->stats.reclaimed, reclaimed);
        TXO_LOG(TXO_LOG_WARN, "relay",
                "reclaimed events whose lease expired; they are published again",
                TXO_KV_STR("relay_id", r->relay_id), TXO_KV_U64("count", reclaimed));
    }
    return 0;
}

/* Publishes r->msgs[0..r->n) and marks the outcome (one batch). */
static int publish_and_mark(struct txo_relay *r, int64_t t_claim, struct txo_error *err)
{
    int64_t t0 = txo_monotonic_us();
    txo__relay_publish(r);
    int64_t t1 = txo_monotonic_us();
    txo_crash_point("relay.after_publish");

    int rc = mark(r, err);
    if (rc < 0)
        return rc;
    count(&r->stats.batches, 1);
    TXO_LOG(TXO_LOG_DEBUG, "relay", "batch", TXO_KV_STR("relay_id", r->relay_id),
            TXO_KV_STR("token", r->token), TXO_KV_U64("size", r->n),
            TXO_KV_I64("first_id", r->msgs[0].id), TXO_KV_I64("claim_us", t0 - t_claim),
            TXO_KV_I64("publish_us", t1 - t0), TXO_KV_I64("mark_us", txo_monotonic_us() - t1));
    return 0;
}

/* ---- claim mode TRANSACTION: claim, publish and mark in one transaction ---- */

struct held_ctx {
    struct txo_relay *r;
    bool published;  /* the batch went to the publisher in this cycle */
    bool retried;    /* and the transaction ran again after that: nothing of it committed */
    size_t suspects; /* claimed events left for a leased cycle (and those behind them) */
    struct mark_ctx mark;
    int64_t t_publish_us, t_mark_us;
};

/*
 * The held claim: the skip-locked SELECT alone, so the rows stay PENDING, locked by tx; from
 * the cursor when the claim starts there, then from the start of the range when that found
 * nothing (as claim_tx).
 */
static int held_claim(struct txo_tx *tx, struct txo_relay *r, struct txo_error *err)
{
    struct txo_param p[RANGE_PARAMS_MAX + 1];
    r->claimed_after_cursor = false;
    bool held = false;
    int rc = hold_shards(tx, r, &held, err);
    if (rc < 0 || !held)
        return rc;
    const struct txo__lease_pass *pass[2] = {claim_pass(r, false), claim_pass(r, true)};
    if (pass[0] == NULL || pass[1] == NULL)
        return txo_error_set(err, TXO_ENOMEM, "relay: out of memory for a claim statement");
    if (r->claim_after_cursor) {
        size_t np = range_params(r, true, p);
        p[np++] = txo_p_i64((int64_t)r->claim_limit);
        rc = txo_tx_query(tx, pass[1]->select_locked, p, np, &r->rows, err);
        if (rc < 0)
            return rc;
        r->claimed_after_cursor = txo_rows_count(r->rows) > 0;
        if (r->claimed_after_cursor)
            return 0;
        txo_rows_free(r->rows);
        r->rows = NULL;
    }
    size_t np = range_params(r, false, p);
    p[np++] = txo_p_i64((int64_t)r->claim_limit);
    return txo_tx_query(tx, pass[0]->select_locked, p, np, &r->rows, err);
}

/*
 * Moves the suspects (an earlier lease of theirs expired) out of r->msgs[0..r->n), keeping
 * the order of the others, and returns how many there were: they are not published while
 * their rows are held, but by the leased cycle that follows, each alone (order_suspects).
 */
static size_t set_aside_suspects(struct txo_relay *r)
{
    size_t k = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (r->entries[i].expiries != 0)
            continue;
        if (k != i)
            txo__relay_swap_entries(r, k, i);
        k++;
    }
    size_t suspects = r->n - k;
    r->n = k;
    return suspects;
}

static int held_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct held_ctx *h = arg;
    struct txo_relay *r = h->r;
    if (h->published) {
        /* txo_db_transact() runs the body again after a deadlock or a connection lost before
         * COMMIT. The first run's marks were rolled back, so its rows are due again and a later
         * cycle claims them: one cycle never publishes a batch twice. */
        h->retried = true;
        return 0;
    }
    txo_rows_free(r->rows);
    r->rows = NULL;
    r->n = 0;
    int rc = held_claim(tx, r, err);
    if (rc < 0)
        return rc;
    txo__relay_load_batch(r);
    h->suspects = take_out_behind_suspects(r);
    h->suspects += set_aside_suspects(r);
    if (r->n == 0)
        return 0;
    h->published = true;
    txo_crash_point("relay.after_claim");
    h->t_publish_us = txo_monotonic_us();
    txo__relay_publish(r);
    txo_crash_point("relay.after_publish");
    h->t_mark_us = txo_monotonic_us();
    txo__relay_mark_prepare(r, &h->mark);
    h->mark.held = true;
    return txo__relay_mark_tx(tx, &h->mark, err);
}

/*
 * One cycle in claim mode TRANSACTION. *total receives the events claimed, suspects included
 * (so that a drain goes on to the leased cycle that publishes them).
 */
static int held_cycle(struct txo_relay *r, size_t *total, struct txo_error *err)
{
    struct held_ctx h = {.r = r};
    *total = 0;
    txo__lease_token(r->token, sizeof(r->token), r->relay_id); /* names the batch in logs */
    int64_t now = txo_monotonic_ms();
    r->claim_after_cursor = r->cursor_set && now - r->last_full_scan_ms < CLAIM_RESCAN_MS;
    int64_t t_claim_us = txo_monotonic_us();
    int rc = txo_db_transact(r->db, TXO_ISO_READ_COMMITTED, held_tx, &h, err);
    if (rc < 0) {
        txo_error_wrap(err, "relay %s: claim, publish and mark in one transaction%s", r->relay_id,
                       h.published ? " (rolled back or unknown: the batch is published again)"
                                   : "");
        return rc;
    }
    if (!r->claimed_after_cursor)
        r->last_full_scan_ms = now;
    if (h.suspects > 0) {
        r->lease_cycle = true;
        r->cursor_set = false; /* the leased claim scans from the start, where they are */
        TXO_LOG(TXO_LOG_INFO, "relay",
                "events whose lease expired before are left to a leased claim",
                TXO_KV_STR("relay_id", r->relay_id), TXO_KV_U64("count", h.suspects));
    }
    *total = r->n + h.suspects;
    if (r->n == 0)
        return 0;
    count(&r->stats.claimed, r->n);
    if (h.retried) {
        TXO_LOG(
            TXO_LOG_WARN, "relay",
            "the transaction of a published batch was rolled back; its events are published again",
            TXO_KV_STR("relay_id", r->relay_id), TXO_KV_U64("batch", r->n));
        return 0;
    }
    txo__relay_mark_account(r, &h.mark);
    count(&r->stats.batches, 1);
    TXO_LOG(TXO_LOG_DEBUG, "relay", "held batch", TXO_KV_STR("relay_id", r->relay_id),
            TXO_KV_U64("size", r->n), TXO_KV_I64("first_id", r->msgs[0].id),
            TXO_KV_I64("claim_us", h.t_publish_us - t_claim_us),
            TXO_KV_I64("publish_us", h.t_mark_us - h.t_publish_us),
            TXO_KV_I64("mark_us", txo_monotonic_us() - h.t_mark_us));
    return 0;
}

/* Tells the breaker how the cycle's publishing went: a batch of total events whose every event
 * failed with a transient error means the broker is failing. */
static void record_outcome(struct txo_relay *r, size_t total)
{
    txo_breaker_record(r->breaker, !(r->cycle_acked == 0 && r->cycle_transient == total));
}

int txo_relay_run_once(struct txo_relay *relay, size_t *claimed, struct txo_error *err)
{
    TXO_ASSERT(relay != NULL);
    struct txo_relay *r = relay;
    if (claimed != NULL)
        *claimed = 0;
    bool breaker_call = false; /* acquired: record the outcome once */

    int rc = reclaim_if_due(r, err);
    if (rc < 0)
        goto out;
    if (r->ordered) {
        rc = txo__relay_tick_shards(r, false, err);
        if (rc < 0 || r->shards.owned == 0)
            goto out;
    }
    /* The breaker: while it is open nothing is claimed, so no event uses an attempt. */
    r->breaker_rejected = false;
    r->breaker_probe = false;
    r->claim_limit = r->opts.batch_size;
    if (r->breaker != NULL) {
        if (txo_breaker_acquire(r->breaker, NULL) < 0) {
            r->breaker_rejected = true;
            goto out;
        }
        breaker_call = true;
        if (txo_breaker_state(r->breaker) == TXO_BREAKER_HALF_OPEN) {
            r->breaker_probe = true;
            if (r->claim_limit > r->opts.breaker_probe_batch)
                r->claim_limit = r->opts.breaker_probe_batch;
        }
    }
    r->cycle_acked = 0;
    r->cycle_transient = 0;
    if (r->mode == TXO_RELAY_CLAIM_TRANSACTION && !r->lease_cycle) {
        size_t total = 0;
        rc = held_cycle(r, &total, err);
        if (rc < 0 || total == 0)
            goto out;
        if (claimed != NULL)
            *claimed = total;
        if (breaker_call && r->n > 0) {
            record_outcome(r, r->n);
            breaker_call = false;
        }
        goto out;
    }
    r->lease_cycle = false;
    int64_t t_claim = txo_monotonic_us();
    rc = claim(r, err);
    if (rc < 0 || r->n == 0) {
        /* Nothing was published: no news about the broker (a probe with nothing to send
         * closes the breaker; the next failing batches open it again). */
        goto out;
    }
    count(&r->stats.claimed, r->n);
    if (claimed != NULL)
        *claimed = r->n;
    txo_crash_point("relay.after_claim");

    size_t taken_out = take_out_behind_suspects(r);
    if (taken_out > 0) {
        rc = release_taken_out(r, taken_out, err);
        if (rc < 0)
            goto out;
    }
    size_t total = r->n;
    size_t plain = order_suspects(r);
    if (plain > 0) {
        r->n = plain;
        rc = publish_and_mark(r, t_claim, err);
        if (rc < 0)
            goto out;
    }
    /* Each suspect alone: a poison event that kills this relay takes only its own lease. */
    if (plain < total)
        TXO_LOG(
            TXO_LOG_WARN, "relay",
            "publishing events one by one: their lease expired before (their relay died or hung)",
            TXO_KV_STR("relay_id", r->relay_id), TXO_KV_U64("count", total - plain),
            TXO_KV_I64("first_id", r->msgs[plain].id));
    for (size_t j = plain; j < total; j++) {
        if (stopping(r)) {
            /* Each one alone can take a publish timeout: a stopping relay hands the rest back
             * (unchanged, no attempt used) rather than keep its shards that long. */
            for (size_t k = j; k < total; k++)
                r->defer_ids[k - j] = r->msgs[k].id;
            rc = release_taken_out(r, total - j, err);
            goto out;
        }
        if (j != 0)
            txo__relay_swap_entries(r, 0, j);
        r->n = 1;
        TXO_LOG(TXO_LOG_DEBUG, "relay", "publishing an event alone",
                TXO_KV_STR("relay_id", r->relay_id), TXO_KV_I64("event_id", r->msgs[0].id),
                TXO_KV_I64("lease_expiries", r->entries[0].expiries));
        rc = publish_and_mark(r, txo_monotonic_us(), err);
        if (rc < 0)
            goto out;
    }
    /* A batch whose every event failed with a transient error: the broker is failing. */
    if (breaker_call) {
        record_outcome(r, total);
        breaker_call = false;
    }
out:
    if (breaker_call) /* a database error: no news about the broker */
        txo_breaker_record(r->breaker, true);
    txo_rows_free(r->rows);
    r->rows = NULL;
    r->n = 0;
    return rc;
}

/* Sleeps ms, returning at once when asked to stop. */
static void sleep_unless_stopped(struct txo_relay *r, int64_t ms)
{
    (void)txo__waiter_wait(&r->pause, ms, false);
}

/* The idle pause: like sleep_unless_stopped, and it also ends as soon as txo_relay_wake() is
 * called (or was, since the last idle pause). */
static void idle(struct txo_relay *r, int64_t ms)
{
    (void)txo__waiter_wait(&r->pause, ms, true);
}

/*
 * A draining relay found nothing to claim: done, unless it is ordered, does not hold every
 * shard, and events it cannot claim are due elsewhere (in shards of a relay that died and
 * whose hold has not lapsed yet, or of another relay): then it waits for them to be published
 * or for their shards to come its way. A database error counts as not drained (the loop
 * retries).
 */
static bool drained(struct txo_relay *r)
{
    if (!r->ordered || r->shards.owned >= r->shards.total)
        return true;
    struct txo_error e;
    txo_error_init(&e);
    struct txo_rows *rows = NULL;
    if (txo_db_query(r->db, RELAY_SQL_ANY_DUE, NULL, 0, &rows, &e) < 0)
        return false;
    bool any = txo_rows_count(rows) == 1 && txo_rows_i64(rows, 0, 0) != 0;
    txo_rows_free(rows);
    return !any;
}

int txo_relay_run(struct txo_relay *relay, struct txo_error *err)
{
    TXO_ASSERT(relay != NULL);
    struct txo_relay *r = relay;
    struct txo_backoff retry = {RETRY_MIN_MS, RETRY_MAX_MS, 0.2};
    unsigned failures = 0;
    int64_t outage_start_ms = 0, outage_logged_ms = 0;

    TXO_LOG(TXO_LOG_INFO, "relay", "relay started", TXO_KV_STR("relay_id", r->relay_id),
            TXO_KV_STR("strategy", txo_claim_strategy_name(r->claim)),
            TXO_KV_STR("mode", txo_relay_claim_mode_name(r->mode)),
            TXO_KV_STR("ordering", txo_relay_ordering_name(r->opts.ordering)),
            TXO_KV_I64("shard_lease_ms", r->ordered ? r->opts.shard_lease_ms : 0),
            TXO_KV_U64("batch_size", r->opts.batch_size), TXO_KV_U64("lease_s", r->opts.lease_s),
            TXO_KV_U64("max_attempts", r->opts.max_attempts),
            TXO_KV_U64("max_lease_expiries", r->opts.max_lease_expiries),
            TXO_KV_U64("breaker_failures", r->opts.breaker_failures),
            TXO_KV_STR("publisher", r->pub->ops->name),
            TXO_KV_STR("in_order", !r->ordered ? "none"
                                   : (r->pub->ops->flags & TXO_PUBLISHER_IN_ORDER) != 0
                                       ? "publisher"
                                       : "waves"),
            TXO_KV_BOOL("drain", r->opts.drain));
    if (r->ordered && r->claim == TXO_CLAIM_UPDATE_LIMIT)
        TXO_LOG(TXO_LOG_INFO, "relay",
                "ordering by aggregate with the update-limit claim: a claim waits for an "
                "uncommitted insert in its range instead of passing it",
                TXO_KV_STR("relay_id", r->relay_id));
    while (!stopping(r)) {
        size_t claimed = 0;
        struct txo_error e;
        txo_error_init(&e);
        int rc = txo_relay_run_once(r, &claimed, &e);
        if (rc < 0) {
            if (!txo_err_is_transient(rc)) {
                if (err != NULL)
                    *err = e;
                return rc;
            }
            /* A database outage: one line when it starts, a reminder now and then, one when
             * it ends; not one per retry. */
            int64_t now = txo_monotonic_ms();
            failures++;
            if (failures == 1) {
                outage_start_ms = now;
                outage_logged_ms = now;
                TXO_LOG(TXO_LOG_WARN, "relay", "database unavailable, retrying with backoff",
                        TXO_KV_STR("relay_id", r->relay_id), TXO_KV_STR("error", txo_err_name(rc)),
                        TXO_KV_STR("reason", e.msg));
            } else if (now - outage_logged_ms >= OUTAGE_REMINDER_MS) {
                outage_logged_ms = now;
                TXO_LOG(TXO_LOG_WARN, "relay", "database still unavailable",
                        TXO_KV_STR("relay_id", r->relay_id),
                        TXO_KV_I64("for_s", (now - outage_start_ms) / 1000),
                        TXO_KV_U64("attempts", failures), TXO_KV_STR("error", txo_err_name(rc)),
                        TXO_KV_STR("reason", e.msg));
            }
            sleep_unless_stopped(r, txo_backoff_delay_ms(&retry, failures, txo_rand01()));
            continue;
        }
        if (failures > 0)
            TXO_LOG(TXO_LOG_WARN, "relay", "database back", TXO_KV_STR("relay_id", r->relay_id),
                    TXO_KV_F64("after_s", (double)(txo_monotonic_ms() - outage_start_ms) / 1000.0),
                    TXO_KV_U64("attempts", failures));
        failures = 0;
        if (claimed == 0) {
            /* While the breaker is open, nothing is claimed but events may be due. */
            if (r->opts.drain && !r->breaker_rejected && drained(r))
                return 0;
            idle(r, r->opts.idle_sleep_ms);
        }
    }
    return 0;
}
