/*
 * The soak: the whole order pipeline as separate processes on one database, under load and
 * faults for SOAK_SECONDS, then a check that no external effect leaked.
 *
 *   processes   2 x `txo serve`, 2 x `txo relay --publisher nats`, 2 x `txo worker --broker
 *               nats` calling txo-fake-services for payment and shipment with a short
 *               --service-timeout (500 ms), and a private nats-server between relays and
 *               workers. Leases, ack waits and breaker windows are short so that the work of a
 *               killed process is taken over within seconds.
 *   clients     SOAK_CLIENTS threads place orders with an Idempotency-Key each and retry the
 *               POST with the same key after a transport error, a 5xx or a 409 (the key is
 *               busy), and sometimes after a 201 too (a replay must name the same order). They
 *               read orders back (a terminal status never changes), and cancel some of them
 *               with If-Match while their sagas run (re-reading after a 412); a cancel of an
 *               order already finished must get 409.
 *   faults      all the time: the fake service answers a share of calls 503, declines some
 *               charges and refuses some shipments, and one scarce SKU runs out; every few
 *               seconds one daemon is SIGKILLed and restarted on the same port; slow episodes
 *               (latency above the service timeout: the fake service charges after the caller
 *               gave up) and hang episodes (calls held until the caller gives up, no effect).
 *   afterwards  load stopped, faults off; every order and saga must become terminal within
 *               SOAK_SETTLE_SECONDS. Then, from the fake service's own records per order:
 *                 CANCELLED: no charge left unrefunded, no shipment left uncancelled;
 *                 CONFIRMED: one charge of the order's total and one shipment, neither undone;
 *                 and no charge or shipment for an order the database does not have;
 *               and by SQL: the invariants of testpipeline_check_invariants (sagas terminal and
 *               matching their orders, one payment / shipment row per order in the right state,
 *               events of every status change, one inbox row per OrderCreated, stock
 *               conserved), one order per Idempotency-Key, and what the clients saw (a 200 cancel
 *               ends CANCELLED, a seen terminal status is the final one); and, on one database
 *               server, read from the stream with cnats, every aggregate's events in outbox
 *               order (first copies).
 *
 * A summary of what happened is printed either way; on failure the end of every daemon's log.
 * Environment: SOAK_SECONDS (default 300), SOAK_CLIENTS (4), SOAK_RANDOM_STATE (random),
 * SOAK_SETTLE_SECONDS (90), plus what every fault test needs (MYSQL_*, TXO_BIN, TXO_FAKE_BIN). Not
 * part of `make test`: `make soak` runs it (tests/soak/README.md).
 *
 * On clusters (`make cluster-test`, scripts/cluster.sh): SOAK_DB_HOSTS lists the Galera nodes
 * ("h:p,h:p,h:p"; each daemon gets the list starting at another node, so the daemons write
 * through every node and fail over), SOAK_NATS_URLS the JetStream nodes (used instead of a
 * private nats-server, the stream with SOAK_NATS_REPLICAS replicas, default 3 then), and
 * SOAK_CLUSTER_SCRIPT the path of scripts/cluster.sh: then one DB node is SIGKILLed at 30 % of
 * the run and restarted (it rejoins by IST) and one NATS node at 60 %, and at the end every
 * outbox event must be in the stream exactly once (read back with cnats).
 *
 * Threads: the client threads touch only their own struct client and CURL handle (and read the
 * immutable ports and the stop flag); everything that can fail the test (cmocka) runs on the
 * main thread, which also injects the faults.
 */
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>

#include "testdb.h"
#include "testnats.h"
#include "testpipeline.h"
#include "testproc.h"

#define MAX_CLIENTS      32
#define MAX_ERRORS       8    /* first problems a client keeps, for the report */
#define CLIENT_TIMEOUT   3000 /* ms: a client gives up on a request after this, then retries */
#define SERVICE_TIMEOUT  "500"
#define SLOW_LATENCY_MS  800 /* above SERVICE_TIMEOUT: the call times out, then takes effect */
#define SLOW_EPISODE_MS  6000
#define HANG_EPISODE_MS  3000
#define EPISODE_PERIOD_S 100 /* long runs repeat the episodes */

/* ---- HTTP (usable on any thread: never fails the test) ---- */

struct reply {
    long status; /* 0: no answer (refused, reset, timed out) */
    char body[4096];
    size_t len;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct reply *r = arg;
    size_t len = size * n;
    size_t room = sizeof(r->body) - 1 - r->len;
    size_t take = len < room ? len : room;
    memcpy(r->body + r->len, p, take);
    r->len += take;
    r->body[r->len] = '\0';
    return len;
}

/* One request to http://127.0.0.1:<port><path>; headers NULL-terminated or NULL. */
static void http(CURL *h, const char *method, unsigned port, const char *path,
                 const char *const *headers, const char *body, long timeout_ms, struct reply *r)
{
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", port, path);
    r->status = 0;
    r->len = 0;
    r->body[0] = '\0';
    curl_easy_reset(h);
    struct curl_slist *hl = NULL;
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i++)
        hl = curl_slist_append(hl, headers[i]);
    if (body != NULL)
        hl = curl_slist_append(hl, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    if (hl != NULL)
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    if (body != NULL) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(hl);
}

/* An integer member of r's JSON body (or of its object member `obj`), or -1. */
static int64_t reply_int(const struct reply *r, const char *obj, const char *field)
{
    json_t *doc = json_loadb(r->body, r->len, 0, NULL);
    json_t *o = doc != NULL && obj != NULL ? json_object_get(doc, obj) : doc;
    json_t *v = json_object_get(o, field);
    int64_t out = json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
    json_decref(doc);
    return out;
}

/* A string member of r's JSON body copied into out ("" when missing). */
static void reply_str(const struct reply *r, const char *field, char *out, size_t cap)
{
    json_t *doc = json_loadb(r->body, r->len, 0, NULL);
    const char *v = json_string_value(json_object_get(doc, field));
    snprintf(out, cap, "%s", v != NULL ? v : "");
    json_decref(doc);
}

