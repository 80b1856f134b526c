#include "core/common.h"

/*
 * The webhook publisher (include/txo/webhook.h): each outbox event becomes one HTTP POST of its
 * envelope (envelope.c) through the HTTP client (src/http/client.c), on one kept-alive
 * connection per publisher.
 *
 * Results: a message is acknowledged (results[i] = 0) only on a 2xx answer. A failure keeps the
 * HTTP client's code (TXO_EUNAVAILABLE, TXO_ETIMEOUT, TXO_EBUSINESS, ...) and its message. The
 * messages do not carry the event id, so a batch that failed the same way has one reason, which
 * the relay records with a single UPDATE.
 *
 * Early stop: when the endpoint is plainly down (no HTTP answer at all, or 429/503), the rest of
 * the batch is not attempted and fails with a copy of the same error: the events stay PENDING
 * and are retried with backoff, and a dead endpoint costs one timeout per batch.
 *
 * Ownership: the publisher owns its copy of the URL, the Authorization header line (wiped
 * before it is freed) and its HTTP client. Thread-safety: one relay at a time.
 */

#include "broker/transport.h"
#include "broker/wire.h"
#include "txo/http_client.h"
#include "txo/webhook.h"

#define HEADER_MAX 512

struct webhook_publisher {
    struct txo_http_client *client;
    char *url;
    char *auth_header; /* "Authorization: Bearer <token>" or NULL; a secret */
    struct txo_http_client_response resp;
};

void txo_webhook_opts_init(struct txo_webhook_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->connect_timeout_ms = 2000;
    opts->timeout_ms = 5000;
}

static void webhook_destroy(void *self)
{
    struct webhook_publisher *wp = self;
    txo_http_client_free(wp->client);
    txo_http_client_response_release(&wp->resp);
    txo_free(wp->url);
    txo__wipe_free(wp->auth_header);
    txo_free(wp);
}

/* True when the rest of the batch should not be attempted after this failure. */
static bool endpoint_down(int rc, long status)
{
    if (rc == TXO_ETIMEOUT)
        return true;
    if (rc == TXO_EUNAVAILABLE)
        return status == 0 || status == 429 || status == 503;
    return false;
}

/*
 * The "name: value" lines of count headers into lines[n..) (each a new string), after the n
 * lines already there. Returns the new count, or -1 when out of memory.
 */
static int header_lines(size_t count, const char *const *names, const char *const *values,
                        char **lines, int n)
{
    for (size_t i = 0; i < count; i++) {
        size_t len = strlen(names[i]) + 2 + strlen(values[i]) + 1;
        lines[n] = txo_malloc(len);
        if (lines[n] == NULL)
            return -1;
        snprintf(lines[n++], len, "%s: %s", names[i], values[i]);
    }
    return n;
}

/* POSTs one message. Returns 0 or its failure code with errors filled. */
static int post_one(struct webhook_publisher *wp, const struct txo_outbox_message *msg,
                    struct txo_error *error)
{
    struct txo__wire w;
    int rc = txo__wire_encode("webhook", msg, &w, error);
    if (rc < 0)
        return rc;

    char type_header[HEADER_MAX];
    char id_header[64];
    char *ce_header[TXO_CE_HEADERS_MAX + 2] = {0}; /* the ce-* lines, then the trace context's */
    int n_ce = 0;
    int n = snprintf(type_header, sizeof(type_header), "X-Txo-Event-Type: %s",
                     msg->event_type != NULL ? msg->event_type : "");
    if (n < 0 || (size_t)n >= sizeof(type_header)) {
        rc = txo_error_set(error, TXO_EINVAL, "webhook: event type longer than %d bytes",
                           HEADER_MAX - 20);
        goto out;
    }
    snprintf(id_header, sizeof(id_header), "X-Txo-Event-Id: %" PRId64, msg->id);
    const char *headers[4 + TXO_CE_HEADERS_MAX + 2] = {type_header, id_header};
    int nh = 2;
    n_ce = header_lines(w.headers.n, w.headers.names, (const char *const *)w.headers.values,
                        ce_header, 0);
    if (n_ce >= 0)
        n_ce = header_lines(w.plain.n, w.plain.names, w.plain.values, ce_header, n_ce);
    if (n_ce < 0) {
        n_ce = (int)TXO_ARRAY_LEN(ce_header); /* free what was allocated (the rest is NULL) */
        rc = txo_error_set(error, TXO_ENOMEM, "webhook: out of memory for the ce-* headers");
        goto out;
    }
    for (int i = 0; i < n_ce; i++)
        headers[nh++] = ce_header[i];
    headers[nh++] = wp->auth_header; /* NULL ends the list either way */
    headers[nh] = NULL;
    rc = txo_http_post_json(wp->client, wp->url, msg->idempotency_key, headers, w.body, w.len,
                            &wp->resp, error);
out:
    for (int i = 0; i < n_ce; i++)
        txo_free(ce_header[i]);
    txo__wire_release(&w);
    return rc;
}

