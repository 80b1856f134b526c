/*
 * Database sessions, prepared statements and transactions (include/txo/db.h).
 *
 * Why it exists: every other module reaches MySQL only through here, so the rules that keep
 * data safe live in one place: bound parameters only, no client auto-reconnect, explicit
 * transactions, and the whole transaction retried on deadlock (1213, also a Galera
 * certification failure at COMMIT), lock wait timeout (1205), lost connection (2006/2013) and a
 * Galera node outside the primary component (1047; 1180 at COMMIT).
 *
 * Several servers (opts.host "a:3321,b:3322,c:3323", the nodes of a Galera cluster): a connect
 * tries them in order from the one used last, so a lost connection or a node that left the
 * primary component moves the session to the next node at the following reconnect. A Galera
 * node is used only while it is in the primary component (wsrep_ready ON,
 * wsrep_cluster_status Primary), checked at every connect and by txo_db_check_ready().
 *
 * Data: a struct txo_db owns one MYSQL connection and a cache of prepared statements keyed
 * by SQL text (open addressing, FNV-1a hash). Statements are prepared on first use and live
 * until the connection closes or is lost. Query results are buffered whole into one
 * struct txo_rows: a cell table plus one text buffer, every value in the server's text form.
 *
 * Thread-safety: a struct txo_db is used by one thread at a time. The counters of
 * txo_db_get_stats() are process-wide atomics.
 */
#include "core/common.h"

#include <errmsg.h>
#include <mysqld_error.h>
#include <ctype.h>
#include <stdatomic.h>
#include <strings.h>

#include "db/db_internal.h"

/* Session set-up run after every (re)connect. Constant text; values are bound. */
#define SQL_SET_SQL_MODE                                                                           \
    "SET SESSION sql_mode = 'STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,"                        \
    "NO_ZERO_DATE,NO_ZERO_IN_DATE,NO_ENGINE_SUBSTITUTION'"
#define SQL_SET_TIME_ZONE "SET SESSION time_zone = '+00:00'"
#define SQL_SET_LOCK_WAIT "SET SESSION innodb_lock_wait_timeout = ?"
#define SQL_SET_SYNC_WAIT "SET SESSION wsrep_sync_wait = 7"
#define SQL_COMMIT        "COMMIT"
#define SQL_ROLLBACK      "ROLLBACK"

static _Atomic uint64_t stat_deadlocks;
static _Atomic uint64_t stat_lock_timeouts;
static _Atomic uint64_t stat_conn_lost;
static _Atomic uint64_t stat_tx_retries;
static _Atomic uint64_t stat_tx_commits;
static _Atomic uint64_t stat_not_primary;

void txo_db_get_stats(struct txo_db_stats *out)
{
    out->deadlocks = atomic_load(&stat_deadlocks);
    out->lock_timeouts = atomic_load(&stat_lock_timeouts);
    out->conn_lost = atomic_load(&stat_conn_lost);
    out->tx_retries = atomic_load(&stat_tx_retries);
    out->tx_commits = atomic_load(&stat_tx_commits);
    out->not_primary = atomic_load(&stat_not_primary);
}

void txo_db_opts_init(struct txo_db_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->host = "127.0.0.1";
    opts->port = 3306;
    opts->user = "app";
    opts->password = "secret";
    opts->database = "appdb";
    opts->unix_socket = NULL;
    opts->connect_timeout_s = 5;
    opts->read_timeout_s = 30;
    opts->write_timeout_s = 30;
    opts->lock_wait_timeout_s = 10;
    opts->isolation = TXO_ISO_READ_COMMITTED;
    opts->tx_max_attempts = 5;
    opts->tx_backoff.base_ms = 20;
    opts->tx_backoff.max_ms = 1000;
    opts->tx_backoff.jitter = 0.5;
    opts->ssl_mode = TXO_SSL_PREFERRED;
}

/* The names of --mysql-ssl-mode, in enum order. */
static const char *const ssl_mode_names[] = {
    [TXO_SSL_PREFERRED] = "preferred",
    [TXO_SSL_DISABLED] = "disabled",
    [TXO_SSL_REQUIRED] = "required",
    [TXO_SSL_VERIFY_CA] = "verify-ca",
    [TXO_SSL_VERIFY_IDENTITY] = "verify-identity",
};

int txo_db_ssl_mode_parse(const char *text, enum txo_ssl_mode *out)
{
    char norm[32];
    size_t n = text ? strlen(text) : 0;
    if (n == 0 || n >= sizeof(norm))
        return TXO_EINVAL;
    for (size_t i = 0; i <= n; i++)
        norm[i] = text[i] == '_' ? '-' : (char)tolower((unsigned char)text[i]);
    for (size_t i = 0; i < TXO_ARRAY_LEN(ssl_mode_names); i++) {
        if (strcmp(norm, ssl_mode_names[i]) == 0) {
            *out = (enum txo_ssl_mode)i;
            return 0;
        }
    }
    return TXO_EINVAL;
}

const char *txo_db_ssl_mode_name(enum txo_ssl_mode mode)
{
    if ((size_t)mode >= TXO_ARRAY_LEN(ssl_mode_names))
        return "?";
    return ssl_mode_names[mode];
}

struct txo_param txo_p_str(const char *s)
{
    if (!s)
        return txo_p_null();
    return txo_p_strn(s, strlen(s));
}

