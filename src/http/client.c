#include "core/common.h"

/*
 * The HTTP client (include/txo/http_client.h) on one libcurl multi handle and a small pool of
 * easy handles per client.
 *
 * Why a multi handle for single calls too: libcurl keeps the connection cache in the multi
 * handle, so running every call, single or batched, through the same one is what keeps a
 * connection alive between calls and lets a batch reuse the connections of the calls before
 * it (and the other way round). A single call is a batch of one on the first easy handle;
 * curl_easy_perform() does the same internally, on a multi handle of its own. The pool grows to
 * the widest batch seen and its handles are reused. Options that never change (timeouts, user
 * agent, no signals, no redirects, http/https only) are set once when a handle is made
 * (slot_new); each transfer sets only the method, URL, headers and body (slot_start), and one
 * function maps every outcome (outcome), so single and batched calls cannot drift apart.
 *
 * The response body of a transfer is collected into a buffer owned by its easy handle's slot
 * (grown up to max_response_bytes; a longer body aborts the transfer) and copied out into the
 * caller's response, so a failed call never leaves a half-filled body behind.
 *
 * Header lists are built per transfer with curl_slist_append (libcurl's allocator, not ours)
 * and wiped before they are freed, because they may carry an Authorization secret.
 *
 * Everything runs in the calling thread (curl_multi_perform/curl_multi_poll); no thread is
 * started here. A client is used by one thread at a time. libcurl's global initialisation (not
 * thread-safe in older libcurl) runs exactly once under pthread_once.
 */

#include <curl/curl.h>
#include <pthread.h>

#include "txo/http_client.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 2000
#define DEFAULT_TIMEOUT_MS         5000
#define DEFAULT_MAX_RESPONSE_BYTES (1024 * 1024)
#define EXCERPT_MAX                200 /* body bytes quoted in an error message */
#define URL_SHOWN_MAX              160 /* URL bytes quoted in an error message */
#define POLL_MAX_MS                1000 /* longest wait in curl_multi_poll (libcurl may wake earlier) */
#define MIN_KEPT_CONNECTIONS       5 /* libcurl's own default for a single easy handle */

/* One call to make, in the form single calls and batches share. */
struct transfer {
    const char *method; /* "POST" or "GET" (messages only) */
    const char *url;
    const char *key;                /* Idempotency-Key; NULL: none */
    const char *const *own_headers; /* this request's own "Name: value" lines; NULL: none */
    const char *body;               /* NULL: a GET */
    size_t len;
    struct txo_http_client_response *resp; /* NULL: the body is discarded */
    struct txo_error *err;
    const char *invalid; /* why it is refused without being sent; NULL: it is not */
    int rc;
};

/* One easy handle of the pool and the state of the transfer it runs. Allocated on its own:
 * libcurl keeps pointers to errbuf and to the slot itself. */
struct slot {
    struct txo_http_client *client;
    CURL *curl;
    struct transfer *t;             /* the transfer in flight; NULL when idle */
    struct curl_slist *headers;     /* t's, wiped and freed when it ends */
    char where[URL_SHOWN_MAX + 16]; /* "POST <shown url>" */
    int64_t started_us;
    char *buf;
    size_t buf_len;
    size_t buf_cap;
    bool buf_overflow;
    bool buf_nomem;
    char errbuf[CURL_ERROR_SIZE];
};

struct txo_http_client {
    CURLM *multi; /* created on the first call */
    struct slot **slots;
    size_t n_slots;
    int64_t connect_timeout_ms;
    int64_t timeout_ms;
    size_t max_response_bytes;
    char *user_agent;
    uint64_t connections;
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
    struct slot *s = arg;
    size_t n = size * nmemb;
    if (n > s->client->max_response_bytes - s->buf_len) {
        s->buf_overflow = true;
        return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
    }
    if (TXO_ARRAY_RESERVE(s->buf, s->buf_cap, s->buf_len + n + 1, 4096) < 0) {
        s->buf_nomem = true;
        return 0;
    }
    memcpy(s->buf + s->buf_len, data, n);
    s->buf_len += n;
    s->buf[s->buf_len] = '\0';
    return n;
}

static void slot_free(struct slot *s)
{
    if (s == NULL)
        return;
    if (s->curl != NULL)
        curl_easy_cleanup(s->curl);
    txo_free(s->buf);
    txo_free(s);
}

/* Sets an option that cannot fail on a valid handle except for lack of memory. */
#define SETOPT(s, opt, val)                                                                        \
    do {                                                                                           \
        if (curl_easy_setopt((s)->curl, (opt), (val)) != CURLE_OK)                                 \
            goto setopt_failed;                                                                    \
    } while (0)

