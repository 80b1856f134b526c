/*
 * txo-fake-services: a fake of the external payment and shipment services that the
 * order saga calls, for tests, demos and fault drills (docs/external-services.md). It is a
 * program of its own, not a `txo` subcommand, so test scaffolding never ships in the product.
 *
 * It behaves like a well-made real service: every effectful call needs an Idempotency-Key;
 * a key seen before gets the stored answer again without a second effect (so /stats can prove
 * "one charge for two requests"); a key reused with a different request is refused (422).
 * Refunds and cancellations are also idempotent per order.
 *
 * And it misbehaves on demand, at start-up (flags) or at run time (POST /control):
 * added latency, a share of calls answered 503 (with no effect), a share of charges declined
 * (402) and shipments refused (422), or hanging: the request is held until the client gives up
 * (the fake service answers 503 with no effect once the hang is switched off, at shutdown, or after
 * 600 s). A failure injected on a call happens before the idempotency lookup, as a crashed or
 * overloaded real service would do, so a retry with the same key later gets the stored answer.
 *
 * One business call runs in three phases, all under the lock (handle_business):
 *   1. fail_before_effect(): latency, hang and injected 503s; the call has no effect;
 *   2. answer_call(): the stored answer for a known key, or the effect applied and stored;
 *   3. after the effect, before the answer leaves: the place for faults whose call took
 *      effect although the client sees none (an answer held back until the client gave up).
 * A new fault is a field of struct behaviour, a key of POST /control, a flag in the table
 * and a few lines in the phase it belongs to.
 *
 * The HTTP side is the library's server (include/txo/http_server.h: an I/O thread and a pool of
 * handler threads, so a hung request holds one handler thread). All state is
 * in one struct fake under one mutex: the handler runs on many threads at once. Waits (latency,
 * hang) are condition-variable waits, so shutdown and /control wake them at once.
 *
 * Shutdown, as in every txo daemon (cmd/txo/signals.h): SIGTERM/SIGINT are blocked before the
 * server's threads start and awaited in the main thread, which then releases every waiting
 * request, stops the server (in-flight requests finish) and exits 0. A second signal ends the
 * process at once.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "settings.h"
#include "signals.h"

#define PROGRAM "txo-fake-services"

static const struct command fake_command = {
    .name = PROGRAM,
    .program = PROGRAM,
    .summary = "fake payment and shipment HTTP service with failure injection (tests, demos)",
    .usage = PROGRAM " [options]",
    .description =
        "Serves a fake payment and shipment API (JSON; every POST needs an Idempotency-Key\n"
        "header, a repeated key gets the stored answer and no second effect):\n"
        "  POST /payments/charge   {\"order_id\":N,\"customer_id\":N,\"amount_cents\":N} -> 201 "
        "CHARGED,\n"
        "                          402 declined (customer_id is optional)\n"
        "  POST /payments/refund   {\"order_id\":N} -> 200 REFUNDED (once per order)\n"
        "  POST /shipments/create  {\"order_id\":N,\"items\":[{\"sku\":S,\"qty\":N}]} -> 201 "
        "CREATED,\n"
        "                          422 refused (items are optional)\n"
        "  POST /shipments/cancel  {\"order_id\":N} -> 200 CANCELLED (once per order)\n"
        "  GET  /stats[?order_id=N]  effects and requests counted so far\n"
        "  POST /control  {\"fail_rate\":x,\"decline_rate\":x,\"ship_decline_rate\":x,\n"
        "                  \"latency_ms\":n,\"hang\":bool,\"fail_path\":\"/payments/refund\",\n"
        "                  \"reset\":bool} changes the behaviour at run time; GET shows it\n"
        "  GET  /healthz  200\n"
        "Test values, like a card network's test cards: a charge for customer_id 402 is\n"
        "declined (402), a charge for customer_id 408 answers after 4 s (time to cancel the\n"
        "order meanwhile), a shipment with the SKU \"undeliverable\" among its items is\n"
        "refused (422); --declined-customer, --slow-customer, --slow-ms and --refused-sku\n"
        "change them (0 or \"\" turns one off).\n"
        "Injected failures (503, hang) have no effect. The URL is printed on stdout once the\n"
        "service listens (port 0 picks a free port). SIGTERM/SIGINT stop it, exit 0.",
};

#define HANG_MAX_MS    600000
#define LATENCY_MAX_MS 600000
#define KEY_MAX        255
#define PATH_MAX_LEN   64
#define KEY_BUCKETS    4096
#define ORDER_BUCKETS  4096

struct fake_cmd_opts {
    const char *listen;
    int64_t latency_ms;
    const char *fail_rate;
    const char *decline_rate;
    const char *ship_decline_rate;
    const char *fail_path;
    bool hang;
    unsigned declined_customer;
    unsigned slow_customer;
    int64_t slow_ms;
    const char *refused_sku;
    unsigned random_state;
    unsigned max_connections;
    const char *log_level;
};

static struct fake_cmd_opts opts;

static struct setting table[] = {
    {.name = "listen",
     .env = "TXO_FAKE_LISTEN",
     .type = SETTING_STRING,
     .def = "127.0.0.1:8090",
     .help = "IPv4 HOST:PORT to serve on (port 0: any free port; the URL is printed on stdout)",
     .target = &opts.listen},
    {.name = "latency-ms",
     .env = "TXO_FAKE_LATENCY_MS",
     .type = SETTING_MS,
     .def = "0",
     .help = "milliseconds added to every payment/shipment call",
     .max = LATENCY_MAX_MS,
     .target = &opts.latency_ms},
    {.name = "fail-rate",
     .env = "TXO_FAKE_FAIL_RATE",
     .type = SETTING_STRING,
     .def = "0",
     .help = "share of payment/shipment calls answered 503 with no effect, 0..1",
     .target = &opts.fail_rate},
    {.name = "decline-rate",
     .env = "TXO_FAKE_DECLINE_RATE",
     .type = SETTING_STRING,
     .def = "0",
     .help = "share of new charges declined with 402 (a business refusal), 0..1",
     .target = &opts.decline_rate},
    {.name = "ship-decline-rate",
     .env = "TXO_FAKE_SHIP_DECLINE_RATE",
     .type = SETTING_STRING,
     .def = "0",
     .help = "share of new shipments refused with 422 (a business refusal), 0..1",
     .target = &opts.ship_decline_rate},
    {.name = "fail-path",
     .env = "TXO_FAKE_FAIL_PATH",
     .type = SETTING_STRING,
     .help = "limit --fail-rate and --hang to this endpoint, e.g. /payments/refund (default: all)",
     .target = &opts.fail_path},
    {.name = "hang",
     .env = "TXO_FAKE_HANG",
     .type = SETTING_BOOL,
     .def = "false",
     .help = "hold every payment/shipment call unanswered until the client gives up (max 600 s)",
     .target = &opts.hang},
    {.name = "declined-customer",
     .env = "TXO_FAKE_DECLINED_CUSTOMER",
     .type = SETTING_UINT,
     .def = "402",
     .help = "customer_id whose every charge is declined with 402 (0: none)",
     .max = 4294967295UL,
     .target = &opts.declined_customer},
    {.name = "slow-customer",
     .env = "TXO_FAKE_SLOW_CUSTOMER",
     .type = SETTING_UINT,
     .def = "408",
     .help = "customer_id whose charges answer after --slow-ms (0: none)",
     .max = 4294967295UL,
     .target = &opts.slow_customer},
    {.name = "slow-ms",
     .env = "TXO_FAKE_SLOW_MS",
     .type = SETTING_MS,
     .def = "4000",
     .help = "how long a charge for --slow-customer takes",
     .max = LATENCY_MAX_MS,
     .target = &opts.slow_ms},
    {.name = "refused-sku",
     .env = "TXO_FAKE_REFUSED_SKU",
     .type = SETTING_STRING,
     .def = "undeliverable",
     .help = "SKU that no shipment may contain: such a shipment is refused with 422 (\"\": none)",
     .target = &opts.refused_sku},
    {.name = "random-state",
     .env = "TXO_FAKE_RANDOM_STATE",
     .type = SETTING_UINT,
     .def = "1",
     .help = "initial state of the failure and decline random draws",
     .max = 4294967295UL,
     .target = &opts.random_state},
    {.name = "max-connections",
     .env = "TXO_FAKE_MAX_CONNECTIONS",
     .type = SETTING_UINT,
     .def = "512",
     .help = "concurrent connections (each held by a hanging call counts)",
     .min = 1,
     .max = 10000,
     .target = &opts.max_connections},
    {.name = "log-level",
     .env = "TXO_LOG_LEVEL",
     .type = SETTING_STRING,
     .def = "info",
     .help = "error, warn, info or debug (debug: one line per request)",
     .target = &opts.log_level},
};

/* ---- state ---- */

