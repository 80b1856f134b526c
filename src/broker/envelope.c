#include "core/common.h"

/*
 * The published envelope: the JSON object every publisher sends for one outbox event. Its
 * layout is a public contract (include/txo/publisher.h, README "Published envelope"):
 *
 *   {"id":42,"type":"OrderCreated","aggregate_type":"order","aggregate_id":7,
 *    "idempotency_key":"order:7:created","created_at":"2026-11-30T15:37:00.123456Z",
 *    "attempt":1,"payload":{...}}
 *
 * Keys come in exactly that order, compact, on one line. The payload is embedded as JSON, not
 * as a string. It is checked with jansson and then copied as text with the whitespace between
 * tokens removed, so numbers keep their exact digits (9007199254740993 stays that, a float is
 * never re-rounded) and strings keep their bytes; re-serialising a parsed tree would not
 * guarantee either.
 *
 * Thread-safety: pure; allocates only the returned string.
 */

#include <jansson.h>

#include "txo/consumer.h"

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

static int set_str(json_t *obj, const char *key, const char *value, int64_t id,
                   struct txo_error *err)
{
    if (value == NULL)
        return txo_error_set(err, TXO_EINVAL, "envelope of event %" PRId64 ": %s is missing", id,
                             key);
    json_t *v = json_string(value);
    if (v == NULL)
        return txo_error_set(err, TXO_EINVAL, "envelope of event %" PRId64 ": %s is not UTF-8", id,
                             key);
    if (json_object_set_new(obj, key, v) < 0)
        return txo_error_set(err, TXO_ENOMEM, "envelope of event %" PRId64 ": out of memory", id);
    return 0;
}

static int set_int(json_t *obj, const char *key, int64_t value, int64_t id, struct txo_error *err)
{
    if (json_object_set_new(obj, key, json_integer((json_int_t)value)) < 0)
        return txo_error_set(err, TXO_ENOMEM, "envelope of event %" PRId64 ": out of memory", id);
    return 0;
}

char *txo_envelope_encode(const struct txo_outbox_message *msg, size_t *len, struct txo_error *err)
{
    TXO_ASSERT(msg != NULL);
    char *out = NULL;
    json_t *head = NULL;
    int rc = 0;

    if (msg->payload == NULL) {
        txo_error_set(err, TXO_EINVAL, "envelope of event %" PRId64 ": payload is missing",
                      msg->id);
        goto out;
    }
    size_t payload_len = msg->payload_len != 0 ? msg->payload_len : strlen(msg->payload);
    /* jansson reads a text cut at a raw NUL as whole; copied on, the NUL would end up in the
     * envelope (and cut it for every consumer that reads C strings). */
    if (memchr(msg->payload, '\0', payload_len) != NULL) {
        txo_error_set(err, TXO_EINVAL, "envelope of event %" PRId64 ": NUL byte in the payload",
                      msg->id);
        goto out;
    }
    json_error_t jerr;
    json_t *doc = json_loadb(msg->payload, payload_len,
                             JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, &jerr);
    if (doc == NULL) {
        txo_error_set(err, TXO_EINVAL,
                      "envelope of event %" PRId64 ": payload is not JSON: %s at line %d column %d",
                      msg->id, jerr.text, jerr.line, jerr.column);
        goto out;
    }
    json_decref(doc);

    /* jansson keeps object keys in insertion order, which is the documented order. */
    head = json_object();
    if (head == NULL) {
        rc =
            txo_error_set(err, TXO_ENOMEM, "envelope of event %" PRId64 ": out of memory", msg->id);
        goto out;
    }
    rc = set_int(head, "id", msg->id, msg->id, err);
    if (rc == 0)
        rc = set_str(head, "type", msg->event_type, msg->id, err);
    if (rc == 0)
        rc = set_str(head, "aggregate_type", msg->aggregate_type, msg->id, err);
    if (rc == 0)
        rc = set_int(head, "aggregate_id", msg->aggregate_id, msg->id, err);
    if (rc == 0)
        rc = set_str(head, "idempotency_key", msg->idempotency_key, msg->id, err);
    if (rc == 0)
        rc = set_str(head, "created_at", msg->created_at, msg->id, err);
    if (rc == 0)
        rc = set_int(head, "attempt", msg->attempt, msg->id, err);
    if (rc < 0)
        goto out;

    /* head is `{...}`; its closing brace becomes `,"payload":<payload>}`. */
    size_t flags = JSON_COMPACT;
    size_t head_len = json_dumpb(head, NULL, 0, flags);
    if (head_len < 2) {
        txo_error_set(err, TXO_ENOMEM, "envelope of event %" PRId64 ": encoding failed", msg->id);
        goto out;
    }
    size_t cap = head_len + sizeof(PAYLOAD_KEY) + payload_len + 2;
    out = txo_malloc(cap);
    if (out == NULL) {
        txo_error_set(err, TXO_ENOMEM, "envelope of event %" PRId64 ": out of memory", msg->id);
        goto out;
    }
    if (json_dumpb(head, out, cap, flags) != head_len) {
        txo_free(out);
        out = NULL;
        txo_error_set(err, TXO_ENOMEM, "envelope of event %" PRId64 ": encoding failed", msg->id);
        goto out;
    }
    size_t n = head_len - 1; /* drop the closing brace */
    memcpy(out + n, PAYLOAD_KEY, sizeof(PAYLOAD_KEY) - 1);
    n += sizeof(PAYLOAD_KEY) - 1;
    n += json_compact_copy(msg->payload, payload_len, out + n);
    out[n++] = '}';
    out[n] = '\0';
    if (len != NULL)
        *len = n;
out:
    json_decref(head);
    return out;
}

