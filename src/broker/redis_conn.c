#include "core/common.h"

/*
 * The Redis Streams transport's shared part (redis_internal.h): options and their defaults,
 * the stream-name template, the redis:// URL, one blocking hiredis connection with timeouts,
 * and what a failure or an error reply means as a TXO_E* code.
 *
 * Why blocking hiredis with socket timeouts and no background thread: a relay batch and a
 * consumer poll are both request/response with a deadline, made from the owner's thread, so a
 * synchronous context is enough; redisSetTimeout (SO_RCVTIMEO/SO_SNDTIMEO) bounds every read
 * and write. hiredis marks a context unusable after any I/O error, so one is dropped at once
 * and the next batch or poll connects again: while the server is down that fails within the
 * connect timeout (at once when the port refuses), never a hang.
 *
 * Ownership: the connection owns its copies of the URL parts; the password is wiped before it
 * is freed and never appears in a message (`where` has no credentials). Thread-safety: one
 * owner thread per connection; the consumer-name counter is atomic.
 */

#include <sys/time.h>

#include "broker/redis_internal.h"
#include "broker/transport.h"
#include "core/text.h"

#define DEFAULT_PORT 6379

void txo_redis_opts_init(struct txo_redis_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->url = "redis://127.0.0.1:6379/0";
    o->connect_timeout_ms = 2000;
    o->timeout_ms = 5000;
    o->stream_template = "txo.events.{aggregate_type}";
    o->maxlen = 0;
    o->stream = NULL;
    o->group = "txo-worker";
    o->consumer_name = NULL;
    o->event_type = NULL;
    o->claim_idle_ms = 30000;
    o->dead_letter = true;
}

/* ---- stream names ---- */

