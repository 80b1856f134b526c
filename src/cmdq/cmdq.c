#include "core/common.h"

/*
 * The command queue: commands appended in the caller's transaction, claimed by
 * workers with a lease and a per-claim lock token, finished (DONE, retried with backoff, or
 * FAILED) by statements fenced by that token. include/txo/cmdq.h has the contract and the
 * state machine; cmdq_sql.h has every statement with its index and locks.
 *
 * A claim is one short READ COMMITTED transaction and returns copies of the rows, so no lock
 * is held while a command runs. Expired leases are taken over by the claim itself (there is no
 * separate reclaim pass as in the relay): a claim first looks at the short PROCESSING range of
 * idx_cmdq_due for expired leases, then at the due PENDING range: two lease passes of
 * src/queue/lease.c, the same claim code the relay runs, over the statements of cmdq_sql.h.
 *
 * Invariants: only a claim changes attempts, and every claim sets a new token, so under the
 * fence (id + token + PROCESSING) the row's attempts is the attempts the claim returned; that
 * is why the retry backoff can be computed here with txo_backoff_delay_ms() instead of in SQL
 * as the relay does for whole batches. Nothing here opens a transaction around the caller's
 * work except the functions taking a db (claim, complete, fail, stats).
 *
 * Thread-safety: no shared state; each call uses only the tx/db it is given.
 */

#include "core/text.h"
#include "cmdq/cmdq_sql.h"
#include "queue/lease.h"
#include "trace/trace_params.h"
#include "txo/cmdq.h"

/* Default backoff of txo_cmdq_fail() when none is given. */
static const struct txo_backoff default_backoff = {1000, 300000, 0.5};

/* Columns of the claim queries (CMDQ_SQL__CLAIM_COLUMNS). */
enum claim_col {
    COL_ID = 0,
    COL_TYPE,
    COL_PAYLOAD,
    COL_ATTEMPTS,
    COL_LOCKED_BY,
    COL_TRACEPARENT,
    COL_TRACESTATE,
};

static const char *const status_names[] = {
    [TXO_CMDQ_PENDING] = "PENDING",
    [TXO_CMDQ_PROCESSING] = "PROCESSING",
    [TXO_CMDQ_DONE] = "DONE",
    [TXO_CMDQ_FAILED] = "FAILED",
};

/*
 * The command state machine of include/txo/cmdq.h: moves[from][to] is true when the move is
 * allowed. PROCESSING -> PROCESSING is a claim taking over an expired lease. The statements
 * that make the moves are listed in cmdq_sql.h (CMDQ_MOVES); tests/unit/test_sql_moves.c
 * checks their SQL against this table, both ways.
 */
static const bool moves[][TXO_ARRAY_LEN(status_names)] = {
    [TXO_CMDQ_PENDING] = {[TXO_CMDQ_PROCESSING] = true},
    [TXO_CMDQ_PROCESSING] = {[TXO_CMDQ_DONE] = true,
                             [TXO_CMDQ_PENDING] = true,
                             [TXO_CMDQ_FAILED] = true,
                             [TXO_CMDQ_PROCESSING] = true},
    [TXO_CMDQ_DONE] = {false},
    [TXO_CMDQ_FAILED] = {false},
};

const char *txo_cmdq_status_name(enum txo_cmdq_status s)
{
    return txo__name_of(status_names, TXO_ARRAY_LEN(status_names), (long)s);
}

TXO_NAME_PARSER(txo_cmdq_status_parse, enum txo_cmdq_status, status_names)

bool txo_cmdq_can_move(enum txo_cmdq_status from, enum txo_cmdq_status to)
{
    txo__move_check(TXO_ARRAY_LEN(status_names), (long)from, (long)to, "command status");
    return moves[from][to];
}

/* ---- enqueue ---- */

