#!/usr/bin/env bash
# What each row of an order costs the database: per table, the server's CPU and the redo an
# INSERT of a row and an UPDATE of it take, with the table's secondary indexes and without them
# (the difference is what the indexes cost: a write per index per row), at a batch size like
# the service's.
#
#   bench/row_price.sh path/to/txo [ORDERS]       ORDERS orders as the source, default 5000
#
# Environment: MYSQL_HOST, MYSQL_PORT, MYSQL_USER, MYSQL_PASSWORD (as the tests; the user may
# create txo_* databases; the server must run on this machine: its CPU is read from /proc);
# TXO_BENCH (txo_bench, default bench/txo_bench next to txo); whole numbers BATCH (rows per
# statement, default 100) and ROUNDS (passes over the rows, summed, default 3).
#
# The rows are real: `txo_bench http --orders ORDERS --keep` runs the order service (`txo up`,
# local dispatch) until every order is CONFIRMED (ORDERS at full load, then about as many at
# half load), and this bench copies what it left in each table. For each table, in a scratch database txo_rowprice_<pid>: the rows numbered in primary
# key order (rp_src), then ROUNDS times a fresh copy of the table (CREATE TABLE ... LIKE: its
# indexes, not its triggers or foreign keys) filled by INSERT ... SELECT of BATCH rows per
# statement; then ROUNDS passes of UPDATE of BATCH rows per statement, joined on the primary
# key, setting the columns the service updates (a status in an index, a time). The same again
# with the copy's secondary indexes dropped (unique ones too). Reading the source rows costs
# CPU too: the same statements' reads alone are measured and taken off.
#
# CPU: mariadbd's user + system time (/proc/<pid>/stat), from the first statement until
# InnoDB's purge is back to where it was (the undo of the updates is purged in the
# background, and that is part of their price; at most 20 s). Redo: Innodb_lsn_current.
# Resolution: the kernel's clock tick (10 ms); the rows of 5,000 orders x 3 rounds give tens of
# ticks per table. Figures are only worth comparing on a quiet machine.
set -euo pipefail

txo=${1:?usage: $0 path/to/txo [ORDERS]}
orders=${2:-5000}
batch=${BATCH:-100}
rounds=${ROUNDS:-3}
for v in "$orders" "$batch" "$rounds"; do
    [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "$0: ORDERS, BATCH, ROUNDS: whole numbers > 0" >&2; exit 2; }
done
[ -x "$txo" ] || { echo "$0: no txo at $txo" >&2; exit 2; }
bench_bin=${TXO_BENCH:-$(dirname "$txo")/bench/txo_bench}
[ -x "$bench_bin" ] || { echo "$0: no txo_bench at $bench_bin (set TXO_BENCH)" >&2; exit 2; }

db=txo_rowprice_$$
work=$(mktemp -d)
sql() { mariadb -h "$MYSQL_HOST" -P "$MYSQL_PORT" -u "$MYSQL_USER" -p"$MYSQL_PASSWORD" "$@"; }
q() { sql -N -B "$db" -e "$1"; }
status_var() { sql -N -B -e "SHOW GLOBAL STATUS LIKE '$1'" | awk '{ print $2 }'; }
history_len() { status_var Innodb_history_list_length; }
pid=$(cat "$(sql -N -B -e 'SELECT @@pid_file')" 2>/dev/null || true)
[ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || { echo "$0: the server's pid file is not readable here (the server must run on this machine)" >&2; exit 2; }
tick_us=$((1000000 / $(getconf CLK_TCK)))
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }

src= bench_db= http_logs=
cleanup() {
    for d in "$db" "$src" "$bench_db"; do
        [ -n "$d" ] && sql -e "DROP DATABASE IF EXISTS $d" 2>/dev/null || true
    done
    [ -n "$http_logs" ] && rm -rf "$http_logs"
    rm -rf "$work"
}
trap cleanup EXIT

# ---- the source: the rows of ORDERS real orders ----
echo "row_price: $orders orders through the service (txo_bench http --keep)..." >&2
"$bench_bin" http --orders "$orders" --runs 1 --keep --txo "$txo" > "$work/http.txt" 2>&1 ||
    { cat "$work/http.txt" >&2; exit 1; }