enum endpoint {
    EP_CHARGE,
    EP_REFUND,
    EP_SHIP,
    EP_CANCEL,
    EP_COUNT,
};

static const char *const endpoint_paths[EP_COUNT] = {
    "/payments/charge",
    "/payments/refund",
    "/shipments/create",
    "/shipments/cancel",
};

/* What the service does wrong right now. */
struct behaviour {
    double fail_rate;
    double decline_rate;
    double ship_decline_rate;
    int64_t latency_ms;
    bool hang;
    char fail_path[PATH_MAX_LEN]; /* "" = every business endpoint */
};

/* A stored answer, by endpoint and Idempotency-Key. */
struct stored {
    struct stored *next;
    enum endpoint ep;
    char *key;
    int64_t order_id;
    int64_t amount_cents;
    int status;
    char *body;
};

struct order_rec {
    struct order_rec *next;
    int64_t order_id;
    uint64_t charges;
    uint64_t refunds;
    uint64_t shipments;
    uint64_t cancels;
    int64_t charged_cents;
    char traceparent[EP_COUNT][56]; /* the last traceparent header per endpoint; "": none */
};

struct stats {
    uint64_t requests[EP_COUNT];
    uint64_t charges;
    uint64_t declines;
    uint64_t refunds;
    uint64_t shipments;
    uint64_t shipment_declines;
    uint64_t cancels;
    uint64_t replays;
    uint64_t failures_injected;
    uint64_t hangs;
};

