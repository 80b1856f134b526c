/*
 * libFuzzer harness of the request parsing and validation of POST /orders, without a
 * database (order_api_check_post). Input: the Idempotency-Key line, the Content-Type line
 * (empty: no header), then the body. Checks that every answer is a well-formed JSON
 * {"error","message"} with a 4xx status: nothing may answer 500 (an allocation failure, and the
 * fuzzer's heap never runs out).
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "txo/txo.h"

static void check(bool ok)
{
    if (!ok)
        __builtin_trap();
}

/* Splits off the text up to the next '\n' as a NUL-terminated copy (malloc). */
static char *line(const char **p, size_t *left)
{
    const char *nl = memchr(*p, '\n', *left);
    size_t n = nl != NULL ? (size_t)(nl - *p) : *left;
    char *s = malloc(n + 1);
    check(s != NULL);
    memcpy(s, *p, n);
    s[n] = '\0';
    *p += nl != NULL ? n + 1 : n;
    *left -= nl != NULL ? n + 1 : n;
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    size_t left = size;
    char *key = line(&p, &left);
    char *ctype = line(&p, &left);
    struct txo_http_response resp = {.status = 500};
    bool ok = order_api_check_post(key[0] != '\0' ? key : NULL, key[0] != '\0' ? 1 : 0,
                                   ctype[0] != '\0' ? ctype : NULL, p, left, &resp);
    if (!ok) {
        check(resp.status == 400 || resp.status == 415 || resp.status == 422);
        check(resp.body != NULL);
        json_error_t jerr;
        json_t *doc = json_loadb(resp.body, resp.body_len, 0, &jerr);
        check(doc != NULL);
        check(json_is_string(json_object_get(doc, "error")));
        check(json_is_string(json_object_get(doc, "message")));
        json_decref(doc);
    }
    txo_free(resp.body);
    free(key);
    free(ctype);
    return 0;
}
