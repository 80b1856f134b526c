/*
 * Child processes for tests (testproc.h): fork + execve, logs in /tmp, polling readiness over
 * plain sockets (no HTTP library needed for a readiness probe).
 */
#define _DEFAULT_SOURCE
#include "testproc.h"

#include "txo/common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

extern char **environ;

const char *testproc_txo_bin(void)
{
    const char *bin = getenv("TXO_BIN");
    if (bin == NULL || bin[0] == '\0')
        fail_msg("TXO_BIN is not set (run the tests through ctest)");
    return bin;
}

const char *testproc_fake_bin(void)
{
    const char *bin = getenv("TXO_FAKE_BIN");
    if (bin == NULL || bin[0] == '\0')
        fail_msg("TXO_FAKE_BIN is not set (run the tests through ctest)");
    return bin;
}

/*
 * Ports for the servers tests start are taken below the kernel's ephemeral range (32768 and
 * up by default): a port that bind(0) handed out there is free a moment, then the kernel may
 * give it to any outgoing connection (a test's MariaDB session, say), and the server started
 * on it fails with EADDRINUSE.
 *
 * Tests run in parallel, and a port that is free now may be another test's: its server may
 * still be booting (a broker takes seconds to listen), or be down between a kill and its
 * restart on the same port. So the range is cut in blocks of PORT_BLOCK, and a process hands
 * out ports only from blocks it owns: it owns a block while it holds an flock on
 * PORT_LOCK_DIR/<first port> (the descriptor is closed on exec and the lock ends with the
 * process, a crash included). Each process starts at its own point of the range; within its
 * blocks a port is still handed out only when a bind to it succeeds (programs that are not
 * tests may hold one).
 */
#define PORT_FIRST    20000
#define PORT_COUNT    12000
#define PORT_BLOCK    16
#define PORT_LOCK_DIR "/tmp/txo-test-ports"

/* Takes the block of ports starting at first: true when this process now owns it. */
static bool own_block(unsigned first)
{
    char path[64];
    snprintf(path, sizeof(path), PORT_LOCK_DIR "/%u", first);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return false;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        return false;
    }
    return true; /* fd stays open: the lock is this process's until it ends */
}

unsigned testproc_free_port(void)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static unsigned next_block; /* the next block to try, counted from 1 */
    static unsigned port, left; /* the next port of the block owned last, ports left in it */
    const unsigned blocks = PORT_COUNT / PORT_BLOCK;
    pthread_mutex_lock(&mu);
    if (next_block == 0) {
        (void)mkdir(PORT_LOCK_DIR, 0777);
        (void)chmod(PORT_LOCK_DIR, 0777); /* whoever runs the next suite may take blocks */
        next_block = (unsigned)(getpid() * 7919u + (unsigned)time(NULL)) % blocks + 1;
    }
    for (unsigned tried = 0; tried <= blocks;) {
        while (left > 0) {
            unsigned p = port++;
            left--;
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            if (fd < 0) {
                pthread_mutex_unlock(&mu);
                fail_msg("socket: %s", strerror(errno));
            }
            struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p)};
            addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            int ok = bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0;
            close(fd);
            if (ok) {
                pthread_mutex_unlock(&mu);
                return p;
            }
        }
        unsigned first = PORT_FIRST + (next_block++ % blocks) * PORT_BLOCK;
        tried++;
        if (own_block(first)) {
            port = first;
            left = PORT_BLOCK;
        }
    }
    pthread_mutex_unlock(&mu);
    fail_msg("no free TCP port in %d..%d (blocks are owned through flocks in " PORT_LOCK_DIR ")",
             PORT_FIRST, PORT_FIRST + PORT_COUNT - 1);
    return 0;
}

