/*
 * Test support: a private redis-server per test binary (see testredis.h).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "testproc.h"
#include "testredis.h"

#define READY_TIMEOUT_MS 5000
#define STOP_TIMEOUT_MS  10000
#define CLI_TIMEOUT_MS   30000

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The binary named by env, or name on PATH / the usual directories; NULL when missing. */
static const char *find_bin(const char *env, const char *name, char *buf, size_t cap)
{
    const char *v = getenv(env);
    if (v != NULL && v[0] != '\0')
        return access(v, X_OK) == 0 ? v : NULL;
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof(dirs), "%s:/usr/bin:/usr/sbin:/usr/local/bin", path != NULL ? path : "");
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

static const char *cli_bin(void)
{
    static char buf[512];
    const char *bin = find_bin("TXO_REDIS_CLI", "redis-cli", buf, sizeof(buf));
    if (bin == NULL)
        fail_msg("redis-cli not found (install the redis-tools package, or set TXO_REDIS_CLI); "
                 "the Redis tests read the streams with it");
    return bin;
}

static void log_tail(const struct testredis *r, char *out, size_t cap)
{
    out[0] = '\0';
    FILE *f = fopen(r->log_path, "r");
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

/* True when PING answers PONG (not LOADING, not refused). */
static bool answers_pong(const struct testredis *r)
{
    char port[16];
    snprintf(port, sizeof(port), "%u", r->port);
    const char *argv[] = {cli_bin(), "-h", "127.0.0.1", "-p", port, "PING", NULL};
    char *out = NULL;
    int st = testproc_run("redis-cli-ping", argv, CLI_TIMEOUT_MS, &out);
    bool ok = st == 0 && out != NULL && strncmp(out, "PONG", 4) == 0;
    free(out);
    return ok;
}

static void spawn(struct testredis *r)
{
    char found[512];
    const char *bin = find_bin("TXO_REDIS_SERVER", "redis-server", found, sizeof(found));
    if (bin == NULL)
        fail_msg("redis-server not found (install the redis-server package, or set "
                 "TXO_REDIS_SERVER); the Redis tests need a real server");
    char port[16];
    snprintf(port, sizeof(port), "%u", r->port);
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* the server dies with the test */
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, STDIN_FILENO);
            dup2(devnull, STDOUT_FILENO);
        }
        char *argv[] = {(char *)bin,
                        (char *)"--port",
                        port,
                        (char *)"--bind",
                        (char *)"127.0.0.1",
                        (char *)"--dir",
                        r->dir,
                        (char *)"--appendonly",
                        (char *)"yes",
                        (char *)"--appendfsync",
                        (char *)"always",
                        (char *)"--save",
                        (char *)"",
                        (char *)"--daemonize",
                        (char *)"no",
                        (char *)"--logfile",
                        r->log_path,
                        NULL};
        execv(bin, argv);
        _exit(127);
    }
    r->pid = pid;
    long deadline = now_ms() + READY_TIMEOUT_MS;
    for (;;) {
        int status = 0;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            r->pid = 0;
            char tail[2048];
            log_tail(r, tail, sizeof(tail));
            fail_msg("redis-server (%s) exited at start-up with status %d; log:\n%s", bin,
                     WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), tail);
        }
        if (answers_pong(r))
            return;
        if (now_ms() > deadline) {
            testredis_kill(r);
            char tail[2048];
            log_tail(r, tail, sizeof(tail));
            fail_msg("redis-server did not answer PONG on port %u within %d ms; log:\n%s", r->port,
                     READY_TIMEOUT_MS, tail);
        }
        sleep_ms(20);
    }
}

void testredis_start(struct testredis *r)
{
    memset(r, 0, sizeof(*r));
    const char *tmp = getenv("TMPDIR");
    snprintf(r->dir, sizeof(r->dir), "%s/txo-redis-XXXXXX",
             tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    if (mkdtemp(r->dir) == NULL)
        fail_msg("mkdtemp %s: %s", r->dir, strerror(errno));
    snprintf(r->log_path, sizeof(r->log_path), "%s/server.log", r->dir);
    r->port = testproc_free_port();
    snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%u/0", r->port);
    spawn(r);
}

static void end(struct testredis *r, int sig)
{
    if (r->pid <= 0)
        return;
    kill(r->pid, sig);
    kill(r->pid, SIGCONT); /* a paused server must run to handle SIGTERM */
    long deadline = now_ms() + STOP_TIMEOUT_MS;
    for (;;) {
        pid_t w = waitpid(r->pid, NULL, WNOHANG);
        if (w == r->pid || (w < 0 && errno == ECHILD))
            break;
        if (now_ms() > deadline && sig != SIGKILL) {
            kill(r->pid, SIGKILL);
            sig = SIGKILL;
        }
        sleep_ms(5);
    }
    r->pid = 0;
}

void testredis_stop(struct testredis *r)
{
    end(r, SIGTERM);
}

void testredis_kill(struct testredis *r)
{
    end(r, SIGKILL);
}

void testredis_pause(struct testredis *r)
{
    if (r->pid <= 0 || kill(r->pid, SIGSTOP) != 0)
        fail_msg("testredis_pause: the server is not running");
}

void testredis_resume(struct testredis *r)
{
    if (r->pid <= 0 || kill(r->pid, SIGCONT) != 0)
        fail_msg("testredis_resume: the server is not running");
}

void testredis_restart(struct testredis *r)
{
    if (r->pid > 0)
        fail_msg("testredis_restart: the server is still running (pid %d)", (int)r->pid);
    spawn(r);
}

static void remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d != NULL) {
            struct dirent *e;
            while ((e = readdir(d)) != NULL) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                    continue;
                char child[1024];
                snprintf(child, sizeof(child), "%s/%s", path, e->d_name);
                remove_tree(child);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

void testredis_cleanup(struct testredis *r)
{
    testredis_stop(r);
    if (r->dir[0] != '\0')
        remove_tree(r->dir);
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
