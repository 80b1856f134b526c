#include "core/common.h"

/*
 * The HTTP client (include/txo/http_client.h) on one libcurl easy handle per client.
 *
 * Why one easy handle: libcurl keeps its connection cache in the handle, so reusing the handle
 * for every call is what keeps the connection alive between calls. Options that never change
 * (timeouts, user agent, no signals, no redirects, http/https only) are set once in
 * txo_http_client_new; each call sets only the method, URL, headers and body.
 *
 * The response body is collected into a buffer owned by the client (grown up to
 * max_response_bytes; a longer body aborts the transfer) and copied out into the caller's
 * response, so a failed call never leaves a half-filled body behind.
 *
 * Header lists are built per call with curl_slist_append (libcurl's allocator, not ours) and
 * wiped before they are freed, because they may carry an Authorization secret.
 *
 * Thread-safety: a client is used by one thread at a time. libcurl's global initialisation
 * (not thread-safe in older libcurl) runs exactly once under pthread_once.
 */

#include <curl/curl.h>
#include <pthread.h>

#include "txo/http_client.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 2000
#define DEFAULT_TIMEOUT_MS         5000
#define DEFAULT_MAX_RESPONSE_BYTES (1024 * 1024)
#define EXCERPT_MAX                200 /* body bytes quoted in an error message */
#define URL_SHOWN_MAX              160 /* URL bytes quoted in an error message */

struct txo_http_client {
    CURL *curl;
    int64_t connect_timeout_ms;
    int64_t timeout_ms;
    size_t max_response_bytes;
    char *user_agent;
    uint64_t connections;
    /* The body of the call in progress. */
    char *buf;
    size_t buf_len;
    size_t buf_cap;
    bool buf_overflow;
    bool buf_nomem;
    char errbuf[CURL_ERROR_SIZE];
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_OK;

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

void txo_http_client_opts_init(struct txo_http_client_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
    opts->timeout_ms = DEFAULT_TIMEOUT_MS;
    opts->user_agent = "txo";
    opts->max_response_bytes = DEFAULT_MAX_RESPONSE_BYTES;
}

void txo_http_client_response_init(struct txo_http_client_response *resp)
{
    memset(resp, 0, sizeof(*resp));
}

void txo_http_client_response_release(struct txo_http_client_response *resp)
{
    if (resp == NULL)
        return;
    txo_free(resp->body);
    txo_http_client_response_init(resp);
}

uint64_t txo_http_client_connections(const struct txo_http_client *c)
{
    return c->connections;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct txo_http_client *c = arg;
    size_t n = size * nmemb;
    if (n > c->max_response_bytes - c->buf_len) {
        c->buf_overflow = true;
        return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
    }
    if (c->buf_len + n + 1 > c->buf_cap) {
        size_t cap = c->buf_cap == 0 ? 4096 : c->buf_cap;
        while (cap < c->buf_len + n + 1)
            cap *= 2;
        char *grown = txo_realloc(c->buf, cap);
        if (grown == NULL) {
            c->buf_nomem = true;
            return 0;
        }
        c->buf = grown;
        c->buf_cap = cap;
    }
    memcpy(c->buf + c->buf_len, data, n);
    c->buf_len += n;
    c->buf[c->buf_len] = '\0';
    return n;
}

/* Sets an option that cannot fail on a valid handle except for lack of memory. */
#define SETOPT(c, opt, val)                                                                        \
    do {                                                                                           \
        if (curl_easy_setopt((c)->curl, (opt), (val)) != CURLE_OK)                                 \
            goto setopt_failed;                                                                    \
    } while (0)

int txo_http_client_new(const struct txo_http_client_opts *opts, struct txo_http_client **out,
                        struct txo_error *err)
{
    struct txo_http_client_opts defaults;
    if (opts == NULL) {
        txo_http_client_opts_init(&defaults);
        opts = &defaults;
    }
    if (opts->connect_timeout_ms <= 0 || opts->timeout_ms <= 0)
        return txo_error_set(err, TXO_EINVAL,
                             "HTTP client: timeouts must be > 0 ms (connect %" PRId64
                             ", total %" PRId64 ")",
                             opts->connect_timeout_ms, opts->timeout_ms);
    if (opts->max_response_bytes == 0)
        return txo_error_set(err, TXO_EINVAL, "HTTP client: max_response_bytes must be > 0");
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return txo_error_set(err, TXO_EIO, "HTTP client: libcurl initialisation failed: %s",
                             curl_easy_strerror(global_rc));

