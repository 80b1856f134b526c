#include "core/common.h"

/*
 * The Kafka consumer (txo/kafka.h) behind a txo_consumer handle: a member of a consumer group
 * that commits an offset only once every record before it is settled.
 *
 * Kafka's unit of acknowledgement is the committed offset of a partition, "everything before
 * this is done", not a single record. So records of one partition are settled strictly in
 * order, and one poll, kafka_poll():
 *   1. Resumes the partitions whose retry delay is over (see 3).
 *   2. Takes records with rd_kafka_consumer_poll(), one at a time (rebalances are served in
 *      there, between two records), waiting up to timeout_ms for the first and not at all for
 *      the next ones, max_msgs at most.
 *   3. Settles each record after its handler returned (txo__handler_run with one record: a
 *      batch handler gets batches of one, since a record's verdict decides whether the
 *      records behind it in its partition may be handled at all). Done (0, permanent, or a
 *      type the consumer does not take): rd_kafka_offset_store(offset + 1), committed at the
 *      end of the poll. Transient: the partition is paused and sought back to the record, and
 *      a retry mark {partition, offset, resume time} is kept. Until the record comes back,
 *      records of that partition that were already fetched are dropped unhandled (they are
 *      fetched again after it), so nothing past the failed record is ever stored or committed.
 *   4. Commits the stored offsets synchronously (rd_kafka_commit with async = 0).
 * A crash anywhere before 4 finishes leaves handled records uncommitted: they are delivered
 * again (at least once) and the inbox drops them.
 *
 * Rebalances: on revoke the stored offsets are committed first, then the partitions are given
 * up and their retry marks dropped (the next owner starts at the committed offset, which is
 * before any failed record). Eager and cooperative assignors are both handled.
 *
 * Dead letters: a record the handler rejected is produced to dead_letter_topic (value, key and
 * headers copied, plus txo-dead-letter-reason) by a producer made on first use, and flushed,
 * before its offset is stored. A copy that fails is treated as a transient failure.
 *
 * Records' data and header values are not NUL-terminated in librdkafka: the consumer copies
 * them into a per-consumer scratch buffer for the handler (struct view).
 *
 * Ownership: the consumer owns its librdkafka handles, option copies, retry marks and scratch
 * buffer; the handler and its arg are borrowed. Thread-safety: one polling thread at a time.
 */

#include "broker/consumer_internal.h"
#include "broker/kafka_internal.h"
#include "broker/transport.h"

#define POLL_MAX         10000 /* records per poll, whatever the caller asks */
#define HEADERS_MAX      32    /* headers of one record shown to the handler */
#define SEEK_TIMEOUT_MS  5000
#define REASON_MAX       256
#define METADATA_WAIT_MS 500

/* A partition waiting for a record that failed transiently to come back. */
struct retry_mark {
    char *topic;
    int32_t partition;
    int64_t offset;       /* the failed record */
    int64_t resume_at_ms; /* when the partition is resumed */
    bool paused;
    uint64_t delivery; /* deliveries of that record so far */
};

/* One record as the handler sees it: NUL-terminated copies. */
struct view {
    char *buf;
    size_t cap;
    size_t n_headers;
    const char *names[HEADERS_MAX];
    const char *values[HEADERS_MAX];
};

struct kafka_consumer {
    rd_kafka_t *rk;
    rd_kafka_t *dlq;         /* producer for dead letters, made on first use */
    struct txo_kafka_opts o; /* strings point at the copies below */
    char *brokers, *group, *topics, *event_type, *dead_letter_topic;
    char **properties;
    size_t n_properties;

    struct txo_handler h; /* run on one record at a time: its verdict moves the partition */

    struct retry_mark *marks;
    size_t n_marks, cap_marks;
    struct view view;
    size_t stored; /* offsets stored since the last commit */
    bool down;     /* every broker reported down; cleared once metadata answers */

    struct txo_metric *m_consumed;
    struct txo_metric *m_commit_errors;
};

