/*
 * `txo replay`: publishes already published outbox events again (the library does the work:
 * include/txo/replay.h); this file turns settings into a struct txo_replay_opts, picks the
 * publisher, handles signals and draws the progress line.
 *
 * The replay runs on a thread of its own while the main thread waits for a signal
 * (signals.h): a signal stops it after the batch in flight, and a replay that ends by itself
 * ends the wait. With stderr on a terminal a progress line is redrawn there once a second.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "brokers.h"
#include "cli_errors.h"
#include "progress.h"
#include "publisher_settings.h"
#include "signals.h"
#include "txo/replay.h"

static int run(void);
static void add_settings(struct settings_table *t);

const struct command cmd_replay = {
    .name = "replay",
    .summary = "publish already published outbox events again, to a publisher of your choice",
    .usage = "txo replay [options]",
    .description =
        "Publishes again the outbox events whose publication is done (PUBLISHED, and those a\n"
        "binlog source published), chosen by --aggregate-type, --aggregate-id, --event-type,\n"
        "--from-id/--to-id and --since/--until (all optional; together they narrow), in id\n"
        "order, which is each aggregate's commit order, to the publisher and destination of\n"
        "--publisher and its settings (another stream, topic or webhook than the live one if\n"
        "you like). Each event is the message the relay sent, with the same idempotency key,\n"
        "so consumers that saw it drop it; --new-keys gives each a new key\n"
        "(<key>:replay:<name>) for a consumer that must take every event again. --rate limits\n"
        "the events a second. The replay's place is stored in outbox_replays under --name\n"
        "after every batch: run the same command again after a stop or a crash and it goes\n"
        "on from there (the batch in flight is sent again); --restart starts it over. Events\n"
        "appended after the replay started are not part of it. Rows are never written.\n"
        "With --archive DIR the events come from the files of `txo clean --archive DIR`\n"
        "(those retention removed), with the same filters and checkpoints: DIR/outbox_events\n"
        "only, never the inbox's or the dead letters' files.\n"
        "SIGTERM/SIGINT stop it after the batch in flight, exit 0.",
    .add_settings = add_settings,
    .run = run,
    .examples = "# Every order event again, to another NATS subject prefix, 2,000 a second:\n"
                "txo replay --aggregate-type order --rate 2000 --publisher nats --nats-url "
                "nats://127.0.0.1:4222 --nats-subject-prefix replay\n"
                "# One aggregate's history, as JSON lines on stdout:\n"
                "txo replay --name order-42 --aggregate-type order --aggregate-id 42\n"
                "# A day of events to a new consumer's webhook, with keys it has never seen:\n"
                "txo replay --name backfill --since 2026-11-30 --until 2026-12-01 --new-keys "
                "--publisher webhook --webhook-url https://consumer.example/events\n"
                "# Events retention removed, from its archive:\n"
                "txo replay --name old --archive /var/lib/txo/archive --aggregate-type order\n",
    .exit_status = "0 when the replay finished (or had finished) or was stopped by a signal (run "
                   "it again to go on); 1 when it fails (the database, a publisher that refuses "
                   "an event: the message names it); 2 on a bad option, or a --name whose "
                   "stored replay chose other events (--restart, or another name).",
};

struct replay_cmd_opts {
    struct common_opts common;
    struct publisher_settings pub;
    struct txo_replay_opts replay; /* the ids and the rate: parsed from the text below */
    const char *from_id;
    const char *to_id;
    unsigned rate;
};

static struct replay_cmd_opts opts;

