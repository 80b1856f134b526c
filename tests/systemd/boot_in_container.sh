#!/usr/bin/env bash
# Manual check (not in CI, not in ctest; slow): a fresh Debian 12 with systemd as PID 1, in a
# systemd-nspawn container, gets `make install` and starts txo-serve, txo-relay@1 and
# txo-worker@1/@2 from the installed unit files, as docs/deploy.md tells an operator, against
# MariaDB and nats-server in the same container. Then it places an order and follows it to
# CONFIRMED, stops the database under the running daemons and brings it back, and stops the
# units. What it saw is in $OUT (summary.txt, the journals, `systemctl show`/`status`).
#
#   sudo tests/systemd/boot_in_container.sh [--fresh] [ROOTFS]
#
#   ROOTFS   the container's root (default /var/tmp/txo-rootfs); made with debootstrap when
#            missing or with --fresh (needs a Debian mirror; about 650 MB).
#   OUT=DIR  where the results go (default build/boot-check)
#   MAKE_ARGS='CMAKE_ARGS=-DTXO_BUILD_TESTS=OFF' passes arguments to `make install`.
#
# Needs root, systemd-nspawn (package systemd-container) and debootstrap. It works on a host
# without systemd as PID 1 (so in a CI-like sandbox): nspawn runs with --register=no
# --keep-unit (no machined, no host bus) and --private-network (the container's own loopback,
# so its MariaDB and 127.0.0.1:8080 do not meet the host's), and in a mount namespace of its
# own with a tmpfs on /run/systemd, so that it leaves nothing in the host's /run.
set -euo pipefail

log() { printf 'boot_in_container: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

fresh=0
if [ "${1:-}" = --fresh ]; then
    fresh=1
    shift
fi
ROOT=${1:-/var/tmp/txo-rootfs}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$SRC/build/boot-check}
BOOT_TIMEOUT=${BOOT_TIMEOUT:-600}
# What a fresh machine gets from apt: systemd, the libraries `ldd txo` names, MariaDB, NATS and
# curl (the checks use it): docs/deploy.md step 1.
PACKAGES=systemd,systemd-sysv,dbus,libmariadb3,libjansson4,libuuid1,libssl3,libnats3.4,libcurl4,libsystemd0,mariadb-server,nats-server,curl

[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap, make install into the rootfs, nspawn)"
command -v systemd-nspawn >/dev/null || die "no systemd-nspawn: apt-get install systemd-container"

case "$ROOT" in /|"") die "refusing ROOTFS=$ROOT" ;; esac
if [ "$fresh" -eq 1 ] || [ ! -x "$ROOT/lib/systemd/systemd" ]; then
    command -v debootstrap >/dev/null || die "no debootstrap: apt-get install debootstrap"
    rm -rf "$ROOT"
    log "debootstrap bookworm into $ROOT"
    debootstrap --variant=minbase --include="$PACKAGES" bookworm "$ROOT" \
        http://deb.debian.org/debian >"$ROOT.debootstrap.log" 2>&1 ||
        die "debootstrap failed: see $ROOT.debootstrap.log"
fi

# docs/deploy.md step 2, in its staging form.
log "make install PREFIX=/usr DESTDIR=$ROOT ${MAKE_ARGS:-}"
# shellcheck disable=SC2086
make -C "$SRC" install PREFIX=/usr DESTDIR="$ROOT" ${MAKE_ARGS:-} >"$ROOT.install.log" 2>&1 ||
    die "make install failed: see $ROOT.install.log"
for f in usr/bin/txo usr/lib/systemd/system/txo-serve.service \
         usr/lib/systemd/system/txo-relay@.service usr/lib/systemd/system/txo-worker@.service \
         usr/lib/systemd/system/txo-migrate.service usr/share/txo/txo.env.example; do
    [ -e "$ROOT/$f" ] || die "make install did not install /$f"
done
missing=$(chroot "$ROOT" ldd /usr/bin/txo | grep 'not found' || true)
[ -z "$missing" ] || die "the rootfs lacks libraries of txo: $missing"

# The harness: a oneshot after multi-user.target runs the operator's steps and the checks,
# then powers the container off. Removed again after the run.
install -m 0755 "$SRC/tests/systemd/boot_check_inside.sh" "$ROOT/usr/local/sbin/txo-boot-check"
cat >"$ROOT/etc/systemd/system/txo-boot-check.service" <<'EOF'
[Unit]
Description=txo boot check (tests/systemd/boot_in_container.sh)
After=multi-user.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/txo-boot-check
TimeoutStartSec=10min

[Install]
WantedBy=multi-user.target
EOF
mkdir -p "$ROOT/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/txo-boot-check.service \
    "$ROOT/etc/systemd/system/multi-user.target.wants/txo-boot-check.service"
cleanup() {
    rm -f "$ROOT/etc/systemd/system/multi-user.target.wants/txo-boot-check.service" \
        "$ROOT/etc/systemd/system/txo-boot-check.service" "$ROOT/usr/local/sbin/txo-boot-check"
}
trap cleanup EXIT
rm -rf "$ROOT/txo-boot-check"

mnt=/run
[ -d /run/systemd ] && mnt=/run/systemd
log "booting $ROOT (systemd-nspawn -b, up to ${BOOT_TIMEOUT}s); console in $ROOT.console.log"
rc=0
timeout --kill-after=30 "$BOOT_TIMEOUT" unshare --mount --propagation private sh -c \
    "mount -t tmpfs -o mode=0755 tmpfs '$mnt' &&
     exec systemd-nspawn --quiet --register=no --keep-unit --private-network \
         --machine=txo-boot -D '$ROOT' -b --console=pipe" \
    </dev/null >"$ROOT.console.log" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || log "systemd-nspawn exited $rc (124: timed out); console: $ROOT.console.log"

rm -rf "$OUT"
mkdir -p "$OUT"
[ -d "$ROOT/txo-boot-check" ] && cp -a "$ROOT/txo-boot-check/." "$OUT/"
cp "$ROOT.console.log" "$OUT/console.log" 2>/dev/null || true
[ -f "$OUT/done" ] || die "the check in the container did not finish: see $OUT and $ROOT.console.log"

cat "$OUT/summary.txt"
for u in txo-serve.service txo-relay@1.service txo-worker@1.service txo-worker@2.service; do
    printf '%-22s %s\n' "$u" "$(grep -E '^(SubState|StatusText)=' "$OUT/show-$u.txt" | tr '\n' ' ')"
done
passed=$(grep -c '^ok ' "$OUT/summary.txt" || true)
failed=$(grep -c '^FAIL ' "$OUT/summary.txt" || true)
echo "boot_in_container: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
