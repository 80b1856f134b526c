#include "core/common.h"

/*
 * The published envelope: the JSON object every publisher sends for one outbox event. Its
 * layout is a public contract (include/txo/publisher.h, README "Published envelope"):
 *
 *   {"id":42,"type":"OrderCreated","aggregate_type":"order","aggregate_id":"7",
 *    "idempotency_key":"order:7:created","created_at":"2026-11-30T15:37:00.123456Z",
 *    "attempt":1,"sequence":3,"prev_sequence":2,"payload":{...}}
 *
 * Keys come in exactly that order (sequence and prev_sequence only when the event has one),
 * compact, on one line. The payload is embedded as JSON, not as a string. It is checked with
 * jansson and then copied as text with the whitespace between tokens removed, so numbers keep their
 * exact digits (9007199254740993 stays that, a float is never re-rounded) and strings keep their
 * bytes; re-serialising a parsed tree would not guarantee either.
 *
 * CloudEvents 1.0 in structured JSON mode is the other format (include/txo/publisher.h): the
 * same fields under the specification's attribute names and txo* extensions, the payload as
 * "data". The decoder below reads both, so txo's own consumers follow a relay in either.
 *
 * Thread-safety: pure, except for the process's default format, written once at start-up.
 */

#include <jansson.h>

#include "core/text.h"
#include "txo/consumer.h"
#include "txo/trace.h"

#define PAYLOAD_KEY ",\"payload\":"

/*
 * Copies the JSON text in[0..len) to out without the insignificant whitespace (outside
 * strings). out must hold len bytes. Returns the bytes written. The text must already be
 * known-valid JSON.
 */
static size_t json_compact_copy(const char *in, size_t len, char *out)
{
    size_t o = 0;
    bool in_string = false;
    bool escaped = false;
    for (size_t i = 0; i < len; i++) {
        char c = in[i];
        if (in_string) {
            out[o++] = c;
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
            continue;
        if (c == '"')
            in_string = true;
        out[o++] = c;
    }
    return o;
}

/*
 * The envelope's text as it is written: the head's members one after the other into one
 * buffer, then the payload. A string is written as jansson writes one in compact mode: UTF-8
 * as it is, `"` and backslash escaped, \b \f \n \r \t by name and the other control bytes as
 * \u00XX; the decoder (jansson) reads exactly that back. rc is the first failure; a write after
 * one does nothing.
 */
struct writer {
    char *buf;
    size_t len, cap;
    int64_t id; /* the event, for errors */
    struct txo_error *err;
    int rc;
};

/* Room for more bytes after len, or false (rc set) when out of memory. */
static bool reserve(struct writer *w, size_t more)
{
    if (w->rc != 0)
        return false;
    if (w->cap - w->len >= more)
        return true;
    size_t cap = w->cap * 2 > w->len + more ? w->cap * 2 : w->len + more;
    char *p = more < SIZE_MAX / 4 ? txo_realloc(w->buf, cap) : NULL;
    if (p == NULL) {
        w->rc = txo_error_set(w->err, TXO_ENOMEM, "envelope of event %" PRId64 ": out of memory",
                              w->id);
        return false;
    }
    w->buf = p;
    w->cap = cap;
    return true;
}

static void put(struct writer *w, const char *text, size_t n)
{
    if (reserve(w, n)) {
        memcpy(w->buf + w->len, text, n);
        w->len += n;
    }
}

/* `"key":` after a comma unless it is the first member; room for more bytes after it. */
static bool put_key(struct writer *w, const char *key, size_t more)
{
    size_t key_len = strlen(key);
    if (!reserve(w, key_len + 4 + more))
        return false;
    char *o = w->buf + w->len;
    if (w->len > 1)
        *o++ = ',';
    *o++ = '"';
    memcpy(o, key, key_len);
    o += key_len;
    *o++ = '"';
    *o++ = ':';
    w->len = (size_t)(o - w->buf);
    return true;
}

/* A string member of event id's envelope: present and UTF-8, or TXO_EINVAL naming it. The
 * encoder (put_str) and txo_event_from_outbox() refuse the same members this way. */
static int check_member(const char *value, const char *key, int64_t id, struct txo_error *err)
{
    if (value == NULL)
        return txo_error_set(err, TXO_EINVAL, "envelope of event %" PRId64 ": %s is missing", id,
                             key);
    if (!txo_utf8_valid(value, strlen(value)))
        return txo_error_set(err, TXO_EINVAL, "envelope of event %" PRId64 ": %s is not UTF-8", id,
                             key);
    return 0;
}

static void put_str(struct writer *w, const char *key, const char *value)
{
    if (w->rc != 0 || (w->rc = check_member(value, key, w->id, w->err)) != 0)
        return;
    size_t n = strlen(value);
    /* Each byte becomes at most 6 (\u00XX), with the quotes. */
    if (n > SIZE_MAX / 8 || !put_key(w, key, 6 * n + 2))
        return;
    static const char hex[] = "0123456789ABCDEF";
    char *o = w->buf + w->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)value[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"':
        case '\\':
            *o++ = (char)c;
            break;
        case '\b':
            *o++ = 'b';
            break;
        case '\f':
            *o++ = 'f';
            break;
        case '\n':
            *o++ = 'n';
            break;
        case '\r':
            *o++ = 'r';
            break;
        case '\t':
            *o++ = 't';
            break;
        default:
            memcpy(o, "u00", 3);
            o += 3;
            *o++ = hex[c >> 4];
            *o++ = hex[c & 0xF];
        }
    }
    *o++ = '"';
    w->len = (size_t)(o - w->buf);
}

