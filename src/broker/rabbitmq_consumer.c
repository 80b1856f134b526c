#include "core/common.h"

/*
 * The RabbitMQ queue consumer (txo/rabbitmq.h) behind a txo_consumer handle.
 *
 * One poll, rmq_poll():
 *   1. Open the connection if it is down (one attempt per poll) and set it up: declare the
 *      topology (opts.declare), basic.qos prefetch, basic.consume with manual acks. Failing
 *      that, return TXO_EUNAVAILABLE (or TXO_ECONFIG for a refused declaration) at once.
 *   2. amqp_consume_message waits up to timeout_ms for the first delivery, then takes what is
 *      already buffered without waiting, up to max_msgs and the prefetch (no more can be in
 *      flight).
 *   3. The deliveries go to the handler (txo__handler_run: a batch handler in one call, a
 *      per-message handler once per delivery), then each is settled by its verdict, in order:
 *        0          basic.ack;
 *        transient  republished to <queue>.retry with expiration = retry_delay_ms on the
 *                   retry connection (confirm mode, waited for), then basic.ack; RabbitMQ
 *                   dead-letters it back into <queue> when the TTL expires. If that republish
 *                   is not confirmed, basic.nack requeue=true (redelivered at once: no delay
 *                   rather than a lost message);
 *        permanent  basic.nack requeue=false: the queue's dead-letter exchange takes it to
 *                   <queue>.dlq.
 *   Any connection or protocol error drops the connection and ends the poll with
 *   TXO_EUNAVAILABLE; unacknowledged deliveries go back to the queue on the server
 *   (redelivered=true) and the next poll reconnects.
 *
 * Why a retry queue: AMQP 0-9-1 has no delayed NACK, and sleeping before a requeue would stall
 * every other message of the poll. A per-message TTL on a queue nobody consumes is RabbitMQ's
 * documented way to delay a message, and it survives a broker restart (durable, persistent).
 * The retry goes back through the default exchange to this queue only, not through the main
 * exchange, which would hand a second copy to every other queue bound to the event.
 *
 * The retry connection is separate so that waiting for its confirm never reads (and would
 * have to buffer) the deliveries arriving on the consuming channel.
 *
 * Ownership: the consumer owns both connections and the option copies; the handler and its
 * arg are borrowed. Thread-safety: one polling thread at a time.
 */

#include <sys/time.h>

#include "broker/consumer_internal.h"
#include "broker/rabbitmq_internal.h"
#include "broker/transport.h"

#define HEADERS_KEPT 32 /* string headers a handler can read through header() */

enum outcome { OUTCOME_ACK, OUTCOME_RETRY, OUTCOME_DEAD_LETTER, OUTCOME_N };
static const char *const outcome_names[OUTCOME_N] = {"ack", "retry", "dead_letter"};

struct rmq_consumer {
    struct txo__rmq_conn conn;  /* consuming channel, no confirms */
    struct txo__rmq_conn retry; /* republishing to <queue>.retry, confirm mode */
    char *queue;
    char *retry_queue;
    char *dlx;
    char *dlq;
    char *binding_key;
    bool consuming; /* basic.consume done on the current connection */
    struct txo_handler h;
    struct txo_metric *consumed; /* txo_rabbitmq_consumed_total{outcome}, or NULL */
};

/* One delivery as the handler sees it: NUL-terminated copies, freed after settling. */
struct delivery {
    struct txo_inbound_message in;
    char *data;
    char *msg_id;
    char *subject;
    size_t n_headers;
    char *names[HEADERS_KEPT];
    char *values[HEADERS_KEPT];
    const amqp_envelope_t *env;
};

static struct timeval tv_of_ms(int64_t ms)
{
    struct timeval tv;
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
    return tv;
}

/* ---- topology ---- */

static void add_str(amqp_table_entry_t *e, const char *key, const char *value)
{
    e->key = txo__rmq_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_UTF8;
    e->value.value.bytes = txo__rmq_bytes(value);
}

