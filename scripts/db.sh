#!/usr/bin/env bash
# A private MariaDB server for development and tests (its own datadir, socket and port;
# never touches a system server).
#
#   scripts/db.sh start     start it (first use: create the datadir), ensure db + user exist
#   scripts/db.sh stop      stop the server whose pid is in our pid file
#   scripts/db.sh status    print running/stopped; exit 0 when running, 1 when not
#   scripts/db.sh env       print `export MYSQL_...` lines:  eval "$(scripts/db.sh env)"
#   scripts/db.sh sql [ARGS...]   mariadb client as the admin user on the private socket
#   scripts/db.sh port      print the port the server runs on (or will run on)
#   scripts/db.sh check     before a build: fail at once, with the command to use instead,
#                           when the port does not match the running server or another
#                           program holds it
#
# Settings (environment):
#   TXO_DB_DIR      server directory           (default: <repo>/.txo/mariadb)
#   TXO_DB_PORT     TCP port on 127.0.0.1      (default: the port the server in TXO_DB_DIR
#                                               runs on or last ran on (TXO_DB_DIR/port),
#                                               else 3307). A port that differs from the
#                                               running server's is refused: one datadir,
#                                               one server, one port.
#   TXO_DB_SOCKET   unix socket path           (default: $TXO_DB_DIR/mysqld.sock, or a short
#                                               path under /tmp when that one is too long)
#   MYSQL_USER      application user           (default: app)
#   MYSQL_PASSWORD  its password               (default: secret)
#   MYSQL_DATABASE  application database       (default: appdb)
# The application user also gets ALL on `txo\_%`.* (test databases txo_test_*, bench txo_bench_*),
# and REPLICATION SLAVE, BINLOG MONITOR to read the binary log (the server writes one, in ROW
# format with full row metadata, for the relay's binlog source). User txo_norepl (same password,
# ALL on `txo\_%`.* only) is the tests' user without those grants.
set -euo pipefail

log() { printf 'db.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$SCRIPT_DIR/.." && pwd)"

DIR="${TXO_DB_DIR:-$REPO_DIR/.txo/mariadb}"
PORT_GIVEN="${TXO_DB_PORT:-}"
PORT="" # resolve_port()
APP_USER="${MYSQL_USER:-app}"
APP_PASSWORD="${MYSQL_PASSWORD:-secret}"
APP_DB="${MYSQL_DATABASE:-appdb}"

# The client tools read these from the environment (MYSQL_HOST would send our admin
# connections over TCP to another server); ours always go through our own socket.
unset MYSQL_HOST MYSQL_TCP_PORT MYSQL_UNIX_PORT MYSQL_PWD MYSQL_PORT

case "$PORT_GIVEN" in *[!0-9]*) die "TXO_DB_PORT must be a number, got '$PORT_GIVEN'" ;; esac

# Make DIR absolute (mariadbd is started from another cwd); it may not exist yet.
case "$DIR" in /*) ;; *) DIR="$PWD/$DIR" ;; esac
DATADIR="$DIR/data"
PIDFILE="$DIR/mysqld.pid"
PORTFILE="$DIR/port" # the port the server last started on
ERRLOG="$DIR/error.log"
OUTLOG="$DIR/mysqld.out"

# Unix socket paths are limited to 107 bytes; fall back to a short, stable path per DIR.
SOCK="${TXO_DB_SOCKET:-$DIR/mysqld.sock}"
if [ -z "${TXO_DB_SOCKET:-}" ] && [ "${#SOCK}" -gt 100 ]; then
    SOCK="/tmp/txo-mysqld-$(printf '%s' "$DIR" | sha256sum | cut -c1-16).sock"
fi

# The admin account: mariadb-install-db --auth-root-authentication-method=socket creates
# root@localhost and <os user>@localhost, both authenticated by unix_socket.
if [ "$(id -u)" -eq 0 ]; then
    ADMIN_USER=root
else
    ADMIN_USER="$(id -un)"
fi

find_bin() { # mariadbd lives in /usr/sbin, which is not on a normal user's PATH
    local b
    b="$(command -v "$1" 2>/dev/null || true)"
    [ -n "$b" ] || { [ -x "/usr/sbin/$1" ] && b="/usr/sbin/$1"; }
    [ -n "$b" ] || die "$1 not found (run scripts/deps.sh)"
    printf '%s' "$b"
}

admin() {
    mariadb-admin --no-defaults --protocol=socket --socket="$SOCK" --user="$ADMIN_USER" "$@"
}
sql_admin() { mariadb --no-defaults --protocol=socket --socket="$SOCK" --user="$ADMIN_USER" "$@"; }

# True when pid is a live process (a zombie, killed but not yet reaped, counts as dead).
alive() {
    local st
    kill -0 "$1" 2>/dev/null || return 1
    st="$(sed -n 's/^[0-9]* (.*) \([A-Za-z]\).*/\1/p' "/proc/$1/stat" 2>/dev/null || true)"
    case "$st" in Z | X | x) return 1 ;; esac
    return 0
}

