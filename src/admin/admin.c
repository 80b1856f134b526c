/*
 * The operator's API (txo/admin.h): the routes over the library's tables, their table, and
 * the dispatch a service hands its other requests to.
 *
 * The routes are prefix [+ parameter + suffix]; the parameter is a dead letter's id or a saga's
 * id. The first route whose path and method match answers; a path that matches with another
 * method is 405. A route that needs the token answers 401 without it before anything else, so
 * an unauthorised client learns nothing, not even which methods a path takes.
 *
 * Thread-safety: struct txo_admin is read-only once made; each request borrows its own pooled
 * connection, and a saga retry makes its own ctx->user.
 */
#include "core/common.h"

#include <jansson.h>

#include "core/text.h"
#include "txo/jansson.h"
#include "admin/admin_internal.h"
#include "saga/saga_table.h"

/* Copies the saga id after prefix ("/sagas/<uuid>" + suffix) into out. */
static bool path_saga(const char *path, const char *prefix, const char *suffix,
                      char out[TXO_SAGA_ID_LEN])
{
    size_t plen = strlen(prefix);
    size_t slen = strlen(suffix);
    size_t len = strlen(path);
    if (strncmp(path, prefix, plen) != 0 || len < plen + slen ||
        strcmp(path + len - slen, suffix) != 0)
        return false;
    size_t idlen = len - plen - slen;
    if (!txo__admin_is_saga_id(path + plen, idlen))
        return false;
    memcpy(out, path + plen, idlen);
    out[idlen] = '\0';
    return true;
}

bool txo__admin_is_saga_id(const char *text, size_t len)
{
    if (len == 0 || len >= TXO_SAGA_ID_LEN)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
              c == '-'))
            return false;
    }
    return true;
}

/*
 * POST /sagas/{id}/retry: the saga's type picks its definition among those the service
 * registered (the worker's table), and the retry runs it with a ctx->user made for this call,
 * as a worker's runner would.
 */
static void retry_saga(struct admin_call *c)
{
    const char *id = c->m.saga_id;
    struct txo_saga_info info;
    const struct txo_saga_def *def;
    if (!txo__admin_load_saga(c, &info, &def))
        return;
    int rc = 0;
    if (def == NULL)
        rc = txo_error_set(&c->err, TXO_ESTATE, "saga %s: its type %s is not one this service runs",
                           id, info.type);
    txo_saga_info_release(&info);
    if (rc != 0) {
        txo_http_response_fail(c->resp, rc, &c->err);
        return;
    }
    void *user = c->a->opts.saga_user_arg;
    if (c->a->opts.saga_user_new != NULL) {
        user = c->a->opts.saga_user_new(c->a->opts.saga_user_arg);
        if (user == NULL) {
            txo_http_response_error(c->resp, 500, "internal", "out of memory for the saga's run");
            return;
        }
    }
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    rc = txo_saga_retry(c->db, def, id, &c->a->opts.saga, user, &final, &c->err);
    if (c->a->opts.saga_user_new != NULL && c->a->opts.saga_user_free != NULL)
        c->a->opts.saga_user_free(user);
    if (rc != 0) {
        txo_http_response_fail(c->resp, rc, &c->err);
        return;
    }
    txo_http_response_json(
        c->resp, 200, json_pack("{s:s,s:s}", "saga_id", id, "status", txo_saga_status_name(final)));
}

static void outbox_stats(struct admin_call *c)
{
    struct txo_outbox_stats st;
    int rc = txo_outbox_get_stats(c->db, &st, &c->err);
    if (rc != 0) {
        txo_http_response_fail(c->resp, rc, &c->err);
        return;
    }
    txo_http_response_json(
        c->resp, 200,
        json_pack("{s:I,s:I,s:I,s:I,s:I,s:f,s:I,s:f}", "pending", (json_int_t)st.pending,
                  "processing", (json_int_t)st.processing, "published", (json_int_t)st.published,
                  "failed", (json_int_t)st.failed, "dead_letters", (json_int_t)st.dead_letters,
                  "oldest_pending_age_seconds", st.oldest_pending_age_s, "retry_waiting",
                  (json_int_t)st.retry_waiting, "oldest_due_age_seconds", st.oldest_due_age_s));
}

