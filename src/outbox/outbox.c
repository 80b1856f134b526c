#include "core/common.h"

/*
 * The transactional outbox: txo_outbox_append() writes an event row into
 * outbox_events inside the caller's transaction, so the event commits or rolls back together
 * with the business rows it describes. The relay (src/relay/relay.c) publishes committed rows.
 *
 * Also here: the outbox row state machine (one transition table, below) and the counts that
 * feed the outbox metrics.
 *
 * Invariants: a row is only ever inserted as PENDING (the column default); the payload is
 * checked to be JSON before it reaches the server, so the relay never meets a payload it
 * cannot embed in an envelope. Nothing here opens or commits a transaction on behalf of the
 * caller, except txo_outbox_get_stats(), which reads in its own short one.
 *
 * Thread-safety: no shared state; each call uses only the tx/db it is given.
 */

#include "core/text.h"
#include "outbox/outbox_sql.h"
#include "txo/binlog.h"
#include "trace/trace_params.h"

/* Column widths of outbox_events (sql/migrations/0001_outbox.sql, 0012_outbox_contract.sql). */
#define AGGREGATE_TYPE_MAX  64
#define AGGREGATE_ID_MAX    255
#define EVENT_TYPE_MAX      128
#define IDEMPOTENCY_KEY_MAX 255

static const char *const status_names[] = {
    [TXO_OUTBOX_PENDING] = "PENDING",     [TXO_OUTBOX_PROCESSING] = "PROCESSING",
    [TXO_OUTBOX_PUBLISHED] = "PUBLISHED", [TXO_OUTBOX_FAILED] = "FAILED",
    [TXO_OUTBOX_SKIPPED] = "SKIPPED",
};

/*
 * The outbox state machine of include/txo/outbox.h: moves[from][to] is true when the move is
 * allowed. The statements that make the moves are listed in outbox_moves.h (OUTBOX_MOVES);
 * tests/unit/test_sql_moves.c checks their SQL against this table, both ways.
 */
static const bool moves[][TXO_ARRAY_LEN(status_names)] = {
    [TXO_OUTBOX_PENDING] = {[TXO_OUTBOX_PROCESSING] = true,
                            [TXO_OUTBOX_PUBLISHED] = true,
                            [TXO_OUTBOX_PENDING] = true,
                            [TXO_OUTBOX_FAILED] = true},
    [TXO_OUTBOX_PROCESSING] =
        {[TXO_OUTBOX_PUBLISHED] = true, [TXO_OUTBOX_PENDING] = true, [TXO_OUTBOX_FAILED] = true},
    [TXO_OUTBOX_PUBLISHED] = {false},
    [TXO_OUTBOX_FAILED] = {[TXO_OUTBOX_PENDING] = true, [TXO_OUTBOX_SKIPPED] = true},
    [TXO_OUTBOX_SKIPPED] = {false},
};

const char *txo_outbox_status_name(enum txo_outbox_status s)
{
    return txo__name_of(status_names, TXO_ARRAY_LEN(status_names), (long)s);
}

TXO_NAME_PARSER(txo_outbox_status_parse, enum txo_outbox_status, status_names)

bool txo_outbox_can_move(enum txo_outbox_status from, enum txo_outbox_status to)
{
    txo__move_check(TXO_ARRAY_LEN(status_names), (long)from, (long)to, "outbox status");
    return moves[from][to];
}

/* Every check txo_outbox_append() and txo_outbox_append_many() make on one event before any
 * SQL runs. *payload_len gets the payload's length. */
static int check_event(const struct txo_outbox_event *ev, size_t *payload_len,
                       struct txo_error *err)
{
    const char *key = ev->idempotency_key != NULL ? ev->idempotency_key : "(null)";
    char whose[TXO_ERROR_MSG_MAX + 16]; /* longer than a message: only the message is cut */
    snprintf(whose, sizeof(whose), "outbox event %s", key);
    int rc = txo__check_text_field(ev->idempotency_key, IDEMPOTENCY_KEY_MAX, whose,
                                   "idempotency_key", err);
    if (rc == 0)
        rc = txo__check_text_field(ev->aggregate_type, AGGREGATE_TYPE_MAX, whose, "aggregate_type",
                                   err);
    if (rc == 0)
        rc = txo__check_text_field(ev->aggregate_id, AGGREGATE_ID_MAX, whose, "aggregate_id", err);
    if (rc == 0)
        rc = txo__check_text_field(ev->event_type, EVENT_TYPE_MAX, whose, "event_type", err);
    if (rc < 0)
        return rc;
    if (ev->payload_json == NULL)
        return txo_error_set(err, TXO_EINVAL, "outbox event %s: payload is missing", key);
    *payload_len = ev->payload_len != 0 ? ev->payload_len : strlen(ev->payload_json);
    if (*payload_len == 0)
        return txo_error_set(err, TXO_EINVAL, "outbox event %s: payload is empty", key);
    return txo__json_check_payload(ev->payload_json, *payload_len, true, "outbox event", key, err);
}

