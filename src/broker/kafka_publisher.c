#include "core/common.h"

/*
 * The Kafka publisher (txo/kafka.h), plus the option, configuration and error helpers it shares
 * with the consumer (kafka_internal.h).
 *
 * One batch, kafka_publish_batch():
 *   1. Produce every message with rd_kafka_producev (copied key, value and headers). The
 *      per-message opaque is a tag, the batch generation and the message's index packed into
 *      one uintptr_t, so a delivery report can be matched to its slot without any allocation,
 *      and a report of an older batch (a record still in flight when that batch gave up on it)
 *      is recognised and ignored.
 *   2. Serve delivery reports with rd_kafka_poll() until every message of the batch has one or
 *      delivery_timeout_ms + DRAIN_GRACE_MS passed. librdkafka reports every message within
 *      message.timeout.ms (= delivery_timeout_ms), so the grace is only a safety net.
 *   3. A message without a report fails with TXO_ETIMEOUT: maybe written. The relay retries
 *      it later, which may write a second record (the inbox de-duplicates).
 * The delivery report callback runs inside rd_kafka_poll(), on the relay's thread: results[]
 * and errors[] are only ever touched by that thread.
 *
 * An idempotent producer that hits a fatal error (the cluster rejected its sequence numbers)
 * cannot produce again: the batch fails transiently and the next one starts a new producer.
 *
 * Error messages written to errors[] carry no per-event detail, so the relay can mark a failed
 * batch with one UPDATE per distinct error.
 *
 * Ownership: the publisher owns its producer, copies of the options and the per-batch buffer
 * (grown to the largest batch). Thread-safety: one relay thread at a time; librdkafka's
 * threads only call the log bridge.
 */

#include "broker/kafka_internal.h"
#include "broker/transport.h"
#include "broker/wire.h"

#define RESULT_PENDING 1    /* results[i] while no report is known (codes are <= 0) */
#define DRAIN_GRACE_MS 1000 /* beyond delivery_timeout_ms, see above */
#define CLOSE_FLUSH_MS 1000 /* what free waits for records in flight */
#define POLL_SLICE_MS  100  /* one rd_kafka_poll() wait while reports are missing */
#define INDEX_BITS     24   /* batch index bits of a tag: batches up to 16M messages */
#define ERRSTR_MAX     512

/* ---- options ---- */

void txo_kafka_opts_init(struct txo_kafka_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->brokers = "127.0.0.1:9092";
    o->topic_template = "txo.events.{aggregate_type}";
    o->delivery_timeout_ms = 10000;
    o->group = "txo-worker";
    o->retry_delay_ms = 1000;
}

/* Properties txo sets itself, for the guarantees in txo/kafka.h or through its own option. */
static const char *const reserved_properties[] = {
    "bootstrap.servers",
    "metadata.broker.list",
    "group.id",
    "enable.idempotence",
    "acks",
    "request.required.acks",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "message.timeout.ms",
    "delivery.timeout.ms",
};

static bool is_reserved(const char *key, size_t len)
{
    for (size_t i = 0; i < sizeof(reserved_properties) / sizeof(reserved_properties[0]); i++) {
        if (strlen(reserved_properties[i]) == len && memcmp(reserved_properties[i], key, len) == 0)
            return true;
    }
    return false;
}