static void put_int(struct writer *w, const char *key, int64_t value)
{
    char num[24];
    int n = snprintf(num, sizeof(num), "%" PRId64, value);
    if (put_key(w, key, (size_t)n))
        put(w, num, (size_t)n);
}

/* One member of an envelope's head: the string str, or with is_num the number num. */
struct member {
    const char *key;
    const char *str; /* NULL (and not is_num): "<key> is missing" */
    int64_t num;
    bool is_num;
};

/* Writes the n members m in order, up to the first that fails (as put_str, put_int). */
static void put_members(struct writer *w, const struct member *m, size_t n)
{
    for (size_t i = 0; w->rc == 0 && i < n; i++) {
        if (m[i].is_num)
            put_int(w, m[i].key, m[i].num);
        else
            put_str(w, m[i].key, m[i].str);
    }
}

#define CE_DATA_KEY ",\"data\":"
/* The bytes a head usually takes (about 230 with a traceparent). */
#define HEAD_USUAL 384
/* The CloudEvents sequence extension: a decimal zero-padded to the 20 digits of UINT64_MAX,
 * so that text order is number order. */
#define CE_SEQUENCE_LEN   21
#define CE_SEQUENCE_FMT   "%020" PRIu64
#define CE_DEFAULT_SOURCE "/txo/outbox"
#define CE_SOURCE_MAX     255

/* The process's format: written once at start-up (txo_envelope_set_default), then only read. */
static enum txo_envelope_format default_format = TXO_ENVELOPE_TXO;
static char default_source[CE_SOURCE_MAX + 1] = CE_DEFAULT_SOURCE;

int txo_envelope_format_parse(const char *name, enum txo_envelope_format *out)
{
    if (name != NULL && strcmp(name, "txo") == 0)
        *out = TXO_ENVELOPE_TXO;
    else if (name != NULL && strcmp(name, "cloudevents") == 0)
        *out = TXO_ENVELOPE_CLOUDEVENTS;
    else if (name != NULL && strcmp(name, "cloudevents-binary") == 0)
        *out = TXO_ENVELOPE_CLOUDEVENTS_BINARY;
    else
        return TXO_EINVAL;
    return 0;
}

int txo_envelope_set_default(enum txo_envelope_format format, const char *source,
                             struct txo_error *err)
{
    const char *src = source != NULL && source[0] != '\0' ? source : CE_DEFAULT_SOURCE;
    size_t n = strlen(src);
    if (n > CE_SOURCE_MAX)
        return txo_error_set(err, TXO_EINVAL, "envelope source is %zu bytes, at most %d", n,
                             CE_SOURCE_MAX);
    memcpy(default_source, src, n + 1);
    default_format = format;
    return 0;
}

/* traceparent and tracestate, when the event has them: the same members in both formats (in
 * CloudEvents those of the distributed tracing extension). */
static void trace_head(struct writer *w, const struct txo_outbox_message *msg)
{
    if (msg->traceparent != NULL)
        put_str(w, "traceparent", msg->traceparent);
    if (msg->traceparent != NULL && msg->tracestate != NULL)
        put_str(w, "tracestate", msg->tracestate);
}