/* ---- retry marks ---- */

static struct retry_mark *find_mark(struct kafka_consumer *c, const char *topic, int32_t part)
{
    for (size_t i = 0; i < c->n_marks; i++) {
        if (c->marks[i].partition == part && strcmp(c->marks[i].topic, topic) == 0)
            return &c->marks[i];
    }
    return NULL;
}

static void drop_mark(struct kafka_consumer *c, struct retry_mark *m)
{
    txo_free(m->topic);
    *m = c->marks[--c->n_marks];
}

/* Drops the marks of partitions in list (revoked), or all of them (list NULL). */
static void drop_marks(struct kafka_consumer *c, const rd_kafka_topic_partition_list_t *list)
{
    for (size_t i = 0; i < c->n_marks;) {
        bool hit = list == NULL;
        for (int k = 0; !hit && k < list->cnt; k++)
            hit = list->elems[k].partition == c->marks[i].partition &&
                  strcmp(list->elems[k].topic, c->marks[i].topic) == 0;
        if (hit)
            drop_mark(c, &c->marks[i]);
        else
            i++;
    }
}

static void count(struct kafka_consumer *c, const char *outcome)
{
    if (c->m_consumed != NULL)
        txo_metric_inc(c->m_consumed, (const char *const[]){outcome});
}

/* ---- commits and rebalances ---- */

/* Commits the stored offsets synchronously. Returns 0 or TXO_EUNAVAILABLE. */
static int commit_stored(struct kafka_consumer *c, rd_kafka_t *rk, struct txo_error *err)
{
    if (c->stored == 0)
        return 0;
    rd_kafka_resp_err_t e = rd_kafka_commit(rk, NULL, 0);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR || e == RD_KAFKA_RESP_ERR__NO_OFFSET) {
        c->stored = 0;
        return 0;
    }
    if (c->m_commit_errors != NULL)
        txo_metric_inc(c->m_commit_errors, NULL);
    if (e == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS) {
        /* The group is moving partitions: the offsets stay stored and go with the next
         * commit, the one before the revoke at the latest. Not a failure of this poll. */
        TXO_LOG(TXO_LOG_INFO, "kafka", "offset commit deferred, group rebalancing",
                TXO_KV_STR("group", c->o.group));
        return 0;
    }
    TXO_LOG(TXO_LOG_WARN, "kafka", "offset commit failed, the records are delivered again",
            TXO_KV_STR("group", c->o.group), TXO_KV_STR("error", rd_kafka_err2name(e)));
    return txo_error_set(err, TXO_EUNAVAILABLE,
                         "kafka consumer: committing offsets of group %s failed: %s", c->o.group,
                         rd_kafka_err2str(e));
}

static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t e,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    struct kafka_consumer *c = opaque;
    bool cooperative = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    rd_kafka_error_t *error = NULL;
    rd_kafka_resp_err_t ae = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (e == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        TXO_LOG(TXO_LOG_INFO, "kafka", "partitions assigned", TXO_KV_STR("group", c->o.group),
                TXO_KV_I64("partitions", parts->cnt));
        drop_marks(c, parts);
        if (cooperative)
            error = rd_kafka_incremental_assign(rk, parts);
        else
            ae = rd_kafka_assign(rk, parts);
    } else {
        /* Everything handled so far is committed before another member takes over. */
        struct txo_error cerr;
        txo_error_init(&cerr);
        (void)commit_stored(c, rk, &cerr);
        TXO_LOG(TXO_LOG_INFO, "kafka", "partitions revoked", TXO_KV_STR("group", c->o.group),
                TXO_KV_I64("partitions", parts->cnt), TXO_KV_STR("reason", rd_kafka_err2name(e)));
        drop_marks(c, parts);
        if (cooperative)
            error = rd_kafka_incremental_unassign(rk, parts);
        else
            ae = rd_kafka_assign(rk, NULL);
    }
    if (error != NULL) {
        TXO_LOG(TXO_LOG_WARN, "kafka", "rebalance assignment failed",
                TXO_KV_STR("group", c->o.group), TXO_KV_STR("error", rd_kafka_error_string(error)));
        rd_kafka_error_destroy(error);
    } else if (ae != RD_KAFKA_RESP_ERR_NO_ERROR) {
        TXO_LOG(TXO_LOG_WARN, "kafka", "rebalance assignment failed",
                TXO_KV_STR("group", c->o.group), TXO_KV_STR("error", rd_kafka_err2name(ae)));
    }
}