static int declare_queue(struct txo__rmq_conn *c, const char *name, amqp_table_t args,
                         struct txo_error *err)
{
    amqp_queue_declare(c->st, TXO__RMQ_CHANNEL, txo__rmq_bytes(name), 0, 1, 0, 0, args);
    char what[300];
    snprintf(what, sizeof(what), "declaring queue %s", name);
    return txo__rmq_check_rpc(c, what, err);
}

static int bind_queue(struct txo__rmq_conn *c, const char *queue, const char *exchange,
                      const char *key, struct txo_error *err)
{
    amqp_queue_bind(c->st, TXO__RMQ_CHANNEL, txo__rmq_bytes(queue), txo__rmq_bytes(exchange),
                    txo__rmq_bytes(key), amqp_empty_table);
    char what[600];
    snprintf(what, sizeof(what), "binding queue %s to %s with %s", queue, exchange, key);
    return txo__rmq_check_rpc(c, what, err);
}

/* <queue>.dlx -> <queue>.dlq, <queue>.retry (TTL dead-letters to <queue>), <queue>. */
static int declare_topology(struct rmq_consumer *rc, struct txo_error *err)
{
    struct txo__rmq_conn *c = &rc->conn;
    amqp_exchange_declare(c->st, TXO__RMQ_CHANNEL, txo__rmq_bytes(rc->dlx),
                          txo__rmq_bytes("fanout"), 0, 1, 0, 0, amqp_empty_table);
    char what[300];
    snprintf(what, sizeof(what), "declaring fanout exchange %s", rc->dlx);
    int r = txo__rmq_check_rpc(c, what, err);
    if (r == 0)
        r = declare_queue(c, rc->dlq, amqp_empty_table, err);
    if (r == 0)
        r = bind_queue(c, rc->dlq, rc->dlx, "", err);
    if (r == 0) {
        amqp_table_entry_t e[2];
        add_str(&e[0], "x-dead-letter-exchange", "");
        add_str(&e[1], "x-dead-letter-routing-key", rc->queue);
        amqp_table_t args = {2, e};
        r = declare_queue(c, rc->retry_queue, args, err);
    }
    if (r == 0) {
        amqp_table_entry_t e[1];
        add_str(&e[0], "x-dead-letter-exchange", rc->dlx);
        amqp_table_t args = {1, e};
        r = declare_queue(c, rc->queue, args, err);
    }
    if (r == 0)
        r = bind_queue(c, rc->queue, c->exchange, rc->binding_key, err);
    return r;
}

/* Connects, declares, sets the prefetch and starts consuming. */
static int start(struct rmq_consumer *rc, struct txo_error *err)
{
    struct txo__rmq_conn *c = &rc->conn;
    if (c->st != NULL && rc->consuming)
        return 0;
    rc->consuming = false;
    int r = txo__rmq_conn_open(c, err);
    if (r == 0 && c->opts.declare)
        r = declare_topology(rc, err);
    if (r == 0) {
        amqp_basic_qos(c->st, TXO__RMQ_CHANNEL, 0, (uint16_t)c->opts.prefetch, 0);
        r = txo__rmq_check_rpc(c, "setting the prefetch (basic.qos)", err);
    }
    if (r == 0) {
        amqp_basic_consume(c->st, TXO__RMQ_CHANNEL, txo__rmq_bytes(rc->queue), amqp_empty_bytes, 0,
                           0, 0, amqp_empty_table);
        char what[300];
        snprintf(what, sizeof(what), "consuming queue %s", rc->queue);
        r = txo__rmq_check_rpc(c, what, err);
    }
    if (r < 0) {
        txo__rmq_conn_drop(c);
        return r;
    }
    rc->consuming = true;
    TXO_LOG(TXO_LOG_INFO, "rabbitmq", "consumer started", TXO_KV_STR("queue", rc->queue),
            TXO_KV_STR("binding_key", rc->binding_key), TXO_KV_I64("prefetch", c->opts.prefetch));
    return 0;
}

/* ---- deliveries ---- */

