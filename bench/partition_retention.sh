#!/usr/bin/env bash
# Retention of N expired outbox rows in both layouts of outbox_events, in the same run, while
# writers append and a relay publishes: unpartitioned (`txo clean` deletes the rows in batches
# of --clean-batch, --clean-pause apart) against partitioned (`txo clean` drops whole partitions,
# then deletes their outbox_keys rows).
#
#   bench/partition_retention.sh path/to/txo [N]        N expired rows, default 1000000
#
# Environment: MYSQL_HOST, MYSQL_PORT, MYSQL_USER, MYSQL_PASSWORD (as the tests; the user may
# create txo_* databases); TXO_BENCH (txo_bench, default bench/txo_bench next to txo); whole
# numbers RATE (appends/s, default 200), WRITERS (default 4), BASELINE_S (load alone before
# the clean, default 10), SETTLE_S (longest wait for InnoDB's purge after the clean, default
# 60); CLEAN_ARGS (more flags for both `txo clean` runs).
#
# Each layout, in a scratch database txo_bench_ret_<pid>: `txo migrate --only outbox`, for the
# partitioned one `txo partition enable --partition-first-ids N/4` at once (the table is empty:
# ids 1 to 4*(N/4)-1 fill four partitions, and the rest, the N-th row when N is a multiple of 4,
# opens the fifth, which the new rows keep filling), then N PUBLISHED rows created
# between 3 and 2 days ago (~300-byte payloads, 1,000 aggregates, keys in id order; INSERT
# ... SELECT from MariaDB's sequence engine, 100,000 rows per statement) and 10 new PENDING
# ones above them.
# Then the load: `txo_bench append-load` (RATE appends/s from WRITERS connections, one
# transaction per append, on a fixed schedule) and `txo relay --publisher null`. After
# BASELINE_S seconds of load alone, `txo clean --outbox-retention 86400` runs to the end; the
# load goes on until InnoDB's purge is back where it was before the clean (history list
# length), at most SETTLE_S seconds. Prints one table: wall time of the clean, append latency
# before, during and after it, redo and binary-log bytes written, the table's size before and
# after (outbox_keys included), the rows left. Takes about 4 minutes at N = 1,000,000 on 2
# cores (most of it filling); figures are only worth comparing on a quiet machine.
set -euo pipefail

txo=${1:?usage: $0 path/to/txo [N]}
n=${2:-1000000}
if ! [[ "$n" =~ ^[0-9]+$ ]] || [ "$n" -lt 1000 ]; then
    echo "$0: N must be a number >= 1000" >&2
    exit 2
fi
bench_bin=${TXO_BENCH:-$(dirname "$txo")/bench/txo_bench}
rate=${RATE:-200}
writers=${WRITERS:-4}
baseline_s=${BASELINE_S:-10}
settle_s=${SETTLE_S:-60}
clean_args=${CLEAN_ARGS:-}
for v in "$rate" "$writers" "$baseline_s" "$settle_s"; do
    [[ "$v" =~ ^[0-9]+$ ]] || { echo "$0: RATE, WRITERS, BASELINE_S, SETTLE_S: whole numbers" >&2; exit 2; }
done
[ -x "$txo" ] || { echo "$0: no txo at $txo" >&2; exit 2; }
[ -x "$bench_bin" ] || { echo "$0: no txo_bench at $bench_bin (set TXO_BENCH)" >&2; exit 2; }

db=txo_bench_ret_$$
logs=$(mktemp -d "${TMPDIR:-/tmp}/partition_retention.XXXXXX")
chunk=100000
first_ids=$((n / 4))
sql() { mariadb -h "$MYSQL_HOST" -P "$MYSQL_PORT" -u "$MYSQL_USER" -p"$MYSQL_PASSWORD" "$@"; }
q() { sql -N -B "$db" -e "$1"; }
status_var() { sql -N -B -e "SHOW GLOBAL STATUS LIKE '$1'" | awk '{ print $2 }'; }
log_bin=$(sql -N -B -e "SELECT @@log_bin")
binlog_bytes() {
    if [ "$log_bin" = 1 ]; then
        sql -N -B -e "SHOW BINARY LOGS" | awk '{ s += $2 } END { print s + 0 }'
    else
        echo 0
    fi
}
now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"$1\", $2 }"; }