int txo_cmdq_enqueue(struct txo_tx *tx, const char *command_type, const char *payload_json,
                     const struct txo_trace_ctx *trace, int64_t *id, struct txo_error *err)
{
    TXO_ASSERT(tx != NULL);
    int rc = txo__check_text_field(command_type, TXO_CMDQ_TYPE_MAX, "command queue", "command_type",
                                   err);
    if (rc < 0)
        return rc;
    if (payload_json == NULL || payload_json[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "command %s: payload is missing", command_type);
    rc = txo__json_check_payload(payload_json, strlen(payload_json), false, "command", command_type,
                                 err);
    if (rc < 0)
        return rc;

    char tp[TXO_TRACEPARENT_LEN + 1];
    struct txo_param params[4] = {txo_p_str(command_type), txo_p_str(payload_json)};
    txo__trace_params(trace, tp, &params[2]);
    struct txo_exec_result res;
    rc = txo_tx_exec(tx, CMDQ_SQL_ENQUEUE, params, TXO_ARRAY_LEN(params), &res, err);
    if (rc < 0) {
        txo_error_wrap(err, "command queue: enqueue %s", command_type);
        return rc;
    }
    if (id != NULL)
        *id = (int64_t)res.insert_id;
    TXO_LOG(TXO_LOG_DEBUG, "cmdq", "enqueue", TXO_KV_U64("command_id", res.insert_id),
            TXO_KV_STR("command_type", command_type));
    return 0;
}

/* ---- commands ---- */

void txo_command_release(struct txo_command *cmd)
{
    if (cmd == NULL)
        return;
    txo_free(cmd->type);
    txo_free(cmd->payload);
    memset(cmd, 0, sizeof(*cmd));
}

void txo_commands_free(struct txo_command *cmds, size_t n)
{
    if (cmds == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        txo_command_release(&cmds[i]);
    txo_free(cmds);
}

/* ---- claim ---- */

void txo_cmdq_claim_opts_init(struct txo_cmdq_claim_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->owner = NULL;
    opts->lease_s = 30;
    opts->max = 10;
    opts->max_attempts = 0;
    opts->claim = TXO_CLAIM_AUTO;
}

static int check_claim_opts(const struct txo_cmdq_claim_opts *o, struct txo_error *err)
{
    if (o->owner == NULL || o->owner[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "command queue: claim owner is empty");
    if (strlen(o->owner) > TXO_CMDQ_OWNER_MAX)
        return txo_error_set(err, TXO_EINVAL, "command queue: claim owner is longer than %d bytes",
                             TXO_CMDQ_OWNER_MAX);
    if (o->lease_s < 1)
        return txo_error_set(err, TXO_EINVAL, "command queue: lease_s must be >= 1");
    if (o->max < 1 || o->max > TXO_CMDQ_CLAIM_MAX)
        return txo_error_set(err, TXO_EINVAL, "command queue: max must be 1..%d, got %zu",
                             TXO_CMDQ_CLAIM_MAX, o->max);
    if ((unsigned)o->claim > TXO_CLAIM_UPDATE_LIMIT)
        return txo_error_set(err, TXO_EINVAL, "command queue: unknown claim strategy %d",
                             (int)o->claim);
    return 0;
}

/*
 * The claim's lease passes (src/queue/lease.c), run in this order: PROCESSING commands whose
 * lease expired, taken over, then due PENDING commands. Both mark under the claim's token and
 * have no select_by_token: the update-limit claim reads all its rows back once at the end.
 */
static const struct txo__lease_pass pass_expired = {
    .select_locked = CMDQ_SQL_CLAIM_EXPIRED_SKIP_LOCKED,
    .mark_by_id_in = CMDQ_SQL_CLAIM_BY_ID_IN,
    .update_limit = CMDQ_SQL_RECLAIM_UPDATE_LIMIT,
    .select_by_token = NULL,
    .id_col = COL_ID,
};

static const struct txo__lease_pass pass_due = {
    .select_locked = CMDQ_SQL_CLAIM_DUE_SKIP_LOCKED,
    .mark_by_id_in = CMDQ_SQL_CLAIM_BY_ID_IN,
    .update_limit = CMDQ_SQL_CLAIM_UPDATE_LIMIT,
    .select_by_token = NULL,
    .id_col = COL_ID,
};

struct claim_ctx {
    const struct txo_cmdq_claim_opts *o;
    enum txo_claim_strategy strategy;
    char token[TXO_CMDQ_TOKEN_LEN + 1];

    /* Results of the last attempt of the transaction (reset at its start). */
    struct txo_rows *expired; /* skip-locked: expired leases found (claimed or poisoned) */
    struct txo_rows *rows;    /* skip-locked: due PENDING rows; update-limit: all claimed */
    size_t n_claimed;         /* rows that end up in the result */
    uint64_t reclaimed;       /* of which expired leases taken over */
    uint64_t poisoned;        /* expired leases made FAILED */

    /* The IN lists built for this claim's statements by id. */
    struct txo__lease_in claim_by_id;
    struct txo__lease_in expire_by_id;

    /* Scratch, sized for opts->max. */
    int64_t *claim_ids;
    int64_t *poison_ids;
    struct txo_param *params;
    size_t params_cap;
};

static bool is_poison(const struct claim_ctx *c, const struct txo_rows *rows, size_t i)
{
    return c->o->max_attempts > 0 &&
           txo_rows_i64(rows, i, COL_ATTEMPTS) >= (int64_t)c->o->max_attempts;
}

static void reset_attempt(struct claim_ctx *c)
{
    txo_rows_free(c->expired);
    txo_rows_free(c->rows);
    c->expired = NULL;
    c->rows = NULL;
    c->n_claimed = 0;
    c->reclaimed = 0;
    c->poisoned = 0;
}

static bool skip_poison(const struct txo_rows *rows, size_t i, void *arg)
{
    return is_poison(arg, rows, i);
}

/* What every pass of this claim writes and where it keeps its scratch. */
static struct txo__lease_claim lease_claim(struct claim_ctx *c, const struct txo_param *set,
                                           size_t n_set, size_t limit)
{
    return (struct txo__lease_claim){
        .strategy = c->strategy,
        .token = c->token,
        .set = set,
        .n_set = n_set,
        .limit = limit,
        .mark_in = &c->claim_by_id,
        .ids = c->claim_ids,
        .params = c->params,
        .params_cap = c->params_cap,
    };
}

/* Cannot happen: the rows are locked by this transaction since the SELECT. */
static int lost_rows(size_t locked, uint64_t marked, struct txo_error *err)
{
    return txo_error_set(err, TXO_EDB, "command queue: claim locked %zu rows, marked %" PRIu64,
                         locked, marked);
}

static int claim_skip_locked_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct claim_ctx *c = arg;
    const struct txo_cmdq_claim_opts *o = c->o;
    reset_attempt(c);

    struct txo_param set[] = {txo_p_str(o->owner), txo_p_str(c->token), txo_p_i64(o->lease_s)};
    struct txo__lease_claim lc = lease_claim(c, set, TXO_ARRAY_LEN(set), o->max);
    lc.skip = skip_poison; /* made FAILED below instead of claimed again */
    lc.skip_arg = c;
    uint64_t marked = 0;
    int rc = txo__lease_claim(tx, &pass_expired, &lc, &c->expired, &marked, err);
    if (rc < 0)
        return rc;
    size_t n_poison = 0;
    for (size_t i = 0; i < txo_rows_count(c->expired); i++) {
        if (is_poison(c, c->expired, i))
            c->poison_ids[n_poison++] = txo_rows_i64(c->expired, i, COL_ID);
        else
            c->n_claimed++;
    }
    if (marked != c->n_claimed)
        return lost_rows(c->n_claimed, marked, err);
    c->reclaimed = c->n_claimed;

    if (n_poison > 0) {
        c->params[0] = txo_p_i64(o->max_attempts);
        rc = txo__lease_exec_in(tx, &c->expire_by_id, c->params, c->params_cap, 1, c->poison_ids,
                                n_poison, &c->poisoned, err);
        if (rc < 0)
            return rc;
    }
    if (c->n_claimed < o->max) {
        lc = lease_claim(c, set, TXO_ARRAY_LEN(set), o->max - c->n_claimed);
        rc = txo__lease_claim(tx, &pass_due, &lc, &c->rows, &marked, err);
        if (rc < 0)
            return rc;
        size_t n = txo_rows_count(c->rows);
        if (marked != n)
            return lost_rows(n, marked, err);
        c->n_claimed += n;
    }
    return 0;
}

static int claim_update_limit_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct claim_ctx *c = arg;
    const struct txo_cmdq_claim_opts *o = c->o;
    reset_attempt(c);

    struct txo_rows *any = NULL;
    int rc = txo_tx_query(tx, CMDQ_SQL_ANY_EXPIRED, NULL, 0, &any, err);
    if (rc < 0)
        return rc;
    bool expired = txo_rows_count(any) > 0;
    txo_rows_free(any);

    struct txo_exec_result res;
    if (expired && o->max_attempts > 0) {
        struct txo_param p[] = {txo_p_i64(o->max_attempts), txo_p_i64(o->max_attempts),
                                txo_p_i64((int64_t)o->max)};
        rc = txo_tx_exec(tx, CMDQ_SQL_EXPIRE_UPDATE_LIMIT, p, TXO_ARRAY_LEN(p), &res, err);
        if (rc < 0)
            return rc;
        c->poisoned = res.affected_rows;
    }
    /* Both passes mark under one token; the claimed rows are read back once, below. */
    struct txo_param set[] = {txo_p_str(o->owner), txo_p_str(c->token), txo_p_i64(o->lease_s)};
    struct txo_rows *none = NULL; /* the passes have no select_by_token */
    if (expired) {
        struct txo__lease_claim lc = lease_claim(c, set, TXO_ARRAY_LEN(set), o->max);
        rc = txo__lease_claim(tx, &pass_expired, &lc, &none, &c->reclaimed, err);
        if (rc < 0)
            return rc;
    }
    if (c->reclaimed < o->max) {
        struct txo__lease_claim lc = lease_claim(c, set, TXO_ARRAY_LEN(set), o->max - c->reclaimed);
        uint64_t marked = 0;
        rc = txo__lease_claim(tx, &pass_due, &lc, &none, &marked, err);
        if (rc < 0)
            return rc;
    }
    struct txo_param token = txo_p_str(c->token);
    rc = txo_tx_query(tx, CMDQ_SQL_CLAIM_SELECT_BY_TOKEN, &token, 1, &c->rows, err);
    if (rc < 0)
        return rc;
    c->n_claimed = txo_rows_count(c->rows);
    return 0;
}

/* Copies row i of rows into cmd; `claimed_now` adds the claim's +1 to the attempts read. */
static int copy_command(const struct txo_rows *rows, size_t i, bool claimed_now, const char *token,
                        struct txo_command *cmd)
{
    cmd->id = txo_rows_i64(rows, i, COL_ID);
    const char *type = txo_rows_str(rows, i, COL_TYPE, NULL);
    const char *payload = txo_rows_str(rows, i, COL_PAYLOAD, NULL);
    cmd->type = txo_strdup(type != NULL ? type : "");
    cmd->payload = txo_strdup(payload != NULL ? payload : "null");
    int64_t attempts = txo_rows_i64(rows, i, COL_ATTEMPTS) + (claimed_now ? 1 : 0);
    cmd->attempts = attempts > 0 && attempts <= INT32_MAX ? (unsigned)attempts : 1;
    /* A value a receiver of the header would drop is dropped here too: no context. */
    cmd->has_trace = txo_trace_parse(txo_rows_str(rows, i, COL_TRACEPARENT, NULL),
                                     txo_rows_str(rows, i, COL_TRACESTATE, NULL), &cmd->trace);
    snprintf(cmd->token, sizeof(cmd->token), "%s", token);
    return cmd->type != NULL && cmd->payload != NULL ? 0 : TXO_ENOMEM;
}

/* Builds the result array of a committed claim. */
static int collect(const struct claim_ctx *c, struct txo_command **out, struct txo_error *err)
{
    *out = NULL;
    if (c->n_claimed == 0)
        return 0;
    struct txo_command *cmds = txo_calloc(c->n_claimed, sizeof(*cmds));
    if (cmds == NULL)
        goto oom;
    size_t k = 0;
    bool select_then_update = c->strategy == TXO_CLAIM_SKIP_LOCKED;
    for (size_t i = 0; select_then_update && i < txo_rows_count(c->expired); i++) {
        if (is_poison(c, c->expired, i))
            continue;
        if (copy_command(c->expired, i, true, c->token, &cmds[k++]) < 0)
            goto oom;
    }
    for (size_t i = 0; i < txo_rows_count(c->rows); i++) {
        if (copy_command(c->rows, i, select_then_update, c->token, &cmds[k++]) < 0)
            goto oom;
    }
    TXO_ASSERT(k == c->n_claimed);
    *out = cmds;
    return 0;
oom:
    txo_commands_free(cmds, c->n_claimed);
    return txo_error_set(err, TXO_ENOMEM,
                         "command queue: out of memory copying %zu claimed commands (they run "
                         "again when their lease expires)",
                         c->n_claimed);
}

int txo_cmdq_claim_ex(struct txo_db *db, const struct txo_cmdq_claim_opts *opts,
                      struct txo_command **cmds, size_t *n, struct txo_error *err)
{
    TXO_ASSERT(db != NULL && opts != NULL && cmds != NULL && n != NULL);
    int rc = check_claim_opts(opts, err);
    if (rc < 0)
        return rc;
    struct claim_ctx c = {.o = opts};
    rc = txo__lease_strategy(db, opts->claim, "command queue", &c.strategy, err);
    if (rc < 0)
        return rc;
    txo__lease_token(c.token, sizeof(c.token), NULL);
    txo__lease_in_init(&c.claim_by_id, CMDQ_SQL_CLAIM_BY_ID_IN);
    txo__lease_in_init(&c.expire_by_id, CMDQ_SQL_EXPIRE_BY_ID_IN);

    size_t in_max = txo_sql_in_list_size(opts->max);
    c.claim_ids = txo_calloc(opts->max, sizeof(*c.claim_ids));
    c.poison_ids = txo_calloc(opts->max, sizeof(*c.poison_ids));
    c.params_cap = 3 + in_max;
    c.params = txo_calloc(c.params_cap, sizeof(*c.params));
    if (c.claim_ids == NULL || c.poison_ids == NULL || c.params == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "command queue: out of memory for a claim of %zu",
                           opts->max);
        goto out;
    }

    txo_tx_fn fn =
        c.strategy == TXO_CLAIM_SKIP_LOCKED ? claim_skip_locked_tx : claim_update_limit_tx;
    rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, fn, &c, err);
    if (rc < 0) {
        txo_error_wrap(err, "command queue: claim by %s (%s)", opts->owner,
                       txo_claim_strategy_name(c.strategy));
        goto out;
    }
    rc = collect(&c, cmds, err);
    if (rc < 0)
        goto out;
    *n = c.n_claimed;
    if (c.reclaimed > 0)
        TXO_LOG(TXO_LOG_WARN, "cmdq", "claimed commands whose lease expired; they run again",
                TXO_KV_STR("owner", opts->owner), TXO_KV_U64("count", c.reclaimed));
    if (c.poisoned > 0)
        TXO_LOG(TXO_LOG_ERROR, "cmdq",
                "poison commands FAILED: their lease expired on every allowed attempt",
                TXO_KV_U64("max_attempts", opts->max_attempts), TXO_KV_STR("owner", opts->owner),
                TXO_KV_U64("count", c.poisoned));
    if (c.n_claimed > 0)
        TXO_LOG(TXO_LOG_DEBUG, "cmdq", "claim", TXO_KV_STR("owner", opts->owner),
                TXO_KV_STR("token", c.token), TXO_KV_U64("count", c.n_claimed),
                TXO_KV_I64("first_id", (*cmds)[0].id));
