/*
 * The process families every Prometheus client library exports, and txo_build_info
 * (include/txo/metrics.h: txo_metrics_add_process), read from procfs at each scrape:
 *
 *   process_cpu_seconds_total       /proc/self/stat utime + stime, in clock ticks
 *   process_virtual_memory_bytes    /proc/self/stat vsize
 *   process_resident_memory_bytes   /proc/self/stat rss, in pages
 *   process_start_time_seconds      /proc/stat btime + /proc/self/stat starttime, in ticks
 *   process_open_fds                the entries of /proc/self/fd
 *   process_max_fds                 RLIMIT_NOFILE's soft limit
 *   txo_build_info{version,revision} 1, from txo/features.h and the build's git revision
 *
 * The collector keeps no state of its own: it looks its families up by name at each scrape
 * (registering an existing family returns it) and moves the CPU counter up by what it lacks.
 */
#include "core/common.h"

#include <dirent.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

#include "revision.h"
#include "txo/features.h"
#include "txo/metrics.h"

struct proc_stat {
    double cpu_s;
    double start_s; /* since the epoch */
    double vsize;
    double rss;
};

/* The boot time from /proc/stat's btime line; 0 when it cannot be read. */
static long long boot_time(void)
{
    FILE *f = fopen("/proc/stat", "re");
    if (f == NULL)
        return 0;
    char line[256];
    long long btime = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "btime %lld", &btime) == 1)
            break;
    fclose(f);
    return btime;
}

static int read_stat(struct proc_stat *ps, struct txo_error *err)
{
    FILE *f = fopen("/proc/self/stat", "re");
    if (f == NULL)
        return txo_error_set(err, TXO_EIO, "process metrics: /proc/self/stat: %s", strerror(errno));
    char buf[1024];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name in parentheses may hold anything: the fields start after the last ')'. */
    const char *p = strrchr(buf, ')');
    unsigned long long utime, stime, starttime, vsize;
    long long rss;
    /* Fields 3 (state) .. 24 (rss); 14 utime, 15 stime, 22 starttime, 23 vsize. */
    if (p == NULL ||
        sscanf(p + 1,
               " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d "
               "%llu %llu %lld",
               &utime, &stime, &starttime, &vsize, &rss) != 5)
        return txo_error_set(err, TXO_EIO, "process metrics: cannot read /proc/self/stat");
    double ticks = (double)sysconf(_SC_CLK_TCK);
    ps->cpu_s = (double)(utime + stime) / ticks;
    ps->start_s = (double)boot_time() + (double)starttime / ticks;
    ps->vsize = (double)vsize;
    ps->rss = (double)rss * (double)sysconf(_SC_PAGESIZE);
    return 0;
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory stream's own descriptor */
}

static struct txo_metric *gauge(struct txo_metrics *reg, const char *name, const char *help,
                                int *rc, struct txo_error *err)
{
    return txo_metrics_register_chained(reg, TXO_METRIC_GAUGE, name, help, 0, NULL, rc, err);
}

static int collect_process(void *arg, struct txo_metrics *reg, struct txo_error *err)
{
    (void)arg;
    int rc = 0;
    struct txo_metric *cpu = txo_metrics_register_chained(
        reg, TXO_METRIC_COUNTER, "process_cpu_seconds_total",
        "Total user and system CPU time spent in seconds.", 0, NULL, &rc, err);
    struct txo_metric *vmem =
        gauge(reg, "process_virtual_memory_bytes", "Virtual memory size in bytes.", &rc, err);
    struct txo_metric *rss =
        gauge(reg, "process_resident_memory_bytes", "Resident memory size in bytes.", &rc, err);
    struct txo_metric *start =
        gauge(reg, "process_start_time_seconds",
              "Start time of the process since unix epoch in seconds.", &rc, err);
    struct txo_metric *fds =
        gauge(reg, "process_open_fds", "Number of open file descriptors.", &rc, err);
    struct txo_metric *max_fds =
        gauge(reg, "process_max_fds", "Maximum number of open file descriptors.", &rc, err);
    if (rc < 0)
        return rc;
    struct proc_stat ps;
    rc = read_stat(&ps, err);
    if (rc < 0)
        return rc;
    double have = txo_metric_value(cpu, NULL);
    if (ps.cpu_s > have)
        txo_metric_add(cpu, NULL, ps.cpu_s - have);
    txo_metric_set(vmem, NULL, ps.vsize);
    txo_metric_set(rss, NULL, ps.rss);
    txo_metric_set(start, NULL, ps.start_s);
    int n = open_fds();
    if (n >= 0)
        txo_metric_set(fds, NULL, (double)n);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        txo_metric_set(max_fds, NULL, (double)rl.rlim_cur);
    return 0;
}

int txo_metrics_add_process(struct txo_metrics *reg, struct txo_error *err)
{
    static const char *const names[] = {"version", "revision"};
    static const char *const values[] = {TXO_VERSION, TXO_REVISION};
    struct txo_metric *info = txo_metrics_register(
        reg, TXO_METRIC_GAUGE, "txo_build_info",
        "1, labelled with the version of libtxo and the git revision it was built from.", 2, names,
        NULL, 0, err);
    if (info == NULL)
        return err != NULL && err->code != 0 ? err->code : TXO_ENOMEM;
    txo_metric_set(info, values, 1);
    /* The first scrape registers the process families; a failure shows here, not then. */
    int rc = collect_process(NULL, reg, err);
    if (rc < 0)
        return rc;
    return txo_metrics_add_collector(reg, collect_process, NULL, err);
}
