#!/usr/bin/env bash
# The brokers of a build are what its options say (-DTXO_WITH_<NAME>): `txo --version` lists
# those built in, libtxo.so links the client library of each of them and of no other, and the
# command refuses a broker left out by name, with exit status 2, before it reaches the database
# (MYSQL_* point at a port where nothing listens, so any later refusal would read otherwise).
#   brokers_test.sh TXO LIBTXO_SO "BUILT..." "LEFT_OUT..."
set -euo pipefail
txo=$1
lib=$2
read -r -a built <<<"$3"
read -r -a left_out <<<"$4"
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
echo "brokers_test: built in: ${built[*]:-none}; left out: ${left_out[*]:-none}"
