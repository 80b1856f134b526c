/*
 * `txo relay`: the outbox relay daemon. It publishes the rows any application commits into
 * outbox_events (the library does the work: include/txo/relay.h); this file only turns
 * settings into a struct txo_relay_opts, picks the publisher and handles signals.
 *
 * stdout belongs to the log publisher (one envelope per line); everything else, including
 * the final stats line, goes to stderr through the log sink.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "settings.h"

static int run(int argc, char **argv);

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
        "idempotency_key of the envelope. The log publisher writes one JSON envelope per line\n"
        "to stdout. SIGTERM/SIGINT finish the current batch and exit 0.",
    .run = run,
};

struct relay_cmd_opts {
    struct common_opts common;
    const char *publisher;
    const char *claim;
    unsigned batch_size;
    unsigned lease_s;
    unsigned max_attempts;
    int64_t backoff_base_ms;
    int64_t backoff_max_ms;
    unsigned idle_sleep_ms;
    const char *relay_id;
    bool drain;
};

static struct relay_cmd_opts opts;

static struct setting table[] = {
    COMMON_SETTINGS(opts.common),
    {"publisher", "TXO_PUBLISHER", SETTING_STRING, "log",
     "where events go: log (one JSON envelope per line on stdout) or null (discard)", false, 0, 0,
     &opts.publisher},
    {"claim", "TXO_CLAIM", SETTING_STRING, "auto",
     "claim strategy: auto, skip-locked (MySQL 8.0.1+, MariaDB 10.6+) or update-limit "
     "(MySQL 5.7)",
     false, 0, 0, &opts.claim},
    {"batch-size", "TXO_BATCH_SIZE", SETTING_UINT, "500", "events claimed per batch", false, 1,
     10000, &opts.batch_size},
    {"lease", "TXO_LEASE_SECONDS", SETTING_UINT, "30",
     "seconds a claimed batch stays reserved; after that another relay republishes it", false, 1,
     86400, &opts.lease_s},
    {"max-attempts", "TXO_MAX_ATTEMPTS", SETTING_UINT, "10",
     "publish attempts before an event becomes FAILED and is dead-lettered", false, 1, 1000000,
     &opts.max_attempts},
    {"backoff-base", "TXO_BACKOFF_BASE_MS", SETTING_MS, "500",
     "delay before the first retry of a failed publish, milliseconds (doubles per attempt, "
     "jitter 50%)",
     false, 1, 86400000, &opts.backoff_base_ms},
    {"backoff-max", "TXO_BACKOFF_MAX_MS", SETTING_MS, "300000",
     "cap of the retry delay, milliseconds", false, 1, 86400000, &opts.backoff_max_ms},
    {"idle-sleep", "TXO_IDLE_SLEEP_MS", SETTING_UINT, "200",
     "pause when nothing is due, milliseconds", false, 1, 3600000, &opts.idle_sleep_ms},
    {"relay-id", "TXO_RELAY_ID", SETTING_STRING, NULL,
     "name of this relay in lock tokens (default: hostname:pid)", false, 0, 0, &opts.relay_id},
    {"drain", "TXO_DRAIN", SETTING_BOOL, "false", "publish until nothing is due, then exit 0",
     false, 0, 0, &opts.drain},
};

static void stop_relay(void *arg)
{
    txo_relay_stop(arg);
}

static int make_publisher(const char *name, struct txo_publisher **pub, struct txo_error *err)
{
    if (strcmp(name, "log") == 0)
        return txo_publisher_log_new(stdout, pub, err);
    if (strcmp(name, "null") == 0)
        return txo_publisher_null_new(pub, err);
    return txo_error_set(err, TXO_EINVAL, "unknown publisher");
}

static int run(int argc, char **argv)
{
    txo_db_opts_init(&opts.common.db);
    enum settings_result r =
        settings_parse(&cmd_relay, table, TXO_ARRAY_LEN(table), argc, argv, NULL);
    if (r != SETTINGS_OK)
        return r == SETTINGS_EXIT_OK ? 0 : 2;
    if (!common_apply(&opts.common))
        return 2;

    struct txo_relay_opts ro;
    txo_relay_opts_init(&ro);
    if (txo_claim_strategy_parse(opts.claim, &ro.claim) < 0) {
        fprintf(stderr,
                "txo relay: --claim must be auto, skip-locked or update-limit, got \"%s\"\n",
                opts.claim);
        return 2;
    }
    if (strcmp(opts.publisher, "log") != 0 && strcmp(opts.publisher, "null") != 0) {
        fprintf(stderr, "txo relay: --publisher must be log or null, got \"%s\"\n", opts.publisher);
        return 2;
    }
    if (opts.backoff_max_ms < opts.backoff_base_ms) {
        fprintf(stderr,
                "txo relay: --backoff-max (%" PRId64 ") must be >= --backoff-base (%" PRId64 ")\n",
                opts.backoff_max_ms, opts.backoff_base_ms);
        return 2;
    }
    if (opts.relay_id != NULL && opts.relay_id[0] == '\0')
        opts.relay_id = NULL;
    ro.relay_id = opts.relay_id;
    ro.batch_size = opts.batch_size;
    ro.lease_s = opts.lease_s;
    ro.max_attempts = opts.max_attempts;
    ro.backoff.base_ms = opts.backoff_base_ms;
    ro.backoff.max_ms = opts.backoff_max_ms;
    ro.idle_sleep_ms = opts.idle_sleep_ms;
    ro.drain = opts.drain;

    int status = 1;
    struct txo_publisher *pub = NULL;
    struct txo_relay *relay = NULL;
    struct txo_error err;
    txo_error_init(&err);

    struct txo_db *db = common_connect(&opts.common);
    if (db == NULL)
        return 1;
    if (make_publisher(opts.publisher, &pub, &err) < 0) {
        cmd_report("relay", "creating the publisher", &err);
        goto out;
    }
    int rc = txo_relay_new(db, pub, &ro, &relay, &err);
    if (rc < 0) {
        cmd_report("relay", "starting the relay", &err);
        status = rc == TXO_EINVAL ? 2 : 1;
        goto out;
    }
    cmd_on_stop_signal(stop_relay, relay);
    rc = txo_relay_run(relay, &err);
    struct txo_relay_stats st;
    txo_relay_get_stats(relay, &st);
    TXO_LOG(TXO_LOG_INFO, "relay",
            "relay stopped claimed=%" PRIu64 " published=%" PRIu64 " failed_attempts=%" PRIu64
            " dead_lettered=%" PRIu64 " fenced=%" PRIu64 " reclaimed=%" PRIu64 " batches=%" PRIu64,
            st.claimed, st.published, st.failed_attempts, st.dead_lettered, st.fenced, st.reclaimed,
            st.batches);
    if (rc < 0) {
        cmd_report("relay", "stopped on an error", &err);
        goto out;
    }
    status = 0;
out:
    /* Signals may still arrive; they must not reach a freed relay. */
    cmd_on_stop_signal(NULL, NULL);
    txo_relay_free(relay);
    txo_publisher_free(pub);
    txo_db_close(db);
    fflush(stdout);
    return status;
}
