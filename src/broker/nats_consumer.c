#include "core/common.h"

/*
 * The NATS JetStream durable pull consumer (txo/nats.h) behind a txo_consumer handle.
 *
 * One poll, nats_poll():
 *   1. Fail fast with TXO_EUNAVAILABLE when the connection is down (cnats reconnects in the
 *      background); create the stream (opts.create_stream) and the pull subscription on the
 *      durable the first time the server is reachable.
 *   2. natsSubscription_Fetch up to max_msgs within timeout_ms; a timeout with nothing is an
 *      empty poll, not an error. A pull request to a durable that no longer exists (deleted,
 *      or lost with the server's store) also just times out, so after CHECK_IDLE_MS of empty
 *      polls one asks the server for the durable: gone, the poll fails with
 *      TXO_EUNAVAILABLE and the next one subscribes again, which creates it anew (deliver
 *      all: what it had acknowledged comes again and the inbox drops it, nothing is lost).
 *   3. The fetch goes to the handler (txo__handler_run: a batch handler in one call, a
 *      per-message handler once per message); then each message is settled by its verdict:
 *        0          ack, confirmed by the server: sent with a reply subject of its own, the
 *                   acks of a fetch all at once, then their confirmations awaited together
 *                   (up to ack_timeout_ms), so a fetch costs one round trip, not one per
 *                   message; a message whose confirmation does not come is redelivered
 *                   after ack_wait_ms (and the inbox drops it);
 *        transient  NAK with nak_delay_ms: redelivered after the delay (delivery + 1);
 *        permanent  TERM: never redelivered; logged at error level with the reason.
 *      The ack comes only after the handler's effect was committed, so a crash in between
 *      means a redelivery (at least once), never a loss. If the connection drops while the
 *      fetch is settled, the messages not yet settled are left alone: the server redelivers
 *      them after ack_wait_ms.
 *
 * The durable survives the consumer: free uses natsSubscription_Destroy, never Unsubscribe
 * (which deletes a durable that the library created).
 *
 * Ownership: the consumer owns its connection, subscription and option copies; the handler
 * and its arg are borrowed. Thread-safety: one polling thread at a time.
 */

#include "broker/consumer_internal.h"
#include "broker/nats_internal.h"
#include "broker/transport.h"

#define FETCH_MAX       10000 /* messages per poll, whatever the caller asks */
#define CHECK_IDLE_MS   5000  /* empty polls for this long: is the durable still there? */
#define ACK_SUBJECT_MAX 96    /* "<inbox>.<round>.<i>": a cnats inbox is 29 bytes */

struct nats_consumer {
    struct txo__nats_conn conn;
    char *durable;
    char *filter; /* opts.filter_subject or "<prefix>.>" */
    natsSubscription *sub;
    int64_t checked_ms; /* when the durable was last known to exist (monotonic) */
    struct txo_handler h;
    /* Confirmations of acks come to "<ack_inbox>.<round>.<i>": round numbers the fetch, so a
     * late confirmation of an earlier one is told apart; i is the message in the fetch. */
    natsInbox *ack_inbox;
    natsSubscription *ack_sub; /* on "<ack_inbox>.>" */
    uint64_t ack_round;
};

