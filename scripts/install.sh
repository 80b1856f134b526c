#!/usr/bin/env bash
# Installs a configured build for PREFIX, as `make install` does (DESTDIR stages it):
#   scripts/install.sh BUILD_DIR PREFIX
#
# GNUInstallDirs computes the directories when CMake configures, from CMAKE_INSTALL_PREFIX:
# Debian's multiarch libdir (lib/x86_64-linux-gnu) only for the prefix /usr. So the build is
# configured for PREFIX first, which changes where files go but no compile flag (nothing is
# rebuilt), and `cmake --install` then installs with that prefix: the library, libtxo.pc, the
# units' ExecStart= and the docs agree. The build keeps PREFIX as its install prefix.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: scripts/install.sh BUILD_DIR PREFIX" >&2; exit 2; }
build=$1
prefix=$2
case "$prefix" in
/*) ;;
*) echo "install.sh: PREFIX must be an absolute path, got \"$prefix\"" >&2; exit 2 ;;
esac
[ -f "$build/CMakeCache.txt" ] || { echo "install.sh: $build is not a configured build" >&2; exit 2; }
current=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
if [ "$current" != "$prefix" ]; then
    echo "install.sh: configuring $build for the prefix $prefix (was $current)"
    cmake -DCMAKE_INSTALL_PREFIX="$prefix" "$build" >/dev/null
fi
cmake --install "$build"
