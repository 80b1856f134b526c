#!/usr/bin/env bash
# The relay drain per broker: N PENDING events in a fresh database, published by one
# `txo relay --publisher BROKER --drain` to a private broker (scripts/broker.sh), timed from
# outbox_events.published_at: events/s over the whole drain, over its first 10 % and over its
# last 10 % (a broker or a table that slows down as it fills shows here). Medians of the runs.
#
#   bench/broker_drain.sh [--events N] [--runs R] [--relay-args "FLAGS"] [--against "FLAGS"]
#                         [--shape contiguous|interleaved] [BROKER...]
#
# The backlog has N/10 aggregates of 10 events each: written one aggregate after the other
# (contiguous, the default: a batch of 500 holds 50 aggregates x 10 events, so an ordered relay
# sends it in 10 waves) or round robin (interleaved: a batch holds one event of 500 aggregates).
# Every run's events have idempotency keys of their own, so no broker de-duplicates them
# against an earlier run's.
#
# --against "FLAGS" compares two relay configurations in the same session: each run drains
# the backlog with --relay-args, then a fresh one with --against, and a last line per broker
# gives the first's median events/s as a percentage of the second's.
#
# BROKER defaults to every broker scripts/broker.sh can start that TXO_BIN is built with
# (`txo --version`; -DTXO_WITH_<NAME>=OFF leaves one out). Needs TXO_BIN (default
# build/txo) and the MYSQL_* of the private MariaDB (`make bench` gives both). Each run uses
# the database txo_bench_drain, dropped at the end; the broker's data is in a temporary
# directory, removed at the end.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TXO_BIN="${TXO_BIN:-$ROOT/build/txo}"
EVENTS=100000
RUNS=3
RELAY_ARGS=""
AGAINST=""
COMPARE=0
SHAPE=contiguous
BROKERS=()

die() { printf 'broker_drain.sh: %s\n' "$*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
    --events) EVENTS="${2:-}"; shift 2 ;;
    --runs) RUNS="${2:-}"; shift 2 ;;
    --relay-args) RELAY_ARGS="${2:-}"; shift 2 ;;
    --against) AGAINST="${2:-}"; COMPARE=1; shift 2 ;;
    --shape) SHAPE="${2:-}"; shift 2 ;;
    -h | --help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) BROKERS+=("$1"); shift ;;
    esac
done
[[ "$EVENTS" =~ ^[0-9]+$ ]] && [ "$EVENTS" -ge 100 ] || die "--events needs a number >= 100"
[[ "$RUNS" =~ ^[0-9]+$ ]] && [ "$RUNS" -ge 1 ] || die "--runs needs a number >= 1"
case "$SHAPE" in
contiguous) AGG_SQL="seq DIV 10" ;;
interleaved) AGG_SQL="seq MOD $((EVENTS / 10))" ;;
*) die "--shape needs contiguous or interleaved, got '$SHAPE'" ;;
esac
[ -x "$TXO_BIN" ] || die "no txo at $TXO_BIN (make build)"
if [ "${#BROKERS[@]}" -eq 0 ]; then
    built=$("$TXO_BIN" --version | sed -n 's/^Brokers built in: //p')
    for b in $("$ROOT/scripts/broker.sh" names); do
        [[ ", $built, " == *", $b, "* ]] && BROKERS+=("$b")
    done
    [ "${#BROKERS[@]}" -gt 0 ] || die "$TXO_BIN is built without any broker"
fi

DBNAME=txo_bench_drain
MYSQL=(mariadb -h "${MYSQL_HOST:-127.0.0.1}" -P "${MYSQL_PORT:-3306}" -u "${MYSQL_USER:-app}")
export MYSQL_PWD="${MYSQL_PASSWORD:-}"
WORK="$(mktemp -d /tmp/txo-broker-drain.XXXXXX)"
CURRENT=""
cleanup() {
    [ -n "$CURRENT" ] && "$ROOT/scripts/broker.sh" stop "$CURRENT" "$WORK/$CURRENT" 2>/dev/null
    "${MYSQL[@]}" -e "DROP DATABASE IF EXISTS $DBNAME" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# fill RUN: a fresh database with EVENTS PENDING events over EVENTS/10 aggregates (one INSERT),
# aggregate AGG_SQL of seq, due one microsecond apart in seq order, keys unique to RUN.
fill() {
    "${MYSQL[@]}" -e "DROP DATABASE IF EXISTS $DBNAME; CREATE DATABASE $DBNAME"
    MYSQL_DATABASE=$DBNAME "$TXO_BIN" migrate --log-level warn >"$WORK/migrate.log" 2>&1 ||
        { cat "$WORK/migrate.log" >&2; die "txo migrate failed"; }
    "${MYSQL[@]}" "$DBNAME" -e "
        INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,
                                   idempotency_key, next_attempt_at)
        SELECT 'order', $AGG_SQL, 'OrderCreated',
               JSON_OBJECT('order_id', $AGG_SQL, 'n', seq, 'note', REPEAT('x', 100)),
               CONCAT('bench:$$:', '$1', ':', seq), t.t0 + INTERVAL seq MICROSECOND
        FROM seq_1_to_$EVENTS, (SELECT NOW(6) - INTERVAL 1 HOUR AS t0) t"
}