/* Creates (or binds to) the durable pull consumer. */
static int subscribe(struct nats_consumer *nc, struct txo_error *err)
{
    struct txo__nats_conn *c = &nc->conn;
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = c->stream;
    so.Config.Durable = nc->durable;
    so.Config.AckPolicy = js_AckExplicit;
    so.Config.AckWait = c->opts.ack_wait_ms * 1000000; /* nanoseconds */
    so.Config.MaxDeliver = c->opts.max_deliver;
    so.Config.FilterSubject = nc->filter;
    jsErrCode jerr = 0;
    natsStatus s = js_PullSubscribe(&nc->sub, c->js, nc->filter, nc->durable, &c->jo, &so, &jerr);
    if (s != NATS_OK) {
        nc->sub = NULL;
        char why[256];
        txo__nats_describe(s, jerr, why, sizeof(why));
        int code = jerr != 0 ? TXO_ECONFIG : txo__nats_code(s, jerr, TXO_EUNAVAILABLE);
        if (code == TXO_ETIMEOUT)
            code = TXO_EUNAVAILABLE;
        if (jerr == JSStreamNotFoundErr) {
            code = TXO_EUNAVAILABLE; /* not created yet (create_stream off): wait for it */
            c->stream_ready = !c->opts.create_stream;
        }
        return txo_error_set(err, code, "nats consumer: subscribing durable %s on %s (%s): %s",
                             nc->durable, c->stream, nc->filter, why);
    }
    nc->checked_ms = txo_monotonic_ms();
    TXO_LOG(TXO_LOG_INFO, "nats", "consumer subscribed", TXO_KV_STR("stream", c->stream),
            TXO_KV_STR("durable", nc->durable), TXO_KV_STR("filter", nc->filter));
    return 0;
}

/* Drops the subscription (keeping the durable) so the next poll subscribes again. */
static void drop_subscription(struct nats_consumer *nc)
{
    natsSubscription_Destroy(nc->sub);
    nc->sub = NULL;
}

/*
 * After CHECK_IDLE_MS of empty polls: asks the server for the durable. Returns 0 (it exists, or
 * the question could not be answered now), or TXO_EUNAVAILABLE with err set and the
 * subscription dropped when the server has no such durable.
 */
static int check_durable(struct nats_consumer *nc, struct txo_error *err)
{
    int64_t now = txo_monotonic_ms();
    if (now - nc->checked_ms < CHECK_IDLE_MS)
        return 0;
    nc->checked_ms = now;
    jsConsumerInfo *ci = NULL;
    jsErrCode jerr = 0;
    natsStatus s = natsSubscription_GetConsumerInfo(&ci, nc->sub, NULL, &jerr);
    jsConsumerInfo_Destroy(ci);
    if (s != NATS_NOT_FOUND && jerr != JSConsumerNotFoundErr)
        return 0;
    drop_subscription(nc);
    TXO_LOG(TXO_LOG_WARN, "nats", "durable consumer gone from the server, subscribing again",
            TXO_KV_STR("stream", nc->conn.stream), TXO_KV_STR("durable", nc->durable));
    return txo_error_set(err, TXO_EUNAVAILABLE,
                         "nats consumer: durable %s on %s is gone from the server (deleted?); "
                         "the next poll creates it again",
                         nc->durable, nc->conn.stream);
}

/* txo_inbound_message.header for a NATS message. */
static const char *nats_header(const struct txo_inbound_message *in, const char *name)
{
    const char *v = NULL;
    return natsMsgHeader_Get((natsMsg *)in->transport, name, &v) == NATS_OK ? v : NULL;
}

/* Delivery count and id of a fetched message. */
static void describe_msg(natsMsg *m, struct txo_inbound_message *in)
{
    memset(in, 0, sizeof(*in));
    in->header = nats_header;
    in->transport = m;
    in->subject = natsMsg_GetSubject(m);
    in->data = natsMsg_GetData(m);
    int len = natsMsg_GetDataLength(m);
    in->len = len > 0 ? (size_t)len : 0;
    if (in->data == NULL)
        in->data = "";
    const char *id = NULL;
    if (natsMsgHeader_Get(m, TXO__NATS_MSG_ID_HEADER, &id) == NATS_OK)
        in->msg_id = id;
    in->delivery = 1;
    jsMsgMetaData *meta = NULL;
    if (natsMsg_GetMetaData(&meta, m) == NATS_OK && meta->NumDelivered > 0)
        in->delivery = meta->NumDelivered;
    jsMsgMetaData_Destroy(meta);
}

/* Logs and returns TXO_EUNAVAILABLE for a settlement the server did not confirm: the message
 * comes back after ack_wait_ms. */