    int rc = 0;
    struct txo_http_client *c = txo_calloc(1, sizeof(*c));
    if (c == NULL)
        return txo_error_set(err, TXO_ENOMEM, "HTTP client: out of memory");
    c->connect_timeout_ms = opts->connect_timeout_ms;
    c->timeout_ms = opts->timeout_ms;
    c->max_response_bytes = opts->max_response_bytes;
    c->user_agent = txo_strdup(opts->user_agent != NULL ? opts->user_agent : "txo");
    c->curl = curl_easy_init();
    if (c->user_agent == NULL || c->curl == NULL) {
        rc = txo_error_set(err, TXO_ENOMEM, "HTTP client: out of memory");
        goto out;
    }
    SETOPT(c, CURLOPT_NOSIGNAL, 1L);
    SETOPT(c, CURLOPT_CONNECTTIMEOUT_MS, (long)c->connect_timeout_ms);
    SETOPT(c, CURLOPT_TIMEOUT_MS, (long)c->timeout_ms);
    SETOPT(c, CURLOPT_USERAGENT, c->user_agent);
    SETOPT(c, CURLOPT_FOLLOWLOCATION, 0L);
    SETOPT(c, CURLOPT_ERRORBUFFER, c->errbuf);
    SETOPT(c, CURLOPT_WRITEFUNCTION, on_body);
    SETOPT(c, CURLOPT_WRITEDATA, c);
    SETOPT(c, CURLOPT_TCP_NODELAY, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500
    SETOPT(c, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    SETOPT(c, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    *out = c;
    return 0;

setopt_failed:
    rc = txo_error_set(err, TXO_ENOMEM, "HTTP client: cannot configure libcurl");
out:
    txo_http_client_free(c);
    return rc;
}

#undef SETOPT

void txo_http_client_free(struct txo_http_client *c)
{
    if (c == NULL)
        return;
    if (c->curl != NULL)
        curl_easy_cleanup(c->curl);
    txo_free(c->user_agent);
    txo_free(c->buf);
    txo_free(c);
}

/* ---- error messages ---- */

/* Copies url into out with any "user:password@" replaced by "***@", cut to URL_SHOWN_MAX. */
static void shown_url(const char *url, char *out, size_t cap)
{
    const char *scheme_end = strstr(url, "://");
    const char *host = scheme_end != NULL ? scheme_end + 3 : url;
    size_t authority_len = strcspn(host, "/?#");
    const char *at = memchr(host, '@', authority_len);
    if (at != NULL)
        snprintf(out, cap, "%.*s***%s", (int)(host - url), url, at);
    else
        snprintf(out, cap, "%s", url);
    if (strlen(out) > URL_SHOWN_MAX)
        memcpy(out + URL_SHOWN_MAX - 3, "...", 4);
}

/* The first EXCERPT_MAX bytes of body on one line: control bytes become spaces, the cut
 * falls on a UTF-8 character boundary. */
static void excerpt(const char *body, size_t len, char *out, size_t cap)
{
    size_t n = len < EXCERPT_MAX ? len : EXCERPT_MAX;
    if (n >= cap)
        n = cap - 1;
    if (n < len) {
        while (n > 0 && ((unsigned char)body[n] & 0xC0) == 0x80)
            n--;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)body[i];
        out[i] = ch < 0x20 || ch == 0x7f ? ' ' : (char)ch;
    }
    out[n] = '\0';
}

/* The code of a transfer that got no complete answer. */
static int transport_code(CURLcode cc)
{
    switch (cc) {
    case CURLE_OPERATION_TIMEDOUT:
        return TXO_ETIMEOUT;
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
        return TXO_EINVAL;
    case CURLE_OUT_OF_MEMORY:
        return TXO_ENOMEM;
    default:
        /* Cannot resolve or connect, reset, empty reply, TLS handshake, ...: the service is
         * not reachable right now. */
        return TXO_EUNAVAILABLE;
    }
}

/* A stable name for a transfer failure (libcurl's error buffer may carry timings). */
static const char *transport_what(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
        return "cannot connect";
    case CURLE_COULDNT_RESOLVE_HOST:
        return "cannot resolve host";
    case CURLE_GOT_NOTHING:
        return "empty reply";
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
        return "connection lost";
    default:
        return "transfer failed";
    }
}

/* The code of a complete answer with this status. */
static int status_code(long status)
{
    if (status >= 200 && status < 300)
        return 0;
    if (status >= 500 || status == 429 || status == 408)
        return TXO_EUNAVAILABLE;
    if (status >= 400)
        return TXO_EBUSINESS;
    return TXO_EIO;
}

static bool has_crlf(const char *s)
{
    return strpbrk(s, "\r\n") != NULL;
}

/* Wipes every header string (one may be a secret) and frees the list. */
static void free_headers(struct curl_slist *list)
{
    for (struct curl_slist *h = list; h != NULL; h = h->next) {
        volatile char *p = h->data;
        while (*p != '\0')
            *p++ = '\0';
    }
    curl_slist_free_all(list);
}

/* Appends "Name: value" (or a preformatted line when value is NULL). */
static bool add_header(struct curl_slist **list, const char *name, const char *value)
{
    char line[1024];
    const char *text = name;
    if (value != NULL) {
        int n = snprintf(line, sizeof(line), "%s: %s", name, value);
        if (n < 0 || (size_t)n >= sizeof(line))
            return false;
        text = line;
    }
    struct curl_slist *grown = curl_slist_append(*list, text);
    if (value != NULL) {
        volatile char *p = line;
        for (size_t i = 0; i < sizeof(line); i++)
            p[i] = '\0';
    }
    if (grown == NULL)
        return false;
    *list = grown;
    return true;
}

/*
 * Runs one prepared transfer and maps its outcome. method is "POST" or "GET" (messages only).
 */
static int perform(struct txo_http_client *c, const char *method, const char *url,
                   struct curl_slist *headers, struct txo_http_client_response *resp,
                   struct txo_error *err)
{
    char where[URL_SHOWN_MAX + 16];
    char url_shown[URL_SHOWN_MAX + 8];
    shown_url(url, url_shown, sizeof(url_shown));
    snprintf(where, sizeof(where), "%s %s", method, url_shown);