# rates: "all first last" events/s from published_at (the first and last tenth by time).
rates() {
    local tenth=$((EVENTS / 10))
    "${MYSQL[@]}" "$DBNAME" -N -e "
        WITH p AS (SELECT published_at t, ROW_NUMBER() OVER (ORDER BY published_at, id) n
                   FROM outbox_events WHERE status = 'PUBLISHED'),
             m AS (SELECT COUNT(*) c, MIN(t) t0, MAX(t) t1 FROM p)
        SELECT ROUND(m.c / GREATEST(TIMESTAMPDIFF(MICROSECOND, m.t0, m.t1) / 1e6, 1e-6)),
               ROUND($tenth / GREATEST(TIMESTAMPDIFF(MICROSECOND, m.t0,
                       (SELECT t FROM p WHERE n = $tenth)) / 1e6, 1e-6)),
               ROUND($tenth / GREATEST(TIMESTAMPDIFF(MICROSECOND,
                       (SELECT t FROM p WHERE n = m.c - $tenth), m.t1) / 1e6, 1e-6)),
               m.c
        FROM m"
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2)}'; }

# drain BROKER RUN FLAGS: one run; prints "events/s first10% last10% wall_ms".
drain() {
    local b="$1" r="$2" extra="$3"
    fill "$r"
    local t0 t1 a f l c
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    MYSQL_DATABASE=$DBNAME "$TXO_BIN" relay --publisher "$b" --drain --log-level warn \
        "${flags[@]}" $extra >"$WORK/$b.relay.log" 2>&1 ||
        { tail -20 "$WORK/$b.relay.log" >&2; die "the relay failed on $b (run $r)"; }
    t1=$(date +%s.%N)
    read -r a f l c <<<"$(rates)"
    [ "$c" = "$EVENTS" ] || die "$b: $c of $EVENTS events PUBLISHED after the drain"
    printf '%s %s %s %s\n' "$a" "$f" "$l" "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", (b - a) * 1000}')"
}

# row LABEL FILE: the medians of the runs in FILE; sets MEDIAN to the events/s one.
row() {
    local col
    MEDIAN=$(cut -d' ' -f1 "$2" | median)
    printf '%-28s %12s' "$1" "$MEDIAN"
    for col in 2 3; do printf ' %12s' "$(cut -d' ' -f$col "$2" | median)"; done
    printf ' %10.1f\n' "$(cut -d' ' -f4 "$2" | median | awk '{print $1 / 1000}')"
}

printf '== relay drain per broker: %s events (%s), one relay, medians of %s runs ==\n' "$EVENTS" "$SHAPE" "$RUNS"
printf '%-28s %12s %12s %12s %10s\n' 'broker, relay flags' 'events/s' 'first 10%' 'last 10%' wall_s
for b in "${BROKERS[@]}"; do
    CURRENT="$b"
    mapfile -t flags < <("$ROOT/scripts/broker.sh" start "$b" "$WORK/$b" 2>"$WORK/$b.start.log") ||
        { cat "$WORK/$b.start.log" >&2; die "could not start $b"; }
    : >"$WORK/one" && : >"$WORK/two"
    for r in $(seq "$RUNS"); do
        drain "$b" "$r" "$RELAY_ARGS" >>"$WORK/one"
        if [ "$COMPARE" = 1 ]; then drain "$b" "$r.against" "$AGAINST" >>"$WORK/two"; fi
    done
    row "$b ${RELAY_ARGS:-(defaults)}" "$WORK/one"
    if [ "$COMPARE" = 1 ]; then
        first=$MEDIAN
        row "$b ${AGAINST:-(defaults)}" "$WORK/two"
        printf '%-28s %11s%%\n' "$b ratio" "$(awk -v a="$first" -v b="$MEDIAN" 'BEGIN {printf "%.0f", 100 * a / b}')"
    fi
    "$ROOT/scripts/broker.sh" stop "$b" "$WORK/$b" 2>/dev/null
    CURRENT=""
done