/* The test values (--declined-customer, ...): set at start, read-only afterwards. */
struct test_values {
    int64_t declined_customer; /* 0: none */
    int64_t slow_customer;     /* 0: none */
    int64_t slow_ms;
    const char *refused_sku; /* "": none */
};

struct fake {
    struct test_values tv;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC; broadcast on shutdown and when a hang ends */
    bool stopping;
    uint64_t hang_epoch; /* moves when hang is switched off: hung requests are released */
    struct behaviour b;
    uint64_t rng;
    struct stats st;
    uint64_t next_payment;
    uint64_t next_shipment;
    struct stored *keys[KEY_BUCKETS];
    struct order_rec *orders[ORDER_BUCKETS];
};

/* splitmix64: small, restartable from a given state, good enough for failure injection. Called
 * under mu. */
static double draw(struct fake *s)
{
    uint64_t z = (s->rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

static struct stored *find_stored(struct fake *s, enum endpoint ep, const char *key)
{
    for (struct stored *e = s->keys[hash_str(key) % KEY_BUCKETS]; e != NULL; e = e->next) {
        if (e->ep == ep && strcmp(e->key, key) == 0)
            return e;
    }
    return NULL;
}

/* Returns the order's record, created on first use, or NULL when out of memory. */
static struct order_rec *order_rec(struct fake *s, int64_t order_id)
{
    size_t b = (size_t)((uint64_t)order_id % ORDER_BUCKETS);
    for (struct order_rec *o = s->orders[b]; o != NULL; o = o->next) {
        if (o->order_id == order_id)
            return o;
    }
    struct order_rec *o = txo_calloc(1, sizeof(*o));
    if (o == NULL)
        return NULL;
    o->order_id = order_id;
    o->next = s->orders[b];
    s->orders[b] = o;
    return o;
}

static const struct order_rec *find_order(const struct fake *s, int64_t order_id)
{
    const struct order_rec *o = s->orders[(uint64_t)order_id % ORDER_BUCKETS];
    while (o != NULL && o->order_id != order_id)
        o = o->next;
    return o;
}

static void clear_state(struct fake *s)
{
    for (size_t i = 0; i < KEY_BUCKETS; i++) {
        while (s->keys[i] != NULL) {
            struct stored *e = s->keys[i];
            s->keys[i] = e->next;
            txo_free(e->key);
            txo_free(e->body);
            txo_free(e);
        }
    }
    for (size_t i = 0; i < ORDER_BUCKETS; i++) {
        while (s->orders[i] != NULL) {
            struct order_rec *o = s->orders[i];
            s->orders[i] = o->next;
            txo_free(o);
        }
    }
    memset(&s->st, 0, sizeof(s->st));
    s->next_payment = 0;
    s->next_shipment = 0;
}

/*
 * Waits up to ms with mu held. Returns early at shutdown, and, when hang_epoch is not NULL,
 * once s->hang_epoch differs from *hang_epoch (the hang was switched off).
 */
static void wait_locked(struct fake *s, int64_t ms, const uint64_t *hang_epoch)
{
    struct timespec deadline;
    txo_monotonic_deadline(ms, &deadline);
    while (!s->stopping && (hang_epoch == NULL || *hang_epoch == s->hang_epoch)) {
        if (pthread_cond_timedwait(&s->cv, &s->mu, &deadline) == ETIMEDOUT)
            break;
    }
}

/* ---- responses ---- */

/* Sets a JSON response from a jansson value (stolen). */
static void reply_json(struct txo_http_response *resp, int status, json_t *v)
{
    char *text = v != NULL ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    if (text == NULL) {
        (void)txo_http_response_set(resp, 500, "{\"error\":\"out of memory\"}");
        return;
    }
    (void)txo_http_response_set(resp, status, text);
    free(text);
}

static void reply_error(struct txo_http_response *resp, int status, const char *message)
{
    reply_json(resp, status, json_pack("{s:s}", "error", message));
}

static json_t *behaviour_json(const struct behaviour *b)
{
    return json_pack("{s:f,s:f,s:f,s:I,s:b,s:s?}", "fail_rate", b->fail_rate, "decline_rate",
                     b->decline_rate, "ship_decline_rate", b->ship_decline_rate, "latency_ms",
                     (json_int_t)b->latency_ms, "hang", (int)b->hang, "fail_path",
                     b->fail_path[0] != '\0' ? b->fail_path : NULL);
}

/* ---- parsing ---- */

static bool parse_rate(const char *text, double *out)
{
    if (text == NULL || *text == '\0')
        return false;
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v) || v < 0.0 || v > 1.0)
        return false;
    *out = v;
    return true;
}