/* The txo envelope's fields before the payload, in the documented order. */
static void txo_head(struct writer *w, const struct txo_outbox_message *msg)
{
    const struct member fields[] = {
        {.key = "id", .num = msg->id, .is_num = true},
        {.key = "type", .str = msg->event_type},
        {.key = "aggregate_type", .str = msg->aggregate_type},
        {.key = "aggregate_id", .str = msg->aggregate_id},
        {.key = "idempotency_key", .str = msg->idempotency_key},
        {.key = "created_at", .str = msg->created_at},
        {.key = "attempt", .num = msg->attempt, .is_num = true},
    };
    put_members(w, fields, TXO_ARRAY_LEN(fields));
    if (msg->sequence != 0) {
        const struct member order[] = {
            {.key = "sequence", .num = (int64_t)msg->sequence, .is_num = true},
            {.key = "prev_sequence", .num = (int64_t)msg->prev_sequence, .is_num = true},
        };
        put_members(w, order, TXO_ARRAY_LEN(order));
    }
    trace_head(w, msg);
}

/* The CloudEvents attributes before data (include/txo/publisher.h). */
static void ce_head(struct writer *w, const struct txo_outbox_message *msg, const char *source)
{
    if (msg->aggregate_type == NULL || msg->aggregate_id == NULL) {
        w->rc = txo_error_set(w->err, TXO_EINVAL,
                              "envelope of event %" PRId64 ": aggregate missing", msg->id);
        return;
    }
    size_t subject_len = strlen(msg->aggregate_type) + 1 + strlen(msg->aggregate_id) + 1;
    char *subject = txo_malloc(subject_len);
    if (subject == NULL) {
        w->rc = txo_error_set(w->err, TXO_ENOMEM, "envelope of event %" PRId64 ": out of memory",
                              msg->id);
        return;
    }
    snprintf(subject, subject_len, "%s/%s", msg->aggregate_type, msg->aggregate_id);
    const struct member attributes[] = {
        {.key = "specversion", .str = "1.0"},
        {.key = "id", .str = msg->idempotency_key},
        {.key = "source", .str = source != NULL ? source : CE_DEFAULT_SOURCE},
        {.key = "type", .str = msg->event_type},
        {.key = "subject", .str = subject},
        {.key = "time", .str = msg->created_at},
        {.key = "datacontenttype", .str = "application/json"},
        {.key = "txoid", .num = msg->id, .is_num = true},
        {.key = "txoattempt", .num = msg->attempt, .is_num = true},
        {.key = "txoaggregatetype", .str = msg->aggregate_type},
        {.key = "txoaggregateid", .str = msg->aggregate_id},
    };
    put_members(w, attributes, TXO_ARRAY_LEN(attributes));
    txo_free(subject);
    if (msg->sequence != 0) {
        char seq[CE_SEQUENCE_LEN], prev[CE_SEQUENCE_LEN];
        snprintf(seq, sizeof(seq), CE_SEQUENCE_FMT, msg->sequence);
        snprintf(prev, sizeof(prev), CE_SEQUENCE_FMT, msg->prev_sequence);
        const struct member order[] = {{.key = "sequence", .str = seq},
                                       {.key = "txoprevsequence", .str = prev}};
        put_members(w, order, TXO_ARRAY_LEN(order));
    }
    trace_head(w, msg);
}

char *txo_envelope_encode(const struct txo_outbox_message *msg, size_t *len, struct txo_error *err)
{
    return txo_envelope_encode_as(msg, default_format, default_source, len, err);
}

