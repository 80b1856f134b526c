#include "core/common.h"

/*
 * Leased claims of work rows: the one implementation of "take some rows of a table for a
 * while" that the outbox relay (outbox_events) and the command queue (command_queue) share.
 *
 * The problem. Several workers, in threads or processes, take rows from one table. A row must
 * be worked on by one of them at a time, no lock may be held while the work runs (a publish,
 * a remote call), and a worker that dies must not keep its rows forever.
 *
 * The shape. A claim is one short READ COMMITTED transaction that moves rows to PROCESSING
 * with a lease (locked_until) and a lock token that is new for every claim. Every later
 * statement on a claimed row is fenced by that token (`locked_by = ?` or `lock_token = ?`):
 * once the lease expired and another worker claimed the row again, the first worker's
 * statements match nothing, and it learns so from the affected-row count. Expired leases come
 * back either through a separate reclaim pass (the relay: txo__lease_reclaim() moves them to
 * PENDING) or through a claim pass over the expired range that takes them over directly (the
 * command queue).
 *
 * Two strategies (txo/claim.h), the same for every table:
 *   skip-locked   SELECT ... FOR UPDATE SKIP LOCKED returns the rows and locks them; an
 *                 UPDATE by id list marks them. Concurrent claims never wait for each other.
 *   update-limit  UPDATE ... ORDER BY ... LIMIT marks the rows with the token; a SELECT by
 *                 token reads them back. For servers without SKIP LOCKED; concurrent claims
 *                 wait for each other.
 * A table describes one claim pass (struct txo__lease_pass) with the statements of both
 * strategies; the statements, with the index each relies on and the rows it locks, stay in
 * the table's own *_sql.h so that a reader sees every query of a module in one file.
 *
 * What stays with the modules: the columns they read, their cursor (relay), poison commands
 * and the order of passes (command queue), the fenced statements that finish a row, and what
 * a row that was locked but not marked means to them.
 *
 * Trade-offs. An id list is padded to a power of two (the last id repeated), so a statement
 * has at most TXO__LEASE_IN_LEVELS prepared variants per connection; struct txo__lease_in
 * keeps the built text so a long-lived owner (a relay) builds each size once.
 *
 * Thread-safety: no shared state. A struct txo__lease_in or txo__lease_reclaimer belongs to
 * one thread at a time.
 */

#include <uuid/uuid.h>

#include "queue/lease.h"

static const char *const strategy_names[] = {
    [TXO_CLAIM_AUTO] = "auto",
    [TXO_CLAIM_SKIP_LOCKED] = "skip-locked",
    [TXO_CLAIM_UPDATE_LIMIT] = "update-limit",
};

const char *txo_claim_strategy_name(enum txo_claim_strategy s)
{
    return txo__name_known(strategy_names, TXO_ARRAY_LEN(strategy_names), (long)s,
                           "claim strategy");
}

TXO_NAME_PARSER(txo_claim_strategy_parse, enum txo_claim_strategy, strategy_names)

int txo__lease_strategy(struct txo_db *db, enum txo_claim_strategy want, const char *who,
                        enum txo_claim_strategy *out, struct txo_error *err)
{
    if ((unsigned)want >= TXO_ARRAY_LEN(strategy_names))
        return txo_error_set(err, TXO_EINVAL, "%s: unknown claim strategy %d", who, (int)want);
    bool has_skip_locked = txo_db_has_skip_locked(db);
    if (want == TXO_CLAIM_AUTO)
        want = has_skip_locked ? TXO_CLAIM_SKIP_LOCKED : TXO_CLAIM_UPDATE_LIMIT;
    if (want == TXO_CLAIM_SKIP_LOCKED && !has_skip_locked) {
        unsigned long v = txo_db_server_version(db, NULL);
        return txo_error_set(err, TXO_EUNSUPPORTED,
                             "%s: claim strategy skip-locked needs MySQL 8.0.1+ or MariaDB "
                             "10.6+, server is %lu.%lu.%lu; use update-limit",
                             who, v / 10000, v / 100 % 100, v % 100);
    }
    *out = want;
    return 0;
}

void txo__lease_token(char *buf, size_t cap, const char *prefix)
{
    TXO_ASSERT(cap > TXO__LEASE_UUID_LEN);
    uuid_t uu;
    char text[TXO__LEASE_UUID_LEN + 1];
    uuid_generate_random(uu);
    uuid_unparse_lower(uu, text);
    if (prefix == NULL) {
        memcpy(buf, text, sizeof(text));
        return;
    }
    /* Cut on a character boundary: half a UTF-8 character is refused by the column (1366). */
    size_t room = cap > TXO__LEASE_UUID_LEN + 2 ? cap - 1 - TXO__LEASE_UUID_LEN - 1 : 0;
    size_t len = strlen(prefix);
    if (len > room) {
        len = room;
        while (len > 0 && ((unsigned char)prefix[len] & 0xc0u) == 0x80)
            len--;
    }
    snprintf(buf, cap, "%.*s:%s", (int)len, prefix, text);
}

void txo__lease_in_init(struct txo__lease_in *in, const char *prefix)
{
    memset(in, 0, sizeof(*in));
    in->prefix = prefix;
}

void txo__lease_in_release(struct txo__lease_in *in)
{
    if (in == NULL)
        return;
    for (size_t l = 0; l < TXO__LEASE_IN_LEVELS; l++) {
        txo_free(in->sql[l]);
        in->sql[l] = NULL;
    }
}

