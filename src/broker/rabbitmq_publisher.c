#include "core/common.h"

/*
 * The RabbitMQ publisher (txo/rabbitmq.h), plus the connection and option helpers it shares
 * with the consumer (rabbitmq_internal.h).
 *
 * One batch, rmq_publish_batch():
 *   1. Open the connection if it is down (one attempt per batch, bounded by
 *      connect_timeout_ms); when that fails every message fails with TXO_EUNAVAILABLE at once.
 *   2. basic.publish every message (persistent, mandatory). The channel is in confirm mode, so
 *      the broker numbers them 1, 2, ... per channel: message i gets delivery tag tags[i] =
 *      c->next_tag++, and the tags of one batch are consecutive, so tag t is message
 *      index_of[t - first_tag].
 *   3. Read frames until every published message is settled or confirm_timeout_ms passed:
 *        basic.ack tag [multiple]   confirmed (all tags <= tag with multiple);
 *        basic.nack tag [multiple]  refused: TXO_EPUBLISH;
 *        basic.return + content     unroutable: the message (found by its message_id, the
 *                                   idempotency key) is flagged; RabbitMQ sends the return
 *                                   before the ack of that message, which then settles it as
 *                                   TXO_ECONFIG (permanent) instead of success;
 *        channel/connection close   the connection is dropped, the rest is unsettled.
 *   4. Unsettled messages fail with TXO_ETIMEOUT (maybe delivered). After any unsettled
 *      message the connection is dropped, so a late confirm of this batch can never settle a
 *      message of the next one (the next batch opens a fresh channel whose tags restart).
 *
 * Error messages written to errors[] carry no per-event detail, so that the relay can mark a
 * failed batch with one UPDATE per distinct error (it groups rows by message).
 *
 * Ownership: the publisher owns its connection, the option copies and the per-batch buffers
 * (grown to the largest batch seen). Thread-safety: one relay thread at a time.
 */

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "broker/rabbitmq_internal.h"
#include "broker/transport.h"
#include "broker/wire.h"
#include "core/text.h"

#define RESULT_PENDING 1 /* results[i] while no outcome is known (codes are <= 0) */
#define FRAME_MAX      131072
#define HEADERS_MAX    (3 + TXO_CE_HEADERS_MAX + 2) /* txo-*, ce-*, trace context */

/* ---- options ---- */

void txo_rabbitmq_opts_init(struct txo_rabbitmq_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->url = "amqp://guest:guest@127.0.0.1:5672/";
    o->connect_timeout_ms = 2000;
    o->connect_required = false;
    o->declare = true;
    o->exchange = "txo.events";
    o->confirm_timeout_ms = 5000;
    o->mandatory = true;
    o->queue = "txo-worker";
    o->binding_key = "#";
    o->prefetch = 100;
    o->retry_delay_ms = 1000;
}

/* An exchange or queue name: 1..255 bytes of letters, digits, '-', '_', '.' and ':'. */
static bool valid_name(const char *s, size_t reserve)
{
    size_t len = s != NULL ? strlen(s) : 0;
    if (len == 0 || len + reserve > TXO__RMQ_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' || ch == ':';
        if (!ok)
            return false;
    }
    return true;
}

/* A binding key: 1..255 printable bytes without whitespace. */
static bool valid_key(const char *s)
{
    size_t len = s != NULL ? strlen(s) : 0;
    if (len == 0 || len > TXO__RMQ_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= 0x20 || ch == 0x7f)
            return false;
    }
    return true;
}

