/*
 * Operations on a running system, as `txo` subcommands (the same data as the admin
 * endpoints of the HTTP API):
 *   txo stats                   outbox, sagas, commands and dead letters at a glance
 *   txo dlq list [--after-id N] [--limit N]
 *   txo dlq replay ID...        dead letters' events back to PENDING for the relay
 *   txo dlq skip ID...          dead letters' events given up (SKIPPED): their aggregates go on
 *   txo saga show ID            a saga and its steps
 *   txo saga show --order N     the saga of an order
 *   txo saga list --stuck       the sagas that need an operator
 *   txo saga retry ID           retries a COMPENSATION_FAILED saga now
 * The listings print tables, or with --json one JSON document, both from the same document
 * (listing.h).
 * Exit status: 0 done, 1 failed (the reason on stderr), 2 usage.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli_errors.h"
#include "daemons.h"
#include "listing.h"
#include "order_saga.h"
#include "orders.h"
#include "txo/binlog.h"
#include "txo/cmdq.h"
#include "txo/dlq.h"
#include "txo/relay.h"

/* ---- txo stats ---- */

static int stats_run(void);
static void add_stats_settings(struct settings_table *t);

const struct command cmd_stats = {
    .name = "stats",
    .summary = "print outbox, saga, command and dead-letter counts",
    .usage = "txo stats [options]",
    .description = "Counts outbox events per status (with the relay's lag, the age of the oldest\n"
                   "event not yet published, and the age of the oldest FAILED one),\n"
                   "sagas per status, commands per status and dead letters, then the aggregates\n"
                   "an ordered relay holds back behind a failed event. --json prints one JSON\n"
                   "object instead of the tables. On a database migrated with\n"
                   "`txo migrate --only outbox` the sagas and commands are null.",
    .add_settings = add_stats_settings,
    .run = stats_run,
    .examples = "# The counts as a table, then as one JSON object:\n"
                "txo stats\n"
                "txo stats --json\n",
};

static struct {
    struct common_opts common;
    bool json;
} stats_opts;

/* The settings of this command, in --help order. */
static void add_stats_settings(struct settings_table *t)
{
    settings_add_common(t, &stats_opts.common);
    listing_add_json_setting(t, &stats_opts.json,
                             "print one JSON object (outbox, sagas, commands, dead_letters, "
                             "parked) instead of the tables");
}

/* Parked aggregates `txo stats` shows at most. */
#define STATS_PARKED_MAX 20
/* Binlog sources `txo stats` shows at most. */
#define STATS_BINLOG_MAX 16

/* What `txo stats` read, before it is printed. */
struct stats {
    struct txo_outbox_stats outbox;
    bool has_sagas; /* false on an outbox-only schema (`txo migrate --only outbox`) */
    struct txo_saga_counts sagas;
    bool has_commands;
    uint64_t commands[3]; /* pending, processing, failed */
    uint64_t dead_letters, dead_letters_unreplayed;
    /* Aggregates held back by a failed event (relays with --ordering aggregate), oldest first. */
    struct txo_relay_parked parked[STATS_PARKED_MAX];
    size_t n_parked;
    /* The relay's binlog sources (`txo relay --source binlog`), by name. */
    struct txo_binlog_source_info binlog[STATS_BINLOG_MAX];
    size_t n_binlog;
};

static int read_stats(struct txo_db *db, struct stats *st, struct txo_error *err)
{
    if (txo_schema_has_table(db, "saga_instances", &st->has_sagas, err) != 0 ||
        txo_schema_has_table(db, "command_queue", &st->has_commands, err) != 0 ||
        txo_outbox_get_stats(db, &st->outbox, err) != 0 ||
        (st->has_sagas && txo_saga_count(db, &st->sagas, err) != 0) ||
        (st->has_commands &&
         txo_cmdq_stats(db, &st->commands[0], &st->commands[1], &st->commands[2], err) != 0) ||
        txo_dlq_count(db, &st->dead_letters, &st->dead_letters_unreplayed, err) != 0 ||
        txo_relay_list_parked(db, st->parked, TXO_ARRAY_LEN(st->parked), &st->n_parked, err) != 0 ||
        txo_binlog_list_sources(db, st->binlog, TXO_ARRAY_LEN(st->binlog), &st->n_binlog, err) != 0)
        return -1;
    return 0;
}

