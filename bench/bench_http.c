/*
 * txo_bench http: the order service end to end through its HTTP API, as a client sees it
 * (target: >= 1,000 orders/s end to end on 2 cores; commit->publish p99 <= 50 ms at half the
 * end-to-end load).
 *
 * What one run does:
 *   1. a fresh database txo_bench_<pid>_http (dropped and created again each run), migrated by
 *      the txo under test (`txo migrate`: each build on its own schema), with HTTP_NUM_SKUS
 *      SKUs of HTTP_STOCK_PER_SKU units;
 *   2. `txo up` as a child process against it (--log-level warn, a free port; with --broker X
 *      also a private broker X, started fresh for the run by scripts/broker.sh, whose flags
 *      it is given), ready when GET /healthz answers 200;
 *   3. load: `connections` threads, each with its own kept-alive txo_http_client, POST
 *      /orders with a unique Idempotency-Key as fast as they can until `orders` were accepted
 *      (201), each POST's latency recorded (retries of transient failures included);
 *   4. waits (polling every HTTP_POLL_MS) until every order is CONFIRMED and the relay has
 *      published every event (the later saga events trail the confirmations), and gives up
 *      when the count did not move for HTTP_STALL_S;
 *   5. figures: accepted orders/s (POST phase), end-to-end orders/s = orders / (first POST
 *      start .. orders.updated_at of the last CONFIRMED order), POST latency, and from SQL
 *      per OrderCreated: commit->publish (outbox published_at - created_at; none with
 *      `--up-args "--source binlog"`, which writes no published_at), commit->consumed
 *      (the worker's inbox_events.processed_at - outbox created_at; with the local broker the
 *      relay marks a row PUBLISHED only after its whole batch was dispatched, so this is when
 *      the event really arrived) and POST->CONFIRMED (orders updated_at - created_at); at half
 *      load also commit->publish as the relay measures it, with either source (its
 *      txo_outbox_publish_delay_seconds histogram from txo up's GET /metrics, before and after
 *      the phase, every event type, interpolated within its buckets; with local dispatch it
 *      runs until the handler returned); and
 *      where the time went: CPU of txo, mariadbd, the broker and this bench (/proc), the rest
 *      of the machine's busy time ("other": the kernel, other processes), and the server's
 *      statement and commit counters (information_schema.GLOBAL_STATUS), per order. One idle
 *      second before the load measures the statements/s the server sees without it (txo up's
 *      own polling plus any other client: the noise in those counters);
 *   6. half load: paced open-loop arrivals at half the measured end-to-end rate for
 *      HTTP_HALF_LOAD_S seconds (order j is due at t0 + j / rate on connection j % connections;
 *      a connection still busy sends as soon as it can and its latency counts from the due
 *      time), then the same latencies of those orders only;
 *   7. checks (or the bench fails): every order CONFIRMED and its saga COMPLETED, one
 *      OrderCreated per order, all PUBLISHED (or, with a binlog source, published through its
 *      high-water id); then SIGTERM to `txo up`, which must exit 0,
 *      and the broker is stopped.
 * Medians over the runs are printed per broker.
 *
 * Times: the POST phase and latencies use CLOCK_MONOTONIC; the end-to-end window starts at
 * CLOCK_REALTIME of the first POST and ends at MAX(orders.updated_at), which the server wrote
 * with NOW(6) in a UTC session (every txo session sets time_zone '+00:00'), so the server must
 * run on this machine for that figure to mean anything (the CPU split needs that too).
 *
 * Children: started with fork + execve from the main thread while no other bench thread runs,
 * every inherited descriptor above stderr closed, output to a log file in a temporary
 * directory (printed in part when a child fails; kept with --keep).
 *
 * Threads: the load threads share the struct http_load (read-only but for the atomic order
 * counter and error flag, and their own slots of lat_ms) and the two start barriers.
 */
#define _XOPEN_SOURCE 700
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "orders.h"
#include "txo/http_client.h"

#define HTTP_NUM_SKUS       8
#define HTTP_STOCK_PER_SKU  1000000000
#define HTTP_HALF_LOAD_S    5.0
#define HTTP_POLL_MS        50
#define HTTP_STALL_S        60
#define HTTP_READY_MS       30000
#define HTTP_STOP_MS        60000
#define HTTP_POST_ATTEMPTS  5
#define HTTP_POST_TIMEOUT   60000
#define HTTP_LATE_S         0.010
#define HTTP_MAX_ARGS       512 /* argv or environment entries of a child */
#define HTTP_LOG_TAIL_BYTES 4096

/*
 * Statements of the http bench. All run on the bench's own connection while `txo up` works;
 * they lock nothing (plain consistent reads). The id bounds select the orders and events of
 * one phase (ids grow with time: AUTO_INCREMENT).
 */
/* PRIMARY range scan from the bound, status checked on the row. */
#define HTTP_SQL_CONFIRMED "SELECT COUNT(*) FROM orders WHERE id > ? AND status = 'CONFIRMED'"
/* The same range: the last confirmation, microseconds since the epoch (UTC session). */
#define HTTP_SQL_LAST_CONFIRMED_US                                                                 \
    "SELECT COALESCE(CAST(UNIX_TIMESTAMP(MAX(updated_at)) * 1000000 AS SIGNED), 0) "               \
    "FROM orders WHERE id > ? AND status = 'CONFIRMED'"
/* PRIMARY range of outbox_events: commit->publish of each OrderCreated, microseconds. */
#define HTTP_SQL_PUBLISH_US                                                                        \
    "SELECT TIMESTAMPDIFF(MICROSECOND, created_at, published_at) FROM outbox_events "              \
    "WHERE id > ? AND event_type = 'OrderCreated' AND published_at IS NOT NULL"
/* The same range, each OrderCreated joined to its inbox row (PRIMARY event_id = the event's
 * idempotency key): commit -> consumed (the worker's inbox insert), microseconds. */
#define HTTP_SQL_CONSUME_US                                                                        \
    "SELECT TIMESTAMPDIFF(MICROSECOND, o.created_at, i.processed_at) FROM outbox_events o "        \
    "JOIN inbox_events i ON i.event_id = o.idempotency_key "                                       \
    "WHERE o.id > ? AND o.event_type = 'OrderCreated'"
/* PRIMARY range of orders: POST (insert) -> CONFIRMED (last update), microseconds. */
#define HTTP_SQL_CONFIRM_US                                                                        \
    "SELECT TIMESTAMPDIFF(MICROSECOND, created_at, updated_at) FROM orders "                       \
    "WHERE id > ? AND status = 'CONFIRMED'"
/* The end of the PRIMARY index. */
#define HTTP_SQL_MAX_ORDER "SELECT COALESCE(MAX(id), 0) FROM orders"
#define HTTP_SQL_MAX_EVENT "SELECT COALESCE(MAX(id), 0) FROM outbox_events"
/* Checks after a run: full scans. */
#define HTTP_SQL_ORDERS_ALL           "SELECT COUNT(*) FROM orders"
#define HTTP_SQL_ORDERS_NOT_CONFIRMED "SELECT COUNT(*) FROM orders WHERE status <> 'CONFIRMED'"
#define HTTP_SQL_SAGAS_COMPLETED                                                                   \
    "SELECT COUNT(*) FROM saga_instances "                                                         \
    "WHERE status = 'COMPLETED'"
#define HTTP_SQL_CREATED_ALL                                                                       \
    "SELECT COUNT(*) FROM outbox_events "                                                          \
    "WHERE event_type = 'OrderCreated'"
/* With `--source binlog` published rows stay PENDING: those at or below the id the source
 * published through (txo_binlog_published_through(): the smallest stored high-water id; no
 * source, 0) count as published. */
#define HTTP_SQL__PUBLISHED_THROUGH                                                                \
    "(SELECT COALESCE(MIN(high_water_id), 0) FROM outbox_binlog_sources "                          \
    "WHERE binlog_file IS NOT NULL)"
#define HTTP_SQL_CREATED_NOT_PUBLISHED                                                             \
    "SELECT COUNT(*) FROM outbox_events WHERE event_type = 'OrderCreated' AND status <> "          \
    "'PUBLISHED' AND NOT (status = 'PENDING' AND id <= " HTTP_SQL__PUBLISHED_THROUGH ")"
/* Events the relay has still to publish: the PENDING and PROCESSING ranges of idx_outbox_due
 * (above what a binlog source published through). */
