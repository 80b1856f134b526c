#include "core/common.h"

/*
 * The outbox against the broker (txo__audit_check_broker, audit_internal.h): the missing and
 * extra checks of txo/audit.h, and when each of them cannot tell.
 *
 * 1. The window's PUBLISHED events, a page at a time, into a key set (their idempotency keys)
 *    with, per key, the row's id, created_at, published_at and how many copies the broker has.
 * 2. The broker is read over every time a copy of those events can have: a copy is stored after
 *    its row was created and before the row was marked PUBLISHED, so from the window's start
 *    (or its oldest created_at) to its end (or its latest published_at), widened by the clock
 *    skew at both ends. A message whose key is in the set counts as a copy; one stored in the
 *    window's own time span (the created_at range, or for an id window the span of its events)
 *    that matches no event of the window is kept aside, a stray.
 * 3. An event with no copy is missing, unless the broker may have dropped it: when the broker
 *    no longer holds what was stored before some time (span.held_from_us) and the event's copy
 *    could be older than that (created_at - skew before it), it is broker_trimmed instead.
 * 4. The strays' keys are looked up in the whole outbox (any status: an event created before
 *    the window but published in it, a row the relay has not marked yet): found, they are
 *    fine. A stray without a key is extra (every publisher sends one). A stray whose key no
 *    row has is extra, unless the outbox may have deleted its row: txo clean deletes PUBLISHED
 *    rows by published_at, oldest first, so while a PUBLISHED row published at or before
 *    (stray time - skew) is still there, no row that could have made that stray is gone. When
 *    there is none, the oldest published_at left is the outbox's horizon and strays stored
 *    before it (plus the skew) are outbox_trimmed.
 *
 * Memory: the window's keys and the strays, bounded by opts->max_events each; everything else
 * a page or a lookup batch at a time. Thread-safety: one audit, one thread.
 */

#include "audit/audit_internal.h"
#include "audit/audit_sql.h"

#define PAGE_ROWS  5000
#define LOOKUP_MAX 256 /* keys per IN list */

/* An event of the window; same index as its key in compare.window. */
struct event {
    int64_t id;
    int64_t created_us;
    int64_t published_us;
    uint32_t copies;
};

/* A broker message of the window's span that matched no event of the window. */
struct stray {
    size_t key; /* index in compare.unmatched, AUDIT_NO_KEY when the message had none */
    const char *position;
    int64_t time_us;
};

struct compare {
    struct audit *a;
    struct audit_keys window; /* the window's events' keys */
    struct event *events;
    size_t cap_events;
    int64_t min_created_us, max_published_us;
    int64_t span_from_us, span_to_us; /* strays are kept from this span of broker time */
    struct audit_keys unmatched;      /* the strays' keys */
    bool *in_outbox;                  /* per unmatched key, after the lookup */
    struct stray *strays;
    size_t n_strays, cap_strays;
    struct audit_arena positions;
    bool over_limit; /* the read stopped at max_events strays */
};

static void compare_release(struct compare *c)
{
    txo__audit_keys_release(&c->window);
    txo__audit_keys_release(&c->unmatched);
    txo__audit_arena_release(&c->positions);
    txo_free(c->events);
    txo_free(c->in_outbox);
    txo_free(c->strays);
}

static int too_many(struct compare *c, const char *what, struct txo_error *err)
{
    return txo_error_set(err, TXO_EINVAL,
                         "audit: more than %zu %s: narrow the window (or raise the limit, "
                         "max_events)",
                         c->a->opts->max_events, what);
}

/* ---- 1. the window's events ---- */