static bool retryable(long status)
{
    return status == 0 || status >= 500 || status == 409;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- the run ---- */

enum daemon_kind { DAEMON_SERVE, DAEMON_RELAY, DAEMON_WORKER, DAEMON_KINDS };
static const char *const kind_names[DAEMON_KINDS] = {"serve", "relay", "worker"};

#define N_DAEMONS 6 /* two of each kind */
#define FAKE_SLOT N_DAEMONS

struct daemon {
    enum daemon_kind kind;
    unsigned n;         /* 1 or 2 */
    unsigned port;      /* --listen (serve) or --metrics-listen: /healthz */
    struct testproc *p; /* a slot of soak.tp.procs, so failures print its log */
    unsigned starts;
};

/* What one client knows of one Idempotency-Key. */
struct key_rec {
    int64_t order_id; /* 0: no 201 came back */
    char seen;        /* 0, 'F' (saw CONFIRMED) or 'X' (saw CANCELLED or cancelled it) */
    bool cancelled;   /* its cancel answered 200 */
};

struct client {
    struct soak *soak;
    unsigned id;
    unsigned rng; /* rand_r state of this client */
    struct key_rec *keys;
    size_t n_keys, cap_keys;
    /* what happened */
    uint64_t posts, post_retries, unanswered, replays, cancels, cancel_200, cancel_409, cancel_412,
        reads;
    char errors[MAX_ERRORS][320];
    size_t n_errors;
    uint64_t more_errors;
};

struct soak {
    struct testdb t;
    struct testnats nats;
    struct testpipeline tp; /* the database checks; its procs: the daemons, the fake service */
    unsigned fake_port;
    char fake_url[64];
    char stream[64], prefix[64], durable[64];
    struct daemon d[N_DAEMONS];
    atomic_bool stop;
    int64_t stop_at_ms; /* when the load was stopped; clients give up retrying 15 s later */
    unsigned kills[DAEMON_KINDS];
    unsigned slow_episodes, hang_episodes;
    /* The clusters (SOAK_DB_HOSTS, SOAK_NATS_URLS, SOAK_CLUSTER_SCRIPT); empty: one server. */
    char db_hosts[256];
    char db_node[3][64];
    unsigned n_db_nodes;
    char nats_node[3][80];
    unsigned n_nats_nodes;
    unsigned nats_replicas;
    char cluster_script[512];
    unsigned db_node_kills, nats_node_kills;
    char old_logs[512][256]; /* logs of killed instances: kept on failure, removed on pass */
    size_t n_old_logs;
    CURL *h; /* the main thread's */
};

static const struct testpipeline_stock stock[] = {
    {"book", 1000000}, {"mug", 1000000}, {"pen", 1000000}, {"rare", 40}};

TXO_PRINTF(2, 3)
static void client_error(struct client *c, const char *fmt, ...)
{
    if (c->n_errors == MAX_ERRORS) {
        c->more_errors++;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errors[c->n_errors++], sizeof(c->errors[0]), fmt, ap);
    va_end(ap);
}

static unsigned serve_port(struct client *c)
{
    return c->soak->d[rand_r(&c->rng) % 2].port; /* d[0], d[1] are the two `txo serve` */
}

static bool give_up(struct client *c)
{
    return atomic_load(&c->soak->stop) && txo_monotonic_ms() > c->soak->stop_at_ms + 15000;
}

/* What a GET says about an order: 'F' CONFIRMED, 'X' CANCELLED, 'C' CREATED, 0 unknown. */
static char status_letter(const char *s)
{
    return strcmp(s, "CONFIRMED") == 0   ? 'F'
           : strcmp(s, "CANCELLED") == 0 ? 'X'
           : strcmp(s, "CREATED") == 0   ? 'C'
                                         : 0;
}

/* Records a status read for rec: a terminal status, once seen, is the final one. */
static void saw(struct client *c, struct key_rec *rec, char letter, const char *body)
{
    if (letter == 0) {
        client_error(c, "order %" PRId64 ": unknown status in %s", rec->order_id, body);
        return;
    }
    if (letter == 'C') {
        if (rec->seen != 0)
            client_error(c, "order %" PRId64 " went back to CREATED after %s", rec->order_id,
                         rec->seen == 'F' ? "CONFIRMED" : "CANCELLED");
        return;
    }
    if (rec->seen != 0 && rec->seen != letter)
        client_error(c, "order %" PRId64 " was %s, now %s", rec->order_id,
                     rec->seen == 'F' ? "CONFIRMED" : "CANCELLED",
                     letter == 'F' ? "CONFIRMED" : "CANCELLED");
    rec->seen = letter;
}

/* GET /orders/<id> until it answers; false when the client gives up. */
static bool read_order(struct client *c, CURL *h, struct key_rec *rec, int64_t *version,
                       struct reply *r)
{
    char path[64];
    snprintf(path, sizeof(path), "/orders/%" PRId64, rec->order_id);
    for (;;) {
        http(h, "GET", serve_port(c), path, NULL, NULL, CLIENT_TIMEOUT, r);
        c->reads++;
        if (r->status == 200)
            break;
        if (!retryable(r->status)) {
            client_error(c, "GET %s: %ld %s", path, r->status, r->body);
            return false;
        }
        if (give_up(c))
            return false;
        sleep_ms(50);
    }
    char status[32];
    reply_str(r, "status", status, sizeof(status));
    saw(c, rec, status_letter(status), r->body);
    *version = reply_int(r, NULL, "version");
    return true;
}

/* Cancels rec's order if it is still CREATED: GET for the version, POST with If-Match. */
static void cancel_order(struct client *c, CURL *h, struct key_rec *rec)
{
    struct reply *r = txo_malloc(sizeof(*r));
    if (r == NULL)
        return;
    char path[80], if_match[64];
    snprintf(path, sizeof(path), "/orders/%" PRId64 "/cancel", rec->order_id);
    c->cancels++;
    for (int tries = 0; tries < 20 && !give_up(c); tries++) {
        int64_t version = -1;
        if (!read_order(c, h, rec, &version, r))
            break;
        /* Finished already: nothing to cancel, but one time in two the cancel is sent anyway,
         * with the current version, and must be refused with 409. */
        bool finished = rec->seen != 0;
        if (finished && (tries > 0 || rand_r(&c->rng) % 2 == 0))
            break;
        snprintf(if_match, sizeof(if_match), "If-Match: \"%" PRId64 "\"", version);
        const char *headers[] = {if_match, NULL};
        http(h, "POST", serve_port(c), path, headers, NULL, CLIENT_TIMEOUT, r);
        if (r->status == 200) {
            if (finished)
                client_error(c, "order %" PRId64 " was %s, yet its cancel answered 200: %s",
                             rec->order_id, rec->seen == 'F' ? "CONFIRMED" : "CANCELLED", r->body);
            c->cancel_200++;
            rec->cancelled = true;
            saw(c, rec, 'X', r->body);
            break;
        }
        if (r->status == 409) { /* no longer CREATED */
            c->cancel_409++;
            break;
        }
        if (r->status == 412) { /* the version moved on (the saga got there first): read again */
            if (finished)
                client_error(c,
                             "order %" PRId64 " is finished at version %" PRId64
                             ", yet that version got 412: %s",
                             rec->order_id, version, r->body);
            c->cancel_412++;
            continue;
        }
        if (!retryable(r->status)) {
            client_error(c, "POST %s: %ld %s", path, r->status, r->body);
            break;
        }
        sleep_ms(50); /* it may have happened: the next read tells */
    }
    txo_free(r);
}

/* POSTs body with key until a 201 (returns its order id) or the client gives up (0). */
static int64_t post_order(struct client *c, CURL *h, const char *key, const char *body,
                          struct reply *r)
{
    char key_header[96];
    snprintf(key_header, sizeof(key_header), "Idempotency-Key: %s", key);
    const char *headers[] = {key_header, NULL};
    for (unsigned tries = 0;; tries++) {
        http(h, "POST", serve_port(c), "/orders", headers, body, CLIENT_TIMEOUT, r);
        c->posts++;
        if (r->status == 201) {
            int64_t id = reply_int(r, NULL, "order_id");
            if (id <= 0)
                client_error(c, "POST /orders key=%s: 201 without an order id: %s", key, r->body);
            return id > 0 ? id : 0;
        }
        if (!retryable(r->status)) {
            client_error(c, "POST /orders key=%s: %ld %s", key, r->status, r->body);
            return 0;
        }
        if (give_up(c) || tries > 200)
            return 0;
        c->post_retries++;
        sleep_ms(20 + rand_r(&c->rng) % 100);
    }
}

/* One order's life as a client lives it. */
static void one_order(struct client *c, CURL *h, struct reply *r)
{
    static const char *const skus[] = {"book", "mug", "pen"};
    if (c->n_keys == c->cap_keys) {
        size_t cap = c->cap_keys != 0 ? c->cap_keys * 2 : 256;
        struct key_rec *k = txo_realloc(c->keys, cap * sizeof(*k));
        if (k == NULL) {
            client_error(c, "out of memory");
            sleep_ms(100);
            return;
        }
        c->keys = k;
        c->cap_keys = cap;
    }
    size_t idx = c->n_keys++;
    struct key_rec *rec = &c->keys[idx];
    memset(rec, 0, sizeof(*rec));

    char key[64], body[512];
    snprintf(key, sizeof(key), "soak-%u-%zu", c->id, idx);
    int n =
        snprintf(body, sizeof(body), "{\"customer_id\":%u,\"items\":[", 1 + rand_r(&c->rng) % 1000);
    unsigned items = 1 + rand_r(&c->rng) % 3;
    unsigned first = rand_r(&c->rng) % 3;
    for (unsigned i = 0; i < items; i++)
        n += snprintf(body + n, sizeof(body) - (size_t)n,
                      "%s{\"sku\":\"%s\",\"qty\":%u,\"price_cents\":%u}", i > 0 ? "," : "",
                      skus[(first + i) % 3], 1 + rand_r(&c->rng) % 3, 100 + rand_r(&c->rng) % 2000);
    if (rand_r(&c->rng) % 8 == 0) /* the scarce one: it runs out, sagas then fail at once */
        n += snprintf(body + n, sizeof(body) - (size_t)n,
                      ",{\"sku\":\"rare\",\"qty\":%u,\"price_cents\":5000}",
                      1 + rand_r(&c->rng) % 2);
    snprintf(body + n, sizeof(body) - (size_t)n, "]}");

    rec->order_id = post_order(c, h, key, body, r);
    if (rec->order_id == 0) {
        c->unanswered++;
        return;
    }
    if (rand_r(&c->rng) % 5 == 0) { /* a retry after a success: the same order again */
        int64_t again = post_order(c, h, key, body, r);
        c->replays++;
        if (again != 0 && again != rec->order_id)
            client_error(c, "key %s: order %" PRId64 " first, order %" PRId64 " on the replay", key,
                         rec->order_id, again);
    }
    unsigned roll = rand_r(&c->rng) % 10;
    if (roll < 3) {
        sleep_ms(rand_r(&c->rng) % 400); /* while the saga runs, or not yet started */
        cancel_order(c, h, rec);
    } else if (roll < 6) {
        int64_t version;
        sleep_ms(rand_r(&c->rng) % 200);
        (void)read_order(c, h, rec, &version, r);
    }
}

static void *client_main(void *arg)
{
    struct client *c = arg;
    CURL *h = curl_easy_init();
    struct reply *r = txo_malloc(sizeof(*r));
    if (h == NULL || r == NULL) {
        client_error(c, "curl_easy_init or malloc failed");
    } else {
        while (!atomic_load(&c->soak->stop))
            one_order(c, h, r);
    }
    txo_free(r);
    if (h != NULL)
        curl_easy_cleanup(h);
    return NULL;
}

/* ---- daemons ---- */

/* "a,b,c" starting at entry first: "b,c,a" for first 1. */
static void rotated_list(char (*items)[80], unsigned n, unsigned first, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (unsigned i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? "," : "", items[(first + i) % n]);
}

static void args_nats(struct soak *s, struct testpipeline_args *a, unsigned first)
{
    if (s->n_nats_nodes > 0) {
        char list[256];
        rotated_list(s->nats_node, s->n_nats_nodes, first, list, sizeof(list));
        testpipeline_args_addf(a, "--nats-url=%s", list);
        testpipeline_args_addf(a, "--nats-replicas=%u", s->nats_replicas);
    } else {
        testpipeline_args_addf(a, "--nats-url=%s", s->nats.url);
    }
    testpipeline_args_addf(a, "--nats-stream=%s", s->stream);
    testpipeline_args_addf(a, "--nats-subject-prefix=%s", s->prefix);
    testpipeline_args_addf(a, "--nats-durable=%s", s->durable);
}

/* Remembers the log of an instance that ended, to remove it when the soak passes. */
static void keep_old_log(struct soak *s, const struct testproc *p)
{
    if (s->n_old_logs < TXO_ARRAY_LEN(s->old_logs))
        snprintf(s->old_logs[s->n_old_logs++], sizeof(s->old_logs[0]), "%s", p->log_path);
}

/* Starts d (again) on its port and waits until it answers /healthz. */
static void daemon_start(struct soak *s, struct daemon *d)
{
    struct testpipeline_args a;
    testpipeline_args_init(&a, kind_names[d->kind]);
    /* On a cluster the six daemons start their host lists at different nodes. */
    unsigned first = (unsigned)(d - s->d);
    if (s->n_db_nodes > 0) {
        char list[256];
        char nodes[3][80];
        for (unsigned i = 0; i < s->n_db_nodes; i++)
            snprintf(nodes[i], sizeof(nodes[i]), "%s", s->db_node[i]);
        rotated_list(nodes, s->n_db_nodes, first, list, sizeof(list));
        testpipeline_args_addf(&a, "--mysql-host=%s", list);
    }
    switch (d->kind) {
    case DAEMON_SERVE:
        testpipeline_args_addf(&a, "--listen=127.0.0.1:%u", d->port);
        break;
    case DAEMON_RELAY:
        testpipeline_args_add(&a, "--publisher=nats");
        args_nats(s, &a, first);
        testpipeline_args_add(&a, "--lease=3"); /* a killed relay's batch is taken over soon */
        testpipeline_args_add(&a, "--shard-lease=3000"); /* and its shards */
        testpipeline_args_add(&a, "--idle-sleep=50");
        testpipeline_args_add(&a, "--batch-size=50");
        testpipeline_args_add(&a, "--backoff-base=100");
        testpipeline_args_add(&a, "--backoff-max=1000");
        testpipeline_args_add(&a, "--max-attempts=1000");
        testpipeline_args_addf(&a, "--metrics-listen=127.0.0.1:%u", d->port);
        break;
    case DAEMON_WORKER:
        testpipeline_args_add(&a, "--broker=nats");
        args_nats(s, &a, first);
        testpipeline_args_add(&a, "--nats-ack-wait=2000");
        testpipeline_args_add(&a, "--saga-lease=3");
        testpipeline_args_add(&a, "--poll=100");
        testpipeline_args_add(&a, "--saga-threads=4");
        testpipeline_args_addf(&a, "--payment-url=%s", s->fake_url);
        testpipeline_args_addf(&a, "--shipment-url=%s", s->fake_url);
        testpipeline_args_add(&a, "--service-timeout=" SERVICE_TIMEOUT);
        testpipeline_args_add(&a, "--service-retries=2");
        testpipeline_args_add(&a, "--step-attempts=3");
        testpipeline_args_add(&a, "--breaker-open=1000");
        testpipeline_args_add(&a, "--compensation-retry=1");
        testpipeline_args_add(&a, "--compensation-retry-max=2");
        testpipeline_args_add(&a, "--compensation-max-tries=1000");
        testpipeline_args_addf(&a, "--metrics-listen=127.0.0.1:%u", d->port);
        break;
    case DAEMON_KINDS:
        fail_msg("daemon kind %d", (int)d->kind);
    }
    a.v[a.n] = NULL;
    /* The port was free when it was chosen, but while a killed daemon is down an outgoing
     * connection may borrow it as its local port for a moment: a start that exits at once
     * is tried again. Five in a row, or one that neither answers nor exits, fail the test. */
    for (unsigned attempt = 1;; attempt++) {
        char tag[48];
        snprintf(tag, sizeof(tag), "soak_%s%u_%u", kind_names[d->kind], d->n, d->starts++);
        testproc_start(d->p, tag, a.v, NULL);
        int64_t deadline = txo_monotonic_ms() + 30000;
        bool exited = false;
        while (!exited && txo_monotonic_ms() < deadline) {
            if (testproc_wait_http(d->port, "/healthz", 200))
                return;
            exited = testproc_wait(d->p, 0);
        }
        if (!exited)
            TESTPIPELINE_FAIL(&s->tp, "%s did not answer /healthz on port %u within 30 s",
                              d->p->log_path, d->port);
        if (attempt == 5)
            TESTPIPELINE_FAIL(&s->tp, "%s exited at start (wait status 0x%x), 5 times in a row",
                              d->p->log_path, d->p->status);
        print_message("%s exited at start (wait status 0x%x); starting it again\n", d->p->log_path,
                      d->p->status);
        keep_old_log(s, d->p);
        sleep_ms(500);
    }
}

/* SIGKILL, then a start on the same port after a pause (the other one of its kind carries on). */
static void daemon_kill_restart(struct soak *s, struct daemon *d, unsigned pause_ms)
{
    testproc_signal(d->p, SIGKILL);
    if (!testproc_wait(d->p, 10000))
        TESTPIPELINE_FAIL(&s->tp, "%s did not die of SIGKILL", d->p->log_path);
    s->kills[d->kind]++;
    keep_old_log(s, d->p);
    sleep_ms(pause_ms);
    daemon_start(s, d);
}

/* ---- the fake services ---- */

static void fake_control(struct soak *s, const char *json)
{
    struct reply *r = txo_malloc(sizeof(*r));
    assert_non_null(r);
    http(s->h, "POST", s->fake_port, "/control", NULL, json, 5000, r);
    if (r->status != 200)
        TESTPIPELINE_FAIL(&s->tp, "POST /control %s: %ld %s", json, r->status, r->body);
    txo_free(r);
}

static void start_fake(struct soak *s)
{
    char listen[48];
    snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%u", s->fake_port);
    const char *argv[] = {testproc_fake_bin(),        listen,
                          "--fail-rate=0.05",         "--decline-rate=0.05",
                          "--ship-decline-rate=0.03", NULL};
    testproc_start(&s->tp.procs[FAKE_SLOT], "soak_fake", argv, NULL);
    testpipeline_wait_ready(&s->tp, &s->tp.procs[FAKE_SLOT], s->fake_port);
}

/* ---- setup ---- */

static unsigned env_unsigned(const char *name, unsigned def)
{
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0')
        return def;
    char *end = NULL;
    unsigned long x = strtoul(v, &end, 10);
    if (end == v || *end != '\0')
        fail_msg("%s must be a number, got \"%s\"", name, v);
    return (unsigned)x;
}

/* Splits a comma-separated list into at most 3 entries of cap bytes; returns the count. */
static unsigned split3(const char *list, char *out, size_t cap, const char *name)
{
    char copy[256];
    snprintf(copy, sizeof(copy), "%s", list);
    unsigned n = 0;
    char *save = NULL;
    for (char *e = strtok_r(copy, ",", &save); e != NULL; e = strtok_r(NULL, ",", &save)) {
        if (n == 3)
            fail_msg("%s lists more than 3 nodes", name);
        snprintf(out + n * cap, cap, "%s", e);
        n++;
    }
    return n;
}

static void cluster_settings(struct soak *s)
{
    const char *v = getenv("SOAK_DB_HOSTS");
    if (v != NULL && v[0] != '\0') {
        snprintf(s->db_hosts, sizeof(s->db_hosts), "%s", v);
        s->n_db_nodes = split3(v, s->db_node[0], sizeof(s->db_node[0]), "SOAK_DB_HOSTS");
        setenv("MYSQL_HOST", v, 1); /* the soak's own checks and `txo audit` */
    }
    v = getenv("SOAK_NATS_URLS");
    if (v != NULL && v[0] != '\0') {
        s->n_nats_nodes = split3(v, s->nats_node[0], sizeof(s->nats_node[0]), "SOAK_NATS_URLS");
        snprintf(s->nats.url, sizeof(s->nats.url), "%s", v); /* the inspection's connection */
    }
    s->nats_replicas = env_unsigned("SOAK_NATS_REPLICAS", s->n_nats_nodes > 0 ? 3 : 1);
    v = getenv("SOAK_CLUSTER_SCRIPT");
    if (v != NULL && v[0] != '\0') {
        if (s->n_db_nodes < 2 || s->n_nats_nodes < 2)
            fail_msg("SOAK_CLUSTER_SCRIPT needs SOAK_DB_HOSTS and SOAK_NATS_URLS");
        snprintf(s->cluster_script, sizeof(s->cluster_script), "%s", v);
    }
}

/* scripts/cluster.sh with args (kill-db 2, start-db 2, ...); fails the soak unless it exits 0. */
static void cluster_sh(struct soak *s, const char *args)
{
    char cmd[640];
    snprintf(cmd, sizeof(cmd), "'%s' %s", s->cluster_script, args);
    int st = system(cmd);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        TESTPIPELINE_FAIL(&s->tp, "%s failed (status 0x%x)", cmd, st);
}

static int setup(void **state)
{
    struct soak *s = txo_calloc(1, sizeof(*s));
    assert_non_null(s);
    cluster_settings(s);
    testdb_setup(&s->t, "soak");
    testdb_export_env(&s->t);
    if (s->n_nats_nodes == 0)
        testnats_start(&s->nats);
    testpipeline_init(&s->tp, s->t.db);
    s->tp.n_procs = N_DAEMONS + 1;
    snprintf(s->stream, sizeof(s->stream), "SOAK_%ld", (long)getpid());
    snprintf(s->prefix, sizeof(s->prefix), "soak%ld.events", (long)getpid());
    snprintf(s->durable, sizeof(s->durable), "soak-worker-%ld", (long)getpid());
    s->h = curl_easy_init();
    assert_non_null(s->h);
    atomic_init(&s->stop, false);
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    struct soak *s = *state;
    testpipeline_release(&s->tp);
    testnats_cleanup(&s->nats);
    testdb_teardown(&s->t);
    curl_easy_cleanup(s->h);
    txo_free(s);
    return 0;
}

/* ---- the checks ---- */

static const char not_settled_sql[] =
    "SELECT (SELECT COUNT(*) FROM orders WHERE status NOT IN ('CONFIRMED', 'CANCELLED')) + "
    "(SELECT COUNT(*) FROM saga_instances WHERE status NOT IN ('COMPLETED', 'COMPENSATED', "
    "'FAILED')) + (SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED')";

/* Waits until every order, saga and event is done; false (why in msg) after settle_s. */
static bool wait_settled(struct soak *s, unsigned settle_s, char *msg, size_t cap)
{
    int64_t t0 = txo_monotonic_ms();
    while (testdb_q(s->t.db, not_settled_sql) != 0) {
        if (txo_monotonic_ms() - t0 > (int64_t)settle_s * 1000) {
            snprintf(
                msg, cap,
                "not settled %u s after the load stopped: %" PRId64 " orders not terminal, "
                "%" PRId64 " sagas RUNNING, %" PRId64 " COMPENSATING, %" PRId64
                " COMPENSATION_FAILED, %" PRId64 " outbox events not PUBLISHED",
                settle_s,
                testdb_q(
                    s->t.db,
                    "SELECT COUNT(*) FROM orders WHERE status NOT IN ('CONFIRMED', 'CANCELLED')"),
                testdb_q(s->t.db, "SELECT COUNT(*) FROM saga_instances WHERE status = 'RUNNING'"),
                testdb_q(s->t.db,
                         "SELECT COUNT(*) FROM saga_instances WHERE status = 'COMPENSATING'"),
                testdb_q(
                    s->t.db,
                    "SELECT COUNT(*) FROM saga_instances WHERE status = 'COMPENSATION_FAILED'"),
                testdb_q(s->t.db,
                         "SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED'"));
            return false;
        }
        sleep_ms(200);
    }
    print_message("settled %" PRId64 " ms after the load stopped\n", txo_monotonic_ms() - t0);
    return true;
}

/* Fake-service effects over all orders, for the summary. */
struct effects {
    int64_t charges, refunds, shipments, cancels;
    int64_t undone_without_local; /* charges or shipments undone whose local part never ran */
    /* Orders the customer cancelled that the services charged or shipped anyway (all undone),
     * and how many of those calls began after the cancel had committed: the cancel is older
     * than the event of the step before the call (StockReserved, PaymentCharged). */
    int64_t customer_charged, customer_shipped;
    int64_t charged_after_cancel, shipped_after_cancel;
};

/*
 * Every order against the fake service's own records of it. Also sums the per-order counts, which
 * must equal the fake service's totals: no effect for an order the database does not know.
 */
static void check_fake_effects(struct soak *s, struct effects *fx)
{
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_query(s->t.db,
                     "SELECT o.id, o.status, o.total_cents, "
                     "(SELECT COUNT(*) FROM payments p WHERE p.order_id = o.id), "
                     "(SELECT COUNT(*) FROM shipments h WHERE h.order_id = o.id), "
                     "(SELECT COUNT(*) FROM outbox_events c WHERE c.idempotency_key = "
                     "CONCAT('order:', o.id, ':cancelled')), "
                     "(SELECT COUNT(*) FROM outbox_events c JOIN outbox_events p ON "
                     "p.aggregate_type = 'order' AND p.aggregate_id = o.id AND p.event_type = "
                     "'PaymentCharged' WHERE c.idempotency_key = CONCAT('order:', o.id, "
                     "':cancelled') AND c.created_at < p.created_at), "
                     "(SELECT COUNT(*) FROM outbox_events c JOIN outbox_events p ON "
                     "p.aggregate_type = 'order' AND p.aggregate_id = o.id AND p.event_type = "
                     "'StockReserved' WHERE c.idempotency_key = CONCAT('order:', o.id, "
                     "':cancelled') AND c.created_at < p.created_at) "
                     "FROM orders o ORDER BY o.id",
                     NULL, 0, &rows, &err) != 0)
        fail_msg("orders: %s", err.msg);
    struct reply *r = txo_malloc(sizeof(*r));
    assert_non_null(r);
    memset(fx, 0, sizeof(*fx));
    int64_t bad = 0;
    char first[320] = "";
    for (size_t i = 0; i < txo_rows_count(rows); i++) {
        int64_t id = txo_rows_i64(rows, i, 0);
        const char *status = txo_rows_str(rows, i, 1, NULL);
        int64_t total = txo_rows_i64(rows, i, 2);
        bool local_payment = txo_rows_i64(rows, i, 3) > 0;
        bool local_shipment = txo_rows_i64(rows, i, 4) > 0;
        char path[64];
        snprintf(path, sizeof(path), "/stats?order_id=%" PRId64, id);
        http(s->h, "GET", s->fake_port, path, NULL, NULL, 5000, r);
        if (r->status != 200)
            TESTPIPELINE_FAIL(&s->tp, "GET %s: %ld %s", path, r->status, r->body);
        int64_t charges = reply_int(r, "order", "charges");
        int64_t charged = reply_int(r, "order", "charged_cents");
        int64_t refunds = reply_int(r, "order", "refunds");
        int64_t shipments = reply_int(r, "order", "shipments");
        int64_t cancels = reply_int(r, "order", "cancels");
        fx->charges += charges;
        fx->refunds += refunds;
        fx->shipments += shipments;
        fx->cancels += cancels;
        if ((charges > 0 && !local_payment) || (shipments > 0 && !local_shipment))
            fx->undone_without_local++;
        if (txo_rows_i64(rows, i, 5) > 0) {
            fx->customer_charged += charges > 0;
            fx->customer_shipped += shipments > 0;
            fx->shipped_after_cancel += shipments > 0 && txo_rows_i64(rows, i, 6) > 0;
            fx->charged_after_cancel += charges > 0 && txo_rows_i64(rows, i, 7) > 0;
        }
        char problem[256] = "";
        if (charges > 1 || shipments > 1)
            snprintf(problem, sizeof(problem),
                     "charged %" PRId64 " times and shipped %" PRId64 " times at the services",
                     charges, shipments);
        else if (strcmp(status, "CANCELLED") == 0 && charges > 0 && refunds == 0)
            snprintf(problem, sizeof(problem),
                     "leaked charge: CANCELLED, but the payment service charged it (%" PRId64
                     " cents) and never refunded it",
                     charged);
        else if (strcmp(status, "CANCELLED") == 0 && shipments > 0 && cancels == 0)
            snprintf(problem, sizeof(problem),
                     "leaked shipment: CANCELLED, but the shipment service created its shipment "
                     "and never cancelled it");
        else if (strcmp(status, "CONFIRMED") == 0 &&
                 (charges != 1 || charged != total || shipments != 1 || refunds != 0 ||
                  cancels != 0))
            snprintf(problem, sizeof(problem),
                     "CONFIRMED (total %" PRId64 " cents), but the services show charges=%" PRId64
                     " (%" PRId64 " cents) refunds=%" PRId64 " shipments=%" PRId64
                     " cancels=%" PRId64,
                     total, charges, charged, refunds, shipments, cancels);
        else if (strcmp(status, "CANCELLED") != 0 && strcmp(status, "CONFIRMED") != 0)
            snprintf(problem, sizeof(problem), "ends %s", status);
        if (problem[0] != '\0') {
            if (bad < 10)
                print_message("order %" PRId64 ": %s\n", id, problem);
            if (bad == 0)
                snprintf(first, sizeof(first), "order %" PRId64 ": %s", id, problem);
            bad++;
        }
    }
    if (bad > 0)
        TESTPIPELINE_FAIL(&s->tp, "%" PRId64 " of %zu orders disagree with the services, first %s",
                          bad, txo_rows_count(rows), first);
    txo_rows_free(rows);
    http(s->h, "GET", s->fake_port, "/stats", NULL, NULL, 5000, r);
    if (r->status != 200)
        TESTPIPELINE_FAIL(&s->tp, "GET /stats: %ld %s", r->status, r->body);
    int64_t all_charges = reply_int(r, NULL, "charges");
    int64_t all_shipments = reply_int(r, NULL, "shipments");
    if (all_charges != fx->charges || all_shipments != fx->shipments)
        TESTPIPELINE_FAIL(&s->tp,
                          "the services charged %" PRId64 " and shipped %" PRId64
                          " times in all, the orders of the database account for %" PRId64
                          " and %" PRId64,
                          all_charges, all_shipments, fx->charges, fx->shipments);
    txo_free(r);
}

