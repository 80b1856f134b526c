/*
 * The order service's HTTP API: routing, request parsing, the POST /orders transaction and the
 * admin endpoints. See api.h for the routes and status codes.
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
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "order_writer.h"
#include "orders.h"
#include "txo/dlq.h"
#include "txo/txo.h"

struct order_api {
    struct order_api_opts opts;
    struct txo_db_pool *pool;
    struct order_writer *writer; /* NULL: order_batch 1, every POST /orders on its own */
};

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
    if (opts->order_batch > 1) {
        struct order_writer_opts wo = {
            .cap = opts->order_batch,
            .async = opts->async,
            .db_wait_ms = opts->db_wait_ms,
            .metrics = opts->metrics,
            .on_commit = opts->on_commit,
            .on_commit_arg = opts->on_commit_arg,
        };
        int rc = order_writer_new(&wo, pool, &api->writer, err);
        if (rc != 0) {
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
    txo_free(api);
}

/* ---- responses ---- */

/* Answers a JSON document (stolen reference). doc is NULL when json_pack refused its input,
 * which is a bug here, not an allocation failure: only a failed allocation says so. */
static void reply_json(struct txo_http_response *resp, int status, json_t *doc)
{
    if (doc == NULL) {
        TXO_LOG(TXO_LOG_ERROR, "api", "could not build the JSON response status=%d", status);
        (void)txo_http_response_set(
            resp, 500, "{\"error\":\"internal\",\"message\":\"could not build the response\"}");
        return;
    }
    char *text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(doc);
    if (text == NULL || txo_http_response_set(resp, status, text) != 0)
        (void)txo_http_response_set(resp, 500,
                                    "{\"error\":\"internal\",\"message\":\"out of memory\"}");
    free(text); /* jansson allocates with malloc */
}

/*
 * Copies text into out (cap bytes, NUL-terminated) with every byte that is not part of a
 * well-formed UTF-8 character (RFC 3629: no overlong forms, no surrogates, nothing above
 * U+10FFFF) replaced by '?', so that it can go into a JSON string. Messages can quote the
 * client's bytes (jansson's error text does, and may cut a character in half).
 */
static void utf8_sanitize(const char *text, char *out, size_t cap)
{
    const unsigned char *p = (const unsigned char *)text;
    size_t o = 0;
    while (*p != '\0' && o + 1 < cap) {
        size_t n = 0;
        unsigned min = 0;
        unsigned cp = 0;
        if (p[0] < 0x80) {
            n = 1;
            cp = p[0];
        } else if (p[0] >= 0xc2 && p[0] <= 0xdf) {
            n = 2;
            cp = p[0] & 0x1fu;
            min = 0x80;
        } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
            n = 3;
            cp = p[0] & 0x0fu;
            min = 0x800;
        } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
            n = 4;
            cp = p[0] & 0x07u;
            min = 0x10000;
        }
        bool ok = n > 0;
        for (size_t i = 1; ok && i < n; i++) {
            if ((p[i] & 0xc0u) != 0x80)
                ok = false;
            else
                cp = (cp << 6) | (p[i] & 0x3fu);
        }
        if (ok && n > 1 && (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)))
            ok = false;
        if (!ok || o + n >= cap) {
            out[o++] = '?';
            p++;
            continue;
        }
        memcpy(out + o, p, n);
        o += n;
        p += n;
    }
    out[o] = '\0';
}

static void reply_error(struct txo_http_response *resp, int status, const char *code,
                        const char *message)
{
    char clean[512];
    utf8_sanitize(message, clean, sizeof(clean));
    reply_json(resp, status, json_pack("{s:s,s:s}", "error", code, "message", clean));
}