out:
    reset_attempt(&c);
    txo__lease_in_release(&c.claim_by_id);
    txo__lease_in_release(&c.expire_by_id);
    txo_free(c.claim_ids);
    txo_free(c.poison_ids);
    txo_free(c.params);
    return rc;
}

int txo_cmdq_claim(struct txo_db *db, const char *owner, unsigned lease_s, size_t max,
                   struct txo_command **cmds, size_t *n, struct txo_error *err)
{
    struct txo_cmdq_claim_opts o;
    txo_cmdq_claim_opts_init(&o);
    o.owner = owner;
    o.lease_s = lease_s;
    o.max = max;
    return txo_cmdq_claim_ex(db, &o, cmds, n, err);
}

/* ---- finishing a command ---- */

static int check_command(const struct txo_command *cmd, struct txo_error *err)
{
    if (cmd == NULL || cmd->id <= 0 || strlen(cmd->token) != TXO_CMDQ_TOKEN_LEN)
        return txo_error_set(err, TXO_EINVAL,
                             "command queue: not a claimed command (no id or lock token)");
    return 0;
}

/*
 * A fenced statement on cmd matched no row: tells why, reading the row as it is now.
 * Returns TXO_ENOTFOUND, TXO_ESTATE or TXO_ELEASELOST (or a DB error).
 */
