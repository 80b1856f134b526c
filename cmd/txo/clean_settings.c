/*
 * The retention cleaner's settings (clean.h), each written once: which of them a command takes,
 * and the defaults that differ between the relay's, the worker's and `txo clean`'s cleaner, are
 * decided here and nowhere else, so a flag accepts the same range wherever it appears.
 */
#include "clean.h"
#include "cli_errors.h"
#include "txo/archive.h"

#define IDEMPOTENCY_RETENTION_HELP                                                                 \
    "completed idempotency keys older than this many seconds are deleted"
#define INBOX_RETENTION_HELP "inbox rows and DONE commands older than this many seconds are deleted"

#define CLEAN_ARCHIVE_HELP                                                                         \
    "write the outbox rows, dead letters and inbox rows deleted to gzip JSON-lines files under "   \
    "this existing directory first (`txo archive`, `txo replay --archive`)"

/* Seconds a row is kept, for every retention setting. */
#define RETENTION_MIN 60
#define RETENTION_MAX 315360000

/* A whole-number setting of the cleaner. */
static struct setting whole(const char *name, const char *env, const char *def, const char *help,
                            unsigned long min, unsigned long max, unsigned *target)
{
    return (struct setting){
        .name = name,
        .env = env,
        .type = SETTING_UINT,
        .def = def,
        .help = help,
        .min = min,
        .max = max,
        .target = target,
    };
}

void settings_add_clean(struct settings_table *t, struct txo_retention_opts *ro,
                        enum clean_host host)
{
    txo_retention_opts_init(ro);
    const bool worker = host == CLEAN_IN_WORKER, command = host == CLEAN_COMMAND;
    struct setting list[9];
    size_t n = 0;
    if (!command)
        list[n++] = whole("clean-interval", "TXO_CLEAN_INTERVAL", worker ? "60" : "0",
                          worker ? "seconds between retention passes (0: no cleaner)"
                                 : "seconds between retention passes in this process (PUBLISHED "
                                   "outbox rows and replayed dead letters; 0: none, run `txo "
                                   "clean` instead)",
                          0, 86400, &ro->interval_s);
    list[n++] = whole("outbox-retention", "TXO_OUTBOX_RETENTION", "604800",
                      "PUBLISHED outbox rows older than this many seconds are deleted",
                      RETENTION_MIN, RETENTION_MAX, &ro->outbox_s);
    if (!worker)
        list[n++] = whole("dead-letter-retention", "TXO_DEAD_LETTER_RETENTION", "2592000",
                          "dead letters replayed more than this many seconds ago are deleted "
                          "(never replayed ones are kept)",
                          RETENTION_MIN, RETENTION_MAX, &ro->dead_letters_s);
    if (host != CLEAN_IN_RELAY) {
        /* `txo clean` may run on a database with only the relay's tables. */
        list[n++] = whole("idempotency-retention", "TXO_IDEMPOTENCY_RETENTION", "86400",
                          command ? IDEMPOTENCY_RETENTION_HELP " (when the table exists)"
                                  : IDEMPOTENCY_RETENTION_HELP,
                          RETENTION_MIN, RETENTION_MAX, &ro->idempotency_s);
        list[n++] =
            whole("inbox-retention", "TXO_INBOX_RETENTION", "604800",
                  command ? INBOX_RETENTION_HELP " (when the tables exist)" : INBOX_RETENTION_HELP,
                  RETENTION_MIN, RETENTION_MAX, &ro->inbox_s);
    }
    list[n++] = whole("clean-batch", "TXO_CLEAN_BATCH", worker ? "1000" : "500",
                      "rows deleted per transaction", 1, TXO_PURGE_BATCH_MAX, &ro->batch);
    if (!worker) {
        list[n++] = whole("clean-pause", "TXO_CLEAN_PAUSE_MS", "20",
                          "milliseconds between two batches, so that the relay keeps its pace", 0,
                          60000, &ro->pause_ms);
        list[n++] = whole("clean-max-batches", "TXO_CLEAN_MAX_BATCHES", "0",
                          "batches per table and pass (0: until nothing old is left)", 0, 1000000,
                          &ro->max_batches);
    }
    /* A daemon's flag says whose archive it is; `txo clean` has nothing else to archive. */
    list[n++] = (struct setting){
        .name = command ? "archive" : "clean-archive",
        .env = "TXO_CLEAN_ARCHIVE_DIR",
        .type = SETTING_STRING,
        .help = CLEAN_ARCHIVE_HELP,
        .target = &ro->archive_dir,
    };
    settings_add(t, list, n);
    settings_add_partition(t, &ro->partition, false);
}

void clean_settings_derive(struct txo_retention_opts *ro)
{
    ro->commands_s = ro->inbox_s;
    ro->partition.batch = ro->batch;
}

bool clean_archive_ok(const char *cmd, const char *flag, const char *dir)
{
    struct txo_error err;
    txo_error_init(&err);
    if (dir == NULL || txo_archive_check_dir(dir, &err) == 0)
        return true;
    cli_error("txo %s: --%s: %s", cmd, flag, err.msg);
    return false;
}