#define HTTP_SQL_NOT_PUBLISHED                                                                     \
    "SELECT COUNT(*) FROM outbox_events WHERE status IN ('PENDING', 'PROCESSING') AND "            \
    "id > " HTTP_SQL__PUBLISHED_THROUGH
/* Outbox rows of the phase (all event types), PRIMARY range. */
#define HTTP_SQL_EVENTS_AFTER "SELECT COUNT(*) FROM outbox_events WHERE id > ?"
/* Server-wide counters (information_schema, in memory; no locks). */
#define HTTP_SQL_STATUS                                                                            \
    "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE "            \
    "VARIABLE_NAME IN ('QUESTIONS', 'COM_STMT_EXECUTE', 'COM_COMMIT', 'HANDLER_COMMIT', "          \
    "'COM_STMT_PREPARE', 'HANDLER_WRITE', 'HANDLER_UPDATE', 'HANDLER_DELETE', "                    \
    "'HANDLER_READ_KEY', 'HANDLER_READ_NEXT', 'INNODB_OS_LOG_WRITTEN')"
#define HTTP_SQL_PID_FILE "SELECT @@pid_file"

/* The server counters read before and after the load phase. */
enum status_var {
    SV_QUESTIONS,
    SV_STMT_EXECUTE,
    SV_COM_COMMIT,
    SV_HANDLER_COMMIT,
    SV_PREPARE,
    SV_WRITE,     /* rows inserted */
    SV_UPDATE,    /* rows updated */
    SV_DELETE,    /* rows deleted */
    SV_READ_KEY,  /* index lookups */
    SV_READ_NEXT, /* index rows read in order after a lookup */
    SV_REDO,      /* redo log bytes written */
    SV_N
};
static const char *const status_names[SV_N] = {
    "QUESTIONS",        "COM_STMT_EXECUTE",  "COM_COMMIT",           "HANDLER_COMMIT",
    "COM_STMT_PREPARE", "HANDLER_WRITE",     "HANDLER_UPDATE",       "HANDLER_DELETE",
    "HANDLER_READ_KEY", "HANDLER_READ_NEXT", "INNODB_OS_LOG_WRITTEN"};

/* The figures of one run; medians are taken per index. */
enum fig {
    F_HTTP_RATE, /* accepted orders/s during the POST phase */
    F_E2E_RATE,  /* orders / (first POST .. last CONFIRMED) */
    F_POST_P50,  /* ms */
    F_POST_P99,
    F_CP_P50, /* commit->publish of OrderCreated, ms */
    F_CP_P99,
    F_CC_P50, /* commit->consumed (inbox row) of OrderCreated, ms */
    F_CC_P99,
    F_PC_P50, /* POST->CONFIRMED, ms */
    F_PC_P99,
    F_RETRIES,   /* POST attempts beyond the first */
    F_TAIL_S,    /* seconds from the last confirmation until every event was published */
    F_HALF_RATE, /* paced: offered orders/s */
    F_HALF_DONE, /* paced: orders / (first due .. last CONFIRMED) */
    F_HALF_POST_P99,
    F_HALF_CP_P50,
    F_HALF_CP_P99,
    F_HALF_RELAY_P50, /* the relay's publish-delay histogram, every event type */
    F_HALF_RELAY_P99,
    F_HALF_CC_P50,
    F_HALF_CC_P99,
    F_HALF_PC_P50,
    F_HALF_PC_P99,
    F_HALF_LATE, /* paced POSTs that started > HTTP_LATE_S after their due time, % */
    F_CPU_TXO,   /* CPU ms per order during the load phase */
    F_CPU_DB,
    F_CPU_BROKER,
    F_CPU_BENCH,
    F_CPU_OTHER, /* machine CPU busy minus the four above: other processes, the kernel */
    F_BUSY,      /* machine CPU busy, % of all cores */
    F_IDLE_QPS,  /* server statements/s before the load, txo up idle: other clients' noise */
    F_QUESTIONS, /* statements (round trips) per order, server-wide */
    F_EXECUTES,
    F_PREPARES,
    F_COMMITS,  /* Com_commit per order */
    F_HCOMMITS, /* Handler_commit per order */
    F_SYNCS,    /* redo-log syncs per order */
    F_EVENTS,   /* outbox rows per order */
    /* The server's row work per order: what is left when statements cover many rows. */
    F_ROWS_WRITTEN,
    F_ROWS_UPDATED,
    F_ROWS_DELETED,
    F_KEY_READS,
    F_NEXT_READS,
    F_REDO_KB,
    F_N
};

/* ---- child processes ---- */

extern char **environ;

struct child {
    pid_t pid; /* 0: not running */
    int status;
    char log_path[PATH_MAX];
};

/* A growing NULL-terminated vector of owned strings (argv, envp). */
struct strv {
    char *v[HTTP_MAX_ARGS + 1];
    size_t n;
};

static void strv_release(struct strv *s)
{
    for (size_t i = 0; i < s->n; i++)
        txo_free(s->v[i]);
    s->n = 0;
    s->v[0] = NULL;
}

static TXO_PRINTF(2, 3) int strv_add(struct strv *s, const char *fmt, ...)
{
    char buf[PATH_MAX + 64];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof(buf) || s->n >= HTTP_MAX_ARGS) {
        fprintf(stderr, "txo_bench: argument too long or too many arguments\n");
        return TXO_EINVAL;
    }
    char *copy = txo_strdup(buf);
    if (copy == NULL)
        return bench_fail(TXO_ENOMEM, NULL, "argument vector");
    s->v[s->n++] = copy;
    s->v[s->n] = NULL;
    return 0;
}

static int child_start(struct child *c, const char *log_path, char *const *argv, char *const *envp)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->log_path, sizeof(c->log_path), "%s", log_path);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "txo_bench: fork: %s\n", strerror(errno));
        return TXO_EIO;
    }
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        long max_fd = sysconf(_SC_OPEN_MAX);
        if (max_fd < 0 || max_fd > 65536)
            max_fd = 65536;
        for (int i = STDERR_FILENO + 1; i < (int)max_fd; i++)
            close(i);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execve(argv[0], argv, envp);
        _exit(127);
    }
    c->pid = pid;
    return 0;
}

/* True while the child runs; reaps it (status in c->status) once it has exited. */
static bool child_alive(struct child *c)
{
    if (c->pid <= 0)
        return false;
    pid_t r = waitpid(c->pid, &c->status, WNOHANG);
    if (r == c->pid) {
        c->pid = 0;
        return false;
    }
    return true;
}

static void child_print_log(const struct child *c, const char *what)
{
    FILE *f = fopen(c->log_path, "rb");
    if (f == NULL)
        return;
    char buf[HTTP_LOG_TAIL_BYTES + 1];
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    if (size > HTTP_LOG_TAIL_BYTES)
        fseek(f, size - HTTP_LOG_TAIL_BYTES, SEEK_SET);
    else
        fseek(f, 0, SEEK_SET);
    size_t got = fread(buf, 1, HTTP_LOG_TAIL_BYTES, f);
    buf[got] = '\0';
    fclose(f);
    fprintf(stderr, "---- %s log (%s), last %zu bytes ----\n%s\n---- end of log ----\n", what,
            c->log_path, got, buf);
}

/* Sends sig and waits up to timeout_ms, then SIGKILLs. True when it exited by itself with 0. */
static bool child_stop(struct child *c, int sig, int timeout_ms)
{
    if (c->pid <= 0)
        return false;
    kill(c->pid, sig);
    double deadline = bench_now_s() + timeout_ms / 1000.0;
    while (child_alive(c)) {
        if (bench_now_s() > deadline) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &c->status, 0);
            c->pid = 0;
            return false;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0;
}