/*
 * The document `txo stats --json` prints: {"outbox":{"pending","processing","published",
 * "failed","oldest_pending_age_seconds","oldest_failed_age_seconds"},"sagas":{STATUS:N,...},
 * "saga_compensation_abandoned":N,"commands":{"pending","processing","failed"},
 * "dead_letters":{"total","unreplayed"},"parked":[{"aggregate_type","aggregate_id","event_id",
 * "status","attempts","last_error","waiting"}],"binlog_sources":[{"name","owner","reading",
 * "position","gtid","high_water_id","position_age_seconds"}]}; sagas,
 * saga_compensation_abandoned and commands are null on an outbox-only schema. NULL when out of
 * memory.
 */
static json_t *stats_json(const struct stats *st)
{
    const struct txo_outbox_stats *os = &st->outbox;
    json_t *sagas = json_null();
    if (st->has_sagas) {
        json_decref(sagas);
        sagas = json_object();
        for (int s = 0; sagas != NULL && s < TXO_SAGA_STATUS_COUNT; s++)
            json_object_set_new(sagas, txo_saga_status_name((enum txo_saga_status)s),
                                json_integer((json_int_t)st->sagas.by_status[s]));
    }
    json_t *parked = json_array();
    for (size_t i = 0; parked != NULL && i < st->n_parked; i++) {
        const struct txo_relay_parked *p = &st->parked[i];
        json_array_append_new(
            parked,
            json_pack("{s:o,s:o,s:I,s:s,s:I,s:o,s:I}", "aggregate_type",
                      listing_str(p->aggregate_type), "aggregate_id", listing_str(p->aggregate_id),
                      "event_id", (json_int_t)p->event_id, "status",
                      txo_outbox_status_name(p->status), "attempts", (json_int_t)p->attempts,
                      "last_error", listing_str(p->last_error), "waiting", (json_int_t)p->waiting));
    }
    json_t *binlog = json_array();
    for (size_t i = 0; binlog != NULL && i < st->n_binlog; i++) {
        const struct txo_binlog_source_info *b = &st->binlog[i];
        char pos[300];
        snprintf(pos, sizeof(pos), "%s:%" PRIu64, b->file, b->offset);
        json_array_append_new(
            binlog, json_pack("{s:s,s:s,s:b,s:s,s:s,s:I,s:f}", "name", b->name, "owner", b->owner,
                              "reading", b->reading, "position", b->file[0] != '\0' ? pos : "",
                              "gtid", b->gtid, "high_water_id", (json_int_t)b->high_water_id,
                              "position_age_seconds", b->position_age_s));
    }
    return json_pack(
        "{s:{s:I,s:I,s:I,s:I,s:f,s:f},s:o,s:o,s:o,s:{s:I,s:I},s:o,s:o}", "outbox", "pending",
        (json_int_t)os->pending, "processing", (json_int_t)os->processing, "published",
        (json_int_t)os->published, "failed", (json_int_t)os->failed, "oldest_pending_age_seconds",
        os->oldest_pending_age_s, "oldest_failed_age_seconds", os->oldest_failed_age_s, "sagas",
        sagas, "saga_compensation_abandoned",
        st->has_sagas ? json_integer((json_int_t)st->sagas.abandoned) : json_null(), "commands",
        st->has_commands
            ? json_pack("{s:I,s:I,s:I}", "pending", (json_int_t)st->commands[0], "processing",
                        (json_int_t)st->commands[1], "failed", (json_int_t)st->commands[2])
            : json_null(),
        "dead_letters", "total", (json_int_t)st->dead_letters, "unreplayed",
        (json_int_t)st->dead_letters_unreplayed, "parked", parked, "binlog_sources", binlog);
}

/* Appends {"area","status","count","oldest_s"} to rows: count NULL for a note without one. */
static void stats_row(json_t *rows, const char *area, const char *status, json_t *count,
                      json_t *oldest_s)
{
    json_array_append_new(rows, json_pack("{s:s,s:s,s:o,s:o}", "area", area, "status", status,
                                          "count", count != NULL ? count : json_null(), "oldest_s",
                                          oldest_s != NULL ? oldest_s : json_null()));
}

/* Appends a row per member of the object group (NULL or null: the note instead). */
static void stats_group_rows(json_t *rows, const char *area, const json_t *group, const char *note)
{
    if (!json_is_object(group)) {
        stats_row(rows, area, note, NULL, NULL);
        return;
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)group, key, v)
    {
        stats_row(rows, area, key, json_incref(v), NULL);
    }
}

