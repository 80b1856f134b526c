#include "core/common.h"

/*
 * The NATS JetStream history reader (txo/history.h; txo_history_nats_new() in txo/nats.h): what
 * the stream holds of the relay's subjects, read without consuming anything.
 *
 * One read, nats_read():
 *   1. Stream info (js_GetStreamInfo). Its LastSeq, the last message stored when the read
 *      starts, is where the read ends at the latest. FirstSeq > 1 means the stream dropped its
 *      oldest messages (max age, max messages or bytes, a purge): it holds from FirstTime on.
 *      Messages deleted one by one (interior deletes) do not move FirstSeq: they are what the
 *      auditor reports as missing.
 *   2. An ephemeral pull consumer on "<prefix>.>": no durable name, AckNone, headers only
 *      (the idempotency key is the Nats-Msg-Id header, whatever the envelope format: the
 *      bodies are not needed), delivering from from_us on (DeliverByStartTime). Nothing is
 *      acknowledged; durable consumers and their positions are not touched. A pull consumer
 *      rather than an ordered (push) one: before its first fetch, its info counts exactly the
 *      messages it will deliver, so a read knows where it ends without waiting on a timeout
 *      (and cnats 3.4 slows an ordered consumer to a crawl once its info was asked for).
 *   3. Fetches of at most FETCH_MAX messages, never more than are still to come; each message
 *      goes to fn with its header, until that many came, the message at LastSeq came, or one
 *      is past to_us.
 *   4. Unsubscribe: the server deletes the consumer at once (and after INACTIVE_MS of silence
 *      if the reader died first).
 * The stream is never created or updated (create_stream is ignored): a missing stream is
 * TXO_ENOTFOUND.
 *
 * Ownership: the reader owns its connection. Thread-safety: one thread at a time; cnats runs
 * its own threads, which touch nothing of ours.
 */

#include "broker/nats_internal.h"
#include "broker/transport.h"

#define POSITION_MAX    600
#define FETCH_MAX       1000           /* messages per pull request */
#define INACTIVE_MS     INT64_C(60000) /* the server drops the consumer of a reader that died */
#define PENDING_WAIT_MS 2000           /* how long a count of 0 is asked again (still_pending) */

struct nats_history {
    struct txo__nats_conn conn;
    char *filter; /* "<prefix>.>" */
};

static int64_t ns_to_us(int64_t ns)
{
    return ns / 1000;
}

/* The stream's state; TXO_ENOTFOUND when it does not exist. */
static int stream_state(struct nats_history *nh, jsStreamInfo **si, struct txo_error *err)
{
    struct txo__nats_conn *c = &nh->conn;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(si, c->js, c->stream, &c->jo, &jerr);
    if (s == NATS_OK)
        return 0;
    *si = NULL;
    char why[256];
    txo__nats_describe(s, jerr, why, sizeof(why));
    if (jerr == JSStreamNotFoundErr || s == NATS_NOT_FOUND)
        return txo_error_set(err, TXO_ENOTFOUND, "nats history: stream %s does not exist",
                             c->stream);
    int code = txo__nats_code(s, jerr, TXO_EUNAVAILABLE);
    return txo_error_set(err, code == TXO_EINVAL ? TXO_EUNAVAILABLE : code,
                         "nats history: stream %s info: %s", c->stream, why);
}

/* The stored time of message seq, or -1 when there is none (deleted) or it cannot be read. */
static int64_t msg_time_us(struct nats_history *nh, uint64_t seq)
{
    natsMsg *m = NULL;
    jsErrCode jerr = 0;
    if (js_GetMsg(&m, nh->conn.js, nh->conn.stream, seq, &nh->conn.jo, &jerr) != NATS_OK)
        return -1;
    int64_t t = ns_to_us(natsMsg_GetTime(m));
    natsMsg_Destroy(m);
    return t;
}

/*
 * The first sequence of the stream stored at or after from_us, by bisection over [first, last]
 * (one get per step: about 20 for a million messages). A start by time (DeliverByStartTime)
 * would be one request, but nats-server 2.9 answered it with a consumer that delivered nothing
 * now and then, although the stream held messages after the time. A deleted sequence is read
 * as the next one that is there.
 */
static uint64_t first_seq_from(struct nats_history *nh, uint64_t first, uint64_t last,
                               int64_t from_us)
{
    uint64_t lo = first, hi = last; /* the answer is in [lo, hi]; last is stored after from_us */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2, probe = mid;
        int64_t t = -1;
        while (probe < hi && (t = msg_time_us(nh, probe)) < 0)
            probe++;
        if (t < 0 || t >= from_us)
            hi = mid; /* mid..probe-1 are gone or later: the answer is at or before mid's */
        else
            lo = probe + 1;
    }
    return lo;
}

