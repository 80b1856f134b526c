/*
 * Test support: a private RabbitMQ broker per test binary (see testrabbit.h); the process
 * mechanics are testchild's.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "testchild.h"
#include "testproc.h"
#include "testrabbit.h"
#include "testrun.h"
#include "txo/common.h"

#define READY_TIMEOUT_MS 120000 /* a cold boot on a busy 2-core machine takes 20 s and more */
#define READY_POLL_MS    100
#define STOP_TIMEOUT_MS  30000
#define EPMD_TIMEOUT_MS  10000
#define EPMD_POLL_MS     20
#define CLIENT_MAX_ARGS  16

static const char *find_in(const char *const *candidates)
{
    for (size_t i = 0; candidates[i] != NULL; i++) {
        if (access(candidates[i], X_OK) == 0)
            return candidates[i];
    }
    return NULL;
}

static const char *server_bin(void)
{
    const char *env = getenv("TXO_RABBITMQ_SERVER");
    if (env != NULL && env[0] != '\0')
        return access(env, X_OK) == 0 ? env : NULL;
    static const char *const c[] = {"/usr/lib/rabbitmq/bin/rabbitmq-server", NULL};
    return find_in(c);
}

static const char *epmd_bin(void)
{
    static const char *const c[] = {"/usr/bin/epmd", "/usr/lib/erlang/bin/epmd",
                                    "/usr/local/bin/epmd", NULL};
    return find_in(c);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0)
        fail_msg("writing %s: %s", path, strerror(errno));
}

/* setenv(name, the formatted value) */
TXO_PRINTF(2, 3) static void setenvf(const char *name, const char *fmt, ...)
{
    char v[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof(v), fmt, ap);
    va_end(ap);
    setenv(name, v, 1);
}

/* A testchild_setup_fn on the struct testrabbit: the broker's environment, set in its child. */
static void set_env(const void *arg)
{
    const struct testrabbit *r = arg;
    setenv("HOME", r->dir, 1);
    setenv("RABBITMQ_NODENAME", r->node, 1);
    setenvf("RABBITMQ_NODE_PORT", "%u", r->port);
    setenv("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1", 1);
    setenvf("RABBITMQ_DIST_PORT", "%u", r->dist_port);
    setenvf("ERL_EPMD_PORT", "%u", r->epmd_port);
    setenvf("RABBITMQ_MNESIA_BASE", "%s/mnesia", r->dir);
    setenvf("RABBITMQ_LOG_BASE", "%s/log", r->dir);
    setenvf("RABBITMQ_CONFIG_FILE", "%s/rabbitmq.conf", r->dir);
    setenvf("RABBITMQ_ENABLED_PLUGINS_FILE", "%s/enabled_plugins", r->dir);
    /* The script then execs the VM itself (no signal-forwarding shell in between), so our
     * child pid is the broker and SIGTERM is its clean shutdown. */
    setenv("RUNNING_UNDER_SYSTEMD", "1", 1);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("RABBITMQ_ALLOW_INPUT");
}

static void spawn_epmd(struct testrabbit *r)
{
    const char *bin = epmd_bin();
    if (bin == NULL)
        fail_msg("epmd not found (package erlang-base, pulled in by rabbitmq-server)");
    char port[16];
    snprintf(port, sizeof(port), "%u", r->epmd_port);
    const char *argv[] = {bin, "-port", port, "-address", "127.0.0.1", NULL};
    r->epmd_pid = testchild_spawn(argv, r->log_path, NULL, NULL);
    testchild_await(&r->epmd_pid, "epmd", r->log_path, testchild_port_answers, &r->epmd_port,
                    EPMD_TIMEOUT_MS, EPMD_POLL_MS);
}

static void spawn(void *owner)
{
    struct testrabbit *r = owner;
    const char *bin = server_bin();
    if (bin == NULL)
        fail_msg("rabbitmq-server not found (install the rabbitmq-server package, or set "
                 "TXO_RABBITMQ_SERVER to its path); the RabbitMQ tests need a real broker");
    const char *argv[] = {bin, NULL};
    r->srv.pid = testchild_spawn(argv, r->log_path, set_env, r);
    testchild_await(&r->srv.pid, "rabbitmq-server", r->log_path, testchild_port_answers, &r->port,
                    READY_TIMEOUT_MS, READY_POLL_MS);
}

