#!/usr/bin/env bash
# Starts and stops a private broker for `make run BROKER=X` and the benchmarks: its own port,
# its own data directory, nothing shared with a broker the machine may run already.
#
#   scripts/broker.sh start NAME DIR [PORT]   start broker NAME with its data in DIR (on PORT,
#                                             default: the broker's usual port + 1 or the next
#                                             free one), wait until it answers, write its pid
#                                             to DIR/pid and print the `txo` flags that reach it
#                                             (also in DIR/flags), one per line
#   scripts/broker.sh stop NAME DIR           stop what `start` started in DIR (SIGTERM, then
#                                             SIGKILL after 15 s); a no-op when nothing runs
#   scripts/broker.sh names                   the brokers this script can start
#
# Brokers: nats (nats-server with JetStream; $TXO_NATS_SERVER names another binary).
# The output of the broker goes to DIR/server.log.
set -euo pipefail

log() { printf 'broker.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

NAMES="nats"

port_taken() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# The first free port from $1 on.
free_port_from() {
    local p=$1
    while port_taken "$p"; do p=$((p + 1)); done
    printf '%s' "$p"
}

# wait_port PORT SECONDS: until something accepts TCP connections on 127.0.0.1:PORT.
wait_port() {
    local i
    for i in $(seq $(($2 * 10))); do
        port_taken "$1" && return 0
        sleep 0.1
    done
    return 1
}

# find_bin NAME: NAME on PATH or in /usr/sbin, /usr/lib/... .
find_bin() {
    local b
    for b in "$(command -v "$1" 2>/dev/null || true)" "/usr/sbin/$1" "/usr/bin/$1"; do
        [ -n "$b" ] && [ -x "$b" ] && { printf '%s' "$b"; return 0; }
    done
    return 1
}

# ---- one function pair per broker: start_<name> DIR PORT (prints flags), stop hooks ----

start_nats() {
    local dir=$1 port=$2 bin
    bin="${TXO_NATS_SERVER:-}"
    [ -n "$bin" ] || bin="$(find_bin nats-server)" || die "nats-server not installed: make deps"
    mkdir -p "$dir/store"
    "$bin" -js -a 127.0.0.1 -p "$port" -sd "$dir/store" >"$dir/server.log" 2>&1 &
    echo $! >"$dir/pid"
    wait_port "$port" 10 || die "nats-server did not answer on $port (log: $dir/server.log)"
    printf -- '--nats-url\nnats://127.0.0.1:%s\n' "$port"
}
default_port_nats=4223

# ---- commands ----

cmd_start() {
    local name=$1 dir=$2 port=${3:-}
    case " $NAMES " in *" $name "*) ;; *) die "unknown broker '$name' (known: $NAMES)" ;; esac
    mkdir -p "$dir"
    if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
        log "$name already runs in $dir (pid $(cat "$dir/pid"))"
        cat "$dir/flags"
        return 0
    fi
    local def="default_port_$name"
    [ -n "$port" ] || port="$(free_port_from "${!def}")"
    "start_$name" "$dir" "$port" >"$dir/flags"
    log "$name on 127.0.0.1:$port, pid $(cat "$dir/pid") (log: $dir/server.log)"
    cat "$dir/flags"
}

cmd_stop() {
    local name=$1 dir=$2 pid
    [ -f "$dir/pid" ] || return 0
    pid="$(cat "$dir/pid")"
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
        log "$name stopped (pid $pid)"
    fi
    rm -f "$dir/pid"
}

case "${1:-}" in
start) [ $# -ge 3 ] || die "usage: $0 start NAME DIR [PORT]"; cmd_start "$2" "$3" "${4:-}" ;;
stop) [ $# -eq 3 ] || die "usage: $0 stop NAME DIR"; cmd_stop "$2" "$3" ;;
names) echo "$NAMES" ;;
*) die "usage: $0 start NAME DIR [PORT] | stop NAME DIR | names" ;;
esac
