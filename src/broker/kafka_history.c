#include "core/common.h"

/*
 * The Kafka history reader (txo/history.h; txo_history_kafka_new() in txo/kafka.h): the records
 * of every topic the relay's topic template names, read by a consumer that belongs to no group
 * (no group.id: librdkafka's simple consumer fetches the partitions it is told to, joins
 * nothing and commits nothing), so no consumer group's offsets or assignments change.
 *
 * One read, kafka_read():
 *   1. The topics: from the cluster's metadata, those the template matches (each placeholder
 *      one or more of the characters a topic name can have), except internal ones ("__...")
 *      and the workers' dead-letter topic.
 *   2. Per partition: the watermarks (low: the oldest offset held, high: the next one) and the
 *      offsets for from_us and to_us (ListOffsets by timestamp, rd_kafka_offsets_for_times).
 *      A cluster that cannot look up by time (librdkafka's mock cluster answers -1) is read
 *      from the low watermark instead, which is correct and only slower; the probe is a lookup
 *      at time 0, which any real cluster answers with the low watermark.
 *   3. Every partition with something to read is fetched from its start offset into one queue
 *      (rd_kafka_consume_start_queue: the simple consumer, which needs no group); records
 *      come from it until each partition reached its end offset (taken before the read:
 *      later records are not waited for) or its end (partition EOF).
 *      Each record goes to fn with its txo-idempotency-key header and its timestamp.
 *   4. Retention: a partition whose low watermark is above 0 dropped records. It holds from
 *      the timestamp of its oldest record on (read when the read starts at the low
 *      watermark; otherwise that record is older than from_us and does not matter). A
 *      partition emptied by retention tells nothing of when its records went: it is taken to
 *      hold nothing (its time is the start of the read).
 *
 * Ownership: the reader owns its librdkafka handle. Thread-safety: one thread at a time;
 * librdkafka's own threads run only the log bridge.
 */

#include "broker/kafka_internal.h"
#include "broker/transport.h"

#define POLL_MS      100
#define POSITION_MAX 600
#define KEY_MAX      1024

struct kafka_history {
    rd_kafka_t *rk;
    char *topic_template;
    char *dead_letter_topic; /* NULL: none */
    int64_t timeout_ms;      /* every request, and the longest wait for a record */
};

/* One partition to read. */
struct part {
    const char *topic; /* into the metadata */
    int32_t id;
    int64_t low, high;
    int64_t start, end; /* records [start, end) are read */
    bool done;
    rd_kafka_topic_t *rkt; /* while fetching */
    bool started;
};

static bool topic_char(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '_' || ch == '-';
}

/* Whether topic can be what txo_kafka_topic() makes of tmpl: literal bytes as it writes them,
 * each placeholder one or more topic characters. */
static bool template_match(const char *tmpl, const char *topic)
{
    if (*tmpl == '\0')
        return *topic == '\0';
    if (*tmpl == '{') {
        const char *close = strchr(tmpl, '}');
        if (close == NULL)
            return false;
        for (const char *t = topic; *t != '\0' && topic_char((unsigned char)*t); t++)
            if (template_match(close + 1, t + 1))
                return true;
        return false;
    }
    char want = topic_char((unsigned char)*tmpl) ? *tmpl : '_';
    return *topic == want && template_match(tmpl + 1, topic + 1);
}

static int kafka_error(rd_kafka_resp_err_t e, const char *what, struct txo_error *err)
{
    int code = txo__kafka_code(e);
    if (code == TXO_EPUBLISH || code == TXO_EINVAL)
        code = TXO_EUNAVAILABLE;
    return txo_error_set(err, code, "kafka history: %s: %s", what, rd_kafka_err2str(e));
}

/* The offsets of ts_ms for every partition of parts (-1 where none). */
static int offsets_at(struct kafka_history *kh, struct part *parts, size_t n, int64_t ts_ms,
                      int64_t *out, struct txo_error *err)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)n);
    for (size_t i = 0; i < n; i++)
        rd_kafka_topic_partition_list_add(l, parts[i].topic, parts[i].id)->offset = ts_ms;
    rd_kafka_resp_err_t e = rd_kafka_offsets_for_times(kh->rk, l, (int)kh->timeout_ms);
    for (size_t i = 0; e == RD_KAFKA_RESP_ERR_NO_ERROR && i < n; i++)
        out[i] = l->elems[i].err == RD_KAFKA_RESP_ERR_NO_ERROR ? l->elems[i].offset : -1;
    rd_kafka_topic_partition_list_destroy(l);
    return e == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 : kafka_error(e, "offsets for times", err);
}

