/*
 * `txo partition status|enable|disable|maintain [outbox|inbox]`: the partitioned layouts of
 * outbox_events and inbox_events (txo/partition.h). Retention of a partitioned table is `txo
 * clean` (and the daemons' cleaners), which drops whole partitions.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clean.h"
#include "cli_errors.h"
#include "settings.h"

static int run(int n_args, char **args);
static void add_settings(struct settings_table *t);

const struct command cmd_partition = {
    .name = "partition",
    .summary = "partition the outbox (by ids) or the inbox (by time) online, list, create ahead",
    .usage = "txo partition status|enable|disable|maintain [outbox|inbox] [options]",
    .description =
        "TABLE is outbox (outbox_events, the default) or inbox (inbox_events); status without\n"
        "one shows both.\n\n"
        "status: prints each table's layout and, when partitioned, one line per partition: the\n"
        "outbox's id range, the server's row estimate and the creation time of its newest\n"
        "event; the inbox's range of creation times (UTC) and row estimate; and whether a\n"
        "layout change is under way, or was stopped before its swap.\n\n"
        "enable: moves the table to the partitioned layout online: a new table is filled\n"
        "beside the live one (triggers copy every write to it, the existing rows are copied in\n"
        "batches of --partition-batch rows), then one RENAME TABLE swaps them. Appends,\n"
        "consumers, relays and workers go on meanwhile; every column is kept, and a binlog\n"
        "source does not publish the outbox's copies. A run killed half way leaves the live\n"
        "table as it was; run it again. On a new install, run it right after `txo migrate`: the\n"
        "copy is empty. The outbox is partitioned by ranges of ids, and the uniqueness of its\n"
        "idempotency keys moves to the table outbox_keys; the inbox by ranges of created_at,\n"
        "--partition-span seconds each (aligned in UTC: a day is midnight to midnight), and\n"
        "its duplicate check moves to the table inbox_keys.\n\n"
        "disable: the way back, by the same online copy.\n\n"
        "maintain: creates partitions until --partition-ahead empty ones stand ahead (`txo\n"
        "clean` does it too): the outbox's above the ids in use, each spanning about\n"
        "--partition-span seconds of appends at the rate of the newest full partition; the\n"
        "inbox's after now. When none was left and pmax holds rows, only --split-full splits\n"
        "it, copying them while writers wait.\n\n"
        "Retention: `txo clean` then drops whole partitions instead of deleting rows\n"
        "(archiving them first with --archive): the outbox's whose newest event is older than\n"
        "--outbox-retention and whose events are all finished; the inbox's whose range ended\n"
        "--inbox-retention ago, after moving its rows not processed yet (or processed since)\n"
        "to the partition of now. Every partition DDL is stopped by the server after 400 ms and\n"
        "tried again after a pause, so that no writer waits behind it for the table's metadata\n"
        "lock for longer.",
    .add_settings = add_settings,
    .run_args = run,
    .examples = "# Partition a live outbox, then look at it:\n"
                "txo partition enable\n"
                "txo partition status\n"
                "# A new install with the partitioned layout:\n"
                "txo migrate && txo partition enable --partition-first-ids 10000000\n"
                "# The inbox in partitions of a day:\n"
                "txo partition enable inbox\n"
                "# Back to one table:\n"
                "txo partition disable\n",
    .exit_status = "0 when done, 1 when it failed (the reason on standard error; enable and "
                   "disable leave the live table working), 2 on a bad option or usage, or when "
                   "the table already has the asked-for layout.",
};

static struct {
    struct common_opts common;
    struct txo_partition_opts partition;
} opts;

static void add_settings(struct settings_table *t)
{
    const struct setting own[] = {
        {.name = "split-full",
         .type = SETTING_BOOL,
         .def = "false",
         .help = "maintain: also split a pmax that holds events (no partition was left ahead), "
                 "copying them: appends wait until the copy is done",
         .target = &opts.partition.split_full},
    };
    settings_add_common(t, &opts.common);
    settings_add_partition(t, &opts.partition, true);
    settings_add(t, own, TXO_ARRAY_LEN(own));
}

/* A Unix time as "YYYY-MM-DD HH:MM:SS" UTC; "-" for 0 (no bound). */
static void format_time(int64_t t, char *out, size_t size)
{
    time_t s = (time_t)t;
    struct tm tm;
    if (t == 0 || gmtime_r(&s, &tm) == NULL || strftime(out, size, "%Y-%m-%d %H:%M:%S", &tm) == 0)
        snprintf(out, size, "-");
}