/* One order per Idempotency-Key, each key's stored answer naming its own order. */
/* For qsort of strings: NULL (a message without an id) sorts first. */
static int cmp_str(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    if (x == NULL || y == NULL)
        return (x != NULL) - (y != NULL);
    return strcmp(x, y);
}

/* Every outbox event is in the stream exactly once (Nats-Msg-Id, read with cnats). */
static void check_stream(struct soak *s)
{
    char **ids = NULL;
    size_t n_ids = testnats_stream_msg_ids(&s->nats, s->stream, &ids);
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_query(s->t.db, "SELECT idempotency_key FROM outbox_events", NULL, 0, &rows, &err) !=
        0)
        TESTPIPELINE_FAIL(&s->tp, "reading the outbox keys: %s", err.msg);
    size_t n_rows = txo_rows_count(rows);
    const char **keys = txo_calloc(n_rows + 1, sizeof(*keys));
    assert_non_null(keys);
    for (size_t i = 0; i < n_rows; i++)
        keys[i] = txo_rows_str(rows, i, 0, NULL);
    /* Both sides in strcmp order (the column's collation may order them otherwise). */
    qsort(keys, n_rows, sizeof(*keys), cmp_str);
    qsort(ids, n_ids, sizeof(*ids), cmp_str);
    for (size_t i = 1; i < n_ids; i++)
        if (ids[i - 1] != NULL && ids[i] != NULL && strcmp(ids[i - 1], ids[i]) == 0)
            TESTPIPELINE_FAIL(&s->tp, "stream %s stores %s twice", s->stream, ids[i]);
    size_t j = 0;
    for (size_t i = 0; i < n_rows; i++) {
        while (j < n_ids && (ids[j] == NULL || strcmp(ids[j], keys[i]) < 0))
            j++;
        if (j == n_ids || strcmp(ids[j], keys[i]) != 0)
            TESTPIPELINE_FAIL(&s->tp, "outbox event %s is not in stream %s", keys[i], s->stream);
    }
    if (n_ids != n_rows)
        TESTPIPELINE_FAIL(&s->tp, "stream %s holds %zu messages for %zu outbox events", s->stream,
                          n_ids, n_rows);
    txo_free(keys);
    print_message("stream               %zu messages, one per outbox event (read with cnats)\n",
                  n_ids);
    txo_rows_free(rows);
    testnats_free_ids(ids, n_ids);
}

