/*
 * Test support: a private nats-server per test (see testnats.h).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <nats/nats.h>

#include "testnats.h"

#define READY_TIMEOUT_MS 5000
#define STOP_TIMEOUT_MS  10000

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

/* The nats-server binary, or NULL. */
static const char *find_server(char *buf, size_t cap)
{
    const char *env = getenv("TXO_NATS_SERVER");
    if (env != NULL && env[0] != '\0')
        return access(env, X_OK) == 0 ? env : NULL;
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof(dirs), "%s:/usr/sbin:/usr/bin:/usr/local/bin:/usr/local/sbin",
             path != NULL ? path : "");
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d != NULL; d = strtok_r(NULL, ":", &save)) {
        if (d[0] == '\0')
            continue;
        snprintf(buf, cap, "%s/nats-server", d);
        if (access(buf, X_OK) == 0)
            return buf;
    }
    return NULL;
}

/* A port that was free a moment ago (the kernel picks it). */
static unsigned free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        fail_msg("socket: %s", strerror(errno));
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof(a);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        int e = errno;
        close(fd);
        fail_msg("finding a free port: %s", strerror(e));
    }
    close(fd);
    return ntohs(a.sin_port);
}

static bool port_answers(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

/* The last bytes of the server log, for failure messages. */
static void log_tail(const struct testnats *n, char *out, size_t cap)
{
    out[0] = '\0';
    FILE *f = fopen(n->log_path, "r");
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

static void spawn(struct testnats *n)
{
    char found[512];
    const char *bin = find_server(found, sizeof(found));
    if (bin == NULL)
        fail_msg("nats-server not found (install the nats-server package, or set "
                 "TXO_NATS_SERVER to its path); the NATS tests need a real server");
    char port[16];
    snprintf(port, sizeof(port), "%u", n->port);
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        /* The child: the server dies with the test, even when the test crashes. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int log = open(n->log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        int devnull = open("/dev/null", O_RDONLY);
        if (log >= 0) {
            dup2(log, STDOUT_FILENO);
            dup2(log, STDERR_FILENO);
        }
        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        char *argv[] = {(char *)bin,         (char *)"-js", (char *)"-a",
                        (char *)"127.0.0.1", (char *)"-p",  port,
                        (char *)"-sd",       n->store_dir,  NULL};
        execv(bin, argv);
        _exit(127);
    }
    n->pid = pid;

    long deadline = now_ms() + READY_TIMEOUT_MS;
    for (;;) {
        int status = 0;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            n->pid = 0;
            char tail[2048];
            log_tail(n, tail, sizeof(tail));
            fail_msg("nats-server (%s) exited at start-up with status %d; log:\n%s", bin,
                     WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), tail);
        }
        if (port_answers(n->port))
            return;
        if (now_ms() > deadline) {
            testnats_kill(n);
            char tail[2048];
            log_tail(n, tail, sizeof(tail));
            fail_msg("nats-server did not answer on port %u within %d ms; log:\n%s", n->port,
                     READY_TIMEOUT_MS, tail);
        }
        sleep_ms(10);
    }
}

void testnats_start(struct testnats *n)
{
    memset(n, 0, sizeof(*n));
    const char *tmp = getenv("TMPDIR");
    snprintf(n->dir, sizeof(n->dir), "%s/txo-nats-XXXXXX",
             tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    if (mkdtemp(n->dir) == NULL)
        fail_msg("mkdtemp %s: %s", n->dir, strerror(errno));
    snprintf(n->store_dir, sizeof(n->store_dir), "%s/store", n->dir);
    snprintf(n->log_path, sizeof(n->log_path), "%s/server.log", n->dir);
    if (mkdir(n->store_dir, 0755) != 0)
        fail_msg("mkdir %s: %s", n->store_dir, strerror(errno));
    n->port = free_port();
    snprintf(n->url, sizeof(n->url), "nats://127.0.0.1:%u", n->port);
    spawn(n);
}

static void end(struct testnats *n, int sig)
{
    if (n->pid <= 0)
        return;
    kill(n->pid, sig);
    kill(n->pid, SIGCONT); /* a paused server must run to handle SIGTERM */
    long deadline = now_ms() + STOP_TIMEOUT_MS;
    for (;;) {
        pid_t r = waitpid(n->pid, NULL, WNOHANG);
        if (r == n->pid || (r < 0 && errno == ECHILD))
            break;
        if (now_ms() > deadline && sig != SIGKILL) {
            kill(n->pid, SIGKILL);
            sig = SIGKILL;
        }
        sleep_ms(5);
    }
    n->pid = 0;
}

void testnats_stop(struct testnats *n)
{
    end(n, SIGTERM);
}

void testnats_kill(struct testnats *n)
{
    end(n, SIGKILL);
}

void testnats_pause(struct testnats *n)
{
    if (n->pid <= 0 || kill(n->pid, SIGSTOP) != 0)
        fail_msg("testnats_pause: the server is not running");
}

void testnats_resume(struct testnats *n)
{
    if (n->pid <= 0 || kill(n->pid, SIGCONT) != 0)
        fail_msg("testnats_resume: the server is not running");
}

void testnats_restart(struct testnats *n)
{
    if (n->pid > 0)
        fail_msg("testnats_restart: the server is still running (pid %d)", (int)n->pid);
    spawn(n);
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

void testnats_cleanup(struct testnats *n)
{
    testnats_stop(n);
    if (n->dir[0] != '\0' && getenv("TXO_TEST_KEEP_NATS") == NULL)
        remove_tree(n->dir);
    n->dir[0] = '\0';
}

/* ---- inspection through cnats ---- */

struct js_conn {
    natsConnection *nc;
    jsCtx *js;
};

static struct js_conn js_connect(const struct testnats *n)
{
    struct js_conn c = {NULL, NULL};
    /* A cluster's comma-separated list goes to cnats as an array: cnats 3.4 cannot connect to
     * a list given as one string. */
    char copy[sizeof(n->url)];
    snprintf(copy, sizeof(copy), "%s", n->url);
    const char *servers[8];
    int n_servers = 0;
    char *save = NULL;
    for (char *u = strtok_r(copy, ",", &save); u != NULL && n_servers < 8;
         u = strtok_r(NULL, ",", &save))
        servers[n_servers++] = u;
    natsOptions *opts = NULL;
    natsStatus s = natsOptions_Create(&opts);
    if (s == NATS_OK)
        s = natsOptions_SetServers(opts, servers, n_servers);
    if (s == NATS_OK)
        s = natsConnection_Connect(&c.nc, opts);
    natsOptions_Destroy(opts);
    if (s == NATS_OK)
        s = natsConnection_JetStream(&c.js, c.nc, NULL);
    if (s != NATS_OK)
        fail_msg("connecting to %s: %s", n->url, natsStatus_GetText(s));
    return c;
}

static void js_close(struct js_conn *c)
{
    jsCtx_Destroy(c->js);
    natsConnection_Destroy(c->nc);
}

uint64_t testnats_stream_msgs(const struct testnats *n, const char *stream)
{
    struct js_conn c = js_connect(n);
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, c.js, stream, NULL, &jerr);
    if (s != NATS_OK) {
        js_close(&c);
        fail_msg("stream info %s: %s (JetStream error %d)", stream, natsStatus_GetText(s),
                 (int)jerr);
    }
    uint64_t msgs = si->State.Msgs;
    jsStreamInfo_Destroy(si);
    js_close(&c);
    return msgs;
}

size_t testnats_stream_msg_ids(const struct testnats *n, const char *stream, char ***ids)
{
    struct js_conn c = js_connect(n);
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, c.js, stream, NULL, &jerr);
    if (s != NATS_OK) {
        js_close(&c);
        fail_msg("stream info %s: %s (JetStream error %d)", stream, natsStatus_GetText(s),
                 (int)jerr);
    }
    uint64_t first = si->State.FirstSeq, last = si->State.LastSeq, msgs = si->State.Msgs;
    jsStreamInfo_Destroy(si);
    char **out = calloc(msgs > 0 ? msgs : 1, sizeof(*out));
    assert_non_null(out);
    size_t count = 0;
    for (uint64_t seq = first; msgs > 0 && seq <= last && count < msgs; seq++) {
        natsMsg *m = NULL;
        jerr = 0;
        s = js_GetMsg(&m, c.js, stream, seq, NULL, &jerr);
        if (s == NATS_NOT_FOUND || jerr == JSNoMessageFoundErr)
            continue; /* a deleted sequence */
        if (s != NATS_OK) {
            js_close(&c);
            fail_msg("get message %llu of %s: %s", (unsigned long long)seq, stream,
                     natsStatus_GetText(s));
        }
        const char *id = NULL;
        if (natsMsgHeader_Get(m, "Nats-Msg-Id", &id) == NATS_OK && id != NULL) {
            out[count] = strdup(id);
            assert_non_null(out[count]);
        }
        count++;
        natsMsg_Destroy(m);
    }
    js_close(&c);
    *ids = out;
    return count;
}

void testnats_stream_msg(const struct testnats *n, const char *stream, uint64_t seq,
                         const char *name, char **value, char **data)
{
    struct js_conn c = js_connect(n);
    natsMsg *m = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetMsg(&m, c.js, stream, seq, NULL, &jerr);
    if (s != NATS_OK) {
        js_close(&c);
        fail_msg("get message %llu of %s: %s (JetStream error %d)", (unsigned long long)seq, stream,
                 natsStatus_GetText(s), (int)jerr);
    }
    const char *v = NULL;
    *value = natsMsgHeader_Get(m, name, &v) == NATS_OK && v != NULL ? strdup(v) : NULL;
    if (data != NULL) {
        int len = natsMsg_GetDataLength(m);
        *data = strndup(natsMsg_GetData(m) != NULL ? natsMsg_GetData(m) : "",
                        len > 0 ? (size_t)len : 0);
        assert_non_null(*data);
    }
    natsMsg_Destroy(m);
    js_close(&c);
}

void testnats_free_ids(char **ids, size_t count)
{
    for (size_t i = 0; i < count; i++)
        free(ids[i]);
    free(ids);
}

void testnats_delete_stream(const struct testnats *n, const char *stream)
{
    struct js_conn c = js_connect(n);
    jsErrCode jerr = 0;
    natsStatus s = js_DeleteStream(c.js, stream, NULL, &jerr);
    js_close(&c);
    if (s != NATS_OK && s != NATS_NOT_FOUND && jerr != JSStreamNotFoundErr)
        fail_msg("deleting stream %s: %s (JetStream error %d)", stream, natsStatus_GetText(s),
                 (int)jerr);
}

static jsConsumerInfo *consumer_info(const struct testnats *n, const char *stream,
                                     const char *durable, bool must_exist)
{
    struct js_conn c = js_connect(n);
    jsConsumerInfo *ci = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetConsumerInfo(&ci, c.js, stream, durable, NULL, &jerr);
    js_close(&c);
    if (s == NATS_OK)
        return ci;
    if ((s == NATS_NOT_FOUND || jerr == JSConsumerNotFoundErr) && !must_exist)
        return NULL;
    fail_msg("consumer info %s/%s: %s (JetStream error %d)", stream, durable, natsStatus_GetText(s),
             (int)jerr);
    return NULL;
}

bool testnats_consumer_exists(const struct testnats *n, const char *stream, const char *durable)
{
    jsConsumerInfo *ci = consumer_info(n, stream, durable, false);
    jsConsumerInfo_Destroy(ci);
    return ci != NULL;
}

int64_t testnats_consumer_ack_pending(const struct testnats *n, const char *stream,
                                      const char *durable)
{
    jsConsumerInfo *ci = consumer_info(n, stream, durable, true);
    int64_t v = ci->NumAckPending;
    jsConsumerInfo_Destroy(ci);
    return v;
}
