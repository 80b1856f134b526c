#!/usr/bin/env bash
# The systemd units (systemd/*.service.in) pass `systemd-analyze verify`: written the way
# `make install` writes them (cmake/systemd_units.cmake), with ExecStart pointing at the
# build's txo, since verify insists that the binary exists. Also checks that every daemon unit
# is Type=notify with a watchdog, pulls in txo-migrate.service and starts after it; that
# txo-migrate.service is a oneshot that stays active and runs `txo migrate`; that every unit
# has the hardening docs/deploy.md promises, the very same lines in each; and that the
# credential drop-in of docs/deploy.md (txo-.service.d) passes verify too.
#   units_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake -DSRC="$src/systemd" -DOUT="$tmp" -DTXO_BINDIR="$build" -P "$src/cmake/systemd_units.cmake"
units=("$tmp"/*.service)
[ "${#units[@]}" -eq 4 ] || { echo "units_test: want 4 units, got ${units[*]}" >&2; exit 1; }
[ -f "$tmp/txo-migrate.service" ] || { echo "units_test: no txo-migrate.service" >&2; exit 1; }
# The drop-in docs/deploy.md gives for the password credential, for every txo-* unit.
mkdir "$tmp/txo-.service.d"
printf '[Service]\nLoadCredential=mysql-password:/etc/txo/mysql-password\n' \
    >"$tmp/txo-.service.d/credential.conf"
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
fail() { echo "units_test: $*" >&2; exit 1; }
hardening() { sed -n '/^DynamicUser=/,/^UMask=/p' "$1"; }
for u in "${units[@]}"; do
    name=$(basename "$u")
    for want in DynamicUser=yes NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes \
                PrivateTmp=yes EnvironmentFile=/etc/txo/txo.env "ExecStart=$build/txo " \
                "#LoadCredential=mysql-password:/etc/txo/mysql-password"; do
        grep -q "^$want" "$u" || fail "$name has no $want"
    done
    [ "$(hardening "$u")" = "$(hardening "$tmp/txo-serve.service")" ] ||
        fail "$name's hardening (DynamicUser= to UMask=) differs from txo-serve.service's"
    if [ "$name" = txo-migrate.service ]; then
        for want in Type=oneshot RemainAfterExit=yes "ExecStart=$build/txo migrate\$"; do
            grep -q "^$want" "$u" || fail "$name has no $want"
        done
        continue
    fi
    for want in Type=notify WatchdogSec= "Wants=.* txo-migrate.service" \
                "After=.* txo-migrate.service"; do
        grep -q "^$want" "$u" || fail "$name has no $want"
    done
done
echo "units_test: ${#units[@]} units verified (man pages checked: $man)"
