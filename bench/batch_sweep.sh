#!/usr/bin/env bash
# The order service end to end through its HTTP API (txo_bench http) for each batch cap of the
# worker (--saga-batch: 1 turns batching off), one table: orders/s, POST p50/p99,
# POST->CONFIRMED p50/p99, statements and commits per order, server and txo CPU per order.
#
#   bench/batch_sweep.sh [--orders N] [--runs R] [--broker local|NAME] [CAP...]
#
# CAP defaults to 1 10 50 200. Needs the txo_bench binary (TXO_BENCH, default
# build/bench/txo_bench) and the MYSQL_* of the private MariaDB (`make bench` gives both).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH="${TXO_BENCH:-$ROOT/build/bench/txo_bench}"
ORDERS=5000
RUNS=3
BROKER=local
CAPS=()

die() { printf 'batch_sweep.sh: %s\n' "$*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
    --orders) ORDERS="${2:-}"; shift 2 ;;
    --runs) RUNS="${2:-}"; shift 2 ;;
    --broker) BROKER="${2:-}"; shift 2 ;;
    -h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [[ "$1" =~ ^[0-9]+$ ]] || die "a cap is a number, got '$1'"; CAPS+=("$1"); shift ;;
    esac
done
[ -x "$BENCH" ] || die "no txo_bench at $BENCH (make build)"
[ "${#CAPS[@]}" -gt 0 ] || CAPS=(1 10 50 200)

printf '== batch cap sweep: txo up --broker %s, %s orders, medians of %s runs ==\n' \
    "$BROKER" "$ORDERS" "$RUNS"
printf '%5s %8s %8s %8s %10s %10s %8s %8s %8s %8s\n' cap 'e2e/s' 'POST p50' 'POST p99' \
    'P->C p50' 'P->C p99' 'stmt/o' 'commit/o' 'db ms/o' 'txo ms/o'
for cap in "${CAPS[@]}"; do
    out="$("$BENCH" http --broker "$BROKER" --orders "$ORDERS" --runs "$RUNS" \
        --up-args "--saga-batch $cap" 2>/dev/null)" || die "txo_bench failed for cap $cap"
    # The lines after the headers "load ...", "CPU ms: ..." and "server: ...".
    load="$(awk '/^load /{getline; print; exit}' <<<"$out")"
    cpu="$(awk '/CPU ms:/{getline; print; exit}' <<<"$out")"
    server="$(awk '/server: statements/{getline; print; exit}' <<<"$out")"
    read -r _ _ _ _ e2e p50 p99 _ _ _ _ pc50 pc99 <<<"$load"
    read -r txo_ms db_ms _ <<<"$cpu"
    read -r stmts _ _ commits _ <<<"$server"
    printf '%5s %8s %8s %8s %10s %10s %8s %8s %8s %8s\n' "$cap" "$e2e" "$p50" "$p99" "$pc50" \
        "$pc99" "$stmts" "$commits" "$db_ms" "$txo_ms"
done
