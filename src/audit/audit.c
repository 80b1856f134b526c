#include "core/common.h"

/*
 * The outbox auditor (txo/audit.h): checks what the outbox says was published against the
 * broker's history, and that nothing waits too long to be published.
 *
 * An audit is a list of checks run one after the other over one struct audit
 * (audit_internal.h): the borrowed db and broker reader, the options, the result being
 * filled, and the database's clock read once at the start, against which every age is
 * measured. A check reports findings through txo__audit_report(), which counts them and hands
 * them to the caller's callback; it returns non-zero only when it could not run (a DB or
 * broker error), and the audit stops there. Adding a check is a function of the check_fn shape,
 * one line in the table `checks`, and a finding kind at the end of enum txo_audit_kind when it
 * reports something new.
 *
 * Everything is read with plain SELECTs (audit_sql.h); nothing is written.
 */

#include "audit/audit_internal.h"
#include "audit/audit_sql.h"

#define PAGE_ROWS 1000

static const char *const kind_names[TXO_AUDIT_KIND_COUNT] = {
    [TXO_AUDIT_MISSING] = "missing",
    [TXO_AUDIT_EXTRA] = "extra",
    [TXO_AUDIT_PENDING] = "pending",
    [TXO_AUDIT_BROKER_TRIMMED] = "broker_trimmed",
    [TXO_AUDIT_OUTBOX_TRIMMED] = "outbox_trimmed",
    [TXO_AUDIT_SEQUENCE_GAP] = "sequence_gap",
};

const char *txo_audit_kind_name(enum txo_audit_kind kind)
{
    return (unsigned)kind < TXO_AUDIT_KIND_COUNT ? kind_names[kind] : "?";
}

void txo_audit_opts_init(struct txo_audit_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->pending_older_than_s = 300;
    o->clock_skew_ms = 30000;
    o->max_events = 1000000;
}

bool txo_audit_clean(const struct txo_audit_result *r)
{
    for (size_t k = 0; k < TXO_AUDIT_KIND_COUNT; k++)
        if (r->found[k] > 0)
            return false;
    return true;
}

void txo__audit_report(struct audit *a, const struct txo_audit_finding *f)
{
    TXO_ASSERT((unsigned)f->kind < TXO_AUDIT_KIND_COUNT);
    a->out->found[f->kind]++;
    if (a->opts->report != NULL)
        a->opts->report(a->opts->report_arg, f);
}

/* ---- pending ---- */

/* The overdue events of one status, a page at a time. */
static int pending_of(struct audit *a, const char *status, int64_t cutoff_us, struct txo_error *err)
{
    int64_t after_created = 0, after_id = 0;
    for (bool first = true;; first = false) {
        struct txo_rows *rows = NULL;
        int rc;
        if (first) {
            struct txo_param p[] = {txo_p_str(status), txo_p_i64(cutoff_us), txo_p_i64(cutoff_us),
                                    txo_p_i64(PAGE_ROWS)};
            rc = txo_db_query(a->db, AUDIT_SQL_PENDING_FIRST, p, TXO_ARRAY_LEN(p), &rows, err);
        } else {
            struct txo_param p[] = {txo_p_str(status),        txo_p_i64(cutoff_us),
                                    txo_p_i64(cutoff_us),     txo_p_i64(after_created),
                                    txo_p_i64(after_created), txo_p_i64(after_id),
                                    txo_p_i64(PAGE_ROWS)};
            rc = txo_db_query(a->db, AUDIT_SQL_PENDING_AFTER, p, TXO_ARRAY_LEN(p), &rows, err);
        }
        size_t n = rc == 0 ? txo_rows_count(rows) : 0;
        for (size_t r = 0; r < n; r++) {
            struct txo_audit_finding f = {
                .kind = TXO_AUDIT_PENDING,
                .event_id = txo_rows_i64(rows, r, AUDIT_PENDING_ID),
                .key = txo_rows_str(rows, r, AUDIT_PENDING_KEY, NULL),
                .status = status,
                .attempts = (int)txo_rows_i64(rows, r, AUDIT_PENDING_ATTEMPTS),
                .created_at_us = txo_rows_i64(rows, r, AUDIT_PENDING_CREATED_US),
                .detail = txo_rows_str(rows, r, AUDIT_PENDING_LAST_ERROR, NULL),
            };
            txo__audit_report(a, &f);
            after_created = f.created_at_us;
            after_id = f.event_id;
        }
        txo_rows_free(rows);
        if (rc != 0 || n < PAGE_ROWS)
            return rc;
    }
}

/* No event waits to be published (PENDING, or PROCESSING under a lease) longer than the
 * threshold, in or out of the window. */
static int check_pending(struct audit *a, struct txo_error *err)
{
    if (a->opts->pending_older_than_s == 0)
        return 0;
    int64_t cutoff_us = a->now_us - (int64_t)a->opts->pending_older_than_s * 1000000;
    int rc = pending_of(a, "PENDING", cutoff_us, err);
    if (rc == 0)
        rc = pending_of(a, "PROCESSING", cutoff_us, err);
    return rc;
}

/* ---- per-aggregate sequence gaps ---- */

/*
 * Every PUBLISHED event of the window was published after the event it follows in its
 * aggregate (prev_sequence, numbered by the database's trigger): the order a consumer checks.
 * A finding names the event, its predecessor's state and why (AUDIT_SQL_GAPS_*). At most
 * max_events findings are read.
 */
