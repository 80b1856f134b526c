#include "core/common.h"

/*
 * The NATS JetStream publisher (txo/nats.h), plus the connection, stream and option helpers it
 * shares with the consumer (nats_internal.h).
 *
 * One batch, nats_publish_batch():
 *   1. Fail fast: when the connection is not up, every message fails with TXO_EUNAVAILABLE at
 *      once (cnats keeps reconnecting in the background); nothing is queued.
 *   2. Make sure the stream exists (first batch, or after the server answered "no responders",
 *      which is what a publish to a subject no stream listens on gets).
 *   3. Publish every message with js_PublishMsgAsync (header Nats-Msg-Id = idempotency key),
 *      keeping the natsMsg pointer of message i in sent[i].
 *   4. natsConnection_FlushTimeout writes the messages out at once (flush_sent), then
 *      js_PublishAsyncComplete waits for all PubAcks, ack_timeout_ms in all. On timeout,
 *      js_PublishAsyncGetPendingList takes the unacknowledged messages back from cnats, so no
 *      callback can arrive for them any more; they fail with TXO_ETIMEOUT. If the server did
 *      store one of them, the relay's retry gets a duplicate ack: still one message.
 *
 * Acks arrive on a cnats thread through ack_handler(). It does not touch results[]: it appends
 * {msg, outcome} to p->acks under p->mu and keeps the natsMsg alive (cnats hands its
 * ownership to the handler), so no message of the batch can be freed and its address reused
 * by a later message while the batch runs. After the wait, the batch thread closes the batch
 * (p->active = false, under p->mu), matches each record to its index by pointer (a sorted
 * copy of sent[] and a binary search) and frees the messages. A handler that runs after the
 * batch was closed (its message was taken off cnats's list just before the pending list was
 * collected) frees its message and records nothing: that message counts as timed out.
 * cnats decrements its pending count only after the handler returned, so when
 * PublishAsyncComplete reports success every record is already in p->acks, and after a
 * timeout a second PublishAsyncComplete (with cnats's list now empty) waits for such a late
 * handler to return. So between batches no handler runs or can be called (acks of messages
 * taken back are dropped by cnats), and freeing the publisher cannot race with one.
 *
 * Error messages written to errors[] carry no per-event detail, so that the relay can mark a
 * failed batch with one UPDATE per distinct error (it groups rows by message).
 *
 * Ownership: the publisher owns its connection, the copies of the options and the per-batch
 * buffers (grown to the largest batch seen). Thread-safety: one relay thread at a time, plus
 * cnats's ack thread as described above.
 */

#include <pthread.h>

#include "broker/nats_internal.h"
#include "broker/transport.h"
#include "broker/wire.h"
#include "core/text.h"

#define RECONNECT_BUF_BYTES (8 * 1024 * 1024)
#define ASYNC_MAX_PENDING   65536 /* above the relay's largest batch: publishing never stalls */
#define NAME_MAX_LEN        255
#define ACK_TEXT_MAX        200
#define RESULT_PENDING      1 /* results[i] while no outcome is known (codes are <= 0) */
#define DRAIN_WAIT_MS       1000

/* ---- options ---- */

void txo_nats_opts_init(struct txo_nats_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->url = "nats://127.0.0.1:4222";
    o->connect_timeout_ms = 2000;
    o->reconnect_wait_ms = 250;
    o->connect_required = false;
    o->stream = "TXO_EVENTS";
    o->subject_prefix = "txo.events";
    o->create_stream = true;
    o->duplicate_window_ms = 120000;
    o->replicas = 1;
    o->ack_timeout_ms = 5000;
    o->durable = "txo-worker";
    o->filter_subject = NULL;
    o->ack_wait_ms = 30000;
    o->nak_delay_ms = 1000;
    o->max_deliver = -1;
}

static bool is_space_or_ctl(unsigned char ch)
{
    return ch <= 0x20 || ch == 0x7f;
}

/* A stream or durable name: 1..255 bytes, none of . * > / \ and no whitespace. */
static bool valid_name(const char *s)
{
    size_t len = s != NULL ? strlen(s) : 0;
    if (len == 0 || len > NAME_MAX_LEN)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (is_space_or_ctl(ch) || ch == '.' || ch == '*' || ch == '>' || ch == '/' || ch == '\\')
            return false;
    }
    return true;
}

/*
 * A subject: non-empty dot-separated tokens without whitespace; with wildcards allowed, a
 * token may be "*" and the last one ">".
 */