# "kept database txo_bench_<pid>_http and logs in DIR", and its own "kept database txo_bench_<pid>".
src=$(sed -n 's/^kept database \(txo_bench_[0-9]*_http\) and logs in .*/\1/p' "$work/http.txt" | head -1)
http_logs=$(sed -n 's/^kept database txo_bench_[0-9]*_http and logs in \(.*\)/\1/p' "$work/http.txt" | head -1)
bench_db=${src%_http}
[ -n "$src" ] || { echo "$0: txo_bench did not name its database" >&2; cat "$work/http.txt" >&2; exit 1; }
total=$(sql -N -B "$src" -e "SELECT COUNT(*) FROM orders")
sql -e "CREATE DATABASE $db"

# The columns the service updates, per table ("" : never updated), each as rp.<column>.
declare -A update=(
    [orders]="rp.status = IF(rp.status = 'CONFIRMED', 'CREATED', 'CONFIRMED'), rp.version = rp.version + 1, rp.updated_at = NOW(6)"
    [order_items]=""
    [idempotency_keys]="rp.status = IF(rp.status = 'COMPLETED', 'PROCESSING', 'COMPLETED'), rp.updated_at = NOW(6)"
    [outbox_events]="rp.status = IF(rp.status = 'PUBLISHED', 'PENDING', 'PUBLISHED'), rp.published_time = NOW(6), rp.updated_at = NOW(6)"
    [outbox_aggregates]="rp.last_sequence = rp.last_sequence + 1, rp.prev_kept = rp.last_kept, rp.last_kept = rp.last_sequence, rp.last_due = NOW(6)"
    [inbox_events]=""
    [inbox_aggregates]="rp.last_sequence = rp.last_sequence + 1"
    [saga_instances]="rp.status = IF(rp.status = 'COMPLETED', 'RUNNING', 'COMPLETED'), rp.lease_until = NOW(6), rp.updated_at = NOW(6)"
    [saga_steps]="rp.status = IF(rp.status = 'COMPLETED', 'RUNNING', 'COMPLETED'), rp.attempts = rp.attempts + 1, rp.remote_state = IF(rp.remote_state = 'DONE', 'CALLING', 'DONE'), rp.updated_at = NOW(6)"
    [inventory_reservations]="rp.status = IF(rp.status = 'RESERVED', 'RELEASED', 'RESERVED'), rp.updated_at = NOW(6)"
    [payments]="rp.status = IF(rp.status = 'CHARGED', 'REFUNDED', 'CHARGED')"
    [shipments]="rp.status = IF(rp.status = 'CREATED', 'CANCELLED', 'CREATED')"
)
tables="orders order_items idempotency_keys outbox_events outbox_aggregates inbox_events
        inbox_aggregates saga_instances saga_steps inventory_reservations payments shipments"

