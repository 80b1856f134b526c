/*
 * The admin API (txo/admin.h) mounted alone on a bare txo_http_server, as a second service
 * built on libtxo would mount it: no order routes and no order tables, only the library's
 * migrations on a real database.
 *
 * A saga type of the test's own ("AdminProbe": its second step fails, and the first step's
 * undo is refused while the test says so) is left COMPENSATION_FAILED, then retried through
 * POST /sagas/{id}/retry: the admin finds the definition by the saga's type among those it was
 * given, and makes and frees the retry's ctx->user with the factory it was given, as the
 * worker does for its runners. Also: the token (401 without it), the outbox counts, the dead
 * letters, 405 and 404, and the dashboard without the token.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>

#include "testrun.h"
#include "testdb.h"
#include "testsaga.h"
#include "testhttp.h"
#include "testoutbox.h"
#include "txo/txo.h"

#define TOKEN "mount-s3cret"

static const char *const with_token[] = {"Authorization: Bearer " TOKEN, NULL};

/* ctx->user of the probe saga: whether its first step's undo is refused. */
struct probe_env {
    bool refuse_undo;
};

/* What the admin's saga_user_new/free did: one of each per retry. */
static unsigned envs_made;
static unsigned envs_freed;

static int step_ok_one(struct txo_tx *tx, const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    (void)tx;
    (void)ctx;
    (void)err;
    return 0;
}

static int step_refused_one(struct txo_tx *tx, const struct txo_saga_ctx *ctx,
                            struct txo_error *err)
{
    (void)tx;
    (void)ctx;
    return txo_error_set(err, TXO_EBUSINESS, "refused by the test");
}

static int undo_first_one(struct txo_tx *tx, const struct txo_saga_ctx *ctx, struct txo_error *err)
{
    (void)tx;
    const struct probe_env *env = ctx->user;
    if (env != NULL && env->refuse_undo)
        return txo_error_set(err, TXO_EBUSINESS, "undo refused by the test");
    return 0;
}

TESTSAGA_STEP(step_ok, step_ok_one)
TESTSAGA_STEP(step_refused, step_refused_one)
TESTSAGA_STEP(undo_first, undo_first_one)

static const struct txo_saga_step_def probe_steps[] = {
    {.name = "First", .action = step_ok, .compensate = undo_first},
    {.name = "Second", .action = step_refused},
};

static const struct txo_saga_def probe_def = {
    .type = "AdminProbe",
    .steps = probe_steps,
    .n_steps = TXO_ARRAY_LEN(probe_steps),
};

static const struct txo_saga_def *const probe_sagas[] = {&probe_def};

static void *env_new(void *arg)
{
    (void)arg;
    envs_made++;
    return calloc(1, sizeof(struct probe_env)); /* the undo is allowed now */
}

static void env_free(void *user)
{
    envs_freed++;
    free(user);
}

struct ctx {
    struct testdb t;
    struct txo_db_pool *pool;
    struct txo_admin *admin;
    struct txo_http_server *srv;
    unsigned port;
    CURL *h;
    struct testhttp_reply r;
};

static int setup(void **state)
{
    struct ctx *c = testdb_fixture_new(sizeof(*c), "admin_mount", TESTDB_NEW_EMPTY);
    struct txo_error err;
    txo_error_init(&err);
    if (txo_migrate_set(c->t.db, txo_core_migrations(), NULL, NULL, &err) != 0)
        fail_msg("migrating: %s", err.msg);
    if (txo_db_pool_new(&c->t.opts, 4, &c->pool, &err) != 0)
        fail_msg("pool: %s", err.msg);

    struct txo_admin_opts ao;
    txo_admin_opts_init(&ao);
    ao.token = TOKEN;
    ao.sagas = probe_sagas;
    ao.n_sagas = TXO_ARRAY_LEN(probe_sagas);
    ao.saga_user_new = env_new;
    ao.saga_user_free = env_free;
    if (txo_admin_new(&ao, c->pool, &c->admin, &err) != 0)
        fail_msg("admin: %s", err.msg);

    struct txo_http_server_opts so;
    txo_http_server_opts_init(&so);
    so.handler_threads = 2;
    so.port = 0; /* any free port: 8080 may be taken by a service running on this machine */
    if (txo_http_server_start(&so, txo_admin_http_handler, c->admin, &c->srv, &err) != 0)
        fail_msg("server: %s", err.msg);
    c->port = txo_http_server_port(c->srv);
    c->h = curl_easy_init();
    assert_non_null(c->h);
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    txo_http_server_stop(c->srv);
    txo_admin_free(c->admin);
    txo_db_pool_free(c->pool);
    testhttp_reply_release(&c->r);
    curl_easy_cleanup(c->h);
    testdb_fixture_free(c);
    return 0;
}

static int create_probe(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    return txo_saga_create(tx, &probe_def, "probe:1", "{}", NULL, arg, NULL, err);
}