/* A TCP port on 127.0.0.1 that was free a moment ago; 0 on failure. */
static unsigned free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    unsigned port = 0;
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 &&
        getsockname(fd, (struct sockaddr *)&addr, &len) == 0)
        port = ntohs(addr.sin_port);
    close(fd);
    return port;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void sleep_until(double t_mono)
{
    struct timespec ts;
    ts.tv_sec = (time_t)t_mono;
    ts.tv_nsec = (long)((t_mono - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L)
        ts.tv_nsec = 999999999L;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static int64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void remove_tree(const char *dir)
{
    if (dir[0] != '\0')
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* An executable file at path. */
static bool executable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* The default `txo`: "<directory of txo_bench>/../txo". */
static bool default_txo_path(char *buf, size_t size)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return false;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash == NULL)
        return false;
    *slash = '\0';
    int len = snprintf(buf, size, "%s/../txo", self);
    return len > 0 && (size_t)len < size;
}

/* ---- CPU accounting (/proc) ---- */

/* CPU seconds (user + system) used so far by pid, or -1 when unknown. */
static double proc_cpu_s(pid_t pid)
{
    if (pid <= 0)
        return -1.0;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1.0;
    char line[1024];
    char *got = fgets(line, sizeof(line), f);
    fclose(f);
    if (got == NULL)
        return -1.0;
    /* The command name may hold blanks; the fields after it start past the last ')'. */
    char *p = strrchr(line, ')');
    if (p == NULL)
        return -1.0;
    p++;
    unsigned long long utime = 0, stime = 0;
    /* Fields 3 (state) .. 13 skipped, then 14 utime and 15 stime. */
    if (sscanf(p, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
        return -1.0;
    long hz = sysconf(_SC_CLK_TCK);
    return (double)(utime + stime) / (double)(hz > 0 ? hz : 100);
}

/* Machine-wide busy and total ticks from the "cpu" line of /proc/stat. */
static void machine_ticks(uint64_t *busy, uint64_t *total)
{
    *busy = 0;
    *total = 0;
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL)
        return;
    unsigned long long v[8] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 4)
        return;
    for (int i = 0; i < n; i++)
        *total += v[i];
    *busy = *total - v[3] - (n > 4 ? v[4] : 0); /* minus idle and iowait */
}

/* The database server's pid when it runs on this machine (@@pid_file names a mariadbd or
 * mysqld process), else 0. */
static pid_t server_pid(struct txo_db *db)
{
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    if (txo_db_query(db, HTTP_SQL_PID_FILE, NULL, 0, &rows, &err) < 0)
        return 0;
    pid_t pid = 0;
    const char *file = txo_rows_count(rows) > 0 ? txo_rows_str(rows, 0, 0, NULL) : NULL;
    FILE *f = file != NULL ? fopen(file, "r") : NULL;
    long v = 0;
    if (f != NULL && fscanf(f, "%ld", &v) == 1 && v > 0) {
        char path[64];
        char comm[64] = "";
        snprintf(path, sizeof(path), "/proc/%ld/comm", v);
        FILE *c = fopen(path, "r");
        if (c != NULL && fgets(comm, sizeof(comm), c) != NULL &&
            (strncmp(comm, "mariadbd", 8) == 0 || strncmp(comm, "mysqld", 6) == 0))
            pid = (pid_t)v;
        if (c != NULL)
            fclose(c);
    }
    if (f != NULL)
        fclose(f);
    txo_rows_free(rows);
    return pid;
}

struct usage_snap {
    double t;
    double txo_s, db_s, broker_s, self_s;
    uint64_t busy, total;
    int64_t status[SV_N];
    int64_t syncs;
};

static int read_status(struct txo_db *db, int64_t out[SV_N])
{
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_query(db, HTTP_SQL_STATUS, NULL, 0, &rows, &err);
    if (rc < 0)
        return bench_fail(rc, &err, "reading GLOBAL_STATUS");
    for (size_t k = 0; k < SV_N; k++)
        out[k] = -1;
    for (size_t r = 0; r < txo_rows_count(rows); r++) {
        const char *name = txo_rows_str(rows, r, 0, NULL);
        for (size_t k = 0; k < SV_N; k++)
            if (name != NULL && strcmp(name, status_names[k]) == 0)
                out[k] = txo_rows_i64(rows, r, 1);
    }
    txo_rows_free(rows);
    return 0;
}

static int take_snap(struct txo_db *db, pid_t txo, pid_t dbd, pid_t broker, struct usage_snap *s)
{
    s->t = bench_now_s();
    s->txo_s = proc_cpu_s(txo);
    s->db_s = proc_cpu_s(dbd);
    s->broker_s = proc_cpu_s(broker);
    s->self_s = proc_cpu_s(getpid());
    machine_ticks(&s->busy, &s->total);
    s->syncs = bench_log_syncs(db);
    return read_status(db, s->status);
}

/* CPU ms per order between two snapshots; -1 when unknown. */
static double cpu_ms_per(double a, double b, size_t n)
{
    return a >= 0 && b >= 0 && n > 0 ? (b - a) * 1000.0 / (double)n : -1.0;
}

static double count_per(int64_t a, int64_t b, size_t n)
{
    return a >= 0 && b >= 0 && n > 0 ? (double)(b - a) / (double)n : -1.0;
}

/* ---- the load ---- */

struct http_load {
    char url[96];
    char key_prefix[64];
    size_t n; /* orders to send */
    unsigned connections;
    double rate;        /* paced: orders/s offered; 0: closed loop */
    double t0;          /* monotonic start, set by the main thread between the barriers */
    int64_t t0_wall_us; /* the same instant, CLOCK_REALTIME */
    double *lat_ms;     /* n latencies, owned by the caller */
    atomic_size_t next; /* closed loop: next order index */
    atomic_bool failed; /* a connection gave up: everyone stops */
    atomic_uint retries;
    atomic_uint late;
    pthread_barrier_t ready; /* connections + main: clients exist */
    pthread_barrier_t go;    /* connections + main: t0 is set */
};

struct http_conn {
    struct http_load *load;
    unsigned index;
    int rc;
    double t_end; /* monotonic: after its last POST */
    pthread_t tid;
};

static void sku_name(char *buf, size_t size, unsigned i)
{
    snprintf(buf, size, "bench-sku-%02u", i);
}

/* One order's body: 1 or 2 items of distinct SKUs, derived from the index. */
static int order_body(size_t i, char *buf, size_t size)
{
    uint64_t rng = UINT64_C(0x9E3779B97F4A7C15) * (uint64_t)(i + 1);
    uint64_t r = bench_rand(&rng);
    unsigned first = (unsigned)((r >> 8) % HTTP_NUM_SKUS);
    unsigned second = (first + 1 + (unsigned)((r >> 16) % (HTTP_NUM_SKUS - 1))) % HTTP_NUM_SKUS;
    char a[24], b[24];
    sku_name(a, sizeof(a), first);
    sku_name(b, sizeof(b), second);
    long long customer = 1 + (long long)((r >> 40) % 100000);
    int len;
    if (r & 1)
        len =
            snprintf(buf, size,
                     "{\"customer_id\":%lld,\"items\":[{\"sku\":\"%s\",\"qty\":%d,"
                     "\"price_cents\":%d},{\"sku\":\"%s\",\"qty\":1,\"price_cents\":%d}]}",
                     customer, a, 1 + (int)((r >> 24) & 1), 999 + (int)((r >> 32) % 9000), b, 1999);
    else
        len = snprintf(buf, size,
                       "{\"customer_id\":%lld,\"items\":[{\"sku\":\"%s\",\"qty\":%d,"
                       "\"price_cents\":%d}]}",
                       customer, a, 1 + (int)((r >> 24) & 1), 999 + (int)((r >> 32) % 9000));
    return len;
}

/* POSTs order i until it is accepted (201); transient failures and 409 (the key is still
 * being processed after a timed-out try) are retried with the same key. */
static int post_order(struct txo_http_client *client, struct http_load *l, size_t i,
                      struct txo_http_client_response *resp)
{
    char key[128];
    char body[512];
    snprintf(key, sizeof(key), "%s-%zu", l->key_prefix, i);
    int len = order_body(i, body, sizeof(body));
    struct txo_error err;
    int rc = 0;
    for (int attempt = 1; attempt <= HTTP_POST_ATTEMPTS; attempt++) {
        txo_error_init(&err);
        rc = txo_http_post_json(client, l->url, key, NULL, body, (size_t)len, resp, &err);
        if (rc == 0 && resp->status == 201)
            return 0;
        if (rc == 0)
            rc = txo_error_set(&err, TXO_EIO, "POST /orders answered %ld, expected 201: %s",
                               resp->status, resp->body ? resp->body : "");
        bool retry = rc == TXO_EUNAVAILABLE || rc == TXO_ETIMEOUT || resp->status == 409;
        if (!retry || attempt == HTTP_POST_ATTEMPTS)
            break;
        atomic_fetch_add(&l->retries, 1);
        sleep_ms(50 * attempt);
    }
    return bench_fail(rc, &err, "POST /orders");
}

static void *conn_main(void *arg)
{
    struct http_conn *c = arg;
    struct http_load *l = c->load;
    struct txo_http_client *client = NULL;
    struct txo_http_client_response resp;
    struct txo_http_client_opts o;
    struct txo_error err;
    txo_http_client_response_init(&resp);
    txo_http_client_opts_init(&o);
    txo_error_init(&err);
    o.timeout_ms = HTTP_POST_TIMEOUT;
    o.user_agent = "txo_bench";
    c->rc = txo_http_client_new(&o, &client, &err);
    if (c->rc < 0)
        bench_fail(c->rc, &err, "creating an HTTP client");
    pthread_barrier_wait(&l->ready);
    pthread_barrier_wait(&l->go);
    if (c->rc < 0)
        goto out;
    if (l->rate > 0) {
        for (size_t i = c->index; i < l->n && !atomic_load(&l->failed); i += l->connections) {
            double due = l->t0 + (double)i / l->rate;
            sleep_until(due);
            if (bench_now_s() - due > HTTP_LATE_S)
                atomic_fetch_add(&l->late, 1);
            c->rc = post_order(client, l, i, &resp);
            if (c->rc < 0)
                break;
            l->lat_ms[i] = (bench_now_s() - due) * 1000.0;
        }
    } else {
        while (!atomic_load(&l->failed)) {
            size_t i = atomic_fetch_add(&l->next, 1);
            if (i >= l->n)
                break;
            double t = bench_now_s();
            c->rc = post_order(client, l, i, &resp);
            if (c->rc < 0)
                break;
            l->lat_ms[i] = (bench_now_s() - t) * 1000.0;
        }
    }
    if (c->rc < 0)
        atomic_store(&l->failed, true);
out:
    c->t_end = bench_now_s();
    txo_http_client_response_release(&resp);
    txo_http_client_free(client);
    return NULL;
}

/*
 * Sends l->n orders over l->connections connections (closed loop when l->rate is 0, paced
 * otherwise). On success *t_last is the monotonic time the last connection finished. l->lat_ms
 * must hold l->n values.
 */
static int run_load(struct http_load *l, double *t_last)
{
    unsigned nc = l->connections;
    struct http_conn *conns = txo_calloc(nc, sizeof(*conns));
    if (conns == NULL)
        return bench_fail(TXO_ENOMEM, NULL, "allocating connections");
    atomic_init(&l->next, 0);
    atomic_init(&l->failed, false);
    atomic_init(&l->retries, 0);
    atomic_init(&l->late, 0);
    if (pthread_barrier_init(&l->ready, NULL, nc + 1) != 0 ||
        pthread_barrier_init(&l->go, NULL, nc + 1) != 0) {
        fprintf(stderr, "txo_bench: pthread_barrier_init failed\n");
        abort();
    }
    for (unsigned i = 0; i < nc; i++) {
        conns[i] = (struct http_conn){.load = l, .index = i};
        if (pthread_create(&conns[i].tid, NULL, conn_main, &conns[i]) != 0) {
            /* The barriers would never open: no way to recover cleanly. */
            fprintf(stderr, "txo_bench: pthread_create failed\n");
            abort();
        }
    }
    pthread_barrier_wait(&l->ready);
    /* Paced: the first due time a little ahead, so no connection starts late. */
    l->t0 = bench_now_s() + (l->rate > 0 ? 0.02 : 0.0);
    l->t0_wall_us = wall_us() + (l->rate > 0 ? 20000 : 0);
    pthread_barrier_wait(&l->go);
    int rc = 0;
    double last = l->t0;
    for (unsigned i = 0; i < nc; i++) {
        pthread_join(conns[i].tid, NULL);
        if (conns[i].rc < 0 && rc == 0)
            rc = conns[i].rc;
        if (conns[i].t_end > last)
            last = conns[i].t_end;
    }
    pthread_barrier_destroy(&l->ready);
    pthread_barrier_destroy(&l->go);
    txo_free(conns);
    *t_last = last;
    return rc;
}

/* ---- SQL figures ---- */

static int query_i64_after(struct txo_db *db, const char *sql, int64_t after, int64_t *out)
{
    struct txo_param p = txo_p_i64(after);
    return bench_query_i64(db, sql, &p, 1, out);
}

/* p50 and p99 (ms) of a column of microseconds over the rows with id > after; *count rows. */
static int sql_percentiles(struct txo_db *db, const char *sql, int64_t after, double *p50,
                           double *p99, size_t *count)
{
    struct txo_param p = txo_p_i64(after);
    struct txo_rows *rows = NULL;
    struct txo_error err;
    txo_error_init(&err);
    int rc = txo_db_query(db, sql, &p, 1, &rows, &err);
    if (rc < 0)
        return bench_fail(rc, &err, sql);
    size_t n = txo_rows_count(rows);
    double *v = txo_calloc(n > 0 ? n : 1, sizeof(double));
    if (v == NULL) {
        txo_rows_free(rows);
        return bench_fail(TXO_ENOMEM, NULL, "allocating latencies");
    }
    for (size_t i = 0; i < n; i++)
        v[i] = (double)txo_rows_i64(rows, i, 0) / 1000.0;
    txo_rows_free(rows);
    /* No rows (commit->publish of a binlog source, which writes no published_at): -1, printed
     * as "-". */
    *p50 = n > 0 ? bench_percentile(v, n, 50.0) : -1.0;
    *p99 = n > 0 ? bench_percentile(v, n, 99.0) : -1.0;
    *count = n;
    txo_free(v);
    return 0;
}

/*
 * Polls `sql` (one count, `n` params) every HTTP_POLL_MS until it reaches `want` (or falls to 0
 * when want is 0); gives up after HTTP_STALL_S without a change, or when txo up died.
 */
static int wait_count(struct txo_db *db, struct child *txo, const char *sql,
                      const struct txo_param *params, size_t n, int64_t want, const char *what)
{
    int64_t got = 0;
    int64_t last_got = -1;
    double last_progress = bench_now_s();
    for (;;) {
        int rc = bench_query_i64(db, sql, params, n, &got);
        if (rc < 0)
            return rc;
        if (want > 0 ? got >= want : got == 0)
            return 0;
        if (got != last_got) {
            last_got = got;
            last_progress = bench_now_s();
        }
        if (!child_alive(txo)) {
            fprintf(stderr, "txo_bench: ERROR: txo up exited (status %d) with %lld %s\n",
                    txo->status, (long long)got, what);
            child_print_log(txo, "txo up");
            return TXO_ESTATE;
        }
        if (bench_now_s() - last_progress > HTTP_STALL_S) {
            fprintf(stderr, "txo_bench: ERROR: gave up waiting: %lld %s, unchanged for %d s\n",
                    (long long)got, what, HTTP_STALL_S);
            child_print_log(txo, "txo up");
            return TXO_ETIMEOUT;
        }
        sleep_ms(HTTP_POLL_MS);
    }
}

/* Waits until `want` orders with id > after are CONFIRMED. */
static int wait_confirmed(struct txo_db *db, struct child *txo, int64_t after, size_t want)
{
    struct txo_param p = txo_p_i64(after);
    return wait_count(db, txo, HTTP_SQL_CONFIRMED, &p, 1, (int64_t)want, "orders CONFIRMED");
}

/* Waits until the relay published every event (the later saga events of the last orders trail
 * their confirmation, and in local mode an OrderCreated row is marked PUBLISHED only with the
 * rest of its batch). */
static int wait_drained(struct txo_db *db, struct child *txo)
{
    return wait_count(db, txo, HTTP_SQL_NOT_PUBLISHED, NULL, 0, 0, "events not PUBLISHED");
}

struct expect {
    const char *sql;
    int64_t want;
    const char *what;
};

static int verify_run(struct txo_db *db, int64_t orders)
{
    const struct expect checks[] = {
        {HTTP_SQL_ORDERS_ALL, orders, "orders"},
        {HTTP_SQL_ORDERS_NOT_CONFIRMED, 0, "orders not CONFIRMED"},
        {HTTP_SQL_SAGAS_COMPLETED, orders, "sagas COMPLETED"},
        {HTTP_SQL_CREATED_ALL, orders, "OrderCreated events"},
        {HTTP_SQL_CREATED_NOT_PUBLISHED, 0, "OrderCreated events not PUBLISHED"},
    };
    int rc = 0;
    for (size_t i = 0; i < TXO_ARRAY_LEN(checks); i++) {
        int64_t got = 0;
        int rc2 = bench_query_i64(db, checks[i].sql, NULL, 0, &got);
        if (rc2 < 0)
            return rc2;
        if (got != checks[i].want) {
            fprintf(stderr, "txo_bench: ERROR: %s: %lld, expected %lld\n", checks[i].what,
                    (long long)got, (long long)checks[i].want);
            rc = TXO_EDB;
        }
    }
    return rc;
}

/* ---- one run ---- */

struct http_run {
    struct bench_env *env;
    const struct bench_cfg *cfg;
    const char *broker; /* NULL: local dispatch */
    unsigned run;
    const char *txo_path;
    pid_t db_pid;
    char db_name[80];   /* env->name + "_http" */
    char dir[PATH_MAX]; /* temporary directory: logs, the broker's data */
    struct txo_db *db;  /* connection to db_name */
    struct child txo;
    bool broker_up;
    pid_t broker_pid;
    struct strv broker_flags; /* the txo flags that reach it */
    double fig[F_N];
};

/* Runs `scripts/broker.sh CMD NAME <dir>/broker` to its end (up to 180 s: a broker may take a
 * while to start). */
static int broker_script(struct http_run *h, const char *cmd)
{
    struct strv argv = {.n = 0};
    char log[PATH_MAX + 32];
    snprintf(log, sizeof(log), "%s/broker-%s.log", h->dir, cmd);
    int rc = strv_add(&argv, "%s/scripts/broker.sh", TXO_BENCH_SOURCE_DIR);
    if (rc == 0)
        rc = strv_add(&argv, "%s", cmd);
    if (rc == 0)
        rc = strv_add(&argv, "%s", h->broker);
    if (rc == 0)
        rc = strv_add(&argv, "%s/broker", h->dir);
    struct child c;
    if (rc == 0)
        rc = child_start(&c, log, argv.v, environ);
    strv_release(&argv);
    if (rc < 0)
        return rc;
    double deadline = bench_now_s() + 180.0;
    while (child_alive(&c) && bench_now_s() < deadline)
        sleep_ms(50);
    if (c.pid > 0 || !WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0) {
        if (c.pid > 0)
            (void)child_stop(&c, SIGKILL, 1000);
        fprintf(stderr, "txo_bench: ERROR: scripts/broker.sh %s %s failed\n", cmd, h->broker);
        child_print_log(&c, "broker.sh");
        return TXO_EUNAVAILABLE;
    }
    return 0;
}

/* Starts the run's private broker; its flags into h->broker_flags, its pid into h->broker_pid. */
static int start_broker(struct http_run *h)
{
    int rc = broker_script(h, "start");
    if (rc < 0)
        return rc;
    h->broker_up = true;
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/broker/pid", h->dir);
    FILE *f = fopen(path, "r");
    long pid = 0;
    if (f == NULL || fscanf(f, "%ld", &pid) != 1)
        pid = 0;
    if (f != NULL)
        fclose(f);
    h->broker_pid = (pid_t)pid;
    snprintf(path, sizeof(path), "%s/broker/flags", h->dir);
    f = fopen(path, "r");
    if (f == NULL)
        return bench_fail(TXO_EIO, NULL, "reading the broker's flags");
    char line[PATH_MAX];
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] != '\0')
            rc = strv_add(&h->broker_flags, "%s", line);
    }
    fclose(f);
    return rc;
}

