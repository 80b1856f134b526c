/*
 * txo on a three-node MariaDB Galera cluster and a three-node NATS JetStream cluster, both
 * started by scripts/cluster.sh (`make cluster-test` brings them up, runs this program and the
 * cluster soak, and takes them down). Not part of `make test`: it needs the cluster.
 *
 *   two relays, two nodes  5,000 events in one outbox, a relay on DB node 1 and one on node 2,
 *                          publishing to an R3 stream, in claim mode lease and then
 *                          transaction. SKIP LOCKED is local to a node, so both relays claim
 *                          the same rows; the loser learns it from a certification failure
 *                          (1213) at COMMIT. Every row ends PUBLISHED, the stream holds each
 *                          event exactly once (Nats-Msg-Id, read back with cnats), and the
 *                          publishes beyond 5,000 (duplicates the stream dropped) are counted:
 *                          none in lease mode (the conflict hits the claim, before any
 *                          publish), at most a batch per conflict in transaction mode (it
 *                          hits the COMMIT after the publish).
 *   non-primary node       DB node 3 isolated from its peers (gmcast.isolate): `txo serve` and
 *                          `txo relay` on it answer /readyz 503, the node refuses queries with
 *                          1047 (checked with the mariadb client), a `txo serve` given the
 *                          host list fails over and takes orders; once node 3 rejoins, the
 *                          daemons on it are ready again and take orders.
 *   stream leader killed   the relay drains 2,000 events while the R3 stream's leader is
 *                          SIGKILLed and restarted, and a durable consumer reads them while
 *                          another node is killed: the stream holds each event once, the
 *                          consumer sees every one (redeliveries allowed) and resumes.
 *
 * Environment (scripts/cluster.sh env prints it): TXO_CLUSTER_DB_HOSTS ("h:p,h:p,h:p"),
 * TXO_CLUSTER_NATS_URLS, TXO_CLUSTER_SCRIPT (the path of scripts/cluster.sh), MYSQL_USER,
 * MYSQL_PASSWORD, TXO_BIN. A missing setting fails the program; it is not skipped.
 */
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <nats/nats.h>

#include "orders.h"
#include "testdb.h"
#include "testhttp.h"
#include "testnats.h"
#include "testoutbox.h"
#include "testproc.h"
#include "testrelay.h"

#define N_EVENTS     5000
#define N_NODES      3
#define DRAIN_MS     120000
#define READY_WAIT_S 30

struct cluster {
    char db_hosts[256];
    char db_node[N_NODES][64]; /* "127.0.0.1:3321" */
    char nats_urls[256];
    char script[512];
    struct testnats nats; /* url = the whole cluster; not started by us */
    struct testdb t;
    struct testproc procs[3]; /* the daemons of a test; SIGKILLed by teardown if still up */
};

static const char *need_env(const char *name)
{
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0')
        fail_msg("%s is not set: run this through `make cluster-test` (scripts/cluster.sh env)",
                 name);
    return v;
}

/* Runs scripts/cluster.sh with args; fails the test unless it exits 0. */
static void cluster_sh(const struct cluster *c, const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "'%s' %s", c->script, args);
    int st = system(cmd);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("%s failed (status 0x%x)", cmd, st);
}

