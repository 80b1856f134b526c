/*
 * Private to src/db: what its files share. Only src/db includes <mysql.h>.
 *
 * Why the module exists: every other module reaches MySQL only through here, so the rules that
 * keep data safe live in one place: bound parameters only, no client auto-reconnect, explicit
 * transactions, and the whole transaction retried on deadlock (1213, also a Galera
 * certification failure at COMMIT), lock wait timeout (1205), lost connection (2006/2013) and a
 * Galera node outside the primary component (1047; 1180 at COMMIT).
 *
 * The files, one job each:
 *   db_conn.c      open/close, session set-up, host list and failover, reconnect
 *   db_stmt.c      the prepared statement cache, binding, executing (txo_tx_exec)
 *   db_rows.c      buffered query results (txo_tx_query, txo_rows_*)
 *   db_tx.c        txo_db_transact and its retry loop, txo_db_exec/txo_db_query
 *   db_error.c     errno to TXO_E* codes, error details, the txo_db_get_stats counters
 *   db_sql_list.c  IN lists and multi-row VALUES with generated placeholder counts
 *   db_binlog.c    the binary log read as a replication client (binlog_stream.h), with
 *                  binlog_rows.c decoding its row images
 *   pool.c         the connection pool; migrate.c (with sql_normalize.c) schema migrations
 */
#ifndef TXO_DB_INTERNAL_H
#define TXO_DB_INTERNAL_H

#include <mysql.h>
#include <stdatomic.h>

#include "core/common.h"
#include "db/rows_build.h"

/* One cached prepared statement, keyed by its SQL text. */
struct stmt_entry {
    char *sql;
    size_t sql_len;
    uint64_t hash;
    MYSQL_STMT *stmt;
};

struct txo_tx {
    struct txo_db *db;
};

/* One server of opts.host's list ("a:3321,b:3322"), tried in order on connect. */
struct db_endpoint {
    char *host;
    unsigned port;
};

#define DB_MAX_ENDPOINTS 16

struct txo_db {
    MYSQL *conn; /* NULL while disconnected */
    bool broken; /* the connection was lost: reconnect before the next use */
    /* The last reconnect failed: the server is down. Further attempts and the retries they
     * cause are logged at debug level until one succeeds, so an outage is one warning and one
     * "reconnected" line, not one line per retry of every transaction. */
    bool unreachable;
    bool in_tx; /* inside txo_db_transact's callback */
    /* The server answered TXO_EUNAVAILABLE (a Galera node outside the primary component) in
     * this attempt: txo_db_transact retries it, unlike a TXO_EUNAVAILABLE the transaction's
     * body returns for a service of its own, which is the caller's to handle. */
    bool server_unavailable;
    bool raw_tx; /* a START TRANSACTION sent through txo_db_exec_raw is open */
    struct txo_db_opts opts;
    /* Owned copies of the strings of opts; the password is wiped on close. */
    char *host, *user, *password, *database, *unix_socket;
    char *ssl_ca, *ssl_cert, *ssl_key;
    struct db_endpoint endpoints[DB_MAX_ENDPOINTS]; /* parsed from host; [0..n_endpoints) */
    size_t n_endpoints;
    size_t cur_endpoint; /* the one connected to, or tried first on the next connect */
    /* The server is a Galera node (wsrep_provider_name set): a connect and
     * txo_db_check_ready() also check it is in the primary component. */
    bool is_galera;
    struct stmt_entry *stmts; /* open-addressing table, capacity n_slots (power of two) */
    size_t n_slots, n_stmts;
    struct txo_tx tx;
    unsigned long server_version;
    bool is_mariadb;
};

/* The process-wide counters behind txo_db_get_stats() (db.h's struct txo_db_stats). */
struct db_counters {
    _Atomic uint64_t deadlocks;
    _Atomic uint64_t lock_timeouts;
    _Atomic uint64_t conn_lost;
    _Atomic uint64_t tx_retries;
    _Atomic uint64_t tx_commits;
    _Atomic uint64_t not_primary;
};
extern struct db_counters txo__db_counters;

/* ---- errors (db_error.c) ---- */

/* Maps a MySQL client/server errno to a TXO_E* code (and counts deadlocks etc.). */
int txo__db_map_errno(unsigned mysql_errno);

/* Fills err from the connection's last error and returns the mapped code; marks the
 * connection broken when it was lost. `what` names the operation for the message. */
int txo__db_conn_error(struct txo_db *db, const char *what, struct txo_error *err);

/* The same for an error of a prepared statement; the message names the statement by sql. */
int txo__db_stmt_error(struct txo_db *db, MYSQL_STMT *stmt, const char *sql, struct txo_error *err);

/* ---- connection (db_conn.c) ---- */

/* Reconnects when the connection is missing or was marked broken; 0 when it is usable. A
 * server that stays down is logged once as unreachable and once when it answers again. */
int txo__db_ensure_connected(struct txo_db *db, struct txo_error *err);

/* Runs one statement over the text protocol on the open connection (session set-up,
 * SET TRANSACTION, txo_db_exec_raw) and drains any result. */
int txo__db_raw_query(struct txo_db *db, const char *sql, struct txo_error *err);

/* ---- transactions (db_tx.c) ---- */

/* The SET statement that gives the next transaction (session false) or the session (true)
 * level iso; NULL for TXO_ISO_DEFAULT, which sets nothing. */
const char *txo__db_isolation_sql(enum txo_isolation iso, bool session);

/* ---- statements (db_stmt.c) ---- */

/* Closes every cached prepared statement of db (on disconnect). */
void txo__db_stmt_cache_clear(struct txo_db *db);

/* Binds params to the cached statement for sql (preparing it on first use) and executes it;
 * *out is the statement, its result (if any) not yet read. */
int txo__db_execute(struct txo_db *db, const char *sql, const struct txo_param *params,
                    size_t n_params, MYSQL_STMT **out, struct txo_error *err);

/* Executes a statement that returns no rows; res (may be NULL) receives its counts. */
int txo__db_exec(struct txo_db *db, const char *sql, const struct txo_param *params,
                 size_t n_params, struct txo_exec_result *res, struct txo_error *err);

#endif