/* The columns of an event per row (OUTBOX_SQL_INSERT_ROW; the NUMBERED form has 3 more). */
#define ROW_PARAMS      7
#define NUMBERED_PARAMS 10
/* The columns of an event's counter row (OUTBOX_SQL_NUMBER_ROW). */
#define NUMBER_PARAMS 2

/* An event's numbers in its aggregate, from its counter (OUTBOX_SQL_NUMBER_*). */
struct numbers {
    int64_t sequence;
    int64_t prev_sequence;
    int64_t due_us; /* next_attempt_at, microseconds since 1970-01-01 */
};

/* Numbers evs[0..n) in their aggregates, in their order, into nums (OUTBOX_SQL_NUMBER_*). */
static int take_numbers(struct txo_tx *tx, const struct txo_outbox_event *evs, size_t n,
                        struct numbers *nums, struct txo_error *err)
{
    struct txo_param *params = txo_calloc(NUMBER_PARAMS * n, sizeof(*params));
    char *sql = txo_sql_values_rows_then(OUTBOX_SQL_NUMBER_BEFORE, n, OUTBOX_SQL_NUMBER_ROW,
                                         OUTBOX_SQL_NUMBER_AFTER);
    struct txo_rows *rows = NULL;
    int rc = 0;
    if (params == NULL || sql == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "numbering %zu events", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        params[NUMBER_PARAMS * i] = txo_p_str(evs[i].aggregate_type);
        params[NUMBER_PARAMS * i + 1] = txo_p_str(evs[i].aggregate_id);
    }
    rc = txo_tx_query(tx, sql, params, NUMBER_PARAMS * n, &rows, err);
    if (rc < 0)
        goto out;
    if (txo_rows_count(rows) != n) {
        rc = txo_error_set(err, TXO_EDB, "numbering %zu events: %zu counters came back", n,
                           txo_rows_count(rows));
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        nums[i] = (struct numbers){.sequence = txo_rows_i64(rows, i, 0),
                                   .prev_sequence = txo_rows_i64(rows, i, 1),
                                   .due_us = txo_rows_i64(rows, i, 2)};
out:
    txo_rows_free(rows);
    txo_free(sql);
    txo_free(params);
    return rc;
}

/*
 * Gives the numbers of evs[0..n) back after their INSERT failed on a duplicate key or a check
 * (OUTBOX_SQL_UNNUMBER, last event first), so a transaction that goes on leaves no gap. On
 * failure err says the transaction must roll back.
 */
static int give_numbers_back(struct txo_tx *tx, const struct txo_outbox_event *evs, size_t n,
                             const struct numbers *nums, struct txo_error *err)
{
    for (size_t i = n; i-- > 0;) {
        struct txo_param p[] = {txo_p_i64(nums[i].sequence - 1), txo_p_i64(nums[i].prev_sequence),
                                txo_p_str(evs[i].aggregate_type), txo_p_str(evs[i].aggregate_id)};
        int rc = txo_tx_exec(tx, OUTBOX_SQL_UNNUMBER, p, TXO_ARRAY_LEN(p), NULL, err);
        if (rc < 0)
            return txo_error_wrap(err, "giving back the number of %s (roll back)",
                                  evs[i].idempotency_key);
    }
    return 0;
}

/*
 * The params of ev's row into p[0..ROW_PARAMS), and with num its numbers after them (to
 * NUMBERED_PARAMS); its traceparent is written into tp (room for TXO_TRACEPARENT_LEN + 1),
 * which must outlive the statement.
 */
static void row_params(const struct txo_outbox_event *ev, size_t payload_len,
                       const struct numbers *num, char *tp, struct txo_param *p)
{
    p[0] = txo_p_str(ev->aggregate_type);
    p[1] = txo_p_str(ev->aggregate_id);
    p[2] = txo_p_str(ev->event_type);
    p[3] = txo_p_strn(ev->payload_json, payload_len);
    p[4] = txo_p_str(ev->idempotency_key);
    txo__trace_params(ev->trace, tp, &p[5]);
    if (num == NULL)
        return;
    p[7] = txo_p_i64(num->sequence);
    p[8] = txo_p_i64(num->prev_sequence);
    p[9] = txo_p_i64(num->due_us);
}

/*
 * The one way events are appended: evs[0..n) checked, then one multi-row INSERT. Several
 * events are numbered first (take_numbers) and inserted with their numbers, which are given
 * back when the INSERT fails on a duplicate key or a check; one event is numbered by the
 * trigger inside its INSERT, one round trip instead of two (outbox_sql.h). *res gets the
 * INSERT's result. Errors as txo_outbox_append_many().
 */
static int insert_events(struct txo_tx *tx, const struct txo_outbox_event *evs, size_t n,
                         struct txo_exec_result *res, struct txo_error *err)
{
    bool numbered = n > 1;
    size_t per_row = numbered ? NUMBERED_PARAMS : ROW_PARAMS;
    size_t *lens = txo_calloc(n, sizeof(*lens));
    struct numbers *nums = txo_calloc(n, sizeof(*nums));
    struct txo_param *params = txo_calloc(per_row * n, sizeof(*params));
    char(*tps)[TXO_TRACEPARENT_LEN + 1] = txo_calloc(n, sizeof(*tps));
    int rc = 0;
    if (lens == NULL || nums == NULL || params == NULL || tps == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "outbox append of %zu events", n);
        goto out;
    }
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = check_event(&evs[i], &lens[i], err);
    if (rc < 0)
        goto out;
    if (numbered && (rc = take_numbers(tx, evs, n, nums, err)) < 0)
        goto failed;
    for (size_t i = 0; i < n; i++)
        row_params(&evs[i], lens[i], numbered ? &nums[i] : NULL, tps[i], &params[per_row * i]);
    rc = txo_tx_exec_rows(tx,
                          numbered ? OUTBOX_SQL_INSERT_NUMBERED_BEFORE : OUTBOX_SQL_INSERT_BEFORE,
                          n, numbered ? OUTBOX_SQL_INSERT_NUMBERED_ROW : OUTBOX_SQL_INSERT_ROW, "",
                          params, per_row, res, err);
    if (numbered && (rc == TXO_EDUPLICATE || rc == TXO_ECONSTRAINT)) {
        /* The server undid the statement alone and the transaction goes on. (Other failures,
         * a deadlock say, end it or leave it to be rolled back, the counters with it.) */
        struct txo_error back;
        txo_error_init(&back);
        if (give_numbers_back(tx, evs, n, nums, &back) < 0) {
            char first[TXO_ERROR_MSG_MAX];
            snprintf(first, sizeof(first), "%s", err != NULL ? err->msg : "insert failed");
            rc = txo_error_set(err, TXO_EDB, "%s; %s", first, back.msg);
        }
    }
failed:
    if (rc < 0 && n == 1)
        txo_error_wrap(err, "outbox append %s (%s %s:%s)", evs[0].idempotency_key,
                       evs[0].event_type, evs[0].aggregate_type, evs[0].aggregate_id);
    else if (rc < 0)
        txo_error_wrap(err, "outbox append of %zu events (first %s)", n, evs[0].idempotency_key);
out:
    txo_free(lens);
    txo_free(nums);
    txo_free(params);
    txo_free(tps);
    return rc;
}

