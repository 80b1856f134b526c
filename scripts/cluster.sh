#!/usr/bin/env bash
# A private three-node MariaDB Galera cluster and a three-node NATS JetStream cluster on
# 127.0.0.1, for the cluster tests (tests/cluster/) and for trying txo on a cluster by hand.
# Nothing here touches a system server; everything lives under TXO_CLUSTER_DIR.
#
#   scripts/cluster.sh up            start what is not running: DB node 1 bootstraps the cluster
#                                    when no node runs, the others join; then the NATS nodes.
#                                    Waits until wsrep_cluster_size=3, every node Synced, and
#                                    JetStream has a meta leader. Creates the app user once.
#   scripts/cluster.sh down          stop the nodes whose pids are in our pid files
#   scripts/cluster.sh status        one line per node; exit 0 when all six run
#   scripts/cluster.sh kill-db N     SIGKILL DB node N (1-3): a crash, not a shutdown
#   scripts/cluster.sh start-db N    start DB node N again; it rejoins (IST from a donor's
#                                    gcache, else a full SST by rsync) and is waited for Synced
#   scripts/cluster.sh stop-db N     shut DB node N down cleanly
#   scripts/cluster.sh kill-nats N   SIGKILL NATS node N
#   scripts/cluster.sh start-nats N  start NATS node N again and wait until it answers
#   scripts/cluster.sh sql N [ARGS]  mariadb client as admin on node N's socket
#   scripts/cluster.sh env           print `export ...` lines for the cluster's hosts and urls
#
# Ports (all on 127.0.0.1), node N = 1..3:
#   SQL      TXO_CLUSTER_SQL_BASE  + N  (default 3320: 3321-3323)
#   Galera   TXO_CLUSTER_GCOMM_BASE + N (default 4570: 4571-4573; group communication)
#   IST      TXO_CLUSTER_IST_BASE  + N  (default 4580: 4581-4583)
#   SST      TXO_CLUSTER_SST_BASE  + N  (default 4590: 4591-4593; rsync daemon while joining)
#   NATS     TXO_CLUSTER_NATS_BASE + N  (default 4230: 4231-4233; clients)
#   routes   TXO_CLUSTER_ROUTE_BASE + N (default 6230: 6231-6233; NATS cluster)
# Other settings: TXO_CLUSTER_DIR (default <repo>/.txo/cluster), MYSQL_USER / MYSQL_PASSWORD /
# MYSQL_DATABASE (default app / secret / appdb; the user also gets ALL on `txo\_%`.*).
#
# Memory is kept small (64 MB buffer pool, 32 MB gcache per node): the cluster shares a small
# machine with everything else.
set -euo pipefail