static int setup(void **state)
{
    struct cluster *c = txo_calloc(1, sizeof(*c));
    assert_non_null(c);
    snprintf(c->db_hosts, sizeof(c->db_hosts), "%s", need_env("TXO_CLUSTER_DB_HOSTS"));
    snprintf(c->nats_urls, sizeof(c->nats_urls), "%s", need_env("TXO_CLUSTER_NATS_URLS"));
    snprintf(c->script, sizeof(c->script), "%s", need_env("TXO_CLUSTER_SCRIPT"));
    char copy[256];
    snprintf(copy, sizeof(copy), "%s", c->db_hosts);
    char *save = NULL;
    size_t n = 0;
    for (char *h = strtok_r(copy, ",", &save); h != NULL; h = strtok_r(NULL, ",", &save)) {
        if (n == N_NODES)
            fail_msg("TXO_CLUSTER_DB_HOSTS lists more than %d nodes", N_NODES);
        snprintf(c->db_node[n++], sizeof(c->db_node[0]), "%s", h);
    }
    if (n != N_NODES)
        fail_msg("TXO_CLUSTER_DB_HOSTS must list %d nodes, got \"%s\"", N_NODES, c->db_hosts);
    snprintf(c->nats.url, sizeof(c->nats.url), "%s", c->nats_urls);
    /* The test database on the whole cluster: testdb reads MYSQL_HOST. */
    setenv("MYSQL_HOST", c->db_hosts, 1);
    testdb_setup(&c->t, "cluster");
    *state = c;
    return 0;
}

/* After each test: a daemon a failed test left running would go on draining the outbox. */
static int stop_procs(void **state)
{
    struct cluster *c = *state;
    for (size_t i = 0; i < TXO_ARRAY_LEN(c->procs); i++)
        if (c->procs[i].pid != 0)
            testproc_stop_hard(&c->procs[i]);
    return 0;
}

static int teardown(void **state)
{
    struct cluster *c = *state;
    stop_procs(state);
    testdb_teardown(&c->t);
    txo_free(c);
    return 0;
}

/* A connection to one node only (host "127.0.0.1:3321"), to the test's database. */
static struct txo_db *connect_node(const struct cluster *c, unsigned node)
{
    struct txo_db_opts o = c->t.opts;
    o.host = c->db_node[node];
    struct txo_db *db = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_open(&o, &db, &err) != 0)
        fail_msg("connecting to node %u (%s): %s", node + 1, o.host, err.msg);
    return db;
}

/* ---- a publisher that counts what the broker acknowledged, in front of the NATS one ---- */

struct counting {
    struct txo_publisher *inner;
    atomic_uint_fast64_t acked; /* results[i] == 0, duplicates of the stream included */
};

static int counting_publish(void *self, const struct txo_outbox_message *msgs, size_t n,
                            int *results, struct txo_error *errors)
{
    struct counting *cp = self;
    int rc = cp->inner->ops->publish_batch(cp->inner->self, msgs, n, results, errors);
    if (rc == 0) {
        uint64_t ok = 0;
        for (size_t i = 0; i < n; i++)
            ok += results[i] == 0;
        atomic_fetch_add(&cp->acked, ok);
    }
    return rc;
}

static void counting_destroy(void *self)
{
    struct counting *cp = self;
    txo_publisher_free(cp->inner);
    txo_free(cp);
}

static const struct txo_publisher_ops counting_ops = {
    .name = "counting-nats",
    .publish_batch = counting_publish,
    .destroy = counting_destroy,
    .flags = TXO_PUBLISHER_QUICK,
};

static void nats_opts(const struct cluster *c, const char *stream, const char *prefix,
                      struct txo_nats_opts *o)
{
    txo_nats_opts_init(o);
    o->url = c->nats_urls;
    o->stream = stream;
    o->subject_prefix = prefix;
    o->replicas = 3;
    o->ack_timeout_ms = 3000;
}

static struct txo_publisher *counting_new(const struct cluster *c, const char *stream,
                                          const char *prefix, struct counting **out)
{
    struct txo_nats_opts o;
    nats_opts(c, stream, prefix, &o);
    struct counting *cp = txo_calloc(1, sizeof(*cp));
    assert_non_null(cp);
    struct txo_error err;
    txo_error_init(&err);
    if (txo_publisher_nats_new(&o, &cp->inner, &err) != 0)
        fail_msg("nats publisher: %s", err.msg);
    struct txo_publisher *pub = NULL;
    if (txo_publisher_new(&counting_ops, cp, &pub, &err) != 0)
        fail_msg("publisher: %s", err.msg);
    *out = cp;
    return pub;
}

