#include "core/common.h"

/*
 * The Redis Streams publisher (txo/redis.h): one XADD per outbox event, the whole batch
 * pipelined on one connection.
 *
 * One batch, redis_publish_batch():
 *   1. Connect if there is no connection (the previous batch may have dropped it). When that
 *      fails, every message fails at once with TXO_EUNAVAILABLE: the relay keeps the rows
 *      PENDING with backoff.
 *   2. Encode each message and append its XADD to hiredis's output buffer
 *      (redisAppendCommandArgv); a message that cannot be encoded fails alone with TXO_EINVAL
 *      and sends nothing, so reply k belongs to the k-th message that was appended.
 *   3. Read the replies in order, at most timeout_ms in all (the socket timeout is lowered as
 *      the deadline comes closer). A bulk reply is the entry id: acknowledged. An error reply
 *      fails that message alone (txo__redis_reply_code). When the socket times out or breaks,
 *      the messages whose replies are missing fail with TXO_ETIMEOUT or TXO_EUNAVAILABLE: the
 *      server may have stored them, and the relay publishes them again (no producer dedupe in
 *      Redis: the consumer's inbox drops the duplicate). The connection is dropped then, so no
 *      late reply can be taken for a later batch's.
 *
 * Error messages in errors[] carry no per-event detail, so the relay can mark a failed batch
 * with one UPDATE per distinct error.
 *
 * Ownership: the publisher owns its connection and a per-batch index (grown to the largest
 * batch seen); the metric families belong to the registry. Thread-safety: one relay thread.
 */

#include "broker/redis_internal.h"
#include "broker/transport.h"
#include "broker/wire.h"

#define MAX_ARGS      52 /* XADD stream MAXLEN ~ N * + up to 23 field pairs */
#define OUTBOX_ID_MAX 24

struct redis_metrics {
    struct txo_metric *published;
    struct txo_metric *failed;
    struct txo_metric *in_flight;
    struct txo_metric *reply_seconds;
};

struct redis_publisher {
    struct txo__redis_conn conn;
    char *stream_template;
    int64_t maxlen;
    char maxlen_text[24];
    struct redis_metrics m;
    size_t cap;
    size_t *sent; /* sent[k]: the message index of the k-th appended XADD */
};

/* One XADD's arguments: the fixed strings point into the message or at the buffers here. */
struct xadd {
    int argc;
    const char *argv[MAX_ARGS];
    size_t lens[MAX_ARGS];
    char stream[TXO__REDIS_STREAM_MAX];
    char outbox_id[OUTBOX_ID_MAX];
    struct txo__wire w;                    /* the body and the headers that become fields */
    char ce_names[TXO_CE_HEADERS_MAX][32]; /* "ce_type" for the header "ce-type" */
};

static void arg(struct xadd *x, const char *s, size_t len)
{
    TXO_ASSERT(x->argc < MAX_ARGS);
    x->argv[x->argc] = s;
    x->lens[x->argc] = len;
    x->argc++;
}

static void arg_str(struct xadd *x, const char *s)
{
    arg(x, s, strlen(s));
}

static void field(struct xadd *x, const char *name, const char *value)
{
    arg_str(x, name);
    arg_str(x, value != NULL ? value : "");
}

static void xadd_release(struct xadd *x)
{
    txo__wire_release(&x->w);
}

/* Builds the XADD of m (see the field list in txo/redis.h). Returns 0 or a TXO_E* code. */
static int xadd_build(struct redis_publisher *p, const struct txo_outbox_message *m, struct xadd *x,
                      struct txo_error *err)
{
    x->argc = 0;
    int rc = txo__wire_encode_to("redis publisher", txo_redis_stream_name, p->stream_template, m,
                                 x->stream, sizeof(x->stream), &x->w, err);
    if (rc < 0)
        return rc;
    snprintf(x->outbox_id, sizeof(x->outbox_id), "%" PRId64, m->id);

    arg_str(x, "XADD");
    arg_str(x, x->stream);
    if (p->maxlen > 0) {
        arg_str(x, "MAXLEN");
        arg_str(x, "~");
        arg_str(x, p->maxlen_text);
    }
    arg_str(x, "*");
    field(x, TXO__REDIS_F_KEY, m->idempotency_key);
    field(x, TXO__REDIS_F_TYPE, m->event_type);
    field(x, TXO__REDIS_F_AGG_TYPE, m->aggregate_type);
    field(x, TXO__REDIS_F_AGG_ID, m->aggregate_id);
    field(x, TXO__REDIS_F_ID, x->outbox_id);
    for (size_t h = 0; h < x->w.plain.n; h++)
        field(x, x->w.plain.names[h], x->w.plain.values[h]);
    if (!x->w.binary) {
        arg_str(x, TXO__REDIS_F_ENVELOPE);
        arg(x, x->w.body, x->w.len);
        return 0;
    }
    arg_str(x, TXO__REDIS_F_DATA);
    arg(x, x->w.body, x->w.len);
    field(x, TXO__REDIS_F_CTYPE, "application/json");
    const struct txo_ce_headers *hs = &x->w.headers;
    for (size_t h = 0; h < hs->n; h++) {
        /* "ce-type" -> "ce_type": field names that read the same in every client. */
        snprintf(x->ce_names[h], sizeof(x->ce_names[h]), "%s", hs->names[h]);
        for (char *q = x->ce_names[h]; *q != '\0'; q++)
            if (*q == '-')
                *q = '_';
        field(x, x->ce_names[h], hs->values[h]);
    }
    return 0;
}