/* An outbox event as the order check looks it up by its key. */
struct ordered_event {
    const char *key;
    const char *aggregate; /* "<type>/<id>" */
    int64_t sequence, prev_sequence;
    size_t agg; /* index of its aggregate */
    bool seen;
};

static int cmp_event_key(const void *a, const void *b)
{
    return strcmp(((const struct ordered_event *)a)->key, ((const struct ordered_event *)b)->key);
}

static int cmp_event_agg(const void *a, const void *b)
{
    const struct ordered_event *const *x = a, *const *y = b;
    return strcmp((*x)->aggregate, (*y)->aggregate);
}

/*
 * Every aggregate's events are in the stream in their sequence order (commit order), each
 * first copy following the one before it (prev_sequence is the last sequence seen: no gap),
 * first copies taken: a copy of an event stored again after its dedupe window is a duplicate
 * for the inbox, not an inversion. An aggregate's first event in the stream may follow events
 * retention deleted since: the chain is checked from there. The relays run with the default
 * ordering, under SIGKILLs and broker restarts, writers on every Galera node in the cluster
 * soak, so this is the order contract seen by a consumer that is not txo (cnats reads the
 * stream).
 */
static void check_stream_order(struct soak *s)
{
    char **ids = NULL;
    size_t n_ids = testnats_stream_msg_ids(&s->nats, s->stream, &ids);
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_query(s->t.db,
                     "SELECT idempotency_key, CONCAT(aggregate_type, '/', aggregate_id), "
                     "sequence, prev_sequence FROM outbox_events WHERE sequence IS NOT NULL",
                     NULL, 0, &rows, &err) != 0)
        TESTPIPELINE_FAIL(&s->tp, "reading the outbox: %s", err.msg);
    size_t n = txo_rows_count(rows);
    struct ordered_event *ev = txo_calloc(n + 1, sizeof(*ev));
    struct ordered_event **by_agg = txo_calloc(n + 1, sizeof(*by_agg));
    int64_t *last = txo_calloc(n + 1, sizeof(*last));
    assert_true(ev != NULL && by_agg != NULL && last != NULL);
    for (size_t i = 0; i < n; i++) {
        ev[i].key = txo_rows_str(rows, i, 0, NULL);
        ev[i].aggregate = txo_rows_str(rows, i, 1, NULL);
        ev[i].sequence = txo_rows_i64(rows, i, 2);
        ev[i].prev_sequence = txo_rows_i64(rows, i, 3);
    }
    qsort(ev, n, sizeof(*ev), cmp_event_key);
    for (size_t i = 0; i < n; i++)
        by_agg[i] = &ev[i];
    qsort(by_agg, n, sizeof(*by_agg), cmp_event_agg);
    size_t n_aggs = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(by_agg[i]->aggregate, by_agg[i - 1]->aggregate) != 0)
            n_aggs++;
        by_agg[i]->agg = n_aggs;
        last[n_aggs] = -1; /* nothing seen yet */
    }
    size_t checked = 0, repeats = 0, inversions = 0, gaps = 0;
    for (size_t k = 0; k < n_ids; k++) {
        if (ids[k] == NULL)
            continue;
        struct ordered_event probe = {.key = ids[k]};
        struct ordered_event *e = bsearch(&probe, ev, n, sizeof(*ev), cmp_event_key);
        if (e == NULL)
            continue; /* deleted by retention since: its order was checked by nothing */
        if (e->seen) {
            repeats++;
            continue;
        }
        e->seen = true;
        checked++;
        int64_t *l = &last[e->agg];
        if (*l >= 0 && e->sequence <= *l) {
            if (inversions < 10)
                print_error("stream %s: %s sequence %" PRId64 " (%s) after sequence %" PRId64 "\n",
                            s->stream, e->aggregate, e->sequence, e->key, *l);
            inversions++;
            continue;
        }
        if (*l >= 0 && e->prev_sequence != *l) {
            if (gaps < 10)
                print_error("stream %s: %s sequence %" PRId64 " (%s) follows %" PRId64
                            ", the last seen is %" PRId64 "\n",
                            s->stream, e->aggregate, e->sequence, e->key, e->prev_sequence, *l);
            gaps++;
        }
        *l = e->sequence;
    }
    if (inversions > 0 || gaps > 0)
        TESTPIPELINE_FAIL(&s->tp,
                          "stream %s: %zu events after a later event of their aggregate, %zu "
                          "after a gap",
                          s->stream, inversions, gaps);
    print_message("stream order         %zu events over %zu aggregates in sequence order per "
                  "aggregate, no gap (first copies; %zu later copies)\n",
                  checked, n > 0 ? n_aggs + 1 : 0, repeats);
    txo_free(last);
    txo_free(by_agg);
    txo_free(ev);
    txo_rows_free(rows);
    testnats_free_ids(ids, n_ids);
}

