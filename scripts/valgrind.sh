#!/usr/bin/env bash
# Runs the txo daemons and the demo under valgrind memcheck against the database named by the
# MYSQL_* environment (the Makefile's `valgrind` target points it at the private server).
# Fails when valgrind reports any memory error or any definite, indirect or possible leak.
#
#   scripts/valgrind.sh [path/to/txo]      (default: build/txo)
set -euo pipefail

bin=${1:-build/txo}
command -v valgrind >/dev/null || { echo "valgrind.sh: valgrind is not installed" >&2; exit 1; }
vg=(valgrind --quiet --error-exitcode=99 --leak-check=full
    --show-leak-kinds=definite,indirect,possible
    --errors-for-leak-kinds=definite,indirect,possible --track-origins=yes)

say() { echo "valgrind.sh: $*" >&2; }

"$bin" migrate

say "txo demo (scenarios, sagas, relay drain) under memcheck"
"${vg[@]}" "$bin" demo --log-level warn >/dev/null

say "txo relay as a daemon, stopped with SIGTERM"
"${vg[@]}" "$bin" relay --publisher null --idle-sleep 50 --log-level warn &
pid=$!
sleep 3
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
if [ "$rc" -ne 0 ]; then
    say "txo relay exited with $rc after SIGTERM (99 = valgrind found errors)"
    exit 1
fi

say "txo relay --drain, txo migrate, txo --help"
"${vg[@]}" "$bin" relay --drain --publisher log --log-level warn >/dev/null
"${vg[@]}" "$bin" migrate --log-level warn
"${vg[@]}" "$bin" --help >/dev/null
say "no memory errors, no leaks"
