#!/usr/bin/env bash
# Test support: a throw-away MariaDB server of a test's own (its own datadir, socket and TCP
# port; never the shared development server), optionally with TLS, for the tests that need
# server settings or admin rights the shared server does not give: TLS and
# require_secure_transport (test_db_tls.c), users with chosen grants (test_db_grants.c).
#
#   testserver.sh start DIR PORT [tls|plain|binlog]  create DIR, make certificates (tls), start
#   testserver.sh sql DIR [ARGS...]            mariadb client as root on the server's socket
#   testserver.sh crash DIR                    SIGKILL the server, keep DIR (a server crash)
#   testserver.sh restart DIR                  start the server of DIR again (same port, mode)
#   testserver.sh stop DIR                     stop the server and delete DIR
#
# With tls (the default) the server has a certificate for CN=localhost (also DNS localhost)
# signed by DIR/ca.pem, requires secure transport on TCP, and DIR/other-ca.pem is a second CA
# that signed nothing the server uses. binlog writes the binary log as scripts/db.sh does (ROW,
# full row metadata), for the relay's binlog source. Every mode creates the database appdb and
# the user app@'%' (password secret) with ALL on *.*. root is authenticated by unix_socket.
# Start runs mariadb-install-db and mariadbd the way scripts/db.sh does.
set -euo pipefail

die() { printf 'testserver.sh: error: %s\n' "$*" >&2; exit 1; }

unset MYSQL_HOST MYSQL_TCP_PORT MYSQL_UNIX_PORT MYSQL_PWD MYSQL_PORT

cmd="${1:-}"
DIR="${2:-}"
[ -n "$DIR" ] || die "usage: testserver.sh start|sql|stop DIR ..."
SOCK="$DIR/mysqld.sock"
ADMIN_USER="$(id -un)"

sql_admin() { mariadb --no-defaults --protocol=socket --socket="$SOCK" --user="$ADMIN_USER" "$@"; }

find_bin() {
    local b
    b="$(command -v "$1" 2>/dev/null || true)"
    [ -n "$b" ] || { [ -x "/usr/sbin/$1" ] && b="/usr/sbin/$1"; }
    [ -n "$b" ] || die "$1 not found"
    printf '%s' "$b"
}

make_certs() { # a CA, a server certificate it signs, and an unrelated second CA
    local d="$DIR"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=txo test CA" \
        -keyout "$d/ca-key.pem" -out "$d/ca.pem" 2>/dev/null
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=txo other CA" \
        -keyout "$d/other-ca-key.pem" -out "$d/other-ca.pem" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
        -keyout "$d/server-key.pem" -out "$d/server.csr" 2>/dev/null
    printf 'subjectAltName=DNS:localhost\n' >"$d/server.ext"
    openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca-key.pem" \
        -CAcreateserial -days 2 -extfile "$d/server.ext" -out "$d/server.pem" 2>/dev/null
}

cmd_start() {
    local port="${3:-}" mode="${4:-tls}"
    case "$port" in '' | *[!0-9]*) die "PORT must be a number, got '$port'" ;; esac
    case "$mode" in tls | plain | binlog) ;; *) die "unknown mode '$mode'" ;; esac
    rm -rf "$DIR"
    mkdir -p "$DIR/data"
    mariadb-install-db --no-defaults --datadir="$DIR/data" \
        --auth-root-authentication-method=socket --auth-root-socket-user="$ADMIN_USER" \
        --skip-test-db >"$DIR/install.log" 2>&1 || { tail -n 20 "$DIR/install.log" >&2; die "mariadb-install-db failed"; }
    [ "$mode" = tls ] && make_certs
    printf '%s %s\n' "$port" "$mode" >"$DIR/settings"
    launch "$port" "$mode"
    sql_admin --batch -e "CREATE DATABASE appdb CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
        CREATE USER 'app'@'%' IDENTIFIED BY 'secret'; GRANT ALL ON *.* TO 'app'@'%';"
}

# Starts mariadbd on DIR's datadir and waits until it answers.
launch() {
    local port="$1" mode="$2"
    local args=(
        --no-defaults
        --datadir="$DIR/data"
        --socket="$SOCK"
        --port="$port"
        --bind-address=127.0.0.1
        --pid-file="$DIR/mysqld.pid"
        --log-error="$DIR/error.log"
        --innodb-buffer-pool-size=64M
        --skip-name-resolve
        --character-set-server=utf8mb4
        --collation-server=utf8mb4_unicode_ci
    )
    case "$mode" in
        tls) args+=(--ssl-ca="$DIR/ca.pem" --ssl-cert="$DIR/server.pem" --ssl-key="$DIR/server-key.pem"
            --require-secure-transport=ON) ;;
        binlog) args+=(--log-bin="$DIR/data/binlog" --binlog-format=ROW --binlog-row-metadata=FULL
            --server-id=1 --log-bin-trust-function-creators=1) ;;
    esac
    [ "$(id -u)" -eq 0 ] && args+=(--user=root)
    (cd / && exec setsid nohup "$(find_bin mariadbd)" "${args[@]}" </dev/null >>"$DIR/mysqld.out" 2>&1) &
    local pid=$!
    for _ in $(seq 1 150); do
        if mariadb-admin --no-defaults --protocol=socket --socket="$SOCK" --user="$ADMIN_USER" \
            --connect-timeout=2 ping >/dev/null 2>&1; then
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || { tail -n 20 "$DIR/error.log" >&2; die "mariadbd exited (port $port in use?)"; }
        sleep 0.2
    done
    die "mariadbd did not answer within 30 s"
}

server_pid() { [ -f "$DIR/mysqld.pid" ] && tr -dc '0-9' <"$DIR/mysqld.pid"; return 0; }

cmd_crash() {
    local pid
    pid="$(server_pid)"
    [ -n "$pid" ] || die "no pid file in $DIR"
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 150); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    die "mariadbd $pid did not die"
}

cmd_restart() {
    local port mode
    [ -f "$DIR/settings" ] || die "$DIR has no server to restart"
    read -r port mode <"$DIR/settings"
    launch "$port" "$mode"
}

cmd_stop() {
    local pid
    pid="$(server_pid)"
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 150); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    fi
    case "$DIR" in /tmp/*) rm -rf "$DIR" ;; esac
    return 0
}

case "$cmd" in
    start) cmd_start "$@" ;;
    sql) shift 2; sql_admin "$@" ;;
    crash) cmd_crash ;;
    restart) cmd_restart ;;
    stop) cmd_stop ;;
    *) die "unknown command '$cmd'" ;;
esac