static void check_keys(struct soak *s)
{
    int64_t orders = testdb_q(s->t.db, "SELECT COUNT(*) FROM orders");
    int64_t keys =
        testdb_q(s->t.db, "SELECT COUNT(*) FROM idempotency_keys WHERE status = 'COMPLETED'");
    int64_t distinct =
        testdb_q(s->t.db, "SELECT COUNT(DISTINCT JSON_VALUE(response_body, '$.order_id')) "
                          "FROM idempotency_keys k JOIN orders o ON o.id = "
                          "JSON_VALUE(k.response_body, '$.order_id') WHERE k.status = "
                          "'COMPLETED'");
    int64_t other =
        testdb_q(s->t.db, "SELECT COUNT(*) FROM idempotency_keys WHERE status <> 'COMPLETED'");
    if (orders != keys || distinct != orders || other != 0)
        TESTPIPELINE_FAIL(&s->tp,
                          "%" PRId64 " orders, %" PRId64 " completed Idempotency-Keys naming "
                          "%" PRId64 " distinct orders, %" PRId64 " keys not COMPLETED: want one "
                          "order per key",
                          orders, keys, distinct, other);
}

/* What the clients saw against where each order ended. */
static void check_clients(struct soak *s, struct client *cl, unsigned n_clients)
{
    for (unsigned i = 0; i < n_clients; i++) {
        struct client *c = &cl[i];
        for (size_t e = 0; e < c->n_errors; e++)
            print_message("client %u: %s\n", c->id, c->errors[e]);
        if (c->n_errors > 0)
            TESTPIPELINE_FAIL(&s->tp, "client %u met %zu problems (+%" PRIu64 " more), first: %s",
                              c->id, c->n_errors, c->more_errors, c->errors[0]);
        for (size_t k = 0; k < c->n_keys; k++) {
            const struct key_rec *rec = &c->keys[k];
            if (rec->order_id == 0)
                continue;
            struct txo_param p = txo_p_i64(rec->order_id);
            char *status = testdb_str(s->t.db, "SELECT status FROM orders WHERE id = ?", &p, 1);
            char want = rec->cancelled ? 'X' : rec->seen;
            bool bad = status == NULL || (want != 0 && status_letter(status) != want);
            if (bad)
                TESTPIPELINE_FAIL(&s->tp,
                                  "order %" PRId64 " of key soak-%u-%zu ends %s, but the client %s",
                                  rec->order_id, c->id, k, status != NULL ? status : "missing",
                                  rec->cancelled ? "cancelled it (200)"
                                  : want == 'F'  ? "saw it CONFIRMED"
                                                 : "saw it CANCELLED");
            txo_free(status);
        }
    }
}