/* The partitions of every matching topic, with their watermarks. */
static int list_parts(struct kafka_history *kh, const rd_kafka_metadata_t *md, struct part **out,
                      size_t *n_out, struct txo_error *err)
{
    size_t n = 0;
    for (int t = 0; t < md->topic_cnt; t++)
        n += (size_t)md->topics[t].partition_cnt;
    struct part *parts = txo_calloc(n > 0 ? n : 1, sizeof(*parts));
    if (parts == NULL)
        return txo_error_set(err, TXO_ENOMEM, "kafka history: out of memory");
    size_t k = 0;
    int rc = 0;
    for (int t = 0; rc == 0 && t < md->topic_cnt; t++) {
        const rd_kafka_metadata_topic_t *mt = &md->topics[t];
        if (mt->err != RD_KAFKA_RESP_ERR_NO_ERROR || strncmp(mt->topic, "__", 2) == 0 ||
            !template_match(kh->topic_template, mt->topic) ||
            (kh->dead_letter_topic != NULL && strcmp(mt->topic, kh->dead_letter_topic) == 0))
            continue;
        for (int p = 0; rc == 0 && p < mt->partition_cnt; p++) {
            struct part *pt = &parts[k++];
            pt->topic = mt->topic;
            pt->id = mt->partitions[p].id;
            rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(
                kh->rk, pt->topic, pt->id, &pt->low, &pt->high, (int)kh->timeout_ms);
            if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
                char what[300];
                snprintf(what, sizeof(what), "watermarks of %s [%" PRId32 "]", pt->topic, pt->id);
                rc = kafka_error(e, what, err);
            }
        }
    }
    if (rc != 0) {
        txo_free(parts);
        return rc;
    }
    *out = parts;
    *n_out = k;
    return 0;
}

/* Whether the cluster looks offsets up by time: a lookup at time 0 of a partition holding
 * records must give an offset. */
static int can_seek_by_time(struct kafka_history *kh, struct part *parts, size_t n, bool *yes,
                            struct txo_error *err)
{
    *yes = true;
    for (size_t i = 0; i < n; i++) {
        if (parts[i].high <= parts[i].low)
            continue;
        int64_t off = -1;
        int rc = offsets_at(kh, &parts[i], 1, 0, &off, err);
        if (rc == 0 && off < 0) {
            *yes = false;
            TXO_LOG(TXO_LOG_WARN, "kafka",
                    "the cluster does not look offsets up by time: reading every record held",
                    TXO_KV_STR("topic", parts[i].topic), TXO_KV_I64("partition", parts[i].id));
        }
        return rc;
    }
    return 0;
}

/* Each partition's [start, end) for [from_us, to_us]. */
static int plan(struct kafka_history *kh, struct part *parts, size_t n, int64_t from_us,
                int64_t to_us, struct txo_error *err)
{
    bool by_time = true;
    int rc = can_seek_by_time(kh, parts, n, &by_time, err);
    int64_t *from = txo_calloc(n > 0 ? n : 1, sizeof(*from));
    int64_t *to = txo_calloc(n > 0 ? n : 1, sizeof(*to));
    if (rc == 0 && (from == NULL || to == NULL))
        rc = txo_error_set(err, TXO_ENOMEM, "kafka history: out of memory");
    if (rc == 0 && by_time && n > 0)
        rc = offsets_at(kh, parts, n, from_us > 0 ? from_us / 1000 : 0, from, err);
    if (rc == 0 && by_time && n > 0)
        rc = offsets_at(kh, parts, n, to_us / 1000 + 1, to, err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        struct part *p = &parts[i];
        p->start = !by_time ? p->low : from[i] < 0 ? p->high : from[i];
        p->end = !by_time || to[i] < 0 || to[i] > p->high ? p->high : to[i];
        if (p->start < p->low)
            p->start = p->low;
        p->done = p->start >= p->end;
    }
    txo_free(from);
    txo_free(to);
    return rc;
}