int txo__db_map_errno(unsigned e)
{
    switch (e) {
    case ER_LOCK_DEADLOCK:
        atomic_fetch_add(&stat_deadlocks, 1);
        return TXO_EDEADLOCK;
    case ER_LOCK_WAIT_TIMEOUT:
        atomic_fetch_add(&stat_lock_timeouts, 1);
        return TXO_ELOCKTIMEOUT;
    case CR_SERVER_GONE_ERROR:
    case CR_SERVER_LOST:
    case CR_SERVER_LOST_EXTENDED:
    case ER_CONNECTION_KILLED:
    case 4031: /* ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8): disconnected for inactivity */
        atomic_fetch_add(&stat_conn_lost, 1);
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
        atomic_fetch_add(&stat_not_primary, 1);
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
        atomic_fetch_add(&stat_not_primary, 1);
        return TXO_EUNAVAILABLE;
    case ER_ACCESS_DENIED_ERROR:
    case ER_DBACCESS_DENIED_ERROR:
    case ER_BAD_DB_ERROR:
        return TXO_ECONFIG; /* retrying cannot help: credentials or database name are wrong */
    case ER_DUP_ENTRY:
    case ER_DUP_ENTRY_WITH_KEY_NAME:
        return TXO_EDUPLICATE;
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

static int stmt_error(struct txo_db *db, MYSQL_STMT *stmt, const char *sql, struct txo_error *err)
{
    unsigned e = mysql_stmt_errno(stmt);
    char what[160];
    /* Name the statement by its first words: enough to find it in the *_sql.h files. */
    snprintf(what, sizeof(what), "statement \"%.120s\"", sql);
    return set_server_error(db, txo__db_map_errno(e), e, mysql_stmt_sqlstate(stmt),
                            mysql_stmt_error(stmt), what, err);
}

/* ---- statement cache ---- */

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static void stmt_cache_clear(struct txo_db *db)
{
    for (size_t i = 0; i < db->n_slots; i++) {
        struct stmt_entry *e = &db->stmts[i];
        if (!e->sql)
            continue;
        if (e->stmt)
            mysql_stmt_close(e->stmt);
        txo_free(e->sql);
    }
    txo_free(db->stmts);
    db->stmts = NULL;
    db->n_slots = 0;
    db->n_stmts = 0;
}

static struct stmt_entry *stmt_slot(struct stmt_entry *slots, size_t n_slots, const char *sql,
                                    size_t len, uint64_t h)
{
    size_t mask = n_slots - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        struct stmt_entry *e = &slots[i];
        if (!e->sql)
            return e;
        if (e->hash == h && e->sql_len == len && memcmp(e->sql, sql, len) == 0)
            return e;
    }
}

static int stmt_cache_grow(struct txo_db *db)
{
    size_t n = db->n_slots ? db->n_slots * 2 : 64;
    struct stmt_entry *slots = txo_calloc(n, sizeof(*slots));
    if (!slots)
        return TXO_ENOMEM;
    for (size_t i = 0; i < db->n_slots; i++) {
        struct stmt_entry *e = &db->stmts[i];
        if (e->sql)
            *stmt_slot(slots, n, e->sql, e->sql_len, e->hash) = *e;
    }
    txo_free(db->stmts);
    db->stmts = slots;
    db->n_slots = n;
    return 0;
}

/* Returns the prepared statement for sql, preparing it on first use on this connection. */
static int stmt_get(struct txo_db *db, const char *sql, MYSQL_STMT **out, struct txo_error *err)
{
    size_t len = strlen(sql);
    uint64_t h = fnv1a(sql, len);
    if ((db->n_stmts + 1) * 10 > db->n_slots * 7 && stmt_cache_grow(db) < 0)
        return txo_error_set(err, TXO_ENOMEM, "statement cache: out of memory");
    struct stmt_entry *e = stmt_slot(db->stmts, db->n_slots, sql, len, h);
    if (e->sql) {
        *out = e->stmt;
        return 0;
    }
    MYSQL_STMT *stmt = mysql_stmt_init(db->conn);
    if (!stmt)
        return txo_error_set(err, TXO_ENOMEM, "mysql_stmt_init: out of memory");
    if (mysql_stmt_prepare(stmt, sql, (unsigned long)len) != 0) {
        int rc = stmt_error(db, stmt, sql, err);
        mysql_stmt_close(stmt);
        return rc;
    }
    char *copy = txo_strndup(sql, len);
    if (!copy) {
        mysql_stmt_close(stmt);
        return txo_error_set(err, TXO_ENOMEM, "statement cache: out of memory");
    }
    e->sql = copy;
    e->sql_len = len;
    e->hash = h;
    e->stmt = stmt;
    db->n_stmts++;
    *out = stmt;
    return 0;
}

/* ---- connection ---- */

static void wipe_free(char *s)
{
    if (!s)
        return;
    volatile char *p = s;
    while (*p)
        *p++ = 0;
    txo_free(s);
}

static void disconnect(struct txo_db *db)
{
    stmt_cache_clear(db);
    if (db->conn) {
        mysql_close(db->conn);
        db->conn = NULL;
    }
    db->in_tx = false;
    db->raw_tx = false;
}

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

static const char *session_isolation_sql(enum txo_isolation iso)
{
    switch (iso) {
    case TXO_ISO_READ_UNCOMMITTED:
        return "SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED";
    case TXO_ISO_READ_COMMITTED:
        return "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";
    case TXO_ISO_REPEATABLE_READ:
        return "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ";
    case TXO_ISO_SERIALIZABLE:
        return "SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE";
    case TXO_ISO_DEFAULT:
        break;
    }
    return NULL;
}

static int raw_query(struct txo_db *db, const char *sql, struct txo_error *err)
{
    if (mysql_real_query(db->conn, sql, (unsigned long)strlen(sql)) != 0) {
        char what[160];
        snprintf(what, sizeof(what), "\"%.120s\"", sql);
        return txo__db_conn_error(db, what, err);
    }
    /* Statements run here return no rows, but drain any result to keep the protocol in sync. */
    MYSQL_RES *res = mysql_store_result(db->conn);
    if (res)
        mysql_free_result(res);
    return 0;
}

static int exec_stmt(struct txo_db *db, const char *sql, const struct txo_param *params,
                     size_t n_params, struct txo_exec_result *res, struct txo_error *err);

/*
 * TLS options for one connection attempt. disabled sets nothing: the client then never asks
 * for TLS. The CA goes only to the modes that verify: with a CA the client library checks the
 * chain, and verify-identity adds the host name check (MYSQL_OPT_SSL_VERIFY_SERVER_CERT).
 * preferred asks for TLS without enforcing it; Connector/C has no option for that (its
 * MYSQL_OPT_SSL_ENFORCE sets both), so it sets the options field the option would set.
 */
static void set_tls_options(MYSQL *conn, const struct txo_db *db)
{
    enum txo_ssl_mode mode = db->opts.ssl_mode;
    if (mode == TXO_SSL_DISABLED)
        return;
    if (db->ssl_cert)
        mysql_optionsv(conn, MYSQL_OPT_SSL_CERT, db->ssl_cert);
    if (db->ssl_key)
        mysql_optionsv(conn, MYSQL_OPT_SSL_KEY, db->ssl_key);
    if (mode >= TXO_SSL_VERIFY_CA)
        mysql_optionsv(conn, MYSQL_OPT_SSL_CA, db->ssl_ca);
    if (mode == TXO_SSL_PREFERRED) {
        conn->options.use_ssl = 1;
        return;
    }
    my_bool enforce = 1;
    my_bool verify = mode == TXO_SSL_VERIFY_IDENTITY;
    mysql_optionsv(conn, MYSQL_OPT_SSL_ENFORCE, &enforce);
    mysql_optionsv(conn, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify);
}

/* The wsrep status variables of a Galera node; empty on any other server. */
#define SQL_WSREP_STATUS                                                                           \
    "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_provider_name', 'wsrep_ready', "            \
    "'wsrep_cluster_status', 'wsrep_local_state_comment')"

/*
 * Reads whether the server is a Galera node and, if so, whether it takes queries: wsrep_ready
 * ON and wsrep_cluster_status Primary. A plain MariaDB has the variables with an empty
 * provider name, MySQL has none. *why (when not ready) names the state for the message.
 */
static int wsrep_state(struct txo_db *db, bool *galera, bool *ready, char *why, size_t why_len,
                       struct txo_error *err)
{
    if (mysql_real_query(db->conn, SQL_WSREP_STATUS, (unsigned long)strlen(SQL_WSREP_STATUS)) != 0)
        return txo__db_conn_error(db, "reading the wsrep status", err);
    MYSQL_RES *res = mysql_store_result(db->conn);
    if (!res)
        return txo__db_conn_error(db, "reading the wsrep status", err);
    char provider[64] = "", ready_s[16] = "", status[32] = "", state[32] = "";
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(res)) != NULL) {
        if (!row[0] || !row[1])
            continue;
        if (strcasecmp(row[0], "wsrep_provider_name") == 0)
            snprintf(provider, sizeof(provider), "%s", row[1]);
        else if (strcasecmp(row[0], "wsrep_ready") == 0)
            snprintf(ready_s, sizeof(ready_s), "%s", row[1]);
        else if (strcasecmp(row[0], "wsrep_cluster_status") == 0)
            snprintf(status, sizeof(status), "%s", row[1]);
        else if (strcasecmp(row[0], "wsrep_local_state_comment") == 0)
            snprintf(state, sizeof(state), "%s", row[1]);
    }
    mysql_free_result(res);
    *galera = provider[0] != '\0';
    *ready = !*galera || (strcasecmp(ready_s, "ON") == 0 && strcmp(status, "Primary") == 0);
    snprintf(why, why_len, "wsrep_cluster_status=%s wsrep_ready=%s wsrep_local_state=%s",
             status[0] ? status : "?", ready_s[0] ? ready_s : "?", state[0] ? state : "?");
    return 0;
}

