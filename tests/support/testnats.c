/*
 * Test support: a private nats-server per test (see testnats.h); the process mechanics are
 * testchild's.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cmocka.h>
#include <jansson.h>
#include <nats/nats.h>

#include "testchild.h"
#include "testnats.h"
#include "txo/alloc.h"
#include "txo/clock.h"
#include "testproc.h"
#include "testrun.h"
#include "txo/nats.h"

#define READY_TIMEOUT_MS 5000
#define READY_POLL_MS    10
#define STOP_TIMEOUT_MS  10000

static void spawn(void *owner)
{
    struct testnats *n = owner;
    char found[512];
    const char *bin =
        testchild_require_bin("TXO_NATS_SERVER", "nats-server", "nats-server",
                              "the NATS tests need a real server", found, sizeof(found));
    char port[16];
    snprintf(port, sizeof(port), "%u", n->port);
    const char *argv[] = {bin, "-js", "-a", "127.0.0.1", "-p", port, "-sd", n->store_dir, NULL};
    n->srv.pid = testchild_spawn(argv, n->log_path, NULL, NULL);
    testchild_await(&n->srv.pid, "nats-server", n->log_path, testchild_port_answers, &n->port,
                    READY_TIMEOUT_MS, READY_POLL_MS);
}

void testnats_start(struct testnats *n)
{
    memset(n, 0, sizeof(*n));
    testchild_make_dir(n->dir, sizeof(n->dir), "txo-nats");
    snprintf(n->store_dir, sizeof(n->store_dir), "%s/store", n->dir);
    snprintf(n->log_path, sizeof(n->log_path), "%s/server.log", n->dir);
    if (mkdir(n->store_dir, 0755) != 0)
        fail_msg("mkdir %s: %s", n->store_dir, strerror(errno));
    n->port = testproc_free_port();
    snprintf(n->url, sizeof(n->url), "nats://127.0.0.1:%u", n->port);
    testchild_server_start(&n->srv, STOP_TIMEOUT_MS, spawn, n);
}

int testnats_run_each(const struct CMUnitTest *tests, size_t n, int (*setup)(void **state),
                      int (*teardown)(void **state))
{
    int failed = testrun_each(tests, n, setup, teardown, NULL, NULL);
    txo_nats_shutdown();
    return failed;
}

void testnats_stop(struct testnats *n)
{
    testchild_server_stop(&n->srv);
}

void testnats_restart(struct testnats *n)
{
    testchild_server_restart(&n->srv);
}

void testnats_cleanup(struct testnats *n)
{
    testnats_stop(n);
    if (n->dir[0] != '\0' && getenv("TXO_TEST_KEEP_NATS") == NULL)
        testchild_remove_dir(n->dir);
    n->dir[0] = '\0';
}

/* ---- inspection through cnats ---- */

struct js_conn {
    natsConnection *nc;
    jsCtx *js;
};

natsStatus testnats_connect(const char *urls, natsConnection **nc)
{
    /* A cluster's comma-separated list goes to cnats as an array: cnats 3.4 cannot connect to
     * a list given as one string. */
    char *copy = strdup(urls);
    assert_non_null(copy);
    const char *servers[8];
    int n_servers = 0;
    char *save = NULL;
    for (char *u = strtok_r(copy, ",", &save); u != NULL && n_servers < 8;
         u = strtok_r(NULL, ",", &save))
        servers[n_servers++] = u;
    natsOptions *opts = NULL;
    natsStatus s = natsOptions_Create(&opts);
    if (s == NATS_OK)
        s = natsOptions_SetServers(opts, servers, n_servers);
    if (s == NATS_OK)
        s = natsConnection_Connect(nc, opts);
    natsOptions_Destroy(opts);
    free(copy);
    return s;
}

static struct js_conn js_connect(const struct testnats *n)
{
    struct js_conn c = {NULL, NULL};
    natsStatus s = testnats_connect(n->url, &c.nc);
    if (s == NATS_OK)
        s = natsConnection_JetStream(&c.js, c.nc, NULL);
    if (s != NATS_OK)
        fail_msg("connecting to %s: %s", n->url, natsStatus_GetText(s));
    return c;
}