/* ---- decoding ---- */

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
 * The payload's text: our encoder writes it last, as `,"payload":<text>}`, so when the
 * envelope ends that way (and that text is the same JSON) it is taken as it is, keeping its
 * exact digits; any other envelope gets the payload re-serialised, compact.
 */
static char *payload_text(const char *data, size_t len, json_t *payload, size_t *out_len)
{
    const char *key = PAYLOAD_KEY;
    size_t klen = sizeof(PAYLOAD_KEY) - 1;
    for (size_t i = len; i-- > klen;) {
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
    rc = take_str(env, "type", true, &ev.type, err);
    if (rc == 0)
        rc = take_str(env, "idempotency_key", true, &ev.idempotency_key, err);
    if (rc == 0)
        rc = take_str(env, "aggregate_type", false, &ev.aggregate_type, err);
    if (rc == 0)
        rc = take_str(env, "created_at", false, &ev.created_at, err);
    if (rc != 0)
        goto out;
    json_t *agg = json_object_get(env, "aggregate_id");
    if (json_is_integer(agg)) {
        char buf[32];
        snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT, json_integer_value(agg));
        ev.aggregate_id = txo_strdup(buf);
        if (ev.aggregate_id == NULL) {
            rc = txo_error_set(err, TXO_ENOMEM, "envelope: out of memory");
            goto out;
        }
    } else {
        rc = take_str(env, "aggregate_id", false, &ev.aggregate_id, err);
        if (rc != 0)
            goto out;
    }
    json_t *id = json_object_get(env, "id");
    json_t *attempt = json_object_get(env, "attempt");
    ev.id = json_is_integer(id) ? (int64_t)json_integer_value(id) : 0;
    json_int_t a = json_is_integer(attempt) ? json_integer_value(attempt) : 0;
    ev.attempt = a > 0 && a < INT32_MAX ? (int)a : 0;
    json_t *payload = json_object_get(env, "payload");
    if (!json_is_object(payload)) {
        rc = txo_error_set(err, TXO_EINVAL, "envelope: \"payload\" must be an object");
        goto out;
    }
    ev.payload = payload_text(data, len, payload, &ev.payload_len);
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