static int add_event(struct compare *c, const struct txo_rows *rows, size_t r,
                     struct txo_error *err)
{
    size_t len = 0;
    const char *key = txo_rows_str(rows, r, AUDIT_WINDOW_KEY, &len);
    if (key == NULL)
        return 0; /* NOT NULL in the schema */
    if (c->window.n >= c->a->opts->max_events)
        return too_many(c, "PUBLISHED events in the window", err);
    if (TXO_ARRAY_RESERVE(c->events, c->cap_events, c->window.n + 1, 1024) < 0)
        return txo_error_set(err, TXO_ENOMEM, "audit: out of memory for the window");
    size_t i = 0;
    bool added = false;
    if (txo__audit_keys_add(&c->window, key, len, &i, &added) < 0)
        return txo_error_set(err, TXO_ENOMEM, "audit: out of memory for the window");
    if (!added)
        return 0; /* the key is unique: a row seen twice */
    struct event *e = &c->events[i];
    e->id = txo_rows_i64(rows, r, AUDIT_WINDOW_ID);
    e->created_us = txo_rows_i64(rows, r, AUDIT_WINDOW_CREATED_US);
    e->published_us = txo_rows_is_null(rows, r, AUDIT_WINDOW_PUBLISHED_US)
                          ? e->created_us
                          : txo_rows_i64(rows, r, AUDIT_WINDOW_PUBLISHED_US);
    e->copies = 0;
    if (c->window.n == 1 || e->created_us < c->min_created_us)
        c->min_created_us = e->created_us;
    if (c->window.n == 1 || e->published_us > c->max_published_us)
        c->max_published_us = e->published_us;
    return 0;
}

/* One page of the window after the cursor (the last row added), or the first one. */
static int window_page(struct compare *c, bool first, struct txo_rows **rows, struct txo_error *err)
{
    const struct txo_audit_opts *o = c->a->opts;
    const struct event *last = first ? NULL : &c->events[c->window.n - 1];
    if (o->to_id > 0) {
        struct txo_param p[] = {txo_p_i64(last != NULL ? last->id + 1 : o->from_id),
                                txo_p_i64(o->to_id), txo_p_i64(PAGE_ROWS)};
        return txo_db_query(c->a->db, AUDIT_SQL_WINDOW_IDS, p, TXO_ARRAY_LEN(p), rows, err);
    }
    if (last == NULL) {
        struct txo_param p[] = {txo_p_i64(o->since_us), txo_p_i64(o->until_us),
                                txo_p_i64(PAGE_ROWS)};
        return txo_db_query(c->a->db, AUDIT_SQL_WINDOW_TIME_FIRST, p, TXO_ARRAY_LEN(p), rows, err);
    }
    struct txo_param p[] = {txo_p_i64(o->since_us),      txo_p_i64(o->until_us),
                            txo_p_i64(last->created_us), txo_p_i64(last->created_us),
                            txo_p_i64(last->id),         txo_p_i64(PAGE_ROWS)};
    return txo_db_query(c->a->db, AUDIT_SQL_WINDOW_TIME_AFTER, p, TXO_ARRAY_LEN(p), rows, err);
}

static int load_window(struct compare *c, struct txo_error *err)
{
    for (bool first = true;; first = false) {
        struct txo_rows *rows = NULL;
        int rc = window_page(c, first, &rows, err);
        size_t n = rc == 0 ? txo_rows_count(rows) : 0;
        for (size_t r = 0; rc == 0 && r < n; r++)
            rc = add_event(c, rows, r, err);
        txo_rows_free(rows);
        if (rc != 0 || n < PAGE_ROWS || c->window.n == 0)
            return rc;
    }
}

/* ---- 2. the broker ---- */

static int add_stray(struct compare *c, const struct txo_history_msg *m)
{
    if (c->n_strays >= c->a->opts->max_events) {
        c->over_limit = true;
        return TXO_EINVAL;
    }
    if (TXO_ARRAY_RESERVE(c->strays, c->cap_strays, c->n_strays + 1, 64) < 0)
        return TXO_ENOMEM;
    struct stray *s = &c->strays[c->n_strays];
    s->key = AUDIT_NO_KEY;
    bool added = false;
    if (m->key != NULL &&
        txo__audit_keys_add(&c->unmatched, m->key, strlen(m->key), &s->key, &added) < 0)
        return TXO_ENOMEM;
    s->position = txo__audit_arena_strndup(&c->positions, m->position, strlen(m->position));
    if (s->position == NULL)
        return TXO_ENOMEM;
    s->time_us = m->time_us;
    c->n_strays++;
    return 0;
}

