# txo: the user-facing entry point. `make` (or `make help`) lists the targets.
#
# Database: unless MYSQL_HOST is set (in the environment or on the command line), `make db`
# starts a private MariaDB (scripts/db.sh: datadir .txo/mariadb, 127.0.0.1:$(TXO_DB_PORT)) and
# every target that talks to a database runs its command with
#   MYSQL_HOST=127.0.0.1 MYSQL_PORT=$(TXO_DB_PORT) MYSQL_USER=app MYSQL_PASSWORD=secret MYSQL_DATABASE=appdb
# When MYSQL_HOST is set, your own server and your MYSQL_* variables are used as they are.
#
# The private server's port is remembered (.txo/mariadb/port): without TXO_DB_PORT every target
# uses the server that really runs, and a TXO_DB_PORT that does not match it is refused before
# anything is built (scripts/db.sh check), with the command that works.

SHELL := /bin/bash
MAKEFLAGS += --no-print-directory
.DEFAULT_GOAL := help

BUILD       ?= build
BUILD_ASAN  ?= build-asan
JOBS        ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE       ?= cmake
CTEST       ?= ctest
CMAKE_ARGS  ?=
CTEST_ARGS  ?=
CTEST_JOBS  ?= 2
BENCH_ARGS  ?=
# bench/broker_drain.sh: e.g. "--events 20000 --runs 1 nats"
BENCH_BROKER_ARGS ?=
# bench/batch_sweep.sh: e.g. "--orders 2000 --runs 1 1 50"
BENCH_SWEEP_ARGS ?=
# bench/tracing.sh: e.g. "--orders 2000 --runs 3"
BENCH_TRACING_ARGS ?=
SOAK_SECONDS ?= 300
SOAK_CLIENTS ?= 4
SOAK_RANDOM_STATE    ?=
CLUSTER_SOAK_SECONDS ?= 60
FUZZ_SECONDS ?= 180
FUZZ_TARGETS := http_head order_post envelope canonical_json settings trace archive binlog_rows
CLANG_FORMAT ?= clang-format
# Given (command line or environment): that one, checked against the running server by
# db-check; otherwise the running or last-used port of the private server, else 3307.
ifeq ($(origin TXO_DB_PORT),undefined)
  TXO_DB_PORT := $(or $(shell scripts/db.sh port 2>/dev/null),3307)
endif
PREFIX      ?= /usr/local

CMAKE_ARGS_RELEASE := -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS)
CMAKE_ARGS_ASAN    := -DTXO_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DTXO_BUILD_BENCH=OFF $(CMAKE_ARGS)

ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# DB_ENV: the environment prefix for every command that talks to the database.
ifeq ($(strip $(MYSQL_HOST)),)
  DB_PRIVATE := 1
  DB_USER     := $(or $(MYSQL_USER),app)
  DB_PASSWORD := $(or $(MYSQL_PASSWORD),secret)
  DB_NAME     := $(or $(MYSQL_DATABASE),appdb)
  DB_APP_ENV := MYSQL_USER='$(DB_USER)' MYSQL_PASSWORD='$(DB_PASSWORD)' MYSQL_DATABASE='$(DB_NAME)'
  DB_ENV := MYSQL_HOST=127.0.0.1 MYSQL_PORT=$(TXO_DB_PORT) MYSQL_SOCKET= $(DB_APP_ENV)
else
  DB_PRIVATE :=
  DB_ENV :=
endif

FORMAT_DIRS  := include src app cmd tests bench
FORMAT_FILES  = $(if $(wildcard $(FORMAT_DIRS)),$(shell find $(wildcard $(FORMAT_DIRS)) -type f \
                  \( -name '*.c' -o -name '*.h' \) | LC_ALL=C sort))