int txo__kafka_check_opts(const struct txo_kafka_opts *o, const char *role, struct txo_error *err)
{
    if (o == NULL)
        return txo_error_set(err, TXO_EINVAL, "kafka %s: options are required", role);
    if (o->brokers == NULL || o->brokers[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "kafka %s: brokers is empty", role);
    char topic[TXO__KAFKA_TOPIC_MAX + 1];
    if (o->topic_template == NULL ||
        txo_kafka_topic(o->topic_template, "a", "b", topic, sizeof(topic), NULL) < 0)
        return txo_error_set(err, TXO_EINVAL,
                             "kafka %s: topic_template \"%s\" is not a template (placeholders "
                             "{aggregate_type} and {event_type}, at most 249 bytes)",
                             role, o->topic_template != NULL ? o->topic_template : "");
    if (o->n_properties > 0 && o->properties == NULL)
        return txo_error_set(err, TXO_EINVAL, "kafka %s: properties is NULL", role);
    for (size_t i = 0; i < o->n_properties; i++) {
        const char *kv = o->properties[i];
        const char *eq = kv != NULL ? strchr(kv, '=') : NULL;
        if (eq == NULL || eq == kv)
            return txo_error_set(err, TXO_EINVAL, "kafka %s: property \"%s\" is not key=value",
                                 role, kv != NULL ? kv : "");
        if (is_reserved(kv, (size_t)(eq - kv)))
            return txo_error_set(err, TXO_EINVAL,
                                 "kafka %s: property %.*s is set by txo (use its own option, "
                                 "or it is needed for the delivery guarantees)",
                                 role, (int)(eq - kv), kv);
    }
    if (o->delivery_timeout_ms < 1 || o->delivery_timeout_ms > INT32_MAX)
        return txo_error_set(err, TXO_EINVAL,
                             "kafka %s: delivery_timeout_ms must be 1..%d, got %" PRId64, role,
                             INT32_MAX, o->delivery_timeout_ms);
    if (strcmp(role, "consumer") != 0)
        return 0;
    if (o->group == NULL || o->group[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "kafka consumer: group is empty");
    if (o->topics == NULL || strspn(o->topics, ", ") == strlen(o->topics))
        return txo_error_set(err, TXO_EINVAL, "kafka consumer: topics is empty");
    if (o->retry_delay_ms < 0)
        return txo_error_set(err, TXO_EINVAL, "kafka consumer: retry_delay_ms must be >= 0");
    if (o->dead_letter_topic != NULL && o->dead_letter_topic[0] == '\0')
        return txo_error_set(err, TXO_EINVAL,
                             "kafka consumer: dead_letter_topic is empty (NULL for none)");
    return 0;
}

/* ---- topics ---- */

static bool topic_char(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '_' || ch == '-';
}

/* Appends s[0..len) to out[*n..cap) with bytes Kafka refuses as '_'. */
static bool append_sanitised(char *out, size_t cap, size_t *n, const char *s, size_t len)
{
    if (*n + len + 1 > cap)
        return false;
    for (size_t i = 0; i < len; i++)
        out[(*n)++] = topic_char((unsigned char)s[i]) ? s[i] : '_';
    out[*n] = '\0';
    return true;
}

int txo_kafka_topic(const char *template, const char *aggregate_type, const char *event_type,
                    char *out, size_t out_size, struct txo_error *err)
{
    if (out != NULL && out_size > 0)
        out[0] = '\0';
    if (template == NULL || aggregate_type == NULL || event_type == NULL || out == NULL ||
        out_size == 0)
        return txo_error_set(err, TXO_EINVAL, "kafka topic: missing argument");
    size_t cap = out_size < TXO__KAFKA_TOPIC_MAX + 1 ? out_size : TXO__KAFKA_TOPIC_MAX + 1;
    size_t n = 0;
    bool ok = true;
    for (const char *s = template; *s != '\0' && ok;) {
        if (*s != '{') {
            size_t run = strcspn(s, "{");
            ok = append_sanitised(out, cap, &n, s, run);
            s += run;
            continue;
        }
        const char *value = NULL;
        size_t skip = 0;
        if (strncmp(s, "{aggregate_type}", 16) == 0) {
            value = aggregate_type;
            skip = 16;
        } else if (strncmp(s, "{event_type}", 12) == 0) {
            value = event_type;
            skip = 12;
        } else {
            out[0] = '\0';
            return txo_error_set(err, TXO_EINVAL,
                                 "kafka topic: unknown placeholder in \"%s\" (only "
                                 "{aggregate_type} and {event_type})",
                                 template);
        }
        ok = value[0] != '\0' ? append_sanitised(out, cap, &n, value, strlen(value))
                              : append_sanitised(out, cap, &n, "_", 1);
        s += skip;
    }
    if (!ok || n == 0 || strcmp(out, ".") == 0 || strcmp(out, "..") == 0) {
        out[0] = '\0';
        return txo_error_set(err, TXO_EINVAL,
                             "kafka topic: \"%s\" gives an empty, invalid or too long topic "
                             "(Kafka allows 249 bytes; buffer %zu)",
                             template, out_size);
    }
    return 0;
}

/* ---- errors ---- */

int txo__kafka_code(rd_kafka_resp_err_t e)
{
    switch (e) {
    case RD_KAFKA_RESP_ERR_NO_ERROR:
        return 0;
    /* The cluster refuses this very record, and would refuse it again. */
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
        return TXO_EINVAL;
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
        return TXO_ECONFIG;
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE:
    case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
        return TXO_ETIMEOUT;
    case RD_KAFKA_RESP_ERR__TRANSPORT:
    case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
    case RD_KAFKA_RESP_ERR__RESOLVE:
    case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
    case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_BROKER_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION:
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS:
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
    case RD_KAFKA_RESP_ERR__NODE_UPDATE:
        return TXO_EUNAVAILABLE;
    default:
        return TXO_EPUBLISH;
    }
}

/* ---- configuration ---- */

/* librdkafka's log lines (from its own threads), as ours: its levels are syslog's. */
static void log_bridge(const rd_kafka_t *rk, int level, const char *facility, const char *line)
{
    enum txo_log_level l = level <= 4 ? TXO_LOG_WARN : level <= 6 ? TXO_LOG_INFO : TXO_LOG_DEBUG;
    TXO_LOG(l, "kafka", "librdkafka", TXO_KV_STR("client", rd_kafka_name(rk)),
            TXO_KV_STR("facility", facility), TXO_KV_STR("message", line));
}

/* A property whose value must never reach a log line (its error text may quote it). */
static bool secret_key(const char *key)
{
    return strstr(key, "password") != NULL || strstr(key, "secret") != NULL ||
           strstr(key, "key") != NULL || strstr(key, "jaas") != NULL;
}

static int conf_set(rd_kafka_conf_t *conf, const char *role, const char *key, const char *value,
                    struct txo_error *err)
{
    char errstr[ERRSTR_MAX];
    rd_kafka_conf_res_t r = rd_kafka_conf_set(conf, key, value, errstr, sizeof(errstr));
    if (r == RD_KAFKA_CONF_OK)
        return 0;
    return txo_error_set(err, TXO_ECONFIG, "kafka %s: librdkafka refused property %s: %s", role,
                         key, secret_key(key) ? "invalid value" : errstr);
}

int txo__kafka_conf_new(const struct txo_kafka_opts *o, const char *role, const char *const *fixed,
                        size_t n_fixed, rd_kafka_conf_t **out, struct txo_error *err)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (conf == NULL)
        return txo_error_set(err, TXO_ENOMEM, "kafka %s: out of memory", role);
    char client_id[32];
    snprintf(client_id, sizeof(client_id), "txo-%s", role);
    int rc = conf_set(conf, role, "bootstrap.servers", o->brokers, err);
    if (rc == 0)
        rc = conf_set(conf, role, "client.id", client_id, err);
    for (size_t i = 0; rc == 0 && i < n_fixed; i++)
        rc = conf_set(conf, role, fixed[2 * i], fixed[2 * i + 1], err);
    for (size_t i = 0; rc == 0 && i < o->n_properties; i++) {
        const char *kv = o->properties[i];
        const char *eq = strchr(kv, '=');
        char *key = txo_strndup(kv, (size_t)(eq - kv));
        if (key == NULL) {
            rc = txo_error_set(err, TXO_ENOMEM, "kafka %s: out of memory", role);
            break;
        }
        rc = conf_set(conf, role, key, eq + 1, err);
        txo_free(key);
    }
    if (rc < 0) {
        rd_kafka_conf_destroy(conf);
        return rc;
    }
    rd_kafka_conf_set_log_cb(conf, log_bridge);
    *out = conf;
    return 0;
}

/* ---- the publisher ---- */

struct kafka_publisher {
    /* Copies of the options. */
    char *brokers;
    char *topic_template;
    char **properties;
    size_t n_properties;
    int64_t delivery_timeout_ms;

    rd_kafka_t *rk; /* NULL after a fatal error, until the next batch */

    /* The current batch, touched only on the relay's thread (reports come through poll). */
    uintptr_t gen;
    size_t n;
    size_t pending;
    int *results; /* NULL between batches: every report then is of an old batch */
    struct txo_error *errors;
    int64_t *produced_ms; /* when message i was handed to librdkafka */
    size_t cap;

    /* Metrics families (NULL without a registry). */
    struct txo_metric *m_published;
    struct txo_metric *m_errors;
    struct txo_metric *m_in_flight;
    struct txo_metric *m_delivery;
};

static const uintptr_t index_mask = ((uintptr_t)1 << INDEX_BITS) - 1;

static uintptr_t tag_of(uintptr_t gen, size_t i)
{
    return (gen << INDEX_BITS) | ((uintptr_t)i & index_mask);
}

static void count_error(struct kafka_publisher *p, int code)
{
    if (p->m_errors != NULL)
        txo_metric_inc(p->m_errors, (const char *const[]){
                                        txo_err_is_transient(code) ? "transient" : "permanent"});
}

/* Delivery report: runs inside rd_kafka_poll()/rd_kafka_flush() on the calling thread. */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    struct kafka_publisher *p = opaque;
    uintptr_t tag = (uintptr_t)m->_private;
    size_t i = (size_t)(tag & index_mask);
    bool current = p->results != NULL && tag == tag_of(p->gen, i) && i < p->n &&
                   p->results[i] == RESULT_PENDING;
    if (!current) {
        /* A record an earlier batch gave up on: the relay already counted it as timed out. */
        TXO_LOG(TXO_LOG_DEBUG, "kafka", "late delivery report of an earlier batch",
                TXO_KV_STR("error", rd_kafka_err2str(m->err)));
        return;
    }
    p->pending--;
    int code = txo__kafka_code(m->err);
    if (code == 0) {
        p->results[i] = 0;
        if (p->m_published != NULL)
            txo_metric_inc(p->m_published, NULL);
        if (p->m_delivery != NULL)
            txo_metric_observe(p->m_delivery, NULL,
                               (double)(txo_monotonic_ms() - p->produced_ms[i]) / 1000.0);
        return;
    }
    p->results[i] = txo_error_set(&p->errors[i], code, "kafka publisher: delivery failed: %s (%s)",
                                  rd_kafka_err2str(m->err), rd_kafka_err2name(m->err));
    count_error(p, code);
}

