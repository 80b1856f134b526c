/*
 * `txo relay`: the outbox relay daemon. It publishes the rows any application commits into
 * outbox_events (the library does the work: include/txo/relay.h); this file only turns
 * settings into a struct txo_relay_opts, picks the publisher and handles signals.
 *
 * The relay loop runs on a thread of its own while the main thread waits for a signal
 * (signals.h), as in every daemon: a signal stops the relay, and a relay that ends by itself
 * (--drain, or an error) ends the wait.
 *
 * stdout belongs to the log publisher (one envelope per line); everything else, including
 * the final stats line, goes to stderr through the log sink. With --drain and stderr on a
 * terminal, a progress line (published, remaining, events/s) is redrawn there once a second,
 * by a thread of its own with a database connection of its own for the remaining count.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "clean.h"
#include "cli_errors.h"
#include "daemons.h"
#include "tracing.h"
#include "notify.h"
#include "progress.h"
#include "publisher_settings.h"
#include "signals.h"
#include "txo/binlog.h"
#include "txo/webhook.h"

static int run(void);
static void add_settings(struct settings_table *t);

const struct command cmd_relay = {
    .name = "relay",
    .summary = "publish committed outbox events (at least once) and mark them PUBLISHED",
    .usage = "txo relay [options]",
    .description =
        "Publishes the events that applications insert into the outbox_events table inside\n"
        "their own transactions (status PENDING; columns aggregate_type, aggregate_id,\n"
        "event_type, payload JSON, unique idempotency_key). It claims due rows in batches\n"
        "under a lease, publishes them with no lock held, then marks them PUBLISHED; failed\n"
        "publishes retry with backoff and after --max-attempts become FAILED with a row in\n"
        "dead_letter_events. Delivery is at least once: consumers de-duplicate on the\n"
        "idempotency_key of the envelope. Publishers: log (one JSON envelope per line on\n"
        "stdout), null (discard; benchmarks), webhook (HTTP POST per event, Idempotency-Key\n"
        "header, 2xx only counts) and the brokers of --publisher, each with its --<broker>-*\n"
        "settings (docs/brokers.md: what each sends and guarantees).\n"
        "With --source binlog it reads the inserts from the server's binary log as a\n"
        "replication client instead of polling the table (docs/binlog.md): the same messages,\n"
        "in commit order, one active reader per --source-name, its position stored in\n"
        "outbox_binlog_sources.\n"
        "SIGTERM/SIGINT finish the current batch and exit 0.",
    .add_settings = add_settings,
    .run = run,
    .examples = "# Publish to NATS JetStream, with metrics on port 9101:\n"
                "txo relay --publisher nats --nats-url nats://127.0.0.1:4222 --metrics-listen "
                "127.0.0.1:9101\n"
                "# Print every due event as a JSON line, then exit when none is left:\n"
                "txo relay --publisher log --drain\n"
                "# Read the binary log instead of polling (grants: docs/binlog.md):\n"
                "txo relay --source binlog --publisher nats --nats-url nats://127.0.0.1:4222\n"
                "# Back to polling: with the binlog relays stopped, then start the polling one:\n"
                "txo relay --source binlog --hand-back --publisher nats --nats-url "
                "nats://127.0.0.1:4222\n",
    .exit_status =
        "0 after a graceful stop (SIGTERM or SIGINT) or, with --drain, once nothing is due; 1 "
        "when the relay cannot start or fails; 2 on a bad option or environment variable.",
};

struct relay_cmd_opts {
    struct common_opts common;
    struct tracing_settings tracing;
    struct publisher_settings pub;
    struct relay_settings relay;
    bool drain;
    struct txo_retention_opts clean;
    const char *metrics_listen;
    bool hand_back;
};

static struct relay_cmd_opts opts;

/* The settings of this command, in --help order. */
static void add_settings(struct settings_table *t)
{
    const struct setting source[] = {
        {.name = "hand-back",
         .env = "TXO_RELAY_HAND_BACK",
         .type = SETTING_BOOL,
         .def = "false",
         .help = "with --source binlog: hand the outbox back to the polling relay, then exit 0: "
                 "marks PUBLISHED the rows the source published (they stay PENDING while it "
                 "reads the log), reads the log up to the server's position, and forgets the "
                 "source's position. Stop every binlog reader of the source first; start the "
                 "polling relay after it",
         .target = &opts.hand_back},
    };
    const struct setting drain[] = {
        {.name = "drain",
         .env = "TXO_DRAIN",
         .type = SETTING_BOOL,
         .def = "false",
         .help = "publish until nothing is due (--source binlog: until the log read reaches "
                 "the server's position at start), then exit 0",
         .target = &opts.drain},
    };
    settings_add_common(t, &opts.common);
    settings_add_tracing(t, &opts.tracing);
    settings_add_publisher(t, &opts.pub);
    settings_add_relay(t, &opts.relay);
    settings_add(t, source, TXO_ARRAY_LEN(source));
    settings_add(t, drain, TXO_ARRAY_LEN(drain));
    settings_add_clean(t, &opts.clean, CLEAN_IN_RELAY);
    cmd_brokers_add_settings(t);
    settings_add_webhook(t, &opts.pub);
    settings_add_metrics_listen(t, &opts.metrics_listen);
}

