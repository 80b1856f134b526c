#!/usr/bin/env bash
# Where the server's time goes, per statement shape: runs `txo_bench http` once against a
# private MariaDB started with the performance schema on, then prints, for the statements of
# the bench's database, each shape's executions and server time per order (time includes lock
# waits), and the rows it touched, largest time first.
#
#   bench/statement_profile.sh [--orders N] [--top K] [--broker local|NAME] [--up-args "FLAGS"]
#
# Defaults: 3000 orders, the top 25 shapes, local dispatch. The server lives in
# .txo/mariadb-pfs (port 3395; TXO_PFS_PORT to change) and is stopped afterwards. Needs
# build/bench/txo_bench (TXO_BENCH) and the mariadb client. The performance schema costs the
# server some speed: the orders/s of this run are not the benchmark's.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH="${TXO_BENCH:-$ROOT/build/bench/txo_bench}"
DIR="$ROOT/.txo/mariadb-pfs"
PORT="${TXO_PFS_PORT:-3395}"
ORDERS=3000
TOP=25
BROKER=local
UP_ARGS=""

die() { printf 'statement_profile.sh: %s\n' "$*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
    --orders) ORDERS="${2:-}"; shift 2 ;;
    --top) TOP="${2:-}"; shift 2 ;;
    --broker) BROKER="${2:-}"; shift 2 ;;
    --up-args) UP_ARGS="${2:-}"; shift 2 ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
    esac
done
[[ "$ORDERS" =~ ^[0-9]+$ && "$ORDERS" -gt 0 ]] || die "--orders needs a positive number"
[[ "$TOP" =~ ^[0-9]+$ && "$TOP" -gt 0 ]] || die "--top needs a positive number"
[ -x "$BENCH" ] || die "no txo_bench at $BENCH (make build)"
command -v mariadb >/dev/null || die "the mariadb client is missing (scripts/deps.sh)"

db() { TXO_DB_DIR="$DIR" TXO_DB_PORT="$PORT" "$ROOT/scripts/db.sh" "$@"; }
trap 'db stop >/dev/null 2>&1 || true' EXIT
TXO_DB_EXTRA_ARGS="--performance-schema=ON" db start >/dev/null
sql() { mariadb -S "$DIR/mysqld.sock" -u root --batch --skip-column-names -e "$1"; }
sql "TRUNCATE performance_schema.events_statements_summary_by_digest"

args=(http --runs 1 --keep --orders "$ORDERS" --broker "$BROKER")
[ -n "$UP_ARGS" ] && args+=(--up-args "$UP_ARGS")
MYSQL_HOST=127.0.0.1 MYSQL_PORT="$PORT" MYSQL_USER=app MYSQL_PASSWORD=secret \
    MYSQL_DATABASE=appdb "$BENCH" "${args[@]}" >/dev/null

# The bench's database is txo_bench_<pid>_http, kept (--keep) for this count of its orders
# (both phases: the load, then paced at half its rate) and dropped here.
schema="$(sql "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA
               WHERE SCHEMA_NAME LIKE 'txo\\_bench\\_%\\_http' LIMIT 1")"
[ -n "$schema" ] || die "the bench left no database txo_bench_*_http"
n="$(sql "SELECT COUNT(*) FROM \`$schema\`.orders")"
sql "DROP DATABASE \`$schema\`"
[ "$n" -gt 0 ] || die "the bench wrote no orders"
printf '== server time per statement shape: txo_bench http --broker %s, %s orders ==\n' \
    "$BROKER" "$n"
sql "SELECT ROUND(SUM(COUNT_STAR) / $n, 2), ROUND(SUM(SUM_TIMER_WAIT) / 1e9 / $n, 3)
     FROM performance_schema.events_statements_summary_by_digest
     WHERE SCHEMA_NAME LIKE 'txo\\_bench\\_%'" |
    awk '{ printf "all: %s statements/order, %s ms/order\n", $1, $2 }'
printf '%9s %9s %8s %8s  %s\n' 'ms/order' 'stmt/o' 'rows/ex' 'sent/ex' 'statement'
sql "SELECT ROUND(SUM_TIMER_WAIT / 1e9 / $n, 3), ROUND(COUNT_STAR / $n, 3),
            ROUND((SUM_ROWS_AFFECTED + SUM_ROWS_EXAMINED) / COUNT_STAR, 1),
            ROUND(SUM_ROWS_SENT / COUNT_STAR, 1), LEFT(REPLACE(DIGEST_TEXT, '\n', ' '), 110)
     FROM performance_schema.events_statements_summary_by_digest
     WHERE SCHEMA_NAME LIKE 'txo\\_bench\\_%'
     ORDER BY SUM_TIMER_WAIT DESC LIMIT $TOP" |
    awk -F '\t' '{ printf "%9s %9s %8s %8s  %s\n", $1, $2, $3, $4, $5 }'
