#include "core/common.h"

/*
 * The Redis Streams history reader (txo/history.h; txo_history_redis_new() in txo/redis.h):
 * the entries of every stream the relay's stream template names, read with XRANGE, which
 * neither consumes nor acknowledges anything (consumer groups and their pending lists are not
 * touched).
 *
 * One read, redis_read():
 *   1. The streams: the template itself when it has no placeholder, else every key of type
 *      stream that the template's glob matches (SCAN MATCH, each placeholder a '*'). A
 *      worker's dead-letter stream "<stream>.dead" beside a matched stream is left out: it holds
 *      copies of entries, not what the relay published.
 *   2. Per stream, XINFO STREAM: when entries-added (Redis 7) equals the length, the stream
 *      never lost an entry; otherwise entries were trimmed (MAXLEN) or deleted (XDEL), and
 *      Redis does not say which, so the stream is taken to hold only from its first entry
 *      on. Before Redis 7 (no entries-added) a stream with entries is taken the same way.
 *   3. XRANGE from "<from ms>-0" to "<to ms>" in pages of PAGE entries, each page starting
 *      after the last id of the previous one ("(" ids, Redis 6.2); each entry goes to fn with
 *      its idempotency_key field. An entry's time is the millisecond part of its id (the
 *      server's clock at XADD).
 *
 * Ownership: the reader owns its connection (opened by the first read). Thread-safety: one
 * thread at a time.
 */

#include "broker/redis_internal.h"
#include "broker/transport.h"

#define PAGE         1000 /* XRANGE COUNT and SCAN COUNT */
#define POSITION_MAX 700
#define DEAD_SUFFIX  ".dead"

struct redis_history {
    struct txo__redis_conn conn;
    char *stream_template;
};

/* The names found by SCAN: sorted, without duplicates, each owned. */
struct names {
    char **v;
    size_t n, cap;
};

static void names_release(struct names *ns)
{
    for (size_t i = 0; i < ns->n; i++)
        txo_free(ns->v[i]);
    txo_free(ns->v);
    memset(ns, 0, sizeof(*ns));
}

static int names_add(struct names *ns, const char *s, size_t len)
{
    if (TXO_ARRAY_RESERVE(ns->v, ns->cap, ns->n + 1, 16) < 0)
        return TXO_ENOMEM;
    ns->v[ns->n] = txo_strndup(s, len);
    if (ns->v[ns->n] == NULL)
        return TXO_ENOMEM;
    ns->n++;
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool names_has(const struct names *ns, const char *s)
{
    return bsearch(&s, ns->v, ns->n, sizeof(*ns->v), cmp_name) != NULL;
}

/* Sorts, drops duplicates (SCAN may return a key twice) and "<name>.dead" beside "<name>". */
static void names_finish(struct names *ns)
{
    if (ns->n == 0)
        return;
    qsort(ns->v, ns->n, sizeof(*ns->v), cmp_name);
    size_t k = 1;
    for (size_t i = 1; i < ns->n; i++) {
        if (strcmp(ns->v[i], ns->v[k - 1]) == 0)
            txo_free(ns->v[i]);
        else
            ns->v[k++] = ns->v[i];
    }
    ns->n = k;
    bool *dead = txo_calloc(ns->n, sizeof(*dead));
    if (dead == NULL)
        return; /* keeping the dead-letter streams only reads more */
    size_t sl = strlen(DEAD_SUFFIX);
    for (size_t i = 0; i < ns->n; i++) {
        size_t len = strlen(ns->v[i]);
        if (len <= sl || strcmp(ns->v[i] + len - sl, DEAD_SUFFIX) != 0)
            continue;
        ns->v[i][len - sl] = '\0';
        dead[i] = names_has(ns, ns->v[i]);
        ns->v[i][len - sl] = '.';
    }
    k = 0;
    for (size_t i = 0; i < ns->n; i++) {
        if (dead[i])
            txo_free(ns->v[i]);
        else
            ns->v[k++] = ns->v[i];
    }
    ns->n = k;
    txo_free(dead);
}

/* The SCAN glob of a template: literal bytes escaped, each placeholder a '*'. *literal tells
 * whether it had no placeholder (then the template is the one stream's name). */
static int template_glob(const char *tmpl, char *out, size_t cap, bool *literal)
{
    char probe[TXO__REDIS_STREAM_MAX];
    if (txo_redis_stream_name(tmpl, "a", "b", probe, sizeof(probe), NULL) < 0)
        return TXO_EINVAL;
    *literal = strchr(tmpl, '{') == NULL; /* every '{' starts a placeholder (checked above) */
    size_t n = 0;
    for (const char *p = tmpl; *p != '\0';) {
        if (*p == '{') {
            const char *end = strchr(p, '}');
            if (end == NULL || n + 2 > cap)
                return TXO_EINVAL;
            out[n++] = '*';
            p = end + 1;
            continue;
        }
        bool special = strchr("*?[]\\", *p) != NULL;
        if (n + (special ? 3 : 2) > cap)
            return TXO_EINVAL;
        if (special)
            out[n++] = '\\';
        out[n++] = *p++;
    }
    out[n] = '\0';
    return 0;
}

/* Every stream the template names. */
static int list_streams(struct redis_history *rh, struct names *ns, struct txo_error *err)
{
    struct txo__redis_conn *c = &rh->conn;
    char glob[2 * TXO__REDIS_STREAM_MAX];
    bool literal = false;
    if (template_glob(rh->stream_template, glob, sizeof(glob), &literal) < 0)
        return txo_error_set(err, TXO_EINVAL, "redis history: stream template \"%s\" is invalid",
                             rh->stream_template);
    if (literal)
        return names_add(ns, rh->stream_template, strlen(rh->stream_template)) == 0
                   ? 0
                   : txo_error_set(err, TXO_ENOMEM, "redis history: out of memory");
    char cursor[32] = "0";
    char count[16];
    snprintf(count, sizeof(count), "%d", PAGE);
    do {
        const char *argv[] = {"SCAN", cursor, "MATCH", glob, "COUNT", count, "TYPE", "stream"};
        redisReply *r = NULL;
        int rc = txo__redis_command(c, 8, argv, NULL, &r, err);
        if (rc < 0)
            return rc;
        if (r->type == REDIS_REPLY_ERROR) {
            rc = txo_error_set(err, txo__redis_reply_code(r->str, TXO_ECONFIG),
                               "redis history: SCAN refused by %s: %s", c->where, r->str);
        } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
                   r->element[0]->type != REDIS_REPLY_STRING ||
                   r->element[1]->type != REDIS_REPLY_ARRAY) {
            rc = txo_error_set(err, TXO_EUNAVAILABLE, "redis history: SCAN: unexpected reply");
        } else {
            snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
            redisReply *keys = r->element[1];
            for (size_t i = 0; rc == 0 && i < keys->elements; i++)
                if (keys->element[i]->type == REDIS_REPLY_STRING &&
                    names_add(ns, keys->element[i]->str, keys->element[i]->len) < 0)
                    rc = txo_error_set(err, TXO_ENOMEM, "redis history: out of memory");
        }
        freeReplyObject(r);
        if (rc < 0)
            return rc;
    } while (strcmp(cursor, "0") != 0);
    names_finish(ns);
    return 0;
}

