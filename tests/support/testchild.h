/*
 * Servers that a test owns, run as child processes: the mechanics shared by testnats,
 * testredis, testrabbit and testgrpc, which differ only in the command line and in how they
 * tell that their server is ready.
 *
 * A server keeps every file in one temporary directory (testchild_make_dir), appends its output
 * to a log there, and its pid lives in the caller's pid_t, 0 when it does not run. The child dies
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
 * goes along, so a paused child (testchild_pause) can handle a SIGTERM. Sets *pid to 0. No-op
 * when *pid is 0.
 */
void testchild_end(pid_t *pid, int sig, int timeout_ms);

/*
 * SIGSTOP / SIGCONT: the child hangs with its sockets open, then carries on. caller (the
 * public function's name) goes into the failure message when the child does not run.
 */
void testchild_pause(pid_t pid, const char *caller);
void testchild_resume(pid_t pid, const char *caller);

/* Fails the test when the child still runs: a restart needs a stopped server. */
void testchild_assert_stopped(pid_t pid, const char *caller);

#endif
