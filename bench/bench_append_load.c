/*
 * txo_bench append-load: a steady stream of appends into an existing outbox, with the latency
 * of each, for scripts that measure what something else running at the same time (a retention
 * pass, a layout change) costs the application's writers (bench/partition_retention.sh).
 *
 * It works in the database MYSQL_DATABASE names, as it is: nothing is created, migrated or
 * dropped. Each of --writers threads has its own connection and appends one event per
 * transaction (txo_outbox_append() in txo_db_transact(), READ COMMITTED, a ~--payload-bytes
 * JSON payload, keys "<tag>:<writer>:<i>", --aggregates aggregates per writer) on a fixed
 * schedule: --rate appends/s in all, each writer's evenly spaced. The schedule does not wait
 * for a slow append (open loop): an append that starts late because the one before it stalled
 * counts its lateness, so a stall of the server weighs on every append it held up, as it does
 * on an application's requests.
 *
 * Phases: SIGUSR1 starts the next one (phase 0 runs from the start), SIGTERM or SIGINT (or
 * --duration seconds) stops. Each append counts in the phase it was scheduled in. At the end
 * one line per phase on stdout, key=value:
 *   phase=K seconds=S appends=N errors=E per_s=R p50_ms= p99_ms= max_ms= sched_p99_ms=
 *   sched_max_ms=
 * p50/p99/max: the append's own time, from its call to the commit; sched_*: from the time it
 * was scheduled to the commit. "ready" is printed (and flushed) once every writer is connected.
 *
 * Thread-safety: the writers share only the phase and stop flags (atomics); each writer's
 * samples are its own until the main thread joins it.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define LOAD_PHASES      8
#define LOAD_WRITERS_MAX 64
#define LOAD_PAYLOAD_MAX 16384

struct load_cfg {
    double rate;          /* appends per second, all writers together */
    unsigned writers;     /* threads, a connection each */
    unsigned duration_s;  /* 0: until SIGTERM/SIGINT */
    size_t payload_bytes; /* about this many bytes of JSON per event */
    unsigned aggregates;  /* per writer */
    char tag[48];         /* idempotency keys and aggregate ids start with it */
};

/* A growing array of latencies, milliseconds. */
struct samples {
    double *v;
    size_t n, cap;
};

struct writer {
    const struct bench_env *env;
    const struct load_cfg *cfg;
    unsigned index;
    double start_s; /* the schedule's origin, shared by all writers */
    struct samples own[LOAD_PHASES], sched[LOAD_PHASES];
    uint64_t errors[LOAD_PHASES];
    bool connected;
    int rc; /* < 0: the writer could not run (connect, out of memory) */
    pthread_t tid;
};

static atomic_int phase_now;
static atomic_bool stopping;
static atomic_uint writers_ready;

static int samples_add(struct samples *s, double ms)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 4096;
        double *v = txo_realloc(s->v, cap * sizeof(*v));
        if (v == NULL)
            return TXO_ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = ms;
    return 0;
}