/* Connects to one server and sets the session up; on failure db->conn stays NULL. */
static int connect_endpoint(struct txo_db *db, const struct db_endpoint *ep, struct txo_error *err)
{
    const struct txo_db_opts *o = &db->opts;
    MYSQL *conn = mysql_init(NULL);
    if (!conn)
        return txo_error_set(err, TXO_ENOMEM, "mysql_init: out of memory");
    unsigned connect_timeout = o->connect_timeout_s;
    unsigned read_timeout = o->read_timeout_s;
    unsigned write_timeout = o->write_timeout_s;
    my_bool reconnect = 0;
    mysql_options(conn, MYSQL_OPT_CONNECT_TIMEOUT, &connect_timeout);
    mysql_options(conn, MYSQL_OPT_READ_TIMEOUT, &read_timeout);
    mysql_options(conn, MYSQL_OPT_WRITE_TIMEOUT, &write_timeout);
    mysql_options(conn, MYSQL_OPT_RECONNECT, &reconnect);
    mysql_options(conn, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    set_tls_options(conn, db);
    if (!db->unix_socket) {
        /*
         * host:port means TCP, also for "localhost" (which the client library would otherwise
         * take as its default unix socket): TLS and its host name check need TCP.
         */
        unsigned protocol = MYSQL_PROTOCOL_TCP;
        mysql_options(conn, MYSQL_OPT_PROTOCOL, &protocol);
    }
    const char *host = db->unix_socket ? NULL : ep->host;
    unsigned port = db->unix_socket ? 0 : ep->port;
    if (!mysql_real_connect(conn, host, db->user, db->password, db->database, port, db->unix_socket,
                            0)) {
        unsigned e = mysql_errno(conn);
        int code = txo__db_map_errno(e);
        if (code != TXO_ECONNECT && code != TXO_ECONNLOST && code != TXO_ECONFIG)
            code = TXO_ECONNECT;
        /* Retrying cannot fix a TLS mismatch or a certificate that does not verify. */
        if (e == CR_SSL_CONNECTION_ERROR)
            code = TXO_ECONFIG;
        /*
         * A server with require_secure_transport=ON answers a plain connection with "Access
         * denied" (1045), which reads like a wrong password: say what else it may mean.
         */
        const char *hint = "";
        if (e == ER_ACCESS_DENIED_ERROR && !db->unix_socket && o->ssl_mode == TXO_SSL_DISABLED)
            hint = " (the connection was not encrypted: a server that requires secure transport "
                   "refuses it this way; set MYSQL_SSL_MODE=required or stricter)";
        if (db->unix_socket)
            txo_error_set(err, code, "cannot connect to MySQL at %s as %s, database %s: %s",
                          db->unix_socket, db->user, db->database, mysql_error(conn));
        else
            txo_error_set(err, code,
                          "cannot connect to MySQL at %s:%u as %s, database %s, ssl mode %s: %s%s",
                          ep->host, ep->port, db->user, db->database,
                          txo_db_ssl_mode_name(o->ssl_mode), mysql_error(conn), hint);
        if (err)
            err->mysql_errno = e;
        mysql_close(conn);
        return code;
    }
    /*
     * Connector/C 3.3 with MYSQL_OPT_SSL_ENFORCE but without certificate verification goes on
     * in plain text when the server offers no TLS, so the modes that require TLS check the
     * session's cipher themselves. The authentication has happened by then (with
     * mysql_native_password only a challenge response goes out); the session is closed at once.
     */
    if (o->ssl_mode >= TXO_SSL_REQUIRED && !db->unix_socket && !mysql_get_ssl_cipher(conn)) {
        txo_error_set(err, TXO_ECONFIG,
                      "cannot connect to MySQL at %s:%u: ssl mode %s but the connection is not "
                      "encrypted (the server offers no TLS)",
                      ep->host, ep->port, txo_db_ssl_mode_name(o->ssl_mode));
        mysql_close(conn);
        return TXO_ECONFIG;
    }
    db->conn = conn;
    db->broken = false;
    db->server_version = mysql_get_server_version(conn);
    db->is_mariadb = strstr(mysql_get_server_info(conn), "MariaDB") != NULL;

    /*
     * A Galera node outside the primary component accepts connections but refuses statements
     * on tables (1047): it counts as unreachable, so that a host list moves on to the next.
     */
    bool ready = true;
    char why[160];
    int rc = wsrep_state(db, &db->is_galera, &ready, why, sizeof(why), err);
    if (rc == 0 && !ready) {
        rc = txo_error_set(err, TXO_ECONNECT,
                           "cannot use MySQL at %s:%u: a Galera node outside the primary "
                           "component (%s)",
                           db->unix_socket ? db->unix_socket : ep->host, ep->port, why);
        if (err)
            err->mysql_errno = ER_UNKNOWN_COM_ERROR;
    }
    /*
     * Causal reads on Galera: a node applies the other nodes' write sets a moment after their
     * COMMIT returned, so a read there could miss a row just committed elsewhere (a worker not
     * finding the order whose event it consumed, a cancel after a POST through another node).
     * wsrep_sync_wait=7 (reads, UPDATE/DELETE, INSERT/REPLACE) makes a statement wait until
     * the node applied what the cluster had committed when it began. Reads alone (1) are not
     * enough: a transaction that starts with an UPDATE (a customer's cancel) then misses the
     * row, and the check is made once per transaction, at its first statement.
     */
    if (rc == 0 && db->is_galera)
        rc = raw_query(db, SQL_SET_SYNC_WAIT, err);
    if (rc == 0)
        rc = raw_query(db, SQL_SET_SQL_MODE, err);
    if (rc == 0)
        rc = raw_query(db, SQL_SET_TIME_ZONE, err);
    if (rc == 0 && session_isolation_sql(o->isolation))
        rc = raw_query(db, session_isolation_sql(o->isolation), err);
    if (rc == 0) {
        struct txo_param p = txo_p_i64(o->lock_wait_timeout_s);
        rc = exec_stmt(db, SQL_SET_LOCK_WAIT, &p, 1, NULL, err);
    }
    /*
     * autocommit stays off: a transaction then starts with its first statement, which saves
     * the START TRANSACTION round trip on every transaction (7 per order saga). The COMMIT
     * closes whatever the SET statements above may have opened, so the next
     * SET TRANSACTION ISOLATION LEVEL applies.
     */
    if (rc == 0 && (mysql_autocommit(conn, 0) != 0 || mysql_commit(conn) != 0))
        rc = txo__db_conn_error(db, "turning autocommit off", err);
    if (rc < 0) {
        txo_error_wrap(err, "setting up the database session");
        disconnect(db);
        /* Whatever failed after the handshake, this server is not usable now: try another. */
        if (rc != TXO_ENOMEM && rc != TXO_ECONFIG && rc != TXO_EINVAL)
            rc = TXO_ECONNECT;
    }
    return rc;
}

/*
 * Connects to the first usable server of the list, starting from the one used last. Stops at
 * a permanent error (credentials, TLS: the nodes of one cluster share them), else returns the
 * last server's error when none answers.
 */
static int connect_session(struct txo_db *db, struct txo_error *err)
{
    size_t n = db->unix_socket ? 1 : db->n_endpoints;
    size_t first = db->cur_endpoint;
    int rc = TXO_ECONNECT;
    for (size_t i = 0; i < n; i++) {
        size_t k = (first + i) % n;
        if (i > 0)
            txo_error_init(err); /* report the last server's failure, not a mix */
        rc = connect_endpoint(db, &db->endpoints[k], err);
        if (rc == 0) {
            if (k != first)
                TXO_LOG(TXO_LOG_WARN, "db", "failed over host=%s:%u from=%s:%u database=%s",
                        db->endpoints[k].host, db->endpoints[k].port, db->endpoints[first].host,
                        db->endpoints[first].port, db->database);
            db->cur_endpoint = k;
            return 0;
        }
        if (rc != TXO_ECONNECT && rc != TXO_ECONNLOST)
            return rc;
    }
    return rc;
}

/*
 * Splits host ("a", "a:3321", "a:3321,b:3322", "[::1]:3321") into db->endpoints; an entry
 * without a port takes default_port. Errors: TXO_EINVAL (empty entry, bad port, too many),
 * TXO_ENOMEM.
 */
static int parse_endpoints(struct txo_db *db, const char *host, unsigned default_port,
                           struct txo_error *err)
{
    const char *p = host;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len == 0)
            return txo_error_set(err, TXO_EINVAL, "database host list \"%s\": an empty entry",
                                 host);
        if (db->n_endpoints == DB_MAX_ENDPOINTS)
            return txo_error_set(err, TXO_EINVAL, "database host list \"%s\": more than %d hosts",
                                 host, DB_MAX_ENDPOINTS);
        const char *name = p;
        size_t name_len = len;
        unsigned port = default_port;
        const char *colon = NULL;
        if (p[0] == '[') { /* [IPv6]:port */
            const char *close = memchr(p, ']', len);
            if (!close)
                return txo_error_set(err, TXO_EINVAL, "database host list \"%s\": no ']'", host);
            name = p + 1;
            name_len = (size_t)(close - p) - 1;
            if (close + 1 < p + len) {
                if (close[1] != ':')
                    return txo_error_set(err, TXO_EINVAL,
                                         "database host list \"%s\": ':' expected after ']'", host);
                colon = close + 1;
            }
        } else {
            const char *c = memchr(p, ':', len);
            /* One colon is host:port; more is a bare IPv6 address. */
            if (c && !memchr(c + 1, ':', (size_t)(p + len - c - 1))) {
                colon = c;
                name_len = (size_t)(c - p);
            }
        }
        if (colon) {
            unsigned long v = 0;
            const char *d = colon + 1;
            if (d == p + len)
                return txo_error_set(err, TXO_EINVAL, "database host list \"%s\": empty port",
                                     host);
            for (; d < p + len; d++) {
                if (*d < '0' || *d > '9' || v > 65535)
                    return txo_error_set(err, TXO_EINVAL, "database host list \"%s\": bad port",
                                         host);
                v = v * 10 + (unsigned long)(*d - '0');
            }
            if (v < 1 || v > 65535)
                return txo_error_set(err, TXO_EINVAL, "database host list \"%s\": bad port", host);
            port = (unsigned)v;
        }
        if (name_len == 0)
            return txo_error_set(err, TXO_EINVAL, "database host list \"%s\": an empty host", host);
        struct db_endpoint *ep = &db->endpoints[db->n_endpoints];
        ep->host = txo_strndup(name, name_len);
        if (!ep->host)
            return txo_error_set(err, TXO_ENOMEM, "txo_db_open: out of memory");
        ep->port = port;
        db->n_endpoints++;
        if (!end)
            return 0;
        p = end + 1;
    }
}

