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
# Brokers:
#   nats      nats-server with JetStream ($TXO_NATS_SERVER names another binary)
#   kafka     txo-kafka-mock, librdkafka's mock cluster in a process (Debian has no Kafka
#             server; in memory, random ports: PORT does not apply): $TXO_KAFKA_MOCK, else
#             txo-kafka-mock next to $TXO_BIN (default build/)
#   redis     redis-server with appendonly yes, appendfsync always ($TXO_REDIS_SERVER)
#   rabbitmq  rabbitmq-server with its own node name, epmd, ports and files under DIR, no
#             plugins, and a queue txo.events.all bound to every event ($TXO_RABBITMQ_SERVER
#             names another start script)
#   grpc      the EventSink server of the tests (tests/grpc/event_sink_server.py, python3-grpcio),
#             recording what it receives in DIR/record.jsonl: a stand-in for a team's own
#             service, for the relay benchmarks (gRPC has no consuming side: no `txo up`)
# The output of the broker goes to DIR/server.log.
set -euo pipefail

log() { printf 'broker.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

NAMES="nats kafka redis rabbitmq grpc"

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

start_redis() {
    local dir=$1 port=$2 bin
    bin="${TXO_REDIS_SERVER:-}"
    [ -n "$bin" ] || bin="$(find_bin redis-server)" || die "redis-server not installed: make deps"
    "$bin" --port "$port" --bind 127.0.0.1 --dir "$dir" --appendonly yes --appendfsync always \
        --save '' --daemonize no >"$dir/server.log" 2>&1 &
    echo $! >"$dir/pid"
    wait_port "$port" 10 || die "redis-server did not answer on $port (log: $dir/server.log)"
    printf -- '--redis-url\nredis://127.0.0.1:%s/0\n' "$port"
}
default_port_redis=6380

# RabbitMQ: epmd (the Erlang port mapper) and the node get their own ports, so nothing is
# shared with a broker the machine may run; the start script execs the VM (the pid is the
# broker), and SIGTERM is its clean shutdown. Boots in several seconds.
start_rabbitmq() {
    local dir=$1 port=$2 bin epmd dist epmd_port
    bin="${TXO_RABBITMQ_SERVER:-/usr/lib/rabbitmq/bin/rabbitmq-server}"
    [ -x "$bin" ] || die "rabbitmq-server not installed: make deps"
    epmd="$(find_bin epmd || true)"
    [ -n "$epmd" ] || epmd=/usr/lib/erlang/bin/epmd
    [ -x "$epmd" ] || die "epmd not found (erlang-base)"
    dist="$(free_port_from $((port + 20000)))"
    epmd_port="$(free_port_from $((port + 19000)))"
    mkdir -p "$dir/mnesia" "$dir/log"
    printf 'listeners.tcp.default = 127.0.0.1:%s\n' "$port" >"$dir/rabbitmq.conf"
    printf '[].\n' >"$dir/enabled_plugins"
    "$epmd" -port "$epmd_port" -address 127.0.0.1 >>"$dir/server.log" 2>&1 &
    echo $! >"$dir/epmd.pid"
    env HOME="$dir" RABBITMQ_NODENAME="txo-run-$port@localhost" RABBITMQ_NODE_PORT="$port" \
        RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_DIST_PORT="$dist" ERL_EPMD_PORT="$epmd_port" \
        RABBITMQ_MNESIA_BASE="$dir/mnesia" RABBITMQ_LOG_BASE="$dir/log" \
        RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf" RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" \
        RUNNING_UNDER_SYSTEMD=1 NOTIFY_SOCKET= "$bin" >>"$dir/server.log" 2>&1 </dev/null &
    echo $! >"$dir/pid"
    wait_port "$port" 120 || die "rabbitmq-server did not answer on $port (log: $dir/server.log)"
    # Every event is kept in one queue (as a NATS stream keeps them): published with mandatory
    # on, an event no queue is bound for would otherwise fail (txo/rabbitmq.h).
    local url="amqp://guest:guest@127.0.0.1:$port/"
    /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/../tests/support/rabbit_client.py" \
        declare "$url" txo.events.all txo.events '#' 1000000 >>"$dir/server.log" 2>&1 ||
        die "declaring the queue txo.events.all failed (python3-pika: make deps; log: $dir/server.log)"
    printf -- '--rabbitmq-url\n%s\n' "$url"
}
default_port_rabbitmq=5673
# After the broker: its epmd.
stop_rabbitmq() {
    local pid
    [ -f "$1/epmd.pid" ] || return 0
    pid="$(cat "$1/epmd.pid")"
    kill -TERM "$pid" 2>/dev/null || true
    rm -f "$1/epmd.pid"
}

# Kafka: the mock cluster prints its bootstrap servers on its first line of output.
start_kafka() {
    local dir=$1 bin i
    bin="${TXO_KAFKA_MOCK:-$(dirname "${TXO_BIN:-$(dirname "${BASH_SOURCE[0]}")/../build/txo}")/txo-kafka-mock}"
    [ -x "$bin" ] || die "no txo-kafka-mock at $bin (make build)"
    "$bin" --brokers 3 >"$dir/bootstrap" 2>"$dir/server.log" </dev/null &
    echo $! >"$dir/pid"
    for i in $(seq 100); do
        [ -s "$dir/bootstrap" ] && break
        sleep 0.1
    done
    [ -s "$dir/bootstrap" ] || die "txo-kafka-mock printed no bootstrap servers (log: $dir/server.log)"
    printf -- '--kafka-brokers\n%s\n' "$(head -1 "$dir/bootstrap")"
}
default_port_kafka=9092

# gRPC: the Python classes of the contract generated with protoc, then the recording server.
start_grpc() {
    local dir=$1 port=$2 root
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    command -v protoc >/dev/null || die "protoc not installed (protobuf-compiler): make deps"
    mkdir -p "$dir/pb2"
    protoc --proto_path="$root/proto" --python_out="$dir/pb2" txo/v1/event_sink.proto \
        >>"$dir/server.log" 2>&1 || die "protoc failed (log: $dir/server.log)"
    /usr/bin/python3 "$root/tests/grpc/event_sink_server.py" --port "$port" --pb2-dir "$dir/pb2" \
        --record "$dir/record.jsonl" >>"$dir/server.log" 2>&1 </dev/null &
    echo $! >"$dir/pid"
    wait_port "$port" 20 || die "the EventSink server did not answer on $port (log: $dir/server.log)"
    printf -- '--grpc-target\n127.0.0.1:%s\n' "$port"
}
default_port_grpc=50061

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
    log "$name started, pid $(cat "$dir/pid") (log: $dir/server.log)"
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
    if declare -F "stop_$name" >/dev/null; then "stop_$name" "$dir"; fi
}

case "${1:-}" in
start) [ $# -ge 3 ] || die "usage: $0 start NAME DIR [PORT]"; cmd_start "$2" "$3" "${4:-}" ;;
stop) [ $# -eq 3 ] || die "usage: $0 stop NAME DIR"; cmd_stop "$2" "$3" ;;
names) echo "$NAMES" ;;
*) die "usage: $0 start NAME DIR [PORT] | stop NAME DIR | names" ;;
esac