static void sleep_until(double t_s)
{
    struct timespec ts = {.tv_sec = (time_t)t_s,
                          .tv_nsec = (long)((t_s - (double)(time_t)t_s) * 1e9)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

struct load_tx {
    const struct writer *w;
    uint64_t i;
    const char *payload;
};

static int load_tx(struct txo_tx *tx, void *arg, struct txo_error *err)
{
    const struct load_tx *t = arg;
    char key[96], agg[80];
    snprintf(key, sizeof(key), "%s:%u:%llu", t->w->cfg->tag, t->w->index, (unsigned long long)t->i);
    snprintf(agg, sizeof(agg), "%s-%u-%llu", t->w->cfg->tag, t->w->index,
             (unsigned long long)(t->i % t->w->cfg->aggregates));
    struct txo_outbox_event ev = {.aggregate_type = "order",
                                  .aggregate_id = agg,
                                  .event_type = "OrderUpdated",
                                  .payload_json = t->payload,
                                  .idempotency_key = key};
    return txo_outbox_append(tx, &ev, 0, NULL, NULL, err);
}

/* A JSON object of about n bytes: {"note":"<n - 11 x characters>"}. Free with txo_free(). */
static char *make_payload(size_t n)
{
    static const char head[] = "{\"note\":\"", tail[] = "\"}";
    size_t fill = n > sizeof(head) + sizeof(tail) ? n - (sizeof(head) + sizeof(tail) - 2) : 1;
    char *p = txo_malloc(sizeof(head) + fill + sizeof(tail));
    if (p == NULL)
        return NULL;
    memcpy(p, head, sizeof(head) - 1);
    memset(p + sizeof(head) - 1, 'x', fill);
    memcpy(p + sizeof(head) - 1 + fill, tail, sizeof(tail));
    return p;
}

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    struct txo_db *db = NULL;
    char *payload = make_payload(w->cfg->payload_bytes);
    w->rc = payload == NULL ? TXO_ENOMEM : bench_connect(w->env, &db);
    w->connected = w->rc == 0;
    atomic_fetch_add(&writers_ready, 1);
    double interval = (double)w->cfg->writers / w->cfg->rate;
    /* The writers take turns: writer k starts k/writers of an interval after the origin. */
    double next = w->start_s + interval * (double)w->index / (double)w->cfg->writers;
    bool reported = false;
    for (uint64_t i = 0; w->rc == 0 && !atomic_load(&stopping); i++, next += interval) {
        if (bench_now_s() < next)
            sleep_until(next);
        if (atomic_load(&stopping))
            break;
        int phase = atomic_load(&phase_now);
        double t0 = bench_now_s();
        struct load_tx t = {.w = w, .i = i, .payload = payload};
        struct txo_error err;
        txo_error_init(&err);
        int rc = txo_db_transact(db, TXO_ISO_READ_COMMITTED, load_tx, &t, &err);
        double t1 = bench_now_s();
        if (rc != 0) {
            w->errors[phase]++;
            if (!reported) /* once per writer: the figures say how many */
                fprintf(stderr, "txo_bench append-load: writer %u: %s (%s)\n", w->index, err.msg,
                        txo_err_name(rc));
            reported = true;
            continue;
        }
        w->rc = samples_add(&w->own[phase], (t1 - t0) * 1e3);
        if (w->rc == 0)
            w->rc = samples_add(&w->sched[phase], (t1 - (next > t0 ? t0 : next)) * 1e3);
    }
    txo_db_close(db);
    txo_free(payload);
    return NULL;
}

/* Everything the writers recorded in one phase, merged (the writers have stopped). */
static int merge_phase(struct writer *w, unsigned n, int phase, struct samples *own,
                       struct samples *sched, uint64_t *errors)
{
    *errors = 0;
    for (unsigned k = 0; k < n; k++) {
        *errors += w[k].errors[phase];
        for (size_t i = 0; i < w[k].own[phase].n; i++)
            if (samples_add(own, w[k].own[phase].v[i]) < 0)
                return TXO_ENOMEM;
        for (size_t i = 0; i < w[k].sched[phase].n; i++)
            if (samples_add(sched, w[k].sched[phase].v[i]) < 0)
                return TXO_ENOMEM;
    }
    return 0;
}

static double max_of(const struct samples *s)
{
    double m = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i] > m)
            m = s->v[i];
    return m;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: txo_bench append-load [--rate R] [--writers W] [--duration S]\n"
            "                             [--payload-bytes B] [--aggregates A] [--tag T]\n"
            "\n"
            "Appends to the outbox of MYSQL_DATABASE (as it is: nothing created or dropped)\n"
            "at R appends/s (default 200) from W writers (default 4), one transaction per\n"
            "append, on a fixed schedule, until SIGTERM/SIGINT or S seconds (default 0: no\n"
            "limit). SIGUSR1 starts the next phase. Prints \"ready\" once connected, and at the\n"
            "end one line per phase: appends, errors and latency (p50/p99/max of the append,\n"
            "p99/max from its scheduled time), milliseconds.\n"
            "  --payload-bytes B  JSON payload size (default 300)\n"
            "  --aggregates A     aggregates per writer (default 100)\n"
            "  --tag T            key and aggregate prefix (default load<pid>)\n");
}

static int parse_num(const char *flag, const char *s, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double v = s != NULL ? strtod(s, &end) : 0;
    if (s == NULL || errno != 0 || end == s || *end != '\0' || v < min || v > max) {
        fprintf(stderr, "txo_bench append-load: %s needs a number %g..%g, got '%s'\n", flag, min,
                max, s != NULL ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, struct load_cfg *cfg)
{
    *cfg = (struct load_cfg){
        .rate = 200, .writers = 4, .duration_s = 0, .payload_bytes = 300, .aggregates = 100};
    snprintf(cfg->tag, sizeof(cfg->tag), "load%ld", (long)getpid());
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 1;
        } else if (strcmp(a, "--rate") == 0) {
            if (parse_num(a, v, 0.1, 1e6, &d) < 0)
                return -1;
            cfg->rate = d;
        } else if (strcmp(a, "--writers") == 0) {
            if (parse_num(a, v, 1, LOAD_WRITERS_MAX, &d) < 0)
                return -1;
            cfg->writers = (unsigned)d;
        } else if (strcmp(a, "--duration") == 0) {
            if (parse_num(a, v, 0, 86400, &d) < 0)
                return -1;
            cfg->duration_s = (unsigned)d;
        } else if (strcmp(a, "--payload-bytes") == 0) {
            if (parse_num(a, v, 16, LOAD_PAYLOAD_MAX, &d) < 0)
                return -1;
            cfg->payload_bytes = (size_t)d;
        } else if (strcmp(a, "--aggregates") == 0) {
            if (parse_num(a, v, 1, 1e9, &d) < 0)
                return -1;
            cfg->aggregates = (unsigned)d;
        } else if (strcmp(a, "--tag") == 0) {
            if (v == NULL || v[0] == '\0' || strlen(v) >= sizeof(cfg->tag)) {
                fprintf(stderr, "txo_bench append-load: --tag needs 1..%zu characters\n",
                        sizeof(cfg->tag) - 1);
                return -1;
            }
            snprintf(cfg->tag, sizeof(cfg->tag), "%s", v);
        } else {
            fprintf(stderr, "txo_bench append-load: unknown argument '%s'\n\n", a);
            usage(stderr);
            return -1;
        }
    }
    return 0;
}