int txo_db_open(const struct txo_db_opts *opts, struct txo_db **out, struct txo_error *err)
{
    if (!opts || !out || !opts->user || !opts->database || (!opts->host && !opts->unix_socket))
        return txo_error_set(err, TXO_EINVAL, "txo_db_open: host, user and database are required");
    if (opts->tx_max_attempts < 1 || opts->connect_timeout_s < 1 || opts->read_timeout_s < 1 ||
        opts->write_timeout_s < 1 || opts->lock_wait_timeout_s < 1)
        return txo_error_set(err, TXO_EINVAL,
                             "txo_db_open: timeouts and tx_max_attempts must be >= 1");
    if ((size_t)opts->ssl_mode >= TXO_ARRAY_LEN(ssl_mode_names))
        return txo_error_set(err, TXO_EINVAL, "txo_db_open: unknown ssl mode %d",
                             (int)opts->ssl_mode);
    bool has_ca = opts->ssl_ca && *opts->ssl_ca;
    bool has_cert = opts->ssl_cert && *opts->ssl_cert;
    bool has_key = opts->ssl_key && *opts->ssl_key;
    if (opts->ssl_mode >= TXO_SSL_VERIFY_CA && !has_ca)
        return txo_error_set(err, TXO_EINVAL,
                             "txo_db_open: ssl mode %s needs the CA certificate (MYSQL_SSL_CA)",
                             txo_db_ssl_mode_name(opts->ssl_mode));
    if (has_cert != has_key)
        return txo_error_set(err, TXO_EINVAL,
                             "txo_db_open: MYSQL_SSL_CERT and MYSQL_SSL_KEY go together");
    struct txo_db *db = txo_calloc(1, sizeof(*db));
    if (!db)
        return txo_error_set(err, TXO_ENOMEM, "txo_db_open: out of memory");
    db->opts = *opts;
    db->host = txo_strdup(opts->host);
    db->user = txo_strdup(opts->user);
    db->password = txo_strdup(opts->password ? opts->password : "");
    db->database = txo_strdup(opts->database);
    db->unix_socket =
        opts->unix_socket && *opts->unix_socket ? txo_strdup(opts->unix_socket) : NULL;
    db->ssl_ca = has_ca ? txo_strdup(opts->ssl_ca) : NULL;
    db->ssl_cert = has_cert ? txo_strdup(opts->ssl_cert) : NULL;
    db->ssl_key = has_key ? txo_strdup(opts->ssl_key) : NULL;
    if ((opts->host && !db->host) || !db->user || !db->password || !db->database ||
        (opts->unix_socket && *opts->unix_socket && !db->unix_socket) || (has_ca && !db->ssl_ca) ||
        (has_cert && !db->ssl_cert) || (has_key && !db->ssl_key)) {
        txo_db_close(db);
        return txo_error_set(err, TXO_ENOMEM, "txo_db_open: out of memory");
    }
    /* The copies are the only strings used from now on. */
    db->opts.host = db->host;
    db->opts.user = db->user;
    db->opts.password = NULL;
    db->opts.database = db->database;
    db->opts.unix_socket = db->unix_socket;
    db->opts.ssl_ca = db->ssl_ca;
    db->opts.ssl_cert = db->ssl_cert;
    db->opts.ssl_key = db->ssl_key;
    db->tx.db = db;
    int rc = 0;
    if (db->host)
        rc = parse_endpoints(db, db->host, opts->port, err);
    if (rc < 0) {
        txo_db_close(db);
        return rc;
    }
    rc = connect_session(db, err);
    if (rc < 0) {
        txo_db_close(db);
        return rc;
    }
    *out = db;
    return 0;
}