log() { printf 'cluster.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$SCRIPT_DIR/.." && pwd)"
DIR="${TXO_CLUSTER_DIR:-$REPO_DIR/.txo/cluster}"
case "$DIR" in /*) ;; *) DIR="$PWD/$DIR" ;; esac
SQL_BASE="${TXO_CLUSTER_SQL_BASE:-3320}"
GCOMM_BASE="${TXO_CLUSTER_GCOMM_BASE:-4570}"
IST_BASE="${TXO_CLUSTER_IST_BASE:-4580}"
SST_BASE="${TXO_CLUSTER_SST_BASE:-4590}"
NATS_BASE="${TXO_CLUSTER_NATS_BASE:-4230}"
ROUTE_BASE="${TXO_CLUSTER_ROUTE_BASE:-6230}"
APP_USER="${MYSQL_USER:-app}"
APP_PASSWORD="${MYSQL_PASSWORD:-secret}"
APP_DB="${MYSQL_DATABASE:-appdb}"
NODES=(1 2 3)
GALERA="${TXO_GALERA_PROVIDER:-/usr/lib/galera/libgalera_smm.so}"

unset MYSQL_HOST MYSQL_TCP_PORT MYSQL_UNIX_PORT MYSQL_PWD MYSQL_PORT

if [ "$(id -u)" -eq 0 ]; then ADMIN_USER=root; else ADMIN_USER="$(id -un)"; fi
# As root, the nodes run as an unprivileged user (TXO_CLUSTER_USER, default nobody): the rsync
# daemon that receives a state transfer, started by the joining mariadbd, would otherwise run as
# root and then switch to nobody by default, which cannot write the joiner's root-owned files.
RUN_USER=""
[ "$(id -u)" -eq 0 ] && RUN_USER="${TXO_CLUSTER_USER:-nobody}"
# That user must reach the directory: a checkout under a private home (mode 700) is out of its
# reach, and then the nodes live under /tmp instead, one directory per checkout.
if [ -n "$RUN_USER" ] && [ -z "${TXO_CLUSTER_DIR:-}" ] &&
    ! runuser -u "$RUN_USER" -- test -x "$(dirname "$DIR")" 2>/dev/null; then
    DIR="/tmp/txo-cluster-$(printf '%s' "$REPO_DIR" | sha256sum | cut -c1-12)"
fi

find_bin() {
    local b
    b="$(command -v "$1" 2>/dev/null || true)"
    [ -n "$b" ] || { [ -x "/usr/sbin/$1" ] && b="/usr/sbin/$1"; }
    [ -n "$b" ] || die "$1 not found (run scripts/deps.sh)"
    printf '%s' "$b"
}

alive() {
    local st
    kill -0 "$1" 2>/dev/null || return 1
    st="$(sed -n 's/^[0-9]* (.*) \([A-Za-z]\).*/\1/p' "/proc/$1/stat" 2>/dev/null || true)"
    case "$st" in Z | X | x) return 1 ;; esac
    return 0
}

# $1 = pid file, $2 = expected comm: the live pid, or nothing.
pid_of() {
    local pid comm
    [ -f "$1" ] || return 0
    pid="$(tr -dc '0-9' <"$1" 2>/dev/null || true)"
    [ -n "$pid" ] || return 0
    alive "$pid" || return 0
    comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
    [ "$comm" = "$2" ] && printf '%s' "$pid"
    return 0
}

port_taken() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

check_node() {
    case "${1:-}" in 1 | 2 | 3) ;; *) die "node must be 1, 2 or 3, got '${1:-}'" ;; esac
}

# ---- MariaDB Galera ----

db_dir() { printf '%s/db%s' "$DIR" "$1"; }
db_sock() { # unix socket paths are limited to 107 bytes
    local s
    s="$(db_dir "$1")/mysqld.sock"
    [ "${#s}" -gt 100 ] && s="/tmp/txo-cluster-$(printf '%s' "$DIR" | sha256sum | cut -c1-12)-$1.sock"
    printf '%s' "$s"
}
db_pid() { pid_of "$(db_dir "$1")/mysqld.pid" mariadbd; }
gcomm_list() {
    local n out=""
    for n in "${NODES[@]}"; do out="${out:+$out,}127.0.0.1:$((GCOMM_BASE + n))"; done
    printf '%s' "$out"
}

sql_node() { # $1 = node, rest: mariadb client args
    local n="$1"
    shift
    mariadb --no-defaults --protocol=socket --socket="$(db_sock "$n")" --user="$ADMIN_USER" \
        --connect-timeout=2 "$@"
}

# A status variable of node $1 ($2 = name), empty when the node does not answer.
db_status_var() {
    sql_node "$1" --batch --skip-column-names \
        -e "SHOW GLOBAL STATUS LIKE '$2'" 2>/dev/null | awk '{print $2}' || true
}

db_synced() {
    [ "$(db_status_var "$1" wsrep_local_state_comment)" = Synced ] &&
        [ "$(db_status_var "$1" wsrep_ready)" = ON ]
}

