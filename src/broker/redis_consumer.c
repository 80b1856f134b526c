#include "core/common.h"

/*
 * The Redis Streams consumer (txo/redis.h): one consumer of a consumer group on one stream,
 * behind a txo_consumer handle.
 *
 * One poll, redis_poll():
 *   1. Connect if needed (TXO_EUNAVAILABLE at once while the server is down) and create the
 *      group the first time (XGROUP CREATE <stream> <group> 0 MKSTREAM; BUSYGROUP means it
 *      exists, which is fine).
 *   2. Claim: when the claim timer is due, XAUTOCLAIM <stream> <group> <me> <claim_idle_ms>
 *      <cursor> COUNT max_msgs takes over entries delivered (to anyone, us included) and not
 *      acknowledged for claim_idle_ms: a consumer that died, or a handler that failed
 *      transiently. The cursor walks the group's pending list across polls; once it wrapped
 *      to 0-0 the next claim waits claim_idle_ms / 4. The delivery count of a claimed entry
 *      comes from XPENDING (XAUTOCLAIM already counted this delivery).
 *   3. Otherwise read new entries: XREADGROUP GROUP <group> <me> COUNT max_msgs BLOCK
 *      timeout_ms STREAMS <stream> > (the socket timeout is timeout_ms + the command timeout
 *      meanwhile, so the blocking read is not taken for a dead server).
 *   4. The entries of the read or claim go to the handler (txo__handler_run: a batch handler
 *      in one call, a per-message handler once per entry); then each is settled by its verdict
 *      in settle(): XACK (0), nothing (transient: it stays pending and is claimed again after
 *      claim_idle_ms), or dead letter + XACK (permanent). All the entries to acknowledge go in
 *      one XACK. XACK comes only after the handler's effect was committed, so a crash in
 *      between means a redelivery (at least once), never a loss.
 *
 * The group and its pending entries live on the server: freeing the consumer changes nothing
 * there, and its entries are claimed by another consumer after claim_idle_ms.
 *
 * Ownership: the consumer owns its connection and copies of the options; the handler and its
 * arg are borrowed; metric families belong to the registry. Thread-safety: one polling thread
 * at a time; the process-wide consumer-name counter is atomic.
 */

#include <stdatomic.h>
#include <unistd.h>

#include "broker/consumer_internal.h"
#include "broker/redis_internal.h"
#include "broker/transport.h"

#define NAME_MAX_LEN  256
#define ID_MAX        64
#define CLAIM_MIN_GAP 1 /* ms */

static atomic_uint consumer_seq;

enum outcome { OUT_ACK, OUT_RETRY, OUT_DEAD, OUT_SKIPPED, OUT_COUNT };
static const char *const outcome_names[OUT_COUNT] = {"ack", "retry", "dead", "skipped"};

struct redis_consumer {
    struct txo__redis_conn conn;
    char *stream;
    char *dead_stream; /* "<stream>.dead" */
    char *group;
    char *name;
    char *event_type; /* NULL: every entry goes to the handler */
    int64_t claim_idle_ms;
    bool dead_letter;
    bool group_ready;
    char claim_cursor[ID_MAX];
    int64_t next_claim_ms;
    struct txo_handler h;
    struct txo_metric *consumed; /* label outcome */
    struct txo_metric *claimed;
};

/* One entry while it is handled: the inbound message's transport. */
struct entry {
    const char *id;
    redisReply *fields; /* array f1 v1 f2 v2 ... */
};

/* The value of field name, or NULL. Field names compare with '-' and '_' alike, ignoring case,
 * so that header("ce-type") finds the ce_type field and "Content-Type" content_type. */
static const char *entry_field(const struct entry *e, const char *name, size_t *len)
{
    for (size_t i = 0; i + 1 < e->fields->elements; i += 2) {
        const redisReply *f = e->fields->element[i];
        const redisReply *v = e->fields->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            continue;
        size_t n = strlen(name);
        if (f->len != n)
            continue;
        bool same = true;
        for (size_t k = 0; k < n && same; k++) {
            char a = f->str[k] == '-' ? '_' : f->str[k];
            char b = name[k] == '-' ? '_' : name[k];
            if (a >= 'A' && a <= 'Z')
                a = (char)(a - 'A' + 'a');
            if (b >= 'A' && b <= 'Z')
                b = (char)(b - 'A' + 'a');
            same = a == b;
        }
        if (same) {
            if (len != NULL)
                *len = v->len;
            return v->str;
        }
    }
    return NULL;
}