char *txo_envelope_encode_as(const struct txo_outbox_message *msg, enum txo_envelope_format format,
                             const char *source, size_t *len, struct txo_error *err)
{
    TXO_ASSERT(msg != NULL);

    if (msg->payload == NULL) {
        txo_error_set(err, TXO_EINVAL, "envelope of event %" PRId64 ": payload is missing",
                      msg->id);
        return NULL;
    }
    size_t payload_len = msg->payload_len != 0 ? msg->payload_len : strlen(msg->payload);
    /* jansson reads a text cut at a raw NUL as whole; copied on, the NUL would end up in the
     * envelope (and cut it for every consumer that reads C strings). */
    if (memchr(msg->payload, '\0', payload_len) != NULL) {
        txo_error_set(err, TXO_EINVAL, "envelope of event %" PRId64 ": NUL byte in the payload",
                      msg->id);
        return NULL;
    }
    json_error_t jerr;
    json_t *doc = json_loadb(msg->payload, payload_len,
                             JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, &jerr);
    if (doc == NULL) {
        txo_error_set(err, TXO_EINVAL,
                      "envelope of event %" PRId64 ": payload is not JSON: %s at line %d column %d",
                      msg->id, jerr.text, jerr.line, jerr.column);
        return NULL;
    }
    json_decref(doc);

    /* The head, then `,"payload":<payload>}` (or `,"data":`), in one buffer that usually
     * needs no second allocation. */
    bool ce = format == TXO_ENVELOPE_CLOUDEVENTS || format == TXO_ENVELOPE_CLOUDEVENTS_BINARY;
    const char *key = ce ? CE_DATA_KEY : PAYLOAD_KEY;
    size_t key_len = strlen(key);
    struct writer w = {.id = msg->id, .err = err};
    if (reserve(&w, HEAD_USUAL + key_len + payload_len + 2))
        put(&w, "{", 1);
    if (ce)
        ce_head(&w, msg, source);
    else
        txo_head(&w, msg);
    if (reserve(&w, key_len + payload_len + 2)) {
        memcpy(w.buf + w.len, key, key_len);
        w.len += key_len;
        w.len += json_compact_copy(msg->payload, payload_len, w.buf + w.len);
        w.buf[w.len++] = '}';
        w.buf[w.len] = '\0';
    }
    if (w.rc != 0) {
        txo_free(w.buf);
        return NULL;
    }
    if (len != NULL)
        *len = w.len;
    return w.buf;
}

enum txo_envelope_format txo_envelope_default_format(void)
{
    return default_format;
}

/* ---- CloudEvents binary mode ---- */

/* True when byte c goes into a binary-mode header value as %XX. */
static bool ce_escaped(unsigned char c)
{
    return c <= 0x20 || c >= 0x7f || c == '"' || c == '%';
}

/* value, percent-encoded (ce_escaped), into a new string; NULL when out of memory. */
static char *ce_percent_encode(const char *value)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)value; *p != '\0'; p++)
        n += ce_escaped(*p) ? 3 : 1;
    char *out = txo_malloc(n + 1);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)value; *p != '\0'; p++) {
        if (ce_escaped(*p)) {
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 0xf];
        } else {
            out[o++] = (char)*p;
        }
    }
    out[o] = '\0';
    return out;
}

void txo_ce_headers_release(struct txo_ce_headers *headers)
{
    if (headers == NULL)
        return;
    for (size_t i = 0; i < headers->n; i++)
        txo_free(headers->values[i]);
    memset(headers, 0, sizeof(*headers));
}

/* Appends header name with value (percent-encoded); false when out of memory. */
static bool ce_add(struct txo_ce_headers *h, const char *name, const char *value)
{
    TXO_ASSERT(h->n < TXO_CE_HEADERS_MAX);
    h->names[h->n] = name;
    h->values[h->n] = ce_percent_encode(value);
    return h->values[h->n++] != NULL;
}

/*
 * The headers carry the attributes ce_head() writes before "data" (less datacontenttype,
 * which is the transport's Content-Type), from the same fields of msg; the body is the
 * structured envelope's data, so both modes validate and compact the payload alike.
 */