/* The value of field name in a flat [name, value, ...] reply, or NULL. */
static const redisReply *field(const redisReply *r, const char *name)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, name) == 0)
            return r->element[i + 1];
    return NULL;
}

/* The millisecond part of an entry id "<ms>-<seq>". */
static int64_t id_ms(const char *id)
{
    return id != NULL ? (int64_t)strtoll(id, NULL, 10) : 0;
}

/* XINFO STREAM: records how much of the stream is still held; *exists false when the key is
 * gone (a literal template naming a stream never written). */
static int stream_span(struct redis_history *rh, const char *stream, bool *exists,
                       struct txo_history_span *span, struct txo_error *err)
{
    struct txo__redis_conn *c = &rh->conn;
    const char *argv[] = {"XINFO", "STREAM", stream};
    redisReply *r = NULL;
    int rc = txo__redis_command(c, 3, argv, NULL, &r, err);
    if (rc < 0)
        return rc;
    *exists = true;
    if (r->type == REDIS_REPLY_ERROR) {
        if (strstr(r->str, "no such key") != NULL)
            *exists = false;
        else
            rc = txo_error_set(err, txo__redis_reply_code(r->str, TXO_ECONFIG),
                               "redis history: XINFO STREAM %s refused by %s: %s", stream, c->where,
                               r->str);
        freeReplyObject(r);
        return rc;
    }
    const redisReply *length = field(r, "length");
    const redisReply *added = field(r, "entries-added");
    const redisReply *first = field(r, "first-entry");
    const redisReply *last_id = field(r, "last-generated-id");
    long long len = length != NULL && length->type == REDIS_REPLY_INTEGER ? length->integer : 0;
    bool dropped = added == NULL || added->type != REDIS_REPLY_INTEGER || added->integer > len;
    char where[TXO__REDIS_STREAM_MAX + 64];
    if (dropped && first != NULL && first->type == REDIS_REPLY_ARRAY && first->elements >= 1 &&
        first->element[0]->type == REDIS_REPLY_STRING) {
        snprintf(where, sizeof(where), "stream %s, first entry %s", stream, first->element[0]->str);
        txo_history_span_hold(span, where, id_ms(first->element[0]->str) * 1000);
    } else if (dropped && len == 0 && last_id != NULL && last_id->type == REDIS_REPLY_STRING &&
               strcmp(last_id->str, "0-0") != 0) {
        /* Every entry it ever had is gone: it holds nothing stored up to its last id. */
        snprintf(where, sizeof(where), "stream %s, emptied after id %s", stream, last_id->str);
        txo_history_span_hold(span, where, (id_ms(last_id->str) + 1) * 1000);
    }
    freeReplyObject(r);
    return 0;
}

