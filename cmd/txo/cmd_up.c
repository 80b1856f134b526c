/*
 * `txo up`: the whole order service in one process: the HTTP API, the relay and the worker,
 * with the flags of `txo serve`, `txo relay` and `txo worker`. With the default --broker local
 * the relay hands each committed event straight to the worker's consumer (no broker needed:
 * MariaDB is the only dependency); with --broker nats (or another broker of brokers.h) events
 * go through that broker.
 *
 * Stop order on SIGTERM/SIGINT: the API first (no new orders), then the relay (its batch in
 * flight completes), then the worker (its saga steps in flight complete).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "clean.h"
#include "daemons.h"
#include "tracing.h"
#include "cli_errors.h"
#include "notify.h"
#include "orders.h"

static int run(void);
static void add_settings(struct settings_table *t);

const struct command cmd_up = {
    .name = "up",
    .summary = "run the API, the relay and the worker in one process (local development)",
    .usage = "txo up [options]",
    .description =
        "Applies the migrations (and creates --stock), then runs `txo serve`, `txo relay` and `txo "
        "worker` together,\n"
        "with their options. --broker local (the default) delivers each published event to\n"
        "the in-process consumer, so nothing but MariaDB is needed; --broker nats (or another\n"
        "broker) publishes to and consumes from that broker. Several processes may run against\n"
        "one database.\n"
        "SIGTERM/SIGINT: stop the API, then the relay, then the worker; exit 0.",
    .add_settings = add_settings,
    .run = run,
    .examples =
        "# Everything in one process against a local MariaDB, events dispatched in-process:\n"
        "txo up\n"
        "# Through NATS JetStream, with 50 pens and 20 books in stock:\n"
        "txo up --broker nats --nats-url nats://127.0.0.1:4222 --stock pen=50,book=20\n"
        "# The relay reading the server's binary log instead of polling (docs/binlog.md):\n"
        "txo up --source binlog\n",
    .exit_status =
        "0 after a graceful stop (SIGTERM or SIGINT), 1 when a component failed to start or "
        "failed while running (the reason on standard error), 2 on a bad option or environment "
        "variable, found before anything is started.",
};

struct up_cmd_opts {
    struct common_opts common;
    struct tracing_settings tracing;
    struct serve_settings serve;
    struct relay_settings relay;
    struct worker_settings worker;
    struct services_settings services;
    const char *broker;
    bool migrate;
    const char *stock;
};

static struct up_cmd_opts opts;

/* The settings of this command, in --help order. */
static void add_settings(struct settings_table *t)
{
    const struct setting startup[] = {
        {.name = "migrate",
         .env = "TXO_MIGRATE",
         .type = SETTING_BOOL,
         .def = "true",
         .help = "apply the schema migrations at start",
         .target = &opts.migrate},
        {.name = "stock",
         .env = "TXO_STOCK",
         .type = SETTING_STRING,
         .help = "create these SKUs when missing, as SKU=UNITS[,SKU=UNITS...] (e.g. "
                 "iphone-15=100); existing SKUs are left alone",
         .target = &opts.stock},
    };
    settings_add_common(t, &opts.common);
    settings_add_tracing(t, &opts.tracing);
    settings_add_serve(t, &opts.serve);
    settings_add_relay(t, &opts.relay);
    settings_add_worker(t, &opts.worker);
    settings_add_services(t, &opts.services);
    cmd_brokers_add_consumer_choice(t, CMD_BROKER_CHOICE_UP, &opts.broker);
    settings_add(t, startup, TXO_ARRAY_LEN(startup));
}

/* After each order commits: publish its OrderCreated now rather than after the idle pause. */
static void wake_relay(void *arg)
{
    txo_relay_wake(arg);
}

/*
 * --stock: "sku=units,sku=units", parsed into one list. The whole list is checked against the
 * inventory table's limits before anything is written (orders_stock_check_list()), so a bad
 * entry exits 2 without touching the database, and the list is then written in one
 * transaction: no half-applied list.
 */