static void on_error(rd_kafka_t *rk, int e, const char *reason, void *opaque)
{
    (void)rk;
    struct kafka_consumer *c = opaque;
    rd_kafka_resp_err_t code = (rd_kafka_resp_err_t)e;
    if (code == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
        c->down = true;
    /* Connection failures are in librdkafka's own log lines already: only the summary here. */
    TXO_LOG(code == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN ? TXO_LOG_WARN : TXO_LOG_DEBUG, "kafka",
            "consumer error", TXO_KV_STR("group", c->o.group),
            TXO_KV_STR("error", rd_kafka_err2name(code)), TXO_KV_STR("reason", reason));
}

/* ---- one record ---- */

static char *view_copy(struct view *v, size_t *used, const void *src, size_t len)
{
    char *dst = v->buf + *used;
    if (len > 0)
        memcpy(dst, src, len);
    dst[len] = '\0';
    *used += len + 1;
    return dst;
}

/* Fills c->view with NUL-terminated copies of m's value and headers; sets in->data. */
static int view_fill(struct kafka_consumer *c, const rd_kafka_message_t *m,
                     struct txo_inbound_message *in)
{
    struct view *v = &c->view;
    rd_kafka_headers_t *hdrs = NULL;
    if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR)
        hdrs = NULL;
    size_t need = m->len + 1;
    size_t nh = hdrs != NULL ? rd_kafka_header_cnt(hdrs) : 0;
    if (nh > HEADERS_MAX)
        nh = HEADERS_MAX;
    for (size_t i = 0; i < nh; i++) {
        const char *name = NULL;
        const void *val = NULL;
        size_t size = 0;
        if (rd_kafka_header_get_all(hdrs, i, &name, &val, &size) == RD_KAFKA_RESP_ERR_NO_ERROR)
            need += strlen(name) + 1 + size + 1;
    }
    if (need > v->cap) {
        char *b = txo_realloc(v->buf, need);
        if (b == NULL)
            return TXO_ENOMEM;
        v->buf = b;
        v->cap = need;
    }
    size_t used = 0;
    in->data = view_copy(v, &used, m->payload, m->len);
    in->len = m->len;
    v->n_headers = 0;
    for (size_t i = 0; i < nh; i++) {
        const char *name = NULL;
        const void *val = NULL;
        size_t size = 0;
        if (rd_kafka_header_get_all(hdrs, i, &name, &val, &size) != RD_KAFKA_RESP_ERR_NO_ERROR)
            continue;
        v->names[v->n_headers] = view_copy(v, &used, name, strlen(name));
        v->values[v->n_headers] = view_copy(v, &used, val != NULL ? val : "", val ? size : 0);
        v->n_headers++;
    }
    return 0;
}

/* txo_inbound_message.header for a Kafka record: the last header of that name. */
static const char *kafka_header(const struct txo_inbound_message *in, const char *name)
{
    const struct view *v = in->transport;
    char alt[64];
    if (strncmp(name, "ce-", 3) == 0 && strlen(name) < sizeof(alt)) {
        /* CloudEvents' Kafka binding spells the attributes ce_<name>. */
        snprintf(alt, sizeof(alt), "ce_%s", name + 3);
        name = alt;
    }
    for (size_t i = v->n_headers; i > 0; i--) {
        if (strcmp(v->names[i - 1], name) == 0)
            return v->values[i - 1];
    }
    return NULL;
}