int txo__rmq_check_opts(const struct txo_rabbitmq_opts *o, bool consumer, struct txo_error *err)
{
    const char *role = consumer ? "consumer" : "publisher";
    if (o == NULL)
        return txo_error_set(err, TXO_EINVAL, "rabbitmq %s: options are required", role);
    if (o->url == NULL || o->url[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "rabbitmq %s: url is empty", role);
    if (!valid_name(o->exchange, 0))
        return txo_error_set(err, TXO_EINVAL,
                             "rabbitmq %s: exchange \"%s\" is not a valid name (1..255 bytes of "
                             "letters, digits, '-', '_', '.', ':')",
                             role, o->exchange != NULL ? o->exchange : "");
    if (o->connect_timeout_ms < 1 || o->connect_timeout_ms > INT32_MAX)
        return txo_error_set(err, TXO_EINVAL, "rabbitmq %s: connect_timeout_ms must be >= 1", role);
    if (!consumer) {
        if (o->confirm_timeout_ms < 1 || o->confirm_timeout_ms > INT32_MAX)
            return txo_error_set(err, TXO_EINVAL,
                                 "rabbitmq publisher: confirm_timeout_ms must be >= 1");
        return 0;
    }
    if (!valid_name(o->queue, strlen(".retry")))
        return txo_error_set(err, TXO_EINVAL,
                             "rabbitmq consumer: queue \"%s\" is not a valid name (1..249 bytes "
                             "of letters, digits, '-', '_', '.', ':')",
                             o->queue != NULL ? o->queue : "");
    if (!valid_key(o->binding_key))
        return txo_error_set(err, TXO_EINVAL,
                             "rabbitmq consumer: binding_key \"%s\" is not a routing key "
                             "(1..255 bytes, no whitespace)",
                             o->binding_key != NULL ? o->binding_key : "");
    if (o->prefetch < 1 || o->prefetch > 65535)
        return txo_error_set(err, TXO_EINVAL,
                             "rabbitmq consumer: prefetch must be 1..65535, got %d", o->prefetch);
    if (o->retry_delay_ms < 0 || o->retry_delay_ms > INT32_MAX)
        return txo_error_set(err, TXO_EINVAL, "rabbitmq consumer: retry_delay_ms must be >= 0");
    if (o->confirm_timeout_ms < 1 || o->confirm_timeout_ms > INT32_MAX)
        return txo_error_set(err, TXO_EINVAL, "rabbitmq consumer: confirm_timeout_ms must be >= 1");
    return 0;
}

/* ---- routing keys ---- */

/* The bytes a routing key's part may not hold: '.' separates the parts, and '*' and '#' are a
 * topic binding's wildcards. */
#define ROUTING_RESERVED ".*#"

int txo_rabbitmq_routing_key(const char *aggregate_type, const char *event_type, char *out,
                             size_t out_size, struct txo_error *err)
{
    if (out != NULL && out_size > 0)
        out[0] = '\0';
    if (out == NULL || out_size == 0 || aggregate_type == NULL || event_type == NULL)
        return txo_error_set(err, TXO_EINVAL, "rabbitmq routing key: missing argument");
    size_t cap = out_size < TXO__RMQ_NAME_MAX + 1 ? out_size : TXO__RMQ_NAME_MAX + 1;
    size_t n = 0;
    bool ok =
        txo__text_append_name_part(out, cap, &n, aggregate_type, ROUTING_RESERVED) && n + 2 <= cap;
    if (ok) {
        out[n++] = '.';
        out[n] = '\0';
        ok = txo__text_append_name_part(out, cap, &n, event_type, ROUTING_RESERVED);
    }
    if (!ok) {
        out[0] = '\0';
        return txo_error_set(err, TXO_EINVAL,
                             "rabbitmq routing key: longer than %zu bytes (AMQP allows 255)",
                             cap - 1);
    }
    return 0;
}

/* ---- connection ---- */

amqp_bytes_t txo__rmq_bytes(const char *s)
{
    amqp_bytes_t b;
    b.len = s != NULL ? strlen(s) : 0;
    b.bytes = (void *)(uintptr_t)s; /* rabbitmq-c only reads it */
    return b;
}

char *txo__rmq_strdup_bytes(amqp_bytes_t b)
{
    char *s = txo_malloc(b.len + 1);
    if (s == NULL)
        return NULL;
    if (b.len > 0)
        memcpy(s, b.bytes, b.len);
    s[b.len] = '\0';
    return s;
}

const char *txo__rmq_where(const struct txo__rmq_conn *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s:%d%s%s", c->info.host != NULL ? c->info.host : "?", c->info.port,
             c->info.vhost != NULL && c->info.vhost[0] == '/' ? "" : "/",
             c->info.vhost != NULL ? c->info.vhost : "");
    return buf;
}

static struct timeval tv_of_ms(int64_t ms)
{
    struct timeval tv;
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
    return tv;
}

/* A transient code for a rabbitmq-c library status. */
static int status_code(int status)
{
    switch (status) {
    case AMQP_STATUS_NO_MEMORY:
        return TXO_ENOMEM;
    case AMQP_STATUS_TIMEOUT:
    case AMQP_STATUS_HEARTBEAT_TIMEOUT:
        return TXO_ETIMEOUT;
    default:
        return TXO_EUNAVAILABLE;
    }
}

int txo__rmq_reply_error(struct txo__rmq_conn *c, amqp_rpc_reply_t r, const char *what,
                         struct txo_error *err)
{
    char where[300];
    txo__rmq_where(c, where, sizeof(where));
    int code = TXO_EUNAVAILABLE;
    char why[256] = "";
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        return 0;
    case AMQP_RESPONSE_NONE:
        snprintf(why, sizeof(why), "no reply");
        break;
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        code = status_code(r.library_error);
        if (code == TXO_ETIMEOUT)
            code = TXO_EUNAVAILABLE; /* an RPC that timed out: the server is not answering */
        snprintf(why, sizeof(why), "%s", amqp_error_string2(r.library_error));
        break;
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
            amqp_channel_close_t *m = r.reply.decoded;
            /* 403 access refused, 404 not found, 406 precondition failed (a declaration
             * that differs from what exists): a configuration the server will keep refusing. */
            code = (m->reply_code == 403 || m->reply_code == 404 || m->reply_code == 406)
                       ? TXO_ECONFIG
                       : TXO_EUNAVAILABLE;
            snprintf(why, sizeof(why), "channel closed by the server: %u %.*s",
                     (unsigned)m->reply_code, (int)m->reply_text.len,
                     (const char *)m->reply_text.bytes);
        } else if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
            amqp_connection_close_t *m = r.reply.decoded;
            code = (m->reply_code == 403 || m->reply_code == 530) ? TXO_ECONFIG : TXO_EUNAVAILABLE;
            snprintf(why, sizeof(why), "connection closed by the server: %u %.*s",
                     (unsigned)m->reply_code, (int)m->reply_text.len,
                     (const char *)m->reply_text.bytes);
        } else {
            snprintf(why, sizeof(why), "unexpected server method 0x%08x", (unsigned)r.reply.id);
        }
        break;
    }
    txo__rmq_conn_drop(c);
    return txo_error_set(err, code, "rabbitmq %s: %s on %s: %s", c->role, what, where, why);
}