void txo_db_close(struct txo_db *db)
{
    if (!db)
        return;
    disconnect(db);
    for (size_t i = 0; i < db->n_endpoints; i++)
        txo_free(db->endpoints[i].host);
    txo_free(db->host);
    txo_free(db->user);
    wipe_free(db->password);
    txo_free(db->database);
    txo_free(db->unix_socket);
    txo_free(db->ssl_ca);
    txo_free(db->ssl_cert);
    txo_free(db->ssl_key);
    txo_free(db);
}

static int ensure_connected(struct txo_db *db, struct txo_error *err)
{
    if (db->conn && !db->broken)
        return 0;
    disconnect(db);
    TXO_LOG(db->unreachable ? TXO_LOG_DEBUG : TXO_LOG_WARN, "db", "reconnecting database=%s",
            db->database);
    int rc = connect_session(db, err);
    if (rc < 0 && !db->unreachable) {
        db->unreachable = true;
        TXO_LOG(TXO_LOG_WARN, "db",
                "database unreachable; retrying, quietly until it answers database=%s error=%s",
                db->database, txo_err_name(rc));
    } else if (rc == 0 && db->unreachable) {
        db->unreachable = false;
        TXO_LOG(TXO_LOG_WARN, "db", "reconnected database=%s", db->database);
    }
    return rc;
}