# True when some other node of ours runs and is in the primary component.
primary_peer() {
    local n
    for n in "${NODES[@]}"; do
        [ "$n" = "$1" ] && continue
        [ -n "$(db_pid "$n")" ] || continue
        [ "$(db_status_var "$n" wsrep_cluster_status)" = Primary ] && return 0
    done
    return 1
}

db_init() {
    local n="$1" d
    d="$(db_dir "$n")"
    [ -d "$d/data/mysql" ] && return 0
    log "db$n: initialising datadir $d/data"
    rm -rf "$d/data"
    mkdir -p "$d/data"
    mariadb-install-db --no-defaults --datadir="$d/data" ${RUN_USER:+--user="$RUN_USER"} \
        --auth-root-authentication-method=socket --auth-root-socket-user="$ADMIN_USER" \
        --skip-test-db >"$d/install.log" 2>&1 ||
        { tail -n 20 "$d/install.log" >&2; rm -rf "$d/data"; die "mariadb-install-db failed for db$n"; }
}

# Starts node $1 when not running; bootstraps a new cluster when no other node is primary.
db_start() {
    local n="$1" d pid mariadbd bootstrap=()
    d="$(db_dir "$n")"
    pid="$(db_pid "$n")"
    if [ -n "$pid" ]; then
        log "db$n already running (pid $pid)"
        return 0
    fi
    mkdir -p "$d"
    local p
    for p in $((SQL_BASE + n)) $((GCOMM_BASE + n)) $((IST_BASE + n)) $((SST_BASE + n)); do
        port_taken "$p" && die "db$n: port $p is taken by another program"
    done
    db_init "$n"
    if ! primary_peer "$n"; then
        bootstrap=(--wsrep-new-cluster)
        # After a crash of the whole cluster Galera refuses to bootstrap from a node not marked
        # safe; this node's data is the one we chose to continue from.
        [ -f "$d/data/grastate.dat" ] &&
            sed -i 's/^safe_to_bootstrap: 0/safe_to_bootstrap: 1/' "$d/data/grastate.dat"
        log "db$n: bootstrapping a new cluster"
    fi
    mariadbd="$(find_bin mariadbd)"
    local args=(
        --no-defaults
        --datadir="$d/data"
        --socket="$(db_sock "$n")"
        --port=$((SQL_BASE + n))
        --bind-address=127.0.0.1
        --pid-file="$d/mysqld.pid"
        --log-error="$d/error.log"
        --skip-name-resolve
        --character-set-server=utf8mb4
        --collation-server=utf8mb4_unicode_ci
        --max-connections=300
        --innodb-buffer-pool-size=64M
        --innodb-log-file-size=48M
        --innodb_flush_log_at_trx_commit=1
        --binlog-format=ROW
        # A Galera node logs as if binary logging were on: creating the outbox's sequence
        # trigger (txo migrate) then needs SUPER or this (docs/database.md).
        --log-bin-trust-function-creators=1
        --innodb-autoinc-lock-mode=2
        --default-storage-engine=InnoDB
        --performance-schema=OFF
        --wsrep-on=ON
        --wsrep-provider="$GALERA"
        --wsrep-cluster-name=txo_test_cluster
        --wsrep-cluster-address="gcomm://$(gcomm_list)"
        --wsrep-node-name="db$n"
        --wsrep-node-address="127.0.0.1:$((GCOMM_BASE + n))"
        --wsrep-node-incoming-address="127.0.0.1:$((SQL_BASE + n))"
        --wsrep-sst-receive-address="127.0.0.1:$((SST_BASE + n))"
        --wsrep-provider-options="base_host=127.0.0.1;base_port=$((GCOMM_BASE + n));ist.recv_addr=127.0.0.1:$((IST_BASE + n));gcache.size=32M;gcache.recover=yes;evs.suspect_timeout=PT3S;evs.inactive_timeout=PT6S;evs.install_timeout=PT5S"
        --wsrep-sst-method=rsync
        --wsrep-slave-threads=2
    )
    if [ -n "$RUN_USER" ]; then
        chown -R "$RUN_USER" "$d"
        args+=(--user="$RUN_USER")
    fi
    # After a crash (SIGKILL) grastate.dat says seqno -1: the node does not know how far it got,
    # and without a position it asks for a full state transfer. mysqld_safe recovers the
    # position from InnoDB first (--wsrep-recover); so does this, so the node rejoins by IST.
    local start_pos=()
    if [ -f "$d/data/grastate.dat" ] && grep -q '^seqno: *-1' "$d/data/grastate.dat"; then
        local pos
        rm -f "$d/recover.log"
        "$mariadbd" "${args[@]}" --wsrep-recover --log-error="$d/recover.log" \
            </dev/null >/dev/null 2>&1 || true
        pos="$(sed -n 's/.*WSREP: Recovered position: *\([0-9a-f-]*:[0-9-]*\).*/\1/p' \
            "$d/recover.log" 2>/dev/null | tail -n 1)"
        if [ -n "$pos" ]; then
            log "db$n: recovered position $pos after a crash"
            start_pos=(--wsrep-start-position="$pos")
        fi
    fi
    log "db$n: starting on 127.0.0.1:$((SQL_BASE + n)) (galera $((GCOMM_BASE + n)))"
    (cd / && exec setsid nohup "$mariadbd" "${args[@]}" "${bootstrap[@]}" "${start_pos[@]}" \
        </dev/null >>"$d/mysqld.out" 2>&1) &
    # mariadbd writes its pid file only after a state transfer; ours marks it as started now.
    printf '%s\n' "$!" >"$d/mysqld.pid"
    [ -n "$RUN_USER" ] && chown "$RUN_USER" "$d/mysqld.pid"
    return 0
}