static bool valid_subject(const char *s, bool wildcards)
{
    size_t len = s != NULL ? strlen(s) : 0;
    if (len == 0 || len > NAME_MAX_LEN)
        return false;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && s[i] != '.')
            continue;
        size_t tlen = i - start;
        const char *tok = s + start;
        if (tlen == 0)
            return false;
        for (size_t k = 0; k < tlen; k++) {
            unsigned char ch = (unsigned char)tok[k];
            if (is_space_or_ctl(ch))
                return false;
            if (ch == '*' || ch == '>') {
                if (!wildcards || tlen != 1 || (ch == '>' && i != len))
                    return false;
            }
        }
        start = i + 1;
    }
    return true;
}

int txo__nats_check_opts(const struct txo_nats_opts *o, const char *role, struct txo_error *err)
{
    if (o == NULL)
        return txo_error_set(err, TXO_EINVAL, "nats %s: options are required", role);
    if (o->url == NULL || o->url[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "nats %s: url is empty", role);
    if (!valid_name(o->stream))
        return txo_error_set(err, TXO_EINVAL,
                             "nats %s: stream \"%s\" is not a valid name (1..255 bytes, no "
                             "'.', '*', '>', '/', '\\' or whitespace)",
                             role, o->stream != NULL ? o->stream : "");
    if (!valid_subject(o->subject_prefix, false))
        return txo_error_set(err, TXO_EINVAL,
                             "nats %s: subject_prefix \"%s\" is not a subject (dot-separated "
                             "non-empty tokens, no wildcards or whitespace, <= 255 bytes)",
                             role, o->subject_prefix != NULL ? o->subject_prefix : "");
    if (o->connect_timeout_ms < 1 || o->reconnect_wait_ms < 1 || o->ack_timeout_ms < 1)
        return txo_error_set(err, TXO_EINVAL,
                             "nats %s: connect_timeout_ms, reconnect_wait_ms and ack_timeout_ms "
                             "must be >= 1",
                             role);
    if (o->create_stream && o->duplicate_window_ms < 1)
        return txo_error_set(err, TXO_EINVAL, "nats %s: duplicate_window_ms must be >= 1", role);
    if (o->create_stream && (o->replicas < 1 || o->replicas > 5))
        return txo_error_set(err, TXO_EINVAL, "nats %s: replicas must be 1..5, got %d", role,
                             o->replicas);
    if (strcmp(role, "consumer") != 0)
        return 0;
    if (!valid_name(o->durable))
        return txo_error_set(err, TXO_EINVAL,
                             "nats consumer: durable \"%s\" is not a valid name (1..255 bytes, "
                             "no '.', '*', '>', '/', '\\' or whitespace)",
                             o->durable != NULL ? o->durable : "");
    if (o->filter_subject != NULL && !valid_subject(o->filter_subject, true))
        return txo_error_set(err, TXO_EINVAL,
                             "nats consumer: filter_subject \"%s\" is not a subject",
                             o->filter_subject);
    if (o->ack_wait_ms < 1 || o->nak_delay_ms < 0)
        return txo_error_set(err, TXO_EINVAL,
                             "nats consumer: ack_wait_ms must be >= 1 and nak_delay_ms >= 0");
    if (o->max_deliver == 0 || o->max_deliver < -1)
        return txo_error_set(err, TXO_EINVAL,
                             "nats consumer: max_deliver must be -1 (unlimited) or >= 1, got %d",
                             o->max_deliver);
    return 0;
}

/* ---- subjects ---- */

/* Appends '.' and token to out[*n..cap), with '.', '*', '>', whitespace and controls as '_'. */
static bool append_token(char *out, size_t cap, size_t *n, const char *token)
{
    if (*n + 2 > cap)
        return false;
    out[(*n)++] = '.';
    return txo__text_append_name_part(out, cap, n, token, ".*>");
}

int txo_nats_subject(const char *prefix, const char *aggregate_type, const char *event_type,
                     char *out, size_t out_size, struct txo_error *err)
{
    if (out != NULL && out_size > 0)
        out[0] = '\0';
    if (out == NULL || aggregate_type == NULL || event_type == NULL)
        return txo_error_set(err, TXO_EINVAL, "nats subject: missing argument");
    if (!valid_subject(prefix, false))
        return txo_error_set(err, TXO_EINVAL, "nats subject: invalid prefix \"%s\"",
                             prefix != NULL ? prefix : "");
    size_t n = strlen(prefix);
    if (n + 1 > out_size)
        return txo_error_set(err, TXO_EINVAL, "nats subject: buffer of %zu bytes is too small",
                             out_size);
    memcpy(out, prefix, n + 1);
    if (!append_token(out, out_size, &n, aggregate_type) ||
        !append_token(out, out_size, &n, event_type)) {
        out[0] = '\0';
        return txo_error_set(err, TXO_EINVAL, "nats subject: buffer of %zu bytes is too small",
                             out_size);
    }
    return 0;
}

/* ---- cnats statuses ---- */

int txo__nats_code(natsStatus s, jsErrCode jerr, int fallback)
{
    (void)jerr; /* the server's JetStream errors keep the caller's fallback */
    switch (s) {
    case NATS_OK:
        return 0;
    case NATS_TIMEOUT:
        return TXO_ETIMEOUT;
    case NATS_NO_MEMORY:
        return TXO_ENOMEM;
    case NATS_MAX_PAYLOAD:
        return TXO_EINVAL;
    case NATS_IO_ERROR:
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_NO_SERVER:
    case NATS_STALE_CONNECTION:
    case NATS_NOT_YET_CONNECTED:
    case NATS_NO_RESPONDERS:
    case NATS_INSUFFICIENT_BUFFER:
    case NATS_SLOW_CONSUMER:
    case NATS_MISSED_HEARTBEAT:
        return TXO_EUNAVAILABLE;
    default:
        return fallback;
    }
}

void txo__nats_describe(natsStatus s, jsErrCode jerr, char *out, size_t cap)
{
    natsStatus last = NATS_OK;
    const char *text = nats_GetLastError(&last);
    if (last != s || text == NULL || text[0] == '\0')
        text = natsStatus_GetText(s);
    if (jerr != 0)
        snprintf(out, cap, "%s (JetStream error %d)", text, (int)jerr);
    else
        snprintf(out, cap, "%s", text);
}

/* ---- connection ---- */

static const char *conn_state_name(natsConnStatus st)
{
    switch (st) {
    case NATS_CONN_STATUS_DISCONNECTED:
        return "disconnected";
    case NATS_CONN_STATUS_CONNECTING:
        return "connecting";
    case NATS_CONN_STATUS_CONNECTED:
        return "connected";
    case NATS_CONN_STATUS_CLOSED:
        return "closed";
    case NATS_CONN_STATUS_RECONNECTING:
        return "reconnecting";
    case NATS_CONN_STATUS_DRAINING_SUBS:
    case NATS_CONN_STATUS_DRAINING_PUBS:
        return "draining";
    }
    return "unknown";
}

/* The callbacks run on cnats threads; closure is the static role string. */
static void on_disconnected(natsConnection *nc, void *closure)
{
    /* cnats also reports the disconnection of a connection we close ourselves. */
    if (natsConnection_IsClosed(nc))
        return;
    TXO_LOG(TXO_LOG_WARN, "nats", "connection lost, reconnecting in the background",
            TXO_KV_STR("role", (const char *)closure));
}

static void on_reconnected(natsConnection *nc, void *closure)
{
    char url[256] = "";
    (void)natsConnection_GetConnectedUrl(nc, url, sizeof(url));
    TXO_LOG(TXO_LOG_INFO, "nats", "reconnected", TXO_KV_STR("role", (const char *)closure),
            TXO_KV_STR("url", url));
}

static void on_connected(natsConnection *nc, void *closure)
{
    char url[256] = "";
    (void)natsConnection_GetConnectedUrl(nc, url, sizeof(url));
    TXO_LOG(TXO_LOG_INFO, "nats", "connected", TXO_KV_STR("role", (const char *)closure),
            TXO_KV_STR("url", url));
}

static void on_async_error(natsConnection *nc, natsSubscription *sub, natsStatus s, void *closure)
{
    (void)nc;
    (void)sub;
    TXO_LOG(TXO_LOG_WARN, "nats", "asynchronous error", TXO_KV_STR("role", (const char *)closure),
            TXO_KV_STR("error", natsStatus_GetText(s)));
}

void txo__nats_conn_close(struct txo__nats_conn *c)
{
    if (c == NULL)
        return;
    jsCtx_Destroy(c->js);
    c->js = NULL;
    natsConnection_Destroy(c->nc);
    c->nc = NULL;
    natsOptions_Destroy(c->nopts);
    c->nopts = NULL;
    txo_free(c->url);
    txo_free(c->stream);
    txo_free(c->prefix);
    txo_free(c->stream_subject);
    c->url = c->stream = c->prefix = c->stream_subject = NULL;
}

#define MAX_SERVERS 16

/*
 * Gives cnats the servers of url, a comma-separated list ("nats://a:4222,nats://b:4222", the
 * nodes of a cluster). Each one goes in its own array entry: cnats 3.4 takes a list in
 * natsOptions_SetURL() as one URL and then finds no server to connect to. More than
 * MAX_SERVERS entries are an error (NATS_INVALID_ARG), so is an empty one.
 */
static natsStatus set_servers(natsOptions *nopts, const char *url)
{
    char *copy = txo_strdup(url);
    if (copy == NULL)
        return NATS_NO_MEMORY;
    const char *servers[MAX_SERVERS];
    int n = 0;
    natsStatus s = NATS_OK;
    char *p = copy;
    for (;;) {
        char *end = strchr(p, ',');
        if (end != NULL)
            *end = '\0';
        while (*p == ' ' || *p == '\t')
            p++;
        size_t len = strlen(p);
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            p[--len] = '\0';
        if (len == 0 || n == MAX_SERVERS) {
            s = NATS_INVALID_ARG;
            break;
        }
        servers[n++] = p;
        if (end == NULL)
            break;
        p = end + 1;
    }
    if (s == NATS_OK)
        s = natsOptions_SetServers(nopts, servers, n);
    txo_free(copy);
    return s;
}

static natsStatus set_nats_options(struct txo__nats_conn *c)
{
    void *role = (void *)(uintptr_t)c->role; /* a static string, only ever read */
    char name[32];
    snprintf(name, sizeof(name), "txo-%s", c->role);
    natsStatus s = natsOptions_Create(&c->nopts);
    if (s == NATS_OK)
        s = set_servers(c->nopts, c->url);
    if (s == NATS_OK)
        s = natsOptions_SetName(c->nopts, name);
    if (s == NATS_OK)
        s = natsOptions_SetTimeout(c->nopts, c->opts.connect_timeout_ms);
    if (s == NATS_OK)
        s = natsOptions_SetAllowReconnect(c->nopts, true);
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(c->nopts, -1);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectWait(c->nopts, c->opts.reconnect_wait_ms);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectBufSize(c->nopts, RECONNECT_BUF_BYTES);
    if (s == NATS_OK)
        s = natsOptions_SetRetryOnFailedConnect(c->nopts, true, on_connected, role);
    if (s == NATS_OK)
        s = natsOptions_SetDisconnectedCB(c->nopts, on_disconnected, role);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectedCB(c->nopts, on_reconnected, role);
    if (s == NATS_OK)
        s = natsOptions_SetErrorHandler(c->nopts, on_async_error, role);
    return s;
}

int txo__nats_conn_open(struct txo__nats_conn *c, const struct txo_nats_opts *o, const char *role,
                        jsPubAckHandler ack_handler, void *ack_closure, struct txo_error *err)
{
    memset(c, 0, sizeof(*c));
    c->role = role;
    int rc = txo__nats_check_opts(o, role, err);
    if (rc < 0)
        return rc;
    c->opts = *o;
    c->opts.durable = NULL; /* the consumer keeps its own copies of these */
    c->opts.filter_subject = NULL;
    c->url = txo_strdup(o->url);
    c->stream = txo_strdup(o->stream);
    c->prefix = txo_strdup(o->subject_prefix);
    size_t plen = strlen(o->subject_prefix);
    c->stream_subject = txo_malloc(plen + 3);
    if (c->url == NULL || c->stream == NULL || c->prefix == NULL || c->stream_subject == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "nats %s: out of memory", role);
        goto out;
    }
    memcpy(c->stream_subject, o->subject_prefix, plen);
    memcpy(c->stream_subject + plen, ".>", 3);
    c->opts.url = c->url;
    c->opts.stream = c->stream;
    c->opts.subject_prefix = c->prefix;

    char why[256];
    natsStatus s = set_nats_options(c);
    if (s != NATS_OK) {
        txo__nats_describe(s, 0, why, sizeof(why));
        rc = txo_error_set(err, txo__nats_code(s, 0, TXO_ECONFIG), "nats %s: options: %s", role,
                           why);
        goto out;
    }
    s = natsConnection_Connect(&c->nc, c->nopts);
    if (s == NATS_NOT_YET_CONNECTED) {
        if (c->opts.connect_required) {
            rc = txo_error_set(err, TXO_EUNAVAILABLE,
                               "nats %s: cannot connect to %s (connect_required is set)", role,
                               c->url);
            goto out;
        }
        TXO_LOG(TXO_LOG_WARN, "nats", "server not reachable, connecting in the background",
                TXO_KV_STR("role", role), TXO_KV_STR("url", c->url));
        s = NATS_OK;
    }
    if (s != NATS_OK) {
        txo__nats_describe(s, 0, why, sizeof(why));
        rc = txo_error_set(err, txo__nats_code(s, 0, TXO_ECONFIG), "nats %s: connecting to %s: %s",
                           role, c->url, why);
        goto out;
    }

    jsOptions_Init(&c->jo);
    c->jo.Wait = c->opts.ack_timeout_ms;
    if (ack_handler != NULL) {
        c->jo.PublishAsync.AckHandler = ack_handler;
        c->jo.PublishAsync.AckHandlerClosure = ack_closure;
        c->jo.PublishAsync.MaxPending = ASYNC_MAX_PENDING;
        c->jo.PublishAsync.StallWait = c->opts.ack_timeout_ms;
    }
    s = natsConnection_JetStream(&c->js, c->nc, &c->jo);
    if (s != NATS_OK) {
        txo__nats_describe(s, 0, why, sizeof(why));
        rc = txo_error_set(err, txo__nats_code(s, 0, TXO_ECONFIG), "nats %s: JetStream context: %s",
                           role, why);
        goto out;
    }
    c->stream_ready = !c->opts.create_stream;
    TXO_LOG(TXO_LOG_INFO, "nats", "created", TXO_KV_STR("role", role), TXO_KV_STR("url", c->url),
            TXO_KV_STR("stream", c->stream), TXO_KV_STR("subjects", c->stream_subject),
            TXO_KV_BOOL("connected", txo__nats_connected(c)),
            TXO_KV_I64("ack_timeout_ms", c->opts.ack_timeout_ms));
out:
    if (rc < 0)
        txo__nats_conn_close(c);
    return rc;
}