bool txo__admin_load_saga(struct admin_call *c, struct txo_saga_info *info,
                          const struct txo_saga_def **def)
{
    int rc = txo_saga_load(c->db, c->m.saga_id, info, &c->err);
    if (rc != 0) {
        txo_http_response_fail(c->resp, rc, &c->err);
        return false;
    }
    *def = txo__saga_table_find(c->a->opts.sagas, c->a->opts.n_sagas, info->type);
    return true;
}

bool txo__admin_parse_int64(const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* A listing's ?limit=: 1..1000, 50 when not given. False when it is bad: resp then says so. */
static bool limit_arg(struct admin_call *c, int64_t *max)
{
    const char *limit = txo_http_request_arg(c->req, "limit");
    *max = 50;
    if (limit != NULL && !txo__admin_parse_int64(limit, 1, 1000, max)) {
        txo_http_response_error(c->resp, 400, "invalid_request", "limit must be 1..1000");
        return false;
    }
    return true;
}

bool txo__admin_page_args(struct admin_call *c, int64_t *after_id, int64_t *max)
{
    if (txo_http_request_arg_count(c->req, "after_id") > 1 ||
        txo_http_request_arg_count(c->req, "limit") > 1) {
        txo_http_response_error(c->resp, 400, "invalid_request",
                                "after_id and limit may be given once each");
        return false;
    }
    const char *after = txo_http_request_arg(c->req, "after_id");
    *after_id = 0;
    if (after != NULL && !txo__admin_parse_int64(after, 0, INT64_MAX, after_id)) {
        txo_http_response_error(c->resp, 400, "invalid_request",
                                "after_id must be an integer 0..2^63-1");
        return false;
    }
    return limit_arg(c, max);
}

static void list_dlq(struct admin_call *c)
{
    int64_t after_id, max;
    if (!txo__admin_page_args(c, &after_id, &max))
        return;
    struct txo_dead_letter *dl = NULL;
    size_t n = 0;
    int rc = txo_dlq_list(c->db, after_id, (size_t)max, &dl, &n, &c->err);
    if (rc != 0) {
        txo_http_response_fail(c->resp, rc, &c->err);
        return;
    }
    json_t *list = json_array();
    for (size_t i = 0; list != NULL && i < n; i++) {
        json_t *payload = json_loads(dl[i].payload, JSON_DECODE_ANY, NULL);
        json_array_append_new(
            list, json_pack("{s:I,s:I,s:s,s:o,s:s,s:s,s:s?,s:I}", "id", (json_int_t)dl[i].id,
                            "source_event_id", (json_int_t)dl[i].source_event_id, "event_type",
                            dl[i].event_type, "payload", payload != NULL ? payload : json_null(),
                            "error", dl[i].error, "created_at", dl[i].created_at, "replayed_at",
                            dl[i].replayed_at, "replay_count", (json_int_t)dl[i].replay_count));
    }
    int64_t next = n > 0 ? dl[n - 1].id : after_id;
    txo_dead_letters_free(dl, n);
    txo_http_response_json(
        c->resp, 200,
        json_pack("{s:o,s:I}", "dead_letters", list, "next_after_id", (json_int_t)next));
}

static void list_parked(struct admin_call *c)
{
    if (txo_http_request_arg_count(c->req, "limit") > 1) {
        txo_http_response_error(c->resp, 400, "invalid_request", "limit may be given once");
        return;
    }
    int64_t max;
    if (!limit_arg(c, &max))
        return;
    struct txo_relay_parked *p = txo_calloc((size_t)max, sizeof(*p));
    if (p == NULL) {
        txo_http_response_error(c->resp, 500, "internal",
                                "out of memory for the parked aggregates");
        return;
    }
    size_t n = 0;
    int rc = txo_relay_list_parked(c->db, p, (size_t)max, &n, &c->err);
    if (rc != 0) {
        txo_free(p);
        txo_http_response_fail(c->resp, rc, &c->err);
        return;
    }
    json_t *list = json_array();
    for (size_t i = 0; list != NULL && i < n; i++) {
        /* A broker's reason may hold bytes that are not UTF-8, and an aggregate id too:
         * json_string() refuses those, so they go out as null. */
        json_t *error = p[i].last_error[0] != '\0' ? json_string(p[i].last_error) : NULL;
        json_t *agg_id = json_string(p[i].aggregate_id);
        json_array_append_new(
            list,
            json_pack("{s:s,s:o,s:I,s:s,s:I,s:o,s:I}", "aggregate_type", p[i].aggregate_type,
                      "aggregate_id", agg_id != NULL ? agg_id : json_null(), "event_id",
                      (json_int_t)p[i].event_id, "status", txo_outbox_status_name(p[i].status),
                      "attempts", (json_int_t)p[i].attempts, "last_error",
                      error != NULL ? error : json_null(), "waiting", (json_int_t)p[i].waiting));
    }
    txo_free(p);
    txo_http_response_json(c->resp, 200,
                           json_pack("{s:o,s:I}", "parked", list, "limit", (json_int_t)max));
}

/* POST /dlq/{id}/replay and /skip: the same rules (txo/dlq.h), the same answers. */
static void act_dlq(struct admin_call *c, bool skip)
{
    int64_t id = c->m.id;
    int rc = skip ? txo_dlq_skip(c->db, id, &c->err) : txo_dlq_replay(c->db, id, &c->err);
    if (rc != 0) {
        txo_http_response_fail(c->resp, rc, &c->err);
        return;
    }
    txo_http_response_json(
        c->resp, 200,
        json_pack("{s:I,s:s}", "id", (json_int_t)id, "status", skip ? "SKIPPED" : "REPLAYED"));
}

static void replay_dlq(struct admin_call *c)
{
    act_dlq(c, false);
}

static void skip_dlq(struct admin_call *c)
{
    act_dlq(c, true);
}

/* ---- the operator's dashboard: GET /sagas, GET /processes, GET /ui ---- */

/* Sagas listed by GET /sagas: at most this many of each kind. */
#define DASHBOARD_SAGAS_MAX 50
/* A RUNNING/COMPENSATING saga that no live owner moved for this long is stuck (the same rule
 * as the txo_sagas_stuck metric). */
#define DASHBOARD_STUCK_IDLE_S 60
/* A process whose last heartbeat (every 5 s) is older than this is not alive. */
#define DASHBOARD_ALIVE_S 15

/*
 * The step an operator should look at: the one whose compensation failed, else the one that
 * failed, else the one in progress (where a stuck saga stopped), else the last with an error.
 * NULL when none of them.
 */
static const struct txo_saga_step_info *failing_step(const struct txo_saga_info *info)
{
    static const enum txo_step_status order[] = {TXO_STEP_COMPENSATION_FAILED, TXO_STEP_FAILED,
                                                 TXO_STEP_COMPENSATING, TXO_STEP_RUNNING};
    for (size_t k = 0; k < TXO_ARRAY_LEN(order); k++)
        for (size_t i = 0; i < info->n_steps; i++)
            if (info->steps[i].status == order[k])
                return &info->steps[i];
    for (size_t i = info->n_steps; i > 0; i--)
        if (info->steps[i - 1].error != NULL)
            return &info->steps[i - 1];
    return NULL;
}

/* One saga of the GET /sagas list, loaded with its steps; NULL when it is gone (rc 0) or on
 * an error (rc set). */
static json_t *saga_entry(struct txo_db *db, const struct txo_saga_ref *ref, bool stuck, int *rc,
                          struct txo_error *err)
{
    struct txo_saga_info info;
    *rc = txo_saga_load(db, ref->id, &info, err);
    if (*rc == TXO_ENOTFOUND) {
        *rc = 0; /* deleted between the list and the load */
        return NULL;
    }
    if (*rc != 0)
        return NULL;
    const struct txo_saga_step_info *s = failing_step(&info);
    json_t *step = json_null();
    if (s != NULL) {
        /* The error may quote another service's answer: made valid UTF-8 (and cut) for JSON. */
        char error[1024];
        if (s->error != NULL)
            txo__utf8_sanitize(s->error, error, sizeof(error));
        step = json_pack("{s:I,s:s,s:s,s:I,s:s?,s:I}", "step", (json_int_t)s->step_order, "name",
                         s->name, "status", txo_step_status_name(s->status), "attempts",
                         (json_int_t)s->attempts, "error", s->error != NULL ? error : NULL,
                         "error_code", (json_int_t)s->error_code);
    }
    /* A running saga past a deadline (a worker hung in a step): which one, where, how long. */
    json_t *deadline = json_null();
    if (ref->deadline != TXO_DEADLINE_NONE)
        deadline = json_pack("{s:s,s:s?,s:I}", "kind", txo_saga_deadline_name(ref->deadline),
                             "step", ref->step[0] != '\0' ? ref->step : NULL, "overdue_seconds",
                             (json_int_t)ref->overdue_s);
    json_t *e = json_pack("{s:s,s:s,s:s,s:s,s:I,s:b,s:I,s:b,s:o*,s:o*}", "saga_id", info.id,
                          "saga_type", info.type, "correlation_id", info.correlation_id, "status",
                          txo_saga_status_name(info.status), "idle_seconds",
                          (json_int_t)info.idle_s, "stuck", stuck, "compensation_tries",
                          (json_int_t)info.compensation_tries, "retry_scheduled",
                          info.retry_scheduled, "failing_step", step, "deadline", deadline);
    txo_saga_info_release(&info);
    if (e == NULL) {
        *rc = txo_error_set(err, TXO_ENOMEM, "saga %s: building its entry", ref->id);
    }
    return e;
}

static bool listed(const struct txo_saga_ref *refs, size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(refs[i].id, id) == 0)
            return true;
    return false;
}