/* Every key prefix:1..n is in the stream exactly once, and nothing else is. */
static void expect_stream_holds_each_once(const struct cluster *c, const char *stream,
                                          const char *prefix, unsigned n)
{
    char **ids = NULL;
    size_t count = testnats_stream_msg_ids(&c->nats, stream, &ids);
    unsigned char *seen = calloc(n + 1, 1);
    assert_non_null(seen);
    size_t plen = strlen(prefix);
    for (size_t i = 0; i < count; i++) {
        const char *id = ids[i];
        if (id == NULL || strncmp(id, prefix, plen) != 0 || id[plen] != ':')
            fail_msg("stream %s: message %zu has Nats-Msg-Id \"%s\"", stream, i + 1,
                     id ? id : "(none)");
        long k = strtol(id + plen + 1, NULL, 10);
        if (k < 1 || k > (long)n)
            fail_msg("stream %s: unexpected id %s", stream, id);
        if (seen[k]++)
            fail_msg("stream %s: %s stored twice: the dedupe did not hold", stream, id);
    }
    for (unsigned k = 1; k <= n; k++)
        if (!seen[k])
            fail_msg("stream %s: %s:%u never reached the stream (%zu messages read)", stream,
                     prefix, k, count);
    assert_int_equal(count, n);
    free(seen);
    testnats_free_ids(ids, count);
}

/*
 * Deletes the stream, retrying for up to 20 s: right after a node restarts, the JetStream
 * meta leader may still be settling and API requests time out.
 */
static void delete_stream(const struct cluster *c, const char *stream)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    natsStatus s = testnats_connect(c->nats_urls, &nc);
    if (s == NATS_OK)
        s = natsConnection_JetStream(&js, nc, NULL);
    int64_t deadline = txo_monotonic_ms() + 20000;
    jsErrCode jerr = 0;
    while (s == NATS_OK) {
        jerr = 0;
        s = js_DeleteStream(js, stream, NULL, &jerr);
        if (s == NATS_OK || jerr == JSStreamNotFoundErr || txo_monotonic_ms() > deadline)
            break;
        s = NATS_OK;
        txo_sleep_ms(500);
    }
    if (s != NATS_OK && jerr != JSStreamNotFoundErr)
        fail_msg("deleting stream %s: %s (JetStream error %d)", stream, natsStatus_GetText(s),
                 (int)jerr);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

/* ---- two relays on two nodes ---- */

struct relay_thread {
    struct txo_relay *relay;
    pthread_t th;
    int rc;
    char msg[sizeof(((struct txo_error *)0)->msg)];
};

static void *relay_main(void *arg)
{
    struct relay_thread *rt = arg;
    struct txo_error err;
    txo_error_init(&err);
    rt->rc = txo_relay_run(rt->relay, &err);
    if (rt->rc != 0)
        snprintf(rt->msg, sizeof(rt->msg), "%s", err.msg);
    return NULL;
}

/*
 * Options of a relay that runs until stopped, unordered, with a short idle sleep, the given
 * batch size and backoff, no dead letter and no breaker: the cluster tests count every event.
 * Not a drain: a relay on another node than the writer's may find nothing at first, the rows'
 * write set being applied there a moment after the COMMIT returned.
 */
static void running_relay_opts(struct txo_relay_opts *ro, unsigned batch_size, int backoff_base_ms,
                               int backoff_max_ms)
{
    txo_relay_opts_init(ro);
    ro->ordering = TXO_RELAY_ORDER_NONE;
    ro->batch_size = batch_size;
    ro->drain = false;
    ro->idle_sleep_ms = 20;
    ro->backoff.base_ms = backoff_base_ms;
    ro->backoff.max_ms = backoff_max_ms;
    ro->max_attempts = 1000;
    ro->breaker_failures = 0;
}

