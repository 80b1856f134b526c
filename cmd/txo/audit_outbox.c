/*
 * `txo audit --outbox` (audit_outbox.h): settings, their checks, the run and the output. The
 * library does the audit (txo/audit.h); the broker's reader comes from the same settings and
 * the same code as the relay's publisher (brokers.h).
 */
#include "audit_outbox.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brokers.h"
#include "cli_errors.h"
#include "listing.h"

#define US_PER_S   INT64_C(1000000)
#define US_PER_DAY (86400 * US_PER_S)

void audit_outbox_add_settings(struct settings_table *t, struct audit_outbox_settings *s)
{
    txo_audit_opts_init(&s->opts);
    const struct setting group[] = {
        {.name = "outbox",
         .env = "TXO_AUDIT_OUTBOX",
         .type = SETTING_BOOL,
         .def = "false",
         .help = "audit the outbox against the broker instead of the order service: every "
                 "PUBLISHED event of the window is at the broker, nothing at the broker in the "
                 "window is missing from the outbox, no event waits longer than "
                 "--pending-older-than (any database with the outbox tables)",
         .target = &s->outbox},
        {.name = "publisher",
         .env = "TXO_PUBLISHER",
         .type = SETTING_STRING,
         .help = "--outbox: the broker the relay publishes to, as for `txo relay`, whose history "
                 "is read back without consuming it: nats, kafka or redis (not rabbitmq: reading "
                 "a queue consumes it; not webhook or grpc: the receiver keeps no history to read "
                 "back)",
         .target = &s->publisher},
        {.name = "since",
         .env = "TXO_AUDIT_SINCE",
         .type = SETTING_STRING,
         .help = "--outbox: the window starts at this created_at: a UTC time "
                 "(2026-12-01T10:00:00Z, or a date: its midnight) or an age (90s, 15m, 2h, 7d "
                 "ago); 1h when no id range is given",
         .target = &s->since},
        {.name = "until",
         .env = "TXO_AUDIT_UNTIL",
         .type = SETTING_STRING,
         .help = "--outbox: the window ends before this created_at (same forms, or now); "
                 "default now",
         .target = &s->until},
        {.name = "from-id",
         .env = "TXO_AUDIT_FROM_ID",
         .type = SETTING_STRING,
         .help = "--outbox: the window is the events with ids from this one (with --to-id, "
                 "instead of --since/--until)",
         .target = &s->from_id},
        {.name = "to-id",
         .env = "TXO_AUDIT_TO_ID",
         .type = SETTING_STRING,
         .help = "--outbox: ... up to this one, included",
         .target = &s->to_id},
        {.name = "pending-older-than",
         .env = "TXO_AUDIT_PENDING_OLDER_THAN",
         .type = SETTING_UINT,
         .def = "300",
         .help = "--outbox: an event not yet published after this many seconds is a finding, in "
                 "or out of the window (counted from its due time when inserted to be due "
                 "later); 0 = no such check",
         .min = 0,
         .max = 31536000,
         .target = &s->opts.pending_older_than_s},
        {.name = "clock-skew",
         .env = "TXO_AUDIT_CLOCK_SKEW_MS",
         .type = SETTING_MS,
         .def = "30000",
         .help = "--outbox: how far the broker's clock (Kafka: the relay's) and the database's may "
                 "differ, plus the time between the broker's ack and the row's mark; the broker "
                 "is read this much beyond the window, milliseconds",
         .min = 0,
         .max = 3600000,
         .target = &s->opts.clock_skew_ms},
        {.name = "max-listed",
         .env = "TXO_AUDIT_MAX_LISTED",
         .type = SETTING_UINT,
         .def = "20",
         .help = "--outbox: findings of each kind printed; the rest are counted",
         .min = 0,
         .max = 1000000,
         .target = &s->max_listed},
        {.name = "max-events",
         .env = "TXO_AUDIT_MAX_EVENTS",
         .type = SETTING_SIZE,
         .def = "1000000",
         .help = "--outbox: most PUBLISHED events in the window (and unmatched broker messages) "
                 "held in memory; a larger window fails: narrow it",
         .min = 1,
         .max = 100000000,
         .target = &s->opts.max_events},
    };
    settings_add(t, group, TXO_ARRAY_LEN(group));
    cmd_brokers_add_history_settings(t);
}

