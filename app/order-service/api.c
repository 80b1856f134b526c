/*
 * The order service's HTTP API: routing, request parsing and the POST /orders transaction. The
 * admin endpoints and the dashboard are the library's (txo/admin.h), mounted here behind the
 * order routes. See api.h for the routes and status codes.
 *
 * POST /orders, in order:
 *   1. protocol checks that need no database: Idempotency-Key, Content-Type, JSON syntax and
 *      types (400), values (orders_validate, 422);
 *   2. one READ COMMITTED transaction: txo_idem_begin() (the key row), then for a new key
 *      orders_create_tx() (order, items, OrderCreated), in async mode the StartOrderSaga
 *      command, and txo_idem_complete() with the response; COMMIT;
 *   3. the answer: the new response, the stored one (a repeat), 409 or 422.
 * A failure anywhere in 2 rolls everything back, including the key row, so a corrected
 * retry with the same key is a new request. With order_batch > 1, step 2 is the order
 * writer's group transaction (order_writer.h), and this one only when a group failed.
 *
 * Crash points (tests): "api.before_commit" fires inside the transaction after every row is
 * written; "api.after_commit" after COMMIT, before the response is sent.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "order_writer.h"
#include "orders.h"
#include "txo/jansson.h"
#include "txo/txo.h"
#include "worker.h"

struct order_api {
    struct order_api_opts opts;
    struct txo_db_pool *pool;
    struct order_writer *writer; /* NULL: order_batch 1, every POST /orders on its own */
    /* The admin API mounted beside the order routes, and the saga definitions its
     * POST /sagas/{id}/retry runs: the worker's own registration (worker.h). */
    struct txo_admin *admin;
    struct order_worker_config sagas;
};

/* The dashboard's search box finds orders by id, on pages of their own. */
static const struct txo_admin_finder finders[] = {{"order", orders_find_record, NULL}};

/* The admin API over the same pool, retrying sagas as the worker runs them. */
static int admin_new(struct order_api *api, struct txo_error *err)
{
    struct txo_worker_opts wo;
    txo_worker_opts_init(&wo);
    order_worker_setup(&api->sagas, api->opts.services, NULL, &wo);
    struct txo_admin_opts ao;
    txo_admin_opts_init(&ao);
    ao.token = api->opts.admin_token;
    ao.db_wait_ms = api->opts.db_wait_ms;
    ao.sagas = wo.sagas;
    ao.n_sagas = wo.n_sagas;
    ao.saga_user_new = wo.runner_user_new;
    ao.saga_user_free = wo.runner_user_free;
    ao.saga_user_arg = wo.runner_user_arg;
    ao.finders = finders;
    ao.n_finders = TXO_ARRAY_LEN(finders);
    return txo_admin_new(&ao, api->pool, &api->admin, err);
}

void order_api_opts_init(struct order_api_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->idempotency_stale_s = 60;
    opts->db_wait_ms = 5000;
    opts->order_batch = 1;
}

int order_api_new(const struct order_api_opts *opts, struct txo_db_pool *pool,
                  struct order_api **out, struct txo_error *err)
{
    struct order_api *api = txo_calloc(1, sizeof(*api));
    if (api == NULL)
        return txo_error_set(err, TXO_ENOMEM, "order API");
    api->opts = *opts;
    api->pool = pool;
    int rc = admin_new(api, err);
    if (rc != 0) {
        txo_free(api);
        return rc;
    }
    if (opts->order_batch > 1) {
        struct order_writer_opts wo = {
            .cap = opts->order_batch,
            .async = opts->async,
            .db_wait_ms = opts->db_wait_ms,
            .metrics = opts->metrics,
            .tracer = opts->tracer,
            .on_commit = opts->on_commit,
            .on_commit_arg = opts->on_commit_arg,
        };
        rc = order_writer_new(&wo, pool, &api->writer, err);
        if (rc != 0) {
            txo_admin_free(api->admin);
            txo_free(api);
            return rc;
        }
    }
    *out = api;
    return 0;
}

void order_api_free(struct order_api *api)
{
    if (api == NULL)
        return;
    order_writer_free(api->writer);
    txo_admin_free(api->admin);
    txo_free(api);
}