    c->buf_len = 0;
    c->buf_overflow = false;
    c->buf_nomem = false;
    c->errbuf[0] = '\0';
    int64_t started_us = txo_monotonic_us();
    if (curl_easy_setopt(c->curl, CURLOPT_URL, url) != CURLE_OK ||
        curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, headers) != CURLE_OK)
        return txo_error_set(err, TXO_ENOMEM, "%s: cannot configure libcurl", where);
    CURLcode cc = curl_easy_perform(c->curl);
    double total_s = (double)(txo_monotonic_us() - started_us) / 1e6;
    /* The header list is the caller's and dies after this call: libcurl must not keep it. */
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, (struct curl_slist *)NULL);

    long connects = 0;
    if (curl_easy_getinfo(c->curl, CURLINFO_NUM_CONNECTS, &connects) == CURLE_OK && connects > 0)
        c->connections += (uint64_t)connects;
    long status = 0;
    if (cc == CURLE_OK || cc == CURLE_WRITE_ERROR)
        curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);

    if (resp != NULL) {
        txo_http_client_response_release(resp);
        resp->total_s = total_s;
        resp->status = status;
    }

    if (cc != CURLE_OK) {
        if (c->buf_overflow)
            return txo_error_set(err, TXO_EIO, "%s: HTTP %ld: response larger than %zu bytes",
                                 where, status, c->max_response_bytes);
        if (c->buf_nomem)
            return txo_error_set(err, TXO_ENOMEM, "%s: out of memory reading the response", where);
        if (resp != NULL)
            resp->status = 0;
        int code = transport_code(cc);
        if (code == TXO_ETIMEOUT) {
            /* Name the limit that was hit, not the measured time, so equal failures have
             * equal messages. The total limit can only be hit once it has passed. */
            bool total = total_s * 1000.0 >= (double)c->timeout_ms - 50.0 ||
                         c->connect_timeout_ms >= c->timeout_ms;
            if (total)
                return txo_error_set(err, code, "%s: timed out after %" PRId64 " ms", where,
                                     c->timeout_ms);
            return txo_error_set(err, code, "%s: connect timed out after %" PRId64 " ms", where,
                                 c->connect_timeout_ms);
        }
        const char *what = transport_what(cc);
        /* libcurl's own text may carry timings ("after 0 ms"), so it stays out of the error
         * (equal failures must have equal messages) and goes to the debug log instead. */
        TXO_LOG(TXO_LOG_DEBUG, "http", "transfer failed url=%s curl_code=%d detail=\"%s\"",
                url_shown, (int)cc, c->errbuf);
        return txo_error_set(err, code, "%s: %s (%s)", where, what, curl_easy_strerror(cc));
    }

    if (resp != NULL && c->buf_len > 0) {
        resp->body = txo_malloc(c->buf_len + 1);
        if (resp->body == NULL)
            return txo_error_set(err, TXO_ENOMEM, "%s: out of memory copying the response", where);
        memcpy(resp->body, c->buf, c->buf_len + 1);
        resp->body_len = c->buf_len;
    }
    int code = status_code(status);
    if (code == 0)
        return 0;
    char quoted[EXCERPT_MAX + 1];
    excerpt(c->buf_len > 0 ? c->buf : "", c->buf_len, quoted, sizeof(quoted));
    if (code == TXO_EIO)
        return txo_error_set(err, code, "%s: unexpected HTTP %ld: %s", where, status, quoted);
    return txo_error_set(err, code, "%s: HTTP %ld: %s", where, status, quoted);
}