static void on_error(rd_kafka_t *rk, int e, const char *reason, void *opaque)
{
    (void)opaque;
    rd_kafka_resp_err_t code = (rd_kafka_resp_err_t)e;
    if (code == RD_KAFKA_RESP_ERR__FATAL) {
        char why[ERRSTR_MAX];
        rd_kafka_resp_err_t orig = rd_kafka_fatal_error(rk, why, sizeof(why));
        TXO_LOG(TXO_LOG_ERROR, "kafka", "fatal producer error, starting a new producer",
                TXO_KV_STR("error", rd_kafka_err2name(orig)), TXO_KV_STR("reason", why));
        return;
    }
    /* Connection failures are in librdkafka's own log lines already: only the summary here. */
    TXO_LOG(code == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN ? TXO_LOG_WARN : TXO_LOG_DEBUG, "kafka",
            "producer error", TXO_KV_STR("error", rd_kafka_err2name(code)),
            TXO_KV_STR("reason", reason));
}

static int producer_start(struct kafka_publisher *p, struct txo_error *err)
{
    char timeout[24];
    snprintf(timeout, sizeof(timeout), "%" PRId64, p->delivery_timeout_ms);
    const char *const fixed[] = {
        "enable.idempotence", "true", "acks", "all", "message.timeout.ms", timeout,
    };
    struct txo_kafka_opts o;
    txo_kafka_opts_init(&o);
    o.brokers = p->brokers;
    o.properties = (const char *const *)p->properties;
    o.n_properties = p->n_properties;
    rd_kafka_conf_t *conf = NULL;
    int rc = txo__kafka_conf_new(&o, "publisher", fixed, sizeof(fixed) / sizeof(fixed[0]) / 2,
                                 &conf, err);
    if (rc < 0)
        return rc;
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_opaque(conf, p);
    char errstr[ERRSTR_MAX];
    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (p->rk == NULL) {
        rd_kafka_conf_destroy(conf);
        return txo_error_set(err, TXO_ECONFIG, "kafka publisher: cannot create the producer: %s",
                             errstr);
    }
    TXO_LOG(TXO_LOG_INFO, "kafka", "producer started", TXO_KV_STR("brokers", p->brokers),
            TXO_KV_I64("delivery_timeout_ms", p->delivery_timeout_ms));
    return 0;
}

