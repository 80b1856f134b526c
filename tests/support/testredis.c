/*
 * Test support: a private redis-server per test binary (see testredis.h); the process mechanics
 * are testchild's.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testchild.h"
#include "testproc.h"
#include "testredis.h"
#include "testrun.h"

#define READY_TIMEOUT_MS 5000
#define READY_POLL_MS    20
#define STOP_TIMEOUT_MS  10000
#define CLI_TIMEOUT_MS   30000

static const char *cli_bin(void)
{
    static char buf[512];
    return testchild_require_bin("TXO_REDIS_CLI", "redis-cli", "redis-tools",
                                 "the Redis tests read the streams with it", buf, sizeof(buf));
}

/* A testchild_ready_fn on the struct testredis: PING answers PONG (not LOADING, not refused). */
static bool answers_pong(const void *arg)
{
    const struct testredis *r = arg;
    char port[16];
    snprintf(port, sizeof(port), "%u", r->port);
    const char *argv[] = {cli_bin(), "-h", "127.0.0.1", "-p", port, "PING", NULL};
    char *out = NULL;
    int st = testproc_run("redis-cli-ping", argv, CLI_TIMEOUT_MS, &out);
    bool ok = st == 0 && out != NULL && strncmp(out, "PONG", 4) == 0;
    free(out);
    return ok;
}

static void spawn(void *owner)
{
    struct testredis *r = owner;
    char found[512];
    const char *bin =
        testchild_require_bin("TXO_REDIS_SERVER", "redis-server", "redis-server",
                              "the Redis tests need a real server", found, sizeof(found));
    char port[16];
    snprintf(port, sizeof(port), "%u", r->port);
    const char *argv[] = {bin,    "--port",       port,  "--bind",        "127.0.0.1", "--dir",
                          r->dir, "--appendonly", "yes", "--appendfsync", "always",    "--save",
                          "",     "--daemonize",  "no",  "--logfile",     r->log_path, NULL};
    /* The server writes its own log (--logfile); what it prints before opening it, such as a
     * bad option, lands in the same file. */
    r->srv.pid = testchild_spawn(argv, r->log_path, NULL, NULL);
    testchild_await(&r->srv.pid, "redis-server", r->log_path, answers_pong, r, READY_TIMEOUT_MS,
                    READY_POLL_MS);
}

void testredis_start(struct testredis *r)
{
    memset(r, 0, sizeof(*r));
    testchild_make_dir(r->dir, sizeof(r->dir), "txo-redis");
    snprintf(r->log_path, sizeof(r->log_path), "%s/server.log", r->dir);
    r->port = testproc_free_port();
    snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%u/0", r->port);
    testchild_server_start(&r->srv, STOP_TIMEOUT_MS, spawn, r);
}

void testredis_cleanup(struct testredis *r)
{
    testchild_server_stop(&r->srv);
    if (r->dir[0] != '\0')
        testchild_remove_dir(r->dir);
    r->dir[0] = '\0';
}

json_t *testredis_cli(const struct testredis *r, const char *const *args)
{
    char port[16];
    snprintf(port, sizeof(port), "%u", r->port);
    const char *argv[40] = {cli_bin(), "-h", "127.0.0.1", "-p", port, "--json"};
    size_t n = 6;
    for (size_t i = 0; args[i] != NULL; i++) {
        if (n == sizeof(argv) / sizeof(argv[0]) - 1)
            fail_msg("testredis_cli: too many arguments");
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    char *out = NULL;
    int st = testproc_run("redis-cli", argv, CLI_TIMEOUT_MS, &out);
    if (st != 0)
        fail_msg("redis-cli %s exited with %d: %s", args[0], st, out != NULL ? out : "");
    json_error_t jerr;
    json_t *j = json_loads(out, JSON_DECODE_ANY, &jerr);
    if (j == NULL)
        fail_msg("redis-cli %s: output is not JSON (%s): %.300s", args[0], jerr.text, out);
    if (json_is_string(j) && strncmp(json_string_value(j), "ERR", 3) == 0)
        fail_msg("redis-cli %s: %s", args[0], json_string_value(j));
    free(out);
    return j;
}

int64_t testredis_xlen(const struct testredis *r, const char *stream)
{
    json_t *j = testredis_cli(r, (const char *const[]){"XLEN", stream, NULL});
    if (!json_is_integer(j))
        fail_msg("XLEN %s: not an integer", stream);
    int64_t n = (int64_t)json_integer_value(j);
    json_decref(j);
    return n;
}

json_t *testredis_xrange(const struct testredis *r, const char *stream)
{
    json_t *j = testredis_cli(r, (const char *const[]){"XRANGE", stream, "-", "+", NULL});
    if (!json_is_array(j))
        fail_msg("XRANGE %s: not an array", stream);
    return j;
}

const char *testredis_field(const json_t *entry, const char *name)
{
    json_t *fields = json_array_get(entry, 1);
    for (size_t i = 0; i + 1 < json_array_size(fields); i += 2) {
        const char *f = json_string_value(json_array_get(fields, i));
        if (f != NULL && strcmp(f, name) == 0)
            return json_string_value(json_array_get(fields, i + 1));
    }
    return NULL;
}

int64_t testredis_group_pending(const struct testredis *r, const char *stream, const char *group)
{
    json_t *j = testredis_cli(r, (const char *const[]){"XINFO", "GROUPS", stream, NULL});
    int64_t pending = -1;
    size_t i;
    json_t *g;
    json_array_foreach(j, i, g)
    {
        const char *name = json_string_value(json_object_get(g, "name"));
        if (name != NULL && strcmp(name, group) == 0)
            pending = (int64_t)json_integer_value(json_object_get(g, "pending"));
    }
    json_decref(j);
    return pending;
}

TESTRUN_SHARED_SERVER(testredis, testredis_start, testredis_cleanup)

size_t testredis_stream_keys(const struct testredis *r, const char *stream, char ***keys)
{
    json_t *entries = testredis_xrange(r, stream);
    size_t n = json_array_size(entries);
    *keys = calloc(n + 1, sizeof(**keys));
    assert_non_null(*keys);
    for (size_t i = 0; i < n; i++) {
        const char *k = testredis_field(json_array_get(entries, i), "idempotency_key");
        (*keys)[i] = k != NULL ? strdup(k) : NULL;
    }
    json_decref(entries);
    return n;
}

void testredis_free_keys(char **keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
}
