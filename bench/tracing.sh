#!/usr/bin/env bash
# What exporting spans costs the order service: `txo_bench http` (txo up through its HTTP API)
# with tracing off, with every span exported (--otlp-endpoint to a receiver that takes and
# discards the OTLP requests, --trace-sample-ratio 1), and with the endpoint's port closed
# (every export refused). The three run in turn, off, on, down, off, on, down, ..., so that a
# machine that speeds up or slows down during the session weighs on all three alike; then the
# medians of each and their difference from "off", in %.
#
#   bench/tracing.sh [--orders N] [--runs R] [--connections C] [--up-args "FLAGS"]
#
# --runs R rounds (default 5), each one txo_bench run per configuration of --orders N orders
# (default 5000) on C connections (default: txo_bench's); --up-args are more flags for txo up
# in every configuration. The receiver is tests/support/http_recorder.py --discard; its
# counters give the OTLP requests and kilobytes of each "on" run. Needs the txo_bench
# binary (TXO_BENCH, default build/bench/txo_bench) and the MYSQL_* of the private MariaDB
# (`make bench-tracing` gives both).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH="${TXO_BENCH:-$ROOT/build/bench/txo_bench}"
PYTHON="${TXO_PYTHON:-python3}"
ORDERS=5000
RUNS=5
CONNECTIONS=""
UP_ARGS=""

die() { printf 'tracing.sh: %s\n' "$*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
    --orders) ORDERS="${2:-}"; shift 2 ;;
    --runs) RUNS="${2:-}"; shift 2 ;;
    --connections) CONNECTIONS="${2:-}"; shift 2 ;;
    --up-args) UP_ARGS="${2:-}"; shift 2 ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
    esac
done
[[ "$ORDERS" =~ ^[0-9]+$ ]] && [ "$ORDERS" -ge 1 ] || die "--orders needs a number >= 1"
[[ "$RUNS" =~ ^[0-9]+$ ]] && [ "$RUNS" -ge 1 ] || die "--runs needs a number >= 1"
[ -z "$CONNECTIONS" ] || [[ "$CONNECTIONS" =~ ^[0-9]+$ ]] || die "--connections needs a number"
[ -x "$BENCH" ] || die "no txo_bench at $BENCH (make build)"
command -v "$PYTHON" >/dev/null || die "no $PYTHON for the OTLP receiver"