int txo_db_ping(struct txo_db *db, struct txo_error *err)
{
    int rc = ensure_connected(db, err);
    if (rc < 0)
        return rc;
    if (mysql_ping(db->conn) != 0) {
        rc = txo__db_conn_error(db, "ping", err);
        if (rc == TXO_ECONNLOST || rc == TXO_EDB) {
            db->broken = true;
            rc = ensure_connected(db, err);
        }
    }
    return rc;
}

int txo_db_check_ready(struct txo_db *db, struct txo_error *err)
{
    int rc = txo_db_ping(db, err);
    if (rc < 0 || !db->is_galera)
        return rc;
    bool galera = false, ready = false;
    char why[160];
    rc = wsrep_state(db, &galera, &ready, why, sizeof(why), err);
    if (rc < 0)
        return rc;
    if (!ready) {
        db->broken = true; /* the next use reconnects, to another node of a host list */
        unsigned port = 0;
        const char *host = txo_db_current_host(db, &port);
        rc = txo_error_set(err, TXO_EUNAVAILABLE,
                           "the database server %s:%u is a Galera node outside the primary "
                           "component (%s): it refuses queries",
                           host ? host : db->unix_socket, port, why);
        if (err)
            err->mysql_errno = ER_UNKNOWN_COM_ERROR;
    }
    return rc;
}

bool txo_db_is_galera(struct txo_db *db)
{
    return db->is_galera;
}

const char *txo_db_current_host(struct txo_db *db, unsigned *port)
{
    if (db->unix_socket || db->n_endpoints == 0) {
        if (port)
            *port = 0;
        return NULL;
    }
    const struct db_endpoint *ep = &db->endpoints[db->cur_endpoint];
    if (port)
        *port = ep->port;
    return ep->host;
}

unsigned long txo_db_server_version(struct txo_db *db, bool *is_mariadb)
{
    if (is_mariadb)
        *is_mariadb = db->is_mariadb;
    return db->server_version;
}

bool txo_db_has_skip_locked(struct txo_db *db)
{
    return db->is_mariadb ? db->server_version >= 100600 : db->server_version >= 80001;
}

/* START TRANSACTION / BEGIN / COMMIT / ROLLBACK, which control a transaction themselves. */
static bool is_tx_control(const char *sql)
{
    static const char *const words[] = {"START", "BEGIN", "COMMIT", "ROLLBACK"};
    while (*sql == ' ' || *sql == '\t' || *sql == '\n')
        sql++;
    for (size_t i = 0; i < TXO_ARRAY_LEN(words); i++) {
        size_t n = strlen(words[i]);
        if (strncasecmp(sql, words[i], n) == 0 && !isalpha((unsigned char)sql[n]))
            return true;
    }
    return false;
}

int txo_db_exec_raw(struct txo_db *db, const char *sql, struct txo_error *err)
{
    int rc = ensure_connected(db, err);
    if (rc < 0)
        return rc;
    rc = raw_query(db, sql, err);
    if (rc < 0 || db->in_tx || db->raw_tx) {
        if (rc == 0 && is_tx_control(sql) && strncasecmp(sql, "START", 5) != 0 &&
            strncasecmp(sql, "BEGIN", 5) != 0)
            db->raw_tx = false; /* COMMIT or ROLLBACK ended the caller's transaction */
        return rc;
    }
    if (is_tx_control(sql)) {
        db->raw_tx = strncasecmp(sql, "START", 5) == 0 || strncasecmp(sql, "BEGIN", 5) == 0;
        return 0;
    }
    /* Outside any transaction a statement commits at once, as with autocommit. */
    if (mysql_commit(db->conn) != 0)
        return txo__db_conn_error(db, "COMMIT", err);
    return 0;
}

/* ---- statements ---- */

static int bind_params(MYSQL_STMT *stmt, const char *sql, const struct txo_param *params, size_t n,
                       MYSQL_BIND *binds, unsigned long *lengths, struct txo_error *err)
{
    unsigned long expected = mysql_stmt_param_count(stmt);
    if (expected != n)
        return txo_error_set(err, TXO_EINVAL, "statement \"%.80s\" takes %lu parameters, got %zu",
                             sql, expected, n);
    for (size_t i = 0; i < n; i++) {
        MYSQL_BIND *b = &binds[i];
        memset(b, 0, sizeof(*b));
        switch (params[i].type) {
        case TXO_PARAM_NULL:
            b->buffer_type = MYSQL_TYPE_NULL;
            break;
        case TXO_PARAM_I64:
            b->buffer_type = MYSQL_TYPE_LONGLONG;
            b->buffer = (void *)&params[i].i64;
            break;
        case TXO_PARAM_DOUBLE:
            b->buffer_type = MYSQL_TYPE_DOUBLE;
            b->buffer = (void *)&params[i].f64;
            break;
        case TXO_PARAM_STR:
            b->buffer_type = MYSQL_TYPE_STRING;
            b->buffer = (void *)params[i].str;
            lengths[i] = (unsigned long)params[i].len;
            b->buffer_length = lengths[i];
            b->length = &lengths[i];
            break;
        }
    }
    return 0;
}

#define STACK_PARAMS 16

static int execute(struct txo_db *db, const char *sql, const struct txo_param *params,
                   size_t n_params, MYSQL_STMT **out, struct txo_error *err)
{
    if (db->broken || !db->conn)
        return txo_error_set(err, TXO_ECONNLOST, "connection lost earlier in this transaction");
    MYSQL_STMT *stmt = NULL;
    int rc = stmt_get(db, sql, &stmt, err);
    if (rc < 0)
        return rc;
    MYSQL_BIND stack_binds[STACK_PARAMS];
    unsigned long stack_lengths[STACK_PARAMS];
    MYSQL_BIND *binds = stack_binds;
    unsigned long *lengths = stack_lengths;
    if (n_params > STACK_PARAMS) {
        binds = txo_calloc(n_params, sizeof(*binds));
        lengths = txo_calloc(n_params, sizeof(*lengths));
        if (!binds || !lengths) {
            rc = txo_error_set(err, TXO_ENOMEM, "binding %zu parameters: out of memory", n_params);
            goto out;
        }
    }
    rc = bind_params(stmt, sql, params, n_params, binds, lengths, err);
    if (rc < 0)
        goto out;
    if (n_params > 0 && mysql_stmt_bind_param(stmt, binds) != 0) {
        rc = stmt_error(db, stmt, sql, err);
        goto out;
    }
    if (mysql_stmt_execute(stmt) != 0) {
        rc = stmt_error(db, stmt, sql, err);
        goto out;
    }
    *out = stmt;
out:
    if (binds != stack_binds) {
        txo_free(binds);
        txo_free(lengths);
    }
    return rc;
}

