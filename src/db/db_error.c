/*
 * What the server's errors mean: MySQL client and server errnos mapped to TXO_E* codes, the
 * detail written into a struct txo_error, and the process-wide counters of txo_db_get_stats().
 *
 * Why it exists: the statements, the connection and the transaction loop all meet the same
 * errors, and txo_db_transact's retries depend on the mapping (a deadlock must stay
 * TXO_EDEADLOCK, a Galera node outside the primary component TXO_EUNAVAILABLE), so it is
 * written once. A lost connection or an unavailable node marks the connection broken here,
 * which makes the next use reconnect.
 *
 * Thread-safety: the functions touch only the struct txo_db they are given, which one thread
 * uses at a time; the counters are atomics.
 */
#include "core/common.h"

#include <errmsg.h>
#include <mysqld_error.h>
#include <stdatomic.h>

#include "db/db_internal.h"

struct db_counters txo__db_counters;

void txo_db_get_stats(struct txo_db_stats *out)
{
    out->deadlocks = atomic_load(&txo__db_counters.deadlocks);
    out->lock_timeouts = atomic_load(&txo__db_counters.lock_timeouts);
    out->conn_lost = atomic_load(&txo__db_counters.conn_lost);
    out->tx_retries = atomic_load(&txo__db_counters.tx_retries);
    out->tx_commits = atomic_load(&txo__db_counters.tx_commits);
    out->not_primary = atomic_load(&txo__db_counters.not_primary);
}

int txo__db_map_errno(unsigned e)
{
    switch (e) {
    case ER_LOCK_DEADLOCK:
        atomic_fetch_add(&txo__db_counters.deadlocks, 1);
        return TXO_EDEADLOCK;
    case ER_LOCK_WAIT_TIMEOUT:
        atomic_fetch_add(&txo__db_counters.lock_timeouts, 1);
        return TXO_ELOCKTIMEOUT;
    case CR_SERVER_GONE_ERROR:
    case CR_SERVER_LOST:
    case CR_SERVER_LOST_EXTENDED:
    case ER_CONNECTION_KILLED:
    case 4031: /* ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8): disconnected for inactivity */
        atomic_fetch_add(&txo__db_counters.conn_lost, 1);
        return TXO_ECONNLOST;
    case CR_CONNECTION_ERROR:
    case CR_CONN_HOST_ERROR:
    case CR_UNKNOWN_HOST:
        return TXO_ECONNECT;
    case ER_UNKNOWN_COM_ERROR:
        /*
         * 1047: "WSREP has not yet prepared node for application use": a Galera node outside
         * the primary component (partitioned, joining, or its peers gone) refuses every
         * statement that touches a table, COMMIT included; a COMMIT refused so was not
         * replicated, so nothing of the transaction happened. (A plain server sends 1047 only
         * for a protocol command it does not know, which this library never sends.)
         */
        atomic_fetch_add(&txo__db_counters.not_primary, 1);
        return TXO_EUNAVAILABLE;
    case ER_ERROR_DURING_COMMIT:
        /*
         * 1180 "Got error N during COMMIT": on Galera, a COMMIT on a node that left the primary
         * component while the transaction ran ("Error while appending streaming replication
         * fragment (provider status: Not connected to Primary Component)"). The server rolled
         * the transaction back (its write set did not replicate), so it is run again, after
         * a reconnect that may pick another node. From InnoDB the same code means a failed
         * commit too: rolled back, and worth one more try.
         */
        atomic_fetch_add(&txo__db_counters.not_primary, 1);
        return TXO_EUNAVAILABLE;
    case ER_ACCESS_DENIED_ERROR:
    case ER_DBACCESS_DENIED_ERROR:
    case ER_BAD_DB_ERROR:
        return TXO_ECONFIG; /* retrying cannot help: credentials or database name are wrong */
    case ER_DUP_ENTRY:
    case ER_DUP_ENTRY_WITH_KEY_NAME:
        return TXO_EDUPLICATE;
    case 1969: /* ER_STATEMENT_TIMEOUT: the statement's max_statement_time ran out */
        return TXO_ETIMEOUT;
    case ER_ROW_IS_REFERENCED:
    case ER_NO_REFERENCED_ROW:
    case ER_ROW_IS_REFERENCED_2:
    case ER_NO_REFERENCED_ROW_2:
    case ER_BAD_NULL_ERROR:
    case ER_NO_DEFAULT_FOR_FIELD:
    case ER_WARN_DATA_OUT_OF_RANGE:
    case ER_DATA_TOO_LONG:
    case ER_TRUNCATED_WRONG_VALUE_FOR_FIELD:
    case ER_DATA_OUT_OF_RANGE:
    case 4025: /* ER_CONSTRAINT_FAILED (MariaDB CHECK, incl. JSON_VALID of JSON columns) */
    case 3819: /* ER_CHECK_CONSTRAINT_VIOLATED (MySQL 8) */
    case 3140: /* ER_INVALID_JSON_TEXT (MySQL 8) */
        return TXO_ECONSTRAINT;
    default:
        return TXO_EDB;
    }
}

static int set_server_error(struct txo_db *db, int code, unsigned e, const char *state,
                            const char *msg, const char *what, struct txo_error *err)
{
    /* A node outside the primary component stays so for a while: reconnect, maybe elsewhere. */
    if (code == TXO_ECONNLOST || code == TXO_EUNAVAILABLE)
        db->broken = true;
    if (code == TXO_EUNAVAILABLE)
        db->server_unavailable = true;
    if (err) {
        txo_error_set(err, code, "%s: %s (MySQL %u)", what, msg, e);
        err->mysql_errno = e;
        snprintf(err->sqlstate, sizeof(err->sqlstate), "%s", state ? state : "");
    }
    return code;
}

int txo__db_conn_error(struct txo_db *db, const char *what, struct txo_error *err)
{
    unsigned e = mysql_errno(db->conn);
    return set_server_error(db, txo__db_map_errno(e), e, mysql_sqlstate(db->conn),
                            mysql_error(db->conn), what, err);
}

int txo__db_stmt_error(struct txo_db *db, MYSQL_STMT *stmt, const char *sql, struct txo_error *err)
{
    unsigned e = mysql_stmt_errno(stmt);
    char what[160];
    /* Name the statement by its first words: enough to find it in the *_sql.h files. */
    snprintf(what, sizeof(what), "statement \"%.120s\"", sql);
    return set_server_error(db, txo__db_map_errno(e), e, mysql_stmt_sqlstate(stmt),
                            mysql_stmt_error(stmt), what, err);
}