static const char *redis_header(const struct txo_inbound_message *in, const char *name)
{
    return entry_field(in->transport, name, NULL);
}

static void count_outcome(struct redis_consumer *rc, enum outcome o)
{
    if (rc->consumed != NULL)
        txo_metric_inc(rc->consumed, (const char *const[]){outcome_names[o]});
}

/* ---- commands ---- */

/* XGROUP CREATE once; BUSYGROUP (it exists) is success. */
static int ensure_group(struct redis_consumer *rc, struct txo_error *err)
{
    if (rc->group_ready)
        return 0;
    const char *argv[] = {"XGROUP", "CREATE", rc->stream, rc->group, "0", "MKSTREAM"};
    redisReply *r = NULL;
    int code = txo__redis_command(&rc->conn, 6, argv, NULL, &r, err);
    if (code < 0)
        return code;
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9) != 0) {
        code = txo__redis_reply_code(r->str, TXO_ECONFIG);
        code = txo_error_set(err, code, "redis consumer: creating group %s on stream %s: %s",
                             rc->group, rc->stream, r->str);
    } else {
        rc->group_ready = true;
        TXO_LOG(TXO_LOG_INFO, "redis", "consumer ready", TXO_KV_STR("stream", rc->stream),
                TXO_KV_STR("group", rc->group), TXO_KV_STR("consumer", rc->name));
    }
    freeReplyObject(r);
    return code;
}

/*
 * One XACK of the n (>= 1) entries ids. Returns 0 or TXO_EUNAVAILABLE (then they come back
 * after claim_idle_ms).
 */
static int ack(struct redis_consumer *rc, const char *const *ids, size_t n, struct txo_error *err)
{
    const char **argv = txo_calloc(3 + n, sizeof(*argv));
    if (argv == NULL)
        return txo_error_set(err, TXO_ENOMEM,
                             "redis consumer: XACK of %zu entries: out of memory (they come "
                             "back and the inbox drops them)",
                             n);
    argv[0] = "XACK";
    argv[1] = rc->stream;
    argv[2] = rc->group;
    memcpy(argv + 3, ids, n * sizeof(*ids));
    /* The messages name the first id only: a batch can hold thousands. */
    char what[ID_MAX + 48];
    if (n == 1)
        snprintf(what, sizeof(what), "entry %s", ids[0]);
    else
        snprintf(what, sizeof(what), "%zu entries from %s", n, ids[0]);
    redisReply *r = NULL;
    struct txo_error why;
    txo_error_init(&why);
    int code = txo__redis_command(&rc->conn, (int)(3 + n), argv, NULL, &r, &why);
    txo_free(argv);
    if (code < 0)
        return txo_error_set(err, TXO_EUNAVAILABLE,
                             "redis consumer: XACK of %s not confirmed (it comes back and the "
                             "inbox drops it): %s",
                             what, why.msg);
    if (r->type == REDIS_REPLY_ERROR)
        code = txo_error_set(err, TXO_EUNAVAILABLE, "redis consumer: XACK of %s refused: %s", what,
                             r->str);
    freeReplyObject(r);
    return code;
}