static void store(struct kafka_consumer *c, const rd_kafka_message_t *m)
{
    rd_kafka_resp_err_t e = rd_kafka_offset_store(m->rkt, m->partition, m->offset);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
        c->stored++;
        return;
    }
    /* The partition was revoked meanwhile: its next owner handles the record again. */
    TXO_LOG(TXO_LOG_DEBUG, "kafka", "offset not stored",
            TXO_KV_STR("topic", rd_kafka_topic_name(m->rkt)), TXO_KV_I64("partition", m->partition),
            TXO_KV_I64("offset", m->offset), TXO_KV_STR("error", rd_kafka_err2name(e)));
}

/* Pauses m's partition and seeks it back to m, to handle m again after retry_delay_ms. */
static int schedule_retry(struct kafka_consumer *c, const rd_kafka_message_t *m, uint64_t delivery,
                          struct txo_error *err)
{
    const char *topic = rd_kafka_topic_name(m->rkt);
    struct retry_mark *mark = find_mark(c, topic, m->partition);
    if (mark == NULL) {
        if (TXO_ARRAY_RESERVE(c->marks, c->cap_marks, c->n_marks + 1, 8) < 0)
            return txo_error_set(err, TXO_ENOMEM, "kafka consumer: out of memory");
        char *t = txo_strdup(topic);
        if (t == NULL)
            return txo_error_set(err, TXO_ENOMEM, "kafka consumer: out of memory");
        mark = &c->marks[c->n_marks++];
        memset(mark, 0, sizeof(*mark));
        mark->topic = t;
        mark->partition = m->partition;
    }
    mark->offset = m->offset;
    mark->delivery = delivery;
    mark->resume_at_ms = txo_monotonic_ms() + c->o.retry_delay_ms;

    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, m->partition)->offset = m->offset;
    rd_kafka_resp_err_t pe = rd_kafka_pause_partitions(c->rk, l);
    mark->paused = pe == RD_KAFKA_RESP_ERR_NO_ERROR;
    rd_kafka_error_t *se = rd_kafka_seek_partitions(c->rk, l, SEEK_TIMEOUT_MS);
    int rc = 0;
    if (se != NULL || l->elems[0].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        /* The record is not committed either way; a later rebalance or restart fetches it. */
        rc = txo_error_set(
            err, TXO_EUNAVAILABLE,
            "kafka consumer: seeking %s [%" PRId32 "] back to %" PRId64 " failed: %s", topic,
            m->partition, m->offset,
            se != NULL ? rd_kafka_error_string(se) : rd_kafka_err2str(l->elems[0].err));
        rd_kafka_error_destroy(se);
    }
    rd_kafka_topic_partition_list_destroy(l);
    return rc;
}

static void resume_due(struct kafka_consumer *c)
{
    int64_t now = txo_monotonic_ms();
    for (size_t i = 0; i < c->n_marks; i++) {
        struct retry_mark *mk = &c->marks[i];
        if (!mk->paused || mk->resume_at_ms > now)
            continue;
        rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(l, mk->topic, mk->partition);
        if (rd_kafka_resume_partitions(c->rk, l) == RD_KAFKA_RESP_ERR_NO_ERROR)
            mk->paused = false;
        rd_kafka_topic_partition_list_destroy(l);
    }
}

/* The dead-letter producer's delivery report: the record's opaque is its result slot. */
static void on_dead_letter_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    *(rd_kafka_resp_err_t *)m->_private = m->err;
}