char *txo_envelope_binary(const struct txo_outbox_message *msg, struct txo_ce_headers *headers,
                          size_t *len, struct txo_error *err)
{
    TXO_ASSERT(msg != NULL && headers != NULL);
    memset(headers, 0, sizeof(*headers));
    size_t env_len = 0;
    char *env =
        txo_envelope_encode_as(msg, TXO_ENVELOPE_CLOUDEVENTS, default_source, &env_len, err);
    if (env == NULL)
        return NULL; /* a missing attribute or a payload that is not JSON: err says which */
    char id[24], attempt[16], seq[CE_SEQUENCE_LEN], prev[CE_SEQUENCE_LEN];
    char *subject = NULL, *body = NULL;
    snprintf(id, sizeof(id), "%" PRId64, msg->id);
    snprintf(attempt, sizeof(attempt), "%d", msg->attempt);
    snprintf(seq, sizeof(seq), CE_SEQUENCE_FMT, msg->sequence);
    snprintf(prev, sizeof(prev), CE_SEQUENCE_FMT, msg->prev_sequence);
    size_t subject_len = strlen(msg->aggregate_type) + 1 + strlen(msg->aggregate_id) + 1;
    subject = txo_malloc(subject_len);
    bool ok = subject != NULL;
    if (ok) {
        snprintf(subject, subject_len, "%s/%s", msg->aggregate_type, msg->aggregate_id);
        ok = ce_add(headers, "ce-specversion", "1.0") &&
             ce_add(headers, "ce-id", msg->idempotency_key) &&
             ce_add(headers, "ce-source", default_source) &&
             ce_add(headers, "ce-type", msg->event_type) &&
             ce_add(headers, "ce-subject", subject) &&
             ce_add(headers, "ce-time", msg->created_at) && ce_add(headers, "ce-txoid", id) &&
             ce_add(headers, "ce-txoattempt", attempt) &&
             ce_add(headers, "ce-txoaggregatetype", msg->aggregate_type) &&
             ce_add(headers, "ce-txoaggregateid", msg->aggregate_id);
        if (ok && msg->sequence != 0)
            ok = ce_add(headers, "ce-sequence", seq) && ce_add(headers, "ce-txoprevsequence", prev);
    }
    /* The body: the text after the first `,"data":` (the attributes before it are JSON
     * strings, where a quote is always escaped, so the first one is the key's), less the
     * closing brace. */
    const char *data = strstr(env, CE_DATA_KEY);
    TXO_ASSERT(data != NULL);
    data += strlen(CE_DATA_KEY);
    size_t n = env_len - (size_t)(data - env) - 1;
    if (ok)
        body = txo_strndup(data, n);
    if (body == NULL)
        txo_error_set(err, TXO_ENOMEM, "envelope of event %" PRId64 ": out of memory", msg->id);
    else if (len != NULL)
        *len = n;
    txo_free(subject);
    txo_free(env);
    return body;
}

/* ---- decoding ---- */

/*
 * A sequence as the envelopes carry it, into *out: a JSON integer (txo) or a decimal string
 * (CloudEvents, zero-padded or not). False for anything else, such as a sequence another
 * producer wrote in its own form.
 */
static bool sequence_text(const char *v, uint64_t *out)
{
    size_t len = v != NULL ? strlen(v) : 0;
    if (len == 0 || len > CE_SEQUENCE_LEN - 1)
        return false;
    uint64_t n = 0;
    for (const char *p = v; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return false;
        unsigned d = (unsigned)(*p - '0');
        if (n > (UINT64_MAX - d) / 10)
            return false;
        n = n * 10 + d;
    }
    *out = n;
    return true;
}

static bool sequence_json(const json_t *v, uint64_t *out)
{
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return true;
    }
    return json_is_string(v) && sequence_text(json_string_value(v), out);
}

/*
 * Sets ev's sequence and prev_sequence when both were read and make sense (prev < sequence);
 * otherwise the event has no sequence: it is still delivered, only not checked for order.
 */
static void take_sequence(struct txo_event *ev, bool seq_ok, uint64_t seq, bool prev_ok,
                          uint64_t prev)
{
    if (!seq_ok || !prev_ok || seq == 0 || prev >= seq)
        return;
    ev->sequence = seq;
    ev->prev_sequence = prev;
}

static int take_str(json_t *env, const char *key, bool required, char **out, struct txo_error *err)
{
    json_t *v = json_object_get(env, key);
    if (v == NULL || json_is_null(v)) {
        if (required)
            return txo_error_set(err, TXO_EINVAL, "envelope: \"%s\" is missing", key);
        return 0;
    }
    if (!json_is_string(v))
        return txo_error_set(err, TXO_EINVAL, "envelope: \"%s\" must be a string", key);
    size_t n = json_string_length(v);
    if (strlen(json_string_value(v)) != n)
        return txo_error_set(err, TXO_EINVAL, "envelope: \"%s\" contains a NUL byte", key);
    *out = txo_strndup(json_string_value(v), n);
    return *out != NULL ? 0 : txo_error_set(err, TXO_ENOMEM, "envelope: out of memory");
}

/*
 * The payload's text: our encoder writes it last, as `,"payload":<text>}`, after members whose
 * strings escape every quote, so the first `,"payload":` is that key even when the payload
 * holds one of its own. When the envelope ends that way (and that text is the same JSON) it is
 * taken as it is, keeping its exact digits; any other envelope gets the payload re-serialised,
 * compact.
 */