static int not_settled(const char *verb, const char *id, const char *why, struct txo_error *err)
{
    TXO_LOG(TXO_LOG_WARN, "nats", "settlement not confirmed, the message will be redelivered",
            TXO_KV_STR("action", verb), TXO_KV_STR("message_id", id), TXO_KV_STR("error", why));
    return txo_error_set(err, TXO_EUNAVAILABLE, "nats consumer: %s of message %s not confirmed: %s",
                         verb, id, why);
}

/* The reply subject of the confirmation of message i of this round's fetch. */
static void ack_reply(const struct nats_consumer *nc, size_t i, char *out, size_t cap)
{
    snprintf(out, cap, "%s.%" PRIu64 ".%zu", nc->ack_inbox, nc->ack_round, i);
}

/*
 * Settles m (described by in) by its handler's verdict rc (reason in herr): sends the ack (its
 * confirmation to reply, awaited by await_acks()), the NAK or the TERM. Returns 0, or
 * TXO_EUNAVAILABLE with err set when it could not be sent (the message then comes back after
 * ack_wait_ms).
 */
static int settle(struct nats_consumer *nc, natsMsg *m, const struct txo_inbound_message *in,
                  const char *reply, int rc, const struct txo_error *herr, struct txo_error *err)
{
    struct txo__nats_conn *c = &nc->conn;
    const char *id = in->msg_id != NULL ? in->msg_id : "";
    const char *reason = herr->msg[0] != '\0' ? herr->msg : txo_strerror(rc);

    jsErrCode jerr = 0;
    natsStatus s;
    const char *verb;
    if (rc == 0) {
        /* The ack asks for a confirmation to reply (await_acks() collects it). */
        verb = "ack";
        s = natsConnection_PublishRequestString(c->nc, natsMsg_GetReply(m), reply, "+ACK");
        TXO_LOG(TXO_LOG_DEBUG, "nats", "message handled", TXO_KV_STR("message_id", id),
                TXO_KV_STR("subject", in->subject != NULL ? in->subject : ""),
                TXO_KV_U64("delivery", in->delivery));
    } else if (txo_err_is_transient(rc)) {
        verb = "nak";
        s = natsMsg_NakWithDelay(m, c->opts.nak_delay_ms, &c->jo);
        TXO_LOG(TXO_LOG_WARN, "nats", "handler failed, message redelivered later",
                TXO_KV_STR("message_id", id),
                TXO_KV_STR("subject", in->subject != NULL ? in->subject : ""),
                TXO_KV_U64("delivery", in->delivery), TXO_KV_I64("delay_ms", c->opts.nak_delay_ms),
                TXO_KV_STR("error", txo_err_name(rc)), TXO_KV_STR("reason", reason));
    } else {
        verb = "term";
        s = natsMsg_Term(m, &c->jo);
        TXO_LOG(TXO_LOG_ERROR, "nats",
                "handler rejected the message, terminated (never redelivered)",
                TXO_KV_STR("message_id", id),
                TXO_KV_STR("subject", in->subject != NULL ? in->subject : ""),
                TXO_KV_U64("delivery", in->delivery), TXO_KV_STR("error", txo_err_name(rc)),
                TXO_KV_STR("reason", reason));
    }
    if (s == NATS_OK)
        return 0;
    char why[256];
    txo__nats_describe(s, jerr, why, sizeof(why));
    return not_settled(verb, id, why, err);
}

/*
 * Waits up to ack_timeout_ms for the confirmations of this round's acks (awaiting[i]: sent,
 * not yet confirmed); clears awaiting[i] for each that comes. Confirmations of earlier rounds
 * are dropped.
 */