int txo_outbox_append(struct txo_tx *tx, const struct txo_outbox_event *ev, unsigned flags,
                      bool *inserted, int64_t *id, struct txo_error *err)
{
    TXO_ASSERT(tx != NULL && ev != NULL);
    const char *key = ev->idempotency_key != NULL ? ev->idempotency_key : "(null)";
    struct txo_exec_result res = {0};
    int rc = insert_events(tx, ev, 1, &res, err);
    bool was_inserted = rc == 0 && res.affected_rows == 1;
    if (rc == TXO_EDUPLICATE && (flags & TXO_OUTBOX_IGNORE_DUPLICATE) != 0) {
        /* The failed statement is undone, the aggregate's counter included; the transaction
         * goes on. */
        txo_error_init(err);
        rc = 0;
    }
    if (rc < 0)
        return rc;
    if (inserted != NULL)
        *inserted = was_inserted;
    if (id != NULL)
        *id = was_inserted ? (int64_t)res.insert_id : 0;
    TXO_LOG(TXO_LOG_DEBUG, "outbox", "append", TXO_KV_STR("key", key),
            TXO_KV_STR("event_type", ev->event_type), TXO_KV_STR("aggregate_id", ev->aggregate_id),
            TXO_KV_BOOL("duplicate", !was_inserted));
    return 0;
}

int txo_outbox_append_many(struct txo_tx *tx, const struct txo_outbox_event *evs, size_t n,
                           struct txo_error *err)
{
    TXO_ASSERT(tx != NULL && (n == 0 || evs != NULL));
    if (n == 0)
        return 0;
    struct txo_exec_result res = {0};
    int rc = insert_events(tx, evs, n, &res, err);
    if (rc < 0)
        return rc;
    if (res.affected_rows != n)
        return txo_error_set(err, TXO_EDB, "outbox append: %llu of %zu events inserted",
                             (unsigned long long)res.affected_rows, n);
    TXO_LOG(TXO_LOG_DEBUG, "outbox", "append", TXO_KV_U64("n", n),
            TXO_KV_STR("first_key", evs[0].idempotency_key));
    return 0;
}

