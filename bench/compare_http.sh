#!/usr/bin/env bash
# The order service end to end, one tree against another in the same run: `txo_bench http`
# with each side's `txo`, the sides taking turns run by run (so a machine that drifts moves
# both), and the medians of what matters per side.
#
#   bench/compare_http.sh BASE NEW [ROUNDS] [-- txo_bench http flags...]
#
#   BASE, NEW  each a path to a txo binary, or a git revision of this repository: a revision is
#              built (RelWithDebInfo, the command only) in a worktree under
#              ${TXO_COMPARE_DIR:-/tmp/txo_compare}/<commit>, kept for the next comparison
#   ROUNDS     runs per side (default 3)
#   flags      passed to every `txo_bench http` run, e.g. --orders 10000 --broker nats
#              (default: --orders 10000)
#
# Environment: MYSQL_HOST, MYSQL_PORT, MYSQL_USER, MYSQL_PASSWORD as for txo_bench (the
# private server of `make db`: eval "$(scripts/db.sh env)"); TXO_BENCH, the driver (default
# build-release/bench/txo_bench, else build/bench/txo_bench): one driver for both sides, so
# only the service differs. Both sides run against the same server with its settings as they
# are (say whether its binary log is on). Figures are only worth comparing on a quiet machine.
#
# Prints, per side, the medians of: orders/s end to end at full load; at half load the p99 of
# commit->publish (as the relay measures it) and of POST->CONFIRMED; per order, the CPU of txo
# and of mariadbd (ms), rows written and updated, redo (KB). Then NEW / BASE for each. Each
# run's own lines are in the work directory named at the end.
set -euo pipefail

usage() {
    echo "usage: $0 BASE NEW [ROUNDS] [-- txo_bench http flags...]" >&2
    exit 2
}
[ $# -ge 2 ] || usage
base_arg=$1 new_arg=$2
shift 2
rounds=3
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
    rounds=$1
    shift
fi
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "$0: ROUNDS must be a whole number > 0" >&2; exit 2; }
if [ $# -gt 0 ]; then
    [ "$1" = "--" ] || usage
    shift
fi
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--orders 10000)
for f in "${flags[@]}"; do
    case "$f" in --runs | --txo | --runs=* | --txo=*)
        echo "$0: $f is set by this script" >&2
        exit 2
        ;;
    esac
done

repo=$(cd "$(dirname "$0")/.." && pwd)
driver=${TXO_BENCH:-}
if [ -z "$driver" ]; then
    for d in "$repo/build-release/bench/txo_bench" "$repo/build/bench/txo_bench"; do
        [ -x "$d" ] && { driver=$d; break; }
    done
fi
[ -n "$driver" ] && [ -x "$driver" ] || { echo "$0: no txo_bench (build it, or set TXO_BENCH)" >&2; exit 2; }
: "${MYSQL_HOST:?set the database environment, e.g. eval \"\$(scripts/db.sh env)\"}"

# A txo binary for ARG: the path itself, or the revision built in its own worktree.
txo_for() {
    local arg=$1
    if [ -x "$arg" ] && [ -f "$arg" ]; then
        echo "$arg"
        return
    fi
    local commit
    commit=$(git -C "$repo" rev-parse --verify --quiet "$arg^{commit}") ||
        { echo "$0: $arg is neither a txo binary nor a revision" >&2; exit 2; }
    local dir=${TXO_COMPARE_DIR:-/tmp/txo_compare}/$commit
    if [ ! -x "$dir/build/txo" ]; then
        echo "building $arg ($commit) in $dir" >&2
        [ -d "$dir/src" ] || git -C "$repo" worktree add --detach --force "$dir/src" "$commit" >&2
        cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$dir/cmake.log" 2>&1 ||
            { echo "$0: configuring $arg failed: $dir/cmake.log" >&2; exit 1; }
        cmake --build "$dir/build" -j"$(nproc)" --target txo_cmd >"$dir/build.log" 2>&1 ||
            { echo "$0: building $arg failed: $dir/build.log" >&2; exit 1; }
    fi
    echo "$dir/build/txo"
}
base_txo=$(txo_for "$base_arg")
new_txo=$(txo_for "$new_arg")

work=$(mktemp -d -t txo_compare_http.XXXXXX)
echo "driver $driver; ${flags[*]}; $rounds rounds; runs in $work"
echo "  BASE $base_arg: $base_txo"
echo "  NEW  $new_arg: $new_txo"

# One run of side S (BASE or NEW) as round R: its figures as one line of
# "e2e cp99 pc99 txo_ms db_ms written updated redo" in $work/S.fig.
run_side() {
    local side=$1 round=$2 txo=$3 out=$work/$1.$2.txt
    "$driver" http --runs 1 --txo "$txo" "${flags[@]}" >"$out" 2>&1 ||
        { echo "$0: $side run $round failed:" >&2; tail -20 "$out" >&2; exit 1; }
    awk -v side="$side" '
        $1 == "load" && $2 == "conns" { want = "full"; next }
        $1 == "half" && $2 == "late%" { want = "half"; next }
        want == "full" && NF >= 13 { e2e = $5; want = ""; next }
        want == "half" && NF >= 11 { pc99 = $NF; want = ""; next }
        /commit->publish as the relay measures it/ {
            for (i = 1; i <= NF; i++) if ($i == "p99") { cp99 = $(i + 1); break }
        }
        $1 == "CPU" && $2 == "ms:" { cpu = 1; next }
        cpu == 1 { txo_ms = $1; db_ms = $2; cpu = 0; next }
        $1 == "rows:" { rows = 1; next }
        rows == 1 { written = $1; updated = $2; redo = $6; rows = 0; next }
        END {
            if (e2e == "" || db_ms == "" || written == "") {
                print side ": the run printed no figures" > "/dev/stderr"; exit 1
            }
            print e2e, (cp99 == "" ? "-" : cp99), (pc99 == "" ? "-" : pc99), txo_ms, db_ms,
                  written, updated, redo
        }' "$out" >>"$work/$side.fig"
    echo "  round $round $side: $(tail -1 "$work/$side.fig")"
}

for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then
        run_side BASE "$r" "$base_txo"
        run_side NEW "$r" "$new_txo"
    else
        run_side NEW "$r" "$new_txo"
        run_side BASE "$r" "$base_txo"
    fi
done

# The median of column C of side S.
median() {
    awk -v c="$2" '$c != "-" { print $c }' "$work/$1.fig" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
                                   else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
names=("orders/s e2e" "commit->publish p99 ms (half)" "POST->CONFIRMED p99 ms (half)"
       "txo CPU ms/order" "mariadbd CPU ms/order" "rows written/order" "rows updated/order"
       "redo KB/order")
printf '\n%-32s %10s %10s %8s\n' "medians of $rounds runs" BASE NEW NEW/BASE
for c in 1 2 3 4 5 6 7 8; do
    b=$(median BASE "$c")
    n=$(median NEW "$c")
    ratio=$(awk -v b="$b" -v n="$n" 'BEGIN { if (b + 0 > 0 && n != "-") printf "%.2f", n / b; else print "-" }')
    printf '%-32s %10s %10s %8s\n' "${names[$((c - 1))]}" "$b" "$n" "$ratio"
done