static const amqp_table_t *headers_of(const amqp_envelope_t *env)
{
    const amqp_basic_properties_t *p = &env->message.properties;
    return (p->_flags & AMQP_BASIC_HEADERS_FLAG) != 0 ? &p->headers : NULL;
}

/* An integer header, or -1. */
static int64_t int_header(const amqp_envelope_t *env, const char *name)
{
    const amqp_table_t *h = headers_of(env);
    size_t len = strlen(name);
    for (int i = 0; h != NULL && i < h->num_entries; i++) {
        const amqp_table_entry_t *e = &h->entries[i];
        if (e->key.len != len || memcmp(e->key.bytes, name, len) != 0)
            continue;
        switch (e->value.kind) {
        case AMQP_FIELD_KIND_I8:
            return e->value.value.i8;
        case AMQP_FIELD_KIND_U8:
            return e->value.value.u8;
        case AMQP_FIELD_KIND_I16:
            return e->value.value.i16;
        case AMQP_FIELD_KIND_U16:
            return e->value.value.u16;
        case AMQP_FIELD_KIND_I32:
            return e->value.value.i32;
        case AMQP_FIELD_KIND_U32:
            return e->value.value.u32;
        case AMQP_FIELD_KIND_I64:
            return e->value.value.i64;
        case AMQP_FIELD_KIND_U64:
            return (int64_t)e->value.value.u64;
        default:
            return -1;
        }
    }
    return -1;
}

static const char *rmq_header(const struct txo_inbound_message *in, const char *name)
{
    const struct delivery *d = in->transport;
    char alt[TXO__RMQ_NAME_MAX + 1] = "";
    if (strncmp(name, "ce-", 3) == 0) {
        snprintf(alt, sizeof(alt), "ce_%s", name + 3);
    }
    for (size_t i = 0; i < d->n_headers; i++) {
        if (strcmp(d->names[i], name) == 0 || (alt[0] != '\0' && strcmp(d->names[i], alt) == 0))
            return d->values[i];
    }
    return NULL;
}

static void delivery_release(struct delivery *d)
{
    txo_free(d->data);
    txo_free(d->msg_id);
    txo_free(d->subject);
    for (size_t i = 0; i < d->n_headers; i++) {
        txo_free(d->names[i]);
        txo_free(d->values[i]);
    }
}