/* What a route's path carried: the order id. */
struct route_match {
    int64_t id;
};

/* ---- POST /orders ---- */

struct parsed_order {
    int64_t customer_id;
    struct order_item *items;
    size_t n;
};

/* Checks the JSON shape and types; values are orders_validate()'s job. 400 on failure. */
static int parse_order(json_t *doc, struct parsed_order *out, struct txo_error *err)
{
    if (!json_is_object(doc))
        return txo_error_set(err, TXO_EINVAL, "the body must be a JSON object");
    json_t *customer = json_object_get(doc, "customer_id");
    if (!json_is_integer(customer))
        return txo_error_set(err, TXO_EINVAL, "customer_id must be an integer");
    out->customer_id = json_integer_value(customer);
    json_t *items = json_object_get(doc, "items");
    if (!json_is_array(items))
        return txo_error_set(err, TXO_EINVAL, "items must be an array");
    out->n = json_array_size(items);
    if (out->n > ORDER_MAX_ITEMS) /* bound the allocation before validating */
        out->n = ORDER_MAX_ITEMS + 1;
    out->items = txo_calloc(out->n + 1, sizeof(*out->items));
    if (out->items == NULL)
        return txo_error_set(err, TXO_ENOMEM, "order items");
    for (size_t i = 0; i < out->n; i++) {
        json_t *item = json_array_get(items, i);
        if (!json_is_object(item))
            return txo_error_set(err, TXO_EINVAL, "items[%zu] must be an object", i);
        json_t *sku = json_object_get(item, "sku");
        json_t *qty = json_object_get(item, "qty");
        json_t *price = json_object_get(item, "price_cents");
        if (!json_is_string(sku))
            return txo_error_set(err, TXO_EINVAL, "items[%zu].sku must be a string", i);
        if (!json_is_integer(qty))
            return txo_error_set(err, TXO_EINVAL, "items[%zu].qty must be an integer", i);
        if (!json_is_integer(price))
            return txo_error_set(err, TXO_EINVAL, "items[%zu].price_cents must be an integer", i);
        if (strlen(json_string_value(sku)) != json_string_length(sku))
            return txo_error_set(err, TXO_EINVAL, "items[%zu].sku must not contain NUL", i);
        json_int_t q = json_integer_value(qty);
        out->items[i].sku = json_string_value(sku);
        /* Out-of-int32 quantities become 0, which orders_validate() rejects by range. */
        out->items[i].qty = (q < INT32_MIN || q > INT32_MAX) ? 0 : (int32_t)q;
        out->items[i].price_cents = json_integer_value(price);
        if (q < INT32_MIN || q > INT32_MAX)
            return txo_error_set(err, TXO_EBUSINESS, "items[%zu].qty must be 1..%d, got %" PRId64,
                                 i, ORDER_MAX_QTY, (int64_t)q);
    }
    return 0;
}

struct place_args {
    const struct order_api *api;
    const char *key;
    char hash[TXO_IDEM_HASH_LEN];
    const struct parsed_order *order;
    const struct txo_trace_ctx *trace;
    struct txo_idem_claim claim;
    int64_t order_id;
    int status;
    char *response;
};

static int place_order_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct place_args *a = arg;
    txo_idem_claim_release(&a->claim); /* a retried transaction starts over */
    txo_free(a->response);
    a->response = NULL;

    int rc = txo_idem_begin(tx, a->key, a->hash, a->api->opts.idempotency_stale_s, &a->claim, err);
    if (rc != 0 || a->claim.outcome != TXO_IDEM_NEW)
        return rc;
    struct order_new o = {.customer_id = a->order->customer_id,
                          .items = a->order->items,
                          .n = a->order->n,
                          .trace = a->trace};
    rc = orders_create_one_tx(tx, &o, a->api->opts.async, err);
    if (rc != 0)
        return rc;
    a->order_id = o.order_id;
    char body[96];
    order_writer_created_body(a->order_id, body, sizeof(body));
    a->status = 201;
    if (a->api->opts.async)
        a->status = 202;
    a->response = txo_strdup(body);
    if (a->response == NULL)
        return txo_error_set(err, TXO_ENOMEM, "response");
    rc = txo_idem_complete(tx, a->key, a->status, a->response, err);
    if (rc == 0)
        txo_crash_point("api.before_commit");
    return rc;
}