static void await_acks(struct nats_consumer *nc, bool *awaiting, size_t n, size_t left)
{
    char prefix[ACK_SUBJECT_MAX];
    int plen = snprintf(prefix, sizeof(prefix), "%s.%" PRIu64 ".", nc->ack_inbox, nc->ack_round);
    int64_t deadline = txo_monotonic_ms() + nc->conn.jo.Wait;
    while (left > 0) {
        int64_t wait = deadline - txo_monotonic_ms();
        natsMsg *r = NULL;
        if (wait <= 0 || natsSubscription_NextMsg(&r, nc->ack_sub, wait) != NATS_OK)
            break;
        const char *subj = natsMsg_GetSubject(r);
        char *end = NULL;
        if (subj != NULL && strncmp(subj, prefix, (size_t)plen) == 0) {
            unsigned long long i = strtoull(subj + plen, &end, 10);
            if (end != subj + plen && *end == '\0' && i < n && awaiting[i]) {
                awaiting[i] = false;
                left--;
            }
        }
        natsMsg_Destroy(r);
    }
}

/* Runs the handler on msgs[0..n), then settles each by its verdict. Returns as nats_poll does;
 * *done gets the messages handed to the handler. */
static int handle_all(struct nats_consumer *nc, natsMsg **msgs, size_t n, size_t *done,
                      struct txo_error *err)
{
    struct txo__handler_batch b;
    bool *awaiting = NULL;
    int rc = 0;
    *done = 0;
    if (!txo__handler_batch_alloc(&b, n)) {
        rc = txo_error_set(err, TXO_ENOMEM, "nats consumer: batch of %zu: out of memory", n);
        goto out; /* unsettled: redelivered after ack_wait */
    }
    for (size_t i = 0; i < n; i++)
        describe_msg(msgs[i], &b.in[i]);
    (void)txo__handler_run(&nc->h, b.in, n, b.results, b.errors);
    *done = n;
    /* Settle in order, then await the acks' confirmations together. */
    awaiting = txo_calloc(n, sizeof(*awaiting));
    if (awaiting == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "nats consumer: batch of %zu: out of memory", n);
        goto out; /* unsettled: redelivered after ack_wait */
    }
    nc->ack_round++;
    size_t sent = 0;
    for (size_t i = 0; i < n; i++) {
        if (!txo__nats_connected(&nc->conn)) {
            if (rc == 0)
                rc = txo__nats_require_connected(&nc->conn, err);
            break; /* the rest is redelivered after ack_wait */
        }
        char reply[ACK_SUBJECT_MAX];
        ack_reply(nc, i, reply, sizeof(reply));
        struct txo_error e;
        txo_error_init(&e);
        int arc = settle(nc, msgs[i], &b.in[i], reply, b.results[i], &b.errors[i], &e);
        txo__settle_keep_first(arc, &e, &rc, err);
        if (arc == 0 && b.results[i] == 0) {
            awaiting[i] = true;
            sent++;
        }
    }
    await_acks(nc, awaiting, n, sent);
    for (size_t i = 0; i < n; i++) {
        if (!awaiting[i])
            continue;
        struct txo_error e;
        txo_error_init(&e);
        int arc = not_settled("ack", b.in[i].msg_id != NULL ? b.in[i].msg_id : "",
                              "no confirmation within ack_timeout_ms", &e);
        txo__settle_keep_first(arc, &e, &rc, err);
    }
out:
    txo_free(awaiting);
    txo__handler_batch_release(&b);
    return rc;
}

static int nats_poll(void *self, size_t max_msgs, int64_t timeout_ms, size_t *handled,
                     struct txo_error *err)
{
    struct nats_consumer *nc = self;
    struct txo__nats_conn *c = &nc->conn;
    natsMsgList list = {NULL, 0};
    int rc = txo__nats_require_connected(c, err);
    if (rc == 0)
        rc = txo__nats_ensure_stream(c, err);
    if (rc == 0 && nc->sub == NULL)
        rc = subscribe(nc, err);
    if (rc < 0)
        return rc;