static void two_relays(struct cluster *c, enum txo_relay_claim_mode mode)
{
    const char *mname = txo_relay_claim_mode_name(mode);
    char stream[64], prefix[64], keys[64];
    snprintf(stream, sizeof(stream), "CLUSTER_%s_%ld", mname, (long)getpid());
    snprintf(prefix, sizeof(prefix), "cluster%ld.%s", (long)getpid(), mname);
    snprintf(keys, sizeof(keys), "two-%s", mname);
    testdb_exec(c->t.db, "DELETE FROM outbox_events");
    testoutbox_insert_seq(c->t.db, N_EVENTS, keys);

    struct txo_db_stats before, after;
    txo_db_get_stats(&before);
    struct txo_db *db[2];
    struct txo_publisher *pub[2];
    struct counting *cp[2];
    struct relay_thread rt[2];
    memset(rt, 0, sizeof(rt));
    int64_t t0 = txo_monotonic_ms();
    for (unsigned i = 0; i < 2; i++) {
        db[i] = connect_node(c, i); /* relay 1 on node 1, relay 2 on node 2 */
        pub[i] = counting_new(c, stream, prefix, &cp[i]);
        struct txo_relay_opts ro;
        running_relay_opts(&ro, 100, 50, 200);
        ro.mode = mode;
        rt[i].relay = testrelay_new(db[i], pub[i], &ro);
    }
    for (unsigned i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&rt[i].th, NULL, relay_main, &rt[i]), 0);
    int64_t deadline = txo_monotonic_ms() + DRAIN_MS;
    while (testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED'") >
           0) {
        if (txo_monotonic_ms() > deadline)
            fail_msg("%s: events still not PUBLISHED after %d s", mname, DRAIN_MS / 1000);
        txo_sleep_ms(20);
    }
    int64_t ms = txo_monotonic_ms() - t0;
    for (unsigned i = 0; i < 2; i++)
        txo_relay_stop(rt[i].relay);
    for (unsigned i = 0; i < 2; i++) {
        pthread_join(rt[i].th, NULL);
        if (rt[i].rc != 0)
            fail_msg("relay %u (%s): %s", i + 1, mname, rt[i].msg);
    }
    txo_db_get_stats(&after);

    assert_int_equal(
        testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE status = 'PUBLISHED'"),
        N_EVENTS);
    expect_stream_holds_each_once(c, stream, keys, N_EVENTS);
    uint64_t acked = atomic_load(&cp[0]->acked) + atomic_load(&cp[1]->acked);
    uint64_t dups = acked - N_EVENTS;
    struct txo_relay_stats s1, s2;
    txo_relay_get_stats(rt[0].relay, &s1);
    txo_relay_get_stats(rt[1].relay, &s2);
    print_message("two relays, claim mode %s: %d events in %" PRId64 " ms (%.0f events/s); "
                  "publishes acked %" PRIu64 " (relay 1 %" PRIu64 ", relay 2 %" PRIu64 "), %" PRIu64
                  " duplicates dropped by the stream; deadlocks/certification "
                  "failures %" PRIu64 ", transaction retries %" PRIu64 "\n",
                  mname, N_EVENTS, ms, ms > 0 ? N_EVENTS * 1000.0 / (double)ms : 0.0, acked,
                  (uint64_t)atomic_load(&cp[0]->acked), (uint64_t)atomic_load(&cp[1]->acked), dups,
                  after.deadlocks - before.deadlocks, after.tx_retries - before.tx_retries);
    assert_true(acked >= N_EVENTS);
    if (mode == TXO_RELAY_CLAIM_LEASE) {
        /* The lease claim commits before publishing: a conflict costs a claim, not a publish.
         * The only duplicates would come from a lease expiry (30 s), which a drain this short
         * does not reach. */
        assert_int_equal(dups, 0);
    } else {
        /* Transaction mode publishes before its COMMIT: each certification failure at COMMIT
         * republishes at most its batch (100). */
        uint64_t conflicts = after.deadlocks - before.deadlocks;
        assert_true(dups <= conflicts * 100);
    }
    (void)s1;
    (void)s2;
    for (unsigned i = 0; i < 2; i++) {
        txo_relay_free(rt[i].relay);
        txo_publisher_free(pub[i]);
        txo_db_close(db[i]);
    }
    delete_stream(c, stream);
}

