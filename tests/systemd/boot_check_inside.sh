#!/bin/sh
# Runs inside the container that tests/systemd/boot_in_container.sh boots (as the oneshot
# txo-boot-check.service, after multi-user.target): the operator's steps of docs/deploy.md on
# a booted systemd, then the checks. Everything it finds goes to /txo-boot-check/ in the
# rootfs (summary.txt: one "ok ..." or "FAIL ..." line per check); then it powers off.
# Not for a real host: it creates a database account with a fixed password.
set -u
OUT=/txo-boot-check
rm -rf "$OUT"
mkdir -p "$OUT"
exec >"$OUT/log.txt" 2>&1
set -x
PASSWORD=boot-check-secret
UNITS="txo-serve.service txo-relay@1.service txo-worker@1.service txo-worker@2.service"

ok() { echo "ok $*" >>"$OUT/summary.txt"; }
fail() { echo "FAIL $*" >>"$OUT/summary.txt"; }
check() { # check NAME COMMAND...: one summary line from the command's exit status
    name=$1
    shift
    if "$@"; then ok "$name"; else fail "$name"; fi
}
finish() {
    for u in $UNITS txo-migrate.service mariadb.service nats-server.service; do
        journalctl -b --no-pager -o short-precise -u "$u" >"$OUT/journal-$u.txt" 2>&1
    done
    journalctl -b --no-pager -o short-precise >"$OUT/journal-all.txt" 2>&1
    systemctl --failed --no-pager >"$OUT/failed.txt" 2>&1
    echo finished >"$OUT/done"
    systemctl poweroff
    exit 0
}

echo "system: $(systemctl is-system-running)" >"$OUT/system.txt"
systemd-detect-virt >>"$OUT/system.txt" 2>&1

# On a rootfs that ran this before, the units are enabled and were started by the boot.
# shellcheck disable=SC2086
{ systemctl is-enabled $UNITS; systemctl is-active $UNITS; } >"$OUT/at-boot.txt" 2>&1
# shellcheck disable=SC2086
echo "info at boot, before step 7: $(systemctl is-enabled $UNITS | tr '\n' ' ')/" \
    "$(systemctl is-active $UNITS | tr '\n' ' ')" >>"$OUT/summary.txt"

# --- The operator's steps (docs/deploy.md), in its order. ---------------------------------
# Steps 1 and 2 (the packages, make install) made the rootfs: boot_in_container.sh.
# Step 3: JetStream on the local nats-server; Debian's config has none.
if ! grep -q '^jetstream' /etc/nats-server.conf; then
    printf '\njetstream {\n  store_dir: /var/lib/nats\n}\n' >>/etc/nats-server.conf
fi
install -d -o nats -g nats -m 0750 /var/lib/nats
systemctl restart nats-server.service
check "nats-server.service is active with JetStream" sh -c \
    'systemctl is-active --quiet nats-server.service && sleep 1 &&
     journalctl -b -u nats-server.service | grep -q "Starting JetStream"'
# Step 4: the database and its account (one account for every daemon).
check "mariadb.service is active" systemctl is-active --quiet mariadb.service
mariadb -e "CREATE DATABASE IF NOT EXISTS appdb;
  CREATE USER IF NOT EXISTS 'app'@'localhost' IDENTIFIED BY '$PASSWORD';
  CREATE USER IF NOT EXISTS 'app'@'127.0.0.1' IDENTIFIED BY '$PASSWORD';
  GRANT ALL ON appdb.* TO 'app'@'localhost';
  GRANT ALL ON appdb.* TO 'app'@'127.0.0.1';"
check "database appdb and account app created" test $? -eq 0

