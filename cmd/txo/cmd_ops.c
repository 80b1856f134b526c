/*
 * Operations on a running system, as `txo` subcommands (the same data as the admin
 * endpoints of the HTTP API):
 *   txo stats                   outbox, sagas, commands and dead letters at a glance
 *   txo dlq list [--after-id N] [--limit N]
 *   txo dlq replay ID...        dead letters' events back to PENDING for the relay
 *   txo dlq skip ID...          dead letters' events given up (SKIPPED): their aggregates go on
 *   txo saga show ID            a saga and its steps (JSON)
 *   txo saga show --order N     the saga of an order
 *   txo saga retry ID           retries a COMPENSATION_FAILED saga now
 * Output: human-readable tables, or JSON with --json (saga show is always JSON).
 * Exit status: 0 done, 1 failed (the reason on stderr), 2 usage.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "daemons.h"
#include "order_saga.h"
#include "orders.h"
#include "txo/cmdq.h"
#include "txo/dlq.h"
#include "txo/relay.h"

/* ---- txo stats ---- */

static int stats_run(int argc, char **argv);

const struct command cmd_stats = {
    .name = "stats",
    .summary = "print outbox, saga, command and dead-letter counts",
    .usage = "txo stats [options]",
    .description = "Counts outbox events per status (with the relay's lag, the age of the oldest\n"
                   "event not yet published, and the age of the oldest FAILED one),\n"
                   "sagas per status, commands per status and dead letters. --json prints one\n"
                   "JSON object instead of the table. On a database migrated with\n"
                   "`txo migrate --only outbox` the sagas and commands are null.",
    .run = stats_run,
};

static struct {
    struct common_opts common;
    bool json;
} stats_opts;

/* The settings of this command, in --help order. */
static void add_stats_settings(struct settings_table *t)
{
    const struct setting own[] = {
        {.name = "json",
         .env = "TXO_JSON",
         .type = SETTING_BOOL,
         .def = "false",
         .help = "print JSON",
         .target = &stats_opts.json},
    };
    settings_add_common(t, &stats_opts.common);
    settings_add(t, own, TXO_ARRAY_LEN(own));
}

/* Parked aggregates `txo stats` shows at most. */
#define STATS_PARKED_MAX 20

/* "parked":[{...},...] after the other members (a leading comma). */
static void print_parked_json(const struct txo_relay_parked *p, size_t n)
{
    json_t *list = json_array();
    for (size_t i = 0; list != NULL && i < n; i++)
        json_array_append_new(list,
                              json_pack("{s:s,s:s,s:I,s:s,s:I,s:s,s:I}", "aggregate_type",
                                        p[i].aggregate_type, "aggregate_id", p[i].aggregate_id,
                                        "event_id", (json_int_t)p[i].event_id, "status",
                                        txo_outbox_status_name(p[i].status), "attempts",
                                        (json_int_t)p[i].attempts, "last_error", p[i].last_error,
                                        "waiting", (json_int_t)p[i].waiting));
    char *text = list != NULL ? json_dumps(list, JSON_COMPACT) : NULL;
    printf(",\"parked\":%s", text != NULL ? text : "[]");
    free(text); /* jansson allocates with malloc */
    json_decref(list);
}

static void print_parked_text(const struct txo_relay_parked *p, size_t n)
{
    if (n == 0)
        return;
    printf("parked      %zu%s aggregate%s held back by a failed event (oldest first):\n", n,
           n == STATS_PARKED_MAX ? "+" : "", n == 1 ? "" : "s");
    for (size_t i = 0; i < n; i++)
        printf("  %s/%s  event %" PRId64 " %s after %u attempt%s, %" PRIu64
               " waiting behind it: %s\n",
               p[i].aggregate_type, p[i].aggregate_id, p[i].event_id,
               txo_outbox_status_name(p[i].status), p[i].attempts, p[i].attempts == 1 ? "" : "s",
               p[i].waiting, p[i].last_error[0] != '\0' ? p[i].last_error : "(no error recorded)");
}