/* "application/json", any case, optionally followed by parameters ("; charset=utf-8"). */
static bool is_json_media_type(const char *ctype)
{
    static const char json[] = "application/json";
    if (strncasecmp(ctype, json, sizeof(json) - 1) != 0)
        return false;
    char next = ctype[sizeof(json) - 1];
    return next == '\0' || next == ';' || next == ' ' || next == '\t';
}

/* What the checks of POST /orders that need no database produced; order_post_release(). */
struct order_post {
    json_t *doc;
    struct parsed_order order;
    char hash[TXO_IDEM_HASH_LEN];
    /* The request's span (the HTTP server's: a child of the caller's traceparent, or a new
     * trace). OrderCreated carries it. */
    struct txo_trace_ctx trace;
};

static void order_post_release(struct order_post *p)
{
    txo_free(p->order.items);
    json_decref(p->doc);
    memset(p, 0, sizeof(*p));
}

/*
 * Step 1 of POST /orders: the Idempotency-Key (n_keys headers, the first is key), the
 * Content-Type, the JSON body, its shape and its values, and the request hash. Returns true
 * with *p filled in (release it), or false with resp answered (400, 415, 422; 500 only when an
 * allocation failed) and *p empty.
 */
static bool check_post(const char *key, size_t n_keys, const char *ctype, const char *body,
                       size_t len, struct order_post *p, struct txo_http_response *resp)
{
    struct txo_error err;
    txo_error_init(&err);
    memset(p, 0, sizeof(*p));
    if (n_keys > 1) {
        txo_http_response_error(resp, 400, "invalid_idempotency_key",
                                "send one Idempotency-Key header, not several");
        return false;
    }
    if (key == NULL) {
        txo_http_response_error(resp, 400, "missing_idempotency_key",
                                "POST /orders needs an Idempotency-Key header (e.g. a UUID)");
        return false;
    }
    if (txo_idem_key_check(key, &err) != 0) {
        txo_http_response_error(resp, 400, "invalid_idempotency_key", err.msg);
        return false;
    }
    if (ctype != NULL && !is_json_media_type(ctype)) {
        txo_http_response_error(resp, 415, "unsupported_media_type",
                                "Content-Type must be application/json");
        return false;
    }
    /* JSON has no place for a raw NUL, and jansson reads a document cut at one as whole. */
    if (memchr(body, '\0', len) != NULL) {
        txo_http_response_error(resp, 400, "malformed_json", "NUL byte in the request body");
        return false;
    }
    json_error_t jerr;
    p->doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (p->doc == NULL) {
        char msg[256];
        snprintf(msg, sizeof(msg), "malformed JSON at line %d column %d: %s", jerr.line,
                 jerr.column, jerr.text);
        txo_http_response_error(resp, 400, "malformed_json", msg);
        return false;
    }
    int rc = parse_order(p->doc, &p->order, &err);
    if (rc == TXO_EBUSINESS)
        txo_http_response_error(resp, 422, "validation_failed", err.msg);
    else if (rc != 0)
        txo_http_response_error(resp, rc == TXO_ENOMEM ? 500 : 400, "invalid_request", err.msg);
    else if (orders_validate(p->order.customer_id, p->order.items, p->order.n, NULL, &err) != 0)
        txo_http_response_error(resp, 422, "validation_failed", err.msg);
    else if ((rc = txo_idem_hash_doc("POST", "/orders", p->doc, p->hash, &err)) != 0)
        txo_http_response_fail(resp, rc, &err);
    else
        return true;
    order_post_release(p);
    return false;
}

bool order_api_check_post(const char *key, size_t n_keys, const char *content_type,
                          const char *body, size_t len, struct txo_http_response *resp)
{
    struct order_post p;
    bool ok = check_post(key, n_keys, content_type, body, len, &p, resp);
    if (ok)
        order_post_release(&p);
    return ok;
}

static void reply_in_progress(struct txo_http_response *resp)
{
    resp->retry_after_s = 1;
    txo_http_response_error(
        resp, 409, "request_in_progress",
        "a request with this Idempotency-Key is still being processed; retry later");
}