static int on_message(void *arg, const struct txo_history_msg *m)
{
    struct compare *c = arg;
    size_t i =
        m->key != NULL ? txo__audit_keys_find(&c->window, m->key, strlen(m->key)) : AUDIT_NO_KEY;
    if (i != AUDIT_NO_KEY) {
        if (++c->events[i].copies > 1)
            c->a->out->duplicates++;
        return 0;
    }
    if (m->time_us < c->span_from_us || m->time_us > c->span_to_us)
        return 0; /* outside the window: another window's business */
    return add_stray(c, m);
}

static int read_broker(struct compare *c, struct txo_error *err)
{
    struct audit *a = c->a;
    struct txo_audit_result *out = a->out;
    struct txo_history_span span;
    int rc =
        txo_history_read(a->broker, out->read_from_us, out->read_to_us, on_message, c, &span, err);
    out->messages = span.messages;
    out->broker_held_from_us = span.held_from_us;
    snprintf(out->broker_held_from_where, sizeof(out->broker_held_from_where), "%s",
             span.held_from_where);
    if (rc == TXO_EINVAL && c->over_limit)
        return too_many(c, "broker messages in the window that match no event of it", err);
    if (rc == TXO_ENOMEM)
        return txo_error_set(err, TXO_ENOMEM, "audit: out of memory for the broker's messages");
    return rc;
}

/* ---- 3. missing ---- */

static void report_missing(struct compare *c)
{
    struct audit *a = c->a;
    int64_t held_from = a->out->broker_held_from_us;
    for (size_t i = 0; i < c->window.n; i++) {
        const struct event *e = &c->events[i];
        if (e->copies > 0)
            continue;
        bool maybe_dropped = held_from != TXO_HISTORY_ALL && e->created_us - a->skew_us < held_from;
        struct txo_audit_finding f = {
            .kind = maybe_dropped ? TXO_AUDIT_BROKER_TRIMMED : TXO_AUDIT_MISSING,
            .event_id = e->id,
            .key = c->window.keys[i],
            .created_at_us = e->created_us,
            .published_at_us = e->published_us,
        };
        txo__audit_report(a, &f);
    }
}

/* ---- 4. extra ---- */

/* Marks which of the unmatched keys [from, from + n) an outbox row has. */
static int lookup_batch(struct compare *c, size_t from, size_t n, struct txo_error *err)
{
    size_t slots = txo_sql_in_list_size(n);
    char *sql = txo_sql_in_list(AUDIT_SQL_KEYS_IN, slots, "");
    struct txo_param *p = txo_calloc(slots, sizeof(*p));
    int rc = 0;
    if (sql == NULL || p == NULL)
        rc = txo_error_set(err, TXO_ENOMEM, "audit: out of memory for a lookup");
    for (size_t k = 0; rc == 0 && k < slots; k++)
        p[k] = txo_p_str(c->unmatched.keys[from + (k < n ? k : n - 1)]);
    struct txo_rows *rows = NULL;
    if (rc == 0)
        rc = txo_db_query(c->a->db, sql, p, slots, &rows, err);
    for (size_t r = 0; rc == 0 && r < txo_rows_count(rows); r++) {
        size_t len = 0;
        const char *key = txo_rows_str(rows, r, 0, &len);
        size_t i = key != NULL ? txo__audit_keys_find(&c->unmatched, key, len) : AUDIT_NO_KEY;
        if (i != AUDIT_NO_KEY)
            c->in_outbox[i] = true;
    }
    txo_rows_free(rows);
    txo_free(p);
    txo_free(sql);
    return rc;
}

/*
 * The outbox's horizon for strays from first_us to last_us (broker time): TXO_HISTORY_ALL when
 * it holds every row that could have made them, else the oldest published_at it has left.
 */
static int outbox_horizon(struct compare *c, int64_t first_us, int64_t last_us, int64_t *held_from,
                          struct txo_error *err)
{
    struct audit *a = c->a;
    int64_t t = first_us - a->skew_us;
    struct txo_param p[] = {txo_p_i64(t), txo_p_i64(t)};
    struct txo_rows *rows = NULL;
    int rc = txo_db_query(a->db, AUDIT_SQL_PUBLISHED_BY, p, TXO_ARRAY_LEN(p), &rows, err);
    bool intact = rc == 0 && txo_rows_count(rows) > 0;
    txo_rows_free(rows);
    if (rc != 0 || intact) {
        *held_from = TXO_HISTORY_ALL;
        return rc;
    }
    struct txo_param q[] = {txo_p_i64(last_us + a->skew_us)};
    rc = txo_db_query(a->db, AUDIT_SQL_OLDEST_PUBLISHED, q, TXO_ARRAY_LEN(q), &rows, err);
    if (rc == 0)
        *held_from = txo_rows_count(rows) > 0 && !txo_rows_is_null(rows, 0, 0)
                         ? txo_rows_i64(rows, 0, 0)
                         : last_us + a->skew_us + 1; /* none published by then: holds nothing */
    txo_rows_free(rows);
    return rc;
}

