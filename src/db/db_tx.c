/*
 * Transactions: txo_db_transact() runs a caller's function between the first statement and
 * COMMIT, and runs the whole of it again when the attempt failed in a way a new attempt may
 * not meet; txo_db_exec() and txo_db_query() are one statement in such a transaction.
 *
 * Why the whole transaction: a deadlock (1213, also a Galera certification failure at COMMIT),
 * a lock wait timeout (1205), a lost connection (2006/2013) or a Galera node outside the
 * primary component (1047; 1180 at COMMIT) leave the transaction rolled back (or the session
 * gone), so only a new run of every statement can succeed. A COMMIT that loses the connection
 * has an unknown outcome: it is reported, never run again.
 *
 * How many attempts, and which failures of the body end the transaction at once, is the
 * caller's to say (struct txo_tx_opts), so that a body never changes an error code to steer
 * the loop. The choice covers only what the body returned: a failure of the COMMIT or before
 * the body ran is something the body could not have handled.
 *
 * Thread-safety: a struct txo_db is used by one thread at a time; transactions on it do not
 * nest.
 */
#include "core/common.h"

#include <stdatomic.h>

#include "db/db_internal.h"

/* The statements setting each level: [iso][0] for the next transaction, [iso][1] the session. */
static const char *const isolation_sql[][2] = {
    [TXO_ISO_DEFAULT] = {NULL, NULL},
    [TXO_ISO_READ_UNCOMMITTED] = {"SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED",
                                  "SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED"},
    [TXO_ISO_READ_COMMITTED] = {"SET TRANSACTION ISOLATION LEVEL READ COMMITTED",
                                "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"},
    [TXO_ISO_REPEATABLE_READ] = {"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
                                 "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"},
    [TXO_ISO_SERIALIZABLE] = {"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
                              "SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE"},
};

const char *txo__db_isolation_sql(enum txo_isolation iso, bool session)
{
    if ((unsigned)iso >= TXO_ARRAY_LEN(isolation_sql))
        return NULL;
    return isolation_sql[iso][session ? 1 : 0];
}

struct txo_db *txo_tx_db(struct txo_tx *tx)
{
    return tx->db;
}

#define TX_OUTCOMES_ALL                                                                            \
    (TXO_TX_DEADLOCK | TXO_TX_LOCK_TIMEOUT | TXO_TX_CONN_LOST | TXO_TX_UNAVAILABLE)

/* The outcome flag of rc when a new attempt of the whole transaction may not meet it, else 0.
 * TXO_EUNAVAILABLE only when the server said it (db->server_unavailable), not when the body
 * returned it for a service of its own. */
static unsigned retry_outcome(const struct txo_db *db, int rc)
{
    switch (rc) {
    case TXO_EDEADLOCK:
        return TXO_TX_DEADLOCK;
    case TXO_ELOCKTIMEOUT:
        return TXO_TX_LOCK_TIMEOUT;
    case TXO_ECONNLOST:
    case TXO_ECONNECT:
        return TXO_TX_CONN_LOST;
    case TXO_EUNAVAILABLE:
        return db->server_unavailable ? TXO_TX_UNAVAILABLE : 0;
    default:
        return 0;
    }
}

static int begin(struct txo_db *db, enum txo_isolation iso, struct txo_error *err)
{
    const char *set = iso == db->opts.isolation ? NULL : txo__db_isolation_sql(iso, false);
    /* No START TRANSACTION: autocommit is off, so the first statement of fn starts it. */
    return set ? txo__db_raw_query(db, set, err) : 0;
}

int txo_db_transact_opts(struct txo_db *db, enum txo_isolation iso, const struct txo_tx_opts *opts,
                         txo_tx_fn fn, void *arg, struct txo_error *err)
{
    TXO_ASSERT(!db->in_tx); /* transactions do not nest */
    unsigned max_attempts = db->opts.tx_max_attempts;
    unsigned no_retry = 0;
    if (opts) {
        if (opts->max_attempts > 0)
            max_attempts = opts->max_attempts;
        no_retry = opts->no_retry;
    }
    if (no_retry & ~(unsigned)TX_OUTCOMES_ALL)
        return txo_error_set(err, TXO_EINVAL, "txo_db_transact_opts: unknown no_retry flags %#x",
                             no_retry & ~(unsigned)TX_OUTCOMES_ALL);
    int rc = 0;
    for (unsigned attempt = 1;; attempt++) {
        bool failed_in_fn = false;
        db->server_unavailable = false;
        rc = txo__db_ensure_connected(db, err);
        if (rc == 0)
            rc = begin(db, iso, err);
        if (rc == 0) {
            db->in_tx = true;
            rc = fn(&db->tx, arg, err);
            db->in_tx = false;
            failed_in_fn = rc != 0;
            if (rc == 0) {
                if (mysql_commit(db->conn) == 0) {
                    atomic_fetch_add(&txo__db_counters.tx_commits, 1);
                    return 0;
                }
                rc = txo__db_conn_error(db, "COMMIT", err);
                if (rc == TXO_ECONNLOST) {
                    txo_error_wrap(err, "commit outcome unknown");
                    return rc;
                }
            }
            if (!db->broken && db->conn && mysql_rollback(db->conn) != 0)
                db->broken = true; /* cannot trust the session any more: start afresh */
        }
        unsigned outcome = retry_outcome(db, rc);
        if (outcome == 0 || (failed_in_fn && (no_retry & outcome)) || attempt >= max_attempts)
            return rc;
        atomic_fetch_add(&txo__db_counters.tx_retries, 1);
        int64_t delay = txo_backoff_delay_ms(&db->opts.tx_backoff, attempt, txo_rand01());
        TXO_LOG(db->unreachable ? TXO_LOG_DEBUG : TXO_LOG_WARN, "db", "transaction retry",
                TXO_KV_U64("attempt", attempt), TXO_KV_I64("delay_ms", delay),
                TXO_KV_STR("error", txo_err_name(rc)));
        txo_sleep_ms(delay);
    }
}

int txo_db_transact(struct txo_db *db, enum txo_isolation iso, txo_tx_fn fn, void *arg,
                    struct txo_error *err)
{
    return txo_db_transact_opts(db, iso, NULL, fn, arg, err);
}

struct one_stmt {
    const char *sql;
    const struct txo_param *params;
    size_t n;
    struct txo_exec_result *res;
    struct txo_rows **rows;
};

static int run_one(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct one_stmt *o = arg;
    if (o->rows) {
        txo_rows_free(*o->rows); /* from an earlier attempt */
        *o->rows = NULL;
        return txo_tx_query(tx, o->sql, o->params, o->n, o->rows, err);
    }
    return txo_tx_exec(tx, o->sql, o->params, o->n, o->res, err);
}

int txo_db_exec(struct txo_db *db, const char *sql, const struct txo_param *params, size_t n_params,
                struct txo_exec_result *res, struct txo_error *err)
{
    struct one_stmt o = {sql, params, n_params, res, NULL};
    return txo_db_transact(db, TXO_ISO_READ_COMMITTED, run_one, &o, err);
}

int txo_db_query(struct txo_db *db, const char *sql, const struct txo_param *params,
                 size_t n_params, struct txo_rows **out, struct txo_error *err)
{
    struct txo_rows *rows = NULL;
    struct one_stmt o = {sql, params, n_params, NULL, &rows};
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, run_one, &o, err);
    if (rc < 0) {
        txo_rows_free(rows);
        return rc;
    }
    *out = rows;
    return 0;
}
