#!/usr/bin/env bash
# Relay throughput with and without the retention cleaner next to it.
#
# Fills a scratch database with OLD PUBLISHED rows (the cleaner's work) and NEW PENDING rows
# (the relay's), then times `txo relay --drain --publisher null` three ways: alone, with its
# in-process cleaner (--clean-interval 1), and next to a separate `txo clean` loop. Prints
# events/s of each run. Uses MYSQL_* like the tests; needs the mariadb client.
#
#   MYSQL_HOST=127.0.0.1 MYSQL_PORT=3367 MYSQL_USER=app MYSQL_PASSWORD=secret \
#     bench/clean_next_to_relay.sh build/txo [PENDING] [PUBLISHED]
set -euo pipefail
txo=${1:?usage: $0 path/to/txo [pending] [published]}
pending=${2:-100000}
published=${3:-300000}
db=txo_bench_clean_$$
sql() { mariadb -h "$MYSQL_HOST" -P "$MYSQL_PORT" -u "$MYSQL_USER" -p"$MYSQL_PASSWORD" "$@"; }
export MYSQL_DATABASE=$db
trap 'sql -e "DROP DATABASE IF EXISTS $db"' EXIT

fill() {
    sql -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db CHARACTER SET utf8mb4"
    "$txo" migrate --only outbox --log-level warn 2>/dev/null
    sql "$db" -e "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,
        idempotency_key, status, published_time, next_attempt_at, created_at)
        SELECT 'order', seq, 'OrderCreated', JSON_OBJECT('n', seq), CONCAT('old:', seq),
        'PUBLISHED', NOW(6) - INTERVAL 2 HOUR, NOW(6) - INTERVAL 2 HOUR, NOW(6) - INTERVAL 2 HOUR
        FROM seq_1_to_$published;
        INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,
        idempotency_key) SELECT 'order', seq, 'OrderCreated', JSON_OBJECT('n', seq),
        CONCAT('new:', seq) FROM seq_1_to_$pending;"
}

drain() { # extra relay flags...
    local t0 t1
    t0=$(date +%s.%N)
    "$txo" relay --drain --publisher null --log-level warn "$@" >/dev/null
    t1=$(date +%s.%N)
    echo "$t0 $t1"
}

report() { # label t0 t1
    local left
    left=$(sql -N "$db" -e "SELECT COUNT(*) FROM outbox_events WHERE idempotency_key LIKE 'old:%'")
    awk -v l="$1" -v a="$2" -v b="$3" -v n="$pending" -v left="$left" -v p="$published" \
        'BEGIN { printf "%-34s %8.0f events/s  (%d events in %.2f s; old PUBLISHED rows left %d of %d)\n", l, n / (b - a), n, b - a, left, p }'
}

fill
read -r a b < <(drain)
report "relay alone" "$a" "$b"

fill
read -r a b < <(drain --clean-interval 1 --outbox-retention 3600 --clean-batch 500)
report "relay --clean-interval 1" "$a" "$b"

fill
( while :; do "$txo" clean --outbox-retention 3600 --clean-batch 500 --log-level warn >/dev/null 2>&1 || true; done ) &
cleaner=$!
read -r a b < <(drain)
kill "$cleaner" 2>/dev/null || true
wait "$cleaner" 2>/dev/null || true
report "relay next to a txo clean loop" "$a" "$b"