bool txo__nats_connected(struct txo__nats_conn *c)
{
    return c->nc != NULL && natsConnection_Status(c->nc) == NATS_CONN_STATUS_CONNECTED;
}

int txo__nats_require_connected(struct txo__nats_conn *c, struct txo_error *err)
{
    if (txo__nats_connected(c))
        return 0;
    const char *state = c->nc != NULL ? conn_state_name(natsConnection_Status(c->nc)) : "none";
    return txo_error_set(err, TXO_EUNAVAILABLE,
                         "nats %s: not connected to %s (%s); reconnecting in the background",
                         c->role, c->url, state);
}

int txo__nats_ensure_stream(struct txo__nats_conn *c, struct txo_error *err)
{
    if (c->stream_ready)
        return 0;
    const char *subjects[1] = {c->stream_subject};
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = c->stream;
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    cfg.Duplicates = c->opts.duplicate_window_ms * 1000000; /* nanoseconds */
    cfg.Replicas = c->opts.replicas;

    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    const char *action = "created";
    natsStatus s = js_AddStream(&si, c->js, &cfg, NULL, &jerr);
    if (s != NATS_OK && jerr == JSStreamNameExistErr) {
        /* It exists with other settings: bring them to ours (subjects, dedupe window). */
        jsStreamInfo_Destroy(si);
        si = NULL;
        jerr = 0;
        action = "updated";
        s = js_UpdateStream(&si, c->js, &cfg, NULL, &jerr);
        if (s != NATS_OK && jerr != 0) {
            char why[256];
            txo__nats_describe(s, jerr, why, sizeof(why));
            TXO_LOG(TXO_LOG_WARN, "nats", "existing stream kept with its own settings",
                    TXO_KV_STR("role", c->role), TXO_KV_STR("stream", c->stream),
                    TXO_KV_STR("error", why));
            s = NATS_OK;
            action = "kept";
        }
    }
    jsStreamInfo_Destroy(si);
    if (s != NATS_OK) {
        char why[256];
        txo__nats_describe(s, jerr, why, sizeof(why));
        /* A JetStream error code is the server refusing the request; anything else is not
         * getting an answer (JetStream not ready, connection trouble). */
        int code = jerr != 0 ? TXO_ECONFIG : txo__nats_code(s, jerr, TXO_EUNAVAILABLE);
        if (code == TXO_ETIMEOUT)
            code = TXO_EUNAVAILABLE;
        return txo_error_set(err, code, "nats %s: creating stream %s (subjects %s): %s", c->role,
                             c->stream, c->stream_subject, why);
    }
    c->stream_ready = true;
    TXO_LOG(TXO_LOG_INFO, "nats", "stream ready", TXO_KV_STR("action", action),
            TXO_KV_STR("role", c->role), TXO_KV_STR("stream", c->stream),
            TXO_KV_STR("subjects", c->stream_subject),
            TXO_KV_I64("duplicate_window_ms", c->opts.duplicate_window_ms),
            TXO_KV_I64("replicas", c->opts.replicas));
    return 0;
}

