#!/usr/bin/env bash
# The generated man pages (BUILD_DIR/man/man1, from `txo help --man`) render without a single
# warning from man/groff, there is one per command plus txo(1), and each names its command.
#   man_test.sh BUILD_DIR
set -euo pipefail
build=$1
dir="$build/man/man1"
want=$(( $("$build/txo" help --commands | wc -l) + 1 ))
pages=("$dir"/*.1)
[ "${#pages[@]}" -eq "$want" ] || {
    echo "man_test: $want pages expected in $dir, found ${#pages[@]}" >&2
    exit 1
}
for page in "${pages[@]}"; do
    name=$(basename "$page" .1)
    warnings=$(MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null)
    [ -z "$warnings" ] || { echo "man_test: $name: $warnings" >&2; exit 1; }
    lexgrog "$page" | grep -q "\"$name - " || {
        echo "man_test: $name: no NAME section for $name: $(lexgrog "$page")" >&2
        exit 1
    }
done
echo "man_test: ${#pages[@]} pages without warnings"
