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

/* A retention setting: a whole number of seconds in the one range they all share. */
static struct setting retention(const char *name, const char *env, const char *def,
                                const char *help, unsigned *target)
{
    return (struct setting){
        .name = name,
        .env = env,
        .type = SETTING_UINT,
        .def = def,
        .help = help,
        .min = RETENTION_MIN,
        .max = RETENTION_MAX,
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
        list[n++] = (struct setting){
            .name = "clean-interval",
            .env = "TXO_CLEAN_INTERVAL",
            .type = SETTING_UINT,
            .def = worker ? "60" : "0",
            .help = worker ? "seconds between retention passes (0: no cleaner)"
                           : "seconds between retention passes in this process (PUBLISHED "
                             "outbox rows and replayed dead letters; 0: none, run `txo clean` "
                             "instead)",
            .max = 86400,
            .target = &ro->interval_s,
        };
    list[n++] =
        retention("outbox-retention", "TXO_OUTBOX_RETENTION", "604800",
                  "PUBLISHED outbox rows older than this many seconds are deleted", &ro->outbox_s);
    if (!worker)
        list[n++] = retention("dead-letter-retention", "TXO_DEAD_LETTER_RETENTION", "2592000",
                              "dead letters replayed more than this many seconds ago are deleted "
                              "(never replayed ones are kept)",
                              &ro->dead_letters_s);
    if (host != CLEAN_IN_RELAY) {
        /* `txo clean` may run on a database with only the relay's tables. */
        list[n++] = retention("idempotency-retention", "TXO_IDEMPOTENCY_RETENTION", "86400",
                              command ? IDEMPOTENCY_RETENTION_HELP " (when the table exists)"
                                      : IDEMPOTENCY_RETENTION_HELP,
                              &ro->idempotency_s);
        list[n++] = retention("inbox-retention", "TXO_INBOX_RETENTION", "604800",
                              command ? INBOX_RETENTION_HELP " (when the tables exist)"
                                      : INBOX_RETENTION_HELP,
                              &ro->inbox_s);
    }
    list[n++] = (struct setting){
        .name = "clean-batch",
        .env = "TXO_CLEAN_BATCH",
        .type = SETTING_UINT,
        .def = worker ? "1000" : "500",
        .help = "rows deleted per transaction",
        .min = 1,
        .max = TXO_PURGE_BATCH_MAX,
        .target = &ro->batch,
    };
    if (!worker) {
        list[n++] = (struct setting){
            .name = "clean-pause",
            .env = "TXO_CLEAN_PAUSE_MS",
            .type = SETTING_UINT,
            .def = "20",
            .help = "milliseconds between two batches, so that the relay keeps its pace",
            .max = 60000,
            .target = &ro->pause_ms,
        };
        list[n++] = (struct setting){
            .name = "clean-max-batches",
            .env = "TXO_CLEAN_MAX_BATCHES",
            .type = SETTING_UINT,
            .def = "0",
            .help = "batches per table and pass (0: until nothing old is left)",
            .max = 1000000,
            .target = &ro->max_batches,
        };
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