static char *payload_text(const char *data, size_t len, json_t *payload, const char *key,
                          size_t *out_len)
{
    size_t klen = strlen(key);
    for (size_t i = klen; i <= len; i++) {
        if (memcmp(data + i - klen, key, klen) != 0)
            continue;
        size_t start = i, end = len;
        while (end > start && (data[end - 1] == ' ' || data[end - 1] == '\n' ||
                               data[end - 1] == '\r' || data[end - 1] == '\t'))
            end--;
        if (end <= start || data[end - 1] != '}')
            break;
        end--; /* the envelope's closing brace */
        json_t *doc = json_loadb(data + start, end - start, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        bool same = doc != NULL && json_equal(doc, payload);
        json_decref(doc);
        if (!same)
            break;
        *out_len = end - start;
        return txo_strndup(data + start, end - start);
    }
    char *dumped = json_dumps(payload, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    if (dumped == NULL)
        return NULL;
    char *copy = txo_strdup(dumped);
    free(dumped); /* jansson allocates with malloc */
    *out_len = copy != NULL ? strlen(copy) : 0;
    return copy;
}

int txo_envelope_decode(const char *data, size_t len, struct txo_event *out, struct txo_error *err)
{
    struct txo_event ev;
    memset(&ev, 0, sizeof(ev));
    /* A raw NUL is never JSON; jansson reads past it, and the payload text would carry it. */
    if (data != NULL && memchr(data, '\0', len) != NULL)
        return txo_error_set(err, TXO_EINVAL, "envelope: NUL byte in the message");
    json_error_t jerr;
    json_t *env = data != NULL ? json_loadb(data, len, 0, &jerr) : NULL;
    int rc = 0;
    if (env == NULL || !json_is_object(env)) {
        rc = txo_error_set(err, TXO_EINVAL, "envelope is not a JSON object%s%s",
                           env == NULL && data != NULL ? ": " : "",
                           env == NULL && data != NULL ? jerr.text : "");
        goto out;
    }
    /* A CloudEvent (structured mode) names the same fields differently. */
    bool ce = json_object_get(env, "specversion") != NULL;
    rc = take_str(env, "type", true, &ev.type, err);
    if (rc == 0)
        rc = take_str(env, ce ? "id" : "idempotency_key", true, &ev.idempotency_key, err);
    if (rc == 0)
        rc = take_str(env, ce ? "txoaggregatetype" : "aggregate_type", false, &ev.aggregate_type,
                      err);
    if (rc == 0)
        rc = take_str(env, ce ? "time" : "created_at", false, &ev.created_at, err);
    if (rc != 0)
        goto out;
    json_t *agg = json_object_get(env, ce ? "txoaggregateid" : "aggregate_id");
    if (json_is_integer(agg)) {
        char buf[32];
        snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT, json_integer_value(agg));
        ev.aggregate_id = txo_strdup(buf);
        if (ev.aggregate_id == NULL) {
            rc = txo_error_set(err, TXO_ENOMEM, "envelope: out of memory");
            goto out;
        }
    } else {
        rc = take_str(env, ce ? "txoaggregateid" : "aggregate_id", false, &ev.aggregate_id, err);
        if (rc != 0)
            goto out;
    }
    json_t *id = json_object_get(env, ce ? "txoid" : "id");
    json_t *attempt = json_object_get(env, ce ? "txoattempt" : "attempt");
    ev.id = json_is_integer(id) ? (int64_t)json_integer_value(id) : 0;
    json_int_t a = json_is_integer(attempt) ? json_integer_value(attempt) : 0;
    ev.attempt = a > 0 && a < INT32_MAX ? (int)a : 0;
    uint64_t seq = 0, prev = 0;
    bool seq_ok = sequence_json(json_object_get(env, "sequence"), &seq);
    bool prev_ok =
        sequence_json(json_object_get(env, ce ? "txoprevsequence" : "prev_sequence"), &prev);
    take_sequence(&ev, seq_ok, seq, prev_ok, prev);
    ev.has_trace =
        txo_trace_parse(json_string_value(json_object_get(env, "traceparent")),
                        json_string_value(json_object_get(env, "tracestate")), &ev.trace);
    json_t *payload = json_object_get(env, ce ? "data" : "payload");
    if (!json_is_object(payload)) {
        rc = txo_error_set(err, TXO_EINVAL, "envelope: \"%s\" must be an object",
                           ce ? "data" : "payload");
        goto out;
    }
    ev.payload = payload_text(data, len, payload, ce ? CE_DATA_KEY : PAYLOAD_KEY, &ev.payload_len);
    if (ev.payload == NULL)
        rc = txo_error_set(err, TXO_ENOMEM, "envelope: out of memory");
out:
    json_decref(env);
    if (rc == 0)
        *out = ev;
    else
        txo_event_release(&ev);
    return rc;
}

/* A percent-encoded header value, decoded into *out (a new string; a '%' not followed by two
 * hex digits is kept as it is). Errors: TXO_EINVAL (it encodes a NUL byte), TXO_ENOMEM. */
static int ce_percent_decode(const char *v, char **out)
{
    size_t n = strlen(v);
    char *d = txo_malloc(n + 1);
    if (d == NULL)
        return TXO_ENOMEM;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int hi = v[i] == '%' && i + 2 < n + 1 ? txo__hex_digit(v[i + 1]) : -1;
        int lo = hi >= 0 ? txo__hex_digit(v[i + 2]) : -1;
        if (lo < 0) {
            d[o++] = v[i];
            continue;
        }
        if (hi == 0 && lo == 0) {
            txo_free(d);
            return TXO_EINVAL;
        }
        d[o++] = (char)(hi << 4 | lo);
        i += 2;
    }
    d[o] = '\0';
    *out = d;
    return 0;
}