/* Prints the error lines of one daemon log (at most *budget of them), returns their count. */
static unsigned log_errors(const char *path, unsigned *budget)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    unsigned n = 0;
    char line[1024];
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, "level=error") == NULL)
            continue;
        n++;
        if (*budget > 0) {
            (*budget)--;
            print_message("%s: %s", path, line);
        }
    }
    fclose(f);
    return n;
}

/* Error lines in every daemon's logs, killed instances included: a human should look. */
static void report_log_errors(struct soak *s)
{
    unsigned budget = 10, n = 0;
    for (size_t i = 0; i < s->tp.n_procs; i++)
        n += log_errors(s->tp.procs[i].log_path, &budget);
    for (size_t i = 0; i < s->n_old_logs; i++)
        n += log_errors(s->old_logs[i], &budget);
    print_message("logs                 %u lines at level=error in the daemons' logs\n", n);
}

/* What happened, for a human: the clients' counts, the database's, the services'. */
static void print_summary(struct soak *s, const struct client *cl, unsigned n_clients)
{
    struct client sum;
    memset(&sum, 0, sizeof(sum));
    size_t keys = 0;
    for (unsigned i = 0; i < n_clients; i++) {
        sum.posts += cl[i].posts;
        sum.post_retries += cl[i].post_retries;
        sum.unanswered += cl[i].unanswered;
        sum.replays += cl[i].replays;
        sum.cancels += cl[i].cancels;
        sum.cancel_200 += cl[i].cancel_200;
        sum.cancel_409 += cl[i].cancel_409;
        sum.cancel_412 += cl[i].cancel_412;
        sum.reads += cl[i].reads;
        keys += cl[i].n_keys;
    }
    struct reply *r = txo_malloc(sizeof(*r));
    assert_non_null(r);
    http(s->h, "GET", s->fake_port, "/stats", NULL, NULL, 5000, r);
    print_message(
        "---- soak summary ----\n"
        "orders placed        %" PRId64 " (%zu keys tried, %" PRIu64 " without an answer)\n"
        "  confirmed          %" PRId64 "\n"
        "  cancelled by customer      %" PRId64 " (cancel tried %" PRIu64 ": 200 %" PRIu64
        ", 409 finished %" PRIu64 ", 412 stale %" PRIu64 ")\n"
        "  cancelled by saga failure  %" PRId64 "\n"
        "sagas                COMPLETED %" PRId64 ", FAILED %" PRId64 ", COMPENSATED %" PRId64
        "; %" PRId64 " steps whose call's outcome was unknown (timeout, hang, worker killed)\n"
        "POST /orders         %" PRIu64 " sent, %" PRIu64 " retries after errors, %" PRIu64
        " replays after a 201; %" PRIu64 " GET /orders/{id}\n"
        "kills                serve %u, relay %u, worker %u; slow episodes %u, hang episodes %u; "
        "cluster nodes SIGKILLed: DB %u, NATS %u\n"
        "events               %" PRId64 " in the outbox, %" PRIu64 " in the stream, %" PRId64
        " OrderCreated consumed (inbox rows)\n"
        "services /stats      %s\n",
        testdb_q(s->t.db, "SELECT COUNT(*) FROM orders"), keys, sum.unanswered,
        testdb_q(s->t.db, "SELECT COUNT(*) FROM orders WHERE status = 'CONFIRMED'"),
        testdb_q(s->t.db,
                 "SELECT COUNT(*) FROM outbox_events WHERE event_type = 'OrderCancelled' AND "
                 "idempotency_key LIKE 'order:%:cancelled'"),
        sum.cancels, sum.cancel_200, sum.cancel_409, sum.cancel_412,
        testdb_q(s->t.db,
                 "SELECT COUNT(*) FROM outbox_events WHERE event_type = 'OrderCancelled' AND "
                 "idempotency_key LIKE 'saga:%'"),
        testdb_q(s->t.db, "SELECT COUNT(*) FROM saga_instances WHERE status = 'COMPLETED'"),
        testdb_q(s->t.db, "SELECT COUNT(*) FROM saga_instances WHERE status = 'FAILED'"),
        testdb_q(s->t.db, "SELECT COUNT(*) FROM saga_instances WHERE status = 'COMPENSATED'"),
        testdb_q(s->t.db, "SELECT COUNT(*) FROM saga_steps WHERE remote_state = 'UNKNOWN'"),
        sum.posts, sum.post_retries, sum.replays, sum.reads, s->kills[DAEMON_SERVE],
        s->kills[DAEMON_RELAY], s->kills[DAEMON_WORKER], s->slow_episodes, s->hang_episodes,
        s->db_node_kills, s->nats_node_kills,
        testdb_q(s->t.db, "SELECT COUNT(*) FROM outbox_events"),
        testnats_stream_msgs(&s->nats, s->stream),
        testdb_q(s->t.db, "SELECT COUNT(*) FROM inbox_events"),
        r->status == 200 ? r->body : "(no answer)");
    txo_free(r);
    report_log_errors(s);
}