static void producer_stop(struct kafka_publisher *p)
{
    if (p->rk == NULL)
        return;
    p->results = NULL; /* reports served by the flush belong to no batch */
    if (rd_kafka_flush(p->rk, CLOSE_FLUSH_MS) != RD_KAFKA_RESP_ERR_NO_ERROR)
        TXO_LOG(TXO_LOG_WARN, "kafka",
                "producer closed with records in flight (the relay publishes them again)",
                TXO_KV_I64("records", rd_kafka_outq_len(p->rk)));
    rd_kafka_destroy(p->rk);
    p->rk = NULL;
}

static int grow(struct kafka_publisher *p, size_t n)
{
    if (n <= p->cap)
        return 0;
    if (TXO_ARRAY_RESIZE(p->produced_ms, n) < 0)
        return TXO_ENOMEM;
    p->cap = n;
    return 0;
}

/* The headers of one record: the contract's two, plus CloudEvents' in binary mode. */
static rd_kafka_headers_t *record_headers(const struct txo_outbox_message *m,
                                          const struct txo__wire *w)
{
    const struct txo_ce_headers *ce = &w->headers;
    rd_kafka_headers_t *h = rd_kafka_headers_new(3 + ce->n + w->plain.n);
    rd_kafka_resp_err_t e =
        rd_kafka_header_add(h, TXO_KAFKA_HEADER_IDEMPOTENCY_KEY, -1, m->idempotency_key, -1);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
        e = rd_kafka_header_add(h, TXO_KAFKA_HEADER_EVENT_TYPE, -1,
                                m->event_type != NULL ? m->event_type : "", -1);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR && w->binary)
        e = rd_kafka_header_add(h, "content-type", -1, "application/json", -1);
    for (size_t k = 0; e == RD_KAFKA_RESP_ERR_NO_ERROR && k < ce->n; k++) {
        /* The Kafka binding spells the attributes ce_<name>, HTTP's ce-<name>. */
        char name[64];
        snprintf(name, sizeof(name), "ce_%s", ce->names[k] + 3);
        e = rd_kafka_header_add(h, name, -1, ce->values[k], -1);
    }
    for (size_t k = 0; e == RD_KAFKA_RESP_ERR_NO_ERROR && k < w->plain.n; k++)
        e = rd_kafka_header_add(h, w->plain.names[k], -1, w->plain.values[k], -1);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_headers_destroy(h);
        return NULL;
    }
    return h;
}