static void test_admin_answers_alone(void **state)
{
    struct ctx *c = *state;
    testoutbox_append_orders(c->t.db, 1);

    testhttp_get(c->h, c->port, "/outbox/stats", &c->r);
    testhttp_expect_error(&c->r, 401, "unauthorized", NULL, "GET /outbox/stats without token");

    testhttp_do(c->h, "GET", c->port, "/outbox/stats", with_token, NULL, 0, &c->r);
    testhttp_expect_status(&c->r, 200, "GET /outbox/stats");
    json_t *doc = testhttp_json(&c->r);
    assert_int_equal(json_integer_value(json_object_get(doc, "pending")), 1);
    assert_int_equal(json_integer_value(json_object_get(doc, "dead_letters")), 0);
    json_decref(doc);

    testhttp_do(c->h, "GET", c->port, "/dlq?limit=10", with_token, NULL, 0, &c->r);
    testhttp_expect_status(&c->r, 200, "GET /dlq");
    doc = testhttp_json(&c->r);
    assert_int_equal(json_array_size(json_object_get(doc, "dead_letters")), 0);
    assert_int_equal(json_integer_value(json_object_get(doc, "next_after_id")), 0);
    json_decref(doc);

    testhttp_do(c->h, "GET", c->port, "/dlq?limit=0", with_token, NULL, 0, &c->r);
    testhttp_expect_error(&c->r, 400, "invalid_request", "limit", "GET /dlq?limit=0");
    testhttp_do(c->h, "DELETE", c->port, "/dlq", with_token, NULL, 0, &c->r);
    testhttp_expect_error(&c->r, 405, "method_not_allowed", NULL, "DELETE /dlq");
    testhttp_do(c->h, "POST", c->port, "/dlq/42/replay", with_token, NULL, 0, &c->r);
    testhttp_expect_error(&c->r, 404, "not_found", NULL, "POST /dlq/42/replay");

    /* Nothing but the admin API is mounted. */
    testhttp_get(c->h, c->port, "/orders/1", &c->r);
    testhttp_expect_error(&c->r, 404, "not_found", NULL, "GET /orders/1");

    testhttp_get(c->h, c->port, "/ui", &c->r);
    testhttp_expect_status(&c->r, 200, "GET /ui without token");
    assert_non_null(strstr(c->r.content_type, "text/html"));
}

static void test_retry_through_registered_definition(void **state)
{
    struct ctx *c = *state;
    struct txo_error err;
    txo_error_init(&err);
    char id[TXO_SAGA_ID_LEN];
    if (txo_db_transact(c->t.db, TXO_ISO_READ_COMMITTED, create_probe, id, &err) != 0)
        fail_msg("create: %s", err.msg);
    struct probe_env refusing = {.refuse_undo = true};
    enum txo_saga_status final = TXO_SAGA_RUNNING;
    if (txo_saga_run(c->t.db, &probe_def, id, NULL, &refusing, &final, &err) != 0)
        fail_msg("run: %s", err.msg);
    assert_int_equal(final, TXO_SAGA_COMPENSATION_FAILED);

    char path[96];
    snprintf(path, sizeof(path), "/sagas/%s/retry", id);
    envs_made = envs_freed = 0;
    testhttp_do(c->h, "POST", c->port, path, with_token, NULL, 0, &c->r);
    testhttp_expect_status(&c->r, 200, "POST /sagas/{id}/retry");
    json_t *doc = testhttp_json(&c->r);
    assert_string_equal(json_string_value(json_object_get(doc, "saga_id")), id);
    assert_string_equal(json_string_value(json_object_get(doc, "status")), "COMPENSATED");
    json_decref(doc);
    assert_int_equal(envs_made, 1);
    assert_int_equal(envs_freed, 1);

    /* Terminal now: a second retry is a conflict, and its ctx->user is freed all the same. */
    testhttp_do(c->h, "POST", c->port, path, with_token, NULL, 0, &c->r);
    testhttp_expect_error(&c->r, 409, "conflict", NULL, "POST /sagas/{id}/retry again");
    assert_int_equal(envs_made, 2);
    assert_int_equal(envs_freed, 2);

    testhttp_do(c->h, "POST", c->port, "/sagas/00000000-0000-0000-0000-000000000000/retry",
                with_token, NULL, 0, &c->r);
    testhttp_expect_error(&c->r, 404, "not_found", NULL, "POST /sagas/{unknown}/retry");

    snprintf(path, sizeof(path), "/sagas/%s", id);
    testhttp_do(c->h, "GET", c->port, path, with_token, NULL, 0, &c->r);
    testhttp_expect_status(&c->r, 200, "GET /sagas/{id}");
    doc = testhttp_json(&c->r);
    assert_string_equal(json_string_value(json_object_get(doc, "status")), "COMPENSATED");
    json_decref(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admin_answers_alone),
        cmocka_unit_test(test_retry_through_registered_definition),
    };
    return testrun_each(tests, TXO_ARRAY_LEN(tests), setup, teardown, NULL, NULL);
}