# Waits (up to $2 s) until node $1 is Synced and ready.
db_wait_synced() {
    local n="$1" secs="${2:-120}" i
    for i in $(seq 1 $((secs * 4))); do
        db_synced "$n" && return 0
        if [ $((i % 8)) -eq 0 ] && [ -z "$(db_pid "$n")" ]; then
            tail -n 30 "$(db_dir "$n")/error.log" >&2 || true
            die "db$n exited while starting (log: $(db_dir "$n")/error.log)"
        fi
        sleep 0.25
    done
    tail -n 30 "$(db_dir "$n")/error.log" >&2 || true
    die "db$n not Synced after $secs s (log: $(db_dir "$n")/error.log)"
}

sql_str() {
    local s="${1//\\/\\\\}"
    printf "'%s'" "${s//\'/\'\'}"
}

# Users and grants replicate (Galera replicates the DDL of CREATE USER and GRANT).
ensure_db_and_user() {
    local u p host acct
    u="$(sql_str "$APP_USER")"
    p="$(sql_str "$APP_PASSWORD")"
    {
        printf 'CREATE DATABASE IF NOT EXISTS `%s` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;\n' "$APP_DB"
        for host in localhost 127.0.0.1; do
            acct="$u@'$host'"
            printf 'CREATE USER IF NOT EXISTS %s IDENTIFIED BY %s;\n' "$acct" "$p"
            printf 'GRANT ALL PRIVILEGES ON `%s`.* TO %s;\n' "$APP_DB" "$acct"
            # shellcheck disable=SC2016 # literal backticks
            printf 'GRANT ALL PRIVILEGES ON `txo\\_%%`.* TO %s;\n' "$acct"
            # The readiness probe reads wsrep status variables; nothing else is needed.
        done
    } | sql_node 1 --batch || die "could not create the database and user on db1"
}

db_stop() {
    local n="$1" pid i
    pid="$(db_pid "$n")"
    if [ -z "$pid" ]; then
        rm -f "$(db_dir "$n")/mysqld.pid"
        return 0
    fi
    log "db$n: stopping pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 200); do
        alive "$pid" || break
        sleep 0.15
    done
    if alive "$pid"; then
        log "db$n: still alive after 30 s; SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.5
    fi
    rm -f "$(db_dir "$n")/mysqld.pid"
}