/* The tables of `txo stats`, read from the document --json prints. */
static void print_stats_tables(const json_t *doc, void *arg)
{
    (void)arg;
    static const struct listing_column counts[] = {
        {.key = "area", .header = "AREA"},
        {.key = "status", .header = "STATUS"},
        {.key = "count", .header = "COUNT"},
        {.key = "oldest_s", .header = "OLDEST_S"},
    };
    static const struct listing_column parked_cols[] = {
        {.key = "aggregate_type", .header = "AGGREGATE_TYPE", .max_width = 24},
        {.key = "aggregate_id", .header = "AGGREGATE_ID", .max_width = 24},
        {.key = "event_id", .header = "EVENT_ID"},
        {.key = "status", .header = "STATUS"},
        {.key = "attempts", .header = "ATTEMPTS"},
        {.key = "waiting", .header = "WAITING"},
        {.key = "last_error", .header = "LAST_ERROR", .max_width = 60},
    };
    json_t *rows = json_array();
    if (rows == NULL) {
        fputs("txo stats: out of memory\n", stderr);
        return;
    }
    const json_t *outbox = json_object_get(doc, "outbox");
    stats_row(rows, "outbox", "pending", json_incref(json_object_get(outbox, "pending")),
              json_incref(json_object_get(outbox, "oldest_pending_age_seconds")));
    stats_row(rows, "outbox", "processing", json_incref(json_object_get(outbox, "processing")),
              NULL);
    stats_row(rows, "outbox", "published", json_incref(json_object_get(outbox, "published")), NULL);
    stats_row(rows, "outbox", "failed", json_incref(json_object_get(outbox, "failed")),
              json_incref(json_object_get(outbox, "oldest_failed_age_seconds")));
    const char *no_table = "(none: an outbox-only schema)";
    stats_group_rows(rows, "sagas", json_object_get(doc, "sagas"), no_table);
    json_t *abandoned = json_object_get(doc, "saga_compensation_abandoned");
    if (!json_is_null(abandoned))
        stats_row(rows, "sagas", "compensation given up", json_incref(abandoned), NULL);
    stats_group_rows(rows, "commands", json_object_get(doc, "commands"), no_table);
    const json_t *dl = json_object_get(doc, "dead_letters");
    stats_row(rows, "dead letters", "total", json_incref(json_object_get(dl, "total")), NULL);
    stats_row(rows, "dead letters", "never replayed",
              json_incref(json_object_get(dl, "unreplayed")), NULL);
    listing_table(stdout, counts, TXO_ARRAY_LEN(counts), rows);
    json_decref(rows);

    static const struct listing_column binlog_cols[] = {
        {.key = "name", .header = "SOURCE"},
        {.key = "owner", .header = "OWNER", .max_width = 32},
        {.key = "reading", .header = "READING"},
        {.key = "position", .header = "POSITION", .max_width = 40},
        {.key = "high_water_id", .header = "HIGH_WATER_ID"},
        {.key = "position_age_seconds", .header = "POSITION_AGE_S"},
    };
    const json_t *binlog = json_object_get(doc, "binlog_sources");
    if (json_array_size(binlog) > 0) {
        printf("\nBinlog sources of the relay (txo relay --source binlog)\n");
        listing_table(stdout, binlog_cols, TXO_ARRAY_LEN(binlog_cols), binlog);
    }
    const json_t *parked = json_object_get(doc, "parked");
    size_t n = json_array_size(parked);
    if (n == 0)
        return;
    printf("\nParked: %zu%s aggregate%s held back by a failed event, oldest first\n", n,
           n == STATS_PARKED_MAX ? " (or more)" : "", n == 1 ? "" : "s");
    listing_table(stdout, parked_cols, TXO_ARRAY_LEN(parked_cols), parked);
}

static int stats_run(void)
{
    struct txo_db *db = common_connect(&stats_opts.common);
    if (db == NULL)
        return 1;
    struct txo_error err;
    txo_error_init(&err);
    struct stats st;
    memset(&st, 0, sizeof(st));
    int rc = read_stats(db, &st, &err);
    txo_db_close(db);
    if (rc != 0) {
        cmd_report("stats", "reading the counts", &err);
        return 1;
    }
    json_t *doc = stats_json(&st);
    return listing_print("stats", doc, stats_opts.json, print_stats_tables, NULL) == 0 ? 0 : 1;
}