static void test_two_relays_lease(void **state)
{
    two_relays(*state, TXO_RELAY_CLAIM_LEASE);
}

static void test_two_relays_transaction(void **state)
{
    two_relays(*state, TXO_RELAY_CLAIM_TRANSACTION);
}

/* ---- a node outside the primary component ---- */

/* GET /readyz until it answers `want`; false after timeout_s. */
static bool wait_ready_status(CURL *h, unsigned port, long want, int timeout_s)
{
    struct testhttp_reply r = {0};
    int64_t deadline = txo_monotonic_ms() + (int64_t)timeout_s * 1000;
    bool ok = false;
    while (!ok && txo_monotonic_ms() < deadline) {
        testhttp_get(h, port, "/readyz", &r);
        ok = r.status == want;
        if (!ok)
            txo_sleep_ms(200);
    }
    testhttp_reply_release(&r);
    return ok;
}

/* POST /orders with a fresh key; returns the HTTP status. */
static long place_order(CURL *h, unsigned port, const char *key)
{
    struct testhttp_reply r = {0};
    testhttp_post_order(h, port, key,
                        "{\"customer_id\":7,\"items\":[{\"sku\":\"SKU-A\",\"qty\":1,"
                        "\"price_cents\":1250}]}",
                        &r);
    long st = r.status;
    if (st != 201)
        print_message("POST /orders on port %u: %ld %.200s\n", port, st, r.body ? r.body : "");
    testhttp_reply_release(&r);
    return st;
}

