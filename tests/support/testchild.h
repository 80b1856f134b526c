/*
 * Servers that a test owns, run as child processes: the mechanics shared by testnats,
 * testredis, testrabbit and testgrpc, which differ only in the command line and in how they
 * tell that their server is ready.
 *
 * A server keeps every file in one temporary directory (testchild_make_dir), appends its output
 * to a log there, and its pid lives in a struct testchild_server (a helper process such as
 * RabbitMQ's epmd: in a pid_t of its own), 0 when it does not run. The child dies
 * with the test process (PR_SET_PDEATHSIG), even when the test crashes, so a failed test leaves
 * no server behind.
 *
 * Every function fails the current cmocka test (fail_msg) on a setup error, so callers need no
 * error handling. Not thread-safe: one test thread owns its servers.
 */
#ifndef TXO_TESTCHILD_H
#define TXO_TESTCHILD_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Runs in the child after its output is redirected, right before exec (e.g. setenv). */
typedef void (*testchild_setup_fn)(const void *arg);

/* A readiness probe: true when the server answers. */
typedef bool (*testchild_ready_fn)(const void *arg);

/*
 * Makes a fresh directory $TMPDIR/<prefix>-XXXXXX (/tmp without TMPDIR) and writes its path to
 * dir (cap bytes).
 */
void testchild_make_dir(char *dir, size_t cap, const char *prefix);

/* Removes path and everything under it. Never fails: what cannot be removed stays. */
void testchild_remove_dir(const char *path);

/*
 * The program named by the environment variable env when it is set (NULL when that is not an
 * executable), else name in $PATH, /usr/bin, /usr/sbin, /usr/local/bin or /usr/local/sbin, in
 * that order. Returns buf (cap bytes) or env's value, NULL when not found.
 */
const char *testchild_find_bin(const char *env, const char *name, char *buf, size_t cap);

/*
 * testchild_find_bin(), failing the test when the program is not found: "<name> not found
 * (install the <package> package, or set <env> to its path); <why>".
 */
const char *testchild_require_bin(const char *env, const char *name, const char *package,
                                  const char *why, char *buf, size_t cap);

/*
 * Forks and execs argv[0] (a path) with argv (NULL-terminated). In the child, stdin reads
 * /dev/null, stdout and stderr are appended to log_path, and setup(setup_arg) runs last when
 * setup is not NULL. Returns the child's pid.
 */
pid_t testchild_spawn(const char *const *argv, const char *log_path, testchild_setup_fn setup,
                      const void *setup_arg);

/*
 * Polls ready(ready_arg) every poll_ms until it returns true. When the child exits first, or
 * timeout_ms passes (the child is SIGKILLed then), *pid becomes 0 and the test fails with name
 * and the end of log_path.
 */
void testchild_await(pid_t *pid, const char *name, const char *log_path, testchild_ready_fn ready,
                     const void *ready_arg, int timeout_ms, int poll_ms);

/* A testchild_ready_fn: port (a const unsigned *) on 127.0.0.1 accepts a TCP connection. */
bool testchild_port_answers(const void *port);

/*
 * Sends sig to the child and reaps it; SIGKILL when it has not exited after timeout_ms. SIGCONT
 * goes along, so a paused child (testchild_server_pause) can handle a SIGTERM. Sets *pid to 0.
 * No-op when *pid is 0.
 */
void testchild_end(pid_t *pid, int sig, int timeout_ms);

/*
 * A server child as a test drives it: its pid (0 when not running), how long a stop may take
 * before SIGKILL, and respawn(owner), which starts it again on the same port and directory and
 * returns once it answers (setting pid). testnats, testredis, testrabbit and testgrpc each
 * embed one (their member srv) and set it up in their start function; a test stops, kills,
 * pauses, resumes and restarts its server through it.
 */
struct testchild_server {
    pid_t pid;
    int stop_timeout_ms;
    void (*respawn)(void *owner);
    void *owner;
};

/* Sets s up (stop_timeout_ms, respawn, owner) and starts the server: respawn(owner). */
void testchild_server_start(struct testchild_server *s, int stop_timeout_ms,
                            void (*respawn)(void *owner), void *owner);

/* SIGTERM and waitpid (SIGKILL after stop_timeout_ms). No-op when not running. */
void testchild_server_stop(struct testchild_server *s);

/* SIGKILL and waitpid. No-op when not running. */
void testchild_server_kill(struct testchild_server *s);

/*
 * SIGSTOP / SIGCONT: the server hangs with its connections open (requests are neither answered
 * nor refused), then carries on with what it had received meanwhile. The test fails when it
 * does not run.
 */
void testchild_server_pause(struct testchild_server *s);
void testchild_server_resume(struct testchild_server *s);

/* Starts the server again on the same port and directory; the test fails when it still runs. */
void testchild_server_restart(struct testchild_server *s);

#endif