static void add_settings(struct settings_table *t)
{
    struct txo_replay_opts *ro = &opts.replay;
    txo_replay_opts_init(ro);
    const struct setting replay[] = {
        {.name = "name",
         .env = "TXO_REPLAY_NAME",
         .type = SETTING_STRING,
         .def = "default",
         .help = "the replay's name: where it stands is stored under it (outbox_replays), so "
                 "the same command resumes it; 1..64 bytes",
         .target = &ro->name},
        {.name = "aggregate-type",
         .env = "TXO_REPLAY_AGGREGATE_TYPE",
         .type = SETTING_STRING,
         .help = "only events of this aggregate type",
         .target = &ro->filter.aggregate_type},
        {.name = "aggregate-id",
         .env = "TXO_REPLAY_AGGREGATE_ID",
         .type = SETTING_STRING,
         .help = "only events of this aggregate id",
         .target = &ro->filter.aggregate_id},
        {.name = "event-type",
         .env = "TXO_REPLAY_EVENT_TYPE",
         .type = SETTING_STRING,
         .help = "only events of this type",
         .target = &ro->filter.event_type},
        {.name = "from-id",
         .env = "TXO_REPLAY_FROM_ID",
         .type = SETTING_STRING,
         .help = "only events with this outbox id or a larger one",
         .target = &opts.from_id},
        {.name = "to-id",
         .env = "TXO_REPLAY_TO_ID",
         .type = SETTING_STRING,
         .help = "only events with this outbox id or a smaller one (default: the largest id "
                 "when the replay starts)",
         .target = &opts.to_id},
        {.name = "since",
         .env = "TXO_REPLAY_SINCE",
         .type = SETTING_STRING,
         .help = "only events created at or after this UTC time, YYYY-MM-DD or YYYY-MM-DD "
                 "HH:MM:SS[.ffffff]",
         .target = &ro->filter.since},
        {.name = "until",
         .env = "TXO_REPLAY_UNTIL",
         .type = SETTING_STRING,
         .help = "only events created before this UTC time, same form",
         .target = &ro->filter.until},
        {.name = "archive",
         .env = "TXO_REPLAY_ARCHIVE",
         .type = SETTING_STRING,
         .help = "replay from the files `txo clean --archive DIR` wrote (the events retention "
                 "removed; each file is verified as it is read) instead of from the table",
         .target = &ro->archive_dir},
        {.name = "rate",
         .env = "TXO_REPLAY_RATE",
         .type = SETTING_UINT,
         .def = "0",
         .help = "at most this many events a second (0: as fast as the publisher takes them)",
         .min = 0,
         .max = 10000000,
         .target = &opts.rate},
        {.name = "batch-size",
         .env = "TXO_REPLAY_BATCH_SIZE",
         .type = SETTING_SIZE,
         .def = "500",
         .help = "events read and published at a time (and stored as done after each)",
         .min = 1,
         .max = 10000,
         .target = &ro->batch_size},
        {.name = "new-keys",
         .env = "TXO_REPLAY_NEW_KEYS",
         .type = SETTING_BOOL,
         .def = "false",
         .help = "publish each event with the idempotency key <key>:replay:<name> instead of "
                 "its own, for a consumer that must take every event again",
         .target = &ro->new_keys},
        {.name = "restart",
         .env = "TXO_REPLAY_RESTART",
         .type = SETTING_BOOL,
         .def = "false",
         .help = "forget where the replay of --name stands and start it from the beginning",
         .target = &ro->restart},
    };
    settings_add_common(t, &opts.common);
    settings_add_publisher(t, &opts.pub);
    settings_add(t, replay, TXO_ARRAY_LEN(replay));
    cmd_brokers_add_settings(t);
    settings_add_webhook(t, &opts.pub);
}

/* An id flag: empty or absent is 0; otherwise a positive decimal. */
static bool parse_id(const char *flag, const char *text, int64_t *out)
{
    *out = 0;
    if (text == NULL || text[0] == '\0')
        return true;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < 1) {
        cli_error("txo replay: --%s must be a positive id, got \"%s\"", flag, text);
        return false;
    }
    *out = v;
    return true;
}

/* A text option given empty is not given. */
static void empty_unset(const char **s)
{
    if (*s != NULL && (*s)[0] == '\0')
        *s = NULL;
}