# Step 5: /etc/txo/txo.env from the installed example, mode 0600, and the password as the
# systemd credential (docs/deploy.md, "The database password"): not in txo.env, in
# /etc/txo/mysql-password, loaded by the drop-in for every txo-* unit.
install -m 0600 -D /usr/share/txo/txo.env.example /etc/txo/txo.env
sed -i '/^MYSQL_PASSWORD=/d' /etc/txo/txo.env
check "/etc/txo/txo.env is root:root 0600" test "$(stat -c '%U:%G %a' /etc/txo/txo.env)" = "root:root 600"
(umask 077; printf '%s\n' "$PASSWORD" >/etc/txo/mysql-password)
mkdir -p /etc/systemd/system/txo-.service.d
printf '[Service]\nLoadCredential=mysql-password:/etc/txo/mysql-password\n' \
    >/etc/systemd/system/txo-.service.d/credential.conf

# Step 6: the schema: txo-migrate.service, which step 7's units pull in and wait for.

# Step 7: the units (and txo-worker@2, as the Units section has it).
systemctl daemon-reload
# shellcheck disable=SC2086
systemctl enable --now $UNITS >"$OUT/enable.txt" 2>&1
check "systemctl enable --now $UNITS" test $? -eq 0

# --- The checks. ---------------------------------------------------------------------------
systemctl show -p Type,ActiveState,SubState,Result,ExecMainStatus txo-migrate.service \
    >"$OUT/show-txo-migrate.service.txt" 2>&1
check "txo-migrate.service ran before the daemons: active (exited), success" sh -c \
    "grep -qx 'SubState=exited' '$OUT/show-txo-migrate.service.txt' &&
     grep -qx 'Result=success' '$OUT/show-txo-migrate.service.txt'"
check "txo-migrate.service brought the database up to date" sh -c \
    'journalctl -b -u txo-migrate.service | grep -q "is up to date"'
for u in $UNITS; do
    systemctl show -p Type,ActiveState,SubState,StatusText,Result,NRestarts,MainPID,User,WatchdogUSec \
        "$u" >"$OUT/show-$u.txt" 2>&1
    systemctl status --no-pager -l "$u" >"$OUT/status-$u.txt" 2>&1
    pid=$(systemctl show -p MainPID --value "$u")
    grep -E '^(Uid|NoNewPrivs|CapEff|CapBnd|Seccomp):' "/proc/$pid/status" >"$OUT/proc-$u.txt" 2>&1
    check "$u active (running)" grep -qx 'SubState=running' "$OUT/show-$u.txt"
    check "$u Type=notify" grep -qx 'Type=notify' "$OUT/show-$u.txt"
    check "$u reported a STATUS" grep -q '^StatusText=..*' "$OUT/show-$u.txt"
done
for u in $UNITS; do
    systemd-analyze security --no-pager "$u" 2>&1 | tail -1 >>"$OUT/security.txt"
done

curl -s -o "$OUT/readyz.txt" -w '%{http_code}\n' http://127.0.0.1:8080/readyz >"$OUT/readyz.code" 2>&1
check "GET /readyz of txo serve: 200" grep -qx 200 "$OUT/readyz.code"
curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:8080/healthz >"$OUT/healthz.code" 2>&1
check "GET /healthz of txo serve: 200" grep -qx 200 "$OUT/healthz.code"

# An order, end to end: serve writes it with its OrderCreated outbox row, relay@1 publishes the
# row to JetStream, a worker consumes it and runs the saga to CONFIRMED.
place_order() { # place_order TAG
    tag=$1
    curl -s -w '\n%{http_code}\n' -X POST http://127.0.0.1:8080/orders \
        -H 'Content-Type: application/json' -H "Idempotency-Key: boot-check-$(date +%s)-$$-$tag" \
        -d '{"customer_id":123,"items":[{"sku":"iphone-15","qty":1,"price_cents":100000}]}' \
        >"$OUT/order-$tag-post.txt" 2>&1
    check "POST /orders ($tag): 201" test "$(tail -1 "$OUT/order-$tag-post.txt")" = 201
    id=$(sed -n 's/.*"order_id":\([0-9]*\).*/\1/p' "$OUT/order-$tag-post.txt" | head -1)
    status=
    for _ in $(seq 1 60); do
        curl -s "http://127.0.0.1:8080/orders/${id:-0}" >"$OUT/order-$tag-get.txt" 2>&1
        status=$(sed -n 's/^{[^}]*"status":"\([A-Z_]*\)".*/\1/p' "$OUT/order-$tag-get.txt")
        [ "$status" = CONFIRMED ] && break
        sleep 0.5
    done
    echo "order ${id:-?} ($tag): $status" >>"$OUT/orders.txt"
    check "order ${id:-?} ($tag) CONFIRMED through relay@1 -> JetStream -> worker" \
        test "$status" = CONFIRMED
}
mariadb appdb -e "INSERT INTO inventory (sku, available) VALUES ('iphone-15', 10)
  ON DUPLICATE KEY UPDATE available = 10, reserved = 0"