/* Copies the entry to the dead-letter stream with why it was rejected. */
static int dead_letter(struct redis_consumer *rc, const struct entry *e, uint64_t delivery,
                       int code, const char *reason, struct txo_error *err)
{
    size_t n_fields = e->fields->elements;
    size_t argc = 3 + n_fields + 10;
    const char **argv = txo_calloc(argc, sizeof(*argv));
    size_t *lens = txo_calloc(argc, sizeof(*lens));
    if (argv == NULL || lens == NULL) {
        txo_free(argv);
        txo_free(lens);
        return txo_error_set(err, TXO_ENOMEM, "redis consumer: out of memory");
    }
    size_t k = 0;
    char delivery_text[24];
    snprintf(delivery_text, sizeof(delivery_text), "%" PRIu64, delivery);
#define PUT(s, l)                                                                                  \
    do {                                                                                           \
        argv[k] = (s);                                                                             \
        lens[k] = (l);                                                                             \
        k++;                                                                                       \
    } while (0)
    PUT("XADD", 4);
    PUT(rc->dead_stream, strlen(rc->dead_stream));
    PUT("*", 1);
    for (size_t i = 0; i + 1 < n_fields; i += 2) {
        const redisReply *f = e->fields->element[i];
        const redisReply *v = e->fields->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            continue;
        PUT(f->str, f->len);
        PUT(v->str, v->len);
    }
    const char *extra[] = {"dead_reason",   reason,       "dead_error",    txo_err_name(code),
                           "dead_group",    rc->group,    "dead_entry_id", e->id,
                           "dead_delivery", delivery_text};
    for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++)
        PUT(extra[i], strlen(extra[i]));
#undef PUT
    redisReply *r = NULL;
    int rc_code = txo__redis_command(&rc->conn, (int)k, argv, lens, &r, err);
    txo_free(argv);
    txo_free(lens);
    if (rc_code < 0)
        return rc_code;
    if (r->type == REDIS_REPLY_ERROR)
        rc_code = txo_error_set(err, TXO_EUNAVAILABLE,
                                "redis consumer: XADD to dead-letter stream %s refused: %s",
                                rc->dead_stream, r->str);
    freeReplyObject(r);
    return rc_code;
}

/* The group's delivery count of entry id (XPENDING), or 1 when it cannot be read. */
static uint64_t delivery_count(struct redis_consumer *rc, const char *id)
{
    const char *argv[] = {"XPENDING", rc->stream, rc->group, id, id, "1"};
    redisReply *r = NULL;
    struct txo_error ignored;
    txo_error_init(&ignored);
    uint64_t count = 1;
    if (txo__redis_command(&rc->conn, 6, argv, NULL, &r, &ignored) < 0)
        return count;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->type == REDIS_REPLY_ARRAY && r->element[0]->elements == 4 &&
        r->element[0]->element[3]->type == REDIS_REPLY_INTEGER &&
        r->element[0]->element[3]->integer > 0)
        count = (uint64_t)r->element[0]->element[3]->integer;
    freeReplyObject(r);
    return count;
}

/* ---- handling ---- */

/* What entries->element[i] of a read or claim reply ([id, [fields]] each) is. */
enum entry_kind {
    ENTRY_LIVE,      /* e filled: to be handled */
    ENTRY_MALFORMED, /* not an entry: left alone */
    ENTRY_GONE,      /* e.id filled: trimmed or deleted while pending, only to be acknowledged */
};

static enum entry_kind entry_at(struct redis_consumer *rc, const redisReply *entries, size_t i,
                                struct entry *e)
{
    const redisReply *er = entries->element[i];
    if (er->type != REDIS_REPLY_ARRAY || er->elements != 2 ||
        er->element[0]->type != REDIS_REPLY_STRING)
        return ENTRY_MALFORMED;
    e->id = er->element[0]->str;
    e->fields = er->element[1];
    if (e->fields->type == REDIS_REPLY_ARRAY)
        return ENTRY_LIVE;
    /* Trimmed or deleted while pending (older servers answer a nil): nothing to run. */
    TXO_LOG(TXO_LOG_WARN, "redis", "pending entry no longer in the stream (trimmed?), acknowledged",
            TXO_KV_STR("stream", rc->stream), TXO_KV_STR("entry_id", e->id));
    return ENTRY_GONE;
}

/*
 * Fills in with entry e as the handler sees it. Returns false when e is of another event type
 * than opts.event_type: it is then only to be acknowledged (counted as skipped).
 */