void txo_nats_shutdown(void)
{
    natsStatus s = nats_CloseAndWait(2000);
    if (s != NATS_OK)
        TXO_LOG(TXO_LOG_WARN, "nats", "cnats did not shut down within 2 s",
                TXO_KV_STR("error", natsStatus_GetText(s)));
}

/* ---- the publisher ---- */

/* One PubAck (or publish error) received by ack_handler. */
struct ack_record {
    natsMsg *msg; /* owned until the batch thread matched it */
    int code;     /* 0 or a TXO_E* code */
    bool duplicate;
    bool no_responders; /* no stream listens on the subject */
    char text[ACK_TEXT_MAX];
};

/* sent[] sorted by address, to find a record's index. */
struct sent_ref {
    uintptr_t addr;
    size_t index;
};

struct nats_publisher {
    struct txo__nats_conn conn;

    /* The current batch, owned by the relay's thread. */
    size_t cap;
    uintptr_t *sent;       /* address of message i's natsMsg, 0 when it was not published */
    struct sent_ref *refs; /* sorted copy of the published ones */

    /* Shared with ack_handler (cnats's thread), under mu. */
    pthread_mutex_t mu;
    bool mu_ready; /* mu was initialised: destroy releases it */
    bool active;
    struct ack_record *acks;
    size_t n_acks;
};