/* Copies m to the dead-letter topic and waits for the cluster to confirm it. */
static int dead_letter(struct kafka_consumer *c, const rd_kafka_message_t *m, const char *reason,
                       struct txo_error *err)
{
    if (c->dlq == NULL) {
        char timeout[24];
        snprintf(timeout, sizeof(timeout), "%" PRId64, c->o.delivery_timeout_ms);
        const char *const fixed[] = {"enable.idempotence", "true", "acks", "all",
                                     "message.timeout.ms", timeout};
        rd_kafka_conf_t *conf = NULL;
        int rc = txo__kafka_conf_new(&c->o, "dead-letter producer", fixed, 3, &conf, err);
        if (rc < 0)
            return rc;
        rd_kafka_conf_set_dr_msg_cb(conf, on_dead_letter_delivery);
        char errstr[512];
        c->dlq = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
        if (c->dlq == NULL) {
            rd_kafka_conf_destroy(conf);
            return txo_error_set(err, TXO_ECONFIG,
                                 "kafka consumer: cannot create the dead-letter producer: %s",
                                 errstr);
        }
    }
    rd_kafka_headers_t *src = NULL;
    rd_kafka_headers_t *h = rd_kafka_message_headers(m, &src) == RD_KAFKA_RESP_ERR_NO_ERROR
                                ? rd_kafka_headers_copy(src)
                                : rd_kafka_headers_new(1);
    rd_kafka_header_add(h, TXO_KAFKA_HEADER_DEAD_LETTER_REASON, -1, reason, -1);
    /* Pending until the delivery report, served by the flush, writes the outcome. */
    rd_kafka_resp_err_t outcome = RD_KAFKA_RESP_ERR__IN_PROGRESS;
    rd_kafka_resp_err_t e = rd_kafka_producev(
        c->dlq, RD_KAFKA_V_TOPIC(c->o.dead_letter_topic), RD_KAFKA_V_KEY(m->key, m->key_len),
        RD_KAFKA_V_VALUE(m->payload, m->len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_OPAQUE(&outcome), RD_KAFKA_V_END);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_headers_destroy(h);
    } else {
        /* Past message.timeout.ms librdkafka reports the record, so outcome is settled; if
         * the flush still times out, purge it so no report can write to outcome later. */
        if (rd_kafka_flush(c->dlq, (int)c->o.delivery_timeout_ms + 1000) !=
            RD_KAFKA_RESP_ERR_NO_ERROR) {
            rd_kafka_purge(c->dlq, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
            (void)rd_kafka_flush(c->dlq, 1000);
        }
        e = outcome == RD_KAFKA_RESP_ERR__IN_PROGRESS ? RD_KAFKA_RESP_ERR__TIMED_OUT : outcome;
    }
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
        return 0;
    return txo_error_set(err, TXO_EUNAVAILABLE,
                         "kafka consumer: copying the record to dead-letter topic %s failed: %s",
                         c->o.dead_letter_topic, rd_kafka_err2str(e));
}

/*
 * Runs the handler on m and settles it (see the top of this file). *called is set when the
 * handler ran. Returns 0, or a transport error with err set.
 */
static int handle_one(struct kafka_consumer *c, const rd_kafka_message_t *m, bool *called,
                      struct txo_error *err)
{
    const char *topic = rd_kafka_topic_name(m->rkt);
    struct retry_mark *mark = find_mark(c, topic, m->partition);
    uint64_t delivery = 1;
    if (mark != NULL) {
        if (m->offset != mark->offset)
            return 0; /* fetched before the seek back: it comes again after the failed one */
        delivery = mark->delivery + 1;
        drop_mark(c, mark);
    }
    struct txo_inbound_message in;
    memset(&in, 0, sizeof(in));
    if (view_fill(c, m, &in) < 0)
        return txo_error_set(err, TXO_ENOMEM, "kafka consumer: out of memory for a record");
    in.subject = topic;
    in.header = kafka_header;
    in.transport = &c->view;
    in.delivery = delivery;
    in.msg_id = kafka_header(&in, TXO_KAFKA_HEADER_IDEMPOTENCY_KEY);
    const char *type = kafka_header(&in, TXO_KAFKA_HEADER_EVENT_TYPE);
    const char *id = in.msg_id != NULL ? in.msg_id : "";

    if (c->o.event_type != NULL && type != NULL && strcmp(type, c->o.event_type) != 0) {
        store(c, m);
        count(c, "skipped");
        return 0;
    }