/* Maps a library error to an HTTP answer: what a client can do about it decides the status. */
static void reply_txo_error(struct txo_http_response *resp, int rc, const struct txo_error *err)
{
    const char *msg = err->msg[0] != '\0' ? err->msg : txo_strerror(rc);
    switch (rc) {
    case TXO_ENOTFOUND:
        reply_error(resp, 404, "not_found", msg);
        break;
    case TXO_EINVAL:
        reply_error(resp, 422, "validation_failed", msg);
        break;
    case TXO_ESTATE:
        reply_error(resp, 409, "conflict", msg);
        break;
    case TXO_ETIMEOUT:
    case TXO_ECONNECT:
    case TXO_ECONNLOST:
    case TXO_EDEADLOCK:
    case TXO_ELOCKTIMEOUT:
    case TXO_EUNAVAILABLE:
        resp->retry_after_s = 1;
        reply_error(resp, 503, "unavailable", msg);
        break;
    default:
        TXO_LOG(TXO_LOG_ERROR, "api", "request failed code=%s err=\"%s\"", txo_err_name(rc), msg);
        reply_error(resp, 500, "internal", msg);
        break;
    }
}

/* What a route's path carried: an order or dead-letter id, or a saga id. */
struct route_match {
    int64_t id;
    char saga_id[TXO_SAGA_ID_LEN];
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
    rc = a->api->opts.async ? orders_create_async_tx(tx, a->order->customer_id, a->order->items,
                                                     a->order->n, &a->order_id, err)
                            : orders_create_tx(tx, a->order->customer_id, a->order->items,
                                               a->order->n, &a->order_id, err);
    if (rc != 0)
        return rc;
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
        reply_error(resp, 400, "invalid_idempotency_key",
                    "send one Idempotency-Key header, not several");
        return false;
    }
    if (key == NULL) {
        reply_error(resp, 400, "missing_idempotency_key",
                    "POST /orders needs an Idempotency-Key header (e.g. a UUID)");
        return false;
    }
    if (txo_idem_key_check(key, &err) != 0) {
        reply_error(resp, 400, "invalid_idempotency_key", err.msg);
        return false;
    }
    if (ctype != NULL && !is_json_media_type(ctype)) {
        reply_error(resp, 415, "unsupported_media_type", "Content-Type must be application/json");
        return false;
    }
    /* JSON has no place for a raw NUL, and jansson reads a document cut at one as whole. */
    if (memchr(body, '\0', len) != NULL) {
        reply_error(resp, 400, "malformed_json", "NUL byte in the request body");
        return false;
    }
    json_error_t jerr;
    p->doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (p->doc == NULL) {
        char msg[256];
        snprintf(msg, sizeof(msg), "malformed JSON at line %d column %d: %s", jerr.line,
                 jerr.column, jerr.text);
        reply_error(resp, 400, "malformed_json", msg);
        return false;
    }
    int rc = parse_order(p->doc, &p->order, &err);
    if (rc == TXO_EBUSINESS)
        reply_error(resp, 422, "validation_failed", err.msg);
    else if (rc != 0)
        reply_error(resp, rc == TXO_ENOMEM ? 500 : 400, "invalid_request", err.msg);
    else if (orders_validate(p->order.customer_id, p->order.items, p->order.n, NULL, &err) != 0)
        reply_error(resp, 422, "validation_failed", err.msg);
    else if ((rc = txo_idem_hash_doc("POST", "/orders", p->doc, p->hash, &err)) != 0)
        reply_txo_error(resp, rc, &err);
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
    reply_error(resp, 409, "request_in_progress",
                "a request with this Idempotency-Key is still being processed; retry later");
}

static void reply_key_reused(struct txo_http_response *resp)
{
    reply_error(resp, 422, "idempotency_key_reused",
                "this Idempotency-Key was used with a different request body");
}