static bool describe_entry(struct redis_consumer *rc, const struct entry *e, uint64_t delivery,
                           struct txo_inbound_message *in)
{
    size_t len = 0;
    const char *key = entry_field(e, TXO__REDIS_F_KEY, NULL);
    const char *type = entry_field(e, TXO__REDIS_F_TYPE, NULL);
    memset(in, 0, sizeof(*in));
    if (rc->event_type != NULL && (type == NULL || strcmp(type, rc->event_type) != 0)) {
        TXO_LOG(TXO_LOG_DEBUG, "redis", "entry of another event type acknowledged unhandled",
                TXO_KV_STR("message_id", key != NULL ? key : ""),
                TXO_KV_STR("type", type != NULL ? type : ""), TXO_KV_STR("entry_id", e->id));
        count_outcome(rc, OUT_SKIPPED);
        return false;
    }
    in->subject = rc->stream;
    in->data = entry_field(e, TXO__REDIS_F_ENVELOPE, &len);
    if (in->data == NULL)
        in->data = entry_field(e, TXO__REDIS_F_DATA, &len);
    if (in->data == NULL) {
        in->data = "";
        len = 0;
    }
    in->len = len;
    in->msg_id = key;
    in->delivery = delivery;
    in->header = redis_header;
    in->transport = e;
    return true;
}

/*
 * Settles entry e (described by in) by its handler's verdict code (reason in herr): logs and
 * counts it and, when permanent, copies it to the dead-letter stream. The caller sends the
 * XACK, so that a batch acknowledges all its entries in one command. Returns 1 when e is to
 * be acknowledged, 0 when it stays pending (transient), or TXO_EUNAVAILABLE with err set when
 * the dead-letter copy failed (it stays pending too and comes back later).
 */
static int settle(struct redis_consumer *rc, const struct entry *e,
                  const struct txo_inbound_message *in, int code, const struct txo_error *herr,
                  struct txo_error *err)
{
    const char *id = in->msg_id != NULL ? in->msg_id : "";
    const char *reason = herr->msg[0] != '\0' ? herr->msg : txo_strerror(code);
    if (code == 0) {
        TXO_LOG(TXO_LOG_DEBUG, "redis", "entry handled", TXO_KV_STR("message_id", id),
                TXO_KV_STR("stream", rc->stream), TXO_KV_STR("entry_id", e->id),
                TXO_KV_U64("delivery", in->delivery));
        count_outcome(rc, OUT_ACK);
        return 1;
    }
    if (txo_err_is_transient(code)) {
        TXO_LOG(TXO_LOG_WARN, "redis", "handler failed, entry left pending and claimed again later",
                TXO_KV_STR("message_id", id), TXO_KV_STR("stream", rc->stream),
                TXO_KV_STR("entry_id", e->id), TXO_KV_U64("delivery", in->delivery),
                TXO_KV_I64("claim_idle_ms", rc->claim_idle_ms),
                TXO_KV_STR("error", txo_err_name(code)), TXO_KV_STR("reason", reason));
        count_outcome(rc, OUT_RETRY);
        return 0;
    }
    if (rc->dead_letter) {
        struct txo_error why;
        txo_error_init(&why);
        if (dead_letter(rc, e, in->delivery, code, reason, &why) < 0)
            return txo_error_set(err, TXO_EUNAVAILABLE,
                                 "redis consumer: entry %s left pending, dead-lettering it "
                                 "failed: %s",
                                 e->id, why.msg);
    }
    TXO_LOG(TXO_LOG_ERROR, "redis", "handler rejected the entry, acknowledged",
            TXO_KV_BOOL("to_dead_letter_stream", rc->dead_letter), TXO_KV_STR("message_id", id),
            TXO_KV_STR("stream", rc->stream), TXO_KV_STR("entry_id", e->id),
            TXO_KV_U64("delivery", in->delivery), TXO_KV_STR("error", txo_err_name(code)),
            TXO_KV_STR("reason", reason));
    count_outcome(rc, OUT_DEAD);
    return 1;
}

static int lost_mid_batch(struct redis_consumer *rc, struct txo_error *err)
{
    return txo_error_set(err, TXO_EUNAVAILABLE,
                         "redis consumer: connection to %s lost mid-batch; the rest stays pending",
                         rc->conn.where);
}