static void fail_all(size_t n, int *results, struct txo_error *errors, const struct txo_error *why)
{
    for (size_t i = 0; i < n; i++) {
        errors[i] = *why;
        results[i] = why->code;
    }
}

static int grow(struct redis_publisher *p, size_t n)
{
    if (n <= p->cap)
        return 0;
    if (TXO_ARRAY_RESIZE(p->sent, n) < 0)
        return TXO_ENOMEM;
    p->cap = n;
    return 0;
}

/* Reads the replies of the n_sent appended XADDs into results[], within timeout_ms. */
static void read_replies(struct redis_publisher *p, size_t n_sent, int *results,
                         struct txo_error *errors, size_t *n_ok)
{
    struct txo__redis_conn *c = &p->conn;
    int64_t deadline = txo_monotonic_ms() + c->timeout_ms;
    int64_t sock_timeout = c->timeout_ms;
    struct txo_error io;
    txo_error_init(&io);
    size_t k = 0;
    for (; k < n_sent; k++) {
        int64_t left = deadline - txo_monotonic_ms();
        if (left <= 0) {
            txo_error_set(&io, TXO_ETIMEOUT,
                          "redis publisher: no XADD reply within %" PRId64
                          " ms (maybe stored: published again)",
                          c->timeout_ms);
            break;
        }
        if (left < sock_timeout / 2) {
            sock_timeout = left;
            if (txo__redis_set_timeout(c, left, &io) < 0)
                break;
        }
        void *raw = NULL;
        errno = 0;
        int st = redisGetReply(c->ctx, &raw);
        int saved = errno;
        if (st != REDIS_OK || raw == NULL) {
            int code = txo__redis_io_code(c->ctx, saved);
            if (code == TXO_ETIMEOUT)
                txo_error_set(&io, code,
                              "redis publisher: no XADD reply within %" PRId64
                              " ms (maybe stored: published again)",
                              c->timeout_ms);
            else
                txo_error_set(&io, code,
                              "redis publisher: connection to %s lost before the XADD reply "
                              "(maybe stored: published again): %s",
                              c->where, c->ctx->errstr);
            break;
        }
        redisReply *r = raw;
        size_t i = p->sent[k];
        if (r->type == REDIS_REPLY_STRING) {
            results[i] = 0;
            (*n_ok)++;
        } else if (r->type == REDIS_REPLY_ERROR) {
            int code = txo__redis_reply_code(r->str, TXO_EPUBLISH);
            results[i] =
                txo_error_set(&errors[i], code, "redis publisher: XADD refused: %s", r->str);
        } else {
            results[i] =
                txo_error_set(&errors[i], TXO_EPUBLISH,
                              "redis publisher: unexpected XADD reply of type %d", r->type);
        }
        freeReplyObject(r);
    }
    if (k < n_sent) {
        /* The rest of the pipeline's replies cannot be matched any more: drop the connection. */
        for (; k < n_sent; k++) {
            errors[p->sent[k]] = io;
            results[p->sent[k]] = io.code;
        }
        TXO_LOG(TXO_LOG_WARN, "redis", "batch interrupted, connection dropped",
                TXO_KV_STR("error", io.msg));
        txo__redis_drop(c);
    } else if (sock_timeout != c->timeout_ms) {
        struct txo_error ignored;
        txo_error_init(&ignored);
        (void)txo__redis_set_timeout(c, c->timeout_ms, &ignored);
    }
}

static void count(struct txo_metric *m, double v)
{
    if (m != NULL && v != 0)
        txo_metric_add(m, NULL, v);
}

