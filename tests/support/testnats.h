/*
 * Test support: a private nats-server with JetStream for one test, run as a child process:
 *
 *   nats-server -js -a 127.0.0.1 -p <free port> -sd <temp dir>/store
 *
 * testnats_start() picks a free port and a fresh temporary directory, starts the server and
 * waits (up to 5 s) until its port answers. testchild_server_stop() (SIGTERM) and
 * testchild_server_kill() (SIGKILL) on its srv end it, testchild_server_pause() makes it hang
 * (SIGSTOP); testchild_server_restart() starts it again on the SAME port and store directory,
 * so streams, consumers and messages survive (outage tests).
 * testnats_cleanup() stops it and removes the directory.
 *
 * The binary is $TXO_NATS_SERVER, else nats-server on PATH, /usr/sbin or /usr/bin. When it
 * cannot be found or does not start, the test FAILS (it is not skipped): the broker tests
 * must run wherever the suite runs. The server's output goes to <temp dir>/server.log, which
 * is printed when it fails to start.
 *
 * The inspection helpers talk to the server with cnats directly (not through libtxo), so the
 * tests check what the broker really stored. Every helper fails the current cmocka test on
 * error.
 */
#ifndef TXO_TESTNATS_H
#define TXO_TESTNATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <nats/nats.h>

#include "testchild.h"

struct testnats {
    char url[256]; /* "nats://127.0.0.1:<port>", or a cluster's comma-separated list */
    unsigned port;
    char dir[256];               /* the temporary directory (store + log) */
    char store_dir[300];         /* <dir>/store, the JetStream store (-sd) */
    char log_path[300];          /* <dir>/server.log */
    struct testchild_server srv; /* stop, kill, pause, resume, restart: testchild.h */
};

/* Starts a fresh server (new port, new store). */
void testnats_start(struct testnats *n);

struct CMUnitTest; /* <cmocka.h> */

/*
 * The main() of a test program that talks to NATS through libtxo: testrun_each(tests, n, setup,
 * teardown, NULL, NULL), then txo_nats_shutdown(), which ends cnats's threads so leak checkers
 * see a clean exit. Returns the number of tests that failed.
 */
int testnats_run_each(const struct CMUnitTest *tests, size_t n, int (*setup)(void **state),
                      int (*teardown)(void **state));

/* testchild_server_stop and testchild_server_restart of n->srv. */
void testnats_stop(struct testnats *n);
void testnats_restart(struct testnats *n);

/* Stops the server if it runs and removes the temporary directory. Safe on a zeroed struct. */
void testnats_cleanup(struct testnats *n);

/*
 * A cnats connection to urls: one URL, or a cluster's comma-separated list (up to 8), which is
 * given to cnats as an array. Returns cnats's status; on NATS_OK *nc is the caller's
 * (natsConnection_Destroy).
 */
natsStatus testnats_connect(const char *urls, natsConnection **nc);

/* Messages stored in the stream (JetStream stream info). */
uint64_t testnats_stream_msgs(const struct testnats *n, const char *stream);

/*
 * The Nats-Msg-Id header of every message stored in the stream, in stream order (NULL for a
 * message without one). Returns the count; free with testnats_free_ids().
 */
size_t testnats_stream_msg_ids(const struct testnats *n, const char *stream, char ***ids);
/* The same, and each message's body into (*data)[i] (free both with testnats_free_ids()). */
size_t testnats_stream_read(const struct testnats *n, const char *stream, char ***ids,
                            char ***data);
void testnats_free_ids(char **ids, size_t count);

/*
 * Reads stream with cnats and fails the test unless it holds the events k:0 .. k:n-1 (their
 * Nats-Msg-Id) exactly once each, each aggregate's (k % aggs) in ascending envelope id, each
 * envelope's payload {"n": k}. Returns the count of messages.
 */
size_t testnats_expect_each_once(const struct testnats *nats, const char *stream, unsigned n,
                                 unsigned aggs);

/*
 * Message seq of stream, read with cnats directly: the value of header name (strdup'd into
 * *value, NULL when absent) and, when data is not NULL, its body (strdup'd). Fails the test
 * when the message cannot be read.
 */
void testnats_stream_msg(const struct testnats *n, const char *stream, uint64_t seq,
                         const char *name, char **value, char **data);

/* Consumers the stream has (stream info State.Consumers), durable and ephemeral. */
int64_t testnats_stream_consumers(const struct testnats *n, const char *stream);

/* Deletes message seq of stream (JetStream's delete: the stream's first sequence moves when it
 * was the first message, otherwise it leaves a hole). */
void testnats_delete_msg(const struct testnats *n, const char *stream, uint64_t seq);

/* Publishes data to subject through JetStream with cnats directly, with the Nats-Msg-Id header
 * when msg_id is not NULL, and waits for the PubAck: a message from an application of its
 * own, not the relay. */
void testnats_publish(const struct testnats *n, const char *subject, const char *msg_id,
                      const char *data);

/* Deletes the stream (a missing stream is fine). Purging would keep the duplicate window. */
void testnats_delete_stream(const struct testnats *n, const char *stream);

/* Deletes the durable consumer of stream (js_DeleteConsumer); one that is gone is no error. */
void testnats_delete_consumer(const struct testnats *n, const char *stream, const char *durable);

/* True when the durable consumer exists on the stream. */
bool testnats_consumer_exists(const struct testnats *n, const char *stream, const char *durable);

/* Messages of the durable delivered but not yet acknowledged (consumer info NumAckPending). */
int64_t testnats_consumer_ack_pending(const struct testnats *n, const char *stream,
                                      const char *durable);

#endif