static void reply_key_reused(struct txo_http_response *resp)
{
    txo_http_response_error(resp, 422, "idempotency_key_reused",
                            "this Idempotency-Key was used with a different request body");
}

/* Step 2 and 3 of POST /orders for one request, on a connection borrowed for them. */
static void post_order_single(struct order_api *api, const char *key, const struct order_post *post,
                              struct txo_http_response *resp)
{
    struct txo_error err;
    txo_error_init(&err);
    struct txo_db *db = NULL;
    if (txo_db_pool_get(api->pool, api->opts.db_wait_ms, &db, &err) != 0) {
        resp->retry_after_s = 1;
        txo_http_response_error(resp, 503, "database_unavailable", err.msg);
        return;
    }
    struct place_args a = {.api = api, .key = key, .trace = &post->trace};
    memcpy(a.hash, post->hash, sizeof(a.hash));
    int rc;
    struct parsed_order order = post->order;
    a.order = &order;
    rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, place_order_tx, &a, &err);
    if (rc != 0) {
        txo_http_response_fail(resp, rc, &err);
        goto out;
    }
    switch (a.claim.outcome) {
    case TXO_IDEM_NEW:
        txo_crash_point("api.after_commit");
        if (api->opts.on_commit != NULL)
            api->opts.on_commit(api->opts.on_commit_arg);
        (void)txo_http_response_set(resp, a.status, a.response);
        TXO_LOG(TXO_LOG_DEBUG, "api", "order created", TXO_KV_I64("order_id", a.order_id),
                TXO_KV_STR("key", key));
        break;
    case TXO_IDEM_REPLAY:
        (void)txo_http_response_set(resp, a.claim.status, a.claim.response);
        break;
    case TXO_IDEM_CONFLICT:
        reply_key_reused(resp);
        break;
    case TXO_IDEM_IN_PROGRESS:
        reply_in_progress(resp);
        break;
    }
out:
    txo_idem_claim_release(&a.claim);
    txo_free(a.response);
    txo_db_pool_put(api->pool, db, false);
}

/* Steps 2 and 3 through the order writer (order_writer.h). */
static void post_order_grouped(struct order_api *api, const char *key,
                               const struct order_post *post, struct txo_http_response *resp)
{
    struct order_writer_req r = {
        .key = key,
        .hash = post->hash,
        .customer_id = post->order.customer_id,
        .items = post->order.items,
        .n = post->order.n,
        .trace = &post->trace,
    };
    order_writer_submit(api->writer, &r);
    switch (r.outcome) {
    case ORDER_WRITER_CREATED:
        TXO_LOG(TXO_LOG_DEBUG, "api", "order created", TXO_KV_I64("order_id", r.order_id),
                TXO_KV_STR("key", key));
        /* fall through */
    case ORDER_WRITER_REPLAY:
        txo_http_response_take(resp, r.status, r.body, strlen(r.body));
        r.body = NULL;
        break;
    case ORDER_WRITER_CONFLICT:
        reply_key_reused(resp);
        break;
    case ORDER_WRITER_REFUSED:
        txo_http_response_error(resp, 422, "validation_failed", r.why);
        break;
    case ORDER_WRITER_IN_PROGRESS:
        reply_in_progress(resp);
        break;
    case ORDER_WRITER_SINGLE:
        post_order_single(api, key, post, resp);
        break;
    case ORDER_WRITER_UNAVAILABLE:
        resp->retry_after_s = 1;
        txo_http_response_error(resp, 503, "database_unavailable", r.why);
        break;
    }
    txo_free(r.body);
}

/*
 * The answer of a new order carries Location: /orders/{id}. Only the status and the body of an
 * answer are stored with its Idempotency-Key, so the header comes from the body's order_id:
 * every replay of the answer carries it too.
 */
static void set_location(struct txo_http_response *resp)
{
    if ((resp->status != 201 && resp->status != 202) || resp->body == NULL)
        return;
    json_t *doc = json_loadb(resp->body, resp->body_len, 0, NULL);
    json_t *id = json_object_get(doc, "order_id");
    if (json_is_integer(id)) {
        snprintf(resp->header_name, sizeof(resp->header_name), "Location");
        snprintf(resp->header_value, sizeof(resp->header_value), "/orders/%" JSON_INTEGER_FORMAT,
                 json_integer_value(id));
    }
    json_decref(doc);
}

