/*
 * Servers that a test owns, run as child processes (see testchild.h): fork + execv, a log in the
 * server's directory, signals to end, pause and resume it.
 */
#define _DEFAULT_SOURCE
#include "testchild.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "testproc.h"
#include "txo/clock.h"

#define LOG_TAIL_BYTES 4096
#define END_POLL_MS    5

void testchild_make_dir(char *dir, size_t cap, const char *prefix)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, cap, "%s/%s-XXXXXX", tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp", prefix);
    if (mkdtemp(dir) == NULL)
        fail_msg("mkdtemp %s: %s", dir, strerror(errno));
}

void testchild_remove_dir(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (!S_ISDIR(st.st_mode)) {
        unlink(path);
        return;
    }
    DIR *d = opendir(path);
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char child[1024];
            snprintf(child, sizeof(child), "%s/%s", path, e->d_name);
            testchild_remove_dir(child);
        }
        closedir(d);
    }
    rmdir(path);
}

const char *testchild_find_bin(const char *env, const char *name, char *buf, size_t cap)
{
    const char *v = getenv(env);
    if (v != NULL && v[0] != '\0')
        return access(v, X_OK) == 0 ? v : NULL;
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof(dirs), "%s:/usr/bin:/usr/sbin:/usr/local/bin:/usr/local/sbin",
             path != NULL ? path : "");
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d != NULL; d = strtok_r(NULL, ":", &save)) {
        if (d[0] == '\0')
            continue;
        snprintf(buf, cap, "%s/%s", d, name);
        if (access(buf, X_OK) == 0)
            return buf;
    }
    return NULL;
}

const char *testchild_require_bin(const char *env, const char *name, const char *package,
                                  const char *why, char *buf, size_t cap)
{
    const char *bin = testchild_find_bin(env, name, buf, cap);
    if (bin == NULL)
        fail_msg("%s not found (install the %s package, or set %s to its path); %s", name, package,
                 env, why);
    return bin;
}

pid_t testchild_spawn(const char *const *argv, const char *log_path, testchild_setup_fn setup,
                      const void *setup_arg)
{
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int log = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        int devnull = open("/dev/null", O_RDONLY);
        if (log >= 0) {
            dup2(log, STDOUT_FILENO);
            dup2(log, STDERR_FILENO);
        }
        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        if (setup != NULL)
            setup(setup_arg);
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    return pid;
}

/* The last bytes of the log, for a failure message. */
static void log_tail(const char *log_path, char *out, size_t cap)
{
    out[0] = '\0';
    FILE *f = fopen(log_path, "r");
    if (f == NULL)
        return;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        long from = size > (long)cap - 1 ? size - ((long)cap - 1) : 0;
        if (fseek(f, from, SEEK_SET) == 0) {
            size_t got = fread(out, 1, cap - 1, f);
            out[got] = '\0';
        }
    }
    fclose(f);
}

void testchild_await(pid_t *pid, const char *name, const char *log_path, testchild_ready_fn ready,
                     const void *ready_arg, int timeout_ms, int poll_ms)
{
    int64_t deadline = txo_monotonic_ms() + timeout_ms;
    for (;;) {
        int status = 0;
        if (waitpid(*pid, &status, WNOHANG) == *pid) {
            *pid = 0;
            char tail[LOG_TAIL_BYTES];
            log_tail(log_path, tail, sizeof(tail));
            fail_msg("%s exited at start-up with status %d; log %s:\n%s", name,
                     WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), log_path, tail);
        }
        if (ready(ready_arg))
            return;
        if (txo_monotonic_ms() > deadline) {
            testchild_end(pid, SIGKILL, 0);
            char tail[LOG_TAIL_BYTES];
            log_tail(log_path, tail, sizeof(tail));
            fail_msg("%s was not ready within %d ms; log %s:\n%s", name, timeout_ms, log_path,
                     tail);
        }
        txo_sleep_ms(poll_ms);
    }
}

bool testchild_port_answers(const void *port)
{
    return testproc_port_answers(*(const unsigned *)port);
}

void testchild_end(pid_t *pid, int sig, int timeout_ms)
{
    if (*pid <= 0)
        return;
    kill(*pid, sig);
    kill(*pid, SIGCONT);
    int64_t deadline = txo_monotonic_ms() + timeout_ms;
    for (;;) {
        pid_t w = waitpid(*pid, NULL, WNOHANG);
        if (w == *pid || (w < 0 && errno == ECHILD))
            break;
        if (sig != SIGKILL && txo_monotonic_ms() > deadline) {
            kill(*pid, SIGKILL);
            sig = SIGKILL;
        }
        txo_sleep_ms(END_POLL_MS);
    }
    *pid = 0;
}

void testchild_server_start(struct testchild_server *s, int stop_timeout_ms,
                            void (*respawn)(void *owner), void *owner)
{
    *s = (struct testchild_server){
        .stop_timeout_ms = stop_timeout_ms, .respawn = respawn, .owner = owner};
    respawn(owner);
}

void testchild_server_stop(struct testchild_server *s)
{
    testchild_end(&s->pid, SIGTERM, s->stop_timeout_ms);
}

void testchild_server_kill(struct testchild_server *s)
{
    testchild_end(&s->pid, SIGKILL, s->stop_timeout_ms);
}

static void signal_running(const struct testchild_server *s, int sig, const char *what)
{
    if (s->pid <= 0 || kill(s->pid, sig) != 0)
        fail_msg("%s: the server is not running", what);
}

void testchild_server_pause(struct testchild_server *s)
{
    signal_running(s, SIGSTOP, __func__);
}

void testchild_server_resume(struct testchild_server *s)
{
    signal_running(s, SIGCONT, __func__);
}

void testchild_server_restart(struct testchild_server *s)
{
    if (s->pid > 0)
        fail_msg("%s: the server is still running (pid %d)", __func__, (int)s->pid);
    s->respawn(s->owner);
}
