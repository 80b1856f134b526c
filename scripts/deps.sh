#!/usr/bin/env bash
# Install the Debian 12 packages txo needs to build and test, if any are missing.
#
#   scripts/deps.sh              # build + runtime/test packages
#   scripts/deps.sh PKG...       # the same, plus extra packages (e.g. clang-format)
#   scripts/deps.sh --run [BROKER]
#                                # only what `make run` needs: the build packages, MariaDB and
#                                # curl, and the server of BROKER (nats, redis, rabbitmq) if given
#
# Fast no-op when everything is already installed. Uses sudo when not run as root.
set -euo pipefail

log() { printf 'deps.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Build packages. gcc's ASan/UBSan runtimes (libasan8, libubsan1) come in through
# build-essential -> gcc -> gcc-12 -> libgcc-12-dev; checked below.
BUILD_PKGS=(build-essential cmake pkg-config libmariadb-dev libjansson-dev uuid-dev libssl-dev
            libcmocka-dev libnats-dev libcurl4-openssl-dev libsystemd-dev
            # zlib: the gzip files of the retention archive (src/archive, `txo clean --archive`)
            zlib1g-dev
            # librdkafka: the Kafka publisher and consumer (src/broker/kafka_*.c); its mock
            # cluster (rdkafka_mock.h) is the Kafka the tests run against (Debian has no Kafka)
            librdkafka-dev
            # hiredis: the Redis Streams publisher and consumer (src/broker/redis_*.c)
            libhiredis-dev
            # rabbitmq-c: the RabbitMQ publisher and consumer (src/broker/rabbitmq_*.c)
            librabbitmq-dev
            # gRPC's C core for the gRPC publisher; protobuf-c-compiler generates the C of
            # proto/txo/v1/event_sink.proto at build time, libprotobuf-c-dev is its runtime
            libgrpc-dev libprotobuf-c-dev protobuf-c-compiler)
# Runtime/test packages: a private mariadbd (scripts/db.sh) and the mariadb client tools,
# nats-server (JetStream tests and `make run BROKER=nats`), curl (the README's examples and
# scripts/valgrind.sh), promtool (package prometheus: the metrics tests check /metrics and the
# alert rules), systemd-analyze (package systemd: the units are verified) and man (man-db: the
# man pages are checked for warnings), python3 (the notify test's stand-in for systemd, the
# dashboard's JSON check) and chromium (the operator's dashboard, GET /ui, is tested in it,
# headless: tests/integration/test_ui_dashboard.c).
RUNTIME_PKGS=(mariadb-server mariadb-client nats-server curl prometheus systemd man-db python3
              chromium
              # the Kafka tests: kcat, the independent client that reads back what reached the
              # (mock) cluster
              kcat
              # the Redis Streams tests and `make run BROKER=redis`: a private redis-server, and
              # redis-cli, the independent client that reads back what the streams hold
              redis-server redis-tools
              # the RabbitMQ tests and `make run BROKER=rabbitmq`: a private broker, and pika,
              # the independent AMQP client that reads back what reached the queues
              rabbitmq-server python3-pika
              # the gRPC tests: the independent EventSink server they deliver to
              # (tests/grpc/event_sink_server.py, python3-grpcio, python3-protobuf and protoc)
              # and openssl for the certificates of the TLS tests
              python3-grpcio python3-protobuf protobuf-compiler openssl
              # The Galera cluster of scripts/cluster.sh (make cluster-test): the wsrep provider
              # and rsync, its state-transfer method (mariabackup would need mariadb-backup).
              galera-4 rsync)

# What `make run` needs besides the build packages: the private server and its client tools,
# and curl for the README's examples.
RUN_PKGS=(mariadb-server mariadb-client curl)

installed() {
    [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found: this script supports Debian/Ubuntu only"

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "not root and sudo is not installed: run as root"
    SUDO=(sudo)
fi

UPDATED=0
apt_install() {
    if [ "$UPDATED" -eq 0 ]; then
        log "running: ${SUDO[*]:+${SUDO[*]} }apt-get update"
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
        UPDATED=1
    fi
    log "running: ${SUDO[*]:+${SUDO[*]} }apt-get install -y --no-install-recommends $*"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y --no-install-recommends "$@"
}

RUN_ONLY=0
if [ "${1:-}" = "--run" ]; then
    RUN_ONLY=1
    shift
    case "${1:-}" in
    "" | local) ;;
    nats) RUN_PKGS+=(nats-server) ;;
    redis) RUN_PKGS+=(redis-server) ;;
    rabbitmq) RUN_PKGS+=(rabbitmq-server) ;;
    kafka) ;; # the mock cluster is librdkafka's, a build package
    *) die "--run: no broker named '$1' (nats, redis, rabbitmq, kafka, local)" ;;
    esac
    [ $# -gt 0 ] && shift
    RUNTIME_PKGS=("${RUN_PKGS[@]}")
fi

missing=()
for p in "${BUILD_PKGS[@]}" "${RUNTIME_PKGS[@]}" "$@"; do
    installed "$p" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
    log "all packages present: ${BUILD_PKGS[*]} ${RUNTIME_PKGS[*]}${*:+ $*}"
else
    log "missing packages: ${missing[*]}"
    apt_install "${missing[@]}"
fi

# The private server (scripts/db.sh) needs these binaries.
for b in mariadbd mariadb-install-db mariadb-admin mariadb; do
    command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || die "$b not found after install"
done
if [ "$RUN_ONLY" = 1 ]; then
    log "ok (what running needs; \`make test\` installs the test packages too)"
    exit 0
fi

# gcc's sanitizer runtimes: `gcc -print-file-name=X` prints a bare X when X is not found.
gcc_has() { [ "$(gcc -print-file-name="$1")" != "$1" ]; }
if ! gcc_has libasan.so || ! gcc_has libubsan.so; then
    gccver="$(gcc -dumpversion | cut -d. -f1)"
    log "gcc's ASan/UBSan runtime not found; installing libgcc-${gccver}-dev"
    apt_install "libgcc-${gccver}-dev"
    if ! gcc_has libasan.so || ! gcc_has libubsan.so; then
        die "gcc still has no libasan.so/libubsan.so"
    fi
fi
log "gcc sanitizer runtimes: $(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"

# The independent implementations some tests check txo's output against (tests/js: the
# CloudEvents SDK; tests/openapi: the OpenAPI validators), pinned by each directory's
# package-lock.json; installed again only when the lock file is newer than the install.
tests_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests"
for js_dir in "$tests_dir/js" "$tests_dir/openapi"; do
    [ -f "$js_dir/package-lock.json" ] || continue
    command -v npm >/dev/null 2>&1 || apt_install nodejs npm
    stamp="$js_dir/node_modules/.package-lock.json"
    if [ ! -f "$stamp" ] || [ "$js_dir/package-lock.json" -nt "$stamp" ]; then
        log "running: npm ci in $js_dir"
        (cd "$js_dir" && npm ci --no-audit --no-fund)
    fi
done
log "ok"