static int stats_run(int argc, char **argv)
{
    txo_db_opts_init(&stats_opts.common.db);
    struct settings_table stats_table = {.n = 0};
    add_stats_settings(&stats_table);
    enum settings_result r =
        settings_parse(&cmd_stats, stats_table.items, stats_table.n, argc, argv, NULL);
    if (r != SETTINGS_OK)
        return r == SETTINGS_EXIT_OK ? 0 : 2;
    if (!common_apply(&stats_opts.common))
        return 2;
    struct txo_db *db = common_connect(&stats_opts.common);
    if (db == NULL)
        return 1;
    struct txo_error err;
    txo_error_init(&err);
    struct txo_outbox_stats os;
    struct txo_saga_counts sagas;
    uint64_t cpending = 0, cprocessing = 0, cfailed = 0, dl_total = 0, dl_unreplayed = 0;
    /* Aggregates held back by a failed event (relays with --ordering aggregate), oldest first. */
    struct txo_relay_parked parked[STATS_PARKED_MAX];
    size_t n_parked = 0;
    int status = 1;
    /* A relay-only database (`txo migrate --only outbox`) has no saga or command tables. */
    bool has_sagas = false, has_commands = false;
    if (txo_schema_has_table(db, "saga_instances", &has_sagas, &err) != 0 ||
        txo_schema_has_table(db, "command_queue", &has_commands, &err) != 0 ||
        txo_outbox_get_stats(db, &os, &err) != 0 ||
        (has_sagas && txo_saga_count(db, &sagas, &err) != 0) ||
        (has_commands && txo_cmdq_stats(db, &cpending, &cprocessing, &cfailed, &err) != 0) ||
        txo_dlq_count(db, &dl_total, &dl_unreplayed, &err) != 0 ||
        txo_relay_list_parked(db, parked, TXO_ARRAY_LEN(parked), &n_parked, &err) != 0) {
        cmd_report("stats", "reading the counts", &err);
        goto out;
    }
    if (stats_opts.json) {
        printf("{\"outbox\":{\"pending\":%" PRIu64 ",\"processing\":%" PRIu64
               ",\"published\":%" PRIu64 ",\"failed\":%" PRIu64
               ",\"oldest_pending_age_seconds\":%.3f,\"oldest_failed_age_seconds\":%.3f},"
               "\"sagas\":",
               os.pending, os.processing, os.published, os.failed, os.oldest_pending_age_s,
               os.oldest_failed_age_s);
        if (has_sagas) {
            for (int s = 0; s < TXO_SAGA_STATUS_COUNT; s++)
                printf("%s\"%s\":%" PRIu64, s > 0 ? "," : "{",
                       txo_saga_status_name((enum txo_saga_status)s), sagas.by_status[s]);
            printf("},\"saga_compensation_abandoned\":%" PRIu64, sagas.abandoned);
        } else {
            printf("null,\"saga_compensation_abandoned\":null");
        }
        if (has_commands)
            printf(",\"commands\":{\"pending\":%" PRIu64 ",\"processing\":%" PRIu64
                   ",\"failed\":%" PRIu64 "}",
                   cpending, cprocessing, cfailed);
        else
            printf(",\"commands\":null");
        printf(",\"dead_letters\":{\"total\":%" PRIu64 ",\"unreplayed\":%" PRIu64 "}", dl_total,
               dl_unreplayed);
        print_parked_json(parked, n_parked);
        printf("}\n");
    } else {
        printf("outbox      pending %" PRIu64 "  processing %" PRIu64 "  published %" PRIu64
               "  failed %" PRIu64 "  oldest unpublished %.1f s  oldest failed %.1f s\n",
               os.pending, os.processing, os.published, os.failed, os.oldest_pending_age_s,
               os.oldest_failed_age_s);
        printf("sagas      ");
        if (has_sagas) {
            for (int s = 0; s < TXO_SAGA_STATUS_COUNT; s++)
                printf(" %s %" PRIu64, txo_saga_status_name((enum txo_saga_status)s),
                       sagas.by_status[s]);
            printf("  (compensation given up: %" PRIu64 ")", sagas.abandoned);
        } else {
            printf(" (no saga tables: an outbox-only schema)");
        }
        if (has_commands)
            printf("\ncommands    pending %" PRIu64 "  processing %" PRIu64 "  failed %" PRIu64
                   "\n",
                   cpending, cprocessing, cfailed);
        else
            printf("\ncommands    (no command table: an outbox-only schema)\n");
        printf("dead letters %" PRIu64 " (%" PRIu64 " never replayed)\n", dl_total, dl_unreplayed);
        print_parked_text(parked, n_parked);
    }
    status = 0;
out:
    txo_db_close(db);
    return status;
}

/* ---- txo dlq ---- */