static void post_order(struct order_api *api, struct txo_db *db, const struct route_match *m,
                       const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)db; /* none: the route borrows its own (see routes[]) */
    (void)m;
    const char *key = txo_http_request_header(req, "Idempotency-Key");
    struct order_post post;
    if (!check_post(key, txo_http_request_header_count(req, "Idempotency-Key"),
                    txo_http_request_header(req, "Content-Type"), req->body, req->body_len, &post,
                    resp))
        return;
    if (req->trace != NULL)
        post.trace = *req->trace; /* the request's span (the server's) */
    else
        txo_trace_new_root(false, &post.trace);
    if (api->writer != NULL)
        post_order_grouped(api, key, &post, resp);
    else
        post_order_single(api, key, &post, resp);
    order_post_release(&post);
    set_location(resp);
}

/* ---- the other routes ---- */

static void get_order(struct order_api *api, struct txo_db *db, const struct route_match *m,
                      const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)api;
    (void)req;
    int64_t id = m->id;
    struct txo_error err;
    txo_error_init(&err);
    char *json = NULL;
    int64_t version = 0;
    int rc = orders_get_json(db, id, &json, &version, &err);
    if (rc != 0) {
        txo_http_response_fail(resp, rc, &err);
        return;
    }
    /* The version as ETag: what POST /orders/{id}/cancel takes back in If-Match. */
    snprintf(resp->header_name, sizeof(resp->header_name), "ETag");
    snprintf(resp->header_value, sizeof(resp->header_value), "\"%" PRId64 "\"", version);
    txo_http_response_take(resp, 200, json, strlen(json));
}

struct cancel_args {
    int64_t order_id;
    int64_t version;
    int64_t new_version;
};

static int cancel_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    struct cancel_args *a = arg;
    return orders_cancel_tx(tx, a->order_id, a->version, &a->new_version, err);
}

/* If-Match: "3" (or 3, or W/"3") -> 3. */
static bool parse_if_match(const char *h, int64_t *version)
{
    if (strncmp(h, "W/", 2) == 0)
        h += 2;
    bool quoted = *h == '"';
    if (quoted)
        h++;
    char *end = NULL;
    long long v = strtoll(h, &end, 10);
    if (end == h || v < 0 || (quoted && *end++ != '"') || *end != '\0')
        return false;
    *version = v;
    return true;
}

static void cancel_order(struct order_api *api, struct txo_db *db, const struct route_match *m,
                         const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)api;
    int64_t id = m->id;
    const char *if_match = txo_http_request_header(req, "If-Match");
    struct cancel_args a = {.order_id = id};
    if (if_match == NULL) {
        txo_http_response_error(
            resp, 428, "precondition_required",
            "send If-Match with the order's version (the ETag of GET /orders/{id})");
        return;
    }
    if (!parse_if_match(if_match, &a.version)) {
        txo_http_response_error(resp, 400, "invalid_request",
                                "If-Match must be the order's version, e.g. \"0\"");
        return;
    }
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, cancel_tx, &a, &err);
    if (rc == TXO_ECONFLICT) {
        txo_http_response_error(resp, 412, "version_conflict", err.msg);
        return;
    }
    if (rc != 0) {
        txo_http_response_fail(resp, rc, &err);
        return;
    }
    snprintf(resp->header_name, sizeof(resp->header_name), "ETag");
    snprintf(resp->header_value, sizeof(resp->header_value), "\"%" PRId64 "\"", a.new_version);
    txo_http_response_json(resp, 200,
                           json_pack("{s:I,s:s,s:I}", "order_id", (json_int_t)id, "status",
                                     "CANCELLED", "version", (json_int_t)a.new_version));
}

/* HEAD is answered as GET (the server leaves the body out). */
static bool is(const struct txo_http_request *req, const char *method)
{
    return strcmp(req->method, method) == 0 ||
           (strcmp(method, "GET") == 0 && strcmp(req->method, "HEAD") == 0);
}

extern const char orders__openapi_json[]; /* generated from openapi.json */

const char *order_api_openapi(void)
{
    return orders__openapi_json;
}