int txo__rmq_check_rpc(struct txo__rmq_conn *c, const char *what, struct txo_error *err)
{
    amqp_rpc_reply_t r = amqp_get_rpc_reply(c->st);
    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return 0;
    return txo__rmq_reply_error(c, r, what, err);
}

void txo__rmq_conn_drop(struct txo__rmq_conn *c)
{
    if (c->st == NULL)
        return;
    amqp_destroy_connection(c->st);
    c->st = NULL;
}

int txo__rmq_conn_init(struct txo__rmq_conn *c, const struct txo_rabbitmq_opts *o, const char *role,
                       bool confirm, struct txo_error *err)
{
    memset(c, 0, sizeof(*c));
    c->role = role;
    c->confirm = confirm;
    c->opts = *o;
    c->opts.url = NULL;
    c->opts.queue = NULL;
    c->opts.binding_key = NULL;
    c->url_len = strlen(o->url);
    c->url_buf = txo_strdup(o->url);
    c->exchange = txo_strdup(o->exchange);
    if (c->url_buf == NULL || c->exchange == NULL) {
        txo__rmq_conn_release(c);
        return txo_error_set(err, TXO_ENOMEM, "rabbitmq %s: out of memory", role);
    }
    c->opts.exchange = c->exchange;
    amqp_default_connection_info(&c->info);
    if (amqp_parse_url(c->url_buf, &c->info) != AMQP_STATUS_OK) {
        txo__rmq_conn_release(c);
        return txo_error_set(err, TXO_EINVAL,
                             "rabbitmq %s: url is not amqp://user:password@host:port/vhost", role);
    }
    /* "amqp://host:5672/" names the empty vhost in RabbitMQ's AMQP URI scheme, which no broker has:
     * take it (and a URL without a path) as the default vhost "/", as other clients do. */
    if (c->info.vhost == NULL || c->info.vhost[0] == '\0')
        c->info.vhost = memcpy(c->default_vhost, "/", 2);
    if (c->info.ssl) {
        txo__rmq_conn_release(c);
        return txo_error_set(err, TXO_EINVAL,
                             "rabbitmq %s: amqps:// (TLS) is not supported, use amqp://", role);
    }
    return 0;
}

void txo__rmq_conn_release(struct txo__rmq_conn *c)
{
    if (c->st != NULL) {
        /* A polite close, each step bounded by the RPC timeout; errors do not matter here. */
        (void)amqp_channel_close(c->st, TXO__RMQ_CHANNEL, AMQP_REPLY_SUCCESS);
        (void)amqp_connection_close(c->st, AMQP_REPLY_SUCCESS);
        txo__rmq_conn_drop(c);
    }
    if (c->url_buf != NULL) {
        volatile char *p = c->url_buf; /* the password: wiped, not left in freed memory */
        for (size_t i = 0; i < c->url_len; i++)
            p[i] = 0;
    }
    txo_free(c->url_buf);
    txo_free(c->exchange);
    c->url_buf = NULL;
    c->exchange = NULL;
}

/* Bounds writes of unacknowledged data: the kernel aborts the connection instead of waiting. */
static void set_user_timeout(amqp_connection_state_t st, int64_t ms)
{
    int fd = amqp_get_sockfd(st);
    unsigned int v = (unsigned int)(ms > 600000 ? 600000 : ms);
    if (fd >= 0 && setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &v, sizeof(v)) != 0)
        TXO_LOG(TXO_LOG_WARN, "rabbitmq", "cannot set TCP_USER_TIMEOUT",
                TXO_KV_I64("errno", errno));
}

static int declare_exchange(struct txo__rmq_conn *c, struct txo_error *err)
{
    amqp_exchange_declare(c->st, TXO__RMQ_CHANNEL, txo__rmq_bytes(c->exchange),
                          txo__rmq_bytes("topic"), 0, 1, 0, 0, amqp_empty_table);
    char what[300];
    snprintf(what, sizeof(what), "declaring topic exchange %s", c->exchange);
    return txo__rmq_check_rpc(c, what, err);
}