/* The reading consumer from sequence start on, and how many messages it has to deliver. */
static int subscribe(struct nats_history *nh, uint64_t start, natsSubscription **sub,
                     uint64_t *pending, struct txo_error *err)
{
    struct txo__nats_conn *c = &nh->conn;
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = c->stream;
    so.Config.AckPolicy = js_AckNone;
    so.Config.DeliverPolicy = js_DeliverByStartSequence;
    so.Config.OptStartSeq = start;
    so.Config.HeadersOnly = true;
    so.Config.FilterSubject = nh->filter;
    so.Config.InactiveThreshold = INACTIVE_MS * 1000000; /* nanoseconds */
    jsErrCode jerr = 0;
    natsStatus s = js_PullSubscribe(sub, c->js, nh->filter, NULL, &c->jo, &so, &jerr);
    jsConsumerInfo *ci = NULL;
    if (s == NATS_OK)
        s = natsSubscription_GetConsumerInfo(&ci, *sub, &c->jo, &jerr);
    if (s != NATS_OK) {
        char why[256];
        txo__nats_describe(s, jerr, why, sizeof(why));
        if (*sub != NULL) {
            (void)natsSubscription_Unsubscribe(*sub);
            natsSubscription_Destroy(*sub);
            *sub = NULL;
        }
        int code = jerr != 0 ? TXO_ECONFIG : txo__nats_code(s, jerr, TXO_EUNAVAILABLE);
        return txo_error_set(err, code, "nats history: a consumer on %s (%s): %s", c->stream,
                             nh->filter, why);
    }
    /* A pull consumer has delivered nothing yet: this is every message from start on, once
     * the server has counted them (deliver() asks again when it falls short). */
    *pending = ci->NumPending;
    jsConsumerInfo_Destroy(ci);
    return 0;
}

/* One message to fn; *last when it is the last one to read; *seen its stream sequence. */
static int deliver_one(struct nats_history *nh, natsMsg *m, uint64_t last_seq, int64_t to_us,
                       txo_history_fn fn, void *arg, struct txo_history_span *span, bool *last,
                       uint64_t *seen)
{
    jsMsgMetaData *meta = NULL;
    if (natsMsg_GetMetaData(&meta, m) != NATS_OK)
        return 0; /* not a stream message */
    uint64_t seq = meta->Sequence.Stream;
    *seen = seq;
    int64_t t = ns_to_us(meta->Timestamp);
    *last = seq >= last_seq || t > to_us;
    jsMsgMetaData_Destroy(meta);
    if (t > to_us)
        return 0;
    const char *key = NULL;
    if (natsMsgHeader_Get(m, TXO__NATS_MSG_ID_HEADER, &key) != NATS_OK)
        key = NULL;
    char position[POSITION_MAX];
    snprintf(position, sizeof(position), "stream %s seq %" PRIu64 ", subject %s", nh->conn.stream,
             seq, natsMsg_GetSubject(m));
    struct txo_history_msg hm = {.key = key, .position = position, .time_us = t};
    span->messages++;
    return fn(arg, &hm);
}

/*
 * Messages the consumer has not delivered yet. Right after a consumer is created, nats-server
 * (2.9) may answer a count short of what the stream holds from the start time on, 0 included
 * (seen under load: 0 of 4, 3 of 9). When the caller knows more must come (the stream's last
 * message was not delivered yet), a 0 is asked again, every 10 ms for up to PENDING_WAIT_MS.
 * 0 when it cannot tell.
 */
static uint64_t still_pending(struct nats_history *nh, natsSubscription *sub, bool more_due)
{
    int64_t deadline = txo_monotonic_ms() + PENDING_WAIT_MS;
    for (;;) {
        jsConsumerInfo *ci = NULL;
        jsErrCode jerr = 0;
        if (natsSubscription_GetConsumerInfo(&ci, sub, &nh->conn.jo, &jerr) != NATS_OK)
            return 0;
        uint64_t n = ci->NumPending;
        jsConsumerInfo_Destroy(ci);
        if (n > 0 || !more_due || txo_monotonic_ms() > deadline)
            return n;
        txo_sleep_ms(10);
    }
}

