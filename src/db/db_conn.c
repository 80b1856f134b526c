/*
 * The connection: opening and closing a struct txo_db, the session set-up every (re)connect
 * runs, the host list and its failover, reconnecting a connection that was lost, and the
 * connection-level calls of db.h (ping, readiness, server facts, txo_db_exec_raw).
 *
 * Several servers (opts.host "a:3321,b:3322,c:3323", the nodes of a Galera cluster): a connect
 * tries them in order from the one used last, so a lost connection or a node that left the
 * primary component moves the session to the next node at the following reconnect. A Galera
 * node is used only while it is in the primary component (wsrep_ready ON,
 * wsrep_cluster_status Primary), checked at every connect and by txo_db_check_ready().
 *
 * Invariants: the client's auto-reconnect is never on, so a lost connection cannot silently
 * drop an open transaction; a connection marked broken is closed and opened again (with an
 * empty statement cache) before its next use, never reused. autocommit is off on every
 * session. The struct owns copies of every string of its opts; the password copy is wiped on
 * close.
 *
 * Thread-safety: a struct txo_db is used by one thread at a time.
 */
#include "core/common.h"

#include <errmsg.h>
#include <mysqld_error.h>
#include <ctype.h>
#include <strings.h>

#include "db/db_internal.h"

/* Session set-up run after every (re)connect. Constant text; values are bound. */
#define SQL_SET_SQL_MODE                                                                           \
    "SET SESSION sql_mode = 'STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,"                        \
    "NO_ZERO_DATE,NO_ZERO_IN_DATE,NO_ENGINE_SUBSTITUTION'"
#define SQL_SET_TIME_ZONE "SET SESSION time_zone = '+00:00'"
#define SQL_SET_LOCK_WAIT "SET SESSION innodb_lock_wait_timeout = ?"
#define SQL_SET_SYNC_WAIT "SET SESSION wsrep_sync_wait = 7"

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

static void disconnect(struct txo_db *db)
{
    txo__db_stmt_cache_clear(db);
    if (db->conn) {
        mysql_close(db->conn);
        db->conn = NULL;
    }
    db->in_tx = false;
    db->raw_tx = false;
}

int txo__db_raw_query(struct txo_db *db, const char *sql, struct txo_error *err)
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
        rc = txo__db_raw_query(db, SQL_SET_SYNC_WAIT, err);
    if (rc == 0)
        rc = txo__db_raw_query(db, SQL_SET_SQL_MODE, err);
    if (rc == 0)
        rc = txo__db_raw_query(db, SQL_SET_TIME_ZONE, err);
    if (rc == 0 && txo__db_isolation_sql(o->isolation, true))
        rc = txo__db_raw_query(db, txo__db_isolation_sql(o->isolation, true), err);
    if (rc == 0) {
        struct txo_param p = txo_p_i64(o->lock_wait_timeout_s);
        rc = txo__db_exec(db, SQL_SET_LOCK_WAIT, &p, 1, NULL, err);
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
                TXO_LOG(TXO_LOG_WARN, "db", "failed over",
                        TXO_KV_STR("host", db->endpoints[k].host),
                        TXO_KV_U64("port", db->endpoints[k].port),
                        TXO_KV_STR("from_host", db->endpoints[first].host),
                        TXO_KV_U64("from_port", db->endpoints[first].port),
                        TXO_KV_STR("database", db->database));
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
    txo__wipe_free(db->password);
    txo_free(db->database);
    txo_free(db->unix_socket);
    txo_free(db->ssl_ca);
    txo_free(db->ssl_cert);
    txo_free(db->ssl_key);
    txo_free(db);
}

int txo__db_ensure_connected(struct txo_db *db, struct txo_error *err)
{
    if (db->conn && !db->broken)
        return 0;
    disconnect(db);
    TXO_LOG(db->unreachable ? TXO_LOG_DEBUG : TXO_LOG_WARN, "db", "reconnecting",
            TXO_KV_STR("database", db->database));
    int rc = connect_session(db, err);
    if (rc < 0 && !db->unreachable) {
        db->unreachable = true;
        TXO_LOG(TXO_LOG_WARN, "db", "database unreachable; retrying, quietly until it answers",
                TXO_KV_STR("database", db->database), TXO_KV_STR("error", txo_err_name(rc)));
    } else if (rc == 0 && db->unreachable) {
        db->unreachable = false;
        TXO_LOG(TXO_LOG_WARN, "db", "reconnected", TXO_KV_STR("database", db->database));
    }
    return rc;
}

int txo_db_ping(struct txo_db *db, struct txo_error *err)
{
    int rc = txo__db_ensure_connected(db, err);
    if (rc < 0)
        return rc;
    if (mysql_ping(db->conn) != 0) {
        rc = txo__db_conn_error(db, "ping", err);
        if (rc == TXO_ECONNLOST || rc == TXO_EDB) {
            db->broken = true;
            rc = txo__db_ensure_connected(db, err);
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
    int rc = txo__db_ensure_connected(db, err);
    if (rc < 0)
        return rc;
    rc = txo__db_raw_query(db, sql, err);
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