/* argv and envp of `txo up` on port for this run or, with up false, of `txo migrate` of its
 * database (the same database settings, none of the service's flags). */
static int txo_command(struct http_run *h, bool up, unsigned port, struct strv *argv,
                       struct strv *envp)
{
    const struct txo_db_opts *o = &h->env->opts;
    int rc = strv_add(argv, "%s", h->txo_path);
    if (rc == 0)
        rc = strv_add(argv, up ? "up" : "migrate");
    if (rc == 0 && up)
        rc = strv_add(argv, "--listen=127.0.0.1:%u", port);
    if (rc == 0)
        rc = strv_add(argv, "--log-level=warn");
    if (rc == 0)
        rc = strv_add(argv, "--mysql-host=%s", o->host ? o->host : "127.0.0.1");
    if (rc == 0)
        rc = strv_add(argv, "--mysql-port=%u", o->port);
    if (rc == 0 && o->unix_socket != NULL && o->unix_socket[0] != '\0')
        rc = strv_add(argv, "--mysql-socket=%s", o->unix_socket);
    if (rc == 0)
        rc = strv_add(argv, "--mysql-user=%s", o->user ? o->user : "");
    if (rc == 0)
        rc = strv_add(argv, "--mysql-database=%s", h->db_name);
    if (rc == 0 && up && h->broker != NULL) {
        rc = strv_add(argv, "--broker=%s", h->broker);
        for (size_t i = 0; rc == 0 && i < h->broker_flags.n; i++)
            rc = strv_add(argv, "%s", h->broker_flags.v[i]);
    }
    /* --up-args last: later flags win. */
    if (rc == 0 && up && h->cfg->up_args != NULL) {
        char *copy = txo_strdup(h->cfg->up_args);
        if (copy == NULL)
            return bench_fail(TXO_ENOMEM, NULL, "--up-args");
        char *save = NULL;
        for (char *t = strtok_r(copy, " \t", &save); rc == 0 && t != NULL;
             t = strtok_r(NULL, " \t", &save))
            rc = strv_add(argv, "%s", t);
        txo_free(copy);
    }
    /* The environment without MYSQL_*: the database settings above and the password here (so
     * it does not show in ps). */
    for (char **e = environ; rc == 0 && *e != NULL; e++)
        if (strncmp(*e, "MYSQL_", 6) != 0)
            rc = strv_add(envp, "%s", *e);
    if (rc == 0)
        rc = strv_add(envp, "MYSQL_PASSWORD=%s", o->password ? o->password : "");
    return rc;
}