/* ---- the test ---- */

static void test_soak(void **state)
{
    struct soak *s = *state;
    unsigned seconds = env_unsigned("SOAK_SECONDS", 300);
    unsigned n_clients = env_unsigned("SOAK_CLIENTS", 4);
    unsigned settle_s = env_unsigned("SOAK_SETTLE_SECONDS", 90);
    unsigned start = env_unsigned("SOAK_RANDOM_STATE", (unsigned)time(NULL) ^ (unsigned)getpid());
    if (n_clients == 0 || n_clients > MAX_CLIENTS || seconds < 10)
        fail_msg("SOAK_CLIENTS must be 1..%d and SOAK_SECONDS at least 10", MAX_CLIENTS);
    print_message("soak: %u s, %u clients, random state %u (SOAK_RANDOM_STATE=%u makes the same "
                  "random choices)\n",
                  seconds, n_clients, start, start);

    testpipeline_set_initial_stock(&s->tp, stock, TXO_ARRAY_LEN(stock));
    s->fake_port = testproc_free_port();
    snprintf(s->fake_url, sizeof(s->fake_url), "http://127.0.0.1:%u", s->fake_port);
    start_fake(s);
    for (unsigned i = 0; i < N_DAEMONS; i++) {
        struct daemon *d = &s->d[i];
        d->kind = (enum daemon_kind)(i / 2);
        d->n = i % 2 + 1;
        d->port = testproc_free_port();
        d->p = &s->tp.procs[i];
        daemon_start(s, d);
    }

    struct client *cl = txo_calloc(n_clients, sizeof(*cl));
    pthread_t threads[MAX_CLIENTS];
    assert_non_null(cl);
    for (unsigned i = 0; i < n_clients; i++) {
        cl[i].soak = s;
        cl[i].id = i;
        cl[i].rng = start + 7919 * (i + 1);
        assert_int_equal(pthread_create(&threads[i], NULL, client_main, &cl[i]), 0);
    }

    /* Faults, on this thread, until the time is up. */
    unsigned rng = start;
    int64_t t0 = txo_monotonic_ms();
    int64_t end = t0 + (int64_t)seconds * 1000;
    int64_t next_kill = t0 + 2000 + rand_r(&rng) % 2000;
    int64_t slow_at = t0 + (int64_t)seconds * 300, hang_at = t0 + (int64_t)seconds * 650;
    int64_t db_kill_at = t0 + (int64_t)seconds * 400, nats_kill_at = t0 + (int64_t)seconds * 800;
    bool slow = false, hang = false;
    for (int64_t now = t0; now < end; now = txo_monotonic_ms()) {
        if (s->cluster_script[0] != '\0' && s->db_node_kills == 0 && now >= db_kill_at) {
            /* A crash of the node that the second daemon of each pair writes through first:
             * its sessions fail (2013) and reconnect to the next node of their lists. */
            print_message("soak: SIGKILL of DB node 2 at %" PRId64 " ms\n", now - t0);
            cluster_sh(s, "kill-db 2");
            sleep_ms(3000);
            cluster_sh(s, "start-db 2"); /* waits until it rejoined (IST) and is Synced */
            s->db_node_kills++;
            print_message("soak: DB node 2 rejoined at %" PRId64 " ms\n", txo_monotonic_ms() - t0);
        }
        if (s->cluster_script[0] != '\0' && s->nats_node_kills == 0 && now >= nats_kill_at &&
            now < end - 3000) {
            print_message("soak: SIGKILL of NATS node 3 at %" PRId64 " ms\n", now - t0);
            cluster_sh(s, "kill-nats 3");
            sleep_ms(2000);
            cluster_sh(s, "start-nats 3");
            s->nats_node_kills++;
        }
        if (now >= next_kill && now < end - 2000) {
            struct daemon *d = &s->d[rand_r(&rng) % N_DAEMONS];
            daemon_kill_restart(s, d, rand_r(&rng) % 1000);
            next_kill = txo_monotonic_ms() + 1500 + rand_r(&rng) % 2500;
        }
        if (!slow && now >= slow_at && now < end - SLOW_EPISODE_MS) {
            char json[64];
            snprintf(json, sizeof(json), "{\"latency_ms\":%d}", SLOW_LATENCY_MS);
            fake_control(s, json);
            slow = true;
            s->slow_episodes++;
        } else if (slow && now >= slow_at + SLOW_EPISODE_MS) {
            fake_control(s, "{\"latency_ms\":0}");
            slow = false;
            slow_at += EPISODE_PERIOD_S * 1000;
        }
        if (!hang && now >= hang_at && now < end - HANG_EPISODE_MS) {
            fake_control(s, "{\"hang\":true}");
            hang = true;
            s->hang_episodes++;
        } else if (hang && now >= hang_at + HANG_EPISODE_MS) {
            fake_control(s, "{\"hang\":false}");
            hang = false;
            hang_at += EPISODE_PERIOD_S * 1000;
        }
        sleep_ms(100);
    }

    /* Load off, then faults off; what is under way must finish. */
    s->stop_at_ms = txo_monotonic_ms();
    atomic_store(&s->stop, true);
    for (unsigned i = 0; i < n_clients; i++)
        pthread_join(threads[i], NULL);
    fake_control(s, "{\"latency_ms\":0,\"hang\":false,\"fail_rate\":0,\"decline_rate\":0,"
                    "\"ship_decline_rate\":0}");
    print_message("load stopped after %" PRId64 " ms\n", s->stop_at_ms - t0);
    char why[512];
    bool settled = wait_settled(s, settle_s, why, sizeof(why));
    /* The summary first, so a failing check still shows what happened. */
    print_summary(s, cl, n_clients);
    if (!settled)
        TESTPIPELINE_FAIL(&s->tp, "%s", why);
    for (unsigned i = 0; i < N_DAEMONS; i++)
        testpipeline_stop_clean(&s->tp, s->d[i].p);

    /* The checks join orders to events and sagas by aggregate and correlation id, which the
     * schema does not index (the product never looks them up that way): index this database
     * so that the checks stay linear in the number of orders. */
    int64_t checks_t0 = txo_monotonic_ms();
    testdb_exec(s->t.db, "CREATE INDEX soak_outbox_aggregate ON outbox_events (aggregate_type, "
                         "aggregate_id, event_type)");
    testdb_exec(s->t.db, "CREATE INDEX soak_saga_correlation ON saga_instances (correlation_id)");
    struct effects fx;
    check_fake_effects(s, &fx);
    print_message("effects per order    charges %" PRId64 ", refunds %" PRId64
                  ", shipments %" PRId64 ", cancels %" PRId64 "; %" PRId64
                  " orders had a call undone whose step's local part never committed\n"
                  "customer cancels     the services charged %" PRId64 " of those orders (%" PRId64
                  " calls begun after the cancel had committed) and shipped %" PRId64 " (%" PRId64
                  " after the cancel), all undone\n",
                  fx.charges, fx.refunds, fx.shipments, fx.cancels, fx.undone_without_local,
                  fx.customer_charged, fx.charged_after_cancel, fx.customer_shipped,
                  fx.shipped_after_cancel);
    check_keys(s);
    check_clients(s, cl, n_clients);
    testpipeline_check_invariants_flags(&s->tp, stock, TXO_ARRAY_LEN(stock),
                                        TESTPIPELINE_CHECK_UNDO_MAYBE);
    if (s->n_nats_nodes > 0)
        check_stream(s);
    check_stream_order(s);
    /* The operator's own check must agree: `txo audit` finds nothing. */
    char audit[512];
    snprintf(audit, sizeof(audit), "'%s' audit --settle 1 --window 86400 --log-level error",
             testproc_txo_bin());
    int audit_status = system(audit);
    if (!WIFEXITED(audit_status) || WEXITSTATUS(audit_status) != 0)
        TESTPIPELINE_FAIL(&s->tp, "txo audit reported violations (status 0x%x)", audit_status);
    print_message("soak passed in %" PRId64 " s (checks %" PRId64
                  " ms): no leaked charge or shipment, every invariant holds\n",
                  (txo_monotonic_ms() - t0) / 1000, txo_monotonic_ms() - checks_t0);

    for (unsigned i = 0; i < n_clients; i++)
        txo_free(cl[i].keys);
    txo_free(cl);
    testpipeline_remove_logs(&s->tp);
    for (size_t i = 0; i < s->n_old_logs; i++)
        (void)unlink(s->old_logs[i]);
}

int main(void)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_soak, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
