#!/usr/bin/env bash
# Prints the end of each failed test's output from the last ctest run in BUILD_DIR, after the
# run's own summary: a long log (CI keeps only its start and its end) then still shows why each
# test failed. The "applying migration" lines every database test starts with are left out.
#
#   scripts/test-tails.sh BUILD_DIR [LINES]     (LINES: per test, default 60)
set -uo pipefail

dir=${1:?usage: test-tails.sh BUILD_DIR [LINES]}
lines=${2:-60}
failed="$dir/Testing/Temporary/LastTestsFailed.log"
log="$dir/Testing/Temporary/LastTest.log"
[[ -r $failed && -r $log ]] || exit 0

while IFS=: read -r _ name; do
    [[ -n $name ]] || continue
    printf '\n==== the end of %s (%s), without its migration lines ====\n' "$name" "$dir"
    awk -v name="$name" '
        $0 ~ "^[0-9]+/[0-9]+ Test: " name "$" { inside = 1; next }
        inside && /^<end of output>$/ { exit }
        inside && /^Output:$/ { out = 1; getline; next }
        inside && out && !/component=migrate msg=applying/ { print }
    ' "$log" | tail -n "$lines"
done < "$failed"