struct stock_list {
    char *buf; /* the flag's copy; the entries' SKUs point into it */
    struct order_stock *items;
    size_t n;
};

static void stock_list_release(struct stock_list *l)
{
    txo_free(l->buf);
    txo_free(l->items);
    memset(l, 0, sizeof(*l));
}

/* One "sku=units" entry; false when it is not that shape or units is not 0..INT32_MAX. */
static bool stock_item(char *item, struct order_stock *out)
{
    char *eq = strchr(item, '=');
    char *end = NULL;
    errno = 0;
    long v = eq != NULL ? strtol(eq + 1, &end, 10) : -1;
    if (eq == NULL || eq == item || end == eq + 1 || *end != '\0' || errno != 0 || v < 0 ||
        v > INT32_MAX)
        return false;
    *eq = '\0';
    out->sku = item;
    out->available = (int32_t)v;
    return true;
}

/* Parses and checks spec into *out; prints why and returns false when it is not usable. */
static bool parse_stock(const char *spec, struct stock_list *out)
{
    memset(out, 0, sizeof(*out));
    size_t cap = 1;
    for (const char *p = spec; *p != '\0'; p++)
        cap += *p == ',';
    out->buf = txo_strdup(spec);
    out->items = txo_calloc(cap, sizeof(*out->items));
    if (out->buf == NULL || out->items == NULL) {
        cli_error("txo up: --stock: out of memory");
        stock_list_release(out);
        return false;
    }
    char *save = NULL;
    for (char *item = strtok_r(out->buf, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        char shown[128];
        snprintf(shown, sizeof(shown), "%s", item);
        if (!stock_item(item, &out->items[out->n])) {
            cli_error("txo up: --stock wants SKU=UNITS[,SKU=UNITS...], got \"%s\"", shown);
            stock_list_release(out);
            return false;
        }
        out->n++;
    }
    struct txo_error err;
    txo_error_init(&err);
    if (orders_stock_check_list(out->items, out->n, &err) != 0) {
        cli_error("txo up: --stock: %s", err.msg);
        stock_list_release(out);
        return false;
    }
    return true;
}

static bool prepare_database(const struct stock_list *stock, int *sig)
{
    struct txo_db *db = daemon_db_wait("up", &opts.common, sig);
    if (db == NULL)
        return false;
    struct txo_error err;
    txo_error_init(&err);
    bool ok = true;
    if (opts.migrate) {
        unsigned applied = 0, total = 0;
        if (orders_migrate(db, &applied, &total, &err) != 0) {
            cmd_report("up", "migrating the schema", &err);
            ok = false;
        } else {
            TXO_LOG(TXO_LOG_INFO, "up", "schema ready", TXO_KV_U64("applied", applied),
                    TXO_KV_U64("total", total));
        }
    }
    if (ok && stock->n > 0 && orders_ensure_inventory_list(db, stock->items, stock->n, &err) != 0) {
        cmd_report("up", "creating stock", &err);
        ok = false;
    }
    txo_db_close(db);
    return ok;
}

static int run(void)
{
    if (!daemon_check_settings("up", &opts.serve, &opts.services) ||
        !clean_archive_ok("up", "clean-archive", opts.worker.opts.retention.archive_dir))
        return 2;
    const struct cmd_broker *broker = NULL;
    if (!cmd_broker_choose_consumer("up", CMD_BROKER_CHOICE_UP, opts.broker, &broker))
        return 2;
    bool binlog = false;
    if (!daemon_relay_check("up", &opts.relay, &binlog))
        return 2;
    struct txo_relay_opts *ro = &opts.relay.opts;
    struct stock_list stock = {.n = 0};
    if (opts.stock != NULL && opts.stock[0] != '\0' && !parse_stock(opts.stock, &stock))
        return 2;
    signals_block(); /* before the database wait, which a signal ends */
    int sig = 0;
    bool prepared = prepare_database(&stock, &sig);
    stock_list_release(&stock);
    if (!prepared)
        return sig != 0 ? 0 : 1;

    int status = 1;
    struct txo_error err;
    txo_error_init(&err);
    struct daemon_base base = {.metrics = NULL};
    struct daemon_worker *worker = NULL;
    struct txo_publisher *pub = NULL;
    struct txo_db *relay_db = NULL;
    struct daemon_relay rt = {.wake = false};
    struct api_daemon *api = NULL;

    if (!daemon_base_start("up", &opts.common, false, &opts.tracing, &opts.services, &base,
                           &status))
        goto out;
    struct txo_metrics *reg = base.reg;
    if (ro->ordering == TXO_RELAY_ORDER_AGGREGATE && !daemon_metrics_watch_parked(base.metrics))
        goto out;
    worker = daemon_worker_new("up", &opts.common, &opts.worker, base.services, broker, reg);
    if (worker == NULL)
        goto out;
    if (broker != NULL) {
        if (broker->publisher_new(reg, &pub, &err) != 0) {
            cmd_report("up", "creating the publisher", &err);
            goto out;
        }
    } else if (txo_publisher_local_new(&(struct txo_handler){.batch = txo_worker_handle_many,
                                                             .events = txo_worker_handle_events,
                                                             .arg = daemon_worker_runtime(worker)},
                                       &pub, &err) != 0) {
        cmd_report("up", "creating the local dispatcher", &err);
        goto out;
    }
    relay_db = common_connect(&opts.common);
    if (relay_db == NULL || (!binlog && !daemon_polling_allowed("up", relay_db)))
        goto out;
    ro->metrics = reg;
    ro->tracer = daemon_tracer();
    opts.relay.binlog.relay = *ro;
    if (binlog ? txo_binlog_new(&opts.common.db, pub, &opts.relay.binlog, &rt.binlog, &err) != 0
               : txo_relay_new(relay_db, pub, ro, &rt.relay, &err) != 0) {
        cmd_report("up", "creating the relay", &err);
        goto out;
    }
    if (txo_worker_start(daemon_worker_runtime(worker), &err) != 0) {
        cmd_report("up", "starting the worker", &err);
        goto out;
    }
    if (!daemon_relay_start(&rt)) {
        cli_error("txo up: cannot start the relay thread");
        goto out;
    }
    /* The binlog source needs no wake-up: it reads each commit as the server logs it. */
    api = daemon_api_start("up", &opts.common, &opts.serve, base.services, reg,
                           rt.relay != NULL ? wake_relay : NULL, rt.relay);
    if (api == NULL)
        goto out;
    daemon_base_register("up", &base, rt.relay);
    TXO_LOG(TXO_LOG_INFO, "up", "ready", TXO_KV_STR("listen", opts.serve.listen),
            TXO_KV_STR("broker", opts.broker),
            TXO_KV_U64("saga_threads", opts.worker.opts.saga_threads));
    notify_run_until_stopped("up", "serving the HTTP API, relay and worker");
    status = 0;
out:
    daemon_base_unregister(&base); /* first: it reads the relay's and the services' breakers */
    daemon_api_stop(api);
    if (rt.running) {
        daemon_relay_stop(&rt);
        if (rt.rc != 0) {
            cmd_report("up", "the relay stopped on an error", &rt.err);
            status = 1;
        }
    }
    daemon_worker_stop("up", worker);
    daemon_relay_free(&rt);
    txo_db_close(relay_db);
    txo_publisher_free(pub);
    daemon_worker_free(worker);
    daemon_base_stop(&base);     /* after the daemons: their last spans are sent */
    cmd_broker_shutdown(broker); /* the SDK's own threads, so nothing is left for valgrind */
    return status;
}
