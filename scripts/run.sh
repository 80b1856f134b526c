#!/usr/bin/env bash
# Runs the whole order service locally with `txo up` (HTTP API + relay + worker in one process)
# on the private MariaDB, and prints how to use it. Called by `make run`; Ctrl-C stops it.
#
#   scripts/run.sh              local dispatch: MariaDB is the only other process
#   BROKER=nats scripts/run.sh  also starts a private broker (scripts/broker.sh names lists
#                               them; NATS=1 is BROKER=nats) and runs `txo up --broker` on it
#   scripts/run.sh              also starts txo-fake-services (the payment and shipment
#                               services, with test values that decline, refuse and slow
#                               down: see the banner) and calls it over HTTP
#   TXO_PAYMENT_URL=... TXO_SHIPMENT_URL=... scripts/run.sh
#                               calls those services instead; no fake service is started
#   FAKES=0 scripts/run.sh      no services at all: the in-process stand-ins accept every
#                               charge and shipment
#   scripts/run.sh --check      only check that the ports are free (`make run` does, before
#                               building): when one is taken, say which and print the
#                               command with free ones
#
# Environment: TXO_BIN (default build/txo), TXO_FAKE_BIN (default: txo-fake-services next to
# TXO_BIN), TXO_LISTEN (default 127.0.0.1:8080), TXO_NATS_PORT (default 4223),
# TXO_FAKE_PORT (default 8090), any other TXO_* / MYSQL_* setting of `txo up --help`.
# The broker's data and log are in .txo/<broker>/; it is stopped when `txo up` exits.
# TXO_DB_PRIVATE=1 (set by make): the database is the private server of scripts/db.sh.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TXO_BIN="${TXO_BIN:-$ROOT/build/txo}"
LISTEN="${TXO_LISTEN:-127.0.0.1:8080}"
NATS_PORT="${TXO_NATS_PORT:-4223}"
BROKER="${BROKER:-}"
[ "${NATS:-0}" = "1" ] && BROKER=nats
[ "$BROKER" = "local" ] && BROKER=""
BROKER_DIR="$ROOT/.txo/$BROKER"
BROKER_UP=0
TXO_FAKE_BIN="${TXO_FAKE_BIN:-$(dirname "$TXO_BIN")/txo-fake-services}"
FAKE_PORT="${TXO_FAKE_PORT:-8090}"
FAKE_PID=""
# The fake services run unless the real ones are named or FAKES=0 asks for none.
if [ -n "${TXO_PAYMENT_URL:-}${TXO_SHIPMENT_URL:-}" ]; then
    FAKES=0
fi
FAKES="${FAKES:-1}"

log() { printf 'run.sh: %s\n' "$*" >&2; }

# stop NAME PID: SIGTERM to a helper this script started, if it still runs.
stop() {
    if [ -n "$2" ] && kill -0 "$2" 2>/dev/null; then
        kill -TERM "$2" 2>/dev/null || true
        wait "$2" 2>/dev/null || true
        log "$1 stopped"
    fi
}

# wait_port PORT: up to 5 s until something accepts TCP connections on 127.0.0.1:PORT.
wait_port() {
    for _ in $(seq 50); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return
        sleep 0.1
    done
}

# True when something accepts TCP connections on 127.0.0.1:$1.
port_taken() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# The first port above $1 that nothing listens on.
free_port_after() {
    local p=$(($1 + 1))
    while port_taken "$p"; do p=$((p + 1)); done
    printf '%s' "$p"
}

# Every port this run listens on must be free; otherwise one message with all of them and the
# command that uses free ones, before anything is built or started.
check_ports() {
    local taken=() fix=() port="${LISTEN##*:}" free
    if port_taken "$port"; then
        free="$(free_port_after "$port")"
        taken+=("$LISTEN (HTTP API)")
        fix+=("TXO_LISTEN=${LISTEN%:*}:$free")
    fi
    if [ "$BROKER" = "nats" ] && port_taken "$NATS_PORT"; then
        taken+=("127.0.0.1:$NATS_PORT (nats-server)")
        fix+=("TXO_NATS_PORT=$(free_port_after "$NATS_PORT")")
    fi
    if [ "$FAKES" = "1" ] && port_taken "$FAKE_PORT"; then
        taken+=("127.0.0.1:$FAKE_PORT (txo-fake-services)")
        fix+=("TXO_FAKE_PORT=$(free_port_after "$FAKE_PORT")")
    fi
    [ "${#taken[@]}" -eq 0 ] && return 0
    local flags=""
    [ -n "$BROKER" ] && flags+=" BROKER=$BROKER"
    log "port taken by another program: ${taken[*]}"
    log "use free ones:  make run$flags ${fix[*]}${TXO_DB_PORT:+ TXO_DB_PORT=$TXO_DB_PORT}"
    exit 1
}