    int batch = max_msgs > FETCH_MAX ? FETCH_MAX : (int)max_msgs;
    jsErrCode jerr = 0;
    natsStatus s = natsSubscription_Fetch(&list, nc->sub, batch, timeout_ms, &jerr);
    if (s != NATS_OK && list.Count == 0) {
        if (s == NATS_TIMEOUT)
            return check_durable(nc, err); /* nothing within the wait */
        char why[256];
        txo__nats_describe(s, jerr, why, sizeof(why));
        if (s == NATS_INVALID_SUBSCRIPTION || s == NATS_CONNECTION_CLOSED ||
            jerr == JSConsumerNotFoundErr || jerr == JSStreamNotFoundErr) {
            drop_subscription(nc);
            if (jerr == JSStreamNotFoundErr)
                c->stream_ready = !c->opts.create_stream;
        }
        return txo_error_set(err, txo__nats_code(s, jerr, TXO_EUNAVAILABLE),
                             "nats consumer: fetching from durable %s: %s", nc->durable, why);
    }

    size_t done = 0;
    nc->checked_ms = txo_monotonic_ms(); /* it delivers: it exists */
    if (list.Count > 0)
        rc = handle_all(nc, list.Msgs, (size_t)list.Count, &done, err);
    natsMsgList_Destroy(&list);
    *handled = done;
    return rc;
}

static void nats_consumer_destroy(void *self)
{
    struct nats_consumer *nc = self;
    /* Destroy, never Unsubscribe: Unsubscribe would delete the durable on the server. */
    natsSubscription_Destroy(nc->sub);
    natsSubscription_Destroy(nc->ack_sub);
    natsInbox_Destroy(nc->ack_inbox);
    txo__nats_conn_close(&nc->conn);
    txo_free(nc->durable);
    txo_free(nc->filter);
    txo_free(nc);
}

static const struct txo_consumer_ops nats_consumer_ops = {
    .name = "nats",
    .poll = nats_poll,
    .destroy = nats_consumer_destroy,
};

static int nats_consumer_init(void *self, const struct txo__transport_args *a,
                              struct txo_error *err)
{
    struct nats_consumer *nc = self;
    const struct txo_nats_opts *o = a->opts;
    nc->h = *a->h;
    nc->durable = txo_strdup(o->durable);
    nc->filter = o->filter_subject != NULL ? txo_strdup(o->filter_subject)
                                           : txo__suffixed(o->subject_prefix, ".>");
    if (nc->durable == NULL || nc->filter == NULL)
        return txo_error_set(err, TXO_ENOMEM, "nats consumer: out of memory");
    int rc = txo__nats_conn_open(&nc->conn, o, "consumer", NULL, NULL, err);
    if (rc < 0)
        return rc;
    /* The acks' confirmations: one subscription for the consumer's life (cnats renews it
     * after a reconnect). */
    char subject[ACK_SUBJECT_MAX];
    natsStatus s = natsInbox_Create(&nc->ack_inbox);
    if (s == NATS_OK) {
        snprintf(subject, sizeof(subject), "%s.>", nc->ack_inbox);
        s = natsConnection_SubscribeSync(&nc->ack_sub, nc->conn.nc, subject);
    }
    if (s != NATS_OK)
        return txo_error_set(err, s == NATS_NO_MEMORY ? TXO_ENOMEM : TXO_EUNAVAILABLE,
                             "nats consumer: subscribing to the acks' confirmations: %s",
                             natsStatus_GetText(s));
    return 0;
}

int txo_consumer_nats_new(const struct txo_nats_opts *o, const struct txo_handler *h,
                          struct txo_consumer **out, struct txo_error *err)
{
    int rc = txo__nats_check_opts(o, "consumer", err);
    if (rc < 0)
        return rc;
    struct txo__transport_args a = {.opts = o, .h = h};
    return txo__consumer_build(&nats_consumer_ops, sizeof(struct nats_consumer), nats_consumer_init,
                               &a, out, err);
}
