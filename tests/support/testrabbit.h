/*
 * Test support: a private RabbitMQ broker for one test binary, run as child processes:
 *
 *   epmd -port <free port> -address 127.0.0.1       the Erlang port mapper, ours alone
 *   rabbitmq-server                                  node txo-test-<pid>@localhost
 *
 * with its own AMQP port (RABBITMQ_NODE_PORT), distribution port (RABBITMQ_DIST_PORT), epmd
 * port (ERL_EPMD_PORT), no plugins (management off), and every file under one temporary
 * directory: RABBITMQ_MNESIA_BASE (the message store), RABBITMQ_LOG_BASE,
 * RABBITMQ_CONFIG_FILE, RABBITMQ_ENABLED_PLUGINS_FILE and HOME (the Erlang cookie). So it
 * never touches a system broker or another test's. RabbitMQ takes several seconds to boot:
 * start one per test binary and give each test its own queue names.
 *
 * testrabbit_start() waits (up to 120 s) until the AMQP port accepts connections.
 * testchild_server_stop() (SIGTERM: a clean shutdown) and testchild_server_kill() (SIGKILL) on
 * its srv end the broker; testchild_server_restart() boots it again on the SAME ports and
 * directory, so durable
 * queues and persistent messages survive (outage tests). testrabbit_cleanup() stops
 * everything and removes the directory (kept when TXO_TEST_KEEP_RABBIT is set).
 *
 * The binaries: $TXO_RABBITMQ_SERVER, else /usr/lib/rabbitmq/bin/rabbitmq-server (Debian's
 * rabbitmq-server package); epmd from PATH, /usr/bin or /usr/lib/erlang/bin. When they cannot
 * be found or the broker does not start, the test FAILS (it is not skipped). The broker's
 * output goes to <dir>/server.log, printed when it fails to start.
 *
 * testrabbit_client() runs tests/support/rabbit_client.py (python3-pika, an AMQP client that
 * is not ours and not rabbitmq-c) to see what really reached the queues. $TXO_PYTHON names the
 * interpreter, default /usr/bin/python3 (Debian's, where python3-pika is installed).
 */
#ifndef TXO_TESTRABBIT_H
#define TXO_TESTRABBIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "testchild.h"
#include "txo/rabbitmq.h"

struct testrabbit {
    char url[96]; /* "amqp://guest:guest@127.0.0.1:<port>/" */
    unsigned port, dist_port, epmd_port;
    char node[64];
    char dir[256];
    char log_path[300];
    struct testchild_server srv; /* the broker (beam); stop, kill, pause, ...: testchild.h */
    pid_t epmd_pid;              /* 0 when not running */
};

/* Starts a fresh broker (new ports, new directory). */
void testrabbit_start(struct testrabbit *r);

/* Stops the broker and epmd and removes the directory. Safe on a zeroed struct. */
void testrabbit_cleanup(struct testrabbit *r);

/*
 * Runs rabbit_client.py with the broker's URL: "<cmd> <url> args..." (see that file) and
 * returns its standard output (malloc'd, free it), or fails the test with its stderr when it
 * exits non-zero. args is a NULL-terminated list.
 */
char *testrabbit_client(const struct testrabbit *r, const char *cmd, ...);

/*
 * Runs `rabbitmqctl -n <node> args...` (args NULL-terminated) against the broker, as its
 * operator would (set_disk_free_limit to raise or clear an alarm, list_queues, say); returns
 * what it printed (free() it), or fails the test with that when it exits non-zero.
 */
char *testrabbit_ctl(const struct testrabbit *r, ...);

/* The ready messages of queue (rabbit_client.py count). */
long testrabbit_count(const struct testrabbit *r, const char *queue);

/* Prints the ready messages and consumers of each queue of the NULL-terminated list
 * (rabbit_client.py describe), headed "queues <when>". */
void testrabbit_print_queues(const struct testrabbit *r, const char *const *queues,
                             const char *when);

/* The broker's own view, for a failure's message: every queue with its ready and
 * unacknowledged messages and consumers (a passive declaration counts only the ready ones),
 * the consumers, the connections and the bindings, as rabbitmqctl lists them. */
void testrabbit_print_view(const struct testrabbit *r);

/* For a failure's message: testrabbit_print_queues(), the end of the broker's log, the lines
 * of that log that tell of a queue crashed, restarted or recovered with messages dropped, and
 * testrabbit_print_view(). */
void testrabbit_print_state(const struct testrabbit *r, const char *const *queues);

/*
 * One RabbitMQ broker for a whole test program, as cmocka group fixtures: testrabbit_group_setup
 * starts testrabbit_shared and testrabbit_group_teardown stops it; the tests use testrabbit_shared.
 */
extern struct testrabbit testrabbit_shared;
int testrabbit_group_setup(void **state);
int testrabbit_group_teardown(void **state);

/*
 * Options for a publisher or consumer of testrabbit_shared: its url and these timeouts, the rest
 * the default (txo_rabbitmq_opts_init).
 */
void testrabbit_opts(struct txo_rabbitmq_opts *o, int64_t connect_timeout_ms,
                     int64_t confirm_timeout_ms);

/* txo_publisher_rabbitmq_new(o) with no metrics, or the test fails with the error. */
struct txo_publisher *testrabbit_publisher(const struct txo_rabbitmq_opts *o);

#endif