/* Step 2 and 3 of POST /orders for one request, on db (NULL: borrow one from the pool). */
static void post_order_single(struct order_api *api, struct txo_db *db, const char *key,
                              const struct order_post *post, struct txo_http_response *resp)
{
    struct txo_error err;
    txo_error_init(&err);
    bool borrowed = false;
    if (db == NULL) {
        if (txo_db_pool_get(api->pool, api->opts.db_wait_ms, &db, &err) != 0) {
            resp->retry_after_s = 1;
            reply_error(resp, 503, "database_unavailable", err.msg);
            return;
        }
        borrowed = true;
    }
    struct place_args a = {.api = api, .key = key};
    memcpy(a.hash, post->hash, sizeof(a.hash));
    int rc;
    struct parsed_order order = post->order;
    a.order = &order;
    rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, place_order_tx, &a, &err);
    if (rc != 0) {
        reply_txo_error(resp, rc, &err);
        goto out;
    }
    switch (a.claim.outcome) {
    case TXO_IDEM_NEW:
        txo_crash_point("api.after_commit");
        if (api->opts.on_commit != NULL)
            api->opts.on_commit(api->opts.on_commit_arg);
        (void)txo_http_response_set(resp, a.status, a.response);
        TXO_LOG(TXO_LOG_DEBUG, "api", "order created order_id=%" PRId64 " key=%s", a.order_id, key);
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
    if (borrowed)
        txo_db_pool_put(api->pool, db, false);
}

/* Steps 2 and 3 through the order writer (order_writer.h); db is NULL. */
static void post_order_grouped(struct order_api *api, const char *key,
                               const struct order_post *post, struct txo_http_response *resp)
{
    struct order_writer_req r = {
        .key = key,
        .hash = post->hash,
        .customer_id = post->order.customer_id,
        .items = post->order.items,
        .n = post->order.n,
    };
    order_writer_submit(api->writer, &r);
    switch (r.outcome) {
    case ORDER_WRITER_CREATED:
        TXO_LOG(TXO_LOG_DEBUG, "api", "order created order_id=%" PRId64 " key=%s", r.order_id, key);
        /* fall through */
    case ORDER_WRITER_REPLAY:
        txo_http_response_take(resp, r.status, r.body, strlen(r.body));
        r.body = NULL;
        break;
    case ORDER_WRITER_CONFLICT:
        reply_key_reused(resp);
        break;
    case ORDER_WRITER_REFUSED:
        reply_error(resp, 422, "validation_failed", r.why);
        break;
    case ORDER_WRITER_IN_PROGRESS:
        reply_in_progress(resp);
        break;
    case ORDER_WRITER_SINGLE:
        post_order_single(api, NULL, key, post, resp);
        break;
    case ORDER_WRITER_UNAVAILABLE:
        resp->retry_after_s = 1;
        reply_error(resp, 503, "database_unavailable", r.why);
        break;
    }
    txo_free(r.body);
}

static void post_order(struct order_api *api, struct txo_db *db, const struct route_match *m,
                       const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)m;
    const char *key = txo_http_request_header(req, "Idempotency-Key");
    struct order_post post;
    if (!check_post(key, txo_http_request_header_count(req, "Idempotency-Key"),
                    txo_http_request_header(req, "Content-Type"), req->body, req->body_len, &post,
                    resp))
        return;
    if (api->writer != NULL)
        post_order_grouped(api, key, &post, resp);
    else
        post_order_single(api, db, key, &post, resp);
    order_post_release(&post);
}

/* ---- the other routes ---- */