/*
 * Handles the entries of a read or claim reply ([id, [fields]] each; claimed: delivery counts
 * from XPENDING): the handler runs on every entry for it, then each is settled by its result
 * and all those to acknowledge (also the skipped and trimmed ones) go in one XACK. Stops
 * settling when the connection is gone. Returns the first settlement failure.
 */
static int handle_entries(struct redis_consumer *rc, const redisReply *entries, bool claimed,
                          size_t *handled, struct txo_error *err)
{
    size_t n = entries->elements;
    if (n == 0)
        return 0;
    struct entry *es = txo_calloc(n, sizeof(*es));
    const char **ack_ids = txo_calloc(n, sizeof(*ack_ids));
    struct txo__handler_batch b;
    size_t m = 0, n_ack = 0;
    int first = 0;
    if (!txo__handler_batch_alloc(&b, n) || es == NULL || ack_ids == NULL) {
        first = txo_error_set(err, TXO_ENOMEM, "redis consumer: batch of %zu: out of memory", n);
        goto out; /* unsettled: claimed again after claim_idle_ms */
    }
    for (size_t i = 0; i < n; i++) {
        enum entry_kind kind = entry_at(rc, entries, i, &es[m]);
        if (kind == ENTRY_MALFORMED)
            continue;
        if (kind == ENTRY_GONE) {
            ack_ids[n_ack++] = es[m].id;
            continue;
        }
        uint64_t delivery = claimed ? delivery_count(rc, es[m].id) : 1;
        if (!describe_entry(rc, &es[m], delivery, &b.in[m])) {
            ack_ids[n_ack++] = es[m].id;
            continue;
        }
        m++;
    }
    if (m > 0) {
        (void)txo__handler_run(&rc->h, b.in, m, b.results, b.errors);
        *handled += m;
        for (size_t i = 0; i < m; i++) {
            if (rc->conn.ctx == NULL) {
                first = lost_mid_batch(rc, err);
                goto out; /* nothing more reaches the server: the rest stays pending */
            }
            struct txo_error e_err;
            txo_error_init(&e_err);
            int code = settle(rc, &es[i], &b.in[i], b.results[i], &b.errors[i], &e_err);
            if (code > 0)
                ack_ids[n_ack++] = es[i].id;
            txo__settle_keep_first(code, &e_err, &first, err);
        }
    }
    if (n_ack > 0) {
        struct txo_error e_err;
        txo_error_init(&e_err);
        int code =
            rc->conn.ctx != NULL ? ack(rc, ack_ids, n_ack, &e_err) : lost_mid_batch(rc, &e_err);
        txo__settle_keep_first(code, &e_err, &first, err);
    }
out:
    txo_free(es);
    txo__handler_batch_release(&b);
    txo_free(ack_ids);
    return first;
}