# $(call cmake_configure,DIR,ARGS): configure DIR only when it has no cache yet or was
# configured with other arguments (cmake --build re-runs cmake when CMakeLists.txt changes).
define cmake_configure
	@if [ ! -f '$(1)/CMakeCache.txt' ] || [ "$$(cat '$(1)/.txo-cmake-args' 2>/dev/null)" != '$(strip $(2))' ]; then \
	  echo "$(CMAKE) -S . -B $(1) $(strip $(2))"; \
	  $(CMAKE) -S . -B '$(1)' $(2) && echo '$(strip $(2))' > '$(1)/.txo-cmake-args'; \
	else \
	  echo "# $(1) is already configured ($(strip $(2)))"; \
	fi
endef

.PHONY: install help deps deps-run build build-run build-asan build-tsan build-clang build-release \
        build-minimal db db-check \
        db-stop migrate run \
        demo test test-asan \
        test-tsan valgrind soak partition-test-5m fuzz cluster-up cluster-down cluster-test \
        bench bench-tracing format format-check clean distclean

help:
	@echo 'txo: transactional outbox, relay and sagas on MariaDB'
	@echo
	@echo 'Usage: make TARGET [VAR=value ...]'
	@echo
	@echo 'Targets:'
	@echo '  run           build txo, start the database, run the API + relay + worker (txo up); BROKER=X adds'
	@echo '                a private broker X (scripts/broker.sh names); the ports are checked first; the fake'
	@echo '                payment/shipment service runs too (TXO_PAYMENT_URL/TXO_SHIPMENT_URL: real ones; FAKES=0: none);'
	@echo '                SOURCE=binlog: the relay reads the binary log of the private MariaDB instead of polling'
	@echo '  demo          build, start the database, migrate, run the saga scenarios and check them'
	@echo '  deps          install the missing Debian packages (scripts/deps.sh; sudo if not root)'
	@echo '  deps-run      only those `make run` needs: build packages, MariaDB, curl, BROKER'"'"'s server'
	@echo '  build         configure + build into $$(BUILD) ($(BUILD)), RelWithDebInfo'
	@echo '  build-asan    configure + build into $(BUILD_ASAN) with ASan+UBSan, Debug, no bench'
	@echo '  db            start the private MariaDB on 127.0.0.1:$(TXO_DB_PORT) (skipped when MYSQL_HOST is set)'
	@echo '  db-stop       stop the private MariaDB'
	@echo '  migrate       apply the SQL migrations ($(BUILD)/txo migrate)'
	@echo '  test          run the test suite with ctest (tests create their own txo_test_* databases)'
	@echo '  test-asan     run the test suite built with ASan+UBSan'
	@echo '  test-tsan     run the test suite built with ThreadSanitizer'
	@echo '  valgrind      run the demo and the relay daemon under valgrind memcheck (fails on leaks)'
	@echo '  soak          every daemon as its own process under load and faults for SOAK_SECONDS ($(SOAK_SECONDS)),'
	@echo '                then check that no charge or shipment leaked (tests/soak/README.md)'
	@echo '  partition-test-5m  the partitioned outbox'"'"'s drop test (tests/fault/test_partition.c) on'
	@echo '                5,000,000 expired events while writers append and a relay publishes'
	@echo '  cluster-up    start a 3-node MariaDB Galera cluster and a 3-node JetStream cluster (scripts/cluster.sh)'
	@echo '  cluster-down  stop them'
	@echo '  cluster-test  cluster-up, the cluster tests and a CLUSTER_SOAK_SECONDS ($(CLUSTER_SOAK_SECONDS)) soak on the'
	@echo '                clusters with a DB node and a NATS node killed, then cluster-down (tests/cluster/)'
	@echo '  build-clang   build everything with clang -Werror into build-clang (a second compiler)'
	@echo '  build-minimal build txo with every broker left out into build-minimal, check that libtxo links'
	@echo '                no broker library, run its unit tests and MariaDB tests (scripts/check-no-brokers.sh)'
	@echo '  build-release build everything at -O3 (CMAKE_BUILD_TYPE=Release) -Werror into build-release,'
	@echo '                whose optimiser finds warnings the RelWithDebInfo build does not'
	@echo '  fuzz          build the libFuzzer harnesses (build-fuzz) and run each for FUZZ_SECONDS ($(FUZZ_SECONDS))'
	@echo '  bench         run the benchmarks ($(BUILD)/bench/txo_bench $$(BENCH_ARGS), then the relay drain'
	@echo '                per broker, bench/broker_drain.sh $$(BENCH_BROKER_ARGS), and the saga batch'
	@echo '                cap sweep, bench/batch_sweep.sh $$(BENCH_SWEEP_ARGS))'
	@echo '  bench-tracing what exporting spans costs: txo_bench http with tracing off, on (a receiver'
	@echo '                that discards them) and down (port closed), in turn; medians and the difference'
	@echo '                in % (bench/tracing.sh $$(BENCH_TRACING_ARGS))'
	@echo '  install       install txo, libtxo (.so and .a), headers, libtxo.pc, man pages, docs, the'
	@echo '                systemd units and share/txo (migrations, alert rules, dashboard, env example)'
	@echo '                into $$(PREFIX) ($(PREFIX)); PREFIX=/usr puts the library in Debian'"'"'s multiarch'
	@echo '                libdir; DESTDIR=... stages it (packaging); layout: docs/deploy.md'
	@echo '  format        clang-format -i the C sources'
	@echo '  format-check  check the formatting without changing files'
	@echo '  clean         remove the build directories (keeps the database)'
	@echo '  distclean     clean, stop the database and remove .txo/ (the database files)'
	@echo
	@echo 'Variables: BUILD=$(BUILD) JOBS=$(JOBS) TXO_DB_PORT=$(TXO_DB_PORT) CMAKE_ARGS= CTEST_ARGS= BENCH_ARGS='
	@echo '           SOAK_SECONDS=$(SOAK_SECONDS) SOAK_CLIENTS=$(SOAK_CLIENTS) SOAK_RANDOM_STATE= (soak)'
	@echo '           PREFIX=$(PREFIX) DESTDIR= (install; the layout is in docs/deploy.md)'
	@echo 'Database:  $(if $(DB_PRIVATE),private server (set MYSQL_HOST to use your own),MYSQL_HOST=$(MYSQL_HOST) (your own server))'