/* `txo migrate` of the run's database by the txo under test, so that each build runs on its
 * own schema (two builds compared in one session may differ in it). */
static int migrate_with_txo(struct http_run *h)
{
    struct strv argv = {.n = 0};
    struct strv envp = {.n = 0};
    char log[PATH_MAX + 16];
    snprintf(log, sizeof(log), "%s/migrate.log", h->dir);
    struct child c;
    int rc = txo_command(h, false, 0, &argv, &envp);
    if (rc == 0)
        rc = child_start(&c, log, argv.v, envp.v);
    strv_release(&argv);
    strv_release(&envp);
    if (rc < 0)
        return rc;
    waitpid(c.pid, &c.status, 0);
    if (!WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0) {
        child_print_log(&c, "txo migrate");
        return bench_fail(TXO_EDB, NULL, "txo migrate of the http bench database");
    }
    return 0;
}

/* Drops and creates db_name, connects, migrates (with the txo under test) and sets the stock. */
static int fresh_database(struct http_run *h)
{
    char sql[160];
    snprintf(h->db_name, sizeof(h->db_name), "%s_http", h->env->name);
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS `%s`", h->db_name);
    int rc = bench_exec_raw(h->env->db, sql);
    if (rc < 0)
        return rc;
    snprintf(sql, sizeof(sql), "CREATE DATABASE `%s` CHARACTER SET utf8mb4", h->db_name);
    rc = bench_exec_raw(h->env->db, sql);
    if (rc < 0)
        return rc;
    struct bench_env sub = *h->env;
    sub.opts.database = h->db_name;
    rc = bench_connect(&sub, &h->db);
    if (rc < 0)
        return rc;
    rc = migrate_with_txo(h);
    if (rc < 0)
        return rc;
    struct txo_error err;
    txo_error_init(&err);
    for (unsigned i = 0; i < HTTP_NUM_SKUS; i++) {
        char sku[24];
        sku_name(sku, sizeof(sku), i);
        rc = orders_set_inventory(h->db, sku, HTTP_STOCK_PER_SKU, &err);
        if (rc < 0)
            return bench_fail(rc, &err, "setting the inventory");
    }
    return 0;
}

/* An HTTP client for txo up's own endpoints on 127.0.0.1 (short timeouts). */
static int local_client(struct txo_http_client **out, struct txo_error *err)
{
    struct txo_http_client_opts o;
    txo_http_client_opts_init(&o);
    o.timeout_ms = 1000;
    o.connect_timeout_ms = 500;
    int rc = txo_http_client_new(&o, out, err);
    return rc < 0 ? bench_fail(rc, err, "creating an HTTP client") : 0;
}