/* Produces message i; sets results[i] to a failure or leaves it pending. */
static void produce_one(struct kafka_publisher *p, const struct txo_outbox_message *m, size_t i,
                        int64_t deadline_ms, int *results, struct txo_error *errors)
{
    char topic[TXO__KAFKA_TOPIC_MAX + 1];
    struct txo__wire w;
    int rc = txo__wire_encode_to("kafka publisher", txo_kafka_topic, p->topic_template, m, topic,
                                 sizeof(topic), &w, &errors[i]);
    if (rc < 0) {
        results[i] = rc;
        return;
    }
    rd_kafka_headers_t *h = record_headers(m, &w);
    if (h == NULL) {
        txo__wire_release(&w);
        results[i] = txo_error_set(&errors[i], TXO_EINVAL, "kafka publisher: bad header");
        return;
    }
    const char *key = m->aggregate_id != NULL ? m->aggregate_id : "";
    p->produced_ms[i] = txo_monotonic_ms();
    rd_kafka_resp_err_t e;
    for (;;) {
        e = rd_kafka_producev(p->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, strlen(key)),
                              RD_KAFKA_V_VALUE(w.body, w.len),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h),
                              RD_KAFKA_V_OPAQUE((void *)tag_of(p->gen, i)), RD_KAFKA_V_END);
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL || txo_monotonic_ms() >= deadline_ms)
            break;
        rd_kafka_poll(p->rk, 10); /* serves reports, which frees room in the queue */
    }
    txo__wire_release(&w); /* RD_KAFKA_MSG_F_COPY: the producer has its copy */
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
        p->pending++;
        return;
    }
    rd_kafka_headers_destroy(h); /* still ours: producev takes it only on success */
    rc = txo__kafka_code(e);
    results[i] = txo_error_set(&errors[i], rc, "kafka publisher: produce failed: %s (%s)",
                               rd_kafka_err2str(e), rd_kafka_err2name(e));
    count_error(p, rc);
}