/*
 * Logs in with client properties added to rabbitmq-c's own:
 *   - the capability consumer_cancel_notify, without which RabbitMQ cancels a consumer whose
 *     queue is deleted, crashes or loses its node without a word (the subscription then never
 *     delivers again);
 *   - the capability connection.blocked: the broker says when a memory or disk alarm stops it
 *     reading a publishing connection, so an unconfirmed batch can say why;
 *   - a connection_name ("txo <role>") that the management UI and `rabbitmqctl
 *     list_connections` show.
 */
static amqp_rpc_reply_t login(struct txo__rmq_conn *c)
{
    char name[64];
    snprintf(name, sizeof(name), "txo %s", c->role);
    static const char *const cap_names[] = {"consumer_cancel_notify", "connection.blocked"};
    amqp_table_entry_t caps[2];
    for (size_t i = 0; i < 2; i++) {
        caps[i].key = txo__rmq_bytes(cap_names[i]);
        caps[i].value.kind = AMQP_FIELD_KIND_BOOLEAN;
        caps[i].value.value.boolean = 1;
    }
    amqp_table_entry_t props[2];
    props[0].key = txo__rmq_bytes("capabilities");
    props[0].value.kind = AMQP_FIELD_KIND_TABLE;
    props[0].value.value.table = (amqp_table_t){2, caps};
    props[1].key = txo__rmq_bytes("connection_name");
    props[1].value.kind = AMQP_FIELD_KIND_UTF8;
    props[1].value.value.bytes = txo__rmq_bytes(name);
    amqp_table_t table = {2, props};
    return amqp_login_with_properties(c->st, c->info.vhost, 0, FRAME_MAX, 0, &table,
                                      AMQP_SASL_METHOD_PLAIN, c->info.user, c->info.password);
}

bool txo__rmq_blocked_frame(struct txo__rmq_conn *c, const amqp_frame_t *frame)
{
    if (frame->frame_type != AMQP_FRAME_METHOD)
        return false;
    char where[300];
    if (frame->payload.method.id == AMQP_CONNECTION_BLOCKED_METHOD) {
        const amqp_connection_blocked_t *b = frame->payload.method.decoded;
        snprintf(c->blocked, sizeof(c->blocked), "%.*s", (int)b->reason.len,
                 (const char *)b->reason.bytes);
        if (c->blocked[0] == '\0')
            snprintf(c->blocked, sizeof(c->blocked), "no reason given");
        TXO_LOG(TXO_LOG_WARN, "rabbitmq",
                "the broker blocks publishing on this connection (a memory or disk alarm)",
                TXO_KV_STR("role", c->role),
                TXO_KV_STR("server", txo__rmq_where(c, where, sizeof(where))),
                TXO_KV_STR("reason", c->blocked));
        return true;
    }
    if (frame->payload.method.id == AMQP_CONNECTION_UNBLOCKED_METHOD) {
        c->blocked[0] = '\0';
        TXO_LOG(TXO_LOG_INFO, "rabbitmq", "the broker publishes again on this connection",
                TXO_KV_STR("role", c->role),
                TXO_KV_STR("server", txo__rmq_where(c, where, sizeof(where))));
        return true;
    }
    return false;
}

const char *txo__rmq_blocked_note(const struct txo__rmq_conn *c, char *buf, size_t cap)
{
    if (c->blocked[0] != '\0')
        snprintf(buf, cap, ": the broker blocks publishing (%s)", c->blocked);
    else if (cap > 0)
        buf[0] = '\0';
    return buf;
}

int txo__rmq_conn_open(struct txo__rmq_conn *c, struct txo_error *err)
{
    if (c->st != NULL)
        return 0;
    c->blocked[0] = '\0';
    char where[300];
    txo__rmq_where(c, where, sizeof(where));
    c->st = amqp_new_connection();
    if (c->st == NULL)
        return txo_error_set(err, TXO_ENOMEM, "rabbitmq %s: out of memory", c->role);
    struct timeval tv = tv_of_ms(c->opts.connect_timeout_ms);
    int rc = 0;
    amqp_socket_t *sock = amqp_tcp_socket_new(c->st);
    if (sock == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "rabbitmq %s: out of memory", c->role);
        goto out;
    }
    if (amqp_set_handshake_timeout(c->st, &tv) != AMQP_STATUS_OK ||
        amqp_set_rpc_timeout(c->st, &tv) != AMQP_STATUS_OK) {
        rc = txo_error_set(err, TXO_ENOMEM, "rabbitmq %s: cannot set timeouts", c->role);
        goto out;
    }
    int s = amqp_socket_open_noblock(sock, c->info.host, c->info.port, &tv);
    if (s != AMQP_STATUS_OK) {
        rc = txo_error_set(err, TXO_EUNAVAILABLE, "rabbitmq %s: cannot connect to %s: %s", c->role,
                           where, amqp_error_string2(s));
        goto out;
    }
    set_user_timeout(c->st, c->opts.connect_timeout_ms + c->opts.confirm_timeout_ms);
    amqp_rpc_reply_t r = login(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        rc = txo__rmq_reply_error(c, r, "logging in", err);
        /* A refused login closes the socket: the server says nothing more precise. */
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_CONNECTION_CLOSED)
            rc = txo_error_set(err, TXO_ECONFIG,
                               "rabbitmq %s: login to %s refused (user, password or vhost)",
                               c->role, where);
        goto out;
    }
    amqp_channel_open(c->st, TXO__RMQ_CHANNEL);
    rc = txo__rmq_check_rpc(c, "opening a channel", err);
    if (rc == 0 && c->confirm) {
        amqp_confirm_select(c->st, TXO__RMQ_CHANNEL);
        rc = txo__rmq_check_rpc(c, "enabling publisher confirms", err);
    }
    if (rc == 0 && c->opts.declare)
        rc = declare_exchange(c, err);
    c->next_tag = 1;