/* ---- txo dlq ---- */

static int dlq_run(int n_args, char **args);
static void add_dlq_settings(struct settings_table *t);

const struct command cmd_dlq = {
    .name = "dlq",
    .summary = "list dead letters, replay them (events back to PENDING) or skip them",
    .usage =
        "txo dlq list [options] | txo dlq replay [options] ID... | txo dlq skip [options] ID...",
    .description =
        "list: prints a table of dead letters (events the relay gave up on after\n"
        "--max-attempts), oldest first, from --after-id, at most --limit; --json prints one\n"
        "JSON array of them instead. replay ID...: puts each dead letter's outbox\n"
        "event back to PENDING with attempts 0, in one transaction per letter, so a running\n"
        "relay publishes it again; the letter records the replay. Fix the cause first.\n"
        "skip ID...: gives up each dead letter's event (SKIPPED, never published); with the\n"
        "relay's --ordering aggregate the later events of its aggregate, held back while it was\n"
        "FAILED, are then published.",
    .add_settings = add_dlq_settings,
    .run_args = dlq_run,
    .examples = "# The first 20 dead letters, then the next page as JSON:\n"
                "txo dlq list --limit 20\n"
                "txo dlq list --after-id 20 --limit 20 --json\n"
                "# Publish the events of dead letters 21 and 22 again:\n"
                "txo dlq replay 21 22\n",
    .exit_status =
        "0 when every dead letter was listed, replayed or skipped, 1 when one could not be "
        "(the reason on standard error), 2 on a bad option, id or usage.",
};

static struct {
    struct common_opts common;
    unsigned after_id;
    unsigned limit;
    bool json;
} dlq_opts;

/* The settings of this command, in --help order. */
static void add_dlq_settings(struct settings_table *t)
{
    const struct setting own[] = {
        {.name = "after-id",
         .type = SETTING_UINT,
         .def = "0",
         .help = "list: start after this dead letter id",
         .max = 4294967295UL,
         .target = &dlq_opts.after_id},
        {.name = "limit",
         .type = SETTING_UINT,
         .def = "50",
         .help = "list: at most this many",
         .min = 1,
         .max = 10000,
         .target = &dlq_opts.limit},
    };
    settings_add_common(t, &dlq_opts.common);
    settings_add(t, own, TXO_ARRAY_LEN(own));
    listing_add_json_setting(t, &dlq_opts.json,
                             "list: print one JSON array of the dead letters instead of the table");
}

/*
 * The document `txo dlq list --json` prints: [{"id","source_event_id","event_type","created_at",
 * "replay_count","replayed_at","skipped_at","error","payload"}] (replayed_at and skipped_at null
 * when never; payload the event's JSON, or its text when it is not JSON). NULL when out of
 * memory.
 */