/* Parses the decimal id after prefix in path ("/orders/42" -> 42); the rest must be suffix. */
static bool path_id(const char *path, const char *prefix, const char *suffix, int64_t *id)
{
    size_t plen = strlen(prefix);
    if (strncmp(path, prefix, plen) != 0)
        return false;
    const char *p = path + plen;
    if (*p < '0' || *p > '9')
        return false;
    int64_t v = 0;
    while (*p >= '0' && *p <= '9') {
        if (v > (INT64_MAX - (*p - '0')) / 10)
            return false;
        v = v * 10 + (*p - '0');
        p++;
    }
    if (strcmp(p, suffix) != 0)
        return false;
    *id = v;
    return true;
}

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
    if (idlen == 0 || idlen >= TXO_SAGA_ID_LEN)
        return false;
    for (size_t i = 0; i < idlen; i++) {
        char c = path[plen + i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
              c == '-'))
            return false;
    }
    memcpy(out, path + plen, idlen);
    out[idlen] = '\0';
    return true;
}

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
        reply_txo_error(resp, rc, &err);
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
        reply_error(resp, 428, "precondition_required",
                    "send If-Match with the order's version (the ETag of GET /orders/{id})");
        return;
    }
    if (!parse_if_match(if_match, &a.version)) {
        reply_error(resp, 400, "invalid_request",
                    "If-Match must be the order's version, e.g. \"0\"");
        return;
    }
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, cancel_tx, &a, &err);
    if (rc == TXO_ECONFLICT) {
        reply_error(resp, 412, "version_conflict", err.msg);
        return;
    }
    if (rc != 0) {
        reply_txo_error(resp, rc, &err);
        return;
    }
    snprintf(resp->header_name, sizeof(resp->header_name), "ETag");
    snprintf(resp->header_value, sizeof(resp->header_value), "\"%" PRId64 "\"", a.new_version);
    reply_json(resp, 200,
               json_pack("{s:I,s:s,s:I}", "order_id", (json_int_t)id, "status", "CANCELLED",
                         "version", (json_int_t)a.new_version));
}

static void get_saga(struct order_api *api, struct txo_db *db, const struct route_match *m,
                     const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)api;
    (void)req;
    const char *id = m->saga_id;
    struct txo_error err;
    txo_error_init(&err);
    struct txo_saga_info info;
    int rc = txo_saga_load(db, id, &info, &err);
    if (rc != 0) {
        reply_txo_error(resp, rc, &err);
        return;
    }
    char *json = txo_saga_info_json(&info, &err);
    txo_saga_info_release(&info);
    if (json == NULL) {
        reply_txo_error(resp, TXO_ENOMEM, &err);
        return;
    }
    txo_http_response_take(resp, 200, json, strlen(json));
}

static void retry_saga(struct order_api *api, struct txo_db *db, const struct route_match *m,
                       const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)req;
    const char *id = m->saga_id;
    struct txo_error err;
    txo_error_init(&err);
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    int rc = orders_retry_saga_with(db, id, api->opts.services, NULL, NULL, &final, &err);
    if (rc != 0) {
        reply_txo_error(resp, rc, &err);
        return;
    }
    reply_json(resp, 200,
               json_pack("{s:s,s:s}", "saga_id", id, "status", txo_saga_status_name(final)));
}

static void outbox_stats(struct order_api *api, struct txo_db *db, const struct route_match *m,
                         const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)api;
    (void)m;
    (void)req;
    struct txo_error err;
    txo_error_init(&err);
    struct txo_outbox_stats st;
    int rc = txo_outbox_get_stats(db, &st, &err);
    if (rc != 0) {
        reply_txo_error(resp, rc, &err);
        return;
    }
    reply_json(resp, 200,
               json_pack("{s:I,s:I,s:I,s:I,s:I,s:f}", "pending", (json_int_t)st.pending,
                         "processing", (json_int_t)st.processing, "published",
                         (json_int_t)st.published, "failed", (json_int_t)st.failed, "dead_letters",
                         (json_int_t)st.dead_letters, "oldest_pending_age_seconds",
                         st.oldest_pending_age_s));
}

/* A decimal integer in lo..hi and nothing else; out of range (even past int64) is refused,
 * never clamped. */
