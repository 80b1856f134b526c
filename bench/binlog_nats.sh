#!/usr/bin/env bash
# The relay's binlog source through NATS JetStream, against what nats.js publishes to the same
# server: N events, medians of R runs, each run measuring, in turn:
#   polling   `txo relay --publisher nats --drain` on N PENDING events (for context);
#   binlog    `txo relay --source binlog --publisher nats --drain` on N events appended after
#             the source's first start stored its position (the rows stay PENDING: the rate is
#             N / the drain's wall time, and the relay's final stats line must count N);
#   nats.js   bench/nats_js/publish.mjs: N JetStream publishes with their PubAcks awaited in
#             windows of 500 (the relay's batch size) and a Nats-Msg-Id each, ~200-byte bodies.
# The last line gives binlog as a percentage of nats.js.
#
#   bench/binlog_nats.sh [--events N] [--runs R]
#
# Needs TXO_BIN (default build/txo), node, the MYSQL_* of the private MariaDB with its binary
# log on (`make db`), and nats-server (scripts/broker.sh). Installs bench/nats_js's npm package
# on first use. The database txo_bench_binlog_nats is dropped at the end.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TXO_BIN="${TXO_BIN:-$ROOT/build/txo}"
EVENTS=100000
RUNS=3

die() { printf 'binlog_nats.sh: %s\n' "$*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
    --events) EVENTS="${2:-}"; shift 2 ;;
    --runs) RUNS="${2:-}"; shift 2 ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
    esac
done
[[ "$EVENTS" =~ ^[0-9]+$ ]] && [ "$EVENTS" -ge 1000 ] || die "--events needs a number >= 1000"
[[ "$RUNS" =~ ^[0-9]+$ ]] && [ "$RUNS" -ge 1 ] || die "--runs needs a number >= 1"
[ -x "$TXO_BIN" ] || die "no txo at $TXO_BIN (make build)"
command -v node >/dev/null || die "node not installed (make deps)"
if [ ! -d "$ROOT/bench/nats_js/node_modules/nats" ]; then
    npm install --prefix "$ROOT/bench/nats_js" --no-audit --no-fund >/dev/null ||
        die "npm install in bench/nats_js failed"
fi

DBNAME=txo_bench_binlog_nats
MYSQL=(mariadb -h "${MYSQL_HOST:-127.0.0.1}" -P "${MYSQL_PORT:-3306}" -u "${MYSQL_USER:-app}")
export MYSQL_PWD="${MYSQL_PASSWORD:-}"
WORK="$(mktemp -d /tmp/txo-binlog-nats.XXXXXX)"
cleanup() {
    "$ROOT/scripts/broker.sh" stop nats "$WORK/nats" 2>/dev/null || true
    "${MYSQL[@]}" -e "DROP DATABASE IF EXISTS $DBNAME" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
[ "$("${MYSQL[@]}" -N -e 'SELECT @@log_bin')" = 1 ] || die "the server's binary log is off"

mapfile -t flags < <("$ROOT/scripts/broker.sh" start nats "$WORK/nats" 2>"$WORK/start.log") ||
    { cat "$WORK/start.log" >&2; die "could not start nats-server"; }
url="${flags[1]}"

relay() { # relay LOG ARGS...: one `txo relay ... --drain` into the database
    local log="$1"
    shift
    MYSQL_DATABASE=$DBNAME "$TXO_BIN" relay --publisher nats "${flags[@]}" --drain "$@" \
        >"$log" 2>&1 || { tail -20 "$log" >&2; die "txo relay $* failed"; }
}

fresh() { # a new database; with "binlog", the source's first start on the empty table
    "${MYSQL[@]}" -e "DROP DATABASE IF EXISTS $DBNAME; CREATE DATABASE $DBNAME"
    MYSQL_DATABASE=$DBNAME "$TXO_BIN" migrate --log-level warn >"$WORK/migrate.log" 2>&1 ||
        { cat "$WORK/migrate.log" >&2; die "txo migrate failed"; }
    if [ "${1:-}" = binlog ]; then relay "$WORK/first.log" --source binlog; fi
    "${MYSQL[@]}" "$DBNAME" -e "
        INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,
                                   idempotency_key)
        SELECT 'order', seq DIV 10, 'OrderCreated',
               JSON_OBJECT('order_id', seq DIV 10, 'n', seq, 'note', REPEAT('x', 100)),
               CONCAT('bench:$$:', '$2', ':', seq)
        FROM seq_1_to_$EVENTS"
}

rate() { # rate T0 T1: EVENTS / (T1 - T0)
    awk -v n="$EVENTS" -v a="$1" -v b="$2" 'BEGIN {printf "%.0f", n / (b - a)}'
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2)}'; }

printf '== binlog source through NATS JetStream against nats.js: %s events, medians of %s runs ==\n' \
    "$EVENTS" "$RUNS"
: >"$WORK/poll" && : >"$WORK/binlog" && : >"$WORK/js"
for r in $(seq "$RUNS"); do
    fresh polling "p$r"
    t0=$(date +%s.%N)
    relay "$WORK/poll.log" --log-level warn
    t1=$(date +%s.%N)
    left=$("${MYSQL[@]}" -N "$DBNAME" -e "SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED'")
    [ "$left" = 0 ] || die "polling: $left events not PUBLISHED"
    p=$(rate "$t0" "$t1")

    fresh binlog "b$r"
    t0=$(date +%s.%N)
    relay "$WORK/binlog.log" --source binlog --log-level info
    t1=$(date +%s.%N)
    got=$(sed -n 's/.*msg="binlog source stopped" published=\([0-9]*\).*/\1/p' "$WORK/binlog.log")
    [ "$got" = "$EVENTS" ] || die "binlog: the source published ${got:-?} events, want $EVENTS"
    b=$(rate "$t0" "$t1")

    j=$(node "$ROOT/bench/nats_js/publish.mjs" "$url" "$EVENTS" 500)
    printf '  run %s: polling %s events/s, binlog %s events/s, nats.js %s events/s\n' "$r" "$p" "$b" "$j"
    echo "$p" >>"$WORK/poll" && echo "$b" >>"$WORK/binlog" && echo "$j" >>"$WORK/js"
done
p=$(median <"$WORK/poll") b=$(median <"$WORK/binlog") j=$(median <"$WORK/js")
printf '  median: polling %s events/s, binlog %s events/s, nats.js %s events/s; binlog / nats.js %s%%\n' \
    "$p" "$b" "$j" "$(awk -v a="$b" -v c="$j" 'BEGIN {printf "%.0f", 100 * a / c}')"