relay_pid="" load_pid=""
stop_bg() {
    local p
    for p in $load_pid $relay_pid; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    load_pid="" relay_pid=""
}
trap 'stop_bg; sql -e "DROP DATABASE IF EXISTS $db" || true' EXIT
export MYSQL_DATABASE=$db

# "in use" and "file" bytes of the outbox (outbox_keys included): data + index pages, and
# those plus the free space InnoDB keeps in the tablespaces (what the files hold).
sizes() {
    local t
    for t in outbox_events outbox_keys; do
        if [ -n "$(q "SHOW TABLES LIKE '$t'")" ]; then q "ANALYZE TABLE $t" >/dev/null; fi
    done
    q "SELECT SUM(DATA_LENGTH + INDEX_LENGTH), SUM(DATA_LENGTH + INDEX_LENGTH + DATA_FREE)
       FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()
       AND TABLE_NAME IN ('outbox_events', 'outbox_keys')"
}

fill() { # layout
    local a b t0
    sql -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db CHARACTER SET utf8mb4"
    "$txo" migrate --only outbox --log-level warn >"$logs/migrate.log" 2>&1 ||
        { cat "$logs/migrate.log" >&2; exit 1; }
    if [ "$1" = partitioned ]; then
        # Enough partitions for the N rows and the appends of a run whose clean takes up to
        # 10 minutes, so that pmax stays empty: the pass's own upkeep (txo_partition_maintain,
        # --partition-ahead 2 above the largest id) may still split it, which copies nothing
        # while it is empty.
        local est=$((rate * (baseline_s + settle_s + 600)))
        local ahead=$(((n + est + first_ids - 1) / first_ids))
        [ "$ahead" -le 16 ] || ahead=16
        "$txo" partition enable --partition-first-ids "$first_ids" --partition-ahead "$ahead" \
            --log-level warn >"$logs/enable.log" 2>&1 || { cat "$logs/enable.log" >&2; exit 1; }
    fi
    t0=$(now)
    {
        echo "SET @t0 := NOW(6) - INTERVAL 3 DAY;"
        for ((a = 1; a <= n; a += chunk)); do
            b=$((a + chunk - 1 < n ? a + chunk - 1 : n))
            echo "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,
                idempotency_key, status, published_time, next_attempt_at, created_at)
                SELECT 'order', CONCAT('old-', seq MOD 1000), 'OrderCreated',
                JSON_OBJECT('n', seq, 'note', REPEAT('x', 280)), CONCAT('old:', LPAD(seq, 10, '0')),
                'PUBLISHED', t, t, t
                FROM (SELECT seq, @t0 + INTERVAL (seq * 86400000000 DIV $n) MICROSECOND AS t
                      FROM seq_${a}_to_${b}) s;"
        done
        echo "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,
              idempotency_key) SELECT 'order', CONCAT('new-', seq), 'OrderCreated',
              JSON_OBJECT('n', seq), CONCAT('new:', seq) FROM seq_1_to_10;"
    } | sql "$db"
    R[$1.fill_s]=$(calc %.0f "$(now) - $t0")
    local ids inuse file
    # Partitioned, the ids decide which partitions the expired rows fill: 1..N, four of them.
    # (Unpartitioned, an INSERT ... SELECT leaves a gap of unused AUTO_INCREMENT values
    # after it, which changes nothing for a DELETE by age.)
    if [ "$1" = partitioned ]; then
        ids=$(q "SELECT MIN(id), MAX(id), COUNT(*) FROM outbox_events WHERE idempotency_key LIKE 'old:%'")
        [ "$ids" = "$(printf '1\t%s\t%s' "$n" "$n")" ] ||
            echo "warning: $1: the expired rows have ids (min max count) $ids, not 1..$n" >&2
    fi
    read -r inuse file < <(sizes)
    R[$1.inuse0]=$inuse R[$1.file0]=$file
}