struct stats_ctx {
    struct txo_outbox_stats stats;
    int64_t published_through; /* txo_binlog_published_through(); 0: none */
};

/* Column col of an age query's row in seconds: 0 when NULL (no such event) or not positive. */
static double age_s(const struct txo_rows *rows, size_t col)
{
    if (txo_rows_is_null(rows, 0, col))
        return 0.0;
    int64_t us = txo_rows_i64(rows, 0, col);
    return us > 0 ? (double)us / 1e6 : 0.0;
}

static int stats_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct stats_ctx *ctx = arg;
    struct txo_rows *rows = NULL;

    memset(&ctx->stats, 0, sizeof(ctx->stats));
    int rc = txo_tx_query(tx, OUTBOX_SQL_COUNT_BY_STATUS, NULL, 0, &rows, err);
    if (rc < 0)
        goto out;
    uint64_t *count_of[TXO_ARRAY_LEN(status_names)] = {
        [TXO_OUTBOX_PENDING] = &ctx->stats.pending,
        [TXO_OUTBOX_PROCESSING] = &ctx->stats.processing,
        [TXO_OUTBOX_PUBLISHED] = &ctx->stats.published,
        [TXO_OUTBOX_FAILED] = &ctx->stats.failed,
        [TXO_OUTBOX_SKIPPED] = &ctx->stats.skipped,
    };
    for (size_t i = 0; i < txo_rows_count(rows); i++) {
        enum txo_outbox_status s;
        if (txo_outbox_status_parse(txo_rows_str(rows, i, 0, NULL), &s) < 0)
            continue; /* the ENUM column admits only our values (or '' in non-strict mode) */
        *count_of[s] = (uint64_t)txo_rows_i64(rows, i, 1);
    }
    txo_rows_free(rows);
    rows = NULL;

    rc = txo_tx_query(tx, OUTBOX_SQL_COUNT_DEAD_LETTERS, NULL, 0, &rows, err);
    if (rc < 0)
        goto out;
    if (txo_rows_count(rows) > 0)
        ctx->stats.dead_letters = (uint64_t)txo_rows_i64(rows, 0, 0);
    txo_rows_free(rows);
    rows = NULL;

    rc = txo_tx_query(tx, OUTBOX_SQL_OLDEST_AGES_US, NULL, 0, &rows, err);
    if (rc < 0)
        goto out;
    if (txo_rows_count(rows) > 0) {
        double pending = age_s(rows, 0), processing = age_s(rows, 1);
        ctx->stats.oldest_pending_age_s = pending > processing ? pending : processing;
        ctx->stats.oldest_failed_age_s = age_s(rows, 2);
    }
    txo_rows_free(rows);
    rows = NULL;

    rc = txo_tx_query(tx, OUTBOX_SQL_RETRY_WAIT, NULL, 0, &rows, err);
    if (rc < 0)
        goto out;
    if (txo_rows_count(rows) > 0) {
        int64_t waiting = txo_rows_i64(rows, 0, 0);
        ctx->stats.retry_waiting = waiting > 0 ? (uint64_t)waiting : 0;
        ctx->stats.oldest_due_age_s = age_s(rows, 1);
    }
    if (ctx->published_through > 0) {
        /* The PENDING rows through it were published by the binlog source. */
        txo_rows_free(rows);
        rows = NULL;
        struct txo_param above = txo_p_i64(ctx->published_through);
        rc = txo_tx_query(tx, OUTBOX_SQL_PENDING_ABOVE, &above, 1, &rows, err);
        if (rc < 0)
            goto out;
        int64_t waiting = txo_rows_count(rows) > 0 ? txo_rows_i64(rows, 0, 0) : 0;
        uint64_t still = waiting > 0 ? (uint64_t)waiting : 0;
        if (still < ctx->stats.pending) {
            ctx->stats.published += ctx->stats.pending - still;
            ctx->stats.pending = still;
        }
        double age = txo_rows_count(rows) > 0 ? age_s(rows, 1) : 0.0;
        ctx->stats.oldest_pending_age_s = age;
        ctx->stats.oldest_due_age_s = age;
        ctx->stats.retry_waiting = 0; /* the source retries in its stream, not by row */
    }
out:
    txo_rows_free(rows);
    return rc;
}

int txo_outbox_get_stats(struct txo_db *db, struct txo_outbox_stats *out, struct txo_error *err)
{
    TXO_ASSERT(db != NULL && out != NULL);
    struct stats_ctx ctx = {.published_through = 0};
    int rc = txo_binlog_published_through(db, &ctx.published_through, err);
    if (rc == 0)
        rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, stats_tx, &ctx, err);
    if (rc < 0) {
        txo_error_wrap(err, "outbox stats");
        return rc;
    }
    *out = ctx.stats;
    return 0;
}