db_kill() {
    local n="$1" pid
    pid="$(db_pid "$n")"
    [ -n "$pid" ] || { log "db$n is not running"; return 0; }
    log "db$n: SIGKILL pid $pid"
    kill -KILL "$pid"
    while alive "$pid"; do sleep 0.05; done
}

# ---- NATS JetStream ----

nats_dir() { printf '%s/nats%s' "$DIR" "$1"; }
nats_pid() { pid_of "$(nats_dir "$1")/nats.pid" nats-server; }
nats_routes() {
    local n out=""
    for n in "${NODES[@]}"; do out="${out:+$out,}nats://127.0.0.1:$((ROUTE_BASE + n))"; done
    printf '%s' "$out"
}

nats_start() {
    local n="$1" d pid bin
    d="$(nats_dir "$n")"
    pid="$(nats_pid "$n")"
    if [ -n "$pid" ]; then
        log "nats$n already running (pid $pid)"
        return 0
    fi
    local p
    for p in $((NATS_BASE + n)) $((ROUTE_BASE + n)); do
        port_taken "$p" && die "nats$n: port $p is taken by another program"
    done
    mkdir -p "$d/store"
    bin="$(find_bin nats-server)"
    log "nats$n: starting on 127.0.0.1:$((NATS_BASE + n)) (routes $((ROUTE_BASE + n)))"
    (cd / && exec setsid nohup "$bin" -a 127.0.0.1 -p $((NATS_BASE + n)) -n "nats$n" \
        -js -sd "$d/store" --cluster_name txo_test_js \
        --cluster "nats://127.0.0.1:$((ROUTE_BASE + n))" --routes "$(nats_routes)" \
        -P "$d/nats.pid" -l "$d/nats.log" </dev/null >>"$d/nats.out" 2>&1) &
}

# The JetStream meta leader as node $1 sees it ("" when none or no answer), read from the
# monitoring-free $JS.API.INFO through a raw NATS protocol exchange.
nats_meta_leader() {
    python3 - "$((NATS_BASE + $1))" <<'EOF' 2>/dev/null || true
import json, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
f = s.makefile("rb")
f.readline()  # INFO
s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB _INBOX.m 1\r\n'
          b'PUB $JS.API.INFO _INBOX.m 0\r\n\r\nPING\r\n')
while True:
    line = f.readline()
    if not line:
        break
    if line.startswith(b"MSG"):
        n = int(line.split()[-1])
        body = json.loads(f.read(n + 2)[:n])
        if "error" not in body:
            print("ok")
        break
EOF
}

nats_wait() { # $1 = node, $2 = seconds: until JetStream answers API requests through it
    local n="$1" secs="${2:-60}" i
    for i in $(seq 1 $((secs * 4))); do
        [ "$(nats_meta_leader "$n")" = ok ] && return 0
        if [ $((i % 8)) -eq 0 ] && [ -z "$(nats_pid "$n")" ]; then
            tail -n 20 "$(nats_dir "$n")/nats.log" >&2 || true
            die "nats$n exited while starting"
        fi
        sleep 0.25
    done
    tail -n 20 "$(nats_dir "$n")/nats.log" >&2 || true
    die "nats$n: JetStream has no meta leader after $secs s"
}

nats_stop() {
    local n="$1" pid i
    pid="$(nats_pid "$n")"
    [ -n "$pid" ] || return 0
    log "nats$n: stopping pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
        alive "$pid" || break
        sleep 0.1
    done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
    rm -f "$(nats_dir "$n")/nats.pid"
}

nats_kill() {
    local n="$1" pid
    pid="$(nats_pid "$n")"
    [ -n "$pid" ] || { log "nats$n is not running"; return 0; }
    log "nats$n: SIGKILL pid $pid"
    kill -KILL "$pid"
    while alive "$pid"; do sleep 0.05; done
}