static void ack_handler(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    (void)js;
    struct nats_publisher *p = closure;
    bool kept = false;
    pthread_mutex_lock(&p->mu);
    if (p->active && p->n_acks < p->cap) {
        struct ack_record *r = &p->acks[p->n_acks++];
        r->msg = msg;
        r->duplicate = false;
        r->no_responders = false;
        r->text[0] = '\0';
        if (pa != NULL) {
            r->code = 0;
            r->duplicate = pa->Duplicate;
        } else {
            natsStatus s = pae != NULL ? pae->Err : NATS_ERR;
            jsErrCode jerr = pae != NULL ? pae->ErrCode : 0;
            /* A message the stream refuses for its size is refused on every retry too: a
             * permanent error, dead-lettered at once with the server's text. Other JetStream
             * errors (store failed, not the leader, ...) may pass. */
            r->code = jerr == JSStreamMessageExceedsMaximumErr
                          ? TXO_EINVAL
                          : txo__nats_code(s, jerr, TXO_EPUBLISH);
            snprintf(r->text, sizeof(r->text), "%s",
                     pae != NULL && pae->ErrText != NULL ? pae->ErrText : natsStatus_GetText(s));
            if (s == NATS_NO_RESPONDERS) {
                r->no_responders = true;
                snprintf(r->text, sizeof(r->text), "no stream listens on the subject");
            }
        }
        kept = true;
    }
    pthread_mutex_unlock(&p->mu);
    if (!kept)
        natsMsg_Destroy(msg); /* a late ack of a closed batch: counted as timed out there */
}

