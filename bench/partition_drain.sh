#!/usr/bin/env bash
# What partitions cost the relay's claim: `txo relay --drain --publisher null` over N PENDING
# events (1,000 aggregates) in three layouts of outbox_events, in turn, R rounds: one table,
# partitioned in about 8 partitions, and in about 36 (`txo partition enable` after the fill,
# the online copy). Each claim walks idx_outbox_due in every partition and merges the walks in
# order. Prints events/s per run, then the median of each layout.
#
#   bench/partition_drain.sh path/to/txo [N] [R]        N default 100000, R default 3
#
# Uses MYSQL_* like the tests (eval "$(scripts/db.sh env)"); the user may create txo_* databases.
set -euo pipefail
txo=${1:?usage: $0 path/to/txo [events] [rounds]}
n=${2:-100000}
rounds=${3:-3}
db=txo_bench_drain_$$
sql() { mariadb -h "$MYSQL_HOST" -P "$MYSQL_PORT" -u "$MYSQL_USER" -p"$MYSQL_PASSWORD" "$@"; }
export MYSQL_DATABASE=$db
trap 'sql -e "DROP DATABASE IF EXISTS $db"' EXIT
results=$(mktemp)
for _ in $(seq "$rounds"); do
    for layout in one few many; do
        sql -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db CHARACTER SET utf8mb4"
        "$txo" migrate --only outbox --log-level warn 2>/dev/null
        sql "$db" -e "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type,
            payload, idempotency_key) SELECT 'order', seq % 1000, 'OrderCreated',
            JSON_OBJECT('n', seq), CONCAT('k:', seq) FROM seq_1_to_$n"
        case $layout in
        few) "$txo" partition enable --partition-first-ids $((n / 4)) --log-level warn 2>/dev/null ;;
        many) "$txo" partition enable --partition-first-ids $((n / 32)) --log-level warn 2>/dev/null ;;
        esac
        parts=$(sql -N "$db" -e "SELECT COUNT(*) FROM information_schema.PARTITIONS
            WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox_events'")
        t0=$(date +%s.%N)
        "$txo" relay --drain --publisher null --log-level warn >/dev/null
        t1=$(date +%s.%N)
        left=$(sql -N "$db" -e "SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED'")
        [ "$left" = 0 ] || { echo "$layout: $left events not published" >&2; exit 1; }
        rate=$(awk -v a="$t0" -v b="$t1" -v n="$n" 'BEGIN { printf "%.0f", n / (b - a) }')
        printf '%-5s %3d partition(s) %8d events/s\n' "$layout" "$parts" "$rate"
        echo "$layout $parts $rate" >>"$results"
    done
done
echo "median of $rounds rounds, $n events:"
for layout in one few many; do
    awk -v l="$layout" '$1 == l { print $3 " " $2 }' "$results" | sort -n |
        awk -v l="$layout" '{ r[NR] = $1; p = $2 } END { printf "  %-5s %3d partition(s) %8d events/s\n", l, p, r[int((NR + 1) / 2)] }'
done
rm -f "$results"