/*
 * GET /sagas: the number of sagas per status (txo_saga_count: an index-only scan of
 * idx_saga_retry, whose first column is status), the given-up ones, and the sagas that need an
 * operator: every COMPENSATION_FAILED one and the stuck ones (txo_saga_list_stuck), each with
 * the step that failed and its error, and for a running saga past a deadline which one, at
 * which step and for how long ("deadline", null otherwise).
 */
static void list_sagas(struct admin_call *c)
{
    struct txo_saga_counts counts;
    struct txo_saga_ref failed[DASHBOARD_SAGAS_MAX], stuck[DASHBOARD_SAGAS_MAX];
    size_t n_failed = 0, n_stuck = 0;
    int rc = txo_saga_count(c->db, &counts, &c->err);
    if (rc == 0)
        rc = txo_saga_list_compensation_failed(c->db, DASHBOARD_SAGAS_MAX, failed, &n_failed,
                                               &c->err);
    if (rc == 0)
        rc = txo_saga_list_stuck(c->db, DASHBOARD_STUCK_IDLE_S, DASHBOARD_SAGAS_MAX, stuck,
                                 &n_stuck, &c->err);
    if (rc != 0) {
        txo_http_response_fail(c->resp, rc, &c->err);
        return;
    }
    json_t *by_status = json_object();
    for (int i = 0; by_status != NULL && i < TXO_SAGA_STATUS_COUNT; i++)
        json_object_set_new(by_status, txo_saga_status_name((enum txo_saga_status)i),
                            json_integer((json_int_t)counts.by_status[i]));
    json_t *list = json_array();
    for (size_t i = 0; rc == 0 && list != NULL && i < n_failed + n_stuck; i++) {
        const struct txo_saga_ref *ref = i < n_failed ? &failed[i] : &stuck[i - n_failed];
        if (i >= n_failed && listed(failed, n_failed, ref->id))
            continue; /* a given-up COMPENSATION_FAILED saga is in both lists */
        bool is_stuck = i >= n_failed || listed(stuck, n_stuck, ref->id);
        json_t *e = saga_entry(c->db, ref, is_stuck, &rc, &c->err);
        if (e != NULL)
            json_array_append_new(list, e);
    }
    if (rc != 0) {
        json_decref(by_status);
        json_decref(list);
        txo_http_response_fail(c->resp, rc, &c->err);
        return;
    }
    txo_http_response_json(c->resp, 200,
                           json_pack("{s:o,s:I,s:I,s:o}", "by_status", by_status, "abandoned",
                                     (json_int_t)counts.abandoned, "stuck_idle_seconds",
                                     (json_int_t)DASHBOARD_STUCK_IDLE_S, "sagas", list));
}