place_order first
curl -s http://127.0.0.1:8080/outbox/stats >"$OUT/outbox-stats.txt" 2>&1

# A database that goes away (the socket too: Debian's mariadb.socket would start it again at
# the first connection). The running daemons stay up and reconnect; /readyz says 503 meanwhile.
# A daemon (re)started while the database is down stays "activating" with
# STATUS=waiting for the database, and becomes ready once the database is back.
systemctl stop mariadb.socket mariadb.service
sleep 2
curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:8080/readyz >"$OUT/readyz-db-down.code" 2>&1
check "GET /readyz 503 with the database stopped" grep -qx 503 "$OUT/readyz-db-down.code"
for u in $UNITS; do
    systemctl show -p ActiveState,SubState,StatusText "$u" >"$OUT/show-db-down-$u.txt" 2>&1
    check "$u still running with the database stopped" grep -qx 'SubState=running' \
        "$OUT/show-db-down-$u.txt"
done
systemctl restart --no-block txo-relay@1.service
sleep 3
systemctl show -p ActiveState,SubState,StatusText txo-relay@1.service \
    >"$OUT/show-db-down-restarted-relay.txt" 2>&1
check "txo-relay@1 restarted without a database: activating, waiting for the database" sh -c \
    "grep -qx 'ActiveState=activating' '$OUT/show-db-down-restarted-relay.txt' &&
     grep -qx 'StatusText=waiting for the database' '$OUT/show-db-down-restarted-relay.txt'"
systemctl start mariadb.socket mariadb.service
for _ in $(seq 1 40); do
    systemctl is-active --quiet txo-relay@1.service && break
    sleep 0.5
done
systemctl show -p ActiveState,SubState,StatusText,NRestarts txo-relay@1.service \
    >"$OUT/show-db-back-relay.txt" 2>&1
check "txo-relay@1 ready once the database is back" grep -qx 'SubState=running' \
    "$OUT/show-db-back-relay.txt"
sleep 1
curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:8080/readyz >"$OUT/readyz-db-back.code" 2>&1
check "GET /readyz 200 again once the database is back" grep -qx 200 "$OUT/readyz-db-back.code"
place_order after-outage

# The local socket instead of TCP (docs/deploy.md: works under the units' hardening).
sed -i -e 's/^MYSQL_HOST=/#MYSQL_HOST=/' -e 's/^MYSQL_PORT=/#MYSQL_PORT=/' /etc/txo/txo.env
echo 'MYSQL_SOCKET=/run/mysqld/mysqld.sock' >>/etc/txo/txo.env
# shellcheck disable=SC2086
systemctl restart $UNITS
for u in $UNITS; do
    systemctl show -p ActiveState,SubState,StatusText "$u" >"$OUT/show-socket-$u.txt" 2>&1
    check "$u running on MYSQL_SOCKET" grep -qx 'SubState=running' "$OUT/show-socket-$u.txt"
done
place_order unix-socket

# Stop: SIGTERM, STOPPING=1, exit 0 (Result=success, status 0).
# shellcheck disable=SC2086
systemctl stop $UNITS
for u in $UNITS; do
    systemctl show -p ActiveState,Result,ExecMainCode,ExecMainStatus "$u" >"$OUT/show-stopped-$u.txt" 2>&1
    check "$u stopped cleanly (exit 0)" sh -c "grep -qx 'Result=success' '$OUT/show-stopped-$u.txt' &&
        grep -qx 'ExecMainStatus=0' '$OUT/show-stopped-$u.txt'"
done
finish
