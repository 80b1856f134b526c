/*
 * Private to src/db: the connection struct shared by db.c (sessions, statements,
 * transactions) and migrate.c. Only src/db includes <mysql.h>.
 */
#ifndef TXO_DB_INTERNAL_H
#define TXO_DB_INTERNAL_H

#include <mysql.h>

#include "core/common.h"

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

/* Maps a MySQL client/server errno to a TXO_E* code (and counts deadlocks etc.). */
int txo__db_map_errno(unsigned mysql_errno);

/* Fills err from the connection's last error and returns the mapped code; marks the
 * connection broken when it was lost. `what` names the operation for the message. */
int txo__db_conn_error(struct txo_db *db, const char *what, struct txo_error *err);

#endif