static void fail_all(size_t n, int *results, struct txo_error *errors, const struct txo_error *why)
{
    for (size_t i = 0; i < n; i++) {
        errors[i] = *why;
        results[i] = why->code;
    }
}

static int kafka_publish_batch(void *self, const struct txo_outbox_message *msgs, size_t n,
                               int *results, struct txo_error *errors)
{
    struct kafka_publisher *p = self;
    if (n == 0)
        return 0;
    struct txo_error why;
    txo_error_init(&why);
    int rc = 0;
    if (n > index_mask)
        rc = txo_error_set(&why, TXO_EINVAL, "kafka publisher: batch of %zu is too large", n);
    if (rc == 0 && p->rk == NULL && producer_start(p, &why) < 0) {
        /* The configuration worked at creation: whatever failed now may pass later. */
        why.code = TXO_EPUBLISH;
        rc = TXO_EPUBLISH;
    }
    if (rc == 0 && grow(p, n) < 0)
        rc =
            txo_error_set(&why, TXO_ENOMEM, "kafka publisher: out of memory for a batch of %zu", n);
    if (rc < 0) {
        fail_all(n, results, errors, &why);
        return 0;
    }

    int64_t t0 = txo_monotonic_ms();
    int64_t deadline = t0 + p->delivery_timeout_ms + DRAIN_GRACE_MS;
    p->gen = (p->gen + 1) & (UINTPTR_MAX >> INDEX_BITS);
    p->n = n;
    p->pending = 0;
    p->results = results;
    p->errors = errors;
    for (size_t i = 0; i < n; i++)
        results[i] = RESULT_PENDING;
    for (size_t i = 0; i < n; i++)
        produce_one(p, &msgs[i], i, deadline, results, errors);
    if (p->m_in_flight != NULL)
        txo_metric_set(p->m_in_flight, NULL, (double)rd_kafka_outq_len(p->rk));
    while (p->pending > 0) {
        int64_t left = deadline - txo_monotonic_ms();
        if (left <= 0)
            break;
        rd_kafka_poll(p->rk, (int)(left < POLL_SLICE_MS ? left : POLL_SLICE_MS));
    }
    size_t n_timed_out = p->pending;
    p->results = NULL;
    p->errors = NULL;
    for (size_t i = 0; i < n; i++) {
        if (results[i] == RESULT_PENDING) {
            results[i] = txo_error_set(&errors[i], TXO_ETIMEOUT,
                                       "kafka publisher: no delivery report within %" PRId64
                                       " ms (the record may have been written)",
                                       p->delivery_timeout_ms);
            count_error(p, TXO_ETIMEOUT);
        }
    }
    if (p->m_in_flight != NULL)
        txo_metric_set(p->m_in_flight, NULL, (double)rd_kafka_outq_len(p->rk));
    char fatal[ERRSTR_MAX];
    if (rd_kafka_fatal_error(p->rk, fatal, sizeof(fatal)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        for (size_t i = 0; i < n; i++) {
            if (results[i] == 0 || !txo_err_is_transient(results[i]))
                continue; /* delivered, or refused for good whatever the producer */
            results[i] = txo_error_set(&errors[i], TXO_EPUBLISH,
                                       "kafka publisher: fatal producer error: %s", fatal);
        }
        producer_stop(p); /* the next batch starts a new producer (a new idempotence session) */
    }
    size_t n_ok = 0;
    for (size_t i = 0; i < n; i++)
        n_ok += results[i] == 0;
    TXO_LOG(TXO_LOG_DEBUG, "kafka", "batch published", TXO_KV_U64("size", n),
            TXO_KV_U64("delivered", n_ok), TXO_KV_U64("timed_out", n_timed_out),
            TXO_KV_I64("elapsed_ms", txo_monotonic_ms() - t0));
    return 0;
}

static void kafka_publisher_destroy(void *self)
{
    struct kafka_publisher *p = self;
    producer_stop(p);
    txo_free(p->brokers);
    txo_free(p->topic_template);
    for (size_t i = 0; i < p->n_properties; i++)
        txo_free(p->properties[i]);
    txo_free(p->properties);
    txo_free(p->produced_ms);
    txo_free(p);
}

static const struct txo_publisher_ops kafka_ops = {
    .name = "kafka",
    .publish_batch = kafka_publish_batch,
    .destroy = kafka_publisher_destroy,
    .flags = 0, /* not QUICK: an outage makes a batch wait for delivery_timeout_ms */
};

static const char *const by_kind[] = {"kind"};

static const struct txo_metric_desc families[] = {
    {TXO_METRIC_COUNTER, "txo_kafka_messages_published_total",
     "Records the Kafka cluster confirmed (delivery report without error).", 0, NULL},
    {TXO_METRIC_COUNTER, "txo_kafka_publish_errors_total",
     "Records the Kafka publisher failed, by kind (transient: retried by the relay; permanent: "
     "dead-lettered).",
     1, by_kind},
    {TXO_METRIC_GAUGE, "txo_kafka_messages_in_flight",
     "Records handed to librdkafka and not yet reported on.", 0, NULL},
    {TXO_METRIC_HISTOGRAM, "txo_kafka_delivery_seconds",
     "Time from handing a record to librdkafka to its delivery report.", 0, NULL},
};

static int register_metrics(struct kafka_publisher *p, struct txo_metrics *reg,
                            struct txo_error *err)
{
    struct txo_metric **const slots[] = {&p->m_published, &p->m_errors, &p->m_in_flight,
                                         &p->m_delivery};
    int rc = txo__transport_metrics(reg, families, TXO_ARRAY_LEN(families), slots, err);
    if (rc == 0 && p->m_errors != NULL) {
        txo_metric_add(p->m_errors, (const char *const[]){"transient"}, 0);
        txo_metric_add(p->m_errors, (const char *const[]){"permanent"}, 0);
    }
    return rc;
}

static int kafka_publisher_init(void *self, const struct txo__transport_args *a,
                                struct txo_error *err)
{
    struct kafka_publisher *p = self;
    const struct txo_kafka_opts *o = a->opts;
    p->delivery_timeout_ms = o->delivery_timeout_ms;
    p->brokers = txo_strdup(o->brokers);
    p->topic_template = txo_strdup(o->topic_template);
    p->properties = o->n_properties > 0 ? txo_calloc(o->n_properties, sizeof(char *)) : NULL;
    bool oom = p->brokers == NULL || p->topic_template == NULL ||
               (o->n_properties > 0 && p->properties == NULL);
    for (size_t i = 0; !oom && i < o->n_properties; i++) {
        p->properties[i] = txo_strdup(o->properties[i]);
        oom = p->properties[i] == NULL;
        p->n_properties = i + 1;
    }
    if (oom)
        return txo_error_set(err, TXO_ENOMEM, "kafka publisher: out of memory");
    int rc = register_metrics(p, a->metrics, err);
    if (rc == 0)
        rc = producer_start(p, err);
    return rc;
}

int txo_publisher_kafka_new(const struct txo_kafka_opts *o, struct txo_metrics *metrics,
                            struct txo_publisher **out, struct txo_error *err)
{
    int rc = txo__kafka_check_opts(o, "publisher", err);
    if (rc < 0)
        return rc;
    struct txo__transport_args a = {.opts = o, .metrics = metrics};
    return txo__publisher_build(&kafka_ops, sizeof(struct kafka_publisher), kafka_publisher_init,
                                &a, out, err);
}

/* GCC says __SANITIZE_THREAD__, clang __has_feature(thread_sanitizer). */
#if defined(__SANITIZE_THREAD__)
#define KAFKA_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KAFKA_TSAN 1
#endif
#endif

#ifdef KAFKA_TSAN
/*
 * ThreadSanitizer builds only. librdkafka starts and joins its threads with C11 thrd_create()
 * and thrd_join(), which glibc implements without going through pthread_create() and
 * pthread_join(): ThreadSanitizer never learns of those threads and crashes in its allocator
 * on their first malloc. Defined here (so in every program that uses the Kafka transport),
 * these take precedence over glibc's for librdkafka's calls and go through the intercepted
 * pthread functions; thrd_t is pthread_t in glibc, and glibc's own thrd_join() reads the
 * thread's exit value as its int result, which the trampoline returns.
 *
 * librdkafka itself is not instrumented and locks with C11 mtx_lock(), which ThreadSanitizer
 * does not see either, so the memory functions it calls would be reported as races that are
 * none: tests/tsan.supp ignores the interceptors called from librdkafka (our code is still
 * checked).
 */
#include <pthread.h>
#include <threads.h>

struct thrd_start {
    thrd_start_t fn;
    void *arg;
};

static void *thrd_trampoline(void *p)
{
    struct thrd_start s = *(struct thrd_start *)p;
    free(p);
    return (void *)(intptr_t)s.fn(s.arg);
}

__attribute__((visibility("default"))) int thrd_create(thrd_t *thr, thrd_start_t fn, void *arg);
__attribute__((visibility("default"))) int thrd_join(thrd_t thr, int *res);
__attribute__((visibility("default"))) int thrd_detach(thrd_t thr);

int thrd_create(thrd_t *thr, thrd_start_t fn, void *arg)
{
    struct thrd_start *s = malloc(sizeof(*s)); /* not txo_malloc: librdkafka's, not ours */
    if (s == NULL)
        return thrd_nomem;
    s->fn = fn;
    s->arg = arg;
    int rc = pthread_create(thr, NULL, thrd_trampoline, s);
    if (rc != 0) {
        free(s);
        return rc == ENOMEM || rc == EAGAIN ? thrd_nomem : thrd_error;
    }
    return thrd_success;
}

int thrd_join(thrd_t thr, int *res)
{
    void *ret = NULL;
    if (pthread_join(thr, &ret) != 0)
        return thrd_error;
    if (res != NULL)
        *res = (int)(intptr_t)ret;
    return thrd_success;
}

int thrd_detach(thrd_t thr)
{
    return pthread_detach(thr) == 0 ? thrd_success : thrd_error;
}
#endif
