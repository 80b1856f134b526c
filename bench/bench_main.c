/*
 * txo_bench: the speed figures of txo (`make bench`). See docs/benchmarks.md.
 *
 *   txo_bench [relay|orders|all] [--events N] [--runs R] [--keep] [--log-level L]
 *
 * Prints aligned plain-text tables on stdout (medians over R runs). Exits 1 when set-up fails
 * or a correctness check after a run fails (lost events, unconfirmed orders, stock not
 * conserved); the figures themselves never fail.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: txo_bench [relay|orders|all] [--events N] [--runs R] [--keep] [--log-level L]\n"
            "\n"
            "  relay         outbox relay drain: null publisher, skip-locked and update-limit,\n"
            "                1 and 2 relays, batch 500 (plus 1000 and 200), and a drain behind\n"
            "                1,000,000 PUBLISHED rows\n"
            "  orders        order saga end to end: create + start + run until CONFIRMED,\n"
            "                1 thread x 2,000 orders and 4 threads x 2,000 orders\n"
            "  all           both (default)\n"
            "  --events N    events per relay drain (default 100000)\n"
            "  --runs R      runs per configuration; medians are printed (default 3)\n"
            "  --keep        keep the database txo_bench_<pid> afterwards\n"
            "  --log-level L library log level on stderr: error, warn (default), info, debug\n"
            "                (debug prints one line per relay batch with its publish/mark times)\n"
            "  --help        this text\n"
            "\n"
            "Server: MYSQL_HOST, MYSQL_PORT, MYSQL_USER, MYSQL_PASSWORD, MYSQL_SOCKET (as the\n"
            "tests). The bench creates, migrates and drops its own database txo_bench_<pid>.\n");
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
    struct bench_cfg cfg = {.events = 100000, .runs = 3, .keep = false};
    bool run_relay = true;
    bool run_orders = true;
    unsigned long v;
    /* Per-batch info lines from the library would drown the tables. */
    enum txo_log_level log_level = TXO_LOG_WARN;

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
        } else if (strcmp(a, "--keep") == 0) {
            cfg.keep = true;
        } else if (strcmp(a, "relay") == 0) {
            run_relay = true;
            run_orders = false;
        } else if (strcmp(a, "orders") == 0) {
            run_relay = false;
            run_orders = true;
        } else if (strcmp(a, "all") == 0) {
            run_relay = true;
            run_orders = true;
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
        rc = bench_relay(&env, &cfg);
    if (rc == 0 && run_orders)
        rc = bench_orders(&env, &cfg);
    bench_env_teardown(&env, cfg.keep);
    if (rc < 0) {
        fprintf(stderr, "txo_bench: FAILED (%s)\n", txo_err_name(rc));
        return 1;
    }
    return 0;
}