int txo__lease_exec_in(struct txo_tx *tx, struct txo__lease_in *in, struct txo_param *params,
                       size_t cap, size_t fixed, const int64_t *ids, size_t n, uint64_t *affected,
                       struct txo_error *err)
{
    TXO_ASSERT(n > 0);
    size_t m = txo_sql_in_list_size(n);
    size_t level = 0;
    while (((size_t)1 << level) < m)
        level++;
    TXO_ASSERT(level < TXO__LEASE_IN_LEVELS);
    TXO_ASSERT(fixed + m <= cap);
    if (in->sql[level] == NULL)
        in->sql[level] = txo_sql_in_list(in->prefix, m, "");
    if (in->sql[level] == NULL)
        return txo_error_set(err, TXO_ENOMEM, "out of memory building an IN list of %zu", n);
    for (size_t i = 0; i < m; i++)
        params[fixed + i] = txo_p_i64(ids[i < n ? i : n - 1]);
    struct txo_exec_result res;
    int rc = txo_tx_exec(tx, in->sql[level], params, fixed + m, &res, err);
    if (rc == 0 && affected != NULL)
        *affected = res.affected_rows;
    return rc;
}

/* params[0..) = a[0..na) then b[0..nb); returns na + nb. */
static size_t put_params(struct txo_param *params, size_t cap, const struct txo_param *a, size_t na,
                         const struct txo_param *b, size_t nb)
{
    TXO_ASSERT(na + nb <= cap);
    for (size_t i = 0; i < na; i++)
        params[i] = a[i];
    for (size_t i = 0; i < nb; i++)
        params[na + i] = b[i];
    return na + nb;
}

static int claim_skip_locked(struct txo_tx *tx, const struct txo__lease_pass *p,
                             const struct txo__lease_claim *c, struct txo_rows **rows,
                             uint64_t *marked, struct txo_error *err)
{
    size_t np = put_params(c->params, c->params_cap, c->where, c->n_where, NULL, 0);
    c->params[np++] = txo_p_i64((int64_t)c->limit);
    int rc = txo_tx_query(tx, p->select_locked, c->params, np, rows, err);
    if (rc < 0)
        return rc;
    size_t n = 0;
    for (size_t i = 0; i < txo_rows_count(*rows) && n < c->limit; i++) {
        if (c->skip == NULL || !c->skip(*rows, i, c->skip_arg))
            c->ids[n++] = txo_rows_i64(*rows, i, p->id_col);
    }
    if (n == 0)
        return 0;
    TXO_ASSERT(c->mark_in != NULL && strcmp(c->mark_in->prefix, p->mark_by_id_in) == 0);
    np = put_params(c->params, c->params_cap, c->set, c->n_set, NULL, 0);
    return txo__lease_exec_in(tx, c->mark_in, c->params, c->params_cap, np, c->ids, n, marked, err);
}

static int claim_update_limit(struct txo_tx *tx, const struct txo__lease_pass *p,
                              const struct txo__lease_claim *c, struct txo_rows **rows,
                              uint64_t *marked, struct txo_error *err)
{
    size_t np = put_params(c->params, c->params_cap, c->set, c->n_set, c->where, c->n_where);
    TXO_ASSERT(np < c->params_cap);
    c->params[np++] = txo_p_i64((int64_t)c->limit);
    struct txo_exec_result res;
    int rc = txo_tx_exec(tx, p->update_limit, c->params, np, &res, err);
    if (rc < 0)
        return rc;
    *marked = res.affected_rows;
    if (res.affected_rows == 0 || p->select_by_token == NULL)
        return 0;
    np = put_params(c->params, c->params_cap, c->where, c->n_where, NULL, 0);
    TXO_ASSERT(np < c->params_cap);
    c->params[np++] = txo_p_str(c->token);
    return txo_tx_query(tx, p->select_by_token, c->params, np, rows, err);
}

int txo__lease_claim(struct txo_tx *tx, const struct txo__lease_pass *p,
                     const struct txo__lease_claim *c, struct txo_rows **rows, uint64_t *marked,
                     struct txo_error *err)
{
    TXO_ASSERT(tx != NULL && p != NULL && c != NULL && rows != NULL && marked != NULL);
    TXO_ASSERT(c->limit >= 1 && c->token != NULL);
    *rows = NULL;
    *marked = 0;
    switch (c->strategy) {
    case TXO_CLAIM_SKIP_LOCKED:
        return claim_skip_locked(tx, p, c, rows, marked, err);
    case TXO_CLAIM_UPDATE_LIMIT:
        return claim_update_limit(tx, p, c, rows, marked, err);
    case TXO_CLAIM_AUTO:
        break;
    }
    TXO_BUG("claim strategy %d was not resolved", (int)c->strategy);
}

bool txo__lease_reclaim_due(const struct txo__lease_reclaimer *r, unsigned lease_s)
{
    int64_t every_ms = (int64_t)(lease_s / 4 > 1 ? lease_s / 4 : 1) * 1000;
    return r == NULL || !r->done_once || txo_monotonic_ms() - r->last_ms >= every_ms;
}

int txo__lease_reclaim(struct txo_db *db, struct txo__lease_reclaimer *r, unsigned lease_s,
                       const char *reclaim_sql, int64_t limit, uint64_t *reclaimed,
                       struct txo_error *err)
{
    *reclaimed = 0;
    int64_t now = txo_monotonic_ms();
    if (!txo__lease_reclaim_due(r, lease_s))
        return 0;
    struct txo_param p = txo_p_i64(limit);
    struct txo_exec_result res;
    int rc = txo_db_exec(db, reclaim_sql, &p, 1, &res, err);
    if (rc < 0)
        return rc;
    if (r != NULL) {
        r->done_once = true;
        r->last_ms = now;
    }
    *reclaimed = res.affected_rows;
    return 0;
}