struct replay_thread {
    struct txo_replay *rp;
    int rc;
    struct txo_error err;
};

static void *replay_main(void *arg)
{
    struct replay_thread *t = arg;
    t->rc = txo_replay_run(t->rp, &t->err);
    signals_wake();
    return NULL;
}

/* The progress line on a terminal (progress.h). */
static void draw_progress(void *arg, double s)
{
    struct txo_replay_stats st;
    txo_replay_get_stats(arg, &st);
    fprintf(stderr, "\rtxo replay: %" PRIu64 " of %" PRIu64 " events (%.0f%%), %.0f/s   ",
            st.replayed, st.total,
            st.total > 0 ? 100.0 * (double)st.replayed / (double)st.total : 100.0,
            s > 0 ? (double)st.this_run / s : 0.0);
}

static int run(void)
{
    if (!publisher_settings_apply("replay", &opts.pub))
        return 2;
    struct txo_replay_opts *ro = &opts.replay;
    const char **texts[] = {&ro->filter.aggregate_type, &ro->filter.aggregate_id,
                            &ro->filter.event_type,     &ro->filter.since,
                            &ro->filter.until,          &ro->archive_dir};
    for (size_t i = 0; i < TXO_ARRAY_LEN(texts); i++)
        empty_unset(texts[i]);
    if (!parse_id("from-id", opts.from_id, &ro->filter.from_id) ||
        !parse_id("to-id", opts.to_id, &ro->filter.to_id))
        return 2;
    ro->rate = opts.rate;
    bool tty = isatty(STDERR_FILENO);
    ro->count = tty;

    struct txo_error err;
    txo_error_init(&err);
    struct replay_thread rt = {.rp = NULL};
    txo_error_init(&rt.err);
    /* The options first, so that a bad one exits 2 before any connection. */
    if (txo_replay_opts_check(ro, &err) < 0) {
        cli_error("txo %s", err.msg); /* "replay: ..." */
        return 2;
    }
    struct txo_publisher *pub = NULL;
    int status = 1;
    signals_block();
    struct txo_db *db = common_connect(&opts.common);
    if (db == NULL)
        return 1;
    if (publisher_settings_make(&opts.pub, NULL, &pub, &err) < 0) {
        cmd_report("replay", "creating the publisher", &err);
        goto out;
    }
    if (txo_replay_new(db, pub, ro, &rt.rp, &err) < 0) {
        cmd_report("replay", "starting", &err);
        goto out;
    }
    pthread_t tid;
    if (pthread_create(&tid, NULL, replay_main, &rt) != 0) {
        cli_error("txo replay: cannot start the replay thread");
        goto out;
    }
    struct progress_line prog = {.started = false};
    if (tty)
        (void)progress_line_start(&prog, draw_progress, rt.rp);
    int sig = signals_wait();
    if (sig != 0)
        TXO_LOG(TXO_LOG_INFO, "replay", "stopping", TXO_KV_I64("signal", sig));
    txo_replay_stop(rt.rp);
    pthread_join(tid, NULL);
    progress_line_stop(&prog);
    struct txo_replay_stats st;
    txo_replay_get_stats(rt.rp, &st);
    if (rt.rc < 0) {
        cmd_report("replay", "stopped on an error", &rt.err);
        status = rt.rc == TXO_ECONFLICT ? 2 : 1;
        goto out;
    }
    fprintf(stderr,
            "txo replay %s: %s: %" PRIu64 " events published in this run, %" PRIu64
            " in all, through id %" PRId64 " of %" PRId64 "%s\n",
            ro->name, st.finished ? "finished" : "stopped", st.this_run, st.replayed, st.last_id,
            st.to_id, st.finished ? "" : " (run the same command again to go on)");
    status = 0;
out:
    txo_replay_free(rt.rp);
    txo_publisher_free(pub);
    txo_db_close(db);
    cmd_broker_shutdown(cmd_broker_find(opts.pub.publisher));
    fflush(stdout);
    return status;
}