# A TCP port on 127.0.0.1 that was free a moment ago.
free_port() {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

WORK="$(mktemp -d)"
RECEIVER_PID=""
cleanup() {
    if [ -n "$RECEIVER_PID" ]; then
        kill "$RECEIVER_PID" 2>/dev/null || true
        wait "$RECEIVER_PID" 2>/dev/null || true # its status is SIGTERM's
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

RECEIVER_PORT="$(free_port)"
CLOSED_PORT="$(free_port)"
"$PYTHON" "$ROOT/tests/support/http_recorder.py" --discard "$RECEIVER_PORT" \
    >"$WORK/receiver.log" 2>&1 &
RECEIVER_PID=$!
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$RECEIVER_PORT/stats" >/dev/null 2>&1 && break
    kill -0 "$RECEIVER_PID" 2>/dev/null || die "the OTLP receiver exited: $(cat "$WORK/receiver.log")"
    sleep 0.1
done
curl -sf "http://127.0.0.1:$RECEIVER_PORT/stats" >/dev/null || die "the OTLP receiver does not answer"

# receiver_stat FIELD: the receiver's counter FIELD (posts, bytes).
receiver_stat() {
    curl -sf "http://127.0.0.1:$RECEIVER_PORT/stats" |
        "$PYTHON" -c "import json, sys; print(json.load(sys.stdin)['$1'])"
}

CONFIGS=(off on down)
declare -A FLAGS=(
    [off]=""
    [on]="--otlp-endpoint http://127.0.0.1:$RECEIVER_PORT/v1/traces --trace-sample-ratio 1"
    [down]="--otlp-endpoint http://127.0.0.1:$CLOSED_PORT/v1/traces --trace-sample-ratio 1"
)
# The figures kept per run, in the order of the table: txo_bench's "load" line (accept/s,
# e2e/s, POST p50, POST p99, POST->CONFIRMED p50 and p99, ms) and its txo CPU ms per order.
FIGURES=(accept e2e post50 post99 pc50 pc99 cpu)

# run CONFIG ROUND: one txo_bench http run; appends its figures to $WORK/CONFIG.
run() {
    local config="$1" round="$2" out load cpu
    local args=(http --orders "$ORDERS" --runs 1 --up-args "${FLAGS[$config]} $UP_ARGS")
    [ -z "$CONNECTIONS" ] || args+=(--connections "$CONNECTIONS")
    local posts0 bytes0
    posts0="$(receiver_stat posts)"
    bytes0="$(receiver_stat bytes)"
    out="$("$BENCH" "${args[@]}" 2>"$WORK/bench.err")" ||
        die "txo_bench failed in round $round, tracing $config: $(tail -20 "$WORK/bench.err")"
    load="$(awk '/^load /{getline; print; exit}' <<<"$out")"
    cpu="$(awk '/CPU ms:/{getline; print; exit}' <<<"$out")"
    local _l _c _o accept e2e p50 p99 _a _b _d _e pc50 pc99 txo_ms
    read -r _l _c _o accept e2e p50 p99 _a _b _d _e pc50 pc99 <<<"$load"
    read -r txo_ms _ <<<"$cpu"
    [ -n "$pc99" ] && [ -n "$txo_ms" ] || die "cannot read txo_bench's figures:"$'\n'"$out"
    echo "$accept $e2e $p50 $p99 $pc50 $pc99 $txo_ms" >>"$WORK/$config"
    local posts bytes
    posts=$(($(receiver_stat posts) - posts0))
    bytes=$(($(receiver_stat bytes) - bytes0))
    if [ "$config" = on ]; then
        [ "$posts" -gt 0 ] || die "tracing on, but the receiver got no OTLP request in round $round"
        echo "$posts $((bytes / 1024))" >>"$WORK/otlp"
    fi
    printf '  round %s, tracing %-4s: e2e %s/s, POST p99 %s ms, txo %s CPU ms/order\n' \
        "$round" "$config" "$e2e" "$p99" "$txo_ms" >&2
}

# median FILE COLUMN: the median of the column (1-based) of FILE's lines.
median() {
    awk -v c="$2" '{print $c}' "$1" | sort -g |
        awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

printf '== tracing cost: txo_bench http, %s orders, %s rounds of off, on, down ==\n' "$ORDERS" \
    "$RUNS"
printf '   on: every span to a receiver that discards them; down: every export refused\n'
[ -z "$UP_ARGS" ] || printf '   up args of every configuration: %s\n' "$UP_ARGS"
for round in $(seq "$RUNS"); do
    for config in "${CONFIGS[@]}"; do
        run "$config" "$round"
    done
done

printf '%-8s %9s %8s %9s %9s %9s %9s %9s\n' tracing accept/s 'e2e/s' 'POST p50' 'POST p99' \
    'P->C p50' 'P->C p99' 'txo ms/o'
declare -A MED
for config in "${CONFIGS[@]}"; do
    row=()
    for i in "${!FIGURES[@]}"; do
        MED[$config.$i]="$(median "$WORK/$config" $((i + 1)))"
        row+=("${MED[$config.$i]}")
    done
    printf '%-8s %9.0f %8.0f %9.1f %9.1f %9.1f %9.1f %9.2f\n' "$config" "${row[@]}"
done
for config in on down; do
    row=()
    for i in "${!FIGURES[@]}"; do
        row+=("$(awk -v a="${MED[$config.$i]}" -v b="${MED[off.$i]}" \
            'BEGIN {if (b == 0) print "-"; else printf "%+.1f%%", (a - b) * 100 / b}')")
    done
    printf '%-8s %9s %8s %9s %9s %9s %9s %9s\n' "$config-off" "${row[@]}"
done
# Each txo_bench run posts ORDERS orders in its load phase and more in its half-load phase,
# so the OTLP figures are per run, not per order.
printf '   OTLP export of the "on" runs (medians per run): %s requests, %s KB\n' \
    "$(median "$WORK/otlp" 1)" "$(median "$WORK/otlp" 2)"