/* ---- settings ---- */

static bool set(const char *s)
{
    return s != NULL && s[0] != '\0';
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

/* n digits at *p, advancing past them, or -1 (and *p where the digits stopped). */
static long digits(const char **p, int n)
{
    long v = 0;
    for (int i = 0; i < n; i++, (*p)++) {
        if (**p < '0' || **p > '9')
            return -1;
        v = v * 10 + (**p - '0');
    }
    return v;
}

/* Whether *p is one of chars (not the NUL), advancing past it. */
static bool take(const char **p, const char *chars)
{
    if (**p == '\0' || strchr(chars, **p) == NULL)
        return false;
    (*p)++;
    return true;
}

/* "2026-12-01[T10:00[:00[.ffffff]]][Z|+00:00]", or with a space for the T; UTC only. */
static bool parse_utc(const char *s, int64_t *out)
{
    const char *p = s;
    long y = digits(&p, 4);
    long mo = y >= 0 && take(&p, "-") ? digits(&p, 2) : -1;
    long d = mo >= 0 && take(&p, "-") ? digits(&p, 2) : -1;
    long h = 0, mi = 0, sec = 0, us = 0; /* a date alone is its midnight */
    if (d >= 0 && *p != '\0') {
        h = take(&p, "Tt ") ? digits(&p, 2) : -1;
        mi = h >= 0 && take(&p, ":") ? digits(&p, 2) : -1;
    }
    if (mi >= 0 && take(&p, ":")) {
        sec = digits(&p, 2);
        if (sec >= 0 && take(&p, ".")) {
            long scale = 100000;
            int n = 0;
            for (; *p >= '0' && *p <= '9'; p++, n++)
                if (n < 6) {
                    us += (*p - '0') * scale;
                    scale /= 10;
                }
            if (n == 0)
                return false;
        }
    }
    if (y < 0 || mo < 1 || mo > 12 || d < 1 || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 ||
        sec > 60)
        return false;
    int64_t month_days =
        mo == 12 ? 31
                 : days_from_civil(y, (unsigned)mo + 1, 1) - days_from_civil(y, (unsigned)mo, 1);
    if (d > month_days)
        return false;
    if (*p != '\0' && strcmp(p, "Z") != 0 && strcmp(p, "z") != 0 && strcmp(p, "+00:00") != 0)
        return false;
    *out = days_from_civil(y, (unsigned)mo, (unsigned)d) * US_PER_DAY +
           ((int64_t)h * 3600 + mi * 60 + sec) * US_PER_S + us;
    return true;
}

/* An age "90s", "15m", "2h", "7d": now minus it. */
static bool parse_age(const char *s, int64_t now_us, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long n = strtoll(s, &end, 10);
    if (errno != 0 || end == s || n < 0 || s[0] == '-' || s[0] == '+' || end[0] == '\0' ||
        end[1] != '\0')
        return false;
    int64_t unit = end[0] == 's'   ? 1
                   : end[0] == 'm' ? 60
                   : end[0] == 'h' ? 3600
                   : end[0] == 'd' ? 86400
                                   : 0;
    if (unit == 0 || n > 100LL * 365 * 86400 / unit)
        return false;
    *out = now_us - (int64_t)n * unit * US_PER_S;
    return true;
}

static bool parse_when(const char *s, int64_t now_us, int64_t *out)
{
    if (strcmp(s, "now") == 0) {
        *out = now_us;
        return true;
    }
    return parse_age(s, now_us, out) || parse_utc(s, out);
}

static bool parse_id(const char *s, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 1 || s[0] == '+')
        return false;
    *out = (int64_t)v;
    return true;
}