static void readyz(struct order_api *api, struct txo_db *db, const struct route_match *m,
                   const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)api;
    (void)m;
    (void)req;
    struct txo_error err;
    txo_error_init(&err);
    /* A Galera node outside the primary component answers pings but refuses queries. */
    if (txo_db_check_ready(db, &err) == 0) {
        (void)txo_http_response_set(resp, 200, "{\"status\":\"ready\"}");
    } else {
        resp->retry_after_s = 1;
        txo_http_response_error(resp, 503, "database_unavailable", err.msg);
    }
}

/* The order routes: path = prefix [+ id + suffix]. The first route whose path and method match
 * answers; a path that matches with another method is 405. Any other path goes to the admin
 * API (txo/admin.h), and is 404 when that does not know it either. */
struct route {
    const char *method;
    const char *prefix;
    bool with_id; /* an order id between prefix and suffix */
    const char *suffix;
    /* Borrows a pooled connection for the call. POST /orders does not: with the order writer
     * it holds none while it waits for its group, and without one it borrows its own only
     * once the request passed the checks that need no database. */
    bool needs_db;
    /* The handler; NULL for a route that answers 200 with the fixed document body. */
    void (*fn)(struct order_api *api, struct txo_db *db, const struct route_match *m,
               const struct txo_http_request *req, struct txo_http_response *resp);
    const char *body;
    const char *template; /* the path as documented: the request metrics' route label */
};

static const struct route routes[] = {
    {"GET", "/healthz", false, "", false, NULL, "{\"status\":\"ok\"}", "/healthz"},
    {"GET", "/openapi.json", false, "", false, NULL, orders__openapi_json, "/openapi.json"},
    {"GET", "/readyz", false, "", true, readyz, NULL, "/readyz"},
    {"POST", "/orders", false, "", false, post_order, NULL, "/orders"},
    {"GET", "/orders/", true, "", true, get_order, NULL, "/orders/{id}"},
    {"POST", "/orders/", true, "/cancel", true, cancel_order, NULL, "/orders/{id}/cancel"},
};

bool order_api_route(size_t i, const char **method, char *path, size_t cap, bool *admin)
{
    if (i >= TXO_ARRAY_LEN(routes))
        return txo_admin_route(i - TXO_ARRAY_LEN(routes), method, path, cap, admin);
    const struct route *r = &routes[i];
    *method = r->method;
    *admin = false;
    snprintf(path, cap, "%s", r->template);
    return true;
}

static bool path_matches(const struct route *r, const char *path, struct route_match *m)
{
    if (r->with_id)
        return txo_http_path_id(path, r->prefix, r->suffix, &m->id);
    return strcmp(path, r->prefix) == 0;
}

void order_api_handle(void *arg, const struct txo_http_request *req, struct txo_http_response *resp)
{
    struct order_api *api = arg;
    const struct route *found = NULL;
    bool path_known = false;
    struct route_match m;
    memset(&m, 0, sizeof(m));
    for (size_t i = 0; i < TXO_ARRAY_LEN(routes) && found == NULL; i++) {
        if (!path_matches(&routes[i], req->path, &m))
            continue;
        path_known = true;
        resp->route = routes[i].template;
        if (is(req, routes[i].method))
            found = &routes[i];
    }
    if (found == NULL) {
        if (path_known)
            txo_http_response_error(resp, 405, "method_not_allowed",
                                    "this method is not allowed on this path");
        else if (!txo_admin_handle(api->admin, req, resp))
            txo_http_response_error(resp, 404, "not_found", "no such endpoint");
        return;
    }
    if (found->fn == NULL) {
        (void)txo_http_response_set(resp, 200, found->body);
        return;
    }
    struct txo_db *db = NULL;
    if (found->needs_db) {
        struct txo_error err;
        txo_error_init(&err);
        if (txo_db_pool_get(api->pool, api->opts.db_wait_ms, &db, &err) != 0) {
            resp->retry_after_s = 1;
            txo_http_response_error(resp, 503, "database_unavailable", err.msg);
            return;
        }
    }
    found->fn(api, db, &m, req, resp);
    if (db != NULL)
        txo_db_pool_put(api->pool, db, false);
}