/* A JSON number in [0, 1]. */
static bool json_rate(const json_t *v, double *out)
{
    if (!json_is_number(v))
        return false;
    double d = json_number_value(v);
    if (!isfinite(d) || d < 0.0 || d > 1.0)
        return false;
    *out = d;
    return true;
}

static bool valid_fail_path(const char *path)
{
    if (path[0] == '\0')
        return true;
    for (size_t i = 0; i < EP_COUNT; i++) {
        if (strcmp(path, endpoint_paths[i]) == 0)
            return true;
    }
    return false;
}

/* Splits "HOST:PORT" ("localhost" means 127.0.0.1). */
static bool parse_listen(const char *text, char *host, size_t cap, unsigned *port)
{
    const char *colon = strrchr(text, ':');
    if (colon == NULL || colon == text || (size_t)(colon - text) >= cap)
        return false;
    char *end = NULL;
    errno = 0;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (errno != 0 || end == colon + 1 || *end != '\0' || p > 65535)
        return false;
    snprintf(host, cap, "%.*s", (int)(colon - text), text);
    if (strcmp(host, "localhost") == 0)
        snprintf(host, cap, "127.0.0.1");
    *port = (unsigned)p;
    return true;
}

/* ---- endpoints ---- */

static void handle_control(struct fake *s, const struct txo_http_request *req,
                           struct txo_http_response *resp)
{
    if (strcmp(req->method, "GET") == 0) {
        pthread_mutex_lock(&s->mu);
        json_t *v = behaviour_json(&s->b);
        pthread_mutex_unlock(&s->mu);
        reply_json(resp, 200, v);
        return;
    }
    json_error_t jerr;
    json_t *in = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(in)) {
        json_decref(in);
        reply_error(resp, 400, "body must be a JSON object");
        return;
    }
    /* Read, change and commit under one lock, so concurrent changes do not undo each other. */
    pthread_mutex_lock(&s->mu);
    struct behaviour b = s->b;
    bool reset = false;
    const char *key;
    json_t *v;
    const char *bad = NULL;
    json_object_foreach(in, key, v)
    {
        if (strcmp(key, "fail_rate") == 0) {
            if (!json_rate(v, &b.fail_rate))
                bad = "fail_rate must be a number from 0 to 1";
        } else if (strcmp(key, "decline_rate") == 0) {
            if (!json_rate(v, &b.decline_rate))
                bad = "decline_rate must be a number from 0 to 1";
        } else if (strcmp(key, "ship_decline_rate") == 0) {
            if (!json_rate(v, &b.ship_decline_rate))
                bad = "ship_decline_rate must be a number from 0 to 1";
        } else if (strcmp(key, "latency_ms") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > LATENCY_MAX_MS)
                bad = "latency_ms must be an integer from 0 to 600000";
            else
                b.latency_ms = json_integer_value(v);
        } else if (strcmp(key, "hang") == 0) {
            if (!json_is_boolean(v))
                bad = "hang must be true or false";
            else
                b.hang = json_is_true(v);
        } else if (strcmp(key, "fail_path") == 0) {
            const char *p = json_is_null(v) ? "" : json_string_value(v);
            if (p == NULL || !valid_fail_path(p))
                bad = "fail_path must be one of the four business endpoints, \"\" or null";
            else
                snprintf(b.fail_path, sizeof(b.fail_path), "%s", p);
        } else if (strcmp(key, "reset") == 0) {
            if (!json_is_boolean(v))
                bad = "reset must be true or false";
            else
                reset = json_is_true(v);
        } else {
            bad = "unknown setting (fail_rate, decline_rate, ship_decline_rate, latency_ms, "
                  "hang, fail_path, reset)";
        }
        if (bad != NULL)
            break;
    }
    json_decref(in);
    if (bad != NULL) {
        pthread_mutex_unlock(&s->mu);
        reply_error(resp, 400, bad);
        return;
    }
    if (s->b.hang && !b.hang)
        s->hang_epoch++;
    s->b = b;
    if (reset)
        clear_state(s);
    pthread_cond_broadcast(&s->cv);
    json_t *out = behaviour_json(&s->b);
    pthread_mutex_unlock(&s->mu);
    TXO_LOG(TXO_LOG_INFO, "fake", "behaviour changed", TXO_KV_F64("fail_rate", b.fail_rate),
            TXO_KV_F64("decline_rate", b.decline_rate),
            TXO_KV_F64("ship_decline_rate", b.ship_decline_rate),
            TXO_KV_I64("latency_ms", b.latency_ms), TXO_KV_BOOL("hang", b.hang),
            TXO_KV_STR("fail_path", b.fail_path[0] != '\0' ? b.fail_path : "*"),
            TXO_KV_BOOL("reset", reset));
    reply_json(resp, 200, out);
}