/* One XRANGE page's entries to fn; *next gets the last id. */
static int deliver_page(const char *stream, const redisReply *r, txo_history_fn fn, void *arg,
                        struct txo_history_span *span, char *next, size_t next_cap)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
            e->element[0]->type != REDIS_REPLY_STRING)
            continue;
        const char *id = e->element[0]->str;
        const redisReply *k = field(e->element[1], TXO__REDIS_F_KEY);
        char position[POSITION_MAX];
        snprintf(position, sizeof(position), "stream %s id %s", stream, id);
        struct txo_history_msg hm = {
            .key = k != NULL && k->type == REDIS_REPLY_STRING ? k->str : NULL,
            .position = position,
            .time_us = id_ms(id) * 1000,
        };
        span->messages++;
        rc = fn(arg, &hm);
        snprintf(next, next_cap, "(%s", id);
    }
    return rc;
}

static int read_stream(struct redis_history *rh, const char *stream, int64_t from_us, int64_t to_us,
                       txo_history_fn fn, void *arg, struct txo_history_span *span,
                       struct txo_error *err)
{
    struct txo__redis_conn *c = &rh->conn;
    char start[64], end[32], count[16];
    snprintf(start, sizeof(start), "%" PRId64 "-0", from_us > 0 ? from_us / 1000 : 0);
    snprintf(end, sizeof(end), "%" PRId64, to_us / 1000);
    snprintf(count, sizeof(count), "%d", PAGE);
    for (;;) {
        const char *argv[] = {"XRANGE", stream, start, end, "COUNT", count};
        redisReply *r = NULL;
        int rc = txo__redis_command(c, 6, argv, NULL, &r, err);
        if (rc < 0)
            return rc;
        size_t got = 0;
        if (r->type == REDIS_REPLY_ERROR)
            rc = txo_error_set(err, txo__redis_reply_code(r->str, TXO_ECONFIG),
                               "redis history: XRANGE %s refused by %s: %s", stream, c->where,
                               r->str);
        else if (r->type == REDIS_REPLY_ARRAY) {
            got = r->elements;
            rc = deliver_page(stream, r, fn, arg, span, start, sizeof(start));
        }
        freeReplyObject(r);
        if (rc != 0 || got < PAGE)
            return rc;
    }
}

static int redis_read(void *self, int64_t from_us, int64_t to_us, txo_history_fn fn, void *arg,
                      struct txo_history_span *span, struct txo_error *err)
{
    struct redis_history *rh = self;
    int rc = txo__redis_connect(&rh->conn, err);
    if (rc < 0)
        return rc;
    struct names ns = {.n = 0};
    rc = list_streams(rh, &ns, err);
    for (size_t i = 0; rc == 0 && i < ns.n; i++) {
        bool exists = false;
        rc = stream_span(rh, ns.v[i], &exists, span, err);
        if (rc == 0 && exists) {
            span->sources++;
            rc = read_stream(rh, ns.v[i], from_us, to_us, fn, arg, span, err);
        }
    }
    TXO_LOG(TXO_LOG_DEBUG, "redis", "history read", TXO_KV_STR("template", rh->stream_template),
            TXO_KV_U64("streams", ns.n), TXO_KV_U64("messages", span->messages),
            TXO_KV_I64("rc", rc));
    names_release(&ns);
    return rc;
}

static void redis_history_destroy(void *self)
{
    struct redis_history *rh = self;
    txo__redis_conn_release(&rh->conn);
    txo_free(rh->stream_template);
    txo_free(rh);
}

static const struct txo_history_ops redis_history_ops = {
    .name = "redis",
    .read = redis_read,
    .destroy = redis_history_destroy,
};

static int redis_history_init(void *self, const struct txo__transport_args *a,
                              struct txo_error *err)
{
    struct redis_history *rh = self;
    const struct txo_redis_opts *o = a->opts;
    int rc = txo__redis_conn_init(&rh->conn, o, "history", err);
    if (rc < 0)
        return rc;
    rh->stream_template = txo_strdup(o->stream_template);
    if (rh->stream_template == NULL)
        return txo_error_set(err, TXO_ENOMEM, "redis history: out of memory");
    return 0;
}

int txo_history_redis_new(const struct txo_redis_opts *o, struct txo_history **out,
                          struct txo_error *err)
{
    int rc = txo__redis_check_opts(o, "history", err);
    if (rc < 0)
        return rc;
    struct txo__transport_args a = {.opts = o};
    return txo__history_build(&redis_history_ops, sizeof(struct redis_history), redis_history_init,
                              &a, out, err);
}