/* Fetches the pending messages in batches, each to fn, up to last_seq or past to_us. */
static int deliver(struct nats_history *nh, natsSubscription *sub, uint64_t pending,
                   uint64_t last_seq, int64_t to_us, txo_history_fn fn, void *arg,
                   struct txo_history_span *span, struct txo_error *err)
{
    struct txo__nats_conn *c = &nh->conn;
    int rc = 0;
    bool last = false;
    uint64_t seen = 0;
    for (uint64_t got = 0; rc == 0 && !last;) {
        if (got >= pending) {
            /* The count may have been short: the stream's last message is still due. */
            uint64_t more = still_pending(nh, sub, seen < last_seq);
            if (more == 0)
                break;
            pending = got + more;
        }
        /* Never more than it has: a fetch of more would wait for its timeout. */
        int want = pending - got < FETCH_MAX ? (int)(pending - got) : FETCH_MAX;
        natsMsgList list = {NULL, 0};
        jsErrCode jerr = 0;
        natsStatus s = natsSubscription_Fetch(&list, sub, want, c->opts.ack_timeout_ms, &jerr);
        if (s != NATS_OK) {
            char why[256];
            txo__nats_describe(s, jerr, why, sizeof(why));
            return txo_error_set(err, txo__nats_code(s, jerr, TXO_EUNAVAILABLE),
                                 "nats history: reading %s after %" PRIu64 " of %" PRIu64
                                 " message(s): %s",
                                 c->stream, got, pending, why);
        }
        for (int i = 0; i < list.Count && rc == 0 && !last; i++)
            rc = deliver_one(nh, list.Msgs[i], last_seq, to_us, fn, arg, span, &last, &seen);
        got += (uint64_t)list.Count;
        natsMsgList_Destroy(&list);
    }
    return rc;
}

static int nats_read(void *self, int64_t from_us, int64_t to_us, txo_history_fn fn, void *arg,
                     struct txo_history_span *span, struct txo_error *err)
{
    struct nats_history *nh = self;
    struct txo__nats_conn *c = &nh->conn;
    int rc = txo__nats_require_connected(c, err);
    if (rc != 0)
        return rc;
    jsStreamInfo *si = NULL;
    rc = stream_state(nh, &si, err);
    if (rc != 0)
        return rc;
    jsStreamState st = si->State;
    jsStreamInfo_Destroy(si);

    char where[300];
    snprintf(where, sizeof(where), "stream %s, first seq %" PRIu64, c->stream, st.FirstSeq);
    if (st.FirstSeq > 1)
        txo_history_span_hold(span, where,
                              st.Msgs > 0 ? ns_to_us(st.FirstTime) : ns_to_us(st.LastTime) + 1);
    span->sources = 1;
    if (st.Msgs == 0 || ns_to_us(st.LastTime) < from_us)
        return 0;

    natsSubscription *sub = NULL;
    uint64_t pending = 0;
    uint64_t start =
        from_us > 0 ? first_seq_from(nh, st.FirstSeq, st.LastSeq, from_us) : st.FirstSeq;
    rc = subscribe(nh, start, &sub, &pending, err);
    if (rc != 0)
        return rc;
    rc = deliver(nh, sub, pending, st.LastSeq, to_us, fn, arg, span, err);
    /* Unsubscribe deletes the consumer now rather than after its inactivity threshold. */
    (void)natsSubscription_Unsubscribe(sub);
    natsSubscription_Destroy(sub);
    TXO_LOG(TXO_LOG_DEBUG, "nats", "history read", TXO_KV_STR("stream", c->stream),
            TXO_KV_STR("filter", nh->filter), TXO_KV_U64("messages", span->messages),
            TXO_KV_I64("rc", rc));
    return rc;
}

static void nats_history_destroy(void *self)
{
    struct nats_history *nh = self;
    txo__nats_conn_close(&nh->conn);
    txo_free(nh->filter);
    txo_free(nh);
}

static const struct txo_history_ops nats_history_ops = {
    .name = "nats",
    .read = nats_read,
    .destroy = nats_history_destroy,
};

static int nats_history_init(void *self, const struct txo__transport_args *a, struct txo_error *err)
{
    struct nats_history *nh = self;
    const struct txo_nats_opts *o = a->opts;
    struct txo_nats_opts ro;
    if (o != NULL) {
        ro = *o;
        ro.create_stream = false; /* a reader changes nothing at the broker */
        ro.connect_required = true;
    }
    int rc = txo__nats_conn_open(&nh->conn, o != NULL ? &ro : NULL, "history", NULL, NULL, err);
    if (rc < 0)
        return rc;
    nh->filter = txo_strdup(nh->conn.stream_subject);
    if (nh->filter == NULL)
        return txo_error_set(err, TXO_ENOMEM, "nats history: out of memory");
    return 0;
}

int txo_history_nats_new(const struct txo_nats_opts *o, struct txo_history **out,
                         struct txo_error *err)
{
    struct txo__transport_args a = {.opts = o};
    return txo__history_build(&nats_history_ops, sizeof(struct nats_history), nats_history_init, &a,
                              out, err);
}