# The pid in our pid file, when that process is alive and is a mariadbd; empty otherwise.
our_pid() {
    local pid comm
    [ -f "$PIDFILE" ] || return 0
    pid="$(tr -dc '0-9' <"$PIDFILE" 2>/dev/null || true)"
    [ -n "$pid" ] || return 0
    alive "$pid" || return 0
    comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
    case "$comm" in mariadbd | mysqld) printf '%s' "$pid" ;; *) return 0 ;; esac
}

# The port the running server listens on, read from its command line; empty when none runs.
running_port() {
    local pid
    pid="$(our_pid)"
    [ -n "$pid" ] || return 0
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | sed -n 's/^--port=//p' | head -n 1
}

# True when something accepts TCP connections on 127.0.0.1:$1.
port_taken() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# The first port above $1 that nothing listens on.
free_port_after() {
    local p=$(($1 + 1))
    while port_taken "$p"; do p=$((p + 1)); done
    printf '%s' "$p"
}

# PORT: the one given when it matches the running server (else die, naming the right one), the
# running server's, the remembered one, or 3307. strict=0 (stop) takes the running one as is.
resolve_port() {
    local strict="$1" running remembered
    running="$(running_port)"
    remembered=""
    [ -f "$PORTFILE" ] && remembered="$(tr -dc '0-9' <"$PORTFILE")"
    if [ -z "$PORT_GIVEN" ] || [ "$strict" = 0 ]; then
        PORT="${running:-${PORT_GIVEN:-${remembered:-3307}}}"
    elif [ -n "$running" ] && [ "$running" != "$PORT_GIVEN" ]; then
        die "the private server ($DIR) runs on port $running, not $PORT_GIVEN:" \
            "use TXO_DB_PORT=$running (e.g. ${TXO_HINT_CMD:-make test} TXO_DB_PORT=$running)," \
            "or move it: make db-stop, then TXO_DB_PORT=$PORT_GIVEN"
    else
        PORT="$PORT_GIVEN"
    fi
}

pinging() { admin --connect-timeout=2 ping >/dev/null 2>&1; }

is_running() { [ -n "$(our_pid)" ] && pinging; }

wait_for_ping() { # $1 = pid of the starting server (may be empty); up to 30 s
    local pid="${1:-}"
    for _ in $(seq 1 150); do
        pinging && return 0
        if [ -n "$pid" ] && ! alive "$pid" && [ -z "$(our_pid)" ]; then
            return 2 # the server exited
        fi
        sleep 0.2
    done
    return 1
}

sql_str() { # a single-quoted SQL string literal
    local s="${1//\\/\\\\}"
    printf "'%s'" "${s//\'/\'\'}"
}
sql_ident() { # a backtick-quoted SQL identifier
    # shellcheck disable=SC2016 # literal backticks
    printf '`%s`' "${1//\`/\`\`}"
}