    struct txo_error herr;
    int rc = 0;
    *called = true;
    (void)txo__handler_run(&c->h, &in, 1, &rc, &herr);
    const char *reason = herr.msg[0] != '\0' ? herr.msg : txo_strerror(rc);
    if (rc == 0) {
        store(c, m);
        count(c, "handled");
        TXO_LOG(TXO_LOG_DEBUG, "kafka", "message handled", TXO_KV_STR("message_id", id),
                TXO_KV_STR("topic", topic), TXO_KV_I64("partition", m->partition),
                TXO_KV_I64("offset", m->offset), TXO_KV_U64("delivery", delivery));
        return 0;
    }
    if (!txo_err_is_transient(rc)) {
        TXO_LOG(TXO_LOG_ERROR, "kafka", "handler rejected the message, committed past it",
                TXO_KV_STR("message_id", id), TXO_KV_STR("topic", topic),
                TXO_KV_I64("partition", m->partition), TXO_KV_I64("offset", m->offset),
                TXO_KV_STR("error", txo_err_name(rc)), TXO_KV_STR("reason", reason),
                TXO_KV_STR("dead_letter",
                           c->o.dead_letter_topic != NULL ? c->o.dead_letter_topic : "none"));
        struct txo_error derr;
        txo_error_init(&derr);
        if (c->o.dead_letter_topic == NULL || dead_letter(c, m, reason, &derr) == 0) {
            store(c, m);
            count(c, "rejected");
            return 0;
        }
        TXO_LOG(TXO_LOG_WARN, "kafka", "dead letter not written, retrying the message",
                TXO_KV_STR("message_id", id), TXO_KV_STR("reason", derr.msg));
    } else {
        TXO_LOG(TXO_LOG_WARN, "kafka", "handler failed, message redelivered later",
                TXO_KV_STR("message_id", id), TXO_KV_STR("topic", topic),
                TXO_KV_I64("partition", m->partition), TXO_KV_I64("offset", m->offset),
                TXO_KV_U64("delivery", delivery), TXO_KV_I64("delay_ms", c->o.retry_delay_ms),
                TXO_KV_STR("error", txo_err_name(rc)), TXO_KV_STR("reason", reason));
    }
    count(c, "retried");
    return schedule_retry(c, m, delivery, err);
}

/* While every broker is reported down: TXO_EUNAVAILABLE until the cluster answers again. */
static int check_down(struct kafka_consumer *c, struct txo_error *err)
{
    if (!c->down)
        return 0;
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(c->rk, 0, NULL, &md, METADATA_WAIT_MS);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_metadata_destroy(md);
        c->down = false;
        TXO_LOG(TXO_LOG_INFO, "kafka", "cluster reachable again", TXO_KV_STR("group", c->o.group));
        return 0;
    }
    return txo_error_set(err, TXO_EUNAVAILABLE, "kafka consumer: no broker of %s reachable: %s",
                         c->o.brokers, rd_kafka_err2str(e));
}

static int kafka_poll(void *self, size_t max_msgs, int64_t timeout_ms, size_t *handled,
                      struct txo_error *err)
{
    struct kafka_consumer *c = self;
    *handled = 0;
    int rc = check_down(c, err);
    if (rc < 0)
        return rc;
    resume_due(c);
    size_t max = max_msgs > POLL_MAX ? POLL_MAX : max_msgs;
    int64_t deadline = txo_monotonic_ms() + timeout_ms;
    size_t got = 0;
    while (got < max) {
        int64_t left = got > 0 ? 0 : deadline - txo_monotonic_ms();
        if (got == 0 && left <= 0)
            break;
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, (int)(left > 100 ? 100 : left));
        if (m == NULL) {
            if (got > 0)
                break;
            resume_due(c); /* a retry delay may end within the wait */
            continue;
        }
        if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                TXO_LOG(TXO_LOG_WARN, "kafka", "consume error", TXO_KV_STR("group", c->o.group),
                        TXO_KV_STR("error", rd_kafka_err2name(m->err)),
                        TXO_KV_STR("reason", rd_kafka_message_errstr(m)));
            rd_kafka_message_destroy(m);
            continue;
        }
        got++;
        bool called = false;
        struct txo_error e;
        txo_error_init(&e);
        int hrc = handle_one(c, m, &called, &e);
        rd_kafka_message_destroy(m);
        *handled += called;
        txo__settle_keep_first(hrc, &e, &rc, err);
    }
    struct txo_error cerr;
    txo_error_init(&cerr);
    int crc = commit_stored(c, c->rk, &cerr);
    txo__settle_keep_first(crc, &cerr, &rc, err);
    return rc;
}