deps:
	scripts/deps.sh

build: deps
	$(call cmake_configure,$(BUILD),$(CMAKE_ARGS_RELEASE))
	$(CMAKE) --build $(BUILD) -j$(JOBS)

# Only what `make run` needs: its packages (not the test world), the command and the fake
# services, not the tests.
deps-run:
	scripts/deps.sh --run $(if $(filter 1,$(NATS)),nats,$(BROKER))

build-run: deps-run
	$(call cmake_configure,$(BUILD),$(CMAKE_ARGS_RELEASE))
	$(CMAKE) --build $(BUILD) -j$(JOBS) --target txo_cmd txo_fake_services

build-asan: deps
	$(call cmake_configure,$(BUILD_ASAN),$(CMAKE_ARGS_ASAN))
	$(CMAKE) --build $(BUILD_ASAN) -j$(JOBS)

build-tsan: deps
	$(call cmake_configure,build-tsan,-DTXO_SANITIZE_THREAD=ON -DCMAKE_BUILD_TYPE=Debug -DTXO_BUILD_BENCH=OFF $(CMAKE_ARGS))
	$(CMAKE) --build build-tsan -j$(JOBS)

build-clang:
	scripts/deps.sh clang
	$(call cmake_configure,build-clang,-DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug $(CMAKE_ARGS))
	$(CMAKE) --build build-clang -j$(JOBS)

# Builds only (the tests run on the RelWithDebInfo build): -O3 inlines more, so gcc's
# flow-based warnings (-Wmaybe-uninitialized, ...) see cases the other builds do not.
build-release: deps
	$(call cmake_configure,build-release,-DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS))
	$(CMAKE) --build build-release -j$(JOBS)