void testrabbit_start(struct testrabbit *r)
{
    memset(r, 0, sizeof(*r));
    testchild_make_dir(r->dir, sizeof(r->dir), "txo-rabbit");
    snprintf(r->log_path, sizeof(r->log_path), "%s/server.log", r->dir);
    snprintf(r->node, sizeof(r->node), "txo-test-%d@localhost", (int)getpid());
    r->port = testproc_free_port();
    do {
        r->dist_port = testproc_free_port();
    } while (r->dist_port == r->port);
    do {
        r->epmd_port = testproc_free_port();
    } while (r->epmd_port == r->port || r->epmd_port == r->dist_port);
    snprintf(r->url, sizeof(r->url), "amqp://guest:guest@127.0.0.1:%u/", r->port);
    char path[400], conf[256];
    snprintf(path, sizeof(path), "%s/rabbitmq.conf", r->dir);
    snprintf(conf, sizeof(conf),
             "listeners.tcp.default = 127.0.0.1:%u\n"
             "log.console = true\n"
             "log.console.level = warning\n",
             r->port);
    write_file(path, conf);
    snprintf(path, sizeof(path), "%s/enabled_plugins", r->dir);
    write_file(path, "[].\n");
    spawn_epmd(r);
    testchild_server_start(&r->srv, STOP_TIMEOUT_MS, spawn, r);
}

void testrabbit_cleanup(struct testrabbit *r)
{
    testchild_server_stop(&r->srv);
    testchild_end(&r->epmd_pid, SIGTERM, STOP_TIMEOUT_MS);
    if (r->dir[0] != '\0' && getenv("TXO_TEST_KEEP_RABBIT") == NULL)
        testchild_remove_dir(r->dir);
    r->dir[0] = '\0';
}

/* ---- the independent client ---- */

static char *read_all(int fd)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    buf[n] = '\0';
    return buf;
}