static void kafka_consumer_destroy(void *self)
{
    struct kafka_consumer *c = self;
    if (c->rk != NULL) {
        /* Serves the final revoke (which commits what was handled) and leaves the group. */
        rd_kafka_resp_err_t e = rd_kafka_consumer_close(c->rk);
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
            TXO_LOG(TXO_LOG_WARN, "kafka", "consumer close failed", TXO_KV_STR("group", c->o.group),
                    TXO_KV_STR("error", rd_kafka_err2name(e)));
        rd_kafka_destroy(c->rk);
    }
    if (c->dlq != NULL) {
        (void)rd_kafka_flush(c->dlq, 1000);
        rd_kafka_destroy(c->dlq);
    }
    drop_marks(c, NULL);
    txo_free(c->marks);
    txo_free(c->view.buf);
    txo_free(c->brokers);
    txo_free(c->group);
    txo_free(c->topics);
    txo_free(c->event_type);
    txo_free(c->dead_letter_topic);
    for (size_t i = 0; i < c->n_properties; i++)
        txo_free(c->properties[i]);
    txo_free(c->properties);
    txo_free(c);
}

static const struct txo_consumer_ops kafka_consumer_ops = {
    .name = "kafka",
    .poll = kafka_poll,
    .destroy = kafka_consumer_destroy,
};

/* Copies the options into c (c->o's strings then point at the copies). */
static int copy_opts(struct kafka_consumer *c, const struct txo_kafka_opts *o)
{
    c->o = *o;
    c->brokers = txo_strdup(o->brokers);
    c->group = txo_strdup(o->group);
    c->topics = txo_strdup(o->topics);
    c->event_type = o->event_type != NULL ? txo_strdup(o->event_type) : NULL;
    c->dead_letter_topic = o->dead_letter_topic != NULL ? txo_strdup(o->dead_letter_topic) : NULL;
    if (c->brokers == NULL || c->group == NULL || c->topics == NULL ||
        (o->event_type != NULL && c->event_type == NULL) ||
        (o->dead_letter_topic != NULL && c->dead_letter_topic == NULL))
        return TXO_ENOMEM;
    if (o->n_properties > 0) {
        c->properties = txo_calloc(o->n_properties, sizeof(char *));
        if (c->properties == NULL)
            return TXO_ENOMEM;
        for (size_t i = 0; i < o->n_properties; i++) {
            c->properties[i] = txo_strdup(o->properties[i]);
            c->n_properties = i + 1;
            if (c->properties[i] == NULL)
                return TXO_ENOMEM;
        }
    }
    c->o.brokers = c->brokers;
    c->o.group = c->group;
    c->o.topics = c->topics;
    c->o.event_type = c->event_type;
    c->o.dead_letter_topic = c->dead_letter_topic;
    c->o.properties = (const char *const *)c->properties;
    c->o.topic_template = NULL; /* not used by the consumer */
    return 0;
}

