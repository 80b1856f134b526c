/*
 * Real processes for fault and end-to-end tests: spawn `txo` subcommands (or
 * txo-fake-services, nats-server, ...), wait until their HTTP endpoint answers, kill them (SIGKILL
 * at will), read their logs. Children inherit the environment, so call testdb_export_env() first to
 * point them at the test's database. Every function fails the test (cmocka fail_msg) on a setup
 * error, so callers need no error handling.
 */
#ifndef TXO_TESTPROC_H
#define TXO_TESTPROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct testproc {
    pid_t pid;          /* 0 when not running */
    char log_path[256]; /* stdout + stderr of the child */
    int status;         /* waitpid status once reaped */
};

/* The `txo` binary under test ($TXO_BIN, set by CTest). */
const char *testproc_txo_bin(void);

/* The fake payment and shipment service, txo-fake-services ($TXO_FAKE_BIN, set by CTest). */
const char *testproc_fake_bin(void);

/* A TCP port on 127.0.0.1 that was free a moment ago, below the ephemeral range (so no
 * outgoing connection takes it meanwhile), from a block of ports this process owns (so no
 * other test hands it out while this one's server boots, or is down before a restart).
 * Thread-safe. */
unsigned testproc_free_port(void);

/*
 * Starts argv[0] (a path) with argv and the current environment plus env_extra (NULL or a
 * NULL-terminated list of "NAME=value"). Output goes to a fresh log file named after tag.
 */
void testproc_start(struct testproc *p, const char *tag, const char *const *argv,
                    const char *const *env_extra);

/* Polls GET http://127.0.0.1:port<path> until it answers 200; false after timeout_ms. */
bool testproc_wait_http(unsigned port, const char *path, int timeout_ms);

/* True when something accepts a TCP connection on 127.0.0.1:port now (one try). */
bool testproc_port_answers(unsigned port);

/* Polls until something accepts TCP connections on 127.0.0.1:port; false after timeout_ms. */
bool testproc_wait_port(unsigned port, int timeout_ms);

/* Sends sig to the child. */
void testproc_signal(struct testproc *p, int sig);

/*
 * Waits up to timeout_ms for the child to exit; true and p->status set when it did. Once a child
 * is gone (here or in testproc_stop_hard), its txo log lines are checked with
 * tests/js/check_logs.mjs: a line that npm logfmt or JSON.parse rejects fails the test.
 */
bool testproc_wait(struct testproc *p, int timeout_ms);

/* True when the child exited by SIGKILL (a crash point fired). */
bool testproc_killed(const struct testproc *p);

/* True when the child exited normally with code. */
bool testproc_exited_with(const struct testproc *p, int code);

/* SIGKILLs the child if it still runs and reaps it. Safe to call twice. */
void testproc_stop_hard(struct testproc *p);

/* SIGTERM, then waits up to timeout_ms; SIGKILL after that. Returns true when it exited by
 * itself with status 0. */
bool testproc_stop(struct testproc *p, int timeout_ms);

/* The child's log so far (malloc'd, NUL-terminated; free()). */
char *testproc_log(const struct testproc *p);

/*
 * Prints the child's whole log so far between "---- log of <what> (<path>) ----" and
 * "---- end of log ----" lines (cmocka print_message), for a failing test. Never fails.
 */
void testproc_print_log(const struct testproc *p, const char *what);

/*
 * Prints the file at path line by line (cmocka print_message), each line after prefix, for a
 * failing test; nothing when it cannot be read. Never fails.
 */
void testproc_print_file(const char *path, const char *prefix);

/* Prints the last max bytes of the file at path after a "---- <path> (last N bytes) ----" line
 * (cmocka print_message), for a failing test; nothing when it cannot be read. Never fails. */
void testproc_print_tail(const char *path, size_t max);

/* Deletes the child's log file (after a test that passed; a failed one keeps it). Never fails. */
void testproc_remove_log(const struct testproc *p);

/*
 * Runs argv (argv[0] the program, NULL-terminated) to completion and returns its exit status (-1
 * when a signal ended it) and its whole output in *out (malloc'd; free()). Fails the test when it
 * has not finished within timeout_ms (it is killed then).
 */
int testproc_run(const char *tag, const char *const *argv, int timeout_ms, char **out);

/* testproc_run of `$TXO_BIN args...` (args NULL-terminated, without the program). */
int testproc_run_txo(const char *tag, const char *const *args, int timeout_ms, char **out);

/*
 * Starts `$TXO_BIN <lead...> <args...>` (each NULL-terminated, lead may be NULL; 30 at most)
 * with stdin from /dev/null, stdout to out_path and stderr to err_path, truncated first or
 * appended to (append). Returns its pid; reap it with testproc_wait_pid().
 */
pid_t testproc_spawn_txo(const char *const *lead, const char *const *args, const char *out_path,
                         const char *err_path, bool append);

/* "$TMPDIR/<prefix>_<pid>_<name>" (TMPDIR unset: /tmp) into buf. */
void testproc_temp_path(char *buf, size_t cap, const char *prefix, const char *name);

/* A test's output and error files, "<prefix>_<pid>_<tag>_out" and "..._err" (testproc_temp_path),
 * removed. */
void testproc_io_paths(char out[256], char errf[256], const char *prefix, const char *tag);

/* The start of the file at path (a child's stderr), NUL-terminated, into buf; "" when it cannot
 * be read. */
void testproc_read_text(const char *path, char *buf, size_t cap);

/* Waits for pid to end and returns its waitpid() status. */
int testproc_wait_pid(pid_t pid);

#endif