/* The mariadb client's answer to a query on one node: its exit status and its output. */
static int mariadb_client(const struct cluster *c, unsigned node, const char *sql, char *out,
                          size_t cap)
{
    const char *host = c->db_node[node];
    const char *colon = strrchr(host, ':');
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "mariadb --no-defaults -h127.0.0.1 -P%s -u'%s' -p'%s' '%s' -N -e \"%s\" 2>&1",
             colon + 1, c->t.opts.user, c->t.opts.password, c->t.name, sql);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t len = fread(out, 1, cap - 1, f);
    out[len] = '\0';
    char sink[256];
    while (fread(sink, 1, sizeof(sink), f) > 0) {
    }
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_non_primary_node(void **state)
{
    struct cluster *c = *state;
    testdb_export_env(&c->t);
    CURL *h = curl_easy_init();
    assert_non_null(h);
    char node3[80], list[300];
    snprintf(node3, sizeof(node3), "--mysql-host=%s", c->db_node[2]);
    snprintf(list, sizeof(list), "--mysql-host=%s,%s,%s", c->db_node[2], c->db_node[0],
             c->db_node[1]);
    /* serve and relay on node 3 alone; a second serve with node 3 first in its list. */
    struct testproc *serve3 = &c->procs[0], *serve_list = &c->procs[1], *relay3 = &c->procs[2];
    struct txo_error err;
    txo_error_init(&err);
    if (orders_set_inventory(c->t.db, "SKU-A", 1000, &err) != 0)
        fail_msg("stock: %s", err.msg);
    const char *a3[] = {node3, NULL};
    unsigned port3 = testhttp_txo_start(serve3, "cluster_serve3", "serve", a3);
    const char *al[] = {list, NULL};
    unsigned port_list = testhttp_txo_start(serve_list, "cluster_serve_list", "serve", al);
    unsigned relay_port = testproc_free_port();
    char listen[64];
    snprintf(listen, sizeof(listen), "--metrics-listen=127.0.0.1:%u", relay_port);
    const char *ar[] = {testproc_txo_bin(), "relay", node3, "--publisher=null", listen, NULL};
    testproc_start(relay3, "cluster_relay3", ar, NULL);
    if (!testproc_wait_http(relay_port, "/healthz", 10000))
        fail_msg("txo relay did not start (log %s)", relay3->log_path);
    assert_true(wait_ready_status(h, port3, 200, 10));
    assert_true(wait_ready_status(h, relay_port, 200, 10));
    assert_int_equal(place_order(h, port3, "np-before"), 201);

    cluster_sh(c, "sql 3 -e \"SET GLOBAL wsrep_provider_options='gmcast.isolate=1'\"");
    bool not_ready = wait_ready_status(h, port3, 503, READY_WAIT_S);
    bool relay_not_ready = wait_ready_status(h, relay_port, 503, READY_WAIT_S);
    char line[1024];
    int st = mariadb_client(c, 2, "SELECT COUNT(*) FROM orders", line, sizeof(line));
    long order_on_3 = place_order(h, port3, "np-during-3");
    long order_on_list = place_order(h, port_list, "np-during-list");
    bool list_ready = wait_ready_status(h, port_list, 200, 5);
    cluster_sh(c, "sql 3 -e \"SET GLOBAL wsrep_provider_options='gmcast.isolate=0'\"");
    print_message("node 3 isolated: serve /readyz 503 %s, relay /readyz 503 %s; mariadb client: "
                  "status %d \"%.200s\"; POST /orders on node 3 %ld, through the host list %ld "
                  "(list /readyz 200 %s)\n",
                  not_ready ? "yes" : "no", relay_not_ready ? "yes" : "no", st, line, order_on_3,
                  order_on_list, list_ready ? "yes" : "no");
    assert_true(not_ready);
    assert_true(relay_not_ready);
    assert_int_not_equal(st, 0);
    assert_non_null(strstr(line, "1047"));
    assert_true(order_on_3 >= 500);
    assert_int_equal(order_on_list, 201);
    assert_true(list_ready);

    /* Rejoined (IST): the daemons on node 3 recover by themselves. */
    assert_true(wait_ready_status(h, port3, 200, 60));
    assert_true(wait_ready_status(h, relay_port, 200, 30));
    long after = 0;
    for (int i = 0; i < 20 && after != 201; i++) {
        after = place_order(h, port3, "np-after");
        if (after != 201)
            txo_sleep_ms(500);
    }
    assert_int_equal(after, 201);
    /* np-before, np-during-list and np-after; the one refused on node 3 left nothing. */
    assert_int_equal(testdb_q(c->t.db, "SELECT COUNT(*) FROM orders"), 3);
    testhttp_txo_stop(serve3, "txo serve (node 3)");
    testhttp_txo_stop(serve_list, "txo serve (host list)");
    testhttp_txo_stop(relay3, "txo relay (node 3)");
    curl_easy_cleanup(h);
}

/* ---- the stream's leader killed while the relay publishes and a consumer reads ---- */

/* The server name ("nats2") that leads the stream, read with cnats; "" when none. */
static void stream_leader(const struct cluster *c, const char *stream, char *out, size_t cap)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsStreamInfo *si = NULL;
    out[0] = '\0';
    natsStatus s = testnats_connect(c->nats_urls, &nc);
    if (s == NATS_OK)
        s = natsConnection_JetStream(&js, nc, NULL);
    if (s == NATS_OK)
        s = js_GetStreamInfo(&si, js, stream, NULL, NULL);
    if (s == NATS_OK && si->Cluster != NULL && si->Cluster->Leader != NULL)
        snprintf(out, cap, "%s", si->Cluster->Leader);
    jsStreamInfo_Destroy(si);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

struct seen {
    unsigned n;
    unsigned char *count; /* by key number */
    size_t prefix_len;
    atomic_uint_fast64_t handled;
};

static int on_message(void *arg, const struct txo_inbound_message *msg, struct txo_error *err)
{
    (void)err;
    struct seen *s = arg;
    if (msg->msg_id != NULL && strlen(msg->msg_id) > s->prefix_len) {
        long k = strtol(msg->msg_id + s->prefix_len + 1, NULL, 10);
        if (k >= 1 && k <= (long)s->n && s->count[k] < 255)
            s->count[k]++;
    }
    atomic_fetch_add(&s->handled, 1);
    return 0;
}