static bool parse_int64(const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static void list_dlq(struct order_api *api, struct txo_db *db, const struct route_match *m,
                     const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)api;
    (void)m;
    struct txo_error err;
    txo_error_init(&err);
    const char *after = txo_http_request_arg(req, "after_id");
    const char *limit = txo_http_request_arg(req, "limit");
    if (txo_http_request_arg_count(req, "after_id") > 1 ||
        txo_http_request_arg_count(req, "limit") > 1) {
        reply_error(resp, 400, "invalid_request", "after_id and limit may be given once each");
        return;
    }
    int64_t after_id = 0;
    if (after != NULL && !parse_int64(after, 0, INT64_MAX, &after_id)) {
        reply_error(resp, 400, "invalid_request", "after_id must be an integer 0..2^63-1");
        return;
    }
    int64_t max = 50;
    if (limit != NULL && !parse_int64(limit, 1, 1000, &max)) {
        reply_error(resp, 400, "invalid_request", "limit must be 1..1000");
        return;
    }
    struct txo_dead_letter *dl = NULL;
    size_t n = 0;
    int rc = txo_dlq_list(db, (int64_t)after_id, (size_t)max, &dl, &n, &err);
    if (rc != 0) {
        reply_txo_error(resp, rc, &err);
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
    reply_json(resp, 200,
               json_pack("{s:o,s:I}", "dead_letters", list, "next_after_id", (json_int_t)next));
}

static void list_parked(struct order_api *api, struct txo_db *db, const struct route_match *m,
                        const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)api;
    (void)m;
    const char *limit = txo_http_request_arg(req, "limit");
    if (txo_http_request_arg_count(req, "limit") > 1) {
        reply_error(resp, 400, "invalid_request", "limit may be given once");
        return;
    }
    int64_t max = 50;
    if (limit != NULL && !parse_int64(limit, 1, 1000, &max)) {
        reply_error(resp, 400, "invalid_request", "limit must be 1..1000");
        return;
    }
    struct txo_relay_parked *p = txo_calloc((size_t)max, sizeof(*p));
    if (p == NULL) {
        reply_error(resp, 500, "internal", "out of memory for the parked aggregates");
        return;
    }
    struct txo_error err;
    txo_error_init(&err);
    size_t n = 0;
    int rc = txo_relay_list_parked(db, p, (size_t)max, &n, &err);
    if (rc != 0) {
        txo_free(p);
        reply_txo_error(resp, rc, &err);
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
    reply_json(resp, 200, json_pack("{s:o,s:I}", "parked", list, "limit", (json_int_t)max));
}

static void replay_dlq(struct order_api *api, struct txo_db *db, const struct route_match *m,
                       const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)api;
    (void)req;
    int64_t id = m->id;
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_dlq_replay(db, id, &err);
    if (rc != 0) {
        reply_txo_error(resp, rc, &err);
        return;
    }
    reply_json(resp, 200, json_pack("{s:I,s:s}", "id", (json_int_t)id, "status", "REPLAYED"));
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
            utf8_sanitize(s->error, error, sizeof(error));
        step = json_pack("{s:I,s:s,s:s,s:I,s:s?,s:I}", "step", (json_int_t)s->step_order, "name",
                         s->name, "status", txo_step_status_name(s->status), "attempts",
                         (json_int_t)s->attempts, "error", s->error != NULL ? error : NULL,
                         "error_code", (json_int_t)s->error_code);
    }
    json_t *e =
        json_pack("{s:s,s:s,s:s,s:s,s:I,s:b,s:I,s:b,s:o*}", "saga_id", info.id, "saga_type",
                  info.type, "correlation_id", info.correlation_id, "status",
                  txo_saga_status_name(info.status), "idle_seconds", (json_int_t)info.idle_s,
                  "stuck", stuck, "compensation_tries", (json_int_t)info.compensation_tries,
                  "retry_scheduled", info.retry_scheduled, "failing_step", step);
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
 * the step that failed and its error.
 */