ensure_db_and_user() {
    local u p d host acct
    u="$(sql_str "$APP_USER")"
    p="$(sql_str "$APP_PASSWORD")"
    d="$(sql_ident "$APP_DB")"
    {
        printf 'CREATE DATABASE IF NOT EXISTS %s CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;\n' "$d"
        for host in localhost 127.0.0.1; do
            acct="$u@'$host'"
            printf 'CREATE USER IF NOT EXISTS %s IDENTIFIED BY %s;\n' "$acct" "$p"
            printf 'ALTER USER %s IDENTIFIED BY %s;\n' "$acct" "$p"
            printf 'GRANT ALL PRIVILEGES ON %s.* TO %s;\n' "$d" "$acct"
            # Escaped underscore: matches txo_test_*, txo_bench_*, not e.g. "txoXfoo".
            # shellcheck disable=SC2016 # literal backticks
            printf 'GRANT ALL PRIVILEGES ON `txo\\_%%`.* TO %s;\n' "$acct"
            # The relay's binlog source reads the binary log as a replication client; RELOAD
            # lets its tests rotate the log (FLUSH BINARY LOGS).
            printf 'GRANT REPLICATION SLAVE, BINLOG MONITOR, RELOAD ON *.* TO %s;\n' "$acct"
        done
        # A user without the replication grants, for the tests of the binlog source's refusal.
        for host in localhost 127.0.0.1; do
            printf "CREATE USER IF NOT EXISTS 'txo_norepl'@'%s' IDENTIFIED BY %s;\n" "$host" "$p"
            # shellcheck disable=SC2016 # literal backticks
            printf "GRANT ALL PRIVILEGES ON \`txo\\\\_%%\`.* TO 'txo_norepl'@'%s';\n" "$host"
        done
        printf 'FLUSH PRIVILEGES;\n'
    } | sql_admin --batch || die "could not create database/user (see $ERRLOG)"
    log "database $APP_DB and user $APP_USER@localhost/127.0.0.1 ready (also ALL on txo\\_%.*)"
}

show_error_log() {
    if [ -f "$ERRLOG" ]; then
        log "last lines of $ERRLOG:"
        tail -n 30 "$ERRLOG" >&2
    fi
    if [ -s "$OUTLOG" ]; then
        log "last lines of $OUTLOG:"
        tail -n 10 "$OUTLOG" >&2
    fi
}

cmd_start() {
    local pid mariadbd
    mkdir -p "$DIR"

    pid="$(our_pid)"
    if [ -n "$pid" ]; then
        if ! pinging; then
            log "server pid $pid is alive but not answering yet; waiting"
            wait_for_ping "$pid" || { show_error_log; die "server pid $pid does not answer ping"; }
        fi
        log "already running (pid $pid, port $PORT, socket $SOCK)"
        printf '%s\n' "$PORT" >"$PORTFILE"
        ensure_db_and_user
        return 0
    fi
    if [ -f "$PIDFILE" ]; then
        log "removing stale pid file $PIDFILE"
        rm -f "$PIDFILE"
    fi

    if [ ! -d "$DATADIR/mysql" ]; then
        log "initialising datadir $DATADIR"
        rm -rf "$DATADIR"
        mkdir -p "$DATADIR"
        if ! mariadb-install-db --no-defaults --datadir="$DATADIR" \
            --auth-root-authentication-method=socket --auth-root-socket-user="$ADMIN_USER" \
            --skip-test-db >"$DIR/install.log" 2>&1; then
            tail -n 30 "$DIR/install.log" >&2
            rm -rf "$DATADIR"
            die "mariadb-install-db failed (log: $DIR/install.log)"
        fi
    fi

    if port_taken "$PORT"; then
        die "port $PORT is taken by another program: use another one," \
            "e.g. ${TXO_HINT_CMD:-make db} TXO_DB_PORT=$(free_port_after "$PORT")"
    fi
    mariadbd="$(find_bin mariadbd)"
    # Its temporary tables (every information_schema query makes an Aria one) live in a
    # directory of its own, not in the shared /tmp that tests and their children also use.
    mkdir -p "$DIR/tmp"
    local args=(
        --no-defaults
        --datadir="$DATADIR"
        --tmpdir="$DIR/tmp"
        --socket="$SOCK"
        --port="$PORT"
        --bind-address=127.0.0.1
        --pid-file="$PIDFILE"
        --log-error="$ERRLOG"
        --innodb_flush_log_at_trx_commit=1
        --innodb-buffer-pool-size=512M
        --max-connections=500
        --skip-name-resolve
        --character-set-server=utf8mb4
        --collation-server=utf8mb4_unicode_ci
        # The binary log, for the relay's binlog source (docs/binlog.md): row events with
        # every column's name. sync_binlog stays 0 here (the OS flushes it): a test server
        # does not need the log to survive a power cut; production settings are in the doc.
        --log-bin="$DATADIR/binlog"
        --binlog-format=ROW
        --binlog-row-metadata=FULL
        --server-id=1
        --expire-logs-days=1
        # Migrations create triggers as the app user (no SUPER): with the log on, the server
        # asks for this to allow it.
        --log-bin-trust-function-creators=1
    )
    # Extra server options for experiments, e.g. TXO_DB_EXTRA_ARGS="--thread-handling=pool-of-threads".
    if [ -n "${TXO_DB_EXTRA_ARGS:-}" ]; then
        read -r -a extra <<<"$TXO_DB_EXTRA_ARGS"
        args+=("${extra[@]}")
    fi
    # mariadbd refuses to run as root unless told to.
    if [ "$(id -u)" -eq 0 ]; then
        args+=(--user=root)
    fi

    log "starting $mariadbd on 127.0.0.1:$PORT (datadir $DATADIR)"
    # Own session (no terminal, no Ctrl-C from make), all output to files, no inherited pipes.
    (cd / && exec setsid nohup "$mariadbd" "${args[@]}" </dev/null >>"$OUTLOG" 2>&1) &
    pid=$!

    local rc=0
    wait_for_ping "$pid" || rc=$?
    if [ "$rc" -ne 0 ]; then
        show_error_log
        if [ "$rc" -eq 2 ]; then
            die "server exited during startup (port $PORT in use? see $ERRLOG)"
        fi
        die "server did not answer within 30 s (see $ERRLOG)"
    fi
    log "running (pid $(our_pid), port $PORT, socket $SOCK)"
    printf '%s\n' "$PORT" >"$PORTFILE"
    ensure_db_and_user
}

