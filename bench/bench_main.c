/*
 * txo_bench: the speed figures of txo (`make bench`). See docs/benchmarks.md.
 *
 *   txo_bench [relay|ordering|binlog|append|inbox|orders|http|all] [--events N] [--runs R] [--keep]
 * [--log-level L]
 *             [--orders N] [--connections N] [--broker local|NAME] [--txo PATH] [--up-args A]
 *   txo_bench append-load [--rate R] [--writers W] [--duration S] ... (bench_append_load.c)
 *
 * Prints aligned plain-text tables on stdout (medians over R runs). Exits 1 when set-up fails
 * or a correctness check after a run fails (lost events, unconfirmed orders, stock not
 * conserved, `txo up` not exiting 0); the figures themselves never fail.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: txo_bench [relay|ordering|binlog|append|inbox|orders|http|all] [--events N]\n"
            "                 [--runs R] [--keep]\n"
            "                 [--log-level L] [--orders N] [--connections N]\n"
            "                 [--broker local|NAME] [--txo PATH] [--up-args \"FLAGS\"]\n"
            "\n"
            "  relay         outbox relay drain: null publisher, skip-locked and update-limit\n"
            "                with leases and skip-locked in one transaction (claim mode\n"
            "                transaction), 1 and 2 relays, batch 500 (plus 1000 and 200), a\n"
            "                drain behind 1,000,000 PUBLISHED rows, then the ordering table\n"
            "  ordering      ordering by aggregate against none on five backlog shapes (x 1,\n"
            "                x 10, 300 x ~333, one hot aggregate, 3 deep ones), 1 and 2 relays,\n"
            "                leased and held claims, and a drain with 1%% of aggregates parked\n"
            "  binlog        the relay's binlog source against the polling relay: --events\n"
            "                PENDING events drained with the null publisher by each, same run\n"
            "                (skipped when the server's binary log is off)\n"
            "  append        appending events numbered by libtxo, by the trigger (a plain\n"
            "                INSERT) and not at all: a new aggregate per event, 1,000 existing\n"
            "                ones, batches of 10\n"
            "  inbox         recording messages on the unpartitioned inbox and on the\n"
            "                partitioned one (a week of history): one per transaction,\n"
            "                batches of 100, and the batches redelivered\n"
            "  orders        order saga end to end: create + start + run until CONFIRMED,\n"
            "                1 thread x 2,000 orders and 4 threads x 2,000 orders\n"
            "  http          the order service through its HTTP API: spawns `txo up`, POSTs\n"
            "                orders until every one is CONFIRMED, then paced at half that rate\n"
            "  all           all of them (default); http with --broker local, then through\n"
            "                each of: " BENCH_HTTP_BROKERS "\n"
            "  --events N    events per relay drain (default 100000)\n"
            "  --runs R      runs per configuration; medians are printed (default 3)\n"
            "  --keep        keep the database txo_bench_<pid> (and the http logs) afterwards\n"
            "  --log-level L library log level on stderr: error, warn (default), info, debug\n"
            "                (debug prints one line per relay batch with its publish/mark times)\n"
            "  --orders N    http: orders of the load phase (default 5000)\n"
            "  --connections N  http: client connections, one thread each (default 16)\n"
            "  --broker B    http: local (default) or a broker, started privately per run by\n"
            "                scripts/broker.sh (`scripts/broker.sh names` lists them);\n"
            "                given with `all`, only that broker is run\n"
            "  --txo PATH    http: the txo binary (default: ../txo next to txo_bench)\n"
            "  --up-args A   http: more flags for `txo up`, split on blanks, e.g.\n"
            "                --up-args \"--saga-threads 8 --idle-sleep 10\"\n"
            "  --help        this text\n"
            "\n"
            "txo_bench append-load [--rate R] [--writers W] [--duration S] ...: appends at a\n"
            "fixed rate to the outbox of MYSQL_DATABASE as it is and prints the latency per\n"
            "phase (SIGUSR1: next phase); `txo_bench append-load --help` for its options.\n"
            "\n"
            "Server: MYSQL_HOST, MYSQL_PORT, MYSQL_USER, MYSQL_PASSWORD, MYSQL_SOCKET (as the\n"
            "tests). The bench creates, migrates and drops its own database txo_bench_<pid>\n"
            "(http: txo_bench_<pid>_http, created afresh for every run).\n");
}

static int parse_count(const char *flag, const char *s, unsigned long max, unsigned long *out)
{
    char *end;
    errno = 0;
    unsigned long v = s ? strtoul(s, &end, 10) : 0;
    if (!s || errno || *end != '\0' || v == 0 || v > max) {
        fprintf(stderr, "txo_bench: %s needs a number 1..%lu, got '%s'\n", flag, max, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    struct bench_cfg cfg = {.events = 100000,
                            .runs = 3,
                            .keep = false,
                            .http_orders = 5000,
                            .http_connections = 16,
                            .txo_path = NULL,
                            .up_args = NULL};
    bool run_relay = true;
    bool only_ordering = false;
    bool run_binlog = true;
    bool run_append = true;
    bool run_inbox = true;
    bool run_orders = true;
    bool run_http = true;
    const char *broker = NULL; /* --broker; NULL: local (plus nats in `all`) */
    unsigned long v;
    /* Per-batch info lines from the library would drown the tables. */
    enum txo_log_level log_level = TXO_LOG_WARN;

    /* A load for scripts, in a database of theirs: its own command line (bench_append_load.c). */
    if (argc > 1 && strcmp(argv[1], "append-load") == 0) {
        txo_log_set_level(log_level);
        return bench_append_load_main(argc - 1, argv + 1);
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--events") == 0) {
            if (parse_count(a, i + 1 < argc ? argv[++i] : NULL, 100000000UL, &v) < 0)
                return 2;
            cfg.events = v;
        } else if (strcmp(a, "--runs") == 0) {
            if (parse_count(a, i + 1 < argc ? argv[++i] : NULL, 1000UL, &v) < 0)
                return 2;
            cfg.runs = (unsigned)v;
        } else if (strcmp(a, "--log-level") == 0) {
            const char *name = i + 1 < argc ? argv[++i] : "";
            if (txo_log_level_parse(name, &log_level) < 0) {
                fprintf(stderr, "txo_bench: --log-level needs error|warn|info|debug, got '%s'\n",
                        name);
                return 2;
            }
        } else if (strcmp(a, "--orders") == 0) {
            if (parse_count(a, i + 1 < argc ? argv[++i] : NULL, 10000000UL, &v) < 0)
                return 2;
            cfg.http_orders = v;
        } else if (strcmp(a, "--connections") == 0) {
            if (parse_count(a, i + 1 < argc ? argv[++i] : NULL, 1024UL, &v) < 0)
                return 2;
            cfg.http_connections = (unsigned)v;
        } else if (strcmp(a, "--broker") == 0) {
            broker = i + 1 < argc ? argv[++i] : "";
            if (broker[0] == '\0' ||
                strspn(broker, "abcdefghijklmnopqrstuvwxyz") != strlen(broker)) {
                fprintf(stderr, "txo_bench: --broker needs local or a broker name, got '%s'\n",
                        broker);
                return 2;
            }
        } else if (strcmp(a, "--txo") == 0) {
            cfg.txo_path = i + 1 < argc ? argv[++i] : "";
        } else if (strcmp(a, "--up-args") == 0) {
            cfg.up_args = i + 1 < argc ? argv[++i] : "";
        } else if (strcmp(a, "--keep") == 0) {
            cfg.keep = true;
        } else if (strcmp(a, "relay") == 0) {
            run_relay = true;
            run_binlog = run_append = run_orders = run_http = run_inbox = false;
        } else if (strcmp(a, "ordering") == 0) {
            run_relay = true;
            only_ordering = true;
            run_binlog = run_append = run_orders = run_http = run_inbox = false;
        } else if (strcmp(a, "binlog") == 0) {
            run_binlog = true;
            run_relay = run_append = run_orders = run_http = run_inbox = false;
        } else if (strcmp(a, "append") == 0) {
            run_append = true;
            run_relay = run_binlog = run_orders = run_http = run_inbox = false;
        } else if (strcmp(a, "inbox") == 0) {
            run_inbox = true;
            run_relay = run_binlog = run_append = run_orders = run_http = false;
        } else if (strcmp(a, "orders") == 0) {
            run_orders = true;
            run_relay = run_binlog = run_append = run_http = run_inbox = false;
        } else if (strcmp(a, "http") == 0) {
            run_http = true;
            run_relay = run_binlog = run_append = run_orders = run_inbox = false;
        } else if (strcmp(a, "all") == 0) {
            run_relay = run_binlog = run_append = run_inbox = run_orders = run_http = true;
        } else {
            fprintf(stderr, "txo_bench: unknown argument '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }

    txo_log_set_level(log_level);

    struct bench_env env;
    int rc = bench_env_setup(&env);
    if (rc == 0)
        rc = bench_print_header(&env, &cfg);
    if (rc == 0 && run_relay)
        rc = only_ordering ? bench_ordering(&env, &cfg) : bench_relay(&env, &cfg);
    if (rc == 0 && run_binlog)
        rc = bench_binlog(&env, &cfg);
    if (rc == 0 && run_append)
        rc = bench_append(&env, &cfg);
    if (rc == 0 && run_inbox)
        rc = bench_inbox(&env, &cfg);
    if (rc == 0 && run_orders)
        rc = bench_orders(&env, &cfg);
    if (rc == 0 && run_http) {
        /* `http` alone runs one broker; `all` runs local and BENCH_HTTP_BROKERS. */
        bool all = run_relay && run_append && run_orders && broker == NULL;
        bool local = broker == NULL || strcmp(broker, "local") == 0;
        if (local)
            rc = bench_http(&env, &cfg, NULL);
        else
            rc = bench_http(&env, &cfg, broker);
        char list[] = BENCH_HTTP_BROKERS;
        char *save = NULL;
        for (char *b = strtok_r(list, " ", &save); all && rc == 0 && b != NULL;
             b = strtok_r(NULL, " ", &save))
            rc = bench_http(&env, &cfg, b);
    }
    bench_env_teardown(&env, cfg.keep);
    if (rc < 0) {
        fprintf(stderr, "txo_bench: FAILED (%s)\n", txo_err_name(rc));
        return 1;
    }
    return 0;
}