static void js_close(struct js_conn *c)
{
    jsCtx_Destroy(c->js);
    natsConnection_Destroy(c->nc);
}

/* The info of stream on c's server, or the test fails (c closed first). Free with
 * jsStreamInfo_Destroy. */
static jsStreamInfo *stream_info(struct js_conn *c, const char *stream)
{
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, c->js, stream, NULL, &jerr);
    if (s != NATS_OK) {
        js_close(c);
        fail_msg("stream info %s: %s (JetStream error %d)", stream, natsStatus_GetText(s),
                 (int)jerr);
    }
    return si;
}

static jsStreamState stream_state(const struct testnats *n, const char *stream)
{
    struct js_conn c = js_connect(n);
    jsStreamInfo *si = stream_info(&c, stream);
    jsStreamState st = si->State;
    st.Subjects = NULL; /* freed with si */
    st.Deleted = NULL;
    st.Lost = NULL;
    jsStreamInfo_Destroy(si);
    js_close(&c);
    return st;
}

uint64_t testnats_stream_msgs(const struct testnats *n, const char *stream)
{
    return stream_state(n, stream).Msgs;
}

int64_t testnats_stream_consumers(const struct testnats *n, const char *stream)
{
    return stream_state(n, stream).Consumers;
}

void testnats_delete_msg(const struct testnats *n, const char *stream, uint64_t seq)
{
    struct js_conn c = js_connect(n);
    jsErrCode jerr = 0;
    natsStatus s = js_DeleteMsg(c.js, stream, seq, NULL, &jerr);
    js_close(&c);
    if (s != NATS_OK)
        fail_msg("deleting message %" PRIu64 " of %s: %s (JetStream error %d)", seq, stream,
                 natsStatus_GetText(s), (int)jerr);
}

void testnats_publish(const struct testnats *n, const char *subject, const char *msg_id,
                      const char *data)
{
    struct js_conn c = js_connect(n);
    natsMsg *m = NULL;
    natsStatus s = natsMsg_Create(&m, subject, NULL, data, (int)strlen(data));
    if (s == NATS_OK && msg_id != NULL)
        s = natsMsgHeader_Set(m, "Nats-Msg-Id", msg_id);
    jsPubAck *pa = NULL;
    jsErrCode jerr = 0;
    if (s == NATS_OK)
        s = js_PublishMsg(&pa, c.js, m, NULL, &jerr);
    jsPubAck_Destroy(pa);
    natsMsg_Destroy(m);
    js_close(&c);
    if (s != NATS_OK)
        fail_msg("publishing to %s: %s (JetStream error %d)", subject, natsStatus_GetText(s),
                 (int)jerr);
}

/*
 * Whether a clustered stream's answer can be trusted: it has a leader and every replica is
 * online and caught up. While a stream has no leader (one was just killed), a replica that is
 * still catching up may answer info and get requests with its own, older state.
 */
static bool stream_settled(const jsStreamInfo *si)
{
    const jsClusterInfo *ci = si->Cluster;
    if (ci == NULL)
        return true; /* one server */
    if (ci->Leader == NULL || ci->Leader[0] == '\0')
        return false;
    for (int i = 0; i < ci->ReplicasLen; i++) {
        const jsPeerInfo *p = ci->Replicas[i];
        if (p != NULL && (!p->Current || p->Offline || p->Lag > 0))
            return false;
    }
    return true;
}

/*
 * One pass over the stream: the ids of the messages it could read, *want = the stream's count,
 * *settled = whether the stream had a leader and every replica was current (stream_settled).
 */