static int delivery_init(struct delivery *d, const amqp_envelope_t *env)
{
    memset(d, 0, sizeof(*d));
    d->env = env;
    const amqp_basic_properties_t *p = &env->message.properties;
    d->data = txo__rmq_strdup_bytes(env->message.body);
    d->subject = txo__rmq_strdup_bytes(env->routing_key);
    if ((p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0)
        d->msg_id = txo__rmq_strdup_bytes(p->message_id);
    bool oom = d->data == NULL || d->subject == NULL ||
               ((p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0 && d->msg_id == NULL);
    const amqp_table_t *h = headers_of(env);
    for (int i = 0; !oom && h != NULL && i < h->num_entries && d->n_headers < HEADERS_KEPT; i++) {
        const amqp_table_entry_t *e = &h->entries[i];
        if (e->value.kind != AMQP_FIELD_KIND_UTF8 && e->value.kind != AMQP_FIELD_KIND_BYTES)
            continue;
        char *name = txo__rmq_strdup_bytes(e->key);
        char *value = txo__rmq_strdup_bytes(e->value.value.bytes);
        if (name == NULL || value == NULL) {
            txo_free(name);
            txo_free(value);
            oom = true;
            break;
        }
        d->names[d->n_headers] = name;
        d->values[d->n_headers++] = value;
    }
    if (oom) {
        delivery_release(d);
        return TXO_ENOMEM;
    }
    struct txo_inbound_message *in = &d->in;
    in->subject = d->subject;
    in->data = d->data;
    in->len = env->message.body.len;
    in->msg_id = d->msg_id;
    int64_t n = int_header(env, TXO__RMQ_DELIVERY_HEADER);
    in->delivery = n >= 1 ? (uint64_t)n : 1;
    if (env->redelivered)
        in->delivery++;
    in->header = rmq_header;
    in->transport = d;
    return 0;
}

/* ---- the retry queue ---- */

/* Waits for the confirm of tag on the retry connection. */
static int wait_retry_confirm(struct rmq_consumer *rc, uint64_t tag, struct txo_error *err)
{
    struct txo__rmq_conn *c = &rc->retry;
    int64_t deadline = txo_monotonic_ms() + c->opts.confirm_timeout_ms;
    bool returned = false;
    for (;;) {
        int64_t remaining = deadline - txo_monotonic_ms();
        if (remaining <= 0) {
            char note[TXO__RMQ_BLOCKED_NOTE_MAX];
            return txo_error_set(err, TXO_ETIMEOUT, "no confirm within %" PRId64 " ms%s",
                                 c->opts.confirm_timeout_ms,
                                 txo__rmq_blocked_note(c, note, sizeof(note)));
        }
        struct timeval tv = tv_of_ms(remaining);
        amqp_frame_t frame;
        int s = amqp_simple_wait_frame_noblock(c->st, &frame, &tv);
        if (s != AMQP_STATUS_OK)
            return txo_error_set(err, TXO_EUNAVAILABLE, "%s", amqp_error_string2(s));
        if (frame.frame_type != AMQP_FRAME_METHOD || txo__rmq_blocked_frame(c, &frame))
            continue;
        amqp_method_t *m = &frame.payload.method;
        if (m->id == AMQP_BASIC_RETURN_METHOD) {
            amqp_message_t msg;
            amqp_rpc_reply_t r = amqp_read_message(c->st, TXO__RMQ_CHANNEL, &msg, 0);
            if (r.reply_type != AMQP_RESPONSE_NORMAL)
                return txo_error_set(err, TXO_EUNAVAILABLE, "reading a returned message");
            amqp_destroy_message(&msg);
            returned = true;
        } else if (m->id == AMQP_BASIC_ACK_METHOD || m->id == AMQP_BASIC_NACK_METHOD) {
            amqp_basic_ack_t *a = m->decoded; /* basic.nack starts with the same two fields */
            uint64_t t = m->id == AMQP_BASIC_ACK_METHOD
                             ? a->delivery_tag
                             : ((amqp_basic_nack_t *)m->decoded)->delivery_tag;
            bool multiple = m->id == AMQP_BASIC_ACK_METHOD
                                ? a->multiple != 0
                                : ((amqp_basic_nack_t *)m->decoded)->multiple != 0;
            if (t != tag && !(multiple && t > tag))
                continue;
            if (m->id == AMQP_BASIC_NACK_METHOD)
                return txo_error_set(err, TXO_EPUBLISH, "the broker refused it (basic.nack)");
            if (returned)
                return txo_error_set(err, TXO_ECONFIG, "returned: the retry queue is missing");
            return 0;
        } else if (m->id == AMQP_CHANNEL_CLOSE_METHOD || m->id == AMQP_CONNECTION_CLOSE_METHOD) {
            return txo_error_set(err, TXO_EUNAVAILABLE, "closed by the server");
        }
    }
}

/* Republishes the delivery to <queue>.retry with the delay; 0 once the broker confirmed it. */
static int republish_for_retry(struct rmq_consumer *rc, const struct delivery *d,
                               struct txo_error *err)
{
    struct txo__rmq_conn *c = &rc->retry;
    int r = txo__rmq_conn_open(c, err);
    if (r < 0)
        return r;
    amqp_maybe_release_buffers(c->st); /* the frames of the last confirm */
    const amqp_envelope_t *env = d->env;
    amqp_basic_properties_t props = env->message.properties;
    const amqp_table_t *h = headers_of(env);
    int n_old = h != NULL ? h->num_entries : 0;
    amqp_table_entry_t *entries = txo_calloc((size_t)n_old + 1, sizeof(*entries));
    if (entries == NULL)
        return txo_error_set(err, TXO_ENOMEM, "out of memory");
    int n = 0;
    size_t dlen = strlen(TXO__RMQ_DELIVERY_HEADER);
    for (int i = 0; i < n_old; i++) {
        const amqp_table_entry_t *e = &h->entries[i];
        if (e->key.len == dlen && memcmp(e->key.bytes, TXO__RMQ_DELIVERY_HEADER, dlen) == 0)
            continue;
        entries[n++] = *e;
    }
    entries[n].key = txo__rmq_bytes(TXO__RMQ_DELIVERY_HEADER);
    entries[n].value.kind = AMQP_FIELD_KIND_I64;
    entries[n++].value.value.i64 = (int64_t)d->in.delivery + 1;
    props.headers.num_entries = n;
    props.headers.entries = entries;
    char expiration[24];
    snprintf(expiration, sizeof(expiration), "%" PRId64, rc->conn.opts.retry_delay_ms);
    props.expiration = txo__rmq_bytes(expiration);
    props._flags |= AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_EXPIRATION_FLAG;

    uint64_t tag = c->next_tag;
    int s = amqp_basic_publish(c->st, TXO__RMQ_CHANNEL, amqp_empty_bytes,
                               txo__rmq_bytes(rc->retry_queue), 1, 0, &props, env->message.body);
    txo_free(entries);
    if (s != AMQP_STATUS_OK)
        r = txo_error_set(err, TXO_EUNAVAILABLE, "%s", amqp_error_string2(s));
    else
        c->next_tag++;
    if (r == 0)
        r = wait_retry_confirm(rc, tag, err);
    if (r < 0)
        txo__rmq_conn_drop(c); /* a late confirm must not be read as the next one's */
    return r;
}

/* ---- settling ---- */

static void count_outcome(struct rmq_consumer *rc, enum outcome o)
{
    if (rc->consumed != NULL)
        txo_metric_inc(rc->consumed, (const char *const[]){outcome_names[o]});
}

/* A delivery that cannot be copied for the handler goes back to the queue for a later try. */
static int not_handled(struct rmq_consumer *rc, const amqp_envelope_t *env, struct txo_error *err)
{
    (void)amqp_basic_nack(rc->conn.st, TXO__RMQ_CHANNEL, env->delivery_tag, 0, 1);
    return txo_error_set(err, TXO_ENOMEM, "rabbitmq consumer: out of memory");
}

/*
 * Settles d by its handler's verdict hrc (reason in herr). Returns 0, or TXO_EUNAVAILABLE with
 * err set when the settling write failed: the connection is then dropped, so the server takes
 * back every delivery of it not yet settled.
 */
static int settle(struct rmq_consumer *rc, const struct delivery *d, int hrc,
                  const struct txo_error *herr, struct txo_error *err)
{
    struct txo__rmq_conn *c = &rc->conn;
    const amqp_envelope_t *env = d->env;
    const char *id = d->msg_id != NULL ? d->msg_id : "";
    const char *reason = herr->msg[0] != '\0' ? herr->msg : txo_strerror(hrc);
    int s;
    const char *verb;
    if (hrc == 0) {
        verb = "ack";
        s = amqp_basic_ack(c->st, TXO__RMQ_CHANNEL, env->delivery_tag, 0);
        count_outcome(rc, OUTCOME_ACK);
        TXO_LOG(TXO_LOG_DEBUG, "rabbitmq", "message handled", TXO_KV_STR("message_id", id),
                TXO_KV_STR("routing_key", d->subject), TXO_KV_U64("delivery", d->in.delivery));
    } else if (txo_err_is_transient(hrc)) {
        struct txo_error rerr;
        txo_error_init(&rerr);
        if (republish_for_retry(rc, d, &rerr) == 0) {
            verb = "ack";
            s = amqp_basic_ack(c->st, TXO__RMQ_CHANNEL, env->delivery_tag, 0);
            TXO_LOG(TXO_LOG_WARN, "rabbitmq", "handler failed, message redelivered later",
                    TXO_KV_STR("message_id", id), TXO_KV_STR("routing_key", d->subject),
                    TXO_KV_U64("delivery", d->in.delivery),
                    TXO_KV_I64("delay_ms", c->opts.retry_delay_ms),
                    TXO_KV_STR("error", txo_err_name(hrc)), TXO_KV_STR("reason", reason));
        } else {
            verb = "nack";
            s = amqp_basic_nack(c->st, TXO__RMQ_CHANNEL, env->delivery_tag, 0, 1);
            TXO_LOG(TXO_LOG_WARN, "rabbitmq",
                    "handler failed and the retry queue did not confirm, requeued at once",
                    TXO_KV_STR("message_id", id), TXO_KV_U64("delivery", d->in.delivery),
                    TXO_KV_STR("error", txo_err_name(hrc)), TXO_KV_STR("reason", reason),
                    TXO_KV_STR("retry_error", rerr.msg));
        }
        count_outcome(rc, OUTCOME_RETRY);
    } else {
        verb = "nack";
        s = amqp_basic_nack(c->st, TXO__RMQ_CHANNEL, env->delivery_tag, 0, 0);
        count_outcome(rc, OUTCOME_DEAD_LETTER);
        TXO_LOG(TXO_LOG_ERROR, "rabbitmq", "handler rejected the message, dead-lettered",
                TXO_KV_STR("dead_letter_queue", rc->dlq), TXO_KV_STR("message_id", id),
                TXO_KV_STR("routing_key", d->subject), TXO_KV_U64("delivery", d->in.delivery),
                TXO_KV_STR("error", txo_err_name(hrc)), TXO_KV_STR("reason", reason));
    }
    if (s == AMQP_STATUS_OK)
        return 0;
    txo__rmq_conn_drop(c);
    rc->consuming = false;
    TXO_LOG(TXO_LOG_WARN, "rabbitmq", "settlement not sent, the message will be redelivered",
            TXO_KV_STR("action", verb), TXO_KV_STR("message_id", id),
            TXO_KV_STR("error", amqp_error_string2(s)));
    return txo_error_set(err, TXO_EUNAVAILABLE, "rabbitmq consumer: %s of a message not sent: %s",
                         verb, amqp_error_string2(s));
}

/*
 * Runs the handler on the n deliveries envs[0..n), then settles each by its verdict in order
 * (a batch handler that fails as a whole: each fails with its code). A delivery that cannot be
 * copied is requeued without reaching the handler. Returns as rmq_poll does; *handled gets the
 * messages handed to the handler.
 */
static int handle_all(struct rmq_consumer *rc, const amqp_envelope_t *envs, size_t n,
                      size_t *handled, struct txo_error *err)
{
    struct delivery *ds = txo_calloc(n, sizeof(*ds));
    size_t *of = txo_calloc(n, sizeof(*of)); /* b.in[j] is the message of ds[of[j]] */
    struct txo__handler_batch b;
    int r = 0;
    size_t m = 0;
    if (!txo__handler_batch_alloc(&b, n) || ds == NULL || of == NULL) {
        for (size_t i = 0; i < n; i++)
            (void)not_handled(rc, &envs[i], NULL);
        r = txo_error_set(err, TXO_ENOMEM, "rabbitmq consumer: batch of %zu: out of memory", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (delivery_init(&ds[i], &envs[i]) < 0) {
            memset(&ds[i], 0, sizeof(ds[i])); /* released by delivery_init */
            struct txo_error e;
            txo_error_init(&e);
            int nr = not_handled(rc, &envs[i], &e);
            txo__settle_keep_first(nr, &e, &r, err);
            continue;
        }
        b.in[m] = ds[i].in;
        of[m] = i;
        m++;
    }
    if (m == 0)
        goto out;
    (void)txo__handler_run(&rc->h, b.in, m, b.results, b.errors);
    for (size_t j = 0; j < m; j++) {
        if (rc->conn.st == NULL)
            break; /* a settling write failed: the server redelivers the rest */
        struct txo_error e;
        txo_error_init(&e);
        int sr = settle(rc, &ds[of[j]], b.results[j], &b.errors[j], &e);
        txo__settle_keep_first(sr, &e, &r, err);
    }
out:
    for (size_t i = 0; ds != NULL && i < n; i++)
        delivery_release(&ds[i]);
    *handled = m;
    txo_free(ds);
    txo_free(of);
    txo__handler_batch_release(&b);
    return r;
}

/* A frame that is not a delivery arrived: a close or a cancel ends the connection. */
static int other_frame(struct rmq_consumer *rc, struct txo_error *err)
{
    struct txo__rmq_conn *c = &rc->conn;
    amqp_frame_t frame;
    struct timeval tv = {0, 0};
    int s = amqp_simple_wait_frame_noblock(c->st, &frame, &tv);
    if (s == AMQP_STATUS_TIMEOUT)
        return 0;
    const char *why = NULL;
    if (s != AMQP_STATUS_OK)
        why = amqp_error_string2(s);
    else if (frame.frame_type == AMQP_FRAME_METHOD &&
             (frame.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
              frame.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD))
        why = "closed by the server";
    else if (frame.frame_type == AMQP_FRAME_METHOD &&
             frame.payload.method.id == AMQP_BASIC_CANCEL_METHOD)
        why = "the server cancelled the consumer (queue deleted, or crashed)";
    if (why == NULL)
        return 0;
    txo__rmq_conn_drop(c);
    rc->consuming = false;
    return txo_error_set(err, TXO_EUNAVAILABLE, "rabbitmq consumer: queue %s: %s", rc->queue, why);
}

/*
 * Takes the next delivery into env (amqp_destroy_envelope it), waiting until deadline (a past
 * one: only what is already buffered). Returns 1 (a delivery), 0 (none by the deadline) or
 * TXO_EUNAVAILABLE with err set (the channel or connection is gone: reconnect and retry).
 */
static int receive(struct rmq_consumer *rc, int64_t deadline, amqp_envelope_t *env,
                   struct txo_error *err)
{
    struct txo__rmq_conn *c = &rc->conn;
    for (;;) {
        int64_t remaining = deadline - txo_monotonic_ms();
        if (remaining < 0)
            remaining = 0;
        struct timeval tv = tv_of_ms(remaining);
        amqp_rpc_reply_t rep = amqp_consume_message(c->st, env, &tv, 0);
        if (rep.reply_type == AMQP_RESPONSE_NORMAL)
            return 1;
        if (rep.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            rep.library_error == AMQP_STATUS_TIMEOUT) {
            if (txo_monotonic_ms() >= deadline)
                return 0;
            continue;
        }
        if (rep.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            rep.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
            int r = other_frame(rc, err);
            if (r < 0)
                return r;
            continue;
        }
        char what[300];
        snprintf(what, sizeof(what), "consuming queue %s", rc->queue);
        rc->consuming = false;
        int r = txo__rmq_reply_error(c, rep, what, err);
        if (r != TXO_EUNAVAILABLE) {
            r = TXO_EUNAVAILABLE; /* a consumer that lost its channel: reconnect and retry */
            if (err != NULL)
                err->code = r;
        }
        return r;
    }
}

static int rmq_poll(void *self, size_t max_msgs, int64_t timeout_ms, size_t *handled,
                    struct txo_error *err)
{
    struct rmq_consumer *rc = self;
    struct txo__rmq_conn *c = &rc->conn;
    *handled = 0;
    int r = start(rc, err);
    if (r < 0)
        return r;
    int64_t deadline = txo_monotonic_ms() + timeout_ms;
    /* The first delivery within the wait, then whatever is already buffered, up to max_msgs
     * and the prefetch (no more can be in flight), all handed over at once. */
    size_t cap = max_msgs < (size_t)c->opts.prefetch ? max_msgs : (size_t)c->opts.prefetch;
    amqp_envelope_t *envs = txo_calloc(cap, sizeof(*envs));
    if (envs == NULL)
        return txo_error_set(err, TXO_ENOMEM, "rabbitmq consumer: batch of %zu: out of memory",
                             cap);
    size_t n = 0;
    while (n < cap) {
        amqp_maybe_release_buffers(c->st); /* envelopes own copies of what they hold */
        r = receive(rc, n == 0 ? deadline : 0, &envs[n], err);
        if (r <= 0)
            break;
        r = 0;
        n++;
    }
    /* A lost connection takes back what it delivered: redelivered, so not handled here. */
    if (r == 0 && n > 0)
        r = handle_all(rc, envs, n, handled, err);
    for (size_t i = 0; i < n; i++)
        amqp_destroy_envelope(&envs[i]);
    txo_free(envs);
    return r;
}

static void rmq_consumer_destroy(void *self)
{
    struct rmq_consumer *rc = self;
    txo__rmq_conn_release(&rc->conn);
    txo__rmq_conn_release(&rc->retry);
    txo_free(rc->queue);
    txo_free(rc->retry_queue);
    txo_free(rc->dlx);
    txo_free(rc->dlq);
    txo_free(rc->binding_key);
    txo_free(rc);
}

static const struct txo_consumer_ops rmq_consumer_ops = {
    .name = "rabbitmq",
    .poll = rmq_poll,
    .destroy = rmq_consumer_destroy,
};

static const struct txo_metric_desc consumed_family = {
    TXO_METRIC_COUNTER, "txo_rabbitmq_consumed_total",
    "Deliveries the RabbitMQ consumer settled, by outcome: ack (handled), retry (transient error, "
    "delayed), dead_letter (permanent error).",
    1, (const char *const[]){"outcome"}};

static int rmq_consumer_init(void *self, const struct txo__transport_args *a, struct txo_error *err)
{
    struct rmq_consumer *rc = self;
    const struct txo_rabbitmq_opts *o = a->opts;
    rc->h = *a->h;
    rc->queue = txo_strdup(o->queue);
    rc->retry_queue = txo__suffixed(o->queue, ".retry");
    rc->dlx = txo__suffixed(o->queue, ".dlx");
    rc->dlq = txo__suffixed(o->queue, ".dlq");
    rc->binding_key = txo_strdup(o->binding_key);
    if (rc->queue == NULL || rc->retry_queue == NULL || rc->dlx == NULL || rc->dlq == NULL ||
        rc->binding_key == NULL)
        return txo_error_set(err, TXO_ENOMEM, "rabbitmq consumer: out of memory");
    int r = txo__rmq_conn_init(&rc->conn, o, "consumer", false, err);
    if (r == 0)
        r = txo__rmq_conn_init(&rc->retry, o, "consumer retry", true, err);
    if (r == 0)
        rc->retry.opts.declare = false; /* the consuming connection declares everything */
    struct txo_metric **const slots[] = {&rc->consumed};
    if (r == 0)
        r = txo__transport_metrics(a->metrics, &consumed_family, 1, slots, err);
    if (r < 0)
        return r;
    /* Declared now when the server is up, so that a relay started after this consumer (`txo
     * up`) never publishes before the queue is bound: such messages would reach the exchange's
     * other queues, or come back unroutable, but never this one. Down: the first poll does it. */
    if (o->connect_required)
        return start(rc, err);
    struct txo_error e;
    txo_error_init(&e);
    if (start(rc, &e) != 0)
        TXO_LOG(TXO_LOG_WARN, "rabbitmq", "consumer not started yet, retried at the first poll",
                TXO_KV_STR("queue", rc->queue), TXO_KV_STR("error", e.msg));
    return 0;
}

int txo_consumer_rabbitmq_new(const struct txo_rabbitmq_opts *o, const struct txo_handler *h,
                              struct txo_metrics *metrics, struct txo_consumer **out,
                              struct txo_error *err)
{
    int r = txo__rmq_check_opts(o, true, err);
    if (r < 0)
        return r;
    struct txo__transport_args a = {.opts = o, .h = h, .metrics = metrics};
    return txo__consumer_build(&rmq_consumer_ops, sizeof(struct rmq_consumer), rmq_consumer_init,
                               &a, out, err);
}