static int start_txo(struct http_run *h, unsigned port)
{
    struct strv argv = {.n = 0};
    struct strv envp = {.n = 0};
    char log[PATH_MAX + 16];
    snprintf(log, sizeof(log), "%s/txo.log", h->dir);
    int rc = txo_command(h, true, port, &argv, &envp);
    if (rc == 0)
        rc = child_start(&h->txo, log, argv.v, envp.v);
    strv_release(&argv);
    strv_release(&envp);
    if (rc < 0)
        return rc;

    struct txo_http_client *client = NULL;
    struct txo_http_client_response resp;
    struct txo_error err;
    txo_http_client_response_init(&resp);
    txo_error_init(&err);
    rc = local_client(&client, &err);
    if (rc < 0)
        return rc;
    char url[96];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/healthz", port);
    double deadline = bench_now_s() + HTTP_READY_MS / 1000.0;
    for (;;) {
        txo_error_init(&err);
        if (txo_http_get(client, url, NULL, &resp, &err) == 0 && resp.status == 200)
            break;
        if (!child_alive(&h->txo) || bench_now_s() > deadline) {
            fprintf(stderr, "txo_bench: ERROR: txo up did not answer GET /healthz on port %u\n",
                    port);
            child_print_log(&h->txo, "txo up");
            rc = TXO_EUNAVAILABLE;
            break;
        }
        sleep_ms(50);
    }
    txo_http_client_response_release(&resp);
    txo_http_client_free(client);
    return rc;
}

/* Counts the log lines of `txo up` at warn/error level and prints the first few. */
static void report_log_levels(const struct child *c)
{
    FILE *f = fopen(c->log_path, "r");
    if (f == NULL)
        return;
    unsigned warns = 0, errors = 0;
    char line[4096];
    while (fgets(line, sizeof(line), f) != NULL) {
        bool warn = strstr(line, " level=warn ") != NULL;
        bool error = strstr(line, " level=error ") != NULL;
        if ((warn || error) && warns + errors < 3)
            fprintf(stderr, "  txo up: %s", line);
        warns += warn;
        errors += error;
    }
    fclose(f);
    if (warns + errors > 0)
        fprintf(stderr, "  txo up logged %u warnings and %u errors (%s)\n", warns, errors,
                c->log_path);
}

/* The load phase (n orders as fast as the connections go) and its figures. */
static int phase_load(struct http_run *h, unsigned port, size_t n)
{
    struct http_load *l = txo_calloc(1, sizeof(*l));
    double *lat = txo_calloc(n, sizeof(double));
    int rc = 0;
    if (l == NULL || lat == NULL) {
        rc = bench_fail(TXO_ENOMEM, NULL, "allocating the load");
        goto out;
    }
    snprintf(l->url, sizeof(l->url), "http://127.0.0.1:%u/orders", port);
    snprintf(l->key_prefix, sizeof(l->key_prefix), "bench-%ld-%u-load", (long)getpid(), h->run);
    l->n = n;
    l->connections = h->cfg->http_connections;
    l->rate = 0.0;
    l->lat_ms = lat;

    /* One idle second first: what the server does without our load (txo up's polling plus
     * any other client of the server) shows how noisy the figures below are. */
    struct usage_snap s0, s1;
    int64_t idle0[SV_N], idle1[SV_N];
    rc = read_status(h->db, idle0);
    if (rc < 0)
        goto out;
    double ti = bench_now_s();
    sleep_ms(1000);
    rc = read_status(h->db, idle1);
    if (rc < 0)
        goto out;
    h->fig[F_IDLE_QPS] = (double)(idle1[SV_QUESTIONS] - idle0[SV_QUESTIONS]) / (bench_now_s() - ti);
    rc = take_snap(h->db, h->txo.pid, h->db_pid, h->broker_pid, &s0);
    if (rc < 0)
        goto out;
    double t_last = 0.0;
    rc = run_load(l, &t_last);
    if (rc < 0)
        goto out;
    rc = wait_confirmed(h->db, &h->txo, 0, n);
    if (rc == 0)
        rc = wait_drained(h->db, &h->txo);
    if (rc < 0)
        goto out;
    int64_t drained_us = wall_us();
    rc = take_snap(h->db, h->txo.pid, h->db_pid, h->broker_pid, &s1);
    if (rc < 0)
        goto out;

    int64_t last_us = 0;
    rc = query_i64_after(h->db, HTTP_SQL_LAST_CONFIRMED_US, 0, &last_us);
    if (rc < 0)
        goto out;
    double *f = h->fig;
    double e2e_s = (double)(last_us - l->t0_wall_us) / 1e6;
    f[F_HTTP_RATE] = (double)n / (t_last - l->t0);
    f[F_E2E_RATE] = e2e_s > 0 ? (double)n / e2e_s : 0.0;
    f[F_POST_P50] = bench_percentile(lat, n, 50.0);
    f[F_POST_P99] = bench_percentile(lat, n, 99.0);
    f[F_RETRIES] = (double)atomic_load(&l->retries);
    f[F_TAIL_S] = drained_us > last_us ? (double)(drained_us - last_us) / 1e6 : 0.0;
    size_t count = 0;
    rc = sql_percentiles(h->db, HTTP_SQL_PUBLISH_US, 0, &f[F_CP_P50], &f[F_CP_P99], &count);
    if (rc == 0)
        rc = sql_percentiles(h->db, HTTP_SQL_CONSUME_US, 0, &f[F_CC_P50], &f[F_CC_P99], &count);
    if (rc == 0)
        rc = sql_percentiles(h->db, HTTP_SQL_CONFIRM_US, 0, &f[F_PC_P50], &f[F_PC_P99], &count);
    int64_t events = 0;
    if (rc == 0)
        rc = query_i64_after(h->db, HTTP_SQL_EVENTS_AFTER, 0, &events);
    if (rc < 0)
        goto out;

    f[F_CPU_TXO] = cpu_ms_per(s0.txo_s, s1.txo_s, n);
    f[F_CPU_DB] = cpu_ms_per(s0.db_s, s1.db_s, n);
    f[F_CPU_BROKER] = cpu_ms_per(s0.broker_s, s1.broker_s, n);
    f[F_CPU_BENCH] = cpu_ms_per(s0.self_s, s1.self_s, n);
    long hz = sysconf(_SC_CLK_TCK);
    double machine_ms = (double)(s1.busy - s0.busy) * 1000.0 / (double)(hz > 0 ? hz : 100);
    f[F_CPU_OTHER] = machine_ms / (double)n;
    for (int k = F_CPU_TXO; k <= F_CPU_BENCH; k++)
        if (f[k] > 0)
            f[F_CPU_OTHER] -= f[k];
    f[F_BUSY] = s1.total > s0.total
                    ? 100.0 * (double)(s1.busy - s0.busy) / (double)(s1.total - s0.total)
                    : -1.0;
    f[F_QUESTIONS] = count_per(s0.status[SV_QUESTIONS], s1.status[SV_QUESTIONS], n);
    f[F_EXECUTES] = count_per(s0.status[SV_STMT_EXECUTE], s1.status[SV_STMT_EXECUTE], n);
    f[F_PREPARES] = count_per(s0.status[SV_PREPARE], s1.status[SV_PREPARE], n);
    f[F_COMMITS] = count_per(s0.status[SV_COM_COMMIT], s1.status[SV_COM_COMMIT], n);
    f[F_HCOMMITS] = count_per(s0.status[SV_HANDLER_COMMIT], s1.status[SV_HANDLER_COMMIT], n);
    f[F_SYNCS] = count_per(s0.syncs, s1.syncs, n);
    f[F_EVENTS] = (double)events / (double)n;
    f[F_ROWS_WRITTEN] = count_per(s0.status[SV_WRITE], s1.status[SV_WRITE], n);
    f[F_ROWS_UPDATED] = count_per(s0.status[SV_UPDATE], s1.status[SV_UPDATE], n);
    f[F_ROWS_DELETED] = count_per(s0.status[SV_DELETE], s1.status[SV_DELETE], n);
    f[F_KEY_READS] = count_per(s0.status[SV_READ_KEY], s1.status[SV_READ_KEY], n);
    f[F_NEXT_READS] = count_per(s0.status[SV_READ_NEXT], s1.status[SV_READ_NEXT], n);
    f[F_REDO_KB] = count_per(s0.status[SV_REDO], s1.status[SV_REDO], n) / 1024.0;
out:
    txo_free(lat);
    txo_free(l);
    return rc;
}