/* The window and the thresholds into o; false (after a message) when a setting is bad. */
static bool audit_opts(const struct audit_outbox_settings *s, struct txo_audit_opts *o)
{
    *o = s->opts;
    bool by_id = set(s->from_id) || set(s->to_id);
    if (by_id) {
        if (set(s->since) || set(s->until)) {
            cli_error("txo audit: --from-id/--to-id and --since/--until are two kinds of "
                      "window: give one");
            return false;
        }
        if (!set(s->from_id) || !set(s->to_id) || !parse_id(s->from_id, &o->from_id) ||
            !parse_id(s->to_id, &o->to_id) || o->from_id > o->to_id) {
            cli_error("txo audit: --from-id and --to-id must both be ids (>= 1), "
                      "from-id <= to-id");
            return false;
        }
        return true;
    }
    int64_t now = txo_realtime_us();
    const char *since = set(s->since) ? s->since : "1h";
    if (!parse_when(since, now, &o->since_us)) {
        cli_error("txo audit: --since must be a UTC time (2026-12-01T10:00:00Z) or an age (90s, "
                  "15m, 2h, 7d), got \"%s\"",
                  since);
        return false;
    }
    if (!parse_when(set(s->until) ? s->until : "now", now, &o->until_us)) {
        cli_error("txo audit: --until must be now, a UTC time (2026-12-01T10:00:00Z) or an age "
                  "(90s, 15m, 2h, 7d), got \"%s\"",
                  s->until);
        return false;
    }
    if (o->since_us >= o->until_us) {
        cli_error("txo audit: the window must end (--until) after it starts (--since)");
        return false;
    }
    return true;
}

/* The broker named by --publisher, or NULL after a message saying why it cannot be audited. */
static const struct cmd_broker *audited_broker(const char *name)
{
    if (cmd_broker_refuse_left_out("audit --outbox", "publisher", name))
        return NULL;
    if (cmd_broker_history_names()[0] == '\0') {
        cli_error("txo audit --outbox: this txo has no broker whose history can be read back "
                  "(left out of the build: %s)",
                  cmd_brokers_left_out());
        return NULL;
    }
    if (!set(name)) {
        cli_error("txo audit --outbox: --publisher is required: %s (the brokers whose "
                  "history can be read back)",
                  cmd_broker_history_names());
        return NULL;
    }
    const struct cmd_broker *b = cmd_broker_find(name);
    if (b != NULL && b->history_new != NULL)
        return b;
    const char *why = b != NULL ? b->no_history : NULL;
    if (strcmp(name, "webhook") == 0)
        why = "the receiver keeps no history the relay could read back";
    else if (strcmp(name, "log") == 0 || strcmp(name, "null") == 0)
        why = "it keeps nothing to compare with";
    if (why != NULL)
        cli_error("txo audit --outbox: --publisher %s cannot be audited: %s; the outbox "
                  "can be audited against %s",
                  name, why, cmd_broker_history_names());
    else
        cli_error("txo audit --outbox: --publisher must be %s, got \"%s\"",
                  cmd_broker_history_names(), name);
    return NULL;
}

/* ---- output ---- */

