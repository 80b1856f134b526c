#!/usr/bin/env bash
# The brokers of a build are what its options say (-DTXO_WITH_<NAME>): `txo --version` lists
# those built in, libtxo.so links the client library of each of them and of no other, and the
# command refuses a broker left out by name, with exit status 2, before it reaches the database
# (MYSQL_* point at a port where nothing listens, so any later refusal would read otherwise).
# --help offers every publisher and consumer the build has and none it lacks; the README and
# systemd/txo.env.example of SOURCE_DIR name every publisher, the example with the settings of
# each one the build has.
#   brokers_test.sh TXO LIBTXO_SO "BUILT..." "LEFT_OUT..." SOURCE_DIR
set -euo pipefail
txo=$1
lib=$2
read -r -a built <<<"$3"
read -r -a left_out <<<"$4"
src=$5
fail() { echo "brokers_test: $*" >&2; exit 1; }

# The client library of each broker, as ldd names it.
declare -A sdk=([nats]=libnats [kafka]=librdkafka [redis]=libhiredis [rabbitmq]=librabbitmq
                [grpc]='libgrpc|libprotobuf')
libs=$(ldd "$lib")
for b in "${built[@]}"; do
    grep -Eq "(${sdk[$b]})" <<<"$libs" || fail "libtxo.so does not link ${sdk[$b]} of $b"
done
for b in "${left_out[@]}"; do
    ! grep -E "(${sdk[$b]})" <<<"$libs" || fail "libtxo.so links ${sdk[$b]}, yet $b is left out"
done

version=$("$txo" --version)
want=$(IFS=,; echo "${built[*]:-none}" | sed 's/,/, /g')
grep -qx "Brokers built in: $want" <<<"$version" ||
    fail "txo --version does not list \"$want\": $version"

export MYSQL_HOST=127.0.0.1 MYSQL_PORT=1 MYSQL_SOCKET= MYSQL_USER=nobody MYSQL_DATABASE=none
# refused "CMD ..." NAME: the command must exit 2 naming the option that leaves NAME out.
refused() {
    local name=$2 out rc=0
    read -r -a cmd <<<"$1"
    out=$("$txo" "${cmd[@]}" "$name" 2>&1) || rc=$?
    [ "$rc" -eq 2 ] || fail "txo $1 $name: exit $rc, want 2: $out"
    local opt
    opt="TXO_WITH_$(tr '[:lower:]' '[:upper:]' <<<"$name")"
    grep -q "txo was built without .* (-D$opt=OFF)" <<<"$out" ||
        fail "txo $1 $name does not say it was built without it: $out"
}
for b in "${left_out[@]}"; do
    refused "relay --publisher" "$b"
    refused "worker --broker" "$b"
    refused "up --broker" "$b"
    refused "audit --outbox --publisher" "$b"
done
# The help of a choice: the help text of the option (its line of `txo CMD --help`).
choice_help() {
    local help
    help=$("$txo" "$1" --help)
    grep -E "^  --$2 " <<<"$help" || fail "txo $1 --help has no --$2"
}
relay=$(choice_help relay publisher)
worker=$(choice_help worker broker)
up=$(choice_help up broker)
for p in log null webhook; do
    grep -q "\b$p (" <<<"$relay" || fail "txo relay --help does not offer --publisher $p: $relay"
done
for b in "${built[@]}"; do
    grep -q "\b$b (" <<<"$relay" || fail "txo relay --help does not offer --publisher $b: $relay"
    [ "$b" = grpc ] && continue # publishing only
    grep -q "\b$b (" <<<"$worker" || fail "txo worker --help does not offer --broker $b: $worker"
    grep -q "\b$b (" <<<"$up" || fail "txo up --help does not offer --broker $b: $up"
done
for b in "${left_out[@]}"; do
    ! grep -q "\b$b\b" <<<"$relay$worker$up" || fail "--help offers $b, which is left out"
done

# Every publisher is in the README's table and the example environment file, and the example
# shows every setting of each publisher built in (commented out or set).
example="$src/systemd/txo.env.example"
for p in log null webhook nats kafka redis rabbitmq grpc; do
    grep -q "^| \`$p\` |" "$src/README.md" || fail "README.md lists no publisher $p"
    grep -q "\b$p\b" "$example" || fail "txo.env.example does not name the publisher $p"
done
relay_help=$("$txo" relay --help)
for b in webhook "${built[@]}"; do
    upper=$(tr '[:lower:]' '[:upper:]' <<<"$b")
    for var in $(grep -o "\[TXO_${upper}_[A-Z0-9_]*\]" <<<"$relay_help" | tr -d '[]'); do
        grep -Eq "^#?$var=" "$example" || fail "txo.env.example does not show $var ($b)"
    done
done
# And nothing in it that no command reads (but the settings of a broker left out).
all_help=$(for c in $("$txo" help --commands); do "$txo" "$c" --help; done)
skip='^$'
if [ "${#left_out[@]}" -gt 0 ]; then
    skip="^TXO_($(IFS='|'; tr '[:lower:]' '[:upper:]' <<<"${left_out[*]}"))_"
fi
for var in $(grep -Eo '^#?(TXO|MYSQL)_[A-Z0-9_]+=' "$example" | tr -d '#='); do
    grep -Eq "$skip" <<<"$var" && continue
    grep -q "\\[$var\\]" <<<"$all_help" || fail "txo.env.example sets $var, which no command reads"
done

echo "brokers_test: built in: ${built[*]:-none}; left out: ${left_out[*]:-none}"