out:
    if (rc < 0) {
        txo__rmq_conn_drop(c);
        return rc;
    }
    TXO_LOG(TXO_LOG_INFO, "rabbitmq", "connected", TXO_KV_STR("role", c->role),
            TXO_KV_STR("server", where), TXO_KV_STR("exchange", c->exchange));
    return 0;
}

/* ---- the publisher ---- */

struct rmq_metrics {
    struct txo_metric *published;
    struct txo_metric *failures;
    struct txo_metric *in_flight;
    struct txo_metric *confirm_latency;
};

struct rmq_publisher {
    struct txo__rmq_conn conn;
    struct rmq_metrics metrics;

    /* The current batch. */
    size_t cap;
    uint64_t *tags;   /* delivery tag of message i, 0 when it was not published */
    size_t *index_of; /* index_of[t - first_tag]: the message of tag t */
    bool *returned;   /* message i came back unroutable */
    char (*return_text)[128];
};

static int grow(struct rmq_publisher *p, size_t n)
{
    if (n <= p->cap)
        return 0;
    if (TXO_ARRAY_RESIZE(p->tags, n) < 0 || TXO_ARRAY_RESIZE(p->index_of, n) < 0 ||
        TXO_ARRAY_RESIZE(p->returned, n) < 0 || TXO_ARRAY_RESIZE(p->return_text, n) < 0)
        return TXO_ENOMEM;
    p->cap = n;
    return 0;
}

static void fail_all(size_t n, int *results, struct txo_error *errors, const struct txo_error *why)
{
    for (size_t i = 0; i < n; i++) {
        errors[i] = *why;
        results[i] = why->code;
    }
}

/* The header name for a CloudEvents attribute header: "ce-id" -> "ce_id". */
static void ce_name(const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s", name);
    if (strncmp(out, "ce-", 3) == 0)
        out[2] = '_';
}

/* The routing key of an event, as a destination of txo__wire_encode_to(): no template. */
static int routing_key(const char *template, const char *aggregate_type, const char *event_type,
                       char *out, size_t out_size, struct txo_error *err)
{
    (void)template;
    return txo_rabbitmq_routing_key(aggregate_type, event_type, out, out_size, err);
}

/*
 * Publishes message i. Returns 0 when it was written (tags[i] set) or it failed on its own
 * (results[i] set, nothing written); a negative code when the connection broke (results[i]
 * set too).
 */