/* GET /processes: the daemons registered in txo_processes (include/txo/registry.h). A schema
 * without the table answers an empty list with "available": false. */
static void list_processes(struct admin_call *c)
{
    struct txo_process *ps = NULL;
    size_t n = 0;
    int rc = txo_registry_list(c->db, DASHBOARD_ALIVE_S, &ps, &n, &c->err);
    if (rc != 0 && rc != TXO_ENOTFOUND) {
        txo_http_response_fail(c->resp, rc, &c->err);
        return;
    }
    json_t *list = json_array();
    for (size_t i = 0; list != NULL && i < n; i++) {
        const struct txo_process *p = &ps[i];
        json_t *status = json_loads(p->status, 0, NULL);
        json_array_append_new(
            list, json_pack("{s:s,s:s,s:s,s:I,s:s,s:s,s:s,s:f,s:b,s:o}", "owner", p->owner, "role",
                            p->role, "host", p->host, "pid", (json_int_t)p->pid, "version",
                            p->version, "started_at", p->started_at, "heartbeat_at",
                            p->heartbeat_at, "heartbeat_age_seconds", p->heartbeat_age_s, "alive",
                            p->alive, "status", status != NULL ? status : json_object()));
    }
    txo_processes_free(ps, n);
    txo_http_response_json(c->resp, 200,
                           json_pack("{s:b,s:I,s:o}", "available", rc == 0, "alive_window_seconds",
                                     (json_int_t)DASHBOARD_ALIVE_S, "processes", list));
}