static int grow(struct nats_publisher *p, size_t n)
{
    if (n <= p->cap)
        return 0;
    if (TXO_ARRAY_RESIZE(p->sent, n) < 0 || TXO_ARRAY_RESIZE(p->refs, n) < 0)
        return TXO_ENOMEM;
    /* acks is shared with ack_handler: only resized while no batch is active. */
    pthread_mutex_lock(&p->mu);
    int rc = TXO_ARRAY_RESIZE(p->acks, n);
    if (rc == 0)
        p->cap = n;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

static int cmp_ref(const void *a, const void *b)
{
    uintptr_t x = ((const struct sent_ref *)a)->addr;
    uintptr_t y = ((const struct sent_ref *)b)->addr;
    return (x > y) - (x < y);
}

static void fail_all(size_t n, int *results, struct txo_error *errors, const struct txo_error *why)
{
    for (size_t i = 0; i < n; i++) {
        errors[i] = *why;
        results[i] = why->code;
    }
}

/* Publishes message i asynchronously; sets results[i] to a failure or leaves it pending. */
static void publish_one(struct nats_publisher *p, const struct txo_outbox_message *m, size_t i,
                        int *results, struct txo_error *errors)
{
    struct txo__nats_conn *c = &p->conn;
    char subject[TXO__NATS_SUBJECT_MAX];
    p->sent[i] = 0;
    struct txo__wire w;
    int rc = txo__wire_encode_to("nats publisher", txo_nats_subject, c->prefix, m, subject,
                                 sizeof(subject), &w, &errors[i]);
    if (rc < 0) {
        results[i] = rc;
        return;
    }
    if (w.len > INT32_MAX) {
        txo__wire_release(&w);
        results[i] = txo_error_set(&errors[i], TXO_EINVAL, "nats publisher: envelope too large");
        return;
    }
    natsMsg *nm = NULL;
    natsStatus s = natsMsg_Create(&nm, subject, NULL, w.body, (int)w.len);
    if (s == NATS_OK)
        s = natsMsgHeader_Set(nm, TXO__NATS_MSG_ID_HEADER, m->idempotency_key);
    if (s == NATS_OK && w.binary)
        s = natsMsgHeader_Set(nm, "Content-Type", "application/json");
    for (size_t h = 0; s == NATS_OK && h < w.headers.n; h++)
        s = natsMsgHeader_Set(nm, w.headers.names[h], w.headers.values[h]);
    for (size_t h = 0; s == NATS_OK && h < w.plain.n; h++)
        s = natsMsgHeader_Set(nm, w.plain.names[h], w.plain.values[h]);
    txo__wire_release(&w);
    uintptr_t addr = (uintptr_t)nm;
    if (s == NATS_OK)
        s = js_PublishMsgAsync(c->js, &nm, NULL);
    if (s != NATS_OK) {
        /* Still ours (js_PublishMsgAsync clears the pointer only when it took it). */
        char why[256];
        txo__nats_describe(s, 0, why, sizeof(why));
        natsMsg_Destroy(nm);
        results[i] = txo_error_set(&errors[i], txo__nats_code(s, 0, TXO_EPUBLISH),
                                   "nats publisher: publish failed: %s", why);
        return;
    }
    p->sent[i] = addr;
}

/*
 * Writes out what the publishes buffered. cnats's flusher thread gives a buffer a millisecond to
 * fill before it writes it, and no ack can come before the server has the messages: a relay that
 * publishes an aggregate's events in waves would pay that millisecond once per wave. The PING
 * this sends is answered while the acks are on their way; a failure shows in the acks.
 */
static void flush_sent(struct nats_publisher *p, size_t n_sent)
{
    if (n_sent > 0)
        (void)natsConnection_FlushTimeout(p->conn.nc, p->conn.opts.ack_timeout_ms);
}

/* Waits for the acks until deadline_ms; takes back what is still pending then. */
static void wait_acks(struct nats_publisher *p, size_t n_sent, int64_t deadline_ms,
                      size_t *n_timed_out)
{
    *n_timed_out = 0;
    if (n_sent == 0)
        return;
    jsPubOptions po;
    jsPubOptions_Init(&po);
    int64_t left = deadline_ms - txo_monotonic_ms();
    po.MaxWait = left > 1 ? left : 1;
    natsStatus s = js_PublishAsyncComplete(p->conn.js, &po);
    if (s == NATS_OK)
        return;
    natsMsgList pending = {NULL, 0};
    if (js_PublishAsyncGetPendingList(&pending, p->conn.js) == NATS_OK) {
        *n_timed_out = (size_t)pending.Count;
        natsMsgList_Destroy(&pending);
    }
    /*
     * A handler that took its message off the list just before us is still counted as pending
     * until it returns: wait for it, so that no handler runs once the batch is over (and none
     * can touch a freed publisher). It only takes p->mu briefly, so this is quick.
     */
    po.MaxWait = DRAIN_WAIT_MS;
    if (js_PublishAsyncComplete(p->conn.js, &po) != NATS_OK)
        TXO_LOG(TXO_LOG_WARN, "nats", "an ack handler is still running",
                TXO_KV_I64("waited_ms", DRAIN_WAIT_MS));
}

/* Matches the ack records to their messages; everything without one timed out. */
static void resolve(struct nats_publisher *p, size_t n, int *results, struct txo_error *errors,
                    size_t *n_dup)
{
    size_t n_refs = 0;
    for (size_t i = 0; i < n; i++) {
        if (p->sent[i] != 0) {
            p->refs[n_refs].addr = p->sent[i];
            p->refs[n_refs].index = i;
            n_refs++;
        }
    }
    qsort(p->refs, n_refs, sizeof(*p->refs), cmp_ref);
    *n_dup = 0;
    for (size_t k = 0; k < p->n_acks; k++) {
        struct ack_record *r = &p->acks[k];
        struct sent_ref key = {(uintptr_t)r->msg, 0};
        struct sent_ref *hit = bsearch(&key, p->refs, n_refs, sizeof(*p->refs), cmp_ref);
        if (hit != NULL && results[hit->index] == RESULT_PENDING) {
            size_t i = hit->index;
            if (r->code == 0) {
                results[i] = 0;
                if (r->duplicate)
                    (*n_dup)++;
            } else {
                results[i] = txo_error_set(&errors[i], r->code,
                                           "nats publisher: publish refused: %s", r->text);
                if (r->no_responders && p->conn.opts.create_stream)
                    p->conn.stream_ready = false; /* re-create the stream next batch */
            }
        }
        natsMsg_Destroy(r->msg);
        r->msg = NULL;
    }
    p->n_acks = 0;
    for (size_t i = 0; i < n; i++) {
        if (results[i] == RESULT_PENDING)
            results[i] = txo_error_set(&errors[i], TXO_ETIMEOUT,
                                       "nats publisher: no publish ack within %" PRId64 " ms",
                                       p->conn.opts.ack_timeout_ms);
    }
}

static int nats_publish_batch(void *self, const struct txo_outbox_message *msgs, size_t n,
                              int *results, struct txo_error *errors)
{
    struct nats_publisher *p = self;
    struct txo_error why;
    txo_error_init(&why);
    if (n == 0)
        return 0;
    int rc = txo__nats_require_connected(&p->conn, &why);
    if (rc == 0)
        rc = txo__nats_ensure_stream(&p->conn, &why);
    if (rc == 0 && grow(p, n) < 0)
        rc = txo_error_set(&why, TXO_ENOMEM, "nats publisher: out of memory for a batch of %zu", n);
    if (rc < 0) {
        fail_all(n, results, errors, &why);
        return 0;
    }

    int64_t t0 = txo_monotonic_ms();
    pthread_mutex_lock(&p->mu);
    p->active = true;
    p->n_acks = 0;
    pthread_mutex_unlock(&p->mu);

    size_t n_sent = 0;
    for (size_t i = 0; i < n; i++) {
        results[i] = RESULT_PENDING;
        publish_one(p, &msgs[i], i, results, errors);
        if (p->sent[i] != 0)
            n_sent++;
    }
    size_t n_timed_out = 0;
    flush_sent(p, n_sent);
    wait_acks(p, n_sent, t0 + p->conn.opts.ack_timeout_ms, &n_timed_out);

    pthread_mutex_lock(&p->mu);
    p->active = false;
    pthread_mutex_unlock(&p->mu);

    size_t n_dup = 0;
    resolve(p, n, results, errors, &n_dup);
    size_t n_ok = 0;
    for (size_t i = 0; i < n; i++)
        n_ok += results[i] == 0;
    TXO_LOG(TXO_LOG_DEBUG, "nats", "batch published", TXO_KV_U64("size", n),
            TXO_KV_U64("acked", n_ok), TXO_KV_U64("duplicates", n_dup),
            TXO_KV_U64("timed_out", n_timed_out),
            TXO_KV_I64("elapsed_ms", txo_monotonic_ms() - t0));
    return 0;
}

static void nats_publisher_destroy(void *self)
{
    struct nats_publisher *p = self;
    /* Closing the connection first: no ack handler runs after this. */
    txo__nats_conn_close(&p->conn);
    for (size_t k = 0; k < p->n_acks; k++)
        natsMsg_Destroy(p->acks[k].msg);
    if (p->mu_ready)
        pthread_mutex_destroy(&p->mu);
    txo_free(p->sent);
    txo_free(p->refs);
    txo_free(p->acks);
    txo_free(p);
}

static const struct txo_publisher_ops nats_ops = {
    .name = "nats",
    .publish_batch = nats_publish_batch,
    .destroy = nats_publisher_destroy,
    .flags = TXO_PUBLISHER_QUICK,
};

static int nats_publisher_init(void *self, const struct txo__transport_args *a,
                               struct txo_error *err)
{
    struct nats_publisher *p = self;
    if (pthread_mutex_init(&p->mu, NULL) != 0)
        return txo_error_set(err, TXO_ENOMEM, "nats publisher: cannot create a mutex");
    p->mu_ready = true;
    return txo__nats_conn_open(&p->conn, a->opts, "publisher", ack_handler, p, err);
}

int txo_publisher_nats_new(const struct txo_nats_opts *o, struct txo_publisher **out,
                           struct txo_error *err)
{
    struct txo__transport_args a = {.opts = o};
    return txo__publisher_build(&nats_ops, sizeof(struct nats_publisher), nats_publisher_init, &a,
                                out, err);
}