/* Subscribes to the comma-separated topics of c->o.topics. */
static int subscribe(struct kafka_consumer *c, struct txo_error *err)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(4);
    char *list = txo_strdup(c->o.topics);
    if (list == NULL) {
        rd_kafka_topic_partition_list_destroy(l);
        return txo_error_set(err, TXO_ENOMEM, "kafka consumer: out of memory");
    }
    for (char *s = list; *s != '\0';) {
        size_t len = strcspn(s, ", ");
        bool last = s[len] == '\0';
        s[len] = '\0';
        if (len > 0)
            rd_kafka_topic_partition_list_add(l, s, RD_KAFKA_PARTITION_UA);
        s += len + (last ? 0 : 1);
    }
    txo_free(list);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(c->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        return txo_error_set(err, TXO_ECONFIG, "kafka consumer: subscribing to %s failed: %s",
                             c->o.topics, rd_kafka_err2str(e));
    TXO_LOG(TXO_LOG_INFO, "kafka", "consumer subscribed", TXO_KV_STR("group", c->o.group),
            TXO_KV_STR("topics", c->o.topics),
            TXO_KV_STR("event_type", c->o.event_type != NULL ? c->o.event_type : "*"));
    return 0;
}

static const char *const by_outcome[] = {"outcome"};

static const struct txo_metric_desc families[] = {
    {TXO_METRIC_COUNTER, "txo_kafka_messages_consumed_total",
     "Records the Kafka consumer settled, by outcome (handled, retried after a transient "
     "error, rejected by the handler, skipped: an event type the consumer does not take).",
     1, by_outcome},
    {TXO_METRIC_COUNTER, "txo_kafka_commit_errors_total",
     "Offset commits of the Kafka consumer that failed.", 0, NULL},
};

static int register_metrics(struct kafka_consumer *c, struct txo_metrics *reg,
                            struct txo_error *err)
{
    struct txo_metric **const slots[] = {&c->m_consumed, &c->m_commit_errors};
    int rc = txo__transport_metrics(reg, families, TXO_ARRAY_LEN(families), slots, err);
    static const char *const outcomes[] = {"handled", "retried", "rejected", "skipped"};
    for (size_t i = 0; rc == 0 && c->m_consumed != NULL && i < 4; i++)
        txo_metric_add(c->m_consumed, (const char *const[]){outcomes[i]}, 0);
    return rc;
}

static int kafka_consumer_init(void *self, const struct txo__transport_args *a,
                               struct txo_error *err)
{
    struct kafka_consumer *c = self;
    c->h = *a->h;
    int rc = copy_opts(c, a->opts);
    if (rc < 0)
        return txo_error_set(err, rc, "kafka consumer: out of memory");
    rc = register_metrics(c, a->metrics, err);
    if (rc < 0)
        return rc;
    const char *const fixed[] = {
        "group.id", c->o.group,          "enable.auto.commit", "false", "enable.auto.offset.store",
        "false",    "auto.offset.reset", "earliest",
    };
    rd_kafka_conf_t *conf = NULL;
    rc = txo__kafka_conf_new(&c->o, "consumer", fixed, 4, &conf, err);
    if (rc < 0)
        return rc;
    rd_kafka_conf_set_rebalance_cb(conf, on_rebalance);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_opaque(conf, c);
    char errstr[512];
    c->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    if (c->rk == NULL) {
        rd_kafka_conf_destroy(conf);
        return txo_error_set(err, TXO_ECONFIG, "kafka consumer: cannot create the consumer: %s",
                             errstr);
    }
    rd_kafka_poll_set_consumer(c->rk);
    return subscribe(c, err);
}

int txo_consumer_kafka_new(const struct txo_kafka_opts *o, const struct txo_handler *h,
                           struct txo_metrics *metrics, struct txo_consumer **out,
                           struct txo_error *err)
{
    int rc = txo__kafka_check_opts(o, "consumer", err);
    if (rc < 0)
        return rc;
    struct txo__transport_args a = {.opts = o, .h = h, .metrics = metrics};
    return txo__consumer_build(&kafka_consumer_ops, sizeof(struct kafka_consumer),
                               kafka_consumer_init, &a, out, err);
}