/* The --drain progress line on a terminal (progress.h). */
struct progress {
    struct txo_relay *relay;
    struct txo_db *db; /* its own connection, for the remaining count */
};

static void draw_progress(void *arg, double s)
{
    struct progress *p = arg;
    struct txo_relay_stats st;
    txo_relay_get_stats(p->relay, &st);
    struct txo_outbox_stats os;
    struct txo_error err;
    txo_error_init(&err);
    bool counted = txo_outbox_get_stats(p->db, &os, &err) == 0;
    char remaining[32] = "?";
    if (counted)
        snprintf(remaining, sizeof(remaining), "%" PRIu64, os.pending + os.processing);
    fprintf(stderr, "\rtxo relay: published %" PRIu64 ", remaining %s, %.0f events/s   ",
            st.published, remaining, s > 0 ? (double)st.published / s : 0.0);
}

static int run(void)
{

    if (!publisher_settings_apply("relay", &opts.pub) ||
        !clean_archive_ok("relay", "clean-archive", opts.clean.archive_dir))
        return 2;
    bool binlog = false;
    if (!daemon_relay_check("relay", &opts.relay, &binlog))
        return 2;
    struct txo_relay_opts *ro = &opts.relay.opts;
    ro->drain = opts.drain;
    if (opts.hand_back && !binlog) {
        cli_error("txo relay: --hand-back needs --source binlog");
        return 2;
    }

    signals_block(); /* before the first thread: the broker's, the metrics server, the relay */
    int status = 1;
    struct txo_publisher *pub = NULL;
    /* --drain is done, or the relay failed: the main thread stops waiting. */
    struct daemon_relay rt = {.wake = true};
    struct clean_thread cleaner = {.running = false};
    struct daemon_metrics *metrics = NULL;
    struct txo_http_server *msrv = NULL;
    struct txo_heartbeat *hb = NULL;
    struct daemon_heartbeat_src hb_src = {.services = NULL, .relay = NULL};
    struct txo_error err;
    txo_error_init(&err);

    int sig = 0;
    /* A daemon waits for the database; a one-shot --drain (cron, scripts) fails at once. */
    bool job = opts.drain || opts.hand_back;
    struct txo_db *db =
        job ? common_connect(&opts.common) : daemon_db_wait("relay", &opts.common, &sig);
    if (db == NULL)
        return sig != 0 ? 0 : 1;
    if (!binlog && !daemon_polling_allowed("relay", db)) {
        txo_db_close(db);
        return 1;
    }
    if (opts.metrics_listen != NULL && opts.metrics_listen[0] != '\0') {
        metrics = daemon_metrics_new(&opts.common);
        if (metrics == NULL)
            goto out;
        ro->metrics = daemon_metrics_registry(metrics); /* the relay registers its own */
        if (ro->ordering == TXO_RELAY_ORDER_AGGREGATE && !daemon_metrics_watch_parked(metrics))
            goto out;
    }
    if (!daemon_tracing_start("relay", &opts.tracing, ro->metrics)) {
        status = 2;
        goto out;
    }
    ro->tracer = daemon_tracer();
    if (publisher_settings_make(&opts.pub, ro->metrics, &pub, &err) < 0) {
        cmd_report("relay", "creating the publisher", &err);
        goto out;
    }
    int rc = 0;
    if (binlog) {
        struct txo_binlog_opts *bo = &opts.relay.binlog;
        bo->drain = opts.drain;
        bo->hand_back = opts.hand_back;
        bo->relay = *ro; /* with the metrics and the tracer */
        rc = txo_binlog_new(&opts.common.db, pub, bo, &rt.binlog, &err);
    } else {
        rc = txo_relay_new(db, pub, ro, &rt.relay, &err);
    }
    if (rc < 0) {
        cmd_report("relay", "starting the relay", &err);
        status = rc == TXO_EINVAL ? 2 : 1;
        goto out;
    }
    if (metrics != NULL &&
        !daemon_metrics_server_start("relay", opts.metrics_listen, metrics, &msrv))
        goto out;
    if (!clean_thread_start(&cleaner, &opts.clean, &opts.common.db)) {
        cli_error("txo relay: cannot start the cleaner thread");
        goto out;
    }
    if (!daemon_relay_start(&rt)) {
        cli_error("txo relay: cannot start the relay thread");
        goto out;
    }
    struct progress prog = {.relay = rt.relay};
    struct progress_line line = {.started = false};
    bool polling = rt.relay != NULL;
    if (polling && opts.drain && isatty(STDERR_FILENO)) {
        prog.db = common_connect(&opts.common);
        if (prog.db != NULL)
            (void)progress_line_start(&line, draw_progress, &prog);
    }
    /* A one-shot --drain is a job, not a daemon: it does not register. */
    if (polling && !opts.drain) {
        hb_src.relay = rt.relay;
        hb = daemon_heartbeat_start("relay", &opts.common, &hb_src);
    }
    notify_run_until_stopped("relay", "publishing the outbox");
    daemon_relay_stop(&rt);
    clean_thread_stop(&cleaner);
    progress_line_stop(&line);
    txo_db_close(prog.db);
    if (rt.binlog != NULL) {
        struct txo_binlog_stats bs;
        txo_binlog_get_stats(rt.binlog, &bs);
        TXO_LOG(TXO_LOG_INFO, "relay", "binlog source stopped",
                TXO_KV_U64("published", bs.published),
                TXO_KV_U64("dead_lettered", bs.dead_lettered), TXO_KV_U64("runs", bs.runs));
    }
    struct txo_relay_stats st = {0};
    if (polling)
        txo_relay_get_stats(rt.relay, &st);
    if (polling)
        TXO_LOG(TXO_LOG_INFO, "relay", "relay stopped", TXO_KV_U64("claimed", st.claimed),
                TXO_KV_U64("published", st.published),
                TXO_KV_U64("failed_attempts", st.failed_attempts),
                TXO_KV_U64("dead_lettered", st.dead_lettered), TXO_KV_U64("fenced", st.fenced),
                TXO_KV_U64("reclaimed", st.reclaimed), TXO_KV_U64("batches", st.batches));
    if (rt.rc < 0) {
        cmd_report("relay", "stopped on an error", &rt.err);
        goto out;
    }
    status = 0;
out:
    txo_heartbeat_stop(hb); /* before the relay whose breaker it reads */
    clean_thread_stop(&cleaner);
    txo_http_server_stop(msrv);
    daemon_relay_free(&rt); /* before the registry its metrics live in */
    daemon_tracing_stop();  /* after the relay: its last spans are sent */
    daemon_metrics_free(metrics);
    txo_publisher_free(pub);
    txo_db_close(db);
    cmd_broker_shutdown(cmd_broker_find(opts.pub.publisher)); /* the SDK's threads, for valgrind */
    fflush(stdout);
    return status;
}