/* An easy handle with the options every transfer of c shares. NULL when out of memory. */
static struct slot *slot_new(struct txo_http_client *c)
{
    struct slot *s = txo_calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->client = c;
    s->curl = curl_easy_init();
    if (s->curl == NULL)
        goto setopt_failed;
    SETOPT(s, CURLOPT_NOSIGNAL, 1L);
    SETOPT(s, CURLOPT_CONNECTTIMEOUT_MS, (long)c->connect_timeout_ms);
    SETOPT(s, CURLOPT_TIMEOUT_MS, (long)c->timeout_ms);
    SETOPT(s, CURLOPT_USERAGENT, c->user_agent);
    SETOPT(s, CURLOPT_FOLLOWLOCATION, 0L);
    SETOPT(s, CURLOPT_ERRORBUFFER, s->errbuf);
    SETOPT(s, CURLOPT_WRITEFUNCTION, on_body);
    SETOPT(s, CURLOPT_WRITEDATA, s);
    SETOPT(s, CURLOPT_PRIVATE, s);
    SETOPT(s, CURLOPT_TCP_NODELAY, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500
    SETOPT(s, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    SETOPT(s, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    return s;

setopt_failed:
    slot_free(s);
    return NULL;
}

#undef SETOPT

/*
 * Makes sure c has its multi handle and at least n easy handles. The handles made before a
 * failure are kept (they are valid), so a later call does not make them again.
 */
static int ensure_pool(struct txo_http_client *c, size_t n, struct txo_error *err)
{
    if (c->multi == NULL) {
        c->multi = curl_multi_init();
        if (c->multi == NULL)
            return txo_error_set(err, TXO_ENOMEM,
                                 "HTTP client: cannot create a libcurl multi handle");
    }
    if (n > c->n_slots) {
        if (TXO_ARRAY_RESIZE(c->slots, n) < 0)
            return txo_error_set(err, TXO_ENOMEM, "HTTP client: out of memory for %zu handles", n);
        while (c->n_slots < n) {
            c->slots[c->n_slots] = slot_new(c);
            if (c->slots[c->n_slots] == NULL)
                return txo_error_set(err, TXO_ENOMEM,
                                     "HTTP client: cannot configure libcurl (%zu handles)", n);
            c->n_slots++;
        }
    }
    /*
     * libcurl's default cache limit is four connections per easy handle attached right now, so
     * as a batch's handles are detached one by one the last ones would close the connections the
     * first ones left idle. A fixed limit keeps one connection per handle of the pool (at least
     * libcurl's own 5).
     */
    size_t keep = c->n_slots; /* one idle connection per handle: what the next batch reuses */
    if (keep < MIN_KEPT_CONNECTIONS)
        keep = MIN_KEPT_CONNECTIONS;
    if (curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, (long)keep) != CURLM_OK)
        return txo_error_set(err, TXO_EIO,
                             "HTTP client: cannot configure the libcurl multi handle");
    return 0;
}

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

    struct txo_http_client *c = txo_calloc(1, sizeof(*c));
    if (c == NULL)
        return txo_error_set(err, TXO_ENOMEM, "HTTP client: out of memory");
    c->connect_timeout_ms = opts->connect_timeout_ms;
    c->timeout_ms = opts->timeout_ms;
    c->max_response_bytes = opts->max_response_bytes;
    c->user_agent = txo_strdup(opts->user_agent != NULL ? opts->user_agent : "txo");
    if (c->user_agent == NULL) {
        txo_http_client_free(c);
        return txo_error_set(err, TXO_ENOMEM, "HTTP client: out of memory");
    }
    /* The handle of single calls now, so a client that could be made can make a call. */
    int rc = ensure_pool(c, 1, err);
    if (rc != 0) {
        txo_http_client_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void txo_http_client_free(struct txo_http_client *c)
{
    if (c == NULL)
        return;
    /* No handle is attached between calls, so each can go before the multi handle, which
     * closes the cached connections. */
    for (size_t i = 0; i < c->n_slots; i++)
        slot_free(c->slots[i]);
    txo_free(c->slots);
    if (c->multi != NULL)
        curl_multi_cleanup(c->multi);
    txo_free(c->user_agent);
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
    for (struct curl_slist *h = list; h != NULL; h = h->next)
        txo__wipe(h->data);
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

/* 0 when every line of headers (NULL: none) is one "Name: value" line; else TXO_EINVAL. */
static int check_lines(const char *url, const char *const *headers, const char *which,
                       struct txo_error *err)
{
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i++) {
        if (has_crlf(headers[i]) || strchr(headers[i], ':') == NULL) {
            char url_shown[URL_SHOWN_MAX + 8];
            shown_url(url, url_shown, sizeof(url_shown));
            return txo_error_set(err, TXO_EINVAL,
                                 "%s: %s header %zu is not one \"Name: value\" line", url_shown,
                                 which, i);
        }
    }
    return 0;
}

/* Builds the request headers common to both methods: the call's extra_headers, then the
 * request's own. Returns 0 or a negative code. */
static int build_headers(const char *url, const char *idempotency_key,
                         const char *const *extra_headers, const char *const *own_headers,
                         bool json_body, struct curl_slist **out, struct txo_error *err)
{
    char url_shown[URL_SHOWN_MAX + 8];
    struct curl_slist *list = NULL;
    int rc = 0;

    if (idempotency_key != NULL && has_crlf(idempotency_key)) {
        shown_url(url, url_shown, sizeof(url_shown));
        rc = txo_error_set(err, TXO_EINVAL, "%s: the Idempotency-Key contains CR or LF", url_shown);
        goto out;
    }
    rc = check_lines(url, extra_headers, "extra", err);
    if (rc == 0)
        rc = check_lines(url, own_headers, "request", err);
    if (rc != 0)
        goto out;
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
    for (size_t i = 0; ok && own_headers != NULL && own_headers[i] != NULL; i++)
        ok = add_header(&list, own_headers[i], NULL);
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

/*
 * Maps the end of s's transfer (cc, after total_s seconds) into resp and err, as the table in
 * the header says. The one mapping of single and batched calls.
 */
static int outcome(struct slot *s, CURLcode cc, double total_s,
                   struct txo_http_client_response *resp, struct txo_error *err)
{
    const struct txo_http_client *c = s->client;
    const char *where = s->where;
    long connects = 0;
    if (curl_easy_getinfo(s->curl, CURLINFO_NUM_CONNECTS, &connects) == CURLE_OK && connects > 0)
        s->client->connections += (uint64_t)connects;
    long status = 0;
    if (cc == CURLE_OK || cc == CURLE_WRITE_ERROR)
        curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);

    if (resp != NULL) {
        txo_http_client_response_release(resp);
        resp->total_s = total_s;
        resp->status = status;
    }

    if (cc != CURLE_OK) {
        if (s->buf_overflow)
            return txo_error_set(err, TXO_EIO, "%s: HTTP %ld: response larger than %zu bytes",
                                 where, status, c->max_response_bytes);
        if (s->buf_nomem)
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
        TXO_LOG(TXO_LOG_DEBUG, "http", "transfer failed", TXO_KV_STR("where", where),
                TXO_KV_I64("curl_code", (int)cc), TXO_KV_STR("detail", s->errbuf));
        return txo_error_set(err, code, "%s: %s (%s)", where, what, curl_easy_strerror(cc));
    }

    if (resp != NULL && s->buf_len > 0) {
        resp->body = txo_malloc(s->buf_len + 1);
        if (resp->body == NULL)
            return txo_error_set(err, TXO_ENOMEM, "%s: out of memory copying the response", where);
        memcpy(resp->body, s->buf, s->buf_len + 1);
        resp->body_len = s->buf_len;
    }
    int code = status_code(status);
    if (code == 0)
        return 0;
    char quoted[EXCERPT_MAX + 1];
    excerpt(s->buf_len > 0 ? s->buf : "", s->buf_len, quoted, sizeof(quoted));
    if (code == TXO_EIO)
        return txo_error_set(err, code, "%s: unexpected HTTP %ld: %s", where, status, quoted);
    return txo_error_set(err, code, "%s: HTTP %ld: %s", where, status, quoted);
}

/* Drops what a transfer set on s's handle: the header list and the body are the caller's and
 * die after the call, so libcurl must not keep pointers to them. */
static void slot_clear(struct slot *s)
{
    curl_easy_setopt(s->curl, CURLOPT_HTTPHEADER, (struct curl_slist *)NULL);
    curl_easy_setopt(s->curl, CURLOPT_POSTFIELDS, (const char *)NULL);
    free_headers(s->headers);
    s->headers = NULL;
    s->t = NULL;
}

/*
 * Starts t on the idle slot s: checks and builds its headers, sets the method, URL and body
 * and attaches the handle to the multi handle. True when t is in flight; false when it ended
 * here (bad input, out of memory) with its code in t->rc, and nothing was sent.
 */
static bool slot_start(struct slot *s, struct transfer *t, const char *const *extra_headers)
{
    struct txo_http_client *c = s->client;
    if (t->resp != NULL)
        txo_http_client_response_release(t->resp);
    if (t->url == NULL || t->invalid != NULL) {
        t->rc = txo_error_set(t->err, TXO_EINVAL, "HTTP client: %s",
                              t->url == NULL ? "the url is required" : t->invalid);
        return false;
    }
    char url_shown[URL_SHOWN_MAX + 8];
    shown_url(t->url, url_shown, sizeof(url_shown));
    snprintf(s->where, sizeof(s->where), "%s %s", t->method, url_shown);
    s->buf_len = 0;
    s->buf_overflow = false;
    s->buf_nomem = false;
    s->errbuf[0] = '\0';

    t->rc = build_headers(t->url, t->key, extra_headers, t->own_headers, t->body != NULL,
                          &s->headers, t->err);
    if (t->rc != 0)
        return false;
    bool ok = curl_easy_setopt(s->curl, CURLOPT_URL, t->url) == CURLE_OK &&
              curl_easy_setopt(s->curl, CURLOPT_HTTPHEADER, s->headers) == CURLE_OK;
    if (t->body != NULL)
        ok = ok && curl_easy_setopt(s->curl, CURLOPT_POST, 1L) == CURLE_OK &&
             curl_easy_setopt(s->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)t->len) ==
                 CURLE_OK &&
             curl_easy_setopt(s->curl, CURLOPT_POSTFIELDS, t->body) == CURLE_OK;
    else
        ok = ok && curl_easy_setopt(s->curl, CURLOPT_HTTPGET, 1L) == CURLE_OK;
    if (!ok) {
        t->rc = txo_error_set(t->err, TXO_ENOMEM, "%s: cannot configure libcurl", s->where);
        slot_clear(s);
        return false;
    }
    s->started_us = txo_monotonic_us();
    CURLMcode mc = curl_multi_add_handle(c->multi, s->curl);
    if (mc != CURLM_OK) {
        t->rc = txo_error_set(t->err, mc == CURLM_OUT_OF_MEMORY ? TXO_ENOMEM : TXO_EIO,
                              "%s: not sent: libcurl cannot start it (%s)", s->where,
                              curl_multi_strerror(mc));
        slot_clear(s);
        return false;
    }
    s->t = t;
    return true;
}

/* Ends the transfer of s that libcurl reported done with cc, and frees the slot. */
static void slot_finish(struct slot *s, CURLcode cc)
{
    double total_s = (double)(txo_monotonic_us() - s->started_us) / 1e6;
    struct transfer *t = s->t;
    curl_multi_remove_handle(s->client->multi, s->curl);
    t->rc = outcome(s, cc, total_s, t->resp, t->err);
    slot_clear(s);
}

/* Ends t, never started, with code: nothing was sent because of why. */
static void not_sent(struct transfer *t, int code, const char *why)
{
    char url_shown[URL_SHOWN_MAX + 8];
    shown_url(t->url != NULL ? t->url : "", url_shown, sizeof(url_shown));
    t->rc = txo_error_set(t->err, code, "%s %s: not sent: %s", t->method, url_shown, why);
}

/*
 * Runs ts[0..n), at most parallel at once on slots[0..parallel), until each has its code in
 * rc. Returns 0, or TXO_ENOMEM / TXO_EIO when the pool cannot be set up (every rc is that code,
 * nothing was sent) or libcurl's multi interface failed (the transfers in flight end with
 * TXO_EUNKNOWN, those not started with TXO_EIO).
 */
static int run(struct txo_http_client *c, struct transfer *ts, size_t n,
               const char *const *extra_headers, size_t parallel, struct txo_error *err)
{
    struct txo_error pool_err;
    txo_error_init(&pool_err);
    int rc = ensure_pool(c, parallel, &pool_err);
    if (rc != 0) {
        /* err first: for a single call it is also ts[0].err, whose message names the URL. */
        if (err != NULL)
            *err = pool_err;
        for (size_t k = 0; k < n; k++)
            not_sent(&ts[k], rc, pool_err.msg);
        return rc;
    }
    size_t next = 0;   /* the first transfer not started yet */
    size_t active = 0; /* transfers in flight */
    CURLMcode mc = CURLM_OK;
    for (;;) {
        /* Every idle slot takes the next transfer; one that ends at once (bad input) hands the
         * slot to the one after it. */
        for (size_t i = 0; i < parallel && next < n; i++) {
            while (c->slots[i]->t == NULL && next < n)
                if (slot_start(c->slots[i], &ts[next++], extra_headers))
                    active++;
        }
        if (active == 0)
            break;
        int running = 0;
        mc = curl_multi_perform(c->multi, &running);
        if (mc != CURLM_OK)
            break;
        size_t ended = 0;
        CURLMsg *msg;
        int queued = 0;
        while ((msg = curl_multi_info_read(c->multi, &queued)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            /* msg dies with the handle's removal in slot_finish: copy what is needed first. */
            CURLcode cc = msg->data.result;
            char *priv = NULL;
            if (curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv) != CURLE_OK ||
                priv == NULL)
                continue;
            struct slot *s = (struct slot *)(void *)priv;
            if (s->t == NULL)
                continue;
            slot_finish(s, cc);
            active--;
            ended++;
        }
        /* Wait for the network only when nothing ended: a free slot is filled at once. */
        if (ended == 0 && active > 0) {
            mc = curl_multi_poll(c->multi, NULL, 0, POLL_MAX_MS, NULL);
            if (mc != CURLM_OK)
                break;
        }
    }
    if (mc == CURLM_OK)
        return 0;

    /* libcurl's multi interface failed (out of memory, in practice): what was in flight may
     * have reached the service, what was not started did not. */
    const char *why = curl_multi_strerror(mc);
    rc = txo_error_set(err, TXO_EIO, "HTTP client: libcurl multi interface failed: %s", why);
    for (size_t i = 0; i < parallel; i++) {
        struct slot *s = c->slots[i];
        if (s->t == NULL)
            continue;
        curl_multi_remove_handle(c->multi, s->curl);
        s->t->rc =
            txo_error_set(s->t->err, TXO_EUNKNOWN,
                          "%s: outcome unknown: libcurl failed mid-transfer (%s)", s->where, why);
        slot_clear(s);
    }
    for (; next < n; next++)
        not_sent(&ts[next], TXO_EIO, why);
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
    struct transfer t = {.method = "POST",
                         .url = url,
                         .key = idempotency_key,
                         .body = body != NULL ? body : "",
                         .len = len,
                         .resp = resp,
                         .err = err};
    (void)run(c, &t, 1, extra_headers, 1, err);
    return t.rc;
}

int txo_http_post_json_many(struct txo_http_client *c, struct txo_http_client_request *reqs,
                            size_t n, const char *const *extra_headers, unsigned max_parallel,
                            struct txo_error *err)
{
    if (n == 0)
        return 0;
    if (c == NULL || reqs == NULL)
        return txo_error_set(err, TXO_EINVAL, "HTTP client: client and requests are required");
    for (size_t k = 0; k < n; k++) {
        txo_http_client_response_release(&reqs[k].resp);
        txo_error_init(&reqs[k].err);
        reqs[k].rc = 0;
    }
    struct transfer *ts = txo_calloc(n, sizeof(*ts));
    if (ts == NULL) {
        for (size_t k = 0; k < n; k++)
            reqs[k].rc = txo_error_set(&reqs[k].err, TXO_ENOMEM,
                                       "HTTP client: not sent: out of memory for %zu requests", n);
        return txo_error_set(err, TXO_ENOMEM, "HTTP client: out of memory for %zu requests", n);
    }
    for (size_t k = 0; k < n; k++) {
        struct txo_http_client_request *r = &reqs[k];
        ts[k] = (struct transfer){.method = "POST",
                                  .url = r->url,
                                  .key = r->idempotency_key,
                                  .own_headers = r->headers,
                                  .body = r->body != NULL ? r->body : "",
                                  .len = r->len,
                                  .resp = &r->resp,
                                  .err = &r->err};
        if (r->body == NULL && r->len > 0)
            ts[k].invalid = "the body is NULL but its length is not 0";
    }
    size_t parallel = max_parallel == 0 || max_parallel > n ? n : max_parallel;
    int rc = run(c, ts, n, extra_headers, parallel, err);
    for (size_t k = 0; k < n; k++)
        reqs[k].rc = ts[k].rc;
    txo_free(ts);
    return rc;
}

int txo_http_get(struct txo_http_client *c, const char *url, const char *const *extra_headers,
                 struct txo_http_client_response *resp, struct txo_error *err)
{
    if (resp != NULL)
        txo_http_client_response_release(resp);
    if (c == NULL || url == NULL)
        return txo_error_set(err, TXO_EINVAL, "HTTP client: client and url are required");
    struct transfer t = {.method = "GET", .url = url, .resp = resp, .err = err};
    (void)run(c, &t, 1, extra_headers, 1, err);
    return t.rc;
}