int txo_redis_stream_name(const char *tmpl, const char *aggregate_type, const char *event_type,
                          char *out, size_t out_size, struct txo_error *err)
{
    static const char agg_ph[] = "{aggregate_type}";
    static const char type_ph[] = "{event_type}";
    if (out != NULL && out_size > 0)
        out[0] = '\0';
    if (tmpl == NULL || aggregate_type == NULL || event_type == NULL || out == NULL ||
        out_size == 0)
        return txo_error_set(err, TXO_EINVAL, "redis stream name: missing argument");
    if (tmpl[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "redis stream name: the template is empty");
    size_t n = 0;
    for (const char *p = tmpl; *p != '\0';) {
        bool ok;
        if (strncmp(p, agg_ph, sizeof(agg_ph) - 1) == 0) {
            ok = txo__text_append_name_part(out, out_size, &n, aggregate_type, "");
            p += sizeof(agg_ph) - 1;
        } else if (strncmp(p, type_ph, sizeof(type_ph) - 1) == 0) {
            ok = txo__text_append_name_part(out, out_size, &n, event_type, "");
            p += sizeof(type_ph) - 1;
        } else if (*p == '{') {
            out[0] = '\0';
            return txo_error_set(err, TXO_EINVAL,
                                 "redis stream name: template \"%s\" has an unknown placeholder "
                                 "(only {aggregate_type} and {event_type})",
                                 tmpl);
        } else {
            ok = n + 2 <= out_size;
            if (ok) {
                out[n++] = *p++;
                out[n] = '\0';
            }
        }
        if (!ok) {
            out[0] = '\0';
            return txo_error_set(err, TXO_EINVAL,
                                 "redis stream name: longer than %zu bytes for template \"%s\"",
                                 out_size - 1, tmpl);
        }
    }
    return 0;
}

/* ---- options ---- */

int txo__redis_check_opts(const struct txo_redis_opts *o, const char *role, struct txo_error *err)
{
    if (o == NULL)
        return txo_error_set(err, TXO_EINVAL, "redis %s: options are required", role);
    if (o->url == NULL || o->url[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "redis %s: url is empty", role);
    if (o->connect_timeout_ms < 1 || o->timeout_ms < 1)
        return txo_error_set(err, TXO_EINVAL,
                             "redis %s: connect_timeout_ms and timeout_ms must be >= 1", role);
    if (strcmp(role, "publisher") == 0 || strcmp(role, "history") == 0) {
        char probe[TXO__REDIS_STREAM_MAX];
        if (txo_redis_stream_name(o->stream_template, "a", "b", probe, sizeof(probe), err) < 0)
            return txo_error_wrap(err, "redis %s: stream_template", role);
        if (strcmp(role, "publisher") == 0 && o->maxlen < 0)
            return txo_error_set(err, TXO_EINVAL,
                                 "redis publisher: maxlen must be >= 0 (0: no trimming), got "
                                 "%" PRId64,
                                 o->maxlen);
        return 0;
    }
    if (o->stream == NULL || o->stream[0] == '\0' || strlen(o->stream) >= TXO__REDIS_STREAM_MAX)
        return txo_error_set(err, TXO_EINVAL, "redis consumer: stream is required (1..%d bytes)",
                             TXO__REDIS_STREAM_MAX - 1);
    if (o->group == NULL || o->group[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "redis consumer: group is empty");
    if (o->consumer_name != NULL && o->consumer_name[0] == '\0')
        return txo_error_set(err, TXO_EINVAL, "redis consumer: consumer_name is empty");
    if (o->claim_idle_ms < 1)
        return txo_error_set(err, TXO_EINVAL,
                             "redis consumer: claim_idle_ms must be >= 1, got %" PRId64,
                             o->claim_idle_ms);
    return 0;
}

/* ---- the URL ---- */

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* A percent-decoded copy of s[0..len), or NULL (bad escape: *bad set; or out of memory). */
static char *decode_part(const char *s, size_t len, bool *bad)
{
    char *out = txo_malloc(len + 1);
    if (out == NULL)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '%') {
            out[n++] = s[i];
            continue;
        }
        int hi = i + 2 < len ? hexval(s[i + 1]) : -1;
        int lo = hi >= 0 ? hexval(s[i + 2]) : -1;
        if (hi < 0 || lo < 0) {
            *bad = true;
            txo_free(out);
            return NULL;
        }
        out[n++] = (char)(hi * 16 + lo);
        i += 2;
    }
    out[n] = '\0';
    return out;
}

/* Copies user (p..colon, may be empty: none) and password (colon+1..at), percent-decoded. */
static int parse_credentials(struct txo__redis_conn *c, const char *p, const char *colon,
                             const char *at, struct txo_error *err)
{
    bool bad = false;
    if (colon > p) {
        c->user = decode_part(p, (size_t)(colon - p), &bad);
        if (c->user == NULL)
            goto fail;
    }
    c->password = decode_part(colon + 1, (size_t)(at - colon - 1), &bad);
    if (c->password != NULL)
        return 0;
fail:
    if (bad)
        return txo_error_set(err, TXO_EINVAL, "redis %s: url credentials have a bad %%-escape",
                             c->role);
    return txo_error_set(err, TXO_ENOMEM, "redis %s: out of memory", c->role);
}

/* Parses redis://[[user]:password@]host[:port][/db] into c. Messages never echo credentials. */
static int parse_url(struct txo__redis_conn *c, const char *url, struct txo_error *err)
{
    static const char scheme[] = "redis://";
    const char *role = c->role;
    if (strncmp(url, "rediss://", 9) == 0)
        return txo_error_set(err, TXO_EINVAL,
                             "redis %s: TLS (rediss://) is not supported: this hiredis has no TLS; "
                             "reach the server over a trusted network or a tunnel",
                             role);
    if (strncmp(url, scheme, sizeof(scheme) - 1) != 0)
        return txo_error_set(err, TXO_EINVAL,
                             "redis %s: url must start with redis:// "
                             "(redis://[[user]:password@]host[:port][/db])",
                             role);
    const char *p = url + sizeof(scheme) - 1;
    int rc = 0;
    const char *end = p + strlen(p);
    const char *slash = strchr(p, '/');
    const char *auth_end = memchr(p, '@', (size_t)((slash != NULL ? slash : end) - p));
    if (auth_end != NULL) {
        /* '@' may occur in the password only percent-encoded, so the last one ends it. */
        const char *at = auth_end;
        for (const char *q = at + 1; q < (slash != NULL ? slash : end); q++)
            if (*q == '@')
                at = q;
        auth_end = at;
        const char *colon = memchr(p, ':', (size_t)(auth_end - p));
        if (colon == NULL)
            return txo_error_set(err, TXO_EINVAL,
                                 "redis %s: url credentials must be user:password or :password "
                                 "(a ':' before the password)",
                                 role);
        rc = parse_credentials(c, p, colon, auth_end, err);
        if (rc < 0)
            return rc;
        p = auth_end + 1;
    }
    const char *host_end = slash != NULL ? slash : end;
    const char *port_sep = NULL;
    const char *host = p;
    size_t host_len;
    if (*p == '[') {
        const char *close = memchr(p, ']', (size_t)(host_end - p));
        if (close == NULL)
            return txo_error_set(err, TXO_EINVAL, "redis %s: url has an unclosed '[' in the host",
                                 role);
        host = p + 1;
        host_len = (size_t)(close - host);
        if (close + 1 < host_end) {
            if (close[1] != ':')
                return txo_error_set(err, TXO_EINVAL, "redis %s: url has junk after the host",
                                     role);
            port_sep = close + 1;
        }
    } else {
        port_sep = memchr(p, ':', (size_t)(host_end - p));
        host_len = (size_t)((port_sep != NULL ? port_sep : host_end) - p);
    }
    if (host_len == 0)
        return txo_error_set(err, TXO_EINVAL, "redis %s: url has no host", role);
    c->port = DEFAULT_PORT;
    if (port_sep != NULL) {
        char *stop = NULL;
        errno = 0;
        long port = strtol(port_sep + 1, &stop, 10);
        if (stop == port_sep + 1 || stop != host_end || errno != 0 || port < 1 || port > 65535)
            return txo_error_set(err, TXO_EINVAL, "redis %s: url port must be 1..65535", role);
        c->port = (int)port;
    }
    c->db = 0;
    if (slash != NULL && slash[1] != '\0') {
        char *stop = NULL;
        errno = 0;
        long db = strtol(slash + 1, &stop, 10);
        if (*stop != '\0' || errno != 0 || db < 0 || db > INT32_MAX)
            return txo_error_set(err, TXO_EINVAL,
                                 "redis %s: url database (after the '/') must be a number >= 0",
                                 role);
        c->db = db;
    }
    c->host = txo_strndup(host, host_len);
    if (c->host == NULL)
        return txo_error_set(err, TXO_ENOMEM, "redis %s: out of memory", role);
    snprintf(c->where, sizeof(c->where), "redis://%s%s%s:%d/%ld", *p == '[' ? "[" : "", c->host,
             *p == '[' ? "]" : "", c->port, c->db);
    return 0;
}

int txo__redis_conn_init(struct txo__redis_conn *c, const struct txo_redis_opts *o,
                         const char *role, struct txo_error *err)
{
    memset(c, 0, sizeof(*c));
    c->role = role;
    c->connect_timeout_ms = o->connect_timeout_ms;
    c->timeout_ms = o->timeout_ms;
    c->check_durability = strcmp(role, "publisher") == 0;
    int rc = parse_url(c, o->url, err);
    if (rc < 0)
        txo__redis_conn_release(c);
    return rc;
}

void txo__redis_conn_release(struct txo__redis_conn *c)
{
    txo__redis_drop(c);
    txo_free(c->host);
    txo_free(c->user);
    txo__wipe_free(c->password);
    c->host = NULL;
    c->user = NULL;
    c->password = NULL;
}

void txo__redis_drop(struct txo__redis_conn *c)
{
    if (c->ctx != NULL)
        redisFree(c->ctx);
    c->ctx = NULL;
}

static struct timeval to_timeval(int64_t ms)
{
    struct timeval tv;
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
    return tv;
}

/* ---- codes ---- */

int txo__redis_io_code(const redisContext *ctx, int saved_errno)
{
    if (ctx != NULL && ctx->err == REDIS_ERR_IO &&
        (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK))
        return TXO_ETIMEOUT;
    if (ctx != NULL && ctx->err == REDIS_ERR_OOM)
        return TXO_ENOMEM;
    return TXO_EUNAVAILABLE;
}

static bool starts_with_word(const char *text, const char *word)
{
    size_t n = strlen(word);
    return strncmp(text, word, n) == 0 && (text[n] == ' ' || text[n] == '\0');
}

int txo__redis_reply_code(const char *text, int fallback)
{
    static const char *const passing[] = {"OOM",        "LOADING",  "BUSY",        "READONLY",
                                          "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOAUTH",
                                          "WRONGPASS",  "NOPERM",   "MISCONF"};
    if (text == NULL)
        return fallback;
    if (starts_with_word(text, "WRONGTYPE"))
        return TXO_ECONFIG;
    for (size_t i = 0; i < sizeof(passing) / sizeof(passing[0]); i++)
        if (starts_with_word(text, passing[i]))
            return TXO_EUNAVAILABLE;
    return fallback;
}

/* ---- commands ---- */

int txo__redis_set_timeout(struct txo__redis_conn *c, int64_t ms, struct txo_error *err)
{
    if (c->ctx == NULL)
        return txo_error_set(err, TXO_EUNAVAILABLE, "redis %s: not connected to %s", c->role,
                             c->where);
    if (redisSetTimeout(c->ctx, to_timeval(ms < 1 ? 1 : ms)) != REDIS_OK) {
        int rc = txo_error_set(err, TXO_EUNAVAILABLE, "redis %s: setting a timeout on %s: %s",
                               c->role, c->where, c->ctx->errstr);
        txo__redis_drop(c);
        return rc;
    }
    return 0;
}

int txo__redis_command(struct txo__redis_conn *c, int argc, const char **argv, const size_t *lens,
                       redisReply **reply, struct txo_error *err)
{
    *reply = NULL;
    if (c->ctx == NULL) {
        txo_error_set(err, TXO_EUNAVAILABLE, "redis %s: not connected to %s", c->role, c->where);
        return TXO_EUNAVAILABLE;
    }
    errno = 0;
    redisReply *r = redisCommandArgv(c->ctx, argc, argv, lens);
    int saved = errno;
    if (r == NULL) {
        int code = txo__redis_io_code(c->ctx, saved);
        txo_error_set(err, code, "redis %s: %s on %s: %s", c->role, argv[0], c->where,
                      code == TXO_ETIMEOUT ? "no reply within the timeout" : c->ctx->errstr);
        txo__redis_drop(c);
        return code; /* always < 0: the caller gets a reply exactly when this returns 0 */
    }
    *reply = r;
    return 0;
}

/* Runs a command that must answer +OK (AUTH, SELECT). */
static int command_ok(struct txo__redis_conn *c, int argc, const char **argv, const char *what,
                      struct txo_error *err)
{
    redisReply *r = NULL;
    int rc = txo__redis_command(c, argc, argv, NULL, &r, err);
    if (rc < 0)
        return rc;
    if (r->type == REDIS_REPLY_ERROR)
        rc = txo_error_set(err, TXO_EUNAVAILABLE, "redis %s: %s refused by %s: %s", c->role, what,
                           c->where, r->str);
    freeReplyObject(r);
    if (rc < 0)
        txo__redis_drop(c);
    return rc;
}

/* The value of one CONFIG GET parameter, or "" (CONFIG may be renamed or forbidden). */
static void config_get(struct txo__redis_conn *c, const char *name, char *out, size_t cap)
{
    out[0] = '\0';
    const char *argv[] = {"CONFIG", "GET", name};
    redisReply *r = NULL;
    struct txo_error ignored;
    txo_error_init(&ignored);
    if (txo__redis_command(c, 3, argv, NULL, &r, &ignored) < 0)
        return;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING)
        snprintf(out, cap, "%s", r->element[1]->str);
    freeReplyObject(r);
}

