#!/usr/bin/env bash
# The generated man pages (BUILD_DIR/man/man1 and man5, from `txo help --man`) render without a
# single warning from man/groff: one per command plus txo(1), and txo.env(5). Each names its
# command and has the sections an operator looks for (ENVIRONMENT, EXIT STATUS, EXAMPLES, ...).
# The settings for tests only (--crash-point) are in no page and no --help, yet still accepted.
#   man_test.sh BUILD_DIR
set -euo pipefail
build=$1
txo="$build/txo"
dir="$build/man/man1"
want=$(( $("$txo" help --commands | wc -l) + 1 ))
pages=("$dir"/*.1)
[ "${#pages[@]}" -eq "$want" ] || {
    echo "man_test: $want pages expected in $dir, found ${#pages[@]}" >&2
    exit 1
}
env_page="$build/man/man5/txo.env.5"
[ -f "$env_page" ] || { echo "man_test: no $env_page" >&2; exit 1; }

# The section headings of a page, one per line, as man renders them.
sections() {
    MANWIDTH=80 man -l "$1" 2>/dev/null | col -b | grep -E '^[A-Z][A-Z ]+$'
}

need_sections() {
    local page=$1
    shift
    local have
    have=$(sections "$page")
    for s in "$@"; do
        grep -qx "$s" <<<"$have" || {
            echo "man_test: $(basename "$page"): no $s section (has: $(tr '\n' ' ' <<<"$have"))" >&2
            exit 1
        }
    done
}

for page in "${pages[@]}" "$env_page"; do
    name=$(basename "$page")
    name=${name%.*}
    warnings=$(MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null)
    [ -z "$warnings" ] || { echo "man_test: $name: $warnings" >&2; exit 1; }
    lexgrog "$page" | grep -q "\"$name - " || {
        echo "man_test: $name: no NAME section for $name: $(lexgrog "$page")" >&2
        exit 1
    }
    if grep -q -e 'crash\\-point' -e 'TXO_CRASH_POINT' "$page"; then
        echo "man_test: $name shows the tests' --crash-point" >&2
        exit 1
    fi
done

for page in "${pages[@]}"; do
    need_sections "$page" NAME SYNOPSIS DESCRIPTION ENVIRONMENT "EXIT STATUS" EXAMPLES "SEE ALSO"
done
need_sections "$env_page" NAME SYNOPSIS DESCRIPTION VARIABLES FILES EXAMPLES "SEE ALSO"
# txo.env(5) holds every variable a command reads, each command's under its own heading.
for cmd in $("$txo" help --commands); do
    grep -q "^\.SS txo $cmd\$" "$env_page" || {
        echo "man_test: txo.env.5 has no section for txo $cmd" >&2
        exit 1
    }
    help=$("$txo" "$cmd" --help)
    for var in $(grep -o '\[\(TXO\|MYSQL\)_[A-Z0-9_]*\]' <<<"$help" | tr -d '[]'); do
        grep -q "^\.B $var\$" "$env_page" || {
            echo "man_test: txo.env.5 lacks $var (txo $cmd)" >&2
            exit 1
        }
    done
done

# --help of every command leaves out the tests' settings, which are still accepted.
for cmd in $("$txo" help --commands); do
    help=$("$txo" "$cmd" --help)
    if grep -q -e '--crash-point' -e 'TXO_CRASH_POINT' <<<"$help"; then
        echo "man_test: txo $cmd --help shows the tests' --crash-point" >&2
        exit 1
    fi
done
config=$("$txo" migrate --crash-point=never --print-config)
grep -qx 'crash-point=never' <<<"$config" || {
    echo "man_test: txo migrate does not accept --crash-point" >&2
    exit 1
}
echo "man_test: $((${#pages[@]} + 1)) pages without warnings, with their sections"