static size_t read_msg_ids(const struct testnats *n, const char *stream, char ***ids, char ***data,
                           uint64_t *want, bool *settled)
{
    struct js_conn c = js_connect(n);
    jsStreamInfo *si = stream_info(&c, stream);
    uint64_t first = si->State.FirstSeq, last = si->State.LastSeq, msgs = si->State.Msgs;
    *settled = stream_settled(si);
    jsStreamInfo_Destroy(si);
    *want = msgs;
    char **out = calloc(msgs > 0 ? msgs : 1, sizeof(*out));
    char **bodies = data != NULL ? calloc(msgs > 0 ? msgs : 1, sizeof(*bodies)) : NULL;
    assert_non_null(out);
    assert_true(data == NULL || bodies != NULL);
    size_t count = 0;
    for (uint64_t seq = first; msgs > 0 && seq <= last && count < msgs; seq++) {
        natsMsg *m = NULL;
        jsErrCode jerr = 0;
        natsStatus s = js_GetMsg(&m, c.js, stream, seq, NULL, &jerr);
        if (s == NATS_NOT_FOUND || jerr == JSNoMessageFoundErr)
            continue; /* a deleted sequence */
        if (s != NATS_OK) {
            js_close(&c);
            fail_msg("get message %llu of %s: %s", (unsigned long long)seq, stream,
                     natsStatus_GetText(s));
        }
        const char *id = NULL;
        if (natsMsgHeader_Get(m, "Nats-Msg-Id", &id) == NATS_OK && id != NULL) {
            out[count] = strdup(id);
            assert_non_null(out[count]);
        }
        if (bodies != NULL) {
            int len = natsMsg_GetDataLength(m);
            bodies[count] = strndup(natsMsg_GetData(m) != NULL ? natsMsg_GetData(m) : "",
                                    len > 0 ? (size_t)len : 0);
            assert_non_null(bodies[count]);
        }
        count++;
        natsMsg_Destroy(m);
    }
    js_close(&c);
    *ids = out;
    if (data != NULL)
        *data = bodies;
    return count;
}

size_t testnats_stream_read(const struct testnats *n, const char *stream, char ***ids, char ***data)
{
    /* In a cluster, while the stream's leader moves (a node killed or rejoining), a replica
     * still catching up may answer with its older state, and a get can answer "not found" for
     * a message that is there: read again, for up to 30 s, until the stream has a leader, every
     * replica is current and every message it counts was read. A message really missing stays
     * missing, and the caller sees it. */
    for (int attempt = 1;; attempt++) {
        uint64_t want = 0;
        bool settled = false;
        size_t count = read_msg_ids(n, stream, ids, data, &want, &settled);
        if (settled && count == want)
            return count;
        if (attempt == 60) {
            print_message("stream %s counts %llu messages, %zu of them could be read%s\n", stream,
                          (unsigned long long)want, count,
                          settled ? "" : "; it never had a leader with every replica current");
            return count;
        }
        testnats_free_ids(*ids, count);
        *ids = NULL;
        if (data != NULL) {
            testnats_free_ids(*data, count);
            *data = NULL;
        }
        txo_sleep_ms(500);
    }
}

size_t testnats_stream_msg_ids(const struct testnats *n, const char *stream, char ***ids)
{
    return testnats_stream_read(n, stream, ids, NULL);
}

void testnats_stream_msg(const struct testnats *n, const char *stream, uint64_t seq,
                         const char *name, char **value, char **data)
{
    struct js_conn c = js_connect(n);
    natsMsg *m = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetMsg(&m, c.js, stream, seq, NULL, &jerr);
    if (s != NATS_OK) {
        js_close(&c);
        fail_msg("get message %llu of %s: %s (JetStream error %d)", (unsigned long long)seq, stream,
                 natsStatus_GetText(s), (int)jerr);
    }
    const char *v = NULL;
    *value = natsMsgHeader_Get(m, name, &v) == NATS_OK && v != NULL ? strdup(v) : NULL;
    if (data != NULL) {
        int len = natsMsg_GetDataLength(m);
        *data = strndup(natsMsg_GetData(m) != NULL ? natsMsg_GetData(m) : "",
                        len > 0 ? (size_t)len : 0);
        assert_non_null(*data);
    }
    natsMsg_Destroy(m);
    js_close(&c);
}

void testnats_free_ids(char **ids, size_t count)
{
    for (size_t i = 0; i < count; i++)
        free(ids[i]);
    free(ids);
}