static json_t *order_json(const struct order_rec *o, int64_t order_id)
{
    struct order_rec none = {.order_id = order_id};
    if (o == NULL)
        o = &none;
    json_t *v = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "order_id", (json_int_t)o->order_id,
                          "charges", (json_int_t)o->charges, "charged_cents",
                          (json_int_t)o->charged_cents, "refunds", (json_int_t)o->refunds,
                          "shipments", (json_int_t)o->shipments, "cancels", (json_int_t)o->cancels);
    json_t *tp = json_object();
    for (int ep = 0; tp != NULL && ep < EP_COUNT; ep++)
        if (o->traceparent[ep][0] != '\0')
            json_object_set_new(tp, endpoint_paths[ep], json_string(o->traceparent[ep]));
    if (v != NULL && tp != NULL)
        json_object_set_new(v, "traceparent", tp);
    else
        json_decref(tp);
    return v;
}

static void handle_stats(struct fake *s, const struct txo_http_request *req,
                         struct txo_http_response *resp)
{
    const char *order_arg = txo_http_request_arg(req, "order_id");
    int64_t order_id = 0;
    if (order_arg != NULL) {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(order_arg, &end, 10);
        if (errno != 0 || end == order_arg || *end != '\0') {
            reply_error(resp, 400, "order_id must be an integer");
            return;
        }
        order_id = v;
    }
    pthread_mutex_lock(&s->mu);
    const struct stats *st = &s->st;
    json_t *v = json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "charges", (json_int_t)st->charges,
        "charge_requests", (json_int_t)st->requests[EP_CHARGE], "declines",
        (json_int_t)st->declines, "refunds", (json_int_t)st->refunds, "refund_requests",
        (json_int_t)st->requests[EP_REFUND], "shipments", (json_int_t)st->shipments,
        "shipment_requests", (json_int_t)st->requests[EP_SHIP], "shipment_declines",
        (json_int_t)st->shipment_declines, "cancels", (json_int_t)st->cancels, "cancel_requests",
        (json_int_t)st->requests[EP_CANCEL], "replays", (json_int_t)st->replays,
        "failures_injected", (json_int_t)st->failures_injected, "hangs", (json_int_t)st->hangs);
    if (v != NULL && order_arg != NULL)
        json_object_set_new(v, "order", order_json(find_order(s, order_id), order_id));
    pthread_mutex_unlock(&s->mu);
    reply_json(resp, 200, v);
}

/* The request of a business call, validated. */
struct call {
    enum endpoint ep;
    const char *key;
    int64_t order_id;
    int64_t customer_id; /* 0: not sent */
    int64_t amount_cents;
    bool refused_sku; /* a shipment whose items hold the test value --refused-sku */
};

/* Checks the optional "items" of a shipment: [{"sku":"...","qty":N}, ...]. Returns NULL or why
 * not; sets c->refused_sku when one of them is `refused` (non-empty). */
static const char *parse_items(const json_t *items, const char *refused, struct call *c)
{
    if (items == NULL)
        return NULL;
    if (!json_is_array(items))
        return "items must be an array";
    size_t k;
    const json_t *item;
    json_array_foreach(items, k, item)
    {
        const json_t *sku = json_object_get(item, "sku");
        const json_t *qty = json_object_get(item, "qty");
        if (!json_is_string(sku) || !json_is_integer(qty) || json_integer_value(qty) <= 0)
            return "each item must be {\"sku\": string, \"qty\": positive integer}";
        if (refused[0] != '\0' && strcmp(json_string_value(sku), refused) == 0)
            c->refused_sku = true;
    }
    return NULL;
}

/* Parses and validates the body. Returns NULL or the reason for a 400. */
static const char *parse_call(const struct fake *s, const struct txo_http_request *req,
                              struct call *c, char *why, size_t cap)
{
    json_error_t jerr;
    json_t *in = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (in == NULL) {
        snprintf(why, cap, "bad JSON: %s", jerr.text);
        return why;
    }
    const char *reason = NULL;
    json_t *order = json_object_get(in, "order_id");
    json_t *amount = json_object_get(in, "amount_cents");
    json_t *customer = json_object_get(in, "customer_id");
    if (!json_is_object(in))
        reason = "body must be a JSON object";
    else if (!json_is_integer(order) || json_integer_value(order) <= 0)
        reason = "order_id must be a positive integer";
    else if (customer != NULL && (!json_is_integer(customer) || json_integer_value(customer) <= 0))
        reason = "customer_id must be a positive integer";
    else if (c->ep == EP_CHARGE && (!json_is_integer(amount) || json_integer_value(amount) < 0))
        reason = "amount_cents must be an integer >= 0";
    else if (c->ep == EP_SHIP)
        reason = parse_items(json_object_get(in, "items"), s->tv.refused_sku, c);
    if (reason == NULL) {
        c->order_id = json_integer_value(order);
        c->customer_id = customer != NULL ? json_integer_value(customer) : 0;
        c->amount_cents = c->ep == EP_CHARGE ? json_integer_value(amount) : 0;
    }
    json_decref(in);
    return reason;
}