/* XAUTOCLAIM when due. *n_claimed gets the entries taken over. */
static int claim(struct redis_consumer *rc, size_t max_msgs, size_t *handled, size_t *n_claimed,
                 struct txo_error *err)
{
    *n_claimed = 0;
    int64_t now = txo_monotonic_ms();
    if (now < rc->next_claim_ms)
        return 0;
    char idle[24], count[24];
    snprintf(idle, sizeof(idle), "%" PRId64, rc->claim_idle_ms);
    snprintf(count, sizeof(count), "%zu", max_msgs);
    const char *argv[] = {"XAUTOCLAIM", rc->stream,       rc->group, rc->name,
                          idle,         rc->claim_cursor, "COUNT",   count};
    redisReply *r = NULL;
    int code = txo__redis_command(&rc->conn, 8, argv, NULL, &r, err);
    if (code < 0)
        return code;
    if (r->type == REDIS_REPLY_ERROR) {
        if (strncmp(r->str, "NOGROUP", 7) == 0)
            rc->group_ready = false;
        code = txo_error_set(err, txo__redis_reply_code(r->str, TXO_EUNAVAILABLE),
                             "redis consumer: XAUTOCLAIM on %s: %s", rc->stream, r->str);
        freeReplyObject(r);
        return code;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        return txo_error_set(err, TXO_EUNAVAILABLE, "redis consumer: unexpected XAUTOCLAIM reply");
    }
    snprintf(rc->claim_cursor, sizeof(rc->claim_cursor), "%s", r->element[0]->str);
    bool wrapped = strcmp(rc->claim_cursor, "0-0") == 0;
    int64_t gap = rc->claim_idle_ms / 4 > CLAIM_MIN_GAP ? rc->claim_idle_ms / 4 : CLAIM_MIN_GAP;
    rc->next_claim_ms = wrapped && r->element[1]->elements < max_msgs ? now + gap : now;
    if (r->elements >= 3 && r->element[2]->type == REDIS_REPLY_ARRAY && r->element[2]->elements > 0)
        TXO_LOG(TXO_LOG_WARN, "redis",
                "pending entries were trimmed before they were acknowledged (lost for the group)",
                TXO_KV_STR("stream", rc->stream), TXO_KV_STR("group", rc->group),
                TXO_KV_U64("count", r->element[2]->elements));
    *n_claimed = r->element[1]->elements;
    if (*n_claimed > 0) {
        TXO_LOG(TXO_LOG_INFO, "redis", "claimed entries idle longer than claim_idle_ms",
                TXO_KV_STR("stream", rc->stream), TXO_KV_STR("group", rc->group),
                TXO_KV_U64("count", *n_claimed), TXO_KV_I64("claim_idle_ms", rc->claim_idle_ms));
        if (rc->claimed != NULL)
            txo_metric_add(rc->claimed, NULL, (double)*n_claimed);
    }
    code = handle_entries(rc, r->element[1], true, handled, err);
    freeReplyObject(r);
    return code;
}

/* XREADGROUP ... > blocking up to timeout_ms. */
static int read_new(struct redis_consumer *rc, size_t max_msgs, int64_t timeout_ms, size_t *handled,
                    struct txo_error *err)
{
    struct txo__redis_conn *c = &rc->conn;
    char count[24], block[24];
    snprintf(count, sizeof(count), "%zu", max_msgs);
    snprintf(block, sizeof(block), "%" PRId64, timeout_ms);
    const char *argv[] = {"XREADGROUP", "GROUP", rc->group, rc->name,   "COUNT", count,
                          "BLOCK",      block,   "STREAMS", rc->stream, ">"};
    int code = txo__redis_set_timeout(c, timeout_ms + c->timeout_ms, err);
    if (code < 0)
        return code;
    redisReply *r = NULL;
    code = txo__redis_command(c, 11, argv, NULL, &r, err);
    if (code == 0)
        code = txo__redis_set_timeout(c, c->timeout_ms, err);
    if (code < 0) {
        freeReplyObject(r);
        return code == TXO_ETIMEOUT ? TXO_EUNAVAILABLE : code;
    }
    if (r->type == REDIS_REPLY_NIL) {
        freeReplyObject(r);
        return 0; /* nothing within the wait */
    }
    if (r->type == REDIS_REPLY_ERROR) {
        if (strncmp(r->str, "NOGROUP", 7) == 0)
            rc->group_ready = false; /* the stream or group was deleted: create it again */
        code = txo_error_set(err, txo__redis_reply_code(r->str, TXO_EUNAVAILABLE),
                             "redis consumer: XREADGROUP on %s: %s", rc->stream, r->str);
        freeReplyObject(r);
        return code;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->type == REDIS_REPLY_ARRAY && r->element[0]->elements == 2 &&
        r->element[0]->element[1]->type == REDIS_REPLY_ARRAY)
        code = handle_entries(rc, r->element[0]->element[1], false, handled, err);
    else
        code = txo_error_set(err, TXO_EUNAVAILABLE, "redis consumer: unexpected XREADGROUP reply");
    freeReplyObject(r);
    return code;
}