static unsigned distinct_seen(const struct seen *s)
{
    unsigned d = 0;
    for (unsigned k = 1; k <= s->n; k++)
        d += s->count[k] != 0;
    return d;
}

static unsigned node_of(const char *server_name)
{
    size_t len = strlen(server_name);
    if (len == 0)
        fail_msg("the stream has no leader");
    unsigned n = (unsigned)(server_name[len - 1] - '0');
    if (n < 1 || n > N_NODES)
        fail_msg("stream leader \"%s\" is not one of nats1..nats3", server_name);
    return n;
}

static void test_stream_leader_killed(void **state)
{
    struct cluster *c = *state;
    enum { N = 2000 };
    char stream[64], prefix[64], durable[64], keys[32] = "leader";
    snprintf(stream, sizeof(stream), "CLUSTER_LEADER_%ld", (long)getpid());
    snprintf(prefix, sizeof(prefix), "cluster%ld.leader", (long)getpid());
    snprintf(durable, sizeof(durable), "cluster-worker-%ld", (long)getpid());
    testdb_exec(c->t.db, "DELETE FROM outbox_events");
    testoutbox_insert_seq(c->t.db, 20, keys); /* the rest arrives while the leader is killed */

    struct txo_db *db = connect_node(c, 0);
    struct counting *cp = NULL;
    struct txo_publisher *pub = counting_new(c, stream, prefix, &cp);
    struct txo_relay_opts ro;
    running_relay_opts(&ro, 20, 100, 500); /* many small batches: the kill lands mid-way */
    struct relay_thread rt = {.relay = testrelay_new(db, pub, &ro)};
    /* The stream exists (R3) after the first batch. */
    assert_true(testrelay_run_once(rt.relay) > 0);
    char leader[64];
    stream_leader(c, stream, leader, sizeof(leader));
    unsigned victim = node_of(leader);
    assert_int_equal(pthread_create(&rt.th, NULL, relay_main, &rt), 0);
    /* Events keep coming (100 every 100 ms, like an application writing its outbox) so that
     * publishes are in flight when the leader dies; the rows go in through node 2. */
    struct txo_db *writer = connect_node(c, 1);
    char sql[512];
    unsigned inserted = 20, at_kill = 0;
    char args[64];
    int64_t t_kill = 0;
    while (inserted < N) {
        snprintf(sql, sizeof(sql),
                 "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, "
                 "idempotency_key) SELECT 'order', seq, 'OrderCreated', JSON_OBJECT('n', seq), "
                 "CONCAT('%s:', seq) FROM seq_%u_to_%u",
                 keys, inserted + 1, inserted + 100 < N ? inserted + 100 : (unsigned)N);
        testdb_exec(writer, sql);
        inserted = inserted + 100 < N ? inserted + 100 : (unsigned)N;
        if (t_kill == 0 && inserted >= N / 4) {
            at_kill =
                (unsigned)testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE status = "
                                            "'PUBLISHED'");
            snprintf(args, sizeof(args), "kill-nats %u", victim);
            cluster_sh(c, args);
            t_kill = txo_monotonic_ms();
        }
        txo_sleep_ms(100);
    }
    txo_db_close(writer);
    char new_leader[64] = "";
    while (txo_monotonic_ms() - t_kill < 20000) {
        stream_leader(c, stream, new_leader, sizeof(new_leader));
        if (new_leader[0] != '\0' && strcmp(new_leader, leader) != 0)
            break;
        txo_sleep_ms(200);
    }
    int64_t t_elected = txo_monotonic_ms();
    int64_t published_at_kill = at_kill;
    snprintf(args, sizeof(args), "start-nats %u", victim);
    cluster_sh(c, args);
    int64_t deadline = txo_monotonic_ms() + DRAIN_MS;
    while (testdb_q(c->t.db, "SELECT COUNT(*) FROM outbox_events WHERE status <> 'PUBLISHED'") >
           0) {
        if (txo_monotonic_ms() > deadline)
            fail_msg("events still not PUBLISHED %d s after the leader was killed",
                     DRAIN_MS / 1000);
        txo_sleep_ms(100);
    }
    txo_relay_stop(rt.relay);
    pthread_join(rt.th, NULL);
    if (rt.rc != 0)
        fail_msg("relay: %s", rt.msg);
    struct txo_relay_stats rs;
    txo_relay_get_stats(rt.relay, &rs);
    print_message("stream leader %s killed (%" PRId64 " of %d published then); leader %s "
                  "%" PRId64 " ms after the kill; publish attempts that failed and were "
                  "retried %" PRIu64 ", acked %" PRIu64 " (relay: published %" PRIu64
                  ", batches %" PRIu64 ") for %d events\n",
                  leader, published_at_kill, N, new_leader[0] ? new_leader : "(none seen)",
                  t_elected - t_kill, rs.failed_attempts, (uint64_t)atomic_load(&cp->acked),
                  rs.published, rs.batches, N);
    assert_true(new_leader[0] != '\0' && strcmp(new_leader, leader) != 0);
    expect_stream_holds_each_once(c, stream, keys, N);

    /* The durable consumer reads everything while another node is killed and restarted. */
    struct seen seen = {.n = N, .count = calloc(N + 1, 1), .prefix_len = strlen(keys)};
    assert_non_null(seen.count);
    struct txo_nats_opts no;
    nats_opts(c, stream, prefix, &no);
    no.durable = durable;
    no.ack_wait_ms = 2000;
    struct txo_consumer *cons = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_consumer_nats_new(&no, &(struct txo_handler){.one = on_message, .arg = &seen}, &cons,
                              &err) != 0)
        fail_msg("consumer: %s", err.msg);
    unsigned victim2 = victim % N_NODES + 1;
    bool killed = false, restarted = false;
    deadline = txo_monotonic_ms() + 90000;
    while (distinct_seen(&seen) < N) {
        if (txo_monotonic_ms() > deadline)
            fail_msg("the consumer saw %u of %d events within 90 s", distinct_seen(&seen), N);
        size_t handled = 0;
        txo_error_init(&err);
        int prc = txo_consumer_poll(cons, 100, 1000, &handled, &err);
        if (prc != 0 && !txo_err_is_transient(prc))
            fail_msg("consumer poll: %s", err.msg);
        if (!killed && distinct_seen(&seen) >= N / 3) {
            snprintf(args, sizeof(args), "kill-nats %u", victim2);
            cluster_sh(c, args);
            killed = true;
        } else if (killed && !restarted && distinct_seen(&seen) >= (2 * N) / 3) {
            snprintf(args, sizeof(args), "start-nats %u", victim2);
            cluster_sh(c, args);
            restarted = true;
        }
    }
    if (killed && !restarted) {
        snprintf(args, sizeof(args), "start-nats %u", victim2);
        cluster_sh(c, args);
    }
    print_message("consumer: %d events seen, %" PRIu64 " handler calls (redeliveries %" PRIu64
                  ") across a kill of nats%u\n",
                  N, (uint64_t)atomic_load(&seen.handled), (uint64_t)atomic_load(&seen.handled) - N,
                  victim2);
    assert_int_equal(distinct_seen(&seen), N);
    txo_consumer_free(cons);
    free(seen.count);
    txo_relay_free(rt.relay);
    txo_publisher_free(pub);
    txo_db_close(db);
    delete_stream(c, stream);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_relays_lease),
        cmocka_unit_test(test_two_relays_transaction),
        cmocka_unit_test_teardown(test_non_primary_node, stop_procs),
        cmocka_unit_test(test_stream_leader_killed),
    };
    int rc = testhttp_run_each(tests, TXO_ARRAY_LEN(tests), NULL, NULL, setup, teardown);
    txo_nats_shutdown();
    return rc;
}