/* Paced arrivals at `rate` orders/s for HTTP_HALF_LOAD_S, after the `before` orders of the
 * load phase (their rows have ids up to after_order / after_event). */
/*
 * The relay's own publish delays: the cumulative buckets of txo_outbox_publish_delay_seconds
 * on txo up's GET /metrics, summed over aggregate types (every event type of the order
 * service, not only OrderCreated). Where the binlog source writes no published_at, this is
 * commit->publish measured where the publish happens.
 */
#define DELAY_BUCKETS_MAX 32
struct delay_hist {
    double le[DELAY_BUCKETS_MAX]; /* upper bounds, seconds (INFINITY for +Inf) */
    double count[DELAY_BUCKETS_MAX];
    size_t n;
};

static int scrape_delays(unsigned port, struct delay_hist *d)
{
    memset(d, 0, sizeof(*d));
    struct txo_http_client *client = NULL;
    struct txo_http_client_response resp;
    struct txo_error err;
    txo_http_client_response_init(&resp);
    txo_error_init(&err);
    int rc = local_client(&client, &err);
    if (rc < 0)
        return rc;
    char url[96];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/metrics", port);
    if (rc == 0)
        rc = txo_http_get(client, url, NULL, &resp, &err);
    if (rc == 0 && resp.status != 200)
        rc = txo_error_set(&err, TXO_EIO, "GET /metrics: status %ld", resp.status);
    static const char name[] = "txo_outbox_publish_delay_seconds_bucket{";
    for (const char *line = resp.body; rc == 0 && line != NULL && *line != '\0';) {
        const char *end = strchr(line, '\n');
        if (strncmp(line, name, sizeof(name) - 1) == 0) {
            const char *le = strstr(line, "le=\"");
            const char *close = le != NULL ? strchr(le, '}') : NULL;
            if (le != NULL && close != NULL && (end == NULL || close < end)) {
                double bound = strncmp(le + 4, "+Inf", 4) == 0 ? INFINITY : strtod(le + 4, NULL);
                double v = strtod(close + 1, NULL);
                size_t k = 0;
                while (k < d->n && d->le[k] != bound)
                    k++;
                if (k == d->n && d->n < DELAY_BUCKETS_MAX)
                    d->le[d->n++] = bound;
                if (k < d->n)
                    d->count[k] += v;
            }
        }
        line = end != NULL ? end + 1 : NULL;
    }
    txo_http_client_response_release(&resp);
    txo_http_client_free(client);
    return rc < 0 ? bench_fail(rc, &err, "reading the publish delays from txo up") : 0;
}

/* The q-th percentile (ms) of what was observed between a and b, interpolated within the
 * bucket it falls in; -1 when nothing was. */
static double delay_percentile(const struct delay_hist *a, const struct delay_hist *b, double q)
{
    double total = 0;
    for (size_t k = 0; k < b->n; k++)
        if (isinf(b->le[k]))
            total = b->count[k] - (k < a->n ? a->count[k] : 0);
    if (total <= 0)
        return -1;
    double want = q / 100.0 * total, prev_le = 0, prev_c = 0;
    for (size_t k = 0; k < b->n; k++) { /* the buckets come in ascending order */
        double c = b->count[k] - (k < a->n ? a->count[k] : 0);
        if (c >= want) {
            if (isinf(b->le[k]))
                return prev_le * 1000.0;
            double f = c > prev_c ? (want - prev_c) / (c - prev_c) : 1.0;
            return (prev_le + f * (b->le[k] - prev_le)) * 1000.0;
        }
        prev_le = b->le[k];
        prev_c = c;
    }
    return -1;
}

static int phase_half(struct http_run *h, unsigned port, double rate, size_t before)
{
    int64_t after_order = 0, after_event = 0;
    int rc = bench_query_i64(h->db, HTTP_SQL_MAX_ORDER, NULL, 0, &after_order);
    if (rc == 0)
        rc = bench_query_i64(h->db, HTTP_SQL_MAX_EVENT, NULL, 0, &after_event);
    if (rc < 0)
        return rc;
    size_t n = (size_t)(rate * HTTP_HALF_LOAD_S + 0.5);
    if (n < 1)
        n = 1;
    struct http_load *l = txo_calloc(1, sizeof(*l));
    double *lat = txo_calloc(n, sizeof(double));
    if (l == NULL || lat == NULL) {
        rc = bench_fail(TXO_ENOMEM, NULL, "allocating the paced load");
        goto out;
    }
    snprintf(l->url, sizeof(l->url), "http://127.0.0.1:%u/orders", port);
    snprintf(l->key_prefix, sizeof(l->key_prefix), "bench-%ld-%u-half", (long)getpid(), h->run);
    l->n = n;
    l->connections = h->cfg->http_connections;
    l->rate = rate;
    l->lat_ms = lat;
    double t_last = 0.0;
    struct delay_hist d0, d1;
    rc = scrape_delays(port, &d0);
    if (rc == 0)
        rc = run_load(l, &t_last);
    if (rc == 0)
        rc = wait_confirmed(h->db, &h->txo, after_order, n);
    if (rc == 0)
        rc = wait_drained(h->db, &h->txo);
    if (rc == 0)
        rc = scrape_delays(port, &d1);
    int64_t last_us = 0;
    if (rc == 0)
        rc = query_i64_after(h->db, HTTP_SQL_LAST_CONFIRMED_US, after_order, &last_us);
    if (rc < 0)
        goto out;
    double *f = h->fig;
    double span_s = (double)(last_us - l->t0_wall_us) / 1e6;
    f[F_HALF_RATE] = rate;
    f[F_HALF_DONE] = span_s > 0 ? (double)n / span_s : 0.0;
    f[F_HALF_POST_P99] = bench_percentile(lat, n, 99.0);
    f[F_HALF_LATE] = 100.0 * (double)atomic_load(&l->late) / (double)n;
    size_t count = 0;
    rc = sql_percentiles(h->db, HTTP_SQL_PUBLISH_US, after_event, &f[F_HALF_CP_P50],
                         &f[F_HALF_CP_P99], &count);
    f[F_HALF_RELAY_P50] = delay_percentile(&d0, &d1, 50.0);
    f[F_HALF_RELAY_P99] = delay_percentile(&d0, &d1, 99.0);
    if (rc == 0)
        rc = sql_percentiles(h->db, HTTP_SQL_CONSUME_US, after_event, &f[F_HALF_CC_P50],
                             &f[F_HALF_CC_P99], &count);
    if (rc == 0)
        rc = sql_percentiles(h->db, HTTP_SQL_CONFIRM_US, after_order, &f[F_HALF_PC_P50],
                             &f[F_HALF_PC_P99], &count);
    if (rc == 0)
        rc = verify_run(h->db, (int64_t)(before + n));
out:
    txo_free(lat);
    txo_free(l);
    return rc;
}

static int run_once(struct http_run *h)
{
    int rc = 0;
    snprintf(h->dir, sizeof(h->dir), "/tmp/txo_bench_http_XXXXXX");
    if (mkdtemp(h->dir) == NULL) {
        fprintf(stderr, "txo_bench: mkdtemp: %s\n", strerror(errno));
        h->dir[0] = '\0';
        return TXO_EIO;
    }
    rc = fresh_database(h);
    if (rc < 0)
        goto out;
    if (h->broker != NULL) {
        rc = start_broker(h);
        if (rc < 0)
            goto out;
    }
    unsigned port = free_port();
    if (port == 0) {
        rc = bench_fail(TXO_EIO, NULL, "finding a free port for txo up");
        goto out;
    }
    rc = start_txo(h, port);
    if (rc < 0)
        goto out;
    rc = phase_load(h, port, h->cfg->http_orders);
    if (rc < 0)
        goto out;
    rc = phase_half(h, port, h->fig[F_E2E_RATE] / 2.0, h->cfg->http_orders);
    if (rc < 0)
        goto out;
    fprintf(stderr,
            "  run %u (%s): accepted %.0f/s, end to end %.0f/s, commit->consumed p99 %.1f ms; "
            "half load %.0f/s: commit->consumed p99 %.1f ms, POST->CONFIRMED p99 %.1f ms\n",
            h->run + 1, h->broker != NULL ? h->broker : "local", h->fig[F_HTTP_RATE],
            h->fig[F_E2E_RATE], h->fig[F_CC_P99], h->fig[F_HALF_RATE], h->fig[F_HALF_CC_P99],
            h->fig[F_HALF_PC_P99]);
out:
    if (h->txo.pid > 0) {
        bool clean = child_stop(&h->txo, SIGTERM, HTTP_STOP_MS);
        if (!clean) {
            fprintf(stderr, "txo_bench: ERROR: txo up did not exit 0 on SIGTERM (status %d)\n",
                    h->txo.status);
            child_print_log(&h->txo, "txo up");
            if (rc == 0)
                rc = TXO_ESTATE;
        }
    }
    if (h->txo.log_path[0] != '\0')
        report_log_levels(&h->txo);
    if (h->broker_up)
        (void)broker_script(h, "stop");
    strv_release(&h->broker_flags);
    txo_db_close(h->db);
    h->db = NULL;
    if (!h->cfg->keep) {
        char sql[160];
        snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS `%s`", h->db_name);
        if (h->db_name[0] != '\0')
            (void)bench_exec_raw(h->env->db, sql);
        remove_tree(h->dir);
    } else {
        printf("kept database %s and logs in %s\n", h->db_name, h->dir);
    }
    return rc;
}