/* Writes " name=value" in logfmt: the value quoted when it has to be. */
static void field(const char *name, const char *value)
{
    if (value == NULL)
        return;
    bool quote = value[0] == '\0' || strpbrk(value, " =\"\\") != NULL;
    for (const char *p = value; !quote && *p != '\0'; p++)
        quote = (unsigned char)*p < 0x20 || *p == 0x7f;
    printf(" %s=", name);
    if (!quote) {
        fputs(value, stdout);
        return;
    }
    putchar('"');
    for (const char *p = value; *p != '\0'; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch == '\n')
            fputs("\\n", stdout);
        else if (ch < 0x20 || ch == 0x7f)
            printf("\\x%02x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

static void field_time(const char *name, int64_t us)
{
    char t[TXO_RFC3339_LEN];
    txo_format_rfc3339(us, t);
    field(name, t);
}

static void field_i64(const char *name, int64_t v)
{
    printf(" %s=%" PRId64, name, v);
}

/* Collects the findings into the run's document: the first max_listed of each kind. */
struct collector {
    unsigned max_listed;
    const struct txo_audit_result *result; /* its now_us: the database's clock */
    uint64_t seen[TXO_AUDIT_KIND_COUNT];
    json_t *findings; /* array; NULL once an append failed (out of memory) */
};

static json_t *time_json(int64_t us)
{
    char t[TXO_RFC3339_LEN];
    txo_format_rfc3339(us, t);
    return json_string(t);
}

/* One finding as {"kind", then the members of its kind}, named as the summary's logfmt
 * would: event_id, key, created_at, published_at, broker_time, position, status, attempts,
 * age_s, last_error, follows_status, detail. */
static json_t *finding_json(const struct txo_audit_finding *f, int64_t now_us)
{
    json_t *o = json_pack("{s:s}", "kind", txo_audit_kind_name(f->kind));
    bool ok = o != NULL;
    switch (f->kind) {
    case TXO_AUDIT_MISSING:
    case TXO_AUDIT_BROKER_TRIMMED:
        ok = ok && json_object_set_new(o, "event_id", json_integer(f->event_id)) == 0 &&
             json_object_set_new(o, "key", listing_str(f->key)) == 0 &&
             json_object_set_new(o, "created_at", time_json(f->created_at_us)) == 0 &&
             json_object_set_new(o, "published_at", time_json(f->published_at_us)) == 0;
        break;
    case TXO_AUDIT_EXTRA:
    case TXO_AUDIT_OUTBOX_TRIMMED:
        ok = ok && json_object_set_new(o, "key", listing_str(f->key)) == 0 &&
             json_object_set_new(o, "broker_time", time_json(f->broker_time_us)) == 0 &&
             json_object_set_new(o, "position", listing_str(f->position)) == 0;
        break;
    case TXO_AUDIT_PENDING:
        ok = ok && json_object_set_new(o, "event_id", json_integer(f->event_id)) == 0 &&
             json_object_set_new(o, "key", listing_str(f->key)) == 0 &&
             json_object_set_new(o, "status", listing_str(f->status)) == 0 &&
             json_object_set_new(o, "attempts", json_integer(f->attempts)) == 0 &&
             json_object_set_new(o, "created_at", time_json(f->created_at_us)) == 0 &&
             json_object_set_new(o, "age_s",
                                 json_integer((now_us - f->created_at_us) / US_PER_S)) == 0 &&
             json_object_set_new(o, "last_error", listing_str(f->detail)) == 0;
        break;
    case TXO_AUDIT_SEQUENCE_GAP:
        ok = ok && json_object_set_new(o, "event_id", json_integer(f->event_id)) == 0 &&
             json_object_set_new(o, "key", listing_str(f->key)) == 0 &&
             json_object_set_new(o, "published_at", time_json(f->published_at_us)) == 0 &&
             json_object_set_new(o, "follows_status", listing_str(f->status)) == 0 &&
             json_object_set_new(o, "detail", listing_str(f->detail)) == 0;
        break;
    case TXO_AUDIT_KIND_COUNT:
        break;
    }
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static void collect_finding(void *arg, const struct txo_audit_finding *f)
{
    struct collector *c = arg;
    if (c->seen[f->kind]++ >= c->max_listed || c->findings == NULL)
        return;
    if (json_array_append_new(c->findings, finding_json(f, c->result->now_us)) != 0) {
        json_decref(c->findings);
        c->findings = NULL;
    }
}

/* The notes that explain a trimmed window, as sentences (NULL when out of memory). */
static json_t *notes_json(const struct txo_audit_result *r)
{
    json_t *notes = json_array();
    char t[TXO_RFC3339_LEN];
    char text[512];
    if (notes != NULL && r->found[TXO_AUDIT_BROKER_TRIMMED] > 0) {
        txo_format_rfc3339(r->broker_held_from_us, t);
        snprintf(text, sizeof(text),
                 "the broker no longer holds what it stored before %s (%s): the events of the "
                 "window it lacks that may be older are broker_trimmed, not missing; start the "
                 "window later",
                 t, r->broker_held_from_where);
        json_array_append_new(notes, listing_str(text));
    }
    if (notes != NULL && r->found[TXO_AUDIT_OUTBOX_TRIMMED] > 0) {
        txo_format_rfc3339(r->outbox_held_from_us, t);
        snprintf(text, sizeof(text),
                 "the oldest PUBLISHED event the outbox has left was published at %s (txo "
                 "clean's retention, or the outbox's beginning): broker messages of unknown keys "
                 "stored before then are outbox_trimmed, not extra; start the window later",
                 t);
        json_array_append_new(notes, listing_str(text));
    }
    return notes;
}

/*
 * The document of `txo audit --outbox --json`: the summary's keys in its order (audit, result,
 * publisher, window, from, to, events, messages, one count per kind, duplicates, elapsed_ms),
 * then "findings" (the listed ones), "not_listed" ({kind: how many more}) and "notes".
 * Steals findings. NULL when out of memory.
 */
static json_t *audit_json(const char *result, const char *publisher, const struct txo_audit_opts *o,
                          const struct txo_audit_result *r, int64_t elapsed_ms,
                          const struct collector *c, json_t *findings)
{
    bool by_id = o->to_id > 0;
    json_t *doc = json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:I,s:I}", "audit", "outbox", "result",
                            result, "publisher", publisher, "window", by_id ? "id" : "created_at",
                            "from", by_id ? json_integer(o->from_id) : time_json(o->since_us), "to",
                            by_id ? json_integer(o->to_id) : time_json(o->until_us), "events",
                            (json_int_t)r->events, "messages", (json_int_t)r->messages);
    json_t *not_listed = json_object();
    bool ok = doc != NULL && not_listed != NULL && findings != NULL;
    for (int k = 0; ok && k < TXO_AUDIT_KIND_COUNT; k++) {
        const char *kind = txo_audit_kind_name((enum txo_audit_kind)k);
        ok = json_object_set_new(doc, kind, json_integer((json_int_t)r->found[k])) == 0;
        if (ok && c->seen[k] > c->max_listed)
            ok = json_object_set_new(not_listed, kind,
                                     json_integer((json_int_t)(c->seen[k] - c->max_listed))) == 0;
    }
    ok = ok &&
         json_object_set_new(doc, "duplicates", json_integer((json_int_t)r->duplicates)) == 0 &&
         json_object_set_new(doc, "elapsed_ms", json_integer(elapsed_ms)) == 0 &&
         json_object_set(doc, "findings", findings) == 0 &&
         json_object_set(doc, "not_listed", not_listed) == 0 &&
         json_object_set_new(doc, "notes", notes_json(r)) == 0;
    json_decref(findings);
    json_decref(not_listed);
    if (!ok) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

/* The findings as a table, the kinds with more than were listed, and the notes. */
static void print_findings(const json_t *doc, unsigned max_listed)
{
    static const struct listing_column cols[] = {
        {.key = "kind", .header = "KIND"},
        {.key = "event_id", .header = "EVENT_ID", .optional = true},
        {.key = "key", .header = "KEY", .max_width = 48},
        {.key = "status", .header = "STATUS", .optional = true},
        {.key = "attempts", .header = "ATTEMPTS", .optional = true},
        {.key = "created_at", .header = "CREATED_AT", .optional = true},
        {.key = "published_at", .header = "PUBLISHED_AT", .optional = true},
        {.key = "broker_time", .header = "BROKER_TIME", .optional = true},
        {.key = "age_s", .header = "AGE_S", .optional = true},
        {.key = "position", .header = "POSITION", .max_width = 64, .optional = true},
        {.key = "follows_status", .header = "FOLLOWS", .optional = true},
        {.key = "last_error", .header = "LAST_ERROR", .max_width = 64, .optional = true},
        {.key = "detail", .header = "DETAIL", .max_width = 64, .optional = true},
    };
    const json_t *findings = json_object_get(doc, "findings");
    if (json_array_size(findings) > 0)
        listing_table(stdout, cols, TXO_ARRAY_LEN(cols), findings);
    const char *kind;
    json_t *more;
    json_object_foreach(json_object_get(doc, "not_listed"), kind, more)
    {
        printf("%s: %" JSON_INTEGER_FORMAT " more not listed (--max-listed %u)\n", kind,
               json_integer_value(more), max_listed);
    }
    size_t i;
    json_t *note;
    json_array_foreach(json_object_get(doc, "notes"), i, note)
    {
        printf("note: %s\n", json_string_value(note));
    }
}

static void print_summary(const char *result, const char *publisher, const struct txo_audit_opts *o,
                          const struct txo_audit_result *r, int64_t elapsed_ms)
{
    printf("audit=outbox result=%s publisher=%s", result, publisher);
    if (o->to_id > 0) {
        printf(" window=id");
        field_i64("from", o->from_id);
        field_i64("to", o->to_id);
    } else {
        printf(" window=created_at");
        field_time("from", o->since_us);
        field_time("to", o->until_us);
    }
    printf(" events=%" PRIu64 " messages=%" PRIu64, r->events, r->messages);
    for (int k = 0; k < TXO_AUDIT_KIND_COUNT; k++)
        printf(" %s=%" PRIu64, txo_audit_kind_name((enum txo_audit_kind)k), r->found[k]);
    printf(" duplicates=%" PRIu64 " elapsed_ms=%" PRId64 "\n", r->duplicates, elapsed_ms);
}

/* The tables of a run: the findings, then the summary line of what the document does not hold. */
struct outbox_tables {
    unsigned max_listed;
    const char *result;
    const char *publisher;
    const struct txo_audit_opts *o;
    const struct txo_audit_result *r;
    int64_t elapsed_ms;
};

static void print_outbox_tables(const json_t *doc, void *arg)
{
    const struct outbox_tables *t = arg;
    print_findings(doc, t->max_listed);
    print_summary(t->result, t->publisher, t->o, t->r, t->elapsed_ms);
}

/* ---- the run ---- */

int audit_outbox_run(const struct audit_outbox_settings *s, const struct common_opts *common,
                     bool json)
{
    const struct cmd_broker *broker = audited_broker(s->publisher);
    struct txo_audit_opts o;
    if (broker == NULL || !audit_opts(s, &o))
        return 2;
    int64_t t0 = txo_monotonic_ms();
    struct txo_error err;
    txo_error_init(&err);
    struct txo_history *history = NULL;
    int rc = broker->history_new(&history, &err);
    if (rc < 0) {
        cmd_report("audit", "reading the broker", &err);
        cmd_broker_shutdown(broker);
        return rc == TXO_EINVAL ? 2 : 1;
    }
    int status = 1;
    struct txo_audit_result r;
    memset(&r, 0, sizeof(r));
    struct collector c = {.max_listed = s->max_listed, .result = &r, .findings = json_array()};
    struct txo_db *db = common_connect(common);
    if (db != NULL) {
        o.report = collect_finding;
        o.report_arg = &c;
        rc = txo_audit_outbox(db, history, &o, &r, &err);
        if (rc < 0)
            cmd_report("audit", "auditing the outbox", &err);
        else
            status = txo_audit_clean(&r) ? 0 : 1;
    }
    const char *result = db == NULL || rc < 0 ? "error" : status == 0 ? "clean" : "findings";
    int64_t elapsed_ms = txo_monotonic_ms() - t0;
    json_t *doc = audit_json(result, broker->name, &o, &r, elapsed_ms, &c, c.findings);
    struct outbox_tables tables = {.max_listed = s->max_listed,
                                   .result = result,
                                   .publisher = broker->name,
                                   .o = &o,
                                   .r = &r,
                                   .elapsed_ms = elapsed_ms};
    if (listing_print("audit", doc, json, print_outbox_tables, &tables) != 0)
        status = 1;
    fflush(stdout);
    txo_db_close(db);
    txo_history_free(history);
    cmd_broker_shutdown(broker);
    return status;
}
