/*
 * The admin endpoints behind the dashboard's pages (txo/admin.h): the dead events (dead letters
 * grouped by the event they hold), a saga's page (its steps as a timeline and its compensation
 * plan) and the search box (a saga by id, and the service's own records through its finders).
 * admin.c routes to them and lends each its pooled connection.
 *
 * Text that came from the database or from another service (errors, payloads) is made valid
 * UTF-8 before it goes into a JSON string, and is sent in full: the page wraps long errors
 * instead of cutting them.
 *
 * Thread-safety: no shared state; each request uses the connection it was lent.
 */
#include "core/common.h"

#include <jansson.h>

#include "admin/admin_internal.h"
#include "core/text.h"
#include "saga/saga_table.h"
#include "saga/saga_timeline.h"
#include "txo/jansson.h"

/* The longest search text, in bytes. */
#define SEARCH_MAX 200

/* text as a JSON string, its invalid UTF-8 bytes replaced; NULL text is JSON null. */
static json_t *text_json(const char *text)
{
    if (text == NULL)
        return json_null();
    size_t cap = strlen(text) + 1;
    char *clean = txo_malloc(cap);
    if (clean == NULL)
        return NULL;
    txo__utf8_sanitize(text, clean, cap);
    json_t *s = json_string(clean);
    txo_free(clean);
    return s;
}

/* An RFC 3339 time, or null for "" (a NULL column). */
static json_t *time_json(const char *at)
{
    return at != NULL && at[0] != '\0' ? json_string(at) : json_null();
}

/* A payload as the JSON it holds, or as text when it is not JSON. */
static json_t *payload_json(const char *payload)
{
    json_t *doc = json_loads(payload, JSON_DECODE_ANY, NULL);
    return doc != NULL ? doc : text_json(payload);
}

static json_t *dead_event_json(const struct txo_dead_event *e)
{
    const struct txo_dead_letter *d = &e->last;
    return json_pack("{s:I,s:I,s:s,s:o,s:o,s:s,s:I,s:I,s:o,s:o}", "dead_letter_id",
                     (json_int_t)d->id, "source_event_id", (json_int_t)d->source_event_id,
                     "event_type", d->event_type, "payload", payload_json(d->payload), "error",
                     text_json(d->error), "died_at", d->created_at, "letters",
                     (json_int_t)e->letters, "replays", (json_int_t)e->replays, "last_replayed_at",
                     time_json(e->last_replayed_at), "event_status", time_json(e->status));
}

void txo__admin_list_dead_events(struct admin_call *c)
{
    int64_t after_id, max;
    if (!txo__admin_page_args(c, &after_id, &max))
        return;
    struct txo_dead_event *ev = NULL;
    size_t n = 0;
    int rc = txo_dlq_list_events(c->db, after_id, (size_t)max, &ev, &n, &c->err);
    if (rc != 0) {
        txo_http_response_fail(c->resp, rc, &c->err);
        return;
    }
    json_t *list = json_array();
    for (size_t i = 0; list != NULL && i < n; i++)
        json_array_append_new(list, dead_event_json(&ev[i]));
    int64_t next = n > 0 ? ev[n - 1].last.id : after_id;
    txo_dead_events_free(ev, n);
    txo_http_response_json(
        c->resp, 200,
        json_pack("{s:o,s:I}", "dead_events", list, "next_after_id", (json_int_t)next));
}

/* ---- GET /sagas/{id} ---- */

/* Whether the step's remote part may have taken effect, which makes it need undoing. */
static bool remote_may_have_run(const struct txo_saga_step_info *st)
{
    return st->remote == TXO_REMOTE_UNKNOWN || st->remote == TXO_REMOTE_DONE;
}

/*
 * The compensation plan, last step first, as the engine runs it (txo/saga.h): every step that
 * completed, or whose remote part may have taken effect, is undone in reverse order. Each entry
 * says what its undo is by the definition (def NULL: unknown to this service) and where it
 * stands: "to do", "running", "done" or "failed". A saga that COMPLETED or FAILED (with nothing
 * to undo) will compensate nothing: an empty plan.
 */
static json_t *compensation_plan(const struct txo_saga_info *info, const struct txo_saga_def *def)
{
    json_t *plan = json_array();
    if (info->status == TXO_SAGA_COMPLETED || info->status == TXO_SAGA_FAILED)
        return plan;
    for (size_t i = info->n_steps; plan != NULL && i > 0; i--) {
        const struct txo_saga_step_info *st = &info->steps[i - 1];
        const char *state = NULL;
        switch (st->status) {
        case TXO_STEP_COMPLETED:
            state = "to do";
            break;
        case TXO_STEP_COMPENSATING:
            state = "running";
            break;
        case TXO_STEP_COMPENSATED:
            state = "done";
            break;
        case TXO_STEP_COMPENSATION_FAILED:
            state = "failed";
            break;
        case TXO_STEP_RUNNING:
        case TXO_STEP_FAILED:
            state = remote_may_have_run(st) ? "to do" : NULL;
            break;
        case TXO_STEP_PENDING:
            break;
        }
        if (state == NULL)
            continue;
        const char *undo = "unknown (not a saga type this service runs)";
        unsigned k = st->step_order - 1;
        if (def != NULL && st->step_order >= 1 && k < def->n_steps) {
            const struct txo_saga_step_def *sd = &def->steps[k];
            bool local = sd->compensate != NULL, remote = sd->remote_compensate != NULL;
            undo = local && remote ? "local and remote"
                   : local         ? "local"
                   : remote        ? "remote"
                                   : "nothing to undo";
        }
        json_array_append_new(plan,
                              json_pack("{s:I,s:s,s:s,s:s}", "step", (json_int_t)st->step_order,
                                        "name", st->name, "undo", undo, "state", state));
    }
    return plan;
}