static int webhook_publish_batch(void *self, const struct txo_outbox_message *msgs, size_t n,
                                 int *results, struct txo_error *errors)
{
    struct webhook_publisher *wp = self;
    for (size_t i = 0; i < n; i++) {
        int rc = post_one(wp, &msgs[i], &errors[i]);
        results[i] = rc;
        if (rc == 0) {
            TXO_LOG(TXO_LOG_DEBUG, "webhook", "delivered", TXO_KV_I64("event_id", msgs[i].id),
                    TXO_KV_I64("http_status", wp->resp.status),
                    TXO_KV_F64("duration_s", wp->resp.total_s));
            continue;
        }
        if (!endpoint_down(rc, wp->resp.status))
            continue;
        for (size_t j = i + 1; j < n; j++) {
            results[j] = rc;
            errors[j] = errors[i];
        }
        break;
    }
    txo_http_client_response_release(&wp->resp);
    return 0;
}

static const struct txo_publisher_ops webhook_ops = {
    .name = "webhook",
    .publish_batch = webhook_publish_batch,
    .destroy = webhook_destroy,
};

static bool has_prefix_nocase(const char *s, const char *prefix)
{
    for (; *prefix != '\0'; s++, prefix++) {
        char c = *s;
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != *prefix)
            return false;
    }
    return true;
}

static int webhook_publisher_init(void *self, const struct txo__transport_args *a,
                                  struct txo_error *err)
{
    struct webhook_publisher *wp = self;
    const struct txo_webhook_opts *opts = a->opts;
    txo_http_client_response_init(&wp->resp);
    wp->url = txo_strdup(opts->url);
    if (wp->url == NULL)
        return txo_error_set(err, TXO_ENOMEM, "webhook publisher: out of memory");
    if (opts->bearer_token != NULL && opts->bearer_token[0] != '\0') {
        static const char prefix[] = "Authorization: Bearer ";
        size_t len = sizeof(prefix) - 1 + strlen(opts->bearer_token);
        wp->auth_header = txo_malloc(len + 1);
        if (wp->auth_header == NULL)
            return txo_error_set(err, TXO_ENOMEM, "webhook publisher: out of memory");
        snprintf(wp->auth_header, len + 1, "%s%s", prefix, opts->bearer_token);
    }

    struct txo_http_client_opts co;
    txo_http_client_opts_init(&co);
    if (opts->connect_timeout_ms > 0)
        co.connect_timeout_ms = opts->connect_timeout_ms;
    if (opts->timeout_ms > 0)
        co.timeout_ms = opts->timeout_ms;
    co.user_agent = "txo-relay";
    return txo_http_client_new(&co, &wp->client, err);
}

int txo_publisher_webhook_new(const struct txo_webhook_opts *opts, struct txo_publisher **out,
                              struct txo_error *err)
{
    if (opts == NULL || opts->url == NULL || opts->url[0] == '\0')
        return txo_error_set(err, TXO_ECONFIG, "webhook publisher: a URL is required");
    if (!has_prefix_nocase(opts->url, "http://") && !has_prefix_nocase(opts->url, "https://"))
        return txo_error_set(err, TXO_ECONFIG,
                             "webhook publisher: the URL must start with http:// or https://");
    if (strpbrk(opts->url, "\r\n \t") != NULL)
        return txo_error_set(err, TXO_ECONFIG, "webhook publisher: the URL contains whitespace");
    if (opts->bearer_token != NULL && strpbrk(opts->bearer_token, "\r\n") != NULL)
        return txo_error_set(err, TXO_ECONFIG,
                             "webhook publisher: the bearer token contains CR or LF");
    if (opts->connect_timeout_ms < 0 || opts->timeout_ms < 0)
        return txo_error_set(err, TXO_EINVAL, "webhook publisher: timeouts must be >= 0 ms");
    struct txo__transport_args a = {.opts = opts};
    return txo__publisher_build(&webhook_ops, sizeof(struct webhook_publisher),
                                webhook_publisher_init, &a, out, err);
}