# txo without any broker (-DTXO_WITH_<BROKER>=OFF, docs/brokers.md): built, its libraries
# checked with ldd, and its unit tests and the MariaDB tests of a program without a broker run.
build-minimal: db-check deps db
	$(DB_ENV) JOBS=$(JOBS) scripts/check-no-brokers.sh build-minimal

# libFuzzer harnesses (fuzz/): each runs FUZZ_SECONDS on its starting corpus fuzz/corpus/NAME (read
# first, so an input committed there after a crash is a regression test) plus what it found
# before (build-fuzz/corpus/NAME). A crash leaves build-fuzz/crash-NAME-* and fails the target.
fuzz:
	scripts/deps.sh clang libclang-rt-14-dev
	$(call cmake_configure,build-fuzz,-DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DTXO_BUILD_FUZZ=ON -DTXO_BUILD_TESTS=OFF -DTXO_BUILD_BENCH=OFF $(CMAKE_ARGS))
	$(CMAKE) --build build-fuzz -j$(JOBS)
	@set -e; for t in $(FUZZ_TARGETS); do \
	  mkdir -p build-fuzz/corpus/$$t; \
	  echo "fuzz_$$t: $(FUZZ_SECONDS) s"; \
	  $(ASAN_ENV) build-fuzz/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	    -rss_limit_mb=2048 -max_len=16384 -dict=fuzz/dict/$$t.dict -close_fd_mask=3 \
	    -print_final_stats=1 -artifact_prefix=build-fuzz/crash-$$t- \
	    build-fuzz/corpus/$$t fuzz/corpus/$$t 2>&1 | grep -v '^#[0-9]' ; \
	  test "$${PIPESTATUS[0]}" -eq 0; \
	done

ifeq ($(DB_PRIVATE),1)
db: deps-run
	$(DB_APP_ENV) TXO_DB_PORT=$(TXO_DB_PORT) scripts/db.sh start

# Before building: the port matches the running private server, or is free for it.
db-check:
	@TXO_DB_PORT=$(TXO_DB_PORT) TXO_HINT_CMD='make $(or $(firstword $(MAKECMDGOALS)),db)' scripts/db.sh check
else
db-check:
	@:
db:
	@echo 'db: MYSQL_HOST is set: using your MariaDB at $(MYSQL_HOST):$(or $(MYSQL_PORT),3306)' \
	  'as $(or $(MYSQL_USER),<MYSQL_USER unset>), database $(or $(MYSQL_DATABASE),<MYSQL_DATABASE unset>);' \
	  'the private server is not started'
endif

db-stop:
	TXO_DB_PORT=$(TXO_DB_PORT) scripts/db.sh stop

migrate: db-check build db
	$(DB_ENV) $(BUILD)/txo migrate

run: db-check
	@scripts/run.sh --check
	@$(MAKE) build-run db
	$(DB_ENV) TXO_DB_PRIVATE=$(DB_PRIVATE) TXO_BIN=$(BUILD)/txo $(if $(SOURCE),TXO_RELAY_SOURCE=$(SOURCE)) scripts/run.sh

demo: db-check build db migrate
	$(DB_ENV) $(BUILD)/txo demo

# $(call ctest_in,DIR): the suite built in DIR. ctest reads its stdin from /dev/null: a test
# that reads stdin by mistake (curl's default read callback, say) gets end-of-file at once
# instead of waiting on the keyboard of a terminal. When tests fail, the end of each one's
# output is printed again after the summary, where a log cut in the middle still shows it.
ctest_in = $(CTEST) --test-dir $(1) --output-on-failure -j$(CTEST_JOBS) --timeout 300 $(CTEST_ARGS) < /dev/null || { scripts/test-tails.sh $(1); exit 1; }

test: db-check build db
	$(DB_ENV) $(call ctest_in,$(BUILD))

test-asan: db-check build-asan db
	$(DB_ENV) $(ASAN_ENV) $(call ctest_in,$(BUILD_ASAN))

test-tsan: db-check build-tsan db
	$(DB_ENV) TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/tsan.supp" $(call ctest_in,build-tsan)

