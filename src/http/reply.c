/*
 * What every txo endpoint answers the same way (http_server.h): the {"error","message"} shape,
 * the status a library error maps to, a JSON document as the body, and a route's numeric path
 * parameter. The order service and the admin API (admin.h) both answer through these, so one
 * error looks alike whichever of them sent it.
 *
 * Thread-safety: pure functions of their arguments; resp belongs to the calling handler.
 */
#include "core/common.h"

#include <jansson.h>

#include "core/text.h"
#include "txo/jansson.h"

void txo_http_response_json(struct txo_http_response *resp, int status, struct json_t *doc)
{
    if (doc == NULL) {
        TXO_LOG(TXO_LOG_ERROR, "http", "could not build the JSON response",
                TXO_KV_I64("http_status", status));
        (void)txo_http_response_set(
            resp, 500, "{\"error\":\"internal\",\"message\":\"could not build the response\"}");
        return;
    }
    char *text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(doc);
    if (text == NULL || txo_http_response_set(resp, status, text) != 0)
        (void)txo_http_response_set(resp, 500,
                                    "{\"error\":\"internal\",\"message\":\"out of memory\"}");
    free(text); /* jansson allocates with malloc */
}

void txo_http_response_error(struct txo_http_response *resp, int status, const char *code,
                             const char *message)
{
    char clean[512];
    txo__utf8_sanitize(message, clean, sizeof(clean));
    txo_http_response_json(resp, status, json_pack("{s:s,s:s}", "error", code, "message", clean));
}

void txo_http_response_fail(struct txo_http_response *resp, int rc, const struct txo_error *err)
{
    const char *msg = err->msg[0] != '\0' ? err->msg : txo_strerror(rc);
    switch (rc) {
    case TXO_ENOTFOUND:
        txo_http_response_error(resp, 404, "not_found", msg);
        break;
    case TXO_EINVAL:
        txo_http_response_error(resp, 422, "validation_failed", msg);
        break;
    case TXO_ESTATE:
        txo_http_response_error(resp, 409, "conflict", msg);
        break;
    case TXO_ETIMEOUT:
    case TXO_ECONNECT:
    case TXO_ECONNLOST:
    case TXO_EDEADLOCK:
    case TXO_ELOCKTIMEOUT:
    case TXO_EUNAVAILABLE:
        resp->retry_after_s = 1;
        txo_http_response_error(resp, 503, "unavailable", msg);
        break;
    default:
        TXO_LOG(TXO_LOG_ERROR, "http", "request failed", TXO_KV_STR("code", txo_err_name(rc)),
                TXO_KV_STR("err", msg));
        txo_http_response_error(resp, 500, "internal", msg);
        break;
    }
}

bool txo_http_path_id(const char *path, const char *prefix, const char *suffix, int64_t *id)
{
    size_t plen = strlen(prefix);
    if (strncmp(path, prefix, plen) != 0)
        return false;
    const char *p = path + plen;
    if (*p < '0' || *p > '9')
        return false;
    int64_t v = 0;
    while (*p >= '0' && *p <= '9') {
        if (v > (INT64_MAX - (*p - '0')) / 10)
            return false;
        v = v * 10 + (*p - '0');
        p++;
    }
    if (strcmp(p, suffix) != 0)
        return false;
    *id = v;
    return true;
}