/* ---- the table ---- */

/* v with `decimals` decimals, or "-" when unknown (< 0). Returns buf. */
static const char *num(char *buf, size_t size, double v, int decimals)
{
    if (v < 0)
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, "%.*f", decimals, v);
    return buf;
}

int bench_http(struct bench_env *env, const struct bench_cfg *cfg, const char *broker)
{
    char txo_path[PATH_MAX];
    const char *label = broker != NULL ? broker : "local";
    if (cfg->txo_path != NULL)
        snprintf(txo_path, sizeof(txo_path), "%s", cfg->txo_path);
    else if (!default_txo_path(txo_path, sizeof(txo_path)))
        txo_path[0] = '\0';
    if (!executable(txo_path)) {
        fprintf(stderr, "txo_bench: no txo binary at '%s' (build it, or pass --txo PATH)\n",
                txo_path);
        return TXO_ECONFIG;
    }
    unsigned runs = cfg->runs;
    double *v = txo_calloc((size_t)runs * F_N, sizeof(double));
    if (v == NULL)
        return bench_fail(TXO_ENOMEM, NULL, "allocating results");
    pid_t db_pid = server_pid(env->db);

    printf("== HTTP API end to end: txo up --broker %s, %u connections, %zu orders, medians of "
           "%u runs ==\n",
           label, cfg->http_connections, cfg->http_orders, runs);
    printf("   (target: >= 1,000 orders/s end to end; commit->publish p99 <= 50 ms at half that "
           "load)\n");
    printf("   txo: %s%s%s\n", txo_path, cfg->up_args ? "  up args: " : "",
           cfg->up_args ? cfg->up_args : "");
    fflush(stdout);

    int rc = 0;
    for (unsigned r = 0; r < runs; r++) {
        struct http_run h = {.env = env,
                             .cfg = cfg,
                             .broker = broker,
                             .run = r,
                             .txo_path = txo_path,
                             .db_pid = db_pid};
        rc = run_once(&h);
        if (rc < 0)
            goto out;
        for (size_t k = 0; k < F_N; k++)
            v[k * runs + r] = h.fig[k];
    }
    double m[F_N];
    for (size_t k = 0; k < F_N; k++)
        m[k] = bench_median(v + k * runs, runs);

    /* Latencies in ms: POST as the client saw it; from SQL, c->p commit -> published_at,
     * c->c commit -> inbox row of the worker, P->C order created_at -> CONFIRMED. */
    printf("load    %5s %7s %8s %6s %8s %8s %8s %8s %8s %8s %8s %8s\n", "conns", "orders",
           "accept/s", "e2e/s", "POST p50", "POST p99", "c->p p50", "c->p p99", "c->c p50",
           "c->c p99", "P->C p50", "P->C p99");
    char cp[4][24];
    printf("%-7s %5u %7zu %8.0f %6.0f %8.1f %8.1f %8s %8s %8.1f %8.1f %8.1f %8.1f\n", label,
           cfg->http_connections, cfg->http_orders, m[F_HTTP_RATE], m[F_E2E_RATE], m[F_POST_P50],
           m[F_POST_P99], num(cp[0], sizeof(cp[0]), m[F_CP_P50], 1),
           num(cp[1], sizeof(cp[1]), m[F_CP_P99], 1), m[F_CC_P50], m[F_CC_P99], m[F_PC_P50],
           m[F_PC_P99]);
    printf("half    %5s %7s %8s %6s %8s %8s %8s %8s %8s %8s %8s %8s\n", "late%", "", "offer/s",
           "done/s", "", "POST p99", "c->p p50", "c->p p99", "c->c p50", "c->c p99", "P->C p50",
           "P->C p99");
    printf("%-7s %5.1f %7s %8.0f %6.0f %8s %8.1f %8s %8s %8.1f %8.1f %8.1f %8.1f\n", label,
           m[F_HALF_LATE], "", m[F_HALF_RATE], m[F_HALF_DONE], "", m[F_HALF_POST_P99],
           num(cp[2], sizeof(cp[2]), m[F_HALF_CP_P50], 1),
           num(cp[3], sizeof(cp[3]), m[F_HALF_CP_P99], 1), m[F_HALF_CC_P50], m[F_HALF_CC_P99],
           m[F_HALF_PC_P50], m[F_HALF_PC_P99]);
    printf("   half load, commit->publish as the relay measures it (its publish-delay histogram, "
           "every event type, interpolated in its buckets): p50 %s ms, p99 %s ms\n",
           num(cp[0], sizeof(cp[0]), m[F_HALF_RELAY_P50], 1),
           num(cp[1], sizeof(cp[1]), m[F_HALF_RELAY_P99], 1));
    printf("   POST retries %.0f; the relay finished %.1f s after the last confirmation (the "
           "later saga events)\n",
           m[F_RETRIES], m[F_TAIL_S]);
    printf("   where the time goes in the load phase, per order (server counters are "
           "server-wide):\n");
    printf("   CPU ms: %8s %8s %8s %8s %8s %6s\n", "txo", "mariadbd", "broker", "bench", "other",
           "busy%");
    char b[14][24];
    printf("           %8s %8s %8s %8s %8s %6s\n", num(b[0], sizeof(b[0]), m[F_CPU_TXO], 2),
           num(b[1], sizeof(b[1]), m[F_CPU_DB], 2), num(b[2], sizeof(b[2]), m[F_CPU_BROKER], 2),
           num(b[3], sizeof(b[3]), m[F_CPU_BENCH], 2), num(b[4], sizeof(b[4]), m[F_CPU_OTHER], 2),
           num(b[5], sizeof(b[5]), m[F_BUSY], 0));
    printf("   server: %10s %9s %9s %8s %9s %7s %7s %9s\n", "statements", "executes", "prepares",
           "commits", "hcommits", "syncs", "events", "idle q/s");
    printf("           %10s %9s %9s %8s %9s %7s %7s %9s\n",
           num(b[6], sizeof(b[6]), m[F_QUESTIONS], 1), num(b[7], sizeof(b[7]), m[F_EXECUTES], 1),
           num(b[8], sizeof(b[8]), m[F_PREPARES], 2), num(b[9], sizeof(b[9]), m[F_COMMITS], 1),
           num(b[10], sizeof(b[10]), m[F_HCOMMITS], 1), num(b[11], sizeof(b[11]), m[F_SYNCS], 2),
           num(b[12], sizeof(b[12]), m[F_EVENTS], 1), num(b[13], sizeof(b[13]), m[F_IDLE_QPS], 0));
    printf("   rows:   %10s %9s %9s %8s %9s %7s\n", "written", "updated", "deleted", "key rd",
           "next rd", "redo KB");
    printf("           %10s %9s %9s %8s %9s %7s\n", num(b[0], sizeof(b[0]), m[F_ROWS_WRITTEN], 1),
           num(b[1], sizeof(b[1]), m[F_ROWS_UPDATED], 1),
           num(b[2], sizeof(b[2]), m[F_ROWS_DELETED], 1),
           num(b[3], sizeof(b[3]), m[F_KEY_READS], 1), num(b[4], sizeof(b[4]), m[F_NEXT_READS], 1),
           num(b[5], sizeof(b[5]), m[F_REDO_KB], 1));
    printf("\n");
    fflush(stdout);
out:
    txo_free(v);
    return rc;
}
