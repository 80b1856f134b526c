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

/*
 * The partitioned tables' settings (txo/partition.h), with targets in po, which is first set to
 * the library's defaults (the fields no setting names keep them): span and ahead for every
 * cleaner and `txo partition`; with copy, the first width and the copy's batch and pause of
 * enable and disable too (cmd_partition.c).
 */
void settings_add_partition(struct settings_table *t, struct txo_partition_opts *po, bool copy);

/* The cleaners the settings are for: each takes its own subset, with its own defaults. */
enum clean_host {
    CLEAN_IN_RELAY,  /* `txo relay --clean-interval N`: the outbox and the dead letters */
    CLEAN_IN_WORKER, /* `txo worker`, `txo up`: the outbox and the worker's tables */
    CLEAN_COMMAND,   /* `txo clean`: one pass over every table the database has */
};

/*
 * The cleaner's settings for host, with targets in ro, which is first set to the library's
 * defaults (clean_settings.c): the retention of each table the host cleans, the batch, the
 * archive directory (--clean-archive in a daemon, --archive for `txo clean`) and the
 * partitioned tables' settings; a daemon's --clean-interval (the relay's off by default).
 */
void settings_add_clean(struct settings_table *t, struct txo_retention_opts *ro,
                        enum clean_host host);

/*
 * After parsing: the options no setting names are derived from those that are. DONE commands
 * are kept as long as inbox rows (--inbox-retention), and a partitioned table's rows are copied
 * in the cleaner's batches (--clean-batch).
 */
void clean_settings_derive(struct txo_retention_opts *ro);

/* An archive directory (NULL: none) a cleaner can write to; false after saying why on stderr
 * as "txo <cmd>: --<flag>: ..." (the command exits 2, before any write). */
bool clean_archive_ok(const char *cmd, const char *flag, const char *dir);

/* The relay's cleaner thread. */
struct clean_thread {
    struct txo_retention_opts settings; /* with relay_tables_only */
    struct txo_db_opts db_opts;
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    bool running;
    unsigned long long passes;
    unsigned long long deleted;
};

/* Starts the thread when settings->interval_s > 0 (else does nothing): a pass over the outbox
 * and the dead letters every interval_s. False on failure. */
bool clean_thread_start(struct clean_thread *c, const struct txo_retention_opts *settings,
                        const struct txo_db_opts *db_opts);
/* Stops and joins the thread (the pass in progress finishes its batch). Safe when not started. */
void clean_thread_stop(struct clean_thread *c);

extern const struct command cmd_clean;
/* `txo archive cat|verify`: reads the files `txo clean --archive` writes (cmd_archive.c). */
extern const struct command cmd_archive;

#endif