/* The dashboard's files, generated from ui/ (cmake/embed_text.cmake). */
extern const char txo__admin_ui_index_html[];
extern const char txo__admin_ui_app_js[];
extern const char txo__admin_ui_chart_js[];
extern const char txo__admin_ui_pages_js[];
extern const char txo__admin_ui_app_css[];

/*
 * GET /ui and its files. They are served without the admin token, because a browser
 * cannot send an Authorization header when it navigates to a page: the page holds no data,
 * asks for the token (kept in sessionStorage, so it goes with the tab) and sends it as
 * `Authorization: Bearer` on every API call it makes. No script or style is inline, so the
 * policy can forbid everything that does not come from this server (data: images only for
 * the empty favicon, which keeps the browser from asking for /favicon.ico).
 */
static void ui_file(struct txo_http_response *resp, const char *body, const char *type)
{
    if (txo_http_response_set(resp, 200, body) != 0)
        return;
    resp->content_type = type;
    snprintf(resp->header_name, sizeof(resp->header_name), "Content-Security-Policy");
    snprintf(resp->header_value, sizeof(resp->header_value),
             "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'");
}

static void ui(struct admin_call *c)
{
    static const struct {
        const char *path;
        const char *body;
        const char *type;
    } files[] = {
        {"/ui", txo__admin_ui_index_html, "text/html; charset=utf-8"},
        {"/ui/app.js", txo__admin_ui_app_js, "text/javascript; charset=utf-8"},
        {"/ui/chart.js", txo__admin_ui_chart_js, "text/javascript; charset=utf-8"},
        {"/ui/pages.js", txo__admin_ui_pages_js, "text/javascript; charset=utf-8"},
        {"/ui/app.css", txo__admin_ui_app_css, "text/css; charset=utf-8"},
    };
    for (size_t i = 0; i < TXO_ARRAY_LEN(files); i++)
        if (strcmp(c->req->path, files[i].path) == 0)
            ui_file(c->resp, files[i].body, files[i].type);
}