/* Adds the saga's times and each step's to doc, the document of txo_saga_info_json(). */
static int add_times(json_t *doc, const struct txo__saga_times *t)
{
    int rc = json_object_set_new(doc, "created_at", time_json(t->created_at)) |
             json_object_set_new(doc, "updated_at", time_json(t->updated_at)) |
             json_object_set_new(doc, "deadline_at", time_json(t->deadline_at));
    json_t *steps = json_object_get(doc, "steps");
    for (size_t i = 0; rc == 0 && i < json_array_size(steps); i++) {
        json_t *step = json_array_get(steps, i);
        json_int_t order = json_integer_value(json_object_get(step, "step"));
        for (size_t j = 0; j < t->n_steps; j++) {
            const struct txo__saga_step_times *st = &t->steps[j];
            if ((json_int_t)st->step_order != order)
                continue;
            rc = json_object_set_new(step, "updated_at", time_json(st->updated_at)) |
                 json_object_set_new(step, "deadline_at", time_json(st->deadline_at)) |
                 json_object_set_new(step, "try_deadline", time_json(st->try_deadline));
        }
    }
    return rc == 0 ? 0 : TXO_ENOMEM;
}

/*
 * GET /sagas/{id}: the document of txo_saga_info_json() (as `txo saga show` prints it), plus
 * the saga's times (created, last change, deadline), each step's (last change, deadline, the
 * current call's deadline), how long it has been idle, and its compensation plan.
 */
void txo__admin_get_saga(struct admin_call *c)
{
    struct txo_saga_info info;
    const struct txo_saga_def *def;
    if (!txo__admin_load_saga(c, &info, &def))
        return;
    struct txo__saga_times times;
    int rc = txo__saga_times_load(c->db, c->m.saga_id, &times, &c->err);
    if (rc != 0) {
        txo_saga_info_release(&info);
        txo_http_response_fail(c->resp, rc, &c->err);
        return;
    }
    json_t *doc = NULL;
    char *text = txo_saga_info_json(&info, &c->err);
    if (text != NULL)
        doc = json_loads(text, 0, NULL);
    txo_free(text);
    if (doc == NULL || add_times(doc, &times) != 0 ||
        json_object_set_new(doc, "idle_seconds", json_integer((json_int_t)info.idle_s)) != 0 ||
        json_object_set_new(doc, "compensation_plan", compensation_plan(&info, def)) != 0) {
        json_decref(doc);
        doc = NULL; /* answered 500 */
    }
    txo__saga_times_release(&times);
    txo_saga_info_release(&info);
    txo_http_response_json(c->resp, 200, doc);
}

/* ---- GET /search ---- */

/* The saga whose id is q, as a result; NULL with rc 0 when there is none. */
static json_t *find_saga(struct txo_db *db, const char *q, int *rc, struct txo_error *err)
{
    *rc = 0;
    if (!txo__admin_is_saga_id(q, strlen(q)))
        return NULL;
    struct txo_saga_info info;
    int lrc = txo_saga_load(db, q, &info, err);
    if (lrc == TXO_ENOTFOUND)
        return NULL;
    if (lrc != 0) {
        *rc = lrc;
        return NULL;
    }
    json_t *r = json_pack("{s:s,s:s,s:s,s:s}", "kind", "saga", "id", info.id, "title", info.type,
                          "status", txo_saga_status_name(info.status));
    txo_saga_info_release(&info);
    return r;
}

/* What finder f finds for q, as a result; NULL with rc 0 when nothing. */
static json_t *find_record(const struct txo_admin_finder *f, struct txo_db *db, const char *q,
                           int *rc, struct txo_error *err)
{
    char *text = NULL;
    *rc = f->find(f->arg, db, q, &text, err);
    if (*rc == TXO_ENOTFOUND) {
        *rc = 0;
        return NULL;
    }
    if (*rc != 0)
        return NULL;
    json_t *record = text != NULL ? json_loads(text, 0, NULL) : NULL;
    txo_free(text);
    if (!json_is_object(record)) {
        json_decref(record);
        *rc = txo_error_set(err, TXO_EIO, "search: the %s finder answered no JSON object", f->kind);
        return NULL;
    }
    return json_pack("{s:s,s:s,s:o}", "kind", f->kind, "id", q, "record", record);
}

/*
 * GET /search?q=: the saga whose id is q, then each finder's record for q, in the order they
 * were given. {"query": q, "results": [...]}, empty when nothing matched.
 */
void txo__admin_search(struct admin_call *c)
{
    const char *q = txo_http_request_arg(c->req, "q");
    if (txo_http_request_arg_count(c->req, "q") != 1 || q == NULL || q[0] == '\0' ||
        strlen(q) > SEARCH_MAX) {
        txo_http_response_error(c->resp, 400, "invalid_request",
                                "q must be given once, 1..200 bytes");
        return;
    }
    char clean[SEARCH_MAX + 1];
    txo__utf8_sanitize(q, clean, sizeof(clean));
    int rc = 0;
    json_t *results = json_array();
    json_t *saga = find_saga(c->db, clean, &rc, &c->err);
    if (saga != NULL)
        json_array_append_new(results, saga);
    for (size_t i = 0; rc == 0 && i < c->a->opts.n_finders; i++) {
        json_t *r = find_record(&c->a->opts.finders[i], c->db, clean, &rc, &c->err);
        if (r != NULL)
            json_array_append_new(results, r);
    }
    if (rc != 0) {
        json_decref(results);
        txo_http_response_fail(c->resp, rc, &c->err);
        return;
    }
    txo_http_response_json(c->resp, 200,
                           json_pack("{s:s,s:o}", "query", clean, "results", results));
}
