/*
 * Test support: a MariaDB server of the test's own, for tests that need server settings or
 * admin rights the shared test server does not give (TLS with require_secure_transport, users
 * with chosen grants, a server to crash and restart). tests/support/testserver.sh does the work:
 * its own datadir under /tmp, a free TCP port on 127.0.0.1, the database appdb, the user app
 * (password secret) with ALL on
 * *.*, and root through the server's unix socket. With TLS it also makes the certificates:
 * ca.pem signs the server's certificate for the host name localhost, other-ca.pem signs
 * nothing the server uses.
 *
 * Starting takes a few seconds, so a test file starts one server in its group setup. Every
 * helper fails the current cmocka test (fail_msg) on error. Not thread-safe.
 */
#ifndef TXO_TESTSERVER_H
#define TXO_TESTSERVER_H

#include <stdbool.h>

#include "txo/txo.h"

struct testserver {
    char dir[128];      /* the server's directory (datadir, socket, certificates) */
    unsigned port;      /* its TCP port on 127.0.0.1 */
    bool running;       /* started and not yet stopped */
    char ca[160];       /* dir/ca.pem */
    char other_ca[160]; /* dir/other-ca.pem */
};

enum testserver_mode {
    TESTSERVER_PLAIN,  /* TCP without TLS */
    TESTSERVER_TLS,    /* requires secure transport on TCP */
    TESTSERVER_BINLOG, /* plain, and writes the binary log as scripts/db.sh does */
};

/* Starts a fresh server. */
void testserver_start(struct testserver *s, enum testserver_mode mode);

/* SIGKILLs the server, keeping its datadir: a server crash. */
void testserver_crash(struct testserver *s);

/* Starts the crashed server again on its datadir, port and mode (crash recovery included). */
void testserver_restart(struct testserver *s);

/* Stops the server and deletes its directory. Safe to call twice. */
void testserver_stop(struct testserver *s);

/* Runs sql (several statements allowed) as root over the server's unix socket. */
void testserver_sql(const struct testserver *s, const char *sql);

/* opts for 127.0.0.1:port as app/secret on appdb, TLS mode preferred. */
void testserver_opts(const struct testserver *s, struct txo_db_opts *opts);

/*
 * The server of a cmocka group whose tests share one server of their own: the group setup
 * starts it in its mode (plain or TLS), the group teardown stops it. One group at a time.
 */
extern struct testserver testserver_shared;
int testserver_group_setup_plain(void **state);
int testserver_group_setup_tls(void **state);
int testserver_group_teardown(void **state);

/* The absolute path of a file in the source tree ("docs/database.md"), in a static buffer. */
const char *testserver_source_path(const char *rel);

#endif