static json_t *dead_letters_json(const struct txo_dead_letter *dl, size_t n)
{
    json_t *list = json_array();
    for (size_t i = 0; list != NULL && i < n; i++) {
        json_t *payload = json_loads(dl[i].payload, JSON_DECODE_ANY, NULL);
        json_t *row = json_pack("{s:I,s:I,s:o,s:s,s:I,s:o,s:o,s:o,s:o}", "id", (json_int_t)dl[i].id,
                                "source_event_id", (json_int_t)dl[i].source_event_id, "event_type",
                                listing_str(dl[i].event_type), "created_at", dl[i].created_at,
                                "replay_count", (json_int_t)dl[i].replay_count, "replayed_at",
                                listing_str(dl[i].replayed_at), "skipped_at",
                                listing_str(dl[i].skipped_at), "error", listing_str(dl[i].error),
                                "payload", payload != NULL ? payload : listing_str(dl[i].payload));
        if (json_array_append_new(list, row) != 0) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

static int dlq_list(struct txo_db *db)
{
    static const struct listing_column cols[] = {
        {.key = "id", .header = "ID"},
        {.key = "source_event_id", .header = "EVENT_ID"},
        {.key = "event_type", .header = "EVENT_TYPE", .max_width = 32},
        {.key = "created_at", .header = "CREATED_AT"},
        {.key = "replay_count", .header = "REPLAYS"},
        {.key = "skipped_at", .header = "SKIPPED_AT"},
        {.key = "error", .header = "ERROR", .max_width = 60},
    };
    struct txo_error err;
    txo_error_init(&err);
    struct txo_dead_letter *dl = NULL;
    size_t n = 0;
    if (txo_dlq_list(db, dlq_opts.after_id, dlq_opts.limit, &dl, &n, &err) != 0) {
        cmd_report("dlq", "listing dead letters", &err);
        return 1;
    }
    json_t *doc = dead_letters_json(dl, n);
    txo_dead_letters_free(dl, n);
    struct listing_columns table = {cols, TXO_ARRAY_LEN(cols)};
    return listing_print("dlq", doc, dlq_opts.json, listing_rows, &table) == 0 ? 0 : 1;
}

static int dlq_act(struct txo_db *db, bool skip, int n_ids, char **ids)
{
    int status = 0;
    for (int i = 0; i < n_ids; i++) {
        char *end = NULL;
        long long id = strtoll(ids[i], &end, 10);
        if (end == ids[i] || *end != '\0' || id <= 0) {
            cli_error("txo dlq: \"%s\" is not a dead letter id", ids[i]);
            status = 2;
            continue;
        }
        struct txo_error err;
        txo_error_init(&err);
        int rc = skip ? txo_dlq_skip(db, (int64_t)id, &err) : txo_dlq_replay(db, (int64_t)id, &err);
        if (rc != 0) {
            cmd_report("dlq", skip ? "skipping" : "replaying", &err);
            status = status == 0 ? 1 : status;
            continue;
        }
        if (skip)
            printf("skipped dead letter %lld: its event is SKIPPED, its aggregate goes on\n", id);
        else
            printf("replayed dead letter %lld: its event is PENDING again\n", id);
    }
    return status;
}

static int dlq_run(int n_args, char **args)
{
    const char *action = n_args > 0 ? args[0] : NULL;
    bool list = action != NULL && strcmp(action, "list") == 0 && n_args == 1;
    bool replay = action != NULL && strcmp(action, "replay") == 0 && n_args > 1;
    bool skip = action != NULL && strcmp(action, "skip") == 0 && n_args > 1;
    if (!list && !replay && !skip) {
        cli_error("usage: %s", cmd_dlq.usage);
        return 2;
    }
    struct txo_db *db = common_connect(&dlq_opts.common);
    if (db == NULL)
        return 1;
    int status = list ? dlq_list(db) : dlq_act(db, skip, n_args - 1, args + 1);
    txo_db_close(db);
    return status;
}

/* ---- txo saga ---- */

static int saga_run(int n_args, char **args);
static void add_saga_settings(struct settings_table *t);

const struct command cmd_saga = {
    .name = "saga",
    .summary = "show a saga and its steps, list the stuck ones, or retry a COMPENSATION_FAILED one",
    .usage = "txo saga show [options] ID | txo saga show --order N | txo saga list --stuck "
             "[--idle S] | txo saga retry [options] ID",
    .description =
        "show: prints the saga (status, owner, deadline, times, payload), then a table of its\n"
        "steps (status, attempts, remote state, deadline, last error); --json prints one JSON\n"
        "object instead; --order N finds the saga of order N. list --stuck: the sagas that need\n"
        "an operator: RUNNING or COMPENSATING with no live owner for --idle seconds (no worker\n"
        "runs them), RUNNING ones past a deadline even under a live owner (a worker hung in a\n"
        "step: which deadline, the step, by how long), and COMPENSATION_FAILED ones the engine\n"
        "gave up retrying; a table (or with --json one array), exit status 1 when there is\n"
        "any. retry: moves a COMPENSATION_FAILED saga back to COMPENSATING and runs its\n"
        "compensations now, calling the external services configured here (the worker also\n"
        "retries them by itself while their retry is scheduled).",
    .add_settings = add_saga_settings,
    .run_args = saga_run,
    .examples = "# The saga of order 42 with its steps, then as JSON:\n"
                "txo saga show --order 42\n"
                "txo saga show --json 7d0f6c1e-2a4b-4c8e-9f10-3b5a6d7e8f90\n"
                "# The sagas no worker has moved for 5 minutes, or that were given up:\n"
                "txo saga list --stuck --idle 300\n",
    .exit_status =
        "0 when done (list --stuck: when no saga is stuck); 1 when it failed, when list "
        "--stuck found a stuck saga, or when retry did not end COMPENSATED; 2 on a bad option "
        "or usage.",
};

static struct {
    struct common_opts common;
    unsigned order_id;
    bool stuck;
    unsigned idle_s;
    bool json;
    struct services_settings services;
} saga_opts;

/* The settings of this command, in --help order. */
static void add_saga_settings(struct settings_table *t)
{
    const struct setting own[] = {
        {.name = "order",
         .type = SETTING_UINT,
         .def = "0",
         .help = "show: the saga of this order id",
         .max = 4294967295UL,
         .target = &saga_opts.order_id},
        {.name = "stuck",
         .type = SETTING_BOOL,
         .def = "false",
         .help = "list: the stuck sagas (the only list there is)",
         .target = &saga_opts.stuck},
        {.name = "idle",
         .type = SETTING_UINT,
         .def = "60",
         .help = "list --stuck: seconds without a live owner before a running saga counts",
         .min = 1,
         .max = 31536000,
         .target = &saga_opts.idle_s},
    };
    settings_add_common(t, &saga_opts.common);
    settings_add(t, own, TXO_ARRAY_LEN(own));
    listing_add_json_setting(t, &saga_opts.json,
                             "show, list: print the JSON document (show: one object, list: one "
                             "array) instead of the tables");
    settings_add_services(t, &saga_opts.services);
}

/* `txo saga show` in tables, read from the document --json prints (txo_saga_info_json). */
static void print_saga_tables(const json_t *doc, void *arg)
{
    (void)arg;
    static const struct listing_column instance[] = {
        {.key = "saga_id", .header = "SAGA_ID"},
        {.key = "saga_type", .header = "TYPE"},
        {.key = "correlation_id", .header = "CORRELATION_ID"},
        {.key = "status", .header = "STATUS"},
        {.key = "owner", .header = "OWNER"},
        {.key = "deadline_at", .header = "DEADLINE"},
        {.key = "created_at", .header = "CREATED_AT"},
        {.key = "updated_at", .header = "UPDATED_AT"},
        {.key = "compensation_tries", .header = "COMPENSATION_TRIES"},
        {.key = "retry_scheduled", .header = "RETRY_SCHEDULED"},
        {.key = "payload", .header = "PAYLOAD", .max_width = 80},
    };
    static const struct listing_column steps[] = {
        {.key = "step", .header = "STEP"},
        {.key = "name", .header = "NAME", .max_width = 32},
        {.key = "status", .header = "STATUS"},
        {.key = "attempts", .header = "ATTEMPTS"},
        {.key = "remote", .header = "REMOTE"},
        {.key = "deadline_at", .header = "DEADLINE"},
        {.key = "error", .header = "LAST_ERROR", .max_width = 60},
    };
    listing_record(stdout, instance, TXO_ARRAY_LEN(instance), doc);
    putchar('\n');
    listing_table(stdout, steps, TXO_ARRAY_LEN(steps), json_object_get(doc, "steps"));
}

static int saga_show(struct txo_db *db, const char *id)
{
    struct txo_error err;
    txo_error_init(&err);
    char found[TXO_SAGA_ID_LEN];
    if (id == NULL) {
        char correlation[64];
        snprintf(correlation, sizeof(correlation), "order:%u", saga_opts.order_id);
        if (txo_saga_find(db, ORDER_SAGA_TYPE, correlation, found, &err) != 0) {
            cmd_report("saga", "finding the saga of the order", &err);
            return 1;
        }
        id = found;
    }
    struct txo_saga_info info;
    if (txo_saga_load(db, id, &info, &err) != 0) {
        cmd_report("saga", "loading the saga", &err);
        return 1;
    }
    char *text = txo_saga_info_json(&info, &err);
    txo_saga_info_release(&info);
    if (text == NULL) {
        cmd_report("saga", "printing the saga", &err);
        return 1;
    }
    json_t *doc = json_loads(text, 0, NULL);
    txo_free(text);
    return listing_print("saga", doc, saga_opts.json, print_saga_tables, NULL) == 0 ? 0 : 1;
}

static int saga_retry(struct txo_db *db, const char *id)
{
    struct order_services *services = NULL;
    if (!daemon_services_new("saga", &saga_opts.services, NULL, &services))
        return 2;
    struct txo_error err;
    txo_error_init(&err);
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    int rc = orders_retry_saga_with(db, id, services, NULL, NULL, &final, &err);
    order_services_free(services);
    if (rc != 0) {
        cmd_report("saga", "retrying", &err);
        return 1;
    }
    printf("saga %s is %s\n", id, txo_saga_status_name(final));
    return final == TXO_SAGA_COMPENSATED ? 0 : 1;
}

/*
 * The document `txo saga list --stuck --json` prints: [{"saga_id","saga_type","status",
 * "idle_seconds","reason","deadline","step","overdue_seconds"}]. reason is past_deadline (a
 * RUNNING saga past the deadline named by deadline, try, step or saga, at step, overdue_seconds
 * ago), given_up (COMPENSATION_FAILED, no retry scheduled: txo saga retry ID) or no_live_owner;
 * deadline, step and overdue_seconds are null unless past_deadline (step also between steps).
 */
static json_t *stuck_json(const struct txo_saga_ref *refs, size_t n)
{
    json_t *list = json_array();
    for (size_t i = 0; list != NULL && i < n; i++) {
        const struct txo_saga_ref *ref = &refs[i];
        bool late = ref->deadline != TXO_DEADLINE_NONE;
        const char *reason = late                                          ? "past_deadline"
                             : ref->status == TXO_SAGA_COMPENSATION_FAILED ? "given_up"
                                                                           : "no_live_owner";
        json_t *row = json_pack(
            "{s:s,s:o,s:s,s:I,s:s,s:o,s:o,s:o}", "saga_id", ref->id, "saga_type",
            listing_str(ref->type), "status", txo_saga_status_name(ref->status), "idle_seconds",
            (json_int_t)ref->idle_s, "reason", reason, "deadline",
            late ? json_string(txo_saga_deadline_name(ref->deadline)) : json_null(), "step",
            late && ref->step[0] != '\0' ? listing_str(ref->step) : json_null(), "overdue_seconds",
            late ? json_integer((json_int_t)ref->overdue_s) : json_null());
        if (json_array_append_new(list, row) != 0) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

/* txo saga list --stuck: a table (or JSON array) of the stuck sagas; 1 when there is any. */
static int saga_list_stuck(struct txo_db *db)
{
    static const struct listing_column cols[] = {
        {.key = "saga_id", .header = "SAGA_ID"},
        {.key = "saga_type", .header = "TYPE", .max_width = 24},
        {.key = "status", .header = "STATUS"},
        {.key = "idle_seconds", .header = "IDLE_S"},
        {.key = "reason", .header = "REASON"},
        {.key = "deadline", .header = "DEADLINE"},
        {.key = "step", .header = "STEP", .max_width = 32},
        {.key = "overdue_seconds", .header = "OVERDUE_S"},
    };
    static struct txo_saga_ref refs[1000];
    size_t n = 0;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_saga_list_stuck(db, saga_opts.idle_s, TXO_ARRAY_LEN(refs), refs, &n, &err) != 0) {
        cmd_report("saga", "listing the stuck sagas", &err);
        return 1;
    }
    struct listing_columns table = {cols, TXO_ARRAY_LEN(cols)};
    int rc = listing_print("saga", stuck_json(refs, n), saga_opts.json, listing_rows, &table);
    int status = n == 0 && rc == 0 ? 0 : 1;
    fflush(stdout); /* the listing first, then the count, when both go to one file */
    fprintf(stderr, "txo saga: %zu stuck saga(s)\n", n);
    return status;
}

static int saga_run(int n_args, char **args)
{
    const char *action = n_args > 0 ? args[0] : NULL;
    const char *id = n_args > 1 ? args[1] : NULL;
    bool extra = n_args > 2;
    bool show = action != NULL && strcmp(action, "show") == 0 && !extra &&
                ((id != NULL) != (saga_opts.order_id != 0));
    bool retry = action != NULL && strcmp(action, "retry") == 0 && id != NULL && !extra;
    bool list = action != NULL && strcmp(action, "list") == 0 && id == NULL && saga_opts.stuck;
    if (!show && !retry && !list) {
        cli_error("usage: %s", cmd_saga.usage);
        return 2;
    }
    struct txo_db *db = common_connect(&saga_opts.common);
    if (db == NULL)
        return 1;
    int status = list ? saga_list_stuck(db) : show ? saga_show(db, id) : saga_retry(db, id);
    txo_db_close(db);
    return status;
}