static int exec_stmt(struct txo_db *db, const char *sql, const struct txo_param *params,
                     size_t n_params, struct txo_exec_result *res, struct txo_error *err)
{
    MYSQL_STMT *stmt = NULL;
    int rc = execute(db, sql, params, n_params, &stmt, err);
    if (rc < 0)
        return rc;
    if (res) {
        my_ulonglong affected = mysql_stmt_affected_rows(stmt);
        res->affected_rows = affected == (my_ulonglong)-1 ? 0 : (uint64_t)affected;
        res->insert_id = (uint64_t)mysql_stmt_insert_id(stmt);
    }
    /* A statement that unexpectedly returned rows must not leave them pending. */
    mysql_stmt_free_result(stmt);
    return 0;
}

int txo_tx_exec(struct txo_tx *tx, const char *sql, const struct txo_param *params, size_t n_params,
                struct txo_exec_result *res, struct txo_error *err)
{
    return exec_stmt(tx->db, sql, params, n_params, res, err);
}

/* ---- buffered rows ---- */

struct cell {
    size_t off;
    size_t len;
    bool null;
};

struct txo_rows {
    size_t n_rows, n_cols;
    struct cell *cells; /* n_rows * n_cols */
    char *data;         /* every value, NUL-terminated, at cells[i].off */
};

static int grow(void **buf, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *p = txo_realloc(*buf, n * elem);
    if (!p)
        return TXO_ENOMEM;
    *buf = p;
    *cap = n;
    return 0;
}

/*
 * Puts a cached statement whose result could not be read back to its state after prepare.
 *
 * Why: an error can arrive in the middle of a result set, after the column definitions that
 * mysql_stmt_execute() reads: a SELECT ... FOR UPDATE that waits for a row lock and becomes a
 * deadlock victim (1213) or times out (1205), a server that kills the query, and so on. Then
 * mysql_stmt_store_result() fails, and Connector/C (3.3) marks the connection ready but
 * leaves the statement waiting for its result; mysql_stmt_free_result() then moves it to
 * "fetching". The next mysql_stmt_execute() of that same handle (the retry of the
 * transaction runs the same SQL, so the cache hands out the same handle) first drains the
 * rest of that unbuffered result: it waits for packets the server never sends, before it
 * even sends the execute, until read_timeout (the relay's reclaim hung there). Errors in the
 * reply to the execute itself need nothing: the library puts the handle back to "prepared".
 *
 * mysql_stmt_reset() returns the handle to "prepared" (one COM_STMT_RESET round trip, only on
 * this error path). When that fails too, the session cannot be trusted: it is marked broken,
 * so the next transaction attempt reconnects (which drops every cached statement).
 */
static void forget_failed_result(struct txo_db *db, MYSQL_STMT *stmt)
{
    if (db->broken)
        return; /* reconnecting closes the handle anyway */
    if (mysql_stmt_reset(stmt) != 0)
        db->broken = true;
}

static int fetch_rows(struct txo_db *db, MYSQL_STMT *stmt, const char *sql, struct txo_rows **out,
                      struct txo_error *err)
{
    int rc = 0;
    MYSQL_RES *meta = mysql_stmt_result_metadata(stmt);
    MYSQL_BIND *binds = NULL;
    unsigned long *lengths = NULL;
    my_bool *nulls = NULL;
    char **bufs = NULL;
    struct txo_rows *rows = NULL;
    size_t cells_cap = 0, data_cap = 0, data_len = 0;
    if (!meta)
        return txo_error_set(err, TXO_EINVAL, "statement \"%.80s\" returns no result set", sql);
    size_t n_cols = mysql_num_fields(meta);
    MYSQL_FIELD *fields = mysql_fetch_fields(meta);
    rows = txo_calloc(1, sizeof(*rows));
    binds = txo_calloc(n_cols, sizeof(*binds));
    lengths = txo_calloc(n_cols, sizeof(*lengths));
    nulls = txo_calloc(n_cols, sizeof(*nulls));
    bufs = txo_calloc(n_cols, sizeof(*bufs));
    if (!rows || !binds || !lengths || !nulls || !bufs) {
        rc = txo_error_set(err, TXO_ENOMEM, "buffering a result: out of memory");
        goto out;
    }
    rows->n_cols = n_cols;
    /* max_length makes store_result compute the longest value of each column. */
    my_bool update_max = 1;
    mysql_stmt_attr_set(stmt, STMT_ATTR_UPDATE_MAX_LENGTH, &update_max);
    if (mysql_stmt_store_result(stmt) != 0) {
        rc = stmt_error(db, stmt, sql, err);
        goto out;
    }
    for (size_t c = 0; c < n_cols; c++) {
        /* Numbers and dates are converted to text by the client: 64 bytes hold any of them. */
        size_t cap = fields[c].max_length > 64 ? fields[c].max_length + 1 : 65;
        bufs[c] = txo_malloc(cap);
        if (!bufs[c]) {
            rc = txo_error_set(err, TXO_ENOMEM, "buffering a result: out of memory");
            goto out;
        }
        binds[c].buffer_type = MYSQL_TYPE_STRING;
        binds[c].buffer = bufs[c];
        binds[c].buffer_length = (unsigned long)cap;
        binds[c].length = &lengths[c];
        binds[c].is_null = &nulls[c];
    }
    if (n_cols > 0 && mysql_stmt_bind_result(stmt, binds) != 0) {
        rc = stmt_error(db, stmt, sql, err);
        goto out;
    }
    for (;;) {
        int f = mysql_stmt_fetch(stmt);
        if (f == MYSQL_NO_DATA)
            break;
        if (f == 1) {
            rc = stmt_error(db, stmt, sql, err);
            goto out;
        }
        if (f == MYSQL_DATA_TRUNCATED) {
            rc = txo_error_set(err, TXO_EDB, "statement \"%.80s\": a value was truncated", sql);
            goto out;
        }
        size_t need = (rows->n_rows + 1) * n_cols;
        if (grow((void **)&rows->cells, &cells_cap, need, sizeof(struct cell)) < 0) {
            rc = txo_error_set(err, TXO_ENOMEM, "buffering a result: out of memory");
            goto out;
        }
        for (size_t c = 0; c < n_cols; c++) {
            struct cell *cell = &rows->cells[rows->n_rows * n_cols + c];
            cell->null = nulls[c];
            cell->len = nulls[c] ? 0 : lengths[c];
            if (grow((void **)&rows->data, &data_cap, data_len + cell->len + 1, 1) < 0) {
                rc = txo_error_set(err, TXO_ENOMEM, "buffering a result: out of memory");
                goto out;
            }
            cell->off = data_len;
            if (cell->len)
                memcpy(rows->data + data_len, bufs[c], cell->len);
            rows->data[data_len + cell->len] = '\0';
            data_len += cell->len + 1;
        }
        rows->n_rows++;
    }
    *out = rows;
    rows = NULL;
out:
    mysql_stmt_free_result(stmt);
    if (rc < 0)
        forget_failed_result(db, stmt);
    mysql_free_result(meta);
    if (bufs)
        for (size_t c = 0; c < n_cols; c++)
            txo_free(bufs[c]);
    txo_free(bufs);
    txo_free(binds);
    txo_free(lengths);
    txo_free(nulls);
    txo_rows_free(rows);
    return rc;
}

