#!/usr/bin/env bash
# Runs the txo daemons and the demo under valgrind memcheck against the database named by the
# MYSQL_* environment (the Makefile's `valgrind` target points it at the private server).
# Fails when valgrind reports any memory error or any definite, indirect or possible leak.
#
#   scripts/valgrind.sh [path/to/txo]      (default: build/txo)
#
# The fake payment/shipment service is $TXO_FAKE_BIN (default: txo-fake-services next to txo).
set -euo pipefail

bin=${1:-build/txo}
fake_bin=${TXO_FAKE_BIN:-$(dirname "$bin")/txo-fake-services}
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

# The whole service (HTTP API with its threads and pool, relay, worker, metrics) under load,
# with the fake payment/shipment service so the libcurl paths run too.
# A TCP port on 127.0.0.1 nothing listens on (bash's /dev/tcp: a refused connect means free),
# below the kernel's ephemeral range: a port there can be some client's local end, which
# refuses a connect and still cannot be listened on.
port_free() {
    local p low
    read -r low _ < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=32768
    [ "$low" -gt 21000 ] || low=32768
    while :; do
        p=$((20000 + RANDOM % (low - 20000)))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return
        fi
    done
}
api_port=$(port_free)
fake_port=$(port_free)
say "txo-fake-services + txo up serving orders, stopped with SIGTERM"
"${vg[@]}" "$fake_bin" --listen "127.0.0.1:$fake_port" --log-level warn &
fake=$!
"${vg[@]}" "$bin" up --listen "127.0.0.1:$api_port" --stock vg-sku=1000 --log-level warn \
    --payment-url "http://127.0.0.1:$fake_port" --shipment-url "http://127.0.0.1:$fake_port" \
    --poll 50 --idle-sleep 50 &
up=$!
for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$api_port/readyz" >/dev/null 2>&1 && break
    sleep 0.2
done
for i in $(seq 20); do
    curl -sf -X POST "http://127.0.0.1:$api_port/orders" -H 'Content-Type: application/json' \
        -H "Idempotency-Key: vg-$$-$i" \
        -d '{"customer_id":1,"items":[{"sku":"vg-sku","qty":1,"price_cents":100}]}' >/dev/null
done
curl -s -X POST "http://127.0.0.1:$api_port/orders" -H 'Content-Type: application/json' \
    -H "Idempotency-Key: vg-$$-bad" -d '{"customer_id":1,"items":[]}' >/dev/null
curl -sf "http://127.0.0.1:$api_port/metrics" >/dev/null
curl -sf "http://127.0.0.1:$api_port/orders/1" >/dev/null || true
sleep 3
stop_checked() {
    kill -TERM "$2"
    local rc=0
    wait "$2" || rc=$?
    if [ "$rc" -ne 0 ]; then
        say "$1 exited with $rc after SIGTERM (99 = valgrind found errors)"
        exit 1
    fi
}
stop_checked "txo up" "$up"
stop_checked "txo-fake-services" "$fake"

say "txo worker --broker none, stopped with SIGTERM"
"${vg[@]}" "$bin" worker --broker none --poll 50 --clean-interval 1 --log-level warn &
worker=$!
sleep 3
stop_checked "txo worker" "$worker"

say "txo stats, dlq list, relay --drain, txo migrate, txo --help"
"${vg[@]}" "$bin" stats >/dev/null
"${vg[@]}" "$bin" dlq list >/dev/null
"${vg[@]}" "$bin" relay --drain --publisher log --log-level warn >/dev/null
"${vg[@]}" "$bin" migrate --log-level warn
"${vg[@]}" "$bin" --help >/dev/null
say "no memory errors, no leaks"