static void list_sagas(struct order_api *api, struct txo_db *db, const struct route_match *m,
                       const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)api;
    (void)m;
    (void)req;
    struct txo_error err;
    txo_error_init(&err);
    struct txo_saga_counts counts;
    struct txo_saga_ref failed[DASHBOARD_SAGAS_MAX], stuck[DASHBOARD_SAGAS_MAX];
    size_t n_failed = 0, n_stuck = 0;
    int rc = txo_saga_count(db, &counts, &err);
    if (rc == 0)
        rc = txo_saga_list_compensation_failed(db, DASHBOARD_SAGAS_MAX, failed, &n_failed, &err);
    if (rc == 0)
        rc = txo_saga_list_stuck(db, DASHBOARD_STUCK_IDLE_S, DASHBOARD_SAGAS_MAX, stuck, &n_stuck,
                                 &err);
    if (rc != 0) {
        reply_txo_error(resp, rc, &err);
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
        json_t *e = saga_entry(db, ref, is_stuck, &rc, &err);
        if (e != NULL)
            json_array_append_new(list, e);
    }
    if (rc != 0) {
        json_decref(by_status);
        json_decref(list);
        reply_txo_error(resp, rc, &err);
        return;
    }
    reply_json(resp, 200,
               json_pack("{s:o,s:I,s:I,s:o}", "by_status", by_status, "abandoned",
                         (json_int_t)counts.abandoned, "stuck_idle_seconds",
                         (json_int_t)DASHBOARD_STUCK_IDLE_S, "sagas", list));
}

/* GET /processes: the daemons registered in txo_processes (include/txo/registry.h). A schema
 * without the table answers an empty list with "available": false. */
static void list_processes(struct order_api *api, struct txo_db *db, const struct route_match *m,
                           const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)api;
    (void)m;
    (void)req;
    struct txo_error err;
    txo_error_init(&err);
    struct txo_process *ps = NULL;
    size_t n = 0;
    int rc = txo_registry_list(db, DASHBOARD_ALIVE_S, &ps, &n, &err);
    if (rc != 0 && rc != TXO_ENOTFOUND) {
        reply_txo_error(resp, rc, &err);
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
    reply_json(resp, 200,
               json_pack("{s:b,s:I,s:o}", "available", rc == 0, "alive_window_seconds",
                         (json_int_t)DASHBOARD_ALIVE_S, "processes", list));
}

/* The dashboard's files, generated from ui/ (cmake/embed_text.cmake). */
extern const char orders__ui_index_html[];
extern const char orders__ui_app_js[];
extern const char orders__ui_app_css[];

/*
 * GET /ui and its two files. They are served without the admin token, because a browser
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

static void ui_index(struct order_api *api, struct txo_db *db, const struct route_match *m,
                     const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)api;
    (void)db;
    (void)m;
    (void)req;
    ui_file(resp, orders__ui_index_html, "text/html; charset=utf-8");
}

static void ui_js(struct order_api *api, struct txo_db *db, const struct route_match *m,
                  const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)api;
    (void)db;
    (void)m;
    (void)req;
    ui_file(resp, orders__ui_app_js, "text/javascript; charset=utf-8");
}

static void ui_css(struct order_api *api, struct txo_db *db, const struct route_match *m,
                   const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)api;
    (void)db;
    (void)m;
    (void)req;
    ui_file(resp, orders__ui_app_css, "text/css; charset=utf-8");
}

/*
 * Compares the bearer token in constant time: the loop runs over the whole configured token
 * whatever the client sent, so the time taken says nothing about how many bytes matched.
 */
static bool admin_allowed(const struct order_api *api, const struct txo_http_request *req)
{
    const char *token = api->opts.admin_token;
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

static void healthz(struct order_api *api, struct txo_db *db, const struct route_match *m,
                    const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)api;
    (void)db;
    (void)m;
    (void)req;
    (void)txo_http_response_set(resp, 200, "{\"status\":\"ok\"}");
}

extern const char orders__openapi_json[]; /* generated from openapi.json */

const char *order_api_openapi(void)
{
    return orders__openapi_json;
}

static void openapi(struct order_api *api, struct txo_db *db, const struct route_match *m,
                    const struct txo_http_request *req, struct txo_http_response *resp)
{
    (void)api;
    (void)db;
    (void)m;
    (void)req;
    (void)txo_http_response_set(resp, 200, orders__openapi_json);
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
        reply_error(resp, 503, "database_unavailable", err.msg);
    }
}