/* Applies a new call's effect with mu held; fills status and the body. */
static json_t *apply_call(struct fake *s, const struct call *c, struct order_rec *o, int *status)
{
    char id[32];
    switch (c->ep) {
    case EP_CHARGE:
        if ((c->customer_id != 0 && c->customer_id == s->tv.declined_customer) ||
            (s->b.decline_rate > 0.0 && draw(s) < s->b.decline_rate)) {
            s->st.declines++;
            *status = 402;
            return json_pack("{s:s,s:s,s:I}", "error", "card_declined", "status", "DECLINED",
                             "order_id", (json_int_t)c->order_id);
        }
        s->st.charges++;
        o->charges++;
        o->charged_cents += c->amount_cents;
        snprintf(id, sizeof(id), "pay_%" PRIu64, ++s->next_payment);
        *status = 201;
        return json_pack("{s:s,s:I,s:I,s:s}", "payment_id", id, "order_id", (json_int_t)c->order_id,
                         "amount_cents", (json_int_t)c->amount_cents, "status", "CHARGED");
    case EP_REFUND:
        if (o->refunds == 0) {
            s->st.refunds++;
            o->refunds++;
        }
        *status = 200;
        return json_pack("{s:I,s:s}", "order_id", (json_int_t)c->order_id, "status", "REFUNDED");
    case EP_SHIP:
        if (c->refused_sku || (s->b.ship_decline_rate > 0.0 && draw(s) < s->b.ship_decline_rate)) {
            s->st.shipment_declines++;
            *status = 422;
            return json_pack("{s:s,s:s,s:I}", "error", "address_unserviceable", "status",
                             "REJECTED", "order_id", (json_int_t)c->order_id);
        }
        s->st.shipments++;
        o->shipments++;
        snprintf(id, sizeof(id), "shp_%" PRIu64, ++s->next_shipment);
        *status = 201;
        return json_pack("{s:s,s:I,s:s}", "shipment_id", id, "order_id", (json_int_t)c->order_id,
                         "status", "CREATED");
    case EP_CANCEL:
        if (o->cancels == 0) {
            s->st.cancels++;
            o->cancels++;
        }
        *status = 200;
        return json_pack("{s:I,s:s}", "order_id", (json_int_t)c->order_id, "status", "CANCELLED");
    case EP_COUNT:
        break;
    }
    return NULL;
}

/* Stores the answer under the call's key with mu held. False when out of memory. */
static bool store(struct fake *s, const struct call *c, int status, const char *body)
{
    struct stored *e = txo_calloc(1, sizeof(*e));
    if (e == NULL)
        return false;
    e->ep = c->ep;
    e->key = txo_strdup(c->key);
    e->body = txo_strdup(body);
    if (e->key == NULL || e->body == NULL) {
        txo_free(e->key);
        txo_free(e->body);
        txo_free(e);
        return false;
    }
    e->order_id = c->order_id;
    e->amount_cents = c->amount_cents;
    e->status = status;
    size_t b = hash_str(c->key) % KEY_BUCKETS;
    e->next = s->keys[b];
    s->keys[b] = e;
    return true;
}

/*
 * Phase 1 of a business call, with mu held: added latency, then a hang or an injected 503 when
 * the call is targeted. True when resp was set here, and then the call had no effect.
 */
static bool fail_before_effect(struct fake *s, enum endpoint ep, struct txo_http_response *resp)
{
    bool targeted = s->b.fail_path[0] == '\0' || strcmp(s->b.fail_path, endpoint_paths[ep]) == 0;
    if (s->b.latency_ms > 0)
        wait_locked(s, s->b.latency_ms, NULL);
    if (targeted && s->b.hang && !s->stopping) {
        s->st.hangs++;
        uint64_t epoch = s->hang_epoch;
        wait_locked(s, HANG_MAX_MS, &epoch);
        reply_error(resp, 503, "hang released without an answer (no effect)");
        return true;
    }
    if (s->stopping) {
        reply_error(resp, 503, "shutting down");
        return true;
    }
    if (targeted && s->b.fail_rate > 0.0 && draw(s) < s->b.fail_rate) {
        s->st.failures_injected++;
        reply_error(resp, 503, "injected failure (no effect)");
        return true;
    }
    return false;
}

/*
 * Phase 2, with mu held: the stored answer when the key was seen before (422 when it came with
 * a different request), else the effect applied and its answer stored under the key.
 */
