/*
 * `txo clean`: one retention pass, then exit (from cron, or a Kubernetes CronJob), and the
 * relay's in-process cleaner (`txo relay --clean-interval N`): see clean.h.
 *
 * Each batch is one short transaction that deletes at most --clean-batch rows found along an
 * index (txo/retention.h), so a pass never holds many locks or a long undo log; the rows it
 * deletes are PUBLISHED or replayed dead letters, which the relay never locks. Batches are
 * --clean-pause apart: deleting competes with the relay for the server's CPU and redo log,
 * and bench/clean_next_to_relay.sh measures what a pass costs the relay.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "clean.h"
#include "cli_errors.h"
#include "txo/archive.h"

static int run(void);
static void add_settings(struct settings_table *t);

const struct command cmd_clean = {
    .name = "clean",
    .summary = "delete old PUBLISHED outbox rows and replayed dead letters (one pass)",
    .usage = "txo clean [options]",
    .description =
        "Runs one retention pass and exits: PUBLISHED outbox events older than\n"
        "--outbox-retention and dead letters replayed more than --dead-letter-retention ago\n"
        "are deleted, at most --clean-batch per short transaction, oldest first; when the\n"
        "database also has the worker's tables, completed idempotency keys, inbox rows and DONE\n"
        "commands older than --idempotency-retention and --inbox-retention too. Safe next to\n"
        "running relays and workers, and idempotent. PENDING, PROCESSING and FAILED events and\n"
        "dead letters never replayed are never deleted. `txo relay --clean-interval N` runs the\n"
        "same outbox and dead-letter purge every N seconds inside the relay.\n\n"
        "With --archive DIR the outbox rows, dead letters and inbox rows are first written to\n"
        "gzip-compressed JSON-lines files (a header line first) made durable before the rows'\n"
        "DELETE commits: DIR/<table>/<table>.<first_id>-<last_id>.jsonl.gz, and for the inbox,\n"
        "which has no integer id, DIR/inbox_events/inbox_events.<seq>.<YYYYMMDDTHHMMSSZ>.jsonl.gz\n"
        "(a sequence one more than its newest file's, then the time its first row was\n"
        "processed). A run interrupted between a file and its DELETE is completed by the next\n"
        "one: it deletes the rows the newest file of a table lists before it archives anything\n"
        "new, so no row is archived twice. Read the files with `txo archive cat` and check them\n"
        "with `txo archive verify`. DIR must exist and be writable; one cleaner per DIR at a\n"
        "time.",
    .add_settings = add_settings,
    .run = run,
    .examples = "# One retention pass, keeping a week of PUBLISHED events:\n"
                "txo clean --outbox-retention 604800\n"
                "# The same, keeping a copy of every outbox row, dead letter and inbox row it\n"
                "# deletes:\n"
                "txo clean --outbox-retention 604800 --archive /var/lib/txo/archive\n",
    .exit_status = "0 when the pass ran to the end, 1 when it failed (the reason on standard "
                   "error; batches before the failure stay deleted, and archived), 2 on a bad "
                   "option, including an --archive directory that does not exist or is not "
                   "writable (then nothing is deleted).",
};

/* ---- the relay's cleaner thread ---- */

#define SLICE_BATCHES 10

static void *clean_main(void *arg)
{
    struct clean_thread *c = arg;
    struct txo_db *db = NULL;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        pthread_mutex_unlock(&c->mu);
        struct txo_error err;
        txo_error_init(&err);
        int rc = db == NULL ? txo_db_open(&c->db_opts, &db, &err) : 0;
        struct txo_retention_counts n = {0};
        if (rc == 0)
            rc = txo_retention_run(db, &c->settings, &n, &err);
        uint64_t deleted = n.outbox + n.dead_letters;
        if (rc != 0) {
            TXO_LOG(TXO_LOG_WARN, "clean", "retention pass failed", TXO_KV_STR("err", err.msg));
            txo_db_close(db); /* reopened at the next pass */
            db = NULL;
        }
        pthread_mutex_lock(&c->mu);
        c->passes++;
        c->deleted += deleted;
        /* A slice that ran all its batches left more behind: go on after one pause. */
        bool more = rc == 0 && n.outbox + n.dead_letters >=
                                   (uint64_t)c->settings.batch * c->settings.max_batches;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        if (more) {
            until.tv_nsec += (long)c->settings.pause_ms * 1000000L;
            until.tv_sec += until.tv_nsec / 1000000000L;
            until.tv_nsec %= 1000000000L;
        } else {
            until.tv_sec += (time_t)c->settings.interval_s;
        }
        while (!c->stop && pthread_cond_timedwait(&c->cv, &c->mu, &until) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&c->mu);
    txo_db_close(db);
    return NULL;
}

bool clean_thread_start(struct clean_thread *c, const struct txo_retention_opts *settings,
                        const struct txo_db_opts *db_opts)
{
    c->settings = *settings;
    c->settings.relay_tables_only = true;
    clean_settings_derive(&c->settings);
    /* Passes in slices of a few batches, so that a stop waits for at most one slice. */
    if (c->settings.max_batches == 0 || c->settings.max_batches > SLICE_BATCHES)
        c->settings.max_batches = SLICE_BATCHES;
    c->db_opts = *db_opts;
    c->stop = false;
    c->running = false;
    c->passes = 0;
    c->deleted = 0;
    if (settings->interval_s == 0)
        return true;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (pthread_create(&c->tid, NULL, clean_main, c) != 0) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        return false;
    }
    c->running = true;
    TXO_LOG(TXO_LOG_INFO, "clean", "cleaner started",
            TXO_KV_U64("interval_s", settings->interval_s),
            TXO_KV_U64("outbox_retention_s", settings->outbox_s),
            TXO_KV_U64("dead_letter_retention_s", settings->dead_letters_s),
            TXO_KV_U64("batch", settings->batch));
    return true;
}

void clean_thread_stop(struct clean_thread *c)
{
    if (!c->running)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->tid, NULL);
    TXO_LOG(TXO_LOG_INFO, "clean", "cleaner stopped", TXO_KV_U64("passes", c->passes),
            TXO_KV_U64("deleted", c->deleted));
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    c->running = false;
}

/* ---- txo clean ---- */

static struct {
    struct common_opts common;
    struct txo_retention_opts clean;
} opts;

static void add_settings(struct settings_table *t)
{
    settings_add_common(t, &opts.common);
    settings_add_clean(t, &opts.clean, CLEAN_COMMAND);
}

static int run(void)
{
    struct txo_error err;
    txo_error_init(&err);
    if (!clean_archive_ok("clean", "archive", opts.clean.archive_dir))
        return 2;
    clean_settings_derive(&opts.clean);
    struct txo_db *db = common_connect(&opts.common);
    if (db == NULL)
        return 1;
    struct txo_retention_counts c = {0};
    int rc = txo_retention_run(db, &opts.clean, &c, &err);
    txo_db_close(db);
    printf("deleted outbox=%" PRIu64 " dead_letters=%" PRIu64 " idempotency=%" PRIu64
           " inbox=%" PRIu64 " commands=%" PRIu64 "\n",
           c.outbox, c.dead_letters, c.idempotency, c.inbox, c.commands);
    if (rc != 0) {
        cmd_report("clean", "retention pass", &err);
        return 1;
    }
    return 0;
}