/* Waits for the signals that drive the phases; returns at the stop. phase_start_s[k] gets the
 * start of each phase entered, *phases how many. */
static void drive_phases(const struct load_cfg *cfg, const sigset_t *set, double *phase_start_s,
                         int *phases)
{
    double end_s = cfg->duration_s > 0 ? phase_start_s[0] + cfg->duration_s : 0;
    for (;;) {
        struct timespec tick = {.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};
        int sig = sigtimedwait(set, NULL, &tick);
        if (sig == SIGUSR1 && *phases < LOAD_PHASES) {
            phase_start_s[(*phases)++] = bench_now_s();
            atomic_store(&phase_now, *phases - 1);
        } else if (sig == SIGTERM || sig == SIGINT) {
            return;
        }
        if (end_s > 0 && bench_now_s() >= end_s)
            return;
    }
}

int bench_append_load_main(int argc, char **argv)
{
    struct load_cfg cfg;
    int r = parse_args(argc, argv, &cfg);
    if (r != 0)
        return r > 0 ? 0 : 2;

    /* The writers inherit the mask: only the main thread takes these signals. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    struct bench_env env;
    int rc = bench_env_attach(&env);
    if (rc < 0)
        return 1;
    struct writer *w = txo_calloc(cfg.writers, sizeof(*w));
    if (w == NULL) {
        bench_env_teardown(&env, true);
        return 1;
    }
    double phase_start_s[LOAD_PHASES] = {0};
    int phases = 1;
    double origin = bench_now_s() + 0.5; /* time for every writer to connect */
    unsigned started = 0;
    for (; started < cfg.writers; started++) {
        w[started] = (struct writer){.env = &env, .cfg = &cfg, .index = started, .start_s = origin};
        if (pthread_create(&w[started].tid, NULL, writer_main, &w[started]) != 0) {
            fprintf(stderr, "txo_bench append-load: cannot start writer %u\n", started);
            atomic_store(&stopping, true);
            break;
        }
    }
    while (atomic_load(&writers_ready) < started)
        txo_sleep_ms(10);
    bool all_connected = started == cfg.writers;
    for (unsigned k = 0; k < started; k++)
        all_connected = all_connected && w[k].connected;
    if (all_connected) {
        if (bench_now_s() < origin)
            sleep_until(origin);
        printf("ready writers=%u rate=%g payload_bytes=%zu\n", cfg.writers, cfg.rate,
               cfg.payload_bytes);
        fflush(stdout);
        phase_start_s[0] = bench_now_s();
        drive_phases(&cfg, &set, phase_start_s, &phases);
    }
    double end_s = bench_now_s();
    atomic_store(&stopping, true);
    rc = all_connected ? 0 : TXO_ECONNECT;
    for (unsigned k = 0; k < started; k++) {
        pthread_join(w[k].tid, NULL);
        if (w[k].rc < 0 && rc == 0)
            rc = w[k].rc;
    }
    for (int p = 0; rc == 0 && p < phases; p++) {
        struct samples own = {0}, sched = {0};
        uint64_t errors = 0;
        rc = merge_phase(w, started, p, &own, &sched, &errors);
        double secs = (p + 1 < phases ? phase_start_s[p + 1] : end_s) - phase_start_s[p];
        if (rc == 0)
            printf("phase=%d seconds=%.2f appends=%zu errors=%llu per_s=%.1f p50_ms=%.2f "
                   "p99_ms=%.2f max_ms=%.2f sched_p99_ms=%.2f sched_max_ms=%.2f\n",
                   p, secs, own.n, (unsigned long long)errors,
                   secs > 0 ? (double)own.n / secs : 0.0, bench_percentile(own.v, own.n, 50),
                   bench_percentile(own.v, own.n, 99), max_of(&own),
                   bench_percentile(sched.v, sched.n, 99), max_of(&sched));
        txo_free(own.v);
        txo_free(sched.v);
    }
    for (unsigned k = 0; k < started; k++)
        for (int p = 0; p < LOAD_PHASES; p++) {
            txo_free(w[k].own[p].v);
            txo_free(w[k].sched[p].v);
        }
    txo_free(w);
    bench_env_teardown(&env, true);
    if (rc < 0) {
        fprintf(stderr, "txo_bench append-load: FAILED (%s)\n", txo_err_name(rc));
        return 1;
    }
    return 0;
}