void testproc_start(struct testproc *p, const char *tag, const char *const *argv,
                    const char *const *env_extra)
{
    static unsigned seq;
    memset(p, 0, sizeof(*p));
    snprintf(p->log_path, sizeof(p->log_path), "/tmp/txo_test_%s_%d_%u.log", tag, (int)getpid(),
             seq++);
    size_t n_env = 0;
    while (environ[n_env] != NULL)
        n_env++;
    size_t n_extra = 0;
    while (env_extra != NULL && env_extra[n_extra] != NULL)
        n_extra++;
    char **env = calloc(n_env + n_extra + 1, sizeof(*env));
    if (env == NULL)
        fail_msg("out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n_env; i++)
        env[k++] = environ[i];
    for (size_t i = 0; i < n_extra; i++)
        env[k++] = (char *)env_extra[i];
    env[k] = NULL;

    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open(p->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execve(argv[0], (char *const *)argv, env);
        _exit(127);
    }
    free(env);
    p->pid = pid;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int connect_port(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

bool testproc_port_answers(unsigned port)
{
    int fd = connect_port(port);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

bool testproc_wait_port(unsigned port, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    do {
        if (testproc_port_answers(port))
            return true;
        usleep(20000);
    } while (now_ms() < deadline);
    return false;
}

/* One GET; true on a 200 status line. */
static bool http_ok(unsigned port, const char *path)
{
    int fd = connect_port(port);
    if (fd < 0)
        return false;
    struct timeval tv = {.tv_sec = 2, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
    bool ok = false;
    if (write(fd, req, (size_t)n) == n) {
        char buf[64] = {0};
        ssize_t got = read(fd, buf, sizeof(buf) - 1);
        ok = got > 12 && strncmp(buf, "HTTP/1.1 200", 12) == 0;
    }
    close(fd);
    return ok;
}

bool testproc_wait_http(unsigned port, const char *path, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    do {
        if (http_ok(port, path))
            return true;
        usleep(50000);
    } while (now_ms() < deadline);
    return false;
}

void testproc_signal(struct testproc *p, int sig)
{
    if (p->pid > 0)
        kill(p->pid, sig);
}

/* True when some line of text starts like a txo log line, logfmt or JSON. */
static bool has_log_lines(const char *text)
{
    for (const char *line = text; line != NULL && *line != '\0';) {
        if (strncmp(line, "ts=", 3) == 0 || strncmp(line, "{\"ts\"", 5) == 0)
            return true;
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    return false;
}

/*
 * Every log line a child wrote must read back with parsers that are not txo's (npm logfmt,
 * node's JSON.parse): tests/js/check_logs.mjs checks it once the child is gone, so each test
 * that runs `txo` checks what its daemons logged, in whichever format they were told.
 */
static void check_log_lines(const struct testproc *p)
{
    const char *js_dir = getenv("TXO_JS_DIR");
    if (js_dir == NULL || p->log_path[0] == '\0')
        return;
    char *log = testproc_log(p);
    bool any = has_log_lines(log);
    free(log);
    if (!any)
        return;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "node %s/check_logs.mjs %s 2>&1", js_dir, p->log_path);
    FILE *f = popen(cmd, "r");
    if (f == NULL)
        fail_msg("popen %s: %s", cmd, strerror(errno));
    char out[4096];
    size_t n = fread(out, 1, sizeof(out) - 1, f);
    out[n] = '\0';
    int rc = pclose(f);
    if (rc != 0)
        fail_msg("log lines of %s that a logfmt or JSON parser rejects:\n%s", p->log_path, out);
}

bool testproc_wait(struct testproc *p, int timeout_ms)
{
    if (p->pid <= 0)
        return true;
    int64_t deadline = now_ms() + timeout_ms;
    for (;;) {
        pid_t r = waitpid(p->pid, &p->status, WNOHANG);
        if (r == p->pid) {
            p->pid = 0;
            check_log_lines(p);
            return true;
        }
        if (now_ms() >= deadline)
            return false;
        usleep(10000);
    }
}

bool testproc_killed(const struct testproc *p)
{
    return p->pid == 0 && WIFSIGNALED(p->status) && WTERMSIG(p->status) == SIGKILL;
}

bool testproc_exited_with(const struct testproc *p, int code)
{
    return p->pid == 0 && WIFEXITED(p->status) && WEXITSTATUS(p->status) == code;
}

void testproc_stop_hard(struct testproc *p)
{
    if (p->pid <= 0)
        return;
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &p->status, 0);
    p->pid = 0;
    check_log_lines(p);
}

bool testproc_stop(struct testproc *p, int timeout_ms)
{
    if (p->pid <= 0)
        return false;
    kill(p->pid, SIGTERM);
    if (!testproc_wait(p, timeout_ms)) {
        testproc_stop_hard(p);
        return false;
    }
    return testproc_exited_with(p, 0);
}

char *testproc_log(const struct testproc *p)
{
    FILE *f = fopen(p->log_path, "rb");
    if (f == NULL)
        return strdup("");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)(size > 0 ? size : 0) + 1);
    size_t got = buf != NULL && size > 0 ? fread(buf, 1, (size_t)size, f) : 0;
    if (buf != NULL)
        buf[got] = '\0';
    fclose(f);
    return buf;
}

void testproc_print_file(const char *path, const char *prefix)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    char line[1024];
    while (fgets(line, sizeof(line), f) != NULL)
        print_message("%s%s", prefix, line);
    fclose(f);
}

void testproc_print_tail(const char *path, size_t max)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return;
    char *tail = malloc(max + 1);
    if (tail != NULL) {
        if (fseek(f, -(long)max, SEEK_END) != 0)
            rewind(f); /* shorter than max */
        size_t got = fread(tail, 1, max, f);
        tail[got] = '\0';
        print_message("---- %s (last %zu bytes) ----\n%s\n", path, got, tail);
        free(tail);
    }
    fclose(f);
}

