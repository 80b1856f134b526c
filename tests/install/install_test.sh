#!/usr/bin/env bash
# Installs the build the way `make install` does (scripts/install.sh), staged with DESTDIR as a
# package would be, for the prefix /usr and for the Makefile's default /usr/local, and checks
# the layout a Debian operator expects:
#   - the libraries in GNUInstallDirs' libdir: lib/<multiarch> under /usr, lib under /usr/local;
#   - libtxo.pc beside them, naming that prefix and libdir, and resolving into the staged tree
#     with PKG_CONFIG_SYSROOT_DIR;
#   - the systemd units (lib/systemd/system and share/txo/systemd), their ExecStart= the txo of
#     the prefix (not DESTDIR);
#   - share/txo: the alert rules and their unit tests (which pass where they are installed), the
#     Grafana dashboard, the env file example; the docs and the man pages.
# Then it builds tests/install/outside.c against each staged tree with nothing but
# `pkg-config --cflags --libs libtxo`, and runs the /usr one against the test server: it must
# publish its event. The build's own install prefix is put back afterwards.
#   install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
cache_prefix() { sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt"; }
orig_prefix=$(cache_prefix)
restore() {
    if [ "$(cache_prefix)" != "$orig_prefix" ]; then
        cmake -DCMAKE_INSTALL_PREFIX="$orig_prefix" "$build" >/dev/null
    fi
    rm -rf "$tmp"
}
trap restore EXIT
fail() { echo "install_test: $*" >&2; exit 1; }
multiarch=$(cc -print-multiarch)
[ -n "$multiarch" ] || fail "cc -print-multiarch names no multiarch tuple"

# check_prefix PREFIX LIBDIR: installs for PREFIX into $tmp/<name>, checks it, and leaves the
# outside program in $tmp/<name>/outside.
check_prefix() {
    local prefix=$1 libdir=$2
    local stage
    stage="$tmp/$(basename "$prefix")"
    DESTDIR="$stage" "$src/scripts/install.sh" "$build" "$prefix" >"$tmp/install.log" ||
        { cat "$tmp/install.log" >&2; fail "scripts/install.sh $build $prefix failed"; }
    local root="$stage$prefix"
    for f in "$stage$libdir/libtxo.so.0.2" "$stage$libdir/libtxo.a" "$root/bin/txo" \
             "$root/include/txo/txo.h"; do
        [ -e "$f" ] || fail "prefix $prefix: no ${f#"$stage"}"
    done
    local pc="$stage$libdir/pkgconfig/libtxo.pc"
    [ -f "$pc" ] || fail "prefix $prefix: no $libdir/pkgconfig/libtxo.pc"
    # As the installed host sees it, then as a build against the staged tree does.
    local got
    got=$(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --variable=prefix libtxo)
    [ "$got" = "$prefix" ] || fail "libtxo.pc: prefix is '$got', want $prefix"
    got=$(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --variable=libdir libtxo)
    [ "$got" = "$libdir" ] || fail "libtxo.pc: libdir is '$got', want $libdir"
    local flags
    flags=$(PKG_CONFIG_SYSROOT_DIR="$stage" PKG_CONFIG_PATH="$(dirname "$pc")" \
        pkg-config --cflags --libs libtxo)
    echo "install_test: prefix $prefix: pkg-config --cflags --libs libtxo: $flags"
    case " $flags " in
    *" -I$root/include "*" -L$stage$libdir "*) ;;
    *) fail "prefix $prefix: the flags do not name $root/include and $stage$libdir" ;;
    esac
    # shellcheck disable=SC2086 # the flags are words
    cc -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -o "$stage/outside" \
        "$src/tests/install/outside.c" $flags
    local soname
    soname=$(objdump -p "$stage$libdir/libtxo.so" | awk '/SONAME/ {print $2}')
    [ "$soname" = "libtxo.so.0.2" ] || fail "soname is '$soname'"
    # Only the public API is exported: every defined dynamic symbol is txo_*.
    local extra
    extra=$(nm -D --defined-only "$stage$libdir/libtxo.so" | awk '{print $3}' | grep -v '^txo_' ||
        true)
    [ -z "$extra" ] || fail "libtxo.so exports non-API symbols: $extra"
    # The units, where systemd looks and under share/txo, name the installed txo.
    for unit in txo-serve.service txo-relay@.service txo-worker@.service txo-migrate.service; do
        for dir in "$root/lib/systemd/system" "$root/share/txo/systemd"; do
            grep -q "^ExecStart=$prefix/bin/txo " "$dir/$unit" ||
                fail "${dir#"$stage"}/$unit missing or its ExecStart is not $prefix/bin/txo"
        done
    done
    for f in prometheus/txo-alerts.yml prometheus/txo-alerts.test.yml grafana/txo.json \
             txo.env.example migrations/0001_outbox.sql; do
        [ -s "$root/share/txo/$f" ] || fail "prefix $prefix: no share/txo/$f"
    done
    (cd "$root/share/txo/prometheus" && promtool test rules txo-alerts.test.yml >/dev/null) ||
        fail "promtool test rules txo-alerts.test.yml fails in share/txo/prometheus"
    [ -s "$root/share/doc/txo/deploy.md" ] || fail "prefix $prefix: no share/doc/txo/deploy.md"
    for page in txo.1 txo-relay.1 txo-serve.1 txo-worker.1; do
        [ -s "$root/share/man/man1/$page" ] || fail "prefix $prefix: no man page $page"
    done
    [ -s "$root/share/man/man5/txo.env.5" ] || fail "prefix $prefix: no man page txo.env.5"
}

check_prefix /usr "/usr/lib/$multiarch"
check_prefix /usr/local /usr/local/lib
out=$(LD_LIBRARY_PATH="$tmp/usr/usr/lib/$multiarch" "$tmp/usr/outside" "txo_test_install_$$")
echo "install_test: $out"
[ "$out" = "published 1" ]