# key=value of a txo_bench append-load phase line: phase key
load_fig() { sed -n "s/^phase=$1 .*[ ]$2=\([^ ]*\).*/\1/p" "$logs/load.$layout.out"; }

run() { # layout
    local layout=$1 t_load lsn0 lsn1 lsn2 lsn3 bin0 bin1 bin2 h0 h t1 t2 t3 deadline inuse file
    fill "$layout"
    "$txo" relay --publisher null --log-level warn >/dev/null 2>"$logs/relay.$layout.log" &
    relay_pid=$!
    "$bench_bin" append-load --rate "$rate" --writers "$writers" --tag "load-$layout" \
        >"$logs/load.$layout.out" 2>"$logs/load.$layout.err" &
    load_pid=$!
    for _ in $(seq 1 300); do
        grep -q '^ready' "$logs/load.$layout.out" 2>/dev/null && break
        kill -0 "$load_pid" 2>/dev/null || { cat "$logs/load.$layout.err" >&2; exit 1; }
        sleep 0.1
    done
    t_load=$(now)
    lsn0=$(status_var Innodb_lsn_current) bin0=$(binlog_bytes)
    sleep "$baseline_s"

    # The clean.
    h0=$(status_var Innodb_history_list_length)
    lsn1=$(status_var Innodb_lsn_current) bin1=$(binlog_bytes) t1=$(now)
    kill -USR1 "$load_pid"
    # shellcheck disable=SC2086 # CLEAN_ARGS is a list of flags
    "$txo" clean --outbox-retention 86400 --log-level info $clean_args \
        >"$logs/clean.$layout.out" 2>"$logs/clean.$layout.log" ||
        { cat "$logs/clean.$layout.log" >&2; exit 1; }
    t2=$(now)
    kill -USR1 "$load_pid"
    lsn2=$(status_var Innodb_lsn_current) bin2=$(binlog_bytes)
    R[$layout.backlog]=$(q "SELECT COUNT(*) FROM outbox_events WHERE status = 'PENDING'")

    # The purge of what the clean deleted, until the history list is back where it was.
    deadline=$(calc %.3f "$t2 + $settle_s")
    while :; do
        h=$(status_var Innodb_history_list_length)
        [ "$h" -le $((h0 + 100)) ] && break
        awk "BEGIN { exit !($(now) >= $deadline) }" && { R[$layout.purge_note]=" (cut)"; break; }
        sleep 0.5
    done
    t3=$(now)
    lsn3=$(status_var Innodb_lsn_current)
    stop_bg

    R[$layout.clean_s]=$(calc %.1f "$t2 - $t1")
    R[$layout.purge_s]=$(calc %.1f "$t3 - $t2")
    R[$layout.deleted]=$(sed -n 's/^deleted outbox=\([0-9]*\).*/\1/p' "$logs/clean.$layout.out")
    R[$layout.dropped]=$(grep -c 'msg=dropped' "$logs/clean.$layout.log" || true)
    # Splitting a pmax that holds events copies them: not what this bench measures.
    if grep -q 'pmax holds events' "$logs/clean.$layout.log"; then
        echo "warning: $layout: pmax held events, the clean split it (more RATE than planned?)" >&2
    fi
    # Where a partitioned pass spends its time: up to its first drop, and after its last
    # one (the outbox_keys rows of the dropped partitions).
    R[$layout.drop_times]=-
    if [ "${R[$layout.dropped]}" -gt 0 ]; then
        local first last
        first=$(date -d "$(grep 'msg=dropped' "$logs/clean.$layout.log" | head -n 1 |
            sed 's/^ts=\([^ ]*\).*/\1/')" +%s.%N)
        last=$(date -d "$(grep 'msg=dropped' "$logs/clean.$layout.log" | tail -n 1 |
            sed 's/^ts=\([^ ]*\).*/\1/')" +%s.%N)
        R[$layout.drop_times]="$(calc %.1f "$first - $t1") / $(calc %.1f "$last - $first") / $(calc %.1f "$t2 - $last")"
    fi
    # Redo and binary log: server-wide deltas; "net" takes off the load's own at its rate
    # before the clean.
    local base_s lsn_rate bin_rate
    base_s=$(calc %.3f "$t1 - $t_load")
    lsn_rate=$(calc %.3f "($lsn1 - $lsn0) / $base_s") bin_rate=$(calc %.3f "($bin1 - $bin0) / $base_s")
    R[$layout.redo_base]=$(calc %.2f "$lsn_rate / 1048576")
    R[$layout.redo]=$(calc %.1f "($lsn2 - $lsn1) / 1048576")
    R[$layout.redo_net]=$(calc %.1f "($lsn2 - $lsn1 - $lsn_rate * ($t2 - $t1)) / 1048576")
    R[$layout.redo_purge]=$(calc %.1f "($lsn3 - $lsn2 - $lsn_rate * ($t3 - $t2)) / 1048576")
    R[$layout.bin]=$(calc %.1f "($bin2 - $bin1) / 1048576")
    R[$layout.bin_net]=$(calc %.1f "($bin2 - $bin1 - $bin_rate * ($t2 - $t1)) / 1048576")
    local p k
    for p in 0 1 2; do
        for k in per_s errors p50_ms p99_ms max_ms sched_p99_ms sched_max_ms; do
            R[$layout.$p.$k]=$(load_fig "$p" "$k")
        done
    done
    R[$layout.left]=$(q "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'
                         AND created_at < NOW(6) - INTERVAL 1 DAY")
    R[$layout.keys_left]=-
    if [ -n "$(q "SHOW TABLES LIKE 'outbox_keys'")" ]; then
        R[$layout.keys_left]=$(q "SELECT COUNT(*) FROM outbox_keys WHERE idempotency_key LIKE 'old:%'")
    fi
    read -r inuse file < <(sizes)
    R[$layout.inuse1]=$inuse R[$layout.file1]=$file
    sql -e "DROP DATABASE IF EXISTS $db"
}

declare -A R
layouts=(unpartitioned partitioned)
for layout in "${layouts[@]}"; do
    echo "== $layout: filling $n expired rows, then the clean under load" >&2
    run "$layout"
done

mb() { calc %.1f "${1:-0} / 1048576"; }
lat() { # layout phase
    printf '%s / %s / %s' "${R[$1.$2.p50_ms]}" "${R[$1.$2.p99_ms]}" "${R[$1.$2.max_ms]}"
}
row() { printf '%-44s %24s %24s\n' "$1" "$2" "$3"; }
u=unpartitioned p=partitioned
server=$(sql -N -B -e "SELECT CONCAT(@@version, '  innodb_flush_log_at_trx_commit=',
    @@innodb_flush_log_at_trx_commit, '  innodb_buffer_pool_size=',
    @@innodb_buffer_pool_size DIV 1048576, 'M  log_bin=', @@log_bin,
    '  binlog_format=', @@binlog_format)")
echo
echo "## Retention of $n expired outbox rows: unpartitioned (DELETE) against partitioned (DROP PARTITION)"
echo
echo "command: $0 $*"
echo "server:  $server  nproc=$(nproc)  $(date -u +%Y-%m-%dT%H:%MZ)"
echo "load:    $writers writers, $rate appends/s in all (one transaction each, ~300-byte payloads),"
echo "         txo relay --publisher null; clean: txo clean --outbox-retention 86400 $clean_args"
echo "         partitioned: txo partition enable --partition-first-ids $first_ids"
echo
row "" "$u" "$p"
row "fill, s (not part of the clean)" "${R[$u.fill_s]}" "${R[$p.fill_s]}"
row "size before: in use / file, MB" "$(mb "${R[$u.inuse0]}") / $(mb "${R[$u.file0]}")" \
    "$(mb "${R[$p.inuse0]}") / $(mb "${R[$p.file0]}")"
row "clean: wall time, s" "${R[$u.clean_s]}" "${R[$p.clean_s]}"
row "clean: outbox rows removed (partitions)" "${R[$u.deleted]}" "${R[$p.deleted]} (${R[$p.dropped]})"
row "  to 1st drop / drops / after last drop, s" "${R[$u.drop_times]}" "${R[$p.drop_times]}"
row "clean: redo MB (net of the load's)" "${R[$u.redo]} (${R[$u.redo_net]})" "${R[$p.redo]} (${R[$p.redo_net]})"
row "clean: binlog MB (net of the load's)" "${R[$u.bin]} (${R[$u.bin_net]})" "${R[$p.bin]} (${R[$p.bin_net]})"
row "purge after the clean: s, net redo MB" "${R[$u.purge_s]}${R[$u.purge_note]:-}, ${R[$u.redo_purge]}" \
    "${R[$p.purge_s]}${R[$p.purge_note]:-}, ${R[$p.redo_purge]}"
row "appends before: p50 / p99 / max, ms" "$(lat $u 0)" "$(lat $p 0)"
row "appends during the clean: p50 / p99 / max" "$(lat $u 1)" "$(lat $p 1)"
row "  from schedule: p99 / max, ms" "${R[$u.1.sched_p99_ms]} / ${R[$u.1.sched_max_ms]}" \
    "${R[$p.1.sched_p99_ms]} / ${R[$p.1.sched_max_ms]}"
row "  appends/s (errors)" "${R[$u.1.per_s]} (${R[$u.1.errors]})" "${R[$p.1.per_s]} (${R[$p.1.errors]})"
row "appends during the purge: p50 / p99 / max" "$(lat $u 2)" "$(lat $p 2)"
row "relay backlog at the clean's end, events" "${R[$u.backlog]}" "${R[$p.backlog]}"
row "expired rows left (outbox_keys rows)" "${R[$u.left]} (${R[$u.keys_left]})" "${R[$p.left]} (${R[$p.keys_left]})"
row "size after: in use / file, MB" "$(mb "${R[$u.inuse1]}") / $(mb "${R[$u.file1]}")" \
    "$(mb "${R[$p.inuse1]}") / $(mb "${R[$p.file1]}")"
row "load alone: redo MB/s" "${R[$u.redo_base]}" "${R[$p.redo_base]}"
cat <<EOF

Notes:
- Latency is per append transaction (INSERT + COMMIT, txo_outbox_append), ms; "from schedule"
  counts from when the append was due, so a stall weighs on every append it held up. "before":
  the ${baseline_s} s of load alone; "during the purge": from the clean's end until InnoDB's
  history list length is back to its level before the clean (at most ${settle_s} s; "(cut)"
  when it was not).
- Redo = Innodb_lsn_current delta; binlog = SHOW BINARY LOGS sizes delta; both server-wide,
  the load's and the relay's writes included. "net" subtracts the load's own at its rate
  before the clean; "purge ... net redo" is the same for the purge phase.
- Sizes: information_schema.TABLES of outbox_events + outbox_keys after ANALYZE TABLE; "in
  use" = DATA_LENGTH + INDEX_LENGTH, "file" adds DATA_FREE (free space kept in the
  tablespaces: a DELETE leaves it in the file, a dropped partition's file is gone).
- "to 1st drop / drops / after last drop": from the clean's start to its first partition
  dropped (txo clean's log), from there to its last drop, and from there to its end (the
  dropped events' outbox_keys rows are deleted then, --clean-batch per statement).
- The partitioned layout keeps the expired rows of the fifth partition (the N-th row when N
  is a multiple of 4): the new rows above them keep filling it, and a partition still
  filling is never dropped.
- Logs (txo clean's, the relay's, txo_bench append-load's): $logs
EOF