void testproc_print_log(const struct testproc *p, const char *what)
{
    char *log = testproc_log(p);
    print_message("---- log of %s (%s) ----\n%s---- end of log ----\n", what, p->log_path,
                  log != NULL ? log : "");
    free(log);
}

void testproc_remove_log(const struct testproc *p)
{
    unlink(p->log_path);
}

int testproc_run(const char *tag, const char *const *argv, int timeout_ms, char **out)
{
    struct testproc p;
    testproc_start(&p, tag, argv, NULL);
    if (!testproc_wait(&p, timeout_ms)) {
        testproc_stop_hard(&p);
        fail_msg("%s did not finish within %d ms", argv[0], timeout_ms);
    }
    *out = testproc_log(&p);
    testproc_remove_log(&p);
    if (testproc_exited_with(&p, 0))
        return 0;
    return WIFEXITED(p.status) ? WEXITSTATUS(p.status) : -1;
}

int testproc_run_txo(const char *tag, const char *const *args, int timeout_ms, char **out)
{
    const char *argv[32] = {testproc_txo_bin()};
    size_t n = 1;
    while (args[n - 1] != NULL) {
        if (n == sizeof(argv) / sizeof(argv[0]) - 1)
            fail_msg("testproc_run_txo: more than %zu arguments", n - 1);
        argv[n] = args[n - 1];
        n++;
    }
    argv[n] = NULL;
    return testproc_run(tag, argv, timeout_ms, out);
}

pid_t testproc_spawn_txo(const char *const *lead, const char *const *args, const char *out_path,
                         const char *err_path, bool append)
{
    const char *bin = testproc_txo_bin();
    char *argv[32];
    size_t n = 0;
    argv[n++] = (char *)bin;
    const char *const *parts[] = {lead, args};
    for (size_t k = 0; k < 2; k++)
        for (size_t i = 0; parts[k] != NULL && parts[k][i] != NULL; i++) {
            if (n == TXO_ARRAY_LEN(argv) - 1)
                fail_msg("testproc_spawn_txo: more than %zu arguments", TXO_ARRAY_LEN(argv) - 2);
            argv[n++] = (char *)parts[k][i];
        }
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int mode = O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC);
        int o = open(out_path, mode, 0644);
        int e = open(err_path, mode, 0644);
        int in = open("/dev/null", O_RDONLY);
        if (o < 0 || e < 0 || in < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 || dup2(in, 0) < 0)
            _exit(127);
        execv(bin, argv);
        _exit(127);
    }
    return pid;
}

int testproc_wait_pid(pid_t pid)
{
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

void testproc_io_paths(char out[256], char errf[256], const char *prefix, const char *tag)
{
    char name[96];
    snprintf(name, sizeof(name), "%s_out", tag);
    testproc_temp_path(out, 256, prefix, name);
    snprintf(name, sizeof(name), "%s_err", tag);
    testproc_temp_path(errf, 256, prefix, name);
    unlink(out);
    unlink(errf);
}

void testproc_read_text(const char *path, char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    size_t len = fread(buf, 1, cap - 1, f);
    buf[len] = '\0';
    fclose(f);
}

void testproc_temp_path(char *buf, size_t cap, const char *prefix, const char *name)
{
    const char *dir = getenv("TMPDIR");
    snprintf(buf, cap, "%s/%s_%ld_%s", dir != NULL && dir[0] != '\0' ? dir : "/tmp", prefix,
             (long)getpid(), name);
}
