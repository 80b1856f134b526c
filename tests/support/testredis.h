/*
 * Test support: a private redis-server for one test binary, run as a child process:
 *
 *   redis-server --port <free port> --bind 127.0.0.1 --dir <temp dir> --appendonly yes
 *                --appendfsync always --save '' --logfile <temp dir>/server.log
 *
 * appendfsync always: every acknowledged write is fsync'd to the append-only file before the
 * reply, the setting the outbox guarantee needs (txo/redis.h), so a SIGKILLed server restarted
 * on the same directory replays everything it acknowledged.
 *
 * testredis_start() picks a free port and a fresh temporary directory and waits (up to 5 s)
 * until PING answers PONG. testchild_server_stop() (SIGTERM) and testchild_server_kill()
 * (SIGKILL) on its srv end it; testchild_server_restart() starts it again on the SAME port and
 * directory and waits until the AOF is loaded. testredis_cleanup() stops it and removes the
 * directory.
 *
 * The binaries are $TXO_REDIS_SERVER / $TXO_REDIS_CLI, else redis-server / redis-cli on PATH,
 * /usr/bin or /usr/sbin. When one cannot be found or the server does not start, the test FAILS
 * (it is not skipped).
 *
 * The inspection helpers read the server with Debian's redis-cli (--json), not through
 * libtxo, so the tests check what Redis really stored. Every helper fails the current cmocka
 * test on error.
 */
#ifndef TXO_TESTREDIS_H
#define TXO_TESTREDIS_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "testchild.h"

struct testredis {
    char url[64]; /* "redis://127.0.0.1:<port>/0" */
    unsigned port;
    char dir[256];               /* the temporary directory (AOF + log) */
    char log_path[300];          /* <dir>/server.log */
    struct testchild_server srv; /* stop, kill, pause, resume, restart: testchild.h */
};

/* Starts a fresh server (new port, new directory). */
void testredis_start(struct testredis *r);

/* Stops the server if it runs and removes the temporary directory. Safe on a zeroed struct. */
void testredis_cleanup(struct testredis *r);

/*
 * Runs `redis-cli -h 127.0.0.1 -p <port> --json args...` (args NULL-terminated) and returns the
 * parsed reply (json_decref() it). An error reply fails the test.
 */
json_t *testredis_cli(const struct testredis *r, const char *const *args);

/* XLEN stream (0 for a missing key). */
int64_t testredis_xlen(const struct testredis *r, const char *stream);

/* XRANGE stream - +: an array of [id, [field, value, ...]] (json_decref() it). */
json_t *testredis_xrange(const struct testredis *r, const char *stream);

/* The value of field name in one XRANGE entry ([id, [f, v, ...]]), or NULL. */
const char *testredis_field(const json_t *entry, const char *name);

/*
 * The "idempotency_key" field of every entry of stream, in stream order, in *keys (NULL for an
 * entry without one). Returns how many; free them with testredis_free_keys().
 */
size_t testredis_stream_keys(const struct testredis *r, const char *stream, char ***keys);
void testredis_free_keys(char **keys, size_t n);

/*
 * XINFO GROUPS stream, the group named group: its "pending" count, or -1 when there is no
 * such group.
 */
int64_t testredis_group_pending(const struct testredis *r, const char *stream, const char *group);

/*
 * One Redis server for a whole test program, as cmocka group fixtures: testredis_group_setup starts
 * testredis_shared and testredis_group_teardown stops it; the tests use testredis_shared.
 */
extern struct testredis testredis_shared;
int testredis_group_setup(void **state);
int testredis_group_teardown(void **state);

#endif