static int report_extra(struct compare *c, struct txo_error *err)
{
    struct audit *a = c->a;
    if (c->unmatched.n > 0) {
        c->in_outbox = txo_calloc(c->unmatched.n, sizeof(*c->in_outbox));
        if (c->in_outbox == NULL)
            return txo_error_set(err, TXO_ENOMEM, "audit: out of memory for the lookups");
    }
    for (size_t from = 0; from < c->unmatched.n; from += LOOKUP_MAX) {
        size_t n = c->unmatched.n - from < LOOKUP_MAX ? c->unmatched.n - from : LOOKUP_MAX;
        int rc = lookup_batch(c, from, n, err);
        if (rc != 0)
            return rc;
    }
    /* The strays whose key no row has: what the outbox's horizon may explain. */
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (size_t i = 0; i < c->n_strays; i++) {
        const struct stray *s = &c->strays[i];
        if (s->key == AUDIT_NO_KEY || c->in_outbox[s->key])
            continue;
        first = s->time_us < first ? s->time_us : first;
        last = s->time_us > last ? s->time_us : last;
    }
    int64_t held_from = TXO_HISTORY_ALL;
    if (first <= last) {
        int rc = outbox_horizon(c, first, last, &held_from, err);
        if (rc != 0)
            return rc;
    }
    a->out->outbox_held_from_us = held_from;
    for (size_t i = 0; i < c->n_strays; i++) {
        const struct stray *s = &c->strays[i];
        bool has_key = s->key != AUDIT_NO_KEY;
        if (has_key && c->in_outbox[s->key])
            continue;
        bool maybe_deleted =
            has_key && held_from != TXO_HISTORY_ALL && s->time_us - a->skew_us < held_from;
        struct txo_audit_finding f = {
            .kind = maybe_deleted ? TXO_AUDIT_OUTBOX_TRIMMED : TXO_AUDIT_EXTRA,
            .key = has_key ? c->unmatched.keys[s->key] : NULL,
            .broker_time_us = s->time_us,
            .position = s->position,
        };
        txo__audit_report(a, &f);
    }
    return 0;
}

/* ---- the check ---- */

/* The broker time span strays are kept from, and the span read. False: nothing to compare. */
static bool spans(struct compare *c)
{
    struct audit *a = c->a;
    const struct txo_audit_opts *o = a->opts;
    struct txo_audit_result *out = a->out;
    if (o->to_id > 0) {
        if (c->window.n == 0)
            return false; /* an id window without events has no time span */
        c->span_from_us = c->min_created_us;
        c->span_to_us = c->max_published_us;
    } else {
        c->span_from_us = o->since_us;
        c->span_to_us = o->until_us - 1;
    }
    out->window_from_us = c->span_from_us;
    out->window_to_us = c->span_to_us;
    int64_t from = c->span_from_us;
    int64_t to = c->span_to_us;
    if (c->window.n > 0 && c->min_created_us < from)
        from = c->min_created_us;
    if (c->window.n > 0 && c->max_published_us > to)
        to = c->max_published_us;
    out->read_from_us = from - a->skew_us;
    out->read_to_us = to + a->skew_us;
    return true;
}

int txo__audit_check_broker(struct audit *a, struct txo_error *err)
{
    struct compare c;
    memset(&c, 0, sizeof(c));
    c.a = a;
    int rc = load_window(&c, err);
    a->out->events = c.window.n;
    if (rc == 0 && spans(&c)) {
        rc = read_broker(&c, err);
        if (rc == 0)
            report_missing(&c);
        if (rc == 0)
            rc = report_extra(&c, err);
    }
    compare_release(&c);
    return rc;
}