/* The routes: path = prefix [+ id + suffix]. The first route whose path and method match
 * answers; a path that matches with another method is 405, no match at all 404. */
enum route_param { PARAM_NONE, PARAM_ID, PARAM_SAGA };

struct route {
    const char *method;
    const char *prefix;
    enum route_param param;
    const char *suffix;
    bool admin;    /* needs the bearer token when one is configured */
    bool needs_db; /* borrows a pooled connection for the call */
    void (*fn)(struct order_api *api, struct txo_db *db, const struct route_match *m,
               const struct txo_http_request *req, struct txo_http_response *resp);
};

static const struct route routes[] = {
    {"GET", "/healthz", PARAM_NONE, "", false, false, healthz},
    {"GET", "/openapi.json", PARAM_NONE, "", false, false, openapi},
    {"GET", "/readyz", PARAM_NONE, "", false, true, readyz},
    {"POST", "/orders", PARAM_NONE, "", false, true, post_order},
    {"GET", "/orders/", PARAM_ID, "", false, true, get_order},
    {"POST", "/orders/", PARAM_ID, "/cancel", false, true, cancel_order},
    {"GET", "/outbox/stats", PARAM_NONE, "", true, true, outbox_stats},
    {"GET", "/dlq", PARAM_NONE, "", true, true, list_dlq},
    {"GET", "/outbox/parked", PARAM_NONE, "", true, true, list_parked},
    {"POST", "/dlq/", PARAM_ID, "/replay", true, true, replay_dlq},
    {"POST", "/sagas/", PARAM_SAGA, "/retry", true, true, retry_saga},
    {"GET", "/sagas/", PARAM_SAGA, "", true, true, get_saga},
    {"GET", "/sagas", PARAM_NONE, "", true, true, list_sagas},
    {"GET", "/processes", PARAM_NONE, "", true, true, list_processes},
    {"GET", "/ui", PARAM_NONE, "", false, false, ui_index},
    {"GET", "/ui/app.js", PARAM_NONE, "", false, false, ui_js},
    {"GET", "/ui/app.css", PARAM_NONE, "", false, false, ui_css},
};

bool order_api_route(size_t i, const char **method, char *path, size_t cap, bool *admin)
{
    if (i >= TXO_ARRAY_LEN(routes))
        return false;
    const struct route *r = &routes[i];
    *method = r->method;
    *admin = r->admin;
    snprintf(path, cap, "%s%s%s", r->prefix, r->param != PARAM_NONE ? "{id}" : "", r->suffix);
    return true;
}

static bool path_matches(const struct route *r, const char *path, struct route_match *m)
{
    switch (r->param) {
    case PARAM_ID:
        return path_id(path, r->prefix, r->suffix, &m->id);
    case PARAM_SAGA:
        return path_saga(path, r->prefix, r->suffix, m->saga_id);
    case PARAM_NONE:
        break;
    }
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
        if (routes[i].admin && !admin_allowed(api, req)) {
            reply_error(resp, 401, "unauthorized",
                        "admin endpoints need Authorization: Bearer <token>");
            return;
        }
        if (is(req, routes[i].method))
            found = &routes[i];
    }
    if (found == NULL) {
        if (path_known)
            reply_error(resp, 405, "method_not_allowed", "this method is not allowed on this path");
        else
            reply_error(resp, 404, "not_found", "no such endpoint");
        return;
    }
    struct txo_db *db = NULL;
    /* With the order writer, POST /orders holds no connection while it waits for its group. */
    if (found->needs_db && !(found->fn == post_order && api->writer != NULL)) {
        struct txo_error err;
        txo_error_init(&err);
        if (txo_db_pool_get(api->pool, api->opts.db_wait_ms, &db, &err) != 0) {
            resp->retry_after_s = 1;
            reply_error(resp, 503, "database_unavailable", err.msg);
            return;
        }
    }
    found->fn(api, db, &m, req, resp);
    if (db != NULL)
        txo_db_pool_put(api->pool, db, false);
}