/*
 * Compares the bearer token in constant time: the loop runs over the whole configured token
 * whatever the client sent, so the time taken says nothing about how many bytes matched.
 */
static bool admin_allowed(const struct txo_admin *a, const struct txo_http_request *req)
{
    const char *token = a->token;
    if (token == NULL || token[0] == '\0')
        return true;
    if (txo_http_request_header_count(req, "Authorization") != 1)
        return false;
    const char *auth = txo_http_request_header(req, "Authorization");
    if (strncmp(auth, "Bearer ", 7) != 0)
        return false;
    const char *given = auth + 7;
    size_t n = strlen(token);
    size_t g = strlen(given);
    volatile unsigned char diff = g != n;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = i < g ? (unsigned char)given[i] : 0;
        diff |= (unsigned char)(c ^ (unsigned char)token[i]);
    }
    return diff == 0;
}

/* HEAD is answered as GET (the server leaves the body out). */
static bool is(const struct txo_http_request *req, const char *method)
{
    return strcmp(req->method, method) == 0 ||
           (strcmp(method, "GET") == 0 && strcmp(req->method, "HEAD") == 0);
}

enum route_param { PARAM_NONE, PARAM_ID, PARAM_SAGA };

struct route {
    const char *method;
    const char *prefix;
    enum route_param param;
    const char *suffix;
    bool token;    /* needs the bearer token when one is configured */
    bool needs_db; /* borrows a pooled connection for the call */
    txo__admin_route_fn *fn;
    const char *template; /* the path as documented: the request metrics' route label */
};

static const struct route routes[] = {
    {"GET", "/outbox/stats", PARAM_NONE, "", true, true, outbox_stats, "/outbox/stats"},
    {"GET", "/dlq", PARAM_NONE, "", true, true, list_dlq, "/dlq"},
    {"GET", "/dlq/events", PARAM_NONE, "", true, true, txo__admin_list_dead_events, "/dlq/events"},
    {"GET", "/outbox/parked", PARAM_NONE, "", true, true, list_parked, "/outbox/parked"},
    {"POST", "/dlq/", PARAM_ID, "/replay", true, true, replay_dlq, "/dlq/{id}/replay"},
    {"POST", "/dlq/", PARAM_ID, "/skip", true, true, skip_dlq, "/dlq/{id}/skip"},
    {"POST", "/sagas/", PARAM_SAGA, "/retry", true, true, retry_saga, "/sagas/{id}/retry"},
    {"GET", "/sagas/", PARAM_SAGA, "", true, true, txo__admin_get_saga, "/sagas/{id}"},
    {"GET", "/sagas", PARAM_NONE, "", true, true, list_sagas, "/sagas"},
    {"GET", "/processes", PARAM_NONE, "", true, true, list_processes, "/processes"},
    {"GET", "/search", PARAM_NONE, "", true, true, txo__admin_search, "/search"},
    {"GET", "/ui", PARAM_NONE, "", false, false, ui, "/ui"},
    {"GET", "/ui/app.js", PARAM_NONE, "", false, false, ui, "/ui/app.js"},
    {"GET", "/ui/chart.js", PARAM_NONE, "", false, false, ui, "/ui/chart.js"},
    {"GET", "/ui/pages.js", PARAM_NONE, "", false, false, ui, "/ui/pages.js"},
    {"GET", "/ui/app.css", PARAM_NONE, "", false, false, ui, "/ui/app.css"},
};