static void answer_call(struct fake *s, const struct call *c, struct txo_http_response *resp)
{
    const struct stored *prev = find_stored(s, c->ep, c->key);
    if (prev != NULL) {
        if (prev->order_id != c->order_id || prev->amount_cents != c->amount_cents) {
            reply_error(resp, 422, "Idempotency-Key reused with a different request");
            return;
        }
        s->st.replays++;
        (void)txo_http_response_set(resp, prev->status, prev->body);
        return;
    }
    struct order_rec *o = order_rec(s, c->order_id);
    if (o == NULL) {
        reply_error(resp, 500, "out of memory");
        return;
    }
    int status = 500;
    json_t *out = apply_call(s, c, o, &status);
    char *text = out != NULL ? json_dumps(out, JSON_COMPACT) : NULL;
    json_decref(out);
    if (text == NULL || !store(s, c, status, text)) {
        /* The effect may have happened; the client retries with the same key. */
        free(text);
        reply_error(resp, 500, "out of memory");
        return;
    }
    (void)txo_http_response_set(resp, status, text);
    free(text);
}

static void handle_business(struct fake *s, enum endpoint ep, const struct txo_http_request *req,
                            struct txo_http_response *resp)
{
    pthread_mutex_lock(&s->mu);
    s->st.requests[ep]++;
    pthread_mutex_unlock(&s->mu);

    struct call c = {.ep = ep, .key = txo_http_request_header(req, "Idempotency-Key")};
    if (c.key == NULL || c.key[0] == '\0') {
        reply_error(resp, 400, "the Idempotency-Key header is required");
        return;
    }
    if (strlen(c.key) > KEY_MAX) {
        reply_error(resp, 400, "the Idempotency-Key header is longer than 255 bytes");
        return;
    }
    char why[256];
    const char *bad = parse_call(s, req, &c, why, sizeof(why));
    if (bad != NULL) {
        reply_error(resp, 400, bad);
        return;
    }

    pthread_mutex_lock(&s->mu);
    /* What a tracing caller sent: the last one per endpoint, for tests to read in /stats. */
    const char *tp = txo_http_request_header(req, "traceparent");
    struct order_rec *traced = tp != NULL ? order_rec(s, c.order_id) : NULL;
    if (traced != NULL)
        snprintf(traced->traceparent[ep], sizeof(traced->traceparent[ep]), "%s", tp);
    if (ep == EP_CHARGE && c.customer_id != 0 && c.customer_id == s->tv.slow_customer)
        wait_locked(s, s->tv.slow_ms, NULL); /* a slow card network: the effect comes later */
    if (!fail_before_effect(s, ep, resp))
        answer_call(s, &c, resp);
    /* Phase 3 (faults after the effect) goes here, before the answer leaves. */
    pthread_mutex_unlock(&s->mu);
}

static void handle(void *arg, const struct txo_http_request *req, struct txo_http_response *resp)
{
    struct fake *s = arg;
    bool get = strcmp(req->method, "GET") == 0;
    bool post = strcmp(req->method, "POST") == 0;
    if (strcmp(req->path, "/healthz") == 0) {
        if (get)
            (void)txo_http_response_set(resp, 200, "{\"status\":\"ok\"}");
        else
            reply_error(resp, 405, "use GET");
    } else if (strcmp(req->path, "/stats") == 0) {
        if (get)
            handle_stats(s, req, resp);
        else
            reply_error(resp, 405, "use GET");
    } else if (strcmp(req->path, "/control") == 0) {
        if (get || post)
            handle_control(s, req, resp);
        else
            reply_error(resp, 405, "use GET or POST");
    } else {
        size_t ep = 0;
        while (ep < EP_COUNT && strcmp(req->path, endpoint_paths[ep]) != 0)
            ep++;
        if (ep == EP_COUNT)
            reply_error(resp, 404, "no such endpoint");
        else if (!post)
            reply_error(resp, 405, "use POST");
        else
            handle_business(s, (enum endpoint)ep, req, resp);
    }
    TXO_LOG(TXO_LOG_DEBUG, "fake", "request", TXO_KV_STR("method", req->method),
            TXO_KV_STR("path", req->path), TXO_KV_I64("http_status", resp->status),
            TXO_KV_STR("key", txo_http_request_header(req, "Idempotency-Key") != NULL
                                  ? txo_http_request_header(req, "Idempotency-Key")
                                  : "-"));
}

/* ---- lifecycle ---- */

static bool fake_init(struct fake *s)
{
    memset(s, 0, sizeof(*s));
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        return false;
    bool ok = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
              pthread_cond_init(&s->cv, &attr) == 0;
    pthread_condattr_destroy(&attr);
    if (!ok)
        return false;
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        pthread_cond_destroy(&s->cv);
        return false;
    }
    return true;
}

static void fake_release(struct fake *s)
{
    clear_state(s);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
}

static bool rate_setting(const char *name, const char *text, double *out)
{
    if (parse_rate(text, out))
        return true;
    fprintf(stderr, PROGRAM ": --%s must be a number from 0 to 1, got \"%s\"\n", name,
            text != NULL ? text : "");
    return false;
}