static int status(struct txo_db *db, enum txo_partition_table table, struct txo_error *err)
{
    const char *name = txo_partition_table_name(table);
    bool exists = false;
    int rc = txo_schema_has_table(db, name, &exists, err);
    if (rc < 0 || !exists) {
        if (rc == 0)
            printf("%s: no such table\n", name);
        return rc;
    }
    bool pending = false;
    rc = txo_partition_change_pending(db, table, &pending, err);
    if (rc < 0)
        return rc;
    if (pending)
        printf("%s: a layout change is under way or was stopped before its swap: its triggers "
               "copy every write to %s_txo_new. Run `txo partition enable|disable` again to "
               "finish it.\n",
               name, name);
    struct txo_partition_info *parts = NULL;
    size_t n = 0;
    rc = txo_partition_list(db, table, &parts, &n, err);
    if (rc < 0)
        return rc;
    bool inbox = table == TXO_PARTITION_INBOX;
    if (n == 0)
        printf("%s: unpartitioned\n", name);
    else if (inbox)
        printf("%s: partitioned, %zu partitions\n%-24s %20s %20s %12s\n", name, n, "PARTITION",
               "FROM (UTC)", "BELOW (UTC)", "ROWS (EST.)");
    else
        printf("%s: partitioned, %zu partitions\n%-24s %20s %20s %12s  %s\n", name, n, "PARTITION",
               "FROM ID", "BELOW ID", "ROWS (EST.)", "NEWEST CREATED_AT");
    for (size_t i = 0; i < n; i++) {
        char lower[24], upper[24] = "MAXVALUE";
        if (inbox) {
            format_time(parts[i].lower, lower, sizeof(lower));
            if (parts[i].upper != 0)
                format_time(parts[i].upper, upper, sizeof(upper));
            printf("%-24s %20s %20s %12" PRIu64 "\n", parts[i].name, lower, upper,
                   parts[i].rows_est);
            continue;
        }
        snprintf(lower, sizeof(lower), "%" PRId64, parts[i].lower);
        if (parts[i].upper != 0)
            snprintf(upper, sizeof(upper), "%" PRId64, parts[i].upper);
        printf("%-24s %20s %20s %12" PRIu64 "  %s\n", parts[i].name, lower, upper,
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
    fprintf(stderr, "\rtxo partition: copied %3d%% of the rows (%" PRIu64 " of about %" PRIu64 ")",
            pct, copied, total);
    if (copied >= total)
        fputc('\n', stderr);
}

static int run(int n_args, char **args)
{
    const char *action = n_args > 0 ? args[0] : "";
    const char *which = n_args > 1 ? args[1] : NULL;
    static const char *const actions[] = {"status", "enable", "disable", "maintain"};
    size_t a = 0;
    while (a < TXO_ARRAY_LEN(actions) && strcmp(action, actions[a]) != 0)
        a++;
    enum txo_partition_table target = TXO_PARTITION_OUTBOX;
    if (which != NULL && strcmp(which, "inbox") == 0)
        target = TXO_PARTITION_INBOX;
    else if (which != NULL && strcmp(which, "outbox") != 0)
        a = TXO_ARRAY_LEN(actions);
    if (a == TXO_ARRAY_LEN(actions) || n_args > 2) {
        cli_error("usage: %s", cmd_partition.usage);
        return 2;
    }
    const struct txo_partition_opts *po = &opts.partition;
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
        rc = status(db, target, &err);
        if (rc == 0 && which == NULL)
            rc = status(db, TXO_PARTITION_INBOX, &err);
        break;
    case 1:
        rc = txo_partition_enable(db, target, po, tty ? progress : NULL, &last, &err);
        break;
    case 2:
        rc = txo_partition_disable(db, target, po, tty ? progress : NULL, &last, &err);
        break;
    default:
        rc = txo_partition_maintain(db, target, po, &created, &err);
        if (rc == 0)
            printf("created %u partition(s)\n", created);
        break;
    }
    txo_db_close(db);
    if (rc == TXO_ESTATE || rc == TXO_ENOTFOUND) {
        cli_error("txo partition %s: %s", action, err.msg);
        return 2;
    }
    if (rc < 0) {
        cmd_report("partition", action, &err);
        return 1;
    }
    if (a == 1 || a == 2)
        fprintf(stderr, "txo partition: %s is %s\n", txo_partition_table_name(target),
                a == 1 ? "partitioned" : "unpartitioned");
    return 0;
}
