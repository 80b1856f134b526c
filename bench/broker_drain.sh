#!/usr/bin/env bash
# The relay drain per broker: N PENDING events in a fresh database, published by one
# `txo relay --publisher BROKER --drain` to a private broker (scripts/broker.sh), timed from
# outbox_events.published_at: events/s over the whole drain, over its first 10 % and over its
# last 10 % (a broker or a table that slows down as it fills shows here). Medians of the runs.
#
#   bench/broker_drain.sh [--events N] [--runs R] [--relay-args "FLAGS"]
#                         [--shape contiguous|interleaved] [BROKER...]
#
# The backlog has N/10 aggregates of 10 events each: written one aggregate after the other
# (contiguous, the default: a batch of 500 holds 50 aggregates x 10 events, so an ordered relay
# sends it in 10 waves) or round robin (interleaved: a batch holds one event of 500 aggregates).
#
# BROKER defaults to every broker scripts/broker.sh can start. Needs TXO_BIN (default
# build/txo) and the MYSQL_* of the private MariaDB (`make bench` gives both). Each run uses
# the database txo_bench_drain, dropped at the end; the broker's data is in a temporary
# directory, removed at the end.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TXO_BIN="${TXO_BIN:-$ROOT/build/txo}"
EVENTS=100000
RUNS=3
RELAY_ARGS=""
SHAPE=contiguous
BROKERS=()

die() { printf 'broker_drain.sh: %s\n' "$*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
    --events) EVENTS="${2:-}"; shift 2 ;;
    --runs) RUNS="${2:-}"; shift 2 ;;
    --relay-args) RELAY_ARGS="${2:-}"; shift 2 ;;
    --shape) SHAPE="${2:-}"; shift 2 ;;
    -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
[ "${#BROKERS[@]}" -gt 0 ] || read -r -a BROKERS <<<"$("$ROOT/scripts/broker.sh" names)"

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

# fill: a fresh database with EVENTS PENDING events over EVENTS/10 aggregates (one INSERT),
# aggregate AGG_SQL of seq.
fill() {
    "${MYSQL[@]}" -e "DROP DATABASE IF EXISTS $DBNAME; CREATE DATABASE $DBNAME"
    MYSQL_DATABASE=$DBNAME "$TXO_BIN" migrate --log-level warn >"$WORK/migrate.log" 2>&1 ||
        { cat "$WORK/migrate.log" >&2; die "txo migrate failed"; }
    "${MYSQL[@]}" "$DBNAME" -e "
        INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,
                                   idempotency_key)
        SELECT 'order', $AGG_SQL, 'OrderCreated',
               JSON_OBJECT('order_id', $AGG_SQL, 'n', seq, 'note', REPEAT('x', 100)),
               CONCAT('bench:', seq)
        FROM seq_1_to_$EVENTS"
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

printf '== relay drain per broker: %s events (%s), one relay %s, medians of %s runs ==\n' "$EVENTS" "$SHAPE" "${RELAY_ARGS:-(defaults)}" "$RUNS"
printf '%-10s %12s %12s %12s %10s\n' broker 'events/s' 'first 10%' 'last 10%' wall_s
for b in "${BROKERS[@]}"; do
    CURRENT="$b"
    mapfile -t flags < <("$ROOT/scripts/broker.sh" start "$b" "$WORK/$b" 2>"$WORK/$b.start.log") ||
        { cat "$WORK/$b.start.log" >&2; die "could not start $b"; }
    all=() first=() last=() wall=()
    for r in $(seq "$RUNS"); do
        fill
        t0=$(date +%s.%N)
        # shellcheck disable=SC2086
        MYSQL_DATABASE=$DBNAME "$TXO_BIN" relay --publisher "$b" --drain --log-level warn \
            "${flags[@]}" $RELAY_ARGS >"$WORK/$b.relay.log" 2>&1 ||
            { tail -20 "$WORK/$b.relay.log" >&2; die "the relay failed on $b (run $r)"; }
        t1=$(date +%s.%N)
        read -r a f l c <<<"$(rates)"
        [ "$c" = "$EVENTS" ] || die "$b: $c of $EVENTS events PUBLISHED after the drain"
        all+=("$a"); first+=("$f"); last+=("$l")
        wall+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", (b - a) * 1000}')")
    done
    printf '%-10s %12s %12s %12s %10.1f\n' "$b" \
        "$(printf '%s\n' "${all[@]}" | median)" "$(printf '%s\n' "${first[@]}" | median)" \
        "$(printf '%s\n' "${last[@]}" | median)" \
        "$(printf '%s\n' "${wall[@]}" | median | awk '{print $1 / 1000}')"
    "$ROOT/scripts/broker.sh" stop "$b" "$WORK/$b" 2>/dev/null
    CURRENT=""
done
