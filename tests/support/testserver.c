/*
 * Test support: a private MariaDB server per test file (testserver.h), driven through
 * tests/support/testserver.sh so the server is started the same way as scripts/db.sh does.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "testproc.h"
#include "testserver.h"

#ifndef TXO_TEST_SOURCE_DIR
#error "TXO_TEST_SOURCE_DIR must name the source tree (tests/CMakeLists.txt)"
#endif

static const char *script(void)
{
    return TXO_TEST_SOURCE_DIR "/tests/support/testserver.sh";
}

const char *testserver_source_path(const char *rel)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/%s", TXO_TEST_SOURCE_DIR, rel);
    return path;
}

void testserver_start(struct testserver *s, enum testserver_mode mode)
{
    static unsigned n;
    memset(s, 0, sizeof(*s));
    snprintf(s->dir, sizeof(s->dir), "/tmp/txo-testserver-%ld-%u", (long)getpid(), n++);
    snprintf(s->ca, sizeof(s->ca), "%s/ca.pem", s->dir);
    snprintf(s->other_ca, sizeof(s->other_ca), "%s/other-ca.pem", s->dir);
    char cmd[512];
    /* A port taken between the probe and the server's bind is rare; try another one. */
    for (int attempt = 0; attempt < 3; attempt++) {
        s->port = testproc_free_port();
        snprintf(cmd, sizeof(cmd), "'%s' start '%s' %u %s", script(), s->dir, s->port,
                 mode == TESTSERVER_TLS      ? "tls"
                 : mode == TESTSERVER_BINLOG ? "binlog"
                                             : "plain");
        if (system(cmd) == 0) {
            s->running = true;
            return;
        }
    }
    fail_msg("could not start a private MariaDB server (%s)", cmd);
}

/* Runs the script's command on the server's directory; fails the test on error. */
static void run_script(const struct testserver *s, const char *command)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "'%s' %s '%s'", script(), command, s->dir);
    if (system(cmd) != 0)
        fail_msg("%s failed", cmd);
}

void testserver_crash(struct testserver *s)
{
    run_script(s, "crash");
}

void testserver_restart(struct testserver *s)
{
    run_script(s, "restart");
}

void testserver_stop(struct testserver *s)
{
    if (!s->running)
        return;
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "'%s' stop '%s'", script(), s->dir);
    if (system(cmd) != 0)
        print_message("testserver: stopping %s failed\n", s->dir);
    s->running = false;
}

struct testserver testserver_shared;

int testserver_group_setup_plain(void **state)
{
    (void)state;
    testserver_start(&testserver_shared, TESTSERVER_PLAIN);
    return 0;
}

int testserver_group_setup_tls(void **state)
{
    (void)state;
    testserver_start(&testserver_shared, TESTSERVER_TLS);
    return 0;
}

int testserver_group_teardown(void **state)
{
    (void)state;
    testserver_stop(&testserver_shared);
    return 0;
}

void testserver_sql(const struct testserver *s, const char *sql)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "'%s' sql '%s' --batch", script(), s->dir);
    FILE *p = popen(cmd, "w");
    if (!p)
        fail_msg("popen %s failed", cmd);
    fputs(sql, p);
    if (pclose(p) != 0)
        fail_msg("SQL as root failed: %.300s", sql);
}

void testserver_opts(const struct testserver *s, struct txo_db_opts *opts)
{
    txo_db_opts_init(opts);
    opts->host = "127.0.0.1";
    opts->port = s->port;
    opts->user = "app";
    opts->password = "secret";
    opts->database = "appdb";
}