/* Builds the request headers common to both methods. Returns 0 or a negative code. */
static int build_headers(const char *url, const char *idempotency_key,
                         const char *const *extra_headers, bool json_body, struct curl_slist **out,
                         struct txo_error *err)
{
    char url_shown[URL_SHOWN_MAX + 8];
    struct curl_slist *list = NULL;
    int rc = 0;

    if (idempotency_key != NULL && has_crlf(idempotency_key)) {
        shown_url(url, url_shown, sizeof(url_shown));
        rc = txo_error_set(err, TXO_EINVAL, "%s: the Idempotency-Key contains CR or LF", url_shown);
        goto out;
    }
    if (extra_headers != NULL) {
        for (size_t i = 0; extra_headers[i] != NULL; i++) {
            if (has_crlf(extra_headers[i]) || strchr(extra_headers[i], ':') == NULL) {
                shown_url(url, url_shown, sizeof(url_shown));
                rc = txo_error_set(err, TXO_EINVAL,
                                   "%s: extra header %zu is not one \"Name: value\" line",
                                   url_shown, i);
                goto out;
            }
        }
    }
    bool ok = add_header(&list, "Accept", "application/json");
    if (json_body) {
        ok = ok && add_header(&list, "Content-Type", "application/json");
        /* No "Expect: 100-continue" round trip before larger bodies. */
        ok = ok && add_header(&list, "Expect:", NULL);
    }
    if (idempotency_key != NULL)
        ok = ok && add_header(&list, "Idempotency-Key", idempotency_key);
    for (size_t i = 0; ok && extra_headers != NULL && extra_headers[i] != NULL; i++)
        ok = add_header(&list, extra_headers[i], NULL);
    if (!ok) {
        rc = txo_error_set(err, TXO_ENOMEM, "HTTP client: out of memory building headers");
        goto out;
    }
    *out = list;
    list = NULL;
out:
    free_headers(list);
    return rc;
}

int txo_http_post_json(struct txo_http_client *c, const char *url, const char *idempotency_key,
                       const char *const *extra_headers, const char *body, size_t len,
                       struct txo_http_client_response *resp, struct txo_error *err)
{
    if (resp != NULL)
        txo_http_client_response_release(resp);
    if (c == NULL || url == NULL || (body == NULL && len > 0))
        return txo_error_set(err, TXO_EINVAL, "HTTP client: client, url and body are required");
    struct curl_slist *headers = NULL;
    int rc = build_headers(url, idempotency_key, extra_headers, true, &headers, err);
    if (rc < 0)
        return rc;
    if (curl_easy_setopt(c->curl, CURLOPT_POST, 1L) != CURLE_OK ||
        curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len) != CURLE_OK ||
        curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, body != NULL ? body : "") != CURLE_OK) {
        rc = txo_error_set(err, TXO_ENOMEM, "HTTP client: cannot configure libcurl");
        goto out;
    }
    rc = perform(c, "POST", url, headers, resp, err);
    /* The body is borrowed: libcurl must not keep a pointer to it. */
    curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, (const char *)NULL);
out:
    free_headers(headers);
    return rc;
}

int txo_http_get(struct txo_http_client *c, const char *url, const char *const *extra_headers,
                 struct txo_http_client_response *resp, struct txo_error *err)
{
    if (resp != NULL)
        txo_http_client_response_release(resp);
    if (c == NULL || url == NULL)
        return txo_error_set(err, TXO_EINVAL, "HTTP client: client and url are required");
    struct curl_slist *headers = NULL;
    int rc = build_headers(url, NULL, extra_headers, false, &headers, err);
    if (rc < 0)
        return rc;
    if (curl_easy_setopt(c->curl, CURLOPT_HTTPGET, 1L) != CURLE_OK) {
        rc = txo_error_set(err, TXO_ENOMEM, "HTTP client: cannot configure libcurl");
        goto out;
    }
    rc = perform(c, "GET", url, headers, resp, err);
out:
    free_headers(headers);
    return rc;
}
