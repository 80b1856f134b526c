#!/usr/bin/env bash
# The systemd units (systemd/*.service.in) pass `systemd-analyze verify`: written the way
# `make install` writes them (cmake/systemd_units.cmake), with ExecStart pointing at the
# build's txo, since verify insists that the binary exists. Also checks that every unit is
# Type=notify with a watchdog and the hardening docs/deploy.md promises.
#   units_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake -DSRC="$src/systemd" -DOUT="$tmp" -DTXO_BINDIR="$build" -P "$src/cmake/systemd_units.cmake"
units=("$tmp"/*.service)
[ "${#units[@]}" -ge 3 ] || { echo "units_test: want 3 units, got ${units[*]}" >&2; exit 1; }
# The man pages named in Documentation= are checked when the build has them (MANPATH).
man=no
if [ -d "$build/man/man1" ]; then
    man=yes
    export MANPATH="$build/man"
fi
out=$(cd "$tmp" && systemd-analyze verify --man="$man" "${units[@]}" 2>&1) || {
    echo "units_test: systemd-analyze verify failed:" >&2
    echo "$out" >&2
    exit 1
}
[ -z "$out" ] || { echo "units_test: systemd-analyze verify warned:" >&2; echo "$out" >&2; exit 1; }
for u in "${units[@]}"; do
    for want in Type=notify WatchdogSec= DynamicUser=yes NoNewPrivileges=yes ProtectSystem=strict \
                ProtectHome=yes PrivateTmp=yes EnvironmentFile=/etc/txo/txo.env \
                "ExecStart=$build/txo "; do
        grep -q "^$want" "$u" || { echo "units_test: $(basename "$u") has no $want" >&2; exit 1; }
    done
done
echo "units_test: ${#units[@]} units verified (man pages checked: $man)"