# Runs the statements of file $1 in the scratch database; prints "<cpu ticks> <redo bytes>",
# the CPU counted until the purge is back to where it was before.
measure() {
    local h0 c0 l0 c1 l1 waited=0
    h0=$(history_len)
    c0=$(cpu_ticks)
    l0=$(status_var Innodb_lsn_current)
    sql "$db" < "$1"
    l1=$(status_var Innodb_lsn_current)
    while [ "$(history_len)" -gt "$((h0 + 100))" ] && [ "$waited" -lt 200 ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    c1=$(cpu_ticks)
    echo "$((c1 - c0)) $((l1 - l0))"
}

# Writes to $1 one statement per batch of the rows 1..n: $2 with @A and @B replaced by the
# batch's bounds (rn > @A AND rn <= @B).
batches() {
    local out=$1 tpl=$2 a=0
    : > "$out"
    while [ "$a" -lt "$n" ]; do
        local s=${tpl//@A/$a}
        echo "${s//@B/$((a + batch))}" >> "$out"
        a=$((a + batch))
    done
}

# One configuration of table t: "all" (its indexes) or "pk" (primary key only). Prints
# "<insert ticks> <insert redo> <update ticks> <update redo>" summed over ROUNDS, reads
# taken off.
price() {
    local t=$1 variant=$2 ins_ticks=0 ins_redo=0 upd_ticks=0 upd_redo=0 r c l
    for ((r = 0; r < rounds; r++)); do
        q "DROP TABLE IF EXISTS rp; CREATE TABLE rp LIKE $src.$t"
        if [ "$variant" = pk ]; then
            for ix in $(q "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = '$db' AND TABLE_NAME = 'rp' AND INDEX_NAME <> 'PRIMARY'"); do
                q "ALTER TABLE rp DROP INDEX \`$ix\`"
            done
        fi
        read -r c l < <(measure "$work/ins.sql")
        ins_ticks=$((ins_ticks + c)); ins_redo=$((ins_redo + l))
        read -r c l < <(measure "$work/read.sql")
        ins_ticks=$((ins_ticks - c)); ins_redo=$((ins_redo - l))
    done
    if [ -n "${update[$t]}" ]; then
        for ((r = 0; r < rounds; r++)); do
            read -r c l < <(measure "$work/upd.sql")
            upd_ticks=$((upd_ticks + c)); upd_redo=$((upd_redo + l))
            read -r c l < <(measure "$work/join.sql")
            upd_ticks=$((upd_ticks - c)); upd_redo=$((upd_redo - l))
        done
    fi
    echo "$ins_ticks $ins_redo $upd_ticks $upd_redo"
}

# µs per row of ticks over n x ROUNDS rows, and bytes per row.
per_row_us() { awk -v t="$1" -v n="$2" -v r="$rounds" -v u="$tick_us" 'BEGIN { v = t * u / (n * r); printf "%.1f", (v < 0 ? 0 : v) }'; }
per_row_b() { awk -v b="$1" -v n="$2" -v r="$rounds" 'BEGIN { v = b / (n * r); printf "%.0f", (v < 0 ? 0 : v) }'; }

printf '\n## The price of a row: server CPU and redo per row inserted and updated (the rows of %s orders; %s rows a statement, %s rounds)\n\n' \
    "$total" "$batch" "$rounds"
printf '| table | rows/order | secondary indexes | insert µs/row | without them | insert redo B/row | without them | update µs/row | without them | update redo B/row | without them |\n'
printf '|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n'
for t in $tables; do
    n=$(sql -N -B "$src" -e "SELECT COUNT(*) FROM $t" 2>/dev/null || echo 0)
    [ "$n" -gt 0 ] || continue
    cols=$(q "SELECT GROUP_CONCAT(CONCAT('\`', COLUMN_NAME, '\`') ORDER BY ORDINAL_POSITION) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '$src' AND TABLE_NAME = '$t' AND IS_GENERATED = 'NEVER'")
    pk=$(q "SELECT GROUP_CONCAT(CONCAT('\`', COLUMN_NAME, '\`') ORDER BY SEQ_IN_INDEX) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = '$src' AND TABLE_NAME = '$t' AND INDEX_NAME = 'PRIMARY'")
    join=$(q "SELECT GROUP_CONCAT(CONCAT('rp.\`', COLUMN_NAME, '\` = s.\`', COLUMN_NAME, '\`') SEPARATOR ' AND ') FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = '$src' AND TABLE_NAME = '$t' AND INDEX_NAME = 'PRIMARY'")
    indexes=$(q "SELECT COALESCE(GROUP_CONCAT(DISTINCT INDEX_NAME ORDER BY INDEX_NAME SEPARATOR ', '), '-') FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = '$src' AND TABLE_NAME = '$t' AND INDEX_NAME <> 'PRIMARY'")
    q "DROP TABLE IF EXISTS rp_src; CREATE TABLE rp_src ENGINE=InnoDB AS SELECT ROW_NUMBER() OVER (ORDER BY $pk) AS rn, $cols FROM $src.$t; ALTER TABLE rp_src ADD PRIMARY KEY (rn)"
    batches "$work/ins.sql" "INSERT INTO rp ($cols) SELECT $cols FROM rp_src WHERE rn > @A AND rn <= @B;"
    batches "$work/read.sql" "DO (SELECT COUNT(*) FROM (SELECT $cols FROM rp_src WHERE rn > @A AND rn <= @B LIMIT $batch) s);"
    if [ -n "${update[$t]}" ]; then
        batches "$work/upd.sql" "UPDATE rp JOIN rp_src s ON $join SET ${update[$t]} WHERE s.rn > @A AND s.rn <= @B;"
        batches "$work/join.sql" "DO (SELECT COUNT(*) FROM rp JOIN rp_src s ON $join WHERE s.rn > @A AND s.rn <= @B);"
    fi
    read -r ai ar au aur < <(price "$t" all)
    read -r pi pr pu pur < <(price "$t" pk)
    per_order=$(awk -v n="$n" -v o="$total" 'BEGIN { printf "%.2f", (o > 0 ? n / o : 0) }')
    if [ -n "${update[$t]}" ]; then
        upd="$(per_row_us "$au" "$n") | $(per_row_us "$pu" "$n") | $(per_row_b "$aur" "$n") | $(per_row_b "$pur" "$n")"
    else
        upd="- | - | - | -"
    fi
    printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$t" "$per_order" "$indexes" \
        "$(per_row_us "$ai" "$n")" "$(per_row_us "$pi" "$n")" "$(per_row_b "$ar" "$n")" \
        "$(per_row_b "$pr" "$n")" "$upd"
done