/* Header name of msg, percent-decoded, into *out (left NULL when absent and not required). */
static int ce_take(const struct txo_inbound_message *msg, const char *name, bool required,
                   char **out, struct txo_error *err)
{
    const char *v = msg->header(msg, name);
    if (v == NULL)
        return required ? txo_error_set(err, TXO_EINVAL, "CloudEvent: header %s is missing", name)
                        : 0;
    int rc = ce_percent_decode(v, out);
    if (rc == TXO_EINVAL)
        return txo_error_set(err, rc, "CloudEvent: header %s encodes a NUL byte", name);
    if (rc < 0)
        return txo_error_set(err, rc, "CloudEvent: out of memory");
    return 0;
}

int txo_envelope_decode_message(const struct txo_inbound_message *msg, struct txo_event *out,
                                struct txo_error *err)
{
    if (msg->header == NULL || msg->header(msg, "ce-specversion") == NULL) {
        int rc = txo_envelope_decode(msg->data, msg->len, out, err);
        /* The envelope carries the trace context; a transport header can stand in for it. */
        if (rc == 0 && !out->has_trace && msg->header != NULL)
            out->has_trace = txo_trace_parse(msg->header(msg, "traceparent"),
                                             msg->header(msg, "tracestate"), &out->trace);
        return rc;
    }
    struct txo_event ev;
    memset(&ev, 0, sizeof(ev));
    char *id = NULL, *attempt = NULL;
    int rc = ce_take(msg, "ce-type", true, &ev.type, err);
    if (rc == 0)
        rc = ce_take(msg, "ce-id", true, &ev.idempotency_key, err);
    if (rc == 0)
        rc = ce_take(msg, "ce-txoaggregatetype", false, &ev.aggregate_type, err);
    if (rc == 0)
        rc = ce_take(msg, "ce-txoaggregateid", false, &ev.aggregate_id, err);
    if (rc == 0)
        rc = ce_take(msg, "ce-time", false, &ev.created_at, err);
    if (rc == 0)
        rc = ce_take(msg, "ce-txoid", false, &id, err);
    if (rc == 0)
        rc = ce_take(msg, "ce-txoattempt", false, &attempt, err);
    if (rc != 0)
        goto out;
    ev.id = id != NULL ? strtoll(id, NULL, 10) : 0;
    long a = attempt != NULL ? strtol(attempt, NULL, 10) : 0;
    ev.attempt = a > 0 && a < INT32_MAX ? (int)a : 0;
    uint64_t seq = 0, prev = 0;
    bool seq_ok = sequence_text(msg->header(msg, "ce-sequence"), &seq);
    bool prev_ok = sequence_text(msg->header(msg, "ce-txoprevsequence"), &prev);
    take_sequence(&ev, seq_ok, seq, prev_ok, prev);
    ev.has_trace =
        txo_trace_parse(msg->header(msg, "traceparent"), msg->header(msg, "tracestate"), &ev.trace);
    /* The body is the payload: a JSON object, kept as its exact text. */
    if (msg->data == NULL || memchr(msg->data, '\0', msg->len) != NULL) {
        rc = txo_error_set(err, TXO_EINVAL, "CloudEvent: the body is missing or holds a NUL");
        goto out;
    }
    json_t *doc = json_loadb(msg->data, msg->len, JSON_DECODE_INT_AS_REAL, NULL);
    bool object = json_is_object(doc);
    json_decref(doc);
    if (!object) {
        rc = txo_error_set(err, TXO_EINVAL, "CloudEvent: the body must be a JSON object");
        goto out;
    }
    ev.payload = txo_strndup(msg->data, msg->len);
    ev.payload_len = msg->len;
    if (ev.payload == NULL)
        rc = txo_error_set(err, TXO_ENOMEM, "CloudEvent: out of memory");
out:
    txo_free(id);
    txo_free(attempt);
    if (rc == 0)
        *out = ev;
    else
        txo_event_release(&ev);
    return rc;
}