static int dlq_run(int argc, char **argv);

const struct command cmd_dlq = {
    .name = "dlq",
    .summary = "list dead letters, replay them (events back to PENDING) or skip them",
    .usage =
        "txo dlq list [options] | txo dlq replay [options] ID... | txo dlq skip [options] ID...",
    .description =
        "list: prints dead letters (events the relay gave up on after --max-attempts), oldest\n"
        "first, from --after-id, at most --limit. replay ID...: puts each dead letter's outbox\n"
        "event back to PENDING with attempts 0, in one transaction per letter, so a running\n"
        "relay publishes it again; the letter records the replay. Fix the cause first.\n"
        "skip ID...: gives up each dead letter's event (SKIPPED, never published); with the\n"
        "relay's --ordering aggregate the later events of its aggregate, held back while it was\n"
        "FAILED, are then published.",
    .run = dlq_run,
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
        {.name = "json",
         .env = "TXO_JSON",
         .type = SETTING_BOOL,
         .def = "false",
         .help = "list: one JSON object per line",
         .target = &dlq_opts.json},
    };
    settings_add_common(t, &dlq_opts.common);
    settings_add(t, own, TXO_ARRAY_LEN(own));
}

static void print_json_string(const char *s)
{
    putchar('"');
    for (; s != NULL && *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static int dlq_list(struct txo_db *db)
{
    struct txo_error err;
    txo_error_init(&err);
    struct txo_dead_letter *dl = NULL;
    size_t n = 0;
    if (txo_dlq_list(db, dlq_opts.after_id, dlq_opts.limit, &dl, &n, &err) != 0) {
        cmd_report("dlq", "listing dead letters", &err);
        return 1;
    }
    if (!dlq_opts.json)
        printf("%-8s %-10s %-22s %-28s %-8s %s\n", "ID", "EVENT_ID", "TYPE", "CREATED_AT",
               "REPLAYS", "ERROR");
    for (size_t i = 0; i < n; i++) {
        if (dlq_opts.json) {
            printf("{\"id\":%" PRId64 ",\"source_event_id\":%" PRId64 ",\"event_type\":", dl[i].id,
                   dl[i].source_event_id);
            print_json_string(dl[i].event_type);
            printf(",\"created_at\":\"%s\",\"replay_count\":%u,\"error\":", dl[i].created_at,
                   dl[i].replay_count);
            print_json_string(dl[i].error);
            printf(",\"payload\":%s}\n", dl[i].payload);
        } else {
            printf("%-8" PRId64 " %-10" PRId64 " %-22s %-28s %-8u %s\n", dl[i].id,
                   dl[i].source_event_id, dl[i].event_type, dl[i].created_at, dl[i].replay_count,
                   dl[i].error);
        }
    }
    txo_dead_letters_free(dl, n);
    return 0;
}

static int dlq_act(struct txo_db *db, bool skip, int n_ids, char **ids)
{
    int status = 0;
    for (int i = 0; i < n_ids; i++) {
        char *end = NULL;
        long long id = strtoll(ids[i], &end, 10);
        if (end == ids[i] || *end != '\0' || id <= 0) {
            fprintf(stderr, "txo dlq: \"%s\" is not a dead letter id\n", ids[i]);
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

static int dlq_run(int argc, char **argv)
{
    txo_db_opts_init(&dlq_opts.common.db);
    int first = argc;
    struct settings_table dlq_table = {.n = 0};
    add_dlq_settings(&dlq_table);
    enum settings_result r =
        settings_parse(&cmd_dlq, dlq_table.items, dlq_table.n, argc, argv, &first);
    if (r != SETTINGS_OK)
        return r == SETTINGS_EXIT_OK ? 0 : 2;
    if (!common_apply(&dlq_opts.common))
        return 2;
    const char *action = first < argc ? argv[first] : NULL;
    bool list = action != NULL && strcmp(action, "list") == 0 && first + 1 == argc;
    bool replay = action != NULL && strcmp(action, "replay") == 0 && first + 1 < argc;
    bool skip = action != NULL && strcmp(action, "skip") == 0 && first + 1 < argc;
    if (!list && !replay && !skip) {
        fprintf(stderr, "usage: %s\n", cmd_dlq.usage);
        return 2;
    }
    struct txo_db *db = common_connect(&dlq_opts.common);
    if (db == NULL)
        return 1;
    int status = list ? dlq_list(db) : dlq_act(db, skip, argc - first - 1, argv + first + 1);
    txo_db_close(db);
    return status;
}

/* ---- txo saga ---- */

static int saga_run(int argc, char **argv);

const struct command cmd_saga = {
    .name = "saga",
    .summary = "show a saga and its steps, list the stuck ones, or retry a COMPENSATION_FAILED one",
    .usage = "txo saga show [options] ID | txo saga show --order N | txo saga list --stuck "
             "[--idle S] | txo saga retry [options] ID",
    .description =
        "show: prints the saga (status, owner, payload) and each step (status, attempts, last\n"
        "error) as JSON; --order N finds the saga of order N. list --stuck: the sagas that need\n"
        "an operator: RUNNING or COMPENSATING with no live owner for --idle seconds (no worker\n"
        "runs them), RUNNING ones past a deadline even under a live owner (a worker hung in a\n"
        "step: which deadline, the step, by how long), and COMPENSATION_FAILED ones the engine\n"
        "gave up retrying; one line each,\n"
        "exit status 1 when there is any. retry: moves a COMPENSATION_FAILED saga back to\n"
        "COMPENSATING and runs its compensations now, calling the external services configured\n"
        "here (the worker also retries them by itself while their retry is scheduled).",
    .run = saga_run,
};

static struct {
    struct common_opts common;
    unsigned order_id;
    bool stuck;
    unsigned idle_s;
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
    settings_add_services(t, &saga_opts.services);
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
    char *json = txo_saga_info_json(&info, &err);
    txo_saga_info_release(&info);
    if (json == NULL) {
        cmd_report("saga", "printing the saga", &err);
        return 1;
    }
    printf("%s\n", json);
    txo_free(json);
    return 0;
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

/* txo saga list --stuck: one line per stuck saga; 1 when there is any. */
static int saga_list_stuck(struct txo_db *db)
{
    struct txo_saga_ref refs[1000];
    size_t n = 0;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_saga_list_stuck(db, saga_opts.idle_s, TXO_ARRAY_LEN(refs), refs, &n, &err) != 0) {
        cmd_report("saga", "listing the stuck sagas", &err);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        const struct txo_saga_ref *ref = &refs[i];
        printf("%s  %-20s %-19s idle %" PRId64 " s", ref->id, ref->type,
               txo_saga_status_name(ref->status), ref->idle_s);
        if (ref->deadline != TXO_DEADLINE_NONE)
            printf("  past its %s deadline by %" PRId64 " s at step %s\n",
                   txo_saga_deadline_name(ref->deadline), ref->overdue_s,
                   ref->step[0] != '\0' ? ref->step : "-");
        else
            printf("%s\n", ref->status == TXO_SAGA_COMPENSATION_FAILED
                               ? "  given up: txo saga retry ID"
                               : "  no live owner");
    }
    fprintf(stderr, "txo saga: %zu stuck saga(s)\n", n);
    return n == 0 ? 0 : 1;
}

static int saga_run(int argc, char **argv)
{
    txo_db_opts_init(&saga_opts.common.db);
    int first = argc;
    struct settings_table saga_table = {.n = 0};
    add_saga_settings(&saga_table);
    enum settings_result r =
        settings_parse(&cmd_saga, saga_table.items, saga_table.n, argc, argv, &first);
    if (r != SETTINGS_OK)
        return r == SETTINGS_EXIT_OK ? 0 : 2;
    if (!common_apply(&saga_opts.common))
        return 2;
    const char *action = first < argc ? argv[first] : NULL;
    const char *id = first + 1 < argc ? argv[first + 1] : NULL;
    bool extra = first + 2 < argc;
    bool show = action != NULL && strcmp(action, "show") == 0 && !extra &&
                ((id != NULL) != (saga_opts.order_id != 0));
    bool retry = action != NULL && strcmp(action, "retry") == 0 && id != NULL && !extra;
    bool list = action != NULL && strcmp(action, "list") == 0 && id == NULL && saga_opts.stuck;
    if (!show && !retry && !list) {
        fprintf(stderr, "usage: %s\n", cmd_saga.usage);
        return 2;
    }
    struct txo_db *db = common_connect(&saga_opts.common);
    if (db == NULL)
        return 1;
    int status = list ? saga_list_stuck(db) : show ? saga_show(db, id) : saga_retry(db, id);
    txo_db_close(db);
    return status;
}