/* Warns once when the server may lose acknowledged writes on a crash (txo/redis.h). */
static void check_durability(struct txo__redis_conn *c)
{
    char aof[16], fsync[16];
    config_get(c, "appendonly", aof, sizeof(aof));
    if (c->ctx == NULL)
        return;
    config_get(c, "appendfsync", fsync, sizeof(fsync));
    if (c->ctx == NULL)
        return;
    c->check_durability = false;
    if (aof[0] == '\0' || fsync[0] == '\0') {
        TXO_LOG(
            TXO_LOG_WARN, "redis",
            "cannot read the server's persistence settings (CONFIG GET refused); an acknowledged "
            "XADD survives a server crash only with appendonly yes and appendfsync always",
            TXO_KV_STR("server", c->where));
    } else if (strcmp(aof, "yes") != 0 || strcmp(fsync, "always") != 0) {
        TXO_LOG(TXO_LOG_WARN, "redis",
                "the server may lose acknowledged events on a crash (set appendonly yes and "
                "appendfsync always for the outbox guarantee)",
                TXO_KV_STR("server", c->where), TXO_KV_STR("appendonly", aof),
                TXO_KV_STR("appendfsync", fsync));
    }
}

int txo__redis_connect(struct txo__redis_conn *c, struct txo_error *err)
{
    if (c->ctx != NULL)
        return 0;
    redisContext *ctx =
        redisConnectWithTimeout(c->host, c->port, to_timeval(c->connect_timeout_ms));
    if (ctx == NULL)
        return txo_error_set(err, TXO_ENOMEM, "redis %s: out of memory connecting", c->role);
    if (ctx->err != 0) {
        int rc = txo_error_set(err, TXO_EUNAVAILABLE, "redis %s: cannot connect to %s: %s", c->role,
                               c->where, ctx->errstr);
        redisFree(ctx);
        return rc;
    }
    c->ctx = ctx;
    int rc = txo__redis_set_timeout(c, c->timeout_ms, err);
    if (rc == 0 && c->password != NULL) {
        const char *argv[] = {"AUTH", c->user != NULL ? c->user : c->password, c->password};
        rc = command_ok(c, c->user != NULL ? 3 : 2, argv, "AUTH", err);
    }
    if (rc == 0 && c->db != 0) {
        char db[24];
        snprintf(db, sizeof(db), "%ld", c->db);
        const char *argv[] = {"SELECT", db};
        rc = command_ok(c, 2, argv, "SELECT", err);
    }
    if (rc < 0) {
        txo__redis_drop(c);
        return rc;
    }
    if (c->check_durability)
        check_durability(c);
    if (c->ctx == NULL)
        return txo_error_set(err, TXO_EUNAVAILABLE, "redis %s: connection to %s lost", c->role,
                             c->where);
    TXO_LOG(TXO_LOG_INFO, "redis", "connected", TXO_KV_STR("role", c->role),
            TXO_KV_STR("server", c->where));
    return 0;
}
