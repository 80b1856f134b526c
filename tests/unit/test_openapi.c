/*
 * The OpenAPI description (app/order-service/openapi.json, served as GET /openapi.json) and
 * the API's route table say the same thing: every route is described, with 401 and a bearer
 * security requirement exactly on the admin routes; every described operation is a route (or
 * /metrics, which the daemon serves next to the API); every error response is the documented
 * {"error","message"} shape. An independent validator checks the document itself
 * (tests/openapi/validate.sh).
 */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "api.h"

static json_t *load(void)
{
    json_error_t jerr;
    json_t *doc = json_loads(order_api_openapi(), 0, &jerr);
    if (doc == NULL)
        fail_msg("openapi.json is not JSON: %s (line %d)", jerr.text, jerr.line);
    return doc;
}

static void lower(const char *in, char *out, size_t cap)
{
    size_t i = 0;
    for (; in[i] != '\0' && i + 1 < cap; i++)
        out[i] = (char)tolower((unsigned char)in[i]);
    out[i] = '\0';
}

static void test_every_route_is_described(void **state)
{
    (void)state;
    json_t *doc = load();
    assert_string_equal(json_string_value(json_object_get(doc, "openapi")), "3.1.0");
    json_t *paths = json_object_get(doc, "paths");
    const char *method;
    char path[128], m[16];
    bool admin;
    size_t n = 0;
    for (size_t i = 0; order_api_route(i, &method, path, sizeof(path), &admin); i++, n++) {
        lower(method, m, sizeof(m));
        json_t *op = json_object_get(json_object_get(paths, path), m);
        if (op == NULL)
            fail_msg("route %s %s is not in openapi.json", method, path);
        json_t *responses = json_object_get(op, "responses");
        bool has_401 = json_object_get(responses, "401") != NULL;
        bool secured = json_array_size(json_object_get(op, "security")) > 0;
        if (admin != has_401 || admin != secured)
            fail_msg("%s %s: admin=%d but 401 described=%d, security=%d", method, path, admin,
                     has_401, secured);
    }
    assert_true(n >= 10);
    json_decref(doc);
}

static void test_every_description_is_a_route(void **state)
{
    (void)state;
    json_t *doc = load();
    const char *path;
    json_t *item;
    json_object_foreach(json_object_get(doc, "paths"), path, item)
    {
        const char *m;
        json_t *op;
        json_object_foreach(item, m, op)
        {
            bool found = strcmp(path, "/metrics") == 0 && strcmp(m, "get") == 0;
            const char *method;
            char rp[128], lm[16];
            bool admin;
            for (size_t i = 0; !found && order_api_route(i, &method, rp, sizeof(rp), &admin); i++) {
                lower(method, lm, sizeof(lm));
                found = strcmp(rp, path) == 0 && strcmp(lm, m) == 0;
            }
            if (!found)
                fail_msg("openapi.json describes %s %s, which no route answers", m, path);
            /* Every error answer is the {"error","message"} shape. */
            const char *code;
            json_t *resp;
            json_object_foreach(json_object_get(op, "responses"), code, resp)
            {
                if (code[0] != '4' && code[0] != '5')
                    continue;
                const char *ref = json_string_value(json_object_get(resp, "$ref"));
                const char *schema = json_string_value(json_object_get(
                    json_object_get(
                        json_object_get(json_object_get(resp, "content"), "application/json"),
                        "schema"),
                    "$ref"));
                bool ok = (ref != NULL && strncmp(ref, "#/components/responses/", 23) == 0) ||
                          (schema != NULL && strcmp(schema, "#/components/schemas/Error") == 0);
                if (!ok)
                    fail_msg("%s %s answers %s without the Error shape", m, path, code);
            }
        }
    }
    json_decref(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_route_is_described),
        cmocka_unit_test(test_every_description_is_a_route),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