static int redis_poll(void *self, size_t max_msgs, int64_t timeout_ms, size_t *handled,
                      struct txo_error *err)
{
    struct redis_consumer *rc = self;
    size_t done = 0;
    int code = txo__redis_connect(&rc->conn, err);
    if (code == 0)
        code = ensure_group(rc, err);
    size_t n_claimed = 0;
    if (code == 0)
        code = claim(rc, max_msgs, &done, &n_claimed, err);
    if (code == 0 && n_claimed == 0 && rc->conn.ctx != NULL)
        code = read_new(rc, max_msgs, timeout_ms, &done, err);
    *handled = done;
    return code;
}

static void redis_consumer_destroy(void *self)
{
    struct redis_consumer *rc = self;
    txo__redis_conn_release(&rc->conn);
    txo_free(rc->stream);
    txo_free(rc->dead_stream);
    txo_free(rc->group);
    txo_free(rc->name);
    txo_free(rc->event_type);
    txo_free(rc);
}

static const struct txo_consumer_ops redis_consumer_ops = {
    .name = "redis",
    .poll = redis_poll,
    .destroy = redis_consumer_destroy,
};

/* "<hostname>:<pid>:<n>", n counting the consumers this process made. */
static char *default_name(void)
{
    char host[NAME_MAX_LEN] = "";
    if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
        snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    unsigned n = atomic_fetch_add(&consumer_seq, 1) + 1;
    char name[NAME_MAX_LEN + 48];
    snprintf(name, sizeof(name), "%s:%ld:%u", host, (long)getpid(), n);
    return txo_strdup(name);
}

static const struct txo_metric_desc families[] = {
    {TXO_METRIC_COUNTER, "txo_redis_consumed_total",
     "Redis Stream entries this process's consumers settled, by outcome (ack, retry, dead, "
     "skipped).",
     1, (const char *const[]){"outcome"}},
    {TXO_METRIC_COUNTER, "txo_redis_claimed_total",
     "Pending Redis Stream entries taken over with XAUTOCLAIM after claim_idle_ms.", 0, NULL},
};

static int register_metrics(struct redis_consumer *rc, struct txo_metrics *reg,
                            struct txo_error *err)
{
    struct txo_metric **const slots[] = {&rc->consumed, &rc->claimed};
    if (txo__transport_metrics(reg, families, TXO_ARRAY_LEN(families), slots, err) < 0)
        return txo_error_wrap(err, "redis consumer: registering its metrics");
    return 0;
}

static int redis_consumer_init(void *self, const struct txo__transport_args *a,
                               struct txo_error *err)
{
    struct redis_consumer *rc = self;
    const struct txo_redis_opts *o = a->opts;
    rc->h = *a->h;
    rc->claim_idle_ms = o->claim_idle_ms;
    rc->dead_letter = o->dead_letter;
    snprintf(rc->claim_cursor, sizeof(rc->claim_cursor), "0-0");
    rc->stream = txo_strdup(o->stream);
    rc->group = txo_strdup(o->group);
    rc->name = o->consumer_name != NULL ? txo_strdup(o->consumer_name) : default_name();
    rc->event_type = o->event_type != NULL ? txo_strdup(o->event_type) : NULL;
    rc->dead_stream = txo__suffixed(o->stream, ".dead");
    if (rc->stream == NULL || rc->group == NULL || rc->name == NULL || rc->dead_stream == NULL ||
        (o->event_type != NULL && rc->event_type == NULL))
        return txo_error_set(err, TXO_ENOMEM, "redis consumer: out of memory");
    int code = txo__redis_conn_init(&rc->conn, o, "consumer", err);
    if (code == 0)
        code = register_metrics(rc, a->metrics, err);
    return code;
}

int txo_consumer_redis_new(const struct txo_redis_opts *o, const struct txo_handler *h,
                           struct txo_metrics *metrics, struct txo_consumer **out,
                           struct txo_error *err)
{
    int code = txo__redis_check_opts(o, "consumer", err);
    if (code < 0)
        return code;
    struct txo__transport_args a = {.opts = o, .h = h, .metrics = metrics};
    return txo__consumer_build(&redis_consumer_ops, sizeof(struct redis_consumer),
                               redis_consumer_init, &a, out, err);
}