static int redis_publish_batch(void *self, const struct txo_outbox_message *msgs, size_t n,
                               int *results, struct txo_error *errors)
{
    struct redis_publisher *p = self;
    struct txo__redis_conn *c = &p->conn;
    if (n == 0)
        return 0;
    struct txo_error why;
    txo_error_init(&why);
    int rc = txo__redis_connect(c, &why);
    if (rc == 0 && grow(p, n) < 0)
        rc =
            txo_error_set(&why, TXO_ENOMEM, "redis publisher: out of memory for a batch of %zu", n);
    if (rc < 0) {
        fail_all(n, results, errors, &why);
        count(p->m.failed, (double)n);
        return 0;
    }

    int64_t t0 = txo_monotonic_ms();
    struct xadd *x = txo_malloc(sizeof(*x));
    if (x == NULL) {
        txo_error_set(&why, TXO_ENOMEM, "redis publisher: out of memory");
        fail_all(n, results, errors, &why);
        count(p->m.failed, (double)n);
        return 0;
    }
    size_t n_sent = 0;
    for (size_t i = 0; i < n; i++) {
        results[i] = xadd_build(p, &msgs[i], x, &errors[i]);
        if (results[i] == 0 &&
            redisAppendCommandArgv(c->ctx, x->argc, x->argv, x->lens) != REDIS_OK)
            results[i] = txo_error_set(&errors[i], TXO_ENOMEM,
                                       "redis publisher: out of memory buffering an XADD");
        xadd_release(x);
        if (results[i] == 0)
            p->sent[n_sent++] = i;
    }
    txo_free(x);

    size_t n_ok = 0;
    count(p->m.in_flight, (double)n_sent);
    if (n_sent > 0)
        read_replies(p, n_sent, results, errors, &n_ok);
    count(p->m.in_flight, -(double)n_sent);
    int64_t elapsed_ms = txo_monotonic_ms() - t0;
    if (p->m.reply_seconds != NULL && n_sent > 0)
        txo_metric_observe(p->m.reply_seconds, NULL, (double)elapsed_ms / 1000.0);
    count(p->m.published, (double)n_ok);
    count(p->m.failed, (double)(n - n_ok));
    TXO_LOG(TXO_LOG_DEBUG, "redis", "batch published", TXO_KV_U64("size", n),
            TXO_KV_U64("acked", n_ok), TXO_KV_I64("elapsed_ms", elapsed_ms));
    return 0;
}

static void redis_publisher_destroy(void *self)
{
    struct redis_publisher *p = self;
    txo__redis_conn_release(&p->conn);
    txo_free(p->stream_template);
    txo_free(p->sent);
    txo_free(p);
}

static const struct txo_publisher_ops redis_ops = {
    .name = "redis",
    .publish_batch = redis_publish_batch,
    .destroy = redis_publisher_destroy,
    .flags = TXO_PUBLISHER_QUICK,
};

static const struct txo_metric_desc families[] = {
    {TXO_METRIC_COUNTER, "txo_redis_published_total",
     "Events the Redis server acknowledged (XADD answered with an id).", 0, NULL},
    {TXO_METRIC_COUNTER, "txo_redis_publish_failed_total",
     "Events whose XADD failed, was refused or got no reply in time.", 0, NULL},
    {TXO_METRIC_GAUGE, "txo_redis_in_flight",
     "XADDs sent to the Redis server and not answered yet.", 0, NULL},
    {TXO_METRIC_HISTOGRAM, "txo_redis_reply_seconds",
     "Time from sending a pipelined batch of XADDs to its last reply.", 0, NULL},
};

static int register_metrics(struct redis_metrics *m, struct txo_metrics *reg, struct txo_error *err)
{
    struct txo_metric **const slots[] = {&m->published, &m->failed, &m->in_flight,
                                         &m->reply_seconds};
    int rc = txo__transport_metrics(reg, families, TXO_ARRAY_LEN(families), slots, err);
    if (rc < 0)
        txo_error_wrap(err, "redis publisher: registering its metrics");
    return rc;
}

static int redis_publisher_init(void *self, const struct txo__transport_args *a,
                                struct txo_error *err)
{
    struct redis_publisher *p = self;
    const struct txo_redis_opts *o = a->opts;
    p->maxlen = o->maxlen;
    snprintf(p->maxlen_text, sizeof(p->maxlen_text), "%" PRId64, o->maxlen);
    p->stream_template = txo_strdup(o->stream_template);
    if (p->stream_template == NULL)
        return txo_error_set(err, TXO_ENOMEM, "redis publisher: out of memory");
    int rc = txo__redis_conn_init(&p->conn, o, "publisher", err);
    if (rc == 0)
        rc = register_metrics(&p->m, a->metrics, err);
    return rc;
}

int txo_publisher_redis_new(const struct txo_redis_opts *o, struct txo_metrics *metrics,
                            struct txo_publisher **out, struct txo_error *err)
{
    int rc = txo__redis_check_opts(o, "publisher", err);
    if (rc < 0)
        return rc;
    struct txo__transport_args a = {.opts = o, .metrics = metrics};
    return txo__publisher_build(&redis_ops, sizeof(struct redis_publisher), redis_publisher_init,
                                &a, out, err);
}
