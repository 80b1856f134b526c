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
 * Thread-safety: a struct txo_db is used by one thread at a time; transactions on it do not
 * nest.
 */
#include "core/common.h"

#include <stdatomic.h>

#include "db/db_internal.h"

static const char *isolation_sql(enum txo_isolation iso)
{
    switch (iso) {
    case TXO_ISO_READ_UNCOMMITTED:
        return "SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED";
    case TXO_ISO_READ_COMMITTED:
        return "SET TRANSACTION ISOLATION LEVEL READ COMMITTED";
    case TXO_ISO_REPEATABLE_READ:
        return "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ";
    case TXO_ISO_SERIALIZABLE:
        return "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE";
    case TXO_ISO_DEFAULT:
        break;
    }
    return NULL;
}

struct txo_db *txo_tx_db(struct txo_tx *tx)
{
    return tx->db;
}

/* Errors a new attempt of the whole transaction may not meet. TXO_EUNAVAILABLE only when the
 * server said it (db->server_unavailable), not when the body returned it. */
static bool retryable(const struct txo_db *db, int rc)
{
    return rc == TXO_EDEADLOCK || rc == TXO_ELOCKTIMEOUT || rc == TXO_ECONNLOST ||
           rc == TXO_ECONNECT || (rc == TXO_EUNAVAILABLE && db->server_unavailable);
}

static int begin(struct txo_db *db, enum txo_isolation iso, struct txo_error *err)
{
    const char *set = iso == db->opts.isolation ? NULL : isolation_sql(iso);
    /* No START TRANSACTION: autocommit is off, so the first statement of fn starts it. */
    return set ? txo__db_raw_query(db, set, err) : 0;
}

int txo_db_transact(struct txo_db *db, enum txo_isolation iso, txo_tx_fn fn, void *arg,
                    struct txo_error *err)
{
    TXO_ASSERT(!db->in_tx); /* transactions do not nest */
    int rc = 0;
    for (unsigned attempt = 1;; attempt++) {
        db->server_unavailable = false;
        rc = txo__db_ensure_connected(db, err);
        if (rc == 0)
            rc = begin(db, iso, err);
        if (rc == 0) {
            db->in_tx = true;
            rc = fn(&db->tx, arg, err);
            db->in_tx = false;
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
        if (!retryable(db, rc) || attempt >= db->opts.tx_max_attempts)
            return rc;
        atomic_fetch_add(&txo__db_counters.tx_retries, 1);
        int64_t delay = txo_backoff_delay_ms(&db->opts.tx_backoff, attempt, txo_rand01());
        TXO_LOG(db->unreachable ? TXO_LOG_DEBUG : TXO_LOG_WARN, "db",
                "transaction retry attempt=%u delay_ms=%" PRId64 " error=%s", attempt, delay,
                txo_err_name(rc));
        txo_sleep_ms(delay);
    }
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