static struct part *find_part(struct part *parts, size_t n, const char *topic, int32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (parts[i].id == id && strcmp(parts[i].topic, topic) == 0)
            return &parts[i];
    return NULL;
}

/* One record to fn (and the partition's horizon from its oldest record). */
static int deliver(struct part *p, const rd_kafka_message_t *m, txo_history_fn fn, void *arg,
                   struct txo_history_span *span)
{
    rd_kafka_timestamp_type_t tstype;
    int64_t ts_ms = rd_kafka_message_timestamp(m, &tstype);
    int64_t t = ts_ms >= 0 ? ts_ms * 1000 : 0;
    char position[POSITION_MAX];
    snprintf(position, sizeof(position), "topic %s partition %" PRId32 " offset %" PRId64, p->topic,
             p->id, m->offset);
    if (m->offset == p->low && p->low > 0)
        txo_history_span_hold(span, position, t);
    char key[KEY_MAX];
    bool has_key = false;
    rd_kafka_headers_t *hdrs = NULL;
    const void *val = NULL;
    size_t size = 0;
    if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        rd_kafka_header_get_last(hdrs, TXO_KAFKA_HEADER_IDEMPOTENCY_KEY, &val, &size) ==
            RD_KAFKA_RESP_ERR_NO_ERROR &&
        val != NULL) {
        snprintf(key, sizeof(key), "%.*s", (int)(size < KEY_MAX ? size : KEY_MAX - 1),
                 (const char *)val);
        has_key = true;
    }
    struct txo_history_msg hm = {.key = has_key ? key : NULL, .position = position, .time_us = t};
    span->messages++;
    return fn(arg, &hm);
}

/* Takes records from q until every partition reached its end. */
static int consume(struct kafka_history *kh, struct part *parts, size_t n, rd_kafka_queue_t *q,
                   txo_history_fn fn, void *arg, struct txo_history_span *span,
                   struct txo_error *err)
{
    size_t left = 0;
    for (size_t i = 0; i < n; i++)
        left += !parts[i].done;
    int64_t idle_since = txo_monotonic_ms();
    int rc = 0;
    while (rc == 0 && left > 0) {
        rd_kafka_message_t *m = rd_kafka_consume_queue(q, POLL_MS);
        if (m == NULL) {
            if (txo_monotonic_ms() - idle_since > kh->timeout_ms)
                rc = txo_error_set(err, TXO_ETIMEOUT,
                                   "kafka history: no record within %" PRId64
                                   " ms, %zu partition(s) not read to their end",
                                   kh->timeout_ms, left);
            continue;
        }
        idle_since = txo_monotonic_ms();
        struct part *p =
            m->rkt != NULL ? find_part(parts, n, rd_kafka_topic_name(m->rkt), m->partition) : NULL;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (p != NULL && !p->done) {
                p->done = true;
                left--;
            }
        } else if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            rc = kafka_error(m->err, "reading", err);
        } else if (p != NULL && !p->done && m->offset < p->end) {
            rc = deliver(p, m, fn, arg, span);
            if (m->offset + 1 >= p->end) {
                p->done = true;
                left--;
            }
        }
        rd_kafka_message_destroy(m);
    }
    return rc;
}

/* Starts fetching every partition with something to read into q, at its start offset. */
static int start(struct kafka_history *kh, struct part *parts, size_t n, rd_kafka_queue_t *q,
                 struct txo_error *err)
{
    for (size_t i = 0; i < n; i++) {
        struct part *p = &parts[i];
        if (p->done)
            continue;
        p->rkt = rd_kafka_topic_new(kh->rk, p->topic, NULL);
        if (p->rkt == NULL)
            return kafka_error(rd_kafka_last_error(), "topic handle", err);
        if (rd_kafka_consume_start_queue(p->rkt, p->id, p->start, q) != 0) {
            char what[300];
            snprintf(what, sizeof(what), "fetching %s [%" PRId32 "]", p->topic, p->id);
            return kafka_error(rd_kafka_last_error(), what, err);
        }
        p->started = true;
    }
    return 0;
}

/* Stops the fetchers and drops the topic handles. */
static void stop(struct part *parts, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (parts[i].started)
            (void)rd_kafka_consume_stop(parts[i].rkt, parts[i].id);
        if (parts[i].rkt != NULL)
            rd_kafka_topic_destroy(parts[i].rkt);
        parts[i].rkt = NULL;
        parts[i].started = false;
    }
}

