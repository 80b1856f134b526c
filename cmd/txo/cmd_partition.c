/*
 * `txo partition status|enable|disable|maintain`: the partitioned layout of outbox_events
 * (txo/partition.h). Retention of a partitioned outbox is `txo clean` (and the daemons'
 * cleaners), which drops whole partitions.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "clean.h"
#include "cli_errors.h"
#include "settings.h"

static int run(int argc, char **argv);

const struct command cmd_partition = {
    .name = "partition",
    .summary = "partition outbox_events by id ranges (online), list its partitions, create ahead",
    .usage = "txo partition status|enable|disable|maintain [options]",
    .description =
        "status: prints the layout of outbox_events and, when partitioned, one line per\n"
        "partition: its id range, the server's row estimate and the creation time of its\n"
        "newest event.\n\n"
        "enable: moves outbox_events to the partitioned layout online: a new table is filled\n"
        "beside the live one (triggers copy every write to it, the existing rows are copied in\n"
        "batches of --partition-batch ids), then one RENAME TABLE swaps them. Appends, relays\n"
        "and workers go on meanwhile; ids, sequences and statuses are kept, and a binlog source\n"
        "does not publish the copies. A run killed half way leaves the live table as it was; run\n"
        "it again. On a new install, run it right after `txo migrate`: the copy is empty.\n"
        "The idempotency keys' uniqueness moves to the table outbox_keys.\n\n"
        "disable: the way back, by the same online copy.\n\n"
        "maintain: creates partitions until --partition-ahead empty ones stand above the ids in\n"
        "use (`txo clean` does it too), each spanning about --partition-span seconds of appends\n"
        "at the rate of the newest full partition. When none was left and pmax holds events,\n"
        "only --split-full splits it, copying them while appends wait.\n\n"
        "Retention: `txo clean` then drops whole partitions whose newest event is older than\n"
        "--outbox-retention and whose events are all finished (archiving them first with\n"
        "--archive), instead of deleting rows. Every partition DDL is stopped by the server\n"
        "after 400 ms and tried again after a pause, so that no append waits behind it for\n"
        "the table's metadata lock for longer.",
    .run = run,
    .examples = "# Partition a live outbox, then look at it:\n"
                "txo partition enable\n"
                "txo partition status\n"
                "# A new install with the partitioned layout:\n"
                "txo migrate && txo partition enable --partition-first-ids 10000000\n"
                "# Back to one table:\n"
                "txo partition disable\n",
    .exit_status = "0 when done, 1 when it failed (the reason on standard error; enable and "
                   "disable leave the live table working), 2 on a bad option or usage, or when "
                   "the table already has the asked-for layout.",
};

static struct {
    struct common_opts common;
    struct partition_settings partition;
    bool split_full;
} opts;

static void add_settings(struct settings_table *t)
{
    const struct setting own[] = {
        {.name = "split-full",
         .type = SETTING_BOOL,
         .def = "false",
         .help = "maintain: also split a pmax that holds events (no partition was left ahead), "
                 "copying them: appends wait until the copy is done",
         .target = &opts.split_full},
    };
    settings_add_common(t, &opts.common);
    settings_add_partition(t, &opts.partition, true);
    settings_add(t, own, TXO_ARRAY_LEN(own));
}

static int status(struct txo_db *db, struct txo_error *err)
{
    struct txo_partition_info *parts = NULL;
    size_t n = 0;
    int rc = txo_partition_list(db, &parts, &n, err);
    if (rc < 0)
        return rc;
    if (n == 0)
        printf("outbox_events: unpartitioned\n");
    else
        printf("outbox_events: partitioned, %zu partitions\n%-24s %20s %20s %12s  %s\n", n,
               "PARTITION", "FROM ID", "BELOW ID", "ROWS (EST.)", "NEWEST CREATED_AT");
    for (size_t i = 0; i < n; i++) {
        char upper[24] = "MAXVALUE";
        if (parts[i].upper != 0)
            snprintf(upper, sizeof(upper), "%" PRId64, parts[i].upper);
        printf("%-24s %20" PRId64 " %20s %12" PRIu64 "  %s\n", parts[i].name, parts[i].lower, upper,
               parts[i].rows_est, parts[i].newest_at[0] ? parts[i].newest_at : "-");
    }
    txo_free(parts);
    return 0;
}

/* The copy's progress on a terminal, redrawn at most once per percent. */
static void progress(uint64_t copied, uint64_t total, void *arg)
{
    int *last = arg;
    int pct = total > 0 ? (int)(copied * 100 / total) : 100;
    if (pct == *last)
        return;
    *last = pct;
    fprintf(stderr, "\rtxo partition: copied %3d%% of the ids (%" PRIu64 " of %" PRIu64 ")", pct,
            copied, total);
    if (copied >= total)
        fputc('\n', stderr);
}

static int run(int argc, char **argv)
{
    txo_db_opts_init(&opts.common.db);
    struct settings_table table = {.n = 0};
    add_settings(&table);
    int first = argc;
    enum settings_result r =
        settings_parse(&cmd_partition, table.items, table.n, argc, argv, &first);
    if (r != SETTINGS_OK)
        return r == SETTINGS_EXIT_OK ? 0 : 2;
    if (!common_apply(&opts.common))
        return 2;
    const char *action = first + 1 == argc ? argv[first] : "";
    static const char *const actions[] = {"status", "enable", "disable", "maintain"};
    size_t a = 0;
    while (a < TXO_ARRAY_LEN(actions) && strcmp(action, actions[a]) != 0)
        a++;
    if (a == TXO_ARRAY_LEN(actions)) {
        cli_error("usage: %s", cmd_partition.usage);
        return 2;
    }
    struct txo_partition_opts po;
    partition_settings_apply(&opts.partition, opts.partition.batch, &po);
    po.split_full = opts.split_full;

    struct txo_db *db = common_connect(&opts.common);
    if (db == NULL)
        return 1;
    struct txo_error err;
    txo_error_init(&err);
    int last = -1;
    bool tty = isatty(STDERR_FILENO) && !cli_errors_structured();
    unsigned created = 0;
    int rc;
    switch (a) {
    case 0:
        rc = status(db, &err);
        break;
    case 1:
        rc = txo_partition_enable(db, &po, tty ? progress : NULL, &last, &err);
        break;
    case 2:
        rc = txo_partition_disable(db, &po, tty ? progress : NULL, &last, &err);
        break;
    default:
        rc = txo_partition_maintain(db, &po, &created, &err);
        if (rc == 0)
            printf("created %u partition(s)\n", created);
        break;
    }
    txo_db_close(db);
    if (rc == TXO_ESTATE) {
        cli_error("txo partition %s: %s", action, err.msg);
        return 2;
    }
    if (rc < 0) {
        cmd_report("partition", action, &err);
        return 1;
    }
    if (a == 1 || a == 2)
        fprintf(stderr, "txo partition: outbox_events is %s\n",
                a == 1 ? "partitioned" : "unpartitioned");
    return 0;
}