/* A string member of the envelope as the encoder checks it (check_member) and the decoder
 * copies it (take_str). */
static int event_str(const char *value, const char *key, int64_t id, char **out,
                     struct txo_error *err)
{
    int rc = check_member(value, key, id, err);
    if (rc != 0)
        return rc;
    *out = txo_strdup(value);
    return *out != NULL ? 0 : txo_error_set(err, TXO_ENOMEM, "envelope: out of memory");
}

int txo_event_from_outbox(const struct txo_outbox_message *msg, struct txo_event *out,
                          struct txo_error *err)
{
    TXO_ASSERT(msg != NULL);
    struct txo_event ev;
    memset(&ev, 0, sizeof(ev));
    int rc = event_str(msg->event_type, "type", msg->id, &ev.type, err);
    if (rc == 0)
        rc = event_str(msg->aggregate_type, "aggregate_type", msg->id, &ev.aggregate_type, err);
    if (rc == 0)
        rc = event_str(msg->aggregate_id, "aggregate_id", msg->id, &ev.aggregate_id, err);
    if (rc == 0)
        rc = event_str(msg->idempotency_key, "idempotency_key", msg->id, &ev.idempotency_key, err);
    if (rc == 0)
        rc = event_str(msg->created_at, "created_at", msg->id, &ev.created_at, err);
    /* The trace members as trace_head() writes them (tracestate only after a traceparent). */
    if (rc == 0 && msg->traceparent != NULL)
        rc = check_member(msg->traceparent, "traceparent", msg->id, err);
    if (rc == 0 && msg->traceparent != NULL && msg->tracestate != NULL)
        rc = check_member(msg->tracestate, "tracestate", msg->id, err);
    if (rc != 0)
        goto out;
    ev.id = msg->id;
    ev.attempt = msg->attempt > 0 && msg->attempt < INT32_MAX ? msg->attempt : 0;
    /* The txo envelope carries a sequence as a JSON integer (int64). */
    take_sequence(&ev, msg->sequence <= INT64_MAX, msg->sequence, msg->prev_sequence <= INT64_MAX,
                  msg->prev_sequence);
    ev.has_trace = txo_trace_parse(msg->traceparent,
                                   msg->traceparent != NULL ? msg->tracestate : NULL, &ev.trace);
    /* The payload: what the decoder accepts inside an envelope (a JSON object, jansson's
     * default flags: no NUL escape, no integer beyond int64), as the text the encoder writes. */
    size_t len =
        msg->payload != NULL && msg->payload_len == 0 ? strlen(msg->payload) : msg->payload_len;
    if (msg->payload == NULL || memchr(msg->payload, '\0', len) != NULL) {
        rc = txo_error_set(err, TXO_EINVAL, "envelope of event %" PRId64 ": payload %s", msg->id,
                           msg->payload == NULL ? "is missing" : "holds a NUL byte");
        goto out;
    }
    json_error_t jerr;
    json_t *doc = json_loadb(msg->payload, len, 0, &jerr);
    bool object = json_is_object(doc);
    json_decref(doc);
    if (!object) {
        rc = txo_error_set(err, TXO_EINVAL, "envelope of event %" PRId64 ": payload %s%s", msg->id,
                           doc == NULL ? "is not JSON: " : "must be an object",
                           doc == NULL ? jerr.text : "");
        goto out;
    }
    ev.payload = txo_malloc(len + 1);
    if (ev.payload == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "envelope: out of memory");
        goto out;
    }
    ev.payload_len = json_compact_copy(msg->payload, len, ev.payload);
    ev.payload[ev.payload_len] = '\0';
out:
    if (rc == 0)
        *out = ev;
    else
        txo_event_release(&ev);
    return rc;
}

void txo_event_release(struct txo_event *ev)
{
    if (ev == NULL)
        return;
    txo_free(ev->type);
    txo_free(ev->aggregate_type);
    txo_free(ev->aggregate_id);
    txo_free(ev->idempotency_key);
    txo_free(ev->created_at);
    txo_free(ev->payload);
    memset(ev, 0, sizeof(*ev));
}