static int publish_one(struct rmq_publisher *p, const struct txo_outbox_message *m, size_t i,
                       int *results, struct txo_error *errors)
{
    struct txo__rmq_conn *c = &p->conn;
    p->tags[i] = 0;
    p->returned[i] = false;
    char key[TXO__RMQ_NAME_MAX + 1];
    struct txo__wire w;
    int rc = txo__wire_encode_to("rabbitmq publisher", routing_key, NULL, m, key, sizeof(key), &w,
                                 &errors[i]);
    if (rc < 0) {
        results[i] = rc;
        return 0;
    }
    const struct txo_ce_headers *ce = &w.headers;

    amqp_table_entry_t entries[HEADERS_MAX];
    char ce_names[TXO_CE_HEADERS_MAX][48];
    int nh = 0;
    entries[nh].key = txo__rmq_bytes("txo-aggregate-type");
    entries[nh].value.kind = AMQP_FIELD_KIND_UTF8;
    entries[nh++].value.value.bytes = txo__rmq_bytes(m->aggregate_type);
    entries[nh].key = txo__rmq_bytes("txo-aggregate-id");
    entries[nh].value.kind = AMQP_FIELD_KIND_UTF8;
    entries[nh++].value.value.bytes = txo__rmq_bytes(m->aggregate_id);
    entries[nh].key = txo__rmq_bytes("txo-event-id");
    entries[nh].value.kind = AMQP_FIELD_KIND_I64;
    entries[nh++].value.value.i64 = m->id;
    for (size_t h = 0; h < ce->n && nh < HEADERS_MAX; h++) {
        ce_name(ce->names[h], ce_names[h], sizeof(ce_names[h]));
        entries[nh].key = txo__rmq_bytes(ce_names[h]);
        entries[nh].value.kind = AMQP_FIELD_KIND_UTF8;
        entries[nh++].value.value.bytes = txo__rmq_bytes(ce->values[h]);
    }
    for (size_t h = 0; h < w.plain.n && nh < HEADERS_MAX; h++) {
        entries[nh].key = txo__rmq_bytes(w.plain.names[h]);
        entries[nh].value.kind = AMQP_FIELD_KIND_UTF8;
        entries[nh++].value.value.bytes = txo__rmq_bytes(w.plain.values[h]);
    }

    amqp_basic_properties_t props;
    memset(&props, 0, sizeof(props));
    props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
                   AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TYPE_FLAG | AMQP_BASIC_HEADERS_FLAG |
                   AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_APP_ID_FLAG;
    props.content_type = txo__rmq_bytes("application/json");
    props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    props.message_id = txo__rmq_bytes(m->idempotency_key);
    props.type = txo__rmq_bytes(m->event_type != NULL ? m->event_type : "");
    props.timestamp = (uint64_t)(txo_realtime_us() / 1000000);
    props.app_id = txo__rmq_bytes("txo");
    props.headers.num_entries = nh;
    props.headers.entries = entries;

    amqp_bytes_t b;
    b.len = w.len;
    b.bytes = w.body;
    int s = amqp_basic_publish(c->st, TXO__RMQ_CHANNEL, txo__rmq_bytes(c->exchange),
                               txo__rmq_bytes(key), c->opts.mandatory ? 1 : 0, 0, &props, b);
    txo__wire_release(&w);
    if (s != AMQP_STATUS_OK) {
        results[i] = txo_error_set(&errors[i], TXO_EUNAVAILABLE,
                                   "rabbitmq publisher: connection lost while publishing: %s",
                                   amqp_error_string2(s));
        return TXO_EUNAVAILABLE;
    }
    p->tags[i] = c->next_tag++;
    results[i] = RESULT_PENDING;
    return 0;
}

/* Settles tag (and every earlier one of the batch when multiple). Returns how many. */
static size_t settle(struct rmq_publisher *p, uint64_t first_tag, size_t n_sent, uint64_t tag,
                     bool multiple, bool ack, int *results, struct txo_error *errors)
{
    if (tag < first_tag)
        return 0; /* not of this batch (cannot happen on a fresh channel) */
    uint64_t from = multiple ? first_tag : tag;
    uint64_t to = tag - first_tag < n_sent ? tag : first_tag + n_sent - 1;
    size_t done = 0;
    for (uint64_t t = from; t <= to; t++) {
        size_t i = p->index_of[t - first_tag];
        if (results[i] != RESULT_PENDING)
            continue;
        if (!ack)
            results[i] = txo_error_set(&errors[i], TXO_EPUBLISH,
                                       "rabbitmq publisher: the broker refused the message "
                                       "(basic.nack)");
        else if (p->returned[i])
            results[i] = txo_error_set(&errors[i], TXO_ECONFIG,
                                       "rabbitmq publisher: unroutable, returned by the broker "
                                       "(%s): no queue bound for its routing key",
                                       p->return_text[i]);
        else
            results[i] = 0;
        done++;
    }
    return done;
}