# ---- commands ----

cmd_up() {
    mkdir -p "$DIR"
    [ -f "$GALERA" ] || die "Galera provider $GALERA not found (package galera-4; run scripts/deps.sh)"
    local n
    # One node at a time: a joiner needs a primary component to join, and two joiners at once
    # would both take a state transfer from the same donor.
    for n in "${NODES[@]}"; do
        db_start "$n"
        db_wait_synced "$n" 180
    done
    ensure_db_and_user
    for n in "${NODES[@]}"; do nats_start "$n"; done
    for n in "${NODES[@]}"; do nats_wait "$n" 60; done
    local size
    size="$(db_status_var 1 wsrep_cluster_size)"
    [ "$size" = 3 ] || die "wsrep_cluster_size is '$size', not 3"
    log "up: Galera $(db_hosts) (cluster size $size, all Synced); JetStream $(nats_urls)"
}

cmd_down() {
    local n
    for n in "${NODES[@]}"; do nats_stop "$n"; done
    # The last node stopped is marked safe to bootstrap from; stop 3, 2, then 1 so that node 1
    # (which `up` starts first) has the newest state.
    for n in 3 2 1; do db_stop "$n"; done
    log "down"
}

db_hosts() {
    local n out=""
    for n in "${NODES[@]}"; do out="${out:+$out,}127.0.0.1:$((SQL_BASE + n))"; done
    printf '%s' "$out"
}
nats_urls() {
    local n out=""
    for n in "${NODES[@]}"; do out="${out:+$out,}nats://127.0.0.1:$((NATS_BASE + n))"; done
    printf '%s' "$out"
}

cmd_status() {
    local n pid all=0
    for n in "${NODES[@]}"; do
        pid="$(db_pid "$n")"
        if [ -n "$pid" ]; then
            echo "db$n   running pid $pid 127.0.0.1:$((SQL_BASE + n)) $(db_status_var "$n" wsrep_cluster_status)" \
                "$(db_status_var "$n" wsrep_local_state_comment) size=$(db_status_var "$n" wsrep_cluster_size)"
        else
            echo "db$n   stopped"
            all=1
        fi
    done
    for n in "${NODES[@]}"; do
        pid="$(nats_pid "$n")"
        if [ -n "$pid" ]; then
            echo "nats$n running pid $pid 127.0.0.1:$((NATS_BASE + n))"
        else
            echo "nats$n stopped"
            all=1
        fi
    done
    return "$all"
}

cmd_env() {
    printf 'export TXO_CLUSTER_DB_HOSTS=%q TXO_CLUSTER_NATS_URLS=%q' "$(db_hosts)" "$(nats_urls)"
    printf ' MYSQL_USER=%q MYSQL_PASSWORD=%q MYSQL_DATABASE=%q\n' "$APP_USER" "$APP_PASSWORD" "$APP_DB"
    printf 'export TXO_CLUSTER_DB_SOCKETS=%q\n' "$(db_sock 1),$(db_sock 2),$(db_sock 3)"
}

usage() { sed -n '2,32p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; }

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    kill-db) check_node "${1:-}"; db_kill "$1" ;;
    stop-db) check_node "${1:-}"; db_stop "$1" ;;
    start-db) check_node "${1:-}"; db_start "$1"; db_wait_synced "$1" 180 ;;
    kill-nats) check_node "${1:-}"; nats_kill "$1" ;;
    start-nats) check_node "${1:-}"; nats_start "$1"; nats_wait "$1" 60 ;;
    sql) check_node "${1:-}"; n="$1"; shift; exec mariadb --no-defaults --protocol=socket \
        --socket="$(db_sock "$n")" --user="$ADMIN_USER" "$@" ;;
    -h | --help | help) usage ;;
    *) usage; exit 2 ;;
esac
