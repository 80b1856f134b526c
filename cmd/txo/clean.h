/*
 * The retention cleaner as the `txo` commands run it: `txo clean` (one pass, then exit) and
 * `txo relay --clean-interval N` (a pass every N seconds on a thread and a connection of its
 * own, next to the relay). Both purge with the library's cleaner (txo/retention.h): old
 * PUBLISHED outbox rows and replayed dead letters, in short batches, each its own transaction;
 * `txo clean` also the worker's tables when the database has them.
 *
 * Thread-safety: a struct clean_thread is started and stopped by one thread.
 */
#ifndef TXO_CMD_CLEAN_H
#define TXO_CMD_CLEAN_H

#include <pthread.h>
#include <stdbool.h>

#include "settings.h"
#include "txo/retention.h"

/* The partitioned outbox's settings (txo/partition.h): span and ahead for every cleaner and
 * `txo partition`; the first width and the copy's batch and pause for `txo partition` alone. */
struct partition_settings {
    unsigned span_s, ahead;
    unsigned first_ids, batch, pause_ms;
};

/* Appends the partition settings; with copy, those of enable and disable too (cmd_partition.c). */
void settings_add_partition(struct settings_table *t, struct partition_settings *o, bool copy);

/* The library's options from s (the batch of a cleaner: batch). */
void partition_settings_apply(const struct partition_settings *s, unsigned batch,
                              struct txo_partition_opts *po);

struct clean_settings {
    unsigned interval_s; /* relay only: seconds between passes, 0 = no cleaner */
    unsigned outbox_s;
    unsigned dead_letters_s;
    unsigned batch;
    unsigned max_batches;
    unsigned pause_ms;       /* between two batches, so that the relay keeps its pace */
    const char *archive_dir; /* `txo clean --archive`: archive before deleting; NULL: none */
    struct partition_settings partition; /* a partitioned outbox's span and ahead */
};

/* Appends the cleaner's settings; with_interval adds --clean-interval (default 0) and
 * --clean-archive (a daemon's cleaner; `txo clean` has --archive). */
void settings_add_clean(struct settings_table *t, struct clean_settings *o, bool with_interval);

/*
 * The two settings the worker's cleaner and `txo clean` (with the relay's cleaner) share, the
 * same in every table that takes them: --outbox-retention and --clean-archive.
 */
struct setting clean_outbox_retention_setting(unsigned *target);
struct setting clean_archive_setting(const char **target);

/* An archive directory (NULL: none) a cleaner can write to; false after saying why on stderr
 * as "txo <cmd>: --<flag>: ..." (the command exits 2, before any write). */
bool clean_archive_ok(const char *cmd, const char *flag, const char *dir);

/* The help of the archive settings: what is archived. */
#define CLEAN_ARCHIVE_HELP                                                                         \
    "write the outbox rows, dead letters and inbox rows deleted to gzip JSON-lines files under "   \
    "this existing directory first (`txo archive`, `txo replay --archive`)"

/* Rows one pass deleted, per table. */
struct clean_counts {
    uint64_t outbox, dead_letters, idempotency, inbox, commands;
};

/*
 * One pass over the outbox and the dead letters (and, with worker_tables, the idempotency
 * keys, the inbox and the command queue when the database has them), one batch at a time with
 * s->pause_ms between batches. ages: idempotency and inbox/commands retention (worker_tables
 * only). *out receives what was deleted, also on failure. Errors: the first DB error.
 */
int clean_pass(struct txo_db *db, const struct clean_settings *s, bool worker_tables,
               unsigned idempotency_s, unsigned inbox_s, struct clean_counts *out,
               struct txo_error *err);

/* The relay's cleaner thread. */
struct clean_thread {
    struct clean_settings settings;
    struct txo_db_opts db_opts;
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    bool running;
    unsigned long long passes;
    unsigned long long deleted;
};

/* Starts the thread when settings->interval_s > 0 (else does nothing). False on failure. */
bool clean_thread_start(struct clean_thread *c, const struct clean_settings *settings,
                        const struct txo_db_opts *db_opts);
/* Stops and joins the thread (the pass in progress finishes its batch). Safe when not started. */
void clean_thread_stop(struct clean_thread *c);

extern const struct command cmd_clean;
/* `txo archive cat|verify`: reads the files `txo clean --archive` writes (cmd_archive.c). */
extern const struct command cmd_archive;

#endif