/* basic.return: reads the returned content and flags the pending message with its id. */
static int on_return(struct rmq_publisher *p, const amqp_basic_return_t *ret,
                     const struct txo_outbox_message *msgs, size_t n, const int *results)
{
    struct txo__rmq_conn *c = &p->conn;
    char text[128];
    snprintf(text, sizeof(text), "%u %.*s, routing key %.*s", (unsigned)ret->reply_code,
             (int)ret->reply_text.len, (const char *)ret->reply_text.bytes,
             (int)ret->routing_key.len, (const char *)ret->routing_key.bytes);
    amqp_message_t msg;
    amqp_rpc_reply_t r = amqp_read_message(c->st, TXO__RMQ_CHANNEL, &msg, 0);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        return TXO_EUNAVAILABLE;
    amqp_bytes_t id = msg.properties.message_id;
    bool has_id = (msg.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0;
    for (size_t i = 0; has_id && i < n; i++) {
        if (results[i] != RESULT_PENDING || p->returned[i])
            continue;
        const char *k = msgs[i].idempotency_key;
        if (strlen(k) == id.len && memcmp(k, id.bytes, id.len) == 0) {
            p->returned[i] = true;
            snprintf(p->return_text[i], sizeof(p->return_text[i]), "%s", text);
            break;
        }
    }
    amqp_destroy_message(&msg);
    return 0;
}

/* Reads confirms until all n_sent are settled or the deadline; returns how many are left. */
static size_t wait_confirms(struct rmq_publisher *p, const struct txo_outbox_message *msgs,
                            size_t n, uint64_t first_tag, size_t n_sent, int *results,
                            struct txo_error *errors, const char **broke)
{
    struct txo__rmq_conn *c = &p->conn;
    size_t left = n_sent;
    int64_t deadline = txo_monotonic_ms() + c->opts.confirm_timeout_ms;
    *broke = NULL;
    while (left > 0) {
        int64_t remaining = deadline - txo_monotonic_ms();
        if (remaining <= 0)
            break;
        struct timeval tv = tv_of_ms(remaining);
        amqp_frame_t frame;
        int s = amqp_simple_wait_frame_noblock(c->st, &frame, &tv);
        if (s == AMQP_STATUS_TIMEOUT)
            break;
        if (s != AMQP_STATUS_OK) {
            *broke = amqp_error_string2(s);
            break;
        }
        if (frame.frame_type != AMQP_FRAME_METHOD || txo__rmq_blocked_frame(c, &frame))
            continue;
        amqp_method_t *mth = &frame.payload.method;
        if (mth->id == AMQP_BASIC_ACK_METHOD) {
            amqp_basic_ack_t *a = mth->decoded;
            left -=
                settle(p, first_tag, n_sent, a->delivery_tag, a->multiple, true, results, errors);
        } else if (mth->id == AMQP_BASIC_NACK_METHOD) {
            amqp_basic_nack_t *a = mth->decoded;
            left -=
                settle(p, first_tag, n_sent, a->delivery_tag, a->multiple, false, results, errors);
        } else if (mth->id == AMQP_BASIC_RETURN_METHOD) {
            if (on_return(p, mth->decoded, msgs, n, results) < 0) {
                *broke = "reading a returned message";
                break;
            }
        } else if (mth->id == AMQP_CHANNEL_CLOSE_METHOD ||
                   mth->id == AMQP_CONNECTION_CLOSE_METHOD) {
            *broke = mth->id == AMQP_CHANNEL_CLOSE_METHOD ? "channel closed by the server"
                                                          : "connection closed by the server";
            if (mth->id == AMQP_CHANNEL_CLOSE_METHOD) {
                amqp_channel_close_t *cl = mth->decoded;
                TXO_LOG(TXO_LOG_WARN, "rabbitmq", "channel closed by the server",
                        TXO_KV_U64("reply_code", cl->reply_code),
                        TXO_KV_STRN("reply_text", (const char *)cl->reply_text.bytes,
                                    cl->reply_text.len));
            }
            break;
        }
    }
    return left;
}

static void count(struct txo_metric *m, double v)
{
    if (m != NULL && v != 0)
        txo_metric_add(m, NULL, v);
}

static int rmq_publish_batch(void *self, const struct txo_outbox_message *msgs, size_t n,
                             int *results, struct txo_error *errors)
{
    struct rmq_publisher *p = self;
    struct txo__rmq_conn *c = &p->conn;
    if (n == 0)
        return 0;
    struct txo_error why;
    txo_error_init(&why);
    int rc = grow(p, n) < 0
                 ? txo_error_set(&why, TXO_ENOMEM,
                                 "rabbitmq publisher: out of memory for a batch of %zu", n)
                 : 0;
    if (rc == 0)
        rc = txo__rmq_conn_open(c, &why);
    if (rc < 0) {
        /*
         * Not about these messages (login refused, exchange declared differently, server
         * down): they stay PENDING, never dead-lettered for it. A refusal needs a human.
         */
        if (!txo_err_is_transient(rc)) {
            TXO_LOG(TXO_LOG_ERROR, "rabbitmq", "publisher cannot run",
                    TXO_KV_STR("error", txo_err_name(rc)), TXO_KV_STR("reason", why.msg));
            why.code = TXO_EUNAVAILABLE;
        }
        fail_all(n, results, errors, &why);
        count(p->metrics.failures, (double)n);
        return 0;
    }

    /* The frames read for the last batch live in rabbitmq-c's pools until released. */
    amqp_maybe_release_buffers(c->st);
    int64_t t0 = txo_monotonic_us();
    uint64_t first_tag = c->next_tag;
    size_t n_sent = 0;
    size_t i = 0;
    bool broken = false;
    for (; i < n; i++) {
        if (publish_one(p, &msgs[i], i, results, errors) < 0) {
            broken = true;
            i++;
            break;
        }
        if (p->tags[i] != 0)
            p->index_of[n_sent++] = i;
    }
    for (; i < n; i++)
        results[i] = txo_error_set(&errors[i], TXO_EUNAVAILABLE,
                                   "rabbitmq publisher: connection lost while publishing");
    if (p->metrics.in_flight != NULL)
        txo_metric_set(p->metrics.in_flight, NULL, (double)n_sent);

    const char *broke = broken ? "the connection broke while publishing" : NULL;
    size_t left = 0;
    if (!broken && n_sent > 0)
        left = wait_confirms(p, msgs, n, first_tag, n_sent, results, errors, &broke);
    else
        left = n_sent;
    char note[TXO__RMQ_BLOCKED_NOTE_MAX];
    for (size_t k = 0; k < n; k++) {
        if (results[k] != RESULT_PENDING)
            continue;
        if (broke != NULL)
            results[k] = txo_error_set(&errors[k], TXO_ETIMEOUT,
                                       "rabbitmq publisher: %s before the confirm (maybe "
                                       "delivered)",
                                       broke);
        else
            results[k] = txo_error_set(
                &errors[k], TXO_ETIMEOUT,
                "rabbitmq publisher: no confirm within %" PRId64 " ms%s (maybe delivered)",
                c->opts.confirm_timeout_ms, txo__rmq_blocked_note(c, note, sizeof(note)));
    }
    if (broke != NULL || left > 0) {
        char where[300];
        TXO_LOG(TXO_LOG_WARN, "rabbitmq",
                "batch not fully confirmed, reconnecting on the next batch",
                TXO_KV_STR("server", txo__rmq_where(c, where, sizeof(where))),
                TXO_KV_U64("size", n), TXO_KV_U64("unconfirmed", left),
                TXO_KV_STR("reason", broke != NULL           ? broke
                                     : c->blocked[0] != '\0' ? "confirm timeout, blocked"
                                                             : "confirm timeout"));
        txo__rmq_conn_drop(c);
    }

    size_t n_ok = 0;
    for (size_t k = 0; k < n; k++)
        n_ok += results[k] == 0;
    double elapsed_s = (double)(txo_monotonic_us() - t0) / 1e6;
    if (p->metrics.in_flight != NULL)
        txo_metric_set(p->metrics.in_flight, NULL, 0);
    count(p->metrics.published, (double)n_ok);
    count(p->metrics.failures, (double)(n - n_ok));
    if (p->metrics.confirm_latency != NULL && n_sent > 0 && left == 0 && broke == NULL)
        txo_metric_observe(p->metrics.confirm_latency, NULL, elapsed_s);
    TXO_LOG(TXO_LOG_DEBUG, "rabbitmq", "batch published", TXO_KV_U64("size", n),
            TXO_KV_U64("confirmed", n_ok), TXO_KV_U64("unconfirmed", left),
            TXO_KV_F64("elapsed_ms", elapsed_s * 1000));
    return 0;
}

static void rmq_publisher_destroy(void *self)
{
    struct rmq_publisher *p = self;
    txo__rmq_conn_release(&p->conn);
    txo_free(p->tags);
    txo_free(p->index_of);
    txo_free(p->returned);
    txo_free(p->return_text);
    txo_free(p);
}

static const struct txo_publisher_ops rmq_ops = {
    .name = "rabbitmq",
    .publish_batch = rmq_publish_batch,
    .destroy = rmq_publisher_destroy,
    .flags = TXO_PUBLISHER_QUICK,
};

static const struct txo_metric_desc families[] = {
    {TXO_METRIC_COUNTER, "txo_rabbitmq_published_total",
     "Messages the RabbitMQ broker confirmed (publisher confirms).", 0, NULL},
    {TXO_METRIC_COUNTER, "txo_rabbitmq_publish_failures_total",
     "Messages not confirmed: connection down, nack, returned unroutable, confirm timeout or "
     "bad event.",
     0, NULL},
    {TXO_METRIC_GAUGE, "txo_rabbitmq_in_flight", "Messages published and awaiting their confirm.",
     0, NULL},
    {TXO_METRIC_HISTOGRAM, "txo_rabbitmq_confirm_latency_seconds",
     "Time from the first publish of a batch to its last confirm.", 0, NULL},
};

static int register_metrics(struct rmq_publisher *p, struct txo_metrics *reg, struct txo_error *err)
{
    struct txo_metric **const slots[] = {&p->metrics.published, &p->metrics.failures,
                                         &p->metrics.in_flight, &p->metrics.confirm_latency};
    return txo__transport_metrics(reg, families, TXO_ARRAY_LEN(families), slots, err);
}

static int rmq_publisher_init(void *self, const struct txo__transport_args *a,
                              struct txo_error *err)
{
    struct rmq_publisher *p = self;
    const struct txo_rabbitmq_opts *o = a->opts;
    int rc = txo__rmq_conn_init(&p->conn, o, "publisher", true, err);
    if (rc == 0)
        rc = register_metrics(p, a->metrics, err);
    if (rc == 0 && o->connect_required)
        rc = txo__rmq_conn_open(&p->conn, err);
    return rc;
}

int txo_publisher_rabbitmq_new(const struct txo_rabbitmq_opts *o, struct txo_metrics *metrics,
                               struct txo_publisher **out, struct txo_error *err)
{
    int rc = txo__rmq_check_opts(o, false, err);
    if (rc < 0)
        return rc;
    struct txo__transport_args a = {.opts = o, .metrics = metrics};
    return txo__publisher_build(&rmq_ops, sizeof(struct rmq_publisher), rmq_publisher_init, &a, out,
                                err);
}