static int kafka_read(void *self, int64_t from_us, int64_t to_us, txo_history_fn fn, void *arg,
                      struct txo_history_span *span, struct txo_error *err)
{
    struct kafka_history *kh = self;
    int64_t started_us = txo_realtime_us();
    const rd_kafka_metadata_t *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(kh->rk, 1, NULL, &md, (int)kh->timeout_ms);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        return kafka_error(e, "metadata", err);
    struct part *parts = NULL;
    size_t n = 0;
    int rc = list_parts(kh, md, &parts, &n, err);
    if (rc == 0)
        rc = plan(kh, parts, n, from_us, to_us, err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        span->sources++;
        if (parts[i].low > 0 && parts[i].low >= parts[i].high) {
            char where[POSITION_MAX];
            snprintf(where, sizeof(where),
                     "topic %s partition %" PRId32 ", emptied by retention up to offset %" PRId64,
                     parts[i].topic, parts[i].id, parts[i].low);
            txo_history_span_hold(span, where, started_us);
        }
    }
    rd_kafka_queue_t *q = rc == 0 ? rd_kafka_queue_new(kh->rk) : NULL;
    if (rc == 0 && q == NULL)
        rc = txo_error_set(err, TXO_ENOMEM, "kafka history: out of memory");
    if (rc == 0)
        rc = start(kh, parts, n, q, err);
    if (rc == 0)
        rc = consume(kh, parts, n, q, fn, arg, span, err);
    stop(parts, n);
    if (q != NULL)
        rd_kafka_queue_destroy(q);
    TXO_LOG(TXO_LOG_DEBUG, "kafka", "history read", TXO_KV_STR("template", kh->topic_template),
            TXO_KV_U64("partitions", n), TXO_KV_U64("messages", span->messages),
            TXO_KV_I64("rc", rc));
    txo_free(parts);
    rd_kafka_metadata_destroy(md);
    return rc;
}

static void kafka_history_destroy(void *self)
{
    struct kafka_history *kh = self;
    if (kh->rk != NULL)
        rd_kafka_destroy(kh->rk);
    txo_free(kh->topic_template);
    txo_free(kh->dead_letter_topic);
    txo_free(kh);
}

static const struct txo_history_ops kafka_history_ops = {
    .name = "kafka",
    .read = kafka_read,
    .destroy = kafka_history_destroy,
};

static int kafka_history_init(void *self, const struct txo__transport_args *a,
                              struct txo_error *err)
{
    struct kafka_history *kh = self;
    const struct txo_kafka_opts *o = a->opts;
    kh->timeout_ms = o->delivery_timeout_ms;
    kh->topic_template = txo_strdup(o->topic_template);
    kh->dead_letter_topic = o->dead_letter_topic != NULL ? txo_strdup(o->dead_letter_topic) : NULL;
    if (kh->topic_template == NULL || (o->dead_letter_topic != NULL && !kh->dead_letter_topic))
        return txo_error_set(err, TXO_ENOMEM, "kafka history: out of memory");
    /* No group.id: the simple consumer joins no group and commits nothing. */
    static const char *const fixed[] = {
        "enable.auto.commit",   "false", "enable.auto.offset.store", "false",
        "enable.partition.eof", "true",  "auto.offset.reset",        "earliest",
    };
    rd_kafka_conf_t *conf = NULL;
    int rc = txo__kafka_conf_new(o, "history", fixed, TXO_ARRAY_LEN(fixed) / 2, &conf, err);
    if (rc < 0)
        return rc;
    char errstr[512];
    kh->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    if (kh->rk == NULL) {
        rd_kafka_conf_destroy(conf);
        return txo_error_set(err, TXO_ECONFIG, "kafka history: creating the consumer: %s", errstr);
    }
    return 0;
}

int txo_history_kafka_new(const struct txo_kafka_opts *o, struct txo_history **out,
                          struct txo_error *err)
{
    int rc = txo__kafka_check_opts(o, "history", err);
    if (rc < 0)
        return rc;
    struct txo__transport_args a = {.opts = o};
    return txo__history_build(&kafka_history_ops, sizeof(struct kafka_history), kafka_history_init,
                              &a, out, err);
}