static int check_sequence_gaps(struct audit *a, struct txo_error *err)
{
    const struct txo_audit_opts *o = a->opts;
    struct txo_rows *rows = NULL;
    int rc;
    if (o->to_id > 0) {
        struct txo_param p[] = {txo_p_i64(o->from_id), txo_p_i64(o->to_id),
                                txo_p_i64((int64_t)o->max_events)};
        rc = txo_db_query(a->db, AUDIT_SQL_GAPS_IDS, p, TXO_ARRAY_LEN(p), &rows, err);
    } else {
        struct txo_param p[] = {txo_p_i64(o->since_us), txo_p_i64(o->until_us),
                                txo_p_i64((int64_t)o->max_events)};
        rc = txo_db_query(a->db, AUDIT_SQL_GAPS_TIME, p, TXO_ARRAY_LEN(p), &rows, err);
    }
    if (rc < 0) {
        txo_error_wrap(err, "audit: reading the sequence of the window's events");
        return rc;
    }
    for (size_t r = 0; r < txo_rows_count(rows); r++) {
        const char *prev_status = txo_rows_str(rows, r, AUDIT_GAP_PREV_STATUS, NULL);
        char detail[512];
        snprintf(detail, sizeof(detail), "%s/%s: sequence %" PRId64 " follows %" PRId64 ", %s",
                 txo_rows_str(rows, r, AUDIT_GAP_AGGREGATE_TYPE, NULL),
                 txo_rows_str(rows, r, AUDIT_GAP_AGGREGATE_ID, NULL),
                 txo_rows_i64(rows, r, AUDIT_GAP_SEQUENCE),
                 txo_rows_i64(rows, r, AUDIT_GAP_PREV_SEQUENCE),
                 prev_status != NULL && strcmp(prev_status, "PUBLISHED") == 0
                     ? "which was published after it"
                     : "which is not published");
        struct txo_audit_finding f = {
            .kind = TXO_AUDIT_SEQUENCE_GAP,
            .event_id = txo_rows_i64(rows, r, AUDIT_GAP_ID),
            .key = txo_rows_str(rows, r, AUDIT_GAP_KEY, NULL),
            .status = prev_status,
            .published_at_us = txo_rows_i64(rows, r, AUDIT_GAP_PUBLISHED_US),
            .detail = detail,
        };
        txo__audit_report(a, &f);
    }
    txo_rows_free(rows);
    return 0;
}

/* ---- the audit ---- */

typedef int (*check_fn)(struct audit *a, struct txo_error *err);

static const struct {
    const char *name;
    check_fn run;
    bool needs_broker;
} checks[] = {
    {"pending", check_pending, false},
    {"broker", txo__audit_check_broker, true},
    {"sequence", check_sequence_gaps, false},
};

static int check_opts(const struct txo_audit_opts *o, struct txo_error *err)
{
    if (o == NULL)
        return txo_error_set(err, TXO_EINVAL, "audit: options are required");
    if (o->to_id > 0 && (o->from_id < 0 || o->from_id > o->to_id))
        return txo_error_set(err, TXO_EINVAL,
                             "audit: the id window %" PRId64 "..%" PRId64 " is empty", o->from_id,
                             o->to_id);
    if (o->to_id <= 0 && o->since_us >= o->until_us)
        return txo_error_set(err, TXO_EINVAL,
                             "audit: the time window must end after it starts (since < until)");
    if (o->clock_skew_ms < 0 || o->max_events == 0)
        return txo_error_set(err, TXO_EINVAL,
                             "audit: clock_skew_ms must be >= 0 and max_events >= 1");
    return 0;
}

int txo_audit_outbox(struct txo_db *db, struct txo_history *broker,
                     const struct txo_audit_opts *opts, struct txo_audit_result *out,
                     struct txo_error *err)
{
    if (db == NULL || out == NULL)
        return txo_error_set(err, TXO_EINVAL, "audit: db and out are required");
    memset(out, 0, sizeof(*out));
    out->broker_held_from_us = TXO_HISTORY_ALL;
    out->outbox_held_from_us = TXO_HISTORY_ALL;
    int rc = check_opts(opts, err);
    if (rc != 0)
        return rc;
    struct audit a = {
        .db = db,
        .broker = broker,
        .opts = opts,
        .out = out,
        .skew_us = opts->clock_skew_ms * 1000,
    };
    struct txo_rows *rows = NULL;
    rc = txo_db_query(db, AUDIT_SQL_NOW, NULL, 0, &rows, err);
    if (rc == 0)
        a.now_us = out->now_us = txo_rows_i64(rows, 0, 0);
    txo_rows_free(rows);
    for (size_t i = 0; rc == 0 && i < TXO_ARRAY_LEN(checks); i++) {
        if (checks[i].needs_broker && broker == NULL)
            continue;
        int64_t t0 = txo_monotonic_ms();
        rc = checks[i].run(&a, err);
        TXO_LOG(TXO_LOG_DEBUG, "audit", "check done", TXO_KV_STR("check", checks[i].name),
                TXO_KV_I64("rc", rc), TXO_KV_I64("elapsed_ms", txo_monotonic_ms() - t0));
    }
    return rc;
}
