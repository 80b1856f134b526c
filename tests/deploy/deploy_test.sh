#!/usr/bin/env bash
# The monitoring files in deploy/ are valid and name only metrics txo exports:
#   - deploy/prometheus/txo-alerts.yml passes `promtool check rules`, and its unit tests pass,
#     run exactly as txo-alerts.test.yml's header says: `promtool test rules
#     txo-alerts.test.yml` in deploy/prometheus (labels and annotations);
#   - deploy/grafana/txo.json is JSON;
#   - every txo_* name in either file is a metric the code registers (a quoted "txo_..." string
#     in include/ src/ app/ cmd/; histograms also as _bucket, _sum and _count).
#   deploy_test.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rules="$src/deploy/prometheus/txo-alerts.yml"
dash="$src/deploy/grafana/txo.json"

promtool check rules "$rules"
grep -qxF '#   promtool test rules txo-alerts.test.yml' "$src/deploy/prometheus/txo-alerts.test.yml" ||
    { echo "deploy_test: txo-alerts.test.yml's header names another command" >&2; exit 1; }
(cd "$src/deploy/prometheus" && promtool test rules txo-alerts.test.yml)

python3 -m json.tool "$dash" > /dev/null || { echo "deploy_test: $dash is not JSON" >&2; exit 1; }

grep -rhoE '"txo_[a-z0-9_]+"' "$src/include" "$src/src" "$src/app" "$src/cmd" | tr -d '"' |
    sort -u > "$tmp/registered"
for suffix in '' _bucket _sum _count; do
    sed "s/\$/$suffix/" "$tmp/registered"
done | sort -u > "$tmp/known"
bad=0
for f in "$rules" "$dash"; do
    used=$(grep -oE 'txo_[a-z0-9_]+' "$f" | sort -u)
    [ -n "$used" ] || { echo "deploy_test: $f names no txo metric" >&2; exit 1; }
    for name in $used; do
        if ! grep -qx "$name" "$tmp/known"; then
            echo "deploy_test: $(basename "$f") uses $name, which txo does not export" >&2
            bad=1
        fi
    done
done
[ "$bad" -eq 0 ]
echo "deploy_test: rules and dashboard valid, $(grep -c '"expr"' "$dash") dashboard queries"