static int fence_error(struct txo_tx *tx, const struct txo_command *cmd, const char *what,
                       struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    struct txo_param id = txo_p_i64(cmd->id);
    int rc = txo_tx_query(tx, CMDQ_SQL_FENCE_STATE, &id, 1, &rows, err);
    if (rc < 0)
        goto out;
    if (txo_rows_count(rows) == 0) {
        rc = txo_error_set(err, TXO_ENOTFOUND,
                           "command queue: %s command %" PRId64 ": no such command", what, cmd->id);
        goto out;
    }
    const char *status = txo_rows_str(rows, 0, 0, NULL);
    const char *token = txo_rows_str(rows, 0, 1, NULL);
    enum txo_cmdq_status s = TXO_CMDQ_PENDING;
    bool known = txo_cmdq_status_parse(status, &s) == 0;
    bool ours = token != NULL && strcmp(token, cmd->token) == 0;
    if (known && ours && (s == TXO_CMDQ_DONE || s == TXO_CMDQ_FAILED)) {
        rc = txo_error_set(err, TXO_ESTATE, "command queue: %s command %" PRId64 ": already %s",
                           what, cmd->id, status);
        goto out;
    }
    rc = txo_error_set(err, TXO_ELEASELOST,
                       "command queue: %s command %" PRId64 ": lease lost (claim %s no longer "
                       "holds it; it is %s now)",
                       what, cmd->id, cmd->token, status != NULL ? status : "?");
out:
    txo_rows_free(rows);
    return rc;
}

