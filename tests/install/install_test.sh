#!/usr/bin/env bash
# Installs the build into a temporary prefix (staged with DESTDIR, as a package would), then
# builds tests/install/outside.c against it with nothing but `pkg-config --cflags --libs libtxo`
# and runs it against the test server: it must publish its event. Fails when a public header,
# the shared library, its soname, its exports or libtxo.pc is broken, or the systemd units,
# man pages or env file example are missing.
#   install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
DESTDIR="$tmp/stage" cmake --install "$build" --prefix /opt/txo >/dev/null
root="$tmp/stage/opt/txo"
pc=$(find "$root" -name libtxo.pc | head -n 1)
[ -n "$pc" ] || { echo "install_test: no libtxo.pc installed" >&2; exit 1; }
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
flags=$(pkg-config --cflags --libs libtxo)
echo "install_test: pkg-config --cflags --libs libtxo: $flags"
cc -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -o "$tmp/outside" \
    "$src/tests/install/outside.c" $flags
libdir=$(pkg-config --variable=libdir libtxo)
soname=$(objdump -p "$libdir/libtxo.so" | awk '/SONAME/ {print $2}')
[ "$soname" = "libtxo.so.0" ] || { echo "install_test: soname is '$soname'" >&2; exit 1; }
# Only the public API is exported: every defined dynamic symbol is txo_*.
extra=$(nm -D --defined-only "$libdir/libtxo.so" | awk '{print $3}' | grep -v '^txo_' || true)
[ -z "$extra" ] || { echo "install_test: libtxo.so exports non-API symbols: $extra" >&2; exit 1; }
# The systemd units name the installed txo (the prefix given at install time, not DESTDIR),
# and the man pages are there.
for unit in txo-serve.service txo-relay@.service txo-worker@.service; do
    grep -qx "ExecStart=/opt/txo/bin/txo .*" "$root/lib/systemd/system/$unit" ||
        { echo "install_test: $unit missing or its ExecStart is not /opt/txo/bin/txo" >&2; exit 1; }
done
for page in txo.1 txo-relay.1 txo-serve.1 txo-worker.1; do
    [ -s "$root/share/man/man1/$page" ] || { echo "install_test: no man page $page" >&2; exit 1; }
done
[ -s "$root/share/man/man5/txo.env.5" ] || { echo "install_test: no man page txo.env.5" >&2; exit 1; }
[ -s "$root/share/txo/txo.env.example" ] || { echo "install_test: no txo.env.example" >&2; exit 1; }
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/outside" "txo_test_install_$$")
echo "install_test: $out"
[ "$out" = "published 1" ]