int main(int argc, char **argv)
{
    enum settings_result r =
        settings_parse(&fake_command, table, TXO_ARRAY_LEN(table), argc, argv, NULL);
    if (r != SETTINGS_OK)
        return r == SETTINGS_EXIT_OK ? 0 : 2;

    enum txo_log_level level;
    if (txo_log_level_parse(opts.log_level, &level) < 0) {
        fprintf(stderr, PROGRAM ": --log-level must be error, warn, info or debug, got \"%s\"\n",
                opts.log_level);
        return 2;
    }
    txo_log_set_level(level);
    struct behaviour b;
    memset(&b, 0, sizeof(b));
    if (!rate_setting("fail-rate", opts.fail_rate, &b.fail_rate) ||
        !rate_setting("decline-rate", opts.decline_rate, &b.decline_rate) ||
        !rate_setting("ship-decline-rate", opts.ship_decline_rate, &b.ship_decline_rate))
        return 2;
    const char *fail_path = opts.fail_path != NULL ? opts.fail_path : "";
    if (!valid_fail_path(fail_path)) {
        fprintf(stderr,
                PROGRAM ": --fail-path must be /payments/charge, /payments/refund, "
                        "/shipments/create or /shipments/cancel, got \"%s\"\n",
                fail_path);
        return 2;
    }
    snprintf(b.fail_path, sizeof(b.fail_path), "%s", fail_path);
    b.latency_ms = opts.latency_ms;
    b.hang = opts.hang;
    char host[64];
    unsigned port = 0;
    if (!parse_listen(opts.listen, host, sizeof(host), &port)) {
        fprintf(stderr, PROGRAM ": --listen must be HOST:PORT, got \"%s\"\n", opts.listen);
        return 2;
    }

    struct fake *s = txo_malloc(sizeof(*s));
    if (s == NULL || !fake_init(s)) {
        txo_free(s);
        fprintf(stderr, PROGRAM ": cannot set up the service state\n");
        return 1;
    }
    s->b = b;
    s->rng = opts.random_state;
    s->tv.declined_customer = opts.declined_customer;
    s->tv.slow_customer = opts.slow_customer;
    s->tv.slow_ms = opts.slow_ms;
    s->tv.refused_sku = opts.refused_sku != NULL ? opts.refused_sku : "";
    int status = 1;
    struct txo_http_server *srv = NULL;
    struct txo_error err;
    txo_error_init(&err);
    signals_block(); /* before the server's threads */

    struct txo_http_server_opts so;
    txo_http_server_opts_init(&so);
    so.host = host;
    so.port = port;
    so.max_connections = opts.max_connections;
    /* Every caller of a test comes from 127.0.0.1, so a per-address cap would be a cap on all
     * of them; and a held (--hang) call keeps a handler thread, so there are enough threads
     * for many held calls while /control and /stats still get answered. */
    so.max_connections_per_client = 0;
    so.handler_threads = opts.max_connections / 4 > 32 ? opts.max_connections / 4 : 32;
    if (txo_http_server_start(&so, handle, s, &srv, &err) < 0) {
        fprintf(stderr, PROGRAM ": starting the HTTP server: %s (%s)\n",
                err.msg[0] ? err.msg : "failed", txo_err_name(err.code));
        status = err.code == TXO_EINVAL ? 2 : 1;
        goto out;
    }
    unsigned bound = txo_http_server_port(srv);
    TXO_LOG(TXO_LOG_INFO, "fake", "listening", TXO_KV_STR("host", host), TXO_KV_U64("port", bound),
            TXO_KV_F64("fail_rate", b.fail_rate), TXO_KV_F64("decline_rate", b.decline_rate),
            TXO_KV_F64("ship_decline_rate", b.ship_decline_rate),
            TXO_KV_I64("latency_ms", b.latency_ms), TXO_KV_BOOL("hang", b.hang),
            TXO_KV_STR("fail_path", b.fail_path[0] != '\0' ? b.fail_path : "*"),
            TXO_KV_U64("random_state", opts.random_state));
    printf("http://%s:%u\n", host, bound);
    fflush(stdout);

    (void)signals_wait();
    TXO_LOG(TXO_LOG_INFO, "fake", "stopping: releasing waiting requests");
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    txo_http_server_stop(srv);
    srv = NULL;
    pthread_mutex_lock(&s->mu);
    TXO_LOG(TXO_LOG_INFO, "fake", "stopped", TXO_KV_U64("charges", s->st.charges),
            TXO_KV_U64("charge_requests", s->st.requests[EP_CHARGE]),
            TXO_KV_U64("refunds", s->st.refunds), TXO_KV_U64("shipments", s->st.shipments),
            TXO_KV_U64("cancels", s->st.cancels),
            TXO_KV_U64("failures_injected", s->st.failures_injected),
            TXO_KV_U64("hangs", s->st.hangs));
    pthread_mutex_unlock(&s->mu);
    status = 0;
out:
    txo_http_server_stop(srv);
    fake_release(s);
    txo_free(s);
    return status;
}