int txo_cmdq_complete_tx(struct txo_tx *tx, const struct txo_command *cmd, struct txo_error *err)
{
    TXO_ASSERT(tx != NULL);
    int rc = check_command(cmd, err);
    if (rc < 0)
        return rc;
    struct txo_param params[] = {txo_p_i64(cmd->id), txo_p_str(cmd->token)};
    struct txo_exec_result res;
    rc = txo_tx_exec(tx, CMDQ_SQL_COMPLETE, params, TXO_ARRAY_LEN(params), &res, err);
    if (rc < 0) {
        txo_error_wrap(err, "command queue: complete command %" PRId64, cmd->id);
        return rc;
    }
    if (res.affected_rows == 0)
        return fence_error(tx, cmd, "complete", err);
    TXO_LOG(TXO_LOG_DEBUG, "cmdq", "done", TXO_KV_I64("command_id", cmd->id),
            TXO_KV_STR("command_type", cmd->type != NULL ? cmd->type : "?"),
            TXO_KV_U64("attempts", cmd->attempts));
    return 0;
}

static int complete_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    return txo_cmdq_complete_tx(tx, arg, err);
}

int txo_cmdq_complete(struct txo_db *db, const struct txo_command *cmd, struct txo_error *err)
{
    TXO_ASSERT(db != NULL);
    return txo_db_transact(db, TXO_ISO_READ_COMMITTED, complete_tx, (void *)cmd, err);
}