int txo_tx_query(struct txo_tx *tx, const char *sql, const struct txo_param *params,
                 size_t n_params, struct txo_rows **out, struct txo_error *err)
{
    MYSQL_STMT *stmt = NULL;
    int rc = execute(tx->db, sql, params, n_params, &stmt, err);
    if (rc < 0)
        return rc;
    return fetch_rows(tx->db, stmt, sql, out, err);
}

size_t txo_rows_count(const struct txo_rows *rows)
{
    return rows ? rows->n_rows : 0;
}

size_t txo_rows_columns(const struct txo_rows *rows)
{
    return rows ? rows->n_cols : 0;
}

static const struct cell *cell_at(const struct txo_rows *rows, size_t row, size_t col)
{
    TXO_ASSERT(rows && row < rows->n_rows && col < rows->n_cols);
    return &rows->cells[row * rows->n_cols + col];
}

bool txo_rows_is_null(const struct txo_rows *rows, size_t row, size_t col)
{
    return cell_at(rows, row, col)->null;
}

const char *txo_rows_str(const struct txo_rows *rows, size_t row, size_t col, size_t *len)
{
    const struct cell *c = cell_at(rows, row, col);
    if (len)
        *len = c->len;
    return c->null ? NULL : rows->data + c->off;
}

int64_t txo_rows_i64(const struct txo_rows *rows, size_t row, size_t col)
{
    const char *s = txo_rows_str(rows, row, col, NULL);
    if (!s)
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s)
        return 0;
    return (int64_t)v;
}

double txo_rows_f64(const struct txo_rows *rows, size_t row, size_t col)
{
    const char *s = txo_rows_str(rows, row, col, NULL);
    if (!s)
        return 0.0;
    return strtod(s, NULL);
}

void txo_rows_free(struct txo_rows *rows)
{
    if (!rows)
        return;
    txo_free(rows->cells);
    txo_free(rows->data);
    txo_free(rows);
}

/* ---- IN lists ---- */

size_t txo_sql_in_list_size(size_t n)
{
    size_t size = 1;
    while (size < n)
        size *= 2;
    return size;
}

char *txo_sql_in_list(const char *before, size_t n, const char *after)
{
    size_t lb = strlen(before), la = strlen(after);
    if (n == 0)
        return NULL;
    size_t len = lb + 2 + 2 * n - 1 + la;
    char *s = txo_malloc(len + 1);
    if (!s)
        return NULL;
    char *p = s;
    memcpy(p, before, lb);
    p += lb;
    *p++ = '(';
    for (size_t i = 0; i < n; i++) {
        if (i)
            *p++ = ',';
        *p++ = '?';
    }
    *p++ = ')';
    memcpy(p, after, la);
    p += la;
    *p = '\0';
    return s;
}

char *txo_sql_values_rows_then(const char *before, size_t n_rows, const char *row,
                               const char *after)
{
    if (n_rows == 0)
        return NULL;
    size_t lb = strlen(before), lr = strlen(row), la = strlen(after);
    char *s = txo_malloc(lb + n_rows * (lr + 1) + la + 1);
    if (!s)
        return NULL;
    char *p = s;
    memcpy(p, before, lb);
    p += lb;
    for (size_t i = 0; i < n_rows; i++) {
        if (i)
            *p++ = ',';
        memcpy(p, row, lr);
        p += lr;
    }
    memcpy(p, after, la + 1);
    return s;
}

char *txo_sql_values_rows(const char *before, size_t n_rows, const char *row)
{
    return txo_sql_values_rows_then(before, n_rows, row, "");
}

/* ---- transactions ---- */

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
    return set ? raw_query(db, set, err) : 0;
}

int txo_db_transact(struct txo_db *db, enum txo_isolation iso, txo_tx_fn fn, void *arg,
                    struct txo_error *err)
{
    TXO_ASSERT(!db->in_tx); /* transactions do not nest */
    int rc = 0;
    for (unsigned attempt = 1;; attempt++) {
        db->server_unavailable = false;
        rc = ensure_connected(db, err);
        if (rc == 0)
            rc = begin(db, iso, err);
        if (rc == 0) {
            db->in_tx = true;
            rc = fn(&db->tx, arg, err);
            db->in_tx = false;
            if (rc == 0) {
                if (mysql_commit(db->conn) == 0) {
                    atomic_fetch_add(&stat_tx_commits, 1);
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
        atomic_fetch_add(&stat_tx_retries, 1);
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