cmd_stop() {
    local pid
    pid="$(our_pid)"
    if [ -z "$pid" ]; then
        log "not running"
        [ -f "$PIDFILE" ] && rm -f "$PIDFILE"
        return 0
    fi
    log "stopping server pid $pid"
    if ! admin --connect-timeout=5 shutdown >/dev/null 2>&1; then
        log "mariadb-admin shutdown failed; sending SIGTERM to $pid"
        kill -TERM "$pid" 2>/dev/null || true
    fi
    for _ in $(seq 1 150); do
        alive "$pid" || break
        sleep 0.2
    done
    if alive "$pid"; then
        log "server pid $pid still alive after 30 s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            alive "$pid" || break
            sleep 0.1
        done
    fi
    rm -f "$PIDFILE"
    log "stopped"
}

cmd_status() {
    local pid
    pid="$(our_pid)"
    if [ -n "$pid" ] && pinging; then
        echo "running (pid $pid, 127.0.0.1:$PORT, socket $SOCK, datadir $DATADIR)"
        return 0
    fi
    if [ -n "$pid" ]; then
        echo "stopped (pid $pid is alive but does not answer)"
    else
        echo "stopped"
    fi
    return 1
}

cmd_env() {
    printf 'export MYSQL_HOST=127.0.0.1 MYSQL_PORT=%q MYSQL_USER=%q MYSQL_PASSWORD=%q MYSQL_DATABASE=%q\n' \
        "$PORT" "$APP_USER" "$APP_PASSWORD" "$APP_DB"
}

cmd_sql() {
    is_running || die "not running (start it with: scripts/db.sh start)"
    exec mariadb --no-defaults --protocol=socket --socket="$SOCK" --user="$ADMIN_USER" "$@"
}

# Fails at once (before a build) when start would fail on the port.
cmd_check() {
    if [ -n "$(our_pid)" ]; then
        return 0 # resolve_port checked that it is ours
    fi
    if port_taken "$PORT"; then
        die "port $PORT is taken by another program (not the private server in $DIR):" \
            "use another one, e.g. ${TXO_HINT_CMD:-make test} TXO_DB_PORT=$(free_port_after "$PORT")"
    fi
}

usage() {
    sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
    stop) resolve_port 0 ;;
    start | status | env | sql | port | check) resolve_port 1 ;;
esac
case "$cmd" in
    start) cmd_start ;;
    port) printf '%s\n' "$PORT" ;;
    check) cmd_check ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) cmd_env ;;
    sql) cmd_sql "$@" ;;
    -h | --help | help) usage ;;
    *) usage; exit 2 ;;
esac