struct fail_ctx {
    const struct txo_command *cmd;
    const char *last_error; /* NULL binds SQL NULL */
    bool final;
    int64_t delay_ms;
};

static int fail_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct fail_ctx *f = arg;
    const struct txo_command *cmd = f->cmd;
    struct txo_exec_result res;
    int rc;
    if (f->final) {
        struct txo_param p[] = {txo_p_str(f->last_error), txo_p_i64(cmd->id),
                                txo_p_str(cmd->token)};
        rc = txo_tx_exec(tx, CMDQ_SQL_FAIL, p, TXO_ARRAY_LEN(p), &res, err);
    } else {
        struct txo_param p[] = {txo_p_str(f->last_error), txo_p_i64(f->delay_ms * 1000),
                                txo_p_i64(cmd->id), txo_p_str(cmd->token)};
        rc = txo_tx_exec(tx, CMDQ_SQL_RETRY, p, TXO_ARRAY_LEN(p), &res, err);
    }
    if (rc < 0)
        return rc;
    if (res.affected_rows == 0)
        return fence_error(tx, cmd, "fail", err);
    return 0;
}

/* A copy of s cut to at most max bytes on a UTF-8 character boundary; NULL for NULL. */
static char *cut_utf8(const char *s, size_t max, bool *oom)
{
    *oom = false;
    if (s == NULL)
        return NULL;
    char *copy = txo_strndup(s, txo_utf8_cut(s, strlen(s), max));
    *oom = copy == NULL;
    return copy;
}

