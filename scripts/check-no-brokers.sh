#!/usr/bin/env bash
# Proves that txo builds and works with no broker at all (every -DTXO_WITH_<BROKER>=OFF): a
# program that only appends to the outbox must not need a broker's client library.
#
#   scripts/check-no-brokers.sh [--all] [BUILD_DIR]     (BUILD_DIR: build-minimal)
#
# 1. configures BUILD_DIR with every broker off (no benchmarks) and builds what the tests below
#    need; 2. checks with ldd that libtxo.so and txo link none of libnats, librdkafka,
#    librabbitmq, libhiredis, libgrpc, libprotobuf; 3. runs that build's unit tests (among them
#    brokers_built_in: txo refuses each broker by name) and the MariaDB tests of what a program
#    without a broker uses: the relay's log, null and webhook publishers, local dispatch, a
#    relay-only database, the install and an outside program linked against it. Under 2 minutes
#    on 2 cores. --all builds everything and runs every test the build registers instead (all of
#    them need MariaDB only; about 9 minutes on 2 cores).
#
# The database is the one of MYSQL_* (`make build-minimal` passes the private server's).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

all=false
if [ "${1:-}" = "--all" ]; then
    all=true
    shift
fi
build=${1:-build-minimal}
jobs=${JOBS:-2}
log() { printf 'check-no-brokers: %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

# The MariaDB tests of the paths a program without a broker takes (the unit tests run too).
db_tests=(test_outbox test_relay_only test_local_dispatch test_webhook test_worker_order
          install_and_link)

off=()
for b in NATS KAFKA REDIS RABBITMQ GRPC; do
    off+=("-DTXO_WITH_$b=OFF")
done
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTXO_BUILD_BENCH=OFF "${off[@]}" \
    >/dev/null
if $all; then
    cmake --build "$build" -j"$jobs"
else
    # The programs, and the cmocka programs of the tests that run (each named as its test).
    mapfile -t programs < <(ctest --test-dir "$build" -N -L unit |
                            sed -n 's/^ *Test *#[0-9]*: \(test_[a-z0-9_]*\)$/\1/p')
    for t in "${db_tests[@]}"; do
        if [[ $t == test_* ]]; then
            programs+=("$t")
        fi
    done
    cmake --build "$build" -j"$jobs" --target txo_cmd txo_shared txo_fake_services txo_man \
        "${programs[@]}"
fi

sdks='libnats|librdkafka|librabbitmq|libhiredis|libgrpc|libprotobuf'
for f in "$build/libtxo.so" "$build/txo"; do
    linked=$(ldd "$f" | grep -E "$sdks" || true)
    [ -z "$linked" ] || die "$f links a broker's library: $linked"
done
log "libtxo.so and txo link no broker library"

run_ctest() {
    ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 300 "$@" </dev/null
}
if $all; then
    run_ctest
else
    run_ctest -L unit
    run_ctest -R "^($(IFS='|'; echo "${db_tests[*]}"))\$"
fi
log "OK: the build without brokers passes"