valgrind: db-check build db
	scripts/deps.sh valgrind
	$(DB_ENV) scripts/valgrind.sh $(BUILD)/txo

soak: db-check build db
	$(DB_ENV) TXO_BIN='$(abspath $(BUILD))/txo' TXO_FAKE_BIN='$(abspath $(BUILD))/txo-fake-services' \
	  SOAK_SECONDS='$(SOAK_SECONDS)' SOAK_CLIENTS='$(SOAK_CLIENTS)' SOAK_RANDOM_STATE='$(SOAK_RANDOM_STATE)' \
	  $(BUILD)/tests/txo_soak

# The partitioned outbox's drop under load on 5,000,000 expired events (the suite runs the same
# test on 50,000): about 10 minutes here.
partition-test-5m: db-check build db
	$(DB_ENV) TXO_BIN='$(abspath $(BUILD))/txo' TXO_PARTITION_TEST_ROWS=5000000 \
	  $(BUILD)/tests/test_partition

cluster-up:
	scripts/deps.sh
	scripts/cluster.sh up

cluster-down:
	scripts/cluster.sh down

# The clusters are stopped however the tests end. The soak's settle time is bounded so that the
# whole target stays within a few minutes.
cluster-test: build
	@set -e; trap 'scripts/cluster.sh down' EXIT; scripts/cluster.sh up; \
	  eval "$$(scripts/cluster.sh env)"; \
	  export TXO_CLUSTER_SCRIPT='$(abspath scripts/cluster.sh)' \
	    TXO_BIN='$(abspath $(BUILD))/txo' TXO_FAKE_BIN='$(abspath $(BUILD))/txo-fake-services'; \
	  $(BUILD)/tests/test_cluster; \
	  MYSQL_HOST="$$TXO_CLUSTER_DB_HOSTS" SOAK_DB_HOSTS="$$TXO_CLUSTER_DB_HOSTS" \
	    SOAK_NATS_URLS="$$TXO_CLUSTER_NATS_URLS" SOAK_CLUSTER_SCRIPT="$$TXO_CLUSTER_SCRIPT" \
	    SOAK_SECONDS='$(CLUSTER_SOAK_SECONDS)' SOAK_CLIENTS='$(SOAK_CLIENTS)' SOAK_SETTLE_SECONDS=60 \
	    SOAK_RANDOM_STATE='$(SOAK_RANDOM_STATE)' $(BUILD)/tests/txo_soak

# The build is configured for PREFIX first (scripts/install.sh): GNUInstallDirs picks the
# directories then, Debian's multiarch libdir for /usr.
install: build
	DESTDIR='$(DESTDIR)' scripts/install.sh $(BUILD) '$(PREFIX)'

bench: db-check build db
	$(DB_ENV) $(BUILD)/bench/txo_bench $(BENCH_ARGS)
	$(DB_ENV) TXO_BIN=$(BUILD)/txo bench/broker_drain.sh $(BENCH_BROKER_ARGS)
	$(DB_ENV) TXO_BENCH=$(BUILD)/bench/txo_bench bench/batch_sweep.sh $(BENCH_SWEEP_ARGS)

bench-tracing: db-check build db
	$(DB_ENV) TXO_BENCH=$(BUILD)/bench/txo_bench bench/tracing.sh $(BENCH_TRACING_ARGS)

format:
	@command -v $(CLANG_FORMAT) >/dev/null 2>&1 || scripts/deps.sh clang-format
	$(if $(FORMAT_FILES),$(CLANG_FORMAT) -i $(FORMAT_FILES),@echo 'format: no C files found')

format-check:
	@command -v $(CLANG_FORMAT) >/dev/null 2>&1 || scripts/deps.sh clang-format
	$(if $(FORMAT_FILES),$(CLANG_FORMAT) --dry-run --Werror $(FORMAT_FILES),@echo 'format-check: no C files found')

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) build-clang build-release build-tsan build-fuzz build-minimal

distclean: clean db-stop
	rm -rf .txo