int txo_cmdq_fail(struct txo_db *db, const struct txo_command *cmd, const char *error,
                  bool permanent, unsigned max_attempts, const struct txo_backoff *backoff,
                  bool *failed, struct txo_error *err)
{
    TXO_ASSERT(db != NULL);
    int rc = check_command(cmd, err);
    if (rc < 0)
        return rc;
    if (max_attempts < 1)
        return txo_error_set(err, TXO_EINVAL, "command queue: max_attempts must be >= 1");
    const struct txo_backoff *b = backoff != NULL ? backoff : &default_backoff;
    if (b->base_ms < 0 || b->max_ms < b->base_ms || !(b->jitter >= 0.0 && b->jitter <= 1.0))
        return txo_error_set(err, TXO_EINVAL,
                             "command queue: backoff must have 0 <= base_ms <= max_ms and "
                             "jitter 0..1");

    struct fail_ctx f = {.cmd = cmd, .final = permanent || cmd->attempts >= max_attempts};
    /* Drawn once, so a transaction that is run again stores the same delay. */
    f.delay_ms = txo_backoff_delay_ms(b, cmd->attempts > 0 ? cmd->attempts : 1, txo_rand01());
    bool oom;
    char *last_error = cut_utf8(error, TXO__LEASE_LAST_ERROR_MAX, &oom);
    if (oom)
        return txo_error_set(err, TXO_ENOMEM, "command queue: out of memory");
    f.last_error = last_error;

    rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, fail_tx, &f, err);
    if (rc < 0)
        goto out;
    if (failed != NULL)
        *failed = f.final;
    if (f.final)
        TXO_LOG(TXO_LOG_WARN, "cmdq", "command FAILED", TXO_KV_I64("command_id", cmd->id),
                TXO_KV_STR("command_type", cmd->type != NULL ? cmd->type : "?"),
                TXO_KV_U64("attempts", cmd->attempts), TXO_KV_BOOL("permanent", permanent),
                TXO_KV_STRN("error", error != NULL ? error : "",
                            error != NULL ? strnlen(error, 200) : 0));
    else
        TXO_LOG(TXO_LOG_DEBUG, "cmdq", "command retry", TXO_KV_I64("command_id", cmd->id),
                TXO_KV_U64("attempts", cmd->attempts), TXO_KV_I64("delay_ms", f.delay_ms),
                TXO_KV_STRN("error", error != NULL ? error : "",
                            error != NULL ? strnlen(error, 200) : 0));
out:
    txo_free(last_error);
    return rc;
}

/* ---- stats ---- */

struct stats_ctx {
    uint64_t by_status[TXO_ARRAY_LEN(status_names)];
};

static int stats_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct stats_ctx *s = arg;
    memset(s, 0, sizeof(*s));
    struct txo_rows *rows = NULL;
    int rc = txo_tx_query(tx, CMDQ_SQL_COUNT_BY_STATUS, NULL, 0, &rows, err);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < txo_rows_count(rows); i++) {
        enum txo_cmdq_status st;
        if (txo_cmdq_status_parse(txo_rows_str(rows, i, 0, NULL), &st) == 0)
            s->by_status[st] = (uint64_t)txo_rows_i64(rows, i, 1);
    }
    txo_rows_free(rows);
    return 0;
}

int txo_cmdq_stats(struct txo_db *db, uint64_t *pending, uint64_t *processing, uint64_t *failed,
                   struct txo_error *err)
{
    TXO_ASSERT(db != NULL);
    struct stats_ctx s;
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, stats_tx, &s, err);
    if (rc < 0) {
        txo_error_wrap(err, "command queue: stats");
        return rc;
    }
    if (pending != NULL)
        *pending = s.by_status[TXO_CMDQ_PENDING];
    if (processing != NULL)
        *processing = s.by_status[TXO_CMDQ_PROCESSING];
    if (failed != NULL)
        *failed = s.by_status[TXO_CMDQ_FAILED];
    return 0;
}