/* rabbit_client.py "<cmd> <url> args[0..n)": its standard output, or the test fails. */
static char *run_client(const struct testrabbit *r, const char *cmd, const char *const *args,
                        size_t n_args)
{
    const char *python = getenv("TXO_PYTHON");
    if (python == NULL || python[0] == '\0')
        python = "/usr/bin/python3";
    char script[512];
    snprintf(script, sizeof(script), "%s/tests/support/rabbit_client.py", TXO_TEST_SOURCE_DIR);
    const char *argv[CLIENT_MAX_ARGS + 5] = {python, script, cmd, r->url};
    if (n_args > CLIENT_MAX_ARGS)
        fail_msg("testrabbit_client: too many arguments");
    memcpy(&argv[4], args, n_args * sizeof(*args));
    argv[4 + n_args] = NULL;

    char err_path[400];
    snprintf(err_path, sizeof(err_path), "%s/client.err", r->dir);
    int out[2];
    if (pipe(out) != 0)
        fail_msg("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(out[1], STDOUT_FILENO);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (e >= 0)
            dup2(e, STDERR_FILENO);
        close(out[0]);
        close(out[1]);
        execv(python, (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    char *text = read_all(out[0]);
    close(out[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char why[4096] = "";
        FILE *f = fopen(err_path, "r");
        if (f != NULL) {
            size_t got = fread(why, 1, sizeof(why) - 1, f);
            why[got] = '\0';
            fclose(f);
        }
        fail_msg("%s %s %s failed (status %d; python3-pika installed?): %s", python, script, cmd,
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1, why);
    }
    return text;
}

/* Appends the NULL-terminated va_list ap to args (n of cap used); returns the new count. */
static size_t take_args(const char **args, size_t n, size_t cap, va_list ap, const char *who)
{
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL) {
        if (n >= cap)
            fail_msg("%s: too many arguments", who);
        args[n++] = a;
    }
    return n;
}

char *testrabbit_client(const struct testrabbit *r, const char *cmd, ...)
{
    const char *args[CLIENT_MAX_ARGS];
    va_list ap;
    va_start(ap, cmd);
    size_t n = take_args(args, 0, CLIENT_MAX_ARGS, ap, "testrabbit_client");
    va_end(ap);
    return run_client(r, cmd, args, n);
}

/* Runs `rabbitmqctl -n <node> args[0..n_args)`; returns its output (free() it), *status its
 * exit status. */
static char *run_ctl(const struct testrabbit *r, const char *const *args, size_t n_args,
                     int *status)
{
    static const char *const c[] = {"/usr/lib/rabbitmq/bin/rabbitmqctl", NULL};
    const char *bin = find_in(c);
    if (bin == NULL)
        fail_msg("rabbitmqctl not found (package rabbitmq-server)");
    if (n_args > CLIENT_MAX_ARGS)
        fail_msg("rabbitmqctl: too many arguments");
    char home[300], epmd[40];
    snprintf(home, sizeof(home), "HOME=%s", r->dir); /* the broker's Erlang cookie */
    snprintf(epmd, sizeof(epmd), "ERL_EPMD_PORT=%u", r->epmd_port);
    const char *argv[CLIENT_MAX_ARGS + 7] = {"/usr/bin/env", home, epmd, bin, "-n", r->node};
    memcpy(&argv[6], args, n_args * sizeof(*args));
    argv[6 + n_args] = NULL;
    char *out = NULL;
    *status = testproc_run("rabbitmqctl", argv, 60000, &out);
    return out != NULL ? out : strdup("");
}

char *testrabbit_ctl(const struct testrabbit *r, ...)
{
    const char *args[CLIENT_MAX_ARGS];
    va_list ap;
    va_start(ap, r);
    size_t n = take_args(args, 0, CLIENT_MAX_ARGS, ap, "testrabbit_ctl");
    va_end(ap);
    int status = 0;
    char *out = run_ctl(r, args, n, &status);
    if (status != 0)
        fail_msg("rabbitmqctl %s exited with %d: %s", n > 0 ? args[0] : "", status, out);
    return out;
}

long testrabbit_count(const struct testrabbit *r, const char *queue)
{
    char *out = testrabbit_client(r, "count", queue, NULL);
    long v = strtol(out, NULL, 10);
    free(out);
    return v;
}

/* Copies line into out (size cap) without the ANSI colour sequences of the console log. */
static void strip_colours(const char *line, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = line; *p != '\0' && *p != '\n' && n + 1 < cap; p++) {
        if (*p == '\033') {
            while (*p != '\0' && *p != 'm')
                p++;
            if (*p == '\0')
                break;
            continue;
        }
        out[n++] = *p;
    }
    out[n] = '\0';
}

/*
 * Prints the last NOTABLE_MAX lines of the broker's log that say what happened to a queue in a
 * restart (a queue that crashed, was restarted, dropped messages, failed to recover): a crash
 * report is longer than any tail worth printing, and its first line is the one that names it.
 */
#define NOTABLE_MAX 24
static void print_notable(const char *path)
{
    static const char *const words[] = {"crash",       "Restarting", "dropped", "failed",
                                        "terminating", "Recovering", "discard"};
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    char ring[NOTABLE_MAX][320];
    size_t n = 0;
    char line[4096];
    while (fgets(line, sizeof(line), f) != NULL) {
        char plain[320];
        strip_colours(line, plain, sizeof(plain));
        for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
            if (strstr(plain, words[i]) != NULL) {
                memcpy(ring[n++ % NOTABLE_MAX], plain, sizeof(plain));
                break;
            }
        }
    }
    fclose(f);
    print_message("\n---- what the broker said about its queues (%zu lines, the last %d) ----\n", n,
                  NOTABLE_MAX);
    for (size_t i = n > NOTABLE_MAX ? n - NOTABLE_MAX : 0; i < n; i++)
        print_message("%s\n", ring[i % NOTABLE_MAX]);
}

void testrabbit_print_queues(const struct testrabbit *r, const char *const *queues,
                             const char *when)
{
    size_t n = 0;
    while (queues[n] != NULL)
        n++;
    char *out = run_client(r, "describe", queues, n);
    print_message("---- queues %s ----\n%s", when, out);
    free(out);
}

void testrabbit_print_view(const struct testrabbit *r)
{
    static const char *const views[][6] = {
        {"list_queues", "-q", "name", "messages_ready", "messages_unacknowledged", "consumers"},
        {"list_consumers", "-q", "queue_name", "channel_pid", "consumer_tag", "prefetch_count"},
        {"list_connections", "-q", "name", "state", "channels", "recv_cnt"},
        {"list_bindings", "-q", "source_name", "destination_name", "routing_key", "arguments"},
    };
    /* A listing that fails is shown as such: the report must not end the test on its own. */
    for (size_t i = 0; i < sizeof(views) / sizeof(views[0]); i++) {
        int status = 0;
        char *out = run_ctl(r, views[i], sizeof(views[i]) / sizeof(views[i][0]), &status);
        print_message("---- rabbitmqctl %s%s ----\n%s", views[i][0], status != 0 ? " (failed)" : "",
                      out);
        free(out);
    }
}

void testrabbit_print_state(const struct testrabbit *r, const char *const *queues)
{
    testrabbit_print_queues(r, queues, "now");
    testproc_print_tail(r->log_path, 1024);
    print_notable(r->log_path);
    testrabbit_print_view(r);
}

TESTRUN_SHARED_SERVER(testrabbit, testrabbit_start, testrabbit_cleanup)

void testrabbit_opts(struct txo_rabbitmq_opts *o, int64_t connect_timeout_ms,
                     int64_t confirm_timeout_ms)
{
    txo_rabbitmq_opts_init(o);
    o->url = testrabbit_shared.url;
    o->connect_timeout_ms = connect_timeout_ms;
    o->confirm_timeout_ms = confirm_timeout_ms;
}

struct txo_publisher *testrabbit_publisher(const struct txo_rabbitmq_opts *o)
{
    struct txo_publisher *pub = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_publisher_rabbitmq_new(o, NULL, &pub, &err) < 0)
        fail_msg("txo_publisher_rabbitmq_new: %s", err.msg);
    return pub;
}