void testnats_delete_stream(const struct testnats *n, const char *stream)
{
    struct js_conn c = js_connect(n);
    jsErrCode jerr = 0;
    natsStatus s = js_DeleteStream(c.js, stream, NULL, &jerr);
    js_close(&c);
    if (s != NATS_OK && s != NATS_NOT_FOUND && jerr != JSStreamNotFoundErr)
        fail_msg("deleting stream %s: %s (JetStream error %d)", stream, natsStatus_GetText(s),
                 (int)jerr);
}

void testnats_delete_consumer(const struct testnats *n, const char *stream, const char *durable)
{
    struct js_conn c = js_connect(n);
    jsErrCode jerr = 0;
    natsStatus s = js_DeleteConsumer(c.js, stream, durable, NULL, &jerr);
    js_close(&c);
    if (s != NATS_OK && s != NATS_NOT_FOUND && jerr != JSConsumerNotFoundErr)
        fail_msg("deleting consumer %s/%s: %s (JetStream error %d)", stream, durable,
                 natsStatus_GetText(s), (int)jerr);
}

static jsConsumerInfo *consumer_info(const struct testnats *n, const char *stream,
                                     const char *durable, bool must_exist)
{
    struct js_conn c = js_connect(n);
    jsConsumerInfo *ci = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetConsumerInfo(&ci, c.js, stream, durable, NULL, &jerr);
    js_close(&c);
    if (s == NATS_OK)
        return ci;
    if ((s == NATS_NOT_FOUND || jerr == JSConsumerNotFoundErr) && !must_exist)
        return NULL;
    fail_msg("consumer info %s/%s: %s (JetStream error %d)", stream, durable, natsStatus_GetText(s),
             (int)jerr);
    return NULL;
}

bool testnats_consumer_exists(const struct testnats *n, const char *stream, const char *durable)
{
    jsConsumerInfo *ci = consumer_info(n, stream, durable, false);
    jsConsumerInfo_Destroy(ci);
    return ci != NULL;
}

int64_t testnats_consumer_ack_pending(const struct testnats *n, const char *stream,
                                      const char *durable)
{
    jsConsumerInfo *ci = consumer_info(n, stream, durable, true);
    int64_t v = ci->NumAckPending;
    jsConsumerInfo_Destroy(ci);
    return v;
}

size_t testnats_expect_each_once(const struct testnats *nats, const char *stream, unsigned n,
                                 unsigned aggs)
{
    char **ids = NULL, **data = NULL;
    size_t count = testnats_stream_read(nats, stream, &ids, &data);
    assert_int_equal(count, n);
    unsigned *seen = txo_calloc(n, sizeof(*seen));
    int64_t *last_id = txo_calloc(aggs, sizeof(*last_id));
    for (size_t i = 0; i < count; i++) {
        unsigned k = 0;
        if (ids[i] == NULL || sscanf(ids[i], "k:%u", &k) != 1 || k >= n)
            fail_msg("unexpected Nats-Msg-Id %s", ids[i] != NULL ? ids[i] : "(none)");
        seen[k]++;
        json_error_t jerr;
        json_t *env = json_loads(data[i], 0, &jerr);
        assert_non_null(env);
        int64_t id = json_integer_value(json_object_get(env, "id"));
        if (id <= last_id[k % aggs])
            fail_msg("k:%u (id %" PRId64 ") after id %" PRId64 " of its aggregate", k, id,
                     last_id[k % aggs]);
        last_id[k % aggs] = id;
        json_t *payload = json_object_get(env, "payload");
        if (json_object_size(payload) != 1 ||
            json_integer_value(json_object_get(payload, "n")) != (json_int_t)k)
            fail_msg("k:%u: payload %s", k, data[i]);
        json_decref(env);
    }
    for (unsigned k = 0; k < n; k++)
        if (seen[k] != 1)
            fail_msg("k:%u is in the stream %u times", k, seen[k]);
    txo_free(seen);
    txo_free(last_id);
    testnats_free_ids(ids, count);
    testnats_free_ids(data, count);
    return count;
}