if [ "${1:-}" = "--check" ]; then
    check_ports
    exit 0
fi

cleanup() {
    stop txo-fake-services "$FAKE_PID"
    [ "$BROKER_UP" = "1" ] && "$ROOT/scripts/broker.sh" stop "$BROKER" "$BROKER_DIR"
    if [ "${TXO_DB_PRIVATE:-0}" = "1" ]; then
        log "the private MariaDB keeps running (127.0.0.1:${MYSQL_PORT:-?}, .txo/mariadb) for the" \
            "next run; stop it with: make db-stop"
    fi
}
check_ports
trap cleanup EXIT

ARGS=(up --listen "$LISTEN"
      --stock "iphone-15=1000,airpods-pro=1000,usb-c-cable=5000,undeliverable=1000")
if [ -n "$BROKER" ]; then
    port=""
    [ "$BROKER" = "nats" ] && port="$NATS_PORT"
    flags="$("$ROOT/scripts/broker.sh" start "$BROKER" "$BROKER_DIR" $port)" || exit 1
    BROKER_UP=1
    mapfile -t broker_flags <<<"$flags"
    ARGS+=(--broker "$BROKER" "${broker_flags[@]}")
fi
if [ "$FAKES" = "1" ]; then
    mkdir -p "$ROOT/.txo"
    "$TXO_FAKE_BIN" --listen "127.0.0.1:$FAKE_PORT" >"$ROOT/.txo/fake-services.log" 2>&1 &
    FAKE_PID=$!
    wait_port "$FAKE_PORT"
    log "txo-fake-services on 127.0.0.1:$FAKE_PORT (log: .txo/fake-services.log)"
    ARGS+=(--payment-url "http://127.0.0.1:$FAKE_PORT" --shipment-url "http://127.0.0.1:$FAKE_PORT")
fi

URL="http://$LISTEN"
cat <<BANNER

  txo is starting: HTTP API on $URL  (Ctrl-C stops it)

  Place an order (run it twice: the same Idempotency-Key returns the same order):
    curl -s -X POST $URL/orders -H 'Content-Type: application/json' -H 'Idempotency-Key: demo-1' \\
         -d '{"customer_id":123,"items":[{"sku":"iphone-15","qty":1,"price_cents":100000}]}'
  See it CONFIRMED, with its saga:   curl -s $URL/orders/1
  Metrics:                           curl -s $URL/metrics
  Outbox at a glance:                curl -s $URL/outbox/stats
  The operator's dashboard:          $URL/ui  (in a browser)
BANNER
if [ "$FAKES" = "1" ]; then
    cat <<BANNER
  What goes wrong (test values of the fake payment and shipment service, on 127.0.0.1:$FAKE_PORT):
    customer 402's card is declined:  the saga releases the stock, the order ends CANCELLED
      curl -s -X POST $URL/orders -H 'Content-Type: application/json' -H 'Idempotency-Key: demo-2' \\
           -d '{"customer_id":402,"items":[{"sku":"iphone-15","qty":1,"price_cents":100000}]}'
    the SKU "undeliverable" is refused by the carrier:  payment refunded, stock back, CANCELLED
      curl -s -X POST $URL/orders -H 'Content-Type: application/json' -H 'Idempotency-Key: demo-3' \\
           -d '{"customer_id":123,"items":[{"sku":"undeliverable","qty":1,"price_cents":500}]}'
    customer 408's card takes 4 s to charge: time to cancel (N: the order_id the POST printed)
      curl -s -X POST $URL/orders -H 'Content-Type: application/json' -H 'Idempotency-Key: demo-4' \\
           -d '{"customer_id":408,"items":[{"sku":"airpods-pro","qty":1,"price_cents":25000}]}'
      curl -s -X POST $URL/orders/N/cancel -H 'If-Match: "0"'
    What the services recorded:       curl -s 127.0.0.1:$FAKE_PORT/stats
BANNER
fi
echo
# Not exec: the trap must stop the broker and the fake service after `txo up` exits. SIGINT reaches all.
set +e
"$TXO_BIN" "${ARGS[@]}" "$@"
status=$?
exit $status