void txo_admin_opts_init(struct txo_admin_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->db_wait_ms = 5000;
    txo_saga_opts_init(&opts->saga);
}

int txo_admin_new(const struct txo_admin_opts *opts, struct txo_db_pool *pool,
                  struct txo_admin **out, struct txo_error *err)
{
    int rc = txo__saga_table_check(opts->sagas, opts->n_sagas, err);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < opts->n_finders; i++)
        if (opts->finders[i].kind == NULL || opts->finders[i].kind[0] == '\0' ||
            opts->finders[i].find == NULL)
            return txo_error_set(err, TXO_EINVAL, "admin API: finder %zu needs a kind and a find",
                                 i);
    struct txo_admin *a = txo_calloc(1, sizeof(*a));
    if (a == NULL)
        return txo_error_set(err, TXO_ENOMEM, "admin API");
    a->opts = *opts;
    a->opts.token = NULL; /* only the copy is kept */
    a->pool = pool;
    if (opts->token != NULL && opts->token[0] != '\0') {
        a->token = txo_strdup(opts->token);
        if (a->token == NULL) {
            txo_free(a);
            return txo_error_set(err, TXO_ENOMEM, "admin API token");
        }
    }
    *out = a;
    return 0;
}

void txo_admin_free(struct txo_admin *admin)
{
    if (admin == NULL)
        return;
    txo__wipe_free(admin->token);
    txo_free(admin);
}

bool txo_admin_route(size_t i, const char **method, char *path, size_t cap, bool *token)
{
    if (i >= TXO_ARRAY_LEN(routes))
        return false;
    const struct route *r = &routes[i];
    *method = r->method;
    *token = r->token;
    snprintf(path, cap, "%s", r->template);
    return true;
}

static bool path_matches(const struct route *r, const char *path, struct route_match *m)
{
    switch (r->param) {
    case PARAM_ID:
        return txo_http_path_id(path, r->prefix, r->suffix, &m->id);
    case PARAM_SAGA:
        return path_saga(path, r->prefix, r->suffix, m->saga_id);
    case PARAM_NONE:
        break;
    }
    return strcmp(path, r->prefix) == 0;
}

bool txo_admin_handle(struct txo_admin *admin, const struct txo_http_request *req,
                      struct txo_http_response *resp)
{
    const struct route *found = NULL;
    bool path_known = false;
    struct route_match m;
    memset(&m, 0, sizeof(m));
    for (size_t i = 0; i < TXO_ARRAY_LEN(routes) && found == NULL; i++) {
        if (!path_matches(&routes[i], req->path, &m))
            continue;
        path_known = true;
        resp->route = routes[i].template;
        if (routes[i].token && !admin_allowed(admin, req)) {
            txo_http_response_error(resp, 401, "unauthorized",
                                    "admin endpoints need Authorization: Bearer <token>");
            return true;
        }
        if (is(req, routes[i].method))
            found = &routes[i];
    }
    if (found == NULL) {
        if (!path_known)
            return false;
        txo_http_response_error(resp, 405, "method_not_allowed",
                                "this method is not allowed on this path");
        return true;
    }
    struct admin_call c = {.a = admin, .db = NULL, .m = m, .req = req, .resp = resp};
    txo_error_init(&c.err);
    if (found->needs_db &&
        txo_db_pool_get(admin->pool, admin->opts.db_wait_ms, &c.db, &c.err) != 0) {
        resp->retry_after_s = 1;
        txo_http_response_error(resp, 503, "database_unavailable", c.err.msg);
        return true;
    }
    found->fn(&c);
    if (c.db != NULL)
        txo_db_pool_put(admin->pool, c.db, false);
    return true;
}

void txo_admin_http_handler(void *arg, const struct txo_http_request *req,
                            struct txo_http_response *resp)
{
    if (!txo_admin_handle(arg, req, resp))
        txo_http_response_error(resp, 404, "not_found", "no such endpoint");
}
